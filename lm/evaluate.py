r"""Evaluate checkpoints on common ground: held-out loss per objective and continuation scoring.

  python -m lm.evaluate --workdir=runs/t5_local [--step=N] [--score=all|span_corruption,...]
      [--num_batches=N] [--config.data.eval_batch_size=32 ...]
  python -m lm.evaluate --workdirs=runs/a,runs/b --output=table.md
  python -m lm.evaluate --workdir=runs/ft --task=glue_cola[,glue_sst2] [--split=validation]
      [--data_dir=DIR] [--max_examples=N] [--max_decode_length=M] [--rank_classification]
  python -m lm.evaluate --workdir=RUN --suite=nlu [--items=comments|heldout] [--blank_inputs] [--json=FILE]
      [--data_dir=DIR]

For the run's held-out split (the same validation documents training evaluated on):

  <objective>   loss (incl. the run's z-loss, as training logs eval_loss), cross_entropy,
                accuracy and perplexity = exp(cross_entropy) of the model on that
                objective's examples: the run's own objective first (with the run's
                settings, so `loss` reproduces the eval_loss training logged at that step
                with --num_batches = train.eval_steps, the default), then the others asked
                for (default span_corruption, prefix_lm, full_lm) with their default
                parameters and the run's inputs length. Losses of different objectives
                measure different tasks; compare models on the same objective.
  continuation  a yardstick for every architecture: each held-out document is cut (at
                whitespace, by characters, so the texts do not depend on the tokenizer)
                into a prefix of ~prefix_chars and a continuation of ~continuation_chars;
                the model scores the continuation given the prefix (encoder-decoder: prefix
                in the encoder; prefix LM: prefix fully visible; causal LM: prefix as
                context; a full_lm-trained model reads prefix and continuation as one
                text), loss on the continuation's tokens only (not the EOS the layout
                appends). Reported per target token (nll_per_token, perplexity, accuracy)
                and in bits per UTF-8 byte of the continuation text (bits_per_byte), which
                compares models with different tokenizers.

Results: `<workdir>/eval/step_<N>.json` (atomically, process 0), and, when the run has
`wandb_run_id.txt`, the same numbers in that wandb run under `eval/...` (wandb's own
`eval/step` axis, so evaluating an old step never collides with training's step counter;
`--wandb_mode=disabled` skips it). `--workdirs=a,b --output=table.md` evaluates several runs
and writes one Markdown table.

Downstream tasks (`--task`, docs/finetuning.md): decodes each task's split with the
checkpoint (greedy; `--rank_classification` ranks the task's choices with lm.score instead),
postprocesses and computes the task's metrics (lm.downstream.evaluation.evaluate_task).
Results: `<workdir>/eval/tasks_step_<N>.json` (+ one predictions JSONL per task) and wandb
`eval/<task>/<metric>`. `--data_dir` defaults to the run's config.finetune.data_dir.

The neutral yardstick (`--suite=nlu`, docs/yardstick.md): linear probes on frozen
representations and minimal pairs in the run's native format, each minus the same
architecture's random initialisation (lm/downstream/nlu.py holds the work). Results:
`<workdir>/eval/nlu_step_<N>.json` (and `--json=FILE`); `--blank_inputs` is the control.

Bad input (missing workdir, unknown task, unknown step, checkpoint of another architecture or vocabulary,
a shape-changing override, a malformed flag) prints one line `error: ...` and exits 2.

Why this module is long: it is the whole `lm.evaluate` command: the held-out objective pass
and continuation scoring it owns (about 300 lines), and the thin paths that print tables, write
results and log them, shared by the task evaluation whose work is in lm/downstream/evaluation.py.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.util
import json
import logging
import math
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lm import metrics as metrics_lib
from lm import partitioning, parts, restore, steps
from lm import score as score_lib
from lm import cli
from lm import config as config_lib
from lm import libtpu_env
from lm import workdir as workdir_lib
from lm.data import converters, objectives
from lm.data import pipeline as pipeline_lib
from lm.downstream import nlu_items

EVAL_DIR = "eval"
DEFAULT_OBJECTIVES = ("span_corruption", "prefix_lm", "full_lm")
CONTINUATION = "continuation"
DEFAULT_PREFIX_CHARS = 256
DEFAULT_CONTINUATION_CHARS = 128
DEFAULT_NUM_EXAMPLES = 256


# ---------------------------------------------------------------------------------------
# Pure parts.

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


def markdown_table(results: Sequence[Mapping[str, Any]]) -> str:
  """A Markdown table of several runs' results (as written to eval/step_<N>.json).

  One row per result; columns: run, architecture, objective, step, then per evaluated
  objective its cross-entropy and accuracy, and the continuation's nll per token and bits
  per byte. A value a run does not have is "–".
  """
  objective_names: list[str] = []
  has_cont = False
  for r in results:
    for name in r["results"]:
      if name == CONTINUATION:
        has_cont = True
      elif name not in objective_names:
        objective_names.append(name)
  header = ["run", "architecture", "objective", "step"]
  for name in objective_names:
    header += [f"{name} xent", f"{name} acc"]
  if has_cont:
    header += ["cont. nll/token", "cont. bits/byte"]

  def fmt(value):
    return "–" if value is None or not math.isfinite(value) else f"{value:.4f}"

  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for r in results:
    row = [os.path.basename(os.path.normpath(r["workdir"])), r["architecture"],
           r["objective"], str(r["step"])]
    for name in objective_names:
      m = r["results"].get(name) or {}
      row += [fmt(m.get("cross_entropy")), fmt(m.get("accuracy"))]
    if has_cont:
      m = r["results"].get(CONTINUATION) or {}
      row += [fmt(m.get("nll_per_token")), fmt(m.get("bits_per_byte"))]
    lines.append("| " + " | ".join(row) + " |")
  return "\n".join(lines) + "\n"


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
                       num_batches: int | None, progress: bool = False) -> dict[str, float]:
  """Loss / accuracy / perplexity of the restored model on `spec`'s held-out batches.

  Args:
    r: the restored run.
    spec: the data spec (the run's, or `objective_spec(...)`).
    num_batches: eval batches (None: one full pass over the held-out split).
  """
  data = pipeline_lib.DataPipeline(spec, process_index=jax.process_index(),
                                   process_count=jax.process_count(), tokenizer=r.tokenizer)
  # The training run's eval step: its loss settings (lm.config.eval_step_kwargs).
  kwargs = (config_lib.eval_step_kwargs(r.config)
            if r.config is not None and "loss" in r.config else {})
  eval_fn = jax.jit(functools.partial(steps.eval_step, model=r.model, **kwargs))
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

def evaluate(r: restore.Restored, *, score: Sequence[str] | None = None,
             num_batches: int | None = -1, prefix_chars: int = DEFAULT_PREFIX_CHARS,
             continuation_chars: int = DEFAULT_CONTINUATION_CHARS,
             num_examples: int = DEFAULT_NUM_EXAMPLES, progress: bool = False
             ) -> dict[str, Any]:
  """Evaluates a restored run (see the module docstring).

  Args:
    r: from restore.load_run.
    score: what to evaluate (`parse_score`'s output); None = "all".
    num_batches: eval batches per objective; -1 = the run's train.eval_steps (so the own
      objective's loss reproduces training's eval_loss); None or 0 = one full pass.
    prefix_chars, continuation_chars, num_examples: the continuation yardstick.

  Returns:
    {"workdir", "step", "architecture", "objective", "results": {name: metrics}, and
    "skipped": {name: reason}} (JSON-able).
  """
  if r.config is None:
    raise ValueError("evaluate needs a training run (restore.load_run), not an HF directory.")
  spec = config_lib.data_spec(r.config)
  names = list(score) if score is not None else parse_score("all", spec.objective)
  if num_batches == -1:
    num_batches = int(r.config.train.eval_steps) or None
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
    results[name] = evaluate_objective(r, s, num_batches=num_batches, progress=progress)
    logging.info("%s: %s", name, results[name])
  if CONTINUATION in names:
    own_data = pipeline_lib.DataPipeline(spec, tokenizer=r.tokenizer)
    source = own_data.eval_source
    if source is None:
      raise ValueError("the run has no held-out split (data.validation_fraction=0 and no "
                       "data.eval_paths); set --config.data.eval_paths=...")
    docs = (source[i] for i in range(len(source)))
    batch_size = int(r.config.data.eval_batch_size or r.config.data.batch_size)
    results[CONTINUATION] = evaluate_continuation(
        r, docs, joined=spec.objective == "full_lm", prefix_chars=prefix_chars,
        continuation_chars=continuation_chars, num_examples=num_examples,
        batch_size=batch_size, progress=progress)
  return {"workdir": r.workdir, "step": r.step, "architecture": r.architecture,
          "objective": spec.objective, "results": results, "skipped": skipped}


def results_path(workdir: str, step: int) -> str:
  return os.path.join(workdir, EVAL_DIR, f"step_{step}.json")


def write_results(result: Mapping[str, Any]) -> str | None:
  """Writes `<workdir>/eval/step_<N>.json` atomically (process 0 only); returns the path."""
  if jax.process_index() != 0:
    return None
  path = results_path(result["workdir"], result["step"])
  target = workdir_lib.as_path(path)  # local or gs://
  target.parent.mkdir(parents=True, exist_ok=True)
  workdir_lib.write_text_atomic(
      target, json.dumps(_json_safe(result), indent=2, sort_keys=True) + "\n")
  return path


def _json_safe(tree):
  if isinstance(tree, Mapping):
    return {k: _json_safe(v) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return [_json_safe(v) for v in tree]
  if isinstance(tree, float) and not math.isfinite(tree):
    return None
  return tree


def flat_metrics(result: Mapping[str, Any]) -> dict[str, float]:
  """{"eval/<name>/<metric>": value} of the numeric results (for wandb)."""
  out = {}
  for name, values in result["results"].items():
    for k, v in values.items():
      if isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None:
        out[f"eval/{name}/{k}"] = float(v)
  return out


def log_to_wandb(result: Mapping[str, Any], config, mode: str | None = None) -> bool:
  """Logs to the run's wandb run (if it has wandb_run_id.txt); returns True if logged."""
  from lm import writers  # pylint: disable=g-import-not-at-top
  workdir = result["workdir"]
  if jax.process_index() != 0 or not os.path.exists(os.path.join(workdir, writers.RUN_ID_FILE)):
    return False
  w = config.wandb
  mode = mode or w.mode
  if writers.resolve_wandb_mode(mode) == "disabled":
    return False
  writer = writers.WandbWriter(workdir, mode=mode, project=w.project, entity=w.entity,
                               group=w.group, name=w.name, tags=tuple(w.tags or ()),
                               notes=w.notes or "", config=None)
  try:
    if writer.run is None:
      return False
    writer.run.define_metric("eval/step")
    writer.run.define_metric("eval/*", step_metric="eval/step")
    writer.run.log({"eval/step": int(result["step"]), **flat_metrics(result)})
  finally:
    writer.close()
  return True


# ---------------------------------------------------------------------------------------
# Command line.

def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      prog="python -m lm.evaluate",
      description="Evaluate checkpoints of lm runs: held-out loss, accuracy and perplexity "
                  "per objective, and continuation scoring (per token and bits per byte) "
                  "that compares every architecture and tokenizer. Writes "
                  "<workdir>/eval/step_<N>.json. Extra --config.<field>=<value> flags "
                  "override the run's config (not the model's shapes).",
      epilog="Example: python -m lm.evaluate --workdir=runs/t5_local --score=all")
  p.add_argument("--workdir", help="the run directory to evaluate")
  p.add_argument("--workdirs", help="comma-separated run directories (with --output)")
  p.add_argument("--output", help="write a Markdown table of the results here")
  p.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
  p.add_argument("--score", default="all",
                 help="all (default: own objective, span_corruption, prefix_lm, full_lm, "
                      "continuation) or a comma list of objectives / 'own' / 'continuation'")
  p.add_argument("--num_batches", type=int, default=-1,
                 help="held-out batches per objective; -1 (default) = the run's "
                      "train.eval_steps, as training evaluated; 0 = the whole held-out split")
  p.add_argument("--prefix_chars", type=int, default=DEFAULT_PREFIX_CHARS,
                 help="continuation scoring: characters of context (cut at whitespace)")
  p.add_argument("--continuation_chars", type=int, default=DEFAULT_CONTINUATION_CHARS,
                 help="continuation scoring: characters scored (cut at whitespace)")
  p.add_argument("--num_examples", type=int, default=DEFAULT_NUM_EXAMPLES,
                 help="continuation scoring: held-out documents used")
  t = p.add_argument_group("downstream tasks (instead of --score)")
  t.add_argument("--task", help="comma-separated task names (lm.downstream.task.task_names())")
  t.add_argument("--split", default="validation", help="the tasks' split (default validation)")
  t.add_argument("--data_dir", default=None,
                 help="where the tasks' files are (default: the run's config.finetune.data_dir)")
  t.add_argument("--max_examples", type=int, default=None,
                 help="evaluate only the first N examples of each task")
  t.add_argument("--max_decode_length", type=int, default=None,
                 help="most generated tokens (default: the run's data.targets_length)")
  t.add_argument("--batch_size", type=int, default=None,
                 help="rows per decode call (default: the run's eval batch size)")
  t.add_argument("--rank_classification", action="store_true",
                 help="rank the task's choices by log-likelihood instead of decoding")
  n = p.add_argument_group("the neutral yardstick (instead of --score)")
  n.add_argument("--suite", choices=("nlu",), default=None,
                 help="nlu: probes and native minimal pairs (docs/yardstick.md); writes "
                      "<workdir>/eval/nlu_step_<N>.json")
  n.add_argument("--items", choices=nlu_items.ITEM_SOURCES, default=None,
                 help="--suite=nlu's item source: comments, the standard library's comments "
                      "(the default without --data_dir); heldout, the held-out documents of "
                      "--data_dir (its default) or of the embedded corpus")
  n.add_argument("--blank_inputs", action="store_true",
                 help="--suite=nlu's blank-input control: probe texts and pair inputs empty")
  n.add_argument("--json", default=None, help="--suite=nlu: also write the result here")
  p.add_argument("--mesh_shape", default=None,
                 help="(data, fsdp, tensor) sizes, e.g. '-1,1,1' (default: all devices on data)")
  p.add_argument("--wandb_mode", default=None, choices=("auto", "online", "offline", "disabled"),
                 help="wandb mode for logging into the run's wandb run (default: the run's)")
  p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                 help="tqdm progress bars (default: when stderr is a terminal)")
  g = p.add_argument_group("multi-process (as lm.main; any process count, not only "
                           "training's)")
  g.add_argument("--distributed", action="store_true",
                 help="call jax.distributed.initialize() with auto-detection (TPU pod, "
                      "SLURM; implied there and by --coordinator_address)")
  g.add_argument("--coordinator_address", help="host:port of process 0")
  g.add_argument("--num_processes", type=int, help="processes in the job")
  g.add_argument("--process_id", type=int, help="this process's index")
  g.add_argument("--cpu_collectives", default="gloo", choices=("gloo", "mpi", "none"),
                 help="collectives implementation for multi-process CPU runs")
  return p


