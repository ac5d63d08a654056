"""lm.downstream.evaluation: decoding and rank classification of a task's split, per architecture."""
import contextlib
import dataclasses
import functools
import json
import math

import jax
import numpy as np
import pytest

from lm import generation, partitioning
from lm import score as score_lib
from lm.data import converters, features
from lm.downstream import evaluation
from lm.downstream import task as task_lib
from lm.model.transformer import Transformer, TransformerConfig
import downstream_fixtures as fx

ARCHS = ["encoder_decoder", "prefix_lm", "causal"]


@functools.cache
def _model_and_params(arch, seed=0):
  config = TransformerConfig(vocab_size=128, emb_dim=32, num_heads=2, head_dim=16, mlp_dim=64,
                             num_encoder_layers=1 if arch == "encoder_decoder" else 0,
                             num_decoder_layers=1, mask_type=arch, dtype="float32")
  model = Transformer(config)
  batch = {"decoder_input_tokens": np.zeros((1, 8), np.int32),
           "decoder_target_tokens": np.zeros((1, 8), np.int32)}
  if arch == "encoder_decoder":
    batch["encoder_input_tokens"] = np.zeros((1, 8), np.int32)
  if arch == "prefix_lm":
    batch["decoder_causal_attention"] = np.zeros((1, 8), np.int32)
  params = jax.jit(model.init)(jax.random.key(seed), batch)["params"]
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  return model, nn.meta.unbox(params)


@pytest.fixture(scope="module", autouse=True)
def _tasks():
  fx.register_tasks()


@pytest.mark.parametrize("arch", ARCHS)
def test_decode_matches_one_example_at_a_time_and_metrics_follow(arch):
  model, params = _model_and_params(arch)
  tok = fx.tokenizer()
  task = task_lib.get_task("test_copy")
  out = evaluation.evaluate_task(model, params, tok, task, "validation", batch_size=4,
                                 max_decode_length=6, max_examples=7)
  assert out["method"] == "decode" and out["num_examples"] == 7
  examples = task.examples("validation")[:7]
  cfg = generation.DecodeConfig(max_decode_length=6)
  for ex, pred in zip(examples, out["predictions"]):
    batch = generation.prompt_batch([tok.encode(ex["inputs"])], model.config)
    tokens, _ = generation.decode(model, params, batch, cfg)
    assert pred["prediction"] == tok.decode(np.asarray(tokens[0]))
    assert pred["target"] == ex["targets"]
  em = 100.0 * np.mean([p["prediction"].strip() == p["target"] for p in out["predictions"]])
  assert out["metrics"] == {"exact_match": pytest.approx(em)}


@pytest.mark.parametrize("arch", ARCHS)
def test_rank_classification_is_the_argmax_of_lm_score(arch):
  model, params = _model_and_params(arch, seed=1)
  tok = fx.tokenizer()
  task = task_lib.get_task("test_first")
  out = evaluation.evaluate_task(model, params, tok, task, "validation", batch_size=3,
                                 max_examples=5, rank_classification=True)
  assert out["method"] == "rank_classification"
  score = jax.jit(functools.partial(score_lib.score, model=model))
  correct = 0
  for ex, pred in zip(task.examples("validation")[:5], out["predictions"]):
    lls = []
    for cand in ex["candidates"]:  # each candidate alone, unpadded: the reference
      f = converters.convert({"inputs": tok.encode(ex["inputs"]),
                              "targets": tok.encode(cand)}, arch)
      lls.append(float(score(params, {k: v[None] for k, v in f.items()})["log_likelihood"][0]))
    np.testing.assert_allclose(pred["scores"], lls, rtol=1e-4, atol=1e-4)
    assert pred["prediction"] == ex["candidates"][int(np.argmax(lls))]
    correct += pred["prediction"] == ex["targets"]
  assert out["metrics"]["accuracy"] == pytest.approx(100.0 * correct / 5)


@pytest.mark.parametrize("arch", ARCHS)
def test_rank_classification_by_hand_with_uniform_logits(arch):
  """Decoder's final norm scale 0 -> all logits 0 -> p = 1/128 for every token, so a
  candidate of n tokens (+ EOS) has log-likelihood -(n + 1) ln 128: the shortest wins."""
  model, params = _model_and_params(arch)
  params = jax.tree_util.tree_map_with_path(
      lambda p, x: np.zeros_like(x) if "decoder']['final_norm" in jax.tree_util.keystr(p)
      else x, params)
  tok = fx.tokenizer()
  task = task_lib.get_task("test_first")
  examples = [{"inputs": "first: abc def", "targets": "abc", "candidates": ["abc def", "abc"]},
              {"inputs": "first: fed cab", "targets": "fed cab",
               "candidates": ["fed cab", "fed cab fed"]}]
  out = evaluation.evaluate_task(model, params, tok, task, examples=examples,
                                 rank_classification=True)
  for ex, pred in zip(examples, out["predictions"]):
    expected = [-(tok.encode(c).size + 1) * np.log(128.0) for c in ex["candidates"]]
    np.testing.assert_allclose(pred["scores"], expected, rtol=1e-5)
  assert [p["prediction"] for p in out["predictions"]] == ["abc", "fed cab"]
  assert out["metrics"] == {"accuracy": 100.0}


