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

import functools

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


# ---------------------------------------------------------------------------------------
# Token-tiled cross entropy: the output projection, the loss and the accuracy per chunk of
# tokens, so the float32 logits [B, T, V] never exist whole (forward or backward).

def tiled_cross_entropy(hidden: jax.Array, kernel: jax.Array, targets: jax.Array,
                        weights: jax.Array, *, chunk: int, logits_scale: float = 1.0,
                        label_smoothing: float = 0.0, z_loss: float = 0.0
                        ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """`weighted_cross_entropy` and `weighted_accuracy` of ``logits = scale * hidden @ kernel``,
  computed ``chunk`` tokens at a time with a hand-written gradient.

  Forward, per chunk of tokens: the float32 logits [chunk, V], their logsumexp, the loss and
  z-loss terms and the first-maximum accuracy test of `weighted_accuracy`; only the
  per-token logsumexp is kept. Backward, per chunk: the logits again, then
  ``d_logits = w * (softmax * (1 + 2 z_loss log_z) - q)`` (q the smoothed target
  distribution) times the loss cotangent, plus the z-loss output's own term, into the
  hidden states' and the kernel's gradients. Peak memory of the loss is one chunk's
  [chunk, V] float32 arrays instead of three [B * T, V] ones; the price is one more
  [chunk, D] x [D, V] product per chunk in the backward pass.

  Args:
    hidden: [B, T, D] final hidden states (any float dtype; the products run in it with
      float32 results, as `LogitsDense` / `Embed.attend`).
    kernel: [D, V] output projection (the embedding transposed for tied logits).
    targets: int32[B, T].
    weights: float32[B, T] loss weights (0 on padding).
    chunk: tokens per chunk (B * T is padded up to a multiple with zero-weight rows).
    logits_scale: factor on the logits (T5.1.0's emb_dim**-0.5 on tied logits; else 1).
    label_smoothing, z_loss: as `cross_entropy_per_token`.

  Returns:
    (loss_sum, z_loss_sum, weight_sum, correct_sum), float32 scalars (float64 for float64
    hidden states): the first three as
    `weighted_cross_entropy`, the last as `weighted_accuracy`'s first.
  """
  b, t, d = hidden.shape
  if kernel.shape[0] != d or targets.shape != (b, t) or weights.shape != (b, t):
    raise ValueError(f"tiled_cross_entropy needs hidden [B, T, D], kernel [D, V], targets and "
                     f"weights [B, T]; got {hidden.shape}, {kernel.shape}, {targets.shape}, "
                     f"{weights.shape}")
  if not (isinstance(chunk, int) and chunk > 0):
    raise ValueError(f"tiled_cross_entropy chunk must be a positive int, got {chunk!r}")
  n = b * t
  chunk = min(chunk, n)
  pad = -n % chunk
  h = jnp.pad(hidden.reshape(n, d), ((0, pad), (0, 0))).reshape(-1, chunk, d)
  y = jnp.pad(targets.reshape(n).astype(jnp.int32), (0, pad)).reshape(-1, chunk)
  w = jnp.pad(weights.reshape(n).astype(jnp.float32), (0, pad)).reshape(-1, chunk)
  loss, z, correct = _tiled(h, kernel, y, w, float(logits_scale), float(label_smoothing),
                            float(z_loss))
  return loss, z, jnp.sum(weights.astype(loss.dtype)), correct


def _acc(dtype):
  """The loss's dtype: float32, or float64 for float64 inputs (the tests' exact reference)."""
  return jnp.promote_types(dtype, jnp.float32)


def _chunk_logits(h, kernel, scale):
  """[chunk, D] x [D, V] -> float32 [chunk, V] (float64 for float64 inputs)."""
  logits = jnp.dot(h, kernel.astype(h.dtype), preferred_element_type=_acc(h.dtype))
  return logits * scale if scale != 1.0 else logits


def _smoothing(vocab, label_smoothing):
  """(confidence, low, normalizing constant) of t5x's label smoothing."""
  confidence = 1.0 - label_smoothing
  low = label_smoothing / (vocab - 1)
  constant = -(confidence * jnp.log(confidence) + (vocab - 1) * low * jnp.log(low + 1e-20))
  return confidence, low, constant


def _tiled_forward(h, kernel, y, w, scale, label_smoothing, z_loss):
  """Per-chunk sums; returns ((loss, z, correct), log_z [C, chunk])."""
  vocab = kernel.shape[1]

  def one(carry, xs):
    hc, yc, wc = xs
    logits = _chunk_logits(hc, kernel, scale)
    log_z = jax.nn.logsumexp(logits, axis=-1)
    target_logit = jnp.take_along_axis(logits, yc[:, None], axis=-1)[:, 0]
    log_p = target_logit - log_z
    if label_smoothing:
      confidence, low, constant = _smoothing(vocab, label_smoothing)
      sum_log_p = jnp.sum(logits, axis=-1) - vocab * log_z
      loss = -(confidence * log_p + low * (sum_log_p - log_p)) - constant
    else:
      loss = -log_p
    z = z_loss * jnp.square(log_z)
    top = jnp.max(logits, axis=-1)
    index = jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    tie_before = jnp.max(((index < yc[:, None]) & (logits == top[:, None])).astype(jnp.int8),
                         axis=-1)
    correct = ((target_logit >= top) & (tie_before == 0)).astype(jnp.float32)
    sums = (jnp.sum((loss + z) * wc), jnp.sum(z * wc), jnp.sum(correct * wc))
    return jax.tree.map(jnp.add, carry, sums), log_z

  zero = jnp.zeros((), _acc(h.dtype))
  return jax.lax.scan(one, (zero, zero, zero), (h, y, w.astype(_acc(h.dtype))))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _tiled(h, kernel, y, w, scale, label_smoothing, z_loss):
  sums, _ = _tiled_forward(h, kernel, y, w, scale, label_smoothing, z_loss)
  return sums


def _tiled_fwd(h, kernel, y, w, scale, label_smoothing, z_loss):
  sums, log_z = _tiled_forward(h, kernel, y, w, scale, label_smoothing, z_loss)
  return sums, (h, kernel, y, w, log_z)


def _tiled_bwd(scale, label_smoothing, z_loss, residuals, cotangents):
  h, kernel, y, w, log_z = residuals
  d_loss, d_z, _ = cotangents  # correct_sum is a count: no gradient
  vocab = kernel.shape[1]
  confidence, low, _ = _smoothing(vocab, label_smoothing) if label_smoothing else (1.0, 0.0, 0.0)

  def one(d_kernel, xs):
    hc, yc, wc, lz = xs
    logits = _chunk_logits(hc, kernel, scale)
    probs = jnp.exp(logits - lz[:, None])
    z_term = 2.0 * z_loss * lz[:, None] * probs          # d(z_loss * log_z^2) / d logits
    q = jnp.where(jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1) == yc[:, None],
                  confidence, low)
    d_logits = (d_loss * (probs - q + z_term) + d_z * z_term) * wc[:, None]
    if scale != 1.0:
      d_logits = d_logits * scale
    d_logits = d_logits.astype(hc.dtype)
    d_h = jnp.dot(d_logits, kernel.astype(hc.dtype).T, preferred_element_type=_acc(hc.dtype))
    d_kernel = d_kernel + jnp.dot(hc.T, d_logits, preferred_element_type=_acc(hc.dtype))
    return d_kernel, d_h.astype(hc.dtype)

  d_kernel, d_h = jax.lax.scan(one, jnp.zeros(kernel.shape, _acc(h.dtype)),
                               (h, y, w.astype(_acc(h.dtype)), log_z))
  return (d_h, d_kernel.astype(kernel.dtype), None, jnp.zeros_like(w))


_tiled.defvjp(_tiled_fwd, _tiled_bwd)
