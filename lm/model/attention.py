"""Multi-head dot-product attention (self, cross, merged) with a KV cache for decoding.

The layer adds a given bias (masks.py's mask, any position bias); it builds no masks.
``choose_kernel`` alone decides which kernel computes ``softmax(Q K^T + bias) V``
(kernels.py); fast_grads.py has the softmax core's gradient.

Einsum letters: B batch, L query length, S key length, D emb, N heads, H head_dim,
K key/value heads, G = N / K query heads per key/value head.

Scaling, grouped-query and merged attention, the params and the [B, K, H, S] cache layout:
docs/model.md, 'Attention'; the kernel rules: docs/speed.md, 'Attention kernels'.
"""
from __future__ import annotations

import logging
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from lm.model import fast_grads, kernels, position
from lm.model.fast_grads import dense
from lm.model.layers import make_norm, param_with_axes

CACHE_MODES = (None, "prefill", "step")
REMAT_NAMES = ("query_proj", "key_proj", "value_proj", "attention_out", "out_proj")
"""``jax.ad_checkpoint.checkpoint_name`` tags of ``MultiHeadAttention``'s activations: the
q/k/v projections [B, L or S, N, H], the attention output [B, L, N, H] (the out
projection's input) and the out projection [B, L, D]; remat policies save them by name
(config.REMAT_POLICIES)."""
ATTENTION_IMPLS = ("auto", "xla", "cudnn", "pallas")
# A merged attention's cache of the encoder's keys and values: one row per example, shared
# by its beams (lm.generation).
ENCODER_CACHE_NAMES = ("cached_encoder_key", "cached_encoder_value")
# What choose_kernel returns: the XLA path (fast_grads.attend) or a fused kernel.
KERNELS = ("xla", "cudnn", "pallas_flash", "pallas_splash")


@flax.struct.dataclass
class AttentionMask:
  """Which queries may attend to which keys, in the two forms the kernels take.

  The XLA path adds ``bias``; the fused kernels rebuild the same mask from the segment
  ids, ``causal`` and ``decoder_causal_attention`` (never from ``bias``).

  Attributes:
    bias: float32 [B or 1, 1, L, S], 0 where allowed and -1e10 elsewhere
      (``masks.mask_to_bias``).
    q_segment_ids: int32[B, L] (0 = padding), or None (a decode step).
    kv_segment_ids: int32[B, S], or None.
    decoder_causal_attention: int32[B, L] prefix-LM flags, or None.
    causal: static; keys after the query are masked.
    packed: static; rows may hold several segments (False: one segment, then padding).
    name: static; the stack and kind, for the log ("encoder self-attention", ...).
    window: static; a local layer's sliding window W (``bias`` masks |i - j| >= W; the
      fused kernels do not rebuild it, so these calls run XLA), or None.
  """
  bias: Any
  q_segment_ids: Any = None
  kv_segment_ids: Any = None
  decoder_causal_attention: Any = None
  causal: bool = flax.struct.field(pytree_node=False, default=False)
  packed: bool = flax.struct.field(pytree_node=False, default=True)
  name: str = flax.struct.field(pytree_node=False, default="attention")
  window: int | None = flax.struct.field(pytree_node=False, default=None)


