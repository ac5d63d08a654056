"""Document sources: random-access sequences of document strings for grain, one per format.

  TextSource (lines or paragraphs), JsonLinesSource, ParquetSource, ArrayRecordSource,
  HFDiskSource (a `datasets.save_to_disk` folder; local, no hub), InMemorySource (the
  embedded corpus).

  source = make_source("auto", "corpus/*.jsonl.gz", max_bad_fraction=0.01)
  train, validation = split_validation(source, 0.01)

The scan they share (the `DocumentSource` interface, statistics, UTF-8 and long-document
rules) is `lm/data/scan.py`; tokenization is `tokenizer.py`, shuffling and everything after
`pipeline.py`. docs/data.md ("Raw sources") has the rules and what each format holds in memory.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import mmap
import os
from collections.abc import Sequence

import numpy as np

from lm.data import remote, scan
from lm.data.scan import DEFAULT_MAX_DOCUMENT_CHARS, DocumentSource, SourceStats, expand_paths

FORMATS = ("auto", "text", "paragraphs", "jsonl", "parquet", "array_record", "hf")


class InMemorySource(DocumentSource):
  """A list of strings, one document each (the default corpus uses this)."""

  def __init__(self, documents: Sequence[str], *, name: str = "in-memory documents",
               max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS):
    self._docs = list(documents)
    b = scan.IndexBuilder(max_document_chars)
    b.stats.examined = len(self._docs)
    for i, doc in enumerate(self._docs):
      if not isinstance(doc, str):
        b.stats.bad_records += 1
        continue
      b.add_text(i, doc)
    self._set_index(b, name)

  def _record(self, rec: int) -> str:
    return self._docs[rec]


class TextSource(DocumentSource):
  """Plain text files: one document per line, or per paragraph.

  Args:
    paths: files or globs.
    mode: "line" (one document per line) or "paragraph" (documents separated by
      one or more blank lines; single newlines stay inside the document).
    on_decode_error: "replace" (U+FFFD) or "skip" (drop the document).
    max_document_chars: longer documents (UTF-8 bytes) are cut at whitespace.
  """

  def __init__(self, paths: str | Sequence[str], *, mode: str = "line",
               on_decode_error: str = "replace",
               max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS):
    if mode not in ("line", "paragraph"):
      raise ValueError(f"mode must be 'line' or 'paragraph', got {mode!r}")
    scan.check_decode_policy(on_decode_error)
    self._files = expand_paths(paths)
    self._on_decode_error = on_decode_error
    self._maps: dict[int, mmap.mmap | bytes] = {}
    b = scan.IndexBuilder(max_document_chars)
    self.file_stats = {}
    for f, name in enumerate(self._files):
      before = dataclasses.replace(b.stats)
      self._scan_file(f, name, mode, on_decode_error, b)
      self.file_stats[name] = b.stats.minus(before)
    self._set_index(b, f"{self._files[:3]}{'...' if len(self._files) > 3 else ''}")

  def __getstate__(self):  # mmaps do not pickle; reopen lazily.
    state = dict(self.__dict__)
    state["_maps"] = {}
    return state

  def _bytes(self, f: int):
    if f not in self._maps:
      with open(self._files[f], "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        self._maps[f] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    return self._maps[f]

  def _scan_file(self, f, name, mode, policy, b: scan.IndexBuilder) -> None:
    b.stats.files += 1
    buf = self._bytes(f)
    if len(buf) == 0:
      b.stats.empty_files += 1
      return
    data = np.frombuffer(buf, dtype=np.uint8)
    starts, ends = scan.line_spans(data)
    # Non-whitespace bytes per line, via a cumulative count.
    cum = np.concatenate([[0], np.cumsum(~scan.WHITESPACE[data], dtype=np.int64)])
    nonblank = (cum[ends] - cum[starts]) > 0
    if mode == "line":
      b.stats.records += len(starts)
      b.stats.examined += len(starts)
      b.stats.empty_documents += int((~nonblank).sum())
      starts, ends = starts[nonblank], ends[nonblank]
    else:
      # Paragraph = maximal run of consecutive non-blank lines.
      nb = nonblank.astype(np.int8)
      edges = np.diff(np.concatenate([[0], nb, [0]]))
      first, last = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
      starts, ends = starts[first], ends[last]
      b.stats.records += len(starts)
      b.stats.examined += len(starts)
    # UTF-8 validity: one incremental pass over the file; per document only if it fails.
    if not scan.is_utf8(buf):
      valid = np.array([scan.is_utf8(buf[s:e]) for s, e in zip(starts, ends)], dtype=bool)
      bad = int((~valid).sum())
      b.stats.invalid_utf8_documents += bad
      if policy == "skip":
        b.stats.skipped_invalid_utf8 += bad
        starts, ends = starts[valid], ends[valid]
    long = (ends - starts) > b.max_chars
    doc = np.arange(len(starts))
    piece_starts, piece_ends, piece_doc = [starts[~long]], [ends[~long]], [doc[~long]]
    for d, s, e in zip(doc[long], starts[long], ends[long]):
      b.stats.split_documents += 1
      pieces = np.asarray(scan.byte_split_points(buf, int(s), int(e), b.max_chars), np.int64)
      piece_starts.append(pieces[:, 0])
      piece_ends.append(pieces[:, 1])
      piece_doc.append(np.full(len(pieces), d))
    starts, ends = np.concatenate(piece_starts), np.concatenate(piece_ends)
    docs = np.concatenate(piece_doc)
    order = np.argsort(starts, kind="stable")  # Keep file order.
    b.add_spans(np.full(len(starts), f, np.int64), starts[order], ends[order], docs[order])

  def __getitem__(self, index: int) -> str:
    index = int(index)
    if not -len(self) <= index < len(self):
      raise IndexError(f"document {index} out of range [0, {len(self)})")
    buf = self._bytes(int(self.record_ids[index]))
    raw = buf[int(self._starts[index]):int(self._ends[index])]
    return raw.decode("utf-8", errors="replace").strip()


class JsonLinesSource(DocumentSource):
  """JSON-lines files; each line's `text_field` (a string) is a document.

  Lines that are not JSON objects, or lack a string `text_field`, are skipped and
  counted as `bad_records`.
  """

  def __init__(self, paths: str | Sequence[str], *, text_field: str = "text",
               on_decode_error: str = "replace",
               max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS):
    scan.check_decode_policy(on_decode_error)
    self._files = expand_paths(paths)
    self._field = text_field
    self._maps = {}
    self._line_file, self._line_start, self._line_end = [], [], []
    b = scan.IndexBuilder(max_document_chars)
    rec = 0
    self.file_stats = {}
    for f, name in enumerate(self._files):
      before = dataclasses.replace(b.stats)
      self._scan_lines(f, b, rec, on_decode_error)
      rec = len(self._line_file)
      self.file_stats[name] = b.stats.minus(before)
    self._line_file = np.asarray(self._line_file, np.int32)
    self._line_start = np.asarray(self._line_start, np.int64)
    self._line_end = np.asarray(self._line_end, np.int64)
    self._set_index(b, f"{self._files[:3]} field {text_field!r}")

  def _scan_lines(self, f: int, b: scan.IndexBuilder, rec: int, on_decode_error: str) -> None:
    b.stats.files += 1
    buf = self._bytes(f)
    if not len(buf):
      b.stats.empty_files += 1
      return
    starts, ends = scan.line_spans(np.frombuffer(buf, dtype=np.uint8))
    for s, e in zip(starts.tolist(), ends.tolist()):
      raw = bytes(buf[s:e])
      if not raw.strip():
        continue  # Blank line: not a record.
      b.stats.examined += 1
      text = self._parse(raw, on_decode_error, b.stats)
      if text is None:
        continue
      self._line_file.append(f)
      self._line_start.append(s)
      self._line_end.append(e)
      b.add_text(rec, text)
      rec += 1

  def __getstate__(self):
    state = dict(self.__dict__)
    state["_maps"] = {}
    return state

  _bytes = TextSource._bytes

  def _parse(self, raw: bytes, policy: str, stats: SourceStats) -> str | None:
    line = scan.decode(raw, policy, stats)
    if line is None:
      return None
    try:
      obj = json.loads(line)
    except ValueError:
      stats.bad_records += 1
      return None
    text = obj.get(self._field) if isinstance(obj, dict) else None
    if not isinstance(text, str):
      stats.bad_records += 1
      return None
    return text

  def _record(self, rec: int) -> str:
    buf = self._bytes(int(self._line_file[rec]))
    raw = bytes(buf[int(self._line_start[rec]):int(self._line_end[rec])])
    return json.loads(raw.decode("utf-8", errors="replace"))[self._field]


class _ArrowColumnSource(DocumentSource):
  """Documents from an Arrow string column held by the subclass in `self._column`."""

  def _index_column(self, column, b: scan.IndexBuilder, what: str) -> None:
    import pyarrow as pa  # pylint: disable=g-import-not-at-top
    import pyarrow.compute as pc  # pylint: disable=g-import-not-at-top
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
      # Decode bytes in Python so invalid UTF-8 is counted.
      texts = []
      for raw in column.to_pylist():
        t = None if raw is None else scan.decode(raw, self._on_decode_error, b.stats)
        texts.append(t)
      column = pa.array(texts, type=pa.large_string())
    elif not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
      raise ValueError(f"Column {self._field!r} of {what} has type {column.type}; "
                       "a string column is needed (set text_field).")
    if isinstance(column, pa.ChunkedArray):
      column = column.combine_chunks()
    self._column = column
    n = len(column)
    b.stats.records += n
    b.stats.examined += n
    lengths = pc.fill_null(pc.utf8_length(column), 0).to_numpy(zero_copy_only=False)
    blank = pc.fill_null(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(column)), 0),
                         True).to_numpy(zero_copy_only=False)
    b.stats.empty_documents += int(blank.sum())
    ok = ~blank & (lengths <= b.max_chars)
    idx = np.flatnonzero(ok)
    b.add_spans(idx, np.zeros(len(idx), np.int64), lengths[idx].astype(np.int64), idx)
    b.num_groups = n  # Group = row index.
    for i in np.flatnonzero(~blank & ~ok).tolist():
      pieces = np.asarray(scan.split_points(column[i].as_py(), b.max_chars), np.int64)
      b.stats.split_documents += 1
      b.rec.append(np.full(len(pieces), i))
      b.start.append(pieces[:, 0])
      b.end.append(pieces[:, 1])
      b.group.append(np.full(len(pieces), i))
    # Keep documents in record order (long-document pieces were appended last).
    recs = np.concatenate(b.rec) if b.rec else np.zeros(0, np.int64)
    order = np.argsort(recs, kind="stable")
    for name in ("rec", "start", "end", "group"):
      arr = np.concatenate(getattr(b, name)) if getattr(b, name) else np.zeros(0, np.int64)
      setattr(b, name, [arr[order]])

  def _record(self, rec: int) -> str:
    return self._column[rec].as_py()


class ParquetSource(_ArrowColumnSource):
  """Parquet files; the string (or binary) column `text_field` holds documents."""

  def __init__(self, paths: str | Sequence[str], *, text_field: str = "text",
               on_decode_error: str = "replace",
               max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS):
    import pyarrow as pa  # pylint: disable=g-import-not-at-top
    import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
    scan.check_decode_policy(on_decode_error)
    self._files = expand_paths(paths)
    self._field, self._on_decode_error = text_field, on_decode_error
    b = scan.IndexBuilder(max_document_chars)
    chunks = []
    for name in self._files:
      b.stats.files += 1
      pf = pq.ParquetFile(name)
      if text_field not in pf.schema_arrow.names:
        raise ValueError(f"Parquet file {name!r} has no column {text_field!r} "
                         f"(columns: {pf.schema_arrow.names}); set text_field.")
      if pf.metadata.num_rows == 0:
        b.stats.empty_files += 1
        continue
      chunks.append(pf.read(columns=[text_field]).column(text_field))
    column = (pa.chunked_array([c for ch in chunks for c in ch.chunks]) if chunks
              else pa.array([], pa.string()))
    if chunks and len({c.type for c in chunks}) > 1:
      column = pa.chunked_array([c.cast(pa.large_string()) for ch in chunks for c in ch.chunks])
    self._index_column(column, b, str(self._files[:3]))
    self._set_index(b, f"{self._files[:3]} column {text_field!r}")


class HFDiskSource(_ArrowColumnSource):
  """A `datasets` Dataset saved with `save_to_disk` (local, memory-mapped).

  Args:
    path: the folder written by `Dataset.save_to_disk`, or a DatasetDict folder
      with `split` naming the split.
  """

  def __init__(self, path: str, *, text_field: str = "text", split: str | None = None,
               on_decode_error: str = "replace",
               max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS):
    import datasets  # pylint: disable=g-import-not-at-top
    scan.check_decode_policy(on_decode_error)
    (path,) = expand_paths(path)
    self._field, self._on_decode_error = text_field, on_decode_error
    ds = datasets.load_from_disk(path)
    if isinstance(ds, datasets.DatasetDict):
      if split is None or split not in ds:
        raise ValueError(f"{path!r} is a DatasetDict with splits {list(ds)}; set split.")
      ds = ds[split]
    if text_field not in ds.column_names:
      raise ValueError(f"Dataset {path!r} has no column {text_field!r} "
                       f"(columns: {ds.column_names}); set text_field.")
    b = scan.IndexBuilder(max_document_chars)
    b.stats.files = 1
    column = ds.with_format("arrow")[text_field]  # Honours any indices mapping.
    self._index_column(column, b, path)
    self._set_index(b, f"{path!r} column {text_field!r}")


class ArrayRecordSource(DocumentSource):
  """ArrayRecord files; each record is UTF-8 text (or JSON with `text_field`)."""

  def __init__(self, paths: str | Sequence[str], *, text_field: str | None = None,
               on_decode_error: str = "replace",
               max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS):
    from array_record.python import array_record_data_source as ards  # pylint: disable=g-import-not-at-top
    scan.check_decode_policy(on_decode_error)
    self._files = expand_paths(paths)
    b = scan.IndexBuilder(max_document_chars)
    nonempty = []
    for name in self._files:
      b.stats.files += 1
      if os.path.getsize(name) == 0:
        b.stats.empty_files += 1
        continue
      nonempty.append(name)
    self._texts: list[str | None] = []
    if nonempty:
      reader = ards.ArrayRecordDataSource(nonempty)
      n = len(reader)
      for start in range(0, n, 1024):
        for raw in reader.__getitems__(list(range(start, min(n, start + 1024)))):
          b.stats.examined += 1
          text = scan.decode(raw, on_decode_error, b.stats)
          if text is not None and text_field is not None:
            try:
              obj = json.loads(text)
              text = obj.get(text_field) if isinstance(obj, dict) else None
            except ValueError:
              text = None
            if not isinstance(text, str):
              b.stats.bad_records += 1
              text = None
          if text is None:
            continue
          b.add_text(len(self._texts), text)
          self._texts.append(text)
      reader.close() if hasattr(reader, "close") else None
    self._set_index(b, str(self._files[:3]))

  def _record(self, rec: int) -> str:
    return self._texts[rec]


class IndexSubset:
  """The documents `indices` of a source (grain random-access data source)."""

  def __init__(self, source, indices: np.ndarray, *, name: str = "subset"):
    self.source = source
    self.indices = np.asarray(indices, np.int64)
    self._name = name

  def __len__(self) -> int:
    return len(self.indices)

  def __getitem__(self, index: int) -> str:
    return self.source[int(self.indices[index])]

  def __repr__(self) -> str:
    return f"IndexSubset({self._name} of {self.source!r}, documents={len(self)})"


def _hash_uniform(values: np.ndarray, seed: int) -> np.ndarray:
  """splitmix64 of (value, seed) -> float64 in [0, 1); vectorised, platform-stable."""
  with np.errstate(over="ignore"):
    z = values.astype(np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
  return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def split_validation(source, fraction: float, *, seed: int = 0):
  """Holds out a deterministic share of the documents as a validation set.

  A document goes to validation iff hash(original document index, seed) <
  fraction, so the split is fixed by the data and the seed, and the pieces of a
  split long document stay on the same side.

  Args:
    source: a DocumentSource (or any len/getitem source; its indices are hashed).
    fraction: share in [0, 1).
    seed: hash seed.

  Returns:
    (train, validation) IndexSubsets.
  """
  if not 0.0 <= fraction < 1.0:
    raise ValueError(f"validation fraction must be in [0, 1), got {fraction}")
  records = getattr(source, "group_ids", None)
  if records is None:
    records = np.arange(len(source))
  is_val = _hash_uniform(np.asarray(records), seed) < fraction
  train = IndexSubset(source, np.flatnonzero(~is_val), name="train split")
  val = IndexSubset(source, np.flatnonzero(is_val), name="validation split")
  if len(train) == 0:
    raise ValueError(f"The train split of {source!r} is empty; lower the validation fraction.")
  if fraction > 0 and len(val) == 0:
    raise ValueError(f"The validation split of {source!r} is empty (fraction {fraction}); "
                     "raise the fraction or pass validation files.")
  return train, val


def _guess_format(path: str) -> str:
  if os.path.isdir(path):
    if any(os.path.exists(os.path.join(path, f))
           for f in ("dataset_info.json", "state.json", "dataset_dict.json")):
      return "hf"
    raise ValueError(f"Cannot guess the format of folder {path!r}; set format.")
  name = path.lower()
  for ext, fmt in ((".jsonl", "jsonl"), (".json", "jsonl"), (".parquet", "parquet"),
                   (".array_record", "array_record"), (".arrayrecord", "array_record")):
    if name.endswith(ext) or f"{ext}-" in name:
      return fmt
  return "text"


class DataQualityError(ValueError):
  """A data file has more bad records than `max_bad_fraction` allows."""


def check_quality(source: DocumentSource, max_bad_fraction: float) -> None:
  """Refuses a source with a file whose bad-record share exceeds `max_bad_fraction`.

  Bad records are lines / rows / records that are not valid UTF-8, are not parsable
  JSON, or lack a string text field (`SourceStats.bad_fraction`). Empty documents
  are not bad (blank lines separate paragraphs). Plain-text and JSON-lines sources
  are judged file by file; the others as a whole.

  Raises:
    DataQualityError: one line naming the worst file, its counts and the fix.
  """
  if not 0.0 <= max_bad_fraction <= 1.0:
    raise ValueError(f"max_bad_fraction must be in [0, 1], got {max_bad_fraction}.")
  worst = max(source.file_stats.items(), key=lambda kv: kv[1].bad_fraction(), default=None)
  if worst is None or worst[1].bad_fraction() <= max_bad_fraction:
    return
  name, st = worst
  raise DataQualityError(
      f"data file {name}: {st.bad_fraction():.1%} of {st.examined} records are bad "
      f"({st.bad_records} unparsable or without the text field, {st.invalid_utf8_documents} "
      f"invalid UTF-8), above config.data.max_bad_fraction={max_bad_fraction}; check the "
      "file and data.format / data.text_field, or raise data.max_bad_fraction.")


def make_source(format: str, paths: str | Sequence[str] | None, *,  # pylint: disable=redefined-builtin
                text_field: str = "text", split: str | None = None,
                json_records: bool = False, on_decode_error: str = "replace",
                max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS,
                max_bad_fraction: float | None = None) -> DocumentSource:
  """Builds a document source, logs its statistics and (optionally) checks its quality.

  See `_make_source` for the arguments; `max_bad_fraction` (None = no check) is the
  largest share of bad records a file may have (`check_quality`).

  Raises:
    DataQualityError: a file has too many bad records.
  """
  source = _make_source(format, paths, text_field=text_field, split=split,
                        json_records=json_records, on_decode_error=on_decode_error,
                        max_document_chars=max_document_chars)
  st = source.stats
  logging.info("data %s: %d documents from %d records of %d files; %d bad records, %d invalid "
               "UTF-8, %d empty documents, %d empty files, %d split documents", source,
               len(source), st.records, st.files, st.bad_records, st.invalid_utf8_documents,
               st.empty_documents, st.empty_files, st.split_documents)
  if max_bad_fraction is not None:
    check_quality(source, max_bad_fraction)
  return source


def _make_source(format: str, paths: str | Sequence[str] | None, *,  # pylint: disable=redefined-builtin
                 text_field: str = "text", split: str | None = None,
                 json_records: bool = False, on_decode_error: str = "replace",
                 max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS) -> DocumentSource:
  """Builds a document source.

  Args:
    format: one of FORMATS ("auto" guesses from the first path's extension:
      .jsonl/.json, .parquet, .array_record, a saved-dataset folder -> "hf", else
      plain text one document per line), or "default" for the embedded corpus.
      "paragraphs" is plain text with blank-line-separated documents.
    paths: files, globs or (for "hf") one folder; ignored for "default".
    text_field: JSON field / column name holding the text.
    split: DatasetDict split for "hf".
    json_records: for "array_record": records are JSON objects holding text_field
      (default: records are UTF-8 text).
    on_decode_error: "replace" or "skip" invalid UTF-8.
    max_document_chars: longer documents are cut into pieces.
  """
  kw = dict(on_decode_error=on_decode_error, max_document_chars=max_document_chars)
  if format == "default":
    from lm.data import corpus  # pylint: disable=g-import-not-at-top
    return InMemorySource(corpus.default_corpus(), name="default corpus (stdlib docs)",
                          max_document_chars=max_document_chars)
  if format not in FORMATS:
    raise ValueError(f"unknown data format {format!r}; expected one of {FORMATS + ('default',)}.")
  files = expand_paths(paths)
  if format == "auto":
    format = "hf" if remote.is_dir(files[0]) else _guess_format(
        remote.strip_compression(files[0]))
  files = scan.local_files(files)
  if format == "text":
    return TextSource(files, mode="line", **kw)
  if format == "paragraphs":
    return TextSource(files, mode="paragraph", **kw)
  if format == "jsonl":
    return JsonLinesSource(files, text_field=text_field, **kw)
  if format == "parquet":
    return ParquetSource(files, text_field=text_field, **kw)
  if format == "array_record":
    return ArrayRecordSource(files, text_field=text_field if json_records else None, **kw)
  if len(files) != 1:
    raise ValueError(f"format 'hf' takes one saved-dataset folder, got {files}.")
  return HFDiskSource(files[0], text_field=text_field, split=split, **kw)
