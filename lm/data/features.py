"""The batch contract: feature names, dtypes and row lengths per architecture (one owner).

Every batch the pipeline yields, every all-zero batch a model is initialised or traced with and
every padding row of an eval batch follows this table; the converter (`converters.convert`) and
the packer (`packing`) produce exactly these features (tests/data/test_features.py checks it).

  architecture      converted features (per example, 1-D)          row length per stack
  encoder_decoder   encoder_input_tokens                            encoder: inputs_length
                    decoder_input_tokens, decoder_target_tokens,    decoder: targets_length
                    decoder_loss_weights
  prefix_lm, causal decoder_input_tokens, decoder_target_tokens,    decoder: inputs_length
                    decoder_loss_weights, decoder_causal_attention            + targets_length

Padding or packing adds `{stack}_segment_ids` and `{stack}_positions` for each stack of the row.
All features are int32 except `decoder_loss_weights` (float32). Names follow t5x.
"""
from __future__ import annotations

import numpy as np

from lm.architecture import LAYOUTS

STACKS = ("encoder", "decoder")
# The feature whose size is an example's length in each stack (padding sizes rows by it).
LENGTH_FEATURES = {"encoder": "encoder_input_tokens", "decoder": "decoder_target_tokens"}
ARCHITECTURES = LAYOUTS  # the data layouts, named in lm/architecture.py

_DECODER_ONLY = ("decoder_input_tokens", "decoder_target_tokens", "decoder_loss_weights",
                 "decoder_causal_attention")
# The converter's features, in the order `converters.convert` emits them.
_FEATURES = {
    "encoder_decoder": ("encoder_input_tokens", "decoder_input_tokens", "decoder_target_tokens",
                        "decoder_loss_weights"),
    "prefix_lm": _DECODER_ONLY,
    "causal": _DECODER_ONLY,
}
_FLOAT_FEATURES = ("decoder_loss_weights",)
# Added per stack by padding / packing (`packing.pad_example`, `packing.rename_packed`).
SEGMENT_FEATURES = ("segment_ids", "positions")


def _check_architecture(architecture: str) -> None:
  if architecture not in ARCHITECTURES:
    raise ValueError(f"unknown architecture {architecture!r}; expected one of {ARCHITECTURES}.")


def feature_lengths(architecture: str, inputs_length: int, targets_length: int
                    ) -> dict[str, int]:
  """Row length per stack: {"encoder": Li, "decoder": Lt}, or {"decoder": Li + Lt}.

  Decoder-only architectures put inputs and targets in one decoder sequence, so the
  decoder row is Li + Lt long (the contract of `converters.convert`). Li = 0 is allowed for
  decoder-only rows of objectives without inputs (full_lm: the row is the targets length,
  T5's 512-token language-model rows).
  """
  _check_architecture(architecture)
  min_inputs = 1 if architecture == "encoder_decoder" else 0
  if inputs_length < min_inputs or targets_length <= 0:
    raise ValueError(f"Lengths must be positive (inputs_length may be 0 for decoder-only "
                     f"rows), got {inputs_length}, {targets_length}.")
  if architecture == "encoder_decoder":
    return {"encoder": int(inputs_length), "decoder": int(targets_length)}
  return {"decoder": int(inputs_length) + int(targets_length)}


def round_up(n: int, k: int) -> int:
  """n rounded up to a multiple of k (a row length or a batch size): round_up(9, 8) == 16."""
  return -(-n // k) * k


def stack_of(key: str) -> str:
  """The stack a feature belongs to: "encoder_input_tokens" -> "encoder"."""
  stack = key.split("_", 1)[0]
  if stack not in STACKS:
    raise ValueError(f"Feature {key!r} belongs to no stack; expected an encoder_/decoder_ key.")
  return stack


def dtype_of(key: str) -> type:
  """np.float32 for decoder_loss_weights, np.int32 for every other feature."""
  return np.float32 if key in _FLOAT_FEATURES else np.int32


def feature_keys(architecture: str) -> list[str]:
  """The features `converters.convert` produces for `architecture`, in its order.

  Padded or packed rows add `<stack>_segment_ids` and `<stack>_positions` (`batch_keys`).
  """
  _check_architecture(architecture)
  return list(_FEATURES[architecture])


def batch_keys(architecture: str) -> list[str]:
  """Every feature of a padded or packed batch: `feature_keys` then, per stack (encoder
  first), `{stack}_segment_ids` and `{stack}_positions` (the packer's order)."""
  keys = feature_keys(architecture)
  stacks = [s for s in STACKS if any(stack_of(k) == s for k in keys)]
  return keys + [f"{s}_{f}" for s in stacks for f in SEGMENT_FEATURES]


def batch_spec(architecture: str, inputs_length: int, targets_length: int, *,
               segments: bool = True) -> dict[str, tuple[int, type]]:
  """{feature: (row length, dtype)} of one batch row.

  Args:
    architecture: one of ARCHITECTURES.
    inputs_length, targets_length: the config's lengths (`feature_lengths`).
    segments: include the `{stack}_segment_ids` / `{stack}_positions` that padding and packing
      add (False: only the converter's features, e.g. for tracing a model's init).
  """
  lengths = feature_lengths(architecture, inputs_length, targets_length)
  keys = batch_keys(architecture) if segments else feature_keys(architecture)
  return {k: (lengths[stack_of(k)], dtype_of(k)) for k in keys}


def zero_batch(architecture: str, inputs_length: int, targets_length: int,
               batch_size: int = 1, *, segments: bool = True) -> dict[str, np.ndarray]:
  """All-zero features of the batch contract: int32[batch_size, L] (float32 loss weights).

  An all-zero row is padding everywhere (segment id 0, loss weight 0): it initialises or traces
  a model and fills the rows of eval shards that have run out.
  """
  return {k: np.zeros((batch_size, length), dtype)
          for k, (length, dtype) in batch_spec(architecture, inputs_length, targets_length,
                                               segments=segments).items()}
