"""The mini suite's text (lm/downstream/mini_text.py) on documents written by hand: units,
runs, the split of a user corpus, the errors. Fast (no task is built); the construction as a
whole: tests/downstream/test_mini.py."""
import hashlib
import json

import pytest

from lm.downstream import mini_text


def test_the_constants_docs_downstream_mini_states():
  assert (mini_text.HELDOUT_FRACTION, mini_text.HELDOUT_SEED) == (0.01, 0)
  assert mini_text.VALIDATION_DOC_FRACTION == 0.4 and mini_text.TRAIN_DOCUMENTS == 1200
  assert mini_text.MAX_DOCUMENTS == 20_000 and mini_text.SPLITS == ("train", "validation")
  assert (mini_text.MIN_UNIT_WORDS, mini_text.MAX_UNIT_CHARS) == (3, 100)
  assert mini_text.BLANK == "___"


def test_a_unit_has_3_words_at_most_100_characters_and_at_most_a_third_capitals():
  usable = mini_text._usable
  assert usable("a b c") and not usable("a b") and not usable("")
  assert usable("a b " + "c" * 96) and not usable("a b " + "c" * 97)  # 100 and 101 characters
  assert not usable("a | b") and not usable("a ___ b") and not usable("a b_c ___")
  # 2 capitals of 6 characters: exactly a third (kept); of 5, more (dropped).
  assert usable("A B cd") and not usable("A B c") and usable("A b cd")
  assert usable("ab cd ef") and not usable("ABC DE f")


def test_clean_collapses_whitespace():
  assert mini_text.clean("  a\tb \n c  ") == "a b c"
  assert mini_text.clean("") == ""


def test_document_units_runs_end_at_dropped_lines_not_blank_ones():
  doc = "one two three\n\n  four  five\tsix \nx\nseven eight nine\nten eleven twelve\nTWO WORDS"
  assert mini_text.document_units(doc) == [["one two three", "four five six"],
                                           ["seven eight nine", "ten eleven twelve"]]
  assert mini_text.document_units("x\n\none two three") == [["one two three"]]
  assert mini_text.document_units("") == [] and mini_text.document_units("x y") == []


def test_a_line_over_100_characters_gives_its_sentences():
  first = "The first sentence of this line is here."  # 40 characters
  line = f"{first} And (a second one) follows it! \"Third one\" ends? lower case stays. X"
  assert len(line) > 100
  assert mini_text.document_units(line) == [
      [first, "And (a second one) follows it!", "\"Third one\" ends? lower case stays."]]
  # The last piece "X" is no unit: it ends the run.
  assert mini_text.document_units(line + "\none two three") == [
      [first, "And (a second one) follows it!", "\"Third one\" ends? lower case stays."],
      ["one two three"]]
  exact = "Aaaa bbbb cccc. " + "Dddd " * 16 + "eeee"  # 100 characters: one unit, not split
  assert len(exact) == 100
  assert mini_text.document_units(exact) == [[exact]]


def _fraction(text):
  return int(hashlib.sha256(text.encode()).hexdigest()[:16], 16) / 2**64


def test_digest_fraction_is_the_first_8_bytes_of_sha256_over_2_to_the_64():
  for text in ("", "a", "doc one\nline two", "é"):
    assert mini_text._digest_fraction(text) == _fraction(text)
    assert 0 <= mini_text._digest_fraction(text) < 1
  assert mini_text._digest_fraction("a") == pytest.approx(0.79137, abs=1e-5)


def test_without_removes_units_and_splits_runs_there():
  runs = [["a", "b", "c", "d"], ["e"]]
  assert mini_text._without(runs, {"b"}) == [["a"], ["c", "d"], ["e"]]
  assert mini_text._without(runs, {"a", "e"}) == [["b", "c", "d"]]
  assert mini_text._without(runs, set()) == runs
  assert mini_text._without(runs, {"a", "b", "c", "d", "e"}) == []


def test_a_user_corpus_is_split_by_digest_first_copies_kept():
  docs = [f"document {i}\nits line" for i in range(30)]
  out = mini_text._assign(tuple(docs + docs[:5]), None)
  train = [d for d in docs if _fraction(d) >= 0.4]
  val = [d for d in docs if _fraction(d) < 0.4]
  assert train and val
  assert out == {"train": tuple(train), "validation": tuple(val)}


def test_with_train_side_documents_all_held_out_ones_are_validation():
  out = mini_text._assign(("h1", "h2", "h1"), ("t1", "h2", "t2", "t1"))
  assert out == {"train": ("t1", "t2"), "validation": ("h1", "h2")}
  assert mini_text._assign(("h1",), ()) == {"train": (), "validation": ("h1",)}


def test_split_documents_drops_excluded_and_train_units_from_validation():
  held = ["a b c\nd e f", "g h i\nx\nj k l", "j k l", "d e f"]
  train = ["m n o\nd e f", "p q r", "x"]
  out = mini_text.split_documents(held, frozenset({"j k l"}), train)
  assert out == {"train": [[["m n o", "d e f"]], [["p q r"]]],
                 "validation": [[["a b c"]], [["g h i"]]]}
  # Excluded units stay in the train split.
  out = mini_text.split_documents(["a b c"], frozenset({"p q r"}), ["p q r"])
  assert out == {"train": [[["p q r"]]], "validation": [[["a b c"]]]}


