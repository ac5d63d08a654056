"""The T5 architectures (docs/t5_reference.md §1.3, paper Table 2): the one owner of the names.

A run's architecture is one word, `config.model.architecture`; everything else that depends
on it is derived here:

  architecture      mask_type (= data layout)  shared_encoder_decoder  stacks
  encoder_decoder   encoder_decoder            False                   encoder + decoder
  shared            encoder_decoder            True                    one stack run twice
  prefix_lm         prefix_lm                  False                   decoder only
  causal            causal                     False                   decoder only

`LAYOUTS` are the model's mask types and, equally, the data pipeline's feature layouts
(lm/data/converters.py): "shared" runs the encoder-decoder layout. A decoder-only model has
as many layers as ONE stack of the encoder-decoder model of the same size (T5 Table 2: "LM"
and "prefix LM" with P parameters), so `num_layers` is the per-stack depth for every
architecture.

This module imports nothing from lm: the model, the data pipeline and the config boundary
all take the names from here.
"""
from __future__ import annotations

ARCHITECTURES = ("encoder_decoder", "shared", "prefix_lm", "causal")
LAYOUTS = ("encoder_decoder", "prefix_lm", "causal")


def check(architecture: str) -> str:
  """Returns `architecture` if it is one of ARCHITECTURES.

  Raises:
    ValueError: unknown name.
  """
  if architecture not in ARCHITECTURES:
    raise ValueError(f"unknown architecture {architecture!r}; expected one of "
                     f"{list(ARCHITECTURES)}")
  return architecture


def layout(architecture: str) -> str:
  """The mask type / data layout of `architecture` ("shared" -> "encoder_decoder")."""
  check(architecture)
  return "encoder_decoder" if architecture == "shared" else architecture


def is_encoder_decoder(architecture: str) -> bool:
  """True for the two-stack architectures (encoder_decoder, shared)."""
  return layout(architecture) == "encoder_decoder"


def model_fields(architecture: str, num_layers: int) -> dict[str, object]:
  """The TransformerConfig fields that `architecture` fixes, for stacks of `num_layers`.

  Returns:
    {mask_type, shared_encoder_decoder, num_encoder_layers, num_decoder_layers}; decoder-only
    architectures have num_encoder_layers=0 and num_decoder_layers=num_layers.
  """
  encdec = is_encoder_decoder(architecture)
  return {"mask_type": layout(architecture),
          "shared_encoder_decoder": architecture == "shared",
          "num_encoder_layers": int(num_layers) if encdec else 0,
          "num_decoder_layers": int(num_layers)}


def of_model(mask_type: str, shared_encoder_decoder: bool) -> str:
  """The architecture of a model's mask_type and sharing (the inverse of `model_fields`)."""
  if mask_type not in LAYOUTS:
    raise ValueError(f"unknown mask_type {mask_type!r}; expected one of {list(LAYOUTS)}")
  return "shared" if shared_encoder_decoder else mask_type
