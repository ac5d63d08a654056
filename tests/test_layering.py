"""configs/, experiments/ and launch/ are used from the repository root and are not installed.

pyproject.toml installs `lm` only; configs/ is data that imports lm at the top. (That `lm`
imports nothing from them is checked in tests/test_code_shape.py.)
"""
import ast
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]


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
