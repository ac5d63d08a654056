"""lm.generation: greedy / sampling / beam search on constructed distributions and on the model."""
import itertools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lm import generation
from lm.model.transformer import Transformer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "model"))
from model_helpers import random_params, tiny  # noqa: E402


# ---------------------------------------------------------------------------------------
# Constructed distributions: a logits table indexed by (example, prefix code).

def table_model(table):
  """tokens_to_logits over float32[E, C, V] logits: row state = (example, prefix code).

  A prefix t_1..t_n has code sum (t_i + 1) (V + 1)^(n - i) (bijective base V + 1), so every
  prefix of every length has its own distribution.
  """
  table = jnp.asarray(table, jnp.float32)
  base = table.shape[-1] + 1

  def t2l(tokens, state, step):
    del step
    code = state["code"] * base + tokens + 1
    return table[state["example"], code], {"code": code, "example": state["example"]}

  e = table.shape[0]
  first = table[:, 0]
  state = {"code": jnp.zeros((e,), jnp.int32), "example": jnp.arange(e, dtype=jnp.int32)}
  return first, state, t2l


def prefix_code(prefix, vocab):
  code = 0
  for t in prefix:
    code = code * (vocab + 1) + t + 1
  return code


def exhaustive(table, example, length, alpha):
  """All finished sequences (ending in EOS, no EOS before) of at most ``length`` tokens,
  scored log p / ((5 + len) / 6) ** alpha, best first."""
  vocab = table.shape[-1]
  logp = np.asarray(jax.nn.log_softmax(jnp.asarray(table[example], jnp.float32)))
  out = []
  for n in range(1, length + 1):
    for body in itertools.product([t for t in range(vocab) if t != 1], repeat=n - 1):
      seq = list(body) + [1]
      lp = sum(logp[prefix_code(seq[:i], vocab), seq[i]] for i in range(n))
      out.append((lp / ((5 + n) / 6) ** alpha, seq))
  return sorted(out, key=lambda x: -x[0])


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_search_equals_exhaustive_search(alpha):
  vocab, length = 3, 4
  rng = np.random.default_rng(0)
  table = 1.5 * rng.normal(size=(3, (vocab + 1) ** length, vocab)).astype(np.float32)
  # Large enough that nothing is pruned: 2K >= (V-1)^(L-1) * V live candidates.
  k = 12
  first, state, t2l = table_model(table)
  seqs, scores = jax.jit(lambda f, s: generation.beam_search(
      f, s, t2l, beam_size=k, max_decode_length=length, alpha=alpha))(first, state)
  seqs, scores = np.asarray(seqs), np.asarray(scores)
  assert seqs.shape == (3, k, length) and scores.shape == (3, k)
  for e in range(3):
    expected = exhaustive(table, e, length, alpha)[:k]
    for j, (score, seq) in enumerate(expected):
      np.testing.assert_allclose(scores[e, j], score, rtol=1e-5, atol=1e-5)
      assert list(seqs[e, j]) == seq + [0] * (length - len(seq)), (e, j)


def numpy_greedy(table, example, length):
  """Greedy decoding of one example of a table model in NumPy: (tokens, sum of log p)."""
  vocab = table.shape[-1]
  logp = np.asarray(jax.nn.log_softmax(jnp.asarray(table[example], jnp.float32)), np.float64)
  out, total = [], 0.0
  while len(out) < length and (not out or out[-1] != 1):
    row = logp[prefix_code(out, vocab)]
    out.append(int(np.argmax(row)))
    total += row[out[-1]]
  return out + [0] * (length - len(out)), total


