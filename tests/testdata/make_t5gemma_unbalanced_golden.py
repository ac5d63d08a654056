"""Regenerates the unbalanced T5Gemma golden (9B-2B's shape, tiny): hf_t5gemma/tiny_unbalanced/
and hf_t5gemma/unbalanced_golden.npz; needs torch + transformers, run as
make_t5gemma_golden.py is (its docstring):

    python -c "import sys, runpy; sys.path.append('/tmp/tfvenv/lib/python3.11/site-packages'); \
      runpy.run_path('tests/testdata/make_t5gemma_unbalanced_golden.py', run_name='__main__')"

The encoder is wider than the decoder and has its own heads, head width and MLP (24 wide, 6
query and 3 key/value heads of 4, MLP 40, 3 layers) where the decoder is make_t5gemma_golden's
module (16 wide, 4 and 2 heads of 8, MLP 24, 2 layers), and the decoder's cross-attention
projects its keys and values from the encoder's 24 (`cross_attention_hidden_size`), as
T5Gemma 9B-2B (encoder 3584, decoder 2304). Weights, inputs and the encoder window's reading
as make_t5gemma_golden.py. The npz holds encoder_input_tokens, decoder_input_tokens, HF's
logits and greedy tokens; the script checks lm's logits, greedy decoding and a round trip
through save_hf_t5gemma before writing, and stops on a mismatch.
"""
from __future__ import annotations

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import jax  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from make_t5gemma_golden import (ATOL, MAX_NEW, MODULE, OUT, WINDOW, fixed_inputs,  # noqa: E402
                                 hf_greedy, hf_logits, lm_logits, set_weights)
from lm import generation  # noqa: E402
from lm.checkpoint import hf_t5gemma  # noqa: E402
from lm.model.transformer import Transformer  # noqa: E402

ENCODER = dict(MODULE, hidden_size=24, intermediate_size=40, num_attention_heads=6,
               num_key_value_heads=3, head_dim=4, num_hidden_layers=3)


def hf_config(encoder_window: int = WINDOW) -> transformers.T5GemmaConfig:
  enc = dict(ENCODER, sliding_window=encoder_window)
  dec = dict(MODULE, num_hidden_layers=2, cross_attention_hidden_size=ENCODER["hidden_size"])
  return transformers.T5GemmaConfig(encoder=enc, decoder=dec, vocab_size=64, dropout_rate=0.0,
                                    attention_dropout=0.0, tie_word_embeddings=True,
                                    attn_implementation="eager")


def main() -> None:
  torch.manual_seed(0)
  directory = os.path.join(OUT, "tiny_unbalanced")
  model = transformers.T5GemmaForConditionalGeneration(hf_config()).eval()
  set_weights(model)
  model.save_pretrained(directory, safe_serialization=True)
  original = transformers.T5GemmaForConditionalGeneration(hf_config(WINDOW - 1)).eval()
  original.load_state_dict(model.state_dict())
  enc, dec = fixed_inputs()
  logits = hf_logits(original, enc, dec)
  greedy = hf_greedy(original, enc)

  config, params = hf_t5gemma.load_hf_t5gemma(directory)
  assert config.encoder_emb_dim == 24 and config.emb_dim == 16, config
  diff = float(np.max(np.abs(lm_logits(config, params, enc, dec) - logits)))
  cfg = generation.DecodeConfig(method="greedy", max_decode_length=MAX_NEW)
  ours_greedy = np.asarray(generation.make_decode_fn(Transformer(config), cfg)(
      params, {"encoder_input_tokens": enc}, jax.random.PRNGKey(0), np.arange(len(enc)))[0])
  with tempfile.TemporaryDirectory() as tmp:  # export: transformers reads lm's directory
    hf_t5gemma.save_hf_t5gemma(tmp, config, params)
    back = transformers.T5GemmaForConditionalGeneration.from_pretrained(
        tmp, attn_implementation="eager").eval()
    back.config.encoder.sliding_window = WINDOW - 1
    reread = transformers.T5GemmaForConditionalGeneration(back.config).eval()
    reread.load_state_dict(back.state_dict())
    export_diff = float(np.max(np.abs(hf_logits(reread, enc, dec) - logits)))
  print(f"max |lm - HF| {diff:.2e}, export {export_diff:.2e}; greedy HF {greedy.tolist()} "
        f"lm {ours_greedy.tolist()}")
  assert diff < ATOL and export_diff < ATOL, (diff, export_diff)
  np.testing.assert_array_equal(ours_greedy, greedy)
  np.savez(os.path.join(OUT, "unbalanced_golden.npz"), encoder_input_tokens=enc,
           decoder_input_tokens=dec, logits=logits, greedy_tokens=greedy,
           versions=np.array([transformers.__version__, torch.__version__.split("+")[0]]))


if __name__ == "__main__":
  main()
