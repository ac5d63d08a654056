"""The Transformer: one Flax Linen family for the T5 architectures (config in config.py).

Here: `Transformer` (encoder-decoder, prefix LM or causal LM by ``TransformerConfig.mask_type``),
its stacks and their prefill / decode-step methods. Not here: attention, layers, masks and
position encodings (their modules in lm/model), the loss (lm/losses.py), the search over
decode steps (lm/generation.py). The param tree, the decoding methods' contract and dropout:
docs/model.md.

  model = Transformer(config)
  params = model.init(rng, batch)["params"]                       # boxed, logical axes
  logits = model.apply({"params": params}, batch, enable_dropout=True,
                       rngs={"dropout": key})                     # float32[B, Lt, V]
"""
from __future__ import annotations

from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from lm.model import masks as masks_lib
from lm.model import position
from lm.model.attention import AttentionMask, MultiHeadAttention
from lm.model.transformer_config import REMAT_POLICIES, TransformerConfig
from lm.model.fast_grads import dense
from lm.model.layers import (Embed, MlpBlock, broadcast_dropout, make_norm, mlp_kernel_init,
                             param_with_axes)
from lm.model.scanning import scan_to_unscanned, unscanned_to_scan


class TransformerLayer(nn.Module):
  """One block: self-attention, optional cross-attention, MLP; pre- or post-norm.

  How the layer runs (dropout, encoder pass, cache mode, cache length) is in its
  attributes, not its call arguments: ``nn.remat`` and ``nn.scan`` then see only arrays
  (or None) as arguments and no argument needs marking static. Returns ``(x, None)`` so it
  can be the body of ``nn.scan``.

  Attributes:
    config: the model config.
    has_cross_attention: the layer has ``encoder_decoder_attention`` params (the decoder
      of an encoder-decoder).
    deterministic: disables dropout.
    encoder_pass: fully visible self-attention, no cross-attention, no cache (the encoder,
      or the decoder's params running the encoder pass of a shared model).
    cache_mode: None, "prefill" or "step" (``Stack``).
    max_length: cache length for "prefill".
    local: a local layer (``config.layer_kind``): its RoPE base (``config.rope_wavelength``).
  """
  config: TransformerConfig
  has_cross_attention: bool = False
  deterministic: bool = True
  encoder_pass: bool = False
  cache_mode: str | None = None
  max_length: int | None = None
  local: bool = False

  @nn.compact
  def __call__(self, x, self_mask, self_bias, encoded, cross_mask, rope_positions, cache_index,
               cross_q_positions=None, cross_kv_positions=None):
    """One layer.

    Args:
      x: dtype[B, L, D].
      self_mask: the self-attention AttentionMask.
      self_bias: tuple of float32 position biases broadcastable to [B, N, L, S] (maybe empty).
      encoded: dtype[B, S_enc, D] encoder output, or None.
      cross_mask: the cross-attention AttentionMask ([B, 1, L, S_enc] bias), or None.
      rope_positions: int32[B or 1, L] positions for RoPE, or None.
      cache_index: int32[] first cache slot of this step ("step" only), else None.
      cross_q_positions, cross_kv_positions: int32[B or 1, L] / [B or 1, S_enc] RoPE
        positions of cross-attention (``cross_attention_rope``), else None (the keys'
        are unused at "step": the cache holds the rotated keys).
    Returns:
      (dtype[B, L, D], None).
    """
    cfg = self.config
    dtype = cfg.activation_dtype
    rate = cfg.dropout_rate
    pre = cfg.norm_position != "post"  # "pre" and "sandwich" norm each sub-block's input
    sandwich = cfg.norm_position == "sandwich"
    deterministic = self.deterministic

    def sublayer(x, norm_name, fn):
      norm = make_norm(cfg.norm_type, dtype, norm_name)
      h = fn(norm(x) if pre else x)
      if sandwich:  # "pre_x_layer_norm" -> "post_x_layer_norm" on the sub-block's output
        h = make_norm(cfg.norm_type, dtype, "post" + norm_name[len("pre"):])(h)
      x = x + broadcast_dropout(h, rate, deterministic, self)
      x = x if pre else norm(x)
      return nn.with_logical_constraint(x, ("batch", "length", "embed"))

    def attention(name, kind, use_rope, kv_features=None):
      return MultiHeadAttention(num_heads=cfg.num_heads, head_dim=cfg.resolved_head_dim, kind=kind,
                                dropout_rate=rate, use_rope=use_rope, dtype=dtype,
                                attention_impl=cfg.attention_impl,
                                num_kv_heads=cfg.num_kv_heads,
                                query_scale=cfg.query_pre_attn_scalar,
                                softcap=cfg.attn_logit_softcapping, kv_features=kv_features,
                                qk_norm=cfg.norm_type if cfg.qk_norm else None,
                                rope_max_wavelength=cfg.rope_wavelength(
                                    "local" if self.local else "global"),
                                name=name)

    # T5Gemma 2: the decoder's one attention also reads the encoder (no cross sub-block).
    merged = cfg.merged_attention and self.has_cross_attention and not self.encoder_pass
    self_attention = attention("self_attention", "self", cfg.position_encoding == "rope")
    self_mode = None if self.encoder_pass else self.cache_mode
    x = sublayer(x, "pre_self_attention_layer_norm", lambda h: self_attention(
        h, h, self_bias, mask=self_mask, q_positions=rope_positions, kv_positions=rope_positions,
        deterministic=deterministic, cache_mode=self_mode, cache_index=cache_index,
        max_length=self.max_length, encoded=encoded if merged else None,
        encoder_mask=cross_mask if merged else None))
    if self.has_cross_attention and not self.encoder_pass and not merged:
      cross = attention("encoder_decoder_attention", "cross", cfg.cross_attention_rope is not None,
                        cfg.encoder_emb_dim)  # None: the encoder is as wide as the decoder
      x = sublayer(x, "pre_cross_attention_layer_norm", lambda h: cross(
          h, encoded, None, mask=cross_mask, q_positions=cross_q_positions,
          kv_positions=cross_kv_positions, deterministic=deterministic,
          cache_mode=self.cache_mode))
    mlp = MlpBlock(mlp_dim=cfg.mlp_dim, activation=cfg.mlp_activation, dropout_rate=rate,
                   dtype=dtype, name="mlp")
    x = sublayer(x, "pre_mlp_layer_norm", lambda h: mlp(h, deterministic=deterministic))
    return x, None


