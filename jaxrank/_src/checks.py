"""Input checks shared by every public function: one vocabulary of errors.

Each check names the calling function (`fn`, the first argument of every helper, starts every
message), says what it received and what to change. `TypeError` for a value of the wrong kind (a
dtype, a Python type: a bool or a float where an int is needed, a non-boolean mask), `ValueError`
for a value of the right kind that is out of range or of the wrong shape. Static hyperparameters
are Python (or numpy) ints and never bools; real-valued hyperparameters go through `check_real`,
which checks them whenever they are known at trace time.

The helpers that only read a dtype and a shape (`check_positive_int`, `check_int_at_least`,
`check_int_labels`, `check_shape`, `check_callable`, and `check_real` on numbers) work on Python
and numpy values as well as JAX arrays, so the numpy-only parts (the samplers of `jaxrank.data`)
use them too.

`check_same_layout` is the one report of how a weights file and a model disagree (missing,
unexpected and mismatched keys), for every weight loader (`jaxrank.models.load_weights`,
`jaxrank.convert`).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from jaxrank._src import lists

_MAX_LISTED = 5  # Keys listed by `check_same_layout` per kind of problem.


def _dtype(value: Any) -> np.dtype:
  """The dtype of an array (a tracer included) or of what numpy makes of a Python value."""
  return value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype


def _axes(count: int) -> str:
  return "one axis" if count == 1 else f"{count} axes"


# What reading the elements of an array for an error message raises when they are not on this host:
# a tracer (traced values, known mask), or a global array of a multi-process job that spans other
# processes' devices (a RuntimeError). The messages then give a count, which every process can read.
_UNREADABLE = (jax.errors.TracerArrayConversionError, RuntimeError)


def check_lists(
  fn: str,
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  where: jax.typing.ArrayLike | None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Validates list-level inputs and returns them as arrays of the shape of `scores`.

  `labels` and `where` may have any shape that broadcasts to that of `scores` (the same labels for
  many lists of scores, as rax allows); `where=None` becomes all True.

  Labels and mask closed over by a traced caller are embedded in the program compactly
  (`lists.embedded_compactly`) and go through `lists.opaque`: the same values, compiled faster.
  Traced labels and masks (arguments of the caller's `jit`, or computed in it) do not: nothing
  is folded from them, and a barrier would only stop XLA from fusing what is computed from them
  into their consumers (on a TPU it wrote `[B, B]` relevance and masks to memory and read them
  back, a third of a pair loss's bytes).

  Raises at trace time: `TypeError` for non-floating scores, non-numeric labels or a non-boolean
  `where`; `ValueError` for shapes that do not broadcast to that of `scores`, or a scalar.
  """
  scores = jnp.asarray(scores)
  # Inside a trace, arrays that are not tracers are constants the caller closed over.
  traced = isinstance(scores, jax.core.Tracer)
  captured = [
    traced and x is not None and not isinstance(x, jax.core.Tracer) for x in (labels, where)
  ]
  # Arrays the caller closed over are embedded in the program; compactly (see lists.opaque too).
  labels = jnp.asarray(lists.embedded_compactly(labels, scores))
  where = lists.embedded_compactly(where, scores)
  if not jnp.issubdtype(scores.dtype, jnp.floating):
    raise TypeError(
      f"{fn}: scores must be a floating-point array, got dtype {scores.dtype}; "
      "cast them, e.g. scores.astype(jnp.float32)."
    )
  if scores.ndim < 1:
    raise ValueError(
      f"{fn}: scores must have at least one axis (the list axis, last), got a scalar."
    )
  if not (jnp.issubdtype(labels.dtype, jnp.number) or jnp.issubdtype(labels.dtype, jnp.bool_)):
    raise TypeError(f"{fn}: labels must be numeric or boolean, got dtype {labels.dtype}.")
  try:
    broadcast = np.broadcast_shapes(labels.shape, scores.shape) == scores.shape
  except ValueError:
    broadcast = False
  if not broadcast:
    raise ValueError(
      f"{fn}: labels have shape {labels.shape} but scores have shape {scores.shape}; "
      "they must be equal or broadcast to it (one label per score, the list on the last axis)."
    )
  # Labels shared by several lists (`[n]` for scores `[L, n]`) broadcast, as rax allows.
  labels = jnp.broadcast_to(labels, scores.shape)
  where = check_mask(fn, "where", where, scores.shape)
  # Captured labels and masks would be constant-folded by XLA (slow compiles): see lists.opaque.
  if captured[0]:
    (labels,) = lists.opaque(labels)
  if captured[1]:
    (where,) = lists.opaque(where)
  return scores, labels, where