def test_greedy_and_sampled_tokens_and_log_probs_by_hand():
  """Greedy's tokens and summed log-probabilities against a NumPy greedy decode (rows that
  end early add nothing after EOS); sampling's score is the model's log p of the drawn
  tokens (before temperature); max_decode_length 1 is the first token alone."""
  vocab, length = 4, 4
  rng = np.random.default_rng(5)
  table = rng.normal(size=(3, (vocab + 1) ** length, vocab)).astype(np.float32)
  table[0, 0, 1] = 9.0  # example 0 ends at once, example 1 after two tokens
  table[1, prefix_code([2], vocab), 1] = 9.0
  table[1, 0, 2] = 9.0
  table[2, :, 1] = -9.0  # example 2 never ends
  first, state, t2l = table_model(table)
  def run(search, m, **kw):  # one compile per call instead of many eager ops
    return jax.jit(lambda f, s: search(f, s, t2l, max_decode_length=m, **kw))(first, state)

  tokens, scores = run(generation.greedy_search, length)
  logp = np.asarray(jax.nn.log_softmax(jnp.asarray(table)), np.float64)
  for e in range(3):
    want, want_lp = numpy_greedy(table, e, length)
    assert list(np.asarray(tokens)[e]) == want, e
    np.testing.assert_allclose(np.asarray(scores)[e], want_lp, rtol=1e-5, atol=1e-5)
  assert list(np.asarray(tokens)[1]) == [2, 1, 0, 0]
  one, one_lp = run(generation.greedy_search, 1)
  np.testing.assert_array_equal(np.asarray(one), np.asarray(tokens)[:, :1])
  np.testing.assert_allclose(np.asarray(one_lp), [logp[e, 0, t] for e, t in enumerate(np.asarray(one)[:, 0])],
                             rtol=1e-5, atol=1e-6)
  # Temperature 0 is greedy; temperature 1 samples (64 draws from 4 tokens: not all the argmax).
  zero = run(generation.temperature_sample, length, rng=jax.random.PRNGKey(1),
             config=generation.SamplingConfig(temperature=0.0))
  np.testing.assert_array_equal(np.asarray(zero[0]), np.asarray(tokens))
  np.testing.assert_array_equal(np.asarray(zero[1]), np.asarray(scores))
  flat = jnp.zeros((64, vocab))
  drawn, _ = jax.jit(lambda f: generation.temperature_sample(
      f, {}, lambda t, s, i: (jnp.zeros((64, vocab)), s), rng=jax.random.PRNGKey(2),
      max_decode_length=1))(flat)
  assert len(set(np.asarray(drawn)[:, 0].tolist())) > 1
  sampled, sampled_lp = run(generation.temperature_sample, length, rng=jax.random.PRNGKey(1),
                            config=generation.SamplingConfig(temperature=2.0))
  for e, seq in enumerate(np.asarray(sampled).tolist()):
    n = seq.index(1) + 1 if 1 in seq else length
    assert all(t == 0 for t in seq[n:])
    want = sum(logp[e, prefix_code(seq[:i], vocab), seq[i]] for i in range(n))
    np.testing.assert_allclose(np.asarray(sampled_lp)[e], want, rtol=1e-5, atol=1e-5)


def test_search_arguments_are_checked():
  first, state, t2l = table_model(np.zeros((1, 25, 4), np.float32))
  for bad in (0, -1, 1.5, 2.0):
    with pytest.raises(ValueError, match="beam_size must be a positive int"):
      generation.beam_search(first, state, t2l, beam_size=bad, max_decode_length=2)
  with pytest.raises(ValueError, match="alpha >= 0"):
    generation.beam_search(first, state, t2l, beam_size=1, max_decode_length=2, alpha=-0.5)
  with pytest.raises(ValueError, match="unknown length_penalty 'gnmt'"):
    generation.beam_search(first, state, t2l, beam_size=1, max_decode_length=2, length_penalty="gnmt")
  # One beam, and HF's penalty with a negative alpha (it favours short sequences), are fine.
  seqs, _ = jax.jit(lambda f, s: generation.beam_search(f, s, t2l, beam_size=1, max_decode_length=2))(
      first, state)
  assert np.asarray(seqs).shape == (1, 1, 2)
  seqs, _ = jax.jit(lambda f, s: generation.beam_search(f, s, t2l, beam_size=3, max_decode_length=2,
                                                      alpha=-0.5, length_penalty="hf"))(first, state)
  assert np.asarray(seqs).shape == (1, 3, 2)
  with pytest.raises(ValueError, match="top_k"):
    generation.SamplingConfig(top_k=-1)
  with pytest.raises(ValueError, match="temperature must be finite"):
    generation.SamplingConfig(temperature=float("inf"))
  assert generation.SamplingConfig() == generation.SamplingConfig(temperature=1.0, top_k=0, top_p=1.0)
  assert generation.SamplingConfig(top_p=0.5).top_p == 0.5
  for bad in (1.5, -0.5):
    with pytest.raises(ValueError, match="top_p"):
      generation.SamplingConfig(top_p=bad)
  # A length_penalty name built at run time (a flag's value) is the same name.
  with pytest.raises(ValueError, match="alpha >= 0"):
    generation.beam_search(first, state, t2l, beam_size=1, max_decode_length=2, alpha=-0.5,
                         length_penalty="".join(["t", "5"]))


def test_beam_search_an_unlikely_eos_still_finishes():
  """Only extensions of the empty initial beams (log p about NEG_INF = -1e7) are invalid: an
  EOS of log p -4e6 is a finished sequence, and beats the live beam at the end."""
  first = jnp.asarray([[0.0, -4e6]])
  seqs, scores = jax.jit(lambda f: generation.beam_search(
      f, {}, lambda t, s, i: (jnp.zeros((1, 2)), s), beam_size=1, max_decode_length=1))(first)
  np.testing.assert_array_equal(np.asarray(seqs), [[[1]]])
  np.testing.assert_allclose(np.asarray(scores), [[-4e6]], rtol=1e-6)
  # t5x's strict bound: a log p of exactly NEG_INF / 2 counts as a dead beam's extension.
  seqs, scores = jax.jit(lambda f: generation.beam_search(
      f, {}, lambda t, s, i: (jnp.zeros((1, 2)), s), beam_size=1, max_decode_length=1))(
          jnp.asarray([[0.0, generation.NEG_INF / 2]]))
  np.testing.assert_array_equal(np.asarray(seqs), [[[0]]])
  np.testing.assert_array_equal(np.asarray(scores), [[0.0]])


