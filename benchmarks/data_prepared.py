"""`python benchmarks/bench_data.py --prepared`: prepared datasets (docs/data.md) measured.

  python benchmarks/bench_data.py --prepared --work_dir=/tmp/lm_bench_data \
      [--small_mb=100] [--large_mb=2000] [--workers=2] [--seconds=5] [--json FILE]

Synthetic JSON-lines corpora (documents of Zipf-weighted words of the embedded corpus, written
with NumPy, not a tokenizer; ~1,000 characters per document, about C4's 2,200 in shape but
shorter) are prepared with `python -m lm.data.prepare` and the default 8,000-piece tokenizer:

  prepare     documents, tokens and MB per CPU-second of prepare (its worker processes'
              CPU time: RUSAGE_CHILDREN), and its speed-up from 1 to --workers workers (wall
              time on the same files; on a shared machine the load average is printed);
  start-up    a fresh process per corpus (small and large): DataSpec -> DataPipeline ->
              first batch of the training iterator at T5's shapes (inputs 512, targets 114,
              span corruption, 64 rows), its wall time and peak resident memory; also the raw
              JSON-lines path of the small corpus for comparison;
  feed        tokens (non-padding positions of the batches) per CPU-second of the training
              iterator, prepared vs the raw path that tokenizes inside (one tokenizer thread,
              no prefetch, after two warm-up batches), each in a fresh process.

The generated corpora and prepared datasets are kept in --work_dir (prepare resumes, so a
second call skips what is done).
"""
from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
import zlib

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE_MB = 64  # the corpora are written as files of this size (one prepare shard each)


def _pool(seed: int = 0):
  """(pool bytes, word starts, word lengths, word probabilities) for synthetic documents."""
  from lm.data import corpus  # pylint: disable=g-import-not-at-top
  text = " ".join(corpus.default_corpus()[:3000])
  words, counts = np.unique(np.array(re.findall(r"[A-Za-z]+|[0-9]+|[^\sA-Za-z0-9]", text)),
                            return_counts=True)
  pieces = [w.encode().replace(b"\\", b"").replace(b'"', b"'") + b" " for w in words]
  pieces += [b'{"text": "', b'"}\n']  # the JSON line's head and tail
  lengths = np.array([len(p) for p in pieces])
  starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
  probs = counts / counts.sum()
  return np.frombuffer(b"".join(pieces), np.uint8), starts, lengths, probs


def write_corpus(path: str, megabytes: float, seed: int, pool=None) -> int:
  """Writes JSON lines of synthetic documents (~180 words each) up to `megabytes`; returns bytes."""
  data, starts, lengths, probs = pool or _pool()
  head, tail = len(probs), len(probs) + 1
  rng = np.random.default_rng(seed)
  total, target = 0, int(megabytes * 1e6)
  with open(path + ".tmp", "wb") as f:
    while total < target:
      n = rng.poisson(180, 2000) + 5
      seq = np.empty(int(n.sum()) + 2 * len(n), np.int64)
      ends = np.cumsum(n + 2)
      first = ends - n - 2
      inner = np.ones(len(seq), bool)
      inner[first] = inner[ends - 1] = False
      seq[first], seq[ends - 1] = head, tail
      seq[inner] = rng.choice(len(probs), int(n.sum()), p=probs)
      ln = lengths[seq]
      index = np.repeat(starts[seq] - (np.cumsum(ln) - ln), ln) + np.arange(int(ln.sum()))
      chunk = data[index].tobytes()
      f.write(chunk)
      total += len(chunk)
  os.replace(path + ".tmp", path)
  return total


def corpus_files(work_dir: str, name: str, megabytes: float) -> list[str]:
  """The corpus `name` of `megabytes` as files of FILE_MB (written once, then reused)."""
  folder = os.path.join(work_dir, name)
  os.makedirs(folder, exist_ok=True)
  count = max(1, int(round(megabytes / FILE_MB)))
  pool = None
  paths = []
  for i in range(count):
    path = os.path.join(folder, f"part-{i:05d}.jsonl")
    if not os.path.exists(path):
      pool = pool or _pool()
      write_corpus(path, megabytes / count, seed=zlib.crc32(f"{name}/{i}".encode()), pool=pool)
    paths.append(path)
  return paths


def _child_cpu() -> float:
  r = resource.getrusage(resource.RUSAGE_CHILDREN)
  return r.ru_utime + r.ru_stime


def run_prepare(inputs: list[str], tokenizer: str, output: str, workers: int) -> dict:
  """Runs `python -m lm.data.prepare` in a subprocess; wall and CPU seconds, the manifest."""
  cpu, start = _child_cpu(), time.time()
  out = subprocess.run(
      ["nice", "-n", "10", sys.executable, "-m", "lm.data.prepare",
       *(f"--input={p}" for p in inputs), f"--tokenizer={tokenizer}", f"--output={output}",
       f"--workers={workers}", "--no_progress"],
      env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True)
  if out.returncode:
    raise RuntimeError(out.stderr[-2000:])
  wall, cpu = time.time() - start, _child_cpu() - cpu
  with open(os.path.join(output, "manifest.json")) as f:
    manifest = json.load(f)
  mb = sum(s["source"]["size"] for s in manifest["shards"]) / 1e6
  return {"wall_s": wall, "cpu_s": cpu, "documents": manifest["documents"],
          "tokens": manifest["tokens"], "megabytes": mb, "workers": workers,
          "docs_per_cpu_s": manifest["documents"] / cpu, "tokens_per_cpu_s":
          manifest["tokens"] / cpu, "mb_per_cpu_s": mb / cpu}


