"""Downstream metrics as T5 computed them (t5/evaluation/metrics.py, qa_utils.py).

Every metric is `(targets, predictions) -> {name: value}` over postprocessed lists (see
lm.downstream.task), in T5's scale and with T5's names (accuracy 83.1, not 0.831):

    squad(targets=[["Paris", "paris, France"]], predictions=["Paris"])  # {"em": 100.0, "f1": 100.0}

The optional libraries (the `downstream` extra) are imported when a metric runs.
Each metric's definition and the tasks that use it: docs/downstream.md, '3. Metrics'.
"""
from __future__ import annotations

import collections
import importlib
import re
import string
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Metrics = dict[str, float]


def _require(module: str, package: str):
  """Imports `module`, or fails in one line naming the extra that installs it."""
  try:
    return importlib.import_module(module)
  except ImportError:
    raise ImportError(f"downstream metrics need {package}; install it with "
                      "pip install -e '.[downstream]'") from None


# ------------------------------------------------------------------ classification

def accuracy(targets: Sequence[Any], predictions: Sequence[Any]) -> Metrics:
  """Percentage of predictions equal to their target."""
  skm = _require("sklearn.metrics", "scikit-learn")
  return {"accuracy": 100 * skm.accuracy_score(targets, predictions)}


def f1_score_with_invalid(targets: Sequence[int], predictions: Sequence[int]) -> Metrics:
  """Binary F1 (positive class 1), a prediction other than 0 or 1 counted as wrong."""
  skm = _require("sklearn.metrics", "scikit-learn")
  targets, predictions = np.asarray(targets), np.array(predictions)
  invalid = (predictions != 0) & (predictions != 1)
  predictions[invalid] = 1 - targets[invalid]
  return {"f1": 100 * skm.f1_score(targets, predictions)}


def matthews_corrcoef(targets: Sequence[int], predictions: Sequence[int]) -> Metrics:
  """Matthews correlation coefficient x 100 (GLUE's CoLA metric)."""
  skm = _require("sklearn.metrics", "scikit-learn")
  return {"matthews_corrcoef": 100 * skm.matthews_corrcoef(targets, predictions)}


def mean_multiclass_f1(num_classes: int) -> Callable[[Sequence[int], Sequence[int]], Metrics]:
  """The unweighted mean of the F1 of classes 0..num_classes-1 (SuperGLUE's CB)."""

  def fn(targets: Sequence[int], predictions: Sequence[int]) -> Metrics:
    skm = _require("sklearn.metrics", "scikit-learn")
    f1 = skm.fbeta_score(targets, predictions, beta=1, labels=range(num_classes),
                         average="macro")
    return {f"mean_{num_classes}class_f1": 100 * f1}

  fn.__name__ = f"mean_{num_classes}class_f1"
  return fn


def pearson_corrcoef(targets: Sequence[float], predictions: Sequence[float]) -> Metrics:
  """Pearson correlation x 100 (STS-B)."""
  stats = _require("scipy.stats", "scipy")
  return {"pearson_corrcoef": 100 * stats.pearsonr(targets, predictions)[0]}


def spearman_corrcoef(targets: Sequence[float], predictions: Sequence[float]) -> Metrics:
  """Spearman rank correlation x 100 (STS-B)."""
  stats = _require("scipy.stats", "scipy")
  return {"spearman_corrcoef": 100 * stats.spearmanr(targets, predictions)[0]}


# --------------------------------------------------------------------- QA (SQuAD)

_SQUAD_PUNCT = frozenset(string.punctuation)


def normalize_squad(answer: str) -> str:
  """The official SQuAD v1.1 answer normalisation (T5's `qa_utils.normalize_squad`).

  Lower case, ASCII punctuation removed, the articles a / an / the removed, whitespace
  runs collapsed: "The  Denver-Broncos!" -> "denverbroncos".
  """
  text = answer.lower()
  text = "".join(ch for ch in text if ch not in _SQUAD_PUNCT)
  text = re.sub(r"\b(a|an|the)\b", " ", text)
  return " ".join(text.split())


def _token_f1(target: str, prediction: str) -> float:
  """Bag-of-tokens F1 of two normalised answers (0 when they share no token)."""
  pred, gold = prediction.split(), target.split()
  same = sum((collections.Counter(pred) & collections.Counter(gold)).values())
  if same == 0:
    return 0.0
  precision, recall = same / len(pred), same / len(gold)
  return 2 * precision * recall / (precision + recall)


