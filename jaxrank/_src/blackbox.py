"""Losses on blackbox-differentiated ranks (RaMBO, Rolinek et al. 2020): AP and recall.

`blackbox_ranks.blackbox_ranks` returns the exact ranks of a list; its gradient is not the
derivative of the ranks (zero almost everywhere) but the interpolation of Algorithm 1.
`blackbox_ap_loss` and `blackbox_recall_loss` are exact AP and recall losses whose gradients come
from that interpolation.

A valid NaN score makes its list's value NaN (README, "Conventions"), as for every other loss, on
every platform: the ranks place NaN scores last on both sort paths (`ranking.descending_ranks`),
and the per-list values go through `lists.finish` (on the counting path too: its keys,
`blackbox_ranks.order_keys`, order NaN last as the sorts do). Such a list passes a zero cotangent
to its ranks, so its scores get a zero gradient; the other lists keep their values and gradients.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxrank import types
from jaxrank._src import blackbox_ranks
from jaxrank._src import checks
from jaxrank._src import lists
from jaxrank._src import segmented

COUNT_UP_TO = 16
"""Relevant items per list up to which a loss whose labels are concrete counts without being told.

Counting costs about `4 K` fused passes over each list forward and backward (`K` the most
relevant items of a list), sorting two sorts: for a few relevant items counting is the faster on
CPU (numpy's sort) and by far on a TPU or GPU (XLA's sort). Beyond this bound a loss without
`max_relevant` sorts.
"""


def concrete_relevant_count(labels, where, shape) -> int | None:
  """The most relevant valid items of any list, when `labels` and `where` are concrete: not
  traced (numpy arrays, or arrays that a traced caller closed over), read on the host at trace
  time; `None` when either is traced (or not readable on this process)."""
  if isinstance(labels, jax.core.Tracer) or isinstance(where, jax.core.Tracer):
    return None
  try:
    with jax.ensure_compile_time_eval():
      relevant = jnp.asarray(labels) >= 1
      if where is not None:
        relevant = relevant & jnp.asarray(where)
      relevant = jnp.broadcast_to(relevant, shape)
      return int(jnp.max(jnp.sum(relevant, axis=-1), initial=0))
  except RuntimeError:  # A global array spanning other processes' devices.
    return None


def _relevant_bound(labels, where, shape, max_relevant) -> tuple[int | None, bool]:
  """`(K, checked)`: the counting bound (`None`: the sort) and whether a list may exceed it
  (then it is NaN). Concrete labels within the bound (`max_relevant`, or `COUNT_UP_TO` without
  one) count exactly their most relevant items; traced labels count `max_relevant` (the caller's
  promise, checked per list), or sort without it."""
  n = shape[-1]
  bound = None if max_relevant is None else min(max_relevant, n)
  known = concrete_relevant_count(labels, where, shape)
  if known is None:
    return bound, bound is not None
  if known <= (COUNT_UP_TO if bound is None else bound):
    return max(known, 1), False
  return bound, bound is not None


def _blackbox_list_values(
  fn, scores, labels, where, segments, interpolation, margin, max_relevant, body
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """The per-list body shared by the AP and recall losses, on either rank path.

  Margin shift (eq. 14-15), `interpolation` scaled by the valid items, then the blackbox ranks of
  the relevant items and their ranks among the relevant items (constants: as in the authors' code
  they carry no gradient), passed to `body(ranks, relevant_ranks, relevant, num_relevant)` (arrays
  read only where `relevant`, summed over their last axis: `blackbox_ranks.blackbox_list_values`,
  whose accelerator form passes the `K` counted slots), which gives the per-list values (NaN for a
  list beyond a bound it may exceed). Returns the values
  `[...]`, the relevant counts `[...]`, and the checked scores and mask (for `lists.finish`).
  """
  labels_in, where_in = labels, where
  scores, labels, where = checks.check_lists(fn, scores, labels, where)
  interpolation = blackbox_ranks.check_interpolation(fn, interpolation)
  checks.check_real(
    fn, "margin", margin, at_least=0, scalar=False, hint="It is RaMBO's alpha (eq. 14): 0.02."
  )
  checks.check_positive_int(fn, "max_relevant", max_relevant, allow_none=True)
  count, checked = _relevant_bound(labels_in, where_in, scores.shape, max_relevant)
  # With segments, the lists are the segments (`jaxrank._src.segmented`): the bound above, read
  # from the packed rows, holds for them too.
  scores, where, labels = segmented.as_lists(fn, segments, scores, where, labels)
  dtype = lists.compute_dtype(scores.dtype)
  relevant = where & (labels >= 1)
  # Eq. 14: positives move down and negatives up by half the margin.
  shifted = scores.astype(dtype) + jnp.where(relevant, -0.5, 0.5) * jnp.asarray(margin, dtype)
  # Masked items go last, after every valid score, -inf included (NaN ranks after -inf); they
  # are ranked but never read. (Made -inf instead, a valid -inf after them would rank below them.)
  shifted = jnp.where(where, shifted, jnp.nan)
  # `interpolation` is defined for ranks normalised by the list length, as in the authors' code
  # (whose Table 9 values assume it): that equals raw ranks with interpolation * n, n the number of
  # valid items.
  num_valid = jnp.sum(where, axis=-1).astype(dtype)
  if interpolation.ndim and interpolation.shape != shifted.shape[:-1]:
    raise ValueError(
      f"{fn}: interpolation must be a scalar or one value per list {shifted.shape[:-1]}, got "
      f"shape {interpolation.shape}."
    )
  interpolation = interpolation.astype(dtype) * jnp.maximum(num_valid, 1)
  num_relevant = jnp.sum(relevant, axis=-1)
  values = blackbox_ranks.blackbox_list_values(
    shifted, relevant, interpolation, body, max_relevant=count
  )
  # A list beyond the bound was ranked on its first `count` relevant items only.
  if checked and count is not None:
    values = jnp.where(num_relevant > count, jnp.asarray(jnp.nan, values.dtype), values)
  return values, num_relevant, scores, where


def _ap_values(ranks, relevant_ranks, relevant, num_relevant):
  precision = relevant_ranks / jnp.where(relevant, ranks, 1)
  ap = jnp.sum(jnp.where(relevant, precision, 0), axis=-1) / jnp.maximum(num_relevant, 1)
  return 1 - ap


def _recall_values(weight_fn):
  """The recall loss's `body` for `weight_fn`: the same function for the same `weight_fn`, so that
  the accelerators' branches traced for it are reused (`blackbox_ranks._branches`)."""
  try:
    return _cached_recall_values(weight_fn)
  except TypeError:  # An unhashable `weight_fn` (a callable object with `__eq__`).
    return _new_recall_values(weight_fn)


