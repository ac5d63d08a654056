"""Decoding benchmark: tokens/s of lm.generation vs PyTorch transformers' ``generate``.

    python benchmarks/bench_decode.py                      # T5.1.1-small shapes, batch 1 and 32
    python benchmarks/bench_decode.py --quick              # tiny shapes, a smoke run
    python benchmarks/bench_decode.py --rounds 5 --threads 8 --batches 32 --methods beam

Models: an encoder-decoder with the T5.1.1-small shape (``t5_1_1_small``: 8+8 layers,
d_model 512, vocab 32128; float32), initialised by lm with a fixed seed and written as a
Hugging Face directory with ``lm.checkpoint.hf_t5.save_hf_t5``; lm decodes it through
``lm.checkpoint.hf_t5.load_hf_t5`` + ``lm.generation``, transformers through
``T5ForConditionalGeneration.from_pretrained`` + ``generate`` (eager attention, KV cache).
A decoder-only model (``t5_1_1/small/causal``: 8 layers of the same shape) is decoded by lm
only: transformers has no T5 decoder-only model to compare with, so its rows show lm's
figures alone.

Methods: greedy, and beam search with 4 beams, alpha 0.6 and Hugging Face's length
penalty and early stopping on both sides (``length_penalty="hf"``; the same search, so
the same work). Prompts are random tokens (``--inputs_length`` with the EOS; fixed seed),
at most ``--max_decode_length`` new tokens.

Method: every system runs in its own process (one per round and system, rounds
alternating which system goes first), pinned to the same ``--threads`` cores
(``os.sched_setaffinity``; torch.set_num_threads too). In each process a case is run once
untimed (compile / warm-up), then timed ``--repeats`` times; a round's figure is the
median. Reported: the median over rounds of tokens/s, with the spread (min-max over
rounds), where tokens are the generated tokens of the returned (best) sequences up to and
including EOS. The ratio lm / transformers is called parity when the two spreads overlap.

Only figures are printed; nothing is asserted. On a shared machine run it when the
machine is quiet.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

FULL = {"encdec": "t5_1_1/small/encoder_decoder", "deconly": "t5_1_1/small/causal"}
QUICK = {"encdec": "cpu/tiny/encoder_decoder", "deconly": "cpu/tiny/causal"}


def _count_tokens(tokens: np.ndarray) -> int:
  """Generated tokens up to and including the first EOS (1) of each row; int[B, M]."""
  total = 0
  for row in tokens:
    eos = np.flatnonzero(row == 1)
    total += int(eos[0]) + 1 if eos.size else int(np.count_nonzero(row) or row.size)
  return total


def _prompts(batch: int, length: int, vocab: int) -> np.ndarray:
  rng = np.random.default_rng(1234)
  enc = rng.integers(2, vocab, size=(batch, length)).astype(np.int32)
  enc[:, -1] = 1
  return enc


def _time(fn, repeats: int) -> list[float]:
  fn()  # compile / warm up
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return times


def _pin(threads: int) -> None:
  cpus = sorted(os.sched_getaffinity(0))[:threads]
  os.sched_setaffinity(0, cpus)


def lm_worker(args, cases) -> dict:
  import jax
  from lm import generation
  from lm.checkpoint import hf_t5
  from lm.model import presets
  from lm.model.transformer import Transformer
  out = {}
  models = {}
  for case in cases:
    kind, method, batch = case["model"], case["method"], case["batch"]
    if kind not in models:
      if kind == "encdec":
        config, params = hf_t5.load_hf_t5(args.hf_dir, dtype="float32")
      else:
        config = presets.from_name(args.presets["deconly"], dtype="float32", dropout_rate=0.0)
        init = {"decoder_input_tokens": np.zeros((1, 8), np.int32)}
        params = jax.jit(Transformer(config).init)(jax.random.PRNGKey(0), init)["params"]
      models[kind] = (Transformer(config), params)
    model, params = models[kind]
    prompts = _prompts(batch, args.inputs_length, model.config.vocab_size)
    if kind == "encdec":
      features = {"encoder_input_tokens": prompts}
    else:
      features = generation.prompt_batch([list(p[:-1]) for p in prompts], model.config)
    config = generation.DecodeConfig(method=method, max_decode_length=args.max_decode_length,
                                   beam_size=4, alpha=0.6, length_penalty="hf")
    fn = generation.make_decode_fn(model, config)
    ids = np.arange(batch, dtype=np.int32)
    result = {}

    def call():
      result["tokens"] = jax.block_until_ready(fn(params, features, jax.random.PRNGKey(0), ids))[0]

    times = _time(call, args.repeats)
    out[_key(case)] = {"times": times, "tokens": _count_tokens(np.asarray(result["tokens"]))}
  return out


def hf_worker(args, cases) -> dict:
  import torch
  import transformers
  torch.set_num_threads(args.threads)
  model = transformers.T5ForConditionalGeneration.from_pretrained(
      args.hf_dir, attn_implementation="eager").eval()
  out = {}
  for case in cases:
    if case["model"] != "encdec":
      continue
    prompts = torch.as_tensor(_prompts(case["batch"], args.inputs_length, model.config.vocab_size),
                              dtype=torch.long)
    kwargs = dict(max_new_tokens=args.max_decode_length, do_sample=False, decoder_start_token_id=0,
                  attention_mask=torch.ones_like(prompts))
    if case["method"] == "beam":
      kwargs.update(num_beams=4, length_penalty=0.6, early_stopping=True)
    result = {}

    def call():
      with torch.no_grad():
        result["tokens"] = model.generate(input_ids=prompts, **kwargs)[:, 1:].numpy()

    times = _time(call, args.repeats)
    out[_key(case)] = {"times": times, "tokens": _count_tokens(result["tokens"])}
  return out


def _key(case) -> str:
  return f"{case['model']}/{case['method']}/{case['batch']}"


def _cases(args):
  return [{"model": m, "method": meth, "batch": b} for m in ("encdec", "deconly")
          for meth in args.methods for b in args.batches]


def _run_worker(system: str, args, hf_dir: str) -> dict:
  cmd = [sys.executable, os.path.abspath(__file__), "--worker", system, "--hf_dir", hf_dir,
         "--threads", str(args.threads), "--repeats", str(args.repeats),
         "--inputs_length", str(args.inputs_length), "--max_decode_length", str(args.max_decode_length),
         "--methods", ",".join(args.methods), "--batches", ",".join(map(str, args.batches))]
  if args.quick:
    cmd.append("--quick")
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
  proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
  if proc.returncode != 0:
    raise RuntimeError(f"{system} worker failed:\n{proc.stderr[-3000:]}")
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _write_model(directory: str, preset: str) -> None:
  import jax
  from lm.checkpoint import hf_t5
  from lm.model import presets
  from lm.model.transformer import Transformer
  config = presets.from_name(preset, dtype="float32", dropout_rate=0.0)
  init = {"encoder_input_tokens": np.ones((1, 8), np.int32), "decoder_input_tokens": np.zeros((1, 8), np.int32)}
  params = jax.jit(Transformer(config).init)(jax.random.PRNGKey(0), init)["params"]
  hf_t5.save_hf_t5(directory, config, params)


def _summary(rounds: list[float]) -> tuple[float, float, float]:
  return statistics.median(rounds), min(rounds), max(rounds)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true", help="tiny models and lengths (smoke run)")
  parser.add_argument("--rounds", type=int, default=3, help="processes per system, alternating")
  parser.add_argument("--repeats", type=int, default=3, help="timed calls per case and process")
  parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
  parser.add_argument("--batches", default="1,32")
  parser.add_argument("--methods", default="greedy,beam")
  parser.add_argument("--inputs_length", type=int, default=None, help="prompt tokens (default 128; quick 16)")
  parser.add_argument("--max_decode_length", type=int, default=None, help="new tokens (default 64; quick 8)")
  parser.add_argument("--json", default=None, metavar="FILE", help="write the results as JSON")
  parser.add_argument("--worker", choices=("lm", "hf"), help=argparse.SUPPRESS)
  parser.add_argument("--hf_dir", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  args.batches = [int(b) for b in str(args.batches).split(",")]
  args.methods = [m for m in str(args.methods).split(",")]
  for m in args.methods:
    if m not in ("greedy", "beam"):
      parser.error(f"--methods: unknown method {m!r}; expected one of ['greedy', 'beam']")
  args.inputs_length = args.inputs_length or (16 if args.quick else 128)
  args.max_decode_length = args.max_decode_length or (8 if args.quick else 64)
  args.presets = QUICK if args.quick else FULL

  if args.worker:
    _pin(args.threads)
    result = (lm_worker if args.worker == "lm" else hf_worker)(args, _cases(args))
    print(json.dumps(result))
    return

  import hf_reference  # benchmarks/
  reason = hf_reference.available()
  systems = ["lm"] + (["hf"] if reason is None else [])
  print(f"bench_decode: {args.presets['encdec']} (enc-dec) and {args.presets['deconly']} (decoder-only), "
        f"float32, inputs {args.inputs_length}, up to {args.max_decode_length} new tokens, "
        f"{args.threads} threads, {args.rounds} rounds x {args.repeats} calls")
  import results  # benchmarks/
  versions = ", ".join(f"{k} {v}" for k, v in results.versions().items() if v)
  print(versions if reason is None else f"{versions}; transformers not available ({reason}): lm only")
  per_round = {}  # (system, key) -> [tokens/s per round]
  with tempfile.TemporaryDirectory() as tmp:
    hf_dir = os.path.join(tmp, "hf")
    _write_model(hf_dir, args.presets["encdec"])
    for r in range(args.rounds):
      for system in (systems if r % 2 == 0 else systems[::-1]):
        for key, res in _run_worker(system, args, hf_dir).items():
          rate = res["tokens"] / statistics.median(res["times"])
          per_round.setdefault((system, key), []).append(rate)

  print(f"\n{'model':28s} {'method':7s} {'batch':>5s} {'lm tokens/s':>26s} {'transformers tokens/s':>26s}  lm/hf")
  rows = []
  for case in _cases(args):
    key = _key(case)
    lm = _summary(per_round[("lm", key)])
    record = {"model": args.presets[case["model"]], "method": case["method"], "batch": case["batch"],
              "lm_tokens_per_s": lm, "lm_rounds": per_round[("lm", key)]}
    row = (f"{args.presets[case['model']]:28s} {case['method']:7s} {case['batch']:5d} "
           f"{lm[0]:10.1f} [{lm[1]:8.1f}-{lm[2]:8.1f}]")
    if ("hf", key) in per_round:
      hf = _summary(per_round[("hf", key)])
      ratio = lm[0] / hf[0]
      verdict = "parity" if lm[1] <= hf[2] and hf[1] <= lm[2] else ("faster" if ratio > 1 else "slower")
      row += f" {hf[0]:10.1f} [{hf[1]:8.1f}-{hf[2]:8.1f}]  {ratio:.2f}x ({verdict})"
      record.update(hf_tokens_per_s=hf, hf_rounds=per_round[("hf", key)], lm_over_hf=ratio,
                    verdict=verdict)
    else:
      row += f" {'(no transformers counterpart)':>26s}"
    rows.append(record)
    print(row)
  if args.json:
    results.write_json(args.json, "bench_decode", {"rows": rows}, vars(args))


if __name__ == "__main__":
  main()
