"""launch/sweep.py, launch/stage.py and the report's rankings: expansion, quoting, resume."""
import dataclasses
import json
import os
import pathlib
import shlex
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from launch import local, report, stage, sweep
from launch import points as points_lib

REPO = pathlib.Path(__file__).resolve().parents[1]
# Characters a shell would act on: every one must reach the program as a literal.
HOSTILE = "a b'c\"d;e$(touch pwned)`touch pwned2`\\f\ng*"


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
  monkeypatch.chdir(REPO)  # experiments name configs/ relative to the repository


def _hostile_experiment(tmp_path) -> str:
  path = tmp_path / "hostile_study.py"
  path.write_text(
      "def sweep(add):\n"
      "  add(name='p1.x', config='configs/t5.py:objective=bert', overrides={'wandb.notes': "
      f"{HOSTILE!r}}}, reference={{'GLUE': 80.0}})\n"
      "  add(name='p2', config='configs/t5.py:arch=causal', reference={'GLUE': 70.0})\n")
  return str(path)


def _shell_lines(text: str) -> list[str]:
  """The text's lines, a line continued while a quote is open (a quoted newline)."""
  out, buf = [], ""
  for line in text.splitlines():
    buf = f"{buf}\n{line}" if buf else line
    try:
      shlex.split(buf)
    except ValueError:  # no closing quotation: the argument goes on on the next line
      continue
    out.append(buf)
    buf = ""
  assert not buf, buf
  return out


def _dry_run(capsys, *args) -> list[str]:
  assert sweep.main([*args, "--dry_run"]) == 0
  return _shell_lines(capsys.readouterr().out)


def test_a_study_expands_to_its_stages_with_its_overrides_at_both_scales():
  tiny = points_lib.collect("experiments/t5_span_length.py", runlocal=True)
  span3 = next(p for p in tiny if p.name == "span_03")
  got = sweep.stages(span3, "runs/t7", scale="tiny", study="t5_span_length")
  assert [s.name for s in got] == ["pretrain", "mini", "evaluate", "nlu"]
  pre = list(got[0].argv)
  assert pre[:4] == ["python", "-m", "lm.main", f"--config={span3.config}"]
  assert "runlocal" in span3.config and "--workdir=runs/t7/span_03" in pre
  assert "--config.wandb.group=t5_span_length" in pre and "--config.wandb.name=span_03" in pre
  assert all(arg in pre for arg in span3.override_args())
  mini = list(got[1].argv)
  assert mini[:3] == ["python", "-m", "lm.mini_suite"]
  assert "--workdir=runs/t7/span_03" in mini and "--output=runs/t7/span_03/mini" in mini
  # The mini suite accepts the config the stage passes (its lengths fit the suite's examples).
  from lm import mini_suite
  config = next(a for a in mini if a.startswith("--config="))[len("--config="):]
  mini_suite.suite_config(mini_suite.load_config(config), "runs/t7/span_03")
  assert [s.done for s in got] == [f"runs/t7/span_03/sweep/{n}.json"
                                   for n in ("pretrain", "mini", "evaluate", "nlu")]
  assert [s.every_process for s in got] == [True, False, False, False]
  # The yardstick scores the pre-trained run, and runs again when pre-training does.
  assert list(got[3].argv) == ["python", "-m", "lm.evaluate", "--workdir=runs/t7/span_03",
                               "--suite=nlu"]
  assert got[3].after == ("runs/t7/span_03/sweep/pretrain.json",)
  from lm.downstream import nlu_items  # new items (ITEMS_VERSION) score the runs again
  assert got[3].version == f"nlu_items={nlu_items.ITEMS_VERSION}"
  quick = sweep.stages(span3, "r", scale="tiny", study="s", which=("nlu",),
                       nlu_extra=("--items=heldout",))
  assert list(quick[0].argv)[-2:] == ["--suite=nlu", "--items=heldout"]
  # --nlu_steps: the growth control scores earlier checkpoints, which pre-training keeps.
  growth = sweep.stages(span3, "r", scale="tiny", study="s", which=("pretrain", "nlu"),
                        nlu_steps=(500, 250, 500))
  assert [s.name for s in growth] == ["pretrain", "nlu", "nlu_growth"]
  assert "--config.ckpt.keep_steps=(250, 500)" in growth[0].argv
  assert list(growth[2].argv) == [*growth[1].argv, "--steps=250,500"]
  assert growth[2].done == "r/span_03/sweep/nlu_growth.json"
  assert growth[2].after == ("r/span_03/sweep/pretrain.json",)
  assert growth[2].version == growth[1].version
  assert not any("keep_steps" in a for a in got[0].argv)
  with pytest.raises(ValueError, match=r"--nlu_steps must be positive pre-training steps"):
    sweep.stages(span3, "r", scale="tiny", study="s", nlu_steps=(0,))
  paper = next(p for p in points_lib.collect("experiments/t5_span_length.py")
               if p.name == "span_03")
  assert "runlocal" not in paper.config
  got = sweep.stages(paper, "gs://b/t7", scale="paper", study="s", data_dir="gs://b/data")
  assert [s.name for s in got] == ["pretrain", "ft_glue", "ft_super_glue", "ft_cnndm",
                                   "ft_squad", "ft_ende", "ft_enfr", "ft_enro", "evaluate", "nlu"]
  glue = list(got[1].argv)
  assert "--config.ckpt.init_from=gs://b/t7/span_03" in glue
  assert "--config.finetune.data_dir=gs://b/data" in glue
  assert "--workdir=gs://b/t7/span_03/ft_glue" in glue
  with pytest.raises(ValueError, match="--data_dir"):
    sweep.stages(paper, "r", scale="paper", study="s")
  assert [s.name for s in sweep.stages(paper, "r", scale="paper", study="s",
                                       which=("pretrain", "evaluate"))] == ["pretrain", "evaluate"]


