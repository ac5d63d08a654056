"""Tests for lm/data/batched.py against the per-example reference (lm/data/objectives.py).

The batched objectives are their own deterministic definition (counter-based streams per
example), so they are checked by (1) the reference's exact invariants on EVERY example of
many seeds, lengths and parameters, (2) exact equality with the reference's inputs/targets
functions applied to the batched noise mask, and with the reference itself wherever the
reference has no randomness, (3) statistics against exact distributions or the reference's
samples, with bounds derived below each test.
"""
import itertools
import math

import numpy as np
import pytest

from lm.data import batched as bt
from lm.data import blocks
from lm.data import converters
from lm.data import noise as noise_lib
from lm.data import objectives as obj

V = 32100


def keys(n, *words, start=0):
  return bt.example_keys(words or (0,), np.arange(start, start + n))


def tokens(b, length, seed=0):
  return np.random.default_rng(seed).integers(3, 20000, (b, length), dtype=np.int32)


def runs(mask):
  mask = np.asarray(mask, bool)
  return int(np.count_nonzero(mask & ~np.concatenate([[False], mask[:-1]])))


def reference_pair(t, mask, extra=1000):
  kw = dict(vocab_size=V, num_extra_ids=extra)
  return (noise_lib.noise_span_to_unique_sentinel(t, mask, **kw),
          noise_lib.nonnoise_span_to_unique_sentinel(t, mask, **kw))


# ----------------------------------------------------------------------------- random numbers


def test_splitmix64_published_vector():
  # splitmix64 from state 0: first outputs 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4 (the
  # reference sequence of Vigna's splitmix64.c); our stream of key 0 is exactly that.
  w = bt.random_words(np.zeros(1, np.uint64), 2)
  assert [int(x) for x in w[0]] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4]
  # counter-based: word j does not depend on the words drawn before it
  np.testing.assert_array_equal(bt.random_words(np.zeros(1, np.uint64), 1, start=1), w[:, 1:])


def test_example_keys_deterministic_distinct_and_checked():
  k = bt.example_keys((7, 3), np.arange(10000))
  assert k.dtype == np.uint64 and np.unique(k).size == 10000
  np.testing.assert_array_equal(k[5:9], bt.example_keys((7, 3), np.arange(5, 9)))
  assert not np.isin(bt.example_keys((7, 4), np.arange(100)), k).any()  # other shard
  assert not np.isin(bt.example_keys((8, 3), np.arange(100)), k).any()  # other seed
  with pytest.raises(ValueError, match="non-negative"):
    bt.example_keys((0,), np.array([-1]))
  with pytest.raises(ValueError, match="1-D"):
    bt.example_keys((0,), np.zeros((2, 2), np.int64))


def test_uniform_ints_cover_range_evenly():
  u = bt.uniform_ints(bt.random_words(keys(1), 60000)[0], 6)
  counts = np.bincount(u, minlength=6)
  assert counts.size == 6  # never 6
  # Binomial(60000, 1/6) per face: sd = 91; 5 sd.
  assert np.all(np.abs(counts - 10000) < 5 * math.sqrt(60000 * (1 / 6) * (5 / 6)))


# ----------------------------------------------------------------------------- span corruption

SPAN_PARAMS = [  # (length, density, mean span length)
    (568, 0.15, 3.0), (141, 0.15, 3.0), (600, 0.15, 64.0), (766, 0.5, 3.0), (300, 0.25, 2.0),
    (10, 0.3, 1.5), (8, 0.5, 2.0), (20, 0.15, 3.0), (190, 0.15, 3.0), (2, 0.15, 3.0),
    (3, 0.15, 3.0), (4, 0.5, 1.0), (57, 0.15, 8.0), (1000, 0.15, 10.0), (33, 0.9, 30.0)]


