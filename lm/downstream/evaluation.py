"""Evaluate a model on a downstream task's split: decode (or rank-classify), postprocess, score.

    out = evaluate_task(model, params, tokenizer, get_task("glue_cola"), "validation",
                        data_dir="data/", batch_size=32, max_decode_length=8)
    out["metrics"]        # {"matthews_corrcoef": 41.2}  (task.compute_metrics)
    out["predictions"]    # [{"inputs": ..., "target": ..., "prediction": ...}, ...]

Decoding (the default, the T5 paper's protocol for every task) or, for tasks with `choices`,
rank classification with lm.score; all three architectures, inputs trimmed and framed as the
run trained, on one process. Also here: the results files of a run's task evaluations and the
best step's. Why decoding is the default and the files written: docs/finetuning.md,
'Evaluate a checkpoint on a task'.
"""
from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from lm import cli, generation, partitioning
from lm import score as score_lib
from lm import workdir as workdir_lib
from lm.data import converters, features, packing
from lm.downstream import task_mixtures
from lm.downstream.task import Task

EOS_ID = generation.EOS_ID


def _batch_multiple(mesh) -> int:
  """Rows of a batch must divide over the mesh's batch axes (data x fsdp)."""
  if mesh is None:
    return 1
  return math.prod(mesh.shape[a] for a in partitioning.BATCH_AXES)


def strip_decoded(tokens: np.ndarray) -> list[int]:
  """Generated ids up to (not including) the first EOS or padding. int32[M] -> list."""
  out = []
  for t in np.asarray(tokens).tolist():
    if t in (EOS_ID, generation.PAD_ID):
      break
    out.append(int(t))
  return out


def _trim_inputs(ids: np.ndarray, inputs_length: int | None,
                 framing: converters.Framing = converters.T5_FRAMING) -> np.ndarray:
  """Inputs cut so that they framed (plus their EOS in T5's framing) fit in inputs_length
  (the converter's trimming)."""
  ids = np.asarray(ids, np.int32)
  return ids if inputs_length is None else ids[:max(inputs_length - framing.overhead, 0)]


def decode_inputs(model, params, inputs: Sequence[np.ndarray], *, batch_size: int,
                  decode: generation.DecodeConfig, mesh=None,
                  rules=partitioning.DEFAULT_LOGICAL_AXIS_RULES, progress: bool = False,
                  desc: str = "decode",
                  framing: converters.Framing = converters.T5_FRAMING) -> list[list[int]]:
  """Decodes each token list (no BOS or EOS), framed by `framing`, with the model; returns
  generated ids without EOS.

  All batches have one shape ([batch_size, longest prompt]), so the decode function
  compiles once; the last batch is filled with empty prompts.
  """
  cfg = model.config
  batch_size = features.round_up(max(batch_size, 1), _batch_multiple(mesh))
  extra = len(framing.frame([0], not cfg.is_encoder_decoder)) - 1  # BOS/EOS, decoder start
  length = features.round_up(max((len(x) for x in inputs), default=1) + extra, 8)
  if cfg.position_encoding == "learned" and cfg.max_length is not None:
    need = length if cfg.is_encoder_decoder else length + decode.max_decode_length
    if need > cfg.max_length:
      raise ValueError(f"prompts of {length} tokens (+ {decode.max_decode_length} decoded) "
                       f"exceed the model's learned positions ({cfg.max_length}); lower "
                       "inputs_length or max_decode_length.")
  fn = _decode_fn(model, decode, mesh, tuple(rules))
  rng = jax.random.key(0)
  out: list[list[int]] = []
  starts = range(0, len(inputs), batch_size)
  for start in cli.progress(starts, len(starts), desc, progress):
    chunk = inputs[start:start + batch_size]
    batch = generation.prompt_batch(chunk, cfg, input_length=length, batch_size=batch_size,
                                  framing=framing)
    row_ids = np.arange(start, start + batch_size, dtype=np.int32)
    tokens, _ = fn(params, batch, rng, row_ids)
    tokens = np.asarray(jax.device_get(tokens))
    out.extend(strip_decoded(tokens[i]) for i in range(len(chunk)))
  return out


