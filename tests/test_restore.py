"""lm.restore: a run's params onto any mesh, its tokenizer, HF directories, and bad inputs."""
import json
import logging
import os
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from lm import checkpoint, restore
from lm.data import tokenizer as tokenizer_lib
import fake_gcs
from eval_runs import SPM_TEXT, copy_run, fake_run

HF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "hf_t5", "t5_1_1")


@pytest.fixture(scope="module", name="run")
def _run(tmp_path_factory):
  """A run directory with checkpoints of steps 2 and 4 (lm.train's layout, not trained)."""
  return fake_run(str(tmp_path_factory.mktemp("restore") / "run"))


def _saved_params(workdir, step):
  """The params as orbax reads them from disk, without lm (the independent reference)."""
  state = ocp.PyTreeCheckpointer().restore(os.path.join(workdir, "checkpoints", str(step),
                                                        "state"))
  return state["params"]


def _edit_config(workdir, edit):
  path = os.path.join(workdir, "config.json")
  with open(path, encoding="utf-8") as f:
    config = json.load(f)
  edit(config)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(config, f)


def _assert_trees_equal(a, b):
  flat_a = jax.tree_util.tree_flatten_with_path(a)[0]
  flat_b = dict(jax.tree_util.tree_flatten_with_path(b)[0])
  assert len(flat_a) == len(flat_b)
  for path, x in flat_a:
    np.testing.assert_array_equal(np.asarray(x), np.asarray(flat_b[path]), err_msg=str(path))


def test_params_of_the_given_step_onto_any_mesh(run):
  workdir = run
  latest = restore.load_run(workdir)
  assert latest.step == 4 and latest.workdir == workdir and latest.architecture == "encoder_decoder"
  assert dict(latest.mesh.shape) == {"data": 8, "fsdp": 1, "tensor": 1}
  _assert_trees_equal(jax.device_get(latest.params), _saved_params(workdir, 4))

  sharded = restore.load_run(workdir, step=2, mesh_shape=(1, 2, 4))
  assert sharded.step == 2
  emb = sharded.params["token_embedder"]["embedding"]  # (vocab, embed) -> (tensor, fsdp)
  assert emb.sharding.spec == jax.sharding.PartitionSpec("tensor", "fsdp")
  one = restore.load_run(workdir, step=2, mesh_shape=(1, 1, 1), devices=jax.devices()[:1])
  assert one.mesh.devices.size == 1
  saved = _saved_params(workdir, 2)
  _assert_trees_equal(jax.device_get(sharded.params), saved)
  _assert_trees_equal(jax.device_get(one.params), saved)
  # The steps differ, so the step argument is honoured.
  assert not np.array_equal(saved["token_embedder"]["embedding"],
                            _saved_params(workdir, 4)["token_embedder"]["embedding"])


def test_tokenizer_is_the_runs(run, tmp_path):
  workdir = run
  r = restore.load_run(workdir)
  # The run's data.tokenizer: 28 pieces + 100 sentinels.
  assert (r.tokenizer.vocab_size, r.tokenizer.extra_ids) == (128, 100)
  assert r.model_config.vocab_size == 128
  # Pointing data.tokenizer elsewhere reads that file (here: a copy of the same model).
  spm_path = str(tmp_path / "spm.model")
  r.tokenizer.save(spm_path)
  other = copy_run(workdir, str(tmp_path / "run"))
  _edit_config(other, lambda c: c["data"].update(tokenizer=spm_path))
  assert restore.load_run(other).tokenizer.model_proto == r.tokenizer.model_proto
  os.remove(spm_path)
  with pytest.raises(FileNotFoundError, match="spm.model"):
    restore.load_run(other)


def test_runtime_overrides_are_allowed(run):
  r = restore.load_run(run, overrides=["--config.model.dtype=float32",
                                                 "--config.model.attention_impl=xla",
                                                 "--config.data.eval_batch_size=8"])
  assert r.model_config.dtype == "float32" and r.config.data.eval_batch_size == 8
  assert r.model_config.attention_impl == "xla"


def test_missing_workdir_config_or_checkpoint(run, tmp_path):
  with pytest.raises(restore.RunNotFoundError, match="does not exist"):
    restore.load_run(str(tmp_path / "nope"))
  with pytest.raises(restore.RunNotFoundError, match="config.json"):
    restore.load_run(str(tmp_path))
  bare = str(tmp_path / "bare")
  os.makedirs(bare)
  shutil.copy(os.path.join(run, "config.json"), bare)
  with pytest.raises(restore.RunNotFoundError, match="no checkpoint"):
    restore.load_run(bare)


