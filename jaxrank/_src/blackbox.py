"""Losses on blackbox-differentiated ranks (RaMBO, Rolinek et al. 2020): AP and recall.

`ranking.blackbox_ranks` returns the exact ranks of a list; its gradient is not the derivative of
the ranks (zero almost everywhere) but the interpolation of Algorithm 1. `blackbox_ap_loss` and
`blackbox_recall_loss` are exact AP and recall losses whose gradients come from that interpolation.

A valid NaN score makes its list's value NaN (README, "Conventions"), as for every other loss, on
every platform: the ranks place NaN scores last on both sort paths (`ranking.descending_ranks`),
and the per-list values go through `lists.finish` (on the counting path too: its keys,
`ranking.order_keys`, order NaN last as the sorts do). Such a list passes a zero cotangent to its ranks,
so its scores get a zero gradient; the other lists keep their values and gradients.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import lists
from jaxrank._src import ranking


def _blackbox_list_values(fn, scores, labels, where, lam, margin, max_relevant, body):
  """The per-list body shared by the AP and recall losses, on either rank path.

  Margin shift (eq. 14-15), `lam` scaled by the valid items, then the blackbox ranks of the
  relevant items and their ranks among the relevant items (constants: as in the authors' code they
  carry no gradient), passed to `body(ranks, relevant_ranks, relevant, num_relevant)` (arrays `[..., n]`
  read only where `relevant`: `ranking.blackbox_relevant_ranks` on either path), which gives the
  per-list values. Returns the values `[...]`, the relevant counts `[...]`, and the checked scores and mask
  (for `lists.finish`).
  """
  scores, labels, where = checks.check_lists(fn, scores, labels, where)
  lam = ranking.check_lam(fn, lam)
  checks.check_real(
      fn, "margin", margin, at_least=0, scalar=False, hint="It is RaMBO's alpha (eq. 14): 0.02."
  )
  checks.check_positive_int(fn, "max_relevant", max_relevant, allow_none=True)
  dtype = lists.compute_dtype(scores.dtype)
  relevant = where & (labels >= 1)
  # Eq. 14: positives move down and negatives up by half the margin.
  shifted = scores.astype(dtype) + jnp.where(relevant, -0.5, 0.5) * jnp.asarray(margin, dtype)
  # Masked items go last, after every valid score, -inf included (NaN ranks after -inf); they
  # are ranked but never read. (As -inf, a valid -inf after them ranked below them: issue 31.)
  shifted = jnp.where(where, shifted, jnp.nan)
  # lam is defined for ranks normalised by the list length, as in the authors' code (whose Table 9
  # values assume it): that equals raw ranks with lam * n, n the number of valid items.
  num_valid = jnp.sum(where, axis=-1).astype(dtype)
  if lam.ndim and lam.shape != shifted.shape[:-1]:
    raise ValueError(
        f"{fn}: lam must be a scalar or one value per list {shifted.shape[:-1]}, got shape "
        f"{lam.shape}."
    )
  lam = lam.astype(dtype) * jnp.maximum(num_valid, 1)
  num_relevant = jnp.sum(relevant, axis=-1)
  count = None if max_relevant is None else min(max_relevant, shifted.shape[-1])
  ranks, relevant_ranks = ranking.blackbox_relevant_ranks(
      shifted, relevant, lam, max_relevant=count
  )
  values = body(ranks, relevant_ranks, relevant, num_relevant)
  return values, num_relevant, scores, where


def _ap_values(ranks, relevant_ranks, relevant, num_relevant):
  precision = relevant_ranks / jnp.where(relevant, ranks, 1)
  ap = jnp.sum(jnp.where(relevant, precision, 0), axis=-1) / jnp.maximum(num_relevant, 1)
  return 1 - ap


def _recall_values(weight_fn):
  def values(ranks, relevant_ranks, relevant, num_relevant):
    outrun = jnp.where(relevant, ranks - relevant_ranks, 0)
    weight = weight_fn(outrun)
    return jnp.sum(jnp.where(relevant, weight, 0), axis=-1) / jnp.maximum(num_relevant, 1)

  return values


def blackbox_ap_loss(
    scores: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike,
    *,
    where: jax.typing.ArrayLike | None = None,
    lam: jax.typing.ArrayLike = 0.2,
    margin: float = 0.02,
    max_relevant: int | None = None,
    reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""RaMBO's Average Precision loss: exact AP, blackbox gradient (Rolinek et al. 2020, eq. 21-22).

  .. math::
    L_{AP} = 1 - \frac{1}{|P|}\sum_{i \in P} \frac{\mathrm{rk}_\alpha(y^+)_i}{\mathrm{rk}_\alpha(y)_i}

  with :math:`\mathrm{rk}_\alpha` the ranks of the scores shifted by the margin (eq. 14-15:
  relevant items by :math:`-\alpha/2`, others by :math:`+\alpha/2`), so the value is the exact AP
  loss of the shifted scores (ties by position). The ranks among relevant items follow from the
  same sort and, as in the authors' code, carry no gradient; the ranks among all items carry the
  blackbox gradient of `jaxrank.blackbox_ranks` (an interpolation, not a derivative).

  Two exact paths, the same values and gradients (bit for bit; tested on ties, NaN, masks,
  margins and memory galleries):

  * **sort** (`max_relevant=None`, the default): one sort of each list forward and one backward,
    O(n log n) per list (numpy through a host callback on CPU, XLA's sort elsewhere);
  * **counting** (`max_relevant=K`): the loss reads only the ranks of the relevant items, and
    Algorithm 1's backward moves only their scores, so every item's rank before and after the
    move follows from counting, for each relevant item, the items above it and the items it
    crosses: O(K n) per list, no sort, no host callback. Taken when no list of the call has more
    than `K` relevant valid items (one check on the whole batch at run time, `lax.cond`), else the
    sort; under `vmap` both run.

  Why a static argument: the path's shapes (`K` slots per list) are fixed when the function is
  traced, while the number of relevant items is data (traced labels); the bound is the
  sampler's, which the caller knows (in-batch lists with `m` items per class: `K = m - 1`, plus
  the class's items in a memory gallery). Counting costs `K` passes over each list whatever the
  actual count, so it pays while `K` is small (`experiments/benchmarks/speed.py` times both); the sort
  stays the default because it suits any number of relevant items.

  Conventions and defaults:

  * `lam` applies to ranks normalised by the list length `n` (the authors' code divides ranks by
    `n`, and the values of their Table 9 assume it); it is `blackbox_ranks(..., lam * n)` with `n`
    the number of valid items of each list, so masked padding changes neither value nor gradient.
  * Defaults `lam=0.2`, `margin=0.02` are Table 9's CUB-200-2011 values (In-shop: 0.2, 0.05;
    Online Products: 4, 0.02). The paper's margin is fixed; the authors' code multiplies it by a
    random `|N(0, 1)|` per item, which jaxrank does not.
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
    lam: blackbox interpolation strength (> 0) for normalised ranks; scalar or `[...]`.
    margin: the margin :math:`\alpha \geq 0` of eq. 14.
    max_relevant: optional static bound `K` on the relevant valid items of a list: counting
      instead of sorting while every list of the call has at most `K` (see above).
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list. Lists without a relevant valid item give 0 and are left
    out of the reduction; a list with a valid NaN score gives NaN (and zero gradients). Per list,
    O(n log n) time (sort) or O(K n) (counting), and O(n) memory.
  """
  values, num_relevant, scores, where = _blackbox_list_values(
      "blackbox_ap_loss", scores, labels, where, lam, margin, max_relevant, _ap_values
  )
  return lists.finish(values, scores, where, num_relevant > 0, reduce_fn)


