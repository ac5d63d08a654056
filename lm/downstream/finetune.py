"""Fine-tuning as the trainer's parts: the tasks' data and task evaluation.

    lm.train.train_and_evaluate(settings, workdir, PARTS)   # as lm.main does for a
                                                            # config with finetune.tasks
    values = evaluate(settings.evaluation, model, params, tokenizer, mesh=..., rules=...,
                      workdir=..., step=...)   # {"eval/<task>/<metric>": v, ..., SCORE_KEY: v}

`FinetuneSettings` is config.finetune typed (built once by lm.config.finetune_settings, at
the config boundary; the run's RunSettings.finetune). `PARTS` holds `make_data` and,
besides the held-out loss, a `TaskEvaluation` that calls `evaluate` every
finetune.eval_every steps and at the last step. `evaluate` decodes each evaluation task's
split (lm.downstream.evaluation), writes `<workdir>/eval/tasks_step_<N>.json`, updates
`tasks_best.json`, and returns flat metrics for metrics.jsonl / wandb and for
`ckpt.keep_best`, whose `best_metric` is SCORE_KEY by default: the mean over tasks of each
task's mean metric (T5's averaging). See docs/finetuning.md.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping
from typing import Any

from lm import parts as parts_lib
from lm.data import converters
from lm.data import tokenizer as tokenizer_lib
from lm.downstream import evaluation
from lm.downstream import finetune_data
from lm.downstream import task as task_lib

SCORE_KEY = "eval/finetune_score"


def parse_tasks(text: str) -> tuple[tuple[str, float], ...]:
  """config.finetune.tasks' "name[:rate],..." -> ((name, rate), ...) (task.parse_tasks)."""
  return task_lib.parse_tasks(text, empty="config.finetune.tasks is empty; set task=NAME or "
                              "mixture=... (configs/finetune.py).")


@dataclasses.dataclass(frozen=True)
class TaskEval:
  """How the evaluation tasks are decoded and scored.

  Attributes:
    tasks: the evaluated tasks' names (finetune.eval_tasks, default every training task,
      rate 0 included).
    split: the split decoded (finetune.eval_split); data_dir: where the tasks' files are.
    batch_size: global rows per decoding batch (lm.config.eval_batch_size).
    max_decode_length: targets decoded at most (finetune.max_decode_length, default
      data.targets_length).
    max_examples: examples per task at most (None: all).
    inputs_length: inputs are cut to it (None: not cut).
    rank_classification: score a task's choices instead of decoding, where it has them.
    architecture: the run's (written with the results).
    every: evaluate every this many steps (0: never) and at the last step.
    framing: how the run frames inputs and starts its decoder (its training data's).
  """
  tasks: tuple[str, ...]
  split: str = "validation"
  data_dir: str | None = None
  batch_size: int = 128
  max_decode_length: int = 114
  max_examples: int | None = None
  inputs_length: int | None = None
  rank_classification: bool = False
  architecture: str = "encoder_decoder"
  every: int = 0
  framing: converters.Framing = converters.T5_FRAMING


@dataclasses.dataclass(frozen=True)
class FinetuneSettings:
  """A fine-tuning run's typed config.finetune (with the data fields it reads).

  Attributes:
    data: what the training batches are made from (FinetuneSpec).
    tokenizer_path: the run's SentencePiece model (None: the on-the-fly default);
      default_vocab_size, extra_ids: as lm.data.tokenizer.run_tokenizer takes them.
    evaluation: how the tasks are evaluated (TaskEval).
  """
  data: finetune_data.FinetuneSpec
  tokenizer_path: str | None
  default_vocab_size: int
  extra_ids: int
  evaluation: TaskEval


def make_data(settings: FinetuneSettings, process_index: int = 0,
              process_count: int = 1) -> finetune_data.FinetuneData:
  """The fine-tuning data of this process, with the run's tokenizer."""
  tokenizer = tokenizer_lib.run_tokenizer(settings.tokenizer_path,
                                          default_vocab_size=settings.default_vocab_size,
                                          extra_ids=settings.extra_ids)
  return finetune_data.FinetuneData(settings.data, tokenizer=tokenizer,
                                    process_index=process_index, process_count=process_count)


@functools.lru_cache(maxsize=32)
def _examples(name: str, split: str, data_dir: str | None) -> tuple:
  return tuple(task_lib.get_task(name).examples(split, data_dir))