def test_bad_inputs():
  model, params = _model_and_params("encoder_decoder")
  tok = fx.tokenizer()
  with pytest.raises(ValueError, match="no split 'test'"):
    evaluation.evaluate_task(model, params, tok, task_lib.get_task("test_copy"), "test")
  with pytest.raises(ValueError, match="has no choices"):
    evaluation.evaluate_task(model, params, tok, task_lib.get_task("test_copy"),
                             rank_classification=True, max_examples=1)
  with pytest.raises(ValueError, match="unknown task 'nope'; expected one of"):
    task_lib.get_task("nope")
  with pytest.raises(ValueError, match="has no examples"):
    evaluation.evaluate_task(model, params, tok, task_lib.get_task("test_copy"), examples=[])


def test_strip_decoded():
  assert evaluation.strip_decoded(np.array([5, 6, 1, 0])) == [5, 6]
  assert evaluation.strip_decoded(np.array([5, 6, 7])) == [5, 6, 7]
  assert evaluation.strip_decoded(np.array([5, 1, 7, 0, 8])) == [5]  # the first EOS ends it
  assert evaluation.strip_decoded(np.array([5, 0, 7])) == [5]
  assert evaluation.task_score({"accuracy": 80.0, "f1": 90.0}) == 85.0


def test_round_up_trim_inputs_and_batch_multiple():
  assert [features.round_up(n, 8) for n in (0, 1, 7, 8, 9, 16, 17)] == [0, 8, 8, 8, 16, 16, 24]
  assert features.round_up(5, 1) == 5
  ids = np.arange(2, 12)
  assert evaluation._trim_inputs(ids, None).tolist() == ids.tolist()
  assert evaluation._trim_inputs(ids, 4).tolist() == [2, 3, 4]  # and the EOS: 4
  assert evaluation._trim_inputs(ids, 11).tolist() == ids.tolist()
  assert evaluation._trim_inputs(ids, 1).tolist() == [] == evaluation._trim_inputs(ids, 0).tolist()
  assert evaluation._trim_inputs([5, 6], None).dtype == np.int32

  class Mesh:  # the batch axes are data and fsdp
    shape = {"data": 2, "fsdp": 3, "model": 5}
  assert evaluation._batch_multiple(None) == 1
  assert evaluation._batch_multiple(Mesh()) == 6


def test_write_results_files(tmp_path):
  workdir = str(tmp_path / "runs" / "one")  # not there yet
  outputs = {
      "test_copy": {"metrics": {"exact_match": 50.0}, "num_examples": 2, "method": "decode",
                    "split": "validation",
                    "predictions": [{"inputs": "copy: café", "target": "café",
                                     "prediction": "cafe"},
                                    {"inputs": "copy: abc", "target": "abc", "prediction": "abc"}]},
      "test_first": {"metrics": {"accuracy": np.float32(100.0), "f1": math.nan},
                     "num_examples": 1, "method": "rank_classification", "split": "train",
                     "predictions": [{"inputs": "first: a b", "target": "a", "prediction": "a",
                                      "scores": [np.float32(-1.5), -math.inf]}]}}
  path = evaluation.write_results(workdir, 7, outputs, architecture="causal",
                                  extra={"source": "ckpt"})
  assert str(path) == str(tmp_path / "runs" / "one" / "eval" / "tasks_step_7.json")
  record = {"workdir": workdir, "step": 7, "architecture": "causal", "source": "ckpt",
            "results": {"test_copy": {"exact_match": 50.0},
                        "test_first": {"accuracy": 100.0, "f1": None}},
            "score": {"test_copy": 50.0, "test_first": None},  # NaN: not JSON
            "tasks": {"test_copy": {"num_examples": 2, "method": "decode", "split": "validation"},
                      "test_first": {"num_examples": 1, "method": "rank_classification",
                                     "split": "train"}}}
  assert path.read_text() == json.dumps(record, indent=2, sort_keys=True) + "\n"
  eval_dir = tmp_path / "runs" / "one" / "eval"
  assert (eval_dir / "tasks_step_7.test_copy.validation.jsonl").read_text(encoding="utf-8") == (
      '{"inputs": "copy: café", "target": "café", "prediction": "cafe"}\n'
      '{"inputs": "copy: abc", "target": "abc", "prediction": "abc"}\n')
  assert (eval_dir / "tasks_step_7.test_first.train.jsonl").read_text() == (
      '{"inputs": "first: a b", "target": "a", "prediction": "a", "scores": [-1.5, null]}\n')
  evaluation.write_results(workdir, 9, {}, architecture="causal")  # the directory is there
  assert json.loads((eval_dir / "tasks_step_9.json").read_text())["results"] == {}


