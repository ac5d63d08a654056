"""The yardstick's item sets (lm/downstream/nlu_items.py, docs/yardstick.md)."""
import collections
import os
import re
import subprocess
import sys

import pytest

from lm.downstream import mini_text
from lm.downstream import nlu_items as items
from lm.downstream import nlu_rules as rules
from lm.downstream.nlu_items import Pair

BINARY = items.PAIR_PHENOMENA + ("clause_swap",)


def _pairs(*sentences, phenomenon):
  """Each hand-written sentence as its own document: its pair of `phenomenon` (or None), as
  the rules make it (before the forms are balanced)."""
  docs = list(sentences)
  out = items.every_pair(phenomenon, items.sentences(docs), rules.vocabulary(docs))
  by_doc = {p.document: p for p in out}
  return [by_doc.get(d) for d in range(len(sentences))]


NOUNS = ("cat", "file", "item", "queue", "lock", "event", "table", "record", "index",
         "socket", "parser", "owner", "window", "thread")
ADJECTIVES = ("empty", "open", "full", "ready", "old", "idle", "urgent", "quiet", "large")


def _a(word):
  return ("an " if word[0] in "aeiou" else "a ") + word


def template_documents(num_docs=40):
  """Documents of 6 template sentences (5 to 23 words) from NOUNS and ADJECTIVES, each
  made of other words by document: every phenomenon, every form of its words, and every
  probe task gets items."""
  docs = []
  for d in range(num_docs):
    n1, n2, n3 = (NOUNS[(d * k + j) % len(NOUNS)] for k, j in ((1, 0), (5, 3), (3, 1)))
    a1, a2 = (ADJECTIVES[(d * k + j) % len(ADJECTIVES)] for k, j in ((1, 0), (4, 1)))
    docs.append("\n".join([
        f"The {n1} is {a1} today.",
        f"These {n2}s have {_a(a2)} {n3}.",
        f"If the {n3} is {a2}, the {n1} waits for {_a(n2)}.",
        f"The {n1} reads the {n2} and the {n3} writes the {n1} while the {n2} waits for "
        f"the {n3} to become {a1} again.",
        f"In that case the {n2} sends {_a(a1)} {n1} to the {n3}.",
        f"This {n3} has {_a(a1)} {n2}, and the {n1}s are {a2}." if d % 3 else
        f"Those {n1}s were {a1} when the {n2} was {a2}."]))
  return docs


@pytest.fixture(scope="module")
def embedded():
  """(pairs, probes) of the embedded corpus's held-out split, seed 0."""
  return items.item_sets()


@pytest.fixture(scope="module")
def heldout_sentences():
  return items.sentences(items.documents(), items.pretraining_text())


# -- sentences -----------------------------------------------------------------------------

def test_sentences_split_filter_deduplicate_and_exclude():
  docs = ["The cat is here.  The dogs\nare there!\n\n>>> x = compute(1, 2)\n"
          "short one.\nA_b = c_d(e_f, g_h, i_j, k_l).\nIs it a cat or a dog?",
          "The cat is here. The cat sat on the mat."]
  assert items.sentences(docs) == [
      (0, "The cat is here."), (0, "The dogs are there!"), (0, "Is it a cat or a dog?"),
      (1, "The cat sat on the mat.")]
  assert items.sentences(docs, exclude_text="x\nThe dogs are there! And more\n") == [
      (0, "The cat is here."), (0, "Is it a cat or a dog?"), (1, "The cat sat on the mat.")]


def test_embedded_documents_are_the_heldout_split_and_unseen(heldout_sentences):
  assert items.documents() == mini_text.heldout_documents()
  seen = items.pretraining_text()
  assert len(seen) > 50 * sum(map(len, items.documents()))  # 99 % of the documents
  assert len(heldout_sentences) < len(items.sentences(items.documents()))
  assert not [s for _, s in heldout_sentences if s in seen]
  assert items.pretraining_text("/some/user/corpus") == ""


