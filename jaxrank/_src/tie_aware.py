r"""Tie-aware AP and NDCG relaxations for hashing (He et al. 2018): estimators and the four losses.

Hamming distances of `b`-bit codes are integers `0..b`, so rankings by them are full of ties. He et
al. 2018 ("Hashing as Tie-Aware Learning to Rank") rank by tie-aware AP_T and NDCG_T (Prop. 1, the
mean over all orderings of tied items), computed from per-distance histograms, and train on
relaxations where the codes go through `tanh` and the histograms are soft (Prop. 2, App. F). This
module holds those relaxations; the exact AP_T and NDCG_T of integer distances and the code
helpers are in `jaxrank._src.hamming`, the continued sums over the positions of a tie in
`jaxrank._src.harmonic`. The sections below are shared by the four losses, whose docstrings refer
to them by name.

**One mechanism.** Every loss here is a per-bin estimator on the triangular soft histograms of
`jaxrank._src.histogram` (`soft_histograms`, the primitive shared with FastAP and mAP_Q), bins
ordered best first. With `c_d` (all valid items), `c^+_d` (relevant items) or `g_d = \sum_i
(2^{y_i} - 1) \delta_{i,d}` (gains) in bin `d`, and `C_{d-1}` the counts in the bins before it:

* `tie_aware_ap_loss`: 1 - AP_r, the relaxation of AP_T (Prop. 2, eq. 11 and 26; see *Deviation*);
* `simplified_tie_aware_ap_loss`: 1 - AP_s (App. F.1, eq. 62), which equals Revaud et al.'s mAP_T
  (2019, eq. 13) term for term;
* `tie_aware_ndcg_loss`: 1 - DCG_r / ideal DCG (Prop. 2, eq. 12; see *Deviation*);
* `simplified_tie_aware_ndcg_loss`: 1 - DCG_s / ideal DCG (App. F.2, eq. 66), a lower bound of
  DCG_T on hard histograms (Jensen, eq. 64), so this loss bounds `1 - NDCG_T` from above there.

The exact metrics `jaxrank.hamming_tie_aware_ap_metric` and `jaxrank.hamming_tie_aware_ndcg_metric`
are the first and third estimators on hard histograms (`tie_aware_ap_estimate`,
`tie_aware_dcg_estimate`). Graded relevance (NDCG) needs no histogram per relevance level: `\sum_v
G(v) c_{d,v}` with `G(v) = 2^v - 1` is one histogram of the items weighted by their gains, which
`soft_histograms` builds directly. The NDCG losses divide by the exact DCG of the ideal order (one
sort of the gains), as He et al.'s released code also does.

**Bins and Hamming distances: one argument.** `num_bins` alone places the bins. The losses take
similarity scores `s` in `[-1, 1]`, higher is better, binned on `M = num_bins` centres `1, ..., -1`
(spacing `2 / (M - 1)`, best first), as `soft_binning_ap_loss`, whose default of 20 bins they share.
Hamming distances need no second placement: for codes in `[-1, 1]^b`, the similarity
`s = 1 - 2 d / b = \phi_i^\top \phi_j / b` (`d` from `relaxed_hamming_distance`) maps the `b + 1`
integer distances `0..b` (width 1, ascending = best first: the paper's bins, eq. 13-15) onto the
`b + 1` centres of `num_bins = b + 1`, and the triangular kernel commutes with that affine map, so
the estimators are identical:

>>> import jax.numpy as jnp
>>> b, d = 4, jnp.array([0.0, 1.3, 2.0, 3.5])  # relaxed Hamming distances of 4-bit codes
>>> loss = tie_aware_ap_loss(1 - 2 * d / b, jnp.array([1, 0, 1, 0]), num_bins=b + 1)

A `num_bits` flag on the losses would change the meaning of `scores` (distance or similarity),
which jaxrank avoids (STYLE.md); the exact metrics, which must know that their inputs are integer
distances, take `distances` and `num_bits`.

**Deviation from the printed eq. 11 and 12, and the first-bin rule.** Prop. 2 replaces the sums
over the positions `t = C_{d-1} + 1, ..., C_d` of a tie by integrals: `\sum 1/t` by
`\ln(C_d / C_{d-1})` (eq. 27) and `\sum 1/\log_2(1 + t)` by `\ln 2 \int_{C_{d-1}+1}^{C_d+1}
dt / \ln t` (eq. 30). As printed these are unusable on soft histograms, as checked numerically:

* in the first non-empty bin `C_{d-1} = 0`: `\ln(C_d / 0)` and `\mathrm{li}(1)` are infinite;
* as the mass before a bin falls to `0^+` (an item sliding onto the next centre) the bin's term
  grows without bound, so AP_r and DCG_r are unbounded above: a maximiser runs off to that edge;
* AP_r has a pole at `c_d = 1` (its slope `(c^+_d - 1)/(c_d - 1)` multiplies a factor that does
  not vanish there): a bin holding half a relevant item after 3 items jumps from -12.5 to +12.6
  as `c_d` goes from 0.999 to 1.001;
* the printed formulas are not exact even without ties: for a bin holding one item `\ln(N_d /
  N_{d-1}) \neq 1 / N_d` (App. C's "no ties, no error" holds for the sums, not for eq. 11).

jaxrank evaluates the sums exactly instead, continued to real counts (`jaxrank._src.harmonic`:
what is continued, how, and how accurately): `\mathcal{H}(C_d) - \mathcal{H}(C_{d-1})` with the
harmonic numbers `\mathcal{H}(x) = \psi(x + 1) + \gamma`, and `\mathcal{D}(C_d) -
\mathcal{D}(C_{d-1})` with `\mathcal{D}(n) = \sum_{t=1}^{n} 1/\log_2(1 + t)` at integers. The
paper's `\ln` and `\mathrm{li}` are their leading terms; the two agree up to App. C's error,
`O(c_d / (2 C_{d-1}^2))` (eq. 37). So in the first non-empty bin (`C_{d-1} = 0`) AP_r uses
`\mathcal{H}(C_d) - \mathcal{H}(0) = \mathcal{H}(C_d)`, the sum `\sum_{t=1}^{C_d} 1/t` it stands
for, and DCG_r uses `\mathcal{D}(C_d)`; and AP_r's slope term is evaluated without dividing by
`c_d - 1` (it is smooth there, `tie_aware_ap_estimate`). Both relaxations are smooth and bounded.
AP_s and DCG_s need no such change: every bin of theirs, the first included, is finite as printed.

**Exactness on hard histograms.** When every valid item sits on a bin centre (integer Hamming
distances, `s = 1 - 2d/b` with `num_bins = b + 1`, or similarities on the centres):

* AP_r = AP_T and DCG_r = DCG_T, with or without ties (`jaxrank.tie_aware_ap_metric`,
  `jaxrank.tie_aware_ndcg_metric`);
* AP_s and DCG_s are exact **without ties** (at most one valid item per bin: AP_T = AP); with ties
  AP_s differs (either sign) and DCG_s < DCG_T.

On soft histograms all four are relaxations.

**Conventions** (as in `jaxrank._src.histogram`). Masked items contribute nothing. Known scores
(not traced) outside `[-1, 1]` raise `ValueError`, beyond rounding; under `jit` they are not
checked (unless traced inside `jaxrank.traced_checks`) and are clipped to the end bins (weight 1,
no gradient). Other ranges: see that module's
*Other ranges* (for Hamming distances, `1 - 2 d / b` above). A list without a relevant valid item
(AP), or whose ideal DCG is 0 (NDCG: no valid item with a positive label), gives 0 and is left out
of the reduction; values and gradients are finite in every case (all items in one bin, all masked,
all relevant included). A valid NaN score makes its list NaN. `reduce_fn` (default `jnp.mean`) is
called as `reduce_fn(values, where=...)` with the lists that count; `None` returns the `[...]`
per-list values. Histograms and results are in at least float32.

**Self-inclusion.** A list is taken as given. Through `jaxrank.batch_retrieval` the query is left
out of its own list by default, as in the paper (each example "is retrieved against the rest of
the minibatch", sec. 4.2) and its released code; `include_self=True` adds it.

**Cost.** Histograms: a scatter-add of two weights per item, O(n) time and memory per list. The
estimators: O(M) per list for `M` bins, with a constant factor for the continued sums (trailing
axes of 10 shift terms for AP_r, 24 shift terms and 20 quadrature nodes for DCG_r). NDCG adds one
sort of the gains for the ideal DCG, O(n log n). For `B` lists: O(B n + B M) time and memory; an
`[..., n, M]` tensor is never built, in the forward or the backward pass. Through
`batch_retrieval` add the `[B, B]` score matrix.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import harmonic
from jaxrank._src import histogram
from jaxrank._src import lists
from jaxrank._src import platforms
from jaxrank._src import ranking
from jaxrank._src import segmented

# ---------------------------------------------------------------------------------------------
# Per-bin estimators on histograms (bins best first, last axis).


def _exclusive_cumsum(x: jax.Array) -> jax.Array:
  """The sum of the bins strictly before each bin (exactly 0 for the first), never negative."""
  inclusive = jnp.cumsum(x, axis=-1)
  return jnp.concatenate([jnp.zeros_like(x[..., :1]), inclusive[..., :-1]], axis=-1)


def tie_aware_ap_estimate(hist: histogram.SoftHistograms, num_relevant: jax.Array) -> jax.Array:
  r"""AP_r `[...]`: eq. 26 with the harmonic differences continued, summed over bins.

  Per bin, with `p = c^+_d`, `n = c_d`, `P = C^+_{d-1}`, `N = C_{d-1}` and `\Delta = \mathcal{H}(N +
  n) - \mathcal{H}(N)`: `(p / (n N^+)) [(P + 1) \Delta + \frac{p-1}{n-1}(n - (N + 1)\Delta)]`. The
  last factor vanishes at `n = 1` (`\mathcal{H}(x + 1) - \mathcal{H}(x) = 1/(x + 1)`), so
  `(n - (N + 1)\Delta) / (n - 1) = 1 - (N + 1)(\mathcal{H}(N + n) - \mathcal{H}(N + 1)) / (n - 1)`
  is a slope, computed without dividing by `n - 1`. On hard histograms this is AP_T (eq. 6).

  Args:
    hist: relevance histograms (`relevant` of 0/1 relevance), each `[..., M]`, best bin first.
    num_relevant: `[...]` the number `N^+` of relevant valid items (0 gives 0).

  Returns:
    `[...]` the per-list estimates.
  """
  p, n = hist.relevant, hist.total
  big_p, big_n = _exclusive_cumsum(p), _exclusive_cumsum(n)
  # Both slopes in one call: half the operations for XLA to compile.
  slopes = harmonic.harmonic_slope(jnp.stack([big_n, big_n + 1]), jnp.stack([n, n - 1]))
  first = p * (big_p + 1) * slopes[0]
  q = 1 - (big_n + 1) * slopes[1]
  nonempty = n > 0
  share = jnp.where(nonempty, p / jnp.where(nonempty, n, jnp.ones_like(n)), jnp.zeros_like(n))
  total = jnp.sum(first + share * (p - 1) * q, axis=-1)
  return total / jnp.maximum(num_relevant, 1).astype(total.dtype)


def _simplified_tie_aware_ap_estimate(
  hist: histogram.SoftHistograms, num_relevant: jax.Array
) -> jax.Array:
  """AP_s, eq. 62: `(1/N+) sum_d c+_d (C+_{d-1} + C+_d + 1) / (C_{d-1} + C_d + 1)`."""
  p, n = hist.relevant, hist.total
  big_p, big_n = _exclusive_cumsum(p), _exclusive_cumsum(n)
  total = jnp.sum(p * (2 * big_p + p + 1) / (2 * big_n + n + 1), axis=-1)  # Denominators >= 1.
  return total / jnp.maximum(num_relevant, 1).astype(total.dtype)


def tie_aware_dcg_estimate(hist: histogram.SoftHistograms) -> jax.Array:
  """DCG_r `[...]`: `sum_d g_d (D(C_d) - D(C_{d-1})) / c_d`, each bin's mean gain times its
  discount sum (`harmonic.mean_discount`). On hard histograms this is DCG_T (eq. 7).

  Args:
    hist: histograms with `relevant` the gain-weighted one `g`, each `[..., M]`, best bin first.

  Returns:
    `[...]` the per-list estimates (not normalised).
  """
  g, n = hist.relevant, hist.total
  return jnp.sum(g * harmonic.mean_discount(_exclusive_cumsum(n), n), axis=-1)


def _simplified_tie_aware_dcg_estimate(hist: histogram.SoftHistograms) -> jax.Array:
  """DCG_s, eq. 66: `sum_d g_d / log2(C_{d-1} + c_d / 2 + 3/2)`."""
  g, n = hist.relevant, hist.total
  return jnp.sum(g / jnp.log2(_exclusive_cumsum(n) + n / 2 + 1.5), axis=-1)


# ---------------------------------------------------------------------------------------------
# Jitted bodies and the two loss helpers (one for the AP estimators, one for the NDCG ones).


def binned_ndcg_estimates(
  scores, labels, where, *, estimator, num_centres, first_centre, last_centre
):
  """Per-list NDCG estimates `[...]` and whether each list has a positive ideal DCG.

  The NDCG counterpart of `histogram.binned_ap_estimates`: gain-weighted histograms of `scores`
  on `num_centres` centres from `first_centre` (the best bin) to `last_centre`, then
  `estimator(histograms)` divided by the exact ideal DCG (0 where it is 0). Inputs are checked by
  the caller; a valid NaN score makes its list NaN.
  """
  return _binned_ndcg_estimates(
    scores,
    labels,
    where,
    estimator=estimator,
    num_centres=num_centres,
    first_centre=first_centre,
    last_centre=last_centre,
    platform=platforms.forced(),
  )


@functools.partial(
  jax.jit,
  static_argnames=("estimator", "num_centres", "first_centre", "last_centre", "platform"),
)
def _binned_ndcg_estimates(
  scores, labels, where, *, estimator, num_centres, first_centre, last_centre, platform
):
  """`binned_ndcg_estimates`, its compiled programs keyed by the forced platform (`platform`,
  which `histogram.soft_histograms` reads when traced)."""
  del platform
  dtype = lists.compute_dtype(scores.dtype)
  gains = ranking.gains(labels, where, dtype)
  ideal = ranking.ideal_dcg(gains)
  defined = ideal > 0
  # Lists left out (ideal DCG 0) are binned as zeros: zero gradient even if they hold a NaN.
  safe = lists.counted_scores(scores, where, defined)
  hist = histogram.soft_histograms(
    safe.astype(dtype),
    gains,
    where,
    num_centres=num_centres,
    first_centre=first_centre,
    last_centre=last_centre,
    dtype=dtype,
  )
  values = estimator(hist) / jnp.where(defined, ideal, jnp.ones_like(ideal))
  return lists.nan_if_any(values, scores, where), defined


def _checked(fn, scores, labels, where, segments, num_bins):
  """Checked `(scores, labels as floats, where)` of a loss, as the lists of the segments with
  `segments` (`jaxrank._src.segmented`)."""
  checks.check_int_at_least(fn, "num_bins", num_bins, 2)
  scores, labels, where = checks.check_lists(fn, scores, labels, where)
  histogram.check_similarities(fn, scores, where)
  scores, where, labels = segmented.as_lists(fn, segments, scores, where, labels)
  # Labels as floats: integer, boolean and floating labels then share one compiled body.
  return scores, labels.astype(lists.compute_dtype(scores.dtype)), where


def _ap_loss(fn, estimator, scores, labels, where, segments, num_bins, reduce_fn):
  """`1 - estimator` on similarity histograms, reduced over the lists with a relevant item."""
  scores, labels, where = _checked(fn, scores, labels, where, segments, num_bins)
  values, valid = histogram.binned_ap_estimates(
    scores,
    labels,
    where,
    estimator=estimator,
    to_values=histogram.identity,
    num_centres=num_bins,
    first_centre=1.0,
    last_centre=-1.0,
  )
  return lists.safe_reduce(1 - values, valid, reduce_fn)


def _ndcg_loss(fn, estimator, scores, labels, where, segments, num_bins, reduce_fn):
  """`1 - estimator / ideal DCG` on similarity histograms, reduced over the lists it defines."""
  scores, labels, where = _checked(fn, scores, labels, where, segments, num_bins)
  checks.check_graded_labels(fn, labels, where)
  values, valid = binned_ndcg_estimates(
    scores,
    labels,
    where,
    estimator=estimator,
    num_centres=num_bins,
    first_centre=1.0,
    last_centre=-1.0,
  )
  return lists.safe_reduce(1 - values, valid, reduce_fn)


# ---------------------------------------------------------------------------------------------
# The losses.


def tie_aware_ap_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  num_bins: int = 20,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""1 - AP_r, the continuous relaxation of tie-aware AP (He et al. 2018, Prop. 2, eq. 11 and 26).

  AP_T (eq. 6) decomposes over the bins (ties); relaxing the counts to soft histograms `c_d`,
  `c^+_d` (eq. 14-15), with cumulative sums `C_d`, `C^+_d` and `N^+` relevant valid items, gives

  .. math::
    \mathrm{AP}_r = \frac{1}{N^+} \sum_d \frac{c^+_d}{c_d} \Bigl[(C^+_{d-1} + 1)\,\Delta_d
        + \frac{c^+_d - 1}{c_d - 1}\bigl(c_d - (C_{d-1} + 1)\,\Delta_d\bigr)\Bigr],
    \qquad \Delta_d = \mathcal{H}(C_d) - \mathcal{H}(C_{d-1}),

  eq. 26 with `\mathcal{H}(x) = \psi(x + 1) + \gamma`, the harmonic numbers continued to real `x`.
  **This is not eq. 11 verbatim**: eq. 11 writes `\Delta_d \approx \ln(C_d / C_{d-1})` (eq. 27),
  which fails on soft histograms; the first non-empty bin gets `\Delta_d = \mathcal{H}(C_d)` and the
  slope term is evaluated without dividing by `c_d - 1` (module docstring, *Deviation from the
  printed eq. 11 and 12*).

  **Exact metric.** On hard histograms (every valid score on a centre, e.g. integer Hamming
  distances) AP_r equals `jaxrank.tie_aware_ap_metric` exactly, ties or not. The estimator is
  smooth in the counts, so gradients are those of the soft-histogram weights (piecewise linear in
  the scores) times bounded factors.

  Bins and Hamming distances (`num_bins`, `scores = 1 - 2 d / b`), degenerate lists,
  self-inclusion and cost: see the module docstring.

  Args:
    scores: `[..., n]` floating similarities in `[-1, 1]`, higher is better.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    num_bins: `M >= 2`, the number of bin centres.
    reduce_fn: reduction over lists (default `jnp.mean`), called as `reduce_fn(values, where=...)`;
      `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`, in at least float32. Lists
    without a relevant valid item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> # 2-bit codes at Hamming distances 0, 1, 1: a relevant item first, then a tie of a relevant
  >>> # and a non-relevant item. AP is 1 or 5/6 depending on the order; AP_T = 11/12.
  >>> d, labels = jnp.array([0.0, 1.0, 1.0]), jnp.array([1, 0, 1])
  >>> round(float(tie_aware_ap_loss(1 - 2 * d / 2, labels, num_bins=3)), 4)
  0.0833
  """
  return _ap_loss(
    "tie_aware_ap_loss",
    tie_aware_ap_estimate,
    scores,
    labels,
    where,
    segments,
    num_bins,
    reduce_fn,
  )


