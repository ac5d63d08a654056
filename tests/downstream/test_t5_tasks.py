"""T5's tasks: the exact strings of t5/data/preprocessors.py and postprocessors.py.

The fixtures are written in the Hugging Face datasets' formats (glue, super_glue, squad,
cnn_dailymail, wmt14 / wmt16) as jsonl or parquet; the expected strings are derived by hand
from the reference code (and its preprocessors_test.py where it has the same case).
"""
import json
import os

import pytest

from lm.downstream import t5_tasks
from lm.downstream.task import get_task, task_names

T5_TASKS = ["glue_cola", "glue_sst2", "glue_mrpc", "glue_qqp", "glue_stsb", "glue_mnli",
            "glue_mnli_matched", "glue_mnli_mismatched", "glue_qnli", "glue_rte", "glue_wnli",
            "super_glue_boolq", "super_glue_cb", "super_glue_copa", "super_glue_multirc",
            "super_glue_record", "super_glue_rte", "super_glue_wic", "super_glue_wsc",
            "squad_v1_1", "cnn_dailymail", "wmt14_ende", "wmt14_enfr", "wmt16_enro"]


def write(data_dir, subdir, split, rows, kind="jsonl"):
  d = os.path.join(str(data_dir), subdir)
  os.makedirs(d, exist_ok=True)
  if kind == "jsonl":
    with open(os.path.join(d, f"{split}.jsonl"), "w", encoding="utf-8") as f:
      for r in rows:
        f.write(json.dumps(r) + "\n")
  else:
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist(rows), os.path.join(d, f"{split}-00000-of-00001.parquet"))


def examples(tmp_path, task, subdir, split, rows, kind="jsonl"):
  write(tmp_path, subdir, split, rows, kind)
  return get_task(task).examples(split, str(tmp_path))


def test_every_task_registered():
  assert set(T5_TASKS) <= set(task_names())


def test_unknown_task_lists_known_ones():
  with pytest.raises(ValueError, match=r"unknown task 'glue_mnlii'; expected one of \[.*"
                                       r"'glue_mnli', 'glue_mnli_matched'.*\]"):
    get_task("glue_mnlii")


WSC_ROW = {"text": "Mitchell asked Tom if he could lend some money.", "span1_index": 2,
           "span1_text": "Tom", "span2_index": 4, "span2_text": "he", "label": 1, "idx": 1}


# ------------------------------------------------------------------------------- GLUE

GLUE_CASES = [
    # task, subdir, raw row (HF glue fields), inputs, targets, class id
    ("glue_cola", "glue/cola", {"sentence": "The book was read.", "label": 1, "idx": 7},
     "cola sentence: The book was read.", "acceptable", 1),
    ("glue_sst2", "glue/sst2", {"sentence": "a gorgeous film ", "label": 1, "idx": 0},
     "sst2 sentence: a gorgeous film ", "positive", 1),
    ("glue_mrpc", "glue/mrpc", {"sentence1": "He said A.", "sentence2": "A, he said.",
                                "label": 0, "idx": 1},
     "mrpc sentence1: He said A. sentence2: A, he said.", "not_equivalent", 0),
    ("glue_qqp", "glue/qqp", {"question1": "Why do I easily get bored of my friends?",
                              "question2": "Why do I get bored of friends so quickly?",
                              "label": 1, "idx": 10},
     "qqp question1: Why do I easily get bored of my friends? question2: Why do I get bored "
     "of friends so quickly?", "duplicate", 1),
    ("glue_qnli", "glue/qnli", {"question": "Who?", "sentence": "Bob did.", "label": 0,
                                "idx": 2},
     "qnli question: Who? sentence: Bob did.", "entailment", 0),
    ("glue_rte", "glue/rte", {"sentence1": "A dog runs.", "sentence2": "A cat sleeps.",
                              "label": 1, "idx": 3},
     "rte sentence1: A dog runs. sentence2: A cat sleeps.", "not_entailment", 1),
    ("glue_wnli", "glue/wnli", {"sentence1": "The fish ate the worm. It was tasty.",
                                "sentence2": "The worm was tasty.", "label": 1, "idx": 2},
     "wnli sentence1: The fish ate the worm. It was tasty. sentence2: The worm was tasty.",
     "entailment", 1),
]


@pytest.mark.parametrize("task,subdir,raw,inputs,targets,cls", GLUE_CASES,
                         ids=[c[0] for c in GLUE_CASES])
