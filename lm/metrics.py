"""Metric aggregation (sum, weight) pairs, logging windows, peak FLOP/s per device, MFU.

Step functions return metrics as `{name: (sum, weight)}` (see lm/steps.py). Summing the
pairs over steps / microbatches and dividing once gives exact means:
  acc = merge(acc, device_get(metrics)) ... values = compute(acc)

MFU = achieved model FLOP/s / peak FLOP/s, with the model FLOPs per token from
`lm.model.accounting.flops_per_token` and the peak from `CHIP_SPECS` (dense bf16, per
device as JAX counts devices; the table also holds HBM size and bandwidth, for lm.plan)
or, on CPU, from `measure_matmul_flops()`.

`LogWindow` is the trainer's logging window: the merged metrics of the steps since the last
log line, and the line itself (means, tokens/s, MFU, packing efficiency: `window_rates`).
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class ChipSpec:
  """Spec-sheet figures of one JAX device (one chip on TPU v4/v5e/v5p/v6e and GPUs).

  Attributes:
    name: short name ("v5p", "h100").
    peak_flops_bf16: dense bf16 peak FLOP/s (no sparsity).
    hbm_bytes: high-bandwidth memory capacity in bytes.
    hbm_bandwidth: HBM bandwidth in bytes/s.
  """
  name: str
  peak_flops_bf16: float
  hbm_bytes: float
  hbm_bandwidth: float


_GIB = 2 ** 30
# Per JAX device, matched against `device.device_kind` by case-insensitive substring, first
# match wins, so more specific names come first. The one table of peak FLOP/s in lm.
# Sources: Google Cloud TPU system architecture pages (cloud.google.com/tpu/docs/v4,
# /v5e, /v5p, /v6e: "Peak compute per chip (bf16)", "HBM capacity / bandwidth per chip");
# NVIDIA datasheets (A100 Tensor Core GPU datasheet; H100 Tensor Core GPU datasheet, SXM
# and PCIe columns; H200 Tensor Core GPU datasheet), dense (not "with sparsity") figures.
CHIP_SPECS: tuple[tuple[str, ChipSpec], ...] = (
    ("tpu v6 lite", ChipSpec("v6e", 918e12, 32 * _GIB, 1640e9)),   # v6e (Trillium)
    ("tpu v6e", ChipSpec("v6e", 918e12, 32 * _GIB, 1640e9)),
    ("tpu v5p", ChipSpec("v5p", 459e12, 95 * _GIB, 2765e9)),
    ("tpu v5 lite", ChipSpec("v5e", 197e12, 16 * _GIB, 819e9)),   # v5e
    ("tpu v5e", ChipSpec("v5e", 197e12, 16 * _GIB, 819e9)),
    ("tpu v5", ChipSpec("v5p", 459e12, 95 * _GIB, 2765e9)),       # "TPU v5" on v5p hosts
    ("tpu v4", ChipSpec("v4", 275e12, 32 * _GIB, 1200e9)),
    # per core: a v3 chip (123 TFLOP/s, 32 GiB, 900 GB/s) is 2 JAX devices
    ("tpu v3", ChipSpec("v3", 61.5e12, 16 * _GIB, 450e9)),
    ("h200", ChipSpec("h200", 989e12, 141e9, 4.8e12)),             # SXM; H100 SXM compute
    ("h100 pcie", ChipSpec("h100_pcie", 756e12, 80 * _GIB, 2.0e12)),
    ("h100", ChipSpec("h100", 989e12, 80 * _GIB, 3.35e12)),         # H100 SXM
    ("a100-sxm4-80gb", ChipSpec("a100_80gb", 312e12, 80 * _GIB, 2039e9)),
    ("a100 80gb pcie", ChipSpec("a100_80gb_pcie", 312e12, 80 * _GIB, 1935e9)),
    ("a100", ChipSpec("a100", 312e12, 40 * _GIB, 1555e9)),         # 40 GB SXM4
)


def chip_spec(device: Any = None) -> ChipSpec | None:
  """`CHIP_SPECS` entry of a device (or a device_kind string); None if unknown (CPU)."""
  if device is None:
    device = jax.devices()[0]
  kind = (device if isinstance(device, str) else device.device_kind).lower()
  for name, spec in CHIP_SPECS:
    if name in kind:
      return spec
  return None


def chip_spec_by_name(name: str) -> ChipSpec | None:
  """`CHIP_SPECS` entry by its short name ("v5p", "h100", ...); None if there is none."""
  for _, spec in CHIP_SPECS:
    if spec.name == name.lower():
      return spec
  return None


def peak_flops_per_device(device: jax.Device | None = None) -> float | None:
  """Dense bf16 peak FLOP/s of one device from `CHIP_SPECS`; None if unknown (CPU)."""
  spec = chip_spec(device)
  return spec.peak_flops_bf16 if spec else None


def measure_matmul_flops(n: int = 1024, dtype: Any = jnp.float32, repeats: int = 5,
                         device: jax.Device | None = None) -> float:
  """Measures one device's matmul throughput: a jitted n x n @ n x n product, best of `repeats`.

  Args:
    n: matrix size (FLOPs per product = 2 n^3).
    dtype: operand dtype (float32 on CPU).
    repeats: timed runs after one warm-up (compile) run; the fastest is used.
    device: where to run; default the first device.

  Returns:
    FLOP/s (float), a practical "peak" for MFU on CPUs with no spec-sheet number.
  """
  device = device or jax.devices()[0]
  key_a, key_b = jax.random.split(jax.random.key(0))
  a = jax.device_put(jax.random.normal(key_a, (n, n), dtype), device)
  b = jax.device_put(jax.random.normal(key_b, (n, n), dtype), device)
  matmul = jax.jit(jnp.matmul)
  matmul(a, b).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    matmul(a, b).block_until_ready()
    best = min(best, time.perf_counter() - t0)
  return 2.0 * n ** 3 / best


def peak_flops(devices: Sequence[jax.Device] | None = None, *, hosts: int = 1,
               sizes: Sequence[int] = (1024,), repeats: int = 5) -> tuple[float, str]:
  """Peak FLOP/s of `devices` together (the MFU denominator), and where the figure comes from.

  Chips in `CHIP_SPECS`: the spec sheet's dense bf16 peak x len(devices). Elsewhere (CPU):
  the best float32 matmul throughput measured on this host (`measure_matmul_flops` over
  `sizes`), times `hosts`: simulated CPU devices share their host's cores, so the host, not
  the device, is the unit.

  Args:
    devices: default jax.devices() (every device of the run).
    hosts: hosts the devices span (jax.process_count() for a run's devices).
    sizes, repeats: the matmul sizes and timed repeats of the CPU measurement.

  Returns:
    (FLOP/s, a one-line description of the source).
  """
  devices = list(jax.devices() if devices is None else devices)
  kind = devices[0].device_kind
  per_device = peak_flops_per_device(devices[0])
  if per_device is not None:
    return per_device * len(devices), f"spec sheet dense bf16 x {len(devices)} ({kind})"
  local = next((d for d in devices if d.process_index == jax.process_index()), devices[0])
  measured = max(measure_matmul_flops(n=n, repeats=repeats, device=local) for n in sizes)
  matmuls = ", ".join(f"{n}^3" for n in sizes)
  return measured * hosts, f"best float32 matmul ({matmuls}) measured on the host ({kind}) x {hosts}"


def mfu(flops_per_token: float, tokens_per_second: float, peak_flops_total: float) -> float:
  """Model FLOPs utilisation in [0, 1]: flops_per_token * tokens/s / peak (all devices)."""
  if not peak_flops_total:
    return float("nan")
  return flops_per_token * tokens_per_second / peak_flops_total


def merge(acc: Mapping[str, tuple] | None, metrics: Mapping[str, tuple]) -> dict[str, tuple]:
  """Adds (sum, weight) pairs name by name; `acc=None` starts a new accumulation."""
  if acc is None:
    return {k: (np.asarray(s, np.float64), np.asarray(w, np.float64))
            for k, (s, w) in metrics.items()}
  if set(acc) != set(metrics):
    raise ValueError(f"metric names differ: {sorted(acc)} vs {sorted(metrics)}")
  return {k: (acc[k][0] + np.asarray(metrics[k][0], np.float64),
              acc[k][1] + np.asarray(metrics[k][1], np.float64)) for k in acc}


def compute(acc: Mapping[str, tuple]) -> dict[str, float]:
  """Means sum / weight per metric (NaN where the weight is 0)."""
  out = {}
  for k, (s, w) in acc.items():
    s, w = float(np.sum(s)), float(np.sum(w))
    out[k] = s / w if w else float("nan")
  return out


def totals(acc: Mapping[str, tuple]) -> dict[str, float]:
  """The plain sums per metric (e.g. token counts over a logging window)."""
  return {k: float(np.sum(s)) for k, (s, _) in acc.items()}


def window_rates(tokens: float, seconds: float, packing_efficiencies: Sequence[float], *,
                 flops_per_token: float, peak_flops_total: float,
                 data_wait: float = 0.0) -> dict[str, float]:
  """Throughput of one logging window: tokens/s, MFU, the mean packing efficiency and the
  share of the window the training loop spent waiting for batches.

  Args:
    tokens: the window's token count (the `tokens` metric's sum).
    seconds: wall-clock time of the window (floored at 1e-9 s).
    packing_efficiencies: the iterator's packing efficiency after each batch of the window.
    flops_per_token, peak_flops_total: as for `mfu`.
    data_wait: seconds of the window the loop spent blocked on the input pipeline
      (`next(iterator)`). Its share of the window, `data_wait_fraction`, is the input
      pipeline's verdict: near 0, batches are ready whenever the step asks (the prefetch
      thread keeps ahead); a large share means the accelerator waits for the host.
  """
  seconds = max(seconds, 1e-9)
  tokens_per_s = tokens / seconds
  return {"tokens_per_s": tokens_per_s,
          "mfu": mfu(flops_per_token, tokens_per_s, peak_flops_total),
          "packing_efficiency": float(np.mean(packing_efficiencies)),
          "data_wait_fraction": data_wait / seconds}


@dataclasses.dataclass
class LogWindow:
  """The steps since the last log line: their metric sums and packing efficiencies.

  The trainer adds each step's fetched metrics, logs `summary(...)` every log_every steps
  and starts a new window; a checkpoint saves the partial window (`to_json`), so a resumed
  run logs the same means as an uninterrupted one.

  Attributes:
    acc: {name: (sum, weight)} merged over the window's steps (None: no step fetched yet).
    packing: the iterator's packing efficiency after each batch of the window.
    data_wait: seconds the loop waited for the window's batches. Like the window's wall
      time, it is not saved: a resumed window measures both from the restart.
  """
  acc: dict[str, tuple] | None = None
  packing: list[float] = dataclasses.field(default_factory=list)
  data_wait: float = 0.0

  def add(self, fetched: Sequence[Mapping[str, tuple]]) -> None:
    """Merges the host copies of steps' metrics (`jax.device_get` of their outputs)."""
    for item in fetched:
      self.acc = merge(self.acc, item)

  def means(self) -> dict[str, float]:
    """`compute` of the window's sums."""
    return compute(self.acc)

  def summary(self, seconds: float, *, flops_per_token: float, peak_flops_total: float,
              static: Mapping[str, float]) -> dict[str, float]:
    """The log line: the means, then `static` (e.g. the objective's settings), then
    tokens_per_s, mfu, packing_efficiency and data_wait_fraction (`window_rates`) over
    `seconds`."""
    values = self.means()
    values.update(static)
    values.update(window_rates(totals(self.acc)["tokens"], seconds, self.packing,
                               flops_per_token=flops_per_token,
                               peak_flops_total=peak_flops_total, data_wait=self.data_wait))
    return values

  def to_json(self) -> dict:
    """The partial window as JSON ({} when empty), for a checkpoint's extra item."""
    if self.acc is None:
      return {}
    return {"acc": {k: [np.asarray(a).tolist(), np.asarray(w).tolist()]
                    for k, (a, w) in self.acc.items()},
            "packing_eff": [float(x) for x in self.packing]}

  @classmethod
  def from_json(cls, saved: Mapping[str, Any] | None) -> LogWindow:
    """The window `to_json` saved (None or {}: an empty window)."""
    if not saved:
      return cls()
    acc = {k: (np.asarray(a, np.float64), np.asarray(w, np.float64))
           for k, (a, w) in saved["acc"].items()}
    return cls(acc, list(saved.get("packing_eff", [])))
