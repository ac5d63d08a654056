"""lm/plan.py and lm/hardware.py: targets, the analytic accounting against XLA's analyses, errors,
TPU plans."""
import json

import jax
import numpy as np
import pytest

from configs import t5
from lm import config as common
from lm import costs, hardware, metrics, plan
from lm.model import accounting

HAS_LIBTPU = hardware._libtpu_available()  # pylint: disable=protected-access
needs_libtpu = pytest.mark.skipif(not HAS_LIBTPU, reason="needs the tpu extra: pip install -e '.[tpu]'")


@pytest.mark.parametrize("name, topology", [
    # Cloud TPU slice shapes (cloud.google.com/tpu/docs/v4, /v5p, /v5e, /v6e).
    ("v5p-8", "v5p:2x2x1"), ("v5p-16", "v5p:2x2x2"), ("v5p-32", "v5p:2x2x4"),
    ("v5p-64", "v5p:2x4x4"), ("v5p-128", "v5p:4x4x4"), ("v4-256", "v4:4x4x8"),
    ("v4-512", "v4:4x8x8"), ("v5e-4", "v5e:2x2"), ("v5e-8", "v5e:2x4"), ("v5e-256", "v5e:16x16"),
    ("v6e-16", "v6e:4x4"), ("v6e-64", "v6e:8x8"), ("v5p:4x4x8", "v5p:4x4x8"),
])
def test_cloud_tpu_names_map_to_slice_shapes(name, topology):
  assert hardware.tpu_topology(name)[1] == topology


@pytest.mark.parametrize("name", ["v9-8", "v5p-12", "v5p-7", "v6e-3", "tpu", "v5p:4x4", "h100"])
def test_unknown_topology_is_a_one_line_error(name):
  with pytest.raises(plan.PlanError) as e:
    plan.resolve_target(name)
  assert "\n" not in str(e.value) and name in str(e.value)


def test_unknown_topology_lists_the_expected_names():
  with pytest.raises(plan.PlanError, match=r"unknown topology 'v9-8'; expected one of "
                     r"\[v4-N, v5p-N, v5e-N, v6e-N .*cpu-N, local, a100-N, .*h200-N"):
    plan.resolve_target("v9-8")


def test_missing_libtpu_is_a_one_line_error_with_the_fix(monkeypatch, capsys):
  monkeypatch.setattr(hardware, "_libtpu_available", lambda: False)
  with pytest.raises(plan.PlanError, match=r"libtpu.*pip install -e '\.\[tpu\]'"):
    plan.resolve_target("v5p-8")
  status = plan.main(["lm.plan", "--config=configs/t5.py:size=small", "--topology=v5p-8"])
  err = capsys.readouterr().err
  assert status == 2 and err.startswith("error: ") and err.count("\n") == 1 and "[tpu]" in err


def test_mesh_not_matching_the_device_count_is_a_one_line_error(capsys):
  config = common.derive(t5.get_config("runlocal"))
  config.mesh.shape = (3, 1, 1)
  with pytest.raises(plan.PlanError, match=r"cpu-8 \(8 devices\).*\(3, 1, 1\)"):
    plan.plan(config, plan.resolve_target("cpu-8"))
  status = plan.main(["lm.plan", "--config=configs/t5.py:runlocal", "--topology=cpu-8",
                      "--mesh=3,1,1"])
  err = capsys.readouterr().err
  assert status == 2 and err.startswith("error: ") and err.count("\n") == 1 and "(3, 1, 1)" in err


@pytest.mark.parametrize("flag,named", [
    ("--memory_gib=nan", "--memory_gib must be a positive number of GiB, got nan"),
    ("--memory_gib=-4", "--memory_gib must be a positive number of GiB"),
    ("--memory_gib=0", "--memory_gib must be a positive number of GiB"),
    ("--memory_gib=inf", "--memory_gib must be a positive number of GiB"),
    ("--search_max_batch=0", "--search_max_batch must be >= 1"),
    ("--num_slices=0", "--num_slices must be >= 1"),
])
def test_numeric_flags_are_one_line_errors(capsys, flag, named):
  status = plan.main(["lm.plan", "--config=configs/t5.py:runlocal", "--topology=cpu-8", flag])
  err = capsys.readouterr().err
  assert status == 2 and err.startswith(f"error: {named}") and err.count("\n") == 1, err


