"""Tests of lm.checkpoint.hf_t5gemma2: T5Gemma 2's text model against a transformers golden
(tests/testdata/make_t5gemma2_golden.py wrote it; no torch needed here)."""
import json
import os
import shutil

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from lm import generation
from lm.data import converters
from lm.checkpoint import hf, hf_t5gemma2
from lm.checkpoint.hf_t5 import HFConversionError
from lm.model.transformer import Transformer

GOLDEN = os.path.join(os.path.dirname(__file__), "testdata", "hf_t5gemma2")
TINY = os.path.join(GOLDEN, "tiny")
# The Gemma-layout 64-piece tokenizer of the T5Gemma golden (ids 0-3: pad, eos, bos, unk).
GEMMA_TOKENIZER = os.path.join(os.path.dirname(__file__), "testdata", "hf_t5gemma", "tiny",
                               "tokenizer.model")
RTOL = 2e-5  # of the largest |logit| (the script measured 9.3e-6 on logits up to 1.8)


@pytest.fixture(scope="module")
def golden():
  return dict(np.load(os.path.join(GOLDEN, "golden.npz")))


@pytest.fixture(scope="module")
def loaded():
  return hf_t5gemma2.load_hf_t5gemma2(TINY)


def _hf_config():
  with open(os.path.join(TINY, "config.json")) as f:
    return json.load(f)


def _write(directory, hf_config, tensors=None):
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(hf_config, f)
  save_file(tensors if tensors is not None else load_file(os.path.join(TINY, "model.safetensors")),
            os.path.join(directory, "model.safetensors"))


def test_config_maps_every_t5gemma2_knob(loaded):
  config, params = loaded
  assert (config.num_heads, config.num_kv_heads, config.head_dim, config.emb_dim) == (4, 2, 8, 16)
  assert (config.num_encoder_layers, config.num_decoder_layers) == (3, 2)
  assert (config.layer_pattern, config.sliding_window) == ("LG", 4)
  assert (config.rope_max_wavelength, config.rope_local_max_wavelength) == (100.0, 10.0)
  assert config.merged_attention and config.qk_norm and config.eoi_id == 61
  assert config.bidirectional_window == "centred" and config.query_pre_attn_scalar == 6.0
  assert config.tie_embeddings and not config.tied_logits_scale and config.scale_embeddings
  assert not config.separate_encoder_embedding
  assert "encoder_decoder_attention" not in params["decoder"]["layers_0"]
  assert params["decoder"]["layers_0"]["self_attention"]["key_norm"]["scale"].shape == (8,)
  assert hf.family(_hf_config()) == "t5gemma2" and hf.is_gemma(_hf_config())


def test_omitted_fields_take_transformers_defaults():
  """No layer_types: HF's five sliding layers, then a full one; no rope_parameters: bases
  10k (sliding) and 1M (full); no eoi_token_index: 256000."""
  config = _hf_config()
  for text in (config["encoder"]["text_config"], config["decoder"]):
    for name in ("layer_types", "rope_parameters", "vocab_size"):
      del text[name]
    text["num_hidden_layers"] = 12
  del config["eoi_token_index"], config["encoder"]["eoi_token_index"]
  got = hf_t5gemma2.config_from_hf(config)
  assert (got.layer_pattern, got.vocab_size, got.eoi_id) == ("LLLLLG", 262_208, 256_000)
  assert (got.rope_local_max_wavelength, got.rope_max_wavelength) == (10_000.0, 1_000_000.0)


def test_logits_match_transformers(loaded, golden):
  config, params = loaded
  got = np.asarray(jax.jit(Transformer(config).apply)({"params": params}, {
      "encoder_input_tokens": golden["encoder_input_tokens"],
      "decoder_input_tokens": golden["decoder_input_tokens"]}))
  scale = np.abs(golden["logits"]).max()
  np.testing.assert_allclose(got, golden["logits"], rtol=0, atol=RTOL * scale)


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_decoding_matches_transformers_generate(loaded, golden, method):
  """The KV cache of merged attention (the step's softmax over the self cache and the
  encoder cache, which 2 beams share) reproduces transformers' generate."""
  config, params = loaded
  enc = golden["encoder_input_tokens"]
  extra = dict(beam_size=2, alpha=1.0, length_penalty="hf") if method == "beam" else {}
  cfg = generation.DecodeConfig(method=method, max_decode_length=8, **extra)
  batch = {"encoder_input_tokens": enc, "decoder_input_tokens": np.full((2, 1), 2, np.int32)}
  got = generation.make_decode_fn(Transformer(config), cfg)(
      params, batch, jax.random.PRNGKey(0), np.arange(2))[0]
  np.testing.assert_array_equal(np.asarray(got), golden[f"{method}_tokens"])


