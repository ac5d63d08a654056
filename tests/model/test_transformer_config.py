"""TransformerConfig's validation: every bound refused just outside and accepted just inside."""
import dataclasses

import jax.numpy as jnp
import pytest

from lm.model.transformer_config import (DTYPES, MASK_TYPES, NORM_POSITIONS, REMAT_POLICIES,
                             TransformerConfig)
from lm.model.layers import MLP_ACTIVATIONS, NORM_TYPES
from lm.model.position import POSITION_ENCODINGS

from model_helpers import runtime_str

BASE = dict(vocab_size=32, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32,
            num_encoder_layers=1, num_decoder_layers=1, dtype="float32")


def make(**kw) -> TransformerConfig:
  if kw.get("mask_type", "encoder_decoder") != "encoder_decoder":
    kw.setdefault("num_encoder_layers", 0)
  return TransformerConfig(**{**BASE, **kw})


def refused(match: str, **kw):
  with pytest.raises(ValueError, match=r"^TransformerConfig: " + match):
    make(**kw)


@pytest.mark.parametrize("name", ["vocab_size", "emb_dim", "num_heads", "mlp_dim",
                                  "num_decoder_layers"])
def test_sizes_are_positive_ints(name):
  assert getattr(make(**{name: 1}), name) == 1
  refused(f"{name} must be a positive int, got 0", **{name: 0})
  refused(f"{name} must be a positive int, got -1", **{name: -1})
  refused(f"{name} must be a positive int, got 2.0", **{name: 2.0})


def test_num_encoder_layers():
  assert make(num_encoder_layers=3).num_encoder_layers == 3
  assert make(mask_type="causal", num_encoder_layers=0).num_encoder_layers == 0
  refused(r"num_encoder_layers must be an int >= 0, got -1", mask_type="causal", num_encoder_layers=-1)
  refused(r"num_encoder_layers must be an int >= 0, got 1.0", num_encoder_layers=1.0)
  refused(r"mask_type='encoder_decoder' needs num_encoder_layers > 0", num_encoder_layers=0)
  for mask_type in ("prefix_lm", "causal"):
    refused(rf"mask_type='{mask_type}' is decoder-only: set num_encoder_layers=0 \(got 1\)",
            mask_type=mask_type, num_encoder_layers=1)


def test_head_dim_and_its_default():
  assert make(head_dim=None, emb_dim=12, num_heads=3).resolved_head_dim == 4
  assert make(head_dim=5).resolved_head_dim == 5
  assert make(head_dim=1).resolved_head_dim == 1
  refused(r"head_dim=None needs emb_dim \(10\) divisible by num_heads \(3\)",
          head_dim=None, emb_dim=10, num_heads=3)
  assert isinstance(make(head_dim=None, emb_dim=12, num_heads=3).resolved_head_dim, int)
  refused("head_dim must be a positive int or None, got 0", head_dim=0)
  refused("head_dim must be a positive int or None, got -2", head_dim=-2)
  refused("head_dim must be a positive int or None, got 8.0", head_dim=8.0)


@pytest.mark.parametrize("field,allowed", [
    ("mask_type", MASK_TYPES), ("mlp_activation", MLP_ACTIVATIONS),
    ("position_encoding", POSITION_ENCODINGS), ("norm_type", NORM_TYPES),
    ("norm_position", NORM_POSITIONS), ("dtype", tuple(DTYPES)),
    ("remat_policy", tuple(REMAT_POLICIES))])
def test_choice_fields(field, allowed):
  """Every allowed value is accepted; values sorting before, between and after are not."""
  extra = {"position_encoding": {"learned": dict(max_length=8)}}.get(field, {})
  for value in allowed:
    assert getattr(make(**{field: value}, **extra.get(value, {})), field) == value
  for value in ("aaa", sorted(allowed)[0] + "x", "zzz", ""):
    refused(f"unknown {field} {value!r}; expected one of", **{field: value})


def test_dropout_rate_bounds():
  assert make(dropout_rate=0.0).dropout_rate == 0.0
  assert make(dropout_rate=0.999).dropout_rate == 0.999
  refused(r"dropout_rate must be in \[0, 1\), got 1.0", dropout_rate=1.0)
  refused(r"dropout_rate must be in \[0, 1\), got -0.01", dropout_rate=-0.01)
  refused(r"dropout_rate must be in \[0, 1\), got 1.5", dropout_rate=1.5)


def test_shared_encoder_decoder():
  cfg = make(shared_encoder_decoder=True, num_encoder_layers=2, num_decoder_layers=2)
  assert cfg.shared_encoder_decoder
  refused("shared_encoder_decoder needs num_encoder_layers == num_decoder_layers, got 1 and 2",
          shared_encoder_decoder=True, num_encoder_layers=1, num_decoder_layers=2)
  refused("shared_encoder_decoder needs num_encoder_layers == num_decoder_layers, got 3 and 2",
          shared_encoder_decoder=True, num_encoder_layers=3, num_decoder_layers=2)
  # Depths parsed from a command line are equal ints, not one object (above 256).
  deep = make(shared_encoder_decoder=True, num_encoder_layers=int("300"),
              num_decoder_layers=int("300"), emb_dim=2, head_dim=1, mlp_dim=1)
  assert deep.num_encoder_layers == deep.num_decoder_layers == 300
  refused("shared_encoder_decoder needs mask_type='encoder_decoder', got 'causal'",
          shared_encoder_decoder=True, mask_type="causal")


