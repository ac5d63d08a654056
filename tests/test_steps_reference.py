"""lm.steps against computations written independently of it.

Plain SGD with learning rate LR = 2^20 makes the parameter update equal to -LR times the
gradient (the power of two scales exactly, and it makes the rounding of params + update
negligible against the update), so
a train step can be checked against jax.grad of a loss written here from scratch
(log-softmax cross entropy with label smoothing and z-loss, weighted, divided by the
WHOLE batch's normaliser) on the full batch: gradient accumulation over microbatches must
give the large batch's gradient, and the sharded step the single-device one.

Tolerances: both sides compute the same float32 function in a different order (summing
microbatches / summing over devices), so they differ by rounding only. The tiny model has
reductions over <= 64 terms and ~10 layers of ops, so a relative error per gradient
entry of 64 * 10 * eps32 ~ 8e-5 is a safe worst case, scaled by each leaf's largest
gradient entry; observed differences are ~100x smaller.
"""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lm import partitioning, steps
from lm.model.transformer import Transformer, TransformerConfig

EPS32 = float(np.finfo(np.float32).eps)
LR = 2.0 ** 20
TINY = dict(vocab_size=64, emb_dim=32, num_heads=4, head_dim=8, mlp_dim=64,
            num_encoder_layers=1, num_decoder_layers=1, dtype="float32")


def _batch(b=8, li=12, lt=6, seed=0):
  rng = np.random.default_rng(seed)
  inputs = rng.integers(2, 64, size=(b, li)).astype(np.int32)
  inputs[:, -3:] = 0
  targets = rng.integers(2, 64, size=(b, lt)).astype(np.int32)
  dec_in = np.concatenate([np.zeros((b, 1), np.int32), targets[:, :-1]], axis=1)
  weights = np.ones((b, lt), np.float32)
  # Very uneven token counts per row, including a row with none: per-microbatch means
  # would differ from the whole-batch mean.
  for row, n in enumerate([1, 6, 2, 0, 5, 6, 3, 4][:b]):
    weights[row, n:] = 0.0
    targets[row, n:] = 0
    if n:
      targets[row, n - 1] = 1  # EOS: a target token like any other (id 1 > 0)
  inputs[:, -4] = 1  # the inputs' EOS before their padding
  return {"encoder_input_tokens": inputs, "decoder_input_tokens": dec_in,
          "decoder_target_tokens": targets, "decoder_loss_weights": weights}


def _reference_objective(params, batch, model, *, ls, z, normalization, constant,
                         dropout_rng=None):
  """sum_t w_t [CE_ls(t) + z logZ_t^2] / normaliser, written without lm.losses."""
  if dropout_rng is None:
    logits = model.apply({"params": params}, batch)
  else:
    logits = model.apply({"params": params}, batch, enable_dropout=True,
                         rngs={"dropout": dropout_rng})
  logits = logits.astype(jnp.float32)
  v = logits.shape[-1]
  logp = jax.nn.log_softmax(logits)
  onehot = jax.nn.one_hot(batch["decoder_target_tokens"], v)
  q = onehot * (1 - ls) + (1 - onehot) * (ls / (v - 1))
  ce = -jnp.sum(q * logp, -1)
  log_z = jax.scipy.special.logsumexp(logits, -1)
  w = batch["decoder_loss_weights"]
  total = jnp.sum((ce + z * log_z ** 2) * w)
  norm = {"num_target_tokens": jnp.maximum(jnp.sum(w), 1.0), "constant": constant,
          "none": 1.0}[normalization]
  return total / norm


def _model_and_params():
  model = Transformer(TransformerConfig(**TINY))
  params = steps.create_train_state(jax.random.key(0), _batch(), model=model,
                                    tx=optax.sgd(LR)).params
  return model, params


def _sgd_state(params):
  """Step 0 of plain SGD with learning rate LR on `params`."""
  return steps.TrainState(step=jnp.zeros((), jnp.int32), params=params,
                          opt_state=optax.sgd(LR).init(params), rng=jax.random.key(1))


def _assert_close_to_gradient(got, want, what):
  for (path, g), w in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want)):
    g, w = np.asarray(g), np.asarray(w)
    assert np.all(np.isfinite(g)), (what, path)
    scale = np.abs(w).max()
    assert scale > 0, (what, path)  # every param gets a gradient in this batch
    np.testing.assert_allclose(g, w, rtol=0, atol=64 * 10 * EPS32 * scale,
                               err_msg=f"{what} {jax.tree_util.keystr(path)}")


