"""Tests of lm.checkpoint.hf_t5: HF T5 import/export, goldens from transformers (no torch needed)."""
import json
import os

import flax.linen as nn
import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from lm.checkpoint import hf_t5
from lm.model.transformer import Transformer, TransformerConfig

GOLDEN = os.path.join(os.path.dirname(__file__), "testdata", "hf_t5")

TINY_HF = dict(model_type="t5", vocab_size=48, d_model=12, d_kv=4, num_heads=2, d_ff=20,
               num_layers=2, num_decoder_layers=1, feed_forward_proj="gated-gelu",
               relative_attention_num_buckets=8, relative_attention_max_distance=20,
               layer_norm_epsilon=1e-6, dropout_rate=0.0, tie_word_embeddings=False)


def make_hf_tensors(cfg: dict, seed: int = 0) -> dict:
  """Random float32 tensors with HF T5 names and shapes for the config dict ``cfg``."""
  rng = np.random.default_rng(seed)
  d, inner, f, v = cfg["d_model"], cfg["num_heads"] * cfg["d_kv"], cfg["d_ff"], cfg["vocab_size"]
  gated = cfg["feed_forward_proj"].startswith("gated")
  shapes = {"shared.weight": (v, d)}
  if not cfg["tie_word_embeddings"]:
    shapes["lm_head.weight"] = (v, d)
  for stack, n in (("encoder", cfg["num_layers"]), ("decoder", cfg["num_decoder_layers"])):
    shapes[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = (
        cfg["relative_attention_num_buckets"], cfg["num_heads"])
    shapes[f"{stack}.final_layer_norm.weight"] = (d,)
    for i in range(n):
      p = f"{stack}.block.{i}.layer"
      attns = [f"{p}.0.SelfAttention"] + ([f"{p}.1.EncDecAttention"] if stack == "decoder" else [])
      for j, a in enumerate(attns):
        shapes.update({f"{a}.q.weight": (inner, d), f"{a}.k.weight": (inner, d),
                       f"{a}.v.weight": (inner, d), f"{a}.o.weight": (d, inner)})
        shapes[f"{p}.{j}.layer_norm.weight"] = (d,)
      m = len(attns)
      for w in (("wi_0", "wi_1") if gated else ("wi",)):
        shapes[f"{p}.{m}.DenseReluDense.{w}.weight"] = (f, d)
      shapes[f"{p}.{m}.DenseReluDense.wo.weight"] = (d, f)
      shapes[f"{p}.{m}.layer_norm.weight"] = (d,)
  return {k: rng.normal(0.0, 0.5, s).astype(np.float32) for k, s in sorted(shapes.items())}


def write_hf_dir(path, cfg, tensors, shards: int = 1):
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, "config.json"), "w") as fh:
    json.dump(cfg, fh)
  if shards == 1:
    save_file(tensors, os.path.join(path, "model.safetensors"))
    return
  names = sorted(tensors)
  weight_map = {}
  for s in range(shards):
    fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
    part = {k: tensors[k] for k in names[s::shards]}
    save_file(part, os.path.join(path, fname))
    weight_map.update({k: fname for k in part})
  with open(os.path.join(path, "model.safetensors.index.json"), "w") as fh:
    json.dump({"metadata": {}, "weight_map": weight_map}, fh)


