"""Mixtures of tasks (paper §3.5.2) and the GLUE / SuperGLUE averages (paper §2.3, Table 16).

Fine-tuning mixes tasks here; pre-training mixes objectives (UL2) in lm.data.

A mixture is a list of registered task names with mixing rates; training samples each
example's task with probability rate / sum(rates). The paper's three strategies, on the
training-set sizes e_1..e_N:

  examples-proportional, limit K   r_m = min(e_m, K)                     `proportional_rates`
  temperature T (with limit K)     r_m = min(e_m, K) ** (1 / T)          `proportional_rates`
  equal                            r_m = 1                               `equal_rates`

(T5's `rate_num_examples`: the count is capped at K, then raised to 1/T; the paper's
temperature runs keep K = 2^21.) A rate of 0 marks an evaluation-only task (T5's MNLI
matched / mismatched).

    mix = get_mixture("glue_v002_proportional")
    mix.probabilities()                      # {"glue_cola": 0.0089..., ...}
    glue_average({"glue_cola": {"matthews_corrcoef": 53.8}, ...})

T5's own mixtures registered here: `glue_v002_proportional` and `super_glue_v102_proportional`
(t5/data/mixtures.py, with the training-set sizes of t5/data/glue_utils.py).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from lm.downstream.task import get_task


@dataclasses.dataclass(frozen=True)
class Mixture:
  """Registered tasks sampled in proportion to `rates` (non-negative, not all zero)."""
  name: str
  tasks: tuple[str, ...]
  rates: tuple[float, ...]

  def __post_init__(self):
    object.__setattr__(self, "tasks", tuple(self.tasks))
    object.__setattr__(self, "rates", tuple(float(r) for r in self.rates))
    if not self.tasks:
      raise ValueError(f"mixture {self.name!r} has no tasks; expected at least one.")
    if len(self.tasks) != len(self.rates):
      raise ValueError(f"mixture {self.name!r}: {len(self.tasks)} tasks but "
                       f"{len(self.rates)} rates; expected one rate per task.")
    if len(set(self.tasks)) != len(self.tasks):
      raise ValueError(f"mixture {self.name!r} lists a task twice: {list(self.tasks)}.")
    if any(not r >= 0 for r in self.rates) or sum(self.rates) <= 0:
      raise ValueError(f"mixture {self.name!r}: rates {list(self.rates)} must be "
                       "non-negative with a positive sum.")

  def probabilities(self) -> dict[str, float]:
    """Each task's sampling probability (rates normalised to sum to 1)."""
    total = sum(self.rates)
    return {t: r / total for t, r in zip(self.tasks, self.rates)}

  def training_tasks(self) -> tuple[str, ...]:
    """The tasks with a positive rate (rate-0 tasks are evaluated only)."""
    return tuple(t for t, r in zip(self.tasks, self.rates) if r > 0)

  def check_tasks(self) -> None:
    """Raises ValueError (listing the known tasks) when a task is not registered."""
    for t in self.tasks:
      get_task(t)


def proportional_rates(sizes: Sequence[int], *, limit: float | None = None,
                       temperature: float = 1.0) -> list[float]:
  """Examples-proportional rates min(n, K) ** (1/T), normalised to sum to 1.

  Args:
    sizes: each task's number of training examples.
    limit: the artificial dataset-size limit K (None: no limit).
    temperature: T >= 1 flattens the mixture towards equal (T = 1: proportional).
  """
  if temperature <= 0:
    raise ValueError(f"temperature {temperature} must be positive; expected T >= 1 "
                     "(1 is examples-proportional).")
  if limit is not None and limit <= 0:
    raise ValueError(f"limit {limit} must be positive; expected the dataset-size cap K.")
  if any(n < 0 for n in sizes):
    raise ValueError(f"sizes {list(sizes)} must be non-negative example counts.")
  rates = [(min(n, limit) if limit is not None else n) ** (1.0 / temperature) for n in sizes]
  total = sum(rates)
  if total <= 0:
    raise ValueError(f"sizes {list(sizes)} are all 0; expected at least one task with examples.")
  return [r / total for r in rates]


def equal_rates(num_tasks: int) -> list[float]:
  """Equal mixing: every task 1 / num_tasks."""
  if num_tasks < 1:
    raise ValueError(f"equal mixing of {num_tasks} tasks; expected at least one.")
  return [1.0 / num_tasks] * num_tasks


def proportional_mixture(name: str, sizes: Mapping[str, int], *, limit: float | None = None,
                         temperature: float = 1.0) -> Mixture:
  """A Mixture of `sizes`' tasks with `proportional_rates` (a size of 0: evaluation only)."""
  return Mixture(name, tuple(sizes), tuple(proportional_rates(
      list(sizes.values()), limit=limit, temperature=temperature)))


def equal_mixture(name: str, tasks: Sequence[str]) -> Mixture:
  """A Mixture of `tasks` with equal rates."""
  return Mixture(name, tuple(tasks), tuple(equal_rates(len(tasks))))


# ------------------------------------------------------------------------- registry

