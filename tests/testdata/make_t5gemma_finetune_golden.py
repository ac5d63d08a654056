"""Writes the T5Gemma fine-tuning golden (tests/testdata/hf_t5gemma/finetune_golden.json):
transformers' loss of a 2 + 2-layer tiny checkpoint (hf_t5gemma/tiny_2x2: the tiny one with
its encoder's third layer dropped) on eight (inputs, targets) pairs, framed as transformers
frames them; needs torch + transformers, run as make_t5gemma_decode_golden.py
is (its docstring), after it (it reads the tiny checkpoint's tokenizer.model).

    python -c "import sys, runpy; sys.path.append('/tmp/tfvenv/lib/python3.11/site-packages'); \
      runpy.run_path('tests/testdata/make_t5gemma_finetune_golden.py', run_name='__main__')"

transformers' GemmaTokenizer gives the inputs (<bos> + pieces, no EOS: `input_ids`) and the
targets' pieces; the labels are the pieces + <eos> 1, and the model derives its decoder
inputs from them (`_shift_right`: the decoder's bos_token_id 2, then the labels). The loss is
`T5GemmaForConditionalGeneration(input_ids, attention_mask, labels).loss` of the padded
batch (labels padded with -100: the mean over every target token), and each pair's summed
negative log-likelihood. The encoder's window is read as in make_t5gemma_golden.py
(`original_model`). The script then checks lm against the golden (lm.data.converters with
T5Gemma's framing, the restored model) and stops on a mismatch. The tests read only the file.
"""
from __future__ import annotations

import json
import os
import shutil
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import jax  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from lm import restore, score  # noqa: E402
from lm.data import converters, packing  # noqa: E402
from make_t5gemma_decode_golden import OUT, TINY  # noqa: E402

# The tiny checkpoint with its encoder's third layer dropped: 2 + 2 layers, which a config's
# one num_layers can express, so that lm's trainer can fine-tune it (ckpt.init_from).
BALANCED = os.path.join(OUT, "tiny_2x2")

# eight pairs: one fine-tuning batch of the test mesh's 8 batch shards, one pair per row
PAIRS = [("the cat sat on a mat", "birds sang"),
         ("a quiet river bank near the barn", "the dog ran to the red barn"),
         ("birds sang", "tall green trees"),
         ("the red barn", "a cat"),
         ("the dog ran to the river while birds sang", "near the bank"),
         ("green", "the tall trees near a quiet river"),
         ("a mat and a dog", "the cat sat"),
         ("birds sang in tall green trees near the barn", "red")]


def write_balanced() -> None:
  """hf_t5gemma/tiny_2x2: tiny's config, tensors and tokenizer less encoder layer 2."""
  from safetensors.numpy import load_file, save_file
  os.makedirs(BALANCED, exist_ok=True)
  with open(os.path.join(TINY, "config.json")) as f:
    config = json.load(f)
  enc = config["encoder"]
  enc["num_hidden_layers"], enc["layer_types"] = 2, enc["layer_types"][:2]
  with open(os.path.join(BALANCED, "config.json"), "w") as f:
    json.dump(config, f, indent=2)
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  save_file({k: v for k, v in tensors.items() if not k.startswith("model.encoder.layers.2.")},
            os.path.join(BALANCED, "model.safetensors"), metadata={"format": "pt"})
  for name in ("generation_config.json", "tokenizer.model"):
    shutil.copyfile(os.path.join(TINY, name), os.path.join(BALANCED, name))


def original_model():
  """tiny_2x2 with the encoder's window read as |i - j| < W (make_t5gemma_golden.py)."""
  model = transformers.T5GemmaForConditionalGeneration.from_pretrained(BALANCED).eval()
  config = model.config
  config.encoder.sliding_window -= 1
  original = transformers.T5GemmaForConditionalGeneration(config).eval()
  original.load_state_dict(model.state_dict())
  return original


def main() -> None:
  write_balanced()
  hf_tokenizer = transformers.GemmaTokenizer.from_pretrained(BALANCED, add_bos_token=True,
                                                             add_eos_token=False)
  inputs = [hf_tokenizer(i)["input_ids"] for i, _ in PAIRS]
  labels = [hf_tokenizer(t, add_special_tokens=False)["input_ids"] + [1] for _, t in PAIRS]
  li, lt = max(map(len, inputs)), max(map(len, labels))
  ids = torch.tensor([r + [0] * (li - len(r)) for r in inputs])
  lab = torch.tensor([r + [-100] * (lt - len(r)) for r in labels])
  model = original_model()
  with torch.no_grad():
    out = model(input_ids=ids, attention_mask=(ids != 0).long(), labels=lab)
    decoder_inputs = model.prepare_decoder_input_ids_from_labels(labels=lab)
  logp = torch.log_softmax(out.logits.double(), -1)
  safe = lab.clamp(min=0)
  token_nll = -logp.gather(-1, safe[..., None])[..., 0] * (lab >= 0)
  golden = {"pairs": PAIRS, "input_ids": inputs, "labels": labels,
            "decoder_input_ids": [r[:len(l)] for r, l in
                                  zip(decoder_inputs.tolist(), labels)],
            "loss": float(out.loss), "nll": token_nll.sum(-1).tolist(),
            "target_tokens": int((lab >= 0).sum()),
            "versions": {"transformers": transformers.__version__,
                         "torch": torch.__version__.split("+")[0]}}
  with open(os.path.join(OUT, "finetune_golden.json"), "w") as f:
    json.dump(golden, f, indent=1)

  r = restore.load_hf(BALANCED)
  framing = converters.FRAMINGS["t5gemma"]
  feats = [converters.convert({"inputs": r.tokenizer.encode(i), "targets": r.tokenizer.encode(t)},
                              "encoder_decoder", framing=framing) for i, t in PAIRS]
  for f, want_in, want_lab, want_dec in zip(feats, inputs, labels, golden["decoder_input_ids"]):
    assert f["encoder_input_tokens"].tolist() == want_in, (f, want_in)
    assert f["decoder_target_tokens"].tolist() == want_lab, (f, want_lab)
    assert f["decoder_input_tokens"].tolist() == want_dec, (f, want_dec)
  lengths = {"encoder": li, "decoder": lt}
  batch = {k: np.stack([packing.pad_example(f, lengths)[k] for f in feats]) for k in feats[0]}
  got = -np.asarray(jax.jit(lambda p, b: score.score(p, b, model=r.model))(
      r.params, batch)["log_likelihood"])
  if not np.allclose(got, golden["nll"], rtol=1e-5):
    raise SystemExit(f"lm nll {got} != transformers {golden['nll']}")
  print(f"wrote finetune_golden.json: loss {golden['loss']:.6f}, nll {golden['nll']}; lm agrees")


if __name__ == "__main__":
  main()
