"""Plain-numpy, loop-based references for the tie-aware and Hamming functions
(`_src/tie_aware.py`, `_src/hamming.py`), written from the papers, in float64.

He et al. 2018, "Hashing as Tie-Aware Learning to Rank" (`003_*.txt`):

* soft histograms on bin centres (eq. 14-15): `reference_histogram.histograms`, with the
  similarity centres `1, ..., -1` (num_bins of them) or the Hamming distances `0..b`;
* AP_T per tie (eq. 6, with the range of its proof, eq. 19) and DCG_T (eq. 7 / eq. 21-23) by
  explicit sums over positions, for integer counts;
* AP_r (eq. 26, the harmonic sum continued with scipy's digamma, `H(x) = psi(x + 1) + gamma`) and
  DCG_r (eq. 7 with the discount partial sums continued as `D(x) = sum_t [d(t) - d(t + x)]`,
  summed by brute force plus an integral for the tail), jaxrank's reading of Prop. 2;
* the printed eq. 11 and eq. 12 (`ln` and the logarithmic integral), to document where they fail;
* AP_s (eq. 62) and DCG_s (eq. 66);
* Revaud et al. 2019's mAP_T (`002_*.txt`, eq. 13) with their quantization `delta(S, m)` (eq. 7);
* the code helpers: Hamming distance (eq. 1) bit by bit, and the tanh scale schedule of the
  released code (`+demo/AP.m`: multiply gamma by gamma(3) after every gamma(2) epochs).

Conventions (jaxrank's, spelled out independently): masked items are removed first; scores beyond
the centres are clipped to the end ones; a list without a relevant valid item (NDCG: ideal DCG 0)
has value 0 and is left out of the mean; a valid NaN makes the list NaN. One list is 1-D `scores`,
`labels`, optional boolean `where`; `reference.per_list` maps a function over `[..., n]` arrays.
"""

from __future__ import annotations

import math

import numpy as np
import reference_histogram as rh
from scipy import integrate
from scipy import special

LN2 = math.log(2.0)


def _items(scores, labels, where=None):
  scores = np.asarray(scores, np.float64)
  labels = np.asarray(labels, np.float64)
  where = np.ones(scores.shape, bool) if where is None else np.broadcast_to(where, scores.shape)
  return [(float(scores[i]), float(labels[i])) for i in range(len(scores)) if where[i]]


def similarity_centres(num_bins: int):
  """The centres 1, ..., -1 (best first) and their spacing."""
  delta = 2.0 / (num_bins - 1)
  return [1.0 - m * delta for m in range(num_bins)], delta


def binned(scores, labels, where=None, *, num_bins=None, num_bits=None, weight):
  """Per-bin (weighted, total) soft counts, best bin first, of the valid items.

  With `num_bins`, `scores` are similarities on the centres 1, ..., -1; with `num_bits`, they are
  Hamming distances on the centres 0, 1, ..., b of width 1 (eq. 14-15). `weight(label)` is the
  item's weight in the first histogram (1[relevant], or its gain).
  """
  items = _items(scores, labels, where)
  if num_bits is not None:
    centres, delta = [float(d) for d in range(num_bits + 1)], 1.0
  else:
    centres, delta = similarity_centres(num_bins)
  return rh.histograms([s for s, _ in items], [weight(y) for _, y in items], centres, delta)


# Sums over the positions of a tie, continued to real counts.


def harmonic(x: float) -> float:
  """H(x) = psi(x + 1) + Euler's gamma: sum_{t=1}^{x} 1/t at integers."""
  return float(special.digamma(x + 1.0) + np.euler_gamma)


def discount(t: float) -> float:
  return 1.0 / math.log2(1.0 + t)


