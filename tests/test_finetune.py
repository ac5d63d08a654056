"""Fine-tuning: configs/finetune.py, the trainer with a task's data, exact resume, best checkpoint."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import downstream_fixtures as fx
from lm import config as config_lib
from lm.validate import validate

fx.register_tasks()


def _config(steps=8, eval_every=4, arch="encoder_decoder", task="task=test_copy", **overrides):
  from configs import finetune
  c = config_lib.derive(finetune.get_config(
      f"{task},runlocal,arch={arch},inputs_length=16,targets_length=8,"
      f"steps={steps},eval_every={eval_every}"))
  c.data.tokenizer = fx.tokenizer_path()
  c.model.vocab_size = 128
  c.wandb.mode = "disabled"
  c.ckpt.async_save = False
  c.train.log_every = 2
  c.finetune.max_eval_examples = 8
  c.finetune.max_decode_length = 5
  for key, value in overrides.items():
    node = c
    *parents, leaf = key.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = value
  return c


def _train(config, workdir):
  """The trainer with fine-tuning's parts, as lm.main runs a fine-tuning config."""
  from lm import train
  from lm.downstream import finetune
  return train.train_and_evaluate(validate(config), workdir, finetune.PARTS)


def _metrics(workdir):
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def _comparable(workdir):
  timing = ("time", "tokens_per_s", "mfu", "data_wait_fraction")
  return [{k: v for k, v in m.items() if k not in timing}
          for m in _metrics(workdir)]


def _params(workdir, step):
  from lm import restore
  return restore.load_run(workdir, step=step).params


def test_config_has_t5_finetuning_settings():
  from configs import finetune
  c = config_lib.derive(finetune.get_config("task=test_copy,runlocal"))
  from lm import validate
  validate.validate(c, num_devices=1)
  assert c.optim.name == "adafactor"
  assert (c.schedule.name, c.schedule.base_lr, c.schedule.warmup_steps) == ("constant", 1e-3, 0)
  assert c.model.dropout_rate == 0.1 and c.data.pack
  assert (c.ckpt.keep_best, c.ckpt.best_metric, c.ckpt.best_mode) == (
      1, "eval/finetune_score", "max")
  assert c.finetune.tasks == "test_copy:1" and c.train.num_steps == 300
  paper = config_lib.derive(finetune.get_config("task=test_copy"))
  assert paper.train.num_steps == 2 ** 18 and paper.ckpt.every_steps == 5000
  assert (paper.loss.normalization, paper.loss.normalizing_constant) == ("constant", 233472.0)
  assert (paper.data.inputs_length, paper.data.batch_size) == (512, 128)
  mixed = config_lib.derive(finetune.get_config("mixture=test_copy:2+test_first:1,runlocal"))
  assert mixed.finetune.tasks == "test_copy:2,test_first:1"


@pytest.mark.parametrize("arg, message", [
    ("task=nope", "unknown task 'nope'; expected one of"),
    ("task=test_copy,mixture=test_copy:1", "exactly one of task=NAME or mixture"),
    ("", "exactly one of task=NAME or mixture"),
    ("mixture=test_copy:x", "must be a number"),
])
def test_config_bad_input(arg, message):
  from configs import finetune
  with pytest.raises(ValueError, match=message):
    config_lib.derive(finetune.get_config(arg))


def test_missing_split_fails_before_training(tmp_path):
  with pytest.raises(ValueError, match="task 'test_copy' has no split 'dev'"):
    _train(_config(**{"finetune.split": "dev"}), str(tmp_path / "run"))


