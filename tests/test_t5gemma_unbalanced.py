"""An encoder of its own shape (T5Gemma 9B-2B, tiny): import, logits, cached decoding and
export against transformers (tests/testdata/make_t5gemma_unbalanced_golden.py; no torch
here), the config knob's checks and its road through the ConfigDict."""
import os

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

from lm import config as config_lib
from lm import generation
from lm.checkpoint import hf_t5gemma
from lm.model.transformer import Transformer, TransformerConfig

GOLDEN = os.path.join(os.path.dirname(__file__), "testdata", "hf_t5gemma")
TINY = os.path.join(GOLDEN, "tiny_unbalanced")
ATOL = 5e-5  # as the balanced golden (make_t5gemma_golden.py)


@pytest.fixture(scope="module")
def golden():
  return dict(np.load(os.path.join(GOLDEN, "unbalanced_golden.npz")))


@pytest.fixture(scope="module")
def loaded():
  return hf_t5gemma.load_hf_t5gemma(TINY)


def test_the_encoder_shape_is_read(loaded):
  config, params = loaded
  enc = config.encoder_config()
  assert (config.emb_dim, config.num_heads, config.num_kv_heads, config.head_dim,
          config.mlp_dim) == (16, 4, 2, 8, 24)
  assert (enc.emb_dim, enc.num_heads, enc.num_kv_heads, enc.head_dim, enc.mlp_dim) == (
      24, 6, 3, 4, 40)
  assert (config.num_encoder_layers, config.num_decoder_layers) == (3, 2)
  cross = params["decoder"]["layers_0"]["encoder_decoder_attention"]
  assert cross["key"].shape == (24, 2, 8) and cross["query"].shape == (16, 4, 8)
  assert params["encoder_token_embedder"]["embedding"].shape == (64, 24)


def test_logits_and_cached_greedy_decoding_match_transformers(loaded, golden):
  config, params = loaded
  batch = {"encoder_input_tokens": golden["encoder_input_tokens"],
           "decoder_input_tokens": golden["decoder_input_tokens"]}
  logits = np.asarray(Transformer(config).apply({"params": params}, batch))
  np.testing.assert_allclose(logits, golden["logits"], atol=ATOL, rtol=0)
  cfg = generation.DecodeConfig(method="greedy", max_decode_length=golden["greedy_tokens"].shape[1])
  tokens = generation.make_decode_fn(Transformer(config), cfg)(
      params, {"encoder_input_tokens": golden["encoder_input_tokens"]}, jax.random.PRNGKey(0),
      np.arange(2))[0]
  np.testing.assert_array_equal(np.asarray(tokens), golden["greedy_tokens"])


def test_export_gives_back_the_same_tensors(loaded, tmp_path):
  config, params = loaded
  hf_t5gemma.save_hf_t5gemma(tmp_path, config, params)
  want = load_file(os.path.join(TINY, "model.safetensors"))
  got = load_file(os.path.join(tmp_path, "model.safetensors"))
  assert set(got) == set(want)
  for name, value in want.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)
  hf = hf_t5gemma.config_to_hf(config)
  assert (hf["encoder"]["hidden_size"], hf["decoder"]["hidden_size"],
          hf["decoder"]["cross_attention_hidden_size"]) == (24, 16, 24)


def test_an_encoder_of_its_own_shape_is_checked():
  base = dict(vocab_size=10, emb_dim=4, num_heads=2, head_dim=2, mlp_dim=6,
              num_encoder_layers=1, num_decoder_layers=1)
  with pytest.raises(ValueError, match="encoder_emb_dim=6 != emb_dim=4 needs "
                                       "separate_encoder_embedding=True"):
    TransformerConfig(**base, encoder_emb_dim=6)
  with pytest.raises(ValueError, match="encoder_mlp_dim need mask_type='encoder_decoder' with "
                                       "its own encoder"):
    TransformerConfig(**dict(base, num_encoder_layers=0), mask_type="causal", encoder_mlp_dim=8)
  with pytest.raises(ValueError, match="num_kv_heads"):  # the encoder's shape is validated
    TransformerConfig(**base, encoder_num_heads=3, num_kv_heads=2)
  same = TransformerConfig(**base)
  assert same.encoder_config() is same
  own = TransformerConfig(**base, encoder_mlp_dim=8)
  assert own.encoder_config() == same.replace(mlp_dim=8)


def test_the_config_carries_an_encoder_of_its_own_depth_and_shape():
  """configs/t5.py's model section of t5gemma/9b_2b holds encoder_num_layers and the
  encoder's widths; the TransformerConfig built from it is the preset's, and both can be
  overridden (a tiny 9B-2B-shaped model)."""
  from lm.model import presets
  section = config_lib.model_section("t5gemma", "9b_2b", "encoder_decoder")
  assert section.encoder_num_layers == 42 and section.encoder_emb_dim == 3584
  config = __import__("configs.t5", fromlist=["x"]).get_config("runlocal")
  with config.unlocked():
    config.model = section
  config = config_lib.derive(config)
  assert config_lib.model_config(config) == presets.make_config(
      "t5gemma", "9b_2b", "encoder_decoder", vocab_size=config.model.vocab_size)
  config.model.encoder_num_layers, config.model.encoder_emb_dim = 3, 48
  got = config_lib.model_config(config)
  assert got.num_encoder_layers == 3 and got.encoder_config().emb_dim == 48
  balanced = config_lib.model_section("t5gemma", "2b", "encoder_decoder")
  assert balanced.encoder_num_layers is None and balanced.encoder_emb_dim is None
