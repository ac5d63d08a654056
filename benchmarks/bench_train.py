"""Training-step benchmark: the real lm.steps.train_step (model + loss + Adafactor update).

    python benchmarks/bench_train.py                                  # all archs, tiny + small
    python benchmarks/bench_train.py --archs encoder_decoder --sizes small --batch 4 --steps 3
    python benchmarks/bench_train.py --mesh 2,2,2                     # e.g. 8 simulated devices
    XLA_FLAGS=--xla_force_host_platform_device_count=8 python benchmarks/bench_train.py --sizes tiny

For each (arch, size) the config is ``configs.t5.get_config("arch=...,size=...,batch=B,
inputs_length=Li")`` (targets length from the span-corruption objective: 114 at 512),
and the step is the one lm/train.py trains with, from ``lm.program.build_run`` (Adafactor in
T5 settings, ``lm.steps.train_step`` jitted with the state / batch shardings of
``lm.partitioning``, state donated) over a mesh of all present devices (``--mesh``, default
the config's (-1, 1, 1) data-parallel mesh). The batch is random tokens with every
feature of the pipeline for that architecture (one segment per row, no padding), sharded
with ``partitioning.make_global_batch``. After ``--warmup`` untimed steps, ``--steps``
steps are timed one by one (each blocks on the new state); the median is reported.

Columns: arch, size (model preset), batch B, lengths Li/Lt, params, tokens/s (B * (Li +
Lt): every token of both stacks, the same for all architectures), step time (median;
min in brackets), model FLOPs per step (``lm.model.accounting.training_flops``: matmuls,
3x forward, no optimizer), MFU = model FLOPs / step time / peak of all devices, and
memory per device: argument + output + temp - alias bytes of the compiled step
(``compiled.memory_analysis()``; donated state buffers counted once), plus on GPU the
allocator's ``peak_bytes_in_use`` from ``device.memory_stats()`` if it reports one.

Peak: the spec-sheet dense bf16 figure per device (lm/metrics.py) times the device
count on GPU/TPU; on CPU the best measured float32 matmul of the host (1024^3 and 2048^3,
``lm.metrics.measure_matmul_flops``), which simulated CPU devices share. ``--dtype auto``
runs float32 activations on CPU (what that peak measures; bfloat16 is not faster on
CPU) and the config's dtype (bfloat16, T5.1.1) on accelerators.

``--compare_hf`` (encoder_decoder; needs torch + transformers, skipped with a message
otherwise) also times Hugging Face T5 with the same config and batch doing a full training
step: zero_grad, forward with labels, backward, transformers' Adafactor in T5's
settings (benchmarks/hf_reference.py), on lm's device (CUDA when lm runs on a GPU; there
set XLA_PYTHON_CLIENT_PREALLOCATE=false so both fit) and in lm's precision (bfloat16
activations -> torch.autocast in bfloat16). HF runs in its OWN process, alternating with lm:
``--rounds`` rounds of ``--steps`` steps per side, order reversed every round, both sides on
the same ``--threads`` CPUs and with the same host-memory policy (benchmarks/fair.py); it
prints both medians with their spread, the ratio HF/lm step time with its per-round range,
and "parity" when 1.0 lies in that range.
``--host_memory retain`` (default, as lm.main) applies ``lm.hostmem.retain_for_cpu()``
to this process and to the HF worker; ``default`` keeps glibc's own policy for both.
``--json=FILE`` writes the figures with the machine, versions and commit.

Prints figures only; asserts nothing. On a shared machine look at min vs median.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import fair  # noqa: E402  (benchmarks/)
import hf_reference  # noqa: E402  (benchmarks/)
import results  # noqa: E402  (benchmarks/)
from configs import t5 as t5_config  # noqa: E402
from lm import config as config_lib  # noqa: E402
from lm.architecture import ARCHITECTURES  # noqa: E402
from lm import hostmem, metrics, partitioning, program, validate  # noqa: E402
from lm.data import features  # noqa: E402
from lm.model import accounting  # noqa: E402

ARCHS = ARCHITECTURES  # lm/architecture.py
SIZES = ("tiny", "small")


def random_batch(architecture: str, inputs_length: int, targets_length: int, batch_size: int,
                 vocab_size: int, seed: int = 0) -> dict[str, np.ndarray]:
  """Random full rows with the pipeline's features for ``architecture`` (data architecture).

  Args:
    architecture: "encoder_decoder", "prefix_lm" or "causal" (the data layout,
      ``lm.config.data_spec(config).architecture``).
    inputs_length, targets_length: Li, Lt (decoder-only rows are Li + Lt long).
    batch_size: B.
    vocab_size: token ids are drawn from [2, vocab_size).
    seed: NumPy seed.
  Returns:
    dict of int32[B, L] features (float32 decoder_loss_weights): one segment per row
    (segment ids 1, positions arange); decoder inputs are the targets shifted right;
    prefix LM: decoder_causal_attention 1 on the first Li + 1 positions, loss weights 0
    on the first Li.
  """
  rng = np.random.default_rng(seed)
  shapes = features.zero_batch(architecture, inputs_length, targets_length, batch_size)
  out = {}
  for key, zeros in shapes.items():
    b, length = zeros.shape
    if key.endswith("_segment_ids"):
      out[key] = np.ones((b, length), np.int32)
    elif key.endswith("_positions"):
      out[key] = np.broadcast_to(np.arange(length, dtype=np.int32), (b, length)).copy()
    elif key == "decoder_loss_weights":
      w = np.ones((b, length), np.float32)
      if architecture == "prefix_lm":
        w[:, :inputs_length] = 0.0
      out[key] = w
    elif key == "decoder_causal_attention":
      c = np.zeros((b, length), np.int32)
      c[:, :inputs_length + 1] = 1
      out[key] = c
    elif key.endswith("_tokens"):
      out[key] = rng.integers(2, vocab_size, (b, length), dtype=np.int32)
    else:
      raise ValueError(f"random_batch: no rule for feature {key!r}")
  if "decoder_input_tokens" in out:
    targets = out["decoder_target_tokens"]
    out["decoder_input_tokens"] = np.concatenate(
        [np.zeros((targets.shape[0], 1), np.int32), targets[:, :-1]], axis=1)
  return out


def memory_per_device(compiled) -> tuple[float, float | None]:
  """(compiled step's argument + output + temp - alias bytes, GPU allocator peak or None)."""
  ma = compiled.memory_analysis()
  if isinstance(ma, (list, tuple)):
    ma = ma[0] if ma else None
  static = float("nan")
  if ma is not None:
    static = float(ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes
                   - getattr(ma, "alias_size_in_bytes", 0))
  peak = None
  device = jax.devices()[0]
  if device.platform == "gpu":
    try:
      stats = device.memory_stats() or {}
      peak = stats.get("peak_bytes_in_use")
    except Exception:  # pylint: disable=broad-except  # some backends do not implement it
      peak = None
  return static, peak


def time_steps(compiled, state, batch, *, warmup: int, steps: int):
  """Runs `warmup` untimed steps, then `steps` timed ones, each blocking on the new state.

  Returns:
    (the last state, the last step's metrics, the `steps` step times in seconds).
  """
  for _ in range(warmup):
    state, m = compiled(state, batch)
  jax.block_until_ready(state)
  times = []
  for _ in range(steps):
    t0 = time.perf_counter()
    state, m = compiled(state, batch)
    jax.block_until_ready(state)
    times.append(time.perf_counter() - t0)
  return state, m, times


def bench_one(arch: str, size: str, args, mesh) -> dict:
  """Builds the config, state and jitted train step for (arch, size); times it."""
  config = t5_config.get_config(f"arch={arch},size={size},batch={args.batch},"
                                f"inputs_length={args.inputs_length}")
  config.unlock()
  dtype = args.dtype
  if dtype == "auto":
    dtype = "float32" if jax.default_backend() == "cpu" else config.model.dtype
  config.model.dtype = dtype
  config.mesh.shape = tuple(mesh.devices.shape)
  config.data.num_shards = 1  # virtual data shards of the pipeline; no pipeline here
  config.lock()
  settings = validate.validate(config_lib.derive(config))
  run = program.build_run(settings, mesh=mesh)  # lm.train's compile, over `mesh`
  model_config = run.model_config
  d = run.data_spec
  li, lt, b = d.inputs_length, d.targets_length, d.batch_size
  local = random_batch(d.architecture, li, lt, b, model_config.vocab_size)
  with run.axis_rules():
    state = run.init_state()  # the trainer's new state, on the run's shardings
    batch = partitioning.make_global_batch(local, run.mesh)
    t0 = time.perf_counter()
    compiled = run.train_step.lower(state, batch).compile()
    compile_s = time.perf_counter() - t0
  mem, gpu_peak = memory_per_device(compiled)

  state, m, times = time_steps(compiled, state, batch, warmup=args.warmup, steps=args.steps)
  loss = float(m["loss"][0]) / max(float(m["loss"][1]), 1.0)
  if gpu_peak is None and jax.devices()[0].platform == "gpu":
    gpu_peak = (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
  feature_lengths = features.feature_lengths(d.architecture, li, lt)
  compare = None
  if args.compare_hf and arch == "encoder_decoder":
    def lm_step():
      nonlocal state
      state, _ = compiled(state, batch)
      jax.block_until_ready(state)
    compare = compare_hf(model_config, local, lm_step, args)
  return {"arch": arch, "size": size, "preset": config_lib.preset_name(config), "dtype": dtype,
          "batch": b, "li": li, "lt": lt, "rows": feature_lengths, "compare_hf": compare,
          "params": accounting.count_params(model_config),
          "flops": accounting.training_flops(model_config, li, lt, b),
          "times": times, "compile_s": compile_s, "mem": mem, "gpu_peak": gpu_peak, "loss": loss}


def compare_hf(model_config, local_batch, lm_step, args) -> dict:
  """lm's train step vs HF T5's (Adafactor) in its own process (`hf_reference.compare`), on
  the GPU when lm's is."""
  device = "cuda" if jax.default_backend() == "gpu" else "cpu"
  return hf_reference.compare(lm_step, model_config, local_batch, rounds=args.rounds,
                              steps=args.steps, optimizer_step=True, warmup=args.warmup,
                              host_memory=args.host_memory, device=device,
                              dtype=model_config.dtype)


def table_row(r: dict, label: str, preset: str, dtype: str, params: str, times: list[float],
              gflop: str, peak: float, tail: str) -> str:
  """One line of the results table for ``bench_one``'s result ``r`` timed as ``times``."""
  t = statistics.median(times)
  tokens = r["batch"] * (r["li"] + r["lt"])
  return (f"{label:16s} {r['size']:5s} {preset:22s} {dtype:8s} {r['batch']:5d} "
          f"{r['li']:>4d}/{r['lt']:<3d} {params:8s} {tokens / t:9.0f} "
          f"{t * 1e3:8.1f} ({min(times) * 1e3:6.1f}) {gflop:10s} "
          f"{r['flops'] / t / peak:6.1%} {tail}")


def compare_rows(r: dict, peak: float) -> list[str]:
  """Table rows of the alternating lm / HF comparison of ``bench_one``'s result ``r``."""
  c = r["compare_hf"]
  lm_times = list(c["lm_round_medians"])
  hf_times = list(c["peer_round_medians"])
  info = c["hf_info"]
  return [
      table_row(r, "  lm, alternating", r["preset"], r["dtype"], "", lm_times, "", peak,
                "  (round medians)"),
      table_row(r, "  HF T5 (torch)", "own process, Adafactor", info.get("dtype", "float32"),
                "", hf_times, "", peak,
                f"  {fair.describe(c)}  [{info['versions']}, {info.get('device', 'cpu')}, "
                f"{info['threads']} threads]"),
  ]


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--archs", default=",".join(ARCHS), help=f"comma-separated, of {ARCHS}")
  parser.add_argument("--sizes", default=",".join(SIZES), help="comma-separated configs/t5.py sizes")
  parser.add_argument("--batch", type=int, default=4, help="global batch size")
  parser.add_argument("--inputs_length", type=int, default=512)
  parser.add_argument("--steps", type=int, default=3, help="timed steps")
  parser.add_argument("--warmup", type=int, default=1, help="untimed steps after compiling")
  parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                      help="activation dtype; auto = float32 on CPU, the config's on accelerators")
  parser.add_argument("--mesh", default="-1,1,1", help="(data, fsdp, tensor) mesh shape")
  parser.add_argument("--compare_hf", action="store_true",
                      help="also time a HF PyTorch T5 training step (forward, backward, transformers' "
                      "Adafactor) for encoder_decoder, on the same device (CUDA when lm runs on a GPU) and "
                      "in the same precision (bfloat16 autocast for bfloat16); needs torch + "
                      "transformers")
  parser.add_argument("--host_memory", default="retain", choices=["retain", "default"],
                      help="retain: lm.hostmem.retain_for_cpu() first, as lm.main does (the "
                      "HF worker does the same); default: glibc's own on both sides")
  parser.add_argument("--rounds", type=int, default=3, help="alternating rounds with --compare_hf")
  parser.add_argument("--threads", type=int, default=0,
                      help="CPUs (= threads) for lm and HF alike; 0 = all this process may use")
  parser.add_argument("--json", default=None, metavar="FILE", help="write the results as JSON")
  args = parser.parse_args(argv)
  if args.rounds < 1 or args.steps < 1:
    parser.error("--rounds and --steps must be >= 1")
  try:
    fair.pin_cpus(args.threads)
  except ValueError as e:
    parser.error(str(e))
  retained = args.host_memory == "retain" and hostmem.retain_for_cpu()
  missing = hf_reference.available() if args.compare_hf else None
  if missing is not None:
    print(f"--compare_hf skipped: {missing}")
    args.compare_hf = False

  devices = jax.devices()
  mesh = partitioning.make_mesh(args.mesh)
  print(f"jax {jax.__version__}, backend {jax.default_backend()}, {len(devices)} x "
        f"{devices[0].device_kind}, {os.cpu_count()} CPUs, mesh {dict(mesh.shape)}, "
        f"host memory {'retained' if retained else 'glibc default'}")
  peak, peak_src = metrics.peak_flops(devices, sizes=(1024, 2048), repeats=10)
  print(f"peak {peak / 1e9:.1f} GFLOP/s ({peak_src})", flush=True)

  rows, records = [], []
  header = (f"{'arch':16s} {'size':5s} {'preset':22s} {'dtype':8s} {'batch':>5s} {'Li/Lt':>8s} "
            f"{'params':>8s} {'tokens/s':>9s} {'step ms (min)':>16s} {'GFLOP/step':>10s} "
            f"{'MFU':>6s} {'mem/dev':>9s}")
  for size in args.sizes.split(","):
    for arch in args.archs.split(","):
      r = bench_one(arch, size, args, mesh)
      t = statistics.median(r["times"])
      mem = f"{r['mem'] / 2**20:7.0f}MiB"
      if r["gpu_peak"] is not None:
        mem += f" (peak {r['gpu_peak'] / 2**20:.0f}MiB)"
      line = table_row(r, arch, r["preset"], r["dtype"], f"{r['params'] / 1e6:7.1f}M",
                       r["times"], f"{r['flops'] / 1e9:10.1f}", peak, mem)
      rows.append(line)
      print(f"  {line}   [compile {r['compile_s']:.1f} s, loss {r['loss']:.2f}]", flush=True)
      records.append({k: v for k, v in r.items() if k != "compare_hf"} | {
          "step_median_s": t, "tokens_per_s": r["batch"] * (r["li"] + r["lt"]) / t,
          "mfu": r["flops"] / t / peak, "compare_hf": r["compare_hf"]})
      if r["compare_hf"]:
        rows.extend(compare_rows(r, peak))
        for line in rows[-2:]:
          print(f"  {line}", flush=True)
  if jax.default_backend() == "cpu":
    # A busy host depresses one measurement; re-measure and report against the best.
    again, _ = metrics.peak_flops(devices, sizes=(1024, 2048), repeats=10)
    if again > peak:
      print(f"(peak re-measured at {again / 1e9:.1f} GFLOP/s; MFU above is against "
            f"{peak / 1e9:.1f}, i.e. x{peak / again:.2f} against the new figure)")
  print("\n" + header)
  for line in rows:
    print(line)
  if args.json:
    results.write_json(args.json, "bench_train", {
        "backend": jax.default_backend(), "devices": len(devices),
        "device_kind": devices[0].device_kind, "mesh": dict(mesh.shape),
        "host_memory_retained": retained, "peak_flops": peak, "peak_source": peak_src,
        "runs": records}, args)
    print(f"wrote {args.json}")


if __name__ == "__main__":
  main()
