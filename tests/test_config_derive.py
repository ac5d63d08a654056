"""lm.config.derive: the derived fields come from the config after its overrides.

The config files leave data.targets_length, data.extra_ids and model.vocab_size None; the
commands derive them once the `--config.*` overrides are applied, so a value set through
the config arg and the same value set through an override give the same run.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest
from absl import flags
from ml_collections import config_flags

from configs import t5
from launch import local
from lm import config as config_lib
from lm import plan, validate

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
  monkeypatch.chdir(REPO)  # config paths are relative to the repository


def _flags_config(argv):
  """The config lm.main gets from argv (ml_collections' file flag and its overrides)."""
  fv = flags.FlagValues()
  flag = config_flags.DEFINE_config_file("config", None, "", flag_values=fv,
                                         lock_config=True, sys_argv=argv)
  fv(argv)
  return flag.value


def _sections(config):
  return {"data": config.data.to_dict(), "model": config.model.to_dict()}


# (config arg, the same value as an override of the base arg, the derived value it moves)
SAME_RUN = [
    ("runlocal,noise=0.25", "runlocal", "data.objective_params.noise_density=0.25",
     ("targets_length", 26)),
    ("runlocal,span=1", "runlocal", "data.objective_params.mean_noise_span_length=1.0",
     ("targets_length", 19)),
    ("objective=iid_replace_spans,noise=0.5", "objective=iid_replace_spans",
     "data.objective_params.noise_density=0.5", ("extra_ids", 162)),
    ("runlocal,objective=prefix_lm,inputs_length=128", "runlocal,objective=prefix_lm",
     "data.inputs_length=128", ("targets_length", 127)),
    ("runlocal,objective=ul2,inputs_length=128", "runlocal,objective=ul2",
     "data.inputs_length=128", ("targets_length", 127)),
    ("objective=iid_replace_spans,noise=0.25,lengths=gin",
     "objective=iid_replace_spans,lengths=gin", "data.objective_params.noise_density=0.25",
     ("targets_length", 256)),
]


@pytest.mark.parametrize("arg,base,override,moved", SAME_RUN)
def test_config_arg_and_override_give_the_same_run(arg, base, override, moved):
  by_arg = config_lib.derive(_flags_config(["lm.main", f"--config=configs/t5.py:{arg}"]))
  by_override = config_lib.derive(_flags_config(
      ["lm.main", f"--config=configs/t5.py:{base}", f"--config.{override}"]))
  assert _sections(by_override) == _sections(by_arg)
  # The override moved a derived field away from the base config's value.
  field, want = moved
  unchanged = config_lib.derive(t5.get_config(base))
  assert by_override.data[field] != unchanged.data[field]
  assert by_override.data[field] == want
  validate.validate(by_override)


def test_experiment_point_override_is_derived():
  """launch.local.build_config (every sweep point) derives after the point's overrides."""
  point = local.Point(name="nd", config="configs/t5.py:runlocal",
                      overrides={"data.objective_params.noise_density": 0.25}, reference={})
  assert (_sections(local.build_config(point))
          == _sections(config_lib.derive(t5.get_config("runlocal,noise=0.25"))))


def test_t5_base_derived_values_are_t5s():
  """T5.1.1 base, span corruption 512/0.15/3: 114 target tokens, 100 sentinels, 32128 rows."""
  raw = t5.get_config()
  assert (raw.data.targets_length, raw.data.extra_ids, raw.model.vocab_size) == (None,) * 3
  d = config_lib.derive(raw)
  assert (d.data.targets_length, d.data.extra_ids, d.model.vocab_size) == (114, 100, 32128)
  assert d.is_locked and raw.data.targets_length is None  # a locked copy; raw untouched
  # i.i.d. at 15 % needs more than T5's 100 sentinels; the padded vocabulary is unchanged.
  iid = config_lib.derive(t5.get_config("objective=iid_replace_spans"))
  assert (iid.data.targets_length, iid.data.extra_ids, iid.model.vocab_size) == (188, 105, 32128)
  # At 50 % it needs 162, and the vocabulary grows by one row of 128 (32000 + 162 -> 32256).
  iid = config_lib.derive(t5.get_config("objective=iid_replace_spans,noise=0.5"))
  assert (iid.data.targets_length, iid.data.extra_ids, iid.model.vocab_size) == (422, 162, 32256)


def test_explicit_values_are_kept_and_still_checked():
  argv = ["lm.main", "--config=configs/t5.py:runlocal", "--config.data.targets_length=40",
          "--config.data.extra_ids=120", "--config.model.vocab_size=2048"]
  d = config_lib.derive(_flags_config(argv))
  assert (d.data.targets_length, d.data.extra_ids, d.model.vocab_size) == (40, 120, 2048)
  with pytest.raises(ValueError, match="vocab_size=2048 does not match"):
    validate.validate(d)
  # An explicit extra_ids sets the derived vocabulary (1000 pieces + 120 -> 1152 rows).
  d = config_lib.derive(_flags_config(argv[:-1]))
  assert d.model.vocab_size == 1152
  validate.validate(d)
  # An explicit targets length shorter than the objective needs is refused, as before.
  short = config_lib.derive(_flags_config(
      ["lm.main", "--config=configs/t5.py:runlocal",
       "--config.data.objective_params.noise_density=0.25", "--config.data.targets_length=14"]))
  assert short.data.targets_length == 14
  with pytest.raises(ValueError, match="needs targets_length >= 26"):
    validate.validate(short)


def test_underived_config_is_refused_with_the_fix():
  raw = t5.get_config("runlocal")
  for check in (validate.validate, config_lib.model_config, config_lib.data_spec):
    with pytest.raises(ValueError, match=r"config.data.targets_length, config.data.extra_ids, "
                                         r"config.model.vocab_size not derived: call "
                                         r"lm.config.derive"):
      check(raw)


def test_derive_errors_name_the_objective():
  with pytest.raises(ValueError, match=r"config.data: cannot derive .*'iid_replace_spans'.*"
                                       r"no gin for objective 'iid_replace_spans' at noise 0.3"):
    config_lib.derive(_flags_config(
        ["lm.main", "--config=configs/t5.py:objective=iid_replace_spans,lengths=gin",
         "--config.data.objective_params.noise_density=0.3"]))


def test_a_run_config_json_loads_and_derives_unchanged(tmp_path):
  """config.json holds the derived values; loading and deriving it changes nothing."""
  config = config_lib.derive(t5.get_config("runlocal,objective=iid_replace_spans"))
  path = tmp_path / config_lib.CONFIG_FILE
  path.write_text(config.to_json_best_effort())
  loaded = config_lib.load_config_json(str(path))
  assert loaded.data.targets_length == config.data.targets_length
  assert config_lib.derive(loaded).to_dict() == loaded.to_dict()
  # An old run's config.json (before the architecture had one owner) too.
  raw = json.loads(config.to_json_best_effort())
  model = dict(raw["model"])
  arch = model.pop("architecture")
  raw["model"] = {**{k: v for k, v in model.items() if k not in ("family", "size", "num_layers")},
                  "preset": "tiny", "mask_type": arch, "shared_encoder_decoder": False,
                  "num_encoder_layers": model["num_layers"],
                  "num_decoder_layers": model["num_layers"]}
  path.write_text(json.dumps(raw))
  old = config_lib.load_config_json(str(path))
  assert config_lib.derive(old).to_dict() == old.to_dict()
  assert config_lib.data_spec(old) == config_lib.data_spec(config)


def test_plan_derives_after_the_overrides(monkeypatch):
  seen = []

  def fake_plan(config, target, **kwargs):
    seen.append(config)
    raise plan.PlanError("stop here")

  monkeypatch.setattr(plan, "plan", fake_plan)
  status = plan.main(["lm.plan", "--config=configs/t5.py:runlocal", "--topology=cpu-8",
                      "--config.data.objective_params.noise_density=0.25"])
  assert status == 2 and seen[0].data.targets_length == 26


_MAIN_DRIVER = """
import json, sys
from lm import main, train
def record(settings, workdir, parts=None):
  with open(workdir, "w") as f:
    json.dump({"data": settings.record["data"], "model": settings.record["model"]}, f)
train.train_and_evaluate = record
sys.argv = ["lm.main", "--workdir=" + sys.argv[1], *sys.argv[2:]]
main.run()
"""


def test_lm_main_trains_the_derived_config(tmp_path):
  """lm.main hands lm.train (which writes it as config.json) the derived config: the
  override command of issue 29 trains what the config-arg command trains."""
  out = tmp_path / "sections.json"
  proc = subprocess.run([sys.executable, "-c", _MAIN_DRIVER, str(out),
                         "--config=configs/t5.py:runlocal",
                         "--config.data.objective_params.noise_density=0.25"], cwd=REPO,
                        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  got = json.loads(out.read_text())
  by_arg = _sections(config_lib.derive(t5.get_config("runlocal,noise=0.25")))
  assert got == json.loads(json.dumps(by_arg))
  assert (got["data"]["targets_length"], got["data"]["extra_ids"],
          got["model"]["vocab_size"]) == (26, 100, 1152)
