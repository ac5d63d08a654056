"""Hugging Face T5Gemma checkpoints <-> lm encoder-decoder params (NumPy + safetensors, no torch).

Reads and writes the directory layout of ``transformers``' ``save_pretrained`` for
``T5GemmaForConditionalGeneration`` (``model_type: "t5gemma"``): ``config.json`` (a top-level
config holding an ``encoder`` and a ``decoder`` module config) plus ``model.safetensors``
(or shards listed in ``model.safetensors.index.json``).

    config, params = load_hf_t5gemma("/ckpt/t5gemma-2b-2b-ul2")
    logits = Transformer(config).apply({"params": params}, batch)
    save_hf_t5gemma("/out/dir", config, params)   # transformers.from_pretrained works

The pure halves are ``hf_to_lm(hf_config, tensors, **overrides)`` and
``lm_to_hf(config, params)``; shared helpers come from ``lm.checkpoint.hf_t5``. An encoder of
its own shape (9B-2B) becomes the config's ``encoder_*`` fields. The tensor and field mapping,
the numerical differences from transformers and what is refused: docs/checkpoints.md.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np

from lm.checkpoint import hf_t5
from lm.checkpoint.hf_t5 import (CONFIG_NAME, WEIGHTS_NAME, HFConversionError, _format_names,
                                 _to_numpy, _unbox, read_json, read_safetensors)
from lm.model.transformer import TransformerConfig, scan_to_unscanned, unscanned_to_scan

_LM_EPSILON = 1e-6
_TANH_GELUS = ("gelu_pytorch_tanh", "gelu_new")
_LAYER_TYPES = {"sliding_attention": "L", "full_attention": "G"}
_LAYER_TYPE_NAMES = {v: k for k, v in _LAYER_TYPES.items()}
# Module-config fields that must agree between encoder and decoder (lm has one of each).
_SHARED_FIELDS = ("vocab_size", "hidden_activation", "rms_norm_eps", "query_pre_attn_scalar",
                  "attn_logit_softcapping", "attention_bias")
# The shape fields each stack may have of its own (9B-2B): HF name -> lm's (encoder_<name>).
_SHAPE_FIELDS = {"hidden_size": "emb_dim", "num_attention_heads": "num_heads",
                 "num_key_value_heads": "num_kv_heads", "head_dim": "head_dim",
                 "intermediate_size": "mlp_dim"}
# T5GemmaModuleConfig defaults (transformers 5.x), used for fields a config.json omits.
_MODULE_DEFAULTS = {"vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
                    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                    "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
                    "rms_norm_eps": 1e-6, "attention_bias": False, "query_pre_attn_scalar": 256,
                    "sliding_window": 4096, "layer_types": None,
                    "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0}


# ---------------------------------------------------------------------------------------
# Config.

def _module(hf_config: Mapping[str, Any], stack: str) -> dict[str, Any]:
  sub = hf_config.get(stack)
  if not isinstance(sub, Mapping):
    raise HFConversionError(f"config.json has no {stack!r} object (a t5gemma config holds "
                            "'encoder' and 'decoder' module configs)")
  out = dict(_MODULE_DEFAULTS)
  out.update(sub)
  if out["layer_types"] is None:  # HF's default: sliding, full, sliding, ...
    out["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention"
                          for i in range(int(out["num_hidden_layers"]))]
  return out


def decoder_start_id(hf_config: Mapping[str, Any]) -> int:
  """The token a T5Gemma decoder reads first: its decoder's ``bos_token_id`` (2, Gemma's
  <bos>), as transformers' ``_shift_right`` and ``generate`` use it. ``lm.restore.load_hf``
  decodes from it (``Restored.framing``), and a fine-tuning run's data start from it with
  ``finetune.framing=t5gemma`` (``ckpt.init_from`` refuses another start)."""
  decoder = hf_config.get("decoder")
  start = decoder.get("bos_token_id") if isinstance(decoder, Mapping) else None
  return int(start if start is not None else hf_config.get("bos_token_id", 2))


def eos_ids(hf_config: Mapping[str, Any],
            generation_config: Mapping[str, Any] | None = None) -> tuple[int, ...]:
  """The ids that end a generated sequence, as transformers' ``generate`` reads them:
  generation_config.json's ``eos_token_id`` (an id or a list: the released T5Gemma
  checkpoints list 1 and 107, <end_of_turn>), else config.json's (its decoder's), else 1."""
  for source in (generation_config or {}, hf_config, hf_config.get("decoder") or {}):
    value = source.get("eos_token_id") if isinstance(source, Mapping) else None
    if value is not None:
      ids = (value,) if isinstance(value, int) else tuple(value)
      if not ids or not all(isinstance(i, int) and i >= 0 for i in ids):
        raise hf_t5.HFConversionError(f"eos_token_id {value!r} is not an id or a list of ids.")
      return tuple(int(i) for i in ids)
  return (1,)


def _rope_theta(module: Mapping[str, Any], stack: str) -> float:
  """RoPE base of a module config (5.x ``rope_parameters`` or 4.x ``rope_theta``)."""
  params = module.get("rope_parameters")
  if isinstance(params, Mapping):
    rope_type = params.get("rope_type", "default")
    if rope_type != "default":
      raise HFConversionError(f"{stack}.rope_parameters.rope_type={rope_type!r} is not supported "
                              "(lm's RoPE is the default, unscaled one)")
    return float(params.get("rope_theta", 10_000.0))
  if module.get("rope_scaling") is not None:
    raise HFConversionError(f"{stack}.rope_scaling={module['rope_scaling']!r} is not supported "
                            "(lm's RoPE is the default, unscaled one)")
  return float(module.get("rope_theta", 10_000.0))


def _layer_pattern(encoder_types, decoder_types) -> str | None:
  """lm's layer_pattern for the two stacks' ``layer_types`` (HFConversionError if none fits)."""
  letters = []
  for stack, types in (("encoder", encoder_types), ("decoder", decoder_types)):
    unknown = sorted({t for t in types if t not in _LAYER_TYPES})
    if unknown:
      raise HFConversionError(f"{stack}.layer_types has {unknown}; lm supports {sorted(_LAYER_TYPES)}")
    letters.append("".join(_LAYER_TYPES[t] for t in types))
  short, long = sorted(letters, key=len)
  if long[:len(short)] != short:
    raise HFConversionError(
        f"encoder.layer_types ({letters[0]}) and decoder.layer_types ({letters[1]}) "
        "(L = sliding, G = full) are not one pattern cycled over both stacks, which is what "
        "lm's layer_pattern expresses")
  period = next(p for p in range(1, len(long) + 1)
                if all(long[i] == long[i % p] for i in range(len(long))))
  pattern = long[:period]
  return None if "L" not in pattern else pattern


def check_gemma_block(module: Mapping[str, Any]) -> None:
  """Refuses a module config whose block lm cannot run: projection biases, an activation
  other than the tanh GELU, an RMSNorm epsilon other than lm's (T5Gemma and T5Gemma 2)."""
  if module["attention_bias"]:
    raise HFConversionError("attention_bias=True is not supported (lm's projections have no bias)")
  if module["hidden_activation"] not in _TANH_GELUS:
    raise HFConversionError(f"hidden_activation={module['hidden_activation']!r} is not supported "
                            f"(lm's gated_gelu is the tanh GELU: {_TANH_GELUS})")
  eps = float(module["rms_norm_eps"])
  if not np.isclose(eps, _LM_EPSILON, rtol=1e-6, atol=0.0):
    raise HFConversionError(f"rms_norm_eps={eps} is not supported (lm's RMSNorm uses {_LM_EPSILON})")


