r"""Plan before launch: compile a run's real train step for a target that is not attached.

  python -m lm.plan --config=configs/t5.py:size=xxl --topology=v5p-128 \
      --config.model.scan_layers=True --config.mesh.shape=1,64,1 [--search] [--json=plan.json]

The train step is built by `lm.program.build_run`, the program `lm.train` trains,
over the target's devices with abstract inputs only (nothing of size is allocated), then
lowered and compiled. Targets (`--topology`):

  TPU slices by Cloud TPU name, compiled with libtpu (`pip install -e '.[tpu]'`; no TPU
  needed): v4-N and v5p-N (N TensorCores, 2 per chip: v5p-128 = 64 chips, 4x4x4),
  v5e-N and v6e-N (N chips: v6e-16 = 4x4), or a libtpu topology such as v5p:4x4x4;
  `--num_slices` for several slices (the data axis spans the slices).
  cpu-N: N simulated CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=N).
  local: the devices present (a GPU, when there is one).
  a100-N, a100_80gb-N, h100-N, h200-N: no compiler for the target on this machine; the plan
  is lm's analytic estimate alone, and says so in its first line.
  (lm/hardware.py turns these names into devices and meshes.)

Reported per device: parameters, optimizer state, gradients and activations from lm's own
accounting (analytic: the shardings' shard shapes and `lm.model.accounting.activation_bytes`)
beside XLA's memory analysis (argument, output, temporary, aliased; total = argument +
output + temporary - aliased) and the chip's memory; whether it fits; training FLOPs per
step (lm.model.accounting: matmuls only, 2 per multiply-add, backward = 2x forward) beside
XLA's HLO cost analysis (all operations, summed over devices, every loop counted as often
as it runs: see `hlo_cost`); and a step-time ESTIMATE: the
roofline max(XLA FLOPs / peak FLOP/s, HBM traffic / HBM bandwidth) per device, the traffic
being XLA's memory analysis read and written once (`hbm_traffic_lower_bound`). Both terms
are lower bounds and communication is ignored, so the step time is a lower bound and the
tokens/s per chip and the MFU (lm's matmul FLOPs / step time / peak) it implies are upper
bounds. The compiler's own `optimal_seconds` is shown
only when it is positive. Nothing here is a measurement.

`--remat_policies=none,minimal,full`: the plan again with each remat policy, and a table
(JSON: `remat_policies`) of their activation memory (lm's), XLA's temporaries and total per
device, whether each fits and its step-time estimate.

`--search`: for each rematerialisation policy and mesh layout, the largest global batch
that fits (doubling, then bisection in steps of the batch shards; each probe is a
compile), and the overrides that select the one with the best estimated throughput.

Exit status: 0 when the plan fits (or the search found a fitting batch), 1 when it does
not fit, 2 on bad input (one line on stderr).

Why this module is long: it is the whole `lm.plan` command: the plan of one compile (lm's
accounting, XLA's memory, cost and program beside it, the roofline), the batch search and
the per-policy memory table that repeat it, its console table and flags; the target names
and meshes are already in
lm/hardware.py.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

import jax
import ml_collections
import numpy as np

from lm import cli
from lm import config as config_lib
from lm import libtpu_env
from lm import metrics as metrics_lib
from lm import partitioning
from lm import validate as validate_lib
from lm import workdir as workdir_lib
from lm.model import accounting
from lm.hardware import GIB, PlanError, Target, make_target_mesh, resolve_target



def _leaf_bytes(leaf, sharding) -> int:
  """Bytes of one device's shard of an abstract array."""
  shape = sharding.shard_shape(tuple(leaf.shape))
  if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
    itemsize = 8  # threefry key data: 2 x uint32
  else:
    itemsize = np.dtype(leaf.dtype).itemsize
  return int(math.prod(shape)) * itemsize


def _tree_bytes(tree, shardings) -> int:
  return sum(_leaf_bytes(l, s) for l, s in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings)))


