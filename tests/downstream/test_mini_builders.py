"""The mini suite's task builders (lm/downstream/mini_builders.py) on runs of units written by
hand, with a scripted random generator (each draw's argument checked, its value given) and a
stand-in for the distractor draw where a builder's own logic is tested: every expected example
is written out. Fast; the builders over real corpora: tests/downstream/test_mini.py."""
import numpy as np

from lm.downstream import mini_builders as mb


class ScriptedRng:
  """A stand-in for np.random.Generator: each call must be the next of `calls`, (method,
  argument, value); `done()` checks that every call was made."""

  def __init__(self, *calls):
    self.calls = list(calls)

  def _next(self, method, arg):
    assert self.calls, f"unexpected {method}({arg})"
    expected_method, expected_arg, value = self.calls.pop(0)
    assert (method, arg) == (expected_method, expected_arg), (method, arg)
    return value

  def integers(self, n):
    return self._next("integers", n)

  def permutation(self, n):
    return np.array(self._next("permutation", n), dtype=int)

  def choice(self, n, k, replace=True):
    assert replace is False
    return np.array(self._next("choice", (n, k)), dtype=int)

  def done(self):
    assert not self.calls, self.calls


class CyclingRng:
  """integers(n) gives the values of `seq` in turn, cycling; counts the calls."""

  def __init__(self, seq):
    self.seq, self.n = seq, 0

  def integers(self, n):
    value = self.seq[self.n % len(self.seq)]
    assert 0 <= value < n
    self.n += 1
    return value


def test_the_constants_docs_downstream_mini_states():
  assert mb.MAX_INPUT_COST == 100 and mb.DISTRACTOR_DRAWS == 16
  assert (mb.WORD_ORDER_MIN_WORDS, mb.COMPLETION_MIN_WORDS, mb.FILL_OPTIONS) == (5, 6, 4)
  assert (mb.PHRASE_ORDER_PIECES, mb.PHRASE_ORDER_MIN_WORDS) == (5, 7)
  assert mb._NON_IDENTITY == ((0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))
  assert mb._INPUT_FIELDS == ("a", "options", "passage", "shuffled")


def test_start_class():
  assert [mb._start_class(t) for t in ("abc", "Abc", "1bc", "(a", "", " a")] == [0, 1, 2, 2, 2, 2]


def test_distractor_of_no_other_document_is_none_after_200_draws():
  rng = ScriptedRng(*[("integers", 2, i % 2) for i in range(200)])
  assert mb._distractor([(0, "x"), (1, "avoided")], 0, rng, like="y", avoid=("avoided",)) is None
  rng.done()


def test_distractor_draws_16_distinct_units_and_keeps_the_closest_in_length():
  pool = [(1, "a" * (30 - i)) for i in range(20)]  # lengths 30 .. 11: later draws are closer
  rng = ScriptedRng(*[("integers", 20, i) for i in range(16)])
  assert mb._distractor(pool, 0, rng, like="a" * 10, avoid=()) == "a" * 15
  rng.done()


