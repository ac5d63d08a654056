r"""Runs one stage of a sweep point once: skipped when its marker exists, marked when it succeeds.

  python -m launch.stage --done=runs/table7/span_03/sweep/pretrain.json -- \
      python -m lm.main --config=configs/t5.py:runlocal --workdir=runs/table7/span_03

Every backend of `launch.sweep` (this machine, SLURM, a TPU pod) runs a point's stages as
such lines, so "finished stages are skipped, interrupted ones resume" means the same thing
everywhere: the marker (a small JSON file: the command, its wall time, when it finished) is
written only after the command exits 0, and the commands resume by themselves (lm.main from
its checkpoints, the mini suite from its fine-tuning run). Markers may live in a `gs://`
bucket (etils.epath), like the workdirs. On several processes (srun, every TPU worker) each
process checks the marker, runs its part of the command and writes the same marker.

Exit status: the command's (75 after SIGTERM, passed on to the command, means "preempted,
resume later"); 0 at once when the marker exists; 2 for a bad invocation.
"""
from __future__ import annotations

import argparse
import datetime
import json
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from etils import epath


def run_stage(done: str, argv: Sequence[str]) -> int:
  """Runs `argv` unless `done` exists; writes `done` when it exits 0. Returns the exit status."""
  marker = epath.Path(done)
  if marker.exists():
    print(f"stage done already ({done}): skipped", flush=True)
    return 0
  start = time.time()
  child = subprocess.Popen(list(argv))
  previous = signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
  try:
    returncode = child.wait()
  finally:
    signal.signal(signal.SIGTERM, previous)
  if returncode == 0:
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(dict(
        command=list(argv), seconds=round(time.time() - start, 1),
        finished=datetime.datetime.now().isoformat(timespec="seconds"))) + "\n")
  return returncode


def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if "--" not in argv:
    print("error: usage: python -m launch.stage --done=MARKER -- COMMAND [ARG ...]",
          file=sys.stderr)
    return 2
  split = argv.index("--")
  parser = argparse.ArgumentParser(prog="python -m launch.stage", description=__doc__.split(
      "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--done", required=True, help="the stage's marker file (local or gs://)")
  args = parser.parse_args(argv[:split])
  command = argv[split + 1:]
  if not command:
    print("error: no command after '--'", file=sys.stderr)
    return 2
  return run_stage(args.done, command)


if __name__ == "__main__":
  sys.exit(main())
