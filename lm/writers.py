"""Metric writers: console (tqdm bar + one line per log step), JSON lines, wandb.

    writer = make_writers(config, workdir, total_steps=config.train.num_steps, start_step=step)
    writer.write(step, {"loss": 2.1, "tokens_per_s": 1.2e4, "mfu": 0.31, ...})
    writer.write(step, {"eval_loss": 2.3}, prefix_console="eval")
    writer.close()

Only process 0 writes (other processes get a `NullWriter`). Nothing here reads
metrics from devices: pass plain floats (after `jax.device_get` and lm/metrics.compute).

wandb: mode from config.wandb.mode; "auto" means online when WANDB_API_KEY is set and
offline otherwise. The run id is stored in `<workdir>/wandb_run_id.txt`, so a resumed
run continues the same wandb run (`resume="allow"`, same id). The config is logged
with secret-looking keys (api keys, tokens, passwords, ...) removed.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import secrets
import string
import sys
import time
from collections.abc import Mapping
from typing import Any

import jax

RUN_ID_FILE = "wandb_run_id.txt"
METRICS_FILE = "metrics.jsonl"

# A key segment (split on '.', '_', '-') in this set marks a secret. Whole segments only, so
# "tokens", "tokenizer", "num_target_tokens" or "keep" are not affected.
_SECRET_SEGMENTS = {"key", "apikey", "secret", "secrets", "password", "passwd", "pwd",
                    "token", "credential", "credentials", "auth", "bearer", "private"}
_SECRET_VALUE = re.compile(r"^(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|[0-9a-f]{40}|"
                           r"gh[pous]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})$")


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
  """Appends `{"step": n, "time": unix_seconds, **metrics}` lines to a file (resumes append)."""

  def __init__(self, path: str | os.PathLike):
    self.path = os.fspath(path)
    os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
    self._file = open(self.path, "a", encoding="utf-8")  # pylint: disable=consider-using-with

  def write(self, step: int, metrics: Mapping[str, float], **kwargs) -> None:
    del kwargs
    record = {"step": int(step), "time": time.time()}
    for k, v in metrics.items():
      v = float(v)
      record[k] = v if math.isfinite(v) else None  # JSON has no NaN
    self._file.write(json.dumps(record) + "\n")
    self._file.flush()

  def close(self) -> None:
    self._file.close()


def resolve_wandb_mode(mode: str) -> str:
  """"auto" -> "online" if WANDB_API_KEY is set else "offline"; others pass through."""
  if mode == "auto":
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"
  if mode not in ("online", "offline", "disabled"):
    raise ValueError(f"wandb mode {mode!r}; choose auto, online, offline or disabled.")
  return mode


class WandbWriter:
  """Logs to wandb; the run id lives in the workdir so resumed runs continue it."""

  def __init__(self, workdir: str | os.PathLike, *, mode: str = "auto", project: str = "lm",
               entity: str | None = None, group: str | None = None, name: str | None = None,
               tags: tuple[str, ...] = (), notes: str = "",
               config: Mapping[str, Any] | None = None):
    import wandb  # pylint: disable=g-import-not-at-top
    self._wandb = wandb
    workdir = os.fspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    self.mode = resolve_wandb_mode(mode)
    id_path = os.path.join(workdir, RUN_ID_FILE)
    if os.path.exists(id_path):
      with open(id_path, encoding="utf-8") as f:
        run_id = f.read().strip()
    else:
      # wandb run ids: lowercase letters and digits (wandb's own generator is private API).
      run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
      with open(id_path, "w", encoding="utf-8") as f:
        f.write(run_id + "\n")
    self.run_id = run_id
    self.run = wandb.init(
        project=project, entity=entity or None, group=group or None,
        name=name or os.path.basename(os.path.abspath(workdir)), tags=list(tags) or None,
        notes=notes or None, id=run_id, resume="allow", mode=self.mode, dir=workdir,
        config=filter_secrets(dict(config or {})),
        settings=wandb.Settings(silent=True, console="off"))

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


def make_writers(config, workdir: str | os.PathLike, *, total_steps: int | None = None,
                 start_step: int = 0, progress_bar: bool = True) -> MultiWriter | NullWriter:
  """Console + `<workdir>/metrics.jsonl` + wandb (unless mode "disabled"), on process 0 only.

  Args:
    config: the run config (uses config.wandb and config.train.num_steps; the whole
      config, secrets filtered, is logged to wandb).
    workdir: the run directory.
    total_steps: for the progress bar / ETA; default config.train.num_steps.
    start_step: the step the run starts (or resumes) at.
    progress_bar: show the tqdm bar (off for non-interactive logs if you like).
  """
  if jax.process_index() != 0:
    return NullWriter()
  workdir = os.fspath(workdir)
  total = int(total_steps if total_steps is not None else config.train.num_steps)
  writers: list[Any] = [ConsoleWriter(total, start_step, progress_bar=progress_bar),
                        JsonlWriter(os.path.join(workdir, METRICS_FILE))]
  w = config.wandb
  if resolve_wandb_mode(w.mode) != "disabled":
    config_dict = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    writers.append(WandbWriter(workdir, mode=w.mode, project=w.project, entity=w.entity,
                               group=w.group, name=w.name, tags=tuple(w.tags), notes=w.notes,
                               config=config_dict))
  return MultiWriter(writers)
