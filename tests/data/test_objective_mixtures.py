"""lm.data.mixtures: the mixture's length rules against its members' own, each member at
inputs_length minus its mode tokens, and the ul2 preset's reserved ids (the survivors of a
mutation run, docs/testing.md)."""
import numpy as np
import pytest

from lm.data import mixtures
from lm.data import noise as noise_lib
from lm.data import objectives as obj

# Two members with 1 and 3 mode tokens: each member's rules run at inputs_length - 1 and - 3.
DENOISERS = [
    dict(objective="span_corruption", weight=3.0, mode_tokens=7,
         params=dict(noise_density=0.5, mean_noise_span_length=2.0)),
    dict(objective="iid_replace_spans", weight=1.0, mode_tokens=[8, 9, 10],
         params=dict(noise_density=0.3)),
]
MEMBERS = [("span_corruption", 1, 0.75, DENOISERS[0]["params"]),
           ("iid_replace_spans", 3, 0.25, DENOISERS[1]["params"])]


@pytest.mark.parametrize("inputs_length", [16, 64, 511])
def test_length_rules_are_the_members_at_their_own_inputs_length(inputs_length):
  t = 2 * inputs_length
  raw = obj.raw_length("mixture", inputs_length=inputs_length, targets_length=t,
                       denoisers=DENOISERS)
  assert raw == max(obj.raw_length(n, inputs_length=inputs_length - r, targets_length=t, **p)
                    for n, r, _, p in MEMBERS)
  need = obj.required_targets_length("mixture", inputs_length=inputs_length, targets_length=t,
                                     denoisers=DENOISERS)
  assert need == max(obj.required_targets_length(n, inputs_length=inputs_length - r,
                                                 targets_length=t, **p)
                     for n, r, _, p in MEMBERS)
  for k in (2, 5, 40):
    got = obj.sentinel_overflow_probability("mixture", inputs_length=inputs_length,
                                            num_extra_ids=k, targets_length=t,
                                            denoisers=DENOISERS)
    want = sum(w * obj.sentinel_overflow_probability(n, inputs_length=inputs_length - r,
                                                     num_extra_ids=k, targets_length=t, **p)
               for n, r, w, p in MEMBERS)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-300)


def test_ul2_overflow_counts_the_three_reserved_ids_out_of_the_members_sentinels():
  # The R member (density 0.15, mean span 3) lays out a deterministic number of spans: with
  # exactly that many sentinels left after the 3 reserved ids it fits, with one fewer not.
  length = 256
  raw = obj.raw_length("span_corruption", inputs_length=length - 1, noise_density=0.15,
                       mean_noise_span_length=3.0)
  n_extra = noise_lib.random_spans_counts(raw, 0.15, 3.0)[1] + 3
  got = obj.sentinel_overflow_probability("mixture", inputs_length=length, num_extra_ids=n_extra,
                                          targets_length=length, preset="ul2")
  members = mixtures.ul2_denoisers()
  total = sum(m["weight"] for m in members)
  want = sum(m["weight"] / total * obj.sentinel_overflow_probability(
      m["objective"], inputs_length=length - 1, num_extra_ids=n_extra - 3,
      targets_length=length, **m["params"]) for m in members)
  assert 0 < want < 1 and got == pytest.approx(want, rel=1e-12)


def test_ul2_mode_ids_are_the_three_lowest_extra_ids_for_any_vocabulary():
  # An odd base (vocab - extra ids) tells base + 1 from base | 1.
  # Bases 32000, 901 (odd), 32003 (odd, bit 1 set: base + 2 differs from base | 2 and ^ 2).
  for vocab, n_extra in ((32100, 100), (1001, 100), (32103, 100)):
    fn = obj.make_objective("mixture", vocab_size=vocab, num_extra_ids=n_extra, preset="ul2",
                            inputs_length=64, targets_length=64)
    base = vocab - n_extra
    seen = {int(fn(np.arange(3, 200, dtype=np.int32), np.random.default_rng(s))["inputs"][0])
            for s in range(60)}
    assert seen == {base, base + 1, base + 2}, (vocab, n_extra, seen)


