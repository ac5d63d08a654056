"""Pure loss functions: cross entropy with z-loss and label smoothing, token accuracy.

Everything returns *sums* with their weights, so metrics aggregate exactly over
microbatches, devices and logging windows (flax lm1b); dividing happens once, in
`normalize_loss` (for the gradient) or in lm/metrics.py (for reporting).

Follows t5x `losses.py` (docs/t5_reference.md §3.5):
  loss_t = -sum_v q_v log softmax(logits)_v + z_loss * logsumexp(logits)^2 - c
with q the (smoothed) target distribution and c its entropy (the normalizing constant,
so a perfect prediction scores 0 under label smoothing). Logits are promoted to float32.
The one-hot product is computed without materialising a [.., V] one-hot array.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

NORMALIZATIONS = ("num_target_tokens", "constant", "none")


def cross_entropy_per_token(logits: jax.Array, targets: jax.Array, *,
                            label_smoothing: float = 0.0,
                            z_loss: float = 0.0) -> tuple[jax.Array, jax.Array]:
  """Per-token cross entropy (plus z-loss) as in t5x.

  Args:
    logits: float[..., V] unnormalised logits (promoted to float32).
    targets: int32[...] target ids in [0, V).
    label_smoothing: t5x's label smoothing; the target gets 1 - ls, every other class
      ls / (V - 1); the entropy of that distribution is subtracted.
    z_loss: coefficient of the auxiliary loss z_loss * logsumexp(logits)^2.

  Returns:
    (loss, z) both float32[...]: loss includes the z-loss term; z is that term alone.
  """
  assert logits.shape[:-1] == targets.shape, (logits.shape, targets.shape)
  logits = logits.astype(jnp.float32)
  vocab = logits.shape[-1]
  log_z = jax.nn.logsumexp(logits, axis=-1)
  target_logit = jnp.take_along_axis(logits, targets[..., None].astype(jnp.int32),
                                     axis=-1)[..., 0]
  log_p_target = target_logit - log_z
  if label_smoothing:
    confidence = 1.0 - label_smoothing
    low = label_smoothing / (vocab - 1)
    sum_log_p = jnp.sum(logits, axis=-1) - vocab * log_z
    loss = -(confidence * log_p_target + low * (sum_log_p - log_p_target))
    normalizing_constant = -(confidence * jnp.log(confidence)
                             + (vocab - 1) * low * jnp.log(low + 1e-20))
    loss = loss - normalizing_constant
  else:
    loss = -log_p_target
  z = z_loss * jnp.square(log_z)
  return loss + z, z


def weighted_cross_entropy(logits: jax.Array, targets: jax.Array,
                           weights: jax.Array | None = None, *,
                           label_smoothing: float = 0.0,
                           z_loss: float = 0.0) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Summed weighted cross entropy (t5x `compute_weighted_cross_entropy`).

  Args:
    logits: float[B, L, V].
    targets: int32[B, L].
    weights: float32[B, L] loss weights (0 on padding); default all ones.
    label_smoothing, z_loss: see `cross_entropy_per_token`.

  Returns:
    (loss_sum, z_loss_sum, weight_sum), float32 scalars; loss_sum includes z-loss.
  """
  loss, z = cross_entropy_per_token(logits, targets, label_smoothing=label_smoothing,
                                    z_loss=z_loss)
  if weights is None:
    weights = jnp.ones(targets.shape, jnp.float32)
  weights = weights.astype(jnp.float32)
  assert weights.shape == targets.shape, (weights.shape, targets.shape)
  return jnp.sum(loss * weights), jnp.sum(z * weights), jnp.sum(weights)


def weighted_accuracy(logits: jax.Array, targets: jax.Array,
                      weights: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """Token accuracy of argmax(logits) as (correct_sum, weight_sum).

  A token is correct when its target is the first maximum of its logits (`jnp.argmax`'s
  tie rule): the target's logit is the maximum and no logit before the target's index
  equals that maximum. Computed that way, with plain reductions over the logits, instead
  of `jnp.argmax`'s variadic (value, index) reduction, which XLA:CPU ran slowly: it was
  ~18 % of the tiny model's training step (A/B, same process: 114 -> 95 ms median). The
  tie test is an int8 max over `(index < target) & (logit == max)`: XLA:CPU hands that
  reduction to its YNN library, and the [B, L, V] mask it reads is one byte an element
  (a max of the float logits masked to -inf before the target read a float32 copy
  of the logits: 4.8 -> 1.9 ms at [16, 14, 32128], docs/speed.md).

  Args:
    logits: float[B, L, V]; targets: int32[B, L]; weights: float32[B, L] or None.

  Returns:
    float32 scalars (sum of weights where argmax == target, sum of weights).
  """
  assert logits.shape[:-1] == targets.shape, (logits.shape, targets.shape)
  if weights is None:
    weights = jnp.ones(targets.shape, jnp.float32)
  weights = weights.astype(jnp.float32)
  logits = logits.astype(jnp.float32)
  targets = targets.astype(jnp.int32)
  top = jnp.max(logits, axis=-1)
  target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  index = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
  tie_before = jnp.max(((index < targets[..., None]) & (logits == top[..., None]))
                       .astype(jnp.int8), axis=-1)
  correct = ((target_logit >= top) & (tie_before == 0)).astype(jnp.float32)
  return jnp.sum(correct * weights), jnp.sum(weights)


def normalize_loss(loss_sum: jax.Array, weight_sum: jax.Array, normalization: str,
                   constant: float = 1.0) -> jax.Array:
  """Turns a loss sum into the scalar whose gradient is taken.

  Args:
    loss_sum: float32 scalar, summed over the (full, accumulated) batch.
    weight_sum: float32 scalar, number of real target tokens in that batch.
    normalization: "num_target_tokens" (mean per real target token; weight_sum clipped
      at 1 so an all-padding batch gives 0 not NaN), "constant" (divide by `constant`,
      T5's `loss_normalizing_factor`, e.g. 2048 * 114 = 233472), or "none" (the sum;
      t5x's pre-training default, fine under scale-invariant Adafactor).
    constant: the constant for "constant".

  Returns:
    float32 scalar.
  """
  if normalization == "num_target_tokens":
    return loss_sum / jnp.maximum(weight_sum, 1.0)
  if normalization == "constant":
    if not constant > 0:
      raise ValueError(f"loss normalization 'constant' needs constant > 0, got {constant}.")
    return loss_sum / constant
  if normalization == "none":
    return loss_sum
  raise ValueError(f"unknown loss normalization {normalization!r}; "
                   f"expected one of {list(NORMALIZATIONS)}.")