def test_the_comments_source_reads_the_standard_library_comments(monkeypatch):
  from lm.data import corpus
  docs = template_documents()
  monkeypatch.setattr(corpus, "comment_documents", lambda: docs)
  assert items.documents(source="comments") == docs
  assert items.item_sets(source="comments") == (
      items.minimal_pairs(docs, 0, items.pretraining_text()),
      items.probe_sets(docs, 0, items.pretraining_text()))
  with pytest.raises(ValueError, match="unknown item source 'comment'; expected one of"):
    items.documents(source="comment")


@pytest.mark.slow
def test_the_comments_source_gives_hundreds_of_items_per_set(embedded):
  """This interpreter's standard-library comments, less what pre-training reads: over 20x
  the embedded held-out split's sentences, and every set at least 5x its held-out size."""
  docs, seen = items.documents(source="comments"), items.pretraining_text()
  assert len(items.sentences(docs, seen)) > 20 * len(items.sentences(items.documents(), seen))
  pairs, probes = items.item_sets(source="comments")
  for name, got in {**pairs, **probes}.items():
    small = {**embedded[0], **embedded[1]}[name]
    assert len(got) >= min(5 * len(small), 400), (name, len(got), len(small))
  sentences = {s for _, s in items.sentences(docs)}
  assert all(p.good in sentences for v in pairs.values() for p in v)


# -- minimal pairs, one phenomenon at a time ------------------------------------------------

def test_agreement_flips_finite_verbs_where_agreement_decides():
  (p,) = _pairs("The cat is here.", phenomenon="agreement")
  assert p == Pair("agreement", 0, "The cat ", "is", "are", " here.")
  assert p.good == "The cat is here." and p.bad == "The cat are here."
  got = _pairs("Is the cat here now?", "The cats have left us.", "The dogs were out late.",
               "It was a long night.", phenomenon="agreement")
  assert [(p.good_span, p.bad_span) for p in got] == [("Is", "Are"), ("have", "has"),
                                                      ("were", "was"), ("was", "were")]
  # No flip where both forms can be right or where the flip tests something else.
  assert _pairs("The thing which is here stays.", "All is well in the end.",
                "We can have cake today.", "They do not have any.", "You must have seen it.",
                "If it were true, we would know.", phenomenon="agreement") == [None] * 6


def test_demonstrative_flips_only_where_the_noun_tells_the_number():
  got = _pairs("This method returns a copy.", "These values are fine now.",
               "In that case we stop here.", "Use those files for the test.",
               phenomenon="demonstrative")
  assert [(p.prefix, p.good_span, p.bad_span) for p in got] == [
      ("", "This", "These"), ("", "These", "This"), ("In ", "that", "those"),
      ("Use ", "those", "that")]
  assert _pairs("This means nothing at all.", "These data look odd to me.",
                "He said that case is closed.", "This is a cat, not a dog.",
                "These support the old format.", "This class handles the rest.",
                phenomenon="demonstrative")[:5] == [None] * 5
  # -ss is singular: "this class" flips.
  assert _pairs("This class handles the rest.", phenomenon="demonstrative")[0].bad == (
      "These class handles the rest.")


def test_article_flips_follow_the_spelling_rule_and_skip_its_exceptions():
  got = _pairs("Take an apple from the box.", "Read a file from the disk.",
               "A class holds the state.", phenomenon="article")
  assert [(p.good_span, p.bad_span, p.suffix) for p in got] == [
      ("an", "a", " apple from the box."), ("a", "an", " file from the disk."),
      ("A", "An", " class holds the state.")]
  # "a user", "an hour" break the rule as written: never flipped; nor before an acronym,
  # a single letter, punctuation, or where "a" is a variable.
  assert _pairs("It is a user of the system.", "Wait an hour before you go.",
                "Open a URL in the browser.", "Add a b to the list.",
                "Return a (possibly empty) list.", "Check if a is None first.",
                phenomenon="article") == [None] * 6


def test_bigram_shift_swaps_two_different_adjacent_words():
  (p,) = _pairs("The cat sat down.", phenomenon="bigram_shift")
  assert (p.good_span, p.bad_span) in {("cat sat", "sat cat"), ("sat down", "down sat")}
  assert p.bad.endswith(".") and p.bad[0] == "T"  # capital and full stop stay
  # Identical words are never swapped; nor across punctuation or with a capitalised word.
  assert _pairs("Stop it it it.", "Run it, then go.", phenomenon="bigram_shift") == [
      None, Pair("bigram_shift", 1, "Run it, ", "then go", "go then", ".")]
  assert rules._bigram_edits(rules.split_tokens("Stop it it it."), None) == []


