"""lm.downstream.task_metrics against hand-computed values and the libraries T5 used."""
import sys

import numpy as np
import pytest
import sacrebleu
import scipy.stats
import sklearn.metrics
from rouge_score import rouge_scorer

from lm.downstream import task_metrics


def test_accuracy():
  assert task_metrics.accuracy([0, 1, 1, 0], [0, 1, 0, 0]) == {"accuracy": 75.0}
  assert task_metrics.accuracy(["a", "b"], ["a", "b"]) == {"accuracy": 100.0}


def test_f1_with_invalid():
  # The invalid prediction -1 becomes the opposite of its target (1 -> 0): preds 1 0 0 1.
  # TP 1, FP 1, FN 1 -> F1 0.5.
  assert task_metrics.f1_score_with_invalid([1, 1, 0, 0], [1, -1, 0, 1]) == {"f1": 50.0}
  # An invalid prediction on a negative example becomes a false positive.
  got = task_metrics.f1_score_with_invalid([1, 0], [1, -1])["f1"]
  assert got == pytest.approx(100 * sklearn.metrics.f1_score([1, 0], [1, 1]))


def test_matthews_corrcoef():
  # TP 1, TN 2, FP 0, FN 1: (1*2 - 0*1) / sqrt(1 * 2 * 2 * 3).
  got = task_metrics.matthews_corrcoef([1, 1, 0, 0], [1, 0, 0, 0])["matthews_corrcoef"]
  assert got == pytest.approx(100 * 2 / np.sqrt(12))


def test_pearson_spearman():
  # Deviations (-1, 0, 1) and (-4/3, -1/3, 5/3): cov 3, variances 2 and 42/9.
  got = task_metrics.pearson_corrcoef([1, 2, 3], [1, 2, 4])["pearson_corrcoef"]
  assert got == pytest.approx(100 * 3 / np.sqrt(2 * 42 / 9))
  assert task_metrics.spearman_corrcoef([1, 2, 3], [1, 2, 4]) == {"spearman_corrcoef":
                                                             pytest.approx(100.0)}
  t, p = [0.4, 3.0, 2.2, 5.0, 1.8], [1.0, 2.6, 2.6, 4.4, -1.0]
  assert task_metrics.spearman_corrcoef(t, p)["spearman_corrcoef"] == pytest.approx(
      100 * scipy.stats.spearmanr(t, p)[0])


def test_mean_multiclass_f1():
  # Class 0: F1 1; class 1: never predicted, F1 0; class 2: P 2/3, R 1, F1 0.8 -> mean 0.6.
  fn = task_metrics.mean_multiclass_f1(3)
  assert fn([0, 1, 2, 2], [0, 2, 2, 2]) == {"mean_3class_f1": pytest.approx(60.0)}
  # An out-of-set prediction (-1) lowers recall but is not a class of its own.
  assert fn([0, 1, 2], [0, 1, -1]) == {"mean_3class_f1": pytest.approx(100 * 2 / 3)}


@pytest.mark.parametrize("answer,normalised", [
    ("The  Denver-Broncos!", "denverbroncos"),
    ("an apple", "apple"),
    ("Theater at the Met", "theater at met"),   # articles only as whole words
    ("A.B.C.", "abc"),
    ("the", ""),
    ("  tabs\tand\nnewlines ", "tabs and newlines"),
    ("“curly” quotes", "“curly” quotes"),      # only ASCII punctuation is removed
    ("1,000", "1000"),
])
def test_normalize_squad(answer, normalised):
  assert task_metrics.normalize_squad(answer) == normalised


def test_squad_max_over_answers():
  targets = [["Denver Broncos", "The Broncos"], ["Denver Broncos"]]
  got = task_metrics.squad(targets, ["broncos", "Denver"])
  # Example 1 matches "The Broncos" exactly; example 2: P 1, R 1/2, F1 2/3.
  assert got == {"em": pytest.approx(50.0), "f1": pytest.approx(100 * (1 + 2 / 3) / 2)}
  assert task_metrics.squad([["the"]], ["a"]) == {"em": 100.0, "f1": 0.0}  # both normalise to ""
  assert task_metrics.squad([["yes"]], [""]) == {"em": 0.0, "f1": 0.0}
  with pytest.raises(ValueError, match="gold answers 'x' are not a non-empty list"):
    task_metrics.squad(["x"], ["x"])


