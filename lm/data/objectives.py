"""Pre-training objectives and their registry: one record per objective, both data paths.

What lives here: the per-example objectives of the T5 study (Raffel et al. 2020), pure NumPy
maps fn(tokens int32[L], rng, *, vocab_size, num_extra_ids, **params) -> {"inputs",
"targets"} (no EOS) built from T5's preprocessors (`noise.py`), the UL2 mixture's, and the
registry `OBJECTIVES`: one `Objective` record (`records.py`) per name holding everything lm knows about it
(its per-example form, its batched form in `batched.py` or None, its parameters and their
checks, how the pipeline cuts its raw segments, its raw and targets lengths, how likely it is
to run out of sentinels), so a new objective touches one place. The entry points read the
records: `make_objective`, `batched_form`, `layout`, `raw_length`, `required_targets_length`,
`sentinel_overflow_probability`, `required_extra_ids`, `check_lengths`.

What does not: the noise masks (`noise.py`), the batched forms (`batched.py`), what a mixture is
(`mixtures.py`), the length arithmetic (`lengths.py`), EOS (`converters.py`), cutting raw
segments and packing (`pipeline.py`, `blocks.py`, `packing.py`). Example: span corruption
with noise mask [0 0 1 1 0 0 0 1 0 1] on tokens A..J, vocab_size 32100:
inputs = A B 32099 E F G 32098 I 32097, targets = 32099 C D 32098 H 32097 J.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

import numpy as np

from lm.data import batched, lengths, mixtures, noise
from lm.data.noise import DEFAULT_NUM_EXTRA_IDS
from lm.data.records import BatchedFn, Example, Layout, Objective, ObjectiveFn, Params


# ----------------------------------------------------------------------------- objectives


def _example(inputs: np.ndarray, targets: np.ndarray) -> Example:
  return {"inputs": np.asarray(inputs, np.int32), "targets": np.asarray(targets, np.int32)}


def span_corruption(tokens: np.ndarray, rng: np.random.Generator, *, vocab_size: int,
                    num_extra_ids: int = DEFAULT_NUM_EXTRA_IDS, noise_density: float = 0.15,
                    mean_noise_span_length: float = 3.0, random_roll: bool = False) -> Example:
  """T5 span corruption (final T5 objective; Table 7 rows with mean_noise_span_length 2/3/5/10).

  random_spans_noise_mask, inputs = noise_span_to_unique_sentinel, targets =
  nonnoise_span_to_unique_sentinel. On a full 568-token segment (raw_length at 512, 0.15, 3):
  inputs 511 + EOS = 512, targets 113 + EOS = 114.

  Example (mask [0 0 1 1 0 0 0 1 0 1], tokens A..J, V = 32100):
    inputs A B 32099 E F G 32098 I 32097, targets 32099 C D 32098 H 32097 J.
  Edge cases: L=0 -> ([], []); L=1 -> ([t0], [32099]); L=2 -> ([t0, 32099], [32099, t1]);
  noise_density 0 -> (tokens, [32099]).
  """
  tokens = noise.check_tokens(tokens)
  mask = noise.random_spans_noise_mask(tokens.shape[0], noise_density, mean_noise_span_length, rng,
                                 random_roll=random_roll)
  kw = dict(vocab_size=vocab_size, num_extra_ids=num_extra_ids)
  return _example(noise.noise_span_to_unique_sentinel(tokens, mask, **kw),
                  noise.nonnoise_span_to_unique_sentinel(tokens, mask, **kw))


def iid_replace_spans(tokens: np.ndarray, rng: np.random.Generator, *, vocab_size: int,
                      num_extra_ids: int = DEFAULT_NUM_EXTRA_IDS,
                      noise_density: float = 0.15) -> Example:
  """The paper's baseline, "replace corrupted spans" (Tables 5/6; gin `iid_{10,15,25,50}_u_u`).

  iid_noise_mask, then unique sentinels on both sides, exactly like span corruption.
  Alignment caveat, reproduced faithfully from T5: the targets give a sentinel to every
  NON-noise run. When the i.i.d. mask starts with noise, the targets begin with bare noise
  tokens and sentinel k of the targets precedes noise span k+1, off by one from the inputs:
    mask [1 0 0 1], tokens A B C D -> inputs 32099 B C 32098, targets A 32099 D.
  When it ends with non-noise the targets end with a sentinel.
  """
  tokens = noise.check_tokens(tokens)
  mask = noise.iid_noise_mask(tokens.shape[0], noise_density, rng)
  kw = dict(vocab_size=vocab_size, num_extra_ids=num_extra_ids)
  return _example(noise.noise_span_to_unique_sentinel(tokens, mask, **kw),
                  noise.nonnoise_span_to_unique_sentinel(tokens, mask, **kw))


def drop_tokens(tokens: np.ndarray, rng: np.random.Generator, *, vocab_size: int,
                num_extra_ids: int = DEFAULT_NUM_EXTRA_IDS, noise_density: float = 0.15) -> Example:
  """"Drop corrupted tokens" (Table 5; gin `iid_15_d_d`): inputs = kept tokens, targets = dropped.

  Example: mask [0 1 1 0 1] on A B C D E -> inputs A D, targets B C E.
  """
  del vocab_size, num_extra_ids
  tokens = noise.check_tokens(tokens)
  mask = noise.iid_noise_mask(tokens.shape[0], noise_density, rng)
  return _example(noise.drop_noise_tokens(tokens, mask), noise.drop_nonnoise_tokens(tokens, mask))


def bert(tokens: np.ndarray, rng: np.random.Generator, *, vocab_size: int,
         num_extra_ids: int = DEFAULT_NUM_EXTRA_IDS, noise_density: float = 0.15,
         random_token_prob: float = 0.1) -> Example:
  """BERT-style (Tables 4/5; gin `iid_15_r10s90_f`): 15 % i.i.d. corrupted, target = original.

  Each corrupted token -> mask token vocab_size-1 w.p. 0.9, random token in [3, V) w.p. 0.1
  (no "keep unchanged" share). inputs int32[L], targets = tokens int32[L].
  """
  del num_extra_ids
  tokens = noise.check_tokens(tokens)
  mask = noise.iid_noise_mask(tokens.shape[0], noise_density, rng)
  inputs = noise.noise_token_to_random_token_or_sentinel(tokens, mask, rng, vocab_size=vocab_size,
                                                   random_prob=random_token_prob)
  return _example(inputs, tokens)


def mass(tokens: np.ndarray, rng: np.random.Generator, *, vocab_size: int,
         num_extra_ids: int = DEFAULT_NUM_EXTRA_IDS, noise_density: float = 0.15) -> Example:
  """MASS-style (Table 5; gin `iid_15_m_f`): corrupted tokens -> mask token, target = original."""
  del num_extra_ids
  tokens = noise.check_tokens(tokens)
  mask = noise.iid_noise_mask(tokens.shape[0], noise_density, rng)
  return _example(noise.noise_token_to_sentinel(tokens, mask, vocab_size=vocab_size), tokens)


def deshuffle(tokens: np.ndarray, rng: np.random.Generator, *, vocab_size: int,
              num_extra_ids: int = DEFAULT_NUM_EXTRA_IDS, noise_density: float = 1.0) -> Example:
  """Deshuffling (Table 4; gin `all_permute`): inputs = permuted tokens, targets = original.

  T5 uses an i.i.d. mask of density 1.0 (all tokens) and permute_noise_tokens; a lower
  noise_density shuffles only an i.i.d. subset of positions.
  """
  del vocab_size, num_extra_ids
  tokens = noise.check_tokens(tokens)
  mask = noise.iid_noise_mask(tokens.shape[0], noise_density, rng)
  return _example(noise.permute_noise_tokens(tokens, mask, rng), tokens)


def prefix_lm(tokens: np.ndarray, rng: np.random.Generator, *, vocab_size: int,
              num_extra_ids: int = DEFAULT_NUM_EXTRA_IDS, noise_density: float = 0.5) -> Example:
  """Prefix LM objective (Tables 2/4; gin `prefix_lm`): split at a random point.

  noise.random_prefix_noise_mask(noise_density): at 0.5 the prefix length is uniform in [1, L-1].
  inputs = tokens[:n], targets = tokens[n:]. L=1 -> ([], [t0]); L=0 -> ([], []).
  """
  del vocab_size, num_extra_ids
  tokens = noise.check_tokens(tokens)
  mask = noise.random_prefix_noise_mask(tokens.shape[0], noise_density, rng)
  return _example(noise.drop_nonnoise_tokens(tokens, mask), noise.drop_noise_tokens(tokens, mask))


def full_lm(tokens: np.ndarray, rng: np.random.Generator, *, vocab_size: int,
            num_extra_ids: int = DEFAULT_NUM_EXTRA_IDS) -> Example:
  """Full language modelling (T5 `full_lm`, gin `lm.gin`): inputs empty, targets = the chunk.

  The chunk already carries EOS at document ends (LAYOUTS["full_lm"]: EOS per document before
  concatenation, chunks of targets_length, no EOS appended at chunk ends).
  """
  del rng, vocab_size, num_extra_ids
  tokens = noise.check_tokens(tokens)
  return _example(np.zeros(0, np.int32), tokens)


def mixture(tokens: np.ndarray, rng: np.random.Generator, *, vocab_size: int,
            num_extra_ids: int = DEFAULT_NUM_EXTRA_IDS, denoisers=None,
            preset: str | None = None,
            mode_tokens: Mapping[str, Any] | str | None = None, inputs_length: int | None = None,
            targets_length: int | None = None,
            encode: Callable[[str], Any] | None = None) -> Example:
  """UL2-style mixture of objectives; see `mixtures.Mixture` and `mixtures.ul2_denoisers`.

  Args:
    denoisers: list of {"objective": name, "params": {...}, "weight": w, "mode_tokens": ids}.
    preset: "ul2" instead of denoisers (7 denoisers, S = 20 %).
    mode_tokens: only with preset. None or "ids" (default): the three lowest extra ids
      (R: V - N, X: V - N + 1, S: V - N + 2 with N = num_extra_ids), the members' span
      sentinels then limited to N - 3, and each member's raw length computed for
      inputs_length minus its mode token. "text": the strings "[NLU]", "[NLG]", "[S2S]"
      tokenized by `encode` and prepended, as UL2's released code does (raw lengths for the
      full inputs_length; the converter trims the inputs' end). Or a {"R","X","S"} -> ids dict.
    inputs_length: required; each member cuts its input to its own raw_length.
      targets_length: needed only by full_lm members.
    encode: str -> token ids (the pipeline passes its tokenizer's), needed by mode_tokens="text".
  """
  return _bind_mixture(vocab_size, num_extra_ids, dict(
      denoisers=denoisers, preset=preset, mode_tokens=mode_tokens, inputs_length=inputs_length,
      targets_length=targets_length, encode=encode))(tokens, rng)


# ----------------------------------------------------------------------------- the records


def _check_span_length(p: Params) -> None:
  noise.check_mean_span_length(p["mean_noise_span_length"])


def _check_random_token_prob(p: Params) -> None:
  noise.check_density(p["random_token_prob"], what="random_token_prob")


def _span_lengths(p: Params, inputs_length: int) -> tuple[int, int]:
  return lengths.random_spans_helper(inputs_length, p["noise_density"],
                                     p["mean_noise_span_length"])


def _raw_inputs_length(p: Params, inputs_length: int, targets_length: int | None) -> int:
  """inputs_length - 1 (T5's split_tokens_to_inputs_length: the inputs and their EOS)."""
  del p, targets_length
  return inputs_length - 1


def _raw_full_lm(p: Params, inputs_length: int, targets_length: int | None) -> int:
  """targets_length (T5 full_lm's split_tokens at the targets length; its EOS are the document
  ends, Layout.targets_eos=False)."""
  del p, inputs_length
  if targets_length is None or int(targets_length) < 1:
    raise ValueError(f"full_lm needs targets_length >= 1, got {targets_length}")
  return int(targets_length)


def _targets_full_lm(p: Params, inputs_length: int, targets_length: int | None,
                     quantile: float) -> int:
  del p, inputs_length, quantile
  if targets_length is None:
    raise ValueError("full_lm: the targets length defines the raw length; pass targets_length")
  return int(targets_length)


def _targets_whole_segment(p: Params, inputs_length: int, targets_length: int | None,
                           quantile: float) -> int:
  """The raw segment + EOS (bert, mass, deshuffle: the targets are the tokens)."""
  del p, targets_length, quantile
  return inputs_length


def _targets_drop_tokens(p: Params, inputs_length: int, targets_length: int | None,
                         quantile: float) -> int:
  """Quantile of the Binomial(raw, noise_density) dropped-token count, + EOS."""
  raw = _raw_inputs_length(p, inputs_length, targets_length)
  return lengths.quantile(lengths.binomial_pmf(raw, p["noise_density"]), quantile) + 1


def _targets_iid_spans(p: Params, inputs_length: int, targets_length: int | None,
                       quantile: float) -> int:
  """Quantile of noise tokens + non-noise runs (one sentinel each), + EOS."""
  raw = _raw_inputs_length(p, inputs_length, targets_length)
  pmf = lengths.iid_pmf(raw, p["noise_density"], lengths.INC_UNIQUE_SENTINEL_TARGETS)
  return lengths.quantile(pmf, quantile) + 1


def _overflow_span(p: Params, inputs_length: int, targets_length: int | None,
                   num_extra_ids: int) -> float:
  """0 or 1: span corruption's span count is fixed by the segment length."""
  del targets_length
  if p["noise_density"] == 0:
    return 0.0
  _, spans = noise.random_spans_counts(_span_lengths(p, inputs_length)[0], p["noise_density"],
                                       p["mean_noise_span_length"])
  return float(spans > num_extra_ids)


def _overflow_iid_spans(p: Params, inputs_length: int, targets_length: int | None,
                        num_extra_ids: int) -> float:
  """Exact, by the DP over the Bernoulli sequence: max(noise runs, non-noise runs) sentinels."""
  raw = _raw_inputs_length(p, inputs_length, targets_length)
  runs = lengths.iid_pmf(raw, p["noise_density"], lengths.INC_RUNS)
  need = (np.arange(runs.size) + 1) // 2  # max(noise runs, non-noise runs) = ceil(runs / 2)
  return float(runs[need > num_extra_ids].sum())


def _check_span_segment(params: Params, inputs_length: int, reserved: int) -> None:
  """More spans than non-noise tokens cannot be laid out (T5's TF code fails there)."""
  r = resolve_params("span_corruption", params)
  raw = raw_length("span_corruption", inputs_length=inputs_length - reserved, **params)
  if r["noise_density"] > 0:
    num_noise, spans = noise.random_spans_counts(raw, r["noise_density"],
                                                 r["mean_noise_span_length"])
    if spans > max(raw, 2) - num_noise:
      raise ValueError(f"span_corruption {dict(params)} at inputs_length={inputs_length}: {spans} "
                       f"spans exceed the {max(raw, 2) - num_noise} non-noise tokens")


def _bind_mixture(vocab_size: int, num_extra_ids: int, p: Params) -> mixtures.Mixture:
  """The mixture's members bound (each by its own record) and cut to their own raw lengths."""
  if p["inputs_length"] is None:
    raise ValueError("mixture needs inputs_length= (and targets_length= if a member is full_lm): "
                     "each member cuts the raw segment to its own raw_length so its output fits")
  if p["mode_tokens"] == "text" and p["encode"] is None:
    raise ValueError("mixture mode_tokens='text' needs encode= (a str -> ids tokenizer function; "
                     "the data pipeline passes its tokenizer's)")
  parsed, member_extra_ids = mixtures.resolve_mixture(
      vocab_size, num_extra_ids, p["denoisers"], p["preset"], p["mode_tokens"], p["encode"],
      known=OBJECTIVES)
  members = []
  for name, params, weight, mode, reserved in parsed:
    fn = make_objective(name, vocab_size=vocab_size, num_extra_ids=member_extra_ids, **params)
    raw = raw_length(name, inputs_length=int(p["inputs_length"]) - reserved,
                     targets_length=p["targets_length"], **params)
    members.append((fn, weight, mode, raw))
  return mixtures.Mixture(members)


# The mixture's rules recurse into its members' own, each member at inputs_length minus its
# reserved mode tokens.


def _raw_mixture(p: Params, inputs_length: int, targets_length: int | None) -> int:
  """The largest member raw length (each member cuts its input to its own, see Mixture)."""
  return max(raw_length(n, inputs_length=inputs_length - reserved, targets_length=targets_length,
                        **mp)
             for n, mp, _, _, reserved in mixtures.members_for_lengths(p, OBJECTIVES)[0])


def _targets_mixture(p: Params, inputs_length: int, targets_length: int | None,
                     quantile: float) -> int:
  """The largest member targets length."""
  return max(required_targets_length(n, inputs_length=inputs_length - reserved,
                                     targets_length=targets_length, quantile=quantile, **mp)
             for n, mp, _, _, reserved in mixtures.members_for_lengths(p, OBJECTIVES)[0])


def _overflow_mixture(p: Params, inputs_length: int, targets_length: int | None,
                      num_extra_ids: int) -> float:
  """The members' overflow probabilities weighted by their mixing rates (with the ul2 preset's
  3 reserved mode ids taken out of the members' sentinels)."""
  parsed, member_extra = mixtures.members_for_lengths(p, OBJECTIVES, num_extra_ids)
  total = sum(w for _, _, w, _, _ in parsed)
  return sum(w / total * sentinel_overflow_probability(
      n, inputs_length=inputs_length - reserved, num_extra_ids=member_extra,
      targets_length=targets_length, **mp) for n, mp, w, _, reserved in parsed)


def _check_mixture_segment(params: Params, inputs_length: int, reserved: int) -> None:
  """Every member's own segment check, at inputs_length minus its mode tokens."""
  del reserved  # mixtures do not nest
  for n, mp, _, _, member_reserved in mixtures.members_for_lengths(
      resolve_params("mixture", params), OBJECTIVES)[0]:
    check = OBJECTIVES[n].check_segment
    if check is not None:
      check(mp, inputs_length, member_reserved)


_OPEN = dict(low_open=True, high_open=True)  # density in (0, 1): 0 or 1 is degenerate

# T5 reference (t5/data/preprocessors.py and t5/models/gin/objectives/*.gin) for the layouts:
#   span_corruption, iid_denoising (iid_* gins, denoise.gin: bert, mass, drop, replace):
#     select_random_chunk -> reduce_concat_tokens -> split_tokens -> denoise;
#   prefix_lm (prefix_lm.gin) and deshuffling (all_permute.gin):
#     select_random_chunk -> split_tokens_to_inputs_length, no reduce_concat_tokens;
#   full_lm (lm.gin): select_random_chunk -> append_eos -> reduce_concat_tokens ->
#     split_tokens(targets length), no EOS at chunk ends;
#   mixture: UL2's ul2_objective concatenates (reduce_concat_tokens) before it shards the
#     stream over the denoisers, each of which then splits its shard to its own raw length.
OBJECTIVES: dict[str, Objective] = {
    # raw: random_spans_helper(...)[0] (568 at 512/0.15/3), targets: [1] (114); density [0, 1]
    # as T5.
    "span_corruption": Objective(
        span_corruption, dict(noise_density=0.15, mean_noise_span_length=3.0, random_roll=False),
        raw_length=lambda p, li, lt: _span_lengths(p, li)[0],
        targets_length=lambda p, li, lt, q: _span_lengths(p, li)[1],
        density={}, check=_check_span_length, overflow=_overflow_span,
        check_segment=_check_span_segment, batched=batched.span_corruption_block,
        batched_lacks=("random_roll",)),
    "iid_replace_spans": Objective(
        iid_replace_spans, dict(noise_density=0.15), raw_length=_raw_inputs_length,
        targets_length=_targets_iid_spans, density=_OPEN, overflow=_overflow_iid_spans,
        batched=batched.iid_replace_spans_block),
    # targets 104 at 512/0.15 and quantile 0.999: T5's gin `iid_15_d_d` value.
    "drop_tokens": Objective(
        drop_tokens, dict(noise_density=0.15), raw_length=_raw_inputs_length,
        targets_length=_targets_drop_tokens, density=_OPEN, batched=batched.drop_tokens_block),
    "bert": Objective(
        bert, dict(noise_density=0.15, random_token_prob=0.1), raw_length=_raw_inputs_length,
        targets_length=_targets_whole_segment, density=_OPEN, check=_check_random_token_prob,
        batched=batched.bert_block),
    "mass": Objective(
        mass, dict(noise_density=0.15), raw_length=_raw_inputs_length,
        targets_length=_targets_whole_segment, density=_OPEN, batched=batched.mass_block),
    "deshuffle": Objective(
        deshuffle, dict(noise_density=1.0), raw_length=_raw_inputs_length,
        targets_length=_targets_whole_segment, layout=Layout(concatenate=False),
        density=dict(low_open=True)),
    # targets: at most raw - 1 tokens (at least one prefix token) + EOS.
    "prefix_lm": Objective(
        prefix_lm, dict(noise_density=0.5), raw_length=_raw_inputs_length,
        targets_length=lambda p, li, lt, q: li - 1, layout=Layout(concatenate=False),
        density=dict(low_open=True, high=0.5), batched=batched.prefix_lm_block),
    "full_lm": Objective(
        full_lm, {}, raw_length=_raw_full_lm, targets_length=_targets_full_lm,
        layout=Layout(document_eos=True, targets_eos=False, has_inputs=False),
        batched=batched.full_lm_block),
    "mixture": Objective(
        mixture,
        dict(denoisers=None, preset=None, mode_tokens=None, inputs_length=None,
             targets_length=None, encode=None),
        raw_length=_raw_mixture, targets_length=_targets_mixture, overflow=_overflow_mixture,
        check_segment=_check_mixture_segment, bind=_bind_mixture),
}


# ----------------------------------------------------------------------------- entry points


def _record(name: str) -> Objective:
  if name not in OBJECTIVES:
    raise ValueError(f"unknown objective {name!r}; expected one of {sorted(OBJECTIVES)}")
  return OBJECTIVES[name]


def layout(name: str) -> Layout:
  """The objective's `Layout` (how the pipeline cuts its raw segments)."""
  return _record(name).layout


def resolve_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
  """The objective's parameters with defaults filled in, checked.

  Raises:
    ValueError: unknown name or parameter (naming the valid ones), or an invalid value.
  """
  obj = _record(name)
  unknown = sorted(set(params) - set(obj.params))
  if unknown:
    raise ValueError(f"objective {name!r} got unknown parameter(s) {unknown}; expected one of "
                     f"{sorted(obj.params)}")
  resolved = {**obj.params, **params}
  if obj.density is not None:
    noise.check_density(resolved["noise_density"], **obj.density)
  if obj.check is not None:
    obj.check(resolved)
  return resolved


def make_objective(name: str, *, vocab_size: int, num_extra_ids: int = DEFAULT_NUM_EXTRA_IDS,
                   **params) -> ObjectiveFn:
  """Binds an objective's parameters: returns fn(tokens int32[L], rng) -> {"inputs","targets"}.

  Args:
    name: a key of OBJECTIVES.
    vocab_size: tokenizer vocabulary size including the extra ids (sentinel k = V - 1 - k).
    num_extra_ids: number of sentinel ids at the top of the vocabulary (T5: 100).
    **params: the objective's keyword parameters (e.g. noise_density, mean_noise_span_length).
  Raises:
    ValueError: unknown name or parameter (naming the valid ones), or an invalid value.
  """
  noise.check_vocab(vocab_size, num_extra_ids)
  resolved = resolve_params(name, params)
  obj = OBJECTIVES[name]
  if obj.bind is not None:
    return obj.bind(int(vocab_size), int(num_extra_ids), resolved)
  return functools.partial(obj.fn, vocab_size=int(vocab_size), num_extra_ids=int(num_extra_ids),
                           **params)


def batched_form(name: str, params: Mapping[str, Any], *,
                 concatenate: bool = True) -> BatchedFn | None:
  """The objective's batched form where it applies (`Objective.batched_for`), else None.

  The data pipeline runs it where `DataSpec.batched_objectives` is on and this gives one: not
  for deshuffle or a mixture (no batched form), span_corruption with random_roll, or a layout
  that cuts single documents; else the per-example form.
  """
  return _record(name).batched_for(params, concatenate=concatenate)


def raw_length(name: str, *, inputs_length: int, targets_length: int | None = None,
               **params) -> int:
  """How many raw tokens the pipeline should cut per example for this objective.

  span_corruption: random_spans_helper(...)[0] (568 at 512/0.15/3); iid_replace_spans,
  drop_tokens, bert, mass, deshuffle, prefix_lm: inputs_length - 1 (511, T5's
  split_tokens_to_inputs_length); full_lm: targets_length (T5 full_lm's split_tokens at the
  targets length; its EOS are the document ends); mixture: the largest member
  raw length (each member is computed for inputs_length minus its mode tokens, and cuts its
  input to its own length, see mixtures.Mixture). The rules are the records' `raw_length`.

  Raises:
    ValueError: unknown name/parameter, or a length too short.
  """
  obj, resolved = _record(name), resolve_params(name, params)
  inputs_length = int(inputs_length)
  if obj.layout.has_inputs and inputs_length < 2:
    raise ValueError(f"{name} needs inputs_length >= 2, got {inputs_length}")
  return obj.raw_length(resolved, inputs_length, targets_length)


def required_targets_length(name: str, *, inputs_length: int, targets_length: int | None = None,
                            quantile: float = 0.999, **params) -> int:
  """Targets length (incl. EOS) an objective produces on a full raw_length segment.

  Deterministic objectives give the exact maximum: span_corruption random_spans_helper(...)[1]
  (114 at 512/0.15/3); bert, mass, deshuffle: inputs_length; prefix_lm: inputs_length - 1 (at
  least one prefix token); full_lm: targets_length (it defines its own raw length). For the
  i.i.d. objectives the targets length is random; this returns its exact `quantile` (computed
  by dynamic programming over the Bernoulli sequence): iid_replace_spans (noise tokens + non-noise
  runs + EOS) and drop_tokens (Binomial noise count + EOS; 104 at 512/0.15 and quantile 0.999,
  T5's gin `iid_15_d_d` value). Longer targets are trimmed by the converter. mixture: the max
  over members. The rules are the records' `targets_length`.
  """
  obj, resolved = _record(name), resolve_params(name, params)
  inputs_length = int(inputs_length)
  if obj.layout.has_inputs:  # checks the lengths (full_lm's rule checks its targets_length)
    raw_length(name, inputs_length=inputs_length, targets_length=targets_length, **params)
  return obj.targets_length(resolved, inputs_length, targets_length, quantile)


def sentinel_overflow_probability(name: str, *, inputs_length: int,
                                  num_extra_ids: int = DEFAULT_NUM_EXTRA_IDS,
                                  targets_length: int | None = None, **params) -> float:
  """Probability that one full raw segment needs more than num_extra_ids sentinels (then the
  objective raises). Exact: 0/1 for span corruption (its span count is fixed), the DP over the
  Bernoulli sequence for iid_replace_spans, 0 for objectives without unique sentinels; for a
  mixture, the weighted sum over members (with the ul2 preset's 3 reserved mode ids). The rules
  are the records' `overflow`."""
  obj, resolved = _record(name), resolve_params(name, params)
  raw_length(name, inputs_length=inputs_length, targets_length=targets_length, **params)
  if obj.overflow is None:
    return 0.0
  return obj.overflow(resolved, int(inputs_length), targets_length, num_extra_ids)


def required_extra_ids(name: str, *, inputs_length: int, targets_length: int | None = None,
                       max_overflow_probability: float = 1e-9, **params) -> int:
  """Smallest num_extra_ids whose sentinel_overflow_probability is <= max_overflow_probability.

  E.g. span_corruption at 512/0.15/3: 28; iid_replace_spans at 512 and 0.15 needs more than
  T5's 100 (T5 silently spilled into word pieces on the rare examples that needed more).
  """
  lo, hi = 1, int(inputs_length) + 4  # never more sentinels than tokens (+ UL2 mode ids)
  while lo < hi:
    mid = (lo + hi) // 2
    if sentinel_overflow_probability(name, inputs_length=inputs_length, num_extra_ids=mid,
                                     targets_length=targets_length,
                                     **params) <= max_overflow_probability:
      hi = mid
    else:
      lo = mid + 1
  return lo


def check_lengths(name: str, *, inputs_length: int, targets_length: int,
                  num_extra_ids: int = DEFAULT_NUM_EXTRA_IDS, max_overflow_probability=1e-9,
                  allow_truncated_targets: bool = False, **params) -> None:
  """Validates a config's lengths for an objective; raises a ValueError saying what to change.

  Checks that targets_length >= required_targets_length(...) (skipped with
  allow_truncated_targets: the converter then truncates longer targets, as T5's gin lengths
  did), that a full segment can be corrupted at all (the record's `check_segment`), and that
  the probability of a full segment needing more than num_extra_ids sentinels is at most
  max_overflow_probability.
  """
  need = required_targets_length(name, inputs_length=inputs_length,
                                 targets_length=targets_length, **params)
  if int(targets_length) < need and not allow_truncated_targets:
    raise ValueError(
        f"objective {name!r}{' ' + str(params) if params else ''} at "
        f"inputs_length={inputs_length} needs targets_length >= {need} (incl. EOS), but "
        f"targets_length={targets_length}; raise it")
  obj = _record(name)
  resolve_params(name, params)
  if obj.check_segment is not None:
    obj.check_segment(params, int(inputs_length), 0)
  prob = sentinel_overflow_probability(name, inputs_length=inputs_length,
                                       num_extra_ids=num_extra_ids,
                                       targets_length=targets_length, **params)
  if prob > max_overflow_probability:
    need = required_extra_ids(name, inputs_length=inputs_length, targets_length=targets_length,
                              max_overflow_probability=max_overflow_probability, **params)
    raise ValueError(
        f"objective {name!r}{' ' + str(params) if params else ''} at "
        f"inputs_length={inputs_length} needs more than num_extra_ids={num_extra_ids} sentinels "
        f"with probability {prob:.3g} per example (> {max_overflow_probability:g}); use a "
        f"vocabulary with >= {need} extra ids")