def test_too_few_cpu_devices_says_how_to_get_them():
  with pytest.raises(plan.PlanError, match="xla_force_host_platform_device_count=64"):
    plan.resolve_target("cpu-64")


def test_gpu_cluster_from_a_cpu_machine_is_an_analytic_plan(capsys, tmp_path):
  out = tmp_path / "plan.json"
  status = plan.main(["lm.plan", "--config=configs/t5.py:size=xl", "--topology=h100-8",
                      "--mesh=1,8,1", f"--json={out}"])
  text = capsys.readouterr().out
  assert status == 0
  assert text.splitlines()[0].startswith("ANALYTIC ESTIMATE ONLY")
  p = json.loads(out.read_text())
  assert p["kind"] == "analytic" and p["xla"] is None and p["num_devices"] == 8
  h100 = metrics.chip_spec_by_name("h100")
  assert p["memory_per_device"] == h100.hbm_bytes
  n = accounting.count_params(common.model_config(common.derive(t5.get_config("size=xl"))))
  # float32 params split 8 ways over fsdp (every T5 kernel has an `embed` dim of 2048).
  assert p["analytic"]["params"] == pytest.approx(4 * n / 8, rel=0.01)
  flops = p["flops"]["analytic"]
  assert p["estimate"]["seconds"] == pytest.approx(flops / 8 / h100.peak_flops_bf16)
  assert p["estimate"]["mfu"] == pytest.approx(1.0)  # compute-bound at peak: an upper bound


def test_chip_table_has_memory_and_bandwidth_for_every_target_generation():
  for name in ("v4", "v5e", "v5p", "v6e", "a100", "h100", "h200"):
    spec = metrics.chip_spec_by_name(name)
    assert spec.peak_flops_bf16 > 1e14 and spec.hbm_bytes >= 16 * 2**30
    assert spec.hbm_bandwidth > 5e11
  assert metrics.chip_spec("TPU v5 lite").hbm_bytes == 16 * 2**30
  assert metrics.chip_spec("TPU v5").name == "v5p"


def test_out_of_memory_messages_are_parsed():
  msg = ("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory "
         "space hbm. Used 120.50G of 95.74G hbm. Exceeded hbm capacity by 24.76G.")
  assert costs.out_of_memory(msg) == pytest.approx(24.76 * 2**30)
  assert costs.out_of_memory("RESOURCE_EXHAUSTED: Used 20.00G of 16.00G hbm.") == pytest.approx(
      4 * 2**30)
  assert costs.out_of_memory(
      "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
      "temporaries (80.60G) exceeds available HBM (30.75G).") == pytest.approx(49.85 * 2**30)
  assert costs.out_of_memory("INVALID_ARGUMENT: bad shape") is None


@pytest.fixture(scope="module")
def cpu_plans():
  """Plans of a mid-size encoder-decoder (emb 256, 4+4 scanned layers, T5 vocabulary,
  batch 32 x 128/30, float32) on 8 simulated CPU devices: data, fsdp and tensor meshes."""
  out = {}
  for name, mesh in (("data", (8, 1, 1)), ("fsdp", (1, 8, 1)), ("tensor", (2, 1, 4))):
    config = common.derive(t5.get_config("size=small_cpu,batch=32,inputs_length=128"))
    config.model.scan_layers = True
    config.mesh.shape = mesh
    out[name] = plan.plan(config, plan.resolve_target("cpu-8"))
  return out