def test_glue(tmp_path, task, subdir, raw, inputs, targets, cls):
  (ex,) = examples(tmp_path, task, subdir, "validation", [raw], kind="parquet")
  assert ex["inputs"] == inputs
  assert ex["targets"] == targets
  assert ex["idx"] == raw["idx"]
  t = get_task(task)
  assert t.postprocess(ex["targets"], ex, is_target=True) == cls
  assert t.postprocess(targets, ex) == cls
  assert t.postprocess("something else", ex) == -1      # T5: not a label word -> -1
  assert targets in t.choices(ex)


def test_mnli_splits_and_formats(tmp_path):
  raw = [{"premise": "A man sleeps.", "hypothesis": "A person rests.", "label": 0, "idx": 0},
         {"premise": "P2", "hypothesis": "H2", "label": 2, "idx": 1}]
  write(tmp_path, "glue/mnli", "validation_matched", raw)
  write(tmp_path, "glue/mnli", "validation_mismatched", raw[1:])
  ex = get_task("glue_mnli_matched").examples("validation", str(tmp_path))
  assert [e["inputs"] for e in ex] == ["mnli hypothesis: A person rests. premise: A man sleeps.",
                                       "mnli hypothesis: H2 premise: P2"]
  assert [e["targets"] for e in ex] == ["entailment", "contradiction"]
  ex = get_task("glue_mnli_mismatched").examples("validation", str(tmp_path))
  assert [e["targets"] for e in ex] == ["contradiction"]
  ex = get_task("glue_mnli").examples("validation_matched", str(tmp_path))
  assert len(ex) == 2
  assert get_task("glue_mnli").choices(ex[0]) == ("entailment", "neutral", "contradiction")


def test_unlabelled_test_split_gives_unk(tmp_path):
  (ex,) = examples(tmp_path, "glue_cola", "glue/cola", "test",
                   [{"sentence": "x", "label": -1, "idx": 0}])
  assert ex["targets"] == "<unk>"


@pytest.mark.parametrize("label", [2, -3, "acceptable", 0.5])
def test_label_outside_label_set(tmp_path, label):
  write(tmp_path, "glue/cola", "train", [{"sentence": "x", "label": label, "idx": 0}])
  with pytest.raises(ValueError, match=r"task 'glue_cola': label .* expected .*0\.\.1"):
    get_task("glue_cola").examples("train", str(tmp_path))


@pytest.mark.parametrize("task,subdir,split,row", [
    ("glue_mnli", "glue/mnli", "train", {"premise": "P", "hypothesis": "H", "label": 3}),
    ("super_glue_cb", "super_glue/cb", "validation",
     {"premise": "P", "hypothesis": "H", "label": 3, "idx": 0}),
    ("super_glue_multirc", "super_glue/multirc", "train",
     {"paragraph": "P", "question": "Q", "answer": "A", "label": 2,
      "idx": {"paragraph": 0, "question": 0, "answer": 0}}),
    ("super_glue_wsc", "super_glue/wsc.fixed", "validation", {**WSC_ROW, "label": 2}),
    # The training split keeps only label 1 (T5's correct_referent_only): a label outside
    # the set must be an error there too, not a row silently filtered out.
    ("super_glue_wsc", "super_glue/wsc.fixed", "train", {**WSC_ROW, "label": 2}),
], ids=["mnli", "cb", "multirc", "wsc_validation", "wsc_train"])
def test_label_outside_label_set_of_other_tasks(tmp_path, task, subdir, split, row):
  write(tmp_path, subdir, split, [row])
  with pytest.raises(ValueError, match=rf"task '{task}': label .* is outside the label set"):
    get_task(task).examples(split, str(tmp_path))


# ------------------------------------------------------------------------------ STS-B

@pytest.mark.parametrize("label,target", [
    (2.8, "2.8"),     # T5's preprocessors_test: on the 0.2 grid already
    (1.66, "1.6"),    # T5's preprocessors_test: 8.3 -> 8 -> 1.6
    (1.7, "1.6"),     # float32(1.7) * 5 is exactly 8.5 -> half to even 8 -> 1.6
    (4.9, "4.8"),     # float32(4.9) * 5 is exactly 24.5 -> 24 -> 4.8
    (4.95, "5.0"),
    (2.5, "2.4"),     # 12.5 exactly: round half to even -> 12 -> 2.4
    (0.1, "0.0"),     # 0.5 -> 0 (half to even)
    (0.3, "0.4"),     # 1.5 -> 2 (half to even)
    (5.0, "5.0"),
    (0.0, "0.0"),
    (3, "3.0"),
])
def test_stsb_rounding(label, target):
  assert t5_tasks.stsb_label_string(label) == target


