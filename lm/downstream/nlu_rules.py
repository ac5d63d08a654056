r"""The yardstick's perturbation rules (issue #31): a sentence's tokens, and the edits that
make each minimal pair's bad sentence.

What lives here: the closed-class word lists, the token split, the content-word vocabulary
ranked by frequency, one edit rule per phenomenon (`EDITS`) and `clause_swap`. What does
not: which sentences, how many items, the balance between forms and the draws
(lm/downstream/nlu_items.py). Pure text. The narrative: docs/yardstick.md.

    tokens = split_tokens("This is a test.")
    EDITS["agreement"](tokens, vocabulary(documents))  # [(start, end, ("are",))]
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping, Sequence

from lm.downstream import mini_text

MIN_CLAUSE_WORDS = 3  # clause_swap: words on each side of the comma
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
ARTICLE = {"a": "an", "an": "a"}
# The phenomena whose edit swaps a closed-class word for its partner ({form: partner}):
# their items are balanced between the two forms of each word pair (nlu_items).
FORM_PARTNERS = {"agreement": AGREEMENT, "demonstrative": DEMONSTRATIVE, "article": ARTICLE}
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

_PLAIN = re.compile(r"[A-Za-z]+(?:['-][A-Za-z]+)*")
_LEAD, _TRAIL = "(\"'*`", ")\"'*`,.;:!?"


@dataclasses.dataclass(frozen=True)
class Token:
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


def split_tokens(sentence: str) -> list[Token]:
  out, pos = [], 0
  for raw in sentence.split(" "):
    core = raw.lstrip(_LEAD)
    lead = raw[:len(raw) - len(core)]
    stripped = core.rstrip(_TRAIL)
    out.append(Token(pos + len(lead), lead, stripped, core[len(stripped):]))
    pos += len(raw) + 1
  return out


# --------------------------------------------------------------------------------------
# Perturbations: a sentence -> its candidate (start, end, replacement) edits.

def _recase(word: str, like: str) -> str:
  return word.capitalize() if like[:1].isupper() else word


def content_word(token: Token) -> bool:
  w = token.core
  return len(w) >= 3 and w.isalpha() and w.islower() and w not in FUNCTION_WORDS


def _suffix_class(word: str) -> str:
  """-ing, -ed, -ly, plural-looking -s or none: a word_swap replacement has the same."""
  for suffix in ("ing", "ed", "ly"):
    if word.endswith(suffix):
      return suffix
  return "s" if _plural_looking(word) else ""


@dataclasses.dataclass(frozen=True)
class Vocabulary:
  """Content words ranked by their count in the documents (most frequent first, ties by
  spelling): `rank[word]`, `count[word]`, `by_class[suffix class]` (words in rank order),
  `class_index[word]` (its place in its class's tuple)."""
  rank: Mapping[str, int]
  count: Mapping[str, int]
  by_class: Mapping[str, tuple[str, ...]]
  class_index: Mapping[str, int]


def vocabulary(documents: Sequence[str]) -> Vocabulary:
  count: dict[str, int] = {}
  for document in documents:
    for token in split_tokens(mini_text.clean(document)):
      if content_word(token):
        count[token.core] = count.get(token.core, 0) + 1
  ranked = sorted(count, key=lambda w: (-count[w], w))
  by_class: dict[str, list[str]] = {}
  for w in ranked:
    by_class.setdefault(_suffix_class(w), []).append(w)
  return Vocabulary({w: r for r, w in enumerate(ranked)}, count,
                     {k: tuple(v) for k, v in by_class.items()},
                     {w: i for v in by_class.values() for i, w in enumerate(v)})


def _swap_candidates(word: str, avoid: Sequence[str], vocab: Vocabulary) -> list[str]:
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


Edit = tuple[int, int, tuple[str, ...]]  # (start, end, replacements): sentence[start:end]


def _table_words(tokens: list[Token], table: Mapping[str, str]
                 ) -> Iterator[tuple[int, Token, str]]:
  """(i, token, its lower-case word) for each token that is a key of `table`, written in
  lower case or capitalised (never ALL CAPS or mixed: those are names)."""
  for i, t in enumerate(tokens):
    word = t.core.lower()
    if word in table and t.core in (word, word.capitalize()):
      yield i, t, word


def _agreement_edits(tokens: list[Token], vocab: Vocabulary) -> list[Edit]:
  """is/are, has/have, was/were flipped, where the flip breaks agreement: not after a
  relative pronoun or a subject of either number (all, none, ...), "have" not after to/a
  modal/do/not, was/were not after if/though/wish."""
  del vocab
  out = []
  for i, t, word in _table_words(tokens, AGREEMENT):
    prev = tokens[i - 1].core.lower() if i else ""
    if prev in _RELATIVE or prev in _EITHER_NUMBER:
      continue
    if word == "have" and (prev in _NON_FINITE or prev.endswith("n't")):
      continue
    if word in ("was", "were") and any(u.core.lower() in _SUBJUNCTIVE for u in tokens[:i]):
      continue
    out.append((t.start, t.end, (_recase(AGREEMENT[word], t.core),)))
  return out


def _next_word(tokens: list[Token], i: int) -> str | None:
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


def _demonstrative_edits(tokens: list[Token], vocab: Vocabulary) -> list[Edit]:
  """this/these, that/those flipped before a noun-like word whose -s agrees with the written
  demonstrative (this/that: no plural -s; these/those: -s); "that" only first or after a
  preposition (elsewhere it is mostly a conjunction or a relative pronoun)."""
  del vocab
  out = []
  for i, t, word in _table_words(tokens, DEMONSTRATIVE):
    noun = _next_word(tokens, i)
    if noun is None or not _noun_like(noun):
      continue
    if _plural_looking(noun) != (word in ("these", "those")):
      continue
    if word == "that" and i and tokens[i - 1].core.lower() not in _PREPOSITIONS:
      continue
    out.append((t.start, t.end, (_recase(DEMONSTRATIVE[word], t.core),)))
  return out


def _article_edits(tokens: list[Token], vocab: Vocabulary) -> list[Edit]:
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


def _bigram_edits(tokens: list[Token], vocab: Vocabulary) -> list[Edit]:
  """Two adjacent different lower-case plain words swapped (punctuation stays in place)."""
  del vocab
  return [(a.start, b.end, (f"{b.core} {a.core}",)) for a, b in zip(tokens, tokens[1:])
          if not (a.trail or b.lead) and a.plain and b.plain and a.core.islower()
          and b.core.islower() and a.core != b.core]


def _word_swap_edits(tokens: list[Token], vocab: Vocabulary) -> list[Edit]:
  """A content word replaced by one of the words nearest it in frequency rank
  (`_swap_candidates`); words without a candidate give no edit."""
  present = [t.core.lower() for t in tokens]
  out = []
  for t in tokens:
    if content_word(t) and t.core in vocab.rank:
      candidates = _swap_candidates(t.core, present, vocab)
      if candidates:
        out.append((t.start, t.end, tuple(candidates)))
  return out


EDITS = {"agreement": _agreement_edits, "demonstrative": _demonstrative_edits,
          "article": _article_edits, "bigram_shift": _bigram_edits,
          "word_swap": _word_swap_edits}


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
