"""lm.score against an independent NumPy computation, by hand, packed rows, bits per byte."""
import functools
import math

import flax.linen as nn
import jax
import numpy as np
import pytest

from lm import score as score_lib
from lm.data import converters, packing
from lm.model.transformer import Transformer, TransformerConfig

V = 32
EXAMPLES = [  # (inputs, targets) without EOS
    ([5, 6, 7, 8], [9, 10]),
    ([11, 12], [13, 14, 15, 16]),
    ([17], [18]),
]


def _model(mask_type):
  config = TransformerConfig(vocab_size=V, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32,
                             num_encoder_layers=1 if mask_type == "encoder_decoder" else 0,
                             num_decoder_layers=2, mask_type=mask_type, dtype="float32")
  return Transformer(config)


def _batch(arch, examples=EXAMPLES, lengths=(8, 8)):
  """Unpacked rows, one example each, padded to the given (inputs, targets) lengths."""
  feature_lengths = packing.feature_lengths(arch, *lengths)
  rows = [packing.pad_example(converters.convert(
      {"inputs": np.array(i, np.int32), "targets": np.array(t, np.int32)}, arch),
      feature_lengths) for i, t in examples]
  return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


def _init(model, batch, seed=1):
  """Random params from the abstract shapes (no init compile): N(0, 0.3), norm scales ~1."""
  abstract = nn.meta.unbox(jax.eval_shape(model.init, jax.random.key(0), batch)["params"])
  rng = np.random.default_rng(seed)

  def fill(path, leaf):
    base = 1.0 if "scale" in jax.tree_util.keystr(path) else 0.0
    return (base + 0.3 * rng.normal(size=leaf.shape)).astype(np.float32)
  return jax.tree_util.tree_map_with_path(fill, abstract)


def _numpy_log_softmax(logits):
  logits = np.asarray(logits, np.float64)
  m = logits.max(-1, keepdims=True)
  return logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))


@pytest.mark.parametrize("arch", ["encoder_decoder", "prefix_lm", "causal"])
def test_score_equals_numpy_log_softmax_over_the_forward_pass(arch):
  model = _model(arch)
  batch = _batch(arch)
  params = _init(model, batch)
  score = jax.jit(functools.partial(score_lib.score, model=model))
  out = score(params, batch)
  logits = np.asarray(jax.jit(model.apply)({"params": params}, batch))
  logp = _numpy_log_softmax(logits)
  for b, (inputs, targets) in enumerate(EXAMPLES):
    tgt = batch["decoder_target_tokens"][b]
    if arch == "encoder_decoder":  # targets + EOS at positions 0..
      positions = range(len(targets) + 1)
    else:  # inputs + EOS, then targets + EOS: only the targets part is scored
      positions = range(len(inputs) + 1, len(inputs) + len(targets) + 2)
    expected = sum(logp[b, p, tgt[p]] for p in positions)
    n = len(positions)
    np.testing.assert_allclose(out["log_likelihood"][b], expected, rtol=1e-5)
    np.testing.assert_allclose(out["mean_log_likelihood"][b], expected / n, rtol=1e-5)
    assert out["num_tokens"][b] == n
    argmax_hits = sum(int(np.argmax(logits[b, p]) == tgt[p]) for p in positions)
    assert out["num_correct"][b] == argmax_hits
  # The prefix is visible to prefix LM: changing the prefix changes the targets' score.
  if arch != "encoder_decoder":
    other = _batch(arch, [([6, 5, 7, 8], [9, 10])] + EXAMPLES[1:])
    changed = score(params, other)["log_likelihood"]
    assert abs(float(changed[0]) - float(out["log_likelihood"][0])) > 1e-4


def test_score_logits_by_hand():
  """Uniform logits over 4 classes: every token scores -ln 4; weights select, not scale."""
  logits = np.zeros((2, 3, 4), np.float32)
  logits[1, 0, 2] = math.log(3.0)  # p(2) = 3/6 = 1/2 at row 1 position 0
  batch = {"decoder_target_tokens": np.array([[1, 2, 0], [2, 3, 0]], np.int32),
           "decoder_loss_weights": np.array([[1, 1, 0], [0.5, 1, 0]], np.float32)}
  out = score_lib.score_logits(logits, batch)
  np.testing.assert_allclose(out["log_likelihood"], [2 * -math.log(4), math.log(0.5)
                                                     + math.log(0.25)], rtol=1e-6)
  np.testing.assert_allclose(out["num_tokens"], [2, 2])
  np.testing.assert_allclose(out["num_correct"], [0, 1])  # argmax 0 everywhere but (1, 0)