def test_vision_tensors_are_left_and_text_model_names_are_read(loaded, tmp_path):
  """The checkpoint's SigLIP tower and projector are not read; the in-memory names
  (model.encoder.text_model.*) load as the saved ones (model.encoder.*) do."""
  config, params = loaded
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  assert any(k.startswith("model.encoder.vision_tower.") for k in tensors)
  renamed = {k.replace("model.encoder.", "model.encoder.text_model.", 1)
             if not k.startswith(("model.encoder.vision", "model.encoder.multi")) else k: v
             for k, v in tensors.items()}
  _write(tmp_path, _hf_config(), renamed)
  again, again_params = hf_t5gemma2.load_hf_t5gemma2(tmp_path)
  assert again == config
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(again_params)):
    np.testing.assert_array_equal(a, b)


def _text(c):
  return c["encoder"]["text_config"]


@pytest.mark.parametrize("edit, field", [
    (lambda c: [s["rope_parameters"]["full_attention"].update(rope_type="linear", factor=8.0)
                for s in (_text(c), c["decoder"])], "rope_type='linear'"),
    (lambda c: c["decoder"]["rope_parameters"]["sliding_attention"].update(rope_theta=5.0),
     "decoder.rope_parameters"),
    (lambda c: [s.update(attention_bias=True) for s in (_text(c), c["decoder"])],
     "attention_bias"),
    (lambda c: c["decoder"].update(sliding_window=8), "sliding_window"),
    (lambda c: c.update(eoi_token_index=64), "eoi_token_index=64"),
    (lambda c: c["decoder"].update(hidden_size=32), "hidden_size"),
    (lambda c: c.update(model_type="t5gemma"), "model_type"),
])
def test_unsupported_fields_are_named(tmp_path, edit, field):
  config = _hf_config()
  edit(config)
  _write(tmp_path, config)
  with pytest.raises(HFConversionError) as info:
    hf_t5gemma2.load_hf_t5gemma2(tmp_path)
  assert field in str(info.value), str(info.value)


def test_untied_or_missing_tables_are_named(tmp_path):
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  table = tensors["model.encoder.embed_tokens.weight"]
  _write(tmp_path / "untied", _hf_config(), dict(tensors, **{
      "model.decoder.embed_tokens.weight": table + 1.0}))
  with pytest.raises(HFConversionError, match="model.decoder.embed_tokens.weight differs"):
    hf_t5gemma2.load_hf_t5gemma2(tmp_path / "untied")
  _write(tmp_path / "tied", _hf_config(), dict(tensors, **{
      "model.decoder.embed_tokens.weight": table, "lm_head.out_proj.weight": table}))
  hf_t5gemma2.load_hf_t5gemma2(tmp_path / "tied")  # explicit but equal copies are fine
  del tensors["model.encoder.embed_tokens.eoi_embedding"]
  _write(tmp_path / "no_eoi", _hf_config(), tensors)
  with pytest.raises(HFConversionError, match="missing tensor.*eoi_embedding"):
    hf_t5gemma2.load_hf_t5gemma2(tmp_path / "no_eoi")


@pytest.fixture(scope="module")
def with_tokenizer(tmp_path_factory):
  """The tiny checkpoint with the Gemma-layout tokenizer beside it, as lm.restore needs."""
  directory = tmp_path_factory.mktemp("t5gemma2")
  for name in os.listdir(TINY):
    shutil.copy(os.path.join(TINY, name), directory)
  shutil.copy(GEMMA_TOKENIZER, directory)
  return str(directory)


