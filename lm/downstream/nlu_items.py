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
from lm.downstream import mini_text, nlu_rules


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
# The items' version: bump it when a rule, word list, constant or draw changes the items (the
# golden digests in tests/downstream/test_nlu_items.py show when); launch.sweep's nlu stages
# run again when it changes. 2: the word-form phenomena balanced between their forms.
ITEMS_VERSION = 2
MAX_PAIRS = 1000  # per phenomenon
MAX_PROBE_ITEMS = 2000  # per probe task (an equal share per class)
SENTENCE_LENGTH_BINS = ((4, 7), (8, 11), (12, 18), (19, 40))  # words, inclusive
WORD_CONTENT_SKIP = 5  # word_content: the most frequent content words are not targets...
WORD_CONTENT_WORDS = 5  # ...the next this many are (the classes)

_PARAGRAPH = re.compile(r"\n\s*\n")


# --------------------------------------------------------------------------------------
# Documents -> sentences.

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


def _is_prose(sentence: str) -> bool:
  tokens = nlu_rules.split_tokens(sentence)
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



def _pair_of(phenomenon: str, d: int, sentence: str, vocab: nlu_rules.Vocabulary,
             rng: np.random.Generator) -> Pair | None:
  """The sentence's pair of `phenomenon`: one of its edits drawn at random, and one of that
  edit's replacements; None when the sentence has none."""
  edits = [(start, end, options) for start, end, options in
           nlu_rules.EDITS[phenomenon](nlu_rules.split_tokens(sentence), vocab)
           if all(o != sentence[start:end] for o in options)]  # never bad == good
  if not edits:
    return None
  start, end, options = edits[int(rng.integers(len(edits)))]
  bad = options[int(rng.integers(len(options)))]
  return Pair(phenomenon, d, sentence[:start], sentence[start:end], bad, sentence[end:])


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


def form(pair: Pair) -> str | None:
  """The good word's form ("is", "an", "these", ...) of a pair of a `nlu_rules.FORM_PARTNERS`
  phenomenon (its bad word is the form's partner); None for the other phenomena."""
  return pair.good_span.lower() if pair.phenomenon in nlu_rules.FORM_PARTNERS else None


