"""lm.downstream.finetune_data: layout, determinism, exact resume, mixing, process sharding."""
import dataclasses
import json

import numpy as np
import pytest

import downstream_fixtures as fx
from lm.data import converters, shards
from lm.downstream import finetune_data as fd


@pytest.fixture(scope="module", autouse=True)
def _tasks():
  fx.register_tasks()


def _data(arch="encoder_decoder", tasks=(("test_copy", 1.0),), process_index=0,
          process_count=1, inputs_length=16, batch_size=8, num_shards=4, **kw):
  spec = fd.FinetuneSpec(tasks=tasks, architecture=arch, inputs_length=inputs_length,
                         targets_length=8, batch_size=batch_size, num_shards=num_shards, **kw)
  return fd.FinetuneData(spec, tokenizer=fx.tokenizer(), process_index=process_index,
                         process_count=process_count)


def _take(it, n):
  return [next(it) for _ in range(n)]


def _same(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b):
    assert x.keys() == y.keys()
    for k in x:
      np.testing.assert_array_equal(x[k], y[k])


@pytest.mark.parametrize("arch", ["encoder_decoder", "prefix_lm", "causal"])
def test_unpacked_rows_are_the_converter_layout_of_task_examples(arch):
  data = _data(arch, pack=False)
  batch = next(data.train_iterator())
  tok = fx.tokenizer()
  words = set(fx.WORDS[:160])
  for i in range(batch["decoder_target_tokens"].shape[0]):
    n = int(batch["decoder_segment_ids"][i].sum())
    targets = batch["decoder_target_tokens"][i, :n]
    if arch == "encoder_decoder":
      word = tok.decode(targets)
      inputs = batch["encoder_input_tokens"][i]
      assert tok.decode(inputs) == f"copy: {word}"
    else:  # "inputs EOS targets EOS", loss on the targets part only
      eos = np.flatnonzero(targets == 1)
      assert len(eos) == 2 and eos[1] == n - 1
      word = tok.decode(targets[eos[0] + 1:])
      assert tok.decode(targets[:eos[0]]) == f"copy: {word}"
      expect = converters.convert({"inputs": tok.encode(f"copy: {word}"),
                                   "targets": tok.encode(word)}, arch)
      np.testing.assert_array_equal(batch["decoder_loss_weights"][i, :n],
                                    expect["decoder_loss_weights"])
    assert word in words


def test_deterministic_and_exact_resume_after_json_round_trip():
  ref = _take(_data().train_iterator(), 12)  # 160 examples / 4 shards: epochs end inside
  it = _data().train_iterator()
  _take(it, 5)
  state = json.loads(json.dumps(_data().merge_states([it.get_state()])))
  it.close()
  resumed = _data().train_iterator()
  resumed.set_state(state)
  assert resumed.batches == 5
  _same(_take(resumed, 7), ref[5:])
  assert 0 < resumed.packing_efficiency <= 1


def test_epochs_reshuffle_and_cover_every_example():
  data = _data(pack=False)
  it = data.train_iterator()
  tok = fx.tokenizer()
  seen = [tok.decode(r) for b in _take(it, 40) for r in b["decoder_target_tokens"]]
  first, second = seen[:160], seen[160:320]
  assert sorted(first) == sorted(fx.WORDS[:160]) == sorted(second)
  assert first != second  # a new order every epoch


@pytest.mark.parametrize("num_shards", [4, 2])  # 2: one shard per process
def test_processes_make_up_the_global_batch_and_states_merge(num_shards):
  whole = _take(_data(num_shards=num_shards).train_iterator(), 3)
  its = [_data(process_index=p, process_count=2, num_shards=num_shards).train_iterator()
         for p in range(2)]
  parts = [_take(it, 3) for it in its]
  for b in range(3):
    for k in whole[b]:
      np.testing.assert_array_equal(np.concatenate([parts[0][b][k], parts[1][b][k]]),
                                    whole[b][k])
  merged = fd.FinetuneData.merge_states([it.get_state() for it in its])
  one = _data(num_shards=num_shards).train_iterator()
  one.set_state(merged)  # restores onto another process count
  _same(_take(one, 2), _take(_data(num_shards=num_shards).train_iterator(), 5)[3:])


