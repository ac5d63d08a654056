"""The training loop end to end: main job, resume (also after SIGKILL), errors, multi-process."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from eval_runs import tiny_config as _config  # the shared tiny runlocal config
from lm.validate import validate

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _metrics(workdir):
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def _train_losses(workdir):
  return {m["step"]: m["loss"] for m in _metrics(workdir) if "loss" in m}


def _comparable(workdir):
  """metrics.jsonl records without the timing fields."""
  timing = ("time", "tokens_per_s", "mfu", "data_wait_fraction")
  return [{k: v for k, v in m.items() if k not in timing} for m in _metrics(workdir)]


def test_preempted_and_resumed_run_logs_exactly_like_an_uninterrupted_one(tmp_path,
                                                                          monkeypatch):
  """SIGTERM at step 3 (mid logging window), a stray line of a killed run, resume to 8:
  the same metrics.jsonl lines (losses, evals, windows) as one run of 8 steps. Dropout is
  on, so the restored RNG must reproduce the masks (tests/test_resume_dropout.py has the
  slow test that a wrong RNG would change the losses)."""
  from lm import train
  whole, split = str(tmp_path / "whole"), str(tmp_path / "split")
  dropout = {"model.dropout_rate": 0.3}
  train.train_and_evaluate(validate(_config(steps=8, **dropout)), whole)
  calls = []
  monkeypatch.setattr(train.Preemption, "should_stop",
                      lambda self, *_: calls.append(1) or len(calls) >= 3)
  with pytest.raises(train.Preempted) as e:
    train.train_and_evaluate(validate(_config(steps=8, **dropout)), split)
  assert e.value.step == 3
  assert sorted(os.listdir(os.path.join(split, "checkpoints"))) == ["2", "3"]
  assert [m["step"] for m in _metrics(split)] == [2]  # no partial window logged at 3
  monkeypatch.undo()
  with open(os.path.join(split, "metrics.jsonl"), "a", encoding="utf-8") as f:
    f.write('{"step": 4, "loss": 0.0}\n{"step": 6, "lo')  # a killed run's lines after step 3
  train.train_and_evaluate(validate(_config(steps=8, **dropout)), split)
  assert [m["step"] for m in _metrics(split)] == [2, 4, 4, 6, 8, 8]  # train + eval lines
  assert _comparable(split) == _comparable(whole)
  with open(os.path.join(split, "config.json"), encoding="utf-8") as f:
    assert json.load(f)["train"]["num_steps"] == 8
  assert not os.path.exists(os.path.join(split, "lock"))


class _SlowIterator:
  """The pipeline's iterator with a fixed delay before each batch (a starving input)."""

  def __init__(self, inner, delay):
    self._inner, self._delay = inner, delay

  def __next__(self):
    time.sleep(self._delay)
    return next(self._inner)

  def __getattr__(self, name):
    return getattr(self._inner, name)


def test_data_wait_fraction_shows_a_starving_input_pipeline(tmp_path, monkeypatch, caplog):
  """A pipeline that needs 0.5 s per batch holds up a tiny step of a few ms: the log windows
  after the first (which holds compilation) report the loop waiting most of their time, and
  the run warns once; the real pipeline keeps up (the prefetch thread is ahead). Evaluation
  and checkpoints only at the end (after the last log line), so windows time steps alone."""
  from lm import train
  from lm.data import pipeline
  config = lambda: _config(steps=6, **{"ckpt.every_steps": 100, "train.eval_every": 100})
  train.train_and_evaluate(validate(config()), str(tmp_path / "fast"))
  fast = [m["data_wait_fraction"] for m in _metrics(str(tmp_path / "fast")) if "loss" in m]
  assert len(fast) == 3 and all(0 <= f < 0.2 for f in fast[1:]), fast
  real = pipeline.DataPipeline.train_iterator
  monkeypatch.setattr(pipeline.DataPipeline, "train_iterator",
                      lambda self: _SlowIterator(real(self), 0.5))
  with caplog.at_level("WARNING", logger="root"):
    train.train_and_evaluate(validate(config()), str(tmp_path / "slow"))
  slow = [m["data_wait_fraction"] for m in _metrics(str(tmp_path / "slow")) if "loss" in m]
  assert len(slow) == 3 and all(0.5 < f <= 1 for f in slow[1:]), slow
  warnings = [r.getMessage() for r in caplog.records if "waited for batches" in r.getMessage()]
  assert len(warnings) == 1 and "--config.data.num_threads" in warnings[0], warnings


