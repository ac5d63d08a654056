"""The prepare stage of a sweep: the study's corpus tokenized once before its points train.

`launch.sweep --prepare_input=GLOB --prepare_tokenizer=PATH` runs `python -m lm.data.prepare`
(docs/data.md) as the study's first stage and points every pre-training run at its output
(`--config.data.format=prepared --config.data.paths=(<output>,)`); this module holds that
stage's command, its arguments and its SLURM job. The stage's marker and the backends'
plumbing are launch/stage.py's and launch/sweep.py's.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import shlex
import subprocess
from collections.abc import Sequence

from launch.stage import Stage


@dataclasses.dataclass(frozen=True)
class Prepare:
  """The study's corpus, tokenized once (`python -m lm.data.prepare`) before the points train.

  Attributes:
    inputs: files or globs (local or gs://).
    tokenizer: the SentencePiece model.
    output: the prepared dataset's folder.
    format: prepare's --format ("auto": from the extensions).
    workers: worker processes per host.
    extra: more prepare arguments (e.g. --text_field=content).
  """
  inputs: tuple[str, ...]
  tokenizer: str
  output: str
  format: str = "auto"
  workers: int = 1
  extra: tuple[str, ...] = ()

  def stage(self, done: str, *, python: str = "python", hosts: bool = False):
    """The prepare stage (a Stage with marker `done`); `hosts`: run on every process
    of a multi-host job, each converting its share of the files (`--process_index=auto`)."""
    argv = [python, "-m", "lm.data.prepare", *(f"--input={i}" for i in self.inputs),
            f"--tokenizer={self.tokenizer}", f"--output={self.output}",
            f"--format={self.format}", f"--workers={int(self.workers)}", "--no_progress",
            # every host waits for the others, so the stage ends when the dataset is complete
            *(["--process_index=auto", "--wait_s=172800"] if hosts else []), *self.extra]
    return Stage("prepare", tuple(argv), done, every_process=hosts)

  def train_args(self) -> list[str]:
    """The arguments that point a pre-training run at the prepared dataset."""
    return ["--config.data.format=prepared", f"--config.data.paths={(self.output,)!r}"]


def slurm_script(stage, *, repo: str, nodes: int, venv: str = ".venv",
                 sbatch_options: Sequence[str] = ()) -> str:
  """The sbatch script of the prepare stage: one task per node, each converting its share
  of the files with the stage's --workers processes."""
  q = shlex.quote
  lines = ["#!/bin/bash", "#SBATCH --job-name=lm-prepare", f"#SBATCH --nodes={int(nodes)}",
           "#SBATCH --ntasks-per-node=1", *[f"#SBATCH {q(o)}" for o in sbatch_options],
           "set -euo pipefail", f"cd {q(repo)}",
           f"if [[ -f {q(venv + '/bin/activate')} ]]; then source {q(venv + '/bin/activate')}; fi",
           shlex.join(["srun", "--kill-on-bad-exit=1"] + stage.command())]
  return "\n".join(lines) + "\n"


def submit_slurm(stage, args: argparse.Namespace, repo: str, *, dry_run: bool) -> list[str]:
  """Writes `<root>/prepare.sbatch` and submits it (prints both with dry_run); returns the
  sbatch option that makes the points' jobs wait for it."""
  script = slurm_script(stage, repo=repo, nodes=args.nodes, venv=args.venv,
                        sbatch_options=args.sbatch)
  path = os.path.join(args.root, "prepare.sbatch")
  if dry_run:
    print(f"# {path}\n{script}# then: sbatch --parsable {shlex.quote(path)}; the points' "
          "jobs with --dependency=afterok:<its job id>")
    return ["--dependency=afterok:<prepare job id>"]
  os.makedirs(os.path.dirname(path), exist_ok=True)
  pathlib.Path(path).write_text(script)
  job = subprocess.run(["sbatch", "--parsable", path], check=True, capture_output=True,
                       text=True).stdout.strip().split(";")[0]
  return [f"--dependency=afterok:{job}"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
  """launch.sweep's --prepare_* arguments."""
  d = parser.add_argument_group("prepare (tokenize the study's corpus once, docs/data.md)")
  d.add_argument("--prepare_input", action="append", default=[],
                 help="corpus files or globs (repeatable); every point trains from them")
  d.add_argument("--prepare_tokenizer", default="", help="SentencePiece model to tokenize with")
  d.add_argument("--prepare_output", default="",
                 help="the prepared dataset's folder (default <root>/prepared)")
  d.add_argument("--prepare_format", default="auto", help="lm.data.prepare --format")
  d.add_argument("--prepare_workers", type=int, default=1, help="worker processes per host")
  d.add_argument("--prepare_extra", action="append", default=[],
                 help="more lm.data.prepare arguments, e.g. --prepare_extra=--text_field=body")


def from_args(args: argparse.Namespace, default_output: str) -> Prepare | None:
  """The study's Prepare from launch.sweep's arguments (None without --prepare_input).

  Raises:
    ValueError: --prepare_input without --prepare_tokenizer, or the other way round.
  """
  if not args.prepare_input:
    if args.prepare_tokenizer or args.prepare_output:
      raise ValueError("--prepare_tokenizer / --prepare_output need --prepare_input=GLOB")
    return None
  if not args.prepare_tokenizer:
    raise ValueError("--prepare_input needs --prepare_tokenizer=PATH (the SentencePiece model "
                     "every point trains with)")
  return Prepare(tuple(args.prepare_input), args.prepare_tokenizer,
                 args.prepare_output or default_output, format=args.prepare_format,
                 workers=args.prepare_workers, extra=tuple(args.prepare_extra))