def test_stsb_task(tmp_path):
  (ex,) = examples(tmp_path, "glue_stsb", "glue/stsb", "validation",
                   [{"sentence1": "Big news.", "sentence2": "No idea.", "label": 2.8, "idx": 10}])
  assert ex == {"inputs": "stsb sentence1: Big news. sentence2: No idea.", "targets": "2.8",
                "idx": 10}
  t = get_task("glue_stsb")
  assert t.postprocess("2.8", ex, is_target=True) == 2.8
  assert t.postprocess("high", ex) == -1.0
  assert t.choices is None
  write(tmp_path, "glue/stsb", "train", [{"sentence1": "a", "sentence2": "b", "label": 5.2}])
  with pytest.raises(ValueError, match=r"label 5.2 is outside the score range \[0, 5\]"):
    t.examples("train", str(tmp_path))


# -------------------------------------------------------------------------- SuperGLUE

SUPER_GLUE_CASES = [
    ("super_glue_boolq", "super_glue/boolq",
     {"question": "is it raining", "passage": "It rains today.", "label": 1, "idx": 4},
     "boolq passage: It rains today. question: is it raining", "True", 1),
    ("super_glue_cb", "super_glue/cb",
     {"premise": "P.", "hypothesis": "H.", "label": 2, "idx": 0},
     "cb hypothesis: H. premise: P.", "neutral", 2),
    ("super_glue_copa", "super_glue/copa",
     {"premise": "My body cast a shadow over the grass.", "choice1": "The sun was rising.",
      "choice2": "The grass was cut.", "question": "cause", "label": 0, "idx": 0},
     "copa choice1: The sun was rising. choice2: The grass was cut. premise: My body cast a "
     "shadow over the grass. question: cause", "choice1", 0),
    ("super_glue_rte", "super_glue/rte",
     {"premise": "A dog runs.", "hypothesis": "An animal moves.", "label": 0, "idx": 1},
     "rte hypothesis: An animal moves. premise: A dog runs.", "entailment", 0),
    ("super_glue_wic", "super_glue/wic",
     {"word": "bank", "sentence1": "The river bank.", "sentence2": "The bank loan.",
      "start1": 10, "start2": 4, "end1": 14, "end2": 8, "label": 0, "idx": 3},
     "wic sentence1: The river bank. sentence2: The bank loan. word: bank", "False", 0),
]


@pytest.mark.parametrize("task,subdir,raw,inputs,targets,cls", SUPER_GLUE_CASES,
                         ids=[c[0] for c in SUPER_GLUE_CASES])
def test_super_glue(tmp_path, task, subdir, raw, inputs, targets, cls):
  (ex,) = examples(tmp_path, task, subdir, "validation", [raw])
  assert (ex["inputs"], ex["targets"], ex["idx"]) == (inputs, targets, raw["idx"])
  t = get_task(task)
  assert t.postprocess(targets, ex, is_target=True) == cls
  assert targets in t.choices(ex)


def test_multirc(tmp_path):
  # T5's preprocessors_test case: HTML markup removed, (question, answer, paragraph) order.
  paragraph = ("<b>Sent 1: </b>Once upon a time, there was a squirrel named Joey.<br><b>Sent 2: "
               "</b>Joey loved to go outside and play with his cousin Jimmy.")
  rows = [{"paragraph": paragraph, "question": "Why was Joey surprised?",
           "answer": "There was only pie to eat", "label": 1,
           "idx": {"paragraph": 5, "question": 1, "answer": 3}},
          {"paragraph": paragraph, "question": "Why was Joey surprised?", "answer": "Rain",
           "label": 0, "idx": {"paragraph": 5, "question": 1, "answer": 4}}]
  ex = examples(tmp_path, "super_glue_multirc", "super_glue/multirc", "validation", rows,
                kind="parquet")
  assert ex[0]["inputs"] == (
      "multirc question: Why was Joey surprised? answer: There was only pie to eat paragraph: "
      "Sent 1: Once upon a time, there was a squirrel named Joey. Sent 2: Joey loved to go "
      "outside and play with his cousin Jimmy.")
  assert [e["targets"] for e in ex] == ["True", "False"]
  assert (ex[0]["idx/paragraph"], ex[0]["idx/question"], ex[0]["idx/answer"]) == (5, 1, 3)
  t = get_task("super_glue_multirc")
  golds = [t.postprocess(e["targets"], e, is_target=True) for e in ex]
  assert golds == [{"value": 1, "group": (5, 1)}, {"value": 0, "group": (5, 1)}]
  assert t.postprocess("maybe", ex[0]) == {"value": -1}
  preds = [t.postprocess(s, e) for s, e in zip(["True", "True"], ex)]
  assert t.compute_metrics(golds, preds) == pytest.approx({"f1": 100 * 2 / 3,
                                                           "exact_match": 0.0})


