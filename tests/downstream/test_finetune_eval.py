"""lm/downstream/finetune.py's task evaluation without a model: which arguments reach
evaluation.evaluate_task, the flat metrics and score, the results files, the evaluator's
schedule (evaluate_task replaced by a stand-in that records its call)."""
import math
import types

import pytest

import downstream_fixtures as fx
from lm.data import converters
from lm.downstream import evaluation, finetune


_LOADS = []  # (split, data_dir) of each load of test_finetune_eval_counted


def _outputs(metrics):
  return {"metrics": metrics, "predictions": [], "num_examples": 1, "method": "decode",
          "split": "validation"}


@pytest.fixture
def calls(monkeypatch):
  """evaluate_task replaced: records (task name, split, keyword arguments); its metrics are
  {"m": the number of examples it was given}."""
  seen = []

  def fake(model, params, tokenizer, task, split, **kw):
    seen.append((task.name, split, kw))
    return _outputs({"m": float(len(list(kw["examples"])))})

  monkeypatch.setattr(evaluation, "evaluate_task", fake)
  fx.register_tasks()
  return seen


def test_flat_metrics_and_the_score_are_the_mean_of_each_tasks_mean():
  got = finetune.flat_metrics({"a": _outputs({"acc": 80.0, "f1": 60.0}),
                               "b": _outputs({"em": 50.0}),
                               "c": _outputs({"em": 10.0})})
  assert got == {"eval/a/acc": 80.0, "eval/a/f1": 60.0, "eval/b/em": 50.0, "eval/c/em": 10.0,
                 finetune.SCORE_KEY: pytest.approx((70.0 + 50.0 + 10.0) / 3)}
  assert finetune.SCORE_KEY == "eval/finetune_score"
  assert math.isnan(finetune.flat_metrics({})[finetune.SCORE_KEY])


def test_evaluate_one_task_passes_the_runs_settings(calls):
  from lm.downstream import task as task_lib
  framing = converters.FRAMINGS["t5gemma"]
  settings = finetune.TaskEval(tasks=("test_copy",), split="train", data_dir="/d", batch_size=3,
                               max_decode_length=7, max_examples=2, inputs_length=9,
                               rank_classification=True, framing=framing)
  examples = [{"inputs": "a", "targets": "b"}] * 5
  for name, ranked in (("test_copy", False), ("test_first", True)):  # only test_first has choices
    out = finetune.evaluate_one_task(settings, "model", "params", "tok",
                                     task_lib.get_task(name), examples, mesh="mesh",
                                     rules="rules")
    assert out["metrics"] == {"m": 5.0}
    task, split, kw = calls[-1]
    assert (task, split) == (name, "train")
    assert kw == dict(examples=examples, batch_size=3, max_decode_length=7, mesh="mesh",
                      max_examples=2, inputs_length=9, rank_classification=ranked,
                      rules="rules", framing=framing)
  decoded = finetune.TaskEval(tasks=("test_first",))  # rank_classification off: decode
  finetune.evaluate_one_task(decoded, None, None, None, task_lib.get_task("test_first"),
                             examples, rules=None)
  assert calls[-1][2]["rank_classification"] is False


def test_evaluate_decodes_each_task_and_writes_results_only_with_a_workdir(calls, monkeypatch,
                                                                           tmp_path):
  written = []
  monkeypatch.setattr(evaluation, "write_results",
                      lambda workdir, step, outputs, architecture: written.append(
                          ("results", workdir, step, sorted(outputs), architecture)))
  monkeypatch.setattr(evaluation, "write_best_results",
                      lambda workdir, up_to_step: written.append(("best", workdir, up_to_step)))
  settings = finetune.TaskEval(tasks=("test_copy", "test_first"), architecture="prefix_lm")
  got = finetune.evaluate(settings, None, None, None, rules=None, step=5)
  # The validation splits: 56 words each (downstream_fixtures).
  assert got == {"eval/test_copy/m": 56.0, "eval/test_first/m": 56.0,
                 finetune.SCORE_KEY: 56.0}
  assert [c[:2] for c in calls] == [("test_copy", "validation"), ("test_first", "validation")]
  assert written == []
  finetune.evaluate(settings, None, None, None, rules=None, workdir=str(tmp_path), step=7)
  assert written == [("results", str(tmp_path), 7, ["test_copy", "test_first"], "prefix_lm"),
                     ("best", str(tmp_path), 7)]
  # The train split (160 words) when asked.
  got = finetune.evaluate(finetune.TaskEval(tasks=("test_copy",), split="train"), None, None,
                          None, rules=None)
  assert got["eval/test_copy/m"] == 160.0


