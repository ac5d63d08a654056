"""lm.mini_suite: the mini suite end to end, and what it shows of pre-training.

The slow test runs the suite (rank classification of every validation example) for the
tiny model pre-trained for PRETRAIN_STEPS steps and for the same model from random
initialisation, and asserts the suite's claim: the pre-trained model wins by a clear margin
(MIN_TASK_Z standard errors) on most of the suite's tasks, and on the average
(docs/downstream_mini.md "Does it measure anything?" has the figures).
"""
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import types

import pytest

from lm import config as config_lib
from lm import mini_suite
from lm.downstream import mini
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
  # the rest of the fine-tuning settings are the config file's (its derived fields filled)
  assert scratch.optim.name == base.optim.name
  assert scratch.model.to_dict() == config_lib.derive(base).model.to_dict()


def test_suite_config_bad_input(tmp_path):
  with pytest.raises(ValueError, match="lack \\['mini_completion'"):
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
  monkeypatch.setattr(mini_suite, "run",
                      lambda config, output: got.append((config, mini_suite.suite_of(config))))
  assert mini_suite.main([f"--output={tmp_path}", "--from_scratch", f"--config={CONFIG}",
                          "--config.train.seed=3", "--config.model.num_layers=1"]) == 0
  assert got[0][0].train.seed == 3 and got[0][0].model.num_layers == 1
  assert got[0][1] is mini_suite.MINI  # --suite defaults to the mini suite
  assert mini_suite.main([f"--output={tmp_path}", "--from_scratch", f"--config={CONFIG}",
                          "--config.train.nope=1"]) == 2
  assert "no field 'train.nope'" in capsys.readouterr().err
  with pytest.raises(SystemExit) as e:
    mini_suite.main([f"--output={tmp_path}", "--from_scratch", "--bogus=1"])
  assert e.value.code == 2 and "--bogus=1" in capsys.readouterr().err


def test_summarize_reads_the_results_record():
  results = {"mini_completion": {"accuracy": 60.0}, "mini_fill": {"accuracy": 70.0},
             "mini_cloze": {"exact_match": 30.0},
             "mini_phrase_order": {"exact_match": 20.0},
             "mini_word_order": {"accuracy": 45.0}}
  record = {"step": 7, "results": {**results, "other": {"accuracy": 1.0}},
            "tasks": {n: {"num_examples": 4, "method": "rank_classification",
                          "split": "validation"} for n in results}}
  s = mini_suite.summarize(record)
  assert s["mini"] == pytest.approx(45.0) and s["step"] == 7  # (60 + 70 + 30 + 20 + 45) / 5
  assert set(s["results"]) == set(mini.HEADLINE) and s["num_examples"]["mini_cloze"] == 4
  assert s["method"]["mini_phrase_order"] == "rank_classification"


def test_a_finetuning_run_of_another_suite_is_refused(tmp_path):
  """A suite run made before the suite changed would give another suite's scores."""
  config = mini_suite.suite_config(mini_suite.load_config(CONFIG), None, steps=1)
  (tmp_path / "finetune").mkdir()
  (tmp_path / "finetune" / "config.json").write_text(json.dumps(
      {"finetune": {"tasks": "mini_next_line:1,mini_cloze:1"}}))
  with pytest.raises(ValueError, match="holds a fine-tuning run on other tasks "
                     r"\(mini_next_line:1,mini_cloze:1\).*remove"):
    mini_suite.run(config, tmp_path, log=lambda _: None)
  assert not (tmp_path / mini_suite.RESULTS_FILE).exists()


