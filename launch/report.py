r"""Reports a sweep: each point's final losses beside the paper's scores, and an eval-loss plot.

  python -m launch.local experiments/t5_corruption_rate.py --root=runs/table6 --report_only

`write_report` reads `<root>/<name>/metrics.jsonl` and `config.json` of every point (and
`<root>/launch.jsonl`, the launcher's record of each run) and writes `<root>/report.md`
(one row per point: status, last step, final train / eval loss, our downstream columns,
then the paper's scores; a point without a value shows "—") and `<root>/eval_loss.png` (eval
loss against step, one line per point). It only reads run directories, so it can rebuild
the report of a sweep that is still running or was run elsewhere. Running the sweep is
launch/local.py's job.

At tiny scale our column is the mini suite's, reported as decoder fluency with its
blank-input control (`mini.blank_inputs`, `mini.surviving_share`) and no Kendall's tau
against the paper (WHY_NO_TAU; docs/downstream_mini.md); paper-scale columns get a tau. The
paper's contrasts, the controls and the equal-predicted-tokens control, with intervals, come
from the points' nlu results (launch/yardstick.py; docs/yardstick.md).
"""
from __future__ import annotations

import datetime
import json
import math
import os
import shlex
from typing import Any, Sequence

from experiments.common import COLUMNS  # the paper tables' score columns
from launch import yardstick
from launch.points import Point, collect, replicate, seed_replicates


def read_metrics(workdir: str) -> list[dict[str, Any]]:
  """The records of `<workdir>/metrics.jsonl` ([] if absent); a torn last line is skipped."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  records = []
  with open(path) as f:
    for line in f:
      line = line.strip()
      if not line:
        continue
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError:
        continue  # a run killed mid-write
  return records


def _series(records: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
  """(step, value) sorted by step; a resumed run's repeated steps keep the newest value."""
  by_step = {}
  for r in records:
    if key in r and "step" in r and r[key] is not None and math.isfinite(r[key]):
      by_step[int(r["step"])] = float(r[key])
  return sorted(by_step.items())


def _num_steps(workdir: str) -> int | None:
  try:
    with open(os.path.join(workdir, "config.json")) as f:
      return int(json.load(f)["train"]["num_steps"])
  except (OSError, KeyError, TypeError, ValueError):
    return None


def summarize(workdir: str) -> dict[str, Any]:
  """Final train / eval loss, last step and status of one run directory.

  Returns:
    {status: "not started" | "no metrics" | "finished" | "partial (<step>/<num_steps>)",
     step, num_steps, train_loss, eval_loss (None where nothing is logged),
     eval_series: [(step, eval_loss)] sorted by step}.
  """
  records = read_metrics(workdir)
  train, evals = _series(records, "loss"), _series(records, "eval_loss")
  last_step = max([s for s, _ in train + evals], default=None)
  total = _num_steps(workdir)
  if last_step is None:
    status = "not started" if not os.path.isdir(workdir) else "no metrics"
  elif total is not None and last_step >= total:
    status = "finished"
  else:
    status = f"partial ({last_step}/{total if total is not None else '?'})"
  return dict(status=status, step=last_step, num_steps=total,
              train_loss=train[-1][1] if train else None,
              eval_loss=evals[-1][1] if evals else None, eval_series=evals)


def launch_outcomes(root: str) -> dict[str, dict[str, Any]]:
  """The newest record of each point in `<root>/launch.jsonl` ({} if absent), by point name."""
  outcomes = {}
  path = os.path.join(root, "launch.jsonl")
  if os.path.exists(path):
    with open(path) as f:
      for line in f:
        try:
          record = json.loads(line)
          outcomes[record["name"]] = record
        except (json.JSONDecodeError, KeyError):
          continue
  return outcomes


# ----------------------------------------------------------------------------------------
# Downstream scores and rankings (launch.sweep's fine-tuning stages).

