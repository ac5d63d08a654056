"""Metric writers: console (tqdm bar + one line per log step), JSON lines, wandb.

    writer = make_writers(settings.wandb, workdir, total_steps=settings.loop.num_steps,
                          start_step=step, record=settings.record)
    writer.write(step, {"loss": 2.1, "tokens_per_s": 1.2e4, "mfu": 0.31, ...})
    writer.write(step, {"eval_loss": 2.3}, prefix_console="eval")
    writer.close()

Only process 0 writes (other processes get a `NullWriter`). Nothing here reads
metrics from devices: pass plain floats (after `jax.device_get` and `lm.metrics.compute`).
Files go through `etils.epath` (lm/workdir.py), so `gs://` workdirs work. How a resumed run's
metrics.jsonl and wandb run continue, wandb's modes and files, and the secrets filter:
docs/robustness.md, 'Workdirs, local or remote', 'Preemption, Ctrl-C and logs' and
'Secrets and wandb'.
"""
from __future__ import annotations

import dataclasses

import json
import logging
import math
import os
import re
import secrets
import string
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import jax
from etils import epath

from lm import workdir as workdir_lib

RUN_ID_FILE = "wandb_run_id.txt"
METRICS_FILE = "metrics.jsonl"

# A key segment (split on '.', '_', '-') in this set marks a secret. Whole segments only, so
# "tokens", "tokenizer", "num_target_tokens" or "keep" are not affected.
_SECRET_SEGMENTS = {"key", "apikey", "secret", "secrets", "password", "passwd", "pwd",
                    "token", "credential", "credentials", "auth", "bearer", "private"}
_SECRET_VALUE = re.compile(r"^(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|[0-9a-f]{40}|"
                           r"gh[pous]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})$")


_SECRET_SUBSTRING = re.compile(
    r"(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|\b[0-9a-f]{40}\b|gh[pous]_[A-Za-z0-9]{20,}|"
    r"AKIA[0-9A-Z]{16}|(?i:(?:api[_-]?key|token|secret|password|passwd)\s*[=:]\s*\S+))")
_RUN_ID = re.compile(r"^[a-z0-9]{1,64}$")
FILTERED = "[filtered]"


def scrub_text(text: str) -> str:
  """`text` with secret-looking substrings (hf_..., sk-..., api_key=...) replaced."""
  return _SECRET_SUBSTRING.sub(FILTERED, text)


def is_secret_key(key: str) -> bool:
  """True for config keys that look like credentials (api_key, hf_token, db.password, ...)."""
  segments = [s for s in re.split(r"[._\-]", key.lower()) if s]
  return any(s in _SECRET_SEGMENTS for s in segments) or "apikey" in key.lower().replace("_", "")


def filter_secrets(tree: Any) -> Any:
  """Copy of a nested dict/list without secret-looking keys or secret-looking string values."""
  if isinstance(tree, Mapping):
    return {k: filter_secrets(v) for k, v in tree.items()
            if not is_secret_key(str(k))
            and not (isinstance(v, str) and _SECRET_VALUE.match(v))}
  if isinstance(tree, (list, tuple)):
    return type(tree)(filter_secrets(v) for v in tree
                      if not (isinstance(v, str) and _SECRET_VALUE.match(v)))
  if isinstance(tree, str):
    return scrub_text(tree)
  return tree


def _format_eta(seconds: float) -> str:
  if not math.isfinite(seconds) or seconds < 0:
    return "?"
  seconds = int(seconds)
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _format_value(key: str, value: float) -> str:
  if key in ("mfu",) and math.isfinite(value):
    return f"{100 * value:.1f}%"
  if key.endswith("tokens_per_s") or key.endswith("per_s"):
    return f"{value:.3g}"
  if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e9):
    return f"{int(value)}"
  return f"{value:.4g}"


class NullWriter:
  """Does nothing (processes other than 0)."""

  def write(self, step: int, metrics: Mapping[str, float], **kwargs) -> None:
    del step, metrics, kwargs

  def close(self) -> None:
    pass


