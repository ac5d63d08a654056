"""Regenerates the decoding goldens tests/testdata/hf_t5/*/decode_golden.npz (needs torch +
transformers).

    python tests/testdata/make_hf_t5_decode_golden.py

For each tiny checkpoint written by make_hf_t5_golden.py (t5_1_1, t5_1_0) it runs
transformers' `generate` (eager attention, float32) on a fixed batch of 8 encoder inputs of
different lengths (right-padded with 0, each ending in EOS) and stores:
  encoder_input_tokens  int32[8, 12]
  greedy_tokens         int32[8, M]     generate(max_new_tokens=M), decoder start dropped,
                                        0 after EOS
  beam_tokens           int32[8, M]     generate(num_beams=4, length_penalty=ALPHA,
                                        early_stopping=True, max_new_tokens=M)
  beam_scores           float32[8]      its sequences_scores
  alpha                 float32[]       ALPHA
with M = 10. It then decodes the same batch with lm.generation (greedy, and beam search with
length_penalty="hf") and stops on any difference. The tests read only the .npz files.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from lm import generation  # noqa: E402
from lm.checkpoint import hf_t5  # noqa: E402
from lm.model.transformer import Transformer  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_t5")
MAX_NEW = 10
ALPHA = {"t5_1_1": 0.6, "t5_1_0": 1.5}
LENGTHS = [12, 3, 7, 1, 10, 5, 2, 8]  # prompt tokens before the EOS


def fixed_inputs(vocab_size: int) -> np.ndarray:
  rng = np.random.default_rng(99)
  enc = np.zeros((len(LENGTHS), max(LENGTHS)), np.int32)
  for i, n in enumerate(LENGTHS):
    enc[i, :n - 1] = rng.integers(2, vocab_size, n - 1)
    enc[i, n - 1] = 1
  return enc


def hf_generate(model, enc: np.ndarray, **kwargs):
  ids = torch.tensor(enc, dtype=torch.long)
  # A cache that grows per layer: transformers sizes its default cache by the encoder's
  # num_layers, which breaks t5_1_1 (2 encoder / 3 decoder layers).
  cache = transformers.EncoderDecoderCache(transformers.DynamicCache(), transformers.DynamicCache())
  with torch.no_grad():
    out = model.generate(input_ids=ids, attention_mask=(ids != 0).long(), max_new_tokens=MAX_NEW,
                         do_sample=False, decoder_start_token_id=0, past_key_values=cache,
                         return_dict_in_generate=True, output_scores=True, **kwargs)
  seqs = out.sequences.numpy()[:, 1:]  # drop the decoder start token
  tokens = np.zeros((enc.shape[0], MAX_NEW), np.int32)
  tokens[:, :seqs.shape[1]] = seqs
  # generate fills beam outputs after EOS with EOS here; lm's convention is 0 after EOS.
  after_eos = np.cumsum(np.cumsum(tokens == 1, axis=1), axis=1) > 1
  tokens[after_eos] = 0
  scores = None if out.get("sequences_scores") is None else out.sequences_scores.numpy().astype(np.float32)
  return tokens, scores


def make(name: str) -> None:
  directory = os.path.join(OUT, name)
  model = transformers.T5ForConditionalGeneration.from_pretrained(directory, attn_implementation="eager").eval()
  enc = fixed_inputs(model.config.vocab_size)
  greedy, _ = hf_generate(model, enc)
  beam, beam_scores = hf_generate(model, enc, num_beams=4, length_penalty=ALPHA[name], early_stopping=True)
  np.savez(os.path.join(directory, "decode_golden.npz"), encoder_input_tokens=enc, greedy_tokens=greedy,
           beam_tokens=beam, beam_scores=beam_scores, alpha=np.float32(ALPHA[name]))

  config, params = hf_t5.load_hf_t5(directory, dtype="float32")
  model_lm = Transformer(config)
  batch = {"encoder_input_tokens": enc}
  ours = {}
  for method in ("greedy", "beam"):
    cfg = generation.DecodeConfig(method=method, max_decode_length=MAX_NEW, beam_size=4,
                                alpha=ALPHA[name], length_penalty="hf")
    ours[method] = [np.asarray(x) for x in generation.make_decode_fn(model_lm, cfg)(
        params, batch, jax.random.PRNGKey(0), np.arange(len(enc)))]
  eos_rows = int(np.sum(np.any(greedy == 1, axis=1))), int(np.sum(np.any(beam == 1, axis=1)))
  print(f"{name}: rows ending in EOS greedy {eos_rows[0]}/8, beam {eos_rows[1]}/8; "
        f"lm == HF greedy: {np.array_equal(ours['greedy'][0], greedy)}, "
        f"beam: {np.array_equal(ours['beam'][0], beam)}, "
        f"max |score diff| {np.max(np.abs(ours['beam'][1] - beam_scores)):.1e}")
  np.testing.assert_array_equal(ours["greedy"][0], greedy)
  np.testing.assert_array_equal(ours["beam"][0], beam)
  np.testing.assert_allclose(ours["beam"][1], beam_scores, atol=1e-4)


def main() -> None:
  torch.manual_seed(0)
  for name in ALPHA:
    make(name)


if __name__ == "__main__":
  main()
