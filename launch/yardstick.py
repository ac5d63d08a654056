r"""The report's yardstick sections: the paper's contrasts and the controls, with intervals.

`launch.report.write_report` adds them when a study's points have nlu results
(`<root>/<point>/eval/nlu_step_<N>.json`, `python -m lm.evaluate --suite=nlu`); the
statistics live in lm/downstream/contrasts.py and lm/downstream/nlu_controls.py, the
narrative in docs/yardstick.md. Each point's seeds are the point and its seed replicates
(`<name>_seed<k>`). Acceptability after fine-tuning joins the nlu instruments when some
model learnt it (launch/accept.py, `accept_section`). `sections` reads the root once
(`read`) and writes them all.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

from launch import accept
from launch import equal_tokens
from launch.points import Point
from lm import workdir as workdir_lib
from lm.downstream import contrasts
from lm.downstream import nlu_accept
from lm.downstream import nlu_controls


@dataclasses.dataclass(frozen=True)
class Readings:
  """What the yardstick sections read from a study's root, read once (`read`).

  Attributes:
    root: the directory holding one workdir per point.
    points: the study's points.
    histories: {point: one {step: nlu record} per seed (the point and its replicates)};
      points without nlu results are left out. Each run's acceptability instruments
      (launch/accept.py) join its newest record when some model of the study learnt the
      task (`accept.learnt`).
    problems: what could not be read (nlu or acceptability results), one sentence each.
    accept_tests: each point's `accept.learning` (its seeds pooled); empty when no run has
      acceptability results.
  """
  root: str
  points: tuple[Point, ...]
  histories: dict[str, list[dict[int, dict[str, Any]]]]
  problems: tuple[str, ...]
  accept_tests: tuple[accept.Learning, ...]


def read(root: str, points: Sequence[Point]) -> Readings:
  """Reads the points' nlu histories and acceptability results under `root`, once."""
  runs: dict[str, tuple[str, dict[int, dict[str, Any]]]] = {}
  problems = []
  for p in points:
    try:
      history = nlu_controls.load_nlu_history(os.path.join(root, p.name))
    except ValueError as e:
      problems.append(str(e))
      continue
    if history:
      runs[p.name] = (p.replicate_of or p.name, history)
  by_run, more = accept.read_root(root, points)
  problems += more
  by_point: dict[str, list[dict[str, Any]]] = {}
  for p in points:
    if p.name in by_run:
      by_point.setdefault(p.replicate_of or p.name, []).append(by_run[p.name])
  tests = accept.learning(by_point) if by_point else []
  joined = by_run if tests and accept.learnt(tests) else {}
  histories: dict[str, list[dict[int, dict[str, Any]]]] = {}
  for name, (base, history) in runs.items():
    if name in joined:
      newest = history[max(history)]
      history = {**history, max(history): {
          **newest, "instruments": {**newest["instruments"], **joined[name]}}}
    histories.setdefault(base, []).append(history)
  return Readings(root, tuple(points), histories, tuple(problems), tuple(tests))


def sections(root: str, points: Sequence[Point], experiment: str = "") -> list[str]:
  """Markdown: the report's yardstick sections (contrasts, controls, acceptability, equal
  predicted tokens), from one `read` of the root; [] when there is nothing to show."""
  r = read(root, points)
  return (contrasts_section(r, experiment) + controls_section(r, experiment)
          + accept_section(r) + equal_tokens_section(r))