@pytest.mark.parametrize("normalization,constant,k", [
    ("num_target_tokens", 1.0, 4),
    pytest.param("constant", 13.0, 2, marks=pytest.mark.slow),
    pytest.param("none", 1.0, 8, marks=pytest.mark.slow)])
def test_accumulated_sgd_update_is_minus_full_batch_gradient(normalization, constant, k):
  model, params = _model_and_params()
  batch = _batch()
  ls, z = 0.1, 1e-3
  want = jax.jit(jax.grad(functools.partial(
      _reference_objective, model=model, ls=ls, z=z, normalization=normalization,
      constant=constant)))(params, batch)
  tx = optax.sgd(LR)
  state = _sgd_state(params)
  step = jax.jit(functools.partial(
      steps.train_step, model=model, tx=tx, z_loss=z, label_smoothing=ls,
      normalization=normalization, normalizing_constant=constant, num_microbatches=k))
  new, metrics = step(state, batch)
  update = jax.tree.map(lambda a, b: (b - a) / LR, params, new.params)
  _assert_close_to_gradient(jax.tree.map(jnp.negative, update), want, f"k={k}")
  # Metrics: sums over the whole batch, checked against independent counts.
  w = batch["decoder_loss_weights"]
  assert float(metrics["target_tokens"][0]) == float(w.sum()) == 27.0
  assert float(metrics["tokens"][0]) == float(
      (batch["decoder_target_tokens"] > 0).sum() + (batch["encoder_input_tokens"] > 0).sum())
  # lm's reported loss also subtracts the smoothed target's entropy per token (t5x's
  # normalizing constant, no effect on the gradient).
  v = TINY["vocab_size"]
  entropy = -((1 - ls) * np.log(1 - ls) + ls * np.log(ls / (v - 1)))
  loss_value = _reference_objective(params, batch, model, ls=ls, z=z,
                                    normalization="none", constant=1.0) - entropy * w.sum()
  np.testing.assert_allclose(float(metrics["loss"][0]), float(loss_value), rtol=1e-5)
  # The z-loss term on its own (z sum_t w_t logZ_t^2), and cross_entropy = loss without it.
  logits = np.asarray(model.apply({"params": params}, batch), np.float64)
  log_z = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
  z_value = z * float(np.sum(w * log_z ** 2))
  assert z_value > 1e-3 * float(loss_value)  # large enough to show in cross_entropy
  np.testing.assert_allclose(float(metrics["z_loss"][0]), z_value, rtol=1e-4)
  np.testing.assert_allclose(float(metrics["cross_entropy"][0]), float(loss_value) - z_value,
                             rtol=1e-5)
  for name in ("loss", "cross_entropy", "z_loss", "accuracy"):
    assert float(metrics[name][1]) == 27.0, name
  np.testing.assert_allclose(
      float(metrics["grad_norm"][0]),
      np.sqrt(sum(np.sum(np.square(np.asarray(g))) for g in jax.tree.leaves(want))),
      rtol=1e-4)
  assert int(new.step) == 1


def test_eval_metrics_equal_hand_counts():
  model, params = _model_and_params()
  batch = _batch(seed=3)
  m = jax.jit(functools.partial(steps.eval_step, model=model, z_loss=0.0))(params, batch)
  logits = np.asarray(model.apply({"params": params}, batch))
  w = batch["decoder_loss_weights"]
  hits = float(np.sum((logits.argmax(-1) == batch["decoder_target_tokens"]) * w))
  assert float(m["accuracy"][0]) == hits
  assert float(m["accuracy"][1]) == float(w.sum())
  ce = _reference_objective(params, batch, model, ls=0.0, z=0.0, normalization="none",
                            constant=1.0)
  np.testing.assert_allclose(float(m["cross_entropy"][0]), float(ce), rtol=1e-5)
  # A random-init model is near chance; make accuracy non-trivial by construction:
  # targets set to the model's own argmax on the weighted positions give accuracy 1.
  batch2 = dict(batch, decoder_target_tokens=np.where(w > 0, logits.argmax(-1), 0)
                .astype(np.int32))
  m2 = jax.jit(functools.partial(steps.eval_step, model=model))(params, batch2)
  assert float(m2["accuracy"][0]) == float(w.sum())


