"""A downstream task as a plain record, and the registry of tasks by name.

    task = get_task("glue_mnli")                     # -> Task
    rows = task.examples("validation", data_dir)    # preprocessed: {"inputs", "targets", ...}
    preds = [task.postprocess(text, ex) for text, ex in zip(decoded, rows)]
    golds = [task.postprocess(ex["targets"], ex, is_target=True) for ex in rows]
    task.compute_metrics(golds, preds)               # {"accuracy": 83.1, ...}

A task is T5's text-to-text description (t5/data/tasks.py without seqio or TensorFlow):

- `load(split, data_dir)`: the raw examples of a split as a list of dicts (from files the
  user already has, or built by lm itself); never downloads anything.
- `preprocess(raw) -> dict`: the text-to-text example: at least "inputs" and "targets"
  (str), plus whatever the postprocessor and metrics need (e.g. "idx", "answers").
- `postprocess(text, example, is_target=False)`: decoded text (or the target string)
  back to a label, number or answer, as T5's postprocessors do.
- `metric_fns`: functions `(targets, predictions) -> {name: value}` over the
  postprocessed lists, in T5's scale (percentages where T5 reports them).
- `choices`: for rank classification, the candidate target strings of an example
  (scored with lm.score; the argmax is the prediction); None when the task is decoded.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Example = Mapping[str, Any]
MetricFn = Callable[[Sequence[Any], Sequence[Any]], Mapping[str, float]]


def _identity(text: str, example: Example | None = None, is_target: bool = False) -> Any:
  del example, is_target
  return text


@dataclasses.dataclass(frozen=True)
class Task:
  """One downstream task (see the module docstring for each field's contract).

  Attributes:
    name: registry key, e.g. "glue_mnli_matched", "squad_v1_1", "mini_next_line".
    load: (split, data_dir) -> list of raw examples (dicts).
    preprocess: raw example -> {"inputs": str, "targets": str, ...}.
    postprocess: (text, example, is_target) -> label / answer used by the metrics.
    metric_fns: each (targets, predictions) -> {metric name: float}.
    splits: the split names `load` accepts.
    choices: example -> candidate target strings for rank classification, or None.
    description: one line for `--help` and reports (construction, size, metric, chance).
  """
  name: str
  load: Callable[[str, str | None], list[dict[str, Any]]]
  preprocess: Callable[[Example], dict[str, Any]]
  metric_fns: tuple[MetricFn, ...]
  postprocess: Callable[..., Any] = _identity
  splits: tuple[str, ...] = ("train", "validation")
  choices: Callable[[Example], Sequence[str]] | None = None
  description: str = ""

  def examples(self, split: str, data_dir: str | None = None) -> list[dict[str, Any]]:
    """The preprocessed examples of `split`.

    Raises:
      ValueError: `split` is not one of `splits` (the message lists them).
    """
    if split not in self.splits:
      raise ValueError(f"task {self.name!r} has no split {split!r}; expected one of "
                       f"{list(self.splits)}.")
    return [self.preprocess(raw) for raw in self.load(split, data_dir)]

  def compute_metrics(self, targets: Sequence[Any], predictions: Sequence[Any]
                      ) -> dict[str, float]:
    """All metric_fns over postprocessed targets and predictions, merged into one dict."""
    if len(targets) != len(predictions):
      raise ValueError(f"task {self.name!r}: {len(targets)} targets but "
                       f"{len(predictions)} predictions.")
    out: dict[str, float] = {}
    for fn in self.metric_fns:
      out.update({k: float(v) for k, v in fn(targets, predictions).items()})
    return out


_REGISTRY: dict[str, Task] = {}


def register(task: Task) -> Task:
  """Adds `task` to the registry (its name must be new) and returns it."""
  if task.name in _REGISTRY:
    raise ValueError(f"task {task.name!r} is registered twice.")
  _REGISTRY[task.name] = task
  return task


def get_task(name: str) -> Task:
  """The registered task called `name`.

  Raises:
    ValueError: unknown name (the message lists the known ones).
  """
  _load_builtin_tasks()
  if name not in _REGISTRY:
    raise ValueError(f"unknown task {name!r}; expected one of {sorted(_REGISTRY)}.")
  return _REGISTRY[name]


def parse_tasks(text: str | None, *, empty: str) -> tuple[tuple[str, float], ...]:
  """"name[:rate],name[:rate]" -> ((name, rate), ...) (rate 1.0 when left out).

  The one reader of a task list: config.finetune.tasks (and eval_tasks), configs/finetune.py's
  task= and mixture= args, and `lm.evaluate --task` (which uses the names).

  Args:
    text: comma-separated task names, each with an optional ":rate" (a mixing rate).
    empty: the error message when `text` names no task (it says what to set).

  Raises:
    ValueError: empty text, a malformed rate, or an unknown task (listing the known ones).
  """
  out = []
  for item in str(text or "").split(","):
    item = item.strip()
    if not item:
      continue
    name, sep, rate = item.partition(":")
    try:
      value = float(rate) if sep else 1.0
    except ValueError:
      raise ValueError(f"task {item!r}: the rate after ':' must be a number, "
                       f"e.g. {name}:1.0.") from None
    get_task(name.strip())  # unknown -> "unknown task 'x'; expected one of [...]"
    out.append((name.strip(), value))
  if not out:
    raise ValueError(empty)
  return tuple(out)


def task_names() -> list[str]:
  """Every registered task's name, sorted."""
  _load_builtin_tasks()
  return sorted(_REGISTRY)


def _load_builtin_tasks() -> None:
  """Imports the modules that register lm's own tasks (T5's and the mini suite)."""
  import importlib  # pylint: disable=g-import-not-at-top
  for module in _BUILTIN_MODULES:
    importlib.import_module(module)


# Modules that register tasks on import.
_BUILTIN_MODULES = ("lm.downstream.t5_tasks", "lm.downstream.mini", "lm.downstream.nlu_accept")
