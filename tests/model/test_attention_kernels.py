"""The fused attention paths (cuDNN, Pallas) against lm's XLA path, and the rules choosing them.

On the CPU the cuDNN call runs with ``implementation="xla"`` (same arguments,
``kernels.cudnn_arguments``) and the Pallas kernels in Pallas's interpreter, so values and
gradients (queries, keys, values and the relative-bias table) are compared here; the
kernels themselves run only on their hardware (the GPU benchmarks; lm.plan compiles them
for TPUs).
"""
import logging

import numpy as np
import pytest

import jax
import jax.numpy as jnp

from lm.model import attention, kernels, masks, position
from lm.model.attention import AttentionMask, choose_kernel, dot_product_attention

N, H = 2, 32


def _mask(kind, q_seg, kv_seg=None, dca=None, packed=True):
  """The AttentionMask the Transformer builds for a stack kind ("encoder", "causal", ...)."""
  q_seg = jnp.asarray(q_seg, jnp.int32)
  kv_seg = q_seg if kv_seg is None else jnp.asarray(kv_seg, jnp.int32)
  if kind == "encoder":
    bool_mask = masks.make_fully_visible_mask(q_seg)
  elif kind in ("causal", "prefix"):
    bool_mask = masks.make_decoder_mask(q_seg, None if dca is None else jnp.asarray(dca))
  else:
    bool_mask = masks.make_cross_attention_mask(q_seg, kv_seg)
  return AttentionMask(bias=masks.mask_to_bias(bool_mask), q_segment_ids=q_seg,
                       kv_segment_ids=kv_seg,
                       decoder_causal_attention=None if dca is None else jnp.asarray(dca),
                       causal=kind in ("causal", "prefix"), packed=packed, name=kind)


def _inputs(b, l, s, seed=0, dtype=jnp.float32):
  rng = np.random.default_rng(seed)
  q, k, v = (jnp.asarray(rng.normal(size=(b, n, N, H)) * 0.5, dtype) for n in (l, s, s))
  table = jnp.asarray(rng.normal(size=(N, 32)), jnp.float32)
  return q, k, v, table


def _relbias(table, l, s, bidirectional):
  buckets = position.relative_position_bucket(
      jnp.arange(s)[None, None, :] - jnp.arange(l)[None, :, None], bidirectional=bidirectional)
  return position.fast_grads.lookup_buckets(table, buckets)  # [1, N, L, S]


def _loss_and_grads(fn, q, k, v, table, valid):
  """fn(q, k, v, table) -> out [B, L, N, H]; loss over the valid (non-padding) queries."""
  w = jnp.asarray(np.random.default_rng(7).normal(size=q.shape), jnp.float32)
  w = w * jnp.asarray(valid, jnp.float32)[:, :, None, None]

  def loss(q, k, v, table):
    out = fn(q, k, v, table).astype(jnp.float32)
    return jnp.sum(jnp.where(w != 0, out, 0.0) * w), out
  (value, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))(
      q, k, v, table)
  return value, out, grads


def _compare(fused, ref, valid, rtol, atol):
  (lf, of, gf), (lr, orf, gr) = fused, ref
  keep = np.asarray(valid, bool)
  np.testing.assert_allclose(np.asarray(of)[keep], np.asarray(orf)[keep], rtol=rtol, atol=atol)
  np.testing.assert_allclose(float(lf), float(lr), rtol=rtol, atol=atol * 10)
  for name, a, b in zip(("dq", "dk", "dv", "dtable"), gf, gr):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    assert np.all(np.isfinite(a)), name
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol * 10, err_msg=name)
  return gr


# --- the rules -------------------------------------------------------------------------

BASE = dict(query_shape=(2, 128, 4, 64), key_shape=(2, 128, 4, 64), dtype=jnp.bfloat16,
            has_position_bias=True, dropout=False, cache=False)


def _rule(impl, platform, mask=None, **overrides):
  mask = _mask("encoder", np.ones((2, 128)), packed=False) if mask is None else mask
  return choose_kernel(impl, platform=platform, mask=mask, **{**BASE, **overrides})


def test_a_local_layer_runs_xla():
  """A sliding window lives only in the mask's bias: no fused kernel may take the call."""
  mask = _mask("encoder", np.ones((2, 128)), packed=False).replace(window=64)
  for impl, platform in (("auto", "tpu"), ("pallas", "tpu"), ("auto", "gpu"), ("cudnn", "gpu")):
    assert _rule(impl, platform, mask=mask) == ("xla", "sliding window 64 (lm's fused kernels get no window)")
  assert _rule("auto", "tpu")[0] == "pallas_flash"  # the same call without a window


