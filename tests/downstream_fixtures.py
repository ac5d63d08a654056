"""Small tasks, a tiny tokenizer and tiny models for the downstream evaluation / fine-tuning tests.

The tasks are registered here (stand-ins for lm.downstream.t5_tasks / mini):
  test_copy     inputs "copy: abc" -> targets "abc"              (metric: exact match %)
  test_first    inputs "first: abc def" -> "abc", choices [the two words] (accuracy %)
Words are the 216 three-letter strings over "abcdef", in a fixed shuffled order; the
train split holds words 0..159, validation 160..215 (copy) — nothing is downloaded.
"""
import functools
import itertools
import os
import tempfile

import numpy as np

from lm.data import tokenizer as tokenizer_lib
from lm.downstream import task as task_lib

WORDS = ["".join(w) for w in itertools.product("abcdef", repeat=3)]
_ORDER = np.random.default_rng(0).permutation(len(WORDS))
WORDS = [WORDS[i] for i in _ORDER]
SPM_TEXT = [" ".join(sorted(WORDS))] * 3 + ["copy: first: " * 50] * 3


def exact_match(targets, predictions):
  return {"exact_match": 100.0 * float(np.mean([t == p for t, p in zip(targets, predictions)]))}


def accuracy(targets, predictions):
  return {"accuracy": 100.0 * float(np.mean([t == p for t, p in zip(targets, predictions)]))}


def _copy_load(split, data_dir=None):
  del data_dir
  words = WORDS[:160] if split == "train" else WORDS[160:]
  return [{"word": w} for w in words]


def _first_load(split, data_dir=None):
  del data_dir
  words = WORDS[:160] if split == "train" else WORDS[160:]
  return [{"a": a, "b": b} for a, b in zip(words, words[1:] + words[:1])]


def _copy_pre(raw):
  return {"inputs": f"copy: {raw['word']}", "targets": raw["word"]}


def _first_pre(raw):
  return {"inputs": f"first: {raw['a']} {raw['b']}", "targets": raw["a"],
          "candidates": [raw["b"], raw["a"]]}


def _strip(text, example=None, is_target=False):
  del example, is_target
  return text.strip()


def register_tasks():
  """Registers test_copy and test_first once per process (idempotent)."""
  if "test_copy" in task_lib._REGISTRY:  # pylint: disable=protected-access
    return
  task_lib.register(task_lib.Task(
      name="test_copy", load=_copy_load, preprocess=_copy_pre, metric_fns=(exact_match,),
      postprocess=_strip, description="copy a 3-letter word (test task)"))
  task_lib.register(task_lib.Task(
      name="test_first", load=_first_load, preprocess=_first_pre, metric_fns=(accuracy,),
      postprocess=_strip, choices=lambda ex: ex["candidates"],
      description="the first of two words (test task with choices)"))


@functools.cache
def tokenizer_path() -> str:
  """A 28-piece SentencePiece model + 100 sentinels (vocab 128), trained once per session."""
  root = tempfile.mkdtemp(prefix="lm_downstream_")
  path = os.path.join(root, "spm.model")
  tokenizer_lib.train_tokenizer(SPM_TEXT, vocab_size=28, extra_ids=100, output=path)
  return path


def tokenizer():
  return tokenizer_lib.load_tokenizer(tokenizer_path(), extra_ids=100)