def test_blank_inputs_keeps_targets_and_choices_of_real_suite_items():
  """The control's transform on the suite's own validation items: every input is "", and
  the choices (some read off the input: phrase order's pieces, cloze's words) and every
  other field are those of the item as shown."""
  for name in mini.SUITE:
    task = task_lib.get_task(name)
    examples = task.examples("validation")[:25]
    blank_task, blank = mini.blank_inputs(task, examples)
    assert len(blank) == len(examples)
    for ex, b in zip(examples, blank):
      assert ex["inputs"] and b["inputs"] == ""
      assert blank_task.choices(b) == list(task.choices(ex))
      assert ex["targets"] in blank_task.choices(b)  # the answer is still on offer
      assert {k: v for k, v in b.items() if k not in ("inputs", mini.BLANK_CHOICES)} == {
          k: v for k, v in ex.items() if k != "inputs"}
    assert examples[0]["inputs"]  # the originals are not modified
    # Read off the blank input instead, these tasks would lose their choices.
    if name in ("mini_phrase_order", "mini_cloze"):
      try:
        naive = task.choices(blank[0])
      except IndexError:  # phrase order: no pieces to order
        naive = None
      assert naive != blank_task.choices(blank[0])
    assert blank_task.metric_fns == task.metric_fns and blank_task.name == task.name
  decoded_only = task_lib.Task(name="t", load=lambda s, d: [], preprocess=dict,
                               metric_fns=())
  t, rows = mini.blank_inputs(decoded_only, [{"inputs": "x", "targets": "y"}])
  assert t.choices is None and rows == [{"inputs": "", "targets": "y"}]


def test_surviving_share_on_hand_computed_values():
  # score 60, blank 50, random init 35: (50 - 35) / (60 - 35) = 15 / 25 = 0.6.
  assert mini.surviving_share(60.0, 50.0, 35.0) == pytest.approx(0.6)
  assert mini.surviving_share(60.0, 35.0, 35.0) == 0.0  # nothing survives
  assert mini.surviving_share(60.0, 60.0, 35.0) == 1.0  # the margin needs no input
  assert mini.surviving_share(60.0, 65.0, 35.0) == pytest.approx(1.2)  # not clipped
  assert mini.surviving_share(60.0, 30.0, 35.0) == pytest.approx(-0.2)
  # The denominator at or near 0, or negative: no share (within the seed noise).
  assert mini.MIN_SHARE_MARGIN == 3.0
  assert mini.surviving_share(35.0, 50.0, 35.0) is None
  assert mini.surviving_share(37.9, 36.0, 35.0) is None
  assert mini.surviving_share(38.0, 36.5, 35.0) == pytest.approx(0.5)  # exactly the minimum
  assert mini.surviving_share(30.0, 30.0, 35.0) is None
  assert mini.surviving_share(float("nan"), 30.0, 35.0) is None
  assert mini.surviving_share(36.0, 35.5, 35.0, min_margin=0.5) == pytest.approx(0.5)


@pytest.mark.slow
def test_score_blank_inputs_scores_every_suite_task_without_its_inputs(tmp_path, monkeypatch):
  """The edge: the fine-tuned run restored, each task's first max_eval_examples items
  scored by rank classification with "" as the input and the item's own choices (~50 s of
  CPU: a compile per task's shapes on 8 simulated devices)."""
  from eval_runs import fake_run  # pylint: disable=g-import-not-at-top
  from lm.downstream import evaluation  # pylint: disable=g-import-not-at-top
  run = fake_run(str(tmp_path / "run"))
  config = mini_suite.suite_config(mini_suite.load_config(CONFIG), None, steps=4,
                                   max_eval_examples=2)
  seen, real = {}, evaluation.evaluate_task

  def spy(model, params, tokenizer, task, split, **kw):
    seen[task.name] = (task, kw["examples"], kw["rank_classification"])
    return real(model, params, tokenizer, task, split, **kw)

  monkeypatch.setattr(evaluation, "evaluate_task", spy)
  got = mini_suite.score_blank_inputs(config, run, 4)
  assert list(got) == list(mini.HEADLINE) == list(seen)
  for name, (task, examples, ranked) in seen.items():
    real_task = task_lib.get_task(name)
    shown = real_task.examples("validation")[:2]
    assert ranked and len(examples) == 2 and all(ex["inputs"] == "" for ex in examples)
    assert [task.choices(b) for b in examples] == [real_task.choices(ex) for ex in shown]
    assert 0.0 <= got[name][mini.HEADLINE[name]] <= 100.0
  assert 0.0 <= mini.mini_average(got) <= 100.0


