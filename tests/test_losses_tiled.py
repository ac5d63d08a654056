"""lm.losses.tiled_cross_entropy against lm.losses on the whole logits (float32, which
lm.losses computes in) and against lm.losses' definition written out in float64: the sums,
the accuracy and the gradients, with padding, label smoothing, z-loss, a logits scale and
tied maxima."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lm import losses


def _case(dtype, seed=0, b=3, t=5, d=8, v=37):
  rng = np.random.default_rng(seed)
  h = rng.normal(size=(b, t, d))
  k = rng.normal(size=(d, v))
  k[:, 7] = k[:, 3]  # a tie: column 7 equals column 3, so argmax picks 3
  y = rng.integers(0, v, (b, t))
  y[0, :2] = 7  # targets on the tied column (never correct) and on its twin
  y[1, :2] = 3
  w = (rng.random((b, t)) > 0.3).astype(np.float64)
  w[2, -2:] = 0.0  # padding
  return (jnp.asarray(h, dtype), jnp.asarray(k, dtype), jnp.asarray(y, jnp.int32),
          jnp.asarray(w, jnp.float32 if dtype == jnp.float32 else dtype))


def _reference(h, k, y, w, scale, ls, z):
  """lm.losses on the whole logits (which it computes in float32)."""
  logits = scale * jnp.einsum("btd,dv->btv", h, k)
  loss, zs, ws = losses.weighted_cross_entropy(logits, y, w, label_smoothing=ls, z_loss=z)
  correct, _ = losses.weighted_accuracy(logits, y, w)
  return loss, zs, ws, correct


def _reference64(h, k, y, w, scale, ls, z):
  """lm.losses' definition (t5x's) written out in float64: the smoothed target
  distribution q over the whole vocabulary, its cross entropy minus its entropy, z-loss."""
  logits = scale * jnp.einsum("btd,dv->btv", h, k)
  v = logits.shape[-1]
  log_p = jax.nn.log_softmax(logits, axis=-1)
  q = jnp.where(jax.nn.one_hot(y, v, dtype=bool), 1.0 - ls, ls / (v - 1))
  entropy = -jnp.sum(jnp.where(q > 0, q * jnp.log(jnp.where(q > 0, q, 1.0)), 0.0), axis=-1)
  zt = z * jnp.square(jax.nn.logsumexp(logits, axis=-1))
  per_token = -jnp.sum(q * log_p, axis=-1) - entropy + zt
  top = jnp.argmax(logits, axis=-1)
  return (jnp.sum(per_token * w), jnp.sum(zt * w), jnp.sum(w), jnp.sum((top == y) * w))


def _check(dtype, chunk, scale, ls, z, rtol, atol):
  h, k, y, w = _case(dtype)
  reference = _reference64 if dtype == jnp.float64 else _reference
  got = losses.tiled_cross_entropy(h, k, y, w, chunk=chunk, logits_scale=scale,
                                   label_smoothing=ls, z_loss=z)
  want = reference(h, k, y, w, scale, ls, z)
  for name, g, x in zip(("loss", "z", "weight", "correct"), got, want):
    np.testing.assert_allclose(np.asarray(g), np.asarray(x), rtol=rtol, atol=atol, err_msg=name)

  # Gradients of a mix of both differentiable outputs (the loss and the z-loss term).
  def objective(fn):
    return lambda h, k: (lambda s: s[0] + 0.3 * s[1])(fn(h, k))
  tiled = objective(lambda h, k: losses.tiled_cross_entropy(
      h, k, y, w, chunk=chunk, logits_scale=scale, label_smoothing=ls, z_loss=z))
  plain = objective(lambda h, k: reference(h, k, y, w, scale, ls, z))
  for g, x in zip(jax.grad(tiled, (0, 1))(h, k), jax.grad(plain, (0, 1))(h, k)):
    assert g.dtype == x.dtype
    np.testing.assert_allclose(np.asarray(g), np.asarray(x), rtol=rtol, atol=atol)


@pytest.mark.parametrize("chunk,scale,ls,z", [
    (4, 1.0, 0.0, 0.0),     # 15 tokens in chunks of 4: one padded chunk
    (15, 1.0, 0.1, 1e-2),   # one chunk, label smoothing and z-loss
    (1, 0.5, 0.1, 1e-2),    # a token a chunk, tied-logits scale
    (64, 1.0, 0.0, 1e-4),   # chunk larger than the tokens
])
def test_tiled_equals_losses_in_float64(chunk, scale, ls, z):
  with jax.enable_x64(True):
    _check(jnp.float64, chunk, scale, ls, z, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("chunk,ls,z", [(4, 0.0, 1e-4), (6, 0.1, 1e-2)])
def test_tiled_equals_losses_in_float32(chunk, ls, z):
  _check(jnp.float32, chunk, 1.0, ls, z, rtol=2e-5, atol=2e-5)


def test_accuracy_uses_the_first_maximum():
  """Targets on the tied column 7 are never correct (argmax is its twin 3); the weights of
  correct tokens add up exactly as weighted_accuracy's."""
  with jax.enable_x64(True):
    h, k, y, w = _case(jnp.float64)
    k = k.at[:, 3].set(k[:, 3] + 100.0).at[:, 7].set(k[:, 3])  # columns 3 and 7 win, tied
    h = jnp.abs(h)
    got = losses.tiled_cross_entropy(h, k, y, w, chunk=4)[3]
    want = _reference64(h, k, y, w, 1.0, 0.0, 0.0)[3]
    assert float(got) == float(want)
    assert float(got) == float(jnp.sum(w * (y == 3)))


