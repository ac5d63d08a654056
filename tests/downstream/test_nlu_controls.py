"""The yardstick's controls with intervals (lm/downstream/nlu_controls.py)."""
import dataclasses
import json
import pathlib

import numpy as np
import pytest

from lm.downstream import contrasts
from lm.downstream import nlu_controls as K

STEPS = (250, 500, 1000, 2000)


def _record(p_probe, p_pairs, rng, *, n=80, random_init=0.5, digest="d", step=1000,
            objective="bert"):
  def instrument(p):
    items = (rng.random(n) < p).astype(float)
    return {"accuracy": float(items.mean()), "random_init": random_init,
            "per_item": items.tolist()}
  return {"suite": "nlu", "step": step, "objective": objective, "architecture": "encoder_decoder",
          "items_digest": {"all": digest},
          "instruments": {"probe/x": instrument(p_probe), "pairs/y": instrument(p_pairs)}}


def test_item_slopes_are_least_squares_slopes_against_log2_steps():
  rng = np.random.default_rng(0)
  scores = {s: rng.random((2, 5)) for s in STEPS}
  got = K.item_slopes(scores)
  x = np.log2(STEPS)
  want = np.array([[np.polyfit(x, [scores[s][i, n] for s in STEPS], 1)[0] for n in range(5)]
                   for i in range(2)])
  np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
  # Exactly 3 points per doubling: 3 at every item; the order of the mapping does not matter.
  line = {s: np.full((1, 4), 10 + 3 * np.log2(s / 250)) for s in reversed(STEPS)}
  np.testing.assert_allclose(K.item_slopes(line), 3.0)
  with pytest.raises(ValueError, match="two or more"):
    K.item_slopes({1000: np.ones((1, 3))})


def test_two_points_slopes_compare_with_the_paired_bootstrap():
  line = {s: np.full((1, 6), 3 * np.log2(s)) for s in STEPS}
  flat = {s: np.ones((1, 6)) for s in STEPS}
  result = contrasts.paired_bootstrap(K.item_slopes(line), K.item_slopes(flat),
                                      num_resamples=200)
  assert result.difference == pytest.approx(3.0)
  assert result.low == pytest.approx(3.0) and result.high == pytest.approx(3.0)


def test_random_init_table_reads_each_point_against_random_initialisation():
  rng = np.random.default_rng(1)
  points = {"good": [_record(0.9, 0.8, rng) for _ in range(3)],
            "chance": [_record(0.5, 0.5, rng, n=40) for _ in range(3)],
            "bad": [_record(0.1, 0.2, rng)], "empty": []}
  rows = {(r.point, r.instrument): r for r in K.random_init_table(points, num_resamples=1_000)}
  assert sorted({p for p, _ in rows}) == ["bad", "chance", "good"]
  assert {i for _, i in rows} == {"probe/x", "pairs/y", contrasts.POOLED}
  assert rows["good", "pooled"].reading == K.ABOVE
  assert rows["good", "pooled"].result.difference == pytest.approx(
      np.mean([rows["good", i].result.difference for i in ("probe/x", "pairs/y")]))
  assert 25 < rows["good", "probe/x"].result.difference < 55       # ~ 90 - 50 points
  assert rows["chance", "pooled"].reading == K.NOT_SEPARATED
  assert rows["bad", "pooled"].reading == K.BELOW
  assert rows["good", "pooled"].note == "" and "one seed" in rows["bad", "pooled"].note


def test_growth_table_reads_slopes_over_the_steps_every_seed_has():
  rng = np.random.default_rng(2)
  def history(p_of_step, steps=STEPS):
    return {s: _record(p_of_step(s), p_of_step(s), rng, n=100, step=s) for s in steps}
  rising = lambda s: 0.5 + 0.1 * np.log2(s / 250)       # 50, 60, 70, 80 %
  points = {"rising": [history(rising) for _ in range(2)] + [history(rising, STEPS[1:])],
            "flat": [history(lambda s: 0.7) for _ in range(3)]}
  rows = {(r.point, r.instrument): r for r in K.growth_table(points, num_resamples=1_000)}
  assert rows["rising", "pooled"].reading == K.RISES
  assert 6 < rows["rising", "pooled"].result.difference < 14    # ~10 points per doubling
  assert rows["flat", "pooled"].reading == K.FLAT
  assert rows["rising", "pooled"].note == ""                     # three seeds
  with pytest.raises(ValueError, match="a slope needs two or more"):
    K.growth_table({"one": [history(rising, (1000,))]})
  mixed = [history(rising)]
  mixed[0][500] = {**mixed[0][500], "items_digest": {"all": "other"}}
  with pytest.raises(ValueError, match="different items"):
    K.growth_table({"mixed": mixed})


