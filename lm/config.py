"""The boundary between a run's ConfigDict and the library: typed settings, config.json.

The config files (configs/*.py) are data, a locked ConfigDict that `lm.main` overrides. All
the library takes from it is built here, once, into frozen objects:

    config = derive(config)              # targets length, extra ids, vocab: after the overrides
    validate.validate(config, num_devices)  # lm/validate.py: every problem at once, first
    model = model_config(config)         # lm.model.transformer.TransformerConfig
    spec = data_spec(config)             # lm.data.pipeline.DataSpec
    opt = optim_config(config)           # lm.optim.OptimConfig  -> optim.make_optimizer
    sched = schedule_config(config)      # lm.optim.ScheduleConfig -> optim.make_schedule
    loop = loop_config(config)           # LoopConfig (steps, logging, eval, seed)
    ckpt = checkpoint_config(config)     # CheckpointConfig
    train_step_kwargs(config), eval_step_kwargs(config)   # lm.steps keyword arguments
    finetune_settings(config)            # lm.downstream.finetune.FinetuneSettings, or None
    wandb_config(config), record(config) # lm.writers.WandbConfig; config.json's plain data

The model section names its preset and `architecture` and resolves every other field, so each
can be overridden (docs/architecture.md); older config.json files migrate on load.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import ml_collections
from ml_collections import config_dict

from lm import architecture as architecture_lib
from lm import cli
from lm import optim
from lm import workdir as workdir_lib
from lm import writers
from lm.data import converters, objectives, pipeline
from lm.data.noise import DEFAULT_NUM_EXTRA_IDS
from lm.data.tokenizer import padded_vocab_size
from lm.downstream import finetune, finetune_data
from lm.model import presets
from lm.model.transformer_config import ADDED_FIELDS, EXECUTION_FIELDS
from lm.model.transformer import TransformerConfig

# config.model's field -> its type (TransformerConfig's, and the config's own encoder depth)
_FIELD_TYPES = {**typing.get_type_hints(TransformerConfig), "encoder_num_layers": int | None}


def _placeholder(name: str) -> Any:
  """An unset config.model field typed as X of its `X | None`, so an override parses as X."""
  (kind,) = (t for t in typing.get_args(_FIELD_TYPES[name]) if t is not type(None))
  return config_dict.placeholder(kind)


# A run's resolved config in its workdir (written by lm/train.py, read by `load_config_json`).
CONFIG_FILE = "config.json"

# config.model fields that are not TransformerConfig fields: the preset's name and the two
# facts the architecture-dependent TransformerConfig fields are derived from.
MODEL_NAME_FIELDS = ("family", "size")
DERIVED_MODEL_FIELDS = ("mask_type", "shared_encoder_decoder", "num_encoder_layers",
                        "num_decoder_layers")


# --- typed settings of the loop and the checkpoints -----------------------------------


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """`config.train`: the training loop.

  Attributes:
    num_steps: optimizer steps of the run (a resumed run continues to it).
    log_every: steps per logged metrics window.
    eval_every: steps between evaluations (0 = none).
    eval_steps: eval batches per evaluation (0 = the whole eval set).
    seed: the root PRNG seed (params init, dropout).
  """
  num_steps: int
  log_every: int
  eval_every: int
  eval_steps: int
  seed: int


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  """`config.ckpt`: checkpointing (lm/checkpoint/).

  Attributes:
    every_steps: steps between saves (the last step is always saved).
    keep: the newest checkpoints kept; keep_best: the best by `best_metric` kept too;
      keep_steps: steps saved and kept whatever the rest says (launch.sweep --nlu_steps).
    best_metric: the eval metric that ranks checkpoints; best_mode: "min" (a loss) or "max"
      (a task score, configs/finetune.py): which is best.
    async_save: save in the background.
    init_from: parameters to start a new run from (a checkpoint or HF T5 directory), or None.
  """
  every_steps: int
  keep: int
  keep_best: int
  best_metric: str
  async_save: bool
  init_from: str | None
  best_mode: str = "min"
  keep_steps: tuple[int, ...] = ()


# --- config sections <-> typed settings -------------------------------------------------


def from_mapping(cls: type, values: Mapping[str, Any], where: str = "config") -> Any:
  """The frozen dataclass `cls` from a config section (nested dataclasses recursively).

  Fields missing from `values` take the dataclass's default (the one place it is held).

  Raises:
    ValueError: a key that is not a field of `cls` (naming it and the known ones), or a
      field without default that `values` lacks.
  """
  values = values.to_dict() if isinstance(values, ml_collections.ConfigDict) else dict(values)
  fields = {f.name: f for f in dataclasses.fields(cls)}
  unknown = sorted(set(values) - set(fields))
  if unknown:
    raise ValueError(f"unknown field {where}.{unknown[0]}; expected one of {sorted(fields)}")
  kwargs = {}
  for name, value in values.items():
    default = fields[name].default
    if dataclasses.is_dataclass(default) and isinstance(value, Mapping):
      value = from_mapping(type(default), value, f"{where}.{name}")
    kwargs[name] = value
  try:
    return cls(**kwargs)
  except TypeError as e:
    raise ValueError(f"{where}: {e}") from None


def section(settings: Any) -> ml_collections.ConfigDict:
  """A config section (ConfigDict) holding a frozen settings object's fields: the config
  files start their optim / schedule sections so, `config.optim = section(OptimConfig())`."""
  return ml_collections.ConfigDict(dataclasses.asdict(settings))


def optim_config(config: ml_collections.ConfigDict) -> optim.OptimConfig:
  """`config.optim` as lm.optim.OptimConfig."""
  return from_mapping(optim.OptimConfig, config.optim, "config.optim")


def schedule_config(config: ml_collections.ConfigDict) -> optim.ScheduleConfig:
  """`config.schedule` as lm.optim.ScheduleConfig."""
  return from_mapping(optim.ScheduleConfig, config.schedule, "config.schedule")


def loop_config(config: ml_collections.ConfigDict) -> LoopConfig:
  """`config.train` as LoopConfig."""
  return from_mapping(LoopConfig, config.train, "config.train")


def checkpoint_config(config: ml_collections.ConfigDict) -> CheckpointConfig:
  """`config.ckpt` as CheckpointConfig."""
  return from_mapping(CheckpointConfig, config.ckpt, "config.ckpt")


def train_step_kwargs(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """Keyword arguments of `lm.steps.train_step` taken from config.loss / config.optim.

    step = functools.partial(steps.train_step, model=model, tx=tx, schedule=schedule,
                             **train_step_kwargs(config))
  """
  return dict(eval_step_kwargs(config), normalization=str(config.loss.normalization),
              normalizing_constant=float(config.loss.normalizing_constant),
              num_microbatches=int(config.optim.grad_accum_steps))


def eval_step_kwargs(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """Keyword arguments of `lm.steps.eval_step` (same loss settings as training)."""
  return dict(z_loss=float(config.loss.z_loss), label_smoothing=float(config.loss.label_smoothing),
              tiled_chunk_tokens=_tiled_chunk_tokens(config))


def _tiled_chunk_tokens(config: ml_collections.ConfigDict) -> int:
  """config.loss.tiled_chunk_tokens (0 = the loss on the whole logits; a config written
  before the field existed has it off)."""
  return int(config.loss.get("tiled_chunk_tokens", 0))


# --- the model section ------------------------------------------------------------------


def model_section(family: str, size: str, architecture: str,
                  **overrides: Any) -> ml_collections.ConfigDict:
  """`config.model` for a preset (family, size: a row of lm/model/presets.py's tables) as
  `architecture`, with `num_layers` or TransformerConfig fields as `overrides`: a ConfigDict
  with family, size, architecture, num_layers (encoder_num_layers: an encoder's depth of its
  own, else None) and every TransformerConfig field but DERIVED_MODEL_FIELDS (None values
  as typed placeholders, so that `--config.model.max_length=...` can set them).

  Raises:
    ValueError: unknown family, size, architecture or override.
  """
  resolved = dataclasses.asdict(presets.make_config(family, size, architecture, **overrides))
  encoder_layers = resolved["num_encoder_layers"]  # an encoder of its own depth (9b_2b)
  model = ml_collections.ConfigDict({
      "family": family, "size": size, "architecture": architecture,
      "num_layers": resolved["num_decoder_layers"],
      "encoder_num_layers": (_placeholder("encoder_num_layers") if encoder_layers in (
          0, resolved["num_decoder_layers"]) else encoder_layers)})
  for name in (f.name for f in dataclasses.fields(TransformerConfig)
               if f.name not in DERIVED_MODEL_FIELDS):
    model[name] = _placeholder(name) if resolved[name] is None else resolved[name]
  return model


def architecture(config: ml_collections.ConfigDict) -> str:
  """`config.model.architecture`, checked (encoder_decoder, shared, prefix_lm, causal).

  Raises:
    ValueError: an unknown architecture, naming the field.
  """
  arch = config.model.architecture
  if arch not in architecture_lib.ARCHITECTURES:
    raise ValueError(f"unknown config.model.architecture {arch!r}; expected one of "
                     f"{list(architecture_lib.ARCHITECTURES)}")
  return arch


def model_config(config: ml_collections.ConfigDict) -> TransformerConfig:
  """The frozen `TransformerConfig` of `config.model`.

  mask_type, shared_encoder_decoder and the stacks' depths come from `architecture` and
  `num_layers` (lm.architecture.model_fields); family/size only name the preset.

  Raises:
    ValueError: underived fields (`derive`), an unknown architecture, or
      TransformerConfig's validation naming the bad field.
  """
  check_derived(config)
  fields = config.model.to_dict()
  for name in MODEL_NAME_FIELDS:
    fields.pop(name, None)
  arch = architecture(config)
  fields.pop("architecture")
  num_layers = fields.pop("num_layers")
  stacks = architecture_lib.model_fields(arch, num_layers)
  encoder_layers = fields.pop("encoder_num_layers", None)  # None: num_layers (older runs too)
  if encoder_layers is not None and architecture_lib.is_encoder_decoder(arch):
    stacks["num_encoder_layers"] = int(encoder_layers)
  return TransformerConfig(**fields, **stacks)


def eval_batch_size(config: ml_collections.ConfigDict) -> int:
  """Global rows per eval batch: config.data.eval_batch_size, else batch_size."""
  return int(config.data.eval_batch_size or config.data.batch_size)


def data_spec(config: ml_collections.ConfigDict) -> pipeline.DataSpec:
  """The frozen `lm.data.pipeline.DataSpec` of `config.data` (same field names).

  DataSpec.architecture (the feature layout) is derived from config.model.architecture.

  Raises:
    ValueError: underived fields (`derive`), an unknown architecture, or DataSpec's
      validation.
  """
  check_derived(config)
  fields = config.data.to_dict()
  fields.pop("allow_truncated_targets", None)  # a validation switch, not a DataSpec field
  fields["architecture"] = architecture_lib.layout(architecture(config))
  fields["paths"] = tuple(fields["paths"])
  fields["eval_paths"] = tuple(fields["eval_paths"])
  fields["objective_params"] = dict(fields["objective_params"])
  return pipeline.DataSpec(**fields)


def wandb_config(config: ml_collections.ConfigDict) -> writers.WandbConfig:
  """config.wandb typed (lm.writers.WandbConfig)."""
  w = config.wandb
  return writers.WandbConfig(mode=w.mode, project=w.project, entity=w.entity, group=w.group,
                             name=w.name, tags=tuple(w.tags), notes=w.notes)


def record(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """The resolved config as plain data, secrets filtered: config.json's and wandb's copy."""
  return writers.filter_secrets(config.to_dict())


def tokenizer_path(config: ml_collections.ConfigDict) -> str | None:
  """The run's SentencePiece model: config.data.tokenizer, or a prepared dataset's own
  (as the data pipeline finds it); None: the on-the-fly default tokenizer."""
  d = config.data
  if not d.tokenizer and d.format == "prepared":
    from lm.data import prepared  # pylint: disable=g-import-not-at-top  (reads the manifest)
    return prepared.tokenizer_path(tuple(d.paths))
  return d.tokenizer or None


def finetuning(config: ml_collections.ConfigDict) -> bool:
  """Whether `config` is a fine-tuning run: config.finetune.tasks is set."""
  ft = config.get("finetune")
  return bool(ft is not None and ft.get("tasks"))


def framing(config: ml_collections.ConfigDict) -> converters.Framing:
  """The run's framing: config.finetune.framing (lm.data.converters.FRAMINGS) when it
  fine-tunes, T5's otherwise (pre-training data are T5's)."""
  if not finetuning(config):
    return converters.T5_FRAMING
  return converters.framing_named(str(config.finetune.get("framing") or "t5"))


def finetune_settings(config: ml_collections.ConfigDict) -> finetune.FinetuneSettings | None:
  """config.finetune typed (lm.downstream.finetune.FinetuneSettings), with the data fields
  fine-tuning reads; None when the run is not `finetuning`."""
  if not finetuning(config):
    return None
  ft, d = config.finetune, config.data
  tasks = finetune.parse_tasks(ft.tasks)
  eval_tasks = finetune.parse_tasks(ft.eval_tasks) if ft.get("eval_tasks") else tasks
  layout = architecture_lib.layout(architecture(config))
  data = finetune_data.FinetuneSpec(
      tasks=tasks, data_dir=ft.data_dir or None, split=ft.split, architecture=layout,
      inputs_length=int(d.inputs_length), targets_length=int(d.targets_length),
      batch_size=int(d.batch_size), eval_batch_size=d.eval_batch_size,
      num_shards=int(d.num_shards), pack=bool(d.pack), num_packing_bins=d.num_packing_bins,
      loss_on_inputs=bool(d.loss_on_inputs), seed=int(d.seed), framing=framing(config))
  evaluation = finetune.TaskEval(
      tasks=tuple(name for name, _ in eval_tasks), split=ft.eval_split,
      data_dir=ft.data_dir or None, batch_size=eval_batch_size(config),
      max_decode_length=int(ft.max_decode_length or d.targets_length),
      max_examples=int(ft.max_eval_examples) or None,
      inputs_length=int(d.inputs_length) or None,
      rank_classification=bool(ft.rank_classification),
      architecture=architecture(config), every=int(ft.eval_every),
      framing=framing(config))
  return finetune.FinetuneSettings(
      data=data, tokenizer_path=tokenizer_path(config),
      default_vocab_size=int(d.default_vocab_size), extra_ids=int(d.extra_ids),
      evaluation=evaluation)


# --- derived fields -----------------------------------------------------------------------

# The fields the config files leave None ("derive") and `derive` fills from the final values.
DERIVED_FIELDS = ("data.targets_length", "data.extra_ids", "model.vocab_size")

# T5's gin targets lengths at inputs_length 512 (t5/models/gin/objectives/*.gin), per
# (objective, noise_density); objectives whose targets are the whole sequence use 512.
GIN_TARGETS_LENGTHS = {
    ("iid_replace_spans", 0.10): 103, ("iid_replace_spans", 0.15): 192,
    ("iid_replace_spans", 0.25): 256, ("iid_replace_spans", 0.50): 512,
    ("drop_tokens", 0.15): 104,
}
_FULL_SEQUENCE_TARGETS = ("bert", "mass", "deshuffle", "prefix_lm")


def gin_targets_length(objective: str, params: Mapping[str, Any],
                       inputs_length: int) -> int | None:
  """T5's gin targets length for this objective, scaled to inputs_length; None = derive it.

  Raises:
    ValueError: T5 had no gin file for this objective at this noise density.
  """
  if objective in _FULL_SEQUENCE_TARGETS:
    return int(inputs_length)
  if objective in ("span_corruption", "full_lm", "mixture"):
    return None  # span.gin's random_spans_targets_length is the derived one
  density = round(float(params.get("noise_density", 0.15)), 6)
  gin = GIN_TARGETS_LENGTHS.get((objective, density))
  if gin is None:
    raise ValueError(f"lengths=gin (data.allow_truncated_targets): T5 has no gin for "
                     f"objective {objective!r} at noise {density}; set "
                     "config.data.targets_length, or use lengths=derived.")
  return math.ceil(gin * int(inputs_length) / 512)


def check_derived(config: ml_collections.ConfigDict) -> None:
  """Raises ValueError naming the DERIVED_FIELDS still None (`derive` has not run)."""
  missing = [f"config.{name}" for name in DERIVED_FIELDS
             if config[name.split(".")[0]].get(name.split(".")[1]) is None]
  if missing:
    raise ValueError(f"{', '.join(missing)} not derived: call lm.config.derive(config) "
                     "after the overrides (as lm.main does).")


def derive(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A copy of `config` with the derived fields filled from its final values.

  Called once, after the command-line overrides (lm.main, lm.plan, launch/), so that
  `--config.data.objective_params.noise_density=0.25` and the config arg `noise=0.25` give
  the same run. A field already set is kept (and checked later, lm.validate):
    data.targets_length  the objective's (objectives.required_targets_length: 114 for span
                         corruption at 512/0.15/3), or with data.allow_truncated_targets
                         T5's gin value (`gin_targets_length`; longer targets truncated).
    data.extra_ids       T5's 100 sentinels, or more where the objective can need more.
    model.vocab_size     the tokenizer's pieces plus the extra ids, padded to a multiple of
                         128 (32000 + 100 -> 32128, as T5).

  Raises:
    ValueError: the objective, its parameters or the lengths cannot give a value (naming
      the field to set).
  """
  config = copy.deepcopy(config)
  d = config.data
  objective, params = d.objective, d.objective_params.to_dict()
  try:
    if d.targets_length is None:
      gin = (gin_targets_length(objective, params, d.inputs_length)
             if d.get("allow_truncated_targets") else None)
      d.targets_length = int(gin if gin is not None else objectives.required_targets_length(
          objective, inputs_length=d.inputs_length, **params))
    if d.extra_ids is None:
      d.extra_ids = max(DEFAULT_NUM_EXTRA_IDS, objectives.required_extra_ids(
          objective, inputs_length=d.inputs_length, targets_length=d.targets_length, **params))
  except ValueError as e:
    raise ValueError(f"config.data: cannot derive the lengths of objective {objective!r} "
                     f"{params} at inputs_length={d.inputs_length}: {e}") from None
  if config.model.vocab_size is None:
    config.model.vocab_size = padded_vocab_size(d.default_vocab_size + d.extra_ids)
  return config