def analytic_memory(config: ml_collections.ConfigDict, run) -> dict[str, float]:
  """lm's own per-device memory estimate (bytes) for a built run.

  params / opt_state: the shard shapes of the state shardings; gradients and the
  optimizer's updates: float32 like the params and sharded like them; activations: `accounting.activation_bytes` times the
  rows of one microbatch on a device; batch: the input features' shard.
  """
  state, shardings = run.abstract_state, run.state_shardings
  params = _tree_bytes(state.params, shardings.params)
  opt_state = _tree_bytes(state.opt_state, shardings.opt_state)
  mesh = dict(run.mesh.shape)
  batch_shards = mesh.get("data", 1) * mesh.get("fsdp", 1)
  d = config.data
  rows = d.batch_size / batch_shards / max(int(config.optim.grad_accum_steps), 1)
  acts = accounting.activation_bytes(run.model_config, d.inputs_length, d.targets_length,
                                     tensor_shards=mesh.get("tensor", 1))["total"] * rows
  batch = sum(_leaf_bytes(s, run.batch_shardings[k]) for k, s in run.batch_shapes.items())
  grads = updates = params
  return {"params": float(params), "opt_state": float(opt_state), "grads": float(grads),
          "updates": float(updates), "activations": float(acts), "batch": float(batch),
          "total": float(params + opt_state + grads + updates + acts + batch)}


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


def _first(x):
  return x[0] if isinstance(x, (list, tuple)) else x


def xla_memory(compiled) -> dict[str, float]:
  """XLA's per-device memory analysis of a compiled step (bytes)."""
  ma = _first(compiled.memory_analysis())
  out = {"argument": float(ma.argument_size_in_bytes), "output": float(ma.output_size_in_bytes),
         "temp": float(ma.temp_size_in_bytes), "alias": float(ma.alias_size_in_bytes),
         "generated_code": float(ma.generated_code_size_in_bytes)}
  out["total"] = out["argument"] + out["output"] + out["temp"] - out["alias"]
  return out


def xla_cost(compiled) -> dict[str, float]:
  """XLA's per-device cost analysis: flops, bytes accessed, optimal_seconds (TPU; NaN else)."""
  ca = _first(compiled.cost_analysis()) or {}
  return {"flops": float(ca.get("flops", float("nan"))),
          "bytes_accessed": float(ca.get("bytes accessed", float("nan"))),
          "optimal_seconds": float(ca.get("optimal_seconds", float("nan")))}


def _one_cpu_cost(config: ml_collections.ConfigDict, axis_names, **changes) -> dict[str, float]:
  """Pre-optimisation HLO cost analysis of the train step of `config` (with `changes`),
  lowered (not compiled) for one CPU device: the whole program's FLOPs and bytes accessed."""
  from lm import program  # pylint: disable=g-import-not-at-top
  one = {"mesh.shape": (1,) * len(axis_names), "data.num_shards": 1, **changes}
  cpu = jax.sharding.Mesh(np.array(jax.devices("cpu")[:1]).reshape(one["mesh.shape"]),
                          axis_names)
  settings = validate_lib.validate(_with(config, **one))
  cost = _first(program.build_run(settings, mesh=cpu).lower_train_step()
                .cost_analysis()) or {}
  return {key: float(cost.get(key.replace("_", " "), float("nan")))
          for key in ("flops", "bytes_accessed")}


