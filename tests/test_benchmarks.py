"""The benchmarks run end to end on tiny presets and print their tables (figures not checked)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(script, *args):
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
  out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), *args],
                       capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
  assert out.returncode == 0, out.stderr[-3000:]
  return out.stdout


@pytest.mark.slow
def test_bench_train_tiny_prints_table():
  out = _run("bench_train.py", "--archs", "encoder_decoder,causal", "--sizes", "tiny",
             "--inputs_length", "64", "--steps", "1", "--compare_hf")
  assert "host memory retained" in out
  lines = [l for l in out.splitlines() if l.startswith(("encoder_decoder", "causal"))]
  assert len(lines) == 2 and all("%" in l and "MiB" in l for l in lines), out


@pytest.mark.slow
def test_bench_model_tiny_prints_summary():
  out = _run("bench_model.py", "--presets", "tiny", "--inputs_length", "64",
             "--targets_length", "16", "--steps", "1", "--host_memory", "default")
  assert "host memory glibc default" in out
  assert "Summary" in out and "MFU" in out.split("Summary")[1], out
