"""launch/sweep.py's prepare stage (launch/prepare.py): the study's corpus tokenized once,
before the points."""
import json
import os
import pathlib
import shlex
import subprocess
import sys

import pytest

from launch import prepare, sweep

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
  monkeypatch.chdir(REPO)


def _experiment(tmp_path) -> str:
  path = tmp_path / "study.py"
  path.write_text("def sweep(add):\n"
                  "  add(name='a', config='configs/t5.py:objective=bert')\n"
                  "  add(name='b', config='configs/t5.py:arch=causal')\n")
  return str(path)


PREPARE = ["--prepare_input=gs://c4/en/c4-train.*.json.gz", "--prepare_tokenizer=gs://t5/spm.model"]


def _lines(capsys, *args):
  assert sweep.main([*args, "--dry_run", "--no_validate"]) == 0
  return [shlex.split(l) for l in capsys.readouterr().out.splitlines() if l.strip()]


def test_local_study_prepares_first_and_points_train_from_it(capsys, tmp_path):
  root = str(tmp_path / "r")
  lines = _lines(capsys, _experiment(tmp_path), f"--root={root}", "--stages=pretrain",
                 *PREPARE, "--prepare_workers=4")
  assert lines[0][1:4] == ["-m", "launch.stage", f"--done={root}/sweep/prepare.json"]
  cmd = lines[0][lines[0].index("--") + 1:]
  assert cmd[1:3] == ["-m", "lm.data.prepare"]
  assert {"--input=gs://c4/en/c4-train.*.json.gz", "--tokenizer=gs://t5/spm.model",
          f"--output={root}/prepared", "--workers=4"} <= set(cmd)
  assert "--process_index=auto" not in cmd  # one machine
  pretrain = lines[1:]
  assert len(pretrain) == 2
  for argv in pretrain:
    assert "--config.data.format=prepared" in argv
    assert f"--config.data.paths=('{root}/prepared',)" in argv


def test_tpu_hosts_prepare_in_parallel_before_the_points(capsys, tmp_path):
  lines = _lines(capsys, _experiment(tmp_path), "--root=gs://b/r", "--backend=tpu",
                 "--tpu=pod", "--zone=z", "--accelerator=v5p-128", "--no_plan", *PREPARE)
  ssh = [t for t in lines if t[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh"]]
  # setup (mkdir, install), prepare, then the two points
  remote = [next(a for a in t if a.startswith("--command="))[len("--command="):] for t in ssh]
  assert "lm.data.prepare" in remote[2] and "--process_index=auto" in remote[2]
  assert "--wait_s=" in remote[2]  # every host's stage ends when the dataset is complete
  assert all("lm.main" in r and "--config.data.format=prepared" in r for r in remote[3:])


def test_slurm_prepare_job_runs_first(capsys, tmp_path):
  assert sweep.main([_experiment(tmp_path), "--root=/shared/r", "--backend=slurm",
                     "--nodes=3", "--dry_run", "--no_validate", *PREPARE]) == 0
  out = capsys.readouterr().out
  script = out.split("# /shared/r/prepare.sbatch\n", 1)[1].split("# then:", 1)[0]
  assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
  assert "#SBATCH --nodes=3" in script and "--process_index=auto" in script
  assert out.index("prepare.sbatch") < out.index("/shared/r/a/sweep.sbatch")


def test_prepare_needs_a_tokenizer(capsys, tmp_path):
  assert sweep.main([_experiment(tmp_path), "--root=r", "--dry_run", "--no_validate",
                     "--prepare_input=x.jsonl"]) == 2
  assert capsys.readouterr().err.startswith("error: --prepare_input needs --prepare_tokenizer")


def test_the_prepare_stage_runs_once(tmp_path):
  """The stage prepares the corpus and marks it; run again, it is skipped."""
  from lm.data import tokenizer as tok_lib
  docs = [f"the quick brown fox number {i} jumps over the lazy dog" for i in range(40)]
  (tmp_path / "c.jsonl").write_text("\n".join(json.dumps({"text": d}) for d in docs) + "\n")
  tok_lib.train_tokenizer(docs, vocab_size=42, extra_ids=5).save(str(tmp_path / "spm.model"))
  prep = prepare.Prepare((str(tmp_path / "c.jsonl"),), str(tmp_path / "spm.model"),
                       str(tmp_path / "prepared"), extra=("--extra_ids=5",))
  stage = prep.stage(str(tmp_path / "sweep" / "prepare.json"), python=sys.executable)
  env_path = os.environ.get("PYTHONPATH")
  os.environ["PYTHONPATH"] = str(REPO)
  try:
    assert sweep.run_point([stage], str(tmp_path / "prepare.log")) == (0, "")
    assert sweep.run_point([stage], str(tmp_path / "prepare.log")) == (0, "")
  finally:
    if env_path is None:
      os.environ.pop("PYTHONPATH")
    else:
      os.environ["PYTHONPATH"] = env_path
  manifest = json.loads((tmp_path / "prepared" / "manifest.json").read_text())
  assert manifest["documents"] == 40
  assert (tmp_path / "sweep" / "prepare.json").exists()
  log = (tmp_path / "prepare.log").read_text()
  assert log.count(" documents, ") == 1 and "stage done already" in log
