"""Checkpoints: lm's own run checkpoints and the Hugging Face T5-family formats.

  manager.py    `CheckpointManager` (orbax step directories: train state, data-iterator
                state, meta; verified restore with fallback).
  loading.py    the read-only helpers `read_meta`, `restore_params`, `checkpoint_steps`
                (every loader verifies what it reads, as a resume does).
  integrity.py  what both share: the errors, verified reads, `newest_intact`.
  signature.py  what identifies a checkpoint: `run_signature`, `param_shapes`,
                `state_checksums`.
  hf_t5.py      Hugging Face T5 `save_pretrained` directories <-> lm params
                (`from lm.checkpoint import hf_t5`; `python -m lm.checkpoint.hf_t5`).
  hf_t5gemma.py T5Gemma directories <-> lm params; hf_t5gemma2.py T5Gemma 2's text model
                -> lm params; hf.py which of the three a config.json holds.

The names below are the package's API (``from lm import checkpoint;
checkpoint.CheckpointManager(...)``).
"""
from lm.checkpoint.integrity import (CheckpointDamagedError, IncompatibleCheckpointError,
                                     newest_intact)
from lm.checkpoint.loading import (StepNotFoundError, checkpoint_steps, read_meta,
                                   restore_params, restore_params_and_step)
from lm.checkpoint.manager import CheckpointManager, CheckpointSaveError, check_writable
from lm.checkpoint.signature import (config_hash, param_shapes, run_signature, shape_mismatch,
                                     state_checksums, tokenizer_hash)

__all__ = ["CheckpointManager", "IncompatibleCheckpointError", "CheckpointDamagedError",
           "CheckpointSaveError", "StepNotFoundError", "check_writable", "checkpoint_steps",
           "newest_intact", "read_meta", "restore_params", "restore_params_and_step",
           "run_signature", "param_shapes", "shape_mismatch",
           "state_checksums", "config_hash", "tokenizer_hash"]
