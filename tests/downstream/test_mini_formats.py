"""The mini tasks' formats, choices, metrics, chance levels and registration
(lm/downstream/mini.py) on raw examples written by hand: every expected text is written out.
Fast (no corpus is read; stand-ins for the loader and the builders); the tasks over real
corpora: tests/downstream/test_mini.py."""
import dataclasses
import pathlib

import numpy as np
import pytest

from lm.downstream import mini
from lm.downstream import mini_builders
from lm.downstream import mini_text
from lm.downstream import task as task_lib

NAMES = ("mini_next_line", "mini_same_doc", "mini_cloze", "mini_unshuffle", "mini_word_order",
         "mini_completion", "mini_fill", "mini_phrase_order")


def _task(name):
  return task_lib.get_task(name)


def test_the_constants_the_suite_and_the_builders_seeds():
  assert mini.SUITE_SEED == 0 and mini.MAX_EXAMPLES == {"train": 2000, "validation": 500}
  assert mini.MAX_TOKENS == 128 and mini.UNSHUFFLE_SEPARATOR == " | " and mini.BLANK == "___"
  assert mini.SUITE_VERSION == 3 and mini.OPTIONS == " options: "
  assert mini.HEADLINE == {"mini_completion": "accuracy", "mini_fill": "accuracy",
                           "mini_cloze": "exact_match", "mini_phrase_order": "exact_match",
                           "mini_word_order": "accuracy"}
  assert {n: (b.seed, b.build) for n, b in mini._BUILDERS.items()} == {
      "mini_next_line": (1, mini_builders.build_next_line),
      "mini_same_doc": (2, mini_builders.build_same_doc),
      "mini_cloze": (3, mini_builders.build_cloze),
      "mini_unshuffle": (4, mini_builders.build_unshuffle),
      "mini_word_order": (5, mini_builders.build_word_order),
      "mini_completion": (6, mini_builders.build_completion),
      "mini_fill": (7, mini_builders.build_fill),
      "mini_phrase_order": (8, mini_builders.build_phrase_order)}
  with pytest.raises(dataclasses.FrozenInstanceError):
    mini._BUILDERS["mini_cloze"].seed = 9  # type: ignore[misc]
  assert tuple(t.name for t in mini.TASKS) == NAMES
  assert all(_task(t.name) is t for t in mini.TASKS)


def test_metrics_on_hand_computed_cases():
  assert mini.accuracy(["a", "b", "c", "d"], ["a", "x", "c", "d"]) == {"accuracy": 75.0}
  assert mini.accuracy([("a", "b")], [("a", "b")]) == {"accuracy": 100.0}
  assert mini.exact_match(["a", "b", "c", "d"], ["x", "b", "y", "z"]) == {"exact_match": 25.0}
  gold = ("a", "b", "c")
  got = mini.line_accuracy([gold] * 4, [("a", "c", "b"), ("a", "b", "c", "d"), ("a",), ()])
  assert got == {"line_accuracy": pytest.approx(100 * (1 / 3 + 1 + 1 / 3 + 0) / 4)}
  assert mini.line_accuracy([("x", "y")], [("y", "x")]) == {"line_accuracy": 0.0}


def test_mini_average_is_the_mean_of_the_five_headlines():
  results = {"mini_completion": {"accuracy": 90.0, "exact_match": 0.0},
             "mini_fill": {"accuracy": 60.0}, "mini_cloze": {"exact_match": 30.0},
             "mini_phrase_order": {"exact_match": 20.0, "accuracy": 99.0},
             "mini_word_order": {"accuracy": 50.0}, "mini_next_line": {"accuracy": 0.0}}
  assert mini.mini_average(results) == 50.0
  del results["mini_fill"]
  results["mini_cloze"] = {"accuracy": 30.0}
  with pytest.raises(ValueError, match=r"^mini_average needs every mini task's headline metric; "
                     r"missing \[\"mini_fill\['accuracy'\]\", \"mini_cloze\['exact_match'\]\"\]: "
                     r"evaluate all of \['mini_cloze', 'mini_completion', 'mini_fill', "
                     r"'mini_phrase_order', 'mini_word_order'\]\.$"):
    mini.mini_average(results)


def test_choice_tasks_show_line_a_and_the_options():
  raw = {"a": "line A", "options": ["x y", "z w"], "answer": "z w", "idx": 3}
  for name, prefix in (("mini_next_line", "next line: "), ("mini_same_doc", "same document: ")):
    t = _task(name)
    row = t.preprocess(raw)
    assert row == {"inputs": f"{prefix}line A options: x y | z w", "targets": "z w",
                   "options": ["x y", "z w"], "idx": 3}
    assert row["options"] is not raw["options"]
    assert t.choices(row) == ["x y", "z w"] and t.postprocess("  z \n w ") == "z w"
    assert t.metric_fns == (mini.accuracy,)


