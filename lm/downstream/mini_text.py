"""The mini suite's text: which documents each split reads, and their units (lines).

Here: the embedded corpus's held-out and pre-training documents (split as the pipeline
splits them), a user corpus read from `data_dir`, the units (short lines of 3+ words)
each document gives, and the train / validation assignment (`split_documents`). Not here:
the tasks built from the units (lm/downstream/mini.py). The rules: docs/downstream_mini.md.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import os
import re
from collections.abc import Sequence

HELDOUT_FRACTION = 0.01  # configs: data.validation_fraction (the pipeline's held-out share)
HELDOUT_SEED = 0  # configs: data.validation_seed
VALIDATION_DOC_FRACTION = 0.4  # a user corpus: share of its documents in the validation split
TRAIN_DOCUMENTS = 1200  # embedded corpus: pre-training documents the train split reads
MAX_DOCUMENTS = 20_000  # a user corpus: its first documents only (plenty to fill the caps)
SPLITS = ("train", "validation")
MIN_UNIT_WORDS = 3
MAX_UNIT_CHARS = 100
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
BLANK = "___"  # the cloze and fill tasks' marker: a usable unit never contains it


@functools.lru_cache(maxsize=1)
def _embedded_split() -> tuple[tuple[str, ...], tuple[str, ...]]:
  """(pre-training documents, held-out documents) of the embedded corpus, split as the
  pipeline splits it (HELDOUT_FRACTION, HELDOUT_SEED)."""
  from lm.data import sources  # pylint: disable=g-import-not-at-top
  corpus = sources.make_source("default", None)
  pretrain, heldout = sources.split_validation(corpus, HELDOUT_FRACTION, seed=HELDOUT_SEED)
  return (tuple(pretrain[i] for i in range(len(pretrain))),
          tuple(heldout[i] for i in range(len(heldout))))


def pretraining_documents(data_dir: str | None = None) -> tuple[str, ...]:
  """The documents pre-training reads beside the held-out ones: data_dir None, the embedded
  corpus's pre-training split; a path, () (what else a model read is unknown)."""
  return _embedded_split()[0] if data_dir is None else ()


