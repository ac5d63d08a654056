"""Transformer: shapes, logical axes, causality, prefix LM, packing, scan, variants, errors."""
import dataclasses
import functools
import re

import numpy as np
import pytest

import flax.linen as nn
import jax
import jax.numpy as jnp

from lm.model import transformer as transformer_lib
from lm.model.transformer import (Stack, Transformer, TransformerConfig, scan_to_unscanned,
                                  unscanned_to_scan)

from model_helpers import V, random_params, runtime_str, tiny


@functools.lru_cache(maxsize=None)
def init(cfg, batch_key):
  return random_params(Transformer(cfg), BATCHES[batch_key](cfg))


@functools.lru_cache(maxsize=None)
def forward_fn(cfg):
  model = Transformer(cfg)
  return jax.jit(lambda params, batch: model.apply({"params": params}, batch))


def forward(cfg, params, batch):
  return np.asarray(forward_fn(cfg)(params, batch))


def simple_batch(cfg, b=2, li=5, lt=6, seed=0):
  rng = np.random.default_rng(seed)
  batch = {"decoder_input_tokens": rng.integers(2, V, (b, lt)).astype(np.int32),
           "decoder_target_tokens": rng.integers(2, V, (b, lt)).astype(np.int32)}
  batch["decoder_input_tokens"][:, 0] = 0
  if cfg.is_encoder_decoder:
    batch["encoder_input_tokens"] = rng.integers(2, V, (b, li)).astype(np.int32)
  if cfg.mask_type == "prefix_lm":
    batch["decoder_causal_attention"] = (np.arange(lt) < 3).astype(np.int32)[None].repeat(b, 0)
  return batch


BATCHES = {"simple": simple_batch}


# ------------------------------------------------------------------------- basics

