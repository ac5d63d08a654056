"""python -m lm.decode: end to end on a tiny HF directory and a run directory, and bad inputs."""
import io
import json
import importlib.util
import os
import shutil
import sys

import jax
import numpy as np
import pytest

from lm import decode, generation
from lm.data import tokenizer as tokenizer_lib
from lm.checkpoint import hf_t5
from lm.model.transformer import Transformer

from eval_runs import fake_run

HF_T5_1_1 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "hf_t5", "t5_1_1")
DOCS = ["the quick brown fox jumps over the lazy dog", "hello world this is a test of the decoder",
        "a b c d e f g h i j k l m n o p"] * 20
PROMPTS = ["the quick brown fox", "hello world", "", "a test of the lazy dog"]


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
  """The tiny t5_1_1 checkpoint (vocab 64) with a 40-piece SentencePiece model + 24 sentinels."""
  directory = str(tmp_path_factory.mktemp("decode_cli") / "hf")
  shutil.copytree(HF_T5_1_1, directory)
  tokenizer_lib.train_tokenizer(DOCS, vocab_size=40, extra_ids=24,
                                output=os.path.join(directory, "spiece.model"))
  with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
    json.dump({"extra_ids": 24}, f)
  return directory


def run_cli(argv, capsys, stdin_bytes=None, monkeypatch=None):
  if stdin_bytes is not None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin_bytes)))
  code = decode.main(argv)
  out, err = capsys.readouterr()
  return code, out, err


def expected_greedy(directory, prompts, max_len):
  """lm.generation on the imported checkpoint, prompt by prompt (no CLI batching)."""
  config, params = hf_t5.load_hf_t5(directory)
  tok = tokenizer_lib.load_tokenizer(os.path.join(directory, "spiece.model"), extra_ids=24)
  fn = generation.make_decode_fn(Transformer(config), generation.DecodeConfig(max_decode_length=max_len))
  out = []
  for i, p in enumerate(prompts):
    batch = generation.prompt_batch([tok.encode(p)], config)
    tokens, score = fn(params, batch, jax.random.PRNGKey(0), np.array([i]))
    out.append((tok.decode(np.asarray(tokens)[0]), float(np.asarray(score)[0])))
  return out


@pytest.mark.slow
def test_decode_cli_hf_dir_text_and_jsonl(hf_dir, tmp_path, capsys, monkeypatch):
  text = tmp_path / "prompts.txt"
  text.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
  out_file = tmp_path / "out.jsonl"
  code, _, err = run_cli([f"--hf={hf_dir}", f"--input={text}", f"--output={out_file}",
                          "--max_decode_length=6", "--batch_size=3"], capsys)
  assert code == 0, err
  records = [json.loads(l) for l in out_file.read_text(encoding="utf-8").splitlines()]
  assert [r["inputs"] for r in records] == PROMPTS
  for r, (output, score) in zip(records, expected_greedy(hf_dir, PROMPTS, 6)):
    assert r["output"] == output
    np.testing.assert_allclose(r["score"], score, rtol=1e-4, atol=1e-5)
  # The same prompts as jsonl on stdin, output to stdout.
  jsonl = "".join(json.dumps({"inputs": p, "id": i}) + "\n" for i, p in enumerate(PROMPTS))
  code, out, err = run_cli([f"--hf={hf_dir}", "--input=-", "--max_decode_length=6", "--batch_size=3"],
                           capsys, jsonl.encode(), monkeypatch)
  assert code == 0, err
  assert [json.loads(l) for l in out.splitlines()] == records
  assert "decode" in err  # the tqdm progress bar


@pytest.mark.slow
def test_decode_cli_beam_and_truncation(hf_dir, tmp_path, capsys):
  text = tmp_path / "prompts.txt"
  text.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
  code, out, err = run_cli([f"--hf={hf_dir}", f"--input={text}", "--method=beam", "--beam_size=2",
                            "--max_decode_length=5", "--max_input_length=4", "--truncate"], capsys)
  assert code == 0, err
  records = [json.loads(l) for l in out.splitlines()]
  tok = tokenizer_lib.load_tokenizer(os.path.join(hf_dir, "spiece.model"), extra_ids=24)
  for r in records:
    n = len(tok.encode(r["inputs"]))
    assert r.get("truncated_tokens", 0) == max(0, n - 3), r


@pytest.mark.slow
def test_decode_cli_run_workdir_sampling(tmp_path, capsys):
  workdir = fake_run(str(tmp_path / "run"), arch="prefix_lm")
  text = tmp_path / "prompts.txt"
  text.write_text("abc abd\nfed\n", encoding="utf-8")
  args = [f"--workdir={workdir}", "--step=2", f"--input={text}", "--method=sample", "--top_k=5",
          "--temperature=0.8", "--max_decode_length=4", "--seed=3"]
  code, out, err = run_cli(args, capsys)
  assert code == 0, err
  records = [json.loads(l) for l in out.splitlines()]
  assert [r["inputs"] for r in records] == ["abc abd", "fed"]
  assert all(np.isfinite(r["score"]) and r["score"] <= 0 for r in records)
  assert run_cli(args + ["--batch_size=1"], capsys)[1] == out  # seeded per example, not per batch


