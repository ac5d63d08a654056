"""Prepared datasets (lm/data/prepare.py, lm/data/prepared.py): the same batches as the raw
path, resumable and byte-identical shards, compressed inputs, and one-line errors."""
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from lm.data import pipeline, prepare, prepared, sources
from lm.data import tokenizer as tok_lib

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron "
         "pi rho sigma tau upsilon phi chi psi omega").split()
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _docs(n, seed=0):
  rng = np.random.default_rng(seed)
  return [" ".join(rng.choice(WORDS, rng.integers(3, 60))) + f" doc{i}." for i in range(n)]


def _write_jsonl(path, docs, *, extra_lines=()):
  lines = [json.dumps({"text": d}) for d in docs] + list(extra_lines)
  data = ("\n".join(lines) + "\n").encode()
  if str(path).endswith(".gz"):
    data = gzip.compress(data, mtime=0)
  elif str(path).endswith(".zst"):
    import zstandard  # pylint: disable=g-import-not-at-top
    data = zstandard.ZstdCompressor().compress(data)
  with open(path, "wb") as f:
    f.write(data)


@pytest.fixture(scope="module")
def tok_file(tmp_path_factory):
  tok = tok_lib.train_tokenizer(_docs(300, seed=1), vocab_size=60, extra_ids=20)
  path = tmp_path_factory.mktemp("tok") / "spm.model"
  tok.save(str(path))
  return str(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """Three JSON-lines files: blank lines, a broken line, an empty document, a long one."""
  d = tmp_path_factory.mktemp("corpus")
  docs = _docs(240)
  docs[5] = "   "  # empty: skipped
  docs[17] = " ".join(["omega"] * 400)  # over max_document_chars below: cut into pieces
  _write_jsonl(d / "a.jsonl", docs[:100], extra_lines=["{broken", ""])
  _write_jsonl(d / "b.jsonl", docs[100:180])
  _write_jsonl(d / "c.jsonl", docs[180:])
  return str(d)


OPTIONS = prepare.Options(max_document_chars=1000, max_bad_fraction=0.05)


@pytest.fixture(scope="module")
def prepared_dir(corpus, tok_file, tmp_path_factory):
  out = str(tmp_path_factory.mktemp("prepared") / "ds")
  prepare.prepare(os.path.join(corpus, "*.jsonl"), tokenizer=tok_file, output=out,
                  options=OPTIONS, extra_ids=20)
  return out


def _batches(spec, n, *, eval_batches=0):
  data = pipeline.DataPipeline(spec)
  it = data.train_iterator()
  try:
    out = [next(it) for _ in range(n)]
    state = it.get_state()
  finally:
    it.close()
  return out, state, list(data.eval_iterator(num_batches=eval_batches)) if eval_batches else []


def _same(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b):
    assert x.keys() == y.keys()
    for k in x:
      np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def test_prepared_documents_are_the_raw_sources_tokenized(corpus, prepared_dir, tok_file):
  raw = sources.make_source("jsonl", [os.path.join(corpus, "*.jsonl")], max_document_chars=1000)
  tok = tok_lib.load_tokenizer(tok_file, extra_ids=20)
  src = prepared.PreparedSource(prepared_dir)
  assert len(src) == len(raw) and src.num_groups == raw.num_groups
  np.testing.assert_array_equal(src.group_ids, raw.group_ids)
  assert raw.stats.split_documents == 1 and src.stats.split_documents == 1
  for i in range(len(src)):
    np.testing.assert_array_equal(src[i], tok.encode(raw[i]))
    assert src[i].dtype == np.int32
  m = src.manifest
  assert m["documents"] == len(raw) and m["tokens"] == sum(len(src[i]) for i in range(len(src)))
  assert [s["documents"] for s in m["shards"]] == [
      len(sources.make_source("jsonl", [os.path.join(corpus, f)], max_document_chars=1000))
      for f in ("a.jsonl", "b.jsonl", "c.jsonl")]
  assert m["stats"]["bad_records"] == 1 and m["stats"]["empty_documents"] == 1
  assert m["tokenizer"]["sha256"] == hashlib.sha256(tok.model_proto).hexdigest()
  assert [s["source"]["size"] for s in m["shards"]] == [
      os.path.getsize(os.path.join(corpus, f)) for f in ("a.jsonl", "b.jsonl", "c.jsonl")]


# Every layout the pipeline has: concatenated (vectorised and per-example), concatenated with
# a document EOS (full_lm), single-document examples (prefix_lm, deshuffle), and a mixture.
LAYOUTS = {
    "span_corruption_batched": dict(objective="span_corruption", inputs_length=32,
                                    targets_length=12),
    "span_corruption_per_example": dict(objective="span_corruption", inputs_length=32,
                                        targets_length=12, batched_objectives=False),
    "full_lm_causal": dict(objective="full_lm", architecture="causal", inputs_length=0,
                           targets_length=32),
    "prefix_lm": dict(objective="prefix_lm", architecture="prefix_lm", inputs_length=24,
                      targets_length=24),
    "deshuffle_unpacked": dict(objective="deshuffle", architecture="causal", inputs_length=24,
                               targets_length=24, pack=False),
    "ul2_mixture": dict(objective="mixture", objective_params=dict(preset="ul2"),
                        inputs_length=64, targets_length=64),
}


_SLOW_LAYOUTS = ("full_lm_causal", "ul2_mixture")  # ~10 s and ~45 s on a shared CPU


@pytest.mark.parametrize("layout", [
    pytest.param(name, marks=pytest.mark.slow) if name in _SLOW_LAYOUTS else name
    for name in LAYOUTS])
def test_prepared_and_raw_give_the_same_batches(corpus, prepared_dir, tok_file, layout):
  common = dict(extra_ids=20, batch_size=4, num_shards=4, seed=5, num_threads=2, prefetch_batches=0,
                validation_fraction=0.2, max_document_chars=1000, max_bad_fraction=0.05,
                **LAYOUTS[layout])
  raw_spec = pipeline.DataSpec(format="jsonl", paths=(os.path.join(corpus, "*.jsonl"),),
                               tokenizer=tok_file, **common)
  prep_spec = pipeline.DataSpec(format="prepared", paths=(prepared_dir,), **common)
  raw, raw_state, raw_eval = _batches(raw_spec, 6, eval_batches=2)
  prep, prep_state, prep_eval = _batches(prep_spec, 6, eval_batches=2)
  _same(raw, prep)
  _same(raw_eval, prep_eval)  # the validation split by record hash is the same
  assert raw_state["shards"] == prep_state["shards"]


def test_prepared_resume_is_exact(prepared_dir):
  spec = pipeline.DataSpec(format="prepared", paths=(prepared_dir,), extra_ids=20,
                           inputs_length=32, targets_length=12, batch_size=4, num_shards=4,
                           validation_fraction=0.0, max_bad_fraction=0.05, prefetch_batches=0,
                           batched_objectives=False)
  full, _, _ = _batches(spec, 6)
  data = pipeline.DataPipeline(spec)
  it = data.train_iterator()
  [next(it) for _ in range(3)]
  state = json.loads(json.dumps(it.get_state()))
  it.close()
  it = pipeline.DataPipeline(spec).train_iterator()
  it.set_state(state)
  rest = [next(it) for _ in range(3)]
  it.close()
  _same(full[3:], rest)


def test_processes_read_disjoint_records_that_make_up_the_epoch(prepared_dir):
  """Two processes of a 4-shard pipeline read disjoint documents; together all of them."""
  spec = pipeline.DataSpec(format="prepared", paths=(prepared_dir,), extra_ids=20,
                           inputs_length=32, targets_length=12, batch_size=4, num_shards=4,
                           validation_fraction=0.0, num_epochs=1, max_bad_fraction=0.05)
  read = []
  for p in range(2):
    data = pipeline.DataPipeline(spec, process_index=p, process_count=2)
    seen = []
    original = data.train_source.__class__.__getitem__

    class Spy(type(data.train_source)):
      def __getitem__(self, i, _seen=seen):  # pylint: disable=arguments-renamed
        _seen.append(int(i) % len(self))
        return original(self, i)
    data.train_source.__class__ = Spy
    it = data.train_iterator()
    for _ in it:
      pass
    it.close()
    read.append(set(seen))
    owned = {d for k in data.shards for d in range(k, len(data.train_source), 4)}
    assert read[-1] <= owned  # only the records of its own virtual shards
  assert not read[0] & read[1]
  assert read[0] | read[1] == set(range(len(prepared.PreparedSource(prepared_dir))))


def test_a_killed_prepare_resumes_to_identical_shards(corpus, tok_file, prepared_dir, tmp_path):
  out = tmp_path / "ds"
  shutil.copytree(prepared_dir, out)
  # As a kill leaves it: no manifest, the last shard without its entry and a half-written
  # temporary, a second shard half-written under its final name without an entry.
  os.remove(out / prepared.MANIFEST)
  os.remove(out / "shard-00002-of-00003.json")
  (out / ".shard-00002-of-00003.array_record.tmp-1234").write_bytes(b"partial")
  os.remove(out / "shard-00001-of-00003.json")
  with open(out / "shard-00001-of-00003.array_record", "r+b") as f:
    f.truncate(100)
  before = os.stat(out / "shard-00000-of-00003.array_record").st_mtime_ns
  prepare.prepare(os.path.join(corpus, "*.jsonl"), tokenizer=tok_file, output=str(out),
                  options=OPTIONS, extra_ids=20)
  assert os.stat(out / "shard-00000-of-00003.array_record").st_mtime_ns == before  # kept
  assert sorted(os.listdir(out)) == sorted(os.listdir(prepared_dir))  # the temporary removed
  for name in sorted(os.listdir(prepared_dir)):
    assert (out / name).read_bytes() == open(os.path.join(prepared_dir, name), "rb").read(), name


def test_compressed_inputs_give_the_same_shards(corpus, tok_file, prepared_dir, tmp_path):
  docs = [json.loads(l)["text"] for l in open(os.path.join(corpus, "b.jsonl"))]
  _write_jsonl(tmp_path / "b.jsonl.gz", docs)
  _write_jsonl(tmp_path / "b.jsonl.zst", docs)
  ref = prepared.PreparedSource(prepared_dir)
  offset = ref.manifest["shards"][0]["documents"]
  for name in ("b.jsonl.gz", "b.jsonl.zst"):
    out = str(tmp_path / f"out-{name}")
    m = prepare.prepare(str(tmp_path / name), tokenizer=tok_file, output=out, options=OPTIONS,
                        extra_ids=20)
    assert m["shards"][0]["source"] == {"path": str(tmp_path / name),
                                        "size": os.path.getsize(tmp_path / name)}
    src = prepared.PreparedSource(out)
    assert len(src) == 80
    for i in range(80):
      np.testing.assert_array_equal(src[i], ref[offset + i])


def _cli(*args, cwd=None):
  env = {**os.environ, "PYTHONPATH": REPO}
  return subprocess.run([sys.executable, "-m", "lm.data.prepare", *args], capture_output=True,
                        text=True, env=env, cwd=cwd, timeout=120)


def test_cli_help_and_bad_input(tmp_path, tok_file):
  r = _cli("--help")
  assert r.returncode == 0 and "--input" in r.stdout and "prepared" in r.stdout
  r = _cli(f"--input={tmp_path}/nothing*.jsonl", f"--tokenizer={tok_file}",
           f"--output={tmp_path}/out", "--no_progress")
  assert r.returncode == 2
  lines = r.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: ") and "matches no file" in lines[0]


def test_cli_refuses_a_file_of_garbage(tmp_path, tok_file):
  (tmp_path / "bad.jsonl").write_text("\n".join(["{not json"] * 20 + ['{"text": "ok"}']) + "\n")
  r = _cli(f"--input={tmp_path}/bad.jsonl", f"--tokenizer={tok_file}",
           f"--output={tmp_path}/out", "--no_progress")
  assert r.returncode == 2
  lines = r.stderr.strip().splitlines()
  assert len(lines) == 1 and "bad.jsonl" in lines[0] and "max_bad_fraction" in lines[0]
  assert not (tmp_path / "out" / prepared.MANIFEST).exists()


def test_an_output_of_other_inputs_is_refused(corpus, tok_file, prepared_dir, tmp_path):
  out = tmp_path / "ds"
  shutil.copytree(prepared_dir, out)
  with pytest.raises(prepared.PreparedDataError, match="other inputs"):
    prepare.prepare(os.path.join(corpus, "a.jsonl"), tokenizer=tok_file, output=str(out),
                    options=OPTIONS, extra_ids=20)


def _error_line(fn):
  with pytest.raises(prepared.PreparedDataError) as e:
    fn()
  message = str(e.value)
  assert "\n" not in message
  return message


def test_damaged_datasets_give_one_error_line(prepared_dir, tmp_path, tok_file):
  shard = "shard-00001-of-00003.array_record"

  def copy(name):
    out = tmp_path / name
    shutil.copytree(prepared_dir, out)
    return out

  truncated = copy("truncated")
  with open(truncated / shard, "r+b") as f:
    f.truncate(os.path.getsize(truncated / shard) - 10)
  assert "truncated" in _error_line(lambda: prepared.PreparedSource(truncated))

  mismatched = copy("mismatched")  # the manifest of another dataset of the same sizes
  m = json.loads((mismatched / prepared.MANIFEST).read_text())
  m["shards"][1]["documents"] += 1
  m["shards"][2]["documents"] -= 1
  (mismatched / prepared.MANIFEST).write_text(json.dumps(m))
  src = prepared.PreparedSource(mismatched)
  first_of_1 = m["shards"][0]["documents"]
  assert "does not belong to this manifest" in _error_line(lambda: src[first_of_1])

  corrupt = copy("corrupt")
  data = bytearray((corrupt / shard).read_bytes())
  for i in range(200, len(data) - 200, 7):
    data[i] ^= 0x5A
  (corrupt / shard).write_bytes(bytes(data))
  src = prepared.PreparedSource(corrupt)
  assert "corrupt" in _error_line(lambda: [src[first_of_1 + i] for i in range(80)])

  missing = copy("missing")
  os.remove(missing / shard)
  assert "missing" in _error_line(lambda: prepared.PreparedSource(missing))

  assert "has no manifest.json" in _error_line(lambda: prepared.PreparedSource(tmp_path))

  other = tok_lib.train_tokenizer(_docs(300, seed=2), vocab_size=64, extra_ids=20)
  other.save(str(tmp_path / "other.model"))
  spec = pipeline.DataSpec(format="prepared", paths=(prepared_dir,), extra_ids=20,
                           tokenizer=str(tmp_path / "other.model"), inputs_length=32,
                           targets_length=12, batch_size=4, num_shards=4,
                           max_bad_fraction=0.05)
  assert "another tokenizer" in _error_line(lambda: pipeline.DataPipeline(spec))
  # The same tokenizer given explicitly is fine.
  pipeline.DataPipeline(pipeline.DataSpec(**{**spec.__dict__, "tokenizer": tok_file}))


def test_quality_limit_applies_to_the_manifest_counts(prepared_dir):
  """File a.jsonl has 1 bad record of 102 examined: refused below 1%."""
  with pytest.raises(sources.DataQualityError, match="a.jsonl"):
    prepared.open_prepared((prepared_dir,), max_bad_fraction=0.005)
  prepared.open_prepared((prepared_dir,), max_bad_fraction=0.05)


def _same_files(a, b):
  assert sorted(os.listdir(a)) == sorted(os.listdir(b))
  for name in os.listdir(a):
    with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
      assert fa.read() == fb.read(), name


def test_hosts_write_the_same_dataset(corpus, tok_file, prepared_dir, tmp_path):
  """Two hosts (--process_index 0 and 1 of 2) write byte for byte the dataset of one host (as
  do two worker processes, below); the host that finishes last writes the manifest."""
  inputs = os.path.join(corpus, "*.jsonl")
  hosts = str(tmp_path / "hosts")
  assert prepare.prepare(inputs, tokenizer=tok_file, output=hosts, options=OPTIONS,
                         extra_ids=20, process_index=1, process_count=2) is None
  assert sorted(f for f in os.listdir(hosts) if f.endswith(".array_record")) == [
      "shard-00001-of-00003.array_record"]
  assert prepare.prepare(inputs, tokenizer=tok_file, output=hosts, options=OPTIONS,
                         extra_ids=20, process_index=0, process_count=2) is not None
  _same_files(prepared_dir, hosts)


@pytest.mark.slow  # ~10 s: spawns two worker processes
def test_workers_write_the_same_dataset(corpus, tok_file, prepared_dir, tmp_path):
  inputs = os.path.join(corpus, "*.jsonl")
  workers = str(tmp_path / "workers")
  prepare.prepare(inputs, tokenizer=tok_file, output=workers, options=OPTIONS, extra_ids=20,
                  workers=2)
  _same_files(prepared_dir, workers)


@pytest.mark.slow  # ~30 s on a shared CPU: lm.main's start-up
def test_a_run_on_a_truncated_shard_stops_with_one_error_line(prepared_dir, tmp_path):
  out = tmp_path / "ds"
  shutil.copytree(prepared_dir, out)
  with open(out / "shard-00002-of-00003.array_record", "r+b") as f:
    f.truncate(64)
  r = subprocess.run(
      [sys.executable, "-m", "lm.main", "--config=configs/t5.py:runlocal",
       "--config.data.format=prepared", f"--config.data.paths=('{out}',)",
       f"--workdir={tmp_path / 'run'}"],
      cwd=REPO, capture_output=True, text=True, timeout=300,
      env={**os.environ, "PYTHONPATH": REPO, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"})
  assert r.returncode == 2, r.stderr[-2000:]
  errors = [l for l in r.stderr.splitlines() if l.startswith("error:")]
  assert len(errors) == 1 and "shard-00002-of-00003.array_record" in errors[0], r.stderr[-2000:]
  assert "truncated" in errors[0] and "Traceback" not in r.stderr


def test_the_benchmarks_synthetic_corpus_is_json_lines(tmp_path):
  """benchmarks/data_prepared.py writes its corpora with NumPy; every line must parse."""
  sys.path.insert(0, os.path.join(REPO, "benchmarks"))
  try:
    import data_prepared  # pylint: disable=g-import-not-at-top
  finally:
    sys.path.pop(0)
  n = data_prepared.write_corpus(str(tmp_path / "c.jsonl"), 0.2, seed=0)
  lines = (tmp_path / "c.jsonl").read_bytes().decode().splitlines()
  assert n == os.path.getsize(tmp_path / "c.jsonl") >= 200_000
  texts = [json.loads(l)["text"] for l in lines]
  assert len(texts) > 100 and all(len(t.split()) >= 5 for t in texts)


@pytest.mark.parametrize("fmt", ["text", "paragraphs", "parquet", "hf"])
def test_other_input_formats_match_their_raw_sources(fmt, tok_file, tmp_path):
  docs = _docs(50, seed=3)
  if fmt == "text":
    path = tmp_path / "c.txt"
    path.write_text("\n".join(docs) + "\n")
  elif fmt == "paragraphs":
    path = tmp_path / "c.txt"
    path.write_text("\n\n".join(d.replace(" doc", "\ndoc") for d in docs) + "\n")
  elif fmt == "parquet":
    import pyarrow as pa  # pylint: disable=g-import-not-at-top
    import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": docs[:20] + [" "] + docs[20:]}), str(path))
  else:
    import datasets  # pylint: disable=g-import-not-at-top
    path = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": docs}).save_to_disk(str(path))
  out = str(tmp_path / "out")
  prepare.prepare(str(path), tokenizer=tok_file, output=out, extra_ids=20,
                  options=prepare.Options(format=fmt if fmt == "paragraphs" else "auto"))
  raw = sources.make_source(fmt if fmt == "paragraphs" else "auto", [str(path)])
  src = prepared.PreparedSource(out)
  tok = tok_lib.load_tokenizer(tok_file, extra_ids=20)
  assert len(src) == len(raw) == 50
  np.testing.assert_array_equal(src.group_ids, raw.group_ids)  # parquet: the blank row's gap
  for i in range(50):
    np.testing.assert_array_equal(src[i], tok.encode(raw[i]))


@pytest.mark.slow  # ~20 s: a real prepare killed with SIGKILL and started again
def test_a_prepare_killed_with_sigkill_resumes_to_identical_shards(tok_file, tmp_path):
  import signal  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  for i in range(3):
    _write_jsonl(tmp_path / f"part{i}.jsonl", _docs(15000, seed=10 + i))
  args = [f"--input={tmp_path}/part*.jsonl", f"--tokenizer={tok_file}", "--extra_ids=20",
          "--no_progress"]
  assert _cli(*args, f"--output={tmp_path}/whole").returncode == 0
  env = {**os.environ, "PYTHONPATH": REPO}
  proc = subprocess.Popen([sys.executable, "-m", "lm.data.prepare", *args,
                           f"--output={tmp_path}/killed"], env=env)
  first = tmp_path / "killed" / "shard-00000-of-00003.json"
  deadline = time.time() + 120
  while not first.exists() and proc.poll() is None and time.time() < deadline:
    time.sleep(0.005)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert not (tmp_path / "killed" / prepared.MANIFEST).exists(), "finished before the kill"
  assert _cli(*args, f"--output={tmp_path}/killed").returncode == 0
  names = sorted(f for f in os.listdir(tmp_path / "whole"))
  assert sorted(os.listdir(tmp_path / "killed")) == names  # no temporary left
  for name in names:
    assert ((tmp_path / "killed" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
            ), name
