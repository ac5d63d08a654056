"""Benchmark results as JSON: the figures plus the machine, the versions and the commit.

Every benchmark takes ``--json=FILE`` and calls ``write_json(FILE, name, results, args)``,
which writes::

  {"benchmark": "bench_objectives", "results": {...}, "args": {...},
   "environment": {"time_utc", "command", "git_commit", "git_dirty", "machine": {...},
                   "versions": {...}, "load_average_start", "load_average_end"}}

Versions come from the installed package metadata (importlib.metadata), so writing them
imports nothing (an lm process never imports torch). The load averages at import of this
module and at writing tell whether the machine was busy while the figures were taken:
absolute figures from a busy machine are not comparable across runs, ratios measured side
by side in one run still are.
"""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from typing import Any

from lm import workdir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("numpy", "jax", "jaxlib", "flax", "optax", "grain", "sentencepiece", "torch",
            "transformers")
_LOAD_START = os.getloadavg() if hasattr(os, "getloadavg") else None


def _git(*args: str) -> str | None:
  try:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10,
                         check=True)
  except (OSError, subprocess.SubprocessError):
    return None
  return out.stdout.strip()


def _cpu_model() -> str:
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def versions() -> dict[str, str | None]:
  """Installed versions of the packages benchmarks use (None if not installed)."""
  out: dict[str, str | None] = {"python": platform.python_version()}
  for name in PACKAGES:
    try:
      out[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      out[name] = None
  return out


def environment() -> dict[str, Any]:
  """Machine, versions, commit, command and load of this run (JSON-serialisable)."""
  affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
  status = _git("status", "--porcelain", "--untracked-files=no")
  return {
      "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "command": " ".join([os.path.relpath(sys.argv[0], ROOT) if sys.argv[0] else "python",
                           *sys.argv[1:]]),
      "git_commit": _git("rev-parse", "HEAD"),
      "git_dirty": None if status is None else bool(status),
      "machine": {"platform": platform.platform(), "cpu": _cpu_model(),
                  "cpu_count": os.cpu_count(), "cpu_affinity": affinity},
      "versions": versions(),
      "load_average_start": list(_LOAD_START) if _LOAD_START else None,
      "load_average_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
  }


def write_json(path: str, benchmark: str, results: Any, args: Any = None) -> dict[str, Any]:
  """Writes {"benchmark", "results", "args", "environment"} to path (atomically); returns it."""
  doc = {"benchmark": benchmark, "results": results,
         "args": dict(vars(args)) if args is not None and hasattr(args, "__dict__") else args,
         "environment": environment()}
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  workdir.write_text_atomic(path, json.dumps(doc, indent=1, default=_default) + "\n")
  return doc


def _default(obj: Any) -> Any:
  try:
    import numpy as np  # pylint: disable=g-import-not-at-top
    if isinstance(obj, np.generic):
      return obj.item()
    if isinstance(obj, np.ndarray):
      return obj.tolist()
  except ImportError:
    pass
  if isinstance(obj, (set, tuple)):
    return list(obj)
  return str(obj)