def test_mixture_rates():
  data = _data(tasks=(("test_copy", 3.0), ("test_first", 1.0)), pack=False)
  tok = fx.tokenizer()
  texts = [tok.decode(r) for b in _take(data.train_iterator(), 16)
           for r in b["encoder_input_tokens"]]
  copies = sum(t.startswith("copy:") for t in texts)
  assert copies / len(texts) == pytest.approx(0.75, abs=0.05)


def test_eval_iterator_covers_validation_once():
  data = _data(pack=False)
  batches = list(data.eval_iterator())
  rows = sum(int((b["decoder_segment_ids"].max(1) > 0).sum()) for b in batches)
  assert rows == len(fx.WORDS) - 160


def test_bad_inputs():
  with pytest.raises(ValueError, match="unknown task 'nope'; expected one of"):
    _data(tasks=(("nope", 1.0),))
  with pytest.raises(ValueError, match="has no split 'dev'"):
    _data(split="dev")
  with pytest.raises(ValueError, match="positive sum"):
    _data(tasks=(("test_copy", 0.0),))
  it = _data().train_iterator()
  with pytest.raises(ValueError, match="other tasks, rates, lengths or seed"):
    it.set_state(_data(seed=1).train_iterator().get_state())
  with pytest.raises(ValueError, match="not a fine-tuning data state"):
    it.set_state({"version": 2, "shards": {}})


def test_spec_defaults_and_frozen():
  spec = fd.FinetuneSpec(tasks=[("test_copy", 1)])
  assert spec.tasks == (("test_copy", 1.0),) and isinstance(spec.tasks[0][1], float)
  assert (spec.data_dir, spec.split, spec.architecture, spec.inputs_length,
          spec.targets_length, spec.batch_size, spec.eval_batch_size, spec.num_shards,
          spec.pack, spec.num_packing_bins, spec.loss_on_inputs, spec.seed) == (
              None, "train", "encoder_decoder", 512, 114, 128, None,
              shards.DEFAULT_NUM_SHARDS, True, None, False, 0)
  with pytest.raises(dataclasses.FrozenInstanceError):
    spec.seed = 1


def test_fingerprint_and_shuffle_seeds_are_stable():
  """Saved data states carry the fingerprint and resumed runs reshuffle with _seed: a
  change of either breaks resuming the runs saved before it."""
  spec = _data().spec
  assert spec.fingerprint() == "8700c91ff27902d0"
  assert dataclasses.replace(spec, eval_batch_size=4).fingerprint() == spec.fingerprint()
  for change in ({"batch_size": 16}, {"architecture": "causal"}, {"data_dir": "d"},
                 {"split": "validation"}, {"seed": 1}, {"pack": False},
                 {"num_packing_bins": 16}, {"targets_length": 9}):
    assert dataclasses.replace(spec, **change).fingerprint() != spec.fingerprint(), change
  assert [fd._seed(0, k, 0) for k in range(3)] == [4255188975, 1754819356, 3599497483]
  assert fd._seed(1, 2, 3) == 740256675