def preset_name(config: ml_collections.ConfigDict) -> str:
  """"family/size/architecture" of config.model (lm.model.presets.preset_name)."""
  m = config.model
  return presets.preset_name(m.get("family"), m.get("size"), m.get("architecture"))


# --- config.json ------------------------------------------------------------------------

# Model presets of config.json files written before the size tables (lm/model/presets.py
# then named a size plus an architecture): name -> (family, size).
_OLD_PRESET_NAMES = {
    "t5_1_0_base_shared": ("t5_1_0", "base"), "t5_1_0_base_6layers": ("t5_1_0", "base"),
    "t5_1_0_lm_base": ("t5_1_0", "base"), "t5_1_0_prefix_lm_base": ("t5_1_0", "base"),
    "tiny": ("cpu", "tiny"), "tiny_prefix_lm": ("cpu", "tiny"), "tiny_causal": ("cpu", "tiny"),
    "small_cpu": ("cpu", "small_cpu"),
}


def _old_preset(name: str) -> tuple[str, str]:
  """(family, size) of a pre-size-table preset name (the name itself if unrecognised)."""
  if name in _OLD_PRESET_NAMES:
    return _OLD_PRESET_NAMES[name]
  for prefix in ("decoder_only_", "causal_lm_"):
    if name.startswith(prefix):
      return "t5_1_1", name[len(prefix):]
  for family in presets.FAMILIES:
    if name.startswith(family + "_"):
      return family, name[len(family) + 1:]
  return "", name


