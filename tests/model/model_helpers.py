"""Shared by the model tests: a tiny config and fast random params."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lm.model.transformer import TransformerConfig

V = 32  # vocabulary of the tiny test models


def runtime_str(x: str) -> str:
  """A str equal to x but not the interned literal (shows `is` where `==` is meant)."""
  return "".join(list(x))


def tiny(**kw) -> TransformerConfig:
  """A float32 model small enough to compile in a second (1+1 layers unless overridden)."""
  base = dict(vocab_size=V, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32,
              num_encoder_layers=1, num_decoder_layers=1, dtype="float32")
  if kw.get("mask_type", "encoder_decoder") != "encoder_decoder":
    base["num_encoder_layers"] = 0
  base.update(kw)
  return TransformerConfig(**base)


def random_params(model: nn.Module, batch, seed: int = 0):
  """Boxed params with random values, built from eval_shape (no init compile, fast).

  Norm scales are 1 + 0.1 N(0, 1), everything else 0.3 N(0, 1), so every weight matters.
  """
  abstract = jax.eval_shape(model.init, jax.random.PRNGKey(0), batch)["params"]
  rng = np.random.default_rng(seed)

  def fill(path, leaf):
    if "scale" in jax.tree_util.keystr(path):
      value = 1.0 + 0.1 * rng.normal(size=leaf.value.shape)
    else:
      value = 0.3 * rng.normal(size=leaf.value.shape)
    return leaf.replace(value=jnp.asarray(value, jnp.float32))
  return jax.tree_util.tree_map_with_path(fill, abstract,
                                          is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
