"""lm/cli.py: the one typed-value parser, the distributed start's arguments, the error line."""
import io

import pytest

from configs import common
from lm import cli
from lm import config as config_lib

# (like, text, expected): the forms configs/common.py's parse_arg and lm/config.py's
# --config.<field> overrides took before they shared lm.cli.parse_value (both gave these).
TABLE = [
    (False, "true", True), (False, "True", True), (False, " TRUE ", True), (False, "1", True),
    (False, "yes", True), (False, "y", True), (False, "on", True),
    (True, "false", False), (True, "0", False), (True, "No", False), (True, "n", False),
    (True, "off", False),
    (1, "3", 3), (1, " 3 ", 3), (1, "-1", -1), (1, "1_000", 1000),
    (1.0, "0.25", 0.25), (1.0, "1e-3", 1e-3), (1.0, "3", 3.0), (0.5, "-inf", float("-inf")),
    ("x", "abc", "abc"), ("x", "3", "3"), ("x", "None", "None"), ("x", "a b", "a b"),
    ("", "", ""),
]
# Forms only lm.main's and lm.plan's overrides took before (absl's flag parsers).
ABSL_FORMS = [(False, "t", True), (True, "F", False), (1, "0x10", 16), (1, "0o20", 16)]
# Only --config.<field> overrides reach these (parse_arg takes bool, int, float, str, None).
LITERALS = [
    (None, "32", 32), (None, "0.5", 0.5), (None, "abc", "abc"), (None, "None", None),
    (None, "(1, 2)", (1, 2)), (None, "[1, [2, 3]]", (1, (2, 3))), (None, "True", True),
    ((1, 2), "(3, 4)", (3, 4)), ((1, 2), "[3, 4]", (3, 4)), ((1, 2), "5", (5,)),
    ((1, 2), "[[1, 2], [3]]", ((1, 2), (3,))), (("a",), "('b', 'c')", ("b", "c")),
]


@pytest.mark.parametrize("like, text, expected", TABLE + ABSL_FORMS + LITERALS)
def test_parse_value_table(like, text, expected):
  value = cli.parse_value(text, like, name="x")
  assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize("like, text, expected", TABLE)
def test_parse_arg_and_overrides_agree_with_the_table(like, text, expected):
  assert common.parse_arg(f"k={text}", k=like).k == expected
  assert config_lib.apply_overrides(
      config_lib.ml_collections.ConfigDict({"s": {"k": like}}),
      [f"--config.s.k={text}"]).s.k == expected


def _config_flag_value(tmp_path, like, text):
  """The value lm.main's `--config.s.k=<text>` (ml_collections' config_flags) gives."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  cli.parse_config_flags_with_parse_value()
  path = tmp_path / "cfg.py"
  path.write_text("import ml_collections\n"
                  f"def get_config():\n  return ml_collections.ConfigDict({{'s': {{'k': {like!r}}}}})\n")
  argv = ["p", f"--config={path}", f"--config.s.k={text}"]
  fv = flags.FlagValues()
  flag = config_flags.DEFINE_config_file("config", None, "", flag_values=fv, lock_config=True,
                                         sys_argv=argv)
  fv(argv)
  return flag.value.s.k


# ml_collections refuses overrides of None fields (lm's are typed placeholders), and absl
# reads `--config.s.k=` of a str field as its default: those two rows are not lm.main's.
@pytest.mark.parametrize("like, text, expected", [
    r for r in TABLE + ABSL_FORMS + LITERALS if r[0] is not None and r[1] != ""])
def test_lm_main_overrides_agree_with_the_table(tmp_path, like, text, expected):
  value = _config_flag_value(tmp_path, like, text)
  assert value == expected and type(value) is type(expected)


def test_lm_main_override_errors_are_parse_values(tmp_path):
  with pytest.raises(Exception, match=r"flag --config.s.k=ten: expected an int\.$"):
    _config_flag_value(tmp_path, 1, "ten")
  with pytest.raises(Exception, match=r"flag --config.s.k=maybe: expected a boolean"):
    _config_flag_value(tmp_path, True, "maybe")


def test_parse_arg_none_default_takes_a_string_overrides_a_literal():
  """The one place the two callers differ, as documented: parse_arg's None is a str."""
  assert common.parse_arg("name=32", name=None).name == "32"
  assert cli.parse_value("32", None, name="--config.data.eval_batch_size") == 32


