"""Tests for experiments/*.py and launch/: sweeps build valid configs, commands, reports.

No training except the slow-marked end-to-end test.
"""
from __future__ import annotations

import json
import os
import pathlib
import shlex
import stat
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

from lm import config as config_lib  # pylint: disable=wrong-import-position
from lm.validate import validate  # pylint: disable=wrong-import-position
from experiments import common  # pylint: disable=wrong-import-position
from launch import local  # pylint: disable=wrong-import-position
from launch import points as points_lib  # pylint: disable=wrong-import-position
from launch import report  # pylint: disable=wrong-import-position

EXPERIMENTS = sorted(str(p.relative_to(REPO)) for p in (REPO / "experiments").glob("t5_*.py"))
# Rows per paper table (Raffel et al. 2020): Table 2 = 10, Tables 4+5 = 6 (BERT-style once),
# Table 6 = 4, Table 7 = 5.
# The *_loss_on_inputs / *_gin_lengths files are the same tables with the other setting of
# a documented switch. Tables 4+5 add the equal-predicted-tokens controls, which have no
# paper rows (CONTROLS).
CONTROLS = {"experiments/t5_objectives.py": ("replace_spans_equal_tokens", "bert_equal_tokens",
                                             "mass_equal_tokens", "drop_tokens_equal_tokens")}
EXPECTED_ROWS = {"experiments/t5_architectures.py": 10, "experiments/t5_objectives.py": 10,
                 "experiments/t5_corruption_rate.py": 4, "experiments/t5_span_length.py": 5,
                 "experiments/t5_architectures_loss_on_inputs.py": 10,
                 "experiments/t5_corruption_rate_gin_lengths.py": 4}


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
  monkeypatch.chdir(REPO)  # config paths in the sweeps are relative to the repository


def test_every_experiment_is_covered():
  assert sorted(EXPECTED_ROWS) == EXPERIMENTS


@pytest.mark.parametrize("experiment", EXPERIMENTS)
@pytest.mark.parametrize("runlocal", [False, True])
def test_points_build_valid_configs(experiment, runlocal):
  points = points_lib.collect(experiment, runlocal=runlocal)
  assert len(points) == EXPECTED_ROWS[experiment]
  names = [p.name for p in points]
  assert len(set(names)) == len(names)
  assert sum(p.baseline for p in points) == 1
  assert [p.name for p in points if not p.reference] == list(CONTROLS.get(experiment, ()))
  for p in points:
    assert p.name in CONTROLS.get(experiment, ()) or tuple(p.reference) == common.COLUMNS
    assert all(isinstance(v, float) and 0 < v < 100 for v in p.reference.values())
    config = local.build_config(p)
    validate(config)
    assert config.arg.runlocal == runlocal
    for key, value in p.overrides.items():
      node = config
      for part in key.split("."):
        node = node[part]
      assert node == value, (p.name, key)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_baseline_is_the_papers(experiment):
  (baseline,) = [p for p in points_lib.collect(experiment) if p.baseline]
  assert baseline.reference == common.BASELINE
  config = local.build_config(baseline)
  assert (config.model.family, config.model.size, config.model.architecture) == (
      "t5_1_0", "base", "encoder_decoder")
  assert config.data.objective == "iid_replace_spans"
  assert config.data.objective_params.noise_density == 0.15
  assert config.train.num_steps == 2 ** 19 and config.data.batch_size == 128
  assert config.data.inputs_length == 512


