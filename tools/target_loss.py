r"""A run's held-out loss split by target kind, beside a unigram model of its text.

    python -m tools.target_loss --workdir=runs/studies/t5_span_length/iid [--step=N] [--json=F]

A denoising objective's targets are of two kinds: markers (sentinels and EOS), which a model
learns to place early, and the corrupted text tokens, which it must read off the context.
The held-out cross-entropy of a span or i.i.d. corruption run mixes the two; this splits it
(per-token cross-entropy and accuracy of each kind, on the run's own objective and held-out
batches) and sets the text part beside a unigram model of the run's training documents
(add-one smoothed token frequencies): a model whose text cross-entropy is above the unigram
model's has not yet learned to use the context. docs/yardstick.md, "Slow start or blind
spot", has the measurement this was written for.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

MARKER, TEXT = "marker", "text"


def target_kinds(targets: np.ndarray, *, first_sentinel: int, eos_id: int) -> np.ndarray:
  """int8[...] per target: 0 padding, 1 marker (a sentinel, id >= first_sentinel, or EOS),
  2 text."""
  targets = np.asarray(targets)
  marker = (targets >= first_sentinel) | (targets == eos_id)
  return np.where(targets == 0, 0, np.where(marker, 1, 2)).astype(np.int8)


def split_totals(batches: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]], *,
                 first_sentinel: int, eos_id: int, unigram_log_probs: np.ndarray
                 ) -> dict[str, dict[str, float]]:
  """Per kind, the cross-entropy (nats a target token), accuracy (%) and token count.

  Args:
    batches: (targets int[B, L] with 0 = padding, log-likelihoods float[B, L] of each
      target, correct bool[B, L]: the argmax was the target).
    first_sentinel, eos_id: which ids are markers (`target_kinds`).
    unigram_log_probs: float[V], a unigram model's log-probabilities; its cross-entropy on
      the text targets is `unigram_cross_entropy` in the text entry.

  Returns:
    {MARKER: {...}, TEXT: {..., "unigram_cross_entropy"}}; a kind without tokens has NaNs.
  """
  sums = {k: np.zeros(3) for k in (MARKER, TEXT)}   # -ll, correct, tokens
  unigram = 0.0
  for targets, ll, correct in batches:
    kinds = target_kinds(targets, first_sentinel=first_sentinel, eos_id=eos_id)
    for code, name in ((1, MARKER), (2, TEXT)):
      sel = kinds == code
      sums[name] += (-np.asarray(ll, np.float64)[sel].sum(), np.asarray(correct)[sel].sum(),
                     sel.sum())
    unigram -= unigram_log_probs[np.asarray(targets)[kinds == 2]].sum()
  out = {}
  for name, (nll, right, n) in sums.items():
    out[name] = {"cross_entropy": nll / n if n else float("nan"),
                 "accuracy": 100.0 * right / n if n else float("nan"), "tokens": int(n)}
  n_text = sums[TEXT][2]
  out[TEXT]["unigram_cross_entropy"] = unigram / n_text if n_text else float("nan")
  return out


def unigram_log_probs(token_lists: Iterable[Sequence[int]], vocab_size: int) -> np.ndarray:
  """float64[vocab_size]: log of add-one smoothed token frequencies."""
  counts = np.ones(vocab_size, np.float64)
  for ids in token_lists:
    counts += np.bincount(np.asarray(ids, np.int64), minlength=vocab_size)[:vocab_size]
  return np.log(counts / counts.sum())


def measure(workdir: str, *, step: int | None = None, num_batches: int | None = None,
            unigram_documents: int = 20_000) -> dict[str, Any]:
  """`split_totals` of the run's checkpoint on its own objective's held-out batches, the
  unigram model counted over its first `unigram_documents` training documents."""
  import jax  # pylint: disable=g-import-not-at-top
  from lm import config as config_lib  # pylint: disable=g-import-not-at-top
  from lm import partitioning, restore  # pylint: disable=g-import-not-at-top
  from lm import score as score_lib  # pylint: disable=g-import-not-at-top
  from lm.data import noise  # pylint: disable=g-import-not-at-top
  from lm.data import pipeline as pipeline_lib  # pylint: disable=g-import-not-at-top
  from lm.data import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  r = restore.load_run(workdir, step=step)
  spec = config_lib.data_spec(r.config)
  data = pipeline_lib.DataPipeline(spec, tokenizer=r.tokenizer)
  vocab = r.tokenizer.vocab_size
  first_sentinel = noise.sentinel_id(vocab, spec.extra_ids - 1) if spec.extra_ids else vocab
  train = data.train_source
  docs = (train[i] for i in range(min(unigram_documents, len(train))))
  unigram = unigram_log_probs((r.tokenizer.encode(d) for d in docs), vocab)

  @jax.jit
  def per_token(params, batch):
    logits = r.model.apply({"params": params}, batch)
    targets = batch["decoder_target_tokens"]
    return (score_lib.token_log_likelihoods(logits, targets),
            jax.numpy.argmax(logits, axis=-1) == targets)

  def batches():
    with partitioning.axis_rules(r.mesh, r.rules):
      for batch in data.eval_iterator(num_batches=num_batches):
        ll, correct = per_token(r.params, partitioning.make_global_batch(batch, r.mesh))
        yield batch["decoder_target_tokens"], np.asarray(ll), np.asarray(correct)

  kinds = split_totals(batches(), first_sentinel=first_sentinel,
                       eos_id=tokenizer_lib.EOS_ID, unigram_log_probs=unigram)
  return {"workdir": r.workdir, "step": r.step, "objective": spec.objective, **kinds}


def describe(m: Mapping[str, Any]) -> str:
  t, k = m[TEXT], m[MARKER]
  return (f"{m['workdir']} step {m['step']} ({m['objective']}): text targets {t['tokens']:,}: "
          f"cross-entropy {t['cross_entropy']:.3f} nats, accuracy {t['accuracy']:.1f} % "
          f"(unigram model {t['unigram_cross_entropy']:.3f}); markers {k['tokens']:,}: "
          f"cross-entropy {k['cross_entropy']:.3f}, accuracy {k['accuracy']:.1f} %")


def main(argv: Sequence[str] | None = None) -> int:
  p = argparse.ArgumentParser(
      prog="python -m tools.target_loss",
      description="A run's held-out cross-entropy split into marker targets (sentinels, EOS) "
                  "and text targets, beside a unigram model of its training documents.")
  p.add_argument("--workdir", required=True, help="the run (local or gs://)")
  p.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest)")
  p.add_argument("--num_batches", type=int, default=None,
                 help="held-out batches (default: one pass over the held-out split)")
  p.add_argument("--unigram_documents", type=int, default=20_000,
                 help="training documents the unigram model counts")
  p.add_argument("--json", default=None, help="also write the result here")
  args = p.parse_args(argv)
  from lm import cli, restore  # pylint: disable=g-import-not-at-top
  from lm import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  for name in ("num_batches", "unigram_documents"):
    value = getattr(args, name)
    if value is not None and value <= 0:
      return cli.bad_input_exit(f"--{name} must be positive, got {value}.")
  try:
    m = measure(args.workdir, step=args.step, num_batches=args.num_batches,
                unigram_documents=args.unigram_documents)
  except (restore.RunNotFoundError, restore.StepNotFoundError,
          restore.IncompatibleCheckpointError, ValueError) as e:
    return cli.bad_input_exit(cli.first_line(e))
  print(describe(m))
  if args.json:
    workdir_lib.write_text_atomic(args.json, json.dumps(m, indent=1) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
