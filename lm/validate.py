"""Checks a run's config before anything is built or compiled: `validate(config, num_devices)`.

Every problem is collected and reported at once, each naming the field to change. The checks
build the same typed settings as the run (lm/config.py: `model_config`, `optim_config`, ...),
so a config that validates is one the library accepts. `device_errors(settings, num_devices)`
checks the typed settings against a device count: the mesh, and that every sharded parameter
dim and the batch divide over it (validate runs it when given the count; lm.program.build_run
always does, for its mesh).
"""
from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import ml_collections
import numpy as np

from lm import architecture as architecture_lib
from lm import config as config_lib
from lm import losses, optim, partitioning
from lm.config import (check_derived, checkpoint_config, loop_config, model_config,
                       optim_config, schedule_config)
from lm.data import features, objectives
from lm.data.tokenizer import padded_vocab_size
from lm.model.transformer import Transformer, TransformerConfig

WANDB_MODES = ("auto", "online", "offline", "disabled")


def _mesh_shape_errors(shape: Any, num_devices: int | None) -> list[str]:
  try:
    parsed = partitioning.mesh_shape_tuple(shape)
    if len(parsed) != len(partitioning.AXIS_NAMES):
      return [f"config.mesh.shape {parsed} needs {len(partitioning.AXIS_NAMES)} sizes for axes "
              f"{partitioning.AXIS_NAMES}."]
    if num_devices is not None:
      partitioning.parse_mesh_shape(parsed, num_devices)
  except ValueError as e:
    return [f"config.mesh.shape: {e}"]
  return []


# The config field that sets each logical parameter axis's size (lm/model names).
_LOGICAL_AXIS_FIELDS = {
    "vocab": "config.model.vocab_size", "embed": "config.model.emb_dim",
    "mlp": "config.model.mlp_dim", "heads": "config.model.num_heads",
    "kv_heads": "config.model.num_kv_heads",
    "kv": "config.model.head_dim", "joined_kv": "config.model.num_heads * head_dim",
    "relpos_buckets": "config.model.relative_num_buckets",
}