def test_task_metrics_and_score_are_logged_to_wandb(tmp_path, monkeypatch):
  """The task evaluation's values reach wandb (a recording stand-in for WandbWriter), at
  the evaluation step, with the fine-tuning project and the task as a tag."""
  from lm import writers
  from lm.downstream import finetune
  runs = []

  class RecordingWandb:
    def __init__(self, workdir, **kwargs):
      self.kwargs, self.logged = kwargs, []
      runs.append(self)

    def write(self, step, metrics, **kwargs):
      del kwargs
      self.logged.append((step, dict(metrics)))

    def close(self):
      pass

  monkeypatch.setattr(writers, "WandbWriter", RecordingWandb)
  workdir = str(tmp_path / "run")
  _train(_config(steps=4, eval_every=4, **{"wandb.mode": "offline"}), workdir)
  (run,) = runs
  assert run.kwargs["project"] == "lm-finetune" and "test_copy" in run.kwargs["tags"]
  evals = [(step, m) for step, m in run.logged if finetune.SCORE_KEY in m]
  assert [step for step, _ in evals] == [4]
  with open(os.path.join(workdir, "eval", "tasks_step_4.json")) as f:
    result = json.load(f)
  em = result["results"]["test_copy"]["exact_match"]
  assert evals[0][1]["eval/test_copy/exact_match"] == pytest.approx(em)
  assert evals[0][1][finetune.SCORE_KEY] == pytest.approx(em)


_KILL_DRIVER = """
import sys, time
sys.path[:0] = [{tests!r}, {repo!r}]
import downstream_fixtures as fx
fx.tokenizer_path = lambda: {tokenizer!r}  # the parent's tokenizer file (same checkpoint signature)
import test_finetune
from lm.downstream import finetune
real = finetune.evaluate

def evaluate(*args, step=0, **kwargs):
  out = real(*args, step=step, **kwargs)
  if step == 6:  # step 6 evaluated and written, its checkpoint not yet saved: wait for the kill
    open({marker!r}, "w").close()
    time.sleep(600)
  return out

finetune.evaluate = evaluate
test_finetune._train(test_finetune._config(steps=8, eval_every=2), {workdir!r})
"""


