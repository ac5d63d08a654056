"""T5's fine-tuning tasks: GLUE, SuperGLUE, SQuAD, CNN/DailyMail and WMT, as text-to-text.

Each task reproduces the reference repository's (google-research/text-to-text-transfer-
transformer) text format, label words, postprocessor and metrics exactly; docs/downstream.md
lists them with the reference functions they follow (`t5/data/preprocessors.py`:
`glue`, `stsb`, `wsc_simple`, `record`, `squad`, `summarize`, `translate`;
`t5/data/postprocessors.py`; `t5/data/glue_utils.py`; `t5/evaluation/metrics.py`).

Examples come from files the user already has (lm.downstream.task_files): a Hugging Face
dataset saved with `save_to_disk`, jsonl or parquet under `<data_dir>/<subdir>`, with the
HF / TFDS field names (`sentence`, `label`, `idx`, ...). Importing this module registers
every task; `get_task("glue_cola")` returns one.

    glue_cola  glue_sst2  glue_mrpc  glue_qqp  glue_stsb  glue_mnli  glue_mnli_matched
    glue_mnli_mismatched  glue_qnli  glue_rte  glue_wnli
    super_glue_boolq  super_glue_cb  super_glue_copa  super_glue_multirc  super_glue_record
    super_glue_rte  super_glue_wic  super_glue_wsc
    squad_v1_1  cnn_dailymail  wmt14_ende  wmt14_enfr  wmt16_enro
"""
from __future__ import annotations

import dataclasses
import functools
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lm.downstream import task_metrics
from lm.downstream.task_files import directory_loader
from lm.downstream.task import Example, Task, register

UNK = "<unk>"  # T5's target for an example without a label (test splits: label -1).


# ---------------------------------------------------------------- GLUE-style classification

def _label_word(label: Any, label_names: Sequence[str], task: str) -> str:
  """T5's label string: label_names[label], or "<unk>" for -1 (no label)."""
  if not isinstance(label, (int, np.integer)):  # bools count: True is class 1
    raise ValueError(f"task {task!r}: label {label!r} is not a class index; expected an int "
                     f"in 0..{len(label_names) - 1} (or -1 for no label).")
  if label == -1:
    return UNK
  if not 0 <= label < len(label_names):
    raise ValueError(f"task {task!r}: label {label} is outside the label set "
                     f"{list(label_names)}; expected 0..{len(label_names) - 1} "
                     "(or -1 for no label).")
  return label_names[label]


def glue_preprocess(raw: Example, *, benchmark: str, feature_names: Sequence[str],
                    label_names: Sequence[str], task: str) -> dict[str, Any]:
  """T5's `preprocessors.glue`: "<benchmark> <key>: <text> <key>: <text>" -> label word.

  `feature_names` is T5's order: the given `feature_names` for MultiRC and WiC, otherwise
  the dataset's text features sorted by name (e.g. MNLI: hypothesis, premise).
  """
  parts = [benchmark]
  for key in feature_names:
    parts += [f"{key}:", str(raw[key])]
  joined = " ".join(parts)
  ex: dict[str, Any] = {}
  if benchmark == "multirc":
    joined = re.sub("<br>", " ", joined)       # T5 removes MultiRC's HTML markup.
    joined = re.sub("<(/)?b>", "", joined)
    idx = raw["idx"]
    ex["idx/paragraph"], ex["idx/question"], ex["idx/answer"] = (
        idx["paragraph"], idx["question"], idx["answer"])
  elif "idx" in raw:
    ex["idx"] = raw["idx"]
  ex["inputs"] = joined
  ex["targets"] = _label_word(raw["label"], label_names, task)
  return ex


def class_id_postprocess(text: str, example: Example | None = None, is_target: bool = False,
                         *, label_names: Sequence[str]) -> int:
  """T5's `string_label_to_class_id`: the label word's index, -1 when it is not one."""
  del example, is_target
  return label_names.index(text) if text in label_names else -1


