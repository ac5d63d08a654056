"""The paired bootstrap, the paper's contrasts and verdicts (lm/downstream/contrasts.py)."""
import dataclasses
import itertools
import json
import pathlib

import numpy as np
import pytest

from launch import points as points_lib
from lm.downstream import contrasts as C

REPO = pathlib.Path(__file__).resolve().parents[2]


def _exact_means(d):
  """Every one of the N^N equally likely bootstrap resamples' means of d (float64[N^N])."""
  d = np.asarray(d, dtype=np.float64)
  return np.array([d[list(idx)].mean() for idx in itertools.product(range(len(d)), repeat=len(d))])


def _inverted_cdf_quantile(values, q):
  """The smallest value whose CDF reaches q (the quantile of a discrete distribution)."""
  v = np.sort(values)
  return v[int(np.ceil(q * len(v))) - 1]


def test_the_interval_is_the_exact_bootstrap_distributions_quantiles():
  """One seed, N = 4: the bootstrap distribution is 4^4 = 256 equally likely resamples; its
  2.5 % and 97.5 % quantiles are atoms whose CDF steps lie far (> 4 Monte Carlo sd) from the
  levels, so the Monte Carlo interval must land on them exactly."""
  a = np.array([[3.0, 1.0, 0.0, 8.0]])
  b = np.array([[1.0, 1.0, 0.0, 1.0]])          # differences 2, 0, 0, 7
  exact = _exact_means((a - b)[0])
  for q in (0.025, 0.975):
    x = _inverted_cdf_quantile(exact, q)
    below, upto = np.mean(exact < x), np.mean(exact <= x)
    sd = np.sqrt(q * (1 - q) / 20_000)
    assert below < q - 4 * sd and upto > q + 4 * sd, (q, below, upto)  # the test's premise
  result = C.paired_bootstrap(a, b, num_resamples=20_000, seed=3)
  assert result.difference == pytest.approx(9 / 4)
  assert result.low == _inverted_cdf_quantile(exact, 0.025) == 0.0
  assert result.high == _inverted_cdf_quantile(exact, 0.975) == pytest.approx(5.25)
  assert (result.num_items, result.seeds_a, result.seeds_b) == (4, 1, 1)


def test_the_resampled_differences_have_the_closed_form_mean_and_variance():
  """Resampling N items: mean = the observed mean difference, variance = its population
  variance / N (the closed form of the bootstrap distribution)."""
  d = np.array([0.0, 1.0, 1.0, 0.5, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0])
  strata = [([d[None]], [np.zeros((1, 10))])]
  resample = C._resampled_differences  # pylint: disable=protected-access
  draws = resample(strata, np.random.default_rng(0), 40_000)[0]
  assert draws.mean() == pytest.approx(d.mean(), abs=4 * d.std() / np.sqrt(10 * 40_000))
  assert draws.var() == pytest.approx(d.var() / 10, rel=0.03)


def test_seeds_are_resampled_too():
  """Items all alike, seeds scoring 1 and 3: the interval is the seed bootstrap's, the mean
  of two draws from {1, 3}: 1, 2 or 3 with probabilities 1/4, 1/2, 1/4."""
  a = np.array([[1.0] * 5, [3.0] * 5])
  b = np.zeros((1, 5))
  result = C.paired_bootstrap(a, b, num_resamples=4_000, seed=1)
  assert result.difference == pytest.approx(2.0)
  assert (result.low, result.high) == (pytest.approx(1.0), pytest.approx(3.0))
  assert (result.seeds_a, result.seeds_b) == (2, 1)


def test_constant_differences_give_a_zero_width_interval():
  rng = np.random.default_rng(0)
  b = rng.random((3, 50))
  result = C.paired_bootstrap(b + 0.25, b, num_resamples=2_000)
  # Seeds resampled alike in both arms only in expectation: the rows differ, so take one seed.
  one = C.paired_bootstrap(b[:1] + 0.25, b[:1], num_resamples=2_000)
  assert one.difference == pytest.approx(0.25)
  assert one.high - one.low < 1e-12 and one.low == pytest.approx(0.25)
  assert result.difference == pytest.approx(0.25)


def test_swapping_the_arms_negates_the_difference_and_the_interval():
  rng = np.random.default_rng(1)
  a, b = rng.integers(0, 2, (1, 40)).astype(float), rng.integers(0, 2, (1, 40)).astype(float)
  ab, ba = C.paired_bootstrap(a, b, seed=7), C.paired_bootstrap(b, a, seed=7)
  assert ba.difference == -ab.difference
  assert (ba.low, ba.high) == pytest.approx((-ab.high, -ab.low))


