r"""`python -m lm.evaluate`: score a run's checkpoints and write, tabulate and log the results.

  python -m lm.evaluate --workdir=runs/t5_local [--step=N] [--score=all|span_corruption,...]
      [--num_batches=N] [--config.data.eval_batch_size=32 ...]
  python -m lm.evaluate --workdirs=runs/a,runs/b --output=table.md
  python -m lm.evaluate --workdir=runs/ft --task=glue_cola[,glue_sst2] [--split=validation]
      [--data_dir=DIR] [--max_examples=N] [--max_decode_length=M] [--rank_classification]
  python -m lm.evaluate --workdir=RUN --suite=nlu [--items=comments|heldout] [--blank_inputs]
      [--json=FILE] [--data_dir=DIR] [--step=N | --steps=250,500,750]

The work is elsewhere: held-out loss per objective and continuation scoring in
`lm/heldout.py`, downstream tasks in `lm/downstream/evaluation.py`, the neutral yardstick in
`lm/downstream/nlu.py`. Results go to `<workdir>/eval/` (process 0, atomically) and, for a
run with `wandb_run_id.txt`, to its wandb run on an `eval/step` axis. Bad input prints one
`error: ...` line and exits 2. docs/evaluation.md has the whole story.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import jax

from lm import heldout, restore
from lm import cli
from lm import config as config_lib
from lm import libtpu_env
from lm import workdir as workdir_lib
from lm.downstream import nlu_items

EVAL_DIR = "eval"


def markdown_table(results: Sequence[Mapping[str, Any]]) -> str:
  """A Markdown table of several runs' results (as written to eval/step_<N>.json).

  One row per result; columns: run, architecture, objective, step, then per evaluated
  objective its cross-entropy and accuracy, and the continuation's nll per token and bits
  per byte. A value a run does not have is "–".
  """
  objective_names: list[str] = []
  has_cont = False
  for r in results:
    for name in r["results"]:
      if name == heldout.CONTINUATION:
        has_cont = True
      elif name not in objective_names:
        objective_names.append(name)
  header = ["run", "architecture", "objective", "step"]
  for name in objective_names:
    header += [f"{name} xent", f"{name} acc"]
  if has_cont:
    header += ["cont. nll/token", "cont. bits/byte"]

  def fmt(value):
    return "–" if value is None or not math.isfinite(value) else f"{value:.4f}"

  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for r in results:
    row = [os.path.basename(os.path.normpath(r["workdir"])), r["architecture"],
           r["objective"], str(r["step"])]
    for name in objective_names:
      m = r["results"].get(name) or {}
      row += [fmt(m.get("cross_entropy")), fmt(m.get("accuracy"))]
    if has_cont:
      m = r["results"].get(heldout.CONTINUATION) or {}
      row += [fmt(m.get("nll_per_token")), fmt(m.get("bits_per_byte"))]
    lines.append("| " + " | ".join(row) + " |")
  return "\n".join(lines) + "\n"


def heldout_settings(r: restore.Restored) -> heldout.HeldOutSettings:
  """What held-out evaluation takes from the restored run's config.json (read here, at the
  command, so that lm.heldout takes typed parts)."""
  c = r.config
  if c is None:
    raise ValueError("evaluate needs a training run (restore.load_run), not an HF directory.")
  return heldout.HeldOutSettings(
      spec=config_lib.data_spec(c),
      step_kwargs=config_lib.eval_step_kwargs(c) if "loss" in c else {},
      eval_steps=int(c.train.eval_steps), batch_size=config_lib.eval_batch_size(c))


def results_path(workdir: str, step: int) -> str:
  return os.path.join(workdir, EVAL_DIR, f"step_{step}.json")


def write_results(result: Mapping[str, Any]) -> str | None:
  """Writes `<workdir>/eval/step_<N>.json` atomically (process 0 only); returns the path."""
  if jax.process_index() != 0:
    return None
  path = results_path(result["workdir"], result["step"])
  target = workdir_lib.as_path(path)  # local or gs://
  target.parent.mkdir(parents=True, exist_ok=True)
  workdir_lib.write_text_atomic(
      target, json.dumps(_json_safe(result), indent=2, sort_keys=True) + "\n")
  return path


def _json_safe(tree):
  if isinstance(tree, Mapping):
    return {k: _json_safe(v) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return [_json_safe(v) for v in tree]
  if isinstance(tree, float) and not math.isfinite(tree):
    return None
  return tree


def flat_metrics(result: Mapping[str, Any]) -> dict[str, float]:
  """{"eval/<name>/<metric>": value} of the numeric results (for wandb)."""
  out = {}
  for name, values in result["results"].items():
    for k, v in values.items():
      if isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None:
        out[f"eval/{name}/{k}"] = float(v)
  return out


def log_to_wandb(result: Mapping[str, Any], config, mode: str | None = None) -> bool:
  """Logs to the run's wandb run (if it has wandb_run_id.txt); returns True if logged."""
  from lm import writers  # pylint: disable=g-import-not-at-top
  workdir = result["workdir"]
  if (jax.process_index() != 0
      or not (workdir_lib.as_path(workdir) / writers.RUN_ID_FILE).exists()):
    return False
  w = config.wandb
  mode = mode or w.mode
  if writers.resolve_wandb_mode(mode) == "disabled":
    return False
  writer = writers.WandbWriter(workdir, mode=mode, project=w.project, entity=w.entity,
                               group=w.group, name=w.name, tags=tuple(w.tags or ()),
                               notes=w.notes or "", config=None)
  try:
    if writer.run is None:
      return False
    writer.run.define_metric("eval/step")
    writer.run.define_metric("eval/*", step_metric="eval/step")
    writer.run.log({"eval/step": int(result["step"]), **flat_metrics(result)})
  finally:
    writer.close()
  return True