def test_architecture_rows():
  points = {p.name: local.build_config(p)
            for p in points_lib.collect("experiments/t5_architectures.py")}
  # Denoising half: the baseline objective on every architecture; LM half: prefix_lm, and
  # full_lm for the plain language model (paper §3.2).
  for name, config in points.items():
    arch_objective = (config.arg.arch, config.data.objective)
    if name.endswith("_denoising"):
      assert config.data.objective == "iid_replace_spans", name
    elif name.startswith("lm_"):
      assert arch_objective == ("causal", "full_lm")
    else:
      assert config.data.objective == "prefix_lm", name
  for config in points.values():  # every row is the t5_1_0 base size
    assert (config.model.family, config.model.size) == ("t5_1_0", "base")
  assert points["shared_denoising"].model.architecture == "shared"
  assert points["lm_lm"].model.architecture == "causal"
  assert points["prefixlm_denoising"].model.architecture == "prefix_lm"
  from lm.model import presets  # pylint: disable=g-import-not-at-top
  six = presets.make_config("t5_1_0", "base", "encoder_decoder", num_layers=6)
  for name in ("encdec6_denoising", "encdec6_lm"):
    model = config_lib.model_config(points[name])
    assert model == six, name
    assert (model.num_encoder_layers, model.num_decoder_layers) == (6, 6)
  # runlocal halves the tiny model's layers instead of growing it to 6+6.
  tiny = {p.name: config_lib.model_config(local.build_config(p))
          for p in points_lib.collect("experiments/t5_architectures.py", runlocal=True)}
  assert tiny["encdec6_lm"].num_encoder_layers == tiny["encdec6_lm"].num_decoder_layers == 1
  assert tiny["encdec_lm"].num_encoder_layers == 2


def test_sweep_parameters():
  rates = [local.build_config(p).data.objective_params.noise_density
           for p in points_lib.collect("experiments/t5_corruption_rate.py")]
  assert rates == [0.10, 0.15, 0.25, 0.50]
  spans = [local.build_config(p) for p in points_lib.collect("experiments/t5_span_length.py")]
  assert [c.data.objective for c in spans] == ["iid_replace_spans"] + ["span_corruption"] * 4
  assert [c.data.objective_params.mean_noise_span_length for c in spans[1:]] == [2, 3, 5, 10]
  objectives = [local.build_config(p).data.objective
                for p in points_lib.collect("experiments/t5_objectives.py")]
  assert objectives == ["prefix_lm", "bert", "deshuffle", "mass", "iid_replace_spans",
                        "drop_tokens", "iid_replace_spans", "bert", "mass", "drop_tokens"]


@pytest.mark.parametrize("runlocal, steps, point, control_steps", [
    (True, 1000, "replace_spans", 2138),      # ceil(1000 * 656.819 / 307.306) = ceil(2137.35)
    (False, 2 ** 19, "replace_spans", 1120585),  # ceil(2^19 * 656.819 / 307.306)
    (True, 1000, "bert", 642),                # ceil(1000 * 656.819 / 1024) = ceil(641.43)
    (True, 1000, "mass", 642),
    (False, 2 ** 19, "mass", 336292),         # ceil(336291.3)
    (True, 1000, "drop_tokens", 3929)])       # ceil(1000 * 656.819 / 167.185) = ceil(3928.7)
def test_equal_tokens_control_is_its_point_with_other_steps(runlocal, steps, point,
                                                            control_steps):
  """Each control is its denoising point with more or fewer steps, as many as predict prefix
  LM's target tokens at the measured rates; nothing else differs."""
  from experiments import t5_objectives  # pylint: disable=g-import-not-at-top
  configs = {p.name: local.build_config(p)
             for p in points_lib.collect("experiments/t5_objectives.py", runlocal=runlocal)}
  (c,) = [c for c in t5_objectives.EQUAL_TOKENS if c.equal_steps == point]
  assert (c.point, c.reference) == (f"{point}_equal_tokens", "prefix_lm")
  control = configs[c.point]
  assert configs["prefix_lm"].train.num_steps == configs[point].train.num_steps == steps
  assert control.train.num_steps == control_steps == t5_objectives.equal_tokens_steps(steps,
                                                                                       point)
  rate = t5_objectives.TARGET_TOKENS_PER_STEP
  assert control_steps * rate[point] >= steps * rate["prefix_lm"]
  assert (control_steps - 1) * rate[point] < steps * rate["prefix_lm"]
  control.train.num_steps = steps
  assert control.to_dict() == configs[point].to_dict()


MODERN = "experiments/modern_ed_vs_do.py"  # no paper table: its own tests below


def _modern_configs(runlocal: bool, **overrides):
  """{point: ConfigDict} of the modern study (with `overrides` on the decoder-only points)."""
  configs = {}
  for p in points_lib.collect(MODERN, runlocal=runlocal):
    config = local.build_config(p)
    if config.model.architecture == "causal":
      for key, value in overrides.items():
        config.model[key] = value
    configs[p.name] = config
  return configs


