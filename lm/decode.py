"""Command line: decode prompts with a trained run or a Hugging Face T5 / T5Gemma directory.

    python -m lm.decode --workdir=runs/t5_local --input=prompts.txt --output=out.jsonl
    python -m lm.decode --hf=/ckpt/t5-v1_1-small --input=- --method=beam --beam_size=4 --alpha=0.6
    echo '{"inputs": "translate English to German: Hello"}' | python -m lm.decode --hf=DIR --input=-

Input: plain text (one prompt per line) or JSON lines with an "inputs" field (a file
ending in .jsonl, or one whose every non-blank line starts with "{"). Output: JSON lines
{"inputs", "output", "score"} in input order (plus "truncated_tokens" where a prompt was
cut with --truncate), written to --output (atomically) or stdout. The score is the sum
of the output tokens' log-probabilities (greedy, sample) or the beam's length-penalised
score (beam).

Prompts are laid out as in training (``lm.generation.prompt_batch``): prompt + EOS into the
encoder, or BOS + prompt + EOS as the decoder-only prefix; a T5Gemma directory's as
transformers lays them out (<bos> + prompt, decoder start 2: ``lm.restore.load_hf``'s
framing, docs/checkpoints.md). A prompt longer than the
input length (the run's data.inputs_length, or --max_input_length) is an error unless
--truncate is given. Errors are one line on stderr with exit status 2.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

import numpy as np

from lm import cli
from lm import workdir as workdir_lib

DEFAULT_HF_INPUT_LENGTH = 512
DEFAULT_MAX_DECODE_LENGTH = 64


class DecodeError(Exception):
  """A user error: printed as one line, exit status 2."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
      prog="python -m lm.decode", formatter_class=argparse.RawDescriptionHelpFormatter,
      description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
  source = parser.add_mutually_exclusive_group(required=True)
  source.add_argument("--workdir", help="training run directory (config.json + checkpoints/)")
  source.add_argument("--hf", help="Hugging Face save_pretrained directory: T5 with spiece.model, "
                      "or T5Gemma with tokenizer.model")
  parser.add_argument("--step", type=int, default=None, help="checkpoint step (--workdir; default latest)")
  parser.add_argument("--input", required=True, help="prompt file (text lines or jsonl), or - for stdin")
  parser.add_argument("--output", default=None, help="jsonl output file (default stdout)")
  parser.add_argument("--method", choices=("greedy", "sample", "beam"), default="greedy")
  parser.add_argument("--beam_size", type=int, default=4)
  parser.add_argument("--alpha", type=float, default=0.6, help="beam length-penalty exponent")
  parser.add_argument("--length_penalty", choices=("t5", "hf"), default="t5",
                      help="t5: ((5 + len) / 6) ** alpha with t5x's rules; hf: len ** alpha, "
                           "transformers' early_stopping=True")
  parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (0 = greedy)")
  parser.add_argument("--top_k", type=int, default=0, help="sample from the k most likely tokens (0: all)")
  parser.add_argument("--top_p", type=float, default=1.0, help="nucleus sampling mass (1: all)")
  parser.add_argument("--max_decode_length", type=int, default=None,
                      help=f"most generated tokens (default: the run's data.targets_length, "
                           f"else {DEFAULT_MAX_DECODE_LENGTH})")
  parser.add_argument("--max_input_length", type=int, default=None,
                      help=f"prompt tokens incl. EOS (default: the run's data.inputs_length, "
                           f"else {DEFAULT_HF_INPUT_LENGTH})")
  parser.add_argument("--truncate", action="store_true",
                      help="cut over-long prompts (recorded as truncated_tokens) instead of failing")
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--seed", type=int, default=0, help="sampling seed")
  parser.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                      help="activation dtype (default: the run's / the importer's)")
  args = parser.parse_args(argv)
  if args.step is not None and not args.workdir:
    parser.error("--step needs --workdir")
  problem = flag_problem(args)
  if problem:
    parser.error(problem)
  return args


def flag_problem(args: argparse.Namespace) -> str | None:
  """What is wrong with the numeric flags (nan, inf, out of range), or None."""
  for name in ("alpha", "temperature", "top_p"):
    if not math.isfinite(getattr(args, name)):
      return f"--{name} must be a finite number, got {getattr(args, name)}"
  if args.step is not None and args.step < 0:
    return f"--step must be >= 0, got {args.step}"
  for name in ("batch_size", "beam_size"):
    if getattr(args, name) < 1:
      return f"--{name} must be >= 1, got {getattr(args, name)}"
  for name in ("max_decode_length", "max_input_length"):
    value = getattr(args, name)
    if value is not None and value < 1:
      return f"--{name} must be >= 1, got {value}"
  if args.method == "beam" and args.length_penalty == "t5" and args.alpha < 0:
    return (f"--alpha must be >= 0 with --length_penalty=t5 (its stopping rule assumes it), "
            f"got {args.alpha}")
  if args.temperature < 0:
    return f"--temperature must be >= 0 (0 = greedy), got {args.temperature}"
  if args.top_k < 0:
    return f"--top_k must be >= 0 (0 = all tokens), got {args.top_k}"
  if not 0 < args.top_p <= 1:
    return f"--top_p must be in (0, 1] (1 = all tokens), got {args.top_p}"
  if not -2**63 <= args.seed < 2**63:
    return f"--seed must fit in 64 bits, got {args.seed}"
  return None