def check_segments(fn: str, segments: Any, shape: Sequence[int]) -> jax.Array:
  """Validates segment ids (`jaxrank._src.segmented`) and returns them as an array.

  Raises `TypeError` unless their dtype is integer (a boolean or floating array of ids is a
  mistake: cast it) and `ValueError` unless their shape is `shape`, the scores' (one id per item;
  they do not broadcast). Only the dtype and the shape are read.
  """
  kind = _dtype(segments)
  if not np.issubdtype(kind, np.integer):
    raise TypeError(
      f"{fn}: segments must be integer ids (the items of a row with equal ids form one list), "
      f"got dtype {kind}; cast them, e.g. segments.astype(jnp.int32)."
    )
  got = tuple(np.shape(segments))
  if got != tuple(shape):
    raise ValueError(
      f"{fn}: segments have shape {got} but scores have shape {tuple(shape)}; give one "
      "segment id per score, in the scores' shape."
    )
  return jnp.asarray(segments)


_KINDS = {
  "floating": ("floating-point", (jnp.floating,)),
  "numeric": ("numeric (integer or floating-point)", (jnp.integer, jnp.floating)),
}


def check_array(
  fn: str,
  name: str,
  x: Any,
  *,
  kind: str = "floating",
  ndim: int | None = None,
  min_ndim: int | None = None,
  layout: str = "",
) -> None:
  """Checks the dtype and the number of axes of an array argument, reading nothing else.

  `x` may be a numpy array, a JAX array or a tracer, and is not converted (so a large numpy
  array stays on the host).

  Args:
    fn: the public function's name, which starts every message.
    name: the argument's name.
    x: the value.
    kind: `"floating"` (floating point only) or `"numeric"` (integer or floating point; never
      boolean).
    ndim: the exact number of axes required, if any.
    min_ndim: the least number of axes required, if any.
    layout: the expected layout, for the messages (e.g. `"[B, D]"`).

  Raises:
    TypeError: a dtype not of `kind`.
    ValueError: the wrong number of axes.
  """
  words, bases = _KINDS[kind]
  dtype = _dtype(x)
  if not any(jnp.issubdtype(dtype, base) for base in bases):
    raise TypeError(
      f"{fn}: {name} must be a {words} array, got dtype {dtype}; cast it, e.g. "
      f"{name}.astype(jnp.float32)."
    )
  shape = tuple(np.shape(x))
  suffix = f" {layout}" if layout else ""
  if ndim is not None and len(shape) != ndim:
    raise ValueError(f"{fn}: {name} must have {_axes(ndim)}{suffix}, got shape {shape}.")
  if min_ndim is not None and len(shape) < min_ndim:
    raise ValueError(
      f"{fn}: {name} must have at least {_axes(min_ndim)}{suffix}, got shape {shape}."
    )


def check_floating(
  fn: str,
  name: str,
  x: jax.typing.ArrayLike,
  *,
  ndim: int | None = None,
  min_ndim: int | None = None,
  layout: str = "",
) -> jax.Array:
  """`check_array(kind="floating")`, then returns `jnp.asarray(x)`."""
  check_array(fn, name, x, kind="floating", ndim=ndim, min_ndim=min_ndim, layout=layout)
  return jnp.asarray(x)


