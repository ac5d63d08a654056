"""Param counts of the presets (docs/t5_reference.md §3.2) and the FLOPs formula."""
import pytest

import jax
import jax.numpy as jnp

from lm.model import accounting
from lm.model.presets import all_names, from_name, make_config
from lm.model.presets import sizes as presets_sizes
from lm.model.transformer import Transformer, TransformerConfig


@pytest.mark.parametrize("name,want", [
    ("t5_1_1/small", 77.0e6), ("t5_1_1/base", 247.6e6), ("t5_1_1/large", 783.2e6),
    ("t5_1_1/xl", 2.85e9), ("t5_1_1/xxl", 11.1e9), ("t5_1_0/base", 222.9e6),
])
def test_t5_param_counts(name, want):
  got = accounting.count_params(from_name(name + "/encoder_decoder"))
  tol = 0.001 if want < 1e9 else 0.005  # xl/xxl are quoted with 3 significant digits
  assert abs(got - want) / want < tol, (name, got)


def test_t5_1_1_small_exact_hand_count():
  d, f, n, h, v, layers = 512, 1024, 6, 64, 32128, 8
  attn, mlp = 4 * d * n * h, 3 * d * f
  want = (v * d * 2 + layers * (attn + mlp + 2 * d) + layers * (2 * attn + mlp + 3 * d)
          + 2 * d + 2 * n * 32)
  assert accounting.count_params(make_config("t5_1_1", "small", "encoder_decoder")) == want


def test_shared_has_half_the_layer_params():
  full = accounting.param_breakdown(make_config("t5_1_0", "base", "encoder_decoder"))
  shared = accounting.param_breakdown(make_config("t5_1_0", "base", "shared"))
  assert "encoder/layers" not in shared
  assert shared["decoder/layers"] == full["decoder/layers"]
  ratio = shared["decoder/layers"] / (full["encoder/layers"] + full["decoder/layers"])
  assert 0.5 <= ratio < 0.6  # the decoder's cross-attention is the only non-shared part
  # Table 2: "Enc-dec, shared" and decoder-only have ~P params, enc-dec 2P.
  lm = accounting.count_params(make_config("t5_1_0", "base", "causal"))
  six = make_config("t5_1_0", "base", "encoder_decoder", num_layers=6)
  assert abs(accounting.count_params(six) - lm) / lm < 0.25


@pytest.mark.parametrize("size,architecture,want", [
    # The released T5Gemma checkpoints' safetensors totals (encoder table, decoder table tied
    # to the head); Gemma 2 2B / 9B as decoder-only.
    ("s", "encoder_decoder", 312_517_632), ("b", "encoder_decoder", 591_490_560),
    ("ml", "encoder_decoder", 2_200_345_344), ("xl", "encoder_decoder", 3_766_980_608),
    ("9b", "encoder_decoder", 20_333_401_088), ("2b", "causal", 2_614_341_888), ("9b", "causal", 9_241_705_984),
])
def test_t5gemma_param_counts_are_the_released_checkpoints(size, architecture, want):
  assert accounting.count_params(make_config("t5gemma", size, architecture)) == want


def test_t5gemma_presets_separate_the_encoder_table_only_with_an_encoder():
  encdec = make_config("t5gemma", "2b", "encoder_decoder")
  assert encdec.separate_encoder_embedding and encdec.layer_pattern == "LG"
  assert (encdec.num_kv_heads, encdec.query_pre_attn_scalar) == (4, 256.0)
  counts = accounting.param_breakdown(encdec, depth=1)
  assert counts["encoder_token_embedder"] == counts["token_embedder"] == 256000 * 2304
  assert "logits_dense" not in counts
  assert accounting.count_non_embedding_params(encdec) == (
      counts["total"] - 2 * 256000 * 2304)
  for architecture in ("shared", "prefix_lm", "causal"):
    assert not make_config("t5gemma", "2b", architecture).separate_encoder_embedding


