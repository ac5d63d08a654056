"""Tests for lm/data/pipeline.py on a tiny corpus and tokenizer."""
import json

import numpy as np
import pytest

from lm.data import pipeline, shards
from lm.data import tokenizer as tok_lib

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron "
         "pi rho sigma tau upsilon phi chi psi omega").split()


def _docs(n, seed=0):
  rng = np.random.default_rng(seed)
  return [" ".join(rng.choice(WORDS, rng.integers(3, 40))) + f" doc{i}." for i in range(n)]


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("data") / "docs.txt"
  path.write_text("\n".join(_docs(400)) + "\n")
  return str(path)


@pytest.fixture(scope="module")
def tok():
  return tok_lib.train_tokenizer(_docs(300, seed=1), vocab_size=60, extra_ids=20)


# Every test runs on both paths of the pipeline: the vectorised block stage (the default for
# the objectives of lm/data/batched.py) and the per-example reference.
_PATH = {}


@pytest.fixture(autouse=True, params=[True, False], ids=["batched", "per_example"])
def batched_objectives(request):
  _PATH["batched_objectives"] = request.param
  yield request.param
  _PATH.clear()


def _spec(path, **kw):
  base = dict(**_PATH, format="text", paths=(path,), extra_ids=20, inputs_length=32, targets_length=12,
              batch_size=4, num_shards=4, seed=7, num_threads=2, validation_fraction=0.1,
              objective="span_corruption")
  base.update(kw)
  return pipeline.DataSpec(**base)


def _take(it, n):
  out = [next(it) for _ in range(n)]
  it.close()
  return out


