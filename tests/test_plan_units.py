"""lm/plan.py's pure parts on hand-computed cases: byte counts, OOM messages, XLA's analyses
read from stand-ins, the roofline, the console tables, config changes, the search's
bisection with a stand-in `plan`, JSON. No XLA compile: each test takes well under 1 s.
(The compiled plans are tested in tests/test_plan.py.)"""
import json
import logging
import math
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from lm import costs, metrics, plan

GIB = 2 ** 30
NAN = float("nan")


class Sharding:
  """A stand-in sharding: each dimension divided by its divisor."""

  def __init__(self, *divisors):
    self.divisors = divisors

  def shard_shape(self, shape):
    assert isinstance(shape, tuple), shape
    return tuple(s // d for s, d in zip(shape, self.divisors))


def _sds(shape, dtype):
  return jax.ShapeDtypeStruct(shape, dtype)


def test_leaf_and_tree_bytes_are_one_devices_shard():
  assert costs.shard_bytes(_sds((8, 6), jnp.float32), Sharding(2, 3)) == 4 * 2 * 4
  assert costs.shard_bytes(_sds((8, 6), jnp.bfloat16), Sharding(1, 1)) == 48 * 2
  assert costs.shard_bytes(_sds((5,), jnp.int8), Sharding(1)) == 5
  assert costs.shard_bytes(_sds((), jnp.float32), Sharding()) == 4
  keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), 6))
  assert keys.shape == (6,)
  assert costs.shard_bytes(keys, Sharding(2)) == 3 * 8  # 2 x uint32 per key
  tree = {"b": _sds((8,), jnp.bfloat16), "w": _sds((8, 4), jnp.float32)}
  shardings = {"b": Sharding(1), "w": Sharding(2, 1)}
  assert costs.tree_shard_bytes(tree, shardings) == 8 * 2 + 4 * 4 * 4
  assert costs.tree_shard_bytes({}, {}) == 0


def _run(mesh_shape):
  return types.SimpleNamespace(
      abstract_state=types.SimpleNamespace(
          params={"b": _sds((8,), jnp.bfloat16), "w": _sds((8, 4), jnp.float32)},
          opt_state=[_sds((6,), jnp.float32)]),
      state_shardings=types.SimpleNamespace(params={"b": Sharding(1), "w": Sharding(2, 1)},
                                            opt_state=[Sharding(3)]),
      mesh=types.SimpleNamespace(shape=mesh_shape), model_config="the model config",
      batch_shapes={"inputs": _sds((64, 512), jnp.int32), "targets": _sds((64, 114), jnp.int32)},
      batch_shardings={"inputs": Sharding(8, 1), "targets": Sharding(4, 2)})


def _data_config(batch_size=64, accum=1):
  return ml_collections.ConfigDict({
      "data": {"batch_size": batch_size, "inputs_length": 512, "targets_length": 114},
      "optim": {"grad_accum_steps": accum}})


@pytest.mark.parametrize("mesh, accum, rows, tensor", [
    ({"data": 2, "fsdp": 4, "tensor": 2}, 2, 4, 2),   # 64 rows / 8 batch shards / 2 steps
    ({"data": 2, "fsdp": 4}, 1, 8, 1),                # no tensor axis: 1 shard
    ({"fsdp": 4, "tensor": 4}, 0, 16, 4),             # no data axis; 0 accumulation steps = 1
    ({"data": 16}, 1, 4, 1),                          # no fsdp axis
    ({"tensor": 2}, 4, 16, 2),                        # neither: every row, 4 microbatches
])
def test_analytic_memory_adds_state_grads_updates_activations_and_batch(
    monkeypatch, mesh, accum, rows, tensor):
  calls = []

  def activation_bytes(mc, inputs_length, targets_length, tensor_shards):
    calls.append((mc, inputs_length, targets_length, tensor_shards))
    return {"total": 1000.0, "other": 5.0}
  monkeypatch.setattr(plan.accounting, "activation_bytes", activation_bytes)
  got = plan.analytic_memory(_data_config(accum=accum), _run(mesh))
  assert calls == [("the model config", 512, 114, tensor)]
  params = 8 * 2 + 4 * 4 * 4   # 80
  opt_state = 2 * 4            # 8
  batch = 8 * 512 * 4 + 16 * 57 * 4
  acts = 1000.0 * rows
  assert got == {"params": params, "opt_state": opt_state, "grads": params, "updates": params,
                 "activations": acts, "batch": batch,
                 "total": 4 * params - params + opt_state + acts + batch}
  assert all(type(v) is float for v in got.values())


@pytest.mark.parametrize("message, excess", [
    # XLA:TPU's messages (module docstring of lm/plan.py).
    ("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used 120.5G of 95.74G hbm. "
     "Exceeded hbm capacity by 24.8G.", 24.8 * 2 ** 30),
    ("exceeded HBM capacity by 3M", 3 * 2 ** 20),
    ("Exceeded hbm capacity by 1.5 K", 1.5 * 2 ** 10),
    ("exceeded hbm capacity by 2T", 2 * 2 ** 40),
    ("exceeded hbm capacity by 7", 7.0),
    ("Resource_Exhausted: used 20.00G of 16.00G hbm", 4 * 2 ** 30),
    ("RESOURCE_EXHAUSTED: Used 20GiB of 16GiB HBM", 4 * 2 ** 30),
    ("out of memory: used 3m of 1k hbm", 3 * 2 ** 20 - 2 ** 10),
    ("Out Of Memory: used 5 of 2t hbm", 5 - 2 * 2 ** 40),
    ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
     "temporaries (80.60G) exceeds available HBM (30.75G).", (80.60 - 30.75) * 2 ** 30),
    ("out of memory: required for hlo temporaries (3T) exceeds available hbm (512M)",
     3 * 2 ** 40 - 512 * 2 ** 20),
])
def test_out_of_memory_reads_the_excess_in_bytes(message, excess):
  assert costs.out_of_memory(message) == pytest.approx(excess, rel=1e-12)


def test_out_of_memory_without_a_figure_is_nan_and_other_errors_are_none():
  for message in ("RESOURCE_EXHAUSTED: too big", "Out of memory", "foo exceeded hbm",
                  "OUT OF MEMORY while allocating", "resource_exhausted"):
    assert math.isnan(costs.out_of_memory(message)), message
  for message in ("INVALID_ARGUMENT: bad shape", "", "exceeded memory", "out of  memory",
                  "Used 20G of 16G hbm", "resource exhausted"):
    assert costs.out_of_memory(message) is None, message


def test_first_takes_the_first_of_a_list_or_tuple_and_leaves_anything_else():
  assert costs.one_analysis([3, 4, 5]) == 3
  assert costs.one_analysis((6, 7)) == 6
  assert costs.one_analysis({"a": 1}) == {"a": 1}
  assert costs.one_analysis("xy") == "xy"
  assert costs.one_analysis(None) is None


class Compiled:
  """A stand-in compiled step: its analyses and its program text."""

  def __init__(self, memory=None, cost=None, text=None):
    self.memory, self.cost, self.text = memory, cost, text

  def memory_analysis(self):
    return self.memory

  def cost_analysis(self):
    return self.cost

  def as_text(self):
    if self.text is None:
      raise NotImplementedError("no program text on this backend")
    return self.text


