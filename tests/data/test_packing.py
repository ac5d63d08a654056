"""Tests for lm/data/packing.py, and grain's packer as the pipeline uses it."""
import numpy as np
import pytest
from grain import experimental as grain_experimental
import grain

from lm.data import converters, packing


def _encdec(inputs, targets):
  return converters.convert({"inputs": np.array(inputs, np.int32),
                             "targets": np.array(targets, np.int32)}, "encoder_decoder")


def test_pack_structure_hand_derived():
  rows = packing.pack_examples([_encdec([5, 6], [8, 9]), _encdec([7], [7])],
                               {"encoder": 6, "decoder": 6})
  assert len(rows) == 1
  r = rows[0]
  np.testing.assert_array_equal(r["encoder_input_tokens"], [5, 6, 1, 7, 1, 0])
  np.testing.assert_array_equal(r["encoder_segment_ids"], [1, 1, 1, 2, 2, 0])
  np.testing.assert_array_equal(r["encoder_positions"], [0, 1, 2, 0, 1, 0])
  np.testing.assert_array_equal(r["decoder_target_tokens"], [8, 9, 1, 7, 1, 0])
  np.testing.assert_array_equal(r["decoder_input_tokens"], [0, 8, 9, 0, 7, 0])
  np.testing.assert_array_equal(r["decoder_loss_weights"], [1, 1, 1, 1, 1, 0])
  np.testing.assert_array_equal(r["decoder_segment_ids"], [1, 1, 1, 2, 2, 0])
  np.testing.assert_array_equal(r["decoder_positions"], [0, 1, 2, 0, 1, 0])
  assert packing.packing_efficiency(r) == pytest.approx(10 / 12)


def test_first_fit_policy_and_padding():
  # Encoder lengths 4, 3, 2 (with EOS) into rows of 5: [4], [3, 2].
  exs = [_encdec([3, 3, 3], [4]), _encdec([3, 3], [4]), _encdec([3], [4])]
  rows = packing.pack_examples(exs, {"encoder": 5, "decoder": 5})
  assert [list(r["encoder_segment_ids"]) for r in rows] == [[1, 1, 1, 1, 0], [1, 1, 1, 2, 2]]
  padded = packing.pad_example(exs[2], {"encoder": 5, "decoder": 5})
  np.testing.assert_array_equal(padded["encoder_input_tokens"], [3, 1, 0, 0, 0])
  np.testing.assert_array_equal(padded["decoder_segment_ids"], [1, 1, 0, 0, 0])
  with pytest.raises(ValueError, match="more than the row length"):
    packing.pad_example(exs[0], {"encoder": 3, "decoder": 5})


def test_decoder_only_loss_only_on_targets():
  ex = converters.convert({"inputs": np.array([5, 6], np.int32),
                           "targets": np.array([8], np.int32)}, "prefix_lm")
  rows = packing.pack_examples([ex, ex], packing.feature_lengths("prefix_lm", 4, 6))
  r = rows[0]
  np.testing.assert_array_equal(r["decoder_target_tokens"], [5, 6, 1, 8, 1, 5, 6, 1, 8, 1])
  np.testing.assert_array_equal(r["decoder_loss_weights"], [0, 0, 0, 1, 1] * 2)
  np.testing.assert_array_equal(r["decoder_causal_attention"], [1, 1, 1, 1, 0] * 2)
  np.testing.assert_array_equal(r["decoder_input_tokens"], [0, 5, 6, 1, 8] * 2)
  np.testing.assert_array_equal(r["decoder_segment_ids"], [1] * 5 + [2] * 5)


def _grain_pack(examples, lengths, bins):
  keys = list(examples[0])
  ds = grain.MapDataset.source(examples).to_iter_dataset()
  packed = grain_experimental.FirstFitPackIterDataset(
      ds, length_struct={k: lengths[packing.stack_of(k)] for k in keys},
      num_packing_bins=bins, shuffle_bins=False)
  return [packing.rename_packed(r) for r in packed]


@pytest.mark.parametrize("arch", ["encoder_decoder", "prefix_lm"])
def test_grain_packer_matches_reference_and_keeps_every_token(arch):
  rng = np.random.default_rng(0)
  exs = [converters.convert({"inputs": rng.integers(3, 50, rng.integers(1, 9)).astype(np.int32),
                             "targets": rng.integers(3, 50, rng.integers(1, 5)).astype(np.int32)},
                            arch) for _ in range(40)]
  lengths = packing.feature_lengths(arch, 10, 6)
  rows = _grain_pack(exs, lengths, bins=len(exs))  # One window: same as the reference.
  ref = packing.pack_examples(exs, lengths)
  assert len(rows) == len(ref)
  for g, r in zip(rows, ref):
    assert set(g) == set(r)
    for k in r:
      np.testing.assert_array_equal(g[k], r[k], err_msg=k)
  # No token lost or duplicated: the multiset of (segment-local) tokens is preserved.
  for key in exs[0]:
    stack = packing.stack_of(key)
    want = np.sort(np.concatenate([e[key] for e in exs]))
    got = np.sort(np.concatenate([r[key][r[f"{stack}_segment_ids"] > 0] for r in rows]))
    np.testing.assert_array_equal(got, want, err_msg=key)
  # Small windows pack less tightly but still lose nothing.
  small = _grain_pack(exs, lengths, bins=2)
  total = sum(int(np.count_nonzero(r["decoder_segment_ids"])) for r in small)
  assert total == sum(len(e["decoder_target_tokens"]) for e in exs)