def test_word_swap_replaces_a_content_word_by_one_of_its_frequency_and_form():
  docs = ["Red apples grow fast.", "Green pears grow slowly."]
  first, second = items.minimal_pairs(docs)["word_swap"]
  # apples and pears: both once, both plural-looking; grow (twice) may become fast (once,
  # within a factor 2, no suffix), but not in sentence 0, which holds fast; the -ly word
  # has no other word of its form.
  assert first == Pair("word_swap", 0, "Red ", "apples", "pears", " grow fast.")
  assert second in (Pair("word_swap", 1, "Green ", "pears", "apples", " grow slowly."),
                    Pair("word_swap", 1, "Green pears ", "grow", "fast", " slowly."))
  # Counts 8 and 1 are not "about the same": no swap.
  assert items.minimal_pairs(["Apples apples. Some apples " * 4 + "and pears."])[
      "word_swap"] == []


def test_every_embedded_pair_differs_in_one_place(embedded, heldout_sentences):
  pairs, _ = embedded
  assert set(pairs) == set(items.PAIR_PHENOMENA)
  sentence_doc = {s: d for d, s in heldout_sentences}
  vocab = rules.vocabulary(items.documents())
  for phenomenon, group in pairs.items():
    assert group, phenomenon
    goods = [p.good for p in group]
    assert len(set(goods)) == len(goods)  # a sentence once per phenomenon
    for p in group:
      assert p.phenomenon == phenomenon
      assert p.good_span != p.bad_span and p.good != p.bad and p.good_span and p.bad_span
      assert sentence_doc[p.good] == p.document  # the sentence, from its own document
      if phenomenon == "bigram_shift":
        a, b = p.good_span.split(" ")
        assert a != b and p.bad_span == f"{b} {a}"
      elif phenomenon == "word_swap":
        g, w = p.good_span, p.bad_span
        assert rules._suffix_class(g) == rules._suffix_class(w)
        assert vocab.count[g] <= 2 * vocab.count[w] and vocab.count[w] <= 2 * vocab.count[g]
        assert w not in p.good.lower().split()
      else:
        assert rules.FORM_PARTNERS[phenomenon][p.good_span.lower()] == p.bad_span.lower()
      if phenomenon != "word_swap":  # a single token or two: words around are kept whole
        assert not p.prefix[-1:].isalnum() and not p.suffix[:1].isalnum()


def test_an_edit_that_changes_nothing_is_never_a_pair(monkeypatch):
  monkeypatch.setitem(rules.EDITS, "agreement", lambda tokens, vocab: [(0, 3, ("The",))])
  assert _pairs("The cat is here.", phenomenon="agreement") == [None]
  monkeypatch.setitem(rules.EDITS, "agreement",
                      lambda tokens, vocab: [(0, 3, ("The",)), (4, 7, ("dog",))])
  assert [p.bad for p in _pairs("The cat is here.", phenomenon="agreement")] == [
      "The dog is here."]


def test_caps_keep_a_deterministic_subset(monkeypatch):
  docs = [f"The cat number {w} is here." for w in ("one", "two", "three", "four", "five")]
  full = items.minimal_pairs(docs)["bigram_shift"]
  monkeypatch.setattr(items, "MAX_PAIRS", 3)
  monkeypatch.setattr(items, "MAX_PROBE_ITEMS", 2)
  capped = items.minimal_pairs(docs)["bigram_shift"]
  assert len(full) == 5 and len(capped) == 3 and set(capped) <= set(full)
  assert [full.index(p) for p in capped] == sorted(full.index(p) for p in capped)
  assert capped == items.minimal_pairs(docs)["bigram_shift"]
  assert len(items.probe_sets(docs)["bigram_shift"]) == 2


SINGULAR = {"is", "has", "was", "this", "that", "a"}  # one form of each word pair


def _fixed_preference(pairs):
  """% of the pairs won by a model that picks the sentence with the SINGULAR form."""
  return 100 * sum(p.good_span.lower() in SINGULAR for p in pairs) / len(pairs)


