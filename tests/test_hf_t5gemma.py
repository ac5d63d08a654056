"""Tests of lm.checkpoint.hf_t5gemma: HF T5Gemma import/export against a transformers golden
(tests/testdata/make_t5gemma_golden.py wrote it; no torch needed here)."""
import copy
import json
import os

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from lm import generation
from lm.checkpoint import hf_t5gemma
from lm.checkpoint.hf_t5 import HFConversionError
from lm.model.transformer import Transformer

GOLDEN = os.path.join(os.path.dirname(__file__), "testdata", "hf_t5gemma")
TINY = os.path.join(GOLDEN, "tiny")
ATOL = 5e-5  # float32: the script measured 2.2e-5 on logits up to 3.9 in magnitude


@pytest.fixture(scope="module")
def golden():
  return dict(np.load(os.path.join(GOLDEN, "golden.npz")))


@pytest.fixture(scope="module")
def loaded():
  return hf_t5gemma.load_hf_t5gemma(TINY)


def _hf_config():
  with open(os.path.join(TINY, "config.json")) as f:
    return json.load(f)


def test_config_maps_every_t5gemma_knob(loaded):
  config, _ = loaded
  assert (config.num_heads, config.num_kv_heads, config.head_dim, config.emb_dim) == (4, 2, 8, 16)
  assert (config.num_encoder_layers, config.num_decoder_layers) == (3, 2)
  assert (config.sliding_window, config.layer_pattern) == (3, "LG")
  assert (config.query_pre_attn_scalar, config.attn_logit_softcapping,
          config.final_logit_softcapping) == (6.0, 2.0, 4.0)
  assert (config.norm_type, config.norm_position, config.position_encoding) == (
      "gemma_rmsnorm", "sandwich", "rope")
  assert config.tie_embeddings and not config.tied_logits_scale and config.scale_embeddings
  assert config.separate_encoder_embedding
  assert config.mlp_activation == "gated_gelu" and config.dtype == "float32"


def test_logits_match_transformers(loaded, golden):
  config, params = loaded
  batch = {"encoder_input_tokens": golden["encoder_input_tokens"],
           "decoder_input_tokens": golden["decoder_input_tokens"]}
  assert np.any(batch["encoder_input_tokens"] == 0)  # a padded encoder row
  logits = np.asarray(jax.jit(Transformer(config).apply)({"params": params}, batch))
  np.testing.assert_allclose(logits, golden["logits"], atol=ATOL, rtol=0)


def test_greedy_decoding_matches_transformers_generate(loaded, golden):
  config, params = loaded
  want = golden["greedy_tokens"]
  cfg = generation.DecodeConfig(method="greedy", max_decode_length=want.shape[1])
  enc = golden["encoder_input_tokens"]
  tokens = generation.make_decode_fn(Transformer(config), cfg)(
      params, {"encoder_input_tokens": enc}, jax.random.PRNGKey(0), np.arange(len(enc)))[0]
  np.testing.assert_array_equal(np.asarray(tokens), want)


def test_export_gives_back_the_same_tensors_and_config(loaded, tmp_path):
  config, params = loaded
  hf_t5gemma.save_hf_t5gemma(tmp_path, config, params)
  original, written = load_file(os.path.join(TINY, "model.safetensors")), load_file(
      os.path.join(tmp_path, "model.safetensors"))
  assert sorted(written) == sorted(original)  # tied: no lm_head.out_proj.weight in either
  for name in original:
    np.testing.assert_array_equal(written[name], original[name], err_msg=name)
  again, _ = hf_t5gemma.load_hf_t5gemma(tmp_path)
  assert again == config
  with open(os.path.join(tmp_path, "config.json")) as f:
    exported = json.load(f)
  hf = _hf_config()
  for stack in ("encoder", "decoder"):
    for key, value in exported[stack].items():
      if key in hf[stack]:
        assert hf[stack][key] == value, (stack, key)


