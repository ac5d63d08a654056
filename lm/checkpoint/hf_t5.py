"""Hugging Face T5 checkpoints <-> lm encoder-decoder params (NumPy + safetensors, no torch).

Reads and writes ``transformers``' ``save_pretrained`` directories of
``T5ForConditionalGeneration`` (T5.1.0, T5.1.1, flan-t5, ...).

    config, params = load_hf_t5("/ckpt/t5-v1_1-small", scan_layers=True)
    save_hf_t5("/out/dir", config, params)   # transformers.from_pretrained("/out/dir") works

The pure halves are ``hf_to_lm`` and ``lm_to_hf``; ``load_hf_t5`` and ``save_hf_t5`` do the
I/O. T5Gemma is hf_t5gemma.py, the choice by ``model_type`` hf.py. The name mapping and the
conventions (logit scaling, relative bias, tied logits, activations, epsilon, masks):
docs/evaluation.md, 'Hugging Face T5 checkpoints'.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Mapping

import jax
import numpy as np

from lm.keypaths import path_names
from lm.model.transformer_config import ADDED_FIELDS
from lm.model.transformer import TransformerConfig, scan_to_unscanned, unscanned_to_scan

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"

# HF feed_forward_proj -> lm mlp_activation (see module docstring for why others are refused).
HF_TO_LM_ACTIVATION = {"relu": "relu", "gated-gelu": "gated_gelu",
                       "gated-silu": "swiglu", "gelu_new": "gelu", "gated-gelu_new": "gated_gelu"}
LM_TO_HF_ACTIVATION = {"relu": "relu", "gated_gelu": "gated-gelu", "swiglu": "gated-silu",
                       "gelu": "gelu_new"}
_IGNORED = ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",)
_LM_EPSILON = 1e-6


class HFConversionError(ValueError):
  """A checkpoint or param tree that cannot be converted; the message names the culprits."""


# ---------------------------------------------------------------------------------------
# Config.

def config_from_hf(hf_config: Mapping[str, Any], *, tie_embeddings: bool,
                   tied_logits_scale: bool = True, **overrides) -> TransformerConfig:
  """TransformerConfig for an HF ``T5Config`` dict (config.json contents).

  Args:
    hf_config: the parsed config.json.
    tie_embeddings: whether the checkpoint's head is the shared embedding (decided from
      the tensors by ``hf_to_lm``).
    tied_logits_scale: the d_model**-0.5 factor on tied logits.
    **overrides: other TransformerConfig fields (``dtype``, ``scan_layers``, ...).
  Returns:
    The TransformerConfig (dtype defaults to "float32" unless overridden).
  Raises:
    HFConversionError: unsupported model type, activation or layer-norm epsilon.
  """
  model_type = hf_config.get("model_type", "t5")
  if model_type not in ("t5",):
    raise HFConversionError(f"model_type {model_type!r} is not T5 (expected 't5')")
  if not hf_config.get("is_encoder_decoder", True):
    raise HFConversionError("only encoder-decoder T5 checkpoints are supported (is_encoder_decoder=False)")
  proj = hf_config.get("feed_forward_proj", "relu")
  activation = HF_TO_LM_ACTIVATION.get(proj)
  if activation is None:
    raise HFConversionError(
        f"feed_forward_proj {proj!r} has no lm equivalent; supported: "
        f"{sorted(k for k, v in HF_TO_LM_ACTIVATION.items() if v)}")
  # lm frames T5 as T5 did: pad 0, the decoder started at 0 (converters.T5_FRAMING).
  for field, want in (("pad_token_id", 0), ("decoder_start_token_id", 0)):
    got = hf_config.get(field)
    if got is not None and int(got) != want:
      raise HFConversionError(f"{field} {got} is not T5's {want}: lm pads and starts the "
                              "decoder at 0, so this checkpoint would be fed the wrong tokens")
  eps = float(hf_config.get("layer_norm_epsilon", 1e-6))
  if not np.isclose(eps, _LM_EPSILON, rtol=1e-6, atol=0.0):
    raise HFConversionError(f"layer_norm_epsilon {eps} is not supported (lm's RMSNorm uses {_LM_EPSILON})")
  num_layers = int(hf_config.get("num_layers", 6))
  num_decoder_layers = hf_config.get("num_decoder_layers")
  kwargs = dict(
      vocab_size=int(hf_config.get("vocab_size", 32128)),
      emb_dim=int(hf_config.get("d_model", 512)),
      num_heads=int(hf_config.get("num_heads", 8)),
      head_dim=int(hf_config.get("d_kv", 64)),
      mlp_dim=int(hf_config.get("d_ff", 2048)),
      num_encoder_layers=num_layers,
      num_decoder_layers=int(num_layers if num_decoder_layers is None else num_decoder_layers),
      mask_type="encoder_decoder",
      dropout_rate=float(hf_config.get("dropout_rate", 0.1)),
      mlp_activation=activation,
      position_encoding="t5_relative",
      relative_num_buckets=int(hf_config.get("relative_attention_num_buckets", 32)),
      relative_max_distance=int(hf_config.get("relative_attention_max_distance", 128)),
      norm_type="rmsnorm",
      norm_position="pre",
      tie_embeddings=bool(tie_embeddings),
      tied_logits_scale=bool(tied_logits_scale),
      dtype="float32",
  )
  unknown = sorted(set(overrides) - set(TransformerConfig.__dataclass_fields__))
  if unknown:
    raise HFConversionError(f"unknown TransformerConfig field(s) {unknown}")
  kwargs.update(overrides)
  return TransformerConfig(**kwargs)


def _check_exportable(config: TransformerConfig) -> None:
  problems = []
  if not config.is_encoder_decoder:
    problems.append(f"mask_type={config.mask_type!r} (HF T5 is encoder-decoder)")
  if config.position_encoding != "t5_relative":
    problems.append(f"position_encoding={config.position_encoding!r} (HF T5 needs t5_relative)")
  if config.norm_type != "rmsnorm" or config.norm_position != "pre":
    problems.append(f"norm {config.norm_type}/{config.norm_position} (HF T5 needs rmsnorm/pre)")
  if config.mlp_activation not in LM_TO_HF_ACTIVATION:
    problems.append(f"mlp_activation={config.mlp_activation!r}")
  for name, default in ADDED_FIELDS.items():  # architecture knobs HF T5 does not have
    if getattr(config, name) != default:
      problems.append(f"{name}={getattr(config, name)!r} (HF T5 has {default!r})")
  if problems:
    raise HFConversionError("cannot export to HF T5: " + "; ".join(problems))


def config_to_hf(config: TransformerConfig) -> dict[str, Any]:
  """HF ``T5Config`` dict (config.json contents) for an exportable TransformerConfig.

  The head is written tied only for ``tie_embeddings and tied_logits_scale`` (the one
  tied form HF has); a tied head without the scale is exported as an untied copy.
  """
  _check_exportable(config)
  tied = config.tie_embeddings and config.tied_logits_scale
  return {
      "architectures": ["T5ForConditionalGeneration"],
      "model_type": "t5",
      "vocab_size": config.vocab_size,
      "d_model": config.emb_dim,
      "d_kv": config.resolved_head_dim,
      "d_ff": config.mlp_dim,
      "num_layers": config.num_encoder_layers,
      "num_decoder_layers": config.num_decoder_layers,
      "num_heads": config.num_heads,
      "relative_attention_num_buckets": config.relative_num_buckets,
      "relative_attention_max_distance": config.relative_max_distance,
      "dropout_rate": config.dropout_rate,
      "layer_norm_epsilon": _LM_EPSILON,
      "initializer_factor": 1.0,
      "feed_forward_proj": LM_TO_HF_ACTIVATION[config.mlp_activation],
      "is_encoder_decoder": True,
      "use_cache": True,
      "pad_token_id": 0,
      "eos_token_id": 1,
      "decoder_start_token_id": 0,
      # transformers 4.x reads the tie/scale from tie_word_embeddings, 5.x from
      # scale_decoder_outputs (and ties only when lm_head.weight is absent).
      "tie_word_embeddings": tied,
      "scale_decoder_outputs": tied,
      "torch_dtype": "float32",
  }


# ---------------------------------------------------------------------------------------
# Tensor name tables.

def _attention_names(prefix: str) -> dict[str, str]:
  return {f"{prefix}.{hf}.weight": lm for hf, lm in
          (("q", "query"), ("k", "key"), ("v", "value"), ("o", "out"))}


def _mlp_names(activation: str) -> tuple[str, ...]:
  return ("wi_0", "wi_1", "wo") if activation in ("gated_gelu", "swiglu") else ("wi", "wo")


def _layer_table(stack: str, i: int, activation: str) -> list[tuple[str, tuple[str, ...], str]]:
  """[(hf name, lm path inside the layer, kind)] for one block of ``stack``."""
  p = f"{stack}.block.{i}.layer"
  rows = [(hf, ("self_attention", lm), "attn_" + lm) for hf, lm in
          _attention_names(f"{p}.0.SelfAttention").items()]
  rows.append((f"{p}.0.layer_norm.weight", ("pre_self_attention_layer_norm", "scale"), "norm"))
  mlp_layer = 1
  if stack == "decoder":
    rows += [(hf, ("encoder_decoder_attention", lm), "attn_" + lm) for hf, lm in
             _attention_names(f"{p}.1.EncDecAttention").items()]
    rows.append((f"{p}.1.layer_norm.weight", ("pre_cross_attention_layer_norm", "scale"), "norm"))
    mlp_layer = 2
  rows += [(f"{p}.{mlp_layer}.DenseReluDense.{w}.weight", ("mlp", w), "mlp_" + ("out" if w == "wo" else "in"))
           for w in _mlp_names(activation)]
  rows.append((f"{p}.{mlp_layer}.layer_norm.weight", ("pre_mlp_layer_norm", "scale"), "norm"))
  return rows


def _hf_shapes(config: TransformerConfig) -> dict[str, tuple[int, ...]]:
  """The HF tensor shapes by kind."""
  d, n, h, f = config.emb_dim, config.num_heads, config.resolved_head_dim, config.mlp_dim
  return {"attn_query": (n * h, d), "attn_key": (n * h, d), "attn_value": (n * h, d),
          "attn_out": (d, n * h), "norm": (d,), "mlp_in": (f, d), "mlp_out": (d, f),
          "relpos": (config.relative_num_buckets, n), "embed": (config.vocab_size, d)}


def _hf_to_lm_tensor(x: np.ndarray, kind: str, config: TransformerConfig) -> np.ndarray:
  d, n, h = config.emb_dim, config.num_heads, config.resolved_head_dim
  if kind in ("attn_query", "attn_key", "attn_value"):
    return x.T.reshape(d, n, h)
  if kind == "attn_out":
    return x.T.reshape(n, h, d)
  if kind in ("mlp_in", "mlp_out", "relpos"):
    return x.T
  return x


def _lm_to_hf_tensor(x: np.ndarray, kind: str, config: TransformerConfig) -> np.ndarray:
  d, n, h = config.emb_dim, config.num_heads, config.resolved_head_dim
  if kind in ("attn_query", "attn_key", "attn_value"):
    return x.reshape(d, n * h).T
  if kind == "attn_out":
    return x.reshape(n * h, d).T
  if kind in ("mlp_in", "mlp_out", "relpos"):
    return x.T
  return x


def _stacks(config: TransformerConfig):
  return (("encoder", config.num_encoder_layers), ("decoder", config.num_decoder_layers))


def _format_names(names, limit: int = 8) -> str:
  names = sorted(names)
  more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
  return ", ".join(names[:limit]) + more


# ---------------------------------------------------------------------------------------
# Import.

def hf_to_lm(hf_config: Mapping[str, Any], tensors: Mapping[str, np.ndarray],
             **overrides) -> tuple[TransformerConfig, dict[str, Any]]:
  """Converts an HF T5 config dict and its named tensors into lm's config and params.

  Args:
    hf_config: config.json contents of a T5ForConditionalGeneration checkpoint.
    tensors: HF name -> array (any float dtype; cast to float32).
    **overrides: TransformerConfig fields to set (``scan_layers``, ``dtype``,
      ``remat_policy``, ``dropout_rate``, ...). Defaults: dtype "float32", unscanned.
  Returns:
    (config, params): params is a plain nested dict of float32 numpy arrays in the
    layout of ``Transformer(config).init(...)["params"]`` (unboxed), scanned when
    ``config.scan_layers``. Pass it as ``model.apply({"params": params}, batch)``.
  Raises:
    HFConversionError: unknown, missing or wrongly shaped tensors (named), or an
      unsupported config.
  """
  tensors = {k: v for k, v in tensors.items() if k not in _IGNORED}
  # The token embedding may be stored under any of the three tied names.
  embed_names = [k for k in ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
                 if k in tensors]
  if not embed_names:
    raise HFConversionError("missing tensor(s): shared.weight (or encoder/decoder.embed_tokens.weight)")
  embedding = np.asarray(tensors[embed_names[0]], np.float32)
  differing = [k for k in embed_names[1:] if tensors[k].shape != embedding.shape
               or not np.array_equal(np.asarray(tensors[k], np.float32), embedding)]
  if differing:
    raise HFConversionError(f"token embeddings differ from {embed_names[0]}: {_format_names(differing)} "
                            "(lm has one shared token embedding)")
  head = tensors.get("lm_head.weight")
  tied = head is None or (head.shape == embedding.shape
                          and np.array_equal(np.asarray(head, np.float32), embedding))
  if "scale_decoder_outputs" in hf_config:
    scale = bool(hf_config["scale_decoder_outputs"])
  else:
    scale = hf_config.get("tie_word_embeddings", True) is not False
  if tied:
    config = config_from_hf(hf_config, tie_embeddings=True, tied_logits_scale=scale, **overrides)
  else:
    config = config_from_hf(hf_config, tie_embeddings=False, **overrides)

  shapes = _hf_shapes(config)
  expected: dict[str, tuple[tuple[str, ...], str]] = {}  # hf name -> (lm path, kind)
  for stack, num in _stacks(config):
    expected[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = (
        (stack, "relpos_bias", "rel_embedding"), "relpos")
    expected[f"{stack}.final_layer_norm.weight"] = ((stack, "final_norm", "scale"), "norm")
    for i in range(num):
      for hf, path, kind in _layer_table(stack, i, config.mlp_activation):
        expected[hf] = ((stack, f"layers_{i}") + path, kind)
  if not tied:
    expected["lm_head.weight"] = (("logits_dense", "kernel"), "embed")

  present = set(tensors) - set(embed_names)
  if tied:
    present.discard("lm_head.weight")  # equal to the embedding: nothing more to load
  unknown = present - set(expected)
  missing = set(expected) - present
  if unknown:
    raise HFConversionError(f"unknown tensor(s) for this T5 config: {_format_names(unknown)}")
  if missing:
    raise HFConversionError(f"missing tensor(s): {_format_names(missing)}")
  expected_shapes = {name: shapes[kind] for name, (_, kind) in expected.items()}
  expected_shapes[embed_names[0]] = shapes["embed"]
  bad = [f"{name} {tuple(tensors[name].shape)} != {expected_shapes[name]}"
         for name in sorted(expected_shapes) if tuple(tensors[name].shape) != expected_shapes[name]]
  if bad:
    raise HFConversionError(f"shape mismatch: {_format_names(bad)}")

  params: dict[str, Any] = {"token_embedder": {"embedding": embedding}}
  for name, (path, kind) in expected.items():
    value = _hf_to_lm_tensor(np.asarray(tensors[name], np.float32), kind, config)
    if name == "lm_head.weight":
      value = value.T
      if scale:  # untied head that HF still rescales: fold the factor into the kernel
        value = value * np.float32(config.emb_dim ** -0.5)
    node = params
    for key in path[:-1]:
      node = node.setdefault(key, {})
    node[path[-1]] = np.ascontiguousarray(value)
  if config.scan_layers:
    params = unscanned_to_scan(params)
    params = _to_numpy(params)
  return config, params


def _to_numpy(tree):
  if isinstance(tree, Mapping):
    return {k: _to_numpy(v) for k, v in tree.items()}
  return np.asarray(tree, np.float32)


# ---------------------------------------------------------------------------------------
# Export.

def _unbox(tree):
  """Plain nested dict of float32 numpy arrays from a (possibly boxed / frozen) param tree."""
  if isinstance(tree, Mapping):
    return {k: _unbox(v) for k, v in tree.items()}
  value = getattr(tree, "value", tree)  # nn.LogicallyPartitioned and other boxes
  return np.asarray(value, np.float32)


class TensorExport:
  """An lm param tree read into HF tensors: `put` converts one param (recording its path),
  `unused` names the params no `put` or `take` read (an export must use them all).

  Attributes:
    tensors: {hf name: float32 array}, filled by `put`.
  """

  def __init__(self, params: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]],
               to_hf: Callable[[np.ndarray, str], np.ndarray]):
    """params: plain unscanned numpy params; shapes: {kind: HF shape}; to_hf(x, kind)."""
    self._params, self._shapes, self._to_hf = params, shapes, to_hf
    self.used: set[tuple[str, ...]] = set()
    self.tensors: dict[str, np.ndarray] = {}

  def take(self, path: tuple[str, ...]) -> np.ndarray:
    """The param at `path`, recorded as used; HFConversionError naming a missing one."""
    node = self._params
    for key in path:
      if not isinstance(node, Mapping) or key not in node:
        raise HFConversionError(f"params are missing {'/'.join(path)}")
      node = node[key]
    self.used.add(path)
    return node

  def put(self, name: str, path: tuple[str, ...], kind: str) -> None:
    """tensors[name] = the param at `path` in HF layout, checked against shapes[kind]."""
    value = self._to_hf(self.take(path), kind)
    if tuple(value.shape) != self._shapes[kind]:
      raise HFConversionError(f"shape mismatch: {'/'.join(path)} gives {name} "
                              f"{tuple(value.shape)} != {self._shapes[kind]}")
    self.tensors[name] = np.ascontiguousarray(value, np.float32)

  def unused(self, params: Mapping[str, Any] | None = None) -> list[str]:
    """"a/b/c" of every leaf of `params` (default: all) that was not read."""
    tree = self._params if params is None else params
    leaf_paths = (path_names(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0])
    return ["/".join(p) for p in leaf_paths if p not in self.used]


def lm_to_hf(config: TransformerConfig, params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
  """Converts lm encoder-decoder params into an HF T5 config dict and named tensors.

  Args:
    config: an exportable config (encoder-decoder, t5_relative, pre-RMSNorm, relu /
      gated_gelu / swiglu / gelu MLP); shared_encoder_decoder is exported by copying the
      decoder's weights into the HF encoder.
    params: the model's params, boxed or plain, scanned or not, jax or numpy.
  Returns:
    (hf_config dict for config.json, {hf name: float32 array}).
  Raises:
    HFConversionError: unsupported config, or params missing / with unexpected entries
      or shapes (named).
  """
  hf_config = config_to_hf(config)
  params = _unbox(dict(params))
  params = _to_numpy(scan_to_unscanned(params))
  if config.shared_encoder_decoder:
    if "encoder" in params:
      raise HFConversionError("shared_encoder_decoder params must not have an 'encoder' subtree")
    dec = params.get("decoder", {})
    enc = {k: v for k, v in dec.items()}
    for k in list(enc):
      if k.startswith("layers_"):
        enc[k] = {n: v for n, v in enc[k].items()
                  if n not in ("encoder_decoder_attention", "pre_cross_attention_layer_norm")}
    params = dict(params, encoder=enc)

  shapes = _hf_shapes(config)
  export = TensorExport(params, shapes, lambda x, kind: _lm_to_hf_tensor(x, kind, config))
  put, tensors = export.put, export.tensors
  put("shared.weight", ("token_embedder", "embedding"), "embed")
  for stack, num in _stacks(config):
    put(f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
        (stack, "relpos_bias", "rel_embedding"), "relpos")
    put(f"{stack}.final_layer_norm.weight", (stack, "final_norm", "scale"), "norm")
    for i in range(num):
      for hf, path, kind in _layer_table(stack, i, config.mlp_activation):
        put(hf, (stack, f"layers_{i}") + path, kind)
  if not config.tie_embeddings:
    tensors["lm_head.weight"] = np.ascontiguousarray(export.take(("logits_dense", "kernel")).T)
    if tensors["lm_head.weight"].shape != shapes["embed"]:
      raise HFConversionError(f"shape mismatch: logits_dense/kernel {tensors['lm_head.weight'].shape[::-1]}")
  elif not config.tied_logits_scale:
    tensors["lm_head.weight"] = tensors["shared.weight"].copy()  # tied without the scale

  source = params
  if config.shared_encoder_decoder:  # (the copied encoder was read; the decoder must be too)
    source = {k: v for k, v in params.items() if k != "encoder"}
  extra = export.unused(source)
  if extra:
    raise HFConversionError(f"params with no HF T5 equivalent: {_format_names(extra)}")
  return hf_config, tensors


# ---------------------------------------------------------------------------------------
# I/O.

def read_json(path: str) -> dict[str, Any]:
  """A JSON object file (config.json, the shard index); HFConversionError naming the file
  when it is not one (e.g. truncated by an interrupted download)."""
  try:
    with open(path, encoding="utf-8") as f:
      value = json.load(f)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise HFConversionError(f"{path} is not valid JSON ({e}); is it truncated (an interrupted "
                            "download or copy)? Download or save it again.") from None
  if not isinstance(value, dict):
    raise HFConversionError(f"{path} holds a JSON {type(value).__name__}, not an object; is it "
                            "a transformers save_pretrained file?")
  return value


def _load_safetensors(path: str) -> dict[str, np.ndarray]:
  """One safetensors file; HFConversionError naming it when it cannot be read."""
  from safetensors.numpy import load_file
  try:
    return dict(load_file(path))
  except OSError:
    raise
  except Exception as e:  # noqa: BLE001 - safetensors' SafetensorError is no ValueError
    raise HFConversionError(
        f"{path} is not a readable safetensors file ({type(e).__name__}: {e}); is it "
        "truncated (an interrupted download or copy)? Download or save it again.") from None


def read_safetensors(directory: str | os.PathLike) -> dict[str, np.ndarray]:
  """All tensors of a save_pretrained directory as NumPy arrays (single file or sharded).

  Raises:
    FileNotFoundError: no weights file (or a shard the index names is missing).
    HFConversionError: a file that cannot be read (truncated, not safetensors / JSON).
  """
  directory = os.fspath(directory)
  single = os.path.join(directory, WEIGHTS_NAME)
  index = os.path.join(directory, INDEX_NAME)
  if os.path.exists(single):
    return _load_safetensors(single)
  if os.path.exists(index):
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict):
      raise HFConversionError(f"{index} has no 'weight_map' object.")
    tensors: dict[str, np.ndarray] = {}
    for shard in sorted(set(weight_map.values())):
      loaded = _load_safetensors(os.path.join(directory, shard))
      tensors.update({k: v for k, v in loaded.items() if weight_map.get(k) == shard})
    missing = set(weight_map) - set(tensors)
    if missing:
      raise HFConversionError(f"tensors listed in {INDEX_NAME} but not in their shard: {_format_names(missing)}")
    return tensors
  raise FileNotFoundError(f"no {WEIGHTS_NAME} or {INDEX_NAME} in {directory} "
                          "(PyTorch .bin checkpoints are not supported; re-save with safetensors)")


def load_hf_t5(directory: str | os.PathLike, **overrides) -> tuple[TransformerConfig, dict[str, Any]]:
  """Reads an HF T5 ``save_pretrained`` directory into lm's config and params.

  Args:
    directory: holds config.json and model.safetensors (or a sharded index).
    **overrides: TransformerConfig fields (``scan_layers=True``, ``dtype="bfloat16"``, ...).
  Returns:
    (TransformerConfig, plain nested dict of float32 numpy params); see ``hf_to_lm``.
  Raises:
    FileNotFoundError: no config.json or weights.
    HFConversionError (a ValueError): a truncated or malformed config.json or weights
      file (the message names it), or a checkpoint lm cannot represent.
  """
  hf_config = read_json(os.path.join(os.fspath(directory), CONFIG_NAME))
  return hf_to_lm(hf_config, read_safetensors(directory), **overrides)


def save_hf_t5(directory: str | os.PathLike, config: TransformerConfig, params: Mapping[str, Any]) -> None:
  """Writes lm encoder-decoder params as an HF T5 ``save_pretrained`` directory.

  Args:
    directory: created if needed; config.json and model.safetensors are (over)written.
    config: the model config (see ``lm_to_hf`` for what is exportable).
    params: boxed or plain, scanned or unscanned params.
  """
  from safetensors.numpy import save_file
  hf_config, tensors = lm_to_hf(config, params)
  directory = os.fspath(directory)
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, CONFIG_NAME), "w") as f:
    json.dump(hf_config, f, indent=2, sort_keys=True)
  save_file(tensors, os.path.join(directory, WEIGHTS_NAME), metadata={"format": "pt"})


def main(argv=None) -> None:
  """Command line: ``python -m lm.checkpoint.hf_t5 inspect SRC`` prints the lm config and
  parameter count of an HF T5 directory; ``roundtrip SRC DST`` also exports it to DST.
  """
  import argparse
  from lm import libtpu_env  # pylint: disable=g-import-not-at-top
  libtpu_env.quiet_libtpu_off_tpu()
  parser = argparse.ArgumentParser(prog="python -m lm.checkpoint.hf_t5", description=main.__doc__)
  parser.add_argument("command", choices=["inspect", "roundtrip"])
  parser.add_argument("src", help="HF save_pretrained directory")
  parser.add_argument("dst", nargs="?", help="output directory (roundtrip)")
  args = parser.parse_args(argv)
  config, params = load_hf_t5(args.src)
  count = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(params))
  print(f"{args.src}: {count:,} params\n{config}")
  if args.command == "roundtrip":
    if not args.dst:
      parser.error("roundtrip needs DST")
    save_hf_t5(args.dst, config, params)
    print(f"wrote {args.dst}")


__all__ = ["HFConversionError", "config_from_hf", "config_to_hf", "hf_to_lm", "lm_to_hf",
           "read_safetensors", "read_json", "load_hf_t5", "save_hf_t5", "HF_TO_LM_ACTIVATION", "LM_TO_HF_ACTIVATION"]

if __name__ == "__main__":
  main()
