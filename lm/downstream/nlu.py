r"""The neutral yardstick's instruments (issue #31): linear probes and native minimal pairs.

    python -m lm.evaluate --workdir=RUN --suite=nlu [--blank_inputs] [--json=FILE]

What lives here: the probe (`probe`, scikit-learn ridge on standardised features,
cross-validated by document), the native minimal-pair formats (`pair_example`, one per
pre-training objective, built with lm/data/noise.py's own functions) and the model passes
at the edge (`representations`, `pair_margins`, `random_init`, `evaluate_suite`). What does
not: the item sets (lm/downstream/nlu_items.py) and the contrasts between points
(lm/downstream/contrasts.py). The narrative: docs/yardstick.md, "Instruments".
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lm import cli, partitioning, restore
from lm import workdir as workdir_lib
from lm import score as score_lib
from lm.data import converters, corpus, features, noise
from lm.downstream import contrasts, nlu_items
from lm.model.layers import Embed
from lm.model.transformer import Transformer, TransformerLayer

SUITE = "nlu"
RANDOM_INIT_SEED = 0  # the random-initialisation baseline's params: jax.random.key(0)
DESHUFFLE_SEED = 0  # the fixed permutation of the deshuffling format's inputs
PROBE_FOLDS = 5

# The pre-training objective -> the minimal-pair format its model is scored in.
PAIR_FORMATS = {
    "full_lm": "full_lm",
    "prefix_lm": "prefix_lm",
    "span_corruption": "span_corruption",
    "iid_replace_spans": "span_corruption",
    "drop_tokens": "drop_tokens",
    "bert": "masked",
    "mass": "masked",
    "deshuffle": "deshuffle",
}
FALLBACK_FORMAT = "span_corruption"  # mixture (UL2) and anything else


def pair_format(objective: str | None) -> str:
  """The minimal-pair format of a run trained on `objective` (FALLBACK_FORMAT if none)."""
  return PAIR_FORMATS.get(objective, FALLBACK_FORMAT)


# ---------------------------------------------------------------------------------------
# Pure parts: probes.

def probe(features: np.ndarray, labels: np.ndarray, groups: np.ndarray, *,
          folds: int = PROBE_FOLDS, seed: int = 0) -> dict[str, Any]:
  """Out-of-fold accuracy of a linear probe (standardise + ridge classifier).

  Closed-form ridge (RidgeClassifier, alpha 1) on standardised features, cross-validated
  by `groups` (no document in two folds; the folds shuffled by `seed`): StratifiedGroupKFold
  when every class has at least `folds` items, else GroupKFold. The probe learns no class
  prior (classes weighted to balance, no intercept): a training fold's majority is the
  test fold's minority when folds are cut by document, so a prior would push a probe that
  learned nothing under chance; without one, identical features score exactly chance on
  a balanced set (the blank-input control).

  Args:
    features: float[N, D].
    labels: int[N] classes.
    groups: int[N] cross-validation groups (documents).
    folds: number of folds (at most the number of distinct groups).
    seed: the folds' shuffle.

  Returns:
    {"accuracy": percent, "per_item": int[N] 0/1 out-of-fold correctness,
     "predictions": int[N]}.

  Raises:
    ValueError: mismatched lengths, fewer than 2 groups or fewer than 2 classes.
  """
  # pylint: disable-next=g-import-not-at-top
  from sklearn import linear_model, model_selection, pipeline, preprocessing
  x = np.asarray(features, np.float64)
  y, g = np.asarray(labels), np.asarray(groups)
  if x.ndim != 2 or not x.shape[0] == y.shape[0] == g.shape[0]:
    raise ValueError(f"probe needs features [N, D], labels [N], groups [N]; got "
                     f"{x.shape}, {y.shape}, {g.shape}")
  if np.unique(g).size < 2 or np.unique(y).size < 2:
    raise ValueError(f"probe needs at least 2 documents and 2 classes; got "
                     f"{np.unique(g).size} documents, {np.unique(y).size} classes")
  model = pipeline.make_pipeline(preprocessing.StandardScaler(), linear_model.RidgeClassifier(
      alpha=1.0, class_weight="balanced", fit_intercept=False))
  k = min(folds, np.unique(g).size)
  # Stratified where every class can sit in every fold (folds as alike as they can be).
  split = (model_selection.StratifiedGroupKFold if np.unique(y, return_counts=True)[1].min() >= k
           else model_selection.GroupKFold)
  cv = split(n_splits=k, shuffle=True, random_state=seed)
  predictions = model_selection.cross_val_predict(model, x, y, groups=g, cv=cv)
  correct = (predictions == y).astype(np.int64)
  return {"accuracy": 100.0 * float(correct.mean()), "per_item": correct,
          "predictions": predictions}


def probe_layers(layers: np.ndarray, labels: np.ndarray, groups: np.ndarray, *,
                 folds: int = PROBE_FOLDS, seed: int = 0) -> dict[str, Any]:
  """`probe` on every layer: the last layer's result and the best layer.

  Args:
    layers: float[num_layers + 1, N, D] (`representations`).
    labels, groups: int[N].

  Returns:
    {"accuracy": the last layer's percent, "per_item": its int[N] correctness,
     "best_layer": index of the most accurate layer (the first on ties),
     "best_layer_accuracy": its percent, "layer_accuracy": [percent per layer]}.
  """
  results = [probe(layer, labels, groups, folds=folds, seed=seed) for layer in layers]
  accuracies = [res["accuracy"] for res in results]
  best = int(np.argmax(accuracies))
  return {"accuracy": accuracies[-1], "per_item": results[-1]["per_item"],
          "best_layer": best, "best_layer_accuracy": accuracies[best],
          "layer_accuracy": accuracies}


# ---------------------------------------------------------------------------------------
# Pure parts: minimal pairs in each objective's own format.

def split_pair(good: np.ndarray, bad: np.ndarray) -> tuple[int, int]:
  """(p, s): the lengths of the common token prefix and suffix of two token sequences.

  The differing spans are good[p:len(good) - s] and bad[p:len(bad) - s]; both are widened
  by one shared token (the last of the prefix, else the first of the suffix) when either
  would be empty, so every format has a non-empty span to mask on both sides.

  Raises:
    ValueError: the two sequences are equal.
  """
  good, bad = np.asarray(good), np.asarray(bad)
  if good.shape == bad.shape and np.array_equal(good, bad):
    raise ValueError("the two sentences of a minimal pair tokenize to the same tokens")
  n = min(good.size, bad.size)
  p = 0
  while p < n and good[p] == bad[p]:
    p += 1
  s = 0
  while s < n - p and good[good.size - 1 - s] == bad[bad.size - 1 - s]:
    s += 1
  if good.size - p - s == 0 or bad.size - p - s == 0:
    if p > 0:
      p -= 1
    else:
      s -= 1
  return p, s


def pair_example(good: np.ndarray, bad: np.ndarray, fmt: str, *, vocab_size: int,
                 num_extra_ids: int = noise.DEFAULT_NUM_EXTRA_IDS
                 ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
  """The {inputs, targets} examples scoring the two candidates in format `fmt`.

  Tokens: good = P + G + S, bad = P + B + S (`split_pair`). The inputs are identical for
  both candidates; what differs is the targets:
    full_lm          inputs [], targets the whole sentence.
    prefix_lm        inputs P, targets G + S (B + S).
    span_corruption  inputs P <s0> S (noise_span_to_unique_sentinel with the span as
                     noise), targets nonnoise_span_to_unique_sentinel of the candidate:
                     <s0> G <s1> (a quirk kept from T5: with P empty, G <s0>).
    drop_tokens      inputs P + S (drop_noise_tokens), targets G (drop_nonnoise_tokens).
    masked           (BERT, MASS) inputs P + max(|G|, |B|) mask tokens + S
                     (noise_token_to_sentinel: the input does not reveal which candidate),
                     targets the whole candidate.
    deshuffle        inputs a fixed permutation (permute_noise_tokens, DESHUFFLE_SEED) of
                     P + S, targets the whole candidate.
  Example (span_corruption, V = 128): good 5 6 7 9, bad 5 6 8 9 -> inputs 5 6 127 9,
  targets 127 7 126 and 127 8 126.

  Args:
    good, bad: int32[n] token ids (no EOS).
    fmt: a value of PAIR_FORMATS.
    vocab_size: the tokenizer's vocabulary (sentinel k = vocab_size - 1 - k).
    num_extra_ids: the tokenizer's sentinels.

  Returns:
    (good example, bad example), each {"inputs": int32[...], "targets": int32[...]}.
  """
  good, bad = np.asarray(good, np.int32), np.asarray(bad, np.int32)
  p, s = split_pair(good, bad)
  kw = dict(vocab_size=vocab_size, num_extra_ids=num_extra_ids)

  def span_mask(tokens):  # bool[n]: the candidate's differing span
    mask = np.zeros(tokens.size, bool)
    mask[p:tokens.size - s] = True
    return mask

  out = []
  for c in (good, bad):
    mask = span_mask(c)
    if fmt == "full_lm":
      inputs, targets = np.zeros(0, np.int32), c
    elif fmt == "prefix_lm":
      inputs, targets = c[:p], c[p:]
    elif fmt == "span_corruption":
      inputs = noise.noise_span_to_unique_sentinel(c, mask, **kw)
      targets = noise.nonnoise_span_to_unique_sentinel(c, mask, **kw)
    elif fmt == "drop_tokens":
      inputs, targets = noise.drop_noise_tokens(c, mask), noise.drop_nonnoise_tokens(c, mask)
    elif fmt == "masked":
      width = max(good.size, bad.size) - p - s
      template = np.concatenate([c[:p], np.full(width, noise.NUM_RESERVED_TOKENS, np.int32),
                                 c[c.size - s:]])
      template_mask = np.zeros(template.size, bool)
      template_mask[p:p + width] = True
      inputs = noise.noise_token_to_sentinel(template, template_mask, vocab_size=vocab_size)
      targets = c
    elif fmt == "deshuffle":
      shared = noise.drop_noise_tokens(c, mask)
      inputs = noise.permute_noise_tokens(shared, np.ones(shared.size, bool),
                                          np.random.default_rng(DESHUFFLE_SEED))
      targets = c
    else:
      raise ValueError(f"unknown pair format {fmt!r}; expected one of "
                       f"{sorted(set(PAIR_FORMATS.values()))}")
    out.append({"inputs": np.asarray(inputs, np.int32), "targets": np.asarray(targets, np.int32)})
  assert np.array_equal(out[0]["inputs"], out[1]["inputs"]), (fmt, out)
  return out[0], out[1]


def pair_outcomes(margins: np.ndarray) -> np.ndarray:
  """float[N] per pair: 1 if log p(good) > log p(bad), 0.5 on a tie, else 0."""
  margins = np.asarray(margins, np.float64)
  return np.where(margins > 0, 1.0, np.where(margins == 0, 0.5, 0.0))


# ---------------------------------------------------------------------------------------
# Model passes (under the run's mesh and axis rules).

def bucket_length(n: int) -> int:
  """The row length a text of n tokens is padded to: n rounded up to a multiple of 16 up to
  64, of 32 up to 128, of 64 up to 256, ... (under 16 tokens of padding, or a quarter of n).
  """
  step = max(16, 2 ** (max(n, 1).bit_length() - 3))
  return features.round_up(max(n, 1), step)


def length_buckets(examples: Sequence[Mapping[str, np.ndarray]], max_length: int | None = None
                   ) -> list[tuple[dict[str, int], np.ndarray]]:
  """Groups examples by the row lengths they pad to (`bucket_length` of each stack).

  Args:
    examples: N converter features (encoder_input_tokens and/or decoder_target_tokens).
    max_length: a cap on the bucket lengths (the model's learned positions), never below
      an example's own length rounded up to 8.

  Returns:
    [(lengths {stack: row length}, int64[n] example indices in input order)], by lengths.
  """
  stacks = [(s, k) for s, k in features.LENGTH_FEATURES.items() if k in examples[0]]

  def bound(n: int) -> int:
    b = bucket_length(n)
    return b if max_length is None else max(min(b, max_length), features.round_up(max(n, 1), 8))

  keys = [tuple(bound(e[k].size) for _, k in stacks) for e in examples]
  groups: dict[tuple[int, ...], list[int]] = {}
  for i, key in enumerate(keys):
    groups.setdefault(key, []).append(i)
  return [(dict(zip([s for s, _ in stacks], key)), np.asarray(groups[key], np.int64))
          for key in sorted(groups)]


def _batches(r: restore.Restored, examples: Sequence[Mapping[str, np.ndarray]],
             batch_size: int, fn, desc: str, progress: bool) -> Any:
  """fn over every example, rows of like length together (`length_buckets`), gathered to
  every process and put back in the examples' order.

  fn(params, batch) -> a pytree of arrays with leading axis B (the global batch), jitted
  (cached per model, so the trained and random-init passes compile once per length).

  Returns:
    fn's pytree with leading axis N = len(examples), NumPy.
  """
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  cfg = r.model_config
  cap = cfg.max_length if cfg.position_encoding == "learned" else None
  parts, order = [], []
  buckets = length_buckets(examples, cap)
  bar = cli.progress_bar(sum(restore.num_batches(r, len(idx), batch_size)
                             for _, idx in buckets), desc, progress)   # one for every bucket
  try:
    for lengths, idx in buckets:
      outs = restore.run_batches(r, [examples[i] for i in idx], fn, batch_size=batch_size,
                                 lengths=lengths, bar=bar)
      gathered = [jax.tree.map(np.asarray, multihost_utils.process_allgather(o, tiled=True))
                  for o in outs]
      parts.append(jax.tree.map(lambda *xs, n=len(idx): np.concatenate(xs)[:n], *gathered))
      order.append(idx)
  finally:
    bar.close()
  inverse = np.argsort(np.concatenate(order), kind="stable")
  return jax.tree.map(lambda *xs: np.concatenate(xs)[inverse], *parts)


def _capture(module, method_name: str) -> bool:
  return method_name == "__call__" and isinstance(module, (TransformerLayer, Embed))


def layer_states(model: Transformer, params: Any, batch: Mapping[str, Any]) -> jax.Array:
  """Mean-pooled states of the stack that reads the text, per layer.

  The encoder stack for encoder-decoder models; the decoder stack (over the whole row) for
  causal and prefix LM. Row 0 is the token embeddings, row i in 1..L-1 layer i's output,
  row L the stack's output (after its final norm: what the head or the cross-attention
  reads). Pooled over the row's non-padding positions.

  Args:
    model: the Transformer (scanned or unscanned layers).
    params: its params.
    batch: unpadded-per-row features: encoder_input_tokens int32[B, Le] (encoder-decoder)
      or decoder_* int32[B, L] (decoder-only), 0 is padding.

  Returns:
    float32[L + 1, B, D].
  """
  cfg = model.config
  if cfg.is_encoder_decoder:
    method, valid = Transformer.encode, batch["encoder_input_tokens"] != 0
    stack = "decoder" if cfg.shared_encoder_decoder else "encoder"
  else:
    method, valid = Transformer.final_hidden, batch["decoder_target_tokens"] != 0
    stack = "decoder"
  final, state = model.apply({"params": params}, batch, method=method,
                             capture_intermediates=_capture, mutable=["intermediates"])
  inter = state["intermediates"]
  embedded = inter["token_embedder"]["__call__"][0]
  layers = inter[stack]
  if "layers" in layers:  # scanned: one stacked output [L, B, T, D]
    stacked = layers["layers"]["__call__"][0][0]
  else:
    stacked = jnp.stack([layers[f"layers_{i}"]["__call__"][0][0]
                         for i in range(stacked_count(layers))])
  states = jnp.concatenate([embedded[None], stacked[:-1], final[None]]).astype(jnp.float32)
  weights = valid.astype(jnp.float32)
  pooled = jnp.einsum("kbtd,bt->kbd", states, weights)
  return pooled / jnp.maximum(weights.sum(-1), 1.0)[None, :, None]


def stacked_count(layers: Mapping[str, Any]) -> int:
  return sum(1 for k in layers if k.startswith("layers_"))


@functools.lru_cache(maxsize=8)
def _states_fn(model: Transformer):
  """jit of layer_states with the batch axis first: float32[B, L + 1, D]."""
  return jax.jit(lambda params, batch: jnp.moveaxis(layer_states(model, params, batch), 1, 0))


@functools.lru_cache(maxsize=8)
def _score_fn(model: Transformer):
  """jit of lm.score's log-likelihood: float32[B]."""
  return jax.jit(
      lambda params, batch: score_lib.score(params, batch, model=model)["log_likelihood"])


