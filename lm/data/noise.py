"""Noise masks and inputs/targets functions: T5's preprocessors, pure NumPy.

What lives here: the pieces the objectives (`objectives.py`) are built from, ported from
T5's `t5/data/preprocessors.py`: the noise masks (`random_spans_noise_mask`, `iid_noise_mask`,
`random_prefix_noise_mask`), the functions that turn tokens and a mask into inputs or targets
(`noise_span_to_unique_sentinel`, ...), the sentinel ids and the shared argument checks.
What does not: the objectives and their registry (`objectives.py`), mixtures (`mixtures.py`),
length arithmetic (`lengths.py`), EOS (`converters.py`). No JAX, no TF.

Conventions (sentinels, running out of them, randomness, rounding) and a worked example:
docs/objectives.md, 'The pieces: noise masks and inputs/targets functions'.
"""
from __future__ import annotations

import math

import numpy as np

NUM_RESERVED_TOKENS = 3  # pad 0, eos 1, unk 2: never drawn as BERT random tokens (T5).
DEFAULT_NUM_EXTRA_IDS = 100


# ----------------------------------------------------------------------------- checks


def check_mean_span_length(mean_noise_span_length: float) -> float:
  """Returns float(mean_noise_span_length) if it is >= 1 (and finite); else raises ValueError.

  A span has at least one token, so a mean below 1 asks for more spans than noise tokens
  (round(n / m) > n), which no mask can lay out (T5's TF code fails there)."""
  m = float(mean_noise_span_length)
  if not (math.isfinite(m) and m >= 1.0):
    raise ValueError("mean_noise_span_length must be >= 1 (a span has at least one token), "
                     f"got {mean_noise_span_length!r}")
  return m


def check_density(noise_density: float, *, low_open: bool = False, high_open: bool = False,
                   high: float = 1.0, what: str = "noise_density") -> float:
  """Returns float(noise_density) if it lies in [0, high] (each end open if asked); else raises
  ValueError naming `what` and the interval."""
  d = float(noise_density)
  lo_ok = d > 0.0 if low_open else d >= 0.0
  hi_ok = d < high if high_open else d <= high
  if not (math.isfinite(d) and lo_ok and hi_ok):
    lo = "(0" if low_open else "[0"
    hi = f"{high})" if high_open else f"{high}]"
    raise ValueError(f"{what} must be in {lo}, {hi}, got {noise_density!r}")
  return d


def check_tokens(tokens: np.ndarray, *, block: bool = False) -> np.ndarray:
  """tokens as int32[L], or as int32[B, L] when `block`; ValueError unless integers of that
  rank."""
  tokens = np.asarray(tokens)
  if tokens.ndim != (2 if block else 1):
    layout = "a block int32[B, L]" if block else "1-D int32[L]"
    raise ValueError(f"tokens must be {layout}, got shape {tokens.shape}")
  if tokens.size and not np.issubdtype(tokens.dtype, np.integer):
    raise ValueError(f"tokens must be integers, got dtype {tokens.dtype}")
  return tokens.astype(np.int32, copy=False)


def check_vocab(vocab_size: int, num_extra_ids: int) -> None:
  """ValueError unless there is at least one sentinel and room for the reserved ids."""
  if int(num_extra_ids) < 1:
    raise ValueError(f"num_extra_ids must be >= 1 (sentinels live there), got {num_extra_ids}")
  if int(vocab_size) <= int(num_extra_ids) + NUM_RESERVED_TOKENS:
    raise ValueError(
        f"vocab_size={vocab_size} must exceed num_extra_ids={num_extra_ids} + "
        f"{NUM_RESERVED_TOKENS} reserved ids (pad, eos, unk)")


def check_mask(tokens: np.ndarray, noise_mask: np.ndarray) -> np.ndarray:
  """noise_mask as bool[L]; ValueError unless it has the tokens' shape."""
  noise_mask = np.asarray(noise_mask, dtype=bool)
  if noise_mask.shape != tokens.shape:
    raise ValueError(f"noise_mask shape {noise_mask.shape} != tokens shape {tokens.shape}")
  return noise_mask


def sentinel_id(vocab_size: int, k: int = 0) -> int:
  """Id of the k-th sentinel (<extra_id_k>): vocab_size - 1 - k (T5's reversed extra ids)."""
  return int(vocab_size) - 1 - int(k)


# ----------------------------------------------------------------------------- noise masks


def _random_segmentation(num_items: int, num_segments: int,
                         rng: np.random.Generator) -> np.ndarray:
  """T5's `_random_segmentation`: a uniformly random composition of num_items.

  Shuffles num_segments-1 "segment starts" among the num_items-1 gaps, then counts the items
  of each segment. Returns int64[num_segments] of positive ints summing to num_items.
  """
  first_in_segment = np.zeros(num_items, np.int64)
  first_in_segment[1:] = rng.permutation(np.arange(num_items - 1) < num_segments - 1)
  segment_id = np.cumsum(first_in_segment)
  return np.bincount(segment_id, minlength=num_segments)


