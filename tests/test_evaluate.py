"""lm.evaluate: pure pieces by hand (fast) and restore-and-evaluate end to end (slow)."""
import json
import math
import os

import jax
import numpy as np
import pytest

from lm import evaluate, heldout, restore
from eval_runs import copy_run, trained_run


def test_parse_score():
  assert heldout.parse_score("all", "prefix_lm") == [
      "prefix_lm", "span_corruption", "full_lm", "continuation"]
  assert heldout.parse_score("continuation,own", "span_corruption") == [
      "span_corruption", "continuation"]
  with pytest.raises(ValueError, match=r"unknown score 'spam'; expected one of \['all', 'own', "
                     r"'continuation', .*'span_corruption'"):
    heldout.parse_score("spam", "span_corruption")


def test_split_continuation_cuts_at_whitespace():
  doc = "aaa bbb ccc ddd eee fff ggg"
  #      0123456789...      prefix budget 9 -> cut at the space at index 7
  assert heldout.split_continuation(doc, 9, 8) == ("aaa bbb", "ccc ddd")
  assert heldout.split_continuation("short text", 9, 8) is None


@pytest.mark.parametrize("arch, joined, weighted", [
    # prefix [5 6], continuation [7 8 9]: only 7 8 9 are scored, never an EOS.
    ("encoder_decoder", False, [7, 8, 9]),
    ("prefix_lm", False, [7, 8, 9]),
    ("causal", False, [7, 8, 9]),
    ("causal", True, [7, 8, 9]),
    ("encoder_decoder", True, [7, 8, 9]),
])
def test_continuation_features_score_only_the_continuation(arch, joined, weighted):
  ex = heldout.continuation_features(np.array([5, 6]), np.array([7, 8, 9]), arch,
                                      joined=joined)
  w = ex["decoder_loss_weights"] > 0
  assert ex["decoder_target_tokens"][w].tolist() == weighted
  if arch == "encoder_decoder" and not joined:
    assert ex["encoder_input_tokens"].tolist() == [5, 6, 1]
  if arch == "prefix_lm":  # prefix (with its EOS) fully visible
    assert ex["decoder_causal_attention"].tolist() == [1, 1, 1, 1, 0, 0, 0]
  if joined and arch == "causal":  # one text: no EOS between prefix and continuation
    assert ex["decoder_target_tokens"].tolist() == [5, 6, 7, 8, 9, 1]


def test_markdown_table():
  a = {"workdir": "/runs/a", "architecture": "causal", "objective": "full_lm", "step": 4,
       "results": {"full_lm": {"cross_entropy": 2.0, "accuracy": 0.5},
                   "continuation": {"nll_per_token": 3.0, "bits_per_byte": 1.25}}}
  b = {"workdir": "/runs/b/", "architecture": "encoder_decoder",
       "objective": "span_corruption", "step": 8,
       "results": {"span_corruption": {"cross_entropy": 1.5, "accuracy": float("nan")}}}
  assert evaluate.markdown_table([a, b]).splitlines() == [
      "| run | architecture | objective | step | full_lm xent | full_lm acc | span_corruption "
      "xent | span_corruption acc | cont. nll/token | cont. bits/byte |",
      "|---|---|---|---|---|---|---|---|---|---|",
      "| a | causal | full_lm | 4 | 2.0000 | 0.5000 | – | – | 3.0000 | 1.2500 |",
      "| b | encoder_decoder | span_corruption | 8 | – | – | 1.5000 | – | – | – |",
  ]


def test_help_explains_and_exits_0(capsys):
  with pytest.raises(SystemExit) as exit_info:
    evaluate.run(["--help"])
  assert exit_info.value.code == 0
  out = capsys.readouterr().out
  assert "bits per byte" in out and "--workdirs" in out and "--config." in out