def test_multirc_grouping():
  targets = [{"value": 1, "group": (0, 1)}, {"value": 0, "group": (0, 1)},
             {"value": 1, "group": (0, 2)}, {"value": 0, "group": (1, 1)}]
  preds = [{"value": 1}, {"value": 0}, {"value": 0}, {"value": -1}]
  # Question (0,1) all right; (0,2) wrong; (1,1) invalid -> wrong: EM 1/3.
  assert task_metrics.multirc_exact_match(targets, preds) == {"exact_match": pytest.approx(100 / 3)}
  # F1a over all four options: preds become 1 0 0 1 (invalid flipped): TP 1, FP 1, FN 1.
  assert task_metrics.multirc_f1_over_all_answers(targets, preds) == {"f1": pytest.approx(50.0)}


def test_record_dedup_and_max_over_answers():
  targets = [{"value": ["A", "C"], "group": (1, 2)}, {"value": ["A", "C"], "group": (1, 2)},
             {"value": ["Bob Smith"], "group": (1, 3)}]
  preds = [{"value": "C"}, {"value": "X"}, {"value": "Smith"}]
  # The duplicate of (1, 2) is skipped; (1, 3): EM 0, F1 2/3.
  assert task_metrics.record(targets, preds) == {"em": pytest.approx(50.0),
                                            "f1": pytest.approx(100 * (1 + 2 / 3) / 2)}


def test_rouge_hand_computed():
  # rouge1: 5 of 6 unigrams; rouge2: 3 of 5 bigrams; one example -> bootstrap = the value.
  got = task_metrics.rouge(["the cat sat on the mat"], ["the cat sat on a mat"])
  assert got == pytest.approx({"rouge1": 100 * 5 / 6, "rouge2": 60.0,
                               "rougeLsum": 100 * 5 / 6})


def test_rouge_lsum_splits_sentences_at_periods():
  # T5 puts a newline after " . ", so rougeLsum matches sentence by sentence: each target
  # sentence is wholly in the prediction (100) though the order is swapped (rougeL 50).
  got = task_metrics.rouge(["a b . c d"], ["c d . a b"])
  assert got["rougeLsum"] == pytest.approx(100.0)
  assert got["rouge2"] == pytest.approx(100 * 2 / 3)
  plain = rouge_scorer.RougeScorer(["rougeL"]).score("a b . c d", "c d . a b")
  assert plain["rougeL"].fmeasure == pytest.approx(0.5)


def test_rouge_bootstrap_mid_is_seeded_and_near_the_mean():
  rng = np.random.RandomState(0)
  words = "the a cat dog sat ran on under mat rug".split()
  targets = [" ".join(rng.choice(words, 8)) for _ in range(30)]
  preds = [" ".join(rng.choice(words, 8)) for _ in range(30)]
  np.random.seed(123)
  before = np.random.get_state()[1].copy()
  a = task_metrics.rouge(targets, preds)
  assert np.array_equal(np.random.get_state()[1], before)   # global generator untouched
  assert task_metrics.rouge(targets, preds) == a                  # deterministic
  # The default seed is 0 (recorded results stay comparable); another seed resamples.
  assert task_metrics.rouge(targets, preds, seed=0) == a
  assert task_metrics.rouge(targets, preds, seed=1) != a
  scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeLsum"])
  for key in a:
    mean = 100 * np.mean([scorer.score(t, p)[key].fmeasure for t, p in zip(targets, preds)])
    assert a[key] == pytest.approx(mean, abs=1.0)


def test_bleu_hand_computed_and_library():
  # n-gram precisions 5/6, 3/5, 2/4, 1/3, no brevity penalty: (1/12) ** (1/4).
  got = task_metrics.bleu(["the cat sat on the mat"], ["the cat sat on a mat"])
  assert got == {"bleu": pytest.approx(100 * (1 / 12) ** 0.25)}
  refs = ["Das ist gut.", "Hallo, Welt!", "Er sagte: «Nein»."]
  hyps = ["Das ist gut!", "Hallo Welt!", "Er sagte «nein»."]
  expected = sacrebleu.corpus_bleu(hyps, [refs], smooth_method="exp", tokenize="intl").score
  assert task_metrics.bleu(refs, hyps) == {"bleu": pytest.approx(expected)}


