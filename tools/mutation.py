"""Mutation testing of lm's pure core with cosmic-ray (outside CI: it is slow).

    pip install -e '.[mutation]'
    python tools/mutation.py lm/losses.py            # one module, its fast tests
    python tools/mutation.py --all                   # every module below (hours)
    python tools/mutation.py lm/losses.py --list     # count the mutants, run nothing
    python tools/mutation.py lm/losses.py --quick    # skip bitwise/shift/pow/mod mutants
    python tools/mutation.py lm/losses.py --retest /tmp/lm-mutation --workdir /tmp/lm-retest
                                                     # only an earlier run's survivors
    python tools/mutation.py lm/losses.py --lines 60-75,104 --workdir /tmp/lm-lines
                                                     # only mutants on lines rewritten since
    python tools/mutation.py lm/generation.py --functions filter_logits,beam_search
                                                     # only mutants inside these functions
    python tools/mutation.py lm/score.py --resume /tmp/lm-mutation --workdir /tmp/lm-rest
                                                     # the mutants a stopped run left pending

For each module, cosmic-ray (https://cosmic-ray.readthedocs.io) applies one mutation at
a time (operator swaps, changed constants, removed branches, ...) and runs the module's
tests against it; a mutant is KILLED when a test fails, SURVIVES when all pass. Every
survivor is either a missing test or an equivalent mutant (same behaviour); the score
and the list of survivors are recorded in docs/testing.md.

The run happens in a scratch copy of the repository (tracked and untracked-not-ignored
files), never in the working tree, so an interrupted run cannot leave a mutated file
behind. Tests run under `nice -n 19` with pytest-xdist off. Lines marked
`# pragma: no mutate` are skipped (cosmic-ray's cr-filter-pragma).

Results (the session database and a report) go to --workdir (default
/tmp/lm-mutation/<module>); the script prints the score and every survivor's diff.
Exit status 0 when the run completes (whatever the score), 2 on bad arguments, 1 when
the unmutated tests fail (the baseline must pass first).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# tests/downstream/test_mini.py's tests that build no more than each corpus's tasks once
# (9 s of its 36 s; left out: the subprocess digest, the token-budget and chance-level
# simulations, the unit-provenance scan and the larger corpus's caps).
_MINI = "tests/downstream/test_mini.py::test_"
MINI_FAST_TESTS = [_MINI + t for t in (
    "registered_with_splits_choices_and_descriptions",
    "unit_rules_and_input_cost_on_hand_computed_cases",
    "metrics_and_postprocessors_on_hand_computed_cases", "mini_average_is_the_mean_of_the_headlines",
    "docs_size_table_matches_the_embedded_corpus",
    "sizes_embedded_corpus_train_fills_its_cap_validation_is_not_small",
    "choice_tasks_follow_the_construction", "word_order_pairs_a_line_with_its_interior_scrambled",
    "completion_pairs_two_beginnings_with_their_endings",
    "fill_offers_the_blanked_word_and_three_words_not_in_the_line",
    "phrase_order_shuffles_the_three_middle_pieces_of_a_line",
    "answers_are_recoverable_from_the_inputs", "every_task_has_choices_holding_its_target",
    "train_and_validation_come_from_disjoint_documents", "bad_split_and_bad_corpora")]

# Module -> the fast tests that exercise it (the default suite's, plus the reference
# tests). Keep each list short: every mutant runs it once.
MODULE_TESTS: dict[str, list[str]] = {
    "lm/losses.py": ["tests/test_losses.py", "tests/test_losses_reference.py"],
    "lm/model/masks.py": ["tests/model/test_masks.py", "tests/model/test_attention.py"],
    "lm/model/position.py": ["tests/model/test_position.py", "tests/model/test_masks.py",
                             "tests/model/test_transformer_reference.py"],
    "lm/model/layers.py": ["tests/model/test_layers.py", "tests/model/test_transformer_reference.py"],
    "lm/model/attention.py": ["tests/model/test_attention.py",
                              "tests/model/test_attention_reference.py",
                              "tests/model/test_decoding.py"],
    "lm/model/fast_grads.py": ["tests/model/test_fast_grads.py", "tests/model/test_attention.py"],
    # The reference first (most mutants die there), decoding (the cache code's only caller).
    "lm/model/transformer.py": ["tests/model/test_transformer_reference.py",
                                "tests/model/test_decoding.py",
                                "tests/model/test_transformer.py"],
    "lm/model/accounting.py": ["tests/model/test_accounting.py"],
    "lm/model/transformer_config.py": ["tests/model/test_transformer_config.py"],
    "lm/model/presets.py": ["tests/model/test_accounting.py"],
    "lm/optim.py": ["tests/test_optim.py", "tests/test_optim_reference.py"],
    "lm/steps.py": ["tests/test_steps.py", "tests/test_steps_reference.py"],
    "lm/data/objectives.py": ["tests/data/test_objectives.py",
                              "tests/data/test_objectives_reference.py"],
    "lm/data/noise.py": ["tests/data/test_objectives.py",
                         "tests/data/test_objectives_reference.py"],
    "lm/data/lengths.py": ["tests/data/test_objectives.py",
                           "tests/data/test_objectives_reference.py",
                           "tests/data/test_lengths.py"],
    "lm/data/mixtures.py": ["tests/data/test_objectives.py", "tests/data/test_objective_mixtures.py"],
    "lm/data/features.py": ["tests/data/test_features.py"],
    "lm/data/converters.py": ["tests/data/test_converters.py", "tests/data/test_packing.py",
                              "tests/data/test_features.py"],
    "lm/data/packing.py": ["tests/data/test_packing.py", "tests/data/test_features.py"],
    "lm/data/records.py": ["tests/data/test_objectives.py", "tests/data/test_objective_mixtures.py",
                           "tests/data/test_pipeline.py"],
    "lm/data/stages.py": ["tests/data/test_pipeline.py", "tests/data/test_pipeline_reference.py"],
    # The searches on constructed score tables come first in the file (most mutants die
    # there); the model tests (prompt_batch, the cache glue, decode) after them; then the
    # glue's own tests (configs, prompt_batch and decode's dispatch first, the model last).
    "lm/generation.py": ["tests/test_decoding_search.py", "tests/test_decoding_glue.py"],
    "lm/score.py": ["tests/test_score.py"],
    "lm/checkpoint/hf_t5gemma2.py": ["tests/test_hf_t5gemma2.py"],
    # The by-hand tests first (no compile; most mutants die there), then the compiled plans.
    "lm/plan.py": ["tests/test_plan_units.py", "tests/test_plan.py"],
    "lm/costs.py": ["tests/test_plan_units.py", "tests/test_plan.py"],
    "lm/train.py": ["tests/test_train_helpers.py", "tests/test_parts.py",
                    "tests/test_robustness.py::test_check_finite_names_the_metric_and_the_last_checkpoint"],
    "lm/program.py": ["tests/test_train_helpers.py"],
    "lm/parts.py": ["tests/test_parts.py"],
    "lm/downstream/task_metrics.py": ["tests/downstream/test_task_metrics.py"],
    "lm/downstream/task.py": ["tests/downstream/test_t5_tasks.py", "tests/downstream/test_mini.py"],
    "lm/downstream/t5_tasks.py": ["tests/downstream/test_t5_tasks.py"],
    "lm/downstream/task_mixtures.py": ["tests/downstream/test_task_mixtures.py",
                                  "tests/downstream/test_best_results.py"],
    "lm/downstream/task_files.py": ["tests/downstream/test_task_files.py"],
    # The by-hand tests first (most mutants die there), the control's two, the corpora's.
    "lm/downstream/mini.py": ["tests/downstream/test_mini_formats.py",
                              "tests/test_mini_suite.py::test_surviving_share_on_hand_computed_values",
                              "tests/test_mini_suite.py::test_blank_inputs_keeps_targets_and_choices_of_real_suite_items",
                              *MINI_FAST_TESTS],
    "lm/downstream/mini_text.py": ["tests/downstream/test_mini_text.py",
                                   "tests/downstream/test_mini.py"],
    "lm/downstream/mini_builders.py": ["tests/downstream/test_mini_builders.py",
                                       *MINI_FAST_TESTS],
    "lm/mini_suite.py": ["tests/test_mini_suite.py"],
    "lm/downstream/evaluation.py": ["tests/test_downstream_evaluation.py",
                                    "tests/test_evaluate_task.py",
                                    "tests/downstream/test_best_results.py"],
    "lm/downstream/finetune_data.py": ["tests/test_finetune_data.py"],
    "lm/downstream/finetune.py": ["tests/downstream/test_finetune_eval.py", "tests/test_parts.py",
                                  "tests/test_finetune.py"],
    "lm/downstream/nlu_items.py": ["tests/downstream/test_nlu_items.py"],
    "lm/downstream/nlu_rules.py": ["tests/downstream/test_nlu_items.py"],
    "lm/downstream/nlu.py": ["tests/downstream/test_nlu.py"],
    "lm/downstream/contrasts.py": ["tests/downstream/test_contrasts.py",
                                   "tests/downstream/test_nlu_controls.py"],
    "lm/downstream/nlu_controls.py": ["tests/downstream/test_nlu_controls.py"],
    "lm/downstream/nlu_accept.py": ["tests/test_nlu_accept.py"],
}

# Module -> the only top-level functions / classes mutated by default (the rest of the module
# is I/O and orchestration that the fast tests do not reach; --functions or --lines override).
MODULE_FUNCTIONS: dict[str, list[str]] = {
    "lm/train.py": ["Preempted", "NonFiniteError", "_check_finite", "_evaluate_due",
                    "_warn_if_starved"],
    "lm/program.py": ["batch_shapes", "dummy_batch"],
}


def _run(cmd: list[str], cwd: Path, env: dict[str, str], check: bool = True,
         capture: bool = False) -> subprocess.CompletedProcess:
  print("+", " ".join(cmd), flush=True)
  return subprocess.run(cmd, cwd=cwd, env=env, check=check, text=True,
                        stdout=subprocess.PIPE if capture else None)


def _copy_repo(dest: Path) -> None:
  """Tracked + untracked-not-ignored files of the working tree (what the tests import)."""
  files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                         check=True, capture_output=True).stdout.decode().split("\0")
  for name in filter(None, files):
    src = REPO / name
    if src.is_file():
      (dest / name).parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(src, dest / name)


# --quick: skip replacing an arithmetic / comparison operator by a bitwise, shift, power,
# modulo or floor-division one. On float array code those mutants crash or change values
# wholesale, so they are (almost) always killed; skipping them cuts the run ~3x.
QUICK_EXCLUDE = [r"core/ReplaceBinaryOperator_\w+_(BitXor|BitAnd|BitOr|LShift|RShift|Mod|FloorDiv|Pow)$",
                 r"core/ReplaceBinaryOperator_(BitXor|BitAnd|BitOr|LShift|RShift|Mod|FloorDiv|Pow)_\w+$"]


def _config(module: str, tests: list[str], timeout: float, quick: bool) -> str:
  test_cmd = ("nice -n 19 python -m pytest -x -q -p no:xdist -p no:cacheprovider "
              + " ".join(tests))
  exclude = ", ".join(f"'{e}'" for e in QUICK_EXCLUDE) if quick else ""
  return textwrap.dedent(f"""\
      [cosmic-ray]
      module-path = "{module}"
      timeout = {timeout}
      excluded-modules = []
      test-command = "{test_cmd}"

      [cosmic-ray.distributor]
      name = "local"

      [cosmic-ray.filters.operators-filter]
      exclude-operators = [{exclude}]
      """)


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
  """((line, col), (end_line, end_col)) of every annotation in a module's source.

  Only for a module with `from __future__ import annotations`, where annotations are never
  evaluated, so mutating one (`int | None` -> `int + None`) cannot change behaviour: every
  such mutant is equivalent. [] for other modules (their annotations are evaluated).
  """
  import ast  # pylint: disable=g-import-not-at-top
  tree = ast.parse(source)
  future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
               and any(a.name == "annotations" for a in n.names) for n in tree.body)
  if not future:
    return []
  spans = []
  for node in ast.walk(tree):
    annotations = []
    if isinstance(node, ast.arg):
      annotations.append(node.annotation)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      annotations.append(node.returns)
    elif isinstance(node, ast.AnnAssign):
      annotations.append(node.annotation)
    spans += [((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset))
              for a in annotations if a is not None]
  return spans


def skip_annotation_mutants(session: Path, module: Path) -> int:
  """Marks the session's mutants that lie inside an annotation as skipped; returns how many."""
  from cosmic_ray.work_db import WorkDB, use_db  # pylint: disable=g-import-not-at-top
  from cosmic_ray.work_item import WorkerOutcome, WorkResult  # pylint: disable=g-import-not-at-top
  spans = annotation_spans(module.read_text())
  skipped = 0
  with use_db(str(session), WorkDB.Mode.open) as db:
    for item in list(db.pending_work_items):
      if all(any(lo <= tuple(m.start_pos) and tuple(m.end_pos) <= hi for lo, hi in spans)
             for m in item.mutations):
        db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
        skipped += 1
  return skipped


