"""The grain input pipeline: documents -> fixed-shape feature batches (the impure part).

Train pipeline, per process (grain dataset API):

  source (documents)                                   sources.py
  -> shard: documents process_index::process_count     disjoint; together: everything
  -> shuffle(seed), repeat(num_epochs)                 a different order every epoch
  -> tokenize (+EOS per document for full_lm)          MapDataset, read by num_threads threads
  -> concatenate documents, split into raw chunks      grain ConcatThenSplitIterDataset
     of objectives.raw_length(...) tokens              (T5 reduce_concat_tokens + split_tokens)
  -> objective(chunk, rng(seed, process, chunk index)) objectives.py, seeded per example
  -> converters.convert(architecture, lengths)          EOS, trimming, decoder layout
  -> pack (grain FirstFitPackIterDataset) or pad        packing.py names
  -> batch [B, L]                                       B = batch_size / process_count
  -> thread prefetch                                    overlaps with the train step

Everything after tokenization runs in one thread in a fixed order, and the random
generator of example i is derived from (seed, process_index, i), so batches depend
only on the spec and the process, not on thread counts. The iterator's state
(`get_state()`: a small JSON-serialisable dict) restores the exact position:
batches after `set_state` are the ones an uninterrupted run would have produced.

Why threads and not grain's `mp_prefetch`: mp_prefetch slices the dataset per
worker BEFORE the stateful concatenate/pack steps, so its output would change with
the worker count; SentencePiece releases the GIL, so tokenization (the costly
step) scales over threads anyway, and the rest is vectorised NumPy.

Public API (what the trainer calls):

  spec = DataSpec(format="jsonl", paths=("data/*.jsonl",), tokenizer="spm.model",
                  objective="span_corruption", inputs_length=512, targets_length=114,
                  batch_size=128, seed=0)
  data = DataPipeline(spec, process_index=jax.process_index(),
                      process_count=jax.process_count())
  it = data.train_iterator()          # infinite (num_epochs=None)
  batch = next(it)                    # dict of np arrays [batch_size // process_count, L]
  state = it.get_state()              # JSON-serialisable dict; save with the checkpoint
  it.set_state(state)                 # on restore, before the first next()
  it.packing_efficiency               # non-padding share of the last batch (log it)
  for batch in data.eval_iterator(num_batches=N): ...   # finite, same every call
  data.tokenizer, data.stats()        # Tokenizer; source statistics dict

`make_train_iterator(spec, process_index, process_count)` and
`make_eval_iterator(...)` are one-call shortcuts.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import grain
import numpy as np
from grain import experimental as grain_experimental

from lm.data import converters, objectives, packing, sources
from lm.data import tokenizer as tokenizer_lib

_STATE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class DataSpec:
  """What the pipeline reads and produces (the trainer maps config.data onto it).

  Attributes:
    format: sources.make_source format ("default" = embedded stdlib-docs corpus,
      "auto", "text", "paragraphs", "jsonl", "parquet", "array_record", "hf").
    paths: files/globs (one folder for "hf").
    text_field: JSON field / column with the text. hf_split: DatasetDict split.
    json_records: ArrayRecord records are JSON objects (else raw UTF-8 text).
    on_decode_error: "replace" or "skip" invalid UTF-8.
    max_document_chars: longer documents are cut into pieces by the source.
    eval_format, eval_paths: separate validation data; if empty, a share
      `validation_fraction` of the train documents is held out (by hash, seed
      `validation_seed`).
    tokenizer: SentencePiece .model path; None = a tokenizer of
      `default_vocab_size` pieces trained on the default corpus (cached).
    extra_ids: sentinels appended to the tokenizer (T5: 100).
    objective, objective_params: objectives.make_objective name and kwargs.
    architecture: "encoder_decoder", "prefix_lm" or "causal".
    loss_on_inputs: decoder-only: loss on the inputs part too.
    inputs_length, targets_length: feature lengths (decoder-only rows are
      inputs_length + targets_length long).
    batch_size: GLOBAL batch size; each process yields batch_size // process_count.
    eval_batch_size: global eval batch size (default batch_size).
    pack: pack several examples per row (else pad one example per row).
    num_packing_bins: rows the packer fills at once (default: per-process batch).
    document_eos: append EOS after each document before concatenation (None =
      only for full_lm, as T5).
    seed: shuffle and objective seed. num_epochs: None = repeat forever.
    num_threads: tokenization threads. prefetch_batches: batches prefetched by a
      background thread (0 = none).
  """
  format: str = "default"
  paths: tuple[str, ...] = ()
  text_field: str = "text"
  hf_split: str | None = None
  json_records: bool = False
  on_decode_error: str = "replace"
  max_document_chars: int = sources.DEFAULT_MAX_DOCUMENT_CHARS
  eval_format: str | None = None
  eval_paths: tuple[str, ...] = ()
  validation_fraction: float = 0.01
  validation_seed: int = 0
  tokenizer: str | None = None
  default_vocab_size: int = 8000
  extra_ids: int = tokenizer_lib.DEFAULT_EXTRA_IDS
  objective: str = "span_corruption"
  objective_params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  architecture: str = "encoder_decoder"
  loss_on_inputs: bool = False
  inputs_length: int = 512
  targets_length: int = 114
  batch_size: int = 128
  eval_batch_size: int | None = None
  pack: bool = True
  num_packing_bins: int | None = None
  document_eos: bool | None = None
  seed: int = 0
  num_epochs: int | None = None
  num_threads: int = 4
  prefetch_batches: int = 2

  def __post_init__(self):
    if isinstance(self.paths, str):
      object.__setattr__(self, "paths", (self.paths,))
    if isinstance(self.eval_paths, str):
      object.__setattr__(self, "eval_paths", (self.eval_paths,))
    object.__setattr__(self, "paths", tuple(self.paths))
    object.__setattr__(self, "eval_paths", tuple(self.eval_paths))
    object.__setattr__(self, "objective_params", dict(self.objective_params))
    if self.architecture not in packing.ARCHITECTURES:
      raise ValueError(f"Unknown architecture {self.architecture!r}; "
                       f"expected one of {packing.ARCHITECTURES}.")
    if self.objective not in objectives.OBJECTIVES:
      raise ValueError(f"Unknown objective {self.objective!r}; expected one of "
                       f"{sorted(objectives.OBJECTIVES)}.")
    for name in ("batch_size", "inputs_length", "targets_length", "num_threads"):
      if getattr(self, name) <= 0:
        raise ValueError(f"DataSpec.{name} must be positive, got {getattr(self, name)}.")
    if self.num_epochs is not None and self.num_epochs <= 0:
      raise ValueError(f"DataSpec.num_epochs must be positive or None, got {self.num_epochs}.")

  def fingerprint(self) -> str:
    """Digest of the fields that change which batches are produced."""
    skip = {"num_threads", "prefetch_batches", "eval_batch_size", "eval_format", "eval_paths"}
    d = {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def default_tokenizer(vocab_size: int = 8000, *, extra_ids: int = tokenizer_lib.DEFAULT_EXTRA_IDS
                      ) -> tokenizer_lib.Tokenizer:
  """A unigram tokenizer trained on the default corpus, cached under the lm cache dir."""
  from lm.data import corpus  # pylint: disable=g-import-not-at-top
  path = os.path.join(corpus.cache_dir(), "tokenizers", f"stdlib-docs-unigram-{vocab_size}.model")
  if os.path.exists(path):
    return tokenizer_lib.load_tokenizer(path, extra_ids=extra_ids)
  tok = tokenizer_lib.train_tokenizer(corpus.default_corpus(), vocab_size=vocab_size,
                                      extra_ids=extra_ids)
  try:
    tmp = f"{path}.{os.getpid()}.tmp"
    tok.save(tmp)
    os.replace(tmp, path)
  except OSError:
    pass
  return tok


def _tokenize_fn(tok: tokenizer_lib.Tokenizer, document_eos: bool):
  eos = np.array([tok.eos_id], np.int32)

  def tokenize(doc: str) -> dict[str, np.ndarray]:
    ids = tok.encode(doc)
    return {"tokens": np.concatenate([ids, eos]) if document_eos else ids.astype(np.int32)}
  return tokenize


class _ObjectiveAndConvert:
  """chunk index, {"tokens", ...} -> converted features (objective seeded per example)."""

  def __init__(self, spec: DataSpec, vocab_size: int, seed_words: tuple[int, ...]):
    self._objective = objectives.make_objective(
        spec.objective, vocab_size=vocab_size, num_extra_ids=spec.extra_ids,
        **_objective_params(spec))
    self._arch = spec.architecture
    self._lengths = {"inputs": spec.inputs_length, "targets": spec.targets_length}
    self._loss_on_inputs = spec.loss_on_inputs
    self._seed_words = seed_words

  def __call__(self, index: int, chunk: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    tokens = chunk["tokens"]
    if "tokens_segment_ids" in chunk:  # Drop ConcatThenSplit's padding (last chunk only).
      tokens = tokens[:np.count_nonzero(chunk["tokens_segment_ids"])]
    key = np.array([*self._seed_words, index], np.uint64)
    rng = np.random.Generator(np.random.Philox(key=_mix(key)))
    example = self._objective(tokens, rng)
    return converters.convert(example, self._arch, lengths=self._lengths,
                              loss_on_inputs=self._loss_on_inputs)


def _objective_params(spec: DataSpec) -> dict[str, Any]:
  """make_objective kwargs: a mixture also needs the feature lengths (from the spec)."""
  params = dict(spec.objective_params)
  if spec.objective == "mixture":
    params.setdefault("inputs_length", spec.inputs_length)
    params.setdefault("targets_length", spec.targets_length)
  return params


def _mix(words: np.ndarray) -> np.ndarray:
  """Hashes any number of uint64 words into a 2-word Philox key."""
  digest = hashlib.blake2b(words.tobytes(), digest_size=16).digest()
  return np.frombuffer(digest, np.uint64)


def _feature_keys(architecture: str) -> list[str]:
  dummy = converters.convert({"inputs": np.array([3], np.int32),
                              "targets": np.array([3], np.int32)}, architecture)
  return list(dummy)


def _pad_batch(rows: Mapping[str, np.ndarray], batch_size: int) -> dict[str, np.ndarray]:
  """Pads a partial batch [b, L] to [batch_size, L] with all-zero rows."""
  out = {}
  for k, v in rows.items():
    pad = np.zeros((batch_size - v.shape[0], *v.shape[1:]), v.dtype)
    out[k] = np.concatenate([v, pad])
  return out


def _tuplify_slices(state: Any) -> Any:
  """JSON turns grain ConcatThenSplit's (start, stop) tuples into lists; undo that."""
  if isinstance(state, dict):
    return {k: ({kk: tuple(vv) for kk, vv in v.items()} if k == "remainder_slices"
                else _tuplify_slices(v)) for k, v in state.items()}
  if isinstance(state, list):
    return [_tuplify_slices(v) for v in state]
  return state