def test_only_process_0_writes_results(tmp_path, monkeypatch):
  monkeypatch.setattr(jax, "process_index", lambda: 1)
  assert evaluation.write_results(str(tmp_path), 1, {}, architecture="causal") is None
  assert evaluation.write_best_results(str(tmp_path)) is None
  assert list(tmp_path.iterdir()) == []


def test_json_safe():
  tree = {1: np.float32(0.5), "b": (np.int64(2), float("nan"), [np.float64(-np.inf)]),
          "c": "x", "d": None, "e": True}
  assert evaluation._json_safe(tree) == {"1": 0.5, "b": [2, None, [None]], "c": "x",
                                         "d": None, "e": True}


def _model(arch="causal", **kw):
  """A model for the code around decoding and scoring (no params: they are not used)."""
  return Transformer(TransformerConfig(
      vocab_size=128, emb_dim=32, num_heads=2, head_dim=16, mlp_dim=64,
      num_encoder_layers=1 if arch == "encoder_decoder" else 0, num_decoder_layers=1,
      mask_type=arch, dtype="float32", **kw))


def _fake_decode_fn(monkeypatch):
  """Replaces the compiled decode: each row generates 10 + its row id, EOS, then 3s."""
  calls = []

  def fake_decode_fn(model, decode, mesh, rules):
    def fn(params, batch, rng, row_ids):
      tokens = next(iter(batch.values()))  # encoder or decoder inputs
      calls.append((tokens.shape, np.asarray(row_ids).tolist(),
                    jax.random.key_data(rng).tolist(), decode.max_decode_length))
      out = np.full((len(row_ids), decode.max_decode_length), 3, np.int32)
      out[:, 0], out[:, 1] = 10 + np.asarray(row_ids), generation.EOS_ID
      return out, np.zeros(len(row_ids), np.float32)
    return fn
  monkeypatch.setattr(evaluation, "_decode_fn", fake_decode_fn)
  return calls


def test_decode_inputs_batches_of_one_shape_with_global_row_ids(monkeypatch, capsys):
  calls = _fake_decode_fn(monkeypatch)
  cfg = generation.DecodeConfig(max_decode_length=4)
  prompts = [np.arange(2, 2 + n) for n in (3, 9, 1, 4, 2)]
  assert evaluation.decode_inputs(_model(), None, prompts, batch_size=2, decode=cfg) == [
      [10], [11], [12], [13], [14]]
  key0 = jax.random.key_data(jax.random.key(0)).tolist()
  # The longest prompt, BOS and EOS: 11 -> 16; the last batch filled with an empty prompt.
  assert calls == [((2, 16), [0, 1], key0, 4), ((2, 16), [2, 3], key0, 4),
                   ((2, 16), [4, 5], key0, 4)]
  calls.clear()
  assert evaluation.decode_inputs(_model(), None, prompts[:2], batch_size=0, decode=cfg) == [
      [10], [11]]  # batch_size 0 counts as 1
  assert [c[:2] for c in calls] == [((1, 16), [0]), ((1, 16), [1])]
  assert capsys.readouterr().err == ""  # no progress bar unless asked


def test_score_candidates_pads_to_one_shape(monkeypatch, capsys):
  shapes = []

  def fake_score_fn(model):
    def fn(params, batch):  # "log-likelihood": the sum of the row's target tokens
      shapes.append(batch["decoder_target_tokens"].shape)
      return {"log_likelihood": batch["decoder_target_tokens"].sum(1).astype(np.float32)}
    return fn
  monkeypatch.setattr(evaluation, "_score_fn", fake_score_fn)
  pairs = [(np.arange(2, 2 + n), np.arange(20, 20 + m)) for n, m in ((3, 1), (6, 4), (1, 1))]
  # "inputs EOS targets EOS": the longest is 12 tokens -> 16.
  expected = [float(i.sum() + t.sum() + 2 * generation.EOS_ID) for i, t in pairs]
  assert evaluation.score_candidates(_model(), None, pairs, batch_size=2).tolist() == expected
  assert shapes == [(2, 16), (2, 16)]
  shapes.clear()
  assert evaluation.score_candidates(_model(), None, pairs[2:], batch_size=0).tolist() == (
      expected[2:])  # one candidate, batch_size 0 counts as 1
  assert shapes == [(1, 8)]
  assert capsys.readouterr().err == ""  # no progress bar unless asked
  # On a mesh the batch is placed on it and scored under its logical-axis rules.
  entered = []

  @contextlib.contextmanager
  def axis_rules(mesh, rules):
    entered.append((mesh, rules))
    yield
  monkeypatch.setattr(partitioning, "axis_rules", axis_rules)
  evaluation.score_candidates(_model(), None, pairs, batch_size=2)
  assert entered == []
  mesh = partitioning.make_mesh((1, 1, 1), devices=jax.devices()[:1])
  rules = (("batch", "data"),)
  scores = evaluation.score_candidates(_model(), None, pairs, batch_size=2, mesh=mesh,
                                       rules=rules)
  assert scores.tolist() == expected and entered == [(mesh, rules)]


