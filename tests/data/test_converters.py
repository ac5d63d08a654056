"""Tests for lm/data/converters.py: every layout written out by hand."""
import numpy as np
import pytest

from lm.data import converters

EX = {"inputs": np.array([5, 6, 7], np.int32), "targets": np.array([8, 9], np.int32)}


def check(feats, expected):
  assert sorted(feats) == sorted(expected)
  for k, v in expected.items():
    np.testing.assert_array_equal(feats[k], v, err_msg=k)
    want = np.float32 if k == "decoder_loss_weights" else np.int32
    assert feats[k].dtype == want and feats[k].ndim == 1, k


def test_encoder_decoder_layout():
  check(converters.convert(EX, "encoder_decoder"), {
      "encoder_input_tokens": [5, 6, 7, 1],
      "decoder_target_tokens": [8, 9, 1],
      "decoder_input_tokens": [0, 8, 9],
      "decoder_loss_weights": [1, 1, 1],
  })


def test_prefix_lm_layout():
  check(converters.convert(EX, "prefix_lm"), {
      "decoder_target_tokens": [5, 6, 7, 1, 8, 9, 1],
      "decoder_input_tokens": [0, 5, 6, 7, 1, 8, 9],
      "decoder_causal_attention": [1, 1, 1, 1, 1, 0, 0],
      "decoder_loss_weights": [0, 0, 0, 0, 1, 1, 1],
  })
  feats = converters.convert(EX, "prefix_lm", loss_on_inputs=True)
  np.testing.assert_array_equal(feats["decoder_loss_weights"], [1] * 7)


def test_causal_layout():
  check(converters.convert(EX, "causal"), {
      "decoder_target_tokens": [5, 6, 7, 1, 8, 9, 1],
      "decoder_input_tokens": [0, 5, 6, 7, 1, 8, 9],
      "decoder_causal_attention": [0] * 7,
      "decoder_loss_weights": [0, 0, 0, 0, 1, 1, 1],
  })


def test_empty_inputs_full_lm():
  ex = {"inputs": np.zeros(0, np.int32), "targets": np.array([8, 9], np.int32)}
  causal = converters.convert(ex, "causal")
  check(causal, {
      "decoder_target_tokens": [8, 9, 1],
      "decoder_input_tokens": [0, 8, 9],
      "decoder_causal_attention": [0, 0, 0],
      "decoder_loss_weights": [1, 1, 1],
  })
  prefix = converters.convert(ex, "prefix_lm")
  np.testing.assert_array_equal(prefix["decoder_causal_attention"], [1, 0, 0])  # BOS only
  for k in ("decoder_target_tokens", "decoder_input_tokens", "decoder_loss_weights"):
    np.testing.assert_array_equal(prefix[k], causal[k])
  # encoder-decoder follows seqio: the encoder gets [EOS].
  np.testing.assert_array_equal(converters.convert(ex, "encoder_decoder")["encoder_input_tokens"],
                                [1])


def test_trimming_is_append_eos_after_trim():
  ex = {"inputs": np.arange(10, 20, dtype=np.int32), "targets": np.arange(30, 36, dtype=np.int32)}
  lengths = {"inputs": 4, "targets": 3}
  check(converters.convert(ex, "encoder_decoder", lengths=lengths), {
      "encoder_input_tokens": [10, 11, 12, 1],
      "decoder_target_tokens": [30, 31, 1],
      "decoder_input_tokens": [0, 30, 31],
      "decoder_loss_weights": [1, 1, 1],
  })
  check(converters.convert(ex, "prefix_lm", lengths=lengths), {
      "decoder_target_tokens": [10, 11, 12, 1, 30, 31, 1],
      "decoder_input_tokens": [0, 10, 11, 12, 1, 30, 31],
      "decoder_causal_attention": [1, 1, 1, 1, 1, 0, 0],
      "decoder_loss_weights": [0, 0, 0, 0, 1, 1, 1],
  })
  # Shorter than the budget: untouched, EOS appended.
  feats = converters.convert(EX, "encoder_decoder", lengths={"inputs": 512, "targets": 114})
  np.testing.assert_array_equal(feats["encoder_input_tokens"], [5, 6, 7, 1])


def test_shift_right():
  np.testing.assert_array_equal(converters.shift_right(np.array([8, 9, 1])), [0, 8, 9])
  tokens = np.array([8, 9, 1, 4, 1, 0])
  seg = np.array([1, 1, 1, 2, 2, 0])
  np.testing.assert_array_equal(converters.shift_right(tokens, seg), [0, 8, 9, 0, 4, 0])
  batch = np.stack([tokens, np.array([3, 1, 5, 6, 1, 7])])
  segs = np.stack([seg, np.array([1, 1, 2, 2, 2, 3])])
  np.testing.assert_array_equal(converters.shift_right(batch, segs),
                                [[0, 8, 9, 0, 4, 0], [0, 3, 0, 5, 6, 0]])
  assert converters.shift_right(batch).dtype == np.int32
  with pytest.raises(ValueError, match="segment_ids shape"):
    converters.shift_right(tokens, seg[:3])