def check_mask(
  fn: str,
  name: str,
  mask: jax.typing.ArrayLike | None,
  shape: Sequence[int],
  *,
  like: str = "scores",
  broadcast: bool = True,
) -> jax.Array:
  """Validates a boolean mask and returns it with shape `shape` (all True when `mask` is None).

  Args:
    fn: the public function's name, which starts every message.
    name: the argument's name (`"where"`, usually).
    mask: `None`, or a boolean array.
    shape: the shape the mask applies to.
    like: what `shape` is the shape of, a plural noun for the messages (`"scores"`, `"labels"`).
    broadcast: accept any shape that broadcasts to `shape`; with `False`, exactly `shape`.

  Returns:
    A boolean `jax.Array` of shape `shape`.

  Raises:
    TypeError: a mask whose dtype is not boolean (0/1 integers included: compare them first).
    ValueError: a mask whose shape does not broadcast to (or, with `broadcast=False`, equal)
      `shape`.
  """
  shape = tuple(shape)
  if mask is None:
    return jnp.ones(shape, dtype=bool)
  mask = jnp.asarray(mask)
  if mask.dtype != jnp.bool_:
    raise TypeError(
      f"{fn}: {name} must be a boolean mask, got dtype {mask.dtype}; pass a bool array, "
      f"e.g. {name} != 0."
    )
  if not broadcast:
    if mask.shape != shape:
      raise ValueError(
        f"{fn}: {name} must be a boolean mask shaped like the {like} {shape}, got shape "
        f"{mask.shape}."
      )
    return mask
  try:
    return jnp.broadcast_to(mask, shape)
  except ValueError:
    raise ValueError(
      f"{fn}: {name} has shape {mask.shape}, which does not broadcast to the {like}' shape "
      f"{shape}; give one flag per item."
    ) from None


def check_int_labels(
  fn: str,
  name: str,
  labels: Any,
  *,
  layout: str = "[N]",
  allow_bool: bool = False,
  allow_empty: bool = True,
) -> None:
  """Checks a 1-D array of integer class labels, one per example.

  Only the dtype and the shape are read, so `labels` may be a numpy array, a JAX array or a
  tracer; convert it (`np.asarray` or `jnp.asarray`) before calling.

  Args:
    fn: the public function's name, which starts every message.
    name: the argument's name.
    labels: the labels.
    layout: the expected layout, for the messages.
    allow_bool: accept a boolean array (two classes).
    allow_empty: accept an array of no labels.

  Raises:
    ValueError: not 1-D, or empty when `allow_empty` is False.
    TypeError: a dtype that is not integer (nor boolean, when `allow_bool`).
  """
  shape = tuple(np.shape(labels))
  if len(shape) != 1:
    raise ValueError(
      f"{fn}: {name} must be a 1-D array of class labels {layout}, got shape {shape}."
    )
  if not allow_empty and shape[0] == 0:
    raise ValueError(f"{fn}: {name} must hold at least one class label {layout}, got none.")
  dtype = _dtype(labels)
  if not (np.issubdtype(dtype, np.integer) or (allow_bool and dtype == np.bool_)):
    raise TypeError(
      f"{fn}: {name} must be integers (class labels), got dtype {dtype}; map the classes to "
      f"integers first, e.g. np.unique({name}, return_inverse=True)[1]."
    )


def check_shape(
  fn: str,
  name: str,
  x: Any,
  expected: Sequence[int | None],
  *,
  layout: str = "",
  hint: str = "",
) -> None:
  """Raises `ValueError` unless `x` has the expected shape.

  `x` is an array, a tracer, or anything numpy sees as one (only its shape is read). A `None` in
  `expected` matches any size. `layout` replaces the expected shape in the message (for example
  `"[B, 128]"`); `hint` (what to change) is appended to it.
  """
  shape = tuple(np.shape(x))
  expected = tuple(expected)
  if len(shape) == len(expected) and all(e is None or e == s for s, e in zip(shape, expected)):
    return
  if not layout:
    sizes = ["_" if e is None else str(e) for e in expected]
    layout = f"({sizes[0]},)" if len(sizes) == 1 else f"({', '.join(sizes)})"
  raise ValueError(
    f"{fn}: {name} must be shaped {layout}, got shape {shape}.{' ' + hint if hint else ''}"
  )


def check_callable(fn: str, name: str, value: Any, *, hint: str = "") -> None:
  """Raises `TypeError` unless `value` is callable; `hint` (what to pass) is appended."""
  if not callable(value):
    raise TypeError(
      f"{fn}: {name} must be a function, got {type(value).__name__} {value!r}."
      f"{' ' + hint if hint else ''}"
    )


