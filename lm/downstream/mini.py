r"""The CPU-sized downstream suite ("mini"): tasks lm builds itself from a corpus's text.

Here: the eight tasks' formats, choices, chance levels, metrics and registration; SUITE, the
five tasks of the "mini" column, `mini_average`, and the blank-input control. Not here: the
text (lm/downstream/mini_text.py), the examples' construction (lm/downstream/mini_builders.py),
fine-tuning and scoring a run on the suite (lm/mini_suite.py). Which text, how examples are
built, and what the column measures: docs/downstream_mini.md.

    rows = get_task("mini_cloze").examples("validation")   # [{"inputs": ..., "targets": ...}]
    mini_average({"mini_completion": {"accuracy": 81.0}, ...})   # the "mini" column
"""
from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from lm.downstream import mini_builders
from lm.downstream import mini_text
from lm.downstream import task as task_lib

SUITE_SEED = 0
MAX_EXAMPLES = {"train": 2000, "validation": 500}
MAX_TOKENS = 128  # inputs and targets fit in this many tokens (runlocal's tokenizer)
UNSHUFFLE_SEPARATOR = " | "
BLANK = mini_text.BLANK  # the cloze and fill marker (no unit contains it)



# --------------------------------------------------------------------------------------
# Metrics (numpy; the headline of each task is in HEADLINE).


def accuracy(targets: Sequence[Any], predictions: Sequence[Any]) -> dict[str, float]:
  """{"accuracy": % of predictions equal to their target}."""
  return {"accuracy": 100.0 * float(np.mean([t == p for t, p in zip(targets, predictions)]))}


def exact_match(targets: Sequence[Any], predictions: Sequence[Any]) -> dict[str, float]:
  """{"exact_match": % of (postprocessed) predictions equal to their target}."""
  return {"exact_match": accuracy(targets, predictions)["accuracy"]}


def line_accuracy(targets: Sequence[Sequence[str]], predictions: Sequence[Sequence[str]]
                  ) -> dict[str, float]:
  """{"line_accuracy": % of target lines found at their position in the prediction}."""
  scores = [np.mean([i < len(p) and p[i] == line for i, line in enumerate(t)])
            for t, p in zip(targets, predictions)]
  return {"line_accuracy": 100.0 * float(np.mean(scores))}


# Every mini task's headline metric; the suite (HEADLINE, the "mini" column) is five of them.
TASK_METRIC = {"mini_completion": "accuracy", "mini_fill": "accuracy",
               "mini_cloze": "exact_match", "mini_phrase_order": "exact_match",
               "mini_word_order": "accuracy", "mini_next_line": "accuracy",
               "mini_same_doc": "accuracy", "mini_unshuffle": "exact_match"}
SUITE = ("mini_completion", "mini_fill", "mini_cloze", "mini_phrase_order", "mini_word_order")
# Recorded with every suite result (mini_suite.json) so that scores of different suites are
# never compared unknowingly. 1: next line, same document, cloze, unshuffle; 2: and word
# order; 3: SUITE above. Raise it whenever a suite task's construction or format changes.
SUITE_VERSION = 3
HEADLINE = {name: TASK_METRIC[name] for name in SUITE}


def mini_average(results: Mapping[str, Mapping[str, float]]) -> float:
  """The "mini" column: the mean over the suite's 5 tasks of each one's headline metric.

  Headlines (HEADLINE): mini_completion accuracy, mini_fill accuracy, mini_cloze
  exact_match, mini_phrase_order exact_match, mini_word_order accuracy (all in %, equal
  weights; chance levels 50, 25, ~14, 20, 50).
  Other keys of `results` (e.g. T5 tasks, the mini tasks outside the suite) are ignored.

  Raises:
    ValueError: a suite task or its headline metric is missing from `results`.
  """
  missing = [f"{t}[{m!r}]" for t, m in HEADLINE.items() if m not in results.get(t, {})]
  if missing:
    raise ValueError(f"mini_average needs every mini task's headline metric; missing "
                     f"{missing}: evaluate all of {sorted(HEADLINE)}.")
  return float(np.mean([results[t][m] for t, m in HEADLINE.items()]))