def test_each_member_cuts_its_segment_to_fill_inputs_length_with_its_mode_tokens():
  """A member's output (mode tokens + corrupted inputs + EOS) fills inputs_length exactly:
  its raw segment was sized for inputs_length minus its own mode tokens."""
  length = 40
  fn = obj.make_objective("mixture", vocab_size=32100, inputs_length=length,
                          targets_length=length, denoisers=[dict(
                              objective="prefix_lm", mode_tokens=[5, 6, 7])])
  ex = fn(np.arange(3, 500, dtype=np.int32), np.random.default_rng(0))
  assert ex["inputs"][:3].tolist() == [5, 6, 7]
  raw = obj.raw_length("prefix_lm", inputs_length=length - 3, targets_length=length)
  assert ex["inputs"].size + ex["targets"].size == 3 + raw


def test_a_member_that_cannot_corrupt_its_segment_fails_the_mixtures_check():
  p = {"noise_density": 0.6, "mean_noise_span_length": 1.0}
  ok = [dict(objective="span_corruption", params=p)]
  obj.check_lengths("mixture", inputs_length=5, targets_length=64, denoisers=ok)
  with pytest.raises(ValueError, match="spans exceed the"):  # 4 tokens (see test_objectives)
    obj.check_lengths("mixture", inputs_length=4, targets_length=64, denoisers=ok)
  with pytest.raises(ValueError, match="spans exceed the"):  # 5 inputs - 1 mode token
    obj.check_lengths("mixture", inputs_length=5, targets_length=64,
                      denoisers=[dict(objective="span_corruption", params=p, mode_tokens=3)])


@pytest.mark.parametrize("denoisers, message", [
    ([], "non-empty list of denoisers"),
    ([dict(objective="span_corruption", bogus=1)], r"denoiser 0: keys must be .*\['bogus', "
     r"'objective'\]"),
    ([dict(params={})], "objective required"),
    ([dict(objective="mixture")], r"denoiser 0: unknown objective 'mixture'; expected one of "
     r"\[.*'span_corruption'"),
    ([dict(objective="span_corruption"), dict(objective="nope")], "denoiser 1: unknown objective"),
    ([dict(objective="span_corruption", weight=0)], "denoiser 0: weight must be > 0, got 0"),
    ([dict(objective="span_corruption", weight=float("inf"))], "weight must be > 0"),
    ([dict(objective="span_corruption", mode_tokens=[[1, 2]])], "mode_tokens must be an int"),
])
def test_bad_denoisers_name_the_member_and_the_problem(denoisers, message):
  with pytest.raises(ValueError, match=message) as e:
    obj.make_objective("mixture", vocab_size=32100, inputs_length=64, denoisers=denoisers)
  assert "'mixture'" not in str(e.value).split("expected one of")[-1]


def _runtime(s):
  """The same string built at run time (not the interned literal: `is` would tell them apart),
  as a flag's or a config file's value is."""
  return "".join(list(s))


def _ul2_overflow(n_extra, length=256, **params):
  return obj.sentinel_overflow_probability("mixture", inputs_length=length, num_extra_ids=n_extra,
                                           targets_length=length, preset="ul2", **params)