class Stack(nn.Module):
  """A stack of layers with its position encoding and final norm (encoder or decoder).

  ``packed``: rows may hold several segments (``AttentionMask.packed``; False lets cuDNN
  express padding by sequence lengths).
  """
  config: TransformerConfig
  num_layers: int
  has_cross_attention: bool
  packed: bool = True

  @nn.compact
  def __call__(self, x, *, segment_ids, positions=None, decoder_causal_attention=None,
               encoded=None, encoder_segment_ids=None, encoder_positions=None,
               encoder_pass: bool = False, deterministic: bool = True, mode: str | None = None,
               max_length: int | None = None):
    """Runs the stack: attention masks, position encodings, the layers, the final norm.

    Args:
      x: dtype[B, L, D] token embeddings.
      segment_ids: int32[B, L]; 0 is padding (unused for mode "step").
      positions: int32[B, L] per-segment positions, or None for arange (for "step": the
        cache slot index).
      decoder_causal_attention: int32[B, L] prefix flags (prefix LM) or None (causal).
      encoded: dtype[B, S, D] encoder output (decoder of an encoder-decoder; None at "step").
      encoder_segment_ids: int32[B, S] (with ``encoded``).
      encoder_positions: int32[B, S] per-segment encoder positions, or None for arange
        (cross-attention RoPE only).
      encoder_pass: fully visible self-attention, bidirectional relative buckets, no
        cross-attention, no cache.
      deterministic: disables dropout.
      mode: None (full forward), "prefill" or "step" (incremental decoding, module doc).
      max_length: cache length for "prefill".
    Returns:
      dtype[B, L, D] normalised outputs.
    """
    cfg = self.config
    cache_mode = None if encoder_pass else mode
    cache_index = None
    if self.has_cross_attention and not encoder_pass and cache_mode != "step" and (
        encoded is None or encoder_segment_ids is None):
      raise ValueError("the decoder of an encoder-decoder needs encoded and encoder_segment_ids")
    name = "encoder" if encoder_pass else "decoder"
    if cache_mode == "step":
      bool_mask, q_positions, k_positions, cross_bias, cache_index = self._step_masks(x, positions)
      self_mask = AttentionMask(bias=masks_lib.mask_to_bias(bool_mask), causal=True,
                                name=f"{name} self-attention")
      cross_mask = None if cross_bias is None else AttentionMask(
          bias=cross_bias, name=f"{name} cross-attention")
    else:
      bool_mask, q_positions, cross_bias = self._masks(
          x, segment_ids, positions, decoder_causal_attention, encoder_segment_ids, encoder_pass)
      k_positions = q_positions
      if cache_mode == "prefill":
        self._start_cache(segment_ids, q_positions, encoder_segment_ids, max_length)
      self_mask = AttentionMask(
          bias=masks_lib.mask_to_bias(bool_mask), q_segment_ids=segment_ids,
          kv_segment_ids=segment_ids, decoder_causal_attention=decoder_causal_attention,
          causal=not encoder_pass, packed=self.packed, name=f"{name} self-attention")
      cross_mask = None if cross_bias is None else AttentionMask(
          bias=cross_bias, q_segment_ids=segment_ids, kv_segment_ids=encoder_segment_ids,
          packed=self.packed, name=f"{name} cross-attention")
    local_mask = None
    if cfg.sliding_window is not None:  # the local layers' self-attention (layer_pattern)
      near = masks_lib.window_mask(q_positions, k_positions, cfg.sliding_window,
                                   centred=encoder_pass and cfg.bidirectional_window == "centred")
      local_mask = self_mask.replace(bias=masks_lib.mask_to_bias(bool_mask & near),
                                     window=cfg.sliding_window, name=f"{name} local self-attention")

    cross_rope = self._cross_rope_positions(q_positions, segment_ids, encoder_segment_ids,
                                            encoder_positions, encoder_pass, cache_mode)
    x, self_bias, rope_positions = self._position_encoding(
        x, q_positions, k_positions, bidirectional=encoder_pass, full_pass=cache_mode is None)
    x = broadcast_dropout(x, cfg.dropout_rate, deterministic, self)
    x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
    x = self._layers(x, (self_mask, self_bias, encoded, cross_mask, rope_positions, cache_index)
                     + cross_rope, local_mask, deterministic=deterministic, encoder_pass=encoder_pass,
                     cache_mode=cache_mode, max_length=max_length)
    if cfg.norm_position != "post":
      x = make_norm(cfg.norm_type, cfg.activation_dtype, "final_norm")(x)
    x = broadcast_dropout(x, cfg.dropout_rate, deterministic, self, broadcast_length=not encoder_pass)
    return nn.with_logical_constraint(x, ("batch", "length", "embed"))

  def _masks(self, x, segment_ids, positions, decoder_causal_attention, encoder_segment_ids,
             encoder_pass):
    """Masks of a full forward pass (or a prefill).

    Returns:
      (bool self-attention mask [B, 1, L, L], int32 positions [B or 1, L], float32
      cross-attention bias [B, 1, L, S] or None).
    """
    b, l = x.shape[:2]
    if segment_ids.shape != (b, l):
      raise ValueError(f"segment ids must be [B, L] = {(b, l)} like the tokens, got shape "
                       f"{segment_ids.shape}")
    if positions is None:
      positions = jnp.arange(l, dtype=jnp.int32)[None]
    if encoder_pass:
      self_mask = masks_lib.make_fully_visible_mask(segment_ids)
    else:  # decoder_causal_attention is None unless mask_type == "prefix_lm"
      self_mask = masks_lib.make_decoder_mask(segment_ids, decoder_causal_attention)
    cross_bias = None
    if self.has_cross_attention and not encoder_pass:
      cross_bias = masks_lib.mask_to_bias(
          masks_lib.make_cross_attention_mask(segment_ids, encoder_segment_ids))
    return self_mask, positions, cross_bias

  def _cross_rope_positions(self, q_positions, segment_ids, encoder_segment_ids,
                            encoder_positions, encoder_pass, cache_mode):
    """Cross-attention RoPE positions (``config.cross_attention_rope``).

    Returns:
      () without cross-attention RoPE, else (int32[B or 1, L] query positions, int32[B or
      1, S] key positions or None at a decode step). "continue" adds to each decoder token
      the length of the encoder segment it attends to; a prefill keeps each row's offset
      (its encoder's non-padding length: one example per row) in the cache for the steps.
    """
    mode = self.config.cross_attention_rope
    if mode is None or not self.has_cross_attention or encoder_pass:
      return ()
    if cache_mode == "step":
      if mode == "continue":
        q_positions = q_positions + self.variable("cache", "rope_offset").value[:, None]
      return (q_positions, None)
    s = encoder_segment_ids.shape[1]
    kv_positions = (jnp.arange(s, dtype=jnp.int32)[None] if encoder_positions is None
                    else jnp.asarray(encoder_positions, jnp.int32))
    if mode == "continue":
      same = (segment_ids[:, :, None] == encoder_segment_ids[:, None, :]) & (
          encoder_segment_ids[:, None, :] != 0)
      q_positions = q_positions + same.sum(-1, dtype=jnp.int32)  # [B, L]
      if cache_mode == "prefill":
        self.variable("cache", "rope_offset", jnp.zeros, segment_ids.shape[:1], jnp.int32).value = (
            (encoder_segment_ids != 0).sum(-1, dtype=jnp.int32))
    return (q_positions, kv_positions)

  def _start_cache(self, segment_ids, positions, encoder_segment_ids, max_length):
    """Prefill: the stack's cache bookkeeping for a prefix of length L.

    Writes ``cache_index`` (L), ``cache_positions`` int32[B, max_length] and
    ``cache_valid`` bool[B, max_length] (the prefix's positions and non-padding slots),
    and ``encoder_valid`` bool[B, S] for a decoder with cross-attention.
    """
    b, l = segment_ids.shape
    if max_length is None or max_length < l:
      raise ValueError(f"prefill needs max_decode_length >= prefix length {l}, got {max_length}")
    pos = jnp.broadcast_to(jnp.asarray(positions, jnp.int32), (b, l))
    self.variable("cache", "cache_index", lambda: jnp.zeros((), jnp.int32)).value = (
        jnp.asarray(l, jnp.int32))
    self.variable("cache", "cache_positions", jnp.zeros, (b, max_length), jnp.int32).value = (
        jnp.zeros((b, max_length), jnp.int32).at[:, :l].set(pos))
    self.variable("cache", "cache_valid", jnp.zeros, (b, max_length), bool).value = (
        jnp.zeros((b, max_length), bool).at[:, :l].set(segment_ids != 0))
    if self.has_cross_attention:
      self.variable("cache", "encoder_valid", jnp.zeros, encoder_segment_ids.shape, bool).value = (
          encoder_segment_ids != 0)

  def _step_masks(self, x, positions):
    """Decode step: appends T tokens to the stack's cache bookkeeping; masks over the cache.

    Args:
      x: dtype[B, T, D] the new tokens' embeddings.
      positions: int32[B or 1, T] or None (the cache slot indices).
    Returns:
      (bool self-attention mask [B, 1, T, M] over the M cache slots, int32 query
      positions [B, T], int32 key positions [B, M], float32 cross-attention bias
      [Bc, 1, 1, S] or None (Bc: the encoder's rows, B / beams), int32[] first slot written).
    """
    if not self.has_variable("cache", "cache_index"):
      raise ValueError("decode_step without a cache: run Transformer.prefill first")
    b, l = x.shape[:2]
    index_var = self.variable("cache", "cache_index")
    pos_var = self.variable("cache", "cache_positions")
    valid_var = self.variable("cache", "cache_valid")
    cache_index = index_var.value
    slots = pos_var.value.shape[1]
    if positions is None:
      positions = cache_index + jnp.arange(l, dtype=jnp.int32)[None]
    positions = jnp.broadcast_to(jnp.asarray(positions, jnp.int32), (b, l))
    zero = jnp.zeros((), jnp.int32)
    pos_var.value = jax.lax.dynamic_update_slice(pos_var.value, positions, (zero, cache_index))
    valid_var.value = jax.lax.dynamic_update_slice(valid_var.value, jnp.ones((b, l), bool),
                                                   (zero, cache_index))
    index_var.value = cache_index + l
    q_slot = cache_index + jnp.arange(l)
    order = jnp.arange(slots)[None, :] <= q_slot[:, None]  # [T, M]
    self_mask = valid_var.value[:, None, None, :] & order[None, None]
    cross_bias = None
    if self.has_cross_attention:
      # [Bc, 1, 1, S]: the encoder's rows, which beam search does not copy per beam.
      enc_valid = self.variable("cache", "encoder_valid").value
      cross_bias = masks_lib.mask_to_bias(enc_valid[:, None, None, :])
    return self_mask, positions, pos_var.value, cross_bias, cache_index

  def _position_encoding(self, x, q_positions, k_positions, *, bidirectional, full_pass):
    """The configured position encoding, as a logit bias, an added embedding or RoPE.

    A full pass (no cache) builds the relative biases (T5, ALiBi) from ``arange`` as one
    [1, N, L, L] table shared by the rows: exact for packed rows, because positions restart
    at 0 in every segment (so within a segment key - query positions equal the index
    offset) and pairs across segments are masked (the packing invariant tested in
    tests/data/test_packing.py). Prefill and decode steps keep per-row positions.

    Returns:
      (x with any absolute embedding added, tuple of self-attention position biases
      (maybe empty), int32 RoPE positions or None).
    """
    cfg = self.config
    pe = cfg.position_encoding
    self_bias = ()
    rel_q, rel_k = q_positions, k_positions
    if full_pass and pe in ("t5_relative", "alibi"):
      rel_q = rel_k = jnp.arange(x.shape[1], dtype=jnp.int32)[None]
    if pe == "t5_relative":
      relpos = position.RelativePositionBias(num_heads=cfg.num_heads, num_buckets=cfg.relative_num_buckets,
                                             max_distance=cfg.relative_max_distance, name="relpos_bias")
      self_bias += (relpos(rel_q, rel_k, bidirectional=bidirectional),)
    elif pe == "alibi":
      self_bias += (position.alibi_bias(rel_q, rel_k, cfg.num_heads),)
    elif pe == "learned":
      x = x + position.LearnedPositionEmbedding(cfg.max_length, cfg.emb_dim, name="pos_embedder")(
          q_positions).astype(x.dtype)
    elif pe == "sinusoidal":
      x = x + position.sinusoidal_embedding(q_positions, cfg.emb_dim).astype(x.dtype)
    return x, self_bias, q_positions if pe == "rope" else None

  def _layers(self, x, args, local_mask, **mode):
    """The ``num_layers`` layers (remat and scan as configured), each given ``args``.

    Args:
      x: dtype[B, L, D].
      args: TransformerLayer's arguments after x (arrays or None); the first is the
        self-attention mask, which a local layer (``config.layer_kind``) replaces by
        ``local_mask``.
      local_mask: the local layers' AttentionMask, or None (no sliding window).
      **mode: TransformerLayer's run attributes (deterministic, encoder_pass, cache_mode,
        max_length).
    Returns:
      dtype[B, L, D].
    """
    cfg = self.config
    layer_cls = TransformerLayer
    if cfg.remat_policy != "none":
      policy = REMAT_POLICIES[cfg.remat_policy]
      layer_cls = nn.remat(layer_cls, policy=None if cfg.remat_policy == "full" else policy,
                           prevent_cse=not cfg.scan_layers)
    if cfg.scan_layers:  # "intermediates": capture_intermediates sees each layer (nlu.py)
      scanned = nn.scan(layer_cls, variable_axes={"params": 0, "cache": 0, "intermediates": 0},
                        split_rngs={"params": True, "dropout": True},
                        in_axes=(nn.broadcast,) * len(args), length=self.num_layers,
                        metadata_params={nn.PARTITION_NAME: "layers"})
      local = cfg.layer_kind(0) == "local"  # a scanned pattern is uniform (config check)
      if local:
        args = (local_mask,) + tuple(args[1:])
      x, _ = scanned(cfg, self.has_cross_attention, **mode, local=local, name="layers")(x, *args)
    else:
      for i in range(self.num_layers):
        local = cfg.layer_kind(i) == "local"
        layer_args = (local_mask,) + tuple(args[1:]) if local else args
        x, _ = layer_cls(cfg, self.has_cross_attention, **mode, local=local,
                         name=f"layers_{i}")(x, *layer_args)
    return x


