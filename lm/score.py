"""Pure scoring: the log-likelihood of each example's targets given its inputs.

    scores = jax.jit(functools.partial(score, model=model))(params, batch)
    scores["log_likelihood"]        # float32[B]: sum of log p(target token) over scored tokens

Works for the three layouts of lm/data/converters.py (t5x feature names):
  encoder_decoder  inputs in the encoder; scored: decoder_target_tokens
  prefix_lm        one decoder row "inputs EOS targets EOS", the prefix fully visible
                   (decoder_causal_attention); scored: the targets part
  causal           the same row, all causal
A token counts where `decoder_loss_weights` > 0 (if the batch has no weights: where the
target token is not padding); the weights only select tokens, they do not scale them.

Packed rows (several examples per row, `decoder_segment_ids` 1, 2, ...): the row totals
would mix examples, so `score` gives NaN for every row-level value of a row holding more
than one segment, unless per-segment scores are asked for with `max_segments=S`, which
adds `segment_*` values of shape [B, S] (segment s + 1 in column s). `check_unpacked`
refuses a packed NumPy batch on the host with a clear error before anything is compiled.

Pure and jittable; no I/O. Rank classification (choosing among candidate answers) takes
argmax over candidates of `log_likelihood` (or `mean_log_likelihood`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def token_log_likelihoods(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """log softmax(logits)[target] per position.

  Args:
    logits: float[B, L, V] (promoted to float32).
    targets: int32[B, L].

  Returns:
    float32[B, L].
  """
  logits = logits.astype(jnp.float32)
  log_z = jax.nn.logsumexp(logits, axis=-1)
  target_logit = jnp.take_along_axis(logits, targets[..., None].astype(jnp.int32), axis=-1)
  return target_logit[..., 0] - log_z


def _scored_mask(batch: Mapping[str, Any]) -> jax.Array:
  targets = jnp.asarray(batch["decoder_target_tokens"])
  weights = batch.get("decoder_loss_weights")
  if weights is None:
    return (targets > 0).astype(jnp.float32)
  return (jnp.asarray(weights) > 0).astype(jnp.float32)


def score_logits(logits: jax.Array, batch: Mapping[str, Any], *,
                 max_segments: int | None = None) -> dict[str, jax.Array]:
  """`score` from already computed logits (see `score`)."""
  targets = jnp.asarray(batch["decoder_target_tokens"])
  mask = _scored_mask(batch)
  token_ll = token_log_likelihoods(logits, targets) * mask
  correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32) * mask
  total, count = jnp.sum(token_ll, axis=-1), jnp.sum(mask, axis=-1)
  out = {"log_likelihood": total,
         "mean_log_likelihood": total / jnp.maximum(count, 1.0),
         "num_tokens": count,
         "num_correct": jnp.sum(correct, axis=-1)}
  seg = batch.get("decoder_segment_ids")
  if seg is not None:
    seg = jnp.asarray(seg)
    packed = jnp.max(seg, axis=-1) > 1  # bool[B]: the row holds several examples
    out = {k: jnp.where(packed, jnp.nan, v) for k, v in out.items()}
    if max_segments:
      one_hot = (seg[..., None] == jnp.arange(1, max_segments + 1)).astype(jnp.float32)
      s_total = jnp.einsum("bl,bls->bs", token_ll, one_hot)
      s_count = jnp.einsum("bl,bls->bs", mask, one_hot)
      out["segment_log_likelihood"] = s_total
      out["segment_mean_log_likelihood"] = s_total / jnp.maximum(s_count, 1.0)
      out["segment_num_tokens"] = s_count
      out["segment_num_correct"] = jnp.einsum("bl,bls->bs", correct, one_hot)
  elif max_segments:
    raise ValueError("max_segments needs batch['decoder_segment_ids'] (a packed batch).")
  return out


def score(params: Any, batch: Mapping[str, Any], *, model: nn.Module,
          max_segments: int | None = None) -> dict[str, jax.Array]:
  """Log-likelihood of each example's targets given its inputs (one forward pass).

  Args:
    params: the model's (unboxed) params.
    batch: features of one layout (module docstring): decoder_target_tokens int32[B, L],
      decoder_input_tokens int32[B, L], decoder_loss_weights float32[B, L] (optional),
      encoder_input_tokens int32[B, Le] (encoder-decoder), decoder_causal_attention
      int32[B, L] (prefix LM); optional segment ids / positions.
    model: the Transformer.
    max_segments: static; for packed batches, also per-segment values [B, S].

  Returns:
    dict of float32[B]: log_likelihood (natural log, summed over scored tokens),
    mean_log_likelihood (per scored token; 0 for a row with none), num_tokens (scored
    tokens), num_correct (scored tokens whose argmax prediction is the target). NaN in
    rows holding several packed examples. With max_segments, also segment_* [B, S].
  """
  logits = model.apply({"params": params}, batch)
  return score_logits(logits, batch, max_segments=max_segments)


def check_unpacked(batch: Mapping[str, np.ndarray]) -> None:
  """Raises ValueError if a host batch packs several examples into one row."""
  for key in ("decoder_segment_ids", "encoder_segment_ids"):
    if key in batch and np.max(np.asarray(batch[key]), initial=0) > 1:
      raise ValueError(f"batch is packed ({key} > 1): per-example scores need one example "
                       "per row (DataSpec.pack=False), or score(..., max_segments=S).")


def bits_per_byte(neg_log_likelihood_nats: float, num_bytes: int) -> float:
  """Total negative log-likelihood (nats) of a text / its UTF-8 byte count, in bits."""
  if num_bytes <= 0:
    return float("nan")
  return float(neg_log_likelihood_nats) / math.log(2.0) / float(num_bytes)