def accept_section(readings: Readings) -> list[str]:
  """Markdown: whether the study's models read acceptability after fine-tuning (each point's
  pre-trained runs and their random initialisations against chance), and so whether its
  instruments are in the contrasts and controls. [] when no run has acceptability results."""
  tests = readings.accept_tests   # contrasts_section reports the problems
  if not tests:
    return []
  lines = ["## Acceptability after fine-tuning", "",
           "Each point fine-tuned on the five acceptability tasks from its pre-trained run and "
           "from its random initialisation (`launch.sweep --stages=accept`; docs/yardstick.md), "
           "its items pooled over the phenomena and seeds and tested against chance (one-sided "
           f"exact binomial test, Bonferroni over the {len(tests)} models: p below "
           f"{accept.threshold(tests):.2g}). Its `{nlu_accept.INSTRUMENT}<phenomenon>` "
           "instruments join the contrasts and controls only when some model is above "
           "chance.", "",
           "| model | seeds | items | accuracy | p | above chance |",
           "|---|---:|---:|---:|---:|---|"]
  lines += [f"| {t.model} | {t.seeds} | {t.items:,} | {t.accuracy:.2f} | {t.p_value:.2g} | "
            f"{'yes' if above else 'no'} |"
            for t, above in zip(tests, accept.above_chance(tests))]
  if accept.learnt(tests):
    return lines + ["", "**In the contrasts:** some model reads acceptability off its input "
                    "here, so the contrasts and controls above include its instruments.", ""]
  return lines + ["", "**Left out of the contrasts:** no model reads acceptability above "
                  "chance here (fine-tuned from pre-training or from random initialisation), "
                  "so the instrument measures nothing at this scale; the contrasts use the nlu "
                  "instruments alone.", ""]


def contrasts_section(readings: Readings, experiment: str = "") -> list[str]:
  """Markdown: the paper's contrasts on the neutral yardstick (lm.downstream.contrasts), one
  row per contrast and instrument and one pooled over the instruments, each difference with
  its paired-bootstrap interval and verdict beside the paper's numbers. Each point's seeds
  are the point and its replicates; a point's nlu results are its workdir's newest
  `eval/nlu_step_<N>.json`. [] when no point has nlu results."""
  histories, problems = readings.histories, readings.problems
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


def controls_section(readings: Readings, experiment: str = "") -> list[str]:
  """Markdown: per point, its margin over random initialisation and its growth with
  pre-training steps (slope per doubling, where it was scored at two or more steps), each
  pooled over the instruments with a 95 % bootstrap interval, and how many instruments
  separate on their own; then the study's contrasts compared as slopes
  (`growth_contrasts_lines`). [] when no point has nlu results."""
  histories = readings.histories
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
  lines += [""] + [f"{note}\n" for note in sorted(notes)]
  return lines + growth_contrasts_lines(histories, experiment)


def growth_contrasts_lines(histories, experiment: str = "") -> list[str]:
  """Markdown: each of the study's contrasts whose points were all scored at two or more
  common steps, as arm a's slope minus arm b's (`nlu_controls.growth_contrast_table`);
  [] when none was."""
  chosen = contrasts.contrasts_of(experiment) if experiment else contrasts.CONTRASTS
  try:
    rows = nlu_controls.growth_contrast_table(histories, chosen)
  except ValueError as e:
    return [f"**The contrasts' growth cannot be computed:** {e}", ""]
  if not rows:
    return []
  lines = ["**The contrasts as slopes.** Arm a's slope minus arm b's, in points per doubling "
           "of the steps, pooled over the instruments, with a 95 % paired-bootstrap interval "
           "over items and seeds. \"" + nlu_controls.TOWARD + "\": the gap moves the paper's "
           "way as training goes on (a reversed contrast closing, an agreeing one widening); "
           "what tiny scale can say about the crossover the scale evidence predicts.", "",
           "| contrast | steps | seeds (a / b) | slope difference | 95 % interval | reading |",
           "|---|---|---:|---:|---|---|"]
  for row in rows:
    c, r = row.contrast, row.result
    arms = f"{c.key}: {' + '.join(m.point for m in c.a)} vs {' + '.join(m.point for m in c.b)}"
    lines.append(f"| {arms} | {' / '.join(f'{s:,}' for s in row.steps)} | {r.seeds_a} / "
                 f"{r.seeds_b} | {r.difference:+.2f} | [{r.low:+.2f}, {r.high:+.2f}] | "
                 f"{row.reading} |")
  return lines + [""] + sorted({f"{row.note}\n" for row in rows if row.note})


# How far a control's predicted target tokens may be from its reference's (a share of them)
# and still count as equal: the tokens per step vary by a fraction of a percent.
TOKENS_TOLERANCE = 0.02


