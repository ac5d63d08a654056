"""Mesh construction, logical rules -> PartitionSpecs, state/batch shardings (8 fake devices)."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

from lm import partitioning


def test_mesh_shapes():
  assert jax.device_count() == 8
  assert dict(partitioning.make_mesh((8, 1, 1)).shape) == {"data": 8, "fsdp": 1, "tensor": 1}
  assert dict(partitioning.make_mesh((1, 8, 1)).shape) == {"data": 1, "fsdp": 8, "tensor": 1}
  assert tuple(partitioning.make_mesh((2, 2, 2)).shape.values()) == (2, 2, 2)
  assert tuple(partitioning.make_mesh((-1, 1, 2)).shape.values()) == (4, 1, 2)
  assert tuple(partitioning.make_mesh("1,-1,1").shape.values()) == (1, 8, 1)
  mesh = partitioning.make_mesh((-1, 1, 1), devices=jax.devices()[:1])
  assert mesh.devices.size == 1


@pytest.mark.parametrize("shape, match", [
    ((3, -1, 1), "does not divide 8"),
    ((2, 2, 1), "has 4 devices but 8 are present"),
    ((-1, -1, 1), "at most one may be -1"),
    ((0, 8, 1), "must be positive"),
    ((8, 1), "has 2 axes"),
    ("a,b", "comma-separated"),
])
def test_bad_mesh_shape_errors(shape, match):
  with pytest.raises(ValueError, match=match):
    partitioning.make_mesh(shape)


class _Toy(nn.Module):
  """Hand-made boxed params with the model's logical names."""

  @nn.compact
  def __call__(self, x):
    emb = self.param("embedding", nn.with_logical_partitioning(
        nn.initializers.normal(1.0), ("vocab", "embed")), (16, 8))
    wi = self.param("wi", nn.with_logical_partitioning(
        nn.initializers.normal(0.1), ("embed", "mlp")), (8, 32))
    q = self.param("q", nn.with_logical_partitioning(
        nn.initializers.normal(0.1), ("embed", "heads", "kv")), (8, 4, 2))
    scale = self.param("scale", nn.with_logical_partitioning(
        nn.initializers.ones, ("embed",)), (8,))
    rel = self.param("rel", nn.with_logical_partitioning(
        nn.initializers.zeros, ("heads", "relpos_buckets")), (4, 32))
    h = emb[x] * scale
    h = nn.with_logical_constraint(h, ("batch", "length", "embed"))
    return (jax.nn.relu(h @ wi).sum() + jnp.einsum("bld,dnh->blnh", h, q).sum()
            + rel.sum())


def test_param_specs_follow_rules():
  x = jnp.zeros((2, 4), jnp.int32)
  boxed = jax.eval_shape(lambda: _Toy().init(jax.random.key(0), x)["params"])
  specs = partitioning.params_partition_specs(boxed)
  assert specs["embedding"] == P("tensor", "fsdp")
  assert specs["wi"] == P("fsdp", "tensor")
  assert specs["q"] == P("fsdp", "tensor", None)
  assert specs["scale"] == P("fsdp")
  assert specs["rel"] == P("tensor", None)
  # Activations: batch takes (data, fsdp), so embed falls back to replicated.
  assert partitioning.logical_to_mesh_spec(("batch", "length", "embed")) == P(
      ("data", "fsdp"), None, None)
  # Pure data-parallel rules (t5x's default) replicate params.
  dp_rules = partitioning.rules_from_config([["batch", ["data", "fsdp"]], ["embed", None],
                                             ["vocab", None], ["mlp", None], ["heads", None]])
  assert partitioning.params_partition_specs(boxed, dp_rules)["embedding"] == P(None, None)


