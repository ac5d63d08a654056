"""Metric aggregation (sum, weight) pairs, peak FLOP/s per device, MFU.

Step functions return metrics as `{name: (sum, weight)}` (see lm/steps.py). Summing the
pairs over steps / microbatches and dividing once gives exact means:
  acc = merge(acc, device_get(metrics)) ... values = compute(acc)

MFU = achieved model FLOP/s / peak FLOP/s, with the model FLOPs per token from
`lm.model.accounting.flops_per_token` and the peak from `PEAK_FLOPS_BF16` (dense,
per device as JAX counts devices) or, on CPU, from `measure_matmul_flops()`.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# Dense bf16 peak FLOP/s per JAX device (vendor spec sheets, no sparsity). Matched
# against `device.device_kind` by case-insensitive substring, first match wins, so more
# specific names come first. TPU v4/v5p/v6e/v5e: one JAX device = one chip.
PEAK_FLOPS_BF16: tuple[tuple[str, float], ...] = (
    ("tpu v6 lite", 918e12),   # v6e (Trillium)
    ("tpu v6e", 918e12),
    ("tpu v5p", 459e12),
    ("tpu v5 lite", 197e12),   # v5e
    ("tpu v5e", 197e12),
    ("tpu v5", 459e12),        # "TPU v5" is reported by v5p hosts
    ("tpu v4", 275e12),
    ("tpu v3", 61.5e12),       # per core (a v3 chip = 2 JAX devices, 123 TF/chip)
    ("h200", 989e12),          # same SXM compute as H100 SXM
    ("h100 pcie", 756e12),
    ("h100", 989e12),          # H100 SXM
    ("a100", 312e12),
)


def peak_flops_per_device(device: jax.Device | None = None) -> float | None:
  """Dense bf16 peak FLOP/s of one device from `PEAK_FLOPS_BF16`; None if unknown (CPU)."""
  device = device or jax.devices()[0]
  kind = device.device_kind.lower()
  for name, flops in PEAK_FLOPS_BF16:
    if name in kind:
      return flops
  return None


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
