"""How the pipeline cuts each objective's examples out of documents (objectives.Layout).

Documents are numeric (numeric_tokenizer.py), so every raw token in a batch names the
document and the position it came from.
"""
import json

import numpy as np
import pytest

from lm.data import converters, objectives, pipeline, shards
from lm.data import mixtures as mixtures_lib
from numeric_tokenizer import DOC_STRIDE, NumericTokenizer, raw_ids, segments, write_documents

V, E = 1 << 22, 100


def _rows(spec, tok, batches=3):
  it = pipeline.DataPipeline(spec, tokenizer=tok).train_iterator()
  try:
    out = [next(it) for _ in range(batches)]
  finally:
    it.close()
  return [{k: v[r] for k, v in b.items()} for b in out
          for r in range(b["decoder_target_tokens"].shape[0])]


def _spec(path, **kw):
  base = dict(format="text", paths=(path,), extra_ids=E, batch_size=8, num_shards=2,
              num_threads=1, prefetch_batches=0, validation_fraction=0.0, seed=3)
  base.update(kw)
  return pipeline.DataSpec(**base)


@pytest.fixture(scope="module")
def short_docs(tmp_path_factory):
  """Documents of 5..70 tokens: most are shorter than one raw segment (31)."""
  rng = np.random.default_rng(0)
  return write_documents(tmp_path_factory.mktemp("short") / "docs.txt",
                         rng.integers(5, 70, 80))


