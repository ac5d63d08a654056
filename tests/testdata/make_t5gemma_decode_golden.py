"""Writes the T5Gemma decoding golden (tests/testdata/hf_t5gemma/decode_golden.json) and the
tiny checkpoint's Gemma-layout tokenizer (hf_t5gemma/tiny/tokenizer.model); needs torch +
transformers, run as make_t5gemma_golden.py is (its docstring), after it.

    python -c "import sys, runpy; sys.path.append('/tmp/tfvenv/lib/python3.11/site-packages'); \
      runpy.run_path('tests/testdata/make_t5gemma_decode_golden.py', run_name='__main__')"

(last run: see decode_golden.json's `versions`, and protobuf for transformers' tokenizer
conversion; a few seconds.)

The tokenizer: a 64-piece SentencePiece model with Gemma's ids (pad 0, eos 1, bos 2, unk 3)
and piece names (<pad> <eos> <bos> <unk>) and normaliser (no dummy prefix, spaces as written; no byte fallback, which needs 256
pieces) trained on a fixed lowercase text, so that the tiny checkpoint's 64-row embedding
reads it.
transformers' own GemmaTokenizer frames each prompt (<bos> + pieces, no EOS: `input_ids`),
and transformers' `generate` decodes them from the checkpoint's own generation settings
(its decoder starts from the decoder's bos_token_id, 2): greedy, and beam search (2 beams,
length_penalty 1.0, early stopping), each also with a second stop id
(`eos_token_id=[1, 41]`). As make_t5gemma_golden.py, generation runs with the
encoder's window read as |i - j| < W (T5Gemma's original semantics; transformers 5.x's own
reading differs for inputs longer than W). The script then checks lm against the golden
(`lm.restore.load_hf` and `lm.generation` with the restored framing) and stops on a mismatch.
The tests read only the files.
"""
from __future__ import annotations

import io
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from lm import generation, restore  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_t5gemma")
TINY = os.path.join(OUT, "tiny")
MAX_NEW = 8
WORDS = ("the cat sat on a mat and the dog ran to the red barn while birds sang in tall "
         "green trees near a quiet river bank").split()
TEXTS = ["the cat sat on a mat", "birds sang", "a quiet river bank near the barn"]
STOP = 41  # a token the greedy rows produce (golden["stop_ids"] = [1, STOP])


def train_tokenizer() -> bytes:
  rng = np.random.default_rng(0)
  lines = [" ".join(rng.choice(WORDS, 8)) for _ in range(400)]
  model = io.BytesIO()
  spm.set_random_generator_seed(0)
  spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model,
                                 vocab_size=64, model_type="bpe", pad_id=0, eos_id=1,
                                 bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>",
                                 bos_piece="<bos>", unk_piece="<unk>", num_threads=1,
                                 minloglevel=2,
                                 # Gemma's normaliser: no dummy prefix, spaces kept as written
                                 add_dummy_prefix=False, remove_extra_whitespaces=False,
                                 normalization_rule_name="identity")
  return model.getvalue()


def original_model():
  """The tiny checkpoint with the encoder's window read as |i - j| < W."""
  model = transformers.T5GemmaForConditionalGeneration.from_pretrained(TINY).eval()
  config = model.config
  config.encoder.sliding_window -= 1
  original = transformers.T5GemmaForConditionalGeneration(config).eval()
  original.load_state_dict(model.state_dict())
  original.generation_config = model.generation_config
  return original


def generate(model, rows: list[list[int]], **kwargs) -> list[list[int]]:
  length = max(map(len, rows))
  ids = torch.tensor([r + [0] * (length - len(r)) for r in rows], dtype=torch.long)
  with torch.no_grad():
    out = model.generate(input_ids=ids, attention_mask=(ids != 0).long(),
                         max_new_tokens=MAX_NEW, do_sample=False, **kwargs).numpy()
  assert (out[:, 0] == 2).all(), f"generate did not start from <bos> 2: {out[:, 0]}"
  tokens = np.zeros((len(rows), MAX_NEW), np.int32)
  tokens[:, :out.shape[1] - 1] = out[:, 1:]
  # 0s after the first stop id (transformers' beam search writes eos_token_id[0] after a
  # hypothesis shorter than the longest, also after one that ended with another stop id)
  stops = np.isin(tokens, kwargs.get("eos_token_id", [1]))
  tokens[np.cumsum(np.cumsum(stops, axis=1), axis=1) > 1] = 0
  return tokens.tolist()


def main() -> None:
  path = os.path.join(TINY, "tokenizer.model")
  with open(path, "wb") as f:
    f.write(train_tokenizer())
  sp = spm.SentencePieceProcessor(model_file=path)
  assert sp.get_piece_size() == 64
  # the released checkpoints' tokenizer_config.json: add_bos_token true, add_eos_token false
  hf_tokenizer = transformers.GemmaTokenizer.from_pretrained(TINY, add_bos_token=True,
                                                             add_eos_token=False)
  input_ids = [hf_tokenizer(t)["input_ids"] for t in TEXTS]
  model = original_model()
  greedy = generate(model, input_ids)
  beam = generate(model, input_ids, num_beams=2, length_penalty=1.0, early_stopping=True)
  # a second stop id (as the released configs' 107, <end_of_turn>): one the greedy rows
  # produce, at their first or a later token or never
  stop = [1, STOP]
  greedy_stop = generate(model, input_ids, eos_token_id=stop)
  beam_stop = generate(model, input_ids, num_beams=2, length_penalty=1.0, early_stopping=True,
                       eos_token_id=stop)
  golden = {"texts": TEXTS, "input_ids": input_ids, "greedy_tokens": greedy,
            "beam_tokens": beam, "max_new_tokens": MAX_NEW, "stop_ids": stop,
            "greedy_tokens_stop": greedy_stop, "beam_tokens_stop": beam_stop,
            "versions": {"transformers": transformers.__version__,
                         "torch": torch.__version__.split("+")[0],
                         "sentencepiece": spm.__version__}}
  with open(os.path.join(OUT, "decode_golden.json"), "w") as f:
    json.dump(golden, f, indent=1)

  r = restore.load_hf(TINY)
  framed = [r.framing.frame(ids, False) for ids in r.tokenizer.encode_batch(TEXTS)]
  assert framed == input_ids, (framed, input_ids)
  batch = generation.prompt_batch([ids[1:] for ids in input_ids], r.model_config,
                                framing=r.framing)
  beam_settings = dict(beam_size=2, alpha=1.0, length_penalty="hf")
  for method, want, extra in (("greedy", greedy, {}), ("beam", beam, beam_settings),
                              ("greedy", greedy_stop, dict(eos_ids=stop)),
                              ("beam", beam_stop, dict(eos_ids=stop, **beam_settings))):
    cfg = generation.DecodeConfig(method=method, max_decode_length=MAX_NEW, **extra)
    got = generation.make_decode_fn(r.model, cfg)(
        r.params, batch, jax.random.PRNGKey(0), np.arange(len(TEXTS)))[0]
    if np.asarray(got).tolist() != want:
      raise SystemExit(f"lm {method} {np.asarray(got).tolist()} != transformers {want}")
  print(f"wrote {path} and decode_golden.json: greedy {greedy}, beam {beam}, stopping at "
        f"{stop}: {greedy_stop}, {beam_stop}; lm agrees")


if __name__ == "__main__":
  main()
