r"""Encoder-decoder vs decoder-only at matched training FLOPs, in the modern recipe (issue #30).

  python -m launch.sweep experiments/modern_ed_vs_do.py --root=runs/studies/modern_ed_vs_do \
      --scale=tiny --parallel=1
  python -m launch.report experiments/modern_ed_vs_do.py --root=runs/studies/modern_ed_vs_do
  python -m launch.sweep experiments/modern_ed_vs_do.py --root=/shared/ed_vs_do --scale=paper \
      --backend=slurm --nodes=4 --gpus_per_node=8 --data_dir=/shared/t5_data --dry_run

The question (RedLLM, T5Gemma): with today's Transformer block instead of T5.1.0's, and the
same training compute, does an encoder-decoder pre-trained as a prefix LM (or with UL2's
mixture) learn as much as a decoder-only model pre-trained as a causal LM? T5 Table 2
(experiments/t5_architectures.py) compared them with T5.1.0's block and matched
*parameters* (its decoder-only rows have one stack's depth, about half the encoder-decoder's
compute); here the decoder-only model is made deeper until its training FLOPs per step equal
the encoder-decoder's. No paper gives numbers for this setting, so the points carry no
reference row; the report shows our columns only.

**The modern recipe** (what lm's TransformerConfig offers of it): T5.1.1's block, which
already has the gated GELU MLP (GeGLU), RMSNorm (pre-norm) and no dropout, plus MODERN:
RoPE instead of T5's relative bias, tied input / output embeddings (T5's tying: logits
times emb_dim**-0.5) and, in the encoder-decoder, RoPE in cross-attention too with RedLLM's
continuous positions (ENCODER_DECODER_MODERN: decoder position p of a segment is p + its
encoder segment's length), so every attention of every point is rotary. The same overrides
apply at both scales (`configs/t5.py`'s family=t5_1_1: base 12+12 at paper scale, the cpu
family's tiny 2+2 under runlocal), so the two scales differ in size only. Not used:
Gemma 2's sandwich norms, soft-caps, local/global layers and grouped-query attention
(`family=t5gemma` has them: T5Gemma's own block, a different study).

**Matched training FLOPs, concretely.** Every point has the same width and batch (128 rows,
16 at tiny scale), and the prefix LM and causal LM points read the same text per row: one
512-token segment (the encoder-decoder prefix LM a 511-token span split at a random point
into 512 encoder + 511 decoder positions; the decoder-only causal LM rows of 512 tokens; 64 /
63 at tiny scale). UL2 has the prefix LM's positions, but its corrupting members fill the
512 inputs from longer segments (up to 1004 raw tokens, 122 at tiny scale; the mixture:
docs/objectives.md), so that point reads more text per step at the same FLOPs. FLOPs are
`lm.model.accounting.training_flops` of the point's derived config (matmuls only, 2 per
multiply-add, backward = 2x forward, dense attention over the padded rows: what `lm.plan`
and the trainer's MFU count). The encoder-decoder has N + N layers; the decoder-only model
has the depth whose training FLOPs per step come closest to the encoder-decoder's,
DECODER_ONLY_LAYERS, which is 2N plus what the decoder's cross-attention costs: 2N + 1 = 5
layers against 2+2 at tiny scale (decoder-only / encoder-decoder = 1.011), 2N + 5 = 29
against 12+12 at paper scale (1.008; the UL2 point's 32256-entry vocabulary, 128 more
sentinels, makes it 1.007). `flops_ratio` computes it, and tests/test_experiments.py fails
when a FLOP-matched pair is off by more than MATCH_TOLERANCE (2 %) or when another depth
would be closer. The naive "2N decoder-only layers" is *not* FLOP-matched: 0.855 at tiny
scale, 0.851 at paper scale; it is the fourth point, `do_causallm_2n`, the same-layers
control (the encoder's and the decoder's layers in one stack, without cross-attention).
At both scales the FLOP-matched decoder-only model has about the encoder-decoder's
non-embedding parameters too (tiny: 205,504 against 197,376; paper: 205M against 198M):
encoder and decoder parameters each see ~512 positions, as a decoder-only layer does.

| point | architecture | objective | layers (paper / tiny) | FLOPs vs ed_prefixlm (paper / tiny) |
|---|---|---|---|---|
| ed_prefixlm | encoder_decoder | prefix_lm (RedLLM) | 12+12 / 2+2 | 1 / 1 |
| ed_ul2 | encoder_decoder | ul2 (R/S/X denoisers + mode tokens) | 12+12 / 2+2 | 1.0004 / 1 |
| do_causallm | causal | full_lm | 29 / 5 | 1.008 / 1.011 |
| do_causallm_2n | causal | full_lm | 24 / 4 | 0.851 / 0.855 |
| ed_prefixlm_selfrope | encoder_decoder, no RoPE in cross-attention | prefix_lm | 12+12 / 2+2 | 1 / 1 |

The fifth point is a diagnostic added after the first tiny-scale run: there the prefix-LM
encoder-decoder, alone among the points, lost its held-out loss on inputs longer than the
64 tokens it was trained on (docs/results/modern_ed_vs_do.md); ed_prefixlm_selfrope is the
same point with T5Gemma's cross-attention (RoPE in self-attention only), which tells whether
RedLLM's rotary cross-attention is the cause (at tiny scale it is: the results file). RoPE
is not a matmul, so its FLOPs are ed_prefixlm's.

Pre-training losses of these points are not comparable (a prefix LM's targets are the
second half of a span given the first; the causal LM's are every token, document starts
included; UL2's are a mixture). The common ground is `lm.evaluate` (the sweep's evaluate
stage): the held-out prefix_lm and full_lm losses of every model in its own layout, and the
continuation score (bits per byte of a held-out continuation given its prefix), in
`<point>/eval/step_<N>.json`; docs/results/modern_ed_vs_do.md reads them.

Planning a paper-scale point without an accelerator: lm's analytic estimate, no compile,
~10 s on the development CPU (a `--topology=v5p-N` plan compiles with libtpu instead):

  python -m lm.plan --topology=h100-8 \
      --config=configs/t5.py:arch=causal,family=t5_1_1,objective=full_lm \
      --config.model.position_encoding=rope --config.model.tie_embeddings=True \
      --config.model.num_layers=29

prints "training FLOPs per step: analytic 9.938e+13" (ed_prefixlm's, with
`arch=encoder_decoder,objective=prefix_lm` and `--config.model.cross_attention_rope=continue`
instead of the depth: 9.865e+13) and ~17-18 GiB per device at batch 128 over 8 devices.
"""
from __future__ import annotations