def check_positive_int(fn: str, name: str, value: Any, *, allow_none: bool = False) -> None:
  """Raises unless `value` is a positive int (a static hyperparameter).

  Python and numpy ints are accepted; bools (`True` is not a count) and floats raise `TypeError`,
  ints below 1 `ValueError`. With `allow_none`, `None` passes.
  """
  if value is None and allow_none:
    return
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
    raise TypeError(f"{fn}: {name} must be a positive int, got {value!r}.")
  if value < 1:
    raise ValueError(f"{fn}: {name} must be a positive int, got {value}.")


def check_int_at_least(fn: str, name: str, value: Any, minimum: int) -> None:
  """Raises unless `value` is an int `>= minimum` (a static hyperparameter).

  As `check_positive_int`: Python and numpy ints pass, bools and floats raise `TypeError`.
  """
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
    raise TypeError(f"{fn}: {name} must be an int >= {minimum}, got {value!r}.")
  if value < minimum:
    raise ValueError(f"{fn}: {name} must be an int >= {minimum}, got {value}.")


def check_item_weights(
  fn: str, weights: jax.typing.ArrayLike, where: jax.Array, dtype: Any
) -> jax.Array:
  """Validates per-item weights and returns them broadcast to the shape of `where`, in `dtype`.

  Raises `TypeError` for non-numeric weights, `ValueError`, naming both shapes, when they do not
  broadcast to the items' shape `where.shape` (per-list weights `[...]` are the usual mistake), and
  `ValueError` for a negative or NaN valid weight when the weights are known (not traced, see
  `known_any`); masked weights are not read.
  """
  kind = _dtype(weights)
  if not (jnp.issubdtype(kind, jnp.number) or jnp.issubdtype(kind, jnp.bool_)):
    raise TypeError(f"{fn}: item_weights must be numeric, got dtype {kind}.")
  weights = jnp.asarray(weights)
  try:
    if jnp.broadcast_shapes(weights.shape, where.shape) != where.shape:
      raise ValueError
  except ValueError:
    raise ValueError(
      f"{fn}: item_weights have shape {weights.shape}, which does not broadcast to the scores' "
      f"shape {tuple(where.shape)}: item_weights are per item, one per score."
    ) from None
  weights = jnp.broadcast_to(weights, where.shape)
  bad = where & ~(weights >= 0)  # NaN fails `>= 0` too.
  traced = f"{fn}: item_weights must be non-negative (and not NaN)."
  if weights.dtype != jnp.bool_ and known_any(bad, traced):
    try:
      got = f"{np.asarray(weights)[np.asarray(bad)].flat[0]} at a valid item"
    except _UNREADABLE:
      got = f"{int(jnp.sum(bad))} negative or NaN valid weights"
    raise ValueError(
      f"{fn}: item_weights must be non-negative, got {got}; mask the item out with where instead."
    )
  return weights.astype(dtype)


def check_list_weights(
  fn: str,
  weights: jax.typing.ArrayLike | None,
  scores_shape: tuple[int, ...],
  dtype: Any,
  *,
  segmented: bool = False,
) -> jax.Array | None:
  """Validates per-list weights and returns them broadcast to the lists' shape in `dtype`.

  The lists' shape is `scores_shape[:-1]`, or, with `segmented` (the function was given
  `segments`, `jaxrank._src.segmented`), `scores_shape` itself: one weight per segment, read at
  its first valid item. Raises `TypeError` for non-numeric weights and `ValueError`, naming both
  shapes, when they do not broadcast to the lists' shape (per-item weights `[..., n]` are the usual
  mistake without segments, per-row weights `[...]` with them), and `ValueError` for a negative
  or NaN weight when the weights are known (not traced, see `known_any`).
  """
  if weights is None:
    return None
  kind = _dtype(weights)
  if not (jnp.issubdtype(kind, jnp.number) or jnp.issubdtype(kind, jnp.bool_)):
    raise TypeError(f"{fn}: weights must be numeric, got dtype {kind}.")
  weights = jnp.asarray(weights)
  lists = tuple(scores_shape) if segmented else tuple(scores_shape[:-1])
  try:
    if jnp.broadcast_shapes(weights.shape, lists) != lists:
      raise ValueError
  except ValueError:
    if segmented:
      raise ValueError(
        f"{fn}: weights have shape {weights.shape}, which does not broadcast to the scores' "
        f"shape {lists}: with segments, weights are per segment, given at its items (read at "
        "its first valid item); weights[..., None] weighs every segment of a row alike."
      ) from None
    raise ValueError(
      f"{fn}: weights have shape {weights.shape}, which does not broadcast to the lists' shape "
      f"{lists} (the scores' shape {tuple(scores_shape)} without its last axis): weights are "
      "per list, one per query, not per item."
    ) from None
  bad = ~(weights >= 0)  # NaN fails `>= 0` too.
  traced = f"{fn}: weights must be non-negative (and not NaN)."
  if weights.dtype != jnp.bool_ and known_any(bad, traced):
    try:
      got = f"{np.asarray(weights)[np.asarray(bad)].flat[0]}"
    except _UNREADABLE:
      got = f"{int(jnp.sum(bad))} negative or NaN weights"
    raise ValueError(
      f"{fn}: weights must be non-negative, got {got}; they weigh each list's loss in the "
      "reduction (e.g. class_balancing_weights)."
    )
  return jnp.broadcast_to(weights.astype(dtype), lists)


