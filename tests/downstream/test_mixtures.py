"""lm.downstream.mixtures: mixing rates (paper §3.5.2) and the GLUE / SuperGLUE averages."""
import pytest

from lm.downstream import mixtures
from lm.downstream.mixtures import Mixture


def test_examples_proportional():
  assert mixtures.proportional_rates([100, 300]) == pytest.approx([0.25, 0.75])


def test_examples_proportional_with_limit():
  # K = 200 caps the 300 and the 1000: rates 100, 200, 200.
  assert mixtures.proportional_rates([100, 300, 1000], limit=200) == pytest.approx(
      [0.2, 0.4, 0.4])


def test_temperature():
  # T = 2: sqrt(100) = 10, sqrt(400) = 20 -> 1/3, 2/3.
  assert mixtures.proportional_rates([100, 400], temperature=2) == pytest.approx([1 / 3, 2 / 3])
  # The cap applies before the temperature: min(900, 400) ** 0.5 = 20 against 10.
  assert mixtures.proportional_rates([100, 900], limit=400, temperature=2) == pytest.approx(
      [1 / 3, 2 / 3])
  # A very high temperature tends to equal mixing.
  rates = mixtures.proportional_rates([10, 10_000], temperature=1e6)
  assert rates == pytest.approx([0.5, 0.5], abs=1e-5)


def test_equal():
  assert mixtures.equal_rates(4) == [0.25] * 4
  mix = mixtures.equal_mixture("m", ["glue_cola", "glue_rte"])
  assert mix.probabilities() == {"glue_cola": 0.5, "glue_rte": 0.5}


def test_glue_mixture_is_t5s():
  mix = mixtures.get_mixture("glue_v002_proportional")
  total = sum(mixtures.GLUE_SIZES.values())
  assert total == 949_101
  probs = mix.probabilities()
  assert probs["glue_cola"] == pytest.approx(8_551 / total)
  assert probs["glue_mnli_matched"] == 0.0
  assert "glue_wnli" not in probs
  assert "glue_mnli_matched" not in mix.training_tasks()
  assert len(mix.training_tasks()) == 8


def test_super_glue_mixture():
  mix = mixtures.get_mixture("super_glue_v102_proportional")
  assert mix.probabilities()["super_glue_record"] == pytest.approx(
      138_854 / sum(mixtures.SUPER_GLUE_SIZES.values()))
  assert "super_glue_v102_proportional" in mixtures.mixture_names()


def test_bad_mixtures():
  with pytest.raises(ValueError, match=r"unknown mixture 'glue'; expected one of \["
                                       r"'glue_v002_proportional'"):
    mixtures.get_mixture("glue")
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
    mixtures.proportional_rates([1], temperature=0)
  with pytest.raises(ValueError, match="are all 0"):
    mixtures.proportional_rates([0, 0])


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
  assert mixtures.glue_average(TABLE16_BASELINE_GLUE) == pytest.approx(83.28, abs=0.005)
  # Counting MNLI matched and mismatched as two tasks would give 83.41.
  flat = [53.84, 92.68, (92.07 + 88.92) / 2, (88.02 + 87.94) / 2, (88.67 + 91.56) / 2, 84.24,
          84.57, 90.48, 76.28]
  assert sum(flat) / 9 == pytest.approx(83.41, abs=0.005)


def test_super_glue_average_reproduces_the_paper():
  assert mixtures.super_glue_average(TABLE16_BASELINE_SUPER_GLUE) == pytest.approx(
      71.36, abs=0.005)


def test_average_missing_results():
  partial = dict(TABLE16_BASELINE_GLUE)
  del partial["glue_rte"]
  partial["glue_mrpc"] = {"f1": 92.07}
  with pytest.raises(ValueError, match=r"GLUE average: results lack \['glue_mrpc/accuracy', "
                                       r"'glue_rte/accuracy'\]"):
    mixtures.glue_average(partial)