# ---------------------------------------------------------------------------------------
# Command line.

def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      prog="python -m lm.evaluate",
      description="Evaluate checkpoints of lm runs: held-out loss, accuracy and perplexity "
                  "per objective, and continuation scoring (per token and bits per byte) "
                  "that compares every architecture and tokenizer. Writes "
                  "<workdir>/eval/step_<N>.json. Extra --config.<field>=<value> flags "
                  "override the run's config (not the model's shapes).",
      epilog="Example: python -m lm.evaluate --workdir=runs/t5_local --score=all")
  p.add_argument("--workdir", help="the run directory to evaluate")
  p.add_argument("--workdirs", help="comma-separated run directories (with --output)")
  p.add_argument("--output", help="write a Markdown table of the results here")
  p.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
  p.add_argument("--score", default="all",
                 help="all (default: own objective, span_corruption, prefix_lm, full_lm, "
                      "continuation) or a comma list of objectives / 'own' / 'continuation'")
  p.add_argument("--num_batches", type=int, default=-1,
                 help="held-out batches per objective; -1 (default) = the run's "
                      "train.eval_steps, as training evaluated; 0 = the whole held-out split")
  p.add_argument("--prefix_chars", type=int, default=heldout.DEFAULT_PREFIX_CHARS,
                 help="continuation scoring: characters of context (cut at whitespace)")
  p.add_argument("--continuation_chars", type=int, default=heldout.DEFAULT_CONTINUATION_CHARS,
                 help="continuation scoring: characters scored (cut at whitespace)")
  p.add_argument("--num_examples", type=int, default=heldout.DEFAULT_NUM_EXAMPLES,
                 help="continuation scoring: held-out documents used")
  t = p.add_argument_group("downstream tasks (instead of --score)")
  t.add_argument("--task", help="comma-separated task names (lm.downstream.task.task_names())")
  t.add_argument("--split", default="validation", help="the tasks' split (default validation)")
  t.add_argument("--data_dir", default=None,
                 help="where the tasks' files are (default: the run's config.finetune.data_dir)")
  t.add_argument("--max_examples", type=int, default=None,
                 help="evaluate only the first N examples of each task")
  t.add_argument("--max_decode_length", type=int, default=None,
                 help="most generated tokens (default: the run's data.targets_length)")
  t.add_argument("--batch_size", type=int, default=None,
                 help="rows per decode call (default: the run's eval batch size)")
  t.add_argument("--rank_classification", action="store_true",
                 help="rank the task's choices by log-likelihood instead of decoding")
  n = p.add_argument_group("the neutral yardstick (instead of --score)")
  n.add_argument("--suite", choices=("nlu",), default=None,
                 help="nlu: probes and native minimal pairs (docs/yardstick.md); writes "
                      "<workdir>/eval/nlu_step_<N>.json")
  n.add_argument("--items", choices=nlu_items.ITEM_SOURCES, default=None,
                 help="--suite=nlu's item source: comments, the standard library's comments "
                      "(the default without --data_dir); heldout, the held-out documents of "
                      "--data_dir (its default) or of the embedded corpus")
  n.add_argument("--blank_inputs", action="store_true",
                 help="--suite=nlu's blank-input control: probe texts and pair inputs empty")
  n.add_argument("--json", default=None, help="--suite=nlu: also write the result here")
  n.add_argument("--steps", default=None,
                 help="--suite=nlu: comma-separated checkpoint steps, each scored and written "
                      "in turn by one process (the growth control: the items and the random "
                      "initialisation are made once), e.g. 250,500,750")
  p.add_argument("--mesh_shape", default=None,
                 help="(data, fsdp, tensor) sizes, e.g. '-1,1,1' (default: all devices on data)")
  p.add_argument("--wandb_mode", default=None, choices=("auto", "online", "offline", "disabled"),
                 help="wandb mode for logging into the run's wandb run (default: the run's)")
  p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                 help="tqdm progress bars (default: when stderr is a terminal)")
  g = p.add_argument_group("multi-process (as lm.main; any process count, not only "
                           "training's)")
  g.add_argument("--distributed", action="store_true",
                 help="call jax.distributed.initialize() with auto-detection (TPU pod, "
                      "SLURM; implied there and by --coordinator_address)")
  g.add_argument("--coordinator_address", help="host:port of process 0")
  g.add_argument("--num_processes", type=int, help="processes in the job")
  g.add_argument("--process_id", type=int, help="this process's index")
  g.add_argument("--cpu_collectives", default="gloo", choices=("gloo", "mpi", "none"),
                 help="collectives implementation for multi-process CPU runs")
  return p