def test_form_pairs_are_balanced_so_a_fixed_preference_scores_half():
  """Agreement, demonstrative and article pairs hold as many good sentences with each form
  of a word pair ({is, are}, {a, an}, ...) as with its partner (every sentence of the rarer
  form), so a model that prefers one form whatever the context scores 50 %, where on the
  rules' unbalanced output it scores the frequent form's share; the probe texts show each
  form as often as written (label 0) as perturbed (1), so the word alone tells no label."""
  for docs, seen in ((template_documents(), ""), (items.documents(), items.pretraining_text())):
    pairs, probes = items.minimal_pairs(docs, 0, seen), items.probe_sets(docs, 0, seen)
    sents, vocab = items.sentences(docs, seen), rules.vocabulary(docs)
    for phenomenon, partner in rules.FORM_PARTNERS.items():
      made, got = items.every_pair(phenomenon, sents, vocab), pairs[phenomenon]
      made_counts = collections.Counter(map(items.form, made))
      counts = collections.Counter(map(items.form, got))
      assert got and counts == {f: min(made_counts[f], made_counts[partner[f]])
                                for f in partner if made_counts[f] and made_counts[partner[f]]}
      assert _fixed_preference(got) == 50.0
      shows = {}
      for p in made:
        shows[p.good], shows[p.bad] = items.form(p), partner[items.form(p)]
      shown = collections.Counter((shows[it.text], it.label) for it in probes[phenomenon])
      assert probes[phenomenon] and all(shown[f, 0] == shown[f, 1] for f in partner), shown
  made = items.every_pair("agreement", sents, vocab)  # the embedded held-out split
  assert _fixed_preference(made) > 60


def test_balance_under_a_cap_keeps_each_form_equal(monkeypatch):
  docs = [f"The {n} {w} here today." for n in NOUNS[:6] for w in ("is", "are", "is")]
  monkeypatch.setattr(items, "MAX_PAIRS", 4)
  got = items.minimal_pairs(docs)["agreement"]
  assert collections.Counter(map(items.form, got)) == {"is": 2, "are": 2}
  monkeypatch.setattr(items, "MAX_PAIRS", 1000)
  assert collections.Counter(map(items.form, items.minimal_pairs(docs)["agreement"])) == {
      "is": 6, "are": 6}


# -- probe sets ----------------------------------------------------------------------------

def test_clause_swap():
  assert rules.clause_swap("If the file is missing, the loader raises an error.") == (
      "The loader raises an error, if the file is missing.")
  assert rules.clause_swap("Read the data, and close the file quickly.") == (
      "Close the file quickly, and read the data.")
  assert rules.clause_swap("IDLE runs the code, but it stops early.") == (
      "It stops early, but IDLE runs the code.")
  for sentence in ("Return a copy of it, which is new.",  # a relative clause
                   "Read it, then go.",  # under MIN_CLAUSE_WORDS words on a side
                   "Use a, b, or c here now.",  # two commas
                   "It returns the object (again, usually a dictionary)."):  # inside brackets
    assert rules.clause_swap(sentence) is None, sentence


def test_probe_tasks_are_balanced_each_sentence_once(embedded, heldout_sentences):
  pairs, probes = embedded
  assert tuple(probes) == items.PROBE_TASKS
  sentence_doc = {s: d for d, s in heldout_sentences}
  for task, group in probes.items():
    k = items.num_classes(task)
    assert group, task
    counts = collections.Counter(it.label for it in group)
    assert sorted(counts) == list(range(k)) and len(set(counts.values())) == 1, (task, counts)
    assert all(it.task == task for it in group)
    if task in BINARY:
      perturbed = ({p.bad: p.good for p in pairs[task]} if task in pairs else
                   {rules.clause_swap(s): s for s in sentence_doc})
      written = [it.text if it.label == 0 else perturbed[it.text] for it in group]
    else:
      written = [it.text for it in group]
    assert len(set(written)) == len(written), task  # each sentence once per task
    assert [sentence_doc[s] for s in written] == [it.document for it in group]  # its document
    assert [sentence_doc[s] for s in written] == sorted(sentence_doc[s] for s in written)
  # The probe's perturbed sentences are the minimal pairs' bad ones.
  for task in items.PAIR_PHENOMENA:
    bads = {p.bad for p in pairs[task]}
    assert all(it.text in bads for it in probes[task] if it.label == 1)


