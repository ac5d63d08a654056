r"""Scaling-law fit of a study: L(N, D) = E + A / N**alpha + B / D**beta, with bootstrap intervals.

  python -m launch.sweep experiments/scaling.py --root=runs/scaling --parallel=2
  python -m launch.scaling experiments/scaling.py --root=runs/scaling

For every point: N = its non-embedding parameters (lm.model.accounting, the embedding and
logits tables left out, as in Kaplan et al. 2020), D = the tokens it trained on (steps x
global batch x (inputs_length + targets_length): every token the model reads or predicts,
the same count for every architecture), L = its final held-out loss (metrics.jsonl), and
its mini score when the mini suite has run. Points are fitted per architecture (the
`arch=` of their config), by least squares on L with several starting points (the best
fit kept), and every parameter gets a percentile bootstrap interval (points resampled with
replacement). From the fit, the compute-optimal frontier under C = 6 N D:
N_opt(C) = G (C/6)**(beta/(alpha+beta)), D_opt = C / (6 N_opt), G = (alpha A / (beta B))
**(1/(alpha+beta)) (Hoffmann et al. 2022, eq. 4). Writes `<root>/scaling.md` (the points,
the fitted parameters with intervals, the frontier at a few budgets) and `<root>/scaling.png`
(loss against D per model size, with the fit's curves). Only scipy, numpy and matplotlib.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from collections.abc import Sequence

import numpy as np

PARAMS = ("E", "A", "alpha", "B", "beta")


@dataclasses.dataclass(frozen=True)
class Fit:
  """L(N, D) = E + A / N**alpha + B / D**beta."""
  E: float
  A: float
  alpha: float
  B: float
  beta: float

  def loss(self, n, d):
    n, d = np.asarray(n, np.float64), np.asarray(d, np.float64)
    return self.E + self.A / n ** self.alpha + self.B / d ** self.beta

  def compute_optimal(self, compute) -> tuple[np.ndarray, np.ndarray]:
    """(N_opt, D_opt) minimising L at compute C = 6 N D (float or array of FLOPs)."""
    a, b = self.alpha, self.beta
    g = (a * self.A / (b * self.B)) ** (1.0 / (a + b))
    n = g * (np.asarray(compute, np.float64) / 6.0) ** (b / (a + b))
    return n, np.asarray(compute, np.float64) / (6.0 * n)


def fit_loss(n: Sequence[float], d: Sequence[float], loss: Sequence[float]) -> Fit:
  """Least-squares fit of L(N, D) to points (several starts; the lowest residual wins).

  Args:
    n, d, loss: float[P] parameters, tokens and losses of P >= 5 points.

  Raises:
    ValueError: fewer than 5 points (5 parameters), or non-positive / non-finite values.
  """
  from scipy import optimize  # pylint: disable=g-import-not-at-top
  n, d, loss = (np.asarray(x, np.float64) for x in (n, d, loss))
  if n.size < 5 or not (n.size == d.size == loss.size):
    raise ValueError(f"a scaling fit needs >= 5 points with N, D and L each, got {n.size}")
  if not (np.all(np.isfinite([n, d, loss])) and np.all(n > 0) and np.all(d > 0)):
    raise ValueError("N and D must be positive and every value finite")
  log_n, log_d = np.log(n), np.log(d)

  def residual(p):  # p = (E, log A, alpha, log B, beta)
    return p[0] + np.exp(p[1] - p[2] * log_n) + np.exp(p[3] - p[4] * log_d) - loss

  best = None
  lo = [0.0, -20.0, 0.0, -20.0, 0.0]
  hi = [float(loss.min()), 40.0, 2.0, 40.0, 2.0]
  for alpha in (0.1, 0.3, 0.6):
    for beta in (0.1, 0.3, 0.6):
      for e_frac in (0.2, 0.8):
        x0 = [e_frac * loss.min(), math.log(loss.mean()) + alpha * log_n.mean(), alpha,
              math.log(loss.mean()) + beta * log_d.mean(), beta]
        x0 = np.clip(x0, np.add(lo, 1e-9), np.subtract(hi, 1e-9))
        r = optimize.least_squares(residual, x0, bounds=(lo, hi), x_scale="jac",
                                   max_nfev=5000)
        if best is None or r.cost < best.cost:
          best = r
  e, log_a, alpha, log_b, beta = best.x
  return Fit(float(e), float(math.exp(log_a)), float(alpha), float(math.exp(log_b)),
             float(beta))


def bootstrap(n, d, loss, *, reps: int = 200, seed: int = 0, level: float = 0.95
              ) -> dict[str, tuple[float, float]]:
  """Percentile intervals of each parameter from fits to resampled points.

  Returns:
    {param: (low, high)} at `level`, over the resamples whose fit succeeded.
  """
  n, d, loss = (np.asarray(x, np.float64) for x in (n, d, loss))
  rng = np.random.default_rng(seed)
  fits = []
  for _ in range(reps):
    idx = rng.integers(0, n.size, n.size)
    if np.unique(idx).size < 5:
      continue
    try:
      fits.append(dataclasses.astuple(fit_loss(n[idx], d[idx], loss[idx])))
    except ValueError:
      continue
  values = np.asarray(fits)
  q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
  return {p: tuple(float(v) for v in np.percentile(values[:, i], q))
          for i, p in enumerate(PARAMS)}


# ----------------------------------------------------------------------------------------
# a study's points


def point_figures(workdir: str) -> dict | None:
  """{arch, n, d, loss, mini} of a finished point's run directory, None if it has no loss."""
  from launch import report  # pylint: disable=g-import-not-at-top
  from lm import config as config_lib  # pylint: disable=g-import-not-at-top
  from lm.model import accounting  # pylint: disable=g-import-not-at-top
  summary = report.summarize(workdir)
  if summary["eval_loss"] is None:
    return None
  config = config_lib.load_config_json(os.path.join(workdir, "config.json"))
  model = config_lib.model_config(config)
  n = accounting.count_non_embedding_params(model)
  data = config.data
  d = summary["step"] * data.batch_size * (data.inputs_length + data.targets_length)
  return dict(arch=config_lib.architecture(config), n=float(n), d=float(d),
              loss=float(summary["eval_loss"]),
              mini=report.downstream_scores(workdir).get("mini"))


