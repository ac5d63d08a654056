r"""The yardstick's controls with intervals (issue #31 item 4): margins over random
initialisation, and how the scores grow with pre-training steps.

  rows = random_init_table({"bert": [contrasts.load_nlu_results("runs/x/bert")]})
  rows = growth_table({"bert": [load_nlu_history("runs/x/bert")]})
  rows = growth_contrast_table({"bert": [...], "prefix_lm": [...]}, contrasts.CONTRASTS)

What does not live here: the paired bootstrap and the paper's contrasts
(lm/downstream/contrasts.py, which this builds on). Pure NumPy. The narrative:
docs/yardstick.md.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping, Sequence

import numpy as np

from lm.downstream.contrasts import (MIN_SEEDS, POOLED, RESULT_FILE, BootstrapResult,
                                     Contrast, each_and_pooled, item_scores,
                                     read_nlu_record, seed_count_note)

ABOVE = "above random initialisation"
BELOW = "below random initialisation"
NOT_SEPARATED = "not separated from random initialisation"
RISES = "rises with training"
FALLS = "falls with training"
FLAT = "no resolvable trend"
TOWARD = "moves toward the paper's sign"
AWAY = "moves away from the paper's sign"


@dataclasses.dataclass(frozen=True)
class ControlRow:
  """One point on one instrument (or POOLED): a quantity with its interval and reading.

  `result.difference` is the point's margin over random initialisation in percentage points
  (`random_init_table`) or its slope in points per doubling of the steps (`growth_table`).
  """
  point: str
  instrument: str
  result: BootstrapResult
  reading: str
  note: str


def _reading(result: BootstrapResult, up: str, down: str, neither: str) -> str:
  return neither if not result.excludes_zero else up if result.low > 0 else down


def _check_same_items(point: str, records: Sequence[Mapping[str, Any]]) -> None:
  if len({json.dumps(r.get("items_digest"), sort_keys=True) for r in records}) > 1:
    raise ValueError(f"{point}: its records were scored on different items (items_digest "
                     "differs); rescore them with the same item set.")


def _control_rows(point: str, strata: list[tuple[str, np.ndarray]], readings, **kwargs):
  """Rows of one point: each instrument's float[S, N] against 0, then POOLED."""
  each, pooled = each_and_pooled([(x, np.zeros((1, x.shape[1]))) for _, x in strata], **kwargs)
  rows = []
  for name, result in zip([n for n, _ in strata] + [POOLED] * (len(strata) > 1),
                          each + [pooled]):
    note = "" if result.seeds_a >= MIN_SEEDS else seed_count_note(
        dataclasses.replace(result, seeds_b=result.seeds_a))
    rows.append(ControlRow(point, name, result, _reading(result, *readings), note))
  return rows


def random_init_table(points: Mapping[str, Sequence[Mapping[str, Any]]], *,
                      num_resamples: int = 10_000, confidence: float = 0.95,
                      seed: int = 0) -> list[ControlRow]:
  """Does each point beat random initialisation? Per point, per instrument and pooled.

  Args:
    points: {point name: its nlu records, one per seed}; points without records are left out.

  Returns:
    ControlRows: the margin over random initialisation (`item_scores`' mean, percentage
    points) with a bootstrap interval over items and seeds, read as ABOVE, BELOW or
    NOT_SEPARATED. The random-initialisation accuracy is the record's scalar: its own
    sampling noise is not in the interval.
  """
  rows = []
  for point, records in points.items():
    if not records:
      continue
    _check_same_items(point, records)
    names = sorted(set.intersection(*(set(r["instruments"]) for r in records)))
    strata = [(name, np.stack([item_scores(r["instruments"][name], f"{point} {name}")
                               for r in records])) for name in names]
    rows += _control_rows(point, strata, (ABOVE, BELOW, NOT_SEPARATED),
                          num_resamples=num_resamples, confidence=confidence, seed=seed)
  return rows