def test_surface_controls():
  def sentence(n, first="Here"):
    return " ".join([first] + ["word"] * (n - 2) + ["end."])
  # Two sentences in each bin (5, 9, 14, 20 words), one too short and one too long.
  docs = [" ".join(sentence(n, first) for n in (5, 9, 14, 20, 3, 41))
          for first in ("Here", "There")]
  probes = items.probe_sets(docs)
  got = [(len(it.text.split(" ")), it.label, it.document) for it in probes["sentence_length"]]
  assert got == [(5, 0, 0), (9, 1, 0), (14, 2, 0), (20, 3, 0),
                 (5, 0, 1), (9, 1, 1), (14, 2, 1), (20, 3, 1)]
  # A bin with no sentence: no task rather than one with fewer classes.
  assert items.probe_sets([" ".join(sentence(n) for n in (5, 9, 14))])["sentence_length"] == []
  assert probes["word_content"] == []  # fewer than WORD_CONTENT_WORDS candidate words


def test_word_content_on_hand_documents(monkeypatch):
  monkeypatch.setattr(items, "WORD_CONTENT_SKIP", 1)
  monkeypatch.setattr(items, "WORD_CONTENT_WORDS", 2)
  docs = ["The queue holds items now. The queue holds a lock. The queue sends items on.",
          "The lock waits for items. The file opens the lock. The queue lock fails here."]
  sents = items.sentences(docs)
  # Sentences holding each: lock 4, queue 4 (ties by spelling), items 3, holds 2, ...; the
  # most frequent (lock) is skipped, the next two are the classes.
  assert items.word_content_words(sents) == ("queue", "items")
  got = [(it.text, it.label) for it in items.probe_sets(docs)["word_content"]]
  # Exactly one of queue/items: queue-only sentences 2 ("holds a lock", "lock fails"),
  # items-only 1 ("waits for items"): one of each, the queue one drawn at random.
  assert len(got) == 2 and ("The lock waits for items.", 1) in got
  assert {t for t, label in got if label == 0} <= {"The queue holds a lock.",
                                                   "The queue lock fails here."}


def test_word_content_labels_the_one_target_word(heldout_sentences, embedded):
  _, probes = embedded
  words = items.word_content_words(heldout_sentences)
  assert len(words) == items.WORD_CONTENT_WORDS
  for it in probes["word_content"]:
    present = [w for w in words if re.search(rf"(?<![\w'-]){w}(?![\w'-])", it.text)]
    assert present == [words[it.label]], it
  for it in probes["sentence_length"]:
    lo, hi = items.SENTENCE_LENGTH_BINS[it.label]
    assert lo <= len(it.text.split(" ")) <= hi


def test_num_classes_and_chance():
  assert {t: items.num_classes(t) for t in items.PROBE_TASKS} == {
      **{t: 2 for t in BINARY}, "sentence_length": len(items.SENTENCE_LENGTH_BINS),
      "word_content": items.WORD_CONTENT_WORDS}
  assert items.chance("agreement") == 50.0
  assert items.chance("sentence_length") == 100.0 / len(items.SENTENCE_LENGTH_BINS)
  with pytest.raises(ValueError, match="unknown probe task 'cola'; expected one of"):
    items.num_classes("cola")


# -- determinism ---------------------------------------------------------------------------

def test_digest_is_canonical():
  a = Pair("agreement", 0, "The cat ", "is", "are", " here.")
  b = Pair("agreement", 1, "The cat ", "is", "are", " here.")
  assert items.digest({"x": [a, b], "y": []}) == items.digest({"y": [], "x": [a, b]})
  assert items.digest([a, b]) != items.digest([b, a])
  assert items.digest(a) != items.digest(items.ProbeItem("agreement", a.good, 0, 0))


