"""benchmarks/gpu_speed.py and gpu_speed.sh on the CPU with the tiny preset: each stage runs
and writes the JSON the GPU run reads; the numerics gate passes on equal sides and fails on
different ones. (The figures themselves are the GPU's; nothing here checks a speed.)"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import gpu_speed  # noqa: E402  pylint: disable=g-import-not-at-top

TINY = "t5:size=tiny,batch=8,inputs_length=32"  # 8: the tests run on 8 CPU devices


def _xla_sides():
  """The attention override for both sides where the config has the field (the fused
  paths' switch, model.attention_impl); without it both sides run lm's one path."""
  config = gpu_speed.load_config(TINY, [])
  return ["model.attention_impl=xla"] if "attention_impl" in config.model else []


def _read(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def test_the_shell_script_parses_and_names_existing_files():
  subprocess.run(["bash", "-n", os.path.join(ROOT, "benchmarks", "gpu_speed.sh")], check=True)
  with open(os.path.join(ROOT, "benchmarks", "gpu_speed.sh"), encoding="utf-8") as f:
    text = f.read()
  for script in ("benchmarks/gpu_speed.py", "benchmarks/profile_step.py"):
    assert script in text and os.path.exists(os.path.join(ROOT, script))


def test_a_fused_run_without_its_kernel_is_named():
  cudnn = {"__cudnn$fmhaScaleBiasSoftmax": 2, "__cublas$gemm": 9}
  assert gpu_speed.fell_back([], {}) is None  # nothing fused asked for
  assert gpu_speed.fell_back(["model.attention_impl=xla"], {}) is None
  assert gpu_speed.fell_back(["model.attention_impl=cudnn"], cudnn) is None
  assert gpu_speed.fell_back(["model.attention_impl=pallas"], {"tpu_custom_call": 3}) is None
  assert "no cudnn kernel" in gpu_speed.fell_back(["model.attention_impl=cudnn"],
                                                   {"__cublas$gemm": 9})
  assert "no pallas kernel" in gpu_speed.fell_back(["model.attention_impl=pallas"], cudnn)
  # the last override wins, as in lm's config overrides
  assert gpu_speed.fell_back(["model.attention_impl=cudnn", "model.attention_impl=xla"],
                             {}) is None


def test_bad_config_module_is_one_error_line(capsys):
  assert gpu_speed.main(["speed", "--config", "nope:size=tiny"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: --config must be MODULE:ARG") and err.count("\n") == 1


@pytest.mark.slow
def test_stages_write_their_json_and_the_gate_can_fail(tmp_path):
  sides = _xla_sides()
  common = ["--config", TINY, "--set", "model.scan_layers=True"]
  a = [x for s in sides for x in ("--a", s)]
  b = [x for s in sides for x in ("--b", s)]
  assert gpu_speed.main(["numerics", *common, *a, *b, "--json",
                         str(tmp_path / "numerics.json")]) == 0
  gate = _read(tmp_path / "numerics.json")["results"]
  assert gate["agree"] and gate["relative_differences"]["loss"] == 0.0
  for side in ("a_result", "b_result"):  # T5's two relative-bias tables get a gradient
    assert set(gate[side]["bias_table_grad_norms"]) == {"encoder", "decoder"}
    assert all(v > 0 for v in gate[side]["bias_table_grad_norms"].values())

  # Sides that differ (bfloat16 activations on one) beyond a tight tolerance: exit 1.
  assert gpu_speed.main(["numerics", *common, "--b", "model.dtype=bfloat16", "--loss_rtol",
                         "1e-9", "--grad_rtol", "1e-9", "--json",
                         str(tmp_path / "differ.json.txt")]) == 1
  differ = _read(tmp_path / "differ.json.txt")["results"]
  assert not differ["agree"] and differ["problems"]
  if sides:  # cuDNN asked for on the CPU: equal numbers, but the gate names the fallback
    assert gpu_speed.main(["numerics", *common, "--b", "model.attention_impl=cudnn", "--json",
                           str(tmp_path / "fallback.json.txt")]) == 1
    fallback = _read(tmp_path / "fallback.json.txt")["results"]
    assert fallback["relative_differences"]["loss"] == 0.0
    assert fallback["problems"] == [fallback["problems"][0]] and "b: attention_impl=cudnn" in \
        fallback["problems"][0]

  speed_set = [x for s in sides for x in ("--set", s)]
  assert gpu_speed.main(["speed", *common, *speed_set, "--steps", "2", "--warmup", "1",
                         "--cpu_peak_size", "256", "--json", str(tmp_path / "tiny.json")]) == 0
  r = _read(tmp_path / "tiny.json")["results"]
  assert r["batch"] == 8 and r["inputs_length"] == 32 and len(r["step_times_s"]) == 2
  assert r["flops_per_step"] > 0 and 0 < r["mfu"] < 1 and r["init_s"] > 0
  assert r["peak_bytes_in_use"] is None and r["xla_bytes_per_device"] > 0  # the CPU's figure

  assert gpu_speed.main(["summary", "--dir", str(tmp_path), "--json",
                         str(tmp_path / "summary.json.txt")]) == 0
  s = _read(tmp_path / "summary.json.txt")["results"]
  assert [row["stage"] for row in s["speed"]] == ["tiny"] and s["numerics"]["agree"]