def text_features(ids: np.ndarray, architecture: str) -> dict[str, np.ndarray]:
  """The features under which a text is read for its representation (converter layout).

  Encoder-decoder: the text (+ EOS) in the encoder. Prefix LM: the text as the visible
  prefix (inputs). Causal: the text as the row. An empty text still has its EOS (or BOS),
  so a blank input gives one constant representation.
  """
  ids = np.asarray(ids, np.int32)
  empty = np.zeros(0, np.int32)
  if architecture == "causal":
    return converters.convert({"inputs": empty, "targets": ids}, architecture)
  return converters.convert({"inputs": ids, "targets": empty}, architecture)


def representations(r: restore.Restored, texts: Sequence[str], *, batch_size: int = 32,
                    progress: bool = False) -> np.ndarray:
  """Mean-pooled hidden states of each text, per layer (`layer_states`).

  Args:
    r: the restored model.
    texts: N strings.
    batch_size: global rows per forward pass.

  Returns:
    float32[num_layers + 1, N, d_model] (num_layers of the stack that reads the text).
  """
  examples = [text_features(r.tokenizer.encode(t), r.architecture) for t in texts]
  states = _batches(r, examples, batch_size, _states_fn(r.model), "representations", progress)
  return np.moveaxis(states, 0, 1).astype(np.float32)