def dropout_rate(hf_config: Mapping[str, Any], overrides: Mapping[str, Any]) -> float:
  """config.json's dropout_rate, refused when its attention_dropout differs (lm has one
  rate) unless ``overrides`` choose the rate."""
  dropout = float(hf_config.get("dropout_rate", 0.0))
  attention_dropout = float(hf_config.get("attention_dropout", 0.0))
  if attention_dropout != dropout and "dropout_rate" not in overrides:
    raise HFConversionError(
        f"attention_dropout={attention_dropout} differs from dropout_rate={dropout}: lm uses "
        "one dropout_rate for both (pass dropout_rate=... to choose one)")
  return dropout


def with_overrides(kwargs: Mapping[str, Any], overrides: Mapping[str, Any]) -> TransformerConfig:
  """TransformerConfig of the converted ``kwargs`` with the caller's ``overrides`` on top
  (an unknown field named)."""
  unknown = sorted(set(overrides) - set(TransformerConfig.__dataclass_fields__))
  if unknown:
    raise HFConversionError(f"unknown TransformerConfig field(s) {unknown}")
  return TransformerConfig(**{**kwargs, **overrides})


def config_from_hf(hf_config: Mapping[str, Any], *, tie_embeddings: bool,
                   separate_encoder_embedding: bool = False,
                   **overrides) -> TransformerConfig:
  """TransformerConfig for an HF ``T5GemmaConfig`` dict (config.json contents).

  Args:
    hf_config: the parsed config.json.
    tie_embeddings: whether the head is the decoder's embedding (decided from the tensors).
    separate_encoder_embedding: whether the encoder's table differs from the decoder's
      (decided from the tensors).
    **overrides: other TransformerConfig fields (``dtype``, ``scan_layers``, ...).
  Returns:
    The TransformerConfig (dtype "float32" unless overridden).
  Raises:
    HFConversionError: a field lm cannot represent (the message names it).
  """
  model_type = hf_config.get("model_type")
  if model_type != "t5gemma":
    raise HFConversionError(f"model_type {model_type!r} is not T5Gemma (expected 't5gemma'; "
                            "T5 checkpoints load with lm.checkpoint.hf_t5)")
  if not hf_config.get("is_encoder_decoder", True):
    raise HFConversionError("is_encoder_decoder=False (an encoder-only T5Gemma) is not supported")
  enc, dec = _module(hf_config, "encoder"), _module(hf_config, "decoder")
  for name in _SHARED_FIELDS:
    if enc[name] != dec[name]:
      raise HFConversionError(
          f"encoder.{name}={enc[name]!r} differs from decoder.{name}={dec[name]!r}: lm's "
          f"encoder and decoder share {name} (only their shapes may differ, as in 9B-2B)")
  if hf_config.get("vocab_size", enc["vocab_size"]) != enc["vocab_size"]:
    raise HFConversionError(f"vocab_size={hf_config['vocab_size']!r} differs from "
                            f"encoder.vocab_size={enc['vocab_size']!r}")
  cross = dec.get("cross_attention_hidden_size")
  if cross is not None and cross != enc["hidden_size"]:
    raise HFConversionError(f"decoder.cross_attention_hidden_size={cross!r} is not the encoder's "
                            f"hidden_size {enc['hidden_size']}")
  check_gemma_block(enc)
  theta = _rope_theta(enc, "encoder")
  if _rope_theta(dec, "decoder") != theta:
    raise HFConversionError(f"decoder rope_theta {_rope_theta(dec, 'decoder')} differs from the "
                            f"encoder's {theta} (lm has one rope_max_wavelength)")
  pattern = _layer_pattern(enc["layer_types"], dec["layer_types"])
  for stack, module in (("encoder", enc), ("decoder", dec)):
    if len(module["layer_types"]) != int(module["num_hidden_layers"]):
      raise HFConversionError(f"{stack}.layer_types has {len(module['layer_types'])} entries for "
                              f"num_hidden_layers={module['num_hidden_layers']}")
  window = None
  if pattern is not None:
    if enc["sliding_window"] != dec["sliding_window"]:
      raise HFConversionError(
          f"encoder.sliding_window={enc['sliding_window']!r} differs from "
          f"decoder.sliding_window={dec['sliding_window']!r}: lm has one sliding_window")
    window = int(enc["sliding_window"])
  dropout = dropout_rate(hf_config, overrides)
  encoder_shape = {f"encoder_{lm}": int(enc[hf]) for hf, lm in _SHAPE_FIELDS.items()
                   if int(enc[hf]) != int(dec[hf])}
  kwargs = dict(
      vocab_size=int(enc["vocab_size"]),
      emb_dim=int(dec["hidden_size"]),
      num_heads=int(dec["num_attention_heads"]),
      num_kv_heads=int(dec["num_key_value_heads"]),
      head_dim=int(dec["head_dim"]),
      mlp_dim=int(dec["intermediate_size"]),
      **encoder_shape,
      num_encoder_layers=int(enc["num_hidden_layers"]),
      num_decoder_layers=int(dec["num_hidden_layers"]),
      mask_type="encoder_decoder",
      dropout_rate=dropout,
      mlp_activation="gated_gelu",
      position_encoding="rope",
      rope_max_wavelength=theta,
      norm_type="gemma_rmsnorm",
      norm_position="sandwich",
      tie_embeddings=bool(tie_embeddings),
      separate_encoder_embedding=bool(separate_encoder_embedding),
      tied_logits_scale=False,
      scale_embeddings=True,
      query_pre_attn_scalar=float(enc["query_pre_attn_scalar"]),
      attn_logit_softcapping=(None if enc["attn_logit_softcapping"] is None
                              else float(enc["attn_logit_softcapping"])),
      final_logit_softcapping=(None if dec["final_logit_softcapping"] is None
                               else float(dec["final_logit_softcapping"])),
      sliding_window=window,
      layer_pattern=pattern,
      dtype="float32",
  )
  return with_overrides(kwargs, overrides)