@pytest.mark.parametrize("length,density,mu", SPAN_PARAMS)
def test_span_corruption_exact_invariants_every_example(length, density, mu):
  b = 300
  t = tokens(b, length, seed=length)
  k = keys(b, length, 1)
  out = bt.span_corruption_block(t, k, vocab_size=V, num_extra_ids=1000, noise_density=density,
                           mean_noise_span_length=mu)
  mask = bt.random_spans_noise_mask_block(length, density, mu, k)
  ref_mask = noise_lib.random_spans_noise_mask(length, density, mu, np.random.default_rng(0))
  num_noise, num_spans = int(ref_mask.sum()), runs(ref_mask)
  assert out["inputs"].shape == (b, length - num_noise + num_spans)
  assert out["targets"].shape == (b, num_noise + num_spans)
  assert out["inputs"].dtype == out["targets"].dtype == np.int32
  sentinels = V - 1 - np.arange(num_spans)
  for i in range(b):
    m = mask[i]
    # the reference's mask invariants: N noise tokens in S spans, S non-noise spans,
    # starts with non-noise, ends with noise
    assert m.sum() == num_noise and runs(m) == num_spans and runs(~m) == num_spans
    assert not m[0] and m[-1]
    # the outputs are exactly the reference's inputs/targets functions on this mask
    ri, rt = reference_pair(t[i], m)
    np.testing.assert_array_equal(out["inputs"][i], ri)
    np.testing.assert_array_equal(out["targets"][i], rt)
    # sentinels unique and in order on both sides; inputs end, targets start with one
    ins, tgs = out["inputs"][i], out["targets"][i]
    np.testing.assert_array_equal(ins[ins >= 31000], sentinels)
    np.testing.assert_array_equal(tgs[tgs >= 31000], sentinels)
    assert ins[-1] == sentinels[-1] and tgs[0] == sentinels[0]
    # rebuild the original: each input sentinel -> the target tokens after it
    pieces = np.split(tgs, np.flatnonzero(tgs >= 31000))[1:]
    fill = {int(p[0]): p[1:] for p in pieces}
    rebuilt = np.concatenate([fill[int(x)] if x >= 31000 else [x] for x in ins])
    np.testing.assert_array_equal(rebuilt, t[i])


def test_span_corruption_full_segment_gives_t5_lengths_with_eos():
  # 568 raw tokens at 512/0.15/3 -> 511 + EOS inputs, 113 + EOS targets (T5's 512/114).
  block = blocks.BlockObjective("span_corruption", vocab_size=V, architecture="encoder_decoder",
                            lengths={"inputs": 512, "targets": 114}, seed_words=(0, 0))
  f = block.features(np.arange(64), tokens(64, 568))
  assert f["encoder_input_tokens"].shape == (64, 512)
  assert f["decoder_target_tokens"].shape == (64, 114)
  assert (f["encoder_input_tokens"][:, -1] == 1).all() and (f["decoder_target_tokens"][:, -1] == 1).all()
  assert ((f["encoder_input_tokens"][:, :-1] >= 3)).all()  # no EOS/pad inside


def _forced(length, density, mu):
  """True if the reference's span mask has no randomness at this (length, density, mu)."""
  if density == 0 or length < 2:
    return True
  n, s = noise_lib.random_spans_counts(length, density, mu)
  if s > length - n:
    return False
  forced = lambda items: s - 1 in (0, items - 1)  # no cut or every gap cut
  return forced(n) and forced(length - n)


def test_span_corruption_equals_reference_wherever_it_is_deterministic():
  checked = 0
  for length, density, mu in itertools.product(range(0, 40), (0.0, 0.15, 0.3, 0.5, 1.0),
                                               (1.0, 3.0, 10.0)):
    if not _forced(length, density, mu):
      continue
    t = tokens(3, length, seed=length)
    try:
      ref = [obj.span_corruption(x, np.random.default_rng(0), vocab_size=V, noise_density=density,
                                 mean_noise_span_length=mu) for x in t]
    except ValueError as e:
      with pytest.raises(ValueError, match=str(e).split(":")[-1].strip()[:30]):
        bt.span_corruption_block(t, keys(3), vocab_size=V, noise_density=density,
                           mean_noise_span_length=mu)
      continue
    out = bt.span_corruption_block(t, keys(3), vocab_size=V, noise_density=density,
                             mean_noise_span_length=mu)
    for i in range(3):
      np.testing.assert_array_equal(out["inputs"][i], ref[i]["inputs"])
      np.testing.assert_array_equal(out["targets"][i], ref[i]["targets"])
    checked += 1
  assert checked > 100


