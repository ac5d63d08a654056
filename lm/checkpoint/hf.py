"""Which Hugging Face family a ``config.json`` holds, and the converter that reads it.

    family(hf_config)                 # "t5", "t5gemma" or "t5gemma2", by model_type
    config, params = checkpoint_to_lm(hf_config, tensors, dtype="bfloat16")

T5 (lm.checkpoint.hf_t5), T5Gemma (hf_t5gemma) and T5Gemma 2's text model (hf_t5gemma2);
the Gemma families read the Gemma tokenizer and frame prompts as Gemma does
(``is_gemma``; lm.restore.load_hf, lm.train.init_params_from).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from lm.checkpoint import hf_t5, hf_t5gemma, hf_t5gemma2
from lm.model.transformer_config import TransformerConfig

FAMILIES = {"t5gemma": hf_t5gemma.hf_to_lm, hf_t5gemma2.MODEL_TYPE: hf_t5gemma2.hf_to_lm}


def family(hf_config: Mapping[str, Any]) -> str:
  """"t5gemma" or "t5gemma2" by config.json's model_type; "t5" for any other (hf_t5 then
  names what it cannot read)."""
  model_type = hf_config.get("model_type")
  return model_type if model_type in FAMILIES else "t5"


def is_gemma(hf_config: Mapping[str, Any]) -> bool:
  """Whether a parsed config.json is a Gemma-family encoder-decoder (T5Gemma, T5Gemma 2)."""
  return family(hf_config) != "t5"


def checkpoint_to_lm(hf_config: Mapping[str, Any], tensors: Mapping[str, np.ndarray],
                     **overrides) -> tuple[TransformerConfig, dict[str, Any]]:
  """The family's ``hf_to_lm`` (T5's by default) on a config.json dict and its tensors."""
  return FAMILIES.get(family(hf_config), hf_t5.hf_to_lm)(hf_config, tensors, **overrides)


__all__ = ["FAMILIES", "family", "is_gemma", "checkpoint_to_lm"]