def _check_exportable(config: TransformerConfig) -> None:
  wanted = {"mask_type": "encoder_decoder", "position_encoding": "rope",
            "norm_type": "gemma_rmsnorm", "norm_position": "sandwich",
            "mlp_activation": "gated_gelu", "scale_embeddings": True,
            "shared_encoder_decoder": False, "cross_attention_rope": None,
            # T5Gemma 2's (which lm reads, hf_t5gemma2, and does not write)
            "merged_attention": False, "qk_norm": False, "rope_local_max_wavelength": None,
            "bidirectional_window": "symmetric", "eoi_id": None}
  problems = [f"{name}={getattr(config, name)!r} (T5Gemma has {value!r})"
              for name, value in wanted.items() if getattr(config, name) != value]
  if config.tie_embeddings and config.tied_logits_scale:
    problems.append("tie_embeddings with tied_logits_scale=True (T5Gemma's tied logits are "
                    "not scaled)")
  if problems:
    raise HFConversionError("cannot export to HF T5Gemma: " + "; ".join(problems))


def config_to_hf(config: TransformerConfig) -> dict[str, Any]:
  """HF ``T5GemmaConfig`` dict (config.json contents) for an exportable TransformerConfig.

  ``query_pre_attn_scalar=None`` (no logit scaling) is written as 1.0, which HF turns
  into the same scale 1.
  """
  _check_exportable(config)
  layers = {"encoder": config.num_encoder_layers, "decoder": config.num_decoder_layers}
  scalar = 1 if config.query_pre_attn_scalar is None else config.query_pre_attn_scalar
  if float(scalar).is_integer():  # transformers 5.x's config accepts only an int here
    scalar = int(scalar)

  shapes = {"encoder": config.encoder_config(), "decoder": config}

  def module(stack):
    shape = shapes[stack]
    cross = {"cross_attention_hidden_size": shapes["encoder"].emb_dim} if stack == "decoder" else {}
    return {
        "vocab_size": config.vocab_size,
        "hidden_size": shape.emb_dim,
        "intermediate_size": shape.mlp_dim,
        "num_hidden_layers": layers[stack],
        "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.resolved_num_kv_heads,
        "head_dim": shape.resolved_head_dim,
        **cross,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": _LM_EPSILON,
        "attention_bias": False,
        "attention_dropout": config.dropout_rate,
        "dropout_rate": config.dropout_rate,
        "query_pre_attn_scalar": scalar,
        "attn_logit_softcapping": config.attn_logit_softcapping,
        "final_logit_softcapping": config.final_logit_softcapping,
        "sliding_window": config.sliding_window,
        "layer_types": [_LAYER_TYPE_NAMES["L" if config.layer_kind(i) == "local" else "G"]
                        for i in range(layers[stack])],
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_max_wavelength},
        "is_decoder": stack == "decoder",
        "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
        "tie_word_embeddings": config.tie_embeddings,
        "model_type": "t5_gemma_module",
    }

  return {
      "architectures": ["T5GemmaForConditionalGeneration"],
      "model_type": "t5gemma",
      "encoder": module("encoder"),
      "decoder": module("decoder"),
      "is_encoder_decoder": True,
      "dropout_rate": config.dropout_rate,
      "attention_dropout": config.dropout_rate,
      "classifier_dropout_rate": 0.0,
      "tie_word_embeddings": config.tie_embeddings,
      "vocab_size": config.vocab_size,
      "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
      "dtype": "float32",
  }


