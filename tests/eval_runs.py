"""Tiny trained runs shared by the restore and evaluate tests (trained once per session)."""
import atexit
import functools
import itertools
import os
import shutil
import tempfile

from configs import t5
from lm import config as config_lib
from lm.validate import validate

_ROOT = None


def tiny_config(arch="encoder_decoder", steps=4, **overrides):
  """configs/t5.py:runlocal cut down to a few steps: checkpoints at 2 and 4, eval at 4."""
  config = config_lib.derive(t5.get_config(f"runlocal,arch={arch}"))
  config.train.num_steps = steps
  config.train.log_every = 2
  config.train.eval_every = 4
  config.train.eval_steps = 1
  config.ckpt.every_steps = 2
  config.ckpt.async_save = False
  config.wandb.mode = "disabled"
  for key, value in overrides.items():
    node = config
    *parents, leaf = key.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = value
  return config


@functools.cache
def trained_run(arch="encoder_decoder") -> str:
  """The workdir of a 4-step runlocal run of `arch` (read-only: copy it to modify it)."""
  global _ROOT
  from lm import train  # pylint: disable=g-import-not-at-top
  if _ROOT is None:
    _ROOT = tempfile.mkdtemp(prefix="lm_eval_runs_")
    atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)
  workdir = os.path.join(_ROOT, arch)
  train.train_and_evaluate(validate(tiny_config(arch)), workdir)
  return workdir


def copy_run(src: str, dst: str) -> str:
  shutil.copytree(src, dst)
  return dst


SPM_TEXT = [" ".join("".join(w) for w in itertools.product("abcdef", repeat=3))] * 3


def fake_run(workdir: str, arch: str = "encoder_decoder", saved_steps=(2, 4)) -> str:
  """A run directory as lm.train leaves it (config.json, checkpoints) without training.

  A 28-piece tokenizer + 100 sentinels (vocab 128) in data.tokenizer; the params of step s
  are the initial params + 0.01 s, so every step differs. Takes seconds, not a minute.
  """
  import dataclasses  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from lm import checkpoint, optim, program, steps, train  # pylint: disable=g-import-not-at-top
  from lm import config as config_lib  # pylint: disable=g-import-not-at-top
  from lm.data import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  from lm.model.transformer import Transformer  # pylint: disable=g-import-not-at-top
  os.makedirs(workdir)
  spm = os.path.join(workdir, "spm.model")
  tokenizer_lib.train_tokenizer(SPM_TEXT, vocab_size=28, extra_ids=100, output=spm)
  config = tiny_config(arch, **{"data.tokenizer": spm, "model.vocab_size": 128})
  model = Transformer(config_lib.model_config(config))
  tx = optim.make_optimizer(config_lib.optim_config(config),
                            optim.make_schedule(config_lib.schedule_config(config)))
  d = config_lib.data_spec(config)
  batch = program.dummy_batch(d.architecture, d.inputs_length, d.targets_length)
  rng = jax.random.key(0)
  abstract, _ = steps.abstract_train_state(rng, batch, model=model, tx=tx)
  state = jax.jit(lambda r, b: steps.create_train_state(r, b, model=model, tx=tx))(rng, batch)
  ckpt = checkpoint.CheckpointManager(
      os.path.join(workdir, "checkpoints"), every_steps=1, async_save=False,
      signature=checkpoint.run_signature(dataclasses.asdict(model.config), abstract))
  for s in saved_steps:
    params = jax.tree.map(lambda x, s=s: x + 0.01 * s, state.params)
    ckpt.save(s, state.replace(step=state.step + s, params=params), data_state={}, force=True)
  ckpt.close()
  train.write_config(config.to_dict(), workdir)
  return workdir
