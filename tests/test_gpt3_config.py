"""configs/gpt3.py: the GPT-3 family's shapes and hyperparameters, validated before compiling."""
import pytest

from configs import gpt3
from lm import config as config_lib
from lm.model import accounting
from lm.validate import validate

# GPT-3 Table 2.1 parameter counts (the paper's names), our shapes within 3 %.
PAPER_PARAMS = {"125m": 125e6, "350m": 350e6, "760m": 760e6, "1_3b": 1.3e9, "2_7b": 2.7e9,
                "6_7b": 6.7e9, "13b": 13e9, "175b": 175e9}


@pytest.mark.parametrize("size", sorted(PAPER_PARAMS))
def test_sizes_validate_and_match_the_paper(size):
  config = config_lib.derive(gpt3.get_config(f"size={size}"))
  validate(config)
  model = config_lib.model_config(config)
  assert model.mask_type == "causal" and model.max_length == 2048
  assert (config.model.family, config.model.size, config.model.architecture) == (
      "gpt3", size, "causal")
  n = accounting.count_params(model)
  assert abs(n / PAPER_PARAMS[size] - 1) < 0.03, (size, n)
  lr, batch_seqs = gpt3.GPT3_HPARAMS[size]
  assert config.schedule.base_lr == lr and config.optim.name == "adamw"
  assert config.data.batch_size == batch_seqs
  assert abs(config.train.num_steps * batch_seqs * 2048 / 300e9 - 1) < 1e-3  # 300B tokens
  assert config.data.inputs_length + config.data.targets_length == 2048


def test_runlocal_and_bad_args():
  config = config_lib.derive(gpt3.get_config("runlocal"))
  validate(config)
  assert config.data.objective == "full_lm" and config.model.architecture == "causal"
  with pytest.raises(ValueError, match="unknown size"):
    config_lib.derive(gpt3.get_config("size=7b"))
  with pytest.raises(ValueError, match="unknown config arg"):
    config_lib.derive(gpt3.get_config("sise=125m"))