def item_slopes(scores_by_step: Mapping[int, np.ndarray]) -> np.ndarray:
  """float64[S, N]: each seed's and item's least-squares slope of score against log2(step).

  The slope of the mean over items and seeds is the mean of these (a slope is linear in the
  scores), so `paired_bootstrap` on them resamples items and seeds jointly across the steps:
  one seed is one run, scored at every step on the same items.

  Args:
    scores_by_step: {step: float[S, N]}, at least two steps, the same S and N at each.
  """
  steps = sorted(scores_by_step)
  if len(steps) < 2 or min(steps) < 1:
    raise ValueError(f"a slope needs scores at two or more positive steps, got {steps}.")
  x = np.log2(np.asarray(steps, dtype=np.float64))
  weights = (x - x.mean()) / np.sum((x - x.mean()) ** 2)
  stacked = np.stack([np.asarray(scores_by_step[s], dtype=np.float64) for s in steps])
  return np.einsum("k,ksn->sn", weights, stacked)


def load_nlu_history(workdir: str) -> dict[int, dict[str, Any]]:
  """{step: record} of every `<workdir>/eval/nlu_step_<N>.json` ({} when there is none).

  Raises:
    ValueError: a file is not an nlu record (`contrasts.read_nlu_record`).
  """
  folder = os.path.join(workdir, "eval")
  if not os.path.isdir(folder):
    return {}
  steps = sorted(int(m.group(1)) for m in map(RESULT_FILE.match, os.listdir(folder)) if m)
  return {s: read_nlu_record(os.path.join(folder, f"nlu_step_{s}.json")) for s in steps}


def _common_steps(histories: Sequence[Mapping[int, Any]]) -> list[int]:
  """The steps every one of `histories` ({step: nlu record}, one per seed) has, sorted."""
  return sorted(set.intersection(*(set(h) for h in histories)))


def _common_instruments(label: str, histories: Sequence[Mapping[int, Mapping[str, Any]]],
                        steps: Sequence[int]) -> list[str]:
  """The instruments every record at `steps` has, sorted, once the records are checked to
  be on the same items (ValueError naming `label` otherwise)."""
  records = [h[s] for h in histories for s in steps]
  _check_same_items(label, records)
  return sorted(set.intersection(*(set(r["instruments"]) for r in records)))


def _slopes(point: str, histories: Sequence[Mapping[int, Mapping[str, Any]]],
            steps: Sequence[int], name: str) -> np.ndarray:
  """float64[S, N]: `item_slopes` of instrument `name` over `steps`, one row per seed."""
  return item_slopes({s: np.stack([item_scores(h[s]["instruments"][name],
                                               f"{point} step {s} {name}")
                                   for h in histories]) for s in steps})


def growth_table(points: Mapping[str, Sequence[Mapping[int, Mapping[str, Any]]]], *,
                 num_resamples: int = 10_000, confidence: float = 0.95,
                 seed: int = 0) -> list[ControlRow]:
  """Does each point's score rise with pre-training steps? Per point, per instrument, pooled.

  Args:
    points: {point name: one {step: nlu record} per seed (load_nlu_history)}. The steps
      every seed has are used (at least two, e.g. 250 / 500 / 1,000 / 2,000).

  Returns:
    ControlRows: the slope of the margin over random initialisation against log2(step), in
    percentage points per doubling of the steps, with a bootstrap interval over items and
    seeds (`item_slopes`), read as RISES, FALLS or FLAT. Two points' slopes compare with
    `paired_bootstrap(item_slopes(a), item_slopes(b))`.
  """
  rows = []
  for point, histories in points.items():
    if not histories:
      continue
    steps = _common_steps(histories)
    if len(steps) < 2:
      raise ValueError(f"{point}: scores at {steps or 'no'} step(s) common to its seeds; a "
                       "slope needs two or more (score checkpoints at several steps).")
    strata = [(name, _slopes(point, histories, steps, name))
              for name in _common_instruments(point, histories, steps)]
    rows += _control_rows(point, strata, (RISES, FALLS, FLAT), num_resamples=num_resamples,
                          confidence=confidence, seed=seed)
  return rows