def test_xla_memory_reads_the_analysis_and_totals_it():
  ma = types.SimpleNamespace(argument_size_in_bytes=100, output_size_in_bytes=20,
                             temp_size_in_bytes=7, alias_size_in_bytes=30,
                             generated_code_size_in_bytes=5)
  want = {"argument": 100.0, "output": 20.0, "temp": 7.0, "alias": 30.0,
          "generated_code": 5.0, "total": 97.0}
  for memory in (ma, [ma], (ma, None)):
    got = costs.xla_memory(Compiled(memory=memory))
    assert got == want and all(type(v) is float for v in got.values())


def test_xla_cost_reads_flops_bytes_and_optimal_seconds():
  cost = {"flops": 12, "bytes accessed": 34, "optimal_seconds": 0.5, "bytes_accessed": 99}
  want = {"flops": 12.0, "bytes_accessed": 34.0, "optimal_seconds": 0.5}
  assert costs.xla_cost(Compiled(cost=cost)) == want
  assert costs.xla_cost(Compiled(cost=[cost, {}])) == want
  for empty in (None, [None], {}, [{}]):
    got = costs.xla_cost(Compiled(cost=empty))
    assert set(got) == {"flops", "bytes_accessed", "optimal_seconds"}
    assert all(math.isnan(v) for v in got.values()), empty


def test_one_cpu_cost_lowers_one_device_with_the_changes(monkeypatch):
  from lm import program  # pylint: disable=g-import-not-at-top
  seen = {}

  def validate(config):
    seen["config"] = config
    return "settings"

  def build_run(settings, mesh):
    seen["settings"], seen["mesh"] = settings, mesh
    lowered = types.SimpleNamespace(
        cost_analysis=lambda: [{"flops": 7.0, "bytes accessed": 9.0, "bytes_accessed": 1.0}])
    return types.SimpleNamespace(lower_train_step=lambda: lowered)
  monkeypatch.setattr(plan.validate_lib, "validate", validate)
  monkeypatch.setattr(program, "build_run", build_run)
  config = ml_collections.ConfigDict({
      "mesh": {"shape": (2, 4, 1)}, "data": {"batch_size": 64, "num_shards": 8},
      "model": {"num_layers": 24, "scan_layers": True}})
  got = plan._one_cpu_cost(config, ("data", "fsdp", "tensor"),
                           **{"model.num_layers": 2, "model.scan_layers": False})
  assert got == {"flops": 7.0, "bytes_accessed": 9.0}
  c = seen["config"]
  assert c.mesh.shape == (1, 1, 1) and c.data.num_shards == 1 and c.data.batch_size == 64
  assert c.model.num_layers == 2 and c.model.scan_layers is False
  assert config.mesh.shape == (2, 4, 1) and config.model.num_layers == 24  # not changed
  assert seen["settings"] == "settings"
  assert dict(seen["mesh"].shape) == {"data": 1, "fsdp": 1, "tensor": 1}
  assert seen["mesh"].devices.flat[0] == jax.devices("cpu")[0]
  # Two axes; no cost figures: NaN.
  config.mesh.shape = (2, 4)
  lowered = types.SimpleNamespace(cost_analysis=lambda: None)

  def build_run_without_costs(settings, mesh):
    seen["mesh"] = mesh
    return types.SimpleNamespace(lower_train_step=lambda: lowered)
  monkeypatch.setattr(program, "build_run", build_run_without_costs)
  got = plan._one_cpu_cost(config, ("data", "fsdp"), **{"data.num_shards": 1})
  assert set(got) == {"flops", "bytes_accessed"} and all(math.isnan(v) for v in got.values())
  assert seen["config"].mesh.shape == (1, 1) and dict(seen["mesh"].shape) == {"data": 1, "fsdp": 1}


def _affine_cost(calls):
  """A stand-in `_one_cpu_cost`: FLOPs 1000 + 100 per decoder layer + 30 per encoder layer
  (bytes 50 + 7 L + 3 E), recording each lowering's (encoder, decoder) depth."""

  def one_cpu_cost(config, axis_names, **changes):
    assert axis_names == ("data", "fsdp", "tensor")
    assert changes["model.scan_layers"] is False and changes["optim.grad_accum_steps"] == 1
    layers = changes["model.num_layers"]
    encoder = changes.get("model.encoder_num_layers")
    calls.append((encoder, layers))
    e = layers if encoder is None else encoder
    return {"flops": 1000.0 + 100 * layers + 30 * e, "bytes_accessed": 50.0 + 7 * layers + 3 * e}
  return one_cpu_cost


@pytest.mark.parametrize("encoder", [None, 6])
def test_hlo_cost_extrapolates_depth_1_and_2_to_the_configs_depth(monkeypatch, encoder):
  calls = []
  monkeypatch.setattr(plan, "_one_cpu_cost", _affine_cost(calls))
  config = ml_collections.ConfigDict({"model": {"num_layers": 6, "encoder_num_layers": encoder}})
  got = plan.hlo_cost(config, ("data", "fsdp", "tensor"))
  assert calls == [(None, 1), (None, 2)]
  # The encoder has the decoder's depth: one layer is both (130 FLOPs, 10 bytes).
  assert got == {"flops": 1000.0 + 6 * 130, "bytes_accessed": 50.0 + 6 * 10,
                 "per_layer": {"flops": 130.0, "bytes_accessed": 10.0}}


def test_hlo_cost_of_an_encoder_of_the_decoders_depth_past_small_ints(monkeypatch):
  calls = []
  monkeypatch.setattr(plan, "_one_cpu_cost", _affine_cost(calls))
  config = ml_collections.ConfigDict({"model": {"num_layers": 300,
                                                "encoder_num_layers": int("300")}})
  got = plan.hlo_cost(config, ("data", "fsdp", "tensor"))
  assert calls == [(None, 1), (None, 2)]   # compared by value: one layer is both
  assert got == {"flops": 1000.0 + 300 * 130, "bytes_accessed": 50.0 + 300 * 10,
                 "per_layer": {"flops": 130.0, "bytes_accessed": 10.0}}


def test_hlo_cost_of_an_encoder_of_its_own_depth(monkeypatch):
  calls = []
  monkeypatch.setattr(plan, "_one_cpu_cost", _affine_cost(calls))
  config = ml_collections.ConfigDict({"model": {"num_layers": 3, "encoder_num_layers": 5}})
  got = plan.hlo_cost(config, ("data", "fsdp", "tensor"))
  assert calls == [(1, 1), (2, 1), (1, 2)]
  assert got == {"flops": 1000.0 + 3 * 100 + 5 * 30, "bytes_accessed": 50.0 + 3 * 7 + 5 * 3,
                 "per_layer": {"flops": 100.0, "bytes_accessed": 7.0},
                 "per_encoder_layer": {"flops": 30.0, "bytes_accessed": 3.0}}
  calls.clear()
  config.model.encoder_num_layers, config.model.num_layers = 1, 4   # a 1-layer encoder
  got = plan.hlo_cost(config, ("data", "fsdp", "tensor"))
  assert calls == [(1, 1), (2, 1), (1, 2)]
  assert got["flops"] == 1000.0 + 4 * 100 + 30 and got["bytes_accessed"] == 50.0 + 28 + 3


def test_hbm_traffic_reads_arguments_writes_outputs_and_temporaries_twice():
  mem = {"argument": 100.0, "output": 20.0, "temp": 7.0, "alias": 30.0, "total": 97.0}
  assert costs.hbm_traffic_lower_bound(mem) == 134.0
  assert costs.hbm_traffic_lower_bound({"argument": 0.0, "output": 3.0, "temp": 0.0}) == 3.0
  assert costs.hbm_traffic_lower_bound({"argument": 5.0, "output": 0.0, "temp": 0.0}) == 5.0