@pytest.mark.slow
def test_load_hf_and_lm_decode_read_a_t5gemma2_directory(with_tokenizer, tmp_path):
  """lm.restore.load_hf frames prompts as Gemma does and starts the decoder from <bos> 2;
  python -m lm.decode --hf=DIR writes what lm's decoding of those framed prompts gives."""
  from lm import decode, restore
  r = restore.load_hf(with_tokenizer)
  assert r.framing == generation.Framing(decoder_start=2, prompt_bos=2, prompt_eos=False)
  assert r.model_config.merged_attention and r.eos_ids == (1,)
  texts = ["a cat sat", "the dog"]
  prompts = tmp_path / "prompts.txt"
  prompts.write_text("\n".join(texts) + "\n")
  out = tmp_path / "out.jsonl"
  assert decode.main([f"--hf={with_tokenizer}", f"--input={prompts}", f"--output={out}",
                      "--max_decode_length=6"]) == 0
  batch = generation.prompt_batch(r.tokenizer.encode_batch(texts), r.model_config,
                                framing=r.framing)
  assert batch["decoder_input_tokens"].tolist() == [[2], [2]]
  tokens = generation.make_decode_fn(r.model, generation.DecodeConfig(max_decode_length=6))(
      r.params, batch, jax.random.PRNGKey(0), np.arange(2))[0]
  want = [r.tokenizer.decode([int(t) for t in row]) for row in np.asarray(tokens)]
  assert [json.loads(line)["output"] for line in out.read_text().splitlines()] == want


def test_ckpt_init_from_reads_a_t5gemma2_directory(loaded):
  import flax.linen as nn

  from lm import train

  config, params = loaded
  batch = {"encoder_input_tokens": np.ones((1, 4), np.int32),
           "decoder_input_tokens": np.ones((1, 4), np.int32)}
  abstract = jax.eval_shape(lambda: nn.unbox(
      Transformer(config).init(jax.random.key(0), batch)["params"]))
  got = train.init_params_from(TINY, config, abstract, None,
                               framing=converters.framing_named("t5gemma"))
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(got)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_t5gemma_export_refuses_t5gemma2_configs(loaded):
  from lm.checkpoint import hf_t5gemma
  config, params = loaded
  with pytest.raises(HFConversionError, match="merged_attention=True"):
    hf_t5gemma.lm_to_hf(config, params)


# Hand-written cases of the config and tensor checks (added after the 2026-11-28 mutation run).

def _tensors():
  return load_file(os.path.join(TINY, "model.safetensors"))


@pytest.mark.parametrize("encoder", [{"text_config": {}}, {}])
def test_an_empty_text_config_takes_every_transformers_default(encoder):
  got = hf_t5gemma2.config_from_hf({"model_type": "t5gemma2", "encoder": encoder, "decoder": {}})
  assert (got.vocab_size, got.emb_dim, got.mlp_dim) == (262_208, 2304, 9216)
  assert (got.num_heads, got.num_kv_heads, got.head_dim) == (8, 4, 256)
  assert (got.num_encoder_layers, got.num_decoder_layers) == (26, 26)
  assert (got.query_pre_attn_scalar, got.sliding_window, got.layer_pattern) == (256.0, 4096, "LLLLLG")
  assert got.attn_logit_softcapping is None and got.final_logit_softcapping is None
  assert (got.eoi_id, got.dropout_rate) == (256_000, 0.0)
  assert (got.rope_max_wavelength, got.rope_local_max_wavelength) == (1_000_000.0, 10_000.0)
  assert (got.encoder_emb_dim, got.encoder_num_heads, got.encoder_num_kv_heads,
          got.encoder_head_dim, got.encoder_mlp_dim) == (None,) * 5


@pytest.mark.parametrize("config, message", [
    ({"decoder": {}}, "no 'encoder' text config"),
    ({"encoder": {"text_config": None}, "decoder": {}}, "no 'encoder' text config"),
    ({"encoder": {"text_config": {}}}, "no 'decoder' text config"),
    ({"encoder": {"text_config": {}}, "decoder": 3}, "no 'decoder' text config"),
])
def test_a_missing_text_config_is_named(config, message):
  with pytest.raises(HFConversionError, match=message):
    hf_t5gemma2.config_from_hf(dict(config, model_type="t5gemma2"))


@pytest.mark.parametrize("layers", [2, 4])
def test_layer_types_of_the_wrong_length_are_named(layers):
  config = _hf_config()
  _text(config)["num_hidden_layers"] = layers
  with pytest.raises(HFConversionError, match="encoder.layer_types has 3 entries for "
                     f"num_hidden_layers={layers}"):
    hf_t5gemma2.config_from_hf(config)