# ---------------------------------------------------------------------------------------
# Tensor name tables.

_ATTENTION = (("q_proj", "query", "attn_query"), ("k_proj", "key", "attn_kv"),
              ("v_proj", "value", "attn_kv"), ("o_proj", "out", "attn_out"))
_NORMS = (("pre_self_attn_layernorm", "pre_self_attention_layer_norm"),
          ("post_self_attn_layernorm", "post_self_attention_layer_norm"),
          ("pre_feedforward_layernorm", "pre_mlp_layer_norm"),
          ("post_feedforward_layernorm", "post_mlp_layer_norm"))
_CROSS_NORMS = (("pre_cross_attn_layernorm", "pre_cross_attention_layer_norm"),
                ("post_cross_attn_layernorm", "post_cross_attention_layer_norm"))
_MLP = (("gate_proj", "wi_0", "mlp_in"), ("up_proj", "wi_1", "mlp_in"),
        ("down_proj", "wo", "mlp_out"))
EMBED_NAMES = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
HEAD_NAME = "lm_head.out_proj.weight"


def _table(config: TransformerConfig) -> dict[str, tuple[tuple[str, ...], str]]:
  """{HF name: (lm path, kind)} of every tensor but the embeddings and the head. An
  encoder tensor's kind is "enc:" + the kind (its stack's shape: config.encoder_config());
  the cross-attention's keys and values are "cross_kv" (read from the encoder's width)."""
  rows: dict[str, tuple[tuple[str, ...], str]] = {}
  for stack, num in (("encoder", config.num_encoder_layers), ("decoder", config.num_decoder_layers)):
    for i in range(num):
      p, q = f"model.{stack}.layers.{i}", (stack, f"layers_{i}")
      attentions = [("self_attn", "self_attention")]
      norms = list(_NORMS)
      if stack == "decoder":
        attentions.append(("cross_attn", "encoder_decoder_attention"))
        norms += list(_CROSS_NORMS)
      own = "enc:" if stack == "encoder" else ""
      for hf_attn, lm_attn in attentions:
        for hf, lm, kind in _ATTENTION:
          kind = "cross_kv" if hf_attn == "cross_attn" and kind == "attn_kv" else own + kind
          rows[f"{p}.{hf_attn}.{hf}.weight"] = (q + (lm_attn, lm), kind)
      for hf, lm in norms:
        rows[f"{p}.{hf}.weight"] = (q + (lm, "scale"), own + "norm")
      for hf, lm, kind in _MLP:
        rows[f"{p}.mlp.{hf}.weight"] = (q + ("mlp", lm), own + kind)
    rows[f"model.{stack}.norm.weight"] = ((stack, "final_norm", "scale"),
                                          ("enc:" if stack == "encoder" else "") + "norm")
  return rows


