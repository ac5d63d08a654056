"""A run's workdir, checkpoints and exits under faults: remote (gs://) workdirs, locks,
divergence, unwritable directories, config.json, preemption exit codes and launchers."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import fake_gcs
from lm.validate import validate
from test_train import REPO, _config, _main, _metrics, signal_a_running_main

LOCK_HOLDER = """
import sys, time
from lm import workdir
with workdir.WorkdirLock(sys.argv[1]):
  print("locked", flush=True)
  time.sleep(600)
"""


def _hold_lock(path):
  proc = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(path)], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": REPO}, stdout=subprocess.PIPE,
                          text=True)
  assert proc.stdout.readline().strip() == "locked"
  return proc


# -- item c: one run per workdir -------------------------------------------------------------

def test_second_run_on_a_workdir_is_refused_and_a_killed_runs_lock_is_not_stale(tmp_path):
  from lm import workdir
  holder = _hold_lock(tmp_path)
  try:
    with pytest.raises(workdir.WorkdirInUseError, match=f"in use by pid {holder.pid} "):
      with workdir.WorkdirLock(tmp_path):
        pass
  finally:
    holder.send_signal(signal.SIGKILL)  # as if the run were killed: no clean-up
    holder.wait()
  with workdir.WorkdirLock(tmp_path):  # the kernel released the dead run's lock
    assert json.loads((tmp_path / "lock").read_text())["pid"] == os.getpid()
  assert not (tmp_path / "lock").exists()


def test_filesystem_without_flock_falls_back_to_a_lock_record(tmp_path, monkeypatch):
  import errno
  import fcntl

  from lm import workdir

  def no_locks(fd, op):
    raise OSError(errno.ENOLCK, "No locks available")
  monkeypatch.setattr(fcntl, "flock", no_locks)
  with workdir.WorkdirLock(tmp_path):
    assert json.loads((tmp_path / "lock").read_text())["pid"] == os.getpid()
  assert not (tmp_path / "lock").exists()


def test_remote_lock_refuses_a_live_run_and_takes_over_a_stale_one(tmp_path, monkeypatch):
  import socket

  from etils import epath

  from lm import workdir
  monkeypatch.chdir(tmp_path)
  with fake_gcs.installed(tmp_path / "gcs"):
    run = epath.Path("gs://bucket/run")
    run.mkdir(parents=True)
    lock_file = tmp_path / "gcs" / "bucket" / "run" / "lock"
    lock_file.write_text(json.dumps({"pid": 4242, "host": "other-vm", "time": time.time()}))
    with pytest.raises(workdir.WorkdirInUseError, match="pid 4242 on host other-vm"):
      workdir.WorkdirLock(run).__enter__()
    lock_file.write_text(json.dumps({"pid": 4242, "host": "other-vm",
                                     "time": time.time() - 3600}))  # stale: a dead VM
    with workdir.WorkdirLock(run):
      assert json.loads(lock_file.read_text())["host"] == socket.gethostname()
    holder = subprocess.Popen(["sleep", "600"])  # a live pid on this host
    try:
      lock_file.write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(),
                                       "time": time.time() - 3600}))
      with pytest.raises(workdir.WorkdirInUseError, match=f"pid {holder.pid}"):
        workdir.WorkdirLock(run).__enter__()
    finally:
      holder.kill()
      holder.wait()
    with workdir.WorkdirLock(run):  # that pid is gone now
      pass
    assert not lock_file.exists()
  assert not os.path.exists(tmp_path / "gs:")


# -- item 7: gs:// workdirs ------------------------------------------------------------------

def test_remote_workdir_files_go_through_epath(tmp_path, monkeypatch):
  """config.json, metrics.jsonl (no append on object stores), checkpoints on gs://."""
  import jax
  import jax.numpy as jnp

  from lm import checkpoint, train, writers
  monkeypatch.chdir(tmp_path)
  with fake_gcs.installed(tmp_path / "gcs"):
    run = "gs://bucket/run"
    train.write_config(_config(steps=2).to_dict(), run)
    j = writers.JsonlWriter(run + "/metrics.jsonl")
    j.write(1, {"loss": 2.0})
    j.write(2, {"loss": 1.0})
    j.close()
    j = writers.JsonlWriter(run + "/metrics.jsonl", start_step=1)  # resumed at 1
    j.write(2, {"loss": 1.5})
    j.close()
    state = {"w": jnp.arange(6.0), "step": jnp.int32(3)}
    ckpt = checkpoint.CheckpointManager(run + "/checkpoints", every_steps=1, async_save=False)
    ckpt.save(3, state, data_state={"pos": 3})
    ckpt.close()
    ckpt = checkpoint.CheckpointManager(run + "/checkpoints")
    restored, data = ckpt.restore_or_none(jax.eval_shape(lambda: state))
    ckpt.close()
  local = tmp_path / "gcs" / "bucket" / "run"
  assert json.loads((local / "config.json").read_text())["train"]["num_steps"] == 2
  assert [json.loads(l)["loss"] for l in (local / "metrics.jsonl").read_text().splitlines()
          ] == [2.0, 1.5]
  assert (local / "checkpoints" / "3").is_dir() and data == {"pos": 3}
  np.testing.assert_array_equal(restored["w"], np.arange(6.0))
  assert not os.path.exists(tmp_path / "gs:")  # nothing went to a local folder "gs:"