@pytest.mark.parametrize("model_type", ["t5gemma", "t5gemma2_text"])
def test_other_model_types_are_refused(model_type):
  """One sorts before "t5gemma2", one after (the encoder's text config's own type)."""
  with pytest.raises(HFConversionError, match=f"model_type '{model_type}' is not T5Gemma 2"):
    hf_t5gemma2.config_from_hf(dict(_hf_config(), model_type=model_type))


def test_a_wider_encoder_is_refused():
  """The encoder 32 wide, the decoder 16 (the file-based test has the decoder wider)."""
  config = _hf_config()
  _text(config)["hidden_size"] = 32
  with pytest.raises(HFConversionError, match="encoder hidden_size 32 differs from the "
                     "decoder's 16"):
    hf_t5gemma2.config_from_hf(config)


def test_a_rope_type_sorting_before_default_is_refused():
  """transformers' scaled types (linear, dynamic, yarn, ...) sort after "default"."""
  config = _hf_config()
  for text in (_text(config), config["decoder"]):
    text["rope_parameters"]["sliding_attention"]["rope_type"] = "constant"
  with pytest.raises(HFConversionError, match="sliding_attention.rope_type='constant'"):
    hf_t5gemma2.config_from_hf(config)


def test_300_layers_read_from_json():
  """A count past CPython's cached small ints: len() and the parsed count are two objects."""
  config = _hf_config()
  for text in (_text(config), config["decoder"]):
    text.update(num_hidden_layers=300, layer_types=["sliding_attention", "full_attention"] * 150)
  got = hf_t5gemma2.config_from_hf(json.loads(json.dumps(config)))
  assert (got.num_encoder_layers, got.num_decoder_layers, got.layer_pattern) == (300, 300, "LG")


def test_equal_widths_read_from_json_are_one_width():
  """Both stacks 1000 wide, parsed from text (two int objects of one value)."""
  text = json.dumps(_hf_config()).replace('"hidden_size": 16', '"hidden_size": 1000')
  got = hf_t5gemma2.config_from_hf(json.loads(text))
  assert (got.emb_dim, got.encoder_emb_dim) == (1000, None)


def test_rope_parameters_partly_given_or_not_an_object():
  config = _hf_config()
  for text in (_text(config), config["decoder"]):
    text["rope_parameters"] = {"full_attention": {"rope_theta": 50.0}, "sliding_attention": None}
  got = hf_t5gemma2.config_from_hf(config)
  assert (got.rope_max_wavelength, got.rope_local_max_wavelength) == (50.0, 10_000.0)
  config["decoder"]["rope_parameters"] = "x"
  with pytest.raises(HFConversionError, match="decoder.rope_parameters must be an object"):
    hf_t5gemma2.config_from_hf(config)


def test_eoi_id_reads_the_top_level_then_the_encoder_and_stays_in_the_vocabulary():
  config = _hf_config()
  config["eoi_token_index"], config["encoder"]["eoi_token_index"] = 60, 59
  assert hf_t5gemma2.config_from_hf(config).eoi_id == 60
  del config["eoi_token_index"]
  assert hf_t5gemma2.eoi_id(config) == 59 and hf_t5gemma2.config_from_hf(config).eoi_id == 59
  for eoi in (1, 63):  # the smallest and largest ids accepted (vocab_size 64)
    config["eoi_token_index"] = eoi
    assert hf_t5gemma2.config_from_hf(config).eoi_id == eoi
  for eoi in (0, -1, 65):
    config["eoi_token_index"] = eoi
    with pytest.raises(HFConversionError, match=f"eoi_token_index={eoi} is outside"):
      hf_t5gemma2.config_from_hf(config)


def test_softcaps_are_read_and_must_agree():
  config = _hf_config()
  for text in (_text(config), config["decoder"]):
    text.update(attn_logit_softcapping=50, final_logit_softcapping=30)
  got = hf_t5gemma2.config_from_hf(config)
  assert (got.attn_logit_softcapping, got.final_logit_softcapping) == (50.0, 30.0)
  config["decoder"]["final_logit_softcapping"] = 20
  with pytest.raises(HFConversionError, match="final_logit_softcapping=30 differs"):
    hf_t5gemma2.config_from_hf(config)


def test_all_full_layers_have_no_window_and_no_local_base():
  config = _hf_config()
  for text in (_text(config), config["decoder"]):
    text["layer_types"] = ["full_attention"] * text["num_hidden_layers"]
  got = hf_t5gemma2.config_from_hf(config)
  assert (got.layer_pattern, got.sliding_window, got.rope_local_max_wavelength) == (None, None, None)
  assert got.rope_max_wavelength == 100.0