def simplified_tie_aware_ap_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  num_bins: int = 20,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""1 - AP_s, the simplified relaxation of tie-aware AP (He et al. 2018, App. F.1, eq. 62).

  Each tie's sum over its positions is replaced by its midpoint (eq. 59-61), then the counts are
  relaxed to soft histograms:

  .. math::
    \mathrm{AP}_s = \frac{1}{N^+} \sum_d c^+_d \,
        \frac{C^+_{d-1} + C^+_d + 1}{C_{d-1} + C_d + 1}.

  This is Revaud et al. 2019's mAP_T (eq. 13) term for term: their precision `(1 + h^+_m + 2
  H^+_{m-1}) / (1 + h_m + 2 H_{m-1})` is the fraction above, times their `\Delta r_m = h^+_m / N^+`.
  It is the loss of the authors' released code (`apr_s_forward.m`). Denominators are at least 1, so
  every bin, the first included, is finite and smooth.

  **Exact metric.** On hard histograms without ties (at most one valid item per bin) AP_s equals
  AP_T (= AP); with ties it differs from `jaxrank.tie_aware_ap_metric`, in either direction.

  Bins and Hamming distances (`num_bins`, `scores = 1 - 2 d / b`), degenerate lists,
  self-inclusion and cost: see the module docstring.

  Args:
    scores: `[..., n]` floating similarities in `[-1, 1]`, higher is better.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    num_bins: `M >= 2`, the number of bin centres.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`, in at least float32. Lists
    without a relevant valid item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> # As for tie_aware_ap_loss: AP_s = 1/2 + (1/2)(1 + 2 + 1)/(1 + 3 + 1) = 0.9 (AP_T = 11/12).
  >>> d, labels = jnp.array([0.0, 1.0, 1.0]), jnp.array([1, 0, 1])
  >>> round(float(simplified_tie_aware_ap_loss(1 - 2 * d / 2, labels, num_bins=3)), 4)
  0.1
  """
  return _ap_loss(
    "simplified_tie_aware_ap_loss",
    _simplified_tie_aware_ap_estimate,
    scores,
    labels,
    where,
    segments,
    num_bins,
    reduce_fn,
  )


def tie_aware_ndcg_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  num_bins: int = 20,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""1 - NDCG_r, the continuous relaxation of tie-aware NDCG (He et al. 2018, Prop. 2, eq. 12).

  DCG_T (eq. 7) gives each tie its mean gain times the sum of the discounts of its positions;
  relaxing the counts to soft histograms `c_{d,v}` per relevance level `v` (eq. 15) gives

  .. math::
    \mathrm{DCG}_r = \sum_d \frac{\sum_v G(v)\, c_{d,v}}{c_d}
        \bigl(\mathcal{D}(C_d) - \mathcal{D}(C_{d-1})\bigr),
    \qquad \mathcal{D}(x) = \sum_{t \geq 1} \Bigl[\frac{1}{\log_2(1 + t)}
        - \frac{1}{\log_2(1 + t + x)}\Bigr],

  with gains `G(v) = 2^v - 1`, and `1 - \mathrm{DCG}_r / \mathrm{DCG}^*` is the loss, where
  `\mathrm{DCG}^*` is the exact DCG of the ideal order. `\mathcal{D}(n) = \sum_{t=1}^{n} 1/\log_2(1
  + t)` at integers. **This is not eq. 12 verbatim**: eq. 12 writes the difference as `\ln 2
  \int_{C_{d-1}+1}^{C_d+1} dt / \ln t` (eq. 30), which fails on soft histograms; that logarithmic
  integral is the main term of the evaluation here, which adds Euler-Maclaurin corrections so that
  the sums are exact, and the first non-empty bin gets `\mathcal{D}(C_d)` (module docstring,
  *Deviation from the printed eq. 11 and 12*).

  **Exact metric.** On hard histograms DCG_r equals DCG_T, so the loss is `1 -
  jaxrank.tie_aware_ndcg_metric`, ties or not.

  Bins and Hamming distances (`num_bins`, `scores = 1 - 2 d / b`), degenerate lists,
  self-inclusion and cost (with the sort for the ideal DCG): see the module docstring.

  Args:
    scores: `[..., n]` floating similarities in `[-1, 1]`, higher is better.
    labels: `[..., n]` non-negative graded labels (gain `2**label - 1`), e.g. the number of shared
      tags (`batch_retrieval` with multi-hot labels); a negative valid label raises `ValueError`
      when the labels are known (under `jit`, inside `jaxrank.traced_checks` only).
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    num_bins: `M >= 2`, the number of bin centres.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`, in at least float32. Lists whose
    ideal DCG is 0 give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> # Distances 0, 1, 1 of 2-bit codes, grades 2, 0, 1 (gains 3, 0, 1): DCG_T = 3 + (1/2)(1/log2 3
  >>> # + 1/log2 4) = 3.5655, ideal 3 + 1/log2 3 = 3.6309, NDCG_T = 0.9820.
  >>> d, labels = jnp.array([0.0, 1.0, 1.0]), jnp.array([2, 0, 1])
  >>> round(float(tie_aware_ndcg_loss(1 - 2 * d / 2, labels, num_bins=3)), 4)
  0.018
  """
  return _ndcg_loss(
    "tie_aware_ndcg_loss",
    tie_aware_dcg_estimate,
    scores,
    labels,
    where,
    segments,
    num_bins,
    reduce_fn,
  )