def test_a_run_on_a_bucket_restores_and_evaluates(run, tmp_path, monkeypatch):
  """A gs:// workdir (the offline fake bucket, tests/fake_gcs.py) restores the params of its
  local copy, and lm.evaluate writes its result beside the run on the bucket."""
  from lm import evaluate  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(tmp_path)
  bucket = tmp_path / "gcs" / "bucket"
  copy_run(run, str(bucket / "run"))
  local = restore.load_run(run, step=2)
  with fake_gcs.installed(tmp_path / "gcs"):
    remote = restore.load_run("gs://bucket/run", step=2)
    with pytest.raises(restore.RunNotFoundError, match="gs://bucket/nope does not exist"):
      restore.load_run("gs://bucket/nope")
    assert evaluate.run(["--workdir=gs://bucket/run", "--step=2", "--score=own",
                         "--config.data.eval_batch_size=8", "--config.train.eval_steps=1"]) == 0
  assert remote.workdir == "gs://bucket/run"
  assert remote.source == "gs://bucket/run/checkpoints/2" and remote.step == 2
  _assert_trees_equal(remote.params, local.params)
  result = json.loads((bucket / "run" / "eval" / "step_2.json").read_text())
  assert result["step"] == 2 and result["results"]
  assert not os.path.exists(tmp_path / "gs:")   # nothing went to a local folder "gs:"


def test_unknown_step_lists_the_available_ones(run):
  with pytest.raises(restore.StepNotFoundError, match="step 3 .*available steps: 2, 4"):
    restore.load_run(run, step=3)


@pytest.mark.parametrize("override, match", [
    ("--config.model.emb_dim=96", "emb_dim: 64 in the run, 96 overridden"),
    ("--config.model.architecture=prefix_lm", "mask_type: 'encoder_decoder' in the run, "
     "'prefix_lm' overridden"),
    ("--config.model.architecture=shared", "shared_encoder_decoder"),
    ("--config.model.num_layers=1", "num_decoder_layers: 2 in the run, 1 overridden"),
])
def test_shape_or_architecture_changing_override_is_refused(run, override, match):
  with pytest.raises(restore.IncompatibleCheckpointError, match=match):
    restore.load_run(run, overrides=[override])


@pytest.mark.parametrize("override, match", [
    ("--config.model.emb_dimm=96", "no field 'model.emb_dimm'"),
    ("--config.model.emb_dim", "--config.<field>=<value>"),
    ("--config.model.emb_dim=big", "expected an int"),
])
def test_malformed_override(run, override, match):
  with pytest.raises(ValueError, match=match):
    restore.load_run(run, overrides=[override])


def test_checkpoint_of_another_architecture_or_vocabulary(run, tmp_path):
  """config.json describing another model than the checkpoint: refused before reading."""
  src = run

  def to_prefix_lm(c):  # an encoder-decoder checkpoint under a decoder-only config
    c["model"]["architecture"] = "prefix_lm"
  arch = copy_run(src, str(tmp_path / "arch"))
  _edit_config(arch, to_prefix_lm)
  with pytest.raises(restore.IncompatibleCheckpointError,
                     match="another model .*mask_type: 'encoder_decoder' in the checkpoint"):
    restore.load_run(arch)

  vocab = copy_run(src, str(tmp_path / "vocab"))
  _edit_config(vocab, lambda c: c["model"].update(vocab_size=256))
  with pytest.raises(restore.IncompatibleCheckpointError, match="vocab_size: 128"):
    restore.load_run(vocab)


