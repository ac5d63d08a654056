"""lm.generation's model glue: DecodeConfig, prompt_batch, the cache gather, model_decoder,
decode and make_decode_fn, against explicit expectations (the searches themselves:
tests/test_decoding_search.py)."""
import dataclasses
import os
import sys

import numpy as np
import pytest

from lm import generation

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "model"))
from model_helpers import runtime_str, tiny  # noqa: E402


def test_decode_config_defaults_and_checks():
  c = generation.DecodeConfig()
  assert (c.method, c.max_decode_length, c.beam_size, c.alpha, c.length_penalty, c.eos_ids) == (
      "greedy", 64, 4, 0.6, "t5", (1,))
  assert c.sampling == generation.SamplingConfig()
  # eos_ids: any ids >= 0 (0 included), made a tuple of ints.
  assert generation.DecodeConfig(eos_ids=[np.int64(1), 107]).eos_ids == (1, 107)
  assert generation.DecodeConfig(eos_ids=(0,)).eos_ids == (0,)
  for bad in ((), (-1,), (1, -2)):
    with pytest.raises(ValueError, match="eos_ids must be one or more ids >= 0"):
      generation.DecodeConfig(eos_ids=bad)
  assert generation.DecodeConfig(beam_size=1).beam_size == 1
  for bad in (0, 1.5):
    with pytest.raises(ValueError, match="beam_size must be a positive int"):
      generation.DecodeConfig(beam_size=bad)
  for bad in (0, 2.0):
    with pytest.raises(ValueError, match="max_decode_length must be a positive int"):
      generation.DecodeConfig(max_decode_length=bad)
  assert generation.DecodeConfig(max_decode_length=1).max_decode_length == 1
  with pytest.raises(ValueError, match="unknown length_penalty 'gnmt'"):
    generation.DecodeConfig(length_penalty="gnmt")
  # alpha: finite; >= 0 only where T5's beam search needs it (0 itself is fine).
  for ok in (dict(method="beam", alpha=0.0), dict(method="beam", alpha=0.6),
             dict(method="beam", alpha=-0.5, length_penalty="hf"), dict(method="greedy", alpha=-0.5),
             dict(method="sample", alpha=-0.5)):
    assert generation.DecodeConfig(**ok).alpha == ok["alpha"]
  # Names built at run time (a flag's value) are the same names.
  with pytest.raises(ValueError, match="alpha must be finite"):
    generation.DecodeConfig(method=runtime_str("beam"), length_penalty=runtime_str("t5"), alpha=-0.5)
  with pytest.raises(dataclasses.FrozenInstanceError):
    c.beam_size = 2  # a config is a value (jit closes over it)
  for bad in (dict(method="beam", alpha=-0.5), dict(method="beam", alpha=-1e-9),
              dict(alpha=float("inf")), dict(alpha=float("-inf")), dict(alpha=float("nan"))):
    with pytest.raises(ValueError, match="alpha must be finite"):
      generation.DecodeConfig(**bad)


def test_prompt_batch_sizes():
  cfg = tiny()
  # batch_size equal to the number of prompts adds nothing; fewer is an error.
  same = generation.prompt_batch([[5, 6], [7]], cfg, batch_size=2)
  np.testing.assert_array_equal(same["encoder_input_tokens"], [[5, 6, 1], [7, 1, 0]])
  with pytest.raises(ValueError, match="batch_size 1 < number of prompts 2"):
    generation.prompt_batch([[5, 6], [7]], cfg, batch_size=1)
  # input_length above the longest row pads; exactly the longest row fits.
  padded = generation.prompt_batch([[5, 6], [7]], cfg, input_length=5)
  np.testing.assert_array_equal(padded["encoder_input_tokens"], [[5, 6, 1, 0, 0], [7, 1, 0, 0, 0]])
  exact = generation.prompt_batch([[5, 6], [7]], cfg, input_length=3)
  np.testing.assert_array_equal(exact["encoder_input_tokens"], same["encoder_input_tokens"])
  with pytest.raises(ValueError, match="a prompt needs 3 tokens .* input_length is 2"):
    generation.prompt_batch([[5, 6], [7]], cfg, input_length=2)
  # A mask type built at run time (a flag's value) is the same mask type.
  prefix = generation.prompt_batch([[5]], tiny(mask_type=runtime_str("prefix_lm")))
  np.testing.assert_array_equal(prefix["decoder_causal_attention"], [[1, 1, 1]])
  # No prompts at all: rows of length 1 (the smallest the model reads), none of them.
  assert generation.prompt_batch([], cfg)["encoder_input_tokens"].shape == (0, 1)
  assert generation.prompt_batch([], tiny(mask_type="causal"))["decoder_input_tokens"].shape == (0, 1)