def test_the_task_evaluation_is_due_every_period_and_runs_evaluate(calls):
  settings = finetune.TaskEval(tasks=("test_copy",), every=4)
  run = types.SimpleNamespace(
      settings=types.SimpleNamespace(finetune=types.SimpleNamespace(evaluation=settings),
                                     loop=types.SimpleNamespace(num_steps=10)),
      model="model", mesh="mesh", rules="rules")
  ev = finetune.task_evaluation(run, types.SimpleNamespace(tokenizer="tok"), None)
  assert ev == finetune.TaskEvaluation(settings, "model", "tok", "mesh", "rules", None,
                                       last_step=10)
  assert [s for s in range(1, 11) if ev.due(s)] == [4, 8, 10]
  assert ev.run(None, 4) == {"eval/test_copy/m": 56.0, finetune.SCORE_KEY: 56.0}
  never = finetune.TaskEval(tasks=("test_copy",))  # every=0 by default: never due
  assert not any(finetune.TaskEvaluation(never, *[None] * 5, last_step=10).due(s)
                 for s in range(1, 11))
  run.settings.finetune = None
  with pytest.raises(ValueError, match="without config.finetune.tasks"):
    finetune.task_evaluation(run, None, None)


def test_task_eval_defaults_and_the_settings_are_frozen():
  """T5's decoding defaults (128 rows, 114 tokens: the paper's batch and targets length,
  FinetuneSpec's), the validation split, decoding, never evaluated; the three settings
  records frozen and hashable."""
  import dataclasses
  from lm.downstream import finetune_data
  got = finetune.TaskEval(tasks=("t",))
  assert (got.split, got.data_dir, got.batch_size, got.max_decode_length, got.max_examples,
          got.inputs_length, got.rank_classification, got.architecture, got.every,
          got.framing) == ("validation", None, 128, 114, None, None, False, "encoder_decoder", 0,
                           converters.T5_FRAMING)
  spec = finetune_data.FinetuneSpec(tasks=(("t", 1.0),))
  records = (got, finetune.FinetuneSettings(spec, None, 100, 0, got),
             finetune.TaskEvaluation(got, None, None, None, None, None, last_step=1))
  for record in records:
    hash(record)
    with pytest.raises(dataclasses.FrozenInstanceError):
      record.tasks = ()  # pylint: disable=attribute-defined-outside-init


def test_make_data_builds_the_runs_tokenizer_and_this_process_data(monkeypatch):
  from lm.data import tokenizer as tokenizer_lib
  from lm.downstream import finetune_data
  made = []
  monkeypatch.setattr(tokenizer_lib, "run_tokenizer",
                      lambda path, **kw: ("tok", path, kw))
  monkeypatch.setattr(finetune_data, "FinetuneData",
                      lambda spec, **kw: made.append((spec, kw)) or "data")
  spec = finetune_data.FinetuneSpec(tasks=(("t", 1.0),))
  settings = finetune.FinetuneSettings(spec, "/spm.model", 250, 7, finetune.TaskEval(("t",)))
  tok = ("tok", "/spm.model", {"default_vocab_size": 250, "extra_ids": 7})
  assert finetune.make_data(settings) == "data"  # by default process 0 of 1
  assert finetune.make_data(settings, 2, 3) == "data"
  assert made == [(spec, dict(tokenizer=tok, process_index=0, process_count=1)),
                  (spec, dict(tokenizer=tok, process_index=2, process_count=3))]


def test_evaluate_reads_each_tasks_examples_once_and_writes_step_0_by_default(calls,
                                                                             monkeypatch,
                                                                             tmp_path):
  from lm.downstream import task as task_lib
  name = "test_finetune_eval_counted"
  if name not in task_lib.task_names():
    task_lib.register(task_lib.Task(
        name=name, load=lambda split, data_dir=None: _LOADS.append((split, data_dir)) or [
            {"w": "a"}, {"w": "b"}],
        preprocess=lambda raw: {"inputs": raw["w"], "targets": raw["w"]},
        metric_fns=(lambda targets, predictions: {},), description="counts its loads (test)"))
  written = []
  monkeypatch.setattr(evaluation, "write_results",
                      lambda workdir, step, outputs, architecture: written.append(step))
  monkeypatch.setattr(evaluation, "write_best_results",
                      lambda workdir, up_to_step: written.append(up_to_step))
  data_dir = str(tmp_path)  # a new cache key for each run of the test
  settings = finetune.TaskEval(tasks=(name,), data_dir=data_dir)
  for _ in range(3):
    got = finetune.evaluate(settings, None, None, None, rules=None, workdir=str(tmp_path))
    assert got == {f"eval/{name}/m": 2.0, finetune.SCORE_KEY: 2.0}
  assert [d for d in _LOADS if d[1] == data_dir] == [("validation", data_dir)]  # read once
  assert written == [0, 0] * 3