def _stack_shapes(config: TransformerConfig) -> dict[str, tuple[int, ...]]:
  d, n, k = config.emb_dim, config.num_heads, config.resolved_num_kv_heads
  h, f = config.resolved_head_dim, config.mlp_dim
  return {"attn_query": (n * h, d), "attn_kv": (k * h, d), "attn_out": (d, n * h),
          "norm": (d,), "mlp_in": (f, d), "mlp_out": (d, f), "embed": (config.vocab_size, d)}


def _hf_shapes(config: TransformerConfig) -> dict[str, tuple[int, ...]]:
  """HF shape of every tensor kind (`_table`): the decoder's, "enc:" the encoder's."""
  enc = config.encoder_config()
  shapes = _stack_shapes(config)
  shapes.update({"enc:" + kind: shape for kind, shape in _stack_shapes(enc).items()})
  shapes["cross_kv"] = (config.resolved_num_kv_heads * config.resolved_head_dim, enc.emb_dim)
  return shapes


def _kind_config(kind: str, config: TransformerConfig) -> tuple[str, TransformerConfig, int]:
  """(the kind without its stack, the stack's config, the width the tensor reads)."""
  if kind.startswith("enc:"):
    enc = config.encoder_config()
    return kind[4:], enc, enc.emb_dim
  if kind == "cross_kv":
    return "attn_kv", config, config.encoder_config().emb_dim
  return kind, config, config.emb_dim