RECORD_PASSAGE = ("This is the passage\n@highlight\nAnother sentence.\n@highlight\nThird "
                  "sentence.")
RECORD_INPUTS = ("record query: It was @placeholder. entities: A, B, C passage: This is the "
                 "passage. Another sentence. Third sentence.")


def test_record(tmp_path):
  # Entities in HF's set order, with a repeat: T5 (TFDS) saw them distinct and sorted.
  row = {"passage": RECORD_PASSAGE, "query": "It was @placeholder.",
         "entities": ["C", "A", "B", "A"], "entity_spans": {"text": ["A", "B", "C"],
                                                      "start": [0, 2, 4], "end": [1, 3, 5]},
         "answers": ["A", "C"], "idx": {"passage": 1, "query": 2}}
  t = get_task("super_glue_record")
  # Training: one example per answer (T5's preprocessors_test).
  train = examples(tmp_path, "super_glue_record", "super_glue/record", "train", [row])
  assert [(e["inputs"], e["targets"]) for e in train] == [(RECORD_INPUTS, "A"),
                                                          (RECORD_INPUTS, "C")]
  assert all(e["answers"] == ["A", "C"] and e["idx/passage"] == 1 and e["idx/query"] == 2
             for e in train)
  # Evaluation: one example per query, scored against every answer.
  (ex,) = examples(tmp_path, "super_glue_record", "super_glue/record", "validation", [row])
  assert (ex["inputs"], ex["targets"]) == (RECORD_INPUTS, "A")
  assert t.choices(ex) == ("A", "B", "C")
  gold = t.postprocess(ex["targets"], ex, is_target=True)
  assert gold == {"value": ["A", "C"], "group": (1, 2)}
  assert t.compute_metrics([gold], [t.postprocess("C", ex)]) == {"em": 100.0, "f1": 100.0}
  # No answers (test split): "<unk>".
  (ex,) = examples(tmp_path, "super_glue_record", "super_glue/record", "test",
                   [{**row, "answers": []}])
  assert ex["targets"] == "<unk>"


def test_record_highlight_after_punctuation():
  ex = t5_tasks.record_preprocess({
      "passage": "He won!\n@highlight\nShe said \"no\"\n@highlight\nEnd", "query": "@placeholder",
      "entities": ["He"], "answers": ["He"], "idx": {"passage": 0, "query": 0}})
  assert ex["inputs"] == ("record query: @placeholder entities: He passage: He won! She said "
                          "\"no\" End")


WSC_ROWS = [
    {"text": "Mitchell asked Tom if he could lend some money.", "span1_index": 2,
     "span1_text": "Tom", "span2_index": 4, "span2_text": "he", "label": 1, "idx": 1},
    {"text": "Mitchell asked Tom if he could lend some money.", "span1_index": 0,
     "span1_text": "Mitchell", "span2_index": 4, "span2_text": "he", "label": 0, "idx": 2},
]


def test_wsc_simple(tmp_path):
  t = get_task("super_glue_wsc")
  # Training keeps the examples whose candidate is the referent (correct_referent_only).
  train = examples(tmp_path, "super_glue_wsc", "super_glue/wsc.fixed", "train", WSC_ROWS)
  assert train == [{"inputs": "wsc: Mitchell asked Tom if *he* could lend some money.",
                    "targets": "Tom", "label": 1, "idx": 1}]
  val = examples(tmp_path, "super_glue_wsc", "super_glue/wsc.fixed", "validation", WSC_ROWS)
  assert [e["targets"] for e in val] == ["Tom", "Mitchell"]
  golds = [t.postprocess(e["targets"], e, is_target=True) for e in val]
  assert golds == [1, 0]
  # The model names Tom for both: right on the first (Tom is the referent), and on the
  # second (the prediction is not the candidate Mitchell, whose label is 0).
  preds = [t.postprocess("Tom", e) for e in val]
  assert preds == [1, 0]
  assert t.compute_metrics(golds, preds) == {"accuracy": 100.0}


