r"""Tie-aware AP and NDCG for hashing (He et al. 2018): relaxations, exact metrics, code helpers.

Hamming distances of `b`-bit codes are integers `0..b`, so rankings by them are full of ties. He et
al. 2018 ("Hashing as Tie-Aware Learning to Rank") rank by tie-aware AP_T and NDCG_T (Prop. 1, the
mean over all orderings of tied items), computed from per-distance histograms, and train on
relaxations where the codes go through `tanh` and the histograms are soft (Prop. 2, App. F).

**One mechanism.** Every function here is a per-bin estimator on the triangular soft histograms of
`jaxrank.histogram.soft_histograms` (the primitive shared with FastAP and mAP_Q), bins ordered best
first. With `c_d` (all valid items), `c^+_d` (relevant items) or `g_d = \sum_i (2^{y_i} - 1)
\delta_{i,d}` (gains) in bin `d`, and `C_{d-1}` the counts in the bins before it:

* `tie_aware_ap_loss`: 1 - AP_r, the relaxation of AP_T (Prop. 2, eq. 11; see below);
* `simplified_tie_aware_ap_loss`: 1 - AP_s (App. F.1, eq. 62), which equals Revaud et al.'s mAP_T
  (2019, eq. 13) term for term;
* `tie_aware_ndcg_loss`: 1 - DCG_r / ideal DCG (Prop. 2, eq. 12);
* `simplified_tie_aware_ndcg_loss`: 1 - DCG_s / ideal DCG (App. F.2, eq. 66), a lower bound of
  DCG_T on hard histograms (Jensen, eq. 64), so this loss bounds `1 - NDCG_T` from above there;
* `hamming_tie_aware_ap_metric`, `hamming_tie_aware_ndcg_metric`: the exact AP_T and NDCG_T
  (eq. 6-7) of integer Hamming distances, by counting: the first and third estimators on hard
  histograms.

Graded relevance (NDCG) needs no histogram per relevance level: `\sum_v G(v) c_{d,v}` is one
histogram of the items weighted by their gains, which `soft_histograms` builds directly.

**Bin placement: one argument, `num_bins`.** The losses take similarity scores `s` in `[-1, 1]`,
higher is better, binned on `num_bins` centres `1, ..., -1` (as `soft_binning_ap_loss`). Hamming
distances need no second placement: for codes in `[-1, 1]^b`, `s = 1 - 2 d / b = \phi_i^\top
\phi_j / b` maps the `b + 1` integer distances `0..b` (width 1, ascending = best first; eq. 13-15)
onto the `b + 1` centres of `num_bins = b + 1`, and the triangular kernel commutes with that affine
map, so the estimators are identical:

>>> import jax.numpy as jnp
>>> b, d = 4, jnp.array([0.0, 1.3, 2.0, 3.5])  # relaxed Hamming distances of 4-bit codes
>>> loss = tie_aware_ap_loss(1 - 2 * d / b, jnp.array([1, 0, 1, 0]), num_bins=b + 1)

A `num_bits` flag on the losses would change the meaning of `scores` (distance or similarity),
which jaxrank avoids (STYLE.md); the exact metrics, which must know that their inputs are integer
distances, take `distances` and `num_bits`.

**Deviation from the printed AP_r and DCG_r (and the first-bin rule).** Prop. 2 replaces the sums
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

jaxrank evaluates the sums exactly instead, continued to real counts: `\mathcal{H}(C_d) -
\mathcal{H}(C_{d-1})` with the harmonic numbers `\mathcal{H}(x) = \psi(x + 1) + \gamma`, and
`\mathcal{D}(C_d) - \mathcal{D}(C_{d-1})` with `\mathcal{D}(x) = \sum_{t \geq 1} [1/\log_2(1 + t) -
1/\log_2(1 + t + x)]`, the partial sums of the discounts continued the same way (`\mathcal{D}(n) =
\sum_{t=1}^{n} 1/\log_2(1 + t)` at integers). The paper's `\ln` and `\mathrm{li}` are the leading
terms of these functions (their difference is App. C's error, `O(c_d / C_{d-1}^2)`, eq. 37), and
the logarithmic integral is the main term in jaxrank's evaluation of `\mathcal{D}` (with
Euler-Maclaurin corrections). So in the first non-empty bin AP_r uses `\mathcal{H}(C_d) -
\mathcal{H}(0) = \mathcal{H}(C_d)`, the sum `\sum_{t=1}^{C_d} 1/t` it stands for, and DCG_r uses
`\mathcal{D}(C_d)`. Both relaxations are smooth, bounded, and:

* **exact on hard histograms**: when every valid item sits on a bin centre (integer Hamming
  distances, `s = 1 - 2d/b` with `num_bins = b + 1`), AP_r = AP_T and DCG_r = DCG_T, with or
  without ties (`tie_aware_ap_metric`, `tie_aware_ndcg_metric`);
* AP_s and DCG_s are exact on hard histograms **without ties** (at most one valid item per bin);
  with ties AP_s differs (either sign) and DCG_s < DCG_T.

**Conventions** (as in `jaxrank.histogram`): masked items contribute nothing; scores beyond
`[-1, 1]` are clipped to the end bins; a list without a relevant valid item (NDCG: ideal DCG 0)
gives 0 and is left out of the reduction; a valid NaN score makes its list NaN.

**Cost.** Histograms: a scatter-add of two weights per item, O(n) time and memory per list. The
estimators: O(M) per list for `M` bins, with a constant factor for the continued sums (trailing
axes of 10 shift terms for AP_r, 24 shift terms and 20 quadrature nodes for DCG_r). NDCG adds one
sort of the gains for the ideal DCG, O(n log n). For `B` lists: O(B n + B M) time and memory; an
`[..., n, M]` tensor is never built, in the forward or the backward pass.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import lists
from jaxrank._src import histogram
from jaxrank._src import ranking


# ---------------------------------------------------------------------------------------------
# Sums over the positions of a tie, continued to real counts.

# Harmonic numbers: H(x) = H(x + K) - sum_{j<=K} 1/(x + j), and for y = x + K + 1/2 >= 10.5 the
# asymptotic series psi(y + 1/2) = ln y + sum_k c_k y^(-2k) (c_k = -B_2k(1/2) / 2k), whose next
# term is below 2e-14 there.
_HARMONIC_SHIFT = 10
_PSI_HALF_COEFFS = (1 / 24, -7 / 960, 31 / 8064, -127 / 30720, 2555 / 337920)

# Discount sums: D(x) = D(x + K) - sum_{t<=K} d(x + t), and for the shifted tail the midpoint
# Euler-Maclaurin formula sum_{t=a+1}^{b} d(t) = int_{a+1/2}^{b+1/2} (d + sum_k beta_k d^(2k)),
# beta_k = B_2k(1/2) / (2k)!, integrated by Gauss-Legendre in u = ln(1 + t). With K = 24 and three
# corrections the continuation is exact at integers to about 1e-14.
_DISCOUNT_SHIFT = 24
_MIDPOINT_COEFFS = ((2, -1 / 24), (4, 7 / 5760), (6, -31 / 967680))
_GAUSS_NODES, _GAUSS_WEIGHTS = np.polynomial.legendre.leggauss(20)
_LN2 = math.log(2.0)


def _discount_derivative_polynomials(order: int) -> list[list[int]]:
  """Coefficients of `P_k` with `d^(k)(t) = ln 2 (-1)^k (1 + t)^(-k) P_k(1 / ln(1 + t))`.

  With `w = 1 / ln(1 + t)`, `dw/dt = -w^2 / (1 + t)`, so `P_0 = w` and `P_{k+1} = k P_k + w^2 P_k'`.
  """
  polys = [[0, 1]]
  for k in range(order):
    p = polys[-1]
    new = [k * c for c in p] + [0]
    for i in range(1, len(p)):
      new[i + 1] += i * p[i]
    polys.append(new)
  return polys


_DISCOUNT_POLYS = _discount_derivative_polynomials(6)


def _log1p_ratio(r: jax.Array) -> jax.Array:
  """`log1p(r) / r`, 1 at `r = 0`, accurate (and with finite gradients) near 0."""
  small = jnp.abs(r) < 1e-4
  safe = jnp.where(small, jnp.ones_like(r), r)
  series = 1 - r / 2 + r * r / 3 - r * r * r / 4
  return jnp.where(small, series, jnp.log1p(safe) / safe)


def _expm1_ratio(u: jax.Array) -> jax.Array:
  """`u / expm1(u)`, 1 at `u = 0`, for `u >= 0`."""
  small = u < 1e-4
  safe = jnp.where(small, jnp.ones_like(u), u)
  return jnp.where(small, 1 - u / 2 + u * u / 12, safe / jnp.expm1(safe))


def _harmonic_slope(x: jax.Array, w: jax.Array) -> jax.Array:
  r"""`(H(x + w) - H(x)) / w` of the continued harmonic numbers, `H'(x)` at `w = 0`.

  For `x >= 0`, `x + w >= 0`. Every part is a sum of positive terms or a stable ratio, so the
  slope keeps full relative precision however small `w` is (no difference of two `H` values).
  The shift is a trailing axis of size 10 (O(10) memory per value, a small graph).
  """
  j = jnp.arange(1, _HARMONIC_SHIFT + 1, dtype=x.dtype)
  total = jnp.sum(1 / ((x[..., None] + j) * (x[..., None] + w[..., None] + j)), axis=-1)
  y = x + (_HARMONIC_SHIFT + 0.5)
  z = y + w
  total = total + _log1p_ratio(w / y) / y
  # Divided differences of y^(-m): (z^-m - y^-m) / (z - y) = -S_m with
  # S_m = sum_{i=1}^{m} y^-i z^-(m+1-i), S_1 = 1/(y z), S_{m+1} = (S_m + y^-(m+1)) / z.
  inv_y, inv_z = 1 / y, 1 / z
  y_pow = inv_y
  s = inv_y * inv_z
  for m in range(1, 2 * len(_PSI_HALF_COEFFS) + 1):
    if m % 2 == 0:
      total = total - _PSI_HALF_COEFFS[m // 2 - 1] * s
    y_pow = y_pow * inv_y
    s = (s + y_pow) * inv_z
  return total


def _discount_slope(a: jax.Array, w: jax.Array) -> jax.Array:
  """`(d(a + w) - d(a)) / w` for the discount `d(t) = 1 / log2(1 + t)`, `a >= 1`, `w >= 0`."""
  return -_LN2 * _log1p_ratio(w / (1 + a)) / ((1 + a) * jnp.log1p(a) * jnp.log1p(a + w))


def _horner(coeffs, w):
  value = jnp.zeros_like(w)
  for c in reversed(coeffs):
    value = value * w + c
  return value


def _midpoint_integrand(u: jax.Array) -> jax.Array:
  """`d + sum_k beta_k d^(2k)` at `t = e^u - 1`: `ln 2 [1/u + sum_k beta_k e^(-2k u) P_2k(1/u)]`."""
  w = 1 / u
  total = w
  decay = jnp.exp(-2 * u)
  factor = jnp.ones_like(u)
  for order, beta in _MIDPOINT_COEFFS:
    factor = factor * decay
    total = total + beta * factor * _horner(_DISCOUNT_POLYS[order], w)
  return _LN2 * total


def _mean_discount(x: jax.Array, w: jax.Array) -> jax.Array:
  r"""`(D(x + w) - D(x)) / w` of the continued discount sums, `D'(x)` at `w = 0`.

  The mean discount of the continuous positions `(x, x + w]`; for integers `x`, `w >= 1` it is
  `(1/w) \sum_{t=x+1}^{x+w} 1/\log_2(1 + t)`. For `x, w >= 0`; stable for small `w` as above.
  The shift and the quadrature nodes are trailing axes of sizes 24 and 20 (O(44) memory per value).
  """
  t = jnp.arange(1, _DISCOUNT_SHIFT + 1, dtype=x.dtype)
  total = -jnp.sum(_discount_slope(x[..., None] + t, w[..., None]), axis=-1)
  a = x + (_DISCOUNT_SHIFT + 0.5)
  u_a = jnp.log1p(a)
  du = jnp.log1p(w / (1 + a))
  # (1/w) int_a^{a+w} f(t) dt = (du / expm1(du)) * mean over u in [u_a, u_a + du] of
  # f(t(u)) e^(u - u_a), since dt = e^u du and w = e^(u_a) expm1(du).
  nodes = jnp.asarray((_GAUSS_NODES + 1) / 2, x.dtype)
  weights = jnp.asarray(_GAUSS_WEIGHTS / 2, x.dtype)
  offset = du[..., None] * nodes
  integrand = _midpoint_integrand(u_a[..., None] + offset) * jnp.exp(offset)
  return total + _expm1_ratio(du) * jnp.sum(weights * integrand, axis=-1)


# ---------------------------------------------------------------------------------------------
# Per-bin estimators on histograms (bins best first, last axis).


def _exclusive_cumsum(x: jax.Array) -> jax.Array:
  """The sum of the bins strictly before each bin (exactly 0 for the first), never negative."""
  inclusive = jnp.cumsum(x, axis=-1)
  return jnp.concatenate([jnp.zeros_like(x[..., :1]), inclusive[..., :-1]], axis=-1)


def _tie_aware_ap(hist: histogram.SoftHistograms, num_relevant: jax.Array) -> jax.Array:
  r"""AP_r: eq. 26 with the harmonic differences continued, summed over bins.

  Per bin, with `p = c^+_d`, `n = c_d`, `P = C^+_{d-1}`, `N = C_{d-1}` and `\Delta = \mathcal{H}(N +
  n) - \mathcal{H}(N)`: `(p / (n N^+)) [(P + 1) \Delta + \frac{p-1}{n-1}(n - (N + 1)\Delta)]`. The
  last factor vanishes at `n = 1` (`\mathcal{H}(x + 1) - \mathcal{H}(x) = 1/(x + 1)`), so
  `(n - (N + 1)\Delta) / (n - 1) = 1 - (N + 1)(\mathcal{H}(N + n) - \mathcal{H}(N + 1)) / (n - 1)`
  is a slope, computed without dividing by `n - 1`.
  """
  p, n = hist.relevant, hist.total
  big_p, big_n = _exclusive_cumsum(p), _exclusive_cumsum(n)
  first = p * (big_p + 1) * _harmonic_slope(big_n, n)
  q = 1 - (big_n + 1) * _harmonic_slope(big_n + 1, n - 1)
  nonempty = n > 0
  share = jnp.where(nonempty, p / jnp.where(nonempty, n, jnp.ones_like(n)), jnp.zeros_like(n))
  total = jnp.sum(first + share * (p - 1) * q, axis=-1)
  return total / jnp.maximum(num_relevant, 1).astype(total.dtype)


def _simplified_tie_aware_ap(hist: histogram.SoftHistograms, num_relevant: jax.Array) -> jax.Array:
  """AP_s, eq. 62: `(1/N+) sum_d c+_d (C+_{d-1} + C+_d + 1) / (C_{d-1} + C_d + 1)`."""
  p, n = hist.relevant, hist.total
  big_p, big_n = _exclusive_cumsum(p), _exclusive_cumsum(n)
  total = jnp.sum(p * (2 * big_p + p + 1) / (2 * big_n + n + 1), axis=-1)  # Denominators >= 1.
  return total / jnp.maximum(num_relevant, 1).astype(total.dtype)


def _tie_aware_dcg(hist: histogram.SoftHistograms) -> jax.Array:
  """DCG_r: `sum_d g_d (D(C_d) - D(C_{d-1})) / c_d`, the bin's mean gain times its discount sum."""
  g, n = hist.relevant, hist.total
  return jnp.sum(g * _mean_discount(_exclusive_cumsum(n), n), axis=-1)


