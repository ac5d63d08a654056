"""lm.optim's Adafactor against a float64 NumPy re-implementation of t5x's Adafactor.

The reference below is written from the algorithm of t5x `adafactor.py`
(`Adafactor.apply_param_gradient` / `apply_gradient`), not from optax:
  decay_t   = 1 - (t - offset + 1)^(-decay_rate)            (t = optimizer step, from 0)
  g2        = g^2 + eps1
  factored (matrix [R, C], both of the two largest dims, the smaller >= min_dim):
    v_r = decay_t v_r + (1 - decay_t) mean_c g2 ;  v_c = decay_t v_c + (1 - decay_t) mean_r g2
    y   = g / sqrt(v_r / mean(v_r)) / sqrt(v_c)
  otherwise v = decay_t v + (1 - decay_t) g2 ; y = g / sqrt(v)
  y        /= max(1, rms(y) / clipping_threshold)                    (if clipping)
  u         = lr(t) * max(rms(param), eps2 = 1e-3) * y              (if param scale)
  m         = beta1 m + (1 - beta1) u ; u = m                        (if momentum)
  param'    = (1 - weight_decay_rate) param - u
with the global gradient norm clipped first (t5x `global_norm_clip_threshold`,
lm's `grad_clip_norm`). Attention kernels [D, N, H] / [N, H, D] are factored as the
[D, N*H] / [N*H, D] matrices t5x's logical rules give (embed = row, heads x kv = column).

Every optimizer field lm's config exposes is set to a non-default value, and the gradients
change from step to step (so the second-moment decay, momentum and clipping all matter).
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lm import config as config_lib
from lm import optim

D, N, H, F = 48, 4, 10, 40   # min_dim_size_to_factor = 32 below: D, N*H, F factor; H alone not


def _rms(x):
  return np.sqrt(np.mean(np.square(x)))


def _as_matrix(path, x):
  if path[-1] in ("query", "key", "value"):
    return x.reshape(x.shape[:-2] + (x.shape[-2] * x.shape[-1],))
  if path[-1] == "out":
    return x.reshape(x.shape[:-3] + (x.shape[-3] * x.shape[-2], x.shape[-1]))
  return x


class NumpyAdafactor:
  """t5x Adafactor over a flat {path: array} dict, float64. One param at a time."""

  def __init__(self, *, lr, decay_rate, decay_offset, factored, param_scale, clipping,
               momentum, eps1, min_dim, weight_decay, grad_clip_norm, eps2=1e-3):
    self.__dict__.update(locals())
    self.v, self.m = {}, {}

  def _factored(self, shape):
    if not self.factored or len(shape) != 2:
      return False
    return min(shape) >= self.min_dim

  def step(self, t, params, grads):
    if self.grad_clip_norm:
      norm = np.sqrt(sum(np.sum(np.square(g)) for g in grads.values()))
      grads = {k: g * min(1.0, self.grad_clip_norm / norm) for k, g in grads.items()}
    decay = 1.0 - (t - self.decay_offset + 1.0) ** (-self.decay_rate)
    lr = self.lr(t)
    new = {}
    for k, p in params.items():
      shape = p.shape
      p = _as_matrix(k, np.asarray(p, np.float64))
      g = _as_matrix(k, np.asarray(grads[k], np.float64))
      g2 = g * g + self.eps1
      if self._factored(p.shape):
        vr, vc = self.v.get(k, (np.zeros(p.shape[0]), np.zeros(p.shape[1])))
        vr = decay * vr + (1 - decay) * g2.mean(1)
        vc = decay * vc + (1 - decay) * g2.mean(0)
        self.v[k] = (vr, vc)
        y = g / np.sqrt(vr / vr.mean())[:, None] / np.sqrt(vc)[None, :]
      else:
        v = decay * self.v.get(k, np.zeros(p.shape)) + (1 - decay) * g2
        self.v[k] = v
        y = g / np.sqrt(v)
      if self.clipping:
        y = y / max(1.0, _rms(y) / self.clipping)
      u = lr * y
      if self.param_scale:
        u = u * max(_rms(p), self.eps2)
      if self.momentum:
        u = self.momentum * self.m.get(k, 0.0) + (1 - self.momentum) * u
        self.m[k] = u
      new[k] = ((1 - self.weight_decay) * p - u).reshape(shape)
    return new


def _flat(tree):
  return {tuple(getattr(q, "key", q) for q in path): np.asarray(x)
          for path, x in jax.tree_util.tree_leaves_with_path(tree)}


def _unflat(flat, like):
  paths = [tuple(getattr(q, "key", q) for q in path)
           for path, _ in jax.tree_util.tree_leaves_with_path(like)]
  return jax.tree.unflatten(jax.tree.structure(like),
                            [jnp.asarray(flat[p], jnp.float32) for p in paths])


def _params(rng):
  def arr(*shape, scale=1.0):
    return (scale * rng.normal(size=shape)).astype(np.float32)
  return {
      "encoder": {"layers_0": {
          "self_attention": {"query": arr(D, N, H, scale=0.3), "out": arr(N, H, D, scale=0.05)},
          "mlp": {"wi": arr(D, F, scale=2.0), "wo": arr(F, D, scale=1e-4)},  # tiny: eps2 floor
          "pre_mlp_layer_norm": {"scale": arr(D)}}},
      "small": arr(3, F),            # smaller dim 3 < min_dim: not factored
  }


def _cfg(**adafactor):
  a = dict(decay_rate=0.8, decay_offset=0, factored=True, multiply_by_parameter_scale=True,
           clipping_threshold=1.0, momentum=0.0, eps=1e-30, min_dim_size_to_factor=128,
           weight_decay_rate=0.0)
  grad_clip = adafactor.pop("grad_clip_norm", 0.0)
  a.update(adafactor)
  return config_lib.from_mapping(optim.OptimConfig, dict(
      name="adafactor", grad_clip_norm=grad_clip, grad_accum_steps=1, adafactor=a))


NON_DEFAULT = dict(decay_rate=0.65, decay_offset=3, factored=True,
                   multiply_by_parameter_scale=True, clipping_threshold=0.7, momentum=0.9,
                   eps=1e-12, min_dim_size_to_factor=32, weight_decay_rate=2e-3,
                   grad_clip_norm=300.0)
UNFACTORED = dict(decay_rate=1.0, decay_offset=0, factored=False,
                  multiply_by_parameter_scale=False, clipping_threshold=0.0, momentum=0.0,
                  eps=1e-3, min_dim_size_to_factor=8, weight_decay_rate=0.0,
                  grad_clip_norm=0.0)


def _set_counts(state, count):
  return jax.tree_util.tree_map_with_path(
      lambda p, x: jnp.full_like(x, count) if getattr(p[-1], "name", None) == "count" else x,
      state)


@pytest.mark.parametrize("settings,start", [(NON_DEFAULT, 5), (UNFACTORED, 0)],
                         ids=["non_default", "unfactored"])
def test_adafactor_matches_numpy_t5x_over_varying_gradients(settings, start):
  rng = np.random.default_rng(0)
  params = _params(rng)
  lr = lambda t: 0.3 / np.sqrt(t + 1.0)  # varies per step, so the step count must be right
  cfg = _cfg(**settings)
  a = cfg.adafactor
  ref = NumpyAdafactor(
      lr=lr, decay_rate=a.decay_rate, decay_offset=a.decay_offset, factored=a.factored,
      param_scale=a.multiply_by_parameter_scale, clipping=a.clipping_threshold,
      momentum=a.momentum, eps1=a.eps, min_dim=a.min_dim_size_to_factor,
      weight_decay=a.weight_decay_rate, grad_clip_norm=cfg.grad_clip_norm)
  tx = optim.make_optimizer(cfg, lambda t: 0.3 * jax.lax.rsqrt(jnp.asarray(t, jnp.float32) + 1))
  state = _set_counts(tx.init(params), start)  # e.g. fine-tuning from a restored count
  update = jax.jit(tx.update)
  ref_params = _flat(params)
  clipped_steps = 0
  for i in range(6):
    # Gradients with a step-dependent scale and direction, and per-row/column structure
    # (so row/column factors differ); one step with a huge gradient (clipping bites).
    grads = jax.tree.map(
        lambda p: (rng.normal(size=p.shape) * (1 + np.arange(p.shape[-1]) / p.shape[-1])
                   * (0.5 + i) * (20.0 if i == 3 else 1.0)).astype(np.float32), params)
    gn = np.sqrt(sum(np.sum(np.square(g)) for g in jax.tree.leaves(grads)))
    clipped_steps += bool(cfg.grad_clip_norm) and gn > cfg.grad_clip_norm
    u, state = update(grads, state, params)
    params = jax.tree.map(lambda p, d: p + d, params, u)
    ref_params = ref.step(start + i, ref_params, _flat(grads))
    got = _flat(params)
    for k in ref_params:
      assert np.all(np.isfinite(got[k])), k
      # float32 arithmetic on O(1) quantities over <= 6 steps: relative error ~1e-6
      # per op; the reductions (means over <= 2000 entries) add ~1e-6 more.
      np.testing.assert_allclose(got[k], ref_params[k], rtol=2e-5, atol=1e-7,
                                 err_msg=f"step {i} param {k}")
  if settings is NON_DEFAULT:
    assert 0 < clipped_steps < 6  # global-norm clipping was active on some steps only


def test_reference_distinguishes_each_setting():
  """The reference (and so the comparison above) is sensitive to every field: changing
  any single non-default value changes the parameters after a few steps."""
  rng = np.random.default_rng(1)
  params = _flat(_params(rng))
  grads = [{k: rng.normal(size=p.shape) * (1 + i) for k, p in params.items()} for i in range(4)]

  def run(**over):
    kw = dict(lr=lambda t: 0.1, decay_rate=0.65, decay_offset=3, factored=True,
              param_scale=True, clipping=0.7, momentum=0.9, eps1=1e-12, min_dim=32,
              weight_decay=2e-3, grad_clip_norm=40.0)
    kw.update(over)
    ref, p = NumpyAdafactor(**kw), params
    for i, g in enumerate(grads):
      p = ref.step(5 + i, p, g)
    return p

  base = run()
  for over in [dict(decay_rate=0.8), dict(decay_offset=0), dict(factored=False),
               dict(param_scale=False), dict(clipping=1.0), dict(momentum=0.0),
               dict(eps1=1e-3), dict(min_dim=128), dict(weight_decay=0.0),
               dict(grad_clip_norm=0.0)]:
    other = run(**over)
    diff = max(np.max(np.abs(other[k] - base[k]) / (np.abs(base[k]).max() + 1e-30))
               for k in base)
    assert diff > 1e-4, over


@pytest.mark.parametrize("clipping", [1.0, 0.0])
def test_scanned_layers_train_like_unscanned(clipping):
  """scan_layers stacks layers on a leading "layers" axis (t5x: a BATCH factor dim).
  Adafactor must treat each layer's slice as its own matrix: same factoring, and the
  update clipping and parameter scale computed per layer, so that scan_layers does not
  change training."""
  rng = np.random.default_rng(2)
  layers = [{"mlp": {"wi": (rng.normal(size=(D, F)) * s).astype(np.float32)},
             "self_attention": {"query": (rng.normal(size=(D, N, H)) * s).astype(np.float32)}}
            for s in (1.0, 0.01)]   # very different scales per layer
  unscanned = {"decoder": {f"layers_{i}": lay for i, lay in enumerate(layers)}}
  scanned = {"decoder": {"layers": jax.tree.map(lambda *x: np.stack(x), *layers)}}
  cfg = _cfg(min_dim_size_to_factor=32, clipping_threshold=clipping)
  tx = optim.make_optimizer(cfg, lambda t: 0.1)
  grads_u = jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), unscanned)
  grads_s = {"decoder": {"layers": jax.tree.map(
      lambda *x: np.stack(x), *[grads_u["decoder"][f"layers_{i}"] for i in range(2)])}}
  u_u, _ = tx.update(grads_u, tx.init(unscanned), unscanned)
  u_s, _ = tx.update(grads_s, tx.init(scanned), scanned)
  for i in range(2):
    for a, b in zip(jax.tree.leaves(u_u["decoder"][f"layers_{i}"]),
                    jax.tree.leaves(jax.tree.map(lambda x: x[i], u_s["decoder"]["layers"]))):
      np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-9)


def test_adamw_matches_numpy_over_varying_gradients_with_non_default_settings():
  """AdamW (Loshchilov & Hutter; optax/PyTorch form) in float64 NumPy:
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  m^ = m / (1 - b1^t);  v^ = v / (1 - b2^t)
    param -= lr(t) * (m^ / (sqrt(v^) + eps) + wd * param)   [decay on matrices only]
  after global-norm clipping of g; t counts from 1."""
  rng = np.random.default_rng(3)
  params = {"w": rng.normal(size=(6, 5)).astype(np.float32),
            "kernel3d": rng.normal(size=(3, 4, 2)).astype(np.float32),  # decayed too
            "scale": (1 + 0.1 * rng.normal(size=(5,))).astype(np.float32)}
  cfg = config_lib.from_mapping(optim.OptimConfig, dict(
      name="".join(["adam", "w"]),  # built at run time: names are compared with ==
      grad_clip_norm=3.0, grad_accum_steps=1,
      adamw=dict(b1=0.8, b2=0.95, eps=1e-3, weight_decay=0.05)))
  lr = lambda t: 0.05 * (1 + t) ** -0.5
  tx = optim.make_optimizer(cfg, lambda t: 0.05 * jax.lax.rsqrt(jnp.asarray(t, jnp.float32) + 1))
  state = tx.init(params)
  ref = {k: v.astype(np.float64) for k, v in params.items()}
  m = {k: np.zeros_like(v) for k, v in ref.items()}
  v = {k: np.zeros_like(x) for k, x in ref.items()}
  clipped = 0
  for t in range(6):
    grads = {k: (rng.normal(size=p.shape) * (0.3 + t) + 0.5 * (t % 2)).astype(np.float32)
             for k, p in params.items()}
    norm = np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in grads.values()))
    clipped += norm > 3.0
    g = {k: x.astype(np.float64) * min(1.0, 3.0 / norm) for k, x in grads.items()}
    for k in ref:
      m[k] = 0.8 * m[k] + 0.2 * g[k]
      v[k] = 0.95 * v[k] + 0.05 * g[k] ** 2
      mh, vh = m[k] / (1 - 0.8 ** (t + 1)), v[k] / (1 - 0.95 ** (t + 1))
      decay = 0.05 * ref[k] if ref[k].ndim >= 2 else 0.0
      ref[k] = ref[k] - lr(t) * (mh / (np.sqrt(vh) + 1e-3) + decay)
    u, state = tx.update(grads, state, params)
    params = jax.tree.map(lambda p, d: np.asarray(p + d), params, u)
    for k in ref:
      assert np.all(np.isfinite(params[k]))
      np.testing.assert_allclose(params[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=f"{t} {k}")
  assert 0 < clipped < 6


# Shapes that exercise optax's factoring rule: vectors, matrices below and above the
# minimum, a square matrix (tie: the later axis is the largest), 3-D params factored over
# the first two, the outer two and the last two axes.
_FACTOR_SHAPES = {"vector": (7,), "small": (5, 9), "square": (40, 40), "wide": (33, 70),
                  "tall": (70, 33), "batch_last": (3, 40, 50), "outer": (50, 3, 40),
                  "batch_first": (40, 50, 2)}


def _beside_optax(shapes, rng, rtol, factored=True, min_dim=32, offset=0, eps=1e-30,
                  steps=4):
  """lm's second-moment stage against optax's on params of ``shapes``, over ``steps``
  changing gradients: the same state structure (what checkpoints hold), and every update
  and statistic finite, of optax's shape and dtype, within ``rtol``. Returns lm's state."""
  params = {k: jnp.asarray(rng.normal(size=s), jnp.float32) for k, s in shapes.items()}
  ours = optim.scale_by_factored_rms(factored, 0.8, offset, min_dim, eps)
  theirs = optax.scale_by_factored_rms(factored, 0.8, offset, min_dim, eps)
  st, rst = ours.init(params), theirs.init(params)
  assert jax.tree.structure(st) == jax.tree.structure(rst)
  # Fine-tuning's offset: the count starts there (below it t - offset + 1 < 1 and the
  # decay's power is NaN, in optax and t5x alike).
  st, rst = (s._replace(count=jnp.asarray(offset, jnp.int32)) for s in (st, rst))
  update, reference = jax.jit(ours.update), jax.jit(theirs.update)
  for step in range(steps):
    grads = {k: jnp.asarray(rng.normal(size=s) * 10.0 ** (step - 2), jnp.float32)
             for k, s in shapes.items()}
    u, st = update(grads, st, params)
    ru, rst = reference(grads, rst, params)
    for got, want in zip(jax.tree.leaves((u, st)), jax.tree.leaves((ru, rst))):
      assert got.shape == want.shape and got.dtype == want.dtype
      assert np.all(np.isfinite(got))
      np.testing.assert_allclose(got, want, rtol=rtol, atol=0)
  return st


@pytest.mark.parametrize("factored,min_dim,offset,eps", [
    (True, 32, 0, 1e-30), (True, 32, 3, 1e-3), (False, 32, 0, 1e-30), (True, 1, 2, 1e-8)])
def test_scale_by_factored_rms_matches_optax_but_for_rounding(factored, min_dim, offset, eps):
  """Values within a few float32 ulps of optax's (rsqrt against x ** -0.5)."""
  st = _beside_optax(_FACTOR_SHAPES, np.random.default_rng(7), 5e-6, factored, min_dim,
                     offset, eps)
  assert int(st.count) == offset + 4