def test_span_corruption_edge_cases_as_the_reference():
  t = np.array([[5, 6, 7]], np.int32)
  x0 = V - 1
  for length, (inputs, targets) in {0: ([], []), 1: ([5], [x0]), 2: ([5, x0], [x0, 6]),
                                    3: ([5, 6, x0], [x0, 7])}.items():
    out = bt.span_corruption_block(t[:, :length], keys(1), vocab_size=V)
    np.testing.assert_array_equal(out["inputs"][0], inputs)
    np.testing.assert_array_equal(out["targets"][0], targets)
  np.testing.assert_array_equal(bt.random_spans_noise_mask_block(20, 0.15, 3.0, keys(2)),
                                [[False] * 17 + [True] * 3] * 2)
  out = bt.span_corruption_block(tokens(2, 10), keys(2), vocab_size=V, noise_density=0.0)
  np.testing.assert_array_equal(out["inputs"], tokens(2, 10))
  np.testing.assert_array_equal(out["targets"], [[x0], [x0]])
  np.testing.assert_array_equal(bt.random_spans_noise_mask_block(10, 1.0, 10.0, keys(1)),
                                [[False] + [True] * 9])
  assert bt.random_spans_noise_mask_block(0, 0.15, 3.0, keys(4)).shape == (4, 0)
  empty = bt.span_corruption_block(np.zeros((0, 568), np.int32), keys(0), vocab_size=V)
  assert empty["inputs"].shape == (0, 511) and empty["targets"].shape == (0, 113)


def test_span_corruption_errors_match_the_reference():
  with pytest.raises(ValueError, match="28 spans need 28 sentinels but num_extra_ids=27"):
    bt.span_corruption_block(tokens(2, 568), keys(2), vocab_size=V, num_extra_ids=27)
  with pytest.raises(ValueError, match="non-noise"):
    bt.span_corruption_block(tokens(2, 10), keys(2), vocab_size=V, noise_density=1.0,
                       mean_noise_span_length=3.0)
  with pytest.raises(ValueError, match="noise_density"):
    bt.span_corruption_block(tokens(2, 10), keys(2), vocab_size=V, noise_density=1.5)
  with pytest.raises(ValueError, match="keys must be uint64"):
    bt.span_corruption_block(tokens(2, 10), np.arange(2), vocab_size=V)
  with pytest.raises(ValueError, match=r"block int32\[B, L\]"):
    bt.span_corruption_block(tokens(1, 10)[0], keys(1), vocab_size=V)


def test_outputs_do_not_depend_on_the_block():
  # An example's output depends only on its tokens and key: one at a time == all at once ==
  # a shuffled block.
  t, k = tokens(40, 568), keys(40, 5, 2)
  whole = bt.span_corruption_block(t, k, vocab_size=V)
  perm = np.random.default_rng(1).permutation(40)
  shuffled = bt.span_corruption_block(t[perm], k[perm], vocab_size=V)
  for i in range(40):
    one = bt.span_corruption_block(t[i:i + 1], k[i:i + 1], vocab_size=V)
    np.testing.assert_array_equal(one["inputs"][0], whole["inputs"][i])
    np.testing.assert_array_equal(one["targets"][0], whole["targets"][i])
  np.testing.assert_array_equal(shuffled["inputs"], whole["inputs"][perm])
  # and different keys give different masks (28 spans: a repeat has negligible probability)
  assert len({r.tobytes() for r in whole["targets"]}) == 40


def test_span_masks_uniform_over_compositions():
  # Length 8, density 0.5, mean 2: 4 noise in 2 spans x 4 non-noise in 2 spans = 3 x 3 masks,
  # each with probability 1/9 (the reference's distribution, T5's). n = 18000 examples:
  # each count ~ Binomial(n, 1/9), sd = 42; 5 sd per mask. Also chi-square with 8 dof:
  # P(chi2_8 > 40) < 1e-5.
  n = 18000
  masks = bt.random_spans_noise_mask_block(8, 0.5, 2.0, keys(n, 11))
  counts = {}
  for m in masks:
    counts[m.tobytes()] = counts.get(m.tobytes(), 0) + 1
  assert len(counts) == 9
  c = np.array(list(counts.values()))
  assert np.all(np.abs(c - n / 9) < 5 * math.sqrt(n * (1 / 9) * (8 / 9)))
  assert ((c - n / 9) ** 2 / (n / 9)).sum() < 40


def test_span_lengths_follow_the_exact_composition_distribution():
  # A uniformly random composition of N into S parts has P(part = l) = C(N-l-1, S-2) /
  # C(N-1, S-1). At 568/0.15/3 (N = 85 noise, 483 non-noise, S = 28), take the first and the
  # last span of each kind of every example (independent across examples) and compare every
  # length's frequency with that pmf: per length, |freq - p| < 5 sqrt(p (1 - p) / n) + 1/n.
  n = 6000
  m, nz = bt.random_spans_lengths(568, 0.15, 3.0, keys(n, 12))
  for total, lengths in ((85, nz), (483, m)):
    for col in (0, -1):
      sample = lengths[:, col]
      l = np.arange(1, total - 26)
      pmf = np.array([math.comb(total - x - 1, 26) / math.comb(total - 1, 27) for x in l])
      assert abs(pmf.sum() - 1) < 1e-12
      freq = np.bincount(sample, minlength=total + 1)[1:total - 26] / n
      assert np.all(np.abs(freq - pmf) < 5 * np.sqrt(pmf * (1 - pmf) / n) + 1 / n)
    assert (lengths.sum(1) == total).all() and (lengths >= 1).all()


