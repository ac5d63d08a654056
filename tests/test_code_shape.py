"""The shape of the code base: layering, module length, names that resolve, one error wording.

Static checks over the repository's files (nothing is imported but tomllib and the console
scripts' modules):

* lm/ is the library: none of its modules imports configs, experiments or launch (they
  build on lm, not the other way round; pyproject.toml installs lm only, and configs/ imports
  lm at module level).
* No module is past MAX_LINES lines unless its docstring says why ("Why this module is
  long:").
* No lm/ module's docstring is past MAX_DOCSTRING_LINES lines: what lives there and a
  pointer to docs/, which holds the narrative (issue #29).
* Every repository path (`lm/plan.py`, `docs/speed.md`, `configs/*.py`, ...) and dotted
  module name (`lm.model.accounting.activation_bytes`) that a document, comment or
  docstring names exists; a few paths of other projects are allowed by name below.
* Nothing cites files outside the repository.
* Bad-choice errors use one wording, "unknown X 'y'; expected one of [...]".
* Every console script in pyproject.toml, and every `lm-...` command the text names,
  resolves to a callable.
"""
from __future__ import annotations

import ast
import glob
import importlib
import io
import pathlib
import re
import tokenize
import tomllib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
CODE_DIRS = ("lm", "configs", "experiments", "launch", "benchmarks", "tools")
MAX_LINES = 600
LONG_REASON = "Why this module is long:"


def _rel(path: pathlib.Path) -> str:
  return path.relative_to(REPO).as_posix()


def _py_files(*dirs: str) -> list[pathlib.Path]:
  return sorted(p for d in dirs for p in (REPO / d).rglob("*.py"))


CODE_FILES = _py_files(*CODE_DIRS)
TEXT_PY_FILES = _py_files(*CODE_DIRS, "tests")
DOCS = sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md", REPO / "benchmarks" / "README.md"]
SHELL_SCRIPTS = sorted((REPO / "launch").glob("*.sh"))


def _docstrings(tree: ast.AST):
  """(line, text) of every module / class / function docstring."""
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      body = node.body
      if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
          and isinstance(body[0].value.value, str)):
        yield body[0].lineno, body[0].value.value


def _prose(path: pathlib.Path) -> list[tuple[int, str]]:
  """(line number, text) of the prose of a file: a document's lines, or a Python file's
  comments and docstring lines, or a shell script's comment lines."""
  text = path.read_text(encoding="utf-8")
  if path.suffix == ".md":
    return list(enumerate(text.splitlines(), 1))
  if path.suffix == ".sh":
    return [(i, line) for i, line in enumerate(text.splitlines(), 1)
            if line.lstrip().startswith("#")]
  out = [(tok.start[0], tok.string)
         for tok in tokenize.generate_tokens(io.StringIO(text).readline)
         if tok.type == tokenize.COMMENT]
  for line, doc in _docstrings(ast.parse(text)):
    out += [(line + i, part) for i, part in enumerate(doc.splitlines())]
  return out


# -- layering -------------------------------------------------------------------------------

LM_FILES = _py_files("lm")
UPWARD = ("configs", "experiments", "launch")


def _imported_modules(path: pathlib.Path) -> set[str]:
  """Every module a file imports: import statements anywhere (functions included) and
  `importlib.import_module('<literal>')` calls."""
  modules = set()
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
    if isinstance(node, ast.Import):
      modules.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      modules.add(node.module)
    elif (isinstance(node, ast.Call)
          and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
          and node.args and isinstance(node.args[0], ast.Constant)):
      modules.add(str(node.args[0].value))
  return modules


@pytest.mark.parametrize("path", LM_FILES, ids=_rel)
def test_lm_does_not_import_configs_experiments_or_launch(path):
  upward = sorted(m for m in _imported_modules(path) if m.split(".")[0] in UPWARD)
  assert not upward, f"{_rel(path)} imports {upward}: lm/ is the library they build on"


def test_the_layering_check_sees_every_import_form(tmp_path):
  module = tmp_path / "m.py"
  module.write_text("import configs.t5\nfrom experiments import common\n"
                    "def f():\n  from launch import local\n  importlib.import_module('configs')\n")
  assert _imported_modules(module) == {"configs.t5", "experiments", "launch", "configs"}


