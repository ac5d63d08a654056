"""lm.losses against closed forms written here in float64 NumPy (independent of lm).

Per token, with p = softmax(logits), q the (smoothed) target distribution
(1 - ls on the target, ls / (V - 1) elsewhere), log Z = logsumexp(logits):
  loss  = -sum_v q_v log p_v - H(q) + z * (log Z)^2
  dloss/dlogits = p - q + 2 z log Z p
and the scalar whose gradient is taken is sum_t w_t loss_t divided by max(sum w, 1)
("num_target_tokens"), by a constant ("constant") or by 1 ("none").

Tolerances: every quantity is a sum of O(V) float32 terms of magnitude <= max|value|, so
its error is bounded by ~V * eps32 * max|value| (plus the same for log Z); we allow 8x that.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lm import losses

EPS32 = float(np.finfo(np.float32).eps)


def _np_softmax(x):
  x = np.asarray(x, np.float64)
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _np_logsumexp(x):
  x = np.asarray(x, np.float64)
  m = x.max(-1)
  return m + np.log(np.exp(x - m[..., None]).sum(-1))


def _np_target_dist(targets, vocab, ls):
  q = np.full(targets.shape + (vocab,), ls / (vocab - 1) if ls else 0.0)
  np.put_along_axis(q, targets[..., None], 1.0 - ls, axis=-1)
  return q


def _np_loss_and_grad(logits, targets, weights, ls, z, divisor):
  """float64 loss sum / divisor and its gradient w.r.t. logits, [B, L, V]."""
  logits = np.asarray(logits, np.float64)
  vocab = logits.shape[-1]
  q = _np_target_dist(targets, vocab, ls)
  p = _np_softmax(logits)
  log_z = _np_logsumexp(logits)
  logp = logits - log_z[..., None]
  entropy = -np.sum(np.where(q > 0, q * np.log(np.where(q > 0, q, 1.0)), 0.0), -1)
  per_token = -np.sum(q * logp, -1) - entropy + z * log_z ** 2
  grad = (p - q + 2 * z * log_z[..., None] * p) * weights[..., None]
  return np.sum(per_token * weights) / divisor, grad / divisor, z * log_z ** 2


def _case(seed=0, b=2, l=5, v=7, scale=3.0):
  rng = np.random.default_rng(seed)
  logits = (scale * rng.normal(size=(b, l, v))).astype(np.float32)
  targets = rng.integers(0, v, size=(b, l)).astype(np.int32)
  weights = (rng.random((b, l)) < 0.7).astype(np.float32)
  weights[0, 0] = 1.0
  return logits, targets, weights


def _lm_objective(logits, targets, weights, ls, z, normalization, constant):
  loss_sum, _, weight_sum = losses.weighted_cross_entropy(
      logits, targets, weights, label_smoothing=ls, z_loss=z)
  return losses.normalize_loss(loss_sum, weight_sum, normalization, constant)


@pytest.mark.parametrize("ls,z", [(0.0, 0.0), (0.0, 1e-2), (0.1, 0.0), (0.2, 3e-2)])
@pytest.mark.parametrize("normalization,constant", [
    ("num_target_tokens", 1.0), ("constant", 7.5), ("none", 1.0)])
def test_normalised_loss_and_logit_gradient_match_closed_form(ls, z, normalization, constant):
  logits, targets, weights = _case()
  divisor = {"num_target_tokens": max(weights.sum(), 1.0), "constant": constant,
             "none": 1.0}[normalization]
  want, want_grad, _ = _np_loss_and_grad(logits, targets, weights, ls, z, divisor)
  got, got_grad = jax.value_and_grad(_lm_objective)(
      jnp.asarray(logits), jnp.asarray(targets), jnp.asarray(weights), ls, z,
      normalization, constant)
  got, got_grad = np.asarray(got), np.asarray(got_grad)
  assert np.isfinite(got) and np.all(np.isfinite(got_grad))
  v = logits.shape[-1]
  # Loss: sum over tokens of terms of size <= |logit|, each with O(V eps) relative error.
  scale = np.sum(np.abs(logits).max(-1) * weights) / divisor + 1.0
  np.testing.assert_allclose(got, want, rtol=0, atol=8 * v * EPS32 * scale)
  # Gradient entries are O(1 / divisor) with O(V eps) relative error each.
  np.testing.assert_allclose(got_grad, want_grad, rtol=0, atol=8 * v * EPS32 / divisor * (1 + 4 * z * np.abs(logits).max()))
  # The gradient is zero exactly where the weight is zero (padding contributes nothing).
  assert np.all(got_grad[weights == 0] == 0)


def test_z_term_and_weight_sum_match_closed_form():
  logits, targets, weights = _case(seed=1)
  _, _, z_tok = _np_loss_and_grad(logits, targets, weights, 0.0, 0.02, 1.0)
  loss_sum, z_sum, w_sum = losses.weighted_cross_entropy(
      jnp.asarray(logits), jnp.asarray(targets), jnp.asarray(weights), z_loss=0.02)
  assert np.isfinite(float(loss_sum))
  np.testing.assert_allclose(float(z_sum), np.sum(z_tok * weights), rtol=1e-5)
  assert float(w_sum) == float(weights.sum())


def test_loss_is_shift_invariant_and_stable_for_large_logits():
  """Softmax cross entropy does not change when a constant is added to every logit (the
  z-term does); with logits near 1e4 a naive exp would overflow."""
  logits, targets, weights = _case(seed=2, scale=1.0)
  base, _, _ = losses.weighted_cross_entropy(jnp.asarray(logits), jnp.asarray(targets),
                                             jnp.asarray(weights), label_smoothing=0.1)
  shifted, _, _ = losses.weighted_cross_entropy(jnp.asarray(logits + 1e4),
                                                jnp.asarray(targets), jnp.asarray(weights),
                                                label_smoothing=0.1)
  assert np.isfinite(float(shifted))
  # 1e4 has float32 spacing ~1e-3: the shifted logits themselves are rounded by that much.
  np.testing.assert_allclose(float(shifted), float(base), atol=1e-3 * weights.sum())


def test_per_token_loss_and_z_match_closed_form_elementwise():
  logits, targets, weights = _case(seed=3, l=4, v=5)
  ones = np.ones_like(weights)
  _, _, z_tok = _np_loss_and_grad(logits, targets, ones, 0.15, 0.05, 1.0)
  per_tok = []
  for b in range(logits.shape[0]):
    for t in range(logits.shape[1]):
      w = np.zeros_like(weights)
      w[b, t] = 1.0
      per_tok.append(_np_loss_and_grad(logits, targets, w, 0.15, 0.05, 1.0)[0])
  loss, z = losses.cross_entropy_per_token(jnp.asarray(logits), jnp.asarray(targets),
                                           label_smoothing=0.15, z_loss=0.05)
  assert np.all(np.isfinite(loss))
  np.testing.assert_allclose(np.asarray(loss).ravel(), per_tok, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(z), z_tok, rtol=1e-5)


def test_accuracy_equals_hand_count_including_ties_and_weights():
  # Row 0: argmax 2 (hit), argmax 0 vs target 1 (miss), tie 1/3 -> first max 1 (hit).
  # Row 1: argmax 3 (hit, weight 0.5), argmax 1 but weight 0 (ignored), tie -> 0 vs 3 (miss).
  logits = jnp.array([[[0., 1., 5., 2.], [3., 2., 1., 0.], [0., 4., 1., 4.]],
                      [[0., 1., 2., 9.], [0., 8., 1., 2.], [6., 1., 1., 6.]]])
  targets = jnp.array([[2, 1, 1], [3, 1, 3]])
  weights = jnp.array([[1., 1., 1.], [0.5, 0., 1.]])
  correct, total = losses.weighted_accuracy(logits, targets, weights)
  assert float(correct) == 1 + 0 + 1 + 0.5 + 0 + 0
  assert float(total) == 4.5
  correct, total = losses.weighted_accuracy(logits, targets)
  assert (float(correct), float(total)) == (4.0, 6.0)


@pytest.mark.parametrize("seed", range(3))
def test_accuracy_is_numpys_first_argmax_under_many_ties(seed):
  # Logits drawn from {0, 1, 2}: most rows have several tied maxima, so a tie rule other
  # than the first maximum (NumPy's and T5's argmax) shows.
  rng = np.random.default_rng(seed)
  logits = rng.integers(0, 3, (4, 50, 7)).astype(np.float32)
  targets = rng.integers(0, 7, (4, 50))
  weights = rng.uniform(size=(4, 50)).astype(np.float32)
  expect = np.sum((np.argmax(logits, -1) == targets) * weights, dtype=np.float64)
  correct, total = losses.weighted_accuracy(jnp.asarray(logits), jnp.asarray(targets),
                                            jnp.asarray(weights))
  assert np.isfinite(float(correct))
  np.testing.assert_allclose(float(correct), expect, rtol=1e-6)
  np.testing.assert_allclose(float(total), weights.sum(dtype=np.float64), rtol=1e-6)


@pytest.mark.parametrize("seed", range(2))
def test_accuracy_is_numpys_first_argmax_with_infinite_logits(seed):
  # Rows from {-inf, 0, +inf}: rows that are all -inf (argmax 0), ties at +inf, and the
  # fixed row 0 = all -inf, whose first index is the argmax.
  rng = np.random.default_rng(seed)
  logits = rng.choice(np.array([-np.inf, 0.0, np.inf], np.float32), (3, 40, 5),
                      p=[0.6, 0.2, 0.2])
  logits[:, 0] = -np.inf
  targets = rng.integers(0, 5, (3, 40))
  targets[:, 0] = [0, 1, 0]
  expect = np.sum(np.argmax(logits, -1) == targets)
  correct, total = losses.weighted_accuracy(jnp.asarray(logits), jnp.asarray(targets))
  assert float(correct) == expect and float(total) == 120


def test_normalize_loss_all_padding_gives_zero_gradient_not_nan():
  logits = jnp.asarray(_case()[0])
  targets = jnp.zeros(logits.shape[:2], jnp.int32)
  weights = jnp.zeros(logits.shape[:2], jnp.float32)
  val, grad = jax.value_and_grad(_lm_objective)(logits, targets, weights, 0.1, 1e-2,
                                                "num_target_tokens", 1.0)
  assert float(val) == 0.0
  assert np.all(np.asarray(grad) == 0.0)


def test_label_smoothing_normalising_constant_is_entropy_of_smoothed_target():
  """Uniform logits: loss = log V - H(q) exactly (q the smoothed one-hot)."""
  v, ls = 6, 0.3
  loss, _ = losses.cross_entropy_per_token(jnp.zeros((1, 1, v)), jnp.array([[4]]),
                                           label_smoothing=ls)
  low = ls / (v - 1)
  entropy = -((1 - ls) * math.log(1 - ls) + (v - 1) * low * math.log(low))
  np.testing.assert_allclose(float(loss[0, 0]), math.log(v) - entropy, rtol=1e-5)
