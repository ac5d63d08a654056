"""Tests for lm/data/objectives.py: hand-derived T5 expectations, exact counts, statistics."""
import itertools

import numpy as np
import pytest

from lm.data import converters
from lm.data import lengths as lengths_lib
from lm.data import mixtures as mixtures_lib
from lm.data import noise as noise_lib
from lm.data import objectives as obj

V = 32100  # T5 vocabulary incl. 100 extra ids
X0, X1, X2 = 32099, 32098, 32097
A = np.arange(10, 20, dtype=np.int32)  # tokens "A".."J"


def rng(seed=0):
  return np.random.default_rng(seed)


def runs(mask):
  mask = np.asarray(mask, bool)
  return int(np.count_nonzero(mask & ~np.concatenate([[False], mask[:-1]])))


# ----------------------------------------------------------------------------- worked example


def test_t5_notes_toy_example():
  mask = np.array([0, 0, 1, 1, 0, 0, 0, 1, 0, 1], bool)
  a, b, c, d, e, f, g, h, i, j = A
  inputs = noise_lib.noise_span_to_unique_sentinel(A, mask, vocab_size=V)
  targets = noise_lib.nonnoise_span_to_unique_sentinel(A, mask, vocab_size=V)
  np.testing.assert_array_equal(inputs, [a, b, X0, e, f, g, X1, i, X2])
  np.testing.assert_array_equal(targets, [X0, c, d, X1, h, X2, j])
  assert inputs.dtype == targets.dtype == np.int32
  enc = converters.convert({"inputs": inputs, "targets": targets}, "encoder_decoder")
  np.testing.assert_array_equal(enc["encoder_input_tokens"], [a, b, X0, e, f, g, X1, i, X2, 1])
  np.testing.assert_array_equal(enc["decoder_target_tokens"], [X0, c, d, X1, h, X2, j, 1])


def test_other_inputs_targets_fns_by_hand():
  t = np.array([5, 6, 7, 8, 9], np.int32)
  m = np.array([0, 1, 1, 0, 1], bool)
  np.testing.assert_array_equal(noise_lib.drop_noise_tokens(t, m), [5, 8])
  np.testing.assert_array_equal(noise_lib.drop_nonnoise_tokens(t, m), [6, 7, 9])
  np.testing.assert_array_equal(noise_lib.noise_token_to_sentinel(t, m, vocab_size=V), [5, X0, X0, 8, X0])
  p = noise_lib.permute_noise_tokens(t, m, rng())
  np.testing.assert_array_equal(p[~m], [5, 8])
  assert sorted(p[m]) == [6, 7, 9]
  # random_prob 1: every noise token random in [3, V); 0: every noise token the mask.
  r = noise_lib.noise_token_to_random_token_or_sentinel(t, m, rng(), vocab_size=20, random_prob=1.0)
  np.testing.assert_array_equal(r[~m], [5, 8])
  assert ((r[m] >= 3) & (r[m] < 20)).all()
  r = noise_lib.noise_token_to_random_token_or_sentinel(t, m, rng(), vocab_size=V, random_prob=0.0)
  np.testing.assert_array_equal(r, [5, X0, X0, 8, X0])


def test_iid_alignment_caveat_reproduced():
  # Mask starting with noise: targets begin with the bare noise token, and targets' sentinel 0
  # precedes noise span 1 (T5 preprocessors.py nonnoise_span_to_unique_sentinel).
  t = np.array([5, 6, 7, 8], np.int32)
  m = np.array([1, 0, 0, 1], bool)
  np.testing.assert_array_equal(noise_lib.noise_span_to_unique_sentinel(t, m, vocab_size=V),
                                [X0, 6, 7, X1])
  np.testing.assert_array_equal(noise_lib.nonnoise_span_to_unique_sentinel(t, m, vocab_size=V),
                                [5, X0, 8])
  # Mask ending with non-noise: the targets end with a sentinel.
  m = np.array([0, 1, 0, 0], bool)
  np.testing.assert_array_equal(noise_lib.nonnoise_span_to_unique_sentinel(t, m, vocab_size=V),
                                [X0, 6, X1])


# ----------------------------------------------------------------------------- length arithmetic


@pytest.mark.parametrize("args,expected", [
    ((512, 0.15, 3.0), (568, 114)),   # T5 span corruption
    ((128, 0.15, 3.0), (141, 29)),    # 141-21+7+1 = 128; T=142 gives 129
    ((512, 0.15, 64.0), (600, 92)),   # 600-90+1+1 = 512; 90+1+1 = 92
    ((512, 0.5, 3.0), (766, 512)),    # T=767: 767-384+128+1 = 512 but targets 513 -> hack
    ((512, 0.0, 3.0), (511, 1)),      # no noise: inputs = tokens + EOS
])
def test_random_spans_helper(args, expected):
  assert lengths_lib.random_spans_helper(*args) == expected


def test_random_spans_helper_extra_tokens():
  # 2 sentinels per span in the inputs: T=540: nn=81, ns=27 -> 540-81+54+1 = 514 > 512;
  # T=538: nn=round(80.7)=81 -> 538-81+54+1 = 512; T=539: round(80.85)=81 -> 513.
  assert lengths_lib.random_spans_helper(512, 0.15, 3.0, 2, 1) == (538, 81 + 27 + 1)


@pytest.mark.parametrize("inputs_length,density,mu", [
    (512, 0.15, 3.0), (128, 0.15, 3.0), (512, 0.15, 10.0), (512, 0.5, 3.0), (256, 0.25, 2.0),
    (512, 0.15, 64.0)])
