"""Tests for lm/data/sources.py and the embedded corpus (lm/data/corpus.py)."""
import json

import numpy as np
import pytest

from lm.data import corpus, sources


def _write(path, data: bytes):
  path.write_bytes(data)
  return str(path)


def test_text_lines_skip_empty_and_count(tmp_path):
  p = _write(tmp_path / "a.txt", b"first doc\n\n   \nsecond doc\r\nthird\n")
  src = sources.TextSource(p)
  assert [src[i] for i in range(len(src))] == ["first doc", "second doc", "third"]
  assert src.stats.records == 5 and src.stats.empty_documents == 2
  assert src.stats.documents == 3


def test_text_paragraphs(tmp_path):
  p = _write(tmp_path / "a.txt", b"\n\npara one\nline two\n\n \n\npara two\n")
  src = sources.TextSource(p, mode="paragraph")
  assert [src[i] for i in range(len(src))] == ["para one\nline two", "para two"]


def test_glob_order_and_empty_file(tmp_path):
  _write(tmp_path / "b.txt", b"from b\n")
  _write(tmp_path / "a.txt", b"from a\n")
  _write(tmp_path / "c.txt", b"")
  src = sources.make_source("auto", str(tmp_path / "*.txt"))
  assert [src[0], src[1]] == ["from a", "from b"]
  assert src.stats.files == 3 and src.stats.empty_files == 1


def test_invalid_utf8_replace_or_skip(tmp_path):
  p = _write(tmp_path / "bad.txt", b"good line\nbad \xff\xfe line\nalso good\n")
  replaced = sources.TextSource(p)
  assert len(replaced) == 3 and "\ufffd" in replaced[1]
  assert replaced.stats.invalid_utf8_documents == 1
  skipped = sources.TextSource(p, on_decode_error="skip")
  assert [skipped[i] for i in range(len(skipped))] == ["good line", "also good"]
  assert skipped.stats.skipped_invalid_utf8 == 1


def test_long_documents_are_split_without_loss(tmp_path):
  words = " ".join(f"w{i}" for i in range(3000))
  p = _write(tmp_path / "long.txt", (words + "\nshort\n").encode())
  src = sources.TextSource(p, max_document_chars=1000)
  assert src.stats.split_documents == 1
  docs = [src[i] for i in range(len(src))]
  assert all(len(d.encode()) <= 1000 for d in docs)
  assert " ".join(docs[:-1]).split() == words.split() and docs[-1] == "short"
  mem = sources.InMemorySource([words, "x"], max_document_chars=1000)
  assert " ".join(mem[i] for i in range(len(mem) - 1)).split() == words.split()


def test_multibyte_split_stays_valid(tmp_path):
  p = _write(tmp_path / "u.txt", ("é" * 3000 + "\n").encode())  # No whitespace at all.
  src = sources.TextSource(p, max_document_chars=1001)
  assert "".join(src[i] for i in range(len(src))) == "é" * 3000
  assert src.stats.invalid_utf8_documents == 0


def test_jsonl(tmp_path):
  lines = [json.dumps({"text": "alpha"}), "not json", json.dumps({"other": 1}),
           json.dumps({"text": ""}), "", json.dumps({"text": "beta", "id": 2})]
  p = _write(tmp_path / "d.jsonl", "\n".join(lines).encode())
  src = sources.make_source("auto", p)
  assert isinstance(src, sources.JsonLinesSource)
  assert [src[0], src[1]] == ["alpha", "beta"]
  assert src.stats.bad_records == 2 and src.stats.empty_documents == 1


def test_parquet(tmp_path):
  import pyarrow as pa
  import pyarrow.parquet as pq
  p = str(tmp_path / "d.parquet")
  pq.write_table(pa.table({"content": ["one", None, " ", "two" * 10]}), p, row_group_size=2)
  src = sources.make_source("auto", p, text_field="content", max_document_chars=12)
  assert [src[i] for i in range(len(src))] == ["one", "twotwotwotwo", "twotwotwotwo",
                                               "twotwo"]
  with pytest.raises(ValueError, match="no column 'text'"):
    sources.make_source("parquet", p)


def test_array_record(tmp_path):
  from array_record.python import array_record_module
  p = str(tmp_path / "d.array_record")
  w = array_record_module.ArrayRecordWriter(p, "group_size:1")
  for rec in [b"first", b"", b"\xffbad", b"last"]:
    w.write(rec)
  w.close()
  src = sources.make_source("auto", p, on_decode_error="skip")
  assert [src[i] for i in range(len(src))] == ["first", "last"]
  assert src.stats.empty_documents == 1 and src.stats.skipped_invalid_utf8 == 1


def test_hf_load_from_disk(tmp_path):
  import datasets
  path = str(tmp_path / "hf")
  datasets.Dataset.from_dict({"text": ["a b", "", "c d"]}).save_to_disk(path)
  src = sources.make_source("auto", path)
  assert isinstance(src, sources.HFDiskSource)
  assert [src[0], src[1]] == ["a b", "c d"]


