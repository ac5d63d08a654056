"""Input-pipeline throughput per core, and how many host cores it takes to feed one chip.

  python benchmarks/bench_data.py [--quick | --seconds 3] [--objectives=span_corruption,bert]
      [--doc_tokens 480] [--json FILE]
  python benchmarks/bench_data.py --prepared --work_dir=DIR [--small_mb=100 --large_mb=2000]
      [--prepare_mb=16] [--workers=2]
      # prepared datasets: prepare per core and with workers, start-up time and memory
      # against the corpus size, feed rate vs tokenize-and-feed (benchmarks/data_prepared.py)

Both paths start from TOKENIZED documents (the embedded corpus, tokenized once up front
with the default SentencePiece model; tokenization is not timed) and end with packed
global batches [batch_size, L] at T5's shapes (inputs 512; targets as the objective needs,
114 for span corruption; decoder-only rows of 512 + targets):

  per-example  the stages of lm.data.pipeline today, one example at a time: grain
               MapDataset (shuffled, repeated) -> ConcatThenSplitIterDataset (raw chunks)
               -> objective (a Philox generator per example) + converters.convert ->
               FirstFitPackIterDataset -> rename -> batch;
  grain-block  the same grain source (shuffled, repeated) feeding
               lm.data.blocks.BlockExamplesIterDataset with pack_lengths (documents read in
               bulk, cut into chunks, objective + convert + first-fit packing ``--block``
               chunks at a time; checkpointable) -> batch: what the pipeline gives once
               wired (docs/speed.md);
  numpy-block  no grain at all: documents in a NumPy-permuted order ->
               lm.data.blocks.split_documents -> BlockObjective -> pack_dense (objectives
               whose outputs have one length) or packing.pack_examples (the others) ->
               batches: the ceiling when per-document and per-example Python overheads
               are gone (grain's source costs ~30 us per document read).

Tokens are the non-padding positions of the batches (encoder + decoder); "per core" is per
CPU-second of this single-threaded process (``time.process_time``), which a busy machine
disturbs less than wall time.

Cores per chip: for each objective, each chip of lm.metrics.CHIP_SPECS and each model
(T5.1.1 small and base), a chip at 50 % MFU consumes 0.5 * peak / (training FLOPs of one
row, lm.model.accounting.training_flops at the objective's row shape) rows per second; the
cores it takes are that divided by the pipeline's rows per core-second. Decoder-only
objectives (prefix_lm, full_lm rows) use a decoder-only model with the T5.1.1 model's layer
sizes and as many layers as its encoder and decoder together (about the same parameters).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grain  # noqa: E402  pylint: disable=g-import-not-at-top
import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top
from grain import experimental as grain_experimental  # noqa: E402  pylint: disable=g-import-not-at-top

import results  # noqa: E402  pylint: disable=g-import-not-at-top
from lm import metrics  # noqa: E402  pylint: disable=g-import-not-at-top
from lm.data import blocks, converters, corpus, features, objectives, packing  # noqa: E402  pylint: disable=g-import-not-at-top
from lm.data import tokenizer as tokenizer_lib  # noqa: E402  pylint: disable=g-import-not-at-top
from lm.model import accounting, presets  # noqa: E402  pylint: disable=g-import-not-at-top

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
MODELS = {"t5_1_1_small": ("t5_1_1", "small"), "t5_1_1_base": ("t5_1_1", "base")}
MFU = 0.5


def shapes(objective: str, inputs_length: int) -> dict:
  """Lengths, raw length, extra ids and params of an objective at inputs_length."""
  arch, params = CASES[objective]
  if objective == "full_lm":
    targets = inputs_length
  else:
    targets = objectives.required_targets_length(objective, inputs_length=inputs_length,
                                                 **params)
  extra = max(100, objectives.required_extra_ids(objective, inputs_length=inputs_length,
                                                 targets_length=targets, **params))
  oparams = dict(params)
  if objective == "mixture":
    oparams.update(inputs_length=inputs_length, targets_length=targets)
  return {"architecture": arch, "params": params, "objective_params": oparams,
          "lengths": {"inputs": inputs_length, "targets": int(targets)},
          "rows": packing.feature_lengths(arch, inputs_length, int(targets)),
          "raw": objectives.raw_length(objective, inputs_length=inputs_length,
                                       targets_length=targets, **params),
          "extra_ids": extra}


def per_example_batches(objective: str, s: dict, docs: list[np.ndarray], vocab_size: int,
                        batch_size: int):
  """Iterator of global batches through the per-example stages (module docstring)."""
  fn = objectives.make_objective(objective, vocab_size=vocab_size, num_extra_ids=s["extra_ids"],
                                 **s["objective_params"])
  arch, lengths = s["architecture"], s["lengths"]

  def objective_and_convert(index, chunk):
    tokens = chunk["tokens"]
    if "tokens_segment_ids" in chunk:
      tokens = tokens[:np.count_nonzero(chunk["tokens_segment_ids"])]
    rng = np.random.Generator(np.random.Philox(key=[0, index]))
    return converters.convert(fn(tokens, rng), arch, lengths=lengths)

  ds = grain.MapDataset.source(docs).shuffle(seed=1).repeat(None).map(lambda t: {"tokens": t})
  it = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
  it = it.filter(lambda x: x["tokens"].size > 0)
  it = grain_experimental.ConcatThenSplitIterDataset(it, length_struct={"tokens": s["raw"]})
  examples = it.map_with_index(objective_and_convert)
  keys = features.feature_keys(arch)
  packed = grain_experimental.FirstFitPackIterDataset(
      examples, length_struct={k: s["rows"][packing.stack_of(k)] for k in keys},
      num_packing_bins=max(batch_size, 16), shuffle_bins=False)
  return iter(packed.map(packing.rename_packed).batch(batch_size, drop_remainder=True))


def grain_block_batches(objective: str, s: dict, docs: list[np.ndarray], vocab_size: int,
                        batch_size: int, block: int):
  """Iterator of global batches through the grain-block stages (module docstring)."""
  fn = blocks.BlockObjective(objective, vocab_size=vocab_size, num_extra_ids=s["extra_ids"],
                              architecture=s["architecture"], lengths=s["lengths"],
                              seed_words=(0,), **s["params"])
  ds = grain.MapDataset.source(docs).shuffle(seed=1).repeat(None).map(lambda t: {"tokens": t})
  rows = blocks.BlockExamplesIterDataset(ds, s["raw"], fn, block_size=block,
                                          pack_lengths=s["rows"])
  return iter(rows.batch(batch_size, drop_remainder=True))


def batched_batches(objective: str, s: dict, docs: list[np.ndarray], vocab_size: int,
                    batch_size: int, block: int):
  """Iterator of global batches through the batched stages (module docstring)."""
  fn = blocks.BlockObjective(objective, vocab_size=vocab_size, num_extra_ids=s["extra_ids"],
                              architecture=s["architecture"], lengths=s["lengths"],
                              seed_words=(0,), **s["params"])
  dense = objective in ("span_corruption", "bert", "mass", "full_lm")
  order = np.random.default_rng(1).permutation(len(docs))
  need = block * s["raw"]
  carry, cursor, chunk_index = None, 0, 0
  pending: list[dict[str, np.ndarray]] = []
  have = 0
  while True:
    take, tokens = [], 0 if carry is None else carry.size
    while tokens < need:
      d = docs[order[cursor % len(docs)]]
      cursor += 1
      take.append(d)
      tokens += d.size
    chunks, carry = blocks.split_documents(take, s["raw"], carry)
    idx = np.arange(chunk_index, chunk_index + len(chunks))
    chunk_index += len(chunks)
    if dense:
      rows = blocks.pack_dense(fn.features(idx, chunks), s["rows"])
    else:
      packed = packing.pack_examples(fn(idx, list(chunks)), s["rows"])
      rows = {k: np.stack([r[k] for r in packed]) for k in packed[0]}
    pending.append(rows)
    have += len(next(iter(rows.values())))
    while have >= batch_size:
      allrows = {k: np.concatenate([p[k] for p in pending]) for k in pending[0]}
      yield {k: v[:batch_size] for k, v in allrows.items()}
      pending = [{k: v[batch_size:] for k, v in allrows.items()}]
      have -= batch_size


def measure(batches, seconds: float) -> dict[str, float]:
  """Rows, non-padding tokens and packing over ``seconds`` of CPU time (>= 2 batches)."""
  next(batches)  # warm-up
  rows = tokens = positions = n = 0
  cpu0, wall0 = time.process_time(), time.perf_counter()
  while True:
    batch = next(batches)
    n += 1
    rows += batch["decoder_segment_ids"].shape[0]
    for k, v in batch.items():
      if k.endswith("_segment_ids"):
        tokens += int(np.count_nonzero(v))
        positions += v.size
    cpu = time.process_time() - cpu0
    if cpu >= seconds and n >= 2:
      break
  wall = time.perf_counter() - wall0
  return {"batches": n, "rows": rows, "tokens": tokens, "cpu_s": cpu, "wall_s": wall,
          "rows_per_cpu_s": rows / cpu, "tokens_per_cpu_s": tokens / cpu,
          "packing_efficiency": tokens / positions}


def model_for(preset: str, architecture: str):
  """MODELS[preset]'s size as `architecture`; decoder-only with both stacks' layers (same FLOPs)."""
  family, size = MODELS[preset]
  config = presets.make_config(family, size, "encoder_decoder")
  if architecture == "encoder_decoder":
    return config
  return presets.make_config(family, size, architecture,
                             num_layers=config.num_encoder_layers + config.num_decoder_layers)


def _chip_peaks() -> dict[str, float]:
  """{chip short name: dense bf16 peak FLOP/s} from lm.metrics.CHIP_SPECS (one per chip)."""
  return {spec.name: spec.peak_flops_bf16 for _, spec in metrics.CHIP_SPECS}


def cores_per_chip(s: dict, rows_per_core_s: float) -> dict[str, dict[str, float]]:
  """{model: {chip: host cores to feed one chip at 50 % MFU}} for one objective's shapes."""
  li, lt = s["lengths"]["inputs"], s["lengths"]["targets"]
  out = {}
  for preset in MODELS:
    flops_row = accounting.training_flops(model_for(preset, s["architecture"]), li, lt, 1)
    out[preset] = {chip: MFU * peak / flops_row / rows_per_core_s
                   for chip, peak in _chip_peaks().items()}
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--seconds", type=float, default=3.0, help="CPU seconds per measurement")
  parser.add_argument("--quick", action="store_true", help="0.5 s per measurement")
  parser.add_argument("--inputs_length", type=int, default=512)
  parser.add_argument("--batch_size", type=int, default=64, help="rows per global batch")
  parser.add_argument("--block", type=int, default=256, help="chunks per batched block")
  parser.add_argument("--vocab_size", type=int, default=8000, help="tokenizer pieces")
  parser.add_argument("--objectives", default=",".join(CASES), help="comma-separated")
  parser.add_argument("--doc_tokens", type=int, default=0,
                      help="join consecutive corpus documents into documents of at least this "
                      "many tokens (e.g. 480, about C4's mean); 0 = the corpus as it is "
                      "(~57 tokens per document, so grain's per-document cost weighs 8x more)")
  parser.add_argument("--skip_per_example", action="store_true",
                      help="measure only the batched path")
  parser.add_argument("--json", default=None, metavar="FILE", help="write the results as JSON")
  prep = parser.add_argument_group("--prepared (benchmarks/data_prepared.py)")
  prep.add_argument("--prepared", action="store_true", help="measure prepared datasets instead")
  prep.add_argument("--work_dir", default="/tmp/lm_bench_data",
                    help="generated corpora and prepared datasets (kept, reused)")
  prep.add_argument("--small_mb", type=float, default=100.0)
  prep.add_argument("--large_mb", type=float, default=2000.0)
  prep.add_argument("--prepare_mb", type=float, default=16.0,
                    help="corpus prepare's throughput is measured on")
  prep.add_argument("--workers", type=int, default=2, help="prepare's workers")
  prep.add_argument("--repeats", type=int, default=3,
                    help="start-up processes per dataset (alternating; the median is shown)")
  prep.add_argument("--parts", default="prepare,startup,feed",
                    help="which measurements (comma-separated)")
  args = parser.parse_args(argv)
  if args.prepared:
    import data_prepared  # pylint: disable=g-import-not-at-top
    out = data_prepared.main(args)
    if args.json:
      results.write_json(args.json, "bench_data_prepared", out, args)
      print(f"wrote {args.json}")
    return 0
  if args.quick:
    args.seconds = 0.5
  names = [n for n in args.objectives.split(",") if n]
  unknown = sorted(set(names) - set(CASES))
  if unknown:
    parser.error(f"unknown objective(s) {unknown}; expected one of {sorted(CASES)}")
  if args.seconds <= 0 or args.batch_size < 1 or args.block < 1:
    parser.error("--seconds must be > 0, --batch_size and --block >= 1")

  tok = tokenizer_lib.default_tokenizer(args.vocab_size)
  docs = [d for d in (tok.encode(t).astype(np.int32) for t in corpus.default_corpus()) if d.size]
  vocab = tok.vocab_size
  if args.doc_tokens > 0:
    joined, current = [], []
    for d in docs:
      current.append(d)
      if sum(x.size for x in current) >= args.doc_tokens:
        joined.append(np.concatenate(current))
        current = []
    docs = joined + ([np.concatenate(current)] if current else [])
  print(f"{len(docs)} tokenized documents ({sum(d.size for d in docs):,} tokens), vocab {vocab}; "
        f"one core (per CPU-second); load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs")
  print("tokens per core-second (speed-up over per-example):")
  print(f"{'objective':18s} {'arch':16s} {'per-example':>12s} {'grain-block':>19s} "
        f"{'numpy-block':>19s} {'rows/s':>8s} {'packing':>8s}")
  rows_out = []
  for name in names:
    s = shapes(name, args.inputs_length)
    rec = {"objective": name, "architecture": s["architecture"], "lengths": s["lengths"],
           "raw_length": s["raw"]}
    if not args.skip_per_example:
      rec["per_example"] = measure(per_example_batches(name, s, docs, vocab, args.batch_size),
                                   args.seconds)
    if objectives.OBJECTIVES[name].batched is not None:
      rec["grain_block"] = measure(grain_block_batches(name, s, docs, vocab, args.batch_size,
                                                       args.block), args.seconds)
      rec["numpy_block"] = measure(batched_batches(name, s, docs, vocab, args.batch_size,
                                                   args.block), args.seconds)
    path = next((p for p in ("grain_block", "per_example") if p in rec), None)
    best = rec.get(path) if path else None
    if best:
      rec["cores_per_chip"] = cores_per_chip(s, best["rows_per_cpu_s"])
      rec["cores_per_chip_path"] = path
    pe = rec.get("per_example")

    def fmt(m, ratio=True):
      if not m:
        return "-"
      text = f"{m['tokens_per_cpu_s']:,.0f}"
      return f"{text} ({m['tokens_per_cpu_s'] / pe['tokens_per_cpu_s']:.1f}x)" if ratio and pe else text
    print(f"{name:18s} {s['architecture']:16s} {fmt(pe, False):>12s} "
          f"{fmt(rec.get('grain_block')):>19s} {fmt(rec.get('numpy_block')):>19s} "
          f"{best['rows_per_cpu_s'] if best else 0:8.0f} "
          f"{best['packing_efficiency'] if best else 0:8.1%}", flush=True)
    rows_out.append(rec)

  chips = list(_chip_peaks())
  print(f"\nHost cores to feed ONE chip at {MFU:.0%} MFU (grain-block path where it exists, else "
        f"per-example; rows/s above are that path's; bf16 dense peaks of lm/metrics.py):")
  for preset in MODELS:
    print(f"  {preset}")
    print(f"    {'objective':18s}" + "".join(f"{c:>16s}" for c in chips))
    for rec in rows_out:
      if "cores_per_chip" in rec:
        cells = "".join(f"{rec['cores_per_chip'][preset][c]:16.2f}" for c in chips)
        print(f"    {rec['objective']:18s}{cells}")
  if args.json:
    results.write_json(args.json, "bench_data", {"mfu": MFU, "objectives": rows_out,
                                                 "chips": _chip_peaks()}, args)
    print(f"wrote {args.json}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