def test_full_segment_fills_inputs_and_targets_exactly(inputs_length, density, mu):
  raw, tgt = lengths_lib.random_spans_helper(inputs_length, density, mu)
  assert obj.raw_length("span_corruption", inputs_length=inputs_length, noise_density=density,
                        mean_noise_span_length=mu) == raw
  fn = obj.make_objective("span_corruption", vocab_size=V, num_extra_ids=200,
                          noise_density=density, mean_noise_span_length=mu)
  lengths = {"inputs": inputs_length, "targets": tgt}
  for seed in range(20):
    ex = fn(np.full(raw, 7, np.int32), rng(seed))
    feats = converters.convert(ex, "encoder_decoder", lengths=lengths)
    assert feats["encoder_input_tokens"].size == inputs_length
    assert feats["decoder_target_tokens"].size == tgt
    assert ex["inputs"].size == inputs_length - 1 and ex["targets"].size == tgt - 1  # untrimmed


# ----------------------------------------------------------------------------- span noise mask


def test_random_spans_mask_exact_counts_many_seeds():
  g = rng(1)
  for _ in range(300):
    m = noise_lib.random_spans_noise_mask(568, 0.15, 3.0, g)
    assert m.dtype == bool and m.shape == (568,)
    assert m.sum() == 85 and runs(m) == 28 and runs(~m) == 28
    assert not m[0] and m[-1]


def test_random_spans_mask_float32_rounding():
  # T5 computes length * density in float32: 190 * float32(0.15) = 28.500001 -> 29 noise tokens,
  # where float64 gives 28.499999... -> 28.
  assert round(190 * 0.15) == 28
  m = noise_lib.random_spans_noise_mask(190, 0.15, 3.0, rng())
  assert m.sum() == 29 and runs(m) == 10  # round(29/3) = 10
  # Half-to-even: 10 * 0.15 = 1.5 -> 2; 30 * 0.15 = 4.5 -> 4.
  assert noise_lib.random_spans_noise_mask(10, 0.15, 3.0, rng()).sum() == 2
  assert noise_lib.random_spans_noise_mask(30, 0.15, 3.0, rng()).sum() == 4


def test_random_spans_mask_is_uniform_over_compositions():
  # length 8, density 0.5, mu 2: 4 noise in 2 spans (3 compositions) x 4 non-noise in 2 spans
  # (3 compositions) -> 9 masks, each with probability 1/9.
  g = rng(2)
  counts = {}
  n = 4500
  for _ in range(n):
    m = noise_lib.random_spans_noise_mask(8, 0.5, 2.0, g)
    counts[m.tobytes()] = counts.get(m.tobytes(), 0) + 1
  assert len(counts) == 9
  for c in counts.values():
    assert abs(c / n - 1 / 9) < 5 * np.sqrt((1 / 9) * (8 / 9) / n)


def test_random_spans_edge_cases():
  t = np.array([5, 6, 7], np.int32)
  sc = obj.make_objective("span_corruption", vocab_size=V)
  cases = {  # length -> (inputs, targets), derived from T5 random_spans_noise_mask
      0: ([], []),
      1: ([5], [X0]),
      2: ([5, X0], [X0, 6]),
      3: ([5, 6, X0], [X0, 7]),
  }
  for length, (inputs, targets) in cases.items():
    ex = sc(t[:length], rng())
    np.testing.assert_array_equal(ex["inputs"], inputs)
    np.testing.assert_array_equal(ex["targets"], targets)
  m = noise_lib.random_spans_noise_mask(20, 0.15, 3.0, rng())
  np.testing.assert_array_equal(m, [False] * 17 + [True] * 3)  # 3 noise, 1 span
  ex = obj.make_objective("span_corruption", vocab_size=V, noise_density=0.0)(A, rng())
  np.testing.assert_array_equal(ex["inputs"], A)
  np.testing.assert_array_equal(ex["targets"], [X0])
  # density 1 is clamped to length - 1 noise tokens; fine while spans <= non-noise tokens.
  m = noise_lib.random_spans_noise_mask(10, 1.0, 10.0, rng())
  np.testing.assert_array_equal(m, [False] + [True] * 9)
  with pytest.raises(ValueError, match="non-noise"):
    noise_lib.random_spans_noise_mask(10, 1.0, 3.0, rng())  # 3 spans, 1 non-noise token (T5 fails)


def test_random_roll_keeps_counts():
  m = noise_lib.random_spans_noise_mask(100, 0.15, 3.0, rng(), random_roll=True)
  assert m.sum() == 15


def test_span_corruption_reconstructs_original_and_orders_sentinels():
  fn = obj.make_objective("span_corruption", vocab_size=V)
  g = rng(3)
  for _ in range(50):
    tokens = g.integers(3, 32000, 568, dtype=np.int32)
    ex = fn(tokens, g)
    ins, tgs = ex["inputs"], ex["targets"]
    s_in = ins[ins >= 32000]
    s_tg = tgs[tgs >= 32000]
    np.testing.assert_array_equal(s_in, V - 1 - np.arange(28))  # unique, in order
    np.testing.assert_array_equal(s_tg, s_in)
    # reconstruct: each input sentinel -> the target tokens after the same sentinel.
    pieces = np.split(tgs, np.flatnonzero(tgs >= 32000))[1:]
    fill = {int(p[0]): p[1:] for p in pieces}
    rebuilt = np.concatenate([fill[int(x)] if x >= 32000 else [x] for x in ins])
    np.testing.assert_array_equal(rebuilt, tokens)


