"""Pure train / eval steps and the train state.

    state = create_train_state(rng, batch, model=model, tx=tx)
    step = functools.partial(train_step, model=model, tx=tx, schedule=schedule,
                             z_loss=1e-4, normalization="num_target_tokens")
    state, metrics = jax.jit(step, donate_argnums=0)(state, batch)

No I/O, logging or device_get here (lm/train.py does that). Metrics come back as
`{name: (sum, weight)}` float32 scalar pairs; aggregate them with lm/metrics.py:
  loss           (sum of per-token loss incl. z-loss, target tokens)
  cross_entropy  (loss without the z-loss term, target tokens)
  z_loss         (sum of the z-loss term, target tokens)
  accuracy       (correctly predicted target tokens, target tokens)
  target_tokens  (target tokens in the batch, 1)   -> totals() = tokens with a loss
  tokens         (non-padding input + target tokens, 1)  -> for throughput
  grad_norm      (global norm of the normalised gradient, 1)   [train only]
  learning_rate  (lr used for this update, 1)                  [train only]

Batch: the feature dict of docs/architecture.md ("The batch contract") (`decoder_target_tokens` [B, Lt] int32,
`decoder_loss_weights` [B, Lt] float32 0/1, and the model's inputs); it is passed to
the model whole.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from lm import losses
from lm.model.transformer import logits_kernel


@flax.struct.dataclass
class TrainState:
  """Everything a train step updates; a pytree of arrays only (checkpointed whole).

  Attributes:
    step: int32[] number of optimizer updates done.
    params: unboxed model params (plain arrays).
    opt_state: optax state for `params`.
    rng: PRNG key (typed key array); dropout uses fold_in(rng, step).
  """
  step: jax.Array
  params: Any
  opt_state: Any
  rng: jax.Array


def create_train_state(rng: jax.Array, batch: Mapping[str, Any], *, model: nn.Module,
                       tx: optax.GradientTransformation) -> TrainState:
  """Initialises params (unboxed) and optimizer state.

  Args:
    rng: PRNG key; split into the init key and the state's dropout key.
    batch: a feature dict with the training shapes (values are not used; a batch of
      zeros with B=1 is enough: params do not depend on B).
    model: the Transformer module.
    tx: the optimizer.

  Returns:
    TrainState at step 0. Jit this with `out_shardings=state_shardings(...)` to create
    the state directly sharded (see lm/partitioning.py).
  """
  init_rng, state_rng = jax.random.split(rng)
  params = nn.meta.unbox(model.init(init_rng, batch)["params"])
  return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                    opt_state=tx.init(params), rng=state_rng)


def abstract_train_state(rng: jax.Array, batch: Mapping[str, Any], *, model: nn.Module,
                         tx: optax.GradientTransformation) -> tuple[TrainState, Any]:
  """Shapes of the train state without allocating it (jax.eval_shape).

  Returns:
    (abstract TrainState of ShapeDtypeStructs, abstract BOXED params carrying the
    logical axis names), the inputs of `partitioning.state_shardings`.
  """
  boxed = jax.eval_shape(lambda r, b: model.init(r, b)["params"], rng, batch)
  state = jax.eval_shape(lambda r, b: create_train_state(r, b, model=model, tx=tx), rng, batch)
  return state, boxed


def _targets_and_weights(batch: Mapping[str, Any]) -> tuple[jax.Array, jax.Array]:
  targets = batch["decoder_target_tokens"]
  weights = batch.get("decoder_loss_weights")
  if weights is None:
    weights = (targets > 0).astype(jnp.float32)
  return targets, weights.astype(jnp.float32)


def _count_tokens(batch: Mapping[str, Any]) -> jax.Array:
  n = jnp.sum(batch["decoder_target_tokens"] > 0)
  if "encoder_input_tokens" in batch:
    n = n + jnp.sum(batch["encoder_input_tokens"] > 0)
  return n.astype(jnp.float32)


def _loss_sums(params: Any, batch: Mapping[str, Any], dropout_rng: jax.Array | None, *,
               model: nn.Module, label_smoothing: float, z_loss: float,
               tiled_chunk_tokens: int = 0):
  """Forward pass; returns (loss_sum, sums) with float32 scalar sums that add over
  microbatches: loss, z_loss, weight (target tokens), correct, tokens. With
  `tiled_chunk_tokens` > 0 the output projection, loss and accuracy run that many tokens at
  a time (`losses.tiled_cross_entropy`: the same sums and gradients, no [B, L, V] logits)."""
  enable_dropout = dropout_rng is not None
  rngs = {"dropout": dropout_rng} if enable_dropout else None
  method = "final_hidden" if tiled_chunk_tokens else None
  out = model.apply({"params": params}, batch, enable_dropout=enable_dropout, rngs=rngs,
                    method=method)
  targets, weights = _targets_and_weights(batch)
  if out.shape[:2] != targets.shape:
    raise ValueError(f"decoder_target_tokens has shape {targets.shape} but the model's logits "
                     f"cover {out.shape[:2]} (batch, length); give decoder_input_tokens and "
                     "decoder_target_tokens the same shape.")
  if tiled_chunk_tokens:
    kernel, scale = logits_kernel(params, model.config)
    loss_sum, z_sum, weight_sum, correct = losses.tiled_cross_entropy(
        out, kernel, targets, weights, chunk=int(tiled_chunk_tokens), logits_scale=scale,
        label_smoothing=label_smoothing, z_loss=z_loss)
  else:
    loss_sum, z_sum, weight_sum = losses.weighted_cross_entropy(
        out, targets, weights, label_smoothing=label_smoothing, z_loss=z_loss)
    correct, _ = losses.weighted_accuracy(out, targets, weights)
  sums = {"loss": loss_sum, "z_loss": z_sum, "weight": weight_sum, "correct": correct,
          "tokens": _count_tokens(batch)}
  return loss_sum, sums


def _metrics_from_sums(sums: Mapping[str, jax.Array]) -> dict[str, tuple[jax.Array, jax.Array]]:
  """Raw sums of one (accumulated) batch -> {name: (sum, weight)} metrics."""
  w, one = sums["weight"], jnp.ones((), jnp.float32)
  return {
      "loss": (sums["loss"], w),
      "cross_entropy": (sums["loss"] - sums["z_loss"], w),
      "z_loss": (sums["z_loss"], w),
      "accuracy": (sums["correct"], w),
      "target_tokens": (w, one),
      "tokens": (sums["tokens"], one),
  }


def split_microbatches(batch: Mapping[str, Any], num_microbatches: int) -> dict[str, jax.Array]:
  """[B, ...] -> [k, B/k, ...] with microbatch i = rows i, i+k, i+2k, ...

  Strided (not contiguous) so that when rows are sharded over devices, every microbatch
  keeps rows on every device (each device's local rows are split k ways).
  """
  out = {}
  for name, x in batch.items():
    b = x.shape[0]
    if b % num_microbatches:
      raise ValueError(f"batch size {b} (feature {name!r}) is not divisible by "
                       f"optim.grad_accum_steps={num_microbatches}.")
    x = x.reshape((b // num_microbatches, num_microbatches) + x.shape[1:])
    out[name] = jnp.swapaxes(x, 0, 1)
  return out


def train_step(state: TrainState, batch: Mapping[str, jax.Array], *, model: nn.Module,
               tx: optax.GradientTransformation, schedule: Callable[[Any], Any] | None = None,
               z_loss: float = 0.0, label_smoothing: float = 0.0,
               normalization: str = "num_target_tokens", normalizing_constant: float = 1.0,
               num_microbatches: int = 1, dropout: bool = True,
               tiled_chunk_tokens: int = 0) -> tuple[TrainState, dict]:
  """One optimizer update on `batch` (optionally accumulated over microbatches).

  The gradient is d(loss_sum)/dparams summed over microbatches, then divided by the
  normaliser of the WHOLE batch (`losses.normalize_loss`), so accumulation over k
  microbatches equals one step on the large batch.

  Args:
    state: TrainState.
    batch: feature dict of [B, ...] arrays.
    model: the Transformer module.
    tx: optimizer (from lm.optim.make_optimizer).
    schedule: lr schedule, only to report `learning_rate` (optax applies it itself).
    z_loss, label_smoothing: loss settings (config.loss).
    normalization, normalizing_constant: "num_target_tokens" | "constant" | "none".
    num_microbatches: k = optim.grad_accum_steps; B must be divisible by k.
    dropout: False disables dropout even if the model config has a rate.
    tiled_chunk_tokens: > 0: the loss by `losses.tiled_cross_entropy` in chunks of this
      many tokens (config.loss.tiled_chunk_tokens); 0: on the whole logits.

  Returns:
    (new TrainState with step + 1, metrics {name: (sum, weight)}).
  """
  if num_microbatches < 1:
    raise ValueError(f"num_microbatches must be >= 1, got {num_microbatches} "
                     "(optim.grad_accum_steps).")
  step_rng = jax.random.fold_in(state.rng, state.step)

  def grad_and_metrics(params, mbatch, index):
    rng = jax.random.fold_in(step_rng, index) if dropout else None
    grad_fn = jax.grad(_loss_sums, has_aux=True)
    return grad_fn(params, mbatch, rng, model=model, label_smoothing=label_smoothing,
                   z_loss=z_loss, tiled_chunk_tokens=tiled_chunk_tokens)

  if num_microbatches == 1:
    grads, sums = grad_and_metrics(state.params, batch, 0)
  else:
    micro = split_microbatches(batch, num_microbatches)

    def body(carry, xs):
      index, mbatch = xs
      g, m = grad_and_metrics(state.params, mbatch, index)
      return jax.tree.map(jnp.add, carry, (g, m)), None

    zero_batch = jax.tree.map(lambda x: x[0], micro)
    shapes = jax.eval_shape(lambda: grad_and_metrics(state.params, zero_batch, 0))
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    (grads, sums), _ = jax.lax.scan(
        body, zeros, (jnp.arange(num_microbatches), micro))

  metrics = _metrics_from_sums(sums)
  scale = losses.normalize_loss(jnp.ones((), jnp.float32), sums["weight"], normalization,
                                normalizing_constant)
  grads = jax.tree.map(lambda g: g * scale.astype(g.dtype), grads)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  one = jnp.ones((), jnp.float32)
  metrics["grad_norm"] = (optax.global_norm(grads), one)
  lr = schedule(state.step) if schedule is not None else jnp.nan
  metrics["learning_rate"] = (jnp.asarray(lr, jnp.float32), one)
  new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
  return new_state, metrics


def eval_step(params: Any, batch: Mapping[str, jax.Array], *, model: nn.Module,
              z_loss: float = 0.0, label_smoothing: float = 0.0,
              tiled_chunk_tokens: int = 0) -> dict:
  """Loss / accuracy of `params` on `batch` without dropout.

  Returns:
    metrics {name: (sum, weight)}: loss, cross_entropy, z_loss, accuracy, target_tokens,
    tokens (see the module docstring).
  """
  _, sums = _loss_sums(params, batch, None, model=model, label_smoothing=label_smoothing,
                       z_loss=z_loss, tiled_chunk_tokens=tiled_chunk_tokens)
  return _metrics_from_sums(sums)
