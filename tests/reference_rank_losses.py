"""Plain-numpy, loop-based float64 references for `jaxrank`'s smooth-rank losses beyond AP.

Written from the equations: Patel, Tolias, Matas 2022 (RS@k: eq. 1 Recall@k over `min(k, |P|)`,
eq. 2-3 the rank as a sum of Heaviside steps over the other items, eq. 4-5 the two sigmoids and the
mean over the cut-offs); Ramzi et al. 2021 (SupAP's steps, eq. 3-4), which SupRank (Ramzi et al.,
TPAMI 2023) applies to Recall@k and NDCG; NDCG with the gain `2**label - 1` and the discount
`log2(1 + rank)` (Jarvelin and Kekalainen 2002).

Conventions as in `reference_smooth_rank.py`: one list is `scores[n]`, `labels[n]` and an optional
boolean `where[n]`; masked items are removed first; a list without a relevant valid item has value
0. Every function returns a Python float; `reference.per_list` maps one over leading axes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import reference
import reference_smooth_rank as ref


def smoothed_ranks(scores, labels, where=None, *, h_pos, h_neg):
  """`[(rank, label)]` of each relevant valid item: `1 + sum_{j in P, j != k} H^+(s_j - s_k) +
  sum_{j in N} H^-(s_j - s_k)` (Patel et al. eq. 3, Ramzi et al. 2021 eq. 3)."""
  items = list(reference.valid_items(scores, labels, where))
  out = []
  for k, (s_k, y_k) in enumerate(items):
    if y_k < 1:
      continue
    rank = 1.0
    for j, (s_j, y_j) in enumerate(items):
      if j != k:
        rank += h_pos(s_j - s_k) if y_j >= 1 else h_neg(s_j - s_k)
    out.append((rank, y_k))
  return out


def recall_at_k(
  scores,
  labels,
  where=None,
  *,
  ks: Sequence[int],
  h_pos: Callable[[float], float],
  h_neg: Callable[[float], float],
  count: Callable[[float], float],
  clip: bool = False,
) -> float:
  """Eq. 1 and 5: the mean over `ks` of `sum_{p in P} count(k - rank(p)) / min(k, |P|)` (the
  count clipped at `k` with `clip`, as the released code does)."""
  ranks = [rank for rank, _ in smoothed_ranks(scores, labels, where, h_pos=h_pos, h_neg=h_neg)]
  if not ranks:
    return 0.0
  total = 0.0
  for k in ks:
    hits = math.fsum(count(k - rank) for rank in ranks)
    if clip:
      hits = min(hits, k)
    total += hits / min(k, len(ranks))
  return total / len(ks)


def _loss(value, scores, labels, where):
  if not any(y >= 1 for _, y in reference.valid_items(scores, labels, where)):
    return 0.0
  return 1.0 - value


def recall_at_k_surrogate_loss(
  scores,
  labels,
  where=None,
  *,
  ks=(1, 2, 4, 8, 16),
  temperature=0.01,
  k_temperature=1.0,
  clip_at_k=False,
) -> float:
  """RS@k (Patel et al. 2022, eq. 5): sigmoids of temperature `temperature` in the rank and
  `k_temperature` in `k - rank`."""
  step = lambda t: ref.sigmoid(t / temperature)  # noqa: E731
  count = lambda t: ref.sigmoid(t / k_temperature)  # noqa: E731
  value = recall_at_k(
    scores, labels, where, ks=ks, h_pos=step, h_neg=step, count=count, clip=clip_at_k
  )
  return _loss(value, scores, labels, where)


def sup_recall_at_k_loss(
  scores,
  labels,
  where=None,
  *,
  ks=(1, 2, 4, 8, 16),
  temperature=0.01,
  rho=100.0,
  delta=0.05,
  k_temperature=1.0,
) -> float:
  """SupRecall@k: the Heaviside step among positives, SupAP's eq. 4 step against negatives."""
  h_neg = lambda t: ref.supap_negative_step(t, temperature, rho, delta)  # noqa: E731
  count = lambda t: ref.sigmoid(t / k_temperature)  # noqa: E731
  value = recall_at_k(scores, labels, where, ks=ks, h_pos=ref.heaviside, h_neg=h_neg, count=count)
  return _loss(value, scores, labels, where)


def exact_recall_at_k(scores, labels, where=None, *, ks) -> float:
  """Eq. 1 with Heaviside steps (the pessimistic ties of `ap_metric`) and counts."""
  return recall_at_k(
    scores, labels, where, ks=ks, h_pos=ref.heaviside, h_neg=ref.heaviside, count=ref.heaviside
  )


def _gain(label: float) -> float:
  """`2**label - 1` for a relevant item (label >= 1), else 0."""
  return 2.0**label - 1 if label >= 1 else 0.0


def ndcg(scores, labels, where=None, *, h_pos, h_neg, graded: bool) -> float:
  """DCG of the smoothed ranks over the ideal DCG. `graded`: `H^-` against the items of lower gain
  than the item ranked and `H^+` against the others (SupRank); else `H^+` against the relevant
  items and `H^-` against the rest."""
  items = [(s, _gain(y)) for s, y in reference.valid_items(scores, labels, where)]
  if not any(g > 0 for _, g in items):
    return 0.0
  dcg = 0.0
  for k, (s_k, g_k) in enumerate(items):
    if g_k == 0:
      continue
    rank = 1.0
    for j, (s_j, g_j) in enumerate(items):
      if j == k:
        continue
      lower = g_j < g_k if graded else g_j == 0
      rank += h_neg(s_j - s_k) if lower else h_pos(s_j - s_k)
    dcg += g_k / math.log2(1 + rank)
  ideal = sorted((g for _, g in items), reverse=True)
  return dcg / math.fsum(g / math.log2(2 + i) for i, g in enumerate(ideal))


def smooth_ndcg_loss(scores, labels, where=None, *, temperature=0.01) -> float:
  """SmoothNDCG: the sigmoid for every step of the rank."""
  step = lambda t: ref.sigmoid(t / temperature)  # noqa: E731
  value = ndcg(scores, labels, where, h_pos=step, h_neg=step, graded=False)
  return _loss(value, scores, labels, where)


def sup_ndcg_loss(scores, labels, where=None, *, temperature=0.01, rho=100.0, delta=0.05) -> float:
  """SupNDCG: Heaviside against items at least as relevant, eq. 4's step against the others."""
  h_neg = lambda t: ref.supap_negative_step(t, temperature, rho, delta)  # noqa: E731
  value = ndcg(scores, labels, where, h_pos=ref.heaviside, h_neg=h_neg, graded=True)
  return _loss(value, scores, labels, where)
