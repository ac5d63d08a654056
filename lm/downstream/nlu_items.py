r"""The neutral yardstick's item sets (issue #31): minimal pairs and probe items from held-out text.

What lives here: the item types (`Pair`, `ProbeItem`) and the deterministic, rule-based
builders that cut them out of held-out documents. What does not: scoring a model on them
(lm/downstream/nlu.py), the contrasts (lm/downstream/contrasts.py). Pure text, no JAX. The
narrative (each phenomenon, the rules, the counts, their noise): docs/yardstick.md.

    pairs, probes = item_sets()   # the embedded corpus's held-out split (source="comments")
    pairs["agreement"][0].good, pairs["agreement"][0].bad
    probes["word_content"][0].label, num_classes("word_content"), chance("word_content")
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lm.data import corpus
from lm.downstream import mini_text


@dataclasses.dataclass(frozen=True)
class Pair:
  """A minimal pair: `good` is a held-out sentence as written, `bad` differs in one place.

  good = prefix + good_span + suffix and bad = prefix + bad_span + suffix, so every native
  scorer can mask or condition on exactly the part the two sentences share.

  Attributes:
    phenomenon: which perturbation made `bad` (a key of the builders' output).
    document: index of the held-out document the sentence came from (the probes'
      cross-validation groups: no document is in two folds).
    prefix: the text before the difference ("" when the sentence starts with it).
    good_span: the text as written at the difference.
    bad_span: the perturbed text there (never equal to good_span).
    suffix: the text after the difference.
  """
  phenomenon: str
  document: int
  prefix: str
  good_span: str
  bad_span: str
  suffix: str

  @property
  def good(self) -> str:
    return self.prefix + self.good_span + self.suffix

  @property
  def bad(self) -> str:
    return self.prefix + self.bad_span + self.suffix


@dataclasses.dataclass(frozen=True)
class ProbeItem:
  """One sentence of a probing task: a linear probe on frozen representations predicts `label`.

  Attributes:
    task: the probing task (a perturbation class or a surface control).
    text: the sentence the model reads.
    label: the class, int in [0, num_classes).
    document: index of the held-out document (cross-validation group).
  """
  task: str
  text: str
  label: int
  document: int


# --------------------------------------------------------------------------------------
# Constants: which sentences, how many items.

PAIR_PHENOMENA = ("agreement", "demonstrative", "article", "bigram_shift", "word_swap")
PROBE_TASKS = PAIR_PHENOMENA + ("clause_swap", "sentence_length", "word_content")
MIN_WORDS, MAX_WORDS = 4, 40  # a sentence's words (space-separated tokens)
MIN_PLAIN_SHARE = 0.8  # of a sentence's tokens, plain words at least (leaves code out)
MAX_PAIRS = 1000  # per phenomenon
MAX_PROBE_ITEMS = 2000  # per probe task (an equal share per class)
MIN_CLAUSE_WORDS = 3  # clause_swap: words on each side of the comma
SENTENCE_LENGTH_BINS = ((4, 7), (8, 11), (12, 18), (19, 40))  # words, inclusive
WORD_CONTENT_SKIP = 5  # word_content: the most frequent content words are not targets...
WORD_CONTENT_WORDS = 5  # ...the next this many are (the classes)
WORD_SWAP_NEIGHBOURS = 5  # word_swap: a replacement is drawn from this many nearest in rank

# Closed-class words (lower case): never a noun after a demonstrative or article, never a
# word_swap or word_content word.
FUNCTION_WORDS = frozenset("""
a an the this that these those some any each every no all both either neither such other
another what which who whom whose where when why how whether if then than as so because
though although while until unless since before after once and or but nor yet not only
also just even very too here there now again always never often still
i me my mine you your yours he him his she her hers it its we us our ours they them their
theirs one ones
is are was were be been being am has have had having do does did done doing
can could may might must shall should will would
of in on at by for with from to into onto upon about above below over under between
through during without within along across against among around behind beyond near off
out up down per via like unlike except
""".split())
AGREEMENT = {"is": "are", "are": "is", "has": "have", "have": "has", "was": "were",
             "were": "was"}
DEMONSTRATIVE = {"this": "these", "these": "this", "that": "those", "those": "that"}
COORDINATORS = frozenset({"and", "but", "or", "so", "yet"})
# Before these the verb agrees with an antecedent the rule does not find (relative pronouns).
_RELATIVE = frozenset({"which", "that", "who", "whom", "whose", "what"})
# Subjects of either number ("all is well", "all are here"): no agreement flip after them.
_EITHER_NUMBER = frozenset({"all", "none", "some", "any", "most", "more", "half"})
# After these "have" is not finite: flipping it tests verb form, not agreement.
_NON_FINITE = frozenset({"to", "can", "could", "may", "might", "must", "shall", "should",
                         "will", "would", "do", "does", "did", "not", "never"})
# Before these was/were may be subjunctive ("if it were"), where both are grammatical.
_SUBJUNCTIVE = frozenset({"if", "though", "wish"})
# After a preposition "that" is a determiner ("in that case"); elsewhere mostly not.
_PREPOSITIONS = frozenset("""of in on at by for with from to into onto upon about over under
between through during without within against among like""".split())
# Nouns whose form does not tell their number ("these data", "this series").
_INVARIANT = frozenset({"data", "media", "criteria", "series", "species", "means", "news"})

_PARAGRAPH = re.compile(r"\n\s*\n")
_PLAIN = re.compile(r"[A-Za-z]+(?:['-][A-Za-z]+)*")
_LEAD, _TRAIL = "(\"'*`", ")\"'*`,.;:!?"


# --------------------------------------------------------------------------------------
# Documents -> sentences -> tokens.

ITEM_SOURCES = ("comments", "heldout")  # see `documents`


def default_source(data_dir: str | None) -> str:
  """A data_dir's "heldout", else "comments" (about 30x the embedded held-out sentences)."""
  return "heldout" if data_dir else "comments"


def documents(data_dir: str | None = None, source: str = "heldout") -> list[str]:
  """The documents items are cut from: "heldout", data_dir's held-out documents (None: the
  embedded corpus's, which pre-training never reads); "comments", the stdlib's, one per file."""
  if source not in ITEM_SOURCES:
    raise ValueError(f"unknown item source {source!r}; expected one of {list(ITEM_SOURCES)}")
  if source == "comments":
    return corpus.comment_documents()
  return mini_text.heldout_documents(data_dir)


@functools.lru_cache(maxsize=2)
def pretraining_text(data_dir: str | None = None) -> str:
  """The text of the documents pre-training reads, whitespace-collapsed, one per line.

  data_dir None: the embedded corpus's pre-training split (`mini_text.pretraining_documents`:
  the pipeline's split with the configs' fraction and seed); its standard library docstrings
  repeat, and a held-out sentence also found here is left out of the item sets
  (`sentences(exclude_text=...)`), as the mini suite leaves such lines out. A path: ""
  (the yardstick cannot know what else a model read: point data_dir at held-out text).
  """
  return "\n".join(mini_text.clean(d) for d in mini_text.pretraining_documents(data_dir))


@dataclasses.dataclass(frozen=True)
class _Token:
  """A space-separated token: lead + core + trail, core starting at `start` in the sentence."""
  start: int
  lead: str
  core: str
  trail: str

  @property
  def end(self) -> int:
    return self.start + len(self.core)

  @property
  def plain(self) -> bool:
    return _PLAIN.fullmatch(self.core) is not None


def _tokens(sentence: str) -> list[_Token]:
  out, pos = [], 0
  for raw in sentence.split(" "):
    core = raw.lstrip(_LEAD)
    lead = raw[:len(raw) - len(core)]
    stripped = core.rstrip(_TRAIL)
    out.append(_Token(pos + len(lead), lead, stripped, core[len(stripped):]))
    pos += len(raw) + 1
  return out


def _is_prose(sentence: str) -> bool:
  tokens = _tokens(sentence)
  upper = sum(c.isupper() for c in sentence)
  return (MIN_WORDS <= len(tokens) <= MAX_WORDS and sentence[0].isupper()
          and sentence[-1] in ".!?" and ">>>" not in sentence and "|" not in sentence
          and mini_text.BLANK not in sentence and 2 * upper <= len(sentence) - upper
          and sum(t.plain for t in tokens) >= MIN_PLAIN_SHARE * len(tokens))


def sentences(documents: Sequence[str], exclude_text: str = "") -> list[tuple[int, str]]:
  """The documents' prose sentences: [(document index, sentence)] in document order.

  A document is cut into paragraphs at blank lines, each paragraph's whitespace collapsed
  and cut into sentences after . ! or ? before a capital or quote (the mini suite's rule).
  Kept: sentences of MIN_WORDS..MAX_WORDS words that start with a capital, end with . ! or ?,
  hold no doctest (>>>), and are MIN_PLAIN_SHARE plain words at least (not code); each
  sentence once (its first occurrence), none that occurs in `exclude_text` (pretraining_text).
  """
  out, kept = [], set()
  for d, document in enumerate(documents):
    for paragraph in _PARAGRAPH.split(document):
      for s in mini_text.SENTENCE_END.split(mini_text.clean(paragraph)):
        if s and s not in kept and _is_prose(s) and not (exclude_text and s in exclude_text):
          kept.add(s)
          out.append((d, s))
  return out


# --------------------------------------------------------------------------------------
# Perturbations: a sentence -> its candidate (start, end, replacement) edits.

def _recase(word: str, like: str) -> str:
  return word.capitalize() if like[:1].isupper() else word


def _content_word(token: _Token) -> bool:
  w = token.core
  return len(w) >= 3 and w.isalpha() and w.islower() and w not in FUNCTION_WORDS


def _suffix_class(word: str) -> str:
  """-ing, -ed, -ly, plural-looking -s or none: a word_swap replacement has the same."""
  for suffix in ("ing", "ed", "ly"):
    if word.endswith(suffix):
      return suffix
  return "s" if _plural_looking(word) else ""


@dataclasses.dataclass(frozen=True)
class _Vocabulary:
  """Content words ranked by their count in the documents (most frequent first, ties by
  spelling): `rank[word]`, `count[word]`, `by_class[suffix class]` (words in rank order),
  `class_index[word]` (its place in its class's tuple)."""
  rank: Mapping[str, int]
  count: Mapping[str, int]
  by_class: Mapping[str, tuple[str, ...]]
  class_index: Mapping[str, int]


def _vocabulary(documents: Sequence[str]) -> _Vocabulary:
  count: dict[str, int] = {}
  for document in documents:
    for token in _tokens(mini_text.clean(document)):
      if _content_word(token):
        count[token.core] = count.get(token.core, 0) + 1
  ranked = sorted(count, key=lambda w: (-count[w], w))
  by_class: dict[str, list[str]] = {}
  for w in ranked:
    by_class.setdefault(_suffix_class(w), []).append(w)
  return _Vocabulary({w: r for r, w in enumerate(ranked)}, count,
                     {k: tuple(v) for k, v in by_class.items()},
                     {w: i for v in by_class.values() for i, w in enumerate(v)})


def _swap_candidates(word: str, avoid: Sequence[str], vocab: _Vocabulary) -> list[str]:
  """Up to WORD_SWAP_NEIGHBOURS words of `word`'s suffix class nearest to it in frequency
  rank (ties: the more frequent), each with a count within a factor 2 of its count, none in
  `avoid`.

  The class's words are in rank order, so the nearest are found by walking out from
  `word`'s place, both ways at once (counts only fall along the way, so a side stops at
  the first word outside the factor 2): a few steps instead of a scan of the class.
  """
  words, i = vocab.by_class[_suffix_class(word)], vocab.class_index[word]
  rank, count = vocab.rank[word], vocab.count[word]

  def near(j: int) -> bool:
    return 0 <= j < len(words) and count <= 2 * vocab.count[words[j]] <= 4 * count

  out: list[str] = []
  left, right = i - 1, i + 1
  while len(out) < WORD_SWAP_NEIGHBOURS and (near(left) or near(right)):
    # Nearer in rank first; on a tie the left (more frequent) word, as the sort key was.
    if near(left) and (not near(right) or
                       rank - vocab.rank[words[left]] <= vocab.rank[words[right]] - rank):
      w, left = words[left], left - 1
    else:
      w, right = words[right], right + 1
    if w not in avoid:
      out.append(w)
  return out


_Edit = tuple[int, int, tuple[str, ...]]  # (start, end, replacements): sentence[start:end]


def _agreement_edits(tokens: list[_Token], vocab: _Vocabulary) -> list[_Edit]:
  """is/are, has/have, was/were flipped, where the flip breaks agreement: not after a
  relative pronoun or a subject of either number (all, none, ...), "have" not after to/a modal/do/not, was/were not after if/though/wish."""
  del vocab
  out = []
  for i, t in enumerate(tokens):
    word = t.core.lower()
    if word not in AGREEMENT or t.core not in (word, word.capitalize()):
      continue
    prev = tokens[i - 1].core.lower() if i else ""
    if prev in _RELATIVE or prev in _EITHER_NUMBER:
      continue
    if word == "have" and (prev in _NON_FINITE or prev.endswith("n't")):
      continue
    if word in ("was", "were") and any(u.core.lower() in _SUBJUNCTIVE for u in tokens[:i]):
      continue
    out.append((t.start, t.end, (_recase(AGREEMENT[word], t.core),)))
  return out


def _next_word(tokens: list[_Token], i: int) -> str | None:
  """The plain lower-case word right after token i (no punctuation between), else None."""
  if i + 1 >= len(tokens) or tokens[i].trail or tokens[i + 1].lead:
    return None
  word = tokens[i + 1].core
  return word if tokens[i + 1].plain and word.islower() else None


def _noun_like(word: str) -> bool:
  return (len(word) >= 3 and word not in FUNCTION_WORDS and word not in _INVARIANT
          and not word.endswith(("ly", "ed", "'s")))


def _plural_looking(word: str) -> bool:
  return word.endswith("s") and not word.endswith(("ss", "us", "is", "'s"))


def _demonstrative_edits(tokens: list[_Token], vocab: _Vocabulary) -> list[_Edit]:
  """this/these, that/those flipped before a noun-like word whose -s agrees with the written
  demonstrative (this/that: no plural -s; these/those: -s); "that" only first or after a
  preposition (elsewhere it is mostly a conjunction or a relative pronoun)."""
  del vocab
  out = []
  for i, t in enumerate(tokens):
    word = t.core.lower()
    if word not in DEMONSTRATIVE or t.core not in (word, word.capitalize()):
      continue
    noun = _next_word(tokens, i)
    if noun is None or not _noun_like(noun):
      continue
    if _plural_looking(noun) != (word in ("these", "those")):
      continue
    if word == "that" and i and tokens[i - 1].core.lower() not in _PREPOSITIONS:
      continue
    out.append((t.start, t.end, (_recase(DEMONSTRATIVE[word], t.core),)))
  return out


def _article_edits(tokens: list[_Token], vocab: _Vocabulary) -> list[_Edit]:
  """a/an flipped where the written article follows the spelling rule (an before a vowel
  letter), so exceptions ("a user", "an hour") are never flipped; not before acronyms,
  single letters or closed-class words (there the article is a variable's name)."""
  del vocab
  out = []
  for i, t in enumerate(tokens):
    if t.core not in ("a", "an", "A", "An") or t.trail or i + 1 >= len(tokens):
      continue
    nxt = tokens[i + 1]
    if (nxt.lead or not nxt.plain or len(nxt.core) < 2 or nxt.core.isupper()
        or nxt.core.lower() in FUNCTION_WORDS):
      continue
    expected = "an" if nxt.core[0].lower() in "aeiou" else "a"
    if t.core.lower() == expected:
      out.append((t.start, t.end, (_recase("a" if expected == "an" else "an", t.core),)))
  return out


def _bigram_edits(tokens: list[_Token], vocab: _Vocabulary) -> list[_Edit]:
  """Two adjacent different lower-case plain words swapped (punctuation stays in place)."""
  del vocab
  return [(a.start, b.end, (f"{b.core} {a.core}",)) for a, b in zip(tokens, tokens[1:])
          if not (a.trail or b.lead) and a.plain and b.plain and a.core.islower()
          and b.core.islower() and a.core != b.core]


def _word_swap_edits(tokens: list[_Token], vocab: _Vocabulary) -> list[_Edit]:
  """A content word replaced by one of the words nearest it in frequency rank
  (`_swap_candidates`); words without a candidate give no edit."""
  present = [t.core.lower() for t in tokens]
  out = []
  for t in tokens:
    if _content_word(t) and t.core in vocab.rank:
      candidates = _swap_candidates(t.core, present, vocab)
      if candidates:
        out.append((t.start, t.end, tuple(candidates)))
  return out


_EDITS = {"agreement": _agreement_edits, "demonstrative": _demonstrative_edits,
          "article": _article_edits, "bigram_shift": _bigram_edits,
          "word_swap": _word_swap_edits}


def _pair_of(phenomenon: str, d: int, sentence: str, vocab: _Vocabulary,
             rng: np.random.Generator) -> Pair | None:
  """The sentence's pair of `phenomenon`: one of its edits drawn at random, and one of that
  edit's replacements; None when the sentence has none."""
  edits = [(start, end, options) for start, end, options in
           _EDITS[phenomenon](_tokens(sentence), vocab)
           if all(o != sentence[start:end] for o in options)]  # never bad == good
  if not edits:
    return None
  start, end, options = edits[int(rng.integers(len(edits)))]
  bad = options[int(rng.integers(len(options)))]
  return Pair(phenomenon, d, sentence[:start], sentence[start:end], bad, sentence[end:])


def _balanced_marks(text: str) -> bool:
  """Brackets closed and quotes paired within the text (a part can move as a whole)."""
  return (all(text.count(a) == text.count(b) for a, b in ("()", "[]", "{}"))
          and text.count('"') % 2 == 0 and text.count("`") % 2 == 0)


def clause_swap(sentence: str) -> str | None:
  """The sentence with its two comma-separated parts swapped, or None.

  Only a sentence with exactly one comma, MIN_CLAUSE_WORDS+ words on each side, brackets and
  quotes closed on each side, the second not opened by a relative pronoun (", which"):
  "A, B." -> "B, a." and "A, and B." -> "B, and a." (and/but/or/so/yet stay between); the
  capital moves with the first word (a first word in capitals, or "I", keeps its case).
  """
  body, end = sentence[:-1], sentence[-1]
  if body.count(",") != 1 or ", " not in body:
    return None
  first, second = body.split(", ")
  conjunction = ""
  if second.split(" ")[0] in COORDINATORS:
    conjunction, second = second.split(" ", 1)[0] + " ", second.split(" ", 1)[1]
  if (min(len(first.split()), len(second.split())) < MIN_CLAUSE_WORDS
      or second.split(" ")[0].lower() in _RELATIVE
      or not (_balanced_marks(first) and _balanced_marks(second))):
    return None
  head = first.split(" ")[0]
  if head[:1].isupper() and head[1:] == head[1:].lower() and head != "I":
    first = first[0].lower() + first[1:]
  swapped = f"{second[0].upper()}{second[1:]}, {conjunction}{first}{end}"
  return swapped if swapped != sentence else None


# --------------------------------------------------------------------------------------
# The item sets.


def _rng(seed: int, name: str, stream: int) -> np.random.Generator:
  """A generator for one (seed, task or phenomenon, use); the name's sha256, not hash()."""
  word = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "big")
  return np.random.default_rng([seed, word, stream])