def simplified_tie_aware_ndcg_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  num_bins: int = 20,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""1 - NDCG_s, the simplified lower-bound relaxation of tie-aware NDCG (He et al., App. F.2).

  By Jensen's inequality (the discount `1/\log_2(1 + t)` is convex, eq. 63-65), each tie's discount
  sum is at least its size times the discount of its middle position; relaxing the counts gives

  .. math::
    \mathrm{DCG}_s = \sum_d \frac{\sum_v G(v)\, c_{d,v}}{\log_2(C_{d-1} + \frac{1}{2} c_d
        + \frac{3}{2})}

  (eq. 66), `G(v) = 2^v - 1`, and the loss is `1 - \mathrm{DCG}_s / \mathrm{DCG}^*` with the exact
  ideal DCG. It is the loss of the authors' released code (`ndcgr_s_forward.m`); the name mirrors
  `simplified_tie_aware_ap_loss` (the paper's subscript `s` for both). Every bin, the first
  included, is finite (`\log_2(3/2) > 0`).

  **Exact metric and bound.** On hard histograms DCG_s equals DCG_T without ties and is below it
  with ties, so there this loss is an upper bound of `1 - jaxrank.tie_aware_ndcg_metric`. On soft
  histograms it is a relaxation, not a bound.

  Bins and Hamming distances (`num_bins`, `scores = 1 - 2 d / b`), degenerate lists,
  self-inclusion and cost (with the sort for the ideal DCG): see the module docstring.

  Args:
    scores: `[..., n]` floating similarities in `[-1, 1]`, higher is better.
    labels: `[..., n]` non-negative graded labels (gain `2**label - 1`); a negative valid label
      raises `ValueError` when the labels are known (under `jit`, inside `jaxrank.traced_checks`
      only).
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    num_bins: `M >= 2`, the number of bin centres.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`, in at least float32. Lists whose
    ideal DCG is 0 give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> # As for tie_aware_ndcg_loss: DCG_s = 3 / log2(2) + 1 / log2(3.5) = 3.5533 <= DCG_T = 3.5655.
  >>> d, labels = jnp.array([0.0, 1.0, 1.0]), jnp.array([2, 0, 1])
  >>> round(float(simplified_tie_aware_ndcg_loss(1 - 2 * d / 2, labels, num_bins=3)), 4)
  0.0214
  """
  return _ndcg_loss(
    "simplified_tie_aware_ndcg_loss",
    _simplified_tie_aware_dcg_estimate,
    scores,
    labels,
    where,
    segments,
    num_bins,
    reduce_fn,
  )
