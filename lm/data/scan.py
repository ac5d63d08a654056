"""The scan every document source shares: the interface, its statistics and its rules.

  DocumentSource     documents are spans (record, start, end) of records; `len`, `[i]`
  IndexBuilder       collects a scan's spans and statistics (`SourceStats`)
  decode, is_utf8, split_points, byte_split_points, line_spans: the robustness rules

The file formats that scan with these, and `make_source`, live in `lm/data/sources.py`;
the rules themselves (what is skipped, counted, cut or refused) are in docs/data.md,
"Raw sources".
"""
from __future__ import annotations

import codecs
import dataclasses
import logging
from collections.abc import Sequence

import numpy as np

from lm.data import remote

DEFAULT_MAX_DOCUMENT_CHARS = 100_000
WHITESPACE = np.zeros(256, dtype=bool)
WHITESPACE[[9, 10, 11, 12, 13, 32]] = True

@dataclasses.dataclass
class SourceStats:
  """What a scan found; `as_dict()` for logging."""
  files: int = 0
  empty_files: int = 0
  records: int = 0  # Lines, paragraphs, rows or records read.
  documents: int = 0  # Documents served (after skipping and splitting).
  empty_documents: int = 0
  bad_records: int = 0  # Unparsable JSON / missing or non-string field.
  invalid_utf8_documents: int = 0
  skipped_invalid_utf8: int = 0
  split_documents: int = 0  # Long documents cut into pieces.
  chars: int = 0  # Characters (bytes for plain text) served.
  examined: int = 0  # Records checked for faults (non-blank JSON lines; all lines/rows).

  def as_dict(self) -> dict[str, int]:
    return dataclasses.asdict(self)

  def bad_fraction(self) -> float:
    """Share of examined records that are bad (unparsable, no text field, invalid
    UTF-8); a record with two faults counts twice, capped at 1."""
    if not self.examined:
      return 0.0
    return min(1.0, (self.bad_records + self.invalid_utf8_documents) / self.examined)

  def minus(self, other: "SourceStats") -> "SourceStats":
    return SourceStats(**{f.name: getattr(self, f.name) - getattr(other, f.name)
                          for f in dataclasses.fields(self)})

  def merge(self, other: "SourceStats") -> None:
    for f in dataclasses.fields(self):
      setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def expand_paths(paths: str | Sequence[str]) -> list[str]:
  """Expands globs (local or remote, `remote.expand`); each pattern must match something.
  Returns files in order.

  Patterns keep their given order; the files of one glob are sorted.
  """
  return remote.expand(paths)


_LOCAL_COPIES: dict[str, str] = {}  # remote or compressed file -> its local copy


def local_files(files: Sequence[str]) -> list[str]:
  """Local, uncompressed files for the readers: remote (gs://) and .gz / .zst files are
  copied (decompressed) once per process into a temporary folder removed at exit. The
  scalable way to read a remote corpus is `python -m lm.data.prepare` (docs/data.md)."""
  out = []
  for f in files:
    if not (remote.is_remote(f) or remote.is_compressed(f)):
      out.append(f)
      continue
    if f not in _LOCAL_COPIES:
      import atexit  # pylint: disable=g-import-not-at-top
      import shutil  # pylint: disable=g-import-not-at-top
      import tempfile  # pylint: disable=g-import-not-at-top
      tmpdir = tempfile.mkdtemp(prefix="lm-data-")
      atexit.register(shutil.rmtree, tmpdir, ignore_errors=True)
      logging.info("copying %s to %s", f, tmpdir)
      _LOCAL_COPIES[f] = remote.localize(f, tmpdir)
    out.append(_LOCAL_COPIES[f])
  return out


