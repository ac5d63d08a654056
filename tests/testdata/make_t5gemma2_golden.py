"""Regenerates the HF T5Gemma 2 golden in tests/testdata/hf_t5gemma2/ (needs torch + transformers).

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install torch transformers
    . .venv/bin/activate && export PYTHONPATH=$PWD   # lm's environment, torch appended:
    python -c "import sys, runpy; sys.path.append('/tmp/tfvenv/lib/python3.11/site-packages'); \
      runpy.run_path('tests/testdata/make_t5gemma2_golden.py', run_name='__main__')"

(last run: transformers 5.24.0, torch 2.14.1, CPU, ~20 s). A tiny random
``T5Gemma2ForConditionalGeneration`` with FIXED numpy weights (a seeded numpy Generator,
not torch's init): GQA (4 query heads, 2 key/value heads of 8), query_pre_attn_scalar 6,
sliding and full layers alternating over 3 encoder and 2 decoder layers, a window of 4 over 10 encoder / 8 decoder tokens (the encoder's centred
window of W keys then differs from T5Gemma's |i - j| < W), RoPE bases 10 (sliding) and
100 (full) low enough to bite, q/k norms and every RMSNorm weight off their initial 0, the
end-of-image embedding (token 61) in both stacks' inputs, padded encoder rows, and a tiny
SigLIP vision tower that lm does not read. It writes, with transformers' save_pretrained:
  hf_t5gemma2/tiny/         the checkpoint directory (config.json + model.safetensors)
  hf_t5gemma2/golden.npz    encoder_input_tokens [2, 10] (row 1 padded with 0), decoder
                            input tokens [2, 8], logits float32 [2, 8, 64] (HF eager),
                            greedy_tokens and beam_tokens [2, 8] (``generate`` from the
                            decoder's bos 2: greedy; 2 beams, length_penalty 1.0, early
                            stopping; 0 after the first EOS)
  hf_t5gemma2/report.json   versions, the max |lm - HF| difference, and how far lm's logits
                            move when one T5Gemma 2 knob is set back to T5Gemma's

It then checks lm against the goldens (hf_t5gemma2.load_hf_t5gemma2 + Transformer; lm's
greedy and beam decoding) and stops on any mismatch. The tests read only the directory
and golden.npz.
"""
from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from lm import generation  # noqa: E402
from lm.checkpoint import hf_t5gemma2  # noqa: E402
from lm.model.transformer import Transformer  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_t5gemma2")
WINDOW = 4
EOI = 61
MAX_NEW = 8
START = 2  # the decoder's bos_token_id
RTOL = 1e-5  # of the largest |logit|: float32 through 12 layers
TEXT = dict(vocab_size=64, hidden_size=16, intermediate_size=24, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=6, sliding_window=WINDOW,
            rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh", num_hidden_layers=3,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
                             "full_attention": {"rope_type": "default", "rope_theta": 100.0}},
            max_position_embeddings=64, pad_token_id=0, eos_token_id=1, bos_token_id=START)
VISION = dict(hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
              image_size=16, patch_size=8, num_channels=3)


def hf_config() -> transformers.T5Gemma2Config:
  encoder = dict(text_config=TEXT, vision_config=VISION, mm_tokens_per_image=4,
                 boi_token_index=60, eoi_token_index=EOI, image_token_index=62)
  decoder = dict(TEXT, num_hidden_layers=2, layer_types=TEXT["layer_types"][:2])
  return transformers.T5Gemma2Config(encoder=encoder, decoder=decoder, eoi_token_index=EOI,
                                     image_token_index=62, dropout_rate=0.0,
                                     attention_dropout=0.0, attn_implementation="eager")


def set_weights(model) -> None:
  rng = np.random.default_rng(0)
  with torch.no_grad():
    for name, p in sorted(model.named_parameters()):
      std = 0.1 if "embed" in name else 0.8  # small: the layers, not the input token, lead
      p.copy_(torch.tensor(rng.normal(0.0, std, tuple(p.shape)).astype(np.float32)))
    # Small pad and bos rows, so that decoding does not just repeat token 0 or 2 either.
    model.model.encoder.text_model.embed_tokens.weight[[0, 2]] *= 0.05


def fixed_inputs():
  rng = np.random.default_rng(1)
  enc = rng.integers(3, 60, (2, 10)).astype(np.int32)
  enc[:, 3] = EOI
  enc[1, 7:] = 0  # padded encoder row
  dec = rng.integers(3, 60, (2, 8)).astype(np.int32)
  dec[:, 0] = START
  dec[0, 5] = EOI
  return enc, dec


