"""Decoding algorithms: greedy, sampling (temperature, top-k, top-p) and beam search.

What lives here: the model-agnostic searches over a ``tokens_to_logits(tokens int32[N],
state, step) -> (float32[N, V], state)`` callable (``greedy_search``,
``temperature_sample``, ``beam_search``; the interface and beam search's t5x and
transformers semantics are in docs/decoding.md), and the glue to the Transformer's KV
cache: ``prompt_batch`` (token lists -> padded model features, framed by
``lm.data.converters.Framing``, which training shares),
``model_decoder`` (prefill once, then one cached step per token) and ``decode`` /
``make_decode_fn`` (prefill + search, jitted, sharded over a mesh when given one).
What does not: tokenization, files and flags (``lm.decode``), restoring checkpoints
(``lm.restore``).

Conventions (T5): EOS is id 1, padding / BOS is id 0 (T5Gemma's framing differs:
``Framing``). Decoded tokens are int32[B, M], M = ``max_decode_length``: the generated
tokens up to and including EOS, then 0s; a row that reaches M tokens without EOS is cut.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lm import partitioning
from lm.data.converters import T5_FRAMING, Framing
from lm.keypaths import in_scanned_stack
from lm.model.attention import ENCODER_CACHE_NAMES
from lm.model.transformer import Transformer, TransformerConfig

EOS_ID = 1
PAD_ID = 0
NEG_INF = -1.0e7  # t5x's "minus infinity" for dead beams and empty finished slots
METHODS = ("greedy", "sample", "beam")
LENGTH_PENALTIES = ("t5", "hf")

TokensToLogits = Callable[[jax.Array, Any, jax.Array], tuple[jax.Array, Any]]


def gather_rows(state: Any, indices: jax.Array) -> Any:
  """Reorders a state pytree's rows: every leaf with ndim >= 1 is indexed along axis 0.

  Args:
    state: pytree of arrays [N, ...] (0-d leaves are kept as they are).
    indices: int32[N'] rows to take.
  Returns:
    the pytree with leaves [N', ...].
  """
  return jax.tree.map(lambda x: x[indices] if jnp.ndim(x) >= 1 else x, state)


# ---------------------------------------------------------------------------------------
# Greedy and sampling.

@dataclasses.dataclass(frozen=True)
class SamplingConfig:
  """How ``temperature_sample`` picks each token.

  Attributes:
    temperature: divides the logits; 0 means greedy (argmax).
    top_k: keep only the k most likely tokens (0: all).
    top_p: keep the smallest set of most likely tokens whose probability reaches top_p
      (nucleus sampling; 1.0: all). Applied after temperature and top-k.
  """
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0

  def __post_init__(self):
    if not 0.0 <= self.temperature < float("inf"):
      raise ValueError(f"temperature must be finite and >= 0 (0 = greedy), got {self.temperature}")
    if not (isinstance(self.top_k, int) and self.top_k >= 0):
      raise ValueError(f"top_k must be an int >= 0 (0 = no top-k), got {self.top_k!r}")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"top_p must be in (0, 1] (1 = no nucleus filter), got {self.top_p}")


def filter_logits(logits: jax.Array, config: SamplingConfig) -> jax.Array:
  """Temperature, top-k and top-p applied to logits; dropped tokens get -inf.

  Args:
    logits: float32[N, V].
    config: a SamplingConfig with temperature > 0.
  Returns:
    float32[N, V] logits whose softmax is the sampling distribution.
  """
  logits = logits.astype(jnp.float32) / config.temperature
  if 0 < config.top_k < logits.shape[-1]:
    kth = jax.lax.top_k(logits, config.top_k)[0][:, -1:]
    logits = jnp.where(logits < kth, -jnp.inf, logits)
  if config.top_p < 1.0:
    order = jnp.argsort(-logits, axis=-1)
    sorted_logits = jnp.take_along_axis(logits, order, axis=-1)
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    # Keep a token if the mass of the tokens strictly more likely is below top_p: the most
    # likely token is always kept, the set stops at the first token that reaches top_p.
    keep_sorted = (jnp.cumsum(probs, axis=-1) - probs) < config.top_p
    keep = jnp.zeros_like(keep_sorted).at[jnp.arange(logits.shape[0])[:, None], order].set(keep_sorted)
    logits = jnp.where(keep, logits, -jnp.inf)
  return logits


def log_probs(logits: jax.Array) -> jax.Array:
  """float32[..., V] log-probabilities ``logits - logsumexp(logits)``.

  The same values as ``jax.nn.log_softmax``, written so that XLA:CPU does not fuse the
  logits matmul into the max-and-subtract of log_softmax: that fused kernel ran the
  [128, 512] x [512, 32128] product of a beam-search step at about 2.5x the time of the
  matmul alone (benchmarks/bench_decode.py, docs/decoding.md).
  """
  logits = logits.astype(jnp.float32)
  return logits - jax.nn.logsumexp(logits, axis=-1, keepdims=True)


def first_argmax(logits: jax.Array) -> jax.Array:
  """int32[...] index of the first maximum along the last axis (``jnp.argmax`` without NaN).

  Two plain reductions (max, then the smallest index holding it) instead of argmax's
  variadic (value, index) reduction, which XLA:CPU ran about 6x slower on [32, 32128]
  logits. A row of NaNs gives V - 1.
  """
  v = logits.shape[-1]
  top = jnp.max(logits, axis=-1, keepdims=True)
  index = jnp.min(jnp.where(logits == top, jnp.arange(v, dtype=jnp.int32), v), axis=-1)
  return jnp.minimum(index, v - 1)


def _choose_greedy(logits, step, row_keys):
  del step, row_keys
  return first_argmax(logits)


def _choose_sample(config, logits, step, row_keys):
  filtered = filter_logits(logits, config)
  keys = jax.vmap(lambda k: jax.random.fold_in(k, step))(row_keys)
  return jax.vmap(jax.random.categorical)(keys, filtered).astype(jnp.int32)


def is_eos(tokens: jax.Array, eos_id: int | Sequence[int]) -> jax.Array:
  """bool[...]: where `tokens` is the end-of-sequence id, or one of several (T5Gemma's
  released configs stop at 1 and at 107, <end_of_turn>)."""
  ids = (eos_id,) if isinstance(eos_id, int) else tuple(eos_id)
  return functools.reduce(jnp.logical_or, [tokens == i for i in ids])


def _sampling_loop(first_logits, state, tokens_to_logits, choose, *, max_decode_length: int,
                   eos_id: int | Sequence[int], row_keys):
  """Shared loop of greedy / sampling; returns (int32[B, M] tokens, float32[B] log p)."""
  b = first_logits.shape[0]
  m = max_decode_length

  def pick(logits, step, tokens, done, logprob):
    tok = choose(logits, step, row_keys)
    tok = jnp.where(done, PAD_ID, tok)
    logits = logits.astype(jnp.float32)
    lp = (jnp.take_along_axis(logits, tok[:, None], axis=-1)[:, 0]
          - jax.nn.logsumexp(logits, axis=-1))
    logprob = logprob + jnp.where(done, 0.0, lp)
    tokens = jax.lax.dynamic_update_slice(tokens, tok[:, None], (jnp.zeros((), jnp.int32), step))
    return tokens, done | is_eos(tok, eos_id), logprob

  step0 = jnp.zeros((), jnp.int32)
  tokens, done, logprob = pick(first_logits, step0, jnp.zeros((b, m), jnp.int32),
                               jnp.zeros((b,), bool), jnp.zeros((b,), jnp.float32))

  def cond(carry):
    step, _, done, _, _ = carry
    return (step < m) & ~jnp.all(done)

  def body(carry):
    step, tokens, done, logprob, state = carry
    prev = jax.lax.dynamic_slice(tokens, (0, step - 1), (b, 1))[:, 0]
    logits, state = tokens_to_logits(prev, state, step - 1)
    tokens, done, logprob = pick(logits, step, tokens, done, logprob)
    return step + 1, tokens, done, logprob, state

  _, tokens, _, logprob, _ = jax.lax.while_loop(
      cond, body, (step0 + 1, tokens, done, logprob, state))
  return tokens, logprob


def greedy_search(first_logits: jax.Array, state: Any, tokens_to_logits: TokensToLogits, *,
                  max_decode_length: int, eos_id: int | Sequence[int] = EOS_ID
                  ) -> tuple[jax.Array, jax.Array]:
  """Argmax decoding, stopping per row at EOS (later slots are 0).

  Args:
    first_logits: float32[B, V] logits of the first generated token.
    state: pytree passed through ``tokens_to_logits`` (module docstring).
    tokens_to_logits: (int32[B], state, int32[]) -> (float32[B, V], state).
    max_decode_length: M, the most tokens generated per row (EOS included).
    eos_id: the end-of-sequence id, or ids (``is_eos``).
  Returns:
    (int32[B, M] tokens, float32[B] sum of the tokens' log-probabilities).
  """
  return _sampling_loop(first_logits, state, tokens_to_logits, _choose_greedy,
                        max_decode_length=max_decode_length, eos_id=eos_id, row_keys=None)


def temperature_sample(first_logits: jax.Array, state: Any, tokens_to_logits: TokensToLogits, *,
                       rng: jax.Array, max_decode_length: int, config: SamplingConfig = SamplingConfig(),
                       row_ids: jax.Array | None = None,
                       eos_id: int | Sequence[int] = EOS_ID) -> tuple[jax.Array, jax.Array]:
  """Ancestral sampling with temperature / top-k / top-p, stopping per row at EOS.

  Each row draws from its own key ``fold_in(fold_in(rng, row_id), step)``, so an example
  gives the same sample whatever batch it is decoded in (pass its global index as row id).

  Args:
    first_logits: float32[B, V]; state, tokens_to_logits: as ``greedy_search``.
    rng: a PRNG key.
    max_decode_length: M.
    config: temperature (0 = greedy), top_k, top_p.
    row_ids: int32[B] per-row seeds (default arange(B)).
    eos_id: the end-of-sequence id, or ids (``is_eos``).
  Returns:
    (int32[B, M] tokens, float32[B] sum of the tokens' log-probabilities under the model,
    i.e. before temperature / top-k / top-p).
  """
  b = first_logits.shape[0]
  if config.temperature == 0.0:
    return greedy_search(first_logits, state, tokens_to_logits,
                         max_decode_length=max_decode_length, eos_id=eos_id)
  row_ids = jnp.arange(b, dtype=jnp.int32) if row_ids is None else jnp.asarray(row_ids, jnp.int32)
  row_keys = jax.vmap(lambda i: jax.random.fold_in(rng, i))(row_ids)
  return _sampling_loop(first_logits, state, tokens_to_logits,
                        functools.partial(_choose_sample, config),
                        max_decode_length=max_decode_length, eos_id=eos_id, row_keys=row_keys)


# ---------------------------------------------------------------------------------------
# Beam search.

def brevity_penalty(alpha: float, length) -> jax.Array:
  """T5's length normalisation ((5 + length) / 6) ** alpha (Wu et al. 2016; t5x)."""
  return jnp.power((5.0 + jnp.asarray(length, jnp.float32)) / 6.0, alpha)


def hf_length_penalty(alpha: float, length) -> jax.Array:
  """Hugging Face's length normalisation length ** alpha (``length_penalty``)."""
  return jnp.power(jnp.asarray(length, jnp.float32), alpha)


def _take_beams(x, indices):
  """x [B, K, ...] gathered along axis 1 with int32[B, K'] -> [B, K', ...]."""
  idx = indices.reshape(indices.shape + (1,) * (x.ndim - 2))
  return jnp.take_along_axis(x, idx, axis=1)


def beam_search(first_logits: jax.Array, state: Any, tokens_to_logits: TokensToLogits, *,
                beam_size: int, max_decode_length: int, alpha: float = 0.6,
                length_penalty: str = "t5", eos_id: int | Sequence[int] = EOS_ID,
                gather_fn: Callable[[Any, jax.Array], Any] = gather_rows
                ) -> tuple[jax.Array, jax.Array]:
  """Beam search with T5 (t5x) or Hugging Face semantics (docs/decoding.md "Beam search").

  Args:
    first_logits: float32[B, V] logits of the first generated token.
    state: pytree for ``tokens_to_logits`` with B rows; expanded here to B * beam_size.
    tokens_to_logits: (int32[B * K], state, int32[]) -> (float32[B * K, V], state).
    beam_size: K.
    max_decode_length: M.
    alpha: length-penalty exponent (>= 0 for "t5").
    length_penalty: "t5" (brevity penalty, t5x rules) or "hf" (length ** alpha,
      early_stopping=True).
    eos_id: the end-of-sequence id, or ids (``is_eos``).
    gather_fn: (state, int32[N']) -> state with those rows.
  Returns:
    (int32[B, K, M] sequences, float32[B, K] scores), best first; sequences are 0 after
    EOS.
  """
  if length_penalty not in LENGTH_PENALTIES:
    raise ValueError(f"unknown length_penalty {length_penalty!r}; expected one of {LENGTH_PENALTIES}")
  if not (isinstance(beam_size, int) and beam_size >= 1):
    raise ValueError(f"beam_size must be a positive int, got {beam_size!r}")
  if length_penalty == "t5" and alpha < 0:
    raise ValueError(f"T5 beam search needs alpha >= 0 (its stopping rule assumes it), got {alpha}")
  hf = length_penalty == "hf"
  penalty = hf_length_penalty if hf else brevity_penalty
  b, v = first_logits.shape
  k, m = beam_size, max_decode_length
  state = gather_fn(state, jnp.repeat(jnp.arange(b), k))
  batch_offset = (jnp.arange(b) * k)[:, None]

  def step_fn(i, token_lp, carry):
    """Extends the live beams by token i given float32[B, K, V] log-probabilities."""
    live_seqs, live_lp, fin_seqs, fin_scores, fin_flags, state = carry
    cand = (live_lp[:, :, None] + token_lp).reshape(b, k * v)
    top_lp, top_idx = jax.lax.top_k(cand, 2 * k)  # [B, 2K], best first
    parent = top_idx // v
    tok = (top_idx % v).astype(jnp.int32)
    seqs = _take_beams(live_seqs, parent)
    seqs = jax.lax.dynamic_update_slice(seqs, tok[:, :, None], (0, 0, i))
    valid = top_lp > NEG_INF / 2  # not an extension of an empty initial beam
    ends = is_eos(tok, eos_id) & valid

    # Live: the best K candidates that did not just end.
    live_score = jnp.where(ends, NEG_INF, top_lp)
    new_live_lp, keep = jax.lax.top_k(live_score, k)
    new_live_seqs = _take_beams(seqs, keep)
    parents = jnp.take_along_axis(parent, keep, axis=1)
    state = gather_fn(state, (parents + batch_offset).reshape(-1))

    # Finished: candidates that may finish, scored with the length penalty.
    if hf:
      example_full = jnp.all(fin_flags, axis=1, keepdims=True)
      at_max = i == m - 1
      finishing = (ends | (at_max & valid)) & (jnp.arange(2 * k) < k)[None] & ~example_full
    else:
      finishing = ends
    new_scores = jnp.where(finishing, top_lp / penalty(alpha, i + 1), NEG_INF)
    all_scores = jnp.concatenate([fin_scores, new_scores], axis=1)
    all_seqs = jnp.concatenate([fin_seqs, seqs], axis=1)
    all_flags = jnp.concatenate([fin_flags, finishing], axis=1)
    fin_scores, best = jax.lax.top_k(all_scores, k)
    fin_seqs = _take_beams(all_seqs, best)
    fin_flags = jnp.take_along_axis(all_flags, best, axis=1)
    return new_live_seqs, new_live_lp, fin_seqs, fin_scores, fin_flags, state

  def finished_search(live_lp, fin_scores, fin_flags):
    """bool[]: no example's finished set can change any more."""
    if hf:
      return jnp.all(fin_flags)
    best_live = jnp.max(live_lp, axis=1) / brevity_penalty(alpha, m)
    worst_finished = jnp.min(fin_scores, axis=1)
    return jnp.all(jnp.all(fin_flags, axis=1) & (worst_finished > best_live))

  live_lp = jnp.full((b, k), NEG_INF, jnp.float32).at[:, 0].set(0.0)
  carry = (jnp.zeros((b, k, m), jnp.int32), live_lp, jnp.zeros((b, k, m), jnp.int32),
           jnp.full((b, k), NEG_INF, jnp.float32), jnp.zeros((b, k), bool), state)
  first = log_probs(first_logits)
  carry = step_fn(0, jnp.broadcast_to(first[:, None], (b, k, v)), carry)

  def cond(loop):
    i, (_, live_lp, _, fin_scores, fin_flags, _) = loop
    return (i < m) & ~finished_search(live_lp, fin_scores, fin_flags)

  def body(loop):
    i, carry = loop
    live_seqs, state = carry[0], carry[5]
    prev = jax.lax.dynamic_slice(live_seqs, (0, 0, i - 1), (b, k, 1)).reshape(b * k)
    logits, state = tokens_to_logits(prev, state, i - 1)
    return i + 1, step_fn(i, log_probs(logits).reshape(b, k, v), carry[:5] + (state,))

  _, (live_seqs, live_lp, fin_seqs, fin_scores, fin_flags, _) = jax.lax.while_loop(
      cond, body, (jnp.ones((), jnp.int32), carry))
  # Live beams come out of top_k best first too, so both sets are sorted.
  any_finished = jnp.any(fin_flags, axis=1)
  seqs = jnp.where(any_finished[:, None, None], fin_seqs, live_seqs)
  scores = jnp.where(any_finished[:, None], fin_scores, live_lp)
  return seqs, scores


# ---------------------------------------------------------------------------------------
# The model: prompts, cache, one jitted decode function.



def prompt_batch(prompts: Sequence[Sequence[int]], config: TransformerConfig, *,
                 input_length: int | None = None, eos_id: int = EOS_ID,
                 batch_size: int | None = None,
                 framing: Framing = T5_FRAMING) -> dict[str, np.ndarray]:
  """Token lists -> the padded features the model reads, laid out as in training.

  Each prompt is ``framing.frame``d; with T5's framing: encoder-decoder
  ``encoder_input_tokens`` = prompt + EOS, right-padded with 0, and the decoder's first
  input (``framing.decoder_start``) as ``decoder_input_tokens``; decoder-only the decoder
  sequence BOS(0) + prompt + EOS (prefix LM: fully visible), right-padded, with
  ``decoder_segment_ids`` 1 on it and 0 on padding, generation continuing after it (an
  empty prompt is just BOS: full-LM continuation).

  Args:
    prompts: B lists of token ids (no BOS or EOS).
    config: the model config (decides the layout).
    input_length: pad to this length (default: the longest row); a longer row raises.
    eos_id: EOS id appended to each prompt.
    batch_size: append rows of an empty prompt up to this many (for fixed shapes).
    framing: the checkpoint's framing (T5's by default; ``lm.restore.Restored.framing``).
  Returns:
    encoder-decoder: {"encoder_input_tokens": int32[B', L], "decoder_input_tokens" [B', 1]};
    decoder-only: {"decoder_input_tokens", "decoder_segment_ids",
    "decoder_causal_attention" (prefix LM only)}: int32[B', L]; B' = batch_size or B.
  """
  decoder_only = not config.is_encoder_decoder
  rows = [framing.frame(p, decoder_only, eos_id) for p in prompts]
  if batch_size is not None:
    if batch_size < len(rows):
      raise ValueError(f"batch_size {batch_size} < number of prompts {len(rows)}")
    rows += [framing.frame([], decoder_only, eos_id)] * (batch_size - len(rows))
  longest = max((len(r) for r in rows), default=1)
  length = longest if input_length is None else input_length
  if longest > length:
    raise ValueError(f"a prompt needs {longest} tokens (with BOS/EOS) but input_length is {length}")
  tokens = np.zeros((len(rows), length), np.int32)
  segments = np.zeros((len(rows), length), np.int32)
  for i, r in enumerate(rows):
    tokens[i, :len(r)] = r
    segments[i, :len(r)] = 1
  if not decoder_only:
    return {"encoder_input_tokens": tokens,
            "decoder_input_tokens": np.full((len(rows), 1), framing.decoder_start, np.int32)}
  batch = {"decoder_input_tokens": tokens, "decoder_segment_ids": segments}
  if config.mask_type == "prefix_lm":
    batch["decoder_causal_attention"] = segments.copy()
  return batch


def _shared_by_beams(path) -> bool:
  """True for the cache leaves that depend on the encoder input alone (cross-attention keys
  and values, a merged attention's encoder cache, ``encoder_valid``): the same for every
  beam of an example, so beam search keeps one copy per example (lm.model.attention)."""
  names = {getattr(k, "key", getattr(k, "name", None)) for k in path}
  return bool(names & {"encoder_decoder_attention", "encoder_valid", *ENCODER_CACHE_NAMES})


def _cache_gather_fn(config: TransformerConfig):
  """Row gather for {"cache": flax cache, "lengths": int32[N]} in beam search.

  Leaves with one row per beam are indexed (scanned layer caches have the batch on axis 1;
  the shared cache_index is 0-d). Leaves shared by an example's beams (``_shared_by_beams``)
  keep their Bc = N / beam_size rows untouched: beam search only ever maps a row to a row of
  the same example (``beam_search`` expands with ``repeat(arange(B), K)`` and reorders
  within each example), which they already hold.
  """
  def gather(state, indices):
    def leaf(path, x):
      if jnp.ndim(x) == 0 or _shared_by_beams(path):
        return x
      scanned = config.scan_layers and in_scanned_stack(path)
      return jnp.take(x, indices, axis=1 if scanned else 0)
    return jax.tree_util.tree_map_with_path(leaf, state)
  return gather


def model_decoder(model: Transformer, params: Any, batch: Mapping[str, jax.Array],
                  max_decode_length: int):
  """Prefills the KV cache from the prompts and returns the search's callables.

  Encoder-decoder: the encoder runs once, its keys/values are cached for cross-attention,
  the decoder starts from the batch's ``decoder_input_tokens`` [B, 1] (the framing's start;
  0 when absent). Decoder-only: the whole right-padded prompt is
  filled in one pass; each row's generated tokens continue at its own positions (its
  prompt length + step); padding slots are never attended (a row decodes as if alone).

  Args:
    model: the Transformer.
    params: its params (plain or boxed).
    batch: from ``prompt_batch``.
    max_decode_length: M.
  Returns:
    (first_logits float32[B, V], state, tokens_to_logits, gather_fn), see the module
    docstring.
  """
  cfg = model.config
  if cfg.is_encoder_decoder:
    enc = jnp.asarray(batch["encoder_input_tokens"])
    b = enc.shape[0]
    start = jnp.asarray(batch.get("decoder_input_tokens", np.zeros((b, 1))), jnp.int32)
    if start.shape != (b, 1):  # the decoder's first input, not a teacher-forced sequence
      raise ValueError(f"decoder_input_tokens must be [B, 1] = [{b}, 1], got {start.shape}")
    pre = {"encoder_input_tokens": enc, "decoder_input_tokens": start}
    lengths = jnp.ones((b,), jnp.int32)
    cache_length = max_decode_length
  else:
    tokens = jnp.asarray(batch["decoder_input_tokens"])
    b, p = tokens.shape
    pre = {k: jnp.asarray(batch[k]) for k in ("decoder_input_tokens", "decoder_segment_ids",
                                              "decoder_causal_attention") if k in batch}
    lengths = jnp.sum(pre["decoder_segment_ids"] != 0, axis=1).astype(jnp.int32)
    cache_length = p + max_decode_length
  variables = {"params": params}
  logits, mutated = model.apply(variables, pre, max_decode_length=cache_length,
                                method=Transformer.prefill, mutable=["cache"])
  first_logits = jnp.take_along_axis(logits, (lengths - 1)[:, None, None], axis=1)[:, 0]

  def tokens_to_logits(tokens, state, step):
    positions = (state["lengths"] + step)[:, None]
    logits, mutated = model.apply({"params": params, "cache": state["cache"]}, tokens[:, None],
                                  decoder_positions=positions, method=Transformer.decode_step,
                                  mutable=["cache"])
    return logits[:, 0], {"cache": mutated["cache"], "lengths": state["lengths"]}

  state = {"cache": mutated["cache"], "lengths": lengths}
  return first_logits, state, tokens_to_logits, _cache_gather_fn(cfg)


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
  """What to decode.

  Attributes:
    method: "greedy", "sample" or "beam".
    max_decode_length: M, the most generated tokens (EOS included).
    sampling: temperature / top_k / top_p for "sample".
    beam_size, alpha, length_penalty: for "beam" ("t5" or "hf").
    eos_ids: the ids that end a sequence (lm's and T5's: EOS 1; a checkpoint may list more:
      ``lm.restore.Restored.eos_ids``).
  """
  method: str = "greedy"
  max_decode_length: int = 64
  sampling: SamplingConfig = SamplingConfig()
  beam_size: int = 4
  alpha: float = 0.6
  length_penalty: str = "t5"
  eos_ids: tuple[int, ...] = (EOS_ID,)

  def __post_init__(self):
    object.__setattr__(self, "eos_ids", tuple(int(i) for i in self.eos_ids))
    if not self.eos_ids or min(self.eos_ids) < 0:
      raise ValueError(f"eos_ids must be one or more ids >= 0, got {self.eos_ids}")
    if self.method not in METHODS:
      raise ValueError(f"unknown decoding method {self.method!r}; expected one of {METHODS}")
    if not (isinstance(self.max_decode_length, int) and self.max_decode_length >= 1):
      raise ValueError(f"max_decode_length must be a positive int, got {self.max_decode_length!r}")
    if self.length_penalty not in LENGTH_PENALTIES:
      raise ValueError(f"unknown length_penalty {self.length_penalty!r}; expected one of {LENGTH_PENALTIES}")
    if not (isinstance(self.beam_size, int) and self.beam_size >= 1):
      raise ValueError(f"beam_size must be a positive int, got {self.beam_size!r}")
    if not abs(self.alpha) < float("inf") or (
        self.method == "beam" and self.length_penalty == "t5" and self.alpha < 0):
      raise ValueError(f"alpha must be finite (and >= 0 for T5 beam search), got {self.alpha}")


def decode(model: Transformer, params: Any, batch: Mapping[str, jax.Array], config: DecodeConfig,
           rng: jax.Array | None = None, row_ids: jax.Array | None = None
           ) -> tuple[jax.Array, jax.Array]:
  """Decodes a batch of prompts (pure; wrap in jax.jit, or use ``make_decode_fn``).

  Args:
    model: the Transformer.
    params: its params.
    batch: from ``prompt_batch``.
    config: the DecodeConfig.
    rng: PRNG key (sampling only).
    row_ids: int32[B] per-row sampling seeds (global example indices).
  Returns:
    (int32[B, M] tokens, float32[B] scores): the sum of log-probabilities for greedy and
    sampling, the best beam's (length-penalised) score for beam search.
  """
  params = nn.meta.unbox(params)
  first, state, t2l, gather = model_decoder(model, params, batch, config.max_decode_length)
  m = config.max_decode_length
  if config.method == "greedy":
    return greedy_search(first, state, t2l, max_decode_length=m, eos_id=config.eos_ids)
  if config.method == "sample":
    if rng is None:
      raise ValueError("sampling needs an rng key")
    return temperature_sample(first, state, t2l, rng=rng, max_decode_length=m,
                              config=config.sampling, row_ids=row_ids, eos_id=config.eos_ids)
  seqs, scores = beam_search(first, state, t2l, beam_size=config.beam_size, max_decode_length=m,
                             alpha=config.alpha, length_penalty=config.length_penalty,
                             eos_id=config.eos_ids, gather_fn=gather)
  return seqs[:, 0], scores[:, 0]


def make_decode_fn(model: Transformer, config: DecodeConfig, mesh=None,
                   rules: Sequence[tuple[str, Any]] = partitioning.DEFAULT_LOGICAL_AXIS_RULES):
  """A jitted ``fn(params, batch, rng, row_ids) -> (int32[B, M], float32[B])`` (``decode``'s).

  With a mesh, the batch rows are sharded over its data axes (B must divide evenly; every
  process passes the whole batch, also when the mesh spans processes) and the model's
  logical-axis annotations apply (``rules``); params keep the shardings they arrive
  with (``lm.restore`` places them on the mesh).
  """
  def fn(params, batch, rng, row_ids):
    return decode(model, params, batch, config, rng, row_ids)

  jitted = jax.jit(fn)
  if mesh is None:
    return jitted
  sharding = partitioning.batch_sharding(mesh)

  def place(x):
    # Every process holds the whole batch; each places the rows of its own devices, so this
    # also works when the mesh spans several processes (device_put would need them all).
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

  def sharded(params, batch, rng, row_ids):
    batch = {k: place(v) for k, v in batch.items()}
    row_ids = place(np.asarray(row_ids, np.int32))
    with partitioning.axis_rules(mesh, rules):
      return jitted(params, batch, rng, row_ids)
  return sharded


__all__ = ["EOS_ID", "PAD_ID", "METHODS", "LENGTH_PENALTIES", "SamplingConfig", "DecodeConfig",
           "Framing", "T5_FRAMING",
           "filter_logits", "log_probs", "first_argmax", "greedy_search", "temperature_sample",
           "is_eos", "beam_search", "brevity_penalty", "hf_length_penalty", "gather_rows",
           "prompt_batch",
           "model_decoder", "decode", "make_decode_fn"]
