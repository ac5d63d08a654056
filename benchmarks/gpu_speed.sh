#!/usr/bin/env bash
# The GPU speed run: lm alone on one GPU, at most 8 minutes, results as JSON under $OUT.
#
#   OUT=/tmp/gpu_speed bash benchmarks/gpu_speed.sh        # from the repository root
#
# Stages, most valuable first (each its own process, time limit and log $OUT/NAME.log, each
# writing $OUT/NAME.json), so a time-out still leaves the ones before it:
#   numerics     T5.1.1-small, batch 8: loss and gradients with model.attention_impl=xla vs
#                $FUSED (default cudnn): loss, gradient norm, every gradient, and each
#                relative-bias table's gradient non-zero and close. Disagreement stops the run.
#   base_xla, base_fused     T5.1.1-base, batch 128, 512/114: ms/step, MFU, peak memory
#                (base_xla also times the initial state made on the host, --host_init)
#   gpt3_xla, gpt3_fused     the GPT-3 1.3B decoder at 2048 tokens, batch $GPT3_BATCH (2)
#   small        T5.1.1-small, batch 128, the fused path (the 45 ms target)
#   large        T5.1.1-large, batch 128, the fused path, optim.grad_accum_steps=$LARGE_ACCUM
#                (4: batch 128 needs ~139 GiB of activations without remat, lm.plan)
#   profile_base the top ops of base's step (benchmarks/profile_step.py)
#   summary      $OUT/summary.json: one row per speed stage
# All stages scan the layers (model.scan_layers=True: a third of the compile time) and run
# bfloat16 activations (the presets' dtype). MFU is lm's FLOP count (lm/model/accounting.py:
# every matmul, attention's two included over the full L x S scores, 3x forward) over the
# spec sheet's dense bf16 peak. Peak memory is memory_stats()["peak_bytes_in_use"].
# Environment: OUT, PYTHON, FUSED (cudnn), GPT3_BATCH (2), LARGE_ACCUM (4), BUDGET (480 s:
# a stage gets at most what is left of it), EXTRA_SET (more --set overrides for every stage,
# e.g. "optim.grad_accum_steps=2" if base at batch 128 does not fit an 80 GiB card).
set -u
OUT=${OUT:-/tmp/gpu_speed}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 LM_CACHE_DIR=${LM_CACHE_DIR:-/tmp/lm_cache}
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.95}
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/jax_cache}
PY=${PYTHON:-python3}
FUSED=${FUSED:-cudnn}
GPT3_BATCH=${GPT3_BATCH:-2}
LARGE_ACCUM=${LARGE_ACCUM:-4}
BUDGET=${BUDGET:-480}
# data.pack=False: the random batches hold one example per row, and cuDNN serves only rows
# that sequence lengths describe (packed rows fall back to xla: docs/speed.md); both sides of
# every A/B get it. A fused stage whose program lacks the kernel says "fell back" in its JSON.
COMMON=(--set model.scan_layers=True --set data.pack=False)
for s in ${EXTRA_SET:-}; do COMMON+=(--set "$s"); done

stage() {  # stage NAME SECONDS COMMAND...: COMMAND under min(SECONDS, budget left), log $OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 20 ]; then
    echo "=== $name: skipped, ${left} s of the ${BUDGET} s budget left"
    return 124
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "=== $name (limit ${limit}s): $*"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - t0)) s"
  grep -v -E "^(E0000|W0000|WARNING: Logging before)" "$OUT/$name.log" | tail -n 8
  return $rc
}

speed() {  # speed NAME LIMIT CONFIG [--set ...]
  local name=$1 limit=$2 config=$3
  shift 3
  stage "$name" "$limit" $PY benchmarks/gpu_speed.py speed --config "$config" "${COMMON[@]}" \
    "$@" --json "$OUT/$name.json"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
$PY -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"

stage numerics 80 $PY benchmarks/gpu_speed.py numerics \
  --config t5:size=small,batch=8,inputs_length=512 "${COMMON[@]}" \
  --a model.attention_impl=xla --b model.attention_impl=$FUSED --json "$OUT/numerics.json"
rc=$?
if [ $rc -ne 0 ]; then
  echo "numerics: xla and $FUSED disagree or the stage failed (exit $rc): no speed stages."
  exit 1
fi

T5_BASE=t5:size=base,batch=128,inputs_length=512
GPT3=gpt3:size=1_3b
speed base_xla 70 $T5_BASE --set model.attention_impl=xla --host_init
speed base_fused 55 $T5_BASE --set model.attention_impl=$FUSED
speed gpt3_xla 70 $GPT3 --set data.batch_size=$GPT3_BATCH --set model.attention_impl=xla
speed gpt3_fused 60 $GPT3 --set data.batch_size=$GPT3_BATCH --set model.attention_impl=$FUSED
speed small 40 t5:size=small,batch=128,inputs_length=512 --set model.attention_impl=$FUSED
speed large 50 t5:size=large,batch=128,inputs_length=512 --set model.attention_impl=$FUSED \
  --set optim.grad_accum_steps=$LARGE_ACCUM
stage profile_base 50 env XLA_FLAGS=--xla_gpu_enable_command_buffer= $PY benchmarks/profile_step.py \
  --config size=base,batch=128,inputs_length=512 --set model.scan_layers=True --set data.pack=False \
  --set model.attention_impl=$FUSED --steps 3 --warmup 1 --top 25 --json "$OUT/profile_base.json"
$PY benchmarks/gpu_speed.py summary --dir "$OUT" --json "$OUT/summary.json"
