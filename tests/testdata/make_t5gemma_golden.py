"""Regenerates the HF T5Gemma golden in tests/testdata/hf_t5gemma/ (needs torch + transformers).

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install torch transformers
    . .venv/bin/activate && export PYTHONPATH=$PWD   # lm's environment, torch appended:
    python -c "import sys, runpy; sys.path.append('/tmp/tfvenv/lib/python3.11/site-packages'); \
      runpy.run_path('tests/testdata/make_t5gemma_golden.py', run_name='__main__')"

(last run: transformers 5.24.0, torch 2.14.1, CPU, ~35 s).
A tiny random T5Gemma (``T5GemmaForConditionalGeneration``)
with FIXED numpy weights (seeded numpy Generator, not torch's init): GQA (4 query heads, 2
key/value heads), query_pre_attn_scalar 6 (not head_dim), alternating sliding / full
layers (HF's default layer_types) with a window of 3 over 10 encoder / 8 decoder tokens,
attention and final soft-capping set low enough to bite, every RMSNorm weight moved off
its initial 0, the head tied to the decoder's table and the encoder's own table (as the
released checkpoints: lm's separate_encoder_embedding), 3 encoder and 2 decoder layers. It writes, with transformers' own save_pretrained (safetensors):
  hf_t5gemma/tiny/          the checkpoint directory (config.json + model.safetensors)
  hf_t5gemma/golden.npz     encoder_input_tokens [2, 10] (row 1 padded with 0 at the end),
                            decoder_input_tokens [2, 8], logits float32 [2, 8, 64] (HF eager),
                            greedy_tokens [2, 8] (HF generate, greedy, decoder start 0, lm's
                            convention of 0 after EOS)
  hf_t5gemma/report.json    versions and the max |lm - HF| differences

The encoder's sliding window: transformers 5.x's bidirectional sliding mask lets i see j
where |i - j| <= W; lm (and T5Gemma as first added to transformers, 4.53) uses |i - j| < W.
The golden logits are HF's with the encoder's sliding_window set to W - 1 for the forward
pass only (the saved config holds W for both stacks), so they are T5Gemma's original
semantics; report.json also records how far lm is from transformers 5.x's own reading.

It then checks lm against the goldens (load_hf_t5gemma + Transformer; lm's greedy decoding)
and that a directory written by save_hf_t5gemma loads in transformers with the same logits,
and stops on any mismatch. The tests read only the directory and golden.npz.
"""
from __future__ import annotations

import copy
import json
import os
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from lm import generation  # noqa: E402
from lm.checkpoint import hf_t5gemma  # noqa: E402
from lm.model.transformer import Transformer  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_t5gemma")
WINDOW = 3
MAX_NEW = 8
ATOL = 5e-5
MODULE = dict(vocab_size=64, hidden_size=16, intermediate_size=24, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=6,
              attn_logit_softcapping=2.0, final_logit_softcapping=4.0, sliding_window=WINDOW,
              rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
              pad_token_id=0, eos_token_id=1, bos_token_id=2)


def hf_config(encoder_window: int = WINDOW) -> transformers.T5GemmaConfig:
  enc = dict(MODULE, num_hidden_layers=3, sliding_window=encoder_window)
  dec = dict(MODULE, num_hidden_layers=2)
  return transformers.T5GemmaConfig(encoder=enc, decoder=dec, vocab_size=64, dropout_rate=0.0,
                                    attention_dropout=0.0, tie_word_embeddings=True,
                                    attn_implementation="eager")


def set_weights(model) -> None:
  rng = np.random.default_rng(0)
  with torch.no_grad():
    for name, p in sorted(model.named_parameters()):
      std = 0.5 if "embed_tokens" in name else 0.8
      p.copy_(torch.tensor(rng.normal(0.0, std, tuple(p.shape)).astype(np.float32)))
    # A small pad row, so that greedy decoding does not just repeat token 0.
    model.model.decoder.embed_tokens.weight[0] *= 0.05


def fixed_inputs():
  rng = np.random.default_rng(1)
  enc = rng.integers(3, 64, (2, 10)).astype(np.int32)
  enc[1, 7:] = 0  # padded encoder row
  dec = rng.integers(3, 64, (2, 8)).astype(np.int32)
  dec[:, 0] = 0  # the decoder start token lm uses (HF masks no decoder token: mask given)
  return enc, dec


