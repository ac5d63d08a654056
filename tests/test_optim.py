"""Schedules with exact values (docs/t5_reference.md §3.6) and optimizer construction."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lm import config as config_lib
from lm import optim


def _sched(**kw):
  base = dict(name="rsqrt", base_lr=1.0, warmup_steps=10_000, decay_steps=0, end_factor=0.0,
              linear_warmup=False)
  base.update(kw)
  return optim.make_schedule(config_lib.from_mapping(optim.ScheduleConfig, base))


def test_t5_rsqrt_schedule_exact_values():
  s = _sched()
  for step in (0, 1, 5000, 10_000):
    np.testing.assert_allclose(s(step), 0.01, rtol=1e-6)
  np.testing.assert_allclose(s(100_000), 1 / np.sqrt(1e5), rtol=1e-6)
  np.testing.assert_allclose(s(100_000), 0.00316, atol=5e-6)
  np.testing.assert_allclose(s(2 ** 18), 0.00195, atol=5e-6)
  np.testing.assert_allclose(s(2 ** 19), 0.00138, atol=5e-6)
  np.testing.assert_allclose(s(1_000_000), 0.001, rtol=1e-6)


def test_rsqrt_linear_warmup_ramps_from_zero():
  s = _sched(linear_warmup=True)
  np.testing.assert_allclose(s(0), 0.0)
  np.testing.assert_allclose(s(5000), 0.005, rtol=1e-6)
  np.testing.assert_allclose(s(40_000), 0.005, rtol=1e-6)


def test_cosine_linear_constant():
  c = _sched(name="cosine", base_lr=2.0, warmup_steps=10, decay_steps=110, end_factor=0.1)
  np.testing.assert_allclose([c(0), c(5), c(10)], [0.0, 1.0, 2.0], rtol=1e-6)
  np.testing.assert_allclose(c(60), 0.2 + 1.8 * 0.5, rtol=1e-5)  # half way: cos = 0
  np.testing.assert_allclose([c(110), c(500)], [0.2, 0.2], rtol=1e-5)
  lin = _sched(name="linear", base_lr=1.0, warmup_steps=10, decay_steps=30, end_factor=0.0)
  np.testing.assert_allclose([lin(5), lin(10), lin(20), lin(30), lin(99)],
                             [0.5, 1.0, 0.5, 0.0, 0.0], atol=1e-6)
  const = _sched(name="constant", base_lr=1e-3, warmup_steps=0)
  np.testing.assert_allclose([const(0), const(10 ** 6)], [1e-3, 1e-3], rtol=1e-6)
  warm = _sched(name="constant", base_lr=1e-3, warmup_steps=4)
  np.testing.assert_allclose([warm(2), warm(4), warm(100)], [5e-4, 1e-3, 1e-3], rtol=1e-6)
  one = _sched(name="constant", base_lr=1e-3, warmup_steps=1)  # the shortest ramp: 0, then lr
  np.testing.assert_allclose([one(0), one(1), one(7)], [0.0, 1e-3, 1e-3], rtol=1e-6)


def test_schedule_errors():
  with pytest.raises(ValueError, match="unknown schedule.name 'cos'"):
    _sched(name="cos")
  for name in ("cosine", "linear"):  # decay_steps must exceed warmup_steps, equal is refused
    with pytest.raises(ValueError, match=r"needs schedule.decay_steps \(10\) > warmup_steps \(10\)"):
      _sched(name=name, warmup_steps=10, decay_steps=10)
    _sched(name=name, warmup_steps=10, decay_steps=11)
  with pytest.raises(ValueError, match="warmup_steps > 0"):
    _sched(warmup_steps=0)


def _optim_cfg(name="adafactor", clip=0.0):
  return config_lib.from_mapping(optim.OptimConfig, dict(
      name="".join(list(name)),  # a str equal to name but not the interned literal
      grad_clip_norm=clip, grad_accum_steps=1,
      adafactor=dict(decay_rate=0.8, decay_offset=0, factored=True,
                     multiply_by_parameter_scale=True, clipping_threshold=1.0, momentum=0.0,
                     eps=1e-30, min_dim_size_to_factor=128, weight_decay_rate=0.0),
      adamw=dict(b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)))


def test_settings_objects_are_typed_and_name_unknown_fields():
  cfg = _optim_cfg("adamw")
  assert isinstance(cfg.adamw, optim.AdamWConfig) and cfg.adamw.b2 == 0.95
  assert optim.OptimConfig() == config_lib.from_mapping(optim.OptimConfig, {})
  with pytest.raises(ValueError, match=r"unknown field config.optim.adamw.b3; expected one of "
                     r"\['b1', 'b2', 'eps', 'weight_decay'\]"):
    config_lib.from_mapping(optim.OptimConfig, {"adamw": {"b3": 0.9}}, "config.optim")


def test_adafactor_matches_optax_t5_settings_and_factors_large_matrices():
  params = {"w": jnp.ones((256, 130)) * 0.5, "scale": jnp.ones((130,))}
  grads = jax.tree.map(lambda p: jnp.full_like(p, 0.1) * jnp.arange(p.shape[-1]) / 100, params)
  sched = _sched()
  tx = optim.make_optimizer(_optim_cfg(), sched)
  ref = optax.adafactor(learning_rate=sched, decay_rate=0.8, clipping_threshold=1.0,
                        multiply_by_parameter_scale=True, momentum=None, eps=1e-30,
                        min_dim_size_to_factor=128, factored=True)
  st, rst = tx.init(params), ref.init(params)
  for _ in range(3):
    u, st = tx.update(grads, st, params)
    ru, rst = ref.update(grads, rst, params)
    for k in params:
      np.testing.assert_allclose(u[k], ru[k], rtol=1e-6)
  fstate = st[0]
  assert {fstate.v_row["w"].shape, fstate.v_col["w"].shape} == {(256,), (130,)}
  assert fstate.v["w"].shape == (1,)  # factored: no full second moment
  assert fstate.v["scale"].shape == (130,)  # vectors are not factored
  # Update RMS clipped to 1 then scaled by lr * max(RMS(param), 1e-3) = 0.01 * 0.5.
  u, _ = tx.update(grads, tx.init(params), params)
  rms = float(jnp.sqrt(jnp.mean(u["w"] ** 2)))
  assert rms <= 0.01 * 0.5 * (1 + 1e-5)


def test_adafactor_factors_attention_kernels_as_t5x_matrices():
  """[D, N, H] / [N, H, D] attention kernels are factored as [D, N*H] / [N*H, D] (t5x's
  embed = row, heads/kv = column), exactly optax's Adafactor on the reshaped matrix."""
  d, n, h = 256, 4, 64  # N*H = 256 >= 128, but optax alone would see H = 64 < 128
  rng = np.random.default_rng(0)
  params = {"attn": {"self_attention": {
      "query": jnp.asarray(rng.normal(size=(d, n, h)), jnp.float32),
      "out": jnp.asarray(rng.normal(size=(n, h, d)), jnp.float32)}},
      "mlp": {"wi": jnp.asarray(rng.normal(size=(d, 130)), jnp.float32)}}
  grads = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32), params)
  sched = _sched()
  tx = optim.make_optimizer(_optim_cfg(), sched)
  ref = optax.adafactor(learning_rate=sched, decay_rate=0.8, clipping_threshold=1.0,
                        multiply_by_parameter_scale=True, momentum=None, eps=1e-30,
                        min_dim_size_to_factor=128, factored=True)
  as_matrix = {"query": (d, n * h), "out": (n * h, d)}

  def reshaped(tree):
    out = jax.tree.map(lambda x: x, tree)
    for k, shape in as_matrix.items():
      out["attn"]["self_attention"][k] = tree["attn"]["self_attention"][k].reshape(shape)
    return out

  st, rst = tx.init(params), ref.init(reshaped(params))
  for _ in range(2):
    u, st = tx.update(grads, st, params)
    ru, rst = ref.update(reshaped(grads), rst, reshaped(params))
    for k in as_matrix:
      got = u["attn"]["self_attention"][k]
      assert got.shape == params["attn"]["self_attention"][k].shape
      np.testing.assert_allclose(got.reshape(as_matrix[k]), ru["attn"]["self_attention"][k],
                                 rtol=1e-6)
    np.testing.assert_allclose(u["mlp"]["wi"], ru["mlp"]["wi"], rtol=1e-6)
  fstate = st[0]
  assert fstate.v["attn"]["self_attention"]["query"].shape == (1,)  # factored
  assert fstate.v_row["attn"]["self_attention"]["query"].shape == (d,)
  assert fstate.v_col["attn"]["self_attention"]["out"].shape == (d,)
  assert optim.t5_matrix_shape(("decoder", "layers", "self_attention", "query"),
                               (6, d, n, h)) == (6, d, n * h)  # scanned layers: batch axis