def test_growth_contrasts_read_the_slope_difference_against_the_papers_sign():
  """C2 (prefix LM minus deshuffling, paper +): prefix LM rising 10 points a doubling and
  deshuffling flat moves toward the paper's sign; swapped, away; both flat, no trend."""
  rng = np.random.default_rng(8)
  c2 = next(c for c in contrasts.CONTRASTS if c.key == "C2")
  rising = lambda s: 0.5 + 0.1 * np.log2(s / 250)
  flat = lambda s: 0.7
  def seeds(p_of_step, objective, steps=STEPS[:3]):
    return [{s: _record(p_of_step(s), p_of_step(s), rng, n=150, step=s, objective=objective)
             for s in steps} for _ in range(3)]
  def run(a, b, **kw):
    points = {"prefix_lm": seeds(a, "prefix_lm"), "deshuffle": seeds(b, "deshuffle")}
    return K.growth_contrast_table(points, [c2], num_resamples=1_000, **kw)
  (toward,) = run(rising, flat)
  assert toward.reading == K.TOWARD and toward.steps == STEPS[:3] and toward.note == ""
  assert 6 < toward.result.difference < 14
  assert run(flat, rising)[0].reading == K.AWAY
  assert run(flat, flat)[0].reading == K.FLAT
  # Left out: a point without results, or steps its seeds do not share.
  assert K.growth_contrast_table({"prefix_lm": seeds(rising, "prefix_lm")}, [c2]) == []
  apart = {"prefix_lm": seeds(rising, "prefix_lm", (250, 500)),
           "deshuffle": seeds(flat, "deshuffle", (500, 1000))}
  assert K.growth_contrast_table(apart, [c2]) == []


def test_load_nlu_history_reads_every_step(tmp_path):
  assert K.load_nlu_history(str(tmp_path)) == {}
  (tmp_path / "eval").mkdir()
  rng = np.random.default_rng(3)
  for step in STEPS:
    (tmp_path / "eval" / f"nlu_step_{step}.json").write_text(
        json.dumps(_record(0.5, 0.5, rng, step=step)))
  (tmp_path / "eval" / "tasks_step_250.json").write_text("{}")
  history = K.load_nlu_history(str(tmp_path))
  assert sorted(history) == list(STEPS) and history[500]["step"] == 500
  (tmp_path / "eval" / "nlu_step_4000.json").write_text("{")
  with pytest.raises(ValueError, match="not JSON"):
    K.load_nlu_history(str(tmp_path))


def test_the_report_shows_each_points_controls(tmp_path, monkeypatch):
  """A synthetic t5_span_length sweep: the baseline with three seeds scored at two steps and
  rising, the span points at one step at chance."""
  from launch import points as points_lib  # pylint: disable=g-import-not-at-top
  from launch import report  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(pathlib.Path(__file__).resolve().parents[2])
  points = points_lib.seed_replicates(
      points_lib.collect("experiments/t5_span_length.py", runlocal=True), 3)
  rng = np.random.default_rng(5)
  for p in points:
    (tmp_path / p.name / "eval").mkdir(parents=True)
    iid = (p.replicate_of or p.name) == "iid"
    steps = {500: 0.7, 1000: 0.9} if iid else {1000: 0.5}
    objective = "iid_replace_spans" if iid else "span_corruption"
    for step, acc in steps.items():
      (tmp_path / p.name / "eval" / f"nlu_step_{step}.json").write_text(
          json.dumps(_record(acc, acc, rng, n=60, step=step, objective=objective)))
  text = report.write_report(str(tmp_path), points, experiment="experiments/t5_span_length.py")
  start = text.index("## Controls")
  section = text[start:text.index("\n## ", start)]
  rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in section.splitlines()
          if line.startswith("| ") and not line.startswith("| point")}
  assert sorted(rows) == ["iid", "span_02", "span_03", "span_05", "span_10"]
  iid = rows["iid"]
  assert iid[1] == "3" and iid[4] == K.ABOVE and iid[5] == "2 of 2" and iid[8] == K.RISES + " |"
  assert 30 < float(iid[2]) < 50 and 10 < float(iid[6]) < 30      # ~40 points, ~20 / doubling
  span = rows["span_02"]
  assert span[1] == "1" and span[4] == K.NOT_SEPARATED and span[6:8] == ["—", "—"]
  assert "one seed per point" in section
  # The contrast (C4) is there too, from each run's newest step (1,000 for all): the span
  # points at chance, iid far above, so reversed.
  assert "| C4 | pooled | 1 / 3 |" in text and "| C4 | pooled | 1 / 3 | -" in text
  assert text.count("| reversed |") == 3


