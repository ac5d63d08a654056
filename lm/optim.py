"""Optimizers and learning-rate schedules, built from optax.

    schedule = make_schedule(ScheduleConfig())            # step -> lr
    tx = make_optimizer(OptimConfig(), schedule)          # optax.GradientTransformation

The frozen settings objects here hold the one copy of every default (T5's Adafactor, GPT-3's
AdamW); lm/config.py builds them from a run's config, and gradient accumulation is
lm/steps.py's. Also here: Adafactor's stages of lm's own (`scale_by_factored_rms`,
`scale_by_param_rms`) and `as_t5_matrices`, which factors attention kernels as t5x does.
T5's settings, the factoring and why accumulation is not optax.MultiSteps: docs/configs.md,
'The optimizer and schedule'; the stages' speed: docs/speed.md.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

from lm.keypaths import in_scanned_stack, path_names, path_str

SCHEDULES = ("rsqrt", "cosine", "linear", "constant")
OPTIMIZERS = ("adafactor", "adamw")




@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
  """`config.schedule`: the learning-rate schedule (see `make_schedule`).

  Defaults: T5 pre-training, lr = 1 / sqrt(max(step, 10^4)) (docs/t5_reference.md §3.6).
  """
  name: str = "rsqrt"            # rsqrt | cosine | linear | constant
  base_lr: float = 1.0
  warmup_steps: int = 10_000
  decay_steps: int = 0           # cosine/linear: the step where the decay ends (incl. warmup)
  end_factor: float = 0.0        # cosine/linear: final lr = base_lr * end_factor
  linear_warmup: bool = False    # rsqrt: also ramp linearly over warmup_steps


@dataclasses.dataclass(frozen=True)
class AdafactorConfig:
  """`config.optim.adafactor`; defaults are T5's (docs/t5_reference.md §3.6)."""
  decay_rate: float = 0.8
  decay_offset: int = 0
  factored: bool = True
  multiply_by_parameter_scale: bool = True
  clipping_threshold: float = 1.0  # 0 = off
  momentum: float = 0.0            # 0 = none
  eps: float = 1e-30
  min_dim_size_to_factor: int = 128
  weight_decay_rate: float = 0.0   # 0 = off


@dataclasses.dataclass(frozen=True)
class AdamWConfig:
  """`config.optim.adamw`; defaults are GPT-3's (paper §2.3, Appendix B)."""
  b1: float = 0.9
  b2: float = 0.95
  eps: float = 1e-8
  weight_decay: float = 0.1  # on matrices only


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  """`config.optim`: the optimizer (see `make_optimizer`) and gradient accumulation.

  Attributes:
    name: "adafactor" (T5) or "adamw".
    grad_clip_norm: > 0 clips the global gradient norm before the optimizer; 0 = off
      (T5's default: Adafactor clips its updates itself).
    grad_accum_steps: microbatches per step (lm/steps.py's lax.scan, not optax).
    adafactor, adamw: each optimizer's settings (the one not named is unused).
  """
  name: str = "adafactor"
  grad_clip_norm: float = 0.0
  grad_accum_steps: int = 1
  adafactor: AdafactorConfig = AdafactorConfig()
  adamw: AdamWConfig = AdamWConfig()


def rsqrt_schedule(base_lr: float, warmup_steps: int,
                   linear_warmup: bool = False) -> optax.Schedule:
  """T5's `constant * rsqrt_decay`: lr(step) = base_lr / sqrt(max(step, warmup_steps)).

  With base_lr=1, warmup_steps=10^4: 0.01 for steps 0..10^4, 0.00316 at 10^5,
  0.00138 at 2^19. `linear_warmup=True` multiplies by min(1, step / warmup_steps)
  (t5x's extra `linear_warmup` factor), i.e. a ramp from 0 instead of the flat start.
  """
  if warmup_steps <= 0:
    raise ValueError("rsqrt schedule needs schedule.warmup_steps > 0 "
                     f"(got {warmup_steps}); T5 uses 10000.")

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    lr = base_lr * jax.lax.rsqrt(jnp.maximum(step, float(warmup_steps)))
    if linear_warmup:
      lr = lr * jnp.minimum(1.0, step / warmup_steps)
    return lr

  return schedule