def test_too_many_spans_raise_instead_of_spilling():
  fn = obj.make_objective("span_corruption", vocab_size=V, num_extra_ids=27)
  with pytest.raises(ValueError, match="28 spans need 28 sentinels but num_extra_ids=27"):
    fn(np.full(568, 7, np.int32), rng())
  fn = obj.make_objective("iid_replace_spans", vocab_size=V, noise_density=0.5)
  with pytest.raises(ValueError, match="num_extra_ids=100"):
    fn(np.full(511, 7, np.int32), rng())  # ~128 spans


# ----------------------------------------------------------------------------- other objectives


def test_iid_objectives_statistics():
  g = rng(4)
  tokens = np.full(511, 7, np.int32)
  noise = 0
  for _ in range(200):
    ex = obj.make_objective("drop_tokens", vocab_size=V)(tokens, g)
    assert ex["inputs"].size + ex["targets"].size == 511
    noise += ex["targets"].size
  n = 200 * 511
  assert abs(noise / n - 0.15) < 5 * np.sqrt(0.15 * 0.85 / n)
  fn = obj.make_objective("iid_replace_spans", vocab_size=V, noise_density=0.15)
  for _ in range(50):
    ex = fn(tokens, g)
    ins, tgs = ex["inputs"], ex["targets"]
    n_noise = int((tgs == 7).sum())
    assert (ins == 7).sum() + n_noise == 511
    s_in, s_tg = ins[ins > 7], tgs[tgs > 7]
    np.testing.assert_array_equal(s_in, V - 1 - np.arange(s_in.size))
    np.testing.assert_array_equal(s_tg, V - 1 - np.arange(s_tg.size))
    assert abs(s_in.size - s_tg.size) <= 1


def test_bert_and_mass_ratios():
  g = rng(5)
  tokens = np.full(511, 7, np.int32)
  n, masked, random = 300 * 511, 0, 0
  bert = obj.make_objective("bert", vocab_size=V)
  for _ in range(300):
    ex = bert(tokens, g)
    np.testing.assert_array_equal(ex["targets"], tokens)
    masked += (ex["inputs"] == X0).sum()
    random += ((ex["inputs"] != 7) & (ex["inputs"] != X0)).sum()
    assert ((ex["inputs"] >= 3) & (ex["inputs"] < V)).all()
  corrupted = masked + random
  assert abs(corrupted / n - 0.15) < 5 * np.sqrt(0.15 * 0.85 / n)
  assert abs(random / corrupted - 0.1) < 5 * np.sqrt(0.1 * 0.9 / corrupted)
  mass = obj.make_objective("mass", vocab_size=V)
  masked = 0
  for _ in range(300):
    ex = mass(tokens, g)
    np.testing.assert_array_equal(ex["targets"], tokens)
    assert set(np.unique(ex["inputs"])) <= {7, X0}
    masked += (ex["inputs"] == X0).sum()
  assert abs(masked / n - 0.15) < 5 * np.sqrt(0.15 * 0.85 / n)


def test_deshuffle():
  fn = obj.make_objective("deshuffle", vocab_size=V)
  tokens = np.arange(100, 611, dtype=np.int32)
  ex = fn(tokens, rng(6))
  np.testing.assert_array_equal(ex["targets"], tokens)
  np.testing.assert_array_equal(np.sort(ex["inputs"]), tokens)
  assert (ex["inputs"] != tokens).mean() > 0.9


def test_prefix_lm_split_ranges():
  fn = obj.make_objective("prefix_lm", vocab_size=V)
  g = rng(7)
  tokens = np.arange(3, 9, dtype=np.int32)  # L = 6
  seen = set()
  for _ in range(300):
    ex = fn(tokens, g)
    np.testing.assert_array_equal(np.concatenate([ex["inputs"], ex["targets"]]), tokens)
    seen.add(ex["inputs"].size)
  assert seen == {1, 2, 3, 4, 5}  # uniform in [1, L - 1]
  # density 0.25: min prefix = round(0.5 * 5) = 2 (half-to-even of 2.5), max 5.
  fn = obj.make_objective("prefix_lm", vocab_size=V, noise_density=0.25)
  assert {fn(tokens, g)["inputs"].size for _ in range(300)} == {2, 3, 4, 5}
  np.testing.assert_array_equal(fn(tokens[:1], g)["targets"], tokens[:1])  # L=1: empty prefix
  assert fn(tokens[:0], g)["inputs"].size == fn(tokens[:0], g)["targets"].size == 0


def test_full_lm():
  ex = obj.make_objective("full_lm", vocab_size=V)(A, rng())
  assert ex["inputs"].size == 0 and ex["inputs"].dtype == np.int32
  np.testing.assert_array_equal(ex["targets"], A)


def test_edge_lengths_every_objective():
  for name in obj.OBJECTIVES:
    if name == "mixture":
      continue
    fn = obj.make_objective(name, vocab_size=V)
    for length in (0, 1, 2):
      ex = fn(A[:length], rng())
      assert ex["inputs"].dtype == ex["targets"].dtype == np.int32


# ----------------------------------------------------------------------------- mixture


