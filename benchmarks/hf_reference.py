"""The PyTorch reference the benchmarks compare against: Hugging Face T5, same config, float32.

Used by bench_model.py (forward + backward, and its ``time_calls``) and bench_train.py (a full training step with
transformers' Adafactor in T5's settings). Optional: ``available()`` is False without
torch + transformers, and the benchmarks then skip the comparison with a message. The
model is ``T5ForConditionalGeneration(T5Config(**lm.model.hf_t5.config_to_hf(config)))``
with dropout 0, on the CPU, ``torch.set_num_threads(os.cpu_count())``; the loss is HF's
mean token cross entropy from ``labels``.
"""
from __future__ import annotations

import os
import time


def time_calls(fn, steps: int) -> list[float]:
  """Wall-clock seconds of ``steps`` calls of ``fn`` (which must block until done)."""
  times = []
  for _ in range(steps):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return times


def available() -> str | None:
  """None if torch and transformers import, else the reason they do not."""
  try:
    import torch  # noqa: F401  pylint: disable=unused-import,g-import-not-at-top
    import transformers  # noqa: F401  pylint: disable=unused-import,g-import-not-at-top
  except ImportError as e:
    return str(e)
  return None


def versions() -> str:
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  return (f"torch {torch.__version__} transformers {transformers.__version__} "
          f"({torch.get_num_threads()} threads)")


def time_hf_t5(config, batch, steps: int, *, optimizer_step: bool, warmup: int = 1,
               learning_rate: float = 0.01) -> list[float]:
  """Times HF T5 steps on ``batch``; returns the ``steps`` step times in seconds.

  Args:
    config: an encoder-decoder lm TransformerConfig exportable to HF T5.
    batch: encoder_input_tokens int[B, Li], decoder_input_tokens and
      decoder_target_tokens int[B, Lt] (NumPy).
    steps: timed steps, after ``warmup`` untimed ones.
    optimizer_step: False: zero_grad + forward + backward. True: also
      ``transformers.optimization.Adafactor`` in T5's settings (fixed learning rate, no
      parameter scaling, decay -0.8, clipping 1.0, no momentum), the training step of
      the HF T5 fine-tuning recipes.
    warmup: untimed steps first.
    learning_rate: Adafactor's fixed learning rate.
  """
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from lm.model.hf_t5 import config_to_hf  # pylint: disable=g-import-not-at-top

  torch.set_num_threads(os.cpu_count() or 1)
  hf_config = dict(config_to_hf(config), dropout_rate=0.0)
  hf_config.pop("architectures")
  torch.manual_seed(0)
  model = transformers.T5ForConditionalGeneration(transformers.T5Config(**hf_config)).train()
  enc = torch.as_tensor(batch["encoder_input_tokens"], dtype=torch.long)
  dec = torch.as_tensor(batch["decoder_input_tokens"], dtype=torch.long)
  labels = torch.as_tensor(batch["decoder_target_tokens"], dtype=torch.long)
  opt = None
  if optimizer_step:
    opt = transformers.optimization.Adafactor(
        model.parameters(), lr=learning_rate, scale_parameter=False, relative_step=False,
        warmup_init=False, decay_rate=-0.8, clip_threshold=1.0, beta1=None, weight_decay=0.0)

  def step():
    model.zero_grad(set_to_none=True)
    out = model(input_ids=enc, decoder_input_ids=dec, labels=labels)
    out.loss.backward()
    if opt is not None:
      opt.step()

  for _ in range(warmup):
    step()
  return time_calls(step, steps)
