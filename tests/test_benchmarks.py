"""Benchmarks: the fair-comparison machinery and the JSON results (fast), and every benchmark
script end to end on tiny settings (slow; figures not checked, only their presence)."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import fair  # noqa: E402  pylint: disable=g-import-not-at-top
import results  # noqa: E402  pylint: disable=g-import-not-at-top

HAS_HF = all(importlib.util.find_spec(m) for m in ("torch", "transformers"))


def _run(script, *args):
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
  out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), *args],
                       capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
  assert out.returncode == 0, out.stderr[-3000:]
  return out.stdout


# ----------------------------------------------------------------------------- fair.py


def test_compare_parity_when_round_ratios_straddle_one():
  lm = [[1.0, 1.1], [1.2, 1.2], [0.9, 1.0]]
  peer = [[1.1, 1.1], [1.0, 1.0], [1.0, 1.0]]  # round ratios 1.048, 0.833, 1.053
  c = fair.compare(lm, peer)
  assert c["verdict"] == "parity"
  assert c["round_ratios"] == pytest.approx([1.1 / 1.05, 1.0 / 1.2, 1.0 / 0.95])
  assert c["ratio"] == pytest.approx(1.0 / 1.05)  # median of all: peer 1.0, lm 1.05
  assert c["lm"]["min"] == 0.9 and c["lm"]["max"] == 1.2 and c["lm"]["median"] == 1.05
  assert c["ratio_min"] == pytest.approx(1.0 / 1.2) and c["ratio_max"] == pytest.approx(1.0 / 0.95)


def test_compare_verdicts_outside_the_spread():
  assert fair.compare([[1.0], [1.1]], [[2.0], [2.1]])["verdict"] == "lm faster"
  assert fair.compare([[2.0], [2.1]], [[1.0], [1.1]])["verdict"] == "peer faster"
  # one round: the step-time ranges decide; overlapping ranges are parity
  assert fair.compare([[1.0, 1.3]], [[1.2, 1.4]])["verdict"] == "parity"
  assert fair.compare([[1.0, 1.1]], [[1.2, 1.4]])["verdict"] == "lm faster"
  with pytest.raises(ValueError, match="same number"):
    fair.compare([[1.0]], [[1.0], [1.0]])
  line = fair.describe(fair.compare([[1.0], [1.1]], [[2.0], [2.1]]))
  assert "lm faster" in line and "over 2 rounds" in line


def test_alternate_reverses_the_order_every_round():
  calls = []
  sides = {"lm": lambda n: calls.append("lm") or [0.1] * n,
           "hf": lambda n: calls.append("hf") or [0.2] * n}
  out = fair.alternate(sides, rounds=3, steps=2, pause=0)
  assert calls == ["lm", "hf", "hf", "lm", "lm", "hf"]
  assert out == {"lm": [[0.1, 0.1]] * 3, "hf": [[0.2, 0.2]] * 3}
  with pytest.raises(ValueError, match=">= 1"):
    fair.alternate(sides, rounds=0, steps=1)


def test_worker_runs_in_its_own_process(tmp_path):
  script = tmp_path / "side.py"
  script.write_text(textwrap.dedent(f"""
      import os, sys, time
      sys.path.insert(0, {os.path.join(ROOT, 'benchmarks')!r})
      import fair
      def build(delay, fail=False):
        if fail:
          raise RuntimeError("cannot build")
        print("noise on stdout must not break the protocol")
        return (lambda: time.sleep(delay)), {{"pid": os.getpid(),
                                             "cpus": sorted(os.sched_getaffinity(0))}}
      sys.exit(fair.serve(build))
  """))
  with fair.Worker(str(script), {"delay": 0.01}) as w:
    assert w.info["pid"] != os.getpid()
    assert w.info["cpus"] == sorted(os.sched_getaffinity(0))  # inherits the affinity
    times = w.time(3)
    assert len(times) == 3 and all(0.009 < t < 5 for t in times)
  with pytest.raises(fair.WorkerError, match="RuntimeError: cannot build"):
    fair.Worker(str(script), {"delay": 0.0, "fail": True})


def test_hf_reference_compare_alternates_lm_and_the_worker(monkeypatch):
  """bench_model's and bench_train's comparison: `start` given the settings, both sides
  timed in alternating rounds, the worker's info kept."""
  import hf_reference  # pylint: disable=g-import-not-at-top
  started = []

  class Worker:
    info = {"threads": 1}

    def __enter__(self):
      return self

    def __exit__(self, *exc):
      return False

    def time(self, n):
      return [0.2] * n

  def start(config, batch, **kwargs):
    started.append((config, batch, kwargs))
    return Worker()

  monkeypatch.setattr(hf_reference, "start", start)
  steps = []
  c = hf_reference.compare(lambda: steps.append(1), "config", "batch", rounds=3, steps=2,
                           optimizer_step=True, device="cpu")
  assert started == [("config", "batch", {"optimizer_step": True, "device": "cpu"})]
  assert len(steps) == 6 and len(c["round_ratios"]) == 3 and c["hf_info"] == {"threads": 1}
  assert c["verdict"] == "lm faster"   # the lm step appends, far under 0.2 s


