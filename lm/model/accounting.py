"""Parameter and FLOP accounting for TransformerConfig (no parameter is allocated).

Parameters are counted from ``jax.eval_shape`` of ``Transformer.init`` (exactly the param
tree); FLOPs count matrix multiplies only (2 per multiply-add, backward = 2x forward);
``activation_bytes`` estimates what the backward pass keeps per example, per remat policy.
The presets are in presets.py; the planner (lm/plan.py) sets these beside XLA's analyses.

    training_flops(config, inputs_length, targets_length)   # per example and step

The per-layer formulas and what each remat policy keeps: docs/model.md, 'Accounting'.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax.core import meta

from lm.keypaths import path_names
from lm.model.transformer import Transformer, TransformerConfig


def _abstract_params(config: TransformerConfig):
  # Scanning, remat and which layers are local change no param; scan traces faster.
  config = config.replace(scan_layers=True, remat_policy="none", layer_pattern=None,
                          sliding_window=None)
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
    group = "/".join(path_names(path)[:depth])
    counts[group] = counts.get(group, 0) + int(np.prod(leaf.shape))
  counts["total"] = sum(v for k, v in counts.items())
  return counts


def count_params(config: TransformerConfig) -> int:
  """Total number of parameters of ``Transformer(config)`` (via jax.eval_shape)."""
  return param_breakdown(config, depth=1)["total"]


# The top-level param groups that are token tables (input embeddings, an untied head).
EMBEDDING_PARAMS = ("token_embedder", "encoder_token_embedder", "logits_dense")


def count_non_embedding_params(config: TransformerConfig) -> int:
  """Parameters outside the token tables (EMBEDDING_PARAMS): Kaplan et al.'s N."""
  counts = param_breakdown(config, depth=1)
  return counts["total"] - sum(counts.get(name, 0) for name in EMBEDDING_PARAMS)


def forward_flops(config: TransformerConfig, inputs_length: int, targets_length: int) -> dict[str, Any]:
  """Forward-pass matmul FLOPs per example, split by part (formulas: docs/model.md).

  Args:
    config: the model config.
    inputs_length: Li (encoder length, or prefix part of a decoder-only sequence).
    targets_length: Lt.
  Returns:
    {"encoder": f, "decoder": f, "logits": f, "total": f} (ints).
  """
  d, nh, v = config.emb_dim, config.num_heads * config.resolved_head_dim, config.vocab_size
  kh = config.resolved_num_kv_heads * config.resolved_head_dim
  m = 3 if config.mlp_activation in ("gated_gelu", "swiglu") else 2
  li, lt = int(inputs_length), int(targets_length)

  def block(length, c=config):  # self-attention block + MLP of a stack's shape c
    d, nh = c.emb_dim, c.num_heads * c.resolved_head_dim
    kh = c.resolved_num_kv_heads * c.resolved_head_dim
    return 2 * length * (2 * d * nh + 2 * d * kh + m * d * c.mlp_dim) + 4 * length * length * nh

  if config.is_encoder_decoder:
    enc = config.encoder_config()  # the encoder's own shape (9B-2B), else config
    encoder = config.num_encoder_layers * block(li, enc)
    # cross-attention: q, o on the decoder's Lt; k, v read the encoder's width on Li
    cross = 2 * li * 2 * enc.emb_dim * kh + 4 * lt * li * nh
    if not config.merged_attention:  # the cross block's own q and o projections
      cross += 2 * lt * 2 * d * nh
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


# float32 [L, V] arrays of the loss alive at once: logits, softmax probabilities, and the
# logits' gradient.
LOGITS_COPIES = 3
_DOTS_POLICIES = ("dots_saveable", "dots_with_no_batch_dims_saveable")
_RECOMPUTE_POLICIES = ("full", "nothing_saveable")
_NAMED_POLICIES = ("minimal", "minimal_with_mlp", "minimal_offloaded")


