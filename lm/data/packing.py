"""Pure NumPy padding and packing of converted examples into fixed-length rows.

Rows add, per stack, `{stack}_segment_ids` (1, 2, ... per example, 0 on padding) and
`{stack}_positions` (restarting at 0 per example). `pack_examples` is the first-fit reference
policy; the pipeline runs grain's `FirstFitPackIterDataset` and `rename_packed`.

What does not live here: trimming/EOS (`converters.py`), the grain pipeline
(`pipeline.py`), the feature names, dtypes and row lengths (`features.py`).
A worked example and the packing rule: docs/pipeline.md, 'Packing'.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

# The batch contract's names, re-exported: callers of the packer use them with it.
from lm.data.features import ARCHITECTURES, STACKS, feature_lengths, stack_of  # noqa: F401


def _lengths_by_feature(example: Mapping[str, np.ndarray], lengths: Mapping[str, int]):
  out = {}
  for key in example:
    stack = stack_of(key)
    if stack not in lengths:
      raise ValueError(f"Feature {key!r} has no row length; lengths are {dict(lengths)}.")
    out[key] = lengths[stack]
  return out


def _example_length(example, stack):
  """The one length of `example`'s features in `stack` (which has at least one feature)."""
  sizes = {len(v) for k, v in example.items() if stack_of(k) == stack}
  if len(sizes) > 1:
    raise ValueError(f"The {stack} features of an example differ in length: "
                     f"{ {k: len(v) for k, v in example.items()} }")
  return sizes.pop()


def pad_example(example: Mapping[str, np.ndarray], lengths: Mapping[str, int]
                ) -> dict[str, np.ndarray]:
  """Pads one example to fixed lengths (one segment per row).

  Args:
    example: 1-D features from `converters.convert` (int32 / float32[n]).
    lengths: row length per stack, from `feature_lengths`.

  Returns:
    the features padded with 0 to int32/float32[L_stack], plus
    `{stack}_segment_ids` int32[L] (1 on tokens, 0 on padding) and
    `{stack}_positions` int32[L] (0.. on tokens, 0 on padding).
  """
  return pack_examples([example], lengths)[0]


def pack_examples(examples: Sequence[Mapping[str, np.ndarray]], lengths: Mapping[str, int],
                  ) -> list[dict[str, np.ndarray]]:
  """Packs examples into rows by first fit (policy in the module docstring).

  Args:
    examples: converted examples (same keys), 1-D arrays.
    lengths: row length per stack ({"encoder": Li, "decoder": Lt} or {"decoder": L}).

  Returns:
    list of rows; each row has every feature padded to its stack's length plus
    `{stack}_segment_ids` and `{stack}_positions` (int32[L]).
  """
  if not examples:
    return []
  keys = list(examples[0])
  feat_len = _lengths_by_feature(examples[0], lengths)
  stacks = sorted({stack_of(k) for k in keys}, key=STACKS.index)
  rows, used = [], []  # used[r][stack] = tokens already in row r.
  for i, ex in enumerate(examples):
    if list(ex) != keys:
      raise ValueError(f"Example {i} has keys {list(ex)}, expected {keys}.")
    n = {s: _example_length(ex, s) for s in stacks}
    for s in stacks:
      if n[s] > lengths[s]:
        raise ValueError(f"Example {i} has {n[s]} {s} tokens, more than the row length "
                         f"{lengths[s]}; trim it first (converters.convert lengths=...).")
    r = next((r for r, u in enumerate(used) if all(u[s] + n[s] <= lengths[s] for s in stacks)),
             None)
    if r is None:
      rows.append(_empty_row(ex, feat_len, stacks, lengths))
      used.append({s: 0 for s in stacks})
      r = len(rows) - 1
    row = rows[r]
    segment = int(max(row[f"{s}_segment_ids"].max() for s in stacks)) + 1
    for key, value in ex.items():
      s = stack_of(key)
      row[key][used[r][s]:used[r][s] + len(value)] = value
    for s in stacks:
      a, b = used[r][s], used[r][s] + n[s]
      row[f"{s}_segment_ids"][a:b] = segment
      row[f"{s}_positions"][a:b] = np.arange(n[s], dtype=np.int32)
      used[r][s] = b
  return rows


