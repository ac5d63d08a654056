"""lm.main's command-line parsing: a config-field typo or a missing config file is one
`error:` line with exit code 2 (row r), not ml_collections' traceback."""
import os
import subprocess
import sys

import ml_collections
import pytest

from lm import cli, main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_override_error_names_the_field_and_the_closest_match():
  config = ml_collections.ConfigDict({"optim": {"name": "adafactor", "adafactor": {
      "momentum": 0.0}}, "data": {"objective": "span_corruption"}})
  argv = ["lm.main", "--config=configs/t5.py", "--workdir=w"]
  assert main.override_error(config, argv + ["--config.optim.name=adamw"]) is None
  assert main.override_error(config, argv + ["--config.optim.nmae=adamw"]) == (
      "--config.optim.nmae: config.optim has no field 'nmae'; did you mean --config.optim.name?")
  assert main.override_error(config, argv + ["--config.optim.adafactor.momentm=1"]) == (
      "--config.optim.adafactor.momentm: config.optim.adafactor has no field 'momentm'; did you "
      "mean --config.optim.adafactor.momentum?")
  assert main.override_error(config, argv + ["--config.zzzz=1"]) == (
      "--config.zzzz: config has no field 'zzzz'; its fields are: data, optim")


@pytest.mark.parametrize("args, message", [
    (["--config=configs/t5.py:runlocal", "--config.optim.nmae=adamw"],
     "error: --config.optim.nmae: config.optim has no field 'nmae'; did you mean "
     "--config.optim.name?"),
    (["--config=configs/t5.py:runlocal", "--config.data.batch_size=abc"],
     "error: flag --config.data.batch_size=abc: expected an int."),
    (["--config=configs/t5.py:bogus=1"], "error: ValueError: unknown config arg 'bogus'; expected one of "),
    (["--config=configs/nope.py:runlocal"], "error: --config=configs/nope.py:runlocal: no config "
     "file 'configs/nope.py'"),
    (["--config=configs/t5.py:runlocal", "--coordinator_address=localhost:1"],
     "error: --coordinator_address needs --num_processes and --process_id."),
])
def test_command_line_mistakes_are_one_line(tmp_path, args, message):
  env = {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"}
  out = subprocess.run([sys.executable, "-m", "lm.main", *args, f"--workdir={tmp_path / 'w'}"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
  assert out.returncode == 2, out.stderr
  assert out.stderr.strip().startswith(message), out.stderr
  assert len(out.stderr.strip().splitlines()) == 1, out.stderr
  assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("flag", ["--help", "--helpfull"])
def test_help_exits_0_with_the_usage_on_stdout(flag):
  env = {**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"}
  out = subprocess.run([sys.executable, "-m", "lm.main", flag], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  assert "Exit status" in out.stdout and "--workdir" in out.stdout
  assert cli.asks_for_help(["lm.main", "-?"]) and not cli.asks_for_help(
      ["lm.main", "--config=c.py", "--", "--help"])