@pytest.mark.parametrize("runlocal", [False, True])
def test_modern_ed_vs_do_points(runlocal):
  from experiments import modern_ed_vs_do as study  # pylint: disable=g-import-not-at-top
  from lm.data import objectives  # pylint: disable=g-import-not-at-top
  scale = "tiny" if runlocal else "paper"
  points = points_lib.collect(MODERN, runlocal=runlocal)
  assert [p.name for p in points] == [name for name, *_ in study.POINTS]
  for p in points:  # no paper row, no ★
    assert p.reference == {} and not p.baseline
  configs = {p.name: config_lib.derive(local.build_config(p)) for p in points}
  for name, arch, objective, _, depth, _ in study.POINTS:
    config = configs[name]
    validate(config)
    model = config_lib.model_config(config)
    assert (config.model.architecture, config.arg.objective) == (arch, objective), name
    # The modern recipe on every point, every attention rotary (but the cross-attention of
    # the diagnostic point).
    assert (model.mlp_activation, model.norm_type, model.norm_position, model.position_encoding,
            model.tie_embeddings, model.dropout_rate) == (
                "gated_gelu", "rmsnorm", "pre", "rope", True, 0.0), name
    if arch == "encoder_decoder":
      assert model.cross_attention_rope == (
          None if name == "ed_prefixlm_selfrope" else "continue"), name
      n = study.ENCODER_DECODER_LAYERS[scale]
      assert (model.num_encoder_layers, model.num_decoder_layers) == (n, n), name
    else:
      assert (model.num_encoder_layers, model.num_decoder_layers) == (0, depth[scale]), name
  # Same width, batch and positions per row (inputs + targets, padded), and the prefix LM
  # and the causal LM read one segment of the same text length per row (UL2's corrupting
  # members read longer ones: the module docstring).
  first = configs["ed_prefixlm"]
  for config in configs.values():
    for key in ("emb_dim", "mlp_dim", "num_heads", "head_dim"):
      assert config.model[key] == first.model[key]
    assert config.data.batch_size == first.data.batch_size == (16 if runlocal else 128)
    d = config.data
    assert d.inputs_length + d.targets_length in (
        2 * first.data.inputs_length - 1, first.data.inputs_length)
  raw = {n: objectives.raw_length(c.data.objective, inputs_length=c.data.inputs_length,
                                  targets_length=c.data.targets_length,
                                  **c.data.objective_params.to_dict())
         for n, c in configs.items()}
  length = first.data.inputs_length
  assert (raw["ed_prefixlm"], raw["do_causallm"], raw["do_causallm_2n"]) == (
      length - 1, length, length)


@pytest.mark.parametrize("runlocal", [False, True])
def test_modern_ed_vs_do_is_flop_matched(runlocal):
  """The FLOP-matched decoder-only point is within MATCH_TOLERANCE of each encoder-decoder
  point, at the depth closest to it; the same-layers control is not; the docstring's ratios."""
  from experiments import modern_ed_vs_do as study  # pylint: disable=g-import-not-at-top
  scale = "tiny" if runlocal else "paper"
  configs = _modern_configs(runlocal)
  encdec = [name for name, arch, *_ in study.POINTS if arch == "encoder_decoder"]
  for name, arch, _, _, depth, matched in study.POINTS:
    if arch == "encoder_decoder":
      assert study.flops_ratio(configs[name], configs["ed_prefixlm"]) == pytest.approx(
          1, abs=1e-3), name
      continue
    for reference in encdec:
      error = abs(study.flops_ratio(configs[name], configs[reference]) - 1)
      assert (error <= study.MATCH_TOLERANCE) == matched, (name, reference, error)
      if matched:  # no other depth is closer
        for other in (depth[scale] - 1, depth[scale] + 1):
          shifted = _modern_configs(runlocal, num_layers=other)[name]
          assert abs(study.flops_ratio(shifted, configs[reference]) - 1) > error, other
  # The ratios the module docstring states (decoder-only / ed_prefixlm).
  stated = {"tiny": (1.011, 0.855), "paper": (1.008, 0.851)}[scale]
  got = tuple(study.flops_ratio(configs[n], configs["ed_prefixlm"])
              for n in ("do_causallm", "do_causallm_2n"))
  assert got == pytest.approx(stated, abs=6e-4)


