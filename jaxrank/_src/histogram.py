r"""Histogram surrogates of Average Precision: FastAP and the quantized mAP_Q.

Both losses are one mechanism with two bin placements:

1. `soft_histograms`, a triangular soft binning (Ustinova and Lempitsky 2016, as used by Cakir et
   al. 2019, eq. 22-23, and Revaud et al. 2019, eq. 7): each valid item of a list adds weight
   `1 - |v - c| / width` to the two bin centres `c` nearest to its value `v` (weights summing to 1),
   giving per-list histograms of relevant items and of all valid items;
2. a per-bin AP estimator on those histograms, bins ordered best first,

   .. math::
     \widehat{\mathrm{AP}} = \frac{1}{N^+} \sum_{m} \hat h^+_m \, \frac{\hat H^+_m}{\hat H_m},
     \qquad \hat H_m = \sum_{m' \leq m} \hat h_{m'},

   with `N^+` the number of relevant valid items. This is Cakir et al.'s FastAP (eq. 14) and, term
   for term, Revaud et al.'s AP_Q (eq. 9-11: `\hat P_m = \hat H^+_m / \hat H_m`,
   `\Delta \hat r_m = \hat h^+_m / N^+`).

`fastap_loss` bins squared Euclidean distances `2 - 2 s` of unit embeddings on `[0, 4]` with
`num_intervals` intervals (`num_intervals + 1` centres); `soft_binning_ap_loss` bins similarities
on `[-1, 1]` with `num_bins` centres. Since `d = 2 - 2 s` maps one grid onto the other,
`fastap_loss(s, y, num_intervals=L)` equals `soft_binning_ap_loss(s, y, num_bins=L + 1)`.

**Conventions shared by both losses.**

* **Range.** Scores are similarities in `[-1, 1]`, cosines of embeddings (`fastap_loss` bins
  their squared distances `2 - 2 s`, in `[0, 4]`). Known scores (not traced) with a valid value
  outside `[-1, 1]` raise `ValueError`: a loss fed logits or dot products would otherwise clip them
  silently and its gradient vanish. Rounding is allowed (by `max(1e-3, 4 eps)` of the scores'
  dtype: float32 cosines exceed 1 by a few ulps, and more with reduced-precision matrix products).
  Under `jit` scores are not checked (unless traced inside `jaxrank.traced_checks`, which reports
  them through checkify), and values beyond the end centres are clipped to them: they count fully
  (weight 1) in the end bin and get no gradient. The released FastAP code and
  pytorch-metric-learning let the weight of such a value fall off linearly instead
  (`relu(1 - |d - c| / width)`); the two agree on the range.
* **Other ranges.** Map the scores onto `[-1, 1]` before the loss. For scores known to lie in
  `[lo, hi]`, the affine map `(2 s - lo - hi) / (hi - lo)` gives exactly the loss with the same
  number of bins spread uniformly over `[lo, hi]` (the triangular kernel commutes with affine
  maps): `soft_binning_ap_loss(2 * s - 1, labels, num_bins=25)` is the released mAP_Q code's
  `APLoss()`, 25 bins on `[0, 1]`. Unbounded scores need a squashing map, e.g. `jnp.tanh(s)`,
  whose bins are no longer uniform in `s` (finer near 0): a different surrogate, to be tuned.
* A bin whose cumulative count `\hat H_m` is 0 contributes 0 (every `0/0` is guarded, in the value
  and in the gradient). A list without a relevant valid item (or with every item masked) gives 0
  and is left out of the reduction, as in pytorch-metric-learning, which drops such queries.
* Masked items (`where` False) contribute nothing; a valid NaN score makes its list NaN.
* Limit of many bins. Without ties, once every item has its two bins to itself the estimate is AP
  with each item split between two consecutive ranks in proportion to its bin weights; it is at
  most AP and at least `AP - (1 / (4 N^+)) \sum_{i \text{ relevant}} 1 / \mathrm{rank}_i`, and
  equals AP when the items sit on bin centres (hard binning). It does not converge to AP for
  arbitrary scores: soft binning keeps a bias of order `1 / rank`.

**Cost.** Memory O(B n) for `B` lists of `n` items plus O(B M) for the `M` bins: no `[..., n, M]`
tensor is stored, in the forward pass or in the gradient. The binning takes one of two forms, by
platform (`platforms.by_platform`), with the same terms summed in another order:

* on a CPU and a GPU, each item is scattered into its two bins (one `segment_sum` over flattened
  indices): O(n) time per list, O(B n) for `B` lists;
* on a TPU, where a scatter or gather runs serially (and on any platform inside
  `platforms.forced_platform("accelerator")`), each bin is a reduction over every list of the
  items' weights in that bin (one fused pass over the lists for all bins, and one for the
  gradient): O(n M) arithmetic per list, no scatter, no gather, the lists' items on the last
  axis. XLA's GPU compiler splits those reductions into several passes at `B >= 4096` and stores
  the per-bin masks between them, so a GPU keeps the scatter.

Through `jaxrank.batch_retrieval` add the `[B, B]` similarity matrix and its O(B^2 D) product.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import lists
from jaxrank._src import platforms
from jaxrank._src import ranking
from jaxrank._src import segmented


class SoftHistograms(NamedTuple):
  """Per-list soft histograms, bins ordered best first, each `[..., num_centres]`.

  Attributes:
    relevant: the relevance-weighted histogram `\\hat h^+` (counts of relevant items for 0/1
      relevance).
    total: the histogram `\\hat h` of all valid items.
  """

  relevant: jax.Array
  total: jax.Array


# The private bodies below are jitted (as jax.nn's functions are): eager calls then dispatch one
# compiled computation per shape instead of every primitive, and under an outer jit they inline.


def soft_histograms(
  values, relevance, where, *, num_centres, first_centre, last_centre, dtype
) -> SoftHistograms:
  r"""Triangular soft binning of each list into uniformly spaced bins, best bin first.

  The `M = num_centres` centres run from `first_centre` (bin 0, the best: the highest similarity
  or the smallest distance) to `last_centre`, spaced `\Delta = |last - first| / (M - 1)`. Each valid
  item adds to bin `m` (Cakir et al. 2019, eq. 22-23; Revaud et al. 2019, eq. 7)

  .. math::
    \delta(v, c_m) = \max\Bigl(0,\ 1 - \frac{|v - c_m|}{\Delta}\Bigr),
    \qquad \hat h_m = \sum_{i \text{ valid}} \delta(v_i, c_m),
    \qquad \hat h^+_m = \sum_{i \text{ valid}} r_i\, \delta(v_i, c_m),

  so an item touches only its two nearest centres, with weights summing to 1. Values beyond the
  end centres are clipped to them (weight 1 in the end bin, zero gradient); the released FastAP code
  lets such weights fall off instead. Histograms are accumulated in at least float32 and their
  gradient flows through the weights (piecewise constant in `v`, `\pm 1/\Delta`).

  Cost: memory O(B n + B M) for `B` lists: an `[..., n, M]` tensor is never stored. On a CPU or a
  GPU, one scatter-add (`jax.ops.segment_sum`) of four terms per item (its two bins' weights and
  relevance-weighted weights), O(n) time per list; in reverse mode each item gathers its two
  bins' cotangents. On a TPU, no scatter or gather: each bin is a reduction over the list of the
  items' weights in that bin, O(n M) arithmetic per list in one fused pass, and the gradient one
  more pass that sums, per item, the cotangents of the bins it lies in (module docstring,
  *Cost*). The derivative is written out (a custom JVP, so forward and reverse mode both work),
  the same in both forms.

  The shared primitive of every histogram loss; its callers check the inputs.

  Args:
    values: `[..., n]` floating values to bin (similarities, distances).
    relevance: `[..., n]` relevance weights `r_i` of the items in `dtype` (0/1 for counts of
      relevant items); masked items' weights are ignored.
    where: `[..., n]` boolean mask of valid items; masked items contribute nothing.
    num_centres: `M >= 2`, the number of bin centres (static).
    first_centre: the centre of bin 0, the best bin (a static Python float).
    last_centre: the centre of bin `M - 1`, a static Python float different from `first_centre`.
    dtype: the accumulation dtype (static), at least float32.

  Returns:
    `SoftHistograms(relevant, total)`, each `[..., M]`, in at least float32.

  >>> import jax.numpy as jnp
  >>> h = soft_histograms(jnp.array([1.0, 0.25, -1.0]), jnp.array([1.0, 1.0, 0.0]),
  ...                     jnp.ones(3, bool), num_centres=3, first_centre=1.0, last_centre=-1.0,
  ...                     dtype=jnp.float32)
  >>> h.relevant.tolist(), h.total.tolist()
  ([1.25, 0.75, 0.0], [1.25, 0.75, 1.0])
  """
  return _soft_histograms(
    values,
    relevance,
    where,
    num_centres=num_centres,
    first_centre=first_centre,
    last_centre=last_centre,
    dtype=dtype,
    platform=platforms.forced(),
  )


@functools.partial(
  jax.jit,
  static_argnames=("num_centres", "first_centre", "last_centre", "dtype", "platform"),
)
def _soft_histograms(
  values, relevance, where, *, num_centres, first_centre, last_centre, dtype, platform
):
  """`soft_histograms`, its compiled programs keyed by `platform` (`platforms.forced()`)."""
  values = values.astype(dtype)
  relevance = jnp.where(where, relevance.astype(dtype), jnp.zeros((), dtype))
  binning = (num_centres, first_centre, last_centre)

  def scattered(v, r, w):
    return _binned(v, r, w, *binning)

  # Rematerialised: the gradient recomputes each item's bin from the values inside its own fused
  # pass; otherwise XLA keeps the forward pass's per-bin masks (M arrays of [B, n]) for it.
  @jax.checkpoint
  def dense(v, r, w):
    return _dense_binned(v, r, w, *binning)

  def gpu(v, r, w):
    if v.shape[-1] <= GPU_SCATTER_UP_TO:
      return scattered(v, r, w)
    return _in_row_blocks(dense, GPU_ROWS_PER_BLOCK)(v, r, w)

  hist = platforms.by_platform(
    values, relevance, where, cpu=scattered, gpu=gpu, accelerator=dense, platform=platform
  )
  return SoftHistograms(relevant=hist[..., 1], total=hist[..., 0])


# A GPU's form, by the lists' length n (chosen when traced): the CPU's scatter-add for lists of
# up to GPU_SCATTER_UP_TO items, longer lists the accelerators' per-bin reductions in blocks of
# GPU_ROWS_PER_BLOCK lists. The scatter's atomic adds slow down as more of a list's items add
# into each of its M bins (as slow in blocks of 1,024 lists of 16,384 items as in 16,384 such
# lists); the per-bin reductions of whole [B, n] lists make XLA's GPU compiler store M per-bin
# masks of [B, n] between its fusions; in blocks the masks are a block's, and a block's passes
# stay in the cache. Measured on an H100 (docs/guide/benchmarks.rst, "On a GPU").
GPU_SCATTER_UP_TO = 4096
GPU_ROWS_PER_BLOCK = 512


def _in_row_blocks(fn, rows_per_block: int):
  """`fn(values, relevance, where) -> [..., M, k]` of `[..., n]` lists, applied to blocks of
  `rows_per_block` lists in a loop (`lax.map`), so that its temporaries are a block's; rows
  beyond a multiple of the block are padded with invalid lists and dropped."""

  def blocked(values, relevance, where):
    batch, n = values.shape[:-1], values.shape[-1]
    rows = int(np.prod(batch, dtype=np.int64))
    if rows <= rows_per_block:
      return fn(values, relevance, where)
    blocks = -(-rows // rows_per_block)
    pad = blocks * rows_per_block - rows

    def split(a):
      a = a.reshape(rows, n)
      if pad:
        a = jnp.concatenate([a, jnp.zeros((pad, n), a.dtype)])
      return a.reshape(blocks, rows_per_block, n)

    out = jax.lax.map(lambda args: fn(*args), (split(values), split(relevance), split(where)))
    out = out.reshape((blocks * rows_per_block,) + out.shape[2:])[:rows]
    return out.reshape(batch + out.shape[1:])

  return blocked


def _bin_positions(values, where, num_centres, first_centre, last_centre):
  """Each item's lower bin `k`, its fraction `f` past it, and whether it lies within the centres.

  Positions are in units of bins, 0 at the first (best) centre and `M - 1` at the last; masked
  values (maybe NaN or inf) are placed at 0. Values beyond the end centres are clipped to them
  (`inside` False: no gradient). Weight `1 - f` goes to bin `k` in `[0, M - 2]` and `f` to bin
  `k + 1` (eq. 23 with width the spacing of the centres); a NaN value goes to bin 0 with a NaN
  fraction.
  """
  top = num_centres - 1
  t = (values - first_centre) * (top / (last_centre - first_centre))
  t = jnp.where(where, t, jnp.zeros_like(t))
  inside = ~((t < 0) | (t > top))
  t = jnp.where(t < 0, jnp.zeros_like(t), jnp.where(t > top, jnp.full_like(t, top), t))
  lower = jnp.clip(jnp.floor(jnp.where(jnp.isnan(t), jnp.zeros_like(t), t)), 0, top - 1)
  return lower.astype(jnp.int32), t - lower, inside


def _to_bins(lower, lower_total, lower_relevant, upper_total, upper_relevant, num_centres):
  """`[..., M, 2]` histograms (total, relevant): each `lower_*` `[..., n]` added into its item's bin
  `k`, each `upper_*` into `k + 1`.

  One scatter-add (`jax.ops.segment_sum`) of all four into the lower bin, the upper sums then
  moved up one bin: the same sums, term for term, as one scatter per bin at half the cost. Every
  bin stays a sum of its own terms; nothing is recovered as a difference of larger sums, which
  would cancel in float32.
  """
  batch, n = lower.shape[:-1], lower.shape[-1]
  rows = int(np.prod(batch, dtype=np.int64))
  index = jnp.arange(rows, dtype=jnp.int32)[:, None] * num_centres + lower.reshape(rows, n)
  parts = jnp.stack([lower_total, lower_relevant, upper_total, upper_relevant], axis=-1)
  sums = jax.ops.segment_sum(
    parts.reshape(rows * n, 4), index.reshape(-1), num_segments=rows * num_centres
  ).reshape(batch + (num_centres, 4))
  moved = jnp.concatenate([jnp.zeros_like(sums[..., :1, 2:]), sums[..., :-1, 2:]], axis=-2)
  return sums[..., :2] + moved


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4, 5))
def _binned(values, relevance, where, num_centres, first_centre, last_centre):
  """`[..., M, 2]` soft histograms: of all valid items (`[..., 0]`), relevance-weighted (`1`).

  `relevance` is already 0 where masked. The derivative is written out (`_binned_jvp`) instead of
  traced through the binning, so that reverse mode gathers each item's two bins' cotangents
  rather than differentiating the scatter's operands, which costs about twice the time and memory.
  """
  lower, frac, _ = _bin_positions(values, where, num_centres, first_centre, last_centre)
  return _split_into_bins(lower, frac, where.astype(values.dtype), relevance, num_centres)


def _split_into_bins(lower, frac, valid, relevance, num_centres):
  """Each item's weight and relevance split between bins `k` (`1 - f`) and `k + 1` (`f`)."""
  return _to_bins(
    lower,
    (1 - frac) * valid,
    (1 - frac) * relevance,
    frac * valid,
    frac * relevance,
    num_centres,
  )


