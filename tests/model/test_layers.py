"""lm/model/layers.py against NumPy: norms, dropout, MLP activations, initializer scales.

Each expectation is written from the maths (float64 NumPy), not from the module. Names are
built at run time where the code compares strings, so `is` in place of `==` shows.
"""
import math

import numpy as np
import pytest

import flax.linen as nn
from flax.core import meta
import jax
import jax.numpy as jnp

from lm.model import layers
from model_helpers import runtime_str



def _rms_ref(x, scale, eps):
  x = np.asarray(x, np.float64)
  return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * scale


def _ln_ref(x, scale, bias, eps):
  x = np.asarray(x, np.float64)
  c = x - x.mean(-1, keepdims=True)
  return c / np.sqrt(np.mean(c * c, -1, keepdims=True) + eps) * scale + bias


def _apply(module, x, params=None, **kw):
  variables = meta.unbox(module.init(jax.random.PRNGKey(0), x, **kw))
  if params is not None:
    variables = {"params": params}
  return np.asarray(module.apply(variables, x, **kw), np.float64), variables["params"]


@pytest.mark.parametrize("norm_type,eps", [("rmsnorm", 1e-6), ("layernorm", 1e-5)])
def test_norms_match_numpy_where_epsilon_matters(norm_type, eps):
  """Rows with variance ~ eps: a wrong epsilon (sign or size) moves the result."""
  rng = np.random.default_rng(0)
  # Offsets proportional to each row's spread (0.5x), so centring matters and float32
  # rounding of x - mean stays at a few ulps of the result.
  x = (rng.normal(size=(3, 5, 16)) + 0.5) * np.array([1e-3, 1.0, 30.0])[:, None, None]
  x = x.astype(np.float32)
  d = x.shape[-1]
  scale = rng.uniform(0.5, 1.5, d).astype(np.float32)
  bias = rng.normal(size=d).astype(np.float32)
  module = layers.make_norm(runtime_str(norm_type), jnp.float32, "norm")
  assert module.epsilon == eps
  params = {"scale": jnp.asarray(scale)}
  if norm_type == "layernorm":
    params["bias"] = jnp.asarray(bias)
    want = _ln_ref(x, scale, bias, eps)
  else:
    want = _rms_ref(x, scale, eps)
  got, _ = _apply(module, jnp.asarray(x), params)
  assert np.all(np.isfinite(got))
  np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
  # An explicit epsilon replaces the default.
  module = layers.make_norm(norm_type, jnp.float32, "norm", epsilon=1e-2)
  got, _ = _apply(module, jnp.asarray(x), params)
  want = (_ln_ref(x, scale, bias, 1e-2) if norm_type == "layernorm"
          else _rms_ref(x, scale, 1e-2))
  np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_norm_defaults_and_init():
  assert layers.RMSNorm().epsilon == 1e-6 and layers.LayerNorm().epsilon == 1e-5
  x = jnp.ones((2, 4), jnp.float32)
  _, params = _apply(layers.RMSNorm(), x)
  np.testing.assert_array_equal(params["scale"], np.ones(4))
  _, params = _apply(layers.LayerNorm(), x)
  np.testing.assert_array_equal(params["bias"], np.zeros(4))
  for name in ("batchnorm", "scalenorm"):  # sorting before and after both known names
    with pytest.raises(ValueError, match=f"unknown norm_type '{name}'"):
      layers.make_norm(name, jnp.float32, "n")
  out, _ = _apply(layers.RMSNorm(dtype=jnp.bfloat16), x)
  assert layers.RMSNorm(dtype=jnp.bfloat16).apply(
      {"params": {"scale": jnp.ones(4)}}, x).dtype == jnp.bfloat16


class _Dropout(nn.Module):
  rate: float
  broadcast_length: bool = True

  @nn.compact
  def __call__(self, x, deterministic):
    return layers.broadcast_dropout(x, self.rate, deterministic, self, self.broadcast_length)


@pytest.mark.parametrize("rate", [0.25, 0.6])
def test_broadcast_dropout_keeps_one_minus_rate_scaled_and_shares_the_mask_over_length(rate):
  b, l, d = 64, 8, 32
  x = jnp.ones((b, l, d), jnp.float32)
  out = np.asarray(_Dropout(rate).apply({}, x, False, rngs={"dropout": jax.random.PRNGKey(1)}))
  kept = out != 0
  # Kept entries are scaled by 1 / (1 - rate), dropped ones are exactly 0.
  np.testing.assert_allclose(out[kept], np.float32(1) / np.float32(1 - rate), rtol=1e-7)
  # One mask per (example, feature), the same at every position.
  assert np.all(kept == kept[:, :1, :])
  frac = kept[:, 0, :].mean()
  sd = math.sqrt(rate * (1 - rate) / (b * d))
  assert abs(frac - (1 - rate)) < 5 * sd, (frac, rate)
  # Independent masks per element without the broadcast.
  out = np.asarray(_Dropout(rate, broadcast_length=False).apply(
      {}, x, False, rngs={"dropout": jax.random.PRNGKey(1)}))
  assert not np.all((out != 0) == (out != 0)[:, :1, :])
  assert abs((out != 0).mean() - (1 - rate)) < 5 * math.sqrt(rate * (1 - rate) / out.size)


class _DefaultDropout(nn.Module):
  @nn.compact
  def __call__(self, x):
    return layers.broadcast_dropout(x, 0.5, False, self)


