"""A run's compiled program: model, optimizer, mesh, shardings and jitted steps, from its settings.

  run = build_run(lm.validate.validate(config))      # nothing of size allocated
  compiled = run.lower_train_step().compile()        # traced under run.axis_rules()

The one definition of what a run compiles: `lm.train` trains with it, `lm.plan` compiles it
ahead of time for devices that are not attached, and the benchmarks time it.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from lm import config as config_lib
from lm import optim, partitioning, steps
from lm import validate as validate_lib
from lm.data import features
from lm.model.transformer import Transformer, TransformerConfig


def batch_shapes(architecture: str, inputs_length: int, targets_length: int,
                 batch_size: int = 1) -> dict[str, jax.ShapeDtypeStruct]:
  """Shapes and dtypes of the training features, without allocating them.

  Returns:
    dict of ShapeDtypeStruct int32[batch_size, L] (float32 for decoder_loss_weights), with
    the keys the pipeline produces for `architecture` (`lm.data.features.batch_spec`).
  """
  return {k: jax.ShapeDtypeStruct((batch_size, length), dtype) for k, (length, dtype) in
          features.batch_spec(architecture, inputs_length, targets_length).items()}


def dummy_batch(architecture: str, inputs_length: int, targets_length: int,
                batch_size: int = 1) -> dict[str, np.ndarray]:
  """All-zero features with the training shapes (for init and abstract shapes).

  Returns:
    dict of int32[batch_size, L] arrays (float32 for decoder_loss_weights), with the
    keys the pipeline produces for `architecture` (`lm.data.features.zero_batch`).
  """
  return features.zero_batch(architecture, inputs_length, targets_length, batch_size)


@dataclasses.dataclass(frozen=True)
class RunBuild:
  """Everything a run compiles, built from a config without allocating anything of size.

  Attributes:
    settings: the run's typed settings (lm.config.RunSettings, from lm.validate.validate);
      `model_config` and `data_spec` are its model and data parts.
    model: the Transformer of settings.model.
    schedule, tx: the learning-rate schedule and the optax optimizer.
    mesh, rules: the device mesh and the logical-axis rules.
    rng: the run's root PRNG key (config.train.seed).
    abstract_state: TrainState of ShapeDtypeStructs; boxed_params: the abstract boxed
      params (logical axis names).
    state_shardings: NamedShardings for the train state.
    batch_shapes: {feature: ShapeDtypeStruct [global batch, L]} of one training batch.
    batch_shardings: {feature: NamedSharding} (rows over data x fsdp).
    train_step: jitted (state, batch) -> (state, metrics), state donated.
    eval_step: jitted (params, batch) -> metrics.

  Trace (call or lower) the steps inside `with build.axis_rules():` so that the model's
  activation sharding constraints see the mesh and the rules.
  """
  settings: config_lib.RunSettings
  model: Transformer
  schedule: Any
  tx: Any
  mesh: Any
  rules: tuple
  rng: Any
  abstract_state: Any
  boxed_params: Any
  state_shardings: Any
  batch_shapes: Mapping[str, jax.ShapeDtypeStruct]
  batch_shardings: Mapping[str, Any]
  train_step: Any
  eval_step: Any

  @property
  def model_config(self) -> TransformerConfig:
    """The model's frozen config (settings.model)."""
    return self.settings.model

  @property
  def data_spec(self) -> Any:
    """The batches' frozen spec (settings.data: a DataSpec, or a fine-tuning run's
    FinetuneSpec; its architecture is the model's layout)."""
    return self.settings.data

  def axis_rules(self):
    """Context for tracing the steps: the mesh and the logical-axis rules."""
    return partitioning.axis_rules(self.mesh, self.rules)

  def abstract_batch(self) -> dict[str, jax.ShapeDtypeStruct]:
    """`batch_shapes` carrying `batch_shardings` (inputs for `train_step.lower`)."""
    return {k: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=self.batch_shardings[k])
            for k, s in self.batch_shapes.items()}

  def init_state(self):
    """A new train state from `rng`, placed on `state_shardings` (call inside axis_rules())."""
    d = self.data_spec
    return self.lower_init().compile()(
        self.rng, dummy_batch(d.architecture, d.inputs_length, d.targets_length))

  def lower_init(self, platforms: tuple[str, ...] | None = None):
    """The initialisation, one jit with the state's out_shardings, lowered (for `platforms`,
    default the devices'). On GPUs each parameter's threefry is lowered to JAX's GPU kernel
    instead of unrolled HLO (`jax_threefry_gpu_kernel_lowering`): the same numbers, and a
    program XLA compiles in a fraction of the time (docs/speed.md); other platforms'
    programs are unchanged."""
    d = self.data_spec
    init = jax.jit(functools.partial(steps.create_train_state, model=self.model, tx=self.tx),
                   out_shardings=self.state_shardings)
    previous = jax.config.jax_threefry_gpu_kernel_lowering
    jax.config.update("jax_threefry_gpu_kernel_lowering", True)
    try:
      return init.trace(self.rng, dummy_batch(d.architecture, d.inputs_length, d.targets_length)
                        ).lower(lowering_platforms=platforms)
    finally:
      jax.config.update("jax_threefry_gpu_kernel_lowering", previous)

  def lower_train_step(self):
    """The train step lowered for abstract inputs (`.compile()` it for XLA's analyses)."""
    state = jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                         self.abstract_state, self.state_shardings)
    with self.axis_rules():
      return self.train_step.lower(state, self.abstract_batch())


