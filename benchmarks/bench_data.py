"""Input-pipeline throughput per core, against what a training step can consume.

  python benchmarks/bench_data.py [--quick] [--objectives=span_corruption,bert]

Runs the real pipeline (lm.data.pipeline.DataPipeline: embedded corpus -> shuffle ->
SentencePiece -> concatenate/split -> objective -> convert -> grain first-fit packing ->
batch) with ONE tokenizer thread and no prefetch, at T5's shapes (inputs 512; targets as
the objective needs, 114 for span corruption; decoder-only rows of 512 + targets), and
prints rows/s and tokens/s (non-padding positions, encoder + decoder).

The last column compares with the most a training step of the T5.1.1 small preset could
consume on this machine: tokens/s at 100 % MFU = measured matmul peak / training FLOPs
per token (lm.model.accounting). The target is a ratio of at least 10: the pipeline must
never be what the step waits on.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # pylint: disable=g-import-not-at-top

from lm import metrics  # pylint: disable=g-import-not-at-top
from lm.data import objectives, pipeline  # pylint: disable=g-import-not-at-top
from lm.model import accounting, presets  # pylint: disable=g-import-not-at-top

CASES = {  # objective -> (architecture, params)
    "span_corruption": ("encoder_decoder", {}),
    "iid_replace_spans": ("encoder_decoder", {}),
    "drop_tokens": ("encoder_decoder", {}),
    "bert": ("encoder_decoder", {}),
    "mass": ("encoder_decoder", {}),
    "deshuffle": ("encoder_decoder", {}),
    "prefix_lm": ("prefix_lm", {}),
    "full_lm": ("causal", {}),
    "mixture": ("encoder_decoder", {"preset": "ul2"}),
}


def make_spec(objective: str, inputs_length: int, vocab_size: int) -> pipeline.DataSpec:
  arch, params = CASES[objective]
  if objective == "full_lm":
    targets = inputs_length
  else:
    targets = objectives.required_targets_length(objective, inputs_length=inputs_length,
                                                 **params)
  extra = max(100, objectives.required_extra_ids(objective, inputs_length=inputs_length,
                                                 targets_length=targets, **params))
  return pipeline.DataSpec(objective=objective, objective_params=params, architecture=arch,
                           inputs_length=inputs_length, targets_length=int(targets),
                           batch_size=64, default_vocab_size=vocab_size, extra_ids=extra,
                           num_threads=1, prefetch_batches=0)


def bench(spec: pipeline.DataSpec, seconds: float) -> tuple[float, float, float]:
  """(rows/s, tokens/s, packing efficiency) of the train iterator in one thread."""
  it = pipeline.DataPipeline(spec).train_iterator()
  try:
    next(it)  # warm up (builds the sub-pipelines)
    rows = tokens = batches = 0
    eff = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or batches < 2:
      batch = next(it)
      batches += 1
      rows += batch["decoder_target_tokens"].shape[0]
      tokens += sum(int(np.count_nonzero(v)) for k, v in batch.items()
                    if k.endswith("_segment_ids"))
      eff.append(it.packing_efficiency)
    elapsed = time.perf_counter() - start
  finally:
    it.close()
  return rows / elapsed, tokens / elapsed, float(np.mean(eff))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true", help="1 s per objective")
  parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per objective")
  parser.add_argument("--inputs_length", type=int, default=512)
  parser.add_argument("--vocab_size", type=int, default=8000, help="tokenizer pieces")
  parser.add_argument("--objectives", default=",".join(CASES), help="comma-separated")
  args = parser.parse_args(argv)
  seconds = 1.0 if args.quick else args.seconds
  names = [n for n in args.objectives.split(",") if n]
  unknown = sorted(set(names) - set(CASES))
  if unknown:
    parser.error(f"unknown objectives {unknown}; choose from {sorted(CASES)}")

  peak = metrics.measure_matmul_flops()
  small = presets.make_config("t5_1_1_small")
  step_tokens_s = peak / accounting.flops_per_token(small, args.inputs_length, 114)
  print(f"measured matmul peak {peak / 1e9:.1f} GFLOP/s -> a t5_1_1_small train step consumes "
        f"at most {step_tokens_s:,.0f} tokens/s (100% MFU, 512/114)")
  print(f"{'objective':18s} {'architecture':16s} {'rows/s':>8s} {'tokens/s':>10s} "
        f"{'packing':>8s} {'x step':>8s}")
  for name in names:
    spec = make_spec(name, args.inputs_length, args.vocab_size)
    rows, toks, eff = bench(spec, seconds)
    print(f"{name:18s} {spec.architecture:16s} {rows:8.0f} {toks:10,.0f} {eff:8.1%} "
          f"{toks / step_tokens_s:7.0f}x")
  return 0


if __name__ == "__main__":
  sys.exit(main())