def _simplified_tie_aware_dcg(hist: histogram.SoftHistograms) -> jax.Array:
  """DCG_s, eq. 66: `sum_d g_d / log2(C_{d-1} + c_d / 2 + 3/2)`."""
  g, n = hist.relevant, hist.total
  return jnp.sum(g / jnp.log2(_exclusive_cumsum(n) + n / 2 + 1.5), axis=-1)


# ---------------------------------------------------------------------------------------------
# Jitted bodies: scores -> per-list values.


@functools.partial(jax.jit, static_argnames=("estimator", "num_centres", "first", "last"))
def _ndcg_values(scores, labels, where, *, estimator, num_centres, first, last):
  """Per-list NDCG estimate `[...]` and whether each list has a positive ideal DCG."""
  dtype = lists.compute_dtype(scores.dtype)
  gains = ranking.gains(labels, where, dtype)
  hist = histogram.soft_histograms_unchecked(
      scores.astype(dtype),
      gains,
      where,
      num_centres=num_centres,
      first_centre=first,
      last_centre=last,
      dtype=dtype,
  )
  ideal = ranking.ideal_dcg(gains)
  defined = ideal > 0
  values = estimator(hist) / jnp.where(defined, ideal, jnp.ones_like(ideal))
  return lists.nan_if_any(values, scores, where), defined


