"""Fused attention kernels behind ``attention.dot_product_attention``: cuDNN and Pallas (TPU).

Which kernel a call runs is decided in attention.py (``choose_kernel``); this module only
calls them, each computing what ``fast_grads.attend`` computes (no logit scaling, float32
softmax) for the masks lm builds:

- ``cudnn_arguments`` / ``cudnn_attention``: ``jax.nn.dot_product_attention``; padding by
  query/key sequence lengths, causality by ``is_causal``, the position bias alone as the
  ``bias`` ([1, N, L, S], so cuDNN returns its gradient without a [B, N, L, S] tensor).
  Only for rows of one segment each followed by padding (``AttentionMask.packed`` False);
  a row that breaks that makes the output NaN rather than silently attend across examples.
- ``flash_attention``: the Pallas TPU flash kernel with the ``ab`` bias (position bias plus
  any prefix-LM mask) and segment ids; its custom VJP keeps the [1, N, L, S] bias, not the
  [B, N, L, S] broadcast, alive between the forward and backward passes.
- ``splash_attention``: the Pallas TPU splash kernel, causal with segment ids, no bias.

The Pallas kernels are Mosaic custom calls that XLA cannot partition: under a mesh (``jax
.set_mesh``, as lm's steps run) they run inside ``shard_map`` over the mesh axes that the
logical axis rules give "batch" and "heads". ``interpret=True`` runs them in Pallas's
interpreter (the CPU tests).

Einsum letters: B batch, L query length, S key length, N heads, H head_dim.
"""
from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

# The Pallas TPU kernels' block: sequence lengths must be multiples of it.
PALLAS_BLOCK = 128


# ---------------------------------------------------------------------------------------
# cuDNN (jax.nn.dot_product_attention).

def cudnn_arguments(query, key, value, mask, position_bias) -> tuple[tuple, dict[str, Any]]:
  """The exact arguments of lm's ``jax.nn.dot_product_attention`` call (pure).

  Args:
    query: [B, L, N, H]; key, value: [B, S, N, H] (bfloat16 or float16 for cuDNN).
    mask: ``attention.AttentionMask`` of an unpacked stack (one segment per row, then
      padding): its segment ids give the lengths, ``causal`` gives ``is_causal``.
    position_bias: float32 [1, N, L, S] or None.
  Returns:
    (positional args, keyword args) for ``jax.nn.dot_product_attention`` without
    ``implementation``: (query, key, value, bias) and scale=1.0 (T5 has no logit
    scaling), is_causal, query_seq_lengths, key_value_seq_lengths (int32[B]).
  """
  bias = None if position_bias is None else position_bias.astype(query.dtype)
  q_len = jnp.sum(mask.q_segment_ids != 0, axis=1, dtype=jnp.int32)
  kv_len = jnp.sum(mask.kv_segment_ids != 0, axis=1, dtype=jnp.int32)
  return (query, key, value, bias), dict(
      scale=1.0, is_causal=mask.causal, query_seq_lengths=q_len, key_value_seq_lengths=kv_len)


def lengths_hold(segment_ids):
  """bool[]: every row is segment 1 then padding (what sequence lengths can express)."""
  n = jnp.sum(segment_ids != 0, axis=1, keepdims=True)
  expected = (jnp.arange(segment_ids.shape[1])[None, :] < n).astype(segment_ids.dtype)
  return jnp.all(segment_ids == expected)


def cudnn_attention(query, key, value, mask, position_bias, *, implementation: str = "cudnn",
                    dtype=jnp.bfloat16):
  """``jax.nn.dot_product_attention`` with ``cudnn_arguments``; dtype[B, L, N, H].

  ``implementation="xla"`` runs the same call through XLA (how the CPU tests check the
  arguments). Rows that sequence lengths cannot express (``lengths_hold`` false: several
  segments, or padding before a token) turn the output into NaN.
  """
  args, kwargs = cudnn_arguments(query, key, value, mask, position_bias)
  out = jax.nn.dot_product_attention(*args, implementation=implementation, **kwargs)
  ok = lengths_hold(mask.q_segment_ids) & lengths_hold(mask.kv_segment_ids)
  return jnp.where(ok, out, jnp.nan).astype(dtype)


# ---------------------------------------------------------------------------------------
# Pallas TPU kernels.

def _block(length: int) -> int:
  """The kernels' block along a sequence: 512 where it divides, else 256, else 128."""
  return next(b for b in (512, 256, PALLAS_BLOCK) if length % b == 0)


def _flash_blocks(l: int, s: int):
  from jax.experimental.pallas.ops.tpu import flash_attention as fa
  bq, bk = _block(l), _block(s)
  return fa.BlockSizes(block_q=bq, block_k_major=bk, block_k=bk, block_b=1,
                       block_q_major_dkv=bq, block_k_major_dkv=bk, block_k_dkv=bk,
                       block_q_dkv=bq, block_k_major_dq=bk, block_k_dq=bk, block_q_dq=bq)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _flash(q, k, v, bias, segment_ids, causal, interpret):
  """Flash attention with ab = broadcast(bias) to [B, N, L, S]; q/k/v [B, N, L|S, H]."""
  return _flash_fwd(q, k, v, bias, segment_ids, causal, interpret)[0]


def _run_flash(fn, interpret):
  if not interpret:
    return fn()
  from jax.experimental.pallas import tpu as pltpu
  with pltpu.force_tpu_interpret_mode():
    return fn()


