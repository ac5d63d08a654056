"""Mixtures of objectives (UL2): what a mixture is, its presets and its members.

What lives here: `Mixture` (a weighted mixture of objectives with optional mode tokens, callable
like any objective), the 7-denoiser UL2 preset (`ul2_denoisers`) and the parsing of
`denoisers=` / `preset=` / `mode_tokens=` into members (`resolve_mixture`,
`members_for_lengths`). What does not: the members themselves and the "mixture" record of the
objective registry (`objectives.py`: the mixture's per-example function, its binding and its
length rules, which ask each member's own record), and how the pipeline gives each member its
own stream (`pipeline.py`). This module imports no objective: the names it may mix come in as
an argument (`known`), so `objectives.py` imports it and not the other way round.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Collection, Mapping, Sequence

import numpy as np

from lm.data import noise
from lm.data.records import Example, ObjectiveFn

# A parsed member: (objective name, params, weight, mode tokens int32[M], mode tokens counted
# in its raw length: M with reserved ids, 0 with text mode tokens).
Member = tuple[str, dict, float, np.ndarray, int]


# The mode-token strings of UL2's released code (`_R_PROMPT`, `_X_PROMPT`, `_S_PROMPT` and its
# `prepend_prompt`, which tokenizes the string with the task vocabulary and prepends the ids to
# the inputs).
UL2_MODE_STRINGS = {"R": "[NLU]", "X": "[NLG]", "S": "[S2S]"}
# mode_tokens= of a preset mixture: reserved extra ids (default) or the strings tokenized.
MODE_TOKEN_STYLES = ("ids", "text")


def ul2_denoisers(*, mode_tokens: Mapping[str, Any] | None = None, s_weight: float = 0.2,
                  s_noise_density: float = 0.5) -> list[dict]:
  """The 7-denoiser UL2 mixture (Tay et al. 2022, "Unifying Language Learning Paradigms",
  arXiv 2205.05131).

  Denoisers (the paper's "Mixture of Denoisers" section, as quoted in public copies):
  R = (mu=3, r=0.15) and (mu=8, r=0.15); X = (3, 0.5), (8, 0.5), (64, 0.15), (64, 0.5);
  S = prefix LM, given in the text as (mu=L/4, r=0.25, one span). Each R/X denoiser is T5 span
  corruption (random_spans_noise_mask with mean span length mu, density r). S: the paper's
  appendix code (`ul2_objective`) calls T5's `prefix_lm`, random_prefix_noise_mask at density
  0.5 (targets a uniform share of the segment, half of it on average); that is the default
  here. `s_noise_density=0.25` is the text's (mu = L/4: targets the last quarter on average).

  Mixing rates: the S-denoiser gets `s_weight` (default 0.2) and the six R/X denoisers share
  the rest equally (0.8 / 6 each). Sources, and what was checked: the appendix code takes the
  rates as an argument and samples the tasks uniformly when none are given. The 20 % S share is
  the value secondary sources attribute to the paper's S-denoiser ablation ("about 20 %
  S-denoising"); it was NOT checked against the paper's text for this module, and the equal
  split of the other 80 % is this module's reading, not a number from the paper. Secondary
  sources (collators, blog posts) use other splits; set `s_weight` or pass `denoisers=`.

  Args:
    mode_tokens: optional {"R": ids, "X": ids, "S": ids} (an int or a list of ints each), the
      [NLU] / [NLG] / [S2S] mode tokens prepended to each denoiser's inputs. None: none.
    s_weight: share of the S-denoiser, in (0, 1).
    s_noise_density: density of the S-denoiser's prefix mask (0.5 = T5 prefix_lm).
  Returns:
    list of member dicts for objectives.make_objective("mixture", denoisers=...).
  """
  s_weight = noise.check_density(s_weight, low_open=True, high_open=True, what="s_weight")
  mode_tokens = dict(mode_tokens or {})
  unknown = set(mode_tokens) - {"R", "X", "S"}
  if unknown:
    raise ValueError(f"mode_tokens keys must be among R, X, S; got {sorted(unknown)}")
  rx = [("R", 3.0, 0.15), ("R", 8.0, 0.15), ("X", 3.0, 0.5), ("X", 8.0, 0.5),
        ("X", 64.0, 0.15), ("X", 64.0, 0.5)]
  members = [dict(objective="span_corruption",
                  params=dict(mean_noise_span_length=mu, noise_density=r),
                  weight=(1.0 - s_weight) / len(rx), mode_tokens=mode_tokens.get(kind))
             for kind, mu, r in rx]
  members.append(dict(objective="prefix_lm", params=dict(noise_density=s_noise_density),
                      weight=s_weight, mode_tokens=mode_tokens.get("S")))
  return members


MIXTURE_PRESETS = {"ul2": ul2_denoisers}


class Mixture:
  """A weighted mixture of objectives (UL2-style), callable like any objective.

  The data pipeline gives every member its own stream (UL2's `ul2_objective`: the
  concatenated token stream is sharded over the denoisers and each shard is split to its own
  member's raw length), applies `member(i)` to stream i and draws the member of each example
  with probabilities `probs`. Called directly on one sequence, the mixture draws a member,
  cuts the sequence to that member's raw length and applies it.

  Mode tokens are prepended to a member's inputs. With reserved ids they are counted in the
  member's raw length (its inputs still fit inputs_length); with text mode tokens they are
  not, as in UL2's code, and the converter trims the inputs' end instead.

  Attributes:
    members: list of (objective callable, weight, mode_tokens int32[M], raw_length).
    probs: float64[num_members], normalised weights.
  """

  def __init__(self, members: list[tuple[ObjectiveFn, float, np.ndarray, int]]):
    self.members = members
    w = np.array([m[1] for m in members], np.float64)
    self.probs = w / w.sum()

  def choose(self, rng: np.random.Generator) -> int:
    """Index of the member to apply to the next example."""
    return int(rng.choice(len(self.members), p=self.probs))

  def member(self, i: int) -> ObjectiveFn:
    """Member i as an objective: tokens int32[<= raw_length_i] -> example with mode tokens."""
    fn, _, mode, raw = self.members[i]

    def apply(tokens: np.ndarray, rng: np.random.Generator) -> Example:
      ex = fn(noise.check_tokens(tokens)[:raw], rng)
      if mode.size:
        ex["inputs"] = np.concatenate([mode, ex["inputs"]])
      return ex
    return apply

  def __call__(self, tokens: np.ndarray, rng: np.random.Generator) -> Example:
    return self.member(self.choose(rng))(tokens, rng)


def _parse_denoisers(denoisers: Sequence[Mapping[str, Any]], known: Collection[str],
                     reserve: bool = True) -> list[Member]:
  """-> [(name, params, weight, mode int32[M], mode tokens counted in the length)]; the names
  must be among `known` (the objective registry's, "mixture" excluded: mixtures do not nest)."""
  if not denoisers:
    raise ValueError("mixture needs a non-empty list of denoisers (or preset='ul2')")
  out = []
  for i, d in enumerate(denoisers):
    d = dict(d)
    unknown = set(d) - {"objective", "params", "weight", "mode_tokens"}
    if unknown or "objective" not in d:
      raise ValueError(f"denoiser {i}: keys must be objective, params, weight, mode_tokens "
                       f"(objective required); got {sorted(d)}")
    name = d["objective"]
    if name == "mixture" or name not in known:
      raise ValueError(f"denoiser {i}: unknown objective {name!r}; expected one of "
                       f"{sorted(set(known) - {'mixture'})}")
    weight = float(d.get("weight", 1.0))
    if not (math.isfinite(weight) and weight > 0):
      raise ValueError(f"denoiser {i}: weight must be > 0, got {d.get('weight')!r}")
    mode = d.get("mode_tokens")
    mode = np.zeros(0, np.int32) if mode is None else np.atleast_1d(np.asarray(mode, np.int32))
    if mode.ndim != 1:
      raise ValueError(f"denoiser {i}: mode_tokens must be an int or a list of ints")
    out.append((name, dict(d.get("params") or {}), weight, mode, mode.size if reserve else 0))
  return out


def _default_ul2_mode_tokens(vocab_size: int, num_extra_ids: int) -> dict:
  # The three lowest extra ids (<extra_id_{N-1}>, <extra_id_{N-2}>, <extra_id_{N-3}>), kept out of
  # the span sentinels' reach by lowering the members' num_extra_ids by 3.
  base = vocab_size - num_extra_ids
  return {"R": base, "X": base + 1, "S": base + 2}


def resolve_mixture(vocab_size: int, num_extra_ids: int, denoisers, preset, mode_tokens,
                    encode: Callable[[str], Any] | None = None, *, known: Collection[str]
                    ) -> tuple[list[Member], int]:
  """-> (members, num_extra_ids left for the members' sentinels); see `objectives.mixture`.

  mode_tokens (with preset): None or "ids" = three reserved extra ids; "text" = the strings
  UL2_MODE_STRINGS tokenized by `encode` (without `encode`, as for length arithmetic, no ids:
  text mode tokens are not counted in the lengths anyway); a dict = explicit ids.
  """
  if (denoisers is None) == (preset is None):
    raise ValueError("mixture needs exactly one of denoisers=[...] or preset=<name>; presets: "
                     f"{sorted(MIXTURE_PRESETS)}")
  reserve = True
  if preset is not None:
    if preset not in MIXTURE_PRESETS:
      raise ValueError(f"unknown mixture preset {preset!r}; expected one of "
                       f"{sorted(MIXTURE_PRESETS)}")
    if mode_tokens is None or mode_tokens == "ids":
      mode_tokens = _default_ul2_mode_tokens(vocab_size, num_extra_ids)
      num_extra_ids = num_extra_ids - 3
    elif mode_tokens == "text":
      reserve = False
      mode_tokens = ({k: [int(t) for t in encode(v)] for k, v in UL2_MODE_STRINGS.items()}
                     if encode is not None else None)
    elif isinstance(mode_tokens, str) or not isinstance(mode_tokens, Mapping):
      raise ValueError(f"unknown mode_tokens {mode_tokens!r}; expected one of "
                       f"{MODE_TOKEN_STYLES} or a "
                       "{'R': ids, 'X': ids, 'S': ids} dict")
    denoisers = MIXTURE_PRESETS[preset](mode_tokens=mode_tokens)
  elif mode_tokens is not None:
    raise ValueError("mode_tokens= goes with preset=; with denoisers= give each member's "
                     "mode_tokens")
  return _parse_denoisers(denoisers, known, reserve), num_extra_ids


def members_for_lengths(resolved: Mapping[str, Any], known: Collection[str],
                        num_extra_ids: int = noise.DEFAULT_NUM_EXTRA_IDS
                        ) -> tuple[list[Member], int]:
  """`resolve_mixture` for the length rules (objectives.py): only the member names, params,
  weights and mode-token counts matter, so the vocabulary size is a placeholder large enough
  to pass the checks and text mode tokens are not tokenized."""
  return resolve_mixture(10**6, num_extra_ids, resolved["denoisers"], resolved["preset"],
                         resolved["mode_tokens"], known=known)