def test_fill_shows_the_passage_and_the_words():
  t = _task("mini_fill")
  raw = {"passage": "the ___ sat", "options": ["dog", "cat"], "answer": "cat", "idx": 0}
  row = t.preprocess(raw)
  assert row == {"inputs": "fill: the ___ sat options: dog | cat", "targets": "the cat sat",
                 "passage": "the ___ sat", "options": ["dog", "cat"], "idx": 0}
  assert t.choices(row) == ["the dog sat", "the cat sat"]
  assert t.metric_fns == (mini.accuracy,) and t.postprocess(" a  b ") == "a b"


def test_completion_shows_the_beginnings_and_the_endings():
  t = _task("mini_completion")
  raw = {"a": ["b0 x", "b1"], "options": ["e1", "e0 y"], "answer": ["e0 y", "e1"], "idx": 1}
  row = t.preprocess(raw)
  assert row == {"inputs": "complete: b0 x | b1 options: e1 | e0 y",
                 "targets": "b0 x e0 y | b1 e1", "beginnings": ["b0 x", "b1"],
                 "options": ["e1", "e0 y"], "idx": 1}
  assert t.choices(row) == ["b0 x e1 | b1 e0 y", "b0 x e0 y | b1 e1"]
  assert mini.completion_lines(["a", "b", "c"], ["1", "2", "3"]) == "a 1 | b 2 | c 3"
  assert t.metric_fns == (mini.accuracy,)


def test_phrase_order_shows_the_pieces_and_offers_the_other_orders():
  t = _task("mini_phrase_order")
  raw = {"shuffled": ["a", "d", "b", "c", "e"], "answer": "a b c d e", "idx": 2}
  row = t.preprocess(raw)
  assert row == {"inputs": "phrase order: a | d | b | c | e", "targets": "a b c d e", "idx": 2}
  assert t.choices(row) == ["a d c b e", "a b d c e", "a b c d e", "a c d b e", "a c b d e"]
  assert mini.phrase_order_choices(["A", "b", "c d", "e", "F"]) == [
      "A b e c d F", "A c d b e F", "A c d e b F", "A e b c d F", "A e c d b F"]
  assert t.metric_fns == (mini.exact_match,) and t.postprocess(" a  b ") == "a b"


def test_word_order_shows_the_two_options():
  t = _task("mini_word_order")
  row = t.preprocess({"options": ["b a c", "a b c"], "answer": "a b c", "idx": 5})
  assert row == {"inputs": "word order: options: b a c | a b c", "targets": "a b c",
                 "options": ["b a c", "a b c"], "idx": 5}
  assert t.choices(row) == ["b a c", "a b c"] and t.metric_fns == (mini.accuracy,)


def test_cloze_shows_the_passage_and_offers_its_distinct_candidate_words():
  t = _task("mini_cloze")
  row = t.preprocess({"passage": "Apple ___ apple pear with With None none apple",
                      "answer": "apple", "idx": 4})
  assert row == {"inputs": "cloze: Apple ___ apple pear with With None none apple",
                 "targets": "apple", "idx": 4}
  # Distinct words of 4+ letters in order, not stopwords in either case ("With"; "None").
  assert t.choices(row) == ["Apple", "apple", "pear", "none"]
  assert mini._cloze_candidates("a ___ word, words; x_word wordy") == ["word", "words", "wordy"]
  assert t.metric_fns == (mini.exact_match,) and t.postprocess(" x ") == "x"


def test_unshuffle_shows_the_lines_and_offers_the_other_orders():
  t = _task("mini_unshuffle")
  row = t.preprocess({"shuffled": ["b", "c", "a"], "lines": ["a", "b", "c"], "idx": 0})
  assert row == {"inputs": "unshuffle: b | c | a", "targets": "a | b | c", "idx": 0}
  assert t.choices(row) == ["b | a | c", "c | b | a", "c | a | b", "a | b | c", "a | c | b"]
  assert t.postprocess("a|b  x | c") == ("a", "b x", "c")
  assert t.metric_fns == (mini.exact_match, mini.line_accuracy)


@pytest.fixture
def raw_of(monkeypatch):
  """Stands in for mini._raw_examples: raw[name] are a task's examples; records the calls."""
  calls, raw = [], {}

  def fake(name, split, data_dir):
    calls.append((name, split, data_dir))
    return raw[name]
  monkeypatch.setattr(mini, "_raw_examples", fake)
  return raw, calls


