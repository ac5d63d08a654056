"""Test setup: 8 simulated CPU devices and a compilation cache, set before anything imports jax."""
import atexit
import os
import shutil
import tempfile

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

# JAX's persistent compilation cache, one per test session, shared by the pytest-xdist
# workers and by the subprocesses tests start (they inherit this environment): many tests
# train the same tiny config, and XLA then compiles its train and eval steps once per
# session instead of once per run (tests/test_train.py: 262-280 s -> 140-144 s on the 2-core
# machine). A hit is the same executable: the key is the compiled program with the XLA
# flags and the jax version. Compiles under a second (JAX's default threshold) are not
# stored. The process that makes the directory removes it at exit.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _cache = tempfile.mkdtemp(prefix="lm-tests-jax-cache-")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
  atexit.register(shutil.rmtree, _cache, ignore_errors=True)