def flag_problem(args: argparse.Namespace) -> str | None:
  """What is wrong with the numeric flags (out of range), or None."""
  if args.step is not None and args.step < 0:
    return f"--step must be >= 0 (a checkpoint step), got {args.step}"
  if args.num_batches < -1:
    return (f"--num_batches must be >= 1, or 0 (the whole held-out split) or -1 (the run's "
            f"train.eval_steps), got {args.num_batches}")
  for name in ("prefix_chars", "continuation_chars", "num_examples", "max_examples",
               "max_decode_length", "batch_size", "num_processes"):
    value = getattr(args, name)
    if value is not None and value < 1:
      return f"--{name} must be >= 1, got {value}"
  if args.process_id is not None and not (
      0 <= args.process_id < (args.num_processes or args.process_id + 1)):
    return (f"--process_id must be in [0, --num_processes), got {args.process_id} "
            f"(--num_processes={args.num_processes})")
  return None


def evaluate_tasks(r: restore.Restored, names: Sequence[str], *, split: str = "validation",
                   data_dir: str | None = None, max_examples: int | None = None,
                   max_decode_length: int | None = None, batch_size: int | None = None,
                   rank_classification: bool = False, progress: bool = False
                   ) -> dict[str, Any]:
  """Evaluates a restored model on downstream tasks ({task: evaluate_task result})."""
  from lm.downstream import evaluation  # pylint: disable=g-import-not-at-top
  from lm.downstream import task as task_lib  # pylint: disable=g-import-not-at-top
  d = r.config.data if r.config is not None else None
  ft = r.config.get("finetune") if r.config is not None else None
  if data_dir is None and ft is not None:
    data_dir = ft.get("data_dir")
  max_decode_length = max_decode_length or (int(d.targets_length) if d is not None else 64)
  batch_size = batch_size or (int(d.eval_batch_size or d.batch_size) if d is not None else 32)
  inputs_length = int(d.inputs_length) if d is not None and d.inputs_length > 0 else None
  out = {}
  for name in names:
    task = task_lib.get_task(name)
    out[name] = evaluation.evaluate_task(
        r.model, r.params, r.tokenizer, task, split, data_dir=data_dir, batch_size=batch_size,
        max_decode_length=max_decode_length, mesh=r.mesh, rules=r.rules,
        max_examples=max_examples, inputs_length=inputs_length,
        rank_classification=rank_classification, progress=progress, framing=r.framing)
    logging.info("%s: %s", name, out[name]["metrics"])
  return out