def make_schedule(cfg: ScheduleConfig) -> optax.Schedule:
  """Builds a learning-rate schedule (lm.config.schedule_config(config) gives `cfg`).

  Fields: name (rsqrt|cosine|linear|constant), base_lr, warmup_steps, decay_steps
  (total steps of warmup + decay for cosine/linear), end_factor (final lr = base_lr *
  end_factor), linear_warmup (rsqrt only).
    rsqrt:    base_lr / sqrt(max(step, warmup_steps)) (T5 pre-training, base_lr=1).
    cosine:   linear 0 -> base_lr over warmup_steps, cosine to base_lr*end_factor at
              decay_steps, constant after.
    linear:   linear warmup, then linear decay to base_lr*end_factor at decay_steps.
    constant: linear warmup over warmup_steps (0 = none), then base_lr (T5 fine-tuning:
              0.001, no warmup).

  Returns:
    optax schedule: int step -> float32 lr.
  """
  name = cfg.name
  base_lr = float(cfg.base_lr)
  warmup = int(cfg.warmup_steps)
  decay_steps = int(cfg.decay_steps or 0)
  end_factor = float(cfg.end_factor)
  if warmup < 0:
    raise ValueError(f"schedule.warmup_steps must be >= 0, got {warmup}.")
  if not base_lr > 0:  # also catches NaN
    raise ValueError(f"schedule.base_lr must be > 0, got {base_lr} (a negative rate climbs "
                     "the loss); T5 pre-training uses 1.0 with rsqrt, AdamW ~3e-4.")
  if not end_factor >= 0:
    raise ValueError(f"schedule.end_factor must be >= 0, got {end_factor}.")
  if name == "rsqrt":
    return rsqrt_schedule(base_lr, warmup, bool(cfg.linear_warmup))
  if name in ("cosine", "linear") and decay_steps <= warmup:
    raise ValueError(f"schedule {name!r} needs schedule.decay_steps ({decay_steps}) > "
                     f"warmup_steps ({warmup}); decay_steps counts warmup too.")
  if name == "cosine":
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=base_lr, warmup_steps=warmup,
        decay_steps=decay_steps, end_value=base_lr * end_factor)
  if name == "linear":
    return optax.join_schedules(
        [optax.linear_schedule(0.0, base_lr, warmup),
         optax.linear_schedule(base_lr, base_lr * end_factor, decay_steps - warmup)],
        boundaries=[warmup])
  if name == "constant":
    if warmup == 0:
      return optax.constant_schedule(base_lr)
    return optax.join_schedules(
        [optax.linear_schedule(0.0, base_lr, warmup), optax.constant_schedule(base_lr)],
        boundaries=[warmup])
  raise ValueError(f"unknown schedule.name {name!r}; expected one of {SCHEDULES}.")


def _decay_mask(params: Any) -> Any:
  """AdamW weight decay only on matrices (ndim >= 2), not on norm scales / biases."""
  return jax.tree.map(lambda p: p.ndim >= 2, params)


def factored_dims(shape: tuple[int, ...], factored: bool,
                  min_dim_size_to_factor: int) -> tuple[int, int] | None:
  """Adafactor's factoring rule (optax's and t5x's for 2-D params): the axes
  (second-largest, largest) of `shape`, or None when the param keeps a full second moment
  (factoring off, fewer than 2 dims, or the second-largest dim below the minimum). Ties in
  size go to the later axis as the largest (a stable argsort)."""
  if not factored or len(shape) < 2:
    return None
  order = sorted(range(len(shape)), key=lambda axis: shape[axis])
  if shape[order[-2]] < min_dim_size_to_factor:
    return None
  return order[-2], order[-1]