@_binned.defjvp
def _binned_jvp(num_centres, first_centre, last_centre, primals, tangents):
  """Moving an item's fraction `f` by `df` moves `df` times its weight from bin `k` to `k + 1`;
  a relevance tangent is split between the bins like the relevance. `df = dv (M - 1) / (last -
  first)` within the centres, 0 beyond them (clipped) and for masked items."""
  values, relevance, where = primals
  dvalues, drelevance, _ = tangents
  lower, frac, inside = _bin_positions(values, where, num_centres, first_centre, last_centre)
  valid = where.astype(values.dtype)
  hist = _split_into_bins(lower, frac, valid, relevance, num_centres)
  scale = (num_centres - 1) / (last_centre - first_centre)
  dfrac = jnp.where(where & inside, dvalues * scale, jnp.zeros_like(dvalues))
  drelevance = jnp.where(where, drelevance, jnp.zeros_like(drelevance))
  dhist = _to_bins(
    lower,
    -dfrac * valid,
    (1 - frac) * drelevance - dfrac * relevance,
    dfrac * valid,
    frac * drelevance + dfrac * relevance,
    num_centres,
  )
  return hist, dhist


# The accelerators' form (`_dense_binned`) writes one reduction per bin up to this many bins (a
# static loop, which XLA fuses into one pass over the lists); beyond, one reduction over a leading
# axis of all bins (the same terms; compiling the loop takes longer than the bins are worth).
UNROLL_BINS = 64