def test_eval_defaults_no_z_loss_no_smoothing_and_weights_from_nonzero_targets():
  """eval_step's defaults are z_loss 0 and label smoothing 0; a batch without
  decoder_loss_weights weighs every non-padding target (EOS, id 1, included)."""
  model, params = _model_and_params()
  batch = _batch(seed=4)
  unweighted = {k: v for k, v in batch.items() if k != "decoder_loss_weights"}
  m = jax.jit(functools.partial(steps.eval_step, model=model))(params, unweighted)
  targets = batch["decoder_target_tokens"]
  assert float(m["z_loss"][0]) == 0.0
  assert float(m["target_tokens"][0]) == float((targets > 0).sum()) == 27.0
  ce = _reference_objective(params, batch, model, ls=0.0, z=0.0, normalization="none",
                            constant=1.0)
  for name in ("loss", "cross_entropy"):
    np.testing.assert_allclose(float(m[name][0]), float(ce), rtol=1e-5)
    assert float(m[name][1]) == 27.0
  assert float(m["tokens"][0]) == float((targets > 0).sum() + (batch["encoder_input_tokens"] > 0).sum())


def test_train_step_defaults_and_dropout_switch():
  """train_step's defaults (z_loss 0, no smoothing, num_target_tokens, k = 1, dropout on)
  give the plain cross entropy's gradient under dropout masks drawn from
  fold_in(fold_in(state.rng, state.step), microbatch 0), the derivation the module
  docstring states (and resumed runs rely on); `dropout=False` gives the deterministic
  gradient. The masks change with the step and the key."""
  model = Transformer(TransformerConfig(**TINY, dropout_rate=0.3))
  batch = _batch(seed=5)
  tx = optax.sgd(LR)
  state = steps.create_train_state(jax.random.key(0), batch, model=model, tx=tx)
  state = state.replace(step=jnp.asarray(7, jnp.int32))
  objective = functools.partial(_reference_objective, model=model, ls=0.0, z=0.0,
                                normalization="num_target_tokens", constant=1.0)
  want_plain = jax.jit(jax.grad(objective))(state.params, batch)
  rng = jax.random.fold_in(jax.random.fold_in(state.rng, 7), 0)
  want_dropout = jax.jit(jax.grad(functools.partial(objective, dropout_rng=rng)))(
      state.params, batch)

  def grad_of(step_fn, s):
    new, metrics = step_fn(s, batch)
    return jax.tree.map(lambda a, b: (a - b) / LR, s.params, new.params), metrics

  plain, m = grad_of(jax.jit(functools.partial(steps.train_step, model=model, tx=tx,
                                               dropout=False)), state)
  _assert_close_to_gradient(plain, want_plain, "dropout=False")
  assert float(m["z_loss"][0]) == 0.0
  assert np.isnan(float(m["learning_rate"][0]))  # no schedule given: nothing to report
  dropped = jax.jit(functools.partial(steps.train_step, model=model, tx=tx))
  g1, m1 = grad_of(dropped, state)
  _assert_close_to_gradient(g1, want_dropout, "dropout=True")
  _, m3 = grad_of(dropped, state.replace(step=state.step + 1))
  _, m4 = grad_of(dropped, state.replace(rng=jax.random.key(9)))
  loss = lambda metrics: float(metrics["loss"][0])
  assert len({loss(m1), loss(m3), loss(m4), loss(m)}) == 4, (loss(m1), loss(m3), loss(m4), loss(m))


def test_constant_normalization_defaults_to_one():
  """normalization="constant" without a constant divides by 1: the summed loss's gradient."""
  model, params = _model_and_params()
  batch = _batch(seed=6)
  tx = optax.sgd(LR)
  state = _sgd_state(params)
  new, _ = jax.jit(functools.partial(steps.train_step, model=model, tx=tx,
                                     normalization="constant"))(state, batch)
  want = jax.jit(jax.grad(functools.partial(
      _reference_objective, model=model, ls=0.0, z=0.0, normalization="none",
      constant=1.0)))(params, batch)
  _assert_close_to_gradient(jax.tree.map(lambda a, b: (a - b) / LR, params, new.params), want,
                            "constant")