def migrate(raw: dict[str, Any], where: str = "config.json") -> dict[str, Any]:
  """An older run's config (as a JSON dict) in today's form; today's configs unchanged.

  Before the architecture had one owner, config.model held `preset` (a size plus an
  architecture), mask_type, shared_encoder_decoder, num_encoder_layers and
  num_decoder_layers, and config.data an `architecture`. They become model.family,
  model.size, model.architecture and model.num_layers (and model.encoder_num_layers, an
  encoder of another depth); the model and DataSpec built from the result are the run's own.

  Raises:
    ValueError: the old fields disagree (an architecture its data layout does not fit, or a
      shared encoder-decoder with stacks of different depths).
  """
  model = dict(raw["model"])
  data = dict(raw["data"])
  if "architecture" in model:
    return raw
  arch = architecture_lib.of_model(model.pop("mask_type", "encoder_decoder"),
                                   bool(model.pop("shared_encoder_decoder", False)))
  enc = int(model.pop("num_encoder_layers", 0))
  dec = int(model.pop("num_decoder_layers"))
  if architecture_lib.is_encoder_decoder(arch) and enc != dec:
    if arch == "shared":
      raise ValueError(f"{where}: num_encoder_layers={enc} != num_decoder_layers={dec} in a "
                       "shared encoder-decoder (one stack of parameters), so it cannot load.")
    model["encoder_num_layers"] = enc
  family, size = _old_preset(str(model.pop("preset", "")))
  data_arch = data.pop("architecture", architecture_lib.layout(arch))
  if data_arch != architecture_lib.layout(arch):
    raise ValueError(f"{where}: data.architecture={data_arch!r} does not fit the model's "
                     f"architecture {arch!r}.")
  model = {"family": family, "size": size, "architecture": arch, "num_layers": dec, **model}
  return {**raw, "model": model, "data": data}


