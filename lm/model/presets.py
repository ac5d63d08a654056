"""Model presets: size tables per family; the architecture is always an argument.

    make_config("t5_1_1", "base", "encoder_decoder")      # T5.1.1 base, 12 + 12 layers
    make_config("gpt3", "125m", "causal", dtype="float32")
    from_name("cpu/tiny/prefix_lm")                        # family/size/architecture

Families: ``t5_1_1``, ``t5_1_0``, ``gpt3``, ``t5gemma`` and ``cpu``. A size row is the
per-stack shape; `lm.architecture.model_fields` turns it into the model's stacks. The
parameter counting is in accounting.py, the config type in config.py.
Each family's sizes, sources and checked parameter counts: docs/model.md, 'Presets'.
"""
from __future__ import annotations

from typing import Any

from lm import architecture as architecture_lib
from lm.model.transformer import TransformerConfig

_T5_1_1 = dict(vocab_size=32128, mlp_activation="gated_gelu", tie_embeddings=False,
               position_encoding="t5_relative", norm_type="rmsnorm", dropout_rate=0.0,
               dtype="bfloat16")
_T5_1_0 = dict(_T5_1_1, mlp_activation="relu", tie_embeddings=True, dropout_rate=0.1)
_GPT3 = dict(vocab_size=50304, mlp_activation="gelu", position_encoding="learned",
             max_length=2048, norm_type="layernorm", norm_position="pre", tie_embeddings=True,
             tied_logits_scale=False, embedding_init_stddev=0.02, dropout_rate=0.0,
             dtype="bfloat16")
_CPU = dict(_T5_1_1, dtype="float32")
_T5GEMMA = dict(vocab_size=256000, mlp_activation="gated_gelu", position_encoding="rope",
                rope_max_wavelength=10_000.0, norm_type="gemma_rmsnorm",
                norm_position="sandwich", tie_embeddings=True, tied_logits_scale=False,
                scale_embeddings=True, attn_logit_softcapping=50.0,
                final_logit_softcapping=30.0, sliding_window=4096, layer_pattern="LG",
                separate_encoder_embedding=True, dropout_rate=0.0, dtype="bfloat16")


def _row(num_layers, emb_dim, mlp_dim, num_heads, head_dim) -> dict[str, int]:
  return dict(num_layers=num_layers, emb_dim=emb_dim, mlp_dim=mlp_dim, num_heads=num_heads,
              head_dim=head_dim)


def _gemma_row(num_layers, emb_dim, mlp_dim, num_heads, num_kv_heads, head_dim):
  return dict(_row(num_layers, emb_dim, mlp_dim, num_heads, head_dim),
              num_kv_heads=num_kv_heads, query_pre_attn_scalar=float(head_dim))


def _unbalanced_row(encoder: dict[str, Any], decoder: dict[str, Any]) -> dict[str, Any]:
  """An encoder-decoder whose encoder has a shape of its own (T5Gemma 9B-2B): the decoder's
  row, the encoder's depth as num_encoder_layers and its widths as encoder_<field>."""
  own = {f"encoder_{f}": encoder[f] for f in ("emb_dim", "num_heads", "num_kv_heads",
                                             "head_dim", "mlp_dim") if encoder[f] != decoder[f]}
  return dict(decoder, num_encoder_layers=encoder["num_layers"], **own)


def _gpt3_row(num_layers, d_model, num_heads, head_dim) -> dict[str, int]:
  return _row(num_layers, d_model, 4 * d_model, num_heads, head_dim)


# family -> (the family's fields, {size: per-stack shape}).
FAMILIES: dict[str, tuple[dict[str, Any], dict[str, dict[str, int]]]] = {
    "t5_1_1": (_T5_1_1, {
        "small": _row(8, 512, 1024, 6, 64),
        "base": _row(12, 768, 2048, 12, 64),
        "large": _row(24, 1024, 2816, 16, 64),
        "xl": _row(24, 2048, 5120, 32, 64),
        "xxl": _row(24, 4096, 10240, 64, 64),
    }),
    "t5_1_0": (_T5_1_0, {
        "small": _row(6, 512, 2048, 8, 64),
        "base": _row(12, 768, 3072, 12, 64),
        "large": _row(24, 1024, 4096, 16, 64),
        "3b": _row(24, 1024, 16384, 32, 128),
        "11b": _row(24, 1024, 65536, 128, 128),
    }),
    "gpt3": (_GPT3, {
        "125m": _gpt3_row(12, 768, 12, 64),
        "350m": _gpt3_row(24, 1024, 16, 64),
        "760m": _gpt3_row(24, 1536, 16, 96),
        "1_3b": _gpt3_row(24, 2048, 16, 128),  # paper prints 24 heads; 16 x 128 = d_model
        "2_7b": _gpt3_row(32, 2560, 32, 80),
        "6_7b": _gpt3_row(32, 4096, 32, 128),
        "13b": _gpt3_row(40, 5140, 40, 128),
        "175b": _gpt3_row(96, 12288, 96, 128),
    }),
    "t5gemma": (_T5GEMMA, {
        "s": _gemma_row(8, 512, 1024, 8, 8, 64),
        "b": _gemma_row(12, 768, 2048, 12, 12, 64),
        "l": _gemma_row(24, 1024, 2816, 16, 16, 64),
        "ml": _gemma_row(26, 1152, 6912, 4, 4, 256),  # t5gemma-ml-ml's config.json
        "xl": _gemma_row(24, 2048, 5120, 32, 32, 64),
        "2b": _gemma_row(26, 2304, 9216, 8, 4, 256),
        "9b": _gemma_row(42, 3584, 14336, 16, 8, 256),
        "9b_2b": _unbalanced_row(_gemma_row(42, 3584, 14336, 16, 8, 256),
                                 _gemma_row(26, 2304, 9216, 8, 4, 256)),
    }),
    "cpu": (_CPU, {
        "tiny": _row(2, 64, 128, 4, 16),
        "small_cpu": _row(4, 256, 1024, 4, 64),
    }),
}