def test_final_train_loss(tmp_path):
  path = tmp_path / "metrics.jsonl"
  rows = [{"step": 20 * i, "loss": float(i), "grad_norm": 1.0} for i in range(1, 8)]
  rows.append({"step": 140, "eval/mini_cloze/exact_match": 3.0})
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  assert mini_suite.final_train_loss(path) == pytest.approx((3 + 4 + 5 + 6 + 7) / 5)
  assert mini_suite.final_train_loss(tmp_path / "none.jsonl") is None


# The comparison of docs/downstream_mini.md "Does it measure anything?" at lr 1e-3: the tiny
# runlocal model pre-trained PRETRAIN_STEPS steps (span corruption, "a few thousand"), then
# fine-tuned FINETUNE_STEPS steps on the suite's mixture, against the same fine-tuning from
# random initialisation, every validation example rank-classified (~6 min on a 2-core CPU).
# The claim: pre-training wins by a clear margin on most of the suite. "Clear" is measured in
# standard errors of the difference of two accuracies on the task's n validation examples
# (sqrt(p1 (1 - p1) / n + p2 (1 - p2) / n)); measured from a 3,000-step run: completion
# +21.5 (5.0 se), fill +12.4 (3.5), cloze +3.4 (1.2), phrase_order +43.7 (10.6), word_order
# +36.1 (10.7); mini +23.4. The fine-tuning loss margin (1.1 nats measured) is asserted too.
PRETRAIN_STEPS = 3000
FINETUNE_STEPS = 300
MIN_LOSS_MARGIN = 0.5  # nats
MIN_TASK_Z = 3.0  # standard errors of the difference: a task "clearly" won
MIN_TASKS_WON = 3  # of the suite's 5: most (4 measured)
MIN_MINI_MARGIN = 10.0  # points of the average (23.4 measured; its standard error ~1.5)


def margin_in_standard_errors(p1: float, p2: float, n: int) -> float:
  """(p1 - p2) / the standard error of the difference of two accuracies (in %) on n
  examples each."""
  a, b = p1 / 100, p2 / 100
  se = ((a * (1 - a) + b * (1 - b)) / n) ** 0.5
  return (a - b) / se if se > 0 else float("inf") * (a - b)


def test_margin_in_standard_errors_on_hand_computed_cases():
  # 60 vs 50 on 100 examples: se = sqrt((.24 + .25) / 100) = 0.07.
  assert margin_in_standard_errors(60.0, 50.0, 100) == pytest.approx(0.1 / 0.07)
  assert margin_in_standard_errors(50.0, 60.0, 100) == pytest.approx(-0.1 / 0.07)
  assert margin_in_standard_errors(100.0, 0.0, 10) == float("inf")


def _run_module(module, *args):
  """`python -m module args` as a user runs it: one CPU device (not the tests' 8 simulated
  ones, which make the tiny model's steps 2-2.5x slower on a 2-core machine)."""
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"}
  env.pop("XLA_FLAGS", None)
  out = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=1800)
  assert out.returncode == 0, out.stderr[-3000:]
  return out