_CHILD = r"""
import json, resource, sys, time
start = time.time()
from lm.data import pipeline
imported = time.time()
spec = pipeline.DataSpec(**json.loads(sys.argv[1]))
mode, seconds = sys.argv[2], float(sys.argv[3])
built = time.time()
data = pipeline.DataPipeline(spec)
it = data.train_iterator()
batch = next(it)
first = time.time()
out = {"import_s": imported - start, "first_batch_s": first - built,
       "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
if mode == "feed":
  next(it)
  cpu, tokens, batches = time.process_time(), 0, 0
  while time.process_time() - cpu < seconds:
    b = next(it)
    tokens += sum(int((v > 0).sum()) for k, v in b.items() if k.endswith("segment_ids"))
    batches += 1
  out.update(tokens_per_cpu_s=tokens / (time.process_time() - cpu), batches=batches)
it.close()
print(json.dumps(out))
"""

SHAPES = dict(objective="span_corruption", inputs_length=512, targets_length=114,
              batch_size=64, num_shards=8, seed=0)


def run_child(spec: dict, mode: str, seconds: float = 0.0) -> dict:
  out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec), mode, str(seconds)],
                       env={**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu"},
                       capture_output=True, text=True)
  if out.returncode:
    raise RuntimeError(out.stderr[-2000:])
  return json.loads(out.stdout.strip().splitlines()[-1])


def main(args) -> dict:
  from lm.data import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  work = os.path.abspath(args.work_dir)
  os.makedirs(work, exist_ok=True)
  tok_path = os.path.join(work, "spm8k.model")
  if not os.path.exists(tok_path):
    tokenizer_lib.default_tokenizer(8000).save(tok_path)
  print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; work dir {work}")
  res = {"conditions": {"load_average": os.getloadavg()[0], "cpus": os.cpu_count(),
                        "small_mb": args.small_mb, "large_mb": args.large_mb}}
  t = time.time()
  small = corpus_files(work, f"small{args.small_mb:g}", args.small_mb)
  large = corpus_files(work, f"large{args.large_mb:g}", args.large_mb)
  print(f"corpora: {len(small)} + {len(large)} files of ~{FILE_MB} MB ({time.time() - t:.0f} s)")

  # prepare: per core, and the speed-up with workers on the same files.
  sub = small[:max(2, args.workers)]
  one = run_prepare(sub, tok_path, os.path.join(work, "w1"), 1)
  many = run_prepare(sub, tok_path, os.path.join(work, f"w{args.workers}"), args.workers)
  res["prepare"] = {"one_worker": one, "workers": many, "speedup": one["wall_s"] / many["wall_s"]}
  print(f"prepare, 1 worker: {one['docs_per_cpu_s']:,.0f} documents, "
        f"{one['tokens_per_cpu_s']:,.0f} tokens, {one['mb_per_cpu_s']:.2f} MB per core-second "
        f"({one['megabytes']:.0f} MB, {one['documents']:,} documents, {one['tokens']:,} tokens)")
  print(f"prepare, {args.workers} workers: {one['wall_s']:.1f} s -> {many['wall_s']:.1f} s wall "
        f"({res['prepare']['speedup']:.2f}x)")
  prepared = {}
  for name, files in (("small", small), ("large", large)):
    out = os.path.join(work, f"prepared-{name}{len(files)}")
    prepared[name] = run_prepare(files, tok_path, out, args.workers)
    prepared[name]["dir"] = out
    p = prepared[name]
    print(f"prepared {name}: {p['megabytes']:.0f} MB of text, {p['documents']:,} documents, "
          f"{p['tokens']:,} tokens ({p['wall_s']:.0f} s wall, {p['cpu_s']:.0f} CPU s)")
  res["prepared"] = prepared

  # start-up: config to first batch, peak RSS, one fresh process each.
  res["startup"] = {}
  for name in ("small", "large"):
    spec = dict(SHAPES, format="prepared", paths=[prepared[name]["dir"]])
    res["startup"][name] = run_child(spec, "startup")
  raw_spec = dict(SHAPES, format="jsonl", paths=small, tokenizer=tok_path)
  res["startup"]["small_raw"] = run_child(raw_spec, "startup")
  for name, r in res["startup"].items():
    print(f"start-up {name:9s}: first batch {r['first_batch_s']:6.2f} s after the spec "
          f"(imports {r['import_s']:.1f} s), peak RSS {r['peak_rss_mb']:7.0f} MB")
  s, l = res["startup"]["small"], res["startup"]["large"]
  res["startup"]["ratio"] = {"time": l["first_batch_s"] / s["first_batch_s"],
                             "rss": l["peak_rss_mb"] / s["peak_rss_mb"]}
  print(f"large / small: time {res['startup']['ratio']['time']:.2f}x, peak RSS "
        f"{res['startup']['ratio']['rss']:.2f}x (target: within 1.5x)")

  # feed: tokens per CPU-second, prepared vs tokenize-and-feed.
  feed = {"prepared": run_child(dict(SHAPES, format="prepared", paths=[prepared["small"]["dir"]],
                                     num_threads=1, prefetch_batches=0), "feed", args.seconds),
          "raw": run_child(dict(raw_spec, num_threads=1, prefetch_batches=0), "feed",
                           args.seconds)}
  feed["ratio"] = feed["prepared"]["tokens_per_cpu_s"] / feed["raw"]["tokens_per_cpu_s"]
  res["feed"] = feed
  print(f"feed: prepared {feed['prepared']['tokens_per_cpu_s']:,.0f} vs tokenize-and-feed "
        f"{feed['raw']['tokens_per_cpu_s']:,.0f} tokens per core-second ({feed['ratio']:.2f}x)")
  return res
