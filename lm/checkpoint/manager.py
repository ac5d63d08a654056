"""The CheckpointManager: orbax step directories of train state + data-iterator state + metadata.

    ckpt = CheckpointManager(workdir / "checkpoints", every_steps=1000, keep=3,
                             signature=run_signature(config.model.to_dict(), abstract_state))
    state, data_state = ckpt.restore_or_none(abstract_state, shardings) or (fresh_state, None)
    ckpt.save(step, state, data_state=it.get_state(), metrics={"eval_loss": 2.1})
    ckpt.save(final_step, state, data_state=..., force=True); ckpt.close()

Restoring checks the signature (signature.py) and the checksums, and falls back to the newest
intact step (integrity.py, shared with loading.py's read-only loaders). The items of a step
directory, the fallback and the save errors: docs/robustness.md, 'Checkpoint integrity and
fallback' and 'Checkpoint directory problems'.
"""
from __future__ import annotations

import base64
import logging
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils
from etils import epath
from orbax.checkpoint import checkpoint_managers as ocp_managers

from lm.checkpoint.integrity import (CheckpointDamagedError, IncompatibleCheckpointError,
                                     describe_damaged, drop_late_callbacks, newest_intact,
                                     read_step_meta, restore_or_damaged, short_reason,
                                     verify_checksums)
from lm.checkpoint.signature import shape_mismatch, state_checksums


class CheckpointSaveError(OSError):
  """Writing a checkpoint failed (directory unwritable, disk full, async save error)."""


def check_writable(directory: str | epath.Path) -> None:
  """Creates `directory` if needed and writes / removes a probe file in it.

  Raises:
    CheckpointSaveError: one line naming the directory and the OS error.
  """
  directory = epath.Path(directory)
  probe = directory / f".write-probe-{os.getpid()}"
  try:
    directory.mkdir(parents=True, exist_ok=True)
    probe.write_text("ok")
    probe.unlink()
  except OSError as e:
    raise CheckpointSaveError(
        f"checkpoint directory {directory} is not writable ({e.strerror or e}); fix its "
        "permissions or free space, or choose another --workdir.") from None


def _encode_data_state(data_state: Any) -> Any:
  if isinstance(data_state, bytes):
    return {"__bytes_b64__": base64.b64encode(data_state).decode("ascii")}
  return data_state


def _decode_data_state(data_state: Any) -> Any:
  if isinstance(data_state, dict) and set(data_state) == {"__bytes_b64__"}:
    return base64.b64decode(data_state["__bytes_b64__"])
  return data_state


def abstract_target(abstract_state: Any, shardings: Any | None) -> Any:
  """`abstract_state` with `shardings` attached (the restore target), or as it is."""
  if shardings is None:
    return abstract_state
  return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                      abstract_state, shardings)


def item_handlers() -> dict[str, ocp.CheckpointHandler]:
  """The orbax handlers of a step's three items (state, data, meta)."""
  return {"state": ocp.PyTreeCheckpointHandler(), "data": ocp.JsonCheckpointHandler(),
          "meta": ocp.JsonCheckpointHandler()}


def _save_reason(e: BaseException) -> str:
  """A failed save's cause in a few words: the OS error tensorstore reports at the end of
  its message ("No space left on device [os_error_code='28']"), else `short_reason`."""
  found = re.search(r"([^:]+) \[os_error_code='(\d+)'\]", str(e))
  if found:
    return f"{found.group(1).strip()} (errno {found.group(2)}) writing the checkpoint files"
  return short_reason(e)


