"""The batched objectives as a pipeline stage: blocks of raw chunks -> converted rows.

What lives here: `BlockObjective` (objective + conversion over a block of chunks, keyed per
chunk so a chunk's result does not depend on its block), the block helpers (`split_documents`:
T5's reduce_concat_tokens + split_tokens over a block of documents; `pack_dense` and
`first_fit_pack`: first-fit packing of a block in closed form or by one scatter) and
`BlockExamplesIterDataset`, a checkpointable grain stage that runs them a block at a time
(the pipeline's default stage for these objectives: `DataSpec.batched_objectives`). What does not: the
vectorised objectives and the batched converter themselves (`batched.py`), the per-example
reference (`objectives.py`, `converters.py`, `packing.py`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grain
import numpy as np

from lm.data import batched, converters, objectives, packing


# ----------------------------------------------------------------------------- pipeline adapter


class BlockObjective:
  """Objective + conversion over a block of raw chunks: what a data pipeline calls.

  block(indices, chunks) returns, in order, the converted features of every chunk, as
  `objectives.make_objective(...)` + `converters.convert(...)` would per chunk but with the
  batched definition of this module: chunk i's randomness is keyed by (*seed_words,
  indices[i]), so the result for a chunk does not depend on the block it came in.

  Example (the pipeline's per-shard seeding):
    block = BlockObjective("span_corruption", vocab_size=32100, architecture="encoder_decoder",
                           lengths={"inputs": 512, "targets": 114}, seed_words=(seed, shard))
    features = block(range(i0, i0 + 256), chunks)   # list of 256 feature dicts

  Args:
    name: an objective of objectives.OBJECTIVES with a batched form (`objectives.batched_form`).
    vocab_size, num_extra_ids, **params: as objectives.make_objective.
    architecture, lengths, loss_on_inputs, eos_id: as converters.convert.
    seed_words: non-negative ints mixed into every example's key (e.g. (seed, shard)).
  """

  def __init__(self, name: str, *, vocab_size: int, architecture: str,
               lengths: Mapping[str, int] | None = None, loss_on_inputs: bool = False,
               num_extra_ids: int = objectives.DEFAULT_NUM_EXTRA_IDS, eos_id: int = 1,
               seed_words: Sequence[int] = (), **params: Any):
    fn = objectives.batched_form(name, params)
    lacks = objectives.OBJECTIVES[name].batched_lacks
    if fn is None:
      on = [k for k in lacks if params.get(k)]
      why = (f"{name} {on[0]}=True has no batched version" if on else
             f"objective {name!r} has no batched version; batched: "
             f"{sorted(n for n, r in objectives.OBJECTIVES.items() if r.batched)}")
      raise ValueError(f"{why}; use objectives.make_objective per example")
    params = {k: v for k, v in params.items() if k not in lacks}
    objectives.make_objective(name, vocab_size=vocab_size, num_extra_ids=num_extra_ids,
                              **params)  # validates names and values with the reference's errors
    if architecture not in converters.ARCHITECTURES:
      raise ValueError(f"unknown architecture {architecture!r}; expected one of "
                       f"{list(converters.ARCHITECTURES)}")
    self.name = name
    self._fn = fn
    self._kw = dict(vocab_size=int(vocab_size), num_extra_ids=int(num_extra_ids), **params)
    # The objective's Layout decides whether the targets get an EOS (not full_lm's chunks).
    self._convert = dict(eos_id=eos_id, lengths=dict(lengths or {}),
                         loss_on_inputs=loss_on_inputs,
                         targets_eos=objectives.layout(name).targets_eos)
    self.architecture = architecture
    self.seed_words = tuple(int(w) for w in seed_words)

  def features(self, indices: Sequence[int], tokens: np.ndarray) -> dict[str, np.ndarray]:
    """Dense features of a block of equal-length chunks int32[B, L]: dict of [B, ...].

    Only for objectives whose outputs have one length per input length (span_corruption,
    bert, mass, full_lm).
    """
    tokens = batched.check_block(tokens)
    keys = batched.example_keys(self.seed_words, np.asarray(indices, np.int64).reshape(-1))
    out = self._fn(tokens, batched.check_keys(keys, tokens.shape[0]), **self._kw)
    if isinstance(out["inputs"], list):
      raise ValueError(f"{self.name} gives examples of different lengths; call the block "
                       "(list of feature dicts) instead of features()")
    return batched.convert_batch(out, self.architecture, **self._convert)

  def __call__(self, indices: Sequence[int], chunks: Sequence[np.ndarray]
               ) -> list[dict[str, np.ndarray]]:
    """Features of each chunk (1-D int32 arrays of any lengths), in order."""
    indices = np.asarray(indices, np.int64).reshape(-1)
    if len(indices) != len(chunks):
      raise ValueError(f"{len(indices)} indices for {len(chunks)} chunks")
    lengths = np.array([np.shape(c)[0] for c in chunks], np.int64)
    out: list[dict[str, np.ndarray] | None] = [None] * len(chunks)
    for length in np.unique(lengths):
      which = np.flatnonzero(lengths == length)
      block = (np.stack([chunks[i] for i in which]) if length else
               np.zeros((which.size, 0), np.int32))
      keys = batched.example_keys(self.seed_words, indices[which])
      ex = self._fn(batched.check_block(block), keys, **self._kw)
      if isinstance(ex["inputs"], list):
        for i, x, y in zip(which, ex["inputs"], ex["targets"]):
          out[i] = converters.convert({"inputs": x, "targets": y}, self.architecture,
                                      **self._convert)
      else:
        feats = batched.convert_batch(ex, self.architecture, **self._convert)
        names = list(feats)
        for row, i in enumerate(which):
          out[i] = {k: feats[k][row] for k in names}
    return out  # type: ignore[return-value]


# ----------------------------------------------------------------------------- blocks of chunks and rows


def split_documents(documents: Sequence[np.ndarray], raw_length: int,
                    carry: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Concatenates carry + documents and cuts whole raw chunks (T5's reduce_concat_tokens +
  split_tokens, as the pipeline's ConcatThenSplit does one document at a time).

  Args:
    documents: 1-D int token arrays (empty ones contribute nothing).
    raw_length: tokens per chunk (objectives.raw_length).
    carry: int32[r] tokens left over from the previous call (r < raw_length), or None.
  Returns:
    (chunks int32[n, raw_length], rest int32[r']): n = total // raw_length whole chunks in
    stream order and the r' < raw_length tokens after them (the next call's carry).
  """
  if raw_length < 1:
    raise ValueError(f"raw_length must be >= 1, got {raw_length}")
  parts = ([] if carry is None else [np.asarray(carry, np.int32)])
  parts += [np.asarray(d, np.int32).reshape(-1) for d in documents]
  stream = np.concatenate(parts) if parts else np.zeros(0, np.int32)
  n = stream.size // raw_length
  return stream[:n * raw_length].reshape(n, raw_length), stream[n * raw_length:].copy()


def pack_dense(features: Mapping[str, np.ndarray], lengths: Mapping[str, int]
               ) -> dict[str, np.ndarray]:
  """First-fit packing of a block of EQUAL-length examples, in closed form.

  With every example n_s tokens long in stack s, first fit (`packing.pack_examples`) puts
  k = min_s(L_s // n_s) consecutive examples in each row: row r holds examples
  r k, ..., r k + k - 1. This builds those rows with reshapes instead of a loop.

  Args:
    features: converted features of B examples, dict of [B, n_s] arrays whose keys start
      with encoder_/decoder_ (batched.convert_batch's output).
    lengths: row length per stack ({"encoder": Li, "decoder": Lt} or {"decoder": L}).
  Returns:
    dict of [ceil(B / k), L_s] arrays: the features padded with 0, plus
    `{stack}_segment_ids` (1..k per row, 0 on padding) and `{stack}_positions` (int32);
    equal to packing.pack_examples on the rows.
  Raises:
    ValueError: an example longer than its row.
  """
  keys = list(features)
  if not keys:
    raise ValueError("pack_dense needs at least one feature")
  b = int(np.shape(features[keys[0]])[0])
  n = {}
  for key in keys:
    s = packing.stack_of(key)
    if s not in lengths:
      raise ValueError(f"Feature {key!r} has no row length; lengths are {dict(lengths)}.")
    width = int(np.shape(features[key])[1])
    if n.setdefault(s, width) != width:
      raise ValueError(f"The {s} features differ in length: {n[s]} and {width} ({key!r})")
  for s, width in n.items():
    if width > lengths[s]:
      raise ValueError(f"Examples have {width} {s} tokens, more than the row length "
                       f"{lengths[s]}; trim them first (converters lengths=...).")
  k = min(lengths[s] // w for s, w in n.items() if w > 0) if any(n.values()) else 1
  rows = -(-b // k)
  real = (np.arange(rows * k) < b).reshape(rows, k)  # which slots hold an example
  out = {}
  for key in keys:
    s = packing.stack_of(key)
    v = np.asarray(features[key])
    slots = np.zeros((rows * k, n[s]), v.dtype)
    slots[:b] = v
    row = np.zeros((rows, lengths[s]), v.dtype)
    row[:, :k * n[s]] = slots.reshape(rows, k * n[s])
    out[key] = row
  for s in sorted(n, key=packing.STACKS.index):
    seg = np.zeros((rows, lengths[s]), np.int32)
    pos = np.zeros((rows, lengths[s]), np.int32)
    seg[:, :k * n[s]] = np.repeat(np.where(real, np.arange(1, k + 1, dtype=np.int32), 0),
                                  n[s], axis=1)
    pos[:, :k * n[s]] = np.where(np.repeat(real, n[s], axis=1),
                                 np.tile(np.arange(n[s], dtype=np.int32), k), 0)
    out[f"{s}_segment_ids"] = seg
    out[f"{s}_positions"] = pos
  return out


# ----------------------------------------------------------------------------- grain stage


_READ = 256  # documents read per bulk read


def pack_block(objective: BlockObjective, indices: Sequence[int], chunks: Sequence[np.ndarray],
               lengths: Mapping[str, int]) -> dict[str, np.ndarray]:
  """objective + convert + first-fit packing of one block of chunks: dict of [R, L] rows.

  Equal-length chunks of an objective with one output length (span corruption, BERT, MASS,
  full LM) are packed in closed form (`pack_dense`); otherwise by `first_fit_pack` (the same
  rows as `packing.pack_examples`). Either way the
  rows are exactly first fit over the block.
  """
  dense = objective.name in ("span_corruption", "bert", "mass", "full_lm")
  if dense and len({np.shape(c)[0] for c in chunks}) == 1:
    return pack_dense(objective.features(indices, np.stack(chunks)), lengths)
  return first_fit_pack(objective(indices, chunks), lengths)


def first_fit_pack(examples: Sequence[Mapping[str, np.ndarray]], lengths: Mapping[str, int]
                   ) -> dict[str, np.ndarray]:
  """`packing.pack_examples` (first fit, same rows, same errors) as dict of [R, L] arrays.

  Only the choice of row is a loop over examples (one vector test per example); the rows
  are then filled by one scatter per feature.

  Args:
    examples: converted examples (same keys), 1-D arrays. lengths: row length per stack.
  Returns:
    dict of [R, L_stack] arrays: the features padded with 0 plus `{stack}_segment_ids` and
    `{stack}_positions` (int32).
  """
  if not examples:
    raise ValueError("first_fit_pack needs at least one example")
  keys = list(examples[0])
  stack_of = {k: packing.stack_of(k) for k in keys}
  for k, st in stack_of.items():
    if st not in lengths:
      raise ValueError(f"Feature {k!r} has no row length; lengths are {dict(lengths)}.")
  stacks = sorted(set(stack_of.values()), key=packing.STACKS.index)
  cap = np.array([lengths[st] for st in stacks], np.int64)
  first_key = {st: next(k for k in keys if stack_of[k] == st) for st in stacks}
  num = len(examples)
  sizes = np.empty((num, len(stacks)), np.int64)
  for i, ex in enumerate(examples):
    if list(ex) != keys:
      raise ValueError(f"Example {i} has keys {list(ex)}, expected {keys}.")
    for j, st in enumerate(stacks):
      sizes[i, j] = len(ex[first_key[st]])
  for k in keys:
    j = stacks.index(stack_of[k])
    if any(len(ex[k]) != sizes[i, j] for i, ex in enumerate(examples)):
      raise ValueError(f"The {stack_of[k]} features of an example differ in length.")
  over = np.flatnonzero((sizes > cap).any(axis=1))
  if over.size:
    i = int(over[0])
    j = int(np.flatnonzero(sizes[i] > cap)[0])
    raise ValueError(f"Example {i} has {sizes[i, j]} {stacks[j]} tokens, more than the row length "
                     f"{cap[j]}; trim it first (converters.convert lengths=...).")
  used = np.zeros((num, len(stacks)), np.int64)
  count = np.zeros(num, np.int64)
  row_of = np.empty(num, np.int64)
  offset = np.empty((num, len(stacks)), np.int64)
  segment = np.empty(num, np.int64)
  rows = 0
  for i in range(num):
    fits = np.flatnonzero((used[:rows] + sizes[i] <= cap).all(axis=1))
    r = int(fits[0]) if fits.size else rows
    rows = max(rows, r + 1)
    row_of[i], offset[i] = r, used[r]
    count[r] += 1
    segment[i] = count[r]
    used[r] += sizes[i]
  out = {}
  for j, st in enumerate(stacks):
    n = sizes[:, j]
    total = int(n.sum())
    within = np.arange(total) - np.repeat(np.cumsum(n) - n, n)  # position inside the example
    dest = np.repeat(row_of * cap[j] + offset[:, j], n) + within
    for k in keys:
      if stack_of[k] != st:
        continue
      dtype = np.asarray(examples[0][k]).dtype
      flat = np.zeros(rows * cap[j], dtype)
      if total:
        flat[dest] = np.concatenate([np.asarray(ex[k]) for ex in examples])
      out[k] = flat.reshape(rows, cap[j])
    seg = np.zeros(rows * cap[j], np.int32)
    pos = np.zeros(rows * cap[j], np.int32)
    seg[dest] = np.repeat(segment, n)
    pos[dest] = within
    out[f"{st}_segment_ids"] = seg.reshape(rows, cap[j])
    out[f"{st}_positions"] = pos.reshape(rows, cap[j])
  return out


def _rows(block: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
  keys = list(block)
  return [{k: block[k][i] for k in keys} for i in range(len(block[keys[0]]))]


class BlockExamplesIterDataset(grain.IterDataset):
  """Documents -> converted examples, a block of chunks at a time (checkpointable).

  Replaces the per-example stages `to_iter_dataset -> filter(non-empty) ->
  ConcatThenSplitIterDataset -> map_with_index(objective + convert)` of a data shard:
  documents are read in order from `documents` (a MapDataset of {"tokens": int[n]}, e.g.
  already shuffled and repeated; empty ones are skipped), concatenated and cut into chunks
  of `raw_length` tokens exactly as ConcatThenSplit cuts them (the last chunk of a finite
  dataset is shorter instead of padded), `block_size` chunks at a time, and every block goes
  through `objective` (a BlockObjective) at once. Chunk i of the shard (0, 1, ...) is keyed
  by (*objective.seed_words, i), as map_with_index numbers them.

  Iterator state (JSON-serialisable): {"doc", "offset", "chunk", "index"}: the document and
  token offset where the current block starts, its first chunk index, and how many of its
  examples were returned. set_state rebuilds that block (deterministic) and continues at
  the same example, so a restored iterator yields exactly what an uninterrupted one would.

  Args:
    documents: MapDataset of {"tokens": int[n]} (or of int arrays).
    raw_length: tokens per chunk (objectives.raw_length).
    objective: the BlockObjective applied to every block.
    block_size: chunks per block (a speed knob: without pack_lengths results do not depend
      on it).
    pack_lengths: if given ({"encoder": Li, "decoder": Lt} or {"decoder": L}), every block's
      examples are packed by first fit WITHIN the block (`pack_block`) and the iterator
      yields rows (with {stack}_segment_ids / _positions, the names of
      packing.rename_packed) instead of examples: no grain packer needed. Rows never mix
      examples of two blocks, so the packing then depends on block_size (on span
      corruption's full chunks it does not: one example fills one row).
  """

  def __init__(self, documents: grain.MapDataset, raw_length: int, objective: BlockObjective,
               block_size: int = 256, pack_lengths: Mapping[str, int] | None = None):
    super().__init__(documents)
    if raw_length < 1 or block_size < 1:
      raise ValueError(f"raw_length and block_size must be >= 1, got {raw_length}, {block_size}")
    self._documents = documents
    self._raw = int(raw_length)
    self._objective = objective
    self._block = int(block_size)
    self._pack = dict(pack_lengths) if pack_lengths else None

  def __iter__(self) -> "_BlockExamplesIterator":
    return _BlockExamplesIterator(self._documents, self._raw, self._objective, self._block,
                                  self._pack)

  def __str__(self) -> str:
    return f"BlockExamplesIterDataset(raw_length={self._raw}, block_size={self._block})"


class _BlockExamplesIterator(grain.DatasetIterator):
  """See BlockExamplesIterDataset."""

  def __init__(self, documents, raw_length, objective, block_size, pack_lengths=None):
    super().__init__()
    self._pack = pack_lengths
    self._documents = documents
    self._num_docs = len(documents)
    self._raw = raw_length
    self._objective = objective
    self._block = block_size
    self._start = {"doc": 0, "offset": 0, "chunk": 0}
    self._next = dict(self._start)  # where the block after the current one starts
    self._buffer: list[dict[str, np.ndarray]] = []
    self._index = 0
    self._cache: dict[int, Any] = {}

  def _tokens(self, i: int) -> np.ndarray:
    if i not in self._cache:  # read ahead in bulk: one _getitems call per _READ documents
      stop = min(i + _READ, self._num_docs)
      getitems = getattr(self._documents, "_getitems", None)  # grain's batched read
      docs = getitems(range(i, stop)) if getitems else [self._documents[j] for j in range(i, stop)]
      self._cache = dict(zip(range(i, stop), docs))
    doc = self._cache[i]
    if doc is None:  # an element a MapDataset filter dropped
      return np.zeros(0, np.int32)
    if isinstance(doc, Mapping):
      doc = doc["tokens"]
    return np.asarray(doc).reshape(-1)

  def _read_block(self, start: Mapping[str, int]) -> tuple[list[np.ndarray], dict[str, int]]:
    """Chunks of the block starting at `start`, and where the next block starts."""
    need = self._block * self._raw
    doc, offset = start["doc"], start["offset"]
    parts, have = [], 0
    while have < need and doc < self._num_docs:
      tokens = self._tokens(doc)[offset:]
      take = tokens[:need - have]
      if take.size:
        parts.append(take)
        have += take.size
      if take.size < tokens.size:  # this document continues in the next block
        offset += take.size
      else:
        doc, offset = doc + 1, 0
    stream = np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)
    chunks = [stream[i:i + self._raw] for i in range(0, stream.size, self._raw)]
    return chunks, {"doc": doc, "offset": offset, "chunk": start["chunk"] + len(chunks)}

  def _load(self, start: Mapping[str, int]) -> None:
    chunks, self._next = self._read_block(start)
    self._start = dict(start)
    index = np.arange(start["chunk"], start["chunk"] + len(chunks))
    if not chunks:
      self._buffer = []
    elif self._pack is None:
      self._buffer = self._objective(index, chunks)
    else:
      self._buffer = _rows(pack_block(self._objective, index, chunks, self._pack))
    self._index = 0

  def __next__(self) -> dict[str, np.ndarray]:
    if self._index >= len(self._buffer):
      self._load(self._next)
      if not self._buffer:
        raise StopIteration
    out = self._buffer[self._index]
    self._index += 1
    return out

  def get_state(self) -> dict[str, int]:
    return {**self._start, "index": self._index}

  def set_state(self, state: Mapping[str, int]) -> None:
    start = {k: int(state[k]) for k in ("doc", "offset", "chunk")}
    if state["index"] == 0:  # nothing of this block returned yet: build it lazily
      self._start, self._next, self._buffer, self._index = start, start, [], 0
      return
    self._load(start)
    self._index = int(state["index"])