def test_adamw_with_global_norm_clipping():
  params = {"w": jnp.ones((3, 3)), "b": jnp.ones((3,))}
  grads = {"w": jnp.full((3, 3), 100.0), "b": jnp.full((3,), 100.0)}
  sched = _sched(name="constant", base_lr=0.1, warmup_steps=0)
  tx = optim.make_optimizer(_optim_cfg("adamw", clip=1.0), sched)
  u, _ = tx.update(grads, tx.init(params), params)
  # Adam's first step is lr * sign(g) (+ decoupled decay on matrices only).
  np.testing.assert_allclose(u["b"], -0.1, rtol=1e-4)
  np.testing.assert_allclose(u["w"], -0.1 - 0.1 * 0.1, rtol=1e-4)
  # Clipping to global norm 1: each of the 12 entries becomes 1/sqrt(12); with eps=1
  # Adam's first update is lr * g / (|g| + 1), which depends on the clipped scale.
  cfg = _optim_cfg("adamw", clip=1.0)
  cfg = dataclasses.replace(cfg, adamw=dataclasses.replace(cfg.adamw, eps=1.0))
  tx = optim.make_optimizer(cfg, sched)
  u, _ = tx.update(grads, tx.init(params), params)
  g = 1 / np.sqrt(12)
  np.testing.assert_allclose(u["b"], -0.1 * g / (g + 1), rtol=1e-4)
  with pytest.raises(ValueError, match="unknown optim.name 'sgd'"):
    optim.make_optimizer(_optim_cfg("sgd"), sched)