def test_the_bootstrap_is_deterministic_for_a_seed_and_varies_with_it():
  rng = np.random.default_rng(2)
  a, b = rng.random((3, 30)), rng.random((2, 30))
  first = C.paired_bootstrap(a, b, num_resamples=500, seed=5)
  assert C.paired_bootstrap(a, b, num_resamples=500, seed=5) == first
  assert C.paired_bootstrap(a, b, num_resamples=500, seed=6) != first


def test_the_pairing_narrows_the_interval():
  """Two arms that share item difficulty: the paired interval is much narrower than the
  spread of either arm's own item scores would give."""
  rng = np.random.default_rng(3)
  difficulty = rng.random(200)
  a = difficulty[None] + 0.02 + 0.01 * rng.standard_normal((1, 200))
  b = difficulty[None] + 0.01 * rng.standard_normal((1, 200))
  result = C.paired_bootstrap(a, b, num_resamples=2_000)
  assert result.low > 0
  assert result.high - result.low < 0.01


def test_an_arm_of_several_points_scores_their_mean():
  p1, p2 = np.array([[1.0, 0.0, 1.0]]), np.array([[0.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
  b = np.array([[0.0, 0.0, 0.0]])
  result = C.paired_bootstrap([p1, p2], b, num_resamples=100)
  assert result.difference == pytest.approx((2 / 3 + 4 / 6) / 2)
  assert (result.seeds_a, result.seeds_b) == (1, 1)   # the fewest of any point


def test_each_instruments_result_is_its_own_paired_bootstrap():
  rng = np.random.default_rng(4)
  strata = [(rng.random((1, 30)), rng.random((1, 30))), (rng.random((1, 20)), rng.random((1, 20)))]
  each, pooled = C.each_and_pooled(strata, num_resamples=4_000)
  assert pooled == C.stratified_bootstrap(strata, num_resamples=4_000)
  for (a, b), result in zip(strata, each):
    alone = C.paired_bootstrap(a, b, num_resamples=4_000, seed=11)
    assert result.difference == pytest.approx(alone.difference)
    assert result.num_items == alone.num_items
    assert (result.low, result.high) == pytest.approx((alone.low, alone.high), abs=0.02)


def test_stratified_pooling_weighs_each_instrument_equally():
  big = (np.ones((1, 1000)), np.zeros((1, 1000)))        # difference 1 on 1,000 items
  small = (np.zeros((1, 10)), np.zeros((1, 10)))         # difference 0 on 10 items
  result = C.stratified_bootstrap([big, small], num_resamples=200)
  assert result.difference == pytest.approx(0.5)
  assert result.low == pytest.approx(0.5) and result.high == pytest.approx(0.5)
  assert result.num_items == 1010


@pytest.mark.parametrize("a, b, match", [
    (np.ones((1, 3)), np.ones((1, 4)), "numbers of items"),
    (np.ones(3), np.ones((1, 3)), r"float\[S, N\]"),
    (np.ones((0, 3)), np.ones((1, 3)), r"float\[S, N\]"),
    (np.array([[np.nan, 1.0]]), np.ones((1, 2)), "finite"),
])
def test_bad_arms_are_refused(a, b, match):
  with pytest.raises(ValueError, match=match):
    C.paired_bootstrap(a, b)


def test_verdicts():
  def result(low, high):
    return C.BootstrapResult((low + high) / 2, low, high, 0.95, 10, 3, 3)
  assert C.verdict(result(0.1, 2.0), 1) == C.AGREES == "agrees with the paper"
  assert C.verdict(result(-2.0, -0.1), -1) == C.AGREES
  assert C.verdict(result(-2.0, -0.1), 1) == C.REVERSED == "reversed"
  assert C.verdict(result(0.1, 2.0), -1) == C.REVERSED
  assert C.verdict(result(-0.1, 2.0), 1) == C.UNRESOLVED == "not resolvable at this scale"
  assert C.verdict(result(0.0, 2.0), 1) == C.UNRESOLVED   # 0 on the edge is not excluded
  assert C.verdict(result(0.0, 0.0), 1) == C.UNRESOLVED
  with pytest.raises(ValueError, match="paper_sign"):
    C.verdict(result(0.1, 2.0), 0)


def test_seed_count_note():
  def result(sa, sb):
    return C.BootstrapResult(0.0, -1.0, 1.0, 0.95, 10, sa, sb)
  assert C.seed_count_note(result(3, 5)) == ""
  assert "item" in C.seed_count_note(result(1, 3)) and "3 seeds" in C.seed_count_note(result(1, 3))
  assert "2 seeds" in C.seed_count_note(result(3, 2))


def test_the_scale_evidence_names_its_sources():
  for source in ("BabyLM 2023", "AntLM", "Gisserot-Boukhlef et al. 2025", "1e8", "3e8", "2e8",
                 "3e9"):
    assert source in C.SCALE_EVIDENCE


# ----------------------------------------------------------------------------------------
# The contrasts as data, against the experiment files.

_STUDY_FILES = sorted({c.study for c in C.CONTRASTS})


@pytest.mark.parametrize("study", _STUDY_FILES)
def test_the_contrasts_points_and_paper_numbers_are_the_studys(study):
  """Every arm member is a point of its study, with the study's objective and architecture
  in its config, and the paper numbers are the study's reference row."""
  points = {p.name: p for p in points_lib.collect(study)}
  for contrast in C.contrasts_of(study):
    for m in contrast.a + contrast.b:
      assert m.point in points, (contrast.key, m.point)
      arg = dict(kv.split("=") for kv in points[m.point].config.partition(":")[2].split(","))
      assert arg["objective"] == m.objective, (contrast.key, m.point)
      assert arg.get("arch", "encoder_decoder") == m.architecture, (contrast.key, m.point)
      assert m.paper == tuple(points[m.point].reference[c] for c in C.PAPER_COLUMNS)


def test_the_paper_signs_hold_on_every_understanding_column():
  assert [c.key for c in C.CONTRASTS] == ["C1", "C2", "C3", "C4"]
  for contrast in C.CONTRASTS:
    for column, (x, y) in contrast.paper_means().items():
      assert np.sign(x - y) == contrast.paper_sign, (contrast.key, column)
  c1 = C.CONTRASTS[0]
  assert c1.paper_numbers().startswith("GLUE 83.25 vs 80.69 (+2.56); SQuAD 80.54 vs 77.99")
  assert C.contrasts_of("runs/x/t5_objectives.py") == C.CONTRASTS[:2]
  assert C.contrasts_of("experiments.t5_objectives") == C.CONTRASTS[:2]
  assert C.contrasts_of("experiments/t5_corruption_rate.py") == ()


# ----------------------------------------------------------------------------------------
# Reading results and the contrast table.

DIGEST = {"probe/agreement": "abc", "pairs/a_an": "def"}


def _record(objective, architecture, probe, pairs, *, random_init=(0.5, 0.5), percent=False,
            digest=DIGEST, step=1000):
  """A synthetic nlu record with two instruments (probe 0/1 items, pairs 1/0/0.5 items)."""
  unit = 100.0 if percent else 1.0
  def instrument(items, ri):
    acc = float(np.mean(items))
    return {"accuracy": unit * acc, "random_init": unit * ri, "score": unit * (acc - ri),
            "per_item": list(map(float, items))}
  return {"suite": "nlu", "step": step, "objective": objective, "architecture": architecture,
          "items_digest": dict(digest),
          "instruments": {"probe/agreement": instrument(probe, random_init[0]),
                          "pairs/a_an": {**instrument(pairs, random_init[1]),
                                         "mean_margin": 0.1,
                                         "per_item_margin": [0.1] * len(pairs)}}}


def _objectives_points(rng, seeds=3, prefix_bonus=0.0, n=60):
  """Synthetic results of the t5_objectives points: every arm at accuracy ~0.7, prefix LM
  shifted by `prefix_bonus`."""
  def run(objective, p):
    probe = (rng.random(n) < p).astype(float)
    pairs = np.where(rng.random(n) < 0.1, 0.5, (rng.random(n) < p).astype(float))
    return _record(objective, "encoder_decoder", probe, pairs)
  out = {}
  for name, objective in (("bert", "bert"), ("mass", "mass"),
                          ("replace_spans", "iid_replace_spans"),
                          ("drop_tokens", "drop_tokens"), ("deshuffle", "deshuffle")):
    out[name] = [run(objective, 0.7) for _ in range(seeds)]
  out["prefix_lm"] = [run("prefix_lm", min(1.0, 0.7 + prefix_bonus)) for _ in range(seeds)]
  return out


def test_the_table_runs_each_ready_contrast_per_instrument_and_pooled():
  rng = np.random.default_rng(0)
  table = C.contrast_table(_objectives_points(rng, prefix_bonus=0.3), num_resamples=1_000)
  assert [(r.contrast.key, r.instrument) for r in table] == [
      ("C1", "pairs/a_an"), ("C1", "probe/agreement"), ("C1", "pooled"),
      ("C2", "pairs/a_an"), ("C2", "probe/agreement"), ("C2", "pooled")]
  by = {(r.contrast.key, r.instrument): r for r in table}
  # prefix LM far ahead: C1 (denoising - prefix LM) reversed, C2 (prefix LM - deshuffle) agrees.
  assert by["C1", "pooled"].verdict == C.REVERSED
  assert by["C2", "pooled"].verdict == C.AGREES
  assert all(r.note == "" for r in table)  # three seeds per point
  # The pooled difference is the mean of the instruments' differences, in points.
  for key in ("C1", "C2"):
    parts = [by[key, i].result.difference for i in ("pairs/a_an", "probe/agreement")]
    assert by[key, "pooled"].result.difference == pytest.approx(np.mean(parts))
  assert 20 < by["C2", "pooled"].result.difference < 40


def test_equal_arms_are_not_resolvable_and_one_seed_gets_a_note():
  rng = np.random.default_rng(1)
  table = C.contrast_table(_objectives_points(rng, seeds=1, n=40), num_resamples=1_000)
  pooled = {r.contrast.key: r for r in table if r.instrument == C.POOLED}
  assert pooled["C1"].verdict == pooled["C2"].verdict == C.UNRESOLVED
  assert "one seed" in pooled["C1"].note


def test_the_difference_is_of_margins_over_random_initialisation():
  """Same accuracies, different random-initialisation baselines (C3's arms differ in
  architecture): the difference is that of the scores, in percentage points, whether the
  records hold fractions or percentages."""
  items = np.array([1.0, 0.0, 1.0, 1.0])
  for percent in (False, True):
    enc = _record("iid_replace_spans", "encoder_decoder", items, items,
                  random_init=(0.5, 0.5), percent=percent)
    lm = _record("full_lm", "causal", items, items, random_init=(0.25, 0.75), percent=percent)
    plm = _record("prefix_lm", "prefix_lm", items, items, random_init=(0.25, 0.75),
                  percent=percent)
    table = C.contrast_table({"encdec_denoising": [enc], "lm_lm": [lm], "prefixlm_lm": [plm]},
                             num_resamples=200)
    by = {r.instrument: r.result for r in table}
    assert by["probe/agreement"].difference == pytest.approx(-25.0)   # 25 - 50 points
    assert by["pairs/a_an"].difference == pytest.approx(25.0)         # 25 - 0 points
    assert by["probe/agreement"].high - by["probe/agreement"].low < 1e-9


def test_different_item_sets_are_refused():
  rng = np.random.default_rng(2)
  points = _objectives_points(rng, seeds=1, n=10)
  points["deshuffle"] = [{**points["deshuffle"][0], "items_digest": {"probe/agreement": "x"}}]
  with pytest.raises(ValueError, match=r"C2: .*different items.*deshuffle"):
    C.contrast_table(points, C.CONTRASTS[1:2])


def test_a_point_with_another_objective_is_refused():
  rng = np.random.default_rng(3)
  points = _objectives_points(rng, seeds=1, n=10)
  points["prefix_lm"] = points["deshuffle"]
  with pytest.raises(ValueError, match="records objective 'deshuffle'.*'prefix_lm'"):
    C.contrast_table(points, C.CONTRASTS[1:2])


def test_points_without_a_common_instrument_are_refused():
  rng = np.random.default_rng(5)
  points = _objectives_points(rng, seeds=1, n=10)
  record = points["deshuffle"][0]
  points["deshuffle"] = [{**record, "instruments": {"probe/other": record["instruments"][
      "probe/agreement"]}}]
  with pytest.raises(ValueError, match="C2: no instrument is in every record"):
    C.contrast_table(points, C.CONTRASTS[1:2])


def test_a_contrast_waits_for_all_its_points():
  rng = np.random.default_rng(4)
  points = _objectives_points(rng, seeds=1, n=10)
  del points["mass"]
  assert {r.contrast.key for r in C.contrast_table(points, num_resamples=50)} == {"C2"}
  points["mass"] = []
  assert {r.contrast.key for r in C.contrast_table(points, num_resamples=50)} == {"C2"}


@pytest.mark.parametrize("instrument, match", [
    ({"accuracy": 0.5, "random_init": 0.5}, "no per_item"),
    ({"accuracy": 0.5, "per_item": [1, 0]}, "no random_init"),
    ({"accuracy": 0.3, "random_init": 0.5, "per_item": [1, 0]}, "neither the mean"),
    ({"random_init": 0.5, "per_item": [1, 0]}, "no accuracy"),
])
def test_bad_instrument_records_are_refused(instrument, match):
  with pytest.raises(ValueError, match=match):
    C.item_scores(instrument, "p probe/x")


def test_item_scores_are_points_over_random_initialisation_in_either_unit():
  for unit in (1.0, 100.0):
    got = C.item_scores({"accuracy": 0.75 * unit, "random_init": 0.5 * unit,
                         "per_item": [1, 1, 0.5, 0.5]})
    np.testing.assert_allclose(got, [50, 50, 0, 0])
    zeros = C.item_scores({"accuracy": 0.0, "random_init": 0.5 * unit, "per_item": [0, 0]})
    np.testing.assert_allclose(zeros, [-50, -50])


def test_load_nlu_results_reads_the_latest_step(tmp_path):
  assert C.load_nlu_results(str(tmp_path)) is None
  (tmp_path / "eval").mkdir()
  assert C.load_nlu_results(str(tmp_path)) is None
  for step in (500, 2000, 1000):
    record = _record("bert", "encoder_decoder", [1, 0], [1, 0], step=step)
    (tmp_path / "eval" / f"nlu_step_{step}.json").write_text(json.dumps(record))
  (tmp_path / "eval" / "tasks_step_9000.json").write_text("{}")        # another suite's file
  (tmp_path / "eval" / "nlu_step_9000.json.tmp").write_text("{")       # not a result file
  blank = dict(_record("bert", "encoder_decoder", [1, 1], [1, 1], step=8000), blank_inputs=True)
  (tmp_path / "eval" / C.result_file(8000, blank_inputs=True)).write_text(json.dumps(blank))
  assert C.load_nlu_results(str(tmp_path))["step"] == 2000             # the control is no result
  with pytest.raises(ValueError, match="blank-input control"):
    C.read_nlu_record(str(tmp_path / "eval" / "nlu_blank_step_8000.json"))
  (tmp_path / "eval" / "nlu_step_3000.json").write_text(json.dumps({"suite": "mini"}))
  with pytest.raises(ValueError, match="not an nlu result"):
    C.load_nlu_results(str(tmp_path))
  (tmp_path / "eval" / "nlu_step_4000.json").write_text("{")
  with pytest.raises(ValueError, match="not JSON"):
    C.load_nlu_results(str(tmp_path))


# ----------------------------------------------------------------------------------------
# launch.report's Contrasts section, on a synthetic sweep directory.

def _write_sweep(root, points, rng, skip=()):
  runs = _objectives_points(rng, seeds=3, prefix_bonus=0.3, n=40)
  seen = {}
  for p in points:
    base = p.replicate_of or p.name
    if base in skip or base not in runs:   # the equal-tokens control: tests/test_equal_tokens.py
      continue
    k = seen[base] = seen.get(base, -1) + 1
    folder = root / p.name / "eval"
    folder.mkdir(parents=True)
    (folder / "nlu_step_1000.json").write_text(json.dumps(runs[base][min(k, 2)]))


def test_the_report_shows_the_contrasts_with_intervals_and_verdicts(tmp_path, monkeypatch):
  from launch import report  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(REPO)
  points = points_lib.seed_replicates(
      points_lib.collect("experiments/t5_objectives.py", runlocal=True), 3)
  assert [p.name for p in points][-2:] == ["replace_spans_seed1", "replace_spans_seed2"]
  _write_sweep(tmp_path, points, np.random.default_rng(0))
  text = report.write_report(str(tmp_path), points, experiment="experiments/t5_objectives.py")
  section = text[text.index("## Contrasts"):text.index("## Points")]
  rows = [line for line in section.splitlines() if line.startswith("| C")]
  assert len(rows) == 6
  assert rows[0].startswith("| C1: bert + mass + replace_spans + drop_tokens vs prefix_lm | "
                            "pairs/a_an | 1 / 1 |")
  assert rows[0].endswith("| reversed | GLUE 83.25 vs 80.69 (+2.56); SQuAD 80.54 vs 77.99 "
                          "(+2.55); SGLUE 69.79 vs 65.27 (+4.52) |")
  assert rows[2].startswith("| C1 | pooled | 1 / 1 |") and rows[2].endswith("| reversed |  |")
  assert rows[5].startswith("| C2 | pooled | 1 / 1 |") and "| agrees with the paper |" in rows[5]
  assert "C1, C2: one seed per point" in section
  assert "not ranked against the paper" in section and "Gisserot-Boukhlef" in section
  assert "Items: not recorded (each result's `items_source`)." in section


def test_the_report_gives_every_contrast_three_seeds_when_every_point_is_replicated(
    tmp_path, monkeypatch):
  """`launch.sweep --seeds=3 --seeds_of=all`: launch.report finds each point's replicates in
  the root by itself, and every contrast reads three seeds a side."""
  from launch import report  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(REPO)
  one_seed = points_lib.collect("experiments/t5_objectives.py", runlocal=True)
  points = points_lib.seed_replicates(one_seed, 3, every_point=True)
  _write_sweep(tmp_path, points, np.random.default_rng(0))
  assert report.main(["experiments/t5_objectives.py", f"--root={tmp_path}"]) == 0
  text = (tmp_path / "report.md").read_text()
  section = text[text.index("## Contrasts"):text.index("## Points")]
  rows = [line for line in section.splitlines() if line.startswith("| C")]
  assert len(rows) == 6 and all("| 3 / 3 |" in row for row in rows)
  assert "one seed per point" not in section


def test_the_report_says_which_points_a_contrast_waits_for_and_refuses_mixed_items(tmp_path,
                                                                                  monkeypatch):
  from launch import yardstick  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(REPO)
  points = points_lib.collect("experiments/t5_objectives.py", runlocal=True)
  assert yardstick.contrasts_section(yardstick.read(str(tmp_path), points),
                                     "experiments/t5_objectives.py") == []
  _write_sweep(tmp_path, points, np.random.default_rng(1), skip=("mass",))
  section = "\n".join(yardstick.contrasts_section(yardstick.read(str(tmp_path), points),
                                               "experiments/t5_objectives.py"))
  assert "C1 waits for the nlu results of: mass." in section
  assert "| C2: prefix_lm vs deshuffle |" in section and "| C1" not in section
  path = tmp_path / "deshuffle" / "eval" / "nlu_step_2000.json"
  path.write_text(json.dumps({**json.loads(path.with_name("nlu_step_1000.json").read_text()),
                              "items_digest": {"other": "x"},
                              "items_source": "comments:cpython3.11.7"}))
  section = "\n".join(yardstick.contrasts_section(yardstick.read(str(tmp_path), points),
                                               "experiments/t5_objectives.py"))
  assert "**C2 cannot be computed:** C2: the points were scored on different items" in section
  assert "Items: comments:cpython3.11.7, not recorded (each result's" in section
  path.write_text(path.with_name("nlu_step_1000.json").read_text().replace('"step": 1000',
                                                                          '"step": 2000'))
  section = "\n".join(yardstick.contrasts_section(yardstick.read(str(tmp_path), points),
                                               "experiments.t5_objectives"))
  assert ("**C2 cannot be computed:** C2: the points' newest nlu results are from different "
          "pre-training steps (prefix_lm at 1000, deshuffle at 2000)") in section
  other = "\n".join(yardstick.contrasts_section(yardstick.read(str(tmp_path), points),
                                             "experiments/t5_corruption_rate.py"))
  assert "None of the paper's contrasts" in other


# ----------------------------------------------------------------------------------------
# Edges the mutation run (docs/testing.md) found untested.

class _RecordingRng:
  """A numpy Generator that records the shape of every `integers` draw."""

  def __init__(self, seed):
    self.rng, self.shapes = np.random.default_rng(seed), []

  def integers(self, low, high, size):
    self.shapes.append(size)
    return self.rng.integers(low, high, size)


def test_the_resamples_come_in_chunks_of_at_most_chunk_cells(monkeypatch):
  """N = 3,000 items: 2^21 // 3,000 = 699 resamples a chunk, so 1,000 come as 699 + 301;
  every resample is filled, with the closed-form mean. Past 2^21 items, one a chunk."""
  d = np.tile([0.0, 1.0, 0.5], 1000)
  strata = [([d[None]], [np.zeros((1, 3000))])]
  rng = _RecordingRng(0)
  draws = C._resampled_differences(strata, rng, 1000)[0]  # pylint: disable=protected-access
  assert rng.shapes == [(699, 3000), (301, 3000)]
  assert np.all((draws >= 0.4) & (draws <= 0.6))          # none left unfilled
  assert draws.mean() == pytest.approx(0.5, abs=4 * d.std() / np.sqrt(3000 * 1000))
  monkeypatch.setattr(C, "_CHUNK_CELLS", 4)                 # 4 cells, 5 items: 1 a chunk
  rng = _RecordingRng(0)
  strata = [([np.ones((2, 5))], [np.zeros((1, 5))])]
  draws = C._resampled_differences(strata, rng, 3)[0]  # pylint: disable=protected-access
  assert rng.shapes == [(1, 2), (1, 5)] * 3                # seeds, then items, per resample
  np.testing.assert_allclose(draws, 1.0)


@pytest.mark.parametrize("a, b, match", [
    (np.ones((1, 0)), np.ones((1, 0)), r"float\[S, N\]"),
    (np.ones((1, 3, 2)), np.ones((1, 3)), r"float\[S, N\]"),
])
def test_arms_without_items_or_of_three_axes_are_refused(a, b, match):
  with pytest.raises(ValueError, match=match):
    C.paired_bootstrap(a, b)


def test_strata_with_other_seeds_per_point_are_refused():
  for first, second in ((2, 3), (3, 2)):
    strata = [(np.ones((first, 4)), np.ones((1, 4))), (np.ones((second, 4)), np.ones((1, 4)))]
    with pytest.raises(ValueError, match=r"stratum 1: seeds per point differ"):
      C.stratified_bootstrap(strata, num_resamples=10)


@pytest.mark.parametrize("confidence", [-0.5, 0.0, 1.0, 1.5])
def test_a_confidence_outside_zero_one_is_refused(confidence):
  with pytest.raises(ValueError, match="confidence must be in"):
    C.paired_bootstrap(np.ones((1, 3)), np.zeros((1, 3)), confidence=confidence)


def test_verdicts_of_intervals_near_zero_and_notes_past_three_seeds():
  def result(low, high, seeds=(3, 3)):
    return C.BootstrapResult((low + high) / 2, low, high, 0.95, 10, *seeds)
  assert C.verdict(result(-0.5, -0.1), 1) == C.REVERSED         # low in (-1, 0)
  assert C.verdict(result(-0.5, -0.1), -1) == C.AGREES
  assert C.verdict(result(0.1, 0.5), 1) == C.AGREES
  assert C.seed_count_note(result(-1.0, 1.0, (4, 5))) == ""


def _spread(k, n=12):
  """Item scores spread over (0, 1), no atoms: any other bootstrap draw moves the interval."""
  return np.array([[(k + 0.618034 * i + 0.1 * s) % 1 for i in range(n)] for s in range(2)])


def test_the_bootstraps_default_to_10_000_resamples_seed_0_and_95_percent():
  a, b = _spread(0.1), _spread(0.7)
  for fn, args in ((C.paired_bootstrap, (a, b)), (C.stratified_bootstrap, ([(a, b)] * 2,)),
                   (C.each_and_pooled, ([(a, b)] * 2,))):
    got = fn(*args)
    assert got == fn(*args, num_resamples=10_000, confidence=0.95, seed=0)
    for other in ({"num_resamples": 9_999}, {"num_resamples": 10_001}, {"seed": 1}):
      assert got != fn(*args, **other), (fn, other)


def test_contrast_table_defaults_and_digests_equal_up_to_key_order():
  def record(objective, k, digest):
    items = _spread(k)[0]
    instrument = {"accuracy": float(items.mean()), "random_init": 0.5,
                  "per_item": items.tolist()}
    return {"suite": "nlu", "step": 1000, "objective": objective,
            "architecture": "encoder_decoder", "items_digest": digest,
            "instruments": {"probe/agreement": instrument}}
  points = {"prefix_lm": [record("prefix_lm", 0.1, {"a": "1", "b": "2"}),
                          record("prefix_lm", 0.3, {"a": "1", "b": "2"})],
            "deshuffle": [record("deshuffle", 0.7, {"b": "2", "a": "1"})]}
  table = C.contrast_table(points, C.CONTRASTS[1:2])
  assert [r.instrument for r in table] == ["probe/agreement"]
  assert table == C.contrast_table(points, C.CONTRASTS[1:2], num_resamples=10_000,
                                   confidence=0.95, seed=0)
  for other in ({"num_resamples": 9_999}, {"num_resamples": 10_001}, {"seed": 1}):
    assert table != C.contrast_table(points, C.CONTRASTS[1:2], **other), other


def test_a_record_of_another_suite_with_instruments_is_refused(tmp_path):
  for suite in ("tasks", "mini", None):
    path = tmp_path / f"{suite}.json"
    path.write_text(json.dumps({"suite": suite, "instruments": {}}))
    with pytest.raises(ValueError, match="not an nlu result"):
      C.read_nlu_record(str(path))


def test_item_scores_units_at_their_tolerances():
  # Every item 0 and an accuracy of exactly 1e-6: a fraction (within 1e-6), so 0.5 is 50 %.
  np.testing.assert_allclose(
      C.item_scores({"accuracy": 1e-6, "random_init": 0.5, "per_item": [0, 0]}), [-50, -50])
  # A percentage whose random-init accuracy is below 1 %: 0.5 is 0.5 points, not 50.
  np.testing.assert_allclose(
      C.item_scores({"accuracy": 75.0, "random_init": 0.5, "per_item": [1, 1, 1, 0]}),
      [99.5, 99.5, 99.5, -0.5])
  with pytest.raises(ValueError, match="neither the mean"):   # 75.5 is not 100 x 0.75
    C.item_scores({"accuracy": 75.5, "random_init": 50.0, "per_item": [1, 1, 1, 0]})


def test_results_contrasts_and_rows_are_frozen():
  result = C.BootstrapResult(1.0, 0.5, 1.5, 0.95, 10, 3, 3)
  contrast = C.CONTRASTS[1]
  row = C.ContrastRow(contrast, C.POOLED, result, C.AGREES, "")
  for obj, field in ((result, "low"), (contrast.a[0], "point"), (contrast, "paper_sign"),
                     (row, "verdict")):
    with pytest.raises(dataclasses.FrozenInstanceError):
      setattr(obj, field, None)


def test_one_item_and_one_resample_are_enough_and_fewer_are_refused():
  result = C.paired_bootstrap(np.full((1, 1), 3.0), np.ones((1, 1)), num_resamples=5)
  assert (result.difference, result.low, result.high, result.num_items) == (2.0, 2.0, 2.0, 1)
  one = C.paired_bootstrap(np.array([[1.0, 0.0]]), np.zeros((1, 2)), num_resamples=1)
  assert one.low == one.high and one.low in (0.0, 0.5, 1.0)    # the one draw's mean
  for num_resamples in (0, -1):
    with pytest.raises(ValueError, match="num_resamples must be >= 1"):
      C.paired_bootstrap(np.ones((1, 2)), np.zeros((1, 2)), num_resamples=num_resamples)


def test_a_point_recording_a_later_objective_or_architecture_is_refused():
  """The check is !=, not an order: "prefix_lm" sorts after "deshuffle", "causal" before
  "encoder_decoder"."""
  rng = np.random.default_rng(6)
  points = _objectives_points(rng, seeds=1, n=10)
  points["deshuffle"] = points["prefix_lm"]
  with pytest.raises(ValueError, match="records objective 'prefix_lm'.*'deshuffle'"):
    C.contrast_table(points, C.CONTRASTS[1:2])
  points = _objectives_points(rng, seeds=1, n=10)
  points["deshuffle"] = [{**points["deshuffle"][0], "architecture": "prefix_lm"}]
  with pytest.raises(ValueError, match="records architecture 'prefix_lm'"):
    C.contrast_table(points, C.CONTRASTS[1:2])


def test_item_scores_at_the_percent_tolerance_and_the_random_init_unit_boundary():
  # Every item 0, an accuracy of exactly 1e-4: a percentage (within 1e-4 of 100 x 0).
  np.testing.assert_allclose(
      C.item_scores({"accuracy": 1e-4, "random_init": 50.0, "per_item": [0, 0]}), [-50, -50])
  # Every item 0 (accuracy 0 in either unit): random_init 1 is a fraction, 1.5 a percentage.
  np.testing.assert_allclose(
      C.item_scores({"accuracy": 0.0, "random_init": 1.0, "per_item": [0, 0]}), [-100, -100])
  np.testing.assert_allclose(
      C.item_scores({"accuracy": 0.0, "random_init": 1.5, "per_item": [0, 0]}), [-1.5, -1.5])
