"""The equal-predicted-tokens control: its steps (launch/equal_tokens.py) and its report
section (launch/yardstick.py)."""
import json
import pathlib
import shutil

import numpy as np
import pytest

from launch import equal_tokens as E
from launch import points as points_lib
from launch import yardstick
from lm.downstream import contrasts
from lm.downstream import nlu_controls

REPO = pathlib.Path(__file__).resolve().parents[1]
CONTROL = E.REPLACE_SPANS


def _lines(per_step, steps, every=20, start=0):
  """metrics.jsonl lines: every `every` steps the window's mean `per_step`, then an eval line."""
  out = []
  for s in range(start + every, steps + 1, every):
    out += [{"step": s, "loss": 1.0, "target_tokens": per_step, "tokens": 2 * per_step},
            {"step": s, "eval_loss": 1.1, "eval_target_tokens": 999.0}]
  return out


def _write_run(root, name, per_step, steps):
  (root / name).mkdir(parents=True, exist_ok=True)
  (root / name / "metrics.jsonl").write_text(
      "".join(json.dumps(r) + "\n" for r in _lines(per_step, steps)))


# ----------------------------------------------------------------------------------------
# The steps.

def test_equal_token_steps_on_hand_cases():
  # 100 target tokens a step for 60 steps = 6,000; at 30 a step that is exactly 200 steps.
  assert E.equal_token_steps(60 * 100, 30) == 200
  assert E.equal_token_steps(6001, 30) == 201          # rounded up: never fewer tokens
  assert E.equal_token_steps(5999, 30) == 200
  assert E.equal_token_steps(0.1 * 3 * 10, 0.1) == 30  # 30.000000000000004 is 30, not 31
  assert E.equal_token_steps(1, 1000) == 1
  for bad in ((0, 30), (6000, 0), (6000, -1), (-5, 30)):
    with pytest.raises(ValueError, match="target tokens must be positive"):
      E.equal_token_steps(*bad)


def test_tokens_seen_adds_each_windows_mean_times_its_steps():
  records = [{"step": 20, "target_tokens": 100.0}, {"step": 20, "eval_loss": 2.0},
             {"step": 40, "target_tokens": 110.0}, {"step": 40, "target_tokens": 120.0},
             {"step": 50, "target_tokens": 90.0}]   # the last step: a 10-step window
  # Step 40 logged twice (a resumed run): the last line counts.
  assert E.tokens_seen(records) == (50, 20 * 100 + 20 * 120 + 10 * 90)
  assert E.tokens_seen(records, up_to=40) == (40, 20 * 100 + 20 * 120)
  assert E.tokens_seen(list(reversed(records))[:-1] + records[:1]) == (50, 5100.0)
  with pytest.raises(ValueError, match="no training line logs target_tokens up to step 10"):
    E.tokens_seen(records, up_to=10)
  with pytest.raises(ValueError, match="no training line logs target_tokens"):
    E.tokens_seen([{"step": 20, "eval_loss": 1.0}])


def test_measure_reads_both_runs(tmp_path):
  _write_run(tmp_path, "prefix_lm", 100.0, 60)
  _write_run(tmp_path, "replace_spans", 30.0, 60)
  m = E.measure(str(tmp_path), CONTROL)
  assert m == E.Measurement(reference=(60, 6000.0), equal_steps=(60, 1800.0), steps=200)
  _write_run(tmp_path, "replace_spans", 31.0, 40)    # the rate, not the steps, matters
  assert E.measure(str(tmp_path), CONTROL).steps == 194   # ceil(6000 / 31 = 193.5)


