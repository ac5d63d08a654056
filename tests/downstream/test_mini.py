"""The CPU-sized downstream suite (lm/downstream/mini.py, docs/downstream_mini.md)."""
import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from lm.downstream import mini
from lm.downstream import mini_builders
from lm.downstream import mini_text
from lm.downstream import task as task_lib

# The suite (mini.HEADLINE), then the registered tasks outside it.
SUITE = ("mini_completion", "mini_fill", "mini_cloze", "mini_phrase_order", "mini_word_order")
NAMES = SUITE + ("mini_next_line", "mini_same_doc", "mini_unshuffle")
SPLITS = ("train", "validation")
TOKEN_BUDGET = 128  # inputs and targets, with the 1000-piece tokenizer of configs/t5.py:runlocal
PREFIX = {"mini_next_line": "next line: ", "mini_same_doc": "same document: ",
          "mini_cloze": "cloze: ", "mini_unshuffle": "unshuffle: ",
          "mini_word_order": "word order: options: ", "mini_completion": "complete: ",
          "mini_fill": "fill: ", "mini_phrase_order": "phrase order: "}


def _examples(name, split, data_dir=None):
  return task_lib.get_task(name).examples(split, data_dir)


def _digest(data_dir=None) -> str:
  h = hashlib.sha256()
  for name in NAMES:
    for split in SPLITS:
      h.update(json.dumps(_examples(name, split, data_dir), sort_keys=True).encode())
  return h.hexdigest()


def _synthetic_corpus(path, num_docs=1000, seed=0):
  """JSON-lines documents of 8 lines "docNNNN lineK w w w w w"; each document draws its words
  from its own 8 of 300 made-up words, so windows repeat words (cloze material)."""
  rng = np.random.default_rng(seed)
  letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
  vocab = sorted({"".join(rng.choice(letters, int(rng.integers(4, 8)))) for _ in range(300)})
  with open(path, "w") as f:
    for d in range(num_docs):
      own = rng.choice(vocab, 8, replace=False)
      lines = [f"doc{d:04d} line{k} " + " ".join(rng.choice(own, 5)) for k in range(8)]
      f.write(json.dumps({"text": "\n".join(lines)}) + "\n")
  return str(path)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
  return _synthetic_corpus(tmp_path_factory.mktemp("mini") / "heldout.jsonl")


_TAG = re.compile(r"doc(\d{4}) line(\d)")


def _tags(text):
  return [(int(d), int(k)) for d, k in _TAG.findall(text)]


def test_registered_with_splits_choices_and_descriptions():
  assert set(NAMES) <= set(task_lib.task_names())
  assert tuple(mini.HEADLINE) == SUITE == mini.SUITE
  assert set(mini.TASK_METRIC) == set(NAMES)
  for name in NAMES:
    t = task_lib.get_task(name)
    assert t.splits == SPLITS and t.description
    assert t.choices is not None  # every task can be rank-classified (the suite's default)


def test_heldout_constants_match_the_configs():
  from configs import t5
  from lm import config as config_lib
  from lm.data import pipeline
  for arg in ("runlocal", ""):
    d = config_lib.derive(t5.get_config(arg)).data
    assert (d.validation_fraction, d.validation_seed) == (mini_text.HELDOUT_FRACTION,
                                                          mini_text.HELDOUT_SEED)
  spec = pipeline.DataSpec()
  assert (spec.validation_fraction, spec.validation_seed) == (mini_text.HELDOUT_FRACTION,
                                                              mini_text.HELDOUT_SEED)


def _units_of(name, ex):
  if name == "mini_unshuffle":
    return ex["lines"]
  if name == "mini_cloze":  # 1-3 units joined by spaces, with the answer put back
    return [ex["passage"].replace(mini.BLANK, ex["answer"])]
  if name in ("mini_word_order", "mini_phrase_order"):  # the rest: the answer reordered
    return [ex["answer"]]
  if name == "mini_fill":  # the distractors are words, not units
    return [ex["passage"].replace(mini.BLANK, ex["answer"])]
  if name == "mini_completion":  # the swapped pairing is no unit
    return [f"{b} {e}" for b, e in zip(ex["a"], ex["answer"])]
  return [ex["a"], *ex["options"]]


