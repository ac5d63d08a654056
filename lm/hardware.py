"""What `lm.plan` plans for: a `--topology` name -> devices, chip figures and a mesh (a Target).

  resolve_target("v5p-128")   # 64 compile-only TPU v5p devices (libtpu), torus 4x4x4
  resolve_target("cpu-8")     # 8 simulated CPU devices
  resolve_target("local")     # the devices present
  resolve_target("h100-8")    # no devices: lm's analytic estimate only

TPU slices are named as Cloud TPU names them (v4-N / v5p-N count TensorCores, two per chip;
v5e-N / v6e-N count chips) or as libtpu topologies (v5p:4x4x4); their devices come from
libtpu's topology description, so no TPU needs to be attached. `make_target_mesh` lays
config.mesh.shape over a target's devices (a hybrid mesh over several slices, an abstract
mesh for analytic targets). Planning itself (compile, memory, FLOPs, search) is lm/plan.py.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re
from collections.abc import Sequence
from typing import Any

import jax

from lm import metrics as metrics_lib
from lm import partitioning

GIB = 2 ** 30
TPU_GENERATIONS = ("v4", "v5p", "v5e", "v6e")
# Cloud TPU names count TensorCores for v4 / v5p (2 per chip, one JAX device per chip in
# megacore mode) and chips for v5e / v6e.
_CORES_PER_CHIP = {"v4": 2, "v5p": 2, "v5e": 1, "v6e": 1}
_TORUS_DIMS = {"v4": 3, "v5p": 3, "v5e": 2, "v6e": 2}
_CHIP_CONFIG = {"v4": "megacore", "v5p": "megacore", "v5e": "default", "v6e": "default"}
GPU_NAMES = ("a100", "a100_80gb", "h100", "h100_pcie", "h200")
INSTALL_HINT = "pip install -e '.[tpu]' (libtpu, pinned to lm's jax version)"


class PlanError(ValueError):
  """Bad input to the planner: one line saying what is wrong and what to do."""


@dataclasses.dataclass(frozen=True)
class Target:
  """What to plan for.

  Attributes:
    name: as given on the command line ("v5p-128", "cpu-8", "h100-8", ...).
    kind: "tpu" (compiled with libtpu), "cpu" (simulated CPU devices), "local" (the
      devices present) or "analytic" (no compiler: lm's estimate only).
    num_devices: JAX devices in the target (chips on TPU v4/v5p/v5e/v6e and GPUs).
    chip: spec-sheet figures of one device, None for CPUs.
    topology: the libtpu topology name ("v5p:4x4x4"), TPU only.
    num_slices: TPU slices (the data axis spans them).
    devices: the (compile-only, on TPU) devices; None for "analytic".
    memory_bytes: memory per device the plan must fit in.
  """
  name: str
  kind: str
  num_devices: int
  chip: metrics_lib.ChipSpec | None
  topology: str | None = None
  num_slices: int = 1
  devices: Sequence[Any] | None = None
  memory_bytes: float | None = None


def tpu_topology(name: str) -> tuple[str, str]:
  """(generation, libtpu topology name) of a Cloud TPU name or a libtpu topology.

  "v5p-128" -> ("v5p", "v5p:4x4x4"); "v6e-16" -> ("v6e", "v6e:4x4"); "v4:2x2x1" is
  returned as it is. The torus grows by doubling its smallest dimension (the last one
  on ties), which gives the Cloud TPU slice shapes (v5p-8 2x2x1, -16 2x2x2, -32 2x2x4,
  -64 2x4x4, -128 4x4x4, ...; v5e-4 2x2, -8 2x4, -16 4x4, ..., -256 16x16).

  Raises:
    PlanError: the name is neither.
  """
  m = re.fullmatch(r"(v4|v5p|v5e|v6e):(\d+(?:x\d+){1,2})", name)
  if m:
    gen, dims = m.group(1), m.group(2)
    if len(dims.split("x")) != _TORUS_DIMS[gen]:
      raise PlanError(f"topology {name!r}: {gen} slices are {_TORUS_DIMS[gen]}-D "
                      f"(e.g. {gen}:{'x'.join(['2'] * _TORUS_DIMS[gen])}).")
    return gen, name
  m = re.fullmatch(r"(v4|v5p|v5e|v6e)-(\d+)", name)
  if not m:
    raise PlanError(
        f"unknown topology {name!r}; expected one of "
        f"[{', '.join(g + '-N' for g in TPU_GENERATIONS)} (Cloud TPU names, e.g. v5p-128, "
        f"v6e-16), <generation>:AxBxC (a libtpu topology, e.g. v5p:4x4x4), cpu-N, local, "
        f"{', '.join(g + '-N' for g in GPU_NAMES)} (GPU clusters, analytic only)].")
  gen, n = m.group(1), int(m.group(2))
  cores = _CORES_PER_CHIP[gen]
  chips = n // cores
  smallest = 4 if _TORUS_DIMS[gen] == 3 else 1
  if n % cores or chips < smallest or chips & (chips - 1):
    raise PlanError(f"unknown topology {name!r}: {gen}-N needs N = {cores} x a power-of-two "
                    f"number of chips (at least {smallest}), e.g. {gen}-{cores * smallest * 2}.")
  dims = [2, 2, 1] if _TORUS_DIMS[gen] == 3 else [1, 1]
  while math.prod(dims) < chips:
    i = max(j for j in range(len(dims)) if dims[j] == min(dims))
    dims[i] *= 2
  return gen, f"{gen}:{'x'.join(map(str, dims))}"


def _libtpu_available() -> bool:
  return (importlib.util.find_spec("libtpu") is not None
          or bool(os.environ.get("TPU_LIBRARY_PATH")))


def tpu_devices(topology: str, generation: str, num_slices: int = 1) -> list:
  """Compile-only devices of a TPU topology (libtpu; works without a TPU and with
  JAX_PLATFORMS=cpu, since the TPU plugin is loaded for the topology alone).

  Raises:
    PlanError: libtpu is missing, or libtpu does not know the topology.
  """
  if not _libtpu_available():
    raise PlanError(f"planning for TPU {topology} needs libtpu, which is not installed; "
                    f"{INSTALL_HINT}.")
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  try:
    desc = topologies.get_topology_desc(
        topology_name=topology, platform="tpu", chip_config_name=_CHIP_CONFIG[generation],
        num_slices=num_slices)
  except (RuntimeError, ValueError) as e:  # JaxRuntimeError is a RuntimeError
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "lockfile" in first:
      raise PlanError(f"libtpu is loaded by another process (another lm.plan?), and it allows "
                      f"one at a time: wait for it, or set ALLOW_MULTIPLE_LIBTPU_LOAD=1 to "
                      f"plan alongside it (planning uses no TPU). libtpu said: {first}") from None
    raise PlanError(f"libtpu cannot describe topology {topology!r} x {num_slices} slice(s): "
                    f"{first}") from None
  return list(desc.devices)


def _host_memory_bytes() -> float:
  return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def resolve_target(name: str, num_slices: int = 1, memory_gib: float | None = None) -> Target:
  """Parses `--topology` into a Target (devices listed, nothing compiled).

  Raises:
    PlanError: unknown name, too few simulated CPU devices, missing libtpu.
  """
  if num_slices < 1:
    raise PlanError(f"--num_slices must be >= 1, got {num_slices}.")
  override = None if memory_gib is None else memory_gib * GIB
  m = re.fullmatch(r"cpu-(\d+)", name)
  if m or name == "local":
    if num_slices != 1:
      raise PlanError("--num_slices applies to TPU topologies only.")
    devices = jax.devices("cpu") if m else jax.devices()
    if m:
      n = int(m.group(1))
      if n < 1 or len(devices) < n:
        raise PlanError(f"target {name!r} needs {n} CPU devices but {len(devices)} are present; "
                        f"set XLA_FLAGS=--xla_force_host_platform_device_count={n}.")
      devices = devices[:n]
    chip = metrics_lib.chip_spec(devices[0])
    if chip is not None:
      memory = chip.hbm_bytes
    else:  # CPU devices share the host's memory
      memory = _host_memory_bytes() / len(devices)
    return Target(name=name, kind="cpu" if m else "local", num_devices=len(devices),
                  chip=chip, devices=devices, memory_bytes=override or memory)
  m = re.fullmatch(r"([a-z0-9_]+)-(\d+)", name)
  if m and m.group(1) in GPU_NAMES:
    n = int(m.group(2)) * num_slices
    chip = metrics_lib.chip_spec_by_name(m.group(1))
    return Target(name=name, kind="analytic", num_devices=n, chip=chip,
                  num_slices=num_slices, memory_bytes=override or chip.hbm_bytes)
  gen, topology = tpu_topology(name)
  devices = tpu_devices(topology, gen, num_slices)
  chip = metrics_lib.chip_spec(devices[0])
  return Target(name=name, kind="tpu", num_devices=len(devices), chip=chip, topology=topology,
                num_slices=num_slices, devices=devices,
                memory_bytes=override or chip.hbm_bytes)


def make_target_mesh(mesh_shape: Any, target: Target):
  """The (data, fsdp, tensor) mesh of `mesh_shape` (config.mesh.shape: sizes, one may be
  -1, or their text) over the target's devices.

  Several TPU slices: a hybrid mesh whose data axis spans the slices (data-center
  network between slices, ICI within). "analytic" targets: an AbstractMesh.

  Raises:
    PlanError: the mesh does not match the target's device count.
  """
  try:
    shape = partitioning.parse_mesh_shape(mesh_shape, target.num_devices)
  except ValueError as e:
    raise PlanError(f"config.mesh.shape on {target.name} ({target.num_devices} devices): "
                    f"{e}") from None
  if len(shape) != len(partitioning.AXIS_NAMES):
    raise PlanError(f"config.mesh.shape {shape} needs {len(partitioning.AXIS_NAMES)} sizes "
                    f"for axes {partitioning.AXIS_NAMES}.")
  auto = (jax.sharding.AxisType.Auto,) * len(shape)
  if target.kind == "analytic":
    return jax.sharding.AbstractMesh(shape, partitioning.AXIS_NAMES, axis_types=auto)
  if target.num_slices == 1:
    return partitioning.make_mesh(shape, devices=target.devices)
  if shape[0] % target.num_slices:
    raise PlanError(f"config.mesh.shape {shape}: the data axis ({shape[0]}) must be a "
                    f"multiple of --num_slices={target.num_slices} (it spans the slices).")
  from jax.experimental import mesh_utils  # pylint: disable=g-import-not-at-top
  ici = (shape[0] // target.num_slices,) + shape[1:]
  dcn = (target.num_slices,) + (1,) * (len(shape) - 1)
  devices = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices=target.devices)
  return jax.sharding.Mesh(devices, partitioning.AXIS_NAMES, axis_types=auto)
