"""What a compiled step costs, as XLA reports it: memory, FLOPs, loops, kernels, the roofline.

  compiled = run.lower_train_step().compile()         # lm.program.RunBuild
  mem, cost = xla_memory(compiled), xla_cost(compiled)
  estimate = step_time_estimate(cost["flops"], hbm_traffic_lower_bound(mem), chip)

Read by `lm.plan` (beside lm's own accounting, `lm/model/accounting.py`) and the benchmarks.
Every figure is per device; a step-time estimate is a lower bound, never a measurement
(docs/planning.md).
"""
from __future__ import annotations

import collections
import math
import re

import jax
import numpy as np

from lm import metrics as metrics_lib


def shard_bytes(leaf, sharding) -> int:
  """Bytes of one device's shard of an abstract array."""
  shape = sharding.shard_shape(tuple(leaf.shape))
  if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
    itemsize = 8  # threefry key data: 2 x uint32
  else:
    itemsize = np.dtype(leaf.dtype).itemsize
  return int(math.prod(shape)) * itemsize


def tree_shard_bytes(tree, shardings) -> int:
  return sum(shard_bytes(l, s) for l, s in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings)))



_OOM_PATTERNS = (
    re.compile(r"exceeded hbm capacity by ([\d.]+)\s*([kmgt]?)", re.I),
    re.compile(r"used ([\d.]+)\s*([kmgt]?)i?b? of ([\d.]+)\s*([kmgt]?)i?b? hbm", re.I),
    re.compile(r"required for hlo temporaries \(([\d.]+)\s*([kmgt]?)i?b?\) exceeds available "
               r"hbm \(([\d.]+)\s*([kmgt]?)i?b?\)", re.I),
)
_UNITS = {"": 1, "k": 2 ** 10, "m": 2 ** 20, "g": 2 ** 30, "t": 2 ** 40}


def out_of_memory(message: str) -> float | None:
  """Bytes by which a failed compile exceeded device memory; None if it is no OOM.

  XLA:TPU fails a program that does not fit with "RESOURCE_EXHAUSTED: ... Ran out of
  memory in memory space hbm. Used 120.5G of 95.74G hbm. Exceeded hbm capacity by 24.8G."
  or, when the temporaries alone are too large, "... the total memory required for HLO
  temporaries (80.60G) exceeds available HBM (30.75G)".
  Returns NaN for an OOM whose excess the message does not state.
  """
  low = message.lower()
  if not ("resource_exhausted" in low or "out of memory" in low or "exceeded hbm" in low):
    return None
  m = _OOM_PATTERNS[0].search(message)
  if m:
    return float(m.group(1)) * _UNITS[m.group(2).lower()]
  m = _OOM_PATTERNS[1].search(message) or _OOM_PATTERNS[2].search(message)
  if m:
    return (float(m.group(1)) * _UNITS[m.group(2).lower()]
            - float(m.group(3)) * _UNITS[m.group(4).lower()])
  return float("nan")


def one_analysis(x):
  """A compiled program's analysis: some jax versions return one per device in a list."""
  return x[0] if isinstance(x, (list, tuple)) else x


def xla_memory(compiled) -> dict[str, float]:
  """XLA's per-device memory analysis of a compiled step (bytes)."""
  ma = one_analysis(compiled.memory_analysis())
  out = {"argument": float(ma.argument_size_in_bytes), "output": float(ma.output_size_in_bytes),
         "temp": float(ma.temp_size_in_bytes), "alias": float(ma.alias_size_in_bytes),
         "generated_code": float(ma.generated_code_size_in_bytes)}
  out["total"] = out["argument"] + out["output"] + out["temp"] - out["alias"]
  return out


def xla_cost(compiled) -> dict[str, float]:
  """XLA's per-device cost analysis: flops, bytes accessed, optimal_seconds (TPU; NaN else)."""
  ca = one_analysis(compiled.cost_analysis()) or {}
  return {"flops": float(ca.get("flops", float("nan"))),
          "bytes_accessed": float(ca.get("bytes accessed", float("nan"))),
          "optimal_seconds": float(ca.get("optimal_seconds", float("nan")))}



def hbm_traffic_lower_bound(mem: dict[str, float]) -> float:
  """Bytes a step must move through HBM at least (per device): its arguments read once,
  its outputs written once, each temporary byte written and read once:
  argument + output + 2 x temp, from XLA's memory analysis (`xla_memory`).

  Used for the roofline's memory term instead of XLA's "bytes accessed": XLA:TPU's count
  is not HBM traffic (the T5.1.1-small step at batch 128 on v5p-8, unscanned, counts 515 GB
  per device, 56x its 9.1 GiB footprint, measured), and for a scanned step it counts the
  loop body once.
  """
  return mem["argument"] + mem["output"] + 2 * mem["temp"]


def program_text(compiled) -> str:
  try:
    return compiled.as_text()
  except Exception:  # pylint: disable=broad-except  # not every backend prints its program
    return ""


def windowed_einsum_loops(compiled) -> int:
  """The number of all-gather + matmul loops XLA:TPU made (0 elsewhere); the compiled cost
  analysis counts one iteration of each."""
  return len(re.findall(r"condition=%?[\w.]*windowed_dot_general_cond", program_text(compiled)))


def custom_calls(compiled) -> dict[str, int]:
  """{custom-call target: count} in the compiled program: whether a fused kernel is in it
  ("tpu_custom_call": a Pallas kernel on TPU; "__cudnn$fmha...": cuDNN attention)."""
  return dict(sorted(collections.Counter(
      re.findall(r'custom_call_target="([^"]+)"', program_text(compiled))).items()))


def step_time_estimate(flops_per_device: float, bytes_per_device: float,
                       chip: metrics_lib.ChipSpec | None) -> dict[str, float]:
  """Roofline step time per device: max(FLOPs / peak, bytes / HBM bandwidth) (seconds).

  An estimate (no communication, perfect overlap), never a measurement. NaN without a
  chip spec (CPU).
  """
  if chip is None:
    return {"compute_s": float("nan"), "memory_s": float("nan"), "seconds": float("nan")}
  compute = flops_per_device / chip.peak_flops_bf16
  memory = bytes_per_device / chip.hbm_bandwidth if np.isfinite(bytes_per_device) else 0.0
  return {"compute_s": compute, "memory_s": memory, "seconds": max(compute, memory)}