def test_split_documents_of_a_user_corpus_by_digest():
  docs = [f"doc{i} first line\ndoc{i} second line" for i in range(20)]
  out = mini_text.split_documents(docs)
  runs = {d: [[f"{d.split()[0]} first line", f"{d.split()[0]} second line"]] for d in docs}
  assert out == {"train": [runs[d] for d in docs if _fraction(d) >= 0.4],
                 "validation": [runs[d] for d in docs if _fraction(d) < 0.4]}


def _jsonl(path, docs):
  path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
  return path


def test_a_folder_reads_its_visible_files_in_sorted_order(tmp_path):
  _jsonl(tmp_path / "b.jsonl", ["b1", "b2"])
  _jsonl(tmp_path / "a.jsonl", ["a1"])
  _jsonl(tmp_path / ".hidden.jsonl", ["h"])
  (tmp_path / "sub").mkdir()
  _jsonl(tmp_path / "sub" / "c.jsonl", ["c"])
  assert mini_text.heldout_documents(str(tmp_path)) == ["a1", "b1", "b2"]
  docs, train_side, units = mini_text._read_documents(str(tmp_path))
  assert (docs, train_side, units) == (("a1", "b1", "b2"), None, frozenset())
  assert mini_text.pretraining_documents(str(tmp_path)) == ()


def test_a_file_and_a_saved_dataset_folder_are_not_read_as_folders(tmp_path):
  f = _jsonl(tmp_path / "one.jsonl", ["x1", "x2"])
  assert mini_text.heldout_documents(str(f)) == ["x1", "x2"]
  for marker in ("dataset_info.json", "state.json", "dataset_dict.json"):
    folder = tmp_path / marker.split(".")[0]
    folder.mkdir()
    _jsonl(folder / "data.jsonl", ["y"])
    (folder / marker).write_text("{}")
    with pytest.raises(Exception) as e:  # read as a Hugging Face dataset, which this is not
      mini_text.heldout_documents(str(folder))
    assert "holds no document files" not in str(e.value)


def test_a_folder_without_files_is_refused(tmp_path):
  (tmp_path / "sub").mkdir()
  (tmp_path / ".hidden").write_text("a b c\n")
  with pytest.raises(ValueError, match="folder .* holds no document files"):
    mini_text.heldout_documents(str(tmp_path))


def test_split_sources_of_a_user_corpus(tmp_path):
  docs = [f"doc{i} line" for i in range(20)] + ["doc0 line"]
  f = _jsonl(tmp_path / "c.jsonl", docs)
  assert mini_text.split_sources(str(f)) == {
      "train": [d for d in docs[:20] if _fraction(d) >= 0.4],
      "validation": [d for d in docs[:20] if _fraction(d) < 0.4]}


def test_the_embedded_corpus_split_and_its_pretraining_documents():
  pretrain, heldout = mini_text._embedded_split()
  assert mini_text.pretraining_documents() == pretrain
  assert mini_text.heldout_documents() == list(heldout)
  docs, train_side, seen = mini_text._read_documents(None)
  assert docs == heldout and len(train_side) == mini_text.TRAIN_DOCUMENTS
  step = len(pretrain) / mini_text.TRAIN_DOCUMENTS
  assert train_side == tuple(pretrain[int(i * step)] for i in range(mini_text.TRAIN_DOCUMENTS))
  assert seen == {u for d in pretrain for run in mini_text.document_units(d) for u in run}


def test_the_embedded_corpus_with_fewer_pretraining_documents_than_the_cap(monkeypatch):
  mini_text._read_documents.cache_clear()
  monkeypatch.setattr(mini_text, "_embedded_split", lambda: (("p0", "p1", "p2"), ("h",)))
  try:
    assert mini_text._read_documents(None) == (("h",), ("p0", "p1", "p2"), frozenset())
  finally:
    mini_text._read_documents.cache_clear()


def _fake_documents(monkeypatch, held, train):
  monkeypatch.setattr(mini_text, "_read_documents", lambda d: (held, train, frozenset()))


def test_splits_needs_two_documents_with_units_per_split(monkeypatch):
  splits = mini_text.splits.__wrapped__
  _fake_documents(monkeypatch, ("a b c", "d e f"), ("g h i", "j k l"))
  assert splits(None) == {"train": [[["g h i"]], [["j k l"]]],
                          "validation": [[["a b c"]], [["d e f"]]]}
  _fake_documents(monkeypatch, ("a b c", "d e f"), ("g h i", "x"))
  with pytest.raises(ValueError, match=r"^mini suite: the embedded corpus's pre-training split "
                                       r"gives 1 document\(s\) with usable lines for the train "
                                       r"split \(of 2 documents\); the suite needs at least 2 "
                                       r"per split"):
    splits(None)
  _fake_documents(monkeypatch, ("a b c", "x", "y"), ("g h i", "j k l"))
  with pytest.raises(ValueError, match=r"^mini suite: the embedded corpus's held-out split gives "
                                       r"1 document\(s\) with usable lines for the validation "
                                       r"split \(of 3 documents\)"):
    splits(None)
  _fake_documents(monkeypatch, ("a b c",), None)
  with pytest.raises(ValueError, match=r"^mini suite: 'some/where' gives [01] document\(s\) "
                                       r"with usable lines for the (train|validation) split"):
    splits("some/where")