def test_remote_workdir_without_its_filesystem_package_is_a_clear_error(monkeypatch):
  from lm import workdir
  monkeypatch.setitem(workdir._REMOTE_MODULES, "gs",  # pylint: disable=protected-access
                      (("no_such_module_xyz", "no-such-package"),))
  with pytest.raises(ValueError, match="gs://b/run needs no-such-package: pip install"):
    workdir.check_remote_support("gs://b/run")
  with pytest.raises(ValueError, match="unsupported scheme ftp://"):
    workdir.check_remote_support("ftp://host/run")
  workdir.check_remote_support("relative/local/dir")  # local: nothing to check


@pytest.mark.slow
def test_train_and_resume_on_a_remote_workdir(tmp_path, monkeypatch):
  from lm import train
  monkeypatch.chdir(tmp_path)
  with fake_gcs.installed(tmp_path / "gcs"):
    no_eval = {"train.eval_every": 0}
    train.train_and_evaluate(validate(_config(steps=2, **no_eval)), "gs://bucket/run")
    out = train.train_and_evaluate(validate(_config(steps=4, **no_eval)), "gs://bucket/run")
  local = tmp_path / "gcs" / "bucket" / "run"
  assert np.isfinite(out["loss"])
  assert sorted(os.listdir(local / "checkpoints")) == ["2", "4"]
  assert [m["step"] for m in _metrics(local)] == [2, 4]
  assert {"config.json", "config.step2.json", "metrics.jsonl"} <= set(os.listdir(local))
  assert not (local / "lock").exists() and not os.path.exists(tmp_path / "gs:")


# -- items a, d, e: divergence, config.json, unwritable checkpoints -------------------------

def test_check_finite_names_the_metric_and_the_last_checkpoint():
  from lm import train
  train._check_finite({"loss": 2.0, "grad_norm": 1.0}, 10, 5)  # pylint: disable=protected-access
  with pytest.raises(train.NonFiniteError, match=r"loss nan .*up to 10.*step 5\)"):
    train._check_finite({"loss": float("nan"), "grad_norm": 1.0}, 10, 5)  # pylint: disable=protected-access
  with pytest.raises(train.NonFiniteError, match="grad_norm inf.*no checkpoint was saved"):
    train._check_finite({"loss": 1.0, "grad_norm": float("inf")}, 3, None)  # pylint: disable=protected-access


