"""The embedded default corpus: Python standard-library documentation.

Every machine with Python has it, so tokenizers and smoke runs work without a download: the
standard library's docstrings (parsed with `ast`, nothing imported) and `pydoc_data.topics`,
in a fixed order, cached as JSON lines and rebuilt when damaged. `comment_documents` reads
the same files' comments, which the corpus leaves out (the yardstick's items).

What does not live here: reading user corpora (`sources.py`).
The documents' order, what is skipped and the cache: docs/data.md, 'Raw sources'.
"""
from __future__ import annotations

import ast
import hashlib
import io
import json
import logging
import os
import sys
import sysconfig
import tokenize

from lm import workdir as workdir_lib

_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test",
                        "__pycache__"})
_DOC_NODES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_FORMAT_VERSION = 2  # Bump when the extraction rules or the cache format change.


def cache_dir() -> str:
  """Returns the lm cache folder: `$LM_CACHE_DIR`, else `~/.cache/lm`."""
  return os.environ.get("LM_CACHE_DIR") or os.path.join(
      os.path.expanduser("~"), ".cache", "lm")


def _stdlib_files(stdlib: str) -> list[str]:
  """Sorted relative paths of the standard library's .py files (no tests)."""
  out = []
  for root, dirs, files in os.walk(stdlib):
    dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
    for name in sorted(files):
      if name.endswith(".py"):
        out.append(os.path.relpath(os.path.join(root, name), stdlib))
  return sorted(out)


def _docstrings(source: bytes) -> list[str]:
  try:
    tree = ast.parse(source)
  except (SyntaxError, ValueError):  # A few stdlib files are deliberately invalid.
    return []
  docs = []
  for node in ast.walk(tree):
    if isinstance(node, _DOC_NODES):
      doc = ast.get_docstring(node, clean=True)
      if doc and doc.strip():
        docs.append(doc.strip())
  return docs


def _comments(source: bytes) -> list[str]:
  """The comment blocks of a source file: runs of comments on consecutive lines, each
  block's lines stripped of `#` and joined by spaces (a file that does not tokenize: [])."""
  blocks: list[list[str]] = []
  last = -2
  try:
    for token in tokenize.tokenize(io.BytesIO(source).readline):
      if token.type != tokenize.COMMENT:
        continue
      line, text = token.start[0], token.string.lstrip("#").strip()
      if line != last + 1 or not blocks:
        blocks.append([])
      blocks[-1].append(text)
      last = line
  except (tokenize.TokenError, SyntaxError, UnicodeDecodeError):
    return []
  return [joined for block in blocks if (joined := " ".join(t for t in block if t))]


def comment_documents(stdlib: str | None = None) -> list[str]:
  """The standard library's comments, one document per file (its blocks, one per line),
  files in sorted path order, files without comments left out; tests skipped as for the
  corpus. Not cached: it is read a few times per study, in a few seconds.

  Args:
    stdlib: the standard library folder; defaults to this interpreter's.
  """
  stdlib = stdlib or sysconfig.get_paths()["stdlib"]
  docs = []
  for rel in _stdlib_files(stdlib):
    with open(os.path.join(stdlib, rel), "rb") as f:
      blocks = _comments(f.read())
    if blocks:
      docs.append("\n".join(blocks))
  return docs


def python_version() -> str:
  """This interpreter's implementation and version, e.g. "cpython3.11.7": what the
  standard library's text (the corpus, its comments) depends on."""
  return "{}{}.{}.{}".format(sys.implementation.name, *sys.version_info[:3])


def _pydoc_topics(path: str) -> list[str]:
  """The string values of `pydoc_data/topics.py`, read with `ast.literal_eval`."""
  if not os.path.exists(path):
    return []
  with open(path, "rb") as f:
    tree = ast.parse(f.read())
  for node in tree.body:
    if isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "topics" for t in node.targets):
      topics = ast.literal_eval(node.value)
      return [topics[k].strip() for k in sorted(topics) if topics[k].strip()]
  return []