def test_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="does not exist"):
    sources.make_source("text", str(tmp_path / "missing.txt"))
  with pytest.raises(FileNotFoundError, match="matches no file"):
    sources.make_source("text", str(tmp_path / "*.none"))
  p = _write(tmp_path / "blank.txt", b"\n  \n\n")
  with pytest.raises(ValueError, match="No documents found.*blank.txt"):
    sources.make_source("text", p)
  with pytest.raises(ValueError, match="unknown data format"):
    sources.make_source("csv", p)


def test_split_validation_deterministic_and_disjoint():
  src = sources.InMemorySource([f"doc {i}" for i in range(1000)])
  train, val = sources.split_validation(src, 0.1, seed=3)
  train2, val2 = sources.split_validation(src, 0.1, seed=3)
  np.testing.assert_array_equal(val.indices, val2.indices)
  assert set(train.indices).isdisjoint(val.indices)
  assert len(train) + len(val) == 1000 and 60 < len(val) < 140
  _, val_other = sources.split_validation(src, 0.1, seed=4)
  assert set(val_other.indices) != set(val.indices)


def test_default_corpus_nonempty_and_deterministic(tmp_path, monkeypatch):
  docs = corpus.default_corpus()
  assert len(docs) > 1000 and sum(map(len, docs)) > 1_000_000
  assert all(d and d == d.strip() for d in docs[:100])
  monkeypatch.setenv("LM_CACHE_DIR", str(tmp_path))  # Force a fresh build.
  assert corpus.default_corpus() == docs
  assert corpus.build_default_corpus() == docs


def test_comment_documents_one_per_file_blocks_by_consecutive_lines(tmp_path):
  """A hand-made standard library: blocks are runs of comments on consecutive lines (code
  between them or a blank line starts a new one), `#` and spaces stripped; strings holding
  '#' are not comments; files without comments, test folders and files that do not
  tokenize give nothing; files in sorted path order."""
  (tmp_path / "b.py").write_text(
      "# First block, line one.\n#   and line two.\nx = 1  # trailing comment\n\n"
      "#\n# After a blank line.\ns = '# not a comment'\n")
  (tmp_path / "a.py").write_text("# Only one.\n")
  (tmp_path / "c.py").write_text("y = 2\n")
  (tmp_path / "d.py").write_text("def f(:\n  (\n# in a file that does not tokenize\n")
  (tmp_path / "test").mkdir()
  (tmp_path / "test" / "t.py").write_text("# a test's comment\n")
  (tmp_path / "pkg").mkdir()
  (tmp_path / "pkg" / "m.py").write_text("#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n")
  assert corpus.comment_documents(str(tmp_path)) == [
      "Only one.",
      "First block, line one. and line two. trailing comment\nAfter a blank line.",
      "!/usr/bin/env python -*- coding: utf-8 -*-"]


def test_comment_documents_of_this_python_are_many_and_never_in_the_corpus():
  """This interpreter's standard library: hundreds of files with comments, over a million
  characters, none of it in the embedded corpus's documents (docstrings and help topics)."""
  docs = corpus.comment_documents()
  assert len(docs) > 300 and sum(map(len, docs)) > 1_000_000
  text = "\n".join(corpus.default_corpus())
  long_blocks = [b for d in docs[:50] for b in d.split("\n") if len(b) > 200]
  assert long_blocks and sum(b in text for b in long_blocks) < 0.05 * len(long_blocks)


def test_split_validation_keeps_long_document_pieces_together(tmp_path):
  lines = [" ".join(["word"] * 400)] + [f"doc {i}" for i in range(300)]
  p = _write(tmp_path / "d.txt", "\n".join(lines).encode())
  src = sources.TextSource(p, max_document_chars=500)
  assert src.stats.split_documents == 1 and len(set(src.group_ids)) == 301
  train, val = sources.split_validation(src, 0.2, seed=0)
  pieces = set(np.flatnonzero(src.group_ids == src.group_ids[0]))
  assert len(pieces) > 1 and (pieces <= set(train.indices) or pieces <= set(val.indices))
  assert 20 < len(val) < 100


def _good_jsonl_lines(n):
  return [json.dumps({"text": f"document number {i} with some words"}) for i in range(n)]


def test_random_bytes_corpus_is_refused_naming_the_file(tmp_path, caplog):
  """Row f: a corpus of random bytes trained silently; now refused at start-up."""
  noise = tmp_path / "noise.txt"
  rng = np.random.default_rng(0)
  noise.write_bytes(rng.integers(0, 256, 200_000, dtype=np.uint8).tobytes())
  good = tmp_path / "good.txt"
  good.write_text("\n".join(f"line {i} of plain text" for i in range(200)) + "\n")
  with caplog.at_level("INFO"):
    ok = sources.make_source("text", [str(good)], max_bad_fraction=0.01)
  assert len(ok) == 200
  assert "200 documents from 200 records of 1 files; 0 bad records, 0 invalid UTF-8" in caplog.text
  with pytest.raises(sources.DataQualityError) as e:
    sources.make_source("text", [str(good), str(noise)], max_bad_fraction=0.01)
  msg = str(e.value)
  assert "\n" not in msg and str(noise) in msg and str(good) not in msg
  assert "invalid UTF-8" in msg and "max_bad_fraction=0.01" in msg
  # Without a threshold (library use) the source still builds, with the counts.
  src = sources.make_source("text", [str(noise)])
  assert src.stats.invalid_utf8_documents > 0.9 * src.stats.examined