def test_noise_positions_match_the_reference_samples():
  # Two-sample check at 141/0.15/3 (21 noise, 7 spans): the noise frequency at each position
  # from n batched masks vs n reference masks. Both are Bernoulli(p_pos) means: the difference
  # has sd sqrt(2 p (1 - p) / n) <= sqrt(0.5 / n); 5 sd per position (141 positions).
  n = 4000
  ours = bt.random_spans_noise_mask_block(141, 0.15, 3.0, keys(n, 13)).mean(0)
  g = np.random.default_rng(13)
  ref = np.mean([noise_lib.random_spans_noise_mask(141, 0.15, 3.0, g) for _ in range(n)], axis=0)
  p = (ours + ref) / 2
  assert np.all(np.abs(ours - ref) < 5 * np.sqrt(2 * p * (1 - p) / n) + 2 / n)
  assert ours[0] == ref[0] == 0 and ours[-1] == ref[-1] == 1
  assert abs(ours.sum() - 21) < 1e-9


# ----------------------------------------------------------------------------- i.i.d. objectives


@pytest.mark.parametrize("density", [0.05, 0.15, 0.5])
def test_iid_replace_spans_and_drop_tokens_every_example(density):
  b, length = 200, 511
  t, k = tokens(b, length, seed=3), keys(b, 3)
  mask = bt.iid_noise_mask_block(length, density, k)
  rs = bt.iid_replace_spans_block(t, k, vocab_size=V, num_extra_ids=1000, noise_density=density)
  dt = bt.drop_tokens_block(t, k, vocab_size=V, noise_density=density)
  for i in range(b):
    ri, rt = reference_pair(t[i], mask[i])
    np.testing.assert_array_equal(rs["inputs"][i], ri)
    np.testing.assert_array_equal(rs["targets"][i], rt)
    np.testing.assert_array_equal(dt["inputs"][i], t[i][~mask[i]])
    np.testing.assert_array_equal(dt["targets"][i], t[i][mask[i]])
    assert rs["inputs"][i].dtype == dt["targets"][i].dtype == np.int32
  # Bernoulli(density) noise: total count over b * length tokens within 5 sd.
  nt = b * length
  assert abs(mask.sum() / nt - density) < 5 * math.sqrt(density * (1 - density) / nt)


def test_iid_replace_spans_sentinel_overflow_raises():
  with pytest.raises(ValueError, match="num_extra_ids=100"):
    bt.iid_replace_spans_block(tokens(4, 511), keys(4), vocab_size=V, noise_density=0.5)


def test_bert_and_mass_every_example_and_ratios():
  b, length = 300, 511
  t, k = tokens(b, length, seed=5), keys(b, 5)
  noise = bt.iid_noise_mask_block(length, 0.15, k)
  be = bt.bert_block(t, k, vocab_size=V)
  ma = bt.mass_block(t, k, vocab_size=V)
  np.testing.assert_array_equal(be["targets"], t)
  np.testing.assert_array_equal(ma["targets"], t)
  np.testing.assert_array_equal(be["inputs"][~noise], t[~noise])  # clean tokens kept
  np.testing.assert_array_equal(ma["inputs"], np.where(noise, V - 1, t))
  assert ((be["inputs"] >= 3) & (be["inputs"] < V)).all()
  corrupted = int(noise.sum())
  random = int((be["inputs"][noise] != V - 1).sum())  # a random draw can hit V-1: p = 1/V
  n = b * length
  assert abs(corrupted / n - 0.15) < 5 * math.sqrt(0.15 * 0.85 / n)
  assert abs(random / corrupted - 0.1) < 5 * math.sqrt(0.1 * 0.9 / corrupted) + 1 / V