def discount_sum(a: float, b: float, *, terms: int = 100_000) -> float:
  """D(b) - D(a) for D(x) = sum_{t>=1} [d(t) - d(t + x)], by brute force.

  The first `terms` terms of sum_t [d(t + a) - d(t + b)] (each difference in a stable form), then
  the tail sum_{t > T} by its integral over [T + 1/2 + a, T + 1/2 + b] (the midpoint rule, whose
  error ~ d''/24 is below 1e-20 there).
  """
  t = np.arange(1, terms + 1, dtype=np.float64)
  la, lb = np.log1p(t + a), np.log1p(t + b)
  head = np.sum(LN2 * np.log1p((b - a) / (1 + t + a)) / (la * lb))
  # Integrate over the offset (not between the rounded end points, whose difference would lose
  # the width's last digits at this magnitude).
  start = terms + 0.5 + a
  tail, _ = integrate.quad(
    lambda s: discount(start + s), 0.0, b - a, epsabs=0.0, epsrel=1e-13, limit=200
  )
  return float(head + tail)


# Per-bin terms. p, n: relevant and all items in the bin; big_p, big_n: before the bin.


def ap_t_term(p: int, n: int, big_p: int, big_n: int, num_relevant: int) -> float:
  """eq. 6 (range of eq. 19), integer counts: explicit sum over the tie's positions."""
  if p == 0:
    return 0.0
  slope = (p - 1) / (n - 1) if n > 1 else 0.0
  total = 0.0
  for t in range(big_n + 1, big_n + n + 1):
    total += (big_p + 1 + (t - big_n - 1) * slope) / t
  return p / (n * num_relevant) * total


def ap_r_term(p, n, big_p, big_n, num_relevant) -> float:
  """eq. 26 with H continued: (p/(n N+)) [(P+1) dH + A (n - (N+1) dH)], A = (p-1)/(n-1).

  At n = 1, A (n - (N+1) dH) is 0/0, and near it the difference cancels: with
  f(n) = n - (N+1) (H(N+n) - H(N)), f(1) = 0, so within 1e-4 of n = 1 the term is the Taylor
  series (p - 1) (f1 + f2 e / 2 + f3 e^2 / 6), e = n - 1, of the derivatives at n = 1:
  f1 = 1 - (N+1) psi_1(N+2), fk = -(N+1) psi_{k-1}(N+2) for k = 2, 3 (error O(e^3), below float64
  rounding; the direct formula would lose digits to cancellation there).
  """
  if n == 0:
    return 0.0
  d_h = harmonic(big_n + n) - harmonic(big_n)
  e = n - 1
  if abs(e) < 1e-4:
    at = big_n + 2
    f1 = 1 - (big_n + 1) * float(special.polygamma(1, at))
    f2 = -(big_n + 1) * float(special.polygamma(2, at))
    f3 = -(big_n + 1) * float(special.polygamma(3, at))
    slope_term = (p - 1) * (f1 + f2 * e / 2 + f3 * e * e / 6)
  else:
    slope_term = (p - 1) / (n - 1) * (n - (big_n + 1) * d_h)
  return p / (n * num_relevant) * ((big_p + 1) * d_h + slope_term)


def paper_ap_r_term(p, n, big_p, big_n, num_relevant) -> float:
  """eq. 11 as printed: ln(C_d / C_{d-1}), infinite when C_{d-1} = 0, 0/0 when c_d = 1."""
  if n == 0:
    return 0.0
  log_ratio = math.inf if big_n == 0 else math.log((big_n + n) / big_n)
  slope = (p - 1) / (n - 1)
  return (
    p * (p - 1) / (num_relevant * (n - 1))
    + p / (n * num_relevant) * (big_p + 1 - slope * (big_n + 1)) * log_ratio
  )


def ap_s_term(p, n, big_p, big_n, num_relevant) -> float:
  """eq. 62: (c+_d / N+) (C+_{d-1} + C+_d + 1) / (C_{d-1} + C_d + 1)."""
  return p / num_relevant * (big_p + (big_p + p) + 1) / (big_n + (big_n + n) + 1)


