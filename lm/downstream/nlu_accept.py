"""The yardstick's third instrument: single-sentence acceptability after fine-tuning.

Tasks `nlu_accept_<phenomenon>` for each of `nlu_items.PAIR_PHENOMENA`: the probe items of
that phenomenon (a held-out sentence as written, or with the minimal pair's one edit), read
as "is this sentence as written?", target "true" or "false" (one piece each in the
on-the-fly tokenizers of 1,000 and 8,000 pieces), scored by rank classification over the
two labels. Only the input carries the answer: the label strings alone, or blank inputs,
score exactly 50 on the balanced validation split (the label-only control). Documents are split between train and
validation (no document in both); `lm.mini_suite --suite=acceptability` fine-tunes on all
five and scores them (docs/yardstick.md).
"""
from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from lm.downstream import nlu_items
from lm.downstream import task as task_lib
from lm.downstream.task_metrics import accuracy

PREFIX = "nlu_accept_"
TASKS = tuple(PREFIX + p for p in nlu_items.PAIR_PHENOMENA)
LABELS = ("true", "false")  # by ProbeItem.label: 0 = as written, 1 = with the edit
VALIDATION_EVERY = 4  # documents whose index % VALIDATION_EVERY == 0 are validation's (25 %)
MAX_CHARS = 200  # longer sentences are left out: inputs fit mini.MAX_TOKENS = 128 (runlocal)
SPLITS = ("train", "validation")
VERSION = 2  # of the items (lm.mini_suite's suite_version): bump when they change
INSTRUMENT = "accept/"  # a contrast record's instruments: accept/<phenomenon> (`instruments`)


@functools.lru_cache(maxsize=4)
def _probe_sets(data_dir: str | None) -> Mapping[str, list[nlu_items.ProbeItem]]:
  """The probe sets of the yardstick's default item source (the standard library's comments
  for the embedded corpus, the held-out split of a data_dir), built once per process."""
  docs = nlu_items.documents(data_dir, nlu_items.default_source(data_dir))
  return nlu_items.probe_sets(docs, 0, nlu_items.pretraining_text(data_dir))


def split_items(items: list[nlu_items.ProbeItem], split: str) -> list[nlu_items.ProbeItem]:
  """A split's items, classes balanced: the items of its documents (validation: document
  index % VALIDATION_EVERY == 0, train: the rest) of at most MAX_CHARS characters, as many
  of each label as the rarer has, the first ones in item order, labels alternating (so any
  even number of the first examples is balanced: `--max_eval_examples`).

  Raises:
    ValueError: an unknown split.
  """
  if split not in SPLITS:
    raise ValueError(f"unknown split {split!r}; expected one of {list(SPLITS)}.")
  mine = [it for it in items if len(it.text) <= MAX_CHARS
          and (it.document % VALIDATION_EVERY == 0) == (split == "validation")]
  by_label = [[it for it in mine if it.label == c] for c in range(len(LABELS))]
  per = min(len(items) for items in by_label)
  return [items[i] for i in range(per) for items in by_label]  # labels alternate


def raw_examples(phenomenon: str, split: str, data_dir: str | None = None
                 ) -> list[dict[str, Any]]:
  """{"sentence", "label" (a LABELS string), "document"} of one phenomenon's split."""
  if phenomenon not in nlu_items.PAIR_PHENOMENA:
    raise ValueError(f"unknown phenomenon {phenomenon!r}; expected one of "
                     f"{list(nlu_items.PAIR_PHENOMENA)}.")
  items = split_items(_probe_sets(data_dir)[phenomenon], split)
  return [{"sentence": it.text, "label": LABELS[it.label], "document": it.document}
          for it in items]


def _preprocess(raw: Mapping[str, Any]) -> dict[str, Any]:
  return {"inputs": f"acceptable: {raw['sentence']}", "targets": raw["label"]}


def _labels(example: Mapping[str, Any]) -> tuple[str, ...]:
  del example
  return LABELS


def _strip(text: str, example=None, is_target: bool = False) -> str:
  del example, is_target
  return text.strip()


def average(results: Mapping[str, Mapping[str, float]]) -> float:
  """The acceptability column: the mean accuracy over TASKS (in %).

  Raises:
    ValueError: a task or its accuracy is missing from `results`.
  """
  missing = [name for name in TASKS if "accuracy" not in results.get(name, {})]
  if missing:
    raise ValueError(f"no accuracy for the acceptability tasks {missing}.")
  return sum(float(results[name]["accuracy"]) for name in TASKS) / len(TASKS)


def instruments(pretrained: Mapping[str, Sequence[Mapping[str, Any]]],
                random_init: Mapping[str, Sequence[Mapping[str, Any]]]
                ) -> dict[str, dict[str, Any]]:
  """One run's acceptability as the yardstick's instruments, in the contrasts' record format
  (lm.downstream.contrasts.item_scores): {INSTRUMENT + phenomenon: {"accuracy", "random_init",
  "score", "chance", "per_item", "per_item_random"}}, accuracies in %, per_item 1 / 0.

  Args:
    pretrained, random_init: {task: its validation predictions [{"inputs", "target",
      "prediction"}, ...]} of the suite fine-tuned from the run and from the same model's
      random initialisation (lm.mini_suite.predictions).

  Raises:
    ValueError: a task missing from either, or the two scored on different items.
  """
  out = {}
  for name in TASKS:
    runs = [pretrained.get(name), random_init.get(name)]
    if not all(runs):
      raise ValueError(f"no predictions of {name} from the "
                       f"{'pre-trained' if not runs[0] else 'randomly initialised'} model.")
    if [(p["inputs"], p["target"]) for p in runs[0]] != [(p["inputs"], p["target"])
                                                         for p in runs[1]]:
      raise ValueError(f"{name}: the pre-trained and randomly initialised models were scored "
                       "on different items; rerun both with the same nlu_accept.VERSION.")
    per_item, per_item_random = ([float(p["prediction"] == p["target"]) for p in r]
                                 for r in runs)
    accuracy, random_acc = (100.0 * sum(x) / len(x) for x in (per_item, per_item_random))
    out[INSTRUMENT + name[len(PREFIX):]] = {
        "accuracy": accuracy, "random_init": random_acc, "score": accuracy - random_acc,
        "chance": chance_level(name)["accuracy"], "per_item": per_item,
        "per_item_random": per_item_random}
  return out


def chance_level(name: str) -> dict[str, float]:
  """Each metric's chance score in % (two balanced labels: 50)."""
  if name not in TASKS:
    raise ValueError(f"unknown acceptability task {name!r}; expected one of {list(TASKS)}.")
  return {"accuracy": 50.0}


for _phenomenon in nlu_items.PAIR_PHENOMENA:
  task_lib.register(task_lib.Task(
      name=PREFIX + _phenomenon,
      load=functools.partial(lambda split, data_dir, p: raw_examples(p, split, data_dir),
                             p=_phenomenon),
      preprocess=_preprocess, postprocess=_strip, metric_fns=(accuracy,), choices=_labels,
      splits=SPLITS,
      description=f"acceptability ({_phenomenon}): is the sentence as written (true) or "
                  "with the minimal pair's edit (false); rank classification of the two labels, "
                  "accuracy, chance 50 (balanced)"))
