"""Every model, optimizer, schedule and data spec that a config file or an experiment builds
is the one it built before presets became size tables and the architecture one config field.

tests/testdata/config_golden.json was written by the code before that change: the resolved
TransformerConfig of every old preset name, and for every configs/t5.py / configs/gpt3.py
argument that tests and experiments use (and the arch x family x size grid) the model, the
config.optim / config.schedule sections and the data spec's architecture and fingerprint
(so the data iterator states of old runs still restore).
"""
import dataclasses
import json
import pathlib

import pytest

from configs import gpt3, t5
from launch import local
from lm import config as config_lib
from lm import optim
from lm.model import presets
from lm.model.transformer_config import ADDED_FIELDS

REPO = pathlib.Path(__file__).resolve().parents[1]
GOLDEN = json.loads((REPO / "tests/testdata/config_golden.json").read_text())
# Fields added after the golden was written, at their defaults: those that choose how, not
# what, the model computes (lm.model.transformer_config.EXECUTION_FIELDS), and architecture knobs whose
# default is T5's behaviour (lm.model.transformer_config.ADDED_FIELDS).
ADDED = {"attention_impl": "auto", **ADDED_FIELDS}
DEFAULTS = {**GOLDEN["transformer_config_defaults"], **ADDED}

# The old preset names as size-table rows + architecture (+ overrides).
OLD_PRESETS = {
    **{f"t5_1_1_{s}": ("t5_1_1", s, "encoder_decoder", {}) for s in presets.sizes("t5_1_1")},
    **{f"t5_1_0_{s}": ("t5_1_0", s, "encoder_decoder", {}) for s in presets.sizes("t5_1_0")},
    **{f"gpt3_{s}": ("gpt3", s, "causal", {}) for s in presets.sizes("gpt3")},
    "t5_1_0_base_shared": ("t5_1_0", "base", "shared", {}),
    "t5_1_0_base_6layers": ("t5_1_0", "base", "encoder_decoder", {"num_layers": 6}),
    "t5_1_0_lm_base": ("t5_1_0", "base", "causal", {}),
    "t5_1_0_prefix_lm_base": ("t5_1_0", "base", "prefix_lm", {}),
    **{f"decoder_only_{s}": ("t5_1_1", s, "prefix_lm", {}) for s in ("small", "base", "large")},
    **{f"causal_lm_{s}": ("t5_1_1", s, "causal", {}) for s in ("small", "base", "large")},
    "tiny": ("cpu", "tiny", "encoder_decoder", {}),
    "tiny_prefix_lm": ("cpu", "tiny", "prefix_lm", {}),
    "tiny_causal": ("cpu", "tiny", "causal", {}),
    "small_cpu": ("cpu", "small_cpu", "encoder_decoder", {}),
}


def _full(fields):
  return {**DEFAULTS, **fields}


def test_every_old_preset_is_a_size_and_an_architecture():
  assert sorted(OLD_PRESETS) == sorted(GOLDEN["presets"])
  for name, (family, size, arch, overrides) in OLD_PRESETS.items():
    got = dataclasses.asdict(presets.make_config(family, size, arch, **overrides))
    assert got == _full(GOLDEN["presets"][name]), name


def _build(key):
  source, _, rest = key.partition(":")
  if source == "configs/t5.py":
    return config_lib.derive(t5.get_config(rest or None))
  if source == "configs/gpt3.py":
    return config_lib.derive(gpt3.get_config(rest or None))
  name, _, runlocal = rest.partition(":")
  (point,) = [p for p in local.collect(source, runlocal=runlocal == "runlocal")
              if p.name == name]
  return local.build_config(point)


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
  monkeypatch.chdir(REPO)  # the experiments' config paths are relative to the repository


@pytest.mark.parametrize("key", sorted(GOLDEN["configs"]))
def test_configs_resolve_as_before(key):
  want = GOLDEN["configs"][key]
  config = _build(key)
  assert dataclasses.asdict(config_lib.model_config(config)) == _full(want["model"])
  # The sections hold the same values, and so do the typed settings built from them.
  assert config.optim.to_dict() == want["optim"]
  assert config.schedule.to_dict() == want["schedule"]
  assert dataclasses.asdict(config_lib.optim_config(config)) == want["optim"]
  assert dataclasses.asdict(config_lib.schedule_config(config)) == want["schedule"]
  spec = config_lib.data_spec(config)
  assert spec.architecture == want["data_architecture"]
  assert spec.fingerprint() == want["data_fingerprint"]


def test_adamw_b2_has_one_default():
  """The AdamW default (b2 0.95) lives in lm.optim.AdamWConfig only; configs start from it."""
  assert optim.AdamWConfig().b2 == 0.95
  assert config_lib.derive(t5.get_config()).optim.adamw.b2 == 0.95
  built = config_lib.from_mapping(optim.OptimConfig, {"name": "adamw"}, "config.optim")
  assert built.adamw == optim.AdamWConfig()


def test_per_example_path_keeps_the_fingerprint_from_before_batched_objectives():
  """With data.batched_objectives=False the data fingerprint is the one recorded before the
  field existed (this golden value), so runs saved then resume with that override."""
  config = config_lib.derive(t5.get_config("runlocal"))
  config.data.batched_objectives = False
  assert config_lib.data_spec(config).fingerprint() == "10289e9913c0697d"
  config.data.batched_objectives = True
  assert config_lib.data_spec(config).fingerprint() != "10289e9913c0697d"
