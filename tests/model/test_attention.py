"""Attention against a naive NumPy softmax(QK^T + bias)V, for every mask builder."""
import numpy as np
import pytest

import flax.linen as nn
import jax
import jax.numpy as jnp

from lm.model import masks
from lm.model.attention import (MultiHeadAttention, cached_attention, dot_product_attention,
                                merged_cached_attention)
from lm.model.layers import broadcast_dropout
from model_helpers import runtime_str

B, L, S, N, H = 2, 5, 5, 2, 4


def naive_attention(q, k, v, mask, softcap=None):
  """q [B,L,N,H], k/v [B,S,K,H] (K divides N: query head n reads key/value head
  n // (N / K)), mask bool [B,1,L,S] -> [B,L,N,H] (float64); scores capped to
  softcap * tanh(scores / softcap) before the mask when softcap is given."""
  q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
  out = np.zeros(q.shape)
  mask = np.broadcast_to(np.asarray(mask), (q.shape[0], 1, q.shape[1], k.shape[1]))
  g = q.shape[2] // k.shape[2]
  for b in range(q.shape[0]):
    for n in range(q.shape[2]):
      logits = q[b, :, n] @ k[b, :, n // g].T
      if softcap is not None:
        logits = softcap * np.tanh(logits / softcap)
      logits = np.where(mask[b, 0], logits, -1e10)
      w = np.exp(logits - logits.max(-1, keepdims=True))
      w /= w.sum(-1, keepdims=True)
      out[b, :, n] = w @ v[b, :, n // g]
  return out


def qkv(seed=0, s=S):
  rng = np.random.default_rng(seed)
  return (jnp.asarray(rng.normal(size=(B, L, N, H)), jnp.float32),
          jnp.asarray(rng.normal(size=(B, s, N, H)), jnp.float32),
          jnp.asarray(rng.normal(size=(B, s, N, H)), jnp.float32))


SEG = jnp.array([[1, 1, 1, 2, 2], [1, 1, 1, 0, 0]])
MASKS = {
    "padding": lambda: masks.make_padding_mask(SEG != 0, SEG != 0),
    "causal": lambda: masks.make_causal_mask(L),
    "prefix_lm": lambda: masks.make_prefix_lm_mask(jnp.array([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])),
    "fully_visible_packed": lambda: masks.make_fully_visible_mask(SEG),
    "decoder_packed": lambda: masks.make_decoder_mask(SEG, jnp.array([[1, 0, 0, 1, 0], [1, 1, 0, 0, 0]])),
}


@pytest.mark.parametrize("name", sorted(MASKS))
def test_dot_product_attention_matches_numpy(name):
  q, k, v = qkv()
  mask = MASKS[name]()
  got = dot_product_attention(q, k, v, masks.mask_to_bias(mask))
  assert got.shape == (B, L, N, H) and got.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(got), naive_attention(q, k, v, mask), rtol=1e-5, atol=1e-5)


def test_cross_attention_mask_matches_numpy():
  q, k, v = qkv(1, s=3)
  mask = masks.make_cross_attention_mask(SEG, jnp.array([[1, 2, 2], [1, 1, 0]]))
  got = dot_product_attention(q, k, v, masks.mask_to_bias(mask))
  want = naive_attention(q, k, v, mask)
  valid = np.asarray(SEG != 0)
  np.testing.assert_allclose(np.asarray(got)[valid], want[valid], rtol=1e-5, atol=1e-5)


def test_bias_tuple_and_no_scaling():
  q, k, v = qkv(2)
  pos_bias = jnp.asarray(np.random.default_rng(3).normal(size=(1, N, L, S)), jnp.float32)
  mask_bias = masks.mask_to_bias(masks.make_causal_mask(L))
  got = dot_product_attention(q, k, v, (mask_bias, pos_bias))
  logits = np.einsum("blnh,bsnh->bnls", np.asarray(q), np.asarray(k)) + np.asarray(mask_bias + pos_bias)
  w = np.exp(logits - logits.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  want = np.einsum("bnls,bsnh->blnh", w, np.asarray(v))
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_attention_dropout_shares_mask_over_queries():
  q, k, v = qkv(4)
  v = jnp.broadcast_to(jnp.eye(S, dtype=jnp.float32)[None, :, None, :H], (B, S, N, H))
  out = dot_product_attention(q, jnp.zeros_like(k), v, None, dropout_rate=0.5,
                              dropout_rng=jax.random.PRNGKey(0), deterministic=False)
  # With uniform weights 1/S and one-hot values, out[b, l, n, j] = keep[b, n, j] * 2 / S.
  out = np.asarray(out)
  np.testing.assert_allclose(out, np.broadcast_to(out[:, :1], out.shape))
  assert set(np.round(out.ravel() * S / 2, 5)) <= {0.0, 1.0}


def autodiff_attention(q, k, v, biases, scale, dtype=jnp.float32):
  """The textbook formula, differentiated by JAX (the reference for _attend's VJP)."""
  logits = jnp.einsum("BLNH,BSNH->BNLS", q, k, preferred_element_type=jnp.float32)
  for b in biases:
    logits = logits + b
  w = jax.nn.softmax(logits, axis=-1)
  w = w if scale is None else w * scale
  return jnp.einsum("BNLS,BSNH->BLNH", w.astype(dtype), v.astype(dtype))


@pytest.mark.parametrize("dropout", [False, True])
@pytest.mark.parametrize("bias_kind", ["none", "mask+pos", "per_example", "cross"])
def test_attention_gradient_matches_autodiff(bias_kind, dropout):
  """The hand-written VJP equals autodiff for q, k, v and every bias piece's own shape."""
  s = 3 if bias_kind == "cross" else S
  q, k, v = qkv(6, s=s)
  rng = np.random.default_rng(7)
  biases = {
      "none": (),
      "mask+pos": (masks.mask_to_bias(masks.make_decoder_mask(SEG, None)),
                   jnp.asarray(rng.normal(size=(1, N, L, S)), jnp.float32)),
      "per_example": (jnp.asarray(rng.normal(size=(B, N, L, S)), jnp.float32),),
      "cross": (jnp.asarray(rng.normal(size=(B, 1, 1, s)), jnp.float32),
                jnp.asarray(rng.normal(size=(1, N, L, s)), jnp.float32)),
  }[bias_kind]
  rng_key = jax.random.PRNGKey(3)
  d_out = jnp.asarray(rng.normal(size=(B, L, N, H)), jnp.float32)

  def got_fn(q, k, v, biases):
    return dot_product_attention(q, k, v, biases, dropout_rate=0.3 if dropout else 0.0,
                                 dropout_rng=rng_key, deterministic=not dropout)

  def want_fn(q, k, v, biases):
    scale = None
    if dropout:
      keep = jax.random.bernoulli(rng_key, 0.7, (B, N, 1, s))
      scale = jnp.where(keep, 1 / 0.7, 0.0)
    return autodiff_attention(q, k, v, biases, scale)

  got_out, got_vjp = jax.vjp(got_fn, q, k, v, biases)
  want_out, want_vjp = jax.vjp(want_fn, q, k, v, biases)
  np.testing.assert_allclose(got_out, want_out, rtol=1e-5, atol=1e-6)
  got, want = got_vjp(d_out), want_vjp(d_out)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    assert g.shape == w.shape and g.dtype == w.dtype
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_attention_gradient_bfloat16():
  """bfloat16 weights/values: the VJP keeps input dtypes and stays close to autodiff."""
  q, k, v = (x.astype(jnp.bfloat16) for x in qkv(8))
  pos = jnp.asarray(np.random.default_rng(9).normal(size=(1, N, L, S)), jnp.float32)
  loss = lambda f: lambda q, k, v, pos: jnp.sum(f(q, k, v, pos).astype(jnp.float32) ** 2)
  got = jax.grad(loss(lambda *a: dot_product_attention(*a[:3], a[3], dtype=jnp.bfloat16)),
                 argnums=(0, 1, 2, 3))(q, k, v, pos)
  want = jax.grad(loss(lambda *a: autodiff_attention(*a[:3], (a[3],), None, jnp.bfloat16)),
                  argnums=(0, 1, 2, 3))(q, k, v, pos)
  for g, w in zip(got, want):
    assert g.dtype == w.dtype
    np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), rtol=0.05, atol=0.05)


