"""Hand-written gradients and matmul layouts that make the model fast on XLA:CPU.

Every function here computes exactly what its plain counterpart computes (the tests
compare them, values and gradients); it only changes how XLA:CPU lays the work out:

- ``attend``: the attention core ``softmax(Q K^T + biases) V`` with a FlashAttention-style
  backward (used by ``attention.dot_product_attention``).
- ``gated_gelu``: ``nn.gelu(a) * b`` (T5.1.1 GEGLU) with a one-pass backward (used by
  ``layers.MlpBlock``).
- ``lookup_buckets``: the T5 relative-bias table gather with a per-platform bucket-sum backward (used
  by ``position.RelativePositionBias``).
- ``dense``: ``x @ kernel`` over trailing axes as one flattened 2-D matmul (used by every
  projection of the model).

The model modules read as plain einsum code and call these by name; this module imports
nothing from the rest of lm.

Einsum letters: B batch, L query length, S key length, N heads, H head_dim, K buckets.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np


# ---------------------------------------------------------------------------------------
# Flattened dense products.

def dense(x, kernel, num_contract: int = 1, preferred_element_type=None):
  """``x @ kernel`` over x's trailing ``num_contract`` axes, as one 2-D matmul.

  Same result as the einsum, but the leading (batch, length) axes are flattened into one
  row axis first: XLA:CPU then runs the forward and both backward products as plain
  row-major GEMMs, where the 3-D einsum made it transpose the [B, L, F] activation
  gradient for every weight gradient (a 1.5x slower MLP backward on CPU).

  Args:
    x: [..., K1, ..., Kc] activations (c = num_contract).
    kernel: [K1, ..., Kc, M1, ...] weights.
    num_contract: how many trailing axes of x are contracted with kernel's leading ones.
    preferred_element_type: passed to the matmul (e.g. float32 logits from bfloat16).
  Returns:
    [..., M1, ...] in x's dtype (or preferred_element_type).
  """
  lead = x.shape[:x.ndim - num_contract]
  k_shape, m_shape = kernel.shape[:num_contract], kernel.shape[num_contract:]
  if x.shape[x.ndim - num_contract:] != k_shape:
    raise ValueError(f"dense contracts x's last {num_contract} axes with kernel's first: x "
                     f"{x.shape} and kernel {kernel.shape} do not match")
  k = int(np.prod(k_shape))
  y = jnp.dot(x.reshape(-1, k), kernel.reshape(k, -1), preferred_element_type=preferred_element_type)
  return y.reshape(*lead, *m_shape)


# ---------------------------------------------------------------------------------------
# Gated GELU.

_SQRT_2_OVER_PI = np.sqrt(2 / np.pi)


def _gelu_tanh_parts(x):
  """(cdf, tanh) of flax/jax's tanh-approximate GELU, gelu(x) = x * cdf, in x's dtype."""
  c = _SQRT_2_OVER_PI.astype(x.dtype)
  t = jnp.tanh(c * (x + 0.044715 * (x ** 3)))
  return 0.5 * (1.0 + t), t


@jax.custom_vjp
def gated_gelu(a, b):
  """``gelu(a) * b`` (tanh GELU, exactly ``nn.gelu(a) * b``) with a hand-written backward.

  The backward recomputes tanh from ``a`` and returns both input gradients from one
  elementwise pass; XLA's own derivative of the tanh GELU duplicated that work across
  fusions (measured 5% of a t5_1_1_small training step on CPU).

  Args:
    a: [..., F] gate pre-activation (wi_0 x).
    b: [..., F] linear branch (wi_1 x), same shape and dtype.
  Returns:
    [..., F] in the inputs' dtype.
  """
  return jax.nn.gelu(a, approximate=True) * b


def _gated_gelu_fwd(a, b):
  return gated_gelu(a, b), (a, b)


def _gated_gelu_bwd(residuals, g):
  a, b = residuals
  cdf, t = _gelu_tanh_parts(a)
  c = _SQRT_2_OVER_PI.astype(a.dtype)
  dgelu = cdf + 0.5 * a * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * (a * a))
  return g * b * dgelu, g * (a * cdf)


gated_gelu.defvjp(_gated_gelu_fwd, _gated_gelu_bwd)


# ---------------------------------------------------------------------------------------
# Relative-bias bucket lookup.

@jax.custom_vjp
def lookup_buckets(table, buckets):
  """``table[n, buckets[b, l, s]]`` as float32[B, N, L, S] (table float32[N, K], buckets int32[B, L, S]).

  The gradient is summed per bucket in the form that suits the platform
  (``bucket_sums_segment`` on the CPU, ``bucket_sums_onehot`` elsewhere):
  left to autodiff, the gather's transpose is a scatter whose updates XLA first transposes
  to [B * L * S, N], and XLA:CPU fuses the summed per-layer bias gradients into that
  transpose: a strided read that cost ~4% of a t5_1_1_small step.
  """
  return jnp.swapaxes(jnp.take(table, buckets, axis=1), 0, 1)


def bucket_sums_segment(d_bias, buckets, num_buckets: int):
  """float32[N, K]: ``d_bias`` [B, N, L, S] summed by ``buckets`` [B, L, S], per head.

  One segment sum (a scatter-add) per head over contiguous [B * L * S] values: the fast
  form on XLA:CPU. On a GPU the scatter's atomic adds all land on K addresses: for
  t5_1_1_small's encoder at batch 128 it took 35 ms per head on an H200, 72% of the step.
  """
  flat = buckets.reshape(-1)
  return jnp.stack([jax.ops.segment_sum(d_bias[:, n].reshape(-1), flat, num_buckets)
                    for n in range(d_bias.shape[1])])


def bucket_sums_onehot(d_bias, buckets, num_buckets: int):
  """float32[N, K]: as ``bucket_sums_segment``, as one reduction of a masked broadcast.

  ``sum over b, l, s of d_bias[b, n, l, s] * (buckets[b, l, s] == k)``: XLA fuses the
  comparison into the reduction, so the [B, N, L, S, K] operand is never materialised and
  no atomics contend (the form for GPUs and TPUs).
  """
  hit = buckets[:, None, :, :, None] == jnp.arange(num_buckets, dtype=buckets.dtype)
  return jnp.sum(jnp.where(hit, d_bias[..., None], 0.0), axis=(0, 2, 3))


def _lookup_buckets_fwd(table, buckets):
  return lookup_buckets(table, buckets), (table, buckets)


def _lookup_buckets_bwd(res, d_bias):
  table, buckets = res
  k = table.shape[1]
  d_table = jax.lax.platform_dependent(
      d_bias, buckets, cpu=lambda d, b: bucket_sums_segment(d, b, k),
      default=lambda d, b: bucket_sums_onehot(d, b, k))
  return d_table.astype(table.dtype), None


lookup_buckets.defvjp(_lookup_buckets_fwd, _lookup_buckets_bwd)


# ---------------------------------------------------------------------------------------
# Attention core.

def _sum_to_shape(x, shape):
  """Sums ``x`` [B, N, L, S] over the axes where ``shape`` (broadcastable to it) is 1.

  On the CPU the batch axis is summed as B slices added together: XLA:CPU reduces a major
  axis ~20x slower than it adds slices (28 ms vs 1.4 ms for [4, 6, 512, 512]). On GPUs
  and TPUs (``lax.platform_dependent``) it is one reduce, which those compilers fuse and
  which keeps a sharded batch axis in place instead of B - 1 unrolled adds.
  """
  if x.shape == tuple(shape):
    return x
  if shape[0] == 1 and x.shape[0] > 1:
    x = jax.lax.platform_dependent(x, cpu=_sum_batch_by_slices,
                                   default=lambda x: jnp.sum(x, 0, keepdims=True))
  axes = tuple(i for i in range(1, x.ndim) if shape[i] == 1 and x.shape[i] > 1)
  return jnp.sum(x, axes, keepdims=True) if axes else x


def _sum_batch_by_slices(x):
  """[B, ...] -> [1, ...]: the batch rows added one by one (XLA:CPU's fast form)."""
  total = x[0]
  for i in range(1, x.shape[0]):
    total = total + x[i]
  return total[None]


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def attend(query, key, value, biases, scale, dtype, softcap=None):
  """``softmax(Q K^T + sum(biases)) V`` (times the dropout ``scale``), hand-written gradient.

  No logit scaling; float32 logits and softmax. With ``softcap`` c the scores are capped
  before the biases are added: ``softmax(c * tanh(Q K^T / c) + sum(biases)) V`` (Gemma 2's
  attention-logit soft-capping; the mask bias stays outside the tanh).

  Args:
    query: [B, L, N, H]; key, value: [B, S, N, H].
    biases: tuple of float32 arrays broadcastable to [B, N, L, S], added to the logits.
    scale: None, or float32[B, N, 1, S] dropout multipliers (0 or 1 / (1 - rate)).
    dtype: dtype of the weights fed to the value einsum and of the result.
    softcap: None (off) or the cap c > 0 (a Python float).
  Returns:
    dtype[B, L, N, H].
  """
  return _attend_fwd(query, key, value, biases, scale, dtype, softcap)[0]


def _attend_fwd(query, key, value, biases, scale, dtype, softcap=None):
  logits = jnp.einsum("BLNH,BSNH->BNLS", query, key, preferred_element_type=jnp.float32)
  capped = None  # tanh(Q K^T / c), float32[B, N, L, S], kept for the backward pass
  if softcap is not None:
    capped = jnp.tanh(logits / softcap)
    logits = softcap * capped
  for b in biases:
    logits = logits + b
  probs = jax.nn.softmax(logits, axis=-1)  # float32[B, N, L, S]
  weights = probs if scale is None else probs * scale
  out = jnp.einsum("BNLS,BSNH->BLNH", weights.astype(dtype), value.astype(dtype))
  return out, (query, key, value, biases, probs, scale, out, capped)


def _attend_bwd(dtype, softcap, res, d_out):
  """The softmax gradient as in FlashAttention: ``dS = P * (dP - rowsum(dO * O))``.

  ``rowsum(dO * O)`` equals ``rowsum(P * dP)`` (dropout included, as O is built from the
  dropped weights) but reads [B, L, N, H] instead of [B, N, L, S]; the key and value
  gradients are computed transposed ([B, N, H, S]), the layout XLA:CPU multiplies fastest.
  With soft-capping the scores' gradient is ``dS * (1 - tanh^2)``; the biases' stays ``dS``.
  """
  query, key, value, biases, probs, scale, out, capped = res
  f32 = jnp.float32
  weights = (probs if scale is None else probs * scale).astype(dtype)
  d_out = d_out.astype(dtype)
  d_value = jnp.einsum("BLNH,BNLS->BNHS", d_out, weights, preferred_element_type=f32)
  d_weights = jnp.einsum("BLNH,BSNH->BNLS", d_out, value.astype(dtype), preferred_element_type=f32)
  d_probs = d_weights if scale is None else d_weights * scale
  delta = jnp.einsum("BLNH,BLNH->BNL", d_out.astype(f32), out.astype(f32))[..., None]
  d_logits = probs * (d_probs - delta)  # float32[B, N, L, S]
  d_scores = d_logits if capped is None else d_logits * (1.0 - capped * capped)
  d_query = jnp.einsum("BNLS,BSNH->BLNH", d_scores.astype(query.dtype), key,
                       preferred_element_type=f32)
  d_key = jnp.einsum("BLNH,BNLS->BNHS", query, d_scores.astype(query.dtype),
                     preferred_element_type=f32)
  d_biases = tuple(_sum_to_shape(d_logits, b.shape) for b in biases)
  d_scale = None if scale is None else jnp.zeros_like(scale)
  return (d_query.astype(query.dtype), jnp.einsum("BNHS->BSNH", d_key).astype(key.dtype),
          jnp.einsum("BNHS->BSNH", d_value).astype(value.dtype), d_biases, d_scale)


attend.defvjp(_attend_fwd, _attend_bwd)


__all__ = ["dense", "gated_gelu", "lookup_buckets", "attend"]