def test_dropout_and_overrides_reach_the_config():
  config = dict(_hf_config(), dropout_rate=0.1, attention_dropout=0.1)
  got = hf_t5gemma2.config_from_hf(config, dtype="bfloat16")
  assert (got.dropout_rate, got.dtype) == (0.1, "bfloat16")


@pytest.mark.parametrize("width", [32, 16])
def test_an_encoder_of_its_own_mlp_width_is_read(width):
  """The encoder's intermediate_size wider or narrower than the decoder's 24:
  encoder_mlp_dim, and each stack's MLP tensors checked against its own width."""
  config = _hf_config()
  _text(config)["intermediate_size"] = width
  tensors = _tensors()
  rng = np.random.default_rng(0)
  for i in range(3):
    p = f"model.encoder.layers.{i}.mlp."
    for name, shape in (("gate_proj", (width, 16)), ("up_proj", (width, 16)),
                        ("down_proj", (16, width))):
      tensors[p + name + ".weight"] = rng.standard_normal(shape).astype(np.float32)
  got, params = hf_t5gemma2.hf_to_lm(config, tensors)
  assert (got.mlp_dim, got.encoder_mlp_dim, got.encoder_emb_dim, got.encoder_num_heads) == (
      24, width, None, None)
  assert {np.shape(x) for x in jax.tree.leaves(params["encoder"]["layers_0"]["mlp"])} == {
      (16, width), (width, 16)}
  assert {np.shape(x) for x in jax.tree.leaves(params["decoder"]["layers_0"]["mlp"])} == {
      (16, 24), (24, 16)}


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.update({"model.decoder.embed_tokens.eoi_embedding":
                         t["model.encoder.embed_tokens.eoi_embedding"] * 2}),
     "model.decoder.embed_tokens.eoi_embedding differs"),
    (lambda t: t.update({"lm_head.out_proj.weight": t["model.encoder.embed_tokens.weight"][:-1]}),
     "lm_head.out_proj.weight differs"),
    (lambda t: t.pop("model.encoder.embed_tokens.weight"),
     "missing tensor.*model.encoder.embed_tokens.weight"),
    (lambda t: t.pop("model.decoder.layers.1.self_attn.k_norm.weight"),
     "missing tensor.*model.decoder.layers.1.self_attn.k_norm.weight"),
    (lambda t: t.update({"model.encoder.layers.3.mlp.up_proj.weight": np.zeros((24, 16))}),
     "unknown tensor.*model.encoder.layers.3.mlp.up_proj.weight"),
    (lambda t: t.update({"model.encoder.layers.2.self_attn.q_norm.weight": np.zeros(7)}),
     r"shape mismatch.*q_norm.weight \(7,\) != \(8,\)"),
    (lambda t: t.update({"model.decoder.layers.0.self_attn.k_norm.weight": np.zeros(9)}),
     r"shape mismatch.*k_norm.weight \(9,\) != \(8,\)"),
    (lambda t: t.update({"model.encoder.embed_tokens.eoi_embedding": np.zeros(15)}),
     r"shape mismatch.*eoi_embedding \(15,\) != \(16,\)"),
    (lambda t: t.update({"model.encoder.embed_tokens.weight": np.zeros((63, 16))}),
     r"shape mismatch.*embed_tokens.weight \(63, 16\) != \(64, 16\)"),
])
def test_hf_to_lm_names_untied_missing_unknown_and_misshapen_tensors(edit, message):
  tensors = _tensors()
  edit(tensors)
  with pytest.raises(HFConversionError, match=message):
    hf_t5gemma2.hf_to_lm(_hf_config(), tensors)


def test_scan_layers_stacks_the_loaded_params():
  """scan_layers needs one layer kind: all layers full here."""
  from lm.model.transformer import unscanned_to_scan
  config = _hf_config()
  for text in (_text(config), config["decoder"]):
    text["layer_types"] = ["full_attention"] * text["num_hidden_layers"]
  _, params = hf_t5gemma2.hf_to_lm(config, _tensors())
  got_config, got = hf_t5gemma2.hf_to_lm(config, _tensors(), scan_layers=True)
  assert got_config.scan_layers and "layers_0" in params["encoder"]
  want = unscanned_to_scan(params)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_array_equal(a, np.asarray(b))