def test_multihead_attention_module():
  d = 6
  rng = np.random.default_rng(5)
  x = jnp.asarray(rng.normal(size=(B, L, d)), jnp.float32)
  mask = masks.make_causal_mask(L)
  mha = MultiHeadAttention(num_heads=N, head_dim=H)
  params = nn.meta.unbox(mha.init(jax.random.PRNGKey(0), x, x, masks.mask_to_bias(mask))["params"])
  assert {k: v.shape for k, v in params.items()} == {
      "query": (d, N, H), "key": (d, N, H), "value": (d, N, H), "out": (N, H, d)}
  got = mha.apply({"params": params}, x, x, masks.mask_to_bias(mask))
  xn = np.asarray(x, np.float64)
  p = {k: np.asarray(v, np.float64) for k, v in params.items()}
  q, k, v = (np.einsum("bld,dnh->blnh", xn, p[n]) for n in ("query", "key", "value"))
  want = np.einsum("blnh,nhd->bld", naive_attention(q, k, v, mask), p["out"])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_query_init_is_folded_scaling():
  d, n, h = 256, 4, 64
  x = jnp.zeros((1, 1, d))
  params = nn.meta.unbox(MultiHeadAttention(num_heads=n, head_dim=h).init(jax.random.PRNGKey(0), x, x, None)["params"])
  np.testing.assert_allclose(np.std(params["key"]), 1 / np.sqrt(d), rtol=0.05)
  np.testing.assert_allclose(np.std(params["query"]), 1 / np.sqrt(d) / np.sqrt(h), rtol=0.05)
  np.testing.assert_allclose(np.std(params["out"]), 1 / np.sqrt(n * h), rtol=0.05)