def test_bad_shapes_and_chunk_are_clear_errors():
  h, k, y, w = _case(jnp.float32)
  with pytest.raises(ValueError, match="hidden \\[B, T, D\\], kernel \\[D, V\\]"):
    losses.tiled_cross_entropy(h, k.T, y, w, chunk=4)
  with pytest.raises(ValueError, match="chunk must be a positive int"):
    losses.tiled_cross_entropy(h, k, y, w, chunk=0)


@pytest.mark.parametrize("mask_type,tied", [("causal", False), ("encoder_decoder", True)])
def test_train_loss_tiled_equals_whole_logits(mask_type, tied):
  """lm.steps' loss with config.loss.tiled_chunk_tokens: the same sums (loss, z-loss,
  accuracy) and parameter gradients as the whole logits, untied and tied (scaled) logits."""
  import os
  import sys
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "model"))
  from model_helpers import random_params, tiny  # pylint: disable=import-outside-toplevel
  from lm import steps  # pylint: disable=import-outside-toplevel
  from lm.model.transformer import Transformer  # pylint: disable=import-outside-toplevel
  import flax.linen as nn  # pylint: disable=import-outside-toplevel
  model = Transformer(tiny(mask_type=mask_type, tie_embeddings=tied))
  rng = np.random.default_rng(5)
  batch = {"decoder_input_tokens": rng.integers(1, 32, (2, 7)),
           "decoder_target_tokens": rng.integers(1, 32, (2, 7))}
  if mask_type == "encoder_decoder":
    batch["encoder_input_tokens"] = rng.integers(1, 32, (2, 6))
  batch = {k: jnp.asarray(v, jnp.int32) for k, v in batch.items()}
  batch["decoder_target_tokens"] = batch["decoder_target_tokens"].at[1, -2:].set(0)  # padding
  params = nn.unbox(random_params(model, batch))

  def run(chunk):
    return jax.grad(steps._loss_sums, has_aux=True)(  # pylint: disable=protected-access
        params, batch, None, model=model, label_smoothing=0.1, z_loss=1e-3,
        tiled_chunk_tokens=chunk)
  g_tiled, s_tiled = run(3)
  g_whole, s_whole = run(0)
  for k in s_whole:
    np.testing.assert_allclose(s_tiled[k], s_whole[k], rtol=2e-5, atol=1e-5, err_msg=k)
  for a, b in zip(jax.tree.leaves(g_tiled), jax.tree.leaves(g_whole)):
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


def test_config_switch_reaches_the_steps():
  from configs import gpt3, t5  # pylint: disable=import-outside-toplevel
  from lm import config as config_lib  # pylint: disable=import-outside-toplevel
  assert config_lib.train_step_kwargs(t5.get_config("size=tiny"))["tiled_chunk_tokens"] == 0
  assert config_lib.train_step_kwargs(gpt3.get_config("size=125m"))["tiled_chunk_tokens"] == 0
  big = config_lib.derive(gpt3.get_config("size=1_3b"))
  assert config_lib.train_step_kwargs(big)["tiled_chunk_tokens"] == 2048
  assert config_lib.eval_step_kwargs(big)["tiled_chunk_tokens"] == 2048
