"""lm.downstream.task_files: reading a task's split from jsonl, parquet and save_to_disk files."""
import json
import os

import pytest

from lm.downstream import task_files
from lm.downstream.task import get_task

ROWS = [{"sentence": "It rains.", "label": 1, "idx": 0},
        {"sentence": "Rains it the.", "label": 0, "idx": 1}]
NESTED = [{"question": "Q?", "answer": "A", "paragraph": "P", "label": 1,
           "idx": {"paragraph": 0, "question": 0, "answer": 0}}]


def write_jsonl(path, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    for r in rows:
      f.write(json.dumps(r) + "\n")


def write_parquet(path, rows):
  import pyarrow as pa
  import pyarrow.parquet as pq
  os.makedirs(os.path.dirname(path), exist_ok=True)
  pq.write_table(pa.Table.from_pylist(rows), path)


def test_jsonl(tmp_path):
  write_jsonl(str(tmp_path / "validation.jsonl"), ROWS + NESTED)
  assert task_files.read_split(str(tmp_path), "validation", task="t") == ROWS + NESTED


def test_parquet_single_file_and_hub_shards(tmp_path):
  write_parquet(str(tmp_path / "a" / "train.parquet"), NESTED)
  assert task_files.read_split(str(tmp_path / "a"), "train", task="t") == NESTED
  # The Hugging Face hub's layout: <split>-0000i-of-0000n.parquet, read in name order.
  write_parquet(str(tmp_path / "b" / "train-00001-of-00002.parquet"), ROWS[1:])
  write_parquet(str(tmp_path / "b" / "train-00000-of-00002.parquet"), ROWS[:1])
  assert task_files.read_split(str(tmp_path / "b"), "train", task="t") == ROWS


def test_hf_save_to_disk(tmp_path):
  datasets = pytest.importorskip("datasets")
  dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS),
                             "validation": datasets.Dataset.from_list(ROWS[::-1])})
  dd.save_to_disk(str(tmp_path / "glue" / "cola"), num_shards={"train": 2, "validation": 1})
  assert os.path.isfile(tmp_path / "glue" / "cola" / "dataset_dict.json")
  assert task_files.read_split(str(tmp_path / "glue" / "cola"), "train", task="t") == ROWS
  # Through a task: the directory is <data_dir>/glue/cola.
  ex = get_task("glue_cola").examples("validation", str(tmp_path))
  assert [e["inputs"] for e in ex] == ["cola sentence: Rains it the.", "cola sentence: It rains."]
  assert [e["targets"] for e in ex] == ["unacceptable", "acceptable"]


def test_hf_save_to_disk_with_class_labels(tmp_path):
  # As `load_dataset("glue", "sst2")` types it: labels are a ClassLabel, stored as ints.
  datasets = pytest.importorskip("datasets")
  features = datasets.Features({"sentence": datasets.Value("string"),
                                "label": datasets.ClassLabel(names=["negative", "positive"]),
                                "idx": datasets.Value("int32")})
  ds = datasets.Dataset.from_list(ROWS, features=features)
  datasets.DatasetDict({"validation": ds}).save_to_disk(str(tmp_path / "glue" / "sst2"))
  ex = get_task("glue_sst2").examples("validation", str(tmp_path))
  assert [(e["inputs"], e["targets"], e["idx"]) for e in ex] == [
      ("sst2 sentence: It rains.", "positive", 0), ("sst2 sentence: Rains it the.", "negative", 1)]


def test_hf_save_to_disk_nested_fields(tmp_path):
  datasets = pytest.importorskip("datasets")
  datasets.DatasetDict({"validation": datasets.Dataset.from_list(NESTED)}).save_to_disk(
      str(tmp_path / "d"))
  assert task_files.read_split(str(tmp_path / "d"), "validation", task="t") == NESTED


def test_layout_precedence(tmp_path):
  # save_to_disk first, then jsonl, then parquet.
  write_parquet(str(tmp_path / "train.parquet"), ROWS[:1])
  assert task_files.read_split(str(tmp_path), "train", task="t") == ROWS[:1]
  write_jsonl(str(tmp_path / "train.jsonl"), ROWS)
  assert task_files.read_split(str(tmp_path), "train", task="t") == ROWS


def test_missing_split_names_task_and_paths(tmp_path):
  with pytest.raises(FileNotFoundError) as e:
    get_task("glue_sst2").load("validation", str(tmp_path))
  msg = str(e.value)
  assert "'glue_sst2'" in msg and "'validation'" in msg
  for p in task_files.split_paths(str(tmp_path / "glue" / "sst2"), "validation"):
    assert p in msg


def test_split_not_offered_by_task(tmp_path):
  with pytest.raises(ValueError, match=r"task 'squad_v1_1' has no split 'test'; expected one "
                                       r"of \['train', 'validation'\]"):
    get_task("squad_v1_1").examples("test", str(tmp_path))


def test_no_data_dir():
  with pytest.raises(ValueError, match="task 'glue_rte' reads files .* pass data_dir"):
    get_task("glue_rte").examples("train", None)


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_empty_file(tmp_path, kind):
  path = str(tmp_path / "glue" / "rte" / f"train.{kind}")
  if kind == "jsonl":
    write_jsonl(path, [])
  else:
    import pyarrow as pa
    import pyarrow.parquet as pq
    os.makedirs(os.path.dirname(path))
    pq.write_table(pa.table({"sentence1": pa.array([], pa.string())}), path)
  with pytest.raises(ValueError, match=rf"task 'glue_rte': '{path}' is empty \(no examples\)"):
    get_task("glue_rte").examples("train", str(tmp_path))


def test_empty_save_to_disk_split(tmp_path):
  datasets = pytest.importorskip("datasets")
  empty = datasets.Dataset.from_dict({"sentence1": [], "sentence2": [], "label": []})
  datasets.DatasetDict({"train": empty}).save_to_disk(str(tmp_path / "glue" / "rte"))
  state = str(tmp_path / "glue" / "rte" / "train" / "state.json")
  with pytest.raises(ValueError, match=rf"task 'glue_rte': '{state}' is empty \(no examples\)"):
    get_task("glue_rte").examples("train", str(tmp_path))


def test_bad_json_line(tmp_path):
  path = tmp_path / "train.jsonl"
  path.write_text('{"a": 1}\n{not json\n')
  with pytest.raises(ValueError, match=r"task 't': .*train.jsonl:2 is not JSON"):
    task_files.read_split(str(tmp_path), "train", task="t")
  path.write_text('[1, 2]\n')
  with pytest.raises(ValueError, match="is a JSON list, not an object"):
    task_files.read_split(str(tmp_path), "train", task="t")


def test_jsonl_skips_blank_lines_and_counts_lines_from_one(tmp_path):
  path = tmp_path / "train.jsonl"
  path.write_text('{"a": 1}\n\n   \n{"a": 2}\n\n')
  assert task_files.read_split(str(tmp_path), "train", task="t") == [{"a": 1}, {"a": 2}]
  path.write_text('{"a": 1}\n\n{not json\n')    # the line number counts the blank line
  with pytest.raises(ValueError, match=r"train.jsonl:3 is not JSON"):
    task_files.read_split(str(tmp_path), "train", task="t")