# --------------------------------------------------------------------------------------
# The blank-input control: how much of a score the inputs carry (docs/downstream_mini.md).


BLANK_CHOICES = "blank_choices"  # where blank_inputs keeps each example's choices
# A margin over random initialisation below this many points of the "mini" average has no
# share: it is within the seed noise (range ~3.2, docs/results/README.md) and near 0 the
# share divides by ~0.
MIN_SHARE_MARGIN = 3.0


def _stored_choices(example) -> list[str]:
  return list(example[BLANK_CHOICES])


def blank_inputs(task: task_lib.Task, examples: Sequence[Mapping[str, Any]]
                 ) -> tuple[task_lib.Task, list[dict[str, Any]]]:
  """The blank-input control of a task's examples: the same items with "" as the input.

  Some tasks read their choices off the inputs (phrase order's pieces, cloze's candidate
  words), so each example's choices are taken from it as shown first and kept under
  BLANK_CHOICES; the returned task reads them from there. Targets, choices and every other
  field are unchanged, so the scores with and without the input rank the same candidates.

  Args:
    task: the task the examples are from (its `choices`, None for a decoded-only task).
    examples: its preprocessed examples ({"inputs", "targets", ...}).

  Returns:
    (the task with `choices` reading BLANK_CHOICES (None stays None), the examples with
    "inputs" = "").
  """
  out = []
  for ex in examples:
    row = {**ex, "inputs": ""}
    if task.choices is not None:
      row[BLANK_CHOICES] = list(task.choices(ex))
    out.append(row)
  blank_task = dataclasses.replace(
      task, choices=None if task.choices is None else _stored_choices)
  return blank_task, out


def surviving_share(score: float, blank: float, random_init: float,
                    min_margin: float = MIN_SHARE_MARGIN) -> float | None:
  """The share of a score's margin over random initialisation left with blank inputs.

  (blank - random_init) / (score - random_init), all in the same points (e.g. the "mini"
  average with the inputs, without them, and of the same fine-tuning from random
  initialisation with the inputs). 1: none of the margin needs the input (the model ranks
  the candidates by their own likelihood: decoder fluency); 0: all of it does. Not clipped:
  above 1, the blank scores higher than the full input; below 0, under random init.

  Returns:
    the share, or None when the margin score - random_init is below `min_margin` (within
    noise, or negative: there is no margin to share, and near 0 the ratio is ~x/0).
  """
  margin = score - random_init
  if not margin >= min_margin:  # also NaN
    return None
  return (blank - random_init) / margin


# --------------------------------------------------------------------------------------
# Preprocessors and postprocessors (text formats with T5-style prefixes).


OPTIONS = " options: "  # between line A and the two options of the choice tasks


