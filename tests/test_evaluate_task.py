"""`python -m lm.evaluate --task`: restore a run, evaluate downstream tasks, write results."""
import json
import os

import pytest

import downstream_fixtures as fx
from eval_runs import fake_run
from lm import evaluate, restore
from lm.downstream import evaluation
from lm.downstream import task as task_lib


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  fx.register_tasks()
  return fake_run(str(tmp_path_factory.mktemp("runs") / "ed"))


def test_task_cli_writes_results_that_match_evaluate_task(run_dir, capsys):
  rc = evaluate.run([f"--workdir={run_dir}", "--task=test_copy,test_first",
                     "--max_examples=5", "--max_decode_length=4", "--wandb_mode=disabled"])
  assert rc == 0, capsys.readouterr().err
  path = os.path.join(run_dir, "eval", "tasks_step_4.json")
  with open(path) as f:
    result = json.load(f)
  assert result["step"] == 4 and set(result["results"]) == {"test_copy", "test_first"}
  assert result["tasks"]["test_copy"] == {"num_examples": 5, "method": "decode",
                                          "split": "validation"}
  with open(os.path.join(run_dir, "eval", "tasks_step_4.test_copy.validation.jsonl")) as f:
    preds = [json.loads(line) for line in f]
  assert len(preds) == 5 and preds[0]["inputs"].startswith("copy: ")
  # The same numbers as evaluate_task on the restored run.
  r = restore.load_run(run_dir)
  direct = evaluation.evaluate_task(r.model, r.params, r.tokenizer,
                                    task_lib.get_task("test_copy"), max_examples=5,
                                    max_decode_length=4, mesh=r.mesh, rules=r.rules,
                                    inputs_length=r.config.data.inputs_length)
  assert result["results"]["test_copy"] == direct["metrics"]
  assert [p["prediction"] for p in preds] == [p["prediction"] for p in direct["predictions"]]
  printed = json.loads(capsys.readouterr().out)
  assert "eval/test_copy/exact_match" in printed


def test_task_cli_rank_classification(run_dir):
  rc = evaluate.run([f"--workdir={run_dir}", "--task=test_first", "--rank_classification",
                     "--max_examples=3", "--step=2", "--wandb_mode=disabled"])
  assert rc == 0
  with open(os.path.join(run_dir, "eval", "tasks_step_2.json")) as f:
    result = json.load(f)
  assert result["tasks"]["test_first"]["method"] == "rank_classification"
  assert 0.0 <= result["results"]["test_first"]["accuracy"] <= 100.0


@pytest.mark.parametrize("argv, message", [
    (["--task=nope"], "unknown task 'nope'; expected one of"),
    (["--task=test_copy", "--split=test"], "task 'test_copy' has no split 'test'"),
    (["--task=test_copy", "--rank_classification"], "has no choices"),
    (["--task="], "--task is empty"),
])
def test_task_cli_bad_input_is_one_line_and_exit_2(run_dir, capsys, argv, message):
  rc = evaluate.run([f"--workdir={run_dir}", "--wandb_mode=disabled", *argv])
  err = capsys.readouterr().err
  assert rc == 2
  assert message in err and err.startswith("error: ") and err.count("\n") == 1
  if "unknown task" in message:
    assert "test_copy" in err  # the known tasks are listed
