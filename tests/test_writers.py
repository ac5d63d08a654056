"""Writers: console line, jsonl file, wandb offline/disabled with run-id resume, secret filter."""
import io
import json
import os

import ml_collections
import pytest

from lm import writers


def _config(mode):
  return ml_collections.ConfigDict(dict(
      train=dict(num_steps=100),
      wandb=dict(mode=mode, project="lm-test", entity=None, group="g", name="n",
                 tags=("a", "b"), notes=""),
      data=dict(tokenizer="spm.model", num_target_tokens=3, hf_token="hf_abcdefghijklmnopqrstuvwx"),
      secrets=dict(wandb_api_key="0123456789abcdef0123456789abcdef01234567")))


def _make_writers(config, workdir):
  """make_writers as the trainer calls it: the typed wandb settings and the record from the
  config boundary (lm.config)."""
  from lm import config as config_lib
  return writers.make_writers(config_lib.wandb_config(config), workdir,
                              total_steps=config.train.num_steps, progress_bar=False,
                              record=config_lib.record(config))


def test_secret_filter_keeps_token_counts_and_drops_credentials():
  cfg = {"data": {"tokenizer": "x", "num_target_tokens": 3, "hf_token": "abc",
                  "api_key": "k", "password": "p", "keep": 3},
         "AWS_SECRET_ACCESS_KEY": "s", "apiKey": "z", "commit": "hf_" + "a" * 30,
         "tags": ["x", "sk-" + "b" * 30]}
  out = writers.filter_secrets(cfg)
  assert out == {"data": {"tokenizer": "x", "num_target_tokens": 3, "keep": 3},
                 "tags": ["x"]}


def test_console_line_and_jsonl(tmp_path):
  stream = io.StringIO()
  console = writers.ConsoleWriter(1000, start_step=0, stream=stream, progress_bar=False)
  line = console.format_line(100, {"loss": 2.34567, "tokens_per_s": 12345.0, "mfu": 0.315})
  assert line.startswith("train step  100/1000 | loss 2.346 | tokens_per_s 1.23e+04 | mfu 31.5%")
  assert "eta " in line
  console.write(100, {"loss": 1.0})
  assert "loss 1" in stream.getvalue()
  path = tmp_path / "metrics.jsonl"
  j = writers.JsonlWriter(path)
  j.write(1, {"loss": 2.0, "bad": float("nan")})
  j.close()
  j = writers.JsonlWriter(path)  # a resumed run appends
  j.write(2, {"loss": 1.5})
  j.close()
  rows = [json.loads(l) for l in path.read_text().splitlines()]
  assert [r["step"] for r in rows] == [1, 2] and rows[0]["bad"] is None and rows[1]["loss"] == 1.5


def test_make_writers_disabled_has_no_wandb(tmp_path):
  w = _make_writers(_config("disabled"), tmp_path)
  assert [type(x).__name__ for x in w.writers] == ["ConsoleWriter", "JsonlWriter"]
  w.write(5, {"loss": 3.0})
  w.close()
  assert json.loads((tmp_path / "metrics.jsonl").read_text())["loss"] == 3.0
  assert not (tmp_path / writers.RUN_ID_FILE).exists()


def test_wandb_mode_auto(monkeypatch):
  monkeypatch.delenv("WANDB_API_KEY", raising=False)
  assert writers.resolve_wandb_mode("auto") == "offline"
  monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
  assert writers.resolve_wandb_mode("auto") == "online"
  with pytest.raises(ValueError, match=r"unknown wandb mode 'on'; expected one of \['auto', "):
    writers.resolve_wandb_mode("on")


def test_wandb_offline_resumes_same_run_id_without_network(tmp_path, monkeypatch):
  monkeypatch.delenv("WANDB_API_KEY", raising=False)
  monkeypatch.setenv("WANDB_MODE", "offline")
  monkeypatch.setenv("WANDB_SILENT", "true")
  w = _make_writers(_config("auto"), tmp_path)
  wb = w.writers[-1]
  assert isinstance(wb, writers.WandbWriter) and wb.mode == "offline"
  logged = dict(wb.run.config)
  assert "secrets" not in logged  # a whole "secrets" group is dropped
  assert "hf_token" not in logged["data"] and logged["data"]["num_target_tokens"] == 3
  w.write(1, {"loss": 2.0})
  w.close()
  run_id = (tmp_path / writers.RUN_ID_FILE).read_text().strip()
  assert run_id == wb.run_id
  w2 = _make_writers(_config("offline"), tmp_path)
  assert w2.writers[-1].run_id == run_id and w2.writers[-1].run.id == run_id
  w2.close()
  assert any(p.startswith("offline-run") for p in os.listdir(tmp_path / "wandb"))