def load_config_json(path: str) -> ml_collections.ConfigDict:
  """Reads a config.json written by lm/train.py back into a ConfigDict.

  Lists become tuples (as in the config files). Fields that were None in the run are
  None here and take any type when overridden. An older run's config is migrated
  (`migrate`).

  Raises:
    FileNotFoundError: no such file. ValueError: not a JSON object, or an old config
    whose fields disagree.
  """
  file = workdir_lib.as_path(path)   # local or gs://
  if not file.is_file():
    raise FileNotFoundError(f"{path} does not exist (lm.train writes it when a run starts).")
  try:
    raw = json.loads(file.read_text(encoding="utf-8"))
  except json.JSONDecodeError as e:
    raise ValueError(f"{path} is not valid JSON ({e}).") from None
  if not isinstance(raw, dict) or "model" not in raw or "data" not in raw:
    raise ValueError(f"{path} is not an lm run config (no 'model' and 'data' sections).")
  raw = migrate(raw, path)
  # Fields added since the run was written (attention_impl, ADDED_FIELDS) take their
  # defaults, so `--config.model.attention_impl=...` can set them on an old run's config.
  defaults = {f.name: f.default for f in dataclasses.fields(TransformerConfig)}
  raw["model"] = {**{k: defaults[k] for k in EXECUTION_FIELDS + tuple(ADDED_FIELDS)},
                  **raw["model"]}
  return ml_collections.ConfigDict(cli.as_tuples(raw))  # JSON lists back to tuples


