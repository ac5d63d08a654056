r"""GPT-3 family (Brown et al., 2020, Table 2.1): causal LM with full-LM loss, for planning.

Command (one size; the shapes are the paper's: the `gpt3` size table of lm/model/presets.py):
  python -m lm.main --workdir=/tmp/gpt3_125m --config=configs/gpt3.py:size=125m
CPU-sized try-out of the same code path (tiny causal model, embedded corpus, ~2 min):
  python -m lm.main --workdir=/tmp/gpt_local --config=configs/gpt3.py:runlocal

Hardware and time: sizes 125m ... 175b are for planning sweeps on GPU/TPU (the training
FLOPs per step come from lm.model.accounting.training_flops and are printed as MFU in the
logs); nothing here was measured on an accelerator. runlocal: 2-core CPU, ~2 minutes;
expected metric: train loss falls from ~7 to below 5 within 1000 steps.

`arg` keys: size [125m] | 350m | 760m | 1_3b | 2_7b | 6_7b | 13b | 175b; context [2048];
steps [-1 = the paper's 300B tokens / batch]; runlocal [False].

Settings from the paper (Table 2.1 and §B): AdamW (b1 0.9, b2 0.95, eps 1e-8, weight decay
0.1), global-norm clipping 1.0, linear warm-up over 375M tokens then cosine decay to 10 % of
the peak over 260B tokens, learning rate and batch size (tokens) per size as below.
Decoder rows hold `context` tokens: the full-LM objective has empty inputs, so
data.inputs_length = 0 and data.targets_length = context (configs/t5.py's full_lm rows).
"""
from __future__ import annotations

import ml_collections

from configs import common, t5
from lm import config as config_lib
from lm.data.noise import DEFAULT_NUM_EXTRA_IDS

# size -> (learning rate, batch size in 2048-token sequences), GPT-3 Table 2.1 (its batch
# sizes 0.5M / 1M / 2M / 3.2M tokens are 256 / 512 / 1024 / 1536 sequences of 2048).
GPT3_HPARAMS = {
    "125m": (6.0e-4, 256), "350m": (3.0e-4, 256), "760m": (2.5e-4, 256),
    "1_3b": (2.0e-4, 512), "2_7b": (1.6e-4, 512), "6_7b": (1.2e-4, 1024),
    "13b": (1.0e-4, 1024), "175b": (0.6e-4, 1536),
}
# Sizes whose loss runs 2048 tokens at a time (lm.losses.tiled_cross_entropy): the whole
# float32 logits, softmax and gradient hold 3 x 4 B x 2048 x 50304 = 1.15 GiB per sequence
# (32 sequences per device: 37 GiB; tiled: one chunk's, 1.15 GiB, whatever the batch),
# for one more [tokens, D] x [D, V] product in the backward pass: +2.4 % of lm's training
# FLOPs at 1.3B (2 * D * V = 0.21 GFLOP per token of ~8.5), +8 % at 125M, where the
# logits are a third of the model and memory is not the limit.
TILED_LOSS_SIZES = ("1_3b", "2_7b", "6_7b", "13b", "175b")
TOTAL_TOKENS = 300e9
WARMUP_TOKENS = 375e6
DECAY_TOKENS = 260e9


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Returns the locked GPT-3 config for `arg` (see the module docstring)."""
  arg = common.parse_arg(arg, size="125m", context=2048, steps=-1, runlocal=False)
  if arg.size not in GPT3_HPARAMS:
    raise ValueError(f"unknown size {arg.size!r}; expected one of {sorted(GPT3_HPARAMS)}.")
  if arg.context % 2:
    raise ValueError(f"context must be even (inputs_length + targets_length), got {arg.context}.")
  context = 128 if arg.runlocal else arg.context
  t5_arg = f"arch=causal,objective=full_lm,inputs_length={context}"  # rows of `context`
  if arg.runlocal:
    t5_arg += ",runlocal"
  config = t5.get_config(t5_arg)
  config.arg = arg.to_dict()
  lr, batch_seqs = GPT3_HPARAMS[arg.size]

  if not arg.runlocal:
    for key, value in config_lib.model_section("gpt3", arg.size, "causal").items():
      config.model[key] = value
    config.model.max_length = context
    config.data.batch_size = int(batch_seqs * 2048 // context)  # same tokens per step
    # The on-the-fly tokenizer must pad to the model's 50304 rows: 50304 - extra ids (T5's
    # 100, what lm.config.derive gives full LM, which uses no sentinels).
    config.data.extra_ids = DEFAULT_NUM_EXTRA_IDS
    config.data.default_vocab_size = config.model.vocab_size - config.data.extra_ids
  batch = config.data.batch_size
  tokens_per_step = batch * context
  steps = arg.steps if arg.steps > 0 else (1000 if arg.runlocal
                                           else int(TOTAL_TOKENS // tokens_per_step))
  config.train.num_steps = steps

  config.optim.name = "adamw"
  config.optim.grad_clip_norm = 1.0
  config.optim.adamw.b1, config.optim.adamw.b2 = 0.9, 0.95
  config.optim.adamw.eps, config.optim.adamw.weight_decay = 1e-8, 0.1
  config.schedule.name = "cosine"
  config.schedule.base_lr = 1e-3 if arg.runlocal else lr
  config.schedule.warmup_steps = 50 if arg.runlocal else max(
      1, int(WARMUP_TOKENS // tokens_per_step))
  config.schedule.decay_steps = steps if arg.runlocal else int(DECAY_TOKENS // tokens_per_step)
  config.schedule.end_factor = 0.1
  config.loss.z_loss = 0.0
  if arg.size in TILED_LOSS_SIZES:
    config.loss.tiled_chunk_tokens = 2048
  config.wandb.project = "lm-gpt3"
  config.wandb.tags = ("causal", "full_lm", arg.size)
  return config