def test_foreign_checkpoint_is_refused(tmp_path):
  from lm import checkpoint, train
  workdir = str(tmp_path / "run")
  train.train_and_evaluate(validate(_config(steps=2)), workdir)
  with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
    config_json = f.read()
  with pytest.raises(checkpoint.IncompatibleCheckpointError, match="emb_dim|shape"):
    train.train_and_evaluate(validate(_config(steps=4, **{"model.emb_dim": 96})), workdir)
  with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
    assert f.read() == config_json  # the refused run wrote nothing
  assert sorted(os.listdir(workdir)) == ["checkpoints", "config.json", "metrics.jsonl"]
  # The tokenizer's content is part of the checkpoint's signature.
  from lm import config as config_lib
  from lm.data import pipeline
  tokenizer = pipeline.DataPipeline(config_lib.data_spec(_config())).tokenizer
  with open(os.path.join(workdir, "checkpoints", "2", "meta", "metadata"), encoding="utf-8") as f:
    meta = json.load(f)
  assert meta["signature"]["tokenizer_sha256"] == checkpoint.tokenizer_hash(
      tokenizer.model_proto)


def _main(args, env=None, **kwargs):
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled", **(env or {})}
  env = {k: v for k, v in env.items() if v is not None}  # None: leave the variable unset
  return subprocess.run([sys.executable, "-m", "lm.main", *args], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=600, **kwargs)


def test_typo_in_config_field_fails_with_its_name(tmp_path):
  out = _main(["--config=configs/t5.py:runlocal", "--config.train.num_stepz=3",
               f"--workdir={tmp_path}"])
  assert out.returncode != 0
  assert "num_stepz" in out.stderr


def test_mesh_that_does_not_fit_is_a_clear_error(tmp_path):
  out = _main(["--config=configs/t5.py:runlocal", "--config.mesh.shape=(3,1,1)",
               f"--workdir={tmp_path}"], env={"XLA_FLAGS": ""})
  assert out.returncode == 2, out.stderr[-2000:]
  assert "mesh" in out.stderr and "Traceback" not in out.stderr
  assert os.listdir(tmp_path) == []  # nothing half-written