def test_shapes_dtypes_and_logical_axes():
  cfg = tiny(dtype="bfloat16")
  batch = simple_batch(cfg)
  params = init(cfg, "simple")
  leaves = jax.tree_util.tree_leaves(params, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
  for leaf in leaves:
    assert isinstance(leaf, nn.LogicallyPartitioned), type(leaf)
    assert leaf.value.dtype == jnp.float32
    assert len(leaf.names) == leaf.value.ndim, leaf.names
    assert set(leaf.names) <= {"vocab", "embed", "heads", "kv", "mlp", "relpos_buckets"}
  logits = forward(cfg, params, batch)
  assert logits.shape == (2, 6, V) and logits.dtype == np.float32
  assert np.all(np.isfinite(logits))
  shapes = jax.tree_util.tree_map(lambda x: x.shape, nn.meta.unbox(params))
  assert shapes["token_embedder"]["embedding"] == (V, 16)
  assert shapes["logits_dense"]["kernel"] == (16, V)
  assert shapes["encoder"]["relpos_bias"]["rel_embedding"] == (2, 32)
  assert shapes["decoder"]["layers_0"]["encoder_decoder_attention"]["query"] == (16, 2, 8)
  assert shapes["decoder"]["layers_0"]["mlp"]["wi_1"] == (16, 32)
  assert "encoder_decoder_attention" not in shapes["encoder"]["layers_0"]
  assert sorted(shapes["decoder"]) == ["final_norm", "layers_0", "relpos_bias"]


@pytest.mark.slow
def test_t5_init_statistics():
  cfg = tiny(emb_dim=64, mlp_dim=256, num_heads=4, head_dim=16, vocab_size=512)
  p = nn.meta.unbox(jax.jit(Transformer(cfg).init)(jax.random.PRNGKey(1), simple_batch(cfg))["params"])
  np.testing.assert_allclose(np.std(p["token_embedder"]["embedding"]), 1.0, rtol=0.05)
  np.testing.assert_allclose(np.std(p["encoder"]["layers_0"]["mlp"]["wi_0"]), 1 / 8, rtol=0.1)
  np.testing.assert_allclose(np.std(p["encoder"]["layers_0"]["self_attention"]["query"]), 1 / 8 / 4, rtol=0.1)
  np.testing.assert_array_equal(p["decoder"]["final_norm"]["scale"], 1.0)


# ------------------------------------------------------------------------- causality

@pytest.mark.parametrize("mask_type", ["causal", "encoder_decoder"])
def test_future_tokens_never_change_earlier_logits(mask_type):
  cfg = tiny(mask_type=mask_type)
  params = init(cfg, "simple")
  batch = simple_batch(cfg, b=1)
  batch = {k: np.concatenate([v] * 4) for k, v in batch.items()}
  for row, t in ((1, 2), (2, 4), (3, 5)):
    batch["decoder_input_tokens"][row, t] = (batch["decoder_input_tokens"][0, t] + 7) % (V - 2) + 2
  logits = forward(cfg, params, batch)
  for row, t in ((1, 2), (2, 4), (3, 5)):
    np.testing.assert_allclose(logits[row, :t], logits[0, :t], atol=1e-5)
    assert np.abs(logits[row, t] - logits[0, t]).max() > 1e-4


def test_prefix_lm_visibility():
  cfg = tiny(mask_type="prefix_lm")
  params = init(cfg, "simple")
  batch = simple_batch(cfg, b=1)  # prefix = positions 0..2, targets 3..5
  batch = {k: np.concatenate([v] * 3) for k, v in batch.items()}
  batch["decoder_input_tokens"][1, 2] = (batch["decoder_input_tokens"][0, 2] + 5) % (V - 2) + 2
  batch["decoder_input_tokens"][2, 4] = (batch["decoder_input_tokens"][0, 4] + 5) % (V - 2) + 2
  logits = forward(cfg, params, batch)
  # Changing the last prefix token changes every prefix position (bidirectional prefix).
  for t in range(3):
    assert np.abs(logits[1, t] - logits[0, t]).max() > 1e-4
  # Changing target 4 never changes prefix positions or earlier targets.
  np.testing.assert_allclose(logits[2, :4], logits[0, :4], atol=1e-5)
  assert np.abs(logits[2, 4] - logits[0, 4]).max() > 1e-4


def test_prefix_lm_with_empty_prefix_equals_causal():
  cfg_p, cfg_c = tiny(mask_type="prefix_lm"), tiny(mask_type="causal")
  params = init(cfg_p, "simple")
  batch = simple_batch(cfg_p)
  want = forward(cfg_c, params, {k: v for k, v in batch.items() if k != "decoder_causal_attention"})
  for dca0 in (0, 1):  # all zero, or only the BOS flagged (seqio's empty-inputs layout)
    dca = np.zeros_like(batch["decoder_causal_attention"])
    dca[:, 0] = dca0
    got = forward(cfg_p, params, dict(batch, decoder_causal_attention=dca))
    np.testing.assert_allclose(got, want, atol=1e-5)


# ------------------------------------------------------------------------- packing

def pack_rows(seqs, length, rng):
  """seqs: list of lists of token arrays for one row -> tokens, segment_ids, positions."""
  tokens = rng.integers(2, V, (len(seqs), length)).astype(np.int32)  # garbage in padding
  seg = np.zeros((len(seqs), length), np.int32)
  pos = np.zeros((len(seqs), length), np.int32)
  for r, row in enumerate(seqs):
    at = 0
    for s, seq in enumerate(row):
      tokens[r, at:at + len(seq)] = seq
      seg[r, at:at + len(seq)] = s + 1
      pos[r, at:at + len(seq)] = np.arange(len(seq))
      at += len(seq)
  return tokens, seg, pos


def packing_batch(cfg, seed=0):
  """Rows: [A, B packed], [A alone], [B alone], [A alone, other padding garbage]."""
  rng = np.random.default_rng(seed)
  length = 9
  dec = [rng.integers(2, V, 4), rng.integers(2, V, 3)]
  rows = [[dec[0], dec[1]], [dec[0]], [dec[1]], [dec[0]]]
  tokens, seg, pos = pack_rows(rows, length, rng)
  batch = {"decoder_input_tokens": tokens, "decoder_target_tokens": tokens,
           "decoder_segment_ids": seg, "decoder_positions": pos}
  if cfg.mask_type == "prefix_lm":
    dca = np.zeros_like(seg)
    for r, row in enumerate(rows):
      at = 0
      for seq in row:
        dca[r, at:at + 2] = 1
        at += len(seq)
    batch["decoder_causal_attention"] = dca
  if cfg.is_encoder_decoder:
    enc = [rng.integers(2, V, 3), rng.integers(2, V, 5)]
    etok, eseg, epos = pack_rows([[enc[0], enc[1]], [enc[0]], [enc[1]], [enc[0]]], 10, rng)
    batch.update(encoder_input_tokens=etok, encoder_segment_ids=eseg, encoder_positions=epos)
  return batch


BATCHES["packing"] = packing_batch


@pytest.mark.parametrize("cfg", [
    tiny(mask_type="prefix_lm", position_encoding="t5_relative"),
    tiny(mask_type="prefix_lm", position_encoding="rope"),
    tiny(mask_type="prefix_lm", position_encoding="alibi"),
    tiny(mask_type="causal", position_encoding="learned", max_length=16),
    tiny(mask_type="causal", position_encoding="sinusoidal"),
    tiny(mask_type="causal", position_encoding="none"),
    tiny(mask_type="encoder_decoder"),
], ids=["prefix_lm-relative", "prefix_lm-rope", "prefix_lm-alibi", "causal-learned",
        "causal-sinusoidal", "causal-none", "enc_dec-relative"])
def test_packing_isolation_and_padding(cfg):
  params = init(cfg, "packing")
  logits = forward(cfg, params, packing_batch(cfg))
  np.testing.assert_allclose(logits[0, :4], logits[1, :4], atol=1e-5)   # A packed == A alone
  np.testing.assert_allclose(logits[0, 4:7], logits[2, :3], atol=1e-5)  # B packed == B alone
  np.testing.assert_allclose(logits[3, :4], logits[1, :4], atol=1e-5)   # padding values don't matter


# ------------------------------------------------------------------------- scan, shared

@pytest.mark.parametrize("shared", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_scan_matches_unscanned(shared):
  cfg = tiny(shared_encoder_decoder=shared, num_encoder_layers=2, num_decoder_layers=2)
  cfg_scan = cfg.replace(scan_layers=True)
  params = init(cfg, "simple")
  scanned = unscanned_to_scan(params)
  batch = simple_batch(cfg)
  ref = jax.eval_shape(Transformer(cfg_scan).init, jax.random.PRNGKey(0), batch)["params"]
  assert jax.tree_util.tree_structure(scanned) == jax.tree_util.tree_structure(ref)
  for a, b in zip(jax.tree_util.tree_leaves(scanned, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned)),
                  jax.tree_util.tree_leaves(ref, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))):
    assert a.names == b.names and a.value.shape == b.value.shape
  np.testing.assert_allclose(forward(cfg_scan, scanned, batch), forward(cfg, params, batch), atol=1e-5)
  back = scan_to_unscanned(scanned)
  jax.tree_util.tree_map(np.testing.assert_array_equal, nn.meta.unbox(back), nn.meta.unbox(params))


