"""Hugging Face T5Gemma 2 checkpoints -> lm encoder-decoder params (NumPy + safetensors, no torch).

Reads the text model of ``transformers``' ``T5Gemma2ForConditionalGeneration``
``save_pretrained`` directories (``model_type: "t5gemma2"``): a top-level config holding an
``encoder`` (whose ``text_config`` is the text encoder; its ``vision_config`` a SigLIP tower)
and a ``decoder``. The vision tower and its projector are not read: lm takes text in.

    config, params = load_hf_t5gemma2("/ckpt/t5gemma-2-270m-270m")
    logits = Transformer(config).apply({"params": params}, batch)

T5Gemma 2 is T5Gemma (lm.checkpoint.hf_t5gemma, whose helpers this module uses) plus
Gemma 3's q/k norms and per-kind RoPE bases, merged decoder attention, one embedding table
for encoder, decoder and head, the encoder's centred window and an end-of-image embedding:
``TransformerConfig``'s qk_norm, rope_local_max_wavelength, merged_attention,
bidirectional_window and eoi_id. Writing T5Gemma 2 directories is not supported
(their checkpoints hold a vision tower lm has no part for). docs/checkpoints.md has the map.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from lm.checkpoint import hf_t5gemma
from lm.checkpoint.hf_t5 import (CONFIG_NAME, HFConversionError, _format_names, _to_numpy,
                                 read_json, read_safetensors)
from lm.model.transformer import TransformerConfig, unscanned_to_scan

MODEL_TYPE = "t5gemma2"
# T5Gemma2TextConfig / T5Gemma2DecoderConfig defaults (transformers 5.x), for omitted fields.
_TEXT_DEFAULTS = {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216,
                  "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                  "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
                  "rms_norm_eps": 1e-6, "attention_bias": False, "query_pre_attn_scalar": 256,
                  "sliding_window": 4096, "layer_types": None,
                  "final_logit_softcapping": None, "attn_logit_softcapping": None}
_DEFAULT_THETA = {"full_attention": 1_000_000.0, "sliding_attention": 10_000.0}
_SLIDING_PATTERN = 6  # HF's default layer_types: five sliding layers, then a full one
# Fields that must agree between the two stacks (lm has one of each).
_SHARED_FIELDS = hf_t5gemma._SHARED_FIELDS + ("sliding_window", "final_logit_softcapping")
# Checkpoint tensors lm does not read (the vision side of the encoder).
_IGNORED_PREFIXES = ("model.encoder.vision_tower.", "model.encoder.multi_modal_projector.")
_EMBED = "model.encoder.embed_tokens.weight"
_DECODER_EMBED = "model.decoder.embed_tokens.weight"
_EOI = "model.encoder.embed_tokens.eoi_embedding"
_DECODER_EOI = "model.decoder.embed_tokens.eoi_embedding"


def _text_config(hf_config: Mapping[str, Any], stack: str) -> dict[str, Any]:
  """A stack's text config with transformers' defaults filled in (``layer_types`` too)."""
  sub = hf_config.get(stack)
  if stack == "encoder" and isinstance(sub, Mapping):
    sub = sub.get("text_config", {})
  if not isinstance(sub, Mapping):
    raise HFConversionError(f"config.json has no {stack!r} text config (a t5gemma2 config holds "
                            "'encoder' with a 'text_config', and 'decoder')")
  out = dict(_TEXT_DEFAULTS)
  out.update(sub)
  if out["layer_types"] is None:
    out["layer_types"] = ["full_attention" if (i + 1) % _SLIDING_PATTERN == 0 else
                          "sliding_attention" for i in range(int(out["num_hidden_layers"]))]
  if len(out["layer_types"]) != int(out["num_hidden_layers"]):
    raise HFConversionError(f"{stack}.layer_types has {len(out['layer_types'])} entries for "
                            f"num_hidden_layers={out['num_hidden_layers']}")
  return out


def _rope_thetas(module: Mapping[str, Any], stack: str) -> dict[str, float]:
  """{layer type: RoPE base} of a text config (``rope_parameters`` per layer type)."""
  params = module.get("rope_parameters") or {}
  if not isinstance(params, Mapping):
    raise HFConversionError(f"{stack}.rope_parameters must be an object, got {params!r}")
  out = {}
  for kind, default in _DEFAULT_THETA.items():
    p = params.get(kind) or {}
    if p.get("rope_type", "default") != "default":
      raise HFConversionError(f"{stack}.rope_parameters.{kind}.rope_type={p['rope_type']!r} is "
                              "not supported (lm's RoPE is the default, unscaled one)")
    out[kind] = float(p.get("rope_theta", default))
  return out


def eoi_id(hf_config: Mapping[str, Any]) -> int:
  """The end-of-image token whose embedding is its own vector (256000 unless set)."""
  encoder = hf_config.get("encoder") or {}
  value = hf_config.get("eoi_token_index", encoder.get("eoi_token_index", 256_000))
  return int(value)


def config_from_hf(hf_config: Mapping[str, Any], **overrides) -> TransformerConfig:
  """TransformerConfig for an HF ``T5Gemma2Config`` dict (config.json contents).

  Raises:
    HFConversionError: a field lm cannot represent (the message names it).
  """
  if hf_config.get("model_type") != MODEL_TYPE:
    raise HFConversionError(f"model_type {hf_config.get('model_type')!r} is not T5Gemma 2 "
                            f"(expected {MODEL_TYPE!r})")
  enc, dec = _text_config(hf_config, "encoder"), _text_config(hf_config, "decoder")
  for name in _SHARED_FIELDS:
    if enc[name] != dec[name]:
      raise HFConversionError(
          f"encoder.text_config.{name}={enc[name]!r} differs from decoder.{name}="
          f"{dec[name]!r}: lm's encoder and decoder share {name}")
  if enc["hidden_size"] != dec["hidden_size"]:
    raise HFConversionError(f"encoder hidden_size {enc['hidden_size']} differs from the "
                            f"decoder's {dec['hidden_size']}: merged attention projects both "
                            "with the decoder's kernels")
  hf_t5gemma.check_gemma_block(enc)
  thetas = _rope_thetas(enc, "encoder")
  if _rope_thetas(dec, "decoder") != thetas:
    raise HFConversionError(f"decoder.rope_parameters {_rope_thetas(dec, 'decoder')} differ from "
                            f"the encoder's {thetas}: lm's stacks share their RoPE bases")
  pattern = hf_t5gemma._layer_pattern(enc["layer_types"], dec["layer_types"])
  local = pattern is not None
  dropout = hf_t5gemma.dropout_rate(hf_config, overrides)
  eoi = eoi_id(hf_config)
  if not 0 < eoi < int(enc["vocab_size"]):
    raise HFConversionError(f"eoi_token_index={eoi} is outside the vocabulary "
                            f"({enc['vocab_size']} ids)")
  encoder_shape = {f"encoder_{lm}": int(enc[hf]) for hf, lm in hf_t5gemma._SHAPE_FIELDS.items()
                   if int(enc[hf]) != int(dec[hf])}
  softcap = {name: None if dec[name] is None else float(dec[name])
             for name in ("attn_logit_softcapping", "final_logit_softcapping")}
  kwargs = dict(
      vocab_size=int(enc["vocab_size"]), emb_dim=int(dec["hidden_size"]),
      num_heads=int(dec["num_attention_heads"]), num_kv_heads=int(dec["num_key_value_heads"]),
      head_dim=int(dec["head_dim"]), mlp_dim=int(dec["intermediate_size"]), **encoder_shape,
      num_encoder_layers=int(enc["num_hidden_layers"]),
      num_decoder_layers=int(dec["num_hidden_layers"]), mask_type="encoder_decoder",
      dropout_rate=dropout, mlp_activation="gated_gelu", position_encoding="rope",
      rope_max_wavelength=thetas["full_attention"],
      rope_local_max_wavelength=thetas["sliding_attention"] if local else None,
      norm_type="gemma_rmsnorm", norm_position="sandwich", tie_embeddings=True,
      tied_logits_scale=False, scale_embeddings=True,
      query_pre_attn_scalar=float(enc["query_pre_attn_scalar"]), **softcap,
      sliding_window=int(enc["sliding_window"]) if local else None, layer_pattern=pattern,
      qk_norm=True, merged_attention=True, bidirectional_window="centred", eoi_id=eoi,
      dtype="float32")
  return hf_t5gemma.with_overrides(kwargs, overrides)


def _table(config: TransformerConfig) -> dict[str, tuple[tuple[str, ...], str]]:
  """{HF name: (lm path, kind)} of every layer and final-norm tensor (kinds as in
  hf_t5gemma; "qk_norm" for the per-head norms)."""
  rows: dict[str, tuple[tuple[str, ...], str]] = {}
  for stack, num in (("encoder", config.num_encoder_layers), ("decoder", config.num_decoder_layers)):
    own = "enc:" if stack == "encoder" else ""
    for i in range(num):
      p, q = f"model.{stack}.layers.{i}", (stack, f"layers_{i}", "self_attention")
      for hf, lm, kind in hf_t5gemma._ATTENTION:
        rows[f"{p}.self_attn.{hf}.weight"] = (q + (lm,), own + kind)
      for hf, lm in (("q_norm", "query_norm"), ("k_norm", "key_norm")):
        rows[f"{p}.self_attn.{hf}.weight"] = (q + (lm, "scale"), own + "qk_norm")
      for hf, lm in hf_t5gemma._NORMS:
        rows[f"{p}.{hf}.weight"] = ((stack, f"layers_{i}", lm, "scale"), own + "norm")
      for hf, lm, kind in hf_t5gemma._MLP:
        rows[f"{p}.mlp.{hf}.weight"] = ((stack, f"layers_{i}", "mlp", lm), own + kind)
    rows[f"model.{stack}.norm.weight"] = ((stack, "final_norm", "scale"), own + "norm")
  return rows


def _text_tensors(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """The text model's tensors under one naming: ``model.encoder.text_model.X`` (the
  in-memory module names) read as ``model.encoder.X`` (what save_pretrained writes); the
  vision tower's and projector's left out."""
  out = {}
  for name, x in tensors.items():
    name = name.replace("model.encoder.text_model.", "model.encoder.", 1)
    if not name.startswith(_IGNORED_PREFIXES):
      out[name] = x
  return out


def _same(tensors, a: str, b: str, what: str) -> None:
  if b in tensors and not (tensors[a].shape == tensors[b].shape
                           and np.array_equal(np.asarray(tensors[a], np.float32),
                                              np.asarray(tensors[b], np.float32))):
    raise HFConversionError(f"{b} differs from {a}: T5Gemma 2 shares {what} between encoder "
                            "and decoder, which is what lm represents")


def hf_to_lm(hf_config: Mapping[str, Any], tensors: Mapping[str, np.ndarray],
             **overrides) -> tuple[TransformerConfig, dict[str, Any]]:
  """Converts an HF T5Gemma 2 config dict and its named tensors into lm's config and params.

  Args:
    hf_config: config.json contents of a T5Gemma2ForConditionalGeneration checkpoint.
    tensors: HF name -> array (any float dtype; cast to float32); vision tensors ignored.
    **overrides: TransformerConfig fields (``scan_layers``, ``dtype``, ``dropout_rate``, ...).
  Returns:
    (config, params): a plain nested dict of float32 numpy arrays in the layout of
    ``Transformer(config).init(...)["params"]`` (unboxed), scanned when ``config.scan_layers``.
  Raises:
    HFConversionError: an unsupported config field (named), or unknown, missing, wrongly
      shaped or untied tensors (named).
  """
  config = config_from_hf(hf_config, **overrides)
  tensors = _text_tensors(tensors)
  for name in (_EMBED, _EOI):
    if name not in tensors:
      raise HFConversionError(f"missing tensor(s): {name}")
  _same(tensors, _EMBED, _DECODER_EMBED, "the embedding table")
  _same(tensors, _EOI, _DECODER_EOI, "the end-of-image embedding")
  _same(tensors, _EMBED, hf_t5gemma.HEAD_NAME, "the table with the output head")
  shapes = hf_t5gemma._hf_shapes(config)
  shapes["qk_norm"] = (config.resolved_head_dim,)
  shapes["enc:qk_norm"] = (config.encoder_config().resolved_head_dim,)
  expected = _table(config)
  present = set(tensors) - {_EMBED, _DECODER_EMBED, _EOI, _DECODER_EOI, hf_t5gemma.HEAD_NAME}
  unknown, missing = present - set(expected), set(expected) - present
  if unknown:
    raise HFConversionError(f"unknown tensor(s) for this T5Gemma 2 config: {_format_names(unknown)}")
  if missing:
    raise HFConversionError(f"missing tensor(s): {_format_names(missing)}")
  want = {name: shapes[kind] for name, (_, kind) in expected.items()}
  want.update({_EMBED: shapes["embed"], _EOI: (config.emb_dim,)})
  bad = [f"{name} {tuple(tensors[name].shape)} != {want[name]}" for name in sorted(want)
         if tuple(tensors[name].shape) != want[name]]
  if bad:
    raise HFConversionError(f"shape mismatch: {_format_names(bad)}")
  params: dict[str, Any] = {"token_embedder": {
      "embedding": np.asarray(tensors[_EMBED], np.float32),
      "eoi_embedding": np.asarray(tensors[_EOI], np.float32)}}
  for name, (path, kind) in expected.items():
    node = params
    for key in path[:-1]:
      node = node.setdefault(key, {})
    node[path[-1]] = np.ascontiguousarray(
        hf_t5gemma._hf_to_lm_tensor(np.asarray(tensors[name], np.float32), kind, config))
  if config.scan_layers:
    params = _to_numpy(unscanned_to_scan(params))
  return config, params


def load_hf_t5gemma2(directory: str | os.PathLike, **overrides
                     ) -> tuple[TransformerConfig, dict[str, Any]]:
  """Reads an HF T5Gemma 2 ``save_pretrained`` directory into lm's config and params
  (``hf_to_lm``; FileNotFoundError without config.json or weights)."""
  hf_config = read_json(os.path.join(os.fspath(directory), CONFIG_NAME))
  return hf_to_lm(hf_config, read_safetensors(directory), **overrides)


__all__ = ["MODEL_TYPE", "config_from_hf", "eoi_id", "hf_to_lm", "load_hf_t5gemma2"]