def hlo_cost(config: ml_collections.ConfigDict, axis_names: Sequence[str]) -> dict[str, Any]:
  """The whole train step's FLOPs and bytes accessed as XLA's HLO cost analysis counts them,
  with every loop counted as many times as it runs (summed over devices).

  XLA's cost analysis counts a while loop's body once. The compiled step has three kinds:
  the layer scan (`scan_layers`), the microbatch scan (`grad_accum_steps`) and, on TPU,
  the loops XLA:TPU makes of an all-gather followed by a matmul ("windowed einsums",
  `wide.windowed_dot_general_*`, one iteration per shard: with fsdp 32 the 6.7B step's
  compiled count was 0.55 of the program's). So the count comes from the program before
  optimisation instead, lowered for one CPU device (no compile) with the layers unrolled
  and one microbatch, at 1 and 2 layers per stack: the stacks repeat one layer, so the
  cost is affine in the depth and the depth-L cost is c1 + (L - 1) (c2 - c1). Two small
  lowerings, where unrolling a deep model (xxl) takes minutes; an encoder of its own depth
  (model.encoder_num_layers) takes three, at (1, 1), (2, 1) and (1, 2) layers.

  Returns:
    {"flops", "bytes_accessed": at the config's depth, "per_layer": {...}: c2 - c1}.
    The bytes are those of the unfused program, reported, not used for the estimate.
  """
  depth = int(config.model.num_layers)
  base = {"model.scan_layers": False, "optim.grad_accum_steps": 1}
  encoder_depth = config.model.get("encoder_num_layers")
  if encoder_depth is None or int(encoder_depth) == depth:
    c1 = _one_cpu_cost(config, axis_names, **base, **{"model.num_layers": 1})
    c2 = _one_cpu_cost(config, axis_names, **base, **{"model.num_layers": 2})
    per_layer = {k: c2[k] - c1[k] for k in c1}
    return {**{k: c1[k] + (depth - 1) * per_layer[k] for k in c1}, "per_layer": per_layer}
  # An encoder of its own depth (9b_2b): its layer's cost and the decoder's apart.
  one = {"model.encoder_num_layers": 1, "model.num_layers": 1}
  c11 = _one_cpu_cost(config, axis_names, **base, **one)
  c21 = _one_cpu_cost(config, axis_names, **base, **dict(one, **{"model.encoder_num_layers": 2}))
  c12 = _one_cpu_cost(config, axis_names, **base, **dict(one, **{"model.num_layers": 2}))
  encoder_layer = {k: c21[k] - c11[k] for k in c11}
  decoder_layer = {k: c12[k] - c11[k] for k in c11}
  return {**{k: c11[k] + (int(encoder_depth) - 1) * encoder_layer[k]
             + (depth - 1) * decoder_layer[k] for k in c11},
          "per_layer": decoder_layer, "per_encoder_layer": encoder_layer}


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


def _program_text(compiled) -> str:
  try:
    return compiled.as_text()
  except Exception:  # pylint: disable=broad-except  # not every backend prints its program
    return ""


def windowed_einsum_loops(compiled) -> int:
  """The number of all-gather + matmul loops XLA:TPU made (0 elsewhere); the compiled cost
  analysis counts one iteration of each."""
  return len(re.findall(r"condition=%?[\w.]*windowed_dot_general_cond", _program_text(compiled)))


def custom_calls(compiled) -> dict[str, int]:
  """{custom-call target: count} in the compiled program: whether a fused kernel is in it
  ("tpu_custom_call": a Pallas kernel on TPU; "__cudnn$fmha...": cuDNN attention)."""
  return dict(sorted(collections.Counter(
      re.findall(r'custom_call_target="([^"]+)"', _program_text(compiled))).items()))


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