def flag_problem(args: argparse.Namespace) -> str | None:
  """What is wrong with the numeric flags (out of range), or None."""
  if args.step is not None and args.step < 0:
    return f"--step must be >= 0 (a checkpoint step), got {args.step}"
  if args.steps is not None:
    if args.step is not None:
      return "--step and --steps: pass one of them"
    if not re.fullmatch(r"\d+(,\d+)*", args.steps):
      return f"--steps must be comma-separated checkpoint steps, e.g. 250,500; got {args.steps!r}"
  if args.num_batches < -1:
    return (f"--num_batches must be >= 1, or 0 (the whole held-out split) or -1 (the run's "
            f"train.eval_steps), got {args.num_batches}")
  for name in ("prefix_chars", "continuation_chars", "num_examples", "max_examples",
               "max_decode_length", "batch_size", "num_processes"):
    value = getattr(args, name)
    if value is not None and value < 1:
      return f"--{name} must be >= 1, got {value}"
  if args.process_id is not None and not (
      0 <= args.process_id < (args.num_processes or args.process_id + 1)):
    return (f"--process_id must be in [0, --num_processes), got {args.process_id} "
            f"(--num_processes={args.num_processes})")
  return None


def evaluate_tasks(r: restore.Restored, names: Sequence[str], *, split: str = "validation",
                   data_dir: str | None = None, max_examples: int | None = None,
                   max_decode_length: int | None = None, batch_size: int | None = None,
                   rank_classification: bool = False, progress: bool = False
                   ) -> dict[str, Any]:
  """Evaluates a restored model on downstream tasks ({task: evaluate_task result})."""
  from lm.downstream import evaluation  # pylint: disable=g-import-not-at-top
  from lm.downstream import task as task_lib  # pylint: disable=g-import-not-at-top
  d = r.config.data if r.config is not None else None
  ft = r.config.get("finetune") if r.config is not None else None
  if data_dir is None and ft is not None:
    data_dir = ft.get("data_dir")
  max_decode_length = max_decode_length or (int(d.targets_length) if d is not None else 64)
  batch_size = batch_size or (config_lib.eval_batch_size(r.config) if d is not None else 32)
  inputs_length = int(d.inputs_length) if d is not None and d.inputs_length > 0 else None
  out = {}
  for name in names:
    task = task_lib.get_task(name)
    out[name] = evaluation.evaluate_task(
        r.model, r.params, r.tokenizer, task, split, data_dir=data_dir, batch_size=batch_size,
        max_decode_length=max_decode_length, mesh=r.mesh, rules=r.rules,
        max_examples=max_examples, inputs_length=inputs_length,
        rank_classification=rank_classification, progress=progress, framing=r.framing)
    logging.info("%s: %s", name, out[name]["metrics"])
  return out