@pytest.mark.parametrize("shape,axis", [
    ((130, optim.WIDE_ROWS), 0), ((128, optim.WIDE_ROWS + 3), 0),
    ((3, 5, 2 * optim.WIDE_ROWS), 1),
    ((2, optim.WIDE_ROWS), 0), ((1, optim.WIDE_ROWS), 0), ((7, 9), 0), ((7, 9), 1),
    ((7, optim.WIDE_ROWS), 1), ((6, 4, 3), -2)])
def test_mean_over_axis_is_the_mean(shape, axis):
  """The halving sum (rows at least WIDE_ROWS wide; odd counts carry a row) and the plain
  mean (narrow rows, the last axis) both give the mean over ``axis``, to float32 rounding."""
  x = np.random.default_rng(11).normal(size=shape).astype(np.float32) ** 2
  got = jax.jit(optim.mean_over_axis, static_argnums=1)(jnp.asarray(x), axis)
  want = np.mean(x.astype(np.float64), axis=axis)
  assert got.shape == want.shape and got.dtype == jnp.float32
  np.testing.assert_allclose(got, want, rtol=2e-6)


def test_mean_over_axis_halves_wide_rows_and_only_those():
  """A reduction over the major axis of wide rows is compiled as slices added, no reduce
  over that axis; narrow rows keep one reduce."""
  def reduces(shape, axis):
    text = jax.jit(optim.mean_over_axis, static_argnums=1).lower(
        jnp.zeros(shape, jnp.float32), axis).as_text()
    return [line for line in text.splitlines() if "stablehlo.reduce" in line]
  assert not reduces((512, optim.WIDE_ROWS), 0) and not reduces((2, optim.WIDE_ROWS), 0)
  assert reduces((512, optim.WIDE_ROWS - 1), 0) and reduces((512, optim.WIDE_ROWS), 1)
  # The shapes it is for: T5.1.1's logits kernel is halved, activations and the other
  # kernels keep XLA's reduce.
  assert not reduces((512, 32128), 0) and not reduces((768, 32128), 0)
  assert reduces((2048, 1024), 0) and reduces((32128, 512), 0) and reduces((4, 512, 512), 1)


