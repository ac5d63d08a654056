"""tools/target_loss.py: the held-out loss split by target kind, and its unigram baseline."""
import json
import math

import numpy as np
import pytest

from eval_runs import copy_run, fake_run
from tools import target_loss as tl


def test_target_kinds_marks_sentinels_and_eos():
  targets = np.array([[5, 99, 7, 98, 1, 0], [96, 1, 0, 0, 0, 0]])
  kinds = tl.target_kinds(targets, first_sentinel=97, eos_id=1)
  np.testing.assert_array_equal(kinds, [[2, 1, 2, 1, 1, 0], [2, 1, 0, 0, 0, 0]])


def test_split_totals_on_a_hand_case():
  targets = np.array([[5, 99, 7, 1, 0]])
  ll = np.log([[0.5, 0.9, 0.25, 1.0, 0.01]])   # the padding's value never counts
  correct = np.array([[True, True, False, True, True]])
  unigram = np.log(np.full(100, 0.01))
  out = tl.split_totals([(targets, ll, correct)], first_sentinel=98, eos_id=1,
                        unigram_log_probs=unigram)
  assert out[tl.TEXT]["tokens"] == 2 and out[tl.MARKER]["tokens"] == 2
  assert math.isclose(out[tl.TEXT]["cross_entropy"], -(math.log(0.5) + math.log(0.25)) / 2)
  assert math.isclose(out[tl.MARKER]["cross_entropy"], -math.log(0.9) / 2)
  assert out[tl.TEXT]["accuracy"] == 50.0 and out[tl.MARKER]["accuracy"] == 100.0
  assert math.isclose(out[tl.TEXT]["unigram_cross_entropy"], math.log(100))
  empty = tl.split_totals([], first_sentinel=98, eos_id=1, unigram_log_probs=unigram)
  assert math.isnan(empty[tl.TEXT]["cross_entropy"]) and empty[tl.TEXT]["tokens"] == 0


def test_unigram_log_probs_are_add_one_smoothed_frequencies():
  lp = tl.unigram_log_probs([[1, 1, 2], [2, 2]], vocab_size=4)
  np.testing.assert_allclose(np.exp(lp), np.array([1, 3, 4, 1]) / 9)
  assert math.isclose(np.exp(lp).sum(), 1.0)


def test_the_kinds_make_up_the_held_out_cross_entropy(tmp_path, capsys):
  """Weighted by their tokens, the two kinds give lm.heldout's cross-entropy of the same
  batches (the trainer's evaluation), and the command prints and writes them."""
  from lm import evaluate, heldout, restore  # pylint: disable=g-import-not-at-top
  run = fake_run(str(tmp_path / "run"))
  m = tl.measure(run, num_batches=2, unigram_documents=50)
  r = restore.load_run(run)
  ref = heldout.evaluate_objective(r, evaluate.heldout_settings(r).spec, num_batches=2)
  t, k = m[tl.TEXT], m[tl.MARKER]
  assert t["tokens"] + k["tokens"] == ref["target_tokens"] and min(t["tokens"], k["tokens"]) > 0
  mixed = (t["cross_entropy"] * t["tokens"] + k["cross_entropy"] * k["tokens"]) / (
      t["tokens"] + k["tokens"])
  assert mixed == pytest.approx(ref["cross_entropy"], rel=1e-5)
  assert 0 < t["unigram_cross_entropy"] < 20 and m["step"] == 4
  out = tmp_path / "m.json"
  assert tl.main([f"--workdir={run}", "--num_batches=2", "--unigram_documents=50", "--step=2",
                  f"--json={out}"]) == 0
  assert "text targets" in capsys.readouterr().out
  assert json.loads(out.read_text())["step"] == 2


def test_help_and_bad_input(tmp_path, capsys):
  with pytest.raises(SystemExit) as e:
    tl.main(["--help"])
  assert e.value.code == 0 and "marker targets" in capsys.readouterr().out
  assert tl.main([f"--workdir={tmp_path / 'nope'}"]) == 2
  assert "does not exist" in capsys.readouterr().err
  run = copy_run(fake_run(str(tmp_path / "run")), str(tmp_path / "copy"))
  assert tl.main([f"--workdir={run}", "--num_batches=0"]) == 2
  assert "--num_batches must be positive" in capsys.readouterr().err
  assert tl.main([f"--workdir={run}", "--step=3"]) == 2
  assert "available steps: 2, 4" in capsys.readouterr().err