@functools.lru_cache(maxsize=8)
def _decode_fn(model, decode, mesh, rules):
  """make_decode_fn, cached: periodic evaluation during fine-tuning compiles once."""
  return generation.make_decode_fn(model, decode, mesh, rules)


def _choice_features(inputs: np.ndarray, target: np.ndarray, architecture: str,
                     framing: converters.Framing = converters.T5_FRAMING
                     ) -> dict[str, np.ndarray]:
  """One candidate in the training layout; loss weights on the target tokens and its EOS."""
  return converters.convert({"inputs": inputs, "targets": target}, architecture,
                            framing=framing)


@functools.lru_cache(maxsize=8)
def _score_fn(model):
  return jax.jit(functools.partial(score_lib.score, model=model))


def score_candidates(model, params, pairs: Sequence[tuple[np.ndarray, np.ndarray]], *,
                     batch_size: int, mesh=None,
                     rules=partitioning.DEFAULT_LOGICAL_AXIS_RULES, progress: bool = False,
                     framing: converters.Framing = converters.T5_FRAMING) -> np.ndarray:
  """log p(target + EOS | inputs) of each (inputs, target) id pair, the inputs framed by
  `framing`. float32[len(pairs)].

  One example per row (unpacked), rows padded to one shape so that scoring compiles once.
  """
  architecture = model.config.mask_type
  feats = [_choice_features(i, t, architecture, framing) for i, t in pairs]
  lengths = {s: features.round_up(max(f[k].size for f in feats), 8)
             for s, k in features.LENGTH_FEATURES.items() if k in feats[0]}
  rows = [packing.pad_example(f, lengths) for f in feats]
  batch_size = features.round_up(max(batch_size, 1), _batch_multiple(mesh))
  zeros = {k: np.zeros_like(v) for k, v in rows[0].items()}
  fn = _score_fn(model)
  out = np.zeros(len(rows), np.float32)
  starts = range(0, len(rows), batch_size)
  ctx = (partitioning.axis_rules(mesh, rules) if mesh is not None else contextlib.nullcontext())
  with ctx:
    for start in cli.progress(starts, len(starts), "rank", progress):
      chunk = rows[start:start + batch_size]
      chunk = chunk + [zeros] * (batch_size - len(chunk))
      batch = {k: np.stack([r[k] for r in chunk]) for k in chunk[0]}
      if mesh is not None:
        batch = partitioning.make_global_batch(batch, mesh)
      ll = np.asarray(jax.device_get(fn(params, batch)["log_likelihood"]))
      n = min(batch_size, len(rows) - start)
      out[start:start + n] = ll[:n]
  return out