def _subset(n: int, limit: int, rng: np.random.Generator) -> list[int]:
  """Indices of at most `limit` of n items, drawn at random, in their original order."""
  if n <= limit:
    return list(range(n))
  return sorted(int(i) for i in rng.choice(n, limit, replace=False))


def _pairs(sents: Sequence[tuple[int, str]], vocab: _Vocabulary, seed: int
           ) -> dict[str, list[Pair]]:
  """{phenomenon: every sentence's pair of it (uncapped), in sentence order}."""
  out = {}
  for phenomenon in PAIR_PHENOMENA:
    rng = _rng(seed, phenomenon, 0)
    out[phenomenon] = [p for d, s in sents
                       if (p := _pair_of(phenomenon, d, s, vocab, rng)) is not None]
  return out


def minimal_pairs(documents: Sequence[str], seed: int = 0, exclude_text: str = ""
                  ) -> dict[str, list[Pair]]:
  """{phenomenon: pairs} for every PAIR_PHENOMENA, each sentence at most once per
  phenomenon, at most MAX_PAIRS each (drawn at random), in sentence order.

  Args:
    documents: the held-out documents (`documents`), in a fixed order.
    seed: draws which edit of a sentence is made and which pairs a cap keeps.
    exclude_text: sentences found in it are left out (`pretraining_text`).
  """
  return _capped(_pairs(sentences(documents, exclude_text), _vocabulary(documents), seed), seed)