def test_diverging_run_stops_before_saving_a_non_finite_state(tmp_path):
  from lm import checkpoint, train
  workdir = tmp_path / "run"
  config = _config(steps=6, **{"optim.name": "adamw", "schedule.base_lr": 1e30,
                               "ckpt.every_steps": 1, "ckpt.keep": 1,
                               "train.eval_every": 0})
  with pytest.raises(train.NonFiniteError, match="training diverged"):
    train.train_and_evaluate(validate(config), str(workdir))
  steps = checkpoint.CheckpointManager(workdir / "checkpoints").all_steps()
  assert steps == [1]  # the good step-1 state; the non-finite step 2 was never saved
  assert all(np.isfinite(m["loss"]) for m in _metrics(workdir) if "loss" in m)


def test_config_json_is_never_replaced_by_a_different_one(tmp_path):
  from lm import train
  first = _config(steps=4)
  train.write_config(first.to_dict(), tmp_path)
  original = (tmp_path / "config.json").read_text()
  train.write_config(first.to_dict(), tmp_path, resumed_at=4)  # same config on resume: untouched
  assert sorted(os.listdir(tmp_path)) == ["config.json"]
  train.write_config(_config(steps=8).to_dict(), tmp_path, resumed_at=4)
  assert (tmp_path / "config.json").read_text() == original
  assert json.loads((tmp_path / "config.step4.json").read_text())["train"]["num_steps"] == 8


def test_unusable_checkpoint_directory_fails_before_compiling(tmp_path, monkeypatch):
  from lm import checkpoint, steps, train
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "checkpoints").write_text("a file where the checkpoint directory should be")
  traced = []
  monkeypatch.setattr(steps, "train_step", lambda *a, **k: traced.append(1))
  with pytest.raises(checkpoint.CheckpointSaveError, match="checkpoints is not writable"):
    train.train_and_evaluate(validate(_config(steps=2)), str(workdir))
  assert not traced  # the train step was never traced / compiled
  assert sorted(os.listdir(workdir)) == ["checkpoints"]  # no config.json, lock released


# -- item h: preemption exit code and the launchers ------------------------------------------