def test_prefix_lm_split_is_uniform_in_the_reference_range():
  t, k = np.tile(np.arange(3, 9, dtype=np.int32), (3000, 1)), keys(3000, 7)
  out = bt.prefix_lm_block(t, k, vocab_size=V)
  sizes = np.array([x.size for x in out["inputs"]])
  for i in range(3000):
    np.testing.assert_array_equal(np.concatenate([out["inputs"][i], out["targets"][i]]), t[i])
  # uniform on {1..5}: Binomial(3000, 1/5) per value, 5 sd
  c = np.bincount(sizes, minlength=6)
  assert c[0] == 0 and np.all(np.abs(c[1:] - 600) < 5 * math.sqrt(3000 * 0.2 * 0.8))
  quarter = bt.prefix_lm_block(t[:300], k[:300], vocab_size=V, noise_density=0.25)
  assert {x.size for x in quarter["inputs"]} == {2, 3, 4, 5}  # min_in = round(2.5) = 2
  one = bt.prefix_lm_block(t[:2, :1], k[:2], vocab_size=V)
  assert one["inputs"][0].size == 0 and one["targets"][0].tolist() == [3]


def test_full_lm():
  t = tokens(3, 9)
  out = bt.full_lm_block(t, keys(3), vocab_size=V)
  assert out["inputs"].shape == (3, 0) and out["inputs"].dtype == np.int32
  np.testing.assert_array_equal(out["targets"], t)


# ----------------------------------------------------------------------------- conversion


@pytest.mark.parametrize("architecture", converters.ARCHITECTURES)
@pytest.mark.parametrize("lengths", [None, {"inputs": 6, "targets": 4}, {"inputs": 20, "targets": 20}])
@pytest.mark.parametrize("loss_on_inputs", [False, True])
def test_convert_batch_equals_convert_on_every_row(architecture, lengths, loss_on_inputs):
  if architecture == "encoder_decoder" and loss_on_inputs:
    with pytest.raises(ValueError, match="decoder-only"):
      bt.convert_batch({"inputs": tokens(2, 3), "targets": tokens(2, 3)}, architecture,
                       loss_on_inputs=True)
    return
  for li in (0, 3, 9):
    ex = {"inputs": tokens(4, li, seed=li), "targets": tokens(4, 7, seed=li + 1)}
    got = bt.convert_batch(ex, architecture, lengths=lengths, loss_on_inputs=loss_on_inputs)
    for i in range(4):
      want = converters.convert({"inputs": ex["inputs"][i], "targets": ex["targets"][i]},
                                architecture, lengths=lengths, loss_on_inputs=loss_on_inputs)
      assert list(got) == list(want)
      for key in want:
        np.testing.assert_array_equal(got[key][i], want[key])
        assert got[key].dtype == want[key].dtype


# ----------------------------------------------------------------------------- adapter


def test_block_objective_mixed_lengths_in_order_and_deterministic():
  block = blocks.BlockObjective("span_corruption", vocab_size=V, architecture="encoder_decoder",
                            lengths={"inputs": 512, "targets": 114}, seed_words=(0, 2))
  t = tokens(12, 568)
  chunks = [t[i] if i % 4 else t[i, :100 + i] for i in range(12)]  # mixed lengths
  idx = np.arange(100, 112)
  out = block(idx, chunks)
  assert len(out) == 12
  for i, c in enumerate(chunks):
    ex = bt.span_corruption_block(c[None], bt.example_keys((0, 2), idx[i:i + 1]), vocab_size=V)
    want = converters.convert({"inputs": ex["inputs"][0], "targets": ex["targets"][0]},
                              "encoder_decoder", lengths={"inputs": 512, "targets": 114})
    for key in want:
      np.testing.assert_array_equal(out[i][key], want[key])
  again = block(idx[4:8], chunks[4:8])  # a later block on its own: same examples
  for a, b in zip(again, out[4:8]):
    np.testing.assert_array_equal(a["encoder_input_tokens"], b["encoder_input_tokens"])
  dense = block.features(idx[1:4], t[1:4])
  np.testing.assert_array_equal(dense["decoder_target_tokens"][0], out[1]["decoder_target_tokens"])


@pytest.mark.parametrize("name", [n for n, r in obj.OBJECTIVES.items() if r.batched])
def test_block_objective_every_objective_matches_reference_shapes(name):
  block = blocks.BlockObjective(name, vocab_size=V, architecture="prefix_lm", num_extra_ids=140,
                            lengths={"inputs": 512, "targets": 512}, seed_words=(1,))
  raw = obj.raw_length(name, inputs_length=512, targets_length=512)
  out = block(np.arange(8), list(tokens(8, raw)))
  fn = obj.make_objective(name, vocab_size=V, num_extra_ids=140)
  targets_eos = obj.layout(name).targets_eos
  want = converters.convert(fn(tokens(1, raw)[0], np.random.default_rng(0)), "prefix_lm",
                            lengths={"inputs": 512, "targets": 512}, targets_eos=targets_eos)
  for f, chunk in zip(out, tokens(8, raw)):
    assert set(f) == set(want) and all(f[k].dtype == want[k].dtype for k in want)
    # EOS after the targets, except for full_lm's chunks (EOS at document ends only).
    assert f["decoder_target_tokens"][-1] == (1 if targets_eos else chunk[-1])