def test_gpt3_param_counts():
  # Paper sizes; our models have no dense biases, so allow a few percent.
  for size, want in [("125m", 125e6), ("350m", 350e6), ("1_3b", 1.3e9), ("6_7b", 6.7e9),
                     ("175b", 175e9)]:
    got = accounting.count_params(make_config("gpt3", size, "causal"))
    assert abs(got - want) / want < 0.06, (size, got)


def test_every_preset_builds():
  for name in all_names():  # every family x size x architecture
    assert isinstance(from_name(name), TransformerConfig)
  with pytest.raises(ValueError, match="unknown size 'medium' for model family 't5_1_1'"):
    make_config("t5_1_1", "medium", "encoder_decoder")
  with pytest.raises(ValueError, match="unknown model family 't5'; expected one of"):
    make_config("t5", "base", "encoder_decoder")
  with pytest.raises(ValueError, match="unknown architecture 'rnn'; expected one of"):
    make_config("cpu", "tiny", "rnn")
  with pytest.raises(ValueError, match=r"unknown override\(s\) \['emb_size'\]"):
    make_config("cpu", "tiny", "encoder_decoder", emb_size=3)
  with pytest.raises(ValueError, match=r"unknown override\(s\) \['mask_type'\].*the "
                     "architecture sets"):
    make_config("cpu", "tiny", "encoder_decoder", mask_type="causal")
  with pytest.raises(ValueError, match="must look like family/size/architecture"):
    from_name("t5_1_1_small")
  assert make_config("cpu", "tiny", "encoder_decoder", dropout_rate=0.1).dropout_rate == 0.1


def test_architecture_is_an_argument_of_every_size():
  """Decoder-only = one stack of the size's layers; shared = two stacks of one param set."""
  for family in ("t5_1_1", "gpt3", "cpu"):
    for size in presets_sizes(family):
      encdec = make_config(family, size, "encoder_decoder")
      for arch, mask, enc in (("shared", "encoder_decoder", encdec.num_decoder_layers),
                              ("prefix_lm", "prefix_lm", 0), ("causal", "causal", 0)):
        other = make_config(family, size, arch)
        assert (other.mask_type, other.num_encoder_layers) == (mask, enc)
        assert other.num_decoder_layers == encdec.num_decoder_layers
        assert (other.emb_dim, other.mlp_dim, other.num_heads) == (
            encdec.emb_dim, encdec.mlp_dim, encdec.num_heads)


def test_flops_hand_derived():
  cfg = TransformerConfig(vocab_size=100, emb_dim=8, num_heads=2, head_dim=4, mlp_dim=16,
                          num_encoder_layers=2, num_decoder_layers=3)
  li, lt = 10, 6
  # encoder layer: 2*10*(4*8*8 + 3*8*16) + 4*10*10*8 = 2*10*640 + 3200 = 16000
  # decoder layer: 2*6*640 + 4*6*6*8 + 2*6*2*8*8 + 2*10*2*8*8 + 4*6*10*8 = 7680+1152+1536+2560+1920 = 14848
  # logits: 2*6*8*100 = 9600
  f = accounting.forward_flops(cfg, li, lt)
  assert f == {"encoder": 32000, "decoder": 44544, "logits": 9600, "total": 86144}
  assert accounting.training_flops(cfg, li, lt, batch_size=4) == 3 * 86144 * 4
  assert accounting.flops_per_token(cfg, li, lt) == 3 * 86144 / 16
  dec = cfg.replace(mask_type="causal", num_encoder_layers=0, mlp_activation="relu")
  # L = 16: per layer 2*16*(256 + 2*128) + 4*256*8 = 16384 + 8192; logits 2*16*8*100
  assert accounting.forward_flops(dec, li, lt)["total"] == 3 * (16384 + 8192) + 25600


def test_flops_match_xla_cost_analysis():
  """Matmuls dominate a wide model, so XLA's count should be close to the formula."""
  cfg = TransformerConfig(vocab_size=512, emb_dim=256, num_heads=4, head_dim=64, mlp_dim=1024,
                          num_encoder_layers=1, num_decoder_layers=1, dtype="float32")
  li, lt, b = 32, 16, 2
  batch = {"encoder_input_tokens": jnp.ones((b, li), jnp.int32),
           "decoder_input_tokens": jnp.ones((b, lt), jnp.int32)}
  model = Transformer(cfg)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), batch)["params"]
  compiled = jax.jit(lambda p: model.apply({"params": p}, batch)).lower(params).compile()
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  want = accounting.forward_flops(cfg, li, lt)["total"] * b
  assert abs(cost["flops"] - want) / want < 0.1, (cost["flops"], want)