class LogitsDense(nn.Module):
  """Untied output projection ``kernel`` float32[D, V] (embed, vocab); float32 logits."""
  vocab_size: int

  @nn.compact
  def __call__(self, y):
    """dtype[B, L, D] -> float32[B, L, V]."""
    kernel = param_with_axes(self, "kernel", mlp_kernel_init, (y.shape[-1], self.vocab_size),
                             ("embed", "vocab"))
    return dense(y, kernel.astype(y.dtype), preferred_element_type=jnp.float32)


def _batch_array(batch: Mapping[str, Any], key: str, required: bool = True):
  if key not in batch or batch[key] is None:
    if required:
      raise KeyError(f"batch is missing {key!r} (has {sorted(batch)})")
    return None
  x = jnp.asarray(batch[key])
  if x.ndim != 2:
    raise ValueError(f"batch[{key!r}] must be [B, L], got shape {x.shape}")
  return x


class Transformer(nn.Module):
  """The T5-family Transformer; see the module docstring for params and methods.

  ``packed_rows``: batches may pack several examples per row (the default, always
  correct); False promises one example per row followed by padding (``data.pack=False``),
  which lets cuDNN express padding by sequence lengths (a row that breaks the promise gets
  NaN outputs on that path, never silently wrong ones).
  """
  config: TransformerConfig
  packed_rows: bool = True

  def setup(self):
    cfg = self.config
    self.token_embedder = Embed(cfg.vocab_size, cfg.emb_dim, stddev=cfg.embedding_init_stddev,
                                dtype=cfg.activation_dtype, name="token_embedder",
                                scale_by_sqrt_dim=cfg.scale_embeddings, eoi_id=cfg.eoi_id)
    if cfg.separate_encoder_embedding:
      self.encoder_token_embedder = Embed(
          cfg.vocab_size, cfg.encoder_config().emb_dim, stddev=cfg.embedding_init_stddev,
          dtype=cfg.activation_dtype, name="encoder_token_embedder",
          scale_by_sqrt_dim=cfg.scale_embeddings, eoi_id=cfg.eoi_id)
    self.decoder = Stack(cfg, cfg.num_decoder_layers, has_cross_attention=cfg.is_encoder_decoder,
                         packed=self.packed_rows, name="decoder")
    if cfg.is_encoder_decoder and not cfg.shared_encoder_decoder:
      self.encoder = Stack(cfg.encoder_config(), cfg.num_encoder_layers, has_cross_attention=False,
                           packed=self.packed_rows, name="encoder")
    if not cfg.tie_embeddings:
      self.logits_dense = LogitsDense(cfg.vocab_size, name="logits_dense")

  def _encoder_stack(self):
    return self.decoder if self.config.shared_encoder_decoder else self.encoder

  def encode(self, batch: Mapping[str, Any], enable_dropout: bool = False):
    """Encoder pass.

    Args:
      batch: encoder_input_tokens int32[B, Li]; optional encoder_segment_ids (default
        tokens != 0) and encoder_positions (default arange).
      enable_dropout: apply dropout (needs rngs={"dropout": key}).
    Returns:
      dtype[B, Li, D] encoder outputs.
    """
    if not self.config.is_encoder_decoder:
      raise ValueError(f"encode needs mask_type='encoder_decoder', got {self.config.mask_type!r}")
    tokens = _batch_array(batch, "encoder_input_tokens")
    seg = _batch_array(batch, "encoder_segment_ids", required=False)
    seg = (tokens != 0).astype(jnp.int32) if seg is None else seg
    embed = (self.encoder_token_embedder if self.config.separate_encoder_embedding
             else self.token_embedder)
    return self._encoder_stack()(embed(tokens), segment_ids=seg,
                                 positions=_batch_array(batch, "encoder_positions", required=False),
                                 encoder_pass=True, deterministic=not enable_dropout)

  def _decoder_features(self, batch):
    tokens = _batch_array(batch, "decoder_input_tokens")
    seg = _batch_array(batch, "decoder_segment_ids", required=False)
    if seg is None:
      targets = _batch_array(batch, "decoder_target_tokens", required=False)
      seg = (targets != 0).astype(jnp.int32) if targets is not None else jnp.ones_like(tokens)
    dca = None
    if self.config.mask_type == "prefix_lm":
      dca = _batch_array(batch, "decoder_causal_attention", required=False)
      if dca is None:
        raise KeyError("mask_type='prefix_lm' needs batch['decoder_causal_attention']")
    return tokens, seg, _batch_array(batch, "decoder_positions", required=False), dca

  def _logits(self, y):
    cfg = self.config
    if cfg.tie_embeddings:
      logits = self.token_embedder.attend(y)
      if cfg.tied_logits_scale:
        logits = logits * (cfg.emb_dim ** -0.5)
    else:
      logits = self.logits_dense(y)
    if cfg.final_logit_softcapping is not None:
      cap = cfg.final_logit_softcapping
      logits = cap * jnp.tanh(logits / cap)
    return nn.with_logical_constraint(logits, ("batch", "length", "vocab"))

  def decode(self, encoded, batch: Mapping[str, Any], enable_dropout: bool = False,
             mode: str | None = None, max_length: int | None = None):
    """Decoder pass (teacher forcing) -> float32[B, Lt, V] logits.

    Args:
      encoded: dtype[B, Li, D] from ``encode`` (encoder-decoder), else None.
      batch: decoder_input_tokens int32[B, Lt]; optional decoder_segment_ids (default
        decoder_target_tokens != 0 if present, else all ones), decoder_positions,
        decoder_causal_attention (required for prefix_lm); encoder_input_tokens /
        encoder_segment_ids for the cross-attention mask (encoder-decoder).
      enable_dropout: apply dropout.
    """
    return self._logits(self._decoder_output(encoded, batch, enable_dropout, mode, max_length))

  def _decoder_output(self, encoded, batch, enable_dropout, mode=None, max_length=None):
    """The decoder stack's output dtype[B, Lt, D] (``decode``'s arguments)."""
    cfg = self.config
    tokens, seg, pos, dca = self._decoder_features(batch)
    enc_seg = enc_pos = None
    if cfg.is_encoder_decoder:
      if encoded is None:
        raise ValueError("encoder-decoder decode needs the encoder output")
      enc_seg = _batch_array(batch, "encoder_segment_ids", required=False)
      if enc_seg is None:
        enc_seg = (_batch_array(batch, "encoder_input_tokens") != 0).astype(jnp.int32)
      enc_pos = _batch_array(batch, "encoder_positions", required=False)
    y = self.decoder(self.token_embedder(tokens), segment_ids=seg, positions=pos,
                     decoder_causal_attention=dca, encoded=encoded, encoder_segment_ids=enc_seg,
                     encoder_positions=enc_pos,
                     deterministic=not enable_dropout, mode=mode, max_length=max_length)
    return y

  def __call__(self, batch: Mapping[str, Any], enable_dropout: bool = False):
    """Full forward pass (training / scoring) -> float32[B, Lt, V] logits."""
    encoded = self.encode(batch, enable_dropout) if self.config.is_encoder_decoder else None
    return self.decode(encoded, batch, enable_dropout)

  def final_hidden(self, batch: Mapping[str, Any], enable_dropout: bool = False):
    """``__call__`` without the output projection -> dtype[B, Lt, D], the decoder stack's
    output; ``logits_kernel`` gives the projection (lm.losses.tiled_cross_entropy)."""
    encoded = self.encode(batch, enable_dropout) if self.config.is_encoder_decoder else None
    return self._decoder_output(encoded, batch, enable_dropout)

  def prefill(self, batch: Mapping[str, Any], max_decode_length: int):
    """Fills the cache from a prefix (use with mutable=["cache"]); see module docstring.

    Returns:
      float32[B, P, V] logits for the P prefix positions of decoder_input_tokens.
    """
    encoded = self.encode(batch) if self.config.is_encoder_decoder else None
    return self.decode(encoded, batch, mode="prefill", max_length=max_decode_length)

  def decode_step(self, decoder_input_tokens, decoder_positions=None):
    """One incremental step after ``prefill`` (use with mutable=["cache"]).

    Args:
      decoder_input_tokens: int32[B, T] tokens placed after the cached ones.
      decoder_positions: optional int32[B, T] positions (default: cache slot index).
    Returns:
      float32[B, T, V] logits.
    """
    tokens = jnp.asarray(decoder_input_tokens)
    if tokens.ndim != 2:
      raise ValueError(f"decoder_input_tokens must be [B, T], got shape {tokens.shape}")
    y = self.decoder(self.token_embedder(tokens), segment_ids=None, positions=decoder_positions,
                     mode="step")
    return self._logits(y)


def logits_kernel(params: Mapping[str, Any], config: TransformerConfig):
  """The output projection of ``params`` as (kernel [D, V], logits scale): logits are
  ``scale * final_hidden @ kernel``. Untied: ``logits_dense/kernel``, scale 1; tied: the
  embedding transposed, scale emb_dim**-0.5 with ``tied_logits_scale``.

  Raises:
    ValueError: with ``final_logit_softcapping``, which this linear form cannot express.
  """
  if config.final_logit_softcapping is not None:
    raise ValueError("final_logit_softcapping caps the logits after the output projection, "
                     "which the tiled loss does not do: set loss.tiled_chunk_tokens=0")
  if config.tie_embeddings:
    scale = config.emb_dim ** -0.5 if config.tied_logits_scale else 1.0
    return jnp.transpose(params["token_embedder"]["embedding"]), scale
  return params["logits_dense"]["kernel"], 1.0


__all__ = ["TransformerConfig", "Transformer", "TransformerLayer", "Stack", "LogitsDense",
           "logits_kernel", "scan_to_unscanned", "unscanned_to_scan"]
