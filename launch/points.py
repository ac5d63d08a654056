"""The points of a study: an experiment file's `sweep(add)` -> `Point`s (name, config, overrides).

  points = collect("experiments/t5_span_length.py", runlocal=True)
  points = seed_replicates(points, 3)      # + <baseline>_seed1, _seed2
  points = seed_replicates(points, 3, every_point=True)   # + <name>_seed1, _seed2 of each

What runs them is elsewhere: launch/local.py (this machine), launch/sweep.py (every backend's
stages); launch/report.py reads their workdirs. Both import this module, not each other.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pathlib
from typing import Any

from experiments.common import COLUMNS  # the paper tables' score columns


def format_value(value: Any) -> str:
  if isinstance(value, str):
    return value
  return repr(value)  # bools as True/False, tuples as Python literals (config_flags parses)


_ADD_KEYS = ("name", "config", "runlocal_config", "overrides", "runlocal_overrides", "reference",
             "baseline")


@dataclasses.dataclass(frozen=True)
class Point:
  """One run of a sweep.

  Attributes:
    name: unique within the experiment; the workdir is `<root>/<name>`.
    config: lm.main's --config value, `configs/t5.py:<arg>`.
    overrides: {"dotted.field": value} -> `--config.dotted.field=value`.
    reference: the paper's row, {column: score} for the columns of COLUMNS the paper
      gives (in COLUMNS order; {} for a point the paper has no row for).
    baseline: the paper's ★ row.
    replicate_of: for a seed replicate (`seed_replicates`), the point it repeats.
  """
  name: str
  config: str
  overrides: dict[str, Any]
  reference: dict[str, float] = dataclasses.field(default_factory=dict)
  baseline: bool = False
  replicate_of: str = ""

  def override_args(self) -> list[str]:
    """The overrides as lm.main flags, `--config.dotted.field=value`, in order."""
    return [f"--config.{k}={format_value(v)}" for k, v in self.overrides.items()]


# Files a sweep writes in --root itself (launch.report's report and plot, launch.local's
# record of its runs): a point may not be named like them.
REPORT_FILES = ("report.md", "eval_loss.png")
ROOT_FILES = REPORT_FILES + ("launch.jsonl",)


# The fields a seed replicate changes: the initialisation / dropout seed and the data
# pipeline's (shuffling and the objective's noise).
SEED_FIELDS = ("train.seed", "data.seed")


def seed_replicates(points: list[Point], seeds: int, *, every_point: bool = False
                    ) -> list[Point]:
  """`points` followed by `seeds - 1` replicates of the baseline point (the ★ row; the first
  point when none is marked), or of every point with `every_point`: `<name>_seed<k>` with
  SEED_FIELDS = k for k = 1 .. seeds - 1, grouped by point in `points`' order.

  Replicates carry no paper reference (so the rankings leave them out); the report shows
  the spread of every score over each replicated point and its replicates: seed noise,
  against which the differences between points are read. The yardstick's contrasts take a
  point's replicates as its seeds.
  """
  if seeds < 1:
    raise ValueError(f"--seeds must be >= 1, got {seeds}.")
  if seeds == 1 or not points:
    return list(points)
  bases = points if every_point else [next((p for p in points if p.baseline), points[0])]
  return replicate(points, {b.name: seeds - 1 for b in bases})


def replicate(points: list[Point], counts: dict[str, int]) -> list[Point]:
  """`points` followed by `counts[name]` seed replicates of each point named in `counts`
  (`<name>_seed1` .. `<name>_seed<count>`, in `points`' order).

  Raises:
    ValueError: a name in `counts` is not a point, or a replicate's name is a point's.
  """
  by_name = {p.name: p for p in points}
  unknown = sorted(set(counts) - set(by_name))
  if unknown:
    raise ValueError(f"cannot replicate unknown point(s) {unknown}; expected one of "
                     f"{list(by_name)}")
  out = list(points)
  for base in points:
    for k in range(1, counts.get(base.name, 0) + 1):
      name = f"{base.name}_seed{k}"
      if name in by_name:
        raise ValueError(f"seed replicate {name!r} clashes with a point of the experiment.")
      out.append(dataclasses.replace(
          base, name=name, overrides={**base.overrides, **{f: k for f in SEED_FIELDS}},
          reference={}, baseline=False, replicate_of=base.name))
  return out


def point_name_problem(name: Any) -> str | None:
  """What is wrong with a point name, or None: it must be one plain path component.

  The workdir is `<root>/<name>`, so `.`, `..`, names with a separator, absolute paths
  and the launcher's own files in the root are refused (they would escape or clobber
  --root).
  """
  if not name or not isinstance(name, str) or not all(c.isalnum() or c in "_-." for c in name):
    return ("must be a non-empty [A-Za-z0-9_.-] string: it names the workdir <root>/<name> "
            "(no '/', no absolute path).")
  if name in (".", "..") or set(name) == {"."}:
    return "is not a plain folder name: <root>/<name> would be --root itself or escape it."
  if name in ROOT_FILES:
    return f"is a file the launcher writes in --root ({', '.join(ROOT_FILES)}); rename it."
  return None


def _runlocal_arg(config: str) -> str:
  path, sep, arg = config.partition(":")
  items = [a for a in arg.split(",") if a.strip()] if sep else []
  if not any(a.strip().partition("=")[0] == "runlocal" for a in items):
    items.append("runlocal")
  return f"{path}:{','.join(items)}"


def collect(experiment: str, runlocal: bool = False) -> list[Point]:
  """Imports an experiment file and returns its points, in `add` order.

  Args:
    experiment: path of a Python file defining `sweep(add)` (or a module name such as
      `experiments.t5_span_length`).
    runlocal: append `runlocal` to every config arg (a point's `runlocal_config` replaces
      its `config` then) and apply `runlocal_overrides`.

  Returns:
    The points.

  Raises:
    ValueError: no `sweep`, a duplicate or unsafe name, an unknown `add` keyword, a
      config without a file, or a reference with a column outside COLUMNS (a reference
      may leave columns out, or be left out: the report shows "—").
  """
  module = _import(experiment)
  if not callable(getattr(module, "sweep", None)):
    raise ValueError(f"{experiment} defines no sweep(add) function.")
  points: list[Point] = []

  def add(**kwargs) -> None:
    unknown = sorted(set(kwargs) - set(_ADD_KEYS))
    if unknown:
      raise ValueError(f"{experiment}: unknown add() keyword(s) {unknown}; "
                       f"expected one of {list(_ADD_KEYS)}.")
    name, config = kwargs.get("name"), kwargs.get("config")
    problem = point_name_problem(name)
    if problem:
      raise ValueError(f"{experiment}: point name {name!r} {problem}")
    if any(p.name == name for p in points):
      raise ValueError(f"{experiment}: point name {name!r} is used twice.")
    if not isinstance(config, str) or not config.partition(":")[0].endswith(".py"):
      raise ValueError(f"{experiment}: point {name!r}: config {config!r} should look like "
                       "'configs/t5.py:<arg>'.")
    reference = dict(kwargs.get("reference") or {})
    stray = sorted(set(reference) - set(COLUMNS))
    if stray:
      raise ValueError(f"{experiment}: point {name!r}: unknown reference column(s) {stray}; "
                       f"expected one of {list(COLUMNS)}.")
    overrides = dict(kwargs.get("overrides") or {})
    if runlocal:
      config = _runlocal_arg(kwargs.get("runlocal_config") or config)
      overrides.update(kwargs.get("runlocal_overrides") or {})
    points.append(Point(name=name, config=config, overrides=overrides,
                        reference={c: float(reference[c]) for c in COLUMNS
                                   if c in reference},
                        baseline=bool(kwargs.get("baseline", False))))

  module.sweep(add)
  if not points:
    raise ValueError(f"{experiment}: sweep(add) added no points.")
  return points


def _import(experiment: str):
  if experiment.endswith(".py"):
    path = pathlib.Path(experiment)
    if not path.is_file():
      raise ValueError(f"experiment file {experiment} does not exist.")
    spec = importlib.util.spec_from_file_location(f"_experiment_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
  return importlib.import_module(experiment)
