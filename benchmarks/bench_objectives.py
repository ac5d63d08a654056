"""Throughput of each objective (+ feature conversion) on one CPU core.

Usage: python benchmarks/bench_objectives.py [--seconds 1.0] [--architecture encoder_decoder]

Each objective runs on full raw segments for inputs/targets lengths 512/512 (568 raw tokens for
span corruption at 512/0.15/3, 511 for the i.i.d. objectives and prefix LM, 1004 for the UL2
mixture), followed by `convert`. Prints examples/s and raw tokens/s (raw tokens consumed from
the corpus). Single process, so the figures are per core. Tokenization and packing are measured
by the pipeline benchmark, not here.
"""
import argparse
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout
from lm.data import converters, objectives

VOCAB_SIZE = 32100


def bench(name, params, architecture, seconds, num_extra_ids=100):
  lengths = {"inputs": 512, "targets": 512}
  raw = objectives.raw_length(name, inputs_length=512, targets_length=512, **params)
  if name == "mixture":
    params = dict(params, inputs_length=512, targets_length=512)
  fn = objectives.make_objective(name, vocab_size=VOCAB_SIZE, num_extra_ids=num_extra_ids,
                                 **params)
  rng = np.random.default_rng(0)
  pool = rng.integers(3, 32000, (64, raw), dtype=np.int32)
  n, start = 0, time.perf_counter()
  while True:
    for tokens in pool:
      converters.convert(fn(tokens, rng), architecture, lengths=lengths)
    n += len(pool)
    elapsed = time.perf_counter() - start
    if elapsed >= seconds:
      break
  return raw, n / elapsed, n * raw / elapsed


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seconds", type=float, default=1.0)
  parser.add_argument("--architecture", default="encoder_decoder",
                      choices=converters.ARCHITECTURES)
  args = parser.parse_args()
  cases = [
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
  print(f"architecture={args.architecture}  (one core, objective + convert)")
  print(f"{'objective':<20}{'raw len':>8}{'examples/s':>14}{'tokens/s':>14}")
  for name, params, extra in cases:
    raw, ex_s, tok_s = bench(name, params, args.architecture, args.seconds, extra)
    print(f"{name:<20}{raw:>8}{ex_s:>14,.0f}{tok_s:>14,.0f}")


if __name__ == "__main__":
  main()
