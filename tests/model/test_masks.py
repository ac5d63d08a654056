"""Masks and position encodings: hand-derived matrices and T5's bucket tables."""
import numpy as np
import pytest

import jax.numpy as jnp

from lm.model import masks, position


def m(x):
  x = np.asarray(x)
  assert x.dtype == np.bool_, x.dtype
  return x.astype(np.int32)


def test_padding_mask():
  got = m(masks.make_padding_mask(jnp.array([[1, 1, 0]]), jnp.array([[1, 1, 0]])))
  assert got.shape == (1, 1, 3, 3)
  np.testing.assert_array_equal(got[0, 0], [[1, 1, 0], [1, 1, 0], [0, 0, 0]])


def test_segment_mask():
  seg = jnp.array([[1, 1, 2, 2, 0]])
  got = m(masks.make_segment_mask(seg, seg))[0, 0]
  np.testing.assert_array_equal(got, [[1, 1, 0, 0, 0],
                                      [1, 1, 0, 0, 0],
                                      [0, 0, 1, 1, 0],
                                      [0, 0, 1, 1, 0],
                                      [0, 0, 0, 0, 1]])


def test_fully_visible_mask_packed():
  got = m(masks.make_fully_visible_mask(jnp.array([[1, 1, 2, 2, 2, 0]])))
  assert got.shape == (1, 1, 6, 6)
  np.testing.assert_array_equal(got[0, 0], [[1, 1, 0, 0, 0, 0],
                                            [1, 1, 0, 0, 0, 0],
                                            [0, 0, 1, 1, 1, 0],
                                            [0, 0, 1, 1, 1, 0],
                                            [0, 0, 1, 1, 1, 0],
                                            [0, 0, 0, 0, 0, 0]])


def test_causal_mask():
  got = m(masks.make_causal_mask(3))
  assert got.shape == (1, 1, 3, 3)
  np.testing.assert_array_equal(got[0, 0], [[1, 0, 0], [1, 1, 0], [1, 1, 1]])


def test_prefix_lm_mask():
  got = m(masks.make_prefix_lm_mask(jnp.array([[1, 1, 1, 0, 0]])))
  np.testing.assert_array_equal(got[0, 0], [[1, 1, 1, 0, 0],
                                            [1, 1, 1, 0, 0],
                                            [1, 1, 1, 0, 0],
                                            [1, 1, 1, 1, 0],
                                            [1, 1, 1, 1, 1]])


def test_decoder_mask_packed_prefix_lm_and_causal():
  seg = jnp.array([[1, 1, 1, 2, 2, 0]])
  dca = jnp.array([[1, 1, 0, 1, 0, 0]])
  got = m(masks.make_decoder_mask(seg, dca))
  assert got.shape == (1, 1, 6, 6)
  np.testing.assert_array_equal(got[0, 0], [[1, 1, 0, 0, 0, 0],
                                            [1, 1, 0, 0, 0, 0],
                                            [1, 1, 1, 0, 0, 0],
                                            [0, 0, 0, 1, 0, 0],
                                            [0, 0, 0, 1, 1, 0],
                                            [0, 0, 0, 0, 0, 0]])
  causal = m(masks.make_decoder_mask(seg))[0, 0]
  np.testing.assert_array_equal(causal, [[1, 0, 0, 0, 0, 0],
                                         [1, 1, 0, 0, 0, 0],
                                         [1, 1, 1, 0, 0, 0],
                                         [0, 0, 0, 1, 0, 0],
                                         [0, 0, 0, 1, 1, 0],
                                         [0, 0, 0, 0, 0, 0]])


def test_prefix_lm_mask_batch_rows_differ():
  dca = jnp.array([[1, 0, 0], [1, 1, 0]])
  got = m(masks.make_prefix_lm_mask(dca))
  assert got.shape == (2, 1, 3, 3)
  np.testing.assert_array_equal(got[0, 0], [[1, 0, 0], [1, 1, 0], [1, 1, 1]])
  np.testing.assert_array_equal(got[1, 0], [[1, 1, 0], [1, 1, 0], [1, 1, 1]])