# activation_bytes, worked by hand from the module docstring's per-token terms. The model:
# D = 8, N = 2, H = 3 (NH = 6), F = 10, V = 50, 2 encoder + 3 decoder layers, Li = 5, Lt = 4.
_ACT = TransformerConfig(vocab_size=50, emb_dim=8, num_heads=2, head_dim=3, mlp_dim=10,
                         num_encoder_layers=2, num_decoder_layers=3, dtype="float32")


def test_activation_bytes_hand_derived_everything_saved():
  # a = 4, remat "none". Per token, elements (dtype / float32):
  #   encoder layer: self-attn 2D + 4NH = 40, MLP (gated) 2D + 3F = 46 -> 86; probs N*S = 2*5
  #     one layer = 5 tokens * (4*86 + 4*10) = 1920; 2 layers = 3840
  #   decoder layer: 86 + cross 2D + 2NH = 28 -> 114; probs N*Lt + N*Li = 8 + 10 = 18
  #     one layer = 4 * (4*114 + 4*18) = 2112, + encoded k, v 4*2*NH*Li = 240 -> 2352; x3 = 7056
  #   the encoded sequence: Li*a*D = 160 -> layers 11056
  # masks 4*(Li^2 + Lt^2 + Lt*Li) = 244; attention backward 2*4*N*max(Li, Lt)^2 = 400;
  # logits 3*4*Lt*V = 2400; total 14100.
  got = accounting.activation_bytes(_ACT, 5, 4)
  assert got == {"layers": 11056.0, "masks": 244.0, "attention_backward": 400.0,
                 "logits": 2400.0, "total": 14100.0}


def test_activation_bytes_hand_derived_dots_saveable_bf16_over_two_tensor_shards():
  # a = 2, t = 2 (NH-, F-, V- and float32 parts halve; D parts do not).
  #   encoder: D parts 3D = 24; split 3NH + 2F + NH (scores' batch-dim matmuls) = 44;
  #     float32 probs N*S = 10 -> 5 * (2*(24 + 22) + 4*10/2) = 560; x2 = 1120
  #   decoder: D 3D + D = 32; split 3NH + 2F + NH (cross q) + 2NH = 56; float32 8 + 10 = 18
  #     -> 4 * (2*(32 + 28) + 4*18/2) = 624, + encoded k, v 2*2*NH*Li/2 = 60; x3 = 2052
  #   encoded sequence 5*2*8 = 80 -> layers 3252; masks 244 (not split);
  #   attention backward 400/2 = 200; logits 2400/2 = 1200; total 4896.
  cfg = _ACT.replace(dtype="bfloat16", remat_policy="dots_saveable")
  got = accounting.activation_bytes(cfg, 5, 4, tensor_shards=2)
  assert got == {"layers": 3252.0, "masks": 244.0, "attention_backward": 200.0,
                 "logits": 1200.0, "total": 4896.0}
  # The argument overrides the config's policy: "none" at a = 2, t = 2.
  #   encoder 5 * (2*(32 + 27) + 4*10/2) = 690, x2 = 1380; decoder 4 * (2*(48 + 33) + 36) = 792,
  #   + 60 -> 852, x3 = 2556; + 80 -> 4016; total 4016 + 244 + 200 + 1200 = 5660.
  assert accounting.activation_bytes(cfg, 5, 4, tensor_shards=2,
                                     remat_policy="none")["total"] == 5660.0


