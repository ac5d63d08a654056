r"""Command-line entry point: train (or resume) one run.

  python -m lm.main --config=configs/t5.py:runlocal --workdir=runs/t5_local
  python -m lm.main --config=configs/t5.py:arch=prefix_lm,objective=span_corruption,size=base \
      --config.optim.name=adamw --config.schedule.base_lr=3e-4 --workdir=/data/runs/plm_base

The config file's `get_config(arg)` takes the text after ':' (docs/configs.md);
`--config.<field>=<value>` overrides any field, and a misspelt field stops the run at
start-up with its name. Running the same command on an existing workdir resumes it.
Multi-process: TPU pods and SLURM jobs are detected from the environment (--distributed
forces jax.distributed.initialize() elsewhere); otherwise pass
--coordinator_address=host:port --num_processes=N --process_id=i.

Exit status: 0 finished, 1 crash, 2 bad input (one `error:` line), 3 diverged, 75 preempted
and 130 interrupted (a checkpoint was saved: run again to resume); docs/robustness.md.
"""
from __future__ import annotations

import logging
import os
import signal
import sys

from absl import app, flags
from ml_collections import config_flags

from lm import cli
from lm import libtpu_env

cli.parse_config_flags_with_parse_value()  # before --config's overrides are parsed
_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, e.g. configs/t5.py:runlocal (get_config's arg after ':').",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (config, checkpoints, metrics). "
                               "An existing run there is resumed.")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False, "Call jax.distributed.initialize() with auto-detection (TPU pod, "
    "SLURM). Implied by --coordinator_address.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None,
                                   "host:port of process 0 for a multi-process run.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
_CPU_COLLECTIVES = flags.DEFINE_enum(
    "cpu_collectives", "gloo", ["gloo", "mpi", "none"],
    "Collectives implementation for multi-process CPU runs.")
_RETAIN_HOST_MEMORY = flags.DEFINE_bool(
    "retain_host_memory", True,
    "Keep freed host memory in the process (glibc malloc settings, see lm/hostmem.py) so "
    "XLA:CPU's per-step temporaries are not page-faulted in again every step (~10% faster "
    "CPU training steps); --noretain_host_memory lets the process shrink between steps.")
flags.mark_flags_as_required(["config", "workdir"])

EXIT_BAD_INPUT, EXIT_DIVERGED = cli.EXIT_BAD_INPUT, cli.EXIT_DIVERGED  # lm.cli owns them
EXIT_PREEMPTED, EXIT_INTERRUPTED = cli.EXIT_PREEMPTED, cli.EXIT_INTERRUPTED


def training_parts(settings):
  """The kind of run `settings` (lm.config.RunSettings) is, chosen once: fine-tuning's
  parts (the tasks' data and evaluation, lm.downstream.finetune.PARTS) when it fine-tunes
  (settings.finetune), else None (lm.train's default, pre-training's lm.parts.PRETRAINING)."""
  from lm.downstream import finetune  # pylint: disable=g-import-not-at-top  (imports jax)
  return finetune.PARTS if settings.finetune is not None else None


