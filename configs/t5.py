r"""T5 study base config: one model family x many objectives x 4 architectures.

Command (paper-scale baseline; T5.1.1 base, span corruption 512/114, batch 128, 2^19 steps):
  python -m lm.main --workdir=/tmp/t5_base --config=configs/t5.py:arch=encoder_decoder,objective=span_corruption,size=base
Paper's own baseline (T5.1.0 base: ReLU, tied embeddings, dropout 0.1; i.i.d. denoising):
  python -m lm.main --workdir=... --config=configs/t5.py:family=t5_1_0,objective=iid_replace_spans
Laptop / CI run (tiny model, embedded corpus, tokenizer trained on the fly, 2-core CPU):
  python -m lm.main --workdir=/tmp/t5_local --config=configs/t5.py:runlocal
Overrides: `--config.optim.name=adamw --config.schedule.base_lr=3e-4 --config.data.batch_size=256`
(locked: a misspelt field fails with its name). Check a config without running it:
  python -c "from configs import t5; from lm import validate; validate.validate(t5.get_config('arch=causal'))"

Hardware and time:
  runlocal: 2-core CPU, 1 JAX device. Measured on a 2-core machine (shared with other jobs)
    when this config was written, before lm.main existed, with the pieces the trainer calls
    (the data pipeline and lm.steps.train_step jitted with the run's shardings), and not
    re-measured since: ~13 s to train the 1000-piece tokenizer on first use (cached
    afterwards), ~10 s to compile, then ~0.05 s/step: 1000 steps in ~80 s end to end. The
    pipeline has since switched to the vectorised objectives (other noise draws,
    docs/speed.md), so read the losses below as a guide, not as exact values; a run's own
    figures (loss, tokens_per_s) are in its <workdir>/metrics.jsonl.
    Expected metric (span corruption, tiny 2+2 model, batch 16 x 64/14 tokens, Adafactor,
    rsqrt lr 0.1 -> 0.032, seed 0), train loss averaged over the last 20 steps:
    5.46 at step 20, 4.70 at 100, 4.24 at 300, 3.99 at 500, 3.80 at 1000; token accuracy
    0.31 at 1000 (uniform over the 1152-entry padded vocabulary would be ln 1152 = 7.05).
  size=base (T5.1.1 base, 2^19 steps x 128 x 512/114): 5.45e13 training matmul FLOPs per
    step (lm.model.accounting.training_flops), 2.86e19 in total; at an assumed 40 % MFU
    that is ~4.5 h on a TPU v4-32 (16 chips x 275 TFLOP/s) or ~2.5 h on 8 x H100 — an
    estimate from FLOPs, not a measurement.
    Expected metric: the paper reports downstream scores only (Table 1: GLUE 83.28 etc.
    after fine-tuning); it publishes no pre-training loss, so none is claimed here.
    Data: point data.format/paths at C4 and data.tokenizer at T5's SentencePiece model.
    The default (embedded corpus, tokenizer trained on the fly) holds too little text for
    T5's 32000 pieces: to run a full-size preset on it (a smoke test, a speed check), add
    --config.data.default_vocab_size=8000 --config.model.vocab_size=8192.

`arg` keys (configs.common.parse_arg; defaults in brackets):
  arch       [encoder_decoder] | shared | prefix_lm | causal      (T5 Table 2 architectures;
             config.model.architecture, from which lm/config.py derives the model's mask
             type and stacks and the data layout)
  objective  [span_corruption] | iid_replace_spans | drop_tokens | bert | mass | deshuffle |
             prefix_lm | full_lm | ul2                              (T5 Tables 4-7, UL2)
  size       [base] | tiny | small_cpu (the "cpu" family) | small | large | xl | xxl (t5_1_1)
             or small | base | large | 3b | 11b (t5_1_0): a row of lm/model/presets.py
  family     [t5_1_1] | t5_1_0
  noise      [-1 = the objective's default] corruption rate (T5 Table 6)
  span       [-1 = default] mean span length for span_corruption (T5 Table 7)
  inputs_length [512], steps [-1 = 2^19], batch [-1 = 128]
  lengths    [derived] | gin: where the targets length comes from (below)
  loss_on_inputs [False]: decoder-only denoising: loss on the inputs part too (arch=causal
             only; Mesh TensorFlow's default for T5's decoder-only rows)
  mode_tokens [ids] | text: UL2 mode tokens as three reserved extra ids, or the strings
             [NLU] / [NLG] / [S2S] tokenized into the inputs (UL2's released code)
  runlocal   [False]: tiny model, 64-token inputs, batch 16, 1000 steps, wandb offline.

Targets length. lengths=derived (default): from the objective
(lm.data.objectives.required_targets_length: 114 for span corruption at 512/0.15/3; the
99.9 % quantile for the i.i.d. objectives), so changing noise/span keeps the lengths
consistent and (almost) no example's targets are truncated. lengths=gin: T5's gin values
(`iid_{10,15,25,50}_u_u`: 103/192/256/512, `iid_15_d_d`: 104, the full-sequence objectives
512, span corruption random_spans_helper's), scaled by inputs_length / 512 for other input
lengths; the converter then truncates the targets that are longer (at 10 % corruption
about a third of the examples), as T5's runs did.

Full LM on a decoder-only architecture has no inputs: its rows are `inputs_length` tokens of
targets (data.inputs_length = 0, data.targets_length = 512), T5's `lm.gin` 128 x 512.
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from configs import common
from lm import architecture, optim, partitioning
from lm import config as config_lib
from lm.model import presets

ARCHS = architecture.ARCHITECTURES    # T5 Table 2 (lm/architecture.py)
FAMILIES = ("t5_1_1", "t5_1_0")      # size tables of lm/model/presets.py
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
  """Returns the locked T5-study config for `arg` (see the module docstring)."""
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
      async_save=True, init_from=config_dict.placeholder(str)))
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
