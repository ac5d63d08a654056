"""lm.parts: the held-out loop against NumPy, the evaluators' schedule, the logged settings,
and the trainer calling its evaluators (lm.train._evaluate_due)."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lm import metrics as metrics_lib
from lm import partitioning, parts, train


def _sums(params, batch):
  """A stand-in eval step: (sum, weight) pairs of a weighted per-token 'loss'."""
  w = batch["decoder_loss_weights"]
  loss = params["scale"] * batch["decoder_target_tokens"].astype(jnp.float32)
  return {"loss": (jnp.sum(loss * w), jnp.sum(w)),
          "accuracy": (jnp.sum((batch["decoder_target_tokens"] % 2 == 0) * w), jnp.sum(w)),
          "target_tokens": (jnp.sum(w), jnp.float32(1.0))}


def _batches(seed=0, n=3, rows=8, length=5):
  rng = np.random.default_rng(seed)
  return [{"decoder_target_tokens": rng.integers(1, 50, (rows, length)).astype(np.int32),
           "decoder_loss_weights": (rng.random((rows, length)) < 0.7).astype(np.float32)}
          for _ in range(n)]


def test_heldout_totals_are_the_weighted_means_over_all_batches():
  mesh = partitioning.make_mesh((-1, 1, 1))  # rows over every (simulated) device
  batches = _batches()
  params = {"scale": jnp.float32(0.5)}
  acc = parts.heldout_totals(jax.jit(_sums), params, iter(batches), mesh)
  tokens = np.concatenate([b["decoder_target_tokens"].ravel() for b in batches])
  weights = np.concatenate([b["decoder_loss_weights"].ravel() for b in batches])
  values = metrics_lib.compute(acc)
  np.testing.assert_allclose(values["loss"], (0.5 * tokens * weights).sum() / weights.sum(),
                             rtol=1e-6)
  np.testing.assert_allclose(values["accuracy"],
                             ((tokens % 2 == 0) * weights).sum() / weights.sum(), rtol=1e-6)
  assert parts.heldout_totals(jax.jit(_sums), params, iter([]), mesh) is None


class _Data:
  def __init__(self, batches):
    self.batches, self.asked = batches, []

  def eval_iterator(self, num_batches=None):
    self.asked.append(num_batches)
    return iter(self.batches[:num_batches])


def test_heldout_loss_logs_eval_metrics_of_the_asked_batches():
  mesh = partitioning.make_mesh((-1, 1, 1))
  batches = _batches(n=4)
  data = _Data(batches)
  ev = parts.HeldOutLoss(jax.jit(_sums), data, mesh, num_batches=2, every=3, last_step=10)
  out = ev.run({"scale": jnp.float32(1.0)}, 3)
  assert data.asked == [2]
  assert set(out) == {"eval_loss", "eval_accuracy"}  # target_tokens is not an eval metric
  want = metrics_lib.compute(parts.heldout_totals(jax.jit(_sums), {"scale": 1.0},
                                                  iter(batches[:2]), mesh))
  assert out["eval_loss"] == pytest.approx(want["loss"])
  assert parts.HeldOutLoss(jax.jit(_sums), _Data([]), mesh, None, 1, 1).run({}, 1) == {}


def test_due_every_period_and_last_step():
  assert [s for s in range(1, 11) if parts.due_every(s, 3, 10)] == [3, 6, 9, 10]
  assert [s for s in range(1, 11) if parts.due_every(s, 5, 10)] == [5, 10]
  assert not any(parts.due_every(s, 0, 10) for s in range(1, 11))  # 0: never, not even last


def test_logged_settings_read_the_objective_and_the_lengths():
  class Spec:  # a DataSpec's fields that are read
    objective_params = {"noise_density": 0.15, "mean_noise_span_length": 3.0}
    inputs_length, targets_length = 512, 114
  assert parts.objective_settings(Spec()) == {
      "noise_density": 0.15, "mean_noise_span_length": 3.0, "inputs_length": 512,
      "targets_length": 114}
  got = parts.logged_settings(64, 8)  # fine-tuning: no objective parameters
  assert math.isnan(got["noise_density"]) and math.isnan(got["mean_noise_span_length"])
  assert (got["inputs_length"], got["targets_length"]) == (64, 8)


def test_the_trainer_runs_the_due_evaluators_in_order_and_writes_each():
  class Recording:
    def __init__(self, name, every, values):
      self.name, self.every, self.values, self.ran = name, every, values, []

    def due(self, step):
      return step % self.every == 0

    def run(self, params, step):
      self.ran.append((params, step))
      return dict(self.values)

  class Writer:
    def __init__(self):
      self.lines = []

    def write(self, step, metrics, prefix_console="train"):
      self.lines.append((step, dict(metrics), prefix_console))

  a = Recording("a", 2, {"eval_loss": 1.0, "shared": 1.0})
  b = Recording("b", 3, {"eval/x": 2.0, "shared": 2.0})
  writer = Writer()
  due = train._evaluate_due  # pylint: disable=protected-access
  assert due([a, b], "p", 1, writer) == {} and not writer.lines
  assert due([a, b], "p", 6, writer) == {"eval_loss": 1.0, "eval/x": 2.0, "shared": 2.0}
  assert writer.lines == [(6, a.values, "eval"), (6, b.values, "eval")]
  assert a.ran == b.ran == [("p", 6)]


def test_pretraining_parts_and_finetuning_parts_differ_only_where_they_must():
  import downstream_fixtures as fx
  from lm.data import shards
  from lm.downstream import finetune, finetune_data
  fx.register_tasks()
  assert parts.PRETRAINING.evaluators == (parts.heldout_loss,)
  assert parts.PRETRAINING.merge_states is shards.merge_states
  ft = finetune.PARTS
  assert ft.evaluators[0] is parts.heldout_loss and len(ft.evaluators) == 2
  assert ft.merge_states is finetune_data.FinetuneData.merge_states


def test_validate_returns_every_typed_setting_the_run_is_built_from():
  """lm.validate.validate builds each typed part once; they are the builders' own."""
  from configs import t5
  from lm import config as config_lib
  from lm import validate
  config = config_lib.derive(t5.get_config("runlocal"))
  got = validate.validate(config, num_devices=1)
  assert got == config_lib.RunSettings(
      model=config_lib.model_config(config), data=config_lib.data_spec(config),
      optim=config_lib.optim_config(config), schedule=config_lib.schedule_config(config),
      loop=config_lib.loop_config(config), checkpoint=config_lib.checkpoint_config(config),
      mesh_shape=(-1, 1, 1), rules=partitioning.rules_from_config(config.logical_axis_rules),
      train_step_kwargs=config_lib.train_step_kwargs(config),
      eval_step_kwargs=config_lib.eval_step_kwargs(config), finetune=None,
      wandb=config_lib.wandb_config(config), record=config_lib.record(config))
  config.data.num_epochs = 0  # DataSpec's own check, reported as a config problem
  with pytest.raises(ValueError, match="invalid config:\n  - config.data: DataSpec.num_epochs"):
    validate.validate(config)


