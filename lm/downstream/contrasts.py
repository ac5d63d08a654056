r"""The paper's contrasts on the neutral yardstick (issue #31): paired bootstrap, arms, verdicts.

  rows = contrast_table({"prefix_lm": [load_nlu_results("runs/t5_objectives/prefix_lm")], ...})
  [f"{r.contrast.key} {r.instrument}: {verdict(r.result, r.contrast.paper_sign)}" for r in rows]

What lives here: `paired_bootstrap` (an interval for the difference of two arms scored on the
same items), the paper's four contrasts as data (`CONTRASTS`), `verdict`, reading a run's
`eval/nlu_step_<N>.json` and the table of every contrast per instrument and pooled. What does
not: building the items (lm/downstream/nlu_items.py) and scoring a model on them (the
`--suite=nlu` path of lm/evaluate.py), and the controls with intervals (margins over random
initialisation, growth with steps: lm/downstream/nlu_controls.py). Pure NumPy. The
narrative: docs/yardstick.md.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Mapping, Sequence

import numpy as np

# ----------------------------------------------------------------------------------------
# The paired bootstrap.


@dataclasses.dataclass(frozen=True)
class BootstrapResult:
  """A difference between two arms on the same items and its percentile interval.

  Attributes:
    difference: the statistic on the data as observed (arm a minus arm b).
    low, high: the percentile interval's ends at `confidence`.
    confidence: e.g. 0.95.
    num_items: items per instrument, summed over the instruments pooled.
    seeds_a, seeds_b: the fewest seeds of any point of arm a / b.
  """
  difference: float
  low: float
  high: float
  confidence: float
  num_items: int
  seeds_a: int
  seeds_b: int

  @property
  def excludes_zero(self) -> bool:
    return self.low > 0 or self.high < 0


# Resamples per chunk times items: bounds the [chunk, N] arrays the bootstrap holds at once.
_CHUNK_CELLS = 1 << 21


def _as_arm(x: Any, name: str) -> list[np.ndarray]:
  """One arm of one stratum: a float[S, N] array, or a list of them (one per point)."""
  points = list(x) if isinstance(x, (list, tuple)) else [x]
  out = []
  for p in points:
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] < 1 or p.shape[1] < 1:
      raise ValueError(f"{name}: expected float[S, N] with S >= 1 seeds and N >= 1 items, "
                       f"got shape {p.shape}.")
    if not np.all(np.isfinite(p)):
      raise ValueError(f"{name}: per-item scores must be finite.")
    out.append(p)
  if not out:
    raise ValueError(f"{name}: an arm needs at least one point.")
  return out


def _check_strata(strata) -> tuple[list[tuple[list[np.ndarray], list[np.ndarray]]], list[int],
                                   list[int]]:
  """Validated strata and each arm's seeds per point (the same in every stratum)."""
  if not strata:
    raise ValueError("no items to bootstrap (no instrument in common).")
  checked = []
  for k, (a, b) in enumerate(strata):
    a, b = _as_arm(a, f"stratum {k} arm a"), _as_arm(b, f"stratum {k} arm b")
    n = {p.shape[1] for p in a + b}
    if len(n) != 1:
      raise ValueError(f"stratum {k}: the arms score different numbers of items {sorted(n)}; "
                       "a paired bootstrap needs the same items in both.")
    checked.append((a, b))
  seeds = [[p.shape[0] for p in arm] for arm in checked[0]]
  for k, (a, b) in enumerate(checked):
    if [[p.shape[0] for p in arm] for arm in (a, b)] != seeds:
      raise ValueError(f"stratum {k}: seeds per point differ from stratum 0's {seeds}; every "
                       "instrument must come from the same runs.")
  return checked, seeds[0], seeds[1]


def _observed(strata) -> np.ndarray:
  """float64[K]: per stratum, the mean over items of (arm a's point-and-seed mean - b's)."""
  return np.array([np.mean([p.mean() for p in a]) - np.mean([p.mean() for p in b])
                   for a, b in strata])