def test_shared_encoder_decoder_params():
  cfg = tiny(shared_encoder_decoder=True, num_encoder_layers=2, num_decoder_layers=2)
  shapes = nn.meta.unbox(jax.eval_shape(Transformer(cfg).init, jax.random.PRNGKey(0), simple_batch(cfg))["params"])
  assert "encoder" not in shapes
  assert "encoder_decoder_attention" in shapes["decoder"]["layers_0"]
  scanned = nn.meta.unbox(jax.eval_shape(Transformer(cfg.replace(scan_layers=True)).init,
                                         jax.random.PRNGKey(0), simple_batch(cfg))["params"])
  assert scanned["decoder"]["layers"]["encoder_decoder_attention"]["key"].shape == (2, 16, 2, 8)


# ------------------------------------------------------------------------- variants

def test_separate_encoder_embedding_feeds_only_the_encoder():
  cfg = tiny(separate_encoder_embedding=True)
  model = Transformer(cfg)
  tokens = jnp.array([[4, 7, 9, 1]], jnp.int32)
  batch = {"encoder_input_tokens": tokens, "decoder_input_tokens": tokens,
           "decoder_target_tokens": tokens}
  params = nn.meta.unbox(random_params(model, batch))
  assert params["encoder_token_embedder"]["embedding"].shape == (V, cfg.emb_dim)
  encode = lambda p: model.apply({"params": p}, batch, method=Transformer.encode)
  logits = lambda p: model.apply({"params": p}, batch)

  def shifted(name):
    p = jax.tree_util.tree_map(lambda x: x, params)
    p[name] = {"embedding": p[name]["embedding"] + 0.5}
    return p
  # The decoder's table does not reach the encoder; the encoder's does, and through it
  # the logits.
  np.testing.assert_array_equal(encode(shifted("token_embedder")), encode(params))
  assert not np.allclose(encode(shifted("encoder_token_embedder")), encode(params))
  assert not np.allclose(logits(shifted("encoder_token_embedder")), logits(params))
  with pytest.raises(ValueError, match="separate_encoder_embedding=True needs"):
    tiny(separate_encoder_embedding=True, mask_type="causal", num_encoder_layers=0)


def test_tied_embeddings_t5_1_0():
  cfg = tiny(tie_embeddings=True, mlp_activation="relu")
  params = init(cfg, "simple")
  assert "logits_dense" not in params
  assert set(params["decoder"]["layers_0"]["mlp"]) == {"wi", "wo"}
  batch = simple_batch(cfg)
  model = Transformer(cfg)
  logits, inter = jax.jit(lambda p: model.apply({"params": p}, batch, capture_intermediates=True))(params)
  y = inter["intermediates"]["decoder"]["__call__"][0]
  emb = nn.meta.unbox(params)["token_embedder"]["embedding"]
  np.testing.assert_allclose(np.asarray(logits), np.asarray(y) @ np.asarray(emb).T / 4.0, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw", [
    dict(norm_type="layernorm", norm_position="post", mlp_activation="gelu", head_dim=None),
    dict(mask_type="causal", mlp_activation="swiglu", head_dim=12, position_encoding="rope"),
])
def test_variants_run(kw):
  cfg = tiny(**kw)
  params = init(cfg, "simple")
  logits = forward(cfg, params, simple_batch(cfg))
  assert logits.shape == (2, 6, V) and np.all(np.isfinite(logits))
  layer = nn.meta.unbox(params)["decoder"]["layers_0"]
  if kw.get("norm_type") == "layernorm":
    assert set(layer["pre_mlp_layer_norm"]) == {"scale", "bias"}
    assert "final_norm" not in params["decoder"]  # post-norm: no final norm
  if kw.get("mlp_activation") == "swiglu":
    assert layer["self_attention"]["query"].shape == (16, 2, 12)


