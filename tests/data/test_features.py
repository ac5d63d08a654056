"""The batch contract (lm/data/features.py) is what the converter and the packer produce."""
import numpy as np
import pytest

from lm.data import converters, features, packing


def _converted(architecture):
  example = {"inputs": np.array([5, 6, 7], np.int32), "targets": np.array([8, 9], np.int32)}
  return converters.convert(example, architecture)


@pytest.mark.parametrize("architecture", features.ARCHITECTURES)
def test_feature_keys_and_dtypes_are_the_converters(architecture):
  ex = _converted(architecture)
  assert list(ex) == features.feature_keys(architecture)
  assert {k: v.dtype for k, v in ex.items()} == {
      k: np.dtype(features.dtype_of(k)) for k in features.feature_keys(architecture)}


@pytest.mark.parametrize("architecture", features.ARCHITECTURES)
@pytest.mark.parametrize("li, lt", [(6, 4), (9, 7)])
def test_batch_spec_is_the_packers_row(architecture, li, lt):
  lengths = features.feature_lengths(architecture, li, lt)
  row = packing.pad_example(_converted(architecture), lengths)
  spec = features.batch_spec(architecture, li, lt)
  assert list(row) == list(spec) == features.batch_keys(architecture)
  assert {k: (v.shape[0], v.dtype) for k, v in row.items()} == {
      k: (n, np.dtype(d)) for k, (n, d) in spec.items()}
  zeros = features.zero_batch(architecture, li, lt, 3)
  assert {k: (v.shape, v.dtype) for k, v in zeros.items()} == {
      k: ((3, n), np.dtype(d)) for k, (n, d) in spec.items()}
  assert not any(v.any() for v in zeros.values())


def test_segments_false_is_the_converted_features_only():
  zeros = features.zero_batch("prefix_lm", 4, 4, segments=False)
  assert list(zeros) == features.feature_keys("prefix_lm")
  assert zeros["decoder_input_tokens"].shape == (1, 8)
  assert zeros["decoder_loss_weights"].dtype == np.float32


def test_lengths_and_bad_architecture():
  assert features.feature_lengths("encoder_decoder", 512, 114) == {"encoder": 512, "decoder": 114}
  assert features.feature_lengths("causal", 0, 512) == {"decoder": 512}
  with pytest.raises(ValueError, match="expected one of"):
    features.feature_keys("moe")
  with pytest.raises(ValueError, match="expected one of"):
    features.batch_spec("moe", 4, 4)


def test_feature_lengths_boundaries():
  """encoder-decoder needs an input token, decoder-only rows may have none (full_lm); every
  row needs a target token."""
  assert features.feature_lengths("encoder_decoder", 1, 1) == {"encoder": 1, "decoder": 1}
  for arch in ("prefix_lm", "causal"):
    assert features.feature_lengths(arch, 0, 1) == {"decoder": 1}
    assert features.feature_lengths(arch, 3, 2) == {"decoder": 5}
  bad = [("encoder_decoder", 0, 4), ("causal", -1, 4), ("prefix_lm", 4, 0),
         ("encoder_decoder", 4, 0), ("causal", 4, -1)]
  for arch, li, lt in bad:
    with pytest.raises(ValueError, match="Lengths must be positive"):
      features.feature_lengths(arch, li, lt)