def random_spans_counts(length: int, noise_density: float,
                         mean_noise_span_length: float) -> tuple[int, int]:
  """(num_noise_tokens, num_noise_spans) exactly as T5 computes them (float32, half-to-even)."""
  length = max(int(length), 2)
  num_noise = int(np.round(np.float32(length) * np.float32(noise_density)))
  num_noise = min(max(num_noise, 1), length - 1)
  num_spans = int(np.round(np.float32(num_noise) / np.float32(mean_noise_span_length)))
  return num_noise, max(num_spans, 1)


def random_spans_noise_mask(length: int, noise_density: float, mean_noise_span_length: float,
                            rng: np.random.Generator, *, random_roll: bool = False) -> np.ndarray:
  """T5's span noise mask: alternating non-noise/noise spans, all masks equally likely.

  num_noise = round(max(length, 2) * noise_density) clipped to [1, length - 1];
  num_spans = max(round(num_noise / mean_noise_span_length), 1) noise spans and as many
  non-noise spans, lengths drawn as uniform random compositions. The mask always starts with
  non-noise and ends with noise (unless random_roll). length < 2 is computed on length 2 and
  sliced (length 1 -> [False], length 0 -> []); noise_density 0 -> all False.

  Example: length 10, density 0.3, mean 1.5 -> 3 noise tokens in 2 spans, e.g.
    [F F T F F F F F T T].

  Args:
    length: int, the number of tokens L.
    noise_density: float in [0, 1], approximate fraction of noise tokens.
    mean_noise_span_length: float > 0.
    rng: the generator to draw from.
    random_roll: roll the mask by a uniform offset in [0, L) (T5's option, off by default).

  Returns:
    bool[L], True = noise.

  Raises:
    ValueError: bad density/span length, or num_spans > number of non-noise tokens (where T5's
      TF code fails: the non-noise tokens cannot form num_spans non-empty spans).
  """
  noise_density = check_density(noise_density)
  check_mean_span_length(mean_noise_span_length)
  length = int(length)
  if length < 0:
    raise ValueError(f"length must be >= 0, got {length}")
  if noise_density == 0.0:
    return np.zeros(length, bool)
  orig_length, length = length, max(length, 2)
  num_noise, num_spans = random_spans_counts(length, noise_density, mean_noise_span_length)
  num_nonnoise = length - num_noise
  if num_spans > num_nonnoise:
    raise ValueError(
        f"random_spans_noise_mask(length={length}, noise_density={noise_density}, "
        f"mean_noise_span_length={mean_noise_span_length}): {num_spans} noise spans need as many "
        f"non-noise spans but there are only {num_nonnoise} non-noise tokens; lower "
        f"noise_density or raise mean_noise_span_length")
  noise_lengths = _random_segmentation(num_noise, num_spans, rng)
  nonnoise_lengths = _random_segmentation(num_nonnoise, num_spans, rng)
  interleaved = np.stack([nonnoise_lengths, noise_lengths], axis=1).reshape(-1)
  is_noise = np.tile(np.array([False, True]), num_spans)
  mask = np.repeat(is_noise, interleaved)[:orig_length]
  if random_roll:
    mask = np.roll(mask, int(rng.integers(0, length)))[:orig_length]
  return mask


def iid_noise_mask(length: int, noise_density: float, rng: np.random.Generator) -> np.ndarray:
  """T5's i.i.d. noise: each token is noise with probability noise_density.

  Args:
    length: int L. noise_density: float in [0, 1] (1.0 -> all noise, used by deshuffling).
    rng: the generator.
  Returns:
    bool[L].
  """
  noise_density = check_density(noise_density)
  return rng.random(int(length)) < noise_density


def random_prefix_noise_mask(length: int, noise_density: float,
                             rng: np.random.Generator) -> np.ndarray:
  """T5's prefix-LM mask: the first n tokens are "noise" (= the prefix, the model's inputs).

  max_in = L - 1; min_in = min(max_in, max(1, round((1 - 2 * density) * max_in)));
  n ~ UniformInt[min_in, max_in]; mask = arange(L) < n. So at density 0.5 the prefix length is
  uniform in [1, L - 1] (at least one prefix and one target token when L >= 2), and in general
  the expected target fraction is about noise_density. L = 1 -> [False] (empty prefix).

  Args:
    length: int L. noise_density: float in (0, 0.5]. rng: the generator.
  Returns:
    bool[L], True on the prefix.
  """
  noise_density = check_density(noise_density, low_open=True, high=0.5)
  length = int(length)
  max_in = length - 1
  if max_in <= 0:
    return np.zeros(max(length, 0), bool)
  min_in = min(max_in, max(1, round((1.0 - 2.0 * noise_density) * max_in)))
  n_in = int(rng.integers(min_in, max_in + 1))
  return np.arange(length) < n_in


