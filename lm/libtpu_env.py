"""Keeps libtpu quiet on a machine that is not a TPU VM: `quiet_libtpu_off_tpu()`.

The command-line entry points (lm.main, lm.evaluate, lm.decode, lm.plan, the mini suite)
call it first, before JAX starts a backend; nothing calls it on import. With the `tpu` extra
installed, JAX tries libtpu's backend on every machine, and lm.plan loads libtpu to compile
for a TPU target. Off a TPU VM libtpu cannot learn this host's place in a slice (JAX sets
TPU_SKIP_MDS_QUERY=1 when no TPU chip is attached, so no metadata server is asked), fills
TPU_WORKER_HOSTNAMES and the accelerator type with warning text and prints an
`E0000 ... INVALID_ARGUMENT: unexpected worker hostname` block. Telling it the truth, one
host and this one (TPU_WORKER_HOSTNAMES=localhost, TPU_HOST_BOUNDS=1,1,1), keeps it quiet;
JAX still finds no TPU and uses the CPU (or GPU), and compile-only topologies for lm.plan
are described by their own names, unchanged (docs/planning.md).
"""
from __future__ import annotations

import glob
import os

GOOGLE_PCI_VENDOR = "0x1ae0"
# Google PCI devices that are not TPUs: gVNIC, the network card of Compute Engine VMs.
NON_TPU_GOOGLE_DEVICES = frozenset({"0x0042"})
SINGLE_HOST = {"TPU_WORKER_HOSTNAMES": "localhost", "TPU_HOST_BOUNDS": "1,1,1"}


def _read(path: str) -> str:
  try:
    with open(path, encoding="ascii") as f:
      return f.read().strip()
  except (OSError, UnicodeDecodeError):
    return ""


def may_be_tpu_vm(pci_devices: str = "/sys/bus/pci/devices", dev: str = "/dev") -> bool:
  """False only when this machine surely has no TPU attached.

  A TPU VM shows its chips as Google PCI devices (vendor 0x1ae0) and, on v4 and v5e, as
  /dev/accel<N>. Any Google PCI device but the gVNIC network card counts as a possible TPU,
  so a TPU generation unknown here is never taken for a CPU machine.
  """
  if glob.glob(os.path.join(dev, "accel[0-9]*")):
    return True
  for vendor in glob.glob(os.path.join(pci_devices, "*", "vendor")):
    if _read(vendor) == GOOGLE_PCI_VENDOR:
      if _read(os.path.join(os.path.dirname(vendor), "device")) not in NON_TPU_GOOGLE_DEVICES:
        return True
  return False


def quiet_libtpu_off_tpu(environ: dict[str, str] | None = None, **probe) -> dict[str, str]:
  """Off a TPU VM, sets libtpu's single-host variables where they are unset.

  Args:
    environ: the environment to change (default os.environ).
    **probe: `may_be_tpu_vm`'s paths (tests).
  Returns:
    the variables it set ({} on a possible TPU VM, or when all were set already).
  """
  environ = os.environ if environ is None else environ
  if may_be_tpu_vm(**probe):
    return {}
  added = {k: v for k, v in SINGLE_HOST.items() if k not in environ}
  environ.update(added)
  return added