def hf_logits(model, enc, dec):
  with torch.no_grad():
    out = model(input_ids=torch.tensor(enc, dtype=torch.long),
                attention_mask=torch.tensor(enc != 0, dtype=torch.long),
                decoder_input_ids=torch.tensor(dec, dtype=torch.long),
                decoder_attention_mask=torch.ones(dec.shape, dtype=torch.long))
  return out.logits.numpy().astype(np.float32)


def hf_greedy(model, enc):
  ids = torch.tensor(enc, dtype=torch.long)
  with torch.no_grad():
    out = model.generate(input_ids=ids, attention_mask=(ids != 0).long(), max_new_tokens=MAX_NEW,
                         do_sample=False, decoder_start_token_id=0, eos_token_id=1,
                         pad_token_id=0)
  seqs = out.numpy()[:, 1:]
  tokens = np.zeros((enc.shape[0], MAX_NEW), np.int32)
  tokens[:, :seqs.shape[1]] = seqs
  tokens[np.cumsum(np.cumsum(tokens == 1, axis=1), axis=1) > 1] = 0
  return tokens


def lm_logits(config, params, enc, dec):
  return np.asarray(Transformer(config).apply(
      {"params": params}, {"encoder_input_tokens": enc, "decoder_input_tokens": dec}))


def main() -> None:
  torch.manual_seed(0)
  directory = os.path.join(OUT, "tiny")
  model = transformers.T5GemmaForConditionalGeneration(hf_config()).eval()
  set_weights(model)
  model.save_pretrained(directory, safe_serialization=True)
  # The same weights with the encoder's window read as |i - j| < W (see module docstring).
  original = transformers.T5GemmaForConditionalGeneration(hf_config(WINDOW - 1)).eval()
  original.load_state_dict(model.state_dict())
  enc, dec = fixed_inputs()
  logits = hf_logits(original, enc, dec)
  logits_tf5 = hf_logits(model, enc, dec)
  greedy = hf_greedy(original, enc)
  np.savez(os.path.join(OUT, "golden.npz"), encoder_input_tokens=enc, decoder_input_tokens=dec,
           logits=logits, greedy_tokens=greedy)

  config, params = hf_t5gemma.load_hf_t5gemma(directory)
  ours = lm_logits(config, params, enc, dec)
  diff = float(np.max(np.abs(ours - logits)))
  cfg = generation.DecodeConfig(method="greedy", max_decode_length=MAX_NEW)
  ours_greedy = np.asarray(generation.make_decode_fn(Transformer(config), cfg)(
      params, {"encoder_input_tokens": enc}, jax.random.PRNGKey(0), np.arange(len(enc)))[0])
  with tempfile.TemporaryDirectory() as tmp:  # export: transformers reads lm's directory
    hf_t5gemma.save_hf_t5gemma(tmp, config, params)
    back = transformers.T5GemmaForConditionalGeneration.from_pretrained(
        tmp, attn_implementation="eager").eval()
    back.config.encoder.sliding_window = WINDOW - 1
    back_cfg = copy.deepcopy(back.config)
    reread = transformers.T5GemmaForConditionalGeneration(back_cfg).eval()
    reread.load_state_dict(back.state_dict())
    export_diff = float(np.max(np.abs(hf_logits(reread, enc, dec) - ours)))
  report = {"torch": torch.__version__, "transformers": transformers.__version__,
            "max_abs_diff_lm_vs_hf": diff, "max_abs_logit": float(np.max(np.abs(logits))),
            "max_abs_diff_export": export_diff,
            "max_abs_diff_lm_vs_transformers5_encoder_window": float(np.max(np.abs(ours - logits_tf5))),
            "greedy_equal": bool(np.array_equal(ours_greedy, greedy))}
  with open(os.path.join(OUT, "report.json"), "w") as f:
    json.dump(report, f, indent=2)
  print(json.dumps(report, indent=2), "\ngreedy HF", greedy.tolist(), "\ngreedy lm", ours_greedy.tolist())
  assert diff < ATOL, diff
  assert export_diff < ATOL, export_diff
  np.testing.assert_array_equal(ours_greedy, greedy)


if __name__ == "__main__":
  main()