def _with(name="adafactor", **fields):
  """An OptimConfig with fields of its optimizer's section replaced."""
  cfg = optim.OptimConfig(name=name)
  section = getattr(cfg, name)
  return dataclasses.replace(cfg, **{name: dataclasses.replace(section, **fields)})


@pytest.mark.parametrize("name,field,accepted,refused", [
    # [low, high) ranges: the low end is accepted, the high end refused.
    ("adafactor", "momentum", [0.0, 0.999], [1.0, 1.5, -1e-9]),
    ("adafactor", "clipping_threshold", [0.0, 1e9], [-1e-9, float("inf")]),
    ("adafactor", "weight_decay_rate", [0.0, 0.5], [-1e-9]),
    ("adafactor", "eps", [0.0, 1e-30], [-1e-30]),
    ("adamw", "b1", [0.0, 0.9], [1.0, 2.0, -1e-9]),
    ("adamw", "b2", [0.0, 0.95], [1.0, -1e-9]),
    ("adamw", "eps", [0.0, 1e-8], [-1e-8]),
    ("adamw", "weight_decay", [0.0, 0.1], [-1e-9]),
    # decay_rate's range is closed: [0, 1].
    ("adafactor", "decay_rate", [0.0, 1.0], [1.0 + 1e-9, -1e-9]),
])
def test_optimizer_ranges_at_their_boundaries(name, field, accepted, refused):
  sched = _sched()
  for value in accepted:
    optim.make_optimizer(_with(name, **{field: value}), sched)
  for value in refused:
    with pytest.raises(ValueError, match=f"optim.{name}.{field} must be in"):
      optim.make_optimizer(_with(name, **{field: value}), sched)


def test_range_errors_print_the_interval():
  """An open upper bound prints as ')', a closed one as ']'."""
  with pytest.raises(ValueError, match=r"optim.adamw.b1 must be in \[0.0, 1.0\), got 1.0\."):
    optim.make_optimizer(_with("adamw", b1=1.0), _sched())
  with pytest.raises(ValueError, match=r"optim.adafactor.decay_rate must be in \[0.0, 1.0\], got 1.5\."):
    optim.make_optimizer(_with("adafactor", decay_rate=1.5), _sched())


def test_schedule_defaults_are_t5_pretraining_and_names_may_be_built_at_run_time():
  cfg = optim.ScheduleConfig()
  assert (cfg.name, cfg.base_lr, cfg.warmup_steps, cfg.decay_steps, cfg.end_factor,
          cfg.linear_warmup) == ("rsqrt", 1.0, 10_000, 0, 0.0, False)
  const = _sched(name="".join(["con", "stant"]), base_lr=1e-3, warmup_steps=0)
  assert float(const(7)) == np.float32(1e-3)
  with pytest.raises(ValueError, match=r"decay_steps \(0\) > warmup_steps \(10\)"):
    _sched(name="linear", warmup_steps=10, decay_steps=0)


def test_min_dim_size_to_factor_must_be_positive():
  optim.make_optimizer(_with(min_dim_size_to_factor=1), _sched())
  with pytest.raises(ValueError, match="min_dim_size_to_factor must be >= 1, got 0"):
    optim.make_optimizer(_with(min_dim_size_to_factor=0), _sched())