@pytest.mark.parametrize("prediction,referent,expected", [
    ("Tom", "Tom", 1),
    ("the fuzzy bunny", "bunny", 1),       # superset after dropping the determiner
    ("bunny", "The fuzzy bunny", 1),       # subset
    ("Bob", "Bob's hat", 0),               # one possessive only
    ("Bob's hat", "Bob's hat", 1),
    ("the", "Tom", -1),                    # empty after cleaning
    ("Mary", "Tom", 0),
])
def test_wsc_simple_postprocess(prediction, referent, expected):
  ex = {"targets": referent, "label": 1}
  assert t5_tasks.wsc_simple_postprocess(prediction, ex) == expected


def test_wsc_bad_span_index():
  with pytest.raises(ValueError, match="span2_index 3 does not point at the pronoun 'he'"):
    t5_tasks.wsc_simple_preprocess({**WSC_ROWS[0], "span2_index": 3})


def test_wsc_span_index_bounds_and_the_unlabelled_test_split():
  # The pronoun must be a word after the first (T5 marks " X ", a space on each side):
  # index 0, a negative index and the index one past the last word are refused, each with
  # the error, even where the word at that (Python) index is the pronoun.
  row = {"text": "he asked Tom to lend him", "span1_text": "Tom", "span2_text": "he",
         "label": 1, "idx": 0}
  for i in (0, -6):
    with pytest.raises(ValueError, match=f"span2_index {i} does not point at the pronoun"):
      t5_tasks.wsc_simple_preprocess({**row, "span2_index": i})
  with pytest.raises(ValueError, match="span2_index -1 does not point at the pronoun 'him'"):
    t5_tasks.wsc_simple_preprocess({**row, "span2_text": "him", "span2_index": -1})
  for i in (6, 7):
    with pytest.raises(ValueError, match=f"span2_index {i} does not point at the pronoun"):
      t5_tasks.wsc_simple_preprocess({**row, "span2_index": i})
  # A test-split example has label -1 (no label); it is kept as -1.
  ex = t5_tasks.wsc_simple_preprocess({**WSC_ROWS[0], "label": -1})
  assert ex["label"] == -1
  # The training filter on a split name built at run time (a flag's value, not the literal).
  train = "".join(["tr", "ain"])
  assert t5_tasks.wsc_train_filter(train, WSC_ROWS) == WSC_ROWS[:1]
  for split in ("validation", "test"):
    assert t5_tasks.wsc_train_filter(split, WSC_ROWS) == WSC_ROWS
  # A training row without a label is not known to name the referent: dropped.
  unlabelled = {k: v for k, v in WSC_ROWS[0].items() if k != "label"}
  assert t5_tasks.wsc_train_filter("train", [unlabelled, WSC_ROWS[0]]) == WSC_ROWS[:1]
  # ... and a preprocessed one has no label (-1), like the test split's.
  assert t5_tasks.wsc_simple_preprocess(unlabelled)["label"] == -1


def test_cb_reports_t5s_two_metrics():
  got = get_task("super_glue_cb").compute_metrics([0, 1, 2, 2], [0, 2, 2, 2])
  # Class F1s 1, 0, 0.8 -> mean 60 (three classes: entailment, contradiction, neutral).
  assert got == {"mean_3class_f1": pytest.approx(60.0), "accuracy": 75.0}


def test_wsc_special_case():
  text = ("When they had eventually calmed down a bit , and had gotten home, Mr. Farley put "
          "the magic pebble in an iron safe . Some day they might want to use it , but really "
          "for now, what more could they wish for?")
  ex = t5_tasks.wsc_simple_preprocess({"text": text, "span1_text": "the magic pebble",
                                       "span2_index": 99, "span2_text": "it", "label": 1,
                                       "idx": 0})
  assert "might want to use *it* , but" in ex["inputs"]


# ------------------------------------------------------- SQuAD, CNN/DM, translation

