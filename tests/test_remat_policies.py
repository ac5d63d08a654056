"""lm.plan's memory per remat policy (`--remat_policies`): lm's accounting for a target
without a compiler, and XLA's temporaries changing with the policy on the CPU."""
import json

import pytest

from configs import t5
from lm import config as config_lib
from lm import plan


def test_remat_policies_flag_reports_each_policy_in_the_table_and_json(tmp_path, capsys):
  """An analytic target (no compile): the activations shrink none > minimal > full."""
  out = str(tmp_path / "plan.json")
  status = plan.main(["lm.plan", "--config=configs/t5.py:size=tiny,batch=128",
                      "--topology=h100-1", "--remat_policies=none,minimal,full",
                      f"--json={out}"])
  text = capsys.readouterr().out
  assert status in (0, 1) and "memory per device by remat policy" in text
  with open(out, encoding="utf-8") as f:
    rows = json.load(f)["remat_policies"]
  assert [r["remat_policy"] for r in rows] == ["none", "minimal", "full"]
  acts = [r["activations"] for r in rows]
  assert acts[0] > acts[1] > acts[2] > 0
  assert all(r["xla_temp"] is None for r in rows)  # nothing compiled for an h100 here


@pytest.mark.slow
def test_named_policy_lowers_xla_temporaries_on_the_cpu():
  """The tiny model, scanned, 4 layers a stack, 256 input tokens, compiled for one CPU
  device: "minimal" (projections and attention output kept, the softmax recomputed) needs
  less of XLA's temporary memory than "none"; lm's accounting orders them the same way."""
  config = config_lib.derive(t5.get_config("size=tiny,batch=4,inputs_length=256"))
  config.model.scan_layers = True
  config.model.num_layers = 4
  config.data.num_shards = 1
  rows = plan.remat_policy_memory(config, plan.resolve_target("cpu-1"), ["none", "minimal"])
  none, minimal = rows
  assert minimal["xla_temp"] < 0.9 * none["xla_temp"], rows
  assert minimal["activations"] < none["activations"]
  assert "minimal" in plan.format_remat_policies(rows)