def plan(config: ml_collections.ConfigDict, target: Target, *, compile_step: bool = True
         ) -> dict[str, Any]:
  """Builds (and for a compilable target compiles) the train step; returns the plan.

  Returns:
    a JSON-able dict: target, config summary, memory per device (analytic and XLA, bytes),
    fits, excess bytes when it does not fit, FLOPs (analytic, XLA), step-time estimate,
    tokens/s per chip, MFU, compile seconds.

  Raises:
    PlanError: the config or mesh does not suit the target.
  """
  from lm import program  # pylint: disable=g-import-not-at-top
  mesh = make_target_mesh(config.mesh.shape, target)
  try:
    run = program.build_run(validate_lib.validate(config), mesh=mesh)
  except ValueError as e:
    raise PlanError(" ".join(str(e).split())) from None
  d = config.data
  mc = run.model_config
  tokens = d.batch_size * (d.inputs_length + d.targets_length)
  analytic_flops = accounting.training_flops(mc, d.inputs_length, d.targets_length,
                                             d.batch_size)
  result: dict[str, Any] = {
      "target": target.name, "kind": target.kind, "topology": target.topology,
      "num_slices": target.num_slices, "num_devices": target.num_devices,
      "chip": dataclasses.asdict(target.chip) if target.chip else None,
      "memory_per_device": target.memory_bytes,
      "model": {"preset": config_lib.preset_name(config), "params": accounting.count_params(mc),
                "mask_type": mc.mask_type, "dtype": mc.dtype, "scan_layers": mc.scan_layers,
                "remat_policy": mc.remat_policy, "attention_impl": mc.attention_impl},
      "batch_size": int(d.batch_size), "inputs_length": int(d.inputs_length),
      "targets_length": int(d.targets_length), "grad_accum_steps": int(config.optim.grad_accum_steps),
      "mesh": dict(run.mesh.shape), "optimizer": config.optim.name,
      "analytic": analytic_memory(config, run),
      "flops": {"analytic": float(analytic_flops)},
      "xla": None, "fits": None, "excess_bytes": None, "compile_seconds": None,
  }
  per_device_flops = analytic_flops / target.num_devices
  bytes_accessed = float("nan")
  if target.kind != "analytic" and compile_step:
    t0 = time.perf_counter()
    try:
      lowered = run.lower_train_step()
      compiled = lowered.compile()
    except Exception as e:  # pylint: disable=broad-except  # XLA's error types vary by backend
      excess = out_of_memory(str(e))
      if excess is None:
        raise
      result["compile_seconds"] = time.perf_counter() - t0
      result["fits"] = False
      result["excess_bytes"] = excess
      result["compile_error"] = " ".join(str(e).split())[:500]
      return result
    result["compile_seconds"] = time.perf_counter() - t0
    mem, cost = xla_memory(compiled), xla_cost(compiled)
    whole = hlo_cost(config, mesh.axis_names)
    result["xla"] = {"memory": mem, "cost": cost, "hlo": whole,
                     "windowed_einsum_loops": windowed_einsum_loops(compiled),
                     "custom_calls": custom_calls(compiled)}
    per_device_flops = whole["flops"] / target.num_devices
    bytes_accessed = hbm_traffic_lower_bound(mem)
    result["flops"]["xla"] = whole["flops"]
    used = mem["total"]
  else:
    used = result["analytic"]["total"]
  capacity = target.memory_bytes
  result["fits"] = bool(used <= capacity) if capacity else None
  result["excess_bytes"] = max(used - capacity, 0.0) if capacity else None
  est = step_time_estimate(per_device_flops, bytes_accessed, target.chip)
  optimal = (result["xla"] or {}).get("cost", {}).get("optimal_seconds", float("nan"))
  est["compiler_seconds"] = optimal if optimal > 0 else None
  est["basis"] = ("roofline: XLA's FLOPs at peak, XLA's memory read and written once at "
                  "HBM bandwidth" if result["xla"]
                  else "lm's analytic FLOPs at peak compute (no compiler for this target)")
  seconds = est["seconds"]
  if np.isfinite(seconds) and seconds > 0:
    est["tokens_per_s_per_chip"] = tokens / seconds / target.num_devices
    est["mfu"] = analytic_flops / seconds / (target.chip.peak_flops_bf16 * target.num_devices)
  else:
    est["tokens_per_s_per_chip"] = est["mfu"] = None
  result["estimate"] = est
  return result


def remat_policy_memory(config: ml_collections.ConfigDict, target: Target,
                        policies: Sequence[str]) -> list[dict[str, Any]]:
  """The plan of `config` once per remat policy: memory per device for each.

  Returns:
    [{"remat_policy", "activations" (lm's analytic bytes), "xla_temp", "xla_total" (bytes,
    None without a compiler or when the compile ran out of memory), "fits", "excess_bytes",
    "step_seconds" (the estimate), "compile_seconds"}], in the order given.
  """
  rows = []
  for policy in policies:
    p = plan(_with(config, **{"model.remat_policy": policy}), target)
    mem = (p["xla"] or {}).get("memory") or {}
    rows.append({"remat_policy": policy, "activations": p["analytic"]["activations"],
                 "xla_temp": mem.get("temp"), "xla_total": mem.get("total"),
                 "fits": p["fits"], "excess_bytes": p["excess_bytes"],
                 "step_seconds": (p.get("estimate") or {}).get("seconds"),
                 "compile_seconds": p["compile_seconds"]})
  return rows


