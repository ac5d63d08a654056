"""lm.decoding's model glue: DecodeConfig, prompt_batch, the cache gather, model_decoder,
decode and make_decode_fn, against explicit expectations (the searches themselves:
tests/test_decoding_search.py)."""
import os
import sys

import numpy as np
import pytest

from lm import decoding

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "model"))
from model_helpers import tiny  # noqa: E402


def test_decode_config_defaults_and_checks():
  c = decoding.DecodeConfig()
  assert (c.method, c.max_decode_length, c.beam_size, c.alpha, c.length_penalty, c.eos_ids) == (
      "greedy", 64, 4, 0.6, "t5", (1,))
  assert c.sampling == decoding.SamplingConfig()
  # eos_ids: any ids >= 0 (0 included), made a tuple of ints.
  assert decoding.DecodeConfig(eos_ids=[np.int64(1), 107]).eos_ids == (1, 107)
  assert decoding.DecodeConfig(eos_ids=(0,)).eos_ids == (0,)
  for bad in ((), (-1,), (1, -2)):
    with pytest.raises(ValueError, match="eos_ids must be one or more ids >= 0"):
      decoding.DecodeConfig(eos_ids=bad)
  assert decoding.DecodeConfig(beam_size=1).beam_size == 1
  for bad in (0, 1.5):
    with pytest.raises(ValueError, match="beam_size must be a positive int"):
      decoding.DecodeConfig(beam_size=bad)
  for bad in (0, 2.0):
    with pytest.raises(ValueError, match="max_decode_length must be a positive int"):
      decoding.DecodeConfig(max_decode_length=bad)
  assert decoding.DecodeConfig(max_decode_length=1).max_decode_length == 1
  with pytest.raises(ValueError, match="unknown length_penalty 'gnmt'"):
    decoding.DecodeConfig(length_penalty="gnmt")
  # alpha: finite; >= 0 only where T5's beam search needs it (0 itself is fine).
  for ok in (dict(method="beam", alpha=0.0), dict(method="beam", alpha=0.6),
             dict(method="beam", alpha=-0.5, length_penalty="hf"), dict(method="greedy", alpha=-0.5),
             dict(method="sample", alpha=-0.5)):
    assert decoding.DecodeConfig(**ok).alpha == ok["alpha"]
  for bad in (dict(method="beam", alpha=-0.5), dict(method="beam", alpha=-1e-9),
              dict(alpha=float("inf")), dict(alpha=float("-inf")), dict(alpha=float("nan"))):
    with pytest.raises(ValueError, match="alpha must be finite"):
      decoding.DecodeConfig(**bad)


def test_prompt_batch_sizes():
  cfg = tiny()
  # batch_size equal to the number of prompts adds nothing; fewer is an error.
  same = decoding.prompt_batch([[5, 6], [7]], cfg, batch_size=2)
  np.testing.assert_array_equal(same["encoder_input_tokens"], [[5, 6, 1], [7, 1, 0]])
  with pytest.raises(ValueError, match="batch_size 1 < number of prompts 2"):
    decoding.prompt_batch([[5, 6], [7]], cfg, batch_size=1)
  # input_length above the longest row pads; exactly the longest row fits.
  padded = decoding.prompt_batch([[5, 6], [7]], cfg, input_length=5)
  np.testing.assert_array_equal(padded["encoder_input_tokens"], [[5, 6, 1, 0, 0], [7, 1, 0, 0, 0]])
  exact = decoding.prompt_batch([[5, 6], [7]], cfg, input_length=3)
  np.testing.assert_array_equal(exact["encoder_input_tokens"], same["encoder_input_tokens"])
  with pytest.raises(ValueError, match="a prompt needs 3 tokens .* input_length is 2"):
    decoding.prompt_batch([[5, 6], [7]], cfg, input_length=2)
  # No prompts at all: rows of length 1 (the smallest the model reads), none of them.
  assert decoding.prompt_batch([], cfg)["encoder_input_tokens"].shape == (0, 1)
  assert decoding.prompt_batch([], tiny(mask_type="causal"))["decoder_input_tokens"].shape == (0, 1)