MINI_RESULTS = ("mini", "mini_suite.json")   # <workdir>/mini/mini_suite.json: the "mini" column
# The mini column's name in reports: what it measures (docs/downstream_mini.md).
FLUENCY = "decoder fluency (mini)"
# The random-initialisation baseline of the blank-input control, by default (launch.sweep's
# random_init_stage at tiny scale, or `python -m lm.mini_suite --from_scratch
# --output=<root>/random_init/mini`).
RANDOM_INIT_RESULTS = ("random_init", "mini", "mini_suite.json")
WHY_NO_TAU = (
    "The *decoder fluency (mini)* column is not ranked against the paper (no Kendall's "
    "tau): in four of its five tasks every choice is a whole line of the same words (but "
    "one, in fill), and ranking them by the likelihood of the whole line judges the decoder's "
    "unconditional fluency, which prefix LM and deshuffling train and i.i.d. denoising "
    "(a sentinel and one token per target) never does. A tau against the paper would "
    "reward the LM objectives by construction (docs/downstream_mini.md). The blank-input "
    "control shows how much of each point's margin needs no input at all.")
# Paper scale: each column from its fine-tuning run `<workdir>/ft_<short>` (launch.sweep):
# (column, run folder, task, metric); GLUE and SuperGLUE are the paper's averages.
PAPER_COLUMNS = (("GLUE", "ft_glue", None, None), ("CNNDM", "ft_cnndm", "cnn_dailymail", "rouge2"),
                 ("SQuAD", "ft_squad", "squad_v1_1", "em"), ("SGLUE", "ft_super_glue", None, None),
                 ("EnDe", "ft_ende", "wmt14_ende", "bleu"), ("EnFr", "ft_enfr", "wmt14_enfr", "bleu"),
                 ("EnRo", "ft_enro", "wmt16_enro", "bleu"))


def _best_task_results(run: str) -> dict[str, dict[str, float]] | None:
  """{task: metrics}, each task at its own best evaluated step of a fine-tuning run's
  `eval/tasks_step_<N>.json` files, as T5 reported them (`lm.downstream.evaluation
  .select_best`, what the run's `eval/tasks_best.json` holds; MNLI matched/mismatched and
  the multi-metric tasks are chosen together); None when there is none."""
  from lm.downstream import evaluation  # pylint: disable=g-import-not-at-top
  try:
    records = evaluation.read_results(run)
  except (OSError, ValueError):
    return None
  return evaluation.select_best(records)["results"] if records else None


def downstream_scores(workdir: str) -> dict[str, float]:
  """Our downstream columns of one point: {"mini": ...} at tiny scale, the paper's columns
  (GLUE, CNNDM, ...) at paper scale; a column whose run has no results is left out."""
  out = {}
  record = read_mini_record(os.path.join(workdir, *MINI_RESULTS))
  if record is not None:
    out["mini"] = float(record["mini"])
  for column, folder, task, metric in PAPER_COLUMNS:
    results = _best_task_results(os.path.join(workdir, folder))
    if results is None:
      continue
    from lm.downstream import task_mixtures  # pylint: disable=g-import-not-at-top
    try:
      if column == "GLUE":
        out[column] = task_mixtures.glue_average(results)
      elif column == "SGLUE":
        out[column] = task_mixtures.super_glue_average(results)
      else:
        out[column] = float(results[task][metric])
    except (KeyError, ValueError):
      continue
  return out


def read_mini_record(path: str) -> dict[str, Any] | None:
  """A mini_suite.json record (None when the file is absent)."""
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def blank_control(record: dict[str, Any] | None, random_init: dict[str, Any] | None
                  ) -> tuple[float | None, float | None]:
  """(the blank-input "mini" average, the share of the margin over random initialisation it
  keeps: `mini.surviving_share`) of one point's mini record; None where a value is missing,
  the two records' suites differ, or the margin is within noise."""
  from lm.downstream import mini  # pylint: disable=g-import-not-at-top
  if record is None:
    return None, None
  blank = record.get("mini_blank")
  if (blank is None or random_init is None or "mini" not in record or "mini" not in random_init
      or random_init.get("suite_version") != record.get("suite_version")):
    return blank, None
  return blank, mini.surviving_share(record["mini"], blank, random_init["mini"])


def ranks(values: dict[str, float]) -> dict[str, int]:
  """1 = best (highest score); ties share the better rank."""
  ordered = sorted(values.values(), reverse=True)
  return {k: ordered.index(v) + 1 for k, v in values.items()}


