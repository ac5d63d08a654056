"""lm.keypaths: the "a/b/c" leaf names recorded in checkpoints (signatures, checksums)."""
import numpy as np

import flax
import jax

from lm import keypaths


@flax.struct.dataclass
class State:
  step: int
  params: dict
  opt_state: tuple


STATE = State(step=np.int32(3),
              params={"decoder": {"layers_0": {"mlp": {"wo": np.zeros((2, 3))}},
                                  "layers": {"mlp": {"wi": np.zeros((4, 2, 5))}}}},
              opt_state=(np.zeros(1), [np.ones(2)]))


def test_names_of_dict_attribute_and_sequence_keys():
  assert [name for name, _ in keypaths.named_leaves(STATE)] == [
      "step", "params/decoder/layers/mlp/wi", "params/decoder/layers_0/mlp/wo",
      "opt_state/0", "opt_state/1/0"]
  path = jax.tree_util.tree_flatten_with_path(STATE)[0][2][0]
  assert keypaths.path_names(path) == ("params", "decoder", "layers_0", "mlp", "wo")
  assert keypaths.path_str(path) == "params/decoder/layers_0/mlp/wo"


def test_flattened_index_keys_name_by_index():
  key = jax.tree_util.FlattenedIndexKey(2)
  assert keypaths.key_name(key) == "2"


def test_in_scanned_stack():
  paths = {keypaths.path_str(p): keypaths.in_scanned_stack(p)
           for p, _ in jax.tree_util.tree_flatten_with_path(STATE.params)[0]}
  assert paths == {"decoder/layers/mlp/wi": True, "decoder/layers_0/mlp/wo": False}


def test_is_leaf_is_honoured():
  tree = {"a": {"b": 1, "c": 2}}
  assert keypaths.named_leaves(tree, is_leaf=lambda x: isinstance(x, dict) and "b" in x) == [
      ("a", {"b": 1, "c": 2})]