@pytest.mark.parametrize("mesh", ["data", "fsdp", "tensor"])
def test_analytic_memory_and_flops_agree_with_xla_on_cpu(cpu_plans, mesh):
  p = cpu_plans[mesh]
  analytic, xla = p["analytic"]["total"], p["xla"]["memory"]["total"]
  assert analytic == pytest.approx(xla, rel=0.15), (p["analytic"], p["xla"]["memory"])
  # The state is exact: XLA's arguments are the params, the optimizer state and the batch.
  state = p["analytic"]["params"] + p["analytic"]["opt_state"] + p["analytic"]["batch"]
  assert state == pytest.approx(p["xla"]["memory"]["argument"], rel=0.01)
  # lm's matmul FLOPs against XLA's count of all operations (loop-corrected): XLA counts
  # the elementwise work too, so it is at most 10 % above.
  assert p["flops"]["analytic"] <= p["flops"]["xla"] <= 1.10 * p["flops"]["analytic"]
  assert p["fits"] and p["estimate"]["seconds"] != p["estimate"]["seconds"]  # NaN: no CPU spec


@pytest.mark.parametrize("arg, accum", [("size=small_cpu,batch=8,inputs_length=64", 1),
                                         ("arch=causal,size=small_cpu,batch=8", 2)])
def test_hlo_cost_counts_every_layer_and_microbatch(arg, accum):
  # The depth-1/depth-2 extrapolation against the step lowered whole: every layer unrolled,
  # one microbatch (an accumulation loop's body is counted once, like a scan's).
  config = common.derive(t5.get_config(arg))
  config.optim.grad_accum_steps = accum
  config.model.scan_layers = True
  axes = ("data", "fsdp", "tensor")
  whole = plan.hlo_cost(config, axes)
  unrolled = plan._one_cpu_cost(  # pylint: disable=protected-access
      config, axes, **{"model.scan_layers": False, "optim.grad_accum_steps": 1})
  assert config.model.num_layers >= 3 and whole["per_layer"]["flops"] > 0
  # Not bit-exact: the lowered programs differ by a few elementwise ops (28,672 FLOPs of
  # 2.4e10 here, measured), where one layer is ~1e9.
  assert whole["flops"] == pytest.approx(unrolled["flops"], rel=1e-5)
  assert whole["bytes_accessed"] == pytest.approx(unrolled["bytes_accessed"], rel=1e-4)
  # The premise: the program as configured (scanned, k microbatches) counts one layer per
  # stack and one microbatch, the depth-1 program's FLOPs (of the full batch when k = 1).
  configured = plan._one_cpu_cost(config, axes)  # pylint: disable=protected-access
  depth1 = whole["flops"] - (config.model.num_layers - 1) * whole["per_layer"]["flops"]
  assert configured["flops"] == pytest.approx(depth1 / accum, rel=0.05)


def test_hlo_cost_of_an_encoder_of_its_own_depth_and_width():
  """encoder_num_layers (9b_2b's kind of model): the (1, 1) / (2, 1) / (1, 2) lowerings
  extrapolated to 5 encoder and 3 decoder layers equal the step lowered whole."""
  config = common.derive(t5.get_config("size=small_cpu,batch=8,inputs_length=64"))
  config.model.encoder_num_layers, config.model.num_layers = 5, 3
  config.model.separate_encoder_embedding, config.model.encoder_emb_dim = True, 384
  axes = ("data", "fsdp", "tensor")
  whole = plan.hlo_cost(config, axes)
  unrolled = plan._one_cpu_cost(config, axes)  # pylint: disable=protected-access
  assert whole["flops"] == pytest.approx(unrolled["flops"], rel=1e-5)
  assert whole["per_encoder_layer"]["flops"] > whole["per_layer"]["flops"] > 0  # 384 wide
  analytic = 3 * accounting.forward_flops(common.model_config(config), 64,
                                         config.data.targets_length)["total"] * 8
  assert analytic <= whole["flops"] <= 1.10 * analytic


def test_data_parallel_replicates_what_fsdp_and_tensor_split(cpu_plans):
  data, fsdp, tensor = (cpu_plans[k]["analytic"] for k in ("data", "fsdp", "tensor"))
  assert fsdp["params"] == pytest.approx(data["params"] / 8, rel=0.02)
  assert tensor["activations"] < data["activations"] * 4  # 4x the rows, heads split 4 ways


def _tpu_config(arg, mesh, batch=None, module=t5, remat_policy=None):
  config = common.derive(module.get_config(arg))
  config.model.scan_layers = True  # compiles in minutes, not a quarter of an hour
  config.mesh.shape = mesh
  if batch:
    config.data.batch_size = batch
  if remat_policy:
    config.model.remat_policy = remat_policy
  config.data.num_shards = 1
  return config


