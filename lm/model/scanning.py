"""Scanned <-> unscanned param trees of the Transformer (``scan_layers``), pure functions.

With ``scan_layers=True`` a stack's ``layers_{i}`` subtrees are one ``layers`` subtree whose
leaves have a leading [num_layers] axis named "layers" (transformer.py's param tree).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


def _unstack_leaf(leaf, i):
  if isinstance(leaf, nn.LogicallyPartitioned):
    if leaf.names[:1] != ("layers",):
      raise ValueError(f"a scanned param's first logical axis must be 'layers', got {leaf.names}"
                       " (is the tree already unscanned?)")
    return leaf.replace(value=leaf.value[i], names=tuple(leaf.names[1:]))
  return leaf[i]


def _stack_leaves(*leaves):
  first = leaves[0]
  if isinstance(first, nn.LogicallyPartitioned):
    value = jnp.stack([l.value for l in leaves])
    return first.replace(value=value, names=("layers",) + tuple(first.names))
  return jnp.stack(leaves)


def _is_boxed(x):
  return isinstance(x, nn.LogicallyPartitioned)


def scan_to_unscanned(params):
  """Scanned params (``{stack}/layers`` with a leading layer axis) -> ``{stack}/layers_{i}``.

  Works on boxed (LogicallyPartitioned) or plain trees; pure, returns a new dict.
  """
  params = dict(params)
  for stack in ("encoder", "decoder"):
    if stack not in params or "layers" not in params[stack]:
      continue
    sub = dict(params[stack])
    layers = sub.pop("layers")
    n = jax.tree_util.tree_leaves(layers, is_leaf=_is_boxed)[0]
    n = (n.value if _is_boxed(n) else n).shape[0]
    for i in range(n):
      sub[f"layers_{i}"] = jax.tree_util.tree_map(lambda x: _unstack_leaf(x, i), layers, is_leaf=_is_boxed)
    params[stack] = sub
  return params


def unscanned_to_scan(params):
  """``{stack}/layers_{i}`` -> scanned ``{stack}/layers`` (leading "layers" axis). Pure."""
  params = dict(params)
  for stack in ("encoder", "decoder"):
    if stack not in params or "layers_0" not in params[stack]:
      continue
    sub = dict(params[stack])
    n = sum(1 for k in sub if k.startswith("layers_"))
    layers = [sub.pop(f"layers_{i}") for i in range(n)]
    sub["layers"] = jax.tree_util.tree_map(_stack_leaves, *layers, is_leaf=_is_boxed)
    params[stack] = sub
  return params


__all__ = ["scan_to_unscanned", "unscanned_to_scan"]
