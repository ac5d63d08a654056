"""lm.model.fast_grads: each CPU-speed function equals its plain counterpart, values and gradients.

The attention core and the bucket lookup are also checked through their callers
(test_attention.py, test_masks.py); here each function is held against the textbook
expression differentiated by JAX, so a wrong hand-written backward fails by name.
"""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

from lm.model import fast_grads


def _normal(rng, shape, dtype=jnp.float32):
  return jnp.asarray(rng.normal(size=shape), dtype)


def _check_vjp(fast, plain, args, rtol, atol):
  """fast(*args) == plain(*args), and so are their VJPs for a random cotangent."""
  got, got_vjp = jax.vjp(fast, *args)
  want, want_vjp = jax.vjp(plain, *args)
  np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                             rtol=rtol, atol=atol)
  d_out = _normal(np.random.default_rng(7), got.shape, got.dtype)
  for g, w in zip(got_vjp(d_out), want_vjp(d_out)):
    np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32),
                               rtol=rtol, atol=atol)


@pytest.mark.parametrize("num_contract", [1, 2])
def test_dense_is_the_einsum(num_contract):
  rng = np.random.default_rng(0)
  x = _normal(rng, (2, 3, 4, 5))
  kernel = _normal(rng, (4, 5, 6) if num_contract == 2 else (5, 6, 2))
  spec = "BLKC,KCM->BLM" if num_contract == 2 else "BLKC,CMN->BLKMN"
  _check_vjp(lambda a, k: fast_grads.dense(a, k, num_contract=num_contract),
             lambda a, k: jnp.einsum(spec, a, k), (x, kernel), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_shape,k_shape,num_contract", [
    ((2, 3, 4), (5, 6), 1), ((2, 3, 4, 5), (4, 6, 7), 2), ((2, 3, 4, 5), (5, 4, 7), 2),
    ((2, 3, 4), (3, 6), 1)])
def test_dense_refuses_contracted_axes_of_other_sizes(x_shape, k_shape, num_contract):
  with pytest.raises(ValueError, match=r"dense contracts x's last .* with kernel's first"):
    fast_grads.dense(jnp.ones(x_shape), jnp.ones(k_shape), num_contract=num_contract)


def test_dense_preferred_element_type():
  x = jnp.ones((2, 3, 4), jnp.bfloat16)
  assert fast_grads.dense(x, jnp.ones((4, 5), jnp.bfloat16),
                          preferred_element_type=jnp.float32).dtype == jnp.float32


@pytest.mark.parametrize("dtype,tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)])
def test_gated_gelu_matches_autodiff(dtype, tol):
  rng = np.random.default_rng(1)
  a, b = _normal(rng, (2, 3, 16), dtype) * 3, _normal(rng, (2, 3, 16), dtype)
  _check_vjp(fast_grads.gated_gelu, lambda a, b: jax.nn.gelu(a, approximate=True) * b,
             (a, b), rtol=tol, atol=tol)


def test_lookup_buckets_matches_autodiff():
  rng = np.random.default_rng(2)
  table = _normal(rng, (3, 8))
  buckets = jnp.asarray(rng.integers(0, 8, (2, 5, 6)), jnp.int32)
  got, vjp = jax.vjp(lambda t: fast_grads.lookup_buckets(t, buckets), table)
  want, want_vjp = jax.vjp(lambda t: jnp.transpose(t[:, buckets], (1, 0, 2, 3)), table)
  np.testing.assert_array_equal(got, want)
  d = _normal(rng, got.shape)
  np.testing.assert_allclose(vjp(d)[0], want_vjp(d)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dropout,shape,softcap", [
    (False, (2, 4, 5, 3, 8), None), (True, (2, 4, 5, 3, 8), None),
    (False, (3, 4, 5, 1, 8), None),  # one head: a [1, N, L, S] bias's gradient sums the batch
    (False, (3, 4, 1, 2, 8), None),  # one key
    # Soft-capped scores (Gemma 2): a cap below the scores' spread (|Q K^T| reaches ~10
    # here), so the tanh's gradient 1 - tanh^2 is far from 1; with dropout too.
    (False, (2, 4, 5, 3, 8), 2.0), (True, (2, 4, 5, 3, 8), 2.0),
])
def test_attend_matches_autodiff(dropout, shape, softcap):
  rng = np.random.default_rng(3)
  b, l, s, n, h = shape
  q, k, v = _normal(rng, (b, l, n, h)), _normal(rng, (b, s, n, h)), _normal(rng, (b, s, n, h))
  biases = (_normal(rng, (b, 1, l, s)), _normal(rng, (1, n, l, s)))
  scale = None
  if dropout:
    scale = jnp.asarray(rng.integers(0, 2, (b, n, 1, s)) * 2.0, jnp.float32)

  def plain(q, k, v, m, p):
    scores = jnp.einsum("BLNH,BSNH->BNLS", q, k)
    if softcap is not None:
      scores = softcap * jnp.tanh(scores / softcap)
    probs = jax.nn.softmax(scores + m + p, axis=-1)
    probs = probs if scale is None else probs * scale
    return jnp.einsum("BNLS,BSNH->BLNH", probs, v)

  _check_vjp(lambda q, k, v, m, p: fast_grads.attend(q, k, v, (m, p), scale,
                                                     jnp.dtype(jnp.float32), softcap),
             plain, (q, k, v) + biases, rtol=1e-4, atol=1e-5)
  if softcap is not None:  # the cap bites: uncapped attention differs
    uncapped = fast_grads.attend(q, k, v, biases, scale, jnp.dtype(jnp.float32))
    assert float(jnp.max(jnp.abs(uncapped - plain(q, k, v, *biases)))) > 0.1


def test_bucket_sums_are_the_same_in_both_forms():
  """The CPU form (segment sums) and the GPU/TPU form (masked reduction) of the bias gradient."""
  rng = np.random.default_rng(7)
  d_bias = _normal(rng, (3, 4, 9, 7))
  buckets = jnp.asarray(rng.integers(0, 6, (3, 9, 7)), jnp.int32)
  want = np.zeros((4, 6))
  np.add.at(want.T, np.asarray(buckets), np.moveaxis(np.asarray(d_bias), 1, -1))
  for form in (fast_grads.bucket_sums_segment, fast_grads.bucket_sums_onehot):
    got = jax.jit(form, static_argnums=2)(d_bias, buckets, 6)
    assert got.shape == (4, 6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=form.__name__)


def test_sum_to_shape_adds_slices_on_the_cpu_only():
  """The batch sum of a [1, N, L, S] bias gradient: B slices added on the CPU, one reduce on
  GPUs and TPUs (lowered for each platform from this CPU); the CPU value is the sum."""
  x = np.random.default_rng(4).normal(size=(4, 3, 5, 6)).astype(np.float32)
  traced = jax.jit(fast_grads._sum_to_shape, static_argnums=1).trace(  # pylint: disable=protected-access
      jnp.asarray(x), (1, 3, 5, 6))
  for platform, want in (("cpu", 0), ("tpu", 1), ("cuda", 1)):
    text = traced.lower(lowering_platforms=(platform,)).as_text()
    assert sum("stablehlo.reduce" in line for line in text.splitlines()) == want, platform
  got = jax.jit(fast_grads._sum_to_shape, static_argnums=1)(jnp.asarray(x), (1, 3, 5, 6))  # pylint: disable=protected-access
  np.testing.assert_allclose(got, x.sum(0, keepdims=True), rtol=1e-6, atol=1e-6)
