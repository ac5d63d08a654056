r"""One command per study: every point pre-trained, fine-tuned and evaluated, here, on SLURM or a TPU pod.

  python -m launch.sweep experiments/t5_span_length.py --root=runs/table7 --scale=tiny \
      --parallel=2                                   # this machine, two points at a time
  python -m launch.sweep experiments/t5_span_length.py --root=/shared/table7 --scale=paper \
      --backend=slurm --nodes=4 --gpus_per_node=8 --data_dir=/shared/t5_data [--dry_run]
  python -m launch.sweep experiments/t5_span_length.py --root=gs://bucket/table7 \
      --scale=paper --backend=tpu --tpu=my-v5p --accelerator=v5p-128 --zone=us-east5-a \
      --data_dir=gs://bucket/t5_data [--create] [--delete] [--dry_run]
  python -m launch.report experiments/t5_span_length.py --root=runs/table7   # the report

Each point of the study (`sweep(add)` in the experiment file, launch/points.py's `collect`)
runs its stages in order, each through `python -m launch.stage` (a finished stage is
skipped, an interrupted one resumes), in `<root>/<name>`:

  pretrain   lm.main with the point's config and overrides (wandb group = the study,
             tags = the swept values)
  finetune   tiny scale: the mini suite (`lm.mini_suite`, the "mini" column) in
             `<root>/<name>/mini` (and, locally, once from random initialisation in
             `<root>/random_init/mini`: `random_init_stage`); paper scale: one lm.main
             fine-tuning run per benchmark column (configs/finetune.py, `ckpt.init_from` =
             the pre-trained run) in
             `<root>/<name>/ft_<column>`, reading T5's task files under --data_dir
  evaluate   lm.evaluate on the pre-trained run (held-out loss of every objective, and the
             continuation score every architecture shares)
  nlu        lm.evaluate --suite=nlu on the pre-trained run: the neutral yardstick's probes
             and minimal pairs against the same model's random initialisation
             (docs/yardstick.md), which the report's Contrasts and Controls read; with
             --nlu_steps also at those earlier checkpoints (`nlu_growth`: the growth control)
  accept     (not by default; tiny scale) the acceptability tasks fine-tuned from the run and
             from random initialisation (launch/accept.py), for the report's contrasts

With --prepare_input and --prepare_tokenizer the study tokenizes its corpus once first, and
every point pre-trains from it (launch/prepare.py; on SLURM its own job the points wait for,
on a TPU pod every worker converts its share of the files).

Running the same command again after a crash or a preemption continues the study.
Backends (docs/sweeps.md): local, N points at once (--parallel), a preempted point (exit
75) stopping the queue; slurm, one sbatch script per point (`<root>/<name>/sweep.sbatch`,
srun over the nodes, requeued when preempted); tpu, a Cloud TPU VM through gcloud (the
queued resource created or reused, the checkout installed on every worker, each point
planned first with lm.plan on --accelerator and refused before submission if it does not
fit, the pod deleted at the end with --delete).

--dry_run prints the commands and scripts and runs nothing. Every value reaching a shell is
quoted (shlex); point names are plain folder names. Roots may be local or gs://.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import pathlib
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from launch import local
from launch import points as points_lib
from launch import prepare as prepare_lib
from launch import stage as stage_lib
from launch.stage import Stage
from launch.tpu import (TpuTarget, plan_command, tpu_delete_command, tpu_point_command,
                        tpu_setup_commands, wait_until_active)

SCALES = ("tiny", "paper")
BACKENDS = ("local", "slurm", "tpu")
STAGE_NAMES = ("pretrain", "finetune", "evaluate", "nlu", "accept")
DEFAULT_STAGES = STAGE_NAMES[:4]  # accept: for runs large enough to learn it (launch/accept.py)
EXIT_PREEMPTED = local.EXIT_PREEMPTED

# Paper scale: one fine-tuning run per benchmark column of the T5 tables (configs/finetune.py
# arg selecting the task or mixture), as the paper fine-tuned each benchmark on its own.
PAPER_FINETUNES = (
    ("GLUE", "glue", "mixture=glue_v002_proportional"),
    ("SGLUE", "super_glue", "mixture=super_glue_v102_proportional"),
    ("CNNDM", "cnndm", "task=cnn_dailymail"),
    ("SQuAD", "squad", "task=squad_v1_1"),
    ("EnDe", "ende", "task=wmt14_ende"),
    ("EnFr", "enfr", "task=wmt14_enfr"),
    ("EnRo", "enro", "task=wmt16_enro"),
)
# configs/t5.py arg keys that fix the model, passed on to configs/finetune.py.
_MODEL_ARGS = ("arch", "family", "size")
MINI_DIR = "mini"   # <root>/<name>/mini: the mini suite's fine-tuning run and mini_suite.json
# <root>/random_init/mini: the mini suite fine-tuned from random initialisation (tiny scale,
# local backend), the baseline of the report's blank-input control.
RANDOM_INIT = "random_init"
MARKER_DIR = "sweep"  # <root>/<name>/sweep/<stage>.json: the finished stages


def _join(root: str, *parts: str) -> str:
  return "/".join([root.rstrip("/"), *parts])


def config_args(config: str) -> dict[str, str]:
  """The key=value items of `configs/t5.py:<arg>` (a bare key is "True")."""
  _, _, arg = config.partition(":")
  items = [a.strip() for a in arg.split(",") if a.strip()]
  return {k: (v if sep else "True") for k, sep, v in (a.partition("=") for a in items)}


def tags(point: points_lib.Point) -> list[str]:
  """wandb tags of a point: its config arg items and overrides ("objective=bert", ...)."""
  out = [f"{k}={v}" for k, v in config_args(point.config).items() if k != "runlocal"]
  return out + [f"{k}={points_lib.format_value(v)}" for k, v in point.overrides.items()]


def _finetune_arg(point: points_lib.Point, scale: str) -> str:
  model = {k: v for k, v in config_args(point.config).items() if k in _MODEL_ARGS}
  items = [f"{k}={v}" for k, v in model.items()]
  return ",".join(items + (["runlocal"] if scale == "tiny" else []))


def stages(point: points_lib.Point, root: str, *, scale: str, study: str, python: str = "python",
           data_dir: str = "", extra: Sequence[str] = (), finetune_extra: Sequence[str] = (),
           evaluate_extra: Sequence[str] = (), nlu_extra: Sequence[str] = (),
           nlu_steps: Sequence[int] = (), which: Sequence[str] = DEFAULT_STAGES) -> list[Stage]:
  """A point's stages at `scale` (module docstring), workdirs under `root`.

  Args:
    point: from points_lib.collect (its config already carries `runlocal` at tiny scale).
    root: the study's root (local path or gs://).
    scale: "tiny" or "paper".
    study: the wandb group (the experiment's name).
    python: the interpreter's name in the commands ("python" on remote machines).
    data_dir: where T5's task files are (paper scale fine-tuning).
    extra: more lm.main arguments for the pre-training run.
    finetune_extra: more arguments for the fine-tuning commands (the mini suite's, e.g.
      --steps=100, at tiny scale; lm.main's at paper scale).
    evaluate_extra: more arguments for lm.evaluate (e.g. --num_batches=2).
    nlu_extra: more arguments for lm.evaluate --suite=nlu (e.g. --items=heldout).
    nlu_steps: earlier pre-training steps the nlu stage scores too (stage `nlu_growth`,
      the growth control); pre-training keeps their checkpoints (ckpt.keep_steps).
    which: the stage kinds to include (of STAGE_NAMES; default DEFAULT_STAGES).

  Raises:
    ValueError: an unsafe point name, an unknown scale or stage, paper scale without
      data_dir while fine-tuning, or the accept stage at paper scale.
  """
  problem = points_lib.point_name_problem(point.name)
  if problem:
    raise ValueError(f"point name {point.name!r} {problem}")
  if scale not in SCALES:
    raise ValueError(f"unknown scale {scale!r}; expected one of {list(SCALES)}")
  unknown = sorted(set(which) - set(STAGE_NAMES))
  if unknown:
    raise ValueError(f"unknown stage(s) {unknown}; expected one of {list(STAGE_NAMES)}")
  workdir = _join(root, point.name)
  marker = lambda name: _join(workdir, MARKER_DIR, f"{name}.json")
  out = []
  if any(int(s) <= 0 for s in nlu_steps):
    raise ValueError(f"--nlu_steps must be positive pre-training steps, got {list(nlu_steps)}")
  keep = [f"--config.ckpt.keep_steps={tuple(sorted(set(nlu_steps)))!r}"] if nlu_steps else []
  if "pretrain" in which:
    argv = [python, "-m", "lm.main", f"--config={point.config}", f"--workdir={workdir}",
            *point.override_args(), f"--config.wandb.group={study}",
            f"--config.wandb.name={point.name}", f"--config.wandb.tags={tuple(tags(point))!r}",
            *keep, *extra]
    out.append(Stage("pretrain", tuple(argv), marker("pretrain"), every_process=True))
  # The model's overrides, and a replicate's seed (the fine-tuning run's own train.seed).
  model_overrides = [f"--config.{k}={points_lib.format_value(v)}"
                     for k, v in point.overrides.items()
                     if k.startswith("model.") or k == "train.seed"]
  if "finetune" in which:
    if scale == "tiny":
      from lm import mini_suite  # pylint: disable=g-import-not-at-top
      # The suite's lengths (runlocal's own would cut its examples, and mini_suite refuses them).
      config = (f"configs/finetune.py:mixture={mini_suite.MIXTURE},"
                f"{_finetune_arg(point, scale)},{mini_suite.LENGTHS_ARG}")
      argv = [python, "-m", "lm.mini_suite", f"--workdir={workdir}",
              f"--output={_join(workdir, MINI_DIR)}", f"--config={config}", *model_overrides,
              *finetune_extra]
      out.append(Stage("mini", tuple(argv), marker("mini"), every_process=False,
                       version=(f"mini_suite={mini_suite.mini.SUITE_VERSION},"
                                f"record={mini_suite.RECORD_VERSION}"),
                       after=(marker("pretrain"),)))
    else:
      if not data_dir:
        raise ValueError("--scale=paper fine-tunes on T5's tasks: pass --data_dir=<folder "
                         "with their files> (docs/downstream.md), or --stages without "
                         "finetune.")
      for column, short, task_arg in PAPER_FINETUNES:
        config = f"configs/finetune.py:{task_arg},{_finetune_arg(point, scale)}"
        argv = [python, "-m", "lm.main", f"--config={config}",
                f"--workdir={_join(workdir, 'ft_' + short)}",
                f"--config.ckpt.init_from={workdir}", f"--config.finetune.data_dir={data_dir}",
                *model_overrides, f"--config.wandb.group={study}",
                f"--config.wandb.name={point.name}/{column}", *finetune_extra]
        out.append(Stage(f"ft_{short}", tuple(argv), marker(f"ft_{short}"),
                         every_process=True, after=(marker("pretrain"),)))
  if "evaluate" in which:
    argv = [python, "-m", "lm.evaluate", f"--workdir={workdir}", *evaluate_extra]
    out.append(Stage("evaluate", tuple(argv), marker("evaluate"), every_process=False,
                     after=(marker("pretrain"),)))
  if "nlu" in which:
    from lm.downstream import nlu_items  # pylint: disable=g-import-not-at-top
    argv = [python, "-m", "lm.evaluate", f"--workdir={workdir}", "--suite=nlu", *nlu_extra]
    items = f"nlu_items={nlu_items.ITEMS_VERSION}"  # new items: scored again
    out.append(Stage("nlu", tuple(argv), marker("nlu"), every_process=False, version=items,
                     after=(marker("pretrain"),)))
    if nlu_steps:  # one process: the items and the random initialisation made once
      steps = ",".join(str(s) for s in sorted(set(nlu_steps)))
      out.append(Stage("nlu_growth", (*argv, f"--steps={steps}"), marker("nlu_growth"),
                       every_process=False, version=items, after=(marker("pretrain"),)))
  if "accept" in which:
    from launch import accept  # pylint: disable=g-import-not-at-top
    out += accept.stages(workdir, marker, scale=scale, python=python,
                         model_arg=_finetune_arg(point, scale),
                         model_overrides=model_overrides, finetune_extra=finetune_extra)
  return out


def random_init_stage(points: Sequence[points_lib.Point], root: str, *, python: str = "python",
                      finetune_extra: Sequence[str] = ()) -> tuple[points_lib.Point, Stage]:
  """Tiny scale: the mini suite fine-tuned from random initialisation in
  `<root>/random_init/mini`, with the baseline point's model (the ★ row, else the first) and
  the points' fine-tuning arguments: the baseline the report's blank-input control shares
  each point's margin against (launch.report.RANDOM_INIT_RESULTS).

  Returns:
    (a pseudo-point named RANDOM_INIT, its one stage).

  Raises:
    ValueError: no points, or a point of the study is called RANDOM_INIT.
  """
  if not points:
    raise ValueError("random_init_stage needs the study's points.")
  if any(p.name == RANDOM_INIT for p in points):
    raise ValueError(f"point name {RANDOM_INIT!r} is taken by the random-initialisation "
                     "baseline of the mini suite; rename the point.")
  base = next((p for p in points if p.baseline), points[0])
  point = points_lib.Point(name=RANDOM_INIT, config=base.config, reference={}, overrides={
      k: v for k, v in base.overrides.items() if k.startswith("model.")})
  [stage] = stages(point, root, scale="tiny", study="", python=python,
                   finetune_extra=finetune_extra, which=["finetune"])
  argv = [a for a in stage.argv if not a.startswith("--workdir=")]
  return point, dataclasses.replace(stage, argv=(*argv, "--from_scratch"), after=())


# ----------------------------------------------------------------------------------------
# local


def _status(stage: Stage) -> tuple[bool, str]:
  """launch.stage's verdict on a stage: (finished, why it runs again or "")."""
  return stage_lib.stage_status(stage.done, stage.argv, stage.version, stage.after)


def run_point(point_stages: Sequence[Stage], log_path: str, *,
              popen: Callable[..., subprocess.Popen] = subprocess.Popen,
              children: list | None = None) -> tuple[int, str]:
  """Runs a point's stages in order (each through launch.stage); stops at the first failure.

  Returns:
    (exit status, the stage it stopped at or "" when all finished).
  """
  os.makedirs(os.path.dirname(log_path), exist_ok=True)
  for stage in point_stages:
    with open(log_path, "a") as log:
      argv = stage.command()
      log.write(f"\n$ {shlex.join(argv)}\n")
      log.flush()
      child = popen(argv, stdout=log, stderr=subprocess.STDOUT)
      if children is not None:
        children.append(child)
      returncode = child.wait()
      if children is not None:
        children.remove(child)
    if returncode:
      return returncode, stage.name
  return 0, ""


def run_local(plan: Sequence[tuple[points_lib.Point, list[Stage]]], root: str, *, parallel: int = 1,
              popen: Callable[..., subprocess.Popen] = subprocess.Popen,
              echo: Callable[[str], None] = print) -> dict[str, tuple[int, str]]:
  """Runs the points, `parallel` at a time; returns {name: (exit status, failed stage)}.

  A point that exits EXIT_PREEMPTED stops the queue (the running points finish or are
  preempted themselves); SIGTERM to this process is passed on to every running stage.
  Each point's output goes to `<root>/<name>/sweep.log`.
  """
  import signal  # pylint: disable=g-import-not-at-top
  children: list[subprocess.Popen] = []
  stop = threading.Event()
  results: dict[str, tuple[int, str]] = {}
  lock = threading.Lock()

  def one(i: int, point: points_lib.Point, point_stages: list[Stage]) -> None:
    if stop.is_set():
      return
    todo, rerun = [], set()  # a stage after one that runs runs again too (Stage.after)
    for s in point_stages:
      finished, why = _status(s)
      if finished and rerun.intersection(s.after):
        finished, why = False, "after a stage that runs again"
      if not finished:
        rerun.add(s.done)
        todo.append(s.name + (f" ({why})" if why else ""))
    log_path = os.path.join(root, point.name, "sweep.log")
    echo(f"[{i}/{len(plan)}] {point.name}: " + (f"running {', '.join(todo)} (log: {log_path})"
                                               if todo else "all stages done"))
    start = time.time()
    code, failed = run_point(point_stages, log_path, popen=popen, children=children)
    with lock:
      results[point.name] = (code, failed)
    took = f"{time.time() - start:.0f} s"
    if code == 0:
      echo(f"[{i}/{len(plan)}] {point.name}: done ({took})")
    elif code == EXIT_PREEMPTED:
      stop.set()
      echo(f"[{i}/{len(plan)}] {point.name}: preempted in {failed} after {took}; run the same "
           "command again to resume the study")
    else:
      echo(f"[{i}/{len(plan)}] {point.name}: FAILED in {failed} (exit {code}) after {took}; "
           f"see {log_path}")

  def forward(signum, frame):  # pylint: disable=unused-argument
    stop.set()
    for child in list(children):
      child.send_signal(signum)

  previous = (signal.signal(signal.SIGTERM, forward)
              if threading.current_thread() is threading.main_thread() else None)
  try:
    with concurrent.futures.ThreadPoolExecutor(max(1, parallel)) as pool:
      for future in [pool.submit(one, i, p, s) for i, (p, s) in enumerate(plan, 1)]:
        future.result()
  finally:
    if previous is not None:
      signal.signal(signal.SIGTERM, previous)
  return results


# ----------------------------------------------------------------------------------------
# slurm


def slurm_script(point: points_lib.Point, point_stages: Sequence[Stage], *, repo: str, nodes: int,
                 gpus_per_node: int, venv: str = ".venv",
                 sbatch_options: Sequence[str] = ()) -> str:
  """The sbatch script that runs a point's stages (every value shell-quoted). Raises
  ValueError on a control character in an #SBATCH option, the repository or the venv path:
  no quoting keeps a newline on an `#SBATCH` comment line from running as a command."""
  for what, value in [("--sbatch", o) for o in sbatch_options] + [
      ("the repository path", repo), ("--venv", venv)]:
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
      raise ValueError(f"{what} {value!r} holds a control character (a newline, tab, ...), "
                       "which the sbatch script cannot carry; remove it.")
  q = shlex.quote
  lines = [
      "#!/bin/bash",
      f"#SBATCH --job-name={q('lm-' + point.name)}",
      f"#SBATCH --nodes={int(nodes)}",
      f"#SBATCH --ntasks-per-node={int(gpus_per_node)}",
      f"#SBATCH --gpus-per-node={int(gpus_per_node)}",
      "#SBATCH --signal=TERM@300",
      "#SBATCH --requeue",
      *[f"#SBATCH {q(o)}" for o in sbatch_options],
      "set -uo pipefail",
      f"cd {q(repo)}",
      f"if [[ -f {q(venv + '/bin/activate')} ]]; then source {q(venv + '/bin/activate')}; fi",
      "run() {  # a stage; exit 75 (preempted, checkpoint saved) requeues the job",
      '  "$@" & pid=$!',
      "  trap 'kill -TERM \"${pid}\" 2>/dev/null || true' TERM",
      '  wait "${pid}"; status=$?',
      '  if [[ ${status} -gt 128 ]] && kill -0 "${pid}" 2>/dev/null; then wait "${pid}"; '
      "status=$?; fi",
      f'  if [[ ${{status}} -eq {EXIT_PREEMPTED} ]]; then scontrol requeue "${{SLURM_JOB_ID}}"; fi',
      '  if [[ ${status} -ne 0 ]]; then exit "${status}"; fi',
      "}",
  ]
  for stage in point_stages:
    srun = ["srun", "--kill-on-bad-exit=1"] + ([] if stage.every_process else
                                                ["--nodes=1", "--ntasks=1"])
    lines.append(f"run {shlex.join(srun + stage.command())}")
  return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------
# command line


def study_name(experiment: str) -> str:
  """The wandb group of a study: the experiment file's name."""
  return pathlib.Path(experiment).stem.rsplit(".", 1)[-1]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m launch.sweep",
                              description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("experiment", help="experiment file, e.g. experiments/t5_span_length.py")
  p.add_argument("--root", required=True, help="study dir (local or gs://), a workdir per point")
  p.add_argument("--backend", default="local", choices=BACKENDS)
  p.add_argument("--scale", default="tiny", choices=SCALES,
                 help="tiny: CPU-sized runs (runlocal) and the mini suite; paper: the "
                 "paper's sizes and T5's tasks")
  p.add_argument("--only", default="", help="comma-separated point names (default: all); "
                 "a point's name brings its --seeds replicates, `<name>_seed<k>` one alone")
  p.add_argument("--seeds", type=int, default=1,
                 help="also run the baseline point with seeds 1 .. N-1 (points <name>_seed<k>; "
                 "train.seed and data.seed = k): the report shows the seed spread")
  p.add_argument("--seeds_of", default="baseline", choices=("baseline", "all"),
                 help="which points --seeds replicates: the baseline (the seed spread) or "
                 "every point (the yardstick's contrasts take each point's seeds)")
  p.add_argument("--stages", default=",".join(DEFAULT_STAGES),
                 help=f"comma-separated stages to run, of {','.join(STAGE_NAMES)} (default "
                 "%(default)s)")
  p.add_argument("--parallel", type=int, default=1, help="local: points at once")
  p.add_argument("--extra", action="append", default=[],
                 help="argument for every pre-training run, e.g. "
                 "--extra=--config.train.num_steps=2000 (repeatable)")
  p.add_argument("--finetune_extra", action="append", default=[],
                 help="argument for every fine-tuning command, e.g. --finetune_extra=--steps=100 "
                 "(the mini suite's at tiny scale; lm.main's at paper scale; repeatable)")
  p.add_argument("--evaluate_extra", action="append", default=[],
                 help="argument for every lm.evaluate, e.g. --evaluate_extra=--num_batches=2")
  p.add_argument("--nlu_extra", action="append", default=[],
                 help="argument for every lm.evaluate --suite=nlu (the nlu stage), e.g. "
                 "--nlu_extra=--items=heldout (the held-out split's few items: a quick check)")
  p.add_argument("--nlu_steps", default="",
                 help="comma-separated earlier pre-training steps the nlu stage also scores, "
                 "e.g. 250,500 (the yardstick's growth control, in launch.report's Controls); "
                 "pre-training keeps those checkpoints (config.ckpt.keep_steps)")
  p.add_argument("--data_dir", default="", help="paper scale: T5's task files")
  p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
  p.add_argument("--no_validate", action="store_true", help="skip validating every config")
  prepare_lib.add_arguments(p)
  s = p.add_argument_group("slurm")
  s.add_argument("--nodes", type=int, default=1)
  s.add_argument("--gpus_per_node", type=int, default=8)
  s.add_argument("--sbatch", action="append", default=[],
                 help="extra #SBATCH option, e.g. --sbatch=--partition=gpu (repeatable)")
  s.add_argument("--venv", default=".venv", help="virtual environment on the cluster")
  t = p.add_argument_group("tpu")
  t.add_argument("--tpu", default="", help="TPU VM (queued resource) name")
  t.add_argument("--zone", default="")
  t.add_argument("--project", default="")
  t.add_argument("--accelerator", default="", help="e.g. v5p-128 (also lm.plan's --topology)")
  t.add_argument("--runtime", default="v2-alpha-tpuv5")
  t.add_argument("--create", action="store_true", help="create the queued resource first")
  t.add_argument("--delete", action="store_true", help="delete the pod when the study ends")
  t.add_argument("--no_plan", action="store_true", help="skip lm.plan before submitting")
  return p.parse_args(argv)


def _fail(message: str) -> int:
  print(f"error: {message}", file=sys.stderr)
  return 2


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  try:
    points = points_lib.seed_replicates(
        points_lib.collect(args.experiment, runlocal=args.scale == "tiny"), args.seeds,
        every_point=args.seeds_of == "all")
  except ValueError as e:
    return _fail(str(e))
  names = [p.name for p in points]
  wanted = [n.strip() for n in args.only.split(",") if n.strip()]
  unknown = [n for n in wanted if n not in names]
  if unknown:
    return _fail(f"--only: unknown point(s) {unknown}; expected one of {names}")
  selected = [p for p in points if not wanted or p.name in wanted or p.replicate_of in wanted]
  which = [s.strip() for s in args.stages.split(",") if s.strip()]
  remote = args.backend != "local"
  python = "python" if remote else sys.executable
  study = study_name(args.experiment)
  try:
    prepare = prepare_lib.from_args(args, _join(args.root, "prepared"))
  except ValueError as e:
    return _fail(str(e))
  prepare_stage = (None if prepare is None else
                   prepare.stage(_join(args.root, MARKER_DIR, "prepare.json"), python=python,
                                 hosts=remote))
  train_extra = [*(prepare.train_args() if prepare else []), *args.extra]
  try:
    nlu_steps = [int(s) for s in args.nlu_steps.split(",") if s.strip()]
  except ValueError:
    return _fail(f"--nlu_steps: expected comma-separated steps, e.g. 250,500; got "
                 f"{args.nlu_steps!r}")
  try:
    plan = [(p, stages(p, args.root, scale=args.scale, study=study, python=python,
                       data_dir=args.data_dir, extra=train_extra,
                       finetune_extra=args.finetune_extra, evaluate_extra=args.evaluate_extra,
                       nlu_extra=args.nlu_extra, nlu_steps=nlu_steps,
                       which=which))
            for p in selected]
  except ValueError as e:
    return _fail(str(e))
  if not args.no_validate:
    try:
      local.validate(selected)
    except ValueError as e:
      return _fail(str(e))

  if args.backend == "local":
    if args.scale == "tiny" and "finetune" in which:
      try:  # the report's baseline for the blank-input control (one per study)
        random_point, random_stage = random_init_stage(
            points, args.root, python=python, finetune_extra=args.finetune_extra)
      except ValueError as e:
        return _fail(str(e))
      plan.append((random_point, [random_stage]))
    if args.dry_run:
      if prepare_stage is not None:
        print(shlex.join(prepare_stage.command()))
      for _, point_stages in plan:
        for stage in point_stages:
          print(shlex.join(stage.command()))
      return 0
    if prepare_stage is not None:
      log_path = os.path.join(args.root, "prepare.log")
      print(f"prepare: {prepare.output} (log: {log_path})", flush=True)
      code, _ = run_point([prepare_stage], log_path)
      if code:
        return _fail(f"preparing the corpus failed (exit {code}); see {log_path}")
    results = run_local(plan, args.root, parallel=args.parallel)
    codes = [code for code, _ in results.values()]
    if EXIT_PREEMPTED in codes:
      return EXIT_PREEMPTED
    ok = sum(code == 0 for code in codes)
    print(f"{ok}/{len(plan)} points finished; report: python -m launch.report "
          f"{shlex.quote(args.experiment)} --root={shlex.quote(args.root)}")
    return 0 if ok == len(plan) else 1

  if args.backend == "slurm":
    repo = os.getcwd()
    try:  # every script first: a refused value writes and submits nothing
      scripts = [slurm_script(point, point_stages, repo=repo, nodes=args.nodes,
                              gpus_per_node=args.gpus_per_node, venv=args.venv,
                              sbatch_options=args.sbatch) for point, point_stages in plan]
    except ValueError as e:
      return _fail(str(e))
    dependency = []  # the points' jobs wait for the prepare job
    if prepare_stage is not None:
      dependency = prepare_lib.submit_slurm(prepare_stage, args, repo, dry_run=args.dry_run)
    for (point, _), script in zip(plan, scripts):
      path = os.path.join(args.root, point.name, "sweep.sbatch")
      if args.dry_run:
        print(f"# {path}\n{script}# then: {shlex.join(['sbatch', path])}")
        continue
      os.makedirs(os.path.dirname(path), exist_ok=True)
      pathlib.Path(path).write_text(script)
      subprocess.run(["sbatch", *dependency, path], check=True)
    return 0

  # tpu
  if not (args.tpu and args.zone and args.accelerator):
    return _fail("--backend=tpu needs --tpu=NAME, --zone=ZONE and --accelerator=TYPE "
                 "(e.g. v5p-128)")
  target = TpuTarget(args.tpu, args.zone, args.accelerator, project=args.project,
                     runtime=args.runtime)
  runs = [(p.name, tpu_point_command(target, s)) for p, s in plan]
  if prepare_stage is not None:  # every worker converts its share of the files first
    runs.insert(0, ("prepare", tpu_point_command(target, [prepare_stage])))
  commands = tpu_setup_commands(target, create=args.create) + [c for _, c in runs]
  if args.delete:
    commands.append(tpu_delete_command(target))
  if args.dry_run:
    if not args.no_plan:
      for point, _ in plan:
        print(shlex.join(plan_command(point, args.accelerator)))
    for c in commands:
      print(shlex.join(c))
    return 0
  if not args.no_plan:
    for point, _ in plan:
      out = subprocess.run(plan_command(point, args.accelerator), capture_output=True,
                           text=True)
      if out.returncode != 0:
        return _fail(f"point {point.name!r} does not fit or cannot be planned on "
                     f"{args.accelerator}: {(out.stderr.strip().splitlines() or [''])[-1]}")
  setup = commands[:len(tpu_setup_commands(target, create=args.create))]
  for c in setup:
    subprocess.run(c, check=True)
    if c[3] == "queued-resources":  # just created: wait until it is ready
      wait_until_active(target)
  status = 0
  for name, c in runs:
    print(f"{name}: {shlex.join(c)}", flush=True)
    status = subprocess.run(c).returncode
    if status:
      print(f"{point.name}: exit {status}; run the same command again to resume",
            file=sys.stderr)
      break
  if args.delete and status == 0:
    subprocess.run(tpu_delete_command(target), check=True)
  return status


if __name__ == "__main__":
  sys.exit(main())