def _dense_sums(lower, lower_terms, upper_terms, weights, num_centres):
  """`[..., M, len(weights)]`: per bin `m`, `sum_i t_i x_i` over each list for each `x` in
  `weights`, with `t_i` the item's `lower_terms` if its lower bin `k` is `m`, its `upper_terms`
  if `k + 1` is `m`, else 0. No scatter: each bin compares every item's `k` with `m`.

  Term for term the sums of `_to_bins` (summed in another order): the same comparisons of `k`
  decide each item's two bins, and each term is the same product.
  """
  zero = jnp.zeros((), lower_terms.dtype)

  def sums(bins):  # `bins`: one bin (a Python int), or every bin on a leading axis.
    terms = jnp.where(lower == bins, lower_terms, jnp.where(lower == bins - 1, upper_terms, zero))
    return jnp.stack([jnp.sum(terms * x, axis=-1) for x in weights], axis=-1)

  if num_centres <= UNROLL_BINS:
    return jnp.stack([sums(m) for m in range(num_centres)], axis=-2)
  bins = jnp.arange(num_centres, dtype=lower.dtype).reshape((num_centres,) + (1,) * lower.ndim)
  return jnp.moveaxis(sums(bins), 0, -2)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4, 5))
def _dense_binned(values, relevance, where, num_centres, first_centre, last_centre):
  """`_binned` without a scatter (the accelerators' form): the same `[..., M, 2]` histograms,
  each bin a reduction over the list (`_dense_sums`)."""
  lower, frac, _ = _bin_positions(values, where, num_centres, first_centre, last_centre)
  valid = where.astype(values.dtype)
  return _dense_sums(lower, 1 - frac, frac, (valid, relevance), num_centres)