def pair_margins(r: restore.Restored, pairs: Sequence[Any], *, fmt: str | None = None,
                 blank_inputs: bool = False, batch_size: int = 32,
                 progress: bool = False) -> np.ndarray:
  """log p(good) - log p(bad) of each minimal pair, in the run's native format.

  Args:
    r: the restored model.
    pairs: N `nlu_items.Pair`s (anything with .good and .bad strings).
    fmt: the format (default: `pair_format` of the run's pre-training objective).
    blank_inputs: score the targets with empty inputs (the blank-input control).
    batch_size: global rows per forward pass.

  Returns:
    float64[N] margins in nats (targets' tokens incl. their EOS).
  """
  fmt = fmt or pair_format(r.objective)
  tok = r.tokenizer
  examples = []
  for pair in pairs:
    for ex in pair_example(tok.encode(pair.good), tok.encode(pair.bad), fmt,
                           vocab_size=tok.vocab_size, num_extra_ids=tok.extra_ids):
      if blank_inputs:
        ex = {**ex, "inputs": np.zeros(0, np.int32)}
      examples.append(converters.convert(ex, r.architecture))
  ll = _batches(r, examples, batch_size, _score_fn(r.model), "pairs", progress
                ).astype(np.float64)
  return ll[0::2] - ll[1::2]