def test_windowed_einsum_loops_and_custom_calls_from_the_program_text():
  text = "\n".join([
      "%w = (s32[], f32[4]) while(%t), condition=%wide.windowed_dot_general_cond, body=%b",
      "%v = (s32[]) while(%u), condition=windowed_dot_general_cond.3, body=%c",
      "%x = (s32[]) while(%u), condition=%while_cond, body=%windowed_dot_general_body",
      '%a = f32[2] custom-call(%x), custom_call_target="tpu_custom_call"',
      '%b = f32[2] custom-call(%a), custom_call_target="Sharding", backend_config=""',
      '%c = f32[2] custom-call(%b), custom_call_target="tpu_custom_call"',
      '%d = f32[2] custom-call(%c), custom_call_target="__cudnn$fmhaSoftmax"'])
  compiled = Compiled(text=text)
  assert costs.windowed_einsum_loops(compiled) == 2
  calls = costs.custom_calls(compiled)
  assert calls == {"Sharding": 1, "__cudnn$fmhaSoftmax": 1, "tpu_custom_call": 2}
  assert list(calls) == ["Sharding", "__cudnn$fmhaSoftmax", "tpu_custom_call"]  # sorted
  silent = Compiled(text=None)   # a backend that does not print its program
  assert costs.program_text(silent) == "" and costs.program_text(compiled) == text
  assert costs.windowed_einsum_loops(silent) == 0 and costs.custom_calls(silent) == {}


def test_step_time_estimate_is_the_roofline():
  chip = metrics.ChipSpec(name="x", peak_flops_bf16=100.0, hbm_bytes=GIB, hbm_bandwidth=10.0)
  assert costs.step_time_estimate(300.0, 50.0, chip) == {"compute_s": 3.0, "memory_s": 5.0,
                                                        "seconds": 5.0}
  assert costs.step_time_estimate(700.0, 50.0, chip) == {"compute_s": 7.0, "memory_s": 5.0,
                                                        "seconds": 7.0}
  for unknown in (NAN, float("inf")):   # no byte count: the compute term alone
    assert costs.step_time_estimate(300.0, unknown, chip) == {"compute_s": 3.0, "memory_s": 0.0,
                                                             "seconds": 3.0}
  none = costs.step_time_estimate(300.0, 50.0, None)
  assert set(none) == {"compute_s", "memory_s", "seconds"}
  assert all(math.isnan(v) for v in none.values())