def test_the_report_compares_the_contrasts_as_slopes(tmp_path, monkeypatch):
  """Every t5_span_length point scored at 500 and 1,000 steps (three seeds of iid, one of
  each span point): iid rising, the span points flat, so C4 (span minus iid, paper +) moves
  away from the paper's sign."""
  from launch import points as points_lib  # pylint: disable=g-import-not-at-top
  from launch import yardstick  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(pathlib.Path(__file__).resolve().parents[2])
  experiment = "experiments/t5_span_length.py"
  points = points_lib.seed_replicates(points_lib.collect(experiment, runlocal=True), 3)
  rng = np.random.default_rng(6)
  for p in points:
    (tmp_path / p.name / "eval").mkdir(parents=True)
    iid = (p.replicate_of or p.name) == "iid"
    for step, acc in ({500: 0.6, 1000: 0.9} if iid else {500: 0.7, 1000: 0.7}).items():
      (tmp_path / p.name / "eval" / f"nlu_step_{step}.json").write_text(json.dumps(_record(
          acc, acc, rng, n=60, step=step,
          objective="iid_replace_spans" if iid else "span_corruption")))
  lines = yardstick.controls_section(yardstick.read(str(tmp_path), points), experiment)
  (row,) = [line for line in lines if line.startswith("| C4: ")]
  cells = row.split(" | ")
  assert cells[1:3] == ["500 / 1,000", "1 / 3"] and cells[-1] == K.AWAY + " |"
  assert -40 < float(cells[3]) < -20                               # ~ 0 - 30 per doubling
  assert any("one seed" in line for line in lines)


def _hand_record(per_item, *, random_init=0.5, digest=None, step=1000):
  """A record of the instruments {name: per-item 0/1 scores}, written out by hand."""
  return {"suite": "nlu", "step": step, "items_digest": digest or {"all": "d"},
          "instruments": {name: {"accuracy": float(np.mean(items)), "random_init": random_init,
                                 "per_item": list(map(float, items))}
                          for name, items in per_item.items()}}


def test_item_slopes_take_any_positive_step_and_refuse_step_zero():
  # log2 of 1, 2, 4 is 0, 1, 2: scores 5, 7, 9 rise 2 points per doubling.
  got = K.item_slopes({1: np.full((1, 3), 5.0), 2: np.full((1, 3), 7.0),
                       4: np.full((1, 3), 9.0)})
  np.testing.assert_allclose(got, np.full((1, 3), 2.0))
  np.testing.assert_allclose(K.item_slopes({1: np.zeros((2, 1)), 2: np.ones((2, 1))}), 1.0)
  for steps in ((0, 1000), (-1, 1000)):
    with pytest.raises(ValueError, match=r"positive steps, got \[-?[01], 1000\]"):
      K.item_slopes({s: np.ones((1, 3)) for s in steps})


def test_the_reading_is_the_side_of_zero_the_interval_lies_on():
  def reading(low, high):
    result = contrasts.BootstrapResult((low + high) / 2, low, high, 0.95, 10, 3, 1)
    return K._reading(result, "up", "down", "neither")  # pylint: disable=protected-access
  assert reading(0.5, 2.0) == reading(1.5, 2.0) == "up"          # low in (0, 1] too
  assert reading(-2.0, -0.5) == reading(-0.5, -0.1) == "down"    # high in (-1, 0) too
  assert reading(-0.5, 2.0) == reading(0.0, 2.0) == reading(-2.0, 0.0) == "neither"


def test_one_instrument_has_no_pooled_row_and_points_without_records_are_skipped():
  """{"empty": [], "one": ...} in that order: the empty point is passed over, not the end of
  the table; one instrument gives its row alone, its margin against a one-seed zero."""
  items = [1, 1, 0, 1, 1, 1, 0, 1]                         # 75 % against 50 %: 25 points
  rows = K.random_init_table({"empty": [], "one": [_hand_record({"probe/x": items})]},
                             num_resamples=500)
  assert [(r.point, r.instrument) for r in rows] == [("one", "probe/x")]
  result = rows[0].result
  assert result.difference == pytest.approx(25.0)
  assert (result.num_items, result.seeds_a, result.seeds_b) == (8, 1, 1)
  assert result == contrasts.paired_bootstrap(100 * np.array([items]) - 50, np.zeros((1, 8)),
                                              num_resamples=500)
  assert "one seed" in rows[0].note
  with pytest.raises(dataclasses.FrozenInstanceError):
    rows[0].reading = K.BELOW
  history = {500: _hand_record({"probe/x": [0, 1, 0, 1]}, step=500),
             1000: _hand_record({"probe/x": [1, 1, 0, 1]}, step=1000)}
  rows = K.growth_table({"empty": [], "one": [history]}, num_resamples=500)
  assert [(r.point, r.instrument) for r in rows] == [("one", "probe/x")]
  assert rows[0].result.difference == pytest.approx(25.0)   # 50 % to 75 % in one doubling