class ConsoleWriter:
  """A tqdm progress bar over steps and one plain line per `write`.

  The line shows step/total, the metrics given (loss, accuracy, tokens/s, MFU, ...) and
  an ETA from the average time per step since the writer was created.
  """

  def __init__(self, total_steps: int, start_step: int = 0, *, stream=None,
               keys: tuple[str, ...] = ("loss", "accuracy", "learning_rate", "grad_norm",
                                        "tokens_per_s", "mfu"),
               progress_bar: bool = True):
    self.total_steps = int(total_steps)
    self.start_step = int(start_step)
    self.keys = keys
    self.stream = stream or sys.stderr
    self._t0 = time.perf_counter()
    self._bar = None
    if progress_bar:
      from tqdm import tqdm  # pylint: disable=g-import-not-at-top
      self._bar = tqdm(total=self.total_steps, initial=self.start_step, file=self.stream,
                       dynamic_ncols=True, leave=False, unit="step")

  def eta_seconds(self, step: int) -> float:
    done = step - self.start_step
    if done <= 0:
      return float("nan")
    return (time.perf_counter() - self._t0) / done * (self.total_steps - step)

  def format_line(self, step: int, metrics: Mapping[str, float], prefix: str = "train") -> str:
    width = len(str(self.total_steps))
    parts = [f"{prefix} step {step:>{width}}/{self.total_steps}"]
    shown = [k for k in self.keys if k in metrics] + sorted(
        k for k in metrics if k not in self.keys and prefix != "train")
    for k in shown:
      parts.append(f"{k} {_format_value(k, float(metrics[k]))}")
    if prefix == "train":
      parts.append(f"eta {_format_eta(self.eta_seconds(step))}")
    return " | ".join(parts)

  def write(self, step: int, metrics: Mapping[str, float], prefix_console: str = "train",
            **kwargs) -> None:
    del kwargs
    line = self.format_line(step, metrics, prefix_console)
    if self._bar is not None:
      self._bar.n = min(step, self.total_steps)
      self._bar.refresh()
      self._bar.write(line, file=self.stream)
    else:
      print(line, file=self.stream, flush=True)

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()


class JsonlWriter:
  """Writes `{"step": n, "time": unix_seconds, **metrics}` lines to a file (local or remote).

  Args:
    path: the file (e.g. `<workdir>/metrics.jsonl`); str, os.PathLike or epath.Path.
    start_step: the step a resumed run starts from; lines of later steps already in the
      file (written after that checkpoint by a run that was then killed) are dropped,
      since the resumed run logs those steps again. None keeps every line.
  """

  def __init__(self, path: str | os.PathLike, start_step: int | None = None):
    self.path = workdir_lib.as_path(path)
    self.path.parent.mkdir(parents=True, exist_ok=True)
    self._remote = workdir_lib.is_remote(self.path)
    lines = self.path.read_text(encoding="utf-8").splitlines() if self.path.exists() else []
    kept = [l for l in lines if l.strip() and _keep_line(l, start_step)]
    if len(kept) != len(lines):
      logging.info("%s: dropped %d lines after step %s (logged again on resume)", self.path,
                   len(lines) - len(kept), start_step)
      workdir_lib.write_text_atomic(self.path, "".join(l + "\n" for l in kept))
    self._lines = kept if self._remote else None
    self._file = None if self._remote else self.path.open("a", encoding="utf-8")

  def write(self, step: int, metrics: Mapping[str, float], **kwargs) -> None:
    del kwargs
    record = {"step": int(step), "time": time.time()}
    for k, v in metrics.items():
      v = float(v)
      record[k] = v if math.isfinite(v) else None  # JSON has no NaN
    line = json.dumps(record)
    if self._file is not None:
      self._file.write(line + "\n")
      self._file.flush()
    else:  # object stores cannot append: rewrite the whole (small) file
      self._lines.append(line)
      workdir_lib.write_text_atomic(self.path, "".join(l + "\n" for l in self._lines))

  def close(self) -> None:
    if self._file is not None:
      self._file.close()


def _keep_line(line: str, start_step: int | None) -> bool:
  try:
    step = json.loads(line)["step"]
  except (ValueError, KeyError, TypeError):
    return False  # a line cut short by a kill
  return start_step is None or step <= start_step


def resolve_wandb_mode(mode: str) -> str:
  """"auto" -> "online" if WANDB_API_KEY is set else "offline"; others pass through."""
  if mode == "auto":
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"
  if mode not in ("online", "offline", "disabled"):
    raise ValueError(f"unknown wandb mode {mode!r}; "
                     f"expected one of {['auto', 'online', 'offline', 'disabled']}.")
  return mode


WANDB_SERVICE_ENV = "WANDB_SERVICE"


def read_or_create_run_id(workdir: epath.Path) -> str:
  """The wandb run id stored in `<workdir>/wandb_run_id.txt`, created (atomically) if absent.

  An empty or malformed file (not 1-64 lowercase letters / digits) is replaced by a new
  id with a warning: wandb would refuse every resume with it.
  """
  path = workdir / RUN_ID_FILE
  if path.exists():
    run_id = path.read_text(encoding="utf-8").strip()
    if _RUN_ID.match(run_id):
      return run_id
    logging.warning("%s holds %r, not a wandb run id; starting a new wandb run id.", path,
                    run_id[:80])
  # wandb run ids: lowercase letters and digits (wandb's own generator is private API).
  run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
  workdir_lib.write_text_atomic(path, run_id + "\n")
  return run_id