def _new_recall_values(weight_fn):
  def values(ranks, relevant_ranks, relevant, num_relevant):
    outrun = jnp.where(relevant, ranks - relevant_ranks, 0)
    weight = weight_fn(outrun)
    return jnp.sum(jnp.where(relevant, weight, 0), axis=-1) / jnp.maximum(num_relevant, 1)

  return values


_cached_recall_values = functools.lru_cache(maxsize=64)(_new_recall_values)


def blackbox_ap_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  interpolation: jax.typing.ArrayLike = 0.2,
  margin: float = 0.02,
  max_relevant: int | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""RaMBO's Average Precision loss: exact AP, blackbox gradient (Rolinek et al. 2020, eq. 21-22).

  .. math::
    L_{AP} = 1 - \frac{1}{|P|}\sum_{i \in P}
      \frac{\mathrm{rk}_\alpha(y^+)_i}{\mathrm{rk}_\alpha(y)_i}

  with :math:`\mathrm{rk}_\alpha` the ranks of the scores shifted by the margin (eq. 14-15:
  relevant items by :math:`-\alpha/2`, others by :math:`+\alpha/2`), so the value is the exact AP
  loss of the shifted scores (ties by position). The ranks among relevant items follow from the
  same sort and, as in the authors' code, carry no gradient; the ranks among all items carry the
  blackbox gradient of `jaxrank.blackbox_ranks` (an interpolation, not a derivative).

  Two exact paths, the same ranks and gradients bit for bit, and the same values up to the
  rounding of the final sum over each list (XLA may add the precisions in another order in the
  two programs); tested on ties, NaN, masks, margins and memory galleries, on the CPU's and the
  accelerators' forms:

  * **sort**: one sort of each list forward and one backward, O(n log n) per list (numpy through
    a host callback on CPU; XLA's sort on GPU and TPU, where sorting `[B, B]` lists costs
    hundreds of times the similarity product's memory traffic);
  * **counting**: the loss reads only the ranks of the relevant items, and Algorithm 1's backward
    moves only their scores, so every item's rank before and after the move follows from
    counting, for each of the first `K` relevant items of a list, the items above it and the
    items it crosses: O(K n) per list, no sort and no host callback. On CPU the `K` items are
    found by `lax.top_k` and read by gathers; on GPU and TPU (`platforms.by_platform`) by `K`
    minima and masked sums over each list, every comparison fused into a reduction over the list
    or into the gradient's one elementwise pass (no gather, scatter or `top_k`, nothing
    `[K, B, n]` written, and of `[B, n]` only the scores, their gradient and, on TPUs, their
    integer order keys).

  Which path, decided when the function is traced:

  * `max_relevant=K` (static) is a promise: no list of the call has more than `K` relevant valid
    items (the sampler's bound: in-batch lists with `m` items per class have `K = m - 1`, plus the
    class's items in a memory gallery). The program holds the counting alone, on every platform;
    a list beyond the bound gives NaN and a zero gradient, so that a broken promise shows in the
    loss rather than as a silently wrong value (the smooth-rank losses' `max_relevant` means the
    same). There is no fallback to the sort: a `lax.cond` would hold both paths, and XLA's cost
    and memory analyses (and an accelerator's memory) count both.
  * Without a bound, traced labels (arguments of a jitted function, `vmap`, `batch_retrieval`'s
    relevance inside a training step) sort on CPU. On GPU and TPU the choice is made on the
    device when the step runs (issue 51): counting with the smallest of 1, 2, 4, 8 slots that
    holds every list's relevant items, else the sort in blocks of lists, inside one custom VJP
    of the per-list values (`blackbox_ranks.blackbox_list_values`: between the passes it keeps
    the inputs and the counted slots, no `[B, n]` ranks), with the same values and gradients
    either way. The program holds every form (the compiler's estimate counts them all; one
    runs); under `vmap` over batches all of them run.
  * Concrete labels (and `where`): numpy arrays or arrays outside a trace, or arrays that a jitted
    caller closed over: the most relevant valid items of any list is read from them on the host,
    and the loss counts exactly that many when it is within `max_relevant` (or
    `blackbox.COUNT_UP_TO`, 16, without a bound); otherwise as above.

  Counting costs about `K` passes over each list whatever the actual count, so it pays while `K`
  is small (`experiments/benchmarks/speed.py` times both on CPU, `accelerators.py` compiles both
  for a TPU and a GPU).

  Conventions and defaults:

  * `interpolation` (the paper's lambda) applies to ranks normalised by the list length `n` (the
    authors' code divides ranks by `n`, and the values of their Table 9 assume it); it is
    `blackbox_ranks(..., interpolation * n)` with `n` the number of valid items of each list, so
    masked padding changes neither value nor gradient.
  * Defaults `interpolation=0.2`, `margin=0.02` are Table 9's CUB-200-2011 values (In-shop: 0.2,
    0.05; Online Products: 4, 0.02). The paper's margin is fixed; the authors' code multiplies it
    by a random `|N(0, 1)|` per item, which jaxrank does not.
  * Self-inclusion: as given by the lists; through `batch_retrieval` the query is excluded, as in
    RaMBO ("the obvious similarity of each element with itself is disregarded").

  Per-class mAP (eq. 6) and APC (eq. 23) for classification scores `[batch, classes]` are
  compositions: lists are the classes (`scores.T`), or one list of everything (`scores.ravel()`):

  >>> import jax.numpy as jnp
  >>> logits = jnp.array([[2.0, -1.0], [0.5, 1.5], [-0.3, 0.2]])
  >>> targets = jnp.array([[1, 0], [0, 1], [1, 0]])
  >>> loss_map = blackbox_ap_loss(logits.T, targets.T)  # eq. 6: mean over classes
  >>> loss_apc = blackbox_ap_loss(logits.ravel(), targets.ravel())  # eq. 23
  >>> round(float(loss_map), 4), round(float(loss_apc), 4)
  (0.0833, 0.1333)

  Args:
    scores: `[..., n]` floating scores, higher is better.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    interpolation: blackbox interpolation strength :math:`\lambda > 0` for normalised ranks;
      scalar or `[...]` (with `segments`, `[..., n]`: one per segment).
    margin: the margin :math:`\alpha \geq 0` of eq. 14.
    max_relevant: optional static bound `K` on the relevant valid items of a list: counting
      instead of sorting; a list with more gives NaN and a zero gradient (see above).
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list. Lists without a relevant valid item give 0 and are left
    out of the reduction; a list with a valid NaN score gives NaN (and zero gradients). Per list,
    O(n log n) time (sort) or O(K n) (counting), and O(n) memory.
  """
  values, num_relevant, scores, where = _blackbox_list_values(
    "blackbox_ap_loss",
    scores,
    labels,
    where,
    segments,
    interpolation,
    margin,
    max_relevant,
    _ap_values,
  )
  return lists.finish(values, scores, where, num_relevant > 0, reduce_fn)


def blackbox_recall_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  interpolation: jax.typing.ArrayLike = 0.2,
  margin: float = 0.02,
  weight_fn: Callable[[jax.Array], jax.Array] = jnp.log1p,
  max_relevant: int | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""RaMBO's recall loss: weighted Recall@K losses summed over K (Rolinek et al. 2020, eq. 16-20).

  With :math:`r_i = \mathrm{rk}_\alpha(y)_i - \mathrm{rk}_\alpha(y^+)_i` the number of non-relevant
  items ranked above the relevant item `i` (eq. 17), the loss :math:`\sum_K w_K (1 - \tilde r@K)`
  of eq. 19 equals (Prop. 2, eq. 27)

  .. math::
    L_{rec} = \frac{1}{|P|}\sum_{i \in P} W(r_i), \qquad W(k) = \sum_{K \leq k} w_K.

  `weight_fn` is :math:`W`. The paper's two choices (eq. 20), with :math:`\ell(k) = \log(1 + k)`:
  `jnp.log1p` (the default, :math:`w_K \approx 1/K`, "RaMBO log") and
  `lambda r: jnp.log1p(jnp.log1p(r))` (:math:`w_K \approx 1/(K \log K)`, "RaMBO log log"). Gradients
  come from `blackbox_ranks`, as in `blackbox_ap_loss`, whose conventions (`interpolation` on
  normalised ranks, Table 9 defaults, fixed margin, self-exclusion through `batch_retrieval`) apply
  here too, and so do its two paths (sort, or counting, chosen as there: `max_relevant` a promise,
  a list beyond it NaN). The loss is 0 when every relevant item is above every other item, and it
  is not bounded by 1.

  Args:
    scores: `[..., n]` floating scores, higher is better.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    interpolation: blackbox interpolation strength :math:`\lambda > 0` for normalised ranks;
      scalar or `[...]` (with `segments`, `[..., n]`: one per segment).
    margin: the margin :math:`\alpha \geq 0` of eq. 14.
    weight_fn: the cumulative weight :math:`W` of eq. 25, applied elementwise to the counts
      :math:`r_i` (as floats); it should be increasing with :math:`W(0) = 0`.
    max_relevant: optional static bound `K` on the relevant valid items of a list: counting
      instead of sorting; a list with more gives NaN and a zero gradient (`blackbox_ap_loss`).
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list. Lists without a relevant valid item give 0 and are left
    out of the reduction; a list with a valid NaN score gives NaN (and zero gradients). Per list,
    O(n log n) time (sort) or O(K n) (counting), and O(n) memory.

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.9, 0.8, 0.7, 0.1]), jnp.array([1, 0, 1, 0])
  >>> round(float(blackbox_recall_loss(scores, labels, margin=0.0)), 4)  # (log 1 + log 2) / 2
  0.3466
  >>> round(float(blackbox_recall_loss(scores, labels, margin=0.0, max_relevant=2)), 4)
  0.3466
  """
  fn = "blackbox_recall_loss"
  checks.check_callable(fn, "weight_fn", weight_fn, hint="Pass W, e.g. jnp.log1p.")
  values, num_relevant, scores, where = _blackbox_list_values(
    fn,
    scores,
    labels,
    where,
    segments,
    interpolation,
    margin,
    max_relevant,
    _recall_values(weight_fn),
  )
  return lists.finish(values, scores, where, num_relevant > 0, reduce_fn)
