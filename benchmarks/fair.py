"""Fair side-by-side timing: each system in its own process, same CPUs, alternating rounds.

Why: with lm (JAX) and the peer (PyTorch) in ONE process, their thread pools compete; one
such run timed the PyTorch T5 step at 12.3 s where it takes 3.8 s alone. So, by construction:

  * own process: the peer runs in a worker process (``Worker``: ``python <script> --worker``,
    pickled requests on stdin, pickled replies on stdout); the benchmark's own process is
    the lm side and never imports torch. While one side runs, the other waits on a pipe.
  * same CPUs and threads: ``pin_cpus(n)`` restricts the benchmark to n CPUs BEFORE JAX
    starts its thread pools (XLA sizes them from the affinity); workers inherit the
    affinity and the torch worker sets ``torch.set_num_threads(n)`` for the same n.
  * same allocator: both sides apply the same host-memory policy
    (``lm.hostmem.retain_for_cpu()`` or glibc's default), passed to the worker.
  * alternating rounds (``alternate``): R rounds, each timing S steps of every side, the
    order reversed every round (A B, B A, ...), so slow drifts of the machine's load hit
    both sides alike; a short pause between sides lets spinning thread pools go idle.
  * report (``compare``): per side the median of all step times and its spread (min, max,
    interquartile range), the round medians; the speed ratio peer / lm (> 1: lm faster),
    with the ratio of every round. The verdict is "parity" when 1.0 lies within the
    run-to-run spread of the ratio (between the smallest and largest per-round ratio; with
    one round, when the two sides' step-time ranges overlap), else "lm faster" / "peer
    faster".
"""
from __future__ import annotations

import os
import pickle
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def pin_cpus(threads: int | None) -> list[int]:
  """Restricts this process (and its future children) to its first ``threads`` CPUs.

  Call before JAX's first computation. None or 0: keep the current affinity.
  Returns the CPUs now allowed.
  """
  if not hasattr(os, "sched_getaffinity"):
    return list(range(os.cpu_count() or 1))
  cpus = sorted(os.sched_getaffinity(0))
  if threads:
    if threads > len(cpus):
      raise ValueError(f"--threads={threads} but this process may use only {len(cpus)} CPUs "
                       f"({cpus}); lower --threads")
    cpus = cpus[:threads]
    os.sched_setaffinity(0, cpus)
  return cpus


def time_calls(fn: Callable[[], Any], steps: int) -> list[float]:
  """Wall-clock seconds of ``steps`` calls of ``fn`` (which must block until done)."""
  times = []
  for _ in range(steps):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return times


class WorkerError(RuntimeError):
  pass


