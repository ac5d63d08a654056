"""Checkpoint round trips, resharding, keep-K / best, foreign and incompatible directories."""

import logging
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from lm import checkpoint, partitioning
from lm.steps import TrainState


def _state(emb_shape=(16, 8), seed=0):
  k = jax.random.key(seed)
  params = {"embedding": jax.random.normal(k, emb_shape),
            "mlp": {"wi": jax.random.normal(jax.random.fold_in(k, 1), (8, 32))}}
  tx = optax.adamw(1e-3)
  return TrainState(step=jnp.asarray(7, jnp.int32), params=params, opt_state=tx.init(params),
                    rng=jax.random.key(42))


def _shardings(state, mesh, emb_spec, wi_spec):
  def spec(path, x):
    names = [getattr(k, "key", getattr(k, "name", None)) for k in path]
    if x.ndim == 2 and "embedding" in names:
      return NamedSharding(mesh, emb_spec)
    if x.ndim == 2 and "wi" in names:
      return NamedSharding(mesh, wi_spec)
    return NamedSharding(mesh, P())
  return jax.tree_util.tree_map_with_path(spec, state)


def _sig(state, **model):
  return checkpoint.run_signature({"emb_dim": 8, **model}, state)


def _assert_tree_equal(a, b):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
      x, y = jax.random.key_data(x), jax.random.key_data(y)
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_round_trip_reshard_and_data_state(tmp_path):
  mesh8 = partitioning.make_mesh((2, 2, 2))
  state = _state()
  sh8 = _shardings(state, mesh8, P("tensor", "fsdp"), P("fsdp", "tensor"))
  state = jax.device_put(state, sh8)
  ckpt = checkpoint.CheckpointManager(tmp_path / "ckpt", every_steps=5, keep=2,
                                      signature=_sig(state))
  assert not ckpt.save(7, state)  # not due
  assert ckpt.save(10, state, data_state={"pos": 123, "epoch": 1})
  assert ckpt.save(11, state, data_state=b"\x00grain-state", force=True)
  ckpt.close()

  abstract = jax.eval_shape(lambda: state)
  # Restore onto a different mesh shape (1, 8, 1) ...
  mesh_b = partitioning.make_mesh((1, 8, 1))
  sh_b = _shardings(state, mesh_b, P(None, "fsdp"), P("fsdp", None))
  ckpt = checkpoint.CheckpointManager(tmp_path / "ckpt", signature=_sig(state))
  assert ckpt.latest_step() == 11
  restored, data = ckpt.restore(abstract, sh_b)
  assert data == b"\x00grain-state"
  _assert_tree_equal(restored, state)
  assert restored.params["embedding"].sharding.spec == P(None, "fsdp")
  assert isinstance(restored, TrainState) and int(restored.step) == 7
  # ... and onto one device, at a given step.
  mesh1 = partitioning.make_mesh((1, 1, 1), devices=jax.devices()[:1])
  restored, data = ckpt.restore(abstract, _shardings(state, mesh1, P(), P()), step=10)
  assert data == {"pos": 123, "epoch": 1}
  assert restored.params["mlp"]["wi"].sharding.device_set == {jax.devices()[0]}
  _assert_tree_equal(restored, state)
  ckpt.close()


def test_keep_last_k_and_best(tmp_path):
  state = _state()
  ckpt = checkpoint.CheckpointManager(tmp_path, every_steps=1, keep=2, keep_best=1,
                                      async_save=False, signature=_sig(state))
  losses = {1: 3.0, 2: 1.0, 3: 2.5, 4: 2.6, 5: 2.7}
  for step, loss in losses.items():
    ckpt.save(step, state, metrics={"eval_loss": loss})
  ckpt.wait()
  assert ckpt.all_steps() == [2, 4, 5]  # last two + best (lowest eval_loss)
  ckpt.close()
  plain = checkpoint.CheckpointManager(tmp_path / "plain", every_steps=1, keep=3,
                                       async_save=False, signature=_sig(state))
  for step in range(1, 6):
    plain.save(step, state)
  assert plain.all_steps() == [3, 4, 5]
  plain.close()