def format_remat_policies(rows: Sequence[dict[str, Any]]) -> str:
  """The console table of `remat_policy_memory`."""
  lines = ["memory per device by remat policy (GiB)",
           f"  {'remat':18s} {'activations':>11s} {'XLA temp':>9s} {'XLA total':>9s}  fits"
           f"  {'step ESTIMATE':>13s}"]
  for r in rows:
    fits = "-" if r["fits"] is None else "yes" if r["fits"] else "NO"
    step = r["step_seconds"]
    step = f"{step * 1e3:.1f} ms" if step is not None and np.isfinite(step) else "-"
    lines.append(f"  {r['remat_policy']:18s} {_gib(r['activations']):>11s} "
                 f"{_gib(r['xla_temp']):>9s} {_gib(r['xla_total']):>9s}  {fits:4s}  {step:>13s}")
  return "\n".join(lines)


def _gib(x) -> str:
  if x is None or not np.isfinite(x):
    return "-"
  return f"{x / GIB:.3f}"


def format_plan(p: dict[str, Any]) -> str:
  """The console table of one plan; the first line says what kind of plan it is."""
  lines = []
  if p["kind"] == "analytic":
    lines.append(f"ANALYTIC ESTIMATE ONLY: no compiler for {p['target']} on this machine; "
                 "memory and step time below are lm's accounting, not XLA's.")
  else:
    where = p["topology"] or p["target"]
    lines.append(f"Plan for {p['target']} ({where}, {p['num_devices']} devices"
                 f"{', %d slices' % p['num_slices'] if p['num_slices'] > 1 else ''}), "
                 f"compiled in {p['compile_seconds']:.0f} s")
  m = p["model"]
  lines.append(f"model {m['preset']} ({m['params'] / 1e9:.3g}B params, {m['mask_type']}, "
               f"{m['dtype']}, scan_layers={m['scan_layers']}, remat={m['remat_policy']}); "
               f"batch {p['batch_size']} x {p['inputs_length']}/{p['targets_length']}, "
               f"mesh {p['mesh']}, {p['optimizer']}")
  a, x = p["analytic"], (p["xla"] or {}).get("memory")
  lines.append("memory per device (GiB)      analytic   XLA")
  for label, key in (("params", "params"), ("optimizer state", "opt_state"),
                     ("gradients", "grads"), ("optimizer updates", "updates"),
                     ("activations", "activations"), ("batch", "batch")):
    lines.append(f"  {label:26s} {_gib(a[key]):>8s}")
  if x:
    for key in ("argument", "output", "temp", "alias"):
      lines.append(f"  {'XLA ' + key:26s} {'':>8s} {_gib(x[key]):>6s}")
  lines.append(f"  {'total':26s} {_gib(a['total']):>8s} {_gib(x['total']) if x else '-':>6s}"
               f"   of {_gib(p['memory_per_device'])} per device")
  if p["fits"] is None:
    lines.append("fits: unknown (no memory figure for this device)")
  elif p["fits"]:
    lines.append("fits: yes")
  else:
    excess = p["excess_bytes"]
    by = f" by {_gib(excess)} GiB" if excess is not None and np.isfinite(excess) else ""
    lines.append(f"fits: NO, does not fit{by}")
  if p["xla"]:
    calls = ", ".join(f"{k} x{v}" for k, v in p["xla"].get("custom_calls", {}).items())
    lines.append(f"attention_impl={m.get('attention_impl')}; custom calls: {calls or 'none'}")
  f = p["flops"]
  xla_f = f.get("xla")
  lines.append(f"training FLOPs per step: analytic {f['analytic']:.4g} (matmuls, 3x forward)"
               + (f", XLA {xla_f:.4g} (HLO, all ops, all devices; "
                  f"{(xla_f / f['analytic'] - 1) * 100:+.1f} %)" if xla_f else ""))
  est = p.get("estimate")
  if est and est["seconds"] is not None and np.isfinite(est["seconds"]):
    lines.append(f"step time ESTIMATE ({est['basis']}): {est['seconds'] * 1e3:.1f} ms "
                 f"(compute {est['compute_s'] * 1e3:.1f} ms, memory {est['memory_s'] * 1e3:.1f} ms)"
                 + (f", compiler's own {est['compiler_seconds'] * 1e3:.1f} ms"
                    if est.get("compiler_seconds") else "")
                 + f"; a lower bound: implies at most {est['tokens_per_s_per_chip']:.0f} "
                 f"tokens/s per chip, MFU <= {est['mfu']:.1%} (lm's matmul FLOPs / peak bf16)")
  elif est:
    lines.append("step time ESTIMATE: none (no peak FLOP/s for this device)")
  return "\n".join(lines)


