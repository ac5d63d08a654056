"""Pure attention-mask builders: padding, causal, prefix LM, fully visible, packing, cross.

Every builder returns a boolean array of shape [B, 1, L, S] (batch, a broadcast head
axis, query length L, key length S); True means "this query may attend to this key".
Builders that depend on nothing but the length return [1, 1, L, L] and broadcast.
Masks combine with ``&``. The attention layer never builds masks: the Transformer builds
them here and turns them into an additive bias with ``mask_to_bias``.

Conventions (seqio/t5x features): segment ids are 1, 2, 3... per packed example and 0 on
padding; ``decoder_causal_attention`` is 1 on the inputs (prefix) part of a prefix-LM
sequence. Causality is by index within the row, which equals causality within each
segment because packed segments are contiguous.

Not here: position biases (position.py) and the choice of mask per architecture
(transformer.py).
"""
from __future__ import annotations

import jax.numpy as jnp

NEG_INF = -1e10  # additive bias for masked logits (t5x / flaxformer value)


def make_padding_mask(query_valid, key_valid):
  """Query and key are both real tokens.

  Example: query_valid = key_valid = [[1, 1, 0]] gives, for row 0,
    [[1, 1, 0],
     [1, 1, 0],
     [0, 0, 0]]

  Args:
    query_valid: bool/int[B, L], nonzero on real tokens.
    key_valid: bool/int[B, S], nonzero on real tokens.
  Returns:
    bool[B, 1, L, S].
  """
  q = jnp.asarray(query_valid) != 0
  k = jnp.asarray(key_valid) != 0
  return q[:, None, :, None] & k[:, None, None, :]


def make_segment_mask(query_segment_ids, key_segment_ids):
  """Packing: a query attends only to keys of its own packed example (same segment id).

  Padding (segment 0) matches padding here; combine with ``make_padding_mask`` (or use
  ``make_cross_attention_mask`` / ``make_fully_visible_mask``) to drop it.

  Example: segment_ids = [[1, 1, 2, 2, 0]] gives, for row 0,
    [[1, 1, 0, 0, 0],
     [1, 1, 0, 0, 0],
     [0, 0, 1, 1, 0],
     [0, 0, 1, 1, 0],
     [0, 0, 0, 0, 1]]

  Args:
    query_segment_ids: int32[B, L].
    key_segment_ids: int32[B, S].
  Returns:
    bool[B, 1, L, S].
  """
  q = jnp.asarray(query_segment_ids)
  k = jnp.asarray(key_segment_ids)
  return q[:, None, :, None] == k[:, None, None, :]


def make_fully_visible_mask(segment_ids):
  """Encoder self-attention: every real token sees every real token of its segment.

  Example (two packed examples and one pad): segment_ids = [[1, 1, 2, 2, 2, 0]] ->
    [[1, 1, 0, 0, 0, 0],
     [1, 1, 0, 0, 0, 0],
     [0, 0, 1, 1, 1, 0],
     [0, 0, 1, 1, 1, 0],
     [0, 0, 1, 1, 1, 0],
     [0, 0, 0, 0, 0, 0]]

  Args:
    segment_ids: int32[B, L]; 0 is padding (pass ``tokens != 0`` when unpacked).
  Returns:
    bool[B, 1, L, L].
  """
  return make_padding_mask(segment_ids, segment_ids) & make_segment_mask(segment_ids, segment_ids)


def make_causal_mask(length: int):
  """Causal: query i sees keys j <= i.

  Example: length 3 ->
    [[1, 0, 0],
     [1, 1, 0],
     [1, 1, 1]]

  Args:
    length: L.
  Returns:
    bool[1, 1, L, L].
  """
  idx = jnp.arange(length)
  return (idx[None, :] <= idx[:, None])[None, None]


