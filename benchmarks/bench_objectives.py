"""Objective + conversion throughput on one core: per-example reference vs batched.

  python benchmarks/bench_objectives.py [--seconds 2] [--block 1024] [--json FILE]

Per objective, on full raw segments at inputs/targets 512/512 (568 raw tokens for span
corruption at 512/0.15/3, 511 for the i.i.d. objectives and prefix LM, 511 for full LM,
1004 for the UL2 mixture), converted for ``--architecture`` (encoder_decoder: span
corruption gives T5's 512/114 features):

  reference  lm.data.objectives.make_objective(...)(tokens, rng) + converters.convert, one
             example at a time (what the pipeline runs today);
  batched    lm.data.blocks.BlockObjective over blocks of ``--block`` chunks, returning one
             feature dict per example (what a pipeline would consume);
  dense      BlockObjective.features: the same block as [B, L] arrays (objectives whose
             outputs have one length: span corruption, BERT, MASS, full LM).

Figures are examples per CPU-second of this single-threaded process (``time.process_time``),
i.e. per core, which stays meaningful on a busy machine better than wall time does (wall
figures are in the JSON too). Tokenization and packing are not included (bench_data.py).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import results  # noqa: E402  pylint: disable=g-import-not-at-top
from lm.data import blocks, converters, objectives  # noqa: E402  pylint: disable=g-import-not-at-top

VOCAB_SIZE = 32100
CASES = [  # name, params, num_extra_ids
    ("span_corruption", {}, 100),
    ("iid_replace_spans", {}, 128),  # 0.15 at 511 tokens needs >100 sentinels w.p. ~5e-8
    ("drop_tokens", {}, 100),
    ("bert", {}, 100),
    ("mass", {}, 100),
    ("deshuffle", {}, 100),
    ("prefix_lm", {}, 100),
    ("full_lm", {}, 100),
    ("mixture", {"preset": "ul2"}, 140),
]


def _timed(fn, seconds: float, per_call: int) -> dict[str, float]:
  """Calls fn until ``seconds`` of CPU time have passed (at least twice); rates per call."""
  fn()  # warm-up
  calls, cpu0, wall0 = 0, time.process_time(), time.perf_counter()
  while True:
    fn()
    calls += 1
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    if cpu >= seconds and calls >= 2:
      break
  n = calls * per_call
  return {"examples": n, "cpu_s": cpu, "wall_s": wall, "per_cpu_s": n / cpu, "per_wall_s": n / wall}


def bench(name: str, params: dict, extra: int, architecture: str, seconds: float,
          block: int) -> dict:
  lengths = {"inputs": 512, "targets": 512}
  raw = objectives.raw_length(name, inputs_length=512, targets_length=512, **params)
  mparams = dict(params, inputs_length=512, targets_length=512) if name == "mixture" else params
  fn = objectives.make_objective(name, vocab_size=VOCAB_SIZE, num_extra_ids=extra, **mparams)
  rng = np.random.default_rng(0)
  pool = rng.integers(3, 32000, (block, raw), dtype=np.int32)
  ref_pool = pool[:64]

  def reference():
    for tokens in ref_pool:
      converters.convert(fn(tokens, rng), architecture, lengths=lengths)

  out = {"objective": name, "raw_length": raw,
         "reference": _timed(reference, seconds, len(ref_pool))}
  if objectives.batched_form(name, params) is not None:
    block_fn = blocks.BlockObjective(name, vocab_size=VOCAB_SIZE, num_extra_ids=extra,
                                      architecture=architecture, lengths=lengths,
                                      seed_words=(0, 0), **params)
    chunks = list(pool)
    start = [0]

    def per_example():
      block_fn(np.arange(start[0], start[0] + block), chunks)
      start[0] += block

    out["batched"] = _timed(per_example, seconds, block)
    if name in ("span_corruption", "bert", "mass", "full_lm"):
      out["dense"] = _timed(lambda: block_fn.features(np.arange(block), pool), seconds, block)
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seconds", type=float, default=2.0, help="CPU seconds per measurement")
  parser.add_argument("--block", type=int, default=1024, help="examples per batched block")
  parser.add_argument("--architecture", default="encoder_decoder",
                      choices=converters.ARCHITECTURES)
  parser.add_argument("--objectives", default=",".join(c[0] for c in CASES),
                      help="comma-separated subset")
  parser.add_argument("--json", default=None, metavar="FILE", help="write the results as JSON")
  args = parser.parse_args(argv)
  names = [n for n in args.objectives.split(",") if n]
  known = [c[0] for c in CASES]
  if set(names) - set(known):
    parser.error(f"unknown objective(s) {sorted(set(names) - set(known))}; "
                 f"expected one of {known}")
  if args.block < 1 or args.seconds <= 0:
    parser.error("--block must be >= 1 and --seconds > 0")
  print(f"architecture={args.architecture}, one core (examples per CPU-second), block "
        f"{args.block}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
  print(f"{'objective':<18}{'raw':>5}{'reference':>12}{'batched':>12}{'speed-up':>10}"
        f"{'dense':>12}{'batched tok/s':>15}")
  rows = []
  for name, params, extra in CASES:
    if name not in names:
      continue
    r = bench(name, params, extra, args.architecture, args.seconds, args.block)
    rows.append(r)
    ref = r["reference"]["per_cpu_s"]
    b = r.get("batched", {}).get("per_cpu_s")
    d = r.get("dense", {}).get("per_cpu_s")
    fmt = lambda x: f"{x:12,.0f}" if x else f"{'-':>12}"
    speedup = f"{b / ref:9.1f}x" if b else f"{'-':>10}"
    tokens = f"{b * r['raw_length']:15,.0f}" if b else f"{'-':>15}"
    print(f"{name:<18}{r['raw_length']:>5}{fmt(ref)}{fmt(b)}{speedup}{fmt(d)}{tokens}",
          flush=True)
  if args.json:
    results.write_json(args.json, "bench_objectives", {"architecture": args.architecture,
                                                       "block": args.block, "objectives": rows},
                       args)
    print(f"wrote {args.json}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
