"""Hand-computed checks of lm/losses.py."""
import math

import jax.numpy as jnp
import numpy as np
import pytest

from lm import losses


def _ref_ce(logits, target, ls=0.0, z=0.0):
  """Direct numpy version of t5x's loss for one token (one-hot / smoothed targets)."""
  logits = np.asarray(logits, np.float64)
  v = logits.shape[-1]
  log_z = math.log(np.sum(np.exp(logits)))
  logp = logits - log_z
  conf, low = 1.0 - ls, ls / (v - 1)
  q = np.full(v, low)
  q[target] = conf
  loss = -np.sum(q * logp)
  if ls:
    loss -= -(conf * math.log(conf) + (v - 1) * low * math.log(low + 1e-20))
  return loss + z * log_z ** 2, z * log_z ** 2


def test_cross_entropy_uniform_logits_is_log_vocab():
  logits = jnp.zeros((1, 2, 4))
  loss_sum, z_sum, w = losses.weighted_cross_entropy(logits, jnp.array([[1, 3]]))
  np.testing.assert_allclose(loss_sum, 2 * math.log(4), rtol=1e-6)
  assert float(z_sum) == 0.0 and float(w) == 2.0


def test_z_loss_adds_logsumexp_squared():
  # logits all 0 over V=4: log Z = log 4, z term = 1e-4 * log(4)^2 per token.
  logits = jnp.zeros((1, 1, 4))
  loss_sum, z_sum, _ = losses.weighted_cross_entropy(logits, jnp.array([[2]]), z_loss=1e-4)
  np.testing.assert_allclose(z_sum, 1e-4 * math.log(4) ** 2, rtol=1e-5)
  np.testing.assert_allclose(loss_sum, math.log(4) + 1e-4 * math.log(4) ** 2, rtol=1e-6)


def test_weights_mask_tokens_and_match_reference():
  logits = np.array([[[2.0, -1.0, 0.5], [0.0, 3.0, 1.0], [9.0, 9.0, 9.0]]], np.float32)
  targets = np.array([[0, 2, 1]])
  weights = np.array([[1.0, 1.0, 0.0]], np.float32)
  loss_sum, z_sum, w = losses.weighted_cross_entropy(
      jnp.asarray(logits), jnp.asarray(targets), jnp.asarray(weights), z_loss=1e-2)
  ref = [_ref_ce(logits[0, i], targets[0, i], z=1e-2) for i in range(2)]
  np.testing.assert_allclose(loss_sum, sum(r[0] for r in ref), rtol=1e-5)
  np.testing.assert_allclose(z_sum, sum(r[1] for r in ref), rtol=1e-5)
  assert float(w) == 2.0


def test_label_smoothing_matches_smoothed_one_hot_and_perfect_is_zero():
  logits = np.array([[[1.0, 2.0, -0.5, 0.3, 0.0]]], np.float32)
  ls = 0.1
  loss, _ = losses.cross_entropy_per_token(jnp.asarray(logits), jnp.array([[1]]),
                                           label_smoothing=ls)
  np.testing.assert_allclose(loss[0, 0], _ref_ce(logits[0, 0], 1, ls=ls)[0], rtol=1e-5)
  # Logits equal to the log of the smoothed target distribution give exactly 0 loss
  # (the normalizing constant is the distribution's entropy).
  q = np.full(5, ls / 4)
  q[3] = 1 - ls
  loss, _ = losses.cross_entropy_per_token(jnp.log(jnp.asarray(q))[None, None],
                                           jnp.array([[3]]), label_smoothing=ls)
  np.testing.assert_allclose(loss[0, 0], 0.0, atol=1e-6)


def test_bfloat16_logits_are_promoted():
  logits = jnp.zeros((1, 1, 8), jnp.bfloat16)
  loss, _ = losses.cross_entropy_per_token(logits, jnp.array([[0]]))
  assert loss.dtype == jnp.float32
  np.testing.assert_allclose(loss, [[math.log(8)]], rtol=1e-6)