@pytest.mark.parametrize("policy,layers", [
    # projections only: encoder 5 * 4 * (24 + 38) = 1240, x2; decoder 4 * 4 * (32 + 44) = 1216,
    # + 240, x3 = 4368; + 160 -> 7008
    ("dots_with_no_batch_dims_saveable", 7008.0),
    # each layer's input, Lx*a*D per layer, plus one layer's "none" activations:
    # encoder 5*4*8*2 + 1920 = 2240; decoder 4*4*8*3 + 2112 + 240 = 2736; + 160 -> 5136
    ("full", 5136.0), ("nothing_saveable", 5136.0),
    # the named tags, a = 4: encoder per token 2D + 4NH = 40 -> 5 * 4 * 40 = 800, x2, plus
    # one layer recomputed 1920 -> 3520; decoder 2D + D + 4NH + 2NH = 60 -> 4 * 4 * 60 = 960,
    # + k, v of the encoded sequence 240, x3 = 3600, plus one layer 2112 -> 5712; + 160
    ("minimal", 9392.0),
    # ... and the two gated MLP products, 2F = 20 per token: + 5*4*20*2 + 4*4*20*3 = 1760
    ("minimal_with_mlp", 11152.0),
    # offloaded to the host: on the device what "full" keeps
    ("minimal_offloaded", 5136.0)])
def test_activation_bytes_hand_derived_remat_policies(policy, layers):
  got = accounting.activation_bytes(_ACT.replace(remat_policy=policy), 5, 4)
  assert got["layers"] == layers
  assert got["total"] == layers + 244 + 400 + 2400


@pytest.mark.parametrize("mask_type", ["causal", "prefix_lm"])
def test_activation_bytes_hand_derived_decoder_only(mask_type):
  # One sequence of L = 9 tokens, relu MLP (2 matrices): per token 4D + 4NH + 2F = 76
  # elements, probs N*L = 18 -> 9 * (4*76 + 4*18) = 3384 per layer, x3 = 10152.
  # masks 4*L^2 = 324; attention backward 2*4*N*L^2 = 1296; logits 3*4*L*V = 5400.
  cfg = _ACT.replace(mask_type=mask_type, num_encoder_layers=0, mlp_activation="relu")
  got = accounting.activation_bytes(cfg, 5, 4)
  assert got == {"layers": 10152.0, "masks": 324.0, "attention_backward": 1296.0,
                 "logits": 5400.0, "total": 17172.0}


def test_activation_bytes_hand_derived_dots_policy_with_a_two_matrix_mlp():
  # relu MLP (wi, wo), "dots_with_no_batch_dims_saveable", a = 4, t = 1:
  #   encoder: D parts 3D = 24, split 3NH + F = 28 -> 5 * 4 * 52 = 1040, x2 = 2080
  #   decoder: D parts 32, split 28 + NH = 34 -> 4 * 4 * 66 = 1056, + 240, x3 = 3888
  #   + 160 -> layers 6128
  cfg = _ACT.replace(mlp_activation="relu", remat_policy="dots_with_no_batch_dims_saveable")
  assert accounting.activation_bytes(cfg, 5, 4)["layers"] == 6128.0


def test_prefix_lm_counts_the_causal_models_params():
  """A prefix LM has the causal decoder's params; counting them builds its batch with the
  prefix flags it needs (mask type built at run time, as from a flag)."""
  causal = TransformerConfig(vocab_size=50, emb_dim=8, num_heads=2, head_dim=3, mlp_dim=10,
                             num_encoder_layers=0, num_decoder_layers=2, mask_type="causal")
  prefix = causal.replace(mask_type="".join(["prefix", "_lm"]))
  assert accounting.count_params(prefix) == accounting.count_params(causal) > 0


def test_activation_bytes_reads_names_built_at_run_time_and_zero_tensor_shards_as_one():
  """dtype and policy as from a flag (not the interned literals); tensor_shards 0 (no
  tensor axis in the mesh) counts as 1."""
  cfg = _ACT.replace(dtype="".join(["bfloat", "16"]), remat_policy="".join(["dots_", "saveable"]))
  assert accounting.activation_bytes(cfg, 5, 4, tensor_shards=2)["total"] == 4896.0
  assert (accounting.activation_bytes(_ACT, 5, 4, tensor_shards=0)
          == accounting.activation_bytes(_ACT, 5, 4))


