r"""The CPU-sized downstream suite ("mini"): tasks lm builds itself, scored on held-out text.

Four tasks cover the kinds of the T5 paper's columns (docs/downstream_mini.md):

  mini_next_line   classification (GLUE-like): does line B directly follow line A?
  mini_same_doc    pair classification: are lines A and B from the same document?
  mini_cloze       extraction (SQuAD-like): the word that fills the blank, copied from the
                   passage
  mini_unshuffle   generation (CNN/DM / WMT-like): write 3 shuffled lines back in order

    task = get_task("mini_cloze")
    rows = task.examples("validation")          # [{"inputs": "cloze: ...", "targets": ...}]
    mini_average({"mini_next_line": {"accuracy": 81.0}, ...})   # the "mini" column

Where the text comes from. `load(split, data_dir)`:
  data_dir None: the embedded corpus (`lm.data.sources.split_validation` of it with the
    configs' `data.validation_fraction` = 0.01 and `data.validation_seed` = 0:
    HELDOUT_FRACTION, HELDOUT_SEED, the pre-training pipeline's own split).
    validation: the held-out documents, exactly those the pre-training pipeline evaluates on
      and never trains on. Lines that also occur in any pre-training document (the standard
      library repeats some docstrings) are dropped, so nothing a model pre-trained on the
      embedded corpus has seen is in the validation split.
    train: TRAIN_DOCUMENTS = 1200 of the pre-training documents, evenly spaced through the
      pre-training split (examples are built from ~350k characters, not from all ~8600
      documents, so loading stays about a second). Fine-tuning on text the model pre-trained
      on is harmless: what is new is the task, not the text, and a model fine-tuned from
      random initialisation sees the same examples. What matters is that validation is
      unseen: the train documents are not held-out documents, and no validation line occurs
      in any pre-training document, so no line is shared between the splits. The held-out
      split alone (87 documents, ~23k characters on Python 3.11) gave only a few hundred
      examples per task to share between the two splits; now all of it is validation and
      the train split fills its cap.
  data_dir a file, a glob, or a folder: its documents (the first MAX_DOCUMENTS = 20000)
    are used, read with lm's corpus readers (`sources.make_source`, format guessed from the
    first file's extension; a folder saved with `datasets.save_to_disk` is read as "hf";
    another folder: its files, sorted), and split between train and validation by document
    (construction step 1). Point it at held-out text (e.g. the run's `data.eval_paths`),
    never at training data: the suite cannot know what else a model saw.

Construction (every step deterministic: fixed seeds, document order, no set or hash() order,
so every process and every PYTHONHASHSEED builds the same examples):
  1. Documents are de-duplicated (first occurrence kept; a train-side document identical to a
     held-out one is dropped). A user corpus is split by a SHA-256 digest of each document's
     text: VALIDATION_DOC_FRACTION of them form the suite's validation split, the rest its
     train split. Either way the two splits come from disjoint documents, and validation
     units that also occur in a train document are dropped, so no line is shared between
     the splits.
  2. A document's units are its lines, whitespace-collapsed, of at least MIN_UNIT_WORDS words
     and at most MAX_UNIT_CHARS characters, without "|" or "___" (used by the formats) and
     not mostly capitals (at most a third of its characters upper-case: licence text in
     capitals costs about a token per character); a longer line contributes its sentences
     instead. A dropped line breaks the document into runs: "adjacent" means adjacent
     inside a run.
  3. Each task builds every candidate example of a split, drops repeated inputs and inputs
     over MAX_INPUT_COST (below), then keeps at most
     MAX_EXAMPLES[split] (2000 train / 500 validation) chosen at random with the task's own
     seed. On the embedded corpus (Python 3.11.7) every train split holds 2000 examples and
     the validation splits 494 / 500 / 298 / 192 (next_line / same_doc / cloze / unshuffle:
     all the held-out text gives; table in docs/downstream_mini.md); a larger held-out
     corpus fills the caps.

Every input is a few lines of text (at most 3 units of <= 100 characters plus a prefix) whose
tokenizer-free cost estimate (`input_cost`: words, lower-case letters / 4, other characters)
is at most MAX_INPUT_COST = 100, so inputs and targets stay <= 128 tokens with the 1000-piece
tokenizer of configs/t5.py:runlocal (the tests check every example).
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
UNSHUFFLE_SEPARATOR = " | "
BLANK = "___"
YES, NO = "yes", "no"

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
    corpus = sources.make_source("default", None)
    pretrain, heldout = sources.split_validation(corpus, HELDOUT_FRACTION, seed=HELDOUT_SEED)
    pretrain_docs = [pretrain[i] for i in range(len(pretrain))]
    seen = frozenset(u for doc in pretrain_docs for run in document_units(doc) for u in run)
    n = min(TRAIN_DOCUMENTS, len(pretrain_docs))
    train_side = tuple(pretrain_docs[i * len(pretrain_docs) // n] for i in range(n))
    return tuple(heldout[i] for i in range(len(heldout))), train_side, seen
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


def _other_unit(docs, d: int, rng: np.random.Generator, avoid: Sequence[str]) -> str | None:
  """A random unit of a random document other than docs[d] (None if there is none)."""
  for _ in range(100):
    e = int(rng.integers(len(docs)))
    if e == d:
      continue
    units = [u for run in docs[e] for u in run]
    unit = units[int(rng.integers(len(units)))]
    if unit not in avoid:
      return unit
  return None


def _balanced_pairs(positives, docs, rng) -> list[tuple[dict[str, Any], ...]]:
  """One "yes" example per (doc, a, b) and one "no" with the same a and a unit of another
  document; pairs whose negative cannot be drawn are left out."""
  out = []
  for d, a, b in positives:
    neg = _other_unit(docs, d, rng, avoid=(a, b))
    if neg is not None:
      out.append(({"a": a, "b": b, "label": YES}, {"a": a, "b": neg, "label": NO}))
  return out


def build_next_line(docs, rng) -> list[tuple[dict, ...]]:
  """Groups (yes, no) of mini_next_line: b follows a in a run, or b is from another doc."""
  positives = [(d, a, b) for d, runs in enumerate(docs) for run in runs
               for a, b in zip(run, run[1:]) if a != b]
  return _balanced_pairs(positives, docs, rng)


def build_same_doc(docs, rng) -> list[tuple[dict, ...]]:
  """Groups (yes, no) of mini_same_doc: for each unit a of a document with a unit b at least
  2 units away (not adjacent), one such b at random, and one b from another document."""
  positives = []
  for d, runs in enumerate(docs):
    units = [u for run in runs for u in run]
    for i, a in enumerate(units):
      far = [j for j in range(len(units)) if abs(i - j) >= 2 and units[j] != a]
      if far:
        positives.append((d, a, units[far[int(rng.integers(len(far)))]]))
  return _balanced_pairs(positives, docs, rng)


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


_INPUT_FIELDS = ("a", "b", "passage", "shuffled")  # the raw fields an example's inputs show


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
  """At most `limit` examples: whole groups (a yes/no pair stays together) chosen at random,
  then all examples shuffled; each gets its position as "idx".

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