def batch_for(vocab_size: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  enc = rng.integers(2, vocab_size, size=(2, 24)).astype(np.int32)
  enc[1, 18:] = 0
  dec = rng.integers(2, vocab_size, size=(2, 21)).astype(np.int32)
  dec[:, 0] = 0
  return {"encoder_input_tokens": enc, "decoder_input_tokens": dec}


def logits_of(config, params, batch):
  return np.asarray(Transformer(config).apply({"params": params}, batch))


def flat(tree, prefix=""):
  out = {}
  for k, v in tree.items():
    if isinstance(v, dict):
      out.update(flat(v, f"{prefix}{k}/"))
    else:
      out[prefix + k] = np.asarray(v)
  return out


# ---------------------------------------------------------------------------------------
# Goldens produced by transformers (tests/testdata/make_hf_t5_golden.py).

@pytest.mark.parametrize("name,tied", [("t5_1_1", False), ("t5_1_0", True)])
@pytest.mark.parametrize("scan_layers", [False, True])
def test_golden_logits_match_transformers(name, tied, scan_layers):
  directory = os.path.join(GOLDEN, name)
  golden = np.load(os.path.join(directory, "golden.npz"))
  config, params = hf_t5.load_hf_t5(directory, scan_layers=scan_layers)
  assert config.tie_embeddings == tied
  assert config.mlp_activation == ("gated_gelu" if name == "t5_1_1" else "relu")
  if tied:
    assert config.tied_logits_scale
  batch = {k: golden[k] for k in ("encoder_input_tokens", "decoder_input_tokens")}
  logits = logits_of(config, params, batch)
  assert logits.shape == golden["logits"].shape
  np.testing.assert_allclose(logits, golden["logits"], atol=1e-4, rtol=1e-5)


def test_golden_is_sensitive_to_the_position_bias():
  """A transposed relative bias table must break the golden (the test has teeth)."""
  directory = os.path.join(GOLDEN, "t5_1_1")
  golden = np.load(os.path.join(directory, "golden.npz"))
  config, params = hf_t5.load_hf_t5(directory)
  table = params["encoder"]["relpos_bias"]["rel_embedding"]
  params["encoder"]["relpos_bias"]["rel_embedding"] = table[:, ::-1].copy()
  batch = {k: golden[k] for k in ("encoder_input_tokens", "decoder_input_tokens")}
  assert np.max(np.abs(logits_of(config, params, batch) - golden["logits"])) > 1e-2


@pytest.mark.parametrize("scan_layers", [False, True])
def test_imported_tree_matches_model_init(scan_layers):
  config, params = hf_t5.load_hf_t5(os.path.join(GOLDEN, "t5_1_1"), scan_layers=scan_layers)
  batch = batch_for(config.vocab_size)
  abstract = jax.eval_shape(lambda: Transformer(config).init(jax.random.PRNGKey(0), batch))["params"]
  abstract = nn.meta.unbox(abstract)
  want = {"/".join(str(getattr(p, "key", p)) for p in path): leaf.shape
          for path, leaf in jax.tree_util.tree_flatten_with_path(abstract)[0]}
  got = {k: v.shape for k, v in flat(params).items()}
  assert got == want
  assert all(v.dtype == np.float32 for v in flat(params).values())


# ---------------------------------------------------------------------------------------
# Self-written checkpoints: import -> export -> import.

@pytest.mark.parametrize("proj,tied,shards", [("gated-gelu", False, 1), ("relu", True, 2),
                                              ("gated-silu", False, 3)])
def test_roundtrip_import_export_import(tmp_path, proj, tied, shards):
  cfg = dict(TINY_HF, feed_forward_proj=proj, tie_word_embeddings=tied)
  tensors = make_hf_tensors(cfg)
  write_hf_dir(tmp_path / "hf", cfg, tensors, shards=shards)
  config, params = hf_t5.load_hf_t5(tmp_path / "hf")
  assert (config.num_encoder_layers, config.num_decoder_layers) == (2, 1)
  assert (config.relative_num_buckets, config.relative_max_distance) == (8, 20)
  assert config.tie_embeddings == tied and config.head_dim == 4 and config.emb_dim == 12

  hf_t5.save_hf_t5(tmp_path / "out", config, params)
  written = load_file(str(tmp_path / "out" / "model.safetensors"))
  assert sorted(written) == sorted(tensors)  # same names, bit-identical values
  for k in tensors:
    np.testing.assert_array_equal(written[k], tensors[k], err_msg=k)
  with open(tmp_path / "out" / "config.json") as fh:
    out_cfg = json.load(fh)
  assert out_cfg["architectures"] == ["T5ForConditionalGeneration"]
  assert out_cfg["feed_forward_proj"] == proj and out_cfg["tie_word_embeddings"] == tied

  config2, params2 = hf_t5.load_hf_t5(tmp_path / "out")
  assert config2 == config
  f1, f2 = flat(params), flat(params2)
  assert f1.keys() == f2.keys()
  for k in f1:
    np.testing.assert_array_equal(f1[k], f2[k], err_msg=k)
  batch = batch_for(config.vocab_size)
  np.testing.assert_array_equal(logits_of(config, params, batch), logits_of(config2, params2, batch))


def test_scanned_import_equals_unscanned(tmp_path):
  write_hf_dir(tmp_path, TINY_HF, make_hf_tensors(TINY_HF))
  config, params = hf_t5.load_hf_t5(tmp_path)
  config_s, params_s = hf_t5.load_hf_t5(tmp_path, scan_layers=True)
  assert params_s["encoder"]["layers"]["mlp"]["wo"].shape == (2, 20, 12)
  np.testing.assert_array_equal(params_s["encoder"]["layers"]["mlp"]["wo"][1],
                                params["encoder"]["layers_1"]["mlp"]["wo"])
  batch = batch_for(config.vocab_size)
  np.testing.assert_allclose(logits_of(config_s, params_s, batch), logits_of(config, params, batch),
                             atol=1e-5)


def test_export_of_lm_init_roundtrips(tmp_path):
  """Boxed, scanned params from model.init export and re-import exactly (shared model too)."""
  for i, config in enumerate([
      TransformerConfig(vocab_size=40, emb_dim=8, num_heads=2, head_dim=3, mlp_dim=16,
                        num_encoder_layers=2, num_decoder_layers=2, scan_layers=True, dtype="float32"),
      TransformerConfig(vocab_size=40, emb_dim=8, num_heads=2, head_dim=4, mlp_dim=16,
                        num_encoder_layers=2, num_decoder_layers=2, shared_encoder_decoder=True,
                        mlp_activation="relu", tie_embeddings=True, dtype="float32")]):
    batch = batch_for(config.vocab_size, seed=i)
    boxed = Transformer(config).init(jax.random.PRNGKey(i), batch)["params"]
    hf_t5.save_hf_t5(tmp_path / str(i), config, boxed)
    config2, params2 = hf_t5.load_hf_t5(tmp_path / str(i), scan_layers=config.scan_layers)
    np.testing.assert_allclose(logits_of(config2, params2, batch), logits_of(config, boxed, batch),
                               atol=1e-5)
    if not config.shared_encoder_decoder:
      assert config2 == config
      want = flat(nn.meta.unbox(boxed))
      got = flat(params2)
      assert want.keys() == got.keys()
      for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


# ---------------------------------------------------------------------------------------
# Errors name the culprits.

def test_unknown_missing_and_misshaped_tensors_are_named():
  tensors = make_hf_tensors(TINY_HF)
  extra = dict(tensors, **{"encoder.block.7.layer.0.SelfAttention.q.weight": np.zeros((8, 12), np.float32)})
  with pytest.raises(hf_t5.HFConversionError, match=r"unknown tensor.*encoder\.block\.7\.layer\.0\.SelfAttention\.q"):
    hf_t5.hf_to_lm(TINY_HF, extra)
  missing = dict(tensors)
  del missing["decoder.block.0.layer.1.EncDecAttention.v.weight"]
  with pytest.raises(hf_t5.HFConversionError, match=r"missing tensor.*decoder\.block\.0\.layer\.1\.EncDecAttention\.v"):
    hf_t5.hf_to_lm(TINY_HF, missing)
  bad = dict(tensors, **{"encoder.block.1.layer.1.DenseReluDense.wo.weight": np.zeros((12, 21), np.float32)})
  with pytest.raises(hf_t5.HFConversionError, match=r"shape mismatch.*encoder\.block\.1\.layer\.1\.DenseReluDense\.wo.*\(12, 21\) != \(12, 20\)"):
    hf_t5.hf_to_lm(TINY_HF, bad)
  # A gated checkpoint read with a relu config: wi_0/wi_1 unknown, wi missing.
  with pytest.raises(hf_t5.HFConversionError, match="unknown tensor.*wi_0"):
    hf_t5.hf_to_lm(dict(TINY_HF, feed_forward_proj="relu"), tensors)
  # Differing embeddings cannot share lm's single token embedder.
  other = dict(tensors, **{"encoder.embed_tokens.weight": tensors["shared.weight"] + 1})
  with pytest.raises(hf_t5.HFConversionError, match="encoder.embed_tokens.weight"):
    hf_t5.hf_to_lm(TINY_HF, other)
  # The old stray cross-attention bias is ignored, as transformers does; equal embed copies are fine.
  ok = dict(tensors, **{"decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight":
                        np.zeros((8, 2), np.float32),
                        "decoder.embed_tokens.weight": tensors["shared.weight"].copy()})
  hf_t5.hf_to_lm(TINY_HF, ok)


def test_unsupported_configs_are_refused():
  tensors = make_hf_tensors(TINY_HF)
  with pytest.raises(hf_t5.HFConversionError, match="feed_forward_proj 'gelu'"):
    hf_t5.hf_to_lm(dict(TINY_HF, feed_forward_proj="gelu"), tensors)
  with pytest.raises(hf_t5.HFConversionError, match="layer_norm_epsilon"):
    hf_t5.hf_to_lm(dict(TINY_HF, layer_norm_epsilon=1e-5), tensors)
  with pytest.raises(hf_t5.HFConversionError, match="unknown TransformerConfig field"):
    hf_t5.hf_to_lm(TINY_HF, tensors, scan=True)
  for field in ("decoder_start_token_id", "pad_token_id"):
    with pytest.raises(hf_t5.HFConversionError, match=f"{field} 2 is not T5's 0"):
      hf_t5.hf_to_lm(dict(TINY_HF, **{field: 2}), tensors)
  hf_t5.hf_to_lm(dict(TINY_HF, decoder_start_token_id=0, pad_token_id=0), tensors)
  with pytest.raises(hf_t5.HFConversionError, match="mask_type='causal'"):
    hf_t5.config_to_hf(TransformerConfig(num_encoder_layers=0, mask_type="causal"))
  with pytest.raises(hf_t5.HFConversionError, match="position_encoding='rope'"):
    hf_t5.config_to_hf(TransformerConfig(position_encoding="rope"))


def test_export_rejects_params_that_do_not_fit(tmp_path):
  config, params = hf_t5.hf_to_lm(TINY_HF, make_hf_tensors(TINY_HF))
  extra = dict(params, encoder=dict(params["encoder"], pos_embedder={"embedding": np.zeros((4, 12))}))
  with pytest.raises(hf_t5.HFConversionError, match="encoder/pos_embedder/embedding"):
    hf_t5.lm_to_hf(config, extra)
  missing = dict(params)
  del missing["logits_dense"]
  with pytest.raises(hf_t5.HFConversionError, match="logits_dense/kernel"):
    hf_t5.lm_to_hf(config, missing)
  wrong = dict(params, decoder=dict(params["decoder"], final_norm={"scale": np.ones(13, np.float32)}))
  with pytest.raises(hf_t5.HFConversionError, match="decoder/final_norm/scale"):
    hf_t5.lm_to_hf(config, wrong)


@pytest.mark.parametrize("name", [hf_t5.WEIGHTS_NAME, hf_t5.CONFIG_NAME, hf_t5.INDEX_NAME])
def test_truncated_files_are_one_error_naming_the_file(tmp_path, name):
  """An interrupted download: a truncated model.safetensors, config.json or shard index is a
  ValueError (lm's exit 2) naming the file, not a safetensors / JSON traceback."""
  import shutil
  directory = tmp_path / "hf"
  shutil.copytree(os.path.join(GOLDEN, "t5_1_1"), directory)
  if name == hf_t5.INDEX_NAME:  # the sharded layout
    tensors = load_file(str(directory / hf_t5.WEIGHTS_NAME))
    (directory / hf_t5.WEIGHTS_NAME).unlink()
    names = sorted(tensors)
    save_file({k: tensors[k] for k in names[:5]}, str(directory / "a.safetensors"))
    save_file({k: tensors[k] for k in names[5:]}, str(directory / "b.safetensors"))
    (directory / name).write_text(json.dumps(
        {"weight_map": {k: "a.safetensors" if i < 5 else "b.safetensors"
                        for i, k in enumerate(names)}}))
    hf_t5.load_hf_t5(directory)  # intact: loads
  path = directory / name
  path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
  with pytest.raises(hf_t5.HFConversionError) as e:
    hf_t5.load_hf_t5(directory)
  message = str(e.value)
  assert str(path) in message and "truncated" in message and "\n" not in message, message
  assert isinstance(e.value, ValueError)
  if name == hf_t5.INDEX_NAME:  # and a truncated shard
    shard = directory / "b.safetensors"
    (directory / name).write_text(json.dumps({"weight_map": {k: "b.safetensors" for k in names}}))
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(hf_t5.HFConversionError, match=f"{shard} is not a readable safetensors"):
      hf_t5.load_hf_t5(directory)


def test_export_refuses_the_t5gemma_knobs(tmp_path):
  """HF T5 has no grouped-query attention, query scale, soft-caps or scaled embeddings: a
  model that sets one is refused before anything is written, naming the field."""
  config = TransformerConfig(vocab_size=32, emb_dim=8, num_heads=2, head_dim=4, mlp_dim=16,
                             num_encoder_layers=1, num_decoder_layers=1, dtype="float32")
  for name, value in (("num_kv_heads", 1), ("query_pre_attn_scalar", 4.0),
                      ("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0),
                      ("scale_embeddings", True)):
    with pytest.raises(hf_t5.HFConversionError, match=f"cannot export to HF T5: {name}="):
      hf_t5.save_hf_t5(tmp_path / name, config.replace(**{name: value}), {})
    assert not (tmp_path / name).exists()