def _flash_fwd(q, k, v, bias, segment_ids, causal, interpret):
  from jax.experimental.pallas.ops.tpu import flash_attention as fa
  b, n, l, _ = q.shape
  ab = None if bias is None else jnp.broadcast_to(bias, (b, n, l, k.shape[2]))
  blocks = _flash_blocks(l, k.shape[2])
  out, res = _run_flash(lambda: fa._flash_attention_fwd(  # noqa: SLF001 - see module doc
      q, k, v, ab, segment_ids, False, causal, 1.0, blocks, False), interpret)
  q, k, v, _, segment_ids, o, lse_l, lse_m = res
  return out, (q, k, v, bias, segment_ids, o, lse_l, lse_m)


def _flash_bwd(causal, interpret, res, d_out):
  """The kernel's backward with ab rebuilt from the [1 or B, N, L, S] bias it was given."""
  from jax.experimental.pallas.ops.tpu import flash_attention as fa
  q, k, v, bias, segment_ids, o, lse_l, lse_m = res
  b, n, l, _ = q.shape
  ab = None if bias is None else jnp.broadcast_to(bias, (b, n, l, k.shape[2]))
  blocks = _flash_blocks(l, k.shape[2])
  dq, dk, dv, ds, _ = _run_flash(lambda: fa._flash_attention_bwd(  # noqa: SLF001
      False, causal, 1.0, blocks, False, (q, k, v, ab, segment_ids, o, lse_l, lse_m), d_out),
      interpret)
  d_bias = None
  if bias is not None:
    d_bias = ds if bias.shape[0] == b else jnp.sum(ds, axis=0, keepdims=True)
    d_bias = d_bias.astype(bias.dtype)
  return dq, dk, dv, d_bias, None


_flash.defvjp(_flash_fwd, _flash_bwd)


def _splash(q, k, v, segment_ids, interpret):
  """Causal splash attention over [B, N, L, H] (vmapped per row)."""
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
  from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm
  _, n, l, _ = q.shape
  s = k.shape[2]
  bq, bk = _block(l), _block(s)
  blocks = sk.BlockSizes(block_q=bq, block_kv=bk, block_kv_compute=bk, block_q_dkv=bq,
                         block_kv_dkv=bk, block_kv_dkv_compute=bk, block_q_dq=bq, block_kv_dq=bk)
  mask = sm.MultiHeadMask([sm.CausalMask((l, s)) for _ in range(n)])
  kernel = sk.make_splash_mha(mask, block_sizes=blocks, head_shards=1, q_seq_shards=1,
                              interpret=interpret)
  seg = None if segment_ids is None else sk.SegmentIds(q=segment_ids.q, kv=segment_ids.kv)
  return jax.vmap(kernel)(q, k, v, segment_ids=seg)


def _mesh_specs():
  """(mesh, batch mesh axes, heads mesh axes) of the mesh being traced under, or None."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh is None or mesh.empty or mesh.size == 1:
    return None
  batch, heads = nn.logical_to_mesh_axes(("batch", "heads"))
  return mesh, batch, heads


def _segments(mask):
  from jax.experimental.pallas.ops.tpu import flash_attention as fa
  return fa.SegmentIds(q=mask.q_segment_ids.astype(jnp.int32),
                       kv=mask.kv_segment_ids.astype(jnp.int32))


def pallas_attention(query, key, value, mask, ab_bias, *, kernel: str, interpret: bool = False,
                     dtype=jnp.float32):
  """A Pallas TPU kernel over lm's layout, under ``shard_map`` when a mesh is set.

  Args:
    query: [B, L, N, H]; key, value: [B, S, N, H].
    mask: ``attention.AttentionMask`` (segment ids, ``causal``).
    ab_bias: float32 [1 or B, N or 1, L, S] added to the logits, or None ("flash" only;
      a head axis of 1 is broadcast to N).
    kernel: "flash" or "splash" (causal, no bias).
    interpret: run in Pallas's interpreter (CPU tests).
    dtype: the result's dtype.
  Returns:
    dtype[B, L, N, H].
  """
  n = query.shape[2]
  q, k, v = (jnp.swapaxes(x, 1, 2) for x in (query, key, value))  # [B, N, L|S, H]
  segments = _segments(mask)
  if ab_bias is not None and ab_bias.shape[1] != n:
    ab_bias = jnp.broadcast_to(ab_bias, (ab_bias.shape[0], n) + ab_bias.shape[2:])
  if kernel == "flash":
    # A prefix-LM mask is not causal over the prefix: it rides in ab_bias instead.
    causal = mask.causal and mask.decoder_causal_attention is None

    def run(q, k, v, bias, seg):
      return _flash(q, k, v, bias, seg, causal, interpret)
  elif kernel == "splash":
    if ab_bias is not None:
      raise ValueError("splash attention takes no bias")
    def run(q, k, v, bias, seg):
      del bias
      return _splash(q, k, v, seg, interpret)
  else:
    raise ValueError(f"unknown Pallas kernel {kernel!r}")
  specs = _mesh_specs()
  if specs is not None:
    mesh, batch, heads = specs
    qkv = P(batch, heads, None, None)
    seg_spec = type(segments)(q=P(batch, None), kv=P(batch, None))
    bias_spec = None if ab_bias is None else P(batch if ab_bias.shape[0] > 1 else None, heads,
                                                None, None)
    run = jax.shard_map(run, mesh=mesh, in_specs=(qkv, qkv, qkv, bias_spec, seg_spec),
                        out_specs=qkv, check_vma=False)
  out = run(q, k, v, ab_bias, segments)
  return jnp.swapaxes(out, 1, 2).astype(dtype)


__all__ = ["PALLAS_BLOCK", "cudnn_arguments", "cudnn_attention", "lengths_hold",
           "pallas_attention"]
