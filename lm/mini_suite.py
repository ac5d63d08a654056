"""The mini suite end to end: fine-tune a pre-trained run on it, report the "mini" column.

  python -m lm.mini_suite --workdir=/tmp/t5_local --output=/tmp/mini_t5_local
  python -m lm.mini_suite --workdir=/tmp/t5_local --output=/tmp/mini_scratch --from_scratch
  python -m lm.mini_suite --suite=acceptability --workdir=RUN --output=DIR
                                         # the yardstick's fine-tuned instrument instead

One fine-tuning run on an equal mixture of the suite's tasks (`mini.SUITE`), from the run's
parameters or (--from_scratch) random initialisation; each task's validation split scored
by rank classification (--decode: greedy decoding), and again with blank inputs (the
blank-input control). Writes `<output>/finetune/` and `<output>/mini_suite.json`;
`predictions` reads a finished run's per-example answers back (launch/accept.py).
The tasks live in lm/downstream/mini.py. The settings, the scoring and every field of
mini_suite.json: docs/downstream_mini.md, 'The command'.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import pathlib
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import ml_collections

from lm import cli
from lm import config as config_lib
from lm import workdir as workdir_lib
from lm.downstream import mini, nlu_accept


@dataclasses.dataclass(frozen=True)
class Suite:
  """A set of tasks fine-tuned together and scored by one column.

  Attributes:
    name: the column, and its key in RESULTS_FILE ("mini": the decoder-fluency column).
    tasks: the registered tasks (lm.downstream.task), an equal mixture.
    average: {task: metrics} -> the column (raises ValueError when a task is missing).
    chance: (task, data_dir) -> {metric: chance score in %}.
    version: the version of the tasks' items (RESULTS_FILE's `suite_version`).
  """
  name: str
  tasks: tuple[str, ...]
  average: Callable[[Mapping[str, Mapping[str, float]]], float]
  chance: Callable[[str, str | None], dict[str, float]]
  version: int

  @property
  def mixture(self) -> str:
    """configs/finetune.py's `mixture` arg: the tasks at equal rates."""
    return "+".join(f"{name}:1" for name in self.tasks)

  @property
  def default_config(self) -> str:
    """The fine-tuning config of the suite on the runlocal model."""
    return f"configs/finetune.py:mixture={self.mixture},runlocal,{LENGTHS_ARG}"


# The suites' inputs and targets reach mini.MAX_TOKENS = 128 tokens; runlocal's fine-tuning
# lengths (64 / 16) would cut line B of a pair and all but the first line of an unshuffle.
LENGTHS_ARG = f"inputs_length={mini.MAX_TOKENS},targets_length={mini.MAX_TOKENS}"
SUITES = {
    "mini": Suite("mini", tuple(mini.HEADLINE), mini.mini_average,
                  lambda name, data_dir: mini.chance_level(name, "validation", data_dir),
                  mini.SUITE_VERSION),
    # The yardstick's third instrument (docs/yardstick.md): acceptability after fine-tuning.
    "acceptability": Suite("acceptability", nlu_accept.TASKS, nlu_accept.average,
                           lambda name, data_dir: nlu_accept.chance_level(name),
                           nlu_accept.VERSION),
}
MINI = SUITES["mini"]
TASKS, MIXTURE, DEFAULT_CONFIG = MINI.tasks, MINI.mixture, MINI.default_config
RESULTS_FILE = "mini_suite.json"
# What RESULTS_FILE holds beyond the suite's scores; 2: the blank-input control. A sweep's
# mini stage runs again when it changes (reusing its fine-tuning run).
RECORD_VERSION = 2


