"""Fine-tuning a T5Gemma checkpoint framed as transformers frames it (config.finetune.framing
"t5gemma"): the data, the task evaluation's scoring and the trainer's first loss against a
transformers golden (tests/testdata/make_t5gemma_finetune_golden.py; no torch here)."""
import dataclasses
import json
import os

import jax
import numpy as np
import pytest

import fake_gcs
from lm import checkpoint
from lm import config as config_lib
from lm import metrics as metrics_lib
from lm import steps, train
from lm.checkpoint import hf_t5gemma
from lm.data import converters
from lm.downstream import evaluation, finetune_data
from lm.downstream import task as task_lib

GOLDEN = os.path.join(os.path.dirname(__file__), "testdata", "hf_t5gemma")
TINY = os.path.join(GOLDEN, "tiny_2x2")  # 2 + 2 layers (make_t5gemma_finetune_golden.py)
TASK = "t5gemma_golden_pairs"
T5GEMMA = converters.FRAMINGS["t5gemma"]


@pytest.fixture(scope="module")
def golden():
  with open(os.path.join(GOLDEN, "finetune_golden.json")) as f:
    g = json.load(f)
  if TASK not in task_lib.task_names():
    task_lib.register(task_lib.Task(
        name=TASK, load=lambda split, data_dir=None: [dict(zip(("i", "t"), p)) for p in g["pairs"]],
        preprocess=lambda raw: {"inputs": raw["i"], "targets": raw["t"]},
        metric_fns=(lambda targets, predictions: {"n": float(len(targets))},),
        description="the golden's (inputs, targets) pairs (test task)"))
  return g


@pytest.fixture(scope="module")
def restored():
  from lm import restore
  return restore.load_hf(TINY)


def _first_batch(golden, restored, framing):
  """The first fine-tuning batch of the golden's pairs: one per row, unpacked."""
  spec = finetune_data.FinetuneSpec(tasks=((TASK, 1.0),), architecture="encoder_decoder",
                                    inputs_length=32, targets_length=16,
                                    batch_size=len(golden["pairs"]), num_shards=1, pack=False,
                                    framing=framing)
  it = finetune_data.FinetuneData(spec, tokenizer=restored.tokenizer).train_iterator()
  try:
    return next(it)
  finally:
    it.close()


def test_the_data_frame_examples_as_transformers_does(golden, restored):
  """Encoder input <bos> + pieces, labels pieces + <eos>, decoder inputs from <bos> 2."""
  batch = _first_batch(golden, restored, T5GEMMA)
  rows = {}
  for r in range(batch["encoder_input_tokens"].shape[0]):
    enc = batch["encoder_input_tokens"][r]
    dec = batch["decoder_target_tokens"][r]
    rows[tuple(enc[enc > 0])] = (dec[dec > 0].tolist(),
                                 batch["decoder_input_tokens"][r][:np.sum(dec > 0)].tolist())
  want = {tuple(i): (l, d) for i, l, d in zip(golden["input_ids"], golden["labels"],
                                              golden["decoder_input_ids"])}
  assert rows == want


def test_the_first_finetuning_loss_is_transformers_loss(golden, restored):
  """lm's loss of the restored params on the first fine-tuning batch (the trainer's first
  logged cross-entropy: eval_step is train_step's loss without dropout) equals transformers'
  T5GemmaForConditionalGeneration(..., labels=...).loss; T5's framing gives another."""
  def loss(framing):
    batch = _first_batch(golden, restored, framing)
    m = jax.jit(lambda p, b: steps.eval_step(p, b, model=restored.model))(restored.params, batch)
    values = metrics_lib.compute(jax.device_get(m))
    return values["cross_entropy"], float(np.sum(batch["decoder_loss_weights"]))

  got, tokens = loss(T5GEMMA)
  assert tokens == golden["target_tokens"]
  np.testing.assert_allclose(got, golden["loss"], rtol=2e-6)
  t5, _ = loss(converters.T5_FRAMING)
  assert abs(t5 - golden["loss"]) > 1e-3  # 500x the tolerance