def _hf_to_lm_tensor(x: np.ndarray, kind: str, config: TransformerConfig) -> np.ndarray:
  kind, config, d = _kind_config(kind, config)
  h = config.resolved_head_dim
  if kind == "attn_query":
    return x.T.reshape(d, config.num_heads, h)
  if kind == "attn_kv":
    return x.T.reshape(d, config.resolved_num_kv_heads, h)
  if kind == "attn_out":
    return x.T.reshape(config.num_heads, h, d)
  if kind in ("mlp_in", "mlp_out"):
    return x.T
  return x


def _lm_to_hf_tensor(x: np.ndarray, kind: str, config: TransformerConfig) -> np.ndarray:
  kind, _, d = _kind_config(kind, config)
  if kind in ("attn_query", "attn_kv"):
    return x.reshape(d, -1).T
  if kind == "attn_out":
    return x.reshape(-1, d).T
  if kind in ("mlp_in", "mlp_out"):
    return x.T
  return x


# ---------------------------------------------------------------------------------------
# Import.

def hf_to_lm(hf_config: Mapping[str, Any], tensors: Mapping[str, np.ndarray],
             **overrides) -> tuple[TransformerConfig, dict[str, Any]]:
  """Converts an HF T5Gemma config dict and its named tensors into lm's config and params.

  Args:
    hf_config: config.json contents of a T5GemmaForConditionalGeneration checkpoint.
    tensors: HF name -> array (any float dtype; cast to float32).
    **overrides: TransformerConfig fields (``scan_layers``, ``dtype``, ``dropout_rate``, ...).
  Returns:
    (config, params): a plain nested dict of float32 numpy arrays in the layout of
    ``Transformer(config).init(...)["params"]`` (unboxed), scanned when ``config.scan_layers``.
  Raises:
    HFConversionError: an unsupported config field (named), or unknown, missing or
      wrongly shaped tensors (named).
  """
  present_embeds = [k for k in EMBED_NAMES if k in tensors]
  if not present_embeds:
    raise HFConversionError(f"missing tensor(s): {' or '.join(EMBED_NAMES)}")
  embedding = np.asarray(tensors[present_embeds[-1]], np.float32)  # the decoder's, if present
  # T5Gemma trains the encoder's table apart from the decoder's: one lm table when they are
  # equal (a checkpoint saved with tied tables), two (separate_encoder_embedding) otherwise.
  encoder_embedding = None
  if len(present_embeds) == 2:
    enc = np.asarray(tensors[EMBED_NAMES[0]], np.float32)
    if enc.shape != embedding.shape or not np.array_equal(enc, embedding):
      encoder_embedding = enc
  head = tensors.get(HEAD_NAME)
  tied = head is None or (head.shape == embedding.shape
                          and np.array_equal(np.asarray(head, np.float32), embedding))
  if head is None and hf_config.get("tie_word_embeddings", True) is False:
    raise HFConversionError(f"missing tensor(s): {HEAD_NAME} (tie_word_embeddings is false)")
  if "separate_encoder_embedding" in overrides:
    raise HFConversionError("separate_encoder_embedding is decided by the tensors (the two "
                            "embed_tokens tables differ or not); do not override it")
  config = config_from_hf(hf_config, tie_embeddings=tied,
                          separate_encoder_embedding=encoder_embedding is not None, **overrides)

  shapes = _hf_shapes(config)
  expected = _table(config)
  present = set(tensors) - set(present_embeds) - {HEAD_NAME}
  unknown, missing = present - set(expected), set(expected) - present
  if unknown:
    raise HFConversionError(f"unknown tensor(s) for this T5Gemma config: {_format_names(unknown)}")
  if missing:
    raise HFConversionError(f"missing tensor(s): {_format_names(missing)}")
  want = {name: shapes[kind] for name, (_, kind) in expected.items()}
  want.update({name: shapes["enc:embed" if name == EMBED_NAMES[0] and encoder_embedding is not None
                            else "embed"] for name in present_embeds})
  if head is not None:
    want[HEAD_NAME] = shapes["embed"]
  bad = [f"{name} {tuple(tensors[name].shape)} != {want[name]}" for name in sorted(want)
         if tuple(tensors[name].shape) != want[name]]
  if bad:
    raise HFConversionError(f"shape mismatch: {_format_names(bad)}")

  params: dict[str, Any] = {"token_embedder": {"embedding": embedding}}
  if encoder_embedding is not None:
    params["encoder_token_embedder"] = {"embedding": encoder_embedding}
  if not tied:
    params["logits_dense"] = {"kernel": np.ascontiguousarray(np.asarray(head, np.float32).T)}
  for name, (path, kind) in expected.items():
    node = params
    for key in path[:-1]:
      node = node.setdefault(key, {})
    node[path[-1]] = np.ascontiguousarray(
        _hf_to_lm_tensor(np.asarray(tensors[name], np.float32), kind, config))
  if config.scan_layers:
    params = _to_numpy(unscanned_to_scan(params))
  return config, params


