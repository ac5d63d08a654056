r"""The CPU-sized downstream suite ("mini"): tasks lm builds itself from a corpus's text.

Here: reading and splitting the text (`load`), the eight tasks' construction, formats,
choices, chance levels and metrics; SUITE, the five tasks of the "mini" column, and
`mini_average`. Not here: fine-tuning and scoring a run on it (lm/mini_suite.py). Which text,
how examples are built, and what the column measures: docs/downstream_mini.md.

    rows = get_task("mini_cloze").examples("validation")   # [{"inputs": ..., "targets": ...}]
    mini_average({"mini_completion": {"accuracy": 81.0}, ...})   # the "mini" column

Why this module is long: it is the whole suite, one contract (docs/downstream_mini.md,
checked together by tests/downstream/test_mini.py); splitting it would spread each task over
several files.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from lm.downstream import task as task_lib

HELDOUT_FRACTION = 0.01  # configs: data.validation_fraction (the pipeline's held-out share)
HELDOUT_SEED = 0  # configs: data.validation_seed
SUITE_SEED = 0
VALIDATION_DOC_FRACTION = 0.4  # a user corpus: share of its documents in the validation split
MAX_EXAMPLES = {"train": 2000, "validation": 500}
TRAIN_DOCUMENTS = 1200  # embedded corpus: pre-training documents the train split reads
MAX_DOCUMENTS = 20_000  # a user corpus: its first documents only (plenty to fill the caps)
SPLITS = ("train", "validation")
MIN_UNIT_WORDS = 3
MAX_UNIT_CHARS = 100
MAX_INPUT_COST = 100  # input_cost of an example's shown lines (~<= 110 tokens: budget 128)
MAX_TOKENS = 128  # inputs and targets fit in this many tokens (runlocal's tokenizer)
UNSHUFFLE_SEPARATOR = " | "
BLANK = "___"

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
_WORD = re.compile(r"(?<![\w])[A-Za-z]{4,}(?![\w])")
# Frequent words a model could guess without reading the passage; never cloze answers.
_STOPWORDS = frozenset(
    "that this with from have will which when then than there their they them these those "
    "been were what where while also only into such some each more most other does done "
    "must should would could used uses using same like just many much very over under "
    "Return Returns None True False self".split())
# The 5 orders of 3 lines that differ from the original one.
_NON_IDENTITY = tuple(p for p in itertools.permutations(range(3)) if p != (0, 1, 2))


# --------------------------------------------------------------------------------------
# Held-out documents -> units.


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


def _clean(text: str) -> str:
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
    line = _clean(line)
    parts = [line] if len(line) <= MAX_UNIT_CHARS else [
        _clean(s) for s in _SENTENCE_END.split(line)]
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
def _splits(data_dir: str | None) -> dict[str, list[list[list[str]]]]:
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


# --------------------------------------------------------------------------------------
# Task builders: runs of units -> raw examples (dicts), deterministic given the rng.


DISTRACTOR_DRAWS = 16  # other documents' answers drawn per distractor; the most alike wins


def _start_class(text: str) -> int:
  """0: starts with a lower-case letter, 1: upper-case, 2: anything else."""
  return 0 if text[:1].islower() else 1 if text[:1].isupper() else 2


def _distractor(pool: Sequence[tuple[int, str]], d: int, rng: np.random.Generator, like: str,
                avoid: Sequence[str]) -> str | None:
  """Another example's answer, from another document than docs[d], that looks like `like`:
  of DISTRACTOR_DRAWS random (document, answer) entries of `pool` (every example's answer)
  from other documents, one that starts like it (lower-case letter, capital, other) if any,
  and of those the closest to it in length (the first on ties). Drawn from the answers, a
  distractor is a line of the same kind as an answer (with a random line of a random other
  document both fine-tuned models scored below chance, docs/downstream_mini.md); matched in
  start and length,
  neither option is recognisable without reading line A (a next line starts in lower case
  more often than a sentence does, and rank classification, a sum of log-likelihoods,
  favours the shorter option). None if no entry can be drawn."""
  drawn = []
  for _ in range(200):
    if len(drawn) == DISTRACTOR_DRAWS:
      break
    e, unit = pool[int(rng.integers(len(pool)))]
    if e != d and unit not in avoid and unit not in drawn:
      drawn.append(unit)
  if not drawn:
    return None
  return min(drawn, key=lambda u: (_start_class(u) != _start_class(like),
                                   abs(len(u) - len(like))))


def _choice_examples(positives, rng) -> list[tuple[dict[str, Any], ...]]:
  """One example per (doc, a, b): the options are b and a distractor (`_distractor`: the
  answer of another document's example) in a random order, the answer is b; positives whose
  distractor cannot be drawn are left out."""
  pool = [(d, b) for d, _, b in positives]
  out = []
  for d, a, b in positives:
    neg = _distractor(pool, d, rng, like=b, avoid=(a, b))
    if neg is not None:
      options = [b, neg] if rng.integers(2) == 0 else [neg, b]
      out.append(({"a": a, "options": options, "answer": b},))
  return out


def build_next_line(docs, rng) -> list[tuple[dict, ...]]:
  """mini_next_line examples: for adjacent units (a, b) of a run, a and the options b and a
  distractor (another document's answer, `_distractor`)."""
  positives = [(d, a, b) for d, runs in enumerate(docs) for run in runs
               for a, b in zip(run, run[1:]) if a != b]
  return _choice_examples(positives, rng)


def build_same_doc(docs, rng) -> list[tuple[dict, ...]]:
  """mini_same_doc examples: for each unit a of a document with a unit b at least 2 units
  away (not adjacent), a and the options: one such b at random and a distractor (another
  document's answer, `_distractor`)."""
  positives = []
  for d, runs in enumerate(docs):
    units = [u for run in runs for u in run]
    for i, a in enumerate(units):
      far = [j for j in range(len(units)) if abs(i - j) >= 2 and units[j] != a]
      if far:
        positives.append((d, a, units[far[int(rng.integers(len(far)))]]))
  return _choice_examples(positives, rng)


def _word_pattern(word: str) -> re.Pattern:
  return re.compile(rf"(?<![\w]){re.escape(word)}(?![\w])")


def build_cloze(docs, rng) -> list[tuple[dict, ...]]:
  """mini_cloze examples: in each window of up to 3 consecutive units (non-overlapping), every
  occurrence of a word of 4+ letters (not a stopword) that occurs at least twice gives one
  example: the passage with that occurrence replaced by the blank (`rng` is unused)."""
  out = []
  for runs in docs:
    for run in runs:
      for i in range(0, len(run), 3):
        passage = " ".join(run[i:i + 3])
        words = [m.group() for m in _WORD.finditer(passage)]
        counts: dict[str, int] = {}
        for w in words:
          counts[w] = counts.get(w, 0) + 1
        for word, n in counts.items():  # dict order: first occurrence
          if n < 2 or word in _STOPWORDS or word.lower() in _STOPWORDS:
            continue
          for s, e in (m.span() for m in _word_pattern(word).finditer(passage)):
            out.append(({"passage": passage[:s] + BLANK + passage[e:], "answer": word},))
  return out


def build_unshuffle(docs, rng) -> list[tuple[dict, ...]]:
  """mini_unshuffle examples: every 3 consecutive distinct units of a run (sliding window),
  shown in one of the 5 orders that differ from the original, chosen at random."""
  out = []
  for runs in docs:
    for run in runs:
      for i in range(len(run) - 2):
        lines = run[i:i + 3]
        if len(set(lines)) < 3:
          continue
        order = _NON_IDENTITY[int(rng.integers(len(_NON_IDENTITY)))]
        out.append(({"shuffled": [lines[k] for k in order], "lines": list(lines)},))
  return out


WORD_ORDER_MIN_WORDS = 5  # a line and its scramble differ in 3+ interior words


def scramble_interior(words: Sequence[str], rng: np.random.Generator) -> list[str] | None:
  """`words` with all but the first and last in another order (None if all orders of the
  interior give back `words`: fewer than 2 distinct interior words). The ends stay, so the
  capital at the start and the full stop at the end do not tell the two apart."""
  inner = list(words[1:-1])
  if len(set(inner)) < 2:
    return None
  while True:
    order = [inner[i] for i in rng.permutation(len(inner))]
    if order != inner:
      return [words[0], *order, words[-1]]


def build_word_order(docs, rng) -> list[tuple[dict, ...]]:
  """mini_word_order examples: every unit of WORD_ORDER_MIN_WORDS+ words, and the same unit
  with its interior words scrambled (`scramble_interior`), in a random order; the answer is
  the unit (a minimal pair in the manner of CoLA / BLiMP: the same words, only their order
  tells which is text)."""
  out = []
  for runs in docs:
    for run in runs:
      for unit in run:
        words = unit.split(" ")
        if len(words) < WORD_ORDER_MIN_WORDS:
          continue
        scrambled = scramble_interior(words, rng)
        if scrambled is None:
          continue
        neg = " ".join(scrambled)
        options = [unit, neg] if rng.integers(2) == 0 else [neg, unit]
        out.append(({"options": options, "answer": unit},))
  return out


COMPLETION_MIN_WORDS = 6  # beginning and ending of 3+ words each


def _halves(unit: str) -> tuple[str, str]:
  """A unit cut after its first half of words (rounded down): (beginning, ending)."""
  words = unit.split(" ")
  half = len(words) // 2
  return " ".join(words[:half]), " ".join(words[half:])


def build_completion(docs, rng) -> list[tuple[dict, ...]]:
  """mini_completion examples: every unit of COMPLETION_MIN_WORDS+ words, cut in two halves
  (`_halves`), is paired with another document's such unit whose ending starts the same way
  (lower-case letter, capital, other: `_distractor` over the endings, of DISTRACTOR_DRAWS
  draws the closest in length; a unit with no such partner is left out); shown: the two beginnings in order and the two endings in a
  random order. The answer pairs each beginning with its own ending; the only other
  pairing swaps the endings, so both choices hold exactly the same four pieces and only how
  a beginning runs on into an ending tells them apart."""
  positives = []
  for d, runs in enumerate(docs):
    for run in runs:
      for unit in run:
        if len(unit.split(" ")) >= COMPLETION_MIN_WORDS:
          positives.append((d, *_halves(unit)))
  pool = [(d, end) for d, _, end in positives]
  heads: dict[str, dict[int, str]] = {}  # ending -> {document: its (last) beginning}
  for d, head, end in positives:
    heads.setdefault(end, {})[d] = head
  out = []
  for d, head, end in positives:
    other = _distractor(pool, d, rng, like=end, avoid=(end,))
    if other is None or _start_class(other) != _start_class(end):
      continue
    other_head = next(h for e, h in heads[other].items() if e != d)
    if other_head == head:
      continue
    endings = [end, other] if rng.integers(2) == 0 else [other, end]
    out.append(({"a": [head, other_head], "options": endings, "answer": [end, other]},))
  return out


FILL_OPTIONS = 4  # the answer and 3 distractors


def build_fill(docs, rng) -> list[tuple[dict, ...]]:
  """mini_fill examples: in every unit, one word of 4+ letters (not a stopword) that occurs
  once in it, chosen at random, is replaced by the blank; the options are that word and
  FILL_OPTIONS - 1 distractors, other documents' answers that are not in the unit, each of
  the same start (capital or not) and the closest in length of DISTRACTOR_DRAWS draws
  (`_distractor`), in a random order. The answer is not in the input: the model must know
  which word the context wants."""
  positives = []
  for d, runs in enumerate(docs):
    for run in runs:
      for unit in run:
        words = [m.group() for m in _WORD.finditer(unit)]
        once = [m for m in _WORD.finditer(unit) if words.count(m.group()) == 1
                and m.group() not in _STOPWORDS and m.group().lower() not in _STOPWORDS]
        if once:
          m = once[int(rng.integers(len(once)))]
          positives.append((d, unit[:m.start()] + BLANK + unit[m.end():], m.group()))
  pool = [(d, w) for d, _, w in positives]
  out = []
  for d, passage, word in positives:
    options, shown = [word], [m.group() for m in _WORD.finditer(passage)]
    for _ in range(FILL_OPTIONS - 1):
      neg = _distractor(pool, d, rng, like=word, avoid=options + shown)
      if neg is None:
        break
      options.append(neg)
    if len(options) == FILL_OPTIONS:
      options = [options[i] for i in rng.permutation(FILL_OPTIONS)]
      out.append(({"passage": passage, "options": options, "answer": word},))
  return out


PHRASE_ORDER_PIECES = 5  # the first and the last stay; the 3 between are shuffled
PHRASE_ORDER_MIN_WORDS = 7  # pieces of 1+ words, the 3 shuffled ones 5+ words together


def phrase_pieces(words: Sequence[str], n: int = PHRASE_ORDER_PIECES) -> list[str]:
  """A line's words cut into n pieces of as equal a number of words as can be (the longer
  pieces first), each joined by spaces."""
  sizes = [len(words) // n + (i < len(words) % n) for i in range(n)]
  cuts = np.cumsum([0, *sizes])
  return [" ".join(words[cuts[i]:cuts[i + 1]]) for i in range(n)]


def _middle_orders(pieces: Sequence[str]) -> list[str]:
  """The lines made of `pieces` with the 3 middle ones in each of the 5 orders other than
  the given one (the first and last pieces stay)."""
  first, middle, last = pieces[0], pieces[1:-1], pieces[-1]
  return [" ".join([first, *(middle[k] for k in p), last]) for p in _NON_IDENTITY]


def build_phrase_order(docs, rng) -> list[tuple[dict, ...]]:
  """mini_phrase_order examples: every unit of PHRASE_ORDER_MIN_WORDS+ words, cut into 5
  pieces (`phrase_pieces`), shown with the 3 middle pieces in one of the 5 orders that differ
  from the original, chosen at random; the target is the unit. The first and last pieces
  stay, so a capital at the start or a full stop at the end tells nothing. Units whose 6
  orders do not give 6 distinct lines (repeated pieces) are left out."""
  out = []
  for runs in docs:
    for run in runs:
      for unit in run:
        words = unit.split(" ")
        if len(words) < PHRASE_ORDER_MIN_WORDS:
          continue
        pieces = phrase_pieces(words)
        if len({unit, *_middle_orders(pieces)}) < 1 + len(_NON_IDENTITY):
          continue
        order = _NON_IDENTITY[int(rng.integers(len(_NON_IDENTITY)))]
        shown = [pieces[0], *(pieces[1 + k] for k in order), pieces[-1]]
        out.append(({"shuffled": shown, "answer": unit},))
  return out


_INPUT_FIELDS = ("a", "options", "passage", "shuffled")  # the raw fields inputs show


def input_cost(example: Mapping[str, Any]) -> float:
  """A tokenizer-free upper estimate of the tokens of an example's shown text (its
  _INPUT_FIELDS): per word 1, per lower-case letter 1/4, per other non-space character 1
  (capitals, digits and symbols split into short pieces; code lines cost ~2x prose)."""
  total = 0.0
  for key in _INPUT_FIELDS:
    value = example.get(key)
    for text in ([value] if isinstance(value, str) else value or ()):
      lower = sum(c.islower() for c in text)
      other = sum(not c.isspace() for c in text) - lower
      total += len(text.split()) + lower / 4 + other
  return total


def _cap(groups: list[tuple[dict, ...]], limit: int, rng: np.random.Generator
         ) -> list[dict[str, Any]]:
  """At most `limit` examples: whole groups (every task's groups now hold one example each)
  chosen at random, then all examples shuffled; each gets its position as "idx".

  A group with an example whose inputs an earlier group already has is dropped first
  (identical lines recur across documents), so a split holds no input twice; so is a group
  with an example of input_cost over MAX_INPUT_COST (dense code lines), which keeps inputs
  within the token budget (module docstring).
  """
  seen, unique = set(), []
  for group in groups:
    if any(input_cost(ex) > MAX_INPUT_COST for ex in group):
      continue
    keys = [json.dumps([ex.get(k) for k in _INPUT_FIELDS]) for ex in group]
    if not any(k in seen for k in keys):
      seen.update(keys)
      unique.append(group)
  groups = unique
  per = max(1, max((len(g) for g in groups), default=1))
  keep = limit // per
  if len(groups) > keep:
    groups = [groups[i] for i in np.sort(rng.choice(len(groups), keep, replace=False))]
  flat = [dict(ex) for g in groups for ex in g]
  flat = [flat[i] for i in rng.permutation(len(flat))]
  for i, ex in enumerate(flat):
    ex["idx"] = i
  return flat


# --------------------------------------------------------------------------------------
# Metrics (numpy; the headline of each task is in HEADLINE).


def accuracy(targets: Sequence[Any], predictions: Sequence[Any]) -> dict[str, float]:
  """{"accuracy": % of predictions equal to their target}."""
  return {"accuracy": 100.0 * float(np.mean([t == p for t, p in zip(targets, predictions)]))}


def exact_match(targets: Sequence[Any], predictions: Sequence[Any]) -> dict[str, float]:
  """{"exact_match": % of (postprocessed) predictions equal to their target}."""
  return {"exact_match": accuracy(targets, predictions)["accuracy"]}


def line_accuracy(targets: Sequence[Sequence[str]], predictions: Sequence[Sequence[str]]
                  ) -> dict[str, float]:
  """{"line_accuracy": % of target lines found at their position in the prediction}."""
  scores = [np.mean([i < len(p) and p[i] == line for i, line in enumerate(t)])
            for t, p in zip(targets, predictions)]
  return {"line_accuracy": 100.0 * float(np.mean(scores))}


# Every mini task's headline metric; the suite (HEADLINE, the "mini" column) is five of them.
TASK_METRIC = {"mini_completion": "accuracy", "mini_fill": "accuracy",
               "mini_cloze": "exact_match", "mini_phrase_order": "exact_match",
               "mini_word_order": "accuracy", "mini_next_line": "accuracy",
               "mini_same_doc": "accuracy", "mini_unshuffle": "exact_match"}
SUITE = ("mini_completion", "mini_fill", "mini_cloze", "mini_phrase_order", "mini_word_order")
# Recorded with every suite result (mini_suite.json) so that scores of different suites are
# never compared unknowingly. 1: next line, same document, cloze, unshuffle; 2: and word
# order; 3: SUITE above. Raise it whenever a suite task's construction or format changes.
SUITE_VERSION = 3
HEADLINE = {name: TASK_METRIC[name] for name in SUITE}


def mini_average(results: Mapping[str, Mapping[str, float]]) -> float:
  """The "mini" column: the mean over the suite's 5 tasks of each one's headline metric.

  Headlines (HEADLINE): mini_completion accuracy, mini_fill accuracy, mini_cloze
  exact_match, mini_phrase_order exact_match, mini_word_order accuracy (all in %, equal
  weights; chance levels 50, 25, ~14, 20, 50).
  Other keys of `results` (e.g. T5 tasks, the mini tasks outside the suite) are ignored.

  Raises:
    ValueError: a suite task or its headline metric is missing from `results`.
  """
  missing = [f"{t}[{m!r}]" for t, m in HEADLINE.items() if m not in results.get(t, {})]
  if missing:
    raise ValueError(f"mini_average needs every mini task's headline metric; missing "
                     f"{missing}: evaluate all of {sorted(HEADLINE)}.")
  return float(np.mean([results[t][m] for t, m in HEADLINE.items()]))


# --------------------------------------------------------------------------------------
# The blank-input control: how much of a score the inputs carry (docs/downstream_mini.md).


BLANK_CHOICES = "blank_choices"  # where blank_inputs keeps each example's choices
# A margin over random initialisation below this many points of the "mini" average has no
# share: it is within the seed noise (range ~3.2, docs/results/README.md) and near 0 the
# share divides by ~0.
MIN_SHARE_MARGIN = 3.0


def _stored_choices(example) -> list[str]:
  return list(example[BLANK_CHOICES])


def blank_inputs(task: task_lib.Task, examples: Sequence[Mapping[str, Any]]
                 ) -> tuple[task_lib.Task, list[dict[str, Any]]]:
  """The blank-input control of a task's examples: the same items with "" as the input.

  Some tasks read their choices off the inputs (phrase order's pieces, cloze's candidate
  words), so each example's choices are taken from it as shown first and kept under
  BLANK_CHOICES; the returned task reads them from there. Targets, choices and every other
  field are unchanged, so the scores with and without the input rank the same candidates.

  Args:
    task: the task the examples are from (its `choices`, None for a decoded-only task).
    examples: its preprocessed examples ({"inputs", "targets", ...}).

  Returns:
    (the task with `choices` reading BLANK_CHOICES (None stays None), the examples with
    "inputs" = "").
  """
  out = []
  for ex in examples:
    row = {**ex, "inputs": ""}
    if task.choices is not None:
      row[BLANK_CHOICES] = list(task.choices(ex))
    out.append(row)
  blank_task = dataclasses.replace(
      task, choices=None if task.choices is None else _stored_choices)
  return blank_task, out


def surviving_share(score: float, blank: float, random_init: float,
                    min_margin: float = MIN_SHARE_MARGIN) -> float | None:
  """The share of a score's margin over random initialisation left with blank inputs.

  (blank - random_init) / (score - random_init), all in the same points (e.g. the "mini"
  average with the inputs, without them, and of the same fine-tuning from random
  initialisation with the inputs). 1: none of the margin needs the input (the model ranks
  the candidates by their own likelihood: decoder fluency); 0: all of it does. Not clipped:
  above 1, the blank scores higher than the full input; below 0, under random init.

  Returns:
    the share, or None when the margin score - random_init is below `min_margin` (within
    noise, or negative: there is no margin to share, and near 0 the ratio is ~x/0).
  """
  margin = score - random_init
  if not margin >= min_margin:  # also NaN
    return None
  return (blank - random_init) / margin


# --------------------------------------------------------------------------------------
# Preprocessors and postprocessors (text formats with T5-style prefixes).


OPTIONS = " options: "  # between line A and the two options of the choice tasks


def _choice_format(prefix: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
  def preprocess(raw):
    return {"inputs": f"{prefix}: {raw['a']}{OPTIONS}"
                      + UNSHUFFLE_SEPARATOR.join(raw["options"]),
            "targets": raw["answer"], "options": list(raw["options"]), "idx": raw["idx"]}
  return preprocess


CLOZE_PREFIX, UNSHUFFLE_PREFIX = "cloze: ", "unshuffle: "
WORD_ORDER_PREFIX = "word order:"


FILL_PREFIX, PHRASE_ORDER_PREFIX = "fill: ", "phrase order: "


def _fill_format(raw):
  return {"inputs": FILL_PREFIX + raw["passage"] + OPTIONS
                    + UNSHUFFLE_SEPARATOR.join(raw["options"]),
          "targets": raw["passage"].replace(BLANK, raw["answer"], 1),
          "passage": raw["passage"], "options": list(raw["options"]), "idx": raw["idx"]}


COMPLETION_PREFIX = "complete: "


def completion_lines(beginnings: Sequence[str], endings: Sequence[str]) -> str:
  """The lines beginning[i] + " " + ending[i], joined by UNSHUFFLE_SEPARATOR."""
  return UNSHUFFLE_SEPARATOR.join(f"{b} {e}" for b, e in zip(beginnings, endings))


def _completion_format(raw):
  return {"inputs": COMPLETION_PREFIX + UNSHUFFLE_SEPARATOR.join(raw["a"]) + OPTIONS
                    + UNSHUFFLE_SEPARATOR.join(raw["options"]),
          "targets": completion_lines(raw["a"], raw["answer"]), "beginnings": list(raw["a"]),
          "options": list(raw["options"]), "idx": raw["idx"]}


def _completion_choices(example) -> list[str]:
  """The two pairings of the shown beginnings with the shown endings (as written, and
  swapped), each as two lines."""
  b, (x, y) = example["beginnings"], example["options"]
  return [completion_lines(b, (x, y)), completion_lines(b, (y, x))]


def _fill_choices(example) -> list[str]:
  """The line with its blank filled by each option."""
  return [example["passage"].replace(BLANK, option, 1) for option in example["options"]]


def _phrase_order_format(raw):
  return {"inputs": PHRASE_ORDER_PREFIX + UNSHUFFLE_SEPARATOR.join(raw["shuffled"]),
          "targets": raw["answer"], "idx": raw["idx"]}


def phrase_order_choices(shown: Sequence[str]) -> list[str]:
  """The 5 lines made of the 5 shown pieces with the 3 middle ones in the orders other than
  the shown one (the line as written is always one: the shown order never is)."""
  return _middle_orders(shown)


def _phrase_order_choices(example) -> list[str]:
  return phrase_order_choices(
      example["inputs"][len(PHRASE_ORDER_PREFIX):].split(UNSHUFFLE_SEPARATOR))


def _word_order_format(raw):
  return {"inputs": WORD_ORDER_PREFIX + OPTIONS + UNSHUFFLE_SEPARATOR.join(raw["options"]),
          "targets": raw["answer"], "options": list(raw["options"]), "idx": raw["idx"]}


def _cloze_format(raw):
  return {"inputs": CLOZE_PREFIX + raw["passage"], "targets": raw["answer"], "idx": raw["idx"]}


def _unshuffle_format(raw):
  return {"inputs": UNSHUFFLE_PREFIX + UNSHUFFLE_SEPARATOR.join(raw["shuffled"]),
          "targets": UNSHUFFLE_SEPARATOR.join(raw["lines"]), "idx": raw["idx"]}


def _strip(text: str, example=None, is_target: bool = False) -> str:
  del example, is_target
  return _clean(text)


def _lines(text: str, example=None, is_target: bool = False) -> tuple[str, ...]:
  del example, is_target
  return tuple(_clean(p) for p in text.split(UNSHUFFLE_SEPARATOR.strip()))


def _options(example) -> list[str]:
  """The two options a choice task's inputs show (in the order shown)."""
  return list(example["options"])


def cloze_choices(passage: str) -> list[str]:
  """The candidate answers of a cloze passage (with its blank): its distinct words of 4+
  letters that are not stopwords, in order of first occurrence. The answer is always one
  (it occurs at least twice, so at least once outside the blank)."""
  out: list[str] = []
  for word in _cloze_candidates(passage):
    if word not in out and word not in _STOPWORDS and word.lower() not in _STOPWORDS:
      out.append(word)
  return out


def _cloze_choices(example) -> list[str]:
  return cloze_choices(example["inputs"][len(CLOZE_PREFIX):])


def unshuffle_choices(shown: Sequence[str]) -> list[str]:
  """The 5 orders of the 3 shown lines that differ from the shown order, joined by
  UNSHUFFLE_SEPARATOR (the original order is always one: the shown order never is)."""
  return [UNSHUFFLE_SEPARATOR.join(shown[k] for k in p) for p in _NON_IDENTITY]


def _unshuffle_choices(example) -> list[str]:
  return unshuffle_choices(example["inputs"][len(UNSHUFFLE_PREFIX):].split(UNSHUFFLE_SEPARATOR))


# --------------------------------------------------------------------------------------
# Chance levels (computed from a split's examples).


def _cloze_candidates(passage: str) -> list[str]:
  return [m.group() for m in _WORD.finditer(passage)]


def chance_level(name: str, split: str = "validation", data_dir: str | None = None
                 ) -> dict[str, float]:
  """Each metric's expected score of the task's chance baseline on a split (in %).

  Each is the expected score of picking one of the task's `choices` uniformly at random
  (what rank classification picks from). mini_next_line / mini_same_doc / mini_word_order /
  mini_completion: 1 / 2 options or pairings (50); mini_fill: 1 / 4 (25). mini_phrase_order:
  one of the 5 other orders of the middle pieces (20).
  mini_cloze: one of the passage's candidate words (`cloze_choices`: distinct words of 4+
  letters, not stopwords), per example 1 / their number. mini_unshuffle: one of the 5
  orders of the shown lines that differ from the shown one (exact match exactly 20; line
  accuracy averaged over those orders).
  """
  if name not in _BUILDERS:
    raise ValueError(f"unknown mini task {name!r}; expected one of {sorted(_BUILDERS)}.")
  raw = _raw_examples(name, split, data_dir)
  if name in ("mini_next_line", "mini_same_doc", "mini_word_order", "mini_completion",
              "mini_fill"):
    return {"accuracy": 100.0 * float(np.mean([1.0 / len(r["options"]) for r in raw]))}
  if name == "mini_cloze":
    per = [1.0 / len(cloze_choices(r["passage"])) for r in raw]
    return {"exact_match": 100.0 * float(np.mean(per))}
  if name == "mini_phrase_order":
    return {"exact_match": 100.0 / len(_NON_IDENTITY)}
  if name == "mini_unshuffle":
    em, la = [], []
    for r in raw:
      guesses = [tuple(r["shuffled"][k] for k in p) for p in _NON_IDENTITY]
      gold = [tuple(r["lines"])] * len(guesses)
      em.append(exact_match(gold, guesses)["exact_match"])
      la.append(line_accuracy(gold, guesses)["line_accuracy"])
    return {"exact_match": float(np.mean(em)), "line_accuracy": float(np.mean(la))}
  raise AssertionError(name)  # every builder has a chance level above


# --------------------------------------------------------------------------------------
# Registration.


@dataclasses.dataclass(frozen=True)
class _Builder:
  seed: int  # the task's own seed word (fixed; not derived from its name's hash)
  build: Callable[..., list[tuple[dict, ...]]]


_BUILDERS = {
    "mini_next_line": _Builder(1, build_next_line),
    "mini_same_doc": _Builder(2, build_same_doc),
    "mini_cloze": _Builder(3, build_cloze),
    "mini_unshuffle": _Builder(4, build_unshuffle),
    "mini_word_order": _Builder(5, build_word_order),
    "mini_completion": _Builder(6, build_completion),
    "mini_fill": _Builder(7, build_fill),
    "mini_phrase_order": _Builder(8, build_phrase_order),
}


@functools.lru_cache(maxsize=32)
def _raw_tuple(name: str, split: str, data_dir: str | None) -> tuple[dict[str, Any], ...]:
  builder = _BUILDERS[name]
  rng = np.random.default_rng([SUITE_SEED, builder.seed, SPLITS.index(split)])
  groups = builder.build(_splits(data_dir)[split], rng)
  examples = _cap(groups, MAX_EXAMPLES[split], rng)
  if not examples:
    where = repr(data_dir) if data_dir is not None else (
        "the embedded corpus's held-out split" if split == "validation" else
        "the embedded corpus's pre-training split")
    raise ValueError(f"task {name!r}: {where} gives no {split} example; point data_dir at "
                     "more held-out text.")
  return tuple(examples)


def _raw_examples(name: str, split: str, data_dir: str | None) -> list[dict[str, Any]]:
  if split not in SPLITS:
    raise ValueError(f"task {name!r} has no split {split!r}; expected one of {list(SPLITS)}.")
  if data_dir is not None:
    data_dir = os.fspath(data_dir)
  return [dict(r) for r in _raw_tuple(name, split, data_dir)]


def _loader(name: str) -> Callable[[str, str | None], list[dict[str, Any]]]:
  return functools.partial(_raw_examples, name)


_CAPS = "2000 train / 500 validation at most (embedded corpus: fewer validation)"
TASKS = (
    task_lib.Task(
        name="mini_next_line", load=_loader("mini_next_line"),
        preprocess=_choice_format("next line"), postprocess=_strip, metric_fns=(accuracy,),
        choices=_options,
        description="classification: which of two options directly follows line A (the "
                    "other: another document's answer of the same start and length); "
                    f"accuracy, chance 50; {_CAPS}"),
    task_lib.Task(
        name="mini_same_doc", load=_loader("mini_same_doc"),
        preprocess=_choice_format("same document"), postprocess=_strip,
        metric_fns=(accuracy,), choices=_options,
        description="pair classification: which of two options is from line A's document "
                    "(not adjacent to A; the other: another document's answer of the same "
                    f"start and length); accuracy, chance 50; {_CAPS}"),
    task_lib.Task(
        name="mini_cloze", load=_loader("mini_cloze"), preprocess=_cloze_format,
        postprocess=_strip, metric_fns=(exact_match,), choices=_cloze_choices,
        description="extraction: the word (4+ letters, also elsewhere in the passage) that "
                    "fills the blank of a 1-3 line passage; exact match, chance ~14 (one "
                    f"of the passage's distinct candidate words at random); {_CAPS}"),
    task_lib.Task(
        name="mini_unshuffle", load=_loader("mini_unshuffle"), preprocess=_unshuffle_format,
        postprocess=_lines, metric_fns=(exact_match, line_accuracy),
        choices=_unshuffle_choices,
        description="generation: write 3 shuffled consecutive lines in their original order "
                    "(rank-classified: the 5 other orders of the shown lines); exact match "
                    f"(chance 20) and line accuracy (chance ~36); {_CAPS}"),
    task_lib.Task(
        name="mini_word_order", load=_loader("mini_word_order"),
        preprocess=_word_order_format, postprocess=_strip, metric_fns=(accuracy,),
        choices=_options,
        description="acceptability (CoLA-like minimal pairs): which of two options is the "
                    "line as written (the other: its interior words scrambled); accuracy, "
                    f"chance 50; {_CAPS}"),
    task_lib.Task(
        name="mini_completion", load=_loader("mini_completion"),
        preprocess=_completion_format, postprocess=_strip, metric_fns=(accuracy,),
        choices=_completion_choices,
        description="classification: which of two options is the ending of a line whose "
                    "first half is shown (the other: another document's ending of the same "
                    f"start and length); accuracy, chance 50; {_CAPS}"),
    task_lib.Task(
        name="mini_fill", load=_loader("mini_fill"), preprocess=_fill_format,
        postprocess=_strip, metric_fns=(accuracy,), choices=_fill_choices,
        description="fill the blank: which of 4 words (the others: other documents' answers "
                    "of the same start and length) is the one a line's blank held; "
                    f"accuracy, chance 25; {_CAPS}"),
    task_lib.Task(
        name="mini_phrase_order", load=_loader("mini_phrase_order"),
        preprocess=_phrase_order_format, postprocess=_strip, metric_fns=(exact_match,),
        choices=_phrase_order_choices,
        description="generation: write a line whose 3 pieces are shown shuffled as written "
                    "(rank-classified: the 5 other orders of the pieces); exact match, "
                    f"chance 20; {_CAPS}"),
)

for _task in TASKS:
  task_lib.register(_task)