def _write_experiment(tmp_path, body):
  path = tmp_path / "exp.py"
  path.write_text("def sweep(add):\n" + body)
  return str(path)


REF = "dict(GLUE=1, CNNDM=2, SQuAD=3, SGLUE=4, EnDe=5, EnFr=6, EnRo=7)"


@pytest.mark.parametrize("body, message", [
    (f"  add(name='a', config='configs/t5.py:runlocal', reference={REF})\n"
     f"  add(name='a', config='configs/t5.py:runlocal', reference={REF})\n", "used twice"),
    ("  add(name='a', config='configs/t5.py:runlocal', reference=dict(GLUX=1))\n",
     r"unknown reference column\(s\) \['GLUX'\]; expected one of \['GLUE', "),
    (f"  add(name='a', config='configs/t5.py', reference={REF}, lr=1)\n",
     r"unknown add\(\) keyword\(s\) \['lr'\]; expected one of \['name', "),
    (f"  add(name='a b', config='configs/t5.py', reference={REF})\n", "name"),
    # Row p: names that are not one plain path component would escape or clobber --root.
    (f"  add(name='.', config='configs/t5.py', reference={REF})\n", "not a plain folder name"),
    (f"  add(name='..', config='configs/t5.py', reference={REF})\n", "not a plain folder name"),
    (f"  add(name='...', config='configs/t5.py', reference={REF})\n", "not a plain folder name"),
    (f"  add(name='../x', config='configs/t5.py', reference={REF})\n", "no '/'"),
    (f"  add(name='/tmp/x', config='configs/t5.py', reference={REF})\n", "no absolute path"),
    (f"  add(name='report.md', config='configs/t5.py', reference={REF})\n", "launcher writes"),
    (f"  add(name='a', config='t5', reference={REF})\n", "configs/t5.py"),
    ("  pass\n", "no points"),
])
def test_collect_errors(tmp_path, body, message):
  with pytest.raises(ValueError, match=message):
    points_lib.collect(_write_experiment(tmp_path, body))


def test_command_refuses_a_point_outside_root():
  point = points_lib.Point(name="..", config="configs/t5.py:runlocal", overrides={}, reference={})
  with pytest.raises(ValueError, match="not a plain folder name"):
    local.command(point, "/runs/table6")
  ok = points_lib.Point(name="noise_.15", config="configs/t5.py:runlocal", overrides={},
                        reference={})
  assert "--workdir=/runs/table6/noise_.15" in local.command(ok, "/runs/table6")


def test_bad_override_fails_validation(tmp_path):
  experiment = _write_experiment(
      tmp_path, f"  add(name='a', config='configs/t5.py:runlocal', reference={REF},\n"
      "      overrides={'model.num_layerz': 3})\n")
  with pytest.raises(ValueError, match="num_layerz"):
    local.validate(points_lib.collect(experiment))
  result = subprocess.run([sys.executable, "-m", "launch.local", experiment, "--root=unused",
                           "--dry_run"], capture_output=True, text=True, cwd=REPO, check=False)
  assert result.returncode == 2 and "num_layerz" in result.stderr


def test_runlocal_arg():
  assert points_lib._runlocal_arg("configs/t5.py") == "configs/t5.py:runlocal"
  assert (points_lib._runlocal_arg("configs/t5.py:arch=causal")
          == "configs/t5.py:arch=causal,runlocal")
  assert points_lib._runlocal_arg("configs/t5.py:runlocal") == "configs/t5.py:runlocal"


