"""lm.downstream.nlu: probes, native pair formats and model passes on hand cases (fast), and
the --suite=nlu command end to end on a tiny trained run (slow)."""
import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn import linear_model, model_selection, pipeline, preprocessing

from eval_runs import SPM_TEXT, copy_run, tiny_config, trained_run
from lm import config as config_lib
from lm import cli, evaluate, partitioning, restore
from lm import score as score_lib
from lm.data import converters, corpus, packing
from lm.data import tokenizer as tokenizer_lib
from lm.downstream import contrasts, nlu, nlu_controls, nlu_items
from lm.downstream.nlu_items import Pair, ProbeItem
from lm.model import scanning
from lm.model.transformer import Transformer

V = 128  # vocab of the hand cases: sentinel k = 127 - k


# ---------------------------------------------------------------------------------------
# Probes.

def test_probe_matches_sklearn_cross_val_predict():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(60, 5))
  y = (x[:, 0] + 0.5 * rng.normal(size=60) > 0).astype(int)
  groups = np.repeat(np.arange(15), 4)
  out = nlu.probe(x, y, groups, folds=5, seed=3)
  model = pipeline.make_pipeline(preprocessing.StandardScaler(), linear_model.RidgeClassifier(
      alpha=1.0, class_weight="balanced", fit_intercept=False))
  cv = model_selection.StratifiedGroupKFold(n_splits=5, shuffle=True, random_state=3)
  expected = model_selection.cross_val_predict(model, x, y, groups=groups, cv=cv)
  np.testing.assert_array_equal(out["predictions"], expected)
  np.testing.assert_array_equal(out["per_item"], (expected == y).astype(int))
  assert out["accuracy"] == pytest.approx(100 * np.mean(expected == y))
  assert 70 < out["accuracy"] < 100


def test_probe_separable_unlearnable_and_constant():
  rng = np.random.default_rng(1)
  y = rng.integers(0, 2, 400)
  groups = np.arange(400) // 4
  separable = np.stack([y + 0.01 * rng.normal(size=400), rng.normal(size=400)], 1)
  assert nlu.probe(separable, y, groups)["accuracy"] == 100.0
  noise_only = rng.normal(size=(400, 8))
  assert 40 < nlu.probe(noise_only, y, groups)["accuracy"] < 60
  # Blank inputs: one representation for every item; each document holds both classes
  # equally, so every training fold is balanced and the probe lands exactly at chance.
  balanced = np.tile([0, 1], 200)
  assert nlu.probe(np.ones((400, 3)), balanced, groups)["accuracy"] == 50.0