def own_wandb_service(environ=None) -> None:
  """Forgets a wandb service inherited from a parent process, so this process starts its own.

  wandb leaves its service's address in WANDB_SERVICE ("<version>-<pid>-<transport>-...",
  the pid of the process that started it), and child processes join that service. A run
  killed (SIGKILL) while joined stays registered there as "in use", so the same command
  run again could not resume its wandb run. A service this process started is kept.
  """
  environ = os.environ if environ is None else environ
  parts = environ.get(WANDB_SERVICE_ENV, "").split("-")
  if len(parts) > 1 and parts[1] != str(os.getpid()):
    del environ[WANDB_SERVICE_ENV]


class WandbWriter:
  """Logs to wandb; the run id lives in the workdir so resumed runs continue it."""

  def __init__(self, workdir: str | os.PathLike, *, mode: str = "auto", project: str = "lm",
               entity: str | None = None, group: str | None = None, name: str | None = None,
               tags: tuple[str, ...] = (), notes: str = "",
               config: Mapping[str, Any] | None = None):
    import wandb  # pylint: disable=g-import-not-at-top
    self._wandb = wandb
    workdir = workdir_lib.as_path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    self.mode = resolve_wandb_mode(mode)
    self.run_id = read_or_create_run_id(workdir)
    if workdir_lib.is_remote(workdir):  # wandb writes local files only
      wandb_dir = os.environ.get("WANDB_DIR") or os.path.join(
          tempfile.gettempdir(), "lm-wandb", self.run_id)
      logging.info("remote workdir: wandb's files go to %s", wandb_dir)
    else:
      wandb_dir = os.fspath(workdir)
    os.makedirs(wandb_dir, exist_ok=True)
    self.dir = wandb_dir
    own_wandb_service()
    self.run = wandb.init(
        project=project, entity=entity or None, group=scrub_text(group) if group else None,
        name=scrub_text(name) if name else workdir.name,
        tags=[scrub_text(t) for t in tags] or None, notes=scrub_text(notes) if notes else None,
        id=self.run_id, resume="allow", mode=self.mode, dir=wandb_dir,
        config=filter_secrets(dict(config or {})),
        # No command line (it may hold secrets), git state, code or host metadata.
        settings=wandb.Settings(silent=True, console="off", x_disable_meta=True,
                                disable_git=True, disable_code=True, save_code=False))

  def write(self, step: int, metrics: Mapping[str, float], **kwargs) -> None:
    del kwargs
    if self.run is not None:
      self.run.log({k: float(v) for k, v in metrics.items()}, step=int(step))

  def close(self) -> None:
    if self.run is not None:
      self.run.finish()


class MultiWriter:
  """Fans `write` out to several writers."""

  def __init__(self, writers):
    self.writers = list(writers)

  def write(self, step: int, metrics: Mapping[str, float], **kwargs) -> None:
    for w in self.writers:
      w.write(step, metrics, **kwargs)

  def close(self) -> None:
    for w in self.writers:
      try:
        w.close()
      except Exception:  # noqa: BLE001 - closing one writer must not lose the others
        logging.exception("closing %s failed", type(w).__name__)


@dataclasses.dataclass(frozen=True)
class WandbConfig:
  """config.wandb typed (lm.config.wandb_config): where wandb logs ("disabled": nowhere;
  "auto": online when a key is set, else offline) and the run's name, group, tags, notes."""
  mode: str = "disabled"
  project: str | None = None
  entity: str | None = None
  group: str | None = None
  name: str | None = None
  tags: tuple[str, ...] = ()
  notes: str | None = None


def make_writers(wandb: WandbConfig, workdir: str | os.PathLike, *, total_steps: int,
                 start_step: int = 0, progress_bar: bool = True,
                 record: Mapping[str, Any] | None = None) -> MultiWriter | NullWriter:
  """Console + `<workdir>/metrics.jsonl` + wandb (unless mode "disabled"), on process 0 only.

  Args:
    wandb: the run's wandb settings.
    workdir: the run directory.
    total_steps: for the progress bar / ETA (train.num_steps).
    start_step: the step the run starts (or resumes) at.
    progress_bar: show the tqdm bar (off for non-interactive logs if you like).
    record: the resolved config, logged to wandb as the run's config (secrets filtered).

  metrics.jsonl lines of steps after `start_step` (left by a run killed after its last
  checkpoint) are dropped: this run logs those steps again.
  """
  if jax.process_index() != 0:
    return NullWriter()
  workdir = workdir_lib.as_path(workdir)
  writers: list[Any] = [ConsoleWriter(int(total_steps), start_step, progress_bar=progress_bar),
                        JsonlWriter(workdir / METRICS_FILE, start_step=start_step)]
  w = wandb
  if resolve_wandb_mode(w.mode) != "disabled":
    writers.append(WandbWriter(workdir, mode=w.mode, project=w.project, entity=w.entity,
                               group=w.group, name=w.name, tags=tuple(w.tags), notes=w.notes,
                               config=dict(record or {})))
  return MultiWriter(writers)