@pytest.mark.parametrize("k", [0, -2])
def test_microbatch_counts_below_one_are_refused(k):
  model, params = _model_and_params()
  state = _sgd_state(params)
  with pytest.raises(ValueError, match=f"num_microbatches must be >= 1, got {k}"):
    steps.train_step(state, _batch(), model=model, tx=optax.sgd(LR), num_microbatches=k)


def test_one_microbatch_by_default_runs_no_scan():
  """k = 1 (the default) differentiates the batch directly; k > 1 scans microbatches."""
  model, params = _model_and_params()
  tx = optax.sgd(LR)
  state = _sgd_state(params)
  jaxpr = lambda **kw: str(jax.make_jaxpr(functools.partial(
      steps.train_step, model=model, tx=tx, **kw))(state, _batch()))
  assert "scan" not in jaxpr()
  assert "scan" in jaxpr(num_microbatches=2)


class _FixedLengthLM(nn.Module):
  """A model whose logits always cover 6 positions, whatever the batch's lengths."""

  @nn.compact
  def __call__(self, batch, enable_dropout=False):
    bias = self.param("bias", nn.initializers.zeros, (TINY["vocab_size"],))
    return jnp.zeros((batch["decoder_target_tokens"].shape[0], 6, 1)) + bias


@pytest.mark.parametrize("lt", [5, 7])
def test_targets_the_logits_do_not_cover_are_refused(lt):
  """The model (any module) must give logits for every target position."""
  model = _FixedLengthLM()
  batch = {"decoder_target_tokens": np.ones((8, lt), np.int32),
           "decoder_loss_weights": np.ones((8, lt), np.float32)}
  params = model.init(jax.random.key(0), batch)["params"]
  with pytest.raises(ValueError, match=rf"decoder_target_tokens has shape \(8, {lt}\) but the "
                     r"model's logits cover \(8, 6\)"):
    steps.eval_step(params, batch, model=model)
  same = {"decoder_target_tokens": np.ones((8, 6), np.int32),
          "decoder_loss_weights": np.ones((8, 6), np.float32)}
  assert float(steps.eval_step(params, same, model=model)["target_tokens"][0]) == 48.0


@pytest.mark.slow
@pytest.mark.parametrize("mesh_shape", [(2, 2, 2), (1, 8, 1)])
def test_sharded_sgd_step_matches_single_device_tightly(mesh_shape):
  """Plain SGD: the update is linear in the gradient, so the sharded step must match the
  one-device step up to reduction order (bound in the module docstring)."""
  model = Transformer(TransformerConfig(**TINY))
  tx = optax.sgd(LR)
  batch = _batch()
  rng = jax.random.key(0)
  init = functools.partial(steps.create_train_state, model=model, tx=tx)
  step_fn = functools.partial(steps.train_step, model=model, tx=tx, z_loss=1e-3,
                              label_smoothing=0.1)
  ref_state = jax.jit(init)(rng, batch)
  params0 = jax.device_get(ref_state.params)
  ref_state, ref_m = jax.jit(step_fn)(ref_state, batch)
  mesh = partitioning.make_mesh(mesh_shape)
  abstract, boxed = steps.abstract_train_state(rng, batch, model=model, tx=tx)
  shardings = partitioning.state_shardings(abstract, boxed, mesh, tx=tx)
  with partitioning.axis_rules(mesh):
    state = jax.jit(init, out_shardings=shardings)(rng, batch)
    state, m = jax.jit(step_fn, in_shardings=(shardings, partitioning.batch_shardings(batch, mesh)),
                       out_shardings=(shardings, None))(
                           state, partitioning.make_global_batch(batch, mesh))
  ref_grad = jax.tree.map(lambda a, b: (np.asarray(a) - np.asarray(b)) / LR, params0,
                          jax.device_get(ref_state.params))
  grad = jax.tree.map(lambda a, b: (np.asarray(a) - np.asarray(b)) / LR, params0,
                      jax.device_get(state.params))
  _assert_close_to_gradient(grad, ref_grad, f"mesh {mesh_shape}")
  for k in ("loss", "accuracy", "target_tokens", "tokens"):
    np.testing.assert_allclose(np.asarray(m[k]), np.asarray(ref_m[k]), rtol=4 * 64 * EPS32)
