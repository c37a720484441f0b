"""Plain-numpy, loop-based reference implementations of jaxrank's exact metrics, in float64.

Written from the definitions, not from jaxrank's formulas, so that the tests compare two independent
derivations:

* one list is a 1-D `scores[n]` (higher is better), `labels[n]` and an optional boolean `where[n]`;
  masked items are removed before anything else, as if sliced out; an item is relevant iff its
  label is `>= 1` (NDCG uses the label as a grade, with gain `2**label - 1`);
* plain metrics rank ties pessimistically: valid items by decreasing score and, among equal scores,
  by increasing label; ranks are 1-based positions in that order;
* tie-aware metrics are the mean of the plain metric over every ordering of the tied items,
  enumerated by brute force (`itertools.permutations` inside each tie group), so keep such lists
  short (`n <= 7`);
* a valid item scored `-inf` is not retrieved (rax's convention): it is left out of the ranking but
  counts among the relevant items (`R`, the ideal DCG); the ranking functions get the labels of the
  retrieved items in rank order and those of the others (`missed`);
* a list with no relevant valid item (for NDCG and DCG: ideal DCG 0; for OPA: no pair of valid
  items with different labels) has value 0 and is excluded from the mean over lists
  (`mean_over_lists`); a valid NaN score makes a defined list's value NaN.

Every list-level function takes one list and returns a Python float; `per_list` maps one over the
leading axes of `[..., n]` arrays.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np

Item = tuple[float, float]  # (score, label) of one valid item.


def valid_items(scores, labels, where) -> list[Item]:
  scores = np.asarray(scores, dtype=np.float64)
  labels = np.asarray(labels, dtype=np.float64)
  if scores.ndim != 1 or scores.shape != labels.shape:
    raise ValueError(f"one list expected, got shapes {scores.shape} and {labels.shape}")
  if where is None:
    where = np.ones(scores.shape, dtype=bool)
  where = np.broadcast_to(np.asarray(where, dtype=bool), scores.shape)
  return [(float(scores[i]), float(labels[i])) for i in range(len(scores)) if where[i]]


def _is_relevant(label: float) -> bool:
  return label >= 1


def pessimistic_order(items: Sequence[Item]) -> list[Item]:
  """Items by decreasing score; among equal scores, by increasing label (worst first)."""
  out = list(items)
  # Insertion sort with an explicit comparison, to spell out the tie policy.
  for i in range(1, len(out)):
    j = i
    while j > 0 and _ranks_before(out[j], out[j - 1]):
      out[j - 1], out[j] = out[j], out[j - 1]
      j -= 1
  return out


def _ranks_before(a: Item, b: Item) -> bool:
  if a[0] != b[0]:
    return a[0] > b[0]
  return a[1] < b[1]


def tie_groups(items: Sequence[Item]) -> list[list[Item]]:
  """Groups of equal scores, best group first (each group in pessimistic order)."""
  groups: list[list[Item]] = []
  for item in pessimistic_order(items):
    if groups and groups[-1][0][0] == item[0]:
      groups[-1].append(item)
    else:
      groups.append([item])
  return groups


def tie_orderings(items: Sequence[Item]) -> Iterator[list[float]]:
  """The labels in rank order, for every ordering of the tied items (with multiplicity)."""
  groups = tie_groups(items)
  for choice in itertools.product(*(itertools.permutations(g) for g in groups)):
    yield [label for group in choice for _, label in group]


# Metrics of one ranking, given as the labels in rank order (rank r is index r - 1), and the labels
# of the valid items that were not retrieved (`missed`: scored -inf).


def _count_relevant(ranked: Sequence[float], missed: Sequence[float] = ()) -> int:
  return sum(1 for y in list(ranked) + list(missed) if _is_relevant(y))


def ranking_ap(
  ranked: Sequence[float], missed: Sequence[float] = (), topn: int | None = None
) -> float:
  num_relevant = _count_relevant(ranked, missed)
  if num_relevant == 0:
    return 0.0
  total = 0.0
  for rank in range(1, len(ranked) + 1):
    if topn is not None and rank > topn:
      break
    if _is_relevant(ranked[rank - 1]):
      hits = sum(1 for y in ranked[:rank] if _is_relevant(y))
      total += hits / rank
  return total / num_relevant


def ranking_map_at_r(ranked: Sequence[float], missed: Sequence[float] = ()) -> float:
  num_relevant = _count_relevant(ranked, missed)
  if num_relevant == 0:
    return 0.0
  total = 0.0
  for i in range(1, min(num_relevant, len(ranked)) + 1):
    if _is_relevant(ranked[i - 1]):
      precision_at_i = sum(1 for y in ranked[:i] if _is_relevant(y)) / i
      total += precision_at_i
  return total / num_relevant


def ranking_recall_at_k(ranked: Sequence[float], topn: int, missed: Sequence[float] = ()) -> float:
  return 1.0 if any(_is_relevant(y) for y in ranked[:topn]) else 0.0


def ranking_relevant_fraction_at_k(
  ranked: Sequence[float], topn: int, missed: Sequence[float] = ()
) -> float:
  num_relevant = _count_relevant(ranked, missed)
  if num_relevant == 0:
    return 0.0
  return sum(1 for y in ranked[:topn] if _is_relevant(y)) / num_relevant


def ranking_precision_at_k(
  ranked: Sequence[float], topn: int, missed: Sequence[float] = ()
) -> float:
  if not ranked:
    return 0.0
  hits = sum(1 for y in ranked[:topn] if _is_relevant(y))
  return hits / min(topn, len(ranked))


def ranking_mrr(
  ranked: Sequence[float], missed: Sequence[float] = (), topn: int | None = None
) -> float:
  for rank, y in enumerate(ranked, start=1):
    if topn is not None and rank > topn:
      break
    if _is_relevant(y):
      return 1 / rank
  return 0.0


def _gain(label: float) -> float:
  return 2.0**label - 1.0


def _dcg(gains: Sequence[float], topn: int | None) -> float:
  total = 0.0
  for rank in range(1, len(gains) + 1):
    if topn is not None and rank > topn:
      break
    total += gains[rank - 1] / math.log2(1 + rank)
  return total


def ranking_dcg(
  ranked: Sequence[float], missed: Sequence[float] = (), topn: int | None = None
) -> float:
  return _dcg([_gain(y) for y in ranked], topn)


def ranking_ndcg(
  ranked: Sequence[float], missed: Sequence[float] = (), topn: int | None = None
) -> float:
  ideal = _dcg(sorted((_gain(y) for y in list(ranked) + list(missed)), reverse=True), topn)
  if ideal == 0:
    return 0.0
  return ranking_dcg(ranked, topn=topn) / ideal


# List-level metrics.


def _defined(items: Sequence[Item], ndcg: bool, topn: int | None = None) -> bool:
  if ndcg:
    return _dcg(sorted((_gain(y) for _, y in items), reverse=True), topn) > 0
  return any(_is_relevant(y) for _, y in items)


def _retrieved(items: Sequence[Item]) -> tuple[list[Item], list[float]]:
  """The retrieved items (not scored -inf), and the labels of the others."""
  return [it for it in items if it[0] != -math.inf], [y for s, y in items if s == -math.inf]


def _plain(ranking_fn: Callable[..., float], ndcg: bool = False):
  def metric(scores, labels, where=None, **kwargs) -> float:
    items = valid_items(scores, labels, where)
    if not _defined(items, ndcg, kwargs.get("topn")):
      return 0.0
    if any(math.isnan(s) for s, _ in items):
      return math.nan
    retrieved, missed = _retrieved(items)
    return ranking_fn([y for _, y in pessimistic_order(retrieved)], missed=missed, **kwargs)

  return metric


def _tie_aware(ranking_fn: Callable[..., float], ndcg: bool = False):
  def metric(scores, labels, where=None, **kwargs) -> float:
    items = valid_items(scores, labels, where)
    if not _defined(items, ndcg, kwargs.get("topn")):
      return 0.0
    if any(math.isnan(s) for s, _ in items):
      return math.nan
    retrieved, missed = _retrieved(items)
    values = [ranking_fn(ranked, missed=missed, **kwargs) for ranked in tie_orderings(retrieved)]
    return math.fsum(values) / len(values)

  return metric


ap = _plain(ranking_ap)
tie_aware_ap = _tie_aware(ranking_ap)
ndcg = _plain(ranking_ndcg, ndcg=True)
dcg = _plain(ranking_dcg, ndcg=True)
tie_aware_ndcg = _tie_aware(ranking_ndcg, ndcg=True)
recall_at_k = _plain(ranking_recall_at_k)
relevant_fraction_at_k = _plain(ranking_relevant_fraction_at_k)
precision_at_k = _plain(ranking_precision_at_k)
map_at_r = _plain(ranking_map_at_r)
mrr = _plain(ranking_mrr)


def weighted_ndcg(scores, labels, where=None, *, item_weights, topn=None, normalise=True) -> float:
  """NDCG (or DCG, `normalise=False`) with each gain multiplied by the item's weight.

  Ties: within equal scores, the lower weighted gain first; the ideal order sorts the valid items
  by weighted gain. Defined when the ideal DCG is positive.
  """
  valid = valid_items(scores, labels, where)
  weights = np.broadcast_to(np.asarray(item_weights, np.float64), np.shape(scores))
  shape = np.shape(scores)
  mask = np.ones(shape, bool) if where is None else np.broadcast_to(np.asarray(where, bool), shape)
  valid_weights = [float(w) for w, m in zip(weights, mask) if m]
  items = [(s, _gain(y) * w) for (s, y), w in zip(valid, valid_weights)]  # (score, weighted gain)
  ideal = _dcg(sorted((g for _, g in items), reverse=True), topn)
  if ideal == 0:
    return 0.0
  if any(math.isnan(s) for s, _ in items):
    return math.nan
  retrieved = [it for it in items if it[0] != -math.inf]
  value = _dcg([g for _, g in pessimistic_order(retrieved)], topn)
  return value / ideal if normalise else value


def opa(scores, labels, where=None) -> float:
  """Ordered pair accuracy: over the ordered pairs of valid items (label i > label j), the
  fraction with score i > score j (equal scores, and two -inf, are misordered)."""
  items = valid_items(scores, labels, where)
  pairs = [(a, b) for a in items for b in items if a[1] > b[1]]
  if not pairs:
    return 0.0
  if any(math.isnan(s) for s, _ in items):
    return math.nan
  return sum(1 for a, b in pairs if a[0] > b[0]) / len(pairs)


def has_ordered_pair(labels, where=None) -> np.ndarray:
  """`[...]`: whether each list has two valid items with different labels (OPA is defined)."""
  labels = np.asarray(labels, dtype=np.float64)
  where = np.ones(labels.shape, bool) if where is None else np.asarray(where, bool)
  where = np.broadcast_to(where, labels.shape)
  out = np.zeros(labels.shape[:-1], dtype=bool)
  for idx in np.ndindex(labels.shape[:-1]):
    out[idx] = len(set(labels[idx][where[idx]].tolist())) > 1
  return out


def has_relevant(labels, where=None) -> np.ndarray:
  """`[...]`: whether each list of `labels [..., n]` has a relevant valid item."""
  labels = np.asarray(labels, dtype=np.float64)
  where = np.ones(labels.shape, bool) if where is None else np.asarray(where, bool)
  where = np.broadcast_to(where, labels.shape)
  out = np.zeros(labels.shape[:-1], dtype=bool)
  for idx in np.ndindex(labels.shape[:-1]):
    out[idx] = any(where[idx][i] and _is_relevant(labels[idx][i]) for i in range(labels.shape[-1]))
  return out


def per_list(metric: Callable[..., float], scores, labels, where=None, **kwargs) -> np.ndarray:
  """Applies a list-level reference metric to every list of `[..., n]` arrays; returns `[...]`."""
  scores = np.asarray(scores, dtype=np.float64)
  labels = np.asarray(labels, dtype=np.float64)
  where = np.ones(scores.shape, bool) if where is None else np.asarray(where, bool)
  where = np.broadcast_to(where, scores.shape)
  out = np.zeros(scores.shape[:-1], dtype=np.float64)
  for idx in np.ndindex(scores.shape[:-1]):
    out[idx] = metric(scores[idx], labels[idx], where[idx], **kwargs)
  return out


def per_segment(
  metric: Callable[..., float], scores, labels, where=None, *, segments, **kwargs
) -> np.ndarray:
  """A list-level reference metric on segmented rows: `[..., n]`, the value of each segment at the
  position of its first valid item, 0 everywhere else (jaxrank's and rax's `segments`).

  The items of one row with equal segment ids form one list, taken out of the row in their order
  (a segment without a valid item has no value).
  """
  scores = np.asarray(scores, dtype=np.float64)
  labels = np.broadcast_to(np.asarray(labels, dtype=np.float64), scores.shape)
  where = np.ones(scores.shape, bool) if where is None else np.asarray(where, bool)
  where = np.broadcast_to(where, scores.shape)
  segments = np.asarray(segments)
  out = np.zeros(scores.shape, dtype=np.float64)
  for idx in np.ndindex(scores.shape[:-1]):
    for segment in set(segments[idx].tolist()):
      items = np.flatnonzero((segments[idx] == segment) & where[idx])
      if len(items):
        out[idx + (items[0],)] = metric(
          scores[idx][items], labels[idx][items], np.ones(len(items), bool), **kwargs
        )
  return out


def mean_over_lists(values, defined) -> float:
  """Mean of `values` over the lists where `defined` holds; 0 when there is none."""
  values = np.asarray(values, dtype=np.float64).reshape(-1)
  defined = np.asarray(defined, dtype=bool).reshape(-1)
  kept = [float(v) for v, d in zip(values, defined) if d]
  return math.fsum(kept) / len(kept) if kept else 0.0
