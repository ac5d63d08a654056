"""Regenerates the Hugging Face T5 goldens in tests/testdata/hf_t5/ (needs torch + transformers).

    python tests/testdata/make_hf_t5_golden.py

For two tiny T5ForConditionalGeneration models with FIXED numpy weights (seeded numpy
Generator, not torch's init):
  t5_1_1/  T5.1.1 style: gated-gelu, untied lm_head, 2 encoder / 3 decoder layers,
           num_heads * d_kv (12) != d_model (16)
  t5_1_0/  T5.1.0 style: relu, tied embeddings (logits scaled by d_model**-0.5), 2 / 2 layers
it writes, with transformers' own save_pretrained (safetensors), the checkpoint directory
plus golden.npz = {encoder_input_tokens, decoder_input_tokens, logits}: HF's float32
eager logits on a fixed batch whose second encoder row is padded. The inputs are 40/36
tokens long so relative distances cross the bucket boundaries 16 and 32.

It then checks the two directions against transformers and stops on any mismatch:
  import: lm.checkpoint.hf_t5.load_hf_t5 + lm's Transformer reproduce the HF logits;
  export: a model initialised by lm (scanned layers; also a shared encoder/decoder
          model), written by lm.checkpoint.hf_t5.save_hf_t5, loaded by transformers'
          from_pretrained, gives lm's logits.
The max abs differences are recorded in hf_t5/report.json (the tests read only the
checkpoints and golden.npz; they need neither torch nor transformers).
"""
from __future__ import annotations

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

from lm.checkpoint import hf_t5  # noqa: E402
from lm.model.transformer import Transformer, TransformerConfig  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_t5")
ATOL = 1e-4

MODELS = {
    "t5_1_1": dict(vocab_size=64, d_model=16, d_kv=4, num_heads=3, d_ff=32, num_layers=2,
                   num_decoder_layers=3, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                   relative_attention_num_buckets=32, relative_attention_max_distance=128,
                   dropout_rate=0.0),
    "t5_1_0": dict(vocab_size=64, d_model=16, d_kv=4, num_heads=4, d_ff=24, num_layers=2,
                   num_decoder_layers=2, feed_forward_proj="relu", tie_word_embeddings=True,
                   relative_attention_num_buckets=16, relative_attention_max_distance=40,
                   dropout_rate=0.1),
}


def fixed_inputs(vocab_size: int) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(1234)
  enc = rng.integers(2, vocab_size, size=(2, 40)).astype(np.int32)
  enc[1, 33:] = 0  # padding in the second row
  dec = rng.integers(2, vocab_size, size=(2, 36)).astype(np.int32)
  dec[:, 0] = 0  # decoder start token
  return {"encoder_input_tokens": enc, "decoder_input_tokens": dec}