def random_init(r: restore.Restored, seed: int = RANDOM_INIT_SEED) -> restore.Restored:
  """`r` with freshly initialised params (jax.random.key(seed)), placed with r's shardings."""
  init = _init_fn(r.model, r.mesh, tuple(r.rules))  # abstract_params: outside axis_rules
  with partitioning.axis_rules(r.mesh, r.rules):
    params = init(jax.random.key(seed))
  return dataclasses.replace(r, params=params)


@functools.lru_cache(maxsize=4)
def _init_fn(model: Transformer, mesh, rules):
  """jit of the model's init, unboxed, out_shardings as restore places a checkpoint."""
  _, shardings = restore.abstract_params(model, mesh, rules)
  batch = features.zero_batch(model.config.mask_type, 4, 4, segments=False)
  return jax.jit(lambda key: nn.meta.unbox(model.init(key, batch)["params"]),
                 out_shardings=shardings)


# ---------------------------------------------------------------------------------------
# The suite.

def evaluate_suite(r: restore.Restored, pairs: Mapping[str, Sequence[Any]],
                   probes: Mapping[str, Sequence[Any]], *, chance: Mapping[str, float],
                   items_digest: Mapping[str, str], blank_inputs: bool = False,
                   batch_size: int = 32, folds: int = PROBE_FOLDS, seed: int = 0,
                   progress: bool = False, memo: dict[Any, Any] | None = None
                   ) -> dict[str, Any]:
  """Scores a run and its random initialisation on every instrument (the JSON of the suite).

  Args:
    r: the restored model.
    pairs: {phenomenon: [Pair]}; probes: {task: [ProbeItem]}.
    chance: {task: percent} for the probe tasks.
    items_digest: {item set name: digest}, recorded.
    blank_inputs: the blank-input control (probe texts and pair inputs emptied).
    batch_size: rows per forward pass; folds, seed: the probes' cross-validation.
    memo: a dict kept across calls on one run's checkpoints: the random initialisation
      (the same at every step) is scored once, on the first call.

  Returns:
    the result (docs/yardstick.md "Instruments" for the keys).
  """
  memo = {} if memo is None else memo

  def on_random_init(name: str, score: Any) -> Any:
    key = ("random_init", name, bool(blank_inputs), batch_size, folds, seed)
    if key not in memo:
      if "random_init_model" not in memo:
        memo["random_init_model"] = random_init(r)
      memo[key] = score(memo["random_init_model"])
    return memo[key]

  fmt = pair_format(r.objective)
  instruments: dict[str, Any] = {}
  for task, items in probes.items():
    texts = ["" if blank_inputs else it.text for it in items]
    labels = np.array([it.label for it in items])
    groups = np.array([it.document for it in items])
    trained = probe_layers(representations(r, texts, batch_size=batch_size, progress=progress),
                           labels, groups, folds=folds, seed=seed)
    rand = on_random_init(f"probe/{task}", lambda m: probe_layers(
        representations(m, texts, batch_size=batch_size, progress=progress), labels, groups,
        folds=folds, seed=seed))
    instruments[f"probe/{task}"] = {
        "accuracy": trained["accuracy"], "random_init": rand["accuracy"],
        "score": trained["accuracy"] - rand["accuracy"], "chance": float(chance[task]),
        "best_layer": trained["best_layer"],
        "best_layer_accuracy": trained["best_layer_accuracy"],
        "per_item": [int(v) for v in trained["per_item"]],
        "per_item_random": [int(v) for v in rand["per_item"]]}
  for name, items in pairs.items():
    kw = dict(fmt=fmt, blank_inputs=blank_inputs, batch_size=batch_size, progress=progress)
    margins = pair_margins(r, items, **kw)
    outcome = pair_outcomes(margins)
    rand = on_random_init(f"pairs/{name}", lambda m: pair_outcomes(pair_margins(m, items, **kw)))
    accuracy, random_accuracy = 100.0 * float(outcome.mean()), 100.0 * float(rand.mean())
    instruments[f"pairs/{name}"] = {
        "accuracy": accuracy, "random_init": random_accuracy,
        "score": accuracy - random_accuracy, "mean_margin": float(margins.mean()),
        "per_item": [float(v) for v in outcome],
        "per_item_margin": [float(v) for v in margins],
        "per_item_random": [float(v) for v in rand]}
  return {"suite": SUITE, "step": r.step, "workdir": r.workdir,
          "architecture": r.architecture, "objective": r.objective,
          "pair_format": fmt, "items_digest": dict(items_digest),
          "blank_inputs": bool(blank_inputs), "instruments": instruments}