@pytest.mark.slow
def test_remat_same_logits_and_grads():
  cfg = tiny()
  params = init(cfg, "simple")
  batch = simple_batch(cfg)

  def loss(cfg):
    return jax.jit(jax.grad(lambda p: jnp.sum(Transformer(cfg).apply({"params": p}, batch) ** 2)))
  g0 = loss(cfg)(params)
  g1 = loss(cfg.replace(remat_policy="dots_saveable"))(params)
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                         nn.meta.unbox(g0), nn.meta.unbox(g1))


@pytest.mark.parametrize("scan,policy", [(False, "dots_saveable"), (True, "full")])
def test_remat_with_dropout_and_decoding_is_bitwise_the_plain_model(scan, policy):
  """Remat (any policy, scanned or not) recomputes the same dropout masks and runs the
  cache modes: dropout, the encoder pass and the cache mode are layer attributes, so no
  traced value reaches a Python branch."""
  cfg = tiny(dropout_rate=0.3, scan_layers=scan)
  params = nn.meta.unbox(init(cfg, "simple"))
  batch = simple_batch(cfg)

  def grads(cfg):
    model = Transformer(cfg)
    loss = lambda p: jnp.sum(model.apply({"params": p}, batch, enable_dropout=True,
                                         rngs={"dropout": jax.random.PRNGKey(5)}) ** 2)
    return jax.jit(jax.value_and_grad(loss))(params)

  def decode(cfg):
    model = Transformer(cfg)
    prefix = {k: v[:, :3] for k, v in batch.items() if k.startswith("decoder")}
    prefix.update(encoder_input_tokens=batch["encoder_input_tokens"])
    first, state = model.apply({"params": params}, prefix, max_decode_length=5,
                               method=Transformer.prefill, mutable=["cache"])
    step, _ = model.apply({"params": params, **state}, batch["decoder_input_tokens"][:, 3:4],
                          method=Transformer.decode_step, mutable=["cache"])
    return first, step

  remat = cfg.replace(remat_policy=policy)
  jax.tree_util.tree_map(np.testing.assert_array_equal, (grads(remat), decode(remat)),
                         (grads(cfg), decode(cfg)))


def test_dropout():
  cfg = tiny(dropout_rate=0.3, mask_type="causal")
  params = init(cfg, "simple")
  batch = simple_batch(cfg)
  model = Transformer(cfg)
  f = jax.jit(lambda p, key: model.apply({"params": p}, batch, enable_dropout=True, rngs={"dropout": key}))
  a, b, c = f(params, jax.random.PRNGKey(0)), f(params, jax.random.PRNGKey(0)), f(params, jax.random.PRNGKey(1))
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert np.abs(np.asarray(a) - np.asarray(c)).max() > 1e-3
  det = forward(cfg, params, batch)
  assert np.abs(np.asarray(a) - det).max() > 1e-3


# ------------------------------------------------------------------------- errors

@pytest.mark.parametrize("kw,match", [
    (dict(head_dim=None, emb_dim=10, num_heads=3), "divisible"),
    (dict(mask_type="decoder"), "unknown mask_type"),
    (dict(mlp_activation="tanh"), "unknown mlp_activation"),
    (dict(position_encoding="xpos"), "unknown position_encoding"),
    (dict(norm_type="batchnorm"), "unknown norm_type"),
    (dict(norm_position="middle"), "unknown norm_position"),
    (dict(sliding_window=4), "go together"),
    (dict(cross_attention_rope="continue"), "needs position_encoding='rope'"),
    (dict(position_encoding="rope", cross_attention_rope="after"), "unknown cross_attention_rope"),
    (dict(layer_pattern="LG"), "go together"),
    (dict(sliding_window=4, layer_pattern="LX"), "string of L"),
    (dict(sliding_window=0, layer_pattern="L"), "sliding_window must be a positive int"),
    (dict(sliding_window=4, layer_pattern="LG", scan_layers=True), "mixes local and global"),
    (dict(dtype="float16"), "unknown dtype"),
    (dict(remat_policy="some"), "unknown remat_policy"),
    (dict(shared_encoder_decoder=True, num_encoder_layers=3), "num_encoder_layers == num_decoder_layers"),
    (dict(position_encoding="learned"), "max_length"),
    (dict(position_encoding="rope", head_dim=7), "even head_dim"),
    (dict(dropout_rate=1.0), "dropout_rate"),
    (dict(num_heads=0), "num_heads"),
    (dict(mask_type="causal", num_encoder_layers=2), "num_encoder_layers=0"),
    (dict(mask_type="encoder_decoder", num_encoder_layers=0), "num_encoder_layers > 0"),
    (dict(qk_norm=1), "qk_norm must be a bool"),
    (dict(position_encoding="rope", rope_local_max_wavelength=100.0), "local layers"),
    (dict(sliding_window=4, layer_pattern="LG", rope_local_max_wavelength=100.0),
     "position_encoding='rope'"),
    (dict(position_encoding="rope", sliding_window=4, layer_pattern="LG",
          rope_local_max_wavelength=-1.0), "positive number"),
    (dict(merged_attention=True), "no position bias"),
    (dict(merged_attention=True, position_encoding="rope", mask_type="causal",
          num_encoder_layers=0), "merged_attention=True needs"),
    (dict(merged_attention=True, position_encoding="rope", cross_attention_rope="restart"),
     "cross_attention_rope=None"),
    (dict(merged_attention=True, position_encoding="rope", separate_encoder_embedding=True,
          encoder_emb_dim=8), "of the decoder's width"),
    (dict(bidirectional_window="left"), "unknown bidirectional_window"),
    (dict(eoi_id=V), "eoi_id must be"),
    (dict(eoi_id=0), "eoi_id must be"),
])
def test_bad_configs_raise(kw, match):
  base = dict(vocab_size=V, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32,
              num_encoder_layers=2, num_decoder_layers=2)
  with pytest.raises(ValueError, match=match):
    TransformerConfig(**{**base, **kw})


