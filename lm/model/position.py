"""Position encodings: T5 relative buckets, RoPE, ALiBi, sinusoidal tables.

Pure functions of integer positions; the parameterised pieces (the relative-bias table
and the learned absolute embedding) are small Flax modules here too. Which encoding a
model uses is chosen by ``TransformerConfig.position_encoding``:

- ``"t5_relative"``: a learned scalar bias per (head, bucket) added to attention logits
  (T5; one table per stack, shared by its layers; not used in cross-attention).
- ``"rope"``: rotary embedding of queries and keys (GPT-NeoX/LLaMA "rotate half" layout:
  the first half of the head dims pairs with the second half).
- ``"alibi"``: a fixed linear bias ``-slope_h * |query_pos - key_pos|`` (Press et al. 2022).
- ``"learned"`` / ``"sinusoidal"``: absolute embeddings added to the token embeddings.
- ``"none"``: nothing (causal masking alone carries order information).

The functions take positions of shape [B or 1, L]. For a full pass the Transformer gives
the relative biases (T5, ALiBi) ``arange`` positions, [1, L], and so one [1, N, L, L] bias
for all rows: a packed example still sees exactly the encodings it would see alone, since
positions restart at 0 in every segment and pairs across segments are masked. Decoding
(prefill, steps) and the absolute encodings use the per-segment ``*_positions`` features.
"""
from __future__ import annotations

import math

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from lm.model import fast_grads

POSITION_ENCODINGS = ("t5_relative", "rope", "alibi", "learned", "sinusoidal", "none")


def relative_position_bucket(relative_position, *, bidirectional: bool = True,
                             num_buckets: int = 32, max_distance: int = 128):
  """T5's relative-position bucket (flaxformer/t5x ``_relative_position_bucket``).

  Offsets below ``max_exact`` get their own bucket; larger ones are log-spaced up to
  ``max_distance``; everything further shares the last bucket. Bidirectional bucketing
  spends half the buckets on keys after the query.

  Example (bidirectional, 32 buckets, max_distance 128):
    relative_position  = [0, -1, -8, -12, -91, 1, 8, 100]
    bucket             = [0,  1,  8,   9,  15, 17, 24, 31]
  Unidirectional: -16 -> 16, -32 -> 21, -113 -> 31, any rp > 0 -> 0.

  Args:
    relative_position: int[...] key position minus query position.
    bidirectional: whether keys after the query get their own buckets.
    num_buckets: total number of buckets.
    max_distance: offset at which the log spacing reaches the last bucket.
  Returns:
    int32[...] bucket ids in [0, num_buckets).
  """
  relative_position = jnp.asarray(relative_position, jnp.int32)
  ret = jnp.zeros_like(relative_position)
  n = -relative_position
  if bidirectional:
    num_buckets //= 2
    ret = ret + (n < 0).astype(jnp.int32) * num_buckets
    n = jnp.abs(n)
  else:
    n = jnp.maximum(n, 0)
  max_exact = num_buckets // 2
  is_small = n < max_exact
  # float32 math and truncation toward zero, exactly as the reference implementation.
  val_if_large = max_exact + (
      jnp.log(n.astype(jnp.float32) / max_exact + np.finfo(np.float32).eps)
      / math.log(max_distance / max_exact) * (num_buckets - max_exact)).astype(jnp.int32)
  val_if_large = jnp.minimum(val_if_large, num_buckets - 1)
  return ret + jnp.where(is_small, n, val_if_large)


class RelativePositionBias(nn.Module):
  """T5 relative position bias: one ``rel_embedding`` table (heads, buckets) per stack.

  Param: ``rel_embedding`` float32[N, num_buckets], logical axes ("heads", "relpos_buckets"),
  init variance_scaling(1.0, "fan_avg", "uniform").
  """
  num_heads: int
  num_buckets: int = 32
  max_distance: int = 128

  @nn.compact
  def __call__(self, q_positions, k_positions, *, bidirectional: bool):
    """Bias for every (query, key) pair.

    Args:
      q_positions: int32[B or 1, L] query positions.
      k_positions: int32[B or 1, S] key positions.
      bidirectional: bidirectional bucketing (encoder) or not (decoder).
    Returns:
      float32[B or 1, N, L, S] additive logit bias.
    """
    table = self.param(
        "rel_embedding",
        nn.with_logical_partitioning(
            nn.initializers.variance_scaling(1.0, "fan_avg", "uniform"),
            ("heads", "relpos_buckets")),
        (self.num_heads, self.num_buckets), jnp.float32)
    rp = k_positions[:, None, :] - q_positions[:, :, None]  # [B, L, S]
    buckets = relative_position_bucket(rp, bidirectional=bidirectional,
                                       num_buckets=self.num_buckets,
                                       max_distance=self.max_distance)
    return fast_grads.lookup_buckets(jnp.asarray(table, jnp.float32), buckets)


