"""`python -m lm.data.prepare`: tokenize a corpus once into a prepared dataset (prepared.py).

    python -m lm.data.prepare --input='gs://bucket/c4/en/c4-train.*.json.gz' \\
        --tokenizer=gs://bucket/t5/sentencepiece.model --output=gs://bucket/c4-t5 --workers=16

One shard per input file, written by one worker process: the file is read (through
`etils.epath`, decompressed from .gz / .zst to a local temporary file) by the raw source
of its format (`sources.make_source`, so the quality rules and counts are the raw path's),
its documents are tokenized and written as one ArrayRecord record each. A shard is
written under a temporary name and moved into place whole, then its entry (`.json`) is
written; a shard with an entry is never rewritten, so a killed run started again converts
the rest and the shards are byte for byte those of an uninterrupted run. The manifest is
written when every shard has its entry. On a pod, host p of P converts the files
p::P (`--process_index/--process_count`); the host that finds every shard done writes it.

What does not live here: the format and its reader (`prepared.py`).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import glob
import json
import logging
import multiprocessing
import os
import queue as queue_lib
import sys
import tempfile
import time
import types
from collections.abc import Sequence
from typing import Any

import numpy as np
from etils import epath

from lm import cli
from lm import workdir as workdir_lib
from lm.data import prepared, remote, scan, sources
from lm.data import tokenizer as tokenizer_lib

INPUT_FORMATS = ("auto", "jsonl", "parquet", "text", "paragraphs", "hf")
_ENCODE_BLOCK = 256  # documents per encode_batch call and progress report


@dataclasses.dataclass(frozen=True)
class Options:
  """How documents are read (recorded in the plan and the manifest)."""
  format: str = "auto"
  text_field: str = "text"
  on_decode_error: str = "replace"
  max_document_chars: int = scan.DEFAULT_MAX_DOCUMENT_CHARS
  max_bad_fraction: float = 0.01


def input_format(path: str, requested: str) -> str:
  """The format of one input: `requested`, or guessed from the name (after .gz / .zst)."""
  if requested != "auto":
    return requested
  if remote.is_dir(path):
    return "hf"
  return sources._guess_format(remote.strip_compression(path))  # pylint: disable=protected-access


# Set in each worker process by _init_worker.
_WORKER: dict[str, Any] = {}


def _init_worker(progress_queue, model_proto: bytes, extra_ids: int) -> None:
  _WORKER["queue"] = progress_queue
  _WORKER["tokenizer"] = tokenizer_lib.Tokenizer(model_proto, extra_ids=extra_ids,
                                                 num_threads=1)


def _report(docs: int, tokens: int, nbytes: int) -> None:
  q = _WORKER.get("queue")
  if q is not None:
    q.put((docs, tokens, nbytes))


def convert_file(index: int, count: int, path: str, size: int, output: str,
                 options: Options, dtype: str) -> dict[str, Any]:
  """Converts input file `index` of `count` into its shard and entry; returns the entry.

  Runs in a worker (`_init_worker` set the tokenizer). The shard goes to a temporary file,
  is moved (or uploaded) into place whole, and then its entry is written.

  Raises:
    sources.DataQualityError: the file's share of bad records is above max_bad_fraction.
  """
  tok = _WORKER["tokenizer"]
  out_dir = prepared.as_path(output)
  name = prepared.shard_name(index, count)
  fmt = input_format(path, options.format)
  with tempfile.TemporaryDirectory(prefix="lm-prepare-") as tmpdir:
    local = remote.localize(path, tmpdir)
    try:
      source = sources.make_source(fmt, [local], text_field=options.text_field,
                                   on_decode_error=options.on_decode_error,
                                   max_document_chars=options.max_document_chars)
      stats, num_groups, group_ids = source.stats, source.num_groups, source.group_ids
    except scan.EmptySourceError as e:  # an empty file: an empty shard
      source, stats, num_groups, group_ids = None, e.stats, 0, np.zeros(0, np.int64)
    sources.check_quality(types.SimpleNamespace(file_stats={path: stats}),
                          options.max_bad_fraction)
    n = 0 if source is None else len(source)
    local_dir = None if workdir_lib.is_remote(output) else os.fspath(out_dir)
    if local_dir is not None:  # a killed run's half-written shard (only this host writes it)
      for stale in glob.glob(os.path.join(glob.escape(local_dir), f".{name}.tmp-*")):
        os.remove(stale)
    tmp_shard = os.path.join(local_dir or tmpdir, f".{name}.tmp-{os.getpid()}")
    from array_record.python import array_record_module  # pylint: disable=g-import-not-at-top
    writer = array_record_module.ArrayRecordWriter(tmp_shard, prepared.WRITER_OPTIONS)
    tokens = 0
    try:
      for start in range(0, n, _ENCODE_BLOCK):
        stop = min(n, start + _ENCODE_BLOCK)
        ids = tok.encode_batch([source[d] for d in range(start, stop)], num_threads=1)
        block_tokens = 0
        for x in ids:
          writer.write(np.asarray(x).astype(dtype).tobytes())
          block_tokens += len(x)
        tokens += block_tokens
        _report(stop - start, block_tokens, (size * stop) // n - (size * start) // n)
    finally:
      writer.close()
    if n == 0:
      _report(0, 0, size)
    nbytes = os.path.getsize(tmp_shard)
    if local_dir is not None:
      os.replace(tmp_shard, os.path.join(local_dir, name))
    else:
      epath.Path(tmp_shard).copy(out_dir / name, overwrite=True)
  entry = {"file": name, "bytes": nbytes, "documents": n, "tokens": tokens,
           "groups": int(num_groups), "group_jumps": prepared.group_jumps(group_ids),
           "source": {"path": path, "size": size}, "stats": stats.as_dict()}
  workdir_lib.write_text_atomic(out_dir / _entry_name(name), json.dumps(entry, indent=1))
  return entry


def _entry_name(shard: str) -> str:
  return shard[:-len(".array_record")] + ".json"


def _read_entry(out_dir: epath.Path, name: str) -> dict[str, Any] | None:
  """The entry of a finished shard, or None (no entry, or the shard is not its size)."""
  path = out_dir / _entry_name(name)
  if not path.exists():
    return None
  try:
    entry = json.loads(path.read_text())
    if (out_dir / name).stat().length == entry["bytes"]:
      return entry
  except (ValueError, KeyError, OSError):
    pass
  return None


def _plan(files: Sequence[str], sizes: Sequence[int], options: Options, tok_sha: str,
          extra_ids: int, vocab_size: int) -> dict[str, Any]:
  return {"format": prepared.FORMAT_NAME, "version": prepared.FORMAT_VERSION,
          "inputs": [{"path": f, "size": s} for f, s in zip(files, sizes)],
          "options": dataclasses.asdict(options),
          "tokenizer": {"sha256": tok_sha, "extra_ids": extra_ids, "vocab_size": vocab_size,
                        "file": prepared.TOKENIZER_FILE},
          "dtype": prepared.token_dtype(vocab_size)}


def _read_tokenizer(path: str, extra_ids: int) -> tokenizer_lib.Tokenizer:
  if not remote.as_path(path).exists():
    raise FileNotFoundError(f"tokenizer {path} does not exist; pass --tokenizer=PATH of a "
                            "SentencePiece .model file (T5's: sentencepiece.model).")
  return tokenizer_lib.load_tokenizer(path, extra_ids=extra_ids)


class _Progress:
  """A tqdm bar over input bytes with documents, tokens and MB per second."""

  def __init__(self, total_bytes: int, enabled: bool):
    self.docs = self.tokens = 0
    self._start = time.time()
    self._bar = None
    if enabled:
      from tqdm import tqdm  # pylint: disable=g-import-not-at-top
      self._bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc="prepare",
                       file=sys.stderr, dynamic_ncols=True)

  def add(self, docs: int, tokens: int, nbytes: int) -> None:
    self.docs += docs
    self.tokens += tokens
    if self._bar is not None:
      dt = max(time.time() - self._start, 1e-9)
      self._bar.set_postfix_str(f"{self.docs / dt:,.0f} docs/s {self.tokens / dt:,.0f} tok/s",
                                refresh=False)
      self._bar.update(nbytes)

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()


def prepare(inputs: str | Sequence[str], *, tokenizer: str, output: str,
            options: Options = Options(), extra_ids: int = tokenizer_lib.DEFAULT_EXTRA_IDS,
            workers: int = 1, process_index: int = 0, process_count: int = 1,
            progress: bool = False, wait_s: float = 0.0) -> dict[str, Any] | None:
  """Prepares `inputs` into `output` (see the module docstring); resumes a killed run.

  Args (besides the module docstring's): wait_s: after converting its own files, wait up to
    this long for the other hosts' shards (so that every host returns the manifest).

  Returns:
    the manifest, or None when other hosts' shards are not done yet (their host writes it).

  Raises:
    FileNotFoundError: an input or the tokenizer is missing.
    prepared.PreparedDataError: `output` holds a prepared dataset of other inputs, options or
      tokenizer.
    sources.DataQualityError: an input file has too many bad records.
    ValueError: other bad arguments.
  """
  if options.format not in INPUT_FORMATS:
    raise ValueError(f"--format={options.format!r}: expected one of {INPUT_FORMATS}.")
  if workers < 1:
    raise ValueError(f"--workers={workers}: must be at least 1.")
  if not 0 <= process_index < process_count:
    raise ValueError(f"--process_index={process_index} not in [0, {process_count}).")
  if not 0.0 <= options.max_bad_fraction <= 1.0:
    raise ValueError(f"--max_bad_fraction={options.max_bad_fraction}: must be in [0, 1].")
  if options.max_document_chars <= 0:
    raise ValueError(f"--max_document_chars={options.max_document_chars}: must be positive.")
  scan.check_decode_policy(options.on_decode_error)
  workdir_lib.check_remote_support(output)
  files = remote.expand(inputs)
  sizes = [remote.size(f) for f in files]
  tok = _read_tokenizer(tokenizer, extra_ids)
  tok_sha = tok.sha256
  plan = _plan(files, sizes, options, tok_sha, extra_ids, tok.vocab_size)
  out_dir = prepared.as_path(output)
  out_dir.mkdir(parents=True, exist_ok=True)
  plan_path = out_dir / prepared.PLAN
  if plan_path.exists():
    try:
      old = json.loads(plan_path.read_text())
    except ValueError:
      old = None
    if old != plan:
      raise prepared.PreparedDataError(
          f"--output={output} holds a prepared dataset of other inputs, options or "
          f"tokenizer ({plan_path} differs); pass a new --output, or the same arguments "
          "to resume it.")
  else:
    (out_dir / prepared.TOKENIZER_FILE).write_bytes(tok.model_proto)
    workdir_lib.write_text_atomic(plan_path, json.dumps(plan, indent=1))
  if (out_dir / prepared.MANIFEST).exists():
    manifest = prepared.read_manifest(out_dir)
    logging.info("%s is prepared already (%d documents); nothing to do", output,
                 manifest["documents"])
    return manifest
  n = len(files)
  names = [prepared.shard_name(i, n) for i in range(n)]
  mine = [i for i in range(process_index, n, process_count)
          if _read_entry(out_dir, names[i]) is None]
  bar = _Progress(sum(sizes[i] for i in mine), progress)
  args = [(i, n, files[i], sizes[i], os.fspath(out_dir), options, plan["dtype"]) for i in mine]
  try:
    if workers == 1 or len(mine) <= 1:
      q: queue_lib.SimpleQueue = queue_lib.SimpleQueue()
      _init_worker(q, tok.model_proto, extra_ids)
      try:
        for a in args:
          convert_file(*a)
          while not q.empty():
            bar.add(*q.get())
      finally:
        _WORKER.clear()
    else:
      ctx = multiprocessing.get_context("spawn")
      q = ctx.Manager().Queue()
      with concurrent.futures.ProcessPoolExecutor(
          min(workers, len(mine)), mp_context=ctx, initializer=_init_worker,
          initargs=(q, tok.model_proto, extra_ids)) as pool:
        pending = {pool.submit(convert_file, *a) for a in args}
        while pending:
          done, pending = concurrent.futures.wait(pending, timeout=0.5)
          while True:
            try:
              bar.add(*q.get_nowait())
            except queue_lib.Empty:
              break
          for f in done:
            f.result()  # raises a worker's error
  finally:
    bar.close()
  entries = [_read_entry(out_dir, name) for name in names]
  deadline = time.time() + wait_s
  while any(e is None for e in entries) and time.time() < deadline:
    time.sleep(max(0.0, min(10.0, deadline - time.time())))
    entries = [e or _read_entry(out_dir, name) for e, name in zip(entries, names)]
  if any(e is None for e in entries):
    return None
  return _write_manifest(out_dir, plan, entries)


def _write_manifest(out_dir: epath.Path, plan: dict[str, Any],
                    entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
  total = scan.SourceStats()
  for e in entries:
    total.merge(scan.SourceStats(**e["stats"]))
  documents = sum(e["documents"] for e in entries)
  if documents == 0:
    raise ValueError(f"no documents in the inputs (stats: {total.as_dict()}); check the "
                     "paths, --format and --text_field.")
  manifest = {**{k: plan[k] for k in ("format", "version", "options", "tokenizer", "dtype")},
              "writer_options": prepared.WRITER_OPTIONS,
              "documents": documents, "tokens": sum(e["tokens"] for e in entries),
              "stats": total.as_dict(), "shards": list(entries)}
  workdir_lib.write_text_atomic(out_dir / prepared.MANIFEST, json.dumps(manifest, indent=1))
  return manifest


def jax_process() -> tuple[int, int]:
  """(process index, process count) of this host as jax.distributed would detect them (the
  first cluster environment present: SLURM, Cloud TPU VM, MPI, ...), else (0, 1). Detection
  only: nothing is initialized."""
  from jax._src import clusters  # pylint: disable=g-import-not-at-top
  for env in clusters.ClusterEnv._cluster_types:  # pylint: disable=protected-access
    if not env.opt_in_only_method and env.is_env_present():
      return int(env.get_process_id()), int(env.get_process_count())
  return 0, 1


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      prog="python -m lm.data.prepare",
      description="Tokenize a corpus once into a prepared dataset: token ids in ArrayRecord "
                  "shards (one per input file) plus manifest.json. A run reads it with "
                  "--config.data.format=prepared --config.data.paths='(\"DIR\",)'. Re-running "
                  "the same command resumes a killed run and rewrites no finished shard. "
                  "Paths may be local or remote (gs://). See docs/data.md.")
  p.add_argument("--input", action="append", required=True, metavar="GLOB",
                 help="input files or globs (repeatable): JSON lines (.jsonl/.json, also "
                      ".gz or .zst), Parquet, plain text, or a save_to_disk folder")
  p.add_argument("--format", default="auto", choices=INPUT_FORMATS,
                 help="input format (default: from each file's extension)")
  p.add_argument("--tokenizer", required=True, help="SentencePiece .model file")
  p.add_argument("--extra_ids", type=int, default=tokenizer_lib.DEFAULT_EXTRA_IDS,
                 help="sentinels appended to the tokenizer (as config.data.extra_ids)")
  p.add_argument("--output", required=True, help="folder of the prepared dataset")
  p.add_argument("--workers", type=int, default=1, help="worker processes (one file each)")
  p.add_argument("--process_index", default="0",
                 help="this host's index on a pod (converts files process_index::process_count)"
                      "; 'auto': this host's JAX process index and count (SLURM, Cloud TPU "
                      "VM, ... as jax.distributed detects them; 0 of 1 on a single machine)")
  p.add_argument("--process_count", type=int, default=1, help="hosts preparing together")
  p.add_argument("--text_field", default="text", help="JSON field / column of the text")
  p.add_argument("--on_decode_error", default="replace", choices=("replace", "skip"))
  p.add_argument("--max_document_chars", type=int, default=scan.DEFAULT_MAX_DOCUMENT_CHARS,
                 help="longer documents are cut into pieces (as config.data)")
  p.add_argument("--max_bad_fraction", type=float, default=0.01,
                 help="refuse a file with a larger share of bad records (as config.data)")
  p.add_argument("--wait_s", type=float, default=0.0,
                 help="on a pod: after this host's files, wait up to this long for the other "
                      "hosts' (exit 3 if they are not done by then), so that the command ends "
                      "when the dataset is complete")
  p.add_argument("--no_progress", action="store_true", help="no progress bar")
  return p


def main(argv: Sequence[str] | None = None) -> int:
  parser = _parser()
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.WARNING)
  options = Options(format=args.format, text_field=args.text_field,
                    on_decode_error=args.on_decode_error,
                    max_document_chars=args.max_document_chars,
                    max_bad_fraction=args.max_bad_fraction)
  start = time.time()
  try:
    if args.process_index == "auto":
      process_index, process_count = jax_process()
    else:
      try:
        process_index, process_count = int(args.process_index), args.process_count
      except ValueError:
        raise ValueError(f"--process_index={args.process_index!r}: an integer or 'auto'.")
    manifest = prepare(args.input, tokenizer=args.tokenizer, output=args.output,
                       options=options, extra_ids=args.extra_ids, workers=args.workers,
                       process_index=process_index, process_count=process_count,
                       progress=not args.no_progress, wait_s=args.wait_s)
  except ImportError as e:
    return cli.bad_input_exit(e)
  except (*cli.BAD_INPUT_ERRORS, OSError) as e:
    return cli.bad_input_exit(cli.first_line(e))
  if manifest is None:
    print(f"prepared this host's shards in {args.output} ({time.time() - start:.1f} s); the "
          "manifest is written by the host that finishes last")
    if args.wait_s > 0:
      print(f"error: the other hosts' shards of {args.output} were not done after "
            f"--wait_s={args.wait_s:g}; run the same command again on every host",
            file=sys.stderr)
      return 3
  else:
    print(f"prepared {args.output}: {manifest['documents']} documents, {manifest['tokens']} "
          f"tokens in {len(manifest['shards'])} shards ({time.time() - start:.1f} s)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