def test_prefix_lm_needs_decoder_causal_attention():
  cfg = tiny(mask_type="prefix_lm")
  batch = simple_batch(cfg)
  del batch["decoder_causal_attention"]
  with pytest.raises(KeyError, match=r"mask_type='prefix_lm' needs batch\['decoder_causal_attention'\]"):
    Transformer(cfg).init(jax.random.PRNGKey(0), batch)


def test_tied_embeddings_without_logits_scale():
  """GPT-style tying (tied_logits_scale=False): logits = y @ E^T, no emb_dim**-0.5."""
  cfg = tiny(tie_embeddings=True, tied_logits_scale=False, mask_type="causal")
  params = init(cfg, "simple")
  batch = simple_batch(cfg)
  model = Transformer(cfg)
  logits, inter = jax.jit(lambda p: model.apply({"params": p}, batch, capture_intermediates=True))(params)
  y = np.asarray(inter["intermediates"]["decoder"]["__call__"][0])
  emb = np.asarray(nn.meta.unbox(params)["token_embedder"]["embedding"])
  np.testing.assert_allclose(np.asarray(logits), y @ emb.T, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------- batch defaults

def padded_batch(cfg):
  """simple_batch with padding: encoder row 1 ends in 2 zeros, target row 0 in 2 zeros."""
  batch = simple_batch(cfg)
  if cfg.is_encoder_decoder:
    batch["encoder_input_tokens"][1, 3:] = 0
  batch["decoder_target_tokens"][0, 4:] = 0
  return batch


BATCHES["padded"] = padded_batch


@pytest.mark.parametrize("mask_type", ["encoder_decoder", "prefix_lm"])
def test_default_segment_ids_are_the_non_padding_tokens(mask_type):
  """Missing (or None) segment ids default to encoder_input_tokens != 0 and
  decoder_target_tokens != 0 (all ones without targets): the same logits as passing them."""
  cfg = tiny(mask_type=mask_type)
  params = init(cfg, "padded")
  batch = padded_batch(cfg)
  explicit = dict(batch, decoder_segment_ids=(batch["decoder_target_tokens"] != 0).astype(np.int32))
  if cfg.is_encoder_decoder:
    explicit["encoder_segment_ids"] = (batch["encoder_input_tokens"] != 0).astype(np.int32)
  want = forward(cfg, params, explicit)
  np.testing.assert_array_equal(forward(cfg, params, batch), want)
  nones = dict(batch, decoder_segment_ids=None, encoder_segment_ids=None, decoder_positions=None)
  np.testing.assert_array_equal(forward(cfg, params, nones), want)
  # The defaults matter: all-ones decoder segment ids give other logits for the padded row.
  ones = dict(explicit, decoder_segment_ids=np.ones_like(explicit["decoder_segment_ids"]))
  assert np.abs(forward(cfg, params, ones)[0] - want[0]).max() > 1e-4
  # Without targets every decoder token is a real token.
  no_targets = {k: v for k, v in batch.items() if k != "decoder_target_tokens"}
  np.testing.assert_array_equal(forward(cfg, params, no_targets), forward(cfg, params, ones))
  if cfg.is_encoder_decoder:  # and all-ones encoder segment ids change the padded encoder row
    ones = dict(explicit, encoder_segment_ids=np.ones_like(explicit["encoder_segment_ids"]))
    assert np.abs(forward(cfg, params, ones)[1] - want[1]).max() > 1e-4


def test_encode_and_decode_default_encoder_segment_ids():
  """encode / decode called on their own derive the encoder mask from the tokens too."""
  cfg = tiny()
  params = init(cfg, "padded")
  batch = padded_batch(cfg)
  model = Transformer(cfg)
  seg = (batch["encoder_input_tokens"] != 0).astype(np.int32)
  enc = jax.jit(lambda b: model.apply({"params": params}, b, method=Transformer.encode))
  encoded = enc(batch)
  np.testing.assert_array_equal(encoded, enc(dict(batch, encoder_segment_ids=seg)))
  assert np.abs(np.asarray(enc(dict(batch, encoder_segment_ids=np.ones_like(seg))))[1]
                - np.asarray(encoded)[1]).max() > 1e-4
  dec = jax.jit(lambda b: model.apply({"params": params}, encoded, b, method=Transformer.decode))
  np.testing.assert_array_equal(dec(batch), dec(dict(batch, encoder_segment_ids=seg)))
  assert np.abs(np.asarray(dec(dict(batch, encoder_segment_ids=np.ones_like(seg))))[1]
                - np.asarray(dec(batch))[1]).max() > 1e-4


def test_bad_batches_and_calls_raise():
  cfg = tiny()
  params = init(cfg, "simple")
  batch = simple_batch(cfg)
  model = Transformer(cfg)
  apply = lambda b, **kw: model.apply({"params": params}, b, **kw)
  with pytest.raises(KeyError, match="'decoder_input_tokens'"):
    apply({k: v for k, v in batch.items() if k != "decoder_input_tokens"})
  with pytest.raises(KeyError, match="'encoder_input_tokens'"):
    apply(dict(batch, encoder_input_tokens=None))
  with pytest.raises(ValueError, match=r"batch\['decoder_input_tokens'\] must be \[B, L\]"):
    apply(dict(batch, decoder_input_tokens=batch["decoder_input_tokens"][0]))
  with pytest.raises(ValueError, match=r"encoder_segment_ids'\] must be \[B, L\]"):
    apply(dict(batch, encoder_segment_ids=np.ones((2, 5, 1), np.int32)))
  for length in (4, 6):  # the encoder tokens have length 5
    with pytest.raises(ValueError, match=r"segment ids must be \[B, L\] = \(2, 5\) like the tokens, "
                       rf"got shape \(2, {length}\)"):
      apply(dict(batch, encoder_segment_ids=np.ones((2, length), np.int32)))
  with pytest.raises(ValueError, match=r"segment ids must be \[B, L\] = \(2, 6\)"):
    apply(dict(batch, decoder_segment_ids=np.ones((1, 6), np.int32)))
  with pytest.raises(ValueError, match="needs the encoder output"):
    model.apply({"params": params}, None, batch, method=Transformer.decode)
  with pytest.raises(ValueError, match="max_decode_length >= prefix length 6, got 5"):
    model.apply({"params": params}, batch, max_decode_length=5, method=Transformer.prefill,
                mutable=["cache"])
  # A cache exactly as long as the prefix is allowed (scoring the prefix, no step after).
  logits, _ = model.apply({"params": params}, batch, max_decode_length=6,
                          method=Transformer.prefill, mutable=["cache"])
  np.testing.assert_allclose(np.asarray(logits), forward(cfg, params, batch), atol=2e-5)
  for shape in ((2,), (2, 1, 1)):
    with pytest.raises(ValueError, match=r"must be \[B, T\]"):
      model.apply({"params": params}, np.zeros(shape, np.int32), method=Transformer.decode_step,
                  mutable=["cache"])
  causal = tiny(mask_type="causal")
  with pytest.raises(ValueError, match="encode needs mask_type='encoder_decoder'"):
    Transformer(causal).apply({"params": init(causal, "simple")}, simple_batch(causal),
                              method=Transformer.encode)
  x = jnp.zeros((2, 6, 16))
  stack = Stack(cfg, 1, has_cross_attention=True)
  with pytest.raises(ValueError, match="needs encoded and encoder_segment_ids"):
    stack.init(jax.random.PRNGKey(0), x, segment_ids=jnp.ones((2, 6), jnp.int32))
  with pytest.raises(ValueError, match="needs encoded and encoder_segment_ids"):
    stack.init(jax.random.PRNGKey(0), x, segment_ids=jnp.ones((2, 6), jnp.int32), encoded=x)


# ------------------------------------------------------------------------- dropout sites

def spy_on_stack_dropout(monkeypatch, on_call):
  """Wraps the transformer's broadcast_dropout: on_call(module, x, out, rate, deterministic,
  broadcast_length) sees every stack- and layer-level dropout (attention and MLP dropout
  live in their own modules)."""
  real = transformer_lib.broadcast_dropout

  def spy(x, rate, deterministic, module, broadcast_length=True):
    out = real(x, rate, deterministic, module, broadcast_length)
    on_call(module, x, out, rate, deterministic, broadcast_length)
    return out
  monkeypatch.setattr(transformer_lib, "broadcast_dropout", spy)


@pytest.mark.parametrize("enable", [True, False])
def test_dropout_sites_follow_t5x(monkeypatch, enable):
  """Stack-level dropout (t5x): on the embeddings, after each sub-block, on the stack output;
  masks shared along the length axis except the encoder's output (elementwise)."""
  cfg = tiny(dropout_rate=0.25)
  params = nn.meta.unbox(init(cfg, "simple"))
  calls = []
  spy_on_stack_dropout(monkeypatch, lambda module, x, out, *args: calls.append(
      ("/".join(module.scope.path), x.shape, *args)))
  jax.eval_shape(lambda p: Transformer(cfg).apply({"params": p}, simple_batch(cfg), enable_dropout=enable,
                                                  rngs={"dropout": jax.random.PRNGKey(0)}), params)
  enc, dec = (2, 5, 16), (2, 6, 16)
  site = lambda path, shape, bcast=True: (path, shape, 0.25, not enable, bcast)
  assert calls == [
      site("encoder", enc), site("encoder/layers_0", enc), site("encoder/layers_0", enc),
      site("encoder", enc, bcast=False),
      site("decoder", dec), site("decoder/layers_0", dec), site("decoder/layers_0", dec),
      site("decoder/layers_0", dec), site("decoder", dec)]


def test_stack_output_dropout_masks():
  """The encoder's output dropout is elementwise, the decoder's shared along the length."""
  cfg = tiny(dropout_rate=0.5)
  params = init(cfg, "simple")
  batch = simple_batch(cfg)
  model = Transformer(cfg)
  rngs = {"dropout": jax.random.PRNGKey(3)}
  encoded = np.asarray(jax.jit(lambda p: model.apply({"params": p}, batch, enable_dropout=True,
                                                     rngs=rngs, method=Transformer.encode))(params))
  zero = encoded == 0
  assert zero.any() and (zero != zero[:, :1]).any()  # differs along the length
  _, inter = jax.jit(lambda p: model.apply({"params": p}, batch, enable_dropout=True, rngs=rngs,
                                           capture_intermediates=True))(params)
  zero = np.asarray(inter["intermediates"]["decoder"]["__call__"][0]) == 0
  assert zero.any() and (zero == zero[:, :1]).all()  # whole embedding columns dropped


# ------------------------------------------------------------------------- plain trees

def test_scan_conversion_of_plain_param_trees():
  """scan_to_unscanned / unscanned_to_scan also take unboxed trees (checkpoints, HF import)."""
  cfg = tiny(num_encoder_layers=2, num_decoder_layers=3)
  boxed = init(cfg, "simple")
  plain = nn.meta.unbox(boxed)
  scanned = unscanned_to_scan(plain)
  assert set(scanned["decoder"]) == {"layers", "final_norm", "relpos_bias"}
  assert scanned["decoder"]["layers"]["mlp"]["wo"].shape == (3, 32, 16)
  assert scanned["encoder"]["layers"]["mlp"]["wo"].shape == (2, 32, 16)
  jax.tree_util.tree_map(np.testing.assert_array_equal, scanned, nn.meta.unbox(unscanned_to_scan(boxed)))
  np.testing.assert_array_equal(scanned["decoder"]["layers"]["mlp"]["wo"][2],
                                plain["decoder"]["layers_2"]["mlp"]["wo"])
  jax.tree_util.tree_map(np.testing.assert_array_equal, scan_to_unscanned(scanned), plain)
  assert scan_to_unscanned(plain) == plain and unscanned_to_scan(scanned) == scanned


@pytest.mark.parametrize("mask_type", ["causal", "encoder_decoder"])
def test_scan_conversion_keeps_logical_axis_names(mask_type):
  """Boxed trees: "layers" is prepended to each leaf's names and removed again, for the
  decoder of a decoder-only model too (no encoder subtree to convert first)."""
  cfg = tiny(mask_type=mask_type, num_decoder_layers=2)
  boxed = init(cfg, "simple")
  is_boxed = lambda x: isinstance(x, nn.LogicallyPartitioned)
  names = lambda tree: jax.tree_util.tree_map(lambda x: x.names, tree, is_leaf=is_boxed)
  scanned = unscanned_to_scan(boxed)
  assert "layers_0" not in scanned["decoder"]
  assert scanned["decoder"]["layers"]["mlp"]["wo"].names == ("layers", "mlp", "embed")
  assert scanned["decoder"]["layers"]["mlp"]["wo"].value.shape == (2, 32, 16)
  back = scan_to_unscanned(scanned)
  assert names(back) == names(boxed)
  # A "layers" subtree whose leaves lack the layer axis is refused, not sliced.
  wrong = dict(boxed, decoder={"layers": boxed["decoder"]["layers_0"]})
  with pytest.raises(ValueError, match="first logical axis must be 'layers', got"):
    scan_to_unscanned(wrong)
  for first in ("embed", "mlp"):  # names sorting before and after "layers"
    leaf = nn.LogicallyPartitioned(jnp.zeros((2, 3)), names=(first, "vocab"))
    with pytest.raises(ValueError, match=rf"got \('{first}', 'vocab'\)"):
      scan_to_unscanned({"decoder": {"layers": {"w": leaf}}})
  jax.tree_util.tree_map(np.testing.assert_array_equal, nn.meta.unbox(back), nn.meta.unbox(boxed))


# ------------------------------------------------------------------------- config strings

@pytest.mark.parametrize("kw", [
    dict(mask_type="causal", position_encoding="learned", max_length=16, norm_type="layernorm"),
    dict(mask_type="prefix_lm", position_encoding="alibi", norm_position="post", mlp_activation="gelu"),
    dict(position_encoding="sinusoidal", mlp_activation="relu"),
    dict(mask_type="causal", position_encoding="rope", mlp_activation="swiglu"),
    dict(mask_type="prefix_lm", position_encoding="t5_relative"),
])
def test_config_strings_built_at_run_time_select_the_same_model(kw):
  """Config values read from a command line or a file are equal, not identical, to the
  literals the code compares them with: the model must compare with ==, not `is`."""
  cfg = tiny(**kw)
  strings = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
             if isinstance(getattr(cfg, f.name), str)}
  assert {"mask_type", "position_encoding", "norm_type", "norm_position", "mlp_activation",
          "remat_policy"} <= set(strings)
  built = cfg.replace(**{k: runtime_str(v) for k, v in strings.items()})
  assert all(getattr(built, k) is not v for k, v in strings.items())
  params = init(cfg, "simple")
  batch = simple_batch(cfg)
  abstract = jax.eval_shape(Transformer(built).init, jax.random.PRNGKey(0), batch)["params"]
  assert jax.tree_util.tree_structure(abstract) == jax.tree_util.tree_structure(params)
  # Not forward(built, ...): its cache would hand back the function traced for `cfg`, which
  # compares equal to `built`.
  got = jax.jit(lambda p: Transformer(built).apply({"params": p}, batch))(params)
  np.testing.assert_array_equal(np.asarray(got), forward(cfg, params, batch))