def test_mixture_weights_and_mode_tokens():
  fn = obj.make_objective("mixture", vocab_size=V, inputs_length=64, targets_length=64,
                          denoisers=[dict(objective="full_lm", weight=3.0, mode_tokens=7),
                                     dict(objective="prefix_lm", weight=1.0, mode_tokens=[8, 9])])
  g = rng(8)
  n, first = 4000, 0
  for _ in range(n):
    ex = fn(A, g)
    if ex["inputs"][0] == 7:
      first += 1
      np.testing.assert_array_equal(ex["inputs"], [7])
      np.testing.assert_array_equal(ex["targets"], A)
    else:
      np.testing.assert_array_equal(ex["inputs"][:2], [8, 9])
  assert abs(first / n - 0.75) < 5 * np.sqrt(0.75 * 0.25 / n)


def test_ul2_preset():
  members = mixtures_lib.ul2_denoisers()
  assert len(members) == 7
  assert [m["params"].get("mean_noise_span_length") for m in members[:6]] == [3, 8, 3, 8, 64, 64]
  assert [m["params"]["noise_density"] for m in members] == [.15, .15, .5, .5, .15, .5, .5]
  assert np.isclose(sum(m["weight"] for m in members), 1.0) and members[6]["weight"] == 0.2
  n_extra = 140
  r_id, x_id, s_id = V - n_extra, V - n_extra + 1, V - n_extra + 2
  fn = obj.make_objective("mixture", vocab_size=V, num_extra_ids=n_extra, preset="ul2",
                          inputs_length=512, targets_length=512)
  raw = obj.raw_length("mixture", inputs_length=512, targets_length=512, preset="ul2")
  assert raw == lengths_lib.random_spans_helper(511, 0.5, 64.0)[0]  # longest member, 1 mode token
  obj.check_lengths("mixture", inputs_length=512, targets_length=512, num_extra_ids=n_extra,
                    preset="ul2")
  g = rng(9)
  counts = {r_id: 0, x_id: 0, s_id: 0}
  n = 700
  tokens = np.arange(3, 3 + raw, dtype=np.int32)
  for _ in range(n):
    ex = fn(tokens, g)
    counts[int(ex["inputs"][0])] += 1
    feats = converters.convert(ex, "encoder_decoder", lengths={"inputs": 512, "targets": 512})
    assert ex["inputs"].size <= 511 and ex["targets"].size <= 511  # fits without trimming
    body = ex["inputs"][1:]
    assert not np.isin(body, [r_id, x_id, s_id]).any()  # sentinels never reach mode ids
    assert feats["encoder_input_tokens"].size <= 512
  for tok, p in ((r_id, 0.8 / 3), (x_id, 0.8 * 4 / 6), (s_id, 0.2)):
    assert abs(counts[tok] / n - p) < 5 * np.sqrt(p * (1 - p) / n)
  with pytest.raises(ValueError, match="extra ids"):
    obj.check_lengths("mixture", inputs_length=512, targets_length=512, preset="ul2")


# ----------------------------------------------------------------------------- API


def test_determinism_every_objective():
  tokens = np.arange(3, 303, dtype=np.int32)
  for name in obj.OBJECTIVES:
    params = dict(preset="ul2", inputs_length=512) if name == "mixture" else {}
    fn = obj.make_objective(name, vocab_size=V, num_extra_ids=150, **params)
    a, b = fn(tokens, rng(11)), fn(tokens, rng(11))
    np.testing.assert_array_equal(a["inputs"], b["inputs"])
    np.testing.assert_array_equal(a["targets"], b["targets"])
    assert a["inputs"].dtype == np.int32
    if name != "full_lm":
      outs = {fn(tokens, rng(s))["inputs"].tobytes() for s in range(5)}
      assert len(outs) > 1, name


def test_bad_arguments():
  with pytest.raises(ValueError, match="unknown objective 'spam'.*span_corruption"):
    obj.make_objective("spam", vocab_size=V)
  with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['noise'\].*noise_density"):
    obj.make_objective("span_corruption", vocab_size=V, noise=0.1)
  for name, d in (("bert", 0.0), ("bert", 1.0), ("mass", -0.1), ("iid_replace_spans", 1.5),
                  ("prefix_lm", 0.6), ("prefix_lm", 0.0), ("span_corruption", 1.2),
                  ("deshuffle", 0.0)):
    with pytest.raises(ValueError, match="noise_density must be in"):
      obj.make_objective(name, vocab_size=V, noise_density=d)
  with pytest.raises(ValueError, match="mean_noise_span_length"):
    obj.make_objective("span_corruption", vocab_size=V, mean_noise_span_length=0)
  with pytest.raises(ValueError, match="vocab_size"):
    obj.make_objective("span_corruption", vocab_size=100)
  with pytest.raises(ValueError, match="exactly one of"):
    obj.make_objective("mixture", vocab_size=V, inputs_length=512)
  with pytest.raises(ValueError, match="needs inputs_length"):
    obj.make_objective("mixture", vocab_size=V, preset="ul2")
  with pytest.raises(ValueError, match="unknown objective 'nope'"):
    obj.make_objective("mixture", vocab_size=V, inputs_length=512,
                       denoisers=[dict(objective="nope")])
  with pytest.raises(ValueError, match="unknown mixture preset"):
    obj.make_objective("mixture", vocab_size=V, inputs_length=512, preset="ul3")
  with pytest.raises(ValueError, match="weight must be > 0"):
    obj.make_objective("mixture", vocab_size=V, inputs_length=512,
                       denoisers=[dict(objective="full_lm", weight=0)])
  with pytest.raises(ValueError, match="1-D"):
    obj.make_objective("full_lm", vocab_size=V)(np.zeros((2, 3), np.int32), rng())
  with pytest.raises(ValueError, match="shape"):
    noise_lib.drop_noise_tokens(A, np.zeros(3, bool))