def _choice_format(prefix: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
  def preprocess(raw):
    return {"inputs": f"{prefix}: {raw['a']}{OPTIONS}"
                      + UNSHUFFLE_SEPARATOR.join(raw["options"]),
            "targets": raw["answer"], "options": list(raw["options"]), "idx": raw["idx"]}
  return preprocess


CLOZE_PREFIX, UNSHUFFLE_PREFIX = "cloze: ", "unshuffle: "
WORD_ORDER_PREFIX = "word order:"


FILL_PREFIX, PHRASE_ORDER_PREFIX = "fill: ", "phrase order: "


def _fill_format(raw):
  return {"inputs": FILL_PREFIX + raw["passage"] + OPTIONS
                    + UNSHUFFLE_SEPARATOR.join(raw["options"]),
          "targets": raw["passage"].replace(BLANK, raw["answer"], 1),
          "passage": raw["passage"], "options": list(raw["options"]), "idx": raw["idx"]}


COMPLETION_PREFIX = "complete: "


def completion_lines(beginnings: Sequence[str], endings: Sequence[str]) -> str:
  """The lines beginning[i] + " " + ending[i], joined by UNSHUFFLE_SEPARATOR."""
  return UNSHUFFLE_SEPARATOR.join(f"{b} {e}" for b, e in zip(beginnings, endings))


def _completion_format(raw):
  return {"inputs": COMPLETION_PREFIX + UNSHUFFLE_SEPARATOR.join(raw["a"]) + OPTIONS
                    + UNSHUFFLE_SEPARATOR.join(raw["options"]),
          "targets": completion_lines(raw["a"], raw["answer"]), "beginnings": list(raw["a"]),
          "options": list(raw["options"]), "idx": raw["idx"]}


def _completion_choices(example) -> list[str]:
  """The two pairings of the shown beginnings with the shown endings (as written, and
  swapped), each as two lines."""
  b, (x, y) = example["beginnings"], example["options"]
  return [completion_lines(b, (x, y)), completion_lines(b, (y, x))]


def _fill_choices(example) -> list[str]:
  """The line with its blank filled by each option."""
  return [example["passage"].replace(BLANK, option, 1) for option in example["options"]]


def _phrase_order_format(raw):
  return {"inputs": PHRASE_ORDER_PREFIX + UNSHUFFLE_SEPARATOR.join(raw["shuffled"]),
          "targets": raw["answer"], "idx": raw["idx"]}


def phrase_order_choices(shown: Sequence[str]) -> list[str]:
  """The 5 lines made of the 5 shown pieces with the 3 middle ones in the orders other than
  the shown one (the line as written is always one: the shown order never is)."""
  return mini_builders._middle_orders(shown)


def _phrase_order_choices(example) -> list[str]:
  return phrase_order_choices(
      example["inputs"][len(PHRASE_ORDER_PREFIX):].split(UNSHUFFLE_SEPARATOR))


def _word_order_format(raw):
  return {"inputs": WORD_ORDER_PREFIX + OPTIONS + UNSHUFFLE_SEPARATOR.join(raw["options"]),
          "targets": raw["answer"], "options": list(raw["options"]), "idx": raw["idx"]}


def _cloze_format(raw):
  return {"inputs": CLOZE_PREFIX + raw["passage"], "targets": raw["answer"], "idx": raw["idx"]}


def _unshuffle_format(raw):
  return {"inputs": UNSHUFFLE_PREFIX + UNSHUFFLE_SEPARATOR.join(raw["shuffled"]),
          "targets": UNSHUFFLE_SEPARATOR.join(raw["lines"]), "idx": raw["idx"]}


def _strip(text: str, example=None, is_target: bool = False) -> str:
  del example, is_target
  return mini_text.clean(text)


def _lines(text: str, example=None, is_target: bool = False) -> tuple[str, ...]:
  del example, is_target
  return tuple(mini_text.clean(p) for p in text.split(UNSHUFFLE_SEPARATOR.strip()))


def _options(example) -> list[str]:
  """The two options a choice task's inputs show (in the order shown)."""
  return list(example["options"])


def cloze_choices(passage: str) -> list[str]:
  """The candidate answers of a cloze passage (with its blank): its distinct words of 4+
  letters that are not stopwords, in order of first occurrence. The answer is always one
  (it occurs at least twice, so at least once outside the blank)."""
  out: list[str] = []
  for word in _cloze_candidates(passage):
    if word not in out and word not in mini_builders.STOPWORDS and word.lower() not in mini_builders.STOPWORDS:
      out.append(word)
  return out


def _cloze_choices(example) -> list[str]:
  return cloze_choices(example["inputs"][len(CLOZE_PREFIX):])


def unshuffle_choices(shown: Sequence[str]) -> list[str]:
  """The 5 orders of the 3 shown lines that differ from the shown order, joined by
  UNSHUFFLE_SEPARATOR (the original order is always one: the shown order never is)."""
  return [UNSHUFFLE_SEPARATOR.join(shown[k] for k in p) for p in mini_builders._NON_IDENTITY]


def _unshuffle_choices(example) -> list[str]:
  return unshuffle_choices(example["inputs"][len(UNSHUFFLE_PREFIX):].split(UNSHUFFLE_SEPARATOR))


# --------------------------------------------------------------------------------------
# Chance levels (computed from a split's examples).


def _cloze_candidates(passage: str) -> list[str]:
  return [m.group() for m in mini_builders.WORD.finditer(passage)]


def chance_level(name: str, split: str = "validation", data_dir: str | None = None
                 ) -> dict[str, float]:
  """Each metric's expected score of the task's chance baseline on a split (in %).

  Each is the expected score of picking one of the task's `choices` uniformly at random
  (what rank classification picks from). mini_next_line / mini_same_doc / mini_word_order /
  mini_completion: 1 / 2 options or pairings (50); mini_fill: 1 / 4 (25). mini_phrase_order:
  one of the 5 other orders of the middle pieces (20).
  mini_cloze: one of the passage's candidate words (`cloze_choices`: distinct words of 4+
  letters, not stopwords), per example 1 / their number. mini_unshuffle: one of the 5
  orders of the shown lines that differ from the shown one (exact match exactly 20; line
  accuracy averaged over those orders).
  """
  if name not in _BUILDERS:
    raise ValueError(f"unknown mini task {name!r}; expected one of {sorted(_BUILDERS)}.")
  raw = _raw_examples(name, split, data_dir)
  if name in ("mini_next_line", "mini_same_doc", "mini_word_order", "mini_completion",
              "mini_fill"):
    return {"accuracy": 100.0 * float(np.mean([1.0 / len(r["options"]) for r in raw]))}
  if name == "mini_cloze":
    per = [1.0 / len(cloze_choices(r["passage"])) for r in raw]
    return {"exact_match": 100.0 * float(np.mean(per))}
  if name == "mini_phrase_order":
    return {"exact_match": 100.0 / len(mini_builders._NON_IDENTITY)}
  if name == "mini_unshuffle":
    em, la = [], []
    for r in raw:
      guesses = [tuple(r["shuffled"][k] for k in p) for p in mini_builders._NON_IDENTITY]
      gold = [tuple(r["lines"])] * len(guesses)
      em.append(exact_match(gold, guesses)["exact_match"])
      la.append(line_accuracy(gold, guesses)["line_accuracy"])
    return {"exact_match": float(np.mean(em)), "line_accuracy": float(np.mean(la))}
  raise AssertionError(name)  # every builder has a chance level above


# --------------------------------------------------------------------------------------
# Registration.


@dataclasses.dataclass(frozen=True)
class _Builder:
  seed: int  # the task's own seed word (fixed; not derived from its name's hash)
  build: Callable[..., list[tuple[dict, ...]]]


_BUILDERS = {
    "mini_next_line": _Builder(1, mini_builders.build_next_line),
    "mini_same_doc": _Builder(2, mini_builders.build_same_doc),
    "mini_cloze": _Builder(3, mini_builders.build_cloze),
    "mini_unshuffle": _Builder(4, mini_builders.build_unshuffle),
    "mini_word_order": _Builder(5, mini_builders.build_word_order),
    "mini_completion": _Builder(6, mini_builders.build_completion),
    "mini_fill": _Builder(7, mini_builders.build_fill),
    "mini_phrase_order": _Builder(8, mini_builders.build_phrase_order),
}


@functools.lru_cache(maxsize=32)
def _raw_tuple(name: str, split: str, data_dir: str | None) -> tuple[dict[str, Any], ...]:
  builder = _BUILDERS[name]
  rng = np.random.default_rng([SUITE_SEED, builder.seed, mini_text.SPLITS.index(split)])
  groups = builder.build(mini_text.splits(data_dir)[split], rng)
  examples = mini_builders._cap(groups, MAX_EXAMPLES[split], rng)
  if not examples:
    where = repr(data_dir) if data_dir is not None else (
        "the embedded corpus's held-out split" if split == "validation" else
        "the embedded corpus's pre-training split")
    raise ValueError(f"task {name!r}: {where} gives no {split} example; point data_dir at "
                     "more held-out text.")
  return tuple(examples)


def _raw_examples(name: str, split: str, data_dir: str | None) -> list[dict[str, Any]]:
  if split not in mini_text.SPLITS:
    raise ValueError(f"task {name!r} has no split {split!r}; expected one of {list(mini_text.SPLITS)}.")
  if data_dir is not None:
    data_dir = os.fspath(data_dir)
  return [dict(r) for r in _raw_tuple(name, split, data_dir)]


def _loader(name: str) -> Callable[[str, str | None], list[dict[str, Any]]]:
  return functools.partial(_raw_examples, name)


_CAPS = "2000 train / 500 validation at most (embedded corpus: fewer validation)"
TASKS = (
    task_lib.Task(
        name="mini_next_line", load=_loader("mini_next_line"),
        preprocess=_choice_format("next line"), postprocess=_strip, metric_fns=(accuracy,),
        choices=_options,
        description="classification: which of two options directly follows line A (the "
                    "other: another document's answer of the same start and length); "
                    f"accuracy, chance 50; {_CAPS}"),
    task_lib.Task(
        name="mini_same_doc", load=_loader("mini_same_doc"),
        preprocess=_choice_format("same document"), postprocess=_strip,
        metric_fns=(accuracy,), choices=_options,
        description="pair classification: which of two options is from line A's document "
                    "(not adjacent to A; the other: another document's answer of the same "
                    f"start and length); accuracy, chance 50; {_CAPS}"),
    task_lib.Task(
        name="mini_cloze", load=_loader("mini_cloze"), preprocess=_cloze_format,
        postprocess=_strip, metric_fns=(exact_match,), choices=_cloze_choices,
        description="extraction: the word (4+ letters, also elsewhere in the passage) that "
                    "fills the blank of a 1-3 line passage; exact match, chance ~14 (one "
                    f"of the passage's distinct candidate words at random); {_CAPS}"),
    task_lib.Task(
        name="mini_unshuffle", load=_loader("mini_unshuffle"), preprocess=_unshuffle_format,
        postprocess=_lines, metric_fns=(exact_match, line_accuracy),
        choices=_unshuffle_choices,
        description="generation: write 3 shuffled consecutive lines in their original order "
                    "(rank-classified: the 5 other orders of the shown lines); exact match "
                    f"(chance 20) and line accuracy (chance ~36); {_CAPS}"),
    task_lib.Task(
        name="mini_word_order", load=_loader("mini_word_order"),
        preprocess=_word_order_format, postprocess=_strip, metric_fns=(accuracy,),
        choices=_options,
        description="acceptability (CoLA-like minimal pairs): which of two options is the "
                    "line as written (the other: its interior words scrambled); accuracy, "
                    f"chance 50; {_CAPS}"),
    task_lib.Task(
        name="mini_completion", load=_loader("mini_completion"),
        preprocess=_completion_format, postprocess=_strip, metric_fns=(accuracy,),
        choices=_completion_choices,
        description="classification: which of two options is the ending of a line whose "
                    "first half is shown (the other: another document's ending of the same "
                    f"start and length); accuracy, chance 50; {_CAPS}"),
    task_lib.Task(
        name="mini_fill", load=_loader("mini_fill"), preprocess=_fill_format,
        postprocess=_strip, metric_fns=(accuracy,), choices=_fill_choices,
        description="fill the blank: which of 4 words (the others: other documents' answers "
                    "of the same start and length) is the one a line's blank held; "
                    f"accuracy, chance 25; {_CAPS}"),
    task_lib.Task(
        name="mini_phrase_order", load=_loader("mini_phrase_order"),
        preprocess=_phrase_order_format, postprocess=_strip, metric_fns=(exact_match,),
        choices=_phrase_order_choices,
        description="generation: write a line whose 3 pieces are shown shuffled as written "
                    "(rank-classified: the 5 other orders of the pieces); exact match, "
                    f"chance 20; {_CAPS}"),
)

for _task in TASKS:
  task_lib.register(_task)
