"""Acceptability after fine-tuning in a study: the instruments built from two suite runs
(lm.downstream.nlu_accept.instruments, lm.mini_suite.predictions), the sweep's accept stages
and the test that lets them into the contrasts (launch/accept.py, launch/yardstick.py)."""
import json
import pathlib
import shutil

import numpy as np
import pytest
from scipy import stats

from launch import accept
from launch import points as points_lib
from launch import sweep
from launch import yardstick
from lm import mini_suite
from lm.downstream import evaluation
from lm.downstream import nlu_accept

REPO = pathlib.Path(__file__).resolve().parents[1]
SUITE = mini_suite.SUITES["acceptability"]
STEPS = 10


def _predictions(right):
  """A task's validation predictions: labels alternating, `right` saying which are correct."""
  rows = []
  for i, ok in enumerate(right):
    target = nlu_accept.LABELS[i % 2]
    rows.append({"inputs": f"acceptable: sentence {i}", "target": target,
                 "prediction": target if ok else nlu_accept.LABELS[1 - i % 2]})
  return rows


def _write_suite(out, right, *, init="pretrained", accuracy=None):
  """A `lm.mini_suite --suite=acceptability` output in `out`: every task's predictions
  right where `right` says (one list for every task), its summary beside them."""
  results = {}
  for name in nlu_accept.TASKS:
    path = pathlib.Path(evaluation.predictions_path(out / "finetune", STEPS, name, "validation"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in _predictions(right)))
    results[name] = {"accuracy": 100.0 * np.mean(right) if accuracy is None else accuracy}
  (out / mini_suite.RESULTS_FILE).write_text(json.dumps({
      "suite": SUITE.name, "suite_version": SUITE.version, "steps": STEPS, "init": init,
      "results": results}))


def test_instruments_score_each_item_against_the_paired_random_initialisation():
  pre = {name: _predictions([True, True, False, True]) for name in nlu_accept.TASKS}
  rand = {name: _predictions([False, True, False, True]) for name in nlu_accept.TASKS}
  got = nlu_accept.instruments(pre, rand)
  assert sorted(got) == sorted(nlu_accept.INSTRUMENT + p for p in
                               ("agreement", "demonstrative", "article", "bigram_shift",
                                "word_swap"))
  one = got["accept/article"]
  assert one["per_item"] == [1.0, 1.0, 0.0, 1.0] and one["per_item_random"] == [0, 1, 0, 1]
  assert (one["accuracy"], one["random_init"], one["score"], one["chance"]) == (75, 50, 25, 50)
  with pytest.raises(ValueError, match="no predictions of nlu_accept_agreement from the "
                                       "randomly initialised model"):
    nlu_accept.instruments(pre, {})
  other = dict(rand, nlu_accept_article=_predictions([True] * 5))
  with pytest.raises(ValueError, match="nlu_accept_article: the pre-trained and randomly "
                                       "initialised models were scored on different items"):
    nlu_accept.instruments(pre, other)


def test_predictions_are_read_and_checked_against_the_suite_summary(tmp_path):
  _write_suite(tmp_path / "ok", [True, False, True, True])
  summary, got = mini_suite.predictions(tmp_path / "ok", SUITE)
  assert summary["init"] == "pretrained" and sorted(got) == sorted(nlu_accept.TASKS)
  assert got["nlu_accept_agreement"] == _predictions([True, False, True, True])
  _write_suite(tmp_path / "stale", [True, False], accuracy=100.0)
  with pytest.raises(ValueError, match=r"50.0000 % of its predictions are right, but .* says "
                                       "100.0; remove"):
    mini_suite.predictions(tmp_path / "stale", SUITE)
  with pytest.raises(ValueError, match="run `python -m lm.mini_suite --suite=acceptability"):
    mini_suite.predictions(tmp_path / "none", SUITE)
  with pytest.raises(ValueError, match="not 'mini' version"):
    mini_suite.predictions(tmp_path / "ok", mini_suite.MINI)


def test_learning_is_scipys_binomial_test_and_learnt_is_bonferroni_corrected():
  def runs(right_pre, right_rand):
    pre = {n: _predictions(right_pre) for n in nlu_accept.TASKS}
    rand = {n: _predictions(right_rand) for n in nlu_accept.TASKS}
    return nlu_accept.instruments(pre, rand)
  # Two seeds of 6 items in 5 tasks each: 60 items; the pre-trained model 5 of 6 right.
  tests = accept.learning({"p": [runs([1, 1, 1, 1, 1, 0], [1, 0] * 3)] * 2})
  assert [t.model for t in tests] == ["p (pre-trained)", "p (random initialisation)"]
  assert (tests[0].seeds, tests[0].correct, tests[0].items, tests[1].correct) == (2, 50, 60, 30)
  assert tests[0].p_value == pytest.approx(stats.binom.sf(49, 60, 0.5))   # P(X >= 50)
  assert tests[1].p_value == pytest.approx(stats.binom.sf(29, 60, 0.5))
  assert tests[0].accuracy == pytest.approx(100 * 50 / 60)
  assert accept.learnt(tests)
  # 10 of 10 right: p = 2^-10 = 0.00098; at a level of 0.0015 alone it passes, Bonferroni
  # over two models (0.00075 each) refuses it.
  lone = accept.Learning("x", 1, 10, 10, 0.5 ** 10)
  assert accept.learnt([lone], alpha=0.0015) and not accept.learnt([lone], alpha=0.0009)
  assert accept.above_chance([lone, lone], alpha=0.0015) == [False, False]
  assert not accept.learnt([lone, accept.Learning("y", 1, 5, 10, 0.62)], alpha=0.0015)


