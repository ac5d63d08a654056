"""Tests for lm/data/tokenizer.py (tiny tokenizers trained on a few KB)."""
import os

import numpy as np

import pytest

from lm.data import corpus
from lm.data import tokenizer as tok_lib

TEXT = corpus.default_corpus()[:150] + [
    "The quick brown fox jumps over the lazy dog.",
    "Return the number of items in a container.",
]


@pytest.fixture(scope="module")
def tok():
  return tok_lib.train_tokenizer(TEXT, vocab_size=300, extra_ids=10)


def test_special_ids_and_sentinels(tok):
  assert (tok.pad_id, tok.eos_id, tok.unk_id) == (0, 1, 2)
  assert tok.vocab_size == 310
  assert tok.id_to_piece(0) == "<pad>" and tok.id_to_piece(1) == "</s>"
  assert tok.piece_to_id("<extra_id_0>") == tok.vocab_size - 1 == tok.sentinel_id(0)
  assert tok.piece_to_id("<extra_id_9>") == 300 == tok.sentinel_id(9)
  ids = tok.encode("fox <extra_id_0> dog <extra_id_3>")
  assert tok.sentinel_id(0) in ids and tok.sentinel_id(3) in ids
  with pytest.raises(ValueError):
    tok.sentinel_id(10)


def _spm(ids: dict) -> bytes:
  import io
  import sentencepiece as spm
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXT * 2),
                                 model_writer=model, vocab_size=200, minloglevel=2, **ids)
  return model.getvalue()


def test_gemma_id_layout_has_a_bos_and_other_layouts_are_refused():
  """T5Gemma's tokenizer.model: pad 0, eos 1, bos 2, unk 3 (ID_LAYOUTS["gemma"])."""
  gemma = tok_lib.Tokenizer(_spm(dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3)), extra_ids=0)
  assert (gemma.pad_id, gemma.eos_id, gemma.unk_id, gemma.bos_id) == (0, 1, 3, 2)
  ids = gemma.encode("The lazy dog")
  assert 2 not in ids and gemma.decode(ids) == "The lazy dog"  # encode adds no BOS
  assert gemma.decode([999]) == gemma.decode([3])  # out-of-range ids read as its unk
  t5 = tok_lib.Tokenizer(_spm(dict(pad_id=0, eos_id=1, unk_id=2, bos_id=-1)), extra_ids=0)
  assert t5.bos_id is None and t5.unk_id == 2
  with pytest.raises(ValueError, match=r"\(0, 1, 3, 4\); lm reads T5's \(0, 1, 2, -1\) or "
                     r"Gemma's \(0, 1, 3, 2\)"):
    tok_lib.Tokenizer(_spm(dict(pad_id=0, eos_id=1, bos_id=4, unk_id=3)), extra_ids=0)


def test_round_trip_and_batch(tok):
  text = "The lazy dog returns the number of pieces."
  ids = tok.encode(text)
  assert ids.dtype == np.int32 and ids.ndim == 1 and 1 not in ids and 0 not in ids
  assert tok.decode(ids) == text
  batch = tok.encode_batch([text, "fox"], num_threads=2)
  np.testing.assert_array_equal(batch[0], ids)
  assert tok.decode(np.concatenate([ids, [1, 5, 6], [0, 0]])) == text  # Stops at EOS.


def test_save_load_and_deterministic_training(tok, tmp_path):
  path = str(tmp_path / "t.model")
  tok.save(path)
  loaded = tok_lib.load_tokenizer(path, extra_ids=10)
  assert loaded.vocab_size == tok.vocab_size
  np.testing.assert_array_equal(loaded.encode(TEXT[-1]), tok.encode(TEXT[-1]))
  again = tok_lib.train_tokenizer(TEXT, vocab_size=300, extra_ids=10)
  assert again.model_proto == tok.model_proto
  bpe = tok_lib.train_tokenizer(TEXT, vocab_size=250, model_type="bpe", extra_ids=0)
  assert bpe.vocab_size == 250 and bpe.decode(bpe.encode(TEXT[-1])) == TEXT[-1]