def equal_tokens_reading(at_steps: str, at_tokens: str, control: equal_tokens.Control,
                         fewer_steps: bool = False) -> str:
  """The control's verdict sentence from the two comparisons' verdicts (`contrasts.verdict`
  of the equal-steps point and of the control, each minus the reference); `fewer_steps`
  when the control stops before the equal-steps point (its objective predicts more target
  tokens a step than the reference's: BERT- and MASS-style against prefix LM)."""
  c = control
  if at_tokens == contrasts.REVERSED:
    return (f"At equal predicted tokens {c.point} still scores below {c.reference}: the gap is "
            "not sample efficiency alone (the number of supervised target tokens does not "
            "explain it); what remains is how the yardstick reads the two objectives at this "
            "scale, an evaluation bias or a real difference, which this control does not tell "
            "apart.")
  ahead = (", and ahead at equal predicted tokens, as in the paper"
           if at_tokens == contrasts.AGREES else "")
  if at_steps == contrasts.REVERSED and fewer_steps:
    return (f"{c.equal_steps} trails {c.reference} at equal steps, where it has predicted more "
            f"target tokens, but not at equal predicted tokens, which it reaches earlier"
            f"{ahead}: its later steps lower what the yardstick reads; a shortage of supervised "
            "target tokens does not explain the gap.")
  if at_steps == contrasts.REVERSED:
    return (f"{c.equal_steps} trails {c.reference} at equal steps but not at equal predicted "
            f"tokens{ahead}: the gap at equal steps is sample efficiency (denoising is "
            "supervised on fewer target tokens a step), not the yardstick's bias against the "
            "objective.")
  if at_tokens == contrasts.AGREES:
    return f"At equal predicted tokens {c.point} is ahead of {c.reference}, as in the paper."
  if at_steps == contrasts.AGREES and fewer_steps:
    return (f"{c.equal_steps} is ahead of {c.reference} at equal steps but not at equal "
            f"predicted tokens: its lead at equal steps is the extra target tokens it is "
            f"supervised on a step (at equal predicted tokens: {at_tokens}).")
  return (f"At equal predicted tokens the difference from {c.reference} is "
          f"{contrasts.UNRESOLVED} (at equal steps: {at_steps}).")


def _token_totals(root: str, control: equal_tokens.Control, runs) -> tuple[dict, list[str]]:
  """({point: (step, target tokens) at its scored step}, the lines on the tokens' equality)."""
  tokens, lines = {}, []
  for p in (control.reference, control.equal_steps, control.point):
    try:
      tokens[p] = equal_tokens.run_tokens(os.path.join(root, p),
                                          runs[p][0].get("step") if runs[p] else None)
    except ValueError as e:
      lines.append(f"**Target tokens of {p} not read:** {e}\n")
  ref, own, rate = (tokens.get(p) for p in (control.reference, control.point,
                                            control.equal_steps))
  if ref and own and abs(own[1] / ref[1] - 1) > TOKENS_TOLERANCE:
    needed = (f"; {equal_tokens.equal_token_steps(ref[1], rate[1] / rate[0])} steps predict "
              "as many" if rate else "")
    lines.append(f"**Not equal:** {control.point} predicted {own[1]:,.0f} target tokens by "
                 f"step {own[0]}, {control.reference} {ref[1]:,.0f} "
                 f"({own[1] / ref[1]:.2f}x){needed} (`python -m launch.equal_tokens "
                 f"--root={root}`); the verdict below is on unequal tokens.\n")
  return tokens, lines


def _growth(result: contrasts.BootstrapResult) -> str:
  """The reading of the control minus its equal-steps point: the same objective trained on."""
  if not result.excludes_zero:
    return nlu_controls.FLAT
  return nlu_controls.RISES if result.low > 0 else nlu_controls.FALLS


