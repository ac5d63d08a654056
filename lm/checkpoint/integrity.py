"""Checkpoint integrity: verified reads and the fallback to the newest intact step.

    step, result, damaged = newest_intact(steps, attempt, remedy="...")

What the resuming `CheckpointManager` (manager.py) and the read-only loaders (loading.py:
lm.decode, lm.evaluate, ckpt.init_from) share: the error types, reading a step's `meta`
item, restoring with every failure turned into `CheckpointDamagedError`, comparing the
restored arrays with the checksums recorded at save time, and `newest_intact`. Also the
filters that keep a failed restore's library noise (orbax's late "Event loop is closed"
reports) off the console. docs/robustness.md tells the story.
"""
from __future__ import annotations

import contextlib
import logging
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orbax.checkpoint as ocp
from etils import epath

from lm.checkpoint.signature import state_checksums


class IncompatibleCheckpointError(ValueError):
  """The directory holds a checkpoint that cannot be restored into this run."""


class CheckpointDamagedError(IncompatibleCheckpointError):
  """A step directory cannot be read back intact (and no older step could be used).

  Attributes:
    step_dir: the damaged step directory (str).
    intact_steps: steps verified intact (empty when none was).
  """

  def __init__(self, message: str, step_dir: str = "", intact_steps: tuple[int, ...] = ()):
    super().__init__(message)
    self.step_dir = step_dir
    self.intact_steps = tuple(intact_steps)