@pytest.mark.slow
@pytest.mark.tpu_compile
@needs_libtpu
def test_t5_xxl_fits_on_v5p_128_with_fsdp():
  # Measured on the development machine: 6 min to compile under heavy load, 30.6 GiB/chip.
  p = plan.plan(_tpu_config("size=xxl,batch=256", (1, 64, 1)), plan.resolve_target("v5p-128"))
  assert p["kind"] == "tpu" and p["num_devices"] == 64 and p["fits"]
  assert 5 * 2**30 < p["xla"]["memory"]["total"] < 95 * 2**30
  assert p["analytic"]["total"] == pytest.approx(p["xla"]["memory"]["total"], rel=0.5)
  assert p["flops"]["analytic"] <= p["flops"]["xla"] <= 1.15 * p["flops"]["analytic"]
  assert 0 < p["estimate"]["mfu"] <= 1
  # The roofline: XLA's FLOPs per chip at peak; XLA's memory read and written once.
  v5p, mem, est = metrics.chip_spec_by_name("v5p"), p["xla"]["memory"], p["estimate"]
  assert est["compute_s"] == pytest.approx(p["flops"]["xla"] / 64 / v5p.peak_flops_bf16)
  traffic = mem["argument"] + mem["output"] + 2 * mem["temp"]
  assert est["memory_s"] == pytest.approx(traffic / v5p.hbm_bandwidth)
  assert est["seconds"] == max(est["compute_s"], est["memory_s"])


@pytest.mark.slow
@pytest.mark.tpu_compile
@needs_libtpu
def test_gpt3_6_7b_fits_on_v4_64_with_fsdp():
  from configs import gpt3  # pylint: disable=g-import-not-at-top
  # Without rematerialisation the activations of 64 x 2048 tokens alone need 80.6 GiB of
  # temporaries per 32 GiB chip (XLA:TPU); with full remat only each layer's input is kept.
  p = plan.plan(_tpu_config("size=6_7b", (1, 32, 1), batch=64, module=gpt3,
                            remat_policy="full"), plan.resolve_target("v4-64"))
  assert p["model"]["params"] > 6e9 and p["fits"], (p.get("compile_error"), p["analytic"])
  # Full remat runs every layer's forward pass twice: a third more layer FLOPs than lm's
  # count (3x forward), the logits excepted. (Before the HLO count, XLA:TPU's windowed
  # einsums, counted once per loop, made this 0.62 of lm's.)
  assert p["xla"]["windowed_einsum_loops"] > 0
  assert 1.05 * p["flops"]["analytic"] <= p["flops"]["xla"] <= 4 / 3 * p["flops"]["analytic"]


@pytest.mark.slow
@pytest.mark.tpu_compile
@needs_libtpu
def test_all_data_mesh_does_not_fit_and_says_by_how_much(capsys):
  # The model and slice of test_gpt3_6_7b_fits_on_v4_64_with_fsdp with the mesh all-data:
  # each 32 GiB chip holds all 6.7B float32 params, their gradients and the Adam moments.
  status = plan.main(["lm.plan", "--config=configs/gpt3.py:size=6_7b", "--topology=v4-64",
                      "--mesh=32,1,1", "--config.model.scan_layers=True",
                      "--config.model.remat_policy=full", "--config.data.batch_size=64",
                      "--config.data.num_shards=1"])
  out = capsys.readouterr().out
  assert status == 1 and "does not fit by" in out and "Traceback" not in out


@pytest.mark.slow
@pytest.mark.tpu_compile
@needs_libtpu
def test_search_brackets_the_largest_batch():
  # Two probes, ~1.5 min under load: the tiny model unscanned (no scan correction to lower)
  # at 512 input tokens, where XLA:TPU's memory grows with the batch (batch 4: 142 MiB,
  # batch 8: 271 MiB per v5e chip, measured); with 0.2 GiB the doubling stops at 8. (At 64
  # tokens the tiny model's temporaries do not grow with the batch: 16 needs less than 4.)
  config = _tpu_config("runlocal,inputs_length=512", (1, 4, 1))
  config.model.scan_layers = False
  result = plan.search(config, plan.resolve_target("v5e-4", memory_gib=0.2),
                       policies=("none",), meshes=[(1, 4, 1)], max_batch=64)
  r = result["results"][0]
  assert r["largest_fit"] and r["first_fail"] == r["largest_fit"] + r["batch_step"]
  assert r["probes"][r["largest_fit"]] and not r["probes"][r["first_fail"]]
  assert f"--config.data.batch_size={r['largest_fit']}" in result["overrides"]


