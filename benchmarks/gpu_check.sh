#!/usr/bin/env bash
# The GPU check: lm's training step and input pipeline on one GPU, in one short run.
#
#   OUT=/tmp/gpu_check bash benchmarks/gpu_check.sh        # from the repository root
#
# 0. A probe that times each phase of T5.1.1-small's first steps (stops the check if it fails).
# 1. bench_train.py: the real train step of T5.1.1 small, then base (batch 128, 512/114,
#    bfloat16 activations) beside Hugging Face T5 on the same GPU (its own process,
#    bfloat16 autocast, transformers' Adafactor), alternating rounds (benchmarks/fair.py).
# 2. lm.main: T5.1.1-small trained with the real input pipeline (embedded corpus, span
#    corruption, an 8000-piece tokenizer: the embedded corpus holds too little text for
#    T5's 32000) for 300 steps: tokens/s, MFU and data_wait_fraction (the share of each log
#    window the loop waited for batches) in $OUT/metrics.jsonl.
# 3. bench_data.py on the GPU host's CPUs: what one core of that host feeds.
#
# Each stage has its own time limit and log in $OUT; after the probe a failed stage does not
# stop the next. The limits add up to about 15 minutes: run benchmarks/gpu_speed.sh (lm
# alone, 8 minutes) first and this one when there is time left.
# Needs jax with CUDA, flax, optax, orbax-checkpoint, grain, ml_collections, sentencepiece
# (and torch + transformers for the comparison); XLA_PYTHON_CLIENT_PREALLOCATE=false lets
# the HF worker share the GPU with the lm process.
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 LM_CACHE_DIR=${LM_CACHE_DIR:-/tmp/lm_cache}
PY=${PYTHON:-python3}

stage() {  # stage NAME SECONDS COMMAND...: runs COMMAND under a time limit, logs to $OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  echo "=== $name (limit ${limit}s): $*"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - t0)) s"
  grep -v -E "^(E0000|W0000|WARNING: Logging before)" "$OUT/$name.log" | tail -n 25
  return $rc
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"

# First a probe that names the phase a stall sits in (build_run, init_state, lower, compile,
# each step) for T5.1.1-small at the bench's batch and lengths. The first run of this script
# (an H200, jax 0.11.2) stalled for 300 s in bench_train's first build/compile and in
# lm.main before its first step; both processes had lm.hostmem's CPU malloc policy applied
# (one malloc arena for every thread), which lm.hostmem.retain_for_cpu now skips on a GPU
# host. If the probe fails, a second one with XLA's GPU autotuning off says whether that is
# what takes the time, and the benchmarks are skipped.
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/jax_cache}  # probe -> bench
probe() {  # probe NAME LIMIT SIZE [ENV...]
  local name=$1 limit=$2 size=$3
  shift 3
  stage "$name" "$limit" env JAX_LOG_COMPILES=1 PROBE_SIZE=$size "$@" $PY - <<'PROBE'
import os, sys, time
t = time.perf_counter()
def mark(what):
  print(f"{time.perf_counter() - t:7.1f} s  {what}", flush=True)
import jax, jax.numpy as jnp
mark(f"import jax: {jax.devices()}")
x = jnp.ones((4096, 4096), jnp.bfloat16); mark("device array")
jax.jit(lambda a: a @ a)(x).block_until_ready(); mark("jitted matmul")
sys.path.insert(0, "benchmarks")
from bench_train import random_batch
from configs import t5
from lm import config as config_lib
from lm import partitioning, program, validate
mark("import lm")
size = os.environ["PROBE_SIZE"]
config = config_lib.derive(t5.get_config(f"size={size},batch=128,inputs_length=512"))
run = program.build_run(validate.validate(config)); mark(f"{size}: build_run")
d = run.data_spec
local = random_batch(d.architecture, d.inputs_length, d.targets_length, d.batch_size,
                     run.model_config.vocab_size)
with run.axis_rules():
  state = run.init_state(); jax.block_until_ready(state); mark("init_state")
  batch = partitioning.make_global_batch(local, run.mesh)
  lowered = run.train_step.lower(state, batch); mark("lower")
  compiled = lowered.compile(); mark("compile")
  for i in range(5):
    state, m = compiled(state, batch); jax.block_until_ready(state); mark(f"step {i}")
PROBE
}

if ! probe probe_small 150 small; then
  probe probe_tiny_noautotune 90 tiny XLA_FLAGS=--xla_gpu_autotune_level=0
  exit 1
fi

stage bench_train 210 $PY benchmarks/bench_train.py --archs encoder_decoder --sizes small \
  --batch 128 --inputs_length 512 --steps 10 --warmup 3 --rounds 3 --compare_hf \
  --json "$OUT/bench_train_gpu.json"

# T5.1.1-base beside HF T5, same settings (both models' batch-128 activations on one card:
# an H200's 139 GiB; on an 80 GiB card HF or lm may run out of memory).
stage bench_train_base 240 $PY benchmarks/bench_train.py --archs encoder_decoder --sizes base \
  --batch 128 --inputs_length 512 --steps 10 --warmup 3 --rounds 3 --compare_hf \
  --json "$OUT/bench_train_base_gpu.json"

rm -rf /tmp/lm_gpu_run
stage train_small 200 $PY -m lm.main --config=configs/t5.py:size=small,batch=128,steps=300 \
  --workdir=/tmp/lm_gpu_run --config.wandb.mode=disabled --config.train.log_every=50 \
  --config.train.eval_every=0 --config.ckpt.every_steps=100000 \
  --config.data.default_vocab_size=8000 --config.model.vocab_size=8192
cp /tmp/lm_gpu_run/metrics.jsonl "$OUT/metrics.jsonl" 2>/dev/null

stage bench_data 50 $PY benchmarks/bench_data.py --seconds 1 --objectives span_corruption \
  --json "$OUT/bench_data_gpu_host.json"
