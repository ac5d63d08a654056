"""Launchers: turn an experiment's sweep into processes (local.py, slurm.sh, tpu_vm.sh)."""