def test_decode_runs_the_configs_search_with_its_settings(monkeypatch):
  """decode with stand-ins for model_decoder and the searches: each method (also named by a
  string built at run time) calls its search with the config's settings; beam search's best
  beam is returned."""
  calls = []

  def fake_decoder(model, params, batch, m):
    calls.append(("model_decoder", model, params, batch, m))
    return "first", "state", "t2l", "gather"

  def fake(name, out):
    def search(*args, **kw):
      calls.append((name, args, kw))
      return out
    return search

  seqs, scores = np.arange(12).reshape(2, 3, 2), np.arange(6.0).reshape(2, 3)
  monkeypatch.setattr(generation, "model_decoder", fake_decoder)
  monkeypatch.setattr(generation, "greedy_search", fake("greedy", ("g", "gs")))
  monkeypatch.setattr(generation, "temperature_sample", fake("sample", ("s", "ss")))
  monkeypatch.setattr(generation, "beam_search", fake("beam", (seqs, scores)))
  searched = ("first", "state", "t2l")
  sampling = generation.SamplingConfig(temperature=0.5, top_k=3)
  for method in ("greedy", "sample", "beam"):
    for name in (method, runtime_str(method)):
      calls.clear()
      config = generation.DecodeConfig(method=name, max_decode_length=5, sampling=sampling, beam_size=3,
                                     alpha=0.2, length_penalty="hf", eos_ids=(1, 7))
      out = generation.decode("model", {"w": 1}, {"x": 2}, config, rng="key", row_ids="ids")
      assert calls[0] == ("model_decoder", "model", {"w": 1}, {"x": 2}, 5)
      assert len(calls) == 2 and calls[1][0] == method and calls[1][1] == searched, calls
      kw = calls[1][2]
      if method == "greedy":
        assert out == ("g", "gs") and kw == dict(max_decode_length=5, eos_id=(1, 7))
      elif method == "sample":
        assert out == ("s", "ss") and kw == dict(rng="key", max_decode_length=5, config=sampling,
                                                  row_ids="ids", eos_id=(1, 7))
      else:
        np.testing.assert_array_equal(out[0], seqs[:, 0])
        np.testing.assert_array_equal(out[1], scores[:, 0])
        assert kw == dict(beam_size=3, max_decode_length=5, alpha=0.2, length_penalty="hf",
                          eos_id=(1, 7), gather_fn="gather")
  with pytest.raises(ValueError, match="sampling needs an rng key"):
    generation.decode("model", {}, {}, generation.DecodeConfig(method="sample"))


# ---------------------------------------------------------------------------------------
# The model (a tiny causal decoder: the cheapest to compile).

def causal_model(seed=0):
  from lm.model.transformer import Transformer
  from model_helpers import random_params
  cfg = tiny(mask_type="causal", position_encoding="rope")
  model = Transformer(cfg)
  return cfg, model, random_params(model, {"decoder_input_tokens": np.zeros((1, 4), np.int32)}, seed)


def test_model_decoder_wants_one_decoder_start_per_row():
  from lm.model.transformer import Transformer
  model = Transformer(tiny())
  batch = generation.prompt_batch([[5, 6], [7], [8]], tiny())
  for shape in [(3, 2), (2, 1), (3,), (4, 1)]:
    with pytest.raises(ValueError, match=r"decoder_input_tokens must be \[B, 1\] = \[3, 1\]"):
      generation.model_decoder(model, None, dict(batch, decoder_input_tokens=np.zeros(shape, np.int32)), 4)


def test_beam_gather_of_a_scanned_cache_takes_rows_on_axis_1():
  """With scan_layers the layer caches are [layers, N, ...]: beam search's gather takes the
  rows on axis 1 (and keeps the cross-attention cache at one row per example)."""
  import jax
  import jax.numpy as jnp
  from lm.model.transformer import Transformer
  from model_helpers import random_params
  cfg = tiny(num_decoder_layers=2, scan_layers=True)
  model = Transformer(cfg)
  params = random_params(model, {"encoder_input_tokens": np.ones((1, 4), np.int32),
                                 "decoder_input_tokens": np.zeros((1, 4), np.int32)})
  batch = generation.prompt_batch([[5, 9, 3], [11], [4, 4]], cfg)
  state = jax.jit(lambda p, b: generation.model_decoder(model, p, b, 4)[1])(params, batch)
  gather = generation._cache_gather_fn(cfg)  # what model_decoder returns for this config
  expanded = gather(state, jnp.repeat(jnp.arange(3), 2))
  swapped = gather(expanded, jnp.asarray([1, 0, 3, 2, 5, 4]))
  layers = state["cache"]["decoder"]["layers"]
  key = np.asarray(layers["self_attention"]["cached_key"])
  assert key.shape[:2] == (2, 3)
  np.testing.assert_array_equal(expanded["cache"]["decoder"]["layers"]["self_attention"]["cached_key"],
                                key[:, [0, 0, 1, 1, 2, 2]])
  np.testing.assert_array_equal(swapped["cache"]["decoder"]["layers"]["self_attention"]["cached_key"],
                                key[:, [0, 0, 1, 1, 2, 2]][:, [1, 0, 3, 2, 5, 4]])
  np.testing.assert_array_equal(expanded["cache"]["decoder"]["cache_valid"],
                                np.asarray(state["cache"]["decoder"]["cache_valid"])[[0, 0, 1, 1, 2, 2]])
  shared = expanded["cache"]["decoder"]["layers"]["encoder_decoder_attention"]["cached_key"]
  np.testing.assert_array_equal(shared, layers["encoder_decoder_attention"]["cached_key"])


def test_sampling_on_a_mesh_equals_one_device():
  """make_decode_fn on a mesh places the batch and the row ids (each row's seed) row by row."""
  import jax
  cfg, model, params = causal_model()
  prompts = [[5, 9, 3], [11], [4, 4, 8], [7], [2, 3], [6], [12, 13], [9]]
  batch = generation.prompt_batch(prompts, cfg)
  config = generation.DecodeConfig(method="sample", max_decode_length=4,
                                 sampling=generation.SamplingConfig(temperature=3.0))
  ids = np.arange(8)[::-1]
  rng = jax.random.PRNGKey(0)
  single = generation.make_decode_fn(model, config)(params, batch, rng, ids)
  from lm import partitioning
  mesh = partitioning.make_mesh((4, 2, 1))
  sharded = generation.make_decode_fn(model, config, mesh=mesh)(params, batch, rng, ids)
  assert len(sharded[0].sharding.device_set) == 8
  np.testing.assert_array_equal(np.asarray(sharded[0]), np.asarray(single[0]))
  np.testing.assert_allclose(np.asarray(sharded[1]), np.asarray(single[1]), rtol=1e-5)
