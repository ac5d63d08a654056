"""lm.downstream.evaluation.select_best: each task at its own best step, as T5 reported.

T5 (t5/evaluation/eval_utils.py, `metric_group_max`) scores a model fine-tuned on several
tasks per metric group at the step where the group's mean metric is highest, not all tasks
at one common step; MNLI matched and mismatched form one group ("MNLI").
"""
import json
import math

import pytest

from lm.downstream import evaluation, task_mixtures
from test_task_mixtures import TABLE16_BASELINE_GLUE


def rec(step, **results):
  return {"step": step, "results": results}


def test_each_task_at_its_own_best_step():
  records = [rec(6, glue_cola={"matthews_corrcoef": 40.0}, glue_sst2={"accuracy": 93.0}),
             rec(2, glue_cola={"matthews_corrcoef": 50.0}, glue_sst2={"accuracy": 90.0}),
             rec(4, glue_cola={"matthews_corrcoef": 45.0}, glue_sst2={"accuracy": 91.0})]
  best = evaluation.select_best(records)
  # One common step (the best mean: step 2, 70.0) would report SST-2 at 90, not 93.
  assert best["steps"] == {"glue_cola": 2, "glue_sst2": 6}
  assert best["results"] == {"glue_cola": {"matthews_corrcoef": 50.0},
                             "glue_sst2": {"accuracy": 93.0}}
  assert best["evaluated_steps"] == [2, 4, 6]


def test_multi_metric_task_is_chosen_by_its_mean_metric():
  # MRPC: F1 is highest at step 2, but F1 + accuracy is highest at step 4.
  records = [rec(2, glue_mrpc={"f1": 90.0, "accuracy": 80.0}),
             rec(4, glue_mrpc={"f1": 89.0, "accuracy": 85.0})]
  assert evaluation.select_best(records)["steps"] == {"glue_mrpc": 4}


def test_mnli_matched_and_mismatched_share_one_step():
  # Matched alone is best at step 2; the mean of the two is best at step 4 (T5's group).
  records = [rec(2, glue_mnli_matched={"accuracy": 84.0}, glue_mnli_mismatched={"accuracy": 80.0}),
             rec(4, glue_mnli_matched={"accuracy": 83.0}, glue_mnli_mismatched={"accuracy": 83.0})]
  best = evaluation.select_best(records)
  assert best["steps"] == {"glue_mnli_matched": 4, "glue_mnli_mismatched": 4}
  assert best["results"]["glue_mnli_matched"] == {"accuracy": 83.0}
  assert evaluation.metric_groups(["glue_cola", "glue_mnli_mismatched", "glue_mnli_matched"]) == [
      ("glue_cola",), ("glue_mnli_matched", "glue_mnli_mismatched")]
  # Evaluated separately (never at one step together): each on its own.
  apart = [rec(2, glue_mnli_matched={"accuracy": 84.0}),
           rec(4, glue_mnli_mismatched={"accuracy": 83.0})]
  assert evaluation.select_best(apart)["steps"] == {"glue_mnli_matched": 2,
                                                    "glue_mnli_mismatched": 4}


def test_missing_and_non_finite_metrics_lose_to_negative_scores():
  # CoLA's Matthews correlation is below 0 early in training; a step without metrics or
  # with a non-finite one still loses to it.
  records = [rec(2, glue_cola={}), rec(4, glue_cola={"matthews_corrcoef": -5.0}),
             rec(6, glue_cola={"matthews_corrcoef": math.nan})]
  assert evaluation.select_best(records)["steps"] == {"glue_cola": 4}


def test_ties_take_the_earliest_step_and_non_finite_scores_lose():
  records = [rec(4, glue_rte={"accuracy": 70.0}), rec(2, glue_rte={"accuracy": 70.0}),
             rec(6, glue_stsb={"pearson_corrcoef": None, "spearman_corrcoef": 99.0}),
             rec(8, glue_stsb={"pearson_corrcoef": 10.0, "spearman_corrcoef": 12.0}),
             rec(10, glue_stsb={"pearson_corrcoef": math.nan, "spearman_corrcoef": 99.0})]
  best = evaluation.select_best(records)
  assert best["steps"] == {"glue_rte": 2, "glue_stsb": 8}
  assert evaluation.select_best([]) == {"results": {}, "steps": {}, "evaluated_steps": []}


def _write(workdir, step, results):
  path = evaluation.results_path(str(workdir), step)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps({"step": step, "results": results}))


def test_write_best_results_reads_the_run_and_computes_the_glue_average(tmp_path):
  worse = {t: {m: v - 10.0 for m, v in ms.items()} for t, ms in TABLE16_BASELINE_GLUE.items()}
  _write(tmp_path, 10, worse)
  _write(tmp_path, 20, TABLE16_BASELINE_GLUE)
  _write(tmp_path, 30, {"glue_cola": {"matthews_corrcoef": 99.0}})  # past up_to_step: ignored
  (tmp_path / "eval" / "tasks_step_20.glue_cola.validation.jsonl").write_text("{}\n")
  path = evaluation.write_best_results(str(tmp_path), up_to_step=20)
  assert str(path) == str(tmp_path / "eval" / evaluation.BEST_RESULTS_FILE)
  best = json.loads(path.read_text())
  assert best["evaluated_steps"] == [10, 20]
  assert set(best["steps"].values()) == {20}
  assert best["averages"]["glue"] == pytest.approx(83.28, abs=0.005)
  assert best["averages"]["glue"] == pytest.approx(
      task_mixtures.glue_average(TABLE16_BASELINE_GLUE))
  assert "super_glue" not in best["averages"]  # its tasks were not evaluated
  # Without the limit the step-30 file counts.
  evaluation.write_best_results(str(tmp_path))
  best = json.loads(path.read_text())
  assert best["steps"]["glue_cola"] == 30 and best["evaluated_steps"] == [10, 20, 30]


def test_no_results_yet(tmp_path):
  workdir = str(tmp_path / "runs" / "one")  # not there yet
  assert evaluation.read_results(workdir) == []
  path = evaluation.write_best_results(workdir)
  assert path.read_text() == (
      '{\n  "averages": {},\n  "evaluated_steps": [],\n  "results": {},\n  "steps": {}\n}\n')


def test_read_results_skips_other_files(tmp_path):
  for step in (3, 12, 40):
    _write(tmp_path, step, {"glue_rte": {"accuracy": float(step)}})
  eval_dir = tmp_path / "eval"
  for i in range(20):  # predictions, the best file and others, in any directory order
    (eval_dir / f"tasks_step_{i}.glue_rte.validation.jsonl").write_text("{}\n")
  (eval_dir / evaluation.BEST_RESULTS_FILE).write_text("{}")
  (eval_dir / "step_12.json").write_text("{}")
  assert evaluation.read_results(str(tmp_path), up_to_step=12) == [
      rec(3, glue_rte={"accuracy": 3.0}), rec(12, glue_rte={"accuracy": 12.0})]
  assert [r["step"] for r in evaluation.read_results(str(tmp_path))] == [3, 12, 40]
