"""lm.downstream.nlu_accept: the yardstick's fine-tuned acceptability tasks, and their suite.

The slow test is the label-only control: a model fine-tuned too briefly to read its inputs,
and every model's blank-input scores, land exactly on chance, because each split's labels
are balanced in every even prefix.
"""
import json
import pathlib

import pytest

from lm import mini_suite
from lm.downstream import nlu_accept, nlu_items
from lm.downstream import task as task_lib

REPO = pathlib.Path(__file__).resolve().parents[1]
ACCEPTABILITY = mini_suite.SUITES["acceptability"]


def _item(document, label, text="A sentence."):
  return nlu_items.ProbeItem("agreement", text, label, document)


def test_split_items_by_document_balanced_and_alternating():
  items = ([_item(d, int(d % 3 == 0)) for d in range(40)]
           + [_item(4, 0, "x" * (nlu_accept.MAX_CHARS + 1))])  # too long: left out
  val, train = (nlu_accept.split_items(items, s) for s in ("validation", "train"))
  assert {it.document for it in val} <= {d for d in range(40) if d % 4 == 0}
  assert not {it.document for it in val} & {it.document for it in train}
  for split in (val, train):
    labels = [it.label for it in split]
    assert labels == [0, 1] * (len(labels) // 2) and labels  # balanced in every even prefix
  assert all(len(it.text) <= nlu_accept.MAX_CHARS for it in val + train)
  edge = [_item(8, 0, "y" * nlu_accept.MAX_CHARS), _item(12, 1, "z" * nlu_accept.MAX_CHARS)]
  assert nlu_accept.split_items(edge, "validation") == edge  # MAX_CHARS itself is kept
  with pytest.raises(ValueError, match="unknown split 'test'"):
    nlu_accept.split_items(items, "test")


def test_the_registered_tasks_on_the_comments_items():
  """Each task reads its phenomenon's probe items: disjoint documents, balanced, labels the
  ProbeItem's, inputs within the runlocal tokenizer's 128 tokens, targets one piece."""
  from lm.data import tokenizer as tokenizer_lib
  tokenizer = tokenizer_lib.default_tokenizer(1000)  # configs/t5.py:runlocal's
  assert all(len(tokenizer.encode(label)) == 1 for label in nlu_accept.LABELS)
  for name in nlu_accept.TASKS:
    task = task_lib.get_task(name)
    splits = {s: task.load(s, None) for s in nlu_accept.SPLITS}
    # demonstrative's balanced pairs are 100 (docs/yardstick.md "Items"), the others 562+
    small = name == nlu_accept.PREFIX + "demonstrative"
    assert len(splits["validation"]) >= (20 if small else 50), name
    assert len(splits["train"]) >= (50 if small else 200), name
    assert not ({r["document"] for r in splits["train"]}
                & {r["document"] for r in splits["validation"]})
    for raws in splits.values():
      assert [r["label"] for r in raws[:6]] == list(nlu_accept.LABELS) * 3
    examples = task.examples("validation")
    assert max(len(tokenizer.encode(ex["inputs"])) for ex in examples) <= 128
    assert task.choices(examples[0]) == nlu_accept.LABELS
    assert task.compute_metrics([ex["targets"] for ex in examples],
                                ["true"] * len(examples)) == {"accuracy": 50.0}


def test_average_and_chance():
  results = {name: {"accuracy": 50.0 + k} for k, name in enumerate(nlu_accept.TASKS)}
  assert nlu_accept.average(results) == pytest.approx(52.0)
  with pytest.raises(ValueError, match="nlu_accept_word_swap"):
    nlu_accept.average({k: v for k, v in results.items() if k != "nlu_accept_word_swap"})
  assert nlu_accept.chance_level("nlu_accept_article") == {"accuracy": 50.0}


def test_the_acceptability_suite_config_and_summary():
  base = mini_suite.load_config(f"{REPO}/{ACCEPTABILITY.default_config}")
  c = mini_suite.suite_config(base, "/runs/pre", steps=40, suite=ACCEPTABILITY)
  assert c.finetune.eval_tasks.split(",") == list(nlu_accept.TASKS)
  # the config owns which suite it is: run and the blank-input control read it from there
  assert mini_suite.suite_of(c) is ACCEPTABILITY
  assert mini_suite.suite_of(mini_suite.suite_config(
      mini_suite.load_config(f"{REPO}/{mini_suite.DEFAULT_CONFIG}"), None)) is mini_suite.MINI
  c.unlock()
  c.finetune.eval_tasks = ",".join(nlu_accept.TASKS[:4])
  with pytest.raises(ValueError, match="eval_tasks 'nlu_accept_.*' are no suite's"):
    mini_suite.suite_of(c)
  with pytest.raises(ValueError, match="lack \\['nlu_accept_agreement'"):
    mini_suite.suite_config(mini_suite.load_config(f"{REPO}/{mini_suite.DEFAULT_CONFIG}"),
                            None, suite=ACCEPTABILITY)
  results = {name: {"accuracy": 60.0} for name in nlu_accept.TASKS}
  record = {"step": 40, "results": results,
            "tasks": {n: {"num_examples": 8, "method": "rank_classification"}
                      for n in results}}
  s = mini_suite.summarize(record, ACCEPTABILITY)
  assert s["acceptability"] == 60.0 and s["suite"] == "acceptability" and "mini" not in s


@pytest.mark.slow
def test_the_label_only_control_is_chance(tmp_path):
  """`lm.mini_suite --suite=acceptability` end to end from random initialisation: 4 steps
  do not teach the model to read its input, so it scores each label string alone, and so
  do the blank inputs: exactly 50 on every task (~1 min of CPU)."""
  out = tmp_path / "acc"
  assert mini_suite.main([f"--output={out}", "--from_scratch", "--suite=acceptability",
                          "--steps=4", "--max_eval_examples=16",
                          f"--config={REPO}/{ACCEPTABILITY.default_config}"]) == 0
  summary = json.loads((out / mini_suite.RESULTS_FILE).read_text())
  assert summary["suite"] == "acceptability" and summary["init"] == "scratch"
  assert summary["blank"] == {name: {"accuracy": 50.0} for name in nlu_accept.TASKS}
  assert summary["acceptability_blank"] == 50.0
  assert summary["chance"] == {name: {"accuracy": 50.0} for name in nlu_accept.TASKS}
  assert summary["num_examples"] == {name: 16 for name in nlu_accept.TASKS}
  assert summary["suite_version"] == nlu_accept.VERSION