def _run_tasks(args, workdir: str, overrides: Sequence[str], progress: bool) -> None:
  """`--task`: restore, evaluate each task, write eval/tasks_step_<N>.json, log to wandb."""
  from lm.downstream import evaluation  # pylint: disable=g-import-not-at-top
  from lm.downstream import task as task_lib  # pylint: disable=g-import-not-at-top
  # config.finetune.tasks' form (a rate is allowed and unused); before restoring: a typo
  # fails fast.
  names = [name for name, _ in task_lib.parse_tasks(
      args.task, empty="--task is empty; pass task names, e.g. --task=glue_cola.")]
  if args.max_examples is not None and args.max_examples <= 0:
    raise ValueError(f"--max_examples must be positive, got {args.max_examples}.")
  r = restore.load_run(workdir, step=args.step, overrides=overrides, mesh_shape=args.mesh_shape)
  outputs = evaluate_tasks(r, names, split=args.split, data_dir=args.data_dir,
                           max_examples=args.max_examples,
                           max_decode_length=args.max_decode_length, batch_size=args.batch_size,
                           rank_classification=args.rank_classification, progress=progress)
  path = evaluation.write_results(r.workdir, r.step, outputs, architecture=r.architecture,
                                  extra={"source": r.source})
  result = {"workdir": r.workdir, "step": r.step,
            "results": {n: o["metrics"] for n, o in outputs.items()}}
  log_to_wandb(result, r.config, args.wandb_mode)
  if jax.process_index() == 0:
    print(json.dumps({"written": str(path), **flat_metrics(result)}, indent=1))


def _run_suite(args, workdirs: Sequence[str], overrides: Sequence[str], progress: bool) -> int:
  """`--suite=nlu`: lm.downstream.nlu.run_suite on one run, then a short table."""
  from lm.downstream import nlu  # pylint: disable=g-import-not-at-top
  if args.task is not None or args.workdirs or args.output:
    raise ValueError("--suite=nlu takes one --workdir, without --task, --workdirs or --output.")
  if importlib.util.find_spec("sklearn") is None:
    raise ValueError("--suite=nlu fits its probes with scikit-learn, which is not installed: "
                     "pip install -e '.[downstream]'.")
  nlu.item_source(args.items, args.data_dir)  # a bad --items fails before the run loads
  steps = [args.step] if args.steps is None else [int(s) for s in args.steps.split(",")]
  if args.json and len(steps) > 1:
    raise ValueError("--json writes one result: pass it with one step, not --steps.")
  memo: dict = {}  # the items and the random initialisation's scores, for every step
  for step in steps:
    r = restore.load_run(workdirs[0], step=step, overrides=overrides,
                         mesh_shape=args.mesh_shape)
    result = nlu.run_suite(r, data_dir=args.data_dir, items=args.items,
                           blank_inputs=args.blank_inputs, json_path=args.json,
                           progress=progress, memo=memo,
                           batch_size=args.batch_size or config_lib.eval_batch_size(r.config))
    if jax.process_index() == 0:
      print(f"wrote {result['written']}" + (f" and {args.json}" if args.json else ""))
      print(nlu.table(result))
  return 0