def _parse_override_value(field: str, text: str, current: Any) -> Any:
  """`text` as the type of the field's current value (lm.cli.parse_value); an unset model
  field's as its TransformerConfig type, like lm.main's placeholders ("None": still unset)."""
  if current is None and field.startswith("model."):
    name = field[len("model."):]
    hint = _FIELD_TYPES.get(name)
    kinds = [typing.get_origin(t) or t for t in typing.get_args(hint) or (hint,)
             if t not in (type(None), None)]
    if text.strip() != "None" and len(kinds) == 1 and kinds[0] in (bool, int, float, str, tuple):
      current = kinds[0]()
  return cli.parse_value(text, current, name=f"--config.{field}")


def apply_overrides(config: ml_collections.ConfigDict, overrides: Sequence[str]
                    ) -> ml_collections.ConfigDict:
  """A copy of `config` with `--config.<field>=<value>` (or `<field>=<value>`) applied.

  Values are parsed with the type of the field's current value (bool, int, float, str; a
  literal for tuples and other None fields), an unset model field's by its own type.

  Raises:
    ValueError: a malformed override or an unknown field (naming it).
  """
  config = ml_collections.ConfigDict(config.to_dict())
  for item in overrides:
    text = item[2:] if item.startswith("--") else item
    if text.startswith("config."):
      text = text[len("config."):]
    field, sep, value = text.partition("=")
    if not sep or not field:
      raise ValueError(f"config override {item!r} must look like --config.<field>=<value>.")
    node, parent, leaf = config, config, field.split(".")[-1]
    for name in field.split("."):
      if not isinstance(node, ml_collections.ConfigDict) or name not in node:
        raise ValueError(f"config override {item!r}: the run's config has no field {field!r}.")
      parent, node = node, node[name]
    if isinstance(node, ml_collections.ConfigDict):
      raise ValueError(f"config override {item!r}: {field!r} is a section, not a field.")
    parent[leaf] = _parse_override_value(field, value, node)
  return config