def test_seed_changes_the_draws_not_the_sentences():
  """The seed draws which edit of a sentence is made (and so, for the word-form phenomena,
  which forms there are, and which sentences of the more frequent form balance keeps)."""
  docs = template_documents()
  zero, one = items.minimal_pairs(docs, seed=0), items.minimal_pairs(docs, seed=1)
  assert zero == items.minimal_pairs(docs, seed=0)
  assert zero["bigram_shift"] != one["bigram_shift"]
  for phenomenon in items.PAIR_PHENOMENA:
    if phenomenon in rules.FORM_PARTNERS:
      partner = rules.FORM_PARTNERS[phenomenon]
      for counts in (collections.Counter(map(items.form, ps[phenomenon])) for ps in (zero, one)):
        assert all(counts[f] == counts[partner[f]] for f in partner)
    else:
      assert [p.good for p in zero[phenomenon]] == [p.good for p in one[phenomenon]]


def _digests() -> str:
  pairs, probes = items.item_sets()
  docs = template_documents()
  hand = items.minimal_pairs(docs), items.probe_sets(docs)
  return f"{items.digest([pairs, probes])} {items.digest(list(hand))}"


def test_deterministic_across_processes_and_hash_seeds():
  first = _digests()
  root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
  code = "from tests.downstream.test_nlu_items import _digests; print(_digests())"
  env = dict(os.environ, PYTHONHASHSEED="4321", PYTHONPATH=root)
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       check=True, cwd=root)
  assert out.stdout.strip().splitlines()[-1] == first


# Golden digests: a change to a rule, a word list, a constant or the draws shows here; update
# them (and docs/yardstick.md's counts) only on purpose.
TEMPLATE_GOLDEN = "f826087510c44b18db1731ac7d21e6799fd73d1e1bd03200ffab2dd390a26d61"
EMBEDDED_GOLDEN = {
    "pairs": "c192a06547c7de20363050059157a2b9fd352d3af44408a50c5bd37912ac53d1",
    "probes": "b058741ae5a45bf7458adde4a21c477a3dcce72f56b0b2fb0b96dffcc738d7e3"}
EMBEDDED_COUNTS = {  # docs/yardstick.md, "Items"
    "pairs/agreement": 24,
    "pairs/demonstrative": 4,
    "pairs/article": 16,
    "pairs/bigram_shift": 150,
    "pairs/word_swap": 150,
    "probes/agreement": 24,
    "probes/demonstrative": 4,
    "probes/article": 16,
    "probes/bigram_shift": 150,
    "probes/word_swap": 150,
    "probes/clause_swap": 16,
    "probes/sentence_length": 124,
    "probes/word_content": 20}


def test_golden_digest_of_template_documents():
  docs = template_documents()
  hand = items.minimal_pairs(docs), items.probe_sets(docs)
  assert items.digest(list(hand)) == TEMPLATE_GOLDEN


@pytest.mark.skipif(sys.version_info[:3] != (3, 11, 7),
                    reason="the embedded corpus (stdlib docstrings) of Python 3.11.7")
def test_golden_digests_and_counts_of_the_embedded_corpus(embedded):
  pairs, probes = embedded
  assert {"pairs": items.digest(pairs), "probes": items.digest(probes)} == EMBEDDED_GOLDEN
  counts = {**{f"pairs/{k}": len(v) for k, v in pairs.items()},
            **{f"probes/{k}": len(v) for k, v in probes.items()}}
  assert counts == EMBEDDED_COUNTS


@pytest.mark.skipif(sys.version_info[:3] != (3, 11, 7),
                    reason="the docs' count table is for the embedded corpus of Python 3.11.7")
def test_the_docs_count_table_is_the_embedded_counts():
  root = os.path.join(os.path.dirname(__file__), "..", "..")
  with open(os.path.join(root, "docs", "yardstick.md"), encoding="utf-8") as f:
    text = f.read()
  section = text[text.index("## Items"):]
  # task | pairs | probe items | comments: pairs | comments: probe items | chance
  rows = re.findall(r"^\| `(\w+)` \| (\d+|-) \| (\d+) \| (?:\d+|-) \| \d+ \| \d+ \|$",
                    section, re.M)
  got = {}
  for task, pairs, probes in rows:
    if pairs != "-":
      got[f"pairs/{task}"] = int(pairs)
    got[f"probes/{task}"] = int(probes)
  assert got == EMBEDDED_COUNTS
