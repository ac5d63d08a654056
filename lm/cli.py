"""What the command-line entry points share: typed values, the distributed start, exit codes.

`parse_value` turns one command-line string into the type of a value it replaces (config
files' `parse_arg` and `--config.<field>=` overrides both use it); `initialize_distributed`
starts `jax.distributed` for a multi-process run; `bad_input_exit` maps a command's bad-input
exceptions to lm's one `error:` line and exit status 2. Commands and their flags stay in their
own modules (lm/main.py, lm/evaluate.py, ...). Imports nothing from lm, and jax only inside
`initialize_distributed`, so every command can import it first.

  parse_value("0.25", 0.15, name="--config.data.noise")   # -> 0.25
"""
from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

# Exit statuses (docs/robustness.md): the commands' and the launchers' one copy.
EXIT_BAD_INPUT = 2  # every command's: one `error:` line (bad_input_exit)
EXIT_DIVERGED = 3  # lm.main: a non-finite loss or gradient norm
EXIT_PREEMPTED = 75  # lm.main after SIGTERM, sysexits EX_TEMPFAIL: "resume later"
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's status for Ctrl-C: not "resume later"

# absl's help flags (-?, --help, -helpfull, ...): the absl commands (lm.main, lm.plan) print
# their help and exit 0 when asked (`asks_for_help`).
HELP_FLAGS = ("help", "helpshort", "helpfull", "helpxml", "?")


def asks_for_help(argv: list[str]) -> bool:
  """True when argv[1:] (before a `--`) holds a help flag of HELP_FLAGS (--help, -?, ...)."""
  args = argv[1:argv.index("--")] if "--" in argv else argv[1:]
  return any(a.lstrip("-").partition("=")[0] in HELP_FLAGS for a in args if a.startswith("-"))


# The words a boolean value may be written as, lower-cased (parse_value strips and lowers);
# "t" and "f" are absl's, which lm.main's overrides took before they used parse_value.
TRUE_WORDS = ("1", "true", "yes", "y", "on", "t")
FALSE_WORDS = ("0", "false", "no", "n", "off", "f")


def as_tuples(value: Any) -> Any:
  """Lists (and lists inside dicts) as tuples: configs hold tuples, never lists (parsed
  literals, and config.json's lists read back by lm.config.load_config_json)."""
  if isinstance(value, list):
    return tuple(as_tuples(v) for v in value)
  if isinstance(value, dict):
    return {k: as_tuples(v) for k, v in value.items()}
  return value


def parse_value(text: str, like: Any, *, name: str | None) -> Any:
  """`text` as a value of the type of `like` (the default or current value it replaces).

  | like          | accepted text                        | result                       |
  |---------------|--------------------------------------|------------------------------|
  | bool          | TRUE_WORDS / FALSE_WORDS, any case   | True / False                 |
  | int           | what int() takes ("3", " 3 ", "-1"), | int                          |
  |               | or with a base prefix ("0x10")       |                              |
  | float         | what float() takes ("1e-3", "3")     | float                        |
  | str           | anything                             | the text unchanged           |
  | None, others  | a Python literal ("32", "(2, 2)")    | the literal, else the text   |
  | tuple         | a literal; a single value or word    | a tuple; (value,)            |

  Lists in a literal become tuples (a config holds tuples). A bool is never an int here:
  `like=True` takes words, not "2".

  Args:
    text: the string from the command line.
    like: the value `text` replaces; only its type is used.
    name: how the user wrote the setting, for the message ("--config.train.steps",
      "config arg steps"); None where the caller names it (absl: "flag --x=y: ...").

  Raises:
    ValueError: "<name>=<text>: expected a boolean (true/false).", "... an int.",
      "... a float." (without "<name>=<text>: " when name is None).
  """
  where = f"{name}={text!r}: " if name is not None else ""
  if isinstance(like, bool):
    low = text.strip().lower()
    if low in TRUE_WORDS:
      return True
    if low in FALSE_WORDS:
      return False
    raise ValueError(f"{where}expected a boolean (true/false).")
  if isinstance(like, int):
    try:
      return int(text)
    except ValueError:
      pass
    try:  # 0x10, 0o20, 0b10 (absl's integer flags took these)
      return int(text.strip(), 0)
    except ValueError:
      raise ValueError(f"{where}expected an int.") from None
  if isinstance(like, float):
    try:
      return float(text)
    except ValueError:
      raise ValueError(f"{where}expected a float.") from None
  if isinstance(like, str):
    return text
  try:  # None (a placeholder), tuples and other literals: a Python literal, else the text
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    value = text
  if isinstance(like, tuple) and not isinstance(value, (tuple, list)):
    value = (value,)
  return as_tuples(value) if isinstance(value, list) else value


