"""Helpers shared by config files: the `arg` parser and config -> object builders.

`parse_arg` turns the string after the colon in `--config configs/t5.py:arch=prefix_lm,size=base`
into typed values (big_vision's `parse_arg` idea: the defaults give the types, unknown
keys are errors). `model_config` / `data_spec` build the frozen objects the library
takes from a ConfigDict, so the model and the data pipeline never see the ConfigDict.
"""
from __future__ import annotations

from typing import Any

import ml_collections

# The builders live in the library (lm/config.py) so lm needs nothing from configs/.
from lm.config import data_spec, model_config  # noqa: F401  pylint: disable=unused-import

_TRUE = ("1", "true", "yes", "y", "on")
_FALSE = ("0", "false", "no", "n", "off")


def _parse_value(key: str, text: str, default: Any) -> Any:
  kind = type(default)
  if kind is bool:
    low = text.strip().lower()
    if low in _TRUE:
      return True
    if low in _FALSE:
      return False
    raise ValueError(f"config arg {key}={text!r}: expected a boolean (True/False).")
  if kind is int:
    try:
      return int(text)
    except ValueError:
      raise ValueError(f"config arg {key}={text!r}: expected an int.") from None
  if kind is float:
    try:
      return float(text)
    except ValueError:
      raise ValueError(f"config arg {key}={text!r}: expected a float.") from None
  if default is None or kind is str:
    return text
  raise TypeError(f"parse_arg: default of {key!r} has unsupported type {kind.__name__}; "
                  "use bool, int, float, str or None.")


def parse_arg(arg: str | None, **defaults: Any) -> ml_collections.ConfigDict:
  """Parses "key=value,key2=value2,flag" against typed defaults.

  Args:
    arg: the string after ":" in `--config file.py:ARG` (None or "" = all defaults).
      A bare key ("runlocal") means key=True for a boolean key.
    **defaults: every accepted key with its default; the default's type (bool, int,
      float, str; None = str) is the value's type.

  Returns:
    A locked ConfigDict with every key (defaults filled in).

  Raises:
    ValueError: unknown key (listing the known ones), a value of the wrong type, a
      bare non-boolean key, or a key given twice.

  Example:
    >>> parse_arg("arch=prefix_lm,runlocal", arch="encoder_decoder", runlocal=False).arch
    'prefix_lm'
  """
  values = dict(defaults)
  seen = set()
  for item in (arg or "").split(","):
    item = item.strip()
    if not item:
      continue
    key, sep, text = item.partition("=")
    key = key.strip()
    if key not in defaults:
      raise ValueError(f"unknown config arg {key!r}; known: {', '.join(sorted(defaults))}.")
    if key in seen:
      raise ValueError(f"config arg {key!r} given twice.")
    seen.add(key)
    if not sep:
      if type(defaults[key]) is not bool:
        raise ValueError(f"config arg {key!r} needs a value ({key}=...).")
      values[key] = True
    else:
      values[key] = _parse_value(key, text, defaults[key])
  cfg = ml_collections.ConfigDict(values)
  cfg.lock()
  return cfg


WANDB_MODES = ("auto", "online", "offline", "disabled")


def _mesh_shape_errors(shape: Any, num_devices: int | None) -> list[str]:
  from lm import partitioning  # pylint: disable=g-import-not-at-top
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
    "kv": "config.model.head_dim", "joined_kv": "config.model.num_heads * head_dim",
    "relpos_buckets": "config.model.relative_num_buckets",
}


def _param_divisibility_errors(config: ml_collections.ConfigDict, model: Any,
                               mesh_shape: tuple[int, ...], rules: Any) -> list[str]:
  """Each sharded parameter dim must be divisible by its mesh axes' device count.

  The params' logical axes come from tracing the model's init (`jax.eval_shape`,
  nothing allocated), mapped to mesh axes by the same rules as training.
  """
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  from lm import partitioning  # pylint: disable=g-import-not-at-top
  from lm.data import features  # pylint: disable=g-import-not-at-top
  from lm.model.transformer import Transformer  # pylint: disable=g-import-not-at-top
  d = config.data
  batch = features.zero_batch(d.architecture, d.inputs_length, d.targets_length, segments=False)
  boxed = jax.eval_shape(lambda b: Transformer(model).init(jax.random.key(0), b)["params"],
                         batch)
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