_TRACED_CHECKS: contextvars.ContextVar[bool] = contextvars.ContextVar(
  "jaxrank_traced_checks", default=False
)


@contextlib.contextmanager
def traced_checks() -> Iterator[None]:
  """Checks the values of traced inputs too (under `jit`), through `jax.experimental.checkify`.

  Outside this block, jaxrank checks values (scores in a histogram loss's range, non-negative
  weights and graded labels, integer Hamming distances, hyperparameters in range) only when
  they are known at trace time: under `jit` they pass unchecked, and, for example, scores
  outside `[-1, 1]` are clipped to a histogram's end bins with a zero gradient. Functions traced
  inside the block emit each such check as a `checkify.check` instead, with the same message as
  the eager `ValueError`; functionalize them with `checkify.checkify` (required: a traced check
  that is not functionalized is an error when staged) and read the error, e.g. once per
  training step while debugging::

    with jaxrank.traced_checks():
      err, loss = checkify.checkify(jax.jit(loss_fn))(scores, labels)
    err.throw()  # ValueError-like JaxRuntimeError: "fastap_loss: scores must lie in [-1, 1] ..."

  The setting is read when a function is traced (a function jitted and traced before the block
  keeps its unchecked code; jit a new one inside), is a `contextvars` variable (each thread has
  its own), and nothing is set at import. A check costs one reduction of a boolean per input.

  Yields:
    None.
  """
  token = _TRACED_CHECKS.set(True)
  try:
    yield
  finally:
    _TRACED_CHECKS.reset(token)


def known_any(mask: Any, message: str | None = None) -> bool:
  """Whether any element of the boolean `mask` is True, when it is known at trace time.

  The value checks of concrete inputs (out-of-range scores, negative labels or weights) use it: a
  concrete mask (NumPy, an eager JAX array, or an array under `jax.grad` outside `jit`) is reduced
  and read; a traced one (under `jit`) gives False, so that traced inputs are not checked and never
  raise (one device-to-host transfer of a boolean per check, eagerly; nothing under `jit`). Inside
  `traced_checks`, a traced mask with a `message` becomes `checkify.check(~any(mask), message)`.
  """
  try:
    return bool(jnp.any(mask))
  except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError):
    if message is not None and _TRACED_CHECKS.get():
      # checkify formats its message: braces in ours are literal.
      checkify.check(~jnp.any(mask), message.replace("{", "{{").replace("}", "}}"))
    return False


def check_graded_labels(
  fn: str, labels: jax.Array, where: jax.Array, *, reason: str = "the gain is 2**label - 1"
) -> None:
  """Raises `ValueError` when a valid graded label (NDCG's relevance) is negative and known.

  A gain `2**label - 1` below 0 would make NDCG leave `[0, 1]` (`reason`, in the message: why the
  labels must be non-negative, for the metrics other than NDCG that read grades). Masked labels
  are not read; traced labels (under `jit`) are checked only inside `traced_checks` (`known_any`).
  """
  bad = where & (labels < 0)
  fix = "; clip them (jnp.maximum(labels, 0)) or mask those items out with where."
  if known_any(bad, f"{fn}: graded labels must be >= 0 ({reason}){fix}"):
    try:
      got = f"{np.asarray(labels)[np.asarray(bad)].flat[0]} at a valid item"
    except _UNREADABLE:
      got = f"{int(jnp.sum(bad))} negative valid labels"
    raise ValueError(f"{fn}: graded labels must be >= 0 ({reason}), got {got}{fix}")