def test_only_lm_is_installed():
  """configs/, experiments/ and launch/ are used from the repository root, not installed."""
  found = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
      "setuptools"]["packages"]["find"]
  assert found.get("include") == ["lm*"], found


def test_config_files_import_at_the_top():
  """configs/ is data that imports lm at module level (no imports hidden in functions)."""
  found = []
  for path in _py_files("configs"):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        found += [f"{_rel(path)}:{n.lineno}" for n in ast.walk(node)
                  if isinstance(n, (ast.Import, ast.ImportFrom))]
  assert not found, f"imports inside functions of configs/: {found}"


# -- module length --------------------------------------------------------------------------

def _module_docstring(path: pathlib.Path) -> str:
  return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


@pytest.mark.parametrize("path", CODE_FILES, ids=_rel)
def test_no_module_is_long_without_a_reason(path):
  lines = len(path.read_text(encoding="utf-8").splitlines())
  if lines > MAX_LINES:
    assert LONG_REASON in _module_docstring(path), (
        f"{_rel(path)} has {lines} lines (> {MAX_LINES}): split it, or say why at its top "
        f"in a '{LONG_REASON}' paragraph of the module docstring")


MAX_DOCSTRING_LINES = 25
# Modules whose docstrings may still be longer, each with why (none now).
LONG_DOCSTRINGS: tuple[str, ...] = ()


def _docstring_lines(path: pathlib.Path) -> int:
  """Lines of the module docstring as written (0 without one)."""
  doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
  return doc.count("\n") + 1 if doc else 0


def _long_docstring(path: pathlib.Path) -> str | None:
  """What is wrong with the module's docstring's length, or None."""
  lines = _docstring_lines(path)
  if lines <= MAX_DOCSTRING_LINES:
    return None
  return (f"{path.name}'s docstring has {lines} lines (> {MAX_DOCSTRING_LINES}): keep a "
          "summary, what lives here and a pointer to the docs/ section; move the rest there")


@pytest.mark.parametrize("path", LM_FILES, ids=_rel)
def test_module_docstrings_are_short(path):
  if _rel(path) not in LONG_DOCSTRINGS:
    assert _long_docstring(path) is None, _long_docstring(path)


def test_the_docstring_check_finds_a_long_docstring(tmp_path):
  module = tmp_path / "m.py"
  def write(lines: int, prefix: str = ""):
    body = "\n".join(f"line {i}" for i in range(2, lines + 1))
    module.write_text(f'{prefix}"""Summary.\n{body}"""\nX = 1\n')
  write(MAX_DOCSTRING_LINES + 1)
  assert _docstring_lines(module) == 26 and "26 lines" in _long_docstring(module)
  write(MAX_DOCSTRING_LINES, prefix="r")
  assert _docstring_lines(module) == 25 and _long_docstring(module) is None
  module.write_text("X = 1\n")
  assert _docstring_lines(module) == 0 and _long_docstring(module) is None


def _top_level_table(text: str) -> set[str]:
  """The module paths in docs/architecture.md's "The top level's modules, by kind" table."""
  start = text.index("The top level's modules, by kind")
  table = text[start:text.index("\n\n", text.index("| kind |", start))]
  return set(re.findall(r"`(lm/[a-z_]+\.py)`", table))