def results_path(workdir: str, step: int, blank_inputs: bool = False) -> str:
  """<workdir>/eval/nlu_step_<N>.json, or nlu_blank_step_<N>.json for the control."""
  return os.path.join(workdir, "eval", contrasts.result_file(step, blank_inputs))


def write_json(result: Mapping[str, Any], path: str) -> str | None:
  """Writes `result` to `path` atomically (process 0 only); returns the path."""
  if jax.process_index() != 0:
    return None
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  workdir_lib.write_text_atomic(path, json.dumps(result, indent=1, sort_keys=True) + "\n")
  return path


def table(result: Mapping[str, Any]) -> str:
  """A short plain-text table of the instruments' accuracy, random init and score."""
  lines = [f"{'instrument':<32} {'accuracy':>9} {'random':>8} {'score':>7}"]
  for name, v in result["instruments"].items():
    lines.append(f"{name:<32} {v['accuracy']:9.1f} {v['random_init']:8.1f} {v['score']:7.1f}")
  return "\n".join(lines)


def item_source(items: str | None, data_dir: str | None) -> str:
  """The item source of a run (nlu_items.ITEM_SOURCES): `items`, or by default "heldout"
  for a data_dir and "comments" (the standard library's comments, about 30x the embedded
  held-out split's sentences) for the embedded corpus.

  Raises:
    ValueError: an unknown source, or "comments" with a data_dir.
  """
  if items is None:
    return nlu_items.default_source(data_dir)
  if items not in nlu_items.ITEM_SOURCES:
    raise ValueError(f"unknown --items {items!r}; expected one of {list(nlu_items.ITEM_SOURCES)}")
  if items == "comments" and data_dir:
    raise ValueError("--items=comments reads the standard library's comments, not a "
                     "--data_dir; drop --data_dir or pass --items=heldout.")
  return items


