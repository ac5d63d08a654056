"""The parts a training run is assembled from, chosen once where its config is read.

    parts = Parts(make_data, merge_states, logged_settings, evaluators)
    data = parts.make_data(run, process_index, process_count)    # this process's batches
    evaluators = [make(run, data, workdir) for make in parts.evaluators]
    if evaluator.due(step): metrics = evaluator.run(params, step)

`PRETRAINING`, lm.train's default: the objective's DataPipeline and the held-out loss.
Fine-tuning's parts come from lm.downstream.finetune.PARTS (the tasks' data, the held-out
loss and the task evaluation). lm/train.py calls the parts and names no kind of run.
`heldout_totals` is the one held-out loop (the trainer's eval_loss and lm.evaluate's).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import jax
import numpy as np

from lm import metrics as metrics_lib
from lm import partitioning
from lm.data import pipeline as pipeline_lib
from lm.data import shards as shards_lib

# The held-out metrics the trainer logs, each as eval_<name>.
HELDOUT_METRICS = ("loss", "cross_entropy", "accuracy", "z_loss")


class Evaluator(Protocol):
  """An evaluation the training loop runs after the steps it is due at."""

  def due(self, step: int) -> bool:
    """Whether to run after train step `step`."""

  def run(self, params: Any, step: int) -> dict[str, float]:
    """The metrics of `params` (the state after step `step`): {name: value}."""


def due_every(step: int, every: int, last_step: int) -> bool:
  """Every `every` steps and at `last_step`; never when `every` is 0."""
  return bool(every) and (step % every == 0 or step == last_step)


def heldout_totals(eval_step: Callable, params: Any,
                   batches: Iterable[Mapping[str, np.ndarray]], mesh: Any) -> dict | None:
  """`eval_step`'s metrics accumulated over held-out batches.

  Args:
    eval_step: (params, global batch) -> metrics of (sum, weight) pairs (lm.steps.eval_step).
    params: the parameters.
    batches: this process's rows of each global batch ({feature: int32[B / processes, L]},
      float32 decoder_loss_weights), the same number of batches on every process.
    mesh: the mesh the global batches are assembled on (lm.partitioning.make_global_batch).

  Returns:
    the merged metrics (lm.metrics.merge; lm.metrics.compute gives the values), or None
    when `batches` is empty.
  """
  acc = None
  for batch in batches:
    m = eval_step(params, partitioning.make_global_batch(batch, mesh))
    acc = metrics_lib.merge(acc, jax.device_get(m))
  return acc


@dataclasses.dataclass(frozen=True)
class HeldOutLoss:
  """Loss, cross-entropy, accuracy and z-loss on the held-out split (the training
  objective's batches), as eval_<metric>; {} when the split gives no batches.

  Attributes:
    eval_step: jitted (params, global batch) -> metrics.
    data: has eval_iterator(num_batches).
    mesh: the run's mesh.
    num_batches: batches per evaluation (None: the whole split).
    every, last_step: due every `every` steps (0: never) and at `last_step`.
  """
  eval_step: Callable
  data: Any
  mesh: Any
  num_batches: int | None
  every: int
  last_step: int

  def due(self, step: int) -> bool:
    return due_every(step, self.every, self.last_step)

  def run(self, params: Any, step: int) -> dict[str, float]:
    del step  # the held-out split is the same at every step
    acc = heldout_totals(self.eval_step, params,
                         self.data.eval_iterator(num_batches=self.num_batches), self.mesh)
    if acc is None:
      return {}
    return {f"eval_{k}": v for k, v in metrics_lib.compute(acc).items()
            if k in HELDOUT_METRICS}


def heldout_loss(run: Any, data: Any, workdir: Any) -> HeldOutLoss:
  """The held-out loss of `run` (lm.program.RunBuild) on `data`: train.eval_steps batches
  (0: all) every train.eval_every steps (0: never) and at the last step."""
  del workdir
  loop = run.settings.loop
  return HeldOutLoss(run.eval_step, data, run.mesh, num_batches=loop.eval_steps or None,
                     every=loop.eval_every, last_step=loop.num_steps)


def logged_settings(inputs_length: int, targets_length: int,
                    objective_params: Mapping[str, Any] | None = None) -> dict[str, float]:
  """The data settings written beside the loss in every log line (NaN: not set, e.g. a
  fine-tuning run has no noise)."""
  params = objective_params or {}
  return {"noise_density": params.get("noise_density", float("nan")),
          "mean_noise_span_length": params.get("mean_noise_span_length", float("nan")),
          "inputs_length": inputs_length, "targets_length": targets_length}


def objective_settings(spec: pipeline_lib.DataSpec) -> dict[str, float]:
  """`logged_settings` of a pre-training DataSpec: its lengths and objective parameters."""
  return logged_settings(spec.inputs_length, spec.targets_length, spec.objective_params)


def pretraining_data(run: Any, process_index: int, process_count: int
                     ) -> pipeline_lib.DataPipeline:
  """This process's DataPipeline of `run.data_spec` (the objective's batches).

  Raises:
    ValueError: `run` fine-tunes (its settings have `finetune`): its parts are
      lm.downstream.finetune.PARTS.
  """
  if run.settings.finetune is not None:
    raise ValueError("this run fine-tunes (config.finetune.tasks is set) but was given "
                     "pre-training's parts; pass lm.downstream.finetune.PARTS (lm.main does).")
  return pipeline_lib.DataPipeline(run.data_spec, process_index=process_index,
                                   process_count=process_count)


@dataclasses.dataclass(frozen=True)
class Parts:
  """A kind of training run: where its batches come from and what it evaluates.

  Attributes:
    make_data: (run, process_index, process_count) -> this process's data: `spec`
      (inputs_length, targets_length), `tokenizer`, `train_iterator()` (next, get_state,
      set_state, close, packing_efficiency) and `eval_iterator(num_batches)`.
    merge_states: every process's train-iterator state -> one state that restores under
      any process count (saved with each checkpoint).
    logged_settings: data.spec -> the settings written beside the loss in every log line.
    evaluators: each (run, data, workdir) -> Evaluator; the due ones run in this order after
      a step, each one's metrics written, and all of them given to the checkpoint (the
      ckpt.best_metric that ranks checkpoints is one of them).
  """
  make_data: Callable[[Any, int, int], Any]
  merge_states: Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]]
  logged_settings: Callable[[Any], dict[str, float]]
  evaluators: tuple[Callable[[Any, Any, Any], Evaluator], ...]


PRETRAINING = Parts(make_data=pretraining_data, merge_states=shards_lib.merge_states,
                    logged_settings=objective_settings, evaluators=(heldout_loss,))