def test_raw_and_targets_lengths():
  assert obj.raw_length("span_corruption", inputs_length=512, targets_length=114) == 568
  for name in ("iid_replace_spans", "drop_tokens", "bert", "mass", "deshuffle", "prefix_lm"):
    assert obj.raw_length(name, inputs_length=512, targets_length=512) == 511
  # T5 full_lm: chunks of the targets length, EOS only at document ends (no chunk-end EOS).
  assert obj.raw_length("full_lm", inputs_length=0, targets_length=512) == 512
  req = obj.required_targets_length
  assert req("span_corruption", inputs_length=512) == 114
  assert req("span_corruption", inputs_length=512, mean_noise_span_length=10.0) == 99
  assert req("bert", inputs_length=512) == 512
  assert req("prefix_lm", inputs_length=512) == 511
  assert req("drop_tokens", inputs_length=512) == 104  # T5 gin iid_15_d_d: "99.9th percentile"
  with pytest.raises(ValueError, match="needs targets_length >= 114.*targets_length=113"):
    obj.check_lengths("span_corruption", inputs_length=512, targets_length=113)
  obj.check_lengths("span_corruption", inputs_length=512, targets_length=114)
  assert obj.required_extra_ids("span_corruption", inputs_length=512) == 28
  with pytest.raises(ValueError, match="extra ids"):
    obj.check_lengths("iid_replace_spans", inputs_length=512, targets_length=512,
                      noise_density=0.5)


def test_span_segment_check_at_its_boundaries():
  """Span corruption at density 0.6, mean span 1: a raw segment of 4 tokens needs more spans
  than it has non-noise tokens (T5's TF code fails there), 5 does not, 6 again does. The
  check runs on inputs_length minus the mode tokens a mixture reserves, and check_lengths
  reserves none."""
  p = {"noise_density": 0.6, "mean_noise_span_length": 1.0}
  check = obj.OBJECTIVES["span_corruption"].check_segment
  check(p, 5, 0)
  check(p, 10, 5)   # = 5 tokens: fine
  with pytest.raises(ValueError, match="spans exceed the"):
    check(p, 9, 5)  # = 4 tokens
  with pytest.raises(ValueError, match="spans exceed the 1 non-noise tokens"):
    obj.check_lengths("span_corruption", inputs_length=4, targets_length=64, **p)
  obj.check_lengths("span_corruption", inputs_length=5, targets_length=64, **p)
  check({"noise_density": 0.0}, 4, 0)  # no noise: nothing to lay out, never an error
  # 6 inputs -> a raw segment of 5 tokens, 3 of them noise in 3 spans: 2 non-noise tokens.
  with pytest.raises(ValueError, match="3 spans exceed the 2 non-noise tokens"):
    obj.check_lengths("span_corruption", inputs_length=6, targets_length=64, **p)
  # 2 inputs -> a raw segment of 1 token (laid out on 2, as T5's mask): 1 span fits.
  assert obj.raw_length("span_corruption", inputs_length=2) == 1
  obj.check_lengths("span_corruption", inputs_length=2, targets_length=64)


def test_zero_noise_span_corruption_needs_no_sentinels():
  """Density 0: no span, so never an overflow, even with no extra ids at all; the smallest
  vocabulary the search returns is still 1 extra id."""
  assert obj.sentinel_overflow_probability("span_corruption", inputs_length=512,
                                           num_extra_ids=0, noise_density=0.0) == 0.0
  assert obj.required_extra_ids("span_corruption", inputs_length=512, noise_density=0.0) == 1


@pytest.mark.parametrize("name, inputs_length, params", [
    ("span_corruption", 512, {}),
    ("span_corruption", 7, {"noise_density": 0.5, "mean_noise_span_length": 1.0}),
    ("iid_replace_spans", 64, {"noise_density": 0.3}),
    ("iid_replace_spans", 6, {"noise_density": 0.5}),
    ("iid_replace_spans", 13, {"noise_density": 0.5}),
    ("mixture", 64, {"preset": "ul2"}),
])
@pytest.mark.parametrize("max_prob", [1e-9, 1e-3, 0.2, 1.0])
def test_required_extra_ids_is_the_smallest_count_that_fits(name, inputs_length, params,
                                                            max_prob):
  """The search's answer n is minimal: n extra ids overflow with probability <= max_prob,
  n - 1 (when >= 1) with more; checked by evaluating the overflow probability directly."""
  n = obj.required_extra_ids(name, inputs_length=inputs_length, targets_length=inputs_length,
                             max_overflow_probability=max_prob, **params)
  prob = lambda k: obj.sentinel_overflow_probability(
      name, inputs_length=inputs_length, num_extra_ids=k, targets_length=inputs_length, **params)
  assert prob(n) <= max_prob
  assert n == 1 or prob(n - 1) > max_prob


def test_layouts_are_t5s():
  """How each objective's raw segments are cut (docs/objectives.md): the denoising objectives
  from concatenated documents; deshuffling and prefix LM from single documents; full LM from
  concatenated documents with an EOS at each document's end and none added to the targets,
  and no inputs at all."""
  L = obj.Layout
  want = {name: L() for name in ("span_corruption", "iid_replace_spans", "drop_tokens", "bert",
                                 "mass", "mixture")}
  want |= {"deshuffle": L(concatenate=False), "prefix_lm": L(concatenate=False),
           "full_lm": L(document_eos=True, targets_eos=False, has_inputs=False)}
  assert {name: obj.layout(name) for name in obj.OBJECTIVES} == want
  assert L() == L(concatenate=True, document_eos=False, targets_eos=True, has_inputs=True)
  import dataclasses  # pylint: disable=g-import-not-at-top
  with pytest.raises(dataclasses.FrozenInstanceError):
    obj.OBJECTIVES["bert"].params = {}  # records are shared: nobody may change one