def line_spans(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Byte offsets of the lines of a file.

  Args:
    data: uint8[n] file contents (n > 0).
  Returns:
    (starts, ends): int64[lines] each; line i is data[starts[i]:ends[i]] without its
    newline. A final newline does not open an empty last line.
  """
  newlines = np.flatnonzero(data == 10)
  starts = np.concatenate([[0], newlines + 1])
  ends = np.concatenate([newlines, [len(data)]])
  if ends[-1] == starts[-1]:  # File ends with a newline: no last line.
    starts, ends = starts[:-1], ends[:-1]
  return starts, ends


def split_points(text: str, max_chars: int) -> list[tuple[int, int]]:
  """Cuts text into (start, end) pieces of at most max_chars, at whitespace if possible."""
  pieces, start, n = [], 0, len(text)
  while n - start > max_chars:
    end = start + max_chars
    cut = max(text.rfind(" ", start + max_chars // 2, end),
              text.rfind("\n", start + max_chars // 2, end))
    end = cut + 1 if cut > 0 else end
    pieces.append((start, end))
    start = end
  pieces.append((start, n))
  return pieces


class EmptySourceError(ValueError):
  """A scan that found no documents; `stats` says what it found instead."""

  def __init__(self, message: str, stats: SourceStats):
    super().__init__(message)
    self.stats = stats


class IndexBuilder:
  """Accumulates (record, start, end) document spans and stats."""

  def __init__(self, max_document_chars: int):
    if max_document_chars <= 0:
      raise ValueError(f"max_document_chars must be positive, got {max_document_chars}")
    self.max_chars = max_document_chars
    self.rec, self.start, self.end, self.group = [], [], [], []
    self.num_groups = 0  # Original documents seen; pieces of one share its group id.
    self.stats = SourceStats()

  def add_text(self, rec: int, text: str) -> None:
    """Adds a record given as a string (non-text-file formats)."""
    self.stats.records += 1
    if not text or text.isspace():
      self.stats.empty_documents += 1
      return
    pieces = (split_points(text, self.max_chars) if len(text) > self.max_chars
              else [(0, len(text))])
    self.stats.split_documents += len(pieces) > 1
    pieces = np.asarray(pieces, np.int64)
    self.add_spans(np.full(len(pieces), rec), pieces[:, 0], pieces[:, 1],
                   np.zeros(len(pieces), np.int64))

  def add_spans(self, rec, start, end, group=None) -> None:
    """Adds non-empty spans (at most max_chars long).

    `group` (local, 0-based) numbers the original documents of this call; spans
    with equal group are pieces of one document. Default: one group per span.
    """
    group = np.arange(len(rec)) if group is None else np.asarray(group, np.int64)
    self.rec.append(np.asarray(rec, np.int64))
    self.start.append(np.asarray(start, np.int64))
    self.end.append(np.asarray(end, np.int64))
    self.group.append(group + self.num_groups)
    self.num_groups += int(group.max()) + 1 if len(group) else 0

  def build(self, what: str):
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)
    rec, start, end, group = cat(self.rec), cat(self.start), cat(self.end), cat(self.group)
    self.stats.documents = len(rec)
    self.stats.chars = int((end - start).sum())
    if not len(rec):
      raise EmptySourceError(
          f"No documents found in {what} (stats: {self.stats.as_dict()}); check the "
          "paths, the format and the text field/column name.", self.stats)
    return rec, start, end, group, self.stats


class DocumentSource:
  """Base class: documents are spans (record, start, end) of records.

  Subclasses implement `_record(rec) -> str` (or override `__getitem__`).
  Attributes: `stats` (SourceStats), `record_ids` (int64[N], the record/file each
  document is read from), `group_ids` (int64[N], the original document: pieces of
  one split long document share it), `num_groups` (the group ids are below it; a
  source over several files numbers its groups as its files' sources would, each
  file's from the sum of the previous files' `num_groups`).
  """

  stats: SourceStats
  record_ids: np.ndarray
  group_ids: np.ndarray
  file_stats: dict[str, SourceStats]  # Per file where scanned file by file, else one entry.

  def _set_index(self, builder: IndexBuilder, what: str) -> None:
    (self.record_ids, self._starts, self._ends, self.group_ids,
     self.stats) = builder.build(what)
    self.num_groups = builder.num_groups
    self._what = what
    if not getattr(self, "file_stats", None):
      self.file_stats = {what: self.stats}

  def __len__(self) -> int:
    return len(self.record_ids)

  def _record(self, rec: int) -> str:
    raise NotImplementedError

  def __getitem__(self, index: int) -> str:
    index = int(index)
    if not -len(self) <= index < len(self):
      raise IndexError(f"document {index} out of range [0, {len(self)})")
    rec = int(self.record_ids[index])
    text = self._record(rec)
    return text[self._starts[index]:self._ends[index]].strip()

  def __repr__(self) -> str:
    return f"{type(self).__name__}({self._what}, documents={len(self)})"



def byte_split_points(buf, s: int, e: int, max_bytes: int) -> list[tuple[int, int]]:
  """Cuts buf[s:e] into pieces <= max_bytes at whitespace, else at a UTF-8 boundary."""
  out = []
  while e - s > max_bytes:
    end = s + max_bytes
    window = bytes(buf[s + max_bytes // 2:end])
    cut = max(window.rfind(b" "), window.rfind(b"\n"))
    if cut >= 0:
      end = s + max_bytes // 2 + cut + 1
    else:
      while end > s + 1 and (buf[end] & 0xC0) == 0x80:  # Inside a multi-byte char.
        end -= 1
    out.append((s, end))
    s = end
  out.append((s, e))
  return out


def is_utf8(buf) -> bool:
  decoder = codecs.getincrementaldecoder("utf-8")("strict")
  block = 1 << 24
  try:
    for i in range(0, len(buf), block):
      decoder.decode(buf[i:i + block], final=i + block >= len(buf))
  except UnicodeDecodeError:
    return False
  return True


def check_decode_policy(policy: str) -> None:
  if policy not in ("replace", "skip"):
    raise ValueError(f"on_decode_error must be 'replace' or 'skip', got {policy!r}")


def decode(raw: bytes, policy: str, stats: SourceStats) -> str | None:
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError:
    stats.invalid_utf8_documents += 1
    if policy == "skip":
      stats.skipped_invalid_utf8 += 1
      return None
    return raw.decode("utf-8", errors="replace")