def test_mean_over_axis_halves_on_the_cpu_only():
  """On GPUs and TPUs a wide row's major axis keeps one reduce (slicing a sharded axis would
  move data between devices); the CPU program halves."""
  traced = jax.jit(optim.mean_over_axis, static_argnums=1).trace(
      jnp.zeros((512, optim.WIDE_ROWS), jnp.float32), 0)
  for platform, want in (("cpu", 0), ("tpu", 1), ("cuda", 1)):
    text = traced.lower(lowering_platforms=(platform,)).as_text()
    assert sum("stablehlo.reduce" in line for line in text.splitlines()) == want, platform


@pytest.mark.parametrize("shape", [(40, 8200), (8200, 40), (3, 40, 8200)])
def test_scale_by_factored_rms_matches_optax_on_wide_matrices(shape):
  """The halving column mean inside the stage: optax's update and statistics over steps."""
  _beside_optax({"w": shape}, np.random.default_rng(12), 1e-5, steps=3)


def test_factored_dims_is_optax_rule():
  from optax._src import factorized  # pylint: disable=import-outside-toplevel
  shapes = [(), (5,), (5, 9), (40, 40), (3, 40, 50), (50, 3, 40), (40, 50, 2), (40, 40, 40),
            (128, 127), (127, 128), (128, 128), (2, 128, 128, 3)]
  for shape in shapes:
    for factored in (True, False):
      for min_dim in (1, 40, 128):
        assert (optim.factored_dims(shape, factored, min_dim)
                == factorized._factored_dims(shape, factored, min_dim)), (shape, min_dim)  # pylint: disable=protected-access


