r"""The neutral yardstick's item sets (issue #31): minimal pairs and probe items from held-out text.

What lives here: the item types (`Pair`, `ProbeItem`) and the deterministic builders that cut
them out of held-out documents. What does not: scoring a model on them (lm/downstream/nlu.py)
and the contrasts between points (lm/downstream/contrasts.py). Pure text, no model, no JAX.
The narrative (what each phenomenon is, why these instruments): docs/yardstick.md.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Pair:
  """A minimal pair: `good` is a held-out sentence as written, `bad` differs in one place.

  good = prefix + good_span + suffix and bad = prefix + bad_span + suffix, so every native
  scorer can mask or condition on exactly the part the two sentences share.

  Attributes:
    phenomenon: which perturbation made `bad` (a key of the builders' output).
    document: index of the held-out document the sentence came from (the probes'
      cross-validation groups: no document is in two folds).
    prefix: the text before the difference ("" when the sentence starts with it).
    good_span: the text as written at the difference.
    bad_span: the perturbed text there (never equal to good_span).
    suffix: the text after the difference.
  """
  phenomenon: str
  document: int
  prefix: str
  good_span: str
  bad_span: str
  suffix: str

  @property
  def good(self) -> str:
    return self.prefix + self.good_span + self.suffix

  @property
  def bad(self) -> str:
    return self.prefix + self.bad_span + self.suffix


@dataclasses.dataclass(frozen=True)
class ProbeItem:
  """One sentence of a probing task: a linear probe on frozen representations predicts `label`.

  Attributes:
    task: the probing task (a perturbation class or a surface control).
    text: the sentence the model reads.
    label: the class, int in [0, num_classes).
    document: index of the held-out document (cross-validation group).
  """
  task: str
  text: str
  label: int
  document: int