def test_scanned_import_and_untied_head(loaded, golden, tmp_path):
  config, params = loaded
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  head = np.random.default_rng(3).normal(0, 0.5, tensors["model.decoder.embed_tokens.weight"].shape)
  tensors[hf_t5gemma.HEAD_NAME] = head.astype(np.float32)
  hf = dict(_hf_config(), tie_word_embeddings=False)
  untied, untied_params = hf_t5gemma.hf_to_lm(hf, tensors)
  assert not untied.tie_embeddings
  np.testing.assert_array_equal(untied_params["logits_dense"]["kernel"], head.T.astype(np.float32))
  hf_back, back = hf_t5gemma.lm_to_hf(untied, untied_params)
  np.testing.assert_array_equal(back[hf_t5gemma.HEAD_NAME], tensors[hf_t5gemma.HEAD_NAME])
  assert hf_back["tie_word_embeddings"] is False
  # Scanning needs a uniform pattern: an all-global copy of the model scans and round-trips.
  hf_global = copy.deepcopy(_hf_config())
  for stack in ("encoder", "decoder"):
    hf_global[stack]["layer_types"] = ["full_attention"] * hf_global[stack]["num_hidden_layers"]
  scanned_cfg, scanned = hf_t5gemma.hf_to_lm(hf_global, load_file(os.path.join(TINY, "model.safetensors")),
                                             scan_layers=True)
  assert scanned_cfg.layer_pattern is None and scanned_cfg.sliding_window is None
  assert scanned["encoder"]["layers"]["self_attention"]["key"].shape == (3, 16, 2, 8)
  _, tensors_back = hf_t5gemma.lm_to_hf(scanned_cfg, scanned)
  for name, value in load_file(os.path.join(TINY, "model.safetensors")).items():
    np.testing.assert_array_equal(tensors_back[name], value, err_msg=name)


def _write(directory, hf_config, tensors=None):
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(hf_config, f)
  save_file(tensors if tensors is not None else load_file(os.path.join(TINY, "model.safetensors")),
            os.path.join(directory, "model.safetensors"))


@pytest.mark.parametrize("edit, field", [
    (lambda c: c["encoder"].update(query_pre_attn_scalar=8), "encoder.query_pre_attn_scalar=8"),
    # a wider encoder (9B-2B) needs a decoder whose cross-attention reads that width
    (lambda c: c["encoder"].update(hidden_size=32),
     "decoder.cross_attention_hidden_size=16 is not the encoder's hidden_size 32"),
    (lambda c: c["decoder"].update(attention_bias=True), "attention_bias"),
    (lambda c: c["encoder"].update(sliding_window=5), "encoder.sliding_window=5"),
    (lambda c: c["encoder"].update(layer_types=["sliding_attention", "sliding_attention",
                                                "full_attention"]), "layer_types"),
    (lambda c: [c[s].update(hidden_activation="gelu") for s in ("encoder", "decoder")],
     "hidden_activation='gelu'"),
    (lambda c: [c[s].update(rms_norm_eps=1e-5) for s in ("encoder", "decoder")], "rms_norm_eps"),
    (lambda c: [c[s].update(rope_parameters={"rope_type": "linear", "factor": 2.0,
                                             "rope_theta": 1e4}) for s in ("encoder", "decoder")],
     "rope_type='linear'"),
    (lambda c: c.update(attention_dropout=0.1), "attention_dropout"),
    (lambda c: c.update(model_type="t5"), "model_type 't5'"),
])
def test_unsupported_fields_are_named(tmp_path, edit, field):
  hf = _hf_config()
  edit(hf)
  _write(tmp_path, hf)
  with pytest.raises(ValueError) as info:
    hf_t5gemma.load_hf_t5gemma(tmp_path)
  assert isinstance(info.value, HFConversionError)
  assert field in str(info.value), str(info.value)