def test_slurm_script_requeues_a_preempted_job_only_if_no_task_failed(tmp_path):
  """srun reports its tasks' highest status: one task's 75 must not hide another's crash."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  # A fake srun that runs the task command once per task with SLURM_PROCID set, and exits
  # with the highest status, as srun does; a fake python exits with its task's status.
  (bin_dir / "srun").write_text(
      '#!/bin/bash\necho "srun $1" >> "$LOG"\nshift\nmax=0\n'
      'for i in $(seq 0 $((NTASKS - 1))); do SLURM_PROCID=$i "$@"; s=$?; '
      '[ "$s" -gt "$max" ] && max=$s; done\nexit $max\n')
  (bin_dir / "python").write_text(
      '#!/bin/bash\necho "task $SLURM_PROCID: python $*" >> "$LOG"\ncodes=($TASK_EXITS)\n'
      'exit "${codes[$SLURM_PROCID]}"\n')
  (bin_dir / "scontrol").write_text("#!/bin/bash\necho \"scontrol $*\" >> \"$LOG\"\n")
  for f in bin_dir.iterdir():
    f.chmod(0o755)
  log = tmp_path / "log"
  for exits, returncode, requeued in (("75 75", 75, True), ("0 0", 0, False), ("1 1", 1, False),
                                      ("75 1", 1, False), ("1 75", 1, False),
                                      ("75 0", 75, True)):
    log.write_text("")
    out = subprocess.run(
        ["bash", os.path.join(REPO, "launch", "slurm.sh"), "--config=c x", "--workdir=w"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(log),
             "NTASKS": "2", "TASK_EXITS": exits, "SLURM_JOB_ID": "123",
             "LM_VENV": "/nonexistent"})
    assert out.returncode == returncode, (exits, out.stderr)
    calls = log.read_text().splitlines()
    assert calls[:3] == ["srun --kill-on-bad-exit=1", "task 0: python -m lm.main --config=c x "
                         "--workdir=w", "task 1: python -m lm.main --config=c x --workdir=w"]
    assert ("scontrol requeue 123" in calls) == requeued, exits
    assert ("not requeueing" in out.stderr) == (exits in ("75 1", "1 75"))


def test_local_launcher_stops_the_sweep_when_a_point_is_preempted(tmp_path):
  from launch import local
  from launch import points as points_lib
  points = [points_lib.Point(name=n, config="c", overrides={}, reference={}) for n in ("a", "b")]
  commands = [[sys.executable, "-c", "import sys; sys.exit(75)"],
              [sys.executable, "-c", "open('ran_b', 'w')"]]
  with pytest.raises(local.SweepPreempted):
    local.run_points(points, commands, str(tmp_path))
  assert not (tmp_path / "ran_b").exists()
  launches = [json.loads(l) for l in (tmp_path / "launch.jsonl").read_text().splitlines()]
  assert [(l["name"], l["returncode"]) for l in launches] == [("a", local.EXIT_PREEMPTED)]


def test_exit_codes_agree_between_main_and_the_launchers():
  from launch import local
  from lm import main
  assert main.EXIT_PREEMPTED == local.EXIT_PREEMPTED == 75
  with open(os.path.join(REPO, "launch", "slurm.sh"), encoding="utf-8") as f:
    assert f"EXIT_PREEMPTED={main.EXIT_PREEMPTED}" in f.read()
  assert len({0, 1, main.EXIT_BAD_INPUT, main.EXIT_DIVERGED, main.EXIT_PREEMPTED,
              main.EXIT_INTERRUPTED}) == 6


# -- item m and exits through lm.main ----------------------------------------------------

@pytest.mark.slow
def test_main_exit_codes_for_a_file_workdir_a_busy_workdir_and_divergence(tmp_path):
  base = ["--config=configs/t5.py:runlocal", "--config.train.num_steps=4",
          "--config.train.eval_every=0", "--config.ckpt.async_save=False"]
  a_file = tmp_path / "file"
  a_file.write_text("x")
  out = _main(base + [f"--workdir={a_file}"])
  assert out.returncode == 2, out.stderr[-2000:]
  assert "error: " in out.stderr and str(a_file) in out.stderr
  assert "Traceback" not in out.stderr

  busy = tmp_path / "busy"
  busy.mkdir()
  holder = _hold_lock(busy)
  try:
    out = _main(base + [f"--workdir={busy}"])
  finally:
    holder.kill()
    holder.wait()
  assert out.returncode == 2 and f"in use by pid {holder.pid}" in out.stderr, out.stderr[-2000:]
  assert "Traceback" not in out.stderr and sorted(os.listdir(busy)) == ["lock"]

  out = _main(base + [f"--workdir={tmp_path / 'nan'}", "--config.optim.name=adamw",
                      "--config.schedule.base_lr=1e30"])
  assert out.returncode == 3, out.stderr[-2000:]
  assert "error: training diverged" in out.stderr and "Traceback" not in out.stderr


def test_errors_raised_inside_orbax_are_recognised_for_the_one_line_form():
  from etils import epath
  from orbax.checkpoint._src.path import gcs_utils

  from lm import main
  with pytest.raises(ValueError) as inside:
    gcs_utils.rmtree(epath.Path("/not/a/bucket"))
  assert main._is_checkpoint_io_error(inside.value)  # pylint: disable=protected-access
  with pytest.raises(RuntimeError) as outside:
    raise RuntimeError("a bug in lm")
  assert not main._is_checkpoint_io_error(outside.value)  # pylint: disable=protected-access


# -- Ctrl-C (SIGINT) is a stop with a checkpoint, as SIGTERM ---------------------------------

def test_ctrl_c_saves_a_checkpoint_and_stops_like_sigterm(tmp_path, monkeypatch):
  """A real SIGINT during step 3: no KeyboardInterrupt; the loop saves step 3 and raises
  Preempted naming Ctrl-C (lm.main: exit 130); the handlers are put back afterwards."""
  from lm import checkpoint, train
  real = train.Preemption.should_stop
  calls = []

  def should_stop(self, *args):
    calls.append(1)
    if len(calls) == 3:
      os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C in the terminal sends
    return real(self, *args)

  monkeypatch.setattr(train.Preemption, "should_stop", should_stop)
  before = signal.getsignal(signal.SIGINT)
  workdir = str(tmp_path / "run")
  with pytest.raises(train.Preempted) as e:
    train.train_and_evaluate(validate(_config(steps=8)), workdir)
  assert e.value.step == 3 and e.value.signum == signal.SIGINT
  assert "interrupted (SIGINT, Ctrl-C) at step 3; checkpoint saved" in str(e.value)
  assert checkpoint.checkpoint_steps(os.path.join(workdir, "checkpoints")) == [2, 3]
  assert signal.getsignal(signal.SIGINT) is before


def test_a_second_ctrl_c_stops_at_once():
  from lm import train
  with train.Preemption() as preemption:
    signal.raise_signal(signal.SIGINT)
    assert preemption.requested and preemption.signum == signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
      signal.raise_signal(signal.SIGINT)
  with train.Preemption() as preemption:  # SIGTERM first: the exit stays "preempted"
    signal.raise_signal(signal.SIGTERM)
    signal.raise_signal(signal.SIGINT)
    assert preemption.signum == signal.SIGTERM


@pytest.mark.slow
def test_main_exits_130_after_saving_on_ctrl_c(tmp_path):
  from lm import main
  workdir = str(tmp_path / "run")
  returncode, err = signal_a_running_main(workdir, signal.SIGINT)
  assert returncode == main.EXIT_INTERRUPTED == 130, err[-3000:]
  assert "KeyboardInterrupt" not in err and "Traceback" not in err, err[-3000:]
  assert err.strip().splitlines()[-1].startswith("interrupted (SIGINT, Ctrl-C) at step ")
  assert len(os.listdir(os.path.join(workdir, "checkpoints"))) == 1


_DISK_FULL_DRIVER = """
import resource, signal, sys
from lm import checkpoint, main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
real_save = checkpoint.CheckpointManager.save
def save(self, step, *args, **kwargs):
  if step == 4:  # the second save: every write past 64 KiB fails from now on, as on a full disk
    self.wait()  # (once the first save is complete)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, resource.RLIM_INFINITY))
  return real_save(self, step, *args, **kwargs)