def parse_lines(spec: str) -> list[tuple[int, int]]:
  """'65-73,104,110-112' -> [(65, 73), (104, 104), (110, 112)] (inclusive line ranges)."""
  ranges = []
  for part in spec.split(","):
    lo, dash, hi = part.strip().partition("-")
    try:
      ranges.append((int(lo), int(hi if dash else lo)))
    except ValueError:
      raise SystemExit(f"error: bad --lines {spec!r}; expected ranges like 65-73,104") from None
    if ranges[-1][0] > ranges[-1][1] or ranges[-1][0] < 1:
      raise SystemExit(f"error: bad --lines range {part.strip()!r}; expected first <= last, >= 1")
  return ranges


def function_lines(source: str, names: list[str]) -> list[tuple[int, int]]:
  """The inclusive line ranges of the named top-level functions / classes of a module's
  source (decorators included), in the order named; an unknown name is an error."""
  import ast  # pylint: disable=g-import-not-at-top
  spans = {}
  for node in ast.parse(source).body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      first = min([node.lineno] + [d.lineno for d in node.decorator_list])
      spans[node.name] = (first, node.end_lineno)
  unknown = [n for n in names if n not in spans]
  if unknown:
    raise SystemExit(f"error: no top-level function or class {unknown} in the module; "
                     f"expected some of {sorted(spans)}")
  return [spans[n] for n in names]


