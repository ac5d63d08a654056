r"""The report's yardstick sections: the paper's contrasts and the controls, with intervals.

`launch.report.write_report` adds them when a study's points have nlu results
(`<root>/<point>/eval/nlu_step_<N>.json`, `python -m lm.evaluate --suite=nlu`); the
statistics live in lm/downstream/contrasts.py and lm/downstream/nlu_controls.py, the
narrative in docs/yardstick.md. Each point's seeds are the point and its seed replicates
(`<name>_seed<k>`).
"""
from __future__ import annotations

import os
from typing import Any, Sequence

from launch.points import Point
from lm.downstream import contrasts
from lm.downstream import nlu_controls


def read_histories(root: str, points: Sequence[Point]
                   ) -> tuple[dict[str, list[dict[int, dict[str, Any]]]], list[str]]:
  """({point: one {step: nlu record} per seed (the point and its replicates)}, the problems
  reading them); points without nlu results are left out."""
  histories: dict[str, list[dict[int, dict[str, Any]]]] = {}
  problems = []
  for p in points:
    try:
      history = nlu_controls.load_nlu_history(os.path.join(root, p.name))
    except ValueError as e:
      problems.append(str(e))
      continue
    if history:
      histories.setdefault(p.replicate_of or p.name, []).append(history)
  return histories, problems


def contrasts_section(root: str, points: Sequence[Point], experiment: str = "") -> list[str]:
  """Markdown: the paper's contrasts on the neutral yardstick (lm.downstream.contrasts), one
  row per contrast and instrument and one pooled over the instruments, each difference with
  its paired-bootstrap interval and verdict beside the paper's numbers. Each point's seeds
  are the point and its replicates; a point's nlu results are its workdir's newest
  `eval/nlu_step_<N>.json`. [] when no point has nlu results."""
  histories, problems = read_histories(root, points)
  runs = {name: [h[max(h)] for h in hs] for name, hs in histories.items()}
  if not runs and not problems:
    return []
  chosen = contrasts.contrasts_of(experiment) if experiment else contrasts.CONTRASTS
  lines = ["## Contrasts: the paper's, with intervals", ""]
  if not chosen:
    return lines + [f"None of the paper's contrasts (C1-C4, docs/yardstick.md) has its arms in "
                    f"this study ({experiment}).", ""]
  lines += ["Each contrast is arm a minus arm b on the neutral yardstick (docs/yardstick.md): "
            "per instrument, the difference of the arms' scores (accuracy minus the same "
            "architecture's random-initialisation accuracy, in percentage points; an arm of "
            "several points is their mean) with a 95 % paired-bootstrap interval over items "
            "and seeds; *pooled* weighs every instrument equally. The verdict is "
            f"\"{contrasts.AGREES}\" only when the interval excludes 0 on the paper's side, "
            f"\"{contrasts.REVERSED}\" when it excludes 0 on the other, \"{contrasts.UNRESOLVED}\" "
            "otherwise. The paper's numbers are each arm's mean over its rows "
            f"({', '.join(contrasts.PAPER_COLUMNS)}; a - b). The *decoder fluency (mini)* "
            "column is not ranked against the paper; these contrasts are how the points meet "
            "the paper.", ""]
  sources = sorted({str(r.get("items_source", "not recorded")) for rs in runs.values()
                    for r in rs})
  if sources:
    lines += [f"Items: {', '.join(sources)} (each result's `items_source`).", ""]
  for problem in problems:
    lines += [f"**Not read:** {problem}", ""]
  rows = []
  for contrast in chosen:
    try:
      rows += contrasts.contrast_table(runs, [contrast])
    except ValueError as e:
      lines += [f"**{contrast.key} cannot be computed:** {e}", ""]
  lines += ["| contrast | instrument | seeds (a / b) | difference | 95 % interval | verdict | "
            "paper's numbers |", "|---|---|---:|---:|---|---|---|"] if rows else []
  for i, row in enumerate(rows):
    c, r, first = row.contrast, row.result, i == 0 or rows[i - 1].contrast != row.contrast
    arms = f"{c.key}: {' + '.join(m.point for m in c.a)} vs {' + '.join(m.point for m in c.b)}"
    lines.append(f"| {arms if first else c.key} | {row.instrument} | {r.seeds_a} / {r.seeds_b} "
                 f"| {r.difference:+.2f} | [{r.low:+.2f}, {r.high:+.2f}] | {row.verdict} | "
                 f"{c.paper_numbers() if first else ''} |")
  notes: dict[str, list[str]] = {}
  for row in rows:
    if row.note and row.contrast.key not in notes.setdefault(row.note, []):
      notes[row.note].append(row.contrast.key)
  lines += [f"\n{', '.join(keys)}: {note}" for note, keys in notes.items()] + [""]
  lines += [f"{c.key} waits for the nlu results of: "
            f"{', '.join(dict.fromkeys(p for p in c.points if not runs.get(p)))}.\n"
            for c in chosen if not contrasts.ready(c, runs)]
  return lines + [f"**Scale.** {contrasts.SCALE_EVIDENCE}", ""]


def _cells(row: nlu_controls.ControlRow | None) -> list[str]:
  if row is None:
    return ["—"] * 3
  r = row.result
  return [f"{r.difference:+.2f}", f"[{r.low:+.2f}, {r.high:+.2f}]", row.reading]


def controls_section(root: str, points: Sequence[Point]) -> list[str]:
  """Markdown: per point, its margin over random initialisation and its growth with
  pre-training steps (slope per doubling, where it was scored at two or more steps), each
  pooled over the instruments with a 95 % bootstrap interval, and how many instruments
  separate on their own. [] when no point has nlu results."""
  histories, _ = read_histories(root, points)   # contrasts_section reports the problems
  if not histories:
    return []
  lines = ["## Controls: random initialisation and training steps", "",
           "Per point, pooled over the instruments (each weighted equally; docs/yardstick.md): "
           "the margin over the same architecture's random initialisation at the newest step, "
           "in percentage points, and, where the point was scored at two or more steps, the "
           "slope of that margin against log2(step), in points per doubling of the steps; "
           "each with a 95 % bootstrap interval over items and seeds. *instruments above* "
           "counts the instruments whose own interval is above random initialisation.", "",
           "| point | seeds | margin | 95 % interval | reading | instruments above | "
           "slope per doubling | 95 % interval | reading |",
           "|---|---:|---:|---|---|---:|---:|---|---|"]
  notes = set()
  for name, hs in histories.items():
    try:
      margins = nlu_controls.random_init_table({name: [h[max(h)] for h in hs]})
      steps = set.intersection(*(set(h) for h in hs))
      slopes = nlu_controls.growth_table({name: hs}) if len(steps) > 1 else []
    except ValueError as e:
      lines.append(f"| {name} | {len(hs)} | {e} |" + " |" * 6)
      continue
    pooled = {r.instrument: r for r in margins}
    headline = pooled.get(contrasts.POOLED) or margins[-1]   # one instrument: its own row
    own = [r for r in margins if r.instrument != contrasts.POOLED]
    above = sum(r.reading == nlu_controls.ABOVE for r in own)
    slope = next((r for r in slopes if r.instrument == contrasts.POOLED),
                 slopes[-1] if slopes else None)
    lines.append(f"| {name} | {len(hs)} | " + " | ".join(_cells(headline)) +
                 f" | {above} of {len(own)} | " + " | ".join(_cells(slope)) + " |")
    if headline.note:
      notes.add(headline.note)
  return lines + [""] + [f"{note}\n" for note in sorted(notes)]
