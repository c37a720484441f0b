"""Input checks shared by every public function: one vocabulary of errors.

Each check names the calling function and says what to change. `TypeError` for a value of the
wrong kind (dtype, Python type), `ValueError` for a value of the right kind that is out of range or
of the wrong shape. Hyperparameters are checked whenever they are known at trace time.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


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


def check_int_at_least(fn: str, name: str, value: Any, minimum: int) -> None:
  """Raises unless `value` is a Python int `>= minimum` (a static hyperparameter)."""
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
    raise TypeError(f"{fn}: {name} must be an int >= {minimum}, got {value!r}.")
  if value < minimum:
    raise ValueError(f"{fn}: {name} must be an int >= {minimum}, got {value}.")


def check_list_weights(
    fn: str, weights: jax.typing.ArrayLike | None, scores_shape: tuple[int, ...], dtype: Any
) -> jax.Array | None:
  """Validates per-list weights and returns them broadcast to `scores_shape[:-1]` in `dtype`.

  Raises `TypeError` for non-numeric weights and `ValueError`, naming both shapes, when they do
  not broadcast to the lists' shape (per-item weights `[..., n]` are the usual mistake).
  """
  if weights is None:
    return None
  kind = weights.dtype if hasattr(weights, "dtype") else np.asarray(weights).dtype
  if not (jnp.issubdtype(kind, jnp.number) or jnp.issubdtype(kind, jnp.bool_)):
    raise TypeError(f"{fn}: weights must be numeric, got dtype {kind}.")
  weights = jnp.asarray(weights)
  lists = tuple(scores_shape[:-1])
  try:
    if jnp.broadcast_shapes(weights.shape, lists) != lists:
      raise ValueError
  except ValueError:
    raise ValueError(
        f"{fn}: weights have shape {weights.shape}, which does not broadcast to the lists' shape "
        f"{lists} (the scores' shape {tuple(scores_shape)} without its last axis): weights are "
        "per list, one per query, not per item."
    ) from None
  return jnp.broadcast_to(weights.astype(dtype), lists)


def check_real(
    fn: str,
    name: str,
    value: Any,
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
    hint: str = "",
) -> float | None:
  """Validates a real scalar hyperparameter (a Python number or a 0-d array) and returns it.

  Returns the value as a Python float when it is known at trace time, after checking
  `value > above`, `value >= at_least` and `value <= at_most` (each when given); returns `None`,
  unchecked, when it is a traced array (a hyperparameter under `jit` or `grad` is the caller's
  responsibility). Raises `TypeError` for a non-real value, `ValueError` for a non-scalar, NaN or
  out-of-range one; `hint` is appended to the range message.
  """
  if isinstance(value, (bool, np.bool_)):
    raise TypeError(f"{fn}: {name} must be a real number, got {value!r}.")
  shape = jnp.shape(value)
  if shape != ():
    raise ValueError(f"{fn}: {name} must be a scalar, got an array of shape {shape}.")
  try:
    known = np.asarray(value)
  except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
    return None
  if not (np.issubdtype(known.dtype, np.floating) or np.issubdtype(known.dtype, np.integer)):
    raise TypeError(f"{fn}: {name} must be a real number, got {value!r}.")
  number = float(known)
  bounds = []
  if above is not None:
    bounds.append((number > above, f"> {above}"))
  if at_least is not None:
    bounds.append((number >= at_least, f">= {at_least}"))
  if at_most is not None:
    bounds.append((number <= at_most, f"<= {at_most}"))
  for ok, text in bounds:
    if not ok:  # NaN fails every comparison.
      raise ValueError(f"{fn}: {name} must be {text}, got {number}.{' ' + hint if hint else ''}")
  return number