def test_broadcast_dropout_shares_mask_along_length():
  class M(nn.Module):
    @nn.compact
    def __call__(self, x):
      return broadcast_dropout(x, 0.5, False, self)
  x = jnp.ones((2, 7, 16))
  y = np.asarray(M().apply({}, x, rngs={"dropout": jax.random.PRNGKey(1)}))
  np.testing.assert_array_equal(y, np.broadcast_to(y[:, :1], y.shape))
  assert set(np.unique(y)) == {0.0, 2.0}


@pytest.mark.parametrize("rows_per_cache_row,N", [(1, N), (3, N), (1, 3)])
def test_cached_attention_matches_numpy(rows_per_cache_row, N):  # pylint: disable=redefined-outer-name
  """The decoding path: a cache laid out [Bc, N, H, S], query rows c * R + r reading cache
  row c (beam search's shared cross-attention cache), a [Bc, 1, 1, S] padding bias. (The
  last case has N = 3 heads for Bc = 2 cache rows, so the two axes cannot be confused.)"""
  r = rows_per_cache_row
  rng = np.random.default_rng(5)
  q = jnp.asarray(rng.normal(size=(B * r, 1, N, H)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(B, S, N, H)), jnp.float32)
  v = jnp.asarray(rng.normal(size=(B, S, N, H)), jnp.float32)
  valid = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], bool)
  bias = masks.mask_to_bias(jnp.asarray(valid)[:, None, None, :])
  got = cached_attention(q, jnp.transpose(k, (0, 2, 3, 1)), jnp.transpose(v, (0, 2, 3, 1)), (bias,))
  assert got.shape == (B * r, 1, N, H) and got.dtype == jnp.float32
  rows = np.repeat(np.arange(B), r)  # query row i reads cache row i // r
  want = naive_attention(q, np.asarray(k)[rows], np.asarray(v)[rows], valid[rows][:, None, None, :])
  assert np.all(np.isfinite(np.asarray(got)))
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("beams,kv_heads,softcap", [(1, 4, None), (3, 2, None), (2, 1, 1.5)])
def test_merged_cached_attention_matches_numpy(beams, kv_heads, softcap):
  """A merged-attention decode step: one softmax over a self cache [B, K, H, M] (its own
  mask) and an encoder cache [Bc, K, H, S] whose rows are shared by R beams (query row
  c * R + r reads encoder row c), as one attention over the concatenated keys."""
  n, m, r = 4, 3, beams
  rng = np.random.default_rng(6)
  q = rng.normal(size=(B * r, 1, n, H))
  k_own, v_own = rng.normal(size=(2, B * r, m, kv_heads, H))
  k_enc, v_enc = rng.normal(size=(2, B, S, kv_heads, H))
  own_valid = rng.random((B * r, 1, 1, m)) < 0.7
  own_valid[..., 0] = True
  enc_valid = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], bool)
  layout = lambda x: jnp.asarray(np.transpose(x, (0, 2, 3, 1)), jnp.float32)  # [B, K, H, S]
  got = merged_cached_attention(
      jnp.asarray(q, jnp.float32),
      (layout(k_own), layout(v_own), masks.mask_to_bias(jnp.asarray(own_valid))),
      (layout(k_enc), layout(v_enc), masks.mask_to_bias(jnp.asarray(enc_valid)[:, None, None])),
      softcap=softcap)
  rows = np.repeat(np.arange(B), r)
  keys = np.concatenate([k_own, k_enc[rows]], axis=1)
  values = np.concatenate([v_own, v_enc[rows]], axis=1)
  mask = np.concatenate([own_valid, enc_valid[rows][:, None, None]], axis=-1)
  want = naive_attention(q, keys, values, mask, softcap)
  assert got.shape == (B * r, 1, n, H)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kv_heads,softcap", [(2, None), (1, None), (4, 1.5), (2, 1.5)])