def _resampled_differences(strata, rng: np.random.Generator, num_resamples: int) -> np.ndarray:
  """float64[K, R]: the statistic of `_observed` on R bootstrap resamples, per stratum.

  Per resample: each point's seeds are drawn with replacement (when it has more than one;
  the same seed draw in every stratum, since a seed is one trained model), and each
  stratum's items with replacement, the same items for both arms (paired). Counts stand in
  for the draws: an item drawn c times weighs c / N.
  """
  seeds_a, seeds_b = ([p.shape[0] for p in arm] for arm in strata[0])
  biggest = max(a[0].shape[1] for a, _ in strata)
  chunk = max(1, min(num_resamples, _CHUNK_CELLS // biggest))
  out = np.empty((len(strata), num_resamples), dtype=np.float64)

  def shares(n: int, size: int) -> np.ndarray:
    # float[size, n]: each of n things' share of a draw of n with replacement (counts / n).
    draws = rng.integers(0, n, (size, n)) + n * np.arange(size)[:, None]
    return np.bincount(draws.ravel(), minlength=size * n).reshape(size, n) / n

  def seed_weights(counts: list[int], size: int) -> list[np.ndarray]:
    # float[size, S] per point (1 with one seed: nothing to draw).
    return [np.ones((size, 1)) if s == 1 else shares(s, size) for s in counts]

  for start in range(0, num_resamples, chunk):
    size = min(chunk, num_resamples - start)
    u_a, u_b = seed_weights(seeds_a, size), seed_weights(seeds_b, size)
    for k, (a, b) in enumerate(strata):
      w = shares(a[0].shape[1], size)                                        # [size, N]
      per_item = (sum(u @ p for u, p in zip(u_a, a)) / len(a)
                  - sum(u @ p for u, p in zip(u_b, b)) / len(b))            # [size, N]
      out[k, start:start + size] = np.einsum("rn,rn->r", per_item, w)
  return out


def each_and_pooled(strata: Sequence[tuple[Any, Any]], *, num_resamples: int = 10_000,
                    confidence: float = 0.95, seed: int = 0
                    ) -> tuple[list[BootstrapResult], BootstrapResult]:
  """`paired_bootstrap` of each stratum (instrument), and pooled over them, from one set of
  resamples: (one result per stratum, the pooled result, each stratum weighted equally).

  Args and the pooled result: as `stratified_bootstrap`. The per-stratum results are each
  a paired bootstrap of its stratum alone (their resamples share the seed draws).
  """
  if not 0 < confidence < 1:
    raise ValueError(f"confidence must be in (0, 1), got {confidence}.")
  if num_resamples < 1:
    raise ValueError(f"num_resamples must be >= 1, got {num_resamples}.")
  strata, seeds_a, seeds_b = _check_strata(strata)
  draws = _resampled_differences(strata, np.random.default_rng(seed), num_resamples)
  observed, tail = _observed(strata), (1 - confidence) / 2

  def result(value: float, values: np.ndarray, num_items: int) -> BootstrapResult:
    low, high = np.quantile(values, [tail, 1 - tail])
    return BootstrapResult(difference=float(value), low=float(low), high=float(high),
                           confidence=confidence, num_items=num_items,
                           seeds_a=min(seeds_a), seeds_b=min(seeds_b))

  sizes = [a[0].shape[1] for a, _ in strata]
  return ([result(observed[k], draws[k], sizes[k]) for k in range(len(strata))],
          result(observed.mean(), draws.mean(axis=0), sum(sizes)))


def stratified_bootstrap(strata: Sequence[tuple[Any, Any]], *, num_resamples: int = 10_000,
                         confidence: float = 0.95, seed: int = 0) -> BootstrapResult:
  """`paired_bootstrap` pooled over strata (instruments), each weighted equally.

  Args:
    strata: one (a, b) per instrument; a and b are float[S, N_k] (one point) or lists of
      them (an arm of several points: an item's score is the mean over the points). Every
      stratum comes from the same runs: the same points and seeds per point.
    num_resamples, confidence, seed: as `paired_bootstrap`.

  Returns:
    The mean over strata of each stratum's difference, and its percentile interval, items
    resampled within each stratum and seeds once across them.
  """
  return each_and_pooled(strata, num_resamples=num_resamples, confidence=confidence,
                         seed=seed)[1]


def paired_bootstrap(a: Any, b: Any, *, num_resamples: int = 10_000, confidence: float = 0.95,
                     seed: int = 0) -> BootstrapResult:
  """The difference of two arms scored on the same items, with a paired-bootstrap interval.

  Statistic: the mean over items of (a's mean over seeds - b's mean over seeds). Each
  resample draws N items with replacement, the same ones for both arms, and, for an arm
  with several seeds, its seeds with replacement too (independently per arm: the arms'
  runs are not paired); the interval is the resamples' percentile interval. Deterministic
  for a seed.

  Args:
    a: float[S_a, N], one row per seed of arm a (S_a >= 1), one column per item; or a list
      of such arrays, one per point of a several-point arm (an item scores the mean over
      the points; each point's seeds are resampled on their own).
    b: float[S_b, N] (or a list), the same N items.
    num_resamples: bootstrap resamples.
    confidence: the interval's coverage, in (0, 1).
    seed: the numpy Generator's seed.

  Returns:
    BootstrapResult(difference, low, high, confidence, num_items, seeds_a, seeds_b).
  """
  return stratified_bootstrap([(a, b)], num_resamples=num_resamples, confidence=confidence,
                              seed=seed)


# ----------------------------------------------------------------------------------------
# Verdicts.

AGREES = "agrees with the paper"
REVERSED = "reversed"
UNRESOLVED = "not resolvable at this scale"

# The published evidence on where denoising overtakes causal LM; every report cites it.
SCALE_EVIDENCE = (
    "Published small-scale studies put the point where masked or denoising objectives "
    "overtake causal language modelling on fine-tuned understanding tasks at about 1e8 "
    "parameters and 3e8 training tokens for masked-LM encoders, and about 2e8 parameters "
    "and 3e9 tokens for T5-style span corruption (BabyLM 2023, strict-small vs strict: "
    "T5-base last on GLUE at 10M words, first at 100M); early in training causal LM learns "
    "faster (AntLM, BabyLM 2024; Gisserot-Boukhlef et al. 2025). lm's tiny points (about "
    "1e12 training FLOPs) are five to six orders of magnitude below those crossovers, so "
    "the paper's order is not expected there.")


def verdict(result: BootstrapResult, paper_sign: int) -> str:
  """AGREES when the interval excludes 0 on the paper's side, REVERSED when it excludes 0
  on the other, UNRESOLVED otherwise (0 inside the interval, or on its edge)."""
  if paper_sign not in (1, -1):
    raise ValueError(f"paper_sign must be 1 or -1, got {paper_sign!r}.")
  if not result.excludes_zero:
    return UNRESOLVED
  return AGREES if (result.low > 0) == (paper_sign > 0) else REVERSED


MIN_SEEDS = 3


def seed_count_note(result: BootstrapResult) -> str:
  """"" with at least MIN_SEEDS seeds per point in both arms, else what the interval misses."""
  seeds = min(result.seeds_a, result.seeds_b)
  if seeds >= MIN_SEEDS:
    return ""
  if seeds == 1:
    return ("one seed per point: the interval covers the sampling of items only, not seed "
            "noise (run at least 3 seeds per point).")
  return (f"{seeds} seeds per point: resampling so few seeds understates seed noise (run at "
          "least 3 seeds per point).")


# ----------------------------------------------------------------------------------------
# The paper's contrasts.

# The paper's understanding columns, on which each contrast's sign is read (our instruments
# are understanding tasks; translation is where the paper's arms differ least).
PAPER_COLUMNS = ("GLUE", "SQuAD", "SGLUE")


@dataclasses.dataclass(frozen=True)
class Member:
  """One sweep point of an arm.

  Attributes:
    point: its name in the study (the workdir `<root>/<point>`).
    objective, architecture: what its nlu results must record (configs/t5.py's objective
      and model.architecture).
    paper: the paper's row on PAPER_COLUMNS.
  """
  point: str
  objective: str
  architecture: str
  paper: tuple[float, float, float]


@dataclasses.dataclass(frozen=True)
class Contrast:
  """One of the paper's contrasts: arm a against arm b, and the side the paper found.

  Attributes:
    key: "C1" ... "C4".
    title: e.g. "denoising vs prefix LM".
    study: the experiment file that holds both arms' points.
    table: the paper's table(s).
    a, b: the arms' points; an arm of several points scores an item as their mean.
    paper_sign: +1 when the paper has arm a ahead on every PAPER_COLUMNS column.
  """
  key: str
  title: str
  study: str
  table: str
  a: tuple[Member, ...]
  b: tuple[Member, ...]
  paper_sign: int

  @property
  def points(self) -> tuple[str, ...]:
    return tuple(m.point for m in self.a + self.b)

  def paper_means(self) -> dict[str, tuple[float, float]]:
    """{column: (arm a's mean paper score, arm b's)} on PAPER_COLUMNS."""
    return {c: tuple(float(np.mean([m.paper[i] for m in arm])) for arm in (self.a, self.b))
            for i, c in enumerate(PAPER_COLUMNS)}

  def paper_numbers(self) -> str:
    """e.g. "GLUE 83.25 vs 80.69 (+2.56); SQuAD ...": the arms' mean paper scores."""
    return "; ".join(f"{c} {x:.2f} vs {y:.2f} ({x - y:+.2f})"
                     for c, (x, y) in self.paper_means().items())


_ED = "encoder_decoder"
CONTRASTS = (
    Contrast(
        key="C1", title="denoising (BERT, MASS, replace spans, drop tokens) vs prefix LM",
        study="experiments/t5_objectives.py", table="Tables 4 and 5",
        a=(Member("bert", "bert", _ED, (82.96, 80.65, 69.85)),
           Member("mass", "mass", _ED, (82.32, 80.10, 69.28)),
           Member("replace_spans", "iid_replace_spans", _ED, (83.28, 80.88, 71.36)),
           Member("drop_tokens", "drop_tokens", _ED, (84.44, 80.52, 68.67))),
        b=(Member("prefix_lm", "prefix_lm", _ED, (80.69, 77.99, 65.27)),),
        paper_sign=1),
    Contrast(
        key="C2", title="prefix LM vs deshuffling",
        study="experiments/t5_objectives.py", table="Table 4",
        a=(Member("prefix_lm", "prefix_lm", _ED, (80.69, 77.99, 65.27)),),
        b=(Member("deshuffle", "deshuffle", _ED, (73.17, 67.61, 58.47)),),
        paper_sign=1),
    Contrast(
        key="C3", title="encoder-decoder denoising vs decoder-only LM",
        study="experiments/t5_architectures.py", table="Table 2",
        a=(Member("encdec_denoising", "iid_replace_spans", _ED, (83.28, 80.88, 71.36)),),
        b=(Member("lm_lm", "full_lm", "causal", (73.78, 53.81, 56.51)),
           Member("prefixlm_lm", "prefix_lm", "prefix_lm", (79.68, 76.87, 64.86))),
        paper_sign=1),
    Contrast(
        key="C4", title="span corruption vs i.i.d. corruption",
        study="experiments/t5_span_length.py", table="Table 7",
        a=(Member("span_02", "span_corruption", _ED, (83.54, 82.09, 72.20)),
           Member("span_03", "span_corruption", _ED, (83.49, 81.84, 72.53)),
           Member("span_05", "span_corruption", _ED, (83.40, 82.05, 72.23)),
           Member("span_10", "span_corruption", _ED, (82.85, 81.84, 70.44))),
        b=(Member("iid", "iid_replace_spans", _ED, (83.28, 80.88, 71.36)),),
        paper_sign=1),
)


def contrasts_of(study: str, contrasts: Sequence[Contrast] = CONTRASTS) -> tuple[Contrast, ...]:
  """The contrasts whose points are in `study`: an experiment file or module name
  (`experiments/t5_objectives.py`, `experiments.t5_objectives`), compared by its last part."""
  def last(name: str) -> str:
    return re.split(r"[/\\.]", name.removesuffix(".py"))[-1]
  return tuple(c for c in contrasts if last(c.study) == last(study))


# ----------------------------------------------------------------------------------------
# Reading results and the table of contrasts.

# A run's nlu result files, `<workdir>/eval/nlu_step_<N>.json` (lm.evaluate --suite=nlu).
RESULT_FILE = re.compile(r"^nlu_step_(\d+)\.json$")


def result_file(step: int, blank_inputs: bool = False) -> str:
  """The name of a run's nlu result at `step` in `<workdir>/eval/`; the blank-input control
  has its own (`nlu_blank_step_<N>.json`), which no contrast reads."""
  return f"nlu_{'blank_' if blank_inputs else ''}step_{int(step)}.json"
POOLED = "pooled"


def load_nlu_results(workdir: str) -> dict[str, Any] | None:
  """The newest `<workdir>/eval/nlu_step_<N>.json` (largest N), or None when there is none.

  Raises:
    ValueError: the file is not an nlu record (`read_nlu_record`).
  """
  folder = os.path.join(workdir, "eval")
  steps = []
  if os.path.isdir(folder):
    steps = [int(m.group(1)) for m in map(RESULT_FILE.match, os.listdir(folder)) if m]
  return read_nlu_record(os.path.join(folder, result_file(max(steps)))) if steps else None


def read_nlu_record(path: str) -> dict[str, Any]:
  """One nlu result file ({"suite": "nlu", "instruments": {...}, ...}).

  Raises:
    ValueError: the file is not JSON, or not an nlu record.
  """
  try:
    with open(path) as f:
      record = json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path} is not JSON ({e}); rerun `python -m lm.evaluate "
                     "--suite=nlu` on the run.") from e
  if (not isinstance(record, dict) or record.get("suite") != "nlu"
      or not isinstance(record.get("instruments"), dict)):
    raise ValueError(f"{path} is not an nlu result (expected {{'suite': 'nlu', "
                     "'instruments': {...}}).")
  if record.get("blank_inputs"):
    raise ValueError(f"{path} is a blank-input control, not a result; contrasts read "
                     "`python -m lm.evaluate --suite=nlu` without --blank_inputs.")
  return record


def item_scores(instrument: Mapping[str, Any], where: str = "") -> np.ndarray:
  """float64[N]: an instrument's per-item scores minus its random-initialisation accuracy,
  in percentage points (their mean is the instrument's score, in points).

  `per_item` holds 1 / 0 (0.5 for a tied pair) per item; `accuracy` and `random_init` are in
  the record's own unit, a fraction or a percentage, told apart by `accuracy` = the mean of
  `per_item` (or 100 times it).

  Raises:
    ValueError: no per_item, no random_init, or an accuracy that is neither.
  """
  per_item = instrument.get("per_item")
  if not per_item:
    raise ValueError(f"{where}: no per_item scores (rerun `python -m lm.evaluate "
                     "--suite=nlu`, which records them).")
  if instrument.get("random_init") is None:
    raise ValueError(f"{where}: no random_init accuracy; the contrasts compare margins over "
                     "random initialisation.")
  x = np.asarray(per_item, dtype=np.float64)
  mean, accuracy = float(x.mean()), instrument.get("accuracy")
  random_init = float(instrument["random_init"])
  if accuracy is None:
    raise ValueError(f"{where}: no accuracy (the record's unit, fraction or percentage, is "
                     "read off it).")
  fraction, percent = abs(accuracy - mean) <= 1e-6, abs(accuracy - 100 * mean) <= 1e-4
  if not (fraction or percent):
    raise ValueError(f"{where}: accuracy {accuracy} is neither the mean of per_item "
                     f"({mean}) nor 100 times it.")
  if fraction and percent:              # every item 0: the random-init accuracy tells
    fraction = random_init <= 1
  return 100.0 * x - (100.0 * random_init if fraction else random_init)


@dataclasses.dataclass(frozen=True)
class ContrastRow:
  """One line of the contrast table: one contrast on one instrument (or POOLED)."""
  contrast: Contrast
  instrument: str
  result: BootstrapResult
  verdict: str
  note: str


def _checked_member(contrast: Contrast, member: Member, results: Sequence[Mapping[str, Any]]):
  for r in results:
    for field, want in (("objective", member.objective), ("architecture", member.architecture)):
      got = r.get(field)
      if got is not None and got != want:
        raise ValueError(f"{contrast.key}: point {member.point!r} records {field} {got!r}, "
                         f"but the contrast expects {want!r}; is it the point of "
                         f"{contrast.study}?")
  return results


def _check_digests(contrast: Contrast, results: Mapping[str, Sequence[Mapping[str, Any]]]):
  """Refuses records of a contrast scored on different items or at different steps."""
  digests, steps = {}, {}
  for point, rs in results.items():
    for r in rs:
      digests.setdefault(json.dumps(r.get("items_digest"), sort_keys=True), point)
      steps.setdefault(r.get("step"), point)
  if len(digests) > 1:
    raise ValueError(f"{contrast.key}: the points were scored on different items "
                     f"(items_digest differs between {sorted(set(digests.values()))}); rescore "
                     "them with the same item set (`python -m lm.evaluate --suite=nlu`).")
  if len(steps) > 1:
    raise ValueError(f"{contrast.key}: the points' newest nlu results are from different "
                     f"pre-training steps ({', '.join(f'{p} at {s}' for s, p in steps.items())}"
                     "); score every point at the same step (a run still training is compared "
                     "once it has finished).")


def ready(contrast: Contrast, points: Mapping[str, Sequence[Mapping[str, Any]]]) -> bool:
  """Whether every point of the contrast has at least one result."""
  return all(points.get(p) for p in contrast.points)


def contrast_table(points: Mapping[str, Sequence[Mapping[str, Any]]],
                   contrasts: Sequence[Contrast] = CONTRASTS, *, num_resamples: int = 10_000,
                   confidence: float = 0.95, seed: int = 0) -> list[ContrastRow]:
  """Every contrast whose points all have results: one row per instrument, then POOLED.

  Args:
    points: {point name: its nlu result records (load_nlu_results), one per seed}.
    contrasts: the contrasts to run (those with a point missing from `points` are left out).
    num_resamples, confidence, seed: the bootstrap's.

  Returns:
    ContrastRows: per instrument the paired bootstrap of the arms' item scores
    (`item_scores`: percentage points over random initialisation), then the pooled row,
    the mean of the per-instrument differences with items resampled within each instrument
    (`stratified_bootstrap`). Instruments are those every record of the contrast holds.

  Raises:
    ValueError: the points' items_digest or steps differ, they share no instrument, or a
      point records another objective or architecture than the contrast's.
  """
  rows = []
  for contrast in contrasts:
    if not ready(contrast, points):
      continue
    arms = [[(m, _checked_member(contrast, m, points[m.point])) for m in arm]
            for arm in (contrast.a, contrast.b)]
    _check_digests(contrast, {m.point: points[m.point] for m in contrast.a + contrast.b})
    every = [r for arm in arms for _, rs in arm for r in rs]
    names = sorted(set.intersection(*(set(r["instruments"]) for r in every)))
    if not names:
      raise ValueError(f"{contrast.key}: no instrument is in every record of its points; "
                       "score them with the same suite.")
    strata = []
    for name in names:
      strata.append(tuple(
          [np.stack([item_scores(r["instruments"][name], f"{m.point} {name}") for r in rs])
           for m, rs in arm] for arm in arms))
    each, pooled = each_and_pooled(strata, num_resamples=num_resamples,
                                   confidence=confidence, seed=seed)
    for name, result in zip(names + [POOLED] * (len(strata) > 1), each + [pooled]):
      rows.append(ContrastRow(contrast, name, result, verdict(result, contrast.paper_sign),
                              seed_count_note(result)))
  return rows

