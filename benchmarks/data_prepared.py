"""`python benchmarks/bench_data.py --prepared`: prepared datasets (docs/data.md) measured.

  python benchmarks/bench_data.py --prepared --work_dir=/tmp/lm_bench_data \
      [--small_mb=100] [--large_mb=2000] [--prepare_mb=16] [--workers=2] [--seconds=5] [--json F]

  prepare     a synthetic JSON-lines corpus of --prepare_mb (documents of Zipf-weighted words
              of the embedded corpus, written with NumPy; ~870 bytes and ~220 tokens per
              document) prepared by `python -m lm.data.prepare` with the default 8,000-piece
              tokenizer: documents, tokens and MB per CPU-second of prepare (its processes'
              CPU time, RUSAGE_CHILDREN), and the wall-time speed-up from 1 to --workers
              workers on the same files (a shared machine's load average is printed);
  start-up    prepared datasets holding the documents and tokens of --small_mb and
              --large_mb of such text, written directly in the prepared format (random token
              ids, ~220 per document, in 64 MB-of-text shards; tokenizing 2 GB costs ~10
              CPU-minutes and start-up reads no token): a fresh process each, DataSpec ->
              DataPipeline -> first batch of the training iterator at T5's shapes (inputs
              512, targets 114, span corruption, 64 rows, 8 virtual shards, no prefetch),
              its wall and CPU time and peak resident memory (VmHWM), --repeats processes
              per dataset alternating, the median shown; the raw JSON-lines path of the
              --prepare_mb corpus beside them;
  feed        tokens (non-padding positions of the batches) per CPU-second of the training
              iterator on the --prepare_mb corpus, prepared vs the raw path that tokenizes
              inside (one tokenizer thread, no prefetch, after two warm-up batches), each
              in a fresh process.

Corpora and datasets are kept in --work_dir and reused (the prepare measurements always
start from an empty output).
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


def corpus_files_n(work_dir: str, name: str, megabytes: float, count: int) -> list[str]:
  """The corpus `name` of `megabytes` in `count` files (written once, then reused)."""
  folder = os.path.join(work_dir, name)
  os.makedirs(folder, exist_ok=True)
  pool, paths = None, []
  for i in range(count):
    path = os.path.join(folder, f"part-{i:05d}-of-{count:05d}.jsonl")
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
built, built_cpu = time.time(), time.process_time()
data = pipeline.DataPipeline(spec)
it = data.train_iterator()
batch = next(it)
first, first_cpu = time.time(), time.process_time()
# VmHWM: this process's peak (ru_maxrss would keep the parent's peak across exec).
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
out = {"import_s": imported - start, "first_batch_s": first - built,
       "first_batch_cpu_s": first_cpu - built_cpu, "peak_rss_mb": int(hwm.split()[1]) / 1024}
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


DOC_BYTES, DOC_TOKENS = 870, 220  # the synthetic corpus's text and tokens per document


def write_direct(output: str, text_mb: float, tokenizer: str, seed: int = 0) -> dict:
  """A prepared dataset with the documents and tokens of `text_mb` of text, written directly
  (random ids, no tokenizer) in prepare's format: shards of FILE_MB of text, entries,
  manifest. Returns its manifest (kept: a second call reads it)."""
  from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top
  from lm.data import prepare, prepared, scan  # pylint: disable=g-import-not-at-top
  from lm.data import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  if os.path.exists(os.path.join(output, prepared.MANIFEST)):
    return prepared.read_manifest(output)
  os.makedirs(output, exist_ok=True)
  tok = tokenizer_lib.load_tokenizer(tokenizer)
  count = max(1, int(round(text_mb / FILE_MB)))
  docs_per_shard = int(text_mb * 1e6 / DOC_BYTES / count)
  rng = np.random.default_rng(seed)
  entries, files = [], []
  for i in range(count):
    name = prepared.shard_name(i, count)
    lengths = rng.poisson(DOC_TOKENS, docs_per_shard) + 1
    ids = rng.integers(3, tok.vocab_size - tok.extra_ids, int(lengths.sum())).astype("<u2")
    ends = np.cumsum(lengths)
    writer = array_record_module.ArrayRecordWriter(os.path.join(output, name),
                                                   prepared.WRITER_OPTIONS)
    for start, end in zip((ends - lengths).tolist(), ends.tolist()):
      writer.write(ids[start:end].tobytes())
    writer.close()
    stats = scan.SourceStats(files=1, records=docs_per_shard, documents=docs_per_shard,
                             examined=docs_per_shard, chars=docs_per_shard * DOC_BYTES)
    files.append(f"synthetic-{i:05d}.jsonl")
    entries.append({"file": name, "bytes": os.path.getsize(os.path.join(output, name)),
                    "documents": docs_per_shard, "tokens": int(lengths.sum()),
                    "groups": docs_per_shard, "group_jumps": [],
                    "source": {"path": files[-1], "size": docs_per_shard * DOC_BYTES},
                    "stats": stats.as_dict()})
  with open(os.path.join(output, prepared.TOKENIZER_FILE), "wb") as f:
    f.write(tok.model_proto)
  import hashlib  # pylint: disable=g-import-not-at-top
  plan = prepare._plan(files, [e["source"]["size"] for e in entries], prepare.Options(),  # pylint: disable=protected-access
                       hashlib.sha256(tok.model_proto).hexdigest(), tok.extra_ids,
                       tok.vocab_size)
  from etils import epath  # pylint: disable=g-import-not-at-top
  return prepare._write_manifest(epath.Path(output), plan, entries)  # pylint: disable=protected-access


def _print_prepare(one: dict, many: dict, files: list[str], workers: int) -> None:
  print(f"prepare, 1 worker: {one['docs_per_cpu_s']:,.0f} documents, "
        f"{one['tokens_per_cpu_s']:,.0f} tokens, {one['mb_per_cpu_s']:.2f} MB per core-second "
        f"({one['megabytes']:.0f} MB in {len(files)} files, {one['documents']:,} documents, "
        f"{one['tokens']:,} tokens)", flush=True)
  print(f"prepare, {workers} workers: {one['wall_s']:.1f} s -> {many['wall_s']:.1f} s wall "
        f"({one['wall_s'] / many['wall_s']:.2f}x; load average {os.getloadavg()[0]:.1f})",
        flush=True)


def main(args) -> dict:
  import shutil  # pylint: disable=g-import-not-at-top
  from lm.data import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  work = os.path.abspath(args.work_dir)
  os.makedirs(work, exist_ok=True)
  tok_path = os.path.join(work, "spm8k.model")
  if not os.path.exists(tok_path):
    tokenizer_lib.default_tokenizer(8000).save(tok_path)
  print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; work dir {work}",
        flush=True)
  res = {"conditions": {"load_average_start": os.getloadavg()[0], "cpus": os.cpu_count(),
                        "small_mb": args.small_mb, "large_mb": args.large_mb,
                        "prepare_mb": args.prepare_mb, "workers": args.workers}}

  # prepare: per core, and the speed-up with workers on the same files (always from scratch).
  files = corpus_files_n(work, f"corpus{args.prepare_mb:g}", args.prepare_mb,
                         max(2, args.workers))
  runs = {}
  for w in sorted({1, args.workers}) if "prepare" in args.parts else ():
    out = os.path.join(work, f"prepared-corpus-w{w}")
    shutil.rmtree(out, ignore_errors=True)
    runs[w] = run_prepare(files, tok_path, out, w)
  if not runs:  # --parts without prepare: the corpus prepared once before
    out = os.path.join(work, "prepared-corpus-w1")
    if not os.path.exists(os.path.join(out, "manifest.json")):
      run_prepare(files, tok_path, out, 1)
  else:
    one, many = runs[1], runs[args.workers]
    res["prepare"] = {"one_worker": one, "workers": many,
                      "speedup": one["wall_s"] / many["wall_s"]}
    _print_prepare(one, many, files, args.workers)

  raw_spec = dict(SHAPES, format="jsonl", paths=files, tokenizer=tok_path)
  # start-up: config to first batch, peak RSS, one fresh process each.
  if "startup" in args.parts:
    datasets = {}
    for name, mb in (("small", args.small_mb), ("large", args.large_mb)):
      t = time.time()
      out = os.path.join(work, f"direct{mb:g}")
      m = write_direct(out, mb, tok_path)
      datasets[name] = {"dir": out, "documents": m["documents"], "tokens": m["tokens"],
                        "shards": len(m["shards"]), "text_mb": mb}
      print(f"{name}: {m['documents']:,} documents, {m['tokens']:,} tokens in "
            f"{len(m['shards'])} shards (~{mb:g} MB of text; {time.time() - t:.0f} s)", flush=True)
    res["datasets"] = datasets
    res["startup"] = {}
    rounds = {"small": [], "large": []}
    for _ in range(args.repeats):  # alternating, one fresh process each; the median is shown
      for name in ("small", "large"):
        spec = dict(SHAPES, format="prepared", paths=[datasets[name]["dir"]], prefetch_batches=0)
        rounds[name].append(run_child(spec, "startup"))
    for name, runs_ in rounds.items():
      res["startup"][name] = {k: float(np.median([r[k] for r in runs_])) for k in runs_[0]}
      res["startup"][name]["rounds"] = runs_
    res["startup"]["raw"] = run_child(dict(raw_spec, prefetch_batches=0), "startup")
    for name, r in res["startup"].items():
      print(f"start-up {name:5s}: first batch {r['first_batch_s']:6.2f} s after the spec "
            f"({r['first_batch_cpu_s']:.2f} CPU s; imports {r['import_s']:.1f} s), peak RSS "
            f"{r['peak_rss_mb']:7.0f} MB", flush=True)
    s, l = res["startup"]["small"], res["startup"]["large"]
    res["startup"]["ratio"] = {"time": l["first_batch_s"] / s["first_batch_s"],
                               "cpu": l["first_batch_cpu_s"] / s["first_batch_cpu_s"],
                               "rss": l["peak_rss_mb"] / s["peak_rss_mb"]}
    print(f"large / small: time {res['startup']['ratio']['time']:.2f}x (CPU "
          f"{res['startup']['ratio']['cpu']:.2f}x), peak RSS "
          f"{res['startup']['ratio']['rss']:.2f}x (target: within 1.5x)", flush=True)

  # feed: tokens per CPU-second, prepared vs tokenize-and-feed, on the same documents.
  if "feed" in args.parts:
    specs = {"prepared": dict(SHAPES, format="prepared",
                              paths=[os.path.join(work, "prepared-corpus-w1")], num_threads=1,
                              prefetch_batches=0),
             "raw": dict(raw_spec, num_threads=1, prefetch_batches=0)}
    rounds = {"prepared": [], "raw": []}
    for _ in range(args.repeats):  # alternating, one fresh process each
      for name, spec in specs.items():
        rounds[name].append(run_child(spec, "feed", args.seconds)["tokens_per_cpu_s"])
    feed = {name: {"tokens_per_cpu_s": float(np.median(r)), "rounds": r}
            for name, r in rounds.items()}
    feed["ratio"] = feed["prepared"]["tokens_per_cpu_s"] / feed["raw"]["tokens_per_cpu_s"]
    feed["round_ratios"] = [p / r for p, r in zip(rounds["prepared"], rounds["raw"])]
    res["feed"] = feed
    print(f"feed: prepared {feed['prepared']['tokens_per_cpu_s']:,.0f} vs tokenize-and-feed "
          f"{feed['raw']['tokens_per_cpu_s']:,.0f} tokens per core-second, medians of "
          f"{args.repeats} ({feed['ratio']:.2f}x; rounds "
          f"{', '.join(f'{r:.2f}x' for r in feed['round_ratios'])})")
  res["conditions"]["load_average_end"] = os.getloadavg()[0]
  return res