def blackbox_recall_loss(
    scores: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike,
    *,
    where: jax.typing.ArrayLike | None = None,
    lam: jax.typing.ArrayLike = 0.2,
    margin: float = 0.02,
    weight_fn: Callable[[jax.Array], jax.Array] = jnp.log1p,
    max_relevant: int | None = None,
    reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""RaMBO's recall loss: a weighted sum of Recall@K losses over all K (Rolinek et al. 2020, eq. 16-20).

  With :math:`r_i = \mathrm{rk}_\alpha(y)_i - \mathrm{rk}_\alpha(y^+)_i` the number of non-relevant
  items ranked above the relevant item `i` (eq. 17), the loss :math:`\sum_K w_K (1 - \tilde r@K)`
  of eq. 19 equals (Prop. 2, eq. 27)

  .. math::
    L_{rec} = \frac{1}{|P|}\sum_{i \in P} W(r_i), \qquad W(k) = \sum_{K \leq k} w_K.

  `weight_fn` is :math:`W`. The paper's two choices (eq. 20), with :math:`\ell(k) = \log(1 + k)`:
  `jnp.log1p` (the default, :math:`w_K \approx 1/K`, "RaMBO log") and
  `lambda r: jnp.log1p(jnp.log1p(r))` (:math:`w_K \approx 1/(K \log K)`, "RaMBO log log"). Gradients come from `blackbox_ranks`, as in
  `blackbox_ap_loss`, whose conventions (`lam` on normalised ranks, Table 9 defaults, fixed margin,
  self-exclusion through `batch_retrieval`) apply here too, and so do its two paths (sort, or
  counting with `max_relevant`). The loss is 0 when every relevant
  item is above every other item, and it is not bounded by 1.

  Args:
    scores: `[..., n]` floating scores, higher is better.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    lam: blackbox interpolation strength (> 0) for normalised ranks; scalar or `[...]`.
    margin: the margin :math:`\alpha \geq 0` of eq. 14.
    weight_fn: the cumulative weight :math:`W` of eq. 25, applied elementwise to the counts
      :math:`r_i` (as floats); it should be increasing with :math:`W(0) = 0`.
    max_relevant: optional static bound `K` on the relevant valid items of a list: counting
      instead of sorting while every list of the call has at most `K` (`blackbox_ap_loss`).
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
      fn, scores, labels, where, lam, margin, max_relevant, _recall_values(weight_fn)
  )
  return lists.finish(values, scores, where, num_relevant > 0, reduce_fn)