def test_block_full_lm_equals_the_reference_layout():
  """full_lm has no randomness: the block path gives the reference pipeline's features
  exactly, targets without an appended EOS (Layout.targets_eos=False), dense and per chunk."""
  assert not obj.layout("full_lm").targets_eos
  for arch, lengths in (("causal", {"inputs": 0, "targets": 64}),
                        ("encoder_decoder", {"inputs": 64, "targets": 64})):
    block = blocks.BlockObjective("full_lm", vocab_size=V, architecture=arch, lengths=lengths)
    chunks = tokens(5, 64)
    fn = obj.make_objective("full_lm", vocab_size=V)
    dense = block.features(np.arange(5), chunks)
    for i, (f, chunk) in enumerate(zip(block(np.arange(5), list(chunks)), chunks)):
      want = converters.convert(fn(chunk, np.random.default_rng(0)), arch, lengths=lengths,
                                targets_eos=False)
      assert set(f) == set(want)
      for k in want:
        np.testing.assert_array_equal(f[k], want[k])
        np.testing.assert_array_equal(dense[k][i], want[k])


def test_block_objective_rejects_bad_configuration():
  with pytest.raises(ValueError, match="no batched version"):
    blocks.BlockObjective("deshuffle", vocab_size=V, architecture="encoder_decoder")
  with pytest.raises(ValueError, match="random_roll"):
    blocks.BlockObjective("span_corruption", vocab_size=V, architecture="encoder_decoder",
                      random_roll=True)
  with pytest.raises(ValueError, match="unknown parameter"):
    blocks.BlockObjective("span_corruption", vocab_size=V, architecture="encoder_decoder", rate=1)
  with pytest.raises(ValueError, match="unknown architecture"):
    blocks.BlockObjective("span_corruption", vocab_size=V, architecture="t5")
  block = blocks.BlockObjective("drop_tokens", vocab_size=V, architecture="encoder_decoder")
  with pytest.raises(ValueError, match="different lengths"):
    block.features(np.arange(2), tokens(2, 10))
  with pytest.raises(ValueError, match="2 indices for 1 chunks"):
    block(np.arange(2), [tokens(1, 10)[0]])


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_span_corruption_large_sweep(seed):
  g = np.random.default_rng(seed)
  for _ in range(40):
    length = int(g.integers(2, 1200))
    density = float(g.choice([0.05, 0.15, 0.25, 0.5, 0.8]))
    mu = float(g.choice([1.0, 2.0, 3.0, 5.0, 8.0, 64.0]))
    num_noise, num_spans = noise_lib.random_spans_counts(length, density, mu)
    t, k = tokens(50, length, seed=length), keys(50, seed, length)
    if num_spans > length - num_noise:
      with pytest.raises(ValueError, match="non-noise"):
        bt.span_corruption_block(t, k, vocab_size=V, num_extra_ids=1000, noise_density=density,
                           mean_noise_span_length=mu)
      continue
    out = bt.span_corruption_block(t, k, vocab_size=V, num_extra_ids=1000, noise_density=density,
                             mean_noise_span_length=mu)
    mask = bt.random_spans_noise_mask_block(length, density, mu, k)
    for i in range(50):
      m = mask[i]
      assert m.sum() == num_noise and runs(m) == num_spans == runs(~m) and m[-1] and not m[0]
      ri, rt = reference_pair(t[i], m)
      np.testing.assert_array_equal(out["inputs"][i], ri)
      np.testing.assert_array_equal(out["targets"][i], rt)


# ----------------------------------------------------------------------------- chunks and rows


