r"""The plans table of docs/planning.md: `lm.plan` for the T5.1.1 family and its decoder-only
counterparts (and two T5Gemma shapes) on a few TPU topologies, one process per plan, then a
Markdown table.

    python -m tools.plan_table --out=runs/plans [--only=xxl] [--table=FILE]

Each row is the command in its "command" column, run with `--json=<out>/<row>.json`; a row
whose JSON exists is not compiled again (delete it to redo), so an interrupted run
continues. Needs the tpu extra (`pip install -e '.[tpu]'`). Compiles run one after
another: each takes one to a few minutes on a 2-core machine.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

# (row name, config argument, topology, mesh). Layers scanned (a compile in minutes, not a
# quarter of an hour), all-fsdp meshes, the study's batch of 128 sequences (512/114 tokens
# for the encoder-decoder; the decoder-only model reads their concatenation), bfloat16
# activations, float32 params, Adafactor: the configs' defaults.
ROWS = [
    ("small", "configs/t5.py:size=small", "v5p-8", "1,4,1"),
    ("small_causal", "configs/t5.py:arch=causal,size=small", "v5p-8", "1,4,1"),
    ("base", "configs/t5.py:size=base", "v5p-8", "1,4,1"),
    ("base_causal", "configs/t5.py:arch=causal,size=base", "v5p-8", "1,4,1"),
    ("large", "configs/t5.py:size=large", "v5p-16", "1,8,1"),
    ("large_causal", "configs/t5.py:arch=causal,size=large", "v5p-16", "1,8,1"),
    ("xl", "configs/t5.py:size=xl", "v5p-32", "1,16,1"),
    ("xl_causal", "configs/t5.py:arch=causal,size=xl", "v5p-32", "1,16,1"),
    ("xl_v5e", "configs/t5.py:size=xl", "v5e-16", "1,16,1"),
    ("xxl", "configs/t5.py:size=xxl", "v5p-128", "1,64,1"),
    ("xxl_causal", "configs/t5.py:arch=causal,size=xxl", "v5p-128", "1,64,1"),
    ("xxl_v4", "configs/t5.py:size=xxl", "v4-128", "1,64,1"),
    ("xxl_v6e", "configs/t5.py:size=xxl", "v6e-64", "1,64,1"),
    ("xxl_v5e", "configs/t5.py:size=xxl", "v5e-64", "1,64,1"),
    # T5Gemma's blocks on the study's data and vocabulary (32128, not Gemma's 256000): its
    # alternating local / global layers are two layer bodies, so the stacks are unrolled
    # (the 5th field: scan_layers False; a compile of about 7 minutes here).
    ("t5gemma_b", "configs/t5.py:family=t5gemma,size=b", "v5p-8", "1,4,1", False),
    ("t5gemma_ml", "configs/t5.py:family=t5gemma,size=ml", "v5p-8", "1,4,1", False),
    ("t5gemma_2b", "configs/t5.py:family=t5gemma,size=2b", "v5p-16", "1,8,1", False),
]


def command(config: str, topology: str, mesh: str, scan: bool = True) -> list[str]:
  return ["python", "-m", "lm.plan", f"--config={config}", f"--topology={topology}",
          f"--mesh={mesh}", f"--config.model.scan_layers={scan}", "--config.data.num_shards=1"]


def _gib(x) -> str:
  return "-" if x is None else f"{x / 2**30:.1f}"


def row_markdown(cmd: list[str], p: dict) -> str:
  """One table row of a plan's JSON (lm.plan's schema)."""
  m, x, est = p["model"], p.get("xla") or {}, p.get("estimate") or {}
  mem = (x.get("memory") or {}).get("total")
  if p["fits"]:
    fits = "yes"
  else:
    fits = f"no, by {_gib(p.get('excess_bytes'))} GiB"
  chips = p["num_devices"]
  mesh = "x".join(str(v) for v in p["mesh"].values())
  step = est.get("seconds")
  mfu = est.get("mfu")
  flops = p["flops"]
  ratio = f"{flops['xla'] / flops['analytic']:.3f}" if flops.get("xla") else "-"
  seconds = p.get("compile_seconds")
  compiled = "-" if seconds is None else f"{seconds:.0f} s"
  return (f"| {m['preset']} {m['mask_type']} ({m['params'] / 1e9:.2f}B) | {p['target']} "
          f"({chips} chips, {_gib(p['memory_per_device'])} GiB) | {mesh} | "
          f"{p['batch_size']} x {p['inputs_length']}/{p['targets_length']} | "
          f"{_gib(p['analytic']['total'])} | {_gib(mem)} | {fits} | "
          f"{'-' if not step else f'{step * 1e3:.0f} ms'} | "
          f"{'-' if mfu is None else f'<= {mfu:.0%}'} | {ratio} | "
          f"{compiled} | `{shlex.join(cmd)}` |")


HEADER = ("| model | target | mesh (data x fsdp x tensor) | batch x lengths | analytic GiB/chip "
          "| XLA GiB/chip | fits | step-time ESTIMATE (roofline, a lower bound) | implied MFU "
          "(an upper bound) | XLA/lm FLOPs "
          "| compile | command |\n|---|---|---|---|---|---|---|---|---|---|---|---|")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--out", default="runs/plans", help="Folder for each row's JSON.")
  parser.add_argument("--only", default="", help="Comma-separated row names (default: all).")
  parser.add_argument("--table", default=None, help="Also write the Markdown table here.")
  args = parser.parse_args(argv)
  only = {r for r in args.only.split(",") if r}
  unknown = only - {r[0] for r in ROWS}
  if unknown:
    parser.error(f"unknown rows {sorted(unknown)}; expected some of {[r[0] for r in ROWS]}")
  os.makedirs(args.out, exist_ok=True)
  lines = [HEADER]
  for name, config, topology, mesh, *scan in ROWS:
    if only and name not in only:
      continue
    cmd = command(config, topology, mesh, *scan)
    path = os.path.join(args.out, f"{name}.json")
    if not os.path.exists(path):
      t0 = time.perf_counter()
      tmp = path + ".tmp"
      status = subprocess.call([sys.executable, *cmd[1:], f"--json={tmp}"])
      if status == 2 or not os.path.exists(tmp):
        print(f"error: row {name} failed (exit {status}): {shlex.join(cmd)}", file=sys.stderr)
        return 2
      os.replace(tmp, path)
      print(f"{name}: {time.perf_counter() - t0:.0f} s", flush=True)
    with open(path) as f:
      lines.append(row_markdown(cmd, json.load(f)))
  table = "\n".join(lines)
  print(table)
  if args.table:
    with open(args.table, "w") as f:
      f.write(table + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