@pytest.mark.slow
def test_sigkill_during_finetuning_then_resume_is_exact(tmp_path):
  """A fine-tuning run SIGKILLed between checkpoints (step 4 saved, step 6 evaluated) and
  started again ends exactly like an uninterrupted run: metrics (train windows and task
  evaluations), predictions, per-task best results and parameters. (It replaced a fast
  test that stopped cleanly at step 4 and resumed: the same three runs, a weaker stop.)"""
  tests = pathlib.Path(__file__).resolve().parent
  whole, killed = str(tmp_path / "whole"), str(tmp_path / "killed")
  marker = str(tmp_path / "at_step_6")
  _train(_config(steps=8, eval_every=2), whole)
  driver = tmp_path / "driver.py"
  driver.write_text(textwrap.dedent(_KILL_DRIVER.format(
      tests=str(tests), repo=str(tests.parent), tokenizer=fx.tokenizer_path(), marker=marker,
      workdir=killed)))
  proc = subprocess.Popen([sys.executable, str(driver)], cwd=str(tests.parent),
                          env={**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  deadline = time.time() + 300
  while not os.path.exists(marker) and proc.poll() is None and time.time() < deadline:
    time.sleep(0.05)
  alive = proc.poll() is None
  proc.send_signal(signal.SIGKILL)
  _, err = proc.communicate()
  assert alive and os.path.exists(marker), err[-3000:]
  from lm import checkpoint
  assert checkpoint.checkpoint_steps(os.path.join(killed, "checkpoints")) == [2, 4]
  assert os.path.exists(os.path.join(killed, "eval", "tasks_step_6.json"))  # left by the killed run

  _train(_config(steps=8, eval_every=2), killed)
  assert _comparable(killed) == _comparable(whole)
  for step in (2, 4, 6, 8):
    name = f"eval/tasks_step_{step}.test_copy.validation.jsonl"
    with open(os.path.join(whole, name)) as a, open(os.path.join(killed, name)) as b:
      assert a.read() == b.read()
  with open(os.path.join(whole, "eval", "tasks_best.json")) as a, open(
      os.path.join(killed, "eval", "tasks_best.json")) as b:
    best = json.load(a)
    assert best == json.load(b)  # the per-task best results (T5's reporting) resume exactly
  assert best["evaluated_steps"] == [2, 4, 6, 8] and best["steps"]["test_copy"] in (2, 4, 6, 8)
  from lm.downstream import finetune
  assert [m["step"] for m in _metrics(whole) if finetune.SCORE_KEY in m] == [2, 4, 6, 8]
  with open(os.path.join(whole, "eval", "tasks_step_8.json")) as f:
    result = json.load(f)
  assert set(result["results"]) == {"test_copy"} and result["tasks"]["test_copy"][
      "num_examples"] == 8
  import jax
  for a, b in zip(jax.tree.leaves(_params(whole, 8)), jax.tree.leaves(_params(killed, 8))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_best_checkpoint_is_the_best_scored_step(tmp_path, monkeypatch):
  """Scripted task scores per eval step; keep=1 + keep_best=1 keep the best and the latest."""
  from lm import checkpoint
  from lm.downstream import finetune
  scores = {2: 10.0, 4: 50.0, 6: 20.0, 8: 30.0}
  seen = []

  def fake_evaluate(config, model, params, tokenizer, *, mesh=None, rules=None, workdir=None,
                    step=0):
    seen.append(step)
    return {"eval/test_copy/exact_match": scores[step], finetune.SCORE_KEY: scores[step]}
  monkeypatch.setattr(finetune, "evaluate", fake_evaluate)
  workdir = str(tmp_path / "run")
  _train(_config(steps=8, eval_every=2, **{"ckpt.keep": 1}), workdir)
  assert seen == [2, 4, 6, 8]
  assert checkpoint.checkpoint_steps(os.path.join(workdir, "checkpoints")) == [4, 8]
  logged = {m["step"]: m[finetune.SCORE_KEY] for m in _metrics(workdir)
            if finetune.SCORE_KEY in m}
  assert logged == scores


_COPY_DRIVER = """
import json, sys
sys.path[:0] = [{tests!r}, {repo!r}]
import downstream_fixtures as fx
fx.tokenizer_path = lambda: {tokenizer!r}  # the parent's tokenizer file
import jax
import test_finetune
config = test_finetune._config(steps=400, eval_every=100, arch={arch!r}, **{{
    "schedule.base_lr": 1e-2, "train.log_every": 50, "finetune.max_eval_examples": 0,
    "ckpt.keep": 1}})
out = test_finetune._train(config, {workdir!r})
print(json.dumps({{**out, "devices": jax.device_count()}}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["encoder_decoder", "prefix_lm"])
def test_finetuning_learns_a_copy_task(tmp_path, arch):
  """From random initialisation (hence a higher constant lr than T5's 1e-3 for pre-trained
  models), copying unseen 3-letter words reaches high exact match in a few hundred steps."""
  from lm import checkpoint
  from lm.downstream import finetune
  workdir = str(tmp_path / arch)
  # In its own process on one CPU device, as a user runs it (the tests' 8 simulated devices
  # make 400 steps of the tiny model about twice as slow).
  tests = pathlib.Path(__file__).resolve().parent
  driver = tmp_path / "driver.py"
  driver.write_text(textwrap.dedent(_COPY_DRIVER.format(
      tests=str(tests), repo=str(tests.parent), tokenizer=fx.tokenizer_path(), arch=arch,
      workdir=workdir)))
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"}
  env.pop("XLA_FLAGS", None)
  run = subprocess.run([sys.executable, str(driver)], cwd=str(tests.parent), env=env,
                       capture_output=True, text=True, timeout=900)
  assert run.returncode == 0, run.stderr[-3000:]
  out = json.loads(run.stdout.strip().splitlines()[-1])
  assert out["devices"] == 1
  assert out["eval/test_copy/exact_match"] >= 80.0, out
  scores = {m["step"]: m[finetune.SCORE_KEY] for m in _metrics(workdir)
            if finetune.SCORE_KEY in m}
  kept = checkpoint.checkpoint_steps(os.path.join(workdir, "checkpoints"))
  assert max(scores[s] for s in kept) == max(scores.values())  # a best step is kept (ties)
