"""Data on a bucket (the offline fake one, tests/fake_gcs.py): prepare from and to gs://,
raw sources on gs://, and a run that trains and resumes from a prepared gs:// dataset."""
import json
import gzip
import os

import numpy as np
import pytest

import fake_gcs
from eval_runs import tiny_config
from lm.validate import validate

WORDS = "the cat sat on a mat with one red hat and ran far away from home".split()


def _docs(n, seed=0):
  rng = np.random.default_rng(seed)
  return [" ".join(rng.choice(WORDS, rng.integers(3, 50))) + f" doc{i}." for i in range(n)]


def _write(path, docs):
  data = ("\n".join(json.dumps({"text": d}) for d in docs) + "\n").encode()
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(gzip.compress(data, mtime=0) if str(path).endswith(".gz") else data)


def test_prepare_and_read_through_the_bucket(tmp_path, monkeypatch):
  from lm.data import prepare, prepared, sources
  from lm.data import tokenizer as tok_lib
  monkeypatch.chdir(tmp_path)
  root = tmp_path / "gcs"
  docs = _docs(120)
  _write(root / "bucket" / "corpus" / "part-0.jsonl.gz", docs[:70])
  _write(root / "bucket" / "corpus" / "part-1.jsonl.gz", docs[70:])
  tok = tok_lib.train_tokenizer(_docs(200, seed=1), vocab_size=40, extra_ids=10)
  tok.save(str(root / "bucket" / "spm.model"))
  with fake_gcs.installed(root):
    m = prepare.prepare("gs://bucket/corpus/*.jsonl.gz", tokenizer="gs://bucket/spm.model",
                        output="gs://bucket/prepared", extra_ids=10)
    assert [s["source"]["path"] for s in m["shards"]] == [
        "gs://bucket/corpus/part-0.jsonl.gz", "gs://bucket/corpus/part-1.jsonl.gz"]
    src = prepared.PreparedSource("gs://bucket/prepared")
    raw = sources.make_source("auto", ["gs://bucket/corpus/*.jsonl.gz"])  # raw, on gs:// too
    assert len(src) == len(raw) == 120
    for i in range(120):
      np.testing.assert_array_equal(src[i], tok.encode(raw[i]))
    assert tok_lib.load_tokenizer("gs://bucket/spm.model", extra_ids=10).model_proto == (
        tok.model_proto)
    # A run on the prepared dataset without data.tokenizer: lm.restore (evaluate, decode)
    # loads the dataset's own, as the pipeline does.
    from lm import restore
    config = tiny_config(**{"data.format": "prepared", "data.paths": ("gs://bucket/prepared",),
                            "data.extra_ids": 10})
    assert restore.run_tokenizer(config).model_proto == tok.model_proto
    # A save_to_disk folder in the bucket (copied down by the worker converting it).
    import datasets
    datasets.Dataset.from_dict({"text": docs[:30]}).save_to_disk(
        str(root / "bucket" / "saved" / "train"))
    m = prepare.prepare("gs://bucket/saved/train", tokenizer="gs://bucket/spm.model",
                        output="gs://bucket/prepared-hf", extra_ids=10)
    hf = prepared.PreparedSource("gs://bucket/prepared-hf")
    assert len(hf) == 30 and m["shards"][0]["source"]["path"] == "gs://bucket/saved/train"
    for i in range(30):
      np.testing.assert_array_equal(hf[i], src[i])
  assert sorted(os.listdir(root / "bucket" / "prepared")) == [
      "manifest.json", "prepare.json", "shard-00000-of-00002.array_record",
      "shard-00000-of-00002.json", "shard-00001-of-00002.array_record",
      "shard-00001-of-00002.json", "tokenizer.model"]
  assert not os.path.exists(tmp_path / "gs:")


@pytest.mark.slow
def test_train_and_resume_from_a_prepared_dataset_on_the_bucket(tmp_path, monkeypatch):
  """prepare (gs:// in and out), train 2 steps, resume to 4, all on the fake bucket (that the
  batches are the raw path's and resume exactly: tests/data/test_prepared.py)."""
  from lm import train
  from lm.data import corpus, prepare
  from lm.data import tokenizer as tok_lib
  monkeypatch.chdir(tmp_path)
  root = tmp_path / "gcs"
  docs = corpus.default_corpus()[:3000]
  half = len(docs) // 2
  _write(root / "bucket" / "corpus" / "a.jsonl.gz", docs[:half])
  _write(root / "bucket" / "corpus" / "b.jsonl.gz", docs[half:])
  config = tiny_config(steps=4, **{"train.eval_every": 4})
  tok = tok_lib.run_tokenizer(None, default_vocab_size=config.data.default_vocab_size,
                              extra_ids=config.data.extra_ids)
  tok.save(str(root / "bucket" / "spm.model"))
  with fake_gcs.installed(root):
    prepare.prepare("gs://bucket/corpus/*.jsonl.gz", tokenizer="gs://bucket/spm.model",
                    output="gs://bucket/c4", extra_ids=config.data.extra_ids)
    overrides = {"data.format": "prepared", "data.paths": ("gs://bucket/c4",),
                 "train.eval_every": 4}
    train.train_and_evaluate(validate(tiny_config(steps=2, **overrides)), "gs://bucket/run")
    resumed = train.train_and_evaluate(validate(tiny_config(steps=4, **overrides)),
                                       "gs://bucket/run")
  assert np.isfinite(resumed["loss"])
  run = root / "bucket" / "run"
  assert sorted(os.listdir(run / "checkpoints")) == ["2", "4"]
  assert [m["step"] for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
          if "loss" in m] == [2, 4]
  config = json.loads((run / "config.json").read_text())
  assert config["data"]["format"] == "prepared" and config["data"]["tokenizer"] is None
  assert not os.path.exists(tmp_path / "gs:")