def _sum_over_bins(term, h_pos, h, num_relevant) -> float:
  total, big_p, big_n = 0.0, 0.0, 0.0
  for p, n in zip(h_pos, h):
    total += term(p, n, big_p, big_n, num_relevant)
    big_p += p
    big_n += n
  return total


def _ap_estimate(term, scores, labels, where=None, *, num_bins=20, num_bits=None) -> float:
  items = _items(scores, labels, where)
  num_relevant = sum(1 for _, y in items if y >= 1)
  if num_relevant == 0:
    return 0.0
  if any(math.isnan(s) for s, _ in items):
    return math.nan
  h_pos, h = binned(
    scores, labels, where, num_bins=num_bins, num_bits=num_bits, weight=lambda y: float(y >= 1)
  )
  return _sum_over_bins(term, h_pos, h, num_relevant)


def ap_r(scores, labels, where=None, **bins) -> float:
  return _ap_estimate(ap_r_term, scores, labels, where, **bins)


def ap_s(scores, labels, where=None, **bins) -> float:
  return _ap_estimate(ap_s_term, scores, labels, where, **bins)


def paper_ap_r(scores, labels, where=None, **bins) -> float:
  return _ap_estimate(paper_ap_r_term, scores, labels, where, **bins)


def map_t(scores, labels, where=None, *, num_bins=20) -> float:
  """Revaud et al. eq. 13 (precision) with eq. 10-11 (recall steps, AP), as they write it."""
  items = _items(scores, labels, where)
  num_relevant = sum(1 for _, y in items if y >= 1)
  if num_relevant == 0:
    return 0.0
  centres, delta = similarity_centres(num_bins)
  x = [min(max(s, -1.0), 1.0) for s, _ in items]
  y = [1.0 if label >= 1 else 0.0 for _, label in items]

  def quantized(m):  # delta(S, m), a vector over the items (eq. 7).
    return [rh.triangle(xi, centres[m], delta) for xi in x]

  ap = 0.0
  for m in range(num_bins):
    q = quantized(m)
    before = [quantized(k) for k in range(m)]
    numerator = (
      1
      + sum(a * b for a, b in zip(q, y))
      + 2 * sum(sum(a * b for a, b in zip(qk, y)) for qk in before)
    )
    denominator = 1 + sum(q) + 2 * sum(sum(qk) for qk in before)
    recall_step = sum(a * b for a, b in zip(q, y)) / num_relevant
    ap += numerator / denominator * recall_step
  return ap


def _loss(estimate):
  def loss(scores, labels, where=None, **kwargs) -> float:
    items = _items(scores, labels, where)
    if not any(y >= 1 for _, y in items):
      return 0.0
    return 1.0 - estimate(scores, labels, where, **kwargs)

  return loss


tie_aware_ap_loss = _loss(ap_r)
simplified_tie_aware_ap_loss = _loss(ap_s)


# NDCG.


def gain(label: float) -> float:
  return 2.0**label - 1.0


def ideal_dcg(labels_of_valid) -> float:
  gains = sorted((gain(y) for y in labels_of_valid), reverse=True)
  return sum(g * discount(t) for t, g in enumerate(gains, start=1))


def dcg_r_term(g, n, big_n) -> float:
  """eq. 7 with the discount sum continued: (g_d / c_d) (D(C_d) - D(C_{d-1}))."""
  if n == 0:
    return 0.0
  return g / n * discount_sum(big_n, big_n + n)


def dcg_t_term(g, n, big_n) -> float:
  """eq. 7, integer counts: the mean gain times the discounts of the positions."""
  if n == 0:
    return 0.0
  return g / n * sum(discount(t) for t in range(int(big_n) + 1, int(big_n + n) + 1))


def paper_dcg_r_term(g, n, big_n) -> float:
  """eq. 12 as printed: ln 2 (li(C_d + 1) - li(C_{d-1} + 1)); li(1) = -inf."""
  if n == 0:
    return 0.0
  if big_n == 0:
    return math.inf
  li = lambda x: float(special.expi(math.log(x)))
  return LN2 * g / n * (li(big_n + n + 1) - li(big_n + 1))