def test_squad(tmp_path):
  # T5's preprocessors_test case, with HF's answers {text, answer_start}.
  row = {"id": "testid", "title": "T", "context": "Some context.", "question": "A question?",
         "answers": {"text": ["The answer.", "Another answer."], "answer_start": [0, 0]}}
  (ex,) = examples(tmp_path, "squad_v1_1", "squad", "validation", [row], kind="parquet")
  assert ex == {"inputs": "question: A question ? context: Some context . ",
                "targets": "The answer . ", "id": "testid", "context": "Some context . ",
                "question": "A question ? ", "answers": ["The answer . ", "Another answer . "]}
  t = get_task("squad_v1_1")
  gold = t.postprocess(ex["targets"], ex, is_target=True)
  assert gold == ["The answer . ", "Another answer . "]
  assert t.compute_metrics([gold], [t.postprocess("another answer", ex)]) == {
      "em": 100.0, "f1": 100.0}


def test_pad_punctuation():
  assert t5_tasks.pad_punctuation("\"Hi,\"  she said.\n(Yes)") == ' " Hi , " she said . ( Yes ) '


def test_cnn_dailymail(tmp_path):
  row = {"article": "LONDON (CNN) -- A thing happened.", "highlights": "A thing .\nIt did .",
         "id": "abc"}
  (ex,) = examples(tmp_path, "cnn_dailymail", "cnn_dailymail", "validation", [row])
  assert ex == {"inputs": "summarize: LONDON (CNN) -- A thing happened.",
                "targets": "A thing .\nIt did ."}
  t = get_task("cnn_dailymail")
  assert set(t.compute_metrics([ex["targets"]], [ex["targets"]])) == {
      "rouge1", "rouge2", "rougeLsum"}


@pytest.mark.parametrize("task,subdir,lang,name", [
    ("wmt14_ende", "wmt14/de-en", "de", "German"),
    ("wmt14_enfr", "wmt14/fr-en", "fr", "French"),
    ("wmt16_enro", "wmt16/ro-en", "ro", "Romanian"),
])
def test_translate(tmp_path, task, subdir, lang, name):
  # HF's {"translation": {...}} rows and TFDS's flat rows give the same example.
  hf = {"translation": {lang: "Das ist gut.", "en": "That is good."}}
  (ex,) = examples(tmp_path, task, subdir, "validation", [hf])
  assert ex == {"inputs": f"translate English to {name}: That is good.",
                "targets": "Das ist gut."}
  assert t5_tasks.translate_preprocess({lang: "Das ist gut.", "en": "That is good."},
                                       source="en", target=lang) == ex
  assert get_task(task).compute_metrics([ex["targets"]], [ex["targets"]]) == {
      "bleu": pytest.approx(100.0)}


def test_missing_field_names_task_and_fields(tmp_path):
  write(tmp_path, "glue/mrpc", "train", [{"text_a": "x", "text_b": "y", "label": 0}])
  with pytest.raises(ValueError, match=r"task 'glue_mrpc': an example has no field 'sentence1' "
                                       r"\(its fields: \['label', 'text_a', 'text_b'\]\)"):
    get_task("glue_mrpc").examples("train", str(tmp_path))


