r"""Loss landscapes: slices, surrogate-versus-metric agreement, gradient quality, decomposability.

Every helper takes a function `fn(x, *args)` of a pytree `x` (scores, embeddings, or a network's
parameters) and evaluates it at many points of that pytree's space: on a line or a plane through a
point (`slice_1d`, `slice_2d`, along `random_direction`, `filter_normalized_direction` or the
direction between two points), at random perturbations (`surrogate_tracking`: how a loss orders
them against an exact metric, by `spearman_correlation` and `kendall_correlation`), one item at a
time (`gradient_cosine`: a loss's gradient against the exact metric's finite differences), or on
the batches of a partition (`batch_gap`, ROADMAP's decomposability gap for any function).

**Compilation.** Each helper is `jax.jit`-compiled with its functions (`fn`, `loss_fn`,
`reference_fn`, `direction_fn`) and its counts (`batch_size`, `num_points`) static, and every
array traced: the point, the directions, the grid coordinates, `scale`, `step`, the key, the
batches and `args`. A second call with new values of those arrays (of the same shapes) reuses the
compiled program; pass a loss's real-valued hyperparameters through `args` (e.g.
`fn = lambda y, labels, t: smoothap_loss(y, labels, temperature=t)` with `args=(labels, t)`;
`loss_args` and `reference_args` where two functions are compared), not
in a new closure, which is a new static function and compiles again. Define `fn` once and reuse
it. The directions (`random_direction`, `filter_normalize`, `filter_normalized_direction`) are
compiled too, once per structure and shapes of the point: a network's parameters make one program,
not one per operation of each leaf.

**Memory.** Points are evaluated by `jax.lax.map(..., batch_size=batch_size)`: `batch_size`
perturbed copies of `x` (and what `fn` needs for each) exist at once, never one per grid point.

**Pytrees.** Directions have the structure of `x`. Only floating-point leaves move: a
non-floating leaf (an integer step counter, say) is left as it is at every point, and its
direction leaf is zeros.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import partitions

DirectionFn = Callable[[jax.Array, types.PyTree], types.PyTree]


def _floating(leaf: Any) -> bool:
  return jnp.issubdtype(jnp.result_type(leaf), jnp.floating)


def _check_common(fn_name: str, name: str, fn: Any, batch_size: Any, args: Any) -> None:
  checks.check_callable(fn_name, name, fn, hint="Pass fn(x, *args) -> values.")
  checks.check_positive_int(fn_name, "batch_size", batch_size, allow_none=True)
  if not isinstance(args, tuple):
    raise TypeError(
      f"{fn_name}: args must be a tuple of the extra arguments of {name} (arrays or pytrees), "
      f"got {type(args).__name__}; write args=(labels,) for one argument."
    )


def _check_direction(fn_name: str, name: str, direction: Any, x: Any) -> None:
  # jaxlib ships no stub for PyTreeDef (a C++ type), so mypy does not see its __ne__.
  if jax.tree.structure(direction) != jax.tree.structure(x):  # type: ignore[operator]
    raise ValueError(
      f"{fn_name}: {name} must have the pytree structure of the point, got "
      f"{jax.tree.structure(direction)} for {jax.tree.structure(x)}; build it with "
      "random_direction(key, point) or direction_between(start, end)."
    )
  for d, leaf in zip(jax.tree.leaves(direction), jax.tree.leaves(x)):
    if np.shape(d) != np.shape(leaf):
      raise ValueError(
        f"{fn_name}: {name} has a leaf of shape {np.shape(d)} where the point has "
        f"{np.shape(leaf)}; a direction has the shapes of the point."
      )


def _move(x: types.PyTree, directions: tuple, coefficients: jax.Array) -> types.PyTree:
  """`x + sum_k coefficients[k] * directions[k]` on the floating leaves of `x`."""

  def leaf_move(leaf, *ds):
    if not _floating(leaf):
      return leaf
    shift = sum(c * d for c, d in zip(coefficients, ds))
    return (leaf + shift).astype(jnp.result_type(leaf))

  return jax.tree.map(leaf_move, x, *directions)


def random_direction(key: jax.Array, x: types.PyTree) -> types.PyTree:
  """A direction of independent standard normal entries, shaped like `x`.

  Args:
    key: a `jax.random` key.
    x: the point (any pytree of arrays).

  Returns:
    A pytree of the structure, shapes and dtypes of `x`; its non-floating leaves are zeros.

  >>> import jax, jax.numpy as jnp
  >>> d = random_direction(jax.random.key(0), {"w": jnp.zeros((2, 3)), "step": jnp.array(4)})
  >>> d["w"].shape, int(d["step"])
  ((2, 3), 0)
  """
  return _random_direction(key, x)


@jax.jit
def _random_direction(key, x):
  # One program per pytree structure and shapes: eagerly each leaf's ops would compile on their own
  # (a network's parameters: a few ops for each of tens of leaves).
  leaves, treedef = jax.tree.flatten(x)
  keys = jax.random.split(key, max(len(leaves), 1))
  out = [
    jax.random.normal(k, jnp.shape(leaf), jnp.result_type(leaf))
    if _floating(leaf)
    else jnp.zeros_like(leaf)
    for k, leaf in zip(keys, leaves)
  ]
  return jax.tree.unflatten(treedef, out)


def filter_normalize(direction: types.PyTree, params: types.PyTree) -> types.PyTree:
  r"""Rescales each filter of `direction` to the norm of that filter of `params` (Li et al. 2018).

  Li et al. 2018 (*Visualizing the Loss Landscape of Neural Nets*, sec. 4) plot a network's loss
  along random directions whose every filter has the norm of the corresponding filter of the
  trained parameters, so that slices of networks with different weight scales compare:

  .. math::
    d_{i,j} \leftarrow \frac{d_{i,j}}{\lVert d_{i,j} \rVert} \lVert \theta_{i,j} \rVert

  for filter `j` of layer `i`. A filter is a slice along the **last axis** of a leaf with two axes
  or more: an output channel of a Flax `Conv` kernel `[..., in, out]`, an output column of a
  `Dense` kernel `[in, out]`. Leaves with fewer than two axes (biases, the scales and offsets of
  BatchNorm and LayerNorm) get a zero direction: they do not move, the `ignore='biasbn'` option
  of the authors' code, which their plots use. A filter of zero norm in `direction` stays zero.

  Args:
    direction: a pytree shaped like `params` (e.g. from `random_direction`).
    params: the parameters the slice goes through.

  Returns:
    The normalised direction, shaped like `params`.

  >>> import jax.numpy as jnp
  >>> params = {"kernel": jnp.array([[3.0, 0.0], [4.0, 1.0]]), "bias": jnp.ones(2)}
  >>> d = filter_normalize({"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}, params)
  >>> jnp.linalg.norm(d["kernel"], axis=0).round(4).tolist(), d["bias"].tolist()
  ([5.0, 1.0], [0.0, 0.0])
  """
  _check_direction("filter_normalize", "direction", direction, params)
  return _filter_normalize(direction, params)


@jax.jit
def _filter_normalize(direction, params):
  def leaf_normalize(d, p):
    if not _floating(p) or jnp.ndim(p) < 2:
      return jnp.zeros_like(p)
    axes = tuple(range(jnp.ndim(p) - 1))
    d_norm = jnp.sqrt(jnp.sum(jnp.square(d), axis=axes, keepdims=True))
    p_norm = jnp.sqrt(jnp.sum(jnp.square(p), axis=axes, keepdims=True))
    scale = jnp.where(d_norm > 0, p_norm / jnp.where(d_norm > 0, d_norm, 1), 0)
    return (d * scale).astype(jnp.result_type(p))

  return jax.tree.map(leaf_normalize, direction, params)


def filter_normalized_direction(key: jax.Array, params: types.PyTree) -> types.PyTree:
  """`filter_normalize(random_direction(key, params), params)`: Li et al. 2018's random direction.

  A `DirectionFn`, for `surrogate_tracking(direction_fn=...)` on a network's parameters. See
  `filter_normalize` for what a filter is and why biases and normalisation parameters stay fixed.

  Args:
    key: a `jax.random` key.
    params: the parameters (a pytree; Flax NNX: `nnx.state(model, nnx.Param)`).

  Returns:
    A direction shaped like `params`.

  >>> import jax, jax.numpy as jnp
  >>> params = {"kernel": jnp.full((3, 2), 2.0), "bias": jnp.zeros(2)}
  >>> d = filter_normalized_direction(jax.random.key(0), params)
  >>> [round(float(v), 4) for v in jnp.linalg.norm(d["kernel"], axis=0)]
  [3.4641, 3.4641]
  """
  return _filter_normalized_direction(key, params)


@jax.jit
def _filter_normalized_direction(key, params):
  return _filter_normalize(_random_direction(key, params), params)


def direction_between(start: types.PyTree, end: types.PyTree) -> types.PyTree:
  """`end - start`, leaf by leaf: with `slice_1d(fn, start, ..., alphas)`, `alphas = 0` is `start`
  and `alphas = 1` is `end` (the linear interpolation of Goodfellow et al. 2015).

  Args:
    start: a pytree.
    end: a pytree of the same structure and shapes.

  Returns:
    The direction from `start` to `end` (zeros on non-floating leaves).

  >>> import jax.numpy as jnp
  >>> direction_between({"w": jnp.array([1.0, 2.0])}, {"w": jnp.array([0.0, 4.0])})["w"].tolist()
  [-1.0, 2.0]
  """
  _check_direction("direction_between", "end", end, start)
  return jax.tree.map(lambda a, b: b - a if _floating(a) else jnp.zeros_like(a), start, end)


@functools.partial(jax.jit, static_argnames=("fn", "batch_size"))
def _evaluate(fn, x, directions, coefficients, args, batch_size):
  return jax.lax.map(
    lambda c: fn(_move(x, directions, c), *args), coefficients, batch_size=batch_size
  )


def _check_coordinates(fn_name: str, name: str, values: Any) -> jax.Array:
  return checks.check_floating(fn_name, name, values, ndim=1, layout="[A]")


def slice_1d(
  fn: Callable[..., Any],
  x: types.PyTree,
  direction: types.PyTree,
  alphas: jax.typing.ArrayLike,
  *,
  args: tuple = (),
  batch_size: int | None = 128,
) -> Any:
  r"""`fn` along a line: `fn(x + alphas[i] * direction, *args)` for every `i`.

  .. math::
    v_i = f(x + \alpha_i d)

  For a line between two points, `direction = direction_between(x, end)` and `alphas` in
  `[0, 1]`; for a network, `filter_normalized_direction` (Li et al. 2018).

  Static: `fn`, `batch_size`; traced: everything else (new `alphas`, `direction` or `args` of the
  same shapes do not recompile). Memory: `batch_size` moved copies of `x` at once; time: one call
  of `fn` per point.

  Args:
    fn: `fn(x, *args)`, returning an array (a scalar usually) or a pytree of them.
    x: the point the line goes through (any pytree of arrays).
    direction: shaped like `x`.
    alphas: `[A]` floating coordinates along the line.
    args: extra arguments of `fn`, traced (labels, masks, hyperparameters).
    batch_size: points evaluated at once (vectorised), or `None` for one at a time.

  Returns:
    `fn`'s output with a leading axis `[A]`.

  >>> import jax.numpy as jnp
  >>> f = lambda x: jnp.sum(x ** 2)
  >>> slice_1d(f, jnp.array([1.0, 0.0]), jnp.array([0.0, 1.0]), jnp.array([0.0, 1.0, 2.0])).tolist()
  [1.0, 2.0, 5.0]
  """
  name = "slice_1d"
  _check_common(name, "fn", fn, batch_size, args)
  _check_direction(name, "direction", direction, x)
  alphas = _check_coordinates(name, "alphas", alphas)
  return _evaluate(fn, x, (direction,), alphas[:, None], args, batch_size)


def slice_2d(
  fn: Callable[..., Any],
  x: types.PyTree,
  directions: tuple[types.PyTree, types.PyTree],
  alphas: jax.typing.ArrayLike,
  betas: jax.typing.ArrayLike,
  *,
  args: tuple = (),
  batch_size: int | None = 128,
) -> Any:
  r"""`fn` on a plane: `fn(x + alphas[i] * d1 + betas[j] * d2, *args)` on the grid `[A, B]`.

  .. math::
    v_{ij} = f(x + \alpha_i d_1 + \beta_j d_2)

  The first axis follows `alphas` (`indexing="ij"`); `plot_slice_2d` draws `alphas` along the x
  axis. Static: `fn`, `batch_size`; traced: everything else. Memory: `batch_size` moved copies of
  `x` at once, whatever `A * B`; time: `A * B` calls of `fn`.

  Args:
    fn: `fn(x, *args)`, returning an array (a scalar usually) or a pytree of them.
    x: the centre of the plane (any pytree of arrays).
    directions: `(d1, d2)`, each shaped like `x` (they need not be orthogonal).
    alphas: `[A]` coordinates along `d1`.
    betas: `[B]` coordinates along `d2`.
    args: extra arguments of `fn`, traced.
    batch_size: grid points evaluated at once, or `None` for one at a time.

  Returns:
    `fn`'s output with leading axes `[A, B]`.

  >>> import jax.numpy as jnp
  >>> f = lambda x: x[0] - 10 * x[1]
  >>> e = jnp.eye(2)
  >>> slice_2d(f, jnp.zeros(2), (e[0], e[1]), jnp.array([1.0, 2.0]), jnp.array([0.0, 1.0])).tolist()
  [[1.0, -9.0], [2.0, -8.0]]
  """
  name = "slice_2d"
  _check_common(name, "fn", fn, batch_size, args)
  if not (isinstance(directions, (tuple, list)) and len(directions) == 2):
    raise TypeError(f"{name}: directions must be a pair (d1, d2) of pytrees shaped like x.")
  for k, d in enumerate(directions):
    _check_direction(name, f"directions[{k}]", d, x)
  alphas = _check_coordinates(name, "alphas", alphas)
  betas = _check_coordinates(name, "betas", betas)
  grid = jnp.stack(jnp.meshgrid(alphas, betas, indexing="ij"), axis=-1)  # [A, B, 2]
  values = _evaluate(fn, x, tuple(directions), grid.reshape(-1, 2), args, batch_size)
  return jax.tree.map(lambda v: v.reshape(alphas.shape + betas.shape + v.shape[1:]), values)


def _average_ranks(x: jax.Array) -> jax.Array:
  """1-based ranks of `x [..., n]` in ascending order, tied values sharing their mean rank."""
  sorted_x = jnp.sort(x, axis=-1)
  search = jnp.vectorize(
    lambda s, v, side: jnp.searchsorted(s, v, side=side), signature="(n),(n)->(n)", excluded={2}
  )
  below = search(sorted_x, x, "left")
  not_above = search(sorted_x, x, "right")
  return (below + not_above + 1).astype(x.dtype) / 2


def _pearson(x: jax.Array, y: jax.Array) -> jax.Array:
  xc = x - jnp.mean(x, axis=-1, keepdims=True)
  yc = y - jnp.mean(y, axis=-1, keepdims=True)
  den = jnp.sqrt(jnp.sum(xc * xc, axis=-1) * jnp.sum(yc * yc, axis=-1))
  return jnp.where(den > 0, jnp.sum(xc * yc, axis=-1) / jnp.where(den > 0, den, 1), 0)


def _check_pair(fn: str, x: Any, y: Any) -> tuple[jax.Array, jax.Array]:
  checks.check_array(fn, "x", x, kind="numeric", min_ndim=1, layout="[..., n]")
  checks.check_array(fn, "y", y, kind="numeric", min_ndim=1, layout="[..., n]")
  x, y = jnp.asarray(x), jnp.asarray(y)
  if x.shape != y.shape:
    raise ValueError(
      f"{fn}: x and y must have the same shape [..., n], got {x.shape} and {y.shape}."
    )
  dtype = jnp.promote_types(jnp.result_type(x, y), jnp.float32)
  return x.astype(dtype), y.astype(dtype)


def spearman_correlation(x: jax.typing.ArrayLike, y: jax.typing.ArrayLike) -> jax.Array:
  r"""Spearman's rank correlation of `x` and `y` along the last axis, ties given their mean rank.

  The Pearson correlation of the ranks, as `scipy.stats.spearmanr` computes it:

  .. math::
    \rho = \frac{\mathrm{cov}(\mathrm{rk}(x), \mathrm{rk}(y))}
                {\sigma(\mathrm{rk}(x))\, \sigma(\mathrm{rk}(y))}

  A constant `x` or `y` (no ranking to compare) gives 0, where scipy gives NaN. Time
  `O(n log n)` per row (two sorts), memory `O(n)`. Not differentiable (ranks).

  Args:
    x: `[..., n]` numeric values.
    y: `[..., n]` numeric values.

  Returns:
    `[...]` correlations in `[-1, 1]`.

  >>> import jax.numpy as jnp
  >>> x, y = jnp.array([1.0, 2.0, 3.0, 4.0]), jnp.array([1.0, 3.0, 2.0, 9.0])
  >>> round(float(spearman_correlation(x, y)), 4)
  0.8
  """
  x, y = _check_pair("spearman_correlation", x, y)
  return _pearson(_average_ranks(x), _average_ranks(y))


def kendall_correlation(
  x: jax.typing.ArrayLike, y: jax.typing.ArrayLike, *, batch_size: int = 256
) -> jax.Array:
  r"""Kendall's tau-b of `x` and `y` along the last axis (`scipy.stats.kendalltau`'s default).

  .. math::
    \tau_b = \frac{\sum_{i<j} \mathrm{sign}(x_i - x_j)\, \mathrm{sign}(y_i - y_j)}
                  {\sqrt{(n_0 - n_x)(n_0 - n_y)}}

  with `n_0 = n (n - 1) / 2` pairs and `n_x`, `n_y` the pairs tied in `x`, in `y`. A constant `x`
  or `y` gives 0 (scipy: NaN). Time `O(n^2)` per row; memory `O(batch_size n)`: the pairs are
  counted `batch_size` rows of the pair matrix at a time (`jax.lax.map`), never all `n^2` at once.

  Args:
    x: `[..., n]` numeric values.
    y: `[..., n]` numeric values.
    batch_size: rows of the `n x n` pair matrix counted at once (static).

  Returns:
    `[...]` correlations in `[-1, 1]`.

  >>> import jax.numpy as jnp
  >>> x, y = jnp.array([1.0, 2.0, 3.0, 4.0]), jnp.array([1.0, 3.0, 2.0, 9.0])
  >>> round(float(kendall_correlation(x, y)), 4)
  0.6667
  """
  fn = "kendall_correlation"
  checks.check_positive_int(fn, "batch_size", batch_size)
  x, y = _check_pair(fn, x, y)
  return _kendall(x, y, batch_size=batch_size)


@functools.partial(jax.jit, static_argnames="batch_size")
def _kendall(x, y, *, batch_size):
  shape = x.shape[:-1]
  x2, y2 = x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])  # [L, n]

  def row(item):  # item i of every list against all items: [L] sums over j
    xi, yi = item
    sx, sy = jnp.sign(xi[:, None] - x2), jnp.sign(yi[:, None] - y2)
    return jnp.sum(sx * sy, -1), jnp.sum(sx * sx, -1), jnp.sum(sy * sy, -1)

  concordance, untied_x, untied_y = jax.lax.map(row, (x2.T, y2.T), batch_size=batch_size)
  s, tx, ty = concordance.sum(0), untied_x.sum(0), untied_y.sum(0)
  den = jnp.sqrt(tx * ty)
  return jnp.where(den > 0, s / jnp.where(den > 0, den, 1), 0).reshape(shape)


@functools.partial(
  jax.jit, static_argnames=("loss_fn", "reference_fn", "direction_fn", "num_points", "batch_size")
)
def _tracking(
  loss_fn,
  reference_fn,
  x,
  key,
  scale,
  loss_args,
  reference_args,
  direction_fn,
  num_points,
  batch_size,
):
  keys = jax.random.split(key, num_points)
  scales = jnp.broadcast_to(jnp.asarray(scale), (num_points,))

  def point(item):
    k, s = item
    moved = _move(x, (direction_fn(k, x),), s[None])
    return loss_fn(moved, *loss_args), reference_fn(moved, *reference_args)

  losses, reference = jax.lax.map(point, (keys, scales), batch_size=batch_size)
  if reference.shape != (num_points,):
    raise ValueError(
      f"surrogate_tracking: reference_fn must return a scalar, got shape {reference.shape[1:]}."
    )

  def statistics(loss):  # one surrogate's [num_points] values against the reference's
    if loss.shape != (num_points,):
      raise ValueError(
        "surrogate_tracking: loss_fn must return a scalar or a pytree of scalars (one per "
        f"surrogate), got a value of shape {loss.shape[1:]}."
      )
    dtype = jnp.promote_types(jnp.result_type(loss, reference), jnp.float32)
    loss, ref = loss.astype(dtype), reference.astype(dtype)
    difference = loss - ref
    return {
      "loss": loss,
      "reference": ref,
      "spearman": _pearson(_average_ranks(loss), _average_ranks(ref)),
      "kendall": _kendall(loss, ref, batch_size=256),
      "error": jnp.mean(jnp.abs(difference)),
      "bias": jnp.mean(difference),
    }

  return jax.tree.map(statistics, losses)


def surrogate_tracking(
  loss_fn: Callable[..., jax.Array],
  reference_fn: Callable[..., jax.Array],
  x: types.PyTree,
  key: jax.Array,
  *,
  scale: jax.typing.ArrayLike,
  num_points: int,
  loss_args: tuple = (),
  reference_args: tuple = (),
  direction_fn: DirectionFn = random_direction,
  batch_size: int | None = 128,
) -> dict[str, jax.Array]:
  r"""How well a loss tracks an exact one over random perturbations of `x`.

  Draws `num_points` points `x + scale_k d_k` with `d_k = direction_fn(key_k, x)` and evaluates
  the surrogate `loss_fn` and the exact `reference_fn` (e.g. `1 - AP`) at each. A surrogate that
  tracks the exact loss orders the points as it does (rank correlations near 1) and is close to
  it (small error). The perturbed pytree may be scores, embeddings (`fn` then builds the lists,
  e.g. with `jaxrank.batch_retrieval`) or a network's parameters (`direction_fn =
  filter_normalized_direction`).

  Several surrogates compare on the same points in one call: `loss_fn` returns a pytree of
  scalars (e.g. a dict by name), and the result is that pytree with each surrogate's dict of
  statistics in place of its scalar. Each point is moved, and the reference evaluated, once for
  all of them (a network's forward pass shared when `loss_fn` computes the embeddings once).

  Static: `loss_fn`, `reference_fn`, `direction_fn`, `num_points`, `batch_size`; traced: `x`,
  `key`, `scale`, `loss_args`, `reference_args`. Memory: `batch_size` perturbed copies of `x` at
  once (plus the `O(n)` of the correlations, `n = num_points`); time: `num_points` calls of each
  function and `O(n^2)` for Kendall's tau.

  Args:
    loss_fn: `loss_fn(x, *loss_args) -> scalar`, the surrogate loss; or a pytree of scalars,
      several surrogates.
    reference_fn: `reference_fn(x, *reference_args) -> scalar`, the exact loss it approximates, e.g.
      `lambda s, l: 1 - jaxrank.ap_metric(s, l)`.
    x: the point perturbed (any pytree of arrays).
    key: a `jax.random` key.
    scale: the perturbations' size: a scalar, or `[num_points]` (one per point: a spread of
      sizes spreads the losses). With the default `direction_fn`, the standard deviation of the
      Gaussian noise added to each entry.
    num_points: how many perturbations.
    loss_args: extra arguments of `loss_fn` (labels, hyperparameters), traced.
    reference_args: extra arguments of `reference_fn`, traced.
    direction_fn: `direction_fn(key, x) -> direction shaped like x` (default `random_direction`).
    batch_size: points evaluated at once, or `None` for one at a time.

  Returns:
    A dict: `"loss"` and `"reference"`, `[num_points]` values (float32 or wider);
    `"spearman"` and `"kendall"`, their rank correlations (`spearman_correlation`,
    `kendall_correlation`; 0 if either is constant); `"error"`, the mean absolute difference
    `mean |loss - reference|`; `"bias"`, the mean difference `mean(loss - reference)`. For a
    pytree of surrogates, that pytree of such dicts.

  Raises:
    ValueError: `scale` neither a scalar nor `[num_points]`, `num_points` below 2; when the
      functions are traced, `reference_fn` returning more than a scalar or `loss_fn` more than a
      pytree of scalars.

  >>> import jax, jax.numpy as jnp
  >>> import jaxrank
  >>> scores, labels = jnp.linspace(1.0, -1.0, 8), jnp.array([1, 0, 1, 1, 0, 0, 1, 0])
  >>> exact = lambda s, l: 1 - jaxrank.ap_metric(s, l)
  >>> loss = lambda s, l, t: jaxrank.smoothap_loss(s, l, temperature=t)
  >>> out = surrogate_tracking(loss, exact, scores, jax.random.key(0), scale=0.3, num_points=64,
  ...                          loss_args=(labels, 0.001), reference_args=(labels,))
  >>> bool(out["spearman"] > 0.95), bool(out["error"] < 0.01)
  (True, True)
  >>> both = lambda s, l: {"smoothap": jaxrank.smoothap_loss(s, l),
  ...                       "fastap": jaxrank.fastap_loss(s, l)}
  >>> out = surrogate_tracking(both, exact, scores, jax.random.key(0), scale=0.3, num_points=64,
  ...                          loss_args=(labels,), reference_args=(labels,))
  >>> sorted(out), out["fastap"]["loss"].shape
  (['fastap', 'smoothap'], (64,))
  """
  name = "surrogate_tracking"
  _check_common(name, "loss_fn", loss_fn, batch_size, loss_args)
  _check_common(name, "reference_fn", reference_fn, batch_size, reference_args)
  checks.check_callable(
    name, "direction_fn", direction_fn, hint="Pass direction_fn(key, x), e.g. random_direction."
  )
  checks.check_int_at_least(name, "num_points", num_points, 2)
  checks.check_real(name, "scale", scale, at_least=0, scalar=False)
  if np.ndim(scale) not in (0, 1) or (np.ndim(scale) == 1 and np.shape(scale)[0] != num_points):
    raise ValueError(
      f"{name}: scale must be a scalar or shaped [num_points] = [{num_points}], got shape "
      f"{np.shape(scale)}."
    )
  return _tracking(
    loss_fn,
    reference_fn,
    x,
    key,
    scale,
    loss_args,
    reference_args,
    direction_fn,
    num_points,
    batch_size,
  )


def _list_gradient(loss_fn, scores, args):
  return jax.grad(lambda s: jnp.sum(loss_fn(s, *args)))(scores)


def _unit(v: jax.Array) -> jax.Array:
  norm = jnp.linalg.norm(v, axis=-1, keepdims=True)
  return jnp.where(norm > 0, v / jnp.where(norm > 0, norm, 1), 0)


@functools.partial(jax.jit, static_argnames="loss_fn")
def _descent(loss_fn, scores, where, args):
  return _unit(jnp.where(where, -_list_gradient(loss_fn, scores, args), 0))


def _check_lists_fn(fn_name, scores, where):
  scores = checks.check_floating(fn_name, "scores", scores, min_ndim=1, layout="[..., n]")
  return scores, checks.check_mask(fn_name, "where", where, scores.shape)


def descent_directions(
  loss_fn: Callable[..., jax.Array],
  scores: jax.typing.ArrayLike,
  *,
  args: tuple = (),
  where: jax.typing.ArrayLike | None = None,
) -> jax.Array:
  r"""Each list's unit descent direction of a loss: `-grad / ||grad||` per list, in the scores.

  .. math::
    d = -\nabla_y L(y) / \lVert \nabla_y L(y) \rVert_2

  The gradient is the one jaxrank returns (autodiff, a custom VJP, or the blackbox
  interpolation of `blackbox_ap_loss`). A step `y + eps d` along it is what `slice_1d` then
  measures with an exact metric (`slice_1d(reference_fn, scores, d, eps, args=...)` gives the
  exact loss after each step, per list).

  Static: `loss_fn`; traced: the rest.

  Args:
    loss_fn: `loss_fn(scores [..., n], *args) -> [...]`, one value per list (a jaxrank loss
      with `reduce_fn=None`); lists must not interact.
    scores: `[..., n]` floating scores.
    args: extra arguments of `loss_fn` (labels, mask, hyperparameters), traced.
    where: optional `[..., n]` mask; the direction is 0 on masked items.

  Returns:
    `[..., n]` unit directions (a list whose gradient is 0 gets 0).

  >>> import jax.numpy as jnp
  >>> import jaxrank
  >>> loss = lambda s, l: jaxrank.smoothap_loss(s, l, reduce_fn=None)
  >>> d = descent_directions(loss, jnp.array([[0.1, 0.2]]), args=(jnp.array([[1, 0]]),))
  >>> [round(float(v), 4) for v in d[0]]
  [0.7071, -0.7071]
  """
  name = "descent_directions"
  _check_common(name, "loss_fn", loss_fn, None, args)
  scores, where = _check_lists_fn(name, scores, where)
  return _descent(loss_fn, scores, where, args)


@functools.partial(jax.jit, static_argnames=("loss_fn", "reference_fn", "batch_size"))
def _gradient_cosine(
  loss_fn, reference_fn, scores, step, where, loss_args, reference_args, batch_size
):
  n = scores.shape[-1]
  step = jnp.asarray(step, scores.dtype)
  gradient = jnp.where(where, _list_gradient(loss_fn, scores, loss_args), 0)

  def central(i):  # item i moved by +-step in every list at once: [...]
    shift = step * jax.nn.one_hot(i, n, dtype=scores.dtype)
    up = reference_fn(scores + shift, *reference_args)
    down = reference_fn(scores - shift, *reference_args)
    return (up - down) / (2 * step)

  finite = jnp.moveaxis(jax.lax.map(central, jnp.arange(n), batch_size=batch_size), 0, -1)
  finite = jnp.where(where, finite, 0).astype(gradient.dtype)
  g_norm, f_norm = jnp.linalg.norm(gradient, axis=-1), jnp.linalg.norm(finite, axis=-1)
  defined = (g_norm > 0) & (f_norm > 0)
  dot = jnp.sum(gradient * finite, axis=-1)
  cosine = jnp.where(defined, dot / jnp.where(defined, g_norm * f_norm, 1), 0)
  count = jnp.sum(defined)
  total = jnp.sqrt(jnp.sum(gradient**2) * jnp.sum(finite**2))
  return {
    "cosine": cosine,
    "defined": defined,
    "mean_cosine": jnp.sum(cosine) / jnp.maximum(count, 1),
    "overall_cosine": jnp.where(
      total > 0, jnp.sum(gradient * finite) / jnp.where(total > 0, total, 1), 0
    ),
    "gradient": gradient,
    "finite_difference": finite,
  }


def gradient_cosine(
  loss_fn: Callable[..., jax.Array],
  reference_fn: Callable[..., jax.Array],
  scores: jax.typing.ArrayLike,
  *,
  step: jax.typing.ArrayLike,
  loss_args: tuple = (),
  reference_args: tuple = (),
  where: jax.typing.ArrayLike | None = None,
  batch_size: int | None = 128,
) -> dict[str, jax.Array]:
  r"""The cosine between a loss's gradient and the exact loss's finite differences, per list.

  An exact rank metric is piecewise constant (zero gradient almost everywhere) but has finite
  changes: move one score by `+-h` and see how the exact loss changes,

  .. math::
    g_i(h) = \frac{R(y + h e_i) - R(y - h e_i)}{2h}, \qquad
    \cos = \frac{\langle \nabla_y L(y), g(h) \rangle}{\lVert \nabla_y L \rVert \lVert g(h) \rVert}

  per list. `h` sets the scale at which the exact loss is looked at: at small `h` few items cross
  and `g` is sparse. Near 1: the loss's gradient points where the exact loss grows. The gradient
  is the one jaxrank returns, whether a true derivative or an interpolation (the blackbox
  `blackbox_ap_loss`: the cosine then measures the interpolation).

  Static: `loss_fn`, `reference_fn`, `batch_size`; traced: `scores`, `step`, `loss_args`,
  `reference_args`, `where`.
  Memory: `batch_size` moved copies of `scores` at once (each item moved in every list at once);
  time: `2 n` calls of `reference_fn` on all the lists.

  Args:
    loss_fn: `loss_fn(scores [..., n], *loss_args) -> [...]`, the surrogate, one value per list
      (`reduce_fn=None`); lists must not interact.
    reference_fn: `reference_fn(scores, *reference_args) -> [...]`, the exact loss per list, e.g.
      `lambda s, l: 1 - jaxrank.ap_metric(s, l, reduce_fn=None)`.
    scores: `[..., n]` floating scores.
    step: `h`, a positive scalar.
    loss_args: extra arguments of `loss_fn` (labels, mask, hyperparameters), traced.
    reference_args: extra arguments of `reference_fn`, traced.
    where: optional `[..., n]` mask of the items compared (masked items count in neither vector;
      pass the mask to the functions too, through their arguments).
    batch_size: items moved at once, or `None` for one at a time.

  Returns:
    A dict: `"cosine"` `[...]` per list (0 where either vector is 0); `"defined"` `[...]`, where
    both are non-zero; `"mean_cosine"`, the mean over defined lists; `"overall_cosine"`, the
    cosine of the two vectors of all lists together; `"gradient"` and `"finite_difference"`,
    the `[..., n]` vectors compared.

  >>> import jax.numpy as jnp
  >>> import jaxrank
  >>> scores, labels = jnp.array([[0.3, 0.2, 0.1, 0.0]]), jnp.array([[0, 1, 0, 1]])
  >>> exact = lambda s, l: 1 - jaxrank.ap_metric(s, l, reduce_fn=None)
  >>> loss = lambda s, l: jaxrank.smoothap_loss(s, l, reduce_fn=None)
  >>> out = gradient_cosine(loss, exact, scores, step=0.15, loss_args=(labels,),
  ...                       reference_args=(labels,))
  >>> bool(out["cosine"][0] > 0.8)
  True
  """
  name = "gradient_cosine"
  _check_common(name, "loss_fn", loss_fn, batch_size, loss_args)
  _check_common(name, "reference_fn", reference_fn, batch_size, reference_args)
  checks.check_real(name, "step", step, above=0)
  scores, where = _check_lists_fn(name, scores, where)
  return _gradient_cosine(
    loss_fn, reference_fn, scores, step, where, loss_args, reference_args, batch_size
  )


@functools.partial(jax.jit, static_argnames=("fn", "axis", "batch_size"))
def _batch_gap(fn, data, batches, args, axis, batch_size):
  values = partitions.over_batches(fn, data, batches, axis=axis, args=args, batch_size=batch_size)
  whole = fn(data, *args)
  return {"gap": jnp.mean(values, axis=0) - whole, "batch_values": values, "whole": whole}


def batch_gap(
  fn: Callable[..., jax.Array],
  data: types.PyTree,
  batches: jax.typing.ArrayLike,
  *,
  axis: int = 0,
  args: tuple = (),
  batch_size: int | None = None,
) -> dict[str, jax.Array]:
  r"""The decomposability gap of any function of a batch: mean over batches minus the whole.

  .. math::
    \mathrm{DG} = \frac{1}{K} \sum_{b=1}^{K} f(\mathcal{B}^b) - f(\Omega)

  ROADMAP (Ramzi et al. 2021, eq. 6) defines it for `f` the AP of one query and `B^b` the
  batches of its retrieval set `Omega`; `jaxrank.decomposability_gap` is that case (consecutive
  batches of each list). Here `f` is any function of a batch, e.g. the in-batch mAP of
  embeddings (`jaxrank.batch_retrieval` then `jaxrank.ap_metric`: RaMBO's Fig. 2 compares it with
  the whole set's) or any loss. `batches` may be a partition (`jax.random.permutation(key,
  N).reshape(K, -1)`) or any `K` batches of equal size (sampled independently, say). Every batch
  counts in the mean: a batch where `f` is undefined counts as whatever `f` returns there (0 for
  jaxrank's metrics). For an AP, a positive gap means the batches are optimistic; for a loss
  `1 - AP`, the same gap has the opposite sign.

  Static: `fn`, `axis`, `batch_size`; traced: `data`, `batches`, `args`. Memory: `batch_size`
  gathered batches at once (`None`: one at a time) plus `fn` on the whole data.

  Args:
    fn: `fn(data_batch, *args) -> [...]` (a scalar usually), with `data_batch` the items of one
      batch.
    data: a pytree (e.g. `(embeddings [N, D], labels [N])`) whose leaves share the item axis
      `axis`.
    batches: `[K, B]` integer item indices.
    axis: the item axis of every leaf (`-1` for lists `[..., n]`).
    args: extra arguments of `fn`, traced.
    batch_size: batches evaluated at once, or `None` for one at a time.

  Returns:
    A dict: `"gap"` (`mean_b f(B^b) - f(Omega)`, shaped like `f`'s output), `"batch_values"`
    `[K, ...]` and `"whole"`.

  >>> import jax.numpy as jnp
  >>> import jaxrank
  >>> f = lambda d: jaxrank.ap_metric(*d)
  >>> scores, labels = jnp.array([0.9, 0.8, 0.7, 0.1]), jnp.array([1, 0, 1, 0])
  >>> out = batch_gap(f, (scores, labels), jnp.array([[0, 1], [2, 3]]))
  >>> out["batch_values"].tolist(), round(float(out["gap"]), 4)
  ([1.0, 1.0], 0.1667)
  """
  name = "batch_gap"
  _check_common(name, "fn", fn, batch_size, args)
  checks.check_array(name, "batches", batches, kind="numeric", ndim=2, layout="[K, B]")
  if not jnp.issubdtype(jnp.result_type(batches), jnp.integer):
    raise TypeError(
      f"{name}: batches must be integer item indices [K, B], got dtype "
      f"{jnp.result_type(batches)}; e.g. jax.random.permutation(key, N).reshape(K, -1)."
    )
  if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
    raise TypeError(f"{name}: axis must be an int (the item axis of every leaf), got {axis!r}.")
  sizes = {np.shape(leaf)[axis] for leaf in jax.tree.leaves(data) if np.ndim(leaf) > 0}
  if len(sizes) != 1:
    raise ValueError(
      f"{name}: every leaf of data must have the same number of items along axis {axis}, "
      f"got {sorted(sizes)}."
    )
  return _batch_gap(fn, data, jnp.asarray(batches), args, axis, batch_size)