def validate(config: ml_collections.ConfigDict, num_devices: int | None = None) -> None:
  """Checks a config before anything is built or compiled.

  Args:
    config: a config from configs/*.py (after command-line overrides).
    num_devices: if given (jax.device_count()), also check that the mesh fits and that
      the batch splits over the batch shards.

  Raises:
    ValueError: listing every problem found, each saying which field to change.
  """
  from lm import losses, optim  # pylint: disable=g-import-not-at-top
  from lm.data import objectives  # pylint: disable=g-import-not-at-top
  errors: list[str] = []

  # model
  try:
    model = model_config(config)
  except (ValueError, TypeError) as e:
    errors.append(f"config.model: {e}")
    model = None
  d = config.data
  if model is not None:
    encdec_data = d.architecture == "encoder_decoder"
    if model.is_encoder_decoder != encdec_data:
      errors.append(f"config.model.mask_type={model.mask_type!r} does not fit "
                    f"config.data.architecture={d.architecture!r}; both must be encoder-decoder "
                    "or both decoder-only (set the arch= config arg instead of either field).")
    if model.mask_type == "prefix_lm" and d.architecture == "causal":
      errors.append("config.model.mask_type='prefix_lm' needs config.data.architecture="
                    "'prefix_lm' (the causal layout has no prefix).")
    if d.tokenizer is None:
      from lm.data.tokenizer import padded_vocab_size  # pylint: disable=g-import-not-at-top
      vocab = d.default_vocab_size + d.extra_ids
      if model.vocab_size not in (vocab, padded_vocab_size(vocab)):
        errors.append(f"config.model.vocab_size={model.vocab_size} does not match the on-the-fly "
                      f"tokenizer ({d.default_vocab_size} pieces + {d.extra_ids} extra ids = "
                      f"{vocab}); set config.model.vocab_size={padded_vocab_size(vocab)}.")
    if model.position_encoding == "learned" and model.max_length is not None:
      row = (max(d.inputs_length, d.targets_length) if encdec_data
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
  if not 0.0 <= d.validation_fraction < 1.0:
    errors.append(f"config.data.validation_fraction must be in [0, 1), got "
                  f"{d.validation_fraction}.")
  known_objective = d.objective in objectives.OBJECTIVES
  if not known_objective:
    errors.append(f"config.data.objective={d.objective!r} is unknown; choose one of "
                  f"{sorted(objectives.OBJECTIVES)}.")
  no_inputs = (known_objective and not objectives.layout(d.objective).has_inputs
               and d.architecture != "encoder_decoder")
  if not (d.inputs_length > 0 or (d.inputs_length == 0 and no_inputs)):
    errors.append(f"config.data.inputs_length must be positive, got {d.inputs_length} (0 only "
                  "for a decoder-only architecture with objective 'full_lm').")
  if d.loss_on_inputs and d.architecture == "prefix_lm":
    errors.append("config.data.loss_on_inputs=True with config.data.architecture='prefix_lm': "
                  "the prefix is bidirectional, so each inputs position would see its own next "
                  "token; set loss_on_inputs=False or use arch=causal.")
  elif d.loss_on_inputs and d.architecture == "encoder_decoder":
    errors.append("config.data.loss_on_inputs=True needs a decoder-only architecture (the "
                  "encoder has no loss); set it to False.")
  if known_objective and d.inputs_length >= 0 and d.targets_length > 0:
    try:
      objectives.check_lengths(d.objective, inputs_length=d.inputs_length,
                               targets_length=d.targets_length, num_extra_ids=d.extra_ids,
                               allow_truncated_targets=bool(d.get("allow_truncated_targets")),
                               **d.objective_params.to_dict())
    except ValueError as e:
      errors.append(f"config.data: {e}")

  # optimizer, schedule, loss
  try:
    optim.make_optimizer(config.optim, optim.make_schedule(config.schedule))
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
    errors.append(f"config.loss.normalization={lc.normalization!r}; choose one of "
                  f"{losses.NORMALIZATIONS}.")
  if lc.normalization == "constant" and not lc.normalizing_constant > 0:
    errors.append("config.loss.normalizing_constant must be > 0 with normalization='constant'.")
  if not 0.0 <= lc.label_smoothing < 1.0:
    errors.append(f"config.loss.label_smoothing must be in [0, 1), got {lc.label_smoothing}.")
  if lc.z_loss < 0:
    errors.append(f"config.loss.z_loss must be >= 0, got {lc.z_loss}.")

  # mesh and rules
  errors += _mesh_shape_errors(config.mesh.shape, num_devices)
  from lm import partitioning  # pylint: disable=g-import-not-at-top
  try:
    rules = partitioning.rules_from_config(config.logical_axis_rules)
    for name, axes in rules:
      for axis in (axes if isinstance(axes, tuple) else (axes,)):
        if axis is not None and axis not in partitioning.AXIS_NAMES:
          errors.append(f"config.logical_axis_rules: {name!r} -> unknown mesh axis {axis!r}; "
                        f"mesh axes are {partitioning.AXIS_NAMES}.")
  except ValueError as e:
    errors.append(f"config.logical_axis_rules: {e}")
  if num_devices is not None and not errors:
    import math  # pylint: disable=g-import-not-at-top
    shape = partitioning.parse_mesh_shape(config.mesh.shape, num_devices)
    errors += _param_divisibility_errors(config, model, shape, rules)
    shards = math.prod(shape[:2])
    micro = d.batch_size // k
    if micro % shards:
      errors.append(f"config.data.batch_size={d.batch_size} / grad_accum_steps={k} = {micro} "
                    f"rows per microbatch is not divisible by the {shards} batch shards "
                    f"(data x fsdp of mesh {shape}).")
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
  if config.wandb.mode not in WANDB_MODES:
    errors.append(f"config.wandb.mode={config.wandb.mode!r}; choose one of {WANDB_MODES}.")

  if errors:
    raise ValueError("invalid config:\n  - " + "\n  - ".join(errors))


def train_step_kwargs(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """Keyword arguments of `lm.steps.train_step` taken from config.loss / config.optim.

    step = functools.partial(steps.train_step, model=model, tx=tx, schedule=schedule,
                             **train_step_kwargs(config))
  """
  return dict(z_loss=float(config.loss.z_loss), label_smoothing=float(config.loss.label_smoothing),
              normalization=str(config.loss.normalization),
              normalizing_constant=float(config.loss.normalizing_constant),
              num_microbatches=int(config.optim.grad_accum_steps))


def eval_step_kwargs(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """Keyword arguments of `lm.steps.eval_step` (same loss settings as training)."""
  return dict(z_loss=float(config.loss.z_loss), label_smoothing=float(config.loss.label_smoothing))
