"""The TPU backend of `launch.sweep`: a Cloud TPU VM (queued resource) driven through gcloud.

The commands that create or reuse the pod, copy this checkout to every worker and install
it, run a point's stages on all workers at once, plan a point for the accelerator and delete
the pod. Each is built as an argument list (data, never shell text) and run by launch.sweep.
"""
from __future__ import annotations

import dataclasses
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from launch import points as points_lib


@dataclasses.dataclass(frozen=True)
class TpuTarget:
  """A Cloud TPU VM (queued resource) and where lm lives on its workers."""
  name: str
  zone: str
  accelerator: str
  project: str = ""
  runtime: str = "v2-alpha-tpuv5"
  remote_dir: str = "lm"

  def flags(self) -> list[str]:
    return [f"--zone={self.zone}"] + ([f"--project={self.project}"] if self.project else [])

  def ssh(self, remote: str) -> list[str]:
    """gcloud ... ssh --worker=all --command=<remote>: `remote` runs on every worker."""
    return ["gcloud", "compute", "tpus", "tpu-vm", "ssh", self.name, *self.flags(),
            "--worker=all", f"--command={remote}"]


def tpu_setup_commands(target: TpuTarget, *, create: bool) -> list[list[str]]:
  """Create (or reuse) the pod, then copy this checkout to every worker and install it."""
  out = []
  if create:
    out.append(["gcloud", "compute", "tpus", "queued-resources", "create", target.name,
                f"--node-id={target.name}", f"--accelerator-type={target.accelerator}",
                f"--runtime-version={target.runtime}", *target.flags()])
  d = shlex.quote(target.remote_dir)
  out.append(target.ssh(f"mkdir -p {d}"))
  out.append(["gcloud", "compute", "tpus", "tpu-vm", "scp", "--recurse", *target.flags(),
              "--worker=all", "./lm", "./configs", "./experiments", "./launch",
              "./pyproject.toml", "./README.md", f"{target.name}:{target.remote_dir}/"])
  out.append(target.ssh(f"cd {d} && python3 -m venv .venv && . .venv/bin/activate && "
                        "pip install -q -e '.[tpu,downstream]'"))
  return out


def tpu_point_command(target: TpuTarget, point_stages: Sequence[Any]) -> list[str]:
  """One ssh to every worker that runs the point's stages in order (each quoted).

  `point_stages`: launch.stage.Stage objects (anything with `command() -> list[str]`).
  """
  remote = " && ".join([f"cd {shlex.quote(target.remote_dir)}", ". .venv/bin/activate",
                        *(shlex.join(s.command()) for s in point_stages)])
  return target.ssh(remote)


def tpu_delete_command(target: TpuTarget) -> list[str]:
  return ["gcloud", "compute", "tpus", "queued-resources", "delete", target.name,
          *target.flags(), "--force", "--quiet"]


def plan_command(point: points_lib.Point, accelerator: str, python: str = sys.executable
                 ) -> list[str]:
  """lm.plan of a point's pre-training step on `accelerator` (JSON on stdout's last line)."""
  return [python, "-m", "lm.plan", f"--config={point.config}", f"--topology={accelerator}",
          *point.override_args()]


def wait_until_active(target: TpuTarget, *, timeout_s: float = 3600, poll_s: float = 30,
                      run: Callable[..., Any] = subprocess.run) -> None:
  """Polls the queued resource until ACTIVE (raises RuntimeError on FAILED or timeout)."""
  deadline = time.time() + timeout_s
  while True:
    out = run(["gcloud", "compute", "tpus", "queued-resources", "describe", target.name,
               *target.flags(), "--format=value(state.state)"], capture_output=True, text=True,
              check=True).stdout.strip()
    if out == "ACTIVE":
      return
    if out in ("FAILED", "SUSPENDED"):
      raise RuntimeError(f"queued resource {target.name} is {out}")
    if time.time() > deadline:
      raise RuntimeError(f"queued resource {target.name} not ACTIVE after {timeout_s:.0f} s "
                         f"(state {out or 'unknown'})")
    time.sleep(poll_s)