def test_gib_is_three_decimals_or_a_dash():
  assert plan._gib(1.5 * GIB) == "1.500"
  assert plan._gib(GIB // 1000) == "0.001"
  assert plan._gib(0) == "0.000"
  assert plan._gib(-2 * GIB) == "-2.000"
  for missing in (None, NAN, float("inf"), -float("inf")):
    assert plan._gib(missing) == "-"


def test_format_remat_policies_table():
  rows = [{"remat_policy": "none", "activations": 2 * GIB, "xla_temp": 3 * GIB,
           "xla_total": 5.5 * GIB, "fits": True, "step_seconds": 0.0125},
          {"remat_policy": "full", "activations": 0.5 * GIB, "xla_temp": None,
           "xla_total": None, "fits": False, "step_seconds": NAN},
          {"remat_policy": "dots_saveable", "activations": GIB, "xla_temp": None,
           "xla_total": None, "fits": None, "step_seconds": None},
          {"remat_policy": "minimal", "activations": 0, "xla_temp": 0, "xla_total": 0,
           "fits": True, "step_seconds": 1.0}]
  want = ["memory per device by remat policy (GiB)",
          "  remat              activations  XLA temp XLA total  fits  step ESTIMATE",
          "  none                     2.000     3.000     5.500  yes         12.5 ms",
          "  full                     0.500         -         -  NO                -",
          "  dots_saveable            1.000         -         -  -                 -",
          "  minimal                  0.000     0.000     0.000  yes       1000.0 ms"]
  assert plan.format_remat_policies(rows).split("\n") == want
  assert plan.format_remat_policies([]).split("\n") == want[:2]


def test_remat_policy_memory_plans_once_per_policy(monkeypatch):
  seen = []

  def fake_plan(config, target):
    seen.append((config.model.remat_policy, target))
    if config.model.remat_policy == "none":
      return {"analytic": {"activations": 4.0}, "xla": None, "fits": None,
              "excess_bytes": None, "estimate": None, "compile_seconds": None}
    return {"analytic": {"activations": 2.0}, "xla": {"memory": {"temp": 3.0, "total": 9.0}},
            "fits": False, "excess_bytes": 1.0, "estimate": {"seconds": 0.25},
            "compile_seconds": 12.0}
  monkeypatch.setattr(plan, "plan", fake_plan)
  config = ml_collections.ConfigDict({"model": {"remat_policy": "minimal"},
                                      "data": {"batch_size": 8, "num_shards": 1}})
  rows = plan.remat_policy_memory(config, "target", ["full", "none"])
  assert seen == [("full", "target"), ("none", "target")]
  assert rows == [
      {"remat_policy": "full", "activations": 2.0, "xla_temp": 3.0, "xla_total": 9.0,
       "fits": False, "excess_bytes": 1.0, "step_seconds": 0.25, "compile_seconds": 12.0},
      {"remat_policy": "none", "activations": 4.0, "xla_temp": None, "xla_total": None,
       "fits": None, "excess_bytes": None, "step_seconds": None, "compile_seconds": None}]
  assert config.model.remat_policy == "minimal"


def _row(label, analytic, xla=None):
  line = "  " + label.ljust(26) + " " + analytic.rjust(8)
  return line if xla is None else line + " " + xla.rjust(6)


def _plan_dict(**changes):
  p = {"kind": "tpu", "target": "v5p-8", "topology": "v5p:2x2x1", "num_devices": 4,
       "num_slices": 2, "compile_seconds": 12.4,
       "model": {"preset": "small", "params": 6.05e7, "mask_type": "encoder_decoder",
                 "dtype": "bfloat16", "scan_layers": True, "remat_policy": "full",
                 "attention_impl": "pallas"},
       "batch_size": 128, "inputs_length": 512, "targets_length": 114,
       "mesh": {"data": 1, "fsdp": 4, "tensor": 1}, "optimizer": "adafactor",
       "analytic": {"params": GIB, "opt_state": 0.5 * GIB, "grads": 0.25 * GIB,
                    "updates": 0.125 * GIB, "activations": 2 * GIB, "batch": 0.001 * GIB,
                    "total": 3.876 * GIB},
       "xla": {"memory": {"argument": 1.5 * GIB, "output": 1.25 * GIB, "temp": 3 * GIB,
                          "alias": 0.75 * GIB, "total": 5 * GIB},
               "custom_calls": {"tpu_custom_call": 3, "Sharding": 1}},
       "memory_per_device": 95.5 * GIB, "fits": True, "excess_bytes": 0.0,
       "flops": {"analytic": 1.0e15, "xla": 1.1e15},
       "estimate": {"basis": "roofline", "seconds": 0.5, "compute_s": 0.5, "memory_s": 0.25,
                    "compiler_seconds": 0.4, "tokens_per_s_per_chip": 40000.4, "mfu": 0.4567}}
  p.update(changes)
  return p


# The model line and lm's memory rows of _plan_dict(), in every format_plan.
_MODEL_AND_ANALYTIC_MEMORY = [
    "model small (0.0605B params, encoder_decoder, bfloat16, scan_layers=True, remat=full); "
    "batch 128 x 512/114, mesh {'data': 1, 'fsdp': 4, 'tensor': 1}, adafactor",
    "memory per device (GiB)      analytic   XLA",
    _row("params", "1.000"), _row("optimizer state", "0.500"), _row("gradients", "0.250"),
    _row("optimizer updates", "0.125"), _row("activations", "2.000"), _row("batch", "0.001")]


def test_format_plan_of_a_compiled_plan():
  want = [
      "Plan for v5p-8 (v5p:2x2x1, 4 devices, 2 slices), compiled in 12 s",
      *_MODEL_AND_ANALYTIC_MEMORY,
      _row("XLA argument", "", "1.500"), _row("XLA output", "", "1.250"),
      _row("XLA temp", "", "3.000"), _row("XLA alias", "", "0.750"),
      _row("total", "3.876", "5.000") + "   of 95.500 per device",
      "fits: yes",
      "attention_impl=pallas; custom calls: tpu_custom_call x3, Sharding x1",
      "training FLOPs per step: analytic 1e+15 (matmuls, 3x forward), XLA 1.1e+15 (HLO, all "
      "ops, all devices; +10.0 %)",
      "step time ESTIMATE (roofline): 500.0 ms (compute 500.0 ms, memory 250.0 ms), compiler's "
      "own 400.0 ms; a lower bound: implies at most 40000 tokens/s per chip, MFU <= 45.7% "
      "(lm's matmul FLOPs / peak bf16)"]
  assert plan.format_plan(_plan_dict()).split("\n") == want


def test_format_plan_variants():
  lines = plan.format_plan(_plan_dict(num_slices=1, topology=None, compile_seconds=2.6,
                                      fits=False, excess_bytes=2.5 * GIB)).split("\n")
  assert lines[0] == "Plan for v5p-8 (v5p-8, 4 devices), compiled in 3 s"
  assert "fits: NO, does not fit by 2.500 GiB" in lines
  for excess in (None, NAN):
    lines = plan.format_plan(_plan_dict(fits=False, excess_bytes=excess)).split("\n")
    assert "fits: NO, does not fit" in lines
  lines = plan.format_plan(_plan_dict(fits=None)).split("\n")
  assert "fits: unknown (no memory figure for this device)" in lines
  xla = {"memory": _plan_dict()["xla"]["memory"]}   # no custom calls recorded
  flops = {"analytic": 2.0e12, "xla": 1.5e12}
  est = dict(_plan_dict()["estimate"], compiler_seconds=None, tokens_per_s_per_chip=9.6,
             mfu=0.02)
  lines = plan.format_plan(_plan_dict(xla=xla, flops=flops, estimate=est)).split("\n")
  assert "attention_impl=pallas; custom calls: none" in lines
  assert ("training FLOPs per step: analytic 2e+12 (matmuls, 3x forward), XLA 1.5e+12 (HLO, "
          "all ops, all devices; -25.0 %)") in lines
  assert lines[-1] == ("step time ESTIMATE (roofline): 500.0 ms (compute 500.0 ms, memory "
                       "250.0 ms); a lower bound: implies at most 10 tokens/s per chip, "
                       "MFU <= 2.0% (lm's matmul FLOPs / peak bf16)")
  for seconds in (NAN, None):
    est = dict(_plan_dict()["estimate"], seconds=seconds)
    lines = plan.format_plan(_plan_dict(estimate=est)).split("\n")
    assert lines[-1] == "step time ESTIMATE: none (no peak FLOP/s for this device)"
  lines = plan.format_plan(_plan_dict(estimate=None)).split("\n")
  assert lines[-1].startswith("training FLOPs per step:")
  # Billions of params to 3 digits, next to the rounding boundary 1.125 on either side.
  for params, shown in ((1_125_000_001, "1.13B"), (1_124_999_999, "1.12B")):
    model = dict(_plan_dict()["model"], params=params)
    line = plan.format_plan(_plan_dict(model=model)).split("\n")[1]
    assert line.startswith(f"model small ({shown} params, "), line


def test_format_plan_of_an_analytic_plan():
  # The kind built at run time (as a plan read back from JSON): compared by value.
  p = _plan_dict(kind="".join(["ana", "lytic"]), target="h100-8", topology=None, num_slices=1,
                 xla=None, compile_seconds=None, flops={"analytic": 3.5e14},
                 estimate={"basis": "lm's", "seconds": 0.002, "compute_s": 0.002,
                           "memory_s": 0.0, "compiler_seconds": None,
                           "tokens_per_s_per_chip": 1234.5, "mfu": 1.0})
  want = [
      "ANALYTIC ESTIMATE ONLY: no compiler for h100-8 on this machine; memory and step time "
      "below are lm's accounting, not XLA's.",
      *_MODEL_AND_ANALYTIC_MEMORY,
      _row("total", "3.876", "-") + "   of 95.500 per device",
      "fits: yes",
      "training FLOPs per step: analytic 3.5e+14 (matmuls, 3x forward)",
      "step time ESTIMATE (lm's): 2.0 ms (compute 2.0 ms, memory 0.0 ms); a lower bound: "
      "implies at most 1234 tokens/s per chip, MFU <= 100.0% (lm's matmul FLOPs / peak bf16)"]
  assert plan.format_plan(p).split("\n") == want


def _config(batch_size=32, num_shards=32, accum=1, heads=8):
  return ml_collections.ConfigDict({
      "data": {"batch_size": batch_size, "num_shards": num_shards},
      "optim": {"grad_accum_steps": accum},
      "model": {"remat_policy": "none", "num_heads": heads},
      "mesh": {"shape": (1, -1, 1)}})


def test_with_changes_dotted_fields_of_a_locked_copy():
  config = _config(batch_size=32, num_shards=32)
  new = plan._with(config, **{"data.batch_size": 48, "model.remat_policy": "full",
                              "mesh.shape": (2, 4, 1)})
  assert new.data.batch_size == 48 and new.model.remat_policy == "full"
  assert new.mesh.shape == (2, 4, 1) and new.data.num_shards == 16   # gcd(48, 32)
  assert config.data.batch_size == 32 and config.model.remat_policy == "none"
  assert config.data.num_shards == 32
  with pytest.raises(AttributeError):
    new.data.new_field = 1   # locked
  assert plan._with(config).to_dict() == config.to_dict()


@pytest.mark.parametrize("batch_size, num_shards, want", [
    (48, 32, 16), (64, 32, 32), (32, 64, 32), (7, 3, 1), (12, 12, 12), (1, 1, 1),
    (1, 4, 1),       # a batch of 1: one shard
    (0, 32, 32),     # no batch: left alone
    (-1, 4, 4),      # not a batch size: left for validation to refuse
    (48, 0, 0),      # no shards: left alone (no division by 0)
    (48, -5, -5),
])
def test_fit_num_shards_makes_the_shards_divide_the_batch(batch_size, num_shards, want):
  config = _config(batch_size=batch_size, num_shards=num_shards)
  plan._fit_num_shards(config)
  assert config.data.num_shards == want and config.data.batch_size == batch_size


@pytest.mark.parametrize("n, heads, want", [
    (8, 8, [(1, 8, 1), (8, 1, 1), (1, 2, 4)]),
    (12, 4, [(1, 12, 1), (12, 1, 1), (1, 3, 4)]),
    (4, 8, [(1, 4, 1), (4, 1, 1)]),       # 4 devices: tensor 4 would leave fsdp 1
    (16, 6, [(1, 16, 1), (16, 1, 1)]),    # 6 heads do not split 4 ways
    (16, 2, [(1, 16, 1), (16, 1, 1)]),
    (6, 8, [(1, 6, 1), (6, 1, 1)]),       # 6 devices do not split 4 ways
    (10, 8, [(1, 10, 1), (10, 1, 1)]),
    (1, 8, [(1, 1, 1), (1, 1, 1)]),
])
def test_default_meshes(n, heads, want):
  target = types.SimpleNamespace(num_devices=n)
  assert plan.default_meshes(target, _config(heads=heads)) == want


def _fake_plan(limit, seen, tokens_per_s=None, xla_total=None, compile_seconds=None):
  """A stand-in `plan`: fits when the batch is at most `limit` (or `limit[mesh]`); records
  each probe; its estimate is `tokens_per_s[mesh]` (default: the batch)."""

  def fake(config, target):
    b = config.data.batch_size
    assert (config.model.remat_policy, tuple(config.mesh.shape), b) not in seen, "probed twice"
    fit = limit.get(tuple(config.mesh.shape)) if isinstance(limit, dict) else limit
    seen.append((config.model.remat_policy, tuple(config.mesh.shape), b))
    assert config.data.batch_size % config.data.num_shards == 0
    tps = (tokens_per_s or {}).get(tuple(config.mesh.shape), b)
    return {"fits": b <= fit, "analytic": {"total": b * GIB / 4},
            "xla": None if xla_total is None else {"memory": {"total": xla_total}},
            "compile_seconds": compile_seconds,
            "estimate": {"tokens_per_s_per_chip": tps}}
  return fake


def test_search_doubles_then_bisects_in_batch_steps(monkeypatch):
  seen, logged = [], []
  monkeypatch.setattr(plan, "plan", _fake_plan(100, seen))
  target = types.SimpleNamespace(num_devices=8)
  config = _config(batch_size=32, num_shards=32, accum=2)
  s = plan.search(config, target, policies=("none",), meshes=[(1, -1, 1)], max_batch=1000,
                  log=logged.append)
  # Step 8 x 2 = 16: 16, 32, 64 fit, 128 does not; then 96 fits, 112 does not.
  assert [b for _, _, b in seen] == [16, 32, 64, 128, 96, 112]
  assert {m for _, m, _ in seen} == {(1, 8, 1)}
  (r,) = s["results"]
  assert r["remat_policy"] == "none" and r["mesh"] == [1, 8, 1] and r["batch_step"] == 16
  assert r["largest_fit"] == 96 and r["first_fail"] == 112
  assert r["probes"] == {16: True, 32: True, 64: True, 128: False, 96: True, 112: False}
  assert r["plan"]["analytic"]["total"] == 96 * GIB / 4
  assert s["best"] is r
  assert s["overrides"] == ["--config.data.batch_size=96", "--config.model.remat_policy=none",
                            "--config.mesh.shape=1,8,1"]   # num_shards 32 divides 96
  assert logged[0] == "  remat=none           mesh=(1, 8, 1) batch=    16: fits (4.000 GiB)"
  assert logged[3] == ("  remat=none           mesh=(1, 8, 1) batch=   128: does not fit "
                       "(32.000 GiB)")
  assert len(logged) == 6
  # A fitting batch next to the failing one: no bisection; the shards made to divide.
  seen.clear()
  monkeypatch.setattr(plan, "plan", _fake_plan(16, seen, xla_total=1.5 * GIB,
                                               compile_seconds=61.4))
  logged.clear()
  s = plan.search(config, target, policies=("full",), meshes=[(2, 4, 1)], log=logged.append)
  assert [b for _, _, b in seen] == [16, 32]
  assert s["results"][0]["largest_fit"] == 16 and s["results"][0]["first_fail"] == 32
  assert s["overrides"] == ["--config.data.batch_size=16", "--config.model.remat_policy=full",
                            "--config.mesh.shape=2,4,1", "--config.data.num_shards=16"]
  assert logged[0] == ("  remat=full           mesh=(2, 4, 1) batch=    16: fits "
                       "(1.500 GiB, compiled in 61 s)")


def test_search_stops_at_max_batch_and_when_nothing_fits(monkeypatch):
  seen = []
  monkeypatch.setattr(plan, "plan", _fake_plan(10 ** 6, seen))
  target = types.SimpleNamespace(num_devices=4)
  config = _config(batch_size=8, num_shards=1)
  s = plan.search(config, target, policies=("none",), meshes=[(4, 1, 1)], max_batch=32,
                  log=lambda line: None)
  assert [b for _, _, b in seen] == [4, 8, 16, 32]   # 32 = max_batch is probed, 64 not
  r = s["results"][0]
  assert r["largest_fit"] == 32 and r["first_fail"] is None and r["plan"]["fits"]
  assert s["overrides"] == ["--config.data.batch_size=32", "--config.model.remat_policy=none",
                            "--config.mesh.shape=4,1,1"]
  seen.clear()
  s = plan.search(config, target, policies=("none",), meshes=[(4, 1, 1)], max_batch=31,
                  log=lambda line: None)
  assert [b for _, _, b in seen] == [4, 8, 16]
  seen.clear()
  monkeypatch.setattr(plan, "plan", _fake_plan(3, seen))
  s = plan.search(config, target, policies=("none", "full"), meshes=[(4, 1, 1)],
                  log=lambda line: None)
  assert seen == [("none", (4, 1, 1), 4), ("full", (4, 1, 1), 4)]
  assert [(r["remat_policy"], r["largest_fit"], r["first_fail"], r["plan"]) for r in s["results"]
          ] == [("none", None, 4, None), ("full", None, 4, None)]
  assert s["best"] is None and s["overrides"] is None
  seen.clear()   # by default up to 2^16
  monkeypatch.setattr(plan, "plan", _fake_plan(10 ** 6, seen))
  s = plan.search(config, types.SimpleNamespace(num_devices=1), policies=("none",),
                  meshes=[(1, 1, 1)], log=lambda line: None)
  assert [b for _, _, b in seen] == [2 ** k for k in range(17)]
  assert s["results"][0]["largest_fit"] == 65536
  seen.clear()   # a batch step above max_batch: no probe at all
  s = plan.search(config, target, policies=("none",), meshes=[(4, 1, 1)], max_batch=3,
                  log=lambda line: None)
  assert seen == [] and s["results"][0]["largest_fit"] is None
  assert s["results"][0]["first_fail"] is None and s["best"] is None
  seen.clear()   # a batch step of 512 (past CPython's small ints, which `is` would hide)
  monkeypatch.setattr(plan, "plan", _fake_plan(1500, seen))
  s = plan.search(config, types.SimpleNamespace(num_devices=512), policies=("none",),
                  meshes=[(1, 512, 1)], log=lambda line: None)
  assert [b for _, _, b in seen] == [512, 1024, 2048, 1536]
  assert s["results"][0]["largest_fit"] == 1024 and s["results"][0]["first_fail"] == 1536


def test_search_picks_the_highest_estimated_throughput(monkeypatch):
  seen = []
  speeds = {(1, 8, 1): 500.0, (8, 1, 1): 900.0, (1, 2, 4): 700.0}
  monkeypatch.setattr(plan, "plan", _fake_plan(64, seen, tokens_per_s=speeds))
  target = types.SimpleNamespace(num_devices=8)
  config = _config(batch_size=64, num_shards=64, heads=8)
  s = plan.search(config, target, policies=("none", "full"), log=lambda line: None)
  # default_meshes: all-fsdp, all-data, fsdp x tensor 4; each policy in turn.
  assert [(r["remat_policy"], tuple(r["mesh"])) for r in s["results"]] == [
      ("none", (1, 8, 1)), ("none", (8, 1, 1)), ("none", (1, 2, 4)),
      ("full", (1, 8, 1)), ("full", (8, 1, 1)), ("full", (1, 2, 4))]
  assert s["best"] is s["results"][1]   # the first of the two fastest
  assert s["overrides"][2] == "--config.mesh.shape=8,1,1"
  # Equal (or no) estimates: the largest batch wins; no estimate counts as 0.
  for speeds, best in (({(1, 8, 1): None, (1, 2, 4): None}, 1),
                       ({(1, 8, 1): 3.0, (1, 2, 4): 3.0}, 1),
                       ({(1, 8, 1): 0.5, (1, 2, 4): None}, 0)):
    seen.clear()
    monkeypatch.setattr(plan, "plan", _fake_plan({(1, 8, 1): 32, (1, 2, 4): 40}, seen,
                                                 tokens_per_s=speeds))
    s = plan.search(config, target, policies=("none",), meshes=[(1, 8, 1), (1, 2, 4)],
                    log=lambda line: None)
    assert [r["largest_fit"] for r in s["results"]] == [32, 40]
    assert s["best"] is s["results"][best], speeds


def test_format_search_table():
  fitting = {"fits": True, "analytic": {"total": 2 * GIB},
             "xla": {"memory": {"total": 1.5 * GIB}},
             "estimate": {"tokens_per_s_per_chip": 1234.6}}
  analytic = {"fits": True, "analytic": {"total": 2 * GIB}, "xla": None, "estimate": None}
  s = {"results": [
      {"remat_policy": "none", "mesh": [1, 8, 1], "largest_fit": 96, "first_fail": 112,
       "plan": fitting},
      {"remat_policy": "full", "mesh": [8, 1, 1], "largest_fit": 64, "first_fail": None,
       "plan": analytic},
      {"remat_policy": "minimal", "mesh": [1, 2, 4], "largest_fit": None, "first_fail": 8,
       "plan": None}],
      "best": {"remat_policy": "none"}, "overrides": ["--a=1", "--b=2"]}
  want = ["largest global batch that fits (compiled; step = data x fsdp x grad_accum):",
          "  remat            mesh           largest fit first fail GiB/device "
          "tokens/s/chip (est.)",
          "  none             (1, 8, 1)               96        112      1.500 "
          "                1235",
          "  full             (8, 1, 1)               64          -      2.000 "
          "                   -",
          "  minimal          (1, 2, 4)             none          8          - "
          "                   -",
          "best (highest estimated tokens/s per chip): --a=1 --b=2"]
  assert plan.format_search(s).split("\n") == want
  s = {"results": [], "best": None, "overrides": None}
  assert plan.format_search(s).split("\n") == want[:2] + [
      "nothing fits: no batch for any remat policy and mesh tried."]


def test_json_default_and_write_json(tmp_path):
  assert plan._json_default(np.float32(1.5)) == 1.5
  assert type(plan._json_default(np.float32(1.5))) is float
  assert plan._json_default(np.int64(3)) == 3 and type(plan._json_default(np.int64(3))) is int
  assert plan._json_default((1, 2)) == "(1, 2)"
  assert plan._json_default(tmp_path) == str(tmp_path)
  path = tmp_path / "plan.json"
  plan.write_json(str(path), {"b": np.float64(0.5), "a": [np.int32(2), None], "c": tmp_path})
  assert path.read_text() == ('{\n  "a": [\n    2,\n    null\n  ],\n  "b": 0.5,\n'
                              f'  "c": "{tmp_path}"\n}}\n')
  assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]   # no temporary file left


