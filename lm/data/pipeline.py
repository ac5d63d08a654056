"""The grain input pipeline: documents -> fixed-shape feature batches (the impure part).

What lives here: `DataSpec` (what a run reads and produces; `fingerprint` digests the fields
that change the batches) and `DataPipeline` (sources, tokenizer and the train and eval
iterators of one process: one grain sub-pipeline per owned virtual shard, per-example or
vectorised as the objective's record says). What does not: the grain stages it wires
(`stages.py`, `blocks.py`), virtual shards and the iterator state (`shards.py`), objectives,
conversion and packing (`objectives.py`, `converters.py`, `packing.py`). The narrative (the
sub-pipeline step by step, determinism, resume, eval) is docs/pipeline.md. Example:

  data = DataPipeline(DataSpec(format="jsonl", paths=("data/*.jsonl",)),
                      process_index=jax.process_index(), process_count=jax.process_count())
  it = data.train_iterator(); batch = next(it)   # [batch_size // process_count, L] arrays
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import grain
import numpy as np
from grain import experimental as grain_experimental

from lm.data import (blocks, features, mixtures, objectives, packing, prepared, scan, sources,
                     stages)
from lm.data import shards as shards_lib
from lm.data import tokenizer as tokenizer_lib

# Chunks per block of the vectorised stage (DataSpec.batched_objectives): a speed knob that
# also bounds first-fit packing's window; part of what a batch is, like the spec's fields.
BLOCK_SIZE = 256


@dataclasses.dataclass(frozen=True)
class DataSpec:
  """What the pipeline reads and produces (the trainer maps config.data onto it).

  Attributes:
    format: sources.make_source format ("default" = embedded stdlib-docs corpus,
      "auto", "text", "paragraphs", "jsonl", "parquet", "array_record", "hf"), or
      "prepared": a folder written by `python -m lm.data.prepare` (token ids; no
      tokenization in the run, lm/data/prepared.py).
    paths: files/globs (one folder for "hf" and "prepared"); local or remote (gs://).
      A prepared dataset was read with the options its manifest records: text_field,
      on_decode_error and max_document_chars do not apply to it.
    text_field: JSON field / column with the text. hf_split: DatasetDict split.
    json_records: ArrayRecord records are JSON objects (else raw UTF-8 text).
    on_decode_error: "replace" or "skip" invalid UTF-8.
    max_document_chars: longer documents are cut into pieces by the source.
    eval_format, eval_paths: separate validation data; if empty, a share
      `validation_fraction` of the train documents is held out (by hash, seed
      `validation_seed`).
    tokenizer: SentencePiece .model path; None = a tokenizer of
      `default_vocab_size` pieces trained on the default corpus (cached), or for
      format "prepared" the prepared dataset's own (a given one must be the same).
    extra_ids: sentinels appended to the tokenizer (T5: 100).
    objective, objective_params: objectives.make_objective name and kwargs.
    architecture: "encoder_decoder", "prefix_lm" or "causal".
    loss_on_inputs: decoder-only: loss on the inputs part too.
    inputs_length, targets_length: feature lengths (decoder-only rows are
      inputs_length + targets_length long; inputs_length may be 0 for a decoder-only
      architecture with an objective without inputs, full_lm: rows of targets_length).
    batch_size: GLOBAL batch size; each process yields batch_size // process_count.
    eval_batch_size: global eval batch size (default batch_size).
    num_shards: virtual data shards (`shards.py`). Must divide batch_size and
      eval_batch_size, and be divisible by the process count. Changing it changes
      the batches (and makes saved data positions unusable).
    pack: pack several examples per row (else pad one example per row).
    num_packing_bins: rows each shard's packer fills at once (default:
      max(batch_size // num_shards, 16)); per-example path only.
    batched_objectives: run chunking, the objective, the converter and packing a block of
      BLOCK_SIZE chunks at a time with the vectorised definitions of lm/data/batched.py
      (docs/speed.md), where the objective's record gives one (`objectives.batched_form`:
      not deshuffle or a mixture, not random_roll, documents concatenated); rows are packed
      by first fit within a block. False, and for the other objectives and layouts: the
      per-example reference (lm/data/objectives.py) with grain's packer. The two draw
      different (identically distributed) examples, so the field is part of the fingerprint.
    document_eos: append EOS after each document before concatenation (None = the
      objective's Layout: only full_lm, as T5).
    concatenate: join documents into one stream before cutting raw segments (None = the
      objective's Layout, as T5: every objective except prefix_lm and deshuffle, which cut
      their examples from single documents). True for those two is lm's earlier layout
      (examples spanning documents).
    seed: shuffle and objective seed. num_epochs: None = repeat forever.
    num_threads: tokenization threads (one pool for all shards).
    prefetch_batches: batches prefetched by one background thread (0 = none); on the
      vectorised path at least one block's batches (`DataPipeline.prefetch_depth`).
    max_bad_fraction: largest share of bad records (invalid UTF-8, broken JSON) a
      data file may have; more is refused at start-up (sources.check_quality).
  """
  format: str = "default"
  paths: tuple[str, ...] = ()
  text_field: str = "text"
  hf_split: str | None = None
  json_records: bool = False
  on_decode_error: str = "replace"
  max_document_chars: int = scan.DEFAULT_MAX_DOCUMENT_CHARS
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
  num_shards: int = shards_lib.DEFAULT_NUM_SHARDS
  pack: bool = True
  num_packing_bins: int | None = None
  batched_objectives: bool = True
  document_eos: bool | None = None
  concatenate: bool | None = None
  seed: int = 0
  num_epochs: int | None = None
  num_threads: int = 4
  prefetch_batches: int = 2
  max_bad_fraction: float = 0.01

  def __post_init__(self):
    if isinstance(self.paths, str):
      object.__setattr__(self, "paths", (self.paths,))
    if isinstance(self.eval_paths, str):
      object.__setattr__(self, "eval_paths", (self.eval_paths,))
    object.__setattr__(self, "paths", tuple(self.paths))
    object.__setattr__(self, "eval_paths", tuple(self.eval_paths))
    object.__setattr__(self, "objective_params", dict(self.objective_params))
    if self.architecture not in packing.ARCHITECTURES:
      raise ValueError(f"unknown architecture {self.architecture!r}; "
                       f"expected one of {packing.ARCHITECTURES}.")
    if self.objective not in objectives.OBJECTIVES:
      raise ValueError(f"unknown objective {self.objective!r}; expected one of "
                       f"{sorted(objectives.OBJECTIVES)}.")
    for name in ("batch_size", "targets_length", "num_threads", "num_shards"):
      if getattr(self, name) <= 0:
        raise ValueError(f"DataSpec.{name} must be positive, got {getattr(self, name)}.")
    no_inputs = (not objectives.layout(self.objective).has_inputs
                 and self.architecture != "encoder_decoder")
    if self.inputs_length < 0 or (self.inputs_length == 0 and not no_inputs):
      raise ValueError(
          f"DataSpec.inputs_length must be positive, got {self.inputs_length} (0 only for a "
          "decoder-only architecture with an objective without inputs, e.g. full_lm).")
    if self.eval_batch_size is not None and self.eval_batch_size <= 0:
      raise ValueError(f"DataSpec.eval_batch_size must be positive, got {self.eval_batch_size}.")
    if self.num_epochs is not None and self.num_epochs <= 0:
      raise ValueError(f"DataSpec.num_epochs must be positive or None, got {self.num_epochs}.")
    for name in ("batch_size", "eval_batch_size"):
      b = getattr(self, name)
      if b is not None and b % self.num_shards:
        raise ValueError(
            f"DataSpec.{name}={b} is not divisible by num_shards={self.num_shards} (each "
            f"virtual data shard yields {name} / num_shards rows); set num_shards to a "
            f"divisor of it (e.g. {math.gcd(b, self.num_shards)}) or change {name}.")

  @property
  def global_eval_batch_size(self) -> int:
    """Global rows per eval batch: eval_batch_size, else batch_size."""
    return self.eval_batch_size or self.batch_size

  def fingerprint(self) -> str:
    """Digest of the fields that change which batches are produced."""
    skip = {"num_threads", "prefetch_batches", "eval_batch_size", "eval_format", "eval_paths",
            "max_bad_fraction"}
    if not self.batched_objectives:  # the per-example path: the fingerprint it had before
      skip.add("batched_objectives")
    d = {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _objective_params(spec: DataSpec, tokenizer: tokenizer_lib.Tokenizer | None = None
                      ) -> dict[str, Any]:
  """make_objective kwargs: a mixture also needs the feature lengths (from the spec) and,
  for text mode tokens, the tokenizer's encode."""
  params = dict(spec.objective_params)
  if spec.objective == "mixture":
    params.setdefault("inputs_length", spec.inputs_length)
    params.setdefault("targets_length", spec.targets_length)
    if params.get("mode_tokens") == "text" and tokenizer is not None:
      params["encode"] = tokenizer.encode
  return params


def _tokenizer_path(spec: DataSpec) -> str | None:
  """spec.tokenizer, else a prepared dataset's own tokenizer file (else None: the default)."""
  if not spec.tokenizer and spec.format == "prepared":
    return prepared.tokenizer_path(spec.paths)
  return spec.tokenizer


class DataPipeline:
  """Sources, tokenizer and iterator factories for one process.

  Args:
    spec: DataSpec.
    process_index, process_count: this process (jax.process_index() /
      jax.process_count() in a multi-process job; 0 / 1 otherwise). It owns virtual
      shards [index * S / count, (index + 1) * S / count).
    tokenizer: use this Tokenizer instead of loading spec.tokenizer.

  Attributes:
    shards: owned virtual shards (range). rows_per_shard, eval_rows_per_shard:
    rows each shard adds to a (eval) batch. batch_size, eval_batch_size: this
    process's rows per batch.
  """

  def __init__(self, spec: DataSpec, *, process_index: int = 0, process_count: int = 1,
               tokenizer: tokenizer_lib.Tokenizer | None = None):
    self.shards = shards_lib.owned_shards(spec.num_shards, process_index, process_count)
    self.spec = spec
    self.process_index, self.process_count = process_index, process_count
    self.num_shards = spec.num_shards
    self.rows_per_shard = spec.batch_size // spec.num_shards
    self.eval_rows_per_shard = spec.global_eval_batch_size // spec.num_shards
    self.batch_size = self.rows_per_shard * len(self.shards)
    self.eval_batch_size = self.eval_rows_per_shard * len(self.shards)
    if tokenizer is None:
      tokenizer = tokenizer_lib.run_tokenizer(_tokenizer_path(spec),
                                              default_vocab_size=spec.default_vocab_size,
                                              extra_ids=spec.extra_ids)
    if tokenizer.extra_ids != spec.extra_ids:
      raise ValueError(f"Tokenizer has {tokenizer.extra_ids} extra ids, spec {spec.extra_ids}.")
    self.tokenizer = tokenizer
    self.raw_length = objectives.raw_length(
        spec.objective, inputs_length=spec.inputs_length,
        targets_length=spec.targets_length, **spec.objective_params)
    self.lengths = features.feature_lengths(spec.architecture, spec.inputs_length,
                                            spec.targets_length)
    self._keys = features.feature_keys(spec.architecture)
    layout = objectives.layout(spec.objective)
    self.concatenate = layout.concatenate if spec.concatenate is None else spec.concatenate
    self.document_eos = layout.document_eos if spec.document_eos is None else spec.document_eos
    # Built now, not in a worker thread: an unknown objective parameter raises here.
    objective = objectives.make_objective(
        spec.objective, vocab_size=tokenizer.vocab_size, num_extra_ids=spec.extra_ids,
        **_objective_params(spec, tokenizer))
    # (objective, raw length, weight) per stream: one, or one per mixture member.
    if isinstance(objective, mixtures.Mixture):
      self.streams = [(objective.member(i), raw, weight)
                      for i, (_, weight, _, raw) in enumerate(objective.members)]
    else:
      self.streams = [(objective, self.raw_length, 1.0)]
    # The vectorised stage (lm/data/blocks.py) where the record gives a batched form for these
    # parameters and this layout; else the per-example form.
    self.blocks = spec.batched_objectives and objectives.batched_form(
        spec.objective, spec.objective_params, concatenate=self.concatenate) is not None
    self.train_source, self.eval_source = self._build_sources()
    needed = self.num_shards * len(self.streams)
    if len(self.train_source) < needed:
      per = f" x {len(self.streams)} mixture members" if len(self.streams) > 1 else ""
      raise ValueError(f"{len(self.train_source)} train documents cannot fill "
                       f"num_shards={self.num_shards} virtual data shards{per}; lower "
                       "DataSpec.num_shards or add documents.")
    self._eval_total_batches: int | None = None

  def _block_objective(self, seed_words: tuple[int, ...]) -> blocks.BlockObjective:
    spec = self.spec
    return blocks.BlockObjective(
        spec.objective, vocab_size=self.tokenizer.vocab_size, num_extra_ids=spec.extra_ids,
        architecture=spec.architecture,
        lengths={"inputs": spec.inputs_length, "targets": spec.targets_length},
        loss_on_inputs=spec.loss_on_inputs, seed_words=seed_words,
        **_objective_params(spec, self.tokenizer))

  def _build_sources(self):
    spec = self.spec
    kw = dict(text_field=spec.text_field, split=spec.hf_split, json_records=spec.json_records,
              on_decode_error=spec.on_decode_error, max_document_chars=spec.max_document_chars,
              max_bad_fraction=spec.max_bad_fraction)

    def make(fmt, paths):
      if fmt == "prepared":  # token ids: the manifest is read, no document is
        return prepared.open_prepared(paths, tokenizer_sha256=self.tokenizer.sha256,
                                      max_bad_fraction=spec.max_bad_fraction)
      return sources.make_source(fmt, paths, **kw)
    source = make(spec.format, spec.paths)
    if spec.eval_paths:
      return source, make(spec.eval_format or spec.format, spec.eval_paths)
    if spec.validation_fraction == 0:
      return source, None
    return sources.split_validation(source, spec.validation_fraction, seed=spec.validation_seed)

  def _shard_rows(self, source, shard: int, pool: stages.ThreadPool, *, shuffle: bool,
                  num_epochs: int | None, seed: int) -> grain.IterDataset | None:
    """Rows of one virtual shard (docs/pipeline.md's sub-pipeline); None if it has no documents."""
    spec = self.spec
    docs = grain.MapDataset.source(source)[shard::self.num_shards]
    if len(docs) == 0:
      return None
    tokenize = stages.tokenize_fn(self.tokenizer, self.document_eos)
    m = len(self.streams)
    streams, weights = [], []
    for j, (objective, raw, weight) in enumerate(self.streams):
      # One stream: the seeds of the single-objective pipeline; member j of a mixture: its own.
      words = (seed, shard) if m == 1 else (seed, shard, j)
      ds = docs if m == 1 else docs[j::m]
      if len(ds) == 0:  # a small (eval) shard may leave a member without documents
        continue
      if shuffle:
        ds = ds.shuffle(seed=stages.shuffle_seed(*words))
      if num_epochs != 1:
        ds = ds.repeat(num_epochs)
      ds = stages.TokenizedDocs(ds, tokenize, pool)
      if self.blocks:  # the vectorised stage: chunking, objective, convert and packing
        rows = blocks.BlockExamplesIterDataset(
            ds, raw, self._block_objective(words), block_size=BLOCK_SIZE,
            pack_lengths=self.lengths if spec.pack else None)
        return rows if spec.pack else rows.map(lambda ex: packing.pad_example(ex, self.lengths))
      it = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
      it = it.filter(lambda x: x["tokens"].size > 0)
      if self.concatenate:
        it = grain_experimental.ConcatThenSplitIterDataset(it, length_struct={"tokens": raw})
      else:
        it = grain_experimental.FlatMapIterDataset(it, stages.SplitDocument(raw))
      streams.append(it.map_with_index(stages.ObjectiveAndConvert(
          objective, words, architecture=spec.architecture,
          lengths={"inputs": spec.inputs_length, "targets": spec.targets_length},
          loss_on_inputs=spec.loss_on_inputs,
          targets_eos=objectives.layout(spec.objective).targets_eos)))
      weights.append(weight)
    if not streams:
      return None
    examples = (streams[0] if len(streams) == 1 else
                stages.SampleStreamsIterDataset(streams, weights, (seed, shard)))
    if not spec.pack:
      return examples.map(lambda ex: packing.pad_example(ex, self.lengths))
    length_struct = {k: self.lengths[packing.stack_of(k)] for k in self._keys}
    packed = grain_experimental.FirstFitPackIterDataset(
        examples, length_struct=length_struct,
        num_packing_bins=spec.num_packing_bins or max(self.rows_per_shard, 16),
        shuffle_bins=False)
    return packed.map(packing.rename_packed)

  @property
  def prefetch_depth(self) -> int:
    """Batches the training iterator's thread prefetches: spec.prefetch_batches (0 = none),
    and on the vectorised path at least one block's batches. There every shard makes
    BLOCK_SIZE chunks at once, a burst of work every BLOCK_SIZE / rows_per_shard batches;
    with 2 batches prefetched the README job waited for batches 23-39 % of 6 of its 50 log
    windows, with a block's batches (128: 8 shards of 2 rows) at most 3 %
    (data_wait_fraction, docs/speed.md)."""
    depth = self.spec.prefetch_batches
    if depth and self.blocks:
      depth = max(depth, -(-BLOCK_SIZE // self.rows_per_shard))
    return depth

  def train_iterator(self) -> shards_lib.TrainIterator:
    """The training iterator of this process (docs/pipeline.md)."""
    spec = self.spec
    pool = stages.ThreadPool(spec.num_threads)
    shards = {}
    for k in self.shards:
      rows = self._shard_rows(self.train_source, k, pool, shuffle=True,
                              num_epochs=spec.num_epochs, seed=spec.seed)
      assert rows is not None  # __init__ checked that every shard has documents.
      shards[k] = rows.batch(self.rows_per_shard, drop_remainder=True)
    ds = shards_lib.ShardBatchesIterDataset(shards)
    if self.prefetch_depth:
      ds = grain_experimental.ThreadPrefetchIterDataset(
          ds, prefetch_buffer_size=self.prefetch_depth)
    return shards_lib.TrainIterator(iter(ds), pool.close, fingerprint=spec.fingerprint(),
                                    num_shards=self.num_shards, shards=self.shards)

  def _eval_shard_batches(self, shards: Sequence[int], pool: stages.ThreadPool
                          ) -> dict[int, Iterator[dict[str, np.ndarray]] | None]:
    out = {}
    for k in shards:
      rows = self._shard_rows(self.eval_source, k, pool, shuffle=False, num_epochs=1,
                              seed=self.spec.seed + 1)
      out[k] = None if rows is None else iter(
          rows.batch(self.eval_rows_per_shard, drop_remainder=False))
    return out

  def eval_num_batches(self) -> int:
    """Global eval batches of one pass: the longest shard's (computed once, cached).

    Every process computes it over all shards, so all agree without communication.
    """
    if self.eval_source is None:
      raise ValueError("No validation data: set DataSpec.eval_paths or validation_fraction > 0.")
    if self._eval_total_batches is None:
      pool = stages.ThreadPool(self.spec.num_threads)
      try:
        counts = [0 if it is None else sum(1 for _ in it)
                  for it in self._eval_shard_batches(range(self.num_shards), pool).values()]
      finally:
        pool.close()
      self._eval_total_batches = max(counts)
    return self._eval_total_batches

  def eval_iterator(self, num_batches: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """A fresh finite iterator over this process's part of the validation batches.

    Same objective and layout as training, fixed seed, no shuffling, so every call
    yields the same batches; for any process count the processes' batches make up
    the same global batches. Rows of shards that have run out are all-zero
    (loss weight 0).

    Args:
      num_batches: if given, exactly this many batches (all-zero batches after the
        data ends, truncation before). If None, one full pass: every shard's rows
        until the longest shard ends (`eval_num_batches()`; with several processes
        that count costs one extra pass over all shards, so pass num_batches).
    """
    spec = self.spec
    if self.eval_source is None:
      raise ValueError("No validation data: set DataSpec.eval_paths or validation_fraction > 0.")
    owns_all = len(self.shards) == self.num_shards
    total = num_batches
    if total is None and not owns_all:
      total = self.eval_num_batches()
    r = self.eval_rows_per_shard
    zeros = features.zero_batch(spec.architecture, spec.inputs_length, spec.targets_length, r)

    def generate():
      pool = stages.ThreadPool(spec.num_threads)
      try:
        yield from shards_lib.eval_batches(self._eval_shard_batches(self.shards, pool), zeros, r,
                                           total, owns_all=owns_all)
      finally:
        pool.close()
    return generate()

