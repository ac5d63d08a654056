r"""T5 Tables 4 and 5: high-level objectives and simplifications of the BERT objective.

  python -m launch.local experiments/t5_objectives.py --root=runs/table4_5 [--runlocal]

All points: T5.1.0 base encoder-decoder, 2^19 steps of 128 x 512 tokens (paper §3.1),
only the pre-training objective changes (Raffel et al. 2020, §3.3.1-3.3.2).

Table 4 — disparate high-level objectives:

| Objective                  | GLUE  | CNNDM | SQuAD | SGLUE | EnDe  | EnFr  | EnRo  |
|----------------------------|-------|-------|-------|-------|-------|-------|-------|
| Prefix language modeling   | 80.69 | 18.94 | 77.99 | 65.27 | 26.86 | 39.73 | 27.49 |
| BERT-style (Devlin et al.) | 82.96 | 19.17 | 80.65 | 69.85 | 26.78 | 40.03 | 27.41 |
| Deshuffling                | 73.17 | 18.59 | 67.61 | 58.47 | 26.11 | 39.30 | 25.62 |

Table 5 — simplifying the BERT-style objective:

| Objective                 | GLUE  | CNNDM | SQuAD | SGLUE | EnDe  | EnFr  | EnRo  |
|---------------------------|-------|-------|-------|-------|-------|-------|-------|
| BERT-style                | 82.96 | 19.17 | 80.65 | 69.85 | 26.78 | 40.03 | 27.41 |
| MASS-style                | 82.32 | 19.16 | 80.10 | 69.28 | 26.79 | 39.89 | 27.55 |
| ★ Replace corrupted spans | 83.28 | 19.24 | 80.88 | 71.36 | 26.98 | 39.82 | 27.65 |
| Drop corrupted tokens     | 84.44 | 19.31 | 80.52 | 68.67 | 27.07 | 39.76 | 27.82 |

The BERT-style row is shared by both tables and run once. Objectives (paper §3.3, T5's
gins): prefix_lm = split at a random point, prefix -> input, rest -> target; bert = 15 % corrupted,
90 % of them -> mask token and 10 % -> random token, target = the whole original sequence;
deshuffle = input is the shuffled sequence, target the original; mass = bert without the
random tokens; iid_replace_spans (★ baseline) = every run of corrupted tokens -> one
unique sentinel, target = the corrupted runs; drop_tokens = corrupted tokens removed from
the input, target = the corrupted tokens.

Layout (lm.data.objectives.Layout, as T5's gins): prefix_lm and deshuffle cut their
511-token segments from single documents (`prefix_lm.gin`, `all_permute.gin`: no
reduce_concat_tokens), so an example never spans two documents and short documents give
shorter examples; the other objectives cut them from the concatenated documents. Every row
sees 128 sequences per step (tests/data/test_tables.py).

Equal-predicted-tokens controls (issue #31; docs/yardstick.md "Equal predicted tokens"): prefix
LM predicts about half of every sequence, replace-spans and drop-tokens only the 15 %
corrupted tokens (and sentinels), BERT- and MASS-style the whole sequence, so at equal steps
each denoising point has been supervised on fewer or more target tokens than prefix LM.
`<point>_equal_tokens` is that point trained until it has predicted as many target tokens as
`prefix_lm` (launch/equal_tokens.py): on for replace-spans and drop-tokens, stopped earlier
for BERT and MASS (the rsqrt schedule does not depend on the number of steps, so the shorter
run is the longer one's first steps). Their steps come from target tokens per step measured
on the tiny runs (`python -m launch.equal_tokens`); at paper scale the same ratios are a
stand-in until the paper-scale runs are measured, and the report checks the runs' totals
either way. They have no paper rows.

Our runs record pre-training losses. They are not comparable across these objectives
(each predicts a different target: the whole sequence, the corrupted spans, ...), and
neither is comparable with the paper's fine-tuned downstream scores.
"""
from __future__ import annotations

from experiments import common
from experiments.common import BASELINE, scores
from launch import equal_tokens

# (name, objective, reference, baseline?)
_ROWS = (
    ("prefix_lm", "prefix_lm", scores(80.69, 18.94, 77.99, 65.27, 26.86, 39.73, 27.49), False),
    ("bert", "bert", scores(82.96, 19.17, 80.65, 69.85, 26.78, 40.03, 27.41), False),
    ("deshuffle", "deshuffle", scores(73.17, 18.59, 67.61, 58.47, 26.11, 39.30, 25.62), False),
    ("mass", "mass", scores(82.32, 19.16, 80.10, 69.28, 26.79, 39.89, 27.55), False),
    ("replace_spans", "iid_replace_spans", BASELINE, True),
    ("drop_tokens", "drop_tokens", scores(84.44, 19.31, 80.52, 68.67, 27.07, 39.76, 27.82),
     False),
)


# The equal-predicted-tokens controls: target tokens per step of the tiny runs (mean over
# their 1,000 steps, metrics.jsonl; BERT- and MASS-style predict all 16 x 64), measured by
# `python -m launch.equal_tokens`.
EQUAL_TOKENS = equal_tokens.CONTROLS
TARGET_TOKENS_PER_STEP = {"prefix_lm": 656.819, "bert": 1024.0, "mass": 1024.0,
                          "replace_spans": 307.306, "drop_tokens": 167.185}
TINY_STEPS, PAPER_STEPS = 1000, 2 ** 19


def equal_tokens_steps(steps: int, point: str) -> int:
  """The steps of `point`'s control when prefix LM trains `steps` steps
  (TARGET_TOKENS_PER_STEP)."""
  rate = TARGET_TOKENS_PER_STEP
  return equal_tokens.equal_token_steps(steps * rate["prefix_lm"], rate[point])


def sweep(add):
  """Adds Table 4's three objectives and Table 5's other three (BERT-style once), then the
  equal-predicted-tokens controls of C1's four denoising points (no paper rows)."""
  for name, objective, reference, baseline in _ROWS:
    add(name=name, config=common.config(f"family=t5_1_0,objective={objective}"),
        reference=reference, baseline=baseline)
  objectives = {name: objective for name, objective, _, _ in _ROWS}
  for c in EQUAL_TOKENS:
    add(name=c.point,
        config=common.config(f"family=t5_1_0,objective={objectives[c.equal_steps]}"),
        overrides={"train.num_steps": equal_tokens_steps(PAPER_STEPS, c.equal_steps)},
        runlocal_overrides={"train.num_steps": equal_tokens_steps(TINY_STEPS, c.equal_steps)})