def skip_mutants_outside(session: Path, lines: list[tuple[int, int]]) -> int:
  """Marks the session's mutants that start on none of `lines` as skipped; returns how many.
  For re-running only the lines rewritten since an earlier run (their old mutants are gone
  from --retest's view)."""
  from cosmic_ray.work_db import WorkDB, use_db  # pylint: disable=g-import-not-at-top
  from cosmic_ray.work_item import WorkerOutcome, WorkResult  # pylint: disable=g-import-not-at-top
  skipped = 0
  with use_db(str(session), WorkDB.Mode.open) as db:
    for item in list(db.pending_work_items):
      if not any(lo <= m.start_pos[0] <= hi for m in item.mutations for lo, hi in lines):
        db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
        skipped += 1
  return skipped


def jax_cache_env(cache_dir: Path) -> dict[str, str]:
  """Environment that turns on JAX's persistent compilation cache for every mutant's tests.

  Most of a JAX module's per-mutant time is XLA compiling functions the mutant did not
  touch (the tests' references, the unmutated layers); the cache is keyed by the compiled
  program itself, so a mutated function misses it and is compiled afresh, while the rest
  is read back (lm/optim.py's tests: 13 s unmutated without the cache, 5 s with it).
  """
  return {"JAX_COMPILATION_CACHE_DIR": str(cache_dir),
          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
          "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def mutant_timeout(baseline_seconds: float) -> float:
  """Seconds a mutant's tests may run before it counts as killed (a loop made endless):
  10x the unmutated run (cosmic-ray's own baseline, process start-up included), at least
  30 s so a busy machine does not turn slow passes into kills."""
  return max(30.0, 10.0 * baseline_seconds)


def _results(session: Path, cwd: Path, env: dict[str, str]) -> list[tuple[dict, dict]]:
  out = _run(["cosmic-ray", "dump", str(session)], cwd, env, capture=True).stdout
  return [tuple(json.loads(line)) for line in out.splitlines() if line.strip()]


def run_module(module: str, tests: list[str], workdir: Path, timeout: float | None,
               list_only: bool, quick: bool,
               lines: list[tuple[int, int]] | None = None,
               resume: Path | None = None) -> dict:
  """Runs (or counts) the mutants of one module; returns a summary dict.

  `resume`: an earlier, stopped run's --workdir for this module; only the mutants it left
  pending run (with the current tests), and only they are counted. The module's text must
  be the one that run mutated (the pending mutants are positions in it).
  """
  if not (REPO / module).is_file():
    raise SystemExit(f"error: unknown module {module!r} (no such file; paths are relative to "
                     f"{REPO}); expected one of {list(MODULE_TESTS)}")
  if resume:
    earlier = resume / "session.sqlite"
    if not earlier.is_file():
      raise SystemExit(f"error: no earlier run in {resume} (expected {earlier})")
    if (resume / "repo" / module).read_text() != (REPO / module).read_text():
      raise SystemExit(f"error: {module} has changed since the run in {resume}; its pending "
                       "mutants are positions in the old text: start a new run instead")
  workdir.mkdir(parents=True, exist_ok=True)
  copy = workdir / "repo"
  if copy.exists():
    shutil.rmtree(copy)
  copy.mkdir()
  _copy_repo(copy)
  env = dict(os.environ, PYTHONPATH=str(copy), **jax_cache_env(workdir.parent / "jax-cache"))
  config = workdir / "cosmic-ray.toml"
  config.write_text(_config(module, tests, timeout or 300.0, quick))  # set after the baseline
  session = workdir / "session.sqlite"
  session.unlink(missing_ok=True)
  if resume:
    shutil.copyfile(resume / "session.sqlite", session)
  else:
    _run(["cosmic-ray", "init", str(config), str(session)], copy, env)
    _run(["cr-filter-pragma", str(session)], copy, env)
    _run(["cr-filter-operators", str(session), str(config)], copy, env)
    print(f"skipped {skip_annotation_mutants(session, copy / module)} mutants inside "
          "annotations (never evaluated: equivalent)", flush=True)
    if lines:
      print(f"skipped {skip_mutants_outside(session, lines)} mutants outside lines {lines}",
            flush=True)
  pending = {item["job_id"] for item, result in _results(session, copy, env) if not result}
  n = len(pending)
  if list_only:
    print(f"{module}: {n} mutants")
    return {"module": module, "mutants": n}
  t0 = time.perf_counter()
  baseline = _run(["cosmic-ray", "baseline", str(config)], copy, env, check=False)
  if baseline.returncode != 0:
    print(f"error: the unmutated tests fail for {module}; fix them before mutation testing.",
          file=sys.stderr)
    raise SystemExit(1)
  if timeout is None:
    # A mutant that makes a loop run forever is killed by the timeout: waiting a fixed 300 s
    # for each made such mutants most of a NumPy module's run time.
    timeout = mutant_timeout(time.perf_counter() - t0)
    config.write_text(_config(module, tests, timeout, quick))
  print(f"per-mutant timeout {timeout:.0f} s", flush=True)
  _run(["nice", "-n", "19", "cosmic-ray", "exec", str(config), str(session)], copy, env)
  results = [(item, result) for item, result in _results(session, copy, env)
             if item["job_id"] in pending]
  killed, survived, other = [], [], []
  for item, result in results:
    if not result:
      other.append((item, result))
    elif result.get("test_outcome") == "killed":
      killed.append((item, result))
    elif result.get("test_outcome") == "survived":
      survived.append((item, result))
    else:
      other.append((item, result))
  report = _run(["cr-report", "--show-pending", str(session)], copy, env, check=False,
                capture=True).stdout
  (workdir / "report.txt").write_text(report)
  total = len(killed) + len(survived)
  score = 100.0 * len(killed) / total if total else float("nan")
  print(f"\n{module}: {len(killed)} killed / {total} run ({score:.1f} %), "
        f"{len(other)} skipped or incompetent; report in {workdir / 'report.txt'}")
  for item, result in survived:
    spec = item["mutations"][0]
    print(f"\nSURVIVED {spec['operator_name']} at line {spec['start_pos'][0]}:\n"
          f"{result.get('diff', '')}")
  return {"module": module, "killed": len(killed), "survived": len(survived),
          "other": len(other), "score": score}


def _signature(mutation: dict, lines: list[str]) -> tuple:
  """A mutant's identity that survives edits elsewhere in the module: its operator, the text
  of its line and its columns (not the line number or the occurrence count)."""
  (line, col), (end_line, end_col) = mutation["start_pos"], mutation["end_pos"]
  text = "".join(lines[line - 1:end_line])
  return mutation["operator_name"], text, col, end_col


def retest_survivors(module: str, tests: list[str], previous: Path, workdir: Path,
                     timeout: float | None) -> dict:
  """Runs only the mutants that survived an earlier run (`previous`: its --workdir for this
  module) against the current code and tests: after adding tests for survivors, shows which
  they now kill without running every mutant again. A survivor whose line has changed since
  is reported as gone."""
  old_copy, old_session = previous / "repo", previous / "session.sqlite"
  if not old_session.is_file():
    raise SystemExit(f"error: no earlier run in {previous} (expected {old_session}); run "
                     f"`python tools/mutation.py {module}` first.")

  def numbered(items, lines):
    """(signature, k): the k-th mutant with that signature (one operator can make several
    mutants at one place, e.g. a constant replaced by two others), in occurrence order."""
    seen: dict[tuple, int] = {}
    out = []
    for item in sorted(items, key=lambda i: i["mutations"][0]["occurrence"]):
      sig = _signature(item["mutations"][0], lines)
      seen[sig] = seen.get(sig, -1) + 1
      out.append(((sig, seen[sig]), item))
    return out

  env = dict(os.environ, PYTHONPATH=str(old_copy))
  old_lines = (old_copy / module).read_text().splitlines(keepends=True)
  old_results = _results(old_session, old_copy, env)
  diffs = {item["job_id"]: result.get("diff", "") for item, result in old_results if result}
  wanted = {}
  outcome_of = {item["job_id"]: (result or {}).get("test_outcome") for item, result in old_results}
  for key, item in numbered([i for i, _ in old_results], old_lines):
    if outcome_of[item["job_id"]] == "survived":
      wanted[key] = diffs[item["job_id"]]
  # A fresh session over the current code gives each mutant's current occurrence index
  # (mutants it skips, e.g. inside annotations, are not run again).
  run_module(module, tests, workdir, timeout, list_only=True, quick=False)
  copy = workdir / "repo"
  env = dict(os.environ, PYTHONPATH=str(copy), **jax_cache_env(workdir.parent / "jax-cache"))
  lines = (copy / module).read_text().splitlines(keepends=True)
  current = _results(workdir / "session.sqlite", copy, env)
  found = {}
  for key, item in numbered([i for i, r in current if not r], lines):
    if key in wanted:
      m = item["mutations"][0]
      found[key] = (m["operator_name"], m["occurrence"])
  # cosmic-ray's mutate-and-test has no timeout of its own: a mutant that makes a loop endless
  # would hang the retest, so coreutils' timeout ends it (a nonzero exit: killed, as in a run).
  test_cmd = (f"timeout {int(timeout or 300)} python -m pytest -x -q -p no:xdist "
              "-p no:cacheprovider " + " ".join(tests))
  outcome = {}
  for sig, (operator, occurrence) in found.items():
    out = _run(["cosmic-ray", "mutate-and-test", module, operator,
                str(occurrence), test_cmd], copy, env, check=False, capture=True).stdout
    result = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    outcome[sig] = result.get("test_outcome", "error")
  killed = [s for s, o in outcome.items() if o == "killed"]
  still = [s for s, o in outcome.items() if o != "killed"]
  gone = [s for s in wanted if s not in found]
  print(f"\n{module}: of {len(wanted)} earlier survivors, {len(killed)} now killed, "
        f"{len(still)} still survive, {len(gone)} gone (their line changed, or they are "
        "now skipped as equivalent)")
  for sig in still:
    print(f"\nSTILL SURVIVES {sig[0][0]}:\n{wanted[sig]}")
  return {"module": module, "survivors": len(wanted), "killed": len(killed),
          "still": len(still), "gone": len(gone)}


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("modules", nargs="*", help=f"modules to mutate, of: {', '.join(MODULE_TESTS)}")
  parser.add_argument("--all", action="store_true", help="every module in MODULE_TESTS")
  parser.add_argument("--tests", nargs="+", help="override the test files (one module only)")
  parser.add_argument("--workdir", type=Path, default=Path("/tmp/lm-mutation"))
  parser.add_argument("--timeout", type=float, default=None,
                      help="seconds per mutant's test run before it counts as killed (default: "
                           "10x the unmutated run, at least 30 s)")
  parser.add_argument("--list", action="store_true", help="count mutants, run nothing")
  parser.add_argument("--quick", action="store_true",
                      help="skip bitwise/shift/pow/mod/floordiv replacements (see QUICK_EXCLUDE)")
  parser.add_argument("--lines", metavar="RANGES",
                      help="only mutants on these lines of the module, e.g. 65-73,104 (the "
                           "lines rewritten since an earlier run; one module only)")
  parser.add_argument("--functions", metavar="NAMES",
                      help="only mutants inside these top-level functions / classes, e.g. "
                           "filter_logits,beam_search (one module only; default for a module "
                           "in MODULE_FUNCTIONS: its list; 'all' for the whole module)")
  parser.add_argument("--retest", type=Path, metavar="EARLIER_WORKDIR",
                      help="run only the survivors of an earlier run (its --workdir) against "
                           "the current code and tests")
  parser.add_argument("--resume", type=Path, metavar="EARLIER_WORKDIR",
                      help="run only the mutants an earlier, stopped run (its --workdir) left "
                           "pending, with the current tests; the module must be unchanged")
  args = parser.parse_args(argv)
  modules = list(MODULE_TESTS) if args.all else args.modules
  if not modules:
    parser.error("name a module (e.g. lm/losses.py) or pass --all")
  if args.tests and len(modules) != 1:
    parser.error("--tests needs exactly one module")
  if args.lines and (len(modules) != 1 or args.retest):
    parser.error("--lines needs exactly one module and no --retest")
  if args.functions and (len(modules) != 1 or args.retest or args.lines):
    parser.error("--functions needs exactly one module and no --retest or --lines")
  if args.resume and (args.retest or args.lines or args.functions or args.list):
    parser.error("--resume takes no --retest, --lines, --functions or --list (the earlier "
                 "run chose its mutants)")
  lines = parse_lines(args.lines) if args.lines else None
  unknown = [m for m in modules if m not in MODULE_TESTS and not args.tests]
  if unknown:
    parser.error(f"unknown module(s) {unknown} (no test list); expected one of "
                 f"{list(MODULE_TESTS)}, or pass --tests, or add it to MODULE_TESTS")
  if shutil.which("cosmic-ray") is None:
    parser.error("cosmic-ray is not installed; run: pip install -e '.[mutation]'")
  summaries = []
  for module in modules:
    slug = module.replace("/", "_").removesuffix(".py")
    if args.retest:
      summaries.append(retest_survivors(module, args.tests or MODULE_TESTS[module],
                                        args.retest / slug, args.workdir / slug,
                                        args.timeout))
      continue
    names = (args.functions.split(",") if args.functions
             else None if lines or args.resume else MODULE_FUNCTIONS.get(module))
    module_lines = lines
    if names and names != ["all"] and (REPO / module).is_file():
      module_lines = function_lines((REPO / module).read_text(), [n.strip() for n in names])
      print(f"{module}: mutating {', '.join(names)} only (lines {module_lines})", flush=True)
    summaries.append(run_module(module, args.tests or MODULE_TESTS[module],
                                args.workdir / slug, args.timeout, args.list, args.quick,
                                module_lines, args.resume / slug if args.resume else None))
  print("\n" + json.dumps(summaries, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
