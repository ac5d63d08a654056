"""TransformerConfig and the Transformer: one Flax Linen family for the T5 architectures.

The architecture is chosen by ``TransformerConfig.mask_type``:
  "encoder_decoder"  encoder (fully visible) + decoder (causal self-attn + cross-attn)
  "prefix_lm"        decoder only; fully visible where ``decoder_causal_attention`` == 1
  "causal"           decoder only; causal
Defaults are T5.1.1 (docs/t5_reference.md §3.1-3.4); T5.1.0 is ``tie_embeddings=True,
mlp_activation="relu"``. Other variants are switches (position encoding, norm, MLP, ...).

Param tree (encoder-decoder, t5_relative, rmsnorm, gated_gelu, untied; ``scan_layers=False``):
  token_embedder/embedding                       [V, D]     (vocab, embed)
  encoder/relpos_bias/rel_embedding              [N, 32]    (heads, relpos_buckets)
  encoder/layers_{i}/pre_self_attention_layer_norm/scale  [D]  (embed,)
  encoder/layers_{i}/self_attention/{query,key,value}     [D, N, H] (embed, heads, kv)
  encoder/layers_{i}/self_attention/out                   [N, H, D] (heads, kv, embed)
  encoder/layers_{i}/pre_mlp_layer_norm/scale             [D]
  encoder/layers_{i}/mlp/{wi_0,wi_1}             [D, F]     (embed, mlp)
  encoder/layers_{i}/mlp/wo                      [F, D]     (mlp, embed)
  encoder/final_norm/scale                       [D]
  decoder/relpos_bias/rel_embedding              [N, 32]
  decoder/layers_{i}/pre_self_attention_layer_norm/scale, self_attention/{query,key,value,out}
  decoder/layers_{i}/pre_cross_attention_layer_norm/scale
  decoder/layers_{i}/encoder_decoder_attention/{query,key,value,out}   (as self_attention)
  decoder/layers_{i}/pre_mlp_layer_norm/scale, mlp/{wi_0,wi_1,wo}
  decoder/final_norm/scale                       [D]
  logits_dense/kernel                            [D, V]     (embed, vocab)   (untied only)
With ``scan_layers=True`` the ``layers_{i}`` subtrees become one ``layers`` subtree whose
leaves have a leading [num_layers] axis named "layers" (``scan_to_unscanned`` /
``unscanned_to_scan`` convert). Variants: ``relu``/``gelu`` MLPs have ``mlp/wi`` instead
of ``wi_0``/``wi_1``; layernorm adds ``.../bias``; ``learned`` positions add
``{encoder,decoder}/pos_embedder/embedding`` [max_length, D] (abspos_buckets, embed);
rope/alibi/sinusoidal/none have no position params (no ``relpos_bias``); decoder-only
models have no ``encoder`` subtree and no ``encoder_decoder_attention``;
``shared_encoder_decoder=True`` has no ``encoder`` subtree: the decoder's params (layers,
final norm, position tables) also run the encoder pass, which skips cross-attention.
With ``norm_position="post"`` the layer norms keep their names but are applied after each
residual add, and the stacks have no ``final_norm``.

Usage:
  model = Transformer(config)
  params = model.init(rng, batch)["params"]                       # boxed, logical axes
  logits = model.apply({"params": params}, batch, enable_dropout=True,
                       rngs={"dropout": key})                     # float32[B, Lt, V]
Incremental decoding (one example per row, no packing):
  logits, state = model.apply({"params": params}, batch, max_decode_length=M,
                              method=Transformer.prefill, mutable=["cache"])
      # enc-dec: runs the encoder on batch["encoder_input_tokens"], caches the cross-
      # attention keys/values, then runs the decoder on the prefix
      # batch["decoder_input_tokens"] [B, P] (at least the BOS 0); decoder-only: the prefix
      # (with its decoder_causal_attention for prefix LM) in one pass. Returns
      # float32[B, P, V] logits and the cache (self-attention KV of size M per layer).
  logits, state = model.apply({"params": params, "cache": state["cache"]}, tokens,
                              method=Transformer.decode_step, mutable=["cache"])
      # tokens int32[B, T] (usually T = 1) appended after everything cached so far;
      # optional decoder_positions int32[B, T] (default: the cache slot index).
  encoded = model.apply({"params": params}, batch, method=Transformer.encode)
Prefix rows shorter than P are padded with segment id 0 (``decoder_segment_ids``); such
padding slots are never attended to, and decode steps should then pass per-row
``decoder_positions``.

Dropout (rate ``dropout_rate``) follows t5x: on the embeddings, after each sub-block
(before the residual add), on the MLP hidden activation, on attention weights and on the
stack output; masks are shared along the length axis (t5x ``broadcast_dims=(-2,)``;
attention weights share the mask along the query axis) except the final encoder
dropout, which is elementwise.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from lm.model import masks as masks_lib
from lm.model import position
from lm.model.attention import MultiHeadAttention
from lm.model.fast_grads import dense
from lm.model.layers import (MLP_ACTIVATIONS, NORM_TYPES, Embed, MlpBlock, broadcast_dropout,
                             make_norm, mlp_kernel_init, param_with_axes)

MASK_TYPES = ("encoder_decoder", "prefix_lm", "causal")
NORM_POSITIONS = ("pre", "post")
DTYPES = {"bfloat16": jnp.bfloat16, "float32": jnp.float32}
REMAT_POLICIES = {
    "none": None,
    "full": "full",  # save nothing, recompute the whole layer in the backward pass
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "nothing_saveable": jax.checkpoint_policies.nothing_saveable,
    "everything_saveable": jax.checkpoint_policies.everything_saveable,
}


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Hyperparameters (T5 names). Defaults are T5.1.1 (a t5_1_1_small-sized model).

  Attributes:
    vocab_size: V, including sentinels (32128 for the T5 vocabulary).
    emb_dim: D.
    num_heads: N.
    head_dim: H; None means emb_dim // num_heads (must divide).
    mlp_dim: F.
    num_encoder_layers: encoder depth (must be 0 for decoder-only mask types).
    num_decoder_layers: decoder depth.
    mask_type: "encoder_decoder", "prefix_lm" or "causal".
    shared_encoder_decoder: the decoder's params also run the encoder pass (T5 "shared").
    dropout_rate: dropout everywhere dropout is applied (module docstring).
    mlp_activation: "relu", "gelu", "gated_gelu" (T5.1.1) or "swiglu".
    position_encoding: "t5_relative", "rope", "alibi", "learned", "sinusoidal", "none".
    relative_num_buckets, relative_max_distance: T5 relative bias bucketing (32, 128).
    max_length: table size for "learned" positions.
    rope_max_wavelength: RoPE base.
    norm_type: "rmsnorm" (T5, eps 1e-6) or "layernorm" (eps 1e-5, with bias).
    norm_position: "pre" (norm before each sub-block + final norm) or "post".
    tie_embeddings: logits = y @ E^T (T5.1.0), scaled by emb_dim**-0.5 if tied_logits_scale.
    tied_logits_scale: the T5.1.0 emb_dim**-0.5 factor on tied logits (GPT: False).
    embedding_init_stddev: token embedding init std (T5: 1.0; GPT: 0.02).
    dtype: activation dtype "bfloat16" or "float32" (params and logits are float32).
    remat_policy: one of REMAT_POLICIES ("none", "full", "dots_saveable", ...).
    scan_layers: nn.scan over layers (params get a leading "layers" axis).
  """
  vocab_size: int = 32128
  emb_dim: int = 512
  num_heads: int = 6
  head_dim: int | None = 64
  mlp_dim: int = 1024
  num_encoder_layers: int = 8
  num_decoder_layers: int = 8
  mask_type: str = "encoder_decoder"
  shared_encoder_decoder: bool = False
  dropout_rate: float = 0.0
  mlp_activation: str = "gated_gelu"
  position_encoding: str = "t5_relative"
  relative_num_buckets: int = 32
  relative_max_distance: int = 128
  max_length: int | None = None
  rope_max_wavelength: float = 10_000.0
  norm_type: str = "rmsnorm"
  norm_position: str = "pre"
  tie_embeddings: bool = False
  tied_logits_scale: bool = True
  embedding_init_stddev: float = 1.0
  dtype: str = "bfloat16"
  remat_policy: str = "none"
  scan_layers: bool = False

  def __post_init__(self):
    def check(ok, msg):
      if not ok:
        raise ValueError(f"TransformerConfig: {msg}")
    for name in ("vocab_size", "emb_dim", "num_heads", "mlp_dim", "num_decoder_layers"):
      value = getattr(self, name)
      check(isinstance(value, int) and value > 0, f"{name} must be a positive int, got {value!r}")
    check(isinstance(self.num_encoder_layers, int) and self.num_encoder_layers >= 0,
          f"num_encoder_layers must be an int >= 0, got {self.num_encoder_layers!r}")
    if self.head_dim is None:
      check(self.emb_dim % self.num_heads == 0,
            f"head_dim=None needs emb_dim ({self.emb_dim}) divisible by num_heads ({self.num_heads})")
    else:
      check(isinstance(self.head_dim, int) and self.head_dim > 0,
            f"head_dim must be a positive int or None, got {self.head_dim!r}")
    check(self.mask_type in MASK_TYPES, f"unknown mask_type {self.mask_type!r}; expected one of {MASK_TYPES}")
    check(self.mlp_activation in MLP_ACTIVATIONS,
          f"unknown mlp_activation {self.mlp_activation!r}; expected one of {MLP_ACTIVATIONS}")
    check(self.position_encoding in position.POSITION_ENCODINGS,
          f"unknown position_encoding {self.position_encoding!r}; expected one of {position.POSITION_ENCODINGS}")
    check(self.norm_type in NORM_TYPES, f"unknown norm_type {self.norm_type!r}; expected one of {NORM_TYPES}")
    check(self.norm_position in NORM_POSITIONS,
          f"unknown norm_position {self.norm_position!r}; expected one of {NORM_POSITIONS}")
    check(self.dtype in DTYPES, f"unknown dtype {self.dtype!r}; expected one of {tuple(DTYPES)}")
    check(self.remat_policy in REMAT_POLICIES,
          f"unknown remat_policy {self.remat_policy!r}; expected one of {tuple(REMAT_POLICIES)}")
    check(0.0 <= self.dropout_rate < 1.0, f"dropout_rate must be in [0, 1), got {self.dropout_rate}")
    if self.mask_type == "encoder_decoder":
      check(self.num_encoder_layers > 0, "mask_type='encoder_decoder' needs num_encoder_layers > 0")
    else:
      check(self.num_encoder_layers == 0,
            f"mask_type={self.mask_type!r} is decoder-only: set num_encoder_layers=0 "
            f"(got {self.num_encoder_layers})")
      check(not self.shared_encoder_decoder,
            f"shared_encoder_decoder needs mask_type='encoder_decoder', got {self.mask_type!r}")
    if self.shared_encoder_decoder:
      check(self.num_encoder_layers == self.num_decoder_layers,
            f"shared_encoder_decoder needs num_encoder_layers == num_decoder_layers, got "
            f"{self.num_encoder_layers} and {self.num_decoder_layers}")
    if self.position_encoding == "learned":
      check(isinstance(self.max_length, int) and self.max_length > 0,
            "position_encoding='learned' needs max_length (a positive int)")
    if self.position_encoding == "rope":
      check(self.resolved_head_dim % 2 == 0, f"rope needs an even head_dim, got {self.resolved_head_dim}")
    if self.position_encoding == "sinusoidal":
      check(self.emb_dim % 2 == 0, f"sinusoidal positions need an even emb_dim, got {self.emb_dim}")
    if self.position_encoding == "t5_relative":
      check(self.relative_num_buckets >= 4 and self.relative_max_distance > self.relative_num_buckets // 2,
            "relative_num_buckets must be >= 4 and relative_max_distance > num_buckets / 2")

  @property
  def resolved_head_dim(self) -> int:
    """H: head_dim, or emb_dim // num_heads when head_dim is None."""
    return self.head_dim if self.head_dim is not None else self.emb_dim // self.num_heads

  @property
  def activation_dtype(self):
    return DTYPES[self.dtype]

  @property
  def is_encoder_decoder(self) -> bool:
    return self.mask_type == "encoder_decoder"

  def replace(self, **overrides) -> "TransformerConfig":
    return dataclasses.replace(self, **overrides)