def _equal(a, b):
  return len(a) == len(b) and all(
      set(x) == set(y) and all(np.array_equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


def test_shapes_dtypes_and_determinism(corpus_file, tok):
  spec = _spec(corpus_file)
  data = pipeline.DataPipeline(spec, tokenizer=tok)
  batches = _take(data.train_iterator(), 5)
  for b in batches:
    assert b["encoder_input_tokens"].shape == (4, 32)
    assert b["decoder_target_tokens"].shape == (4, 12)
    assert b["decoder_loss_weights"].dtype == np.float32
    assert all(v.dtype in (np.int32, np.float32) for v in b.values())
    # Loss only on real target tokens; padding is 0 everywhere.
    np.testing.assert_array_equal(b["decoder_loss_weights"] > 0, b["decoder_segment_ids"] > 0)
    assert np.all(b["decoder_target_tokens"][b["decoder_segment_ids"] == 0] == 0)
    assert b["decoder_target_tokens"].max() < tok.vocab_size
  other_threads = pipeline.DataPipeline(
      pipeline.DataSpec(**{**spec.__dict__, "num_threads": 1, "prefetch_batches": 0}),
      tokenizer=tok)
  assert _equal(_take(other_threads.train_iterator(), 5), batches)
  reseeded = pipeline.DataPipeline(_spec(corpus_file, seed=8), tokenizer=tok)
  assert not _equal(_take(reseeded.train_iterator(), 5), batches)


def test_prefetch_covers_a_block_on_the_vectorised_path(corpus_file, tok):
  """A block is BLOCK_SIZE chunks per shard at once: batch 4 over 4 shards is 1 row per shard,
  so a block feeds 256 batches and the thread prefetches that many; the per-example path
  keeps spec.prefetch_batches, and 0 still means no prefetching."""
  def depth(**kw):
    data = pipeline.DataPipeline(_spec(corpus_file, **kw), tokenizer=tok)
    assert data.blocks == kw.get("batched_objectives", True)
    return data.prefetch_depth
  assert depth(batched_objectives=True) == 256
  assert depth(batched_objectives=True, batch_size=128, num_shards=2) == 4  # 64 rows a shard
  assert depth(batched_objectives=True, batch_size=256, num_shards=1, prefetch_batches=3) == 3
  assert depth(batched_objectives=True, prefetch_batches=0) == 0
  assert depth(batched_objectives=False) == 2


def test_checkpoint_resume_mid_epoch_json(corpus_file, tok):
  data = pipeline.DataPipeline(_spec(corpus_file), tokenizer=tok)
  it = data.train_iterator()
  for _ in range(7):
    next(it)
  state = json.loads(json.dumps(it.get_state()))
  expected = _take(it, 6)
  resumed = data.train_iterator()
  resumed.set_state(state)
  assert resumed.batches == 7
  assert _equal(_take(resumed, 6), expected)
  other = pipeline.DataPipeline(_spec(corpus_file, seed=9), tokenizer=tok).train_iterator()
  with pytest.raises(ValueError, match="different data spec"):
    other.set_state(state)
  other.close()


def _doc_markers(batches, tok):
  """doc<i> numbers in one stream of unpadded rows (full_lm keeps every token, in order)."""
  tokens = [b["decoder_target_tokens"][i][b["decoder_segment_ids"][i] > 0]
            for b in batches for i in range(len(b["decoder_target_tokens"]))]
  text = tok.decode(np.concatenate([t[t != 1] for t in tokens]))
  return {int(w[3:]) for w in text.replace(".", " ").split() if w[3:].isdigit()}


def test_virtual_shards_disjoint_and_cover_one_epoch(corpus_file, tok):
  # One process per shard, one row per batch: each process's batches are its shard's stream.
  spec = _spec(corpus_file, objective="full_lm", architecture="causal", num_epochs=1,
               batch_size=4, num_shards=4, pack=False, validation_fraction=0.0,
               document_eos=True)
  for p in range(4):
    data = pipeline.DataPipeline(spec, process_index=p, process_count=4, tokenizer=tok)
    assert list(data.shards) == [p]
    # Shard k reads documents k::num_shards (one document per line here).
    assert _doc_markers(list(data.train_iterator()), tok) == set(range(p, 400, 4))


def _global(per_process):
  """Per-process lists of batches -> global batches (processes in order)."""
  return [{k: np.concatenate([b[k] for b in step]) for k in step[0]}
          for step in zip(*per_process)]


@pytest.mark.parametrize("process_count", [2, 4])
def test_global_batches_independent_of_process_count(corpus_file, tok, process_count):
  spec = _spec(corpus_file, batch_size=8, eval_batch_size=4)
  one = pipeline.DataPipeline(spec, tokenizer=tok)
  assert (one.batch_size, one.eval_batch_size) == (8, 4)
  want_train = _take(one.train_iterator(), 4)
  want_eval = list(one.eval_iterator())
  assert len(want_eval) == one.eval_num_batches() > 2
  many = [pipeline.DataPipeline(spec, process_index=p, process_count=process_count, tokenizer=tok)
          for p in range(process_count)]
  assert [d.batch_size for d in many] == [8 // process_count] * process_count
  assert _equal(_global([_take(d.train_iterator(), 4) for d in many]), want_train)
  evals = [list(d.eval_iterator()) for d in many]
  assert {len(e) for e in evals} == {len(want_eval)}  # every process: same number of steps
  assert _equal(_global(evals), want_eval)
  n = len(want_eval) + 1
  assert _equal(_global([list(d.eval_iterator(num_batches=n)) for d in many]),
                list(one.eval_iterator(num_batches=n)))


@pytest.mark.parametrize("before,after", [(1, 2), (2, 1), (4, 2)])
def test_state_restores_across_process_counts(corpus_file, tok, before, after):
  spec = _spec(corpus_file, batch_size=8)
  reference = pipeline.DataPipeline(spec, tokenizer=tok).train_iterator()
  for _ in range(5):
    next(reference)
  expected = _take(reference, 3)
  states = []
  for p in range(before):
    it = pipeline.DataPipeline(spec, process_index=p, process_count=before,
                               tokenizer=tok).train_iterator()
    for _ in range(5):
      next(it)
    states.append(json.loads(json.dumps(it.get_state())))
    it.close()
  merged = json.loads(json.dumps(shards.merge_states(states[::-1])))
  assert sorted(merged["shards"], key=int) == [str(k) for k in range(4)]
  resumed = []
  for p in range(after):
    it = pipeline.DataPipeline(spec, process_index=p, process_count=after,
                               tokenizer=tok).train_iterator()
    it.set_state(merged)
    assert it.batches == 5
    resumed.append(_take(it, 3))
  assert _equal(_global(resumed), expected)


def test_state_errors(corpus_file, tok):
  spec = _spec(corpus_file, batch_size=8)
  its = [pipeline.DataPipeline(spec, process_index=p, process_count=2, tokenizer=tok)
         .train_iterator() for p in range(2)]
  next(its[0])
  states = [it.get_state() for it in its]
  for it in its:
    it.close()
  with pytest.raises(ValueError, match="different positions"):
    shards.merge_states(states)
  with pytest.raises(ValueError, match="at least one"):
    shards.merge_states([])
  whole = pipeline.DataPipeline(spec, tokenizer=tok).train_iterator()
  with pytest.raises(ValueError, match=r"no position for virtual shard\(s\) \[2, 3\]"):
    whole.set_state(states[0])  # process 0 of 2 holds shards 0 and 1 only
  with pytest.raises(ValueError, match="version"):
    whole.set_state({**states[0], "version": 1})
  whole.close()
  other = pipeline.DataPipeline(_spec(corpus_file, batch_size=8, num_shards=2),
                                tokenizer=tok).train_iterator()
  with pytest.raises(ValueError, match="has 4 virtual shards, this pipeline 2"):
    other.set_state(states[0])
  other.close()


def test_epochs_reshuffle(corpus_file, tok):
  spec = _spec(corpus_file, objective="full_lm", architecture="causal", pack=False,
               validation_fraction=0.0, batch_size=1, num_shards=1, prefetch_batches=0)
  data = pipeline.DataPipeline(spec, tokenizer=tok)
  epoch_tokens = sum(len(tok.encode(d)) for d in _docs(400))
  per_row = data.raw_length
  rows = _take(data.train_iterator(), 2 * (epoch_tokens // per_row) + 4)
  n = epoch_tokens // per_row
  first = np.concatenate([r["decoder_target_tokens"][0] for r in rows[:n]])
  second = np.concatenate([r["decoder_target_tokens"][0] for r in rows[n + 2:2 * n]])
  assert not np.array_equal(first[:200], second[:200])


@pytest.mark.parametrize("objective,arch", [("prefix_lm", "prefix_lm"), ("deshuffle", "causal"),
                                            ("iid_replace_spans", "encoder_decoder")])
def test_objectives_and_architectures(corpus_file, tok, objective, arch):
  spec = _spec(corpus_file, objective=objective, architecture=arch, targets_length=32)
  data = pipeline.DataPipeline(spec, tokenizer=tok)
  it = data.train_iterator()
  b = _take(it, 2)[-1]
  if arch == "encoder_decoder":
    assert b["encoder_input_tokens"].shape == (4, 32)
  else:
    assert b["decoder_target_tokens"].shape == (4, 64)
    assert "decoder_causal_attention" in b and "encoder_input_tokens" not in b
  assert 0 < it.packing_efficiency <= 1


def test_eval_iterator_fixed_finite_padded(corpus_file, tok):
  data = pipeline.DataPipeline(_spec(corpus_file), tokenizer=tok)
  first, second = list(data.eval_iterator()), list(data.eval_iterator())
  assert first and _equal(first, second)
  assert all(b["encoder_input_tokens"].shape == (4, 32) for b in first)
  padded = list(data.eval_iterator(num_batches=len(first) + 2))
  assert _equal(padded[:len(first)], first)
  assert all(not b["decoder_loss_weights"].any() for b in padded[len(first):])
  assert len(list(data.eval_iterator(num_batches=1))) == 1


def test_bad_inputs(tmp_path, corpus_file, tok):
  with pytest.raises(ValueError, match="unknown objective 'nope'; expected one of"):
    _spec(corpus_file, objective="nope")
  with pytest.raises(ValueError, match="noise_densityy"):
    pipeline.DataPipeline(_spec(corpus_file, objective_params={"noise_densityy": 0.2}),
                          tokenizer=tok)
  with pytest.raises(FileNotFoundError, match="does not exist"):
    pipeline.DataPipeline(_spec(str(tmp_path / "missing.txt")), tokenizer=tok)
  empty = tmp_path / "empty.txt"
  empty.write_bytes(b"\n\n")
  with pytest.raises(ValueError, match="No documents found.*empty.txt"):
    pipeline.DataPipeline(_spec(str(empty)), tokenizer=tok)
  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"\xff\xfe\xfd\n")
  with pytest.raises(ValueError, match="No documents found"):
    pipeline.DataPipeline(_spec(str(bad), on_decode_error="skip"), tokenizer=tok)
  with pytest.raises(ValueError, match="batch_size=6 is not divisible by num_shards=4.*e.g. 2"):
    _spec(corpus_file, batch_size=6)
  with pytest.raises(ValueError, match="eval_batch_size=2 is not divisible by num_shards=4"):
    _spec(corpus_file, eval_batch_size=2)
  with pytest.raises(ValueError, match="num_shards must be positive"):
    _spec(corpus_file, num_shards=0)
  with pytest.raises(ValueError, match="num_shards=4 is not divisible by process_count=3"):
    pipeline.DataPipeline(_spec(corpus_file), process_count=3, tokenizer=tok)
  few = tmp_path / "few.txt"
  few.write_text("one doc\ntwo doc\n")
  with pytest.raises(ValueError, match="2 train documents cannot fill num_shards=4"):
    pipeline.DataPipeline(_spec(str(few), validation_fraction=0.0), tokenizer=tok)


@pytest.mark.parametrize("objective,params,concatenate,want", [
    ("span_corruption", {}, None, True), ("full_lm", {}, None, True), ("bert", {}, None, True),
    ("mass", {}, None, True), ("iid_replace_spans", {}, None, True),
    ("drop_tokens", {}, None, True),
    ("span_corruption", {"random_roll": True}, None, False),  # no batched version
    ("span_corruption", {}, False, False),  # documents cut alone: the per-example splitter
    ("prefix_lm", {}, None, False), ("deshuffle", {}, None, False),  # single documents
])
def test_the_block_stage_is_used_where_it_applies(corpus_file, tok, batched_objectives,
                                                  objective, params, concatenate, want):
  spec = _spec(corpus_file, objective=objective, objective_params=params,
               concatenate=concatenate, targets_length=32)
  assert pipeline.DataPipeline(spec, tokenizer=tok).blocks == (want and batched_objectives)


def _chunks(batches, tok):
  """The raw chunks behind span-corrupted rows (one example per row): inputs with every
  sentinel replaced by the target span after the same sentinel."""
  sentinel_min = tok.vocab_size - 20
  out = []
  for b in batches:
    for inputs, targets in zip(b["encoder_input_tokens"], b["decoder_target_tokens"]):
      inputs, targets = inputs[inputs > 1], targets[targets > 1]  # drop padding and EOS
      spans, cur = {}, None
      for t in targets:
        if t >= sentinel_min:
          cur = spans.setdefault(int(t), [])
        else:
          cur.append(int(t))
      out.append([x for t in inputs for x in (spans[int(t)] if t >= sentinel_min else [int(t)])])
  return out


def test_both_paths_cut_the_same_chunks_in_the_same_order(corpus_file, tok):
  """The block stage reads and cuts exactly what ConcatThenSplit does: full_lm (no
  randomness) gives identical batches, and span corruption's rows reconstruct the same
  chunks, though the two paths draw different noise."""
  kw = dict(pack=False, num_epochs=1, validation_fraction=0.0)
  for objective, arch in (("full_lm", "causal"), ("full_lm", "encoder_decoder")):
    a, b = (list(pipeline.DataPipeline(_spec(corpus_file, objective=objective, architecture=arch,
                                             batched_objectives=flag, **kw),
                                       tokenizer=tok).train_iterator()) for flag in (True, False))
    assert len(a) > 50 and _equal(a, b)
  a, b = (list(pipeline.DataPipeline(_spec(corpus_file, batched_objectives=flag, **kw),
                                     tokenizer=tok).train_iterator()) for flag in (True, False))
  assert len(a) == len(b) > 50
  assert _chunks(a, tok) == _chunks(b, tok)
  assert not _equal(a, b)  # different noise
