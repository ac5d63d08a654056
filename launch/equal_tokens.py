r"""The equal-predicted-tokens control (issue #31): steps at which a run has predicted as
many target tokens as another.

  python -m launch.equal_tokens --root=runs/studies/t5_objectives
  # prefix_lm predicted 656,819 target tokens in 1000 steps; replace_spans predicts 307.3 a
  # step: 2138 steps (--config.train.num_steps=2138) predict as many.

Read from each run's metrics.jsonl, whose training lines log `target_tokens`, the mean
tokens with a loss per step since the previous line (lm/steps.py). The report's section
is launch/yardstick.py's; the narrative docs/yardstick.md ("Equal predicted tokens").
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Mapping, Sequence

from lm.writers import METRICS_FILE


@dataclasses.dataclass(frozen=True)
class Control:
  """A point trained until it has predicted as many target tokens as a reference point.

  Attributes:
    point: the control's point (the same objective as `equal_steps`, more steps where the
      objective predicts fewer target tokens a step than the reference's, fewer where more).
    equal_steps: the point of the same objective at the study's steps (its rate per step
      sets the control's steps).
    reference: the point whose predicted target tokens the control matches.
    paper_sign: +1 when the paper has the control's objective ahead of the reference's.
  """
  point: str
  equal_steps: str
  reference: str
  paper_sign: int = 1


# The study's controls: each of C1's denoising points against prefix LM (C1's arm b), in
# experiments/t5_objectives.py. Replace-spans (T5's baseline) and drop-tokens predict fewer
# target tokens a step than prefix LM and train on; BERT- and MASS-style predict the whole
# sequence, more, and stop earlier. The report's section reads every control whose points
# it has.
REPLACE_SPANS = Control("replace_spans_equal_tokens", equal_steps="replace_spans",
                        reference="prefix_lm")
BERT = Control("bert_equal_tokens", equal_steps="bert", reference="prefix_lm")
MASS = Control("mass_equal_tokens", equal_steps="mass", reference="prefix_lm")
DROP_TOKENS = Control("drop_tokens_equal_tokens", equal_steps="drop_tokens",
                      reference="prefix_lm")
CONTROLS = (REPLACE_SPANS, BERT, MASS, DROP_TOKENS)


def tokens_seen(records: Sequence[Mapping[str, Any]], up_to: int | None = None
                ) -> tuple[int, float]:
  """(the last logged step, the target tokens predicted up to it) from metrics.jsonl lines;
  with `up_to`, of the lines up to that step (a checkpoint scored before the run's end).

  A training line at step s_i logs `target_tokens`, the mean per step over the steps since
  the previous line (lm.metrics.LogWindow), so the total is sum_i mean_i * (s_i - s_{i-1})
  with s_0 = 0. Lines without `target_tokens` (evaluations) are skipped; of a step logged
  twice the last line counts.

  Raises:
    ValueError: no line logs `target_tokens`.
  """
  by_step = {int(r["step"]): float(r["target_tokens"]) for r in records
             if r.get("target_tokens") is not None and "step" in r
             and (up_to is None or int(r["step"]) <= up_to)}
  if not by_step:
    raise ValueError("no training line logs target_tokens"
                     + (f" up to step {up_to}" if up_to is not None else ""))
  total, previous = 0.0, 0
  for step in sorted(by_step):
    total += by_step[step] * (step - previous)
    previous = step
  return previous, total


def equal_token_steps(reference_tokens: float, tokens_per_step: float) -> int:
  """The fewest steps at which a run predicting `tokens_per_step` target tokens a step has
  predicted at least `reference_tokens`: ceil(reference_tokens / tokens_per_step), rounded
  up so that the control never predicts fewer (a quotient within 1e-9 of a whole number is
  that number: 6000 / 30 is 200 steps, 6001 / 30 is 201)."""
  if not tokens_per_step > 0 or not reference_tokens > 0:
    raise ValueError(f"target tokens must be positive, got {reference_tokens} in total and "
                     f"{tokens_per_step} a step")
  quotient = reference_tokens / tokens_per_step
  return max(1, math.ceil(quotient - 1e-9 * max(1.0, quotient)))


def read_records(workdir: str) -> list[dict[str, Any]]:
  """The lines of `<workdir>/metrics.jsonl` (a torn last line is skipped).

  Raises:
    ValueError: the file is missing, naming the run to train.
  """
  path = os.path.join(workdir, METRICS_FILE)
  if not os.path.isfile(path):
    raise ValueError(f"no {path}: train that point first (python -m launch.sweep "
                     "EXPERIMENT --root=ROOT --only=POINT --stages=pretrain)")
  records = []
  with open(path) as f:
    for line in f:
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError:
        continue
  return records


def run_tokens(workdir: str, up_to: int | None = None) -> tuple[int, float]:
  """`tokens_seen` of a run's metrics.jsonl (up to step `up_to`).

  Raises:
    ValueError: no metrics.jsonl, or no line with target_tokens (naming the run).
  """
  records = read_records(workdir)
  try:
    return tokens_seen(records, up_to)
  except ValueError as e:
    raise ValueError(f"{os.path.join(workdir, METRICS_FILE)} has {e}: let the run log at "
                     "least one training line (train.log_every steps)") from e


@dataclasses.dataclass(frozen=True)
class Measurement:
  """The control's steps from the runs: (steps, target tokens) of the reference and of the
  equal-steps run, and the steps at which the control predicts as many as the reference."""
  reference: tuple[int, float]
  equal_steps: tuple[int, float]
  steps: int


def measure(root: str, control: Control) -> Measurement:
  """The control's steps from `<root>/<reference>` and `<root>/<equal_steps>`'s metrics.

  Raises:
    ValueError: a run or its metrics are missing (one line naming it and the fix).
  """
  reference = run_tokens(os.path.join(root, control.reference))
  equal_steps = run_tokens(os.path.join(root, control.equal_steps))
  return Measurement(reference, equal_steps,
                     equal_token_steps(reference[1], equal_steps[1] / equal_steps[0]))


def main(argv: Sequence[str] | None = None) -> int:
  """`python -m launch.equal_tokens --root=DIR`: prints the control's steps."""
  import argparse  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(prog="python -m launch.equal_tokens", description=(
      "The steps at which the control point predicts as many target tokens as the reference "
      "point did, from both runs' metrics.jsonl."))
  parser.add_argument("--root", required=True, help="the study's directory")
  parser.add_argument("--reference", default="prefix_lm", help="the point to match")
  parser.add_argument("--equal_steps", default="replace_spans",
                      help="the control objective's point at the study's steps")
  args = parser.parse_args(argv)
  try:
    m = measure(args.root, Control("control", args.equal_steps, args.reference))
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  (ref_steps, ref_tokens), (steps, tokens) = m.reference, m.equal_steps
  print(f"{args.reference} predicted {ref_tokens:,.0f} target tokens in {ref_steps} steps; "
        f"{args.equal_steps} predicts {tokens / steps:.1f} a step: {m.steps} steps "
        f"(--config.train.num_steps={m.steps}) predict as many.")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