def test_seed_replicates_of_the_baseline_reach_every_stage(capsys, tmp_path):
  points = points_lib.collect("experiments/t5_span_length.py", runlocal=True)
  got = points_lib.seed_replicates(points, 3)
  assert [p.name for p in got] == [p.name for p in points] + ["iid_seed1", "iid_seed2"]
  rep = got[-1]
  base = next(p for p in points if p.baseline)
  assert rep.replicate_of == "iid" and not rep.baseline and rep.reference == {}
  assert rep.config == base.config and rep.overrides == {**base.overrides, "train.seed": 2,
                                                         "data.seed": 2}
  assert points_lib.seed_replicates(points, 1) == points
  with pytest.raises(ValueError, match="--seeds"):
    points_lib.seed_replicates(points, 0)
  # Through the command line: pre-training gets both seeds, the mini suite its train.seed.
  assert sweep.main(["experiments/t5_span_length.py", f"--root={tmp_path}", "--scale=tiny",
                     "--seeds=2", "--only=iid_seed1", "--dry_run", "--no_validate"]) == 0
  lines = [shlex.split(line) for line in capsys.readouterr().out.splitlines()]
  pre, mini = lines[0], lines[1]
  assert f"--workdir={tmp_path}/iid_seed1" in pre
  assert "--config.train.seed=1" in pre and "--config.data.seed=1" in pre
  assert "--config.train.seed=1" in mini and "--config.data.seed=1" not in mini
  # A point's name brings its replicates along.
  assert sweep.main(["experiments/t5_span_length.py", f"--root={tmp_path}", "--scale=tiny",
                     "--seeds=3", "--seeds_of=all", "--only=span_03", "--stages=pretrain",
                     "--dry_run", "--no_validate"]) == 0
  workdirs = [a.split("=", 1)[1] for line in capsys.readouterr().out.splitlines()
              for a in shlex.split(line) if a.startswith("--workdir=")]
  assert workdirs == [f"{tmp_path}/span_03{k}" for k in ("", "_seed1", "_seed2")]


def test_report_shows_the_seed_spread_and_ranks_without_replicates(tmp_path):
  points = [points_lib.Point(name=n, config="c", overrides={}, reference={"GLUE": g},
                        baseline=n == "a") for n, g in (("a", 83.0), ("b", 82.0), ("c", 75.0))]
  points = points_lib.seed_replicates(points, 3)
  for name, mini in (("a", 40.0), ("b", 45.0), ("c", 30.0), ("a_seed1", 44.0),
                     ("a_seed2", 39.0)):
    (tmp_path / name / "mini").mkdir(parents=True)
    (tmp_path / name / "mini" / "mini_suite.json").write_text(json.dumps({"mini": mini}))
  text = report.write_report(str(tmp_path), points, experiment="exp")
  assert "## Seed spread of `a`" in text
  # mean 41, sd sqrt(((-1)^2 + 3^2 + (-2)^2) / 2) = sqrt(7), range 5.
  assert (f"| our decoder fluency (mini) | 40.000, 44.000, 39.000 | 41.000 | "
          f"{7 ** 0.5:.3f} | 5.000 |" in text)
  assert report.replicates_present(str(tmp_path), points[:3]) == {"a": 2}
  # Every point's replicates declared, none of b's and c's run (a sweep with --only=a):
  # no empty seed-spread sections for them.
  every = points_lib.seed_replicates(points[:3], 3, every_point=True)
  text = report.write_report(str(tmp_path), every, experiment="exp")
  assert "## Seed spread of `a`" in text
  assert "Seed spread of `b`" not in text and "Seed spread of `c`" not in text


def test_seed_replicates_of_every_point_follow_their_points():
  points = [points_lib.Point(name=n, config="c", overrides={"x": n}, reference={"GLUE": 1.0},
                             baseline=n == "b") for n in ("a", "b")]
  got = points_lib.seed_replicates(points, 3, every_point=True)
  assert [p.name for p in got] == ["a", "b", "a_seed1", "a_seed2", "b_seed1", "b_seed2"]
  assert [p.replicate_of for p in got] == ["", "", "a", "a", "b", "b"]
  assert got[3].overrides == {"x": "a", "train.seed": 2, "data.seed": 2}
  assert not any(p.baseline or p.reference for p in got[2:])
  assert points_lib.seed_replicates(points, 3) == points + got[4:]  # the baseline's only
  assert points_lib.replicate(points, {"a": 1}) == got[:3]
  with pytest.raises(ValueError, match=r"unknown point\(s\) \['z'\]"):
    points_lib.replicate(points, {"z": 1})
  clash = points + [points_lib.Point(name="a_seed1", config="c", overrides={})]
  with pytest.raises(ValueError, match="'a_seed1' clashes"):
    points_lib.seed_replicates(clash, 2, every_point=True)


def test_sweep_seeds_of_all_runs_every_points_replicates(capsys, tmp_path):
  assert sweep.main(["experiments/t5_span_length.py", f"--root={tmp_path}", "--scale=tiny",
                     "--seeds=2", "--seeds_of=all", "--stages=pretrain", "--dry_run",
                     "--no_validate"]) == 0
  workdirs = [a.split("=", 1)[1] for line in capsys.readouterr().out.splitlines()
              for a in shlex.split(line) if a.startswith("--workdir=")]
  names = [p.name for p in points_lib.collect("experiments/t5_span_length.py", runlocal=True)]
  assert workdirs == [f"{tmp_path}/{n}" for n in names + [f"{n}_seed1" for n in names]]


def test_report_reads_the_replicates_of_every_point_from_the_root(tmp_path, capsys):
  """With no --seeds, launch.report takes each point's replicates from the workdirs there."""
  points = [points_lib.Point(name=n, config="c", overrides={}, reference={"GLUE": g},
                             baseline=n == "a") for n, g in (("a", 83.0), ("b", 82.0))]
  for name in ("a", "b", "b_seed1", "b_seed2", "a_seed2"):  # a_seed2 without a_seed1: not one
    (tmp_path / name).mkdir()
  assert report.replicates_present(str(tmp_path), points) == {"b": 2}
  exp = tmp_path / "exp.py"
  exp.write_text("def sweep(add):\n"
                 "  add(name='a', config='configs/t5.py:runlocal', baseline=True)\n"
                 "  add(name='b', config='configs/t5.py:runlocal')\n")
  for name in ("a", "b", "b_seed1", "b_seed2"):
    (tmp_path / name / "mini").mkdir()
    (tmp_path / name / "mini" / "mini_suite.json").write_text(json.dumps({"mini": 40.0}))
  assert report.main([str(exp), f"--root={tmp_path}"]) == 0
  text = (tmp_path / "report.md").read_text()
  assert "## Seed spread of `b`" in text and "## Seed spread of `a`" not in text
  assert "`b` run with 3 seeds (b, b_seed1, b_seed2;" in text
  # --seeds (and --seeds_of) say it instead: the baseline's one replicate, then every point's.
  (tmp_path / "a_seed1" / "mini").mkdir(parents=True)
  (tmp_path / "a_seed1" / "mini" / "mini_suite.json").write_text(json.dumps({"mini": 41.0}))
  assert report.main([str(exp), f"--root={tmp_path}", "--seeds=2"]) == 0
  text = (tmp_path / "report.md").read_text()
  assert "`a` run with 2 seeds (a, a_seed1;" in text and "Seed spread of `b`" not in text
  assert report.main([str(exp), f"--root={tmp_path}", "--seeds=2", "--seeds_of=all"]) == 0
  assert "`b` run with 2 seeds (b, b_seed1;" in (tmp_path / "report.md").read_text()
  capsys.readouterr()