def build_default_corpus(stdlib: str | None = None) -> list[str]:
  """Extracts the corpus from the standard library (no cache).

  Args:
    stdlib: the standard library folder; defaults to this interpreter's.

  Returns:
    list of non-empty document strings, in a fixed order.
  """
  stdlib = stdlib or sysconfig.get_paths()["stdlib"]
  docs = []
  for rel in _stdlib_files(stdlib):
    with open(os.path.join(stdlib, rel), "rb") as f:
      docs.extend(_docstrings(f.read()))
  docs.extend(_pydoc_topics(os.path.join(stdlib, "pydoc_data", "topics.py")))
  return docs


def _cache_path(stdlib: str) -> str:
  digest = hashlib.sha256("\n".join(_stdlib_files(stdlib)).encode()).hexdigest()[:12]
  return os.path.join(cache_dir(), "corpus",
                      f"stdlib-docs-v{_FORMAT_VERSION}-{python_version()}-{digest}.jsonl")


def default_corpus_path(*, use_cache: bool = True) -> str | None:
  """Builds (once) and returns the JSON-lines cache file of the default corpus.

  Each line is `{"text": document}`, so the file can also be read with
  `sources.JsonLinesSource(path, text_field="text")`. Returns None if the cache
  folder is not writable (callers then use `default_corpus()` in memory).
  """
  stdlib = sysconfig.get_paths()["stdlib"]
  path = _cache_path(stdlib)
  if use_cache and os.path.exists(path):
    return path
  docs = build_default_corpus(stdlib)
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = "".join(json.dumps({"text": doc}, ensure_ascii=False) + "\n" for doc in docs)
    data = data.encode("utf-8")
    # The checksum first: a crash between the two leaves a cache that fails the check.
    workdir_lib.write_text_atomic(_checksum_path(path),
                                  f"{hashlib.sha256(data).hexdigest()} {len(docs)}\n")
    workdir_lib.write_bytes_atomic(path, data)  # concurrent builders write identical files
  except OSError:
    return None
  return path


def _checksum_path(path: str) -> str:
  """The cache's checksum file: "<sha256 of the .jsonl bytes> <number of documents>"."""
  return path + ".sha256"


def default_corpus(*, use_cache: bool = True) -> list[str]:
  """Returns the default corpus as a list of document strings (fixed order).

  Args:
    use_cache: read/write the JSON-lines cache (see module docstring).

  Returns:
    list[str], identical across runs on the same Python version.
  """
  path = default_corpus_path(use_cache=use_cache) if use_cache else None
  if path is None:
    return build_default_corpus()
  docs, problem = _read_cache(path)
  if docs is None:
    logging.warning("default-corpus cache %s is damaged (%s); rebuilding it.", path, problem)
    path = default_corpus_path(use_cache=False)
    if path is None:
      return build_default_corpus()
    docs, problem = _read_cache(path)
    if docs is None:
      raise ValueError(f"default-corpus cache {path} is unreadable right after rebuilding it "
                       f"({problem}); check the disk, or set LM_CACHE_DIR to another folder.")
  return docs


def _read_cache(path: str) -> tuple[list[str] | None, str]:
  """(documents, "") from a JSON-lines cache file, or (None, what is wrong with it)."""
  docs = []
  try:
    with open(path, "rb") as f:
      data = f.read()
    with open(_checksum_path(path), encoding="utf-8") as f:
      want = f.read().split()
    if len(want) != 2 or hashlib.sha256(data).hexdigest() != want[0]:
      return None, (f"its bytes do not match {os.path.basename(_checksum_path(path))} "
                    "(cut short or changed)")
    for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
      obj = json.loads(line)
      if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        return None, f"line {n} is not a {{\"text\": string}} object"
      docs.append(obj["text"])
  except (OSError, UnicodeDecodeError, ValueError) as e:
    return None, f"{type(e).__name__}: {str(e)[:120]}"
  if not docs or len(docs) != int(want[1]):
    return None, f"{len(docs)} documents, its checksum file says {want[1]}"
  return docs, ""
