"""Virtual data shards: which process reads what, and the iterator state that survives.

The documents are split into a FIXED number S of virtual shards (`DataSpec.num_shards`):
shard k reads documents k::S, process p of P owns shards [p*S/P, (p+1)*S/P), and the global
batch is all shards' rows in shard order, so batches and saved positions do not depend on P.

What lives here: shard ownership (`owned_shards`), the train iterator over the owned shards'
batches (`TrainIterator`) and its state (`get_state`, `set_state`, `merge_states`), and the
eval batches' assembly (`eval_batches`). What does not: the per-shard sub-pipeline
(`pipeline.py`). Why shards and why S = 8: docs/pipeline.md, 'Virtual shards'.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import grain
import numpy as np

from lm.data import packing

_STATE_VERSION = 2
DEFAULT_NUM_SHARDS = 8


def owned_shards(num_shards: int, process_index: int, process_count: int) -> range:
  """The virtual shards process `process_index` of `process_count` reads (a range).

  Raises:
    ValueError: process_index outside [0, process_count), or num_shards not divisible by
      process_count.
  """
  if not 0 <= process_index < process_count:
    raise ValueError(f"process_index {process_index} not in [0, {process_count}).")
  if num_shards % process_count:
    raise ValueError(
        f"DataSpec.num_shards={num_shards} is not divisible by process_count="
        f"{process_count} (every process owns the same number of virtual data shards); "
        f"set num_shards to a multiple of {process_count} that divides the batch size.")
  per_process = num_shards // process_count
  return range(process_index * per_process, (process_index + 1) * per_process)


def _pad_batch(rows: Mapping[str, np.ndarray], batch_size: int) -> dict[str, np.ndarray]:
  """Pads a partial batch [b, L] to [batch_size, L] with all-zero rows."""
  out = {}
  for k, v in rows.items():
    pad = np.zeros((batch_size - v.shape[0], *v.shape[1:]), v.dtype)
    out[k] = np.concatenate([v, pad])
  return out


def _concat(parts: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
  """Shard batches [r, L] (in shard order) -> one batch [len(parts) * r, L]."""
  return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _tuplify_slices(state: Any) -> Any:
  """JSON turns grain ConcatThenSplit's (start, stop) tuples into lists; undo that."""
  if isinstance(state, dict):
    return {k: ({kk: tuple(vv) for kk, vv in v.items()} if k == "remainder_slices"
                else _tuplify_slices(v)) for k, v in state.items()}
  if isinstance(state, list):
    return [_tuplify_slices(v) for v in state]
  return state


def _json_normal(state: Any) -> Any:
  return json.loads(json.dumps(state))


class ShardBatchesIterDataset(grain.IterDataset):
  """Batches of several shards' row datasets, concatenated in shard order."""

  def __init__(self, shards: Mapping[int, grain.IterDataset]):
    super().__init__(list(shards.values()))
    self._shard_ids = list(shards)

  def __iter__(self) -> ShardBatchesIterator:
    return ShardBatchesIterator({k: iter(ds) for k, ds in zip(self._shard_ids, self.parents)})

  def __str__(self) -> str:
    return f"ShardBatchesIterDataset(shards={self._shard_ids})"


class ShardBatchesIterator(grain.DatasetIterator):
  """next(): every shard's next batch [r, L], concatenated; ends when one shard ends."""

  def __init__(self, iterators: Mapping[int, grain.DatasetIterator]):
    super().__init__(list(iterators.values()))
    self._iterators = dict(iterators)

  def __next__(self) -> dict[str, np.ndarray]:
    return _concat([next(it) for it in self._iterators.values()])

  def get_state(self) -> dict[str, Any]:
    return {"shards": {str(k): it.get_state() for k, it in self._iterators.items()}}

  def set_state(self, state: Mapping[str, Any]) -> None:
    for k, it in self._iterators.items():
      it.set_state(state["shards"][str(k)])


def _check_state_header(state: Mapping[str, Any], fingerprint: str | None,
                        num_shards: int | None) -> None:
  if not isinstance(state, Mapping) or state.get("version") != _STATE_VERSION:
    version = state.get("version") if isinstance(state, Mapping) else None
    raise ValueError(f"Data iterator state version {version} is not {_STATE_VERSION}; it was "
                     "saved by another lm version (start the data from scratch).")
  if num_shards is not None and state["num_shards"] != num_shards:
    raise ValueError(f"Data iterator state has {state['num_shards']} virtual shards, this "
                     f"pipeline {num_shards}; restore with the same data.num_shards.")
  if fingerprint is not None and state["fingerprint"] != fingerprint:
    raise ValueError(
        "Data iterator state was saved with a different data spec (fingerprint "
        f"{state['fingerprint']} != {fingerprint}); restore with the same data "
        "config (a run saved before data.batched_objectives existed resumes with "
        "--config.data.batched_objectives=False), or start the data from scratch.")