def test_keep_steps_are_saved_and_kept(tmp_path):
  """ckpt.keep_steps: saved although every_steps would not, kept although keep would not."""
  state = _state()
  ckpt = checkpoint.CheckpointManager(tmp_path, every_steps=4, keep=1, keep_steps=(3, 6),
                                      async_save=False, signature=_sig(state))
  assert [s for s in range(1, 10) if ckpt.save(s, state)] == [3, 4, 6, 8]
  ckpt.wait()
  assert ckpt.all_steps() == [3, 6, 8]
  ckpt.close()
  with pytest.raises(ValueError, match=r"ckpt.keep_steps must be positive steps, got \(0,\)"):
    checkpoint.CheckpointManager(tmp_path / "bad", keep_steps=(0,))


def test_half_written_checkpoint_is_ignored(tmp_path):
  state = _state()
  ckpt = checkpoint.CheckpointManager(tmp_path, every_steps=1, async_save=False,
                                      signature=_sig(state))
  ckpt.save(1, state)
  ckpt.close()
  # A save killed mid-way leaves orbax's tmp directory, never renamed to "2".
  tmp = tmp_path / "2.orbax-checkpoint-tmp-1700000000000000"
  (tmp / "state").mkdir(parents=True)
  (tmp / "state" / "garbage").write_text("partial")
  ckpt = checkpoint.CheckpointManager(tmp_path, signature=_sig(state))
  assert ckpt.latest_step() == 1
  restored, _ = ckpt.restore(jax.eval_shape(lambda: state))
  assert int(restored.step) == 7
  ckpt.close()


def test_incompatible_and_foreign_checkpoints_raise(tmp_path):
  state = _state()
  ckpt = checkpoint.CheckpointManager(tmp_path / "a", every_steps=1, async_save=False,
                                      signature=_sig(state))
  ckpt.save(3, state)
  ckpt.close()
  other = _state(emb_shape=(32, 8))
  bad = checkpoint.CheckpointManager(tmp_path / "a", signature=_sig(other))
  with pytest.raises(checkpoint.IncompatibleCheckpointError,
                     match=r"param embedding has shape \[16, 8\] there vs \[32, 8\] here"):
    bad.restore_or_none(jax.eval_shape(lambda: other))
  bad.close()
  cfg = checkpoint.CheckpointManager(tmp_path / "a", signature=_sig(state, dropout_rate=0.1))
  with pytest.raises(checkpoint.IncompatibleCheckpointError, match="dropout_rate"):
    cfg.restore(jax.eval_shape(lambda: state))
  cfg.close()
  # A directory with a step folder written by something else.
  foreign = tmp_path / "foreign" / "5"
  foreign.mkdir(parents=True)
  (foreign / "weights.bin").write_bytes(b"x")
  f = checkpoint.CheckpointManager(tmp_path / "foreign", signature=_sig(state))
  assert f.latest_step() == 5  # orbax lists it, so our meta check must reject it
  with pytest.raises(checkpoint.IncompatibleCheckpointError, match="damaged or was not written by lm"):
    f.restore_or_none(jax.eval_shape(lambda: state))
  f.close()


def test_init_from_params_only(tmp_path):
  state = _state(seed=3)
  ckpt = checkpoint.CheckpointManager(tmp_path, every_steps=1, async_save=False,
                                      signature=_sig(state))
  ckpt.save(9, state)
  ckpt.close()
  abstract_params = jax.eval_shape(lambda: state.params)
  params = checkpoint.restore_params(tmp_path, abstract_params)
  _assert_tree_equal(params, state.params)
  wrong = jax.eval_shape(lambda: _state(emb_shape=(4, 8)).params)
  with pytest.raises(checkpoint.IncompatibleCheckpointError, match="embedding"):
    checkpoint.restore_params(tmp_path, wrong)


# -- integrity: checksums, damaged steps, fallback ------------------------------------------

def _saved(tmp_path, steps=(1, 2), **kwargs):
  state = _state()
  ckpt = checkpoint.CheckpointManager(tmp_path, every_steps=1, async_save=False,
                                      signature=_sig(state), **kwargs)
  for step in steps:
    ckpt.save(step, state.replace(step=jnp.asarray(step, jnp.int32)),
              data_state={"pos": step})
  ckpt.close()
  return state


def _largest_file(directory):
  files = [p for p in directory.rglob("*") if p.is_file()]
  return max(files, key=lambda p: p.stat().st_size)


def _overwrite_8_bytes(path):
  raw = bytearray(path.read_bytes())
  mid = len(raw) // 2
  raw[mid:mid + 8] = b"\xff\x00\xff\x00\xff\x00\xff\x00"
  path.write_bytes(bytes(raw))


