"""lm.train's pure helpers (the rest of lm.train is tested by running it: tests/test_train.py)."""
import logging

import numpy as np
import pytest

from lm import program, train


@pytest.mark.parametrize("arch,lengths", [
    ("encoder_decoder", {"encoder": 7, "decoder": 5}),
    ("prefix_lm", {"decoder": 12}),   # decoder-only: inputs + targets in one row
])
def test_batch_shapes_and_dummy_batch_are_the_training_features(arch, lengths):
  stacks = list(lengths)
  keys = {f"{s}_{f}" for s in stacks for f in ("segment_ids", "positions")}
  keys |= {"decoder_input_tokens", "decoder_target_tokens", "decoder_loss_weights"}
  keys |= {"encoder_input_tokens"} if arch == "encoder_decoder" else {"decoder_causal_attention"}
  for batch_size, kwargs in ((1, {}), (3, {"batch_size": 3})):
    shapes = program.batch_shapes(arch, 7, 5, **kwargs)
    zeros = program.dummy_batch(arch, 7, 5, **kwargs)
    assert set(shapes) == set(zeros) == keys
    for k in keys:
      want = (batch_size, lengths[k.split("_")[0]])
      dtype = np.float32 if k == "decoder_loss_weights" else np.int32
      assert shapes[k].shape == zeros[k].shape == want, k
      assert shapes[k].dtype == zeros[k].dtype == dtype, k
      assert not zeros[k].any(), k


def test_starved_warning_only_above_the_threshold(caplog):
  warn = train._warn_if_starved  # pylint: disable=protected-access
  with caplog.at_level(logging.WARNING):
    assert not warn({}, 10)
    assert not warn({"data_wait_fraction": train.STARVED_FRACTION}, 10)
    assert not caplog.records
    assert warn({"data_wait_fraction": 0.9}, 10)
  assert len(caplog.records) == 1
  assert "waited for batches 90% of the last 10 steps" in caplog.records[0].getMessage()


def test_preempted_carries_the_step_and_says_how_to_resume():
  err = train.Preempted(42)
  assert err.step == 42
  assert "at step 42" in str(err) and "run the same command again to resume" in str(err)
  assert issubclass(train.NonFiniteError, ValueError)