def test_decode_cli_bad_inputs(hf_dir, tmp_path, capsys, monkeypatch):
  good = tmp_path / "ok.txt"
  good.write_text("hello\n", encoding="utf-8")
  out_file = tmp_path / "never.jsonl"

  def error(argv, stdin=None):
    code, _, err = run_cli(argv + [f"--output={out_file}"], capsys, stdin, monkeypatch)
    assert code == 2, err
    lines = [l for l in err.splitlines() if l.startswith("lm.decode: error:")]
    assert len(lines) == 1, err
    assert not out_file.exists()
    return lines[0]

  assert "does not exist" in error([f"--hf={tmp_path / 'nope'}", f"--input={good}"])
  assert "does not exist" in error([f"--workdir={tmp_path / 'nope'}", f"--input={good}"])
  nowhere = tmp_path / "no_such_dir" / "out.jsonl"
  code, _, err = run_cli([f"--hf={hf_dir}", f"--input={good}", "--max_decode_length=2",
                          f"--output={nowhere}"], capsys)
  assert code == 2 and f"--output directory {nowhere.parent} does not exist" in err
  assert not nowhere.parent.exists()
  empty = tmp_path / "empty.txt"
  empty.write_text("\n\n", encoding="utf-8")
  assert "is empty" in error([f"--hf={hf_dir}", f"--input={empty}"])
  assert "is empty" in error([f"--hf={hf_dir}", "--input=-"], b"")
  latin = tmp_path / "latin1.txt"
  latin.write_bytes("ok\ncaf\u00e9\n".encode("latin-1"))
  assert "not UTF-8 (line 2" in error([f"--hf={hf_dir}", f"--input={latin}"])
  bad_json = tmp_path / "bad.jsonl"
  bad_json.write_text('{"inputs": "a"}\n{"text": "b"}\n', encoding="utf-8")
  assert "line 2 has no string 'inputs'" in error([f"--hf={hf_dir}", f"--input={bad_json}"])
  assert "missing.txt" in error([f"--hf={hf_dir}", f"--input={tmp_path / 'missing.txt'}"])
  long = tmp_path / "long.txt"
  long.write_text("the quick brown fox jumps over the lazy dog\n", encoding="utf-8")
  msg = error([f"--hf={hf_dir}", f"--input={long}", "--max_input_length=5"])
  assert "prompt 1 has" in msg and "--truncate" in msg
  with pytest.raises(SystemExit) as e:  # argparse: usage error, status 2
    decode.main([f"--hf={hf_dir}", f"--input={good}", "--step=3"])
  assert e.value.code == 2


@pytest.mark.parametrize("flags,named", [
    (["--method=beam", "--alpha=nan"], "--alpha must be a finite number, got nan"),
    (["--alpha=inf"], "--alpha must be a finite number"),
    (["--method=beam", "--alpha=-0.5"], "--alpha must be >= 0 with --length_penalty=t5"),
    (["--temperature=nan"], "--temperature must be a finite number"),
    (["--temperature=-inf"], "--temperature must be a finite number"),
    (["--temperature=-1"], "--temperature must be >= 0"),
    (["--top_p=nan"], "--top_p must be a finite number"),
    (["--top_p=0"], "--top_p must be in (0, 1]"),
    (["--top_p=1.5"], "--top_p must be in (0, 1]"),
    (["--top_k=-1"], "--top_k must be >= 0"),
    (["--beam_size=0"], "--beam_size must be >= 1"),
    (["--batch_size=-5"], "--batch_size must be >= 1"),
    (["--max_decode_length=0"], "--max_decode_length must be >= 1"),
    (["--max_input_length=-3"], "--max_input_length must be >= 1"),
    (["--step=-1"], "--step must be >= 0"),
    (["--seed=18446744073709551616"], "--seed must fit in 64 bits"),
])
def test_decode_cli_numeric_flags_are_validated_before_any_work(tmp_path, capsys, flags, named):
  source = ["--workdir=nowhere"] if "--step" in flags[0] else ["--hf=nowhere"]
  with pytest.raises(SystemExit) as e:
    decode.main(source + ["--input=nowhere.txt", *flags])
  assert e.value.code == 2
  err = capsys.readouterr().err
  lines = [l for l in err.splitlines() if "error:" in l]
  assert len(lines) == 1 and lines[0].startswith(f"python -m lm.decode: error: {named}"), err
  decode.parse_args(["--hf=x", "--input=y", "--method=beam", "--alpha=-0.5",
                     "--length_penalty=hf"])  # hf's length ** alpha takes any finite alpha


@pytest.mark.slow
def test_decode_cli_unknown_step(tmp_path, capsys):
  workdir = fake_run(str(tmp_path / "run"))
  good = tmp_path / "ok.txt"
  good.write_text("abc\n", encoding="utf-8")
  code, _, err = run_cli([f"--workdir={workdir}", "--step=3", f"--input={good}"], capsys)
  assert code == 2
  assert "3" in err and err.count("\n") == 1, err


@pytest.mark.slow
def test_bench_decode_quick_prints_table():
  import subprocess
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
  out = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "bench_decode.py"), "--quick",
                        "--rounds", "1", "--repeats", "1", "--batches", "2", "--methods", "greedy"],
                       capture_output=True, text=True, env=env, timeout=600, cwd=root)
  assert out.returncode == 0, out.stderr[-3000:]
  rows = [l for l in out.stdout.splitlines() if l.startswith("cpu/tiny/")]
  has_hf = all(importlib.util.find_spec(m) for m in ("torch", "transformers"))
  if not has_hf:  # CI's environment: lm's rows only, and the header says why
    assert "transformers not available" in out.stdout and len(rows) == 2, out.stdout
    return
  assert len(rows) == 2 and "x (" in rows[0] and "no transformers counterpart" in rows[1], out.stdout
