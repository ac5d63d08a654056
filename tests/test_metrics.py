"""lm/metrics.py: (sum, weight) aggregation, peak FLOP/s table, matmul measurement, MFU."""
import math
import types

import numpy as np
import pytest

from lm import metrics


def test_merge_and_compute_are_exact_weighted_means():
  a = {"loss": (np.float32(10.0), np.float32(4.0)), "lr": (np.float32(0.1), np.float32(1.0))}
  b = {"loss": (np.float32(2.0), np.float32(1.0)), "lr": (np.float32(0.3), np.float32(1.0))}
  acc = metrics.merge(metrics.merge(None, a), b)
  out = metrics.compute(acc)
  assert out["loss"] == pytest.approx(12.0 / 5.0) and out["lr"] == pytest.approx(0.2)
  assert metrics.totals(acc)["loss"] == pytest.approx(12.0)
  assert math.isnan(metrics.compute({"x": (0.0, 0.0)})["x"])
  with pytest.raises(ValueError, match="metric names differ"):
    metrics.merge(acc, {"loss": (1.0, 1.0)})


@pytest.mark.parametrize("kind, flops", [
    ("TPU v4", 275e12), ("TPU v5 lite", 197e12), ("TPU v5p", 459e12), ("TPU v6 lite", 918e12),
    ("NVIDIA A100-SXM4-40GB", 312e12), ("NVIDIA H100 80GB HBM3", 989e12),
    ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H200", 989e12), ("cpu", None),
])
def test_peak_flops_table(kind, flops):
  assert metrics.peak_flops_per_device(types.SimpleNamespace(device_kind=kind)) == flops


def test_measure_matmul_flops_and_mfu():
  flops = metrics.measure_matmul_flops(n=256, repeats=2)
  assert 1e7 < flops < 1e14  # any real CPU; catches unit errors (s vs ms, n^2 vs n^3)
  assert metrics.mfu(6e9, 1e3, 1e13) == pytest.approx(0.6)
  assert math.isnan(metrics.mfu(1.0, 1.0, 0.0))


def test_peak_flops_of_chips_is_the_spec_sheet_times_the_device_count():
  chips = [types.SimpleNamespace(device_kind="TPU v5p", process_index=0)] * 4
  assert metrics.peak_flops(chips) == (4 * 459e12, "spec sheet dense bf16 x 4 (TPU v5p)")


def test_peak_flops_on_cpu_is_the_measured_host_rate_times_the_hosts(monkeypatch):
  """CPU devices share their host's cores: the host's best matmul rate, once per host."""
  calls = []

  def measure(n, repeats, device):
    calls.append((n, repeats, device.platform))
    return {256: 2e9, 512: 3e9}[n]
  monkeypatch.setattr(metrics, "measure_matmul_flops", measure)
  flops, source = metrics.peak_flops(sizes=(256, 512), repeats=3, hosts=2)
  assert flops == 6e9 and calls == [(256, 3, "cpu"), (512, 3, "cpu")]
  assert source.startswith("best float32 matmul (256^3, 512^3) measured on the host")


def test_window_rates_by_hand():
  # 6000 tokens in 2 s = 3000 tokens/s; 3000 * 2e9 FLOPs/token / 1.2e13 FLOP/s = 0.5.
  # 0.5 s of the 2 s spent waiting for batches: data_wait_fraction 0.25.
  out = metrics.window_rates(6000.0, 2.0, [0.5, 0.75, 1.0], flops_per_token=2e9,
                             peak_flops_total=1.2e13, data_wait=0.5)
  assert out == {"tokens_per_s": 3000.0, "mfu": 0.5, "packing_efficiency": 0.75,
                 "data_wait_fraction": 0.25}
  assert list(out) == ["tokens_per_s", "mfu", "packing_efficiency", "data_wait_fraction"]
  assert metrics.window_rates(1.0, 4.0, [1.0], flops_per_token=1.0,
                              peak_flops_total=1.0)["data_wait_fraction"] == 0.0
  assert metrics.window_rates(5.0, 0.0, [1.0], flops_per_token=1.0,
                              peak_flops_total=1.0)["tokens_per_s"] == 5e9  # 1e-9 s floor
  assert math.isnan(metrics.window_rates(1.0, 1.0, [1.0], flops_per_token=1.0,
                                         peak_flops_total=0.0)["mfu"])


def test_log_window_summary_and_json_round_trip():
  """Two steps: loss sums 3 + 5 over weights 2 + 2 -> mean 2; 30 + 50 tokens in 4 s."""
  window = metrics.LogWindow()
  assert window.to_json() == {} and metrics.LogWindow.from_json({}) == metrics.LogWindow()
  assert metrics.LogWindow.from_json(None) == metrics.LogWindow()
  step = lambda loss, tokens: {"loss": (np.float32(loss), np.float32(2.0)),
                               "tokens": (np.int32(tokens), np.int32(1))}
  window.add([step(3.0, 30)])
  window.packing += [0.5, 1.0]
  window.add([step(5.0, 50)])
  saved = window.to_json()
  assert saved == {"acc": {"loss": [8.0, 4.0], "tokens": [80.0, 2.0]}, "packing_eff": [0.5, 1.0]}
  restored = metrics.LogWindow.from_json(saved)
  assert restored.data_wait == 0.0  # wall-clock waits are not saved, like the window's time
  window.data_wait = restored.data_wait = 1.0
  summaries = [w.summary(4.0, flops_per_token=100.0, peak_flops_total=4000.0,
                         static={"noise_density": 0.15}) for w in (window, restored)]
  # means, then the static values, then tokens/s = 80 / 4 = 20, mfu = 100 * 20 / 4000,
  # 1 s of the 4 s waiting for batches.
  assert summaries[0] == summaries[1] == {
      "loss": 2.0, "tokens": 40.0, "noise_density": 0.15, "tokens_per_s": 20.0, "mfu": 0.5,
      "packing_efficiency": 0.75, "data_wait_fraction": 0.25}
  assert list(summaries[0]) == ["loss", "tokens", "noise_density", "tokens_per_s", "mfu",
                                "packing_efficiency", "data_wait_fraction"]
  assert metrics.LogWindow.from_json({"acc": saved["acc"]}).packing == []  # older checkpoints