def dcg_s_term(g, n, big_n) -> float:
  """eq. 66: g_d / log2(C_{d-1} + c_d / 2 + 3/2)."""
  return g / math.log2(big_n + n / 2 + 1.5)


def _ndcg_estimate(term, scores, labels, where=None, *, num_bins=20, num_bits=None) -> float:
  items = _items(scores, labels, where)
  ideal = ideal_dcg([y for _, y in items])
  if ideal <= 0:
    return 0.0
  if any(math.isnan(s) for s, _ in items):
    return math.nan
  g, h = binned(scores, labels, where, num_bins=num_bins, num_bits=num_bits, weight=gain)
  total, big_n = 0.0, 0.0
  for gd, n in zip(g, h):
    total += term(gd, n, big_n)
    big_n += n
  return total / ideal


def ndcg_r(scores, labels, where=None, **bins) -> float:
  return _ndcg_estimate(dcg_r_term, scores, labels, where, **bins)


def ndcg_s(scores, labels, where=None, **bins) -> float:
  return _ndcg_estimate(dcg_s_term, scores, labels, where, **bins)


def _ndcg_loss(estimate):
  def loss(scores, labels, where=None, **kwargs) -> float:
    items = _items(scores, labels, where)
    if ideal_dcg([y for _, y in items]) <= 0:
      return 0.0
    return 1.0 - estimate(scores, labels, where, **kwargs)

  return loss


tie_aware_ndcg_loss = _ndcg_loss(ndcg_r)
simplified_tie_aware_ndcg_loss = _ndcg_loss(ndcg_s)


# Exact tie-aware metrics of integer distances, by counting (Prop. 1).


def hamming_counts(distances, labels, where=None, *, num_bits, weight):
  """Counting sort: per distance 0..b, (sum of weights, number of items) of the valid items."""
  weighted = [0.0] * (num_bits + 1)
  counts = [0] * (num_bits + 1)
  for d, y in _items(distances, labels, where):
    weighted[int(d)] += weight(y)
    counts[int(d)] += 1
  return weighted, counts


def hamming_ap_t(distances, labels, where=None, *, num_bits) -> float:
  items = _items(distances, labels, where)
  num_relevant = sum(1 for _, y in items if y >= 1)
  if num_relevant == 0:
    return 0.0
  h_pos, h = hamming_counts(
    distances, labels, where, num_bits=num_bits, weight=lambda y: float(y >= 1)
  )
  return _sum_over_bins(
    lambda p, n, bp, bn, r: ap_t_term(int(p), n, int(bp), int(bn), r), h_pos, h, num_relevant
  )


def hamming_ndcg_t(distances, labels, where=None, *, num_bits) -> float:
  items = _items(distances, labels, where)
  ideal = ideal_dcg([y for _, y in items])
  if ideal <= 0:
    return 0.0
  g, h = hamming_counts(distances, labels, where, num_bits=num_bits, weight=gain)
  total, big_n = 0.0, 0
  for gd, n in zip(g, h):
    total += dcg_t_term(gd, n, big_n)
    big_n += n
  return total / ideal


# Codes.


def hamming_distance(code_a, code_b) -> float:
  """eq. 1, (b - phi_a . phi_b) / 2, as a loop over the bits."""
  return (len(code_a) - sum(float(a) * float(b) for a, b in zip(code_a, code_b))) / 2


def released_code_scales(num_epochs: int, *, initial: float, growth: float, every: int):
  """The scale used during each epoch by the released code's epoch callback (+demo/AP.m).

  After epoch e (1-based) with e % every == 0 the scale is multiplied by `growth`, so epoch e + 1
  uses the new one; returned as the scale of epochs 0, 1, ... (0-based).
  """
  scale, scales = initial, []
  for epoch in range(1, num_epochs + 1):
    scales.append(scale)
    if epoch % every == 0:
      scale *= growth
  return scales