def kendall_tau(ours: dict[str, float], paper: dict[str, float]) -> tuple[float, int]:
  """Kendall's tau-b between two score tables over their common points, and that count
  (NaN with fewer than 2 points). Both higher-is-better."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  common = [k for k in ours if k in paper]
  if len(common) < 2:
    return float("nan"), len(common)
  tau = stats.kendalltau([ours[k] for k in common], [paper[k] for k in common]).statistic
  return float(tau), len(common)


def ranking_section(points: Sequence[Point], scores: dict[str, dict[str, float]]) -> list[str]:
  """Markdown: each of our paper-scale columns' ranking beside the paper's, Kendall's tau
  per column, and the points where the two rankings disagree (shown, not hidden). The
  decoder-fluency (mini) column gets no tau (WHY_NO_TAU)."""
  ours_columns = [c for c in COLUMNS if any(c in s for s in scores.values())]
  paper_columns = [c for c in COLUMNS if sum(c in p.reference for p in points) >= 2]
  has_mini = any("mini" in s for s in scores.values())
  if not ours_columns and not has_mini:
    return ["No downstream scores yet (the fine-tuning stage has not finished for any "
            "point).", ""]
  lines = ["## Rankings: ours beside the paper's", ""]
  if has_mini:
    lines += [WHY_NO_TAU, ""]
  if not ours_columns:
    return lines
  lines += ["Rank 1 = best. Kendall's tau-b over the points both have (1 = the same order, "
            "-1 = reversed, ~0 = unrelated), each of our paper-scale columns against the "
            "paper's own.", ""]
  header = ["our column", "paper column", "points", "Kendall tau", "disagreements"]
  lines += ["| " + " | ".join(header) + " |", "|---|---|---:|---:|---|"]
  for ours in ours_columns:
    mine = {p.name: scores[p.name][ours] for p in points if ours in scores[p.name]}
    targets = [ours] if ours in paper_columns else paper_columns
    for paper_column in targets:
      theirs = {p.name: p.reference[paper_column] for p in points
                if paper_column in p.reference}
      tau, n = kendall_tau(mine, theirs)
      common = {k: mine[k] for k in mine if k in theirs}
      r_ours, r_paper = ranks(common), ranks({k: theirs[k] for k in common})
      off = ", ".join(f"{k} ({r_ours[k]} vs {r_paper[k]})" for k in common
                      if r_ours[k] != r_paper[k]) or "none"
      lines.append(f"| {ours} | {paper_column} | {n} | {fmt(tau, 2)} | {off} |")
  return lines + [""]


def mini_tasks_section(root: str, points: Sequence[Point],
                       random_init: dict[str, Any] | None = None) -> list[str]:
  """Markdown: every point's score on each task of the mini suite (its headline metric, as
  `mini_suite.json` records it) beside the mini average, the same with blank inputs (the
  blank-input control), random initialisation's rows and the chance row: which tasks carry
  the column's differences, and which need the input. [] when no point has per-task mini
  results."""
  from lm.downstream import mini  # pylint: disable=g-import-not-at-top
  records = {}
  for p in points:
    record = read_mini_record(os.path.join(root, p.name, *MINI_RESULTS))
    if record and record.get("results"):
      records[p.name] = record
  if not records:
    return []
  rows = dict(records)
  if random_init and random_init.get("results"):
    rows["random init"] = random_init
  tasks = [t for t in mini.TASK_METRIC if any(t in r["results"] for r in rows.values())]
  metric = mini.TASK_METRIC
  lines = ["## The mini suite per task", "",
           "Each task's headline metric (docs/downstream_mini.md) after fine-tuning; *mini* is "
           "the mean over the suite's tasks (the decoder-fluency column). A *(blank input)* "
           "row is the same model scored on the same choices with every input replaced by "
           "an empty string (the blank-input control): what it keeps of the score needs no "
           "input. The chance row is a uniformly random choice among each example's "
           "choices.", "",
           "| point | " + " | ".join(f"{t.removeprefix('mini_')} ({metric[t]})"
                                      for t in tasks) + " | mini |",
           "|---|" + "---:|" * (len(tasks) + 1)]
  for name, record in rows.items():
    for label, results, average in ((name, record["results"], record.get("mini")),
                                    (f"{name} (blank input)", record.get("blank"),
                                     record.get("mini_blank"))):
      if results is None:
        continue
      cells = [fmt(results.get(t, {}).get(metric[t]), 2) for t in tasks]
      lines.append(f"| {label} | " + " | ".join(cells) + f" | {fmt(average, 2)} |")
  chance = next((r["chance"] for r in records.values() if r.get("chance")), None)
  if chance:
    values = [chance.get(t, {}).get(metric[t]) for t in tasks]
    suite = [chance[t][metric[t]] for t in chance if t in metric]  # the record's own suite
    mean = sum(suite) / len(suite) if suite else None
    lines.append("| chance | " + " | ".join(fmt(v, 2) for v in values) + f" | {fmt(mean, 2)} |")
  # A suite: its version (mini.SUITE_VERSION; absent before version 3) and its tasks.
  suites = {(r.get("suite_version"), tuple(sorted(t for t in r["results"] if t in metric)))
            for r in rows.values()}
  if len(suites) > 1:
    lines += ["", "**The points were scored with different suites** (rerun the older points' "
              "mini stage: remove `<point>/mini` and `<point>/sweep/mini.json` and run the "
              "sweep again; the random-initialisation record likewise); their *mini* "
              "values are not comparable."]
  if any("mini_blank" not in r for r in records.values()):
    lines += ["", "Points without a *(blank input)* row were scored before the blank-input "
              "control existed: run the sweep again (its mini stage scores them, reusing "
              "each fine-tuning run)."]
  return lines + [""]


def seed_spread_section(points: Sequence[Point], scores: dict[str, dict[str, float]],
                        summaries: dict[str, dict[str, Any]]) -> list[str]:
  """Markdown: each score over a point and its seed replicates (`launch.sweep --seeds`):
  the values, their mean, standard deviation and range: the seed noise the differences
  between points are read against. A point with fewer than two seeds that have a
  result in the root (a sweep run with --only, say) gets no section. [] without replicates."""
  groups: dict[str, list[str]] = {}
  for p in points:
    if p.replicate_of:
      groups.setdefault(p.replicate_of, [p.replicate_of]).append(p.name)
  lines = []
  for base, names in groups.items():
    columns = [("eval loss", {n: summaries[n]["eval_loss"] for n in names})]
    columns += [(f"our {_label(c)}", {n: scores[n].get(c) for n in names})
                for c in ("mini", *COLUMNS) if any(c in scores[n] for n in names)]
    columns = [(label, {n: v for n, v in values.items() if v is not None and v == v})
               for label, values in columns]
    ran = [n for n in names if any(n in values for _, values in columns)]
    if len(ran) < 2:  # no spread to show (a sweep run with --only, say)
      continue
    lines += [f"## Seed spread of `{base}`", "",
              f"`{base}` run with {len(ran)} seeds ({', '.join(ran)}; train.seed and "
              "data.seed differ). A difference between two points smaller than the range "
              "below is within seed noise.", "",
              "| score | values | mean | sd | range (max - min) |", "|---|---|---:|---:|---:|"]
    for label, values in columns:
      got = list(values.values())
      if not got:
        continue
      mean = sum(got) / len(got)
      sd = (sum((v - mean) ** 2 for v in got) / (len(got) - 1)) ** 0.5 if len(got) > 1 else None
      lines.append(f"| {label} | {', '.join(fmt(v, 3) for v in got)} | {fmt(mean, 3)} | "
                   f"{fmt(sd, 3)} | {fmt(max(got) - min(got), 3)} |")
    lines.append("")
  return lines


def _min_share_margin() -> float:
  from lm.downstream import mini  # pylint: disable=g-import-not-at-top
  return mini.MIN_SHARE_MARGIN


def _label(column: str) -> str:
  """A downstream column's name in the report ("mini" is the decoder-fluency column)."""
  return FLUENCY if column == "mini" else column