def test_activation_bytes_hand_derived_with_a_one_token_input():
  # Li = 1 still gives the decoder its cross-attention (one key):
  #   encoder 1 * (4*86 + 4*2) = 352, x2 = 704; decoder 4 * (4*114 + 4*(8 + 2)) = 1984,
  #   + 4*2*NH*1 = 48 -> 2032, x3 = 6096; + 1*4*8 = 32 -> layers 6832
  #   masks 4*(1 + 16 + 4) = 84; attention backward 2*4*2*16 = 256; logits 2400.
  got = accounting.activation_bytes(_ACT, 1, 4)
  assert (got["layers"], got["total"]) == (6832.0, 9572.0)


# Published shapes (layers per stack, d_model, d_ff, heads, d_kv), written out here from the
# sources rather than read from lm: T5.1.1 from the released checkpoints' configs
# (google/t5-v1_1-*), T5 from the paper's Table 14 / released T5 configs, GPT-3 from its
# paper's Table 2.1 (d_ff = 4 d_model), except 1.3B's heads (16 x 128 = d_model; the paper
# prints 24). The cpu family is lm's own (cpu/tiny is the README job's model): pinned so
# that a change is deliberate.
PUBLISHED_SHAPES = {
    ("t5_1_1", "small"): (8, 512, 1024, 6, 64), ("t5_1_1", "base"): (12, 768, 2048, 12, 64),
    ("t5_1_1", "large"): (24, 1024, 2816, 16, 64), ("t5_1_1", "xl"): (24, 2048, 5120, 32, 64),
    ("t5_1_1", "xxl"): (24, 4096, 10240, 64, 64),
    ("t5_1_0", "small"): (6, 512, 2048, 8, 64), ("t5_1_0", "base"): (12, 768, 3072, 12, 64),
    ("t5_1_0", "large"): (24, 1024, 4096, 16, 64), ("t5_1_0", "3b"): (24, 1024, 16384, 32, 128),
    ("t5_1_0", "11b"): (24, 1024, 65536, 128, 128),
    ("gpt3", "125m"): (12, 768, 3072, 12, 64), ("gpt3", "350m"): (24, 1024, 4096, 16, 64),
    ("gpt3", "760m"): (24, 1536, 6144, 16, 96), ("gpt3", "1_3b"): (24, 2048, 8192, 16, 128),
    ("gpt3", "2_7b"): (32, 2560, 10240, 32, 80), ("gpt3", "6_7b"): (32, 4096, 16384, 32, 128),
    ("gpt3", "13b"): (40, 5140, 20560, 40, 128), ("gpt3", "175b"): (96, 12288, 49152, 96, 128),
    ("cpu", "tiny"): (2, 64, 128, 4, 16), ("cpu", "small_cpu"): (4, 256, 1024, 4, 64),
    # T5Gemma: T5.1.1's sizes with multi-head attention (8 heads in s), Gemma 2's shapes;
    # ml from google/t5gemma-ml-ml-prefixlm's config.json (4 query and 4 key/value heads).
    ("t5gemma", "s"): (8, 512, 1024, 8, 64), ("t5gemma", "b"): (12, 768, 2048, 12, 64),
    ("t5gemma", "l"): (24, 1024, 2816, 16, 64), ("t5gemma", "xl"): (24, 2048, 5120, 32, 64),
    ("t5gemma", "ml"): (26, 1152, 6912, 4, 256),
    ("t5gemma", "2b"): (26, 2304, 9216, 8, 256), ("t5gemma", "9b"): (42, 3584, 14336, 16, 256),
}


def test_preset_shapes_are_the_published_ones():
  assert {(f, s) for f in ("t5_1_1", "t5_1_0", "gpt3", "t5gemma", "cpu")
          for s in presets_sizes(f)} == set(PUBLISHED_SHAPES) | {("t5gemma", "9b_2b")}
  for (family, size), want in PUBLISHED_SHAPES.items():
    for architecture, stacks in (("encoder_decoder", 2), ("causal", 1)):
      cfg = make_config(family, size, architecture)
      got = (cfg.num_decoder_layers, cfg.emb_dim, cfg.mlp_dim, cfg.num_heads, cfg.head_dim)
      assert got == want, (family, size, got)
      assert cfg.num_encoder_layers == (want[0] if stacks == 2 else 0)


