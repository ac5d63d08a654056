"""Device mesh, logical axis rules and shardings for the train state and batches.

What lives here: building a `jax.sharding.Mesh` with axes (data, fsdp, tensor) from a
shape such as (-1, 1, 1); the default logical-axis rules (logical names used by the model
-> mesh axes); NamedShardings for an abstract train state and for batches; assembling
global batch arrays from each process's local rows.

What does not: the model (it names only logical axes), the train loop (lm/train.py).

Conventions (docs/t5_reference.md §4): `data` is pure data parallelism (params replicated),
`fsdp` shards the batch AND the params' `embed` dimension (ZeRO-3 / MaxText default),
`tensor` is Megatron-style model parallelism over heads / mlp / vocab (t5x's `model`).
So mesh (N, 1, 1) = t5x's default data parallel, (1, N, 1) = FSDP, (1, 1, N) = 1-D
model parallel, and any product in between.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

AXIS_NAMES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

# Priority-ordered (flax `logical_to_mesh_axes`: a logical dim takes the first rule whose
# mesh axes are not already used by another dim of the same array). `batch` comes first
# so that an activation ('batch', 'length', 'embed') keeps batch over (data, fsdp) and
# leaves `embed` unsharded, while a parameter ('vocab', 'embed') gets embed over fsdp.
DEFAULT_LOGICAL_AXIS_RULES: tuple[tuple[str, Any], ...] = (
    ("batch", BATCH_AXES),
    ("vocab", "tensor"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    # Grouped-query attention's key/value heads (num_kv_heads < num_heads): replicated, as
    # K often does not divide the tensor axis (each device projects all K heads, then
    # reads the ones its query heads need). ("kv_heads", "tensor") shards them where K
    # divides it (lm.validate checks).
    ("kv_heads", None),
    ("joined_kv", "tensor"),
    ("embed", "fsdp"),
    ("kv", None),
    ("length", None),
    ("layers", None),
    ("relpos_buckets", None),
    ("mlp_activations", None),
    ("stack", None),
)


def mesh_shape_tuple(shape: Sequence[int] | str) -> tuple[int, ...]:
  """Syntax check of a mesh shape: ints (or "-1,1,1" / "(2, 2, 2)"), positive or one -1.

  Raises:
    ValueError: saying what is wrong with the shape.
  """
  if isinstance(shape, str):
    text = shape.strip().strip("()[]")
    try:
      shape = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
      raise ValueError(f"mesh shape {shape!r} is not a comma-separated list of ints, "
                       "e.g. '-1,1,1'.") from None
  if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape):
    raise ValueError(f"mesh shape {tuple(shape)} must be ints, e.g. (-1, 1, 1).")
  shape = tuple(int(s) for s in shape)
  if not shape:
    raise ValueError("mesh shape is empty; use e.g. (-1, 1, 1) for (data, fsdp, tensor).")
  if any(s == 0 or s < -1 for s in shape):
    raise ValueError(f"mesh shape {shape}: sizes must be positive or a single -1.")
  n_fill = shape.count(-1)
  if n_fill > 1:
    raise ValueError(f"mesh shape {shape} has {n_fill} entries of -1; at most one may be -1.")
  return shape


def parse_mesh_shape(shape: Sequence[int] | str, num_devices: int) -> tuple[int, ...]:
  """Resolves a mesh shape with at most one -1 against a device count.

  Args:
    shape: ints (or a string like "-1,1,1" / "(2, 2, 2)"); one entry may be -1, meaning
      "all remaining devices".
    num_devices: how many devices the mesh must cover exactly.

  Returns:
    The resolved shape, whose product is `num_devices`.

  Raises:
    ValueError: with the shape, the device count and what to change.
  """
  shape = mesh_shape_tuple(shape)
  known = math.prod(s for s in shape if s != -1)
  if -1 in shape:
    if num_devices % known:
      raise ValueError(
          f"mesh shape {shape} does not fit {num_devices} devices: the fixed axes' "
          f"product {known} does not divide {num_devices}.")
    shape = tuple(num_devices // known if s == -1 else s for s in shape)
  elif known != num_devices:
    raise ValueError(
        f"mesh shape {shape} has {known} devices but {num_devices} are present; make the "
        "product equal the device count or put -1 on one axis.")
  return shape


def make_mesh(shape: Sequence[int] | str = (-1, 1, 1),
              axis_names: Sequence[str] = AXIS_NAMES,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
  """Builds a Mesh over all (or the given) devices.

  Args:
    shape: one size per axis name; one entry may be -1 (fills the remaining devices).
    axis_names: mesh axis names, default ("data", "fsdp", "tensor").
    devices: devices to use; default `jax.devices()` (all processes).

  Returns:
    A Mesh with Auto axis types (shardings propagate as with pjit; jax.make_mesh's
    default would be Explicit sharding-in-types).
  """
  devices = list(jax.devices() if devices is None else devices)
  resolved = parse_mesh_shape(shape, len(devices))
  if len(resolved) != len(axis_names):
    raise ValueError(f"mesh shape {tuple(resolved)} has {len(resolved)} axes but axis_names "
                     f"{tuple(axis_names)} has {len(axis_names)}.")
  return jax.make_mesh(resolved, tuple(axis_names),
                       axis_types=(AxisType.Auto,) * len(resolved), devices=devices)


def rules_from_config(rules: Sequence[Sequence[Any]] | None) -> tuple[tuple[str, Any], ...]:
  """Normalises config rules (lists from a ConfigDict) into a tuple of (name, axes) pairs."""
  if rules is None:
    return DEFAULT_LOGICAL_AXIS_RULES
  out = []
  for rule in rules:
    if len(rule) != 2:
      raise ValueError(f"logical axis rule {rule!r} must be a (logical_name, mesh_axes) pair.")
    name, axes = rule
    if isinstance(axes, list):
      axes = tuple(axes)
    out.append((str(name), axes))
  return tuple(out)


def logical_to_mesh_spec(logical_names: Sequence[str | None],
                         rules: Sequence[tuple[str, Any]] = DEFAULT_LOGICAL_AXIS_RULES) -> P:
  """Maps one array's logical axis names to a mesh PartitionSpec (flax's priority rules)."""
  return nn.logical_to_mesh_axes(tuple(logical_names), rules)


@contextlib.contextmanager
def axis_rules(mesh: Mesh, rules: Sequence[tuple[str, Any]] = DEFAULT_LOGICAL_AXIS_RULES):
  """Context in which to trace (jit) model code: sets the mesh and flax's logical rules.

  Needed for the model's `nn.with_logical_constraint` activation annotations; without
  the rules, flax would constrain every activation to be replicated.
  """
  with jax.set_mesh(mesh), nn.logical_axis_rules(tuple(rules)):
    yield


def params_partition_specs(boxed_params: Any,
                           rules: Sequence[tuple[str, Any]] = DEFAULT_LOGICAL_AXIS_RULES) -> Any:
  """Mesh PartitionSpecs for a tree of (abstract) boxed params.

  Args:
    boxed_params: params as returned by `model.init(...)["params"]` (or its eval_shape),
      leaves `nn.LogicallyPartitioned` with logical names; plain leaves are replicated.
    rules: logical axis rules.

  Returns:
    A tree of PartitionSpec with the structure of the UNBOXED params.
  """
  logical = nn.get_partition_spec(boxed_params)  # boxes -> PartitionSpec(logical names)
  return jax.tree.map(lambda spec: nn.logical_to_mesh_axes(tuple(spec), rules), logical,
                      is_leaf=lambda x: isinstance(x, P))


def opt_state_shardings(tx: Any, abstract_params: Any, param_specs: Any, mesh: Mesh) -> Any:
  """NamedShardings of ``tx``'s state, derived through the optimizer's own init.

  ``tx.init`` is traced (`jax.eval_shape`, nothing allocated) on abstract params that
  carry their shardings on a copy of ``mesh`` with Explicit axis types, so every
  optimizer-state leaf comes out with the sharding JAX's sharding-in-types rules give
  it from the param it was built from: a per-param statistic (Adam's mu/nu, Adafactor's
  unfactored v and momentum, SGD's trace) gets the param's spec; a factored statistic
  (Adafactor's v_row / v_col: the param with one dim reduced away) gets the param's spec
  without that dim; a statistic of a reshaped view (`lm.optim.as_t5_matrices`'s
  [D, N * H] attention matrices) gets the merged axes' spec; constants such as counters
  are replicated. No shapes are compared, so equal-shaped params of different layouts
  and square factored kernels cannot be confused.

  Args:
    tx: the optax GradientTransformation (lm.optim.make_optimizer).
    abstract_params: UNBOXED params or their ShapeDtypeStructs.
    param_specs: a tree of PartitionSpec with the params' structure
      (`params_partition_specs`).
    mesh: the device mesh (any axis types).

  Returns:
    A tree of NamedSharding on ``mesh`` with the structure of ``tx.init(params)``.

  Raises:
    ValueError: when the optimizer's init cannot be traced with these shardings (for
      example a sharded dim that the mesh axis does not divide), naming the cause.
  """
  explicit_types = (AxisType.Explicit,) * len(mesh.axis_names)
  if isinstance(mesh, jax.sharding.AbstractMesh):  # a plan with no compiler (lm.plan)
    explicit = jax.sharding.AbstractMesh(mesh.axis_sizes, mesh.axis_names,
                                         axis_types=explicit_types)
  else:
    explicit = Mesh(mesh.devices, mesh.axis_names, axis_types=explicit_types)
  sharded_params = jax.tree.map(
      lambda x, spec: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                           sharding=NamedSharding(explicit, spec)),
      abstract_params, param_specs)
  context = (jax.sharding.use_abstract_mesh(explicit)
             if isinstance(explicit, jax.sharding.AbstractMesh) else jax.set_mesh(explicit))
  try:
    with context:
      abstract_opt = jax.eval_shape(tx.init, sharded_params)
  except Exception as e:  # a JAX sharding error: re-raised with what was being done
    raise ValueError("cannot derive the optimizer state's shardings from the params' "
                     f"(check that each mesh axis divides the dims it shards): {e}") from e

  def sharding(leaf):
    spec = getattr(getattr(leaf, "sharding", None), "spec", None)
    return NamedSharding(mesh, P() if spec is None else P(*spec))

  return jax.tree.map(sharding, abstract_opt)


def state_shardings(abstract_state: Any, boxed_params: Any, mesh: Mesh,
                    rules: Sequence[tuple[str, Any]] = DEFAULT_LOGICAL_AXIS_RULES, *,
                    tx: Any = None) -> Any:
  """NamedShardings for a whole (abstract) train state.

  Params follow the logical rules; the optimizer state is sharded by construction from
  the params through ``tx``'s own init (`opt_state_shardings`); every other leaf (step,
  rng key) is replicated.

  Args:
    abstract_state: the train state (or its `jax.eval_shape`) with UNBOXED params under
      an attribute/key named "params" and the optimizer state under "opt_state".
    boxed_params: the boxed (abstract) params, for their logical axis names.
    mesh: the device mesh.
    rules: logical axis rules.
    tx: the optimizer that built "opt_state"; required when the state has one.

  Returns:
    A tree of NamedSharding with the structure of `abstract_state`.
  """
  specs = params_partition_specs(boxed_params, rules)
  replicated = NamedSharding(mesh, P())
  param_sh = jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs,
                          is_leaf=lambda x: isinstance(x, P))
  out = jax.tree.map(lambda _: replicated, abstract_state)

  def get(tree, name):
    return tree.get(name) if isinstance(tree, Mapping) else getattr(tree, name, None)

  if get(abstract_state, "params") is None:
    raise ValueError("state_shardings: the state has no 'params' key or attribute.")
  updates = {"params": param_sh}
  abstract_opt = get(abstract_state, "opt_state")
  if abstract_opt is not None:
    if tx is None:
      raise ValueError("state_shardings: the state has an 'opt_state'; pass tx= (the "
                       "optimizer that built it) so its shardings follow the params'.")
    opt_sh = opt_state_shardings(tx, get(abstract_state, "params"), specs, mesh)
    if jax.tree.structure(opt_sh) != jax.tree.structure(abstract_opt):
      raise ValueError("state_shardings: tx.init(params) does not have the structure of the "
                       "state's opt_state; pass the optimizer that built the state.")
    updates["opt_state"] = opt_sh
  if isinstance(out, Mapping):
    return type(out)({**out, **updates})
  return out.replace(**updates)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Sharding of a batch array [B, ...]: rows over (data, fsdp), the rest replicated."""
  axes = tuple(a for a in BATCH_AXES if a in mesh.axis_names)
  return NamedSharding(mesh, P(axes))