def test_checksums_detect_changed_and_swapped_elements_regardless_of_sharding():
  x = jnp.arange(64, dtype=jnp.float32).reshape(8, 8)
  base = checkpoint.state_checksums({"x": x})
  mesh = partitioning.make_mesh((2, 2, 2))
  sharded = jax.device_put(x, NamedSharding(mesh, P("data", "fsdp")))
  assert checkpoint.state_checksums({"x": sharded}) == base
  swapped = x.at[0, 0].set(x[0, 1]).at[0, 1].set(x[0, 0])
  assert checkpoint.state_checksums({"x": swapped}) != base
  assert checkpoint.state_checksums({"x": x.at[3, 3].add(1e-6)}) != base
  bf = checkpoint.state_checksums({"b": x.astype(jnp.bfloat16), "k": jax.random.key(1),
                                   "i": jnp.int32(3)})
  assert set(bf) == {"b", "k", "i"}


@pytest.mark.parametrize("damage", ["tensor_bytes", "tensor_truncated", "manifest",
                                    "state_metadata", "meta_item", "state_item"])
def test_damaged_newest_step_falls_back_to_intact_step(tmp_path, damage, caplog):
  state = _saved(tmp_path)
  step2 = tmp_path / "2"
  if damage == "tensor_bytes":
    _overwrite_8_bytes(_largest_file(step2 / "state"))
  elif damage == "tensor_truncated":
    f = _largest_file(step2 / "state")
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
  elif damage == "manifest":
    for f in (step2 / "state").rglob("manifest.ocdbt"):
      f.unlink()
  elif damage == "state_metadata":
    f = step2 / "state" / "_METADATA"
    f.write_text(f.read_text()[:20])
  elif damage == "meta_item":
    import shutil
    shutil.rmtree(step2 / "meta")
  elif damage == "state_item":
    import shutil
    shutil.rmtree(step2 / "state")
  ckpt = checkpoint.CheckpointManager(tmp_path, signature=_sig(state))
  with caplog.at_level("WARNING"):
    restored, data = ckpt.restore_or_none(jax.eval_shape(lambda: state))
  assert int(restored.step) == 1 and data == {"pos": 1}
  _assert_tree_equal(restored.params, state.params)
  assert "resuming from step 1" in caplog.text and str(step2) in caplog.text
  assert ckpt.all_steps() == [1] and (tmp_path / "2.damaged").is_dir()  # kept, not deleted
  # The step number can be saved again.
  assert ckpt.save(2, state, force=True)
  ckpt.close()
  assert checkpoint.CheckpointManager(tmp_path).all_steps() == [1, 2]


def test_no_intact_step_is_one_error_naming_the_step_dir(tmp_path):
  state = _saved(tmp_path, steps=(3,))
  _overwrite_8_bytes(_largest_file(tmp_path / "3" / "state"))
  ckpt = checkpoint.CheckpointManager(tmp_path, signature=_sig(state))
  with pytest.raises(checkpoint.CheckpointDamagedError) as e:
    ckpt.restore_or_none(jax.eval_shape(lambda: state))
  msg = str(e.value)
  assert str(tmp_path / "3") in msg and "intact steps: none" in msg
  assert "remove" not in msg and "delete it" not in msg and "\n" not in msg
  assert e.value.intact_steps == () and (tmp_path / "3").is_dir()  # nothing moved
  ckpt.close()


def test_tokenizer_content_is_part_of_the_signature(tmp_path):
  state = _state()
  sig = checkpoint.run_signature({"emb_dim": 8}, state,
                                 tokenizer_sha256=checkpoint.tokenizer_hash(b"proto-a"))
  ckpt = checkpoint.CheckpointManager(tmp_path, every_steps=1, async_save=False, signature=sig)
  ckpt.save(1, state)
  ckpt.close()
  other = checkpoint.run_signature({"emb_dim": 8}, state,
                                   tokenizer_sha256=checkpoint.tokenizer_hash(b"proto-b"))
  with pytest.raises(checkpoint.IncompatibleCheckpointError, match="different tokenizer"):
    checkpoint.CheckpointManager(tmp_path, signature=other).restore_or_none(
        jax.eval_shape(lambda: state))
  same = checkpoint.CheckpointManager(tmp_path, signature=sig)
  assert int(same.restore_or_none(jax.eval_shape(lambda: state))[0].step) == 7


