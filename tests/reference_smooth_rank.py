"""Plain-numpy, loop-based float64 references for `jaxrank.smooth_rank`, written from the equations.

Ramzi et al. 2021 (ROADMAP): eq. 3 (ranks as sums of steps), eq. 4 (SupAP's `H^-`), eq. 5
(SupAP), eq. 7 (calibration), eq. 2 (ROADMAP), eq. 6 (decomposability gap); Brown et al. 2020
(SmoothAP, the sigmoid everywhere).

Conventions, as in `reference.py`: one list is `scores[n]`, `labels[n]` and an optional boolean
`where[n]`; masked items are removed first; an item is relevant iff its label is `>= 1`; a list
without a relevant valid item has value 0 (and is excluded from means over lists, see
`reference.has_relevant` and `reference.mean_over_lists`). Every function returns a Python float;
`reference.per_list` maps one over leading axes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import reference


def _items(scores, labels, where):
  """The valid items as `(score, relevant)` pairs (NaN scores kept)."""
  return [(s, y >= 1) for s, y in reference.valid_items(scores, labels, where)]


def heaviside(t: float) -> float:
  """Eq. 3: 1 if t >= 0 else 0."""
  return 1.0 if t >= 0 else 0.0


def sigmoid(t: float) -> float:
  if t >= 0:
    return 1.0 / (1.0 + math.exp(-t))
  e = math.exp(t)
  return e / (1.0 + e)


def supap_negative_step(t: float, temperature: float, rho: float, delta: float) -> float:
  """Eq. 4, with t = 0 in its second case (so that H^-(0) = 1 >= H(0)); continuous at delta."""
  if t < 0:
    return sigmoid(t / temperature)
  if t <= delta:
    return sigmoid(t / temperature) + 0.5
  return rho * (t - delta) + sigmoid(delta / temperature) + 0.5


def smooth_rank_ap(
  scores, labels, where=None, *, h_pos: Callable[[float], float], h_neg: Callable[[float], float]
) -> float:
  """(1/|P|) sum_k rank+(k) / (rank+(k) + rank-(k)) with the given steps (eq. 3 and 5)."""
  items = _items(scores, labels, where)
  positives = [k for k, (_, rel) in enumerate(items) if rel]
  if not positives:
    return 0.0
  total = 0.0
  for k in positives:
    s_k = items[k][0]
    rank_pos = 1.0
    rank_neg = 0.0
    for j, (s_j, rel_j) in enumerate(items):
      if j == k:
        continue
      if rel_j:
        rank_pos += h_pos(s_j - s_k)
      else:
        rank_neg += h_neg(s_j - s_k)
    total += rank_pos / (rank_pos + rank_neg)
  return total / len(positives)


def smoothap_loss(scores, labels, where=None, *, temperature: float = 0.01) -> float:
  """Brown et al. 2020: 1 - AP with sigmoid(t / temperature) for every step."""
  if not any(rel for _, rel in _items(scores, labels, where)):
    return 0.0
  step = lambda t: sigmoid(t / temperature)  # noqa: E731
  return 1.0 - smooth_rank_ap(scores, labels, where, h_pos=step, h_neg=step)


def supap_loss(scores, labels, where=None, *, temperature=0.01, rho=100.0, delta=0.05) -> float:
  """Eq. 5: Heaviside among positives, eq. 4's H^- against negatives."""
  if not any(rel for _, rel in _items(scores, labels, where)):
    return 0.0
  h_neg = lambda t: supap_negative_step(t, temperature, rho, delta)  # noqa: E731
  return 1.0 - smooth_rank_ap(scores, labels, where, h_pos=heaviside, h_neg=h_neg)


def calibration_loss(scores, labels, where=None, *, alpha=0.9, beta=0.6) -> float:
  """Eq. 7 for one query: mean hinge over positives plus mean hinge over negatives."""
  items = _items(scores, labels, where)
  pos = [s for s, rel in items if rel]
  neg = [s for s, rel in items if not rel]
  if not pos:
    return 0.0
  value = math.fsum(max(alpha - s, 0.0) for s in pos) / len(pos)
  if neg:
    value += math.fsum(max(s - beta, 0.0) for s in neg) / len(neg)
  return value


def roadmap_loss(
  scores,
  labels,
  where=None,
  *,
  calibration_weight=0.5,
  temperature=0.01,
  rho=100.0,
  delta=0.05,
  alpha=0.9,
  beta=0.6,
) -> float:
  """Eq. 2: (1 - calibration_weight) SupAP + calibration_weight calibration."""
  supap = supap_loss(scores, labels, where, temperature=temperature, rho=rho, delta=delta)
  calibration = calibration_loss(scores, labels, where, alpha=alpha, beta=beta)
  return (1 - calibration_weight) * supap + calibration_weight * calibration


def decomposability_gap(scores, labels, where=None, *, num_batches: int) -> float:
  """Eq. 6: mean AP over the consecutive batches with a relevant item, minus the whole list's AP."""
  scores = np.asarray(scores, np.float64)
  labels = np.asarray(labels, np.float64)
  where = np.ones(scores.shape, bool) if where is None else np.asarray(where, bool)
  if not any(where[i] and labels[i] >= 1 for i in range(len(scores))):
    return 0.0
  size = len(scores) // num_batches
  batch_aps = []
  for b in range(num_batches):
    part = slice(b * size, (b + 1) * size)
    if any(w and y >= 1 for w, y in zip(where[part], labels[part])):
      batch_aps.append(reference.ap(scores[part], labels[part], where[part]))
  return math.fsum(batch_aps) / len(batch_aps) - reference.ap(scores, labels, where)