def test_the_command_chooses_finetuning_parts_by_the_settings():
  import downstream_fixtures as fx
  from configs import finetune as finetune_config
  from configs import t5
  from lm import config as config_lib
  from lm import main, validate
  from lm.downstream import finetune
  fx.register_tasks()
  settings = validate.validate(config_lib.derive(t5.get_config("runlocal")))
  assert main.training_parts(settings) is None  # lm.train: PRETRAINING
  chosen = main.training_parts(validate.validate(config_lib.derive(
      finetune_config.get_config("task=test_copy,runlocal"))))
  assert [type(e).__name__ for e in chosen.evaluators] == ["function", "function"]
  assert chosen is finetune.PARTS and chosen.evaluators[1] is finetune.task_evaluation


def test_finetune_settings_are_the_config_sections_typed():
  """lm.config.finetune_settings reads config.finetune and the data fields fine-tuning uses
  once; the parts take them from the run (RunSettings.finetune), not from the ConfigDict."""
  import downstream_fixtures as fx
  from configs import finetune as finetune_config
  from configs import t5
  from lm import config as config_lib
  from lm import validate
  from lm.downstream import finetune
  fx.register_tasks()
  assert config_lib.finetune_settings(config_lib.derive(t5.get_config("runlocal"))) is None
  config = config_lib.derive(finetune_config.get_config("task=test_copy,runlocal"))
  with config.unlocked():
    config.finetune.tasks = "test_copy:2,test_first:0"
    config.finetune.max_eval_examples = 7
    config.data.eval_batch_size = None
  got = config_lib.finetune_settings(config)
  d = config.data
  assert got.data.tasks == (("test_copy", 2.0), ("test_first", 0.0))
  assert (got.data.inputs_length, got.data.targets_length, got.data.batch_size) == (
      d.inputs_length, d.targets_length, d.batch_size)
  assert got.evaluation == finetune.TaskEval(
      tasks=("test_copy", "test_first"), split="validation", data_dir=config.finetune.data_dir or None,
      batch_size=d.batch_size, max_decode_length=d.targets_length, max_examples=7,
      inputs_length=d.inputs_length, rank_classification=False,
      architecture=config.model.architecture, every=config.finetune.eval_every)
  assert (got.default_vocab_size, got.extra_ids) == (d.default_vocab_size, d.extra_ids)
  with config.unlocked():
    config.finetune.eval_tasks = "test_first"
    config.finetune.max_decode_length = 5
  assert config_lib.finetune_settings(config).evaluation.tasks == ("test_first",)
  assert config_lib.finetune_settings(config).evaluation.max_decode_length == 5
  got = validate.validate(config)
  assert got.finetune == config_lib.finetune_settings(config)
  # The batches are the tasks': the run is built from their spec, and the pre-training
  # objective (never run) has no say in the lengths.
  assert got.data == got.finetune.data
  assert not config.data.get("allow_truncated_targets")
  with config.unlocked():
    config.data.targets_length = 2  # far below span corruption's need at these inputs
  assert validate.validate(config).data.targets_length == 2
  with config.unlocked():
    config.finetune.tasks = "test_copy:x"
  with pytest.raises(ValueError, match="invalid config:\n  - config.finetune: "):
    validate.validate(config)


def test_pretraining_parts_refuse_a_finetuning_run():
  """train_and_evaluate(finetune config) without fine-tuning's parts fails at once instead of
  pre-training on the objective's data."""
  import types
  run = types.SimpleNamespace(settings=types.SimpleNamespace(finetune=object()))
  with pytest.raises(ValueError, match="pass lm.downstream.finetune.PARTS"):
    parts.PRETRAINING.make_data(run, 0, 1)