# ---------------------------------------------------------------------------------------
# Export.

def lm_to_hf(config: TransformerConfig, params: Mapping[str, Any]
             ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
  """Converts lm params of a T5Gemma-shaped config into an HF config dict and named tensors.

  Args:
    config: an exportable config (encoder-decoder, rope, gemma_rmsnorm, sandwich,
      gated_gelu, scale_embeddings; tied logits unscaled).
    params: boxed or plain, scanned or not, jax or numpy.
  Returns:
    (hf_config dict for config.json, {hf name: float32 array}); both embedding tables are
    written (the same array unless separate_encoder_embedding), ``lm_head.out_proj.weight``
    only when untied.
  Raises:
    HFConversionError: unsupported config, or params missing / extra / misshapen (named).
  """
  hf_config = config_to_hf(config)
  params = _to_numpy(scan_to_unscanned(_unbox(dict(params))))
  shapes = _hf_shapes(config)
  export = hf_t5.TensorExport(params, shapes, lambda x, kind: _lm_to_hf_tensor(x, kind, config))
  put, tensors = export.put, export.tensors

  encoder_table = ("encoder_token_embedder" if config.separate_encoder_embedding
                   else "token_embedder")
  put(EMBED_NAMES[0], (encoder_table, "embedding"),
      "enc:embed" if config.separate_encoder_embedding else "embed")
  put(EMBED_NAMES[1], ("token_embedder", "embedding"), "embed")
  if not config.tie_embeddings:
    tensors[HEAD_NAME] = np.ascontiguousarray(export.take(("logits_dense", "kernel")).T, np.float32)
    if tensors[HEAD_NAME].shape != shapes["embed"]:
      raise HFConversionError(f"shape mismatch: logits_dense/kernel "
                              f"{tensors[HEAD_NAME].shape[::-1]}")
  for name, (path, kind) in _table(config).items():
    put(name, path, kind)
  extra = export.unused()
  if extra:
    raise HFConversionError(f"params with no HF T5Gemma equivalent: {_format_names(extra)}")
  return hf_config, tensors


# ---------------------------------------------------------------------------------------
# I/O.

def load_hf_t5gemma(directory: str | os.PathLike, **overrides
                    ) -> tuple[TransformerConfig, dict[str, Any]]:
  """Reads an HF T5Gemma ``save_pretrained`` directory into lm's config and params.

  Args:
    directory: holds config.json and model.safetensors (or a sharded index).
    **overrides: TransformerConfig fields (``scan_layers=True``, ``dtype="bfloat16"``, ...).
  Returns:
    (TransformerConfig, plain nested dict of float32 numpy params); see ``hf_to_lm``.
  Raises:
    FileNotFoundError: no config.json or weights.
    HFConversionError (a ValueError): malformed files, or a checkpoint lm cannot represent
      (the message names the field or tensors).
  """
  hf_config = read_json(os.path.join(os.fspath(directory), CONFIG_NAME))
  return hf_to_lm(hf_config, read_safetensors(directory), **overrides)


def save_hf_t5gemma(directory: str | os.PathLike, config: TransformerConfig,
                    params: Mapping[str, Any]) -> None:
  """Writes lm params as an HF T5Gemma ``save_pretrained`` directory (config.json +
  model.safetensors, (over)written; the directory is created if needed)."""
  from safetensors.numpy import save_file
  hf_config, tensors = lm_to_hf(config, params)
  directory = os.fspath(directory)
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, CONFIG_NAME), "w") as f:
    json.dump(hf_config, f, indent=2, sort_keys=True)
  save_file(tensors, os.path.join(directory, WEIGHTS_NAME), metadata={"format": "pt"})


__all__ = ["config_from_hf", "config_to_hf", "eos_ids", "hf_to_lm", "lm_to_hf", "load_hf_t5gemma",
           "decoder_start_id",
           "save_hf_t5gemma", "EMBED_NAMES", "HEAD_NAME"]