def test_t5_beam_search_stops_only_when_no_live_beam_can_win():
  """T5's stopping bound: a live beam's best final score is its log p / penalty(M) (alpha
  2: (8/6)^2 at M = 3). After step 0 the finished [EOS] scores log .45 = -.80 and the live
  [0] at most log .55 / 1.78 = -.34, so the search goes on and finds [0, EOS]:
  log(.55 * .99) / (7/6)^2 = -.45."""
  table = np.zeros((1, 27, 2), np.float32)
  table[0, 0] = np.log([0.55, 0.45])
  table[0, prefix_code([0], 2)] = np.log([0.01, 0.99])
  first, state, t2l = table_model(table)
  seqs, scores = jax.jit(lambda f, s: generation.beam_search(
      f, s, t2l, beam_size=1, max_decode_length=3, alpha=2.0))(first, state)
  np.testing.assert_array_equal(np.asarray(seqs)[0], [[0, 1, 0]])
  np.testing.assert_allclose(np.asarray(scores)[0], [np.log(0.55 * 0.99) / (7 / 6) ** 2], rtol=1e-5)
  # A live beam far behind (log p -13.8 after two uniform steps over 1000 tokens, against the
  # finished [0, EOS] at -6.9 / (7/6)^2 = -5.07) can still win: -13.8 / penalty(7) = -3.45.
  v, m = 1000, 7
  by_position = np.zeros((m, v), np.float32)
  by_position[[0, 3, 4, 5], 0] = 30.0  # token 0, almost surely
  by_position[6, 1] = 30.0  # then EOS
  logp = np.asarray(jax.nn.log_softmax(jnp.asarray(by_position)), np.float64)
  seqs, scores = jax.jit(lambda f: generation.beam_search(
      f, {}, lambda t, s, i: (jnp.asarray(by_position)[i + 1][None], s), beam_size=1,
      max_decode_length=m, alpha=2.0))(jnp.asarray(by_position[:1]))
  np.testing.assert_array_equal(np.asarray(seqs)[0], [[0, 0, 0, 0, 0, 0, 1]])
  want = (logp[:6, 0].sum() + logp[6, 1]) / ((5 + m) / 6) ** 2
  np.testing.assert_allclose(np.asarray(scores)[0], [want], rtol=1e-5)


def test_hf_beam_search_finishes_only_the_top_beam_size_candidates():
  """Transformers' rule: an EOS ranked below the best beam_size candidates of a step is
  dropped. EOS ids 1 and 3; step 0: 0 (.38), 2 (.3), then the EOS 3 (.2, rank 2) and 1 (.12,
  rank 3): neither finishes; step 1 (the last): the two best, [0, 0] (.19) and [0, 2] (.114),
  finish (alpha 0: scores are log p)."""
  table = np.full((1, 25, 4), np.log(0.25), np.float32)
  table[0, 0] = np.log([0.38, 0.12, 0.3, 0.2])
  table[0, prefix_code([0], 4)] = np.log([0.5, 0.1, 0.3, 0.1])
  first, state, t2l = table_model(table)
  seqs, scores = jax.jit(lambda f, s: generation.beam_search(
      f, s, t2l, beam_size=2, max_decode_length=2, alpha=0.0, eos_id=(1, 3),
      length_penalty="".join(["h", "f"])))(first, state)  # a name built at run time
  np.testing.assert_array_equal(np.asarray(seqs)[0], [[0, 0], [0, 2]])
  np.testing.assert_allclose(np.asarray(scores)[0], np.log([0.19, 0.114]), rtol=1e-5)


def test_beam_search_leaves_unfilled_finished_slots_empty():
  """Three beams, two tokens (0 and EOS), two steps: only [EOS] and [0, EOS] can finish, so
  the third slot is empty (score NEG_INF = -1e7, tokens 0), not an extension of one of the
  dead initial beams (whose EOS scores, about -1e7 / 1.097, would beat it)."""
  table = np.zeros((1, 9, 2), np.float32)
  table[0, 0] = np.log([0.6, 0.4])
  table[0, prefix_code([0], 2)] = np.log([0.7, 0.3])
  first, state, t2l = table_model(table)
  seqs, scores = jax.jit(lambda f, s: generation.beam_search(
      f, s, t2l, beam_size=3, max_decode_length=2))(first, state)  # alpha 0.6 by default
  np.testing.assert_array_equal(np.asarray(seqs)[0], [[1, 0], [0, 1], [0, 0]])
  np.testing.assert_allclose(np.asarray(scores)[0, :2],
                             [np.log(0.4), np.log(0.6 * 0.3) / (7 / 6) ** 0.6], rtol=1e-6)
  assert np.asarray(scores)[0, 2] == np.float32(-1e7)


def test_gather_rows_indexes_every_leaf_with_rows():
  state = {"a": jnp.arange(3), "b": jnp.arange(12).reshape(3, 2, 2), "step": jnp.int32(7)}
  out = generation.gather_rows(state, jnp.asarray([2, 2, 0, 1]))
  np.testing.assert_array_equal(out["a"], [2, 2, 0, 1])
  np.testing.assert_array_equal(out["b"], np.arange(12).reshape(3, 2, 2)[[2, 2, 0, 1]])
  assert int(out["step"]) == 7


