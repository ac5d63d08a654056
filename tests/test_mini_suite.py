"""lm.downstream.mini_suite: the mini suite end to end, and what it shows of pre-training.

The slow test runs the suite (rank classification of every validation example) for the
tiny model pre-trained for PRETRAIN_STEPS steps and for the same model from random
initialisation. It asserts only that pre-training lowers the fine-tuning loss: at this
budget the suite's scores do not separate the two reliably (the issue's claim, pre-trained
beats random initialisation on most of the suite, is NOT shown; docs/downstream_mini.md
"Does it measure anything?" has the figures), so they are printed, not compared.
"""
import json
import pathlib

import pytest

from lm.downstream import mini, mini_suite
from lm.downstream import task as task_lib

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG = f"{REPO}/{mini_suite.DEFAULT_CONFIG}"


def test_suite_config_sets_init_steps_and_one_final_evaluation():
  base = mini_suite.load_config(CONFIG)
  c = mini_suite.suite_config(base, "/runs/pre", steps=40, max_eval_examples=16)
  assert c.ckpt.init_from == "/runs/pre" and c.train.num_steps == 40
  assert c.finetune.eval_every == 40 and c.ckpt.every_steps == 40
  assert c.finetune.max_eval_examples == 16
  assert c.finetune.rank_classification  # the suite ranks each example's choices
  assert (c.data.inputs_length, c.data.targets_length) == (mini.MAX_TOKENS, mini.MAX_TOKENS)
  assert not mini_suite.suite_config(base, None, decode=True).finetune.rank_classification
  assert c.finetune.eval_tasks.split(",") == list(mini.HEADLINE)
  assert sorted(n.split(":")[0] for n in c.finetune.tasks.split(",")) == sorted(mini.HEADLINE)
  scratch = mini_suite.suite_config(base, None)
  assert scratch.ckpt.init_from is None and scratch.train.num_steps == base.train.num_steps
  # the rest of the fine-tuning settings are the config file's
  assert scratch.optim.name == base.optim.name and scratch.model.to_dict() == base.model.to_dict()


def test_suite_config_bad_input(tmp_path):
  with pytest.raises(ValueError, match="lack \\['mini_same_doc'"):
    mini_suite.suite_config(mini_suite.load_config(
        f"{REPO}/configs/finetune.py:mixture=mini_next_line:1,runlocal,inputs_length=128,"
        "targets_length=128"), None)
  with pytest.raises(ValueError, match="would cut the suite's examples"):
    mini_suite.suite_config(mini_suite.load_config(
        f"{REPO}/configs/finetune.py:mixture={mini_suite.MIXTURE},runlocal"), None)
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


def test_cli_config_overrides_reach_the_run(tmp_path, capsys, monkeypatch):
  # launch.sweep passes a point's model overrides and a seed replicate's train.seed this way.
  got = []
  monkeypatch.setattr(mini_suite, "run", lambda config, output: got.append(config))
  assert mini_suite.main([f"--output={tmp_path}", "--from_scratch", f"--config={CONFIG}",
                          "--config.train.seed=3", "--config.model.num_layers=1"]) == 0
  assert got[0].train.seed == 3 and got[0].model.num_layers == 1
  assert mini_suite.main([f"--output={tmp_path}", "--from_scratch", f"--config={CONFIG}",
                          "--config.train.nope=1"]) == 2
  assert "no field 'train.nope'" in capsys.readouterr().err
  with pytest.raises(SystemExit) as e:
    mini_suite.main([f"--output={tmp_path}", "--from_scratch", "--bogus=1"])
  assert e.value.code == 2 and "--bogus=1" in capsys.readouterr().err


def test_summarize_reads_the_results_record():
  results = {"mini_next_line": {"accuracy": 60.0}, "mini_same_doc": {"accuracy": 70.0},
             "mini_cloze": {"exact_match": 30.0},
             "mini_unshuffle": {"exact_match": 20.0, "line_accuracy": 50.0},
             "mini_word_order": {"accuracy": 45.0}}
  record = {"step": 7, "results": {**results, "other": {"accuracy": 1.0}},
            "tasks": {n: {"num_examples": 4, "method": "rank_classification",
                          "split": "validation"} for n in results}}
  s = mini_suite.summarize(record)
  assert s["mini"] == pytest.approx(45.0) and s["step"] == 7  # (60 + 70 + 30 + 20 + 45) / 5
  assert set(s["results"]) == set(mini.HEADLINE) and s["num_examples"]["mini_cloze"] == 4
  assert s["method"]["mini_unshuffle"] == "rank_classification"


def test_final_train_loss(tmp_path):
  path = tmp_path / "metrics.jsonl"
  rows = [{"step": 20 * i, "loss": float(i), "grad_norm": 1.0} for i in range(1, 8)]
  rows.append({"step": 140, "eval/mini_cloze/exact_match": 3.0})
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  assert mini_suite.final_train_loss(path) == pytest.approx((3 + 4 + 5 + 6 + 7) / 5)
  assert mini_suite.final_train_loss(tmp_path / "none.jsonl") is None


# The comparison of docs/downstream_mini.md "Does it measure anything?" at lr 1e-3: the tiny
# runlocal model pre-trained PRETRAIN_STEPS steps, then fine-tuned FINETUNE_STEPS steps on the
# mixture, against the same fine-tuning from random initialisation, every validation example
# rank-classified (~6 min on a shared 2-core CPU). mini_word_order separates the two (83.3 vs
# 54.6 measured from a 1,000-step pre-training run; the standard error of the difference is
# about 3.7 points), and with it the "mini" average (+6.5, standard error about 1.8); the
# other four tasks sit within noise of chance for both at this budget, so they are printed,
# not asserted. The fine-tuning loss margin (0.9-1.1 nats measured) is asserted too.
PRETRAIN_STEPS = 1500
FINETUNE_STEPS = 300
MIN_LOSS_MARGIN = 0.5  # nats
MIN_WORD_ORDER_MARGIN = 15.0  # accuracy points; ~3.7 standard errors under the measured 28.7
MIN_MINI_MARGIN = 2.0  # points of the average; ~2.5 standard errors under the measured 6.5


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
    config = mini_suite.suite_config(base, init, steps=FINETUNE_STEPS)
    summaries[name] = mini_suite.run(config, tmp_path / name)
    written = json.loads((tmp_path / name / mini_suite.RESULTS_FILE).read_text())
    assert written["mini"] == pytest.approx(summaries[name]["mini"])
    assert written["init"] == name and written["steps"] == FINETUNE_STEPS
    assert set(written["method"].values()) == {"rank_classification"}
    assert written["num_examples"] == {
        n: len(task_lib.get_task(n).examples("validation")) for n in mini.HEADLINE}
    assert 0.0 <= written["mini"] <= 100.0

  p, s = summaries["pretrained"], summaries["scratch"]
  print("mini (pretrained, scratch):", round(p["mini"], 1), round(s["mini"], 1),
        {t: (round(p["results"][t][m], 1), round(s["results"][t][m], 1))
         for t, m in mini.HEADLINE.items()},
        "loss:", round(p["train_loss"], 3), round(s["train_loss"], 3))
  assert s["train_loss"] - p["train_loss"] >= MIN_LOSS_MARGIN, (p, s)
  word_order = (p["results"]["mini_word_order"]["accuracy"]
                - s["results"]["mini_word_order"]["accuracy"])
  assert word_order >= MIN_WORD_ORDER_MARGIN, (p, s)
  assert p["mini"] - s["mini"] >= MIN_MINI_MARGIN, (p, s)