@pytest.mark.parametrize("n,classes", [(16, 2), (50, 2), (124, 2), (20, 5), (150, 2)])
def test_identical_features_score_chance_when_folds_are_unbalanced(n, classes):
  """Blank inputs on the embedded corpus's set sizes: documents hold unequal numbers of
  each class, so every training fold's majority is its test fold's minority. A probe with
  a learned class prior (an intercept) scored 37.5 % on 16 binary items and 0 % on 20
  items in 5 classes; this one learns no prior and scores exactly chance."""
  rng = np.random.default_rng(n)
  y = np.tile(np.arange(classes), n // classes)
  groups = rng.integers(0, max(3, n // 3), y.size)
  for seed in range(3):
    out = nlu.probe(np.ones((y.size, 3)), y, groups, seed=seed)
    assert out["accuracy"] == pytest.approx(100.0 / classes)


def test_probe_groups_never_split_across_folds():
  # Every document is all one class and its features identify the document: a probe that
  # saw a document in training would memorise it; cross-validated by document it cannot.
  docs = np.arange(40)
  groups = np.repeat(docs, 5)
  y = np.repeat(docs % 2, 5)
  x = np.eye(40)[groups]
  assert nlu.probe(x, y, groups)["accuracy"] <= 60


def test_probe_layers_reports_last_and_best():
  rng = np.random.default_rng(2)
  y = np.tile([0, 1], 100)
  groups = np.arange(200) // 2
  layers = np.stack([rng.normal(size=(200, 4)),
                     np.concatenate([y[:, None], rng.normal(size=(200, 3))], 1),
                     rng.normal(size=(200, 4))])
  out = nlu.probe_layers(layers, y, groups)
  assert out["best_layer"] == 1 and out["best_layer_accuracy"] == 100.0
  assert out["accuracy"] == out["layer_accuracy"][2] < 70
  assert len(out["per_item"]) == 200


def test_probe_bad_input():
  with pytest.raises(ValueError, match="2 documents"):
    nlu.probe(np.ones((4, 2)), np.array([0, 1, 0, 1]), np.zeros(4, int))
  with pytest.raises(ValueError, match="features"):
    nlu.probe(np.ones((4, 2)), np.array([0, 1, 0]), np.arange(4))


# ---------------------------------------------------------------------------------------
# Native pair formats.

GOOD, BAD = [5, 6, 7, 9], [5, 6, 8, 9]


def _ids(ex):
  return ex["inputs"].tolist(), ex["targets"].tolist()


@pytest.mark.parametrize("fmt,inputs,good_targets,bad_targets", [
    ("full_lm", [], [5, 6, 7, 9], [5, 6, 8, 9]),
    ("prefix_lm", [5, 6], [7, 9], [8, 9]),
    ("span_corruption", [5, 6, 127, 9], [127, 7, 126], [127, 8, 126]),
    ("drop_tokens", [5, 6, 9], [7], [8]),
    ("masked", [5, 6, 127, 9], [5, 6, 7, 9], [5, 6, 8, 9]),
    ("deshuffle", [9, 5, 6], [5, 6, 7, 9], [5, 6, 8, 9]),
])
def test_pair_formats_golden(fmt, inputs, good_targets, bad_targets):
  good, bad = nlu.pair_example(GOOD, BAD, fmt, vocab_size=V)
  assert _ids(good) == (inputs, good_targets)
  assert _ids(bad) == (inputs, bad_targets)


def test_masked_format_hides_which_candidate_and_spans_widen():
  # Spans of different lengths: max(1, 2) mask tokens, so the input does not tell them apart.
  good, bad = nlu.pair_example([5, 6, 7, 9], [5, 6, 8, 10, 9], "masked", vocab_size=V)
  assert _ids(good) == ([5, 6, 127, 127, 9], [5, 6, 7, 9])
  assert _ids(bad) == ([5, 6, 127, 127, 9], [5, 6, 8, 10, 9])
  # An empty differing span (bad inserts a token) widens by the last shared prefix token.
  assert nlu.split_pair([5, 6, 9], [5, 6, 8, 9]) == (1, 1)
  good, bad = nlu.pair_example([5, 6, 9], [5, 6, 8, 9], "span_corruption", vocab_size=V)
  assert _ids(good) == ([5, 127, 9], [127, 6, 126])
  assert _ids(bad) == ([5, 127, 9], [127, 6, 8, 126])
  # At the start of the sentence: T5's own targets (no leading sentinel).
  good, bad = nlu.pair_example([7, 9], [8, 9], "span_corruption", vocab_size=V)
  assert _ids(good) == ([127, 9], [7, 127])
  assert nlu.split_pair([3, 4], [4]) == (0, 0)  # bad lacks the first token: [3, 4] vs [4]
  with pytest.raises(ValueError, match="same tokens"):
    nlu.split_pair([3, 4], [3, 4])


@pytest.mark.parametrize("fmt", sorted(set(nlu.PAIR_FORMATS.values())))
def test_pair_inputs_identical_for_both_candidates(fmt):
  rng = np.random.default_rng(0)
  for _ in range(50):
    good = rng.integers(3, 20, rng.integers(1, 9)).tolist()
    bad = rng.integers(3, 20, rng.integers(1, 9)).tolist()
    if good == bad:
      continue
    a, b = nlu.pair_example(good, bad, fmt, vocab_size=V)
    np.testing.assert_array_equal(a["inputs"], b["inputs"])
    # The targets always tell the candidates apart.
    assert not np.array_equal(a["targets"], b["targets"])


def test_pair_format_by_objective_and_fallback():
  assert nlu.pair_format("iid_replace_spans") == "span_corruption"
  assert nlu.pair_format("bert") == nlu.pair_format("mass") == "masked"
  assert nlu.pair_format("mixture") == nlu.FALLBACK_FORMAT
  with pytest.raises(ValueError, match="unknown pair format"):
    nlu.pair_example(GOOD, BAD, "nope", vocab_size=V)


def test_pair_outcomes_ties_count_half():
  np.testing.assert_array_equal(nlu.pair_outcomes([0.3, 0.0, -1.0]), [1.0, 0.5, 0.0])


# ---------------------------------------------------------------------------------------
# Model passes on a fake run (seconds).

class _Runs(dict):
  """Restored models of each architecture, built on first use."""

  def __init__(self, root):
    super().__init__()
    self.root = root

  def __missing__(self, arch):
    """A Restored as load_run gives it (tiny_config, fake_run's tokenizer), params seed 1."""
    spm = str(self.root / "spm.model")
    if not os.path.exists(spm):
      tokenizer_lib.train_tokenizer(SPM_TEXT, vocab_size=28, extra_ids=100, output=spm)
    config = tiny_config(arch, **{"data.tokenizer": spm, "model.vocab_size": 128})
    model = Transformer(config_lib.model_config(config))
    bare = restore.Restored(config=config, model_config=model.config, model=model, params=None,
                            mesh=partitioning.make_mesh((-1, 1, 1)),
                            tokenizer=tokenizer_lib.load_tokenizer(spm, extra_ids=100),
                            step=2, workdir=str(self.root / arch),
                            objective=config.data.objective)
    self[arch] = nlu.random_init(bare, seed=1)
    return self[arch]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  return _Runs(tmp_path_factory.mktemp("nlu_runs"))


TEXTS = ["abc def", "fed cba abc", "", "aaa bbb ccc ddd eee"]


@pytest.mark.parametrize("arch", ["encoder_decoder", "causal",
                                  pytest.param("prefix_lm", marks=pytest.mark.slow)])
def test_representations_shape_ends_and_padding(runs, arch):
  r = runs[arch]
  cfg = r.model_config
  layers = cfg.num_encoder_layers if arch == "encoder_decoder" else cfg.num_decoder_layers
  reps = nlu.representations(r, TEXTS, batch_size=2)
  assert reps.shape == (layers + 1, len(TEXTS), cfg.emb_dim) and reps.dtype == np.float32
  # Row by row equals a batch of one (no leakage from padding or other rows).
  np.testing.assert_allclose(nlu.representations(r, TEXTS[1:2])[:, 0], reps[:, 1], atol=1e-5)
  # The last row is the stack's output, pooled: independently from encode / final_hidden.
  ex = nlu.text_features(r.tokenizer.encode(TEXTS[1]), arch)
  batch = {k: v[None] for k, v in ex.items()}
  method = Transformer.encode if arch == "encoder_decoder" else Transformer.final_hidden
  final = r.model.apply({"params": r.params}, batch, method=method)
  np.testing.assert_allclose(reps[-1, 1], np.asarray(final, np.float32)[0].mean(0), atol=1e-5)
  # Row 0: the mean token embedding.
  table = np.asarray(r.params["token_embedder"]["embedding"], np.float32)
  key = "encoder_input_tokens" if arch == "encoder_decoder" else "decoder_input_tokens"
  emb = table[ex[key]]
  if cfg.scale_embeddings:
    emb = emb * np.sqrt(cfg.emb_dim)
  np.testing.assert_allclose(reps[0, 1], emb.mean(0), rtol=1e-4, atol=1e-5)


def test_bucket_length_ladder():
  got = {n: nlu.bucket_length(n) for n in (0, 1, 16, 17, 64, 65, 80, 127, 128, 129, 250, 257, 324)}
  assert got == {0: 16, 1: 16, 16: 16, 17: 32, 64: 64, 65: 80, 80: 80, 127: 128, 128: 128,
                 129: 160, 250: 256, 257: 320, 324: 384}
  for n in range(1, 2000):  # never shorter; under 16 padding, or a quarter of n past 64
    b = nlu.bucket_length(n)
    assert b >= n and b % 16 == 0 and b - n < max(16, n / 4), n


def test_length_buckets_group_by_padded_lengths_and_cap():
  def ex(enc, dec):
    return {"encoder_input_tokens": np.ones(enc, np.int32),
            "decoder_target_tokens": np.ones(dec, np.int32)}
  examples = [ex(40, 3), ex(10, 3), ex(33, 2), ex(100, 20), ex(12, 17)]
  got = [(lengths, idx.tolist()) for lengths, idx in nlu.length_buckets(examples)]
  assert got == [({"encoder": 16, "decoder": 16}, [1]), ({"encoder": 16, "decoder": 32}, [4]),
                 ({"encoder": 48, "decoder": 16}, [0, 2]),
                 ({"encoder": 112, "decoder": 32}, [3])]
  # A learned-position cap: never past it, never below the example rounded up to 8.
  capped = nlu.length_buckets([ex(97, 1), ex(60, 1)], max_length=100)
  assert [(l["encoder"], i.tolist()) for l, i in capped] == [(64, [1]), (104, [0])]
  decoder_only = nlu.length_buckets([{"decoder_target_tokens": np.ones(n, np.int32)}
                                     for n in (5, 70, 9)])
  assert [(l, i.tolist()) for l, i in decoder_only] == [({"decoder": 16}, [0, 2]),
                                                        ({"decoder": 80}, [1])]


def test_run_batches_pads_to_given_lengths_and_refuses_short_ones(runs):
  r = runs["causal"]
  examples = [nlu.text_features(r.tokenizer.encode(t), "causal") for t in ("abc", "abc def")]
  shape = lambda params, batch: jnp.zeros(batch["decoder_target_tokens"].shape)
  assert restore.run_batches(r, examples, shape, batch_size=2)[0].shape[1] == 8
  assert restore.run_batches(r, examples, shape, batch_size=2,
                             lengths={"decoder": 48})[0].shape[1] == 48
  longest = max(e["decoder_target_tokens"].size for e in examples)
  for bad in ({"decoder": longest - 1}, {"encoder": 48}):
    with pytest.raises(ValueError, match="do not hold the examples"):
      restore.run_batches(r, examples, shape, batch_size=2, lengths=bad)


def test_one_progress_bar_counts_every_batch_of_every_length_bucket(runs, monkeypatch):
  """nlu's passes over several length buckets advance one bar, to its total."""
  r = runs["causal"]
  texts = ["abc"] * 20 + ["abc def " * 12] * 20   # two length buckets
  bars = []

  class Bar:
    def __init__(self, total, desc, enabled):
      self.total, self.desc, self.enabled, self.n, self.closed = total, desc, enabled, 0, False
      bars.append(self)

    def update(self, n=1):
      self.n += n

    def close(self):
      self.closed = True

  monkeypatch.setattr(cli, "progress_bar", Bar)
  nlu.representations(r, texts, batch_size=2, progress=True)
  (bar,) = [b for b in bars if b.enabled]   # the buckets' own bars stay off
  assert bar.desc == "representations" and bar.closed
  assert bar.total == bar.n == 2 * restore.num_batches(r, 20, 2) > 2
  assert restore.num_batches(r, 5, 2) == -(-5 // restore.global_batch_size(r, 2))


@pytest.mark.parametrize("arch", ["encoder_decoder", "causal"])
def test_representations_of_mixed_lengths_keep_the_texts_order(runs, arch):
  # Texts in three length buckets, interleaved: each row is that text's alone.
  r = runs[arch]
  texts = ["abc " * 30, "fed", "cab bca " * 12, "", "abc def", "bbb " * 30]
  reps = nlu.representations(r, texts, batch_size=2)
  for i, text in enumerate(texts):
    np.testing.assert_allclose(nlu.representations(r, [text])[:, 0], reps[:, i], atol=1e-5)


def test_scanned_layers_give_the_same_representations(runs):
  r = runs["causal"]
  cfg = r.model_config
  ex = nlu.text_features(r.tokenizer.encode("abc def fed"), "causal")
  batch = {k: v[None] for k, v in ex.items()}
  plain = nlu.layer_states(r.model, r.params, batch)
  scanned = Transformer(dataclasses.replace(cfg, scan_layers=not cfg.scan_layers))
  params = (scanning.unscanned_to_scan(r.params) if not cfg.scan_layers
            else scanning.scan_to_unscanned(r.params))
  np.testing.assert_allclose(nlu.layer_states(scanned, params, batch), plain, atol=1e-5)
  assert plain.shape[0] == cfg.num_decoder_layers + 1
  assert not np.allclose(plain[1], plain[2])


def test_blank_texts_give_one_representation(runs):
  reps = nlu.representations(runs["encoder_decoder"], ["", "", ""])
  np.testing.assert_allclose(reps[:, 0], reps[:, 2], atol=1e-6)


PAIRS = [Pair("t", 0, "abc ", "def", "fed", " cba"), Pair("t", 1, "", "aaa", "bbb", " abc"),
         Pair("t", 2, "cab ", "ab", "abc def", "")]


@pytest.mark.parametrize("arch,fmt", [
    ("encoder_decoder", "span_corruption"), ("causal", "full_lm"), ("causal", "masked"),
    pytest.param("prefix_lm", "prefix_lm", marks=pytest.mark.slow),
    pytest.param("encoder_decoder", "deshuffle", marks=pytest.mark.slow)])
def test_pair_margins_equal_independent_scores_and_flip_with_the_pair(runs, arch, fmt):
  r = runs[arch]
  margins = nlu.pair_margins(r, PAIRS, fmt=fmt, batch_size=2)
  tok = r.tokenizer
  rows = []
  for pair in PAIRS:
    for ex in nlu.pair_example(tok.encode(pair.good), tok.encode(pair.bad), fmt,
                               vocab_size=tok.vocab_size, num_extra_ids=tok.extra_ids):
      rows.append(converters.convert(ex, arch))
  # The reference: every candidate in one batch, padded to 40 (nlu pads to 8s, by batch).
  lengths = {s: 40 for s in ("encoder", "decoder")
             if f"{s}_input_tokens" in rows[0]}
  rows = [packing.pad_example(row, lengths) for row in rows]
  batch = {k: np.stack([row[k] for row in rows]) for k in rows[0]}
  lls = np.asarray(jax.jit(lambda p, b: score_lib.score(p, b, model=r.model))(
      r.params, batch)["log_likelihood"], np.float64)
  np.testing.assert_allclose(margins, lls[0::2] - lls[1::2], atol=1e-4)
  swapped = [dataclasses.replace(p, good_span=p.bad_span, bad_span=p.good_span) for p in PAIRS]
  np.testing.assert_allclose(nlu.pair_margins(r, swapped, fmt=fmt), -margins, atol=1e-4)


def test_random_init_is_fresh_deterministic_and_placed_alike(runs):
  r = runs["encoder_decoder"]
  a, b = nlu.random_init(r), nlu.random_init(r)
  _, shardings = restore.abstract_params(r.model, r.mesh, r.rules)  # as load_run places them
  leaves_r, leaves_a = jax.tree.leaves(r.params), jax.tree.leaves(a.params)
  for x, y, z, sharding in zip(leaves_r, leaves_a, jax.tree.leaves(b.params),
                               jax.tree.leaves(shardings)):
    assert x.shape == y.shape and y.sharding == sharding
    np.testing.assert_array_equal(y, z)
  assert any(not np.allclose(x, y) for x, y in zip(leaves_r, leaves_a))


def _hand_items(n_docs=24):
  """Probe items and minimal pairs over the fake run's letters, balanced per document."""
  rng = np.random.default_rng(0)
  words = ["abc", "bcd", "cde", "def", "fed", "edc", "dcb", "cba", "aab", "bba"]
  probes, pairs = [], []
  for d in range(n_docs):
    for label in (0, 1):
      text = " ".join(rng.choice(words, 3 + 3 * label))
      probes.append(ProbeItem("length", text, label, d))
    for _ in range(4):
      a, b = rng.choice(words, 2, replace=False)
      pairs.append(Pair("swap", d, " ".join(rng.choice(words, 2)) + " ", a, b,
                        " " + " ".join(rng.choice(words, 2))))
  return {"length": probes}, {"swap": pairs}


@pytest.mark.slow
def test_random_init_at_chance_on_minimal_pairs(runs):
  r = nlu.random_init(runs["causal"], seed=7)
  _, pairs = _hand_items(n_docs=50)
  outcome = nlu.pair_outcomes(nlu.pair_margins(r, pairs["swap"], batch_size=64))
  assert 40 <= 100 * outcome.mean() <= 60  # 200 pairs: 2.8 standard deviations


def test_evaluate_suite_json_shape(runs):
  probes, pairs = _hand_items(n_docs=10)
  r = runs["encoder_decoder"]
  out = nlu.evaluate_suite(r, pairs, probes, chance={"length": 50.0},
                           items_digest={"x": "d"}, batch_size=16)
  assert set(out) == {"suite", "step", "workdir", "architecture", "objective", "pair_format",
                      "items_digest", "blank_inputs", "instruments"}
  assert out["pair_format"] == nlu.pair_format(r.objective)
  p = out["instruments"]["probe/length"]
  assert set(p) == {"accuracy", "random_init", "score", "chance", "best_layer",
                    "best_layer_accuracy", "per_item", "per_item_random"}
  assert p["score"] == pytest.approx(p["accuracy"] - p["random_init"])
  assert p["accuracy"] == pytest.approx(100 * np.mean(p["per_item"]))
  assert len(p["per_item"]) == len(p["per_item_random"]) == 20
  q = out["instruments"]["pairs/swap"]
  assert set(q) == {"accuracy", "random_init", "score", "mean_margin", "per_item",
                    "per_item_margin", "per_item_random"}
  assert q["accuracy"] == pytest.approx(100 * np.mean(q["per_item"]))
  assert q["mean_margin"] == pytest.approx(np.mean(q["per_item_margin"]))
  blank = nlu.evaluate_suite(r, pairs, probes, chance={"length": 50.0}, items_digest={},
                             blank_inputs=True, batch_size=16)
  assert blank["blank_inputs"] and blank["instruments"]["probe/length"]["accuracy"] == 50.0


def test_a_memo_scores_the_random_initialisation_once(runs, monkeypatch):
  """Across one run's checkpoints (lm.evaluate --steps) the random initialisation, the same
  at every step, is built and scored once; the results are those of separate calls."""
  probes, pairs = _hand_items(n_docs=6)
  r = runs["causal"]
  alone = nlu.evaluate_suite(r, pairs, probes, chance={"length": 50.0}, items_digest={},
                             batch_size=16)
  built = []
  real = nlu.random_init
  monkeypatch.setattr(nlu, "random_init", lambda run: built.append(run) or real(run))
  memo = {}
  got = [nlu.evaluate_suite(r, pairs, probes, chance={"length": 50.0}, items_digest={},
                            batch_size=16, memo=memo) for _ in range(2)]
  assert len(built) == 1 and got[0] == got[1] == alone


# ---------------------------------------------------------------------------------------
# The command.

def _patch_items(monkeypatch, n_docs=24):
  probes, pairs = _hand_items(n_docs)
  monkeypatch.setattr(nlu_items, "item_sets",
                      lambda data_dir=None, seed=0, source="heldout": (pairs, probes))
  monkeypatch.setattr(nlu_items, "chance", lambda task: 50.0)
  monkeypatch.setattr(nlu_items, "digest", lambda items: f"n{len(items)}")


def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
  assert evaluate.run(["--workdir", str(tmp_path / "nope"), "--suite=nlu"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("error:") and "\n" not in err
  assert evaluate.run(["--workdir", str(tmp_path), "--suite=nlu", "--task=glue_cola"]) == 2
  assert "--suite" in capsys.readouterr().err
  assert evaluate.run(["--workdir", str(tmp_path), "--blank_inputs"]) == 2
  assert "--suite=nlu" in capsys.readouterr().err
  assert evaluate.run(["--workdir", str(tmp_path), "--items=heldout"]) == 2
  assert "--suite=nlu" in capsys.readouterr().err
  assert evaluate.run(["--workdir", str(tmp_path), "--steps=2,4"]) == 2
  assert "--suite=nlu" in capsys.readouterr().err
  assert evaluate.run(["--workdir", str(tmp_path), "--suite=nlu", "--steps=2,x"]) == 2
  assert "--steps must be comma-separated checkpoint steps" in capsys.readouterr().err
  assert evaluate.run(["--workdir", str(tmp_path), "--suite=nlu", "--steps=2",
                       "--step=4"]) == 2
  assert "--step and --steps: pass one of them" in capsys.readouterr().err
  assert evaluate.run(["--workdir", str(tmp_path), "--suite=nlu", "--items=comments",
                       f"--data_dir={tmp_path}"]) == 2
  assert "drop --data_dir or pass --items=heldout" in capsys.readouterr().err


def test_item_source_defaults_by_data_dir():
  assert nlu.item_source(None, None) == "comments"
  assert nlu.item_source(None, "/data/heldout") == "heldout"
  assert nlu.item_source("heldout", None) == "heldout"
  with pytest.raises(ValueError, match="unknown --items 'x'; expected one of"):
    nlu.item_source("x", None)
  with pytest.raises(ValueError, match="--items=comments reads"):
    nlu.item_source("comments", "/data/heldout")


@pytest.mark.slow
def test_cli_on_a_trained_run_blank_at_chance(tmp_path, monkeypatch, capsys):
  _patch_items(monkeypatch)
  run = copy_run(trained_run("encoder_decoder"), str(tmp_path / "run"))
  out_file = tmp_path / "nlu.json"
  assert evaluate.run(["--workdir", run, "--suite=nlu", f"--json={out_file}",
                       "--wandb_mode=disabled"]) == 0
  printed = capsys.readouterr().out
  assert "pairs/swap" in printed and "probe/length" in printed
  result = json.loads(out_file.read_text())
  assert result == json.loads(open(os.path.join(run, "eval", "nlu_step_4.json")).read())
  assert result["items_digest"] == {"pairs/swap": "n96", "probe/length": "n48"}
  assert result["items_source"] == f"comments:{corpus.python_version()}"  # the default
  assert result["instruments"]["probe/length"]["accuracy"] > 60  # length is linearly visible
  blank_file = tmp_path / "blank.json"
  assert evaluate.run(["--workdir", run, "--suite=nlu", "--blank_inputs",
                       f"--json={blank_file}"]) == 0
  blank = json.loads(blank_file.read_text())
  assert blank["blank_inputs"] is True
  # The control has its own file: the result the contrasts read is untouched.
  assert blank == json.loads(open(os.path.join(run, "eval", "nlu_blank_step_4.json")).read())
  assert result == contrasts.load_nlu_results(run)
  # The record is what the contrasts read: a point against itself differs by exactly 0 on
  # every instrument, and is "not resolvable".
  me = contrasts.Member("run", result["objective"], result["architecture"], (0.0, 0.0, 0.0))
  other = dataclasses.replace(me, point="again")
  itself = contrasts.Contrast("C0", "itself", "none", "-", a=(me,), b=(other,), paper_sign=1)
  rows = contrasts.contrast_table({"run": [result], "again": [result]}, [itself],
                                  num_resamples=200)
  assert {row.instrument for row in rows} == {*result["instruments"], contrasts.POOLED}
  for row in rows:
    assert (row.result.difference, row.result.low, row.result.high) == (0.0, 0.0, 0.0)
    assert row.verdict == "not resolvable at this scale"
  for name in ("accuracy", "random_init"):
    assert blank["instruments"]["probe/length"][name] == 50.0
  # --steps: one process scores several checkpoints (the growth control), each result the
  # one a call with --step writes.
  os.remove(os.path.join(run, "eval", "nlu_step_4.json"))
  assert evaluate.run(["--workdir", run, "--suite=nlu", "--steps=2,4"]) == 0
  records = nlu_controls.load_nlu_history(run)
  assert sorted(records) == [2, 4] and records[4] == result
  assert records[2]["step"] == 2 and records[2]["instruments"] != result["instruments"]