def batch_shardings(batch: Mapping[str, Any], mesh: Mesh) -> dict[str, NamedSharding]:
  """One `batch_sharding(mesh)` per feature of `batch` (a dict of [B, ...] arrays)."""
  sharding = batch_sharding(mesh)
  return {k: sharding for k in batch}


def make_global_batch(local_batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """Assembles global batch arrays from this process's rows.

  Args:
    local_batch: dict of NumPy arrays [B_local, ...], the rows this process loaded
      (B_local = B_global / process_count; with one process, the whole batch).
    mesh: the device mesh; rows are sharded over (data, fsdp).

  Returns:
    dict of jax.Array [B_global, ...] sharded with `batch_sharding(mesh)`.
  """
  sharding = batch_sharding(mesh)
  n_shards = math.prod(mesh.shape[a] for a in BATCH_AXES if a in mesh.axis_names)
  out = {}
  for name, x in local_batch.items():
    x = np.asarray(x)
    global_rows = x.shape[0] * jax.process_count()
    if global_rows % n_shards:
      raise ValueError(
          f"batch feature {name!r}: global batch size {global_rows} is not divisible by the "
          f"{n_shards} batch shards of mesh {dict(mesh.shape)}; change data.batch_size or "
          "the mesh shape.")
    out[name] = jax.make_array_from_process_local_data(
        sharding, x, (global_rows,) + x.shape[1:])
  return out
