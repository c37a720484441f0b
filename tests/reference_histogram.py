"""Plain-numpy, loop-based references for jaxrank.histogram, written from the papers, in float64.

* FastAP: Cakir et al. 2019, eq. 14 with the soft binning of eq. 22-23 on squared distances
  `d = 2 - 2 s` in [0, 4], with the released code's bins: L intervals, L + 1 centres `4 j / L`,
  width `4 / L`. Its analytic gradient: App. C, eq. 33-46.
* AP_Q and mAP_Q: Revaud et al. 2019, eq. 5-12, with M centres `b_m = 1 - (m - 1) Delta`,
  `Delta = 2 / (M - 1)` on [-1, 1] and the triangular kernel of eq. 7; the class weights of
  sec. 4.2.

Shared conventions (jaxrank's decisions, spelled out here independently): masked items are removed
first; values beyond the end centres are clipped to them; a bin whose cumulative count is 0 adds
nothing; a list without a relevant valid item has value 0 and is left out of the mean; a valid NaN
score makes the list NaN. One list is a 1-D `scores[n]`, `labels[n]` (relevant iff `>= 1`) and an
optional boolean `where[n]`; use `reference.per_list` for `[..., n]` arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def _items(scores, labels, where=None) -> list[tuple[float, bool]]:
  """(score, relevant) of each valid item."""
  scores = np.asarray(scores, dtype=np.float64)
  labels = np.asarray(labels, dtype=np.float64)
  where = np.ones(scores.shape, bool) if where is None else np.asarray(where, bool)
  where = np.broadcast_to(where, scores.shape)
  return [(float(scores[i]), bool(labels[i] >= 1)) for i in range(len(scores)) if where[i]]


def triangle(z: float, centre: float, width: float) -> float:
  """The triangular kernel: Cakir et al. eq. 23, Revaud et al. eq. 7."""
  return max(0.0, 1.0 - abs(z - centre) / width)


def triangle_derivative(z: float, centre: float, width: float) -> float:
  """d triangle / dz away from the kinks (Revaud et al. eq. 8)."""
  if abs(z - centre) >= width:
    return 0.0
  return -math.copysign(1.0, z - centre) / width


def fastap_centres(num_intervals: int) -> tuple[list[float], float]:
  """The released code's L + 1 centres on [0, 4] and their width 4 / L."""
  return [4.0 * j / num_intervals for j in range(num_intervals + 1)], 4.0 / num_intervals


def histograms(values: Sequence[float], relevant: Sequence[float], centres, width):
  """h and h+ by eq. 22 (values clipped to the centres' range); lists of floats."""
  low, high = min(centres), max(centres)
  h = [0.0] * len(centres)
  h_pos = [0.0] * len(centres)
  for v, r in zip(values, relevant):
    v = min(max(v, low), high)
    for j, c in enumerate(centres):
      w = triangle(v, c, width)
      h[j] += w
      h_pos[j] += r * w
  return h_pos, h


def fastap(scores, labels, where=None, *, num_intervals: int = 10) -> float:
  """FastAP of one list, eq. 14: (1 / N+) sum_j H+_j h+_j / H_j over bins of increasing distance."""
  items = _items(scores, labels, where)
  num_relevant = sum(1 for _, r in items if r)
  if num_relevant == 0:
    return 0.0
  if any(math.isnan(s) for s, _ in items):
    return math.nan
  centres, width = fastap_centres(num_intervals)
  distances = [2.0 - 2.0 * s for s, _ in items]
  h_pos, h = histograms(distances, [float(r) for _, r in items], centres, width)
  total = 0.0
  cum, cum_pos = 0.0, 0.0
  for j in range(len(centres)):
    cum += h[j]
    cum_pos += h_pos[j]
    if cum > 0:
      total += cum_pos * h_pos[j] / cum
  return total / num_relevant


def ap_q(scores, labels, where=None, *, num_bins: int = 20, low=-1.0, high=1.0) -> float:
  """AP_Q of one list, Revaud et al. eq. 9-11, with M = num_bins centres on [low, high].

  The paper's bins span [-1, 1]; other ranges place the M centres uniformly from `high` (bin 1,
  the best) down to `low`, as the released code's `APLoss(nq, min, max)` does.
  """
  items = _items(scores, labels, where)
  num_relevant = sum(1 for _, r in items if r)
  if num_relevant == 0:
    return 0.0
  if any(math.isnan(s) for s, _ in items):
    return math.nan
  m_bins = num_bins
  delta = (high - low) / (m_bins - 1)
  centres = [high - (m - 1) * delta for m in range(1, m_bins + 1)]  # b_m, best first.
  x = [min(max(s, low), high) for s, _ in items]
  y = [1.0 if r else 0.0 for _, r in items]

  def quantized(m):  # delta(S, m) as a vector over the items.
    return [triangle(xi, centres[m], delta) for xi in x]

  ap = 0.0
  for m in range(m_bins):
    numerator = sum(sum(q * yi for q, yi in zip(quantized(k), y)) for k in range(m + 1))  # eq. 9
    denominator = sum(sum(quantized(k)) for k in range(m + 1))
    precision = numerator / denominator if denominator > 0 else 0.0
    recall_step = sum(q * yi for q, yi in zip(quantized(m), y)) / num_relevant  # eq. 10
    ap += precision * recall_step  # eq. 11
  return ap