def test_split_documents_is_concatenate_then_cut():
  docs = [np.arange(5), np.arange(100, 103), np.zeros(0, np.int64), np.arange(200, 209)]
  stream = np.concatenate(docs).astype(np.int32)
  chunks, rest = blocks.split_documents(docs, 4)
  np.testing.assert_array_equal(chunks, stream[:16].reshape(4, 4))
  np.testing.assert_array_equal(rest, stream[16:])
  assert chunks.dtype == rest.dtype == np.int32
  # carrying the rest over gives the same chunks as one call over everything
  first, carry = blocks.split_documents(docs[:2], 3)
  second, rest2 = blocks.split_documents(docs[2:], 3, carry)
  np.testing.assert_array_equal(np.concatenate([first, second]).ravel(), stream[:15])
  np.testing.assert_array_equal(rest2, stream[15:])
  assert blocks.split_documents([], 4)[0].shape == (0, 4)
  with pytest.raises(ValueError, match="raw_length"):
    blocks.split_documents(docs, 0)


@pytest.mark.parametrize("architecture,lengths,n_in,n_tg,b", [
    ("encoder_decoder", {"encoder": 512, "decoder": 114}, 511, 113, 5),   # one per row
    ("encoder_decoder", {"encoder": 20, "decoder": 12}, 4, 3, 11),        # k = 3, last row partial
    ("prefix_lm", {"decoder": 40}, 5, 6, 7),                              # k = 3
    ("causal", {"decoder": 13}, 0, 12, 4),                                # exactly full
])
def test_pack_dense_equals_first_fit_reference(architecture, lengths, n_in, n_tg, b):
  ex = {"inputs": tokens(b, n_in, seed=1), "targets": tokens(b, n_tg, seed=2)}
  feats = bt.convert_batch(ex, architecture)
  got = blocks.pack_dense(feats, lengths)
  want = packing_ref([{k: v[i] for k, v in feats.items()} for i in range(b)], lengths)
  assert set(got) == set(want[0]) and len(next(iter(got.values()))) == len(want)
  for r, row in enumerate(want):
    for key, value in row.items():
      np.testing.assert_array_equal(got[key][r], value)
      assert got[key].dtype == value.dtype


def packing_ref(examples, lengths):
  from lm.data import packing  # pylint: disable=g-import-not-at-top
  return packing.pack_examples(examples, lengths)


def test_pack_dense_rejects_bad_input():
  feats = bt.convert_batch({"inputs": tokens(2, 30), "targets": tokens(2, 3)}, "encoder_decoder")
  with pytest.raises(ValueError, match="more than the row length"):
    blocks.pack_dense(feats, {"encoder": 16, "decoder": 8})
  with pytest.raises(ValueError, match="no row length"):
    blocks.pack_dense(feats, {"decoder": 8})


# ----------------------------------------------------------------------------- grain stage


def _documents(seed=0, n=120):
  import grain  # pylint: disable=g-import-not-at-top
  g = np.random.default_rng(seed)
  docs = [g.integers(3, 1000, int(k), dtype=np.int32) for k in g.integers(0, 40, n)]
  return docs, grain.MapDataset.source(docs).map(lambda t: {"tokens": t})


def test_block_examples_cuts_chunks_as_concat_then_split():
  import grain  # pylint: disable=g-import-not-at-top
  from grain import experimental as grain_experimental  # pylint: disable=g-import-not-at-top
  docs, ds = _documents()
  it = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
  it = it.filter(lambda x: x["tokens"].size > 0)
  want = []
  for c in grain_experimental.ConcatThenSplitIterDataset(it, length_struct={"tokens": 17}):
    t = c["tokens"]
    if "tokens_segment_ids" in c:  # the padded last chunk
      t = t[:np.count_nonzero(c["tokens_segment_ids"])]
    want.append(t)

  class Chunks:  # an "objective" that returns the chunks themselves
    seed_words = ()

    def __call__(self, indices, chunks):
      return [{"index": int(i), "tokens": c} for i, c in zip(indices, chunks)]

  got = list(blocks.BlockExamplesIterDataset(ds, 17, Chunks(), block_size=5))
  assert [g["index"] for g in got] == list(range(len(want)))
  assert len(got) == len(want) and len(want[-1]) < 17
  for g, w in zip(got, want):
    np.testing.assert_array_equal(g["tokens"], w)