def test_state_shardings_opt_state_follows_params():
  mesh = partitioning.make_mesh((2, 2, 2))
  x = jnp.zeros((2, 4), jnp.int32)
  model = _Toy()
  boxed = jax.eval_shape(lambda: model.init(jax.random.key(0), x)["params"])
  tx = optax.adamw(1e-3)

  def init():
    params = nn.meta.unbox(model.init(jax.random.key(0), x)["params"])
    return {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": tx.init(params)}

  abstract = jax.eval_shape(init)
  shardings = partitioning.state_shardings(abstract, boxed, mesh, tx=tx)
  assert shardings["params"]["wi"].spec == P("fsdp", "tensor")
  adam = shardings["opt_state"][0]
  assert adam.mu["wi"].spec == P("fsdp", "tensor")
  assert adam.nu["embedding"].spec == P("tensor", "fsdp")
  assert adam.count.spec == P()
  assert shardings["step"].spec == P()
  state = jax.jit(init, out_shardings=shardings)()
  assert state["params"]["wi"].sharding.spec == P("fsdp", "tensor")
  # Each device holds a (8/2, 32/2) block of wi.
  assert state["params"]["wi"].addressable_shards[0].data.shape == (4, 16)
  with pytest.raises(ValueError, match="pass tx="):
    partitioning.state_shardings(abstract, boxed, mesh)
  with pytest.raises(ValueError, match="does not have the structure"):
    partitioning.state_shardings(abstract, boxed, mesh, tx=optax.sgd(1.0))


def test_global_batch_and_activation_constraint():
  mesh = partitioning.make_mesh((2, 2, 2))
  local = {"decoder_target_tokens": np.arange(16 * 3, dtype=np.int32).reshape(16, 3)}
  batch = partitioning.make_global_batch(local, mesh)
  arr = batch["decoder_target_tokens"]
  assert arr.shape == (16, 3)
  assert arr.sharding.spec == P(("data", "fsdp"))
  assert arr.addressable_shards[0].data.shape == (4, 3)
  np.testing.assert_array_equal(np.asarray(arr), local["decoder_target_tokens"])
  with pytest.raises(ValueError, match="not divisible by the 4 batch shards"):
    partitioning.make_global_batch({"x": np.zeros((6, 2))}, mesh)

  # Inside axis_rules the model's activation constraint uses the rules.
  model = _Toy()
  x = jnp.zeros((4, 4), jnp.int32)
  params = model.init(jax.random.key(0), x)
  with partitioning.axis_rules(mesh):
    hlo = jax.jit(model.apply).lower(params, x).as_text()
  assert '<@mesh, [{"data", "fsdp"}, {}, {}]> : tensor<4x4x8xf32>' in hlo  # (batch, length, embed)


def test_real_base_preset_specs_on_2x4_mesh_divide_evenly():
  """t5_1_1_base via eval_shape (no memory) on a (data=1, fsdp=2, tensor=4) mesh."""
  from lm.model.presets import make_config
  from lm.model.transformer import Transformer
  mesh = partitioning.make_mesh((1, 2, 4))
  model = Transformer(make_config("t5_1_1", "base", "encoder_decoder"))
  batch = {"encoder_input_tokens": jnp.zeros((1, 8), jnp.int32),
           "decoder_input_tokens": jnp.zeros((1, 4), jnp.int32),
           "decoder_target_tokens": jnp.zeros((1, 4), jnp.int32)}
  boxed = jax.eval_shape(lambda: model.init(jax.random.key(0), batch)["params"])
  specs = partitioning.params_partition_specs(boxed)
  layer = specs["encoder"]["layers_0"]
  assert specs["token_embedder"]["embedding"] == P("tensor", "fsdp")
  assert specs["logits_dense"]["kernel"] == P("fsdp", "tensor")
  assert layer["self_attention"]["query"] == P("fsdp", "tensor", None)
  assert layer["self_attention"]["out"] == P("tensor", None, "fsdp")
  assert layer["mlp"]["wi_0"] == P("fsdp", "tensor")
  assert layer["mlp"]["wo"] == P("tensor", "fsdp")
  assert layer["pre_mlp_layer_norm"]["scale"] == P("fsdp")
  assert specs["encoder"]["relpos_bias"]["rel_embedding"] == P("tensor", None)
  shapes = jax.tree.leaves(nn.meta.unbox(boxed))
  flat_specs = jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, P))
  assert len(shapes) == len(flat_specs)
  for leaf, spec in zip(shapes, flat_specs):
    for dim, axes in zip(leaf.shape, spec):
      for axis in (axes if isinstance(axes, tuple) else (axes,)):
        if axis is not None:
          assert dim % mesh.shape[axis] == 0, (leaf.shape, spec)