def _run_tasks(args, workdir: str, overrides: Sequence[str], progress: bool) -> None:
  """`--task`: restore, evaluate each task, write eval/tasks_step_<N>.json, log to wandb."""
  from lm.downstream import evaluation  # pylint: disable=g-import-not-at-top
  from lm.downstream import task as task_lib  # pylint: disable=g-import-not-at-top
  # config.finetune.tasks' form (a rate is allowed and unused); before restoring: a typo
  # fails fast.
  names = [name for name, _ in task_lib.parse_tasks(
      args.task, empty="--task is empty; pass task names, e.g. --task=glue_cola.")]
  if args.max_examples is not None and args.max_examples <= 0:
    raise ValueError(f"--max_examples must be positive, got {args.max_examples}.")
  r = restore.load_run(workdir, step=args.step, overrides=overrides, mesh_shape=args.mesh_shape)
  outputs = evaluate_tasks(r, names, split=args.split, data_dir=args.data_dir,
                           max_examples=args.max_examples,
                           max_decode_length=args.max_decode_length, batch_size=args.batch_size,
                           rank_classification=args.rank_classification, progress=progress)
  path = evaluation.write_results(r.workdir, r.step, outputs, architecture=r.architecture,
                                  extra={"source": r.source})
  result = {"workdir": r.workdir, "step": r.step,
            "results": {n: o["metrics"] for n, o in outputs.items()}}
  log_to_wandb(result, r.config, args.wandb_mode)
  if jax.process_index() == 0:
    print(json.dumps({"written": str(path), **flat_metrics(result)}, indent=1))