def _control_lines(root: str, control: equal_tokens.Control, histories
                   ) -> tuple[list[str], str | None]:
  """(the control's part of the section, its row of the summary table or None when it has
  no comparisons)."""
  c = control
  runs = {p: [h[max(h)] for h in histories.get(p, [])]
          for p in (c.reference, c.equal_steps, c.point)}
  if not (runs[c.equal_steps] or runs[c.point]):   # the reference is every control's
    return [], None
  if not (runs[c.point] or workdir_lib.as_path(os.path.join(root, c.point)).exists()):
    return [], None   # the control is not part of this root (a sweep run with --only)
  lines = [f"### {c.point}: {c.equal_steps} trained to as many predicted target tokens as "
           f"{c.reference}", ""]
  tokens, problems = _token_totals(root, c, runs)
  lines += problems
  waiting = [p for p, rs in runs.items() if not rs]
  if waiting:
    return lines + [f"Waits for the nlu results of: {', '.join(waiting)} (`python -m "
                    "lm.evaluate --workdir=<root>/<point> --suite=nlu`).", ""], None
  lines += ["| point | trained | step | target tokens | margin | 95 % interval | reading |",
            "|---|---|---:|---:|---:|---|---|"]
  roles = {c.reference: "reference", c.equal_steps: "equal steps",
           c.point: "equal predicted tokens"}
  step = {p: runs[p][0].get("step", "?") for p in runs}
  for p, role in roles.items():
    rows = nlu_controls.random_init_table({p: runs[p]})
    row = next((r for r in rows if r.instrument == contrasts.POOLED), rows[-1])
    seen = tokens.get(p)
    lines.append(f"| {p} | {role} | {step[p]} | "
                 f"{f'{seen[1]:,.0f}' if seen else '—'} | " + " | ".join(_cells(row)) + " |")
  fewer_steps = runs[c.point][0].get("step", 0) < runs[c.equal_steps][0].get("step", 0)
  later, earlier = (c.equal_steps, c.point) if fewer_steps else (c.point, c.equal_steps)
  pairs = ((c.equal_steps, c.reference, "equal steps"),
           (c.point, c.reference, "equal predicted tokens"),
           (later, earlier, "what the extra steps add"))
  lines += ["", "| comparison | seeds (a / b) | difference | 95 % interval | verdict |",
            "|---|---:|---:|---|---|"]
  verdicts, cells, notes = [], [], set()
  for a, b, what in pairs:
    try:
      r = nlu_controls.compare_points(runs[a], runs[b], names=(a, b))
    except ValueError as e:
      return lines[:-2] + [f"**Cannot be compared:** {e}", ""], None
    said = contrasts.verdict(r, c.paper_sign) if b == c.reference else _growth(r)
    verdicts.append(said)
    interval = f"[{r.low:+.2f}, {r.high:+.2f}]"
    cells.append(f"{r.difference:+.2f} {interval} {said}")
    notes.add(contrasts.seed_count_note(r))
    lines.append(f"| {a} - {b} ({what}) | {r.seeds_a} / {r.seeds_b} | {r.difference:+.2f} | "
                 f"{interval} | {said} |")
  lines += [""] + [f"{n}\n" for n in sorted(notes) if n]
  reading = equal_tokens_reading(verdicts[0], verdicts[1], c, fewer_steps)
  steps = f"{step[c.equal_steps]} / {step[c.point]}"
  return (lines + [f"**Reading.** {reading}", ""],
          f"| {c.equal_steps} | {steps} | " + " | ".join(cells[:2]) + " |")


def equal_tokens_section(readings: Readings) -> list[str]:
  """Markdown: the equal-predicted-tokens control (launch/equal_tokens.py): per control, its
  points' target tokens and pooled margins, the control and the equal-steps point each
  against the reference with a paired-bootstrap interval and verdict, and the reading. []
  when the study has no control or none of its points has nlu results."""
  names = {p.name for p in readings.points}
  controls = [c for c in equal_tokens.CONTROLS
              if {c.point, c.equal_steps, c.reference} <= names]
  parts = [_control_lines(readings.root, c, readings.histories) for c in controls]
  body = [line for lines, _ in parts for line in lines]
  if not body:
    return []
  summary = [row for _, row in parts if row]
  if len(summary) > 1:
    body = ["| denoising point | steps (equal steps / equal tokens) | minus its reference at "
            "equal steps | at equal predicted tokens |", "|---|---|---|---|", *summary, ""
            ] + body
  return ["## Equal predicted tokens", "",
          "Prefix LM predicts about half of every sequence, replace-spans and drop-tokens only "
          "the corrupted tokens (and sentinels), BERT- and MASS-style the whole sequence, so at "
          "equal steps a denoising point has been supervised on fewer or more target tokens. "
          "Each control trains a denoising point to as many predicted target tokens as the "
          "reference, on or stopping earlier (`target_tokens` in each point's "
          "own metrics.jsonl, not its seed replicates', up to the scored step; "
          "docs/yardstick.md). Margins are pooled over "
          "the instruments, in percentage points over random initialisation; each comparison "
          "is a paired bootstrap over items and seeds, at the points' own steps.", ""] + body