def test_dropout_shares_its_mask_over_length_by_default():
  """The MLP block calls it so (t5x's broadcast_dims=(-2,))."""
  x = jnp.ones((8, 6, 16), jnp.float32)
  kept = np.asarray(_DefaultDropout().apply({}, x, rngs={"dropout": jax.random.PRNGKey(2)})) != 0
  assert np.all(kept == kept[:, :1, :]) and 0 < kept.mean() < 1


def test_dropout_is_the_identity_when_deterministic_or_at_rate_zero():
  x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 4)), jnp.float32)
  np.testing.assert_array_equal(_Dropout(0.5).apply({}, x, True), x)
  # Rate 0 draws no mask: no "dropout" RNG is needed.
  np.testing.assert_array_equal(_Dropout(0.0).apply({}, x, False), x)


def _gelu(x):  # the tanh approximation (flax's and t5x's default)
  return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


@pytest.mark.parametrize("activation", ["relu", "gelu", "gated_gelu", "swiglu"])
def test_mlp_block_matches_numpy(activation):
  rng = np.random.default_rng(2)
  x = rng.normal(size=(2, 3, 8)).astype(np.float32)
  block = layers.MlpBlock(mlp_dim=12, activation=runtime_str(activation))
  got, params = _apply(block, jnp.asarray(x))
  p = {k: np.asarray(v, np.float64) for k, v in params.items()}
  x64 = x.astype(np.float64)
  if activation == "relu":
    h = np.maximum(x64 @ p["wi"], 0)
  elif activation == "gelu":
    h = _gelu(x64 @ p["wi"])
  elif activation == "gated_gelu":
    h = _gelu(x64 @ p["wi_0"]) * (x64 @ p["wi_1"])
  else:
    g = x64 @ p["wi_0"]
    h = g / (1 + np.exp(-g)) * (x64 @ p["wi_1"])
  assert np.all(np.isfinite(got))
  np.testing.assert_allclose(got, h @ p["wo"], rtol=1e-4, atol=1e-5)


def test_mlp_block_dropout_only_when_asked():
  x = jnp.asarray(np.random.default_rng(3).normal(size=(4, 5, 8)), jnp.float32)
  plain = layers.MlpBlock(mlp_dim=16)
  variables = meta.unbox(plain.init(jax.random.PRNGKey(0), x))
  want = plain.apply(variables, x)
  # The default rate is 0: not deterministic, still no RNG needed and the same output.
  np.testing.assert_array_equal(plain.apply(variables, x, deterministic=False), want)
  drop = layers.MlpBlock(mlp_dim=16, dropout_rate=0.5)
  np.testing.assert_array_equal(drop.apply(variables, x), want)  # deterministic by default
  noisy = drop.apply(variables, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(5)})
  assert not np.allclose(noisy, want)


def test_initializer_scales():
  """MLP kernels: truncated normal with variance 1 / fan_in (docs/t5_reference.md §3.3);
  the embedding: normal with the given stddev."""
  d, f = 256, 512
  x = jnp.ones((1, 1, d), jnp.float32)
  _, params = _apply(layers.MlpBlock(mlp_dim=f, activation="relu"), x)
  for name, fan_in in (("wi", d), ("wo", f)):
    w = np.asarray(params[name], np.float64)
    np.testing.assert_allclose(w.std(), 1 / math.sqrt(fan_in), rtol=0.03)
    assert np.abs(w).max() <= 2 / math.sqrt(fan_in) / 0.87962566 + 1e-6  # truncated at 2 sd
  embed = layers.Embed(vocab_size=400, emb_dim=64, stddev=0.5)
  params = meta.unbox(embed.init(jax.random.PRNGKey(0), jnp.zeros((1, 2), jnp.int32)))["params"]
  np.testing.assert_allclose(np.asarray(params["embedding"]).std(), 0.5, rtol=0.03)
  assert layers.Embed(vocab_size=2, emb_dim=2).stddev == 1.0


def test_param_with_axes_refuses_a_shape_and_axes_of_different_lengths():
  class M(nn.Module):
    shape: tuple
    axes: tuple

    @nn.compact
    def __call__(self):
      return layers.param_with_axes(self, "w", nn.initializers.ones, self.shape, self.axes)

  assert M((2, 3), ("embed", "mlp")).init(jax.random.PRNGKey(0))["params"]["w"].unbox().shape == (2, 3)
  for shape, axes in (((2, 3), ("embed",)), ((2,), ("embed", "mlp"))):
    with pytest.raises(AssertionError):
      M(shape, axes).init(jax.random.PRNGKey(0))


def test_gemma_rmsnorm_scales_by_one_plus_a_zero_initialised_scale():
  """Gemma's RMSNorm: factor 1 + scale, scale initialised to 0, so at init it equals T5's
  RMSNorm at init (scale 1); a scale w gives T5's with scale 1 + w."""
  x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 8)), jnp.float32)
  gemma = layers.make_norm("gemma_rmsnorm", jnp.float32, "n")
  t5 = layers.make_norm("rmsnorm", jnp.float32, "n")
  params = nn.meta.unbox(gemma.init(jax.random.PRNGKey(0), x))
  np.testing.assert_array_equal(params["params"]["scale"], np.zeros(8))
  w = jnp.linspace(-0.5, 0.5, 8)
  np.testing.assert_allclose(gemma.apply({"params": {"scale": w}}, x),
                             t5.apply({"params": {"scale": 1.0 + w}}, x), rtol=1e-6, atol=1e-6)