def fixed_state_dict(model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
  """Seeded weights with O(1) activations: embeddings N(0,1), linears N(0, 1/fan_in),
  norms 1 + N(0, 0.1^2), relative biases N(0, 1) (large enough to shape attention)."""
  rng = np.random.default_rng(seed)
  state = {}
  for name, p in model.state_dict().items():
    shape = tuple(p.shape)
    if "relative_attention_bias" in name:
      value = rng.normal(0.0, 1.0, shape)
    elif "layer_norm" in name:
      value = 1.0 + rng.normal(0.0, 0.1, shape)
    elif name in ("shared.weight", "lm_head.weight") or "embed_tokens" in name:
      value = rng.normal(0.0, 1.0, shape)
    else:
      value = rng.normal(0.0, shape[1] ** -0.5, shape)
    state[name] = torch.tensor(value, dtype=torch.float32)
  # The tied names must hold the same tensor.
  state["encoder.embed_tokens.weight"] = state["decoder.embed_tokens.weight"] = state["shared.weight"]
  if model.config.scale_decoder_outputs:
    state["lm_head.weight"] = state["shared.weight"]
  return state


def hf_logits(model, inputs) -> np.ndarray:
  enc = torch.tensor(inputs["encoder_input_tokens"], dtype=torch.long)
  dec = torch.tensor(inputs["decoder_input_tokens"], dtype=torch.long)
  with torch.no_grad():
    out = model(input_ids=enc, attention_mask=(enc != 0).long(), decoder_input_ids=dec)
  return out.logits.numpy().astype(np.float32)


def lm_logits(config: TransformerConfig, params, inputs) -> np.ndarray:
  return np.asarray(Transformer(config).apply({"params": params}, inputs), np.float32)


def valid(inputs):  # HF and lm differ only on fully padded rows; the decoder is never padded here
  return np.ones(inputs["decoder_input_tokens"].shape, bool)


def make_golden(name: str, hf_kwargs: dict, seed: int, report: dict) -> None:
  directory = os.path.join(OUT, name)
  config = transformers.T5Config(**hf_kwargs)
  model = transformers.T5ForConditionalGeneration(config).eval()
  if not hf_kwargs["tie_word_embeddings"]:
    # transformers 5 ties lm_head to shared at construction whatever the config says;
    # give the head its own tensor, as in the released T5.1.1 checkpoints.
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
  model.load_state_dict(fixed_state_dict(model, seed), strict=True)
  model.save_pretrained(directory, safe_serialization=True)
  inputs = fixed_inputs(config.vocab_size)
  reloaded = transformers.T5ForConditionalGeneration.from_pretrained(directory, attn_implementation="eager").eval()
  logits = hf_logits(reloaded, inputs)
  np.testing.assert_allclose(logits, hf_logits(model, inputs), atol=ATOL)  # sdpa vs eager
  np.savez(os.path.join(directory, "golden.npz"), logits=logits, **inputs)

  lm_config, params = hf_t5.load_hf_t5(directory)
  assert lm_config.tie_embeddings == hf_kwargs["tie_word_embeddings"], lm_config
  diff = float(np.max(np.abs(lm_logits(lm_config, params, inputs) - logits)))
  print(f"{name}: import max|lm - HF| = {diff:.2e}  (logit std {logits.std():.2f})")
  assert diff < ATOL, (name, diff)
  report[f"{name}_import_max_abs_diff"] = diff


def check_export(name: str, config: TransformerConfig, report: dict) -> None:
  inputs = fixed_inputs(config.vocab_size)
  model = Transformer(config)
  params = model.init(jax.random.PRNGKey(0), inputs)["params"]  # boxed, as training holds them
  ours = lm_logits(config, params, inputs)
  with tempfile.TemporaryDirectory() as tmp:
    hf_t5.save_hf_t5(tmp, config, params)
    hf = transformers.T5ForConditionalGeneration.from_pretrained(tmp, attn_implementation="eager").eval()
    theirs = hf_logits(hf, inputs)
  diff = float(np.max(np.abs(ours - theirs)))
  print(f"{name}: export max|transformers - lm| = {diff:.2e}  (logit std {ours.std():.2f})")
  assert diff < ATOL, (name, diff)
  report[f"{name}_export_max_abs_diff"] = diff


def main() -> None:
  torch.manual_seed(0)
  os.makedirs(OUT, exist_ok=True)
  report = {"transformers": transformers.__version__, "torch": torch.__version__,
            "jax": jax.__version__, "atol": ATOL}
  for seed, (name, kwargs) in enumerate(MODELS.items()):
    make_golden(name, kwargs, seed, report)
  common = dict(vocab_size=64, emb_dim=16, num_heads=3, head_dim=4, mlp_dim=32, dtype="float32",
                dropout_rate=0.0)
  check_export("lm_t5_1_1_scanned", TransformerConfig(
      num_encoder_layers=2, num_decoder_layers=3, scan_layers=True, **common), report)
  check_export("lm_t5_1_0_shared", TransformerConfig(
      num_encoder_layers=2, num_decoder_layers=2, shared_encoder_decoder=True,
      mlp_activation="relu", tie_embeddings=True, **common), report)
  check_export("lm_swiglu_tied_unscaled", TransformerConfig(
      num_encoder_layers=1, num_decoder_layers=1, mlp_activation="swiglu", tie_embeddings=True,
      tied_logits_scale=False, **common), report)
  with open(os.path.join(OUT, "report.json"), "w") as f:
    json.dump(report, f, indent=2, sort_keys=True)
  sizes = {os.path.join(d, f): os.path.getsize(os.path.join(d, f))
           for d, _, fs in os.walk(OUT) for f in fs}
  print(f"wrote {len(sizes)} files, {sum(sizes.values()) / 1024:.0f} KiB under {OUT}")


if __name__ == "__main__":
  main()
