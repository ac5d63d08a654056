"""lm.data.lengths against plain restatements: T5's random_spans_helper over many
parameters (with its start and its hack), exact pmfs by enumerating every mask, the
binomial by its formula (the survivors of a mutation run, docs/testing.md)."""
import itertools
import math

import numpy as np
import pytest

from lm.data import lengths


def _t5_lengths(tokens, density, mean, extra_in, extra_tgt):
  num_noise = int(round(tokens * density))
  num_spans = int(round(num_noise / mean))
  return (tokens - num_noise + num_spans * extra_in + 1,
          num_noise + num_spans * extra_tgt + 1)


def _helper_by_enumeration(inputs_length, density, mean, extra_in=1, extra_tgt=1):
  """T5's definition: from inputs_length - 1 raw tokens (taken as they are, even where more
  than one extra token per span overflows them), the first raw length after which one more
  token would not fit; then T5's hack at density 0.5."""
  tokens = next(t for t in itertools.count(inputs_length - 1)
                if _t5_lengths(t + 1, density, mean, extra_in, extra_tgt)[0] > inputs_length)
  inputs_len, targets_len = _t5_lengths(tokens, density, mean, extra_in, extra_tgt)
  if density == 0.5 and targets_len > inputs_len:
    return tokens - 1, targets_len - 1
  return tokens, targets_len


@pytest.mark.parametrize("density", [0.0, 0.1, 0.15, 0.3, 0.5, 0.8])
@pytest.mark.parametrize("mean", [1.0, 2.0, 3.0])
@pytest.mark.parametrize("extra", [(1, 1), (0, 2), (2, 3), (1, 0)])
def test_random_spans_helper_is_the_largest_raw_length_that_fits(density, mean, extra):
  for inputs_length in (2, 3, 4, 5, 7, 8, 16, 31, 64, 114, 512):
    got = lengths.random_spans_helper(inputs_length, density, mean, *extra)
    assert got == _helper_by_enumeration(inputs_length, density, mean, *extra), inputs_length


def test_t5s_hack_drops_a_token_only_when_targets_exceed_inputs():
  # Density 0.5, mean 1: 5 raw tokens -> 2 noise (round half to even), inputs 6 > targets 5:
  # kept; 4 raw tokens -> inputs 5 = targets 5: kept; 7 tokens -> 4 noise, targets 9 > 8: drop.
  assert _t5_lengths(5, 0.5, 1.0, 1, 1) == (6, 5)
  assert lengths.random_spans_helper(6, 0.5, 1.0) == (5, 5)
  assert _t5_lengths(4, 0.5, 1.0, 1, 1) == (5, 5)
  assert lengths.random_spans_helper(5, 0.5, 1.0) == (4, 5)
  assert _t5_lengths(7, 0.5, 1.0, 1, 1) == (8, 9)
  assert lengths.random_spans_helper(8, 0.5, 1.0) == (6, 8)


@pytest.mark.parametrize("inputs_length, mean, message", [
    (1, 3.0, "inputs_length must be >= 2"), (0, 3.0, "inputs_length must be >= 2"),
    (8, 0.0, "mean_noise_span_length must be > 0"),
    (8, -1.0, "mean_noise_span_length must be > 0")])
def test_random_spans_helper_bad_input(inputs_length, mean, message):
  with pytest.raises(ValueError, match=message):
    lengths.random_spans_helper(inputs_length, 0.15, mean)


def _pmf_by_enumeration(n, p, count):
  out = np.zeros(3 * n + 1)
  for mask in itertools.product((0, 1), repeat=n):
    k = sum(mask)
    out[count(mask)] += p ** k * (1 - p) ** (n - k)
  return out


def _runs(mask):
  return [(bit, len(list(g))) for bit, g in itertools.groupby(mask)]


def _unique_sentinel_targets(mask):  # every noise token, and a sentinel per non-noise run
  return sum(mask) + sum(1 for bit, _ in _runs(mask) if bit == 0)


@pytest.mark.parametrize("inc, count", [
    (lengths.INC_UNIQUE_SENTINEL_TARGETS, _unique_sentinel_targets),
    (lengths.INC_RUNS, lambda mask: len(_runs(mask)))])
@pytest.mark.parametrize("p", [0.15, 0.5, 0.9])
def test_iid_pmf_equals_the_count_over_every_mask(inc, count, p):
  for n in (1, 2, 3, 6, 9):
    got = lengths.iid_pmf(n, p, inc)
    assert got.shape == (int(inc.max()) * n + 1,)  # values 0 .. max
    want = _pmf_by_enumeration(n, p, count)
    np.testing.assert_allclose(got, want[:got.size], rtol=1e-12, atol=1e-15)
    assert want[got.size:].sum() == 0


@pytest.mark.parametrize("n", [0, 1, 2, 7, 30])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.85])
def test_binomial_pmf_is_the_formula(n, p):
  got = lengths.binomial_pmf(n, p)
  want = [math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)]
  assert got.shape == (n + 1,)
  np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-300)


def test_quantile_is_the_first_value_whose_cumulative_probability_reaches_q():
  pmf = np.array([0.25, 0.25, 0.25, 0.25])  # cumulative 0.25, 0.5, 0.75, 1 (exact in floats)
  assert [lengths.quantile(pmf, q) for q in (0.1, 0.25, 0.5, 0.6, 0.75, 1.0)] == [0, 0, 1, 2, 2, 3]
