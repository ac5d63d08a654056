r"""Runs one stage of a sweep point once: skipped when its marker records this command.

  python -m launch.stage --done=runs/table7/span_03/sweep/pretrain.json -- \
      python -m lm.main --config=configs/t5.py:runlocal --workdir=runs/table7/span_03

Every backend of `launch.sweep` (this machine, SLURM, a TPU pod) runs a point's stages as
such lines, so "finished stages are skipped, interrupted ones resume" means the same thing
everywhere: the marker (a small JSON file: the command, its --version, its wall time, when it
finished) is written only after the command exits 0, and the commands resume by themselves
(lm.main from its checkpoints, the mini suite from its fine-tuning run). A marker written for
another command (say `--config.train.num_steps=30` where the stage now says 60) or another
--version (the mini suite's) does not count: the stage runs again, after one line naming the
difference, and its command continues what it can (lm.main trains on from its last step) or
refuses with its own error. A stage also runs again when a stage it comes after (--after, the
pre-training stage for the mini suite and the evaluation) was run again since its marker was
written. The interpreter's path (the command's first word) is not compared, and a module
that moved is compared by its current name (MOVED_MODULES).
Markers may live in a `gs://` bucket (etils.epath), like the workdirs. On several processes
(srun, every TPU worker) each process checks the marker, runs its part of the command and
writes the same marker.

Exit status: the command's (75 after SIGTERM, passed on to the command, means "preempted,
resume later"); 0 at once when the marker records this command; 2 for a bad invocation.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import difflib
import hashlib
import json
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from etils import epath


def _shown(args: Sequence[str]) -> str:
  text = shlex.join(args) if args else "(nothing)"
  return text if text.isprintable() else repr(text)


@dataclasses.dataclass(frozen=True)
class Stage:
  """One step of a point's pipeline.

  Attributes:
    name: "pretrain", "mini", "evaluate", "nlu", or "ft_<column>" at paper scale.
    argv: the step's command, starting with the Python interpreter's name.
    done: its marker (launch.stage writes it when argv exits 0).
    every_process: run on every process of a multi-process job (lm.main); else on one.
    version: what else the result depends on (the mini suite's version), recorded in the
      marker beside the command: a marker of another version does not count.
    after: markers of the stages it reads the output of (the pre-training run's): when one
      of them ran again since, this stage runs again too.
  """
  name: str
  argv: tuple[str, ...]
  done: str
  every_process: bool
  version: str = ""
  after: tuple[str, ...] = ()

  def command(self) -> list[str]:
    """`python -m launch.stage --done=<marker> [--version=<v>] [--after=<m> ...] -- <argv>`."""
    extra = ([f"--version={self.version}"] if self.version else []) + [
        f"--after={a}" for a in self.after]
    return [self.argv[0], "-m", "launch.stage", f"--done={self.done}", *extra, "--",
            *self.argv]



# Modules a stage's command ran before they moved, by their current names: a marker written
# before a move still records the same command.
MOVED_MODULES = {"lm.downstream.mini_suite": "lm.mini_suite"}


def command_difference(old: Sequence[str], new: Sequence[str]) -> str:
  """The arguments that differ between two commands, "old -> new; ..." (one line)."""
  matcher = difflib.SequenceMatcher(a=list(old), b=list(new), autojunk=False)
  return "; ".join(f"{_shown(old[i1:i2])} -> {_shown(new[j1:j2])}"
                   for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal")


def marker_identity(done: str) -> str | None:
  """A digest of a marker's text (None when there is none): it changes when the stage reruns."""
  marker = epath.Path(done)
  if not marker.exists():
    return None
  return hashlib.sha256(marker.read_bytes()).hexdigest()[:16]


def stage_status(done: str, argv: Sequence[str], version: str = "",
                 after: Sequence[str] = ()) -> tuple[bool, str]:
  """Whether the marker `done` records `argv` (and `version`) as finished after the current
  runs of the stages `after` names (their markers).

  Returns:
    (True, "") when it does; (False, "") when there is no marker; (False, why) when the
    marker records another command or version, an earlier run of a stage in `after`, or
    cannot be read (`why`: one line).
  """
  marker = epath.Path(done)
  if not marker.exists():
    return False, ""
  try:
    record = json.loads(marker.read_text())
    old = record["command"]
    old_version = record.get("version", "")
    old_after = record.get("after", {})
    if not (isinstance(old, list) and all(isinstance(a, str) for a in old)
            and isinstance(old_after, dict)):
      raise TypeError
  except (ValueError, KeyError, TypeError, AttributeError):
    return False, f"its marker {done} is unreadable or has no command"
  why = []
  old = [MOVED_MODULES.get(a, a) for a in old]
  if list(old[1:]) != list(argv[1:]):  # argv[0]: the interpreter's path, not compared
    why.append(f"the command changed: {command_difference(old[1:], argv[1:])}")
  if old_version != version:
    why.append(f"the version changed: {old_version or '(none)'!r} -> {version or '(none)'!r}")
  rerun = [a for a in after if old_after.get(a) != marker_identity(a)]
  if rerun:
    why.append(f"{', '.join(rerun)} changed since: a stage it comes after ran again")
  return (not why), "; ".join(why)


def run_stage(done: str, argv: Sequence[str], version: str = "",
              after: Sequence[str] = ()) -> int:
  """Runs `argv` unless `done` records it (module docstring); writes `done` when it exits 0.

  Returns:
    the exit status.
  """
  finished, why = stage_status(done, argv, version, after)
  if finished:
    print(f"stage done already ({done}): skipped", flush=True)
    return 0
  if why:
    print(f"stage marked done for something else ({why}): running it again", flush=True)
  start = time.time()
  child = subprocess.Popen(list(argv))
  previous = signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
  try:
    returncode = child.wait()
  finally:
    signal.signal(signal.SIGTERM, previous)
  if returncode == 0:
    marker = epath.Path(done)
    marker.parent.mkdir(parents=True, exist_ok=True)
    record = dict(command=list(argv), seconds=round(time.time() - start, 1),
                  finished=datetime.datetime.now().isoformat(timespec="seconds"))
    if version:
      record["version"] = version
    if after:
      record["after"] = {a: marker_identity(a) for a in after}
    marker.write_text(json.dumps(record) + "\n")
  return returncode


def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if "--" not in argv:
    print("error: usage: python -m launch.stage --done=MARKER [--version=V] [--after=MARKER] "
          "-- COMMAND [ARG ...]",
          file=sys.stderr)
    return 2
  split = argv.index("--")
  parser = argparse.ArgumentParser(prog="python -m launch.stage", description=__doc__.split(
      "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--done", required=True, help="the stage's marker file (local or gs://)")
  parser.add_argument("--version", default="",
                      help="what else the stage's result depends on (e.g. the mini suite's "
                      "version): recorded in the marker and compared like the command")
  parser.add_argument("--after", action="append", default=[],
                      help="the marker of a stage this one comes after (repeatable): when that "
                      "stage ran again since, this one runs again too")
  args = parser.parse_args(argv[:split])
  command = argv[split + 1:]
  if not command:
    print("error: no command after '--'", file=sys.stderr)
    return 2
  return run_stage(args.done, command, args.version, args.after)


if __name__ == "__main__":
  sys.exit(main())