def test_beam_search_t5_stops_early_and_hf_keeps_its_own_rules():
  """EOS is almost certain: T5's rule stops after one step, not after max_decode_length."""
  vocab, length = 4, 6
  table = np.zeros((1, (vocab + 1) ** length, vocab), np.float32)
  table[..., 1] = 8.0  # EOS
  first, state, t2l = table_model(table)
  calls = []

  def counting(tokens, state, step):
    jax.debug.callback(lambda s: calls.append(int(s)), step)
    return t2l(tokens, state, step)

  seqs, _ = generation.beam_search(first, state, counting, beam_size=2, max_decode_length=length, alpha=0.6)
  jax.effects_barrier()
  assert list(np.asarray(seqs)[0, 0]) == [1, 0, 0, 0, 0, 0]
  # Step 0 finishes [EOS]; the second finished slot needs a step-1 EOS; then the best live
  # log-probability (about -16 after two non-EOS tokens) cannot beat it: stop.
  assert len(calls) == 1, calls


def test_beam_search_beats_greedy_on_a_constructed_case():
  """Greedy: 2 (p=.6), 0 (.55), EOS (.5) = .165; best: 3 (.4), EOS (.9) = .36."""
  vocab, length = 4, 3
  table = np.full((1, (vocab + 1) ** length, vocab), -30.0, np.float32)
  table[0, 0, 2], table[0, 0, 3] = np.log(0.6), np.log(0.4)
  after2 = prefix_code([2], vocab)
  table[0, after2, 1], table[0, after2, 0] = np.log(0.45), np.log(0.55)
  table[0, prefix_code([2, 0], vocab), 1:] = np.log([0.5, 0.2, 0.3])
  after3 = prefix_code([3], vocab)
  table[0, after3, 1], table[0, after3, 0] = np.log(0.9), np.log(0.1)
  first, state, t2l = table_model(table)
  greedy, greedy_lp = generation.greedy_search(first, state, t2l, max_decode_length=length)
  beam, beam_score = generation.beam_search(first, state, t2l, beam_size=2, max_decode_length=length, alpha=0.0)
  assert list(np.asarray(greedy)[0]) == [2, 0, 1]
  assert list(np.asarray(beam)[0, 0]) == [3, 1, 0]
  np.testing.assert_allclose(np.asarray(beam_score)[0, 0], np.log(0.36), rtol=1e-4)
  assert np.asarray(beam_score)[0, 0] > np.asarray(greedy_lp)[0]


def test_hf_length_penalty_scores_and_early_stopping():
  """HF: score log p / len ** alpha; an example stops once beam_size sequences finished."""
  vocab, length = 4, 5
  rng = np.random.default_rng(3)
  table = rng.normal(size=(2, (vocab + 1) ** length, vocab)).astype(np.float32)
  first, state, t2l = table_model(table)
  seqs, scores = generation.beam_search(first, state, t2l, beam_size=2, max_decode_length=length,
                                      alpha=1.3, length_penalty="hf")
  seqs, scores = np.asarray(seqs), np.asarray(scores)
  logp = np.asarray(jax.nn.log_softmax(jnp.asarray(table)))
  for e in range(2):
    assert scores[e, 0] >= scores[e, 1]
    for j in range(2):
      seq = [t for t in seqs[e, j]]
      n = seq.index(1) + 1 if 1 in seq else length
      assert all(t == 0 for t in seq[n:])
      lp = sum(logp[e, prefix_code(seq[:i], vocab), seq[i]] for i in range(n))
      np.testing.assert_allclose(scores[e, j], lp / n ** 1.3, rtol=1e-5)


def test_per_example_eos_in_a_batch():
  """Row r puts all its mass on EOS at step r: later slots stay 0 in every method."""
  length = 5
  v = 6

  def t2l(tokens, state, step):
    row = state["row"]
    logits = jnp.where((jnp.arange(v)[None] == 1) & (row[:, None] == step + 1), 20.0,
                       jnp.where(jnp.arange(v)[None] == 4, 10.0, 0.0))
    return logits, state

  rows = jnp.arange(4, dtype=jnp.int32)
  first = jnp.where((jnp.arange(v)[None] == 1) & (rows[:, None] == 0), 20.0,
                    jnp.where(jnp.arange(v)[None] == 4, 10.0, 0.0))
  state = {"row": rows}
  expected = np.array([[1, 0, 0, 0, 0], [4, 1, 0, 0, 0], [4, 4, 1, 0, 0], [4, 4, 4, 1, 0]])
  greedy, _ = generation.greedy_search(first, state, t2l, max_decode_length=length)
  np.testing.assert_array_equal(np.asarray(greedy), expected)
  sampled, _ = generation.temperature_sample(first, state, t2l, rng=jax.random.PRNGKey(0),
                                           max_decode_length=length,
                                           config=generation.SamplingConfig(top_k=1))
  np.testing.assert_array_equal(np.asarray(sampled), expected)
  beam, _ = generation.beam_search(first, state, t2l, beam_size=2, max_decode_length=length)
  np.testing.assert_array_equal(np.asarray(beam)[:, 0], expected)
  # Rows that never see EOS run to max_decode_length and are cut there.
  long, _ = generation.greedy_search(first, state, t2l, max_decode_length=3)
  np.testing.assert_array_equal(np.asarray(long), [[1, 0, 0], [4, 1, 0], [4, 4, 1], [4, 4, 4]])