def test_validation_from_heldout_documents_train_from_pretraining_documents():
  from lm.data import sources
  corpus = sources.make_source("default", None)
  pretrain, heldout = sources.split_validation(corpus, mini_text.HELDOUT_FRACTION,
                                               seed=mini_text.HELDOUT_SEED)
  heldout_docs = [heldout[i] for i in range(len(heldout))]
  pretrain_docs = [pretrain[i] for i in range(len(pretrain))]
  assert mini_text.heldout_documents() == heldout_docs
  docs = mini_text.split_sources()
  assert docs["validation"] == heldout_docs  # all held out, none duplicated
  # Train: a capped, evenly spread share of the pre-training documents, none held out.
  assert 0.9 * mini_text.TRAIN_DOCUMENTS <= len(docs["train"]) <= mini_text.TRAIN_DOCUMENTS
  assert set(docs["train"]) <= set(pretrain_docs)
  assert not set(docs["train"]) & set(heldout_docs)
  train_positions = sorted(pretrain_docs.index(d) for d in docs["train"][::100])
  assert train_positions[-1] - train_positions[0] > 0.8 * len(pretrain_docs)

  def text(documents):  # all of it, whitespace-collapsed
    return " ".join(" ".join(d.split()) for d in documents)

  heldout_text, train_text = text(heldout_docs), text(docs["train"])
  pretrain_lines = {" ".join(l.split()) for d in pretrain_docs for l in d.splitlines()}
  for name in NAMES:
    for split, where in (("validation", heldout_text), ("train", train_text)):
      for ex in mini._raw_examples(name, split, None):
        for unit in _units_of(name, ex):
          assert unit in where, (name, split, unit)
          if split == "validation" and name != "mini_cloze":
            assert unit not in pretrain_lines, unit  # never seen in pre-training


def test_deterministic_in_process_and_across_hash_seeds():
  first = _digest()
  for fn in (mini_text._read_documents, mini_text._assign, mini_text.splits, mini._raw_tuple):
    fn.cache_clear()
  assert _digest() == first
  root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
  code = "from tests.downstream.test_mini import _digest; print(_digest())"
  env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=root)
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       check=True, cwd=root)
  assert out.stdout.strip().splitlines()[-1] == first


def test_sizes_embedded_corpus_train_fills_its_cap_validation_is_not_small():
  for name in NAMES:
    assert len(_examples(name, "train")) == mini.MAX_EXAMPLES["train"], name
    n = len(_examples(name, "validation"))
    assert 150 <= n <= mini.MAX_EXAMPLES["validation"], (name, n)


def test_a_larger_heldout_corpus_fills_the_caps(synthetic):
  for name in NAMES:
    for split in SPLITS:
      assert len(_examples(name, split, synthetic)) == mini.MAX_EXAMPLES[split], (name, split)


def test_train_and_validation_come_from_disjoint_documents(synthetic):
  docs = {}
  for split in SPLITS:
    docs[split] = {d for name in NAMES for ex in _examples(name, split, synthetic)
                   for d, _ in _tags(ex["inputs"])}
  assert docs["train"] and docs["validation"]
  assert not docs["train"] & docs["validation"]
  # Embedded corpus: no unit is shared between the splits.
  units = {}
  for split in SPLITS:
    units[split] = ({u for ex in mini._raw_examples("mini_next_line", split, None)
                     for u in (ex["a"], *ex["options"])}
                    | {u for ex in mini._raw_examples("mini_unshuffle", split, None)
                       for u in ex["lines"]})
  assert not units["train"] & units["validation"]