def check_cutoffs(fn: str, ks) -> tuple[int, ...]:
  """`ks` as a tuple of positive ints (the cut-offs of an evaluation: Recall@k, mP@k); raises
  `ValueError` when it is empty or a cut-off is not a positive int."""
  ks = tuple(ks)
  if not ks:
    raise ValueError(f"{fn}: ks must name at least one cut-off, e.g. (1, 5, 10).")
  for k in ks:
    check_positive_int(fn, "each k in ks", k)
  return ks


def check_class_indices(
  fn: str, labels: jax.Array, where: jax.Array, num_classes: int, *, fix: str
) -> None:
  """Raises `ValueError` when a valid integer class label is known to lie outside `[0, C)`.

  `C = num_classes`, the classes there are (the rows of a table of proxies, say); `fix` (what to
  change) ends the message. Masked labels are not read (padding may carry -1); traced labels
  (under `jit`) are checked only inside `traced_checks` (`known_any`), and otherwise pass.
  """
  bad = where & ((labels < 0) | (labels >= num_classes))
  what = f"{fn}: labels must be class indices in [0, {num_classes})"
  if known_any(bad, f"{what}; {fix}"):
    try:
      got = f"{np.asarray(labels)[np.asarray(bad)].flat[0]} at a valid item"
    except _UNREADABLE:
      got = f"{int(jnp.sum(bad))} valid labels outside it"
    raise ValueError(f"{what}, got {got}; {fix}")


def check_in_range(
  fn: str,
  name: str,
  values: jax.Array,
  where: jax.Array,
  low: float,
  high: float,
  *,
  hint: str = "",
) -> None:
  """Raises `ValueError` when a valid value is known to lie outside `[low, high]`.

  Rounding is allowed: the bounds are widened by `max(1e-3, 4 eps) * (high - low) / 2`, with `eps`
  the machine epsilon of the values' dtype (cosines computed in float32, or by reduced-precision
  matrix products such as TF32, exceed 1 by about that much). NaN is not out of range (it makes its
  list NaN); infinities are. Masked values are not read, and traced values (under `jit`) are
  checked only inside `traced_checks` (`known_any`). `hint` (how to map the values into the range)
  is appended.
  """
  eps = float(jnp.finfo(values.dtype).eps)
  slack = max(1e-3, 4 * eps) * (high - low) / 2
  bad = where & ((values < low - slack) | (values > high + slack))
  hint = " " + hint if hint else ""
  traced = f"{fn}: {name} must lie in [{low:g}, {high:g}] (up to rounding).{hint}"
  if known_any(bad, traced):
    try:
      got = f"{float(np.asarray(values)[np.asarray(bad)].flat[0]):g} at a valid item"
    except _UNREADABLE:  # Known mask, traced values (under grad).
      got = f"{int(jnp.sum(bad))} valid values outside it"
    raise ValueError(
      f"{fn}: {name} must lie in [{low:g}, {high:g}] (up to rounding), got {got}.{hint}"
    )


@overload
def check_real(
  fn: str,
  name: str,
  value: Any,
  *,
  above: float | None = ...,
  at_least: float | None = ...,
  at_most: float | None = ...,
  hint: str = ...,
  scalar: Literal[True] = ...,
  static: Literal[True],
) -> float: ...


@overload
def check_real(
  fn: str,
  name: str,
  value: Any,
  *,
  above: float | None = ...,
  at_least: float | None = ...,
  at_most: float | None = ...,
  hint: str = ...,
  scalar: bool = ...,
  static: bool = ...,
) -> float | None: ...