def test_optimizer_defaults_are_t5s_adafactor_and_gpt3s_adamw():
  """The settings objects hold the one copy of every default (docs/t5_reference.md §3.6;
  GPT-3 §2.3)."""
  assert dataclasses.astuple(optim.AdafactorConfig()) == (0.8, 0, True, True, 1.0, 0.0, 1e-30,
                                                          128, 0.0)
  assert dataclasses.astuple(optim.AdamWConfig()) == (0.9, 0.95, 1e-8, 0.1)
  cfg = optim.OptimConfig()
  assert (cfg.name, cfg.grad_clip_norm, cfg.grad_accum_steps) == ("adafactor", 0.0, 1)


def test_schedule_bounds_and_the_rsqrt_schedules_own_checks():
  with pytest.raises(ValueError, match="schedule.warmup_steps must be >= 0, got -1"):
    _sched(name="constant", warmup_steps=-1)
  for lr in (0.0, -0.1, float("nan")):
    with pytest.raises(ValueError, match=f"schedule.base_lr must be > 0, got {lr}"):
      _sched(base_lr=lr)
  for end_factor in (-0.5, -1.0, -2.0):
    with pytest.raises(ValueError, match=f"schedule.end_factor must be >= 0, got {end_factor}"):
      _sched(name="linear", warmup_steps=1, decay_steps=5, end_factor=end_factor)
  assert float(_sched(name="linear", warmup_steps=1, decay_steps=5, end_factor=0.0)(5)) == 0.0
  # Unknown names on both sides of every known one (the checks compare with ==).
  for name in ("adafactor2", "cosin", "lin", "linear2", "zzz", "constan"):
    with pytest.raises(ValueError, match=f"unknown schedule.name '{name}'"):
      _sched(name=name, warmup_steps=1, decay_steps=5)
  for name in ("adam", "adafactors", "adamw2", "a"):
    with pytest.raises(ValueError, match=f"unknown optim.name '{name}'"):
      optim.make_optimizer(dataclasses.replace(optim.OptimConfig(), name=name), _sched())
  with pytest.raises(ValueError, match="grad_clip_norm must be >= 0"):
    optim.make_optimizer(dataclasses.replace(optim.OptimConfig(), grad_clip_norm=-0.5), _sched())
  for warmup in (0, -3):
    with pytest.raises(ValueError, match="warmup_steps > 0"):
      optim.rsqrt_schedule(1.0, warmup)
  # warmup 1: 1/sqrt(max(step, 1)); no linear ramp unless asked for.
  assert float(optim.rsqrt_schedule(1.0, 1)(4)) == pytest.approx(0.5, rel=1e-6)
  assert float(optim.rsqrt_schedule(1.0, 100)(50)) == pytest.approx(0.1, rel=1e-6)
  rsqrt = _sched(name="".join(["rs", "qrt"]), warmup_steps=100)  # a name built at run time
  assert float(rsqrt(400)) == pytest.approx(0.05, rel=1e-6)
  for name, want in (("cosine", 0.5), ("linear", 0.5), ("constant", 1.0)):
    sched = _sched(name="".join(list(name)), base_lr=1.0, warmup_steps=0, decay_steps=2,
                   end_factor=0.0)
    assert float(sched(1)) == pytest.approx(want, rel=1e-6), name


def test_settings_objects_are_frozen():
  for obj in (optim.ScheduleConfig(), optim.AdafactorConfig(), optim.AdamWConfig(),
              optim.OptimConfig()):
    with pytest.raises(dataclasses.FrozenInstanceError):
      obj.eps = 1.0  # pylint: disable=assigning-non-slot


def test_t5_matrix_shape_joins_heads_at_any_path_depth():
  assert optim.t5_matrix_shape(("self_attention", "query"), (8, 2, 4)) == (8, 8)
  assert optim.t5_matrix_shape(("enc", "layers_0", "cross_attention", "out"), (2, 4, 8)) == (8, 8)
  assert optim.t5_matrix_shape(("mlp", "wi"), (8, 16)) == (8, 16)
  assert optim.t5_matrix_shape(("self_attention", "query"), (8, 16)) == (8, 16)  # already 2-D
  assert optim.t5_matrix_shape(("query",), (8, 2, 4)) == (8, 2, 4)  # no attention parent
  # Scanned layers: the leading "layers" axis stays a batch axis, in and out alike.
  assert optim.t5_matrix_shape(("decoder", "layers", "cross_attention", "out"),
                               (6, 2, 4, 8)) == (6, 8, 8)
  assert optim.t5_matrix_shape(("decoder", "layers", "self_attention", "key"),
                               (6, 8, 2, 4)) == (6, 8, 8)