def test_sampling_follows_the_distribution_and_is_reproducible():
  probs = np.array([0.05, 0.1, 0.15, 0.3, 0.4])
  n = 4000
  first = jnp.broadcast_to(jnp.log(jnp.asarray(probs, jnp.float32)), (n, 5))

  def t2l(tokens, state, step):
    return jnp.zeros((tokens.shape[0], 5)), state

  def sample(config, seed=0, row_ids=None):
    toks, _ = jax.jit(lambda f, r: generation.temperature_sample(
        f, {}, t2l, rng=r, max_decode_length=1, config=config, row_ids=row_ids))(
            first, jax.random.PRNGKey(seed))
    return np.asarray(toks)[:, 0]

  def chi2(tokens, expected_probs):
    counts = np.bincount(tokens, minlength=5)
    keep = expected_probs > 0
    assert counts[~keep].sum() == 0, counts
    e = n * expected_probs[keep]
    return float(np.sum((counts[keep] - e) ** 2 / e))

  a = sample(generation.SamplingConfig())
  np.testing.assert_array_equal(a, sample(generation.SamplingConfig()))  # same seed, same draws
  assert (a != sample(generation.SamplingConfig(), seed=1)).any()
  # 4 degrees of freedom: P(chi2 > 18.5) = 0.001.
  assert chi2(a, probs) < 18.5
  # Temperature 2: probs ** (1/2), renormalised.
  t = np.sqrt(probs) / np.sqrt(probs).sum()
  assert chi2(sample(generation.SamplingConfig(temperature=2.0)), t) < 18.5
  # top_k=2 keeps tokens 3 and 4 (1 degree of freedom: P(chi2 > 10.8) = 0.001).
  assert chi2(sample(generation.SamplingConfig(top_k=2)), np.array([0, 0, 0, 3 / 7, 4 / 7])) < 10.8
  # top_p=0.6: 0.4 < 0.6, then 0.4 + 0.3 >= 0.6 -> {4, 3}; top_p=0.75 adds token 2.
  assert chi2(sample(generation.SamplingConfig(top_p=0.6)), np.array([0, 0, 0, 3 / 7, 4 / 7])) < 10.8
  assert chi2(sample(generation.SamplingConfig(top_p=0.75)),
              np.array([0, 0, 0.15, 0.3, 0.4]) / 0.85) < 13.8
  # A row's draw depends on its row id, not on the batch it is in.
  ids = jnp.arange(n, dtype=jnp.int32)[::-1]
  np.testing.assert_array_equal(sample(generation.SamplingConfig(), row_ids=ids)[::-1], a)


def test_sampling_config_rejects_bad_values():
  with pytest.raises(ValueError, match="temperature"):
    generation.SamplingConfig(temperature=-1.0)
  with pytest.raises(ValueError, match="top_p"):
    generation.SamplingConfig(top_p=0.0)
  with pytest.raises(ValueError, match="top_k"):
    generation.SamplingConfig(top_k=-2)
  with pytest.raises(ValueError, match="method"):
    generation.DecodeConfig(method="nucleus")
  with pytest.raises(ValueError, match="alpha"):
    generation.DecodeConfig(method="beam", alpha=-0.5)


def numpy_filter(logits, temperature=1.0, top_k=0, top_p=1.0):
  """filter_logits' definition in float64: divide by the temperature; keep the top_k largest
  (ties at the k-th value kept); of those, the most likely tokens until the mass of the ones
  before reaches top_p, the mass taken under the tempered, top-k renormalised softmax."""
  x = np.asarray(logits, np.float64) / temperature
  keep = np.ones(x.shape, bool)
  for r, row in enumerate(x):
    if 0 < top_k < row.size:
      keep[r] &= row >= np.sort(row)[::-1][top_k - 1]
    if top_p < 1.0:
      p = np.where(keep[r], np.exp(row - row.max()), 0.0)
      p /= p.sum()
      order = np.argsort(-row, kind="stable")
      before = np.cumsum(p[order]) - p[order]
      keep[r, order[before >= top_p]] = False
  return np.where(keep, x, -np.inf)


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 3, 1.0), (1.0, 0, 0.5), (2.0, 0, 0.5),
    (0.5, 0, 0.8), (1.0, 4, 0.6), (3.0, 5, 0.7), (1.0, 1, 0.9), (1.0, 8, 1.0)])
def test_filter_logits_equals_its_definition(temperature, top_k, top_p):
  """Temperature, top-k and top-p alone and together against the float64 definition, on
  rows whose kept sets are not at a rounding boundary of top_p."""
  rng = np.random.default_rng(11)
  logits = (2.0 * rng.normal(size=(6, 8))).astype(np.float32)
  want = numpy_filter(logits, temperature, top_k, top_p)
  got = np.asarray(generation.filter_logits(jnp.asarray(logits), generation.SamplingConfig(
      temperature=temperature, top_k=top_k, top_p=top_p)))
  np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
  np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=1e-6)