def test_preset_family_fields():
  """Each family's published settings beyond the shapes (module docstring of presets.py)."""
  t5_1_1 = dict(vocab_size=32128, mlp_activation="gated_gelu", tie_embeddings=False,
                position_encoding="t5_relative", norm_type="rmsnorm", norm_position="pre",
                dropout_rate=0.0, dtype="bfloat16", embedding_init_stddev=1.0)
  want = {
      "t5_1_1": t5_1_1,
      "t5_1_0": dict(t5_1_1, mlp_activation="relu", tie_embeddings=True, tied_logits_scale=True,
                     dropout_rate=0.1),
      "gpt3": dict(vocab_size=50304, mlp_activation="gelu", position_encoding="learned",
                   max_length=2048, norm_type="layernorm", norm_position="pre",
                   tie_embeddings=True, tied_logits_scale=False, embedding_init_stddev=0.02,
                   dropout_rate=0.0, dtype="bfloat16"),
      "cpu": dict(t5_1_1, dtype="float32"),
      "t5gemma": dict(vocab_size=256000, mlp_activation="gated_gelu", position_encoding="rope",
                      rope_max_wavelength=10_000.0, norm_type="gemma_rmsnorm",
                      norm_position="sandwich", tie_embeddings=True, tied_logits_scale=False,
                      scale_embeddings=True, attn_logit_softcapping=50.0,
                      final_logit_softcapping=30.0, sliding_window=4096, layer_pattern="LG",
                      dropout_rate=0.0, dtype="bfloat16"),
  }
  for family, fields in want.items():
    for size in presets_sizes(family):
      cfg = make_config(family, size, "causal")
      assert {k: getattr(cfg, k) for k in fields} == fields, (family, size)
  with pytest.raises(ValueError, match="must look like family/size/architecture"):
    from_name("t5_1_1/small/causal/extra")


def test_grouped_query_attention_counts_k_and_v_at_kv_heads():
  """Params and FLOPs by hand with num_kv_heads = 1 of N = 2 (encoder-decoder, untied)."""
  cfg = TransformerConfig(vocab_size=100, emb_dim=8, num_heads=2, head_dim=4, mlp_dim=16,
                          num_encoder_layers=2, num_decoder_layers=3, num_kv_heads=1)
  d, nh, kh, f, v = 8, 8, 4, 16, 100
  attn = 2 * d * nh + 2 * d * kh            # q, o [D, N, H] and k, v [D, K, H]
  mlp, rel = 3 * d * f, 2 * 32
  want = (2 * v * d + 2 * (attn + mlp + 2 * d) + 3 * (2 * attn + mlp + 3 * d) + 2 * d
          + 2 * rel)
  assert accounting.count_params(cfg) == want
  assert accounting.count_params(cfg.replace(num_kv_heads=None)) == want + 8 * 2 * d * (nh - kh)
  li, lt = 10, 6
  # encoder layer: 2*10*(2*8*8 + 2*8*4 + 3*8*16) + 4*10*10*8 = 2*10*576 + 3200 = 14720
  # decoder layer: 2*6*576 + 4*6*6*8 + 2*6*2*8*8 + 2*10*2*8*4 + 4*6*10*8
  #              = 6912 + 1152 + 1536 + 1280 + 1920 = 12800
  f = accounting.forward_flops(cfg, li, lt)
  assert f == {"encoder": 29440, "decoder": 38400, "logits": 9600, "total": 77440}


