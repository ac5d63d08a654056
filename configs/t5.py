r"""T5 study base config: one model family x many objectives x 4 architectures.

`get_config(arg)` takes "key=value,..." (arch, objective, size, family, noise, span,
inputs_length, steps, batch, lengths, loss_on_inputs, mode_tokens, runlocal); the derived
fields (data.targets_length, data.extra_ids, model.vocab_size) are left None for
lm.config.derive, which fills them after the command-line overrides. The keys, commands,
hardware and time and the targets-length rules are in docs/configs.md.

  python -m lm.main --workdir=/tmp/t5_local --config=configs/t5.py:runlocal
  python -m lm.main --workdir=/tmp/t5_base \
      --config=configs/t5.py:arch=encoder_decoder,objective=span_corruption,size=base
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from configs import common
from lm import architecture, optim, partitioning
from lm import config as config_lib
from lm.model import presets

ARCHS = architecture.ARCHITECTURES    # T5 Table 2 (lm/architecture.py)
FAMILIES = ("t5_1_1", "t5_1_0", "t5gemma")  # size tables of lm/model/presets.py
CPU_SIZES = presets.sizes("cpu")      # the "cpu" family's sizes, with either family

# name -> (lm.data.objectives name, params). Defaults are the T5 paper's (§3.3).
OBJECTIVE_PRESETS = {
    "span_corruption": ("span_corruption", dict(noise_density=0.15, mean_noise_span_length=3.0)),
    "iid_replace_spans": ("iid_replace_spans", dict(noise_density=0.15)),
    "drop_tokens": ("drop_tokens", dict(noise_density=0.15)),
    "bert": ("bert", dict(noise_density=0.15)),
    "mass": ("mass", dict(noise_density=0.15)),
    "deshuffle": ("deshuffle", dict()),
    "prefix_lm": ("prefix_lm", dict()),
    "full_lm": ("full_lm", dict()),
    "ul2": ("mixture", dict(preset="ul2")),
}

LENGTHS = ("derived", "gin")
MODE_TOKENS = ("ids", "text")


def model_preset(size: str, family: str = "t5_1_1") -> tuple[str, str]:
  """(family, size) of the size table row (lm/model/presets.py) for the `size`/`family` args.

  The CPU sizes (tiny, small_cpu) are the "cpu" family's whatever `family` says. The
  architecture is not part of the preset: decoder-only models have the per-layer shape of
  the size and as many layers as ONE stack (T5 Table 2: "LM" and "prefix LM" with P
  parameters).
  """
  if family not in FAMILIES:
    raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}.")
  if size in CPU_SIZES:
    return "cpu", size
  sizes = presets.sizes(family)
  if size not in sizes:
    raise ValueError(f"unknown size {size!r} for family {family}; expected one of "
                     f"{CPU_SIZES + sizes}.")
  return family, size


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Returns the locked T5-study config for `arg` (keys: docs/configs.md), not yet derived."""
  arg = common.parse_arg(arg, arch="encoder_decoder", objective="span_corruption", size="",
                         family="t5_1_1", noise=-1.0, span=-1.0, inputs_length=-1, steps=-1,
                         batch=-1, lengths="derived", loss_on_inputs=False, mode_tokens="ids",
                         runlocal=False)
  if arg.lengths not in LENGTHS:
    raise ValueError(f"unknown lengths {arg.lengths!r}; expected one of {LENGTHS}.")
  if arg.mode_tokens not in MODE_TOKENS:
    raise ValueError(f"unknown mode_tokens {arg.mode_tokens!r}; expected one of {MODE_TOKENS}.")
  if arg.objective not in OBJECTIVE_PRESETS:
    raise ValueError(f"unknown objective {arg.objective!r}; expected one of "
                     f"{sorted(OBJECTIVE_PRESETS)}.")
  if arg.arch not in ARCHS:
    raise ValueError(f"unknown arch {arg.arch!r}; expected one of {ARCHS}.")
  size = arg.size or ("tiny" if arg.runlocal else "base")
  encdec = architecture.is_encoder_decoder(arg.arch)

  config = ml_collections.ConfigDict()
  config.arg = arg.to_dict()  # for the record (wandb, workdir config.json)

  # --- model (family/size/architecture + TransformerConfig fields; lm.config.model_section)
  # config.model.architecture owns the architecture: the model's mask type and stacks and
  # the data layout are derived from it (lm/architecture.py).
  config.model = config_lib.model_section(*model_preset(size, arg.family), arg.arch)

  # --- data (lm.data.pipeline.DataSpec fields; its architecture is the model's) ----------
  objective, params = OBJECTIVE_PRESETS[arg.objective]
  params = dict(params)
  if arg.noise >= 0:
    if objective in ("full_lm", "mixture"):
      raise ValueError(f"objective {arg.objective!r} has no corruption rate (noise).")
    params["noise_density"] = arg.noise
  if arg.span >= 0:
    if objective != "span_corruption":
      raise ValueError("span (mean span length) applies to objective=span_corruption only.")
    params["mean_noise_span_length"] = arg.span
  if arg.mode_tokens == "text":
    if objective != "mixture":
      raise ValueError("config arg mode_tokens applies to objective=ul2 only.")
    params["mode_tokens"] = "text"
  inputs_length = arg.inputs_length if arg.inputs_length > 0 else (64 if arg.runlocal else 512)
  # None: derived after the overrides (lm.config.derive), from the final objective and lengths.
  targets_length = None
  if objective == "full_lm":
    targets_length = inputs_length  # full LM: the targets ARE the sequence (inputs empty)
    if not encdec:
      inputs_length = 0  # decoder-only rows of targets_length tokens (T5 lm.gin: 128 x 512)

  d = config.data = ml_collections.ConfigDict()
  d.format = "default"                 # embedded corpus; "jsonl", "parquet", "hf", ...
  d.paths = ()
  d.text_field = "text"
  d.hf_split = config_dict.placeholder(str)
  d.json_records = False
  d.on_decode_error = "replace"        # invalid UTF-8 in data files: "replace" (U+FFFD) or "skip"
  d.max_document_chars = 100_000
  d.max_bad_fraction = 0.01            # refuse a data file with more bad records (broken JSON, bad UTF-8)
  d.eval_format = config_dict.placeholder(str)
  d.eval_paths = ()
  d.validation_fraction = 0.01         # held-out share of train documents when no eval_paths
  d.validation_seed = 0
  d.tokenizer = config_dict.placeholder(str)  # SentencePiece .model; None = train on the fly
  # Pieces of the on-the-fly tokenizer (used when tokenizer is None): 32000 + 100 extra ids
  # pads to T5's 32128; at paper scale point tokenizer at T5's spm model and format/paths at C4.
  d.default_vocab_size = 1000 if arg.runlocal else 32000
  # None: T5's 100 sentinels, or more where the objective can need more (lm.config.derive).
  d.extra_ids = config_dict.placeholder(int)
  d.objective = objective
  d.objective_params = ml_collections.ConfigDict(params)
  # Decoder-only denoising: loss on the targets part only (False) or on inputs and targets
  # (True, Mesh TensorFlow's default; arch=causal only, validation rejects it elsewhere).
  d.loss_on_inputs = arg.loss_on_inputs
  d.inputs_length = inputs_length
  d.targets_length = (config_dict.placeholder(int) if targets_length is None
                      else int(targets_length))
  # lengths=gin: the derived targets length is T5's gin value, and longer targets are
  # truncated as in T5's runs (validation otherwise requires the objective's). Not a
  # DataSpec field.
  d.allow_truncated_targets = arg.lengths == "gin"
  d.batch_size = arg.batch if arg.batch > 0 else (16 if arg.runlocal else 128)  # GLOBAL
  d.eval_batch_size = config_dict.placeholder(int)
  # Virtual data shards: the global batch is the same for any number of processes and
  # the data position restores onto another process count; must divide batch_size and
  # be divisible by the process count (raise it, e.g. to 64, for runs over > 8 hosts).
  d.num_shards = 8
  d.pack = True
  d.num_packing_bins = config_dict.placeholder(int)
  # The vectorised objectives (lm/data/batched.py) where one exists; False: the per-example
  # reference (docs/speed.md). Different noise draws, so part of the data fingerprint.
  d.batched_objectives = True
  d.document_eos = config_dict.placeholder(bool)   # None: the objective's (full_lm only)
  d.concatenate = config_dict.placeholder(bool)    # None: the objective's (not prefix_lm/deshuffle)
  d.seed = 0
  d.num_epochs = config_dict.placeholder(int)
  d.num_threads = 2 if arg.runlocal else 4
  d.prefetch_batches = 2  # at least a block's batches on the vectorised path (lm/data/pipeline.py)
  # None: the on-the-fly tokenizer's default_vocab_size pieces + extra ids, padded to 128
  # (32000 + 100 -> 32128 as T5; lm.config.derive). With data.tokenizer set, the trainer
  # checks the model's vocab_size against the loaded tokenizer.
  config.model.vocab_size = config_dict.placeholder(int)

  # --- optimizer, schedule, loss (t5x losses.py, adafactor.py) -------------------------------------
  # The sections start from lm.optim's settings, which hold the defaults: Adafactor with
  # T5's settings (name: adafactor | adamw; adamw: GPT-3's b1 0.9, b2 0.95, eps 1e-8, weight
  # decay 0.1), no global-norm clipping, 1 microbatch per step; rsqrt schedule
  # lr = base_lr / sqrt(max(step, warmup_steps)) with base_lr 1 and 10^4 warmup steps
  # (name: rsqrt | cosine | linear | constant; decay_steps and end_factor for cosine/linear).
  config.optim = config_lib.section(optim.OptimConfig())
  config.schedule = config_lib.section(optim.ScheduleConfig())
  if arg.runlocal:
    config.schedule.warmup_steps = 100

  config.loss = ml_collections.ConfigDict(dict(
      z_loss=1e-4, label_smoothing=0.0,
      normalization="num_target_tokens",  # | constant (T5 fine-tuning: 233472) | none
      normalizing_constant=233472.0,
      # > 0: the output projection, loss and accuracy in chunks of this many tokens
      # (lm.losses.tiled_cross_entropy): no float32 [B, L, V] logits; 0: the whole logits.
      tiled_chunk_tokens=0))

  # --- partitioning ----------------------------------------------------------------------
  config.mesh = ml_collections.ConfigDict(dict(shape=(-1, 1, 1)))  # (data, fsdp, tensor)
  config.logical_axis_rules = tuple(partitioning.DEFAULT_LOGICAL_AXIS_RULES)

  # --- checkpointing, logging, loop ------------------------------------------------------
  steps = arg.steps if arg.steps > 0 else (1000 if arg.runlocal else 2 ** 19)
  config.ckpt = ml_collections.ConfigDict(dict(
      every_steps=100 if arg.runlocal else 5000, keep=3, keep_best=0, best_metric="eval_loss",
      async_save=True, init_from=config_dict.placeholder(str), keep_steps=()))
  config.wandb = ml_collections.ConfigDict(dict(
      mode="offline" if arg.runlocal else "auto",  # auto: online iff WANDB_API_KEY is set
      project="lm-t5", entity=config_dict.placeholder(str),
      group=config_dict.placeholder(str), name=config_dict.placeholder(str),
      tags=(arg.arch, arg.objective, size, arg.family), notes=""))
  config.train = ml_collections.ConfigDict(dict(
      num_steps=steps, log_every=20 if arg.runlocal else 100,
      eval_every=100 if arg.runlocal else 5000, eval_steps=5 if arg.runlocal else 20,
      seed=0))
  config.lock()
  return config