def test_cli_errors_are_one_line_with_exit_2(tmp_path, capsys):
  for argv, match in [
      ([f"--workdir={tmp_path}/nope"], "does not exist"),
      ([], "exactly one of --workdir"),
      (["--workdirs=a,b"], "needs --output"),
      ([f"--workdir={tmp_path}", "--bogus=1"], "unknown arguments"),
  ]:
    assert evaluate.run(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and match in err and err.count("\n") == 1, err


@pytest.mark.parametrize("flag,named", [
    ("--num_batches=-5", "--num_batches must be >= 1, or 0 (the whole held-out split) or -1"),
    ("--step=-2", "--step must be >= 0"),
    ("--prefix_chars=0", "--prefix_chars must be >= 1"),
    ("--num_examples=-1", "--num_examples must be >= 1"),
    ("--max_examples=0", "--max_examples must be >= 1"),
    ("--max_decode_length=-1", "--max_decode_length must be >= 1"),
    ("--batch_size=0", "--batch_size must be >= 1"),
    ("--num_processes=0", "--num_processes must be >= 1"),
    ("--process_id=-1", "--process_id must be in [0, --num_processes)"),
])
def test_numeric_flags_are_validated_and_named(tmp_path, capsys, flag, named):
  """Checked before any work: a workdir that exists but holds no run is never read."""
  assert evaluate.run([f"--workdir={tmp_path}", flag]) == 2
  err = capsys.readouterr().err
  assert err.startswith(f"error: {named}") and err.count("\n") == 1, err
  assert evaluate.run([f"--workdir={tmp_path}", "--num_processes=2", "--process_id=2"]) == 2
  assert "--process_id must be in [0, --num_processes)" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# End to end on tiny trained runs (slow: each trains a model for a few steps).

def _logged_eval(workdir, step):
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    for line in f:
      m = json.loads(line)
      if m["step"] == step and "eval_loss" in m:
        return m
  raise AssertionError(f"no eval at step {step}")


@pytest.mark.slow
def test_restore_and_evaluate_reproduces_the_logged_eval_loss_on_1_and_8_devices(tmp_path):
  workdir = copy_run(trained_run(), str(tmp_path / "run"))
  logged = _logged_eval(workdir, 4)
  results = {}
  for name, kwargs in [("8", {}), ("1", dict(mesh_shape=(1, 1, 1),
                                             devices=jax.devices()[:1]))]:
    r = restore.load_run(workdir, **kwargs)
    results[name] = heldout.evaluate_run(
        r, evaluate.heldout_settings(r), score=["span_corruption", "prefix_lm", "continuation"],
        num_examples=16)
  own = results["8"]["results"]["span_corruption"]
  np.testing.assert_allclose(own["loss"], logged["eval_loss"], rtol=1e-5)
  np.testing.assert_allclose(own["accuracy"], logged["eval_accuracy"], rtol=1e-6)
  np.testing.assert_allclose(own["perplexity"], math.exp(logged["eval_cross_entropy"]),
                             rtol=1e-5)
  for name in ("span_corruption", "prefix_lm", "continuation"):
    for key, value in results["8"]["results"][name].items():
      np.testing.assert_allclose(results["1"]["results"][name][key], value, rtol=1e-5,
                                 err_msg=f"{name}/{key}")
  cont = results["8"]["results"]["continuation"]
  assert cont["examples"] > 0 and cont["bytes"] > cont["tokens"] > 0
  np.testing.assert_allclose(
      cont["bits_per_byte"], cont["nll_per_token"] * cont["tokens"] / math.log(2) / cont["bytes"])


@pytest.mark.slow
def test_cli_writes_json_table_and_wandb(tmp_path, monkeypatch, capsys):
  workdir = copy_run(trained_run(), str(tmp_path / "run"))
  with open(os.path.join(workdir, "wandb_run_id.txt"), "w", encoding="utf-8") as f:
    f.write("evaltest1\n")
  monkeypatch.delenv("WANDB_MODE", raising=False)
  table = str(tmp_path / "table.md")
  assert evaluate.run([f"--workdirs={workdir}", f"--output={table}", "--step=2",
                       "--score=own,continuation", "--num_examples=8",
                       "--wandb_mode=offline", "--config.data.eval_batch_size=8",
                       "--progress"]) == 0
  with open(os.path.join(workdir, "eval", "step_2.json"), encoding="utf-8") as f:
    result = json.load(f)
  assert result["step"] == 2 and set(result["results"]) == {"span_corruption", "continuation"}
  assert not [n for n in os.listdir(os.path.join(workdir, "eval")) if n.endswith(".tmp")]
  with open(table, encoding="utf-8") as f:
    assert "| run | architecture" in f.read()
  offline = [d for d in os.listdir(os.path.join(workdir, "wandb")) if d.endswith("evaltest1")]
  assert offline, os.listdir(os.path.join(workdir, "wandb"))
  # Bad inputs through the command line: unknown step, shape-changing override.
  capsys.readouterr()
  assert evaluate.run([f"--workdir={workdir}", "--step=3"]) == 2
  assert "available steps: 2, 4" in capsys.readouterr().err
  assert evaluate.run([f"--workdir={workdir}", "--config.model.num_heads=3"]) == 2
  assert "changes the model's shapes" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["prefix_lm", "causal"])