class TransformerLayer(nn.Module):
  """One block: self-attention, optional cross-attention, MLP; pre- or post-norm.

  Returns ``(x, None)`` so it can be the body of ``nn.scan``.
  """
  config: TransformerConfig
  has_cross_attention: bool = False

  @nn.compact
  def __call__(self, x, self_bias, encoded, cross_bias, positions, cache_index,
               deterministic: bool, encoder_pass: bool, cache_mode, max_length):
    """dtype[B, L, D] -> (dtype[B, L, D], None); see ``Stack`` for the other arguments."""
    cfg = self.config
    dtype = cfg.activation_dtype
    rate = cfg.dropout_rate
    pre = cfg.norm_position == "pre"

    def sublayer(x, norm_name, fn):
      norm = make_norm(cfg.norm_type, dtype, norm_name)
      h = fn(norm(x) if pre else x)
      x = x + broadcast_dropout(h, rate, deterministic, self)
      x = x if pre else norm(x)
      return nn.with_logical_constraint(x, ("batch", "length", "embed"))

    def attention(name, kind, use_rope):
      return MultiHeadAttention(num_heads=cfg.num_heads, head_dim=cfg.resolved_head_dim, kind=kind,
                                dropout_rate=rate, use_rope=use_rope, dtype=dtype, name=name)

    self_attention = attention("self_attention", "self", cfg.position_encoding == "rope")
    self_mode = None if encoder_pass else cache_mode
    x = sublayer(x, "pre_self_attention_layer_norm", lambda h: self_attention(
        h, h, self_bias, q_positions=positions, kv_positions=positions,
        deterministic=deterministic, cache_mode=self_mode, cache_index=cache_index,
        max_length=max_length))
    if self.has_cross_attention and not encoder_pass:
      cross = attention("encoder_decoder_attention", "cross", False)
      x = sublayer(x, "pre_cross_attention_layer_norm", lambda h: cross(
          h, encoded, cross_bias, deterministic=deterministic, cache_mode=cache_mode))
    mlp = MlpBlock(mlp_dim=cfg.mlp_dim, activation=cfg.mlp_activation, dropout_rate=rate,
                   dtype=dtype, name="mlp")
    x = sublayer(x, "pre_mlp_layer_norm", lambda h: mlp(h, deterministic=deterministic))
    return x, None