def test_the_encoder_table_of_its_own_and_equal_tables(loaded, tmp_path):
  """The golden's encoder table differs from the decoder's (as in the released checkpoints,
  which train them apart); a directory whose two tables are equal loads as one table."""
  config, params = loaded
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  enc_name, dec_name = hf_t5gemma.EMBED_NAMES
  assert config.separate_encoder_embedding
  np.testing.assert_array_equal(params["encoder_token_embedder"]["embedding"], tensors[enc_name])
  np.testing.assert_array_equal(params["token_embedder"]["embedding"], tensors[dec_name])
  tensors[enc_name] = tensors[dec_name]
  _write(tmp_path / "one", _hf_config(), tensors)
  one, one_params = hf_t5gemma.load_hf_t5gemma(tmp_path / "one")
  assert one == config.replace(separate_encoder_embedding=False)
  assert "encoder_token_embedder" not in one_params
  # The same model as the two-table one whose encoder table is set to the decoder's.
  two_params = copy.deepcopy(params)
  two_params["encoder_token_embedder"]["embedding"] = tensors[dec_name]
  batch = {"encoder_input_tokens": np.array([[5, 9, 3, 1]], np.int32),
           "decoder_input_tokens": np.array([[0, 7, 4, 2]], np.int32)}
  np.testing.assert_allclose(
      np.asarray(Transformer(one).apply({"params": one_params}, batch)),
      np.asarray(Transformer(config).apply({"params": two_params}, batch)), atol=1e-6)
  with pytest.raises(HFConversionError, match="decided by the tensors"):
    hf_t5gemma.load_hf_t5gemma(tmp_path / "one", separate_encoder_embedding=True)


def test_bad_tensors_are_named(tmp_path):
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  tensors["model.encoder.embed_tokens.weight"] = tensors["model.encoder.embed_tokens.weight"][:-1]
  _write(tmp_path / "emb", _hf_config(), tensors)
  with pytest.raises(HFConversionError, match="model.encoder.embed_tokens.weight .63, 16. != .64, 16."):
    hf_t5gemma.load_hf_t5gemma(tmp_path / "emb")
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  del tensors["model.decoder.layers.1.cross_attn.k_proj.weight"]
  tensors["model.decoder.layers.1.cross_attn.k_proj.bias"] = np.zeros(16, np.float32)
  _write(tmp_path / "names", _hf_config(), tensors)
  with pytest.raises(HFConversionError, match="cross_attn.k_proj.bias"):
    hf_t5gemma.load_hf_t5gemma(tmp_path / "names")


def test_export_refuses_non_t5gemma_configs(loaded):
  config, params = loaded
  for bad, field in ((config.replace(norm_position="pre"), "norm_position='pre'"),
                     (config.replace(scale_embeddings=False), "scale_embeddings=False"),
                     (config.replace(tied_logits_scale=True), "tied_logits_scale=True")):
    with pytest.raises(HFConversionError, match=field):
      hf_t5gemma.lm_to_hf(bad, params)


def test_decoder_start_is_the_decoders_bos():
  """transformers' T5Gemma starts its decoder from config.decoder.bos_token_id."""
  assert hf_t5gemma.decoder_start_id(_hf_config()) == 2
  edited = _hf_config()
  edited["decoder"]["bos_token_id"] = 7
  assert hf_t5gemma.decoder_start_id(edited) == 7
  del edited["decoder"]["bos_token_id"]
  assert hf_t5gemma.decoder_start_id(edited) == 2  # the top-level bos_token_id


@pytest.fixture(scope="module")
def decode_golden():
  with open(os.path.join(GOLDEN, "decode_golden.json")) as f:
    return json.load(f)


@pytest.fixture(scope="module")
def restored():
  """lm.restore.load_hf of the tiny T5Gemma directory (with its tokenizer.model)."""
  from lm import restore
  return restore.load_hf(TINY)