@pytest.mark.parametrize("impl,platform,overrides,mask_kind,kernel,reason", [
    ("auto", "cpu", {}, "encoder", "xla", "platform cpu"),
    ("xla", "gpu", {}, "encoder", "xla", "attention_impl='xla'"),
    ("auto", "gpu", {}, "encoder", "cudnn", "cuDNN fused"),
    ("auto", "tpu", {}, "encoder", "pallas_flash", "flash"),
    ("auto", "tpu", {"has_position_bias": False}, "causal", "pallas_splash", "splash"),
    ("auto", "tpu", {}, "causal", "pallas_flash", "flash"),
    ("auto", "tpu", {"has_position_bias": False}, "prefix", "pallas_flash", "flash"),
    ("cudnn", "cpu", {}, "encoder", "xla", "cudnn needs a GPU"),
    ("pallas", "gpu", {}, "encoder", "xla", "pallas needs a TPU"),
    ("auto", "gpu", {"dropout": True}, "encoder", "xla", "dropout"),
    ("auto", "tpu", {"dropout": True}, "encoder", "xla", "dropout"),
    ("auto", "gpu", {"cache": True}, "encoder", "xla", "KV-cache"),
    ("auto", "gpu", {"dtype": jnp.float32}, "encoder", "xla", "float32 activations"),
    ("auto", "gpu", {"query_shape": (2, 127, 4, 64)}, "encoder", "xla", "odd length"),
    ("auto", "gpu", {"query_shape": (2, 128, 4, 256), "key_shape": (2, 128, 4, 256)},
     "encoder", "xla", "head_dim 256"),
    ("auto", "gpu", {}, "packed", "xla", "packed rows"),
    ("auto", "gpu", {}, "prefix", "xla", "prefix-LM"),
    ("auto", "tpu", {"query_shape": (2, 114, 4, 64)}, "encoder", "xla", "multiple of 128"),
    ("auto", "tpu", {}, "nosegments", "xla", "no segment ids"),
    # Attention-logit soft-capping (Gemma 2): none of the fused kernels lm calls caps.
    ("auto", "gpu", {"softcap": True}, "encoder", "xla", "soft-capping"),
    ("pallas", "tpu", {"softcap": True, "has_position_bias": False}, "causal", "xla",
     "soft-capping"),
    ("auto", "tpu", {"softcap": True}, "encoder", "xla", "soft-capping"),
])
def test_choose_kernel_rules_and_reasons(impl, platform, overrides, mask_kind, kernel, reason):
  ones = np.ones((2, 128))
  mask = {"encoder": _mask("encoder", ones, packed=False),
          "causal": _mask("causal", ones, packed=False),
          "prefix": _mask("prefix", ones, dca=np.ones((2, 128)), packed=False),
          "packed": _mask("encoder", ones, packed=True),
          "nosegments": AttentionMask(bias=jnp.zeros((1, 1, 128, 128)))}[mask_kind]
  got, why = _rule(impl, platform, mask, **overrides)
  assert (got, reason in why) == (kernel, True), why


def test_unknown_attention_impl_is_refused():
  with pytest.raises(ValueError, match="unknown attention_impl 'flash'"):
    _rule("flash", "gpu")


def test_the_choice_is_logged_once_per_stack_and_reason(caplog):
  attention._LOGGED.clear()
  q, k, v, _ = _inputs(1, 8, 8)
  mask = _mask("encoder", np.ones((1, 8)))
  with caplog.at_level(logging.INFO):
    for _ in range(3):
      dot_product_attention(q, k, v, mask=mask, impl="auto")
    dot_product_attention(q, k, v, mask=mask, impl="xla")
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("attention:")]
  assert lines == ["attention: encoder runs xla (platform cpu: no fused kernel (XLA is lm's cpu "
                   "path))", "attention: encoder runs xla (attention_impl='xla')"]


# --- cuDNN: the exact call, run through XLA -----------------------------------------------

def _xla_reference(mask, bidirectional, with_bias, dtype):
  def fn(q, k, v, table):
    bias = _relbias(table, q.shape[1], k.shape[1], bidirectional) if with_bias else None
    return dot_product_attention(q, k, v, bias, mask=mask, impl="xla", dtype=dtype)
  return fn