def _glue_task(name: str, subdir: str, benchmark: str, feature_names: Sequence[str],
               label_names: Sequence[str], metric_fns: tuple, description: str, *,
               splits: tuple[str, ...] = ("train", "validation", "test"),
               split_map: Mapping[str, str] | None = None) -> Task:
  label_names = tuple(label_names)
  load = directory_loader(subdir, name)
  if split_map:
    base_load = load
    load = lambda split, data_dir: base_load(split_map.get(split, split), data_dir)
  return Task(
      name=name, load=load,
      preprocess=functools.partial(glue_preprocess, benchmark=benchmark,
                                   feature_names=tuple(feature_names),
                                   label_names=label_names, task=name),
      postprocess=functools.partial(class_id_postprocess, label_names=label_names),
      metric_fns=metric_fns, splits=splits,
      choices=lambda ex, _labels=label_names: _labels,
      description=description)


# ---------------------------------------------------------------------------- STS-B

def stsb_label_string(label: float, task: str = "glue_stsb") -> str:
  """T5's STS-B target: the score rounded to the nearest 0.2, printed with one decimal.

  As `tf.as_string(tf.round(label * 5) / 5, precision=1)` on a float32 label: rounding is
  half to even (2.5 -> "2.4"). -1 (the test split's missing label) gives "-1.0" as in T5.
  """
  value = float(label)
  if value != -1 and not 0.0 <= value <= 5.0:
    raise ValueError(f"task {task!r}: label {label!r} is outside the score range [0, 5]; "
                     "expected a similarity score in [0, 5] (or -1 for no label).")
  x = np.float32(value)
  rounded = np.round(x * np.float32(5)) / np.float32(5)
  return f"{float(np.float32(rounded)):.1f}"


def stsb_preprocess(raw: Example) -> dict[str, Any]:
  """T5's `preprocessors.stsb`: "stsb sentence1: A sentence2: B" -> e.g. "3.4"."""
  ex = {"inputs": " ".join(["stsb sentence1:", raw["sentence1"], "sentence2:",
                            raw["sentence2"]]),
        "targets": stsb_label_string(raw["label"])}
  if "idx" in raw:
    ex["idx"] = raw["idx"]
  return ex


def string_to_float(text: str, example: Example | None = None, is_target: bool = False,
                    default: float = -1.0) -> float:
  """T5's `postprocessors.string_to_float`: the float, or -1 when the text is not one."""
  del example, is_target
  try:
    return float(text)
  except ValueError:
    return default


# ---------------------------------------------------------------------------- MultiRC

def multirc_postprocess(text: str, example: Example | None = None,
                        is_target: bool = False) -> dict[str, Any]:
  """T5's `postprocessors.multirc`: {"value": 0/1/-1}, plus the question group for targets.

  The group is (paragraph, question) index: T5 groups by `idx/question`; pairing it with the
  paragraph gives the same groups where question indices are global and stays right where a
  dataset numbers questions per paragraph.
  """
  out: dict[str, Any] = {"value": class_id_postprocess(text, label_names=("False", "True"))}
  if is_target:
    out["group"] = (example["idx/paragraph"], example["idx/question"])
  return out


# ----------------------------------------------------------------------------- ReCoRD

