"""Test setup: 8 simulated CPU devices, set before anything imports jax."""
import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The planner's TPU tests load libtpu for topology descriptions only (no TPU here); libtpu
# otherwise lets one process at a time load it (/tmp/libtpu_lockfile), and pytest-xdist's
# two workers each run some of them.
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