@pytest.mark.slow
def test_pretrained_vs_random_initialisation(tmp_path):
  _run_module("lm.main", "--config=configs/t5.py:runlocal", f"--workdir={tmp_path / 'pre'}",
              f"--config.train.num_steps={PRETRAIN_STEPS}", "--config.train.eval_every=0",
              "--config.wandb.mode=disabled")
  summaries = {}
  for name, init in (("pretrained", f"--workdir={tmp_path / 'pre'}"),
                     ("scratch", "--from_scratch")):
    _run_module("lm.mini_suite", init, f"--output={tmp_path / name}",
                f"--config={CONFIG}", f"--steps={FINETUNE_STEPS}",
                "--config.wandb.mode=disabled")
    written = json.loads((tmp_path / name / mini_suite.RESULTS_FILE).read_text())
    summaries[name] = written
    assert written["mini"] == pytest.approx(
        sum(written["results"][t][m] for t, m in mini.HEADLINE.items()) / len(mini.HEADLINE))
    assert written["init"] == name and written["steps"] == FINETUNE_STEPS
    assert written["suite_version"] == mini.SUITE_VERSION
    assert set(written["method"].values()) == {"rank_classification"}
    assert written["num_examples"] == {
        n: len(task_lib.get_task(n).examples("validation")) for n in mini.HEADLINE}
    assert 0.0 <= written["mini"] <= 100.0
    # The blank-input control of the same fine-tuned model, on the same items.
    assert set(written["blank"]) == set(mini.HEADLINE)
    assert written["mini_blank"] == pytest.approx(mini.mini_average(written["blank"]))
    assert written["record_version"] == mini_suite.RECORD_VERSION

  p, s = summaries["pretrained"], summaries["scratch"]
  z = {t: margin_in_standard_errors(p["results"][t][m], s["results"][t][m],
                                    p["num_examples"][t]) for t, m in mini.HEADLINE.items()}
  print("mini (pretrained, scratch):", round(p["mini"], 1), round(s["mini"], 1),
        {t: (round(p["results"][t][m], 1), round(s["results"][t][m], 1), round(z[t], 1))
         for t, m in mini.HEADLINE.items()},
        "loss:", round(p["train_loss"], 3), round(s["train_loss"], 3),
        "blank inputs (pretrained, scratch):", round(p["mini_blank"], 1),
        round(s["mini_blank"], 1), "kept:",
        mini.surviving_share(p["mini"], p["mini_blank"], s["mini"]))
  assert s["train_loss"] - p["train_loss"] >= MIN_LOSS_MARGIN, (p, s)
  won = [t for t in mini.HEADLINE if z[t] >= MIN_TASK_Z]
  assert len(won) >= MIN_TASKS_WON, (z, p, s)
  assert p["mini"] - s["mini"] >= MIN_MINI_MARGIN, (p, s)


# ---------------------------------------------------------------- found by mutation testing

def _fake_finetune(monkeypatch, tmp_path, results, losses, blank, data_dir=""):
  """`run` with the fine-tuning, the blank-input control and the chance levels replaced by
  stand-ins: the trainer writes the task record and metrics.jsonl a real run would."""
  from lm import train, validate  # pylint: disable=g-import-not-at-top
  from lm.downstream import evaluation  # pylint: disable=g-import-not-at-top
  calls = {"chance": []}

  def fake_train(settings, workdir, parts):
    steps = settings
    path = evaluation.results_path(workdir, steps)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "step": steps, "results": results,
        "tasks": {n: {"num_examples": 10 + k, "method": "rank_classification"}
                  for k, n in enumerate(results)}}))
    rows = [{"step": i, "loss": v, "grad_norm": 1.0} for i, v in enumerate(losses)]
    (pathlib.Path(workdir) / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows))

  def fake_blank(config, workdir, step):
    calls["blank"] = (pathlib.Path(workdir), step)
    return blank

  def chance(name, data_dir):
    calls["chance"].append((name, data_dir))
    return {"accuracy": float(len(name))}

  monkeypatch.setattr(validate, "validate", lambda config: int(config.train.num_steps))
  monkeypatch.setattr(train, "train_and_evaluate", fake_train)
  monkeypatch.setattr(mini_suite, "score_blank_inputs", fake_blank)
  monkeypatch.setitem(mini_suite.SUITES, "mini",
                      dataclasses.replace(mini_suite.MINI, chance=chance))
  return calls


