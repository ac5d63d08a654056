"""Feature converters: one {inputs, targets} example -> model features for an architecture.

What lives here: `convert` (seqio's EncDecFeatureConverter / PrefixLMFeatureConverter /
DecoderFeatureConverter layouts for ONE unpadded example, with T5's append_eos_after_trim) and
`shift_right` (seqio's make_autoregressive_inputs, segment-aware). Pure NumPy.
What does not: packing and padding (segment ids, positions; `lm.data.packing`), objectives
(`lm.data.objectives`).

Layouts (EOS = 1, BOS/pad = 0), for inputs [5 6 7] and targets [8 9], no trimming:

  encoder_decoder
    encoder_input_tokens   5 6 7 1
    decoder_target_tokens  8 9 1
    decoder_input_tokens   0 8 9
    decoder_loss_weights   1 1 1

  prefix_lm (one decoder sequence: inputs + EOS + targets + EOS)
    position                 0 1 2 3 4 5 6
    decoder_target_tokens    5 6 7 1 8 9 1
    decoder_input_tokens     0 5 6 7 1 8 9
    decoder_causal_attention 1 1 1 1 1 0 0   (1 at 0..len(inputs + EOS) = 4 inclusive: where the
                                              INPUT token is BOS or an inputs token; those
                                              positions attend to each other bidirectionally)
    decoder_loss_weights     0 0 0 0 1 1 1   (1 where the TARGET token is a targets token;
                                              all 1 with loss_on_inputs=True)

  causal: same sequence and loss weights as prefix_lm, decoder_causal_attention all 0.

Empty inputs (full LM): the decoder-only sequence is just the targets (+ EOS unless
targets_eos=False, as for full_lm's chunks; no inputs part, no inputs EOS), loss on every
token, and prefix_lm's decoder_causal_attention is 1 only at position 0 (the BOS), so it
behaves exactly like the causal layout. The encoder-decoder layout follows seqio and gives
the encoder [EOS] (an empty encoder would leave cross-attention with nothing to attend to).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from lm.data.features import ARCHITECTURES


def _trim_append_eos(tokens: np.ndarray, max_len: int | None, eos_id: int) -> np.ndarray:
  """seqio append_eos_after_trim: tokens[:max_len - 1] + [eos]. int32[min(L, max_len - 1) + 1]."""
  if max_len is not None:
    if max_len < 1:
      raise ValueError(f"length must be >= 1 to hold the EOS, got {max_len}")
    tokens = tokens[:max_len - 1]
  return np.concatenate([tokens, np.array([eos_id], np.int32)])


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
            loss_on_inputs: bool = False, targets_eos: bool = True) -> dict[str, np.ndarray]:
  """Lays out one {inputs, targets} example for an architecture (layouts in the module docstring).

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
        "encoder_input_tokens": _trim_append_eos(inputs, lengths.get("inputs"), eos_id),
        "decoder_input_tokens": shift_right(targets),
        "decoder_target_tokens": targets,
        "decoder_loss_weights": np.ones(targets.shape, np.float32),
    }

  if inputs.size:
    inputs = _trim_append_eos(inputs, lengths.get("inputs"), eos_id)
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
      "decoder_input_tokens": shift_right(sequence),
      "decoder_target_tokens": sequence,
      "decoder_loss_weights": loss_weights,
      "decoder_causal_attention": causal_attention,
  }