# Rows at least this wide (elements after the reduced axis) are reduced by halving.
WIDE_ROWS = 8192


def mean_over_axis(x: jax.Array, axis: int) -> jax.Array:
  """``jnp.mean(x, axis)``, with a major axis of wide rows summed by pairwise halving.

  XLA:CPU reduces an axis with many elements after it (the [512, 32128] logits kernel's
  512 rows, Adafactor's column statistic) about 4x slower than it adds the two halves of
  the array until one row is left (57 vs 14 ms for [512, 32128] on this host): with
  ``prod(x.shape[axis + 1:]) >= WIDE_ROWS`` the sum is taken that way, an odd row carried
  to the next round (one row: no round). The result differs from ``jnp.mean`` by float32
  rounding only. Only on the CPU: on GPUs and TPUs the rows of a sharded axis live on
  different devices, where slicing halves would move data that a reduce sums in place.

  Args:
    x: [..., n, W...] array; axis: the axis of length n to average over.
  Returns:
    x's shape without ``axis``.
  """
  axis = axis % x.ndim
  if math.prod(x.shape[axis + 1:]) < WIDE_ROWS:  # the last axis too: an empty product
    return jnp.mean(x, axis=axis)
  return jax.lax.platform_dependent(x, cpu=lambda x: _mean_by_halving(x, axis),
                                    default=lambda x: jnp.mean(x, axis=axis))


def _mean_by_halving(x: jax.Array, axis: int) -> jax.Array:
  n = x.shape[axis]
  total = x
  while total.shape[axis] > 1:
    m = total.shape[axis]
    half = m // 2
    pairs = (jax.lax.slice_in_dim(total, 0, half, axis=axis)
             + jax.lax.slice_in_dim(total, half, 2 * half, axis=axis))
    odd = jax.lax.slice_in_dim(total, 2 * half, m, axis=axis)  # no row when m is even
    total = jnp.concatenate([pairs, odd], axis=axis)
  return jnp.squeeze(total, axis) / jnp.asarray(n, x.dtype)