def _stand_in_build(monkeypatch, compiled=None, compile_error=None, build_error=None):
  """Stand-ins for what `plan` calls (mesh, validation, build, accounting, hlo_cost); returns
  the dict its calls are recorded in."""
  from lm import program  # pylint: disable=g-import-not-at-top
  seen = {"hlo": []}
  mc = types.SimpleNamespace(mask_type="causal", dtype="bfloat16", scan_layers=True,
                             remat_policy="full", attention_impl="xla")

  def lower_train_step():
    if compiled is None and compile_error is None:
      raise AssertionError("no compile expected")

    def compile_():
      if compile_error is not None:
        raise compile_error
      return compiled
    return types.SimpleNamespace(compile=compile_)
  run = types.SimpleNamespace(model_config=mc, mesh=types.SimpleNamespace(
      shape={"data": 1, "fsdp": 4, "tensor": 1}), lower_train_step=lower_train_step)

  def build_run(settings, mesh):
    seen["build"] = (settings, mesh)
    if build_error is not None:
      raise build_error
    return run
  mesh = types.SimpleNamespace(axis_names=("data", "fsdp", "tensor"))
  monkeypatch.setattr(plan, "make_target_mesh",
                      lambda shape, target: seen.setdefault("mesh", (shape, target)) and mesh)
  monkeypatch.setattr(plan.validate_lib, "validate", lambda c: ("validated", c))
  monkeypatch.setattr(program, "build_run", build_run)
  monkeypatch.setattr(plan.accounting, "training_flops",
                      lambda m, i, t, b: seen.setdefault("flops", (m, i, t, b)) and 4e12)
  monkeypatch.setattr(plan.accounting, "count_params", lambda m: 123.0 if m is mc else None)
  monkeypatch.setattr(plan.config_lib, "preset_name", lambda c: "t5/small/causal")
  monkeypatch.setattr(plan, "analytic_memory",
                      lambda c, r: {"params": 1.0, "total": 2.5e9} if r is run else None)
  monkeypatch.setattr(plan, "hlo_cost", lambda c, axes: seen["hlo"].append(axes) or {
      "flops": 4.4e12, "bytes_accessed": 1.0, "per_layer": {"flops": 1.0}})
  seen["mc"], seen["run"], seen["mesh_object"] = mc, run, mesh
  return seen