def test_tuple_field_given_a_word_is_a_one_tuple():
  # Before lm.cli, an override of a tuple field with a non-literal word gave a bare string.
  assert cli.parse_value("abc", ("x",), name="--config.wandb.tags") == ("abc",)
  config = config_lib.ml_collections.ConfigDict({"wandb": {"tags": ("x",)}})
  assert config_lib.apply_overrides(config, ["--config.wandb.tags=abc"]).wandb.tags == ("abc",)


@pytest.mark.parametrize("like, text, message", [
    (False, "maybe", "--config.a.b='maybe': expected a boolean (true/false)."),
    (False, "2", "--config.a.b='2': expected a boolean"),
    (1, "ten", "--config.a.b='ten': expected an int."),
    (1, "3.0", "--config.a.b='3.0': expected an int."),
    (1.0, "x", "--config.a.b='x': expected a float."),
])
def test_parse_value_errors_name_the_setting(like, text, message):
  with pytest.raises(ValueError) as e:
    cli.parse_value(text, like, name="--config.a.b")
  assert str(e.value).startswith(message)


def test_parse_arg_messages_keep_their_prefix():
  with pytest.raises(ValueError, match=r"^config arg steps='ten': expected an int\.$"):
    common.parse_arg("steps=ten", steps=1)
  with pytest.raises(TypeError, match="default of 'shape' has unsupported type tuple"):
    common.parse_arg("", shape=(1, 2))


def test_multi_host_environment():
  assert not cli.multi_host_environment({})
  assert not cli.multi_host_environment({"SLURM_JOB_ID": "1", "SLURM_NTASKS": "1"})
  assert not cli.multi_host_environment({"SLURM_NTASKS": "4"})  # not inside a SLURM job
  assert cli.multi_host_environment({"SLURM_JOB_ID": "1", "SLURM_NTASKS": "4"})
  assert not cli.multi_host_environment({"TPU_WORKER_HOSTNAMES": "t1k-0"})
  assert cli.multi_host_environment({"TPU_WORKER_HOSTNAMES": "t1k-0,t1k-1"})


def test_distributed_kwargs():
  args = dict(distributed=False, coordinator_address=None, num_processes=None, process_id=None)
  assert cli.distributed_kwargs(**args, env={}) is None
  assert cli.distributed_kwargs(**{**args, "distributed": True}, env={}) == {}
  slurm = {"SLURM_JOB_ID": "1", "SLURM_NTASKS": "2"}
  assert cli.distributed_kwargs(**args, env=slurm) == {}
  assert cli.distributed_kwargs(
      **{**args, "coordinator_address": "h:1", "num_processes": 2, "process_id": 1}, env={}
  ) == dict(coordinator_address="h:1", num_processes=2, process_id=1)
  with pytest.raises(ValueError, match="--coordinator_address needs --num_processes and "
                                       "--process_id"):
    cli.distributed_kwargs(**{**args, "coordinator_address": "h:1", "num_processes": 2},
                           env={})


def test_initialize_distributed_single_process_is_a_no_op(monkeypatch):
  for name in ("SLURM_JOB_ID", "SLURM_NTASKS", "TPU_WORKER_HOSTNAMES"):
    monkeypatch.delenv(name, raising=False)
  assert cli.initialize_distributed() is False


def test_bad_input_exit_prints_one_line():
  out = io.StringIO()
  assert cli.bad_input_exit(ValueError("no such task 'x'"), file=out) == 2
  assert out.getvalue() == "error: no such task 'x'\n"
  out = io.StringIO()
  e = FileNotFoundError("missing.txt\nmore detail")
  assert cli.bad_input_exit(cli.first_line(e), prefix="lm.decode: error",
                            file=out) == cli.EXIT_BAD_INPUT
  assert out.getvalue() == "lm.decode: error: missing.txt\n"
  assert cli.first_line(ValueError()) == "ValueError"


def test_commands_refuse_a_coordinator_without_process_count(tmp_path, capsys):
  from lm import evaluate  # pylint: disable=g-import-not-at-top
  assert evaluate.run([f"--workdir={tmp_path}", "--coordinator_address=localhost:1"]) == 2
  assert capsys.readouterr().err == (
      "error: --coordinator_address needs --num_processes and --process_id.\n")
