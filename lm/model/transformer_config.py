"""TransformerConfig: the hyperparameters of lm's Transformer, validated on construction.

Defaults are T5.1.1 (docs/t5_reference.md §3.1-3.4); the model and its param tree are
described in transformer.py. Every choice-valued field has its tuple (or dict) of allowed
values here, and a bad value fails at construction with the allowed ones listed.
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from lm.architecture import LAYOUTS
from lm.model import position
from lm.model.attention import REMAT_NAMES as ATTENTION_REMAT_NAMES
from lm.model.attention import ATTENTION_IMPLS
from lm.model.layers import MLP_ACTIVATIONS, NORM_TYPES

MASK_TYPES = LAYOUTS  # named in lm/architecture.py
NORM_POSITIONS = ("pre", "post", "sandwich")
DTYPES = {"bfloat16": jnp.bfloat16, "float32": jnp.float32}
REMAT_POLICIES = {
    "none": None,
    "full": "full",  # save nothing, recompute the whole layer in the backward pass
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "nothing_saveable": jax.checkpoint_policies.nothing_saveable,
    "everything_saveable": jax.checkpoint_policies.everything_saveable,
    # Named policies (the checkpoint_name tags of attention.REMAT_NAMES and
    # layers.MLP_REMAT_NAMES): save these activations, recompute the rest of the layer.
    # "minimal" keeps the q/k/v/out projections and the attention output (MaxText's
    # "minimal"): the backward recomputes the norms, the attention core and the MLP.
    "minimal": jax.checkpoint_policies.save_only_these_names(*ATTENTION_REMAT_NAMES),
    # ... and the MLP's input products: only norms, the attention core and elementwise
    # ops are recomputed.
    "minimal_with_mlp": jax.checkpoint_policies.save_only_these_names(
        *ATTENTION_REMAT_NAMES, "mlp_wi"),
    # "minimal"'s activations kept in the host's pinned memory instead of the device's
    # (GPUs and TPUs; the transfers overlap the layers' compute).
    "minimal_offloaded": jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=(), names_which_can_be_offloaded=ATTENTION_REMAT_NAMES,
        offload_src="device", offload_dst="pinned_host"),
}
# Fields that choose how the model is computed, not what: they change no parameter or
# result beyond floating-point rounding, so checkpoint signatures and the config goldens
# leave them out (a run may resume on another platform with another kernel).
EXECUTION_FIELDS = ("attention_impl",)
# Architecture fields added after checkpoints were first written, with their defaults (T5's
# behaviour). A checkpoint signature leaves such a field out while it holds its default
# (lm/checkpoint/signature.py), so checkpoints written before it existed keep their hash,
# and an old run's config.json takes the default (lm.config.load_config_json).
ADDED_FIELDS = {"num_kv_heads": None, "query_pre_attn_scalar": None,
                "attn_logit_softcapping": None, "final_logit_softcapping": None,
                "scale_embeddings": False, "sliding_window": None, "layer_pattern": None,
                "cross_attention_rope": None, "separate_encoder_embedding": False,
                "encoder_emb_dim": None, "encoder_num_heads": None, "encoder_num_kv_heads": None,
                "encoder_head_dim": None, "encoder_mlp_dim": None, "qk_norm": False,
                "rope_local_max_wavelength": None, "merged_attention": False,
                "bidirectional_window": "symmetric", "eoi_id": None}
# The shape fields an encoder may have of its own (encoder_<name>; T5Gemma 9B-2B).
ENCODER_SHAPE_FIELDS = ("emb_dim", "num_heads", "num_kv_heads", "head_dim", "mlp_dim")
CROSS_ATTENTION_ROPE = (None, "restart", "continue")
LAYER_KINDS = {"L": "local", "G": "global"}  # layer_pattern's letters
BIDIRECTIONAL_WINDOWS = ("symmetric", "centred")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Hyperparameters (T5 names). Defaults are T5.1.1 (a t5_1_1_small-sized model).

  Attributes:
    vocab_size: V, including sentinels (32128 for the T5 vocabulary).
    emb_dim: D.
    num_heads: N (query heads).
    num_kv_heads: K, the key/value heads of grouped-query attention (Gemma 2, T5Gemma):
      query head n reads key/value head n // (N / K). None means N (T5's multi-head
      attention); must divide num_heads. The key and value kernels are [D, K, H] and the
      decoding cache holds K heads.
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
    norm_type: "rmsnorm" (T5, eps 1e-6), "gemma_rmsnorm" (Gemma: the factor is 1 + scale,
      scale initialised to 0; eps 1e-6) or "layernorm" (eps 1e-5, with bias).
    norm_position: "pre" (norm before each sub-block + final norm), "post" (norm after
      each residual add, no final norm) or "sandwich" (Gemma 2, T5Gemma: "pre" plus a norm
      of each sub-block's output before the residual add, params
      ``post_{self_attention,cross_attention,mlp}_layer_norm``).
    tie_embeddings: logits = y @ E^T (T5.1.0), scaled by emb_dim**-0.5 if tied_logits_scale.
    tied_logits_scale: the T5.1.0 emb_dim**-0.5 factor on tied logits (GPT: False).
    embedding_init_stddev: token embedding init std (T5: 1.0; GPT: 0.02).
    dtype: activation dtype "bfloat16" or "float32" (params and logits are float32).
    remat_policy: one of REMAT_POLICIES ("none", "full", "dots_saveable", "minimal", ...;
      docs/planning.md compares their memory).
    scan_layers: nn.scan over layers (params get a leading "layers" axis).
    attention_impl: which kernel computes attention: "xla" (fast_grads.attend, the
      reference and the CPU path), "cudnn", "pallas" (TPU) or "auto" (the fused kernel the
      platform and the call support, else "xla"; attention.choose_kernel). It chooses how,
      not what, the model computes: no parameter depends on it and checkpoint signatures
      leave it out (EXECUTION_FIELDS).
    query_pre_attn_scalar: None (T5): no logit scaling, the query kernel's init is divided
      by sqrt(H) instead. A positive number s (Gemma 2, T5Gemma): queries are multiplied
      by s**-0.5 at run time and the query kernel has the plain fan-in init.
    attn_logit_softcapping: None (off) or a cap c > 0: the attention scores become
      c * tanh(q.k / c) before the mask and any position bias are added (Gemma 2). Only
      the XLA attention path does it (attention.choose_kernel falls back to "xla").
    final_logit_softcapping: None (off) or a cap c > 0: logits = c * tanh(logits / c).
    scale_embeddings: the token embeddings are multiplied by sqrt(emb_dim) (in the
      activation dtype) before the stacks (Gemma); tied logits are not. T5: False.
    sliding_window: W, the window of the local layers: their self-attention lets query
      position i see key position j only where |i - j| < W (with the stack's own mask:
      causal in a decoder, so i - j < W there). None: no local layers.
    layer_pattern: which layers are local ("L") and which global ("G"), cycled over each
      stack's layers: "LG" is Gemma 2's and T5Gemma's alternation (layer 0 local),
      "LLLLLG" Gemma 3's. None: every layer global (T5). An "L" needs sliding_window; a
      pattern with both letters needs scan_layers=False (a scanned stack is one layer).
    cross_attention_rope: RoPE in cross-attention too (position_encoding="rope",
      encoder-decoder): queries at the decoder's positions, keys at the encoder's. None
      (T5, T5Gemma): no RoPE there. "restart": decoder positions from 0 as in its
      self-attention. "continue" (RedLLM): decoder position p of a segment is p + the
      encoder segment's length, as if the targets followed the inputs in one sequence.
      Self-attention is unchanged by the offset (RoPE is relative).
    separate_encoder_embedding: the encoder reads its own token embedding table
      (``encoder_token_embedder``, T5Gemma); the decoder and a tied head read
      ``token_embedder``. False (T5, T5Gemma 2): one table for both stacks.
    encoder_emb_dim, encoder_num_heads, encoder_num_kv_heads, encoder_head_dim,
      encoder_mlp_dim: the encoder's own shape where it differs from the decoder's
      (T5Gemma 9B-2B: a 3584-wide encoder, a 2304-wide decoder whose cross-attention
      projects keys and values from 3584); None: the decoder's (``encoder_config``). A
      wider or narrower encoder needs separate_encoder_embedding.
    qk_norm: queries and keys are normalised over the head dim (norm_type; params
      ``query_norm``/``key_norm`` scale [H]) right after their projections, before RoPE
      and the query scale (Gemma 3, T5Gemma 2). False (T5): no such norm.
    rope_local_max_wavelength: the RoPE base of the local layers (layer_pattern "L"); the
      global layers keep rope_max_wavelength (Gemma 3, T5Gemma 2: 10k local, 1M global).
      None: every layer uses rope_max_wavelength.
    merged_attention: the decoder of an encoder-decoder has one attention per layer, over
      its own keys and the encoder's outputs together (T5Gemma 2): the same key and value
      kernels project both, the encoder's keys get no RoPE, one softmax runs over
      [decoder keys; encoder keys] (the decoder part causal, windowed in local layers, the
      encoder part its padding mask), and the layer has no cross-attention sub-block.
      False (T5): separate self- and cross-attention.
    bidirectional_window: which keys a local layer of the encoder sees: "symmetric" (T5Gemma,
      |i - j| < W: 2W - 1 keys) or "centred" (T5Gemma 2: W keys, j - i from -((W - 1) // 2)
      to W // 2). Causal local layers see i - j < W either way.
    eoi_id: a token whose input embedding is a parameter of its own,
      ``token_embedder/eoi_embedding`` [D], used unscaled (T5Gemma 2's end-of-image token);
      None: no such token.
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
  attention_impl: str = "auto"
  num_kv_heads: int | None = None
  query_pre_attn_scalar: float | None = None
  attn_logit_softcapping: float | None = None
  final_logit_softcapping: float | None = None
  scale_embeddings: bool = False
  sliding_window: int | None = None
  layer_pattern: str | None = None
  cross_attention_rope: str | None = None
  separate_encoder_embedding: bool = False
  encoder_emb_dim: int | None = None
  encoder_num_heads: int | None = None
  encoder_num_kv_heads: int | None = None
  encoder_head_dim: int | None = None
  encoder_mlp_dim: int | None = None
  qk_norm: bool = False
  rope_local_max_wavelength: float | None = None
  merged_attention: bool = False
  bidirectional_window: str = "symmetric"
  eoi_id: int | None = None

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
    if self.num_kv_heads is not None:
      check(isinstance(self.num_kv_heads, int) and not isinstance(self.num_kv_heads, bool)
            and self.num_kv_heads > 0 and self.num_heads % self.num_kv_heads == 0,
            f"num_kv_heads must be a positive int that divides num_heads ({self.num_heads}) "
            f"or None (= num_heads), got {self.num_kv_heads!r}")
    for name in ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping"):
      value = getattr(self, name)
      check(value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                              and 0 < value < math.inf),
            f"{name} must be a positive finite number or None (off), got {value!r}")
    check(isinstance(self.scale_embeddings, bool),
          f"scale_embeddings must be a bool, got {self.scale_embeddings!r}")
    check(self.sliding_window is None or (isinstance(self.sliding_window, int) and not
                                          isinstance(self.sliding_window, bool)
                                          and self.sliding_window > 0),
          f"sliding_window must be a positive int or None, got {self.sliding_window!r}")
    pattern = self.layer_pattern
    check(pattern is None or (isinstance(pattern, str) and pattern
                              and set(pattern) <= set(LAYER_KINDS)),
          f"layer_pattern must be a string of L (local) and G (global) layers, e.g. 'LG', "
          f"or None (all global), got {pattern!r}")
    has_local = pattern is not None and "L" in pattern
    check(has_local == (self.sliding_window is not None),
          f"sliding_window ({self.sliding_window!r}) and local layers in layer_pattern "
          f"({pattern!r}) go together: set both (e.g. sliding_window=4096, "
          f"layer_pattern='LG') or neither")
    check(self.cross_attention_rope in CROSS_ATTENTION_ROPE,
          f"unknown cross_attention_rope {self.cross_attention_rope!r}; expected one of "
          f"{list(CROSS_ATTENTION_ROPE)}")
    check(self.cross_attention_rope is None or (
        self.position_encoding == "rope" and self.mask_type == "encoder_decoder"),
          f"cross_attention_rope={self.cross_attention_rope!r} needs position_encoding='rope' "
          f"and mask_type='encoder_decoder' (got {self.position_encoding!r}, "
          f"{self.mask_type!r})")
    check(isinstance(self.separate_encoder_embedding, bool),
          f"separate_encoder_embedding must be a bool, got {self.separate_encoder_embedding!r}")
    check(not self.separate_encoder_embedding or (
        self.mask_type == "encoder_decoder" and not self.shared_encoder_decoder),
          "separate_encoder_embedding=True needs mask_type='encoder_decoder' with its own "
          "encoder (shared_encoder_decoder=False)")
    check(not (self.scan_layers and pattern is not None and len(set(pattern)) > 1),
          f"layer_pattern {pattern!r} mixes local and global layers: set scan_layers=False "
          f"(a scanned stack runs one layer body)")
    check(isinstance(self.qk_norm, bool), f"qk_norm must be a bool, got {self.qk_norm!r}")
    local = self.rope_local_max_wavelength
    check(local is None or (isinstance(local, (int, float)) and not isinstance(local, bool)
                            and 0 < local < math.inf and self.position_encoding == "rope"
                            and has_local),
          f"rope_local_max_wavelength must be None or a positive number, with "
          f"position_encoding='rope' and local layers (layer_pattern with 'L'), got {local!r}")
    check(isinstance(self.merged_attention, bool),
          f"merged_attention must be a bool, got {self.merged_attention!r}")
    check(not self.merged_attention or (
        self.mask_type == "encoder_decoder" and not self.shared_encoder_decoder
        and self.position_encoding not in ("t5_relative", "alibi")
        and self.cross_attention_rope is None
        and self.encoder_emb_dim in (None, self.emb_dim)),
          "merged_attention=True needs mask_type='encoder_decoder' with its own encoder of the "
          "decoder's width, no position bias (not t5_relative or alibi) and "
          "cross_attention_rope=None (the encoder's keys get no position)")
    check(self.bidirectional_window in BIDIRECTIONAL_WINDOWS,
          f"unknown bidirectional_window {self.bidirectional_window!r}; expected one of "
          f"{BIDIRECTIONAL_WINDOWS}")
    eoi = self.eoi_id
    check(eoi is None or (isinstance(eoi, int) and not isinstance(eoi, bool)
                          and 0 < eoi < self.vocab_size),
          f"eoi_id must be None or an id in [1, vocab_size={self.vocab_size}), got {eoi!r}")
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
    check(self.attention_impl in ATTENTION_IMPLS,
          f"unknown attention_impl {self.attention_impl!r}; expected one of {ATTENTION_IMPLS}")
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

    own = {f: getattr(self, "encoder_" + f) for f in ENCODER_SHAPE_FIELDS
           if getattr(self, "encoder_" + f) is not None}
    if own:
      check(self.mask_type == "encoder_decoder" and not self.shared_encoder_decoder,
            f"encoder_{'/'.join(own)} need mask_type='encoder_decoder' with its own encoder")
      check(own.get("emb_dim", self.emb_dim) == self.emb_dim or self.separate_encoder_embedding,
            f"encoder_emb_dim={own.get('emb_dim')} != emb_dim={self.emb_dim} needs "
            "separate_encoder_embedding=True (the encoder's table has its width)")
      self.encoder_config()  # the encoder's shape, validated

  def encoder_config(self) -> "TransformerConfig":
    """The config the encoder stack runs with: this one, with the encoder_<field> values
    (ENCODER_SHAPE_FIELDS) where they are set; this config itself when none is."""
    own = {f: getattr(self, "encoder_" + f) for f in ENCODER_SHAPE_FIELDS
           if getattr(self, "encoder_" + f) is not None}
    if not own:
      return self
    return dataclasses.replace(self, **own, **{"encoder_" + f: None for f in ENCODER_SHAPE_FIELDS})

  def rope_wavelength(self, kind: str) -> float:
    """The RoPE base of a layer of ``kind`` ("local" or "global")."""
    if kind == "local" and self.rope_local_max_wavelength is not None:
      return float(self.rope_local_max_wavelength)
    return float(self.rope_max_wavelength)

  def layer_kind(self, index: int) -> str:
    """"local" or "global": the kind of layer `index` of a stack (layer_pattern)."""
    return "global" if self.layer_pattern is None else LAYER_KINDS[
        self.layer_pattern[index % len(self.layer_pattern)]]

  @property
  def resolved_head_dim(self) -> int:
    """H: head_dim, or emb_dim // num_heads when head_dim is None."""
    return self.head_dim if self.head_dim is not None else self.emb_dim // self.num_heads

  @property
  def resolved_num_kv_heads(self) -> int:
    """K: num_kv_heads, or num_heads when it is None."""
    return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

  @property
  def activation_dtype(self):
    return DTYPES[self.dtype]

  @property
  def is_encoder_decoder(self) -> bool:
    return self.mask_type == "encoder_decoder"

  def replace(self, **overrides) -> "TransformerConfig":
    return dataclasses.replace(self, **overrides)


__all__ = ["TransformerConfig", "MASK_TYPES", "NORM_POSITIONS", "DTYPES", "REMAT_POLICIES",
           "ATTENTION_IMPLS", "EXECUTION_FIELDS", "ADDED_FIELDS",
           "LAYER_KINDS", "CROSS_ATTENTION_ROPE", "ENCODER_SHAPE_FIELDS",
           "BIDIRECTIONAL_WINDOWS"]