def test_the_accept_stages_fine_tune_from_the_run_and_from_its_random_initialisation(
    capsys, tmp_path, monkeypatch):
  monkeypatch.chdir(REPO)
  assert "accept" not in sweep.DEFAULT_STAGES and "accept" in sweep.STAGE_NAMES
  assert sweep.main(["experiments/t5_objectives.py", f"--root={tmp_path}", "--seeds=2",
                     "--seeds_of=all", "--only=bert", "--stages=accept", "--dry_run",
                     "--no_validate"]) == 0
  lines = [line.split() for line in capsys.readouterr().out.splitlines()]
  assert len(lines) == 4   # bert and bert_seed1, each fine-tuned twice
  pre, rand = lines[2], lines[3]
  assert f"--workdir={tmp_path}/bert_seed1" in pre and "--from_scratch" not in pre
  assert f"--after={tmp_path}/bert_seed1/sweep/pretrain.json" in pre
  assert f"--output={tmp_path}/bert_seed1/accept" in pre
  assert not any(a.startswith("--workdir=") for a in rand) and rand[-1] == "--from_scratch"
  assert f"--output={tmp_path}/bert_seed1/accept_random" in rand
  for argv in (pre, rand):   # the same model, fine-tuning config and seed
    assert "--suite=acceptability" in argv and "--config.train.seed=1" in argv
    config = next(a for a in argv if a.startswith("--config=configs/finetune.py:"))
    assert f"mixture={SUITE.mixture}," in config and "family=t5_1_0" in config
  with pytest.raises(ValueError, match="the accept stage runs at --scale=tiny"):
    accept.stages("w", lambda name: name, scale="paper", python="python", model_arg="")
  # The default stages leave it out.
  assert sweep.main(["experiments/t5_objectives.py", f"--root={tmp_path}", "--only=bert",
                     "--dry_run", "--no_validate"]) == 0
  assert "--suite=acceptability" not in capsys.readouterr().out


def _nlu_record(step, objective, n=40):
  items = (np.arange(n) < n // 2 + 4).astype(float)
  return {"suite": "nlu", "step": step, "objective": objective,
          "architecture": "encoder_decoder", "items_digest": {"all": "d"},
          "instruments": {"probe/x": {"accuracy": float(items.mean()), "random_init": 0.5,
                                      "per_item": items.tolist()}}}


def _c2_study(root, *, learnt):
  """C2's two points (prefix_lm, deshuffle) with nlu records and acceptability results: the
  pre-trained prefix LM right on every item when `learnt`, else on half."""
  for name, objective in (("prefix_lm", "prefix_lm"), ("deshuffle", "deshuffle")):
    (root / name / "eval").mkdir(parents=True)
    (root / name / "eval" / "nlu_step_100.json").write_text(json.dumps(
        _nlu_record(100, objective)))
    right = [True] * 20 if learnt and name == "prefix_lm" else [True, False] * 10
    _write_suite(root / name / accept.PRETRAINED_DIR, right)
    _write_suite(root / name / accept.RANDOM_DIR, [True, False] * 10, init="scratch")


@pytest.fixture(name="points")
def _points(monkeypatch):
  monkeypatch.chdir(REPO)
  return points_lib.collect("experiments/t5_objectives.py", runlocal=True)


def test_acceptability_joins_the_contrasts_only_when_some_model_learnt_it(tmp_path, points):
  for learnt in (False, True):
    root = tmp_path / str(learnt)
    _c2_study(root, learnt=learnt)
    readings = yardstick.read(str(root), points)
    text = "\n".join(yardstick.contrasts_section(readings, "t5_objectives"))
    section = "\n".join(yardstick.accept_section(readings))
    assert yardstick.sections(str(root), points, "t5_objectives") == (
        yardstick.contrasts_section(readings, "t5_objectives")
        + yardstick.controls_section(readings, "t5_objectives") + section.split("\n")
        + yardstick.equal_tokens_section(readings))
    assert ("| accept/agreement |" in text) == learnt
    assert "| prefix_lm (pre-trained) | 1 | 100 |" in section
    assert section.count("| yes |") == learnt   # prefix LM's pre-trained model alone
    assert ("**In the contrasts:**" in section) == learnt
    assert ("**Left out of the contrasts:**" in section) == (not learnt)
    histories, problems = readings.histories, readings.problems
    assert not problems
    instruments = set(histories["prefix_lm"][0][100]["instruments"])
    assert ("accept/word_swap" in instruments) == learnt and "probe/x" in instruments
  # accept/<phenomenon>: +50 points over random initialisation for prefix LM, 0 for deshuffle.
  row = next(line for line in text.splitlines() if "| accept/article |" in line)
  assert "| +50.00 |" in row
  # One of a run's two fine-tunings missing: a problem named, the other runs still read.
  shutil.rmtree(root / "deshuffle" / accept.RANDOM_DIR)
  problems = yardstick.read(str(root), points).problems
  assert any("acceptability results without their pair" in p for p in problems)
  assert yardstick.accept_section(yardstick.read(str(tmp_path / "nothing"), points)) == []