def fastap_loss(scores, labels, where=None, *, num_intervals: int = 10) -> float:
  """1 - FastAP of one list; 0 for a list without a relevant valid item."""
  items = _items(scores, labels, where)
  if not any(r for _, r in items):
    return 0.0
  return 1.0 - fastap(scores, labels, where, num_intervals=num_intervals)


def soft_binning_ap_loss(scores, labels, where=None, *, num_bins: int = 20) -> float:
  """1 - AP_Q of one list; 0 for a list without a relevant valid item."""
  items = _items(scores, labels, where)
  if not any(r for _, r in items):
    return 0.0
  return 1.0 - ap_q(scores, labels, where, num_bins=num_bins)


def weighted_mean_over_lists(values, defined, weights) -> float:
  """sum(w * v) / sum(w) over the lists where `defined` holds; 0 when the weights sum to 0."""
  defined = np.asarray(defined, bool)
  weights = np.broadcast_to(np.asarray(weights, np.float64), defined.shape).reshape(-1)
  values = np.asarray(values, np.float64).reshape(-1)
  defined = defined.reshape(-1)
  num = math.fsum(float(w * v) for v, d, w in zip(values, defined, weights) if d)
  den = math.fsum(float(w) for d, w in zip(defined, weights) if d)
  return num / den if den != 0 else 0.0


def class_balancing_weights(labels, where=None) -> np.ndarray:
  """Weights giving each class (among the valid queries) the same total, with mean 1."""
  labels = [int(y) for y in np.asarray(labels).reshape(-1)]
  where = [True] * len(labels) if where is None else [bool(w) for w in np.asarray(where)]
  counts: dict[int, int] = {}
  for y, w in zip(labels, where):
    if w:
      counts[y] = counts.get(y, 0) + 1
  num_valid = sum(where)
  out = np.zeros(len(labels))
  for i, (y, w) in enumerate(zip(labels, where)):
    if w:
      out[i] = num_valid / (len(counts) * counts[y])
  return out


def split_rank_ap(scores, labels, *, num_bins: int) -> float:
  """The limit of AP_Q when every item has its two bins to itself, in closed form.

  An item at position `t` (in bins, best first) with `P` relevant and `N` items strictly above it
  puts `1 - f` in bin `floor(t)` and `f = t - floor(t)` in the next, alone; if relevant it adds
  `(1 - f) (P + 1 - f) / (N + 1 - f) + f (P + 1) / (N + 1)` to `N+ AP_Q`.
  """
  items = sorted(_items(scores, labels), key=lambda item: -item[0])
  num_relevant = sum(1 for _, r in items if r)
  total = 0.0
  for n_above, (s, r) in enumerate(items):
    if not r:
      continue
    p_above = sum(1 for _, q in items[:n_above] if q)
    t = (1.0 - s) * (num_bins - 1) / 2.0
    f = t - math.floor(t)
    total += (1 - f) * (p_above + 1 - f) / (n_above + 1 - f) + f * (p_above + 1) / (n_above + 1)
  return total / num_relevant


def split_rank_bound(scores, labels) -> float:
  """(1 / (4 N+)) sum over relevant items of 1 / rank: the most splitting can lower AP."""
  items = sorted(_items(scores, labels), key=lambda item: -item[0])
  num_relevant = sum(1 for _, r in items if r)
  return sum(1.0 / (4 * rank) for rank, (_, r) in enumerate(items, 1) if r) / num_relevant


# The analytic gradient of FastAP, Cakir et al. 2019, App. C.