def _layer_activation_elements(config: TransformerConfig, length: int, keys: int,
                               cross_keys: int, policy: str) -> tuple[float, float, float]:
  """Saved activations of one layer per token: (dtype elements replicated over the tensor
  axis, dtype elements split over it, float32 elements split over it)."""
  d, n = config.emb_dim, config.num_heads
  nh, f = n * config.resolved_head_dim, config.mlp_dim
  gated = config.mlp_activation in ("gated_gelu", "swiglu")
  cross = cross_keys > 0
  if policy in _NAMED_POLICIES:     # the checkpoint_name tags each policy saves
    rep = 2 * d                      # layer input, attention out projection
    split = 4 * nh                   # q, k, v, attention output
    if cross:
      rep += d                       # cross-attention out projection
      split += 2 * nh                # cross q and attention output (k, v per encoder token)
    if policy == "minimal_with_mlp":
      split += f * (2 if gated else 1)  # the MLP's input products (mlp_wi)
    return rep, split, 0.0
  if policy in _DOTS_POLICIES:
    rep = 3 * d                      # layer input, attention output and MLP output projections
    split = 3 * nh + f * (2 if gated else 1)
    f32 = 0.0
    if cross:
      rep += d
      split += nh                    # cross q (its k, v are per encoder token)
    if policy == "dots_saveable":   # also the attention einsums (batch dims)
      split += nh * (2 if cross else 1)
      f32 += n * keys + (n * cross_keys if cross else 0)
    return rep, split, f32
  rep = 4 * d
  split = 4 * nh + f * (3 if gated else 2)
  f32 = n * keys
  if config.norm_position == "sandwich":
    rep += 2 * d                     # the post norms' inputs: attention and MLP outputs
  if cross:
    rep += 3 * d if config.norm_position == "sandwich" else 2 * d
    split += 2 * nh
    f32 += n * cross_keys
  return rep, split, f32


def activation_bytes(config: TransformerConfig, inputs_length: int, targets_length: int,
                     tensor_shards: int = 1, remat_policy: str | None = None) -> dict[str, float]:
  """Activation bytes one example keeps for the backward pass (formula in the docstring).

  Args:
    config: the model config (its dtype gives a; its remat_policy unless overridden).
    inputs_length, targets_length: Li, Lt.
    tensor_shards: size of the tensor-parallel mesh axis (heads, mlp and vocab split).
    remat_policy: overrides config.remat_policy.

  Returns:
    {"layers": bytes, "masks": bytes, "attention_backward": bytes, "logits": bytes,
    "total": bytes} per example on one device: saved layer activations, float32 attention
    masks (not split over the tensor axis), the transient gradients of one attention
    layer, and the float32 logits with their softmax and gradient.
  """
  policy = config.remat_policy if remat_policy is None else remat_policy
  a = 2 if config.dtype == "bfloat16" else 4
  t = max(int(tensor_shards), 1)
  li, lt = int(inputs_length), int(targets_length)

  def stack(num_layers, length, cross_keys, config=config):
    """Bytes of a stack of `num_layers` (> 0, as TransformerConfig requires) layers of
    `config`'s shape on `length` tokens (self-attention)."""
    rep, split, f32 = _layer_activation_elements(config, length, length, cross_keys, "none")
    one_layer = length * (a * (rep + split / t) + 4 * f32 / t)
    cross_kv = a * 2 * config.num_heads * config.resolved_head_dim * cross_keys / t
    if policy in _RECOMPUTE_POLICIES or policy == "minimal_offloaded":  # the rest on the host
      return length * a * config.emb_dim * num_layers + one_layer + cross_kv
    if policy in _NAMED_POLICIES:  # the saved names per layer, one layer recomputed at a time
      rep, split, _ = _layer_activation_elements(config, length, length, cross_keys, policy)
      return num_layers * (length * a * (rep + split / t) + cross_kv) + one_layer
    if policy in _DOTS_POLICIES:
      rep, split, f32 = _layer_activation_elements(config, length, length, cross_keys, policy)
      one_layer = length * (a * (rep + split / t) + 4 * f32 / t)
    return num_layers * (one_layer + cross_kv)

  n = config.num_heads
  if config.is_encoder_decoder:
    enc = config.encoder_config()
    layers = (stack(config.num_encoder_layers, li, 0, enc)
              + stack(config.num_decoder_layers, lt, li))
    layers += li * a * enc.emb_dim   # the encoded sequence, an input of every decoder layer
    masks = 4 * (li * li + lt * lt + lt * li)
    longest = max(li, lt)
    out_tokens = lt
  else:
    layers = stack(config.num_decoder_layers, li + lt, 0)
    masks = 4 * (li + lt) ** 2
    longest = li + lt
    out_tokens = li + lt
  # The backward pass of one attention layer holds the probabilities' and the scores'
  # gradients (float32) at once.
  attention_backward = 2 * 4 * n * longest * longest / t
  logits = LOGITS_COPIES * 4 * out_tokens * config.vocab_size / t
  total = layers + masks + attention_backward + logits
  return {"layers": float(layers), "masks": float(masks),
          "attention_backward": float(attention_backward), "logits": float(logits),
          "total": float(total)}


__all__ = ["EMBEDDING_PARAMS", "count_params", "count_non_embedding_params", "param_breakdown", "forward_flops", "training_flops", "flops_per_token",
           "activation_bytes"]