class _FailedSaveLog(logging.Filter):
  """Catches the errors orbax's save threads log while an async save is pending.

  A failed write (disk full) is logged by several orbax threads, each with a traceback
  ("_SignalingThread.run() raised an exception", "Failed to run ... Commit operations",
  "Save Finalize thread failed", "Checkpointer failed: ... Skipping finalization"), and
  the finalize thread may swallow it and skip the step. The manager raises the first one
  as one CheckpointSaveError line at the next step instead, so these records are dropped.
  Installed on the "absl" logger (orbax logs through absl) while the manager is open;
  it only acts while `pending` (set before a save is handed to orbax, whose commit
  threads may fail before its save() returns, until the step is seen committed) and,
  once a save failed, for good.
  """

  def __init__(self):
    super().__init__()
    self.pending = False
    self.error: BaseException | None = None
    self._logger = logging.getLogger("absl")
    # First in line: the first filter that drops a record ends it, and an older manager's
    # filter stays after its failed save (for late records); a newer save's are ours.
    self._logger.filters.insert(0, self)

  def filter(self, record: logging.LogRecord) -> bool:
    # After a failure, orbax's threads may log it late (after the save stopped pending):
    # those records are dropped too; the manager reports the failure once.
    active = self.pending or self.error is not None
    if not active or record.levelno < logging.ERROR or "orbax" not in record.pathname:
      return True
    if self.error is None:
      self.error = (record.exc_info[1] if record.exc_info and record.exc_info[1] else
                    OSError(record.getMessage()))
    return False

  def remove(self) -> None:
    self._logger.removeFilter(self)