def test_choice_tasks_follow_the_construction(synthetic):
  """mini_next_line / mini_same_doc: line A, then two options (the answer and a line of
  another document, in a random order); the options shown are the choices."""
  for name in ("mini_next_line", "mini_same_doc"):
    t = task_lib.get_task(name)
    for split in SPLITS:
      rows = _examples(name, split, synthetic)
      first = 0
      for r in rows:
        assert len(r["options"]) == 2 and r["targets"] in r["options"]
        assert list(t.choices(r)) == r["options"]
        assert r["inputs"].endswith(" options: " + " | ".join(r["options"])), r
        first += r["options"][0] == r["targets"]
        a = r["inputs"][len(PREFIX[name]):].split(" options: ")[0]
        ((da, ka),) = _tags(a)
        ((db, kb),) = _tags(r["targets"])
        (other,) = [o for o in r["options"] if o != r["targets"]]
        ((do, _),) = _tags(other)
        assert da == db and do != da, r
        if name == "mini_next_line":
          assert kb == ka + 1, r
        else:
          assert abs(ka - kb) >= 2, r
      assert 0.4 < first / len(rows) < 0.6, (name, split, first, len(rows))
    # Embedded corpus: the distractor is about as long as the answer (length gives no clue).
    for split in SPLITS:
      rows = _examples(name, split)
      diffs = [abs(len(r["options"][0]) - len(r["options"][1])) for r in rows]
      assert np.median(diffs) <= 5, (name, split, np.median(diffs))
      first = sum(r["options"][0] == r["targets"] for r in rows)
      assert 0.4 < first / len(rows) < 0.6, (name, split, first, len(rows))


def test_word_order_pairs_a_line_with_its_interior_scrambled(synthetic):
  """mini_word_order: two options, the answer (a line of 5+ words) and the same words with
  the first and last in place and the interior in another order, in a random order."""
  t = task_lib.get_task("mini_word_order")
  for data_dir in (None, synthetic):
    for split in SPLITS:
      rows = _examples("mini_word_order", split, data_dir)
      first = 0
      for r in rows:
        assert list(t.choices(r)) == r["options"] and r["targets"] in r["options"]
        assert r["inputs"] == "word order: options: " + " | ".join(r["options"])
        (other,) = [o for o in r["options"] if o != r["targets"]]
        a, b = r["targets"].split(" "), other.split(" ")
        assert len(a) >= mini_builders.WORD_ORDER_MIN_WORDS and a != b, r
        assert (a[0], a[-1]) == (b[0], b[-1]) and sorted(a) == sorted(b), r
        first += r["options"][0] == r["targets"]
      assert 0.4 < first / len(rows) < 0.6, (data_dir, split, first, len(rows))
  rng = np.random.default_rng(0)
  assert mini_builders.scramble_interior(["A", "x", "x", "x", "b."], rng) is None  # one order only
  words = ["The", "cat", "sat", "on", "mats."]
  seen = {tuple(mini_builders.scramble_interior(words, rng)) for _ in range(200)}
  assert len(seen) == 5 and tuple(words) not in seen  # every other order of the interior
  assert all(w[0] == "The" and w[-1] == "mats." for w in seen)


def _start(text):
  return 0 if text[:1].islower() else 1 if text[:1].isupper() else 2


def test_completion_pairs_two_beginnings_with_their_endings(synthetic):
  """mini_completion: two beginnings (first halves of lines of 6+ words, from different
  documents), their two endings in a random order; the target pairs each beginning with its
  own ending, the only other choice swaps them (the same four pieces)."""
  t = task_lib.get_task("mini_completion")
  for data_dir in (None, synthetic):
    for split in SPLITS:
      rows = _examples("mini_completion", split, data_dir)
      raw = mini._raw_examples("mini_completion", split, data_dir)
      first = 0
      for r, ex in zip(rows, raw):
        (b0, b1), (x, y) = r["beginnings"], r["options"]
        assert r["inputs"] == f"complete: {b0} | {b1} options: {x} | {y}"
        e0, e1 = ex["answer"]
        assert {x, y} == {e0, e1} and r["targets"] == f"{b0} {e0} | {b1} {e1}"
        assert list(t.choices(r)) == [f"{b0} {x} | {b1} {y}", f"{b0} {y} | {b1} {x}"]
        for b, e in ((b0, e0), (b1, e1)):  # halves: the beginning has the fewer words
          assert len(b.split()) == (len(b.split()) + len(e.split())) // 2
          assert len(b.split()) + len(e.split()) >= mini_builders.COMPLETION_MIN_WORDS
        first += x == e0
        if data_dir is not None:  # beginnings from two documents
          ((d0, _),), ((d1, _),) = _tags(b0), _tags(b1)
          assert d0 != d1, r
      assert 0.4 < first / len(rows) < 0.6, (data_dir, split, first, len(rows))
      if data_dir is None:  # the endings start alike (no capital gives the pairing away)
        assert all(_start(r["options"][0]) == _start(r["options"][1]) for r in rows)
  assert mini_builders._halves("a b c d e f g") == ("a b c", "d e f g")


