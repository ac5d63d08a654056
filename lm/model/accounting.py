"""Parameter and FLOP accounting for TransformerConfig (no parameter is allocated).

Parameters are counted from ``jax.eval_shape`` of ``Transformer.init``, so the count is
exactly the model's param tree.

FLOPs (used for MFU) count matrix multiplies only, 2 FLOPs per multiply-add; norms,
softmax, activations, position biases and the embedding gather are not counted. A
training step costs 3x the forward pass (backward = 2x forward). With D = emb_dim,
NH = num_heads * head_dim, F = mlp_dim, V = vocab_size, M = number of MLP matrices
(3 for gated_gelu/swiglu, 2 otherwise), Li = inputs_length, Lt = targets_length,
forward FLOPs per example are:

  encoder-decoder (shared or not; Le / Ld encoder / decoder layers):
    encoder, per layer:  2*Li*(4*D*NH + M*D*F)          q, k, v, o and MLP projections
                         + 4*Li*Li*NH                   scores Q K^T and weights x V
    decoder, per layer:  2*Lt*(4*D*NH + M*D*F) + 4*Lt*Lt*NH       self-attention + MLP
                         + 2*Lt*2*D*NH + 2*Li*2*D*NH             cross q, o (on Lt) and k, v (on Li)
                         + 4*Lt*Li*NH                             cross scores and values
    logits:              2*Lt*D*V
  decoder-only (prefix_lm / causal), L = Li + Lt (inputs and targets in one sequence):
    per layer:           2*L*(4*D*NH + M*D*F) + 4*L*L*NH
    logits:              2*L*D*V

Attention is counted over the full L x S score matrix, as the dense implementation
computes it (no discount for causal masking). For a decoder-only model this is the
familiar 6*N*L + 12*layers*L^2*NH per sequence with N the non-embedding matmul
params plus the output projection.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax.core import meta

from lm.model.transformer import Transformer, TransformerConfig


def _abstract_params(config: TransformerConfig):
  # Scanning and remat change neither the count nor the FLOPs; scan traces faster.
  config = config.replace(scan_layers=True, remat_policy="none")
  model = Transformer(config)
  length = 4
  batch = {"encoder_input_tokens": jnp.ones((1, length), jnp.int32),
           "decoder_input_tokens": jnp.ones((1, length), jnp.int32),
           "decoder_target_tokens": jnp.ones((1, length), jnp.int32)}
  if config.mask_type == "prefix_lm":
    batch["decoder_causal_attention"] = jnp.ones((1, length), jnp.int32)
  if config.mask_type != "encoder_decoder":
    del batch["encoder_input_tokens"]
  shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), batch))["params"]
  return meta.unbox(shapes)


def param_breakdown(config: TransformerConfig, depth: int = 2) -> dict[str, int]:
  """Param counts grouped by the first ``depth`` levels of the param path.

  Args:
    config: the model config.
    depth: how many path components name a group (1: token_embedder/encoder/decoder/...).
  Returns:
    {"encoder/layers": n, "decoder/relpos_bias": n, ..., "total": N} (scanned layout:
    all layers of a stack are one "layers" group).
  """
  params = _abstract_params(config)
  counts: dict[str, int] = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    names = [getattr(p, "key", str(p)) for p in path]
    group = "/".join(names[:depth])
    counts[group] = counts.get(group, 0) + int(np.prod(leaf.shape))
  counts["total"] = sum(v for k, v in counts.items())
  return counts


def count_params(config: TransformerConfig) -> int:
  """Total number of parameters of ``Transformer(config)`` (via jax.eval_shape)."""
  return param_breakdown(config, depth=1)["total"]


def forward_flops(config: TransformerConfig, inputs_length: int, targets_length: int) -> dict[str, Any]:
  """Forward-pass matmul FLOPs per example, split by part (formula in the module docstring).

  Args:
    config: the model config.
    inputs_length: Li (encoder length, or prefix part of a decoder-only sequence).
    targets_length: Lt.
  Returns:
    {"encoder": f, "decoder": f, "logits": f, "total": f} (ints).
  """
  d, nh, f, v = config.emb_dim, config.num_heads * config.resolved_head_dim, config.mlp_dim, config.vocab_size
  m = 3 if config.mlp_activation in ("gated_gelu", "swiglu") else 2
  li, lt = int(inputs_length), int(targets_length)

  def block(length):  # self-attention block + MLP on `length` tokens
    return 2 * length * (4 * d * nh + m * d * f) + 4 * length * length * nh

  if config.is_encoder_decoder:
    encoder = config.num_encoder_layers * block(li)
    cross = 2 * lt * 2 * d * nh + 2 * li * 2 * d * nh + 4 * lt * li * nh
    decoder = config.num_decoder_layers * (block(lt) + cross)
    logits = 2 * lt * d * v
  else:
    length = li + lt
    encoder = 0
    decoder = config.num_decoder_layers * block(length)
    logits = 2 * length * d * v
  return {"encoder": encoder, "decoder": decoder, "logits": logits,
          "total": encoder + decoder + logits}


def training_flops(config: TransformerConfig, inputs_length: int, targets_length: int,
                   batch_size: int = 1) -> int:
  """Matmul FLOPs of one training step (forward + backward = 3x forward) on a batch."""
  return 3 * forward_flops(config, inputs_length, targets_length)["total"] * int(batch_size)


def flops_per_token(config: TransformerConfig, inputs_length: int, targets_length: int) -> float:
  """Training FLOPs per token: training_flops of one example / (inputs_length + targets_length).

  Every architecture processes Li + Lt tokens per example (encoder Li + decoder Lt, or
  one decoder sequence of Li + Lt), so this is comparable across architectures. For MFU
  use ``training_flops(config, Li, Lt, batch_size) / step_time / peak_flops``.
  """
  return training_flops(config, inputs_length, targets_length) / (inputs_length + targets_length)


__all__ = ["count_params", "param_breakdown", "forward_flops", "training_flops", "flops_per_token"]
