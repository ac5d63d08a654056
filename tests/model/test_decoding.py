"""Incremental decoding: prefill + one-token steps reproduce the full forward pass."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

from lm.model.transformer import Transformer

from model_helpers import V, random_params, runtime_str
from model_helpers import tiny as _tiny


def tiny(**kw):
  """Two decoder layers: the cache must be right in every layer, not only the first."""
  return _tiny(**{"num_decoder_layers": 2, **kw})


def check_cached_equals_full(cfg, lt=6, prefix=1, ragged=False):
  model = Transformer(cfg)
  rng = np.random.default_rng(0)
  b = 2
  dec = rng.integers(2, V, (b, lt)).astype(np.int32)
  dec[:, 0] = 0
  batch = {"decoder_input_tokens": dec}
  if cfg.is_encoder_decoder:
    enc = rng.integers(2, V, (b, 5)).astype(np.int32)
    enc[1, 3:] = 0  # padded encoder row
    batch["encoder_input_tokens"] = enc
  if cfg.mask_type == "prefix_lm":
    batch["decoder_causal_attention"] = (np.arange(lt) < prefix).astype(np.int32)[None].repeat(b, 0)
  params = random_params(model, batch)
  full = np.asarray(jax.jit(lambda p: model.apply({"params": p}, batch))(params))

  pre = {k: (v[:, :prefix] if k.startswith("decoder") else v) for k, v in batch.items()}
  prefill = jax.jit(lambda p, bt: model.apply({"params": p}, bt, max_decode_length=lt,
                                              method=Transformer.prefill, mutable=["cache"]))
  step = jax.jit(lambda p, c, t: model.apply({"params": p, "cache": c}, t,
                                             method=Transformer.decode_step, mutable=["cache"]))
  logits, state = prefill(params, pre)
  assert logits.shape == (b, prefix, V)
  outs = [np.asarray(logits)]
  cache = state["cache"]
  for i in range(prefix, lt):
    logits, state = step(params, cache, dec[:, i:i + 1])
    cache = state["cache"]
    assert logits.shape == (b, 1, V) and logits.dtype == jnp.float32
    outs.append(np.asarray(logits))
  np.testing.assert_allclose(np.concatenate(outs, axis=1), full, atol=2e-5)


@pytest.mark.parametrize("cfg,prefix", [
    (tiny(num_decoder_layers=1), 1),
    (tiny(mask_type="prefix_lm", position_encoding="rope", num_decoder_layers=1), 3),
    (tiny(mask_type="causal"), 1),
    (tiny(mask_type="causal", position_encoding="alibi"), 2),
    (tiny(mask_type="prefix_lm"), 3),
    (tiny(mask_type="causal", position_encoding="learned", max_length=8), 2),
    # T5Gemma's knobs: grouped-query attention (the caches hold K heads), the query scale
    # and both soft-caps, in self- and cross-attention caches, sandwich norms, local
    # (window 2: the cache slots the window leaves out are masked) and global layers.
    (tiny(num_heads=4, num_kv_heads=2, query_pre_attn_scalar=8.0, attn_logit_softcapping=2.0,
          final_logit_softcapping=3.0, norm_type="gemma_rmsnorm", scale_embeddings=True,
          norm_position="sandwich", sliding_window=2, layer_pattern="LG"), 2),
    (tiny(mask_type="prefix_lm", position_encoding="rope", num_kv_heads=1,
          attn_logit_softcapping=2.0, final_logit_softcapping=3.0, sliding_window=2,
          layer_pattern="L"), 3),
    # RedLLM: RoPE in cross-attention with the decoder's positions after the encoder's
    # (the prefill keeps each row's offset; the cache holds the rotated encoder keys).
    (tiny(position_encoding="rope", cross_attention_rope="continue"), 2),
    # T5Gemma 2: merged attention (the step's one softmax spans the self cache and the
    # encoder cache), q/k norms, per-kind RoPE bases, the centred encoder window, GQA.
    (tiny(position_encoding="rope", merged_attention=True, qk_norm=True, num_heads=4,
          num_kv_heads=2, norm_type="gemma_rmsnorm", norm_position="sandwich",
          query_pre_attn_scalar=8.0, attn_logit_softcapping=2.0, sliding_window=2,
          layer_pattern="LG", bidirectional_window="centred", rope_max_wavelength=30.0,
          rope_local_max_wavelength=4.0, eoi_id=3), 2),
], ids=["enc_dec-relative", "prefix_lm-rope", "causal-relative", "causal-alibi",
        "prefix_lm-relative", "causal-learned", "enc_dec-gqa-scale-softcaps-sandwich-window",
        "prefix_lm-rope-mqa-softcaps-window", "enc_dec-rope-cross-continue",
        "enc_dec-merged-qknorm-rope-bases-window"])
def test_cached_decoding_equals_full_forward(cfg, prefix):
  check_cached_equals_full(cfg, prefix=prefix)


@pytest.mark.slow
@pytest.mark.parametrize("cfg,prefix", [
    (tiny(position_encoding="rope", scan_layers=True), 2),
    (tiny(shared_encoder_decoder=True, num_encoder_layers=2, scan_layers=True), 1),
    (tiny(mask_type="prefix_lm", position_encoding="alibi", scan_layers=True, remat_policy="full"), 3),
    (tiny(position_encoding="rope", merged_attention=True, qk_norm=True, scan_layers=True,
          remat_policy="minimal"), 2),
], ids=["enc_dec-rope-scan", "shared-scan", "prefix_lm-alibi-scan-remat", "merged-scan-remat"])
def test_cached_decoding_equals_full_forward_more(cfg, prefix):
  check_cached_equals_full(cfg, prefix=prefix)


def test_ragged_prefixes_with_positions():
  """Rows with different prefix lengths: padding slots are skipped, positions per row."""
  cfg = tiny(mask_type="causal", num_decoder_layers=1)
  model = Transformer(cfg)
  rng = np.random.default_rng(1)
  seq = rng.integers(2, V, (1, 5)).astype(np.int32)
  seq[:, 0] = 0
  params = random_params(model, {"decoder_input_tokens": seq})
  full = np.asarray(jax.jit(lambda p: model.apply({"params": p}, {"decoder_input_tokens": seq}))(params))
  # Row 0 has a 3-token prefix; row 1 has the same sequence's first 2 tokens + 1 pad slot.
  prefix = np.concatenate([seq[:, :3], np.array([[seq[0, 0], seq[0, 1], 0]], np.int32)])
  seg = np.array([[1, 1, 1], [1, 1, 0]], np.int32)
  logits, state = jax.jit(lambda p: model.apply(
      {"params": p}, {"decoder_input_tokens": prefix, "decoder_segment_ids": seg},
      max_decode_length=6, method=Transformer.prefill, mutable=["cache"]))(params)
  np.testing.assert_allclose(np.asarray(logits)[1, :2], full[0, :2], atol=2e-5)
  # Next step: row 0 feeds token 3 at position 3, row 1 feeds token 2 at position 2.
  tokens = np.array([[seq[0, 3]], [seq[0, 2]]], np.int32)
  logits, state = jax.jit(lambda p, c: model.apply(
      {"params": p, "cache": c}, tokens, decoder_positions=np.array([[3], [2]], np.int32),
      method=Transformer.decode_step, mutable=["cache"]))(params, state["cache"])
  np.testing.assert_allclose(np.asarray(logits)[0, 0], full[0, 3], atol=2e-5)
  np.testing.assert_allclose(np.asarray(logits)[1, 0], full[0, 2], atol=2e-5)


def test_decode_step_without_prefill_raises():
  cfg = tiny(mask_type="causal", num_decoder_layers=1)
  model = Transformer(cfg)
  tokens = np.zeros((1, 1), np.int32)
  params = random_params(model, {"decoder_input_tokens": tokens})
  with pytest.raises(ValueError, match="prefill"):
    model.apply({"params": params}, tokens, method=Transformer.decode_step, mutable=["cache"])


@pytest.mark.parametrize("mask_type", ["causal", "encoder_decoder"])
def test_multi_token_steps_equal_full_forward(mask_type):
  """decode_step with T > 1 tokens: default positions cache_index + [0, T), causal among
  the new tokens; prefix 2, a step of 3, then a step of 1 reproduce the full pass."""
  cfg = tiny(mask_type=mask_type)
  model = Transformer(cfg)
  rng = np.random.default_rng(2)
  dec = rng.integers(2, V, (2, 6)).astype(np.int32)
  batch = {"decoder_input_tokens": dec}
  if cfg.is_encoder_decoder:
    batch["encoder_input_tokens"] = rng.integers(2, V, (2, 4)).astype(np.int32)
  params = random_params(model, batch)
  full = np.asarray(jax.jit(lambda p: model.apply({"params": p}, batch))(params))
  pre = dict(batch, decoder_input_tokens=dec[:, :2])
  logits, state = jax.jit(lambda p: model.apply({"params": p}, pre, max_decode_length=7,
                                                method=Transformer.prefill, mutable=["cache"]))(params)
  step = jax.jit(lambda p, c, t: model.apply({"params": p, "cache": c}, t,
                                             method=Transformer.decode_step, mutable=["cache"]))
  three, state = step(params, state["cache"], dec[:, 2:5])
  one, _ = step(params, state["cache"], dec[:, 5:6])
  got = np.concatenate([np.asarray(logits), np.asarray(three), np.asarray(one)], axis=1)
  np.testing.assert_allclose(got, full, atol=2e-5)


def test_scanned_cache_has_the_layer_axis_first():
  """With scan_layers the cache leaves are [num_layers, B, ...] (beam search gathers rows
  on axis 1 of a scanned stack's leaves), and cached decoding still equals the full pass."""
  cfg = tiny(mask_type="causal", scan_layers=True)
  check_cached_equals_full(cfg, lt=4, prefix=2)
  model = Transformer(cfg)
  tokens = np.zeros((3, 2), np.int32)
  params = random_params(model, {"decoder_input_tokens": tokens})
  _, state = jax.eval_shape(lambda p: model.apply({"params": p}, {"decoder_input_tokens": tokens},
                                                  max_decode_length=5, method=Transformer.prefill,
                                                  mutable=["cache"]), params)
  layers = state["cache"]["decoder"]["layers"]
  for leaf in jax.tree_util.tree_leaves(layers):
    assert leaf.shape[:2] == (2, 3), leaf.shape
  assert state["cache"]["decoder"]["cache_valid"].shape == (3, 5)


def test_decode_with_a_run_time_mode_name_fills_the_cache():
  """Transformer.decode(mode="prefill") with a mode name built at run time (== not `is`)
  fills the same cache as Transformer.prefill."""
  cfg = tiny(mask_type="causal", num_decoder_layers=1)
  model = Transformer(cfg)
  tokens = np.array([[0, 5, 9], [0, 7, 3]], np.int32)
  params = random_params(model, {"decoder_input_tokens": tokens})
  mode = runtime_str("prefill")
  assert mode is not "prefill"  # pylint: disable=literal-comparison
  run = jax.jit(lambda p, m: model.apply({"params": p}, None, {"decoder_input_tokens": tokens},
                                         mode=m, max_length=4, method=Transformer.decode,
                                         mutable=["cache"]), static_argnums=1)
  _, got = run(params, mode)
  _, want = jax.jit(lambda p: model.apply({"params": p}, {"decoder_input_tokens": tokens},
                                          max_decode_length=4, method=Transformer.prefill,
                                          mutable=["cache"]))(params)
  jax.tree_util.tree_map(np.testing.assert_array_equal, got, want)
