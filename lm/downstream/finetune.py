"""Fine-tuning as the trainer's parts: config.finetune -> the tasks' data and task evaluation.

    if enabled(config):                      # config.finetune.tasks set (configs/finetune.py)
      lm.train.train_and_evaluate(config, workdir, parts(config))   # as lm.main does
    data = make_data(config, process_index, process_count)      # FinetuneData
    values = evaluate(config, model, params, tokenizer, mesh=..., rules=..., workdir=...,
                      step=...)              # {"eval/<task>/<metric>": v, ..., SCORE_KEY: v}

`parts` holds `make_data` and, besides the held-out loss, a `TaskEvaluation` that calls
`evaluate` every finetune.eval_every steps and at the last step. `evaluate` decodes each
evaluation task's split (lm.downstream.evaluation), writes `<workdir>/eval/tasks_step_<N>.json`
and updates `tasks_best.json`, and returns flat metrics for metrics.jsonl / wandb and for
`ckpt.keep_best`, whose `best_metric` is SCORE_KEY by default: the mean over tasks of each
task's mean metric (T5's averaging). See docs/finetuning.md.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping
from typing import Any

import ml_collections

from lm import architecture as architecture_lib
from lm import parts as parts_lib
from lm.downstream import evaluation
from lm.downstream import finetune_data
from lm.downstream import task as task_lib

SCORE_KEY = "eval/finetune_score"


def parse_tasks(text: str) -> tuple[tuple[str, float], ...]:
  """config.finetune.tasks' "name[:rate],..." -> ((name, rate), ...) (task.parse_tasks)."""
  return task_lib.parse_tasks(text, empty="config.finetune.tasks is empty; set task=NAME or "
                              "mixture=... (configs/finetune.py).")


def enabled(config: ml_collections.ConfigDict) -> bool:
  """Whether `config` is a fine-tuning run (has a non-empty config.finetune.tasks)."""
  ft = config.get("finetune")
  return bool(ft is not None and ft.get("tasks"))


def spec(config: ml_collections.ConfigDict) -> finetune_data.FinetuneSpec:
  """The FinetuneSpec of a fine-tuning config (config.data lengths / batch / shards)."""
  d, ft = config.data, config.finetune
  return finetune_data.FinetuneSpec(
      tasks=parse_tasks(ft.tasks), data_dir=ft.data_dir or None, split=ft.split,
      architecture=architecture_lib.layout(config.model.architecture), inputs_length=int(d.inputs_length),
      targets_length=int(d.targets_length), batch_size=int(d.batch_size),
      eval_batch_size=d.eval_batch_size, num_shards=int(d.num_shards), pack=bool(d.pack),
      num_packing_bins=d.num_packing_bins, loss_on_inputs=bool(d.loss_on_inputs),
      seed=int(d.seed))


def make_data(config: ml_collections.ConfigDict, process_index: int = 0,
              process_count: int = 1) -> finetune_data.FinetuneData:
  """The fine-tuning data of this process, with the run's tokenizer (config.data)."""
  from lm import restore  # pylint: disable=g-import-not-at-top
  return finetune_data.FinetuneData(spec(config), tokenizer=restore.run_tokenizer(config),
                                    process_index=process_index, process_count=process_count)


def eval_task_names(config: ml_collections.ConfigDict) -> list[str]:
  """config.finetune.eval_tasks, or every task of config.finetune.tasks (rate 0 included)."""
  ft = config.finetune
  text = ft.get("eval_tasks") or ",".join(n for n, _ in parse_tasks(ft.tasks))
  return [n for n, _ in parse_tasks(text)]


@functools.lru_cache(maxsize=32)
def _examples(name: str, split: str, data_dir: str | None) -> tuple:
  return tuple(task_lib.get_task(name).examples(split, data_dir))