def test_bad_arguments():
  with pytest.raises(ValueError, match="unknown architecture 'decoder'.*encoder_decoder"):
    converters.convert(EX, "decoder")
  with pytest.raises(ValueError, match="lacks"):
    converters.convert({"targets": [1]}, "causal")
  with pytest.raises(ValueError, match="lengths keys"):
    converters.convert(EX, "causal", lengths={"input": 3})
  with pytest.raises(ValueError, match=">= 1"):
    converters.convert(EX, "causal", lengths={"targets": 0})
  with pytest.raises(ValueError, match="decoder-only"):
    converters.convert(EX, "encoder_decoder", loss_on_inputs=True)


def test_targets_eos_false_trims_without_eos():
  """full_lm's chunks (targets_eos=False): trimmed to the length, no EOS appended."""
  ex = {"inputs": np.zeros(0, np.int32), "targets": np.arange(30, 36, dtype=np.int32)}
  feats = converters.convert(ex, "causal", lengths={"targets": 3}, targets_eos=False)
  np.testing.assert_array_equal(feats["decoder_target_tokens"], [30, 31, 32])
  feats = converters.convert(ex, "causal", targets_eos=False)
  np.testing.assert_array_equal(feats["decoder_target_tokens"], np.arange(30, 36))


def test_length_one_holds_only_the_eos_and_extra_fields_are_ignored():
  feats = converters.convert({**EX, "id": np.array([7])}, "encoder_decoder",
                             lengths={"inputs": 1, "targets": 1})
  np.testing.assert_array_equal(feats["encoder_input_tokens"], [1])
  np.testing.assert_array_equal(feats["decoder_target_tokens"], [1])
  np.testing.assert_array_equal(feats["decoder_input_tokens"], [0])


def test_shift_right_refuses_longer_segment_ids():
  with pytest.raises(ValueError, match="segment_ids shape"):
    converters.shift_right(np.array([8, 9, 1]), np.array([1, 1, 1, 1]))


GEMMA = converters.Framing(decoder_start=2, prompt_bos=2, prompt_eos=False)


def test_frame_lays_out_a_prompt_for_either_stack():
  """Framing.frame by hand: the encoder's row, and the decoder-only row after decoder_start
  (only decoder_start for an empty prompt)."""
  t5 = converters.T5_FRAMING
  assert t5.frame([5, 6], decoder_only=False) == [5, 6, 1]
  assert t5.frame(np.array([5, 6]), decoder_only=True) == [0, 5, 6, 1]
  assert t5.frame([], decoder_only=True) == [0]
  assert t5.frame([], decoder_only=False) == [1]
  assert GEMMA.frame([5, 6], decoder_only=False, eos_id=9) == [2, 5, 6]
  assert GEMMA.frame([5, 6], decoder_only=True) == [2, 2, 5, 6]
  assert GEMMA.frame([], decoder_only=True) == [2]
  both = converters.Framing(decoder_start=3, prompt_bos=4, prompt_eos=True)
  assert both.frame([5], decoder_only=True, eos_id=7) == [3, 4, 5, 7]
  assert (t5.overhead, GEMMA.overhead, both.overhead) == (1, 1, 2)
  assert converters.Framing(prompt_eos=False).overhead == 0


def test_frame_inputs_refuses_a_length_without_room_for_the_framing():
  """The smallest length each framing can hold, and the message naming what it holds."""
  cases = ((converters.T5_FRAMING, 1, "EOS"), (GEMMA, 1, "BOS"),
           (converters.Framing(prompt_bos=2), 2, "BOS and EOS"),
           (converters.Framing(prompt_eos=False), 1, "input"))
  for framing, need, held in cases:
    with pytest.raises(ValueError, match=f"length must be >= {need} to hold the {held}, got "
                                         f"{need - 1}"):
      framing.frame_inputs(np.array([5, 6, 7]), need - 1, 1)
    got = framing.frame_inputs(np.array([5, 6, 7]), need, 1)
    assert got.dtype == np.int32 and len(got) == need
  bare = converters.Framing(prompt_eos=False)
  np.testing.assert_array_equal(bare.frame_inputs(np.array([5, 6, 7]), 2, 1), [5, 6])
  np.testing.assert_array_equal(GEMMA.frame_inputs(np.array([5, 6, 7]), 3, 1), [2, 5, 6])
  np.testing.assert_array_equal(GEMMA.frame_inputs(np.array([5, 6, 7]), None, 1), [2, 5, 6, 7])


def test_architecture_names_built_at_run_time():
  """A name read from a flag or config is equal to the literal but not the same object."""
  enc_dec = "".join(["encoder", "_decoder"])
  prefix = "".join(["prefix", "_lm"])
  check(converters.convert(EX, enc_dec), {
      "encoder_input_tokens": [5, 6, 7, 1], "decoder_target_tokens": [8, 9, 1],
      "decoder_input_tokens": [0, 8, 9], "decoder_loss_weights": [1, 1, 1]})
  np.testing.assert_array_equal(converters.convert(EX, prefix)["decoder_causal_attention"],
                                [1, 1, 1, 1, 1, 0, 0])