def _with(config: ml_collections.ConfigDict, **changes) -> ml_collections.ConfigDict:
  """A copy of `config` with dotted fields changed ("data.batch_size": 64)."""
  new = ml_collections.ConfigDict(config.to_dict())
  for key, value in changes.items():
    *path, last = key.split(".")
    node = new
    for p in path:
      node = node[p]
    node[last] = value
  _fit_num_shards(new)
  new.lock()
  return new


def _fit_num_shards(config: ml_collections.ConfigDict) -> None:
  """data.num_shards (virtual data shards; not part of the compiled step) made to divide
  the batch, so a searched batch size passes validation."""
  d = config.data
  if d.batch_size > 0 and d.num_shards > 0 and d.batch_size % d.num_shards:
    d.num_shards = math.gcd(int(d.batch_size), int(d.num_shards))


def search(config: ml_collections.ConfigDict, target: Target, *,
           policies: Sequence[str] = ("none", "dots_saveable", "full"),
           meshes: Sequence[tuple[int, ...]] | None = None, max_batch: int = 1 << 16,
           log=print) -> dict[str, Any]:
  """Largest global batch that fits, per remat policy and mesh layout, by compiling.

  Args:
    config: the base config (its lengths, model and optimizer).
    target: where to fit.
    policies: config.model.remat_policy values to try.
    meshes: (data, fsdp, tensor) shapes; default `default_meshes(target)`.
    max_batch: the largest batch probed.
    log: called with one line per probe.

  Returns:
    {"results": [{"remat_policy", "mesh", "batch_step", "largest_fit", "first_fail",
    "probes": {batch: fits}, "plan": plan of largest_fit}], "best": the result with the
    highest estimated tokens/s per chip (None if nothing fits), "overrides": its flags}.
  """
  meshes = list(meshes or default_meshes(target, config))
  results = []
  for policy in policies:
    for shape in meshes:
      resolved = partitioning.parse_mesh_shape(shape, target.num_devices)
      step = resolved[0] * resolved[1] * int(config.optim.grad_accum_steps)
      probes: dict[int, bool] = {}
      plans: dict[int, dict] = {}

      def fits(batch, policy=policy, resolved=resolved, probes=probes, plans=plans):
        cfg = _with(config, **{"model.remat_policy": policy, "mesh.shape": resolved,
                               "data.batch_size": batch})
        p = plan(cfg, target)
        probes[batch], plans[batch] = bool(p["fits"]), p
        log(f"  remat={policy:14s} mesh={resolved} batch={batch:6d}: "
            f"{'fits' if p['fits'] else 'does not fit'} "
            f"({_gib((p['xla'] or {}).get('memory', {}).get('total', p['analytic']['total']))} "
            f"GiB{', compiled in %.0f s' % p['compile_seconds'] if p['compile_seconds'] else ''})")
        return p["fits"]

      lo, hi = 0, None
      b = step
      while b <= max_batch:
        if fits(b):
          lo, b = b, b * 2
        else:
          hi = b
          break
      if lo and hi is not None:
        while hi - lo > step:
          mid = lo + (hi - lo) // 2 // step * step
          if fits(mid):
            lo = mid
          else:
            hi = mid
      best_plan = plans.get(lo)
      results.append({"remat_policy": policy, "mesh": list(resolved), "batch_step": step,
                      "largest_fit": lo or None, "first_fail": hi, "probes": probes,
                      "plan": best_plan})
  fitting = [r for r in results if r["largest_fit"]]

  def speed(r):
    est = r["plan"].get("estimate") or {}
    return (est.get("tokens_per_s_per_chip") or 0.0, r["largest_fit"])

  best = max(fitting, key=speed) if fitting else None
  overrides = None
  if best:
    cfg = _with(config, **{"model.remat_policy": best["remat_policy"],
                           "mesh.shape": tuple(best["mesh"]),
                           "data.batch_size": best["largest_fit"]})
    overrides = [f"--config.data.batch_size={best['largest_fit']}",
                 f"--config.model.remat_policy={best['remat_policy']}",
                 f"--config.mesh.shape={','.join(map(str, best['mesh']))}"]
    if cfg.data.num_shards != config.data.num_shards:
      overrides.append(f"--config.data.num_shards={cfg.data.num_shards}")
  return {"results": results, "best": best, "overrides": overrides}