def test_fill_offers_the_blanked_word_and_three_words_not_in_the_line(synthetic):
  """mini_fill: a line with one word (4+ letters, once in the line, not a stopword) blanked;
  4 options: that word and 3 other documents' answers that are not in the line; the target
  is the line with the blank filled."""
  t = task_lib.get_task("mini_fill")
  for data_dir in (None, synthetic):
    for split in SPLITS:
      rows = _examples("mini_fill", split, data_dir)
      raw = mini._raw_examples("mini_fill", split, data_dir)
      position = np.zeros(mini_builders.FILL_OPTIONS)
      for r, ex in zip(rows, raw):
        passage, options, answer = ex["passage"], r["options"], ex["answer"]
        assert r["inputs"] == f"fill: {passage} options: " + " | ".join(options)
        assert passage.count(mini.BLANK) == 1 and len(set(options)) == mini_builders.FILL_OPTIONS
        assert r["targets"] == passage.replace(mini.BLANK, answer) and answer in options
        assert list(t.choices(r)) == [passage.replace(mini.BLANK, o) for o in options]
        assert re.fullmatch("[A-Za-z]{4,}", answer) and answer not in mini_builders.STOPWORDS
        words = [m.group() for m in mini_builders.WORD.finditer(r["targets"])]
        assert words.count(answer) == 1, r  # once in the line: not copied from the input
        assert not set(options) & set(words) - {answer}, r  # no distractor in the line
        position[options.index(answer)] += 1
      assert (position / len(rows) > 0.15).all(), (data_dir, split, position)
      if data_dir is None:  # distractors start like the answer, about as long
        same = np.mean([all(_start(o) == _start(r["options"][0]) for o in r["options"])
                        for r in rows])
        assert same > 0.9, (split, same)
        spread = [max(map(len, r["options"])) - min(map(len, r["options"])) for r in rows]
        assert np.median(spread) <= 3, (split, np.median(spread))


def test_phrase_order_shuffles_the_three_middle_pieces_of_a_line(synthetic):
  """mini_phrase_order: a line of 7+ words in 5 pieces, the middle three shown in another
  order, the first and last in place; the target is the line."""
  assert mini_builders.phrase_pieces("a b c d e f g".split()) == ["a b", "c d", "e", "f", "g"]
  assert mini_builders.phrase_pieces("a b c d e".split()) == ["a", "b", "c", "d", "e"]
  assert mini.phrase_order_choices(["a", "b", "c", "d", "e"]) == [
      "a b d c e", "a c b d e", "a c d b e", "a d b c e", "a d c b e"]
  for data_dir in (None, synthetic):
    for split in SPLITS:
      orders = set()
      for r in _examples("mini_phrase_order", split, data_dir):
        shown = r["inputs"][len("phrase order: "):].split(" | ")
        words = r["targets"].split(" ")
        pieces = mini_builders.phrase_pieces(words)
        assert len(words) >= mini_builders.PHRASE_ORDER_MIN_WORDS and len(shown) == 5
        assert (shown[0], shown[-1]) == (pieces[0], pieces[-1]) and shown != pieces, r
        orders.add(tuple(pieces[1:-1].index(p) for p in shown[1:-1]))
      assert len(orders) == 5, orders  # every other order of the middle is used