def load_config(spec: str = DEFAULT_CONFIG) -> ml_collections.ConfigDict:
  """`get_config(arg)` of a config file given as "path.py[:arg]" (as lm.main's --config)."""
  path, sep, arg = spec.partition(":")
  if not os.path.isfile(path):
    raise ValueError(f"--config={spec}: no config file {path!r} (run from the repository "
                     "root, or pass --config=PATH/configs/finetune.py:...).")
  module_spec = importlib.util.spec_from_file_location("_lm_mini_suite_config", path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(arg) if sep else module.get_config()


def suite_config(base: ml_collections.ConfigDict, init_from: str | None, *, steps: int = 0,
                 max_eval_examples: int = 0, learning_rate: float = 0.0,
                 decode: bool = False, suite: Suite = MINI) -> ml_collections.ConfigDict:
  """The fine-tuning config of one suite run.

  Args:
    base: a configs/finetune.py config whose tasks are `suite`'s.
    init_from: the pre-trained run (or None: random initialisation).
    steps: fine-tuning steps (0 = the base config's); the tasks are scored at the last one.
    max_eval_examples: score the first N validation examples per task (0 = all).
    learning_rate: the constant fine-tuning learning rate (0 = the config's).
    decode: score every task by greedy decoding (T5's protocol for every task) instead of
      rank classification of each example's choices (the suite's default).
    suite: which suite (SUITES; default the mini suite).

  Returns:
    a locked copy with ckpt.init_from, train.num_steps, one task evaluation at the end and
    finetune.rank_classification = not decode.

  Raises:
    ValueError: not a mini-suite fine-tuning config, or its data lengths cut the suite's
      examples (inputs_length or targets_length below mini.MAX_TOKENS).
  """
  if not base.get("finetune"):
    raise ValueError("mini_suite: the config has no `finetune` section; pass "
                     "--config=configs/finetune.py:mixture=...,runlocal.")
  names = [part.split(":")[0] for part in base.finetune.tasks.split(",")]
  missing = [name for name in suite.tasks if name not in names]
  if missing:
    raise ValueError(f"mini_suite: the config's tasks {names} lack {missing}; pass "
                     f"--config=configs/finetune.py:mixture={suite.mixture},...")
  short = {k: int(base.data[k]) for k in ("inputs_length", "targets_length")
           if int(base.data[k]) < mini.MAX_TOKENS}
  if short:
    raise ValueError(f"mini_suite: the config's {short} would cut the suite's examples (up "
                     f"to {mini.MAX_TOKENS} tokens); pass inputs_length={mini.MAX_TOKENS},"
                     f"targets_length={mini.MAX_TOKENS} in --config (as "
                     f"{suite.default_config}).")
  config = ml_collections.ConfigDict(config_lib.derive(base).to_dict())
  if steps > 0:
    config.train.num_steps = int(steps)
  n = int(config.train.num_steps)
  config.finetune.eval_tasks = ",".join(suite.tasks)
  config.finetune.eval_every = n        # score once, at the last step
  config.ckpt.every_steps = n
  config.finetune.max_eval_examples = int(max_eval_examples)
  config.finetune.rank_classification = not decode
  if learning_rate > 0:
    config.schedule.base_lr = float(learning_rate)
  config.ckpt.init_from = init_from or None
  config.lock()
  return config


def suite_of(config: ml_collections.ConfigDict) -> Suite:
  """The suite a `suite_config(...)` config scores: the one whose tasks are its
  `finetune.eval_tasks` (suite_config sets them; the config is the fact's one owner).

  Raises:
    ValueError: the config's eval tasks are no suite's (not a suite_config result).
  """
  eval_tasks = tuple(t for t in str(config.finetune.get("eval_tasks") or "").split(",") if t)
  for suite in SUITES.values():
    if eval_tasks == suite.tasks:
      return suite
  raise ValueError(f"mini_suite: the config's finetune.eval_tasks {','.join(eval_tasks)!r} "
                   f"are no suite's ({', '.join(SUITES)}); build the config with "
                   "mini_suite.suite_config(base, ..., suite=SUITES[name]).")


def summarize(results_json: dict[str, Any], suite: Suite = MINI) -> dict[str, Any]:
  """The suite's summary from a fine-tuning run's `eval/tasks_step_<N>.json` record."""
  tasks = suite.tasks
  results = {name: results_json["results"][name] for name in tasks}
  return {"results": results, suite.name: suite.average(results), "suite": suite.name,
          "num_examples": {name: results_json["tasks"][name]["num_examples"] for name in tasks},
          "method": {name: results_json["tasks"][name]["method"] for name in tasks},
          "step": results_json["step"]}


def predictions(output: str | os.PathLike, suite: Suite = MINI
                ) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
  """(RESULTS_FILE's summary, {task: its validation predictions, one dict per example}) of
  the suite run in `output` (`run`), each task's predictions checked against its accuracy.

  Raises:
    ValueError: no RESULTS_FILE, another suite's or items' version, a predictions file
      missing, or predictions whose accuracy is not the summary's.
  """
  from lm.downstream import evaluation  # pylint: disable=g-import-not-at-top
  output = workdir_lib.as_path(output)   # local or gs://
  path = output / RESULTS_FILE
  if not path.is_file():
    raise ValueError(f"no {path}: run `python -m lm.mini_suite --suite={suite.name} "
                     f"--output={output} ...` first.")
  summary = json.loads(path.read_text())
  if (summary.get("suite"), summary.get("suite_version")) != (suite.name, suite.version):
    raise ValueError(f"{path} scores suite {summary.get('suite')!r} version "
                     f"{summary.get('suite_version')}, not {suite.name!r} version "
                     f"{suite.version}; rerun the suite into a new --output.")
  out = {}
  for name in suite.tasks:
    task_path = evaluation.predictions_path(output / "finetune", summary["steps"], name,
                                            "validation")  # the split `run` scores
    if not task_path.is_file():
      raise ValueError(f"no {task_path}: the suite's fine-tuning run wrote no predictions of "
                       f"{name}; remove {output} and run the suite again.")
    rows = [json.loads(line) for line in task_path.read_text().splitlines() if line.strip()]
    got = 100.0 * sum(r["prediction"] == r["target"] for r in rows) / max(len(rows), 1)
    want = summary["results"][name].get("accuracy")
    if want is None or abs(got - want) > 1e-6:
      raise ValueError(f"{task_path}: {got:.4f} % of its predictions are right, but "
                       f"{path} says {want}; remove {output} and run the suite again.")
    out[name] = rows
  return summary, out


def final_train_loss(metrics_path: str | os.PathLike, last: int = 5) -> float | None:
  """Mean training loss over the last `last` logged train steps of a run's metrics.jsonl.

  At tiny scale this is the clearest sign of pre-training (docs/downstream_mini.md "Does it
  measure anything?"); None when no train step was logged.
  """
  path = pathlib.Path(metrics_path)
  if not path.is_file():
    return None
  losses = [row["loss"] for row in map(json.loads, path.read_text().splitlines())
            if "loss" in row and "grad_norm" in row]
  return float(sum(losses[-last:]) / len(losses[-last:])) if losses else None


def score_blank_inputs(config: ml_collections.ConfigDict, workdir: str | os.PathLike,
                       step: int) -> dict[str, dict[str, float]]:
  """The blank-input control: every task of `config`'s suite (`suite_of`) scored again with
  "" as each input.

  The fine-tuned run's checkpoint at `step` is restored and each task's validation examples
  (the first finetune.max_eval_examples, as the suite's own scores) are scored as the suite
  scores them (`finetune.rank_classification`) with `mini.blank_inputs`: the same targets
  and choices, no input (an encoder reads only EOS; a decoder-only model scores each choice
  as a full LM would, lm/data/converters.py).

  Returns:
    {task: metrics}, as `results`.
  """
  from lm import restore  # pylint: disable=g-import-not-at-top
  from lm.downstream import finetune  # pylint: disable=g-import-not-at-top
  from lm.downstream import task as task_lib  # pylint: disable=g-import-not-at-top
  suite = suite_of(config)
  ft = config.finetune
  settings = config_lib.finetune_settings(config).evaluation
  r = restore.load_run(str(workdir), step=step)
  out = {}
  for name in suite.tasks:
    task = task_lib.get_task(name)
    examples = task.examples(ft.eval_split, ft.data_dir or None)
    if int(ft.max_eval_examples):
      examples = examples[:int(ft.max_eval_examples)]
    blank_task, blank = mini.blank_inputs(task, examples)
    out[name] = finetune.evaluate_one_task(settings, r.model, r.params, r.tokenizer,
                                           blank_task, blank, mesh=r.mesh,
                                           rules=r.rules)["metrics"]
  return out


def _other_suite(workdir: pathlib.Path, config: ml_collections.ConfigDict) -> str | None:
  """The task mixture of an earlier fine-tuning run in `workdir` when it is not `config`'s
  (a run made before the suite changed, whose results would be another suite's), else
  None."""
  path = workdir / "config.json"
  if not path.is_file():
    return None
  tasks = json.loads(path.read_text()).get("finetune", {}).get("tasks")
  return tasks if tasks != config.finetune.tasks else None


def run(config: ml_collections.ConfigDict, output: str | os.PathLike, *,
        log=print) -> dict[str, Any]:
  """Fine-tunes (or resumes) `config` in `<output>/finetune`, writes and returns the summary.

  Args:
    config: suite_config(...)'s result; its eval tasks name the suite (`suite_of`).
    output: a directory (created).
    log: progress lines go here.

  Returns:
    the summary written to `<output>/mini_suite.json` (module docstring).
  """
  from lm import train  # pylint: disable=g-import-not-at-top
  from lm import validate  # pylint: disable=g-import-not-at-top
  from lm.downstream import evaluation  # pylint: disable=g-import-not-at-top
  from lm.downstream import finetune  # pylint: disable=g-import-not-at-top
  start = time.time()
  suite = suite_of(config)
  output = pathlib.Path(output)
  workdir = output / "finetune"
  init = "pretrained" if config.ckpt.init_from else "scratch"
  steps = int(config.train.num_steps)
  stale = _other_suite(workdir, config)
  if stale:
    raise ValueError(f"mini_suite: {workdir} holds a fine-tuning run on other tasks "
                     f"({stale}), not the current suite ({config.finetune.tasks}); remove "
                     f"{output} (or pass another --output) and run again.")
  log(f"mini_suite: fine-tuning on {', '.join(suite.tasks)} for {steps} steps from "
      f"{config.ckpt.init_from or 'random initialisation'} in {workdir}")
  train.train_and_evaluate(validate.validate(config), str(workdir), finetune.PARTS)
  path = evaluation.results_path(str(workdir), steps)
  if not pathlib.Path(path).is_file():
    raise ValueError(f"mini_suite: the fine-tuning run in {workdir} has no task results at "
                     f"step {steps} ({path}); remove {workdir} and run again.")
  summary = summarize(json.loads(pathlib.Path(path).read_text()), suite)
  log("mini_suite: the blank-input control (every input replaced by \"\")")
  blank = score_blank_inputs(config, workdir, steps)
  column, blank_column = suite.name, f"{suite.name}_blank"
  summary.update({
      "blank": blank, blank_column: suite.average(blank),
      "init": init, "init_from": config.ckpt.init_from, "steps": steps,
      "suite_version": suite.version, "record_version": RECORD_VERSION,
      "learning_rate": float(config.schedule.base_lr),
      "train_loss": final_train_loss(workdir / "metrics.jsonl"),
      "chance": {name: suite.chance(name, config.finetune.data_dir or None)
                 for name in suite.tasks},
      "seconds": round(time.time() - start, 1)})
  output.mkdir(parents=True, exist_ok=True)
  (output / RESULTS_FILE).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
  for name in suite.tasks:
    metrics = ", ".join(f"{k} {v:.1f}" for k, v in summary["results"][name].items())
    blank_metrics = ", ".join(f"{v:.1f}" for v in summary["blank"][name].values())
    log(f"  {name:15s} {metrics} (n={summary['num_examples'][name]}; blank inputs "
        f"{blank_metrics})")
  log(f"mini_suite: {column} {summary[column]:.1f} (blank inputs {summary[blank_column]:.1f}), "
      "fine-tuning loss "
      f"{summary['train_loss'] or float('nan'):.3f} ({init}, {steps} steps, "
      f"{summary['seconds']:.0f}s) -> {output / RESULTS_FILE}")
  return summary


def main(argv: list[str] | None = None) -> int:
  """The command line (module docstring); returns the exit status (2: bad input)."""
  from lm import libtpu_env  # pylint: disable=g-import-not-at-top
  libtpu_env.quiet_libtpu_off_tpu()
  import argparse  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(
      prog="python -m lm.mini_suite",
      description="Fine-tune a pre-trained run on a suite (an equal mixture of its five "
      "tasks: the mini suite, or the yardstick's acceptability tasks), score each task's "
      f"validation split and write the suite's column to OUTPUT/{RESULTS_FILE}.")
  parser.add_argument("--workdir", help="the pre-trained run (its checkpoints); required "
                      "unless --from_scratch")
  parser.add_argument("--output", required=True, help="directory for the fine-tuning run "
                      f"and {RESULTS_FILE}")
  parser.add_argument("--from_scratch", action="store_true",
                      help="fine-tune from random initialisation (the baseline)")
  parser.add_argument("--steps", type=int, default=0,
                      help="fine-tuning steps (default: the config's, 300 for runlocal)")
  parser.add_argument("--max_eval_examples", type=int, default=0,
                      help="score the first N validation examples per task (0 = all)")
  parser.add_argument("--learning_rate", type=float, default=0.0,
                      help="constant fine-tuning learning rate (default: the config's)")
  parser.add_argument("--decode", action="store_true",
                      help="score every task by greedy decoding instead of rank "
                      "classification of its choices")
  parser.add_argument("--suite", choices=sorted(SUITES), default="mini",
                      help="mini: the decoder-fluency column (docs/downstream_mini.md); "
                      "acceptability: the yardstick's fine-tuned instrument, one sentence "
                      "-> true/false per pair phenomenon (docs/yardstick.md)")
  parser.add_argument("--config", default=None,
                      help="fine-tuning config file[:arg] (default: the suite's, for mini "
                      f"{DEFAULT_CONFIG}); its model "
                      "must be the pre-trained run's. --config.<field>=<value> overrides a "
                      "field (e.g. --config.model.num_layers=1 --config.train.seed=1)")
  args, rest = parser.parse_known_args(argv)
  overrides = [a for a in rest if a.startswith("--config.")]
  unknown = [a for a in rest if not a.startswith("--config.")]
  if unknown:
    parser.error(f"unrecognized arguments: {' '.join(unknown)}")
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger().setLevel(logging.INFO)  # as lm.main: the run's own progress lines
  for noisy in ("absl", "jax._src", "orbax", "etils", "grain"):
    logging.getLogger(noisy).setLevel(logging.WARNING)
  from lm import hostmem  # pylint: disable=g-import-not-at-top
  hostmem.retain_for_cpu()  # before JAX starts its threads (as lm.main)
  if not args.from_scratch and not args.workdir:
    return cli.bad_input_exit("pass --workdir=PRETRAINED_RUN (or --from_scratch for the "
                              "random-init baseline).")
  try:
    suite = SUITES[args.suite]
    base = load_config(args.config or suite.default_config)
    if overrides:
      base = config_lib.apply_overrides(base, overrides)
    config = suite_config(base,
                          None if args.from_scratch else args.workdir, steps=args.steps,
                          max_eval_examples=args.max_eval_examples,
                          learning_rate=args.learning_rate, decode=args.decode,
                          suite=suite)
    run(config, args.output)
  except (ValueError, FileNotFoundError) as e:
    return cli.bad_input_exit(e)
  return 0


if __name__ == "__main__":
  sys.exit(main())
