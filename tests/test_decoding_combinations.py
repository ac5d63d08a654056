"""lm.generation with options together, against independent NumPy references (float64).

Sampling: temperature with top-k and with top-p (top-p applies after temperature and top-k),
the whole distribution compared with a reference, then draws through `temperature_sample`.
Beam search (T5 rules): against a reference search that never stops early, on random score
tables with 1 and 2 beams and alpha > 0, and a constructed case where a live beam can still
beat the best finished one.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lm import generation
from test_decoding_search import prefix_code, table_model  # the constructed-table model

EOS = generation.EOS_ID


# ---------------------------------------------------------------------------------------
# Sampling.

def reference_distribution(logits, temperature, top_k=0, top_p=1.0):
  """float64[V] sampling distribution of one row: softmax(logits / T), the top_k most
  likely tokens kept, then the smallest most-likely-first set whose (renormalised) mass
  reaches top_p, renormalised."""
  z = np.asarray(logits, np.float64) / temperature
  p = np.exp(z - z.max())
  p /= p.sum()
  order = np.argsort(-p, kind="stable")
  keep = np.zeros(p.shape, bool)
  keep[order[:top_k or len(p)]] = True
  p = np.where(keep, p, 0.0) / p[keep].sum()
  mass, nucleus = 0.0, np.zeros(p.shape, bool)
  for t in order:
    if not keep[t] or mass >= top_p:
      break
    nucleus[t] = True
    mass += p[t]
  p = np.where(nucleus, p, 0.0)
  return p / p.sum()


def _random_logits(rows, vocab, seed):
  return np.random.default_rng(seed).normal(scale=2.0, size=(rows, vocab)).astype(np.float32)


COMBINATIONS = [  # (temperature, top_k, top_p)
    (0.5, 0, 0.8), (1.7, 0, 0.6), (3.0, 0, 0.9),        # temperature with top-p
    (0.6, 3, 1.0), (2.5, 5, 1.0),                        # temperature with top-k
    (0.7, 6, 0.7), (2.0, 4, 0.5), (1.0, 5, 0.75),        # all three
]


@pytest.mark.parametrize("temperature,top_k,top_p", COMBINATIONS)
def test_filtered_distribution_equals_the_reference(temperature, top_k, top_p):
  logits = _random_logits(64, 12, seed=int(temperature * 10) + top_k)
  config = generation.SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
  got = np.asarray(jax.nn.softmax(generation.filter_logits(jnp.asarray(logits), config), axis=-1))
  want = np.stack([reference_distribution(row, temperature, top_k, top_p) for row in logits])
  np.testing.assert_array_equal(got > 0, want > 0)
  np.testing.assert_allclose(got, want, atol=2e-6)


def test_the_order_of_the_filters_matters_on_these_tables():
  """The reference can tell the documented order from the others, so the test above would
  fail for top-p before temperature, or top-p's mass taken before top-k renormalises."""
  logits = _random_logits(64, 12, seed=7)
  def support(dist_fn):
    return np.stack([dist_fn(row) > 0 for row in logits])
  documented = support(lambda r: reference_distribution(r, 2.0, 4, 0.5))
  # top-p on the untempered distribution, then temperature: another support.
  p_first = support(lambda r: reference_distribution(r, 1.0, 4, 0.5))
  # top-p's mass over all tokens rather than the top-k renormalised ones.
  mass_of_all = support(lambda r: reference_distribution(r, 2.0, 0, 0.5) * (
      reference_distribution(r, 2.0, 4, 1.0) > 0))
  assert (documented != p_first).any() and (documented != mass_of_all).any()


def test_sampling_draws_follow_the_reference(temperature=2.0, top_k=4, top_p=0.6):
  """`temperature_sample`'s first tokens over many rows of the same logits: chi-square."""
  n, vocab = 4000, 6
  row = np.log(np.array([0.04, 0.08, 0.12, 0.16, 0.25, 0.35], np.float32))
  first = jnp.broadcast_to(jnp.asarray(row), (n, vocab))

  def t2l(tokens, state, step):
    del step
    return jnp.zeros((tokens.shape[0], vocab)), state

  config = generation.SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
  toks, _ = jax.jit(lambda f, r: generation.temperature_sample(
      f, {}, t2l, rng=r, max_decode_length=1, config=config))(first, jax.random.PRNGKey(3))
  counts = np.bincount(np.asarray(toks)[:, 0], minlength=vocab)
  want = reference_distribution(row, temperature, top_k, top_p)
  assert counts[want == 0].sum() == 0, (counts, want)
  e = n * want[want > 0]
  chi2 = float(np.sum((counts[want > 0] - e) ** 2 / e))
  # P(chi2 > x) = 0.001 for 1..5 degrees of freedom.
  assert chi2 < [10.83, 13.82, 16.27, 18.47, 20.52][(want > 0).sum() - 2], (counts, e)


# ---------------------------------------------------------------------------------------
# Beam search.