def check_real(
  fn: str,
  name: str,
  value: Any,
  *,
  above: float | None = None,
  at_least: float | None = None,
  at_most: float | None = None,
  hint: str = "",
  scalar: bool = True,
  static: bool = False,
) -> float | None:
  """Validates a real hyperparameter (a Python number or a 0-d array) and returns it.

  Returns the value as a Python float when it is known at trace time, after checking
  `value > above`, `value >= at_least` and `value <= at_most` (each when given); returns `None`,
  unchecked, when it is a traced array (a hyperparameter under `jit` or `grad` is the caller's
  responsibility, or checked through checkify inside `traced_checks`). Raises `TypeError` for a
  non-real value (a bool included), `ValueError` for a
  non-scalar, NaN or out-of-range one; `hint` is appended to the range message.

  With `scalar=False` an array of any shape is accepted too (one value per list, say): when it
  is known, every element is checked against the bounds, and `None` is returned for it. With
  `static=True` the value must be known at trace time: a traced one raises `TypeError`.
  """
  if isinstance(value, (bool, np.bool_)):
    raise TypeError(f"{fn}: {name} must be a real number, got {value!r}.")
  shape = tuple(value.shape) if hasattr(value, "shape") else np.shape(value)
  if scalar and shape != ():
    raise ValueError(f"{fn}: {name} must be a scalar, got an array of shape {shape}.")
  try:
    known = np.asarray(value)
  except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
    if static:
      raise TypeError(
        f"{fn}: {name} must be known at trace time (a Python number), got a traced value; "
        "pass it as a static argument, or close over it instead of passing it through jit."
      ) from None
    _check_traced_real(fn, name, value, above, at_least, at_most, hint)
    return None
  if not (np.issubdtype(known.dtype, np.floating) or np.issubdtype(known.dtype, np.integer)):
    shown = repr(value) if known.ndim == 0 else f"an array of dtype {known.dtype}"
    raise TypeError(f"{fn}: {name} must be a real number, got {shown}.")
  bounds = []
  if above is not None:
    bounds.append((known > above, f"> {above}"))
  if at_least is not None:
    bounds.append((known >= at_least, f">= {at_least}"))
  if at_most is not None:
    bounds.append((known <= at_most, f"<= {at_most}"))
  for ok, text in bounds:
    if not np.all(ok):  # NaN fails every comparison.
      if known.ndim == 0:
        got = f"{float(known)}"
      else:
        got = f"{float(known[~ok].flat[0])} in an array of shape {known.shape}"
      raise ValueError(f"{fn}: {name} must be {text}, got {got}.{' ' + hint if hint else ''}")
  return float(known) if known.ndim == 0 else None


def _check_traced_real(fn, name, value, above, at_least, at_most, hint):
  """`check_real`'s bounds on a traced value, as a `checkify.check` inside `traced_checks`."""
  value = jnp.asarray(value)
  for bound, ok, text in (
    (above, lambda b: value > b, f"> {above}"),
    (at_least, lambda b: value >= b, f">= {at_least}"),
    (at_most, lambda b: value <= b, f"<= {at_most}"),
  ):
    if bound is not None:
      known_any(~ok(bound), f"{fn}: {name} must be {text}.{' ' + hint if hint else ''}")


def check_same_layout(
  fn: str,
  path: str | os.PathLike,
  target: str,
  file_shapes: Mapping[str, tuple[int, ...]],
  model_shapes: Mapping[str, tuple[int, ...]],
) -> None:
  """Raises one `ValueError` naming the missing, unexpected and mismatched keys, if any.

  Args:
    fn: the loader's name, first word of the message.
    path: the weights file, named in the message.
    target: what the file was loaded into (`"model"`, `"ResNet"`, ...).
    file_shapes: each key of the file with its array's shape.
    model_shapes: each key the model expects with the shape it expects there.
  """
  missing = sorted(model_shapes.keys() - file_shapes.keys())
  unexpected = sorted(file_shapes.keys() - model_shapes.keys())
  mismatched = [
    f"{key} (file {tuple(file_shapes[key])}, model {tuple(model_shapes[key])})"
    for key in sorted(model_shapes.keys() & file_shapes.keys())
    if tuple(file_shapes[key]) != tuple(model_shapes[key])
  ]
  problems = [
    f"{what} {_first_few(items)}"
    for what, items in (
      ("missing keys", missing),
      ("unexpected keys", unexpected),
      ("shape mismatches", mismatched),
    )
    if items
  ]
  if problems:
    raise ValueError(
      f"{fn}: {os.fspath(path)!r} does not match the {target}: {'; '.join(problems)}."
    )


def _first_few(items: list[str]) -> str:
  listed = ", ".join(items[:_MAX_LISTED])
  more = len(items) - _MAX_LISTED
  return f"{listed} (and {more} more)" if more > 0 else listed
