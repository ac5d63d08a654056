"""The whole tiny Transformer against a float64 NumPy forward pass written here.

The reference follows the papers' definitions, independent of lm's code: RMSNorm (T5,
eps 1e-6) / LayerNorm (eps 1e-5, with bias); pre-norm (norm -> sub-block -> residual,
final norm) or post-norm (sub-block -> residual -> norm, no final norm); attention
softmax(q k^T + bias) v without 1/sqrt(H) (T5 folds it into the query init); MLPs
relu / tanh-GELU / GEGLU / SwiGLU; positions: T5 relative buckets (Mesh TF
`_relative_position_bucket`), RoPE ("rotate half"), ALiBi (Press et al.: slopes
2^(-8 i / N), bias -slope |i - j|), learned and sinusoidal absolute embeddings; tied
logits y E^T / sqrt(D) (T5.1.0) or an untied kernel. Gemma 2 / T5Gemma's knobs:
grouped-query attention (query head n reads key/value head n // (N / K)), queries times
query_pre_attn_scalar**-0.5, attention scores c * tanh(q.k / c) before the mask and
position biases, final logits c * tanh(logits / c), RMSNorm times (1 + scale), embeddings
times sqrt(D) (tied logits unscaled). Gemma 3 / T5Gemma 2's: queries and keys
normalised over the head dim before RoPE and the scale, a RoPE base per layer kind,
merged decoder attention (one softmax over the decoder's own keys and the encoder's
outputs projected by the same kernels, the latter normed and not rotated), the encoder's
centred window of W keys, and a token whose input embedding is its own vector.

Every parameter is random (norm scales and biases too), so a variant that ignores a
parameter, swaps an order or drops a term changes the logits.

Tolerance: float32 forward vs float64; each op sums <= 48 products of O(1) values, so
the relative error per op is <= 48 eps32 ~ 6e-6, and ~20 such ops lie between input and
logits: 1.2e-4 relative to the logits' scale is a worst-case bound.
"""
import math

import jax
import numpy as np
import pytest

import flax.linen as nn

from lm.model.transformer_config import ADDED_FIELDS
from lm.model.transformer import Transformer, TransformerConfig

V, D, N, H, F = 40, 16, 4, 6, 24
EPS32 = float(np.finfo(np.float32).eps)
NEG = -1e10


def _rms_norm(x, p):
  return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-6) * p["scale"]


def _gemma_rms_norm(x, p):
  return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-6) * (1 + p["scale"])


def _layer_norm(x, p):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + 1e-5) * p["scale"] + p["bias"]


def _gelu(x):
  return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _bucket(rel, bidirectional, num_buckets=32, max_distance=128):
  """Mesh TF / T5 `_relative_position_bucket` for one int offset (key - query)."""
  n = -rel
  ret = 0
  if bidirectional:
    num_buckets //= 2
    if n < 0:
      ret += num_buckets
    n = abs(n)
  else:
    n = max(n, 0)
  max_exact = num_buckets // 2
  if n < max_exact:
    return ret + n
  large = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact)
                          * (num_buckets - max_exact))
  return ret + min(large, num_buckets - 1)


def _rope(x, pos, base=10_000.0):
  """x [L, N, H], rotate-half: dim i pairs with i + H/2, angle pos / base^(2i/H)."""
  half = x.shape[-1] // 2
  ang = pos[:, None, None] / base ** (2 * np.arange(half) / x.shape[-1])
  x1, x2 = x[..., :half], x[..., half:]
  return np.concatenate([x1 * np.cos(ang) - x2 * np.sin(ang),
                         x2 * np.cos(ang) + x1 * np.sin(ang)], -1)