class DropLogRecords(logging.Filter):
  """While entered, drops the records of logger `name` whose message starts with `prefix`."""

  def __init__(self, name: str, *prefixes: str):
    super().__init__()
    self._logger = logging.getLogger(name)
    self._prefixes = tuple(prefixes)

  def filter(self, record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(self._prefixes)

  def __enter__(self):
    self._logger.addFilter(self)
    return self

  def __exit__(self, *exc):
    self._logger.removeFilter(self)


class LateReadCallbacks:
  """A sys.unraisablehook that drops the late callbacks of an abandoned restore.

  When one tensorstore read of a restore fails, orbax closes its event loop while the
  other reads are still in flight; each of them then reports "RuntimeError: Event loop is
  closed" through sys.unraisablehook: a traceback per array, hundreds for a real train
  state, burying the one warning about the damaged step (a failed async save abandons
  its other writes the same way). This hook drops exactly those and passes anything else
  to the hook it replaced.
  """

  def __init__(self, previous):
    self.previous = previous
    self.dropped = 0

  def __call__(self, unraisable) -> None:
    error = unraisable.exc_value
    if isinstance(error, RuntimeError) and str(error) == "Event loop is closed":
      self.dropped += 1
      return
    self.previous(unraisable)


class AbandonedOrbaxTasks(logging.Filter):
  """Drops asyncio's "... exception was never retrieved" records of orbax's tasks.

  The abandoned writes of a failed save (and reads of a failed restore) that did fail
  are collected when the process exits, and asyncio logs each with a traceback, after
  lm's one `error:` line. Their error is the one lm already reported.
  """

  def filter(self, record: logging.LogRecord) -> bool:
    message = record.getMessage()
    if "exception was never retrieved" not in message:  # Task, _GatheringFuture, Future
      return True
    frames = traceback.extract_tb(record.exc_info[2]) if record.exc_info else []
    return not ("orbax" in message or any("/orbax/" in f.filename or "tensorstore" in f.filename
                                          for f in frames))


_ABANDONED_TASKS = AbandonedOrbaxTasks()


def drop_late_callbacks() -> tuple[LateReadCallbacks, bool]:
  """Installs the LateReadCallbacks hook if it is not; (the hook, whether it was now).

  Also (for good) the AbandonedOrbaxTasks filter on the "asyncio" logger."""
  logging.getLogger("asyncio").addFilter(_ABANDONED_TASKS)  # a no-op when already there
  hook = sys.unraisablehook
  if isinstance(hook, LateReadCallbacks):
    return hook, False
  hook = sys.unraisablehook = LateReadCallbacks(hook)
  return hook, True


@contextlib.contextmanager
def quiet_failed_reads():
  """While a restore runs, and for good after one failed, drops its late read callbacks."""
  hook, installed = drop_late_callbacks()
  try:
    yield hook
  except BaseException:
    raise  # keep the hook: the abandoned reads finish after the error reaches the caller
  if installed and sys.unraisablehook is hook:
    sys.unraisablehook = hook.previous


def short_reason(e: BaseException) -> str:
  """An exception as "Type: first line" (tensorstore's spec dumps cut), for one-line errors."""
  first = str(e).splitlines()[0] if str(e) else ""
  first = first.split(" [tensorstore_spec=")[0].split(" See full TensorStore details")[0]
  return f"{type(e).__name__}: {first[:200]}" if first else type(e).__name__


def check_state_index(where: str) -> None:
  """CheckpointDamagedError when a step's tensorstore (OCDBT) state lacks its top-level
  manifest.ocdbt (tensorstore's own message for it is a ~600-character spec dump)."""
  state = epath.Path(where) / "state"
  if (state.is_dir() and not (state / "manifest.ocdbt").exists()
      and any(p.name.startswith("ocdbt.process_") for p in state.iterdir())):
    raise CheckpointDamagedError(
        f"checkpoint step directory {where} cannot be read (its state/manifest.ocdbt, the "
        "index of the saved arrays, is missing)", where)


def read_step_meta(manager: ocp.CheckpointManager, step: int, where: str) -> dict:
  """A step's `meta` item; CheckpointDamagedError when it is unreadable or not lm's."""
  try:
    meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
  except Exception as e:  # noqa: BLE001 - any failure here means "damaged or not ours"
    raise CheckpointDamagedError(
        f"checkpoint step directory {where} has no readable 'meta' item "
        f"({type(e).__name__}): it is damaged or was not written by lm", where) from None
  if not isinstance(meta, dict) or "signature" not in meta:
    raise CheckpointDamagedError(
        f"checkpoint step directory {where} has no lm signature in its 'meta' item: it is "
        "damaged or was not written by lm", where)
  return meta


def restore_or_damaged(manager: ocp.CheckpointManager, step: int, args: Any,
                        where: str) -> Any:
  """manager.restore(step, args); any failure to read is a CheckpointDamagedError."""
  check_state_index(where)
  try:
    with quiet_failed_reads():
      return manager.restore(step, args=args)
  except Exception as e:  # noqa: BLE001 - tensorstore / orbax / json errors alike
    raise CheckpointDamagedError(
        f"checkpoint step directory {where} cannot be read ({short_reason(e)})",
        where) from None


def verify_checksums(meta: Mapping[str, Any], tree: Any, where: str, prefix: str = "") -> None:
  """Raises CheckpointDamagedError if `tree`'s arrays differ from the checksums in `meta`.

  Args:
    meta: the step's meta item ({"checksums": {leaf path: [c1, c2]}}; none recorded:
      nothing to check).
    tree: the restored arrays, named as at save time (the state, or {"params": params}).
    where: the step directory (for the message).
    prefix: compare only the recorded leaves whose path starts with it ("params/").
  """
  expected = meta.get("checksums")
  if expected is None:
    return
  expected = {k: v for k, v in expected.items() if k.startswith(prefix)}
  got = state_checksums(tree)
  bad = sorted(k for k in set(expected) | set(got) if expected.get(k) != got.get(k))
  if bad:
    raise CheckpointDamagedError(
        f"checkpoint step directory {where} is damaged: {len(bad)} array(s) differ from "
        f"the checksums recorded when it was saved (first: {bad[0]})", where)


def newest_intact(steps: Sequence[int], attempt: Callable[[int], Any], *, remedy: str
                  ) -> tuple[int, Any, list[tuple[int, CheckpointDamagedError]]]:
  """Tries `attempt(step)` from the newest step down until one is not damaged.

  The fallback that resuming (`CheckpointManager.restore_or_none`) and loading params
  (`restore_params`) share; the caller reports the damaged steps (one warning).

  Args:
    steps: the steps on disk.
    attempt: restores and verifies one step; raises CheckpointDamagedError if it cannot.
      Other errors (e.g. IncompatibleCheckpointError) stop the search.
    remedy: the end of the error when no step is intact (what the user can do).

  Returns:
    (step, attempt(step), [(damaged step, its error), ...] newest first).

  Raises:
    CheckpointDamagedError: no step is intact (names the newest one's directory).
  """
  damaged: list[tuple[int, CheckpointDamagedError]] = []
  for step in sorted(steps, reverse=True):
    try:
      return step, attempt(step), damaged
    except CheckpointDamagedError as e:
      damaged.append((step, e))
  if not damaged:
    raise FileNotFoundError("no checkpoint step to restore")
  error = damaged[0][1]
  raise CheckpointDamagedError(
      f"{describe_damaged(damaged)}; no intact checkpoint step to fall back to (tried "
      f"{sorted(steps)}), intact steps: none. Nothing was moved or deleted; {remedy}.",
      error.step_dir, ())


def describe_damaged(damaged: Sequence[tuple[int, CheckpointDamagedError]]) -> str:
  """The damaged steps' errors as one line (newest first)."""
  return "; ".join(str(e) for _, e in damaged)


__all__ = ["IncompatibleCheckpointError", "CheckpointDamagedError", "newest_intact",
           "verify_checksums", "read_step_meta", "restore_or_damaged", "check_state_index"]
