"""Held-out evaluation of a restored run: the loss per objective and continuation scoring.

  r = restore.load_run("runs/t5_local")
  result = heldout.evaluate_run(r, lm.evaluate.heldout_settings(r),
                                score=heldout.parse_score("all", "span_corruption"))

Per objective: loss, cross-entropy, accuracy and perplexity on the run's held-out split (the
run's own objective reproduces training's eval_loss). Continuation: each held-out document
cut by characters into a prefix and a continuation, the continuation scored in bits per
byte, comparable across tokenizers. docs/evaluation.md has both in full; the command that
writes, tabulates and logs the results is `lm/evaluate.py`.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lm import cli
from lm import metrics as metrics_lib
from lm import partitioning, parts, restore, steps
from lm import score as score_lib
from lm.data import converters, objectives
from lm.data import pipeline as pipeline_lib

DEFAULT_OBJECTIVES = ("span_corruption", "prefix_lm", "full_lm")
CONTINUATION = "continuation"
DEFAULT_PREFIX_CHARS = 256
DEFAULT_CONTINUATION_CHARS = 128
DEFAULT_NUM_EXAMPLES = 256


@dataclasses.dataclass(frozen=True)
class HeldOutSettings:
  """What held-out evaluation takes from a run's config (`lm.evaluate.heldout_settings`).

  Attributes:
    spec: the run's data (lm.config.data_spec): its objective, lengths and held-out split.
    step_kwargs: lm.steps.eval_step's loss arguments as the run trained (z-loss, ...).
    eval_steps: the batches training evaluated on (train.eval_steps; 0: the whole split).
    batch_size: global rows per continuation-scoring batch (data.eval_batch_size).
  """
  spec: pipeline_lib.DataSpec
  step_kwargs: Mapping[str, Any]
  eval_steps: int
  batch_size: int


def parse_score(text: str, own_objective: str) -> list[str]:
  """`--score` -> the ordered list of what to evaluate (own objective first).

  "all" = the run's objective, DEFAULT_OBJECTIVES and the continuation yardstick; else a
  comma list of objective names and/or "continuation" ("own" = the run's objective).

  Raises:
    ValueError: an unknown name (listing the valid ones).
  """
  valid = set(objectives.OBJECTIVES) | {CONTINUATION, "own", "all"}
  names = [n.strip() for n in text.split(",") if n.strip()]
  if not names:
    raise ValueError("--score is empty; use all, or a comma list of objectives/continuation.")
  out: list[str] = []
  for name in names:
    if name not in valid:
      raise ValueError(f"--score: unknown score {name!r}; expected one of "
                       f"{['all', 'own', CONTINUATION, *sorted(objectives.OBJECTIVES)]}.")
    expanded = ([own_objective, *DEFAULT_OBJECTIVES, CONTINUATION] if name == "all"
                else [own_objective] if name == "own" else [name])
    for n in expanded:
      if n not in out:
        out.append(n)
  if own_objective in out:  # the run's own objective first
    out.remove(own_objective)
    out.insert(0, own_objective)
  return out


def split_continuation(document: str, prefix_chars: int, continuation_chars: int
                       ) -> tuple[str, str] | None:
  """Cuts a document into (prefix, continuation) at whitespace; None if it is too short.

  The prefix is the document up to the last whitespace at or before `prefix_chars`; the
  continuation is the following text up to the last whitespace at or before
  `continuation_chars` more characters, stripped. Tokenizer-independent, so every model
  scores the same continuation texts.
  """
  if len(document) < prefix_chars + continuation_chars + 1:
    return None
  cut = max(document.rfind(" ", 0, prefix_chars + 1), document.rfind("\n", 0, prefix_chars + 1))
  if cut <= 0:
    return None
  rest = document[cut:cut + continuation_chars + 1]
  end = max(rest.rfind(" "), rest.rfind("\n"))
  prefix, continuation = document[:cut].strip(), rest[:end].strip() if end > 0 else ""
  if not prefix or not continuation:
    return None
  return prefix, continuation


def continuation_features(prefix_ids: np.ndarray, continuation_ids: np.ndarray,
                          architecture: str, *, joined: bool) -> dict[str, np.ndarray]:
  """One unpadded continuation-scoring example in the converter layout of `architecture`.

  Args:
    prefix_ids, continuation_ids: int32[n] token ids (no EOS).
    architecture: "encoder_decoder", "prefix_lm" or "causal".
    joined: read prefix + continuation as ONE text (no EOS between them), as a model
      trained on full_lm saw text; else inputs = prefix, targets = continuation.

  Returns:
    converters.convert features; decoder_loss_weights is 1 exactly on the continuation's
    tokens (not on the prefix, the EOS between, or the final EOS).
  """
  prefix_ids = np.asarray(prefix_ids, np.int32)
  continuation_ids = np.asarray(continuation_ids, np.int32)
  if joined:
    ex = converters.convert({"inputs": np.zeros(0, np.int32),
                             "targets": np.concatenate([prefix_ids, continuation_ids])},
                            architecture)
    n = ex["decoder_target_tokens"].size  # prefix + continuation + EOS
    start = prefix_ids.size
    weights = np.zeros(n, np.float32)
    weights[start:n - 1] = 1.0
  else:
    ex = converters.convert({"inputs": prefix_ids, "targets": continuation_ids}, architecture)
    weights = ex["decoder_loss_weights"].copy()
    weights[-1] = 0.0  # the EOS after the continuation: the document goes on there
  ex["decoder_loss_weights"] = weights
  assert int(weights.sum()) == continuation_ids.size
  return ex


# ---------------------------------------------------------------------------------------
# Held-out loss per objective.

def objective_spec(spec: pipeline_lib.DataSpec, name: str, *, max_length: int | None = None
                   ) -> pipeline_lib.DataSpec:
  """The run's DataSpec with objective `name` (its default parameters) on the same text.

  The run's own objective keeps the run's spec unchanged. Other objectives keep the
  inputs length and get the targets length they need (full_lm: inputs_length).

  Raises:
    ValueError: the objective cannot run with this vocabulary / model (e.g. it needs more
      sentinels than the tokenizer has, or rows longer than learned positions allow).
  """
  if name == spec.objective:
    return spec
  params: dict[str, Any] = {}
  li = spec.inputs_length
  lt = li if name == "full_lm" else objectives.required_targets_length(
      name, inputs_length=li, **params)
  need = objectives.required_extra_ids(name, inputs_length=li, targets_length=lt, **params)
  if need > spec.extra_ids:
    raise ValueError(f"{name} at inputs_length {li} needs {need} sentinels; the tokenizer "
                     f"has {spec.extra_ids}")
  row = max(li, lt) if spec.architecture == "encoder_decoder" else li + lt
  if max_length is not None and row > max_length:
    raise ValueError(f"{name} needs rows of {row} tokens; learned positions stop at "
                     f"{max_length}")
  return dataclasses.replace(spec, objective=name, objective_params=params,
                             targets_length=int(lt))


def evaluate_objective(r: restore.Restored, spec: pipeline_lib.DataSpec, *,
                       num_batches: int | None, step_kwargs: Mapping[str, Any] | None = None,
                       progress: bool = False) -> dict[str, float]:
  """Loss / accuracy / perplexity of the restored model on `spec`'s held-out batches.

  Args:
    r: the restored run.
    spec: the data spec (the run's, or `objective_spec(...)`).
    num_batches: eval batches (None: one full pass over the held-out split).
    step_kwargs: the run's eval-step loss arguments (`HeldOutSettings.step_kwargs`).
  """
  data = pipeline_lib.DataPipeline(spec, process_index=jax.process_index(),
                                   process_count=jax.process_count(), tokenizer=r.tokenizer)
  eval_fn = jax.jit(functools.partial(steps.eval_step, model=r.model, **(step_kwargs or {})))
  with partitioning.axis_rules(r.mesh, r.rules):
    batches = cli.progress(data.eval_iterator(num_batches=num_batches), num_batches,
                        spec.objective, progress)
    acc = parts.heldout_totals(eval_fn, r.params, batches, r.mesh)  # the trainer's loop
  if acc is None:
    raise ValueError("the held-out split gave no batches.")
  values = metrics_lib.compute(acc)
  totals = metrics_lib.totals(acc)
  return {"loss": values["loss"], "cross_entropy": values["cross_entropy"],
          "accuracy": values["accuracy"], "perplexity": math.exp(min(values["cross_entropy"],
                                                                     700.0)),
          "target_tokens": totals["target_tokens"],
          "inputs_length": spec.inputs_length, "targets_length": spec.targets_length,
          "num_batches": num_batches}


# ---------------------------------------------------------------------------------------
# Continuation scoring.

def _sums_fn(model, max_segments=None):
  def sums(params, batch):
    out = score_lib.score(params, batch, model=model, max_segments=max_segments)
    return {"log_likelihood": jnp.sum(out["log_likelihood"]),
            "num_tokens": jnp.sum(out["num_tokens"]),
            "num_correct": jnp.sum(out["num_correct"])}
  return sums


def evaluate_continuation(r: restore.Restored, documents: Iterable[str], *,
                          joined: bool, prefix_chars: int = DEFAULT_PREFIX_CHARS,
                          continuation_chars: int = DEFAULT_CONTINUATION_CHARS,
                          num_examples: int = DEFAULT_NUM_EXAMPLES, batch_size: int = 32,
                          progress: bool = False) -> dict[str, float]:
  """Scores continuations given prefixes (module docstring) over held-out documents.

  Args:
    r: the restored model.
    documents: held-out texts, in a fixed order (every process the same).
    joined: prefix and continuation as one text (full_lm-trained models).
    prefix_chars, continuation_chars: the character budget of the cut.
    num_examples: at most this many documents long enough to cut are used.
    batch_size: global rows per batch (rounded up to the mesh's batch shards).

  Returns:
    examples, tokens, bytes, nll_per_token, perplexity, accuracy, bits_per_byte and the
    cut settings.
  """
  arch = r.architecture
  examples, num_bytes = [], 0
  for doc in documents:
    if len(examples) >= num_examples:
      break
    if not doc:
      continue
    pieces = split_continuation(doc, prefix_chars, continuation_chars)
    if pieces is None:
      continue
    prefix_ids, cont_ids = r.tokenizer.encode(pieces[0]), r.tokenizer.encode(pieces[1])
    if prefix_ids.size == 0 or cont_ids.size == 0:
      continue
    examples.append(continuation_features(prefix_ids, cont_ids, arch, joined=joined))
    num_bytes += len(pieces[1].encode("utf-8"))
  if not examples:
    raise ValueError(f"no held-out document is longer than prefix_chars + continuation_chars "
                     f"= {prefix_chars + continuation_chars} characters; lower them.")
  sums_fn = jax.jit(_sums_fn(r.model))
  acc = {"log_likelihood": 0.0, "num_tokens": 0.0, "num_correct": 0.0}
  for out in restore.run_batches(r, examples, sums_fn, batch_size=batch_size,
                                 desc=CONTINUATION, progress=progress):
    out = jax.device_get(out)
    for k in acc:
      acc[k] += float(out[k])
  nll, tokens = -acc["log_likelihood"], acc["num_tokens"]
  return {"examples": len(examples), "tokens": tokens, "bytes": num_bytes,
          "nll_per_token": nll / tokens, "perplexity": math.exp(min(nll / tokens, 700.0)),
          "accuracy": acc["num_correct"] / tokens,
          "bits_per_byte": score_lib.bits_per_byte(nll, num_bytes),
          "prefix_chars": prefix_chars, "continuation_chars": continuation_chars,
          "joined": joined}


# ---------------------------------------------------------------------------------------
# One run.

def evaluate_run(r: restore.Restored, settings: HeldOutSettings, *,
                 score: Sequence[str] | None = None, num_batches: int | None = -1,
                 prefix_chars: int = DEFAULT_PREFIX_CHARS,
                 continuation_chars: int = DEFAULT_CONTINUATION_CHARS,
                 num_examples: int = DEFAULT_NUM_EXAMPLES, progress: bool = False
                 ) -> dict[str, Any]:
  """Evaluates a restored run (see the module docstring).

  Args:
    r: from restore.load_run.
    settings: what the run's config says (`lm.evaluate.heldout_settings(r)`).
    score: what to evaluate (`parse_score`'s output); None = "all".
    num_batches: eval batches per objective; -1 = the run's train.eval_steps (so the own
      objective's loss reproduces training's eval_loss); None or 0 = one full pass.
    prefix_chars, continuation_chars, num_examples: the continuation yardstick.

  Returns:
    {"workdir", "step", "architecture", "objective", "results": {name: metrics}, and
    "skipped": {name: reason}} (JSON-able).
  """
  spec = settings.spec
  names = list(score) if score is not None else parse_score("all", spec.objective)
  if num_batches == -1:
    num_batches = settings.eval_steps or None
  num_batches = num_batches or None
  max_length = (r.model_config.max_length if r.model_config.position_encoding == "learned"
                else None)
  results: dict[str, Any] = {}
  skipped: dict[str, str] = {}
  own_data = None
  for name in names:
    if name == CONTINUATION:
      continue
    try:
      s = objective_spec(spec, name, max_length=max_length)
    except ValueError as e:
      skipped[name] = str(e)
      logging.warning("skipping %s: %s", name, e)
      continue
    results[name] = evaluate_objective(r, s, num_batches=num_batches,
                                       step_kwargs=settings.step_kwargs, progress=progress)
    logging.info("%s: %s", name, results[name])
  if CONTINUATION in names:
    own_data = pipeline_lib.DataPipeline(spec, tokenizer=r.tokenizer)
    source = own_data.eval_source
    if source is None:
      raise ValueError("the run has no held-out split (data.validation_fraction=0 and no "
                       "data.eval_paths); set --config.data.eval_paths=...")
    docs = (source[i] for i in range(len(source)))
    results[CONTINUATION] = evaluate_continuation(
        r, docs, joined=spec.objective == "full_lm", prefix_chars=prefix_chars,
        continuation_chars=continuation_chars, num_examples=num_examples,
        batch_size=settings.batch_size, progress=progress)
  return {"workdir": r.workdir, "step": r.step, "architecture": r.architecture,
          "objective": spec.objective, "results": results, "skipped": skipped}