def test_load_hf_reads_t5gemma_with_its_framing(decode_golden, restored):
  """load_hf frames a T5Gemma prompt as transformers' GemmaTokenizer does (<bos> + pieces,
  no EOS) and starts its decoder from <bos> 2 (tests/testdata/make_t5gemma_decode_golden.py)."""
  r = restored
  assert r.framing == generation.Framing(decoder_start=2, prompt_bos=2, prompt_eos=False)
  assert (r.tokenizer.bos_id, r.tokenizer.unk_id, r.tokenizer.vocab_size) == (2, 3, 64)
  framed = [r.framing.frame(ids, decoder_only=False)
            for ids in r.tokenizer.encode_batch(decode_golden["texts"])]
  assert framed == decode_golden["input_ids"]


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_t5gemma_decoding_matches_transformers_generate_from_its_own_start(decode_golden,
                                                                           restored, method):
  """transformers' generate with the checkpoint's own settings (decoder start 2); lm's T5
  framing (start 0, prompt + EOS) decodes other tokens, so the golden tells them apart."""
  r = restored
  prompts = [ids[1:] for ids in decode_golden["input_ids"]]  # without the <bos>
  extra = dict(beam_size=2, alpha=1.0, length_penalty="hf") if method == "beam" else {}
  cfg = generation.DecodeConfig(method=method, max_decode_length=decode_golden["max_new_tokens"],
                              **extra)

  def run(framing):
    batch = generation.prompt_batch(prompts, r.model_config, framing=framing)
    return np.asarray(generation.make_decode_fn(r.model, cfg)(
        r.params, batch, jax.random.PRNGKey(0), np.arange(len(prompts)))[0]).tolist()

  assert run(r.framing) == decode_golden[f"{method}_tokens"]
  assert run(generation.T5_FRAMING) != decode_golden[f"{method}_tokens"]


def test_lm_decode_hf_reads_a_t5gemma_directory(decode_golden, restored, tmp_path):
  """python -m lm.decode --hf=T5GEMMA_DIR: text in, transformers' greedy tokens out."""
  from lm import decode
  prompts = tmp_path / "prompts.txt"
  prompts.write_text("\n".join(decode_golden["texts"]) + "\n")
  out = tmp_path / "out.jsonl"
  assert decode.main([f"--hf={TINY}", f"--input={prompts}", f"--output={out}",
                      f"--max_decode_length={decode_golden['max_new_tokens']}"]) == 0
  tokenizer = restored.tokenizer
  got = [json.loads(line)["output"] for line in out.read_text().splitlines()]
  assert got == [tokenizer.decode(t) for t in decode_golden["greedy_tokens"]]


def test_ckpt_init_from_reads_a_t5gemma_directory(loaded, caplog):
  import flax.linen as nn

  from lm import train

  config, params = loaded
  model = Transformer(config)
  batch = {"encoder_input_tokens": np.ones((1, 4), np.int32),
           "decoder_input_tokens": np.ones((1, 4), np.int32)}
  abstract = jax.eval_shape(lambda: nn.unbox(model.init(jax.random.key(0), batch)["params"]))
  with caplog.at_level("WARNING"):
    got = train.init_params_from(TINY, config, abstract, None)
  # lm starts decoder inputs with 0 where T5Gemma starts with <bos> 2: said once
  assert len([r for r in caplog.records if "decoder starts from token 2" in r.getMessage()]) == 1
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(got)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  with pytest.raises(Exception, match="emb_dim=16"):
    wider = config.replace(emb_dim=32)
    train.init_params_from(TINY, wider, jax.eval_shape(lambda: nn.unbox(
        Transformer(wider).init(jax.random.key(0), batch)["params"])), None)


def test_bfloat16_checkpoint_loads_as_float32(tmp_path):
  import ml_dtypes

  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  _write(tmp_path, _hf_config(), {k: v.astype(ml_dtypes.bfloat16) for k, v in tensors.items()})
  config, params = hf_t5gemma.load_hf_t5gemma(tmp_path)
  want = tensors["model.encoder.layers.0.mlp.down_proj.weight"].astype(ml_dtypes.bfloat16)
  got = params["encoder"]["layers_0"]["mlp"]["wo"]
  assert got.dtype == np.float32
  np.testing.assert_array_equal(got, want.astype(np.float32).T)