def test_grouped_and_softcapped_attention_match_numpy(kv_heads, softcap):
  """Grouped-query attention (4 query heads over 2 or 1 key/value heads: head n reads
  n // (4 / K)) and soft-capped scores, through dot_product_attention's XLA path (values
  against float64 NumPy, gradients against autodiff of repeated heads) and through the
  decoding cache with 3 query rows per cache row (beam search)."""
  rng = np.random.default_rng(11)
  n = 4
  q = jnp.asarray(2 * rng.normal(size=(B, L, n, H)), jnp.float32)  # scores well past the cap
  k = jnp.asarray(rng.normal(size=(B, S, kv_heads, H)), jnp.float32)
  v = jnp.asarray(rng.normal(size=(B, S, kv_heads, H)), jnp.float32)
  mask = MASKS["padding"]()
  bias = masks.mask_to_bias(mask)
  got = dot_product_attention(q, k, v, bias, softcap=softcap)
  want = naive_attention(q, k, v, mask, softcap)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  if softcap is not None:  # the cap bites
    assert np.abs(want - naive_attention(q, k, v, mask)).max() > 0.05

  def plain(q, k, v):
    k, v = (jnp.repeat(x, n // kv_heads, axis=2) for x in (k, v))
    scores = jnp.einsum("BLNH,BSNH->BNLS", q, k)
    if softcap is not None:
      scores = softcap * jnp.tanh(scores / softcap)
    return jnp.einsum("BNLS,BSNH->BLNH", jax.nn.softmax(scores + bias, axis=-1), v)

  d_out = jnp.asarray(rng.normal(size=got.shape), jnp.float32)
  grads = jax.vjp(lambda *a: dot_product_attention(*a, bias, softcap=softcap), q, k, v)[1](d_out)
  for g, w in zip(grads, jax.vjp(plain, q, k, v)[1](d_out)):
    assert g.shape == w.shape
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5)

  r = 3  # beam search: query rows c * r + i read cache row c
  qs = jnp.asarray(2 * rng.normal(size=(B * r, 1, n, H)), jnp.float32)
  valid = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], bool)
  cache_bias = masks.mask_to_bias(jnp.asarray(valid)[:, None, None, :])
  got = cached_attention(qs, jnp.transpose(k, (0, 2, 3, 1)), jnp.transpose(v, (0, 2, 3, 1)),
                         (cache_bias,), softcap=softcap)
  rows = np.repeat(np.arange(B), r)
  want = naive_attention(qs, np.asarray(k)[rows], np.asarray(v)[rows],
                         valid[rows][:, None, None, :], softcap)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("q_shape,k_shape,v_shape,match", [
    ((B, L, N, H), (B, S, N, H), (B, S, N), "rank-4"),
    ((B, L, N), (B, S, N), (B, S, N), "rank-4"),
    ((B, L, N), (B, S, N, H), (B, S, N, H), "rank-4"),
    ((B, L, N), (B, S, N), (B, S, N, H), "rank-4"),
    ((B, L, N, H, 1), (B, S, N, H, 1), (B, S, N, H), "rank-4"),
    ((B, L, N, H, 1), (B, S, N, H), (B, S, N, H), "rank-4"),
    ((B, L, N, H, 1), (B, S, N, H, 1), (B, S, N, H, 1), "rank-4"),
    ((B, L, N, H), (B, S, N, H), (B, S + 1, N, H), "one shape"),
    ((B, L, N, H), (B, S, N, H), (B, S - 1, N, H), "one shape"),
    ((B + 1, L, N, H), (B, S, N, H), (B, S, N, H), "batch, heads and head_dim"),
    ((B - 1, L, N, H), (B, S, N, H), (B, S, N, H), "batch, heads and head_dim"),
    ((B, L, N + 1, H), (B, S, N, H), (B, S, N, H), "batch, heads and head_dim"),
    ((B, L, N, H - 1), (B, S, N, H), (B, S, N, H), "batch, heads and head_dim"),
])
def test_dot_product_attention_refuses_mismatched_shapes(q_shape, k_shape, v_shape, match):
  with pytest.raises(ValueError, match=match):
    dot_product_attention(jnp.zeros(q_shape), jnp.zeros(k_shape), jnp.zeros(v_shape))