@pytest.mark.parametrize("arch", ["encoder_decoder", "causal"])
def test_packed_rows_segment_scores_equal_scoring_each_example_alone(arch):
  model = _model(arch)
  lengths = packing.feature_lengths(arch, 8, 8)
  examples = [converters.convert({"inputs": np.array(i, np.int32),
                                  "targets": np.array(t, np.int32)}, arch)
              for i, t in EXAMPLES[:2]]
  rows = packing.pack_examples(examples, lengths)  # both fit in one row: segments 1, 2
  assert len(rows) == 1
  packed = {k: v[None] for k, v in rows[0].items()}
  alone = _batch(arch, EXAMPLES[:2])
  params = _init(model, alone)
  ref = jax.jit(functools.partial(score_lib.score, model=model))(params, alone)
  with pytest.raises(ValueError, match="packed"):
    score_lib.check_unpacked(packed)
  out = jax.jit(functools.partial(score_lib.score, model=model, max_segments=3))(params, packed)
  assert np.isnan(out["log_likelihood"][0])  # a row total would mix the two examples
  np.testing.assert_allclose(out["segment_log_likelihood"][0, :2], ref["log_likelihood"],
                             rtol=1e-4)
  np.testing.assert_allclose(out["segment_num_tokens"][0], [*ref["num_tokens"], 0])


def test_bits_per_byte_by_hand():
  # 3 tokens of probability 1/2 each over the 6-byte text "héllo" (é is 2 bytes): 3 bits / 6.
  text = "héllo"
  assert len(text.encode("utf-8")) == 6
  assert score_lib.bits_per_byte(3 * math.log(2.0), 6) == pytest.approx(0.5)
  assert math.isnan(score_lib.bits_per_byte(1.0, 0))
  assert math.isnan(score_lib.bits_per_byte(1.0, -6))
  assert score_lib.bits_per_byte(math.log(2.0), 1) == pytest.approx(1.0)  # one byte, one bit


def test_score_logits_without_weights_and_with_one_or_no_scored_token():
  """Without loss weights the non-padding targets are scored; a row with one scored token
  has its value as its mean, a row with none has mean 0; padding never counts as correct."""
  logits = np.zeros((3, 3, 4), np.float32)
  logits[0, 0, 2] = math.log(3.0)  # p(2) = 1/2 at row 0 position 0, elsewhere uniform
  logits[2, 0, 3] = math.log(3.0)  # row 2 predicts 3 over its target 1 (p(1) = 1/6)
  batch = {"decoder_target_tokens": np.array([[2, 3, 0], [0, 0, 0], [1, 0, 0]], np.int32)}
  out = score_lib.score_logits(logits, batch)
  ll = [math.log(0.5) + math.log(0.25), 0.0, math.log(1 / 6)]
  np.testing.assert_allclose(out["log_likelihood"], ll, rtol=1e-6)
  np.testing.assert_allclose(out["num_tokens"], [2, 0, 1])
  np.testing.assert_allclose(out["mean_log_likelihood"], [ll[0] / 2, 0.0, ll[2]], rtol=1e-6)
  np.testing.assert_allclose(out["num_correct"], [1, 0, 0])


def test_segment_scores_by_hand():
  """A packed row (segments 1, 2 and padding) beside an unpacked one: per-segment totals,
  means and hits by hand; row values NaN only in the packed row."""
  logits = np.zeros((3, 4, 4), np.float32)
  logits[0, 1, 3] = math.log(3.0)  # p(3) = 1/2 at row 0 position 1
  batch = {"decoder_target_tokens": np.array([[2, 3, 1, 0], [2, 2, 0, 0], [0, 0, 0, 0]], np.int32),
           "decoder_segment_ids": np.array([[1, 1, 2, 0], [1, 1, 0, 0], [0, 0, 0, 0]], np.int32)}
  out = score_lib.score_logits(logits, batch, max_segments=3)
  q = math.log(0.25)
  np.testing.assert_allclose(out["segment_log_likelihood"],
                             [[q + math.log(0.5), q, 0], [2 * q, 0, 0], [0, 0, 0]], rtol=1e-6)
  np.testing.assert_allclose(out["segment_num_tokens"], [[2, 1, 0], [2, 0, 0], [0, 0, 0]])
  np.testing.assert_allclose(out["segment_mean_log_likelihood"],
                             [[(q + math.log(0.5)) / 2, q, 0], [q, 0, 0], [0, 0, 0]], rtol=1e-6)
  np.testing.assert_allclose(out["segment_num_correct"], [[1, 0, 0], [0, 0, 0], [0, 0, 0]])
  assert np.isnan(out["log_likelihood"][0]) and np.isnan(out["num_tokens"][0])
  # An unpacked row and an all-padding row are not packed: finite values.
  np.testing.assert_allclose(out["log_likelihood"][1:], [2 * q, 0], rtol=1e-6)
  np.testing.assert_allclose(out["num_tokens"][1:], [2, 0])
  with pytest.raises(ValueError, match="max_segments needs"):
    score_lib.score_logits(logits, {"decoder_target_tokens": batch["decoder_target_tokens"]},
                           max_segments=2)


def test_check_unpacked_refuses_packed_encoder_rows_and_accepts_unpacked_ones():
  score_lib.check_unpacked({"decoder_segment_ids": np.array([[1, 1, 0]]),
                            "encoder_segment_ids": np.array([[1, 0, 0]])})
  score_lib.check_unpacked({"decoder_target_tokens": np.array([[3, 0]])})
  score_lib.check_unpacked({"decoder_segment_ids": np.zeros((2, 3), np.int32)})  # all padding
  with pytest.raises(ValueError, match=r"encoder_segment_ids > 1"):
    score_lib.check_unpacked({"decoder_segment_ids": np.array([[1, 1]]),
                              "encoder_segment_ids": np.array([[1, 2]])})