def _plan_config():
  return ml_collections.ConfigDict({
      "mesh": {"shape": (1, -1, 1)},
      "data": {"batch_size": 16, "inputs_length": 100, "targets_length": 28},
      "optim": {"grad_accum_steps": 2, "name": "adafactor"}})


def _target(kind="tpu", memory_bytes=8 * GIB, chip=True):
  spec = metrics.ChipSpec(name="v5p", peak_flops_bf16=1e12, hbm_bytes=8 * GIB,
                          hbm_bandwidth=1e9) if chip else None
  return plan.Target(name="v5p-8", kind=kind, num_devices=4, chip=spec, topology="v5p:2x2x1",
                     num_slices=2, devices=None, memory_bytes=memory_bytes)


def _compiled(optimal_seconds=0.3):
  return Compiled(
      memory=[types.SimpleNamespace(argument_size_in_bytes=1e9, output_size_in_bytes=5e8,
                                    temp_size_in_bytes=2e9, alias_size_in_bytes=5e8,
                                    generated_code_size_in_bytes=1.0)],
      cost=[{"flops": 1e12, "bytes accessed": 7.0, "optimal_seconds": optimal_seconds}],
      text='condition=%a.windowed_dot_general_cond\ncustom_call_target="tpu_custom_call"')


def _clock(monkeypatch, *times):
  monkeypatch.setattr(plan, "time", types.SimpleNamespace(perf_counter=iter(times).__next__))