class TrainIterator(Iterator[dict]):
  """Infinite (or num_epochs-long) iterator of per-process batches.

  Attributes:
    packing_efficiency: non-padding share of the last batch (float in (0, 1]).
    batches: batches produced since the start (restored by set_state).
  """

  def __init__(self, dataset: grain.IterDataset, fingerprint: str):
    self._dataset = dataset
    self._it = iter(dataset)
    self._fingerprint = fingerprint
    self.packing_efficiency = float("nan")
    self.batches = 0

  def __next__(self) -> dict[str, np.ndarray]:
    batch = next(self._it)
    self.batches += 1
    self.packing_efficiency = packing.packing_efficiency(batch)
    return batch

  def get_state(self) -> dict[str, Any]:
    """A JSON-serialisable dict of plain ints/strings/lists."""
    return {"version": _STATE_VERSION, "fingerprint": self._fingerprint,
            "batches": self.batches, "grain": self._it.get_state()}

  def set_state(self, state: Mapping[str, Any]) -> None:
    """Restores a state from get_state (also after a JSON round trip)."""
    if state.get("version") != _STATE_VERSION:
      raise ValueError(f"Data iterator state version {state.get('version')} is not "
                       f"{_STATE_VERSION}; it was saved by another lm version.")
    if state["fingerprint"] != self._fingerprint:
      raise ValueError(
          "Data iterator state was saved with a different data spec (fingerprint "
          f"{state['fingerprint']} != {self._fingerprint}); restore with the same data "
          "config, or start the data from scratch.")
    self._it.set_state(_tuplify_slices(state["grain"]))
    self.batches = int(state["batches"])

  def close(self) -> None:
    close = getattr(self._it, "close", None)
    if close:
      close()


