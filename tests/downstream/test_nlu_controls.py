"""The yardstick's controls with intervals (lm/downstream/nlu_controls.py)."""
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