@pytest.mark.parametrize("q_rows,k_shape,v_shape,bias_shape,match", [
    (B, (B, N, H, S), (B, N, H, S + 1), None, "a cache"),
    (B, (B, N + 1, H, S), (B, N + 1, H, S), None, "a cache"),
    (B, (B, 2 * N, H, S), (B, 2 * N, H, S), None, "a cache"),  # (fewer heads that divide N: GQA)
    (B, (B, N, H - 1, S), (B, N, H - 1, S), None, "a cache"),
    (B, (B, N + 1, H, S), (B, N, H, S), None, "a cache"),
    (B, (B, N - 1, H, S), (B, N, H, S), None, "a cache"),
    (B + 1, (B, N, H, S), (B, N, H, S), None, "a cache"),
    (3 * B, (B, N, H, S), (B, N, H, S), (3 * B, 1, 1, S), "1 or 2 rows"),
    (2 * B, (B, N, H, S), (B, N, H, S), (2 * B, 1, 1, S), "1 or 2 rows"),
    (3 * B, (B, N, H, S), (B, N, H, S), (B, 1, 2, S), "a query axis of 1"),
])
def test_cached_attention_refuses_mismatched_shapes(q_rows, k_shape, v_shape, bias_shape, match):
  biases = () if bias_shape is None else (jnp.zeros(bias_shape),)
  with pytest.raises(ValueError, match=match):
    cached_attention(jnp.zeros((q_rows, 1, N, H)), jnp.zeros(k_shape), jnp.zeros(v_shape), biases)
  # Such biases are fine with one query row per cache row, and with R > 1 a bias of 1 or Bc
  # rows and a query axis of 1 is.
  if bias_shape is not None:
    out = cached_attention(jnp.zeros((B, 2, N, H)), jnp.zeros(k_shape), jnp.zeros(v_shape),
                           (jnp.zeros((B, 1, 2, S)),))
    assert out.shape == (B, 2, N, H)
    for rows in (1, B):
      out = cached_attention(jnp.zeros((3 * B, 1, N, H)), jnp.zeros(k_shape), jnp.zeros(v_shape),
                             (jnp.zeros((rows, 1, 1, S)),))
      assert out.shape == (3 * B, 1, N, H)