def test_the_command_prints_the_steps_or_one_error_line(tmp_path, capsys):
  _write_run(tmp_path, "replace_spans", 30.0, 60)
  assert E.main([f"--root={tmp_path}"]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith(f"error: no {tmp_path}/prefix_lm/metrics.jsonl: "
                                                 "train that point first")
  (tmp_path / "prefix_lm").mkdir()
  (tmp_path / "prefix_lm" / "metrics.jsonl").write_text('{"step": 20, "eval_loss": 1.0}\n{"ste')
  assert E.main([f"--root={tmp_path}"]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "has no training line logs target_tokens: let the run" in err
  _write_run(tmp_path, "prefix_lm", 100.0, 60)
  assert E.main([f"--root={tmp_path}"]) == 0
  out = capsys.readouterr().out
  assert "prefix_lm predicted 6,000 target tokens in 60 steps" in out
  assert "replace_spans predicts 30.0 a step: 200 steps (--config.train.num_steps=200)" in out


# ----------------------------------------------------------------------------------------
# The report section.

def _record(p, *, step, n=150, objective="iid_replace_spans", digest="d"):
  """An nlu record whose instruments score the first p * n items right (so equal accuracies
  are equal items: a difference of exactly 0)."""
  def instrument():
    items = (np.arange(n) < p * n).astype(float)
    return {"accuracy": float(items.mean()), "random_init": 0.5, "per_item": items.tolist()}
  return {"suite": "nlu", "step": step, "objective": objective,
          "architecture": "encoder_decoder", "items_digest": {"all": digest},
          "instruments": {"probe/x": instrument(), "pairs/y": instrument()}}


def _study(root, accuracy, *, control_steps=200, control_rate=30.0, digest="d"):
  """The three points: prefix LM 100 target tokens a step, replace-spans 30, both 60 steps;
  the control `control_steps` steps; nlu records at the given accuracies (None: none)."""
  runs = {"prefix_lm": (100.0, 60, "prefix_lm"), "replace_spans": (30.0, 60, "iid_replace_spans"),
          CONTROL.point: (control_rate, control_steps, "iid_replace_spans")}
  for name, (rate, steps, objective) in runs.items():
    _write_run(root, name, rate, steps)
    if accuracy.get(name) is not None:
      (root / name / "eval").mkdir(exist_ok=True)
      (root / name / "eval" / f"nlu_step_{steps}.json").write_text(json.dumps(_record(
          accuracy[name], step=steps, objective=objective,
          digest=digest if name == CONTROL.point else "d")))


@pytest.fixture(name="points")
def _points(monkeypatch):
  monkeypatch.chdir(REPO)
  return points_lib.collect("experiments/t5_objectives.py", runlocal=True)


def _rows(section):
  return {line.split(" | ")[0][2:]: line.split(" | ") for line in section.splitlines()
          if line.startswith("| ") and not line.startswith("| point")
          and not line.startswith("| comparison")}


def test_the_section_says_denoising_still_loses_at_equal_tokens(tmp_path, points):
  _study(tmp_path, {"prefix_lm": 0.9, "replace_spans": 0.6, CONTROL.point: 0.6})
  section = "\n".join(yardstick.equal_tokens_section(yardstick.read(str(tmp_path), points)))
  assert section.startswith("## Equal predicted tokens")
  rows = _rows(section)
  assert rows["prefix_lm"][1:4] == ["reference", "60", "6,000"]
  assert rows["replace_spans"][1:4] == ["equal steps", "60", "1,800"]
  assert rows[CONTROL.point][1:4] == ["equal predicted tokens", "200", "6,000"]
  assert 30 < float(rows["prefix_lm"][4]) < 50 and 0 < float(rows["replace_spans"][4]) < 20
  steps = rows["replace_spans - prefix_lm (equal steps)"]
  tokens = rows[f"{CONTROL.point} - prefix_lm (equal predicted tokens)"]
  extra = rows[f"{CONTROL.point} - replace_spans (what the extra steps add)"]
  assert steps[1] == tokens[1] == "1 / 1" and -40 < float(tokens[2]) < -20
  assert steps[4] == tokens[4] == contrasts.REVERSED + " |"
  assert extra[4] == nlu_controls.FLAT + " |"
  assert "one seed per point: the interval covers the sampling of items only" in section
  assert f"At equal predicted tokens {CONTROL.point} still scores below prefix_lm" in section
  assert "Not equal" not in section


def test_the_section_says_sample_efficiency_when_the_gap_closes(tmp_path, points):
  _study(tmp_path, {"prefix_lm": 0.9, "replace_spans": 0.6, CONTROL.point: 0.9})
  section = "\n".join(yardstick.equal_tokens_section(yardstick.read(str(tmp_path), points)))
  rows = _rows(section)
  assert rows[f"{CONTROL.point} - prefix_lm (equal predicted tokens)"][4] == (
      contrasts.UNRESOLVED + " |")
  assert rows[f"{CONTROL.point} - replace_spans (what the extra steps add)"][4] == (
      nlu_controls.RISES + " |")
  assert ("replace_spans trails prefix_lm at equal steps but not at equal predicted tokens: "
          "the gap at equal steps is sample efficiency") in section


def test_the_section_flags_unequal_tokens_and_waits_for_results(tmp_path, points):
  _study(tmp_path, {"prefix_lm": 0.9, "replace_spans": 0.6, CONTROL.point: 0.6},
         control_steps=100)
  section = "\n".join(yardstick.equal_tokens_section(yardstick.read(str(tmp_path), points)))
  assert (f"**Not equal:** {CONTROL.point} predicted 3,000 target tokens by step 100, "
          "prefix_lm 6,000 (0.50x); 200 steps predict as many") in section
  _study(tmp_path, {"prefix_lm": 0.9, "replace_spans": 0.6, CONTROL.point: None})
  (tmp_path / CONTROL.point / "eval" / "nlu_step_100.json").unlink()
  section = "\n".join(yardstick.equal_tokens_section(yardstick.read(str(tmp_path), points)))
  assert f"Waits for the nlu results of: {CONTROL.point} (`python -m lm.evaluate" in section
  assert "| comparison" not in section
  (tmp_path / "prefix_lm" / "metrics.jsonl").unlink()
  section = "\n".join(yardstick.equal_tokens_section(yardstick.read(str(tmp_path), points)))
  assert (f"**Target tokens of prefix_lm not read:** no {tmp_path}/prefix_lm/metrics.jsonl: "
          "train that point first") in section
  # A control this root never ran (no workdir: a sweep with --only) gets no part at all.
  shutil.rmtree(tmp_path / CONTROL.point)
  assert yardstick.equal_tokens_section(yardstick.read(str(tmp_path), points)) == []


def test_the_section_refuses_other_items_and_is_absent_without_results(tmp_path, points):
  assert yardstick.equal_tokens_section(yardstick.read(str(tmp_path), points)) == []
  other = [p for p in points if p.name != CONTROL.point]
  _study(tmp_path, {"prefix_lm": 0.9, "replace_spans": 0.6, CONTROL.point: 0.6}, digest="x")
  assert yardstick.equal_tokens_section(yardstick.read(str(tmp_path), other)) == []
  section = "\n".join(yardstick.equal_tokens_section(yardstick.read(str(tmp_path), points)))
  assert "**Cannot be compared:** replace_spans_equal_tokens and prefix_lm: its records were " \
         "scored on different items" in section


def test_the_reading_covers_each_pair_of_verdicts():
  A, R, U = contrasts.AGREES, contrasts.REVERSED, contrasts.UNRESOLVED
  read = lambda steps, tokens: yardstick.equal_tokens_reading(steps, tokens, CONTROL)
  for steps in (A, R, U):
    assert "still scores below prefix_lm: the gap is not sample efficiency alone" in read(steps, R)
  assert "is sample efficiency" in read(R, U) and ", and ahead" not in read(R, U)
  assert ", and ahead at equal predicted tokens, as in the paper" in read(R, A)
  assert read(U, A) == read(A, A) == (f"At equal predicted tokens {CONTROL.point} is ahead of "
                                      "prefix_lm, as in the paper.")
  assert read(U, U).endswith(f"is {U} (at equal steps: {U}).")
  assert read(A, U).endswith(f"(at equal steps: {A}).")


def _bert_study(root):
  """prefix LM 100 target tokens a step, BERT 150, both 60 steps; BERT's control 40 steps."""
  runs = {"prefix_lm": (100.0, 60, "prefix_lm", 0.6), "bert": (150.0, 60, "bert", 0.9),
          E.BERT.point: (150.0, 40, "bert", 0.6)}
  for name, (rate, steps, objective, accuracy) in runs.items():
    _write_run(root, name, rate, steps)
    (root / name / "eval").mkdir(exist_ok=True)
    (root / name / "eval" / f"nlu_step_{steps}.json").write_text(json.dumps(_record(
        accuracy, step=steps, objective=objective)))


def test_a_control_that_stops_earlier_is_read_the_other_way(tmp_path, points):
  """BERT-style predicts more target tokens a step than prefix LM: its control stops earlier,
  the extra steps are the equal-steps point's, and its lead at equal steps is read as the
  extra tokens. The other controls, whose points have no results, are left out."""
  bert = E.BERT
  _bert_study(tmp_path)
  section = "\n".join(yardstick.equal_tokens_section(yardstick.read(str(tmp_path), points)))
  assert section.count("### ") == 1 and f"### {bert.point}: bert trained to as many" in section
  assert "| denoising point |" not in section       # one control: no summary table
  rows = _rows(section)
  assert rows["bert"][1:4] == ["equal steps", "60", "9,000"]
  assert rows[bert.point][1:4] == ["equal predicted tokens", "40", "6,000"]
  assert rows["bert - prefix_lm (equal steps)"][4] == contrasts.AGREES + " |"
  assert rows[f"{bert.point} - prefix_lm (equal predicted tokens)"][4] == (
      contrasts.UNRESOLVED + " |")
  assert rows[f"bert - {bert.point} (what the extra steps add)"][4] == nlu_controls.RISES + " |"
  assert ("bert is ahead of prefix_lm at equal steps but not at equal predicted tokens: its "
          "lead at equal steps is the extra target tokens") in section


def test_two_controls_get_a_summary_table(tmp_path, points):
  _study(tmp_path, {"prefix_lm": 0.6, "replace_spans": 0.6, CONTROL.point: 0.6})
  _bert_study(tmp_path)
  section = "\n".join(yardstick.equal_tokens_section(yardstick.read(str(tmp_path), points)))
  assert section.count("### ") == 2
  head = section.index("| denoising point |")
  assert head < section.index("### ")
  table = section[head:section.index("\n\n", head)].splitlines()[2:]
  same = f"+0.00 [+0.00, +0.00] {contrasts.UNRESOLVED}"   # equal items: a difference of 0
  assert [row.split(" | ")[:2] for row in table] == [["| replace_spans", "60 / 200"],
                                                     ["| bert", "60 / 40"]]
  assert table[0].split(" | ")[2:] == [same, same + " |"]
  assert table[1].split(" | ")[2].endswith(contrasts.AGREES)
  assert table[1].split(" | ")[3] == same + " |"


def test_the_reading_of_a_control_that_stops_earlier():
  A, R, U = contrasts.AGREES, contrasts.REVERSED, contrasts.UNRESOLVED
  read = lambda steps, tokens: yardstick.equal_tokens_reading(steps, tokens, E.MASS, True)
  for steps in (A, R, U):
    assert "still scores below prefix_lm: the gap is not sample efficiency alone" in read(steps, R)
  assert read(R, U).startswith("mass trails prefix_lm at equal steps, where it has predicted "
                               "more target tokens, but not at equal predicted tokens")
  assert "its later steps lower what the yardstick reads" in read(R, U)
  assert ", and ahead at equal predicted tokens, as in the paper" in read(R, A)
  assert read(A, U).endswith(f"supervised on a step (at equal predicted tokens: {U}).")
  assert read(A, A) == read(U, A) == ("At equal predicted tokens mass_equal_tokens is ahead of "
                                      "prefix_lm, as in the paper.")
  assert read(U, U).endswith(f"is {U} (at equal steps: {U}).")
  assert "sample efficiency (denoising is supervised on fewer" not in read(R, U)


def test_the_report_has_the_section(tmp_path, points):
  from launch import report  # pylint: disable=g-import-not-at-top
  _study(tmp_path, {"prefix_lm": 0.9, "replace_spans": 0.6, CONTROL.point: 0.6})
  text = report.write_report(str(tmp_path), points, experiment="experiments/t5_objectives.py")
  assert text.index("## Controls") < text.index("## Equal predicted tokens") < text.index(
      "## Points")