def test_mean_span_length_is_at_least_one():
  """A span has at least one token: a mean below 1 asks for more spans than noise tokens
  (9 noise tokens of 63 at mean 0.5: 18 spans), which used to yield an empty trailing span.
  Both the per-example and the batched objective refuse it; 1 is the smallest allowed."""
  from lm.data import batched  # pylint: disable=g-import-not-at-top
  for m in (0.5, 0.999, 0, -1, float("nan"), float("inf")):
    with pytest.raises(ValueError, match="mean_noise_span_length must be >= 1"):
      obj.make_objective("span_corruption", vocab_size=V, mean_noise_span_length=m)
    with pytest.raises(ValueError, match="mean_noise_span_length must be >= 1"):
      batched.span_corruption_block(np.zeros((1, 8), np.int32), np.zeros(1, np.uint64),
                              vocab_size=V, mean_noise_span_length=m)
  fn = obj.make_objective("span_corruption", vocab_size=V, mean_noise_span_length=1.0)
  out = fn(np.arange(10, 73, dtype=np.int32), np.random.default_rng(0))
  sentinels = out["targets"][out["targets"] >= V - 100]
  # 9 noise tokens in 9 one-token spans: 9 sentinels on each side, targets 9 + 9 (the
  # converter appends EOS).
  assert len(sentinels) == 9 and len(out["targets"]) == 18
  assert (out["inputs"] >= V - 100).sum() == 9


def test_length_errors_name_the_objective_parameters():
  """check_lengths' errors quote the parameters as given; a probability exactly at the bound
  passes (<=), and full_lm's targets length is required and >= 1."""
  with pytest.raises(ValueError, match=r"objective 'span_corruption' \{'mean_noise_span_length': "
                     r"3.0\} at inputs_length=512 needs targets_length >= 114"):
    obj.check_lengths("span_corruption", inputs_length=512, targets_length=100,
                      mean_noise_span_length=3.0)
  with pytest.raises(ValueError, match=r"objective 'iid_replace_spans' \{'noise_density': 0.5\} "
                     r"at inputs_length=512 needs more than num_extra_ids=100 sentinels"):
    obj.check_lengths("iid_replace_spans", inputs_length=512, targets_length=512,
                      noise_density=0.5)
  # span corruption at 512 needs 28 sentinels: with 27 it overflows with probability 1.
  obj.check_lengths("span_corruption", inputs_length=512, targets_length=114, num_extra_ids=27,
                    max_overflow_probability=1.0)
  with pytest.raises(ValueError, match="probability 1 per example"):
    obj.check_lengths("span_corruption", inputs_length=512, targets_length=114,
                      num_extra_ids=27, max_overflow_probability=0.99)
  assert obj.raw_length("full_lm", inputs_length=0, targets_length=1) == 1
  for bad in (None, 0):
    with pytest.raises(ValueError, match=f"full_lm needs targets_length >= 1, got {bad}"):
      obj.raw_length("full_lm", inputs_length=0, targets_length=bad)
  assert obj.required_targets_length("full_lm", inputs_length=0, targets_length=512) == 512
  with pytest.raises(ValueError, match="pass targets_length"):
    obj.required_targets_length("full_lm", inputs_length=0)
  with pytest.raises(ValueError, match="needs inputs_length >= 2, got 1"):
    obj.required_targets_length("bert", inputs_length=1)


def test_required_extra_ids_is_a_binary_search(monkeypatch):
  """It searches [1, inputs_length + 4] by bisection: at most ceil(log2(inputs_length + 4))
  probability evaluations (each a DP over the segment for the i.i.d. objectives), also when
  the answer is large (304 for iid_replace_spans at 1024 tokens, density 0.5)."""
  import math  # pylint: disable=g-import-not-at-top
  calls = []
  real = obj.sentinel_overflow_probability
  monkeypatch.setattr(obj, "sentinel_overflow_probability",
                      lambda *a, **k: calls.append(k["num_extra_ids"]) or real(*a, **k))
  assert obj.required_extra_ids("iid_replace_spans", inputs_length=1024, noise_density=0.5) == 304
  assert 0 < len(calls) <= math.ceil(math.log2(1024 + 4)), calls
  calls.clear()
  assert obj.required_extra_ids("span_corruption", inputs_length=512) == 28
  assert 0 < len(calls) <= math.ceil(math.log2(512 + 4)), calls


def test_raw_length_needs_two_input_tokens():
  assert obj.raw_length("bert", inputs_length=2) == 1
  with pytest.raises(ValueError, match="needs inputs_length >= 2, got 1"):
    obj.raw_length("bert", inputs_length=1)


