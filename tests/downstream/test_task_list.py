"""lm.downstream.task.parse_tasks: the one reader of a task list (fine-tuning configs and
`lm.evaluate --task`)."""
import pytest

from lm.downstream import task as task_lib

EMPTY = "nothing to do; set --task"


@pytest.mark.parametrize("text, expected", [
    ("glue_cola", (("glue_cola", 1.0),)),
    (" glue_cola , glue_sst2 ", (("glue_cola", 1.0), ("glue_sst2", 1.0))),
    ("glue_cola:2,glue_sst2:0.5", (("glue_cola", 2.0), ("glue_sst2", 0.5))),
    ("glue_cola:0,", (("glue_cola", 0.0),)),  # rate 0: evaluated, not trained on
])
def test_names_and_rates(text, expected):
  assert task_lib.parse_tasks(text, empty=EMPTY) == expected


@pytest.mark.parametrize("text, message", [
    ("", EMPTY), (None, EMPTY), (" , ", EMPTY),
    ("nope", "unknown task 'nope'; expected one of \\[.*'glue_cola'"),
    ("glue_cola:x", "task 'glue_cola:x': the rate after ':' must be a number, e.g. glue_cola:1.0"),
])
def test_bad_lists(text, message):
  with pytest.raises(ValueError, match=message):
    task_lib.parse_tasks(text, empty=EMPTY)


def test_evaluate_and_finetune_read_task_lists_alike():
  from lm.downstream import finetune  # pylint: disable=g-import-not-at-top
  assert finetune.parse_tasks("glue_cola:2,glue_sst2") == task_lib.parse_tasks(
      "glue_cola:2,glue_sst2", empty=EMPTY)
  with pytest.raises(ValueError, match="config.finetune.tasks is empty"):
    finetune.parse_tasks("")