def evaluate_task(model, params, tokenizer, task: Task, split: str = "validation", *,
                  data_dir: str | None = None, batch_size: int = 32,
                  max_decode_length: int = 64, decode: generation.DecodeConfig | None = None,
                  mesh=None, rules=partitioning.DEFAULT_LOGICAL_AXIS_RULES,
                  max_examples: int | None = None, inputs_length: int | None = None,
                  rank_classification: bool = False, progress: bool = False,
                  examples: Sequence[Mapping[str, Any]] | None = None,
                  framing: converters.Framing = converters.T5_FRAMING) -> dict[str, Any]:
  """Predicts every example of a task's split and computes the task's metrics.

  Args:
    model: the Transformer (its config decides the layout).
    params: its (unboxed) params, on `mesh` when one is given.
    tokenizer: lm.data.tokenizer.Tokenizer (encode / decode).
    task: the Task.
    split: the split to evaluate (one of task.splits).
    data_dir: where the task's files are (Task.load).
    batch_size: rows per decode / score call (rounded up to the mesh's batch shards).
    max_decode_length: the most generated tokens (EOS included) when `decode` is None.
    decode: decoding settings (default greedy, `max_decode_length`).
    mesh, rules: shard the batches over this mesh (lm.restore's); None = default device.
    max_examples: evaluate only the first N examples of the split.
    inputs_length: cut the inputs to this many tokens (EOS included), as training does.
    rank_classification: predict by ranking `task.choices` with lm.score instead of
      decoding (module docstring); the task must have choices.
    progress: tqdm progress bars.
    examples: already preprocessed examples (skips task.examples; e.g. cached ones).
    framing: how the run frames inputs and starts its decoder (the run's training framing;
      lm.restore.Restored.framing).

  Returns:
    {"metrics": {name: float}, "predictions": [{"inputs", "target", "prediction"} (+
    "scores": log-likelihood per choice for rank classification)], "num_examples",
    "method": "decode" | "rank_classification", "split"}.

  Raises:
    ValueError: unknown split, no examples, rank classification without choices.
  """
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  params = nn.meta.unbox(params)
  if examples is None:
    examples = task.examples(split, data_dir)
  examples = list(examples)
  if max_examples is not None:
    examples = examples[:max_examples]
  if not examples:
    raise ValueError(f"task {task.name!r} split {split!r} has no examples.")
  inputs = [_trim_inputs(tokenizer.encode(ex["inputs"]), inputs_length, framing)
            for ex in examples]
  predictions: list[dict[str, Any]] = []
  if rank_classification:
    if task.choices is None:
      raise ValueError(f"task {task.name!r} has no choices; rank classification needs them "
                       "(decode it instead).")
    choices = [list(task.choices(ex)) for ex in examples]
    for i, c in enumerate(choices):
      if not c:
        raise ValueError(f"task {task.name!r}: example {i} has no choices.")
    pairs, owner = [], []
    for i, (ids, cands) in enumerate(zip(inputs, choices)):
      for c in cands:
        pairs.append((ids, tokenizer.encode(c)))
        owner.append(i)
    scores = score_candidates(model, params, pairs, batch_size=batch_size, mesh=mesh,
                              rules=rules, progress=progress, framing=framing)
    texts, pos = [], 0
    for ex, cands in zip(examples, choices):
      s = scores[pos:pos + len(cands)]
      pos += len(cands)
      best = int(np.argmax(s))  # ties: the first candidate
      texts.append(cands[best])
      predictions.append({"inputs": ex["inputs"], "target": ex["targets"],
                          "prediction": cands[best], "scores": [float(x) for x in s]})
    method = "rank_classification"
  else:
    cfg = decode or generation.DecodeConfig(max_decode_length=max_decode_length)
    generated = decode_inputs(model, params, inputs, batch_size=batch_size, decode=cfg,
                              mesh=mesh, rules=rules, progress=progress, desc=task.name,
                              framing=framing)
    texts = [tokenizer.decode(ids) for ids in generated]
    predictions = [{"inputs": ex["inputs"], "target": ex["targets"], "prediction": t}
                   for ex, t in zip(examples, texts)]
    method = "decode"
  preds = [task.postprocess(t, ex) for t, ex in zip(texts, examples)]
  golds = [task.postprocess(ex["targets"], ex, is_target=True) for ex in examples]
  metrics = task.compute_metrics(golds, preds)
  return {"metrics": metrics, "predictions": predictions, "num_examples": len(examples),
          "method": method, "split": split}


def task_score(metrics: Mapping[str, float]) -> float:
  """One number per task: the mean of its metrics (T5's averaging of multi-metric tasks,
  e.g. MRPC's accuracy and F1, in the GLUE average)."""
  values = [float(v) for v in metrics.values()]
  return float(np.mean(values)) if values else float("nan")


# ---------------------------------------------------------------------------------------
# Results files (shared by `python -m lm.evaluate --task` and fine-tuning's periodic eval).

RESULTS_DIR = "eval"