def test_the_ml_preset_is_the_released_ml_config():
  """google/t5gemma-ml-ml-prefixlm's config.json (its fields as published: 26 layers,
  1152 wide, 4 query and 4 key/value heads of 256, MLP 6912) imports as the "ml" preset,
  field for field; tests/model/test_accounting.py checks its 2,200,345,344 parameters."""
  from lm.model.presets import make_config
  module = dict(hidden_size=1152, intermediate_size=6912, num_attention_heads=4,
                num_key_value_heads=4, head_dim=256, num_hidden_layers=26,
                query_pre_attn_scalar=256, sliding_window=4096, attn_logit_softcapping=50.0,
                final_logit_softcapping=30.0, rms_norm_eps=1e-6, rope_theta=10000.0,
                hidden_activation="gelu_pytorch_tanh", vocab_size=256000, attention_bias=False,
                layer_types=["sliding_attention", "full_attention"] * 13)
  released = {"model_type": "t5gemma", "encoder": module,
              "decoder": dict(module, is_decoder=True, cross_attention_hidden_size=1152),
              "eos_token_id": [1, 107], "pad_token_id": 0, "dropout_rate": 0.0,
              "attention_dropout": 0.0}
  got = hf_t5gemma.config_from_hf(released, tie_embeddings=True,
                                  separate_encoder_embedding=True, dtype="bfloat16")
  assert got == make_config("t5gemma", "ml", "encoder_decoder")


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_decoding_stops_at_every_stop_id_as_transformers_does(decode_golden, restored, method):
  """generate(eos_token_id=[1, 41]) (as the released configs' [1, 107]): lm's DecodeConfig
  eos_ids stop rows at 41 as transformers does; with EOS 1 alone they run on."""
  prompts = [ids[1:] for ids in decode_golden["input_ids"]]
  extra = dict(beam_size=2, alpha=1.0, length_penalty="hf") if method == "beam" else {}
  batch = generation.prompt_batch(prompts, restored.model_config, framing=restored.framing)

  def run(eos_ids):
    cfg = generation.DecodeConfig(method=method, eos_ids=eos_ids,
                                max_decode_length=decode_golden["max_new_tokens"], **extra)
    return np.asarray(generation.make_decode_fn(restored.model, cfg)(
        restored.params, batch, jax.random.PRNGKey(0), np.arange(len(prompts)))[0]).tolist()

  want = decode_golden[f"{method}_tokens_stop"]
  assert run(tuple(decode_golden["stop_ids"])) == want
  assert run((1,)) == decode_golden[f"{method}_tokens"] != want


def test_load_hf_and_lm_decode_read_the_stop_ids(decode_golden, restored, tmp_path):
  """generation_config.json's eos_token_id list reaches Restored.eos_ids, and lm.decode's
  text ends before the first stop id."""
  import shutil

  from lm import decode, restore
  hf = tmp_path / "hf"
  shutil.copytree(TINY, hf)
  generation = json.loads((hf / "generation_config.json").read_text())
  generation["eos_token_id"] = decode_golden["stop_ids"]
  (hf / "generation_config.json").write_text(json.dumps(generation))
  assert restored.eos_ids == (1,)
  assert restore.load_hf(str(hf)).eos_ids == tuple(decode_golden["stop_ids"])
  prompts = tmp_path / "prompts.txt"
  prompts.write_text("\n".join(decode_golden["texts"]) + "\n")
  out = tmp_path / "out.jsonl"
  assert decode.main([f"--hf={hf}", f"--input={prompts}", f"--output={out}",
                      f"--max_decode_length={decode_golden['max_new_tokens']}"]) == 0
  got = [json.loads(line)["output"] for line in out.read_text().splitlines()]
  stop = decode_golden["stop_ids"][1]
  want = [restored.tokenizer.decode(t[:t.index(stop)] if stop in t else t)
          for t in decode_golden["greedy_tokens_stop"]]
  assert got == want and got[2] == "" and got[0] != ""


def test_eos_ids_are_read_as_transformers_reads_them():
  assert hf_t5gemma.eos_ids({"eos_token_id": 1}, {"eos_token_id": [1, 107]}) == (1, 107)
  assert hf_t5gemma.eos_ids({"eos_token_id": [1, 107]}) == (1, 107)
  assert hf_t5gemma.eos_ids({"decoder": {"eos_token_id": 5}}) == (5,)
  assert hf_t5gemma.eos_ids({}, {}) == (1,)
  with pytest.raises(HFConversionError, match=r"eos_token_id \['x'\] is not an id"):
    hf_t5gemma.eos_ids({"eos_token_id": ["x"]})
  with pytest.raises(ValueError, match=r"eos_ids must be one or more ids >= 0"):
    generation.DecodeConfig(eos_ids=())
