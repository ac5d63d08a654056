"""Prepared datasets: tokenized documents in ArrayRecord shards, and the source that reads them.

A prepared dataset (written once by `python -m lm.data.prepare`, docs/data.md) is a folder,
local or remote (`etils.epath`):

  manifest.json                 what follows; written last, so its presence means complete
  tokenizer.model               the SentencePiece model the documents were tokenized with
  shard-00000-of-00004.array_record
                                one per input file: record i = document i of that file,
                                its token ids as little-endian `dtype` (no EOS)
  shard-00000-of-00004.json     the shard's entry of the manifest (how a killed run resumes)
  prepare.json                  the plan: inputs, tokenizer and options (a re-run must match)

Document d of the dataset is record d of the shards in order, the same documents in the same
order as the raw source of the same files (`sources.make_source`), so `PreparedSource[d]`
is `tokenizer.encode(raw_source[d])` and its `group_ids` are the raw source's.

What lives here: the format's constants, reading and checking the manifest, and
`PreparedSource` (grain random-access source: nothing is read up front but the manifest;
a shard is opened when one of its records is first read). What does not: writing a
prepared dataset (`prepare.py`), the pipeline around the source (`pipeline.py`).
"""
from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from etils import epath

from lm import workdir as workdir_lib
from lm.data import scan, sources

FORMAT_NAME = "lm-prepared-tokens"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
PLAN = "prepare.json"
TOKENIZER_FILE = "tokenizer.model"
# ArrayRecord writer options: one record per chunk (grain's random access), zstd.
WRITER_OPTIONS = "group_size:1,zstd"


class PreparedDataError(ValueError):
  """A prepared dataset that cannot be read as its manifest says (one line, names the fix)."""


def as_path(path: str | os.PathLike) -> epath.Path:
  """An epath.Path: absolute when local, untouched when a URI (gs://, s3://)."""
  return workdir_lib.as_path(path)


def shard_name(index: int, count: int) -> str:
  return f"shard-{index:05d}-of-{count:05d}.array_record"


def token_dtype(vocab_size: int) -> str:
  """The narrowest little-endian dtype holding ids < vocab_size ("<u2" or "<i4")."""
  return "<u2" if vocab_size <= 1 << 16 else "<i4"


def reader_path(path: epath.Path) -> str:
  """The path ArrayRecord's own (C++) reader opens for `path`: local, or gs:// read by
  its built-in GCS client. tests/fake_gcs.py points it at the fake bucket's folder."""
  return os.fspath(path)


def read_manifest(directory: str | os.PathLike) -> dict[str, Any]:
  """The manifest of the prepared dataset in `directory`, checked for format and version.

  Raises:
    PreparedDataError: no manifest (not prepared, or prepare has not finished), not
      JSON, another format or version.
  """
  directory = as_path(directory)
  path = directory / MANIFEST
  if not path.exists():
    raise PreparedDataError(
        f"{directory} has no {MANIFEST}: it is not a prepared dataset, or its `python -m "
        "lm.data.prepare` has not finished; run (or re-run, it resumes) prepare with "
        f"--output={directory}.")
  try:
    manifest = json.loads(path.read_text())
  except ValueError as e:
    raise PreparedDataError(f"{path} is not valid JSON ({e}); re-run prepare into a new "
                            "--output.") from e
  if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
    raise PreparedDataError(f"{path} is not a manifest of lm's prepared format "
                            f"({FORMAT_NAME!r}); check data.paths.")
  if manifest.get("version") != FORMAT_VERSION:
    raise PreparedDataError(
        f"{path} has format version {manifest.get('version')}, this lm reads version "
        f"{FORMAT_VERSION}; prepare the corpus again with this lm.")
  return manifest


def tokenizer_path(paths: str | Sequence[str]) -> str:
  """The tokenizer file of the prepared dataset named by data.paths (one folder)."""
  return os.fspath(as_path(_one_directory(paths)) / TOKENIZER_FILE)


def _one_directory(paths: str | Sequence[str]) -> str:
  if isinstance(paths, (str, os.PathLike)):
    paths = [paths]
  paths = [os.fspath(p) for p in paths]
  if len(paths) != 1:
    raise PreparedDataError(
        f"data.format='prepared' reads one prepared folder, got data.paths={tuple(paths)}; "
        "pass --config.data.paths='(\"DIR\",)' with the --output of `python -m "
        "lm.data.prepare`.")
  return paths[0]