def record_expand(split: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """T5's ReCoRD training data: one example per answer (each answer is a target).

  T5 duplicates every split this way and deduplicates by (passage, query) when scoring
  (`metrics.deduplicate_metric`); lm keeps evaluation splits at one example per query,
  which scores the same (the duplicates share their inputs, hence their prediction).
  """
  if split != "train":
    return rows
  out = []
  for row in rows:
    answers = list(row.get("answers") or [])
    for answer in answers or [UNK]:
      out.append({**row, "_target": answer})
  return out


def record_preprocess(raw: Example) -> dict[str, Any]:
  """T5's `preprocessors.record`.

  "record query: <query> entities: <e1>, <e2> passage: <passage>" -> an answer, with the
  passage's "\\n@highlight\\n" markers turned into sentence breaks. The entities are the
  distinct entity strings in sorted order, as in TFDS's super_glue/record.
  """
  passage = re.sub(r"(\.|\?|\!|\"|\')\n@highlight\n", r"\1 ", raw["passage"])
  passage = re.sub(r"\n@highlight\n", ". ", passage)
  answers = list(raw.get("answers") or [])
  # TFDS (which T5 read) lists the distinct entity strings sorted; HF's newer super_glue
  # script stores them in set order, so sorting gives T5's inputs from either.
  entities = sorted(set(raw["entities"]))
  inputs = " ".join(["record query:", raw["query"], "entities:", ", ".join(entities),
                     "passage:", passage])
  target = raw.get("_target", answers[0] if answers else UNK)
  return {"inputs": inputs, "targets": target, "answers": answers, "entities": entities,
          "idx/passage": raw["idx"]["passage"], "idx/query": raw["idx"]["query"]}


def record_postprocess(text: str, example: Example | None = None,
                       is_target: bool = False) -> dict[str, Any]:
  """T5's `postprocessors.record`: {"value": answer} / all answers + the (passage, query) group."""
  if is_target:
    return {"value": list(example["answers"]),
            "group": (example["idx/passage"], example["idx/query"])}
  return {"value": text}


# -------------------------------------------------------------------------------- WSC

# Two texts of WSC whose pronoun T5 places by hand (`preprocessors._wsc_inputs`).
_WSC_SPECIAL_CASES = {
    "The boy continued to whip the pony , and eventually the pony threw him over. John "
    "laughed out quite loud. \"Good for him,\" he said. ":
        "The boy continued to whip the pony , and eventually the pony threw him over. John "
        "laughed out quite loud. \"Good for X ,\" he said.",
    "When they had eventually calmed down a bit , and had gotten home, Mr. Farley put the "
    "magic pebble in an iron safe . Some day they might want to use it , but really for now, "
    "what more could they wish for?":
        "When they had eventually calmed down a bit , and had gotten home, Mr. Farley put the "
        "magic pebble in an iron safe . Some day they might want to use X , but really for "
        "now, what more could they wish for?",
}


def _wsc_inputs(raw: Example, task: str) -> str:
  """The WSC text with the pronoun (word `span2_index`, split on single spaces) as "X"."""
  text = raw["text"]
  if text in _WSC_SPECIAL_CASES:
    return _WSC_SPECIAL_CASES[text]
  words = text.split(" ")
  i = raw["span2_index"]
  if not 0 < i < len(words) or words[i] != raw["span2_text"]:
    raise ValueError(f"task {task!r}: span2_index {i} does not point at the pronoun "
                     f"{raw['span2_text']!r} in {text!r}; expected the index of that word.")
  return " ".join(words[:i] + ["X"] + words[i + 1:])


def wsc_simple_preprocess(raw: Example, task: str = "super_glue_wsc") -> dict[str, Any]:
  """T5's `preprocessors.wsc_simple`: "wsc: <text with *pronoun*>" -> the candidate referent.

  The target is `span1_text` whether or not it is the pronoun's referent; the training
  split keeps only the examples where it is (`wsc_train_filter`).
  """
  marked = re.sub(" X ", lambda _: " *" + raw["span2_text"] + "* ", _wsc_inputs(raw, task))
  label = _wsc_label(raw.get("label", -1), task)  # a row without one: no label
  return {"inputs": "wsc: " + marked, "targets": raw["span1_text"], "label": label,
          "idx": raw.get("idx")}


def _wsc_label(label: Any, task: str = "super_glue_wsc") -> int:
  """WSC's label as an int: 1 (the candidate is the referent), 0, or -1 (no label)."""
  if label not in (-1, 0, 1, True, False):
    raise ValueError(f"task {task!r}: label {label!r} is outside the label set [0, 1]; "
                     "expected 0, 1 (or -1 for no label).")
  return int(label)


def wsc_train_filter(split: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """T5 trains WSC on the examples whose candidate is the referent (correct_referent_only).

  Every row's label is checked first, so a label outside the label set is an error on the
  training split too rather than a row silently filtered out.
  """
  if split != "train":
    return rows
  return [r for r in rows if _wsc_label(r.get("label", 0)) == 1]


_WSC_DETERMINERS = frozenset({
    "a", "an", "few", "her", "his", "each", "every", "many", "much", "my", "our", "some",
    "that", "the", "their", "these", "this", "those", "which", "whose", "your"})


def wsc_simple_postprocess(text: str, example: Example | None = None,
                           is_target: bool = False) -> int:
  """T5's `postprocessors.wsc_simple`: 1 when the prediction names the example's candidate.

  Targets give the example's label. A prediction is cleaned (lower case, determiners
  dropped) and matches when its words are a subset or superset of the candidate's, unless
  exactly one of the two has a possessive "'"; an empty prediction gives -1.
  """
  if is_target:
    return example["label"]

  def clean(s: str) -> str:
    return " ".join(w for w in s.strip().lower().split(" ") if w not in _WSC_DETERMINERS)

  prediction = clean(text)
  if not prediction:
    return -1
  referent = clean(example["targets"])
  if ("'" in prediction) != ("'" in referent):
    return 0
  p, r = set(prediction.split(" ")), set(referent.split(" "))
  return int(p.issubset(r) or r.issubset(p))


# ------------------------------------------------------------------------------ SQuAD

_PUNCT = re.compile("([" + re.escape(string.punctuation) + "])")
_RE2_SPACES = re.compile(r"[\t\n\f\r ]+")  # RE2's \s, which T5's regexes use.


def pad_punctuation(text: str) -> str:
  """T5's `_pad_punctuation`: spaces around ASCII punctuation, whitespace runs collapsed."""
  return _RE2_SPACES.sub(" ", _PUNCT.sub(r" \1 ", text))


def squad_preprocess(raw: Example) -> dict[str, Any]:
  """T5's `preprocessors.squad`: "question: <q> context: <c>" -> the first answer.

  Question, context and answers have their punctuation padded with spaces (so strings may
  end in a space, exactly as T5's do).
  """
  answers = [pad_punctuation(a) for a in raw["answers"]["text"]]
  q, c = pad_punctuation(raw["question"]), pad_punctuation(raw["context"])
  inputs = _RE2_SPACES.sub(" ", " ".join(["question:", q, "context:", c]))
  return {"inputs": inputs, "targets": answers[0] if answers else "", "id": raw.get("id"),
          "context": c, "question": q, "answers": answers}


def qa_postprocess(text: str, example: Example | None = None, is_target: bool = False):
  """T5's `postprocessors.qa`: the answer, or every gold answer for targets."""
  return list(example["answers"]) if is_target else text


# ---------------------------------------------------------- summarisation and translation

def summarize_preprocess(raw: Example) -> dict[str, Any]:
  """T5's `preprocessors.summarize` on CNN/DailyMail: "summarize: <article>" -> highlights."""
  return {"inputs": "summarize: " + raw["article"], "targets": raw["highlights"]}


LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "ro": "Romanian"}


def translate_preprocess(raw: Example, *, source: str, target: str) -> dict[str, Any]:
  """T5's `preprocessors.translate`: "translate English to German: <en>" -> <de>.

  Reads TFDS rows ({"de": ..., "en": ...}) and HF rows ({"translation": {...}}) alike.
  """
  pair = raw["translation"] if "translation" in raw else raw
  return {"inputs": f"translate {LANGUAGE_NAMES[source]} to {LANGUAGE_NAMES[target]}: "
                    + pair[source],
          "targets": pair[target]}


# --------------------------------------------------------------------------- registry

def _checked(preprocess, task: str):
  """`preprocess` with a missing field reported as one line naming the task and the fields."""

  def fn(raw: Example) -> dict[str, Any]:
    try:
      return preprocess(raw)
    except KeyError as e:
      raise ValueError(f"task {task!r}: an example has no field {e.args[0]!r} (its fields: "
                       f"{sorted(raw)}); expected the Hugging Face / TFDS dataset's field "
                       "names (docs/downstream.md §2).") from None

  return fn


def _register(task: Task) -> None:
  register(dataclasses.replace(task, preprocess=_checked(task.preprocess, task.name)))


_GLUE_SPLITS = ("train", "validation", "test")
_CLS = (task_metrics.accuracy,)
_F1_ACC = (task_metrics.f1_score_with_invalid, task_metrics.accuracy)


def _register_all() -> None:
  glue = [
      # name, subdir, benchmark, features (T5's order), labels, metrics, description
      ("glue_cola", "glue/cola", "cola", ("sentence",), ("unacceptable", "acceptable"),
       (task_metrics.matthews_corrcoef,), "GLUE CoLA: acceptability; Matthews corr."),
      ("glue_sst2", "glue/sst2", "sst2", ("sentence",), ("negative", "positive"), _CLS,
       "GLUE SST-2: sentiment; accuracy."),
      ("glue_mrpc", "glue/mrpc", "mrpc", ("sentence1", "sentence2"),
       ("not_equivalent", "equivalent"), _F1_ACC, "GLUE MRPC: paraphrase; F1 and accuracy."),
      ("glue_qqp", "glue/qqp", "qqp", ("question1", "question2"),
       ("not_duplicate", "duplicate"), _F1_ACC, "GLUE QQP: duplicate questions; F1, accuracy."),
      ("glue_qnli", "glue/qnli", "qnli", ("question", "sentence"),
       ("entailment", "not_entailment"), _CLS, "GLUE QNLI: answer in sentence; accuracy."),
      ("glue_rte", "glue/rte", "rte", ("sentence1", "sentence2"),
       ("entailment", "not_entailment"), _CLS, "GLUE RTE: entailment; accuracy."),
      ("glue_wnli", "glue/wnli", "wnli", ("sentence1", "sentence2"),
       ("not_entailment", "entailment"), _CLS,
       "GLUE WNLI: pronoun entailment (T5's glue_wnli_v002 format); accuracy; not in the "
       "GLUE average."),
  ]
  for name, subdir, bench, feats, labels, fns, desc in glue:
    _register(_glue_task(name, subdir, bench, feats, labels, fns, desc))

  mnli_labels = ("entailment", "neutral", "contradiction")
  mnli_feats = ("hypothesis", "premise")
  _register(_glue_task(
      "glue_mnli", "glue/mnli", "mnli", mnli_feats, mnli_labels, _CLS,
      "GLUE MNLI: 3-way entailment (train; validation matched / mismatched); accuracy.",
      splits=("train", "validation_matched", "validation_mismatched", "test_matched",
              "test_mismatched")))
  for which in ("matched", "mismatched"):
    _register(_glue_task(
        f"glue_mnli_{which}", "glue/mnli", "mnli", mnli_feats, mnli_labels, _CLS,
        f"GLUE MNLI {which} (evaluation only; reads glue/mnli's validation_{which}); "
        "accuracy.",
        splits=("validation", "test"),
        split_map={"validation": f"validation_{which}", "test": f"test_{which}"}))

  _register(Task(
      name="glue_stsb", load=directory_loader("glue/stsb", "glue_stsb"),
      preprocess=stsb_preprocess, postprocess=string_to_float,
      metric_fns=(task_metrics.pearson_corrcoef, task_metrics.spearman_corrcoef),
      splits=_GLUE_SPLITS,
      description="GLUE STS-B: similarity 0-5 as 0.2-rounded strings; Pearson, Spearman."))

  super_glue = [
      ("super_glue_boolq", "boolq", ("passage", "question"), ("False", "True"), _CLS,
       "SuperGLUE BoolQ: yes/no question on a passage; accuracy."),
      ("super_glue_cb", "cb", ("hypothesis", "premise"),
       ("entailment", "contradiction", "neutral"),
       (task_metrics.mean_multiclass_f1(3), task_metrics.accuracy),
       "SuperGLUE CB: 3-way entailment; mean 3-class F1 and accuracy."),
      ("super_glue_copa", "copa", ("choice1", "choice2", "premise", "question"),
       ("choice1", "choice2"), _CLS, "SuperGLUE COPA: cause / effect choice; accuracy."),
      ("super_glue_rte", "rte", ("hypothesis", "premise"), ("entailment", "not_entailment"),
       _CLS, "SuperGLUE RTE: entailment; accuracy."),
      ("super_glue_wic", "wic", ("sentence1", "sentence2", "word"), ("False", "True"), _CLS,
       "SuperGLUE WiC: same word sense; accuracy."),
  ]
  for name, config, feats, labels, fns, desc in super_glue:
    _register(_glue_task(name, f"super_glue/{config}", config, feats, labels, fns, desc))

  multirc_labels = ("False", "True")
  _register(Task(
      name="super_glue_multirc",
      load=directory_loader("super_glue/multirc", "super_glue_multirc"),
      preprocess=functools.partial(
          glue_preprocess, benchmark="multirc", feature_names=("question", "answer",
                                                               "paragraph"),
          label_names=multirc_labels, task="super_glue_multirc"),
      postprocess=multirc_postprocess,
      metric_fns=(task_metrics.multirc_f1_over_all_answers, task_metrics.multirc_exact_match),
      splits=_GLUE_SPLITS, choices=lambda ex: multirc_labels,
      description="SuperGLUE MultiRC: is the answer right; F1 over all answers (F1a) and "
                  "exact match per question."))

  _register(Task(
      name="super_glue_record",
      load=directory_loader("super_glue/record", "super_glue_record",
                            transform=record_expand),
      preprocess=record_preprocess, postprocess=record_postprocess,
      metric_fns=(task_metrics.record,), splits=_GLUE_SPLITS,
      choices=lambda ex: tuple(ex["entities"]),
      description="SuperGLUE ReCoRD: the entity filling @placeholder; F1 and EM, max over "
                  "answers."))

  _register(Task(
      name="super_glue_wsc",
      load=directory_loader("super_glue/wsc.fixed", "super_glue_wsc",
                            transform=wsc_train_filter),
      preprocess=wsc_simple_preprocess, postprocess=wsc_simple_postprocess,
      metric_fns=(task_metrics.accuracy,), splits=_GLUE_SPLITS,
      description="SuperGLUE WSC in T5's wsc_simple format (train: correct referents only; "
                  "eval: does the decoded referent match the candidate); accuracy."))

  _register(Task(
      name="squad_v1_1", load=directory_loader("squad", "squad_v1_1"),
      preprocess=squad_preprocess, postprocess=qa_postprocess,
      metric_fns=(task_metrics.squad,), splits=("train", "validation"),
      description="SQuAD v1.1: answer from the context; exact match and F1, max over "
                  "gold answers."))

  _register(Task(
      name="cnn_dailymail", load=directory_loader("cnn_dailymail", "cnn_dailymail"),
      preprocess=summarize_preprocess, metric_fns=(task_metrics.rouge,),
      splits=("train", "validation", "test"),
      description="CNN/DailyMail: summarise a news article; ROUGE-1/2/Lsum F."))

  for name, subdir, src, tgt in (("wmt14_ende", "wmt14/de-en", "en", "de"),
                                 ("wmt14_enfr", "wmt14/fr-en", "en", "fr"),
                                 ("wmt16_enro", "wmt16/ro-en", "en", "ro")):
    _register(Task(
        name=name, load=directory_loader(subdir, name),
        preprocess=functools.partial(translate_preprocess, source=src, target=tgt),
        metric_fns=(task_metrics.bleu,), splits=("train", "validation", "test"),
        description=f"WMT {LANGUAGE_NAMES[src]} to {LANGUAGE_NAMES[tgt]}; SacreBLEU."))


_register_all()