def fmt(x: float | None, digits: int = 3) -> str:
  """A number with `digits` decimals, or "—" for a missing (or NaN) one."""
  return "—" if x is None or x != x else f"{x:.{digits}f}"


def write_report(root: str, points: Sequence[Point], *, experiment: str = "",
                 commands: Sequence[Sequence[str]] | None = None,
                 wandb_group: str | None = None, random_init: str | None = None) -> str:
  """Writes `<root>/report.md` and `<root>/eval_loss.png`; returns the markdown.

  Args:
    root: directory holding one workdir per point (`<root>/<name>/metrics.jsonl`).
    points: the sweep's points (names, configs, paper references; a column missing from a
      point's reference is shown as "—").
    experiment: the experiment file, for the header.
    commands: each point's argv, listed in the report (same order as points).
    wandb_group: the wandb group the runs were logged under, for the header.
    random_init: the mini_suite.json of the suite fine-tuned from random initialisation, the
      baseline of the blank-input control's share (default `<root>/random_init/
      mini/mini_suite.json` when it exists).
  """
  os.makedirs(root, exist_ok=True)
  random_init_path = random_init or os.path.join(root, *RANDOM_INIT_RESULTS)
  random_record = read_mini_record(random_init_path)
  summaries = {p.name: summarize(os.path.join(root, p.name)) for p in points}
  outcomes = launch_outcomes(root)
  lines = [f"# Sweep report: {experiment or root}", ""]
  lines.append(f"Generated {datetime.datetime.now().isoformat(timespec='seconds')} from "
               f"`{root}/<point>/metrics.jsonl`"
               + (f"; wandb group `{wandb_group}`" if wandb_group else "") + ".")
  lines += [
      "",
      "**Not comparable one to one.** *train loss* and *eval loss* are **our pre-training "
      "losses** (per-target-token cross-entropy + z-loss at the last logged step; eval on the "
      "held-out split). The GLUE ... EnRo columns are **the paper's downstream scores** "
      "(Raffel et al. 2020, after fine-tuning each pre-trained model; ★ = the paper's "
      "baseline; — = no paper value). Losses of points whose objectives predict different "
      "targets (a different corruption rate, span length or objective, or a decoder-only "
      "model) measure different tasks too, so neither column set ranks the points on its own. "
      "The *our ...* columns are our downstream scores after fine-tuning (launch.sweep): "
      "at paper scale the paper's own columns, which rank the points; at tiny scale "
      f"*{FLUENCY}*, the CPU suite (docs/downstream_mini.md), which measures how well a "
      "point's decoder tells text from non-text and separates pre-training from random "
      "initialisation, but does not rank the points as the paper's columns do (below). "
      "*blank input* is the same column with every input replaced by an empty string, and "
      "*kept blank* the share of the point's margin over random initialisation that "
      "survives without the input: (blank - random init) / (score - random init); 1 = the "
      "margin needs no input, 0 = all of it does; — where the margin is under "
      f"{_min_share_margin():g} points (within the seed noise).",
      "",
  ]
  scores = {p.name: downstream_scores(os.path.join(root, p.name)) for p in points}
  ours = [c for c in ("mini", *COLUMNS) if any(c in s for s in scores.values())]
  blank = {p.name: blank_control(read_mini_record(os.path.join(root, p.name, *MINI_RESULTS)),
                                 random_record) for p in points}
  header = (["point", "status", "step", "train loss", "eval loss"]
            + [h for c in ours for h in ([f"our {FLUENCY}", "blank input", "kept blank"]
                                         if c == "mini" else [f"our {c}"])]
            + [f"paper {c}" for c in COLUMNS])
  lines.append("| " + " | ".join(header) + " |")
  lines.append("|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|")
  for p in points:
    s = summaries[p.name]
    status = s["status"]
    outcome = outcomes.get(p.name)
    if outcome is not None and outcome.get("returncode") not in (0, None):
      status += f", last run exit {outcome['returncode']}"
    row = [("★ " if p.baseline else "") + p.name, status,
           "—" if s["step"] is None else str(s["step"]), fmt(s["train_loss"]),
           fmt(s["eval_loss"])]
    for c in ours:
      row.append(fmt(scores[p.name].get(c), 2))
      if c == "mini":
        row += [fmt(blank[p.name][0], 2), fmt(blank[p.name][1], 2)]
    row += [fmt(p.reference.get(c), 2) for c in COLUMNS]
    lines.append("| " + " | ".join(row) + " |")
  if "mini" in ours:
    if random_record is None:
      where = os.path.dirname(random_init_path)
      lines += ["", f"*kept blank* needs the random-initialisation baseline, "
                f"`{random_init_path}`, which is not there yet: run the sweep again (its "
                f"`{RANDOM_INIT_RESULTS[0]}` stage), or `python -m lm.mini_suite "
                f"--from_scratch --output={where}` with the points' --config, then this "
                "report again."]
    else:
      lines += ["", f"Random initialisation (`{random_init_path}`): {FLUENCY} "
                f"{fmt(random_record.get('mini'), 2)}, blank input "
                f"{fmt(random_record.get('mini_blank'), 2)}."]
  lines += ["", "![eval loss vs step](eval_loss.png)", ""]
  lines += mini_tasks_section(root, points, random_record)
  lines += ranking_section(points, scores)
  lines += yardstick.sections(root, points, experiment)
  lines += seed_spread_section(points, scores, summaries)
  lines += ["## Points", ""]
  for i, p in enumerate(points):
    overrides = " ".join(p.override_args())
    lines.append(f"- `{p.name}`: `{p.config}`" + (f" `{overrides}`" if overrides else ""))
    if commands is not None:
      lines.append(f"  - command: `{shlex.join(commands[i])}`")
    outcome = outcomes.get(p.name)
    if outcome is not None:
      lines.append(f"  - last launch: exit {outcome.get('returncode')} after "
                   f"{outcome.get('seconds', float('nan')):.0f} s ({outcome.get('time', '?')})")
  text = "\n".join(lines) + "\n"
  with open(os.path.join(root, "report.md"), "w") as f:
    f.write(text)
  plot_eval_loss(os.path.join(root, "eval_loss.png"),
                 {p.name: summaries[p.name]["eval_series"] for p in points},
                 title=experiment or root)
  return text