def test_digests_equal_up_to_key_order_are_the_same_items():
  items = {"probe/x": [1, 0, 1, 1], "pairs/y": [0, 1, 1, 1]}
  records = [_hand_record(items, digest={"probe/x": "a", "pairs/y": "b"}),
             _hand_record(items, digest={"pairs/y": "b", "probe/x": "a"})]
  rows = K.random_init_table({"p": records}, num_resamples=100)
  assert [r.instrument for r in rows] == ["pairs/y", "probe/x", contrasts.POOLED]


def test_growth_table_says_which_steps_its_seeds_share():
  def record(step):
    return _hand_record({"probe/x": [1, 0, 1, 1]}, step=step)
  with pytest.raises(ValueError, match=r"one: scores at \[1000\] step\(s\) common"):
    K.growth_table({"one": [{1000: record(1000)}]})
  with pytest.raises(ValueError, match=r"apart: scores at no step\(s\) common"):
    K.growth_table({"apart": [{500: record(500), 1000: record(1000)},
                              {2000: record(2000), 4000: record(4000)}]})


def test_the_tables_default_to_10_000_resamples_and_seed_0():
  # Item scores spread over (0, 1) (no atoms), so the interval moves with any other draw.
  def items(k):
    return {"probe/x": [(k + 0.618034 * i) % 1 for i in range(12)],
            "pairs/y": [(k + 0.414214 * i) % 1 for i in range(12)]}
  points = {"p": [_hand_record(items(0.1)), _hand_record(items(0.7))]}
  rows = K.random_init_table(points)
  assert rows == K.random_init_table(points, num_resamples=10_000, confidence=0.95, seed=0)
  for other in ({"num_resamples": 9_999}, {"num_resamples": 10_001}, {"seed": 1}):
    assert rows != K.random_init_table(points, **other), other
  steps = {"p": [{500: _hand_record(items(k)), 1000: _hand_record(items(k + 0.3))}
                 for k in (0.1, 0.2)]}
  rows = K.growth_table(steps)
  assert rows == K.growth_table(steps, num_resamples=10_000, confidence=0.95, seed=0)
  for other in ({"num_resamples": 9_999}, {"num_resamples": 10_001}, {"seed": 1}):
    assert rows != K.growth_table(steps, **other), other


def test_compare_points_takes_records_of_different_steps():
  """The equal-predicted-tokens control compares a point at 2,138 steps with one at 1,000:
  the pooled difference is the mean of the instruments' differences, in points."""
  a = _hand_record({"probe/x": [1, 1, 1, 0], "pairs/y": [1, 1, 0, 0]}, step=2138)
  b = _hand_record({"probe/x": [1, 0, 0, 0], "pairs/y": [1, 1, 0, 0], "probe/z": [1] * 4})
  r = K.compare_points([a], [b], names=("control", "prefix_lm"), num_resamples=500)
  assert r.difference == pytest.approx((50 + 0) / 2) and (r.seeds_a, r.seeds_b) == (1, 1)
  assert r.low <= r.difference <= r.high and r.num_items == 8     # two instruments of 4
  one = K.compare_points([a], [b], num_resamples=500)
  assert one == r
  single = K.compare_points([_hand_record({"probe/x": [1, 1, 1, 0]})],
                            [_hand_record({"probe/x": [1, 0, 0, 0]})], num_resamples=500)
  assert single.difference == pytest.approx(50) and single.num_items == 4
  with pytest.raises(ValueError, match="prefix_lm: no nlu records to compare"):
    K.compare_points([a], [], names=("control", "prefix_lm"))
  with pytest.raises(ValueError, match="control and prefix_lm: no instrument in common"):
    K.compare_points([_hand_record({"probe/q": [1, 0]})], [b], names=("control", "prefix_lm"))
  with pytest.raises(ValueError, match="scored on different items"):
    K.compare_points([_hand_record({"probe/x": [1, 0]}, digest={"all": "other"})], [b])
