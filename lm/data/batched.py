"""Vectorised objectives: one NumPy pass over a BLOCK of examples instead of one call each.

What lives here: batched versions of the objectives of `lm.data.objectives` (span corruption,
i.i.d. replace-spans, drop-tokens, BERT, MASS, prefix LM, full LM), a batched
`converters.convert` (`convert_batch`), the counter-based random numbers they draw from
(`example_keys`, `random_words`), and `BlockObjective`, the adapter a data pipeline calls on a
block of raw chunks. What does not: the per-example reference definitions (objectives.py,
which this module follows), tokenization, packing and the grain pipeline.

Definition (not a bit-for-bit replay of the per-example functions). The per-example
functions draw from one `np.random.Generator` per example (`rng.permutation`,
`rng.random`), which cannot be vectorised across examples. Here each example's randomness
is a counter-based stream: example b gets a 64-bit key from (seed words..., chunk index)
(`example_keys`), and its j-th random word is splitmix64(key + (j + 1) * golden) (Steele,
Lea & Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014). So:

  * an example's output depends only on its tokens, its key and the objective's
    parameters, never on which block it was processed in, the block size or the other
    examples of the block (tests check this); a pipeline can restart at any example;
  * the distributions are the reference's: span corruption draws its noise/non-noise span
    lengths as uniformly random compositions (Floyd's algorithm for a uniform (S-1)-subset
    of the N-1 gaps, R. W. Floyd & J. Bentley, "Programming pearls: a sample of
    brilliance", CACM 1987), exactly T5's `random_spans_noise_mask`; the i.i.d. masks are
    Bernoulli(noise_density) per token. Uniform integers in [0, n) are
    floor(u * n) with u a 53-bit uniform, so the bias is below n / 2**53 (the i.i.d. masks'
    Bernoulli draws: see below);
  * the exact invariants are the reference's (tests check them on every example): token
    and sentinel counts, sentinel ids V-1-k in order, a span-corruption mask that starts
    with non-noise and ends with noise, inputs/targets that rebuild the original tokens,
    the same ValueErrors on too many spans / too few non-noise tokens, and the same
    deterministic outputs wherever the reference has no randomness (lengths 0-3, one span,
    density 0, all gaps cut);
  * i.i.d. masks compare 32-bit halves of the words with round(p * 2**32) (`bernoulli`), so
    a token is noise with probability within 2**-33 of noise_density.

Span corruption without a mask. With span lengths m_k (non-noise) and n_k (noise),
k = 0..S-1, cumulative A_k = m_0 + ... + m_k and C_k = n_0 + ... + n_k, the inputs are
[non-noise span 0, sentinel 0, non-noise span 1, sentinel 1, ...] (L - N + S tokens:
sentinel k at A_k + k) and the targets [sentinel 0, noise span 0, sentinel 1, ...]
(N + S tokens: sentinel k at C_{k-1} + k). Both have the same length on every example of a
given raw length, so a block of equal-length chunks gives dense [B, Li] / [B, Lt] arrays,
built by one gather each (source index = position + a piecewise-constant offset, a cumsum of
jumps at span starts) and no Python loop over examples or tokens. The only loop is Floyd's,
over the S - 1 cuts (27 at T5's 512/0.15/3), each step one vector operation over the block.

Examples of different lengths (e.g. the last chunk of a finite dataset) are processed in
groups of equal length; outputs come back in input order.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import grain
import numpy as np

from lm.data import converters, objectives
from lm.data import noise as noise_lib

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_TWO_TO_MINUS_53 = 2.0 ** -53

# Objectives with a batched definition here (the mixture is not one of them yet).
BATCHED_OBJECTIVES = ("span_corruption", "iid_replace_spans", "drop_tokens", "bert", "mass",
                      "prefix_lm", "full_lm")

Batch = dict  # {"inputs": int32[B, Li'], "targets": int32[B, Lt']}


# ----------------------------------------------------------------------------- random numbers


def _mix64(x: np.ndarray) -> np.ndarray:
  """splitmix64's output function on uint64 arrays (wraps mod 2**64)."""
  x = (x ^ (x >> np.uint64(30))) * _MIX1
  x = (x ^ (x >> np.uint64(27))) * _MIX2
  return x ^ (x >> np.uint64(31))


def example_keys(seed_words: Sequence[int], indices: np.ndarray) -> np.ndarray:
  """One 64-bit key per example from fixed seed words and the example indices.

  key = h(..h(h(0, w0), w1).., index) with h(s, w) = mix64(s ^ mix64(w + golden)), all
  mod 2**64. Same words and index -> same key; distinct indices -> distinct keys up to
  64-bit collisions.

  Args:
    seed_words: non-negative ints, e.g. (seed, shard) as the pipeline seeds examples.
    indices: int[B], non-negative example (chunk) indices.
  Returns:
    uint64[B].
  """
  indices = np.asarray(indices)
  if indices.ndim != 1:
    raise ValueError(f"indices must be 1-D int[B], got shape {indices.shape}")
  if indices.size and (not np.issubdtype(indices.dtype, np.integer) or indices.min() < 0):
    raise ValueError("indices must be non-negative integers")
  state = np.zeros(indices.shape, np.uint64)
  with np.errstate(over="ignore"):
    for w in seed_words:
      if int(w) < 0:
        raise ValueError(f"seed words must be non-negative, got {w}")
      state = _mix64(state ^ _mix64(np.uint64(int(w) % 2**64) + _GOLDEN))
    return _mix64(state ^ _mix64(indices.astype(np.uint64) + _GOLDEN))


def random_words(keys: np.ndarray, count: int, start: int = 0) -> np.ndarray:
  """Words start..start+count-1 of each key's splitmix64 stream: uint64[B, count].

  Word j of key k is mix64(k + (j + 1) * golden): a counter-based stream, so word j does
  not depend on how many words were drawn before it.
  """
  keys = np.asarray(keys, np.uint64)
  j = np.arange(start + 1, start + count + 1, dtype=np.uint64)
  with np.errstate(over="ignore"):
    return _mix64(keys[:, None] + j[None, :] * _GOLDEN)