def reference_beam_search(table, example, beam_size, length, alpha):
  """T5's beam search rules (lm.generation's module docstring) run to `length` tokens with no
  early stop, in float64: each step the 2K best extensions of the live beams; those ending
  in EOS are scored log p / ((5 + len) / 6) ** alpha and kept if among the K best finished
  so far; the K best of the others stay live. Returns [(score, tokens)] best first: the
  finished ones, or the live ones with their log p when nothing finished."""
  t = np.asarray(table[example], np.float64)
  logp = t - np.log(np.exp(t - t.max(-1, keepdims=True)).sum(-1, keepdims=True)) - t.max(
      -1, keepdims=True)
  vocab = t.shape[-1]
  live, finished = [(0.0, ())], []
  for _ in range(length):
    cands = sorted(((lp + logp[prefix_code(seq, vocab), tok], seq + (tok,))
                    for lp, seq in live for tok in range(vocab)), key=lambda c: -c[0])
    cands = cands[:2 * beam_size]
    finished += [(lp / ((5 + len(seq)) / 6) ** alpha, seq) for lp, seq in cands
                 if seq[-1] == EOS]
    finished = sorted(finished, key=lambda c: -c[0])[:beam_size]
    live = [c for c in cands if c[1][-1] != EOS][:beam_size]
  return finished or live


@pytest.mark.parametrize("beam_size", [1, 2])
@pytest.mark.parametrize("alpha", [0.6, 2.0])
def test_beam_search_equals_a_search_without_early_stopping(beam_size, alpha):
  """Random tables (EOS likely enough that the search often stops early): the same
  sequences and scores as the reference that always runs to max_decode_length."""
  vocab, length, examples = 4, 5, 24
  rng = np.random.default_rng(int(alpha * 10) + beam_size)
  table = rng.normal(scale=1.5, size=(examples, (vocab + 1) ** length, vocab))
  table[..., EOS] += rng.normal(0.5, 1.0, size=(examples, 1))  # some examples favour EOS
  table = table.astype(np.float32)
  first, state, t2l = table_model(table)
  steps = []

  def counting(tokens, state, step):
    jax.debug.callback(lambda s: steps.append(int(s)), step)
    return t2l(tokens, state, step)

  search = jax.jit(lambda f, s: generation.beam_search(
      f, s, counting, beam_size=beam_size, max_decode_length=length, alpha=alpha))
  stopped_early = 0
  for e in range(examples):  # one example at a time: each stops on its own
    steps.clear()
    seqs, scores = search(first[e:e + 1], jax.tree.map(lambda x: x[e:e + 1], state))
    jax.effects_barrier()
    seqs, scores = np.asarray(seqs)[0], np.asarray(scores)[0]
    stopped_early += len(steps) < length - 1
    want = reference_beam_search(table, e, beam_size, length, alpha)
    for j, (score, seq) in enumerate(want):
      np.testing.assert_allclose(scores[j], score, rtol=1e-5, atol=1e-5)
      assert list(seqs[j]) == list(seq) + [0] * (length - len(seq)), (e, j, seqs)
  # Both regimes were entered: searches that stopped early and searches that ran to the end.
  assert 0 < stopped_early < examples, stopped_early


def test_a_live_beam_that_can_still_win_keeps_the_search_going():
  """Step 0: [EOS] finishes with p = 0.6 (score log 0.6 = -0.51); the live beam [2] has
  p = 0.4, and EOS follows it almost surely. With alpha = 4 the longer sequence scores
  log 0.4 / (7/6)^4 = -0.49 and wins, so the search must not stop after step 0 although its
  one finished slot beats the live beam's log-probability (-0.92) and its own length's
  penalty; only the bound with the largest penalty, ((5 + 3) / 6)^4, says it may still win."""
  vocab, length, alpha = 4, 3, 4.0
  table = np.full((1, (vocab + 1) ** length, vocab), -40.0, np.float32)
  table[0, 0, EOS], table[0, 0, 2] = np.log(0.6), np.log(0.4)
  table[0, prefix_code([2], vocab), EOS] = 0.0  # EOS after [2]: p = 1 - 3e-17
  first, state, t2l = table_model(table)
  for k in (1, 2):
    seqs, scores = jax.jit(lambda f, s: generation.beam_search(  # pylint: disable=cell-var-from-loop
        f, s, t2l, beam_size=k, max_decode_length=length, alpha=alpha))(first, state)
    assert list(np.asarray(seqs)[0, 0]) == [2, EOS, 0]
    np.testing.assert_allclose(np.asarray(scores)[0, 0], np.log(0.4) / (7 / 6) ** alpha,
                               rtol=1e-5)
    np.testing.assert_allclose(np.asarray(scores)[0, 0], reference_beam_search(
        table, 0, k, length, alpha)[0][0], rtol=1e-5)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_configs_refuse_non_finite_alpha_and_temperature(bad):
  """nan passed every comparison the configs made (nan < 0 is False): refused by name."""
  with pytest.raises(ValueError, match="alpha must be finite"):
    generation.DecodeConfig(method="beam", alpha=bad)
  with pytest.raises(ValueError, match="temperature must be finite"):
    generation.SamplingConfig(temperature=bad)