@functools.partial(_dense_binned.defjvp, symbolic_zeros=True)
def _dense_binned_jvp(num_centres, first_centre, last_centre, primals, tangents):
  """The rule of `_binned_jvp`: moving `f` by `df` moves `df` times the item's weight from bin
  `k` to `k + 1`; a relevance tangent is split between the bins like the relevance.

  Written so that reverse mode needs no gather: the values' cotangent of an item is one sum over
  the bins of `-(cotangent of bin m)` where `m = k` and `+` where `m = k + 1`, which XLA fuses
  into one pass over the lists. Zero tangents (the relevance of a loss) are skipped.
  """
  values, relevance, where = primals
  dvalues, drelevance, _ = tangents
  lower, frac, inside = _bin_positions(values, where, num_centres, first_centre, last_centre)
  valid = where.astype(values.dtype)
  hist = _dense_sums(lower, 1 - frac, frac, (valid, relevance), num_centres)
  dhist = jnp.zeros_like(hist)
  if not isinstance(dvalues, jax.custom_derivatives.SymbolicZero):
    scale = (num_centres - 1) / (last_centre - first_centre)
    dfrac = jnp.where(where & inside, dvalues * scale, jnp.zeros_like(dvalues))
    dhist = _dense_sums(lower, -dfrac, dfrac, (valid, relevance), num_centres)
  if not isinstance(drelevance, jax.custom_derivatives.SymbolicZero):
    drelevance = jnp.where(where, drelevance, jnp.zeros_like(drelevance))
    split = _dense_sums(lower, 1 - frac, frac, (drelevance,), num_centres)
    dhist = dhist + jnp.concatenate([jnp.zeros_like(split), split], axis=-1)
  return hist, dhist