def test_rename_packed_requires_stack_prefix():
  with pytest.raises(ValueError, match="no stack"):
    packing.stack_of("tokens")
  with pytest.raises(ValueError, match="unknown architecture"):
    packing.feature_lengths("moe", 4, 4)


def test_an_example_exactly_at_the_row_length_fills_one_row():
  ex = _encdec([3, 3, 3], [4])  # 4 encoder tokens with EOS, 2 decoder tokens
  rows = packing.pack_examples([ex, ex], {"encoder": 4, "decoder": 2})
  assert len(rows) == 2
  for r in rows:
    np.testing.assert_array_equal(r["encoder_segment_ids"], [1, 1, 1, 1])
    np.testing.assert_array_equal(r["decoder_positions"], [0, 1])
  assert packing.packing_efficiency(rows[0]) == 1.0


def test_malformed_examples_are_refused_by_name():
  a = _encdec([3, 3], [4])
  b = {k: v for k, v in a.items() if k != "decoder_loss_weights"}
  with pytest.raises(ValueError, match=r"Example 1 has keys .*expected"):
    packing.pack_examples([a, b], {"encoder": 8, "decoder": 8})
  extra = dict(a, encoder_extra=np.zeros(3, np.int32))  # a key more, not fewer
  with pytest.raises(ValueError, match=r"Example 1 has keys .*expected"):
    packing.pack_examples([a, extra], {"encoder": 8, "decoder": 8})
  ragged = dict(a, decoder_loss_weights=np.ones(3, np.float32))  # the other decoder ones: 2
  with pytest.raises(ValueError, match="decoder features of an example differ in length"):
    packing.pack_examples([ragged], {"encoder": 8, "decoder": 8})
  with pytest.raises(ValueError, match="no row length"):
    packing.pack_examples([a], {"encoder": 8})
  assert packing.pack_examples([], {"encoder": 8, "decoder": 8}) == []


def test_packing_efficiency_counts_every_stack_and_needs_segment_ids():
  batch = {"encoder_segment_ids": np.array([[1, 1, 0, 0]]),
           "decoder_segment_ids": np.array([[1, 2, 2, 2, 0, 0]])}
  assert packing.packing_efficiency(batch) == pytest.approx(6 / 10)
  with pytest.raises(ValueError, match="needs \\*_segment_ids"):
    packing.packing_efficiency({"decoder_target_tokens": np.ones((1, 4))})


# --- the contract the model relies on (packing.contract_violations) --------------------

def _random_examples(arch, count, rng):
  return [converters.convert({"inputs": rng.integers(3, 50, rng.integers(1, 9)).astype(np.int32),
                              "targets": rng.integers(3, 50, rng.integers(1, 6)).astype(np.int32)},
                             arch) for _ in range(count)]


@pytest.mark.parametrize("arch", ["encoder_decoder", "prefix_lm", "causal"])
def test_every_packer_keeps_the_contract(arch):
  """Positions restart at 0 per segment, segments run 1..k then padding, and encoder and
  decoder segments pair: for the reference packer, grain's packer (the pipeline's), the
  vectorised first-fit packer and padding alike."""
  from lm.data import blocks
  rng = np.random.default_rng(1)
  exs = _random_examples(arch, 60, rng)
  lengths = packing.feature_lengths(arch, 10, 6)
  dense = blocks.first_fit_pack(exs, lengths)
  rows = (packing.pack_examples(exs, lengths) + _grain_pack(exs, lengths, bins=3)
          + [{k: v[i] for k, v in dense.items()} for i in range(len(dense["decoder_segment_ids"]))]
          + [packing.pad_example(e, lengths) for e in exs])
  assert any(r["decoder_segment_ids"].max() > 1 for r in rows)  # rows really are packed
  for r in rows:
    assert packing.contract_violations(r) == []


def test_contract_violations_are_named():
  good = packing.pack_examples([_encdec([5, 6], [8, 9]), _encdec([7], [7])],
                               {"encoder": 6, "decoder": 6})[0]
  assert packing.contract_violations(good) == []
  cases = {
      "decoder positions do not restart": dict(decoder_positions=np.array([0, 1, 2, 3, 4, 0])),
      "encoder segment ids are not 1..k": dict(encoder_segment_ids=np.array([2, 2, 2, 1, 1, 0])),
      "decoder segment ids are not 1..k": dict(decoder_segment_ids=np.array([1, 1, 0, 2, 2, 0]),
                                               decoder_positions=np.array([0, 1, 0, 0, 1, 0])),
      "are not paired": dict(encoder_segment_ids=np.array([1, 1, 1, 1, 1, 0]),
                             encoder_positions=np.array([0, 1, 2, 3, 4, 0])),
  }
  for words, change in cases.items():
    problems = packing.contract_violations({**good, **change})
    assert len(problems) == 1 and words in problems[0], (words, problems)