# Every optimizer setting config.optim offers (lm/optim.py: adafactor and adamw; the
# adafactor switches that add or change per-param state; global-norm clipping).
_ADAFACTOR = dict(decay_rate=0.8, decay_offset=0, factored=True, multiply_by_parameter_scale=True,
                  clipping_threshold=1.0, momentum=0.0, eps=1e-30, min_dim_size_to_factor=16,
                  weight_decay_rate=0.0)
_OPTIMIZERS = {
    "adafactor_factored": dict(name="adafactor", adafactor=_ADAFACTOR),
    "adafactor_unfactored": dict(name="adafactor", adafactor=dict(_ADAFACTOR, factored=False)),
    "adafactor_momentum": dict(name="adafactor", adafactor=dict(_ADAFACTOR, momentum=0.9)),
    "adafactor_unfactored_momentum_decay": dict(name="adafactor", grad_clip_norm=1.0, adafactor=dict(
        _ADAFACTOR, factored=False, momentum=0.9, weight_decay_rate=1e-3)),
    "adamw": dict(name="adamw", adamw=dict(b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)),
    "adamw_clipped": dict(name="adamw", grad_clip_norm=1.0,
                          adamw=dict(b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.0)),
}


def _strip(spec):
  """PartitionSpec as a tuple without trailing Nones (P() == P(None) == P(None, None))."""
  spec = tuple(spec)
  while spec and spec[-1] is None:
    spec = spec[:-1]
  return spec


def _matrix_view_spec(path, spec, adafactor):
  """The spec of the [D, N*H] / [N*H, D] view Adafactor sees (attention heads are the
  major merged axis, head_dim is unsharded, so the merged dim keeps the heads' axis)."""
  spec = tuple(spec)
  if adafactor and "attention" in path[-2]:
    if path[-1] in ("query", "key", "value"):
      assert spec[-1] is None
      return spec[:-1]
    if path[-1] == "out":
      assert spec[1] is None
      return (spec[0],) + spec[2:]
  return spec


def _optimizer_plan(setting):
  """(model, tx, schedule, batch, mesh, abstract state, its shardings) for one setting."""
  from lm import config as config_lib
  from lm import optim, steps
  from lm.model.transformer import Transformer, TransformerConfig
  # emb 32 and heads * head_dim 32: the attention view [32, 32] is square, so its two
  # factored statistics have equal shapes and only construction can tell them apart.
  model = Transformer(TransformerConfig(vocab_size=64, emb_dim=32, num_heads=4, head_dim=8,
                                        mlp_dim=64, num_encoder_layers=1, num_decoder_layers=1,
                                        dtype="float32"))
  schedule = optim.make_schedule(optim.ScheduleConfig(name="constant", base_lr=1e-3,
                                                      warmup_steps=0))
  tx = optim.make_optimizer(config_lib.from_mapping(optim.OptimConfig, _OPTIMIZERS[setting]),
                            schedule)
  batch = {"encoder_input_tokens": np.full((8, 8), 5, np.int32),
           "decoder_input_tokens": np.full((8, 4), 6, np.int32),
           "decoder_target_tokens": np.full((8, 4), 7, np.int32)}
  mesh = partitioning.make_mesh((2, 2, 2))
  abstract, boxed = steps.abstract_train_state(jax.random.key(0), batch, model=model, tx=tx)
  sh = partitioning.state_shardings(abstract, boxed, mesh, tx=tx)
  return model, tx, schedule, batch, mesh, abstract, boxed, sh