def test_position_encoding_requirements():
  assert make(position_encoding="learned", max_length=1).max_length == 1
  for bad in (None, 0, -3, 4.0):
    refused(r"position_encoding='learned' needs max_length \(a positive int\)",
            position_encoding="learned", max_length=bad)
  assert make(position_encoding="rope", head_dim=2).resolved_head_dim == 2
  assert make(position_encoding="rope", head_dim=None, emb_dim=12, num_heads=2).resolved_head_dim == 6
  refused("rope needs an even head_dim, got 7", position_encoding="rope", head_dim=7)
  refused("rope needs an even head_dim, got 3", position_encoding="rope", head_dim=None,
          emb_dim=6, num_heads=2)
  assert make(position_encoding="sinusoidal", emb_dim=2).emb_dim == 2
  refused("sinusoidal positions need an even emb_dim, got 15", position_encoding="sinusoidal",
          emb_dim=15)
  # Odd sizes are fine where the encoding does not split them in halves.
  assert make(head_dim=7, emb_dim=15).emb_dim == 15
  for pe in POSITION_ENCODINGS:
    if pe != "sinusoidal":
      assert make(position_encoding=pe, emb_dim=15, head_dim=8, max_length=4).emb_dim == 15
    if pe != "rope":
      assert make(position_encoding=pe, head_dim=7, max_length=4).head_dim == 7


def test_relative_bucket_bounds():
  """At least 4 buckets, and max_distance beyond the num_buckets / 2 exact buckets."""
  cfg = make(relative_num_buckets=4, relative_max_distance=3)
  assert (cfg.relative_num_buckets, cfg.relative_max_distance) == (4, 3)
  message = "relative_num_buckets must be >= 4 and relative_max_distance > num_buckets / 2"
  refused(message, relative_num_buckets=3, relative_max_distance=100)
  refused(message, relative_num_buckets=4, relative_max_distance=2)
  refused(message, relative_num_buckets=32, relative_max_distance=16)
  refused(message, relative_num_buckets=32, relative_max_distance=10)
  assert make(relative_num_buckets=32, relative_max_distance=17).relative_max_distance == 17
  # Other position encodings never read the bucket settings.
  assert make(position_encoding="rope", relative_num_buckets=1).relative_num_buckets == 1


def test_configs_are_frozen_and_hashable():
  """Configs key caches (jitted functions per config) and are shared: no field can change."""
  cfg = make()
  with pytest.raises(dataclasses.FrozenInstanceError):
    cfg.emb_dim = 32
  assert hash(cfg) == hash(make()) and {cfg: 1}[make()] == 1


def test_derived_properties_and_replace():
  assert make(dtype="bfloat16").activation_dtype == jnp.bfloat16
  assert make(dtype="float32").activation_dtype == jnp.float32
  assert make().is_encoder_decoder
  assert not make(mask_type="prefix_lm").is_encoder_decoder
  assert not make(mask_type="causal").is_encoder_decoder
  cfg = make()
  assert cfg.replace(emb_dim=24).emb_dim == 24 and cfg.emb_dim == 16
  with pytest.raises(ValueError, match="TransformerConfig: emb_dim must be a positive int"):
    cfg.replace(emb_dim=0)


def test_defaults_are_t5_1_1():
  """T5.1.1-small's shapes (docs/t5_reference.md): gated GELU, untied, RMSNorm, relative
  positions with 32 buckets up to distance 128, no dropout in pre-training."""
  cfg = TransformerConfig()
  assert (cfg.vocab_size, cfg.emb_dim, cfg.num_heads, cfg.head_dim, cfg.mlp_dim) == (32128, 512, 6, 64, 1024)
  assert (cfg.num_encoder_layers, cfg.num_decoder_layers) == (8, 8)
  assert (cfg.mask_type, cfg.mlp_activation, cfg.position_encoding) == (
      "encoder_decoder", "gated_gelu", "t5_relative")
  assert (cfg.relative_num_buckets, cfg.relative_max_distance) == (32, 128)
  assert (cfg.norm_type, cfg.norm_position, cfg.tie_embeddings, cfg.tied_logits_scale) == (
      "rmsnorm", "pre", False, True)
  assert (cfg.dropout_rate, cfg.embedding_init_stddev, cfg.rope_max_wavelength) == (0.0, 1.0, 10_000.0)
  assert (cfg.dtype, cfg.remat_policy, cfg.scan_layers, cfg.shared_encoder_decoder) == (
      "bfloat16", "none", False, False)
  assert cfg.max_length is None


