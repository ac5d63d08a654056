"""Data throughput per core: tokenize + objective + convert + pack at T5 shapes.

  python benchmarks/bench_data.py [--quick] [--vocab_size=8000]

For each objective, runs the per-example work of the pipeline in ONE thread on the
embedded default corpus (SentencePiece encode, concatenate-and-split into
raw_length chunks, objective with a per-example generator, converters.convert,
grain's FirstFitPackIterDataset) and prints examples/s and tokens/s (tokens =
non-padding positions of the packed rows, encoder + decoder). Inputs 512, targets
114 (decoder-only objectives use one 626-long decoder row). Compare tokens/s with
what one training step consumes: the target is >= 10x a small preset's step.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # pylint: disable=g-import-not-at-top

from lm.data import corpus, objectives, packing, pipeline  # pylint: disable=g-import-not-at-top

CASES = [  # (objective, architecture, params)
    ("span_corruption", "encoder_decoder", {}),
    ("iid_replace_spans", "encoder_decoder", {}),
    ("drop_tokens", "encoder_decoder", {}),
    ("bert", "encoder_decoder", {}),
    ("mass", "encoder_decoder", {}),
    ("deshuffle", "encoder_decoder", {}),
    ("prefix_lm", "prefix_lm", {}),
    ("full_lm", "causal", {}),
    ("mixture", "encoder_decoder", {"preset": "ul2"}),
]


def bench(objective, arch, params, tok, docs, seconds, inputs_length=512, targets_length=114):
  """Returns (examples/s, tokens/s, tokenize share) for one objective in one thread."""
  import grain  # pylint: disable=g-import-not-at-top
  from grain import experimental as gx  # pylint: disable=g-import-not-at-top
  targets = 626 if objective == "full_lm" else (
      inputs_length if objective in ("bert", "mass", "deshuffle", "prefix_lm") else targets_length)
  spec = pipeline.DataSpec(objective=objective, objective_params=params, architecture=arch,
                           inputs_length=inputs_length, targets_length=targets,
                           batch_size=16)
  raw = objectives.raw_length(objective, inputs_length=inputs_length, targets_length=targets,
                              **params)
  lengths = packing.feature_lengths(arch, inputs_length, targets)
  fn = pipeline._ObjectiveAndConvert(spec, tok.vocab_size, (0, 0))  # pylint: disable=protected-access
  keys = list(fn(0, {"tokens": np.arange(3, 40, dtype=np.int32)}))
  tokenize = pipeline._tokenize_fn(tok, objective == "full_lm")  # pylint: disable=protected-access
  t_tok = [0.0]

  def timed_tokenize(doc):
    t = time.perf_counter()
    out = tokenize(doc)
    t_tok[0] += time.perf_counter() - t
    return out

  ds = grain.MapDataset.source(docs).repeat(None).map(timed_tokenize)
  it = ds.to_iter_dataset(grain.ReadOptions(num_threads=0))
  it = gx.ConcatThenSplitIterDataset(it, length_struct={"tokens": raw}).map_with_index(fn)
  it = gx.FirstFitPackIterDataset(
      it, length_struct={k: lengths[packing.stack_of(k)] for k in keys},
      num_packing_bins=16, shuffle_bins=False).map(packing.rename_packed)
  it = iter(it)
  for _ in range(20):  # Warm up.
    next(it)
  t_tok[0] = 0.0
  rows = tokens = 0
  start = time.perf_counter()
  while time.perf_counter() - start < seconds:
    row = next(it)
    rows += 1
    tokens += sum(int(np.count_nonzero(row[f"{s}_segment_ids"]))
                  for s in packing.STACKS if f"{s}_segment_ids" in row)
  elapsed = time.perf_counter() - start
  return rows / elapsed, tokens / elapsed, t_tok[0] / elapsed


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true", help="0.5 s per objective")
  parser.add_argument("--seconds", type=float, default=3.0)
  parser.add_argument("--vocab_size", type=int, default=8000)
  args = parser.parse_args(argv)
  seconds = 0.5 if args.quick else args.seconds
  tok = pipeline.default_tokenizer(args.vocab_size)
  docs = corpus.default_corpus()
  print(f"tokenizer {tok}; corpus {len(docs)} documents; one thread; {seconds:.1f} s each")
  print(f"{'objective':18s} {'architecture':16s} {'rows/s':>9s} {'tokens/s':>11s} "
        f"{'tokenize share':>15s}")
  for objective, arch, params in CASES:
    try:
      rows, toks, tok_share = bench(objective, arch, params, tok, docs, seconds)
    except Exception as e:  # pylint: disable=broad-except
      print(f"{objective:18s} {arch:16s} failed: {type(e).__name__}: {e}")
      continue
    print(f"{objective:18s} {arch:16s} {rows:9.0f} {toks:11.0f} {tok_share:15.0%}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