@pytest.mark.parametrize("block_size", [1, 3, 8])
def test_block_examples_resume_and_block_size_independence(block_size):
  import json  # pylint: disable=g-import-not-at-top
  _, ds = _documents(seed=1)
  obj_fn = blocks.BlockObjective("span_corruption", vocab_size=V, architecture="encoder_decoder",
                             seed_words=(4, 1))
  make = lambda b: blocks.BlockExamplesIterDataset(ds, 30, obj_fn, block_size=b)
  reference = [e["encoder_input_tokens"] for e in make(4)]
  full = [e["encoder_input_tokens"] for e in make(block_size)]
  assert len(full) == len(reference) > 40
  for a, b in zip(full, reference):  # results do not depend on the block size
    np.testing.assert_array_equal(a, b)
  for cut in sorted({0, 1, block_size - 1, block_size, block_size + 1, 17, len(full) - 1,
                     len(full)}):
    it = iter(make(block_size))
    for _ in range(cut):
      next(it)
    state = json.loads(json.dumps(it.get_state()))
    resumed = iter(make(block_size))
    resumed.set_state(state)
    rest = [e["encoder_input_tokens"] for e in resumed]
    assert len(rest) == len(full) - cut
    for a, b in zip(rest, full[cut:]):
      np.testing.assert_array_equal(a, b)


def test_bernoulli_prefix_property_and_extremes():
  k = keys(300, 9)
  np.testing.assert_array_equal(bt.bernoulli(k, 5, 0.3), bt.bernoulli(k, 8, 0.3)[:, :5])
  assert bt.bernoulli(k, 7, 1.0).all() and not bt.bernoulli(k, 7, 0.0).any()
  draws = bt.bernoulli(k, 2001, 0.3)
  n = draws.size  # Binomial(n, 0.3): 5 sd
  assert abs(draws.mean() - 0.3) < 5 * math.sqrt(0.3 * 0.7 / n)


def test_block_examples_packed_rows_equal_first_fit_of_each_block():
  from lm.data import packing  # pylint: disable=g-import-not-at-top
  _, ds = _documents(seed=2, n=300)
  lengths = {"decoder": 70}
  for name in ("span_corruption", "prefix_lm"):
    fn = blocks.BlockObjective(name, vocab_size=V, architecture="causal", seed_words=(1,),
                           lengths={"inputs": 40, "targets": 30})
    raw = 30
    examples = list(blocks.BlockExamplesIterDataset(ds, raw, fn, block_size=6))
    rows = list(blocks.BlockExamplesIterDataset(ds, raw, fn, block_size=6, pack_lengths=lengths))
    want = []
    for start in range(0, len(examples), 6):  # first fit within each block of 6 chunks
      want += packing.pack_examples(examples[start:start + 6], lengths)
    assert len(rows) == len(want)
    for got, ref in zip(rows, want):
      assert set(got) == set(ref)
      for key in ref:
        np.testing.assert_array_equal(got[key], ref[key])
    for cut in (0, 1, 5, len(rows) - 1):  # resuming a packed stream mid-block
      it = iter(blocks.BlockExamplesIterDataset(ds, raw, fn, block_size=6, pack_lengths=lengths))
      for _ in range(cut):
        next(it)
      resumed = iter(blocks.BlockExamplesIterDataset(ds, raw, fn, block_size=6,
                                                 pack_lengths=lengths))
      resumed.set_state(it.get_state())
      rest = list(resumed)
      assert len(rest) == len(rows) - cut
      for a, b in zip(rest, rows[cut:]):
        np.testing.assert_array_equal(a["decoder_target_tokens"], b["decoder_target_tokens"])


@pytest.mark.parametrize("architecture,lengths", [
    ("encoder_decoder", {"encoder": 24, "decoder": 10}), ("prefix_lm", {"decoder": 30}),
    ("causal", {"decoder": 17})])
def test_first_fit_pack_equals_pack_examples(architecture, lengths):
  from lm.data import packing  # pylint: disable=g-import-not-at-top
  g = np.random.default_rng(3)
  examples = []
  for i in range(60):
    li, lt = (int(x) for x in g.integers(1, 9, 2))
    examples.append(converters.convert({"inputs": tokens(1, li, seed=i)[0],
                                        "targets": tokens(1, lt, seed=i + 100)[0]},
                                       architecture))
  want = packing.pack_examples(examples, lengths)
  got = blocks.first_fit_pack(examples, lengths)
  assert len(next(iter(got.values()))) == len(want) < 60
  for r, row in enumerate(want):
    assert set(got) == set(row)
    for key, value in row.items():
      np.testing.assert_array_equal(got[key][r], value)
      assert got[key].dtype == value.dtype
  with pytest.raises(ValueError, match="more than the row length"):
    blocks.first_fit_pack(examples, {k: 2 for k in lengths})
  with pytest.raises(ValueError, match="expected"):
    blocks.first_fit_pack([examples[0], {"decoder_target_tokens": np.ones(2, np.int32)}], lengths)
