"""Names of pytree leaves: jax key paths as "a/b/c" strings, the one place lm spells them.

A jax key path (from ``jax.tree_util.tree_flatten_with_path``) is a tuple of keys:
``DictKey(key=...)`` for dicts, ``GetAttrKey(name=...)`` for dataclass / struct fields,
``SequenceKey(idx=...)`` for lists and tuples, ``FlattenedIndexKey(key=...)`` for other
nodes. lm names a leaf by those keys' plain values joined with "/", e.g.
``params/decoder/layers_0/mlp/wo`` in a train state or ``encoder/final_norm/scale`` in a
params tree. Checkpoint signatures and checksums record these names, so they must not
change: tests/test_keypaths.py pins them.

    for name, leaf in named_leaves(params): ...      # ("decoder/layers_0/mlp/wo", array)
"""
from __future__ import annotations

from typing import Any, Callable

import jax


def key_name(key: Any) -> str:
  """One key-path entry as a string: the dict key, attribute name or sequence index."""
  for attr in ("key", "name", "idx"):
    if hasattr(key, attr):
      return str(getattr(key, attr))
  return str(key)


def path_names(path: tuple[Any, ...]) -> tuple[str, ...]:
  """A key path as plain strings, e.g. ("encoder", "layers_0", "mlp", "wi")."""
  return tuple(key_name(k) for k in path)


def path_str(path: tuple[Any, ...]) -> str:
  """A key path as one "/"-joined name, e.g. "encoder/layers_0/mlp/wi"."""
  return "/".join(path_names(path))


def named_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None
                 ) -> list[tuple[str, Any]]:
  """[(path_str, leaf)] for every leaf of ``tree``, in jax's flattening order."""
  return [(path_str(p), x) for p, x in jax.tree_util.tree_flatten_with_path(tree, is_leaf)[0]]


def in_scanned_stack(path: tuple[Any, ...]) -> bool:
  """True for a leaf under a "layers" key: a param (or cache entry) of a scanned stack,
  which carries a leading [num_layers] axis (``TransformerConfig.scan_layers``)."""
  return "layers" in path_names(path)


__all__ = ["key_name", "path_names", "path_str", "named_leaves", "in_scanned_stack"]