def test_every_example_is_well_formed_and_within_the_token_budget():
  from lm.data import tokenizer
  tok = tokenizer.default_tokenizer(1000)  # configs/t5.py:runlocal's (cached after first use)
  for name in NAMES:
    t = task_lib.get_task(name)
    for split in SPLITS:
      rows = t.examples(split)
      assert [r["idx"] for r in rows] == list(range(len(rows)))
      assert len({r["inputs"] for r in rows}) == len(rows), (name, split)  # no duplicates
      for r in rows:
        assert r["inputs"].startswith(PREFIX[name]) and r["targets"].strip()
        assert r["targets"] == " ".join(r["targets"].split())
        assert len(tok.encode(r["inputs"])) <= TOKEN_BUDGET, r
        assert len(tok.encode(r["targets"])) <= TOKEN_BUDGET, r
        if t.choices is not None:
          assert r["targets"] in t.choices(r)


def test_answers_are_recoverable_from_the_inputs(synthetic):
  for data_dir in (None, synthetic):
    for split in SPLITS:
      for r in _examples("mini_cloze", split, data_dir):
        passage = r["inputs"][len("cloze: "):]
        assert passage.count(mini.BLANK) == 1
        assert r["targets"] in mini._cloze_candidates(passage), r  # copied from the passage
      for r in _examples("mini_unshuffle", split, data_dir):
        shown = r["inputs"][len("unshuffle: "):].split(" | ")
        gold = r["targets"].split(" | ")
        assert len(gold) == 3 and sorted(shown) == sorted(gold) and shown != gold, r
      for r in _examples("mini_phrase_order", split, data_dir):  # the same words
        shown = r["inputs"][len("phrase order: "):].split(" | ")
        assert sorted(" ".join(shown).split(" ")) == sorted(r["targets"].split(" ")), r
  # Synthetic: the blank's word is the one written there, the order the document's.
  for r in _examples("mini_unshuffle", "validation", synthetic):
    assert [k for _, k in _tags(r["targets"])] == sorted(k for _, k in _tags(r["targets"]))


def _simulate(name, rows, rng):
  """Chance-baseline predictions (text) for preprocessed rows: a choice at random, as rank
  classification picks one; the choices rebuilt here from the inputs, not by the task."""
  if name in ("mini_next_line", "mini_same_doc", "mini_word_order"):
    return [rng.choice(r["options"]) for r in rows]
  if name == "mini_fill":
    return [r["passage"].replace(mini.BLANK, rng.choice(r["options"])) for r in rows]
  if name == "mini_completion":
    preds = []
    for r in rows:
      ends = r["options"] if rng.integers(2) else r["options"][::-1]
      preds.append(" | ".join(f"{b} {e}" for b, e in zip(r["beginnings"], ends)))
    return preds
  if name == "mini_cloze":  # a distinct candidate word
    return [rng.choice(mini.cloze_choices(r["inputs"][len("cloze: "):])) for r in rows]
  prefix, join = (("unshuffle: ", " | ") if name == "mini_unshuffle" else
                  ("phrase order: ", " "))
  preds = []
  for r in rows:
    shown = r["inputs"][len(prefix):].split(" | ")
    order = mini_builders._NON_IDENTITY[rng.integers(5)]
    if name == "mini_unshuffle":
      preds.append(join.join(shown[k] for k in order))
    else:  # the middle three pieces reordered, the ends in place
      preds.append(join.join([shown[0], *(shown[1 + k] for k in order), shown[-1]]))
  return preds


def test_chance_levels_match_simulated_random_baselines():
  rng = np.random.default_rng(0)
  for name in NAMES:
    t = task_lib.get_task(name)
    rows = t.examples("validation")
    golds = [t.postprocess(r["targets"], r, is_target=True) for r in rows]
    chance = mini.chance_level(name)
    runs = [t.compute_metrics(golds, [t.postprocess(p, r) for p, r in
                                      zip(_simulate(name, rows, rng), rows)])
            for _ in range(300)]
    for metric, value in chance.items():
      simulated = np.mean([m[metric] for m in runs])
      assert abs(simulated - value) < 1.0, (name, metric, simulated, value)
    assert t.compute_metrics(golds, golds)[mini.TASK_METRIC[name]] == 100.0
  # Two options; copying the shuffled lines never matches.
  assert mini.chance_level("mini_next_line") == {"accuracy": 50.0}
  assert mini.chance_level("mini_unshuffle")["exact_match"] == pytest.approx(20.0)
  t = task_lib.get_task("mini_unshuffle")
  rows = t.examples("validation")
  copies = [t.postprocess(r["inputs"][len("unshuffle: "):], r) for r in rows]
  golds = [t.postprocess(r["targets"], r, is_target=True) for r in rows]
  assert t.compute_metrics(golds, copies)["exact_match"] == 0.0
  # The cloze chance the descriptions state (a random candidate word), Python-dependent.
  assert 5.0 < mini.chance_level("mini_cloze")["exact_match"] < 25.0