def test_learned_positions_bound_the_prompt_and_decoded_lengths(monkeypatch):
  _fake_decode_fn(monkeypatch)
  cfg = generation.DecodeConfig(max_decode_length=7)
  # The name built at run time (as a flag's value is), not the interned literal.
  causal = _model("causal", position_encoding="".join(["lear", "ned"]), max_length=16)
  # 6 tokens + BOS + EOS -> 8 positions, + 7 or 8 decoded: 15 or 16 of 16.
  for m in (7, 8):
    assert evaluation.decode_inputs(causal, None, [np.arange(2, 8)], batch_size=2,
                                    decode=generation.DecodeConfig(max_decode_length=m)) == [[10]]
  with pytest.raises(ValueError, match=r"prompts of 16 tokens \(\+ 7 decoded\) exceed the "
                     r"model's learned positions \(16\)"):
    evaluation.decode_inputs(causal, None, [np.arange(2, 9)], batch_size=2, decode=cfg)
  # Encoder-decoder: 7 tokens + EOS fill the encoder's 8 positions (the decoder's own do
  # not count here); 8 tokens + EOS -> 16 do not fit.
  encoder_decoder = _model("encoder_decoder", position_encoding="learned", max_length=8)
  assert evaluation.decode_inputs(encoder_decoder, None, [np.arange(2, 9)], batch_size=2,
                                  decode=cfg) == [[10]]
  with pytest.raises(ValueError, match=r"prompts of 16 tokens .* positions \(8\)"):
    evaluation.decode_inputs(encoder_decoder, None, [np.arange(2, 10)], batch_size=2,
                             decode=cfg)
  # Without a table of positions max_length bounds nothing.
  for position_encoding in ("alibi", "rope"):
    model = _model("causal", position_encoding=position_encoding, max_length=4)
    assert evaluation.decode_inputs(model, None, [np.arange(2, 9)], batch_size=2,
                                    decode=cfg) == [[10]]


def test_decode_and_score_functions_compile_once():
  model = _model()
  cfg = generation.DecodeConfig(max_decode_length=4)
  rules = tuple(partitioning.DEFAULT_LOGICAL_AXIS_RULES)
  assert evaluation._decode_fn(model, cfg, None, rules) is evaluation._decode_fn(
      model, cfg, None, rules)
  assert evaluation._score_fn(model) is evaluation._score_fn(model)


def test_evaluate_task_defaults_and_the_postprocessed_golds(monkeypatch, capsys):
  calls = _fake_decode_fn(monkeypatch)
  tok = fx.tokenizer()
  seen = []

  def metric(targets, predictions):
    seen.append((list(targets), list(predictions)))
    return {"n": float(len(targets))}
  task = dataclasses.replace(
      task_lib.get_task("test_copy"), metric_fns=(metric,),
      postprocess=lambda text, example=None, is_target=False: (is_target, text.strip()))
  out = evaluation.evaluate_task(_model(), None, tok, task, max_examples=3)
  # Defaults: 32 rows a batch, at most 64 tokens generated, no progress bar.
  assert [(c[0][0], c[3]) for c in calls] == [(32, 64)]
  assert capsys.readouterr().err == ""
  words = fx.WORDS[160:163]
  assert seen == [([(True, w) for w in words],
                   [(False, tok.decode([10 + i]).strip()) for i in range(3)])]
  assert out["metrics"] == {"n": 3.0} and out["split"] == "validation"


def test_rank_classification_refuses_an_example_without_choices():
  task = task_lib.get_task("test_first")
  examples = [{"inputs": "first: a b", "targets": "a", "candidates": ["b", "a"]},
              {"inputs": "first: c d", "targets": "c", "candidates": []}]
  with pytest.raises(ValueError, match="task 'test_first': example 1 has no choices"):
    evaluation.evaluate_task(_model(), None, fx.tokenizer(), task, examples=examples,
                             rank_classification=True)