def default_meshes(target: Target, config: ml_collections.ConfigDict) -> list[tuple[int, ...]]:
  """Mesh layouts `search` tries: all-fsdp, all-data, and fsdp x tensor 4 (when the heads
  split 4 ways)."""
  n = target.num_devices
  out = [(1, n, 1), (n, 1, 1)]
  if n % 4 == 0 and n > 4 and config.model.num_heads % 4 == 0:
    out.append((1, n // 4, 4))
  return out


def format_search(s: dict[str, Any]) -> str:
  lines = ["largest global batch that fits (compiled; step = data x fsdp x grad_accum):",
           f"  {'remat':16s} {'mesh':14s} {'largest fit':>11s} {'first fail':>10s} "
           f"{'GiB/device':>10s} {'tokens/s/chip (est.)':>20s}"]
  for r in s["results"]:
    p = r["plan"]
    mem = "-"
    speed = "-"
    if p:
      mem = _gib((p["xla"] or {}).get("memory", {}).get("total", p["analytic"]["total"]))
      tps = (p.get("estimate") or {}).get("tokens_per_s_per_chip")
      speed = f"{tps:.0f}" if tps else "-"
    lines.append(f"  {r['remat_policy']:16s} {str(tuple(r['mesh'])):14s} "
                 f"{str(r['largest_fit'] or 'none'):>11s} {str(r['first_fail'] or '-'):>10s} "
                 f"{mem:>10s} {speed:>20s}")
  if s["best"]:
    lines.append("best (highest estimated tokens/s per chip): " + " ".join(s["overrides"]))
  else:
    lines.append("nothing fits: no batch for any remat policy and mesh tried.")
  return "\n".join(lines)


def _json_default(x):
  if isinstance(x, (np.floating, np.integer)):
    return x.item()
  return str(x)


def write_json(path: str, obj: Any) -> None:
  """Writes `obj` as JSON atomically (a temporary file, then a rename)."""
  text = json.dumps(obj, indent=2, sort_keys=True, default=_json_default)
  workdir_lib.write_text_atomic(workdir_lib.as_path(path), text + "\n")


def main(argv=None) -> int:
  """Command-line entry; see the module docstring. Returns the exit status."""
  libtpu_env.quiet_libtpu_off_tpu()
  from absl import flags  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  argv = list(sys.argv if argv is None else argv)
  fv = flags.FlagValues()
  cli.parse_config_flags_with_parse_value()
  # sys_argv: ml_collections defines the --config.<field> override flags from the argument
  # list it is given (sys.argv by default), so main(argv) must hand it the same list.
  config_flag = config_flags.DEFINE_config_file(
      "config", None, "Config file, e.g. configs/t5.py:size=xxl.", flag_values=fv,
      lock_config=True, sys_argv=argv)
  flags.DEFINE_string("topology", None, "Target: v5p-128, v6e-16, v5p:4x4x4, cpu-8, local, "
                      "h100-8, ...", flag_values=fv)
  flags.DEFINE_integer("num_slices", 1, "TPU slices (the data axis spans them).", flag_values=fv)
  flags.DEFINE_string("mesh", None, "Shorthand for --config.mesh.shape (data,fsdp,tensor).",
                      flag_values=fv)
  flags.DEFINE_float("memory_gib", None, "Memory per device to fit in, instead of the chip's "
                     "(e.g. to keep headroom).", flag_values=fv)
  flags.DEFINE_bool("search", False, "Search the largest batch per remat policy and mesh.",
                    flag_values=fv)
  flags.DEFINE_string("remat_policies", None, "Also plan with each of these remat policies "
                      "(comma-separated, e.g. none,minimal,full) and compare their memory; "
                      "the JSON's remat_policies.", flag_values=fv)
  flags.DEFINE_string("search_policies", "none,minimal,dots_saveable,full",
                      "Remat policies --search tries.", flag_values=fv)
  flags.DEFINE_string("search_meshes", None, "Mesh shapes --search tries, ';'-separated "
                      "(default: all-fsdp, all-data, fsdp x tensor 4).", flag_values=fv)
  flags.DEFINE_integer("search_max_batch", 1 << 16, "Largest batch --search probes.",
                       flag_values=fv)
  flags.DEFINE_string("json", None, "Also write the plan as JSON here (for launchers).",
                      flag_values=fv)
  argv = list(sys.argv if argv is None else argv)
  try:
    rest = fv(argv)
  except flags.Error as e:
    return cli.bad_input_exit(e)
  if len(rest) > 1:
    return cli.bad_input_exit(f"unexpected arguments {rest[1:]}")
  for noisy in ("absl", "jax._src"):
    logging.getLogger(noisy).setLevel(logging.WARNING)
  try:
    if fv.config is None or fv.topology is None:
      raise PlanError("--config and --topology are required, e.g. "
                      "--config=configs/t5.py:size=xxl --topology=v5p-128.")
    if fv.memory_gib is not None and not (math.isfinite(fv.memory_gib) and fv.memory_gib > 0):
      raise PlanError(f"--memory_gib must be a positive number of GiB, got {fv.memory_gib}.")
    if fv.search_max_batch < 1:
      raise PlanError(f"--search_max_batch must be >= 1, got {fv.search_max_batch}.")
    config = config_lib.derive(config_flag.value)  # derived fields after the overrides
    if fv.mesh:
      config = _with(config, **{"mesh.shape": partitioning.mesh_shape_tuple(fv.mesh)})
    target = resolve_target(fv.topology, fv.num_slices, fv.memory_gib)
    if fv.search:
      meshes = None
      if fv.search_meshes:
        meshes = [partitioning.mesh_shape_tuple(m) for m in fv.search_meshes.split(";")]
      policies = [p for p in fv.search_policies.split(",") if p]
      result = search(config, target, policies=policies, meshes=meshes,
                      max_batch=fv.search_max_batch,
                      log=lambda line: print(line, flush=True))
      print(format_search(result))
      out, status = result, 0 if result["best"] else 1
    else:
      out = plan(config, target)
      print(format_plan(out))
      status = 0 if out["fits"] is not False else 1
      if fv.remat_policies:
        out["remat_policies"] = remat_policy_memory(
            config, target, [p for p in fv.remat_policies.split(",") if p])
        print(format_remat_policies(out["remat_policies"]))
  except (PlanError, ValueError) as e:
    return cli.bad_input_exit(" ".join(str(e).split()))
  if fv.json:
    write_json(fv.json, out)
  return status


if __name__ == "__main__":
  sys.exit(main())
