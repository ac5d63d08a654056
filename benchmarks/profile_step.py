"""Where a training step's time goes: jax.profiler's trace of a few steps, summed by op.

    python benchmarks/profile_step.py --config size=tiny,batch=16,inputs_length=64
    python benchmarks/profile_step.py --config size=small,batch=128,inputs_length=512 \\
        --init_on_cpu --trace_dir /tmp/trace          # on a GPU

Builds the run of ``configs/t5.py:<--config>`` (``lm.program.build_run``, the program
lm.main trains with), compiles its train step, runs ``--warmup`` steps, then traces
``--steps`` steps (``jax.profiler.trace(..., create_perfetto_trace=True)``) and prints the
ops that took the most time, summed over the traced steps and divided by their number:
on a GPU or TPU the device's kernels (grouped by the HLO op that launched them where the
trace names it), on the CPU XLA's thunks. The percentages are of the summed op time, which
on a GPU with one stream is the device's busy time; the step's wall time is printed beside.

``--init_on_cpu`` creates the initial state on the host CPU and copies it over: the
initialisation's compile (one threefry per parameter, unrolled) takes a minute on a GPU and
is not what is being profiled.
"""
from __future__ import annotations

import argparse
import collections
import functools
import glob
import gzip
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402

import results  # noqa: E402
from bench_train import random_batch  # noqa: E402
from configs import t5  # noqa: E402
from lm import config as config_lib  # noqa: E402
from lm import partitioning, program, steps, validate  # noqa: E402


def device_time_by_op(trace: dict) -> tuple[collections.Counter, str]:
  """Sums the trace's complete events ('ph' == 'X') by name, in microseconds.

  Args:
    trace: a perfetto/Chrome trace (``traceEvents`` list).

  Returns:
    (microseconds by op, which tracks were summed). Device processes ('/device:GPU:0',
    '/device:TPU:0', ...) are used where the trace has any; otherwise the host's XLA
    thunks (the threads named tf_XLA*).
  """
  events = trace["traceEvents"] if isinstance(trace, dict) else trace
  process = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
  thread = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"}
  devices = {pid for pid, name in process.items() if "/device:" in name
             and "CPU" not in name and "CUSTOM" not in name}
  by_op: collections.Counter = collections.Counter()
  for e in events:
    if e.get("ph") != "X" or "dur" not in e:
      continue
    if devices:
      if e["pid"] not in devices:
        continue
      args = e.get("args", {})
      name = args.get("hlo_op") or args.get("long_name") or e["name"]
    else:
      if not thread.get((e["pid"], e["tid"]), "").startswith("tf_XLA"):
        continue  # XLA:CPU's thunks run on its Eigen pool and the client's threads
      name = e["name"]
    if name.startswith(("ThunkExecutor", "MutexLock")):
      continue  # containers of the thunks, not work
    by_op[name] += float(e["dur"])
  where = ", ".join(sorted(process[p] for p in devices)) if devices else "host threads"
  return by_op, where


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--config", default="size=tiny,batch=16,inputs_length=64",
                      help="configs/t5.py overrides")
  parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="a config field to override, e.g. model.scan_layers=True (repeatable)")
  parser.add_argument("--steps", type=int, default=5, help="traced steps")
  parser.add_argument("--warmup", type=int, default=2, help="untraced steps after compiling")
  parser.add_argument("--top", type=int, default=30, help="ops to print")
  parser.add_argument("--trace_dir", default="/tmp/lm_profile", help="where the trace is written")
  parser.add_argument("--init_on_cpu", action="store_true",
                      help="create the initial state on the CPU and copy it to the devices")
  parser.add_argument("--json", default=None, metavar="FILE", help="write the summary as JSON")
  parser.add_argument("--hlo", default=None, metavar="FILE",
                      help="write the compiled step's HLO text (to find an op's fusion and the "
                           "source line in its metadata)")
  args = parser.parse_args(argv)

  try:
    config = config_lib.derive(config_lib.apply_overrides(t5.get_config(args.config), args.set))
  except ValueError as e:
    parser.error(str(e))
  run = program.build_run(validate.validate(config))
  d = run.data_spec
  local = random_batch(d.architecture, d.inputs_length, d.targets_length, d.batch_size,
                       run.model_config.vocab_size)
  t0 = time.perf_counter()
  if args.init_on_cpu:  # outside the mesh's context: jitted for the host CPU
    cpu = jax.devices("cpu")[0]
    dummy = jax.device_put(program.dummy_batch(d.architecture, d.inputs_length,
                                             d.targets_length), cpu)
    with jax.default_device(cpu):
      state = jax.jit(functools.partial(steps.create_train_state, model=run.model,
                                        tx=run.tx))(jax.device_put(run.rng, cpu), dummy)
    state = jax.device_put(state, run.state_shardings)
  with run.axis_rules():
    if not args.init_on_cpu:
      state = run.init_state()
    jax.block_until_ready(state)
    print(f"init_state {time.perf_counter() - t0:.1f} s", flush=True)
    batch = partitioning.make_global_batch(local, run.mesh)
    t0 = time.perf_counter()
    step = run.train_step.lower(state, batch).compile()
    print(f"compile {time.perf_counter() - t0:.1f} s", flush=True)
    if args.hlo:
      with open(args.hlo, "w") as f:
        f.write(step.as_text())
    for _ in range(args.warmup):
      state, _ = step(state, batch)
    jax.block_until_ready(state)
    os.makedirs(args.trace_dir, exist_ok=True)
    with jax.profiler.trace(args.trace_dir, create_perfetto_trace=True):
      t0 = time.perf_counter()
      for _ in range(args.steps):
        state, _ = step(state, batch)
      jax.block_until_ready(state)
      wall = (time.perf_counter() - t0) / args.steps
  files = sorted(glob.glob(os.path.join(args.trace_dir, "**", "perfetto_trace.json.gz"),
                           recursive=True), key=os.path.getmtime)
  with gzip.open(files[-1]) as f:
    by_op, where = device_time_by_op(json.load(f))
  total = sum(by_op.values())
  print(f"\n{args.config} {' '.join(args.set)} on {jax.devices()[0].device_kind}: step {wall * 1e3:.1f} ms wall; "
        f"ops summed over {where}: {total / args.steps / 1e3:.1f} ms per step, "
        f"{len(by_op)} distinct ops; trace {files[-1]}")
  print(f"{'ms/step':>9} {'share':>6}  op")
  for name, us in by_op.most_common(args.top):
    print(f"{us / args.steps / 1e3:9.2f} {us / total:6.1%}  {name[:150]}")
  if args.json:
    results.write_json(args.json, "profile_step", {
        "config": args.config, "set": args.set, "device": jax.devices()[0].device_kind,
        "step_ms": wall * 1e3, "ops_ms_per_step_total": total / args.steps / 1e3,
        "distinct_ops": len(by_op), f"top_{args.top}_ops_ms_per_step": {
            k: v / args.steps / 1e3 for k, v in by_op.most_common(args.top)}}, args)

if __name__ == "__main__":
  main()
