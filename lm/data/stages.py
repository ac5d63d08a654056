"""The grain stages of a shard's sub-pipeline (docs/pipeline.md), each deterministic.

What lives here: tokenization read ahead on a shared thread pool (`TokenizedDocs`,
`ThreadPool`), the per-example objective and conversion seeded per chunk
(`ObjectiveAndConvert`), single-document splitting (`SplitDocument`), a mixture's weighted
sampling of member streams (`SampleStreamsIterDataset`) and the seeds (`mix`,
`shuffle_seed`). What does not: the pipeline that wires them (`pipeline.py`: `DataSpec`,
`DataPipeline`), the vectorised block stage (`blocks.py`), the pure objectives, converters
and packing.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from typing import Any

import grain
import numpy as np
from grain import experimental as grain_experimental

from lm.data import converters, records
from lm.data import tokenizer as tokenizer_lib

# Documents tokenized per read-ahead task, and tasks in flight per shard per thread.
_TOKENIZE_BLOCK = 16


def tokenize_fn(tok: tokenizer_lib.Tokenizer, document_eos: bool):
  eos = np.array([tok.eos_id], np.int32)

  def tokenize(doc: str | np.ndarray) -> dict[str, np.ndarray]:
    # A prepared source's documents are token ids already (lm/data/prepared.py).
    ids = doc if isinstance(doc, np.ndarray) else tok.encode(doc)
    return {"tokens": np.concatenate([ids, eos]) if document_eos else ids.astype(np.int32)}
  return tokenize


class ThreadPool:
  """One lazily started thread pool shared by all shards of an iterator."""

  def __init__(self, num_threads: int):
    self.num_threads = num_threads
    self._executor: futures.ThreadPoolExecutor | None = None

  def submit(self, fn: Callable[..., Any], *args) -> futures.Future:
    if self._executor is None:
      self._executor = futures.ThreadPoolExecutor(self.num_threads,
                                                  thread_name_prefix="lm-tokenize")
    return self._executor.submit(fn, *args)

  def close(self) -> None:
    if self._executor is not None:
      self._executor.shutdown(wait=True, cancel_futures=True)
      self._executor = None


class TokenizedDocs(grain.MapDataset):
  """documents -> {"tokens": int32[n]}, tokenized ahead in blocks on a shared pool.

  Element i depends only on the parent's element i (tokenization is pure), so the
  read-ahead changes no result; it only overlaps tokenization with the rest of the
  pipeline. Must be read by one thread at a time (the pipeline's thread).
  """

  def __init__(self, parent: grain.MapDataset, tokenize: Callable[[str], dict],
               pool: ThreadPool):
    super().__init__(parent)
    self._tokenize = tokenize
    self._pool = pool
    self._depth = pool.num_threads + 1  # blocks in flight ahead of the reader
    self._blocks: dict[int, futures.Future] = {}

  def __len__(self) -> int:
    return len(self._parent)

  def __str__(self) -> str:
    return f"TokenizedDocs(block={_TOKENIZE_BLOCK})"

  def _tokenize_block(self, start: int, stop: int) -> list[dict[str, np.ndarray] | None]:
    out = []
    for i in range(start, stop):
      doc = self._parent[i]
      out.append(None if doc is None else self._tokenize(doc))
    return out

  def __getitem__(self, index):
    if isinstance(index, slice):
      return self.slice(index)
    block = index // _TOKENIZE_BLOCK
    last = (len(self) - 1) // _TOKENIZE_BLOCK
    wanted = range(block, min(block + self._depth, last + 1))
    for b in [b for b in self._blocks if b not in wanted]:  # after a jump (set_state)
      self._blocks.pop(b).cancel()
    for b in wanted:
      if b not in self._blocks:
        self._blocks[b] = self._pool.submit(
            self._tokenize_block, b * _TOKENIZE_BLOCK,
            min((b + 1) * _TOKENIZE_BLOCK, len(self)))
    return self._blocks[block].result()[index - block * _TOKENIZE_BLOCK]


class ObjectiveAndConvert:
  """chunk index, {"tokens", ...} -> converted features (objective seeded per example).

  Args:
    objective: the per-example form, parameters bound (objectives.make_objective).
    seed_words: example i's generator is Philox(mix(*seed_words, i)).
    architecture, lengths, loss_on_inputs, targets_eos: as converters.convert.
  """

  def __init__(self, objective: records.ObjectiveFn, seed_words: tuple[int, ...], *,
               architecture: str, lengths: Mapping[str, int], loss_on_inputs: bool,
               targets_eos: bool):
    self._objective = objective
    self._arch = architecture
    self._lengths = dict(lengths)
    self._loss_on_inputs = loss_on_inputs
    self._targets_eos = targets_eos
    self._seed_words = seed_words

  def __call__(self, index: int, chunk: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    tokens = chunk["tokens"]
    if "tokens_segment_ids" in chunk:  # Drop ConcatThenSplit's padding (last chunk only).
      tokens = tokens[:np.count_nonzero(chunk["tokens_segment_ids"])]
    key = np.array([*self._seed_words, index], np.uint64)
    rng = np.random.Generator(np.random.Philox(key=mix(key)))
    example = self._objective(tokens, rng)
    return converters.convert(example, self._arch, lengths=self._lengths,
                              loss_on_inputs=self._loss_on_inputs,
                              targets_eos=self._targets_eos)


class SplitDocument(grain_experimental.FlatMapTransform):
  """{"tokens": int32[n]} -> [{"tokens": int32[<= raw]}, ...]: one document's raw segments.

  T5's split_tokens on one document (the last segment is shorter). T5 first keeps one random
  65536-token window of longer documents (select_random_chunk); here every segment of the
  document is used (sources cut documents at max_document_chars anyway).
  """

  max_fan_out = 1 << 20  # grain's iterator flat map does not bound it; documents are capped

  def __init__(self, raw_length: int):
    self._raw = int(raw_length)

  def flat_map(self, element: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    tokens = element["tokens"]
    return [{"tokens": tokens[i:i + self._raw]} for i in range(0, tokens.size, self._raw)]


# Tag of the random draw that picks a mixture member per example (kept apart from the
# objectives' own seeds).
_SAMPLE_TAG = 0x53414D504C45


class SampleStreamsIterDataset(grain.IterDataset):
  """Examples drawn from several streams: stream j with probability probs[j] per example.

  The draw of example i comes from rng(seed words, _SAMPLE_TAG, i) (tf.data's
  sample_from_datasets, as UL2's ul2_objective, made deterministic and checkpointable).
  Ends when a drawn stream has ended.
  """

  def __init__(self, streams: Sequence[grain.IterDataset], weights: Sequence[float],
               seed_words: tuple[int, ...]):
    super().__init__(list(streams))
    w = np.asarray(weights, np.float64)
    self._probs = w / w.sum()
    self._seed_words = seed_words

  def __iter__(self) -> _SampleStreamsIterator:
    return _SampleStreamsIterator([iter(p) for p in self.parents], self._probs,
                                  self._seed_words)

  def __str__(self) -> str:
    return f"SampleStreamsIterDataset(probs={self._probs.round(4).tolist()})"


class _SampleStreamsIterator(grain.DatasetIterator):
  """State: examples drawn so far and every stream's position."""

  def __init__(self, iterators: Sequence[grain.DatasetIterator], probs: np.ndarray,
               seed_words: tuple[int, ...]):
    super().__init__(list(iterators))
    self._iterators = list(iterators)
    self._probs = probs
    self._seed_words = seed_words
    self._count = 0

  def __next__(self) -> dict[str, np.ndarray]:
    key = np.array([*self._seed_words, _SAMPLE_TAG, self._count], np.uint64)
    rng = np.random.Generator(np.random.Philox(key=mix(key)))
    j = int(rng.choice(len(self._iterators), p=self._probs))
    example = next(self._iterators[j])
    self._count += 1
    return example

  def get_state(self) -> dict[str, Any]:
    return {"count": self._count, "streams": [it.get_state() for it in self._iterators]}

  def set_state(self, state: Mapping[str, Any]) -> None:
    self._count = int(state["count"])
    for it, st in zip(self._iterators, state["streams"]):
      it.set_state(st)


def mix(words: np.ndarray) -> np.ndarray:
  """Hashes any number of uint64 words into a 2-word Philox key."""
  digest = hashlib.blake2b(words.tobytes(), digest_size=16).digest()
  return np.frombuffer(digest, np.uint64)


def shuffle_seed(seed: int, shard: int, *member: int) -> int:
  """grain's 32-bit shuffle seed of one virtual shard (and mixture member)."""
  words = np.array([seed, shard, 0x5348554646, *member], np.uint64)
  return int(mix(words)[0] >> np.uint64(32))