def scale_by_factored_rms(factored: bool, decay_rate: float, decay_offset: int,
                          min_dim_size_to_factor: int,
                          eps: float) -> optax.GradientTransformation:
  """Adafactor's second-moment scaling, `optax.scale_by_factored_rms` with `lax.rsqrt`.

  optax writes the inverse square roots as `x ** -0.5`, which XLA:CPU compiles to a
  general power (a log and an exp per element); `lax.rsqrt` costs a fraction of that. It
  matters where params keep a full second moment: in the tiny model no matrix reaches
  `min_dim_size_to_factor`, so every param paid the power, and the change made its
  training step 12-15 % faster (alternating runs, docs/speed.md). The column statistic
  of a wide matrix (the [512, 32128] logits kernel's mean over its 512 rows) goes through
  `mean_over_axis`, 4x faster there on XLA:CPU than `jnp.mean`. The state and its
  `init` are optax's own (`optax.FactoredState`: count, v_row, v_col, v), so checkpoints
  are unchanged; the update is optax's algorithm, tested against it to float32 rounding
  (tests/test_optim_reference.py).

  Per param g of shape S, with t = count - decay_offset + 1 and beta = 1 - t^-decay_rate,
  g2 = g^2 + eps:
    unfactored: v <- beta v + (1 - beta) g2;  update = g * rsqrt(v)
    factored over (r, c) = factored_dims(S): v_row <- beta v_row + (1 - beta) mean_c(g2)
      ([S without c]), v_col <- beta v_col + (1 - beta) mean_r(g2) ([S without r]);
      update = g * rsqrt(v_row / mean_r(v_row)) [expanded at c] * rsqrt(v_col) [at r].
  """
  reference = optax.scale_by_factored_rms(factored, decay_rate, decay_offset,
                                          min_dim_size_to_factor, eps)

  def update(grads, state, params=None):
    if params is None:
      raise ValueError("lm.optim.scale_by_factored_rms needs params (for their shapes).")
    t = jnp.asarray(state.count - decay_offset + 1, jnp.float32)
    beta = 1.0 - t ** (-decay_rate)

    def one(g, v_row, v_col, v, param):
      dtype = param.dtype
      unused = jnp.zeros((1,), dtype)
      g2 = g * g + eps
      dims = factored_dims(param.shape, factored, min_dim_size_to_factor)
      if dims is None:
        new_v = (beta * v + (1.0 - beta) * g2).astype(dtype)
        return g * jax.lax.rsqrt(new_v), unused, unused, new_v
      r, c = dims
      new_row = (beta * v_row + (1.0 - beta) * mean_over_axis(g2, c)).astype(dtype)
      new_col = (beta * v_col + (1.0 - beta) * mean_over_axis(g2, r)).astype(dtype)
      r_in_row = r - 1 if r > c else r  # axis r of new_row, which lacks axis c
      row_factor = jax.lax.rsqrt(new_row / jnp.mean(new_row, axis=r_in_row, keepdims=True))
      col_factor = jax.lax.rsqrt(new_col)
      out = g * jnp.expand_dims(row_factor, c) * jnp.expand_dims(col_factor, r)
      return out, new_row, new_col, unused

    leaves, treedef = jax.tree.flatten(grads)
    parts = [treedef.flatten_up_to(tree) for tree in (state.v_row, state.v_col, state.v, params)]
    results = [one(*args) for args in zip(leaves, *parts)]
    rebuild = lambda k: jax.tree.unflatten(treedef, [res[k] for res in results])  # noqa: E731
    new_state = optax.FactoredState(count=optax.safe_increment(state.count), v_row=rebuild(1),
                                    v_col=rebuild(2), v=rebuild(3))
    return rebuild(0), new_state

  return optax.GradientTransformation(reference.init, update)


def scale_by_param_rms(min_scale: float = 1e-3) -> optax.GradientTransformation:
  """`optax.scale_by_param_block_rms`: each update times max(RMS(its param), min_scale).

  The same values and state as optax's; optax computes the RMS through
  `safe_root_mean_squares`, which (for a gradient that is never taken here) computes it a
  second time over a full-size `where(rms <= min, 1, param)`: on the CPU that select is
  written out, a param-sized copy and a second reduction per param and step.
  """
  reference = optax.scale_by_param_block_rms(min_scale)

  def update(updates, state, params=None):
    if params is None:
      raise ValueError("lm.optim.scale_by_param_rms needs params (their RMS scales updates).")
    scaled = jax.tree.map(
        lambda u, p: u * jnp.maximum(jnp.sqrt(jnp.mean(p * p)), min_scale), updates, params)
    return scaled, state

  return optax.GradientTransformation(reference.init, update)