def test_every_task_has_choices_holding_its_target(synthetic):
  """The suite rank-classifies every task: the gold target is always one of the choices,
  choices are distinct, and the shown order is never a choice of mini_unshuffle."""
  counts = {"mini_next_line": {2}, "mini_same_doc": {2}, "mini_unshuffle": {5},
            "mini_word_order": {2}, "mini_completion": {2}, "mini_fill": {mini_builders.FILL_OPTIONS},
            "mini_phrase_order": {5}}
  for data_dir in (None, synthetic):
    for name in NAMES:
      t = task_lib.get_task(name)
      for split in SPLITS:
        for r in _examples(name, split, data_dir):
          c = list(t.choices(r))
          assert r["targets"] in c and len(set(c)) == len(c), (name, r, c)
          if name in counts:
            assert len(c) in counts[name]
          if name == "mini_unshuffle":
            assert r["inputs"][len("unshuffle: "):] not in c
          if name == "mini_phrase_order":
            assert " ".join(r["inputs"][len("phrase order: "):].split(" | ")) not in c
          if name == "mini_cloze":
            passage = r["inputs"][len("cloze: "):]
            assert set(c) <= set(mini._cloze_candidates(passage)) and mini.BLANK not in c
  assert mini.cloze_choices("Return ___ and then ___ foobar Foobar that foobar baz") == [
      "foobar", "Foobar"]
  assert mini.unshuffle_choices(["b", "c", "a"]) == [
      "b | a | c", "c | b | a", "c | a | b", "a | b | c", "a | c | b"]


def test_metrics_and_postprocessors_on_hand_computed_cases():
  assert mini.accuracy(["yes", "no", "yes", "no"], ["yes", "yes", "yes", "no"]) == {
      "accuracy": 75.0}
  assert mini.exact_match(["a", "b"], ["a", "c"]) == {"exact_match": 50.0}
  t = task_lib.get_task("mini_unshuffle")
  gold = t.postprocess("x y | z | w", None, is_target=True)
  assert gold == ("x y", "z", "w")
  pred = t.postprocess(" x  y |w| z ", None)
  assert pred == ("x y", "w", "z")
  assert mini.line_accuracy([gold], [pred]) == {"line_accuracy": pytest.approx(100 / 3)}
  assert mini.line_accuracy([gold], [("x y",)]) == {"line_accuracy": pytest.approx(100 / 3)}
  assert t.compute_metrics([gold, gold], [gold, pred]) == {
      "exact_match": 50.0, "line_accuracy": pytest.approx(100 * (1 + 1 / 3) / 2)}
  assert task_lib.get_task("mini_cloze").postprocess("  Decimal \n") == "Decimal"


def test_unit_rules_and_input_cost_on_hand_computed_cases():
  assert mini_text._usable("Return the sum of a and b.")
  assert not mini_text._usable("IN NO EVENT SHALL THE AUTHOR BE LIABLE")  # licence capitals
  assert not mini_text._usable("two words") and not mini_text._usable("a | b c")
  # words 1 each; lower-case letters 1/4; other non-space characters 1.
  assert mini_builders.input_cost({"a": "abcd efgh", "options": ["X1 y"]}) == 2 + 2 + 2 + 0.25 + 2
  assert mini_builders.input_cost({"shuffled": ["abcd", "(x)"], "label": "yes"}) == 2 + 1.25 + 2
  dense = " ".join(["{0:#x};"] * 14)  # 98 characters of format code
  assert mini_builders.input_cost({"passage": dense}) > mini_builders.MAX_INPUT_COST
  assert mini_builders._cap([({"passage": dense},), ({"passage": "a b c"},)], 10,
                   np.random.default_rng(0)) == [{"passage": "a b c", "idx": 0}]