def _histogram_ap(hist: SoftHistograms, num_relevant: jax.Array) -> jax.Array:
  """The per-bin AP estimate `(1/N+) sum_m h+_m H+_m / H_m`, empty prefixes giving 0.

  Every partial derivative of `h+ H+ / H` is bounded (since `h+ <= H+ <= H`), so gradients stay
  finite however small a bin is; where `H_m = 0` the term and its gradient are 0.
  """
  cum_relevant = jnp.cumsum(hist.relevant, axis=-1)
  cum_total = jnp.cumsum(hist.total, axis=-1)
  nonempty = cum_total > 0
  precision = cum_relevant / jnp.where(nonempty, cum_total, jnp.ones_like(cum_total))
  terms = jnp.where(nonempty, hist.relevant * precision, jnp.zeros_like(precision))
  total = jnp.sum(terms, axis=-1)
  return total / jnp.maximum(num_relevant, 1).astype(total.dtype)


def _squared_distance(scores):
  """`2 - 2 s`: the squared Euclidean distance of unit vectors of cosine similarity `s`."""
  return 2 - 2 * scores


def identity(scores):
  """The scores themselves: the values binned by the losses on similarities."""
  return scores


def binned_ap_estimates(
  scores, labels, where, *, estimator, to_values, num_centres, first_centre, last_centre
):
  """Per-list AP estimates `[...]` and whether each list has a relevant valid item.

  The body shared by every histogram estimator of AP (FastAP, mAP_Q, and the tie-aware ones of
  `tie_aware.py` and `hamming.py`): relevance histograms of `to_values(scores)`, then
  `estimator(histograms, num_relevant)`. Inputs are checked by the caller.
  """
  return _binned_ap_estimates(
    scores,
    labels,
    where,
    estimator=estimator,
    to_values=to_values,
    num_centres=num_centres,
    first_centre=first_centre,
    last_centre=last_centre,
    platform=platforms.forced(),
  )


@functools.partial(
  jax.jit,
  static_argnames=(
    "estimator",
    "to_values",
    "num_centres",
    "first_centre",
    "last_centre",
    "platform",
  ),
)
def _binned_ap_estimates(
  scores,
  labels,
  where,
  *,
  estimator,
  to_values,
  num_centres,
  first_centre,
  last_centre,
  platform,
):
  """`binned_ap_estimates`, its compiled programs keyed by `platform` (`platforms.forced()`)."""
  dtype = lists.compute_dtype(scores.dtype)
  relevant = where & (labels >= 1)
  num_relevant = jnp.sum(relevant, axis=-1)
  # Lists without a relevant item are binned as zeros: zero gradient even if they hold a NaN.
  safe = lists.counted_scores(scores, where, num_relevant > 0)
  hist = _soft_histograms(
    to_values(safe.astype(dtype)),
    relevant.astype(dtype),
    where,
    num_centres=num_centres,
    first_centre=first_centre,
    last_centre=last_centre,
    dtype=dtype,
    platform=platform,
  )
  values = estimator(hist, num_relevant)
  return lists.nan_if_any(values, scores, where), num_relevant > 0