def test_distractor_skips_its_own_document_avoided_and_drawn_units_first_on_ties():
  pool = [(1, "bb"), (1, "cc"), (0, "aa"), (1, "avoid")]
  rng = CyclingRng([1, 0, 2, 3])
  assert mb._distractor(pool, 0, rng, like="dd", avoid=("avoid",)) == "cc"
  assert rng.n == 200  # two distinct units only: every draw made
  # The start (lower case, capital, other) comes before the length.
  pool = [(1, "Abcd"), (1, "abcdefghij"), (1, "1bcd")]
  rng = CyclingRng([0, 1, 2])
  assert mb._distractor(pool, 0, rng, like="abcd", avoid=()) == "abcdefghij"
  assert mb._distractor(pool, 0, CyclingRng([0, 1, 2]), like="Xy", avoid=()) == "Abcd"
  assert mb._distractor(pool, 0, CyclingRng([1, 2, 0]), like="(y", avoid=()) == "1bcd"
  # Of the same start, the closest in length, shorter or longer.
  pool = [(1, "abcdefg"), (1, "ab"), (1, "abcde")]
  assert mb._distractor(pool, 0, CyclingRng([0, 1, 2]), like="abcd", avoid=()) == "abcde"
  pool = [(1, "abcdefg"), (1, "abc"), (1, "abcdef")]
  assert mb._distractor(pool, 0, CyclingRng([0, 1, 2]), like="abcd", avoid=()) == "abc"
  # Another start, however close in length, only when no unit starts alike.
  pool = [(1, "ab"), (1, "1bcd")]
  assert mb._distractor(pool, 0, CyclingRng([0, 1]), like="(y", avoid=()) == "1bcd"
  # Documents before and after the example's own.
  assert mb._distractor([(0, "ab"), (1, "abcdef")], 1, CyclingRng([1, 0]), like="ab",
                        avoid=()) == "ab"
  assert mb._distractor([(2, "ab"), (1, "abcdef")], 1, CyclingRng([1, 0]), like="ab",
                        avoid=()) == "ab"


class FakeDistractor:
  """Stands in for mb._distractor: answers[(d, like)] is the list of values its calls return
  in turn (None when used up); records (pool, d, like, avoid) of each call."""

  def __init__(self, answers):
    self.answers = {k: list(v) for k, v in answers.items()}
    self.calls = []

  def __call__(self, pool, d, rng, like, avoid):
    self.calls.append((list(pool), d, like, list(avoid)))
    left = self.answers.get((d, like), [])
    return left.pop(0) if left else None


def test_next_line_pairs_adjacent_distinct_units_of_a_run(monkeypatch):
  fake = FakeDistractor({(0, "a2"): ["N1"], (1, "b0"): ["N3"]})
  monkeypatch.setattr(mb, "_distractor", fake)
  b1 = "".join(["b", "1"])  # equal to "b1", another object
  docs = [[["a1", "a2", "a3"], ["a4"]], [["b1", b1, "b0"]]]
  rng = ScriptedRng(("integers", 2, 0), ("integers", 2, 1))
  assert mb.build_next_line(docs, rng) == [
      ({"a": "a1", "options": ["a2", "N1"], "answer": "a2"},),
      ({"a": "b1", "options": ["N3", "b0"], "answer": "b0"},)]
  rng.done()
  pool = [(0, "a2"), (0, "a3"), (1, "b0")]
  assert fake.calls == [(pool, 0, "a2", ["a1", "a2"]), (pool, 0, "a3", ["a2", "a3"]),
                        (pool, 1, "b0", ["b1", "b0"])]


def test_same_doc_pairs_a_unit_with_one_at_least_2_units_away(monkeypatch):
  fake = FakeDistractor({(d, b): [f"N-{b}"] * 2 for d, b in
                         [(0, "u3"), (0, "u0"), (1, "v2"), (1, "v0")]})
  monkeypatch.setattr(mb, "_distractor", fake)
  w0 = "".join(["w", "0"])  # equal to "w0", another object
  docs = [[["u0", "u1"], ["u2", "u3"]], [["v0", "v1", "v2"]], [["w0", "w1", w0]]]
  rng = ScriptedRng(("integers", 2, 1),  # u0: of u2, u3
                    ("integers", 1, 0),  # u1: u3
                    ("integers", 1, 0),  # u2: u0
                    ("integers", 2, 0),  # u3: of u0, u1
                    ("integers", 1, 0),  # v0: v2
                    ("integers", 1, 0),  # v2: v0 (v1 has none; w0's far unit is itself)
                    *[("integers", 2, k % 2) for k in range(6)])
  out = mb.build_same_doc(docs, rng)
  rng.done()
  positives = [("u0", "u3"), ("u1", "u3"), ("u2", "u0"), ("u3", "u0"), ("v0", "v2"),
               ("v2", "v0")]
  assert out == [({"a": a, "options": [b, f"N-{b}"] if k % 2 == 0 else [f"N-{b}", b],
                   "answer": b},) for k, (a, b) in enumerate(positives)]
  pool = [(0, "u3"), (0, "u3"), (0, "u0"), (0, "u0"), (1, "v2"), (1, "v0")]
  assert [c[:2] for c in fake.calls] == [(pool, 0)] * 4 + [(pool, 1)] * 2
  assert [c[3] for c in fake.calls] == [list(p) for p in positives]


