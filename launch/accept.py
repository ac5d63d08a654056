r"""The yardstick's fine-tuned instrument in a study: its sweep stages, its results in a root,
and the test that lets it into the contrasts.

  python -m launch.sweep experiments/t5_objectives.py --root=R --stages=pretrain,nlu,accept

The accept stages fine-tune each point on the acceptability tasks (lm/downstream/nlu_accept.py)
with `lm.mini_suite --suite=acceptability` twice: from the pre-trained run, in
`<point>/accept`, and from the same model's random initialisation (the point's seed), in
`<point>/accept_random`, the paired baseline every yardstick score subtracts. launch.report
adds them to each run's newest nlu record as `accept/<phenomenon>` instruments only when some
model of the study reads acceptability off its input (`learnt`): an instrument at chance for
every model measures nothing, and would only dilute the pooled contrasts (docs/yardstick.md,
"Short-label classification after fine-tuning").
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from launch.points import Point
from launch.stage import Stage
from lm import workdir as workdir_lib
from lm.downstream import nlu_accept

# lm.mini_suite (the model, flax) is imported where it is used: launch.report reads this
# module's results without it when no run has any.
PRETRAINED_DIR, RANDOM_DIR = "accept", "accept_random"  # under <root>/<point>
SUITE_NAME = "acceptability"  # lm.mini_suite's --suite
ALPHA = 0.05  # the family-wise level of `learnt` (Bonferroni over the models tested)


def stages(workdir: str, marker: Callable[[str], str], *, scale: str, python: str,
           model_arg: str, model_overrides: Sequence[str] = (),
           finetune_extra: Sequence[str] = ()) -> list[Stage]:
  """The point's two acceptability fine-tunings (module docstring).

  Args:
    workdir: the point's pre-trained run.
    marker: stage name -> its marker path.
    scale: the sweep's; "tiny" only (lm.mini_suite fine-tunes on one process).
    python: the interpreter's name in the commands.
    model_arg: configs/finetune.py's model items ("arch=...,family=...,runlocal").
    model_overrides: --config.model.* and --config.train.seed (a replicate's) arguments.
    finetune_extra: more lm.mini_suite arguments (e.g. --steps=1000).

  Raises:
    ValueError: another scale than "tiny".
  """
  if scale != "tiny":
    raise ValueError(f"the accept stage runs at --scale=tiny (lm.mini_suite fine-tunes on one "
                     f"process), not {scale!r}; leave accept out of --stages.")
  from lm import mini_suite  # pylint: disable=g-import-not-at-top
  suite = mini_suite.SUITES[SUITE_NAME]
  config = f"configs/finetune.py:mixture={suite.mixture},{model_arg},{mini_suite.LENGTHS_ARG}"
  common = (f"--suite={SUITE_NAME}", f"--config={config}", *model_overrides, *finetune_extra)
  version = f"accept_items={suite.version},record={mini_suite.RECORD_VERSION}"
  command = (python, "-m", "lm.mini_suite")
  return [
      Stage("accept", (*command, f"--workdir={workdir}",
                       f"--output={workdir}/{PRETRAINED_DIR}", *common),
            marker("accept"), every_process=False, version=version,
            after=(marker("pretrain"),)),
      Stage("accept_random", (*command, f"--output={workdir}/{RANDOM_DIR}", *common,
                              "--from_scratch"),
            marker("accept_random"), every_process=False, version=version)]


def read_run(workdir: str) -> dict[str, dict[str, Any]] | None:
  """The run's `accept/<phenomenon>` instruments (nlu_accept.instruments), or None when
  neither of its acceptability fine-tunings was started (`workdir` local or gs://).

  Raises:
    ValueError: one of the two without results, or results that cannot be read.
  """
  dirs = [workdir_lib.as_path(workdir) / d for d in (PRETRAINED_DIR, RANDOM_DIR)]
  have = [d.is_dir() for d in dirs]
  if not any(have):
    return None
  if not all(have):
    missing = dirs[have.index(False)]
    raise ValueError(f"{workdir}: acceptability results without their pair in {missing} "
                     "(`launch.sweep --stages=accept` runs both).")
  from lm import mini_suite  # pylint: disable=g-import-not-at-top
  suite = mini_suite.SUITES[SUITE_NAME]
  (_, pretrained), (_, random_init) = (mini_suite.predictions(d, suite) for d in dirs)
  return nlu_accept.instruments(pretrained, random_init)


def read_root(root: str, points: Sequence[Point]
              ) -> tuple[dict[str, dict[str, dict[str, Any]]], list[str]]:
  """({run name: its acceptability instruments}, the problems reading them), for the runs
  of `points` (each point and seed replicate its own run) that have results."""
  runs, problems = {}, []
  for p in points:
    try:
      got = read_run(os.path.join(root, p.name))
    except ValueError as e:
      problems.append(str(e))
      continue
    if got is not None:
      runs[p.name] = got
  return runs, problems


@dataclasses.dataclass(frozen=True)
class Learning:
  """One model's acceptability items, pooled over the phenomena and seeds, against chance.

  Attributes:
    model: "<point> (pre-trained)" or "<point> (random initialisation)".
    seeds: the point's runs pooled.
    correct, items: its right answers and items.
    p_value: one-sided exact binomial test of accuracy > chance (scipy.stats.binomtest).
  """
  model: str
  seeds: int
  correct: int
  items: int
  p_value: float

  @property
  def accuracy(self) -> float:
    return 100.0 * self.correct / self.items


def learning(runs: Mapping[str, Sequence[Mapping[str, Mapping[str, Any]]]]) -> list[Learning]:
  """Per point ({point: its runs' acceptability instruments, one per seed}) two Learnings:
  its pre-trained runs and their random initialisations."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  out = []
  for point, rs in runs.items():
    chances = {ins["chance"] for r in rs for ins in r.values()}
    if len(chances) != 1:
      raise ValueError(f"{point}: acceptability instruments of different chance levels "
                       f"{sorted(chances)}.")
    (chance,) = chances
    for label, key in (("pre-trained", "per_item"),
                       ("random initialisation", "per_item_random")):
      x = [float(v) for r in rs for ins in r.values() for v in ins[key]]
      correct = int(round(sum(x)))
      test = stats.binomtest(correct, len(x), chance / 100.0, alternative="greater")
      out.append(Learning(f"{point} ({label})", len(rs), correct, len(x), float(test.pvalue)))
  return out


def threshold(tests: Sequence[Learning], alpha: float = ALPHA) -> float:
  """The p-value below which one model of `tests` is above chance: the family-wise level
  `alpha`, Bonferroni-corrected over the models tested."""
  return alpha / len(tests)


def above_chance(tests: Sequence[Learning], alpha: float = ALPHA) -> list[bool]:
  """Per model, whether it reads acceptability above chance (p below `threshold`)."""
  return [t.p_value < threshold(tests, alpha) for t in tests]


def learnt(tests: Sequence[Learning], alpha: float = ALPHA) -> bool:
  """Whether any model of `tests` is `above_chance`: the instrument measures something."""
  return any(above_chance(tests, alpha))