def test_the_top_level_modules_are_each_in_the_architecture_table():
  """docs/architecture.md sorts the flat modules of lm/ by kind; a new one is placed there."""
  listed = _top_level_table((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
  present = {_rel(p) for p in (REPO / "lm").glob("*.py") if p.name != "__init__.py"}
  assert listed == present, (f"missing from the table: {sorted(present - listed)}; "
                             f"not modules: {sorted(listed - present)}")


def test_the_top_level_table_reader_sees_only_the_table():
  text = ("x `lm/a.py`\nThe top level's modules, by kind (...):\n\n  | kind | modules |\n"
          "  |---|---|\n  | c | `lm/b.py`, `lm/c_d.py` |\n\nlater `lm/e.py`\n")
  assert _top_level_table(text) == {"lm/b.py", "lm/c_d.py"}


def test_every_long_docstring_exception_is_still_long():
  """An exception that is no longer needed is removed, so the list stays true."""
  for rel in LONG_DOCSTRINGS:
    assert _docstring_lines(REPO / rel) > MAX_DOCSTRING_LINES, rel


# -- named paths exist ----------------------------------------------------------------------

_TOP = ("lm", "configs", "experiments", "launch", "benchmarks", "tools", "tests", "docs", ".ci")
# A repository path: one of the top folders, then path characters (globs and {a,b} allowed);
# not part of a longer path or URL, and not `<root>/...` or `$DIR/...` placeholders.
PATH_RE = re.compile(r"(?<![\w./~$<{-])((?:%s)/[\w./*{},-]*[\w*}]|README\.md|pyproject\.toml)"
                     % "|".join(re.escape(t) for t in _TOP))
DOTTED_RE = re.compile(r"(?<![\w./-])((?:lm|configs|experiments|launch|benchmarks)(?:\.\w+)+)")
URL_RE = re.compile(r"\w+://\S+")
# Suffixes after which a dotted name is a file name (of the repository, or T5's gin files).
_FILE_SUFFIXES = (".py", ".md", ".json", ".jsonl", ".gin", ".sh", ".toml", ".txt", ".png")
# Things that look like repository paths but are not, each with the reason.
EXTERNAL_PATHS = {
    ("benchmarks/README.md", "lm/hf"): "a table column: the ratio lm / transformers, not a path",
}


def _path_exists(path: str) -> bool:
  path = path.rstrip("/")
  if "{" in path:
    head, _, rest = path.partition("{")
    options, _, tail = rest.partition("}")
    return all(_path_exists(head + o + tail) for o in options.split(","))
  if "*" in path:
    return bool(glob.glob(str(REPO / path)))
  # A module may be named without its .py (the architecture page's `lm/data/converters`).
  return (REPO / path).exists() or (REPO / f"{path}.py").is_file()


def _top_level_names(path: pathlib.Path) -> set[str]:
  names = set()
  for node in ast.parse(path.read_text(encoding="utf-8")).body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      names.add(node.name)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      names.update((a.asname or a.name).split(".")[0] for a in node.names)
  return names


def _dotted_exists(dotted: str) -> bool:
  """A dotted name exists: its longest prefix that is a module exists and defines the next part."""
  parts = dotted.split(".")
  for i in range(len(parts), 1, -1):
    base = REPO.joinpath(*parts[:i])
    module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
    if module.is_file():
      return i == len(parts) or parts[i] in _top_level_names(module)
  return False


def _named_paths(path: pathlib.Path) -> list[tuple[int, str, bool]]:
  """(line, name, exists) of every repository path and dotted module name in a file's prose."""
  out = []
  for line, text in _prose(path):
    text = URL_RE.sub("", text)
    for m in PATH_RE.finditer(text):
      if (_rel(path), m.group(1)) not in EXTERNAL_PATHS:
        out.append((line, m.group(1), _path_exists(m.group(1))))
    for m in DOTTED_RE.finditer(text):
      name = m.group(1).rstrip(".")
      if not name.endswith(_FILE_SUFFIXES):
        out.append((line, name, _dotted_exists(name)))
  return out


@pytest.mark.parametrize("path", DOCS + TEXT_PY_FILES + SHELL_SCRIPTS, ids=_rel)
def test_every_named_path_exists(path):
  missing = [f"{_rel(path)}:{line}: {name}" for line, name, ok in _named_paths(path) if not ok]
  assert not missing, "names of files or modules that do not exist:\n" + "\n".join(missing)


def test_the_path_check_finds_names_and_misses():
  """The scanner itself: real names pass, stale ones are caught, URLs and placeholders skipped."""
  assert _path_exists("lm/plan.py") and _path_exists("lm/data/converters")
  assert _path_exists("configs/*.py") and _path_exists("lm/{plan,hardware}.py")
  assert not _path_exists("lm/nope.py") and not _path_exists("lm/{plan,nope}.py")
  assert _dotted_exists("lm.plan") and _dotted_exists("lm.model.accounting.activation_bytes")
  assert not _dotted_exists("lm.model.hf_t5.write") and not _dotted_exists("lm.nope")
  text = ("see lm/plan.py, `docs/speed.md` and tests/test_nope.py:12; not "
          "https://github.com/x/y/blob/main/lm/a.py, t5/data/preprocessors.py, <root>/lm/x, "
          "$DIR/docs/y.md; lm.plan.main and lm.plan.nope; T5's lm.gin")
  names = [m.group(1) for m in PATH_RE.finditer(URL_RE.sub("", text))]
  assert names == ["lm/plan.py", "docs/speed.md", "tests/test_nope.py"]
  dotted = [m.group(1) for m in DOTTED_RE.finditer(text)]
  assert dotted == ["lm.plan.main", "lm.plan.nope", "lm.gin"]


# -- nothing outside the repository ---------------------------------------------------------

OUTSIDE = re.compile(r"\.\./shared|T5_NOTES|COMMON\.md|DESIGN\.md|STYLE\.md")


@pytest.mark.parametrize("path", DOCS + TEXT_PY_FILES + SHELL_SCRIPTS + [REPO / "pyproject.toml"],
                         ids=_rel)
def test_nothing_cites_files_outside_the_repository(path):
  if path == pathlib.Path(__file__).resolve():
    return  # this file names them to look for them
  hits = [f"{_rel(path)}:{i}: {line.strip()}"
          for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
          if OUTSIDE.search(line)]
  assert not hits, "cites a file outside the repository:\n" + "\n".join(hits)


# -- one wording for a bad choice -----------------------------------------------------------

# The wordings this replaced, and a capitalised "Unknown" (messages start in lower case).
OLD_WORDING = re.compile(r"choose one of|choose from|\bvalid: |\bknown: |use one of|^Unknown ")


def _message_strings(path: pathlib.Path):
  """(line, text) of the string literals of a module that are not docstrings."""
  tree = ast.parse(path.read_text(encoding="utf-8"))
  docs = {id(node.body[0].value) for node in ast.walk(tree)
          if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
          and node.body and isinstance(node.body[0], ast.Expr)}
  for node in ast.walk(tree):
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
      yield node.lineno, node.value


@pytest.mark.parametrize("path", CODE_FILES, ids=_rel)
def test_bad_choices_say_expected_one_of(path):
  old = [f"{_rel(path)}:{line}: {text.strip()!r}" for line, text in _message_strings(path)
         if OLD_WORDING.search(text)]
  assert not old, ("write bad-choice errors as \"unknown X 'y'; expected one of [...]\":\n"
                   + "\n".join(old))


# -- console scripts ------------------------------------------------------------------------

SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"].get(
    "scripts", {})


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_console_scripts_resolve(name):
  module, _, attr = SCRIPTS[name].partition(":")
  assert callable(getattr(importlib.import_module(module), attr)), SCRIPTS[name]


def test_named_commands_are_console_scripts():
  named = {}
  for path in DOCS + TEXT_PY_FILES:
    for line, text in _prose(path):
      for m in re.finditer(r"(?<![\w./-])(lm-[a-z]+)\b(?![/-])", text):  # not a folder's name
        named.setdefault(m.group(1), f"{_rel(path)}:{line}")
  assert "lm-train" in named
  missing = {name: where for name, where in named.items() if name not in SCRIPTS}
  assert not missing, f"commands not in pyproject.toml's [project.scripts]: {missing}"


# -- lm/data: no import cycle ---------------------------------------------------------------

DATA = REPO / "lm" / "data"


def test_lm_data_has_no_import_cycle():
  """The data modules form layers (objectives.py imports mixtures.py and batched.py, not the
  other way round); an import inside a function counts too: it only hides a cycle
  (`_import_cycles`, checked by test_the_cycle_check_finds_a_cycle)."""
  assert {"lm.data.mixtures", "lm.data.batched"} <= _imported_names(DATA / "objectives.py")
  cycles = _import_cycles([p for p in DATA.glob("*.py") if p.stem != "__init__"], "lm.data")
  assert not cycles, f"lm/data import cycles: {[' -> '.join(c) for c in cycles]}"


# -- what the commands share (lm/cli.py) -----------------------------------------------------

def _calls(path: pathlib.Path, dotted: str) -> list[int]:
  """Lines of `path` that call `dotted` (e.g. "jax.distributed.initialize") by that name."""
  lines = []
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
    if isinstance(node, ast.Call) and ast.unparse(node.func) == dotted:
      lines.append(node.lineno)
  return lines


def test_only_lm_cli_starts_jax_distributed():
  where = [f"{_rel(p)}:{n}" for p in CODE_FILES for n in _calls(p, "jax.distributed.initialize")]
  assert where and all(w.startswith("lm/cli.py:") for w in where), (
      "start jax.distributed with lm.cli.initialize_distributed: " + ", ".join(where))


def test_one_typed_value_parser():
  """String -> typed value lives in lm.cli.parse_value; no other module literal_evals a flag
  or spells the boolean words."""
  bool_words = re.compile(r"""\(\s*["']1["'],\s*["']true["'],\s*["']yes["']""")
  where = [f"{_rel(p)}" for p in CODE_FILES if _rel(p) != "lm/cli.py"
           and bool_words.search(p.read_text(encoding="utf-8"))]
  assert not where, f"parse booleans with lm.cli.parse_value: {where}"
  assert "cli.parse_value" in (REPO / "configs" / "common.py").read_text(encoding="utf-8")
  assert "cli.parse_value" in (REPO / "lm" / "config.py").read_text(encoding="utf-8")


def test_commands_report_bad_input_through_lm_cli():
  """Exit status 2 and its `error:` line come from lm.cli.bad_input_exit, not each command."""
  literal_two = re.compile(r"^\s*(return 2|(sys\.)?exit\(2\))\s*(#.*)?$", re.M)
  where = [_rel(p) for p in LM_FILES if literal_two.search(p.read_text(encoding="utf-8"))]
  assert not where, f"return cli.bad_input_exit(...) instead of a literal exit 2: {where}"


def test_lm_cli_imports_nothing_from_lm():
  """Every command (and lm/config.py, configs/common.py) imports lm.cli: it must stay a leaf."""
  inner = sorted(m for m in _imported_modules(REPO / "lm" / "cli.py") if m.split(".")[0] == "lm")
  assert not inner, f"lm/cli.py imports {inner}"

# -- no import runs back up -----------------------------------------------------------------

# The commands and the trainer sit at the top of lm; the packages below them are what they
# build on (docs/architecture.md, "Folders").
COMMANDS = ("lm.train", "lm.main", "lm.evaluate", "lm.decode", "lm.plan", "lm.mini_suite")
PACKAGE_FILES = _py_files("lm/downstream", "lm/data", "lm/model", "lm/checkpoint")


def _imported_names(path: pathlib.Path) -> set[str]:
  """_imported_modules, plus `pkg.name` for every `from pkg import name` (a module or not)."""
  names = _imported_modules(path)
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      names.update(f"{node.module}.{a.name}" for a in node.names)
  return names


def _commands_imported(path: pathlib.Path) -> list[str]:
  return sorted(m for m in _imported_names(path)
                if any(m == c or m.startswith(c + ".") for c in COMMANDS))


@pytest.mark.parametrize("path", PACKAGE_FILES, ids=_rel)
def test_packages_import_no_command_or_the_trainer(path):
  found = _commands_imported(path)
  assert not found, (f"{_rel(path)} imports {found}: the commands and the trainer build on "
                     "lm's packages, not the other way round")


def test_the_command_check_sees_every_import_form(tmp_path):
  module = tmp_path / "m.py"
  module.write_text("import lm.plan\nfrom lm.evaluate import main\nfrom lm import decoding\n"
                    "def f():\n  from lm import train, mini_suite\n"
                    "  importlib.import_module('lm.main')\n")
  assert _commands_imported(module) == ["lm.evaluate", "lm.evaluate.main", "lm.main",
                                        "lm.mini_suite", "lm.plan", "lm.train"]


def _import_cycles(files: list[pathlib.Path], package: str) -> list[list[str]]:
  """The import cycles among a package's modules (each once, from its smallest name);
  every import counts, a function's or an `if TYPE_CHECKING:` one too."""
  graph = {}
  for path in files:
    name = f"{package}.{path.stem}"
    graph[name] = sorted(m for m in _imported_names(path)
                         if m in {f"{package}.{p.stem}" for p in files} and m != name)
  cycles = set()

  def walk(node, trail):
    for nxt in graph[node]:
      if nxt in trail:
        cycle = trail[trail.index(nxt):]
        i = cycle.index(min(cycle))
        cycles.add(tuple(cycle[i:] + cycle[:i]))
      else:
        walk(nxt, trail + [nxt])
  for start in graph:
    walk(start, [start])
  return sorted(list(c) for c in cycles)


def test_launch_modules_import_each_other_without_a_cycle():
  """launch.local and launch.report both build on launch.points, not on each other."""
  files = [p for p in (REPO / "launch").glob("*.py") if p.stem != "__init__"]
  assert not _import_cycles(files, "launch")


def test_the_cycle_check_finds_a_cycle(tmp_path):
  (tmp_path / "a.py").write_text("from launch import b\n")
  (tmp_path / "b.py").write_text("if TYPE_CHECKING:\n  from launch.c import X\n")
  (tmp_path / "c.py").write_text("def f():\n  from launch import a\n")
  (tmp_path / "d.py").write_text("import launch.a\n")
  files = sorted(tmp_path.glob("*.py"))
  assert _import_cycles(files, "launch") == [["launch.a", "launch.b", "launch.c"]]
  (tmp_path / "c.py").write_text("")
  assert _import_cycles(files, "launch") == []

# -- the trainer names no kind of run ---------------------------------------------------------

def test_the_trainer_imports_nothing_from_downstream():
  """Fine-tuning and its task evaluation are parts chosen where the config is read
  (lm.parts.Parts, lm.downstream.finetune.PARTS, lm.main), not branches of lm/train.py;
  lm/parts.py, the parts' interface, is below both."""
  for name in ("lm/train.py", "lm/parts.py"):
    found = sorted(m for m in _imported_modules(REPO / name)
                   if m == "lm.downstream" or m.startswith("lm.downstream."))
    assert not found, f"{name} imports {found}: pass the part in (lm.parts.Parts) instead"

# -- derived config fields (issue 29): after the overrides, in lm.config.derive only -----------

DERIVING = ("required_targets_length", "required_extra_ids", "padded_vocab_size")


def test_config_files_leave_the_derived_fields_to_derive():
  """configs/*.py leave data.targets_length, data.extra_ids and model.vocab_size None: one
  computed inside get_config would not follow a `--config.*` override of what it depends on."""
  found = [f"{_rel(p)}: {name}" for p in sorted((REPO / "configs").glob("*.py"))
           for name in DERIVING if name in p.read_text(encoding="utf-8")]
  assert not found, f"config files computing a derived field (lm.config.derive does): {found}"


def test_code_that_loads_a_config_file_derives_it():
  """Every command or launcher that calls a config file's get_config derives the result."""
  missing = []
  for top in ("lm", "launch", "benchmarks", "experiments"):
    for path in sorted((REPO / top).rglob("*.py")):
      text = path.read_text(encoding="utf-8")
      if re.search(r"\.get_config\(", text) and ".derive(" not in text:
        missing.append(_rel(path))
  assert not missing, f"get_config without lm.config.derive after the overrides: {missing}"

# -- the ConfigDict is read at the boundary (issue 29) ------------------------------------------

# The config boundary (lm/config.py, lm/validate.py, lm/cli.py's override parser), the
# commands, and lm/restore.py's load_run (which reads a run's config.json and applies
# overrides). lm/train.py is not one: train_and_evaluate and build_run take RunSettings.
CONFIG_READERS = ("lm/config.py", "lm/validate.py", "lm/cli.py", "lm/main.py", "lm/plan.py",
                  "lm/mini_suite.py", "lm/evaluate.py", "lm/restore.py")


def _reads_config_dicts(path: pathlib.Path) -> bool:
  return any(m == "ml_collections" or m.startswith("ml_collections.")
             for m in _imported_modules(path))


def test_only_the_boundary_and_the_commands_import_ml_collections():
  """Every other module takes typed parts (lm.config.RunSettings and its fields)."""
  found = [_rel(p) for p in _py_files("lm") if _rel(p) not in CONFIG_READERS
           and _reads_config_dicts(p)]
  assert not found, f"modules reading a ConfigDict below the boundary: {found}"


def test_the_config_reader_check_sees_an_import(tmp_path):
  (tmp_path / "a.py").write_text("def f():\n  import ml_collections\n")
  (tmp_path / "b.py").write_text("from ml_collections import config_dict\n")
  (tmp_path / "c.py").write_text("import json\n")
  assert [_reads_config_dicts(tmp_path / n) for n in ("a.py", "b.py", "c.py")] == [
      True, True, False]
