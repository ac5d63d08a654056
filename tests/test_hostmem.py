"""lm.hostmem: with freed memory retained, a re-allocated large block is not faulted in again."""
import platform
import subprocess
import sys

import pytest

_PROBE = r"""
import ctypes, ctypes.util, resource, sys
from lm import hostmem
applied = hostmem.retain_freed_memory() if sys.argv[1] == "retain" else False
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def touch():  # a 256 MiB block from malloc (as XLA:CPU takes its temporaries), written, freed
  p = libc.malloc(256 * 2**20); ctypes.memset(p, 1, 256 * 2**20); libc.free(p)
touch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
touch()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[bool, int]:
  out = subprocess.run([sys.executable, "-c", _PROBE, mode], check=True, capture_output=True,
                       text=True).stdout.split()
  return out[0] == "True", int(out[1])


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="the policy is glibc malloc's")
def test_retained_memory_is_reused_without_page_faults():
  pages = 256 * 2**20 // 4096
  applied, retained = _faults("retain")
  assert applied
  _, default = _faults("default")
  assert default > pages // 2, default  # glibc unmaps a block this large on free
  assert retained < pages // 20, retained  # the heap kept it


def test_the_policy_is_applied_only_where_jax_computes_on_the_cpu(tmp_path, monkeypatch):
  from lm import hostmem
  applied = []
  monkeypatch.setattr(hostmem, "retain_freed_memory", lambda: applied.append(1) or True)
  monkeypatch.delenv("JAX_PLATFORMS", raising=False)
  assert hostmem.accelerator_device_files(str(tmp_path)) == []
  assert hostmem.retain_for_cpu(str(tmp_path)) and len(applied) == 1  # a CPU-only machine
  for name in ("null", "nvidia-uvm", "nvidiactl"):  # present on CPU machines too, or no GPU
    (tmp_path / name).touch()
  assert hostmem.retain_for_cpu(str(tmp_path)) and len(applied) == 2
  (tmp_path / "nvidia0").touch()  # a GPU host: glibc's own policy
  assert hostmem.accelerator_device_files(str(tmp_path)) == [str(tmp_path / "nvidia0")]
  assert not hostmem.retain_for_cpu(str(tmp_path)) and len(applied) == 2
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")  # told to compute on the CPU after all
  assert hostmem.retain_for_cpu(str(tmp_path)) and len(applied) == 3
  monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
  assert not hostmem.retain_for_cpu(str(tmp_path))
  (tmp_path / "nvidia0").unlink()
  (tmp_path / "accel0").touch()  # a TPU host
  monkeypatch.delenv("JAX_PLATFORMS")
  assert not hostmem.retain_for_cpu(str(tmp_path)) and len(applied) == 3