class Worker:
  """One benchmark side in its own process, driven step batch by step batch.

  ``Worker(script, setup)`` starts ``python script --worker``, which calls ``serve`` with
  a factory; the factory receives ``setup`` (a picklable dict), builds the side (compile,
  warm-up: untimed) and returns a blocking step callable. ``time(n)`` times n steps there.
  """

  def __init__(self, script: str, setup: Mapping[str, Any], *, env: Mapping[str, str] | None = None,
               timeout: float = 3600.0):
    self._proc = subprocess.Popen([sys.executable, script, "--worker"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, env=dict(env or os.environ))
    self._timeout = timeout
    self.info = self._request(dict(setup))

  def _request(self, msg: Any) -> Any:
    try:
      pickle.dump(msg, self._proc.stdin)
      self._proc.stdin.flush()
      reply = pickle.load(self._proc.stdout)
    except (EOFError, BrokenPipeError, pickle.UnpicklingError) as e:
      code = self._proc.wait(timeout=30)
      raise WorkerError(f"benchmark worker exited (code {code}); see its messages above") from e
    if isinstance(reply, dict) and "error" in reply:
      raise WorkerError(f"benchmark worker failed: {reply['error']}")
    return reply

  def time(self, steps: int) -> list[float]:
    """Step times (seconds) of ``steps`` timed steps in the worker."""
    return list(self._request({"steps": int(steps)}))

  def close(self) -> None:
    if self._proc.poll() is None:
      try:
        pickle.dump({"quit": True}, self._proc.stdin)
        self._proc.stdin.close()
      except (BrokenPipeError, OSError):
        pass
      try:
        self._proc.wait(timeout=60)
      except subprocess.TimeoutExpired:
        self._proc.kill()
        self._proc.wait()

  def __enter__(self) -> "Worker":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def serve(factory: Callable[..., tuple[Callable[[], Any], Any]]) -> int:
  """Worker main loop: setup dict -> factory(**setup) = (step, info); then {"steps": n}.

  stdout is the reply channel; anything the libraries print goes to stderr instead.
  """
  requests = sys.stdin.buffer
  replies = os.fdopen(os.dup(1), "wb")
  os.dup2(2, 1)
  try:
    setup = pickle.load(requests)
    step, info = factory(**setup)
  except Exception as e:  # pylint: disable=broad-except  # reported to the parent
    pickle.dump({"error": f"{type(e).__name__}: {e}"}, replies)
    replies.flush()
    return 1
  pickle.dump(info, replies)
  replies.flush()
  while True:
    try:
      msg = pickle.load(requests)
    except EOFError:
      return 0
    if msg.get("quit"):
      return 0
    pickle.dump(time_calls(step, msg["steps"]), replies)
    replies.flush()


def alternate(sides: Mapping[str, Callable[[int], list[float]]], rounds: int, steps: int,
              pause: float = 0.2) -> dict[str, list[list[float]]]:
  """Times every side ``steps`` steps per round for ``rounds`` rounds, order reversed each round.

  Args:
    sides: name -> fn(n) returning n step times (e.g. ``Worker.time``, or a local timer).
  Returns:
    name -> per-round lists of step times.
  """
  if rounds < 1 or steps < 1:
    raise ValueError(f"rounds and steps must be >= 1, got {rounds}, {steps}")
  names = list(sides)
  out: dict[str, list[list[float]]] = {n: [] for n in names}
  for r in range(rounds):
    for name in (names if r % 2 == 0 else names[::-1]):
      out[name].append(list(sides[name](steps)))
      time.sleep(pause)
  return out


def _spread(times: Sequence[float]) -> dict[str, float]:
  q = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else [times[0]] * 3
  return {"median": statistics.median(times), "min": min(times), "max": max(times),
          "q1": q[0], "q3": q[2]}


def compare(lm_rounds: Sequence[Sequence[float]], peer_rounds: Sequence[Sequence[float]]
            ) -> dict[str, Any]:
  """Summary of an alternating comparison (module docstring): figures and verdict.

  Args:
    lm_rounds, peer_rounds: per-round step times in seconds, same number of rounds.
  Returns:
    {"lm": spread, "peer": spread, "lm_round_medians", "peer_round_medians",
     "ratio": median(peer) / median(lm), "round_ratios", "ratio_min", "ratio_max",
     "verdict": "parity" | "lm faster" | "peer faster"}.
  """
  if len(lm_rounds) != len(peer_rounds) or not lm_rounds:
    raise ValueError(f"need the same number (>= 1) of rounds, got {len(lm_rounds)} and "
                     f"{len(peer_rounds)}")
  lm_all = [t for r in lm_rounds for t in r]
  peer_all = [t for r in peer_rounds for t in r]
  lm, peer = _spread(lm_all), _spread(peer_all)
  lm_med = [statistics.median(r) for r in lm_rounds]
  peer_med = [statistics.median(r) for r in peer_rounds]
  round_ratios = [p / l for p, l in zip(peer_med, lm_med)]
  ratio = peer["median"] / lm["median"]
  if len(round_ratios) > 1:
    lo, hi = min(round_ratios), max(round_ratios)
  else:  # one round: the ratios the two step-time ranges allow
    lo, hi = peer["min"] / lm["max"], peer["max"] / lm["min"]
  verdict = "parity" if lo <= 1.0 <= hi else ("lm faster" if ratio > 1.0 else "peer faster")
  return {"lm": lm, "peer": peer, "lm_round_medians": lm_med, "peer_round_medians": peer_med,
          "ratio": ratio, "round_ratios": round_ratios, "ratio_min": lo, "ratio_max": hi,
          "verdict": verdict}


def describe(c: Mapping[str, Any], peer: str = "HF") -> str:
  """One line: medians with spread, the ratio with its run-to-run range, the verdict."""
  rounds = len(c["round_ratios"])
  return (f"lm {c['lm']['median'] * 1e3:.1f} ms [{c['lm']['min'] * 1e3:.1f}, "
          f"{c['lm']['max'] * 1e3:.1f}]  {peer} {c['peer']['median'] * 1e3:.1f} ms "
          f"[{c['peer']['min'] * 1e3:.1f}, {c['peer']['max'] * 1e3:.1f}]  {peer}/lm time "
          f"{c['ratio']:.2f}x (range {c['ratio_min']:.2f}-{c['ratio_max']:.2f} over "
          f"{rounds} round{'s' if rounds > 1 else ''}) -> {c['verdict']}")
