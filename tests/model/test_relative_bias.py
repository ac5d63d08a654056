"""Relative biases from ``arange`` ([1, N, L, S]) on packed rows, against the per-row form.

A full pass builds the T5 and ALiBi biases once from ``arange`` (lm/model/transformer.py);
decoding keeps per-row positions. The two agree on every pair a packed row lets attend
(positions restart at 0 per segment; other pairs are masked): the packing contract that
tests/data/test_packing.py checks for every packer. What an unpaired decoder segment (one
without its encoder segment) does is pinned here.
"""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

from lm.model import fast_grads, masks, position
from lm.model.attention import dot_product_attention
from lm.model.transformer import Transformer
from model_helpers import V, random_params, tiny

B, L, N, H = 3, 24, 4, 8


def _packed():
  """Segment ids and per-segment positions: packed rows, a padded row, a full row."""
  seg = np.zeros((B, L), np.int32)
  for r, lens in enumerate([(7, 9, 5), (11,), (24,)]):
    at = 0
    for s, n in enumerate(lens):
      seg[r, at:at + n] = s + 1
      at += n
  starts = np.c_[np.ones((B, 1), bool), seg[:, 1:] != seg[:, :-1]]
  idx = np.arange(L)[None].repeat(B, 0)
  pos = idx - np.maximum.accumulate(np.where(starts, idx, 0), axis=1)
  return seg, np.where(seg != 0, pos, 0).astype(np.int32)


def _t5_bias(table, q_pos, k_pos, bidirectional):
  buckets = position.relative_position_bucket(k_pos[:, None, :] - q_pos[:, :, None],
                                              bidirectional=bidirectional)
  return fast_grads.lookup_buckets(table, buckets)


@pytest.mark.parametrize("encoding,bidirectional", [
    ("t5", True), pytest.param("t5", False, marks=pytest.mark.slow),
    pytest.param("alibi", True, marks=pytest.mark.slow)])
def test_arange_bias_equals_the_per_row_bias_on_packed_rows(encoding, bidirectional):
  seg, pos = _packed()
  mask = (masks.make_fully_visible_mask(seg) if bidirectional
          else masks.make_decoder_mask(seg))
  mask_bias = masks.mask_to_bias(mask)
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.normal(size=(B, L, N, H)), jnp.float32) for _ in range(3))
  table = jnp.asarray(rng.normal(size=(N, 32)), jnp.float32)
  ar = jnp.arange(L, dtype=jnp.int32)[None]
  w = jnp.asarray(rng.normal(size=(B, L, N, H)) * (seg != 0)[:, :, None, None], jnp.float32)

  def run(q_pos, k_pos):
    def loss(q, k, v, table):
      if encoding == "t5":
        bias = _t5_bias(table, q_pos, k_pos, bidirectional)
      else:
        bias = position.alibi_bias(q_pos, k_pos, N)
      out = dot_product_attention(q, k, v, (mask_bias, bias))
      return jnp.sum(out * w), out
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))(q, k, v, table)

  (l_row, out_row), g_row = run(jnp.asarray(pos), jnp.asarray(pos))
  (l_ar, out_ar), g_ar = run(ar, ar)
  assert _t5_bias(table, ar, ar, bidirectional).shape == (1, N, L, L)
  keep = seg != 0
  np.testing.assert_array_equal(np.asarray(out_ar)[keep], np.asarray(out_row)[keep])
  np.testing.assert_allclose(float(l_ar), float(l_row), rtol=1e-6)
  for name, a, b in zip(("dq", "dk", "dv", "dtable"), g_ar, g_row):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6, err_msg=name)
  if encoding == "t5":
    assert np.abs(np.asarray(g_ar[3])).max() > 0


def test_an_unpaired_decoder_segment_reads_the_encoders_padding():
  """Pinned: a decoder segment without its encoder segment (which no packer makes;
  packing.contract_violations names it) has a fully masked cross-attention row, whose
  softmax is uniform over EVERY encoder position, so its logits depend on the encoder's
  padding tokens and the other examples. A paired segment's logits do not."""
  cfg = tiny()
  rng = np.random.default_rng(0)
  enc = rng.integers(2, V, (1, 8)).astype(np.int32)
  enc_seg = np.array([[1, 1, 1, 1, 0, 0, 0, 0]], np.int32)
  dec_seg = np.array([[1, 1, 1, 2, 2, 2]], np.int32)  # segment 2 has no encoder segment
  dec_pos = np.array([[0, 1, 2, 0, 1, 2]], np.int32)
  tokens = rng.integers(2, V, (1, 6)).astype(np.int32)
  batch = dict(encoder_input_tokens=enc, encoder_segment_ids=enc_seg,
               encoder_positions=np.array([[0, 1, 2, 3, 0, 0, 0, 0]], np.int32),
               decoder_input_tokens=tokens, decoder_target_tokens=tokens,
               decoder_segment_ids=dec_seg, decoder_positions=dec_pos)
  model = Transformer(cfg)
  params = random_params(model, batch)
  apply = jax.jit(lambda b: model.apply({"params": params}, b))
  before = np.asarray(apply(batch))
  other = enc.copy()
  other[0, 4:] = (other[0, 4:] + 7) % (V - 2) + 2  # other token ids in the encoder's padding
  after = np.asarray(apply(dict(batch, encoder_input_tokens=other)))
  np.testing.assert_array_equal(after[0, :3], before[0, :3])  # the paired segment: unchanged
  assert np.abs(after[0, 3:] - before[0, 3:]).max() > 1e-3  # the unpaired one: changed