def _fastap_histogram_gradients(h_pos, h_neg, num_relevant):
  """Columns of F+ and F- (eq. 35-46) for one query: dFastAP_i / dh+_l and dFastAP_i / dh-_l.

  eq. 43-46: F+ = g+ + U f+ with g+_j = dFastAP_{i,j} / dh+_j, and f+_j = H-_j h+_j / H_j^2 / N+
  (eq. 42) the derivative with respect to any earlier bin. The paper derives F- "by symmetry"
  without stating it; differentiating eq. 37 with respect to h-_l, which enters H_j for every
  j >= l and nothing else, gives g-_j = f-_j = -H+_j h+_j / H_j^2 / N+.
  """
  num = len(h_pos)
  cum_pos = np.cumsum(h_pos)
  cum_neg = np.cumsum(h_neg)
  cum = cum_pos + cum_neg
  g_pos, f_pos, g_neg, f_neg = (np.zeros(num) for _ in range(4))
  for j in range(num):
    if cum[j] <= 0:
      continue
    # d/dh+_j of H+_j h+_j / H_j, where H+_j and H_j both contain h+_j (eq. 15-16).
    g_pos[j] = (cum_pos[j] * cum[j] + cum_neg[j] * h_pos[j]) / cum[j] ** 2 / num_relevant
    f_pos[j] = cum_neg[j] * h_pos[j] / cum[j] ** 2 / num_relevant  # eq. 42
    g_neg[j] = f_neg[j] = -cum_pos[j] * h_pos[j] / cum[j] ** 2 / num_relevant
  upper = np.triu(np.ones((num, num)), k=1)  # U_ij = 1[i < j]
  return g_pos + upper @ f_pos, g_neg + upper @ f_neg  # eq. 45


def fastap_gradient(scores, labels, where=None, *, num_intervals: int = 10) -> np.ndarray:
  """dFastAP / dscores `[n]` of one list (0 at masked items), from App. C and d = 2 - 2 s.

  dFastAP/dd_x = sum_l F_l dδ(d_x, c_l)/dz (the per-query version of eq. 26 and 30-31), with F+ for
  relevant items and F- for the others; then dd/ds = -2. Scores must avoid bin centres.
  """
  scores = np.asarray(scores, np.float64)
  labels = np.asarray(labels, np.float64)
  where = np.ones(scores.shape, bool) if where is None else np.broadcast_to(where, scores.shape)
  valid = [i for i in range(len(scores)) if where[i]]
  relevant = {i: bool(labels[i] >= 1) for i in valid}
  num_relevant = sum(relevant.values())
  out = np.zeros(len(scores))
  if num_relevant == 0:
    return out
  centres, width = fastap_centres(num_intervals)
  d = {i: 2.0 - 2.0 * scores[i] for i in valid}
  h_pos = np.zeros(len(centres))
  h_neg = np.zeros(len(centres))
  for i in valid:
    for j, c in enumerate(centres):
      (h_pos if relevant[i] else h_neg)[j] += triangle(d[i], c, width)
  f_pos, f_neg = _fastap_histogram_gradients(h_pos, h_neg, num_relevant)
  for i in valid:
    f = f_pos if relevant[i] else f_neg
    grad_d = sum(f[j] * triangle_derivative(d[i], c, width) for j, c in enumerate(centres))
    out[i] = -2.0 * grad_d
  return out


def fastap_batch_gradient(embeddings, labels, *, num_intervals: int = 10) -> np.ndarray:
  """dFastAP_B / dPsi `[M, m]` of unit embeddings `[M, m]` by eq. 33 (each query its own list).

  FastAP_B is the mean over the M queries (eq. 25), each retrieving the rest of the batch, with
  `d_ij = 2 - 2 Psi_i . Psi_j` (so dd/dPsi_i = -2 Psi_j, eq. 19). Every query needs a neighbour.
  """
  psi = np.asarray(embeddings, np.float64)
  labels = np.asarray(labels)
  size = psi.shape[0]
  centres, width = fastap_centres(num_intervals)
  d = 2.0 - 2.0 * psi @ psi.T
  neighbour = (labels[:, None] == labels[None, :]) & ~np.eye(size, dtype=bool)
  other = labels[:, None] != labels[None, :]
  f_pos = np.zeros((len(centres), size))  # eq. 35: the L x M matrix F+, column i for query i.
  f_neg = np.zeros((len(centres), size))
  for i in range(size):
    h_pos = np.zeros(len(centres))
    h_neg = np.zeros(len(centres))
    for j in range(size):
      for l, c in enumerate(centres):  # noqa: E741  (the paper's bin index, App. C)
        if neighbour[i, j]:
          h_pos[l] += triangle(d[i, j], c, width)
        elif other[i, j]:
          h_neg[l] += triangle(d[i, j], c, width)
    f_pos[:, i], f_neg[:, i] = _fastap_histogram_gradients(h_pos, h_neg, neighbour[i].sum())
  total = np.zeros((size, size))
  for l, c in enumerate(centres):  # noqa: E741  (the paper's bin index, App. C)
    slope = np.vectorize(lambda z, c=c: triangle_derivative(z, c, width))(d)
    b_pos = neighbour * slope  # eq. 30
    b_neg = other * slope  # eq. 31
    big_f_pos, big_f_neg = np.diag(f_pos[l]), np.diag(f_neg[l])  # eq. 34
    total += big_f_pos @ b_pos + b_pos @ big_f_pos + big_f_neg @ b_neg + b_neg @ big_f_neg
  # eq. 33 with Psi_B = psi.T (columns are embeddings); returned as rows.
  return (-2.0 / size * psi.T @ total).T