def check_similarities(fn: str, scores: jax.Array, where: jax.Array) -> None:
  """Raises `ValueError` when known valid scores leave `[-1, 1]` (beyond rounding).

  The check of every histogram loss on similarities (this module's and `tie_aware.py`'s): values
  outside the bins would be clipped to the end bins with a zero gradient (the module docstring,
  *Range*). Traced scores (under `jit`) are checked only inside `traced_checks`; see
  `checks.check_in_range`.
  """
  checks.check_in_range(
    fn,
    "scores",
    scores,
    where,
    -1.0,
    1.0,
    hint=(
      "Histogram losses bin similarities such as cosines; map other scores into [-1, 1] "
      "first, e.g. (2 * s - lo - hi) / (hi - lo) for scores in [lo, hi], or jnp.tanh(s) for "
      "unbounded ones such as logits."
    ),
  )


def _binned_ap_loss(fn, scores, labels, where, segments, weights, reduce_fn, **binning):
  """Checks, the per-list losses, and the (weighted) reduction: the body of both losses."""
  scores, labels, where = checks.check_lists(fn, scores, labels, where)
  check_similarities(fn, scores, where)
  dtype = lists.compute_dtype(scores.dtype)
  weights = checks.check_list_weights(
    fn, weights, scores.shape, dtype, segmented=segments is not None
  )
  scores, where, labels = segmented.as_lists(fn, segments, scores, where, labels)
  values, valid = binned_ap_estimates(scores, labels, where, estimator=_histogram_ap, **binning)
  return lists.safe_reduce(1 - values, valid, reduce_fn, weights=weights)