def test_model_overrides_and_architecture_reach_the_fine_tuning_config():
  points = points_lib.collect("experiments/t5_architectures.py", runlocal=True)
  six = next(p for p in points if p.name == "encdec6_denoising")
  mini = list(sweep.stages(six, "r", scale="tiny", study="s")[1].argv)
  assert "--config.model.num_layers=1" in mini  # the runlocal 6-layer row's depth
  lm = next(p for p in points if p.name == "lm_denoising")
  config = next(a for a in sweep.stages(lm, "r", scale="tiny", study="s")[1].argv
                if a.startswith("--config="))
  items = config.split(":", 1)[1].split(",")
  assert "arch=causal" in items and "runlocal" in items
  assert {"inputs_length=128", "targets_length=128"} <= set(items)  # the suite's lengths


def test_local_dry_run_tokens_are_literal(capsys, tmp_path):
  root = str(tmp_path / "root with space;$(x)")
  lines = _dry_run(capsys, _hostile_experiment(tmp_path), f"--root={root}")
  assert len(lines) == 9  # 2 points x (pretrain, mini, evaluate, nlu) + the random-init suite
  scratch = shlex.split(lines[-1])
  assert scratch[3] == f"--done={root}/random_init/sweep/mini.json"
  assert scratch[-1] == "--from_scratch" and f"--output={root}/random_init/mini" in scratch
  assert not any(a.startswith("--workdir=") for a in scratch)
  # The baseline's model (no ★ here: the first point's), the points' fine-tuning arguments.
  assert any(a.startswith("--config=configs/finetune.py:") for a in scratch)
  first = shlex.split(lines[0])
  assert first[1:4] == ["-m", "launch.stage", f"--done={root}/p1.x/sweep/pretrain.json"]
  assert f"--config.wandb.notes={HOSTILE}" in first
  assert f"--workdir={root}/p1.x" in first
  assert not (tmp_path / "pwned").exists() and not (REPO / "pwned").exists()


def test_slurm_dry_run_scripts_are_valid_and_literal(capsys, tmp_path):
  out = "\n".join(_dry_run(capsys, _hostile_experiment(tmp_path), "--root=/shared/r t",
                           "--backend=slurm", "--nodes=2", "--gpus_per_node=4",
                           "--sbatch=--partition=gpu x"))
  scripts = out.split("# /shared/r t/")[1:]
  assert len(scripts) == 2
  script = scripts[0].split("\n", 1)[1].rsplit("# then:", 1)[0]
  check = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
  assert check.returncode == 0, check.stderr
  assert "#SBATCH --nodes=2" in script and "#SBATCH '--partition=gpu x'" in script
  runs = [shlex.split(line)[1:] for line in _shell_lines(script) if line.startswith("run ")]
  assert [r[:2] for r in runs] == [["srun", "--kill-on-bad-exit=1"]] * 4
  for single in (runs[1], runs[3]):  # the mini suite and the nlu suite on one task
    assert single[2:4] == ["--nodes=1", "--ntasks=1"]
  assert f"--config.wandb.notes={HOSTILE}" in runs[0]
  assert "--workdir=/shared/r t/p1.x" in runs[0]


@pytest.mark.parametrize("dry_run", [True, False])
def test_slurm_refuses_control_characters_where_quoting_cannot_hold(capsys, tmp_path, dry_run):
  """An #SBATCH line is a comment: a newline in its value would start a command line."""
  root = tmp_path / "r"
  argv = [_hostile_experiment(tmp_path), f"--root={root}", "--backend=slurm",
          f"--sbatch=--x\ntouch {tmp_path / 'FILE'} #"] + (["--dry_run"] if dry_run else [])
  assert sweep.main(argv) == 2
  captured = capsys.readouterr()
  assert captured.out == "" and captured.err.count("\n") == 1
  assert captured.err.startswith("error: --sbatch '--x\\ntouch") and "control character" in captured.err
  assert not root.exists() and not (tmp_path / "FILE").exists()
  point = points_lib.Point(name="a", config="c", overrides={})
  for kwargs in (dict(sbatch_options=["--partition=a\rb"]), dict(venv="v\tenv"),
                 dict(repo="/r\n/x")):
    with pytest.raises(ValueError, match="control character"):
      sweep.slurm_script(point, [], **{"repo": "/r", "nodes": 1, "gpus_per_node": 1, **kwargs})