def results_path(workdir, step: int):
  """`<workdir>/eval/tasks_step_<N>.json` (next to lm.evaluate's step_<N>.json)."""
  return workdir_lib.as_path(workdir) / RESULTS_DIR / f"tasks_step_{int(step)}.json"


def predictions_path(workdir, step: int, task_name: str, split: str):
  """`<workdir>/eval/tasks_step_<N>.<task>.<split>.jsonl`: one prediction per line."""
  return (workdir_lib.as_path(workdir) / RESULTS_DIR /
          f"tasks_step_{int(step)}.{task_name}.{split}.jsonl")


def _json_safe(tree):
  if isinstance(tree, Mapping):
    return {str(k): _json_safe(v) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return [_json_safe(v) for v in tree]
  if isinstance(tree, (np.floating, np.integer)):
    tree = tree.item()
  if isinstance(tree, float) and not math.isfinite(tree):
    return None
  return tree


def write_results(workdir, step: int, outputs: Mapping[str, Mapping[str, Any]], *,
                  architecture: str, extra: Mapping[str, Any] | None = None) -> Any:
  """Writes the tasks' metrics (one JSON per step) and predictions (JSONL per task).

  Args:
    workdir: the run directory (local or remote).
    step: the checkpoint step evaluated.
    outputs: {task name: evaluate_task(...)'s result}.
    architecture: the model's layout, for the record.
    extra: more top-level fields (e.g. the checkpoint source).

  Returns:
    the path of the JSON file (process 0), else None. The JSON holds "workdir", "step",
    "architecture", "results": {task: metrics} (lm.evaluate.flat_metrics reads it),
    "score": {task: mean of its metrics} and per task "num_examples", "method", "split".
  """
  import json  # pylint: disable=g-import-not-at-top
  if jax.process_index() != 0:
    return None
  path = results_path(workdir, step)
  path.parent.mkdir(parents=True, exist_ok=True)
  record = {"workdir": str(workdir_lib.as_path(workdir)), "step": int(step),
            "architecture": architecture,
            "results": {name: dict(o["metrics"]) for name, o in outputs.items()},
            "score": {name: task_score(o["metrics"]) for name, o in outputs.items()},
            "tasks": {name: {k: o[k] for k in ("num_examples", "method", "split")}
                      for name, o in outputs.items()},
            **dict(extra or {})}
  for name, o in outputs.items():
    lines = "".join(json.dumps(_json_safe(p), ensure_ascii=False) + "\n"
                    for p in o["predictions"])
    workdir_lib.write_text_atomic(predictions_path(workdir, step, name, o["split"]), lines)
  workdir_lib.write_text_atomic(path, json.dumps(_json_safe(record), indent=2,
                                                 sort_keys=True) + "\n")
  return path


# ---------------------------------------------------------------------------------------
# The best evaluated step per task (T5's reporting: `t5/evaluation/eval_utils.py`,
# `metric_group_max`).

BEST_RESULTS_FILE = "tasks_best.json"
_STEP_FILE = re.compile(r"^tasks_step_(\d+)\.json$")


def metric_groups(task_names: Iterable[str]) -> list[tuple[str, ...]]:
  """The tasks whose best step is chosen together, as T5 grouped metrics.

  Each task is its own group (its metrics are averaged, e.g. MRPC's F1 and accuracy),
  except tasks that one benchmark entry averages together (lm.downstream.task_mixtures'
  GLUE_AVERAGE / SUPER_GLUE_AVERAGE): MNLI matched and mismatched share one step, as T5's
  "MNLI" group did. Groups come in the order of their first task in `task_names`.
  """
  names = list(dict.fromkeys(task_names))
  joint: dict[str, tuple[str, ...]] = {}
  for spec in (task_mixtures.GLUE_AVERAGE, task_mixtures.SUPER_GLUE_AVERAGE):
    for parts in spec.values():
      tasks = tuple(dict.fromkeys(t for t, _ in parts))
      if len(tasks) > 1:
        for t in tasks:
          joint[t] = tasks
  groups: list[tuple[str, ...]] = []
  for name in names:
    group = tuple(t for t in joint.get(name, (name,)) if t in names)
    if group not in groups:
      groups.append(group)
  return groups


def _group_score(results: Mapping[str, Mapping[str, Any]], group: Sequence[str]) -> float:
  """Mean of every metric of the group's tasks; -inf when one is missing or not finite
  (T5 fills NaN with -1e9 before taking the best step)."""
  values = []
  for task in group:
    metrics = results.get(task)
    if not metrics:
      return -math.inf
    for v in metrics.values():
      if v is None or not math.isfinite(float(v)):
        return -math.inf
      values.append(float(v))
  return float(np.mean(values)) if values else -math.inf


def select_best(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
  """Per metric group, the evaluated step with the highest group score.

  T5 reported each task at its own best validation checkpoint (a model fine-tuned on a
  mixture is not scored at one common step): `eval_utils.metric_group_max` takes, for each
  metric group, the step where the mean of the group's metrics is highest (the earliest
  such step on ties). lm's groups are `metric_groups`.

  Args:
    records: `write_results` records ({"step", "results": {task: metrics}}), any order.

  Returns:
    {"results": {task: metrics at its group's best step}, "steps": {task: that step},
    "evaluated_steps": [every step seen, ascending]}; empty dicts when there are no records.
  """
  records = sorted(records, key=lambda r: int(r["step"]))
  names = [t for r in records for t in r["results"]]
  results: dict[str, dict[str, Any]] = {}
  steps: dict[str, int] = {}
  for group in metric_groups(names):
    together = any(all(t in r["results"] for t in group) for r in records)
    # A group whose tasks were never evaluated at one step: each task on its own.
    for sub in [group] if together else [(t,) for t in group]:
      best = None
      for r in records:  # strictly greater: the earliest best step wins ties
        if all(t in r["results"] for t in sub) and (
            best is None or _group_score(r["results"], sub) > _group_score(best["results"], sub)):
          best = r
      for task in sub:
        results[task], steps[task] = dict(best["results"][task]), int(best["step"])
  return {"results": results, "steps": steps,
          "evaluated_steps": [int(r["step"]) for r in records]}


def read_results(workdir, *, up_to_step: int | None = None) -> list[dict[str, Any]]:
  """Every `<workdir>/eval/tasks_step_<N>.json` record (N <= up_to_step when given: a run
  resumed after a kill ignores the files its killed predecessor wrote past its step)."""
  import json  # pylint: disable=g-import-not-at-top
  directory = results_path(workdir, 0).parent
  if not directory.exists():
    return []
  records = []
  for path in directory.iterdir():
    m = _STEP_FILE.match(path.name)
    if not m or (up_to_step is not None and int(m.group(1)) > up_to_step):
      continue
    record = json.loads(path.read_text())
    records.append({"step": int(m.group(1)), "results": record.get("results") or {}})
  return sorted(records, key=lambda r: r["step"])


def write_best_results(workdir, *, up_to_step: int | None = None) -> Any:
  """Writes `<workdir>/eval/tasks_best.json`: `select_best` of the run's results files,
  plus the GLUE / SuperGLUE averages (lm.downstream.task_mixtures) when every task they need is
  there. Returns its path (process 0), else None."""
  import json  # pylint: disable=g-import-not-at-top
  if jax.process_index() != 0:
    return None
  best = select_best(read_results(workdir, up_to_step=up_to_step))
  averages = {}
  for name, fn in (("glue", task_mixtures.glue_average),
                   ("super_glue", task_mixtures.super_glue_average)):
    try:
      averages[name] = fn(best["results"])
    except ValueError:  # not every task of the benchmark was evaluated
      pass
  best["averages"] = averages
  path = results_path(workdir, 0).parent / BEST_RESULTS_FILE
  path.parent.mkdir(parents=True, exist_ok=True)
  workdir_lib.write_text_atomic(path, json.dumps(_json_safe(best), indent=2, sort_keys=True)
                                + "\n")
  return path
