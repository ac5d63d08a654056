"""The mini suite's task builders: runs of units (lm/downstream/mini_text.py) -> raw examples.

One `build_<task>(docs, rng)` per task, deterministic given the rng, and the cap on an
example's shown text (`input_cost`, `_cap`). Not here: the tasks' formats, metrics and
registry (lm/downstream/mini.py). How each task is built: docs/downstream_mini.md.
"""
from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lm.downstream import mini_text

MAX_INPUT_COST = 100  # input_cost of an example's shown lines (~<= 110 tokens: budget 128)
WORD = re.compile(r"(?<![\w])[A-Za-z]{4,}(?![\w])")
# Frequent words a model could guess without reading the passage; never cloze answers.
STOPWORDS = frozenset(
    "that this with from have will which when then than there their they them these those "
    "been were what where while also only into such some each more most other does done "
    "must should would could used uses using same like just many much very over under "
    "Return Returns None True False self".split())
# The 5 orders of 3 lines that differ from the original one.
_NON_IDENTITY = tuple(p for p in itertools.permutations(range(3)) if p != (0, 1, 2))


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
        words = [m.group() for m in WORD.finditer(passage)]
        counts: dict[str, int] = {}
        for w in words:
          counts[w] = counts.get(w, 0) + 1
        for word, n in counts.items():  # dict order: first occurrence
          if n < 2 or word in STOPWORDS or word.lower() in STOPWORDS:
            continue
          for s, e in (m.span() for m in _word_pattern(word).finditer(passage)):
            out.append(({"passage": passage[:s] + mini_text.BLANK + passage[e:], "answer": word},))
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
        words = [m.group() for m in WORD.finditer(unit)]
        once = [m for m in WORD.finditer(unit) if words.count(m.group()) == 1
                and m.group() not in STOPWORDS and m.group().lower() not in STOPWORDS]
        if once:
          m = once[int(rng.integers(len(once)))]
          positives.append((d, unit[:m.start()] + mini_text.BLANK + unit[m.end():], m.group()))
  pool = [(d, w) for d, _, w in positives]
  out = []
  for d, passage, word in positives:
    options, shown = [word], [m.group() for m in WORD.finditer(passage)]
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