def adafactor(learning_rate: optax.ScalarOrSchedule, a: AdafactorConfig
              ) -> optax.GradientTransformation:
  """`optax.adafactor` with lm's `scale_by_factored_rms` and `scale_by_param_rms` stages.

  The same chain and state as `optax.adafactor(learning_rate, ...)` with `a`'s settings:
  second-moment scaling, update clipping by block RMS (clipping_threshold > 0), the
  learning rate, scaling by the param's block RMS (multiply_by_parameter_scale), momentum
  (> 0), decoupled weight decay (> 0), and the sign flip.

  Raises:
    ValueError: a setting out of its range, naming the `optim.adafactor.<field>`.
  """
  clipping = float(a.clipping_threshold or 0.0)
  momentum = float(a.momentum or 0.0)
  wd = float(a.weight_decay_rate or 0.0)
  _check_range("adafactor.decay_rate", float(a.decay_rate), 0.0, 1.0, high_open=False)
  _check_range("adafactor.momentum", momentum, 0.0, 1.0)
  _check_range("adafactor.clipping_threshold", clipping, 0.0, float("inf"))
  _check_range("adafactor.weight_decay_rate", wd, 0.0, float("inf"))
  _check_range("adafactor.eps", float(a.eps), 0.0, float("inf"))
  if int(a.min_dim_size_to_factor) < 1:
    raise ValueError("optim.adafactor.min_dim_size_to_factor must be >= 1, got "
                     f"{a.min_dim_size_to_factor}.")
  chain = [scale_by_factored_rms(bool(a.factored), float(a.decay_rate), int(a.decay_offset),
                                 int(a.min_dim_size_to_factor), float(a.eps))]
  if clipping > 0:
    chain.append(optax.clip_by_block_rms(clipping))
  chain.append(optax.scale_by_learning_rate(learning_rate, flip_sign=False))
  if a.multiply_by_parameter_scale:
    chain.append(scale_by_param_rms())
  if momentum > 0:
    chain.append(optax.ema(momentum, debias=False, accumulator_dtype=jnp.float32))
  if wd > 0:
    chain.append(optax.add_decayed_weights(wd))
  chain.append(optax.scale(-1))
  return optax.chain(*chain)


_ATTENTION_IN = ("query", "key", "value")  # [..., D, N, H]: (embed, heads, kv)
_ATTENTION_OUT = ("out",)                   # [..., N, H, D]: (heads, kv, embed)


