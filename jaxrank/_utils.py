"""Input checks and list reductions shared by every metric and loss.

Private: the public functions call these so that every entry point rejects bad input with the
same sentences and reduces lists the same way (rax's conventions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

ReduceFn = Callable[..., jax.Array] | None


def compute_dtype(dtype: Any) -> jnp.dtype:
  """The dtype in which counts, sums and ratios are accumulated: at least float32."""
  return jnp.promote_types(dtype, jnp.float32)


def check_lists(
    fn: str,
    scores: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike,
    where: jax.typing.ArrayLike | None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Validates list-level inputs and returns them as arrays (where broadcast, never None).

  Raises at trace time: `TypeError` for non-floating scores, non-numeric labels or a non-boolean
  `where`; `ValueError` for mismatched shapes or a scalar.
  """
  scores = jnp.asarray(scores)
  labels = jnp.asarray(labels)
  if not jnp.issubdtype(scores.dtype, jnp.floating):
    raise TypeError(
        f"{fn}: scores must be a floating-point array, got dtype {scores.dtype}; "
        "cast them, e.g. scores.astype(jnp.float32)."
    )
  if scores.ndim < 1:
    raise ValueError(
        f"{fn}: scores must have at least one axis (the list axis, last), got a scalar."
    )
  if not (
      jnp.issubdtype(labels.dtype, jnp.number) or jnp.issubdtype(labels.dtype, jnp.bool_)
  ):
    raise TypeError(f"{fn}: labels must be numeric or boolean, got dtype {labels.dtype}.")
  if labels.shape != scores.shape:
    raise ValueError(
        f"{fn}: labels have shape {labels.shape} but scores have shape {scores.shape}; "
        "they must be equal (one label per score, the list on the last axis)."
    )
  if where is None:
    where = jnp.ones(scores.shape, dtype=bool)
  else:
    where = jnp.asarray(where)
    if where.dtype != jnp.bool_:
      raise TypeError(f"{fn}: where must be a boolean mask, got dtype {where.dtype}.")
    try:
      where = jnp.broadcast_to(where, scores.shape)
    except ValueError:
      raise ValueError(
          f"{fn}: where has shape {where.shape}, which does not broadcast to the scores' "
          f"shape {scores.shape}."
      ) from None
  return scores, labels, where


def check_positive_int(fn: str, name: str, value: Any, *, allow_none: bool = False) -> None:
  """Raises unless `value` is a positive Python int (a static hyperparameter)."""
  if value is None and allow_none:
    return
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
    raise TypeError(f"{fn}: {name} must be a positive int, got {value!r}.")
  if value < 1:
    raise ValueError(f"{fn}: {name} must be a positive int, got {value}.")


def safe_reduce(values: jax.Array, valid: jax.Array, reduce_fn: ReduceFn) -> jax.Array:
  """Reduces per-list values over the lists where `valid` holds.

  Invalid lists are set to 0 and left out of the reduction. With every list invalid the result
  is 0, not NaN, and so is its gradient. `reduce_fn` is called as `reduce_fn(values, where=valid)`
  (the signature of `jnp.mean` and `jnp.sum`); `None` returns the per-list values.
  """
  values = jnp.where(valid, values, jnp.zeros_like(values))
  if reduce_fn is None:
    return values
  if reduce_fn is jnp.mean:
    count = jnp.sum(valid, dtype=values.dtype)
    return jnp.sum(values) / jnp.maximum(count, 1)
  out = reduce_fn(values, where=valid)
  return jnp.where(jnp.any(valid), out, jnp.zeros_like(out))


def nan_if_any(values: jax.Array, scores: jax.Array, where: jax.Array) -> jax.Array:
  """Makes a list's value NaN when one of its valid scores is NaN (masked NaNs are ignored)."""
  has_nan = jnp.any(jnp.isnan(scores) & where, axis=-1)
  return jnp.where(has_nan, jnp.asarray(jnp.nan, values.dtype), values)