def test_unwritable_checkpoint_directory_is_found_at_once(tmp_path):
  (tmp_path / "checkpoints").write_text("a file, not a directory")
  with pytest.raises(checkpoint.CheckpointSaveError, match="not writable"):
    checkpoint.CheckpointManager(tmp_path / "checkpoints", signature=_sig(_state()))


def test_async_save_failure_is_raised_at_the_next_step_and_close_does_not_hang(tmp_path):
  import time
  from unittest import mock

  from orbax.checkpoint._src.handlers import json_checkpoint_handler

  async def disk_full(self, *args, **kwargs):
    raise OSError(28, "No space left on device")

  state = _state()
  ckpt = checkpoint.CheckpointManager(tmp_path, every_steps=1, async_save=True,
                                      signature=_sig(state))
  ckpt.save(1, state)
  ckpt.wait()
  ckpt.raise_if_save_failed()  # nothing failed yet
  with mock.patch.object(json_checkpoint_handler.JsonCheckpointHandler, "_save_fn", disk_full):
    ckpt.save(2, state)
    deadline = time.time() + 60
    while ckpt._manager.is_saving_in_progress() and time.time() < deadline:  # pylint: disable=protected-access
      time.sleep(0.05)
  with pytest.raises(checkpoint.CheckpointSaveError, match="No space left on device"):
    ckpt.raise_if_save_failed()
  start = time.time()
  ckpt.close(after_error=True)
  assert time.time() - start < 10
  assert checkpoint.CheckpointManager(tmp_path).all_steps() == [1]


_DISK_FULL_AT_THE_SECOND_SAVE = """
import resource, signal, sys, time
import jax
from lm import checkpoint
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
state = {"w": jax.random.normal(jax.random.key(0), (512, 512))}  # 1 MiB
ckpt = checkpoint.CheckpointManager(sys.argv[1], every_steps=1, async_save=True)
ckpt.save(1, state)
ckpt.wait()
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, resource.RLIM_INFINITY))  # "disk full"
ckpt.save(2, state)
for step in range(3, 600):  # the training loop's per-step check
  time.sleep(0.05)
  try:
    ckpt.raise_if_save_failed()
  except checkpoint.CheckpointSaveError as e:
    ckpt.close(after_error=True)
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
"""