def sizes(family: str) -> tuple[str, ...]:
  """The size names of `family`, smallest first.

  Raises:
    ValueError: unknown family.
  """
  if family not in FAMILIES:
    raise ValueError(f"unknown model family {family!r}; expected one of {list(FAMILIES)}")
  return tuple(FAMILIES[family][1])


def preset_fields(family: str, size: str) -> dict[str, Any]:
  """The family's fields and the size's per-stack shape, with ``num_layers`` (per stack).

  Raises:
    ValueError: unknown family or size.
  """
  if size not in sizes(family):
    raise ValueError(f"unknown size {size!r} for model family {family!r}; expected one of "
                     f"{list(sizes(family))}")
  common, table = FAMILIES[family]
  return {**common, **table[size]}


def make_config(family: str, size: str, architecture: str, **overrides) -> TransformerConfig:
  """The TransformerConfig of a family's size as `architecture`, plus keyword overrides.

  Args:
    family: a key of FAMILIES ("t5_1_1", "t5_1_0", "gpt3", "t5gemma", "cpu").
    size: one of `sizes(family)`.
    architecture: one of lm.architecture.ARCHITECTURES (encoder_decoder, shared,
      prefix_lm, causal); it sets mask_type, shared_encoder_decoder and the stacks.
    **overrides: ``num_layers`` (layers per stack) and TransformerConfig fields other than
      the ones the architecture sets.
  Returns:
    The validated TransformerConfig.
  Raises:
    ValueError: unknown family, size, architecture or override key.
  """
  fields = preset_fields(family, size)
  architecture_lib.check(architecture)
  derived = set(architecture_lib.model_fields(architecture, 1))
  known = (set(TransformerConfig.__dataclass_fields__) - derived) | {"num_layers"}
  unknown = sorted(set(overrides) - known)
  if unknown:
    raise ValueError(f"unknown override(s) {unknown} for {family}/{size}; expected "
                     f"TransformerConfig fields or num_layers (the architecture sets "
                     f"{sorted(derived)})")
  encoder_layers = fields.pop("num_encoder_layers", None)  # an encoder of its own (9b_2b)
  if architecture != "encoder_decoder":  # one stack's table (Gemma 2 itself as causal)
    fields["separate_encoder_embedding"] = False
    encoder_layers = None
    fields = {k: v for k, v in fields.items() if not k.startswith("encoder_")}
  fields.update(overrides)
  num_layers = fields.pop("num_layers")
  stacks = architecture_lib.model_fields(architecture, num_layers)
  if encoder_layers is not None and "num_layers" not in overrides:
    stacks["num_encoder_layers"] = encoder_layers
  return TransformerConfig(**fields, **stacks)


def preset_name(family: str, size: str, architecture: str) -> str:
  """"family/size/architecture", the form `from_name` reads (benchmarks' --presets)."""
  return f"{family}/{size}/{architecture}"


def from_name(name: str, **overrides) -> TransformerConfig:
  """`make_config` of a "family/size/architecture" name, e.g. "t5_1_1/small/causal".

  Raises:
    ValueError: a malformed name, or unknown family, size or architecture.
  """
  parts = name.split("/")
  if len(parts) != 3:
    raise ValueError(f"model preset {name!r} must look like family/size/architecture, e.g. "
                     "t5_1_1/small/encoder_decoder")
  return make_config(*parts, **overrides)


def all_names() -> list[str]:
  """Every family/size/architecture name."""
  return [preset_name(f, s, a) for f in FAMILIES for s in sizes(f)
          for a in architecture_lib.ARCHITECTURES]


__all__ = ["FAMILIES", "all_names", "from_name", "make_config", "preset_fields", "preset_name",
           "sizes"]
