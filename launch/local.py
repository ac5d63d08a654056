r"""Runs an experiment's sweep on this machine, one `python -m lm.main` process per point.

  python -m launch.local experiments/t5_corruption_rate.py --root=runs/table6
  python -m launch.local experiments/t5_corruption_rate.py --root=runs/table6_cpu --runlocal \
      --only=noise_10,noise_15 --extra=--config.train.num_steps=200
  python -m launch.local experiments/t5_architectures.py --root=runs/table2 --dry_run
  python -m launch.local experiments/t5_corruption_rate.py --root=runs/table6 --report_only

An experiment file defines `sweep(add)`; each `add(name=..., config=..., overrides=...,
reference=...)` is one point, run sequentially in `<root>/<name>` (an existing workdir
resumes, since lm.main resumes; a finished one exits at once). `--runlocal` appends
`runlocal` to every config arg (and applies the point's `runlocal_overrides`) so a whole
table runs on a laptop. Every point's config is built and validated before the first
run, so a typo stops the sweep at once rather than after hours of training.

Afterwards `<root>/report.md` puts each point's final train / eval loss (from its
metrics.jsonl) beside the paper's reference scores (a point may have none: "—"), and
`<root>/eval_loss.png` plots eval loss against step (launch/report.py). The points
(`Point`, `collect`) are launch/points.py's. Each run's output
goes to `<root>/<name>/launch.log`, and `<root>/launch.jsonl` records every run's command,
exit code and duration.

This module holds no hyperparameters: they live in configs/ and experiments/.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time
from typing import Sequence

from launch import report
from launch.points import Point, collect, point_name_problem
from lm import cli

# lm.main's exit status after SIGTERM (checkpoint saved, resume later; docs/robustness.md).
EXIT_PREEMPTED = cli.EXIT_PREEMPTED


class SweepPreempted(Exception):
  """A point exited with EXIT_PREEMPTED: the sweep stops, to be resumed later."""


def build_config(point: Point):
  """The point's ConfigDict: `get_config(arg)` of its config file plus its overrides.

  Mirrors what lm.main does with `--config=<file>:<arg> --config.<field>=<value>`.

  Raises:
    ValueError: the config file is missing, or an override names no existing field or
      has the wrong type.
  """
  path, _, arg = point.config.partition(":")
  if not os.path.isfile(path):
    raise ValueError(f"point {point.name!r}: config file {path} does not exist.")
  spec = importlib.util.spec_from_file_location(f"_config_{pathlib.Path(path).stem}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config(arg or None)
  for key, value in point.overrides.items():
    *parents, leaf = key.split(".")
    node = config
    try:
      for part in parents:
        node = node[part]
      if leaf not in node:
        raise KeyError(leaf)
      node[leaf] = value
    except (KeyError, AttributeError, TypeError) as e:
      raise ValueError(f"point {point.name!r}: override {key}={value!r} failed: {e!r}") from None
  from lm import config as config_lib  # pylint: disable=g-import-not-at-top  (as get_config)
  return config_lib.derive(config)  # the derived fields from the overridden values


def validate(points: Sequence[Point]) -> None:
  """Builds and validates every point's config (lm.validate.validate).

  Raises:
    ValueError: naming the point, with validate's list of problems.
  """
  from lm import validate as validate_lib  # pylint: disable=g-import-not-at-top  (jax: only here)
  for point in points:
    try:
      validate_lib.validate(build_config(point))
    except ValueError as e:
      raise ValueError(f"point {point.name!r} ({point.config}): {e}") from None


def command(point: Point, root: str, *, extra: Sequence[str] = (),
            wandb_group: str | None = None) -> list[str]:
  """The `python -m lm.main ...` argv of a point (workdir `<root>/<name>`)."""
  problem = point_name_problem(point.name)
  if problem:
    raise ValueError(f"point name {point.name!r} {problem}")
  argv = [sys.executable, "-m", "lm.main", f"--config={point.config}",
          f"--workdir={os.path.join(root, point.name)}"]
  argv += point.override_args()
  if wandb_group:
    argv += [f"--config.wandb.group={wandb_group}", f"--config.wandb.name={point.name}"]
  return argv + list(extra)


# ----------------------------------------------------------------------------------------
# Running.


def run_points(points: Sequence[Point], commands: Sequence[Sequence[str]], root: str) -> int:
  """Runs the commands one after another; returns how many failed.

  Each run's stdout/stderr go to `<root>/<name>/launch.log` (appended); one progress line
  per point goes to stdout, and the log's tail to stderr when a run fails. SIGTERM to the
  launcher is passed on to the running point; a point that exits with EXIT_PREEMPTED
  (its checkpoint saved) stops the sweep with SweepPreempted; running the same command
  again resumes it.
  """
  failed = 0
  child: list[subprocess.Popen] = []

  def forward_sigterm(signum, frame):  # pylint: disable=unused-argument
    if child:
      child[0].send_signal(signal.SIGTERM)

  previous = signal.signal(signal.SIGTERM, forward_sigterm)
  try:
    for i, (point, argv) in enumerate(zip(points, commands), 1):
      workdir = os.path.join(root, point.name)
      os.makedirs(workdir, exist_ok=True)
      log_path = os.path.join(workdir, "launch.log")
      before = report.summarize(workdir)
      resume = f", resuming at step {before['step']}" if before["step"] is not None else ""
      print(f"[{i}/{len(points)}] {point.name}: running{resume} (log: {log_path})", flush=True)
      start = time.time()
      with open(log_path, "a") as log:
        log.write(f"\n$ {shlex.join(argv)}\n")
        log.flush()
        child[:] = [subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)]
        returncode = child[0].wait()
        child.clear()
      seconds = time.time() - start
      with open(os.path.join(root, "launch.jsonl"), "a") as f:
        f.write(json.dumps(dict(name=point.name, returncode=returncode, seconds=seconds,
                                time=datetime.datetime.now().isoformat(timespec="seconds"),
                                command=list(argv))) + "\n")
      s = report.summarize(workdir)
      result = (f"{s['status']}, train loss {report.fmt(s['train_loss'])}, "
                f"eval loss {report.fmt(s['eval_loss'])}")
      if returncode == 0:
        print(f"[{i}/{len(points)}] {point.name}: done in {seconds:.0f} s: {result}", flush=True)
      elif returncode == EXIT_PREEMPTED:
        print(f"[{i}/{len(points)}] {point.name}: preempted after {seconds:.0f} s "
              f"(checkpoint saved): {result}; run the same command again to resume the sweep.",
              flush=True)
        raise SweepPreempted(point.name)
      else:
        failed += 1
        print(f"[{i}/{len(points)}] {point.name}: FAILED (exit {returncode}) after "
              f"{seconds:.0f} s: {result}; last lines of {log_path}:", flush=True)
        with open(log_path) as log:
          sys.stderr.write("".join(log.readlines()[-15:]))
  finally:
    signal.signal(signal.SIGTERM, previous)
  return failed


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
      prog="python -m launch.local", description=__doc__.split("\n\n")[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("experiment", help="experiment file, e.g. experiments/t5_span_length.py")
  parser.add_argument("--root", required=True, help="sweep directory; one workdir per point")
  parser.add_argument("--runlocal", action="store_true",
                      help="append `runlocal` to every config arg (CPU-sized runs)")
  parser.add_argument("--only", default="",
                      help="comma-separated point names to run (default: all)")
  parser.add_argument("--extra", action="append", default=[],
                      help="argument passed to every lm.main run, e.g. "
                           "--extra=--config.train.num_steps=200 (repeatable)")
  parser.add_argument("--wandb_group", default=None,
                      help="wandb group of the runs (default: the experiment file's name); "
                           "'' to leave it unset")
  parser.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
  parser.add_argument("--report_only", action="store_true",
                      help="rebuild report.md / eval_loss.png from existing workdirs")
  parser.add_argument("--no_validate", action="store_true",
                      help="skip building and validating every config before running")
  return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  try:
    points = collect(args.experiment, runlocal=args.runlocal)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  wanted = [n.strip() for n in args.only.split(",") if n.strip()]
  if wanted:
    unknown = [n for n in wanted if n not in {p.name for p in points}]
    if unknown:
      print(f"error: --only: unknown point(s) {unknown}; expected one of "
            f"{[p.name for p in points]}", file=sys.stderr)
      return 2
  selected = [p for p in points if not wanted or p.name in wanted]
  group = args.wandb_group
  if group is None:
    group = pathlib.Path(args.experiment).stem.rsplit(".", 1)[-1]
    group += "_runlocal" if args.runlocal else ""
  # The report always covers the whole sweep (points left out by --only show as not run).
  commands = {p.name: command(p, args.root, extra=args.extra, wandb_group=group or None)
              for p in points}
  write = functools.partial(report.write_report, args.root, points, experiment=args.experiment,
                             commands=[commands[p.name] for p in points],
                             wandb_group=group or None)
  if args.report_only:
    write()
    print(f"wrote {os.path.join(args.root, 'report.md')} and eval_loss.png")
    return 0
  if not args.no_validate:
    try:
      validate(selected)
    except ValueError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
  if args.dry_run:
    for p in selected:
      print(shlex.join(commands[p.name]))
    return 0
  try:
    failed = run_points(selected, [commands[p.name] for p in selected], args.root)
  except SweepPreempted:
    write()
    print(f"sweep preempted; report: {os.path.join(args.root, 'report.md')}")
    return EXIT_PREEMPTED
  write()
  print(f"{len(selected) - failed}/{len(selected)} points ran cleanly; report: "
        f"{os.path.join(args.root, 'report.md')}")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