def _run_suite(args, workdirs: Sequence[str], overrides: Sequence[str], progress: bool) -> int:
  """`--suite=nlu`: lm.downstream.nlu.run_suite on one run, then a short table."""
  from lm.downstream import nlu  # pylint: disable=g-import-not-at-top
  if args.task is not None or args.workdirs or args.output:
    raise ValueError("--suite=nlu takes one --workdir, without --task, --workdirs or --output.")
  if importlib.util.find_spec("sklearn") is None:
    raise ValueError("--suite=nlu fits its probes with scikit-learn, which is not installed: "
                     "pip install -e '.[downstream]'.")
  nlu.item_source(args.items, args.data_dir)  # a bad --items fails before the run loads
  r = restore.load_run(workdirs[0], step=args.step, overrides=overrides,
                       mesh_shape=args.mesh_shape)
  d = r.config.data
  result = nlu.run_suite(r, data_dir=args.data_dir, items=args.items,
                         blank_inputs=args.blank_inputs,
                         json_path=args.json, progress=progress,
                         batch_size=args.batch_size or int(d.eval_batch_size or d.batch_size))
  if jax.process_index() == 0:
    print(f"wrote {result['written']}" + (f" and {args.json}" if args.json else ""))
    print(nlu.table(result))
  return 0