def choose_kernel(impl: str, *, platform: str, query_shape, key_shape, dtype, mask,
                  has_position_bias: bool, dropout: bool, cache: bool,
                  softcap: bool = False) -> tuple[str, str]:
  """The kernel that runs one attention call, and why: the one owner of that choice.

  Args:
    impl: ``TransformerConfig.attention_impl`` ("auto", "xla", "cudnn", "pallas").
    platform: "cpu", "gpu" or "tpu" (the backend being compiled for).
    query_shape: (B, L, N, H); key_shape: (B, S, N, H).
    dtype: the activations' dtype.
    mask: the call's AttentionMask, or None (a bare bias: only XLA can serve it).
    has_position_bias: a position bias is added to the logits.
    dropout: attention-probability dropout is active.
    cache: a KV-cache call (prefill or decode step).
    softcap: attention-logit soft-capping is on (none of the fused kernels lm calls caps).
  Returns:
    (one of KERNELS, the reason in words).
  """
  if impl not in ATTENTION_IMPLS:
    raise ValueError(f"unknown attention_impl {impl!r}; expected one of {ATTENTION_IMPLS}")
  if impl == "xla":
    return "xla", "attention_impl='xla'"
  want = impl if impl != "auto" else {"gpu": "cudnn", "tpu": "pallas"}.get(platform)
  if want is None:
    return "xla", f"platform {platform}: no fused kernel (XLA is lm's {platform} path)"
  need = {"cudnn": "gpu", "pallas": "tpu"}[want]
  if platform != need:
    return "xla", f"{want} needs a {need.upper()}, compiling for {platform}"
  if dropout:
    return "xla", "attention-probability dropout (the fused kernels have none)"
  if cache:
    return "xla", "KV-cache call (prefill or decode step)"
  if softcap:
    return "xla", "attention-logit soft-capping (lm's fused kernels have none)"
  if mask is not None and mask.window is not None:
    return "xla", f"sliding window {mask.window} (lm's fused kernels get no window)"
  if mask is None or mask.q_segment_ids is None or mask.kv_segment_ids is None:
    return "xla", "no segment ids to build the mask from"
  (_, l, _, h), s = query_shape, key_shape[1]
  if want == "cudnn":
    if jnp.dtype(dtype) not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
      return "xla", f"{jnp.dtype(dtype).name} activations (cuDNN attention takes bfloat16/float16)"
    if h % 8 or h > 128:
      return "xla", f"head_dim {h} (cuDNN needs a multiple of 8, at most 128)"
    if has_position_bias and (l % 2 or s % 2):
      return "xla", f"odd length (L={l}, S={s}) with a bias (cuDNN's bias gradient needs even)"
    if mask.packed:
      return "xla", ("packed rows (cuDNN's segment offsets are not public in jax 0.10.2; "
                     "set data.pack=False for one example per row)")
    if mask.decoder_causal_attention is not None:
      return "xla", "prefix-LM mask (neither causal nor sequence lengths express it)"
    return "cudnn", "cuDNN fused attention (lengths, is_causal, [1, N, L, S] bias)"
  if l % kernels.PALLAS_BLOCK or s % kernels.PALLAS_BLOCK:
    return "xla", f"length not a multiple of {kernels.PALLAS_BLOCK} (L={l}, S={s})"
  if mask.causal and not has_position_bias and mask.decoder_causal_attention is None:
    return "pallas_splash", "Pallas splash attention (causal, segment ids)"
  return "pallas_flash", "Pallas flash attention (ab bias, segment ids)"


def compile_platform() -> str:
  """"cpu", "gpu" or "tpu": the platform of the mesh being traced under (``jax.set_mesh``,
  as lm's steps and ``lm.plan``'s TPU compiles from a CPU host run), else the default
  backend."""
  mesh = jax.sharding.get_abstract_mesh()
  device = None if mesh is None or mesh.empty else mesh.abstract_device
  platform = device.platform if device is not None else jax.default_backend()
  return "gpu" if platform in ("cuda", "rocm") else platform


_LOGGED: set = set()


def _log_choice(name: str, kernel: str, reason: str) -> None:
  """Logs once per process which kernel a stack's attention runs, and why."""
  if (name, kernel, reason) not in _LOGGED:
    _LOGGED.add((name, kernel, reason))
    logging.info("attention: %s runs %s (%s)", name, kernel, reason)


def _as_biases(bias) -> tuple:
  """None, one array or a tuple/list of arrays -> a tuple of arrays."""
  return () if bias is None else tuple(bias) if isinstance(bias, (tuple, list)) else (bias,)