def test_accuracy_counts_weighted_argmax_hits():
  logits = jnp.array([[[0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [0.0, 5.0]]])
  targets = jnp.array([[1, 1, 0, 0]])
  weights = jnp.array([[1.0, 1.0, 1.0, 0.0]])
  correct, w = losses.weighted_accuracy(logits, targets, weights)
  assert float(correct) == 2.0 and float(w) == 3.0


def test_normalize_loss():
  assert float(losses.normalize_loss(jnp.float32(10.0), jnp.float32(4.0),
                                     "num_target_tokens")) == 2.5
  assert float(losses.normalize_loss(jnp.float32(10.0), jnp.float32(0.0),
                                     "num_target_tokens")) == 10.0  # clipped at 1
  assert float(losses.normalize_loss(jnp.float32(10.0), jnp.float32(4.0), "constant",
                                     4.0)) == 2.5
  assert float(losses.normalize_loss(jnp.float32(10.0), jnp.float32(4.0), "none")) == 10.0
  with pytest.raises(ValueError, match=r"unknown loss normalization 'mean'; expected one of \["):
    losses.normalize_loss(jnp.float32(1.0), jnp.float32(1.0), "mean")
  with pytest.raises(ValueError, match="constant > 0"):
    losses.normalize_loss(jnp.float32(1.0), jnp.float32(1.0), "constant", 0.0)
  with pytest.raises(ValueError, match="constant > 0, got -2.0"):
    losses.normalize_loss(jnp.float32(1.0), jnp.float32(1.0), "constant", -2.0)
  assert float(losses.normalize_loss(jnp.float32(10.0), jnp.float32(4.0), "constant",
                                     0.5)) == 20.0
  # The default constant is 1: the sum itself.
  assert float(losses.normalize_loss(jnp.float32(10.0), jnp.float32(4.0), "constant")) == 10.0
  # Names that sort before / after the known ones are refused too (no ordering shortcut).
  for name in ("batch", "sum", "zzz"):
    with pytest.raises(ValueError, match=f"unknown loss normalization '{name}'"):
      losses.normalize_loss(jnp.float32(1.0), jnp.float32(1.0), name)


def test_normalize_loss_compares_names_by_value():
  """A name from a command line is a new string object, not the interned literal."""
  built = {name: "".join(list(name)) for name in losses.NORMALIZATIONS}
  assert all(built[n] is not n for n in built)
  assert float(losses.normalize_loss(jnp.float32(10.0), jnp.float32(4.0),
                                     built["num_target_tokens"])) == 2.5
  assert float(losses.normalize_loss(jnp.float32(10.0), jnp.float32(4.0), built["constant"],
                                     4.0)) == 2.5
  assert float(losses.normalize_loss(jnp.float32(10.0), jnp.float32(4.0), built["none"])) == 10.0


def test_accuracy_with_all_negative_logits():
  """argmax over negative logits: the first position's target is correct when it holds the
  maximum (the masked-out positions must not count as logits of 0)."""
  logits = jnp.array([[[-1.0, -3.0, -2.0], [-3.0, -1.0, -1.0], [-3.0, -2.0, -1.0]]])
  correct, w = losses.weighted_accuracy(logits, jnp.array([[0, 1, 2]]))
  assert float(correct) == 3.0 and float(w) == 3.0
  correct, _ = losses.weighted_accuracy(logits, jnp.array([[1, 2, 0]]))
  assert float(correct) == 0.0  # index 2 of row 2 ties with index 1, which comes first


@pytest.mark.parametrize("targets_shape", [(2, 2), (2, 4), (3, 3), (6,)])
def test_mismatched_shapes_are_refused(targets_shape):
  """Logits [2, 3, V] against targets (or weights) of another shape would broadcast quietly."""
  logits = jnp.zeros((2, 3, 5))
  targets = jnp.zeros(targets_shape, jnp.int32)
  for fn in (losses.cross_entropy_per_token, losses.weighted_cross_entropy,
             losses.weighted_accuracy):
    with pytest.raises(AssertionError):
      fn(logits, targets)
  with pytest.raises(AssertionError):
    losses.weighted_cross_entropy(logits, jnp.zeros((2, 3), jnp.int32),
                                  jnp.ones(targets_shape))
