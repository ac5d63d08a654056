"""The training loop: typed settings -> data, model, sharded state -> steps, evals, checkpoints.

    result = train_and_evaluate(lm.validate.validate(config), workdir)

Everything pure lives elsewhere (lm/steps.py, lm/losses.py, lm/model, lm/data/objectives.py),
and so does the compiled program (lm/program.py); this module runs it and owns the side
effects of a run:

  <workdir>/config.json         the resolved config (process 0; see write_config)
  <workdir>/checkpoints/<step>/ orbax: train state, data-iterator states, signature
  <workdir>/metrics.jsonl       one JSON line per log / eval step (process 0)
  <workdir>/wandb_run_id.txt    so a resumed run continues the same wandb run
  <workdir>/wandb/              wandb's offline files (when offline; local workdirs)
  <workdir>/lock                held by the running run (process 0; lm/workdir.py)

Any workdir, local or `gs://`. The same command again resumes bit-identically from the
newest intact checkpoint; SIGTERM or Ctrl-C saves and raises `Preempted`; a non-finite loss
raises `NonFiniteError` before anything non-finite is saved (docs/robustness.md).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from lm import checkpoint, metrics as metrics_lib, partitioning, program, writers
from lm import config as config_lib
from lm import parts as parts_lib
from lm import workdir as workdir_lib
from lm.checkpoint import hf, hf_t5, hf_t5gemma
from lm.data import converters
from lm.data import pipeline as pipeline_lib
from lm.data import shards as shards_lib
from lm.data import tokenizer as tokenizer_lib
from lm.model import accounting
from lm.model.transformer import TransformerConfig

CONFIG_FILE = config_lib.CONFIG_FILE


class Preempted(Exception):
  """SIGTERM or Ctrl-C (`signum`) stopped the run after a checkpoint was saved at `step`."""

  def __init__(self, step: int, signum: int = signal.SIGTERM):
    what = "interrupted (SIGINT, Ctrl-C)" if signum == signal.SIGINT else "preempted (SIGTERM)"
    super().__init__(f"{what} at step {step}; checkpoint saved, run the same command again "
                     "to resume")
    self.step, self.signum = step, signum


class NonFiniteError(ValueError):
  """The loss or gradient norm became NaN / inf; nothing non-finite was saved."""


def _check_finite(values: Mapping[str, float], step: int, last_saved: int | None) -> None:
  """Raises NonFiniteError if the window's loss or grad_norm is not finite.

  Args:
    values: metrics_lib.compute of the window's accumulator (float per metric).
    step: the last step of the window.
    last_saved: the newest checkpointed step (None: none yet).
  """
  bad = {k: values[k] for k in ("loss", "grad_norm") if k in values
         and not np.isfinite(values[k])}
  if not bad:
    return
  where = (f"the newest checkpoint (step {last_saved}) is from before the divergence"
           if last_saved is not None else "no checkpoint was saved")
  raise NonFiniteError(
      f"training diverged: {', '.join(f'{k} {v}' for k, v in bad.items())} in the steps up "
      f"to {step}; nothing non-finite was saved and {where}; lower schedule.base_lr, add "
      "warm-up or gradient clipping, and resume or start again.")


class Preemption:
  """SIGTERM / Ctrl-C -> a flag checked at step boundaries by all hosts (`signum`: the first)."""

  def __init__(self):
    self.requested, self.signum, self._previous = False, signal.SIGTERM, {}

  def __enter__(self):
    for signum in (signal.SIGTERM, signal.SIGINT):
      with contextlib.suppress(ValueError):  # not the main thread (a notebook worker): none
        self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def _handle(self, signum, frame):  # pylint: disable=unused-argument
    logging.warning("%s received: saving a checkpoint at the next step, then exiting.",
                    signal.Signals(signum).name)
    if signum == signal.SIGINT:  # a second Ctrl-C raises KeyboardInterrupt: stop, no save
      signal.signal(signal.SIGINT, signal.default_int_handler)
    self.signum = self.signum if self.requested else signum
    self.requested = True

  def __exit__(self, *exc):
    for signum, previous in self._previous.items():
      if previous is not None:
        signal.signal(signum, previous)

  def should_stop(self, step: int = 0, every: int = 1) -> bool:
    """True on every process once any process was asked to stop.

    One process answers at every step. Several processes agree only at the steps that are
    multiples of ``every`` (the loop passes ``train.log_every``, where it fetches the
    metrics anyway): the agreement is an all-gather that blocks each host until its queued
    steps have run, so asking it every step would stall the dispatch of every step. All
    processes run the same steps, so they stop at the same one, at most ``every`` - 1
    steps after the signal.
    """
    if jax.process_count() == 1:
      return self.requested
    if step % max(every, 1):
      return False
    flags = multihost_utils.process_allgather(np.array([self.requested], np.int32))
    return bool(np.asarray(flags).any())


def write_config(record: Mapping[str, Any], workdir: str | os.PathLike, *,
                 resumed_at: int | None = None) -> None:
  """Writes the resolved config (`record`: RunSettings.record, lm.config.record) as JSON
  (process 0, secrets filtered, atomically).

  Call it only once the run is known to be good (config, data, checkpoint check). A new
  run writes `config.json`. A resumed run (`resumed_at` = its start step) never
  replaces a different `config.json`: a changed config (e.g. more steps) is written to
  `config.step<resumed_at>.json` next to it, with a warning.
  """
  if jax.process_index() != 0:
    return
  workdir = workdir_lib.as_path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  config_dict = writers.filter_secrets(dict(record))
  text = json.dumps(config_dict, indent=2, sort_keys=True, default=str) + "\n"
  path = workdir / CONFIG_FILE
  if resumed_at is not None and path.exists():
    try:
      same = json.loads(path.read_text()) == json.loads(text)
    except ValueError:
      same = False
    if same:
      return
    path = workdir / f"config.step{resumed_at}.json"
    logging.warning("the config differs from %s's; kept it and wrote this run's to %s",
                    workdir / CONFIG_FILE, path)
  workdir_lib.write_text_atomic(path, text)


def _gather_data_states(state: Mapping[str, Any], merge=shards_lib.merge_states
                        ) -> dict[str, Any]:
  """Every process's data-shard positions merged into one JSON dict (all shards).

  The pipeline's virtual shards make the merged position restorable under any process
  count that divides data.num_shards (lm/data/pipeline.py). `merge`: the data's
  merge_states (lm.parts.Parts.merge_states: each kind of data has its state kind).
  """
  if jax.process_count() == 1:
    return merge([state])
  raw = np.frombuffer(json.dumps(state).encode(), np.uint8)
  sizes = np.asarray(multihost_utils.process_allgather(np.array([raw.size], np.int64)))
  sizes = sizes.reshape(-1)
  padded = np.zeros(int(sizes.max()), np.uint8)
  padded[:raw.size] = raw
  rows = np.asarray(multihost_utils.process_allgather(padded))
  states = [json.loads(rows[i, :int(sizes[i])].tobytes().decode())
            for i in range(rows.shape[0])]
  return merge(states)


def _restore_data_state(iterator, saved: Mapping[str, Any] | None) -> None:
  if saved:
    iterator.set_state(saved)  # takes the shards this process owns


def init_params_from(path: str, model_config: TransformerConfig, abstract_params: Any,
                     shardings: Any, framing: converters.Framing | None = None) -> Any:
  """Parameters to start a new run from (config.ckpt.init_from, e.g. fine-tuning).

  Args:
    path: another run's `<workdir>/checkpoints` (or its workdir), or a Hugging Face T5,
      T5Gemma or T5Gemma 2 `save_pretrained` directory (config.json + model.safetensors).
    model_config: this run's model; an HF checkpoint must describe the same shapes.
    abstract_params: this run's params structure (ShapeDtypeStructs).
    shardings: NamedShardings for the params.
    framing: the framing the run's data chose (RunSettings.framing: fine-tuning's), which
      an HF checkpoint's decoder start must equal; None (pre-training, whose data are
      framed as T5's): a checkpoint that starts elsewhere gets one warning.

  Returns:
    the params tree placed on `shardings`.

  Raises:
    IncompatibleCheckpointError: shapes that do not fit the model, or a `framing` whose
      decoder start is not the HF checkpoint's (naming the framing to choose).
  """
  where = workdir_lib.as_path(path)
  if (where / hf_t5.CONFIG_NAME).exists() and not (where / "checkpoints").is_dir():
    raw = hf_t5.read_json(os.path.join(os.fspath(path), hf_t5.CONFIG_NAME))
    hf_config, params = hf.checkpoint_to_lm(  # T5, T5Gemma or T5Gemma 2, by model_type
        raw, hf_t5.read_safetensors(os.fspath(path)), scan_layers=model_config.scan_layers,
        dtype=model_config.dtype)
    start = hf_t5gemma.decoder_start_id(raw) if hf.is_gemma(raw) else 0
    if framing is not None and framing.decoder_start != start:
      names = [n for n, f in converters.FRAMINGS.items() if f.decoder_start == start]
      raise checkpoint.IncompatibleCheckpointError(
          f"ckpt.init_from: the decoder of {path} starts from token {start} but this run's "
          f"framing starts it from {framing.decoder_start}; set --config.finetune.framing="
          f"{names[0] if names else '...'} (lm.data.converters.FRAMINGS).")
    if framing is None and start != 0:
      logging.warning(
          "ckpt.init_from: %s is a T5Gemma checkpoint whose decoder starts from token %d "
          "(<bos>); pre-training data start every decoder input with 0, so this run trains "
          "it to that start token and its first steps are not T5Gemma's zero-shot "
          "behaviour (a fine-tuning run can keep its framing: finetune.framing=t5gemma).",
          path, start)
    what = checkpoint.shape_mismatch(checkpoint.param_shapes(params),
                                     checkpoint.param_shapes(abstract_params))
    if what:
      fields = [f"{f.name}={getattr(hf_config, f.name)!r}"
                for f in dataclasses.fields(TransformerConfig)
                if getattr(hf_config, f.name) != getattr(model_config, f.name)]
      raise checkpoint.IncompatibleCheckpointError(
          f"ckpt.init_from: the Hugging Face checkpoint {path} does not fit this model "
          f"({what}); set "
          f"config.model to its values: {', '.join(fields) or 'see config.json'}.")
    return jax.device_put(params, shardings)
  if (where / "checkpoints").is_dir():
    where = where / "checkpoints"
  _check_run_framing(where.parent / CONFIG_FILE, framing, path)
  return checkpoint.restore_params(where, abstract_params, shardings)


def _check_run_framing(config_path, framing: converters.Framing | None, path: str) -> None:
  """Refuses to fine-tune (`framing` set) from an lm run (local or gs://) whose data were
  framed otherwise (e.g. one fine-tuned with finetune.framing=t5gemma); nothing to check
  without its config.json."""
  if framing is None or not config_path.exists():
    return
  theirs = config_lib.framing(config_lib.load_config_json(os.fspath(config_path)))
  if theirs != framing:
    names = [n for n, f in converters.FRAMINGS.items() if f == theirs]
    raise checkpoint.IncompatibleCheckpointError(
        f"ckpt.init_from: the run {path} was trained with the framing {theirs} but this run's "
        f"is {framing}; set --config.finetune.framing={names[0] if names else '...'}.")


def _vocab_check(data: pipeline_lib.DataPipeline, model_config: TransformerConfig) -> None:
  tokenizer_lib.check_vocab_size(data.tokenizer.vocab_size, model_config.vocab_size)


def train_and_evaluate(settings: config_lib.RunSettings, workdir: str,
                       parts: parts_lib.Parts | None = None) -> dict[str, float]:
  """Trains (or resumes) the run of `settings` in `workdir`.

  The stages: `program.build_run` (model, optimizer, mesh, shardings, jitted steps), the data and
  the evaluators of `parts`, then under the workdir lock `restore_or_init` (the newest
  checkpoint, or a new state) and `_train_loop` (steps; log lines from a
  `lm.metrics.LogWindow`, evals, checkpoints).

  Args:
    settings: the run's typed settings, `lm.validate.validate(config)` of a config from
      configs/*.py after its command-line overrides (`lm.config.derive`).
    workdir: the run's directory (local or gs://).
    parts: the kind of run, chosen by the caller (lm.parts.Parts); None: pre-training
      (lm.parts.PRETRAINING). A fine-tuning run (settings.finetune set) takes
      lm.downstream.finetune.PARTS (lm.main chooses by it).

  Returns:
    the last logged train metrics and eval metrics (floats), for tests and sweeps.
  """
  parts = parts or parts_lib.PRETRAINING
  run = program.build_run(settings)  # checks the run fits the devices (every problem listed) first
  workdir_lib.check_remote_support(workdir)
  workdir = workdir_lib.as_path(workdir)
  data = parts.make_data(run, jax.process_index(), jax.process_count())
  _vocab_check(data, run.model_config)
  evaluators = [make(run, data, workdir) for make in parts.evaluators]
  # Before the mesh context: the CPU measurement runs on one device.
  peak, _ = metrics_lib.peak_flops(hosts=jax.process_count())
  with run.axis_rules():  # the model's activation constraints need them
    with contextlib.ExitStack() as stack:
      lock = None
      if jax.process_index() == 0:  # before anything is written to the workdir
        lock = stack.enter_context(workdir_lib.WorkdirLock(workdir))
      ckpt = _checkpoint_manager(workdir, run, data)  # before compiling
      start = restore_or_init(run, ckpt, workdir, data)
      return _train_loop(workdir, lock, run, data, parts, evaluators, ckpt, start, peak)


def _checkpoint_manager(workdir, run: program.RunBuild, data) -> checkpoint.CheckpointManager:
  """The run's CheckpointManager (config.ckpt); checks the directory is writable."""
  settings = run.settings.checkpoint
  return checkpoint.CheckpointManager(
      workdir / "checkpoints", every_steps=settings.every_steps,
      keep=settings.keep, keep_best=settings.keep_best, keep_steps=settings.keep_steps,
      best_metric=settings.best_metric, best_mode=settings.best_mode,
      async_save=settings.async_save,
      signature=checkpoint.run_signature(
          dataclasses.asdict(run.model_config), run.abstract_state,
          tokenizer_sha256=checkpoint.tokenizer_hash(data.tokenizer.model_proto)))


@dataclasses.dataclass
class Start:
  """Where a run starts (see `restore_or_init`).

  Attributes:
    state: the train state (on the run's state shardings).
    step: its step (0 for a new run).
    iterator: this process's train iterator, at the restored data position.
    window: the partial logging window saved with the checkpoint (empty for a new run).
    last_saved: the restored checkpoint's step; None for a new run.
  """
  state: Any
  step: int
  iterator: Any
  window: metrics_lib.LogWindow
  last_saved: int | None


def restore_or_init(run: program.RunBuild, ckpt: checkpoint.CheckpointManager, workdir,
                    data) -> Start:
  """Resumes from the newest intact checkpoint in `ckpt`, or initialises a new run.

  In order: restore; open the train iterator; then either set its position and the
  logging window from the checkpoint, or initialise a new state (`program.RunBuild.init_state`)
  with its parameters from config.ckpt.init_from when set; last, write config.json (only
  now is the run known to be good; a resumed run never replaces it, see `write_config`).
  On any error `ckpt` and the iterator (when opened) are closed, nothing is written, and
  the error is raised.
  """
  iterator = None
  try:
    restored = ckpt.restore_or_none(run.abstract_state, run.state_shardings)
    iterator = data.train_iterator()
    if restored is not None:
      state, data_state = restored
      _restore_data_state(iterator, data_state)
      window = metrics_lib.LogWindow.from_json((ckpt.restored_extra or {}).get("log_window"))
      start = Start(state, int(state.step), iterator, window, last_saved=int(state.step))
    else:
      state = run.init_state()
      init_from = run.settings.checkpoint.init_from
      if init_from:
        params = init_params_from(init_from, run.model_config, run.abstract_state.params,
                                  run.state_shardings.params, framing=run.settings.framing)
        state = state.replace(params=params)
        logging.info("initialised parameters from %s", init_from)
      start = Start(state, int(state.step), iterator, metrics_lib.LogWindow(), last_saved=None)
    write_config(run.settings.record, workdir, resumed_at=None if restored is None else start.step)
  except BaseException:  # the checkpointer's threads and the iterator's pool end here
    ckpt.close(after_error=True)
    if iterator is not None:
      iterator.close()
    raise
  if restored is not None:
    logging.info("resumed from step %d", start.step)
  return start


def _evaluate_due(evaluators: Sequence[parts_lib.Evaluator], params, step: int,
                  writer) -> dict[str, float]:
  """The evaluations due at `step`, in order, each one's metrics written; all of them
  ({}: none due)."""
  out = {}
  for evaluator in evaluators:
    if evaluator.due(step):
      values = evaluator.run(params, step)
      writer.write(step, values, prefix_console="eval")
      out.update(values)
  return out


# A log window in which the loop waited longer than this share of the time for batches (after
# the process's first window, which includes the pipeline's start-up) gets one warning.
STARVED_FRACTION = 0.2


def _warn_if_starved(values: dict[str, float], log_every: int) -> bool:
  """Warns when the input pipeline held the training loop up; returns whether it did."""
  wait = values.get("data_wait_fraction", 0.0)
  if wait <= STARVED_FRACTION:
    return False
  logging.warning("the training loop waited for batches %.0f%% of the last %d steps (the "
                  "input pipeline is slower than the train step): raise "
                  "--config.data.num_threads, or pre-tokenize the corpus; "
                  "data_wait_fraction in metrics.jsonl tracks it.", 100 * wait, log_every)
  return True


def _train_loop(workdir, lock, run: program.RunBuild, data, parts: parts_lib.Parts,
                evaluators: Sequence[parts_lib.Evaluator], ckpt, start: Start,
                peak: float) -> dict[str, float]:
  """Steps from `start` to train.num_steps (under the workdir lock and the axis rules).

  Each step: a batch, the train step. Every log_every steps (and before a checkpoint) the
  steps' metrics are fetched into the `LogWindow` and checked finite; at log steps its line
  is written and a new window starts; then the due evaluations; then the checkpoint (with
  the data position and the partial window) when due, at the last step or on SIGTERM.
  """
  d = data.spec
  loop = run.settings.loop
  state, iterator, window, last_saved = start.state, start.iterator, start.window, start.last_saved
  step = start.step
  num_steps = int(loop.num_steps)
  if step >= num_steps:
    logging.warning("%s is already at step %d (train.num_steps=%d): nothing to do; raise "
                    "--config.train.num_steps to continue training.", workdir, step, num_steps)
  flops_per_token = accounting.flops_per_token(run.model_config, d.inputs_length,
                                               d.targets_length)
  writer = writers.make_writers(run.settings.wandb, workdir, total_steps=num_steps,
                                start_step=step, record=run.settings.record,
                                progress_bar=sys.stderr.isatty())  # no bar in log files
  static = parts.logged_settings(d)
  last: dict[str, float] = {}
  pending = []
  t_last = time.perf_counter()
  first_window, warned = True, False
  preempted = False
  with Preemption() as preemption:
    try:
      while step < num_steps:
        t_wait = time.perf_counter()
        local = next(iterator)
        window.data_wait += time.perf_counter() - t_wait
        window.packing.append(iterator.packing_efficiency)
        state, m = run.train_step(state, partitioning.make_global_batch(local, run.mesh))
        pending.append(m)
        step += 1
        ckpt.raise_if_save_failed()
        stop = preemption.should_stop(step, loop.log_every)
        log_now = parts_lib.due_every(step, loop.log_every, num_steps)
        force = step == num_steps or stop
        save_now = force or ckpt.should_save(step)
        if log_now or save_now:  # fetch and check before anything is saved
          window.add(jax.device_get(pending))
          pending.clear()
          _check_finite(window.means(), step, last_saved)
        if log_now:
          now = time.perf_counter()
          values = window.summary(now - t_last, flops_per_token=flops_per_token,
                                  peak_flops_total=peak, static=static)
          writer.write(step, values)
          if not (first_window or warned):
            warned = _warn_if_starved(values, loop.log_every)
          first_window = False
          if lock is not None:
            lock.refresh()
          last = dict(values)
          window, t_last = metrics_lib.LogWindow(), now
        eval_metrics = _evaluate_due(evaluators, state.params, step, writer)
        last.update(eval_metrics)
        if save_now:
          if ckpt.save(step, state, data_state=_gather_data_states(iterator.get_state(),
                                                                   parts.merge_states),
                       metrics=eval_metrics or None, force=force,
                       extra={"log_window": window.to_json()}):
            last_saved = step
        if stop:
          preempted = True
          break
    except BaseException:
      ckpt.close(after_error=True)  # never hang or mask the error
      raise
    else:
      ckpt.close()
    finally:
      writer.close()
      iterator.close()
  if preempted:
    raise Preempted(step, preemption.signum)
  return last
