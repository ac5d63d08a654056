"""What the objective registry's records hold: `Objective` and its `Layout`.

What lives here: the record types (one `Objective` per objective name, both of its data paths,
its parameters, its rules and its `Layout`) and the signatures of the objective forms. What
does not: the records themselves and the entry points that read them (`objectives.py`:
`OBJECTIVES`, `make_objective`, `batched_form`, `raw_length`, ...), the forms (`objectives.py`
per example, `batched.py` per block). No imports of other lm modules, so every objective
module can build on it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

Example = dict  # {"inputs": int32[Li], "targets": int32[Lt]}
# fn(tokens int32[L], rng) -> Example: a per-example form with its parameters bound.
ObjectiveFn = Callable[[np.ndarray, np.random.Generator], Example]
# fn(tokens int32[B, L], keys uint64[B], *, vocab_size, num_extra_ids, **params) ->
# {"inputs", "targets"}: dense int32[B, ...] arrays, or lists of B int32 rows (batched.py).
BatchedFn = Callable[..., dict]
Params = Mapping[str, Any]  # an objective's keyword parameters


@dataclasses.dataclass(frozen=True)
class Layout:
  """How the pipeline cuts an objective's raw segments out of documents, per T5's preprocessors.

  Part of each objective's record (`Objective.layout`), so the pipeline never branches on
  objective names.

  Attributes:
    concatenate: documents are joined into one token stream before it is split into raw
      segments (T5 `reduce_concat_tokens`), so a segment may span several documents. False:
      each document is split on its own (`select_random_chunk` then `split_tokens`) and no
      example crosses a document boundary; a document's last segment is shorter.
    document_eos: EOS is appended to every document before concatenation (T5 `full_lm`:
      `append_eos` before `reduce_concat_tokens`), so EOS marks document ends only.
    targets_eos: the converter appends EOS to the targets (seqio `append_eos_after_trim`).
      False: the raw segment is the targets as they are (full_lm's chunks of the targets
      length, whose EOS tokens are the document ends).
    has_inputs: False: the objective's inputs are always empty, so a decoder-only row holds
      only the targets (its length is targets_length: the config sets inputs_length = 0).
  """
  concatenate: bool = True
  document_eos: bool = False
  targets_eos: bool = True
  has_inputs: bool = True


@dataclasses.dataclass(frozen=True)
class Objective:
  """Everything lm knows about one objective (an entry of `objectives.OBJECTIVES`).

  Attributes:
    fn: fn(tokens int32[L], rng, *, vocab_size, num_extra_ids, **params) -> {inputs, targets}.
    params: its keyword parameters and their defaults (the only ones make_objective accepts).
    raw_length: rule(params, inputs_length, targets_length) -> raw tokens cut per example
      (see `raw_length`). Objectives with inputs get inputs_length >= 2 (checked before).
    targets_length: rule(params, inputs_length, targets_length, quantile) -> targets length
      incl. EOS on a full raw segment (see `required_targets_length`).
    layout: how the pipeline cuts its raw segments out of documents (`Layout`).
    density: `noise.check_density` range of its noise_density; None: no noise_density.
    check: further checks of the resolved params (raise ValueError); None: none.
    overflow: rule(params, inputs_length, targets_length, num_extra_ids) -> probability that a
      full raw segment needs more than num_extra_ids sentinels; None: it never does.
    check_segment: rule(params as given, inputs_length, reserved mode tokens) that raises when a
      full raw segment cannot be corrupted at all (check_lengths); None: always can.
    bind: make_objective's binder for objectives that are not a plain partial of fn
      (bind(vocab_size, num_extra_ids, resolved params) -> ObjectiveFn); None: the partial.
    batched: its batched form (`BatchedFn`, batched.py: a block of examples, keyed per
      example, identically distributed to fn; the pipeline's default, see `batched_for`);
      None: it has none and runs per example.
    batched_lacks: switches among params the batched form does not have; while one is on,
      the objective runs per example.
  """
  fn: Callable[..., Example]
  params: Params
  raw_length: Callable[[Params, int, int | None], int]
  targets_length: Callable[[Params, int, int | None, float], int]
  layout: Layout = Layout()
  density: Mapping[str, Any] | None = None
  check: Callable[[Params], None] | None = None
  overflow: Callable[[Params, int, int | None, int], float] | None = None
  check_segment: Callable[[Params, int, int], None] | None = None
  bind: Callable[[int, int, Params], ObjectiveFn] | None = None
  batched: BatchedFn | None = None
  batched_lacks: tuple[str, ...] = ()

  def batched_for(self, params: Params, *, concatenate: bool = True) -> BatchedFn | None:
    """The batched form where it applies to `params` (as given) and the layout, else None.

    None where there is none, where params switch on one of `batched_lacks`, or where raw
    segments are cut from single documents (concatenate=False: the block stage, `blocks.py`,
    cuts its chunks from the concatenated stream).
    """
    if self.batched is None or not concatenate or any(params.get(k) for k in self.batched_lacks):
      return None
    return self.batched