@pytest.mark.parametrize("policy", ["none", "full", "dots_saveable", "nothing_saveable"])
def test_remat_policies_reach_jax(policy):
  """remat_policy="none" (also as a run-time string) traces no checkpoint; the others do,
  each with its own saving policy."""
  cfg = tiny(mask_type="causal", remat_policy=runtime_str(policy))
  batch = simple_batch(cfg)
  model = Transformer(cfg)
  params = nn.meta.unbox(init(tiny(mask_type="causal"), "simple"))
  jaxpr = str(jax.make_jaxpr(jax.grad(lambda p: model.apply({"params": p}, batch).sum()))(params))
  assert bool(re.search(r"\b(remat2?|checkpoint)\b", jaxpr)) == (policy != "none")
  # "full" saves nothing (no policy); the others hand JAX their saving policy.
  policies = set(re.findall(r"policy=<?(\w+)", jaxpr))
  assert policies == {"none": set(), "full": {"None"}, "dots_saveable": {"DotsSaveable"},
                      "nothing_saveable": {"function"}}[policy]


def test_scanned_layers_draw_their_own_dropout_masks(monkeypatch):
  """nn.scan splits the dropout RNG per layer: two scanned layers never share a mask."""
  cfg = tiny(mask_type="causal", num_decoder_layers=2, scan_layers=True, dropout_rate=0.5)
  params = nn.meta.unbox(init(cfg, "simple"))
  dropped = []

  def on_call(module, x, out, *args):
    if "layers" in module.scope.path:
      jax.debug.callback(lambda o: dropped.append(np.asarray(o) == 0), out)
  spy_on_stack_dropout(monkeypatch, on_call)
  Transformer(cfg).apply({"params": params}, simple_batch(cfg), enable_dropout=True,
                         rngs={"dropout": jax.random.PRNGKey(0)})
  assert len(dropped) == 4  # 2 layers x (self-attention, MLP), in layer order
  for first, second in zip(dropped[:2], dropped[2:]):
    assert first.any() and (first != second).any()


def test_scanned_layers_are_initialised_independently():
  """nn.scan splits the params RNG per layer: each layer's init is its own draw."""
  cfg = tiny(mask_type="causal", num_decoder_layers=2, scan_layers=True)
  params = nn.meta.unbox(jax.jit(Transformer(cfg).init)(jax.random.PRNGKey(0), simple_batch(cfg))["params"])
  for path, leaf in jax.tree_util.tree_leaves_with_path(params["decoder"]["layers"]):
    if "scale" not in jax.tree_util.keystr(path):  # norm scales start at 1 in every layer
      assert np.abs(leaf[0] - leaf[1]).max() > 1e-3, jax.tree_util.keystr(path)
