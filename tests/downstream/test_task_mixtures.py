"""lm.downstream.task_mixtures: mixing rates (paper §3.5.2) and the GLUE / SuperGLUE averages."""
import pytest

from lm.downstream import task_mixtures
from lm.downstream.task_mixtures import Mixture


def test_examples_proportional():
  assert task_mixtures.proportional_rates([100, 300]) == pytest.approx([0.25, 0.75])


def test_examples_proportional_with_limit():
  # K = 200 caps the 300 and the 1000: rates 100, 200, 200.
  assert task_mixtures.proportional_rates([100, 300, 1000], limit=200) == pytest.approx(
      [0.2, 0.4, 0.4])


def test_temperature():
  # T = 2: sqrt(100) = 10, sqrt(400) = 20 -> 1/3, 2/3.
  assert task_mixtures.proportional_rates([100, 400], temperature=2) == pytest.approx(
      [1 / 3, 2 / 3])
  # The cap applies before the temperature: min(900, 400) ** 0.5 = 20 against 10.
  assert task_mixtures.proportional_rates([100, 900], limit=400, temperature=2) == pytest.approx(
      [1 / 3, 2 / 3])
  # A very high temperature tends to equal mixing.
  rates = task_mixtures.proportional_rates([10, 10_000], temperature=1e6)
  assert rates == pytest.approx([0.5, 0.5], abs=1e-5)


def test_equal():
  assert task_mixtures.equal_rates(4) == [0.25] * 4
  mix = task_mixtures.equal_mixture("m", ["glue_cola", "glue_rte"])
  assert mix.probabilities() == {"glue_cola": 0.5, "glue_rte": 0.5}


def test_glue_mixture_is_t5s():
  mix = task_mixtures.get_mixture("glue_v002_proportional")
  total = sum(task_mixtures.GLUE_SIZES.values())
  assert total == 949_101
  probs = mix.probabilities()
  assert probs["glue_cola"] == pytest.approx(8_551 / total)
  assert probs["glue_mnli_matched"] == 0.0
  assert "glue_wnli" not in probs
  assert "glue_mnli_matched" not in mix.training_tasks()
  assert len(mix.training_tasks()) == 8


def test_super_glue_mixture():
  mix = task_mixtures.get_mixture("super_glue_v102_proportional")
  assert mix.probabilities()["super_glue_record"] == pytest.approx(
      138_854 / sum(task_mixtures.SUPER_GLUE_SIZES.values()))
  assert "super_glue_v102_proportional" in task_mixtures.mixture_names()


def test_bad_mixtures():
  with pytest.raises(ValueError, match=r"unknown mixture 'glue'; expected one of \["
                                       r"'glue_v002_proportional'"):
    task_mixtures.get_mixture("glue")
  with pytest.raises(ValueError, match="2 tasks but 1 rates"):
    Mixture("m", ("glue_cola", "glue_rte"), (1.0,))
  with pytest.raises(ValueError, match="non-negative with a positive sum"):
    Mixture("m", ("glue_cola", "glue_rte"), (0.0, 0.0))
  with pytest.raises(ValueError, match="non-negative with a positive sum"):
    Mixture("m", ("glue_cola",), (-1.0,))
  with pytest.raises(ValueError, match="lists a task twice"):
    Mixture("m", ("glue_cola", "glue_cola"), (1.0, 1.0))
  with pytest.raises(ValueError, match="unknown task 'glue_nope'; expected one of"):
    Mixture("m", ("glue_nope",), (1.0,)).check_tasks()
  with pytest.raises(ValueError, match="temperature 0 must be positive"):
    task_mixtures.proportional_rates([1], temperature=0)
  with pytest.raises(ValueError, match="are all 0"):
    task_mixtures.proportional_rates([0, 0])