def squad(targets: Sequence[Sequence[str]], predictions: Sequence[str]) -> Metrics:
  """SQuAD exact match and F1 (x 100), each the max over an example's gold answers.

  Args:
    targets: per example, its gold answers (at least one).
    predictions: per example, the predicted answer.
  """
  if len(targets) != len(predictions):
    raise ValueError(f"squad: {len(targets)} targets but {len(predictions)} predictions.")
  em, f1 = [], []
  for golds, pred in zip(targets, predictions):
    if isinstance(golds, str) or not golds:
      raise ValueError(f"squad: gold answers {golds!r} are not a non-empty list of strings; "
                       "expected every example's list of answers.")
    golds = [normalize_squad(g) for g in golds]
    pred = normalize_squad(pred)
    em.append(max(float(g == pred) for g in golds))
    f1.append(max(_token_f1(g, pred) for g in golds))
  return {"em": 100 * float(np.mean(em)), "f1": 100 * float(np.mean(f1))}


# ------------------------------------------------------------- MultiRC and ReCoRD

def multirc_f1_over_all_answers(targets: Sequence[dict], predictions: Sequence[dict]
                                ) -> Metrics:
  """MultiRC's F1a: binary F1 over every answer option ({"value": 0/1/-1} dicts)."""
  return f1_score_with_invalid([t["value"] for t in targets], [p["value"] for p in predictions])


def multirc_exact_match(targets: Sequence[dict], predictions: Sequence[dict]) -> Metrics:
  """MultiRC's EM: per question (target "group"), 100 if every option is right, else 0;
  averaged over questions (T5's `mean_group_metric(all_match)`)."""
  groups: dict[Any, tuple[list, list]] = collections.defaultdict(lambda: ([], []))
  for t, p in zip(targets, predictions):
    groups[t["group"]][0].append(t["value"])
    groups[t["group"]][1].append(p["value"])
  scores = [100 * float(np.array_equal(g_t, g_p)) for g_t, g_p in groups.values()]
  return {"exact_match": float(np.mean(scores))}


def record(targets: Sequence[dict], predictions: Sequence[dict]) -> Metrics:
  """ReCoRD: SQuAD EM / F1 (max over the answers) on the first example of each
  (passage, query) group (T5's `deduplicate_metric(squad)`)."""
  seen, golds, preds = set(), [], []
  for t, p in zip(targets, predictions):
    if t["group"] in seen:
      continue
    seen.add(t["group"])
    golds.append(t["value"])
    preds.append(p["value"])
  return squad(golds, preds)


# ------------------------------------------------------------------- generation

def _prepare_summary_rouge(summary: str) -> str:
  """T5's newline after each " . " so that rougeLsum sees sentences."""
  return summary.replace(" . ", " .\n")


def rouge(targets: Sequence[str], predictions: Sequence[str], *,
          score_keys: Sequence[str] = ("rouge1", "rouge2", "rougeLsum"), seed: int = 0
          ) -> Metrics:
  """ROUGE F-measures x 100, aggregated as T5 did: the mid (median) of rouge-score's
  BootstrapAggregator (1000 resamples of the per-example scores).

  The bootstrap draws from numpy's global generator; lm seeds it with `seed` for the
  call (and restores its state after), so the same lists always score the same.
  """
  rouge_scorer = _require("rouge_score.rouge_scorer", "rouge-score")
  scoring = _require("rouge_score.scoring", "rouge-score")
  if not targets:
    raise ValueError("rouge: no targets; expected at least one example.")
  scorer = rouge_scorer.RougeScorer(rouge_types=list(score_keys))
  aggregator = scoring.BootstrapAggregator()
  for target, prediction in zip(targets, predictions):
    aggregator.add_scores(scorer.score(target=_prepare_summary_rouge(target),
                                       prediction=_prepare_summary_rouge(prediction)))
  state = np.random.get_state()
  try:
    np.random.seed(seed)
    result = aggregator.aggregate()
  finally:
    np.random.set_state(state)
  return {key: 100 * float(result[key].mid.fmeasure) for key in score_keys}


def bleu(targets: Sequence[str], predictions: Sequence[str]) -> Metrics:
  """Corpus BLEU with T5's sacrebleu settings: "exp" smoothing, "intl" tokenisation,
  case-sensitive, one reference per example."""
  sacrebleu = _require("sacrebleu", "sacrebleu")
  score = sacrebleu.corpus_bleu(list(predictions), [list(targets)], smooth_method="exp",
                                smooth_value=0.0, force=False, lowercase=False,
                                tokenize="intl", use_effective_order=False)
  return {"bleu": float(score.score)}