def test_pin_cpus_checks_the_count():
  cpus = fair.pin_cpus(0)
  assert cpus == sorted(os.sched_getaffinity(0))
  with pytest.raises(ValueError, match="lower --threads"):
    fair.pin_cpus(len(cpus) + 1)


# ----------------------------------------------------------------------------- results.py


def test_write_json_has_machine_versions_and_commit(tmp_path):
  path = tmp_path / "sub" / "r.json"
  results.write_json(str(path), "bench_x", {"rate": 1.5}, {"seconds": 2})
  doc = json.loads(path.read_text())
  assert doc["benchmark"] == "bench_x" and doc["results"] == {"rate": 1.5}
  assert doc["args"] == {"seconds": 2}
  env = doc["environment"]
  head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                        text=True).stdout.strip()
  assert env["git_commit"] == head and isinstance(env["git_dirty"], bool)
  assert env["machine"]["cpu_count"] == os.cpu_count()
  assert env["versions"]["numpy"] and env["versions"]["jax"]
  assert len(env["load_average_start"]) == 3
  assert not list(tmp_path.glob("sub/*.tmp"))


# ----------------------------------------------------------------------------- scripts


@pytest.mark.slow
def test_bench_train_tiny_prints_table_and_fair_comparison(tmp_path):
  out = _run("bench_train.py", "--archs", "encoder_decoder,causal", "--sizes", "tiny",
             "--inputs_length", "64", "--steps", "1", "--rounds", "2", "--compare_hf",
             "--json", str(tmp_path / "t.json"))
  assert "host memory retained" in out
  lines = [l for l in out.splitlines() if l.startswith(("encoder_decoder", "causal"))]
  assert len(lines) == 2 and all("%" in l and "MiB" in l for l in lines), out
  if not HAS_HF:  # CI's environment: lm's rows, and the comparison says why it did not run
    assert "--compare_hf skipped" in out and "torch" in out, out
    return
  assert "own process" in out and "over 2 rounds" in out, out
  doc = json.loads((tmp_path / "t.json").read_text())
  c = doc["results"]["runs"][0]["compare_hf"]
  assert len(c["round_ratios"]) == 2 and c["verdict"] in ("parity", "lm faster", "peer faster")
  assert c["hf_info"]["host_memory_retained"] is True


@pytest.mark.slow
def test_bench_model_tiny_prints_summary(tmp_path):
  out = _run("bench_model.py", "--presets", "cpu/tiny/encoder_decoder", "--inputs_length", "64",
             "--targets_length", "16", "--steps", "1", "--host_memory", "default",
             "--json", str(tmp_path / "m.json"))
  assert "host memory glibc default" in out
  assert "Summary" in out and "MFU" in out.split("Summary")[1], out
  doc = json.loads((tmp_path / "m.json").read_text())
  assert doc["results"]["presets"][0]["preset"] == "cpu/tiny/encoder_decoder"