def test_the_registry_imports_lms_own_tasks_on_first_use():
  # A fresh interpreter importing only lm.downstream.task: get_task and task_names import
  # the modules that register T5's tasks and the mini suite's.
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  code = ("from lm.downstream.task import get_task, task_names\n"
          "print(get_task('mini_next_line').name)\n"
          "names = task_names()\n"
          "print('glue_rte' in names, names == sorted(names))\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
  assert out.stdout.split() == ["mini_next_line", "True", "True"]


def test_compute_metrics_merges_every_metric_and_checks_lengths():
  from lm.downstream.task import Task  # pylint: disable=g-import-not-at-top
  t = Task(name="t", load=lambda split, data_dir: [], preprocess=dict,
           metric_fns=(lambda ts, ps: {"n": len(ts)},
                       lambda ts, ps: {"same": sum(a == b for a, b in zip(ts, ps))}))
  # 300 of each: lengths above CPython's small-int cache are equal but not identical.
  golds = list(range(300))
  got = t.compute_metrics(golds, golds[:-1] + [-1])
  assert got == {"n": 300.0, "same": 299.0} and all(type(v) is float for v in got.values())
  for n_targets, n_predictions in ((3, 2), (2, 3)):
    with pytest.raises(ValueError, match=f"task 't': {n_targets} targets but {n_predictions} "
                                         "predictions"):
      t.compute_metrics([0] * n_targets, [0] * n_predictions)
  assert t.postprocess("text", {}, is_target=True) == "text"
  import dataclasses  # pylint: disable=g-import-not-at-top
  with pytest.raises(dataclasses.FrozenInstanceError):   # registered tasks cannot change
    t.name = "u"


# ---------------------------------------------------------------- found by mutation testing

def test_label_words_of_numpy_ints_and_labels_past_the_set():
  import numpy as np  # pylint: disable=g-import-not-at-top
  names = ("unacceptable", "acceptable")
  # NumPy integers (a loader's int64 column) read as the ints: -1 is "no label".
  assert t5_tasks._label_word(np.int64(-1), names, "t") == t5_tasks.UNK
  assert t5_tasks._label_word(np.int64(1), names, "t") == "acceptable"
  assert t5_tasks._label_word(True, names, "t") == "acceptable"   # bools count
  for label in (2, 3, 300, np.int64(2)):
    with pytest.raises(ValueError, match=rf"label {label} is outside the label set"):
      t5_tasks._label_word(label, names, "t")


def test_glue_preprocess_reads_a_benchmark_name_built_at_run_time():
  # A name that equals "multirc" but is not the interned literal (a flag's value).
  raw = {"paragraph": "<b>A</b> b.<br>C.", "question": "Q", "answer": "A", "label": 1,
         "idx": {"paragraph": 3, "question": 4, "answer": 5}}
  ex = t5_tasks.glue_preprocess(raw, benchmark="".join(["multi", "rc"]),
                                feature_names=("question", "answer", "paragraph"),
                                label_names=("False", "True"), task="t")
  assert ex == {"inputs": "multirc question: Q answer: A paragraph: A b. C.",
                "targets": "True", "idx/paragraph": 3, "idx/question": 4, "idx/answer": 5}


@pytest.mark.parametrize("label", [-3, -1.5, -0.5, -0.01, 5.01, 6])
def test_stsb_refuses_scores_outside_zero_five_but_minus_one(label):
  with pytest.raises(ValueError, match=rf"label {label} is outside the score range"):
    t5_tasks.stsb_label_string(label)


def test_stsb_no_label_is_minus_one():
  assert t5_tasks.stsb_label_string(-1) == "-1.0"       # T5: the test split's -1 as is
  assert t5_tasks.stsb_label_string(-1.0) == "-1.0"
  assert t5_tasks.stsb_label_string(1) == "1.0"


def test_record_expands_a_training_split_named_at_run_time_and_rows_without_answers():
  rows = [{"query": "q", "answers": ["A", "B"]}, {"query": "r", "answers": []},
          {"query": "s"}]
  train = "".join(["tr", "ain"])          # equal to "train", not the interned literal
  assert t5_tasks.record_expand(train, rows) == [
      {**rows[0], "_target": "A"}, {**rows[0], "_target": "B"},
      {**rows[1], "_target": t5_tasks.UNK}, {**rows[2], "_target": t5_tasks.UNK}]
  for split in ("validation", "test"):   # sorting after and before "train"
    assert t5_tasks.record_expand(split, rows) == rows


def test_wsc_a_possessive_only_in_the_prediction_is_no_match():
  # "bob's hat" contains the candidate "hat", but only the prediction has the "'".
  assert t5_tasks.wsc_simple_postprocess("Bob's hat", {"targets": "hat", "label": 1}) == 0
  assert t5_tasks.wsc_simple_postprocess("hat", {"targets": "Bob's hat", "label": 1}) == 0


def test_wsc_pronoun_at_index_1_and_a_word_sorting_before_it():
  row = {"text": "Then he asked Tom to help", "span1_text": "Tom", "span2_text": "he",
         "span2_index": 1, "label": 1, "idx": 0}
  assert t5_tasks.wsc_simple_preprocess(row)["inputs"] == "wsc: Then *he* asked Tom to help"
  # The word at the index is "Tom", which sorts before "he": not the pronoun, refused.
  with pytest.raises(ValueError, match="span2_index 3 does not point at the pronoun 'he'"):
    t5_tasks.wsc_simple_preprocess({**row, "span2_index": 3})