def hf_logits(model, enc, dec):
  with torch.no_grad():
    out = model(input_ids=torch.tensor(enc, dtype=torch.long),
                attention_mask=torch.tensor(enc != 0, dtype=torch.long),
                decoder_input_ids=torch.tensor(dec, dtype=torch.long),
                decoder_attention_mask=torch.ones(dec.shape, dtype=torch.long))
  return out.logits.numpy().astype(np.float32)


def hf_generate(model, enc, **kw):
  ids = torch.tensor(enc, dtype=torch.long)
  with torch.no_grad():
    out = model.generate(input_ids=ids, attention_mask=(ids != 0).long(), max_new_tokens=MAX_NEW,
                         do_sample=False, decoder_start_token_id=START, eos_token_id=1,
                         pad_token_id=0, **kw)
  seqs = out.numpy()[:, 1:]
  tokens = np.zeros((enc.shape[0], MAX_NEW), np.int32)
  tokens[:, :seqs.shape[1]] = seqs
  tokens[np.cumsum(np.cumsum(tokens == 1, axis=1), axis=1) > 1] = 0
  return tokens


def lm_decode(config, params, enc, **kw):
  cfg = generation.DecodeConfig(max_decode_length=MAX_NEW, **kw)
  batch = {"encoder_input_tokens": enc,
           "decoder_input_tokens": np.full((len(enc), 1), START, np.int32)}
  return np.asarray(generation.make_decode_fn(Transformer(config), cfg)(
      params, batch, jax.random.PRNGKey(0), np.arange(len(enc)))[0])


def main() -> None:
  torch.manual_seed(0)
  directory = os.path.join(OUT, "tiny")
  model = transformers.T5Gemma2ForConditionalGeneration(hf_config()).eval()
  set_weights(model)
  model.save_pretrained(directory, safe_serialization=True)
  enc, dec = fixed_inputs()
  logits = hf_logits(model, enc, dec)
  greedy = hf_generate(model, enc)
  beam = hf_generate(model, enc, num_beams=2, length_penalty=1.0, early_stopping=True)
  np.savez(os.path.join(OUT, "golden.npz"), encoder_input_tokens=enc, decoder_input_tokens=dec,
           logits=logits, greedy_tokens=greedy, beam_tokens=beam)

  config, params = hf_t5gemma2.load_hf_t5gemma2(directory)
  ours = np.asarray(Transformer(config).apply(
      {"params": params}, {"encoder_input_tokens": enc, "decoder_input_tokens": dec}))
  diff = float(np.max(np.abs(ours - logits)))
  tolerance = RTOL * float(np.max(np.abs(logits)))
  knobs = {}  # each knob alone, back at T5Gemma's value: the golden must tell it apart
  for name, value in (("bidirectional_window", "symmetric"), ("rope_local_max_wavelength", None),
                      ("eoi_id", None), ("qk_norm", False)):
    other = Transformer(config.replace(**{name: value})).apply(
        {"params": params}, {"encoder_input_tokens": enc, "decoder_input_tokens": dec})
    knobs[name] = float(np.max(np.abs(np.asarray(other) - logits)))
  ours_greedy = lm_decode(config, params, enc, method="greedy")
  ours_beam = lm_decode(config, params, enc, method="beam", beam_size=2, alpha=1.0,
                        length_penalty="hf")
  report = {"torch": torch.__version__, "transformers": transformers.__version__,
            "max_abs_diff_lm_vs_hf": diff, "max_abs_logit": float(np.max(np.abs(logits))),
            "greedy_equal": bool(np.array_equal(ours_greedy, greedy)),
            "beam_equal": bool(np.array_equal(ours_beam, beam)),
            "max_abs_diff_with_one_knob_back": knobs}
  with open(os.path.join(OUT, "report.json"), "w") as f:
    json.dump(report, f, indent=2)
  print(json.dumps(report, indent=2), "\ngreedy HF", greedy.tolist(), "\ngreedy lm",
        ours_greedy.tolist(), "\nbeam HF", beam.tolist(), "\nbeam lm", ours_beam.tolist())
  assert diff < tolerance, (diff, tolerance)
  assert min(knobs.values()) > 100 * tolerance, knobs
  np.testing.assert_array_equal(ours_greedy, greedy)
  np.testing.assert_array_equal(ours_beam, beam)
  assert len(np.unique(greedy)) > 3 and not np.array_equal(greedy, beam), "a weak golden"


if __name__ == "__main__":
  main()