def test_spec_refuses_bad_rates_lengths_and_batch_sizes():
  ok = {"tasks": (("test_copy", 1.0),), "inputs_length": 1, "targets_length": 1,
        "batch_size": 1, "num_shards": 1}
  fd.FinetuneSpec(**ok)  # 1 is the smallest length, batch and shard count
  fd.FinetuneSpec(**{**ok, "tasks": (("test_copy", 0.25), ("test_first", 0.0))})
  with pytest.raises(ValueError, match="must be non-negative with a positive sum"):
    fd.FinetuneSpec(**{**ok, "tasks": (("test_copy", 1.0), ("test_first", -0.5))})
  for name in ("inputs_length", "targets_length", "batch_size", "num_shards"):
    for bad in (0, -1):
      with pytest.raises(ValueError, match=f"FinetuneSpec.{name} must be positive, got {bad}"):
        fd.FinetuneSpec(**{**ok, name: bad})
  with pytest.raises(ValueError, match="batch_size=6 is not divisible by num_shards=4"):
    fd.FinetuneSpec(**{**ok, "batch_size": 6, "num_shards": 4})
  with pytest.raises(ValueError, match="eval_batch_size=6 is not divisible by num_shards=4"):
    fd.FinetuneSpec(**{**ok, "batch_size": 8, "eval_batch_size": 6, "num_shards": 4})


def test_processes_shards_and_examples_per_shard():
  data = fd.FinetuneData(_data().spec, tokenizer=fx.tokenizer())  # default: the one process
  assert (data.process_index, data.process_count, data.shards, data.batch_size) == (
      0, 1, range(0, 4), 8)
  second = _data(process_index=1, process_count=2)
  assert (second.shards, second.batch_size) == (range(2, 4), 4)
  for index, count in ((-1, 2), (2, 2), (3, 2), (0, 0)):
    with pytest.raises(ValueError, match=rf"process_index {index} not in \[0, {count}\)"):
      _data(process_index=index, process_count=count)
  with pytest.raises(ValueError, match="num_shards=4 is not divisible by process_count=3"):
    _data(process_count=3)
  _data(num_shards=160, batch_size=160)  # 160 examples: one per shard is enough
  with pytest.raises(ValueError, match="has 160 examples, fewer than data.num_shards=320"):
    _data(num_shards=320, batch_size=320)


def test_a_task_at_rate_zero_is_neither_trained_nor_validated_on():
  data = _data(tasks=(("test_first", 0.0), ("test_copy", 1.0)), pack=False)
  assert list(data.train_examples) == ["test_copy"]
  tok = fx.tokenizer()
  texts = [tok.decode(r) for b in _take(data.train_iterator(), 4)
           for r in b["encoder_input_tokens"]]
  assert all(t.startswith("copy: ") for t in texts)
  texts = [tok.decode(r) for b in data.eval_iterator() for r in b["encoder_input_tokens"]]
  assert texts == [f"copy: {w}" for w in fx.WORDS[160:]]