def build_run(settings: config_lib.RunSettings, *, devices: Any = None,
              mesh: Any = None) -> RunBuild:
  """Builds the model, optimizer, mesh, shardings and jitted steps of a run's settings.

  The one place where a run's compiled program is defined: `train_and_evaluate` trains
  with it and `lm.plan` compiles it ahead of time for devices that are not attached.
  Nothing of size is allocated: the state and the batch are abstract.

  Args:
    settings: the run's typed settings (`lm.validate.validate(config)`).
    devices: the devices of the mesh (default jax.devices()); e.g. a TPU topology's
      compile-only devices.
    mesh: a ready mesh with axes (data, fsdp, tensor) instead of `devices`, e.g. a
      multi-slice hybrid mesh, or a `jax.sharding.AbstractMesh` (shardings and shapes
      only: the steps can then not be compiled); its shape must be settings.mesh_shape's.

  Raises:
    ValueError: the run does not fit the devices (`lm.validate.device_errors`: every
      problem listed), or `mesh` does not match settings.mesh_shape.
  """
  if mesh is None:
    devices = list(jax.devices() if devices is None else devices)
    num_devices = len(devices)
  else:
    num_devices = mesh.size
  spec = settings.data
  # One example per row (data.pack=False) lets cuDNN express padding by sequence lengths.
  model = Transformer(settings.model, packed_rows=bool(spec.pack))
  schedule = optim.make_schedule(settings.schedule)
  tx = optim.make_optimizer(settings.optim, schedule)
  rng = jax.random.key(settings.loop.seed)
  abstract, boxed = steps.abstract_train_state(rng, dummy_batch(
      spec.architecture, spec.inputs_length, spec.targets_length), model=model, tx=tx)
  validate_lib.check_devices(settings, num_devices, boxed_params=boxed)
  if mesh is None:
    mesh = partitioning.make_mesh(settings.mesh_shape, devices=devices)
  elif tuple(mesh.shape.values()) != partitioning.parse_mesh_shape(settings.mesh_shape,
                                                                   num_devices):
    raise ValueError(f"mesh {dict(mesh.shape)} does not match config.mesh.shape "
                     f"{settings.mesh_shape}.")
  rules = settings.rules
  shapes = batch_shapes(spec.architecture, spec.inputs_length, spec.targets_length,
                        spec.batch_size)
  state_sh = partitioning.state_shardings(abstract, boxed, mesh, rules, tx=tx)
  batch_sh = partitioning.batch_shardings(shapes, mesh)
  train_fn = jax.jit(
      functools.partial(steps.train_step, model=model, tx=tx, schedule=schedule,
                        **settings.train_step_kwargs),
      in_shardings=(state_sh, batch_sh), out_shardings=(state_sh, None), donate_argnums=0)
  eval_fn = jax.jit(functools.partial(steps.eval_step, model=model,
                                      **settings.eval_step_kwargs),
                    in_shardings=(state_sh.params, batch_sh))
  return RunBuild(settings=settings, model=model, schedule=schedule, tx=tx, mesh=mesh,
                  rules=rules, rng=rng, abstract_state=abstract, boxed_params=boxed,
                  state_shardings=state_sh, batch_shapes=shapes, batch_shardings=batch_sh,
                  train_step=train_fn, eval_step=eval_fn)