@functools.lru_cache(maxsize=4)
def _read_documents(data_dir: str | None
                    ) -> tuple[tuple[str, ...], tuple[str, ...] | None, frozenset[str]]:
  """(held-out documents, train-side documents, units of the pre-training documents).

  data_dir None (module docstring): the embedded corpus's held-out split; TRAIN_DOCUMENTS of
  its pre-training documents, evenly spaced through the pre-training split; the units of all
  its pre-training documents. A user corpus: its documents (the first MAX_DOCUMENTS), None
  (the train split comes from the same documents) and no units.
  """
  from lm.data import sources  # pylint: disable=g-import-not-at-top
  if data_dir is None:
    pretrain_docs, heldout = _embedded_split()
    seen = frozenset(u for doc in pretrain_docs for run in document_units(doc) for u in run)
    n = min(TRAIN_DOCUMENTS, len(pretrain_docs))
    train_side = tuple(pretrain_docs[i * len(pretrain_docs) // n] for i in range(n))
    return heldout, train_side, seen
  if os.path.isdir(data_dir) and not any(
      os.path.exists(os.path.join(data_dir, f))
      for f in ("dataset_info.json", "state.json", "dataset_dict.json")):
    paths = sorted(os.path.join(data_dir, f) for f in os.listdir(data_dir)
                   if not f.startswith(".") and os.path.isfile(os.path.join(data_dir, f)))
    if not paths:
      raise ValueError(f"mini suite: folder {data_dir!r} holds no document files; point "
                       "data_dir at held-out text (a file, a glob or a folder of files).")
  else:
    paths = data_dir
  source = sources.make_source("auto", paths)
  return tuple(source[i] for i in range(min(len(source), MAX_DOCUMENTS))), None, frozenset()


def heldout_documents(data_dir: str | None = None) -> list[str]:
  """The held-out documents read (data_dir None: the pipeline's held-out split of the embedded
  corpus, the validation split's source; a path: its documents, both splits' source)."""
  return list(_read_documents(data_dir)[0])


def split_sources(data_dir: str | None = None) -> dict[str, list[str]]:
  """{split: the documents its examples are built from} (construction step 1), de-duplicated,
  in a fixed order; the two lists share no document."""
  documents, train_side, _ = _read_documents(data_dir)
  return {k: list(v) for k, v in _assign(documents, train_side).items()}


@functools.lru_cache(maxsize=4)
def _assign(documents: tuple[str, ...], train_side: tuple[str, ...] | None
            ) -> dict[str, tuple[str, ...]]:
  seen, train, val = set(), [], []
  for doc in documents:
    if doc not in seen:
      seen.add(doc)
      if train_side is None and _digest_fraction(doc) >= VALIDATION_DOC_FRACTION:
        train.append(doc)
      else:
        val.append(doc)
  for doc in train_side or ():
    if doc not in seen:  # also drops a train-side document identical to a held-out one
      seen.add(doc)
      train.append(doc)
  return {"train": tuple(train), "validation": tuple(val)}


def clean(text: str) -> str:
  return " ".join(text.split())


def _usable(unit: str) -> bool:
  upper = sum(c.isupper() for c in unit)
  return (len(unit.split()) >= MIN_UNIT_WORDS and len(unit) <= MAX_UNIT_CHARS
          and "|" not in unit and BLANK not in unit and 2 * upper <= len(unit) - upper)


def document_units(document: str) -> list[list[str]]:
  """A document's runs of consecutive usable units (construction step 2).

  Returns:
    list of runs, each a non-empty list of unit strings in document order.
  """
  runs, run = [], []
  for line in document.splitlines():
    line = clean(line)
    parts = [line] if len(line) <= MAX_UNIT_CHARS else [
        clean(s) for s in SENTENCE_END.split(line)]
    for unit in parts:
      if _usable(unit):
        run.append(unit)
      elif unit:  # a dropped unit ends the run (blank lines do not)
        if run:
          runs.append(run)
        run = []
  if run:
    runs.append(run)
  return runs


def _digest_fraction(text: str) -> float:
  return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2.0**64


def _without(runs: list[list[str]], banned) -> list[list[str]]:
  """The runs with the units in `banned` removed (a removed unit ends its run)."""
  out = []
  for run in runs:
    for is_banned, part in itertools.groupby(run, key=lambda u: u in banned):
      if not is_banned:
        out.append(list(part))
  return out


def split_documents(documents: Sequence[str], exclude: frozenset[str] = frozenset(),
                    train_documents: Sequence[str] | None = None
                    ) -> dict[str, list[list[list[str]]]]:
  """Construction steps 1 and 2: {split: [each document's runs of units]}.

  Args:
    documents: the held-out documents, in a fixed order.
    exclude: units never used in the validation split (those of the pre-training documents
      for the embedded corpus).
    train_documents: the train split's documents (the embedded corpus: pre-training
      documents); None: the train split is a digest-chosen share of `documents`.

  Returns:
    {"train": docs, "validation": docs}, each doc a non-empty list of runs of unit strings;
    documents left without units are left out. No validation unit is in a train document.
  """
  docs = _assign(tuple(documents), None if train_documents is None else tuple(train_documents))
  train_runs = [r for r in (document_units(d) for d in docs["train"]) if r]
  train_units = {u for runs in train_runs for run in runs for u in run}
  val_runs = [r for r in (_without(_without(document_units(d), exclude), train_units)
                          for d in docs["validation"]) if r]
  return {"train": train_runs, "validation": val_runs}


@functools.lru_cache(maxsize=4)
def splits(data_dir: str | None) -> dict[str, list[list[list[str]]]]:
  docs, train_side, exclude = _read_documents(data_dir)
  out = split_documents(docs, exclude, train_side)
  for split, runs in out.items():
    if len(runs) < 2:
      where = (repr(data_dir) if data_dir is not None else
               "the embedded corpus's held-out split" if split == "validation" else
               "the embedded corpus's pre-training split")
      raise ValueError(
          f"mini suite: {where} gives {len(runs)} document(s) with usable lines for the "
          f"{split} split (of {len(docs)} documents); the suite needs at least 2 per split: "
          "point data_dir at more held-out text (lines of 3+ words, <= 100 characters).")
  return out