def plot_eval_loss(path: str, series: dict[str, list[tuple[int, float]]], *,
                   title: str = "") -> None:
  """Saves a PNG of eval loss against step, one line per point (empty points noted)."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=(7, 4.5), dpi=100)
  FigureCanvasAgg(fig)
  ax = fig.subplots()
  plotted = 0
  for name, points in series.items():
    if points:
      steps, values = zip(*points)
      ax.plot(steps, values, marker="o", markersize=3, label=name)
      plotted += 1
  if plotted:
    ax.legend(fontsize=8)
  else:
    ax.text(0.5, 0.5, "no eval_loss recorded yet", ha="center", va="center",
            transform=ax.transAxes)
  ax.set_xlabel("step")
  ax.set_ylabel("eval loss (our pre-training loss)")
  ax.set_title(title, fontsize=10)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path)


def replicates_present(root: str, points: Sequence[Point]) -> dict[str, int]:
  """{point name: how many seed replicates of it `root` holds} (<name>_seed1, 2, ... in a
  row), for the points with at least one."""
  counts = {}
  for p in points:
    k = 0
    while os.path.isdir(os.path.join(root, f"{p.name}_seed{k + 1}")):
      k += 1
    if k:
      counts[p.name] = k
  return counts


def main(argv: Sequence[str] | None = None) -> int:
  """`python -m launch.report EXPERIMENT --root=DIR`: (re)writes the study's report."""
  import argparse  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(prog="python -m launch.report", description=(
      "Writes <root>/report.md and eval_loss.png of a study from its workdirs: our losses and "
      "downstream scores beside the paper's, the mini column's blank-input control, "
      "rankings and Kendall's tau (paper-scale columns only)."))
  parser.add_argument("experiment", help="experiment file, e.g. experiments/t5_span_length.py")
  parser.add_argument("--root", required=True, help="the study's directory")
  parser.add_argument("--scale", default="tiny", choices=("tiny", "paper"),
                      help="the sweep's --scale (the points' configs as they ran: runlocal "
                      "at tiny scale)")
  parser.add_argument("--random_init", default="",
                      help="the mini_suite.json of the suite fine-tuned from random "
                      "initialisation (default: <root>/random_init/mini/mini_suite.json, "
                      "what launch.sweep writes at tiny scale)")
  parser.add_argument("--seeds", type=int, default=0,
                      help="the sweep's --seeds (default: each point with as many seed "
                      "replicates as <root> holds of it, <name>_seed<k>)")
  parser.add_argument("--seeds_of", default="baseline", choices=("baseline", "all"),
                      help="the sweep's --seeds_of (read only with --seeds)")
  args = parser.parse_args(argv)
  try:
    points = collect(args.experiment, runlocal=args.scale == "tiny")
    points = (seed_replicates(points, args.seeds, every_point=args.seeds_of == "all")
              if args.seeds else replicate(points, replicates_present(args.root, points)))
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if not os.path.isdir(args.root):
    print(f"error: --root {args.root} does not exist (run the study first: python -m "
          "launch.sweep)", file=sys.stderr)
    return 2
  if args.random_init and not os.path.isfile(args.random_init):
    print(f"error: --random_init {args.random_init} does not exist (python -m "
          "lm.mini_suite --from_scratch --output=DIR writes DIR/mini_suite.json)",
          file=sys.stderr)
    return 2
  write_report(args.root, points, experiment=args.experiment,
               random_init=args.random_init or None)
  print(f"wrote {os.path.join(args.root, 'report.md')} and eval_loss.png")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