def test_chance_levels_of_hand_written_examples(raw_of):
  raw, calls = raw_of
  two, four = {"options": ["a", "b"]}, {"options": ["a", "b", "c", "d"]}
  for name in ("mini_next_line", "mini_same_doc", "mini_word_order", "mini_completion",
               "mini_fill"):
    raw[name] = [two, four]
    assert mini.chance_level(name) == {"accuracy": pytest.approx(100 * (1 / 2 + 1 / 4) / 2)}
  raw["mini_cloze"] = [{"passage": "pear ___ pear plum"},
                       {"passage": "Apple ___ apple with pear plum none"}]
  assert mini.chance_level("mini_cloze") == {
      "exact_match": pytest.approx(100 * (1 / 2 + 1 / 5) / 2)}
  raw["mini_phrase_order"] = [{"shuffled": ["a", "b", "c", "d", "e"], "answer": "x"}]
  assert mini.chance_level("mini_phrase_order") == {"exact_match": 20.0}
  raw["mini_unshuffle"] = [{"shuffled": ["b", "c", "a"], "lines": ["a", "b", "c"]}]
  # The 5 orders of b c a other than shown: b a c, c b a, c a b, a b c, a c b; lines right
  # at their place: 1, 1, 0, 3, 1 of 3.
  assert mini.chance_level("mini_unshuffle") == {
      "exact_match": pytest.approx(20.0), "line_accuracy": pytest.approx(100 * 6 / 15)}
  assert calls == [(n, "validation", None) for n in (
      "mini_next_line", "mini_same_doc", "mini_word_order", "mini_completion", "mini_fill",
      "mini_cloze", "mini_phrase_order", "mini_unshuffle")]
  mini.chance_level("mini_fill", "train", "some/dir")
  assert calls[-1] == ("mini_fill", "train", "some/dir")
  # Names built at run time (a flag's value) are equal to the literals, not the same objects.
  for name in ("mini_cloze", "mini_phrase_order", "mini_unshuffle", "mini_fill"):
    assert mini.chance_level("".join(name)) == mini.chance_level(name)
  with pytest.raises(ValueError, match=r"^unknown mini task 'mini_nope'; expected one of "
                                       r"\['mini_cloze', 'mini_completion'"):
    mini.chance_level("mini_nope")


def test_raw_examples_are_built_with_the_tasks_seed_and_capped(monkeypatch):
  seen = {}

  def build(docs, rng):
    seen["docs"], seen["draw"] = docs, rng.integers(2**62)
    return [({"x": 1},), ({"x": 2},)]

  def cap(groups, limit, rng):
    seen["cap"] = (groups, limit, rng.integers(2**62))
    return [{"x": 1, "idx": 0}]

  monkeypatch.setattr(mini, "_BUILDERS", {"mini_fill": mini._Builder(7, build)})
  monkeypatch.setattr(mini_text, "splits", lambda d: {"train": ["T", d], "validation": ["V", d]})
  monkeypatch.setattr(mini_builders, "_cap", cap)
  raw_tuple = mini._raw_tuple.__wrapped__
  for split, index in (("train", 0), ("validation", 1)):
    assert raw_tuple("mini_fill", split, "dir") == ({"x": 1, "idx": 0},)
    rng = np.random.default_rng([0, 7, index])
    assert seen["docs"] == [split[0].upper(), "dir"] and seen["draw"] == rng.integers(2**62)
    assert seen["cap"] == ([({"x": 1},), ({"x": 2},)], mini.MAX_EXAMPLES[split],
                           rng.integers(2**62))


def test_a_split_without_examples_is_refused(monkeypatch):
  monkeypatch.setattr(mini, "_BUILDERS", {"mini_fill": mini._Builder(7, lambda d, r: [])})
  monkeypatch.setattr(mini_text, "splits", lambda d: {"train": [], "validation": []})
  raw_tuple = mini._raw_tuple.__wrapped__
  with pytest.raises(ValueError, match=r"^task 'mini_fill': 'some/dir' gives no train example; "
                                       r"point data_dir at more held-out text\.$"):
    raw_tuple("mini_fill", "train", "some/dir")
  for split in ("validation", "".join("validation")):  # a split name built at run time too
    with pytest.raises(ValueError, match=r"^task 'mini_fill': the embedded corpus's held-out "
                                         r"split gives no validation example"):
      raw_tuple("mini_fill", split, None)
  with pytest.raises(ValueError, match=r"^task 'mini_fill': the embedded corpus's pre-training "
                                       r"split gives no train example"):
    raw_tuple("mini_fill", "train", None)


def test_raw_examples_are_copies_read_with_a_path_as_a_string(monkeypatch):
  calls = []
  stored = ({"a": 1},)

  def fake(name, split, data_dir):
    calls.append((name, split, data_dir))
    return stored
  monkeypatch.setattr(mini, "_raw_tuple", fake)
  got = mini._raw_examples("mini_fill", "train", pathlib.Path("some/dir"))
  assert got == [{"a": 1}] and got[0] is not stored[0]
  mini._raw_examples("mini_fill", "validation", None)
  assert calls == [("mini_fill", "train", "some/dir"), ("mini_fill", "validation", None)]
  assert type(calls[0][2]) is str
  assert _task("mini_fill").load("train", "d") == [{"a": 1}]
  assert calls[-1] == ("mini_fill", "train", "d")
  with pytest.raises(ValueError, match=r"^task 'mini_fill' has no split 'test'; expected one of "
                                       r"\['train', 'validation'\]\.$"):
    mini._raw_examples("mini_fill", "test", None)