def uniform_floats(words: np.ndarray) -> np.ndarray:
  """uint64 words -> float64 uniforms in [0, 1) from their top 53 bits (same shape)."""
  return (words >> np.uint64(11)).astype(np.float64) * _TWO_TO_MINUS_53


def uniform_ints(words: np.ndarray, high: np.ndarray | int) -> np.ndarray:
  """floor(u * high): int64 uniform in [0, high) (bias < high / 2**53), high broadcasting."""
  return (uniform_floats(words) * high).astype(np.int64)


# ----------------------------------------------------------------------------- helpers


def _check_block(tokens: np.ndarray) -> np.ndarray:
  tokens = np.asarray(tokens)
  if tokens.ndim != 2:
    raise ValueError(f"tokens must be a block int32[B, L], got shape {tokens.shape}")
  if tokens.size and not np.issubdtype(tokens.dtype, np.integer):
    raise ValueError(f"tokens must be integers, got dtype {tokens.dtype}")
  return tokens.astype(np.int32, copy=False)


def _check_keys(keys: np.ndarray, batch: int) -> np.ndarray:
  keys = np.asarray(keys)
  if keys.shape != (batch,) or keys.dtype != np.uint64:
    raise ValueError(f"keys must be uint64[{batch}] (example_keys), got {keys.dtype}{list(keys.shape)}")
  return keys


def _floyd_subsets(n: np.ndarray, k: int, words: np.ndarray) -> np.ndarray:
  """Row r: a uniformly random k-subset of {0, ..., n[r] - 1}, sorted: int64[R, k].

  Floyd's algorithm: for j = n-k, ..., n-1 draw t uniform in [0, j]; take t, or j if t was
  taken already (a bool[R, max(n)] bitmap answers that). Every k-subset is equally likely.
  Needs n[r] >= k.

  Args:
    n: int64[R]. k: subset size. words: uint64[R, k], the random words (one per step).
  """
  rows = np.arange(n.shape[0])
  taken = np.zeros((n.shape[0], int(n.max()) if n.size else 0), bool)
  chosen = np.empty((k, n.shape[0]), np.int64)
  u = uniform_floats(words.T)
  for i in range(k):
    j = n - k + i
    t = (u[i] * (j + 1)).astype(np.int64)
    chosen[i] = np.where(taken[rows, t], j, t)
    taken[rows, chosen[i]] = True
  return np.sort(chosen.T, axis=1)