def test_plan_of_a_compiled_step_from_stand_ins(monkeypatch):
  seen = _stand_in_build(monkeypatch, compiled=_compiled())
  config, target = _plan_config(), _target()
  _clock(monkeypatch, 100.0, 107.5)
  p = plan.plan(config, target)
  assert seen["mesh"] == ((1, -1, 1), target)
  assert seen["build"] == (("validated", config), seen["mesh_object"])
  assert seen["flops"] == (seen["mc"], 100, 28, 16)
  assert seen["hlo"] == [("data", "fsdp", "tensor")]
  assert p.pop("compile_seconds") == 7.5
  memory = {"argument": 1e9, "output": 5e8, "temp": 2e9, "alias": 5e8, "generated_code": 1.0,
            "total": 3e9}
  estimate = p.pop("estimate")
  assert p == {
      "target": "v5p-8", "kind": "tpu", "topology": "v5p:2x2x1", "num_slices": 2,
      "num_devices": 4,
      "chip": {"name": "v5p", "peak_flops_bf16": 1e12, "hbm_bytes": 8 * GIB,
               "hbm_bandwidth": 1e9},
      "memory_per_device": 8 * GIB,
      "model": {"preset": "t5/small/causal", "params": 123.0, "mask_type": "causal",
                "dtype": "bfloat16", "scan_layers": True, "remat_policy": "full",
                "attention_impl": "xla"},
      "batch_size": 16, "inputs_length": 100, "targets_length": 28, "grad_accum_steps": 2,
      "mesh": {"data": 1, "fsdp": 4, "tensor": 1}, "optimizer": "adafactor",
      "analytic": {"params": 1.0, "total": 2.5e9},
      "flops": {"analytic": 4e12, "xla": 4.4e12},
      "xla": {"memory": memory,
              "cost": {"flops": 1e12, "bytes_accessed": 7.0, "optimal_seconds": 0.3},
              "hlo": {"flops": 4.4e12, "bytes_accessed": 1.0, "per_layer": {"flops": 1.0}},
              "windowed_einsum_loops": 1, "custom_calls": {"tpu_custom_call": 1}},
      "fits": True, "excess_bytes": 0.0}
  # 4.4e12 FLOPs / 4 devices at 1e12 FLOP/s: 1.1 s; (1e9 + 5e8 + 2 x 2e9) bytes at 1e9 B/s.
  assert estimate == {
      "compute_s": pytest.approx(1.1), "memory_s": 5.5, "seconds": 5.5,
      "compiler_seconds": 0.3,
      "basis": "roofline: XLA's FLOPs at peak, XLA's memory read and written once at HBM "
               "bandwidth",
      "tokens_per_s_per_chip": pytest.approx(16 * 128 / 5.5 / 4),
      "mfu": pytest.approx(4e12 / 5.5 / 4e12)}


@pytest.mark.parametrize("memory_bytes, fits, excess", [
    (2e9, False, 1e9), (3e9, True, 0.0), (3e9 + 1, True, 0.0), (3e9 - 1, False, 1.0),
    (None, None, None), (0, None, None)])
def test_plan_fits_against_the_devices_memory(monkeypatch, memory_bytes, fits, excess):
  _stand_in_build(monkeypatch, compiled=_compiled(optimal_seconds=0.0))
  p = plan.plan(_plan_config(), _target(memory_bytes=memory_bytes))
  assert p["fits"] is fits and p["excess_bytes"] == excess
  assert p["memory_per_device"] == memory_bytes
  assert p["estimate"]["compiler_seconds"] is None


def test_plan_of_a_compile_that_runs_out_of_memory(monkeypatch):
  message = ("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm.\n  Used 12G of 8G "
             "hbm. Exceeded hbm capacity by 4G." + " x" * 400)
  _stand_in_build(monkeypatch, compile_error=RuntimeError(message))
  _clock(monkeypatch, 50.0, 52.25)
  p = plan.plan(_plan_config(), _target())
  assert p["fits"] is False and p["excess_bytes"] == 4 * GIB
  assert p["compile_seconds"] == 2.25
  assert p["compile_error"] == " ".join(message.split())[:500] and len(p["compile_error"]) == 500
  assert p["compile_error"].startswith("RESOURCE_EXHAUSTED: Ran out of memory in memory space "
                                       "hbm. Used 12G")
  assert p["xla"] is None and "estimate" not in p
  _stand_in_build(monkeypatch, compile_error=RuntimeError("INTERNAL: a compiler bug"))
  _clock(monkeypatch, 60.0)
  with pytest.raises(RuntimeError, match="a compiler bug"):
    plan.plan(_plan_config(), _target())


def test_plan_refuses_a_config_the_build_refuses_in_one_line(monkeypatch):
  _stand_in_build(monkeypatch, build_error=ValueError("mesh  (3, 1, 1)\n  does not fit"))
  with pytest.raises(plan.PlanError) as e:
    plan.plan(_plan_config(), _target())
  assert str(e.value) == "mesh (3, 1, 1) does not fit" and e.value.__cause__ is None
  assert e.value.__suppress_context__


def test_plan_without_a_compile_is_lms_estimate(monkeypatch):
  seen = _stand_in_build(monkeypatch)   # lower_train_step fails if called
  # "analytic" built at run time too: the kind is compared by value.
  for target, compile_step in ((_target(kind="analytic"), True), (_target(kind="tpu"), False),
                               (_target(kind="".join(["ana", "lytic"])), True)):
    p = plan.plan(_plan_config(), target, compile_step=compile_step)
    assert seen["hlo"] == [] and p["xla"] is None and p["compile_seconds"] is None
    assert p["flops"] == {"analytic": 4e12}
    assert p["fits"] is True and p["excess_bytes"] == 0.0   # lm's 2.5e9 bytes of 8 GiB
    # 4e12 FLOPs / 4 devices at 1e12 FLOP/s: 1 s; no byte count, no memory term.
    assert p["estimate"] == {
        "compute_s": 1.0, "memory_s": 0.0, "seconds": 1.0, "compiler_seconds": None,
        "basis": "lm's analytic FLOPs at peak compute (no compiler for this target)",
        "tokens_per_s_per_chip": 16 * 128 / 4, "mfu": 1.0}
  p = plan.plan(_plan_config(), _target(memory_bytes=2e9), compile_step=False)
  assert p["fits"] is False and p["excess_bytes"] == 0.5e9
  p = plan.plan(_plan_config(), _target(kind="cpu", chip=False), compile_step=False)
  assert p["chip"] is None
  assert p["estimate"]["tokens_per_s_per_chip"] is None and p["estimate"]["mfu"] is None
  monkeypatch.setattr(plan.accounting, "training_flops", lambda *a: 0.0)   # 0 s: no rate
  p = plan.plan(_plan_config(), _target(), compile_step=False)
  assert p["estimate"]["seconds"] == 0.0
  assert p["estimate"]["tokens_per_s_per_chip"] is None and p["estimate"]["mfu"] is None


def _stand_in_main(monkeypatch, fits=True, best=True):
  seen = {}

  def resolve_target(name, num_slices, memory_gib):
    seen["target"] = (name, num_slices, memory_gib)
    return "the target"

  def fake_plan(config, target):
    seen["plan"] = (config, target)
    return {"fits": fits, "answer": np.float32(0.5)}

  def fake_search(config, target, **kwargs):
    seen["search"] = (config, target, kwargs)
    kwargs["log"]("a probe")
    return {"best": {"x": 1} if best else None}

  def remat_policy_memory(config, target, policies):
    seen["remat"] = (config, target, policies)
    return [{"remat_policy": p} for p in policies]
  monkeypatch.setattr(plan, "resolve_target", resolve_target)
  monkeypatch.setattr(plan, "plan", fake_plan)
  monkeypatch.setattr(plan, "search", fake_search)
  monkeypatch.setattr(plan, "remat_policy_memory", remat_policy_memory)
  monkeypatch.setattr(plan, "format_plan", lambda p: "PLAN TABLE")
  monkeypatch.setattr(plan, "format_search", lambda s: "SEARCH TABLE")
  monkeypatch.setattr(plan, "format_remat_policies", lambda rows: f"{len(rows)} POLICIES")
  return seen