# Training-set sizes T5 mixes GLUE and SuperGLUE with (t5/data/glue_utils.py). GLUE leaves
# out WNLI (T5 never trains on it); MNLI matched / mismatched are evaluation only. T5's
# SuperGLUE mixture also holds DPR (1,322 examples), which lm does not provide; WSC counts
# its 259 training examples whose candidate is the referent (wsc_simple's training set).
GLUE_SIZES = {
    "glue_cola": 8_551, "glue_sst2": 67_349, "glue_mrpc": 3_668, "glue_qqp": 363_849,
    "glue_stsb": 5_749, "glue_mnli": 392_702, "glue_qnli": 104_743, "glue_rte": 2_490,
    "glue_mnli_mismatched": 0, "glue_mnli_matched": 0,
}
SUPER_GLUE_SIZES = {
    "super_glue_wsc": 259, "super_glue_boolq": 9_427, "super_glue_cb": 250,
    "super_glue_copa": 400, "super_glue_multirc": 27_243, "super_glue_record": 138_854,
    "super_glue_rte": 2_490, "super_glue_wic": 5_428,
}

_MIXTURES: dict[str, Mixture] = {}


def register_mixture(mixture: Mixture) -> Mixture:
  """Adds `mixture` to the registry (its name must be new) and returns it."""
  if mixture.name in _MIXTURES:
    raise ValueError(f"mixture {mixture.name!r} is registered twice.")
  _MIXTURES[mixture.name] = mixture
  return mixture


def get_mixture(name: str) -> Mixture:
  """The registered mixture called `name` (its tasks checked against the task registry).

  Raises:
    ValueError: unknown name (the message lists the known ones), or an unknown task.
  """
  if name not in _MIXTURES:
    raise ValueError(f"unknown mixture {name!r}; expected one of {sorted(_MIXTURES)}.")
  mixture = _MIXTURES[name]
  mixture.check_tasks()
  return mixture


def mixture_names() -> list[str]:
  """Every registered mixture's name, sorted."""
  return sorted(_MIXTURES)


register_mixture(proportional_mixture("glue_v002_proportional", GLUE_SIZES))
register_mixture(proportional_mixture("super_glue_v102_proportional", SUPER_GLUE_SIZES))


# ------------------------------------------------------------------------- averages

# Benchmark averages as the paper computed them: each task's metrics are averaged first,
# then the tasks are averaged with equal weight. GLUE counts MNLI once (the mean of its
# matched and mismatched accuracies) and leaves out WNLI; the baseline row of Table 16
# reproduces the paper's 83.28 and 71.36 this way (tests/downstream/test_task_mixtures.py).
GLUE_AVERAGE = {
    "cola": (("glue_cola", "matthews_corrcoef"),),
    "sst2": (("glue_sst2", "accuracy"),),
    "mrpc": (("glue_mrpc", "f1"), ("glue_mrpc", "accuracy")),
    "stsb": (("glue_stsb", "pearson_corrcoef"), ("glue_stsb", "spearman_corrcoef")),
    "qqp": (("glue_qqp", "f1"), ("glue_qqp", "accuracy")),
    "mnli": (("glue_mnli_matched", "accuracy"), ("glue_mnli_mismatched", "accuracy")),
    "qnli": (("glue_qnli", "accuracy"),),
    "rte": (("glue_rte", "accuracy"),),
}
SUPER_GLUE_AVERAGE = {
    "boolq": (("super_glue_boolq", "accuracy"),),
    "cb": (("super_glue_cb", "mean_3class_f1"), ("super_glue_cb", "accuracy")),
    "copa": (("super_glue_copa", "accuracy"),),
    "multirc": (("super_glue_multirc", "f1"), ("super_glue_multirc", "exact_match")),
    "record": (("super_glue_record", "f1"), ("super_glue_record", "em")),
    "rte": (("super_glue_rte", "accuracy"),),
    "wic": (("super_glue_wic", "accuracy"),),
    "wsc": (("super_glue_wsc", "accuracy"),),
}


def benchmark_average(results: Mapping[str, Mapping[str, float]],
                      spec: Mapping[str, Sequence[tuple[str, str]]], name: str) -> float:
  """The mean over `spec`'s tasks of the mean of each task's (task, metric) scores.

  Args:
    results: {task name: {metric name: score}} as Task.compute_metrics returns them.
    spec: {benchmark task: ((task name, metric name), ...)}.
    name: the benchmark's name, for errors.

  Raises:
    ValueError: a needed task or metric is missing (the message lists them).
  """
  missing = [f"{t}/{m}" for parts in spec.values() for t, m in parts
             if m not in results.get(t, {})]
  if missing:
    raise ValueError(f"{name} average: results lack {missing}; evaluate those tasks first.")
  per_task = [sum(results[t][m] for t, m in parts) / len(parts) for parts in spec.values()]
  return sum(per_task) / len(per_task)


def glue_average(results: Mapping[str, Mapping[str, float]]) -> float:
  """The paper's GLUE average (8 tasks: MNLI once, no WNLI)."""
  return benchmark_average(results, GLUE_AVERAGE, "GLUE")


def super_glue_average(results: Mapping[str, Mapping[str, float]]) -> float:
  """The paper's SuperGLUE average (8 tasks, multi-metric tasks averaged first)."""
  return benchmark_average(results, SUPER_GLUE_AVERAGE, "SuperGLUE")