checkpoint.CheckpointManager.save = save
sys.argv = ["lm.main"] + sys.argv[1:]
main.run()
"""


@pytest.mark.slow
def test_disk_full_at_a_save_stops_the_run_with_one_last_error_line(tmp_path):
  """A real OS write failure in the second (async) save of lm.main: the run stops before
  it would save again, the `error:` line is the last line of output, no tracebacks."""
  workdir = tmp_path / "run"
  out = subprocess.run(
      [sys.executable, "-c", _DISK_FULL_DRIVER, "--config=configs/t5.py:runlocal",
       "--config.train.num_steps=12", "--config.train.log_every=1",
       "--config.train.eval_every=0", "--config.ckpt.every_steps=2", f"--workdir={workdir}"],
      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900,
      env={**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"})
  text = out.stdout
  assert out.returncode == 2, text[-3000:]
  assert "Traceback" not in text and "Event loop is closed" not in text, text[-3000:]
  last = text.strip().splitlines()[-1]  # stdout and stderr together, in order
  assert last.startswith("error: an asynchronous checkpoint save in ") and "errno 27" in last
  steps = [m["step"] for m in _metrics(str(workdir)) if "loss" in m]
  assert 4 <= steps[-1] <= 6, steps  # stopped before the next save would start
  from lm import checkpoint
  assert checkpoint.checkpoint_steps(str(workdir / "checkpoints")) == [2]
