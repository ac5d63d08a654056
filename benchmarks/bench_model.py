"""Model throughput benchmark: jitted forward + backward of the presets, tokens/s and MFU.

    python benchmarks/bench_model.py                        # tiny, t5_1_1_small, decoder-only
    python benchmarks/bench_model.py --presets t5_1_1/small/encoder_decoder --batch 8 --steps 5 --dtype float32
    python benchmarks/bench_model.py --presets t5_1_1/small/encoder_decoder --compare_hf   # + HF PyTorch T5

What is timed: ``jax.jit(jax.value_and_grad(loss))(params, batch)`` where loss is the
mean token cross entropy of ``Transformer(config).apply`` (no optimizer update, no
dropout), on one device (the first of ``jax.devices()``), after a compile + warm-up call;
the reported step time is the median of ``--steps`` timed calls.

Per preset it prints: step time, tokens/s (B * (Li + Lt), every token of both stacks),
the model FLOPs of one step from ``lm.model.accounting.training_flops`` (matmuls only,
3x forward), XLA's own FLOP count of the compiled step (cost analysis; it also counts
elementwise work and the backward's real matmuls), and MFU = model FLOPs / step time /
peak. The peak is the spec-sheet bf16 peak for known accelerators (lm/metrics.py) and,
on CPU, a measured large float32 matmul (``lm.metrics.measure_matmul_flops``), so
CPU "MFU" is relative to what this machine's XLA achieves on one big GEMM.

``--compare_hf`` (only if torch and transformers are installed; skipped with a message
otherwise) times HF ``T5ForConditionalGeneration`` built from the same config
(``lm.checkpoint.hf_t5.config_to_hf``), float32, same batch, zero_grad + forward + backward of
the mean cross entropy, in its OWN process (benchmarks/hf_reference.py), alternating with
lm: ``--rounds`` rounds of ``--steps`` steps per side, order reversed every round, both
sides on the same ``--threads`` CPUs with the same host-memory policy (benchmarks/fair.py).
It prints both medians with their spread, the ratio HF/lm time with its per-round range,
and "parity" when 1.0 lies in that range. Decoder-only presets have no HF T5 counterpart
and are skipped there.

``--json=FILE`` writes every figure with the machine, versions and commit
(benchmarks/results.py). Figures on a shared machine are noisy: look at the spread
printed next to the median; side-by-side ratios are the meaningful figures there.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import fair  # noqa: E402  (benchmarks/)
import hf_reference  # noqa: E402  (benchmarks/)
import results  # noqa: E402  (benchmarks/)
from lm import hostmem, metrics  # noqa: E402
from lm.model import accounting  # noqa: E402
from lm.model.presets import from_name  # noqa: E402
from lm.model.transformer import Transformer, TransformerConfig  # noqa: E402

DEFAULT_PRESETS = ("cpu/tiny/encoder_decoder,cpu/tiny/causal,t5_1_1/small/encoder_decoder,"
                   "t5_1_1/small/prefix_lm,t5_1_1/small/causal")


def make_batch(config: TransformerConfig, batch_size: int, inputs_length: int,
               targets_length: int, seed: int = 0) -> dict[str, np.ndarray]:
  """A full (unpadded) random batch with the features of docs/architecture.md ("The batch contract") for ``config``'s architecture.

  Returns:
    encoder-decoder: encoder_input_tokens int32[B, Li], decoder_{input,target}_tokens
    int32[B, Lt], decoder_loss_weights float32[B, Lt]; decoder-only: one sequence of
    Li + Lt tokens (prefix LM: decoder_causal_attention = 1 on the first Li + 1).
  """
  rng = np.random.default_rng(seed)
  v = config.vocab_size
  if config.is_encoder_decoder:
    targets = rng.integers(2, v, (batch_size, targets_length), dtype=np.int32)
    inputs = np.concatenate([np.zeros((batch_size, 1), np.int32), targets[:, :-1]], axis=1)
    return {"encoder_input_tokens": rng.integers(2, v, (batch_size, inputs_length), dtype=np.int32),
            "decoder_input_tokens": inputs, "decoder_target_tokens": targets,
            "decoder_loss_weights": np.ones((batch_size, targets_length), np.float32)}
  length = inputs_length + targets_length
  targets = rng.integers(2, v, (batch_size, length), dtype=np.int32)
  inputs = np.concatenate([np.zeros((batch_size, 1), np.int32), targets[:, :-1]], axis=1)
  batch = {"decoder_input_tokens": inputs, "decoder_target_tokens": targets,
           "decoder_loss_weights": np.ones((batch_size, length), np.float32)}
  if config.mask_type == "prefix_lm":
    causal = np.zeros((batch_size, length), np.int32)
    causal[:, :inputs_length + 1] = 1
    batch["decoder_causal_attention"] = causal
    batch["decoder_loss_weights"][:, :inputs_length] = 0.0
  return batch


def make_loss(model: Transformer):
  """loss(params, batch) -> float32[] mean cross entropy over weighted target tokens."""
  def loss(params, batch):
    logits = model.apply({"params": params}, batch)
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, batch["decoder_target_tokens"][..., None], axis=-1)[..., 0]
    w = batch["decoder_loss_weights"]
    return jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0)
  return loss


def bench_lm(config: TransformerConfig, batch, steps: int, device):
  """Compiles and times the jitted value_and_grad; returns a dict of figures.

  "step" in the result is the blocking step callable (for more timed rounds).
  """
  model = Transformer(config)
  batch = jax.device_put({k: jnp.asarray(v) for k, v in batch.items()}, device)
  init = jax.jit(lambda rng: nn.meta.unbox(model.init(rng, batch)["params"]))
  params = jax.device_put(init(jax.random.PRNGKey(0)), device)
  step = jax.jit(jax.value_and_grad(make_loss(model)))
  t0 = time.perf_counter()
  compiled = step.lower(params, batch).compile()
  compile_s = time.perf_counter() - t0
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else {}
  xla_flops = float((cost or {}).get("flops", float("nan")))
  loss, grads = compiled(params, batch)
  jax.block_until_ready(grads)  # warm-up
  step = lambda: jax.block_until_ready(compiled(params, batch))
  times = fair.time_calls(step, steps)
  return {"times": times, "compile_s": compile_s, "xla_flops": xla_flops, "loss": float(loss),
          "step": step}


def compare_hf(config: TransformerConfig, batch, lm_step, args) -> dict:
  """lm vs HF T5 (forward + backward) in separate processes (`hf_reference.compare`)."""
  return hf_reference.compare(lm_step, config, batch, rounds=args.rounds, steps=args.steps,
                              optimizer_step=False, warmup=1, host_memory=args.host_memory)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--presets", default=DEFAULT_PRESETS, help="comma-separated family/size/architecture names "
                      "(lm/model/presets.py)")
  parser.add_argument("--batch", type=int, default=4)
  parser.add_argument("--steps", type=int, default=5, help="timed steps (per round with --compare_hf)")
  parser.add_argument("--inputs_length", type=int, default=512)
  parser.add_argument("--targets_length", type=int, default=114)
  parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "preset"],
                      help="activation dtype (float32 is the fast one on CPU)")
  parser.add_argument("--scan_layers", action="store_true")
  parser.add_argument("--remat_policy", default="none")
  parser.add_argument("--compare_hf", action="store_true",
                      help="also time HF PyTorch T5 in its own process, alternating rounds with lm "
                      "(encoder-decoder presets; needs torch + transformers)")
  parser.add_argument("--rounds", type=int, default=3, help="alternating rounds with --compare_hf")
  parser.add_argument("--threads", type=int, default=0,
                      help="CPUs (= threads) for lm and HF alike; 0 = all this process may use")
  parser.add_argument("--host_memory", default="retain", choices=["retain", "default"],
                      help="retain: lm.hostmem.retain_for_cpu() first, as lm.main does (the "
                      "HF worker does the same); default: glibc's own on both sides")
  parser.add_argument("--json", default=None, metavar="FILE", help="write the results as JSON")
  args = parser.parse_args(argv)
  if args.rounds < 1 or args.steps < 1:
    parser.error("--rounds and --steps must be >= 1")
  try:
    cpus = fair.pin_cpus(args.threads)
  except ValueError as e:
    parser.error(str(e))
  retained = args.host_memory == "retain" and hostmem.retain_for_cpu()
  missing = hf_reference.available() if args.compare_hf else None
  if missing:
    print(f"--compare_hf skipped: {missing}")
    args.compare_hf = False

  device = jax.devices()[0]
  print(f"jax {jax.__version__}, backend {jax.default_backend()}, device {device.device_kind}, "
        f"{len(cpus)} CPUs {cpus}, batch {args.batch}, lengths {args.inputs_length}/{args.targets_length}, "
        f"host memory {'retained' if retained else 'glibc default'}")
  peak, peak_src = metrics.peak_flops([device], sizes=(1024, 2048), repeats=10)
  print(f"peak {peak / 1e9:.1f} GFLOP/s ({peak_src})")
  li, lt = args.inputs_length, args.targets_length
  rows, records = [], []
  for name in args.presets.split(","):
    overrides = dict(dropout_rate=0.0, scan_layers=args.scan_layers, remat_policy=args.remat_policy)
    if args.dtype != "preset":
      overrides["dtype"] = args.dtype
    config = from_name(name, **overrides)
    batch = make_batch(config, args.batch, li, lt)
    tokens = args.batch * (li + lt)
    flops = accounting.training_flops(config, li, lt, args.batch)
    r = bench_lm(config, batch, args.steps, device)
    t = statistics.median(r["times"])
    print(f"{name:20s} {config.dtype:8s} params {accounting.count_params(config) / 1e6:7.1f}M  "
          f"step {t * 1e3:8.1f} ms (min {min(r['times']) * 1e3:.1f}, max {max(r['times']) * 1e3:.1f})  "
          f"{tokens / t:9.0f} tok/s  model {flops / 1e9:8.1f} GFLOP/step  "
          f"XLA {r['xla_flops'] / 1e9:8.1f} GFLOP  {flops / t / 1e9:7.1f} GFLOP/s  "
          f"MFU {flops / t / peak:6.1%}  (compile {r['compile_s']:.1f} s, loss {r['loss']:.2f})",
          flush=True)
    record = {"preset": name, "dtype": config.dtype, "params": accounting.count_params(config),
              "model_flops_per_step": flops, "xla_flops_per_step": r["xla_flops"],
              "tokens_per_step": tokens, "step_times_s": r["times"], "step_median_s": t,
              "tokens_per_s": tokens / t, "compile_s": r["compile_s"], "loss": r["loss"]}
    rows.append((name, flops, t, None))
    if args.compare_hf:
      if not config.is_encoder_decoder:
        print(f"  [hf] skipped: {name} is decoder-only (no HF T5 counterpart)")
      else:
        c = compare_hf(config, batch, r["step"], args)
        print(f"  [hf] T5ForConditionalGeneration {c['hf_info']['versions']} float32, own process, "
              f"{c['hf_info']['threads']} threads: {fair.describe(c)}", flush=True)
        record["compare_hf"] = c
        rows[-1] = (name, flops, c["lm"]["median"], c)
    records.append(record)
  if "measured" in peak_src:
    # A busy machine depresses the first measurement; the best of two is the fairer peak.
    again, _ = metrics.peak_flops([device], sizes=(1024, 2048), repeats=10)
    peak = max(peak, again)
    print(f"\nSummary with the best measured peak {peak / 1e9:.1f} GFLOP/s:")
  else:
    print("\nSummary:")
  for name, flops, t, c in rows:
    hf = "" if c is None else (f"  HF {flops / c['peer']['median'] / peak:6.1%} MFU, HF/lm time "
                               f"{c['ratio']:.2f}x ({c['ratio_min']:.2f}-{c['ratio_max']:.2f}): "
                               f"{c['verdict']}")
    print(f"  {name:20s} {args.batch * (li + lt) / t:9.0f} tok/s  MFU {flops / t / peak:6.1%}{hf}")
  if args.json:
    for rec in records:
      rec["mfu"] = rec["model_flops_per_step"] / rec["step_median_s"] / peak
    results.write_json(args.json, "bench_model", {
        "device": device.device_kind, "backend": jax.default_backend(), "cpus": cpus,
        "host_memory_retained": retained, "peak_flops": peak, "peak_source": peak_src,
        "presets": records}, args)
    print(f"wrote {args.json}")


if __name__ == "__main__":
  main()