def test_cloze_blanks_each_occurrence_of_a_repeated_word_in_windows_of_3_units():
  docs = [[["Bread makes bread good", "and bread breads more", "with With With that",
            "milk here and milk here"], ["Return Return this"]],
          [["none nones Nones none"]]]
  assert mb.build_cloze(docs, None) == [
      ({"passage": "Bread makes ___ good and bread breads more with With With that",
        "answer": "bread"},),
      ({"passage": "Bread makes bread good and ___ breads more with With With that",
        "answer": "bread"},),
      ({"passage": "___ here and milk here", "answer": "milk"},),
      ({"passage": "milk here and ___ here", "answer": "milk"},),
      ({"passage": "milk ___ and milk here", "answer": "here"},),
      ({"passage": "milk here and milk ___", "answer": "here"},),
      ({"passage": "___ nones Nones none", "answer": "none"},),
      ({"passage": "none nones Nones ___", "answer": "none"},)]
  # A word that occurs once, or a stopword in either case, gives none.
  assert mb.build_cloze([[["some word That that"]]], None) == []
  assert mb.build_cloze([[["Some some None None"]]], None) == []


def test_unshuffle_shows_every_window_of_3_distinct_units_in_another_order():
  docs = [[["a", "b", "c", "d"], ["e", "f"]], [["g", "g", "h", "i"]]]
  rng = ScriptedRng(("integers", 5, 0), ("integers", 5, 4), ("integers", 5, 2))
  assert mb.build_unshuffle(docs, rng) == [
      ({"shuffled": ["a", "c", "b"], "lines": ["a", "b", "c"]},),
      ({"shuffled": ["d", "c", "b"], "lines": ["b", "c", "d"]},),
      ({"shuffled": ["h", "i", "g"], "lines": ["g", "h", "i"]},)]
  rng.done()


def test_scramble_interior_draws_until_the_order_differs():
  rng = ScriptedRng(("permutation", 3, [0, 1, 2]), ("permutation", 3, [2, 0, 1]))
  assert mb.scramble_interior(["A", "x", "y", "z", "B"], rng) == ["A", "z", "x", "y", "B"]
  rng.done()
  rng = ScriptedRng(("permutation", 2, [1, 0]))
  assert mb.scramble_interior(["A", "x", "y", "B"], rng) == ["A", "y", "x", "B"]
  rng.done()
  assert mb.scramble_interior(["A", "x", "x", "B"], ScriptedRng()) is None
  assert mb.scramble_interior(["A", "B"], ScriptedRng()) is None


def test_word_order_pairs_units_of_5_words_with_their_scramble():
  docs = [[["one two three four", "one two three four five", "A x x x B.", "p q r s t u"]]]
  rng = ScriptedRng(("permutation", 3, [2, 1, 0]), ("integers", 2, 1),
                    ("permutation", 4, [1, 0, 2, 3]), ("integers", 2, 0))
  assert mb.build_word_order(docs, rng) == [
      ({"options": ["one four three two five", "one two three four five"],
        "answer": "one two three four five"},),
      ({"options": ["p q r s t u", "p r q s t u"], "answer": "p q r s t u"},)]
  rng.done()


def test_halves():
  assert mb._halves("a b c d e f") == ("a b c", "d e f")
  assert mb._halves("a b c d e f g") == ("a b c", "d e f g")
  assert mb._halves("a") == ("", "a")