def _param_divisibility_errors(boxed: Any, mesh_shape: tuple[int, ...], rules: Any
                               ) -> list[str]:
  """Each sharded parameter dim must be divisible by its mesh axes' device count.

  Args:
    boxed: the abstract boxed params (their logical axis names), e.g. from tracing the
      model's init with `jax.eval_shape` (nothing allocated).
    mesh_shape: the resolved mesh shape (data, fsdp, tensor).
    rules: the logical-axis rules, mapping logical axes to mesh axes as in training.
  """
  logical = nn.get_partition_spec(boxed)
  sizes = dict(zip(partitioning.AXIS_NAMES, mesh_shape))
  errors, seen = [], set()
  flat = jax.tree_util.tree_flatten_with_path(nn.meta.unbox(boxed))[0]
  names = jax.tree.leaves(logical, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
  for (path, leaf), axes in zip(flat, names):
    spec = nn.logical_to_mesh_axes(tuple(axes), rules)
    for dim, logical_name, mesh_axes in zip(leaf.shape, tuple(axes), tuple(spec)):
      if mesh_axes is None:
        continue
      mesh_axes = mesh_axes if isinstance(mesh_axes, tuple) else (mesh_axes,)
      count = int(np.prod([sizes[a] for a in mesh_axes]))
      key = (logical_name, dim, mesh_axes)
      if dim % count and key not in seen:
        seen.add(key)
        field = _LOGICAL_AXIS_FIELDS.get(logical_name, f"the {logical_name!r} dim")
        errors.append(
            f"{field}={dim} is not divisible by the {count} devices of mesh axis "
            f"{'x'.join(mesh_axes)} that shard it (logical axis {logical_name!r}, param "
            f"{jax.tree_util.keystr(path)}, config.mesh.shape={tuple(mesh_shape)}); change "
            "the size or the mesh shape.")
  return errors


def device_errors(settings: config_lib.RunSettings, num_devices: int, *,
                  boxed_params: Any = None) -> list[str]:
  """What keeps a run's typed settings from running on `num_devices` devices.

  The mesh shape must cover them, every sharded parameter dim must divide over its mesh
  axes, and each microbatch over the batch shards (data x fsdp).

  Args:
    settings: the run's RunSettings (`validate`'s result).
    num_devices: the devices of the mesh.
    boxed_params: the model's abstract boxed params if the caller has traced them already
      (lm.program.build_run); else the model's init is traced here (nothing allocated).

  Returns:
    one message per problem, each naming the field to change; empty when the run fits.
  """
  d = settings.data
  return _fit_errors(settings.model, d.inputs_length, d.targets_length, d.batch_size,
                     settings.optim.grad_accum_steps, settings.mesh_shape, settings.rules,
                     num_devices, boxed_params)


def _fit_errors(model: TransformerConfig, inputs_length: int, targets_length: int,
                batch_size: int, grad_accum_steps: int, mesh_shape: Any, rules: Any,
                num_devices: int, boxed_params: Any = None) -> list[str]:
  """`device_errors` from the typed values it reads (validate has them before the
  settings exist, and lists these with the config's other problems)."""
  try:
    shape = partitioning.parse_mesh_shape(mesh_shape, num_devices)
  except ValueError as e:
    return [f"config.mesh.shape: {e}"]
  if boxed_params is None:
    batch = features.zero_batch(model.mask_type, inputs_length, targets_length, segments=False)
    boxed_params = jax.eval_shape(
        lambda b: Transformer(model).init(jax.random.key(0), b)["params"], batch)
  errors = _param_divisibility_errors(boxed_params, shape, rules)
  shards = math.prod(shape[:2])
  micro = batch_size // grad_accum_steps
  if micro % shards:
    errors.append(f"config.data.batch_size={batch_size} / grad_accum_steps={grad_accum_steps} "
                  f"= {micro} rows per microbatch is not divisible by the {shards} batch shards "
                  f"(data x fsdp of mesh {shape}).")
  return errors


def check_devices(settings: config_lib.RunSettings, num_devices: int, *,
                  boxed_params: Any = None) -> None:
  """Raises ValueError listing `device_errors(...)` if there are any."""
  _raise(device_errors(settings, num_devices, boxed_params=boxed_params))


def _raise(errors: list[str]) -> None:
  if errors:
    raise ValueError("invalid config:\n  - " + "\n  - ".join(errors))


def validate(config: ml_collections.ConfigDict, num_devices: int | None = None
             ) -> config_lib.RunSettings:
  """Checks a config before anything is built or compiled; returns its typed settings.

  Args:
    config: a config from configs/*.py (after command-line overrides).
    num_devices: if given (jax.device_count()), also check that the mesh fits and that
      the batch splits over the batch shards.

  Returns:
    the run's RunSettings, each part built here once (lm.train builds the run from them).

  Raises:
    ValueError: listing every problem found, each saying which field to change.
  """
  check_derived(config)  # lm.config.derive fills them; every check below reads them
  errors: list[str] = []

  # model (the architecture, the one owner of the layout, is checked with it)
  try:
    model = model_config(config)
  except (ValueError, TypeError) as e:
    errors.append(f"config.model: {e}")
    model = None
  arch = config.model.get("architecture")
  layout = architecture_lib.layout(arch) if arch in architecture_lib.ARCHITECTURES else None
  encdec = layout == "encoder_decoder"
  encoder_layers = config.model.get("encoder_num_layers")
  if encoder_layers is not None and layout is not None and not encdec:
    errors.append(f"config.model.encoder_num_layers={encoder_layers} sets an encoder's depth, "
                  f"and config.model.architecture={arch!r} has no encoder (model_config would "
                  "ignore it); leave it unset: num_layers is the one stack's depth.")
  d = config.data
  if model is not None:
    if d.tokenizer is None:
      vocab = d.default_vocab_size + d.extra_ids
      if model.vocab_size not in (vocab, padded_vocab_size(vocab)):
        errors.append(f"config.model.vocab_size={model.vocab_size} does not match the on-the-fly "
                      f"tokenizer ({d.default_vocab_size} pieces + {d.extra_ids} extra ids = "
                      f"{vocab}); set config.model.vocab_size={padded_vocab_size(vocab)}.")
    if model.position_encoding == "learned" and model.max_length is not None:
      row = (max(d.inputs_length, d.targets_length) if encdec
             else d.inputs_length + d.targets_length)
      if row > model.max_length:
        errors.append(f"config.model.max_length={model.max_length} is shorter than the "
                      f"sequence length {row}; raise it or shorten config.data lengths.")

  # data
  for name in ("targets_length", "batch_size", "num_threads"):
    if not d[name] > 0:
      errors.append(f"config.data.{name} must be positive, got {d[name]}.")
  if not d.prefetch_batches >= 0:
    errors.append(f"config.data.prefetch_batches must be >= 0 (0 = no prefetching), got "
                  f"{d.prefetch_batches}.")
  if "max_bad_fraction" in d and not 0.0 <= d.max_bad_fraction <= 1.0:
    errors.append(f"config.data.max_bad_fraction must be in [0, 1], got {d.max_bad_fraction}.")
  if "on_decode_error" in d:
    if d.on_decode_error not in ("replace", "skip"):
      errors.append(f"config.data.on_decode_error must be 'replace' or 'skip' (invalid UTF-8 in "
                    f"data files), got {d.on_decode_error!r}.")
    elif d.on_decode_error != "replace" and d.format == "default" and not d.eval_paths:
      errors.append(f"config.data.on_decode_error={d.on_decode_error!r} applies to data files, "
                    "and config.data.format='default' (the embedded corpus, valid UTF-8) reads "
                    "none: set config.data.format and paths, or leave on_decode_error at "
                    "'replace'.")
  if not 0.0 <= d.validation_fraction < 1.0:
    errors.append(f"config.data.validation_fraction must be in [0, 1), got "
                  f"{d.validation_fraction}.")
  # A fine-tuning run's examples come from its tasks: the objective's checks do not apply.
  finetuning = config_lib.finetuning(config)
  known_objective = d.objective in objectives.OBJECTIVES
  if not known_objective and not finetuning:
    errors.append(f"unknown config.data.objective {d.objective!r}; expected one of "
                  f"{sorted(objectives.OBJECTIVES)}.")
  no_inputs = (known_objective and not objectives.layout(d.objective).has_inputs
               and layout is not None and not encdec)
  if not (d.inputs_length > 0 or (d.inputs_length == 0 and no_inputs)):
    errors.append(f"config.data.inputs_length must be positive, got {d.inputs_length} (0 only "
                  "for a decoder-only architecture with objective 'full_lm').")
  if d.loss_on_inputs and layout == "prefix_lm":
    errors.append("config.data.loss_on_inputs=True with config.model.architecture='prefix_lm': "
                  "the prefix is bidirectional, so each inputs position would see its own next "
                  "token; set loss_on_inputs=False or use arch=causal.")
  elif d.loss_on_inputs and encdec:
    errors.append("config.data.loss_on_inputs=True needs a decoder-only architecture (the "
                  "encoder has no loss); set it to False.")
  if known_objective and not finetuning and d.inputs_length >= 0 and d.targets_length > 0:
    try:
      objectives.check_lengths(d.objective, inputs_length=d.inputs_length,
                               targets_length=d.targets_length, num_extra_ids=d.extra_ids,
                               allow_truncated_targets=bool(d.get("allow_truncated_targets")),
                               **d.objective_params.to_dict())
    except ValueError as e:
      errors.append(f"config.data: {e}")

  # optimizer, schedule, loss
  try:
    opt, sched = optim_config(config), schedule_config(config)
    optim.make_optimizer(opt, optim.make_schedule(sched))
  except ValueError as e:
    errors.append(f"config.optim/schedule: {e}")
  k = config.optim.grad_accum_steps
  if not k >= 1:
    errors.append(f"config.optim.grad_accum_steps must be >= 1, got {k}.")
  elif d.batch_size % k:
    errors.append(f"config.data.batch_size={d.batch_size} is not divisible by "
                  f"config.optim.grad_accum_steps={k}.")
  lc = config.loss
  if lc.normalization not in losses.NORMALIZATIONS:
    errors.append(f"unknown config.loss.normalization {lc.normalization!r}; expected one of "
                  f"{losses.NORMALIZATIONS}.")
  if lc.normalization == "constant" and not lc.normalizing_constant > 0:
    errors.append("config.loss.normalizing_constant must be > 0 with normalization='constant'.")
  if not 0.0 <= lc.label_smoothing < 1.0:
    errors.append(f"config.loss.label_smoothing must be in [0, 1), got {lc.label_smoothing}.")
  if lc.z_loss < 0:
    errors.append(f"config.loss.z_loss must be >= 0, got {lc.z_loss}.")
  chunk = lc.get("tiled_chunk_tokens", 0)
  if not (isinstance(chunk, int) and chunk >= 0):
    errors.append(f"config.loss.tiled_chunk_tokens must be an int >= 0 (0 = off), got {chunk!r}.")
  elif chunk and config.model.get("final_logit_softcapping") is not None:
    errors.append("config.loss.tiled_chunk_tokens > 0 cannot cap logits "
                  "(config.model.final_logit_softcapping); set tiled_chunk_tokens=0.")

  # mesh and rules
  errors += _mesh_shape_errors(config.mesh.shape, num_devices)
  try:
    rules = partitioning.rules_from_config(config.logical_axis_rules)
    for name, axes in rules:
      for axis in (axes if isinstance(axes, tuple) else (axes,)):
        if axis is not None and axis not in partitioning.AXIS_NAMES:
          errors.append(f"config.logical_axis_rules: {name!r} -> unknown mesh axis {axis!r}; "
                        f"mesh axes are {partitioning.AXIS_NAMES}.")
  except ValueError as e:
    errors.append(f"config.logical_axis_rules: {e}")
  if num_devices is not None and not errors:  # traces the model's init: a valid model only
    errors += _fit_errors(model, d.inputs_length, d.targets_length, d.batch_size, k,
                          config.mesh.shape, rules, num_devices)
  # Checked after the mesh (which runs on an error-free config only): independent of it.
  if not d.num_shards > 0:
    errors.append(f"config.data.num_shards must be positive, got {d.num_shards}.")
  else:
    for name in ("batch_size", "eval_batch_size"):
      if d[name] is not None and d[name] > 0 and d[name] % d.num_shards:
        errors.append(f"config.data.{name}={d[name]} is not divisible by config.data.num_shards="
                      f"{d.num_shards} (virtual data shards); set num_shards to a divisor of "
                      "it (a multiple of the process count).")

  # loop, checkpoints, wandb
  built = {}
  for build in (loop_config, checkpoint_config):
    try:
      built[build] = build(config)
    except ValueError as e:
      errors.append(str(e))
  t = config.train
  if not t.num_steps > 0:
    errors.append(f"config.train.num_steps must be > 0, got {t.num_steps}.")
  if not t.log_every > 0:
    errors.append(f"config.train.log_every must be > 0, got {t.log_every}.")
  if t.eval_every < 0 or t.eval_steps < 0:
    errors.append("config.train.eval_every and eval_steps must be >= 0 (0 = no eval).")
  c = config.ckpt
  if not c.every_steps > 0:
    errors.append(f"config.ckpt.every_steps must be > 0, got {c.every_steps}.")
  if c.keep < 0 or c.keep_best < 0:
    errors.append("config.ckpt.keep and keep_best must be >= 0.")
  keep_steps = c.get("keep_steps") or ()
  if not all(isinstance(s, int) and s > 0 for s in keep_steps):
    errors.append(f"config.ckpt.keep_steps must be positive steps, e.g. (250, 500), got "
                  f"{keep_steps!r}.")
  if config.wandb.mode not in WANDB_MODES:
    errors.append(f"unknown config.wandb.mode {config.wandb.mode!r}; expected one of "
                  f"{WANDB_MODES}.")

  if not errors:  # the data's own checks (num_epochs, ...) once the fields above pass
    finetune = None
    try:
      finetune = config_lib.finetune_settings(config)
    except ValueError as e:
      errors.append(f"config.finetune: {e}")
    try:  # the batches' spec: the tasks' (FinetuneSpec) or the objective's (DataSpec)
      spec = finetune.data if finetune is not None else config_lib.data_spec(config)
    except ValueError as e:
      errors.append(f"config.data: {e}")
  _raise(errors)
  return config_lib.RunSettings(
      model=model, data=spec, optim=opt, schedule=sched,
      loop=built[loop_config], checkpoint=built[checkpoint_config],
      mesh_shape=partitioning.mesh_shape_tuple(config.mesh.shape), rules=rules,
      train_step_kwargs=config_lib.train_step_kwargs(config),
      eval_step_kwargs=config_lib.eval_step_kwargs(config), finetune=finetune,
      framing=finetune.data.framing if finetune is not None else None,
      wandb=config_lib.wandb_config(config), record=config_lib.record(config))