def test_iid_length_distributions_match_enumeration():
  # Exact DP vs brute force over all 2^7 masks of a 7-token segment (inputs_length 8).
  d, raw = 0.3, 7
  pmf_t, overflow = {}, 0.0
  for bits in itertools.product([0, 1], repeat=raw):
    m = np.array(bits, bool)
    p = d ** m.sum() * (1 - d) ** (raw - m.sum())
    t = m.sum() + runs(~m)
    pmf_t[t] = pmf_t.get(t, 0.0) + p
    if max(runs(m), runs(~m)) > 2:
      overflow += p
  got = obj.sentinel_overflow_probability("iid_replace_spans", inputs_length=8, num_extra_ids=2,
                                          noise_density=d)
  assert np.isclose(got, overflow)
  cdf = np.cumsum([pmf_t.get(k, 0.0) for k in range(raw + 2)])
  for q in (0.5, 0.9, 0.999):
    want = int(np.searchsorted(cdf, q)) + 1  # + EOS
    assert obj.required_targets_length("iid_replace_spans", inputs_length=8, noise_density=d,
                                       quantile=q) == want


def test_objectives_pickle():
  # grain worker processes receive the objective by pickling.
  import pickle
  tokens = np.arange(3, 700, dtype=np.int32)
  for name, params in (("span_corruption", {}), ("mixture", dict(preset="ul2", inputs_length=512))):
    fn = obj.make_objective(name, vocab_size=V, num_extra_ids=140, **params)
    a, b = fn(tokens, rng(1)), pickle.loads(pickle.dumps(fn))(tokens, rng(1))
    np.testing.assert_array_equal(a["inputs"], b["inputs"])


def test_iid_and_prefix_masks_at_density_and_length_extremes():
  assert noise_lib.iid_noise_mask(5, 1.0, rng()).all() and not noise_lib.iid_noise_mask(5, 0.0, rng()).any()
  assert noise_lib.iid_noise_mask(0, 0.5, rng()).shape == (0,)
  np.testing.assert_array_equal(noise_lib.random_prefix_noise_mask(2, 0.5, rng()), [True, False])
  np.testing.assert_array_equal(noise_lib.random_prefix_noise_mask(1, 0.5, rng()), [False])
  with pytest.raises(ValueError, match="noise_density must be in"):
    noise_lib.iid_noise_mask(5, 1.01, rng())
  with pytest.raises(ValueError, match=r"noise_density must be in \(0, 0.5\]"):
    noise_lib.random_prefix_noise_mask(5, 0.0, rng())


def test_records_params_are_the_functions_keyword_defaults():
  """Each record's params are its function's keyword parameters (the only ones accepted)."""
  import inspect
  for name, record in obj.OBJECTIVES.items():
    sig = inspect.signature(record.fn)
    defaults = {k: p.default for k, p in sig.parameters.items()
                if p.kind is p.KEYWORD_ONLY and k not in ("vocab_size", "num_extra_ids")}
    assert dict(record.params) == defaults, name


def test_a_new_objective_is_one_record(monkeypatch):
  """Registering one record makes every entry point know the objective."""
  def reverse(tokens, rng, *, vocab_size, num_extra_ids=100, keep=1):
    del rng, vocab_size, num_extra_ids
    return {"inputs": tokens[:keep], "targets": tokens[::-1]}

  record = obj.Objective(reverse, dict(keep=1), raw_length=lambda p, li, lt: li - 1,
                         targets_length=lambda p, li, lt, q: li,
                         layout=obj.Layout(concatenate=False))
  monkeypatch.setitem(obj.OBJECTIVES, "reverse", record)
  fn = obj.make_objective("reverse", vocab_size=V, keep=2)
  out = fn(np.arange(3, 8, dtype=np.int32), np.random.default_rng(0))
  assert out["inputs"].tolist() == [3, 4] and out["targets"].tolist() == [7, 6, 5, 4, 3]
  assert obj.layout("reverse").concatenate is False
  assert obj.raw_length("reverse", inputs_length=16) == 15
  assert obj.required_targets_length("reverse", inputs_length=16) == 16
  assert obj.sentinel_overflow_probability("reverse", inputs_length=16) == 0.0
  obj.check_lengths("reverse", inputs_length=16, targets_length=16)
  with pytest.raises(ValueError, match="targets_length >= 16"):
    obj.check_lengths("reverse", inputs_length=16, targets_length=15)
  with pytest.raises(ValueError, match="unknown parameter"):
    obj.make_objective("reverse", vocab_size=V, drop=1)
  mix = obj.make_objective("mixture", vocab_size=V, inputs_length=16, targets_length=16,
                           denoisers=[{"objective": "reverse"}, {"objective": "prefix_lm"}])
  assert [m[3] for m in mix.members] == [15, 15]


