"""What identifies a checkpoint: the run signature and the per-array checksums.

The signature (``run_signature``) records what must match for a checkpoint to restore
into a run: the model config (and its hash), the params' shapes by leaf name
(``param_shapes``) and, when given, the tokenizer's content hash. ``shape_mismatch`` puts
the first difference of two shape records in words.

The checksums (``state_checksums``) are two 32-bit position-weighted sums of every
array's bits, computed on device (one small jit, sharded and multi-host alike); integer
sums wrap modulo 2**32, so they do not depend on the sharding or the process count.

Leaves are named by ``lm.keypaths`` ("params/decoder/layers_0/mlp/wo"); checkpoints on
disk record these names, so neither the naming nor the checksum formula may change
without a new ``FORMAT``.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lm.keypaths import named_leaves
# Model fields that choose how, not what, the model computes: left out of the signature,
# so a checkpoint resumes under another attention kernel, and checkpoints written before
# such a field existed keep their hash.
from lm.model.transformer_config import ADDED_FIELDS, EXECUTION_FIELDS

FORMAT = "lm.checkpoint/1"


def _as_uint32(x: jax.Array) -> jax.Array:
  """The bits of `x` as a flat uint32 vector (any dtype; PRNG keys by their key data)."""
  if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  size = jnp.dtype(x.dtype).itemsize
  if size == 4:
    bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
  elif size == 8:
    bits = jax.lax.bitcast_convert_type(x, jnp.uint32)  # adds a trailing dim of 2
  else:
    uint = {1: jnp.uint8, 2: jnp.uint16}[size]
    bits = jax.lax.bitcast_convert_type(x, uint).astype(jnp.uint32)
  return bits.reshape(-1)


@jax.jit
def _checksums(leaves: list[jax.Array]) -> list[jax.Array]:
  out = []
  for x in leaves:
    bits = _as_uint32(x)
    i = jnp.arange(bits.size, dtype=jnp.uint32)
    rot = (bits << 13) | (bits >> 19)
    out.append(jnp.stack([jnp.sum(bits * (i * jnp.uint32(2654435761) + 1), dtype=jnp.uint32),
                          jnp.sum(rot ^ (i * jnp.uint32(40503) + 7), dtype=jnp.uint32)]))
  return out


def state_checksums(state: Any) -> dict[str, list[int]]:
  """{leaf path: [c1, c2]}: two uint32 position-weighted sums of each array's bits.

  Integer sums wrap modulo 2**32, so the result does not depend on the sharding or the
  number of processes; any changed, swapped or lost element changes it (except with
  probability ~2**-64).
  """
  flat = named_leaves(state)
  sums = jax.device_get(_checksums([x for _, x in flat]))
  return {name: [int(v) for v in np.asarray(c)] for (name, _), c in zip(flat, sums)}


def param_shapes(params: Any) -> dict[str, list[int]]:
  """{"encoder/layers_0/.../kernel": [d0, d1], ...} for a (possibly abstract) params tree."""
  return {name: list(x.shape) for name, x in named_leaves(params)}


def shape_mismatch(theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> str | None:
  """The first difference between two `param_shapes` dicts, in words; None if equal."""
  if theirs == ours:
    return None
  diff = [k for k in sorted(set(theirs) & set(ours)) if list(theirs[k]) != list(ours[k])]
  if diff:
    return f"param {diff[0]} has shape {list(theirs[diff[0]])} there vs {list(ours[diff[0]])} here"
  only_theirs = sorted(set(theirs) - set(ours))
  if only_theirs:
    return f"param {only_theirs[0]} exists there but not here"
  return f"param {sorted(set(ours) - set(theirs))[0]} exists here but not there"


def config_hash(config: Mapping[str, Any]) -> str:
  """Short stable hash of a JSON-able dict (e.g. config.model.to_dict())."""
  text = json.dumps(config, sort_keys=True, default=str)
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def tokenizer_hash(model_proto: bytes) -> str:
  """sha256 (hex) of a tokenizer's serialized SentencePiece model proto."""
  return hashlib.sha256(bytes(model_proto)).hexdigest()


def run_signature(model_config: Mapping[str, Any], abstract_state: Any, *,
                  tokenizer_sha256: str | None = None) -> dict[str, Any]:
  """What must match for a checkpoint to be restorable into this run.

  Args:
    model_config: the model's hyperparameters (config.model.to_dict() or
      dataclasses.asdict(TransformerConfig)); EXECUTION_FIELDS are dropped, and so are
      ADDED_FIELDS at their defaults (checkpoints from before those fields keep their hash).
    abstract_state: the (abstract) TrainState; its params' shapes are recorded.
    tokenizer_sha256: `tokenizer_hash` of the run's tokenizer, so a tokenizer file
      replaced at the same path (other token ids) is refused on resume; None = unchecked.

  Returns:
    JSON-able dict: model config, its hash, the params' shapes (and the tokenizer hash).
  """
  params = abstract_state.params if hasattr(abstract_state, "params") else abstract_state["params"]
  model_config = {k: v for k, v in dict(model_config).items() if k not in EXECUTION_FIELDS
                  and not (k in ADDED_FIELDS and v == ADDED_FIELDS[k])}
  model_config = json.loads(json.dumps(model_config, sort_keys=True, default=str))
  signature = {"format": FORMAT, "model": model_config,
               "model_hash": config_hash(model_config), "param_shapes": param_shapes(params)}
  if tokenizer_sha256 is not None:
    signature["tokenizer_sha256"] = tokenizer_sha256
  return signature


def recorded_model(signature_model: Mapping[str, Any]) -> dict[str, Any]:
  """The model fields a signature's "model" dict stands for: ADDED_FIELDS that
  `run_signature` left out (at their defaults) filled back in, so it compares field by
  field with a whole model config."""
  return {**{k: v for k, v in ADDED_FIELDS.items() if k not in signature_model},
          **dict(signature_model)}


__all__ = ["FORMAT", "state_checksums", "param_shapes", "shape_mismatch", "config_hash",
           "tokenizer_hash", "run_signature", "recorded_model"]