@pytest.mark.parametrize("dtype,tol", [
    (jnp.float32, 2e-5), pytest.param(jnp.bfloat16, 6e-2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("kind", ["encoder", "causal", "cross"])
def test_cudnn_arguments_through_xla_match_lms_attention(kind, dtype, tol):
  b, l, s = 2, 16, 12 if kind == "cross" else 16
  q, k, v, table = _inputs(b, l, s, dtype=dtype)
  q_len, kv_len = [16, 11], [s, 7]
  q_seg = (np.arange(l)[None] < np.array(q_len)[:, None]).astype(np.int32)
  kv_seg = (np.arange(s)[None] < np.array(kv_len)[:, None]).astype(np.int32)
  mask = _mask(kind, q_seg, kv_seg if kind == "cross" else None, packed=False)
  with_bias = kind != "cross"

  def fused(q, k, v, table):
    bias = _relbias(table, l, s, kind == "encoder") if with_bias else None
    return kernels.cudnn_attention(q, k, v, mask, bias, implementation="xla", dtype=dtype)
  args, kwargs = kernels.cudnn_arguments(q, k, v, mask, _relbias(table, l, s, True))
  assert kwargs["scale"] == 1.0 and kwargs["is_causal"] == (kind == "causal")
  np.testing.assert_array_equal(kwargs["query_seq_lengths"], q_len)
  np.testing.assert_array_equal(kwargs["key_value_seq_lengths"], kv_len if kind == "cross" else q_len)
  assert args[3].shape == (1, N, l, s) and args[3].dtype == dtype  # the bias alone, [1, N, L, S]
  grads = _compare(_loss_and_grads(fused, q, k, v, table, q_seg),
                   _loss_and_grads(_xla_reference(mask, kind == "encoder", with_bias, dtype),
                                   q, k, v, table, q_seg), q_seg, tol, tol)
  assert (np.abs(np.asarray(grads[3])).max() > 0) == with_bias  # the bias table trains


def test_cudnn_path_poisons_rows_that_lengths_cannot_express():
  q, k, v, _ = _inputs(2, 8, 8)
  packed = np.array([[1, 1, 1, 2, 2, 2, 0, 0], [1] * 8])
  out = jax.jit(lambda q, k, v: kernels.cudnn_attention(
      q, k, v, _mask("encoder", packed, packed=False), None, implementation="xla",
      dtype=jnp.float32))(q, k, v)
  assert np.all(np.isnan(np.asarray(out)))
  hole = np.array([[1, 1, 0, 1, 1, 1, 0, 0], [1] * 8])  # padding before a token
  assert not bool(kernels.lengths_hold(jnp.asarray(hole)))
  assert bool(kernels.lengths_hold(jnp.asarray([[1, 1, 0], [0, 0, 0], [1, 1, 1]])))


# --- Pallas kernels, in the interpreter --------------------------------------------------

def _packed_segments(l):
  """Two rows of length l: three packed examples then padding; one example then padding."""
  a = np.zeros(l, np.int32)
  a[: l // 4] = 1
  a[l // 4: l // 2 + 5] = 2
  a[l // 2 + 5: l - 9] = 3
  b = (np.arange(l) < l - 30).astype(np.int32)
  return np.stack([a, b])


# Every mask kind in float32; bfloat16 once per kernel (flash with the bias, splash), whose
# rounding does not depend on the mask (interpret mode costs ~10-40 s a case on the CPU).
@pytest.mark.slow
@pytest.mark.parametrize("kind,dtype,tol", [
    *((kind, jnp.float32, 2e-5) for kind in ("encoder", "causal", "causal_nobias", "prefix", "cross")),
    ("encoder", jnp.bfloat16, 6e-2), ("causal_nobias", jnp.bfloat16, 6e-2)])
def test_pallas_kernels_match_lms_attention(kind, dtype, tol):
  l = s = 128
  q, k, v, table = _inputs(2, l, s, seed=3, dtype=dtype)
  seg = _packed_segments(l)
  dca = None
  if kind == "prefix":  # a prefix at the start of each segment
    dca = np.stack([(seg[0] > 0) & (np.arange(l) % 32 < 20), np.arange(l) < 40]).astype(np.int32)
  # cross: every decoder segment has its encoder segment (the packing contract)
  kv_seg = np.roll(_packed_segments(l), 3, axis=1) if kind == "cross" else None
  mask = _mask("cross" if kind == "cross" else "causal" if kind == "causal_nobias" else kind,
               seg, kv_seg, dca=dca)
  with_bias = kind in ("encoder", "causal", "prefix")

  def fused(q, k, v, table):
    bias = _relbias(table, l, s, kind == "encoder") if with_bias else None
    return dot_product_attention(q, k, v, bias, mask=mask, impl="pallas", platform="tpu",
                                 interpret=True, dtype=dtype)
  want = "pallas_splash" if kind == "causal_nobias" else "pallas_flash"
  assert choose_kernel("pallas", platform="tpu", query_shape=q.shape, key_shape=k.shape,
                       dtype=dtype, mask=mask, has_position_bias=with_bias, dropout=False,
                       cache=False)[0] == want
  valid = seg != 0
  grads = _compare(_loss_and_grads(fused, q, k, v, table, valid),
                   _loss_and_grads(_xla_reference(mask, kind == "encoder", with_bias, dtype),
                                   q, k, v, table, valid), valid, tol, tol)
  assert (np.abs(np.asarray(grads[3])).max() > 0) == with_bias


def test_grouped_query_attention_reaches_the_fused_kernel_with_repeated_heads():
  """GQA keys/values (K = 1 of N = 2 heads) run the Pallas flash kernel (interpreted) after
  the heads are repeated: values and gradients equal the XLA path's."""
  q, k, v, table = _inputs(1, 128, 128, seed=3)
  k, v = k[:, :, :1], v[:, :, :1]
  mask = _mask("encoder", np.ones((1, 128)), packed=False)

  def run(impl):
    return lambda q, k, v, table: dot_product_attention(
        q, k, v, _relbias(table, 128, 128, True), mask=mask, impl=impl, platform="tpu",
        interpret=True)
  valid = np.ones((1, 128), bool)
  _compare(_loss_and_grads(run("pallas"), q, k, v, table, valid),
           _loss_and_grads(run("xla"), q, k, v, table, valid), valid, 2e-5, 2e-5)


# --- the model: the CPU path, the config and the checkpoint signature ---------------------

@pytest.mark.parametrize("mask_type", ["encoder_decoder", "prefix_lm"])
def test_auto_on_the_cpu_is_exactly_the_xla_path(mask_type):
  """On the CPU "auto" traces to the same program as "xla" (lm's CPU path), gradients too."""
  from lm.model.transformer import Transformer
  from model_helpers import random_params, tiny
  rng = np.random.default_rng(0)
  tokens = rng.integers(2, 30, (2, 8)).astype(np.int32)
  batch = {"decoder_input_tokens": tokens, "decoder_target_tokens": tokens}
  if mask_type == "encoder_decoder":
    batch["encoder_input_tokens"] = tokens
  else:
    batch["decoder_causal_attention"] = (np.arange(8) < 3).astype(np.int32)[None].repeat(2, 0)
  jaxprs = []
  for impl in ("auto", "xla"):
    model = Transformer(tiny(mask_type=mask_type, attention_impl=impl))
    params = random_params(model, batch)
    loss = lambda p, model=model: jnp.sum(model.apply({"params": p}, batch) ** 2)
    jaxprs.append(str(jax.make_jaxpr(jax.grad(loss))(params)))
  assert jaxprs[0] == jaxprs[1]


def test_attention_impl_changes_no_parameter_and_no_checkpoint_signature(tmp_path):
  import dataclasses
  import json
  from configs import t5
  from lm import config as config_lib
  from lm.checkpoint import signature
  from lm.model.transformer import Transformer
  from model_helpers import tiny
  batch = {"decoder_input_tokens": np.zeros((1, 4), np.int32),
           "encoder_input_tokens": np.zeros((1, 4), np.int32)}
  shapes = [jax.tree.map(lambda x: x.shape, jax.eval_shape(
      Transformer(tiny(attention_impl=impl)).init, jax.random.PRNGKey(0), batch))
      for impl in ("xla", "cudnn", "pallas", "auto")]
  assert all(s == shapes[0] for s in shapes)
  sigs = [signature.run_signature(dataclasses.asdict(tiny(attention_impl=impl)), {"params": {}})
          for impl in ("xla", "pallas")]
  assert sigs[0] == sigs[1] and "attention_impl" not in sigs[0]["model"]
  # A checkpoint written before the field existed has the same hash.
  old = {k: v for k, v in dataclasses.asdict(tiny()).items() if k != "attention_impl"}
  assert signature.run_signature(old, {"params": {}})["model_hash"] == sigs[0]["model_hash"]
  # An old run's config.json (no attention_impl) loads, defaults to "auto", and takes an override.
  config = config_lib.derive(t5.get_config("runlocal"))
  assert config.model.attention_impl == "auto"
  raw = json.loads(config.to_json_best_effort())
  del raw["model"]["attention_impl"]
  (tmp_path / "config.json").write_text(json.dumps(raw))
  loaded = config_lib.load_config_json(str(tmp_path / "config.json"))
  assert config_lib.model_config(loaded).attention_impl == "auto"
  changed = config_lib.apply_overrides(loaded, ["--config.model.attention_impl=xla"])
  assert config_lib.model_config(changed).attention_impl == "xla"
  with pytest.raises(ValueError, match="unknown attention_impl 'fast'"):
    tiny(attention_impl="fast")


def _model_grads(cfg, batch, packed_rows=True):
  from lm.model.transformer import Transformer
  from model_helpers import random_params
  model = Transformer(cfg, packed_rows=packed_rows)
  params = random_params(model, batch)
  weights = jnp.asarray(batch["decoder_target_tokens"] != 0, jnp.float32)

  def loss(p):
    logits = model.apply({"params": p}, batch)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    nll = -jnp.take_along_axis(logp, batch["decoder_target_tokens"][..., None], -1)[..., 0]
    return jnp.sum(nll * weights) / jnp.sum(weights), logits
  (value, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
  return float(value), np.asarray(logits, np.float32), grads


@pytest.mark.slow
def test_the_whole_model_on_the_cudnn_path_matches_xla(monkeypatch):
  """T5 (encoder, causal decoder with its bias, cross-attention) with the cuDNN call run
  through XLA: same loss, logits and gradients as "xla"; the bias tables' gradients too."""
  import functools
  from model_helpers import tiny
  rng = np.random.default_rng(0)
  enc = rng.integers(2, 30, (2, 16)).astype(np.int32)
  enc[1, 11:] = 0
  dec = rng.integers(2, 30, (2, 8)).astype(np.int32)
  dec[1, 6:] = 0
  batch = {"encoder_input_tokens": enc, "decoder_target_tokens": dec,
           "decoder_input_tokens": np.c_[np.zeros((2, 1), np.int32), dec[:, :-1]] * (dec != 0)}
  cfg = tiny(dtype="bfloat16", head_dim=8)
  want = _model_grads(cfg.replace(attention_impl="xla"), batch)
  monkeypatch.setattr(attention, "compile_platform", lambda: "gpu")
  monkeypatch.setattr(kernels, "cudnn_attention",
                      functools.partial(kernels.cudnn_attention, implementation="xla"))
  calls = []
  monkeypatch.setattr(attention, "_log_choice", lambda *a: calls.append(a[:2]))
  got = _model_grads(cfg.replace(attention_impl="auto"), batch, packed_rows=False)
  assert sorted(set(calls)) == [("decoder cross-attention", "cudnn"),
                                ("decoder self-attention", "cudnn"),
                                ("encoder self-attention", "cudnn")]
  keep = dec != 0
  np.testing.assert_allclose(got[1][keep], want[1][keep], rtol=5e-2, atol=5e-2)
  assert got[0] == pytest.approx(want[0], rel=2e-2)
  flat_got = dict(jax.tree_util.tree_leaves_with_path(got[2]))
  for path, w in jax.tree_util.tree_leaves_with_path(want[2]):
    g = np.asarray(flat_got[path], np.float32)
    w = np.asarray(w, np.float32)
    scale = np.abs(w).max() + 1e-6
    assert np.abs(g - w).max() <= 0.1 * scale, jax.tree_util.keystr(path)
    if "rel_embedding" in jax.tree_util.keystr(path):
      assert np.abs(g).max() > 0
  # The same model with rows that may be packed falls back to xla on every stack.
  calls.clear()
  _model_grads(cfg.replace(attention_impl="auto"), batch, packed_rows=True)
  assert {k for _, k in calls} == {"xla"}


@pytest.mark.slow
def test_pallas_under_a_mesh_runs_in_shard_map_with_the_same_gradients():
  """Batch over (data, fsdp) and heads over tensor: the kernel runs per shard, and the
  [1, N, L, S] bias's gradient is summed over the batch shards."""
  from lm import partitioning
  l = 128
  q, k, v, table = _inputs(4, l, l, seed=5)
  seg = np.concatenate([_packed_segments(l), _packed_segments(l)[::-1]])
  mask = _mask("encoder", seg)

  def fused(q, k, v, table):
    return dot_product_attention(q, k, v, _relbias(table, l, l, True), mask=mask,
                                 impl="pallas", platform="tpu", interpret=True)
  valid = seg != 0
  want = _loss_and_grads(fused, q, k, v, table, valid)
  mesh = partitioning.make_mesh((1, 2, 2), devices=jax.devices()[:4])
  with partitioning.axis_rules(mesh):
    got = _loss_and_grads(fused, q, k, v, table, valid)
  _compare(got, want, valid, 1e-5, 1e-5)