@pytest.mark.slow
def test_bench_objectives_and_data_tiny(tmp_path):
  out = _run("bench_objectives.py", "--seconds", "0.05", "--block", "32",
             "--objectives", "span_corruption,deshuffle", "--json", str(tmp_path / "o.json"))
  assert "span_corruption" in out and "deshuffle" in out
  doc = json.loads((tmp_path / "o.json").read_text())
  rows = {r["objective"]: r for r in doc["results"]["objectives"]}
  assert rows["span_corruption"]["batched"]["per_cpu_s"] > 0 and "batched" not in rows["deshuffle"]
  out = _run("bench_data.py", "--seconds", "0.05", "--batch_size", "8", "--block", "16",
             "--objectives", "span_corruption,prefix_lm", "--json", str(tmp_path / "d.json"))
  assert "Host cores to feed ONE chip" in out and "h100" in out
  doc = json.loads((tmp_path / "d.json").read_text())
  sc = doc["results"]["objectives"][0]
  assert sc["per_example"]["rows"] > 0 and sc["numpy_block"]["packing_efficiency"] == 1.0
  assert sc["grain_block"]["rows"] > 0 and sc["cores_per_chip_path"] == "grain_block"
  assert sc["cores_per_chip"]["t5_1_1_base"]["h100"] > 0


# ----------------------------------------------------------------------------- profile_step.py

def _trace(events, processes, threads):
  meta = [{"ph": "M", "name": "process_name", "pid": p, "args": {"name": n}}
          for p, n in processes.items()]
  meta += [{"ph": "M", "name": "thread_name", "pid": p, "tid": t, "args": {"name": n}}
           for (p, t), n in threads.items()]
  return {"traceEvents": meta + [dict(ph="X", **e) for e in events]}


def test_profile_sums_device_kernels_by_hlo_op():
  import profile_step  # pylint: disable=g-import-not-at-top
  trace = _trace(
      [dict(pid=1, tid=7, name="k_a", dur=30.0, args={"hlo_op": "scatter.4"}),
       dict(pid=1, tid=7, name="k_b", dur=12.0, args={"hlo_op": "scatter.4"}),
       dict(pid=1, tid=8, name="gemm", dur=5.0),
       dict(pid=9, tid=1, name="host side", dur=1000.0),  # the host's own events
       dict(pid=3, tid=1, name="megascale", dur=99.0)],
      {1: "/device:GPU:0", 9: "/host:CPU", 3: "/device:CUSTOM:Megascale Trace"}, {})
  by_op, where = profile_step.device_time_by_op(trace)
  assert by_op == {"scatter.4": 42.0, "gemm": 5.0} and where == "/device:GPU:0"


def test_profile_sums_xla_cpu_thunks_without_their_containers():
  import profile_step  # pylint: disable=g-import-not-at-top
  trace = _trace(
      [dict(pid=5, tid=1, name="ynn_fusion.3", dur=8.0),
       dict(pid=5, tid=2, name="ynn_fusion.3", dur=2.0),
       dict(pid=5, tid=2, name="ThunkExecutor::Execute", dur=50.0),
       dict(pid=5, tid=3, name="jit_train_step", dur=70.0)],  # the Python thread
      {5: "/host:CPU", 4: "/device:CUSTOM:Megascale Trace"},
      {(5, 1): "tf_XLAEigen/1", (5, 2): "tf_XLAPjRtCpuClient/2", (5, 3): "python"})
  by_op, where = profile_step.device_time_by_op(trace)
  assert by_op == {"ynn_fusion.3": 10.0} and where == "host threads"


@pytest.mark.slow
def test_profile_step_tiny_prints_the_top_ops(tmp_path):
  out = _run("profile_step.py", "--config", "size=tiny,batch=8,inputs_length=32", "--steps", "1",
             "--warmup", "1", "--top", "5", "--init_on_cpu", "--trace_dir", str(tmp_path / "t"),
             "--set", "model.scan_layers=True", "--json", str(tmp_path / "p.json"),
             "--hlo", str(tmp_path / "step.hlo"))
  assert "model.scan_layers=True on cpu" in out and "ms/step" in out, out
  doc = json.loads((tmp_path / "p.json").read_text())["results"]
  assert len(doc["top_5_ops_ms_per_step"]) == 5 and doc["ops_ms_per_step_total"] > 0
  # The HLO names the profiled fusions (the way from an op to its source line).
  hlo = (tmp_path / "step.hlo").read_text()
  assert hlo.startswith("HloModule") and any(
      f"%{name} = " in hlo for name in doc["top_5_ops_ms_per_step"]), list(doc["top_5_ops_ms_per_step"])


def test_profile_step_refuses_an_unknown_config_field():
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "profile_step.py"),
                         "--set", "model.no_such_field=1"], capture_output=True, text=True,
                        timeout=120, cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert "has no field 'model.no_such_field'" in proc.stderr.strip().splitlines()[-1]