def test_dry_run_prints_one_command_per_point(tmp_path):
  experiment = "experiments/t5_architectures.py"
  root = str(tmp_path / "table2")
  result = subprocess.run(
      [sys.executable, "-m", "launch.local", experiment, f"--root={root}", "--dry_run",
       "--runlocal", "--extra=--config.train.num_steps=7"],
      capture_output=True, text=True, cwd=REPO, check=True)
  lines = result.stdout.strip().splitlines()
  points = points_lib.collect(experiment, runlocal=True)
  assert len(lines) == len(points)
  for line, point in zip(lines, points):
    argv = shlex.split(line)
    assert argv[1:3] == ["-m", "lm.main"]
    assert f"--config={point.config}" in argv and point.config.endswith(",runlocal")
    assert f"--workdir={os.path.join(root, point.name)}" in argv
    assert argv[-1] == "--config.train.num_steps=7"
    assert "--config.wandb.group=t5_architectures_runlocal" in argv
  assert "--config.model.num_layers=1" in lines[2]
  assert not os.path.exists(root)  # a dry run writes nothing

  only = subprocess.run(
      [sys.executable, "-m", "launch.local", experiment, f"--root={root}", "--dry_run",
       "--only=lm_lm,encdec_lm", "--no_validate"],
      capture_output=True, text=True, cwd=REPO, check=True).stdout.strip().splitlines()
  assert [shlex.split(l)[4].rsplit("/", 1)[-1] for l in only] == ["encdec_lm", "lm_lm"]
  bad = subprocess.run([sys.executable, "-m", "launch.local", experiment, f"--root={root}",
                        "--dry_run", "--only=nope"], capture_output=True, text=True, cwd=REPO,
                       check=False)
  assert bad.returncode == 2 and "nope" in bad.stderr


def _write_metrics(workdir, records, num_steps):
  os.makedirs(workdir)
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    for r in records:
      f.write(json.dumps(r) + "\n")
    f.write('{"step": 9')  # torn last line of a killed run: skipped
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({"train": {"num_steps": num_steps}}, f)


def test_report_from_fake_root(tmp_path):
  points = points_lib.collect("experiments/t5_corruption_rate.py")
  root = str(tmp_path / "table6")
  _write_metrics(os.path.join(root, "noise_10"), [
      {"step": 2, "loss": 5.0}, {"step": 2, "eval_loss": 4.5},
      {"step": 4, "loss": 4.0}, {"step": 4, "eval_loss": 3.5},
      {"step": 4, "loss": 3.9}, {"step": 4, "eval_loss": 3.25},  # resumed: newest wins
  ], num_steps=4)
  _write_metrics(os.path.join(root, "noise_15"), [
      {"step": 2, "loss": 6.0}, {"step": 2, "eval_loss": 5.75}], num_steps=4)
  os.makedirs(os.path.join(root, "noise_25"))  # started, nothing logged yet
  with open(os.path.join(root, "launch.jsonl"), "w") as f:
    f.write(json.dumps(dict(name="noise_25", returncode=1, seconds=3.0, time="t")) + "\n")

  text = report.write_report(root, points, experiment="experiments/t5_corruption_rate.py",
                            commands=[["python", "-m", "lm.main", p.name] for p in points])
  assert text == open(os.path.join(root, "report.md")).read()
  rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
          for line in text.splitlines() if line.startswith("| noise") or line.startswith("| ★")}
  assert rows["noise_10"][:4] == ["finished", "4", "3.900", "3.250"]
  assert rows["noise_10"][4:] == ["82.82", "19.00", "80.38", "69.55", "26.87", "39.28", "27.44"]
  assert rows["★ noise_15"][:4] == ["partial (2/4)", "2", "6.000", "5.750"]
  assert rows["★ noise_15"][4] == "83.28"
  assert rows["noise_25"][:4] == ["no metrics, last run exit 1", "—", "—", "—"]
  assert rows["noise_50"][:4] == ["not started", "—", "—", "—"]
  assert "pre-training losses" in text and "downstream scores" in text
  assert "`python -m lm.main noise_50`" in text
  png = os.path.join(root, "eval_loss.png")
  with open(png, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  assert os.path.getsize(png) > 5000

  # --report_only rebuilds the same table from the workdirs.
  os.remove(png)
  subprocess.run([sys.executable, "-m", "launch.local", "experiments/t5_corruption_rate.py",
                  f"--root={root}", "--report_only"], check=True, cwd=REPO,
                 capture_output=True)
  assert os.path.exists(png)
  assert "| noise_10 | finished | 4 | 3.900 | 3.250 |" in open(os.path.join(root, "report.md")).read()


def test_reference_is_optional(tmp_path):
  """A point without a paper value is run and reported with "—" in that paper column."""
  experiment = _write_experiment(
      tmp_path, f"  add(name='paper', config='configs/t5.py:runlocal', reference={REF})\n"
      "  add(name='ours', config='configs/t5.py:runlocal')\n"
      "  add(name='half', config='configs/t5.py:runlocal', reference=dict(GLUE=80, EnRo=20.5))\n")
  paper, ours, half = points_lib.collect(experiment)
  assert ours.reference == {} and not ours.baseline
  assert half.reference == {"GLUE": 80.0, "EnRo": 20.5}
  assert tuple(paper.reference) == common.COLUMNS
  assert local.command(ours, "/runs/x")[3:5] == ["--config=configs/t5.py:runlocal",
                                                  "--workdir=/runs/x/ours"]
  root = str(tmp_path / "sweep")
  _write_metrics(os.path.join(root, "ours"), [{"step": 2, "loss": 5.0}], num_steps=2)
  text = report.write_report(root, [paper, ours, half])
  rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
          for line in text.splitlines() if line.startswith("| ")}
  assert rows["paper"][4:] == ["1.00", "2.00", "3.00", "4.00", "5.00", "6.00", "7.00"]
  assert rows["ours"] == ["finished", "2", "5.000", "—"] + ["—"] * len(common.COLUMNS)
  assert rows["half"][4:] == ["80.00", "—", "—", "—", "—", "—", "20.50"]