# The baseline row of the paper's Table 16 (validation scores of the baseline model).
TABLE16_BASELINE_GLUE = {
    "glue_cola": {"matthews_corrcoef": 53.84}, "glue_sst2": {"accuracy": 92.68},
    "glue_mrpc": {"f1": 92.07, "accuracy": 88.92},
    "glue_stsb": {"pearson_corrcoef": 88.02, "spearman_corrcoef": 87.94},
    "glue_qqp": {"f1": 88.67, "accuracy": 91.56},
    "glue_mnli_matched": {"accuracy": 84.24}, "glue_mnli_mismatched": {"accuracy": 84.57},
    "glue_qnli": {"accuracy": 90.48}, "glue_rte": {"accuracy": 76.28},
}
TABLE16_BASELINE_SUPER_GLUE = {
    "super_glue_boolq": {"accuracy": 76.62},
    "super_glue_cb": {"mean_3class_f1": 91.22, "accuracy": 91.96},
    "super_glue_copa": {"accuracy": 66.20},
    "super_glue_multirc": {"f1": 66.13, "exact_match": 25.78},
    "super_glue_record": {"f1": 69.05, "em": 68.16},
    "super_glue_rte": {"accuracy": 75.34}, "super_glue_wic": {"accuracy": 68.04},
    "super_glue_wsc": {"accuracy": 78.56},
}


def test_glue_average_reproduces_the_paper():
  # 83.28 in Tables 1 and 16: multi-metric tasks averaged first, MNLI counted once.
  assert task_mixtures.glue_average(TABLE16_BASELINE_GLUE) == pytest.approx(83.28, abs=0.005)
  # Counting MNLI matched and mismatched as two tasks would give 83.41.
  flat = [53.84, 92.68, (92.07 + 88.92) / 2, (88.02 + 87.94) / 2, (88.67 + 91.56) / 2, 84.24,
          84.57, 90.48, 76.28]
  assert sum(flat) / 9 == pytest.approx(83.41, abs=0.005)


def test_super_glue_average_reproduces_the_paper():
  assert task_mixtures.super_glue_average(TABLE16_BASELINE_SUPER_GLUE) == pytest.approx(
      71.36, abs=0.005)


def test_average_missing_results():
  partial = dict(TABLE16_BASELINE_GLUE)
  del partial["glue_rte"]
  partial["glue_mrpc"] = {"f1": 92.07}
  with pytest.raises(ValueError, match=r"GLUE average: results lack \['glue_mrpc/accuracy', "
                                       r"'glue_rte/accuracy'\]"):
    task_mixtures.glue_average(partial)


def test_training_set_sizes_are_t5s():
  # t5/data/glue_utils.py's sizes, written out (the mixtures' rates are read from them; the
  # totals alone would let one size move by as much as another moves back).
  assert task_mixtures.GLUE_SIZES == {
      "glue_cola": 8551, "glue_sst2": 67349, "glue_mrpc": 3668, "glue_qqp": 363849,
      "glue_stsb": 5749, "glue_mnli": 392702, "glue_qnli": 104743, "glue_rte": 2490,
      "glue_mnli_mismatched": 0, "glue_mnli_matched": 0}
  assert task_mixtures.SUPER_GLUE_SIZES == {
      "super_glue_wsc": 259, "super_glue_boolq": 9427, "super_glue_cb": 250,
      "super_glue_copa": 400, "super_glue_multirc": 27243, "super_glue_record": 138854,
      "super_glue_rte": 2490, "super_glue_wic": 5428}
  probs = task_mixtures.get_mixture("super_glue_v102_proportional").probabilities()
  assert probs["super_glue_wsc"] == pytest.approx(259 / 184351)
  assert sum(probs.values()) == pytest.approx(1.0)


def test_rate_zero_is_evaluation_only_and_rates_are_normalised():
  mix = Mixture("m", ("glue_cola", "glue_rte", "glue_sst2"), (3, 0, 1))
  assert mix.rates == (3.0, 0.0, 1.0) and isinstance(mix.tasks, tuple)
  assert mix.probabilities() == {"glue_cola": 0.75, "glue_rte": 0.0, "glue_sst2": 0.25}
  assert mix.training_tasks() == ("glue_cola", "glue_sst2")
  # Limit and temperature: min(n, K) ** (1 / T) for every size, the zero size kept at 0.
  rates = task_mixtures.proportional_rates([0, 16, 81], limit=64, temperature=2)
  assert rates == pytest.approx([0.0, 4 / 12, 8 / 12])
  mix = task_mixtures.proportional_mixture("p", {"glue_cola": 1, "glue_rte": 3})
  assert (mix.name, mix.tasks) == ("p", ("glue_cola", "glue_rte"))
  assert mix.rates == pytest.approx((0.25, 0.75))
  assert task_mixtures.equal_rates(1) == [1.0]
  assert task_mixtures.equal_mixture("e", ["glue_cola"]).rates == (1.0,)