@pytest.mark.parametrize("setting", sorted(_OPTIMIZERS))
def test_every_optimizer_state_is_sharded_like_its_param(setting):
  """Each optimizer leaf on a (2, 2, 2) mesh: full-size statistics sharded as their param
  (through Adafactor's [D, N*H] view), factored ones as the param minus the reduced dim,
  scalars replicated."""
  from lm import optim
  cfg = _OPTIMIZERS[setting]
  adafactor = cfg["name"] == "adafactor"
  *_, abstract, boxed, sh = _optimizer_plan(setting)
  specs = partitioning.params_partition_specs(boxed)
  # Golden param specs the expectations below build on.
  attn = specs["encoder"]["layers_0"]["self_attention"]
  assert attn["query"] == P("fsdp", "tensor", None) and attn["out"] == P("tensor", None, "fsdp")

  params = {tuple(k.key for k in p): (x, s) for (p, x), s in zip(
      jax.tree_util.tree_flatten_with_path(abstract.params)[0],
      jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, P)))}
  opt_leaves = jax.tree_util.tree_flatten_with_path(abstract.opt_state)[0]
  opt_sh = jax.tree.leaves(sh.opt_state)
  assert len(opt_leaves) == len(opt_sh)
  checked = {"full": 0, "factored": 0, "scalar": 0}
  for (path, leaf), got in zip(opt_leaves, opt_sh):
    names = tuple(getattr(k, "key", getattr(k, "name", None)) for k in path)
    owner = [pp for pp in params if names[-len(pp):] == pp]
    where = jax.tree_util.keystr(path)
    if not owner:  # counters and other per-optimizer scalars
      assert leaf.size == 1 and _strip(got.spec) == (), where
      checked["scalar"] += 1
      continue
    pshape, pspec = params[owner[0]][0].shape, params[owner[0]][1]
    view = _matrix_view_spec(owner[0], pspec, adafactor)
    if leaf.size == 1 and np.prod(pshape) > 1:  # placeholder of the unused statistic
      assert _strip(got.spec) == (), where
      continue
    if leaf.size == np.prod(pshape):  # full-size: mu, nu, v, ema
      assert _strip(got.spec) == _strip(view), (where, got.spec, view)
      checked["full"] += 1
    else:  # factored: optax reduces the largest dim for v_row, the second for v_col
      vshape = optim.t5_matrix_shape(tuple(map(str, owner[0])), pshape)
      d1, d0 = np.argsort(vshape, kind="stable")[-2:]
      reduced = d0 if "v_row" in names else d1
      want = tuple(s for i, s in enumerate(view) if i != reduced)
      assert _strip(got.spec) == _strip(want), (where, got.spec, want)
      checked["factored"] += 1
  assert checked["full"] > 0 and checked["scalar"] > 0
  assert (checked["factored"] > 0) == (adafactor and cfg["adafactor"]["factored"])
  if adafactor and cfg["adafactor"]["factored"]:
    # The square attention view: v_row keeps fsdp (rows = embed), v_col keeps tensor.
    fac = sh.opt_state[0]
    row = fac.v_row["encoder"]["layers_0"]["self_attention"]["query"]
    col = fac.v_col["encoder"]["layers_0"]["self_attention"]["query"]
    assert (row.spec, col.spec) == (P("fsdp"), P("tensor"))
  if adafactor and not cfg["adafactor"]["factored"]:
    # The bug this guards against: v of the [D, N*H] view was replicated.
    v = optax.tree_utils.tree_get(sh.opt_state, "v")["encoder"]["layers_0"]["self_attention"][
        "query"]
    assert v.spec == P("fsdp", "tensor")


def _check_jitted_step(setting):
  """Init and one jitted train step with the planned shardings: the state is laid out as
  planned and every statistic holds 1/k of itself per device (k = its shard count)."""
  import functools
  from lm import steps
  model, tx, schedule, batch, mesh, _, _, sh = _optimizer_plan(setting)
  rng = jax.random.key(0)
  step = functools.partial(steps.train_step, model=model, tx=tx, schedule=schedule)
  batch_sh = partitioning.batch_shardings(batch, mesh)
  with partitioning.axis_rules(mesh):
    state = jax.jit(functools.partial(steps.create_train_state, model=model, tx=tx),
                    out_shardings=sh)(rng, batch)
    state, metrics = jax.jit(step, in_shardings=(sh, batch_sh), out_shardings=(sh, None))(
        state, partitioning.make_global_batch(batch, mesh))
  assert np.isfinite(float(metrics["loss"][0]))
  sharded = 0
  for arr, want in zip(jax.tree.leaves(state.opt_state), jax.tree.leaves(sh.opt_state)):
    assert arr.sharding.is_equivalent_to(want, arr.ndim)
    split = [1 if ax is None else
             int(np.prod([mesh.shape[a] for a in (ax if isinstance(ax, tuple) else (ax,))]))
             for ax in want.spec] + [1] * (arr.ndim - len(want.spec))
    assert arr.addressable_shards[0].data.shape == tuple(n // k for n, k in zip(arr.shape, split))
    sharded += np.prod(split) > 1
  assert sharded > 0


@pytest.mark.slow
@pytest.mark.parametrize("setting", sorted(_OPTIMIZERS))
def test_jitted_step_with_every_optimizer_sharding(setting):
  _check_jitted_step(setting)
