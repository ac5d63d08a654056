"""Building blocks: RMSNorm/LayerNorm, token Embed (with tied logits), MlpBlock.

Every parameter is created float32 and boxed with ``nn.with_logical_partitioning``;
computation runs in the module's ``dtype`` (bfloat16 or float32). No biases except the
LayerNorm shift (``norm_type="layernorm"``). Attention lives in attention.py.
Dense products go through ``fast_grads.dense`` (flattened 2-D matmuls) and the T5.1.1
gated GELU through ``fast_grads.gated_gelu`` (hand-written backward); both for speed on
XLA:CPU, same results.

Einsum letters: B batch, L length, D emb, F mlp, V vocab.
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from lm.model.fast_grads import dense, gated_gelu

MLP_ACTIVATIONS = ("relu", "gelu", "gated_gelu", "swiglu")
"""``relu``: wo(relu(wi x)) (T5.1.0); ``gelu``: wo(gelu(wi x)) (GPT); ``gated_gelu``:
wo(gelu(wi_0 x) * wi_1 x) (T5.1.1 GEGLU); ``swiglu``: wo(silu(wi_0 x) * wi_1 x)
(PaLM/LLaMA). gelu is flax's default tanh approximation, as in t5x."""

NORM_TYPES = ("rmsnorm", "layernorm", "gemma_rmsnorm")

MLP_REMAT_NAMES = ("mlp_in", "mlp_wi", "mlp_hidden", "mlp_out")
"""``checkpoint_name`` tags of ``MlpBlock``: its input [B, L, D], the input products
[B, L, F] (``wi``; ``wi_0`` and ``wi_1`` of the gated forms, both named ``mlp_wi``), the
hidden activation [B, L, F] (before dropout) and its output [B, L, D]."""

# Initializers of docs/t5_reference.md §3.3.
mlp_kernel_init = nn.initializers.variance_scaling(1.0, "fan_in", "truncated_normal")


def param_with_axes(module: nn.Module, name: str, init, shape, axes):
  """Creates a float32 param boxed with logical axis names; returns the raw value."""
  assert len(shape) == len(axes), (name, shape, axes)
  value = module.param(name, nn.with_logical_partitioning(init, axes), shape, jnp.float32)
  return jnp.asarray(value)


class RMSNorm(nn.Module):
  """T5LayerNorm: ``x * rsqrt(mean(x^2) + eps) * scale`` in float32; no bias, no centring.

  Param: ``scale`` float32[D] ("embed",), init 1. With ``scale_plus_one`` (Gemma's
  RMSNorm) the factor is ``1 + scale`` and ``scale`` is initialised to 0.
  """
  epsilon: float = 1e-6
  dtype: Any = jnp.float32
  scale_plus_one: bool = False
  axes: tuple = ("embed",)

  @nn.compact
  def __call__(self, x):
    """[..., D] -> [..., D] in ``dtype``."""
    x32 = jnp.asarray(x, jnp.float32)
    var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    y = x32 * jax.lax.rsqrt(var + self.epsilon)
    init = nn.initializers.zeros if self.scale_plus_one else nn.initializers.ones
    scale = param_with_axes(self, "scale", init, (x.shape[-1],), self.axes)
    return (y * (1.0 + scale if self.scale_plus_one else scale)).astype(self.dtype)


class LayerNorm(nn.Module):
  """Standard LayerNorm in float32 with ``scale`` (init 1) and ``bias`` (init 0), ("embed",)."""
  epsilon: float = 1e-5
  dtype: Any = jnp.float32
  axes: tuple = ("embed",)

  @nn.compact
  def __call__(self, x):
    """[..., D] -> [..., D] in ``dtype``."""
    x32 = jnp.asarray(x, jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + self.epsilon)
    d = x.shape[-1]
    scale = param_with_axes(self, "scale", nn.initializers.ones, (d,), self.axes)
    bias = param_with_axes(self, "bias", nn.initializers.zeros, (d,), self.axes)
    return (y * scale + bias).astype(self.dtype)


def make_norm(norm_type: str, dtype, name: str, epsilon: float | None = None,
              axes: tuple = ("embed",)) -> nn.Module:
  """RMSNorm (eps 1e-6), Gemma's RMSNorm (``1 + scale``, eps 1e-6) or LayerNorm (eps 1e-5)
  over the last axis, whose logical name is ``axes`` (("kv",) for the per-head q/k norms)."""
  if norm_type in ("rmsnorm", "gemma_rmsnorm"):
    return RMSNorm(epsilon=1e-6 if epsilon is None else epsilon, dtype=dtype, name=name,
                   scale_plus_one=norm_type == "gemma_rmsnorm", axes=axes)
  if norm_type == "layernorm":
    return LayerNorm(epsilon=1e-5 if epsilon is None else epsilon, dtype=dtype, name=name,
                     axes=axes)
  raise ValueError(f"unknown norm_type {norm_type!r}; expected one of {NORM_TYPES}")