def test_filter_logits_at_its_boundaries():
  """Exact cases: uniform rows over 4 tokens have masses 1/4, 1/2, 3/4 with no rounding."""
  flat = jnp.zeros((1, 4))
  inf = -np.inf
  # The set stops at the first token that reaches top_p: mass 1/2 is reached by 2 tokens.
  np.testing.assert_array_equal(generation.filter_logits(flat, generation.SamplingConfig(top_p=0.5)),
                                [[0, 0, inf, inf]])
  np.testing.assert_array_equal(generation.filter_logits(flat, generation.SamplingConfig(top_p=0.51)),
                                [[0, 0, 0, inf]])
  # top_p = 1 keeps even tokens whose probability rounds to nothing next to 1.
  tiny = jnp.asarray([[0.0, -40.0, -80.0]])
  np.testing.assert_array_equal(generation.filter_logits(tiny, generation.SamplingConfig()), tiny)
  # top_k = 0 and top_k >= V keep every token; ties at the k-th value are kept.
  row = jnp.asarray([[3.0, 1.0, 1.0, 0.0]])
  for k in (0, 4, 5):
    np.testing.assert_array_equal(generation.filter_logits(row, generation.SamplingConfig(top_k=k)), row)
  np.testing.assert_array_equal(generation.filter_logits(row, generation.SamplingConfig(top_k=2)),
                                [[3, 1, 1, inf]])
  np.testing.assert_array_equal(generation.filter_logits(row, generation.SamplingConfig(top_k=1)),
                                [[3, inf, inf, inf]])


# ---------------------------------------------------------------------------------------
# The model.

def full_forward_greedy(model, params, prompt, max_len):
  """Reference without a cache: one full forward pass per token, argmax at the last token.

  The sequence is right-padded to a fixed length (one compile); the decoder is causal
  after the prompt, so the padding does not change the logits read.
  """
  cfg = model.config
  forward = jax.jit(lambda b: model.apply({"params": params}, b))
  out, logp = [], 0.0
  for _ in range(max_len):
    if cfg.is_encoder_decoder:
      seq, n_prompt = [0] + out, 0
      extra = {"encoder_input_tokens": np.array([prompt + [1]], np.int32)}
    else:
      seq = [0] + (prompt + [1] if prompt else []) + out
      n_prompt, extra = len(seq) - len(out), {}
    padded = np.zeros((1, len(prompt) + 2 + max_len), np.int32)
    padded[0, :len(seq)] = seq
    batch = {"decoder_input_tokens": padded, **extra}
    if cfg.mask_type == "prefix_lm":
      batch["decoder_causal_attention"] = (np.arange(padded.shape[1]) < n_prompt).astype(np.int32)[None]
    logits = np.asarray(forward(batch))[0, len(seq) - 1]
    tok = int(np.argmax(logits))
    logp += float(jax.nn.log_softmax(logits)[tok])
    out.append(tok)
    if tok == 1:
      break
  return out + [0] * (max_len - len(out)), logp


PROMPTS = [[5, 9, 3, 7, 2], [11], [4, 4, 8]]


def model_and_params(cfg, seed=0):
  model = Transformer(cfg)
  if cfg.is_encoder_decoder:
    init = {"encoder_input_tokens": np.ones((1, 4), np.int32), "decoder_input_tokens": np.zeros((1, 4), np.int32)}
  else:
    init = {"decoder_input_tokens": np.zeros((1, 4), np.int32), "decoder_causal_attention": np.ones((1, 4), np.int32)}
  return model, random_params(model, init, seed)


ARCHS = {
    "enc_dec": dict(num_decoder_layers=2),
    "prefix_lm": dict(mask_type="prefix_lm", num_decoder_layers=2),
    "causal": dict(mask_type="causal", num_decoder_layers=2, position_encoding="rope"),
}


@pytest.mark.parametrize("arch", [pytest.param("enc_dec", marks=pytest.mark.slow),
                                  pytest.param("prefix_lm", marks=pytest.mark.slow), "causal"])