def _two_compositions(num_a: int, num_b: int, num_segments: int,
                      words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Two independent uniformly random compositions of num_a and num_b into num_segments
  positive parts each: (int64[B, S], int64[B, S]).

  The S - 1 segment starts of each are a uniform (S-1)-subset of its num - 1 gaps (T5's
  `_random_segmentation`, in distribution). words: uint64[B, 2 (S - 1)], the first S - 1
  for a, the rest for b.
  """
  b, k = words.shape[0], num_segments - 1
  n = np.repeat(np.array([num_a - 1, num_b - 1], np.int64), b)  # rows: b of a, then b of b
  bounds = np.empty((2 * b, num_segments + 1), np.int64)
  bounds[:, 0] = 0
  bounds[:, 1:-1] = _floyd_subsets(n, k, np.concatenate([words[:, :k], words[:, k:]])) + 1
  bounds[:b, -1] = num_a
  bounds[b:, -1] = num_b
  lengths = np.diff(bounds, axis=1)
  return lengths[:b], lengths[b:]


def _gather_segments(tokens: np.ndarray, src_start: np.ndarray, seg_len: np.ndarray,
                     sentinel_at: np.ndarray, vocab_size: int) -> np.ndarray:
  """Concatenates, per row, S segments of consecutive tokens, each with one slot replaced by
  its sentinel: segment k of row b = tokens[b, src_start[b,k] : src_start[b,k] + seg_len[b,k]]
  with position sentinel_at[b,k] set to vocab_size - 1 - k.

  One gather over the whole block: flat source index = output index + a per-segment delta
  (np.repeat), so no loop over rows or segments. Every row's seg_len must have the same sum
  (the output length) and every source index must lie in the row.

  Args:
    tokens: int32[B, L]. src_start, seg_len, sentinel_at: int64[B, S].
  Returns:
    int32[B, sum(seg_len[0])].
  """
  b, length = tokens.shape
  out_len = int(seg_len[0].sum())
  out_start = np.cumsum(seg_len, axis=1) - seg_len
  delta = src_start - out_start + (np.arange(b, dtype=np.int64) * (length - out_len))[:, None]
  index = np.repeat(delta.ravel(), seg_len.ravel())
  index += np.arange(index.size, dtype=np.int64)
  out = tokens.ravel().take(index).reshape(b, out_len)
  out[np.arange(b)[:, None], out_start + sentinel_at] = _sentinels(vocab_size, seg_len.shape[1])
  return out


def _sentinels(vocab_size: int, count: int) -> np.ndarray:
  return (int(vocab_size) - 1 - np.arange(count)).astype(np.int32)


def _check_sentinels(num_runs: int, num_extra_ids: int) -> None:
  if num_runs > num_extra_ids:
    raise ValueError(
        f"{num_runs} spans need {num_runs} sentinels but num_extra_ids={num_extra_ids}; use a "
        f"vocabulary with more extra ids (or lower the noise density / longer spans)")


# ----------------------------------------------------------------------------- span corruption


def random_spans_lengths(length: int, noise_density: float, mean_noise_span_length: float,
                         keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Span lengths of T5's span noise mask for a block of examples of one length.

  The mask is [m_0 non-noise, n_0 noise, m_1 non-noise, n_1 noise, ...], counts as
  `noise.random_spans_noise_mask` (float32 arithmetic, half-to-even): N noise tokens in
  S spans, both compositions uniformly random. Needs length >= 2 and noise_density > 0.

  Args:
    length: L. noise_density, mean_noise_span_length: as the reference. keys: uint64[B].
  Returns:
    (nonnoise m int64[B, S], noise n int64[B, S]); every entry >= 1, rows sum to L - N and N.
  Raises:
    ValueError: S > L - N (the reference's error, where T5's TF code fails).
  """
  num_noise, num_spans = noise_lib.random_spans_counts(
      length, noise_density, mean_noise_span_length)
  num_nonnoise = length - num_noise
  if num_spans > num_nonnoise:
    raise ValueError(
        f"random_spans_noise_mask(length={length}, noise_density={noise_density}, "
        f"mean_noise_span_length={mean_noise_span_length}): {num_spans} noise spans need as many "
        f"non-noise spans but there are only {num_nonnoise} non-noise tokens; lower "
        f"noise_density or raise mean_noise_span_length")
  noise, nonnoise = _two_compositions(num_noise, num_nonnoise, num_spans,
                                      random_words(keys, 2 * (num_spans - 1)))
  return nonnoise, noise


def random_spans_noise_mask(length: int, noise_density: float, mean_noise_span_length: float,
                            keys: np.ndarray) -> np.ndarray:
  """The span noise masks of a block (for tests and statistics): bool[B, L], True = noise.

  Same edge cases as the reference: L < 2 is computed on 2 and sliced, density 0 -> all False.
  """
  keys = np.asarray(keys, np.uint64)
  noise_lib.check_density(noise_density)
  if not mean_noise_span_length > 0:
    raise ValueError(f"mean_noise_span_length must be > 0, got {mean_noise_span_length!r}")
  b, length = keys.shape[0], int(length)
  if length < 0:
    raise ValueError(f"length must be >= 0, got {length}")
  if noise_density == 0.0:
    return np.zeros((b, length), bool)
  m, n = random_spans_lengths(max(length, 2), noise_density, mean_noise_span_length, keys)
  interleaved = np.stack([m, n], axis=2).reshape(b, -1)
  is_noise = np.tile([False, True], m.shape[1])
  return np.stack([np.repeat(is_noise, r) for r in interleaved])[:, :length]


def span_corruption(tokens: np.ndarray, keys: np.ndarray, *, vocab_size: int,
                    num_extra_ids: int = objectives.DEFAULT_NUM_EXTRA_IDS,
                    noise_density: float = 0.15, mean_noise_span_length: float = 3.0) -> Batch:
  """T5 span corruption of a block of equal-length examples (objectives.span_corruption).

  Args:
    tokens: int32[B, L], no EOS. keys: uint64[B] (example_keys).
    vocab_size, num_extra_ids, noise_density, mean_noise_span_length: as the reference.
  Returns:
    {"inputs": int32[B, L - N + S], "targets": int32[B, N + S]} (no EOS): N noise tokens in S
    spans (both fixed by L), sentinel k = vocab_size - 1 - k.
    At L = 568, 0.15, 3: inputs [B, 511], targets [B, 113].
  Raises:
    ValueError: S > num_extra_ids, or S > L - N.
  """
  tokens = _check_block(tokens)
  b, length = tokens.shape
  keys = _check_keys(keys, b)
  noise_lib.check_vocab(vocab_size, num_extra_ids)
  noise_density = noise_lib.check_density(noise_density)
  if not mean_noise_span_length > 0:
    raise ValueError(f"mean_noise_span_length must be > 0, got {mean_noise_span_length!r}")
  x0 = np.full((b, 1), noise_lib.sentinel_id(vocab_size), np.int32)
  if length == 0:
    return {"inputs": tokens[:, :0].copy(), "targets": tokens[:, :0].copy()}
  if noise_density == 0.0 or length == 1:  # all non-noise: the targets are one sentinel
    return {"inputs": tokens.copy(), "targets": x0}
  num_noise, num_spans = noise_lib.random_spans_counts(
      length, noise_density, mean_noise_span_length)
  m, n = random_spans_lengths(length, noise_density, mean_noise_span_length, keys)
  _check_sentinels(num_spans, num_extra_ids)
  if b == 0:
    return {"inputs": np.zeros((0, length - num_noise + num_spans), np.int32),
            "targets": np.zeros((0, num_noise + num_spans), np.int32)}
  a_prev = np.cumsum(m, axis=1) - m  # A_{k-1}: non-noise tokens before span k
  c_prev = np.cumsum(n, axis=1) - n  # C_{k-1}: noise tokens before span k
  # inputs: segment k = non-noise span k (from source A_{k-1} + C_{k-1}), then sentinel k.
  inputs = _gather_segments(tokens, a_prev + c_prev, m + 1, m, vocab_size)
  # targets: segment k = sentinel k, then noise span k (from source A_k + C_{k-1}).
  targets = _gather_segments(tokens, a_prev + m + c_prev - 1, n + 1, np.zeros_like(n),
                             vocab_size)
  return {"inputs": inputs, "targets": targets}


# ----------------------------------------------------------------------------- i.i.d. objectives


def bernoulli(keys: np.ndarray, count: int, p: float, start: int = 0) -> np.ndarray:
  """count Bernoulli(p') draws per key: bool[B, count], from 32-bit halves of words
  start..start + ceil(count / 2) - 1 (low half first).

  p' = round(p * 2**32) / 2**32, within 2**-33 of p (p = 1 gives all True).
  """
  words = random_words(keys, (int(count) + 1) // 2, start=start)
  halves = words.view(np.uint32).reshape(words.shape[0], -1)[:, :int(count)]
  if sys.byteorder == "big":  # make the low half come first everywhere
    halves = words.byteswap().view(np.uint32).reshape(words.shape[0], -1)[:, :int(count)]
  threshold = round(float(p) * 2**32)
  if threshold >= 2**32:
    return np.ones(halves.shape, bool)
  return halves < np.uint32(threshold)


def iid_noise_mask(length: int, noise_density: float, keys: np.ndarray) -> np.ndarray:
  """Bernoulli(noise_density) noise per token: bool[B, L] (`bernoulli` from word 0 on)."""
  noise_density = noise_lib.check_density(noise_density)
  return bernoulli(np.asarray(keys, np.uint64), int(length), noise_density)


def _iid_tokens_block(tokens, keys):
  tokens = _check_block(tokens)
  return tokens, _check_keys(keys, tokens.shape[0])


def bert(tokens: np.ndarray, keys: np.ndarray, *, vocab_size: int,
         num_extra_ids: int = objectives.DEFAULT_NUM_EXTRA_IDS, noise_density: float = 0.15,
         random_token_prob: float = 0.1) -> Batch:
  """BERT-style (objectives.bert) on a block: int32[B, L] inputs, targets = tokens.

  Noise mask from words [0, L/2), "use a random token" from words [L, 3L/2) (probability
  random_token_prob), the random token, uniform in [3, vocab_size), from words [2L, 3L).
  """
  del num_extra_ids
  tokens, keys = _iid_tokens_block(tokens, keys)
  length = tokens.shape[1]
  random_token_prob = noise_lib.check_density(
      random_token_prob, what="random_token_prob")
  noise = iid_noise_mask(length, noise_density, keys)
  use_random = bernoulli(keys, length, random_token_prob, start=length)
  random_tokens = (noise_lib.NUM_RESERVED_TOKENS + uniform_ints(
      random_words(keys, length, start=2 * length),
      int(vocab_size) - noise_lib.NUM_RESERVED_TOKENS)).astype(np.int32)
  inputs = np.where(noise, np.int32(noise_lib.sentinel_id(vocab_size)), tokens)
  inputs = np.where(noise & use_random, random_tokens, inputs)
  return {"inputs": inputs, "targets": tokens.copy()}


def mass(tokens: np.ndarray, keys: np.ndarray, *, vocab_size: int,
         num_extra_ids: int = objectives.DEFAULT_NUM_EXTRA_IDS,
         noise_density: float = 0.15) -> Batch:
  """MASS-style (objectives.mass) on a block: noise tokens -> the mask token. int32[B, L] x 2."""
  del num_extra_ids
  tokens, keys = _iid_tokens_block(tokens, keys)
  noise = iid_noise_mask(tokens.shape[1], noise_density, keys)
  return {"inputs": np.where(noise, np.int32(noise_lib.sentinel_id(vocab_size)), tokens),
          "targets": tokens.copy()}


def full_lm(tokens: np.ndarray, keys: np.ndarray, *, vocab_size: int,
            num_extra_ids: int = objectives.DEFAULT_NUM_EXTRA_IDS) -> Batch:
  """Full LM (objectives.full_lm): inputs int32[B, 0], targets = tokens int32[B, L]."""
  del vocab_size, num_extra_ids
  tokens, keys = _iid_tokens_block(tokens, keys)
  return {"inputs": tokens[:, :0].copy(), "targets": tokens.copy()}


def _split_rows(values: np.ndarray, mask: np.ndarray) -> list[np.ndarray]:
  """values[b][mask[b]] for every row b, as a list of int32 arrays (one flat gather)."""
  counts = np.count_nonzero(mask, axis=1)
  return np.split(values[mask], np.cumsum(counts)[:-1])


def _unique_sentinel_rows(tokens: np.ndarray, noise: np.ndarray, vocab_size: int,
                          num_extra_ids: int) -> list[np.ndarray]:
  """noise_lib.noise_span_to_unique_sentinel on every row of a block: list of int32[...]."""
  prev = np.zeros_like(noise)
  prev[:, 1:] = noise[:, :-1]
  first = noise & ~prev
  runs = np.cumsum(first, axis=1)
  most = int(runs[:, -1].max()) if runs.size else 0
  _check_sentinels(most, num_extra_ids)
  values = np.where(first, (int(vocab_size) - runs).astype(np.int32), tokens)
  return _split_rows(values, ~(noise & prev))


def iid_replace_spans(tokens: np.ndarray, keys: np.ndarray, *, vocab_size: int,
                      num_extra_ids: int = objectives.DEFAULT_NUM_EXTRA_IDS,
                      noise_density: float = 0.15) -> dict[str, list[np.ndarray]]:
  """Replace corrupted spans (objectives.iid_replace_spans) on a block.

  Lengths vary per example, so the outputs are lists: {"inputs": [int32[...]] * B,
  "targets": [...]}. Raises ValueError if any example needs more than num_extra_ids sentinels.
  """
  tokens, keys = _iid_tokens_block(tokens, keys)
  noise_lib.check_density(noise_density, low_open=True,
                            high_open=True)
  noise = iid_noise_mask(tokens.shape[1], noise_density, keys)
  return {"inputs": _unique_sentinel_rows(tokens, noise, vocab_size, num_extra_ids),
          "targets": _unique_sentinel_rows(tokens, ~noise, vocab_size, num_extra_ids)}


def drop_tokens(tokens: np.ndarray, keys: np.ndarray, *, vocab_size: int,
                num_extra_ids: int = objectives.DEFAULT_NUM_EXTRA_IDS,
                noise_density: float = 0.15) -> dict[str, list[np.ndarray]]:
  """Drop corrupted tokens (objectives.drop_tokens): lists of kept / dropped tokens per row."""
  del vocab_size, num_extra_ids
  tokens, keys = _iid_tokens_block(tokens, keys)
  noise = iid_noise_mask(tokens.shape[1], noise_density, keys)
  return {"inputs": _split_rows(tokens, ~noise), "targets": _split_rows(tokens, noise)}


def prefix_lm(tokens: np.ndarray, keys: np.ndarray, *, vocab_size: int,
              num_extra_ids: int = objectives.DEFAULT_NUM_EXTRA_IDS,
              noise_density: float = 0.5) -> dict[str, list[np.ndarray]]:
  """Prefix LM (objectives.prefix_lm): prefix length uniform in [min_in, L - 1] from word 0.

  min_in = min(L - 1, max(1, round((1 - 2 * noise_density) * (L - 1)))), as the reference;
  L <= 1 -> empty prefix. Lists of int32 inputs tokens[:n] and targets tokens[n:].
  """
  del vocab_size, num_extra_ids
  tokens, keys = _iid_tokens_block(tokens, keys)
  noise_density = noise_lib.check_density(
      noise_density, low_open=True, high=0.5)
  b, length = tokens.shape
  max_in = length - 1
  if max_in <= 0:
    n_in = np.zeros(b, np.int64)
  else:
    min_in = min(max_in, max(1, round((1.0 - 2.0 * noise_density) * max_in)))
    n_in = min_in + uniform_ints(random_words(keys, 1)[:, 0], max_in - min_in + 1)
  prefix = np.arange(length)[None, :] < n_in[:, None]
  return {"inputs": _split_rows(tokens, prefix), "targets": _split_rows(tokens, ~prefix)}


BATCHED = {
    "span_corruption": span_corruption,
    "iid_replace_spans": iid_replace_spans,
    "drop_tokens": drop_tokens,
    "bert": bert,
    "mass": mass,
    "prefix_lm": prefix_lm,
    "full_lm": full_lm,
}


# ----------------------------------------------------------------------------- conversion


def _trim_append_eos(x: np.ndarray, max_len: int | None, eos_id: int) -> np.ndarray:
  if max_len is not None:
    if max_len < 1:
      raise ValueError(f"length must be >= 1 to hold the EOS, got {max_len}")
    x = x[:, :max_len - 1]
  out = np.empty((x.shape[0], x.shape[1] + 1), np.int32)
  out[:, :-1] = x
  out[:, -1] = eos_id
  return out


def convert_batch(example: Mapping[str, np.ndarray], architecture: str, *, eos_id: int = 1,
                  lengths: Mapping[str, int] | None = None,
                  loss_on_inputs: bool = False) -> dict[str, np.ndarray]:
  """`converters.convert` on every row of a dense block (same layouts, same trimming).

  Args:
    example: {"inputs": int32[B, Li'], "targets": int32[B, Lt']}, no EOS, no padding.
    architecture, eos_id, lengths, loss_on_inputs: as converters.convert.
  Returns:
    the features of converters.convert with a leading batch axis [B, ...]; row b equals
    converters.convert({"inputs": inputs[b], "targets": targets[b]}, ...).
  """
  if architecture not in converters.ARCHITECTURES:
    raise ValueError(f"unknown architecture {architecture!r}; valid: {list(converters.ARCHITECTURES)}")
  lengths = dict(lengths or {})
  unknown = set(lengths) - {"inputs", "targets"}
  if unknown:
    raise ValueError(f"lengths keys must be 'inputs'/'targets', got {sorted(unknown)}")
  inputs = np.asarray(example["inputs"], np.int32)
  targets = np.asarray(example["targets"], np.int32)
  if inputs.ndim != 2 or targets.ndim != 2 or inputs.shape[0] != targets.shape[0]:
    raise ValueError(f"inputs/targets must be int32[B, L] blocks with the same B, got "
                     f"{inputs.shape} and {targets.shape}")
  b = inputs.shape[0]
  targets = _trim_append_eos(targets, lengths.get("targets"), eos_id)
  if architecture == "encoder_decoder":
    if loss_on_inputs:
      raise ValueError("loss_on_inputs applies only to decoder-only architectures")
    return {
        "encoder_input_tokens": _trim_append_eos(inputs, lengths.get("inputs"), eos_id),
        "decoder_input_tokens": converters.shift_right(targets),
        "decoder_target_tokens": targets,
        "decoder_loss_weights": np.ones(targets.shape, np.float32),
    }
  if inputs.shape[1]:
    inputs = _trim_append_eos(inputs, lengths.get("inputs"), eos_id)
  sequence = np.concatenate([inputs, targets], axis=1)
  n_in = inputs.shape[1]
  positions = np.arange(sequence.shape[1])
  if architecture == "prefix_lm":
    causal = positions <= n_in
  else:
    causal = np.zeros(sequence.shape[1], bool)
  weights = np.ones(sequence.shape[1], bool) if loss_on_inputs else positions >= n_in
  return {
      "decoder_input_tokens": converters.shift_right(sequence),
      "decoder_target_tokens": sequence,
      "decoder_loss_weights": np.broadcast_to(weights.astype(np.float32), sequence.shape).copy(),
      "decoder_causal_attention": np.broadcast_to(causal.astype(np.int32), sequence.shape).copy(),
  }


# ----------------------------------------------------------------------------- pipeline adapter


class BlockObjective:
  """Objective + conversion over a block of raw chunks: what a data pipeline calls.

  block(indices, chunks) returns, in order, the converted features of every chunk, as
  `objectives.make_objective(...)` + `converters.convert(...)` would per chunk but with the
  batched definition of this module: chunk i's randomness is keyed by (*seed_words,
  indices[i]), so the result for a chunk does not depend on the block it came in.

  Example (the pipeline's per-shard seeding):
    block = BlockObjective("span_corruption", vocab_size=32100, architecture="encoder_decoder",
                           lengths={"inputs": 512, "targets": 114}, seed_words=(seed, shard))
    features = block(range(i0, i0 + 256), chunks)   # list of 256 feature dicts

  Args:
    name: a key of BATCHED (objective name as in objectives.OBJECTIVES).
    vocab_size, num_extra_ids, **params: as objectives.make_objective.
    architecture, lengths, loss_on_inputs, eos_id: as converters.convert.
    seed_words: non-negative ints mixed into every example's key (e.g. (seed, shard)).
  """

  def __init__(self, name: str, *, vocab_size: int, architecture: str,
               lengths: Mapping[str, int] | None = None, loss_on_inputs: bool = False,
               num_extra_ids: int = objectives.DEFAULT_NUM_EXTRA_IDS, eos_id: int = 1,
               seed_words: Sequence[int] = (), **params: Any):
    if name not in BATCHED:
      raise ValueError(f"objective {name!r} has no batched version; batched: "
                       f"{sorted(BATCHED)} (use objectives.make_objective per example)")
    if params.get("random_roll"):
      raise ValueError("span_corruption random_roll=True has no batched version; use "
                       "objectives.make_objective per example")
    params = {k: v for k, v in params.items() if k != "random_roll"}
    objectives.make_objective(name, vocab_size=vocab_size, num_extra_ids=num_extra_ids,
                              **params)  # validates names and values with the reference's errors
    if architecture not in converters.ARCHITECTURES:
      raise ValueError(f"unknown architecture {architecture!r}; valid: {list(converters.ARCHITECTURES)}")
    self.name = name
    self._fn = BATCHED[name]
    self._kw = dict(vocab_size=int(vocab_size), num_extra_ids=int(num_extra_ids), **params)
    self._convert = dict(eos_id=eos_id, lengths=dict(lengths or {}),
                         loss_on_inputs=loss_on_inputs)
    self.architecture = architecture
    self.seed_words = tuple(int(w) for w in seed_words)

  def features(self, indices: Sequence[int], tokens: np.ndarray) -> dict[str, np.ndarray]:
    """Dense features of a block of equal-length chunks int32[B, L]: dict of [B, ...].

    Only for objectives whose outputs have one length per input length (span_corruption,
    bert, mass, full_lm).
    """
    tokens = _check_block(tokens)
    keys = example_keys(self.seed_words, np.asarray(indices, np.int64).reshape(-1))
    out = self._fn(tokens, _check_keys(keys, tokens.shape[0]), **self._kw)
    if isinstance(out["inputs"], list):
      raise ValueError(f"{self.name} gives examples of different lengths; call the block "
                       "(list of feature dicts) instead of features()")
    return convert_batch(out, self.architecture, **self._convert)

  def __call__(self, indices: Sequence[int], chunks: Sequence[np.ndarray]
               ) -> list[dict[str, np.ndarray]]:
    """Features of each chunk (1-D int32 arrays of any lengths), in order."""
    indices = np.asarray(indices, np.int64).reshape(-1)
    if len(indices) != len(chunks):
      raise ValueError(f"{len(indices)} indices for {len(chunks)} chunks")
    lengths = np.array([np.shape(c)[0] for c in chunks], np.int64)
    out: list[dict[str, np.ndarray] | None] = [None] * len(chunks)
    for length in np.unique(lengths):
      which = np.flatnonzero(lengths == length)
      block = (np.stack([chunks[i] for i in which]) if length else
               np.zeros((which.size, 0), np.int32))
      keys = example_keys(self.seed_words, indices[which])
      ex = self._fn(_check_block(block), keys, **self._kw)
      if isinstance(ex["inputs"], list):
        for i, x, y in zip(which, ex["inputs"], ex["targets"]):
          out[i] = converters.convert({"inputs": x, "targets": y}, self.architecture,
                                      **self._convert)
      else:
        feats = convert_batch(ex, self.architecture, **self._convert)
        names = list(feats)
        for row, i in enumerate(which):
          out[i] = {k: feats[k][row] for k in names}
    return out  # type: ignore[return-value]


# ----------------------------------------------------------------------------- blocks of chunks and rows


def split_documents(documents: Sequence[np.ndarray], raw_length: int,
                    carry: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Concatenates carry + documents and cuts whole raw chunks (T5's reduce_concat_tokens +
  split_tokens, as the pipeline's ConcatThenSplit does one document at a time).

  Args:
    documents: 1-D int token arrays (empty ones contribute nothing).
    raw_length: tokens per chunk (objectives.raw_length).
    carry: int32[r] tokens left over from the previous call (r < raw_length), or None.
  Returns:
    (chunks int32[n, raw_length], rest int32[r']): n = total // raw_length whole chunks in
    stream order and the r' < raw_length tokens after them (the next call's carry).
  """
  if raw_length < 1:
    raise ValueError(f"raw_length must be >= 1, got {raw_length}")
  parts = ([] if carry is None else [np.asarray(carry, np.int32)])
  parts += [np.asarray(d, np.int32).reshape(-1) for d in documents]
  stream = np.concatenate(parts) if parts else np.zeros(0, np.int32)
  n = stream.size // raw_length
  return stream[:n * raw_length].reshape(n, raw_length), stream[n * raw_length:].copy()


def pack_dense(features: Mapping[str, np.ndarray], lengths: Mapping[str, int]
               ) -> dict[str, np.ndarray]:
  """First-fit packing of a block of EQUAL-length examples, in closed form.

  With every example n_s tokens long in stack s, first fit (`packing.pack_examples`) puts
  k = min_s(L_s // n_s) consecutive examples in each row: row r holds examples
  r k, ..., r k + k - 1. This builds those rows with reshapes instead of a loop.

  Args:
    features: converted features of B examples, dict of [B, n_s] arrays whose keys start
      with encoder_/decoder_ (convert_batch's output).
    lengths: row length per stack ({"encoder": Li, "decoder": Lt} or {"decoder": L}).
  Returns:
    dict of [ceil(B / k), L_s] arrays: the features padded with 0, plus
    `{stack}_segment_ids` (1..k per row, 0 on padding) and `{stack}_positions` (int32);
    equal to packing.pack_examples on the rows.
  Raises:
    ValueError: an example longer than its row.
  """
  from lm.data import packing  # pylint: disable=g-import-not-at-top
  keys = list(features)
  if not keys:
    raise ValueError("pack_dense needs at least one feature")
  b = int(np.shape(features[keys[0]])[0])
  n = {}
  for key in keys:
    s = packing.stack_of(key)
    if s not in lengths:
      raise ValueError(f"Feature {key!r} has no row length; lengths are {dict(lengths)}.")
    width = int(np.shape(features[key])[1])
    if n.setdefault(s, width) != width:
      raise ValueError(f"The {s} features differ in length: {n[s]} and {width} ({key!r})")
  for s, width in n.items():
    if width > lengths[s]:
      raise ValueError(f"Examples have {width} {s} tokens, more than the row length "
                       f"{lengths[s]}; trim them first (converters lengths=...).")
  k = min(lengths[s] // w for s, w in n.items() if w > 0) if any(n.values()) else 1
  rows = -(-b // k)
  real = (np.arange(rows * k) < b).reshape(rows, k)  # which slots hold an example
  out = {}
  for key in keys:
    s = packing.stack_of(key)
    v = np.asarray(features[key])
    slots = np.zeros((rows * k, n[s]), v.dtype)
    slots[:b] = v
    row = np.zeros((rows, lengths[s]), v.dtype)
    row[:, :k * n[s]] = slots.reshape(rows, k * n[s])
    out[key] = row
  for s in sorted(n, key=packing.STACKS.index):
    seg = np.zeros((rows, lengths[s]), np.int32)
    pos = np.zeros((rows, lengths[s]), np.int32)
    seg[:, :k * n[s]] = np.repeat(np.where(real, np.arange(1, k + 1, dtype=np.int32), 0),
                                  n[s], axis=1)
    pos[:, :k * n[s]] = np.where(np.repeat(real, n[s], axis=1),
                                 np.tile(np.arange(n[s], dtype=np.int32), k), 0)
    out[f"{s}_segment_ids"] = seg
    out[f"{s}_positions"] = pos
  return out


# ----------------------------------------------------------------------------- grain stage


_READ = 256  # documents read per bulk read


def pack_block(objective: BlockObjective, indices: Sequence[int], chunks: Sequence[np.ndarray],
               lengths: Mapping[str, int]) -> dict[str, np.ndarray]:
  """objective + convert + first-fit packing of one block of chunks: dict of [R, L] rows.

  Equal-length chunks of an objective with one output length (span corruption, BERT, MASS,
  full LM) are packed in closed form (`pack_dense`); otherwise by `packing.pack_examples`
  otherwise by `first_fit_pack` (the same rows as packing.pack_examples). Either way the
  rows are exactly first fit over the block.
  """
  dense = objective.name in ("span_corruption", "bert", "mass", "full_lm")
  if dense and len({np.shape(c)[0] for c in chunks}) == 1:
    return pack_dense(objective.features(indices, np.stack(chunks)), lengths)
  return first_fit_pack(objective(indices, chunks), lengths)


def first_fit_pack(examples: Sequence[Mapping[str, np.ndarray]], lengths: Mapping[str, int]
                   ) -> dict[str, np.ndarray]:
  """`packing.pack_examples` (first fit, same rows, same errors) as dict of [R, L] arrays.

  Only the choice of row is a loop over examples (one vector test per example); the rows
  are then filled by one scatter per feature.

  Args:
    examples: converted examples (same keys), 1-D arrays. lengths: row length per stack.
  Returns:
    dict of [R, L_stack] arrays: the features padded with 0 plus `{stack}_segment_ids` and
    `{stack}_positions` (int32).
  """
  from lm.data import packing  # pylint: disable=g-import-not-at-top
  if not examples:
    raise ValueError("first_fit_pack needs at least one example")
  keys = list(examples[0])
  stack_of = {k: packing.stack_of(k) for k in keys}
  for k, st in stack_of.items():
    if st not in lengths:
      raise ValueError(f"Feature {k!r} has no row length; lengths are {dict(lengths)}.")
  stacks = sorted(set(stack_of.values()), key=packing.STACKS.index)
  cap = np.array([lengths[st] for st in stacks], np.int64)
  first_key = {st: next(k for k in keys if stack_of[k] == st) for st in stacks}
  num = len(examples)
  sizes = np.empty((num, len(stacks)), np.int64)
  for i, ex in enumerate(examples):
    if list(ex) != keys:
      raise ValueError(f"Example {i} has keys {list(ex)}, expected {keys}.")
    for j, st in enumerate(stacks):
      sizes[i, j] = len(ex[first_key[st]])
  for k in keys:
    j = stacks.index(stack_of[k])
    if any(len(ex[k]) != sizes[i, j] for i, ex in enumerate(examples)):
      raise ValueError(f"The {stack_of[k]} features of an example differ in length.")
  over = np.flatnonzero((sizes > cap).any(axis=1))
  if over.size:
    i = int(over[0])
    j = int(np.flatnonzero(sizes[i] > cap)[0])
    raise ValueError(f"Example {i} has {sizes[i, j]} {stacks[j]} tokens, more than the row length "
                     f"{cap[j]}; trim it first (converters.convert lengths=...).")
  used = np.zeros((num, len(stacks)), np.int64)
  count = np.zeros(num, np.int64)
  row_of = np.empty(num, np.int64)
  offset = np.empty((num, len(stacks)), np.int64)
  segment = np.empty(num, np.int64)
  rows = 0
  for i in range(num):
    fits = np.flatnonzero((used[:rows] + sizes[i] <= cap).all(axis=1))
    r = int(fits[0]) if fits.size else rows
    rows = max(rows, r + 1)
    row_of[i], offset[i] = r, used[r]
    count[r] += 1
    segment[i] = count[r]
    used[r] += sizes[i]
  out = {}
  for j, st in enumerate(stacks):
    n = sizes[:, j]
    total = int(n.sum())
    within = np.arange(total) - np.repeat(np.cumsum(n) - n, n)  # position inside the example
    dest = np.repeat(row_of * cap[j] + offset[:, j], n) + within
    for k in keys:
      if stack_of[k] != st:
        continue
      dtype = np.asarray(examples[0][k]).dtype
      flat = np.zeros(rows * cap[j], dtype)
      if total:
        flat[dest] = np.concatenate([np.asarray(ex[k]) for ex in examples])
      out[k] = flat.reshape(rows, cap[j])
    seg = np.zeros(rows * cap[j], np.int32)
    pos = np.zeros(rows * cap[j], np.int32)
    seg[dest] = np.repeat(segment, n)
    pos[dest] = within
    out[f"{st}_segment_ids"] = seg.reshape(rows, cap[j])
    out[f"{st}_positions"] = pos.reshape(rows, cap[j])
  return out


def _rows(block: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
  keys = list(block)
  return [{k: block[k][i] for k in keys} for i in range(len(block[keys[0]]))]


class BlockExamplesIterDataset(grain.IterDataset):
  """Documents -> converted examples, a block of chunks at a time (checkpointable).

  Replaces the per-example stages `to_iter_dataset -> filter(non-empty) ->
  ConcatThenSplitIterDataset -> map_with_index(objective + convert)` of a data shard:
  documents are read in order from `documents` (a MapDataset of {"tokens": int[n]}, e.g.
  already shuffled and repeated; empty ones are skipped), concatenated and cut into chunks
  of `raw_length` tokens exactly as ConcatThenSplit cuts them (the last chunk of a finite
  dataset is shorter instead of padded), `block_size` chunks at a time, and every block goes
  through `objective` (a BlockObjective) at once. Chunk i of the shard (0, 1, ...) is keyed
  by (*objective.seed_words, i), as map_with_index numbers them.

  Iterator state (JSON-serialisable): {"doc", "offset", "chunk", "index"}: the document and
  token offset where the current block starts, its first chunk index, and how many of its
  examples were returned. set_state rebuilds that block (deterministic) and continues at
  the same example, so a restored iterator yields exactly what an uninterrupted one would.

  Args:
    documents: MapDataset of {"tokens": int[n]} (or of int arrays).
    raw_length: tokens per chunk (objectives.raw_length).
    objective: the BlockObjective applied to every block.
    block_size: chunks per block (a speed knob: without pack_lengths results do not depend
      on it).
    pack_lengths: if given ({"encoder": Li, "decoder": Lt} or {"decoder": L}), every block's
      examples are packed by first fit WITHIN the block (`pack_block`) and the iterator
      yields rows (with {stack}_segment_ids / _positions, the names of
      packing.rename_packed) instead of examples: no grain packer needed. Rows never mix
      examples of two blocks, so the packing then depends on block_size (on span
      corruption's full chunks it does not: one example fills one row).
  """

  def __init__(self, documents: grain.MapDataset, raw_length: int, objective: BlockObjective,
               block_size: int = 256, pack_lengths: Mapping[str, int] | None = None):
    super().__init__(documents)
    if raw_length < 1 or block_size < 1:
      raise ValueError(f"raw_length and block_size must be >= 1, got {raw_length}, {block_size}")
    self._documents = documents
    self._raw = int(raw_length)
    self._objective = objective
    self._block = int(block_size)
    self._pack = dict(pack_lengths) if pack_lengths else None

  def __iter__(self) -> "_BlockExamplesIterator":
    return _BlockExamplesIterator(self._documents, self._raw, self._objective, self._block,
                                  self._pack)

  def __str__(self) -> str:
    return f"BlockExamplesIterDataset(raw_length={self._raw}, block_size={self._block})"


class _BlockExamplesIterator(grain.DatasetIterator):
  """See BlockExamplesIterDataset."""

  def __init__(self, documents, raw_length, objective, block_size, pack_lengths=None):
    super().__init__()
    self._pack = pack_lengths
    self._documents = documents
    self._num_docs = len(documents)
    self._raw = raw_length
    self._objective = objective
    self._block = block_size
    self._start = {"doc": 0, "offset": 0, "chunk": 0}
    self._next = dict(self._start)  # where the block after the current one starts
    self._buffer: list[dict[str, np.ndarray]] = []
    self._index = 0
    self._cache: dict[int, Any] = {}

  def _tokens(self, i: int) -> np.ndarray:
    if i not in self._cache:  # read ahead in bulk: one _getitems call per _READ documents
      stop = min(i + _READ, self._num_docs)
      getitems = getattr(self._documents, "_getitems", None)  # grain's batched read
      docs = getitems(range(i, stop)) if getitems else [self._documents[j] for j in range(i, stop)]
      self._cache = dict(zip(range(i, stop), docs))
    doc = self._cache[i]
    if doc is None:  # an element a MapDataset filter dropped
      return np.zeros(0, np.int32)
    if isinstance(doc, Mapping):
      doc = doc["tokens"]
    return np.asarray(doc).reshape(-1)

  def _read_block(self, start: Mapping[str, int]) -> tuple[list[np.ndarray], dict[str, int]]:
    """Chunks of the block starting at `start`, and where the next block starts."""
    need = self._block * self._raw
    doc, offset = start["doc"], start["offset"]
    parts, have = [], 0
    while have < need and doc < self._num_docs:
      tokens = self._tokens(doc)[offset:]
      take = tokens[:need - have]
      if take.size:
        parts.append(take)
        have += take.size
      if take.size < tokens.size:  # this document continues in the next block
        offset += take.size
      else:
        doc, offset = doc + 1, 0
    stream = np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)
    chunks = [stream[i:i + self._raw] for i in range(0, stream.size, self._raw)]
    return chunks, {"doc": doc, "offset": offset, "chunk": start["chunk"] + len(chunks)}

  def _load(self, start: Mapping[str, int]) -> None:
    chunks, self._next = self._read_block(start)
    self._start = dict(start)
    index = np.arange(start["chunk"], start["chunk"] + len(chunks))
    if not chunks:
      self._buffer = []
    elif self._pack is None:
      self._buffer = self._objective(index, chunks)
    else:
      self._buffer = _rows(pack_block(self._objective, index, chunks, self._pack))
    self._index = 0

  def __next__(self) -> dict[str, np.ndarray]:
    if self._index >= len(self._buffer):
      self._load(self._next)
      if not self._buffer:
        raise StopIteration
    out = self._buffer[self._index]
    self._index += 1
    return out

  def get_state(self) -> dict[str, int]:
    return {**self._start, "index": self._index}

  def set_state(self, state: Mapping[str, int]) -> None:
    start = {k: int(state[k]) for k in ("doc", "offset", "chunk")}
    if state["index"] == 0:  # nothing of this block returned yet: build it lazily
      self._start, self._next, self._buffer, self._index = start, start, [], 0
      return
    self._load(start)
    self._index = int(state["index"])
