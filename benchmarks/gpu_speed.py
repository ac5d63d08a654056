"""One stage of the GPU speed run (benchmarks/gpu_speed.sh calls it once per stage).

    python benchmarks/gpu_speed.py numerics --config t5:size=small,batch=8,inputs_length=512 \\
        --a model.attention_impl=xla --b model.attention_impl=cudnn --json $OUT/numerics.json
    python benchmarks/gpu_speed.py speed --config t5:size=base,batch=128,inputs_length=512 \\
        --set model.attention_impl=cudnn --json $OUT/base_cudnn.json

``--config MODULE:ARG`` is ``get_config(ARG)`` of configs/t5.py or configs/gpt3.py; ``--set
FIELD=VALUE`` (repeatable) overrides a config field as lm.main's ``--config.FIELD=VALUE``
does (``lm.config.apply_overrides``).

``numerics``: one batch of random tokens through the model's loss (cross entropy per target
token) and its gradient, once with the overrides ``--a`` and once with ``--b``, from the same
parameters. Writes the loss, the gradient's global norm and the relative-position bias
tables' gradients (norm and the relative L2 distance between the two runs) and exits 1 when
the two runs disagree beyond the tolerances or a bias table's gradient is zero (an attention
kernel that drops the bias gradient): the gate before any speed figure.

``summary --dir $OUT``: one row per speed stage's JSON (and the numerics verdict), printed
and written as one JSON.

``speed``: the train step lm.main runs (``lm.program.build_run``: model, loss, optimizer,
shardings) on a random batch: init (``RunBuild.init_state``, and with ``--host_init`` the
same state made on the host's CPU, for comparison), compile, ``--warmup`` steps, then
``--steps`` timed steps (each blocks on the new state). Reports the median step, tokens/s,
MFU and peak device memory. MFU is lm's FLOP count (``lm.model.accounting.training_flops``:
every matmul including both attention products over the full L x S scores, 2 FLOPs per
multiply-add, backward = 2x forward; no remat recompute, no optimizer) over the median step
time and the devices' dense bf16 peak (``lm.metrics.peak_flops``: the spec sheet on GPUs and
TPUs; on the CPU a measured matmul). Peak memory is ``memory_stats()["peak_bytes_in_use"]``
of device 0 where the backend reports it (GPUs), else XLA's compiled-step total.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import results  # noqa: E402  (benchmarks/)
from bench_train import memory_per_device, random_batch, time_steps  # noqa: E402
from lm import config as config_lib  # noqa: E402
from lm import costs, losses, metrics, partitioning, program, steps, validate  # noqa: E402
from lm.model import accounting  # noqa: E402

CONFIG_MODULES = ("t5", "gpt3")


def load_config(spec: str, overrides):
  """``MODULE:ARG`` (the config module t5 or gpt3) with ``FIELD=VALUE`` overrides applied."""
  module, _, arg = spec.partition(":")
  if module not in CONFIG_MODULES:
    raise ValueError(f"--config must be MODULE:ARG with MODULE one of {CONFIG_MODULES}, got "
                     f"{spec!r}")
  config = importlib.import_module(f"configs.{module}").get_config(arg or None)
  config = config_lib.apply_overrides(config, ["data.num_shards=1", *overrides])
  return config_lib.derive(config)


def _batch(run):
  d = run.data_spec
  return random_batch(d.architecture, d.inputs_length, d.targets_length, d.batch_size,
                      run.model_config.vocab_size)


def loss_and_grads(run, params, local):
  """Mean cross entropy per target token of `local` and its gradient (float32 tree)."""
  def loss_fn(p, batch):
    logits = run.model.apply({"params": p}, batch)
    weights = batch["decoder_loss_weights"]
    total, _, count = losses.weighted_cross_entropy(logits, batch["decoder_target_tokens"],
                                                     weights)
    return total / jnp.maximum(count, 1.0)

  with run.axis_rules():
    batch = partitioning.make_global_batch(local, run.mesh)
    compiled = jax.jit(jax.value_and_grad(loss_fn)).lower(params, batch).compile()
    loss, grads = compiled(params, batch)
  return (float(loss), jax.tree.map(lambda g: np.asarray(g, np.float64), jax.device_get(grads)),
          costs.custom_calls(compiled))


FUSED_TARGETS = {"cudnn": ("cudnn", "fmha"), "pallas": ("tpu_custom_call",)}


def fell_back(overrides, calls: dict[str, int]) -> str | None:
  """Why a run asked for a fused attention kernel lacks it, or None.

  Args:
    overrides: the run's ``FIELD=VALUE`` overrides (``model.attention_impl=cudnn``, ...).
    calls: {custom-call target: count} of its compiled program (``lm.costs.custom_calls``).
  Returns:
    None when no fused kernel was asked for or one is in the program; else one sentence.
  """
  impls = [o.partition("=")[2] for o in overrides if o.startswith("model.attention_impl=")]
  want = impls[-1] if impls else None
  if want not in FUSED_TARGETS:
    return None
  if any(t in target.lower() for target in calls for t in FUSED_TARGETS[want]):
    return None
  return (f"attention_impl={want} but no {want} kernel is in the compiled program (it fell "
          f"back to xla: the log's 'attention:' lines say why)")


def _relative(a, b) -> float:
  return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def bias_tables(grads) -> dict[str, np.ndarray]:
  """{"encoder" / "decoder": the gradient of that stack's relative-position bias table}."""
  return {stack: grads[stack]["relpos_bias"]["rel_embedding"]
          for stack in ("encoder", "decoder")
          if stack in grads and "relpos_bias" in grads[stack]}


def numerics(args) -> int:
  """Loss and gradients under overrides A and B from the same params; 1 if they disagree."""
  runs = {side: program.build_run(validate.validate(load_config(args.config, args.set + extra)))
          for side, extra in (("a", args.a), ("b", args.b))}
  with runs["a"].axis_rules():
    state = runs["a"].init_state()
  local = _batch(runs["a"])
  out = {"a": args.a, "b": args.b}
  grads = {}
  for side, run in runs.items():
    t0 = time.perf_counter()
    loss, g, calls = loss_and_grads(run, state.params, local)
    grads[side] = g
    out[side + "_result"] = {
        "loss": loss, "grad_norm": float(np.sqrt(sum(np.sum(x * x) for x in jax.tree.leaves(g)))),
        "bias_table_grad_norms": {k: float(np.linalg.norm(v)) for k, v in bias_tables(g).items()},
        "custom_calls": calls, "seconds": time.perf_counter() - t0}
  a, b = out["a_result"], out["b_result"]
  checks = {
      "loss": abs(a["loss"] - b["loss"]) / max(abs(a["loss"]), 1e-30),
      "grad_norm": abs(a["grad_norm"] - b["grad_norm"]) / max(a["grad_norm"], 1e-30),
      "grads": _relative(np.concatenate([x.ravel() for x in jax.tree.leaves(grads["b"])]),
                         np.concatenate([x.ravel() for x in jax.tree.leaves(grads["a"])])),
  }
  for stack, table in bias_tables(grads["a"]).items():
    checks[f"{stack}_bias_table_grad"] = _relative(bias_tables(grads["b"])[stack], table)
  limits = {"loss": args.loss_rtol, "grad_norm": args.grad_rtol, "grads": args.grad_rtol}
  problems = [f"{k} differs by {v:.3g} (limit {limits.get(k, args.grad_rtol):.3g})"
              for k, v in checks.items() if not v <= limits.get(k, args.grad_rtol)]
  problems += [f"{side}: the {stack} bias table's gradient is zero"
               for side in ("a", "b")
               for stack, norm in out[side + "_result"]["bias_table_grad_norms"].items()
               if not norm > 0]
  problems += [f"{side}: {why}" for side in ("a", "b")  # else the gate compared xla with xla
               if (why := fell_back(args.set + getattr(args, side),
                                    out[side + "_result"]["custom_calls"]))]
  out.update(relative_differences=checks, tolerances={"loss": args.loss_rtol,
                                                       "grads": args.grad_rtol},
             agree=not problems, problems=problems)
  print(f"A {args.a}: loss {a['loss']:.6f}, grad norm {a['grad_norm']:.6f}, bias tables "
        f"{a['bias_table_grad_norms']}")
  print(f"B {args.b}: loss {b['loss']:.6f}, grad norm {b['grad_norm']:.6f}, bias tables "
        f"{b['bias_table_grad_norms']}")
  print("relative differences: " + ", ".join(f"{k} {v:.3g}" for k, v in checks.items()))
  print("AGREE" if not problems else "DISAGREE: " + "; ".join(problems), flush=True)
  if args.json:
    results.write_json(args.json, "gpu_speed/numerics", out, args)
  return 0 if not problems else 1


def _host_init_seconds(run) -> float:
  """Seconds to make the same initial state on the host's CPU and copy it to the devices."""
  d = run.data_spec
  cpu = jax.devices("cpu")[0]
  t0 = time.perf_counter()
  dummy = jax.device_put(program.dummy_batch(d.architecture, d.inputs_length, d.targets_length),
                         cpu)
  with jax.default_device(cpu):
    state = jax.jit(functools.partial(steps.create_train_state, model=run.model, tx=run.tx))(
        jax.device_put(run.rng, cpu), dummy)
  state = jax.device_put(state, run.state_shardings)
  jax.block_until_ready(state)
  return time.perf_counter() - t0


def speed(args) -> int:
  """The train step's median time, MFU and peak memory for one config."""
  config = load_config(args.config, args.set)
  run = program.build_run(validate.validate(config))
  d, mc = run.data_spec, run.model_config
  local = _batch(run)
  out = {"config": args.config, "set": args.set, "preset": config_lib.preset_name(config),
         "architecture": d.architecture, "dtype": mc.dtype, "batch": int(d.batch_size),
         "inputs_length": int(d.inputs_length), "targets_length": int(d.targets_length),
         "params": accounting.count_params(mc),
         "attention_impl": getattr(mc, "attention_impl", None),
         "remat_policy": mc.remat_policy, "scan_layers": mc.scan_layers}
  if args.host_init:
    out["host_init_s"] = _host_init_seconds(run)
  with run.axis_rules():
    t0 = time.perf_counter()
    state = run.init_state()
    jax.block_until_ready(state)
    out["init_s"] = time.perf_counter() - t0
    batch = partitioning.make_global_batch(local, run.mesh)
    t0 = time.perf_counter()
    compiled = run.train_step.lower(state, batch).compile()
    out["compile_s"] = time.perf_counter() - t0
  out["custom_calls"] = costs.custom_calls(compiled)
  out["fell_back"] = fell_back(args.set, out["custom_calls"])
  print(f"init {out['init_s']:.1f} s"
        + (f" (on the host: {out['host_init_s']:.1f} s)" if args.host_init else "")
        + f", compile {out['compile_s']:.1f} s", flush=True)
  state, m, times = time_steps(compiled, state, batch, warmup=args.warmup, steps=args.steps)
  static, gpu_peak = memory_per_device(compiled)
  devices = jax.devices()
  peak, peak_source = metrics.peak_flops(devices, sizes=(args.cpu_peak_size,))
  step = statistics.median(times)
  flops = accounting.training_flops(mc, d.inputs_length, d.targets_length, d.batch_size)
  out.update(
      device_kind=devices[0].device_kind, devices=len(devices), backend=jax.default_backend(),
      step_times_s=times, step_median_s=step, step_min_s=min(times),
      tokens_per_s=d.batch_size * (d.inputs_length + d.targets_length) / step,
      flops_per_step=float(flops), peak_flops=peak, peak_source=peak_source, mfu=flops / step / peak,
      flop_convention="lm.model.accounting.training_flops: matmuls incl. attention (full L x S), "
                      "2 per multiply-add, 3x forward; no remat recompute, no optimizer",
      peak_bytes_in_use=gpu_peak, xla_bytes_per_device=static,
      loss=float(m["loss"][0]) / max(float(m["loss"][1]), 1.0))
  print(f"{out['preset']} batch {out['batch']} x {out['inputs_length']}/{out['targets_length']} "
        f"attention_impl={out['attention_impl']}: {step * 1e3:.1f} ms/step (min "
        f"{min(times) * 1e3:.1f}), {out['tokens_per_s']:.0f} tokens/s, MFU {out['mfu']:.1%} "
        f"({peak_source}), peak memory "
        + (f"{gpu_peak / 2**30:.2f} GiB" if gpu_peak else f"- (XLA {static / 2**30:.2f} GiB)"),
        flush=True)
  if out["fell_back"]:
    print(f"warning: {out['fell_back']}", flush=True)
  if args.json:
    results.write_json(args.json, "gpu_speed/speed", out, args)
  return 0


def summary(args) -> int:
  """One row per speed stage's JSON in --dir (and the numerics verdict) -> table and JSON."""
  import glob  # pylint: disable=import-outside-toplevel
  import json  # pylint: disable=import-outside-toplevel
  rows, gate = [], None
  for path in sorted(glob.glob(os.path.join(args.dir, "*.json"))):
    with open(path, encoding="utf-8") as f:
      record = json.load(f)
    kind, r = record.get("benchmark"), record.get("results") or {}
    stage = os.path.splitext(os.path.basename(path))[0]
    if kind == "gpu_speed/numerics":
      gate = {"stage": stage, "agree": r["agree"], "problems": r["problems"],
              "relative_differences": r["relative_differences"]}
    elif kind == "gpu_speed/speed":
      rows.append({"stage": stage, **{k: r.get(k) for k in (
          "preset", "attention_impl", "batch", "inputs_length", "targets_length",
          "step_median_s", "tokens_per_s", "mfu", "peak_bytes_in_use", "init_s", "host_init_s",
          "compile_s", "device_kind", "fell_back")}})
  for r in rows:
    peak = r["peak_bytes_in_use"]
    print(f"{r['stage']:12s} {r['preset']:28s} {str(r['attention_impl']):6s} "
          f"{r['batch']:4d} x {r['inputs_length']}/{r['targets_length']}: "
          f"{r['step_median_s'] * 1e3:8.1f} ms  MFU {r['mfu']:6.1%}  peak "
          + (f"{peak / 2**30:6.2f} GiB" if peak else "     -")
          + (" (fell back to xla)" if r["fell_back"] else ""))
  if gate is not None:
    print(f"numerics: {'agree' if gate['agree'] else 'DISAGREE'} "
          f"{gate['relative_differences']}")
  if args.json:
    results.write_json(args.json, "gpu_speed/summary", {"numerics": gate, "speed": rows}, args)
  return 0


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="stage", required=True)
  for name in ("numerics", "speed"):
    p = sub.add_parser(name)
    p.add_argument("--config", required=True, help="MODULE:ARG, e.g. t5:size=small,batch=8")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a config override (repeatable), e.g. model.scan_layers=True")
    p.add_argument("--json", default=None, metavar="FILE", help="write the results here")
  n = sub.choices["numerics"]
  n.add_argument("--a", action="append", default=[], metavar="FIELD=VALUE",
                 help="overrides of side A (repeatable)")
  n.add_argument("--b", action="append", default=[], metavar="FIELD=VALUE",
                 help="overrides of side B (repeatable)")
  n.add_argument("--loss_rtol", type=float, default=1e-2, help="relative loss difference allowed")
  n.add_argument("--grad_rtol", type=float, default=5e-2,
                 help="relative L2 difference allowed for the gradients, their norm and each "
                      "bias table's gradient")
  s = sub.choices["speed"]
  s.add_argument("--steps", type=int, default=10, help="timed steps")
  s.add_argument("--warmup", type=int, default=2, help="untimed steps after compiling")
  s.add_argument("--host_init", action="store_true",
                 help="also time making the initial state on the host CPU (and copying it)")
  s.add_argument("--cpu_peak_size", type=int, default=1024,
                 help="matmul size that measures the CPU's peak (CPU runs only)")
  m = sub.add_parser("summary")
  m.add_argument("--dir", required=True, help="the stages' JSON files ($OUT)")
  m.add_argument("--json", default=None, metavar="FILE", help="write the summary here")
  args = parser.parse_args(argv)
  try:
    return {"numerics": numerics, "speed": speed, "summary": summary}[args.stage](args)
  except ValueError as e:
    print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