def test_jsonl_with_broken_lines_is_refused_above_the_threshold(tmp_path):
  """Row f: a JSON-lines file with 80 % broken lines; the threshold is the config's."""
  lines = _good_jsonl_lines(100)
  broken = [ln if i % 5 == 0 else ln[: len(ln) // 2] for i, ln in enumerate(lines)]
  path = tmp_path / "broken.jsonl"
  path.write_text("\n".join(broken) + "\n")
  with pytest.raises(sources.DataQualityError, match=r"broken.jsonl: 80.0% of 100 records are "
                     r"bad \(80 unparsable or without the text field, 0 invalid UTF-8\)"):
    sources.make_source("jsonl", [str(path)], max_bad_fraction=0.01)
  assert len(sources.make_source("jsonl", [str(path)], max_bad_fraction=0.85)) == 20
  # One broken line in 200 (0.5 %) passes the default 1 %; three (1.5 %) do not.
  lines = _good_jsonl_lines(200)
  for n_bad, ok in ((1, True), (3, False)):
    path = tmp_path / f"some_{n_bad}.jsonl"
    path.write_text("\n".join(["{not json"] * n_bad + lines[n_bad:]) + "\n")
    if ok:
      assert len(sources.make_source("jsonl", [str(path)], max_bad_fraction=0.01)) == 200 - n_bad
    else:
      with pytest.raises(sources.DataQualityError, match="1.5% of 200 records"):
        sources.make_source("jsonl", [str(path)], max_bad_fraction=0.01)
  with pytest.raises(ValueError, match="max_bad_fraction must be in"):
    sources.make_source("jsonl", [str(path)], max_bad_fraction=1.5)


def test_pipeline_applies_the_spec_threshold(tmp_path):
  """The DataPipeline hook: DataSpec.max_bad_fraction (config.data.max_bad_fraction)."""
  from lm.data import pipeline
  from lm.data import tokenizer as tok_lib
  lines = _good_jsonl_lines(100)
  path = tmp_path / "half.jsonl"
  path.write_text("\n".join(ln if i % 2 else "[1, 2" for i, ln in enumerate(lines)) + "\n")
  tok = tok_lib.train_tokenizer([f"document number {i} with some words" for i in range(50)],
                                vocab_size=30, extra_ids=20)
  spec = dict(format="jsonl", paths=(str(path),), extra_ids=20, inputs_length=32,
              targets_length=12, batch_size=4, num_shards=4, validation_fraction=0.0)
  with pytest.raises(sources.DataQualityError, match="half.jsonl: 50.0% of 100"):
    pipeline.DataPipeline(pipeline.DataSpec(**spec), tokenizer=tok)
  assert pipeline.DataSpec().max_bad_fraction == 0.01
  data = pipeline.DataPipeline(pipeline.DataSpec(**spec, max_bad_fraction=0.5), tokenizer=tok)
  assert len(data.train_source) == 50
  # The threshold does not change which batches are produced.
  assert (pipeline.DataSpec(**spec, max_bad_fraction=0.5).fingerprint()
          == pipeline.DataSpec(**spec).fingerprint())


@pytest.mark.parametrize("damage", [
    b"\xff\xfe not utf-8\n", b'{"text": "ok"}\n{"text": "trunc', b'["a list"]\n', b"",
    b'{"text": "first document"}\n',  # cut short exactly at a line boundary
    b'{"text": "first document"}\n{"text": "second documenT"}\n',  # same length, changed
    None])  # the checksum file is missing
def test_damaged_corpus_cache_is_rebuilt(tmp_path, monkeypatch, caplog, damage):
  """Row k: a damaged default-corpus cache is named in a warning and rebuilt."""
  import os
  docs = ["first document", "second document"]
  monkeypatch.setenv("LM_CACHE_DIR", str(tmp_path))
  monkeypatch.setattr(corpus, "build_default_corpus", lambda stdlib=None: list(docs))
  path = corpus.default_corpus_path()
  assert os.path.dirname(os.path.dirname(path)) == str(tmp_path)
  assert corpus.default_corpus() == docs
  if damage is None:
    os.remove(path + ".sha256")
  else:
    with open(path, "wb") as f:
      f.write(damage)
  with caplog.at_level("WARNING"):
    assert corpus.default_corpus() == docs
  assert path in caplog.text and "rebuilding" in caplog.text
  with open(path, encoding="utf-8") as f:  # repaired on disk
    assert [json.loads(line)["text"] for line in f] == docs