def test_multihead_attention_module_dropout():
  """Attention-weight dropout runs only when not deterministic and the rate is > 0."""
  d = 6
  x = jnp.asarray(np.random.default_rng(2).normal(size=(B, L, d)), jnp.float32)

  def run(rate, deterministic, rngs=None):
    mha = MultiHeadAttention(num_heads=N, head_dim=H, dropout_rate=rate)
    params = nn.meta.unbox(mha.init(jax.random.PRNGKey(0), x, x, None)["params"])
    return np.asarray(mha.apply({"params": params}, x, x, None, deterministic=deterministic,
                                rngs=rngs))

  plain = run(0.0, True)
  rngs = {"dropout": jax.random.PRNGKey(3)}
  default = MultiHeadAttention(num_heads=N, head_dim=H)  # rate 0 by default: no rng needed
  params = nn.meta.unbox(default.init(jax.random.PRNGKey(0), x, x, None)["params"])
  np.testing.assert_array_equal(
      np.asarray(default.apply({"params": params}, x, x, None, deterministic=False)), plain)
  np.testing.assert_array_equal(run(0.0, False), plain)  # rate 0: no rng needed, no change
  np.testing.assert_array_equal(run(0.5, True), plain)
  mha = MultiHeadAttention(num_heads=N, head_dim=H, dropout_rate=0.5)
  params = nn.meta.unbox(mha.init(jax.random.PRNGKey(0), x, x, None)["params"])
  np.testing.assert_array_equal(  # deterministic unless told otherwise
      np.asarray(mha.apply({"params": params}, x, x, None, rngs=rngs)), plain)
  dropped = run(0.5, False, rngs)
  assert np.abs(dropped - plain).max() > 0.1 * np.abs(plain).max()
  np.testing.assert_array_equal(run(0.5, False, rngs), dropped)