def merge_states(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
  """Merges every process's `TrainIterator.get_state()` into one restorable state.

  The trainer gathers the states of all processes, saves the merged dict with the
  checkpoint, and on restore passes it to every process's `set_state` (with any
  process count): each process takes the shards it owns.

  Args:
    states: get_state() dicts (JSON round trips are fine), any order.

  Returns:
    {"version", "fingerprint", "num_shards", "batches", "shards": {str(k): state_k}}
    holding the union of the shards, sorted by shard.

  Raises:
    ValueError: no states, states of different specs or positions, or one shard
      with two different positions.
  """
  if not states:
    raise ValueError("merge_states needs at least one iterator state.")
  first = states[0]
  _check_state_header(first, None, None)
  shards: dict[str, Any] = {}
  for state in states:
    _check_state_header(state, first["fingerprint"], first["num_shards"])
    if state["batches"] != first["batches"]:
      raise ValueError(f"Cannot merge data iterator states at different positions "
                       f"({state['batches']} != {first['batches']} batches); gather them "
                       "at the same step.")
    for k, shard_state in state["shards"].items():
      shard_state = _json_normal(shard_state)
      if k in shards and shards[k] != shard_state:
        raise ValueError(f"Virtual data shard {k} has two different positions in the "
                         "states to merge.")
      shards[k] = shard_state
  return {"version": _STATE_VERSION, "fingerprint": first["fingerprint"],
          "num_shards": first["num_shards"], "batches": first["batches"],
          "shards": dict(sorted(shards.items(), key=lambda kv: int(kv[0])))}


class _Closed:
  """Stands in for a closed iterator."""

  def __next__(self):
    raise ValueError("The data iterator is closed.")

  def get_state(self):
    raise ValueError("The data iterator is closed.")

  set_state = get_state

  def close(self):
    pass


_CLOSED = _Closed()


class TrainIterator(Iterator[dict]):
  """Infinite (or num_epochs-long) iterator of this process's batches.

  With a finite num_epochs it ends at the first batch for which one of its shards
  has run out (shards end at slightly different points; multi-process runs should
  stop by step count instead).

  Attributes:
    shards: the virtual shards this process owns (range).
    packing_efficiency: non-padding share of the last batch (float in (0, 1]).
    batches: batches produced since the start (restored by set_state).
  """

  def __init__(self, iterator: grain.DatasetIterator, on_close: Callable[[], None], *,
               fingerprint: str, num_shards: int, shards: range):
    self._it = iterator
    self._on_close = on_close
    self._fingerprint = fingerprint
    self._num_shards = num_shards
    self.shards = shards
    self.packing_efficiency = float("nan")
    self.batches = 0

  def __next__(self) -> dict[str, np.ndarray]:
    batch = next(self._it)
    self.batches += 1
    self.packing_efficiency = packing.packing_efficiency(batch)
    return batch

  def get_state(self) -> dict[str, Any]:
    """A JSON-serialisable dict: this process's shards' positions (see merge_states)."""
    inner = self._it.get_state()
    return {"version": _STATE_VERSION, "fingerprint": self._fingerprint,
            "num_shards": self._num_shards, "batches": self.batches,
            "shards": inner["shards"]}

  def set_state(self, state: Mapping[str, Any]) -> None:
    """Restores get_state() of this process or merge_states() of all (any process count).

    Raises:
      ValueError: another state version, data spec or num_shards, or a shard this
        process owns is missing from the state.
    """
    _check_state_header(state, self._fingerprint, self._num_shards)
    missing = [k for k in self.shards if str(k) not in state["shards"]]
    if missing:
      raise ValueError(
          f"Data iterator state has no position for virtual shard(s) {missing} owned by "
          f"this process (shards {list(self.shards)}); pass merge_states() of every "
          "process's get_state().")
    self._it.set_state({"shards": {str(k): _tuplify_slices(state["shards"][str(k)])
                                   for k in self.shards}})
    self.batches = int(state["batches"])

  def close(self) -> None:
    """Stops the prefetch thread and the tokenizer threads (idempotent)."""
    # Drop the grain iterator now: its __del__ closes it again, which fails when
    # that happens at interpreter exit.
    it, self._it = self._it, _CLOSED
    it.close()
    self._on_close()


def eval_batches(shard_batches: dict[int, Iterator[dict[str, np.ndarray]] | None],
                 zeros: Mapping[str, np.ndarray], rows: int, total: int | None, *,
                 owns_all: bool) -> Iterator[dict[str, np.ndarray]]:
  """Eval batches of the owned shards: batch i = every shard's i-th block of `rows` rows.

  Args:
    shard_batches: {shard: iterator of its eval batches [<= rows, L], or None if it has no
      documents}, in shard order. Consumed.
    zeros: all-zero rows [rows, L] standing in for a shard that has run out (loss weight 0).
    rows: eval rows per shard; a shard's last, partial batch is padded with zero rows.
    total: exactly this many batches (zero batches after the data ends); None: until every
      shard has run out.
    owns_all: this process owns every shard (then an empty validation set is an error).
  Yields:
    batches [len(shard_batches) * rows, L].
  """
  its = dict(shard_batches)
  if owns_all and not any(its.values()):
    raise ValueError("No validation examples: every validation shard is empty.")
  produced = 0
  while total is None or produced < total:
    parts, live = [], False
    for k in list(its):
      part = None if its[k] is None else next(its[k], None)
      if part is None:
        its[k] = None
        parts.append(zeros)
      else:
        live = True
        parts.append(_pad_batch(part, rows))
    if total is None and not live:
      if produced == 0:
        raise ValueError("No validation examples: the validation documents yield no rows.")
      return
    yield _concat(parts)
    produced += 1