def compare_points(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], *,
                   names: tuple[str, str] = ("a", "b"), num_resamples: int = 10_000,
                   confidence: float = 0.95, seed: int = 0) -> BootstrapResult:
  """Point a minus point b, pooled over their common instruments, at any steps.

  Unlike a paper contrast (`contrasts.contrast_table`), the records may come from different
  pre-training steps: the equal-predicted-tokens control compares a point trained longer
  with one trained for the study's steps (launch/equal_tokens.py).

  Args:
    a, b: each point's nlu records, one per seed, all scored on the same items.
    names: the points' names, for the errors.

  Returns:
    The mean over instruments of the difference of item scores (`item_scores`, percentage
    points over random initialisation), with the paired-bootstrap interval over items and
    each point's seeds (`each_and_pooled`'s pooled result; one instrument: its own).

  Raises:
    ValueError: no records, different items, or no instrument in common.
  """
  if not a or not b:
    raise ValueError(f"{names[0] if not a else names[1]}: no nlu records to compare.")
  _check_same_items(" and ".join(names), list(a) + list(b))
  common = sorted(set.intersection(*(set(r["instruments"]) for r in list(a) + list(b))))
  if not common:
    raise ValueError(f"{' and '.join(names)}: no instrument in common; score both with the "
                     "same suite.")
  strata = [tuple(np.stack([item_scores(r["instruments"][name], f"{point} {name}")
                            for r in records]) for point, records in zip(names, (a, b)))
            for name in common]
  each, pooled = each_and_pooled(strata, num_resamples=num_resamples, confidence=confidence,
                                 seed=seed)
  return pooled if len(common) > 1 else each[0]


@dataclasses.dataclass(frozen=True)
class GrowthContrastRow:
  """One paper contrast's growth: arm a's slope minus arm b's, pooled over the instruments."""
  contrast: Contrast
  steps: tuple[int, ...]
  result: BootstrapResult
  reading: str
  note: str


def growth_contrast_table(points: Mapping[str, Sequence[Mapping[int, Mapping[str, Any]]]],
                          contrasts: Sequence[Contrast], *, num_resamples: int = 10_000,
                          confidence: float = 0.95, seed: int = 0) -> list[GrowthContrastRow]:
  """Do a contrast's arms grow apart or together with pre-training steps?

  Args:
    points: {point name: one {step: nlu record} per seed (load_nlu_history)}.
    contrasts: the paper's contrasts; one whose points lack results, or lack two steps
      every seed of every point has, is left out.

  Returns:
    Per contrast, arm a's slope minus arm b's (points per doubling of the steps; each item's
    slope, `item_slopes`, as the paired bootstrap's item score; an arm of several points is
    their mean; pooled over the common instruments, each weighed equally), read as TOWARD
    when the interval excludes 0 on the paper's side (the gap moves the paper's way as
    training goes on: a reversed contrast closing, an agreeing one widening), AWAY on the
    other side, FLAT otherwise.

  Raises:
    ValueError: a contrast's records were scored on different items.
  """
  rows = []
  for c in contrasts:
    if not all(points.get(p) for p in c.points):
      continue
    seeds = [h for p in c.points for h in points[p]]
    steps = _common_steps(seeds)
    if len(steps) < 2:
      continue
    names = _common_instruments(c.key, seeds, steps)
    strata = [tuple([_slopes(m.point, points[m.point], steps, name) for m in arm]
                    for arm in (c.a, c.b)) for name in names]
    each, pooled = each_and_pooled(strata, num_resamples=num_resamples,
                                   confidence=confidence, seed=seed)
    result = pooled if len(names) > 1 else each[0]
    toward, away = (TOWARD, AWAY) if c.paper_sign > 0 else (AWAY, TOWARD)
    rows.append(GrowthContrastRow(c, tuple(steps), result,
                                  _reading(result, toward, away, FLAT),
                                  seed_count_note(result)))
  return rows
