"""Length arithmetic of the objectives: how long raw segments and targets are.

What lives here: the pure arithmetic the objectives' length rules (`objectives.OBJECTIVES`)
are written with: T5's `random_spans_helper` (raw segment length and targets length of span
corruption), and exact distributions of the i.i.d. objectives' output lengths and sentinel
counts (`iid_pmf`, `binomial_pmf`, `quantile`). What does not: which rule belongs to which
objective and the per-name entry points (`objectives.raw_length`,
`objectives.required_targets_length`, `objectives.check_lengths`, ...).
"""
from __future__ import annotations

import math

import numpy as np

from lm.data import noise


def random_spans_helper(inputs_length: int, noise_density: float, mean_noise_span_length: float,
                        extra_tokens_per_span_inputs: int = 1,
                        extra_tokens_per_span_targets: int = 1) -> tuple[int, int]:
  """T5's random_spans_helper: raw tokens per segment so span-corrupted inputs fill inputs_length.

  Lengths count the EOS. Uses Python round (half-to-even) and none of the mask's clamps, as T5.
  Includes T5's "minor hack": at noise_density 0.5, if targets would exceed inputs, drop one raw
  token. random_spans_helper(512, 0.15, 3.0) == (568, 114).

  Returns:
    (tokens_length, targets_length): raw segment length to cut, and the targets length it gives.
  """
  if int(inputs_length) < 2:
    raise ValueError(f"inputs_length must be >= 2 (room for a token and EOS), got {inputs_length}")
  noise.check_density(noise_density)
  if not mean_noise_span_length > 0:
    raise ValueError(f"mean_noise_span_length must be > 0, got {mean_noise_span_length!r}")

  def lengths(tokens_length):
    num_noise = int(round(tokens_length * noise_density))
    num_nonnoise = tokens_length - num_noise
    num_spans = int(round(num_noise / mean_noise_span_length))
    return (num_nonnoise + num_spans * extra_tokens_per_span_inputs + 1,
            num_noise + num_spans * extra_tokens_per_span_targets + 1)

  tokens_length = inputs_length - 1
  while lengths(tokens_length + 1)[0] <= inputs_length:
    tokens_length += 1
  inputs_len, targets_len = lengths(tokens_length)
  if noise_density == 0.5 and targets_len > inputs_len:
    tokens_length -= 1
    targets_len -= 1
  return tokens_length, targets_len


def iid_pmf(length: int, p: float, inc: np.ndarray) -> np.ndarray:
  """Exact pmf of a sum over an i.i.d. Bernoulli(p) sequence of inc[prev_state, current bit].

  prev_state: 0 at the start, 1 after a non-noise token, 2 after a noise token. Returns
  float64[max value + 1]. Used to get exact quantiles of i.i.d.-objective lengths.
  """
  size = int(inc.max()) * length + 1
  dist = np.zeros((3, size))
  dist[0, 0] = 1.0
  for _ in range(length):
    new = np.zeros_like(dist)
    for prev in range(3):
      for bit, prob in ((0, 1.0 - p), (1, p)):
        k = int(inc[prev, bit])
        new[1 + bit, k:] += prob * dist[prev, :size - k]
    dist = new
  return dist.sum(0)


# inc[prev_state, bit]: targets of unique-sentinel objectives = noise tokens + non-noise runs.
INC_UNIQUE_SENTINEL_TARGETS = np.array([[1, 1], [0, 1], [1, 1]])
INC_RUNS = np.array([[1, 1], [0, 1], [1, 0]])  # number of runs of either kind


def quantile(pmf: np.ndarray, q: float) -> int:
  """Smallest value whose cumulative probability reaches q (pmf: float64[values])."""
  return int(np.searchsorted(np.cumsum(pmf), q - 1e-12))


def binomial_pmf(n: int, p: float) -> np.ndarray:
  """pmf of Binomial(n, p): float64[n + 1] (e.g. the noise-token count of an i.i.d. mask)."""
  k = np.arange(n + 1)
  log_comb = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                       for i in k])
  return np.exp(log_comb + k * math.log(p) + (n - k) * math.log1p(-p))