def dot_product_attention(query, key, value, bias=None, *, mask: AttentionMask | None = None,
                          impl: str = "xla", dropout_rate: float = 0.0, dropout_rng=None,
                          deterministic: bool = True, dtype=jnp.float32, cache: bool = False,
                          platform: str | None = None, interpret: bool = False,
                          softcap: float | None = None):
  """``softmax(Q K^T + bias) V`` with float32 logits and softmax, no logit scaling.

  Attention-weight dropout shares its mask over the query axis (t5x broadcast_dropout).
  On the XLA path the gradient is hand-written (``fast_grads.attend``); the fused kernels
  (``impl``, ``choose_kernel``) bring their own.

  Args:
    query: [B, L, N, H].
    key: [B, S, K, H] (K divides N: grouped-query attention, heads repeated to N here).
    value: [B, S, K, H].
    bias: optional float32 broadcastable to [B, N, L, S] (position biases, or with no
      ``mask`` also the mask's 0 / -1e10), or a tuple of such arrays, all added to the
      logits (kept apart so a [B, 1, L, S] mask and a [1, N, L, S] position bias never
      materialise their [B, N, L, S] sum outside the fused softmax).
    mask: the mask as an ``AttentionMask`` (its ``bias`` is added before ``bias``);
      without one only the XLA path can serve the call.
    impl: ``TransformerConfig.attention_impl``.
    dropout_rate, dropout_rng, deterministic: attention-weight dropout.
    dtype: dtype of the weights fed to the value einsum and of the result.
    cache: a KV-cache prefill (the XLA path serves it).
    platform: the backend compiled for (default: ``compile_platform()``).
    interpret: run Pallas kernels in the interpreter (tests on the CPU, with platform="tpu").
    softcap: None, or c > 0: scores c * tanh(Q K^T / c) before the biases (XLA path only).
  Returns:
    dtype[B, L, N, H].
  """
  if not query.ndim == key.ndim == value.ndim == 4:
    raise ValueError(f"attention needs rank-4 query, key and value ([B, L or S, N, H]), got "
                     f"shapes {query.shape}, {key.shape}, {value.shape}")
  if key.shape != value.shape:
    raise ValueError(f"attention needs keys and values of one shape, got {key.shape} and "
                     f"{value.shape}")
  if (query.shape[0] != key.shape[0] or query.shape[3] != key.shape[3]
      or query.shape[2] % key.shape[2]):
    raise ValueError(f"attention needs queries {query.shape} with the batch, heads and head_dim "
                     f"of the keys {key.shape} (or a multiple of their heads: grouped-query "
                     "attention)")
  if key.shape[2] != query.shape[2]:  # grouped-query attention: head n reads n // G
    key, value = (nn.with_logical_constraint(
        jnp.repeat(x, query.shape[2] // key.shape[2], axis=2), ("batch", "length", "heads", "kv"))
        for x in (key, value))
  position_biases = tuple(jnp.asarray(b, jnp.float32) for b in _as_biases(bias))
  biases = position_biases if mask is None else (
      (jnp.asarray(mask.bias, jnp.float32),) + position_biases)
  logits_shape = (query.shape[0], query.shape[2], query.shape[1], key.shape[1])
  for b in biases:
    if b.ndim != 4 or any(n not in (1, full) for n, full in zip(b.shape, logits_shape)):
      raise ValueError(f"attention bias of shape {b.shape} does not broadcast to the logits' "
                       f"[B, N, L, S] = {logits_shape}")
  if not 0.0 <= dropout_rate < 1.0:
    raise ValueError(f"attention dropout_rate must be in [0, 1), got {dropout_rate}")
  dropout = not deterministic and dropout_rate > 0.0
  kernel, reason = choose_kernel(
      impl, platform=platform or compile_platform(), query_shape=query.shape,
      key_shape=key.shape, dtype=query.dtype, mask=mask,
      has_position_bias=bool(position_biases), dropout=dropout, cache=cache,
      softcap=softcap is not None)
  _log_choice(mask.name if mask is not None else "attention", kernel, reason)
  if kernel != "xla":
    return _fused(kernel, query, key, value, mask, position_biases, dtype, interpret)
  scale = None
  if dropout:
    b, s, n, _ = key.shape
    keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, (b, n, 1, s))
    scale = jnp.where(keep, 1.0 / (1.0 - dropout_rate), 0.0).astype(jnp.float32)
  return fast_grads.attend(query, key, value, biases, scale, jnp.dtype(dtype),
                           None if softcap is None else float(softcap))


def _sum_biases(biases):
  """One float32 bias from several (None if there are none)."""
  total = None
  for b in biases:
    total = b if total is None else total + b
  return total


def _fused(kernel, query, key, value, mask, position_biases, dtype, interpret):
  """Runs a fused kernel that ``choose_kernel`` picked (kernels.py)."""
  position_bias = _sum_biases(position_biases)
  if kernel == "cudnn":
    return kernels.cudnn_attention(query, key, value, mask, position_bias, dtype=dtype)
  ab = position_bias
  if mask.decoder_causal_attention is not None:  # the prefix-LM mask rides in the bias
    ab = mask.bias if ab is None else ab + mask.bias
  return kernels.pallas_attention(query, key, value, mask, ab, kernel=kernel.split("_")[1],
                                  interpret=interpret, dtype=dtype)


def cached_attention(query, key, value, biases=(), *, dtype=jnp.float32,
                     softcap: float | None = None):
  """``softmax(Q K^T + sum(biases)) V`` against a decoding cache (no dropout, no gradient).

  Args:
    query: [B, L, N, H] with B = R * Bc; query rows c * R + r (r < R) read cache row c.
    key, value: [Bc, K, H, S], the cache layout (docs/model.md); K divides N, query
      head n reads cache head n // (N / K).
    biases: tuple of float32 arrays broadcastable to [B, N, L, S] when R == 1; when R > 1,
      each has 1 or Bc rows and a query axis of size 1 (the cross-attention mask).
    dtype: dtype of the weights fed to the value einsum and of the result.
    softcap: None, or c > 0: scores c * tanh(Q K^T / c) before the biases.
  Returns:
    dtype[B, L, N, H].
  """
  b, l, n, h = query.shape
  bc, kh, s = key.shape[0], key.shape[1], key.shape[-1]
  if not key.shape == value.shape == (bc, kh, h, s) or b % bc or n % kh:
    raise ValueError(f"cached attention needs a cache [Bc, K, H, S] of the queries' head_dim "
                     f"with K dividing their heads, and a multiple of Bc query rows; got query "
                     f"{query.shape}, key {key.shape}, value {value.shape}")
  r = b // bc
  for x in biases:
    if r > 1 and (x.shape[0] not in (1, bc) or x.shape[-2] != 1):
      raise ValueError(f"with {r} query rows per cache row, a bias needs 1 or {bc} rows and a "
                       f"query axis of 1, got {x.shape}")
  g = n // kh
  if g == 1:
    q = query.reshape(bc, r * l, n, h)
    logits = jnp.einsum("BLNH,BNHS->BNLS", q, key, preferred_element_type=jnp.float32)
  else:  # grouped: [Bc, K, G, R * L, S] scores, viewed as [Bc, N, R * L, S]
    q = query.reshape(bc, r * l, kh, g, h)
    logits = jnp.einsum("BLKGH,BKHS->BKGLS", q, key, preferred_element_type=jnp.float32)
    logits = logits.reshape(bc, n, r * l, s)
  if softcap is not None:
    logits = softcap * jnp.tanh(logits / softcap)
  for x in biases:
    logits = logits + jnp.asarray(x, jnp.float32)
  probs = jax.nn.softmax(logits, axis=-1)
  if g == 1:
    out = jnp.einsum("BNLS,BNHS->BLNH", probs.astype(dtype), value.astype(dtype))
  else:
    probs = probs.reshape(bc, kh, g, r * l, s)
    out = jnp.einsum("BKGLS,BKHS->BLKGH", probs.astype(dtype), value.astype(dtype))
  return out.reshape(b, l, n, h)


def _cache_scores(query, key, softcap):
  """float32[B, N, L, S] scores of queries [B, L, N, H] against a cache [Bc, K, H, S] (query
  rows c * R + r read cache row c; head n reads cache head n // (N / K))."""
  b, l, n, h = query.shape
  bc, kh, s = key.shape[0], key.shape[1], key.shape[-1]
  q = query.reshape(bc, b // bc, l, kh, n // kh, h)
  logits = jnp.einsum("CRLKGH,CKHS->CRKGLS", q, key, preferred_element_type=jnp.float32)
  logits = logits.reshape(b, n, l, s)
  return logits if softcap is None else softcap * jnp.tanh(logits / softcap)


def _cache_values(probs, value, dtype):
  """dtype[B, L, N, H]: weights [B, N, L, S] times a value cache [Bc, K, H, S]."""
  b, n, l, s = probs.shape
  bc, kh, h = value.shape[:3]
  p = probs.reshape(bc, b // bc, kh, n // kh, l, s).astype(dtype)
  out = jnp.einsum("CRKGLS,CKHS->CRLKGH", p, value.astype(dtype))
  return out.reshape(b, l, n, h)


def merged_cached_attention(query, own, encoder, *, dtype=jnp.float32,
                            softcap: float | None = None):
  """Merged attention at a decode step: one softmax over the decoder's own cache and the
  encoder's (no dropout, no gradient).

  Args:
    query: [B, L, N, H].
    own: (key, value, bias): the self-attention cache [B, K, H, M] and its float32 mask
      bias broadcastable to [B, 1, L, M].
    encoder: (key, value, bias): the encoder's cache [Bc, K, H, S] (B = R * Bc rows of
      queries, R beams) and its bias [Bc or 1, 1, 1 or L, S].
    dtype: dtype of the weights fed to the value einsums and of the result.
    softcap: None, or c > 0: scores c * tanh(Q K^T / c) before the biases.
  Returns:
    dtype[B, L, N, H].
  """
  (k_own, v_own, b_own), (k_enc, v_enc, b_enc) = own, encoder
  b = query.shape[0]
  if b % k_enc.shape[0] or k_own.shape[0] != b:
    raise ValueError(f"merged attention needs {b} own cache rows and a divisor of {b} encoder "
                     f"cache rows, got {k_own.shape} and {k_enc.shape}")
  b_enc, m = jnp.asarray(b_enc, jnp.float32), k_own.shape[-1]
  if b_enc.shape[0] not in (1, b):
    b_enc = jnp.repeat(b_enc, b // b_enc.shape[0], axis=0)  # row c * R + r <- c
  logits = jnp.concatenate([_cache_scores(query, k_own, softcap) + b_own,
                            _cache_scores(query, k_enc, softcap) + b_enc], axis=-1)
  probs = jax.nn.softmax(logits, axis=-1)
  return (_cache_values(probs[..., :m], v_own, dtype)
          + _cache_values(probs[..., m:], v_enc, dtype))


def _merged_bias(own_bias, encoder_bias):
  """float32[B, 1, L, L + S]: a self-attention mask bias [B or 1, 1, L, L] beside the
  encoder's [B, 1, L, S]."""
  own_bias, encoder_bias = (jnp.asarray(x, jnp.float32) for x in (own_bias, encoder_bias))
  b = max(own_bias.shape[0], encoder_bias.shape[0])
  l = own_bias.shape[2]
  return jnp.concatenate([jnp.broadcast_to(own_bias, (b, 1, l, own_bias.shape[3])),
                          jnp.broadcast_to(encoder_bias, (b, 1, l, encoder_bias.shape[3]))],
                         axis=-1)


class MultiHeadAttention(nn.Module):
  """Multi-head attention with optional RoPE and KV cache (see module docstring).

  Attributes:
    num_heads: N.
    head_dim: H (independent of D).
    kind: "self" or "cross" (decides how the cache is laid out).
    dropout_rate: attention-weight dropout.
    use_rope: rotate queries and keys by their positions (self-attention only).
    dtype: activation dtype.
    attention_impl: one of ATTENTION_IMPLS (``dot_product_attention``'s ``impl``).
    num_kv_heads: K key/value heads (divides N); None means N.
    query_scale: None (T5: query init / sqrt(H)) or s: queries times s**-0.5, plain init.
    softcap: None or the attention-logit cap c (scores c * tanh(q.k / c)).
    kv_features: the width of ``inputs_kv`` when it is not the queries' (cross-attention
      from an encoder of another width, T5Gemma 9B-2B); None: the queries' D.
    qk_norm: None, or the norm type (layers.NORM_TYPES) that normalises queries and keys
      over H after their projections (params ``query_norm``, ``key_norm``).
    rope_max_wavelength: the RoPE base (``use_rope``).
  """
  num_heads: int
  head_dim: int
  kind: str = "self"
  dropout_rate: float = 0.0
  use_rope: bool = False
  dtype: Any = jnp.float32
  attention_impl: str = "xla"
  num_kv_heads: int | None = None
  query_scale: float | None = None
  softcap: float | None = None
  kv_features: int | None = None
  qk_norm: str | None = None
  rope_max_wavelength: float = 10_000.0

  @property
  def kv_heads(self) -> int:
    """K: num_kv_heads, or num_heads when it is None."""
    return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

  @nn.compact
  def __call__(self, inputs_q, inputs_kv, bias, *, mask: AttentionMask | None = None,
               q_positions=None, kv_positions=None,
               deterministic: bool = True, cache_mode: str | None = None,
               cache_index=None, max_length: int | None = None, encoded=None,
               encoder_mask: AttentionMask | None = None):
    """Attends ``inputs_q`` to ``inputs_kv`` (and, merged, to ``encoded``).

    Args:
      inputs_q: dtype[B, L, D].
      inputs_kv: dtype[B, S, D]; ignored (may be None) for a cross-attention "step".
      bias: float32 broadcastable to [B, N, L, S_total], where S_total is S without a
        cache, max_length for a self-attention step, S_enc for cross-attention (the
        position bias, or a tuple of biases; the mask's too when ``mask`` is None).
      mask: the AttentionMask over those S_total keys, or None.
      q_positions, kv_positions: int32[B or 1, L] / [B or 1, S] (RoPE only).
      deterministic: disables dropout.
      cache_mode: None (no cache), "prefill" (compute, store the keys/values, attend
        over the new ones) or "step" (append to / read from the cache, attend over it).
      cache_index: int32[] first slot to write at a self-attention "step".
      max_length: cache length for a self-attention "prefill".
      encoded: dtype[B, S_enc, D] encoder outputs for merged attention (a "self" kind
        only; unused at a "step", which reads their keys from the cache), else None.
      encoder_mask: with ``encoded``, the AttentionMask over the encoder keys ([B, 1, L,
        S_enc] bias; [Bc, 1, 1, S_enc] at a step).
    Returns:
      dtype[B, L, D].
    """
    if cache_mode not in CACHE_MODES:
      raise ValueError(f"unknown cache_mode {cache_mode!r}; expected one of {CACHE_MODES}")
    if self.kind not in ("self", "cross"):
      raise ValueError(f"unknown attention kind {self.kind!r}")
    d = inputs_q.shape[-1]
    n, h, kh = self.num_heads, self.head_dim, self.kv_heads
    if n % kh:
      raise ValueError(f"num_kv_heads ({kh}) must divide num_heads ({n})")
    kv_axis = "heads" if kh == n else "kv_heads"
    kernel_init = nn.initializers.variance_scaling(1.0, "fan_in", "normal", in_axis=0, out_axis=(1, 2))
    depth_scaling = jnp.sqrt(h).astype(jnp.float32)

    def query_init(*args):
      return kernel_init(*args) / depth_scaling

    dkv = d if self.kv_features is None else self.kv_features

    kernels: dict = {}

    def project(name, x, init, heads=n, axis="heads", width=d):
      if name not in kernels:  # merged attention projects two inputs by one kernel
        kernels[name] = param_with_axes(self, name, init, (width, heads, h), ("embed", axis, "kv"))
      kernel = kernels[name]
      y = dense(jnp.asarray(x, self.dtype), kernel.astype(self.dtype))  # [B, L, N or K, H]
      y = checkpoint_name(y, f"{name}_proj")
      return nn.with_logical_constraint(y, ("batch", "length", axis, "kv"))

    merged = encoder_mask is not None
    if merged and self.kind != "self":
      raise ValueError("merged attention (encoder_mask) is a decoder's self-attention")
    norms = {} if self.qk_norm is None else {
        name: make_norm(self.qk_norm, self.dtype, f"{name}_norm", axes=("kv",))
        for name in ("query", "key")}

    def rope(x, positions):
      if not self.use_rope:
        return x
      return position.apply_rope(x, positions, self.rope_max_wavelength)

    query = project("query", inputs_q, query_init if self.query_scale is None else kernel_init)
    if norms:
      query = norms["query"](query)
    if self.query_scale is not None:
      query = query * jnp.asarray(self.query_scale ** -0.5, query.dtype)
    query = rope(query, q_positions)

    cross_step = self.kind == "cross" and cache_mode == "step"
    if not cross_step:
      key = project("key", inputs_kv, kernel_init, kh, kv_axis, dkv)
      value = project("value", inputs_kv, kernel_init, kh, kv_axis, dkv)
      key = rope(norms["key"](key) if norms else key, kv_positions)
    else:
      # Declare the kernels so the param tree does not depend on the mode.
      param_with_axes(self, "key", kernel_init, (dkv, kh, h), ("embed", kv_axis, "kv"))
      param_with_axes(self, "value", kernel_init, (dkv, kh, h), ("embed", kv_axis, "kv"))

    if merged and cache_mode != "step":  # the encoder's keys: same kernels, normed, no RoPE
      enc_key = project("key", encoded, kernel_init, kh, kv_axis, dkv)
      enc_key = norms["key"](enc_key) if norms else enc_key
      enc_value = project("value", encoded, kernel_init, kh, kv_axis, dkv)

    if cache_mode is not None:
      key, value = self._update_cache(key if not cross_step else None,
                                      value if not cross_step else None,
                                      cache_mode, cache_index, max_length, inputs_q.shape[0])
      if merged:
        enc_key, enc_value = self._encoder_cache(
            *((enc_key, enc_value) if cache_mode == "prefill" else (None, None)))

    if merged and cache_mode == "step":
      out = merged_cached_attention(
          query, (key, value, sum(_as_biases(bias), jnp.asarray(mask.bias, jnp.float32))),
          (enc_key, enc_value, encoder_mask.bias), dtype=self.dtype, softcap=self.softcap)
    elif merged:
      dropout_rng = None
      if not deterministic and self.dropout_rate > 0.0:
        dropout_rng = self.make_rng("dropout")
      merged_mask = AttentionMask(bias=_merged_bias(mask.bias, encoder_mask.bias),
                                  name=mask.name.replace("self-attention", "merged attention"))
      out = dot_product_attention(
          query, jnp.concatenate([key, enc_key], axis=1),
          jnp.concatenate([value, enc_value], axis=1), bias, mask=merged_mask,
          impl=self.attention_impl, cache=cache_mode is not None,
          dropout_rate=self.dropout_rate, dropout_rng=dropout_rng, deterministic=deterministic,
          dtype=self.dtype, softcap=self.softcap)
    elif cache_mode == "step":
      mask_bias = () if mask is None else (mask.bias,)
      out = cached_attention(query, key, value, mask_bias + _as_biases(bias), dtype=self.dtype,
                             softcap=self.softcap)
    else:
      dropout_rng = None
      if not deterministic and self.dropout_rate > 0.0:
        dropout_rng = self.make_rng("dropout")
      out = dot_product_attention(
          query, key, value, bias, mask=mask,
          impl=self.attention_impl, cache=cache_mode is not None,
          dropout_rate=self.dropout_rate, dropout_rng=dropout_rng, deterministic=deterministic,
          dtype=self.dtype, softcap=self.softcap)
    out = checkpoint_name(out, "attention_out")
    out_init = nn.initializers.variance_scaling(1.0, "fan_in", "normal", in_axis=(0, 1), out_axis=2)
    out_kernel = param_with_axes(self, "out", out_init, (n, h, d), ("heads", "kv", "embed"))
    y = checkpoint_name(dense(out, out_kernel.astype(self.dtype), num_contract=2), "out_proj")
    return nn.with_logical_constraint(y, ("batch", "length", "embed"))  # [B, L, D]

  def _encoder_cache(self, key, value):
    """Merged attention: writes the encoder's keys/values [Bc, S, K, H] at prefill (and
    returns them); at a step (None, None) returns the cache [Bc, K, H, S]."""
    if key is not None:
      for name, x in zip(ENCODER_CACHE_NAMES, (key, value)):
        self.put_variable("cache", name, jnp.transpose(x, (0, 2, 3, 1)).astype(self.dtype))
      return key, value
    if not self.has_variable("cache", ENCODER_CACHE_NAMES[0]):
      raise ValueError("merged-attention step without a cache: run Transformer.prefill first")
    return tuple(self.variable("cache", name).value for name in ENCODER_CACHE_NAMES)

  def _update_cache(self, key, value, cache_mode, cache_index, max_length, batch):
    """Writes new keys/values into the cache; returns the keys/values to attend over.

    Prefill returns the new keys/values as they are ([B, S, K, H], for the full-forward
    attention of the prefix); a step returns the whole cache ([B, K, H, S]).
    """
    kh, h = self.kv_heads, self.head_dim

    def cache_layout(x):  # [B, S, K, H] -> [B, K, H, S]
      return jnp.transpose(x, (0, 2, 3, 1)).astype(self.dtype)

    if self.kind == "cross":
      if cache_mode == "prefill":
        self.put_variable("cache", "cached_key", cache_layout(key))
        self.put_variable("cache", "cached_value", cache_layout(value))
        return key, value
      if not self.has_variable("cache", "cached_key"):
        raise ValueError("cross-attention step without a cache: run Transformer.prefill first")
      ck = self.variable("cache", "cached_key")
      cv = self.variable("cache", "cached_value")
      return ck.value, cv.value
    # Self-attention.
    if cache_mode == "prefill":
      if max_length is None or max_length < key.shape[1]:
        raise ValueError(f"prefill needs max_length >= prefix length {key.shape[1]}, got {max_length}")
      shape = (batch, kh, h, max_length)
      for name, x in (("cached_key", key), ("cached_value", value)):
        self.put_variable("cache", name,
                          jnp.zeros(shape, self.dtype).at[..., :x.shape[1]].set(cache_layout(x)))
      return key, value  # the prefix attends over itself, exactly as the full forward pass
    if not self.has_variable("cache", "cached_key"):
      raise ValueError("self-attention step without a cache: run Transformer.prefill first")
    ck = self.variable("cache", "cached_key")
    cv = self.variable("cache", "cached_value")
    idx = jnp.asarray(cache_index, jnp.int32)
    zero = jnp.zeros((), jnp.int32)
    start = (zero, zero, zero, idx)
    ck.value = jax.lax.dynamic_update_slice(ck.value, cache_layout(key), start)
    cv.value = jax.lax.dynamic_update_slice(cv.value, cache_layout(value), start)
    return ck.value, cv.value