def group_ids_of(shards: Sequence[dict[str, Any]]) -> np.ndarray:
  """The documents' group ids (int64[N]; pieces of one cut document share one) from the
  shard entries: per shard `group_jumps` [[local index, step], ...] where consecutive ids
  differ by other than 1 (first document: its id + 1), offsets by `groups`."""
  out, offset = [], 0
  for s in shards:
    steps = np.ones(s["documents"], np.int64)
    for i, step in s.get("group_jumps", []):
      steps[i] = step
    out.append(np.cumsum(steps) - 1 + offset)
    offset += s["groups"]
  return np.concatenate(out) if out else np.zeros(0, np.int64)


def group_jumps(group_ids: np.ndarray) -> list[list[int]]:
  """The inverse of `group_ids_of` for one shard: [[i, step], ...] where step != 1."""
  steps = np.diff(np.concatenate([[-1], np.asarray(group_ids, np.int64)]))
  where = np.flatnonzero(steps != 1)
  return [[int(i), int(steps[i])] for i in where]


class PreparedSource:
  """The documents of a prepared dataset as token ids (grain random-access source).

  `len()` comes from the manifest; `src[d]` is int32[n] (document d's ids, no EOS), read
  through grain's random-access ArrayRecord reader (`ArrayRecordDataSource`) that opens a
  shard at its first record read, so a process reads the records of its own virtual
  shards only. Shard sizes are checked against the manifest at construction (one stat per
  shard), a shard's record count when it is opened.

  Args:
    directory: the prepared folder (local or remote).
    tokenizer_sha256: the run's tokenizer hash; another one in the manifest is an error.

  Attributes: `manifest`, `stats` (SourceStats of the whole corpus), `file_stats` (per input
  file, for `sources.check_quality`), `group_ids` (int64[N], computed on first use),
  `num_groups`, `tokens` (tokens in all documents).

  Raises:
    PreparedDataError: no or a bad manifest, a tokenizer mismatch, a missing shard, or a
      shard whose size is not the manifest's.
  """

  def __init__(self, directory: str | os.PathLike, *, tokenizer_sha256: str | None = None):
    from array_record.python import array_record_data_source as ards  # pylint: disable=g-import-not-at-top
    self.directory = as_path(directory)
    self.manifest = read_manifest(self.directory)
    tok = self.manifest["tokenizer"]
    if tokenizer_sha256 is not None and tokenizer_sha256 != tok["sha256"]:
      raise PreparedDataError(
          f"the prepared dataset {self.directory} was tokenized with another tokenizer "
          f"(sha256 {tok['sha256'][:12]}..., the run's is {tokenizer_sha256[:12]}...); leave "
          "data.tokenizer unset to use the dataset's own tokenizer.model, or prepare the "
          "corpus again with this tokenizer.")
    self._shards = self.manifest["shards"]
    self._check_sizes()
    self._dtype = np.dtype(self.manifest["dtype"])
    counts = np.array([s["documents"] for s in self._shards], np.int64)
    self._ends = np.cumsum(counts)
    self._nonempty = [i for i, n in enumerate(counts) if n]
    self._verified: set[int] = set()
    self._lock = threading.Lock()
    self._reader = (ards.ArrayRecordDataSource(
        [f"{self._reader_path(i)}[0:{counts[i]}]" for i in self._nonempty])
        if self._nonempty else None)
    self.stats = scan.SourceStats(**self.manifest["stats"])
    self.file_stats = {s["source"]["path"]: scan.SourceStats(**s["stats"])
                       for s in self._shards}
    self.num_groups = int(sum(s["groups"] for s in self._shards))
    self.tokens = int(self.manifest["tokens"])
    self._group_ids: np.ndarray | None = None
    if len(self) == 0:
      raise PreparedDataError(f"the prepared dataset {self.directory} has no documents.")

  def _reader_path(self, shard: int) -> str:
    return reader_path(self.directory / self._shards[shard]["file"])

  def _check_sizes(self) -> None:
    def size(s):
      path = self.directory / s["file"]
      try:
        return path.stat().length
      except (FileNotFoundError, OSError):
        return None
    from concurrent import futures  # pylint: disable=g-import-not-at-top
    with futures.ThreadPoolExecutor(16) as pool:
      found = list(pool.map(size, self._shards))
    for s, n in zip(self._shards, found):
      if n is None:
        raise PreparedDataError(
            f"prepared shard {self.directory / s['file']} is missing; re-run prepare with "
            f"--output={self.directory} (it rewrites nothing that is intact).")
      if n != s["bytes"]:
        raise PreparedDataError(
            f"prepared shard {self.directory / s['file']} has {n} bytes, its manifest entry "
            f"{s['bytes']}: the shard is truncated or does not belong to this manifest; "
            "delete the shard and its .json and re-run prepare with "
            f"--output={self.directory}.")

  @property
  def group_ids(self) -> np.ndarray:
    if self._group_ids is None:
      self._group_ids = group_ids_of(self._shards)
    return self._group_ids

  def __len__(self) -> int:
    return int(self._ends[-1]) if len(self._ends) else 0

  def _verify(self, shard: int) -> None:
    """Checks the record count of a shard at its first use (one footer read)."""
    from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top
    with self._lock:
      if shard in self._verified:
        return
      name = self.directory / self._shards[shard]["file"]
      try:
        reader = array_record_module.ArrayRecordReader(self._reader_path(shard),
                                                       "readahead_buffer_size:0")
        found = reader.num_records()
        reader.close()
      except Exception as e:  # noqa: BLE001 - riegeli reports a damaged file as many types
        raise PreparedDataError(
            f"prepared shard {name} cannot be opened ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:160] if str(e) else ''}); it is corrupt: delete it and "
            f"its .json and re-run prepare with --output={self.directory}.") from e
      if found != self._shards[shard]["documents"]:
        raise PreparedDataError(
            f"prepared shard {name} holds {found} records, its manifest entry "
            f"{self._shards[shard]['documents']}: the shard does not belong to this manifest; "
            f"delete it and its .json and re-run prepare with --output={self.directory}.")
      self._verified.add(shard)

  def __getitem__(self, index: int) -> np.ndarray:
    """Document `index`'s token ids, int32[n]."""
    index = int(index)
    n = len(self)
    if not -n <= index < n:
      raise IndexError(f"document {index} out of range [0, {n})")
    index %= n
    shard = int(np.searchsorted(self._ends, index, side="right"))
    if shard not in self._verified:
      self._verify(shard)
    try:
      raw = self._reader[index]
    except Exception as e:  # noqa: BLE001 - riegeli's errors on damaged chunks vary
      raise PreparedDataError(
          f"prepared shard {self.directory / self._shards[shard]['file']}: record "
          f"{index - (int(self._ends[shard - 1]) if shard else 0)} cannot be read "
          f"({type(e).__name__}); the shard is corrupt: delete it and its .json and re-run "
          f"prepare with --output={self.directory}.") from e
    if len(raw) % self._dtype.itemsize:
      raise PreparedDataError(
          f"prepared shard {self.directory / self._shards[shard]['file']}: a record of "
          f"{len(raw)} bytes is not {self._dtype} token ids; the shard is corrupt: re-run "
          "prepare into a new --output.")
    return np.frombuffer(raw, self._dtype).astype(np.int32)

  def __getstate__(self):
    state = dict(self.__dict__)
    state["_lock"] = None
    return state

  def __setstate__(self, state):
    self.__dict__.update(state)
    self._lock = threading.Lock()

  def __repr__(self) -> str:
    return f"PreparedSource({self.directory}, documents={len(self)}, tokens={self.tokens})"


def open_prepared(paths: str | Sequence[str], *, tokenizer_sha256: str | None = None,
                  max_bad_fraction: float | None = None) -> PreparedSource:
  """The PreparedSource of data.paths (one folder), its quality checked as a raw source's."""
  source = PreparedSource(_one_directory(paths), tokenizer_sha256=tokenizer_sha256)
  if max_bad_fraction is not None:
    sources.check_quality(source, max_bad_fraction)
  return source
