"""Read-only access to a run's checkpoints: its steps, a step's meta, its verified params.

    params, step = restore_params_and_step(f"{workdir}/checkpoints", abstract, shardings)

Used by lm/restore.py (lm.decode, lm.evaluate) and ckpt.init_from (lm/train.py). Every
read is verified as a resume verifies it (integrity.py): without a step, a damaged newest
step falls back to the newest intact one with one warning; nothing here writes to the run.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import orbax.checkpoint as ocp
from etils import epath

from lm.checkpoint.integrity import (CheckpointDamagedError, DropLogRecords,
                                     IncompatibleCheckpointError, check_state_index,
                                     describe_damaged, newest_intact, read_step_meta,
                                     restore_or_damaged, short_reason, verify_checksums)
from lm.checkpoint.manager import abstract_target, item_handlers
from lm.checkpoint.signature import param_shapes, shape_mismatch


def _read_only_manager(directory: str | epath.Path) -> ocp.CheckpointManager:
  # orbax warns "Given directory is read only" each time: that is what a loader asks for.
  with DropLogRecords("absl", "Given directory is read only"):
    return ocp.CheckpointManager(
        epath.Path(directory), item_handlers=item_handlers(),
        options=ocp.CheckpointManagerOptions(read_only=True, create=False,
                                             save_interval_steps=0))


class StepNotFoundError(FileNotFoundError):
  """The requested checkpoint step is not on disk (the message lists the ones that are)."""


def _resolve_step(manager: ocp.CheckpointManager, directory, step: int | None,
                  context: str) -> int:
  steps = sorted(manager.all_steps())
  if not steps:
    raise FileNotFoundError(f"{context}: no checkpoint in {directory}")
  if step is None:
    return steps[-1]
  if step not in steps:
    raise StepNotFoundError(f"{context}: no checkpoint of step {step} in {directory}; "
                            f"available steps: {', '.join(map(str, steps))}")
  return int(step)


def checkpoint_steps(directory: str | epath.Path) -> list[int]:
  """Fully written steps in a checkpoint directory, ascending ([] if none or no directory)."""
  if not epath.Path(directory).is_dir():
    return []
  manager = _read_only_manager(directory)
  try:
    return sorted(manager.all_steps())
  finally:
    manager.close()


def read_meta(directory: str | epath.Path, step: int | None = None, *,
              context: str = "checkpoint") -> dict[str, Any]:
  """The `meta` item of a step (default the latest): {"step", "signature", "checksums"}.

  `context` starts the error messages (the command or setting at fault).

  Raises:
    FileNotFoundError: no checkpoint there (StepNotFoundError: not that step).
    IncompatibleCheckpointError: the step has no readable lm meta item.
  """
  manager = _read_only_manager(directory)
  try:
    step = _resolve_step(manager, directory, step, context)
    try:
      meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
    except Exception as e:  # noqa: BLE001 - any failure here means "not ours"
      raise IncompatibleCheckpointError(
          f"{context}: {directory} step {step} is not an lm checkpoint (no readable 'meta' "
          f"item: {type(e).__name__}).") from None
    if not isinstance(meta, dict) or "signature" not in meta:
      raise IncompatibleCheckpointError(f"{context}: {directory} step {step} has no lm "
                                        "signature.")
    return {**meta, "step": step}
  finally:
    manager.close()


def restore_params(directory: str | epath.Path, abstract_params: Any,
                   shardings: Any | None = None, step: int | None = None, *,
                   context: str = "ckpt.init_from",
                   check_meta: Callable[[int, dict], None] | None = None) -> Any:
  """Loads only the params of a run's checkpoint (config.ckpt.init_from, evaluation).

  The optimizer state is not read. What is read is verified as a resume verifies it
  (`restore_params_and_step`).

  Returns:
    The params tree, placed on `shardings`.
  """
  return restore_params_and_step(directory, abstract_params, shardings, step,
                                 context=context, check_meta=check_meta)[0]


def restore_params_and_step(directory: str | epath.Path, abstract_params: Any,
                            shardings: Any | None = None, step: int | None = None, *,
                            context: str = "ckpt.init_from",
                            check_meta: Callable[[int, dict], None] | None = None
                            ) -> tuple[Any, int]:
  """The params of a verified checkpoint step, and that step.

  A step whose meta, array metadata or arrays cannot be read, or whose params differ
  from the checksums recorded at save time, is damaged. Without `step` the newest intact
  step is used, with one warning naming the damaged ones (`newest_intact`, the fallback a
  resume uses; a loader moves nothing: the run directory is left as it is).

  Args:
    directory: the run's checkpoint directory (<workdir>/checkpoints).
    abstract_params: target params structure (e.g. abstract_state.params).
    shardings: NamedShardings for the params, or None.
    step: which step; default the newest intact one.
    context: what the error messages start with (the setting or command at fault).
    check_meta: called with (step, meta item) before a step is read; raise
      IncompatibleCheckpointError there to refuse it (e.g. another model's signature).

  Returns:
    (params tree placed on `shardings`, its step).

  Raises:
    FileNotFoundError: no checkpoint there (StepNotFoundError: not that step, listing
      the available ones).
    IncompatibleCheckpointError: the shapes differ from `abstract_params`, or check_meta
      refused a step.
    CheckpointDamagedError: `step` is damaged, or (without `step`) no step is intact.
  """
  manager = _read_only_manager(directory)
  try:
    wanted = _resolve_step(manager, directory, step, context)

    def attempt(s: int) -> Any:
      return _restore_params_verified(manager, directory, s, abstract_params, shardings,
                                      context, check_meta)

    if step is not None:
      try:
        return attempt(wanted), wanted
      except CheckpointDamagedError as e:
        others = [s for s in sorted(manager.all_steps()) if s != wanted]
        raise CheckpointDamagedError(
            f"{context}: {e}; other steps on disk: {others or 'none'}; choose another step, "
            "or leave the step out to use the newest intact one. Nothing was changed.",
            e.step_dir) from None
    try:
      got, params, damaged = newest_intact(
          manager.all_steps(), attempt,
          remedy="restore the checkpoint directory from a copy")
    except CheckpointDamagedError as e:
      raise CheckpointDamagedError(f"{context}: {e}", e.step_dir, ()) from None
    if damaged:
      logging.warning("%s: %s; using step %d, the newest intact checkpoint (nothing was "
                      "moved or changed).", context, describe_damaged(damaged), got)
    return params, got
  finally:
    manager.close()


def _restore_params_verified(manager: ocp.CheckpointManager, directory, step: int,
                             abstract_params: Any, shardings: Any | None, context: str,
                             check_meta: Callable[[int, dict], None] | None) -> Any:
  """One step's params, read and verified; CheckpointDamagedError if it cannot be."""
  where = str(epath.Path(directory) / str(step))
  meta = read_step_meta(manager, step, where)
  if check_meta is not None:
    check_meta(step, meta)
  check_state_index(where)
  try:
    on_disk = manager.item_metadata(step)["state"]
  except Exception as e:  # noqa: BLE001 - a truncated or missing _METADATA and the like
    raise CheckpointDamagedError(
        f"checkpoint step directory {where} cannot be read (its array metadata: "
        f"{short_reason(e)})", where) from None
  tree = getattr(on_disk, "tree", on_disk)
  if not isinstance(tree, Mapping) or "params" not in tree:
    raise IncompatibleCheckpointError(f"{context}: {directory} step {step} has no params.")
  what = shape_mismatch(param_shapes(tree["params"]), param_shapes(abstract_params))
  if what:
    raise IncompatibleCheckpointError(
        f"{context}: {directory} step {step} params differ from this model ({what}).")
  target = {"params": abstract_target(abstract_params, shardings)}
  args = ocp.args.Composite(state=ocp.args.PyTreeRestore(
      item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
      partial_restore=True))
  params = restore_or_damaged(manager, step, args, where).state["params"]
  verify_checksums(meta, {"params": params}, where, prefix="params/")
  return params