@pytest.mark.slow
def test_sigkill_then_restart_matches_uninterrupted_run(tmp_path):
  """A run killed with SIGKILL and started again ends exactly like an uninterrupted one."""
  common = ["--config=configs/t5.py:runlocal", "--config.train.num_steps=40",
            "--config.train.log_every=5", "--config.train.eval_every=0",
            "--config.ckpt.every_steps=10", "--config.ckpt.async_save=False"]
  whole, killed = str(tmp_path / "whole"), str(tmp_path / "killed")
  env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
  assert _main(common + [f"--workdir={whole}"], env=env).returncode == 0
  proc = subprocess.Popen(
      [sys.executable, "-m", "lm.main", *common, f"--workdir={killed}"], cwd=REPO,
      env={**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled", **env},
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  ckpt10 = os.path.join(killed, "checkpoints", "10")
  deadline = time.time() + 300
  while not os.path.exists(ckpt10) and proc.poll() is None and time.time() < deadline:
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert os.path.exists(ckpt10)
  out = _main(common + [f"--workdir={killed}"], env=env)
  assert out.returncode == 0, out.stderr[-3000:]
  assert _train_losses(whole) == _train_losses(killed)

  import orbax.checkpoint as ocp  # the final parameters are bit-identical
  a = ocp.PyTreeCheckpointer().restore(os.path.join(whole, "checkpoints", "40", "state"))
  b = ocp.PyTreeCheckpointer().restore(os.path.join(killed, "checkpoints", "40", "state"))
  for x, y in zip(jax_leaves(a["params"]), jax_leaves(b["params"])):
    np.testing.assert_array_equal(x, y)


def jax_leaves(tree):
  import jax
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


def signal_a_running_main(workdir: str, signum: int) -> tuple[int, str]:
  """Starts a long lm.main run in `workdir`, sends `signum` once its loop has logged, and
  returns (exit code, stderr)."""
  proc = subprocess.Popen(
      [sys.executable, "-m", "lm.main", "--config=configs/t5.py:runlocal",
       "--config.train.num_steps=100000", "--config.ckpt.every_steps=100000",
       f"--workdir={workdir}"], cwd=REPO,
      env={**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"},
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  metrics = os.path.join(workdir, "metrics.jsonl")
  deadline = time.time() + 300
  while proc.poll() is None and time.time() < deadline and not (
      os.path.exists(metrics) and os.path.getsize(metrics) > 0):  # the loop is running
    time.sleep(0.1)
  proc.send_signal(signum)
  _, err = proc.communicate(timeout=300)
  return proc.returncode, err


@pytest.mark.slow
def test_sigterm_saves_and_exits_with_the_preempted_code(tmp_path):
  workdir = str(tmp_path / "run")
  returncode, err = signal_a_running_main(workdir, signal.SIGTERM)
  assert returncode == 75, err[-3000:]  # "preempted: resume later"
  assert "preempted (SIGTERM)" in err and "Traceback" not in err
  saved = os.listdir(os.path.join(workdir, "checkpoints"))
  assert len(saved) == 1 and int(saved[0]) >= 20, saved


def _free_port():
  import socket
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _two_processes(args, workdir):
  """Runs lm.main as 2 processes x 4 CPU devices (jax.distributed, gloo)."""
  port = _free_port()
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled",
         "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
  procs = [subprocess.Popen(
      [sys.executable, "-m", "lm.main", *args, f"--workdir={workdir}",
       f"--coordinator_address=localhost:{port}", "--num_processes=2", f"--process_id={i}"],
      cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
      for i in range(2)]
  errs = [p.communicate(timeout=600)[1] for p in procs]
  for p, err in zip(procs, errs):
    assert p.returncode == 0, err[-3000:]


@pytest.mark.slow
def test_two_processes_match_one_process_and_resume_across_process_counts(tmp_path):
  """2 processes x 4 devices == 1 process x 8 devices; the data position survives 2 -> 1."""
  common = ["--config=configs/t5.py:runlocal", "--config.train.log_every=2",
            "--config.train.eval_every=0", "--config.ckpt.every_steps=4",
            "--config.ckpt.async_save=False"]
  one, two = str(tmp_path / "one"), str(tmp_path / "two")
  eight = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
  out = _main(common + ["--config.train.num_steps=8", f"--workdir={one}"], env=eight)
  assert out.returncode == 0, out.stderr[-3000:]
  _two_processes(common + ["--config.train.num_steps=4"], two)
  out = _main(common + ["--config.train.num_steps=8", f"--workdir={two}"], env=eight)
  assert out.returncode == 0, out.stderr[-3000:]
  a, b = _train_losses(one), _train_losses(two)
  assert sorted(a) == sorted(b) == [2, 4, 6, 8]
  np.testing.assert_allclose([b[s] for s in sorted(b)], [a[s] for s in sorted(a)], rtol=2e-5)


def test_init_from_hugging_face_t5_and_from_another_run(tmp_path):
  import dataclasses

  import flax.linen as nn
  import jax

  from lm import checkpoint, optim, partitioning, program, steps, train
  from lm import config as config_lib
  from lm.checkpoint import hf_t5
  from lm.model import Transformer

  config = _config(steps=2)
  model_config = config_lib.model_config(config)
  model = Transformer(model_config)
  d = config_lib.data_spec(config)
  batch = program.dummy_batch(d.architecture, d.inputs_length, d.targets_length)
  params = nn.unbox(model.init(jax.random.key(7), batch)["params"])
  hf_dir = str(tmp_path / "hf")
  hf_t5.save_hf_t5(hf_dir, model_config, params)

  tx = optim.make_optimizer(config_lib.optim_config(config),
                            optim.make_schedule(config_lib.schedule_config(config)))
  abstract, boxed = steps.abstract_train_state(jax.random.key(0), batch, model=model, tx=tx)
  mesh = partitioning.make_mesh(config.mesh.shape)
  shardings = partitioning.state_shardings(abstract, boxed, mesh, tx=tx)
  got = train.init_params_from(hf_dir, model_config, abstract.params, shardings.params)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(got)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

  wider = dataclasses.replace(model_config, emb_dim=96)
  abstract_w, _ = steps.abstract_train_state(jax.random.key(0), batch, model=Transformer(wider),
                                             tx=tx)
  with pytest.raises(checkpoint.IncompatibleCheckpointError, match="emb_dim=64"):
    train.init_params_from(hf_dir, wider, abstract_w.params, None)

  # Fine-tuning-style start from another run's workdir and from the HF directory, checked
  # by effect: the first logged loss of each is the loss of ITS SOURCE's params on the
  # first batch (eval_step, no dropout in runlocal), not of fresh ones (the base run's own
  # first loss: the same config from scratch).
  from lm import metrics as metrics_lib, restore
  from lm.data import pipeline as pipeline_lib
  base = str(tmp_path / "base")
  train.train_and_evaluate(validate(_config(steps=2, **{"train.log_every": 1})), base)
  scratch = _train_losses(base)[1]
  run = program.build_run(validate(_config(steps=2)))
  it = pipeline_lib.DataPipeline(run.data_spec).train_iterator()
  first = partitioning.make_global_batch(next(it), run.mesh)
  it.close()
  for source, source_params in ((base, restore.load_run(base).params), (hf_dir, params)):
    ft = str(tmp_path / f"ft_{os.path.basename(source)}")
    train.train_and_evaluate(validate(_config(steps=2, **{"ckpt.init_from": source,
                                                          "train.log_every": 1})), ft)
    with run.axis_rules():
      placed = jax.device_put(source_params, run.state_shardings.params)
      want = metrics_lib.compute(jax.device_get(run.eval_step(placed, first)))["loss"]
    got = _train_losses(ft)[1]
    np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=source)
    assert abs(got - scratch) > 1e-3 * abs(scratch), (source, got, scratch)


def test_help_explains_the_flags():
  out = _main(["--helpshort"])  # absl prints the help and exits (status 1, its convention)
  for flag in ("--config", "--workdir", "--coordinator_address"):
    assert flag in out.stdout


def _readme_main_command():
  """The `python -m lm.main ...` part of README.md's first command."""
  with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
    text = f.read()
  first_block = text.split("```bash\n", 1)[1].split("```", 1)[0]
  command = first_block.strip().split("&& python -m lm.main ", 1)[1]
  return command.split()


@pytest.mark.slow
def test_readme_main_job_runs(tmp_path):
  """README's main job, exactly as written (but in a temporary workdir), end to end."""
  args = [a for a in _readme_main_command() if not a.startswith("--workdir=")]
  workdir = str(tmp_path / "t5_local")
  # As a newcomer runs it: no wandb settings, and one CPU device (not the tests' 8).
  out = _main(args + [f"--workdir={workdir}"],
              env={"WANDB_MODE": None, "WANDB_API_KEY": None, "XLA_FLAGS": None})
  assert out.returncode == 0, out.stderr[-3000:]
  losses = _train_losses(workdir)
  steps = sorted(losses)
  assert steps[-1] == 1000
  assert losses[steps[-1]] < losses[steps[0]] - 1.0, losses  # visibly learning
  evals = [m for m in _metrics(workdir) if "eval_loss" in m]
  assert evals and evals[-1]["step"] == 1000
  assert "1000" in os.listdir(os.path.join(workdir, "checkpoints"))
  wandb_dir = os.path.join(workdir, "wandb")
  assert any(d.startswith("offline-run-") for d in os.listdir(wandb_dir))


@pytest.mark.parametrize("content", [b"", b"\n\n  \n", b"\xff\xfe\xfa\n\xc3\x28\n"])
def test_empty_or_undecodable_corpus_is_a_clear_error(tmp_path, content):
  corpus = tmp_path / "corpus.txt"
  corpus.write_bytes(content)
  workdir = tmp_path / "run"
  out = _main(["--config=configs/t5.py:runlocal", "--config.data.format=text",
               f"--config.data.paths=('{corpus}',)", "--config.data.on_decode_error=skip",
               f"--workdir={workdir}"], env={"XLA_FLAGS": ""})
  assert out.returncode == 2, out.stderr[-2000:]
  assert "error:" in out.stderr and "Traceback" not in out.stderr
  assert str(corpus) in out.stderr or "document" in out.stderr
  assert not workdir.exists() or not any(workdir.iterdir())


def test_a_failed_init_from_closes_the_iterator_and_writes_no_config(tmp_path, monkeypatch):
  """ckpt.init_from naming a directory with no checkpoint: the error names the path, the
  train iterator that was opened is closed, and config.json is not written (the run
  never became good, so a later run is not mistaken for a resume of it)."""
  from lm import train
  from lm.data import pipeline
  closed = []
  real = pipeline.DataPipeline.train_iterator

  def train_iterator(self):
    iterator = real(self)
    close = iterator.close
    iterator.close = lambda: closed.append(1) or close()
    return iterator

  monkeypatch.setattr(pipeline.DataPipeline, "train_iterator", train_iterator)
  missing = str(tmp_path / "no_such_run")
  workdir = tmp_path / "run"
  with pytest.raises(Exception, match="no_such_run"):
    train.train_and_evaluate(validate(_config(steps=2, **{"ckpt.init_from": missing})),
                             str(workdir))
  assert closed == [1]
  assert not (workdir / "config.json").exists()
  assert not (workdir / "lock").exists()


def test_preemption_is_agreed_across_processes_only_at_log_steps(monkeypatch):
  """Several processes: no all-gather between multiples of `every`; at one, any process's
  flag stops all. One process: its own flag at every step, no collective."""
  import jax
  from jax.experimental import multihost_utils
  from lm import train
  gathered = []

  def allgather(x):
    gathered.append(int(x[0]))
    return np.stack([x, np.array([0], np.int32)])  # the other process was not signalled

  monkeypatch.setattr(multihost_utils, "process_allgather", allgather)
  p = train.Preemption()
  p.requested = True
  monkeypatch.setattr(jax, "process_count", lambda: 1)
  assert p.should_stop(3, every=5) and not gathered
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  assert [p.should_stop(s, every=5) for s in range(1, 11)] == [False] * 4 + [True] + [False] * 4 + [True]
  assert gathered == [1, 1]
  p.requested = False
  assert not p.should_stop(15, every=5) and gathered == [1, 1, 0]


def test_init_lowers_threefry_to_the_gpu_kernel_and_leaves_other_platforms_alone():
  """The init program for a GPU calls JAX's threefry kernel (not the unrolled rounds XLA
  takes a minute to compile); the CPU's program has none; the global flag is restored."""
  import jax
  from lm import program
  run = program.build_run(validate(_config(steps=1)))
  with run.axis_rules():
    cuda = run.lower_init(("cuda",)).as_text()
    cpu = run.lower_init(("cpu",)).as_text()
  assert "cu_threefry2x32" in cuda and "cu_threefry2x32" not in cpu
  assert not jax.config.jax_threefry_gpu_kernel_lowering