def test_only_names_an_unknown_point(tmp_path):
  bad = subprocess.run([sys.executable, "-m", "launch.local", "experiments/t5_span_length.py",
                        f"--root={tmp_path}", "--dry_run", "--no_validate", "--only=iid,nope"],
                       capture_output=True, text=True, cwd=REPO, check=False)
  assert bad.returncode == 2
  assert bad.stderr.strip() == ("error: --only: unknown point(s) ['nope']; expected one of "
                                "['iid', 'span_02', 'span_03', 'span_05', 'span_10']")


@pytest.mark.parametrize("script", ["launch/slurm.sh", "launch/tpu_vm.sh"])
def test_shell_scripts_parse(script):
  subprocess.run(["bash", "-n", script], check=True, cwd=REPO)


def _fake_bin(tmp_path, name):
  """An executable `name` on PATH that prints its arguments, one per line."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir(exist_ok=True)
  path = bin_dir / name
  path.write_text('#!/bin/bash\nfor a in "$@"; do echo "ARG:$a"; done\n')
  path.chmod(path.stat().st_mode | stat.S_IEXEC)
  return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_slurm_script_runs_lm_main_under_srun(tmp_path):
  env = _fake_bin(tmp_path, "srun")
  env.update(LM_VENV=str(tmp_path / "none"), SLURM_SUBMIT_DIR=str(tmp_path))
  out = subprocess.run(["bash", "launch/slurm.sh", "--config=configs/t5.py:a=1,b", "--workdir=w"],
                       capture_output=True, text=True, cwd=REPO, env=env, check=True).stdout
  args = [l[4:] for l in out.splitlines() if l.startswith("ARG:")]
  # Each task runs lm.main with the arguments as they are, and records its exit status.
  assert args[:3] + args[4:] == ["--kill-on-bad-exit=1", "bash", "-c", "lm-task",
                                 "--config=configs/t5.py:a=1,b", "--workdir=w"]
  assert args[3].startswith('python -m lm.main "$@"; s=$?;')
  usage = subprocess.run(["bash", "launch/slurm.sh"], capture_output=True, text=True, cwd=REPO,
                         env=env, check=False)
  assert usage.returncode == 2 and "usage" in usage.stderr


def test_tpu_vm_script_runs_lm_main_on_every_worker(tmp_path):
  env = _fake_bin(tmp_path, "gcloud")
  env.update(ZONE="us-central2-b")
  out = subprocess.run(["bash", "launch/tpu_vm.sh", "my-tpu", "--config=configs/t5.py:a=1,b",
                        "--workdir=gs://b/r"], capture_output=True, text=True, cwd=REPO, env=env,
                       check=True).stdout
  args = [l[4:] for l in out.splitlines() if l.startswith("ARG:")]
  assert args[:6] == ["compute", "tpus", "tpu-vm", "ssh", "my-tpu", "--worker=all"]
  assert "--zone=us-central2-b" in args
  remote = args[args.index("--command") + 1]
  assert remote.startswith("cd lm && ")
  assert shlex.split(remote.split("python -m lm.main", 1)[1]) == [
      "--config=configs/t5.py:a=1,b", "--workdir=gs://b/r"]


@pytest.mark.parametrize("copy", ["0", "1"])
def test_tpu_vm_script_quotes_remote_dir_and_venv(tmp_path, copy):
  """Row o: REMOTE_DIR / REMOTE_VENV with ';' or '$(...)' stay literal on the workers."""
  env = _fake_bin(tmp_path, "gcloud")
  remote_dir, venv = "lm; touch INJECTED_DIR", "v $(touch INJECTED_VENV)"
  env.update(REMOTE_DIR=remote_dir, REMOTE_VENV=venv, COPY=copy)
  run = subprocess.run(["bash", "launch/tpu_vm.sh", "my-tpu", "--workdir=w;x"],
                       capture_output=True, text=True, cwd=REPO, env=env, check=False)
  if copy == "1":  # scp paths are not quoted alike by every scp: plain paths only
    assert run.returncode == 2 and "COPY=1 needs REMOTE_DIR" in run.stderr
    assert "ARG:" not in run.stdout
    return
  assert run.returncode == 0, run.stderr
  args = [l[4:] for l in run.stdout.splitlines() if l.startswith("ARG:")]
  remote = args[args.index("--command") + 1]
  words = shlex.split(remote)
  assert words[:3] == ["cd", remote_dir, "&&"]
  assert words[words.index("-f") + 1] == f"{venv}/bin/activate"
  assert words[-2:] == ["lm.main", "--workdir=w;x"]
  # Run it as the worker's shell would, in a fake home with those (odd) folder names.
  home = tmp_path / "home"
  (home / remote_dir / venv / "bin").mkdir(parents=True)
  (home / remote_dir / venv / "bin" / "activate").write_text("echo ACTIVATED\n")
  worker = _fake_bin(tmp_path, "python")
  out = subprocess.run(["bash", "-c", remote], capture_output=True, text=True, cwd=home,
                       env=worker, check=True).stdout
  assert out.splitlines() == ["ACTIVATED", "ARG:-m", "ARG:lm.main", "ARG:--workdir=w;x"]
  assert not list(tmp_path.rglob("INJECTED_*"))


@pytest.mark.slow
def test_runlocal_sweep_end_to_end(tmp_path):
  """Two points of Table 6 at runlocal size for 4 steps, then the report (~1 min on 2 cores)."""
  root = str(tmp_path / "table6")
  argv = [sys.executable, "-m", "launch.local", "experiments/t5_corruption_rate.py",
          f"--root={root}", "--runlocal", "--only=noise_10,noise_15",
          "--extra=--config.train.num_steps=4", "--wandb_group="]
  env = {**os.environ, "WANDB_MODE": "disabled", "XLA_FLAGS": ""}  # one CPU device, as a user
  result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, check=False)
  assert result.returncode == 0, result.stdout + result.stderr
  assert "[2/2] noise_15: done" in result.stdout
  text = open(os.path.join(root, "report.md")).read()
  for name in ("noise_10", "★ noise_15"):
    (row,) = [l for l in text.splitlines() if l.startswith(f"| {name} |")]
    cells = [c.strip() for c in row.split("|")[2:-1]]
    assert cells[:2] == ["finished", "4"], row
    assert 0 < float(cells[2]) < 20 and 0 < float(cells[3]) < 20, row
  assert "| noise_25 | not started |" in text  # listed, not run
  assert os.path.getsize(os.path.join(root, "eval_loss.png")) > 5000
  # Running again resumes the finished points (lm.main restores and stops at once).
  again = subprocess.run(argv + ["--only=noise_10"], capture_output=True, text=True, cwd=REPO,
                         env=env, check=False)
  assert again.returncode == 0, again.stdout + again.stderr
  assert "resuming at step 4" in again.stdout