def test_noise_helpers_at_their_boundaries():
  """lm/data/noise.py's checks and ids at the edges (mutation survivors)."""
  nl = noise_lib
  nl.check_vocab(5, 1)                        # 1 sentinel + 3 reserved ids + 1 token
  for vocab, extra in ((4, 1), (104, 101), (5, 0)):
    with pytest.raises(ValueError, match="num_extra_ids|must exceed"):
      nl.check_vocab(vocab, extra)
  assert [nl.sentinel_id(32100, k) for k in range(6)] == [32099, 32098, 32097, 32096, 32095,
                                                         32094]
  with pytest.raises(ValueError, match="must be in"):
    nl.check_density(-0.5)
  assert nl.random_spans_counts(2, 0.5, 1.0) == (1, 1)  # length 2: 1 noise token, 1 span
  assert nl.random_spans_counts(1, 0.5, 1.0) == (1, 1)  # length 1 is computed on 2, as T5
  with pytest.raises(ValueError, match="must be 1-D"):
    nl.check_tokens(np.int32(5))
  with pytest.raises(ValueError, match="must be integers"):
    nl.check_tokens(np.array([1.5, 2.0]))
  assert nl.check_tokens(np.array([], np.float32)).dtype == np.int32  # empty: any dtype
  with pytest.raises(ValueError, match=r"must be a block int32\[B, L\], got shape \(3,\)"):
    nl.check_tokens(np.arange(3), block=True)
  with pytest.raises(ValueError, match="must be integers"):
    nl.check_tokens(np.ones((2, 3)), block=True)
  assert nl.check_tokens(np.ones((2, 3), np.int64), block=True).dtype == np.int32
  with pytest.raises(ValueError, match="length must be >= 0, got -1"):
    nl.random_spans_noise_mask(-1, 0.5, 1.0, np.random.default_rng(0))
  for m in (0.5, 0.0, -1.0):
    with pytest.raises(ValueError, match="mean_noise_span_length must be >= 1"):
      nl.random_spans_noise_mask(10, 0.5, m, np.random.default_rng(0))
  tokens = np.array([5, 6, 7, 8], np.int32)
  with pytest.raises(ValueError, match="noise_mask shape"):
    nl.drop_noise_tokens(tokens, np.zeros(5, bool))
  with pytest.raises(ValueError, match="noise_mask shape"):
    nl.drop_noise_tokens(tokens, np.zeros(3, bool))
  # Two noise tokens at the very start form ONE span: one sentinel.
  got = nl.noise_span_to_unique_sentinel(tokens, np.array([1, 1, 0, 1], bool), vocab_size=100)
  assert got.tolist() == [99, 7, 98]
  # Exactly num_extra_ids spans fit; one more does not.
  mask = np.array([1, 0, 1, 0], bool)
  assert nl.noise_span_to_unique_sentinel(tokens, mask, vocab_size=100,
                                          num_extra_ids=2).tolist() == [99, 6, 98, 8]
  with pytest.raises(ValueError, match="2 spans need 2 sentinels but num_extra_ids=1"):
    nl.noise_span_to_unique_sentinel(tokens, mask, vocab_size=100, num_extra_ids=1)


def test_bert_random_tokens_skip_reserved_ids_and_default_rate():
  """BERT-style noise: random tokens come from [3, V) (never pad, eos or unk: T5's
  num_reserved_tokens=3), and by default 10 % of noise tokens become random ones."""
  n, vocab = 20000, 8
  tokens = np.full(n, 5, np.int32)
  out = noise_lib.noise_token_to_random_token_or_sentinel(
      tokens, np.ones(n, bool), np.random.default_rng(0), vocab_size=vocab, random_prob=1.0)
  assert out.min() == 3 and set(np.unique(out)) == {3, 4, 5, 6, 7}
  out = noise_lib.noise_token_to_random_token_or_sentinel(
      tokens, np.ones(n, bool), np.random.default_rng(0), vocab_size=vocab)
  # Random draws hit the mask id 7 too (1/5 of them): the rest of the 10 % differ from it.
  not_mask = np.mean(out != 7)
  assert abs(not_mask - 0.1 * 4 / 5) < 5 * np.sqrt(0.08 * 0.92 / n), not_mask


def test_random_roll_offsets_are_uniform():
  """random_roll rotates the mask by a uniform offset in [0, L): at L = 4, density 0.25 the
  single noise token sits at each position with probability 1/4 (5-sigma bound over 4000)."""
  rng = np.random.default_rng(0)
  n = 4000
  pos = np.array([np.flatnonzero(noise_lib.random_spans_noise_mask(
      4, 0.25, 1.0, rng, random_roll=True))[0] for _ in range(n)])
  freq = np.bincount(pos, minlength=4) / n
  assert np.all(np.abs(freq - 0.25) < 5 * np.sqrt(0.25 * 0.75 / n)), freq



def test_the_registry_is_complete():
  """One record per objective holds both data paths: every objective a config or the UL2
  preset can choose has a record; every batched form takes its per-example form's parameters
  with the same defaults (less the switches it lacks); only deshuffle and the mixture run per
  example only; `batched_form` (the pipeline's question) answers from the record. That each
  batched form gives the reference's features is tested per record in test_batched.py."""
  import inspect  # pylint: disable=g-import-not-at-top
  from configs import t5  # pylint: disable=g-import-not-at-top
  chosen = {name for name, _ in t5.OBJECTIVE_PRESETS.values()}
  chosen |= {m["objective"] for m in mixtures_lib.ul2_denoisers()}
  assert chosen <= set(obj.OBJECTIVES) and len(chosen) == len(obj.OBJECTIVES)

  def keywords(fn):
    return {k: p.default for k, p in inspect.signature(fn).parameters.items()
            if p.kind is p.KEYWORD_ONLY and k != "vocab_size"}
  assert {n for n, r in obj.OBJECTIVES.items() if r.batched is None} == {"deshuffle", "mixture"}
  for name, record in obj.OBJECTIVES.items():
    assert set(record.batched_lacks) <= set(record.params), name
    if record.batched is not None:
      want = {k: v for k, v in keywords(record.fn).items() if k not in record.batched_lacks}
      assert keywords(record.batched) == want, name
      assert obj.batched_form(name, {}) is record.batched
      assert obj.batched_form(name, {}, concatenate=False) is None
    else:
      assert obj.batched_form(name, {}) is None
  assert obj.batched_form("span_corruption", {"random_roll": True}) is None
  assert obj.batched_form("span_corruption", {"random_roll": False}) is not None
  with pytest.raises(ValueError, match="unknown objective 'nope'"):
    obj.batched_form("nope", {})