def read_prompts(path: str) -> list[str]:
  """Reads prompts: text lines, or the "inputs" field of JSON lines.

  Raises:
    DecodeError: missing or empty file, not UTF-8, bad JSON or no "inputs".
  """
  try:
    raw = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
  except OSError as e:
    raise DecodeError(f"cannot read --input {path}: {e.strerror or e}") from None
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    line = raw[:e.start].count(b"\n") + 1
    raise DecodeError(f"--input {path} is not UTF-8 (line {line}, byte {e.start}); "
                      "re-encode it as UTF-8") from None
  lines = text.splitlines()
  while lines and not lines[-1].strip():
    lines.pop()
  if not lines:
    raise DecodeError(f"--input {path} is empty; give one prompt per line or jsonl with 'inputs'")
  nonblank = [l for l in lines if l.strip()]
  if path.endswith(".jsonl") or all(l.lstrip().startswith("{") for l in nonblank):
    prompts = []
    for i, line in enumerate(lines, 1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        raise DecodeError(f"--input {path} line {i} is not valid JSON ({e.msg})") from None
      if not isinstance(record, dict) or not isinstance(record.get("inputs"), str):
        raise DecodeError(f"--input {path} line {i} has no string 'inputs' field")
      prompts.append(record["inputs"])
    return prompts
  return lines


def _restore(args):
  from lm import restore
  if args.workdir:
    overrides = [f"--config.model.dtype={args.dtype}"] if args.dtype else []
    return restore.load_run(args.workdir, step=args.step, overrides=overrides)
  return restore.load_hf(args.hf, dtype=args.dtype)


def _bucket(n: int, cap: int) -> int:
  """The smallest power of two >= n (at least 8), capped: few distinct compiled shapes."""
  return min(cap, max(8, 1 << (n - 1).bit_length()))


def run(args: argparse.Namespace) -> list[dict]:
  """Decodes the prompts; returns the output records in input order."""
  import jax
  from tqdm import tqdm

  from lm import generation, partitioning
  from lm.data import features

  prompts = read_prompts(args.input)
  restored = _restore(args)
  model_config = restored.model_config
  data = restored.config.data if restored.config is not None else None
  input_length = args.max_input_length or (data.inputs_length if data is not None else DEFAULT_HF_INPUT_LENGTH)
  max_decode_length = args.max_decode_length or (
      data.targets_length if data is not None else DEFAULT_MAX_DECODE_LENGTH)
  config = generation.DecodeConfig(
      method=args.method, max_decode_length=max_decode_length, beam_size=args.beam_size,
      alpha=args.alpha, length_penalty=args.length_penalty, eos_ids=restored.eos_ids,
      sampling=generation.SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p))

  tokenizer, framing = restored.tokenizer, restored.framing
  decoder_only = not model_config.is_encoder_decoder
  # the tokens framing adds to a prompt: T5's EOS (and a decoder-only model's BOS), T5Gemma's <bos>
  added = len(framing.frame([1], decoder_only)) - 1
  token_lists, truncated = [], []
  for i, (text, ids) in enumerate(zip(prompts, tokenizer.encode_batch(prompts))):
    ids = [int(t) for t in ids]
    room = input_length - added + int(decoder_only)
    if len(ids) > room:
      if not args.truncate:
        raise DecodeError(f"prompt {i + 1} has {len(ids)} tokens + {added - int(decoder_only)} "
                          f"framing ({'EOS' if framing.prompt_eos else '<bos>'}) but the input "
                          f"length is {input_length}; pass --truncate to cut it or raise "
                          "--max_input_length")
      truncated.append(len(ids) - room)
      ids = ids[:room]
    else:
      truncated.append(0)
    token_lists.append(ids)

  shards = int(np.prod([restored.mesh.shape[a] for a in partitioning.BATCH_AXES
                        if a in restored.mesh.axis_names]))
  batch_size = features.round_up(min(args.batch_size, len(prompts)), shards)
  fn = generation.make_decode_fn(restored.model, config, mesh=restored.mesh, rules=restored.rules)
  rng = jax.random.PRNGKey(args.seed)
  records = []
  for start in tqdm(range(0, len(prompts), batch_size), desc="decode", unit="batch", file=sys.stderr):
    rows = token_lists[start:start + batch_size]
    longest = max(len(r) for r in rows) + added
    batch = generation.prompt_batch(rows, model_config, batch_size=batch_size, framing=framing,
                                  input_length=_bucket(longest, input_length + int(decoder_only)))
    ids = np.arange(start, start + batch_size, dtype=np.int32)
    tokens, scores = fn(restored.params, batch, rng, ids)
    tokens, scores = np.asarray(tokens), np.asarray(scores)
    for j in range(len(rows)):
      ends = np.flatnonzero(np.isin(tokens[j], config.eos_ids))  # the text stops before them
      record = {"inputs": prompts[start + j],
                "output": tokenizer.decode(tokens[j][:ends[0] if ends.size else None]),
                "score": float(scores[j])}
      if truncated[start + j]:
        record["truncated_tokens"] = truncated[start + j]
      records.append(record)
  return records


def write_records(records: list[dict], output: str | None) -> None:
  lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
  if output is None:
    sys.stdout.write(lines)
    sys.stdout.flush()
    return
  path = workdir_lib.as_path(output)   # local or gs://
  if not path.parent.is_dir():
    raise DecodeError(f"--output directory {path.parent} does not exist")
  workdir_lib.write_text_atomic(path, lines)


def main(argv: Sequence[str] | None = None) -> int:
  from lm import libtpu_env  # pylint: disable=g-import-not-at-top
  libtpu_env.quiet_libtpu_off_tpu()
  args = parse_args(argv)
  try:
    write_records(run(args), args.output)
  except (DecodeError, *cli.BAD_INPUT_ERRORS) as e:
    return cli.bad_input_exit(cli.first_line(e), prefix="lm.decode: error")
  return 0


if __name__ == "__main__":
  sys.exit(main())
