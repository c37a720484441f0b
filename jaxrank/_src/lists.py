"""List conventions shared by every metric and loss: accumulation dtype, reductions, NaN.

rax's conventions: a list without a valid relevant item is left out of the reduction and gives 0;
`reduce_fn=None` returns one value per list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import types


def compute_dtype(dtype: Any) -> jnp.dtype:
  """The dtype in which counts, sums and ratios are accumulated: at least float32."""
  return jnp.promote_types(dtype, jnp.float32)


def opaque(*arrays: jax.Array) -> tuple[jax.Array, ...]:
  """The arrays, through one `optimization_barrier`: XLA cannot see that they are constants.

  Training scripts and notebooks often close over the labels and masks
  (`jax.jit(jax.grad(lambda s: loss(s, labels, where=mask)))`), which makes them compile-time
  constants; XLA then constant-folds whatever is computed from them alone (relevance masks, gains,
  counts, cumulative sums, sorts), which at `[4096, 4096]` takes seconds to minutes of compilation
  on CPU and embeds the results in the program. `checks.check_lists` passes captured labels and
  masks of every list-level function through this barrier, so nothing derived from them is folded
  whatever the calling pattern. Traced inputs do not need it and do not get it: a barrier also
  stops XLA from fusing the arrays' producers into their consumers. Works under `jit`, `vmap`
  and `grad` (the barrier is the identity for values and tangents). The constants themselves are
  embedded compactly (`embedded_compactly`).
  """
  return jax.lax.optimization_barrier(arrays)


# Closed-over arrays from this many entries up are embedded compactly (`embedded_compactly`).
COMPACT_MIN_SIZE = 1024


def embedded_compactly(x: Any, scores: jax.Array) -> Any:
  """`x`, or its values rebuilt in the program from a compact constant when `x` would be embedded.

  An array that is not a tracer, passed beside traced `scores`, is one that the caller's traced
  function closed over (`jax.jit(jax.grad(lambda s: loss(s, labels, where=mask)))`): XLA embeds
  it in the program, and on CPU embedding costs time by the byte whatever the function does
  (about 1 s for `[4096, 4096]` int32 labels and a boolean mask, 80 MB). Such an array is
  embedded instead as bits (`np.packbits`) when its values are 0 and 1 (masks, binary labels: an
  eighth of a boolean mask's bytes), or as int8 when they are integers in `[-128, 127]` (graded
  labels: a quarter of int32's). The program rebuilds the same values in the same dtype behind
  `opaque`'s barrier, so XLA does not fold them back into a full-size constant. Anything else is
  returned as it is: tracers, small arrays (below `COMPACT_MIN_SIZE` entries), arrays beside
  untraced scores (eager calls), other values, and arrays not readable on this host (a
  multi-process global array).
  """
  if not isinstance(scores, jax.core.Tracer) or isinstance(x, jax.core.Tracer):
    return x
  if not isinstance(x, (np.ndarray, jax.Array)) or x.ndim < 1 or x.size < COMPACT_MIN_SIZE:
    return x
  try:
    host = np.asarray(x)
  except RuntimeError:  # A global array spanning other processes' devices.
    return x
  kind = host.dtype
  if not (kind == np.bool_ or np.issubdtype(kind, np.integer) or np.issubdtype(kind, np.floating)):
    return x
  dtype = jax.dtypes.canonicalize_dtype(kind)  # What jnp.asarray(x) would give (int32 for int64).
  if kind == np.bool_ or np.all((host == 0) | (host == 1)):
    (bits,) = opaque(jnp.asarray(np.packbits(host.astype(bool), axis=-1)))
    return jnp.unpackbits(bits, axis=-1, count=host.shape[-1]).astype(dtype)
  with np.errstate(invalid="ignore", over="ignore"):  # NaN, inf and large values: not equal below.
    small = host.astype(np.int8)
  if np.array_equal(small, host):  # Integer values in [-128, 127].
    (narrow,) = opaque(jnp.asarray(small))
    return narrow.astype(dtype)
  return x


def safe_reduce(
  values: jax.Array,
  valid: jax.Array,
  reduce_fn: types.ReduceFn,
  *,
  weights: jax.Array | None = None,
) -> jax.Array:
  """Reduces per-list values over the lists where `valid` holds.

  Invalid lists are set to 0 and left out of the reduction. With every list invalid the result
  is 0, not NaN, and so is its gradient. `reduce_fn` is called as `reduce_fn(values, where=valid)`
  (the signature of `jnp.mean` and `jnp.sum`); `None` returns the per-list values. `jnp.mean` is
  computed here as a sum over a count, so an empty mask gives 0 with a zero gradient; any other
  `reduce_fn` must give 0 for an empty mask itself (`jnp.sum` does).

  With per-list `weights` (shaped like `values`) the values are multiplied by them first, so
  `None` returns `weights * values`, `jnp.sum` gives `sum(weights * values)`, and `jnp.mean` gives
  the weighted mean `sum(weights * values) / sum(weights)` over the valid lists (0 when the valid
  weights sum to 0); any other `reduce_fn` gets the weighted values.
  """
  if weights is not None:
    weights = jnp.where(valid, weights, jnp.zeros_like(weights))
    values = values * weights
  values = jnp.where(valid, values, jnp.zeros_like(values))
  if reduce_fn is None:
    return values
  if reduce_fn is jnp.mean:
    reduce_fn = Mean(jnp.sum)
  if isinstance(reduce_fn, Mean):
    return reduce_fn(values, where=valid, weights=weights)
  # Any other reduce_fn sees the masked values and the mask, and must itself give 0 for an empty
  # mask (jnp.sum does).
  return reduce_fn(values, where=valid)


class Mean:
  """A `reduce_fn`: the mean over the valid lists, its sums taken by `sum_fn`.

  `safe_reduce` treats `jnp.mean` as `Mean(jnp.sum)`; `sharded_mean` is a `Mean` whose sums run
  over the devices of a mesh axis; `blocked_loss` takes the two sums (`sums`) of a block of lists
  at a time and divides their totals over the blocks (`divide`). With per-list weights (passed by
  `safe_reduce`), the mean is `sum(weights * values) / sum(weights)` over the valid lists, 0 when
  the valid weights sum to 0; without, the sum over the count, 0 with no valid list (and a zero
  gradient either way).
  """

  def __init__(self, sum_fn: Callable[[jax.Array], jax.Array]):
    self.sum_fn = sum_fn

  def __call__(
    self, values: jax.Array, where: jax.Array, weights: jax.Array | None = None
  ) -> jax.Array:
    return self.divide(*self.sums(values, where, weights))

  def sums(
    self, values: jax.Array, where: jax.Array, weights: jax.Array | None = None
  ) -> tuple[jax.Array, jax.Array]:
    """The mean's numerator and denominator, each taken by `sum_fn`: the sum of the valid
    (weighted) values, and the number of valid lists (the sum of their weights)."""
    values = jnp.where(where, values, jnp.zeros_like(values))
    if weights is None:
      return self.sum_fn(values), self.sum_fn(where.astype(values.dtype))
    total = self.sum_fn(jnp.where(where, weights, jnp.zeros_like(weights))).astype(values.dtype)
    return self.sum_fn(values), total

  @staticmethod
  def divide(numerator: jax.Array, denominator: jax.Array) -> jax.Array:
    """`numerator / denominator`, 0 (with a zero gradient) when the denominator is 0."""
    return numerator / jnp.where(denominator != 0, denominator, jnp.ones_like(denominator))


def nan_if_any(values: jax.Array, scores: jax.Array, where: jax.Array) -> jax.Array:
  """Makes a list's value NaN when one of its valid scores is NaN (masked NaNs are ignored).

  The NaNs are counted by a floating sum over each list (exact: a sum of ones and zeros is positive
  exactly when one term is), not by `jnp.any`: XLA fuses a sum into the loss's own sums over the
  same scores, where a boolean reduction took a pass of its own over the `[B, B]` scores on a TPU.
  """
  one, zero = jnp.ones((), scores.dtype), jnp.zeros((), scores.dtype)
  nans = jnp.where(jnp.isnan(scores) & where, one, zero)
  has_nan = jnp.sum(nans, axis=-1) > 0
  return jnp.where(has_nan, jnp.asarray(jnp.nan, values.dtype), values)


def counted_scores(scores: jax.Array, where: jax.Array, counted: jax.Array) -> jax.Array:
  """`scores` with masked items and every item of a list left out of the reduction set to 0.

  A list left out of the reduction (`counted` False: no relevant valid item, say) gets a zero
  cotangent, but zero times the partial derivative of a NaN or infinite score is NaN: one NaN
  score of an excluded list would poison the whole gradient. Every loss body therefore computes on
  these scores, replaced before any arithmetic (the "double where": `jnp.where` passes a zero
  gradient to the branch it does not select), so such lists and masked items get an exactly zero
  gradient, while the NaN check (`nan_if_any`, `finish`) still reads the original scores.

  Args:
    scores: `[..., n]` scores.
    where: `[..., n]` boolean mask of valid items.
    counted: `[...]` boolean mask of the lists that enter the reduction (computed from the labels
      and `where` only, never from the scores).

  Returns:
    `[..., n]` scores in the dtype of `scores`.
  """
  keep = where & counted[..., None]
  return jnp.where(keep, scores, jnp.zeros_like(scores))


def varying_like(x: jax.Array, template: jax.Array) -> jax.Array:
  """`x`, marked as varying over the same `shard_map` mesh axes as `template` (no-op outside).

  Loop carries and callback results must carry the same device-variance type as the values they
  are combined with; a fresh constant (`jnp.zeros`) is device-invariant. (Newer JAX records the
  axes as `manual_axis_type.varying`, older as `vma`.)
  """
  missing = tuple(sorted(_varying_axes(template) - _varying_axes(x)))
  return jax.lax.pcast(x, missing, to="varying") if missing else x


def _varying_axes(x: jax.Array) -> frozenset:
  aval = jax.typeof(x)
  manual = getattr(aval, "manual_axis_type", None)
  return frozenset(manual.varying if manual is not None else getattr(aval, "vma", ()) or ())


def finish(
  values: jax.Array,
  scores: jax.Array,
  where: jax.Array,
  valid_lists: jax.Array,
  reduce_fn: types.ReduceFn,
  *,
  weights: jax.Array | None = None,
) -> jax.Array:
  """The last step of every metric and loss: NaN for lists with a valid NaN score, then the
  reduction over `valid_lists` (`safe_reduce`, weighted by the per-list `weights` if given)."""
  return safe_reduce(nan_if_any(values, scores, where), valid_lists, reduce_fn, weights=weights)