def fastap_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  num_intervals: int = 10,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""1 - FastAP (Cakir et al. 2019), the histogram approximation of AP on squared distances.

  Scores are cosine similarities `s` in `[-1, 1]` of unit embeddings; FastAP bins their squared
  Euclidean distances `d = 2 - 2 s` in `[0, 4]` (eq. 22-23, App. C.1) and estimates AP (eq. 14):

  .. math::
    \mathrm{FastAP} = \frac{1}{N^+} \sum_{j=0}^{L} \frac{\hat H^+_j\, \hat h^+_j}{\hat H_j},
    \qquad \hat h_j = \sum_{i \text{ valid}} \max\Bigl(0,\ 1 - \frac{|d_i - c_j|}{\Delta}\Bigr),
    \qquad c_j = \frac{4 j}{L},\ \Delta = \frac{4}{L},

  with `\hat h^+_j` the same sum over relevant items, `\hat H_j`, `\hat H^+_j` their cumulative sums
  and `N^+` the number of relevant valid items. Loss: `1 - FastAP` per list, reduced over lists.

  **Bins.** `L = num_intervals` intervals and `L + 1` centres `0, 4/L, ..., 4`, width `4/L`: the
  convention of the authors' released code and of pytorch-metric-learning's `FastAPLoss(num_bins)`
  (`num_intervals` is their `num_bins`; the paper's text speaks of `L` centres). The default `L =
  10` is where the paper's ablation peaks (sec. 5, Fig. 4b) and pytorch-metric-learning's default.
  Known scores outside `[-1, 1]` (distances outside `[0, 4]`) raise `ValueError`; under `jit` they
  are clipped to the end bins, unless traced inside `jaxrank.traced_checks` (module docstring,
  *Range*, which also says how to bin other ranges). This equals `soft_binning_ap_loss(scores,
  labels, num_bins=L + 1)`.

  **Self-inclusion.** The list is taken as given. Through `jaxrank.batch_retrieval` the query is
  left out of its own list by default, as in the paper (`B \setminus \{x_i\}`, eq. 22), the
  released code and pytorch-metric-learning, with which `fastap_loss(scores, relevance,
  where=where)` then agrees; `include_self=True` adds the query as a relevant item at distance 0.

  **Degenerate lists.** Bins with an empty prefix contribute 0; a list without a relevant valid item
  gives 0 and is left out of the reduction (pytorch-metric-learning drops such queries too); a list
  of relevant items only gives loss 0. Values and gradients are finite in every case. The exact
  gradient is the autodiff one; it equals the analytic gradient of App. C (eq. 33-46).

  **Cost.** O(n) memory per list plus O(L): O(B n) for `B` lists, never an `[..., n, L]` tensor;
  O(n) time per list on a CPU or GPU (a scatter-add into two bins per item), O(n L) arithmetic in
  one fused pass on a TPU (no scatter; module docstring, *Cost*). Through `batch_retrieval`
  add the `[B, B]` score matrix and its O(B^2 D) product.

  Args:
    scores: `[..., n]` floating cosine similarities in `[-1, 1]`, higher is better (checked when
      known).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    num_intervals: `L >= 2`, the number of distance intervals (`L + 1` centres; named `num_bins`
      in pytorch-metric-learning's `FastAPLoss`).
    reduce_fn: reduction over lists (default `jnp.mean`), called as `reduce_fn(values, where=...)`;
      `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`, in at least float32.

  >>> import jax.numpy as jnp
  >>> # Distances 0.4, 1.2, 2.0, 3.6 on centres 0, 1, ..., 4: h+ = (.6, .4, 1, 0, 0),
  >>> # h = (.6, 1.2, 1.2, .4, .6), FastAP = (.6 + .4 / 1.8 + 2 / 3) / 2 = 0.7444 (AP is 0.8333).
  >>> scores, labels = jnp.array([0.8, 0.4, 0.0, -0.8]), jnp.array([1, 0, 1, 0])
  >>> round(float(fastap_loss(scores, labels, num_intervals=4)), 4)
  0.2556
  """
  fn = "fastap_loss"
  checks.check_int_at_least(fn, "num_intervals", num_intervals, 2)
  return _binned_ap_loss(
    fn,
    scores,
    labels,
    where,
    segments,
    None,
    reduce_fn,
    to_values=_squared_distance,
    num_centres=num_intervals + 1,
    first_centre=0.0,
    last_centre=4.0,
  )


def soft_binning_ap_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  weights: jax.typing.ArrayLike | None = None,
  num_bins: int = 20,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""1 - mAP_Q (Revaud et al. 2019), the quantized AP of similarities soft-binned on `[-1, 1]`.

  With `M = num_bins` centres `b_m = 1 - (m - 1)\Delta`, `\Delta = 2 / (M - 1)`, and the triangular
  kernel `\delta(x, m) = \max(1 - |x - b_m| / \Delta, 0)` (eq. 7), the quantized precision and
  incremental recall of each bin (eq. 9-10) give AP_Q (eq. 11):

  .. math::
    \hat P_m = \frac{\sum_{m' \leq m} \delta(S, m')^\top Y}{\sum_{m' \leq m} \delta(S, m')^\top
        \mathbf{1}},
    \qquad \Delta \hat r_m = \frac{\delta(S, m)^\top Y}{N^+},
    \qquad \mathrm{AP}_Q = \sum_{m=1}^{M} \hat P_m\, \Delta \hat r_m,

  and the loss is `1 - AP_Q` per list, reduced over lists: `1 - mAP_Q` (eq. 12) with the default
  mean. Bins with an empty prefix contribute 0. `fastap_loss(scores, labels, num_intervals=L)`
  equals this loss with `num_bins=L + 1`.

  **Bins.** The default `M = 20` on `[-1, 1]` is the paper's setting (sec. 4.2, "We use M = 20
  quantization bins in all other experiments"; `M` matters little, Fig. 4) and that of ROADMAP's
  re-implementation (`SoftBinAP`, 20 bins on `[-1, 1]`, Ramzi et al.'s code). It is not the
  default of the authors' released loss (naver/deep-image-retrieval, `dirtorch/loss.py`):
  `APLoss()` places `nq = 25` bins on `[min, max] = [0, 1]`, the same kernel and centres from `max`
  down to `min`; on scores in `[0, 1]` it is `soft_binning_ap_loss(2 * s - 1, labels,
  num_bins=25)` (module docstring, *Other ranges*). Known scores outside `[-1, 1]` raise
  `ValueError`; under `jit` they are clipped to the end bins, unless traced inside
  `jaxrank.traced_checks` (module docstring, *Range*).

  **Class balancing** (sec. 4.2). Per-list `weights` (one per query; see
  `class_balancing_weights`) make the default `jnp.mean` the weighted mean
  `\sum_i w_i \ell_i / \sum_i w_i` over the lists that have a relevant valid item, so that every
  class counts equally in the batch. `jnp.sum` gives `\sum_i w_i \ell_i`, `reduce_fn=None` returns
  the weighted per-list losses `w_i \ell_i` (so their sum is the `jnp.sum` reduction), and any
  other `reduce_fn` is called on `w_i \ell_i` with `where=` the valid lists. Weights must be
  non-negative: a negative or NaN weight raises `ValueError` when the weights are known (under
  `jit` they are not checked).

  **Self-inclusion.** The list is taken as given. Through `jaxrank.batch_retrieval` the query is
  left out of its own list by default, as in the paper (eq. 12 compares each query "to all other
  batch images"); `include_self=True` adds it as a relevant item with similarity 1.

  **Degenerate lists.** A list without a relevant valid item gives 0 and is left out of the
  reduction; a list of relevant items only gives loss 0; values and gradients are finite in every
  case.

  **Cost.** O(n) memory per list plus O(M): O(B n) for `B` lists, never an `[..., n, M]` tensor;
  O(n) time per list on a CPU or GPU (a scatter-add into two bins per item), O(n M) arithmetic in
  one fused pass on a TPU (no scatter; module docstring, *Cost*). Through `batch_retrieval`
  add the `[B, B]` score matrix and its O(B^2 D) product.

  Args:
    scores: `[..., n]` floating similarities in `[-1, 1]`, higher is better (checked when known).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    weights: optional `[...]` non-negative per-list weights (broadcastable to the lists' shape;
      with `segments`, `[..., n]`: one per segment).
    num_bins: `M >= 2`, the number of bin centres.
    reduce_fn: reduction over lists (default `jnp.mean`, weighted with `weights`); `None` gives
      `[...]`.

  Returns:
    The reduced loss, or `[...]` per list (times `weights` when given) with `reduce_fn=None`, in
    at least float32.

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.8, 0.4, 0.0, -0.8]), jnp.array([1, 0, 1, 0])
  >>> round(float(soft_binning_ap_loss(scores, labels, num_bins=5)), 4)  # = fastap_loss, L = 4.
  0.2556
  >>> # Three queries, the first two of one class, on 3 centres (1, 0, -1): losses 0, 0.5, 0.
  >>> s = jnp.array([[1.0, -1.0], [-1.0, 1.0], [1.0, -1.0]])
  >>> y = jnp.array([[1, 0], [1, 0], [1, 0]])
  >>> soft_binning_ap_loss(s, y, num_bins=3, reduce_fn=None).tolist()
  [0.0, 0.5, 0.0]
  >>> w = class_balancing_weights(jnp.array([0, 0, 1]))
  >>> w.tolist()
  [0.75, 0.75, 1.5]
  >>> # Unweighted: 0.5 / 3; weighted: the mean over classes of (0 + 0.5) / 2 and 0.
  >>> [round(float(soft_binning_ap_loss(s, y, num_bins=3, weights=v)), 4) for v in (None, w)]
  [0.1667, 0.125]
  """
  fn = "soft_binning_ap_loss"
  checks.check_int_at_least(fn, "num_bins", num_bins, 2)
  return _binned_ap_loss(
    fn,
    scores,
    labels,
    where,
    segments,
    weights,
    reduce_fn,
    to_values=identity,
    num_centres=num_bins,
    first_centre=1.0,
    last_centre=-1.0,
  )


def class_balancing_weights(
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
) -> jax.Array:
  r"""Per-query weights that make every class of a batch count equally (Revaud et al. 2019, 4.2).

  For integer class labels `y [B]`, with `n_c` the number of (valid) queries of class `c` and `C`
  the number of classes present,

  .. math::
    w_i = \frac{B}{C\, n_{y_i}},

  so the queries of each class sum to `B / C` and the weights' mean is 1. Passed as `weights` to
  `soft_binning_ap_loss`, the default weighted mean is then the mean over classes of each class's
  mean loss (classes whose queries have no relevant item drop out, the others still count
  equally). Counts come from a sort: O(B log B) time, O(B) memory.

  Args:
    labels: `[B]` integer class labels of the queries.
    where: optional `[B]` boolean mask of valid queries; masked queries get weight 0 and are not
      counted (`B` is then the number of valid queries).

  Returns:
    `[B]` weights in the default floating dtype (float32, or float64 with x64 enabled).

  >>> import jax.numpy as jnp
  >>> class_balancing_weights(jnp.array([3, 3, 3, 7])).tolist()
  [0.6666666865348816, 0.6666666865348816, 0.6666666865348816, 2.0]
  """
  fn = "class_balancing_weights"
  labels = jnp.asarray(labels)
  checks.check_int_labels(fn, "labels", labels, layout="[B]", allow_bool=True)
  where = checks.check_mask(fn, "where", where, labels.shape, like="labels", broadcast=False)
  if labels.dtype == jnp.bool_:
    labels = labels.astype(jnp.int32)
  return _class_balancing_weights(labels, where)


@jax.jit
def _class_balancing_weights(labels, where):
  dtype = jnp.result_type(float)
  # The size of each query's class among the valid queries: sort (masked last, then by label), find
  # the runs of equal labels, and send each run's length back to the original positions.
  b = labels.shape[0]
  iota = jnp.arange(b, dtype=jnp.int32)
  invalid = (~where).astype(jnp.int32)
  invalid_s, labels_s, order = jax.lax.sort((invalid, labels, iota), num_keys=2)
  differs = (labels_s[1:] != labels_s[:-1]) | (invalid_s[1:] != invalid_s[:-1])
  start, end = ranking.run_bounds(differs)
  count = jnp.zeros((b,), jnp.int32).at[order].set(end - start + 1).astype(dtype)
  inverse = jnp.where(where, 1 / count, jnp.zeros((), dtype))
  num_classes = jnp.sum(inverse)  # Each class's queries add up to 1.
  scale = jnp.sum(where).astype(dtype) / jnp.where(num_classes > 0, num_classes, 1)
  return inverse * scale