def test_missing_library_names_the_extra(monkeypatch):
  monkeypatch.setitem(sys.modules, "sacrebleu", None)
  with pytest.raises(ImportError, match=r"need sacrebleu; install it with pip install -e "
                                        r"'\.\[downstream\]'"):
    task_metrics.bleu(["a"], ["a"])


def test_f1_counts_any_label_but_0_and_1_as_invalid():
  # 2 is invalid like -1: on a positive example it becomes 0 (a false negative).
  # TP 1, FN 1, FP 0 -> F1 2/3; the caller's list is left as it was.
  preds = [1, 2, 0]
  assert task_metrics.f1_score_with_invalid([1, 1, 0], preds) == {"f1": pytest.approx(100 * 2 / 3)}
  assert preds == [1, 2, 0]


def test_squad_and_rouge_refuse_bad_lists():
  with pytest.raises(ValueError, match="squad: 2 targets but 1 predictions"):
    task_metrics.squad([["a"], ["b"]], ["a"])
  with pytest.raises(ValueError, match="squad: 1 targets but 2 predictions"):
    task_metrics.squad([["a"]], ["a", "b"])
  with pytest.raises(ValueError, match=r"gold answers \[\] are not a non-empty list"):
    task_metrics.squad([[]], ["a"])
  with pytest.raises(ValueError, match="rouge: no targets"):
    task_metrics.rouge([], [])


def test_rouge_reports_the_keys_asked_for():
  got = task_metrics.rouge(["the cat sat"], ["the cat sat"], score_keys=("rouge2",))
  assert got == {"rouge2": pytest.approx(100.0)}


def test_bleu_smoothing_order_and_case_are_t5s():
  # p1 4/5, p2 2/4, p3 0/3 and p4 0/2, which "exp" smoothing makes 1/(2*3) and 1/(4*2):
  # (1/120) ** (1/4), no brevity penalty.
  assert task_metrics.bleu(["a b x d e"], ["a b c d e"]) == {"bleu": pytest.approx(
      100 * (1 / 120) ** 0.25)}
  # No effective order: a 3-token sentence has no 4-gram, so even an exact copy scores 0.
  assert task_metrics.bleu(["a b c"], ["a b c"]) == {"bleu": 0.0}
  # Case-sensitive: "A" does not match "a": p = 4/5, 3/4, 2/3, 1/2.
  assert task_metrics.bleu(["a b c d e"], ["A b c d e"]) == {"bleu": pytest.approx(
      100 * (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** 0.25)}


def test_multirc_exact_match_averages_over_questions_not_options():
  # Question 0: 3 options, all right; question 1: 1 option, wrong -> 50 (per option: 75).
  targets = [{"value": 1, "group": 0}, {"value": 0, "group": 0}, {"value": 1, "group": 0},
             {"value": 1, "group": 1}]
  preds = [{"value": 1}, {"value": 0}, {"value": 1}, {"value": 0}]
  assert task_metrics.multirc_exact_match(targets, preds) == {"exact_match": 50.0}


def test_squad_f1_with_partial_precision_and_many_examples():
  # "bob jones x" against "bob smith": 1 shared token, P 1/3, R 1/2 -> F1 2PR/(P+R) = 0.4.
  assert task_metrics.squad([["Bob Smith"]], ["bob jones x"]) == {"em": 0.0,
                                                                 "f1": pytest.approx(40.0)}
  # 300 examples: lengths past CPython's small-int cache (equal but not identical ints).
  assert task_metrics.squad([["a b"]] * 300, ["a b"] * 300) == {"em": 100.0, "f1": 100.0}


def test_bleu_warns_of_tokenized_hypotheses_as_t5s_sacrebleu_call(caplog):
  # force=False, as T5: 100 hypotheses ending in a tokenized " ." get sacrebleu's warning
  # (the score is the same: force only silences it); 99 do not.
  for n, warned in ((100, True), (99, False)):
    caplog.clear()
    with caplog.at_level("WARNING", logger="sacrebleu"):
      got = task_metrics.bleu(["a b c d ."] * n, ["a b c d ."] * n)
    assert got == {"bleu": pytest.approx(100.0)}
    assert any("tokenized period" in r.getMessage() for r in caplog.records) == warned