@pytest.mark.parametrize("kind", ["self", "cross"])
def test_module_cache_prefill_then_steps_equals_full_attention(kind):
  """Prefill P positions, then one step per position: every output equals the full
  (uncached) attention's, and the cache holds the projected keys/values laid out
  [B, N, H, S]. Mode and kind names are built at run time (compared with ==, not is)."""
  d, p = 6, 2
  rng = np.random.default_rng(7)
  x = jnp.asarray(rng.normal(size=(B, L, d)), jnp.float32)
  enc = jnp.asarray(rng.normal(size=(B, S + 1, d)), jnp.float32)
  mha = MultiHeadAttention(num_heads=N, head_dim=H, kind=runtime_str(kind))
  if kind == "self":
    kv, s_total = x, L
    bias = masks.mask_to_bias(masks.make_causal_mask(L))  # [1, 1, L, L]
    bias = jnp.broadcast_to(bias, (B, 1, L, L))
  else:
    kv, s_total = enc, S + 1
    valid = jnp.asarray([[1] * (S + 1), [1] * (S - 1) + [0, 0]], bool)
    bias = jnp.broadcast_to(masks.mask_to_bias(valid[:, None, None, :]), (B, 1, L, S + 1))
  params = nn.meta.unbox(mha.init(jax.random.PRNGKey(0), x, kv, bias)["params"])
  full = np.asarray(mha.apply({"params": params}, x, kv, bias))
  pre, state = mha.apply({"params": params}, x[:, :p], kv if kind == "cross" else x[:, :p],
                         bias[:, :, :p, :s_total if kind == "cross" else p],
                         cache_mode=runtime_str("prefill"), max_length=L, mutable=["cache"])
  np.testing.assert_allclose(np.asarray(pre), full[:, :p], rtol=1e-5, atol=1e-5)
  cache = state["cache"]
  proj = lambda name, y: np.einsum("bsd,dnh->bnhs", np.asarray(y, np.float64),
                                   np.asarray(params[name], np.float64))
  want_k, want_v = proj("key", kv), proj("value", kv)
  if kind == "self":
    want_k[..., p:] = 0.0
    want_v[..., p:] = 0.0
  np.testing.assert_allclose(cache["cached_key"], want_k, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(cache["cached_value"], want_v, rtol=1e-5, atol=1e-5)
  for t in range(p, L):
    out, state = mha.apply({"params": params, "cache": state["cache"]}, x[:, t:t + 1],
                           None if kind == "cross" else x[:, t:t + 1], bias[:, :, t:t + 1],
                           cache_mode=runtime_str("step"), cache_index=jnp.asarray(t, jnp.int32),
                           mutable=["cache"])
    assert np.all(np.isfinite(np.asarray(out)))
    np.testing.assert_allclose(np.asarray(out)[:, 0], full[:, t], rtol=1e-5, atol=1e-5,
                               err_msg=f"step {t}")
  if kind == "self":  # every slot written by now
    np.testing.assert_allclose(state["cache"]["cached_key"], proj("key", x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["self", "cross"])
def test_module_cache_errors(kind):
  d = 6
  x = jnp.zeros((B, L, d))
  mha = MultiHeadAttention(num_heads=N, head_dim=H, kind=kind)
  params = nn.meta.unbox(mha.init(jax.random.PRNGKey(0), x, x, None)["params"])
  with pytest.raises(ValueError, match=f"{kind}-attention step without a cache"):
    mha.apply({"params": params}, x[:, :1], x[:, :1], None, cache_mode="step",
              cache_index=jnp.asarray(0, jnp.int32), mutable=["cache"])
  with pytest.raises(ValueError, match="unknown cache_mode 'steps'"):
    mha.apply({"params": params}, x, x, None, cache_mode="steps")
  if kind == "self":
    for max_length in (L - 1, None):
      with pytest.raises(ValueError,
                         match=f"prefill needs max_length >= prefix length {L}, got {max_length}"):
        mha.apply({"params": params}, x, x, None, cache_mode="prefill", max_length=max_length,
                  mutable=["cache"])
    _, state = mha.apply({"params": params}, x, x, None, cache_mode="prefill", max_length=L,
                         mutable=["cache"])  # max_length == prefix length is enough
    assert state["cache"]["cached_key"].shape == (B, N, H, L)
  with pytest.raises(ValueError, match="unknown attention kind 'selfish'"):
    MultiHeadAttention(num_heads=N, head_dim=H, kind="selfish").init(jax.random.PRNGKey(0), x, x, None)


@pytest.mark.parametrize("bias_shape", [(B, N, L, S + 1), (B + 1, 1, L, S), (N, L, S), (B, N, 2 * L, S),
                                        (1, 1, S), (1, 1, 1, 1, S)])
def test_dot_product_attention_refuses_a_bias_of_another_shape(bias_shape):
  q, k, v = qkv()
  with pytest.raises(ValueError, match=r"attention bias of shape .* does not broadcast to the "
                     rf"logits' \[B, N, L, S\] = \({B}, {N}, {L}, {S}\)"):
    dot_product_attention(q, k, v, (jnp.zeros((1, 1, L, S)), jnp.zeros(bias_shape)))


@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5])
def test_dot_product_attention_refuses_a_dropout_rate_outside_0_1(rate):
  q, k, v = qkv()
  with pytest.raises(ValueError, match=rf"dropout_rate must be in \[0, 1\), got {rate}"):
    dot_product_attention(q, k, v, dropout_rate=rate, dropout_rng=jax.random.PRNGKey(0),
                          deterministic=False)


def test_dot_product_attention_is_deterministic_by_default():
  """A rate and a key alone do not drop anything: dropout needs deterministic=False."""
  q, k, v = qkv(3)
  rng = jax.random.PRNGKey(0)
  plain = np.asarray(dot_product_attention(q, k, v))
  np.testing.assert_array_equal(
      np.asarray(dot_product_attention(q, k, v, dropout_rate=0.5, dropout_rng=rng)), plain)
  dropped = np.asarray(dot_product_attention(q, k, v, dropout_rate=0.5, dropout_rng=rng,
                                             deterministic=False))
  assert np.abs(dropped - plain).max() > 0.1