def test_the_9b_2b_preset_is_a_9b_encoder_and_a_2b_decoder():
  """T5Gemma 9B-2B: Gemma 2 9B's shape as the encoder, 2B's as the decoder (its
  cross-attention reads 3584-wide encoder states); decoder-only it is the 2B stack. Its
  12,292,375,296 parameters are transformers' count of T5GemmaForConditionalGeneration for
  T5GemmaConfig(encoder=the 9B module, decoder=the 2B module with
  cross_attention_hidden_size=3584, vocab 256000, tied head), built on torch's meta device."""
  cfg = make_config("t5gemma", "9b_2b", "encoder_decoder")
  enc = cfg.encoder_config()
  assert ((cfg.num_encoder_layers, enc.emb_dim, enc.mlp_dim, enc.num_heads, enc.num_kv_heads,
           enc.head_dim) == (42, 3584, 14336, 16, 8, 256))
  assert ((cfg.num_decoder_layers, cfg.emb_dim, cfg.mlp_dim, cfg.num_heads, cfg.num_kv_heads,
           cfg.head_dim) == (26, 2304, 9216, 8, 4, 256))
  assert accounting.count_params(cfg) == 12_292_375_296
  causal = make_config("t5gemma", "9b_2b", "causal")
  assert causal == make_config("t5gemma", "2b", "causal")


def test_forward_flops_of_an_encoder_of_its_own_shape_hand_derived():
  # decoder D=4, NH=4, KH=2, F=6; encoder De=6, NHe=6, KHe=6, Fe=8; gated (M=3); Li=3, Lt=2:
  #   encoder 2*3*(2*6*6 + 2*6*6 + 3*6*8) + 4*9*6 = 1944
  #   decoder 2*2*(2*4*4 + 2*4*2 + 3*4*6) + 4*4*4 = 544, cross 2*2*2*4*4 + 2*3*2*6*2
  #   + 4*2*3*4 = 368 (k, v read the encoder's 6) -> 912; logits 2*2*4*10 = 160
  cfg = TransformerConfig(vocab_size=10, emb_dim=4, num_heads=2, head_dim=2, num_kv_heads=1,
                          mlp_dim=6, num_encoder_layers=1, num_decoder_layers=1,
                          separate_encoder_embedding=True, encoder_emb_dim=6,
                          encoder_num_heads=3, encoder_num_kv_heads=3, encoder_mlp_dim=8)
  assert accounting.forward_flops(cfg, 3, 2) == {"encoder": 1944, "decoder": 912,
                                                 "logits": 160, "total": 3016}
  balanced = cfg.encoder_config().replace(emb_dim=4, num_heads=2, num_kv_heads=1, mlp_dim=6)
  assert accounting.forward_flops(balanced, 3, 2)["encoder"] != 1944


def test_forward_flops_of_merged_attention_hand_derived_and_against_xla():
  """Merged attention (T5Gemma 2) drops the cross block's q and o: from test_flops_hand_
  derived's decoder layer 14848, less 2*6*2*8*8 = 1536 -> 13312 per layer, x3 = 39936;
  and XLA's count of the compiled forward pass agrees with the formula."""
  cfg = TransformerConfig(vocab_size=100, emb_dim=8, num_heads=2, head_dim=4, mlp_dim=16,
                          num_encoder_layers=2, num_decoder_layers=3, position_encoding="rope",
                          merged_attention=True)
  assert accounting.forward_flops(cfg, 10, 6) == {"encoder": 32000, "decoder": 39936,
                                                  "logits": 9600, "total": 81536}
  wide = TransformerConfig(vocab_size=512, emb_dim=256, num_heads=4, head_dim=64, mlp_dim=1024,
                           num_encoder_layers=1, num_decoder_layers=2, dtype="float32",
                           position_encoding="rope", merged_attention=True)
  li, lt, b = 32, 16, 2
  batch = {"encoder_input_tokens": jnp.ones((b, li), jnp.int32),
           "decoder_input_tokens": jnp.ones((b, lt), jnp.int32)}
  model = Transformer(wide)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), batch)["params"]
  cost = jax.jit(lambda p: model.apply({"params": p}, batch)).lower(params).compile().cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  want = accounting.forward_flops(wide, li, lt)["total"] * b
  assert abs(cost["flops"] - want) / want < 0.1, (cost["flops"], want)
  groups = accounting.param_breakdown(wide, depth=3)
  assert "decoder/layers/self_attention" in groups  # (counted in the scanned layout)
  assert not any("cross" in g or "encoder_decoder" in g for g in groups), groups