def alibi_slopes(num_heads: int) -> np.ndarray:
  """ALiBi head slopes: the geometric sequence 2^(-8/n), 2^(-16/n), ... (Press et al.).

  For a head count that is not a power of two, the closest lower power's slopes are
  followed by every other slope of the next power, as in the paper's reference code.

  Args:
    num_heads: number of attention heads.
  Returns:
    float32[N] positive slopes, e.g. num_heads=4 -> [0.25, 0.0625, 0.015625, 0.00390625].
  """
  def power_of_two(n):
    start = 2.0 ** (-8.0 / n)
    return [start ** (i + 1) for i in range(n)]
  if math.log2(num_heads).is_integer():
    slopes = power_of_two(num_heads)
  else:
    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(closest) + power_of_two(2 * closest)[0::2][: num_heads - closest]
  return np.asarray(slopes, np.float32)


def alibi_bias(q_positions, k_positions, num_heads: int):
  """ALiBi bias ``-slope_h * |q_pos - k_pos|`` (symmetric, so it also serves encoders).

  Args:
    q_positions: int32[B or 1, L]; k_positions: int32[B or 1, S].
    num_heads: N.
  Returns:
    float32[B or 1, N, L, S].
  """
  dist = jnp.abs(q_positions[:, None, :, None] - k_positions[:, None, None, :])
  return -jnp.asarray(alibi_slopes(num_heads))[None, :, None, None] * dist.astype(jnp.float32)


def sinusoidal_embedding(positions, dim: int, max_wavelength: float = 10_000.0):
  """Transformer (Vaswani et al.) sinusoidal absolute embedding: [sin | cos] halves.

  Args:
    positions: int32[B or 1, L].
    dim: embedding width D (even).
  Returns:
    float32[B or 1, L, D].
  """
  half = dim // 2
  inv_freq = 1.0 / (max_wavelength ** (np.arange(half, dtype=np.float32) / half))
  angles = positions.astype(jnp.float32)[..., None] * inv_freq
  emb = jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)
  if dim % 2:
    emb = jnp.pad(emb, [(0, 0)] * (emb.ndim - 1) + [(0, 1)])
  return emb


def apply_rope(x, positions, max_wavelength: float = 10_000.0):
  """Rotary position embedding, "rotate half" layout (dim i pairs with i + H/2).

  Args:
    x: [B, L, N, H] queries or keys (H even).
    positions: int32[B or 1, L] positions of those tokens.
  Returns:
    [B, L, N, H] rotated, same dtype as x (rotation computed in float32).
  """
  h = x.shape[-1]
  if h % 2:
    raise ValueError(f"rope needs an even head_dim, got {h}")
  half = h // 2
  inv_freq = 1.0 / (max_wavelength ** (np.arange(half, dtype=np.float32) * 2.0 / h))
  angles = positions.astype(jnp.float32)[:, :, None, None] * inv_freq  # [B, L, 1, H/2]
  sin, cos = jnp.sin(angles), jnp.cos(angles)
  x32 = x.astype(jnp.float32)
  x1, x2 = x32[..., :half], x32[..., half:]
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x.dtype)


class LearnedPositionEmbedding(nn.Module):
  """Learned absolute position table ``embedding`` float32[max_length, D].

  Logical axes ("abspos_buckets", "embed") as in t5x; init normal(stddev).
  """
  max_length: int
  emb_dim: int
  stddev: float = 0.02

  @nn.compact
  def __call__(self, positions):
    """int32[B or 1, L] -> float32[B or 1, L, D]."""
    table = self.param(
        "embedding",
        nn.with_logical_partitioning(nn.initializers.normal(self.stddev),
                                     ("abspos_buckets", "embed")),
        (self.max_length, self.emb_dim), jnp.float32)
    return jnp.take(jnp.asarray(table), positions, axis=0)


__all__ = ["POSITION_ENCODINGS", "relative_position_bucket", "RelativePositionBias",
           "alibi_slopes", "alibi_bias", "sinusoidal_embedding", "apply_rope",
           "LearnedPositionEmbedding"]