def test_adafactor_update_compiles_without_an_elementwise_power():
  """The reason lm has its own stage: XLA:CPU compiles `x ** -0.5` to a general power.
  The step's only power left is the scalar decay schedule t^-decay_rate."""
  params = {k: jnp.zeros(s, jnp.float32) for k, s in _FACTOR_SHAPES.items()}
  tx = optim.make_optimizer(optim.OptimConfig(), optim.make_schedule(optim.ScheduleConfig()))
  text = jax.jit(tx.update).lower(params, tx.init(params), params).as_text()
  powers = [line for line in text.splitlines() if "stablehlo.power" in line]
  assert powers and all(line.rstrip().endswith("tensor<f32>") for line in powers), powers


def test_scale_by_param_rms_is_optax_scale_by_param_block_rms():
  """Bitwise: max(RMS(param), min_scale), for params above, at and below the minimum."""
  rng = np.random.default_rng(3)
  params = {"big": jnp.asarray(rng.normal(size=(30, 20)), jnp.float32),
            "small": jnp.asarray(rng.normal(size=(50,)) * 1e-5, jnp.float32),
            "zero": jnp.zeros((4, 3), jnp.float32),
            "at_min": jnp.full((8,), 1e-3, jnp.float32)}
  updates = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32), params)
  ours, theirs = optim.scale_by_param_rms(1e-3), optax.scale_by_param_block_rms(1e-3)
  got, state = jax.jit(ours.update)(updates, ours.init(params), params)
  want, ref_state = jax.jit(theirs.update)(updates, theirs.init(params), params)
  assert jax.tree.structure(state) == jax.tree.structure(ref_state)
  for k in params:
    assert np.all(np.isfinite(got[k]))
    np.testing.assert_array_equal(got[k], want[k])
  np.testing.assert_array_equal(got["zero"], updates["zero"] * np.float32(1e-3))
  rms = float(np.sqrt(np.mean(np.asarray(params["big"], np.float64) ** 2)))
  np.testing.assert_allclose(got["big"], updates["big"] * rms, rtol=1e-6)