def test_a_real_write_failure_in_an_async_save_is_one_line_at_the_next_check(tmp_path):
  """A real OS write error in orbax's background save (RLIMIT_FSIZE makes every write
  past 64 KiB fail, as a full disk does): raised at the next per-step check as one
  CheckpointSaveError line naming the OS error, the last line of stderr, with none of
  orbax's own error tracebacks (six of them for one array before)."""
  import subprocess
  import sys
  proc = subprocess.run([sys.executable, "-c", _DISK_FULL_AT_THE_SECOND_SAVE, str(tmp_path)],
                        capture_output=True, text=True, timeout=300,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"})
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr[-3000:]
  assert lines[-1].startswith("error: an asynchronous checkpoint save in ")
  assert "File too large (errno 27)" in lines[-1]


def test_a_save_failure_logged_before_orbax_save_returns_is_caught(tmp_path):
  """orbax's save() starts the commit threads and works on before it returns; a write
  that fails in that window is logged from a commit thread at once. That record is the
  save's error (one CheckpointSaveError line at the next check), never printed."""
  state = _state()
  ckpt = checkpoint.CheckpointManager(tmp_path, every_steps=1, async_save=True,
                                      signature=_sig(state))
  absl_logger = logging.getLogger("absl")
  printed = []
  handler = logging.Handler()
  handler.emit = printed.append
  absl_logger.addHandler(handler)
  real_save = ckpt._manager.save  # pylint: disable=protected-access

  def save_failing_on_the_way(*args, **kwargs):
    started = real_save(*args, **kwargs)
    try:  # as orbax's _SignalingThread.run logs a failed write (future.py)
      raise OSError(28, "No space left on device")
    except OSError:
      record = absl_logger.makeRecord(
          "absl", logging.ERROR, "/site-packages/orbax/checkpoint/_src/futures/future.py", 387,
          "_SignalingThread.run() raised an exception", (), sys.exc_info())
    absl_logger.handle(record)
    return started

  try:
    ckpt._manager.save = save_failing_on_the_way  # pylint: disable=protected-access
    assert ckpt.save(1, state)
    ckpt.wait()
    with pytest.raises(checkpoint.CheckpointSaveError, match="No space left on device"):
      ckpt.raise_if_save_failed()
    ckpt.close(after_error=True)
  finally:
    absl_logger.removeHandler(handler)
  assert printed == []
  assert checkpoint.checkpoint_steps(tmp_path) == [1]


def test_close_after_an_error_does_not_wait_forever_on_a_stuck_save(tmp_path, caplog):
  import threading
  import time
  ckpt = checkpoint.CheckpointManager(tmp_path, signature=_sig(_state()))
  stuck = threading.Event()
  real_wait = ckpt._manager.wait_until_finished  # pylint: disable=protected-access
  ckpt._manager.wait_until_finished = lambda: stuck.wait(30)  # pylint: disable=protected-access
  start = time.time()
  with caplog.at_level("WARNING"):
    ckpt.close(after_error=True, timeout_s=0.5)
  assert time.time() - start < 5 and "gave up waiting" in caplog.text
  stuck.set()
  real_wait()


def test_a_failed_restore_attempt_leaves_no_library_noise(tmp_path, capfd, caplog, monkeypatch):
  """One unreadable array of many: orbax abandons the other reads, and each then reported
  "RuntimeError: Event loop is closed" with a traceback on stderr (hundreds for a real
  state), burying the one warning. Only the warning remains."""
  import sys
  seen = []  # what Python would print as "Exception ignored ..." tracebacks
  monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(repr(u.exc_value)))
  n = 120
  state = {f"a{i:03d}": jax.random.normal(jax.random.key(i), (128, 128)) for i in range(n)}
  ckpt = checkpoint.CheckpointManager(tmp_path, every_steps=1, async_save=False)
  ckpt.save(1, state)
  ckpt.save(2, state)
  ckpt.close()
  data = tmp_path / "2" / "state" / "ocdbt.process_0" / "d"
  for f in sorted(data.iterdir(), key=lambda p: p.stat().st_size)[1::2]:
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 3])
  capfd.readouterr()
  ckpt = checkpoint.CheckpointManager(tmp_path)
  with caplog.at_level("WARNING"):
    restored, _ = ckpt.restore_or_none(jax.eval_shape(lambda: state))
    time.sleep(1.0)  # the abandoned reads finish after the restore has fallen back
  ckpt.close()
  _assert_tree_equal(restored, state)
  err = capfd.readouterr().err
  assert "Event loop is closed" not in err and "Traceback" not in err, err[:3000]
  assert not seen, (len(seen), seen[:3])
  warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
  assert len(warnings) == 1 and "resuming from step 1" in warnings[0], warnings


def test_the_noise_filter_drops_only_late_read_callbacks(monkeypatch):
  import sys
  from lm.checkpoint import integrity

  seen = []
  monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))

  def unraisable(error):
    sys.unraisablehook(type("U", (), {"exc_type": type(error), "exc_value": error,
                                      "exc_traceback": None, "err_msg": None,
                                      "object": None})())

  with integrity.quiet_failed_reads():
    pass
  assert not isinstance(sys.unraisablehook, integrity.LateReadCallbacks)
  with pytest.raises(OSError):
    with integrity.quiet_failed_reads():
      raise OSError("a failed restore")
  unraisable(RuntimeError("Event loop is closed"))  # an abandoned read, after the error
  other = ValueError("something else")
  unraisable(other)
  assert seen == [other] and sys.unraisablehook.dropped == 1


def test_abandoned_orbax_tasks_are_not_logged_at_exit(caplog):
  from lm.checkpoint import integrity
  integrity.drop_late_callbacks()
  asyncio_logger = logging.getLogger("asyncio")
  with caplog.at_level("ERROR", logger="asyncio"):
    asyncio_logger.error("Task exception was never retrieved\nfuture: <Task finished coro=<"
                         "async_serialize_from_host() defined at /x/orbax/checkpoint/y.py:1>>")
    asyncio_logger.error("_GatheringFuture exception was never retrieved\nfuture: <"
                         "_GatheringFuture finished exception=ValueError('Error writing "
                         "/w/checkpoints/4.orbax-checkpoint-tmp/state')>")
    asyncio_logger.error("Task exception was never retrieved\nfuture: <Task finished coro=<"
                         "mine() defined at /x/lm/z.py:1>>")
  assert [r.getMessage().count("lm/z.py") for r in caplog.records] == [1]
