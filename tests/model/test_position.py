"""lm/model/position.py's defaults, odd widths and initialisers against float64 NumPy.

tests/model/test_masks.py checks the bucket tables, ALiBi and RoPE's relativity; this file
checks what those leave open: every default argument (a module used without its config
gets T5's settings), the sinusoidal table at an odd width, RoPE's angles against the
formula, and the initial parameter distributions.
"""
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lm.model import position


def _rope_ref(x, positions, max_wavelength=10_000.0):
  """Rotate-half RoPE in float64: dims i and i + H/2 turn by p / w^(2i/H)."""
  x = np.asarray(x, np.float64)
  h = x.shape[-1]
  theta = max_wavelength ** (-2.0 * np.arange(h // 2) / h)
  ang = np.asarray(positions, np.float64)[:, :, None, None] * theta
  x1, x2 = x[..., : h // 2], x[..., h // 2:]
  return np.concatenate([x1 * np.cos(ang) - x2 * np.sin(ang),
                         x2 * np.cos(ang) + x1 * np.sin(ang)], -1)


def test_apply_rope_matches_the_formula_with_the_default_wavelength():
  """Positions up to 3000 make the wavelength show: 9999 instead of 10000 turns pair 1
  (theta = 10000^-(2/8) = 0.1) by a further 3000 * 0.1 * (2/8) * 1e-4 ~ 7.5e-3 rad.
  Tolerance: float32 angles (p * theta, up to 3000 rad at pair 0, where theta = 1 and the
  angle is exact; up to 300 rad elsewhere, rounded to ~300 * 2 eps32 ~ 7e-5 rad) times
  |x| <= ~4 gives at most ~3e-4; 5e-4 has headroom and is still 15x below the mutant."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 5, 3, 8)).astype(np.float32)
  pos = np.array([[0, 1, 7, 999, 2999], [3, 40, 500, 1234, 3000]], np.int32)
  got = np.asarray(position.apply_rope(jnp.asarray(x), jnp.asarray(pos)), np.float64)
  assert np.all(np.isfinite(got))
  np.testing.assert_allclose(got, _rope_ref(x, pos), rtol=0, atol=5e-4)
  # Another wavelength is honoured.
  got = np.asarray(position.apply_rope(jnp.asarray(x), jnp.asarray(pos), max_wavelength=500.0))
  np.testing.assert_allclose(got, _rope_ref(x, pos, 500.0), rtol=0, atol=5e-4)
  # bfloat16 in, bfloat16 out (the rotation itself runs in float32).
  assert position.apply_rope(jnp.asarray(x, jnp.bfloat16), jnp.asarray(pos)).dtype == jnp.bfloat16


def test_apply_rope_refuses_an_odd_head_dim():
  with pytest.raises(ValueError, match="even head_dim, got 7"):
    position.apply_rope(jnp.zeros((1, 2, 1, 7)), jnp.zeros((1, 2), jnp.int32))


@pytest.mark.parametrize("dim", [5, 7, 8])
def test_sinusoidal_embedding_matches_the_formula_at_odd_and_even_widths(dim):
  """[sin(p w_i) | cos(p w_i)] with w_i = 10000^(-i/half), half = dim // 2; an odd width
  gets one zero column at the end (and nothing before it)."""
  pos = np.array([[0, 1, 5, 300], [2, 3, 4, 1000]], np.int32)
  got = np.asarray(position.sinusoidal_embedding(jnp.asarray(pos), dim), np.float64)
  half = dim // 2
  ang = pos[..., None].astype(np.float64) * 10_000.0 ** (-np.arange(half) / half)
  want = np.concatenate([np.sin(ang), np.cos(ang)] + ([np.zeros(pos.shape + (1,))]
                                                      if dim % 2 else []), -1)
  assert got.shape == (2, 4, dim)
  assert np.all(np.isfinite(got))
  # float32 angles up to 1000 rad: absolute error <= 1000 * eps32 ~ 1.2e-4 at the fastest pair.
  np.testing.assert_allclose(got, want, rtol=0, atol=2e-4)
  if dim % 2:
    np.testing.assert_array_equal(got[..., -1], 0.0)


def test_relative_position_bucket_defaults_are_t5s():
  """Bidirectional, 32 buckets, max_distance 128 (test_masks' table, called bare)."""
  rp = np.array([0, -1, -8, -12, -91, -127, -128, 1, 8, 100, 127, 128])
  want = position.relative_position_bucket(rp, bidirectional=True, num_buckets=32,
                                           max_distance=128)
  np.testing.assert_array_equal(position.relative_position_bucket(rp), want)
  np.testing.assert_array_equal(want, [0, 1, 8, 9, 15, 15, 15, 17, 24, 31, 31, 31])


def test_relative_bucket_at_max_exact_is_max_exact():
  """n == max_exact is the first log-spaced bucket, and equals n (log(1) = 0)."""
  for bidirectional, max_exact in [(True, 8), (False, 16)]:
    assert int(position.relative_position_bucket(-max_exact, bidirectional=bidirectional)) == max_exact


def test_relative_position_bias_defaults_and_init():
  """Defaults: 32 buckets, max_distance 128: keys 90 and 91 after the query land in buckets
  30 and 31 (with max_distance 127, 90 would land in 31; with 129, 91 in 30). Init:
  variance_scaling(1, fan_avg, uniform) on (heads, buckets): U(-a, a) with
  a = sqrt(3 / ((heads + buckets) / 2))."""
  heads = 64
  module = position.RelativePositionBias(num_heads=heads)
  q = jnp.zeros((1, 1), jnp.int32)
  k = jnp.asarray([[90, 91, 100, 127, 128, -50]], jnp.int32)
  variables = nn.meta.unbox(module.init(jax.random.PRNGKey(0), q, k, bidirectional=True))
  table = np.asarray(variables["params"]["rel_embedding"], np.float64)
  assert table.shape == (heads, 32)
  bias = np.asarray(module.apply(variables, q, k, bidirectional=True))
  buckets = np.asarray(position.relative_position_bucket(np.asarray(k[0]), bidirectional=True))
  np.testing.assert_array_equal(buckets, [30, 31, 31, 31, 31, 13])
  np.testing.assert_array_equal(bias[0, :, 0, :], table[:, buckets])
  a = math.sqrt(3.0 / ((heads + 32) / 2))
  assert np.abs(table).max() <= a
  # 2048 uniform draws: the max |x| is above 0.99 a with probability 1 - 0.99^2048 ~ 1 - 1e-9,
  # and the sample variance a^2/3 within 10 % (its relative sd is ~sqrt(0.8/2048) ~ 2 %).
  assert np.abs(table).max() > 0.99 * a
  np.testing.assert_allclose(table.var(), a * a / 3, rtol=0.1)


def test_learned_position_embedding_default_init_and_lookup():
  """normal(0.02) by default; row p of the table is position p's embedding."""
  module = position.LearnedPositionEmbedding(max_length=512, emb_dim=64)
  pos = jnp.asarray([[0, 5, 511]], jnp.int32)
  variables = nn.meta.unbox(module.init(jax.random.PRNGKey(1), pos))
  table = np.asarray(variables["params"]["embedding"], np.float64)
  assert table.shape == (512, 64)
  # 32768 normal draws: the sample sd is within ~0.4 % (1/sqrt(2n)) of 0.02; 3 % is ~8 sd.
  np.testing.assert_allclose(table.std(), 0.02, rtol=0.03)
  np.testing.assert_array_equal(np.asarray(module.apply(variables, pos))[0], table[[0, 5, 511]])
