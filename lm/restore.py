"""Restore a trained model for evaluation or decoding: a run's workdir or an HF directory.

    r = load_run("runs/t5_local")                       # latest step, all devices on `data`
    r = load_run("runs/t5_local", step=500, overrides=["--config.model.dtype=float32"],
                 mesh_shape=(1, 1, 8))
    r = load_hf("/ckpt/t5gemma-b-b-prefixlm")           # T5 or T5Gemma; its framing in r.framing
    with partitioning.axis_rules(r.mesh, r.rules):
      logits = jax.jit(r.model.apply)({"params": r.params}, batch)

Only the parameters are restored (never the optimizer state), with the run's tokenizer, onto
a mesh of whatever devices are present; the checkpoint's signature and checksums are checked
first. What is refused and how: docs/evaluation.md, 'Restore'; the fallback from a damaged
step: docs/robustness.md, 'Checkpoint integrity and fallback'.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from lm import checkpoint, cli, generation, partitioning
from lm import workdir as workdir_lib
from lm import config as config_lib
from lm.checkpoint import IncompatibleCheckpointError, StepNotFoundError, hf, hf_t5, hf_t5gemma
from lm.checkpoint.signature import recorded_model
from lm.data import features, packing
from lm.data import tokenizer as tokenizer_lib
from lm.model.transformer_config import EXECUTION_FIELDS
from lm.model.transformer import Transformer, TransformerConfig

CONFIG_FILE = config_lib.CONFIG_FILE  # written by lm/train.py
CHECKPOINT_DIR = "checkpoints"
HF_SPM_FILE = "spiece.model"         # transformers' T5Tokenizer file name
HF_GEMMA_SPM_FILE = "tokenizer.model"  # transformers' GemmaTokenizer file name (T5Gemma)
HF_TOKENIZER_CONFIG = "tokenizer_config.json"
HF_GENERATION_CONFIG = "generation_config.json"  # transformers generate's settings (eos_token_id)

# TransformerConfig fields that change neither the parameters nor what the model computes
# from them up to numerics: an override of these is allowed when restoring. (The execution
# fields, attention_impl, are not in checkpoint signatures at all.)
RUNTIME_MODEL_FIELDS = ("dtype", "remat_policy", "dropout_rate") + EXECUTION_FIELDS

__all__ = ["Restored", "load_run", "load_hf", "run_batches", "RunNotFoundError", "StepNotFoundError",
           "IncompatibleCheckpointError", "abstract_params", "RUNTIME_MODEL_FIELDS"]


class RunNotFoundError(FileNotFoundError):
  """The workdir (or its config.json, or its checkpoints) does not exist."""


@dataclasses.dataclass(frozen=True)
class Restored:
  """A model ready to run.

  Attributes:
    config: the run's resolved config with overrides applied (None for an HF directory).
    model_config: the TransformerConfig of `model`.
    model: the Transformer module.
    params: plain (unboxed) float32 param tree, placed with NamedShardings on `mesh`.
    mesh: the device mesh (axes data, fsdp, tensor).
    rules: logical axis rules; trace model code inside
      `partitioning.axis_rules(mesh, rules)`.
    tokenizer: the run's (or the HF directory's) Tokenizer.
    step: the checkpoint step (None for an HF directory).
    workdir: the run directory (None for an HF directory).
    source: the directory the params came from (checkpoint step dir or HF dir).
    objective: the pre-training objective the run was trained on (config.data.objective;
      None for an HF directory).
    framing: how the checkpoint frames prompts and starts its decoder (lm's and T5's:
      generation.T5_FRAMING; T5Gemma's: <bos> before the prompt, no EOS, decoder start 2).
    eos_ids: the ids that end a generated sequence (EOS 1; an HF directory's
      `hf_t5gemma.eos_ids`: the released T5Gemma's 1 and 107), for generation.DecodeConfig.
  """
  config: ml_collections.ConfigDict | None
  model_config: TransformerConfig
  model: Transformer
  params: Any
  mesh: Mesh
  tokenizer: tokenizer_lib.Tokenizer
  step: int | None
  workdir: str | None
  rules: tuple[tuple[str, Any], ...] = partitioning.DEFAULT_LOGICAL_AXIS_RULES
  source: str | None = None
  objective: str | None = None
  framing: generation.Framing = generation.T5_FRAMING
  eos_ids: tuple[int, ...] = (generation.EOS_ID,)

  @property
  def architecture(self) -> str:
    """The data layout the model reads: "encoder_decoder", "prefix_lm" or "causal"."""
    return self.model_config.mask_type


def abstract_params(model: Transformer, mesh: Mesh,
                    rules: Sequence[tuple[str, Any]] = partitioning.DEFAULT_LOGICAL_AXIS_RULES
                    ) -> tuple[Any, Any]:
  """(abstract unboxed params, their NamedShardings) for `model` on `mesh`.

  Nothing is allocated (jax.eval_shape of model.init); the shardings follow the logical
  axis `rules` (lm/partitioning.py).
  """
  batch = features.zero_batch(model.config.mask_type, 4, 4, segments=False)
  boxed = jax.eval_shape(lambda r: model.init(r, batch)["params"], jax.random.key(0))
  specs = partitioning.params_partition_specs(boxed, rules)
  shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), specs,
                           is_leaf=lambda x: isinstance(x, P))
  return nn.meta.unbox(boxed), shardings


def _mesh(mesh_shape, devices) -> Mesh:
  return partitioning.make_mesh((-1, 1, 1) if mesh_shape is None else mesh_shape,
                                devices=devices)


def _rules(config: ml_collections.ConfigDict | None) -> tuple[tuple[str, Any], ...]:
  if config is None or "logical_axis_rules" not in config:
    return partitioning.DEFAULT_LOGICAL_AXIS_RULES
  return partitioning.rules_from_config(config.logical_axis_rules)


def run_tokenizer(config: ml_collections.ConfigDict) -> tokenizer_lib.Tokenizer:
  """The tokenizer a run trained with (`lm.data.tokenizer.run_tokenizer`, as its pipeline)."""
  d = config.data
  return tokenizer_lib.run_tokenizer(config_lib.tokenizer_path(config),
                                     default_vocab_size=d.default_vocab_size,
                                     extra_ids=d.extra_ids)


def _model_diff(a: dict[str, Any], b: dict[str, Any], skip=(), names=("", "")) -> list[str]:
  """The fields where two model dicts differ, each as "field: A in X, B in Y"."""
  keys = sorted(k for k in set(a) | set(b) if k not in skip and a.get(k) != b.get(k))
  return [f"{k}: {a.get(k)!r} {names[0]}, {b.get(k)!r} {names[1]}" for k in keys]


def _normal(d: dict[str, Any]) -> dict[str, Any]:
  return json.loads(json.dumps(d, sort_keys=True, default=str))


def load_run(workdir: str, *, step: int | None = None, overrides: Sequence[str] = (),
             mesh_shape: Sequence[int] | str | None = None,
             devices: Sequence[jax.Device] | None = None) -> Restored:
  """Restores a training run's parameters for evaluation or decoding.

  Args:
    workdir: the run directory (holds config.json and checkpoints/), local or gs://.
    step: the checkpoint step; default the newest intact one.
    overrides: `--config.<field>=<value>` strings applied to the run's config
      (e.g. data.eval_batch_size, data.eval_paths, model.dtype). Overrides of model
      fields other than RUNTIME_MODEL_FIELDS are refused (they change the shapes or the
      architecture the checkpoint was trained as).
    mesh_shape: (data, fsdp, tensor) sizes, one may be -1; default (-1, 1, 1): all
      devices on the data axis (params replicated except where the logical rules put
      them on fsdp/tensor).
    devices: the devices of the mesh; default all (jax.devices()).

  Returns:
    Restored.

  Raises:
    RunNotFoundError: no workdir, config.json or checkpoint.
    StepNotFoundError: `step` is not on disk (the message lists the available steps).
    IncompatibleCheckpointError: checkpoint of another architecture, vocabulary or shape
      than the config; a shape- or architecture-changing override.
      CheckpointDamagedError (a subclass): `step` is damaged, or no step is intact.
    ValueError: a malformed or unknown override, a mesh that does not fit the devices.
  """
  path = workdir_lib.as_path(workdir)   # local (made absolute) or gs://
  workdir = os.fspath(path)
  if not path.is_dir():
    raise RunNotFoundError(f"workdir {workdir} does not exist.")
  config_path = path / CONFIG_FILE
  if not config_path.is_file():
    raise RunNotFoundError(f"{config_path} does not exist; is {workdir} an lm run directory "
                           "(python -m lm.main writes it)?")
  ckpt_dir = path / CHECKPOINT_DIR
  if not checkpoint.checkpoint_steps(ckpt_dir):
    raise RunNotFoundError(f"{workdir} has no checkpoint (no complete step in {ckpt_dir}).")

  base = config_lib.load_config_json(config_path)
  config = config_lib.apply_overrides(base, overrides)
  trained_as = config_lib.model_config(base)
  try:
    model_config = config_lib.model_config(config)
  except ValueError as e:
    raise IncompatibleCheckpointError(f"config override gives an invalid model ({e}).") from None
  changed = _model_diff(dataclasses.asdict(trained_as), dataclasses.asdict(model_config),
                        skip=RUNTIME_MODEL_FIELDS, names=("in the run", "overridden"))
  if changed:
    raise IncompatibleCheckpointError(
        f"config override changes the model's shapes or architecture ({changed[0]}); only "
        f"{', '.join('model.' + f for f in RUNTIME_MODEL_FIELDS)} may be overridden when "
        "restoring.")

  mesh = _mesh(mesh_shape, devices)
  rules = _rules(config)
  model = Transformer(model_config)
  abstract, shardings = abstract_params(model, mesh, rules)

  def check_signature(step: int, meta: dict) -> None:
    """Refuses a step written by another model than config.json describes."""
    signature = meta.get("signature") or {}
    theirs = signature.get("model")
    if theirs is not None:
      diff = _model_diff(_normal(recorded_model(theirs)),
                         _normal(dataclasses.asdict(trained_as)),
                         skip=RUNTIME_MODEL_FIELDS, names=("in the checkpoint", "in config.json"))
      if diff:
        raise IncompatibleCheckpointError(
            f"checkpoint {ckpt_dir} step {step} was written by another model than "
            f"{config_path} describes ({diff[0]}).")
    if "param_shapes" in signature:
      what = checkpoint.shape_mismatch(signature["param_shapes"],
                                       checkpoint.param_shapes(abstract))
      if what:
        raise IncompatibleCheckpointError(
            f"checkpoint {ckpt_dir} step {step} does not fit the model of {config_path} "
            f"({what}).")

  # Verified as a resume verifies: without `step`, a damaged newest step falls back to
  # the newest intact one (one warning); a damaged `step` is an error.
  params, step = checkpoint.restore_params_and_step(
      ckpt_dir, abstract, shardings, step, context=f"restoring {workdir}",
      check_meta=check_signature)
  tokenizer = run_tokenizer(config)
  try:
    tokenizer_lib.check_vocab_size(tokenizer.vocab_size, model_config.vocab_size,
                                   what=f"checkpoint in {workdir}")
  except ValueError as e:
    raise IncompatibleCheckpointError(str(e)) from None
  return Restored(config=config, model_config=model_config, model=model, params=params,
                  mesh=mesh, tokenizer=tokenizer, step=step, workdir=workdir, rules=rules,
                  source=os.fspath(ckpt_dir / str(step)), objective=config.data.objective,
                  framing=config_lib.framing(config))


def _hf_extra_ids(directory: str, default: int = tokenizer_lib.DEFAULT_EXTRA_IDS) -> int:
  path = os.path.join(directory, HF_TOKENIZER_CONFIG)
  if os.path.isfile(path):
    value = hf_t5.read_json(path).get("extra_ids")  # names the file if it is malformed
    if isinstance(value, int) and value >= 0:
      return value
  return default


def load_hf(directory: str, *, mesh_shape: Sequence[int] | str | None = None,
            dtype: str | None = None, extra_ids: int | None = None,
            devices: Sequence[jax.Device] | None = None) -> Restored:
  """Imports a Hugging Face T5 or T5Gemma `save_pretrained` directory and its tokenizer.

  A T5Gemma directory (config.json's model_type "t5gemma") is framed as transformers frames
  it (`Restored.framing`): its Gemma tokenizer puts <bos> before each prompt and no EOS
  after it, and its decoder starts from the decoder's bos_token_id (2).

  Args:
    directory: holds config.json, model.safetensors (or a sharded index) and the
      SentencePiece model: spiece.model (transformers' T5Tokenizer file) for T5,
      tokenizer.model (GemmaTokenizer's) for T5Gemma.
    mesh_shape, devices: as in `load_run`.
    dtype: activation dtype ("bfloat16" or "float32"); default the importer's.
    extra_ids: sentinels appended to the SentencePiece model; default
      tokenizer_config.json's `extra_ids`, else 100 for T5 and 0 for T5Gemma. A model that
      already holds its sentinels loads with 0 automatically.

  Raises:
    FileNotFoundError: no such directory, config.json, weights or SentencePiece model.
    IncompatibleCheckpointError: the tokenizer does not fit the embedding.
    hf_t5.HFConversionError (a ValueError): a checkpoint lm cannot represent.
  """
  directory = os.path.abspath(directory)
  if not os.path.isdir(directory):
    raise FileNotFoundError(f"Hugging Face directory {directory} does not exist.")
  if not os.path.isfile(os.path.join(directory, hf_t5.CONFIG_NAME)):
    raise FileNotFoundError(f"{directory} has no {hf_t5.CONFIG_NAME}; pass a transformers "
                            "save_pretrained directory.")
  hf_config = hf_t5.read_json(os.path.join(directory, hf_t5.CONFIG_NAME))
  gemma = hf.is_gemma(hf_config)
  spm_file, kind = (HF_GEMMA_SPM_FILE, "Gemma") if gemma else (HF_SPM_FILE, "T5")
  spm_path = os.path.join(directory, spm_file)
  if not os.path.isfile(spm_path):
    raise FileNotFoundError(f"{directory} has no {spm_file} (the {kind} SentencePiece model); "
                            f"copy the tokenizer's {spm_file} into it.")
  extra = (_hf_extra_ids(directory, default=0 if gemma else tokenizer_lib.DEFAULT_EXTRA_IDS)
           if extra_ids is None else extra_ids)
  try:
    tokenizer = tokenizer_lib.load_tokenizer(spm_path, extra_ids=extra)
  except ValueError as e:
    if "already contains <extra_id_" not in str(e):
      raise
    tokenizer = tokenizer_lib.load_tokenizer(spm_path, extra_ids=0)
  overrides = {"dtype": dtype} if dtype else {}
  model_config, numpy_params = hf.checkpoint_to_lm(
      hf_config, hf_t5.read_safetensors(directory), **overrides)
  framing = (generation.Framing(decoder_start=hf_t5gemma.decoder_start_id(hf_config),
                                prompt_bos=tokenizer.bos_id, prompt_eos=False)
             if gemma else generation.T5_FRAMING)
  generation_config = os.path.join(directory, HF_GENERATION_CONFIG)
  eos_ids = hf_t5gemma.eos_ids(hf_config, hf_t5.read_json(generation_config)
                               if os.path.isfile(generation_config) else None)
  try:
    tokenizer_lib.check_vocab_size(tokenizer.vocab_size, model_config.vocab_size,
                                   what=f"checkpoint in {directory}")
  except ValueError as e:
    raise IncompatibleCheckpointError(str(e)) from None
  mesh = _mesh(mesh_shape, devices)
  model = Transformer(model_config)
  abstract, shardings = abstract_params(model, mesh)
  what = checkpoint.shape_mismatch(checkpoint.param_shapes(numpy_params),
                                   checkpoint.param_shapes(abstract))
  if what:  # the importer builds both from one config; a mismatch is a bug there
    raise IncompatibleCheckpointError(f"{directory}: imported params do not fit ({what}).")
  params = jax.device_put(numpy_params, shardings)
  return Restored(config=None, model_config=model_config, model=model, params=params,
                  mesh=mesh, tokenizer=tokenizer, step=None, workdir=None,
                  source=directory, framing=framing, eos_ids=eos_ids)


# ---------------------------------------------------------------------------------------
# Running a restored model over examples.

def global_batch_size(r: Restored, batch_size: int) -> int:
  """The rows of one `run_batches` batch: `batch_size` rounded up to the mesh's batch
  shards and the process count."""
  shards = math.prod(r.mesh.shape[a] for a in partitioning.BATCH_AXES)
  return features.round_up(max(batch_size, jax.process_count()), shards * jax.process_count())


def num_batches(r: Restored, num_examples: int, batch_size: int) -> int:
  """How many batches `run_batches` runs over `num_examples` examples."""
  return -(-num_examples // global_batch_size(r, batch_size))


def run_batches(r: Restored, examples: Sequence[Mapping[str, np.ndarray]], fn: Callable, *,
                batch_size: int, desc: str = "", progress: bool = False,
                lengths: Mapping[str, int] | None = None,
                bar: Any | None = None) -> list[Any]:
  """`fn(params, global batch)` over `examples` (converter features), padded into batches.

  Each feature is padded to its stack's longest example (a multiple of 8), or to
  `lengths` ({stack: row length}, at least every example's) when given; the global batch
  is `batch_size` rounded up to the mesh's batch shards and the process count, its rows
  split over the processes; the last batch is filled with all-zero rows (their outputs
  are the caller's to drop: rows past len(examples)). Runs under r's axis rules. A bar of
  its own when `progress` (titled `desc`), or `bar.update()` after each batch when the
  caller's bar (`cli.progress_bar`) spans more work than these examples.

  Returns:
    fn's outputs, one per batch, as fn returns them (global arrays).
  Raises:
    ValueError: rows longer than the model's learned positions.
  """
  longest = {s: max(max(e[k].size for e in examples), 1)
             for s, k in features.LENGTH_FEATURES.items() if k in examples[0]}
  if lengths is None:
    lengths = {s: features.round_up(n, 8) for s, n in longest.items()}
  elif set(lengths) != set(longest) or any(lengths[s] < n for s, n in longest.items()):
    raise ValueError(f"lengths {dict(lengths)} do not hold the examples' stacks "
                     f"(longest {longest}).")
  cfg = r.model_config
  if cfg.position_encoding == "learned" and max(lengths.values()) > cfg.max_length:
    raise ValueError(f"rows of {max(lengths.values())} tokens exceed the model's learned "
                     f"positions ({cfg.max_length}); use shorter texts.")
  rows = [packing.pad_example(e, lengths) for e in examples]
  batch_size = global_batch_size(r, batch_size)
  num_rows = features.round_up(len(rows), batch_size)
  zeros = {k: np.zeros_like(v) for k, v in rows[0].items()}
  rows += [zeros] * (num_rows - len(rows))
  per_process = batch_size // jax.process_count()
  outputs = []
  starts = range(0, num_rows, batch_size)
  with partitioning.axis_rules(r.mesh, r.rules):
    for start in cli.progress(starts, len(starts), desc, progress and bar is None):
      lo = start + jax.process_index() * per_process
      local = {k: np.stack([row[k] for row in rows[lo:lo + per_process]]) for k in rows[0]}
      outputs.append(fn(r.params, partitioning.make_global_batch(local, r.mesh)))
      if bar is not None:
        bar.update()
  return outputs