def run(argv: Sequence[str] | None = None) -> int:
  """Command-line entry: returns the exit status (2 on bad input)."""
  parser = _parser()
  args, rest = parser.parse_known_args(argv)
  overrides = [a for a in rest if a.startswith("--config.")]
  unknown = [a for a in rest if not a.startswith("--config.")]
  try:
    if unknown:
      raise ValueError(f"unknown arguments {unknown}; see --help.")
    if flag_problem(args):
      raise ValueError(flag_problem(args))
    cli.initialize_distributed(
        distributed=args.distributed, coordinator_address=args.coordinator_address,
        num_processes=args.num_processes, process_id=args.process_id,
        cpu_collectives=args.cpu_collectives)
    if bool(args.workdir) == bool(args.workdirs):
      raise ValueError("pass exactly one of --workdir=RUN or --workdirs=RUN1,RUN2,...")
    workdirs = [args.workdir] if args.workdir else [w for w in args.workdirs.split(",") if w]
    if args.output is None and args.workdirs:
      raise ValueError("--workdirs needs --output=table.md")
    for name in ("prefix_chars", "continuation_chars", "num_examples"):
      if getattr(args, name) <= 0:
        raise ValueError(f"--{name} must be positive, got {getattr(args, name)}.")
    for w in workdirs:  # fail before any work on a missing run
      if not os.path.isdir(w):
        raise restore.RunNotFoundError(f"workdir {os.path.abspath(w)} does not exist.")
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    if args.suite is not None:
      return _run_suite(args, workdirs, overrides, progress)
    if args.blank_inputs or args.json or args.items:
      raise ValueError("--blank_inputs, --items and --json go with --suite=nlu.")
    if args.task is not None:
      if args.output:
        raise ValueError("--output (a Markdown table) is not supported with --task.")
      for w in workdirs:
        _run_tasks(args, w, overrides, progress)
      return 0
    results = []
    for w in workdirs:
      r = restore.load_run(w, step=args.step, overrides=overrides, mesh_shape=args.mesh_shape)
      names = parse_score(args.score, r.config.data.objective)
      result = evaluate(r, score=names, num_batches=args.num_batches,
                        prefix_chars=args.prefix_chars,
                        continuation_chars=args.continuation_chars,
                        num_examples=args.num_examples, progress=progress)
      path = write_results(result)
      log_to_wandb(result, r.config, args.wandb_mode)
      results.append(result)
      if jax.process_index() == 0:
        print(json.dumps({"written": path, **flat_metrics(result)}, indent=1))
    if args.output and jax.process_index() == 0:
      workdir_lib.write_text_atomic(workdir_lib.as_path(args.output), markdown_table(results))
      print(f"wrote {args.output}")
  except cli.BAD_INPUT_ERRORS as e:
    return cli.bad_input_exit(e)
  return 0


def main() -> None:
  libtpu_env.quiet_libtpu_off_tpu()
  logging.getLogger().setLevel(logging.WARNING)
  for noisy in ("absl", "jax._src", "orbax", "etils", "grain"):
    logging.getLogger(noisy).setLevel(logging.ERROR)
  sys.exit(run())


if __name__ == "__main__":
  main()
