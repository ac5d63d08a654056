"""lm/data/pipeline.py checked for VALUES: whole epochs (each document exactly once, a new
order each epoch) and the feature layout of every architecture, row by row and segment by
segment, against the seqio layouts (EncDec / PrefixLM / Decoder feature converters):

  encoder_decoder  decoder_loss_weights = 1 on every real target token; decoder inputs =
                   targets shifted right by one within each segment, starting at 0; every
                   segment's targets and encoder inputs end in EOS.
  prefix_lm        per segment of length m with k inputs tokens (incl. their EOS):
                   loss weights 0^k 1^(m-k), decoder_causal_attention 1^(k+1) 0^(m-k-1),
                   target k-1 is EOS, the last target is EOS.
  causal           the same loss weights, decoder_causal_attention all 0.
  positions        0, 1, 2, ... within each segment; padding has segment 0, token 0,
                   weight 0.
"""
import numpy as np
import pytest

from lm.data import pipeline
from lm.data import tokenizer as tok_lib

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
EOS = 1


def _docs(n, seed=0):
  rng = np.random.default_rng(seed)
  return [" ".join(rng.choice(WORDS, rng.integers(3, 30))) + f" doc{i}." for i in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  path = tmp_path_factory.mktemp("data") / "docs.txt"
  docs = _docs(120)
  path.write_text("\n".join(docs) + "\n")
  return str(path), docs


@pytest.fixture(scope="module")
def tok():
  return tok_lib.train_tokenizer(_docs(200, seed=1), vocab_size=45, extra_ids=20)


# Every test runs on both paths of the pipeline: the vectorised block stage (the default for
# the objectives of lm/data/batched.py) and the per-example reference.
_PATH = {}


@pytest.fixture(autouse=True, params=[True, False], ids=["batched", "per_example"])
def batched_objectives(request):
  _PATH["batched_objectives"] = request.param
  yield request.param
  _PATH.clear()


def _spec(path, **kw):
  base = dict(**_PATH, format="text", paths=(path,), extra_ids=20, inputs_length=32, targets_length=24,
              batch_size=4, num_shards=1, seed=3, num_threads=1, prefetch_batches=0,
              validation_fraction=0.0, objective="span_corruption")
  base.update(kw)
  return pipeline.DataSpec(**base)


def test_each_epoch_has_every_document_exactly_once_in_a_new_order(corpus, tok):
  path, docs = corpus
  spec = _spec(path, objective="full_lm", architecture="causal", pack=False, batch_size=1,
               num_epochs=2)
  rows = list(pipeline.DataPipeline(spec, tokenizer=tok).train_iterator())
  # Each row is one raw chunk of the concatenated (document + EOS) stream, with no EOS
  # added at the chunk's end (T5's full_lm); split the stream back into documents.
  chunks = [r["decoder_target_tokens"][0][r["decoder_segment_ids"][0] > 0] for r in rows]
  stream = np.concatenate(chunks)
  assert stream[-1] == EOS  # nothing of the last document is dropped
  pieces = np.split(stream, np.flatnonzero(stream == EOS) + 1)[:-1]
  index = {tuple(tok.encode(d)): i for i, d in enumerate(docs)}
  assert len(index) == len(docs)
  order = [index.get(tuple(p[:-1].tolist()), -1) for p in pieces]
  n = len(docs)
  assert len(order) == 2 * n and -1 not in order
  assert sorted(order[:n]) == list(range(n))   # epoch 1: each document once
  assert sorted(order[n:]) == list(range(n))   # epoch 2: each document once
  assert order[:n] != order[n:]                # reshuffled
  assert order[:n] != list(range(n))           # shuffled at all


def _segments(seg_row):
  for s in np.unique(seg_row[seg_row > 0]):
    idx = np.flatnonzero(seg_row == s)
    assert np.array_equal(idx, np.arange(idx[0], idx[-1] + 1)), "segment not contiguous"
    yield idx


def _check_common(b, prefix):
  seg = b[f"{prefix}_segment_ids"]
  pos = b[f"{prefix}_positions"]
  for row in range(seg.shape[0]):
    pad = seg[row] == 0
    if prefix == "decoder":
      assert np.all(b["decoder_target_tokens"][row][pad] == 0)
      assert np.all(b["decoder_loss_weights"][row][pad] == 0)
    for idx in _segments(seg[row]):
      np.testing.assert_array_equal(pos[row][idx], np.arange(idx.size))


def _check_shift(b, row, idx):
  tgt, inp = b["decoder_target_tokens"][row][idx], b["decoder_input_tokens"][row][idx]
  assert inp[0] == 0
  np.testing.assert_array_equal(inp[1:], tgt[:-1])
  assert tgt[-1] == EOS


@pytest.mark.parametrize("objective,arch,pack", [
    ("span_corruption", "encoder_decoder", True),
    ("prefix_lm", "prefix_lm", True),
    ("prefix_lm", "causal", True),
    ("span_corruption", "prefix_lm", False),
])
def test_layout_values_per_segment(corpus, tok, objective, arch, pack):
  path, _ = corpus
  spec = _spec(path, objective=objective, architecture=arch, pack=pack)
  it = pipeline.DataPipeline(spec, tokenizer=tok).train_iterator()
  batches = [next(it) for _ in range(3)]
  it.close()
  n_segments = 0
  for b in batches:
    _check_common(b, "decoder")
    seg, w = b["decoder_segment_ids"], b["decoder_loss_weights"]
    if arch == "encoder_decoder":
      _check_common(b, "encoder")
      np.testing.assert_array_equal(w, (seg > 0).astype(np.float32))
      for row in range(seg.shape[0]):
        for idx in _segments(b["encoder_segment_ids"][row]):
          assert b["encoder_input_tokens"][row][idx][-1] == EOS
        assert set(np.unique(b["encoder_segment_ids"][row])) - {0} == \
            set(np.unique(seg[row])) - {0}  # the same examples on both sides
    else:
      assert "encoder_input_tokens" not in b
      dca = b["decoder_causal_attention"]
      for row in range(seg.shape[0]):
        assert np.all(dca[row][seg[row] == 0] == 0)
    for row in range(seg.shape[0]):
      for idx in _segments(seg[row]):
        n_segments += 1
        _check_shift(b, row, idx)
        if arch == "encoder_decoder":
          continue
        ws, tgt = w[row][idx], b["decoder_target_tokens"][row][idx]
        k = int(np.argmax(ws > 0))
        assert 0 < k < idx.size  # a non-empty prefix and a non-empty target
        np.testing.assert_array_equal(ws, (np.arange(idx.size) >= k).astype(np.float32))
        assert tgt[k - 1] == EOS  # the inputs' EOS ends the prefix
        want_dca = (np.arange(idx.size) <= k) if arch == "prefix_lm" else np.zeros(idx.size)
        np.testing.assert_array_equal(b["decoder_causal_attention"][row][idx], want_dca)
  assert n_segments >= 12 if pack else n_segments == 12  # packing puts several per row
