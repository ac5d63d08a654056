r"""`python -m lm.plan`: compile a run's real train step for a target that is not attached.

  python -m lm.plan --config=configs/t5.py:size=xxl --topology=v5p-128 \
      --config.model.scan_layers=True --config.mesh.shape=1,64,1 [--search] [--json=plan.json]

Builds the step with `lm.program.build_run` over the target's devices (abstract inputs,
nothing of size allocated), compiles it, and reports per device lm's memory and FLOP
accounting beside XLA's (`lm/costs.py`), whether it fits, and a roofline step-time
estimate (a lower bound, never a measurement). `--remat_policies` compares remat policies;
`--search` finds the largest batch per policy and mesh. Targets (TPU slices, cpu-N, local,
GPU names) are lm/hardware.py's. Exit status: 0 fits, 1 does not fit, 2 bad input.
docs/planning.md has what each figure means and how far to trust it.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
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
from lm import costs
from lm import partitioning
from lm import validate as validate_lib
from lm import workdir as workdir_lib
from lm.model import accounting
from lm.hardware import GIB, PlanError, Target, make_target_mesh, resolve_target



def analytic_memory(config: ml_collections.ConfigDict, run) -> dict[str, float]:
  """lm's own per-device memory estimate (bytes) for a built run.

  params / opt_state: the shard shapes of the state shardings; gradients and the
  optimizer's updates: float32 like the params and sharded like them; activations: `accounting.activation_bytes` times the
  rows of one microbatch on a device; batch: the input features' shard.
  """
  state, shardings = run.abstract_state, run.state_shardings
  params = costs.tree_shard_bytes(state.params, shardings.params)
  opt_state = costs.tree_shard_bytes(state.opt_state, shardings.opt_state)
  mesh = dict(run.mesh.shape)
  batch_shards = mesh.get("data", 1) * mesh.get("fsdp", 1)
  d = config.data
  rows = d.batch_size / batch_shards / max(int(config.optim.grad_accum_steps), 1)
  acts = accounting.activation_bytes(run.model_config, d.inputs_length, d.targets_length,
                                     tensor_shards=mesh.get("tensor", 1))["total"] * rows
  batch = sum(costs.shard_bytes(s, run.batch_shardings[k]) for k, s in run.batch_shapes.items())
  grads = updates = params
  return {"params": float(params), "opt_state": float(opt_state), "grads": float(grads),
          "updates": float(updates), "activations": float(acts), "batch": float(batch),
          "total": float(params + opt_state + grads + updates + acts + batch)}


def _one_cpu_cost(config: ml_collections.ConfigDict, axis_names, **changes) -> dict[str, float]:
  """Pre-optimisation HLO cost analysis of the train step of `config` (with `changes`),
  lowered (not compiled) for one CPU device: the whole program's FLOPs and bytes accessed."""
  from lm import program  # pylint: disable=g-import-not-at-top
  one = {"mesh.shape": (1,) * len(axis_names), "data.num_shards": 1, **changes}
  cpu = jax.sharding.Mesh(np.array(jax.devices("cpu")[:1]).reshape(one["mesh.shape"]),
                          axis_names)
  settings = validate_lib.validate(_with(config, **one))
  cost = costs.one_analysis(program.build_run(settings, mesh=cpu).lower_train_step()
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
      excess = costs.out_of_memory(str(e))
      if excess is None:
        raise
      result["compile_seconds"] = time.perf_counter() - t0
      result["fits"] = False
      result["excess_bytes"] = excess
      result["compile_error"] = " ".join(str(e).split())[:500]
      return result
    result["compile_seconds"] = time.perf_counter() - t0
    mem, cost = costs.xla_memory(compiled), costs.xla_cost(compiled)
    whole = hlo_cost(config, mesh.axis_names)
    result["xla"] = {"memory": mem, "cost": cost, "hlo": whole,
                     "windowed_einsum_loops": costs.windowed_einsum_loops(compiled),
                     "custom_calls": costs.custom_calls(compiled)}
    per_device_flops = whole["flops"] / target.num_devices
    bytes_accessed = costs.hbm_traffic_lower_bound(mem)
    result["flops"]["xla"] = whole["flops"]
    used = mem["total"]
  else:
    used = result["analytic"]["total"]
  capacity = target.memory_bytes
  result["fits"] = bool(used <= capacity) if capacity else None
  result["excess_bytes"] = max(used - capacity, 0.0) if capacity else None
  est = costs.step_time_estimate(per_device_flops, bytes_accessed, target.chip)
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
  if cli.asks_for_help(argv):
    print(__doc__ + "\nFlags:\n" + fv.get_help())
    return 0
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