def test_decoder_only_runs_evaluate(arch):
  r = restore.load_run(trained_run(arch))
  names = heldout.parse_score("own,full_lm,continuation", r.config.data.objective)
  result = heldout.evaluate_run(r, evaluate.heldout_settings(r), score=names, num_examples=8)
  logged = _logged_eval(r.workdir, 4)
  own = result["results"][r.config.data.objective]
  np.testing.assert_allclose(own["loss"], logged["eval_loss"], rtol=1e-5)
  assert math.isfinite(result["results"]["continuation"]["bits_per_byte"])
  assert result["results"]["full_lm"]["target_tokens"] > 0


@pytest.mark.slow
def test_two_processes_evaluate_like_one(tmp_path):
  """2 processes x 4 devices (jax.distributed) give the numbers of 1 process x 8 devices."""
  import socket
  import subprocess
  import sys
  workdir = copy_run(trained_run(), str(tmp_path / "run"))
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  args = ["--score=own,continuation", "--num_examples=8", f"--workdir={workdir}",
          "--wandb_mode=disabled"]
  r = restore.load_run(workdir)
  one = heldout.evaluate_run(r, evaluate.heldout_settings(r),
                             score=["span_corruption", "continuation"], num_examples=8)
  with socket.socket() as s:
    s.bind(("localhost", 0))
    port = s.getsockname()[1]
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled",
         "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
  procs = [subprocess.Popen(
      [sys.executable, "-m", "lm.evaluate", *args, f"--coordinator_address=localhost:{port}",
       "--num_processes=2", f"--process_id={i}"], cwd=repo, env=env,
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(2)]
  errs = [p.communicate(timeout=600)[1] for p in procs]
  for p, err in zip(procs, errs):
    assert p.returncode == 0, err[-3000:]
  with open(os.path.join(workdir, "eval", "step_4.json"), encoding="utf-8") as f:
    two = json.load(f)
  for name in ("span_corruption", "continuation"):
    for key, value in one["results"][name].items():
      if isinstance(value, float):
        np.testing.assert_allclose(two["results"][name][key], value, rtol=1e-5,
                                   err_msg=f"{name}/{key}")


def test_heldout_settings_are_read_from_the_runs_config_at_the_command():
  """lm.heldout takes typed parts; lm.evaluate reads them from the run's config.json."""
  import types

  from configs import t5
  from lm import config as config_lib
  config = config_lib.derive(t5.get_config("runlocal"))
  config.train.eval_steps, config.data.eval_batch_size, config.loss.z_loss = 7, None, 1e-3
  s = evaluate.heldout_settings(types.SimpleNamespace(config=config))
  assert s.spec == config_lib.data_spec(config) and s.eval_steps == 7
  assert s.batch_size == config.data.batch_size            # no eval_batch_size: the batch size
  assert s.step_kwargs == config_lib.eval_step_kwargs(config) and s.step_kwargs["z_loss"] == 1e-3
  config.data.eval_batch_size = 24
  assert evaluate.heldout_settings(types.SimpleNamespace(config=config)).batch_size == 24
  with pytest.raises(ValueError, match="needs a training run"):
    evaluate.heldout_settings(types.SimpleNamespace(config=None))