@pytest.mark.parametrize("content", ["", "\n", "not a run id!\n", "UPPER-case\n", "x" * 200])
def test_empty_or_invalid_wandb_run_id_is_replaced_atomically(tmp_path, content, caplog):
  from etils import epath
  (tmp_path / writers.RUN_ID_FILE).write_text(content)
  with caplog.at_level("WARNING"):
    run_id = writers.read_or_create_run_id(epath.Path(tmp_path))
  assert run_id.isalnum() and run_id.islower() and len(run_id) == 8
  assert (tmp_path / writers.RUN_ID_FILE).read_text() == run_id + "\n"
  assert "not a wandb run id" in caplog.text
  assert sorted(os.listdir(tmp_path)) == [writers.RUN_ID_FILE]  # no temporary file left
  assert writers.read_or_create_run_id(epath.Path(tmp_path)) == run_id  # valid: kept


def test_jsonl_drops_lines_after_the_resume_step_and_cut_lines(tmp_path):
  path = tmp_path / "metrics.jsonl"
  path.write_text('{"step": 2, "loss": 3.0}\n{"step": 4, "loss": 2.0}\n'
                  '{"step": 6, "loss": 1.0}\n{"step": 8, "lo')  # killed after step 4's save
  j = writers.JsonlWriter(path, start_step=4)
  j.write(6, {"loss": 1.5})
  j.close()
  rows = [json.loads(l) for l in path.read_text().splitlines()]
  assert [(r["step"], r["loss"]) for r in rows] == [(2, 3.0), (4, 2.0), (6, 1.5)]


SECRET = "hf_" + "Q" * 30


def test_secrets_in_overrides_never_reach_wandb_files(tmp_path, monkeypatch):
  """Notes / name / group / tags and the command line: nothing secret in wandb's files."""
  monkeypatch.delenv("WANDB_API_KEY", raising=False)
  monkeypatch.setenv("WANDB_SILENT", "true")
  monkeypatch.setattr("sys.argv", ["lm.main", f"--config.wandb.notes=token={SECRET}",
                                   f"--config.data.hf_token={SECRET}"])
  config = _config("offline")
  config.wandb.notes = f"my hf token is {SECRET}"
  config.wandb.name = f"run-{SECRET}"
  config.wandb.group = f"api_key={SECRET}"
  config.wandb.tags = ("ok", SECRET)
  w = _make_writers(config, tmp_path)
  run = w.writers[-1].run
  assert SECRET not in (run.notes or "") and SECRET not in run.name
  assert "my hf token is [filtered]" == run.notes
  w.write(1, {"loss": 2.0})
  w.close()
  leaked = [str(p) for p in (tmp_path / "wandb").rglob("*") if p.is_file()
            and SECRET.encode() in p.read_bytes()]
  assert not leaked, leaked
  assert writers.scrub_text("api_key=abc123 and sk-" + "z" * 24) == "[filtered] and [filtered]"


_CHILD = """
import os, sys
from lm import writers
w = writers.WandbWriter(sys.argv[1], mode="offline", project="lm-test")
if sys.argv[2] == "kill":
  os._exit(0)  # like SIGKILL: the run is never finished
w.close()
"""


def test_a_killed_child_run_can_resume_under_a_parent_that_uses_wandb(tmp_path, monkeypatch):
  """A parent's wandb service (WANDB_SERVICE) is not joined: a killed run's id stays free."""
  import subprocess
  import sys
  monkeypatch.delenv("WANDB_API_KEY", raising=False)
  monkeypatch.setenv("WANDB_SILENT", "true")
  parent = writers.WandbWriter(tmp_path / "parent", mode="offline", project="lm-test")
  try:
    assert os.environ.get(writers.WANDB_SERVICE_ENV)  # children would inherit it
    run = str(tmp_path / "child")
    for how in ("kill", "finish"):
      out = subprocess.run([sys.executable, "-c", _CHILD, run, how], capture_output=True,
                           text=True, timeout=300)
      assert out.returncode == 0, out.stderr[-2000:]
  finally:
    parent.close()


def test_own_wandb_service_keeps_only_this_process_service():
  env = {writers.WANDB_SERVICE_ENV: "3-1-unix-/tmp/x.sock"}
  writers.own_wandb_service(env)
  assert env == {}
  mine = {writers.WANDB_SERVICE_ENV: f"3-{os.getpid()}-tcp-localhost-4242"}
  writers.own_wandb_service(mine)
  assert mine == {writers.WANDB_SERVICE_ENV: f"3-{os.getpid()}-tcp-localhost-4242"}


def test_no_model_or_config_field_looks_like_a_secret():
  """config.json is written through filter_secrets: a TransformerConfig field named like a
  credential (say `eoi_token_id`: its `token` segment) would vanish from it, and a restored
  run would take the field's default instead of its value."""
  import dataclasses

  from lm.model.transformer_config import TransformerConfig
  names = {f.name: 1 for f in dataclasses.fields(TransformerConfig)}
  assert writers.filter_secrets({"model": names}) == {"model": names}
  assert writers.filter_secrets({"model": {"eoi_token_id": 1}}) != {"model": {"eoi_token_id": 1}}