from typing import Any

from experiments import common

# The modern recipe on top of T5.1.1's block (module docstring).
MODERN = {"model.position_encoding": "rope", "model.tie_embeddings": True}
ENCODER_DECODER_MODERN = {**MODERN, "model.cross_attention_rope": "continue"}

# N, the layers per stack of the encoder-decoder (the t5_1_1 base and cpu tiny rows), and
# the FLOP-matched decoder-only depth (module docstring), per scale.
ENCODER_DECODER_LAYERS = {"paper": 12, "tiny": 2}
DECODER_ONLY_LAYERS = {"paper": 29, "tiny": 5}
MATCH_TOLERANCE = 0.02  # |decoder-only / encoder-decoder training FLOPs - 1|

# (name, arch, objective, the recipe's overrides, decoder-only depth or None, FLOP-matched
# to ed_prefixlm). ed_prefixlm_selfrope: the diagnostic point (module docstring), RoPE in
# self-attention only, as T5Gemma (cross_attention_rope None).
POINTS = (
    ("ed_prefixlm", "encoder_decoder", "prefix_lm", ENCODER_DECODER_MODERN, None, True),
    ("ed_ul2", "encoder_decoder", "ul2", ENCODER_DECODER_MODERN, None, True),
    ("do_causallm", "causal", "full_lm", MODERN, DECODER_ONLY_LAYERS, True),
    ("do_causallm_2n", "causal", "full_lm", MODERN,
     {scale: 2 * n for scale, n in ENCODER_DECODER_LAYERS.items()}, False),
    ("ed_prefixlm_selfrope", "encoder_decoder", "prefix_lm", MODERN, None, True),
)


def sweep(add):
  """Adds the five points of the module docstring's table, the same names at both scales."""
  for name, arch, objective, recipe, depth, _ in POINTS:
    overrides, runlocal_overrides = dict(recipe), {}
    if depth is not None:
      overrides["model.num_layers"] = depth["paper"]
      runlocal_overrides["model.num_layers"] = depth["tiny"]
    add(name=name,
        config=common.config(f"arch={arch},family=t5_1_1,objective={objective}"),
        overrides=overrides,
        runlocal_overrides=runlocal_overrides)


def training_flops(config: Any) -> int:
  """Training FLOPs of one step of a point's config (a ConfigDict, overrides applied):
  `lm.model.accounting.training_flops` of its derived model, lengths and global batch."""
  from lm import config as config_lib  # pylint: disable=g-import-not-at-top
  from lm.model import accounting  # pylint: disable=g-import-not-at-top
  config = config_lib.derive(config)
  data = config.data
  return accounting.training_flops(config_lib.model_config(config), data.inputs_length,
                                   data.targets_length, data.batch_size)


def flops_ratio(config: Any, reference: Any) -> float:
  """training_flops(config) / training_flops(reference)."""
  return training_flops(config) / training_flops(reference)