def test_completion_pairs_a_beginning_with_another_documents_ending(monkeypatch):
  fake = FakeDistractor({(0, "d e f"): ["p q r s"], (0, "p q r s"): ["d e f"],
                         (1, "p q r s"): ["p q r"], (2, "d e f"): ["X Y Z"],
                         (3, "p q r"): ["d e f"], (4, "X Y Z"): ["d e f"]})
  monkeypatch.setattr(mb, "_distractor", fake)
  docs = [[["a b c d e f", "g h i j k", "k l m p q r s"]], [["m n o p q r s"]],
          [["x y z d e f"]], [["a b c p q r"]], [["u v w X Y Z"]], [["q r s T U V"]]]
  rng = ScriptedRng(("integers", 2, 0), ("integers", 2, 1), ("integers", 2, 0))
  assert mb.build_completion(docs, rng) == [
      # "p q r s" ends units of documents 0 and 1: the other document's beginning.
      ({"a": ["a b c", "m n o"], "options": ["d e f", "p q r s"],
        "answer": ["d e f", "p q r s"]},),
      ({"a": ["k l m", "x y z"], "options": ["d e f", "p q r s"],
        "answer": ["p q r s", "d e f"]},),
      ({"a": ["m n o", "a b c"], "options": ["p q r s", "p q r"],
        "answer": ["p q r s", "p q r"]},)]
      # Left out: documents 2's and 4's (an ending of another start), document 3's (the
      # other beginning is its own), document 5's (no distractor).
  rng.done()
  pool = [(0, "d e f"), (0, "p q r s"), (1, "p q r s"), (2, "d e f"), (3, "p q r"),
          (4, "X Y Z"), (5, "T U V")]
  assert fake.calls == [(pool, d, end, [end]) for d, end in pool]


def test_fill_blanks_a_word_once_in_its_unit_and_offers_3_distractors(monkeypatch):
  fake = FakeDistractor({(0, "apple"): ["n1", "n2", "n3", "n4"], (1, "melon"): ["m1"],
                         (2, "Kiwi"): ["k1", "k2", "k3"]})
  monkeypatch.setattr(mb, "_distractor", fake)
  docs = [[["Some apple and pear with pear"]], [["grape melon", "ab cd"]], [["Kiwi None"]]]
  rng = ScriptedRng(("integers", 1, 0),  # apple (Some and with are stopwords, pear is twice)
                    ("integers", 2, 1),  # of grape, melon
                    ("integers", 1, 0),  # Kiwi (None is a stopword)
                    ("permutation", 4, [3, 0, 2, 1]), ("permutation", 4, [0, 1, 2, 3]))
  assert mb.build_fill(docs, rng) == [
      ({"passage": "Some ___ and pear with pear", "options": ["n3", "apple", "n2", "n1"],
        "answer": "apple"},),
      ({"passage": "___ None", "options": ["Kiwi", "k1", "k2", "k3"], "answer": "Kiwi"},)]
  rng.done()
  pool = [(0, "apple"), (1, "melon"), (2, "Kiwi")]
  shown = ["Some", "pear", "with", "pear"]
  assert fake.calls == [
      (pool, 0, "apple", ["apple", *shown]), (pool, 0, "apple", ["apple", "n1", *shown]),
      (pool, 0, "apple", ["apple", "n1", "n2", *shown]),
      (pool, 1, "melon", ["melon", "grape"]), (pool, 1, "melon", ["melon", "m1", "grape"]),
      (pool, 2, "Kiwi", ["Kiwi", "None"]), (pool, 2, "Kiwi", ["Kiwi", "k1", "None"]),
      (pool, 2, "Kiwi", ["Kiwi", "k1", "k2", "None"])]


def test_phrase_pieces_longer_pieces_first():
  words = "a b c d e f g h".split()
  assert mb.phrase_pieces(words) == ["a b", "c d", "e f", "g", "h"]
  assert mb.phrase_pieces(words + ["i", "j", "k"]) == ["a b c", "d e", "f g", "h i", "j k"]
  assert mb.phrase_pieces(words, 3) == ["a b c", "d e f", "g h"]
  assert mb.phrase_pieces(["a", "b"], 3) == ["a", "b", ""]


