"""Resume with dropout ON: the restored RNG and step must reproduce the dropout masks.

With dropout 0 the train state's RNG never influences the result, so a broken RNG restore
would pass a resume test; the fast suite's resume test (tests/test_train.py, SIGTERM at step
3) runs with dropout on, and this slow one shows why that has teeth. Dropout is 0.3:
  1. 4 steps + resume to 8 == 8 steps in one run (identical logged losses);
  2. the same resume with the restored RNG replaced by another key (what a broken
     restore would do) gives different losses after the resume (teeth), and the same
     ones before it.
"""
import os
import shutil

import jax
import pytest

from configs import t5
from lm import config as config_lib
from lm.validate import validate


def _config(steps):
  config = config_lib.derive(t5.get_config("runlocal"))
  config.train.num_steps = steps
  config.train.log_every = 2
  config.train.eval_every = 0
  config.ckpt.every_steps = 2
  config.ckpt.async_save = False
  config.wandb.mode = "disabled"
  config.model.dropout_rate = 0.3
  return config


def _losses(workdir):
  import json
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    return {m["step"]: m["loss"] for m in map(json.loads, f) if "loss" in m}


@pytest.mark.slow
def test_resume_with_dropout_reproduces_the_masks_and_a_wrong_rng_would_not(tmp_path,
                                                                              monkeypatch):
  from lm import checkpoint, train
  whole, split, wrong = (str(tmp_path / n) for n in ("whole", "split", "wrong"))
  train.train_and_evaluate(validate(_config(8)), whole)
  train.train_and_evaluate(validate(_config(4)), split)
  shutil.copytree(split, wrong)
  train.train_and_evaluate(validate(_config(8)), split)
  want = _losses(whole)
  assert sorted(want) == [2, 4, 6, 8]
  assert _losses(split) == want

  restore = checkpoint.CheckpointManager.restore_or_none

  def restore_with_another_rng(self, *args, **kwargs):
    out = restore(self, *args, **kwargs)
    if out is None:
      return out
    state, data_state = out
    rng = jax.random.fold_in(state.rng, 12345)
    return state.replace(rng=jax.device_put(rng, state.rng.sharding)), data_state

  monkeypatch.setattr(checkpoint.CheckpointManager, "restore_or_none",
                      restore_with_another_rng)
  train.train_and_evaluate(validate(_config(8)), wrong)
  got = _losses(wrong)
  assert [got[s] for s in (2, 4)] == [want[s] for s in (2, 4)]  # before the resume
  assert got[6] != want[6] and got[8] != want[8]  # the RNG matters after it