def test_cross_attention_mask():
  got = m(masks.make_cross_attention_mask(jnp.array([[1, 1, 2, 0]]), jnp.array([[1, 2, 2]])))
  assert got.shape == (1, 1, 4, 3)
  np.testing.assert_array_equal(got[0, 0], [[1, 0, 0], [1, 0, 0], [0, 1, 1], [0, 0, 0]])


def test_mask_to_bias():
  bias = np.asarray(masks.mask_to_bias(jnp.array([True, False])))
  np.testing.assert_array_equal(bias, [0.0, -1e10])
  assert bias.dtype == np.float32


# docs/t5_reference.md §3.4 examples: (relative_position, bucket).
BIDIRECTIONAL = [(0, 0), (-1, 1), (-7, 7), (-8, 8), (-12, 9), (-16, 10), (-23, 11), (-32, 12),
                 (-46, 13), (-64, 14), (-90, 14), (-91, 15), (-128, 15), (-1000, 15),
                 (1, 17), (7, 23), (8, 24), (16, 26), (32, 28), (64, 30), (100, 31)]
UNIDIRECTIONAL = [(0, 0), (-15, 15), (-16, 16), (-19, 17), (-32, 21), (-64, 26), (-100, 30),
                  (-113, 31), (-128, 31), (1, 0), (5, 0), (200, 0)]


@pytest.mark.parametrize("rp,bucket", BIDIRECTIONAL)
def test_relative_bucket_bidirectional_examples(rp, bucket):
  assert int(position.relative_position_bucket(rp, bidirectional=True)) == bucket


@pytest.mark.parametrize("rp,bucket", UNIDIRECTIONAL)
def test_relative_bucket_unidirectional_examples(rp, bucket):
  assert int(position.relative_position_bucket(rp, bidirectional=False)) == bucket


def test_relative_bucket_tables():
  """Every row of the docs/t5_reference.md §3.4 range tables, over all distances 0..300."""
  d = np.arange(0, 301)
  bidir_ranges = [(0, 7, None), (8, 11, 8), (12, 15, 9), (16, 22, 10), (23, 31, 11), (32, 45, 12),
                  (46, 63, 13), (64, 90, 14), (91, 300, 15)]
  before = np.asarray(position.relative_position_bucket(-d, bidirectional=True))
  after = np.asarray(position.relative_position_bucket(d, bidirectional=True))
  for lo, hi, b in bidir_ranges:
    sel = (d >= lo) & (d <= hi)
    want = d[sel] if b is None else np.full(sel.sum(), b)
    np.testing.assert_array_equal(before[sel], want)
    if lo == 0:
      np.testing.assert_array_equal(after[sel][1:], 16 + d[sel][1:])  # 16 unused
    else:
      np.testing.assert_array_equal(after[sel], want + 16)
  uni_ranges = [(0, 15, None), (16, 18, 16), (19, 20, 17), (21, 23, 18), (24, 26, 19), (27, 30, 20),
                (31, 34, 21), (35, 39, 22), (40, 45, 23), (46, 51, 24), (52, 58, 25), (59, 66, 26),
                (67, 76, 27), (77, 86, 28), (87, 98, 29), (99, 112, 30), (113, 300, 31)]
  uni = np.asarray(position.relative_position_bucket(-d, bidirectional=False))
  for lo, hi, b in uni_ranges:
    sel = (d >= lo) & (d <= hi)
    np.testing.assert_array_equal(uni[sel], d[sel] if b is None else np.full(sel.sum(), b))
  np.testing.assert_array_equal(
      np.asarray(position.relative_position_bucket(d[1:], bidirectional=False)), 0)


