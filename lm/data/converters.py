"""Feature converters: one {inputs, targets} example -> model features for an architecture.

What lives here: `convert` (seqio's encoder-decoder / prefix LM / decoder layouts for ONE
unpadded example, with T5's append_eos_after_trim), `shift_right` (seqio's
make_autoregressive_inputs, segment-aware) and `Framing` (how a checkpoint frames its inputs
and starts its decoder; `FRAMINGS`). Pure NumPy. What does not: packing and padding
(`lm.data.packing`), objectives (`lm.data.objectives`).

    features = convert({"inputs": inputs, "targets": targets}, "prefix_lm", lengths=lengths)

The layouts, token by token, and the empty-inputs case: docs/pipeline.md, 'Feature layouts';
the framings: docs/decoding.md, 'Framing'.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from lm.data.features import ARCHITECTURES


def _trim_append_eos(tokens: np.ndarray, max_len: int | None, eos_id: int) -> np.ndarray:
  """seqio append_eos_after_trim: tokens[:max_len - 1] + [eos]. int32[min(L, max_len - 1) + 1]."""
  if max_len is not None:
    if max_len < 1:
      raise ValueError(f"length must be >= 1 to hold the EOS, got {max_len}")
    tokens = tokens[:max_len - 1]
  return np.concatenate([tokens, np.array([eos_id], np.int32)])


@dataclasses.dataclass(frozen=True)
class Framing:
  """How a checkpoint frames an input and starts its decoder (docs/decoding.md "Framing"):
  in lm and T5 / T5Gemma, decoder_start (the decoder's first input) is 0 / 2, prompt_bos
  (a token before every input) None / 2, and prompt_eos (an EOS after it) True / False.
  Training (`convert`) and decoding (lm.generation.prompt_batch) lay rows out by it."""
  decoder_start: int = 0
  prompt_bos: int | None = None
  prompt_eos: bool = True

  @property
  def overhead(self) -> int:
    """Tokens the framing adds around an input (BOS and EOS)."""
    return int(self.prompt_bos is not None) + int(self.prompt_eos)

  def frame(self, prompt: Sequence[int], decoder_only: bool, eos_id: int = 1) -> list[int]:
    """The row of a prompt (ids, no BOS or EOS): [prompt_bos] + prompt + [EOS] (the encoder's
    input); decoder-only [decoder_start] + that, or [decoder_start] for an empty prompt."""
    ids = [int(t) for t in prompt]
    framed = ([] if self.prompt_bos is None else [self.prompt_bos]) + ids + (
        [eos_id] if self.prompt_eos else [])
    if decoder_only:
      return [self.decoder_start] + (framed if ids else [])
    return framed

  def frame_inputs(self, tokens: np.ndarray, max_len: int | None, eos_id: int) -> np.ndarray:
    """[prompt_bos] + tokens + [EOS], the tokens cut so that the row fits in max_len (T5's
    framing: seqio's append_eos_after_trim). int32[<= max_len]."""
    tokens = np.asarray(tokens, np.int32)
    if max_len is not None:
      need = max(self.overhead, 1)
      if max_len < need:
        held = " and ".join(["BOS"] * (self.prompt_bos is not None) + ["EOS"] * self.prompt_eos)
        raise ValueError(f"length must be >= {need} to hold the {held or 'input'}, got {max_len}")
      tokens = tokens[:max_len - self.overhead]
    bos = [] if self.prompt_bos is None else [self.prompt_bos]
    return np.concatenate([np.array(bos, np.int32), tokens,
                           np.array([eos_id] if self.prompt_eos else [], np.int32)])


T5_FRAMING = Framing()
# Framings by name (config.finetune.framing): lm's and T5's, and the released T5Gemma
# checkpoints' (lm.checkpoint.hf_t5gemma.decoder_start_id, their tokenizer's <bos> 2).
FRAMINGS = {"t5": T5_FRAMING,
            "t5gemma": Framing(decoder_start=2, prompt_bos=2, prompt_eos=False)}


def framing_named(name: str) -> Framing:
  """FRAMINGS[name], or ValueError naming the accepted ones."""
  if name not in FRAMINGS:
    raise ValueError(f"unknown framing {name!r}; expected one of {list(FRAMINGS)}")
  return FRAMINGS[name]


def shift_right(tokens: np.ndarray, segment_ids: np.ndarray | None = None,
                bos_id: int = 0) -> np.ndarray:
  """Decoder inputs: tokens shifted right by one, BOS at position 0 and at each segment start.

  Works on int[L] or int[B, L] (shifts along the last axis). With segment_ids, a position whose
  segment differs from the previous position's gets the BOS (seqio make_autoregressive_inputs):
    tokens      [8 9 1 4 1 0]
    segment_ids [1 1 1 2 2 0]
    ->          [0 8 9 0 4 0]

  Args:
    tokens: int32[..., L]. segment_ids: optional int32[..., L], same shape; 0 = padding.
    bos_id: the token shifted in (0 in T5).
  Returns:
    int32[..., L].
  """
  tokens = np.asarray(tokens)
  shifted = np.full(tokens.shape, bos_id, np.int32)
  shifted[..., 1:] = tokens[..., :-1]
  if segment_ids is not None:
    segment_ids = np.asarray(segment_ids)
    if segment_ids.shape != tokens.shape:
      raise ValueError(f"segment_ids shape {segment_ids.shape} != tokens shape {tokens.shape}")
    starts = np.ones(tokens.shape, bool)
    starts[..., 1:] = segment_ids[..., 1:] != segment_ids[..., :-1]
    shifted = np.where(starts, np.int32(bos_id), shifted)
  return shifted


def convert(example: Mapping[str, np.ndarray], architecture: str, *, eos_id: int = 1,
            lengths: Mapping[str, int] | None = None,
            loss_on_inputs: bool = False, targets_eos: bool = True,
            framing: Framing = T5_FRAMING) -> dict[str, np.ndarray]:
  """Lays out one {inputs, targets} example for an architecture (layouts: docs/pipeline.md).

  Inputs and targets are each trimmed to their length - 1 and get an EOS (seqio
  append_eos_after_trim), so encoder features are at most lengths["inputs"] long, decoder
  features of encoder_decoder at most lengths["targets"], and the decoder-only sequence at most
  lengths["inputs"] + lengths["targets"].

  Args:
    example: {"inputs": int32[Li'], "targets": int32[Lt']}, no EOS, no padding.
    architecture: "encoder_decoder", "prefix_lm" or "causal".
    eos_id: EOS id (1).
    lengths: {"inputs": Li, "targets": Lt}; None = no trimming.
    loss_on_inputs: decoder-only only: also put loss on the inputs part.
    targets_eos: append EOS to the targets (seqio append_eos_after_trim). False: the targets
      are only trimmed to lengths["targets"] (T5 full_lm, whose chunks carry EOS at document
      ends only; objectives.Layout.targets_eos).
    framing: how the inputs are framed and the decoder starts (T5's: inputs + EOS, decoder
      inputs from 0; T5Gemma's: <bos> + inputs, from 2). The targets end in EOS either way.
  Returns:
    encoder_decoder: encoder_input_tokens int32[Ie], decoder_input_tokens int32[Td],
      decoder_target_tokens int32[Td], decoder_loss_weights float32[Td].
    prefix_lm / causal: decoder_input_tokens, decoder_target_tokens, decoder_causal_attention
      int32[S]; decoder_loss_weights float32[S].
  """
  if architecture not in ARCHITECTURES:
    raise ValueError(f"unknown architecture {architecture!r}; expected one of "
                     f"{list(ARCHITECTURES)}")
  missing = {"inputs", "targets"} - set(example)
  if missing:
    raise ValueError(f"example lacks {sorted(missing)}; has {sorted(example)}")
  lengths = dict(lengths or {})
  unknown = set(lengths) - {"inputs", "targets"}
  if unknown:
    raise ValueError(f"lengths keys must be 'inputs'/'targets', got {sorted(unknown)}")
  inputs = np.asarray(example["inputs"], np.int32).reshape(-1)
  targets = np.asarray(example["targets"], np.int32).reshape(-1)
  if targets_eos:
    targets = _trim_append_eos(targets, lengths.get("targets"), eos_id)
  elif lengths.get("targets") is not None:
    targets = targets[:lengths["targets"]]

  if architecture == "encoder_decoder":
    if loss_on_inputs:
      raise ValueError("loss_on_inputs applies only to decoder-only architectures")
    return {
        "encoder_input_tokens": framing.frame_inputs(inputs, lengths.get("inputs"), eos_id),
        "decoder_input_tokens": shift_right(targets, bos_id=framing.decoder_start),
        "decoder_target_tokens": targets,
        "decoder_loss_weights": np.ones(targets.shape, np.float32),
    }

  if inputs.size:
    inputs = framing.frame_inputs(inputs, lengths.get("inputs"), eos_id)
  sequence = np.concatenate([inputs, targets])
  n_in = inputs.size  # incl. its EOS; 0 for an empty prefix
  positions = np.arange(sequence.size)
  if architecture == "prefix_lm":
    causal_attention = (positions <= n_in).astype(np.int32)
  else:
    causal_attention = np.zeros(sequence.size, np.int32)
  if loss_on_inputs:
    loss_weights = np.ones(sequence.size, np.float32)
  else:
    loss_weights = (positions >= n_in).astype(np.float32)
  return {
      "decoder_input_tokens": shift_right(sequence, bos_id=framing.decoder_start),
      "decoder_target_tokens": sequence,
      "decoder_loss_weights": loss_weights,
      "decoder_causal_attention": causal_attention,
  }