def _hf_copy(tmp_path, with_spm=True):
  """The golden HF T5 directory (vocab 64) plus a 28-piece SentencePiece model + 36 sentinels."""
  directory = str(tmp_path / "hf")
  shutil.copytree(HF_DIR, directory)
  if with_spm:
    tokenizer_lib.train_tokenizer(SPM_TEXT, vocab_size=28, extra_ids=36,
                                  output=os.path.join(directory, "spiece.model"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
      json.dump({"extra_ids": 36}, f)
  return directory


def test_load_hf_reproduces_the_transformers_logits(tmp_path):
  directory = _hf_copy(tmp_path)
  r = restore.load_hf(directory, dtype="float32")
  assert r.config is None and r.step is None and r.tokenizer.vocab_size == 64
  golden = np.load(os.path.join(HF_DIR, "golden.npz"))
  batch = {k: golden[k] for k in ("encoder_input_tokens", "decoder_input_tokens")}
  logits = jax.jit(r.model.apply)({"params": r.params}, batch)
  np.testing.assert_allclose(np.asarray(logits), golden["logits"], atol=1e-4, rtol=1e-5)


def test_load_hf_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="does not exist"):
    restore.load_hf(str(tmp_path / "nope"))
  directory = _hf_copy(tmp_path, with_spm=False)
  with pytest.raises(FileNotFoundError, match="spiece.model"):
    restore.load_hf(directory)
  tokenizer_lib.train_tokenizer(SPM_TEXT, vocab_size=20, extra_ids=36,  # 56 rows, not 64
                                output=os.path.join(directory, "spiece.model"))
  with pytest.raises(restore.IncompatibleCheckpointError, match="vocabulary size"):
    restore.load_hf(directory, extra_ids=36)


def test_checkpoint_of_a_same_shaped_other_architecture(tmp_path):
  """prefix LM and causal LM have the same params: only the signature tells them apart."""
  workdir = fake_run(str(tmp_path / "plm"), arch="prefix_lm")
  assert restore.load_run(workdir).architecture == "prefix_lm"

  def to_causal(c):
    c["model"]["architecture"] = "causal"
  _edit_config(workdir, to_causal)
  with pytest.raises(restore.IncompatibleCheckpointError,
                     match="mask_type: 'prefix_lm' in the checkpoint, 'causal' in config.json"):
    restore.load_run(workdir)


def test_config_json_of_an_older_run_is_migrated(tmp_path):
  """A run written before config.model.architecture (model.preset, mask_type, num_*_layers,
  data.architecture in config.json) restores with the same model."""
  workdir = fake_run(str(tmp_path / "old"), arch="prefix_lm")
  want = restore.load_run(workdir).model_config

  def to_old(c):
    for name in ("family", "size", "architecture", "num_layers"):
      del c["model"][name]
    c["model"].update(preset="tiny_prefix_lm", mask_type="prefix_lm",
                      shared_encoder_decoder=False, num_encoder_layers=0, num_decoder_layers=2)
    c["data"]["architecture"] = "prefix_lm"
  _edit_config(workdir, to_old)
  r = restore.load_run(workdir)
  assert r.model_config == want and r.architecture == "prefix_lm"
  assert (r.config.model.family, r.config.model.size) == ("cpu", "tiny")


# -- every loader verifies what it reads (lm.decode, lm.evaluate, ckpt.init_from) --------

def _damage(workdir, step, how):
  """Damages checkpoint `step` of a run: a recorded params checksum that no longer
  matches (the read succeeds, the values are wrong), 8 bytes overwritten in a tensor file,
  or the state's manifest.ocdbt removed."""
  step_dir = os.path.join(workdir, "checkpoints", str(step))
  if how == "checksum":
    path = os.path.join(step_dir, "meta", "metadata")
    with open(path, encoding="utf-8") as f:
      meta = json.load(f)
    name = sorted(k for k in meta["checksums"] if k.startswith("params/"))[0]
    meta["checksums"][name] = [c ^ 1 for c in meta["checksums"][name]]
    with open(path, "w", encoding="utf-8") as f:
      json.dump(meta, f)
  elif how == "tensor_bytes":
    data = os.path.join(step_dir, "state", "ocdbt.process_0", "d")
    path = max((os.path.join(data, n) for n in os.listdir(data)), key=os.path.getsize)
    with open(path, "r+b") as f:
      f.seek(os.path.getsize(path) // 2)
      f.write(b"\xff\x00" * 4)
  else:
    assert how == "manifest"
    os.remove(os.path.join(step_dir, "state", "manifest.ocdbt"))
  return step_dir


def _warnings(caplog):
  return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("how", ["checksum", "tensor_bytes", "manifest"])
def test_damaged_newest_step_falls_back_to_the_newest_intact_one(run, tmp_path, caplog, how):
  """A loader without a step uses the newest intact step, says so once, and changes nothing."""
  workdir = copy_run(run, str(tmp_path / "run"))
  step_dir = _damage(workdir, 4, how)
  with caplog.at_level(logging.WARNING):
    r = restore.load_run(workdir)
  assert r.step == 2 and r.source.endswith(os.path.join("checkpoints", "2"))
  _assert_trees_equal(r.params, _saved_params(workdir, 2))
  warnings = _warnings(caplog)
  assert len(warnings) == 1, warnings  # no library noise (orbax's read-only notices) either
  assert step_dir in warnings[0] and "using step 2, the newest intact" in warnings[0]
  assert "tensorstore_spec" not in warnings[0] and "\n" not in warnings[0]
  if how == "manifest":
    assert "state/manifest.ocdbt" in warnings[0]
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["2", "4"]  # untouched


def test_damaged_named_step_or_no_intact_step_is_one_error(run, tmp_path):
  workdir = copy_run(run, str(tmp_path / "run"))
  step4 = _damage(workdir, 4, "checksum")
  with pytest.raises(checkpoint.CheckpointDamagedError) as e:
    restore.load_run(workdir, step=4)
  message = str(e.value)
  assert step4 in message and "differ from the checksums" in message and "\n" not in message
  assert "other steps on disk: [2]" in message
  step2 = _damage(workdir, 2, "manifest")
  for step in (None, 2):
    with pytest.raises(checkpoint.CheckpointDamagedError) as e:
      restore.load_run(workdir, step=step)
    assert step2 in str(e.value) and "\n" not in str(e.value)
  assert "intact steps: none" in str(pytest.raises(
      checkpoint.CheckpointDamagedError, restore.load_run, workdir).value)
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["2", "4"]


def test_decode_and_evaluate_exit_2_with_one_line_on_a_damaged_step(run, tmp_path, capsys):
  from lm import decode, evaluate
  workdir = copy_run(run, str(tmp_path / "run"))
  step_dir = _damage(workdir, 4, "checksum")
  prompts = tmp_path / "prompts.txt"
  prompts.write_text("a b c\n", encoding="utf-8")
  capsys.readouterr()
  assert decode.main([f"--workdir={workdir}", "--step=4", f"--input={prompts}"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("lm.decode: error: ") and err.count("\n") == 1 and step_dir in err, err
  assert evaluate.run([f"--workdir={workdir}", "--step=4"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: ") and err.count("\n") == 1 and step_dir in err, err


def test_init_from_verifies_the_base_run(run, tmp_path, caplog):
  """ckpt.init_from (lm.train.init_params_from) reads a base run as the loaders do."""
  from lm import config as config_lib
  from lm import train
  from lm.model.transformer import Transformer
  workdir = copy_run(run, str(tmp_path / "run"))
  step_dir = _damage(workdir, 4, "tensor_bytes")
  model_config = config_lib.model_config(
      config_lib.load_config_json(os.path.join(workdir, "config.json")))
  abstract, shardings = restore.abstract_params(
      Transformer(model_config), restore.load_run(run).mesh)
  with caplog.at_level(logging.WARNING):
    params = train.init_params_from(workdir, model_config, abstract, shardings)
  _assert_trees_equal(params, _saved_params(workdir, 2))
  warnings = _warnings(caplog)
  assert len(warnings) == 1 and step_dir in warnings[0] and "ckpt.init_from" in warnings[0]
  _damage(workdir, 2, "checksum")
  with pytest.raises(checkpoint.CheckpointDamagedError, match="ckpt.init_from: .*intact steps: "
                     "none"):
    train.init_params_from(workdir, model_config, abstract, shardings)


def test_a_signature_stands_for_the_added_fields_it_leaves_out():
  """run_signature drops ADDED_FIELDS at their defaults; recorded_model puts them back, so
  a checkpoint of a default model compares equal to its config field by field (a False
  default read as None refused every restore of a new run)."""
  import dataclasses as dc
  from lm.checkpoint import signature
  from lm.model.transformer_config import ADDED_FIELDS, EXECUTION_FIELDS, TransformerConfig
  for config in (TransformerConfig(), TransformerConfig(scale_embeddings=True, num_kv_heads=3)):
    model = dc.asdict(config)
    recorded = signature.run_signature(model, {"params": {}})["model"]
    assert "scale_embeddings" in recorded or config.scale_embeddings == ADDED_FIELDS[
        "scale_embeddings"]
    back = signature.recorded_model(recorded)
    assert back == {
        k: v for k, v in json.loads(json.dumps(model, default=str)).items()
        if k not in EXECUTION_FIELDS}