def test_adafactor_update_compiles_without_param_sized_selects():
  """optax's safe RMS wrote a param-sized `where` per param and step; lm's stages have none."""
  params = {k: jnp.zeros(s, jnp.float32) for k, s in _FACTOR_SHAPES.items()}
  tx = optim.make_optimizer(optim.OptimConfig(), optim.make_schedule(optim.ScheduleConfig()))
  text = jax.jit(tx.update).lower(params, tx.init(params), params).as_text()
  selects = [line for line in text.splitlines() if "stablehlo.select" in line]
  assert all(line.rstrip().endswith(("tensor<f32>", "tensor<i32>")) for line in selects), selects


@pytest.mark.parametrize("fields", [{}, {"momentum": 0.9, "weight_decay_rate": 0.01,
                                         "clipping_threshold": 0.0,
                                         "multiply_by_parameter_scale": False}])
def test_adafactor_state_is_optax_adafactors_so_checkpoints_restore(fields):
  """lm's chain holds the same state tree (types, shapes, dtypes) as optax.adafactor with
  the same settings: checkpoints written before lm had its own stages restore."""
  a = dataclasses.replace(optim.AdafactorConfig(), **fields)
  params = {k: jnp.zeros(s, jnp.float32) for k, s in _FACTOR_SHAPES.items()}
  ours = optim.adafactor(0.01, a).init(params)
  theirs = optax.adafactor(
      0.01, min_dim_size_to_factor=a.min_dim_size_to_factor, decay_rate=a.decay_rate,
      decay_offset=a.decay_offset, multiply_by_parameter_scale=a.multiply_by_parameter_scale,
      clipping_threshold=a.clipping_threshold or None, momentum=a.momentum or None,
      weight_decay_rate=a.weight_decay_rate or None, eps=a.eps, factored=a.factored).init(params)
  assert jax.tree.structure(ours) == jax.tree.structure(theirs)
  for x, y in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
    assert x.shape == y.shape and x.dtype == y.dtype
