r"""T5 Table 2: architectures x {denoising, LM} objectives (Raffel et al. 2020, §3.2).

  python -m launch.local experiments/t5_architectures.py --root=runs/table2 [--runlocal]

Every point is the paper's T5.1.0 base model (ReLU MLP, tied embeddings, dropout 0.1;
P = params of one 12-layer BERT-base-sized stack, M = FLOPs of the 12+12 enc-dec) trained
for 2^19 steps of 128 x 512 tokens, then fine-tuned per task (paper §3.1):

| Architecture      | Objective | Params | Cost | GLUE  | CNNDM | SQuAD | SGLUE | EnDe  | EnFr  | EnRo  |
|-------------------|-----------|--------|------|-------|-------|-------|-------|-------|-------|-------|
| ★ Encoder-decoder | Denoising | 2P     | M    | 83.28 | 19.24 | 80.88 | 71.36 | 26.98 | 39.82 | 27.65 |
| Enc-dec, shared   | Denoising | P      | M    | 82.81 | 18.78 | 80.63 | 70.73 | 26.72 | 39.03 | 27.46 |
| Enc-dec, 6 layers | Denoising | P      | M/2  | 80.88 | 18.97 | 77.59 | 68.42 | 26.38 | 38.40 | 26.95 |
| Language model    | Denoising | P      | M    | 74.70 | 17.93 | 61.14 | 55.02 | 25.09 | 35.28 | 25.86 |
| Prefix LM         | Denoising | P      | M    | 81.82 | 18.61 | 78.94 | 68.11 | 26.43 | 37.98 | 27.39 |
| Encoder-decoder   | LM        | 2P     | M    | 79.56 | 18.59 | 76.02 | 64.29 | 26.27 | 39.17 | 26.86 |
| Enc-dec, shared   | LM        | P      | M    | 79.60 | 18.13 | 76.35 | 63.50 | 26.62 | 39.17 | 27.05 |
| Enc-dec, 6 layers | LM        | P      | M/2  | 78.67 | 18.26 | 75.32 | 64.06 | 26.13 | 38.42 | 26.89 |
| Language model    | LM        | P      | M    | 73.78 | 17.54 | 53.81 | 56.51 | 25.23 | 34.31 | 25.38 |
| Prefix LM         | LM        | P      | M    | 79.68 | 17.84 | 76.87 | 64.86 | 26.28 | 37.51 | 26.76 |

How the rows map onto configs/t5.py (paper §3.2):
- Denoising = the baseline objective, i.i.d. 15 % replace-spans (`iid_replace_spans`). On
  the decoder-only architectures inputs and targets are concatenated (lm.data.converters).
  Loss on the inputs part: the paper does not say, and Mesh TensorFlow's default trains the
  decoder-only models on both parts. These rows use `loss_on_inputs=False` (loss on the
  targets part only) for both decoder-only rows: the prefix LM cannot use True (its
  bidirectional prefix would let every inputs position see its own next token; config
  validation rejects it), and the same loss mask keeps the two decoder-only rows and the
  encoder-decoder rows predicting the same target tokens. The Mesh TensorFlow choice is one
  flag away: `experiments/t5_architectures_loss_on_inputs.py` (the same table with
  `loss_on_inputs=True` on the causal "Language model / Denoising" row, the only row where
  it applies).
- LM = `prefix_lm` for every architecture with an input (a span split at a random point
  into prefix -> input and rest -> target, cut from one document as T5's `prefix_lm.gin`);
  the plain language model has no input and predicts the whole span (`full_lm`: rows of 512
  targets tokens, EOS only at document ends, T5's `lm.gin` 128 x 512).
- Tokens per step: every row consumes 128 sequences of ~512 text tokens per step (511 raw
  tokens + EOS for the denoising and prefix-LM rows, 512 for the language model);
  tests/data/test_tables.py checks it, with the loss mask of each layout.
- every row is the t5_1_0 base size (lm/model/presets.py) with its architecture:
  shared = arch=shared (one stack's parameters for both sides); 6 layers = 6+6 layers of
  the base shape (model.num_layers=6, the layers per stack; runlocal halves the tiny
  model's 2+2 to 1+1); Language model = arch=causal (12 layers), Prefix LM = arch=prefix_lm
  (12 layers, bidirectional over the input part).

Our runs report pre-training losses; the paper reports only downstream scores after
fine-tuning, and losses of different objectives (or of decoder-only models that see the
input as part of the sequence) are not comparable with each other.
"""
from __future__ import annotations

from experiments import common
from experiments.common import BASELINE, scores

_SIX_LAYERS = {"model.num_layers": 6}            # per stack: 6 + 6
_SIX_LAYERS_RUNLOCAL = {"model.num_layers": 1}

# (name, arch, 6-layer override, reference) for the denoising and the LM halves.
_DENOISING = (
    ("encdec_denoising", "encoder_decoder", False, BASELINE),
    ("shared_denoising", "shared", False,
     scores(82.81, 18.78, 80.63, 70.73, 26.72, 39.03, 27.46)),
    ("encdec6_denoising", "encoder_decoder", True,
     scores(80.88, 18.97, 77.59, 68.42, 26.38, 38.40, 26.95)),
    ("lm_denoising", "causal", False,
     scores(74.70, 17.93, 61.14, 55.02, 25.09, 35.28, 25.86)),
    ("prefixlm_denoising", "prefix_lm", False,
     scores(81.82, 18.61, 78.94, 68.11, 26.43, 37.98, 27.39)),
)
_LM = (
    ("encdec_lm", "encoder_decoder", False,
     scores(79.56, 18.59, 76.02, 64.29, 26.27, 39.17, 26.86)),
    ("shared_lm", "shared", False,
     scores(79.60, 18.13, 76.35, 63.50, 26.62, 39.17, 27.05)),
    ("encdec6_lm", "encoder_decoder", True,
     scores(78.67, 18.26, 75.32, 64.06, 26.13, 38.42, 26.89)),
    ("lm_lm", "causal", False,
     scores(73.78, 17.54, 53.81, 56.51, 25.23, 34.31, 25.38)),
    ("prefixlm_lm", "prefix_lm", False,
     scores(79.68, 17.84, 76.87, 64.86, 26.28, 37.51, 26.76)),
)


def sweep(add, loss_on_inputs: bool = False):
  """Adds the ten rows of Table 2 (see the module docstring).

  Args:
    add: the launcher's point collector.
    loss_on_inputs: loss on the inputs part of the causal denoising row (Mesh TensorFlow's
      default) instead of the targets part only.
  """
  for rows, kind in ((_DENOISING, "denoising"), (_LM, "lm")):
    for name, arch, six_layers, reference in rows:
      extra = ""
      if kind == "denoising":
        objective = "iid_replace_spans"
        if loss_on_inputs and arch == "causal":
          extra = ",loss_on_inputs=True"
      else:
        objective = "full_lm" if arch == "causal" else "prefix_lm"
      add(name=name,
          config=common.config(f"arch={arch},family=t5_1_0,objective={objective}{extra}"),
          overrides=dict(_SIX_LAYERS) if six_layers else {},
          runlocal_overrides=dict(_SIX_LAYERS_RUNLOCAL) if six_layers else {},
          reference=reference,
          baseline=name == "encdec_denoising")