def test_alibi_slopes_and_bias():
  np.testing.assert_allclose(position.alibi_slopes(4), [2**-2, 2**-4, 2**-6, 2**-8])
  np.testing.assert_allclose(position.alibi_slopes(8), [2.0**-(i + 1) for i in range(8)])
  # 6 heads: 4-head slopes, then every other slope of the 8-head sequence.
  np.testing.assert_allclose(position.alibi_slopes(6),
                             [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])
  bias = np.asarray(position.alibi_bias(jnp.array([[0, 1, 2]]), jnp.array([[0, 1, 2]]), 4))
  assert bias.shape == (1, 4, 3, 3)
  np.testing.assert_allclose(bias[0, 0], -0.25 * np.array([[0, 1, 2], [1, 0, 1], [2, 1, 0]]))


def test_rope_is_relative():
  """<rope(q, i), rope(k, j)> depends only on i - j; position 0 is the identity."""
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.normal(size=(1, 1, 1, 8)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(1, 1, 1, 8)), jnp.float32)
  def dot(i, j):
    return float(jnp.sum(position.apply_rope(q, jnp.array([[i]])) * position.apply_rope(k, jnp.array([[j]]))))
  np.testing.assert_allclose(dot(5, 2), dot(13, 10), rtol=1e-5)
  np.testing.assert_allclose(dot(0, 0), float(jnp.sum(q * k)), rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(position.apply_rope(q, jnp.array([[0]]))), np.asarray(q))


def test_sinusoidal_embedding():
  emb = np.asarray(position.sinusoidal_embedding(jnp.array([[0, 1]]), 4))
  assert emb.shape == (1, 2, 4)
  np.testing.assert_allclose(emb[0, 0], [0, 0, 1, 1])
  np.testing.assert_allclose(emb[0, 1], [np.sin(1), np.sin(1e-2), np.cos(1), np.cos(1e-2)], rtol=1e-6)


@pytest.mark.parametrize("batch_positions", [1, 3])
def test_relative_position_bias_value_and_gradient(batch_positions):
  """The bias is table[n, bucket(k - q)], and its hand-written gradient equals autodiff's."""
  import flax.linen as nn
  import jax
  rng = np.random.default_rng(0)
  n, l = 3, 9
  module = position.RelativePositionBias(num_heads=n, num_buckets=8, max_distance=16)
  pos = jnp.asarray(np.sort(rng.integers(0, 12, (batch_positions, l)), axis=1), jnp.int32)
  params = nn.meta.unbox(module.init(jax.random.PRNGKey(0), pos, pos, bidirectional=True)["params"])
  table = jnp.asarray(rng.normal(size=(n, 8)), jnp.float32)
  apply = lambda t: module.apply({"params": {"rel_embedding": t}}, pos, pos, bidirectional=True)
  buckets = position.relative_position_bucket(pos[:, None, :] - pos[:, :, None], bidirectional=True,
                                              num_buckets=8, max_distance=16)
  want_fn = lambda t: jnp.transpose(t.T[buckets], (0, 3, 1, 2))
  bias, vjp = jax.vjp(apply, table)
  assert bias.shape == (batch_positions, n, l, l) and params["rel_embedding"].shape == (n, 8)
  np.testing.assert_array_equal(bias, want_fn(table))
  d_bias = jnp.asarray(rng.normal(size=bias.shape), jnp.float32)
  np.testing.assert_allclose(vjp(d_bias)[0], jax.vjp(want_fn, table)[1](d_bias)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("window", [1, 2, 3, 4, 5])
def test_centred_window_holds_w_keys_around_the_query(window):
  """T5Gemma 2's encoder window: W keys, key - query from -((W - 1) // 2) to W // 2 (one
  more on the right when W is even), written out by hand for W = 4."""
  pos = np.arange(9)[None]
  got = np.asarray(masks.window_mask(pos, pos, window, centred=True))[0, 0]
  offsets = {k - q for q in range(9) for k in range(9) if got[q, k]}
  assert offsets == set(range(-((window - 1) // 2), window // 2 + 1))
  assert got[4].sum() == window  # an interior query sees exactly W keys
  if window == 4:
    assert offsets == {-1, 0, 1, 2}
  assert np.array_equal(np.asarray(masks.window_mask(pos, pos, window))[0, 0],
                        np.abs(pos[0][:, None] - pos[0][None]) < window)