def evaluate(settings: TaskEval, model, params, tokenizer, *, mesh=None, rules,
             workdir=None, step: int = 0) -> dict[str, float]:
  """Decodes each evaluation task, writes the results JSON, returns flat metrics.

  Returns:
    {"eval/<task>/<metric>": value, ..., SCORE_KEY: mean over tasks of their mean metric}.
  """
  outputs = {}
  for name in settings.tasks:
    outputs[name] = evaluate_one_task(
        settings, model, params, tokenizer, task_lib.get_task(name),
        _examples(name, settings.split, settings.data_dir), mesh=mesh, rules=rules)
  if workdir is not None:
    evaluation.write_results(workdir, step, outputs, architecture=settings.architecture)
    evaluation.write_best_results(workdir, up_to_step=step)
  values = flat_metrics(outputs)
  logging.info("step %d task eval: %s", step, values)
  return values


def evaluate_one_task(settings: TaskEval, model, params, tokenizer, task: task_lib.Task,
                      examples, *, mesh=None, rules) -> dict[str, Any]:
  """One task's `evaluation.evaluate_task` on `examples` with the run's settings: the one
  place they become evaluation arguments."""
  return evaluation.evaluate_task(
      model, params, tokenizer, task, settings.split, examples=examples,
      batch_size=settings.batch_size, max_decode_length=settings.max_decode_length,
      mesh=mesh, max_examples=settings.max_examples, inputs_length=settings.inputs_length,
      rank_classification=settings.rank_classification and task.choices is not None,
      rules=rules, framing=settings.framing)


def flat_metrics(outputs: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
  """{"eval/<task>/<metric>": v} and SCORE_KEY from {task: evaluate_task result}."""
  values = {f"eval/{name}/{k}": float(v) for name, o in outputs.items()
            for k, v in o["metrics"].items()}
  scores = [evaluation.task_score(o["metrics"]) for o in outputs.values()]
  values[SCORE_KEY] = float(sum(scores) / len(scores)) if scores else float("nan")
  return values


@dataclasses.dataclass(frozen=True)
class TaskEvaluation:
  """The fine-tuning tasks decoded and scored (`evaluate`) every `settings.every` steps
  (0: never) and at `last_step`; results JSON in the workdir's eval/ (an
  lm.parts.Evaluator)."""
  settings: TaskEval
  model: Any
  tokenizer: Any
  mesh: Any
  rules: Any
  workdir: Any
  last_step: int

  def due(self, step: int) -> bool:
    return parts_lib.due_every(step, self.settings.every, self.last_step)

  def run(self, params: Any, step: int) -> dict[str, float]:
    return evaluate(self.settings, self.model, params, self.tokenizer, mesh=self.mesh,
                    rules=self.rules, workdir=self.workdir, step=step)


def _run_settings(run: Any) -> FinetuneSettings:
  settings = run.settings.finetune
  if settings is None:
    raise ValueError("fine-tuning parts on a run without config.finetune.tasks; set "
                     "finetune.tasks (configs/finetune.py) or train with the default parts.")
  return settings


def task_evaluation(run: Any, data: Any, workdir: Any) -> TaskEvaluation:
  """The TaskEvaluation of `run` (lm.program.RunBuild): its model, mesh, rules and
  settings.finetune.evaluation, and `data`'s tokenizer."""
  return TaskEvaluation(_run_settings(run).evaluation, run.model, data.tokenizer, run.mesh,
                        run.rules, workdir, last_step=run.settings.loop.num_steps)


def _logged_settings(spec: finetune_data.FinetuneSpec) -> dict[str, float]:
  """The lengths logged beside the loss (no objective: its noise settings are NaN)."""
  return parts_lib.logged_settings(spec.inputs_length, spec.targets_length)


# The trainer's parts of a fine-tuning run (RunSettings.finetune set): the tasks' data, the
# held-out loss (train.eval_every; configs/finetune.py sets 0) and the task evaluation.
PARTS = parts_lib.Parts(
    make_data=lambda run, index, count: make_data(_run_settings(run), index, count),
    merge_states=finetune_data.FinetuneData.merge_states,
    logged_settings=_logged_settings,
    evaluators=(parts_lib.heldout_loss, task_evaluation))