def _capped(pairs: Mapping[str, list[Pair]], seed: int) -> dict[str, list[Pair]]:
  return {ph: [ps[i] for i in _subset(len(ps), MAX_PAIRS, _rng(seed, ph, 1))]
          for ph, ps in pairs.items()}


def _binary(task: str, rows: Sequence[tuple[int, str, str]], seed: int) -> list[ProbeItem]:
  """Label 1 (the perturbed text) for a random half of the (document, as written,
  perturbed) rows, 0 (as written) for as many others; each row once, at most
  MAX_PROBE_ITEMS in all, in row order."""
  per = min(len(rows) // 2, MAX_PROBE_ITEMS // 2)
  order = _rng(seed, task, 2).permutation(len(rows))
  label = {int(i): 1 for i in order[:per]} | {int(i): 0 for i in order[per:2 * per]}
  return [ProbeItem(task, rows[i][1 + label[i]], label[i], rows[i][0])
          for i in range(len(rows)) if i in label]


def _balanced(task: str, rows: Sequence[tuple[int, str, int]], seed: int) -> list[ProbeItem]:
  """As many (document, text, label) rows of each of the task's classes as the rarest
  class has (at most MAX_PROBE_ITEMS in all), drawn at random, in row order; [] when a
  class has none."""
  k = num_classes(task)
  by_class = [[i for i, r in enumerate(rows) if r[2] == c] for c in range(k)]
  per = min(min(len(c) for c in by_class), MAX_PROBE_ITEMS // k)
  rng = _rng(seed, task, 2)
  keep = sorted(c[j] for c in by_class for j in _subset(len(c), per, rng))
  return [ProbeItem(task, rows[i][1], rows[i][2], rows[i][0]) for i in keep]


def _length_bin(sentence: str) -> int | None:
  n = len(sentence.split(" "))
  return next((b for b, (lo, hi) in enumerate(SENTENCE_LENGTH_BINS) if lo <= n <= hi), None)


def word_content_words(sents: Sequence[tuple[int, str]]) -> tuple[str, ...]:
  """word_content's classes: content words of 4+ letters ranked by how many of the
  sentences hold them (ties by spelling), the WORD_CONTENT_WORDS after the
  WORD_CONTENT_SKIP most frequent (mid-frequency, as SentEval's WC); fewer if too few."""
  held: dict[str, int] = {}
  for _, s in sents:
    for w in dict.fromkeys(t.core for t in _tokens(s) if _content_word(t) and len(t.core) >= 4):
      held[w] = held.get(w, 0) + 1
  ranked = sorted(held, key=lambda w: (-held[w], w))
  return tuple(ranked[WORD_CONTENT_SKIP:WORD_CONTENT_SKIP + WORD_CONTENT_WORDS])


def probe_sets(documents: Sequence[str], seed: int = 0, exclude_text: str = ""
               ) -> dict[str, list[ProbeItem]]:
  """{task: items} for every PROBE_TASKS, in sentence order, classes balanced.

  A perturbation class (PAIR_PHENOMENA, clause_swap): every sentence the perturbation
  applies to, once, as written (label 0) or perturbed (1, the same edit as its minimal
  pair), half each. sentence_length: label = the SENTENCE_LENGTH_BINS bin of its words.
  word_content: sentences holding exactly one of `word_content_words`, label = which.
  A task whose rarest class has no sentence gets []. Args as `minimal_pairs`.
  """
  sents = sentences(documents, exclude_text)
  return _probe_sets(sents, _pairs(sents, _vocabulary(documents), seed), seed)


def _probe_sets(sents, pairs: Mapping[str, list[Pair]], seed: int) -> dict[str, list[ProbeItem]]:
  out = {ph: _binary(ph, [(p.document, p.good, p.bad) for p in pairs[ph]], seed)
         for ph in PAIR_PHENOMENA}
  out["clause_swap"] = _binary("clause_swap", [(d, s, w) for d, s in sents
                                               if (w := clause_swap(s)) is not None], seed)
  out["sentence_length"] = _balanced("sentence_length", [
      (d, s, b) for d, s in sents if (b := _length_bin(s)) is not None], seed)
  words = word_content_words(sents)
  rows = [(d, s, hit[0]) for d, s in sents if len(hit := [
      k for k, w in enumerate(words) if w in {t.core for t in _tokens(s)}]) == 1]
  out["word_content"] = _balanced("word_content", rows, seed) if len(words) == (
      WORD_CONTENT_WORDS) else []
  return out


def item_sets(data_dir: str | None = None, seed: int = 0, source: str = "heldout"
              ) -> tuple[dict[str, list[Pair]], dict[str, list[ProbeItem]]]:
  """(minimal_pairs, probe_sets) of `source`'s documents (`documents`), without the
  sentences pre-training read (`pretraining_text` of data_dir; the embedded corpus's for
  the comments): what the instruments score."""
  docs, seen = documents(data_dir, source), pretraining_text(data_dir)
  sents = sentences(docs, seen)  # cut, and every sentence's pairs made, once for both
  pairs = _pairs(sents, _vocabulary(docs), seed)
  return _capped(pairs, seed), _probe_sets(sents, pairs, seed)


def num_classes(task: str) -> int:
  """The number of classes of a probe task."""
  if task not in PROBE_TASKS:
    raise ValueError(f"unknown probe task {task!r}; expected one of {list(PROBE_TASKS)}.")
  return {"sentence_length": len(SENTENCE_LENGTH_BINS),
          "word_content": WORD_CONTENT_WORDS}.get(task, 2)


def chance(task: str) -> float:
  """A probe task's chance accuracy in % (its classes are balanced: 100 / classes)."""
  return 100.0 / num_classes(task)


def _canonical(obj: Any) -> Any:
  if isinstance(obj, (Pair, ProbeItem)):
    return {"type": type(obj).__name__, **dataclasses.asdict(obj)}
  if isinstance(obj, Mapping):
    return {str(k): _canonical(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [_canonical(v) for v in obj]
  return obj


def digest(items: Any) -> str:
  """sha256 (hex) of a canonical JSON of items: a Pair or ProbeItem, or lists and dicts of
  them (keys sorted, lists in order), for tests and reports."""
  text = json.dumps(_canonical(items), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
  return hashlib.sha256(text.encode("utf-8")).hexdigest()
