"""lm.downstream.mini_suite: the mini suite end to end, and what it shows of pre-training.

The slow test runs the suite for the tiny model pre-trained for a few hundred steps and for
the same model from random initialisation. It asserts only that pre-training lowers the
fine-tuning loss: at this budget neither model learns the tasks' output formats, so the
suite's scores sit near chance for both and are not compared. The issue's claim (the
pre-trained model beats random initialisation on most of the suite's tasks) is NOT shown
by this test (docs/downstream_mini.md "Does it measure anything?").
"""
import json
import pathlib

import pytest

from lm.downstream import mini, mini_suite

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG = f"{REPO}/configs/finetune.py:mixture={mini_suite.MIXTURE},runlocal"


def test_suite_config_sets_init_steps_and_one_final_evaluation():
  base = mini_suite.load_config(CONFIG)
  c = mini_suite.suite_config(base, "/runs/pre", steps=40, max_eval_examples=16)
  assert c.ckpt.init_from == "/runs/pre" and c.train.num_steps == 40
  assert c.finetune.eval_every == 40 and c.ckpt.every_steps == 40
  assert c.finetune.max_eval_examples == 16
  assert c.finetune.eval_tasks.split(",") == list(mini.HEADLINE)
  assert sorted(n.split(":")[0] for n in c.finetune.tasks.split(",")) == sorted(mini.HEADLINE)
  scratch = mini_suite.suite_config(base, None)
  assert scratch.ckpt.init_from is None and scratch.train.num_steps == base.train.num_steps
  # the rest of the fine-tuning settings are the config file's
  assert scratch.optim.name == base.optim.name and scratch.model.to_dict() == base.model.to_dict()


def test_suite_config_bad_input(tmp_path):
  with pytest.raises(ValueError, match="lack \\['mini_same_doc'"):
    mini_suite.suite_config(mini_suite.load_config(
        f"{REPO}/configs/finetune.py:mixture=mini_next_line:1,runlocal"), None)
  with pytest.raises(ValueError, match="has no `finetune` section"):
    mini_suite.suite_config(mini_suite.load_config(f"{REPO}/configs/t5.py:runlocal"), None)
  with pytest.raises(ValueError, match="no config file"):
    mini_suite.load_config(f"{tmp_path}/nope.py:runlocal")


def test_cli_bad_input(tmp_path, capsys):
  assert mini_suite.main([f"--output={tmp_path}", f"--config={CONFIG}"]) == 2
  assert "pass --workdir=PRETRAINED_RUN" in capsys.readouterr().err
  assert mini_suite.main([f"--output={tmp_path}", "--from_scratch",
                          f"--config={tmp_path}/nope.py"]) == 2
  assert "error: --config=" in capsys.readouterr().err
  with pytest.raises(SystemExit) as e:
    mini_suite.main(["--help"])
  assert e.value.code == 0
  assert "--from_scratch" in capsys.readouterr().out


def test_summarize_reads_the_results_record():
  results = {"mini_next_line": {"accuracy": 60.0}, "mini_same_doc": {"accuracy": 70.0},
             "mini_cloze": {"exact_match": 30.0},
             "mini_unshuffle": {"exact_match": 20.0, "line_accuracy": 50.0}}
  record = {"step": 7, "results": {**results, "other": {"accuracy": 1.0}},
            "tasks": {n: {"num_examples": 4, "method": "decode", "split": "validation"}
                      for n in results}}
  s = mini_suite.summarize(record)
  assert s["mini"] == pytest.approx(45.0) and s["step"] == 7
  assert set(s["results"]) == set(mini.HEADLINE) and s["num_examples"]["mini_cloze"] == 4


def test_final_train_loss(tmp_path):
  path = tmp_path / "metrics.jsonl"
  rows = [{"step": 20 * i, "loss": float(i), "grad_norm": 1.0} for i in range(1, 8)]
  rows.append({"step": 140, "eval/mini_cloze/exact_match": 3.0})
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  assert mini_suite.final_train_loss(path) == pytest.approx((3 + 4 + 5 + 6 + 7) / 5)
  assert mini_suite.final_train_loss(tmp_path / "none.jsonl") is None


# A CI-sized budget (~3-4 min on 2 cores). At this budget (and at 1500 pre-training + 1000
# fine-tuning steps, docs/downstream_mini.md "Does it measure anything?") the tiny model has
# not learned the tasks' output formats from either initialisation, so the suite's metrics
# sit at or below chance for both and do not separate them; what does separate them,
# robustly, is the fine-tuning loss (0.4-0.5 nats lower from the pre-trained run after 300
# steps). The test checks that, and the suite end to end for both initialisations.
PRETRAIN_STEPS = 600
FINETUNE_STEPS = 200
EVAL_EXAMPLES = 32  # per task


@pytest.mark.slow
def test_pretrained_vs_random_initialisation(tmp_path):
  from lm import train
  pre = mini_suite.load_config(f"{REPO}/configs/t5.py:runlocal")
  pre.unlock()
  pre.train.num_steps = PRETRAIN_STEPS
  pre.train.eval_every = 0
  pre.wandb.mode = "disabled"
  pre.lock()
  train.train_and_evaluate(pre, str(tmp_path / "pre"))

  base = mini_suite.load_config(CONFIG)
  base.unlock()
  base.wandb.mode = "disabled"
  base.lock()
  summaries = {}
  for name, init in (("pretrained", str(tmp_path / "pre")), ("scratch", None)):
    config = mini_suite.suite_config(base, init, steps=FINETUNE_STEPS,
                                     max_eval_examples=EVAL_EXAMPLES, learning_rate=1e-2)
    summaries[name] = mini_suite.run(config, tmp_path / name)
    written = json.loads((tmp_path / name / mini_suite.RESULTS_FILE).read_text())
    assert written["mini"] == pytest.approx(summaries[name]["mini"])
    assert written["init"] == name and written["steps"] == FINETUNE_STEPS
    assert set(written["results"]) == set(mini.HEADLINE)
    assert all(n == EVAL_EXAMPLES for n in written["num_examples"].values())
    assert 0.0 <= written["mini"] <= 100.0

  margin = summaries["scratch"]["train_loss"] - summaries["pretrained"]["train_loss"]
  print("mini:", {k: s["mini"] for k, s in summaries.items()}, "loss margin:", margin)
  assert margin >= 0.2, summaries