def test_run_writes_the_record_and_prints_the_summary(tmp_path, monkeypatch):
  """`run` after the fine-tuning: the record's every field, its JSON text (sorted keys,
  indent 2, a final newline) and the progress lines, with stand-ins for the trainer."""
  results = {n: {m: 40.0 + 2 * k} for k, (n, m) in enumerate(mini.HEADLINE.items())}
  blank = {n: {m: 30.0 + k} for k, (n, m) in enumerate(mini.HEADLINE.items())}
  losses = [9.0, 3.0, 2.0, 2.5, 3.0, 2.5, 2.5]  # the last 5 average 2.5
  calls = _fake_finetune(monkeypatch, tmp_path, results, losses, blank)
  config = mini_suite.suite_config(mini_suite.load_config(CONFIG), None, steps=3,
                                   learning_rate=0.25)
  lines = []
  out = tmp_path / "out"
  clock = iter([1000.0])   # run's start; every later reading 12.345 s on
  with monkeypatch.context() as m:
    m.setattr(mini_suite.time, "time", lambda: next(clock, 1012.345))
    got = mini_suite.run(config, out, log=lines.append)
  text = (out / mini_suite.RESULTS_FILE).read_text()
  assert json.loads(text) == got
  assert text.endswith("}\n") and not text.endswith("\n\n")
  assert list(json.loads(text)) == sorted(got)               # sort_keys=True
  assert '\n  "blank": {\n    "mini_cloze": {\n      "exact_match": 32.0' in text  # indent 2
  assert got["results"] == results and got["blank"] == blank
  assert got["mini"] == pytest.approx(44.0) and got["mini_blank"] == pytest.approx(32.0)
  assert got["init"] == "scratch" and got["init_from"] is None and got["steps"] == 3
  assert got["suite"] == "mini" and got["step"] == 3
  assert got["suite_version"] == mini.SUITE_VERSION
  assert got["record_version"] == mini_suite.RECORD_VERSION == 2
  assert got["learning_rate"] == 0.25 and got["train_loss"] == pytest.approx(2.5)
  assert got["num_examples"] == {n: 10 + k for k, n in enumerate(mini.HEADLINE)}
  assert got["chance"] == {n: {"accuracy": float(len(n))} for n in mini.HEADLINE}
  assert calls["chance"] == [(n, None) for n in mini.HEADLINE]   # data_dir "" -> None
  assert calls["blank"] == (out / "finetune", 3)
  assert got["seconds"] == 12.3                              # rounded to 0.1 s
  assert lines[-1] == ("mini_suite: mini 44.0 (blank inputs 32.0), fine-tuning loss 2.500 "
                       f"(scratch, 3 steps, 12s) -> {out / mini_suite.RESULTS_FILE}")
  assert lines[2] == ("  mini_completion accuracy 40.0 (n=10; blank inputs 30.0)")
  assert len(lines) == 3 + len(mini.HEADLINE)
  # A data_dir in the config reaches the chance levels.
  base = mini_suite.load_config(CONFIG)
  base.finetune.data_dir = "/data/mini"
  calls["chance"].clear()
  mini_suite.run(mini_suite.suite_config(base, None, steps=3), tmp_path / "other",
                 log=lambda _: None)
  assert calls["chance"] == [(n, "/data/mini") for n in mini.HEADLINE]


def test_run_without_a_logged_train_loss_prints_nan(tmp_path, monkeypatch):
  results = {n: {m: 50.0} for n, m in mini.HEADLINE.items()}
  _fake_finetune(monkeypatch, tmp_path, results, [], results)
  config = mini_suite.suite_config(mini_suite.load_config(CONFIG), None, steps=2)
  lines = []
  got = mini_suite.run(config, tmp_path / "out", log=lines.append)
  assert got["train_loss"] is None
  assert "fine-tuning loss nan (scratch, 2 steps, " in lines[-1]


def test_learning_rate_and_steps_of_zero_or_below_keep_the_configs():
  base = mini_suite.load_config(CONFIG)
  assert mini_suite.suite_config(base, None).schedule.base_lr == base.schedule.base_lr > 0
  for lr in (0.0, -0.5):
    assert mini_suite.suite_config(base, None, learning_rate=lr).schedule.base_lr == (
        base.schedule.base_lr)
  assert mini_suite.suite_config(base, None, learning_rate=0.5).schedule.base_lr == 0.5
  assert base.train.num_steps > 1
  for steps in (0, -1):
    assert mini_suite.suite_config(base, None, steps=steps).train.num_steps == (
        base.train.num_steps)
  c = mini_suite.suite_config(base, None, steps=1)
  assert (c.train.num_steps, c.finetune.eval_every, c.ckpt.every_steps) == (1, 1, 1)