class Stack(nn.Module):
  """A stack of layers with its position encoding and final norm (encoder or decoder)."""
  config: TransformerConfig
  num_layers: int
  has_cross_attention: bool = False

  @nn.compact
  def __call__(self, x, *, segment_ids, positions=None, decoder_causal_attention=None,
               encoded=None, encoder_segment_ids=None, encoder_pass: bool = False,
               deterministic: bool = True, mode: str | None = None, max_length: int | None = None):
    """Runs the stack.

    Args:
      x: dtype[B, L, D] token embeddings.
      segment_ids: int32[B, L]; 0 is padding (unused for mode "step").
      positions: int32[B, L] per-segment positions, or None for arange (for "step": the
        cache slot index).
      decoder_causal_attention: int32[B, L] prefix flags (prefix LM) or None (causal).
      encoded: dtype[B, S, D] encoder output (decoder of an encoder-decoder; None at "step").
      encoder_segment_ids: int32[B, S] (with ``encoded``).
      encoder_pass: fully visible self-attention, bidirectional relative buckets, no
        cross-attention, no cache.
      deterministic: disables dropout.
      mode: None (full forward), "prefill" or "step" (incremental decoding, module doc).
      max_length: cache length for "prefill".
    Returns:
      dtype[B, L, D] normalised outputs.
    """
    cfg = self.config
    b, l = x.shape[:2]
    cache_mode = None if encoder_pass else mode
    cache_index = None
    pe = cfg.position_encoding

    if cache_mode == "step":
      if not self.has_variable("cache", "cache_index"):
        raise ValueError("decode_step without a cache: run Transformer.prefill first")
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
      order = jnp.arange(slots)[None, :] <= q_slot[:, None]  # [L, S]
      self_mask = valid_var.value[:, None, None, :] & order[None, None]
      q_positions, k_positions = positions, pos_var.value
      cross_bias = None
      if self.has_cross_attention:
        enc_valid = self.variable("cache", "encoder_valid").value
        cross_bias = masks_lib.mask_to_bias(jnp.broadcast_to(enc_valid[:, None, None, :],
                                                             (b, 1, l, enc_valid.shape[1])))
    else:
      assert segment_ids.shape == (b, l), (segment_ids.shape, x.shape)
      if positions is None:
        positions = jnp.arange(l, dtype=jnp.int32)[None]
      q_positions = k_positions = positions
      if encoder_pass:
        self_mask = masks_lib.make_fully_visible_mask(segment_ids)
      elif cfg.mask_type == "prefix_lm":
        self_mask = masks_lib.make_decoder_mask(segment_ids, decoder_causal_attention)
      else:
        self_mask = masks_lib.make_decoder_mask(segment_ids, None)
      cross_bias = None
      if self.has_cross_attention and not encoder_pass:
        if encoded is None or encoder_segment_ids is None:
          raise ValueError("the decoder of an encoder-decoder needs encoded and encoder_segment_ids")
        cross_bias = masks_lib.mask_to_bias(
            masks_lib.make_cross_attention_mask(segment_ids, encoder_segment_ids))
      if cache_mode == "prefill":
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

    # Position encodings.
    self_bias = (masks_lib.mask_to_bias(self_mask),)
    bidirectional = encoder_pass
    if pe == "t5_relative":
      relpos = position.RelativePositionBias(num_heads=cfg.num_heads, num_buckets=cfg.relative_num_buckets,
                                             max_distance=cfg.relative_max_distance, name="relpos_bias")
      self_bias += (relpos(q_positions, k_positions, bidirectional=bidirectional),)
    elif pe == "alibi":
      self_bias += (position.alibi_bias(q_positions, k_positions, cfg.num_heads),)
    elif pe == "learned":
      x = x + position.LearnedPositionEmbedding(cfg.max_length, cfg.emb_dim, name="pos_embedder")(
          q_positions).astype(x.dtype)
    elif pe == "sinusoidal":
      x = x + position.sinusoidal_embedding(q_positions, cfg.emb_dim).astype(x.dtype)
    x = broadcast_dropout(x, cfg.dropout_rate, deterministic, self)
    x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
    rope_positions = q_positions if pe == "rope" else None

    # Layers.
    layer_cls = TransformerLayer
    policy_name = cfg.remat_policy
    if policy_name != "none":
      policy = REMAT_POLICIES[policy_name]
      layer_cls = nn.remat(layer_cls, policy=None if policy == "full" else policy,
                           prevent_cse=not cfg.scan_layers, static_argnums=(7, 8, 9, 10))
    args = (self_bias, encoded, cross_bias, rope_positions, cache_index, deterministic,
            encoder_pass, cache_mode, max_length)
    if cfg.scan_layers:
      scanned = nn.scan(layer_cls, variable_axes={"params": 0, "cache": 0},
                        split_rngs={"params": True, "dropout": True},
                        in_axes=(nn.broadcast,) * len(args), length=self.num_layers,
                        metadata_params={nn.PARTITION_NAME: "layers"})
      x, _ = scanned(cfg, self.has_cross_attention, name="layers")(x, *args)
    else:
      for i in range(self.num_layers):
        x, _ = layer_cls(cfg, self.has_cross_attention, name=f"layers_{i}")(x, *args)

    if cfg.norm_position == "pre":
      x = make_norm(cfg.norm_type, cfg.activation_dtype, "final_norm")(x)
    x = broadcast_dropout(x, cfg.dropout_rate, deterministic, self, broadcast_length=not encoder_pass)
    return nn.with_logical_constraint(x, ("batch", "length", "embed"))


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
  """The T5-family Transformer; see the module docstring for params and methods."""
  config: TransformerConfig

  def setup(self):
    cfg = self.config
    self.token_embedder = Embed(cfg.vocab_size, cfg.emb_dim, stddev=cfg.embedding_init_stddev,
                                dtype=cfg.activation_dtype, name="token_embedder")
    self.decoder = Stack(cfg, cfg.num_decoder_layers, has_cross_attention=cfg.is_encoder_decoder,
                         name="decoder")
    if cfg.is_encoder_decoder and not cfg.shared_encoder_decoder:
      self.encoder = Stack(cfg, cfg.num_encoder_layers, name="encoder")
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
    return self._encoder_stack()(self.token_embedder(tokens), segment_ids=seg,
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
    cfg = self.config
    tokens, seg, pos, dca = self._decoder_features(batch)
    enc_seg = None
    if cfg.is_encoder_decoder:
      if encoded is None:
        raise ValueError("encoder-decoder decode needs the encoder output")
      enc_seg = _batch_array(batch, "encoder_segment_ids", required=False)
      if enc_seg is None:
        enc_seg = (_batch_array(batch, "encoder_input_tokens") != 0).astype(jnp.int32)
    y = self.decoder(self.token_embedder(tokens), segment_ids=seg, positions=pos,
                     decoder_causal_attention=dca, encoded=encoded, encoder_segment_ids=enc_seg,
                     deterministic=not enable_dropout, mode=mode, max_length=max_length)
    return self._logits(y)

  def __call__(self, batch: Mapping[str, Any], enable_dropout: bool = False):
    """Full forward pass (training / scoring) -> float32[B, Lt, V] logits."""
    encoded = self.encode(batch, enable_dropout) if self.config.is_encoder_decoder else None
    return self.decode(encoded, batch, enable_dropout)

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


# ---------------------------------------------------------------------------------------
# Scanned <-> unscanned param trees.

def _unstack_leaf(leaf, i):
  if isinstance(leaf, nn.LogicallyPartitioned):
    assert leaf.names[0] == "layers", leaf.names
    return leaf.replace(value=leaf.value[i], names=tuple(leaf.names[1:]))
  return leaf[i]


def _stack_leaves(*leaves):
  first = leaves[0]
  if isinstance(first, nn.LogicallyPartitioned):
    value = jnp.stack([l.value for l in leaves])
    return first.replace(value=value, names=("layers",) + tuple(first.names))
  return jnp.stack(leaves)


def _is_boxed(x):
  return isinstance(x, nn.LogicallyPartitioned)


def scan_to_unscanned(params):
  """Scanned params (``{stack}/layers`` with a leading layer axis) -> ``{stack}/layers_{i}``.

  Works on boxed (LogicallyPartitioned) or plain trees; pure, returns a new dict.
  """
  params = dict(params)
  for stack in ("encoder", "decoder"):
    if stack not in params or "layers" not in params[stack]:
      continue
    sub = dict(params[stack])
    layers = sub.pop("layers")
    n = jax.tree_util.tree_leaves(layers, is_leaf=_is_boxed)[0]
    n = (n.value if _is_boxed(n) else n).shape[0]
    for i in range(n):
      sub[f"layers_{i}"] = jax.tree_util.tree_map(lambda x: _unstack_leaf(x, i), layers, is_leaf=_is_boxed)
    params[stack] = sub
  return params


def unscanned_to_scan(params):
  """``{stack}/layers_{i}`` -> scanned ``{stack}/layers`` (leading "layers" axis). Pure."""
  params = dict(params)
  for stack in ("encoder", "decoder"):
    if stack not in params or "layers_0" not in params[stack]:
      continue
    sub = dict(params[stack])
    n = sum(1 for k in sub if k.startswith("layers_"))
    layers = [sub.pop(f"layers_{i}") for i in range(n)]
    sub["layers"] = jax.tree_util.tree_map(_stack_leaves, *layers, is_leaf=_is_boxed)
    params[stack] = sub
  return params


__all__ = ["TransformerConfig", "Transformer", "TransformerLayer", "Stack", "LogitsDense",
           "MASK_TYPES", "REMAT_POLICIES", "scan_to_unscanned", "unscanned_to_scan"]