def parse_config_flags_with_parse_value() -> None:
  """Makes ml_collections' `--config.<field>=` flags (lm.main, lm.plan) use parse_value.

  ml_collections parses an override with absl's parser of the field's type; registering
  parse_value for bool, int, float and tuple gives lm.main and lm.plan the values that
  lm.evaluate's, lm.restore's and the config files' arguments get for the same text. Fields
  of other types (str, placeholders' types) keep ml_collections' parsers. Idempotent.
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  from ml_collections.config_flags import tuple_parser  # pylint: disable=g-import-not-at-top

  class Parser(flags.ArgumentParser):
    def __init__(self, kind: type):  # absl caches parsers by these arguments: a type, not 0
      self.like = kind()

    def parse(self, argument):  # absl also parses the (typed) default through here
      return parse_value(argument, self.like, name=None) if isinstance(argument, str) else argument

    def flag_type(self):
      return type(self.like).__name__

  class TupleParser(tuple_parser.TupleParser):  # repeated --config.t=a --config.t=b still work
    def parse(self, argument):
      if isinstance(argument, str):
        return parse_value(argument, (), name=None)
      return super().parse(argument)

  for kind in (bool, int, float):
    config_flags.register_flag_parser_for_type(kind, Parser(kind))
  config_flags.register_flag_parser_for_type(tuple, TupleParser())


# ---------------------------------------------------------------------------------------
# Distributed start.

def multi_host_environment(env: Mapping[str, str] | None = None) -> bool:
  """True when the environment describes a multi-process job jax can auto-detect.

  SLURM (`srun` with more than one task) and multi-host TPU VMs (several worker
  hostnames) are initialised without flags; jax.distributed.initialize() reads the rest.
  """
  env = os.environ if env is None else env
  if int(env.get("SLURM_NTASKS", "1") or 1) > 1 and "SLURM_JOB_ID" in env:
    return True
  return len([h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]) > 1


def distributed_kwargs(*, distributed: bool, coordinator_address: str | None,
                       num_processes: int | None, process_id: int | None,
                       env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
  """The arguments of jax.distributed.initialize for these flags, or None (single process).

  `--distributed`, a coordinator address or a multi-host environment (SLURM, TPU pod) asks
  for a multi-process start; with a coordinator address the process count and index are
  required (auto-detection reads them otherwise: {}).

  Raises:
    ValueError: a coordinator address without --num_processes and --process_id.
  """
  if not (distributed or coordinator_address or multi_host_environment(env)):
    return None
  if not coordinator_address:
    return {}
  if num_processes is None or process_id is None:
    raise ValueError("--coordinator_address needs --num_processes and --process_id.")
  return dict(coordinator_address=coordinator_address, num_processes=num_processes,
              process_id=process_id)


def initialize_distributed(*, distributed: bool = False, coordinator_address: str | None = None,
                           num_processes: int | None = None, process_id: int | None = None,
                           cpu_collectives: str = "gloo") -> bool:
  """Starts jax.distributed when the flags or the environment ask for several processes.

  Call it before anything else touches jax's backends. `cpu_collectives` ("gloo", "mpi"
  or "none") sets the collectives of multi-process CPU runs. Returns whether it started.

  Raises:
    ValueError: a coordinator address without --num_processes and --process_id.
  """
  kwargs = distributed_kwargs(distributed=distributed, coordinator_address=coordinator_address,
                              num_processes=num_processes, process_id=process_id)
  if kwargs is None:
    return False
  import jax  # pylint: disable=g-import-not-at-top  (only multi-process commands pay for it)
  if cpu_collectives != "none":
    jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
  jax.distributed.initialize(**kwargs)
  return True


# ---------------------------------------------------------------------------------------
# Errors -> exit status.

BAD_INPUT_ERRORS = (ValueError, FileNotFoundError)


def first_line(e: BaseException) -> str:
  """The first line of an exception's message (its type's name if it has none)."""
  text = str(e)
  return text.splitlines()[0] if text.strip() else type(e).__name__


def bad_input_exit(problem: BaseException | str, *, prefix: str = "error", file=None) -> int:
  """Prints bad input as lm's one line, `<prefix>: <problem>`, and returns 2.

  Every command reports bad input (a config, a flag, a missing file, a workdir in use) this
  way: one line on stderr naming the problem and the fix, no traceback, exit status 2
  (EXIT_BAD_INPUT). `problem` is the exception (its message is printed) or the line itself
  (commands that reword or shorten a message: first_line(e)).
  """
  print(f"{prefix}: {problem}", file=sys.stderr if file is None else file)
  return EXIT_BAD_INPUT


class _NoBar:
  """progress_bar's stand-in when bars are off."""

  def update(self, n: int = 1) -> None:
    del n

  def close(self) -> None:
    pass


def progress_bar(total: int | None, desc: str, enabled: bool) -> Any:
  """A tqdm bar of `total` batches on stderr when `enabled` (the commands' --progress), else
  an object whose update() and close() do nothing; the caller closes it. For work of several
  parts under one bar (`progress` wraps one iterable)."""
  if not enabled:
    return _NoBar()
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  return tqdm(total=total, desc=desc, leave=False, unit="batch", file=sys.stderr,
              dynamic_ncols=True)


def progress(iterable: Iterable, total: int | None, desc: str, enabled: bool) -> Iterator:
  """`iterable`, with a `progress_bar` when `enabled`."""
  bar = progress_bar(total, desc, enabled)
  try:
    for x in iterable:
      yield x
      bar.update()
  finally:
    bar.close()
