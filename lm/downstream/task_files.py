"""Readers for a downstream task's raw examples, from files the user already has.

Pre-training text (documents, corpora) is read in lm.data, not here.

A task's data lives in one directory, `<data_dir>/<subdir>` (e.g. `<data_dir>/glue/cola`),
in any of three layouts, tried in this order for a split (say "validation"):

  1. a Hugging Face dataset saved with `DatasetDict.save_to_disk`: the directory holds
     `dataset_dict.json` and `validation/state.json` + `validation/data-*.arrow`
     (or a single split saved with `Dataset.save_to_disk` as `<dir>/validation/`);
  2. JSON lines: `validation.jsonl` (one JSON object per line);
  3. Parquet: `validation.parquet`, or the Hugging Face hub's shards
     `validation-00000-of-00001.parquet` ... (all shards, in name order).

Rows come back as plain dicts in file order, with the datasets' own field names (nested
fields such as SuperGLUE's `idx` stay dicts). The arrow files of a saved dataset are read
with pyarrow directly (`state.json` lists them), so reading needs no `datasets` install.
Nothing is downloaded.

Errors name the task and what was looked for: a split with none of the files above raises
FileNotFoundError listing every path tried; a file with no rows raises ValueError.
"""
from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable
from typing import Any

Row = dict[str, Any]


def split_paths(directory: str, split: str) -> list[str]:
  """Every path `read_split` looks at for `split` under `directory`, in the order tried."""
  return [os.path.join(directory, split, "state.json"),
          os.path.join(directory, f"{split}.jsonl"),
          os.path.join(directory, f"{split}.parquet"),
          os.path.join(directory, f"{split}-*.parquet")]


def read_split(directory: str, split: str, *, task: str) -> list[Row]:
  """The rows of `split` from the first layout found under `directory`.

  Args:
    directory: the task's data directory.
    split: split name ("train", "validation", "validation_matched", ...).
    task: the task's name, for error messages.

  Returns:
    The split's rows as dicts, in file order.

  Raises:
    FileNotFoundError: no layout holds the split (the message lists the paths tried).
    ValueError: the file holds no rows, or a JSON line does not parse.
  """
  state, jsonl, parquet, shards = split_paths(directory, split)
  if os.path.isfile(state):
    return _nonempty(_read_hf_split(os.path.dirname(state)), state, task)
  if os.path.isfile(jsonl):
    return _nonempty(_read_jsonl(jsonl, task), jsonl, task)
  if os.path.isfile(parquet):
    return _nonempty(_read_parquet([parquet]), parquet, task)
  files = sorted(glob.glob(shards))
  if files:
    return _nonempty(_read_parquet(files), shards, task)
  tried = ", ".join(split_paths(directory, split))
  raise FileNotFoundError(
      f"task {task!r}: no {split!r} split under {directory!r}; looked for {tried} "
      "(save the dataset there with datasets' save_to_disk, or write jsonl / parquet files).")


def _nonempty(rows: list[Row], path: str, task: str) -> list[Row]:
  if not rows:
    raise ValueError(f"task {task!r}: {path!r} is empty (no examples); "
                     "write the split's examples there or point data_dir elsewhere.")
  return rows


def _read_jsonl(path: str, task: str) -> list[Row]:
  rows = []
  with open(path, encoding="utf-8") as f:
    for lineno, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        row = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"task {task!r}: {path}:{lineno} is not JSON ({e.msg}); "
                         "expected one JSON object per line.") from None
      if not isinstance(row, dict):
        raise ValueError(f"task {task!r}: {path}:{lineno} is a JSON "
                         f"{type(row).__name__}, not an object; expected one object per line.")
      rows.append(row)
  return rows


def _read_parquet(paths: list[str]) -> list[Row]:
  import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  rows: list[Row] = []
  for path in paths:
    rows.extend(pq.read_table(path).to_pylist())
  return rows


def _read_hf_split(split_dir: str) -> list[Row]:
  """Rows of one split saved by `save_to_disk` (its state.json lists the arrow shards)."""
  import pyarrow as pa  # pylint: disable=g-import-not-at-top
  with open(os.path.join(split_dir, "state.json"), encoding="utf-8") as f:
    state = json.load(f)
  files = [d["filename"] for d in state.get("_data_files", [])]
  rows: list[Row] = []
  for name in files:
    with pa.memory_map(os.path.join(split_dir, name)) as source:
      rows.extend(pa.ipc.open_stream(source).read_all().to_pylist())
  return rows


def directory_loader(subdir: str, task: str, *, transform: Callable[[str, list[Row]],
                                                                     list[Row]] | None = None
                     ) -> Callable[[str, str | None], list[Row]]:
  """A `Task.load` reading `<data_dir>/<subdir>` with `read_split`.

  Args:
    subdir: the task's directory relative to `data_dir` (e.g. "glue/cola").
    task: the task's name, for error messages.
    transform: optional `(split, rows) -> rows` applied after reading (e.g. T5's
      filtering of WSC's training examples).
  """

  def load(split: str, data_dir: str | None) -> list[Row]:
    if not data_dir:
      raise ValueError(f"task {task!r} reads files the user already has; pass data_dir "
                       f"(the directory holding {subdir}/).")
    rows = read_split(os.path.join(data_dir, subdir), split, task=task)
    return transform(split, rows) if transform else rows

  return load
