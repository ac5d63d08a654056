"""Vectorised objectives: one NumPy pass over a BLOCK of examples instead of one call each.

What lives here: the batched forms of `lm.data.objectives` (`<objective>_block`: tokens
int32[B, L] and keys uint64[B] instead of int32[L] and a Generator), the keyed noise masks,
`convert_batch`, and the counter-based random words they draw from (`example_keys`,
`random_words`). What does not: the per-example reference definitions (objectives.py, which
this module follows, not bit for bit), tokenization, and the grain stage that runs these over
blocks of chunks and packs them (blocks.py).

The definition (keys, distributions, invariants, span corruption without a mask):
docs/speed.md, 'Batched objectives (`lm/data/batched.py`)'.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

import numpy as np

from lm.data import converters
from lm.data import noise as noise_lib

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_TWO_TO_MINUS_53 = 2.0 ** -53

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


def check_block(tokens: np.ndarray) -> np.ndarray:
  """tokens as int32[B, L]; ValueError unless a block of integers."""
  return noise_lib.check_tokens(tokens, block=True)


def check_keys(keys: np.ndarray, batch: int) -> np.ndarray:
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


def random_spans_noise_mask_block(length: int, noise_density: float,
                                  mean_noise_span_length: float, keys: np.ndarray) -> np.ndarray:
  """The span noise masks of a block (for tests and statistics): bool[B, L], True = noise.

  Same edge cases as the reference: L < 2 is computed on 2 and sliced, density 0 -> all False.
  """
  keys = np.asarray(keys, np.uint64)
  noise_lib.check_density(noise_density)
  noise_lib.check_mean_span_length(mean_noise_span_length)
  b, length = keys.shape[0], int(length)
  if length < 0:
    raise ValueError(f"length must be >= 0, got {length}")
  if noise_density == 0.0:
    return np.zeros((b, length), bool)
  m, n = random_spans_lengths(max(length, 2), noise_density, mean_noise_span_length, keys)
  interleaved = np.stack([m, n], axis=2).reshape(b, -1)
  is_noise = np.tile([False, True], m.shape[1])
  return np.stack([np.repeat(is_noise, r) for r in interleaved])[:, :length]


def span_corruption_block(tokens: np.ndarray, keys: np.ndarray, *, vocab_size: int,
                    num_extra_ids: int = noise_lib.DEFAULT_NUM_EXTRA_IDS,
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
  tokens = check_block(tokens)
  b, length = tokens.shape
  keys = check_keys(keys, b)
  noise_lib.check_vocab(vocab_size, num_extra_ids)
  noise_density = noise_lib.check_density(noise_density)
  noise_lib.check_mean_span_length(mean_noise_span_length)
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


def iid_noise_mask_block(length: int, noise_density: float, keys: np.ndarray) -> np.ndarray:
  """Bernoulli(noise_density) noise per token: bool[B, L] (`bernoulli` from word 0 on)."""
  noise_density = noise_lib.check_density(noise_density)
  return bernoulli(np.asarray(keys, np.uint64), int(length), noise_density)


def _iid_tokens_block(tokens, keys):
  tokens = check_block(tokens)
  return tokens, check_keys(keys, tokens.shape[0])


def bert_block(tokens: np.ndarray, keys: np.ndarray, *, vocab_size: int,
         num_extra_ids: int = noise_lib.DEFAULT_NUM_EXTRA_IDS, noise_density: float = 0.15,
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
  noise = iid_noise_mask_block(length, noise_density, keys)
  use_random = bernoulli(keys, length, random_token_prob, start=length)
  random_tokens = (noise_lib.NUM_RESERVED_TOKENS + uniform_ints(
      random_words(keys, length, start=2 * length),
      int(vocab_size) - noise_lib.NUM_RESERVED_TOKENS)).astype(np.int32)
  inputs = np.where(noise, np.int32(noise_lib.sentinel_id(vocab_size)), tokens)
  inputs = np.where(noise & use_random, random_tokens, inputs)
  return {"inputs": inputs, "targets": tokens.copy()}


def mass_block(tokens: np.ndarray, keys: np.ndarray, *, vocab_size: int,
         num_extra_ids: int = noise_lib.DEFAULT_NUM_EXTRA_IDS,
         noise_density: float = 0.15) -> Batch:
  """MASS-style (objectives.mass) on a block: noise tokens -> the mask token. int32[B, L] x 2."""
  del num_extra_ids
  tokens, keys = _iid_tokens_block(tokens, keys)
  noise = iid_noise_mask_block(tokens.shape[1], noise_density, keys)
  return {"inputs": np.where(noise, np.int32(noise_lib.sentinel_id(vocab_size)), tokens),
          "targets": tokens.copy()}


def full_lm_block(tokens: np.ndarray, keys: np.ndarray, *, vocab_size: int,
            num_extra_ids: int = noise_lib.DEFAULT_NUM_EXTRA_IDS) -> Batch:
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


def iid_replace_spans_block(tokens: np.ndarray, keys: np.ndarray, *, vocab_size: int,
                      num_extra_ids: int = noise_lib.DEFAULT_NUM_EXTRA_IDS,
                      noise_density: float = 0.15) -> dict[str, list[np.ndarray]]:
  """Replace corrupted spans (objectives.iid_replace_spans) on a block.

  Lengths vary per example, so the outputs are lists: {"inputs": [int32[...]] * B,
  "targets": [...]}. Raises ValueError if any example needs more than num_extra_ids sentinels.
  """
  tokens, keys = _iid_tokens_block(tokens, keys)
  noise_lib.check_density(noise_density, low_open=True,
                            high_open=True)
  noise = iid_noise_mask_block(tokens.shape[1], noise_density, keys)
  return {"inputs": _unique_sentinel_rows(tokens, noise, vocab_size, num_extra_ids),
          "targets": _unique_sentinel_rows(tokens, ~noise, vocab_size, num_extra_ids)}


def drop_tokens_block(tokens: np.ndarray, keys: np.ndarray, *, vocab_size: int,
                num_extra_ids: int = noise_lib.DEFAULT_NUM_EXTRA_IDS,
                noise_density: float = 0.15) -> dict[str, list[np.ndarray]]:
  """Drop corrupted tokens (objectives.drop_tokens): lists of kept / dropped tokens per row."""
  del vocab_size, num_extra_ids
  tokens, keys = _iid_tokens_block(tokens, keys)
  noise = iid_noise_mask_block(tokens.shape[1], noise_density, keys)
  return {"inputs": _split_rows(tokens, ~noise), "targets": _split_rows(tokens, noise)}


def prefix_lm_block(tokens: np.ndarray, keys: np.ndarray, *, vocab_size: int,
              num_extra_ids: int = noise_lib.DEFAULT_NUM_EXTRA_IDS,
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
                  lengths: Mapping[str, int] | None = None, loss_on_inputs: bool = False,
                  targets_eos: bool = True) -> dict[str, np.ndarray]:
  """`converters.convert` on every row of a dense block (same layouts, same trimming).

  Args:
    example: {"inputs": int32[B, Li'], "targets": int32[B, Lt']}, no EOS, no padding.
    architecture, eos_id, lengths, loss_on_inputs, targets_eos: as converters.convert.
  Returns:
    the features of converters.convert with a leading batch axis [B, ...]; row b equals
    converters.convert({"inputs": inputs[b], "targets": targets[b]}, ...).
  """
  if architecture not in converters.ARCHITECTURES:
    raise ValueError(f"unknown architecture {architecture!r}; expected one of "
                     f"{list(converters.ARCHITECTURES)}")
  lengths = dict(lengths or {})
  unknown = set(lengths) - {"inputs", "targets"}
  if unknown:
    raise ValueError(f"lengths keys must be 'inputs'/'targets', got {sorted(unknown)}")
  inputs = np.asarray(example["inputs"], np.int32)
  targets = np.asarray(example["targets"], np.int32)
  if inputs.ndim != 2 or targets.ndim != 2 or inputs.shape[0] != targets.shape[0]:
    raise ValueError(f"inputs/targets must be int32[B, L] blocks with the same B, got "
                     f"{inputs.shape} and {targets.shape}")
  if targets_eos:
    targets = _trim_append_eos(targets, lengths.get("targets"), eos_id)
  elif lengths.get("targets") is not None:
    targets = targets[:, :lengths["targets"]]
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
