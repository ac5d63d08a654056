"""lm.libtpu_env: libtpu stays quiet off a TPU VM (issue 33 row 13), and a TPU VM is left alone."""
import importlib.util
import os
import subprocess
import sys

from lm import libtpu_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _machine(tmp_path, devices=(), accel=False):
  """A fake /sys/bus/pci/devices (vendor, device) and /dev."""
  pci, dev = tmp_path / "pci", tmp_path / "dev"
  pci.mkdir(parents=True)
  dev.mkdir()
  for i, (vendor, device) in enumerate(devices):
    (pci / f"0000:00:{i:02x}.0").mkdir()
    (pci / f"0000:00:{i:02x}.0" / "vendor").write_text(vendor + "\n")
    (pci / f"0000:00:{i:02x}.0" / "device").write_text(device + "\n")
  if accel:
    (dev / "accel0").write_text("")
  return dict(pci_devices=str(pci), dev=str(dev))


def test_only_a_machine_with_no_possible_tpu_is_taken_for_one(tmp_path):
  cases = [((), False, False),
           ((("0x8086", "0x1237"), ("0x1af4", "0x1000")), False, False),  # Intel, virtio
           ((("0x1ae0", "0x0042"),), False, False),                        # gVNIC: a GCE CPU VM
           ((("0x1ae0", "0x0042"), ("0x1ae0", "0x0062")), False, True),    # v5p chip
           ((("0x1ae0", "0x00ff"),), False, True),                         # a Google device unknown here
           ((), True, True)]                                               # /dev/accel0 (v4, v5e)
  for i, (devices, accel, expected) in enumerate(cases):
    probe = _machine(tmp_path / str(i), devices, accel)
    assert libtpu_env.may_be_tpu_vm(**probe) is expected, (devices, accel)
    environ = {"TPU_HOST_BOUNDS": "2,2,1"}
    added = libtpu_env.quiet_libtpu_off_tpu(environ, **probe)
    if expected:  # a TPU VM: nothing touched
      assert added == {} and environ == {"TPU_HOST_BOUNDS": "2,2,1"}
    else:  # what the user set stays
      assert added == {"TPU_WORKER_HOSTNAMES": "localhost"}
      assert environ == {"TPU_HOST_BOUNDS": "2,2,1", "TPU_WORKER_HOSTNAMES": "localhost"}


def _backend_start_stderr(quiet: bool) -> str:
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("JAX_PLATFORMS", "TPU_")) and k != "XLA_FLAGS"}
  env["PYTHONPATH"] = REPO
  prog = ("from lm import libtpu_env\n"
          f"if {quiet}: libtpu_env.quiet_libtpu_off_tpu()\n"
          "import jax\nprint(jax.devices())")
  out = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True,
                       timeout=120, cwd=REPO)
  assert out.returncode == 0 and "Device" in out.stdout, out.stderr
  return out.stderr


def test_jax_starts_without_libtpus_error_block_off_a_tpu_vm():
  assert not libtpu_env.may_be_tpu_vm()  # the test machines are not TPU VMs
  quiet = _backend_start_stderr(quiet=True)
  assert "E0000" not in quiet and "worker hostname" not in quiet and "WARNING" not in quiet, quiet
  if importlib.util.find_spec("libtpu") is not None:  # the tpu extra: the block it removes
    assert "unexpected worker hostname" in _backend_start_stderr(quiet=False)


def test_every_command_line_entry_point_calls_it_first():
  """Entry points, not imports, change the environment (nothing deep in the library does)."""
  import ast  # pylint: disable=g-import-not-at-top
  import inspect  # pylint: disable=g-import-not-at-top
  import textwrap  # pylint: disable=g-import-not-at-top
  from lm import decode, evaluate, main, plan  # pylint: disable=g-import-not-at-top
  from lm.checkpoint import hf_t5  # pylint: disable=g-import-not-at-top
  from lm import mini_suite  # pylint: disable=g-import-not-at-top
  for entry in (main.run, evaluate.main, decode.main, plan.main, mini_suite.main, hf_t5.main):
    [fn] = ast.parse(textwrap.dedent(inspect.getsource(entry))).body
    body = [n for n in fn.body if not isinstance(n, (ast.Import, ast.ImportFrom))
            and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    assert ast.unparse(body[0]) == "libtpu_env.quiet_libtpu_off_tpu()", entry.__module__