def test_middle_orders():
  assert mb._middle_orders(["A", "b", "c", "d", "E"]) == [
      "A b d c E", "A c b d E", "A c d b E", "A d b c E", "A d c b E"]
  assert mb._middle_orders(["A", "b c", "d", "e f", "G"])[0] == "A b c e f d G"


def test_phrase_order_shows_the_middle_pieces_of_units_of_7_words_reordered():
  docs = [[["a b c d e f", "x y y y y y z", "a b c d e f g", "p q b c b c r"],
           ["one two three four five six seven eight"]]]
  rng = ScriptedRng(("integers", 5, 3), ("integers", 5, 0))
  assert mb.build_phrase_order(docs, rng) == [
      ({"shuffled": ["a b", "f", "c d", "e", "g"], "answer": "a b c d e f g"},),
      # Left out, and the run goes on after them: "x y y y y y z" and "p q b c b c r"
      # (reordered, a line repeats).
      ({"shuffled": ["one two", "three four", "seven", "five six", "eight"],
        "answer": "one two three four five six seven eight"},)]
  rng.done()


def test_input_cost_counts_the_shown_fields_only():
  # per word 1, per lower-case letter 1/4, per other non-space character 1
  assert mb.input_cost({"passage": "ab C1"}) == 2 + 0.5 + 2
  assert mb.input_cost({"shuffled": ["ab", "cd"], "a": None}) == 2 + 1
  assert mb.input_cost({"answer": "long answer here", "lines": ["x"], "label": "y"}) == 0
  assert mb.input_cost({"a": ["ab", "cd"], "options": "Xy"}) == 2 + 1 + 1 + 1.25
  assert mb.input_cost({}) == 0


def test_cap_drops_repeated_inputs_and_costly_examples_then_samples_and_shuffles():
  exactly_100 = " ".join(["aaaa"] * 50)  # 50 words + 200 letters / 4
  assert mb.input_cost({"passage": exactly_100}) == 100
  over = exactly_100 + "a"
  groups = [({"a": "x1"},), ({"a": "x2"},), ({"a": "x1", "answer": "other"},),
            ({"passage": over},), ({"passage": exactly_100},), ({"a": "x3"},)]
  rng = ScriptedRng(("choice", (4, 2), [3, 1]), ("permutation", 2, [1, 0]))
  assert mb._cap(groups, 2, rng) == [{"a": "x3", "idx": 0}, {"a": "x2", "idx": 1}]
  rng.done()
  assert groups[5] == ({"a": "x3"},)  # the input's examples are copied, not changed
  rng = ScriptedRng(("permutation", 4, [0, 1, 2, 3]))
  assert mb._cap(groups, 4, rng) == [{"a": "x1", "idx": 0}, {"a": "x2", "idx": 1},
                                     {"passage": exactly_100, "idx": 2}, {"a": "x3", "idx": 3}]
  rng.done()
  assert mb._cap([], 10, ScriptedRng(("permutation", 0, []))) == []


def test_cap_keeps_whole_groups_of_several_examples():
  groups = [({"a": "x"}, {"a": "y"}), ({"a": "z"}, {"a": "y"}), ({"a": "u"}, {"a": "v"}),
            ({"a": "w"}, {"a": "t"})]
  # The second group shares an input with the first: dropped. 3 groups of 2, limit 5: 2.
  rng = ScriptedRng(("choice", (3, 2), [2, 0]), ("permutation", 4, [3, 2, 1, 0]))
  assert mb._cap(groups, 5, rng) == [{"a": "t", "idx": 0}, {"a": "w", "idx": 1},
                                     {"a": "y", "idx": 2}, {"a": "x", "idx": 3}]
  rng.done()