def test_cached_greedy_equals_full_forward_argmax(arch):
  """Batched prompts of different lengths, cached: each row = its own uncached greedy decode."""
  cfg = tiny(**ARCHS[arch])
  model, params = model_and_params(cfg)
  m = 6
  batch = generation.prompt_batch(PROMPTS, cfg)
  fn = generation.make_decode_fn(model, generation.DecodeConfig(method="greedy", max_decode_length=m))
  tokens, scores = fn(params, batch, jax.random.PRNGKey(0), np.arange(3))
  for i, p in enumerate(PROMPTS):
    ref, ref_lp = full_forward_greedy(model, params, p, m)
    assert list(np.asarray(tokens)[i]) == ref, (arch, i)
    np.testing.assert_allclose(np.asarray(scores)[i], ref_lp, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_beam_size_one_and_top_k_one_equal_greedy():
  cfg = tiny(num_decoder_layers=2)
  model, params = model_and_params(cfg, seed=1)
  batch = generation.prompt_batch(PROMPTS, cfg)
  args = (params, batch, jax.random.PRNGKey(3), np.arange(3))
  greedy = generation.make_decode_fn(model, generation.DecodeConfig(max_decode_length=7))(*args)
  for config in [generation.DecodeConfig(method="beam", beam_size=1, alpha=0.0, max_decode_length=7),
                 generation.DecodeConfig(method="sample", max_decode_length=7,
                                       sampling=generation.SamplingConfig(top_k=1)),
                 generation.DecodeConfig(method="sample", max_decode_length=7,
                                       sampling=generation.SamplingConfig(temperature=0.0))]:
    out = generation.make_decode_fn(model, config)(*args)
    np.testing.assert_array_equal(np.asarray(out[0]), np.asarray(greedy[0]), err_msg=config.method)
    np.testing.assert_allclose(np.asarray(out[1]), np.asarray(greedy[1]), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["beam", "sample"])
def test_uneven_prompts_in_one_batch_equal_each_prompt_alone(method):
  cfg = tiny(mask_type="prefix_lm", num_decoder_layers=2)
  model, params = model_and_params(cfg, seed=2)
  config = generation.DecodeConfig(method=method, beam_size=3, max_decode_length=5)
  fn = generation.make_decode_fn(model, config)
  rng = jax.random.PRNGKey(7)
  tokens, scores = fn(params, generation.prompt_batch(PROMPTS, cfg), rng, np.arange(3))
  for i, p in enumerate(PROMPTS):
    alone = fn(params, generation.prompt_batch([p], cfg), rng, np.array([i]))
    np.testing.assert_array_equal(np.asarray(tokens)[i], np.asarray(alone[0])[0])
    np.testing.assert_allclose(np.asarray(scores)[i], np.asarray(alone[1])[0], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_decoding_on_a_mesh_equals_one_device():
  cfg = tiny(num_decoder_layers=2)
  model, params = model_and_params(cfg, seed=4)
  prompts = PROMPTS + [[3, 3], [7, 8, 9, 10], [2], [6, 5], [12, 13]]
  batch = generation.prompt_batch(prompts, cfg)
  config = generation.DecodeConfig(method="beam", beam_size=2, max_decode_length=5)
  ids = np.arange(8)
  single = generation.make_decode_fn(model, config)(params, batch, jax.random.PRNGKey(0), ids)
  from lm import partitioning
  mesh = partitioning.make_mesh((4, 2, 1))
  sharded = generation.make_decode_fn(model, config, mesh=mesh)(params, batch, jax.random.PRNGKey(0), ids)
  assert len(sharded[0].sharding.device_set) == 8
  np.testing.assert_array_equal(np.asarray(sharded[0]), np.asarray(single[0]))
  np.testing.assert_allclose(np.asarray(sharded[1]), np.asarray(single[1]), rtol=1e-5)


def test_the_encoder_decoder_starts_from_the_batchs_decoder_input():
  """The framing's start token reaches the decoder through the batch (prompt_batch): the
  prefill's logits are the full forward's at a decoder input of that token."""
  cfg = tiny()
  model, params = model_and_params(cfg)
  gemma = generation.Framing(decoder_start=2, prompt_bos=2, prompt_eos=False)
  for framing in (generation.T5_FRAMING, gemma):
    batch = generation.prompt_batch(PROMPTS, cfg, framing=framing)
    first = generation.model_decoder(model, params, batch, 4)[0]
    full = model.apply({"params": params}, {
        "encoder_input_tokens": batch["encoder_input_tokens"],
        "decoder_input_tokens": np.full((len(PROMPTS), 1), framing.decoder_start)})[:, 0]
    np.testing.assert_allclose(np.asarray(first), np.asarray(full), rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match=r"decoder_input_tokens must be \[B, 1\] = \[3, 1\]"):
    generation.model_decoder(model, params, dict(batch, decoder_input_tokens=np.zeros((3, 2))), 4)


def test_prompt_batch_layouts():
  enc = generation.prompt_batch([[5, 6], [7]], tiny())
  np.testing.assert_array_equal(enc["encoder_input_tokens"], [[5, 6, 1], [7, 1, 0]])
  np.testing.assert_array_equal(enc["decoder_input_tokens"], [[0], [0]])  # the decoder's start
  gemma = generation.Framing(decoder_start=2, prompt_bos=2, prompt_eos=False)
  enc = generation.prompt_batch([[5, 6], [7]], tiny(), framing=gemma, batch_size=3)
  np.testing.assert_array_equal(enc["encoder_input_tokens"], [[2, 5, 6], [2, 7, 0], [2, 0, 0]])
  np.testing.assert_array_equal(enc["decoder_input_tokens"], [[2], [2], [2]])
  dec = generation.prompt_batch([[5, 6], [], [7]], tiny(mask_type="prefix_lm"), batch_size=4)
  np.testing.assert_array_equal(dec["decoder_input_tokens"], [[0, 5, 6, 1], [0, 0, 0, 0], [0, 7, 1, 0], [0, 0, 0, 0]])
  np.testing.assert_array_equal(dec["decoder_segment_ids"], [[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])
  np.testing.assert_array_equal(dec["decoder_causal_attention"], dec["decoder_segment_ids"])
  assert "decoder_causal_attention" not in generation.prompt_batch([[5]], tiny(mask_type="causal"))
  with pytest.raises(ValueError, match="input_length"):
    generation.prompt_batch([[5, 6, 7]], tiny(), input_length=3)


HF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "hf_t5")


@pytest.mark.parametrize("name", ["t5_1_1", pytest.param("t5_1_0", marks=pytest.mark.slow)])
def test_hf_t5_checkpoints_decode_like_transformers_generate(name):
  """Goldens from transformers' generate (tests/testdata/make_hf_t5_decode_golden.py):
  greedy, and num_beams=4 with length_penalty=alpha, early_stopping=True."""
  from lm.checkpoint import hf_t5
  golden = np.load(os.path.join(HF_DIR, name, "decode_golden.npz"))
  config, params = hf_t5.load_hf_t5(os.path.join(HF_DIR, name), dtype="float32")
  model = Transformer(config)
  batch = {"encoder_input_tokens": golden["encoder_input_tokens"]}
  m = golden["greedy_tokens"].shape[1]
  ids = np.arange(len(batch["encoder_input_tokens"]))
  greedy = generation.make_decode_fn(model, generation.DecodeConfig(max_decode_length=m))(
      params, batch, jax.random.PRNGKey(0), ids)
  np.testing.assert_array_equal(np.asarray(greedy[0]), golden["greedy_tokens"])
  beam = generation.make_decode_fn(model, generation.DecodeConfig(
      method="beam", beam_size=4, alpha=float(golden["alpha"]), length_penalty="hf",
      max_decode_length=m))(params, batch, jax.random.PRNGKey(0), ids)
  np.testing.assert_array_equal(np.asarray(beam[0]), golden["beam_tokens"])
  np.testing.assert_allclose(np.asarray(beam[1]), golden["beam_scores"], atol=1e-4)


@pytest.mark.parametrize("knobs", [{}, dict(position_encoding="rope",
                                             cross_attention_rope="continue")])
def test_beam_state_keeps_one_encoder_cache_per_example(knobs):
  """Beam search copies the per-beam cache rows but keeps the cross-attention keys/values
  and encoder mask at one row per example (their beams share them). With RedLLM's
  continued positions each beam row carries its example's offset (``rope_offset``)."""
  cfg = tiny(num_decoder_layers=2, **knobs)
  model, params = model_and_params(cfg)
  batch = generation.prompt_batch(PROMPTS, cfg)
  _, state, _, gather = generation.model_decoder(model, params, batch, max_decode_length=4)
  expanded = gather(state, jnp.repeat(jnp.arange(3), 2))
  rows = {jax.tree_util.keystr(path): x.shape[0]
          for path, x in jax.tree_util.tree_leaves_with_path(expanded) if x.ndim}
  shared = {k: n for k, n in rows.items() if "encoder_decoder_attention" in k or "encoder_valid" in k}
  per_beam = {k: n for k, n in rows.items() if k not in shared}
  assert shared and set(shared.values()) == {3}, shared
  assert any("self_attention" in k for k in per_beam) and set(per_beam.values()) == {6}, per_beam
  assert any("rope_offset" in k for k in per_beam) == bool(knobs), per_beam


def test_log_probs_and_first_argmax_by_value():
  """The decoding kernels against their definitions: log-softmax in float64 (error bound:
  a few float32 ulps of the largest |logit|), and the first index of the maximum (ties go
  to the lowest index, as jnp.argmax)."""
  rng = np.random.default_rng(3)
  logits = rng.normal(size=(4, 37)).astype(np.float32) * 5
  logits[1, [3, 20]] = 50.0  # a tie: the first wins
  logits[2, :] = -1e9
  logits[2, 36] = -1e9 + 1e3
  got = np.asarray(generation.log_probs(jnp.asarray(logits)))
  assert np.all(np.isfinite(got))
  for row, out in zip(logits.astype(np.float64), got):
    want = row - row.max() - np.log(np.sum(np.exp(row - row.max())))
    np.testing.assert_allclose(out, want, rtol=0, atol=8 * np.finfo(np.float32).eps * max(1.0, np.abs(row).max()))
  np.testing.assert_array_equal(np.asarray(generation.first_argmax(jnp.asarray(logits))),
                                [np.argmax(logits[0]), 3, 36, np.argmax(logits[3])])
  assert int(generation.first_argmax(jnp.full((1, 5), jnp.nan))[0]) == 4
  # Leading axes of any number ([B, K, V] beam logits): the last axis is the vocabulary.
  cube = logits.reshape(2, 2, 37)
  np.testing.assert_array_equal(np.asarray(generation.first_argmax(jnp.asarray(cube))),
                                [[np.argmax(logits[0]), 3], [36, np.argmax(logits[3])]])
  np.testing.assert_array_equal(np.asarray(generation.log_probs(jnp.asarray(cube))),
                                got.reshape(2, 2, 37))