@pytest.mark.parametrize("eval_batch_size", [8, 12])  # 56 rows: 7 full batches; 5, one padded
def test_eval_batches_are_full_and_processes_make_up_the_global_batch(eval_batch_size):
  tok = fx.tokenizer()
  whole = list(_data(pack=False, eval_batch_size=eval_batch_size).eval_iterator())
  assert len(whole) == -(-56 // eval_batch_size)
  parts = [list(_data(pack=False, eval_batch_size=eval_batch_size, process_index=p,
                      process_count=2).eval_iterator()) for p in range(2)]
  for b, batch in enumerate(whole):
    for k in batch:
      assert batch[k].shape[0] == eval_batch_size
      np.testing.assert_array_equal(np.concatenate([parts[0][b][k], parts[1][b][k]]),
                                    batch[k])
  targets = [tok.decode(r) for b in whole for r in b["decoder_target_tokens"]]
  assert targets == fx.WORDS[160:] + [""] * (len(whole) * eval_batch_size - 56)
  pad = 56 - (len(whole) - 1) * eval_batch_size  # the last batch's first all-zero row
  assert not any(v[pad:].any() for v in whole[-1].values())


def test_eval_iterator_of_one_validation_example():
  data = _data(pack=False)
  task = data.tasks[0][0]
  data.tasks = [(dataclasses.replace(task, load=lambda split, data_dir=None: [{"word": "abc"}]),
                 1.0)]
  (batch,) = data.eval_iterator()
  tok = fx.tokenizer()
  assert [tok.decode(r) for r in batch["encoder_input_tokens"]] == ["copy: abc"] + [""] * 7
  assert batch["decoder_segment_ids"][1:].sum() == 0


def _segments(row, stack, tokens):
  ids = row[f"{stack}_segment_ids"]
  return [tuple(row[tokens][ids == s]) for s in range(1, int(ids.max()) + 1)]


def test_packed_rows_are_first_fit_over_16_bins_emitted_in_order():
  """grain's first fit (as T5 packs): an example goes into the first of the
  num_packing_bins bins (default max(rows per shard, 16)) it fits in; when it fits in
  none, the bins are emitted in order and it starts the next 16."""
  kw = {"inputs_length": 24, "num_shards": 1, "batch_size": 2}
  examples = [(tuple(e[e > 0]), tuple(d[d > 0]))
              for b in _take(_data(pack=False, **kw).train_iterator(), 80)
              for e, d in zip(b["encoder_input_tokens"], b["decoder_target_tokens"])]
  reference, bins, back = [], [], 0
  for enc, dec in examples:
    fits = [b for b in bins if sum(len(e) for e, _ in b) + len(enc) <= 24
            and sum(len(d) for _, d in b) + len(dec) <= 8]
    if fits:
      back += fits[0] is not bins[-1]
      fits[0].append((enc, dec))
      continue
    if len(bins) == 16:
      reference, bins = reference + bins, []
    bins.append([(enc, dec)])
  assert len(reference) >= 32 and back > 0  # some examples went into an earlier bin
  packed = [list(zip(_segments(r, "encoder", "encoder_input_tokens"),
                     _segments(r, "decoder", "decoder_target_tokens")))
            for b in _take(_data(**kw).train_iterator(), 16)
            for r in ({k: v[i] for k, v in b.items()} for i in range(2))]
  assert packed == reference[:32]


def test_states_of_another_version_shard_count_or_spec_are_refused():
  it = _data().train_iterator()
  next(it)
  state = json.loads(json.dumps(it.get_state()))
  assert {k: state[k] for k in ("kind", "version", "num_shards", "batches")} == {
      "kind": "finetune", "version": 1, "num_shards": 4, "batches": 1}
  for change, message in (({"version": 0}, "version 0 is not 1"),
                          ({"version": 2}, "version 2 is not 1"),
                          ({"num_shards": 2}, "has 2 virtual shards, this run 4"),
                          ({"num_shards": 8}, "has 8 virtual shards, this run 4"),
                          ({"fingerprint": "0" * 16}, "fingerprint 0{16} != "),
                          ({"fingerprint": "f" * 16}, "fingerprint f{16} != ")):
    with pytest.raises(ValueError, match=message):
      it.set_state({**state, **change})
  it.set_state(state)


def test_merge_states_checks_positions_and_reads_counts_from_json():
  """States come back from JSON files: counts past CPython's small-int cache are equal
  there, not identical objects."""
  def state(shard_ids, batches):
    return json.loads(json.dumps({"kind": "finetune", "version": 1, "fingerprint": "f" * 16,
                                  "num_shards": 1024, "batches": batches,
                                  "shards": {str(k): {"k": k} for k in shard_ids}}))
  merged = fd.FinetuneData.merge_states([state(range(512, 1024), 1000), state(range(512), 1000)])
  assert list(merged["shards"]) == [str(k) for k in range(1024)]
  assert (merged["num_shards"], merged["batches"]) == (1024, 1000)
  for first, other in ((5, 3), (3, 5)):
    with pytest.raises(ValueError, match=rf"different positions \({other} != {first} batches"):
      fd.FinetuneData.merge_states([state([0], first), state([1], other)])
  assert fd._json_normal({"a": np.int64(3), "b": (np.float32(0.5), [np.bool_(True)])}) == {
      "a": 3, "b": [0.5, [True]]}