def test_choice_values_built_at_run_time():
  """Values read from a command line are equal, not identical, to the literals: every
  check compares with ==, so each config validates exactly as its literal twin."""
  for field, allowed in [("mask_type", MASK_TYPES), ("position_encoding", POSITION_ENCODINGS),
                         ("norm_type", NORM_TYPES), ("mlp_activation", MLP_ACTIVATIONS)]:
    for value in allowed:
      extra = dict(max_length=8) if value == "learned" else {}
      built = runtime_str(value)
      assert built is not value
      assert make(**{field: built}, **extra) == make(**{field: value}, **extra)
  assert make(mask_type=runtime_str("encoder_decoder")).is_encoder_decoder
  refused("rope needs an even head_dim", position_encoding=runtime_str("rope"), head_dim=7)
  refused("sinusoidal positions need an even emb_dim", position_encoding=runtime_str("sinusoidal"),
          emb_dim=15)
  refused("position_encoding='learned' needs max_length", position_encoding=runtime_str("learned"))
  refused("relative_num_buckets must be >= 4", position_encoding=runtime_str("t5_relative"),
          relative_num_buckets=2)
  refused("mask_type='causal' is decoder-only", mask_type=runtime_str("causal"), num_encoder_layers=1)


def test_t5gemma_attention_knobs():
  """num_kv_heads divides num_heads; the query scale and both caps are positive and finite
  (None: T5's behaviour, the default)."""
  cfg = make()
  assert (cfg.num_kv_heads, cfg.query_pre_attn_scalar, cfg.attn_logit_softcapping,
          cfg.final_logit_softcapping) == (None, None, None, None)
  assert cfg.resolved_num_kv_heads == 2
  assert make(num_heads=4, num_kv_heads=2).resolved_num_kv_heads == 2
  assert make(num_heads=4, num_kv_heads=1).resolved_num_kv_heads == 1
  assert make(num_kv_heads=2).resolved_num_kv_heads == 2
  for bad in (3, 0, -2, 2.0, True):
    refused(r"num_kv_heads must be a positive int that divides num_heads \(4\) or None "
            rf"\(= num_heads\), got {bad!r}", num_heads=4, num_kv_heads=bad)
  for name in ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping"):
    assert getattr(make(**{name: 50}), name) == 50
    assert getattr(make(**{name: 0.5}), name) == 0.5
    for bad in (0, -1.0, float("inf"), float("nan"), "30", True):
      refused(rf"{name} must be a positive finite number or None \(off\), got "
              + repr(bad).replace("(", r"\(").replace(")", r"\)"), **{name: bad})


def test_added_knobs_at_their_defaults_keep_old_signatures_and_configs(tmp_path):
  """A checkpoint written before the T5Gemma knobs existed has the hash of the same model
  now (the knobs at their defaults are left out of the signature); a knob set changes it;
  an old run's config.json loads with the defaults and takes an override."""
  import json
  from configs import t5
  from lm import config as config_lib
  from lm.checkpoint import signature
  from lm.model.transformer_config import ADDED_FIELDS
  now = dataclasses.asdict(make())
  old = {k: v for k, v in now.items() if k not in ADDED_FIELDS}
  sig = signature.run_signature(now, {"params": {}})
  assert sig == signature.run_signature(old, {"params": {}})
  assert not set(ADDED_FIELDS) & set(sig["model"])
  for name, value in (("num_kv_heads", 1), ("query_pre_attn_scalar", 8.0),
                      ("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0),
                      ("scale_embeddings", True)):
    changed = signature.run_signature({**now, name: value}, {"params": {}})
    assert changed["model"][name] == value and changed["model_hash"] != sig["model_hash"]
  raw = json.loads(config_lib.derive(t5.get_config("runlocal")).to_json_best_effort())
  for name in ADDED_FIELDS:
    del raw["model"][name]
  (tmp_path / "config.json").write_text(json.dumps(raw))
  loaded = config_lib.load_config_json(str(tmp_path / "config.json"))
  assert all(getattr(config_lib.model_config(loaded), k) == v for k, v in ADDED_FIELDS.items())
  changed = config_lib.apply_overrides(loaded, ["--config.model.num_kv_heads=2",
                                                "--config.model.attn_logit_softcapping=50"])
  model = config_lib.model_config(changed)
  assert (model.num_kv_heads, model.attn_logit_softcapping) == (2, 50)
  # A fresh config's placeholders take typed command-line values too.
  fresh = config_lib.apply_overrides(config_lib.derive(t5.get_config("runlocal")),
                                     ["--config.model.final_logit_softcapping=30.0"])
  assert config_lib.model_config(fresh).final_logit_softcapping == 30.0


def test_scale_embeddings_is_a_bool():
  assert make(scale_embeddings=True).scale_embeddings is True
  refused("scale_embeddings must be a bool, got 1", scale_embeddings=1)