def evaluate(config: ml_collections.ConfigDict, model, params, tokenizer, *, mesh=None,
             rules=None, workdir=None, step: int = 0) -> dict[str, float]:
  """Decodes each evaluation task, writes the results JSON, returns flat metrics.

  Returns:
    {"eval/<task>/<metric>": value, ..., SCORE_KEY: mean over tasks of their mean metric}.
  """
  from lm import partitioning  # pylint: disable=g-import-not-at-top
  ft = config.finetune
  if rules is None:
    rules = partitioning.rules_from_config(config.logical_axis_rules)
  outputs = {}
  for name in eval_task_names(config):
    outputs[name] = evaluate_one_task(
        config, model, params, tokenizer, task_lib.get_task(name),
        _examples(name, ft.eval_split, ft.data_dir or None), mesh=mesh, rules=rules)
  if workdir is not None:
    evaluation.write_results(workdir, step, outputs, architecture=config.model.architecture)
    evaluation.write_best_results(workdir, up_to_step=step)
  values = flat_metrics(outputs)
  logging.info("step %d task eval: %s", step, values)
  return values


def evaluate_one_task(config: ml_collections.ConfigDict, model, params, tokenizer,
                      task: task_lib.Task, examples, *, mesh=None, rules) -> dict[str, Any]:
  """One task's `evaluation.evaluate_task` on `examples` with the run's finetune and data
  settings (split, batch size, decode length, max_eval_examples, inputs length, rank
  classification): the one place those sections become evaluation arguments."""
  ft, d = config.finetune, config.data
  return evaluation.evaluate_task(
      model, params, tokenizer, task, ft.eval_split, examples=examples,
      batch_size=int(d.eval_batch_size or d.batch_size),
      max_decode_length=int(ft.max_decode_length or d.targets_length), mesh=mesh,
      max_examples=int(ft.max_eval_examples) or None,
      inputs_length=int(d.inputs_length) or None,
      rank_classification=bool(ft.rank_classification) and task.choices is not None,
      rules=rules)


def flat_metrics(outputs: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
  """{"eval/<task>/<metric>": v} and SCORE_KEY from {task: evaluate_task result}."""
  values = {f"eval/{name}/{k}": float(v) for name, o in outputs.items()
            for k, v in o["metrics"].items()}
  scores = [evaluation.task_score(o["metrics"]) for o in outputs.values()]
  values[SCORE_KEY] = float(sum(scores) / len(scores)) if scores else float("nan")
  return values


@dataclasses.dataclass(frozen=True)
class TaskEvaluation:
  """The fine-tuning tasks decoded and scored (`evaluate`) every `every` steps (0: never)
  and at `last_step`; results JSON in the workdir's eval/ (an lm.parts.Evaluator)."""
  config: ml_collections.ConfigDict
  model: Any
  tokenizer: Any
  mesh: Any
  rules: Any
  workdir: Any
  every: int
  last_step: int

  def due(self, step: int) -> bool:
    return parts_lib.due_every(step, self.every, self.last_step)

  def run(self, params: Any, step: int) -> dict[str, float]:
    return evaluate(self.config, self.model, params, self.tokenizer, mesh=self.mesh,
                    rules=self.rules, workdir=self.workdir, step=step)


def task_evaluation(config: ml_collections.ConfigDict, run: Any, data: Any,
                    workdir: Any) -> TaskEvaluation:
  """The TaskEvaluation of `run` (lm.train.RunBuild): its model, mesh and rules, `data`'s
  tokenizer, every config.finetune.eval_every steps."""
  return TaskEvaluation(config, run.model, data.tokenizer, run.mesh, run.rules, workdir,
                        every=int(config.finetune.eval_every),
                        last_step=run.settings.loop.num_steps)


def _finetune_settings(spec: finetune_data.FinetuneSpec) -> dict[str, float]:
  """The lengths logged beside the loss (no objective: its noise settings are NaN)."""
  return parts_lib.logged_settings(spec.inputs_length, spec.targets_length)


def parts(config: ml_collections.ConfigDict) -> parts_lib.Parts:
  """The trainer's parts of a fine-tuning config (`enabled`): the tasks' data
  (`make_data`), the held-out loss (train.eval_every; configs/finetune.py sets 0) and the
  task evaluation (finetune.eval_every)."""
  return parts_lib.Parts(
      make_data=lambda run, index, count: make_data(config, index, count),
      merge_states=finetune_data.FinetuneData.merge_states,
      logged_settings=_finetune_settings,
      evaluators=(parts_lib.heldout_loss, functools.partial(task_evaluation, config)))