def test_padded_vocab_size_and_check():
  assert tok_lib.padded_vocab_size(32100) == 32128
  assert tok_lib.padded_vocab_size(128) == 128
  tok_lib.check_vocab_size(32100, 32128)
  tok_lib.check_vocab_size(32100, 32100)
  with pytest.raises(ValueError, match="32100.*32000.*vocab_size=32128"):
    tok_lib.check_vocab_size(32100, 32000, what="checkpoint")


def test_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="train one"):
    tok_lib.load_tokenizer(str(tmp_path / "missing.model"))
  with pytest.raises(ValueError, match="empty"):
    tok_lib.train_tokenizer(["", "  \n"], vocab_size=100)
  with pytest.raises(ValueError, match="model_type"):
    tok_lib.train_tokenizer(TEXT, vocab_size=100, model_type="wordpiece")
  with pytest.raises(ValueError, match="lower --vocab_size"):
    tok_lib.train_tokenizer(["tiny text"], vocab_size=5000)


def test_default_tokenizer_too_large_for_the_corpus_names_the_config_fix(tmp_path, monkeypatch):
  """configs/t5.py without runlocal asks for T5's 32000 pieces; the default corpus holds far
  fewer: the error names the config fields that fix it, with a size that fits."""
  monkeypatch.setenv("LM_CACHE_DIR", str(tmp_path))
  monkeypatch.setattr(corpus, "default_corpus", lambda: TEXT)
  with pytest.raises(ValueError) as e:
    tok_lib.default_tokenizer(2000, extra_ids=10)
  message = str(e.value)
  assert "cannot train a 2000-piece tokenizer" in message and "\n" not in message
  assert "--config.data.tokenizer" in message
  assert "--config.data.default_vocab_size=1000 --config.model.vocab_size=1024" in message
  assert not os.listdir(tmp_path) or not os.listdir(tmp_path / "tokenizers")  # nothing cached


def test_cli(tmp_path, capsys):
  data = tmp_path / "in.txt"
  data.write_text("\n".join(TEXT))
  out = str(tmp_path / "cli.model")
  assert tok_lib.main(["train", f"--output={out}", "--vocab_size=250", "--extra_ids=5",
                       str(data)]) == 0
  assert "vocab_size=255" in capsys.readouterr().out
  assert tok_lib.load_tokenizer(out, extra_ids=5).vocab_size == 255
  assert tok_lib.main(["train", f"--output={out}", "--vocab_size=250",
                       str(tmp_path / "none.txt")]) == 2


def test_corrupt_tokenizer_file_is_named(tok, tmp_path):
  """Row k: a damaged .model gives one line naming the file (no protobuf traceback)."""
  good = tmp_path / "good.model"
  tok.save(str(good))
  proto = good.read_bytes()
  damaged = {"random.model": np.random.default_rng(0).integers(0, 256, 5000, np.uint8).tobytes(),
             "truncated.model": proto[: len(proto) // 2],
             "empty.model": b"",
             "text.model": b'{"not": "a sentencepiece model"}\n'}
  for name, data in damaged.items():
    path = tmp_path / name
    path.write_bytes(data)
    for extra_ids in (10, 0):
      with pytest.raises(tok_lib.TokenizerFileError) as e:
        tok_lib.load_tokenizer(str(path), extra_ids=extra_ids)
      assert str(path) in str(e.value) and "\n" not in str(e.value), str(e.value)
  assert tok_lib.load_tokenizer(str(good), extra_ids=10).vocab_size == tok.vocab_size


def test_corrupt_cached_tokenizer_is_rebuilt(tmp_path, monkeypatch, caplog):
  """Row k: the default tokenizer's cache entry, damaged, is rebuilt (not a crash)."""
  import os

  monkeypatch.setenv("LM_CACHE_DIR", str(tmp_path))
  monkeypatch.setattr(corpus, "default_corpus", lambda: TEXT)
  path = os.path.join(str(tmp_path), "tokenizers", "stdlib-docs-unigram-200.model")
  os.makedirs(os.path.dirname(path))
  with open(path, "wb") as f:
    f.write(b"\x00garbage" * 100)
  with caplog.at_level("WARNING"):
    rebuilt = tok_lib.default_tokenizer(200, extra_ids=10)
  assert path in caplog.text and "rebuilding" in caplog.text
  assert rebuilt.vocab_size == 210
  assert tok_lib.load_tokenizer(path, extra_ids=10).encode("a container").tolist() == \
      rebuilt.encode("a container").tolist()
