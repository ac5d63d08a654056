"""The library does not reach back into the repository's config files, sweeps or launchers.

configs/, experiments/ and launch/ are used from the repository root and are not installed
(pyproject.toml installs `lm` only), so `lm` must import nothing from them.
"""
import ast
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]
OUTSIDE = ("configs", "experiments", "launch")


def _imported_modules(tree: ast.AST):
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield node.lineno, alias.name
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      yield node.lineno, node.module
    elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
          == "import_module" and node.args and isinstance(node.args[0], ast.Constant)):
      yield node.lineno, str(node.args[0].value)


def test_lm_imports_nothing_from_configs_experiments_or_launch():
  files = sorted((REPO / "lm").rglob("*.py"))
  assert len(files) > 20
  found = []
  for path in files:
    for line, module in _imported_modules(ast.parse(path.read_text(), str(path))):
      if module.split(".")[0] in OUTSIDE:
        found.append(f"{path.relative_to(REPO)}:{line} imports {module}")
  assert not found, found


def test_the_scan_sees_every_import_form():
  tree = ast.parse("import configs.t5\nfrom experiments import common\n"
                   "def f():\n  from launch import local\n  importlib.import_module('configs')\n")
  assert [m for _, m in _imported_modules(tree)] == ["configs.t5", "experiments", "launch",
                                                      "configs"]


def test_only_lm_is_installed():
  text = (REPO / "pyproject.toml").read_text()
  section = text.split("[tool.setuptools.packages.find]", 1)[1].split("\n[", 1)[0]
  assert re.findall(r"^include = (.*)$", section, re.M) == ['["lm*"]']


def test_config_files_import_at_the_top():
  """configs/ is data that imports lm at module level (no imports hidden in functions)."""
  found = []
  for path in sorted((REPO / "configs").glob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        found += [f"{path.name}:{n.lineno}" for n in ast.walk(node)
                  if isinstance(n, (ast.Import, ast.ImportFrom))]
  assert not found, found
