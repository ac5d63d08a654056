"""The PyTorch peer the benchmarks compare against: Hugging Face T5, same config, run in its
OWN worker process (benchmarks/fair.py): float32 on the CPU; on a GPU (when lm runs on one)
on CUDA, with bfloat16 autocast when lm's activations are bfloat16 (float32 parameters on
both sides, as lm's T5.1.1 configs).

Used by bench_model.py (zero_grad + forward + backward) and bench_train.py (a full
training step with transformers' Adafactor in T5's settings). ``start(...)`` launches
``python benchmarks/hf_reference.py --worker``, which builds
``T5ForConditionalGeneration(T5Config(**lm.checkpoint.hf_t5.config_to_hf(config)))`` (dropout 0,
CPU, float32, ``torch.manual_seed(0)``) on the benchmark's batch, runs the warm-up steps
untimed, then times steps on request; the loss is HF's mean token cross entropy from
``labels``. The worker inherits the benchmark's CPU affinity (``fair.pin_cpus``), uses
``torch.set_num_threads`` = that many CPUs, and applies the same host-memory policy as the
lm side (``lm.hostmem.retain_for_cpu()`` before torch starts, or glibc's default).

Optional: ``available()`` is False without torch + transformers (checked without importing
them here, so the lm process never loads torch), and the benchmarks then skip the
comparison with a message.
"""
from __future__ import annotations

import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # lm
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # fair

import fair  # noqa: E402  pylint: disable=g-import-not-at-top


def available() -> str | None:
  """None if torch and transformers are installed, else what is missing."""
  missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
  return (f"No module named {', '.join(missing)} (pip install -e '.[hf]'; on this "
          "project's CPU machines torch==2.13.0 was measured)") if missing else None


def start(config, batch, *, optimizer_step: bool, warmup: int = 1,
          host_memory: str = "retain", learning_rate: float = 0.01, device: str = "cpu",
          dtype: str = "float32") -> fair.Worker:
  """Starts the HF worker for ``config`` on ``batch``; returns it once warmed up.

  Args:
    config: an encoder-decoder lm TransformerConfig exportable to HF T5.
    batch: encoder_input_tokens int[B, Li], decoder_input_tokens and
      decoder_target_tokens int[B, Lt] (NumPy).
    optimizer_step: False: zero_grad + forward + backward. True: also
      ``transformers.optimization.Adafactor`` in T5's settings (fixed learning rate, no
      parameter scaling, decay -0.8, clipping 1.0, no momentum), the training step of
      the HF T5 fine-tuning recipes.
    warmup: untimed steps after building.
    host_memory: "retain" (lm.hostmem.retain_for_cpu) or "default", as the lm side.
    learning_rate: Adafactor's fixed learning rate.
    device: "cpu" or "cuda" (each step then ends with torch.cuda.synchronize(), as lm's
      blocks on its new state).
    dtype: "float32", or "bfloat16": the forward and backward under torch.autocast in
      bfloat16 (the optimizer in float32), lm's mixed precision.
  Returns:
    a fair.Worker; ``worker.time(n)`` times n steps, ``worker.info`` has the versions.
  """
  from lm.checkpoint.hf_t5 import config_to_hf  # pylint: disable=g-import-not-at-top
  hf_config = dict(config_to_hf(config), dropout_rate=0.0)
  hf_config.pop("architectures")
  keys = ("encoder_input_tokens", "decoder_input_tokens", "decoder_target_tokens")
  setup = {"hf_config": hf_config, "batch": {k: batch[k] for k in keys},
           "optimizer_step": optimizer_step, "warmup": warmup, "host_memory": host_memory,
           "learning_rate": learning_rate, "device": device, "dtype": dtype}
  if device not in ("cpu", "cuda") or dtype not in ("float32", "bfloat16"):
    raise ValueError(f"unknown device/dtype {device!r}/{dtype!r}; expected one of "
                     "['cpu', 'cuda'] / ['float32', 'bfloat16']")
  return fair.Worker(os.path.abspath(__file__), setup)


def compare(lm_step, config, batch, *, rounds: int, steps: int, **start_kwargs) -> dict:
  """lm's step against HF T5's on the same batch, the HF side in its own process (`start`,
  given ``start_kwargs``), in alternating rounds (fair.py).

  Args:
    lm_step: blocking callable running one more lm step.
    config, batch: as `start`.
    rounds, steps: alternating rounds of ``steps`` timed steps a side.
  Returns:
    fair.compare(...) plus "hf_info" (versions, threads of the HF worker).
  """
  with start(config, batch, **start_kwargs) as worker:
    timed = fair.alternate({"lm": lambda n: fair.time_calls(lm_step, n), "hf": worker.time},
                           rounds, steps)
    out = fair.compare(timed["lm"], timed["hf"])
    out["hf_info"] = worker.info
  return out


def _build(hf_config, batch, optimizer_step, warmup, host_memory, learning_rate, device,
           dtype):
  """Worker side: (blocking step callable, info dict)."""
  retained = False
  if host_memory == "retain":
    from lm import hostmem  # pylint: disable=g-import-not-at-top
    retained = hostmem.retain_for_cpu()
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  torch.set_num_threads(threads)
  torch.manual_seed(0)
  model = transformers.T5ForConditionalGeneration(transformers.T5Config(**hf_config)).train()
  model.to(device)
  enc, dec, labels = (torch.as_tensor(batch[k], dtype=torch.long, device=device) for k in
                      ("encoder_input_tokens", "decoder_input_tokens", "decoder_target_tokens"))
  autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=dtype == "bfloat16")
  opt = None
  if optimizer_step:
    opt = transformers.optimization.Adafactor(
        model.parameters(), lr=learning_rate, scale_parameter=False, relative_step=False,
        warmup_init=False, decay_rate=-0.8, clip_threshold=1.0, beta1=None, weight_decay=0.0)

  def step():
    model.zero_grad(set_to_none=True)
    with autocast:
      out = model(input_ids=enc, decoder_input_ids=dec, labels=labels)
    out.loss.backward()
    if opt is not None:
      opt.step()
    if device == "cuda":
      torch.cuda.synchronize()

  for _ in range(warmup):
    step()
  info = {"versions": f"torch {torch.__version__} transformers {transformers.__version__}",
          "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "dtype": dtype,
          "threads": torch.get_num_threads(), "host_memory_retained": retained,
          "pid": os.getpid()}
  return step, info


if __name__ == "__main__":
  if "--worker" not in sys.argv[1:]:
    sys.exit("hf_reference.py is started by the benchmarks (--worker); run bench_model.py or "
             "bench_train.py with --compare_hf")
  sys.exit(fair.serve(_build))