def _loss(fn, kind, estimator, scores, labels, where, num_bins, reduce_fn):
  checks.check_int_at_least(fn, "num_bins", num_bins, 2)
  scores, labels, where = checks.check_lists(fn, scores, labels, where)
  # Labels as floats: integer, boolean and floating labels then share one compiled body.
  labels = labels.astype(lists.compute_dtype(scores.dtype))
  if kind == "ap":
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
  else:
    values, valid = _ndcg_values(
        scores, labels, where, estimator=estimator, num_centres=num_bins, first=1.0, last=-1.0
    )
  return lists.safe_reduce(1 - values, valid, reduce_fn)


def tie_aware_ap_loss(
    scores: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike,
    *,
    where: jax.typing.ArrayLike | None = None,
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
  which is infinite in the first non-empty bin, unbounded as `C_{d-1} \to 0^+`, has a pole at
  `c_d = 1`, and is inexact even without ties (module docstring). Here the first non-empty bin
  (`C_{d-1} = 0`) gets `\Delta_d = \mathcal{H}(C_d)`, the value of `\sum_{t=1}^{C_d} 1/t`, and the
  slope term is evaluated without dividing by `c_d - 1` (it is smooth there). The two agree up to
  App. C's error, `O(c_d / (2 C_{d-1}^2))` (eq. 37).

  **Exactness.** On hard histograms (every valid score on a centre, e.g. integer Hamming distances)
  AP_r equals `jaxrank.tie_aware_ap_metric` exactly, ties or not. The estimator is smooth in the
  counts, so gradients are those of the soft-histogram weights (piecewise linear in the scores)
  times bounded factors.

  **Degenerate lists.** A list without a relevant valid item gives 0 and is left out of the
  reduction; values and gradients are finite in every case (all items in one bin included).

  **Bins and Hamming distances.** `num_bins` centres `1, ..., -1` on the similarity axis, spacing
  `2 / (num_bins - 1)`, best first; scores beyond `[-1, 1]` are clipped to the end bins. For
  `b`-bit codes pass `scores = 1 - 2 d / b` (`d` from `relaxed_hamming_distance`) and
  `num_bins = b + 1`: the centres are then the integer distances `0..b` with width 1, the paper's
  bins (eq. 13-15). The default 20 is `soft_binning_ap_loss`'s.

  **Self-inclusion.** The list is taken as given. Through `jaxrank.batch_retrieval` the query is
  left out of its own list by default, as in the paper (each example "is retrieved against the rest
  of the minibatch", sec. 4.2) and its released code; `include_self=True` adds it.

  **Cost.** O(n) time and memory per list for the histograms (a scatter-add of two weights per
  item) and O(M) for the per-bin terms (`M = num_bins`); O(B n + B M) for `B` lists, never an
  `[..., n, M]` tensor. Through `batch_retrieval` add the `[B, B]` score matrix.

  Args:
    scores: `[..., n]` floating similarities in `[-1, 1]`, higher is better.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    num_bins: `M >= 2`, the number of bin centres.
    reduce_fn: reduction over lists (default `jnp.mean`), called as `reduce_fn(values, where=...)`;
      `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`, in at least float32.

  >>> import jax.numpy as jnp
  >>> # 2-bit codes at Hamming distances 0, 1, 1: a relevant item first, then a tie of a relevant
  >>> # and a non-relevant item. AP is 1 or 5/6 depending on the order; AP_T = 11/12.
  >>> d, labels = jnp.array([0.0, 1.0, 1.0]), jnp.array([1, 0, 1])
  >>> round(float(tie_aware_ap_loss(1 - 2 * d / 2, labels, num_bins=3)), 4)
  0.0833
  """
  return _loss(
      "tie_aware_ap_loss", "ap", _tie_aware_ap, scores, labels, where, num_bins, reduce_fn
  )


def simplified_tie_aware_ap_loss(
    scores: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike,
    *,
    where: jax.typing.ArrayLike | None = None,
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

  **Exactness.** On hard histograms without ties (at most one valid item per bin) AP_s equals AP_T
  (= AP); with ties it differs from `jaxrank.tie_aware_ap_metric`, in either direction.

  **Degenerate lists.** A list without a relevant valid item gives 0 and is left out of the
  reduction; values and gradients are finite in every case.

  **Bins and Hamming distances.** `num_bins` centres `1, ..., -1` on the similarity axis, spacing
  `2 / (num_bins - 1)`, best first; scores beyond `[-1, 1]` are clipped to the end bins. For
  `b`-bit codes pass `scores = 1 - 2 d / b` (`d` from `relaxed_hamming_distance`) and
  `num_bins = b + 1`: the centres are then the integer distances `0..b` with width 1, the paper's
  bins (eq. 13-15). The default 20 is `soft_binning_ap_loss`'s.

  **Self-inclusion.** The list is taken as given. Through `jaxrank.batch_retrieval` the query is
  left out of its own list by default, as in the paper (each example "is retrieved against the rest
  of the minibatch", sec. 4.2) and its released code; `include_self=True` adds it.

  **Cost.** O(n) time and memory per list for the histograms (a scatter-add of two weights per
  item) and O(M) for the per-bin terms (`M = num_bins`); O(B n + B M) for `B` lists, never an
  `[..., n, M]` tensor. Through `batch_retrieval` add the `[B, B]` score matrix.

  Args:
    scores: `[..., n]` floating similarities in `[-1, 1]`, higher is better.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    num_bins: `M >= 2`, the number of bin centres.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`, in at least float32.

  >>> import jax.numpy as jnp
  >>> # As for tie_aware_ap_loss: AP_s = 1/2 + (1/2)(1 + 2 + 1)/(1 + 3 + 1) = 0.9 (AP_T = 11/12).
  >>> d, labels = jnp.array([0.0, 1.0, 1.0]), jnp.array([1, 0, 1])
  >>> round(float(simplified_tie_aware_ap_loss(1 - 2 * d / 2, labels, num_bins=3)), 4)
  0.1
  """
  return _loss(
      "simplified_tie_aware_ap_loss",
      "ap",
      _simplified_tie_aware_ap,
      scores,
      labels,
      where,
      num_bins,
      reduce_fn,
  )


def tie_aware_ndcg_loss(
    scores: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike,
    *,
    where: jax.typing.ArrayLike | None = None,
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
  `\mathrm{DCG}^*` is the exact DCG of the ideal order (one sort of the gains; He et al.'s code
  also normalises by the exact ideal). `\mathcal{D}(n) = \sum_{t=1}^{n} 1/\log_2(1 + t)` at
  integers. **This is not eq. 12 verbatim**: eq. 12 writes the difference as `\ln 2
  \int_{C_{d-1}+1}^{C_d+1} dt / \ln t` (eq. 30), infinite in the first non-empty bin and
  unbounded as `C_{d-1} \to 0^+`; that logarithmic integral is the main term of the evaluation
  here, which adds Euler-Maclaurin corrections so that the sums are exact. The first non-empty bin
  gets `\mathcal{D}(C_d)`. The levels need no separate histograms: `\sum_v G(v) c_{d,v}` is the
  histogram of the items weighted by their gains.

  **Exactness.** On hard histograms DCG_r equals DCG_T, so the loss is `1 -
  jaxrank.tie_aware_ndcg_metric`, ties or not.

  **Degenerate lists.** A list whose ideal DCG is 0 (no valid item with a positive label) gives 0
  and is left out of the reduction; values and gradients are finite in every case.

  **Bins and Hamming distances.** `num_bins` centres `1, ..., -1` on the similarity axis, spacing
  `2 / (num_bins - 1)`, best first; scores beyond `[-1, 1]` are clipped to the end bins. For
  `b`-bit codes pass `scores = 1 - 2 d / b` (`d` from `relaxed_hamming_distance`) and
  `num_bins = b + 1`: the centres are then the integer distances `0..b` with width 1, the paper's
  bins (eq. 13-15). The default 20 is `soft_binning_ap_loss`'s.

  **Self-inclusion.** The list is taken as given. Through `jaxrank.batch_retrieval` the query is
  left out of its own list by default, as in the paper (each example "is retrieved against the rest
  of the minibatch", sec. 4.2) and its released code; `include_self=True` adds it.

  **Cost.** O(n) time and memory per list for the histograms (a scatter-add of two weights per
  item) and O(M) for the per-bin terms (`M = num_bins`); O(B n + B M) for `B` lists, never an
  `[..., n, M]` tensor. Through `batch_retrieval` add the `[B, B]` score matrix.
  NDCG adds the sort of the gains for the ideal DCG, O(n log n) per list.

  Args:
    scores: `[..., n]` floating similarities in `[-1, 1]`, higher is better.
    labels: `[..., n]` non-negative graded labels (gain `2**label - 1`), e.g. the number of shared
      tags (`batch_retrieval` with multi-hot labels).
    where: optional `[..., n]` boolean mask of valid items.
    num_bins: `M >= 2`, the number of bin centres.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`, in at least float32.

  >>> import jax.numpy as jnp
  >>> # Distances 0, 1, 1 of 2-bit codes, grades 2, 0, 1 (gains 3, 0, 1): DCG_T = 3 + (1/2)(1/log2 3
  >>> # + 1/log2 4) = 3.5655, ideal 3 + 1/log2 3 = 3.6309, NDCG_T = 0.9820.
  >>> d, labels = jnp.array([0.0, 1.0, 1.0]), jnp.array([2, 0, 1])
  >>> round(float(tie_aware_ndcg_loss(1 - 2 * d / 2, labels, num_bins=3)), 4)
  0.018
  """
  return _loss(
      "tie_aware_ndcg_loss", "ndcg", _tie_aware_dcg, scores, labels, where, num_bins, reduce_fn
  )


def simplified_tie_aware_ndcg_loss(
    scores: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike,
    *,
    where: jax.typing.ArrayLike | None = None,
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

  **Exactness and bound.** On hard histograms DCG_s equals DCG_T without ties and is below it with
  ties, so there this loss is an upper bound of `1 - jaxrank.tie_aware_ndcg_metric`. On soft
  histograms it is a relaxation, not a bound.

  **Degenerate lists.** A list whose ideal DCG is 0 gives 0 and is left out of the reduction;
  values and gradients are finite in every case.

  **Bins and Hamming distances.** `num_bins` centres `1, ..., -1` on the similarity axis, spacing
  `2 / (num_bins - 1)`, best first; scores beyond `[-1, 1]` are clipped to the end bins. For
  `b`-bit codes pass `scores = 1 - 2 d / b` (`d` from `relaxed_hamming_distance`) and
  `num_bins = b + 1`: the centres are then the integer distances `0..b` with width 1, the paper's
  bins (eq. 13-15). The default 20 is `soft_binning_ap_loss`'s.

  **Self-inclusion.** The list is taken as given. Through `jaxrank.batch_retrieval` the query is
  left out of its own list by default, as in the paper (each example "is retrieved against the rest
  of the minibatch", sec. 4.2) and its released code; `include_self=True` adds it.

  **Cost.** O(n) time and memory per list for the histograms (a scatter-add of two weights per
  item) and O(M) for the per-bin terms (`M = num_bins`); O(B n + B M) for `B` lists, never an
  `[..., n, M]` tensor. Through `batch_retrieval` add the `[B, B]` score matrix.
  NDCG adds the sort of the gains for the ideal DCG, O(n log n) per list.

  Args:
    scores: `[..., n]` floating similarities in `[-1, 1]`, higher is better.
    labels: `[..., n]` non-negative graded labels (gain `2**label - 1`).
    where: optional `[..., n]` boolean mask of valid items.
    num_bins: `M >= 2`, the number of bin centres.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`, in at least float32.

  >>> import jax.numpy as jnp
  >>> # As for tie_aware_ndcg_loss: DCG_s = 3 / log2(2) + 1 / log2(3.5) = 3.5533 <= DCG_T = 3.5655.
  >>> d, labels = jnp.array([0.0, 1.0, 1.0]), jnp.array([2, 0, 1])
  >>> round(float(simplified_tie_aware_ndcg_loss(1 - 2 * d / 2, labels, num_bins=3)), 4)
  0.0214
  """
  return _loss(
      "simplified_tie_aware_ndcg_loss",
      "ndcg",
      _simplified_tie_aware_dcg,
      scores,
      labels,
      where,
      num_bins,
      reduce_fn,
  )


# ---------------------------------------------------------------------------------------------
# Exact tie-aware metrics of integer Hamming distances, by counting.


def _check_distances(fn, distances, labels, where, num_bits):
  """Checked `(distances as floats, labels, where)`; raises for non-integer distances if it can."""
  checks.check_int_at_least(fn, "num_bits", num_bits, 1)
  distances = jnp.asarray(distances)
  if jnp.issubdtype(distances.dtype, jnp.integer):
    distances = distances.astype(jnp.result_type(float))
  elif not jnp.issubdtype(distances.dtype, jnp.floating):
    raise TypeError(
        f"{fn}: distances must be integer Hamming distances (an integer or floating array), got "
        f"dtype {distances.dtype}."
    )
  distances, labels, where = checks.check_lists(fn, distances, labels, where)
  labels = labels.astype(lists.compute_dtype(distances.dtype))
  bad = where & ~jnp.isnan(distances) & (
      (distances != jnp.round(distances)) | (distances < 0) | (distances > num_bits)
  )
  try:
    any_bad = bool(jnp.any(bad))
  except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError):
    any_bad = False  # Traced (under jit): not checked, see the docstrings.
  if any_bad:
    raise ValueError(
        f"{fn}: distances must be integers in [0, num_bits] = [0, {num_bits}] at valid items; "
        "for relaxed (real-valued) distances use the losses, e.g. tie_aware_ap_loss(1 - 2 * d / "
        "num_bits, ..., num_bins=num_bits + 1)."
    )
  return distances, labels, where


def hamming_tie_aware_ap_metric(
    distances: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike,
    *,
    num_bits: int,
    where: jax.typing.ArrayLike | None = None,
    reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Tie-aware AP of integer Hamming distances by counting (He et al. 2018, Prop. 1, eq. 6).

  The valid items of each list are counted into the `b + 1` distances `0..b` (a counting sort,
  smallest distance first), giving `n_d` items and `n^+_d` relevant ones at distance `d`, with
  cumulative counts `N_d`, `N^+_d`; each tie contributes

  .. math::
    \mathrm{AP}_T(R^{(d)}) = \frac{n^+_d}{n_d N^+} \sum_{t = N_{d-1}+1}^{N_d}
        \frac{N^+_{d-1} + 1 + (t - N_{d-1} - 1)\frac{n^+_d - 1}{n_d - 1}}{t}

  (eq. 6 with the summation range of its proof, eq. 19; the printed eq. 6 has `N^+` limits and
  `n^+_d - 1` twice, typos). The harmonic sums are evaluated in closed form, so this is the
  estimator of `tie_aware_ap_loss` on hard histograms. It equals `jaxrank.tie_aware_ap_metric(
  -distances, labels)`, which sorts instead.

  **Inputs.** Distances must be integers in `[0, num_bits]` at valid items (integer or floating
  dtype; NaN makes the list NaN). Called eagerly, other values raise `ValueError`; under `jit`
  they are not checked, and a non-integer distance is split between its two nearest integers as in
  the losses (the value is then the relaxation AP_r).

  Cost: O(n + b) time and O(n + b) memory per list (the paper's O(b n) bound), no sort.

  Args:
    distances: `[..., n]` integer Hamming distances, smaller is better (e.g.
      `relaxed_hamming_distance(binarize(q), binarize(db))`).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    num_bits: `b >= 1`, the code length.
    where: optional `[..., n]` boolean mask of valid items.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced AP_T, or `[...]` per list with `reduce_fn=None`, in at least float32. Lists without
    a relevant valid item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> round(float(hamming_tie_aware_ap_metric(jnp.array([1, 1]), jnp.array([1, 0]), num_bits=4)), 4)
  0.75
  """
  fn = "hamming_tie_aware_ap_metric"
  distances, labels, where = _check_distances(fn, distances, labels, where, num_bits)
  values, valid = histogram.binned_ap_estimates(
      distances,
      labels,
      where,
      estimator=_tie_aware_ap,
      to_values=histogram.identity,
      num_centres=num_bits + 1,
      first_centre=0.0,
      last_centre=float(num_bits),
  )
  return lists.safe_reduce(values, valid, reduce_fn)


def hamming_tie_aware_ndcg_metric(
    distances: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike,
    *,
    num_bits: int,
    where: jax.typing.ArrayLike | None = None,
    reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Tie-aware NDCG of integer Hamming distances by counting (He et al. 2018, Prop. 1, eq. 7).

  With the valid items counted into the distances `0..b`, `n_{d,v}` of relevance level `v` at
  distance `d`, each tie contributes its mean gain times the discounts of its positions

  .. math::
    \mathrm{DCG}_T(R^{(d)}) = \sum_v \frac{G(v)\, n_{d,v}}{n_d}
        \sum_{t = N_{d-1}+1}^{N_d} \frac{1}{\log_2(1 + t)}

  (the summation range of the proof, eq. 21-23; eq. 7 prints `N^+` limits), `G(v) = 2^v - 1`,
  normalised by the DCG of the ideal order. This is the estimator of `tie_aware_ndcg_loss` on hard
  histograms, and equals `jaxrank.tie_aware_ndcg_metric(-distances, labels)`. Inputs as for
  `hamming_tie_aware_ap_metric`.

  Cost: O(n + b) per list for the DCG, plus one sort of the gains for the ideal DCG
  (O(n log n); the paper's counting sort over the `|V|` levels needs integer labels).

  Args:
    distances: `[..., n]` integer Hamming distances, smaller is better.
    labels: `[..., n]` non-negative graded labels (gain `2**label - 1`).
    num_bits: `b >= 1`, the code length.
    where: optional `[..., n]` boolean mask of valid items.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced NDCG_T, or `[...]` per list, in at least float32. Lists whose ideal DCG is 0 give 0
    and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> # Two tied items of gains 0 and 1: the mean of NDCG 1 and 0.6309.
  >>> d, labels = jnp.array([2, 2]), jnp.array([0, 1])
  >>> round(float(hamming_tie_aware_ndcg_metric(d, labels, num_bits=4)), 4)
  0.8155
  """
  fn = "hamming_tie_aware_ndcg_metric"
  distances, labels, where = _check_distances(fn, distances, labels, where, num_bits)
  values, valid = _ndcg_values(
      distances,
      labels,
      where,
      estimator=_tie_aware_dcg,
      num_centres=num_bits + 1,
      first=0.0,
      last=float(num_bits),
  )
  return lists.safe_reduce(values, valid, reduce_fn)


# ---------------------------------------------------------------------------------------------
# Codes.


def relaxed_hamming_distance(
    codes_a: jax.typing.ArrayLike, codes_b: jax.typing.ArrayLike
) -> jax.Array:
  r"""Hamming distances `(b - \phi_i^\top \phi_j) / 2` between two sets of codes (eq. 1 and 10).

  For binary codes in `\{-1, 1\}^b` this is the Hamming distance, an integer in `0..b` (exact in
  float32 up to `b = 2^{24}`); for relaxed codes `\hat\phi = \tanh(\alpha f)` in `(-1, 1)^b` it is
  He et al.'s differentiable relaxation `\hat d_\Phi`. `1 - 2 d / b` is the similarity that the
  losses of this module bin, with `num_bins = b + 1`.

  **Self-inclusion.** Nothing is removed: with `codes_a = codes_b` the diagonal is each code's
  distance to itself (0 for binary codes, positive for relaxed ones). Mask it out of the lists, as
  the paper does, e.g. with the `where` of `jaxrank.batch_retrieval(codes, labels)`.

  Cost: one matrix product, O(Q N b) time and O(Q N) memory.

  Args:
    codes_a: `[..., Q, b]` codes (floating, or integer `\pm 1`).
    codes_b: `[..., N, b]` codes of the same length `b`.

  Returns:
    `[..., Q, N]` distances in at least float32.

  >>> import jax.numpy as jnp
  >>> a = jnp.array([[1.0, 1.0, -1.0]])
  >>> b = jnp.array([[1.0, 1.0, -1.0], [-1.0, 1.0, 1.0], [0.5, 0.0, -0.5]])
  >>> relaxed_hamming_distance(a, b).tolist()
  [[0.0, 2.0, 1.0]]
  """
  fn = "relaxed_hamming_distance"
  codes_a, codes_b = jnp.asarray(codes_a), jnp.asarray(codes_b)
  for name, codes in (("codes_a", codes_a), ("codes_b", codes_b)):
    if not (jnp.issubdtype(codes.dtype, jnp.floating) or jnp.issubdtype(codes.dtype, jnp.integer)):
      raise TypeError(f"{fn}: {name} must be a numeric array of codes, got dtype {codes.dtype}.")
    if codes.ndim < 2:
      raise ValueError(f"{fn}: {name} must be [..., count, b] codes, got shape {codes.shape}.")
  if codes_a.shape[-1] != codes_b.shape[-1]:
    raise ValueError(
        f"{fn}: codes have different lengths: codes_a {codes_a.shape} and codes_b "
        f"{codes_b.shape} (the last axis is the number of bits b)."
    )
  dtype = lists.compute_dtype(jnp.result_type(codes_a, codes_b))
  if not jnp.issubdtype(dtype, jnp.floating):
    dtype = jnp.result_type(float)
  dots = jnp.matmul(
      codes_a.astype(dtype), jnp.swapaxes(codes_b, -1, -2).astype(dtype),
      preferred_element_type=dtype,
  )
  return (codes_a.shape[-1] - dots) / 2


def binarize(codes: jax.typing.ArrayLike) -> jax.Array:
  """The binary code `sgn(codes)` in `{-1, 1}` (eq. 9), with `sgn(0) = +1`, for evaluation.

  Ties of the sign at exactly 0 (a unit at its threshold) go to `+1`, so every bit is defined and
  Hamming distances are integers; NaN gives `-1`. The gradient is zero (use the `tanh` relaxation,
  eq. 10, to train).

  Args:
    codes: `[..., b]` real-valued codes or logits (floating or integer).

  Returns:
    `[..., b]` codes of `\\pm 1` in the dtype of `codes`.

  >>> import jax.numpy as jnp
  >>> binarize(jnp.array([0.3, -2.0, 0.0, -0.0])).tolist()
  [1.0, -1.0, 1.0, 1.0]
  """
  codes = jnp.asarray(codes)
  if not (jnp.issubdtype(codes.dtype, jnp.floating) or jnp.issubdtype(codes.dtype, jnp.integer)):
    raise TypeError(f"binarize: codes must be a numeric array, got dtype {codes.dtype}.")
  one = jnp.ones((), codes.dtype)
  return jax.lax.stop_gradient(jnp.where(codes >= 0, one, -one))


def tanh_scale(
    step: jax.typing.ArrayLike,
    *,
    initial: float = 1.0,
    growth: float = 2.0,
    every: int,
) -> jax.Array:
  r"""The scale `\alpha` of the relaxed codes `\tanh(\alpha f)` at a step: grown in stages.

  .. math::
    \alpha(\mathrm{step}) = \alpha_0 \cdot \mathrm{growth}^{\lfloor \mathrm{step} /
        \mathrm{every} \rfloor}

  He et al. 2018, App. D, tighten the relaxation of eq. 10 by increasing `\alpha` during training
  ("`\alpha \to \infty`", against a fixed `\alpha = 40`) but give no schedule. This is the one of
  their released code (`gamma = [initial every growth]`, "e.g. [1 10 2]: initial gamma=1, x2 every
  10 epochs"; `gamma(3)` defaults to 2), a pure function of `step` (epochs there; steps or epochs
  here, as `every` is counted). Their code writes the relaxation as `2 sigmoid(gamma f) - 1 =
  tanh(gamma f / 2)`, so their `gamma` is `2 \alpha`. The growth is unbounded: in float32 `\alpha`
  overflows after about 128 stages of doubling (cap it with `jnp.minimum` if training runs longer).

  Args:
    step: the current step or epoch, an integer `>= 0` (Python int or array, traceable).
    initial: `\alpha_0 > 0`, the scale at step 0.
    growth: the factor `>= 1` applied every `every` steps (2 in the released code).
    every: the number of steps per stage, a positive int.

  Returns:
    The scale, a scalar (or `step`'s shape) in the default floating dtype.

  >>> [float(tanh_scale(s, every=10)) for s in (0, 9, 10, 25)]
  [1.0, 1.0, 2.0, 4.0]
  """
  fn = "tanh_scale"
  checks.check_positive_int(fn, "every", every)
  checks.check_real(fn, "initial", initial, above=0.0)
  checks.check_real(fn, "growth", growth, at_least=1.0)
  step = jnp.asarray(step)
  if not (jnp.issubdtype(step.dtype, jnp.integer) or jnp.issubdtype(step.dtype, jnp.floating)):
    raise TypeError(f"{fn}: step must be a number of steps, got dtype {step.dtype}.")
  dtype = jnp.result_type(float)
  stage = jnp.floor(step.astype(dtype) / every)
  return jnp.asarray(initial, dtype) * jnp.power(jnp.asarray(growth, dtype), stage)