def test_more_bad_mixtures():
  with pytest.raises(ValueError, match="mixture 'm' has no tasks"):
    Mixture("m", (), ())
  with pytest.raises(ValueError, match="non-negative with a positive sum"):
    Mixture("m", ("glue_cola", "glue_rte"), (1.0, float("nan")))
  with pytest.raises(ValueError, match="non-negative with a positive sum"):
    Mixture("m", ("glue_cola", "glue_rte"), (2.0, -0.5))      # positive sum, one negative
  Mixture("m", ("glue_cola",), (1e-9,))                          # any positive sum is fine
  with pytest.raises(ValueError, match="temperature -1 must be positive"):
    task_mixtures.proportional_rates([1], temperature=-1)
  assert task_mixtures.proportional_rates([1, 3], temperature=0.5) == pytest.approx([0.1, 0.9])
  for limit in (0, -5):
    with pytest.raises(ValueError, match=f"limit {limit} must be positive"):
      task_mixtures.proportional_rates([1], limit=limit)
  assert task_mixtures.proportional_rates([1, 3], limit=1e-9) == pytest.approx([0.5, 0.5])
  with pytest.raises(ValueError, match=r"sizes \[3, -1\] must be non-negative"):
    task_mixtures.proportional_rates([3, -1])
  for n in (0, -1):
    with pytest.raises(ValueError, match=f"equal mixing of {n} tasks"):
      task_mixtures.equal_rates(n)
  with pytest.raises(ValueError, match="'glue_v002_proportional' is registered twice"):
    task_mixtures.register_mixture(
        task_mixtures.equal_mixture("glue_v002_proportional", ["glue_cola"]))
  with pytest.raises(ValueError, match="unknown task 'glue_nope'"):
    Mixture("m", ("glue_cola", "glue_nope"), (1.0, 1.0)).check_tasks()


def test_mixture_names_lists_both_registered_mixtures_sorted():
  names = task_mixtures.mixture_names()
  assert names == sorted(names)
  assert {"glue_v002_proportional", "super_glue_v102_proportional"} <= set(names)


def test_benchmark_average_averages_each_task_first():
  spec = {"a": (("t1", "x"), ("t1", "y")), "b": (("t2", "x"),)}
  results = {"t1": {"x": 10.0, "y": 20.0, "z": 99.0}, "t2": {"x": 40.0}}
  # (15 + 40) / 2, not (10 + 20 + 40) / 3.
  assert task_mixtures.benchmark_average(results, spec, "B") == pytest.approx(27.5)
  with pytest.raises(ValueError, match=r"B average: results lack \['t2/x'\]"):
    task_mixtures.benchmark_average({"t1": {"x": 1.0, "y": 1.0}}, spec, "B")


def test_one_rate_per_task_either_way_and_at_any_count():
  with pytest.raises(ValueError, match="1 tasks but 2 rates"):
    Mixture("m", ("glue_cola",), (1.0, 1.0))
  # 300 tasks and 300 rates: equal counts past CPython's small-int cache (not identical ints).
  names = tuple(f"t{i}" for i in range(300))
  assert len(Mixture("m", names, (1.0,) * 300).probabilities()) == 300



def test_a_mixture_is_frozen():
  import dataclasses  # pylint: disable=g-import-not-at-top
  mix = task_mixtures.get_mixture("glue_v002_proportional")   # the registry's own object
  with pytest.raises(dataclasses.FrozenInstanceError):
    mix.rates = (1.0,) * len(mix.tasks)