def run_suite(r: restore.Restored, *, data_dir: str | None = None, items: str | None = None,
              blank_inputs: bool = False, json_path: str | None = None, batch_size: int = 32,
              progress: bool = False, memo: dict[Any, Any] | None = None) -> dict[str, Any]:
  """`--suite=nlu`: builds the items (`item_source`), scores `r`, writes
  <workdir>/eval/nlu_step_<N>.json (and `json_path`); returns the result with "written"
  added. The result's "items_source" names the source ("comments" with the Python
  version, whose standard library the items come from). `memo`: a dict kept across calls on
  one run's checkpoints (`lm.evaluate --steps`): the items and the random initialisation's
  scores are made once."""
  memo = {} if memo is None else memo
  source = item_source(items, data_dir)
  label = {"comments": f"comments:{corpus.python_version()}",
           "heldout": f"heldout:{data_dir or 'embedded'}"}[source]
  key = ("items", data_dir, source)
  if key not in memo:  # less what pre-training read
    memo[key] = nlu_items.item_sets(data_dir, seed=0, source=source)
  pairs, probes = memo[key]
  if not pairs and not probes:
    raise ValueError(f"no items could be built from {label}; pass a larger --data_dir.")
  digests = {**{f"pairs/{k}": nlu_items.digest(v) for k, v in pairs.items()},
             **{f"probe/{k}": nlu_items.digest(v) for k, v in probes.items()}}
  result = evaluate_suite(r, pairs, probes, chance={t: nlu_items.chance(t) for t in probes},
                          items_digest=digests, blank_inputs=blank_inputs,
                          batch_size=batch_size, progress=progress, memo=memo)
  result["items_source"] = label
  written = write_json(result, results_path(r.workdir, r.step, blank_inputs))
  if json_path:
    write_json(result, json_path)
  return {**result, "written": written}
