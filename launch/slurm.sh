#!/bin/bash
# Runs one lm.main training run as a SLURM job: one task (process) per GPU on every node.
#
# Usage (from the repository root, on a shared filesystem; arguments go to lm.main):
#   sbatch --nodes=2 launch/slurm.sh \
#       --config=configs/t5.py:family=t5_1_0,objective=iid_replace_spans \
#       --workdir=/shared/runs/table6/noise_15
#   sbatch --nodes=1 --gpus-per-node=4 --ntasks-per-node=4 launch/slurm.sh --config=... --workdir=...
# One point of an experiment: print its commands and submit each one's arguments:
#   python -m launch.local experiments/t5_corruption_rate.py --root=/shared/runs/table6 --dry_run
#   sbatch launch/slurm.sh <the arguments after "-m lm.main" of one line>
# Environment: LM_VENV (default .venv) is activated if it exists; extra sbatch options
# (--partition, --account, --time, ...) go on the sbatch command line.
#
# How the processes meet: srun starts SLURM_NTASKS copies of `python -m lm.main`; lm.main
# sees SLURM_NTASKS > 1 and SLURM_JOB_ID and calls jax.distributed.initialize(), which reads
# the coordinator (first node of SLURM_STEP_NODELIST), process count and id from SLURM and
# gives each process the GPU numbered SLURM_LOCALID. So every task must see all of its
# node's GPUs: request --gpus-per-node, not --gpus-per-task (that would hide the others).
# Resubmitting the same command resumes from the workdir's newest checkpoint. SIGTERM
# (sent by SLURM before the time limit, see --signal below, or on preemption) saves one
# and lm.main exits with 75 ("resume later", docs/robustness.md); this script then
# requeues the job (`scontrol requeue`, allowed by --requeue), which resumes it.
#
#SBATCH --job-name=lm
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --signal=TERM@300
#SBATCH --requeue
#SBATCH --output=slurm-%j.out

set -euo pipefail

if [[ $# -eq 0 ]]; then
  echo "usage: sbatch [sbatch options] launch/slurm.sh --config=configs/t5.py:<arg> --workdir=<dir> [--config.<field>=<value> ...]" >&2
  exit 2
fi

cd "${SLURM_SUBMIT_DIR:-.}"
venv="${LM_VENV:-.venv}"
if [[ -f "${venv}/bin/activate" ]]; then
  # shellcheck disable=SC1091
  source "${venv}/bin/activate"
fi

echo "job ${SLURM_JOB_ID:-?}: ${SLURM_NTASKS:-1} tasks on ${SLURM_JOB_NODELIST:-localhost}"
# --kill-on-bad-exit: one failed process ends the step instead of leaving the rest hanging
# in a collective. SIGTERM to this batch script is passed on to srun (and so to lm.main).
EXIT_PREEMPTED=75
# srun returns the highest exit status of its tasks, so 75 from one task can hide another
# task's crash: every task records its own status (in the submit directory, which all nodes
# share), and the job is requeued only if no task failed.
export LM_TASK_STATUS_DIR="${PWD}/.slurm_status/${SLURM_JOB_ID:-local}"
rm -rf "${LM_TASK_STATUS_DIR}"
mkdir -p "${LM_TASK_STATUS_DIR}"
# shellcheck disable=SC2016  # expanded by each task's shell, not here
srun --kill-on-bad-exit=1 bash -c 'python -m lm.main "$@"; s=$?; echo "${s}" > "${LM_TASK_STATUS_DIR}/${SLURM_PROCID:-0}"; exit "${s}"' lm-task "$@" &
srun_pid=$!
trap 'kill -TERM "${srun_pid}" 2>/dev/null || true' TERM
status=0
wait "${srun_pid}" || status=$?
if [[ ${status} -gt 128 ]] && kill -0 "${srun_pid}" 2>/dev/null; then
  status=0  # wait was interrupted by the trapped SIGTERM: wait for srun itself
  wait "${srun_pid}" || status=$?
fi
if [[ ${status} -eq ${EXIT_PREEMPTED} ]]; then
  for f in "${LM_TASK_STATUS_DIR}"/*; do
    [[ -f "${f}" ]] || continue
    task_status="$(cat "${f}")"
    if [[ "${task_status}" != 0 && "${task_status}" != "${EXIT_PREEMPTED}" ]]; then
      echo "job ${SLURM_JOB_ID:-?}: task $(basename "${f}") failed (exit ${task_status}) while others were preempted; not requeueing" >&2
      status=${task_status}
    fi
  done
fi
if [[ ${status} -eq ${EXIT_PREEMPTED} ]]; then
  echo "job ${SLURM_JOB_ID:-?}: preempted (exit ${status}), checkpoint saved; requeueing" >&2
  if [[ -n "${SLURM_JOB_ID:-}" ]] && command -v scontrol >/dev/null; then
    scontrol requeue "${SLURM_JOB_ID}"
  fi
fi
exit "${status}"