def test_mini_average_is_the_mean_of_the_headlines():
  results = {"mini_completion": {"accuracy": 80.0}, "mini_fill": {"accuracy": 70.0},
             "mini_cloze": {"exact_match": 30.0},
             "mini_phrase_order": {"exact_match": 20.0},
             "mini_word_order": {"accuracy": 50.0}, "glue_rte": {"accuracy": 0.0},
             "mini_unshuffle": {"exact_match": 0.0, "line_accuracy": 90.0}}
  assert mini.mini_average(results) == pytest.approx(50.0)  # outside the suite: ignored
  del results["mini_cloze"]
  with pytest.raises(ValueError, match=r"missing \[\"mini_cloze\['exact_match'\]\"\]"):
    mini.mini_average(results)


def test_bad_split_and_bad_corpora(tmp_path):
  with pytest.raises(ValueError, match=r"no split 'test'; expected one of \['train', "
                                       r"'validation'\]"):
    _examples("mini_cloze", "test")
  with pytest.raises(ValueError, match="no split 'test'"):
    mini._raw_examples("mini_cloze", "test", None)
  with pytest.raises(ValueError, match="unknown task 'mini_nope'; expected one of"):
    task_lib.get_task("mini_nope")
  with pytest.raises(ValueError, match=r"unknown mini task 'glue_rte'; expected one of \['mini_"):
    mini.chance_level("glue_rte")
  with pytest.raises(FileNotFoundError, match="does not exist"):
    _examples("mini_cloze", "train", str(tmp_path / "missing.txt"))
  empty = tmp_path / "empty.txt"
  empty.write_text("")
  with pytest.raises(ValueError, match="empty.txt"):
    _examples("mini_cloze", "train", str(empty))
  (tmp_path / "folder").mkdir()
  with pytest.raises(ValueError, match="holds no document files"):
    _examples("mini_cloze", "train", str(tmp_path / "folder"))
  words = tmp_path / "words.txt"  # documents, but no line of 3+ words
  words.write_text("\n".join(f"word{i}" for i in range(100)))
  with pytest.raises(ValueError, match="usable lines"):
    _examples("mini_next_line", "train", str(words))


def test_a_folder_of_text_files_is_read_in_sorted_order(tmp_path, synthetic):
  folder = tmp_path / "heldout"
  folder.mkdir()
  with open(synthetic) as f:
    docs = [json.loads(l)["text"] for l in f][:400]
  for i in range(2):  # two JSON-lines files, read in sorted order
    (folder / f"part{i}.jsonl").write_text(
        "".join(json.dumps({"text": d}) + "\n" for d in docs[i * 200:(i + 1) * 200]))
  assert mini_text.heldout_documents(str(folder)) == docs
  rows = _examples("mini_unshuffle", "validation", str(folder))
  assert rows and all(r["inputs"].startswith("unshuffle: doc") for r in rows)


def test_a_user_corpus_is_read_up_to_max_documents(synthetic, monkeypatch):
  mini_text._read_documents.cache_clear()
  monkeypatch.setattr(mini_text, "MAX_DOCUMENTS", 100)
  try:
    docs = mini_text.heldout_documents(synthetic)
    assert len(docs) == 100 and docs[0].startswith("doc0000 line0")
  finally:
    mini_text._read_documents.cache_clear()


@pytest.mark.skipif(sys.version_info[:3] != (3, 11, 7),
                    reason="the docs' size table is for the embedded corpus of Python 3.11.7")
def test_docs_size_table_matches_the_embedded_corpus():
  path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "downstream_mini.md")
  with open(path) as f:
    table = dict((m.group(1), (int(m.group(2)), int(m.group(3)))) for m in re.finditer(
        r"^\| `(mini_\w+)` \| (\d+) \| (\d+) \|$", f.read(), re.M))
  assert table == {name: tuple(len(_examples(name, split)) for split in SPLITS)
                   for name in NAMES}