class Embed(nn.Module):
  """Token embedding ``embedding`` float32[V, D] ("vocab", "embed"), init normal(stddev).

  ``__call__`` gathers rows (no sqrt(D) scaling, as T5; times sqrt(D) in ``dtype`` with
  ``scale_by_sqrt_dim``, as Gemma); ``attend`` gives tied logits (never scaled). With
  ``eoi_id`` that token's input embedding is the param ``eoi_embedding`` float32[D]
  ("embed",), init 0, unscaled (T5Gemma 2); ``attend`` still reads the table's row.
  """
  vocab_size: int
  emb_dim: int
  stddev: float = 1.0
  dtype: Any = jnp.float32
  scale_by_sqrt_dim: bool = False
  eoi_id: int | None = None

  def setup(self):
    self.embedding = self.param(
        "embedding",
        nn.with_logical_partitioning(nn.initializers.normal(self.stddev), ("vocab", "embed")),
        (self.vocab_size, self.emb_dim), jnp.float32)
    if self.eoi_id is not None:
      self.eoi_embedding = self.param(
          "eoi_embedding", nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
          (self.emb_dim,), jnp.float32)

  def __call__(self, tokens):
    """int32[B, L] -> dtype[B, L, D]."""
    if not jnp.issubdtype(tokens.dtype, jnp.integer):
      raise ValueError(f"token ids must be integers, got {tokens.dtype}")
    x = jnp.take(jnp.asarray(self.embedding, self.dtype), tokens, axis=0)
    if self.scale_by_sqrt_dim:
      x = x * jnp.asarray(self.emb_dim ** 0.5, self.dtype)
    if self.eoi_id is not None:
      x = jnp.where((tokens == self.eoi_id)[..., None],
                    jnp.asarray(self.eoi_embedding, self.dtype), x)
    return x

  def attend(self, x):
    """Tied logits ``x @ E^T``: dtype[B, L, D] -> float32[B, L, V]."""
    return jnp.einsum("BLD,VD->BLV", x, jnp.asarray(self.embedding, self.dtype),
                      preferred_element_type=jnp.float32)


def broadcast_dropout(x, rate: float, deterministic: bool, module: nn.Module,
                      broadcast_length: bool = True):
  """Inverted dropout whose keep-mask is shared over the length axis (t5x broadcast_dims=(-2,)).

  Args:
    x: [B, L, D] (or [..., L, D]) activations.
    rate: drop probability.
    deterministic: no-op when True (and when rate == 0).
    module: the calling module; its "dropout" RNG stream draws the mask.
    broadcast_length: share the mask over axis -2 (False: independent per element).
  Returns:
    x with dropped entries zeroed and kept ones scaled by 1 / (1 - rate).
  """
  if deterministic or rate == 0.0:
    return x
  shape = list(x.shape)
  if broadcast_length:
    shape[-2] = 1
  keep = jax.random.bernoulli(module.make_rng("dropout"), 1.0 - rate, shape)
  return jnp.where(keep, x / jnp.asarray(1.0 - rate, x.dtype), jnp.zeros_like(x))


class MlpBlock(nn.Module):
  """Position-wise MLP, no biases. Params (F = mlp_dim):

  relu/gelu: ``wi`` [D, F] ("embed", "mlp"), ``wo`` [F, D] ("mlp", "embed").
  gated_gelu/swiglu: ``wi_0``, ``wi_1`` [D, F] ("embed", "mlp") and ``wo`` [F, D].
  All init variance_scaling(1.0, "fan_in", "truncated_normal"). Dropout (broadcast over
  length) on the hidden activation, as t5x's intermediate dropout.
  """
  mlp_dim: int
  activation: str = "gated_gelu"
  dropout_rate: float = 0.0
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, deterministic: bool = True):
    """dtype[B, L, D] -> dtype[B, L, D]."""
    d = x.shape[-1]
    f = self.mlp_dim
    x = checkpoint_name(jnp.asarray(x, self.dtype), "mlp_in")

    def dense_in(name):
      kernel = param_with_axes(self, name, mlp_kernel_init, (d, f), ("embed", "mlp"))
      return checkpoint_name(dense(x, kernel.astype(self.dtype)), "mlp_wi")

    if self.activation in ("relu", "gelu"):
      h = dense_in("wi")
      h = nn.relu(h) if self.activation == "relu" else nn.gelu(h)
    elif self.activation in ("gated_gelu", "swiglu"):
      gate = dense_in("wi_0")
      if self.activation == "gated_gelu":
        h = gated_gelu(gate, dense_in("wi_1"))
      else:
        h = nn.silu(gate) * dense_in("wi_1")
    else:
      raise ValueError(f"unknown mlp_activation {self.activation!r}; expected one of {MLP_ACTIVATIONS}")
    h = nn.with_logical_constraint(checkpoint_name(h, "mlp_hidden"), ("batch", "length", "mlp"))
    h = broadcast_dropout(h, self.dropout_rate, deterministic, self)
    wo = param_with_axes(self, "wo", mlp_kernel_init, (f, d), ("mlp", "embed"))
    return checkpoint_name(dense(h, wo.astype(self.dtype)), "mlp_out")
