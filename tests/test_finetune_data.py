"""lm.downstream.finetune_data: layout, determinism, exact resume, mixing, process sharding."""
import json

import numpy as np
import pytest

import downstream_fixtures as fx
from lm.data import converters
from lm.downstream import finetune_data as fd


@pytest.fixture(scope="module", autouse=True)
def _tasks():
  fx.register_tasks()


def _data(arch="encoder_decoder", tasks=(("test_copy", 1.0),), process_index=0,
          process_count=1, **kw):
  spec = fd.FinetuneSpec(tasks=tasks, architecture=arch, inputs_length=16, targets_length=8,
                         batch_size=8, num_shards=4, **kw)
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


def test_processes_make_up_the_global_batch_and_states_merge():
  whole = _take(_data().train_iterator(), 3)
  its = [_data(process_index=p, process_count=2).train_iterator() for p in range(2)]
  parts = [_take(it, 3) for it in its]
  for b in range(3):
    for k in whole[b]:
      np.testing.assert_array_equal(np.concatenate([parts[0][b][k], parts[1][b][k]]),
                                    whole[b][k])
  merged = fd.FinetuneData.merge_states([it.get_state() for it in its])
  one = _data().train_iterator()
  one.set_state(merged)  # restores onto another process count
  _same(_take(one, 2), _take(_data().train_iterator(), 5)[3:])


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