@pytest.mark.slow
@pytest.mark.tpu_compile
@needs_libtpu
@pytest.mark.parametrize("arch,position,mesh,calls", [
    # flash for the encoder, the decoder (T5 bias) and cross-attention: forward, dkv and dq.
    ("encoder_decoder", "t5_relative", (1, 4, 1), 9),
    # splash for a causal stack without a bias, batch and heads sharded (shard_map).
    ("causal", "rope", (1, 2, 2), 3),
])
def test_pallas_attention_is_in_the_compiled_tpu_program(arch, position, mesh, calls):
  # The tiny model scanned, 128-token rows (the kernels' block); ~2 min each under load.
  config = _tpu_config(f"runlocal,inputs_length=128,arch={arch}", mesh)
  config.data.targets_length = 128
  config.model.attention_impl = "pallas"
  config.model.position_encoding = position
  p = plan.plan(config, plan.resolve_target("v5p-8"))
  assert p["model"]["attention_impl"] == "pallas"
  assert p["xla"]["custom_calls"].get("tpu_custom_call") == calls, p["xla"]["custom_calls"]


def test_custom_calls_are_counted_from_the_compiled_program():
  class Compiled:
    def as_text(self):
      return ('%a = f32[2] custom-call(%x), custom_call_target="tpu_custom_call"\n'
              '%b = f32[2] custom-call(%a), custom_call_target="tpu_custom_call", x=1\n'
              '%c = f32[2] custom-call(%b), custom_call_target="Sharding"\n')
  assert costs.custom_calls(Compiled()) == {"Sharding": 1, "tpu_custom_call": 2}
  compiled = jax.jit(lambda x: x * 2).lower(np.ones(3, np.float32)).compile()
  assert costs.custom_calls(compiled) == {}


def test_plan_table_rows_render_an_analytic_plan():
  # tools/plan_table.py's Markdown row from lm.plan's JSON schema (an analytic target: no
  # compile), and every row's command parses as lm.plan flags.
  from tools import plan_table  # pylint: disable=g-import-not-at-top
  cmd = plan_table.command("configs/t5.py:size=xl", "h100-8", "1,8,1")
  config = common.derive(t5.get_config("size=xl"))
  config.mesh.shape = (1, 8, 1)
  p = json.loads(json.dumps(plan.plan(config, plan.resolve_target("h100-8"))))
  row = plan_table.row_markdown(cmd, p)
  cells = [c.strip() for c in row.strip("|").split("|")]
  assert len(cells) == plan_table.HEADER.splitlines()[0].count("|") - 1
  assert cells[1].startswith("h100-8 (8 chips, 80.0 GiB)") and cells[6] == "yes"
  assert cells[9] == "-" and cells[10] == "-" and cells[-1] == f"`{' '.join(cmd)}`"
  names = [r[0] for r in plan_table.ROWS]
  assert len(names) == len(set(names)) and {"small", "xxl", "xxl_causal"} <= set(names)


def test_libtpu_held_by_another_process_is_a_one_line_error_with_the_fix(monkeypatch):
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(hardware, "_libtpu_available", lambda: True)

  def held(**kwargs):
    raise RuntimeError("ABORTED: Internal error when accessing libtpu multi-process lockfile. "
                       "Run \"$ sudo rm /tmp/libtpu_lockfile\".\nmore")
  monkeypatch.setattr(topologies, "get_topology_desc", held)
  with pytest.raises(plan.PlanError, match="ALLOW_MULTIPLE_LIBTPU_LOAD=1") as e:
    hardware.tpu_devices("v5e:2x2", "v5e")
  assert "\n" not in str(e.value)