# --- a run's typed settings, built once ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunSettings:
  """Every typed part of a run's config, built once (by `lm.validate.validate`, which
  checks the config first) and passed down: lm.train builds the run from it alone.

  Attributes:
    model: the TransformerConfig (`model_config`).
    data: what the batches are made from: the objective's DataSpec (`data_spec`), or a
      fine-tuning run's FinetuneSpec (`finetune.data`).
    optim, schedule: lm.optim.OptimConfig and ScheduleConfig.
    loop: LoopConfig; checkpoint: CheckpointConfig.
    mesh_shape: config.mesh.shape as ints (one may be -1: the remaining devices).
    rules: the logical-axis rules, ((logical name, mesh axes), ...).
    train_step_kwargs, eval_step_kwargs: keyword arguments of lm.steps.train_step and
      eval_step (`train_step_kwargs`, `eval_step_kwargs`).
    finetune: a fine-tuning run's FinetuneSettings (`finetune_settings`); None when
      pre-training.
    framing: the framing a fine-tuning run chose for its data (config.finetune.framing,
      `framing`), which ckpt.init_from must share; None when pre-training (T5's, fixed).
    wandb: lm.writers.WandbConfig (`wandb_config`).
    record: the resolved config as plain data, secrets filtered (`record`): what
      config.json holds and wandb logs.
  """
  model: TransformerConfig
  data: pipeline.DataSpec | finetune_data.FinetuneSpec
  optim: optim.OptimConfig
  schedule: optim.ScheduleConfig
  loop: LoopConfig
  checkpoint: CheckpointConfig
  mesh_shape: tuple[int, ...]
  rules: tuple
  train_step_kwargs: Mapping[str, Any]
  eval_step_kwargs: Mapping[str, Any]
  finetune: finetune.FinetuneSettings | None = None
  framing: converters.Framing | None = None
  wandb: writers.WandbConfig = writers.WandbConfig()
  record: Mapping[str, Any] = dataclasses.field(default_factory=dict)