# ----------------------------------------------------------------------------- inputs/targets fns


def noise_span_to_unique_sentinel(tokens: np.ndarray, noise_mask: np.ndarray, *, vocab_size: int,
                                  num_extra_ids: int = DEFAULT_NUM_EXTRA_IDS) -> np.ndarray:
  """Replace each run of noise tokens by one sentinel: k-th run -> vocab_size - 1 - k.

  Example (vocab_size 32100): tokens A B C D E, mask [0 1 1 0 1] -> A 32099 D 32098.

  Args:
    tokens: int32[L]. noise_mask: bool[L]. vocab_size: vocabulary size incl. extra ids.
    num_extra_ids: how many sentinels exist; more runs than that raise ValueError.
  Returns:
    int32[L - (noise tokens) + (noise runs)].
  """
  tokens = check_tokens(tokens)
  noise_mask = check_mask(tokens, noise_mask)
  prev_noise = np.empty_like(noise_mask)
  prev_noise[:1] = False
  prev_noise[1:] = noise_mask[:-1]
  first = noise_mask & ~prev_noise
  num_runs = int(np.count_nonzero(first))
  if num_runs > num_extra_ids:
    raise ValueError(
        f"{num_runs} spans need {num_runs} sentinels but num_extra_ids={num_extra_ids}; use a "
        f"vocabulary with more extra ids (or lower the noise density / longer spans)")
  sentinels = (vocab_size - np.cumsum(first)).astype(np.int32)  # = vocab_size - 1 - k on firsts
  out = np.where(first, sentinels, tokens)
  return out[~(noise_mask & prev_noise)]


def nonnoise_span_to_unique_sentinel(tokens: np.ndarray, noise_mask: np.ndarray, *,
                                     vocab_size: int,
                                     num_extra_ids: int = DEFAULT_NUM_EXTRA_IDS) -> np.ndarray:
  """Targets of span corruption: each run of NON-noise tokens -> one unique sentinel.

  Example: tokens A B C D E, mask [0 1 1 0 1] -> 32099 B C 32098 E. Returns int32[...].
  """
  return noise_span_to_unique_sentinel(tokens, ~np.asarray(noise_mask, bool),
                                       vocab_size=vocab_size, num_extra_ids=num_extra_ids)


def drop_noise_tokens(tokens: np.ndarray, noise_mask: np.ndarray) -> np.ndarray:
  """tokens[~noise_mask]: int32[number of non-noise tokens]."""
  tokens = check_tokens(tokens)
  return tokens[~check_mask(tokens, noise_mask)]


def drop_nonnoise_tokens(tokens: np.ndarray, noise_mask: np.ndarray) -> np.ndarray:
  """tokens[noise_mask]: int32[number of noise tokens]."""
  tokens = check_tokens(tokens)
  return tokens[check_mask(tokens, noise_mask)]


def noise_token_to_sentinel(tokens: np.ndarray, noise_mask: np.ndarray, *,
                            vocab_size: int) -> np.ndarray:
  """Every noise token -> the mask token sentinel_id(vocab_size) (MASS-style). int32[L]."""
  tokens = check_tokens(tokens)
  return np.where(check_mask(tokens, noise_mask), np.int32(sentinel_id(vocab_size)), tokens)


def noise_token_to_random_token_or_sentinel(tokens: np.ndarray, noise_mask: np.ndarray,
                                            rng: np.random.Generator, *, vocab_size: int,
                                            random_prob: float = 0.1) -> np.ndarray:
  """BERT-style (T5 Table 4/5): each noise token -> a random token w.p. random_prob, else the mask.

  The random token is uniform in [3, vocab_size) (T5's num_reserved_tokens=3; the range includes
  the sentinels and may hit the original token). Non-noise tokens are unchanged. int32[L].
  """
  tokens = check_tokens(tokens)
  noise_mask = check_mask(tokens, noise_mask)
  random_prob = check_density(random_prob, what="random_token_prob")
  use_random = rng.random(tokens.shape[0]) < random_prob
  random_tokens = rng.integers(NUM_RESERVED_TOKENS, vocab_size, tokens.shape[0], dtype=np.int32)
  masked = np.where(noise_mask, np.int32(sentinel_id(vocab_size)), tokens)
  return np.where(noise_mask & use_random, random_tokens, masked)


def permute_noise_tokens(tokens: np.ndarray, noise_mask: np.ndarray,
                         rng: np.random.Generator) -> np.ndarray:
  """Shuffle the noise tokens among the noise positions; non-noise tokens stay. int32[L]."""
  tokens = check_tokens(tokens)
  noise_mask = check_mask(tokens, noise_mask)
  out = tokens.copy()
  out[noise_mask] = rng.permutation(tokens[noise_mask])
  return out