def _form_balanced(pairs: Sequence[Pair], limit: int, rng: np.random.Generator) -> list[Pair]:
  """At most `limit` of the pairs (of one phenomenon), drawn at random, in their order.

  A `nlu_rules.FORM_PARTNERS` phenomenon's are balanced: of each word pair ({is, are},
  {a, an}, ...) as many pairs whose good word is one form as the other, the rarer form's
  count (scaled down alike when that is over `limit` in all). A model that prefers one form
  whatever the context then scores 50 % on them; unbalanced, the frequent form's share.
  """
  if not pairs or pairs[0].phenomenon not in nlu_rules.FORM_PARTNERS:
    return [pairs[i] for i in _subset(len(pairs), limit, rng)]
  partner = nlu_rules.FORM_PARTNERS[pairs[0].phenomenon]
  by_form: dict[str, list[int]] = {f: [] for f in partner}
  for i, p in enumerate(pairs):
    by_form[form(p)].append(i)
  per = {f: min(len(by_form[f]), len(by_form[partner[f]])) for f in partner}
  if sum(per.values()) > limit:
    total = sum(per.values())  # each word pair counted twice, as limit is
    per = {f: n * (limit // 2) // (total // 2) for f, n in per.items()}
  keep = [by_form[f][j] for f in sorted(partner) for j in _subset(len(by_form[f]), per[f], rng)]
  return [pairs[i] for i in sorted(keep)]


def every_pair(phenomenon: str, sents: Sequence[tuple[int, str]],
               vocab: nlu_rules.Vocabulary, seed: int = 0) -> list[Pair]:
  """Every (document, sentence)'s pair of `phenomenon` (`_pair_of`), in sentence order: what
  the rules make, before any balance or cap."""
  rng = _rng(seed, phenomenon, 0)
  return [p for d, s in sents if (p := _pair_of(phenomenon, d, s, vocab, rng)) is not None]


def _pairs(sents: Sequence[tuple[int, str]], vocab: nlu_rules.Vocabulary, seed: int
           ) -> dict[str, list[Pair]]:
  """{phenomenon: every sentence's pair of it (uncapped; balanced between forms,
  `_form_balanced`), in sentence order}."""
  out = {}
  for phenomenon in PAIR_PHENOMENA:
    made = every_pair(phenomenon, sents, vocab, seed)
    out[phenomenon] = _form_balanced(made, len(made), _rng(seed, phenomenon, 3))
  return out


def minimal_pairs(documents: Sequence[str], seed: int = 0, exclude_text: str = ""
                  ) -> dict[str, list[Pair]]:
  """{phenomenon: pairs} for every PAIR_PHENOMENA, each sentence at most once per
  phenomenon, at most MAX_PAIRS each (drawn at random), in sentence order; agreement,
  demonstrative and article pairs balanced between the two forms of each word
  (`_form_balanced`).

  Args:
    documents: the held-out documents (`documents`), in a fixed order.
    seed: draws which edit of a sentence is made and which pairs a cap keeps.
    exclude_text: sentences found in it are left out (`pretraining_text`).
  """
  pairs = _pairs(sentences(documents, exclude_text), nlu_rules.vocabulary(documents), seed)
  return _capped(pairs, seed)


def _capped(pairs: Mapping[str, list[Pair]], seed: int) -> dict[str, list[Pair]]:
  return {ph: _form_balanced(ps, MAX_PAIRS, _rng(seed, ph, 1)) for ph, ps in pairs.items()}


def _binary(task: str, rows: Sequence[tuple[int, str, str]], seed: int) -> list[ProbeItem]:
  """Label 1 (the perturbed text) for a random half of the (document, as written,
  perturbed) rows, 0 (as written) for as many others; each row once, at most
  MAX_PROBE_ITEMS in all, in row order."""
  per = min(len(rows) // 2, MAX_PROBE_ITEMS // 2)
  order = _rng(seed, task, 2).permutation(len(rows))
  label = {int(i): 1 for i in order[:per]} | {int(i): 0 for i in order[per:2 * per]}
  return [ProbeItem(task, rows[i][1 + label[i]], label[i], rows[i][0])
          for i in range(len(rows)) if i in label]


def _form_binary(task: str, pairs: Sequence[Pair], seed: int) -> list[ProbeItem]:
  """`_binary` for a `nlu_rules.FORM_PARTNERS` phenomenon's form-balanced pairs (n of each
  form of a word pair): a random n // 2 of the first form's sentences perturbed (label 1)
  and as many of its partner's as written (0), the others the other way round. Each word
  form is then in as many label-0 as label-1 texts, so the word alone does not tell the
  label, and the labels are half each; every pair once, in pair order."""
  rng, partner = _rng(seed, task, 2), nlu_rules.FORM_PARTNERS[task]
  by_form: dict[str, list[int]] = {}
  for i, p in enumerate(pairs):
    by_form.setdefault(form(p), []).append(i)
  label: dict[int, int] = {}
  for first in sorted(f for f in partner if f < partner[f]):
    n = len(by_form.get(first, ()))
    for f, flipped in ((first, 1), (partner[first], 0)):
      rows = by_form.get(f, [])
      label |= {rows[int(j)]: flipped if k < n // 2 else 1 - flipped
                for k, j in enumerate(rng.permutation(len(rows)))}
  return [ProbeItem(task, (p.good, p.bad)[label[i]], label[i], p.document)
          for i, p in enumerate(pairs)]


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
    words = (t.core for t in nlu_rules.split_tokens(s)
             if nlu_rules.content_word(t) and len(t.core) >= 4)
    for w in dict.fromkeys(words):
      held[w] = held.get(w, 0) + 1
  ranked = sorted(held, key=lambda w: (-held[w], w))
  return tuple(ranked[WORD_CONTENT_SKIP:WORD_CONTENT_SKIP + WORD_CONTENT_WORDS])


def probe_sets(documents: Sequence[str], seed: int = 0, exclude_text: str = ""
               ) -> dict[str, list[ProbeItem]]:
  """{task: items} for every PROBE_TASKS, in sentence order, classes balanced.

  A perturbation class (PAIR_PHENOMENA, clause_swap): every sentence the perturbation
  applies to, once, as written (label 0) or perturbed (1, the same edit as its minimal
  pair), half each; for a `nlu_rules.FORM_PARTNERS` phenomenon the form-balanced pairs'
  sentences (`_form_balanced`), each word form as often perturbed as not (`_form_binary`).
  sentence_length: label = the SENTENCE_LENGTH_BINS bin of its words.
  word_content: sentences holding exactly one of `word_content_words`, label = which.
  A task whose rarest class has no sentence gets []. Args as `minimal_pairs`.
  """
  sents = sentences(documents, exclude_text)
  return _probe_sets(sents, _pairs(sents, nlu_rules.vocabulary(documents), seed), seed)


def _probe_sets(sents, pairs: Mapping[str, list[Pair]], seed: int) -> dict[str, list[ProbeItem]]:
  out = {}
  for ph in PAIR_PHENOMENA:
    if ph in nlu_rules.FORM_PARTNERS:  # at most MAX_PROBE_ITEMS pairs, still balanced
      out[ph] = _form_binary(ph, _form_balanced(pairs[ph], MAX_PROBE_ITEMS, _rng(seed, ph, 4)),
                             seed)
    else:
      out[ph] = _binary(ph, [(p.document, p.good, p.bad) for p in pairs[ph]], seed)
  swaps = [(d, s, w) for d, s in sents if (w := nlu_rules.clause_swap(s)) is not None]
  out["clause_swap"] = _binary("clause_swap", swaps, seed)
  out["sentence_length"] = _balanced("sentence_length", [
      (d, s, b) for d, s in sents if (b := _length_bin(s)) is not None], seed)
  words = word_content_words(sents)
  rows = [(d, s, hit[0]) for d, s in sents if len(hit := [
      k for k, w in enumerate(words) if w in {t.core for t in nlu_rules.split_tokens(s)}]) == 1]
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
  pairs = _pairs(sents, nlu_rules.vocabulary(docs), seed)
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