def _attention(cfg, p, xq, xkv, bias, rope_pos=None, kv_rope_pos=None, base=10_000.0,
               encoded=None, encoder_bias=None):
  """One example: xq [L, D], xkv [S, D], bias [N, L, S] (mask included); RoPE at rope_pos
  (queries) and kv_rope_pos (keys; default rope_pos) with this base. Merged attention:
  encoded [Se, D] also projected to keys (normed, not rotated) and values, appended after
  the S own keys, with encoder_bias [N, L, Se]."""
  norm = _gemma_rms_norm if cfg.norm_type == "gemma_rmsnorm" else _rms_norm
  q = np.einsum("ld,dnh->lnh", xq, p["query"])
  k = np.einsum("sd,dkh->skh", xkv, p["key"])  # K key/value heads
  v = np.einsum("sd,dkh->skh", xkv, p["value"])
  if cfg.qk_norm:  # over H, before the scale and RoPE
    q, k = norm(q, p["query_norm"]), norm(k, p["key_norm"])
  if cfg.query_pre_attn_scalar is not None:
    q = q / math.sqrt(cfg.query_pre_attn_scalar)
  if rope_pos is not None:
    q = _rope(q, rope_pos, base)
    k = _rope(k, rope_pos if kv_rope_pos is None else kv_rope_pos, base)
  if encoded is not None:
    ek = np.einsum("sd,dkh->skh", encoded, p["key"])
    k = np.concatenate([k, norm(ek, p["key_norm"]) if cfg.qk_norm else ek])
    v = np.concatenate([v, np.einsum("sd,dkh->skh", encoded, p["value"])])
    bias = np.concatenate([bias, encoder_bias], -1)
  group = [n * k.shape[1] // N for n in range(N)]  # the key/value head of each query head
  k, v = k[:, group], v[:, group]
  scores = np.einsum("lnh,snh->nls", q, k)
  cap = cfg.attn_logit_softcapping
  if cap is not None:
    scores = cap * np.tanh(scores / cap)
  w = _softmax(scores + bias)
  return np.einsum("nhd,lnh->ld", p["out"], np.einsum("nls,snh->lnh", w, v))


def _mlp(p, x, act):
  if act in ("relu", "gelu"):
    h = x @ p["wi"]
    h = np.maximum(h, 0) if act == "relu" else _gelu(h)
  else:
    g = x @ p["wi_0"]
    g = _gelu(g) if act == "gated_gelu" else g / (1 + np.exp(-g))
    h = g * (x @ p["wi_1"])
  return h @ p["wo"]


def _stack(cfg, p, x, mask, *, encoder, encoded=None, cross_mask=None):
  """One example through one stack. x [L, D]; mask bool [L, L]; cross_mask bool [L, S]."""
  l = x.shape[0]
  pos = np.arange(l)
  norm = {"rmsnorm": _rms_norm, "gemma_rmsnorm": _gemma_rms_norm,
          "layernorm": _layer_norm}[cfg.norm_type]
  bias = np.where(mask, 0.0, NEG)[None].repeat(N, 0)
  pe = cfg.position_encoding
  if pe == "t5_relative":
    table = p["relpos_bias"]["rel_embedding"]
    buckets = np.array([[_bucket(j - i, encoder) for j in range(l)] for i in range(l)])
    bias = bias + table[:, buckets]
  elif pe == "alibi":
    slopes = 2.0 ** (-8.0 * np.arange(1, N + 1) / N)
    bias = bias - slopes[:, None, None] * np.abs(pos[:, None] - pos[None, :])
  elif pe == "learned":
    x = x + p["pos_embedder"]["embedding"][pos]
  elif pe == "sinusoidal":
    ang = pos[:, None] / 10_000.0 ** (np.arange(D // 2) / (D // 2))
    x = x + np.concatenate([np.sin(ang), np.cos(ang)], -1)
  rope_pos = pos if pe == "rope" else None
  pre = cfg.norm_position != "post"

  def sub(x, lp, norm_name, fn):
    if cfg.norm_position == "sandwich":
      return x + norm(fn(norm(x, lp[norm_name])), lp["post" + norm_name[len("pre"):]])
    if pre:
      return x + fn(norm(x, lp[norm_name]))
    return norm(x + fn(x), lp[norm_name])

  n_layers = cfg.num_encoder_layers if encoder else cfg.num_decoder_layers
  pattern = cfg.layer_pattern or "G"
  w = cfg.sliding_window or 0
  offset = pos[None, :] - pos[:, None]  # key - query
  near = np.abs(offset) < w
  if encoder and cfg.bidirectional_window == "centred":  # W keys around the query
    near = (offset >= -((w - 1) // 2)) & (offset <= w // 2)
  local_bias = np.where(near, bias, NEG)
  merged = encoded is not None and cfg.merged_attention
  cb = None if encoded is None else np.where(cross_mask, 0.0, NEG)[None].repeat(N, 0)
  for i in range(n_layers):
    lp = p[f"layers_{i}"]
    local = pattern[i % len(pattern)] == "L"
    self_bias = local_bias if local else bias
    base = (cfg.rope_local_max_wavelength if local and cfg.rope_local_max_wavelength
            else cfg.rope_max_wavelength)
    x = sub(x, lp, "pre_self_attention_layer_norm",
            lambda h: _attention(cfg, lp["self_attention"], h, h, self_bias, rope_pos, base=base,
                                 encoded=encoded if merged else None, encoder_bias=cb))
    if encoded is not None and not merged:
      cross_q = cross_k = None
      if cfg.cross_attention_rope is not None:  # encoder keys at 0.., queries at 0.. or S_valid..
        cross_k = np.arange(encoded.shape[0])
        cross_q = pos + (cross_mask[0].sum() if cfg.cross_attention_rope == "continue" else 0)
      x = sub(x, lp, "pre_cross_attention_layer_norm",
              lambda h: _attention(cfg, lp["encoder_decoder_attention"], h, encoded, cb,
                                   cross_q, cross_k, base=base))
    x = sub(x, lp, "pre_mlp_layer_norm", lambda h: _mlp(lp["mlp"], h, cfg.mlp_activation))
  if pre:
    x = norm(x, p["final_norm"])
  return x


def reference_logits(cfg, params, batch):
  """float64 [B, Lt, V]; decoder segment ids all 1 (no padding in decoder inputs)."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  emb = p["token_embedder"]["embedding"]
  inputs = emb * math.sqrt(D) if cfg.scale_embeddings else emb  # tied logits use emb
  if cfg.eoi_id is not None:  # its own vector, unscaled
    inputs = inputs.copy()
    inputs[cfg.eoi_id] = p["token_embedder"]["eoi_embedding"]
  out = []
  for b in range(batch["decoder_input_tokens"].shape[0]):
    dec = batch["decoder_input_tokens"][b]
    lt = dec.shape[0]
    causal = np.tril(np.ones((lt, lt), bool))
    encoded = cross = None
    if cfg.mask_type == "prefix_lm":
      dca = batch["decoder_causal_attention"][b].astype(bool)
      causal = causal | (dca[:, None] & dca[None, :])
    if cfg.mask_type == "encoder_decoder":
      enc = batch["encoder_input_tokens"][b]
      valid = enc != 0
      encoded = _stack(cfg, p["encoder"], inputs[enc], valid[:, None] & valid[None, :],
                       encoder=True)
      cross = np.ones((lt, 1), bool) & valid[None, :]
    y = _stack(cfg, p["decoder"], inputs[dec], causal, encoder=False, encoded=encoded,
               cross_mask=cross)
    if cfg.tie_embeddings:
      logits = y @ emb.T / math.sqrt(D)
    else:
      logits = y @ p["logits_dense"]["kernel"]
    cap = cfg.final_logit_softcapping
    out.append(logits if cap is None else cap * np.tanh(logits / cap))
  return np.stack(out)


VARIANTS = {
    "t5_1_1_enc_dec": dict(),
    "t5_1_0_relu_tied": dict(mlp_activation="relu", tie_embeddings=True),
    "prefix_lm_relative": dict(mask_type="prefix_lm", num_encoder_layers=0),
    "layernorm_post_gelu_learned": dict(mask_type="causal", num_encoder_layers=0,
                                        norm_type="layernorm", norm_position="post",
                                        mlp_activation="gelu", position_encoding="learned",
                                        max_length=16),
    "swiglu_rope": dict(mask_type="causal", num_encoder_layers=0, mlp_activation="swiglu",
                        position_encoding="rope"),
    "enc_dec_rope_layernorm_post": dict(position_encoding="rope", norm_type="layernorm",
                                        norm_position="post"),
    "alibi_layernorm": dict(mask_type="causal", num_encoder_layers=0,
                            position_encoding="alibi", norm_type="layernorm"),
    "sinusoidal_gelu": dict(mask_type="causal", num_encoder_layers=0,
                            position_encoding="sinusoidal", mlp_activation="gelu"),
    "no_positions": dict(mask_type="causal", num_encoder_layers=0, position_encoding="none"),
    # T5Gemma's knobs (the caps are below the scores' and logits' spread, so they bite:
    # test_knob_variants_differ_from_t5).
    "gqa_scale_softcaps_enc_dec": dict(num_kv_heads=2, query_pre_attn_scalar=3.0,
                                       attn_logit_softcapping=1.0, final_logit_softcapping=3.0),
    "mqa_rope_softcap_causal": dict(mask_type="causal", num_encoder_layers=0,
                                    position_encoding="rope", mlp_activation="swiglu",
                                    num_kv_heads=1, attn_logit_softcapping=1.0),
    "gemma_norm_scaled_embeddings_tied": dict(norm_type="gemma_rmsnorm", scale_embeddings=True,
                                              tie_embeddings=True, position_encoding="rope"),
    "sandwich_gemma_norm_gqa_enc_dec": dict(norm_position="sandwich", norm_type="gemma_rmsnorm",
                                            num_kv_heads=2),
    # Local layer 0, global layer 1 in both stacks; windows shorter than both sequences.
    "sliding_local_global_enc_dec": dict(sliding_window=3, layer_pattern="LG",
                                         position_encoding="rope"),
    "sliding_local_prefix_lm": dict(mask_type="prefix_lm", num_encoder_layers=0,
                                    sliding_window=2, layer_pattern="L"),
    # RedLLM: RoPE in cross-attention, decoder positions after the encoder's (row 1 has 4
    # encoder tokens, row 0 seven: per-row offsets).
    "cross_rope_continue_enc_dec": dict(position_encoding="rope", cross_attention_rope="continue"),
    "cross_rope_restart_enc_dec": dict(position_encoding="rope", cross_attention_rope="restart"),
    # RoPE bases small enough to bite on 9 tokens: global 30, local 4.
    "rope_bases_local_global_causal": dict(mask_type="causal", num_encoder_layers=0,
                                           position_encoding="rope", sliding_window=3,
                                           layer_pattern="LG", rope_max_wavelength=30.0,
                                           rope_local_max_wavelength=4.0),
    # T5Gemma 2: merged decoder attention, q/k norms, the centred encoder window (W = 4:
    # one key more on the right), per-kind RoPE bases, an end-of-image token (id 5).
    "t5gemma2_merged_enc_dec": dict(merged_attention=True, qk_norm=True,
                                    norm_type="gemma_rmsnorm", norm_position="sandwich",
                                    position_encoding="rope", num_kv_heads=2,
                                    query_pre_attn_scalar=3.0, sliding_window=4,
                                    layer_pattern="LG", bidirectional_window="centred",
                                    rope_max_wavelength=30.0, rope_local_max_wavelength=4.0,
                                    scale_embeddings=True, eoi_id=5),
}
KNOBS = ("num_kv_heads", "query_pre_attn_scalar", "attn_logit_softcapping",
         "final_logit_softcapping", "scale_embeddings", "norm_type", "norm_position",
         "sliding_window", "cross_attention_rope", "qk_norm", "rope_max_wavelength",
         "rope_local_max_wavelength", "merged_attention", "bidirectional_window",
         "eoi_id")
T5_DEFAULTS = {**ADDED_FIELDS, "norm_type": "rmsnorm", "norm_position": "pre",
               "rope_max_wavelength": 10_000.0}


def _config(**kw):
  base = dict(vocab_size=V, emb_dim=D, num_heads=N, head_dim=H, mlp_dim=F,
              num_encoder_layers=2, num_decoder_layers=2, dtype="float32")
  base.update(kw)
  return TransformerConfig(**base)


def _batch(cfg, b=2, li=7, lt=9, seed=0):
  rng = np.random.default_rng(seed)
  batch = {"decoder_input_tokens": rng.integers(1, V, (b, lt)).astype(np.int32),
           "decoder_target_tokens": rng.integers(1, V, (b, lt)).astype(np.int32)}
  if cfg.is_encoder_decoder:
    enc = rng.integers(1, V, (b, li)).astype(np.int32)
    enc[1, 4:] = 0  # padding in the encoder input: masked as keys everywhere
    batch["encoder_input_tokens"] = enc
  if cfg.eoi_id is not None:  # in both stacks' inputs
    for key in ("encoder_input_tokens", "decoder_input_tokens"):
      if key in batch:
        batch[key][:, 1] = cfg.eoi_id
  if cfg.mask_type == "prefix_lm":
    batch["decoder_causal_attention"] = np.array([[1] * 4 + [0] * (lt - 4),
                                                  [1] * 2 + [0] * (lt - 2)], np.int32)
  return batch


def _random_params(cfg, batch, seed=1):
  """All params random: matrices with unit fan-in variance, norm scales 1 +- 0.3,
  biases and relative / position tables O(0.5)."""
  params = nn.meta.unbox(jax.eval_shape(Transformer(cfg).init, jax.random.key(0), batch)["params"])
  rng = np.random.default_rng(seed)

  def draw(path, x):
    name = str(getattr(path[-1], "key", path[-1]))
    if name == "scale":
      return (1 + 0.3 * rng.normal(size=x.shape)).astype(np.float32)
    if name in ("bias", "rel_embedding") or path[-2].key == "pos_embedder":
      return (0.5 * rng.normal(size=x.shape)).astype(np.float32)
    if name == "embedding":
      return rng.normal(size=x.shape).astype(np.float32)
    fan_in = x.shape[0] if name != "out" else x.shape[0] * x.shape[1]
    return (rng.normal(size=x.shape) / math.sqrt(fan_in)).astype(np.float32)

  return jax.tree_util.tree_map_with_path(draw, params)


SLOW = ("t5_1_1_enc_dec", "t5_1_0_relu_tied", "no_positions")  # also covered by HF goldens


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(VARIANTS)])
def test_logits_match_numpy_forward(name):
  cfg = _config(**VARIANTS[name])
  batch = _batch(cfg)
  params = _random_params(cfg, batch)
  got = np.asarray(jax.jit(lambda p, b: Transformer(cfg).apply({"params": p}, b))(params, batch))
  want = reference_logits(cfg, params, batch)
  assert got.shape == want.shape == (2, 9, V)
  assert np.all(np.isfinite(got))
  scale = np.abs(want).max()
  assert scale > 1.0  # the logits are not trivially small
  np.testing.assert_allclose(got, want, rtol=0, atol=1.2e-4 * scale)


@pytest.mark.parametrize("name", ["gqa_scale_softcaps_enc_dec", "mqa_rope_softcap_causal",
                                  "gemma_norm_scaled_embeddings_tied",
                                  "sandwich_gemma_norm_gqa_enc_dec",
                                  "sliding_local_global_enc_dec", "sliding_local_prefix_lm",
                                  "cross_rope_continue_enc_dec", "cross_rope_restart_enc_dec",
                                  "rope_bases_local_global_causal", "t5gemma2_merged_enc_dec"])
def test_knob_variants_differ_from_t5(name):
  """Each knob of a knob variant changes the reference's logits (so the match above tests
  it): the same params with one knob back at T5's default. For GQA, which head reads
  which: multi-head attention whose query head n has key/value kernel n // (N / K) is
  GQA exactly, so the interleaved grouping n % K must differ."""
  cfg = _config(**VARIANTS[name])
  batch = _batch(cfg)
  params = _random_params(cfg, batch)
  want = reference_logits(cfg, params, batch)
  for knob in KNOBS:
    default = T5_DEFAULTS[knob]
    if getattr(cfg, knob) == default or (knob == "num_kv_heads" and cfg.num_kv_heads == 1):
      continue  # (one key/value head: every grouping is the same)
    # (a window without local layers is refused: the two knobs go back together)
    back = {knob: default}
    if knob == "sliding_window":
      back.update(layer_pattern=None, rope_local_max_wavelength=None,
                  bidirectional_window="symmetric")
    if knob == "merged_attention":  # the same kernels as a separate cross-attention
      params = dict(params, decoder={
          name: dict(layer, encoder_decoder_attention=layer["self_attention"],
                     pre_cross_attention_layer_norm=layer["pre_self_attention_layer_norm"],
                     post_cross_attention_layer_norm=layer["post_self_attention_layer_norm"])
          if name.startswith("layers_") else layer for name, layer in params["decoder"].items()})
    other, p = cfg.replace(**back), params
    if knob == "num_kv_heads":
      group = [n % cfg.num_kv_heads for n in range(N)]
      p = jax.tree_util.tree_map_with_path(
          lambda path, x: x[:, group] if path[-1].key in ("key", "value") else x, params)
    diff = np.abs(reference_logits(other, p, batch) - want).max()
    assert diff > 0.05 * np.abs(want).max(), (knob, diff)


def test_reference_bucket_matches_t5_examples():
  """The reference's bucket function reproduces T5's documented examples."""
  assert [_bucket(r, True) for r in (0, -1, -8, -12, -91, 1, 8, 100)] == [
      0, 1, 8, 9, 15, 17, 24, 31]
  assert [_bucket(r, False) for r in (-16, -32, -113, 5)] == [16, 21, 31, 0]
