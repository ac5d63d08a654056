r"""Fine-tuning on downstream tasks (T5 §3.1.4 / docs/finetuning.md), on top of configs/t5.py.

Commands:
  # from a pre-training run (its checkpoints) or an HF T5 directory (save_pretrained):
  python -m lm.main --workdir=/tmp/ft_cola \
      --config=configs/finetune.py:task=glue_cola,size=base,data_dir=/data/glue \
      --config.ckpt.init_from=/tmp/t5_base
  # a mixture: a registered one (lm.downstream.task_mixtures) or explicit "task:rate,..." rates
  python -m lm.main --workdir=/tmp/ft_glue --config=configs/finetune.py:mixture=glue_v002_proportional,data_dir=/data/glue
  python -m lm.main --workdir=/tmp/ft_two \
      --config="configs/finetune.py:mixture=glue_cola:1+glue_sst2:2"
  # laptop: tiny model, a few hundred steps
  python -m lm.main --workdir=/tmp/ft_local --config=configs/finetune.py:task=mini_completion,runlocal,inputs_length=128,targets_length=128
  # evaluate a checkpoint on a task afterwards:
  python -m lm.evaluate --workdir=/tmp/ft_cola --task=glue_cola

T5's fine-tuning settings (docs/t5_reference.md, t5x/Mesh TF finetune.gin): Adafactor,
constant learning rate 1e-3 (no warm-up), dropout 0.1, packed 128 x 512-token batches,
2^18 = 262,144 steps, a checkpoint every 5,000 steps, the best checkpoint per task reported
(ckpt.keep_best = 1 on the task metric), greedy decoding for evaluation. The loss is
normalised by the constant 233,472 (= 2048 x 114, what the released checkpoints were
fine-tuned with; Adafactor is scale-invariant); runlocal normalises per target token
instead, which only changes the logged loss scale.

`arg` keys (defaults in brackets):
  task          one task name (lm.downstream.task.task_names())
  mixture       a registered mixture name, or "task:rate+task:rate" (rates; '+' separates
                because ',' separates arg keys); exactly one of task / mixture
  arch, size, family   the model (configs/t5.py; must match ckpt.init_from's)
  inputs_length [512, runlocal 64], targets_length [128, runlocal 16]
  steps [2^18, runlocal 300], batch [128, runlocal 16], eval_every [5000, runlocal 100]
  data_dir      [""] where the tasks' files are (config.finetune.data_dir)
  init_from     [""] config.ckpt.init_from (a run dir, or an HF T5 or T5Gemma dir)
  runlocal      [False] tiny model, embedded tokenizer, wandb offline

Fields added to the t5 config (config.finetune):
  tasks          "name:rate,..." the training mixture (resolved from task / mixture)
  eval_tasks     "" = the tasks of `tasks`; else the names evaluated every eval_every
  data_dir, split ["train"], eval_split ["validation"]
  eval_every     decode-and-score every N steps (and at the last step); 0 = never
  max_eval_examples [0 = all] per task; max_decode_length [0 = data.targets_length]
  rank_classification [False]: rank the choices of tasks that have them (instead of decoding)
  framing        ["t5"] how inputs are framed and the decoder starts (lm.data.converters.FRAMINGS):
                 "t5gemma" to fine-tune a T5Gemma checkpoint (<bos> + inputs, decoder from 2)
ckpt.best_metric = "eval/finetune_score" (mean over tasks of each task's mean metric),
ckpt.best_mode = "max", ckpt.keep_best = 1. train.eval_every = 0 (no held-out loss pass;
set it to also log the teacher-forced validation loss).
"""
from __future__ import annotations

import ml_collections

from configs import common, t5
from lm.downstream import finetune, task_mixtures

SCORE_KEY = "eval/finetune_score"  # lm.downstream.finetune.SCORE_KEY


def _resolve_tasks(task: str, mixture: str) -> str:
  """The training mixture as "name:rate,..." from the task / mixture args."""
  if bool(task) == bool(mixture):
    raise ValueError("configs/finetune.py: pass exactly one of task=NAME or mixture=NAME "
                     "(or mixture=task:rate+task:rate).")
  if task:
    pairs = finetune.parse_tasks(task)
  elif ":" in mixture or "+" in mixture:
    pairs = finetune.parse_tasks(mixture.replace("+", ","))
  else:
    m = task_mixtures.get_mixture(mixture)
    pairs = tuple(zip(m.tasks, m.rates))
  return ",".join(f"{n}:{float(r):g}" for n, r in pairs)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """The locked fine-tuning config for `arg` (see the module docstring)."""
  arg = common.parse_arg(arg, task="", mixture="", arch="encoder_decoder", size="",
                         family="t5_1_1", inputs_length=-1, targets_length=-1, steps=-1,
                         batch=-1, eval_every=-1, data_dir="", init_from="", runlocal=False)
  tasks = _resolve_tasks(arg.task, arg.mixture)
  base_arg = f"arch={arg.arch},family={arg.family}"
  if arg.size:
    base_arg += f",size={arg.size}"
  if arg.runlocal:
    base_arg += ",runlocal"
  config = t5.get_config(base_arg)
  config.unlock()
  config.arg = arg.to_dict()
  local = arg.runlocal

  d = config.data
  d.inputs_length = arg.inputs_length if arg.inputs_length > 0 else (64 if local else 512)
  d.targets_length = arg.targets_length if arg.targets_length > 0 else (16 if local else 128)
  d.batch_size = arg.batch if arg.batch > 0 else (16 if local else 128)
  d.pack = True                       # T5 fine-tunes on packed rows
  d.validation_fraction = 0.0         # validation = the tasks' eval_split

  config.model.dropout_rate = 0.1     # T5: dropout 0.1 when fine-tuning

  o, s = config.optim, config.schedule
  o.name = "adafactor"
  s.name = "constant"                 # T5: constant 1e-3, no warm-up
  s.base_lr = 1e-3
  s.warmup_steps = 0
  if not local:
    config.loss.normalization = "constant"  # 2048 x 114, as T5's released checkpoints
    config.loss.normalizing_constant = 233472.0

  steps = arg.steps if arg.steps > 0 else (300 if local else 2 ** 18)
  every = arg.eval_every if arg.eval_every >= 0 else (100 if local else 5000)
  config.train.num_steps = steps
  config.train.eval_every = 0         # no held-out LM loss pass; tasks are decoded below
  config.ckpt.every_steps = every if every > 0 else config.ckpt.every_steps
  config.ckpt.keep_best = 1
  config.ckpt.best_metric = SCORE_KEY
  config.ckpt.best_mode = "max"
  config.ckpt.init_from = arg.init_from or None

  config.finetune = ml_collections.ConfigDict(dict(
      tasks=tasks, eval_tasks="", data_dir=arg.data_dir, split="train",
      eval_split="validation", eval_every=every, max_eval_examples=0, max_decode_length=0,
      rank_classification=False, framing="t5"))
  config.wandb.project = "lm-finetune"
  config.wandb.tags = tuple(config.wandb.tags) + tuple(n.split(":")[0] for n in
                                                       tasks.split(","))
  config.lock()
  return config