def write_scaling_report(root: str, names: Sequence[str], *, reps: int = 200) -> str:
  """Fits every architecture's points under `root` and writes scaling.md / scaling.png."""
  rows = {name: point_figures(os.path.join(root, name)) for name in names}
  lines = ["# Scaling study", "", "| point | arch | N (non-embedding) | D (tokens) | eval loss "
           "| mini |", "|---|---|---:|---:|---:|---:|"]
  for name, r in rows.items():
    if r is None:
      lines.append(f"| {name} | — | — | — | not finished | — |")
    else:
      mini = "—" if r["mini"] is None else f"{r['mini']:.1f}"
      lines.append(f"| {name} | {r['arch']} | {r['n']:.3g} | {r['d']:.3g} | {r['loss']:.4f} "
                   f"| {mini} |")
  fits = {}
  for arch in sorted({r["arch"] for r in rows.values() if r}):
    pts = [r for r in rows.values() if r and r["arch"] == arch]
    lines += ["", f"## {arch}: {len(pts)} points", ""]
    if len(pts) < 5:
      lines.append("Fewer than 5 finished points: no fit yet.")
      continue
    n, d, loss = (np.array([p[k] for p in pts]) for k in ("n", "d", "loss"))
    fit = fit_loss(n, d, loss)
    fits[arch] = (fit, pts)
    ci = bootstrap(n, d, loss, reps=reps)
    rmse = float(np.sqrt(np.mean((fit.loss(n, d) - loss) ** 2)))
    lines += ["| parameter | fit | 95 % bootstrap interval |", "|---|---:|---|"]
    for p in PARAMS:
      lo, hi = ci[p]
      lines.append(f"| {p} | {getattr(fit, p):.4g} | [{lo:.4g}, {hi:.4g}] |")
    lines += ["", f"RMSE of the fit: {rmse:.4f} nats.", "",
              "| compute C (FLOPs) | N_opt | D_opt | D_opt / N_opt |", "|---:|---:|---:|---:|"]
    for c in np.geomspace(6 * n.min() * d.min(), 6 * n.max() * d.max(), 4):
      n_opt, d_opt = fit.compute_optimal(c)
      lines.append(f"| {c:.3g} | {n_opt:.3g} | {d_opt:.3g} | {d_opt / n_opt:.3g} |")
  lines += ["", "![loss against tokens, per model size, with the fit](scaling.png)", ""]
  text = "\n".join(lines)
  with open(os.path.join(root, "scaling.md"), "w") as f:
    f.write(text)
  _plot(os.path.join(root, "scaling.png"), fits)
  return text


def _plot(path: str, fits: dict) -> None:
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=(7, 4.5), dpi=100)
  FigureCanvasAgg(fig)
  ax = fig.subplots()
  for arch, (fit, pts) in fits.items():
    for n in sorted({p["n"] for p in pts}):
      mine = sorted((p["d"], p["loss"]) for p in pts if p["n"] == n)
      d, loss = zip(*mine)
      line, = ax.plot(d, loss, "o", label=f"{arch}, N={n:.2g}")
      grid = np.geomspace(min(d) / 1.5, max(d) * 1.5, 50)
      ax.plot(grid, fit.loss(n, grid), "-", color=line.get_color(), alpha=0.6)
  if not fits:
    ax.text(0.5, 0.5, "no fit yet (fewer than 5 finished points)", ha="center",
            transform=ax.transAxes)
  else:
    ax.legend(fontsize=7)
  ax.set_xscale("log")
  ax.set_xlabel("D, training tokens")
  ax.set_ylabel("held-out loss")
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path)


def main(argv: Sequence[str] | None = None) -> int:
  from launch import points as points_lib  # pylint: disable=g-import-not-at-top
  p = argparse.ArgumentParser(prog="python -m launch.scaling", description=__doc__.split(
      "\n\n")[0])
  p.add_argument("experiment", help="a scaling study, e.g. experiments/scaling.py")
  p.add_argument("--root", required=True, help="the study's directory")
  p.add_argument("--bootstrap", type=int, default=200, help="bootstrap resamples")
  args = p.parse_args(argv)
  try:
    points = points_lib.collect(args.experiment)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if not os.path.isdir(args.root):
    print(f"error: --root {args.root} does not exist", file=sys.stderr)
    return 2
  write_scaling_report(args.root, [pt.name for pt in points], reps=args.bootstrap)
  print(f"wrote {os.path.join(args.root, 'scaling.md')} and scaling.png")
  return 0


if __name__ == "__main__":
  sys.exit(main())