class DataPipeline:
  """Sources, tokenizer and iterator factories for one process.

  Args:
    spec: DataSpec.
    process_index, process_count: this process's shard (jax.process_index() /
      jax.process_count() in a multi-process job; 0 / 1 otherwise).
    tokenizer: use this Tokenizer instead of loading spec.tokenizer.
  """

  def __init__(self, spec: DataSpec, *, process_index: int = 0, process_count: int = 1,
               tokenizer: tokenizer_lib.Tokenizer | None = None):
    if not 0 <= process_index < process_count:
      raise ValueError(f"process_index {process_index} not in [0, {process_count}).")
    for name, b in (("batch_size", spec.batch_size),
                    ("eval_batch_size", spec.eval_batch_size or spec.batch_size)):
      if b % process_count:
        raise ValueError(f"DataSpec.{name}={b} is not divisible by process_count="
                         f"{process_count}.")
    self.spec = spec
    self.process_index, self.process_count = process_index, process_count
    self.batch_size = spec.batch_size // process_count
    self.eval_batch_size = (spec.eval_batch_size or spec.batch_size) // process_count
    if tokenizer is None:
      tokenizer = (tokenizer_lib.load_tokenizer(spec.tokenizer, extra_ids=spec.extra_ids)
                   if spec.tokenizer else
                   default_tokenizer(spec.default_vocab_size, extra_ids=spec.extra_ids))
    if tokenizer.extra_ids != spec.extra_ids:
      raise ValueError(f"Tokenizer has {tokenizer.extra_ids} extra ids, spec {spec.extra_ids}.")
    self.tokenizer = tokenizer
    self.raw_length = objectives.raw_length(
        spec.objective, inputs_length=spec.inputs_length,
        targets_length=spec.targets_length, **spec.objective_params)
    self.lengths = packing.feature_lengths(spec.architecture, spec.inputs_length,
                                           spec.targets_length)
    self._keys = _feature_keys(spec.architecture)
    # Fail now, not in a worker thread: an unknown objective parameter raises here.
    objectives.make_objective(spec.objective, vocab_size=tokenizer.vocab_size,
                              num_extra_ids=spec.extra_ids, **_objective_params(spec))
    self.train_source, self.eval_source = self._build_sources()

  def _build_sources(self):
    spec = self.spec
    kw = dict(text_field=spec.text_field, split=spec.hf_split, json_records=spec.json_records,
              on_decode_error=spec.on_decode_error, max_document_chars=spec.max_document_chars)
    source = sources.make_source(spec.format, spec.paths, **kw)
    if spec.eval_paths:
      eval_source = sources.make_source(spec.eval_format or spec.format, spec.eval_paths, **kw)
      return source, eval_source
    if spec.validation_fraction == 0:
      return source, None
    return sources.split_validation(source, spec.validation_fraction, seed=spec.validation_seed)

  def stats(self) -> dict[str, Any]:
    """Source statistics (SourceStats.as_dict) and sizes, for logging."""
    def source_stats(src):
      base = getattr(src, "source", src)
      return {"documents": len(src), **getattr(base, "stats", sources.SourceStats()).as_dict()}
    out = {"train": source_stats(self.train_source), "raw_length": self.raw_length,
           "vocab_size": self.tokenizer.vocab_size,
           "embedding_size": tokenizer_lib.padded_vocab_size(self.tokenizer.vocab_size)}
    if self.eval_source is not None:
      out["eval"] = {"documents": len(self.eval_source)}
    return out

  def _examples(self, source, *, shuffle: bool, num_epochs: int | None,
                seed: int) -> grain.IterDataset:
    """Shard -> (shuffle, repeat) -> tokenize -> concat/split -> objective -> convert."""
    spec = self.spec
    ds = grain.MapDataset.source(source)
    ds = ds[self.process_index::self.process_count]
    if len(ds) == 0:
      raise ValueError(f"Process {self.process_index} of {self.process_count} has no "
                       f"documents ({len(source)} in total); use fewer processes or more data.")
    if shuffle:
      ds = ds.shuffle(seed=seed)
    if num_epochs != 1:
      ds = ds.repeat(num_epochs)
    document_eos = spec.document_eos if spec.document_eos is not None else (
        spec.objective == "full_lm")
    ds = ds.map(_tokenize_fn(self.tokenizer, document_eos))
    it = ds.to_iter_dataset(grain.ReadOptions(num_threads=spec.num_threads,
                                              prefetch_buffer_size=64 * spec.num_threads))
    it = it.filter(lambda x: x["tokens"].size > 0)
    it = grain_experimental.ConcatThenSplitIterDataset(
        it, length_struct={"tokens": self.raw_length})
    return it.map_with_index(_ObjectiveAndConvert(
        spec, self.tokenizer.vocab_size, (seed, self.process_index)))

  def _rows(self, examples: grain.IterDataset, batch_size: int) -> grain.IterDataset:
    spec = self.spec
    if not spec.pack:
      return examples.map(lambda ex: packing.pad_example(ex, self.lengths))
    length_struct = {k: self.lengths[packing.stack_of(k)] for k in self._keys}
    packed = grain_experimental.FirstFitPackIterDataset(
        examples, length_struct=length_struct,
        num_packing_bins=spec.num_packing_bins or batch_size, shuffle_bins=False)
    return packed.map(packing.rename_packed)

  def train_iterator(self) -> TrainIterator:
    """The training iterator of this process (see the module docstring)."""
    spec = self.spec
    rows = self._rows(self._examples(self.train_source, shuffle=True,
                                     num_epochs=spec.num_epochs, seed=spec.seed),
                      self.batch_size)
    ds = rows.batch(self.batch_size, drop_remainder=True)
    if spec.prefetch_batches:
      ds = grain_experimental.ThreadPrefetchIterDataset(
          ds, prefetch_buffer_size=spec.prefetch_batches)
    return TrainIterator(ds, f"{spec.fingerprint()}:{self.process_index}/{self.process_count}")

  def eval_iterator(self, num_batches: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """A fresh finite iterator over this process's validation shard.

    Same objective and layout as training, fixed seed, no shuffling, so every call
    yields the same batches. The last batch is padded with all-zero rows (weight 0).

    Args:
      num_batches: if given, exactly this many batches (all-zero padding batches
        after the data ends, truncation before), so that every process of a
        multi-process job runs the same number of eval steps.
    """
    if self.eval_source is None:
      raise ValueError("No validation data: set DataSpec.eval_paths or validation_fraction > 0.")
    rows = self._rows(self._examples(self.eval_source, shuffle=False, num_epochs=1,
                                     seed=self.spec.seed + 1), self.eval_batch_size)
    batches = rows.batch(self.eval_batch_size, drop_remainder=False)
    b = self.eval_batch_size

    def generate():
      produced, template = 0, None
      for batch in batches:
        if num_batches is not None and produced >= num_batches:
          return
        template = batch = _pad_batch(batch, b)
        produced += 1
        yield batch
      if num_batches is not None and produced < num_batches:
        if template is None:
          raise ValueError(f"Process {self.process_index} has no validation examples.")
        zeros = {k: np.zeros_like(v) for k, v in template.items()}
        for _ in range(num_batches - produced):
          yield dict(zeros)
    return generate()


def make_train_iterator(spec: DataSpec, process_index: int = 0, process_count: int = 1,
                        **kwargs) -> TrainIterator:
  """Shortcut: DataPipeline(spec, ...).train_iterator()."""
  return DataPipeline(spec, process_index=process_index, process_count=process_count,
                      **kwargs).train_iterator()


def make_eval_iterator(spec: DataSpec, process_index: int = 0, process_count: int = 1,
                       num_batches: int | None = None, **kwargs):
  """Shortcut: DataPipeline(spec, ...).eval_iterator(num_batches)."""
  return DataPipeline(spec, process_index=process_index, process_count=process_count,
                      **kwargs).eval_iterator(num_batches)