def test_rank_classification_scores_with_the_framing(golden, restored):
  """evaluation.score_candidates (rank classification) gives transformers' log p(labels)."""
  tok = restored.tokenizer
  pairs = [(tok.encode(i), tok.encode(t)) for i, t in golden["pairs"]]
  got = evaluation.score_candidates(restored.model, restored.params, pairs, batch_size=4,
                                    framing=T5GEMMA)
  np.testing.assert_allclose(-got, golden["nll"], rtol=2e-6)
  t5 = evaluation.score_candidates(restored.model, restored.params, pairs, batch_size=4)
  assert np.all(np.abs(-t5 - np.asarray(golden["nll"])) > 1e-2)


def test_trimmed_inputs_keep_room_for_the_framing():
  """The evaluator cuts inputs as the converter does: T5's keeps room for EOS, T5Gemma's
  for <bos>, a framing with neither keeps them whole."""
  ids = np.arange(3, 13)
  bare = converters.Framing(prompt_bos=None, prompt_eos=False)
  for framing in (converters.T5_FRAMING, T5GEMMA, bare):
    cut = evaluation._trim_inputs(ids, 6, framing)  # pylint: disable=protected-access
    row = converters.convert({"inputs": ids, "targets": ids[:2]}, "encoder_decoder",
                             lengths={"inputs": 6, "targets": 4}, framing=framing)
    assert row["encoder_input_tokens"].tolist() == framing.frame(cut, False)
    assert len(row["encoder_input_tokens"]) == 6


def test_the_spec_keeps_t5_fingerprints_and_checks_the_tokenizer(golden, restored):
  spec = finetune_data.FinetuneSpec(tasks=((TASK, 1.0),), num_shards=1, batch_size=3)
  gemma = dataclasses.replace(spec, framing=T5GEMMA)
  assert spec.fingerprint() != gemma.fingerprint()
  assert dataclasses.replace(spec, framing=converters.Framing()).fingerprint() == \
      spec.fingerprint()

  class T5Tokenizer:  # T5's layout has no <bos>
    bos_id = None
  with pytest.raises(ValueError, match=r"<bos> 2 before every input but the tokenizer's BOS "
                                       r"is None; set data.tokenizer"):
    finetune_data.FinetuneData(gemma, tokenizer=T5Tokenizer())
  finetune_data.FinetuneData(gemma, tokenizer=restored.tokenizer)


def test_init_from_refuses_a_framing_the_checkpoint_does_not_start_with(caplog):
  import flax.linen as nn

  from lm.model.transformer import Transformer
  config, params = hf_t5gemma.load_hf_t5gemma(TINY)
  batch = {"encoder_input_tokens": np.ones((1, 4), np.int32),
           "decoder_input_tokens": np.ones((1, 4), np.int32)}
  abstract = jax.eval_shape(lambda: nn.unbox(Transformer(config).init(jax.random.key(0),
                                                                      batch)["params"]))
  with pytest.raises(checkpoint.IncompatibleCheckpointError,
                     match=r"starts from token 2 but this run's framing starts it from 0; "
                           r"set --config.finetune.framing=t5gemma"):
    train.init_params_from(TINY, config, abstract, None, framing=converters.T5_FRAMING)
  with caplog.at_level("WARNING"):
    got = train.init_params_from(TINY, config, abstract, None, framing=T5GEMMA)
  assert not [r for r in caplog.records if "decoder starts" in r.getMessage()]
  np.testing.assert_array_equal(np.asarray(jax.tree.leaves(got)[0]),
                                np.asarray(jax.tree.leaves(params)[0]))


def test_the_framing_is_a_finetune_setting():
  from configs import finetune
  c = finetune.get_config("task=glue_cola,runlocal")
  assert c.finetune.framing == "t5"
  assert config_lib.framing(c) == converters.T5_FRAMING
  c.finetune.framing = "t5gemma"
  assert config_lib.framing(c) == T5GEMMA
  c.finetune.framing = "gemma"
  with pytest.raises(ValueError, match=r"unknown framing 'gemma'; expected one of \['t5', "
                                       r"'t5gemma'\]"):
    config_lib.framing(c)
  pre = config_lib.derive(__import__("configs.t5", fromlist=["x"]).get_config("runlocal"))
  assert config_lib.framing(pre) == converters.T5_FRAMING


