"""Named remat: the checkpoint_name tags reach JAX and the named policies save exactly them.

The memory side (the policies change XLA's temporaries as lm.plan reports them) is in
tests/test_remat_policies.py.
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import print_saved_residuals

from lm.model.attention import REMAT_NAMES
from lm.model.layers import MLP_REMAT_NAMES
from lm.model.transformer import Transformer
from model_helpers import random_params, tiny

_BATCH = {"encoder_input_tokens": jnp.ones((2, 12), jnp.int32),
          "decoder_input_tokens": jnp.ones((2, 6), jnp.int32),
          "decoder_target_tokens": jnp.ones((2, 6), jnp.int32)}


def _residuals(policy, capsys, **kw):
  """The lines of ``print_saved_residuals`` for the tiny model's forward pass."""
  model = Transformer(tiny(remat_policy=policy, **kw))
  params = random_params(model, _BATCH)
  print_saved_residuals(lambda p: model.apply({"params": p}, _BATCH).sum(), params)
  return capsys.readouterr().out.splitlines()


def _saved(policy, capsys, **kw):
  """{name: count} of the named residuals the backward pass keeps, and the number of
  attention-core residuals (fast_grads._attend_fwd's probabilities and context) it keeps."""
  lines = _residuals(policy, capsys, **kw)
  names = {}
  for line in lines:
    m = re.search(r"named '(\w+)'", line)
    if m:
      names[m.group(1)] = names.get(m.group(1), 0) + 1
  return names, sum("_attend_fwd" in line for line in lines)


def test_every_tag_is_in_the_program():
  """Without remat every tagged activation is saved (autodiff keeps them all), so each
  name occurs: q/k/v/out projections and attention output in each of the 3 attention
  layers (encoder self, decoder self, cross), the MLP's in/wi/hidden/out in its 2."""
  model = Transformer(tiny())
  params = random_params(model, _BATCH)
  text = str(jax.make_jaxpr(lambda p: model.apply({"params": p}, _BATCH))(params))
  for name in REMAT_NAMES + MLP_REMAT_NAMES:
    assert f"name={name}" in text, name


def test_minimal_saves_the_projections_and_attention_output_only(capsys):
  names, core = _saved("minimal", capsys)
  # 3 attention layers: encoder self, decoder self, decoder cross.
  assert names == {name: 3 for name in REMAT_NAMES}
  assert core == 0  # the softmax probabilities are recomputed, not kept


def test_minimal_under_scan_keeps_one_stacked_residual_per_name_and_layer_input(capsys):
  """Scanned (3 layers a stack), a residual is the scan's stacked output (no name in the
  listing): per encoder layer the 5 names and the layer input, per decoder layer 5 for
  self-, 5 for cross-attention and the input; "full" keeps only each stack's inputs."""
  def stacked(policy):
    lines = _residuals(policy, capsys, scan_layers=True, num_encoder_layers=3,
                       num_decoder_layers=3)
    return sum(bool(re.match(r"f32\[3,2,", line)) and "output of scan" in line for line in lines)
  assert stacked("minimal") == 6 + 11 and stacked("full") == 2


def test_minimal_with_mlp_also_saves_the_mlp_products(capsys):
  names, core = _saved("minimal_with_mlp", capsys)
  assert set(names) == set(REMAT_NAMES) | {"mlp_wi"} and core == 0
  assert names["mlp_wi"] == 4  # wi_0 and wi_1 in each of the 2 gated MLPs


def test_full_saves_no_name_and_none_saves_the_attention_core(capsys):
  names, core = _saved("full", capsys)
  assert names == {} and core == 0
  names, core = _saved("none", capsys)  # (dense's own VJP keeps its reshaped inputs)
  assert {"query_proj", "key_proj", "value_proj"} <= set(names) and core > 0


def test_named_policies_keep_the_values_and_gradients():
  """Remat changes what is kept, never the numbers: loss and gradients equal "none"'s."""
  def grads(policy):
    model = Transformer(tiny(remat_policy=policy))
    params = random_params(model, _BATCH, seed=3)
    return jax.grad(lambda p: jnp.sum(model.apply({"params": p}, _BATCH) ** 2))(params)
  want = jax.tree.leaves(grads("none"))
  for policy in ("minimal", "minimal_with_mlp"):
    for g, w in zip(jax.tree.leaves(grads(policy)), want):
      np.testing.assert_allclose(np.asarray(g.value if hasattr(g, "value") else g),
                                 np.asarray(w.value if hasattr(w, "value") else w),
                                 rtol=1e-5, atol=1e-6)