def test_tpu_dry_run_commands_are_literal_on_the_workers(capsys, tmp_path):
  lines = _dry_run(capsys, _hostile_experiment(tmp_path), "--root=gs://b/r", "--backend=tpu",
                   "--tpu=pod", "--zone=us-east5-a", "--accelerator=v5p-128", "--create",
                   "--delete", "--scale=tiny")
  tokens = [shlex.split(line) for line in lines]
  assert tokens[0][1:4] == ["-m", "lm.plan", "--config=configs/t5.py:objective=bert,runlocal"]
  assert "--topology=v5p-128" in tokens[0]
  assert f"--config.wandb.notes={HOSTILE}" in tokens[0]
  assert tokens[2][:6] == ["gcloud", "compute", "tpus", "queued-resources", "create", "pod"]
  ssh = [t for t in tokens if t[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh"]]
  assert all("--worker=all" in t for t in ssh)
  point = ssh[-2]  # the first point's stages (the last is the second point)
  remote = next(t for t in point if t.startswith("--command="))[len("--command="):]
  parts = remote.split(" && ")
  assert parts[:2] == ["cd lm", ". .venv/bin/activate"]
  stage_argv = [shlex.split(p) for p in parts[2:]]
  assert [a[1:3] for a in stage_argv] == [["-m", "launch.stage"]] * 4
  assert f"--config.wandb.notes={HOSTILE}" in stage_argv[0]
  assert tokens[-1][:5] == ["gcloud", "compute", "tpus", "queued-resources", "delete"]


@pytest.mark.parametrize("name", ["../escape", "/abs", "a/b", "..", "", "report.md"])
def test_unsafe_point_names_are_refused(tmp_path, capsys, name):
  path = tmp_path / "bad.py"
  path.write_text(f"def sweep(add):\n  add(name={name!r}, config='configs/t5.py:')\n")
  assert sweep.main([str(path), "--root=r", "--dry_run"]) == 2
  assert "point name" in capsys.readouterr().err


def test_bad_invocations_are_one_line_errors(tmp_path, capsys):
  exp = _hostile_experiment(tmp_path)
  assert sweep.main([exp, "--root=r", "--only=nope", "--dry_run"]) == 2
  assert "unknown point(s) ['nope']" in capsys.readouterr().err
  assert sweep.main([exp, "--root=r", "--stages=pretrain,typo", "--dry_run"]) == 2
  assert "unknown stage(s) ['typo']" in capsys.readouterr().err
  assert sweep.main([exp, "--root=r", "--scale=paper", "--dry_run", "--no_validate"]) == 2
  assert "--data_dir" in capsys.readouterr().err
  assert sweep.main([exp, "--root=r", "--backend=tpu", "--dry_run"]) == 2
  assert "--tpu=NAME" in capsys.readouterr().err
  taken = tmp_path / "taken.py"
  taken.write_text("def sweep(add):\n  add(name='random_init', config='configs/t5.py:')\n")
  assert sweep.main([str(taken), "--root=r", "--dry_run"]) == 2
  assert "'random_init' is taken" in capsys.readouterr().err
  # Without the fine-tuning stage (or at paper scale) there is no random-init suite to run.
  assert sweep.main([str(taken), "--root=r", "--dry_run", "--stages=pretrain"]) == 0


def _script_stage(tmp_path, point, name, code="pass"):
  """A stage whose command appends to <point>.log, then runs `code` (Python)."""
  log = tmp_path / f"{point}.log"
  prog = f"open({str(log)!r}, 'a').write({name!r} + '\\n')\n{code}"
  return stage.Stage(name, (sys.executable, "-c", prog),
                     str(tmp_path / point / "sweep" / f"{name}.json"), every_process=False)


def test_a_half_finished_study_resumes_where_it_stopped(tmp_path):
  """Finished stages are skipped; the failed one and those after it run on the next call."""
  flag = tmp_path / "fixed"
  point = points_lib.Point(name="a", config="c", overrides={})
  plan = [(point, [_script_stage(tmp_path, "a", "pretrain"),
                   _script_stage(tmp_path, "a", "mini",
                                 f"import os, sys; sys.exit(0 if os.path.exists({str(flag)!r}) "
                                 "else 1)"),
                   _script_stage(tmp_path, "a", "evaluate")])]
  assert sweep.run_local(plan, str(tmp_path), echo=lambda s: None) == {"a": (1, "mini")}
  assert (tmp_path / "a.log").read_text().split() == ["pretrain", "mini"]
  flag.write_text("")
  assert sweep.run_local(plan, str(tmp_path), echo=lambda s: None) == {"a": (0, "")}
  assert (tmp_path / "a.log").read_text().split() == ["pretrain", "mini", "mini", "evaluate"]
  marker = json.loads((tmp_path / "a" / "sweep" / "mini.json").read_text())
  assert marker["command"][0] == sys.executable and marker["seconds"] >= 0
  messages = []
  sweep.run_local(plan, str(tmp_path), echo=messages.append)
  assert "all stages done" in messages[0]
  assert (tmp_path / "a.log").read_text().split() == ["pretrain", "mini", "mini", "evaluate"]


def test_points_run_in_parallel_and_a_preempted_point_stops_the_queue(tmp_path):
  points = [points_lib.Point(name=n, config="c", overrides={}) for n in "abcd"]
  barrier = tmp_path / "b_started"
  # a waits until b has started: only possible when two points run at once.
  wait_for_b = (f"import os, time\nt = time.time()\nwhile not os.path.exists({str(barrier)!r}):"
                "\n  assert time.time() - t < 30\n  time.sleep(0.05)")
  plan = [(points[0], [_script_stage(tmp_path, "a", "pretrain", wait_for_b)]),
          (points[1], [_script_stage(tmp_path, "b", "pretrain",
                                     f"open({str(barrier)!r}, 'w')")])]
  assert sweep.run_local(plan, str(tmp_path), parallel=2, echo=lambda s: None) == {
      "a": (0, ""), "b": (0, "")}
  plan = [(points[2], [_script_stage(tmp_path, "c", "pretrain", "import sys; sys.exit(75)")]),
          (points[3], [_script_stage(tmp_path, "d", "pretrain")])]
  results = sweep.run_local(plan, str(tmp_path), parallel=1, echo=lambda s: None)
  assert results == {"c": (75, "pretrain")} and not (tmp_path / "d.log").exists()


def test_stage_skips_when_marked_and_marks_only_on_success(tmp_path, capsys):
  done = tmp_path / "m" / "s.json"
  assert stage.main([f"--done={done}", "--", sys.executable, "-c", "import sys; sys.exit(3)"]) == 3
  assert not done.exists()
  assert stage.main([f"--done={done}", "--", sys.executable, "-c", "print(1)"]) == 0
  assert json.loads(done.read_text())["command"][-1] == "print(1)"
  capsys.readouterr()
  # The same command (from another interpreter path) is skipped.
  assert stage.main([f"--done={done}", "--", "python3", "-c", "print(1)"]) == 0
  assert "skipped" in capsys.readouterr().out
  assert stage.main(["--done=x"]) == 2


def test_a_stage_whose_command_or_version_changed_runs_again(tmp_path, capsys):
  """A marker records its command and --version; another one does not count as done."""
  done = tmp_path / "m" / "s.json"
  out = tmp_path / "out"
  prog = f"import sys; open({str(out)!r}, 'a').write(sys.argv[1] + '\\n')"
  run = lambda *args: stage.main([f"--done={done}", *args])
  assert run("--", sys.executable, "-c", prog, "--steps=30") == 0
  assert run("--", sys.executable, "-c", prog, "--steps=30") == 0  # skipped
  capsys.readouterr()
  assert run("--", sys.executable, "-c", prog, "--steps=60") == 0
  said = capsys.readouterr().out.splitlines()
  assert said[0] == ("stage marked done for something else (the command changed: --steps=30 -> "
                     "--steps=60): running it again"), said
  assert out.read_text().split() == ["--steps=30", "--steps=60"]
  assert json.loads(done.read_text())["command"][-1] == "--steps=60"
  # A failing rerun leaves no marker for the new command and the old one does not count.
  assert run("--", sys.executable, "-c", prog + "; sys.exit(4)", "--steps=90") == 4
  assert run("--", sys.executable, "-c", prog + "; sys.exit(4)", "--steps=90") == 4
  # --version (the mini suite's) is compared like the command.
  assert run("--version=mini_suite=3", "--", sys.executable, "-c", prog, "--steps=60") == 0
  assert "'(none)' -> 'mini_suite=3'" in capsys.readouterr().out
  assert run("--version=mini_suite=3", "--", sys.executable, "-c", prog, "--steps=60") == 0
  assert json.loads(done.read_text())["version"] == "mini_suite=3"
  # An unreadable marker does not count either.
  done.write_text("{")
  assert run("--version=mini_suite=3", "--", sys.executable, "-c", prog, "--steps=60") == 0
  assert "unreadable" in capsys.readouterr().out
  assert out.read_text().split() == ["--steps=30", "--steps=60", "--steps=90", "--steps=90",
                                     "--steps=60", "--steps=60"]


def test_a_finished_study_rerun_with_another_command_is_not_done(tmp_path):
  """`launch.sweep` again with --extra=--config.train.num_steps=60 (was 30) reruns pretrain."""
  point = points_lib.Point(name="a", config="c", overrides={})
  stage30 = _script_stage(tmp_path, "a", "pretrain")
  plan = [(point, [dataclasses.replace(stage30, argv=stage30.argv + ("--num_steps=30",))])]
  assert sweep.run_local(plan, str(tmp_path), echo=lambda s: None) == {"a": (0, "")}
  plan60 = [(point, [dataclasses.replace(stage30, argv=stage30.argv + ("--num_steps=60",))])]
  messages = []
  assert sweep.run_local(plan60, str(tmp_path), echo=messages.append) == {"a": (0, "")}
  assert "all stages done" not in messages[0]
  assert "running pretrain (the command changed: --num_steps=30 -> --num_steps=60)" in messages[0]
  assert (tmp_path / "a.log").read_text().split() == ["pretrain", "pretrain"]
  messages = []
  sweep.run_local(plan60, str(tmp_path), echo=messages.append)
  assert "all stages done" in messages[0]


def test_a_marker_naming_a_module_before_it_moved_records_the_same_command(tmp_path):
  """The mini suite moved out of lm/downstream: studies finished before keep their mini stage."""
  done = tmp_path / "mini.json"
  done.write_text(json.dumps({"command": ["py", "-m", "lm.downstream.mini_suite", "--steps=4"]}))
  assert stage.stage_status(str(done), ["python", "-m", "lm.mini_suite", "--steps=4"]) == (True, "")
  finished, why = stage.stage_status(str(done), ["python", "-m", "lm.mini_suite", "--steps=8"])
  assert not finished and why == "the command changed: --steps=4 -> --steps=8"


def test_a_stage_after_one_that_ran_again_runs_again(tmp_path):
  """evaluate comes after pretrain (Stage.after): a rerun pretrain makes it stale."""
  point = points_lib.Point(name="a", config="c", overrides={})
  pre = _script_stage(tmp_path, "a", "pretrain")
  ev = dataclasses.replace(_script_stage(tmp_path, "a", "evaluate"), after=(pre.done,))
  plan = lambda steps: [(point, [dataclasses.replace(pre, argv=pre.argv + (steps,)), ev])]
  assert sweep.run_local(plan("--n=4"), str(tmp_path), echo=lambda s: None) == {"a": (0, "")}
  messages = []
  sweep.run_local(plan("--n=8"), str(tmp_path), echo=messages.append)
  assert "evaluate (after a stage that runs again)" in messages[0], messages
  assert (tmp_path / "a.log").read_text().split() == ["pretrain", "evaluate"] * 2
  messages = []
  sweep.run_local(plan("--n=8"), str(tmp_path), echo=messages.append)
  assert "all stages done" in messages[0]
  # launch.stage alone (as the SLURM and TPU scripts run it) says the same.
  (tmp_path / "a" / "sweep" / "pretrain.json").write_text('{"command": ["python"]}')
  finished, why = stage.stage_status(ev.done, ev.argv, after=ev.after)
  assert not finished and "changed since: a stage it comes after ran again" in why


def test_the_mini_stage_marker_carries_the_suite_version():
  from lm import mini_suite  # pylint: disable=g-import-not-at-top
  from lm.downstream import mini  # pylint: disable=g-import-not-at-top
  point = points_lib.Point(name="a", config="configs/t5.py:runlocal", overrides={})
  [mini_stage] = sweep.stages(point, "r", scale="tiny", study="s", which=["finetune"])
  # The record's version too: a record without the blank-input control is scored again.
  version = f"--version=mini_suite={mini.SUITE_VERSION},record={mini_suite.RECORD_VERSION}"
  assert version in mini_stage.command()
  assert mini_stage.command().index("--") > mini_stage.command().index(version)
  assert mini_stage.after == ("r/a/sweep/pretrain.json",)


def test_kendall_tau_matches_scipy_and_hand_cases():
  assert report.kendall_tau({"a": 1, "b": 2, "c": 3}, {"a": 10, "b": 20, "c": 30}) == (1.0, 3)
  assert report.kendall_tau({"a": 1, "b": 2, "c": 3}, {"a": 3, "b": 2, "c": 1}) == (-1.0, 3)
  # 4 points, one discordant pair of 6: (5 - 1) / 6.
  tau, n = report.kendall_tau({"a": 1, "b": 2, "c": 3, "d": 4}, {"a": 1, "b": 3, "c": 2, "d": 4})
  assert n == 4 and tau == pytest.approx(4 / 6)
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=9), rng.normal(size=9)
  ours = {str(i): v for i, v in enumerate(x)}
  paper = {str(i): v for i, v in enumerate(y) if i != 4}  # a point the paper lacks
  want = stats.kendalltau(np.delete(x, 4), np.delete(y, 4)).statistic
  assert report.kendall_tau(ours, paper) == (pytest.approx(want), 8)
  assert np.isnan(report.kendall_tau({"a": 1}, {"a": 1})[0])
  assert report.ranks({"a": 3.0, "b": 5.0, "c": 3.0}) == {"a": 2, "b": 1, "c": 2}


def test_report_ranks_paper_scale_columns_beside_the_paper(tmp_path):
  points = [points_lib.Point(name=n, config="c", overrides={}, reference={"GLUE": g, "SQuAD": q})
            for n, g, q in (("a", 83.0, 80.0), ("b", 82.0, 81.0), ("c", 75.0, 60.0))]
  for name, glue, squad in (("a", 40.0, 50.0), ("b", 45.0, 55.0), ("c", 30.0, 20.0)):
    _write_glue_squad(tmp_path / name, glue, squad)
  text = report.write_report(str(tmp_path), points, experiment="exp")
  assert "| eval loss | our GLUE | our SQuAD | paper GLUE |" in text
  rows = {line.split(" | ")[0]: line for line in text.splitlines()
          if line.startswith(("| GLUE |", "| SQuAD |"))}
  # ours: b > a > c on both; GLUE: a > b > c (one discordant pair: tau 1/3); SQuAD: b > a > c.
  assert "| GLUE | GLUE | 3 | 0.33 | a (2 vs 1), b (1 vs 2) |" in text, rows
  assert "| SQuAD | SQuAD | 3 | 1.00 | none |" in text
  assert report.WHY_NO_TAU not in text  # no mini column: nothing to say about it
  assert (tmp_path / "eval_loss.png").exists()


def _write_glue_squad(workdir, glue: float, squad: float):
  """A paper-scale point's GLUE and SQuAD fine-tuning results (every GLUE task at `glue`)."""
  from lm.downstream import task_mixtures  # pylint: disable=g-import-not-at-top
  glue_results = {}
  for parts in task_mixtures.GLUE_AVERAGE.values():
    for task, metric in parts:
      glue_results.setdefault(task, {})[metric] = glue
  for folder, results in (("ft_glue", glue_results),
                          ("ft_squad", {"squad_v1_1": {"em": squad, "f1": squad}})):
    (workdir / folder / "eval").mkdir(parents=True)
    (workdir / folder / "eval" / "tasks_step_10.json").write_text(
        json.dumps({"step": 10, "results": results}))


def test_report_shows_decoder_fluency_with_its_blank_control_and_no_tau(tmp_path):
  """Issue 31 item 1: the mini column is reported as decoder fluency, beside its blank-input
  score and the share of the margin over random initialisation that survives it, and is
  never ranked against the paper by Kendall's tau."""
  points = [points_lib.Point(name=n, config="c", overrides={}, reference={"GLUE": g, "SQuAD": q})
            for n, g, q in (("a", 83.0, 80.0), ("b", 82.0, 81.0), ("c", 75.0, 60.0))]
  results = lambda v: {t: {m: v} for t, m in (
      ("mini_completion", "accuracy"), ("mini_fill", "accuracy"), ("mini_cloze", "exact_match"),
      ("mini_phrase_order", "exact_match"), ("mini_word_order", "accuracy"))}
  # (mini, blank): a keeps (50 - 35) / (60 - 35) = 0.60 of its margin, b (35 - 35) / 10 = 0,
  # c's margin 1 is under the 3-point minimum (no share).
  for name, score, blank in (("a", 60.0, 50.0), ("b", 45.0, 35.0), ("c", 36.0, 36.0)):
    (tmp_path / name / "mini").mkdir(parents=True)
    (tmp_path / name / "mini" / "mini_suite.json").write_text(json.dumps(
        {"mini": score, "mini_blank": blank, "results": results(score),
         "blank": results(blank), "suite_version": 3}))
  text = report.write_report(str(tmp_path), points, experiment="exp")
  assert ("| eval loss | our decoder fluency (mini) | blank input | kept blank | paper GLUE |"
          in text)
  assert "| a | no metrics | — | — | — | 60.00 | 50.00 | — | 83.00 |" in text  # no baseline
  assert "needs the random-initialisation baseline" in text
  # The random-initialisation record (default place: <root>/random_init/mini/, where the
  # sweep's random_init stage writes it).
  (tmp_path / "random_init" / "mini").mkdir(parents=True)
  (tmp_path / "random_init" / "mini" / "mini_suite.json").write_text(json.dumps(
      {"mini": 35.0, "mini_blank": 33.0, "results": results(35.0), "blank": results(33.0),
       "suite_version": 3, "init": "scratch"}))
  text = report.write_report(str(tmp_path), points, experiment="exp")
  assert "| a | no metrics | — | — | — | 60.00 | 50.00 | 0.60 | 83.00 |" in text
  assert "| b | no metrics | — | — | — | 45.00 | 35.00 | 0.00 | 82.00 |" in text
  assert "| c | no metrics | — | — | — | 36.00 | 36.00 | — | 75.00 |" in text
  assert "decoder fluency (mini) 35.00, blank input 33.00" in text
  # The per-task section has each point's blank-input row and random initialisation's.
  assert "| a (blank input) | 50.00 | 50.00 | 50.00 | 50.00 | 50.00 | 50.00 |" in text
  assert "| random init (blank input) | 33.00 | 33.00 | 33.00 | 33.00 | 33.00 | 33.00 |" in text
  # No tau from the fluency column (no ranking table at all: no paper-scale column), and
  # the report says why.
  rankings = text.split("## Rankings")[1].split("## Points")[0]
  assert "| Kendall tau |" not in rankings and "| mini | GLUE |" not in text
  assert report.WHY_NO_TAU in rankings
  # A random-init record of another suite gives no share.
  (tmp_path / "random_init" / "mini" / "mini_suite.json").write_text(json.dumps(
      {"mini": 35.0, "mini_blank": 33.0, "results": results(35.0), "suite_version": 2}))
  text = report.write_report(str(tmp_path), points, experiment="exp")
  assert "| a | no metrics | — | — | — | 60.00 | 50.00 | — | 83.00 |" in text
  assert "different suites" in text
  # Another record through the command line's --random_init (a missing one: exit 2).
  other = tmp_path / "elsewhere.json"
  other.write_text(json.dumps({"mini": 40.0, "suite_version": 3}))
  exp = tmp_path / "exp.py"
  exp.write_text("def sweep(add):\n" + "".join(
      f"  add(name={n!r}, config='configs/t5.py:', reference={{'GLUE': {g}}})\n"
      for n, g in (("a", 83.0), ("b", 82.0), ("c", 75.0))))
  assert report.main([str(exp), f"--root={tmp_path}", f"--random_init={other}"]) == 0
  text = (tmp_path / "report.md").read_text()
  assert "| a | no metrics | — | — | — | 60.00 | 50.00 | 0.50 | 83.00 |" in text  # 10 / 20
  assert report.blank_control({"mini": 60.0, "mini_blank": 50.0}, {"suite_version": None}) == (
      50.0, None)  # a baseline record without its score gives no share
  assert report.main([str(exp), f"--root={tmp_path}",
                      f"--random_init={tmp_path / 'nope.json'}"]) == 2


def test_paper_columns_take_each_task_at_its_own_best_step(tmp_path):
  # A GLUE mixture run evaluated at steps 100 and 200: CoLA and SST-2 peak at 100, the rest
  # at 200 (MNLI matched and mismatched together, MRPC's two metrics together), as T5
  # reported them; a single common step (either) would give a lower average.
  from lm.downstream import task_mixtures  # pylint: disable=g-import-not-at-top
  tasks = {t: m for parts in task_mixtures.GLUE_AVERAGE.values() for t, m in parts}
  early = {"glue_cola", "glue_sst2"}
  eval_dir = tmp_path / "p" / "ft_glue" / "eval"
  eval_dir.mkdir(parents=True)
  best = {}
  for step in (100, 200):
    results = {}
    for parts in task_mixtures.GLUE_AVERAGE.values():
      for task, metric in parts:
        good = (task in early) == (step == 100)
        results.setdefault(task, {})[metric] = 80.0 if good else 50.0
        if good:
          best.setdefault(task, {})[metric] = 80.0
    (eval_dir / f"tasks_step_{step}.json").write_text(json.dumps({"results": results}))
  assert set(best) == set(tasks)
  scores = report.downstream_scores(str(tmp_path / "p"))
  assert scores == {"GLUE": task_mixtures.glue_average(best)} and scores["GLUE"] == 80.0


def test_report_command_line(tmp_path, capsys):
  exp = _hostile_experiment(tmp_path)
  assert report.main([exp, f"--root={tmp_path / 'missing'}"]) == 2
  assert "does not exist" in capsys.readouterr().err
  (tmp_path / "r").mkdir()
  assert report.main([exp, f"--root={tmp_path / 'r'}"]) == 0
  text = (tmp_path / "r" / "report.md").read_text()
  assert "No downstream scores yet" in text
  # The points' configs as they ran: runlocal at tiny scale (the default), not at paper scale.
  configs = [line for line in text.splitlines() if line.startswith("- `")]
  assert configs and all("runlocal" in line for line in configs)
  assert report.main([exp, f"--root={tmp_path / 'r'}", "--scale=paper"]) == 0
  assert "runlocal" not in (tmp_path / "r" / "report.md").read_text()


# -- scaling study --------------------------------------------------------------------------



def test_scaling_fit_recovers_known_exponents_and_the_frontier():
  from launch import scaling
  truth = scaling.Fit(E=1.69, A=406.4, alpha=0.34, B=410.7, beta=0.28)  # Hoffmann et al.
  n, d = (g.ravel() for g in np.meshgrid(np.geomspace(1e5, 1e9, 5), np.geomspace(1e8, 1e11, 4)))
  rng = np.random.default_rng(0)
  loss = truth.loss(n, d) * (1 + 0.002 * rng.normal(size=n.size))  # 0.2 % noise
  fit = scaling.fit_loss(n, d, loss)
  assert fit.alpha == pytest.approx(0.34, abs=0.03) and fit.beta == pytest.approx(0.28, abs=0.03)
  assert fit.E == pytest.approx(1.69, abs=0.05)
  ci = scaling.bootstrap(n, d, loss, reps=40)
  assert ci["alpha"][0] <= 0.34 <= ci["alpha"][1] and ci["beta"][0] <= 0.28 <= ci["beta"][1]
  # The closed-form frontier is the minimum of L along C = 6 N D (checked on a fine grid).
  c = 1e21
  n_opt, d_opt = truth.compute_optimal(c)
  grid = np.geomspace(n_opt / 100, n_opt * 100, 20001)
  assert grid[np.argmin(truth.loss(grid, c / (6 * grid)))] == pytest.approx(n_opt, rel=1e-3)
  assert 6 * n_opt * d_opt == pytest.approx(c)
  with pytest.raises(ValueError, match=">= 5 points"):
    scaling.fit_loss(n[:4], d[:4], loss[:4])


def test_scaling_study_expands_at_both_scales():
  tiny = points_lib.collect("experiments/scaling.py", runlocal=True)
  paper = points_lib.collect("experiments/scaling.py")
  assert [p.name for p in tiny] == [p.name for p in paper] and len(tiny) == 18
  assert all("size=tiny" in p.config and "runlocal" in p.config for p in tiny)
  assert {p.overrides["model.emb_dim"] for p in tiny} == {32, 64, 128}
  # One constant learning rate, 1/sqrt(1000), for every tiny point (experiments/scaling.py).
  assert {p.overrides["schedule.warmup_steps"] for p in tiny} == {1000}
  assert all("schedule.warmup_steps" not in p.overrides for p in paper)  # T5's 10^4
  assert {p.overrides["train.num_steps"] for p in paper} == {2 ** 16, 2 ** 17, 2 ** 18}
  assert {p.config.split("size=")[1] for p in paper} == {"small", "base", "large"}
  assert all(p.reference == {} for p in paper)


def test_scaling_report_from_run_directories(tmp_path):
  """N from each run's config.json, D from its steps, L from metrics.jsonl, then the fit."""
  from launch import scaling
  from lm import train
  truth = scaling.Fit(E=2.0, A=300.0, alpha=0.5, B=80.0, beta=0.3)
  points = [p for p in points_lib.collect("experiments/scaling.py", runlocal=True)
            if p.name.startswith("encoder_decoder")]
  for p in points:
    config = local.build_config(p)
    workdir = tmp_path / p.name
    train.write_config(config.to_dict(), workdir)
    steps = config.train.num_steps
    (workdir / "metrics.jsonl").write_text(json.dumps({"step": steps, "eval_loss": 0.0}) + "\n")
    fig = scaling.point_figures(str(workdir))
    loss = float(truth.loss(fig["n"], fig["d"]))
    (workdir / "metrics.jsonl").write_text(json.dumps({"step": steps, "eval_loss": loss}) + "\n")
  (tmp_path / points[0].name / "mini").mkdir()
  (tmp_path / points[0].name / "mini" / "mini_suite.json").write_text('{"mini": 33.5}')
  first = scaling.point_figures(str(tmp_path / points[0].name))
  assert first["arch"] == "encoder_decoder" and first["mini"] == 33.5
  data = local.build_config(points[0]).data
  assert (data.batch_size, data.inputs_length) == (16, 64)
  assert first["d"] == 250 * 16 * (64 + data.targets_length)  # steps x batch x (Li + Lt)
  text = scaling.write_scaling_report(str(tmp_path), [p.name for p in points] + ["missing"],
                                      reps=20)
  assert "| missing | — | — | — | not finished | — |" in text
  alpha = next(line for line in text.splitlines() if line.startswith("| alpha |"))
  assert float(alpha.split("|")[2]) == pytest.approx(0.5, abs=0.05)
  assert (tmp_path / "scaling.png").stat().st_size > 0


@pytest.mark.slow
def test_a_two_point_micro_sweep_end_to_end(tmp_path):
  """pretrain -> mini suite -> evaluate -> nlu -> accept for two points, then the report with
  its rankings, the yardstick's sections and the plot; a second call skips every finished
  stage."""
  exp = tmp_path / "micro.py"
  exp.write_text(
      "def sweep(add):\n"
      "  add(name='sc', config='configs/t5.py:objective=span_corruption', reference={'GLUE': 83.5})\n"
      "  add(name='iid', config='configs/t5.py:objective=iid_replace_spans', "
      "reference={'GLUE': 83.3})\n")
  root = tmp_path / "root"
  argv = [sys.executable, "-m", "launch.sweep", str(exp), f"--root={root}", "--parallel=2",
          "--extra=--config.train.num_steps=20", "--extra=--config.train.eval_every=10",
          "--extra=--config.wandb.mode=disabled", "--finetune_extra=--steps=10",
          "--finetune_extra=--max_eval_examples=8", "--evaluate_extra=--num_batches=1",
          "--evaluate_extra=--num_examples=8", "--nlu_extra=--items=heldout",
          f"--stages={','.join(sweep.STAGE_NAMES)}"]
  # One CPU device per stage, as on a laptop (the tests' 8 simulated ones are 2x slower).
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled", "XLA_FLAGS": ""}
  out = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  for name in ("sc", "iid"):
    assert sorted(os.listdir(root / name / "sweep")) == [
        "accept.json", "accept_random.json", "evaluate.json", "mini.json", "nlu.json",
        "pretrain.json"]
    assert list((root / name / "eval").glob("nlu_step_20.json"))
    assert json.loads((root / name / "mini" / "mini_suite.json").read_text())["mini"] >= 0
    assert list((root / name / "eval").glob("step_20.json"))
  again = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  # Both points and the random-initialisation baseline of the blank-input control.
  assert again.returncode == 0 and again.stdout.count("all stages done") == 3, again.stdout
  assert json.loads((root / "random_init" / "mini" / "mini_suite.json").read_text()
                    )["init"] == "scratch"
  assert report.main([str(exp), f"--root={root}"]) == 0
  text = (root / "report.md").read_text()
  assert "our decoder fluency (mini)" in text and "| mini | GLUE |" not in text
  assert "| sc (blank input) |" in text and "| random init (blank input) |" in text
  # The nlu stage's results reach the yardstick's sections: a row of controls per point.
  assert "## Controls: random initialisation and training steps" in text
  assert "| sc | 1 |" in text and "| iid | 1 |" in text
  # The accept stages' results reach the report: tested against chance, in or out as it says.
  assert ("| sc (pre-trained) | 1 | 40 |" in text
          and "| iid (random initialisation) | 1 | 40 |" in text)
  learnt = "| yes |" in text.split("## Acceptability after fine-tuning")[1]
  assert ("**In the contrasts:**" in text) == learnt != ("**Left out of the contrasts" in text)
  assert (root / "eval_loss.png").stat().st_size > 1000


@pytest.mark.slow
def test_a_finished_sweep_rerun_with_more_steps_trains_on(tmp_path):
  """Issue 33 row 3 end to end: --extra=--config.train.num_steps=8 after a finished study of
  4 steps resumes pre-training to step 8 and evaluates it; it is not "all stages done"."""
  exp = tmp_path / "one.py"
  exp.write_text("def sweep(add):\n  add(name='p', config='configs/t5.py:', reference={})\n")
  root = tmp_path / "root"
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled", "XLA_FLAGS": ""}

  def sweep_with(steps):
    argv = [sys.executable, "-m", "launch.sweep", str(exp), f"--root={root}",
            "--stages=pretrain,evaluate", f"--extra=--config.train.num_steps={steps}",
            "--extra=--config.train.eval_every=4", "--extra=--config.ckpt.every_steps=4",
            "--evaluate_extra=--num_batches=1", "--evaluate_extra=--num_examples=4"]
    out = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout

  sweep_with(4)
  assert list((root / "p" / "eval").glob("step_4.json"))
  out = sweep_with(8)
  assert "all stages done" not in out
  assert ("running pretrain (the command changed: --config.train.num_steps=4 -> "
          "--config.train.num_steps=8)") in out, out
  assert "8" in os.listdir(root / "p" / "checkpoints")
  assert list((root / "p" / "eval").glob("step_8.json"))  # evaluate ran again, on step 8
  assert [m["step"] for m in map(json.loads, (root / "p" / "metrics.jsonl").read_text(
      ).splitlines()) if "eval_loss" in m] == [4, 8]
  assert "all stages done" in sweep_with(8)


def test_report_shows_each_mini_task_and_the_chance_row(tmp_path):
  points = [points_lib.Point(name=n, config="c", overrides={}, reference={}) for n in ("a", "b")]
  chance = {"mini_completion": {"accuracy": 50.0}, "mini_fill": {"accuracy": 25.0},
            "mini_cloze": {"exact_match": 14.0}, "mini_phrase_order": {"exact_match": 20.0},
            "mini_word_order": {"accuracy": 50.0}}
  for name, word_order in (("a", 80.0), ("b", 55.0)):
    results = {t: dict(m) for t, m in chance.items()}
    results["mini_word_order"]["accuracy"] = word_order
    (tmp_path / name / "mini").mkdir(parents=True)
    (tmp_path / name / "mini" / "mini_suite.json").write_text(json.dumps(
        {"mini": 42.0, "results": results, "chance": chance}))
  text = report.write_report(str(tmp_path), points, experiment="exp")
  assert ("| point | completion (accuracy) | fill (accuracy) | cloze (exact_match) | "
          "phrase_order (exact_match) | word_order (accuracy) | mini |") in text
  assert "| a | 50.00 | 25.00 | 14.00 | 20.00 | 80.00 | 42.00 |" in text
  assert "| b | 50.00 | 25.00 | 14.00 | 20.00 | 55.00 | 42.00 |" in text
  assert "| chance | 50.00 | 25.00 | 14.00 | 20.00 | 50.00 | 31.80 |" in text
  assert "different suites" not in text
  # A record of an older suite shows its own tasks, "—" in the others, and a warning.
  old = {"mini_next_line": {"accuracy": 47.0}, "mini_cloze": {"exact_match": 15.0}}
  (tmp_path / "b" / "mini" / "mini_suite.json").write_text(json.dumps(
      {"mini": 33.0, "results": old}))
  text = report.write_report(str(tmp_path), points, experiment="exp")
  assert "next_line (accuracy) | mini |" in text
  assert "| b | — | — | 15.00 | — | — | 47.00 | 33.00 |" in text
  assert "**The points were scored with different suites**" in text
  # The same tasks at another suite version (a task's construction changed) are flagged too.
  for name, version in (("a", 3), ("b", 4)):
    (tmp_path / name / "mini" / "mini_suite.json").write_text(json.dumps(
        {"mini": 42.0, "results": results, "chance": chance, "suite_version": version}))
  assert "different suites" in report.write_report(str(tmp_path), points, experiment="exp")