def t5_matrix_shape(path: tuple[str, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
  """The shape t5x's Adafactor factors a param as (heads and kv joined into one column).

  Args:
    path: the param's key path in the params tree, e.g. ("encoder", "layers_0",
      "self_attention", "query").
    shape: its shape; a leading scanned "layers" axis is kept as a batch axis.
  Returns:
    [..., D, N * H] for attention query/key/value kernels, [..., N * H, D] for the
    attention output kernel, ``shape`` unchanged for every other param.
  """
  if len(shape) >= 3 and len(path) >= 2 and "attention" in path[-2]:
    if path[-1] in _ATTENTION_IN:
      return (*shape[:-2], shape[-2] * shape[-1])
    if path[-1] in _ATTENTION_OUT:
      return (*shape[:-3], shape[-3] * shape[-2], shape[-1])
  return tuple(shape)


def as_t5_matrices(tx: optax.GradientTransformation) -> optax.GradientTransformation:
  """Runs ``tx`` on the params reshaped by `t5_matrix_shape`, updates reshaped back.

  Reshapes of contiguous arrays are free; the optimizer state holds the reshaped
  statistics (for Adafactor: factored [D] and [N * H] vectors of each attention kernel).
  """
  def to_matrices(tree):
    return jax.tree_util.tree_map_with_path(
        lambda p, x: x.reshape(t5_matrix_shape(path_names(p), x.shape)), tree)

  def init(params):
    return tx.init(to_matrices(params))

  def update(updates, state, params=None):
    shapes = jax.tree.map(jnp.shape, updates)
    new, state = tx.update(to_matrices(updates), state,
                           None if params is None else to_matrices(params))
    return jax.tree.map(lambda u, shape: u.reshape(shape), new, shapes), state

  return optax.GradientTransformation(init, update)


def per_layer(tx: optax.GradientTransformation) -> optax.GradientTransformation:
  """Runs ``tx`` on each layer's slice of a scanned stack's params, as on unscanned params.

  With `TransformerConfig.scan_layers`, every param of a stack carries a leading "layers"
  axis. t5x's Adafactor treats that axis as a batch dimension: each layer is its own
  matrix for factoring, for the parameter-scale RMS and for update clipping. optax's
  block RMS would instead pool all layers, so ``tx`` is vmapped over the leading axis of
  those params (its state gets the same leading axis); other params go through ``tx``
  unchanged. Training is then the same whether layers are scanned or not.

  Without scanned params the state is ``tx``'s own. With them it is ``(state of the
  unscanned params, vmapped state of the scanned params)``, each over a dict from the
  param's '/'-joined path to the param.
  """
  def split(tree):
    plain, scanned = {}, {}
    for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
      (scanned if in_scanned_stack(path) else plain)[path_str(path)] = x
    return plain, scanned

  def has_scanned(tree):
    return any(in_scanned_stack(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0])

  def init(params):
    if not has_scanned(params):
      return tx.init(params)  # unscanned layers: ``tx``'s own state, mirroring the params
    plain, scanned = split(params)
    return tx.init(plain), jax.vmap(tx.init)(scanned)

  def update(updates, state, params=None):
    if not has_scanned(updates):
      return tx.update(updates, state, params)
    u_plain, u_scanned = split(updates)
    p_plain, p_scanned = split(params) if params is not None else (None, None)
    new_plain, s_plain = tx.update(u_plain, state[0], p_plain)
    new_scanned, s_scanned = jax.vmap(tx.update)(u_scanned, state[1], p_scanned)
    merged = {**new_plain, **new_scanned}
    leaves = []
    for path, _ in jax.tree_util.tree_flatten_with_path(updates)[0]:
      leaves.append(merged[path_str(path)])
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(updates), leaves), (
        s_plain, s_scanned)

  return optax.GradientTransformation(init, update)


def _check_range(name: str, value: float, low: float, high: float, *,
                 high_open: bool = True) -> None:
  """Raises ValueError naming `optim.<name>` unless low <= value < high (<= if closed)."""
  ok = low <= value < high if high_open else low <= value <= high
  if not ok:  # NaN fails too
    bound = f"[{low}, {high}{')' if high_open else ']'}"
    raise ValueError(f"optim.{name} must be in {bound}, got {value}.")


def make_optimizer(cfg: OptimConfig, schedule: optax.Schedule) -> optax.GradientTransformation:
  """Builds the optimizer (lm.config.optim_config(config) gives `cfg`).

  Fields: name (adafactor|adamw), grad_clip_norm (> 0 clips the global gradient norm
  before the optimizer; 0 = off, T5's default since Adafactor clips updates itself),
  adafactor.{decay_rate, decay_offset, factored, multiply_by_parameter_scale,
  clipping_threshold (0 = off), momentum (0 = none), eps, min_dim_size_to_factor,
  weight_decay_rate (0 = off)}, adamw.{b1, b2, eps, weight_decay}.

  Args:
    cfg: the optimizer settings.
    schedule: from `make_schedule`.

  Returns:
    optax.GradientTransformation whose update needs `params` (Adafactor's parameter
    scaling, AdamW's decay).
  """
  name = cfg.name
  clip = float(cfg.grad_clip_norm or 0.0)
  if name == "adafactor":
    tx = as_t5_matrices(per_layer(adafactor(schedule, cfg.adafactor)))
  elif name == "adamw":
    a = cfg.adamw
    _check_range("adamw.b1", float(a.b1), 0.0, 1.0)
    _check_range("adamw.b2", float(a.b2), 0.0, 1.0)
    _check_range("adamw.eps", float(a.eps), 0.0, float("inf"))
    _check_range("adamw.weight_decay", float(a.weight_decay), 0.0, float("inf"))
    tx = optax.adamw(learning_rate=schedule, b1=float(a.b1), b2=float(a.b2), eps=float(a.eps),
                     weight_decay=float(a.weight_decay), mask=_decay_mask)
  else:
    raise ValueError(f"unknown optim.name {name!r}; expected one of {OPTIMIZERS}.")
  if clip < 0:
    raise ValueError(f"optim.grad_clip_norm must be >= 0 (0 = off), got {clip}.")
  if clip > 0:
    tx = optax.chain(optax.clip_by_global_norm(clip), tx)
  return tx