def _docs_per_example(rows, arch):
  """Number of documents the raw tokens of each example come from."""
  stacks = ("encoder", "decoder") if arch == "encoder_decoder" else ("decoder",)
  out = []
  for row in rows:
    for s, seg in segments(row, "decoder"):
      ids = [raw_ids(seg["decoder_target_tokens"], V, E)]
      if "encoder" in stacks:
        ids.append(raw_ids(row["encoder_input_tokens"][row["encoder_segment_ids"] == s], V, E))
      ids = np.concatenate(ids)
      out.append(len(np.unique(ids // DOC_STRIDE)))
  return np.array(out)


@pytest.mark.parametrize("objective,arch", [("prefix_lm", "encoder_decoder"),
                                            ("prefix_lm", "prefix_lm"),
                                            ("deshuffle", "causal")])
def test_single_document_objectives_never_cross_documents(short_docs, objective, arch):
  # T5 prefix_lm.gin / all_permute.gin: select_random_chunk + split_tokens, no concatenation.
  spec = _spec(short_docs, objective=objective, architecture=arch, inputs_length=32,
               targets_length=32)
  assert objectives.layout(objective).concatenate is False
  per_example = _docs_per_example(_rows(spec, NumericTokenizer(extra_ids=E)), arch)
  assert per_example.size > 20 and np.all(per_example == 1)
  # The switch back to one concatenated stream: now examples span documents.
  spec = _spec(short_docs, objective=objective, architecture=arch, inputs_length=32,
               targets_length=32, concatenate=True)
  assert np.any(_docs_per_example(_rows(spec, NumericTokenizer(extra_ids=E)), arch) > 1)


def test_single_document_split_covers_each_document_in_raw_segments(tmp_path):
  # One 100-token document, raw length 31 (inputs 32): segments of 31, 31, 31, 7 tokens.
  path = write_documents(tmp_path / "d.txt", [100] * 8)
  spec = _spec(path, objective="deshuffle", architecture="encoder_decoder", inputs_length=32,
               targets_length=32, pack=False, num_shards=1, batch_size=4)
  rows = _rows(spec, NumericTokenizer(extra_ids=E), batches=1)
  sizes = [raw_ids(r["decoder_target_tokens"], V, E).size for r in rows]
  assert sizes[:4] == [31, 31, 31, 7]
  first = np.concatenate([raw_ids(r["decoder_target_tokens"], V, E) for r in rows[:4]])
  np.testing.assert_array_equal(np.sort(first) % DOC_STRIDE, np.arange(100))


def test_full_lm_chunks_have_eos_only_at_document_ends(tmp_path):
  # T5 full_lm: append_eos per document, reduce_concat_tokens, split_tokens(targets length).
  lengths = np.random.default_rng(1).integers(3, 40, 60)
  path = write_documents(tmp_path / "d.txt", lengths)
  spec = _spec(path, objective="full_lm", architecture="causal", inputs_length=0,
               targets_length=16)
  rows = _rows(spec, NumericTokenizer(extra_ids=E))
  assert rows[0]["decoder_target_tokens"].shape == (16,)  # rows of targets_length tokens
  last = {(d + 1) * DOC_STRIDE + n - 1 for d, n in enumerate(lengths)}
  for row in rows:
    for _, seg in segments(row):
      t = seg["decoder_target_tokens"]
      assert t.size == 16  # every chunk is a full targets_length: no chunk-end EOS
      assert np.all(seg["decoder_loss_weights"] == 1)
      for i in np.flatnonzero(t == 1):  # every EOS follows a document's last token
        assert i == 0 or int(t[i - 1]) in last
      for i in np.flatnonzero(np.isin(t, list(last))):  # and every document end has one
        assert i == t.size - 1 or t[i + 1] == 1


def test_converter_without_targets_eos():
  ex = {"inputs": np.zeros(0, np.int32), "targets": np.array([5, 6, 1, 7], np.int32)}
  out = converters.convert(ex, "causal", lengths={"inputs": 0, "targets": 3}, targets_eos=False)
  np.testing.assert_array_equal(out["decoder_target_tokens"], [5, 6, 1])
  out = converters.convert(ex, "causal", lengths={"inputs": 0, "targets": 3})
  np.testing.assert_array_equal(out["decoder_target_tokens"], [5, 6, 1])  # trimmed + EOS
  out = converters.convert(ex, "causal", lengths={"inputs": 0, "targets": 8})
  np.testing.assert_array_equal(out["decoder_target_tokens"], [5, 6, 1, 7, 1])


# Mixture tests use many documents: grain reshuffles a member's documents every epoch, which
# is slow for members of only a few documents.


def _ul2_rows(path, batches, **params):
  spec = _spec(path, objective="mixture", architecture="encoder_decoder", inputs_length=64,
               targets_length=objectives.required_targets_length(
                   "mixture", inputs_length=64, preset="ul2", **params),
               objective_params=dict(preset="ul2", **params), pack=False, num_shards=1,
               batch_size=16)
  words = {"[NLU]": [7, 8], "[NLG]": [8, 7], "[S2S]": [9, 9]}
  return _rows(spec, NumericTokenizer(extra_ids=E, words=words), batches), words


def test_ul2_members_have_their_own_streams(tmp_path):
  # UL2's ul2_objective: each denoiser splits its own shard of the stream to its own raw
  # length, so no document token is discarded (cutting every example at the longest
  # member's raw length dropped about 31 % of them).
  path = write_documents(tmp_path / "d.txt", [120] * 560)
  rows, _ = _ul2_rows(path, batches=8)
  mode_of = {V - E: "R", V - E + 1: "X", V - E + 2: "S"}  # the reserved mode ids
  mix = objectives.make_objective("mixture", vocab_size=V, num_extra_ids=E, preset="ul2",
                                  inputs_length=64)
  raws = {}
  for _, weight, mode, raw in mix.members:
    raws.setdefault(mode_of[int(mode[0])], set()).add(raw)
  seen = {}  # document -> positions seen
  for row in rows:
    enc = row["encoder_input_tokens"]
    kind = mode_of[int(enc[0])]
    ids = np.concatenate([raw_ids(enc, V, E), raw_ids(row["decoder_target_tokens"], V, E)])
    assert ids.size in raws[kind], (kind, ids.size, raws[kind])  # its own raw length
    for d, pos in zip(ids // DOC_STRIDE, ids % DOC_STRIDE):
      seen.setdefault(int(d), []).append(int(pos))
  for d, pos in seen.items():  # each document read without holes, every token once
    pos = np.sort(pos)
    np.testing.assert_array_equal(pos, np.arange(pos.size), err_msg=f"document {d}")
  assert len(raws["R"] | raws["X"] | raws["S"]) > 3  # the members' lengths do differ


def test_ul2_text_mode_tokens(tmp_path):
  # UL2's released code prepends the tokenized strings [NLU] / [NLG] / [S2S].
  path = write_documents(tmp_path / "d.txt", [120] * 560)
  rows, words = _ul2_rows(path, batches=2, mode_tokens="text")
  starts = {tuple(r["encoder_input_tokens"][:2]) for r in rows}
  assert starts <= {tuple(w) for w in words.values()} and len(starts) > 1
  # Text mode tokens take no extra id: the sentinels may use all of them.
  mix = objectives.make_objective("mixture", vocab_size=V, num_extra_ids=E, preset="ul2",
                                  inputs_length=64, mode_tokens="text",
                                  encode=NumericTokenizer(words=words).encode)
  assert all(np.array_equal(m[2], words[mixtures_lib.UL2_MODE_STRINGS[k]])
             for m, k in zip(mix.members, "RRXXXXS"))
  with pytest.raises(ValueError, match="mode_tokens='text' needs encode"):
    objectives.make_objective("mixture", vocab_size=V, preset="ul2", inputs_length=64,
                              mode_tokens="text")
  with pytest.raises(ValueError, match="unknown mode_tokens 'bogus'"):
    objectives.make_objective("mixture", vocab_size=V, preset="ul2", inputs_length=64,
                              mode_tokens="bogus")


@pytest.mark.parametrize("objective", ["mixture", "prefix_lm"])
def test_state_restores_after_json(tmp_path, objective):
  # The per-member streams (mixture) and the per-document split (prefix_lm) keep the
  # iterator state exact through a JSON round trip, as the concatenated layout does.
  path = write_documents(tmp_path / "d.txt", np.random.default_rng(2).integers(20, 120, 560))
  params = dict(preset="ul2") if objective == "mixture" else {}
  spec = _spec(path, objective=objective, architecture="encoder_decoder", inputs_length=64,
               targets_length=64, objective_params=params, batch_size=4, num_shards=2)
  tok = NumericTokenizer(extra_ids=E)
  it = pipeline.DataPipeline(spec, tokenizer=tok).train_iterator()
  for _ in range(3):
    next(it)
  state = json.loads(json.dumps(it.get_state()))
  expected = [next(it) for _ in range(3)]
  it.close()
  it = pipeline.DataPipeline(spec, tokenizer=tok).train_iterator()
  it.set_state(shards.merge_states([state]))
  got = [next(it) for _ in range(3)]
  it.close()
  for a, b in zip(expected, got):
    for k in a:
      np.testing.assert_array_equal(a[k], b[k])


def test_mixture_eval_with_fewer_documents_than_members(tmp_path):
  # A small validation set leaves some members without documents: they are left out.
  path = write_documents(tmp_path / "d.txt", [120] * 560)
  eval_path = write_documents(tmp_path / "e.txt", [120] * 3)
  spec = _spec(path, objective="mixture", architecture="encoder_decoder", inputs_length=64,
               targets_length=64, objective_params=dict(preset="ul2"), batch_size=4,
               num_shards=1, eval_paths=(eval_path,))
  batches = list(pipeline.DataPipeline(spec, tokenizer=NumericTokenizer(extra_ids=E))
                 .eval_iterator())
  assert batches and all(b["encoder_input_tokens"].shape == (4, 64) for b in batches)
  modes = {int(t) for b in batches for t in b["encoder_input_tokens"][:, 0] if t}
  assert modes <= {V - E, V - E + 1, V - E + 2}