def run(argv: Sequence[str] | None = None) -> int:
  """Command-line entry: returns the exit status (2 on bad input)."""
  parser = _parser()
  args, rest = parser.parse_known_args(argv)
  overrides = [a for a in rest if a.startswith("--config.")]
  unknown = [a for a in rest if not a.startswith("--config.")]
  try:
    if unknown:
      raise ValueError(f"unknown arguments {unknown}; see --help.")
    if flag_problem(args):
      raise ValueError(flag_problem(args))
    cli.initialize_distributed(
        distributed=args.distributed, coordinator_address=args.coordinator_address,
        num_processes=args.num_processes, process_id=args.process_id,
        cpu_collectives=args.cpu_collectives)
    if bool(args.workdir) == bool(args.workdirs):
      raise ValueError("pass exactly one of --workdir=RUN or --workdirs=RUN1,RUN2,...")
    workdirs = [args.workdir] if args.workdir else [w for w in args.workdirs.split(",") if w]
    if args.output is None and args.workdirs:
      raise ValueError("--workdirs needs --output=table.md")
    for name in ("prefix_chars", "continuation_chars", "num_examples"):
      if getattr(args, name) <= 0:
        raise ValueError(f"--{name} must be positive, got {getattr(args, name)}.")
    for w in workdirs:  # fail before any work on a missing run
      if not workdir_lib.as_path(w).is_dir():   # local or gs://
        raise restore.RunNotFoundError(f"workdir {workdir_lib.as_path(w)} does not exist.")
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    if args.suite is not None:
      return _run_suite(args, workdirs, overrides, progress)
    if args.blank_inputs or args.json or args.items or args.steps:
      raise ValueError("--blank_inputs, --items, --json and --steps go with --suite=nlu.")
    if args.task is not None:
      if args.output:
        raise ValueError("--output (a Markdown table) is not supported with --task.")
      for w in workdirs:
        _run_tasks(args, w, overrides, progress)
      return 0
    results = []
    for w in workdirs:
      r = restore.load_run(w, step=args.step, overrides=overrides, mesh_shape=args.mesh_shape)
      names = heldout.parse_score(args.score, r.config.data.objective)
      result = heldout.evaluate_run(r, heldout_settings(r), score=names,
                                    num_batches=args.num_batches, prefix_chars=args.prefix_chars,
                                    continuation_chars=args.continuation_chars,
                                    num_examples=args.num_examples, progress=progress)
      path = write_results(result)
      log_to_wandb(result, r.config, args.wandb_mode)
      results.append(result)
      if jax.process_index() == 0:
        print(json.dumps({"written": path, **flat_metrics(result)}, indent=1))
    if args.output and jax.process_index() == 0:
      workdir_lib.write_text_atomic(workdir_lib.as_path(args.output), markdown_table(results))
      print(f"wrote {args.output}")
  except cli.BAD_INPUT_ERRORS as e:
    return cli.bad_input_exit(e)
  return 0


def main() -> None:
  libtpu_env.quiet_libtpu_off_tpu()
  logging.getLogger().setLevel(logging.WARNING)
  for noisy in ("absl", "jax._src", "orbax", "etils", "grain"):
    logging.getLogger(noisy).setLevel(logging.ERROR)
  sys.exit(run())


if __name__ == "__main__":
  main()