def _empty_row(example, feat_len, stacks, lengths):
  row = {k: np.zeros(feat_len[k], dtype=np.asarray(v).dtype) for k, v in example.items()}
  for s in stacks:
    row[f"{s}_segment_ids"] = np.zeros(lengths[s], np.int32)
    row[f"{s}_positions"] = np.zeros(lengths[s], np.int32)
  return row


def rename_packed(row: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Maps grain's packer output to the contract's names.

  grain's packers add `{feature}_segment_ids` / `{feature}_positions` for every
  packed feature; all features of a stack get identical ones (one id per example),
  so one copy per stack is kept as `{stack}_segment_ids` / `{stack}_positions`.

  Args:
    row: features plus grain's per-feature segment ids/positions, arrays [..., L].

  Returns:
    the features plus `{stack}_segment_ids`, `{stack}_positions` (int32[..., L]).
  """
  out = {}
  for key, value in row.items():
    if key.endswith("_segment_ids") or key.endswith("_positions"):
      continue
    out[key] = value
    stack = stack_of(key)
    if f"{stack}_segment_ids" not in out:
      out[f"{stack}_segment_ids"] = np.asarray(row[f"{key}_segment_ids"], np.int32)
      out[f"{stack}_positions"] = np.asarray(row[f"{key}_positions"], np.int32)
  return out


def contract_violations(row: Mapping[str, np.ndarray]) -> list[str]:
  """What in one padded or packed row breaks the packing contract (empty: nothing).

  The model relies on it (lm/model/transformer.py builds the relative position biases from
  ``arange`` for whole rows, and masks pairs across segments by segment id):
    * segment ids are 1, 2, ..., k, each one contiguous run, in order, then 0 padding only;
    * positions restart at 0 in every segment and count up by one (0 on padding);
    * encoder-decoder rows pair their segments: the encoder and the decoder hold the same
      ids (a decoder segment without its encoder segment would attend to nothing of its
      own; tests/data/test_packing.py pins what the model then does).

  Args:
    row: one row's features, 1-D arrays with ``{stack}_segment_ids`` / ``{stack}_positions``.
  Returns:
    One sentence per violation, naming the stack.
  """
  problems = []
  ids = {}
  for stack in STACKS:
    if f"{stack}_segment_ids" not in row:
      continue
    seg = np.asarray(row[f"{stack}_segment_ids"])
    pos = np.asarray(row[f"{stack}_positions"])
    real = int(np.count_nonzero(seg))
    k = int(seg.max(initial=0))
    runs = seg[np.r_[True, seg[1:] != seg[:-1]]]
    runs = runs[runs != 0]
    if np.any(seg[real:] != 0) or not np.array_equal(runs, np.arange(1, k + 1)):
      problems.append(f"{stack} segment ids are not 1..k in contiguous runs followed by "
                      f"padding: {seg.tolist()}")
    starts = np.r_[True, seg[1:] != seg[:-1]]
    expected = np.arange(len(seg)) - np.maximum.accumulate(np.where(starts, np.arange(len(seg)), 0))
    expected = np.where(seg != 0, expected, 0)
    if not np.array_equal(pos, expected):
      problems.append(f"{stack} positions do not restart at 0 in every segment: {pos.tolist()}")
    ids[stack] = set(seg[seg != 0].tolist())
  if len(ids) == 2 and ids["encoder"] != ids["decoder"]:
    problems.append(f"encoder segments {sorted(ids['encoder'])} and decoder segments "
                    f"{sorted(ids['decoder'])} are not paired")
  return problems


def packing_efficiency(batch: Mapping[str, np.ndarray]) -> float:
  """Share of non-padding positions over all stacks' rows (1.0 = no padding).

  Args:
    batch: rows or a batch with `{stack}_segment_ids` int32[..., L].
  """
  real = total = 0
  for s in STACKS:
    seg = batch.get(f"{s}_segment_ids")
    if seg is not None:
      real += int(np.count_nonzero(seg))
      total += int(np.size(seg))
  if total == 0:
    raise ValueError("packing_efficiency needs *_segment_ids features.")
  return real / total
