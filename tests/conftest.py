"""Test setup: 8 simulated CPU devices and a shared compilation cache, set before anything
imports jax."""
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
# XLA's compilations are cached on disk and shared by the xdist workers and the processes
# the tests start: many tests build the same tiny models, and each program then compiles
# once (the fast suite runs ~1/3 faster). The key is the program with jax's and XLA's
# versions, flags and devices, so a hit is the executable a compile would give. Under lm's
# cache folder ($LM_CACHE_DIR, else ~/.cache/lm; CI's is fresh), at most 2 GiB (least
# recently used first out); JAX_COMPILATION_CACHE_DIR= (empty) turns it off.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(
    os.environ.get("LM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "lm"),
    "jax-tests"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(2 << 30))