def test_ul2_mode_token_styles():
  """"ids" (the default): 3 extra ids reserved, 1 mode token counted in each member's length;
  "text": the mode strings tokenized, nothing reserved or counted (the lengths are the
  members' at the full inputs_length); a dict: those ids, counted, no extra id reserved."""
  ids = _ul2_overflow(30)
  assert _ul2_overflow(30, mode_tokens=_runtime("ids")) == ids
  members = mixtures.ul2_denoisers()
  total = sum(m["weight"] for m in members)
  text = sum(m["weight"] / total * obj.sentinel_overflow_probability(
      m["objective"], inputs_length=256, num_extra_ids=30, targets_length=256, **m["params"])
      for m in members)
  assert _ul2_overflow(30, mode_tokens=_runtime("text")) == pytest.approx(text, rel=1e-12)
  assert text < ids  # 30 sentinels instead of 27
  assert obj.raw_length("mixture", inputs_length=512, preset="ul2", mode_tokens="text") == max(
      obj.raw_length(m["objective"], inputs_length=512, **m["params"]) for m in members)
  explicit = {"R": [5, 6], "X": 7, "S": 8}
  assert obj.raw_length("mixture", inputs_length=512, preset="ul2", mode_tokens=explicit) == max(
      obj.raw_length(m["objective"], inputs_length=512 - (2 if i < 2 else 1), **m["params"])
      for i, m in enumerate(members))

  encode = lambda s: {"[NLU]": [11, 12], "[NLG]": [13], "[S2S]": [14, 15, 16]}[s]
  fn = obj.make_objective("mixture", vocab_size=32100, inputs_length=64, targets_length=64,
                          preset="ul2", mode_tokens=_runtime("text"), encode=encode)
  starts = {tuple(fn(np.arange(3, 200, dtype=np.int32), np.random.default_rng(s))["inputs"][:3])
            for s in range(60)}
  firsts = {s[0] for s in starts}
  # Text mode tokens are not counted in the lengths: the S member (prefix LM) cuts the raw
  # segment for the full inputs_length, and its output holds that plus the 3 string tokens.
  s_params = mixtures.ul2_denoisers()[6]["params"]
  s_raw = obj.raw_length("prefix_lm", inputs_length=64, targets_length=64, **s_params)
  for seed in range(60):
    ex = fn(np.arange(3, 200, dtype=np.int32), np.random.default_rng(seed))
    if ex["inputs"][0] == 14:
      assert ex["inputs"].size + ex["targets"].size == 3 + s_raw
  assert firsts == {11, 13, 14}  # R, X and S members, their strings' tokens first
  assert all(s[1] == 12 for s in starts if s[0] == 11)
  assert all(s[1:] == (15, 16) for s in starts if s[0] == 14)
  with pytest.raises(ValueError, match="mode_tokens='text' needs encode="):
    obj.make_objective("mixture", vocab_size=32100, inputs_length=64, preset="ul2",
                       mode_tokens=_runtime("text"))
  for bad in ("bogus", 5, ["R"]):
    with pytest.raises(ValueError, match="unknown mode_tokens"):
      obj.make_objective("mixture", vocab_size=32100, inputs_length=64, preset="ul2",
                         mode_tokens=bad)
  with pytest.raises(ValueError, match="mode_tokens= goes with preset="):
    obj.make_objective("mixture", vocab_size=32100, inputs_length=64, mode_tokens="ids",
                       denoisers=DENOISERS)


def test_weights_default_to_one_and_must_be_positive():
  iid = dict(objective="iid_replace_spans", weight=3.0, params=dict(noise_density=0.3))
  one = [dict(objective="full_lm"), iid]
  got = obj.sentinel_overflow_probability("mixture", inputs_length=64, num_extra_ids=10,
                                          targets_length=64, denoisers=one)
  want = 0.75 * obj.sentinel_overflow_probability("iid_replace_spans", inputs_length=64,
                                                  num_extra_ids=10, targets_length=64,
                                                  noise_density=0.3)
  assert 0 < want < 0.75 and got == pytest.approx(want, rel=1e-12)  # full_lm never overflows
  with pytest.raises(ValueError, match="weight must be > 0, got -1"):
    obj.make_objective("mixture", vocab_size=32100, inputs_length=64,
                       denoisers=[dict(objective="full_lm", weight=-1)])


def test_a_mixture_member_named_at_run_time_is_refused():
  with pytest.raises(ValueError, match="unknown objective 'mixture'"):
    obj.make_objective("mixture", vocab_size=32100, inputs_length=64,
                       denoisers=[dict(objective=_runtime("mixture"))])


@pytest.mark.parametrize("s_weight", [0.0, 1.0])
def test_ul2_s_weight_is_strictly_between_0_and_1(s_weight):
  with pytest.raises(ValueError, match="s_weight"):
    mixtures.ul2_denoisers(s_weight=s_weight)