def make_prefix_lm_mask(decoder_causal_attention):
  """Prefix LM: causal, plus full visibility among positions where the flag is 1.

  ``decoder_causal_attention`` is 1 where the decoder INPUT token is the BOS or an inputs
  token (seqio PrefixLMFeatureConverter). Combine with ``make_fully_visible_mask`` of the
  segment ids for packing/padding (``make_decoder_mask`` does).

  Example: decoder_causal_attention = [[1, 1, 1, 0, 0]] (BOS, 2 inputs, 2 targets) ->
    [[1, 1, 1, 0, 0],
     [1, 1, 1, 0, 0],
     [1, 1, 1, 0, 0],
     [1, 1, 1, 1, 0],
     [1, 1, 1, 1, 1]]

  Args:
    decoder_causal_attention: int32[B, L], 1 on the bidirectional prefix.
  Returns:
    bool[B, 1, L, L].
  """
  dca = jnp.asarray(decoder_causal_attention) != 0
  prefix = dca[:, None, :, None] & dca[:, None, None, :]
  return make_causal_mask(dca.shape[1]) | prefix


def make_decoder_mask(segment_ids, decoder_causal_attention=None):
  """Decoder self-attention mask: causal (or prefix LM) within each packed segment.

  Example (packed prefix LM): segment_ids = [[1, 1, 1, 2, 2, 0]],
  decoder_causal_attention = [[1, 1, 0, 1, 0, 0]] ->
    [[1, 1, 0, 0, 0, 0],
     [1, 1, 0, 0, 0, 0],
     [1, 1, 1, 0, 0, 0],
     [0, 0, 0, 1, 0, 0],
     [0, 0, 0, 1, 1, 0],
     [0, 0, 0, 0, 0, 0]]
  Without decoder_causal_attention (plain causal), row 0 becomes [1, 0, 0, 0, 0, 0].

  Args:
    segment_ids: int32[B, L]; 0 is padding.
    decoder_causal_attention: optional int32[B, L] prefix flags (None = causal LM).
  Returns:
    bool[B, 1, L, L].
  """
  segment_ids = jnp.asarray(segment_ids)
  if decoder_causal_attention is None:
    order = make_causal_mask(segment_ids.shape[1])
  else:
    order = make_prefix_lm_mask(decoder_causal_attention)
  return order & make_fully_visible_mask(segment_ids)


def make_cross_attention_mask(decoder_segment_ids, encoder_segment_ids):
  """Encoder-decoder attention: decoder tokens see the encoder tokens of the same example.

  Example: decoder_segment_ids = [[1, 1, 2, 0]], encoder_segment_ids = [[1, 2, 2]] ->
    [[1, 0, 0],
     [1, 0, 0],
     [0, 1, 1],
     [0, 0, 0]]

  Args:
    decoder_segment_ids: int32[B, L]; 0 is padding.
    encoder_segment_ids: int32[B, S]; 0 is padding.
  Returns:
    bool[B, 1, L, S].
  """
  return (make_padding_mask(decoder_segment_ids, encoder_segment_ids)
          & make_segment_mask(decoder_segment_ids, encoder_segment_ids))


def window_mask(query_positions, key_positions, window: int, centred: bool = False):
  """A local layer's sliding window: query position i sees key position j iff |i - j| < W;
  ``centred`` (T5Gemma 2's encoder): W keys, iff -((W - 1) // 2) <= j - i <= W // 2.

  Combined with the stack's own mask (``&``): bidirectional in an encoder, i - j < W in a
  causal decoder. Positions restart in each packed segment, and pairs across segments are
  masked by the segment mask, so per-segment positions give the per-segment window.

  Args:
    query_positions: int[B or 1, L].
    key_positions: int[B or 1, S].
    window: W > 0.
    centred: the W-key window (bidirectional stacks only).
  Returns:
    bool[B or 1, 1, L, S].
  """
  q = jnp.asarray(query_positions)[:, None, :, None]
  k = jnp.asarray(key_positions)[:, None, None, :]
  if centred:
    return (k - q >= -((window - 1) // 2)) & (k - q <= window // 2)
  return jnp.abs(q - k) < window


def mask_to_bias(mask, dtype=jnp.float32):
  """bool[..., L, S] -> additive bias: 0 where True, -1e10 where False."""
  return jnp.where(mask, jnp.asarray(0.0, dtype), jnp.asarray(NEG_INF, dtype))


__all__ = ["NEG_INF", "make_padding_mask", "make_segment_mask", "make_fully_visible_mask",
           "make_causal_mask", "make_prefix_lm_mask", "make_decoder_mask",
           "make_cross_attention_mask", "mask_to_bias"]