def test_suite_of_wants_every_task_of_a_suite():
  config = mini_suite.suite_config(mini_suite.load_config(CONFIG), None)
  config.unlock()
  for tasks in (mini_suite.TASKS[:2], mini_suite.TASKS[1:], ()):   # a prefix, a suffix, none
    config.finetune.eval_tasks = ",".join(tasks)
    with pytest.raises(ValueError, match="are no suite's"):
      mini_suite.suite_of(config)
  config.finetune.eval_tasks = ",".join(mini_suite.TASKS)
  assert mini_suite.suite_of(config) is mini_suite.MINI


def test_other_suite_compares_the_earlier_runs_tasks(tmp_path):
  config = mini_suite.suite_config(mini_suite.load_config(CONFIG), None)
  assert mini_suite._other_suite(tmp_path, config) is None            # no run there yet
  for tasks in ("a_task:1", "z_task:1", config.finetune.tasks):      # sorting before, after
    (tmp_path / "config.json").write_text(json.dumps({"finetune": {"tasks": tasks}}))
    expected = None if tasks == config.finetune.tasks else tasks
    assert mini_suite._other_suite(tmp_path, config) == expected


def test_run_from_a_pretrained_run_and_without_task_results(tmp_path, monkeypatch):
  results = {n: {m: 50.0} for n, m in mini.HEADLINE.items()}
  _fake_finetune(monkeypatch, tmp_path, results, [1.0], results)
  base = mini_suite.load_config(CONFIG)
  lines = []
  got = mini_suite.run(mini_suite.suite_config(base, "/runs/pre", steps=2), tmp_path / "a",
                       log=lines.append)
  assert got["init"] == "pretrained" and got["init_from"] == "/runs/pre"
  assert lines[0] == ("mini_suite: fine-tuning on " + ", ".join(mini.HEADLINE) + " for 2 "
                      f"steps from /runs/pre in {tmp_path / 'a' / 'finetune'}")
  lines.clear()
  mini_suite.run(mini_suite.suite_config(base, None, steps=2), tmp_path / "b", log=lines.append)
  assert lines[0].endswith(f"for 2 steps from random initialisation in "
                           f"{tmp_path / 'b' / 'finetune'}")
  # A trainer that leaves no task record at the last step: refused, nothing written.
  from lm import train  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(train, "train_and_evaluate", lambda settings, workdir, parts: None)
  with pytest.raises(ValueError, match="has no task results at step 2"):
    mini_suite.run(mini_suite.suite_config(base, None, steps=2), tmp_path / "c",
                   log=lambda _: None)
  assert not (tmp_path / "c" / mini_suite.RESULTS_FILE).exists()


def test_suite_config_defaults_and_lengths_above_the_suites():
  base = mini_suite.load_config(CONFIG)
  c = mini_suite.suite_config(base, None)
  assert c.finetune.max_eval_examples == 0 and c.finetune.rank_classification
  base.data.inputs_length = base.data.targets_length = 2 * mini.MAX_TOKENS   # longer: fine
  c = mini_suite.suite_config(base, None)
  assert (c.data.inputs_length, c.data.targets_length) == (256, 256)
  with pytest.raises(dataclasses.FrozenInstanceError):
    mini_suite.MINI.version = 0


def test_cli_defaults_keep_the_configs_steps_and_learning_rate(tmp_path, monkeypatch):
  import logging  # pylint: disable=g-import-not-at-top
  noisy = ("absl", "jax._src", "orbax", "etils", "grain")
  for name in noisy:   # as before any main() call (restored after the test)
    monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)
  got = []
  monkeypatch.setattr(mini_suite, "run", lambda config, output: got.append(config))
  assert mini_suite.main([f"--output={tmp_path}", "--from_scratch", f"--config={CONFIG}"]) == 0
  base = mini_suite.load_config(CONFIG)
  assert got[0].schedule.base_lr == base.schedule.base_lr
  assert got[0].train.num_steps == base.train.num_steps
  assert got[0].finetune.max_eval_examples == 0 and got[0].finetune.rank_classification
  assert got[0].ckpt.init_from is None                     # --from_scratch
  assert mini_suite.main([f"--output={tmp_path}", "--workdir=/runs/pre",
                          f"--config={CONFIG}"]) == 0
  assert got[1].ckpt.init_from == "/runs/pre"
  with pytest.raises(SystemExit) as e:                     # --output is required
    mini_suite.main(["--from_scratch", f"--config={CONFIG}"])
  assert e.value.code == 2
  assert len(got) == 2
  # The noisy libraries' loggers are turned down to warnings.
  assert [logging.getLogger(name).level for name in noisy] == [logging.WARNING] * 5