_CONFIG = "--config=configs/t5.py:runlocal"


def test_main_plans_prints_and_writes_json(monkeypatch, capsys, tmp_path):
  seen = _stand_in_main(monkeypatch)
  loggers = [logging.getLogger(name) for name in ("absl", "jax._src")]
  for logger in loggers:
    monkeypatch.setattr(logger, "level", logging.NOTSET)
  out = tmp_path / "plan.json"
  assert plan.main(["lm.plan", _CONFIG, "--topology=h100-8", f"--json={out}"]) == 0
  assert [logger.level for logger in loggers] == [logging.WARNING] * 2   # quiet
  assert capsys.readouterr().out == "PLAN TABLE\n"
  assert seen["target"] == ("h100-8", 1, None) and seen["plan"][1] == "the target"
  assert seen["plan"][0].is_locked and seen["plan"][0].data.targets_length   # derived
  assert "remat" not in seen and "search" not in seen
  assert json.loads(out.read_text()) == {"fits": True, "answer": 0.5}
  assert plan.main(["lm.plan", _CONFIG, "--topology=v5p-8", "--num_slices=2", "--memory_gib=0.5",
                    "--mesh=2,4,1", "--remat_policies=none,,full"]) == 0
  assert seen["target"] == ("v5p-8", 2, 0.5)
  assert tuple(seen["plan"][0].mesh.shape) == (2, 4, 1)
  assert seen["remat"][1:] == ("the target", ["none", "full"])
  assert capsys.readouterr().out == "PLAN TABLE\n2 POLICIES\n"
  for fits, status in ((False, 1), (None, 0)):
    _stand_in_main(monkeypatch, fits=fits)
    assert plan.main(["lm.plan", _CONFIG, "--topology=h100-8"]) == status


class Stdout:
  """A stand-in stdout recording what was written by each flush."""

  def __init__(self):
    self.text, self.flushed = "", []

  def write(self, text):
    self.text += text

  def flush(self):
    self.flushed.append(self.text)


def test_main_locks_the_config_it_reads(monkeypatch, tmp_path):
  seen = _stand_in_main(monkeypatch)
  path = tmp_path / "unlocked.py"
  path.write_text("from configs import t5\n\n\ndef get_config(arg=None):\n"
                  "  config = t5.get_config(arg)\n  config.unlock()\n  return config\n")
  assert plan.main(["lm.plan", f"--config={path}:runlocal", "--topology=h100-8"]) == 0
  assert seen["plan"][0].is_locked


def test_main_searches(monkeypatch):
  seen = _stand_in_main(monkeypatch)
  out = Stdout()
  monkeypatch.setattr("sys.stdout", out)
  assert plan.main(["lm.plan", _CONFIG, "--topology=h100-8", "--search"]) == 0
  assert out.text == "a probe\nSEARCH TABLE\n"
  assert out.flushed[0] == "a probe\n"   # each probe's line shows at once
  config, target, kwargs = seen["search"]
  assert target == "the target" and "plan" not in seen
  assert kwargs["policies"] == ["none", "minimal", "dots_saveable", "full"]
  assert kwargs["meshes"] is None and kwargs["max_batch"] == 65536
  assert plan.main(["lm.plan", _CONFIG, "--topology=h100-8", "--search", "--search_max_batch=1",
                    "--search_policies=full,", "--search_meshes=1,8,1;8,1,1"]) == 0
  kwargs = seen["search"][2]
  assert kwargs["policies"] == ["full"] and kwargs["max_batch"] == 1
  assert kwargs["meshes"] == [(1, 8, 1), (8, 1, 1)]
  _stand_in_main(monkeypatch, best=False)
  assert plan.main(["lm.plan", _CONFIG, "--topology=h100-8", "--search"]) == 1


@pytest.mark.parametrize("args, error", [
    ([], "--config and --topology are required, e.g. --config=configs/t5.py:size=xxl "
         "--topology=v5p-128."),
    ([_CONFIG], "--config and --topology are required"),
    (["--topology=h100-8"], "--config and --topology are required"),
    ([_CONFIG, "--topology=h100-8", "extra"], "unexpected arguments ['extra']"),
    ([_CONFIG, "--topology=h100-8", "--no_such_flag=1"], "Unknown command line flag"),
    ([_CONFIG, "--topology=h100-8", "--memory_gib=0"],
     "--memory_gib must be a positive number of GiB, got 0.0."),
    ([_CONFIG, "--topology=h100-8", "--memory_gib=-1"], "--memory_gib must be a positive"),
    ([_CONFIG, "--topology=h100-8", "--memory_gib=nan"], "--memory_gib must be a positive"),
    ([_CONFIG, "--topology=h100-8", "--memory_gib=inf"], "--memory_gib must be a positive"),
    ([_CONFIG, "--topology=h100-8", "--search_max_batch=0"],
     "--search_max_batch must be >= 1, got 0."),
    ([_CONFIG, "--topology=h100-8", "--mesh=2,x"], "mesh"),
])
def test_main_bad_input_is_one_line_and_status_2(monkeypatch, capsys, args, error):
  seen = _stand_in_main(monkeypatch)
  assert plan.main(["lm.plan", *args]) == 2
  captured = capsys.readouterr()
  assert captured.err.startswith("error: ") and error in captured.err, captured.err
  assert captured.err.count("\n") == 1 and captured.out == ""
  assert "plan" not in seen and "search" not in seen


def test_main_reports_a_plan_error_in_one_line(monkeypatch, capsys, tmp_path):
  _stand_in_main(monkeypatch)

  def refuse(config, target):
    raise plan.PlanError("the mesh\n   does not fit")
  monkeypatch.setattr(plan, "plan", refuse)
  out = tmp_path / "plan.json"
  assert plan.main(["lm.plan", _CONFIG, "--topology=h100-8", f"--json={out}"]) == 2
  assert capsys.readouterr().err == "error: the mesh does not fit\n"
  assert not out.exists()
  monkeypatch.setattr(plan, "plan", lambda c, t: (_ for _ in ()).throw(ValueError("bad  value")))
  assert plan.main(["lm.plan", _CONFIG, "--topology=h100-8"]) == 2
  assert capsys.readouterr().err == "error: bad value\n"


def test_python_m_lm_plan_runs_main(monkeypatch, capsys):
  import runpy  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr("sys.argv", ["lm.plan"])
  with pytest.warns(RuntimeWarning, match="found in sys.modules"):
    with pytest.raises(SystemExit) as e:
      runpy.run_module("lm.plan", run_name="__main__")
  assert e.value.code == 2
  assert capsys.readouterr().err.startswith("error: --config and --topology are required")


@pytest.mark.parametrize("flag", ["--help", "-help", "--helpfull", "-?"])
def test_help_prints_the_usage_and_the_flags_and_exits_0(flag, capsys):
  """absl's FlagValues of lm.plan defines no help flag: `--help` was 'Unknown command line
  flag' and exit 2."""
  assert plan.main(["lm.plan", flag]) == 0
  out = capsys.readouterr().out
  assert out.startswith("`python -m lm.plan`: compile") and "Exit status" in out
  assert "--topology" in out and "--search_max_batch" in out
  assert plan.main(["lm.plan", "--config=c.py", "--", "--help"]) == 2   # after --: an argument