def main(argv) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.getLogger().setLevel(logging.INFO)
  for noisy in ("absl", "jax._src", "orbax", "etils", "grain"):
    logging.getLogger(noisy).setLevel(logging.WARNING)
  if _RETAIN_HOST_MEMORY.value:
    from lm import hostmem  # pylint: disable=g-import-not-at-top
    hostmem.retain_for_cpu()  # before JAX starts its threads (a no-op on a GPU or TPU host)
  try:  # before anything touches jax's backends
    cli.initialize_distributed(
        distributed=_DISTRIBUTED.value, coordinator_address=_COORDINATOR.value,
        num_processes=_NUM_PROCESSES.value, process_id=_PROCESS_ID.value,
        cpu_collectives=_CPU_COLLECTIVES.value)
  except ValueError as e:  # --coordinator_address without --num_processes / --process_id
    return cli.bad_input_exit(e)
  import jax  # pylint: disable=g-import-not-at-top  (after distributed init)
  from lm import config as config_lib  # pylint: disable=g-import-not-at-top
  from lm import train  # pylint: disable=g-import-not-at-top
  from lm import validate  # pylint: disable=g-import-not-at-top
  from lm import workdir  # pylint: disable=g-import-not-at-top
  try:  # the derived fields (targets length, extra ids, vocab) from the overridden config
    # Every problem at once, the mesh's fit to this job's devices included.
    settings = validate.validate(config_lib.derive(_CONFIG.value),
                                 num_devices=jax.device_count())
    train.train_and_evaluate(settings, _WORKDIR.value, training_parts(settings))
  except train.Preempted as e:
    code = EXIT_INTERRUPTED if e.signum == signal.SIGINT else EXIT_PREEMPTED
    print(f"{e} (exit {code})", file=sys.stderr)
    return code
  except KeyboardInterrupt:  # Ctrl-C before the training loop, or twice in it
    print(f"error: interrupted (Ctrl-C) before a checkpoint was saved; the newest complete "
          f"checkpoint in {_WORKDIR.value} is kept (exit {EXIT_INTERRUPTED})", file=sys.stderr)
    return EXIT_INTERRUPTED
  except train.NonFiniteError as e:
    print(f"error: {e}", file=sys.stderr)
    return EXIT_DIVERGED
  except (*cli.BAD_INPUT_ERRORS, workdir.WorkdirInUseError) as e:
    # Bad input (config, data, checkpoint, workdir): one clear message, no traceback.
    return cli.bad_input_exit(e)
  except ImportError as e:  # an optional reader (parquet, array_record, hf datasets)
    return cli.bad_input_exit(f"{e}; install the data extras: pip install -e '.[data]'")
  except OSError as e:  # workdir is a file, permission denied, disk full, ...
    return cli.bad_input_exit(_describe_os_error(e))
  except Exception as e:  # noqa: BLE001 - orbax/tensorstore errors about the workdir
    if not _is_checkpoint_io_error(e):
      raise
    return cli.bad_input_exit(f"checkpoint I/O in {_WORKDIR.value} failed: "
                              f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
  return 0


def override_error(config, argv) -> str | None:
  """The first `--config.<field>=` override in argv naming no field of `config`, as one
  line with the closest existing name (difflib), or None if every override exists."""
  import difflib  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  for arg in argv[1:]:
    if not arg.startswith("--config."):
      continue
    dotted = arg[len("--config."):].split("=", 1)[0]
    node, where = config, "config"
    for part in dotted.split("."):
      if not isinstance(node, (ml_collections.ConfigDict, dict)):
        break  # a field of a non-dict value (e.g. a tuple index): ml_collections decides
      if part not in node:
        close = difflib.get_close_matches(part, [str(k) for k in node.keys()], n=1, cutoff=0.5)
        hint = (f"did you mean --{where}.{close[0]}?" if close else
                f"its fields are: {', '.join(sorted(map(str, node.keys())))}")
        return f"--config.{dotted}: {where} has no field {part!r}; {hint}"
      node, where = node[part], f"{where}.{part}"
  return None


def _config_arg(argv: list[str]) -> str | None:
  """The value of the last `--config=file.py[:arg]` (or `--config file.py`) in argv."""
  value = None
  for i, arg in enumerate(argv[1:], 1):
    if arg.startswith("--config="):
      value = arg[len("--config="):]
    elif arg == "--config" and i + 1 < len(argv):
      value = argv[i + 1]
  return value


def _load_config_file(argv: list[str]):
  """get_config(arg) of the `--config=file.py[:arg]` in argv (None if there is none)."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  value = _config_arg(argv)
  if not value:
    return None
  path, sep, config_arg = value.partition(":")
  spec = importlib.util.spec_from_file_location("_lm_config_for_flags", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(config_arg) if sep else module.get_config()


def _parse_flags(argv: list[str]) -> list[str]:
  """absl flag parsing; a config-field typo or a bad config-file arg ends the run with one
  `error:` line (exit 2) instead of a traceback from ml_collections' override parsing."""
  value = _config_arg(argv)
  if value and not os.path.isfile(value.partition(":")[0]):
    sys.exit(cli.bad_input_exit(
        f"--config={value}: no config file {value.partition(':')[0]!r} (run from the "
        "repository root, e.g. --config=configs/t5.py:runlocal)."))
  try:
    return flags.FLAGS(argv)
  except SystemExit as e:  # absl's --help (and --helpfull, ...) prints the help, then exits 1
    sys.exit(0 if e.code == 1 and cli.asks_for_help(argv) else e.code)
  except Exception as e:  # pylint: disable=broad-except
    message = None
    try:  # mid-parse the flag holds no value yet: load the config file as ml_collections does
      config = _load_config_file(argv)
      message = override_error(config, argv) if config is not None else None
    except Exception:  # pylint: disable=broad-except
      pass  # the config file itself is broken: absl's message below says how
    if message is None:
      if not isinstance(e, (flags.Error, ValueError, KeyError, AttributeError, TypeError)):
        raise
      lines = [l.strip() for l in str(e).splitlines() if l.strip()]
      # A config file's own error comes last, after ml_collections' traceback.
      message = lines[-1] if len(lines) > 1 and "Traceback" in str(e) else " ".join(lines)
    sys.exit(cli.bad_input_exit(message))


def _describe_os_error(e: OSError) -> str:
  """One line: what failed, on which path, and what to do."""
  if type(e).__module__.startswith("lm"):  # our own OSErrors are already one line
    return str(e)
  path = e.filename or _WORKDIR.value
  what = e.strerror or str(e) or type(e).__name__
  return (f"{what}: {path} (--workdir={_WORKDIR.value}); the workdir must be a directory "
          "this user can write (or not exist yet)")


def _is_checkpoint_io_error(e: BaseException) -> bool:
  """True for errors raised inside orbax / tensorstore (reading or writing checkpoints)."""
  tb = e.__traceback__
  while tb is not None:
    module = tb.tb_frame.f_globals.get("__name__", "")
    if module.startswith(("orbax.", "tensorstore")):
      return True
    tb = tb.tb_next
  return type(e).__module__.startswith(("orbax", "tensorstore"))


def run() -> None:
  """Console-script entry (`lm-train`, pyproject.toml's [project.scripts])."""
  libtpu_env.quiet_libtpu_off_tpu()
  app.run(main, flags_parser=_parse_flags)


if __name__ == "__main__":
  run()
