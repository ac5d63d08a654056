"""Each paper table's rows checked against each other: sequences, examples and text tokens
per step, inputs tokens per step, and the loss mask of each layout.

Every row of a table must see the same amount of data per step unless the paper says
otherwise (Raffel et al. 2020 train every ablation on 2^19 steps of 128 sequences of 512
tokens; T5's `lm.gin` gives the language model 128 x 512 too). Each row's runlocal config (the
same layout code at 64 tokens) is run through the real data pipeline on numeric documents,
whose ids name the text tokens they come from (numeric_tokenizer.py), so a layout change
that packs two examples into a row, drops or duplicates text, or moves the loss mask fails
here. The full-size configs are checked by arithmetic (row lengths, raw segment lengths).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import pathlib

import numpy as np
import pytest

from experiments import t5_objectives
from lm import config as config_lib
from launch import local
from lm.data import objectives, packing, pipeline
from numeric_tokenizer import DOC_STRIDE, NumericTokenizer, raw_ids, segments, write_documents

REPO = pathlib.Path(__file__).resolve().parents[2]
NUM_DOCS, DOC_LEN = 400, 630
# Tables whose rows read the same text per step (paper: same steps x batch x 512 tokens).
SAME_TEXT = ("experiments/t5_architectures.py", "experiments/t5_architectures_loss_on_inputs.py",
             "experiments/t5_objectives.py", "experiments/t5_corruption_rate.py",
             "experiments/t5_corruption_rate_gin_lengths.py")
# Table 7 fixes the inputs length instead: span corruption reads random_spans_helper's
# longer segments (568 raw tokens for 512 inputs tokens), as T5's span gins.
SAME_INPUTS = ("experiments/t5_span_length.py",)
TABLES = SAME_TEXT + SAME_INPUTS


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
  monkeypatch.chdir(REPO)  # config paths in the sweeps are relative to the repository


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  # Documents of 630 tokens: 10 raw segments of 63 (inputs_length 64) for the objectives cut
  # from single documents, so their examples are full like the concatenated objectives'.
  return write_documents(tmp_path_factory.mktemp("tables") / "docs.txt", [DOC_LEN] * NUM_DOCS)


def _text_ids(tokens, tok) -> np.ndarray:
  """The ids among `tokens` that are document tokens (not BERT's random tokens elsewhere)."""
  ids = raw_ids(tokens, tok.vocab_size, tok.extra_ids)
  return ids[(ids // DOC_STRIDE <= NUM_DOCS) & (ids % DOC_STRIDE < DOC_LEN)]


def _loss_mask_ok(row, spec) -> bool:
  """The loss mask of the row's layout: every target token of an encoder-decoder example;
  the targets part of a decoder-only example (after its inputs EOS), or all of it with
  loss_on_inputs or without inputs (full_lm)."""
  seg = row["decoder_segment_ids"]
  weights = row["decoder_loss_weights"]
  if spec.architecture == "encoder_decoder" or spec.loss_on_inputs or (
      not objectives.layout(spec.objective).has_inputs):
    return bool(np.array_equal(weights, (seg > 0).astype(np.float32)))
  for _, ex in segments(row):
    first_eos = int(np.flatnonzero(ex["decoder_target_tokens"] == 1)[0])
    expected = (np.arange(ex["decoder_loss_weights"].size) > first_eos).astype(np.float32)
    if not np.array_equal(ex["decoder_loss_weights"], expected):
      return False
  return True


@functools.lru_cache(maxsize=None)
def _measure_spec(spec_json: str, corpus: str) -> dict:
  spec = pipeline.DataSpec(**{**json.loads(spec_json), "format": "text", "paths": (corpus,),
                              "tokenizer": None, "validation_fraction": 0.0,
                              "num_threads": 1, "prefetch_batches": 0})
  tok = NumericTokenizer(extra_ids=spec.extra_ids)
  it = pipeline.DataPipeline(spec, tokenizer=tok).train_iterator()
  try:
    batch = next(it)
  finally:
    it.close()
  rows = batch["decoder_target_tokens"].shape[0]
  row_list = [{k: v[r] for k, v in batch.items()} for r in range(rows)]
  examples = sum(len(list(segments(r))) for r in row_list)
  text = [_text_ids(batch["decoder_target_tokens"], tok)]
  if "encoder_input_tokens" in batch:
    text.append(_text_ids(batch["encoder_input_tokens"], tok))
    inputs = int(np.count_nonzero(batch["encoder_segment_ids"]))
  else:
    inputs = int(np.count_nonzero((batch["decoder_loss_weights"] == 0)
                                  & (batch["decoder_segment_ids"] > 0)))
  return dict(sequences=rows, examples=examples,
              text_tokens=int(np.unique(np.concatenate(text)).size), inputs_tokens=inputs,
              loss_mask_ok=all(_loss_mask_ok(r, spec) for r in row_list),
              raw_length=objectives.raw_length(
                  spec.objective, inputs_length=spec.inputs_length,
                  targets_length=spec.targets_length, **spec.objective_params),
              inputs_length=spec.inputs_length, batch_size=spec.batch_size)


def _measure(config, corpus: str) -> dict:
  spec = config_lib.data_spec(config)
  fields = {k: v for k, v in dataclasses.asdict(spec).items()
            if k not in ("format", "paths", "tokenizer", "validation_fraction", "num_threads",
                         "prefetch_batches")}
  return _measure_spec(json.dumps(fields, sort_keys=True), corpus)


@pytest.mark.parametrize("table", TABLES)
def test_rows_see_the_same_data_per_step(table, corpus):
  rows = {p.name: _measure(local.build_config(p), corpus)
          for p in local.collect(table, runlocal=True)}
  for name, m in rows.items():
    # One sequence per batch row and one example per sequence, as T5's 512-token examples.
    assert m["sequences"] == m["batch_size"] == 16, (name, m)
    assert m["examples"] == m["sequences"], (name, m)
    # Every example a full raw segment (a document's text is never dropped or duplicated;
    # the 1 % above allows BERT's random replacement tokens that happen to be document ids).
    assert 0.97 <= m["text_tokens"] / (m["sequences"] * m["raw_length"]) <= 1.01, (name, m)
    assert m["loss_mask_ok"], name
  text = [m["text_tokens"] for m in rows.values()]
  if table in SAME_TEXT:  # 63 raw tokens + EOS or 64 (language model) per sequence
    assert max(text) <= 1.02 * min(text), {n: m["text_tokens"] for n, m in rows.items()}
  else:
    for name, m in rows.items():
      assert 0.95 <= m["inputs_tokens"] / (m["sequences"] * m["inputs_length"]) <= 1.0, (name, m)


@pytest.mark.parametrize("table", TABLES)
def test_full_size_rows(table):
  points = local.collect(table)
  for p in points:
    config = local.build_config(p)
    d = config_lib.data_spec(config)
    controls = {c.point: c.equal_steps for c in t5_objectives.EQUAL_TOKENS}
    steps = 2 ** 19 if p.name not in controls else (   # to prefix LM's predicted tokens
        t5_objectives.equal_tokens_steps(2 ** 19, controls[p.name]))
    assert d.batch_size == 128 and config.train.num_steps == steps, p.name
    lengths = packing.feature_lengths(d.architecture, d.inputs_length, d.targets_length)
    raw = objectives.raw_length(d.objective, inputs_length=d.inputs_length,
                                targets_length=d.targets_length, **d.objective_params)
    if d.objective == "full_lm":  # T5 lm.gin: 128 x 512 targets, nothing else in the row
      assert lengths == {"decoder": 512} and raw == 512, p.name
    else:  # 512 inputs tokens per sequence (paper §3.1)
      assert d.inputs_length == 512, p.name
      if table in SAME_TEXT:  # split_tokens_to_inputs_length: 511 + EOS
        assert raw == 511, (p.name, raw)
      elif d.objective == "span_corruption" and d.objective_params["mean_noise_span_length"] == 3:
        assert (raw, d.targets_length) == (568, 114), p.name  # T5's 512/114 span corruption
