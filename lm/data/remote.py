"""Data files by any path: local or remote (gs://, through `etils.epath`), plain or compressed.

    files = remote.expand(["gs://bucket/c4/en/c4-train.*.json.gz"])
    local = remote.localize(files[0], tmpdir)     # a local, decompressed copy

What lives here: globbing local and remote paths, sizes, and copying a remote or compressed
(.gz, .zst) file or folder to a local uncompressed one for the readers that need a local
file (memory-mapped text and JSON lines, Parquet, `datasets.load_from_disk`). What does not:
reading documents (`sources.py`), prepared datasets (`prepared.py`).
"""
from __future__ import annotations

import glob
import gzip
import os
import shutil
from collections.abc import Sequence

from etils import epath

from lm import workdir as workdir_lib

COMPRESSED = (".gz", ".zst")
_COPY_BLOCK = 1 << 22


def is_remote(path: str | os.PathLike) -> bool:
  return workdir_lib.is_remote(path)


def as_path(path: str | os.PathLike) -> epath.Path:
  """An epath.Path: absolute when local, untouched when a URI."""
  return workdir_lib.as_path(path)


def is_compressed(path: str | os.PathLike) -> bool:
  return os.fspath(path).lower().endswith(COMPRESSED)


def strip_compression(name: str) -> str:
  """The name without a .gz / .zst suffix (the format is guessed from the rest)."""
  for ext in COMPRESSED:
    if name.lower().endswith(ext):
      return name[:-len(ext)]
  return name


def expand(patterns: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
  """Files (or folders) of local or remote paths and globs, in the given order; each glob's
  matches sorted.

  Raises:
    ValueError: no patterns.
    FileNotFoundError: a glob that matches nothing, or a path that does not exist.
  """
  if isinstance(patterns, (str, os.PathLike)):
    patterns = [patterns]
  if not patterns:
    raise ValueError("No data paths given; pass files or globs (or use the default corpus).")
  out = []
  for pattern in map(os.fspath, patterns):
    remote = is_remote(pattern)
    if glob.has_magic(pattern.split("://", 1)[-1]):
      if remote:
        first = min(i for i, c in enumerate(pattern) if c in "*?[")
        base = pattern[:first].rsplit("/", 1)[0]
        found = sorted(os.fspath(p) for p in epath.Path(base).glob(pattern[len(base) + 1:]))
      else:
        found = sorted(glob.glob(pattern))
      if not found:
        raise FileNotFoundError(f"Glob {pattern!r} matches no file; check the path.")
      out.extend(found)
    elif (epath.Path(pattern).exists() if remote else os.path.exists(pattern)):
      out.append(pattern)
    else:
      raise FileNotFoundError(f"Data path {pattern!r} does not exist; check the path "
                              "or pass a glob such as 'data/*.txt'.")
  return out


def _files_under(folder: epath.Path):
  """The files under a folder, recursively (epath has no rglob on buckets)."""
  for child in sorted(folder.iterdir()):
    if child.is_dir():
      yield from _files_under(child)
    else:
      yield child


def size(path: str) -> int:
  """Bytes of a file, or of all files under a folder."""
  p = as_path(path)
  if p.is_dir():
    return sum(f.stat().length for f in _files_under(p))
  return p.stat().length


def is_dir(path: str) -> bool:
  return as_path(path).is_dir()


def localize(path: str, tmpdir: str) -> str:
  """A local, uncompressed copy of file or folder `path` under `tmpdir` (the path itself when
  it is local and uncompressed already).

  Raises:
    ImportError: a .zst file without the zstandard package.
  """
  if not is_remote(path) and not is_compressed(path):
    return path
  src = as_path(path)
  local = os.path.join(tmpdir, strip_compression(src.name))
  if src.is_dir():  # e.g. a save_to_disk folder: copy its files
    for f in _files_under(src):
      dst = os.path.join(local, os.fspath(f).split(os.fspath(src).rstrip("/"), 1)[1].lstrip("/"))
      os.makedirs(os.path.dirname(dst), exist_ok=True)
      with f.open("rb") as fin, open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, _COPY_BLOCK)
    return local
  with src.open("rb") as raw, open(local, "wb") as out:
    if path.lower().endswith(".gz"):
      with gzip.GzipFile(fileobj=raw) as fin:
        shutil.copyfileobj(fin, out, _COPY_BLOCK)
    elif path.lower().endswith(".zst"):
      try:
        import zstandard  # pylint: disable=g-import-not-at-top
      except ImportError as e:
        raise ImportError(f"reading {path} needs zstandard: pip install zstandard "
                          "(or pip install -e '.[data]')") from e
      with zstandard.ZstdDecompressor().stream_reader(raw) as fin:
        shutil.copyfileobj(fin, out, _COPY_BLOCK)
    else:
      shutil.copyfileobj(raw, out, _COPY_BLOCK)
  return local