def test_final_train_loss_reads_train_rows_only(tmp_path):
  path = tmp_path / "metrics.jsonl"
  rows = [{"step": 1, "loss": 4.0, "grad_norm": 1.0}, {"step": 2, "loss": 100.0},
          {"step": 2, "grad_norm": 3.0}, {"step": 3, "loss": 2.0, "grad_norm": 1.0}]
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  assert mini_suite.final_train_loss(path) == 3.0
  assert mini_suite.final_train_loss(path, last=1) == 2.0


def test_score_blank_inputs_scores_each_task_with_blank_inputs(tmp_path, monkeypatch):
  """The control's loop with stand-ins for the restored run and the scoring: every task of
  the suite, its first max_eval_examples examples (all when 0) with "" as the input, read
  from the config's data_dir (None when "")."""
  from lm import restore  # pylint: disable=g-import-not-at-top
  from lm.downstream import finetune  # pylint: disable=g-import-not-at-top
  loads, scored = [], []

  def get_task(name):
    def load(split, data_dir):
      loads.append((name, split, data_dir))
      return [{"inputs": f"{name} {i}", "targets": "a"} for i in range(3)]
    return task_lib.Task(name=name, load=load, preprocess=dict, metric_fns=(),
                         choices=lambda ex: ("a", "b"))

  def evaluate(settings, model, params, tokenizer, task, examples, *, mesh, rules):
    scored.append((task.name, examples, settings.rank_classification, model, mesh, rules))
    return {"metrics": {"accuracy": float(len(examples))}}

  restored = types.SimpleNamespace(model="m", params="p", tokenizer="t", mesh="mesh",
                                   rules="rules")
  monkeypatch.setattr(task_lib, "get_task", get_task)
  monkeypatch.setattr(restore, "load_run", lambda workdir, step: (
      scored.append(("load", workdir, step)) or restored))
  monkeypatch.setattr(finetune, "evaluate_one_task", evaluate)
  base = mini_suite.load_config(CONFIG)
  got = mini_suite.score_blank_inputs(
      mini_suite.suite_config(base, None, steps=4, max_eval_examples=2), tmp_path, 4)
  assert got == {n: {"accuracy": 2.0} for n in mini.HEADLINE}
  assert scored[0] == ("load", str(tmp_path), 4)
  assert [s[0] for s in scored[1:]] == list(mini.HEADLINE)
  assert loads == [(n, "validation", None) for n in mini.HEADLINE]
  for name, examples, ranked, model, mesh, rules in scored[1:]:
    assert [ex["inputs"] for ex in examples] == ["", ""]
    assert [ex[mini.BLANK_CHOICES] for ex in examples] == [["a", "b"]] * 2
    assert ranked and (model, mesh, rules) == ("m", "mesh", "rules")
  base.finetune.data_dir = "/data/mini"
  scored.clear()
  loads.clear()
  got = mini_suite.score_blank_inputs(
      mini_suite.suite_config(base, None, steps=4, decode=True), tmp_path, 4)
  assert got == {n: {"accuracy": 3.0} for n in mini.HEADLINE}   # 0: every example
  assert loads == [(n, "validation", "/data/mini") for n in mini.HEADLINE]
  assert not any(s[2] for s in scored[1:])                       # decoded


def test_the_module_runs_main_as_a_script(monkeypatch, capsys):
  import runpy  # pylint: disable=g-import-not-at-top
  import warnings  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(sys, "argv", ["python -m lm.mini_suite", "--help"])
  with warnings.catch_warnings(), pytest.raises(SystemExit) as e:
    warnings.simplefilter("ignore", RuntimeWarning)   # "found in sys.modules"
    runpy.run_module("lm.mini_suite", run_name="__main__")
  assert e.value.code == 0 and "--from_scratch" in capsys.readouterr().out