def test_finetuning_from_t5gemma_starts_at_transformers_loss(golden, tmp_path):
  """The trainer, fine-tuning the tiny T5Gemma (ckpt.init_from, finetune.framing=t5gemma,
  its tokenizer.model): the first logged cross-entropy is transformers' loss on the same
  eight examples (one per row; runlocal has no dropout)."""
  from configs import finetune as finetune_config
  from lm.downstream import finetune
  from lm.validate import validate
  c = finetune_config.get_config(f"task={TASK},runlocal,inputs_length=32,targets_length=16,"
                                 "steps=1,eval_every=0,batch=8")
  tiny, _ = hf_t5gemma.load_hf_t5gemma(TINY)
  fields = {f.name: getattr(tiny, f.name) for f in dataclasses.fields(tiny)
            if f.name not in config_lib.DERIVED_MODEL_FIELDS}
  with c.unlocked():
    c.model = config_lib.model_section("t5gemma", "s", "encoder_decoder",
                                       num_layers=tiny.num_decoder_layers, **fields)
  c.data.tokenizer = os.path.join(TINY, "tokenizer.model")
  c.data.extra_ids, c.data.num_shards, c.data.pack = 0, 1, False
  c.ckpt.init_from, c.ckpt.async_save = TINY, False
  c.finetune.framing = "t5gemma"
  c.train.log_every, c.wandb.mode = 1, "disabled"
  train.train_and_evaluate(validate(config_lib.derive(c)), str(tmp_path), finetune.PARTS)
  with open(tmp_path / "metrics.jsonl") as f:
    first = [json.loads(line) for line in f][0]
  assert first["step"] == 1
  np.testing.assert_allclose(first["cross_entropy"], golden["loss"], rtol=1e-5)


def test_init_from_refuses_an_lm_run_framed_otherwise(golden, tmp_path):
  """A fine-tuning run must share its base run's framing (config.json's): a run fine-tuned
  with T5Gemma's framing cannot start a T5-framed one, nor a pre-training run (T5's) a
  T5Gemma-framed one; the check comes before any parameter is read."""
  from configs import finetune as finetune_config
  from lm import writers
  base = tmp_path / "base"
  (base / "checkpoints").mkdir(parents=True)
  del golden  # registers TASK
  c = config_lib.derive(finetune_config.get_config(f"task={TASK},runlocal"))
  c.finetune.framing = "t5gemma"
  (base / "config.json").write_text(json.dumps(writers.filter_secrets(c.to_dict())))
  for path in (base, base / "checkpoints"):
    with pytest.raises(checkpoint.IncompatibleCheckpointError,
                       match=r"was trained with the framing .*decoder_start=2.* set "
                             r"--config.finetune.framing=t5gemma"):
      train.init_params_from(str(path), None, None, None, framing=converters.T5_FRAMING)
  pre = tmp_path / "pre"
  (pre / "checkpoints").mkdir(parents=True)
  p = config_lib.derive(__import__("configs.t5", fromlist=["x"]).get_config("runlocal"))
  (pre / "config.json").write_text(json.dumps(writers.filter_secrets(p.to_dict())))
  with pytest.raises(checkpoint.IncompatibleCheckpointError,
                     match=r"set --config.finetune.framing=t5\."):
    train.init_params_from(str(pre), None, None, None, framing=T5GEMMA)
  # The same check on a gs:// run (its config.json read through etils.epath).
  remote = tmp_path / "gcs" / "bucket" / "base"
  (remote / "checkpoints").mkdir(parents=True)
  (remote / "config.json").write_text((base / "config.json").read_text())
  with fake_gcs.installed(tmp_path / "gcs"):
    with pytest.raises(checkpoint.IncompatibleCheckpointError,
                       match=r"gs://bucket/base was trained with the framing .*decoder_start=2"):
      train.init_params_from("gs://bucket/base", None, None, None,
                             framing=converters.T5_FRAMING)
    assert config_lib.load_config_json("gs://bucket/base/config.json").finetune.framing == (
        "t5gemma")
