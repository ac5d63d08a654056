"""tools/mutation.py's pure parts: which mutants are equivalent by construction, and how a
survivor is recognised again after the module changed."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools"))
import mutation  # noqa: E402  pylint: disable=wrong-import-position

SOURCE = '''from __future__ import annotations
x: int | None = None
def f(a: int | None, *, b: dict[str, int] = None) -> list[int] | None:
  return [a | 1]
'''


def test_annotation_spans_cover_annotations_only():
  spans = mutation.annotation_spans(SOURCE)
  lines = SOURCE.splitlines()
  texts = sorted(lines[lo[0] - 1][lo[1]:hi[1]] for lo, hi in spans)
  assert texts == ["dict[str, int]", "int | None", "int | None", "list[int] | None"]
  # The `|` in the body is code, not an annotation: outside every span.
  col = lines[3].index("|")
  assert not any(lo <= (4, col) < hi for lo, hi in spans)
  # Without `from __future__ import annotations` annotations are evaluated: no spans.
  assert mutation.annotation_spans(SOURCE.split("\n", 1)[1]) == []


def test_a_survivor_is_recognised_after_lines_above_it_change():
  m = {"operator_name": "core/NumberReplacer", "start_pos": [2, 9], "end_pos": [2, 10]}
  before = ["def f():\n", "  return 0\n"]
  after = ["# a new comment\n", "def f():\n", "  return 0\n"]
  moved = dict(m, start_pos=[3, 9], end_pos=[3, 10])
  assert mutation._signature(m, before) == mutation._signature(moved, after)  # pylint: disable=protected-access
  changed = ["def f():\n", "  return 1\n"]
  assert mutation._signature(m, before) != mutation._signature(m, changed)  # pylint: disable=protected-access


def test_mutant_timeout_is_ten_baselines_and_at_least_thirty_seconds():
  assert mutation.mutant_timeout(1.6) == 30.0
  assert mutation.mutant_timeout(3.0) == 30.0
  assert mutation.mutant_timeout(9.0) == 90.0


def test_jax_cache_env_turns_on_the_persistent_cache_for_every_compile(tmp_path):
  env = mutation.jax_cache_env(tmp_path / "cache")
  assert env == {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache"),
                 "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                 "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def test_parse_lines_reads_inclusive_ranges_and_refuses_bad_ones():
  import pytest  # pylint: disable=g-import-not-at-top
  assert mutation.parse_lines("65-73,104, 110-112") == [(65, 73), (104, 104), (110, 112)]
  for bad in ("65-", "a-3", "9-3", "0-2", ""):
    with pytest.raises(SystemExit, match="bad --lines"):
      mutation.parse_lines(bad)


def test_function_lines_spans_named_top_level_definitions_and_refuses_unknown_names():
  import pytest  # pylint: disable=g-import-not-at-top
  source = ("import x\n"                  # 1
            "@decorator\n"                # 2
            "def f(a):\n"                 # 3
            "  return a\n"                # 4
            "class C:\n"                  # 5
            "  def f(self):\n"            # 6
            "    return 1\n"              # 7
            "y = 2\n")                    # 8
  assert mutation.function_lines(source, ["C", "f"]) == [(5, 7), (2, 4)]
  with pytest.raises(SystemExit, match=r"no top-level function or class \['g'\]"):
    mutation.function_lines(source, ["f", "g"])


def test_every_module_has_existing_tests_and_its_named_functions():
  repo = os.path.dirname(mutation.__file__) + "/.."
  for module, tests in mutation.MODULE_TESTS.items():
    assert os.path.isfile(os.path.join(repo, module)), module
    for test in tests:
      assert os.path.isfile(os.path.join(repo, test.split("::")[0])), (module, test)
  for module, names in mutation.MODULE_FUNCTIONS.items():
    assert module in mutation.MODULE_TESTS, module
    with open(os.path.join(repo, module)) as f:
      assert len(mutation.function_lines(f.read(), names)) == len(names)


def test_resume_refuses_a_missing_run_and_a_module_changed_since(tmp_path):
  import pytest  # pylint: disable=g-import-not-at-top
  module, earlier = "lm/losses.py", tmp_path / "earlier"
  with pytest.raises(SystemExit, match="no earlier run"):
    mutation.run_module(module, [], tmp_path / "new", None, False, True, resume=earlier)
  (earlier / "repo" / "lm").mkdir(parents=True)
  (earlier / "session.sqlite").write_text("")
  (earlier / "repo" / module).write_text("x = 1\n")
  with pytest.raises(SystemExit, match="has changed since the run"):
    mutation.run_module(module, [], tmp_path / "new", None, False, True, resume=earlier)
  assert not (tmp_path / "new").exists()  # refused before anything is written
  with pytest.raises(SystemExit):
    mutation.main([module, "--resume", str(earlier), "--lines", "3"])