class CheckpointManager:
  """Saves every N steps (async), keeps the last K (+ the best B by an eval metric, + the
  steps asked for by keep_steps)."""

  def __init__(self, directory: str | epath.Path, *, every_steps: int = 1000, keep: int = 3,
               keep_best: int = 0, best_metric: str = "eval_loss", best_mode: str = "min",
               keep_steps: Sequence[int] = (), async_save: bool = True,
               signature: Mapping[str, Any] | None = None):
    """Opens (creating if needed) a checkpoint directory.

    Args:
      directory: where step directories go (use `<workdir>/checkpoints`).
      every_steps: `save()` without force saves when step % every_steps == 0.
      keep: keep the `keep` most recent checkpoints (0 or None = all).
      keep_best: additionally keep this many best checkpoints by `metrics[best_metric]`
        (0 = off); checkpoints saved without that metric are not counted as best.
      best_metric, best_mode: the metric name passed to `save(metrics=...)` and
        "min" (loss) or "max" (accuracy).
      keep_steps: steps also saved (whatever every_steps says) and always kept.
      async_save: write in a background thread (call `wait()`/`close()` before exit).
      signature: from `run_signature(...)`; written with every save and checked by
        restore. None skips the check (e.g. read-only inspection).
    """
    if every_steps <= 0:
      raise ValueError(f"ckpt.every_steps must be > 0, got {every_steps}.")
    if best_mode not in ("min", "max"):
      raise ValueError(f"best_mode must be 'min' or 'max', got {best_mode!r}.")
    if any(int(s) <= 0 for s in keep_steps):
      raise ValueError(f"ckpt.keep_steps must be positive steps, got {tuple(keep_steps)}.")
    self.keep_steps = frozenset(int(s) for s in keep_steps)
    self.directory = epath.Path(directory)
    self.every_steps = int(every_steps)
    self.signature = dict(signature) if signature is not None else None
    self.best_metric = best_metric
    self.restored_extra: dict[str, Any] = {}
    if jax.process_index() == 0:
      check_writable(self.directory)
    policies = [ocp_managers.LatestN(n=keep if keep else None)]
    if keep_best:
      policies.append(ocp_managers.BestN(
          get_metric_fn=lambda m: m[best_metric], reverse=best_mode == "min",
          n=keep_best, keep_checkpoints_without_metrics=False))
    if self.keep_steps:
      policies.append(ocp_managers.CustomSteps(steps=sorted(self.keep_steps)))
    options = ocp.CheckpointManagerOptions(
        preservation_policy=ocp_managers.AnyPreservationPolicy(policies),
        enable_async_checkpointing=async_save, create=True, cleanup_tmp_directories=True)
    self._manager = ocp.CheckpointManager(self.directory, options=options,
                                          item_handlers=item_handlers())
    # The newest async save not yet seen committed, and the error orbax's finalize thread
    # logged for a failed one (orbax logs it and skips the step instead of raising).
    self._unconfirmed: int | None = None
    self._save_failed = False
    self._failed_saves = _FailedSaveLog()
    # A failed async write abandons the save's other writes, and each reports "Event loop
    # is closed" when it finishes, before the failure reaches the loop: drop those (only).
    drop_late_callbacks()

  # -- queries -------------------------------------------------------------------------
  def latest_step(self) -> int | None:
    """The newest fully written step, or None."""
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    """Fully written steps still on disk, ascending."""
    return sorted(self._manager.all_steps())

  def step_dir(self, step: int) -> epath.Path:
    return self.directory / str(step)

  # -- saving --------------------------------------------------------------------------
  def should_save(self, step: int) -> bool:
    return step % self.every_steps == 0 or step in self.keep_steps

  def save(self, step: int, state: Any, *, data_state: Any = None,
           metrics: Mapping[str, float] | None = None, force: bool = False,
           extra: Mapping[str, Any] | None = None) -> bool:
    """Saves `state` (+ data iterator state) at `step` if due (or `force`).

    Args:
      step: the train step (usually int(state.step)).
      state: TrainState (sharded jax arrays; every process must call save).
      data_state: JSON-able iterator state or bytes (grain's get_state()); None = {}.
      metrics: e.g. {"eval_loss": 2.3}, used by keep_best.
      force: save even when not due (final save, preemption).
      extra: small JSON-able dict stored with the data state and given back as
        `restored_extra` by restore (e.g. the partial logging window).

    Returns:
      True if a save was started.

    Raises:
      CheckpointSaveError: an earlier async save failed, or this one could not start.
    """
    if not force and not self.should_save(step):
      return False
    if self._unconfirmed is not None:  # orbax would wait for it too: see how it ended first
      try:
        self._manager.wait_until_finished()
      except Exception as e:  # noqa: BLE001 - raised as CheckpointSaveError just below
        self._failed_saves.error = self._failed_saves.error or e
    self.raise_if_save_failed()
    if step in self._manager.all_steps():
      return False  # already saved (e.g. final save right after a periodic one)
    meta = {"step": int(step), "signature": self.signature,
            "checksums": state_checksums(state)}
    args = ocp.args.Composite(
        state=ocp.args.PyTreeSave(state),
        data=ocp.args.JsonSave({"data_state": _encode_data_state(data_state),
                                "extra": dict(extra or {})}),
        meta=ocp.args.JsonSave(meta))
    metrics = {k: float(v) for k, v in (metrics or {}).items()} or None
    # Pending before orbax's save starts: it starts the commit threads and then goes on
    # (old steps to remove, a barrier, the finalize thread) before it returns, and a write
    # that fails in between is logged from those threads at once.
    was_pending, self._failed_saves.pending = self._failed_saves.pending, True
    started = False
    try:
      started = self._manager.save(step, args=args, metrics=metrics, force=True)
    except OSError as e:
      raise CheckpointSaveError(f"saving checkpoint step {step} in {self.directory} failed: "
                                f"{e}") from None
    finally:
      if not started:
        self._failed_saves.pending = was_pending
    if started:
      self._unconfirmed = int(step)
    return started

  def raise_if_save_failed(self) -> None:
    """Raises CheckpointSaveError if a finished async save failed (call once per step)."""
    try:
      self._manager.check_for_errors()
      if self._finished_with_error():
        self._manager.wait_until_finished()  # re-raises the background save's error
      error = self._failed_saves.error or self._uncommitted_error()
      if error is not None:
        raise error
    except Exception as e:  # noqa: BLE001 - orbax re-raises whatever the writer raised
      self._unconfirmed = None
      self._save_failed = True
      raise CheckpointSaveError(
          f"an asynchronous checkpoint save in {self.directory} failed "
          f"({_save_reason(e)}); the run "
          "stopped so that no more work is lost; fix the cause (disk full? permissions?) "
          "and start the same command again to resume from the last complete step.") from None

  def _uncommitted_error(self) -> Exception | None:
    """An error when the newest async save has finished without committing its step.

    orbax's finalize thread catches a failed write, logs it and skips the step (the
    temporary directory is never renamed), so neither check_for_errors nor the thread
    reports it; the missing step directory does.
    """
    step = self._unconfirmed
    if step is None or self._manager.is_saving_in_progress():
      return None
    self._unconfirmed = None
    if self.step_dir(step).exists():
      self._failed_saves.pending = False
      return None
    return OSError(f"step {step} was not committed")

  def _finished_with_error(self) -> bool:
    """True when orbax's background save thread has ended with an exception."""
    holder = getattr(self._manager, "_finalize_thread", None)  # orbax keeps it private
    if holder is None or not hasattr(holder, "map"):
      return False
    return bool(holder.map(lambda t: t is not None and not t.is_alive()
                           and getattr(t, "exception", None) is not None))

  def wait(self) -> None:
    """Blocks until pending async saves are committed."""
    self._manager.wait_until_finished()

  def close(self, after_error: bool = False, timeout_s: float = 120.0) -> None:
    """Waits for pending saves and closes.

    Args:
      after_error: the run is already failing: log (do not raise) a pending save's
        error, and give up waiting after `timeout_s` (an unfinished save stays an orbax
        tmp directory, never listed as a step), so the process exits with its first
        error instead of hanging.
      timeout_s: see `after_error`.
    """
    if not after_error:
      try:
        self._manager.wait_until_finished()
        self.raise_if_save_failed()  # e.g. the final save failed: never exit as if saved
        self._manager.close()
      finally:
        self._failed_saves.remove()
      return

    def close_quietly():  # orbax's logged save errors stay filtered: the run's error is out
      try:
        self._manager.wait_until_finished()
        self._manager.close()
      except Exception as e:  # noqa: BLE001 - an error is already on its way out
        if not self._save_failed:  # else it is the failed save's error, reported already
          logging.warning("closing the checkpoint manager after an error also failed (%s)",
                          short_reason(e))
      finally:
        if not self._save_failed:  # else late reports of the failed save stay dropped
          self._failed_saves.remove()

    closer = threading.Thread(target=close_quietly, name="lm-ckpt-close", daemon=True)
    closer.start()
    closer.join(timeout_s)
    if closer.is_alive():
      logging.warning("gave up waiting %.0f s for a pending checkpoint save in %s after an "
                      "error; the newest complete step is kept.", timeout_s, self.directory)

  # -- restoring -----------------------------------------------------------------------
  def _read_meta(self, step: int) -> dict:
    return read_step_meta(self._manager, step, str(self.step_dir(step)))

  def check_compatible(self, step: int, meta: dict | None = None) -> None:
    """Raises IncompatibleCheckpointError if `step` was written by a different model."""
    meta = self._read_meta(step) if meta is None else meta
    theirs, ours = meta["signature"], self.signature
    if ours is None or theirs is None:
      return
    what = shape_mismatch(theirs.get("param_shapes", {}), ours.get("param_shapes", {}))
    if what:
      raise IncompatibleCheckpointError(
          f"checkpoint {self.directory} step {step} is from a different model ({what}); use "
          "a fresh workdir, or ckpt.init_from to load params from it.")
    if theirs.get("model_hash") != ours.get("model_hash"):
      tm, om = theirs.get("model", {}), ours.get("model", {})
      keys = sorted(k for k in set(tm) | set(om) if tm.get(k) != om.get(k))
      raise IncompatibleCheckpointError(
          f"checkpoint {self.directory} step {step} was written with a different model config ("
          + ", ".join(f"{k}: {tm.get(k)!r} there vs {om.get(k)!r} here" for k in keys[:3])
          + "); use a fresh workdir or the same config.model.")
    t_tok, o_tok = theirs.get("tokenizer_sha256"), ours.get("tokenizer_sha256")
    if t_tok and o_tok and t_tok != o_tok:
      raise IncompatibleCheckpointError(
          f"checkpoint {self.directory} step {step} was trained with a different tokenizer "
          f"(sha256 {t_tok[:12]}... there vs {o_tok[:12]}... here; the tokenizer file was "
          "replaced?); restore the original tokenizer file, or use a fresh workdir.")

  def _restore_verified(self, step: int, abstract_state: Any, shardings: Any | None
                        ) -> tuple[Any, Any, dict]:
    """Restores `step` and checks its checksums; CheckpointDamagedError if it cannot."""
    meta = self._read_meta(step)
    self.check_compatible(step, meta)
    target = abstract_target(abstract_state, shardings)
    args = ocp.args.Composite(
        state=ocp.args.PyTreeRestore(
            item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target)),
        data=ocp.args.JsonRestore())
    where = str(self.step_dir(step))
    restored = restore_or_damaged(self._manager, step, args, where)
    verify_checksums(meta, restored.state, where)
    data = restored.data or {}
    return restored.state, _decode_data_state(data.get("data_state")), dict(
        data.get("extra") or {})

  def restore(self, abstract_state: Any, shardings: Any | None = None,
              step: int | None = None) -> tuple[Any, Any]:
    """Restores the train state (onto `shardings`) and the data iterator state.

    Args:
      abstract_state: the target TrainState structure (jax.eval_shape of it).
      shardings: NamedShardings for it (partitioning.state_shardings) — the mesh may
        differ from the one that saved; None restores with the saved sharding where
        possible (single-process use only).
      step: which step; default the latest.

    Returns:
      (state, data_state); the `extra` saved with it is in `self.restored_extra`.

    Raises:
      FileNotFoundError: no checkpoint (or not that step).
      IncompatibleCheckpointError: written by another model.
      CheckpointDamagedError: the step cannot be read back intact.
    """
    step = self.latest_step() if step is None else step
    if step is None or step not in self._manager.all_steps():
      raise FileNotFoundError(f"no checkpoint {'' if step is None else step} in {self.directory}")
    try:
      state, data_state, self.restored_extra = self._restore_verified(
          step, abstract_state, shardings)
    except CheckpointDamagedError as e:
      others = [s for s in self.all_steps() if s != step]
      raise CheckpointDamagedError(
          f"{e}; other steps on disk: {others or 'none'}. Nothing was deleted.",
          e.step_dir) from None
    logging.info("restored checkpoint %s step %d", self.directory, step)
    return state, data_state

  def restore_or_none(self, abstract_state: Any, shardings: Any | None = None
                      ) -> tuple[Any, Any] | None:
    """The newest intact step restored (state, data_state), or None if there is none.

    A damaged newest step (see the module docstring) is reported with a warning, moved
    aside to `<step>.damaged`, and the next older step is tried.

    Raises:
      IncompatibleCheckpointError: a step was written by another model.
      CheckpointDamagedError: steps exist but none is intact (names the newest one's
        directory; nothing is moved or deleted then).
    """
    steps = self.all_steps()
    if not steps:
      return None
    step, (state, data_state, self.restored_extra), damaged = newest_intact(
        steps, lambda s: self._restore_verified(s, abstract_state, shardings),
        remedy="restore the directory from a copy, or point --workdir at a new directory "
        "to start over")
    if damaged:
      logging.warning("%s; resuming from step %d, the newest intact checkpoint; the damaged "
                      "step(s) were moved aside to <step>.damaged in %s (kept, not deleted).",
                      describe_damaged(damaged), step, self.directory)
      self._move_aside([d for d, _ in damaged])
    logging.info("restored checkpoint %s step %d", self.directory, step)
    return state, data_state

  def _move_aside(self, steps: list[int]) -> None:
    if jax.process_index() == 0:
      for step in steps:
        dst = self.directory / f"{step}.damaged"
        if dst.exists():
          dst = self.directory / f"{step}.damaged-{int(time.time())}"
        self.step_dir(step).rename(dst)
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices("lm_checkpoint_move_aside")
    self._manager.reload()