HEADLINE = {"mini_next_line": "accuracy", "mini_same_doc": "accuracy",
            "mini_cloze": "exact_match", "mini_unshuffle": "exact_match"}


def mini_average(results: Mapping[str, Mapping[str, float]]) -> float:
  """The "mini" column: the mean over the 4 tasks of each one's headline metric.

  Headlines: mini_next_line accuracy, mini_same_doc accuracy, mini_cloze exact_match,
  mini_unshuffle exact_match (all in %, equal weights; chance levels 50, 50, ~11, 20).
  Other keys of `results` (e.g. T5 tasks) are ignored.

  Raises:
    ValueError: a suite task or its headline metric is missing from `results`.
  """
  missing = [f"{t}[{m!r}]" for t, m in HEADLINE.items() if m not in results.get(t, {})]
  if missing:
    raise ValueError(f"mini_average needs every mini task's headline metric; missing "
                     f"{missing}: evaluate all of {sorted(HEADLINE)}.")
  return float(np.mean([results[t][m] for t, m in HEADLINE.items()]))


# --------------------------------------------------------------------------------------
# Preprocessors and postprocessors (text formats with T5-style prefixes).


def _pair_format(prefix: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
  def preprocess(raw):
    return {"inputs": f"{prefix}: A: {raw['a']} B: {raw['b']}", "targets": raw["label"],
            "idx": raw["idx"]}
  return preprocess


def _cloze_format(raw):
  return {"inputs": f"cloze: {raw['passage']}", "targets": raw["answer"], "idx": raw["idx"]}


def _unshuffle_format(raw):
  return {"inputs": "unshuffle: " + UNSHUFFLE_SEPARATOR.join(raw["shuffled"]),
          "targets": UNSHUFFLE_SEPARATOR.join(raw["lines"]), "idx": raw["idx"]}


def _strip(text: str, example=None, is_target: bool = False) -> str:
  del example, is_target
  return _clean(text)


def _lines(text: str, example=None, is_target: bool = False) -> tuple[str, ...]:
  del example, is_target
  return tuple(_clean(p) for p in text.split(UNSHUFFLE_SEPARATOR.strip()))


def _yes_no(example=None) -> tuple[str, str]:
  del example
  return (YES, NO)


# --------------------------------------------------------------------------------------
# Chance levels (computed from a split's examples).


def _cloze_candidates(passage: str) -> list[str]:
  return [m.group() for m in _WORD.finditer(passage)]


def chance_level(name: str, split: str = "validation", data_dir: str | None = None
                 ) -> dict[str, float]:
  """Each metric's expected score of the task's chance baseline on a split (in %).

  mini_next_line / mini_same_doc: the majority class's accuracy (50: balanced) — a random
  yes/no guess also scores 50 in expectation. mini_cloze: guessing a word of 4+ letters of
  the passage uniformly at random (per example: occurrences of the answer / candidates).
  mini_unshuffle: answering one of the 5 orders of the shown lines that differ from the
  shown one, uniformly (exact match exactly 20; line accuracy averaged over those orders).
  """
  if name not in _BUILDERS:
    raise ValueError(f"unknown mini task {name!r}; expected one of {sorted(_BUILDERS)}.")
  raw = _raw_examples(name, split, data_dir)
  if name in ("mini_next_line", "mini_same_doc"):
    labels = [r["label"] for r in raw]
    return {"accuracy": 100.0 * max(labels.count(YES), labels.count(NO)) / len(labels)}
  if name == "mini_cloze":
    per = []
    for r in raw:
      cands = _cloze_candidates(r["passage"])
      per.append(cands.count(r["answer"]) / len(cands))
    return {"exact_match": 100.0 * float(np.mean(per))}
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
        preprocess=_pair_format("next line"), postprocess=_strip, metric_fns=(accuracy,),
        choices=_yes_no,
        description="classification: does line B directly follow line A (B from another "
                    f"document otherwise); balanced yes/no; accuracy, chance 50; {_CAPS}"),
    task_lib.Task(
        name="mini_same_doc", load=_loader("mini_same_doc"),
        preprocess=_pair_format("same document"), postprocess=_strip, metric_fns=(accuracy,),
        choices=_yes_no,
        description="pair classification: are lines A and B (not adjacent) from the same "
                    f"document; balanced yes/no; accuracy, chance 50; {_CAPS}"),
    task_lib.Task(
        name="mini_cloze", load=_loader("mini_cloze"), preprocess=_cloze_format,
        postprocess=_strip, metric_fns=(exact_match,),
        description="extraction: the word (4+ letters, also elsewhere in the passage) that "
                    "fills the blank of a 1-3 line passage; exact match, chance ~11 (a "
                    f"random passage word); {_CAPS}"),
    task_lib.Task(
        name="mini_unshuffle", load=_loader("mini_unshuffle"), preprocess=_unshuffle_format,
        postprocess=_lines, metric_fns=(exact_match, line_accuracy),
        description="generation: write 3 shuffled consecutive lines in their original order; "
                    f"exact match (chance 20) and line accuracy; {_CAPS}"),
)

for _task in TASKS:
  task_lib.register(_task)
