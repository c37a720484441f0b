"""Plain-numpy, loop-based readings of the hierarchical metrics' definitions, in float64.

Written from Ramzi et al. 2022 (HAPPIER, Sec. 3.1: the H-rank, H-AP and the relevance of a level)
and from the definition of the average set intersection (top-d sets against the ideal top-d
sets), not from jaxrank's pair arrays. One list is `scores[n]`, `grades[n]` (relevances or
levels) and `where[n]`, as in `reference.py`: masked items are removed first, `-inf` items are not
retrieved (counted in the ideal, never ranked), ties are ranked pessimistically (`reference.
pessimistic_order`: lower grade first), and the tie-aware H-AP enumerates every ordering of the
tied items (`reference.tie_orderings`; keep such lists short).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import reference


def ranking_hap(ranked: Sequence[float], missed: Sequence[float] = ()) -> float:
  """H-AP of the relevances in rank order (`missed`: the relevances of items not retrieved)."""
  total = math.fsum(list(ranked) + list(missed))
  if total == 0:
    return 0.0
  value = 0.0
  for rank, rel in enumerate(ranked, start=1):
    if rel > 0:
      h_rank = math.fsum(min(other, rel) for other in ranked[:rank])  # Itself included.
      value += h_rank / rank
  return value / total


def ranking_asi(ranked: Sequence[float], missed: Sequence[float] = ()) -> float:
  """ASI of the grades in rank order: mean over depths d = 1..R of |top d ^ ideal top d| / d,
  the intersection taken level by level (a multiset of grades), grades 0 left out."""
  every = list(ranked) + list(missed)
  ideal = sorted(every, reverse=True)
  num_relevant = sum(1 for g in every if g > 0)
  if num_relevant == 0:
    return 0.0
  total = 0.0
  for depth in range(1, num_relevant + 1):
    top, best = list(ranked[:depth]), ideal[:depth]
    shared = 0
    for level in {g for g in every if g > 0}:
      shared += min(top.count(level), best.count(level))
    total += shared / depth
  return total / num_relevant


def _list(ranking_fn, tie_aware: bool = False):
  def metric(scores, grades, where=None) -> float:
    items = reference.valid_items(scores, grades, where)
    if not any(g > 0 for _, g in items):
      return 0.0
    if any(math.isnan(s) for s, _ in items):
      return math.nan
    retrieved = [it for it in items if it[0] != -math.inf]
    missed = [g for s, g in items if s == -math.inf]
    if not tie_aware:
      return ranking_fn([g for _, g in reference.pessimistic_order(retrieved)], missed)
    values = [ranking_fn(r, missed) for r in reference.tie_orderings(retrieved)]
    return math.fsum(values) / len(values)

  return metric


hap = _list(ranking_hap)
tie_aware_hap = _list(ranking_hap, tie_aware=True)
asi = _list(ranking_asi)


def relevance(levels, num_levels, alpha=1.0, self_level=None, where=None) -> np.ndarray:
  """HAPPIER's relevance of each item of one list: `(l / L)^alpha / |items at level l|`."""
  levels = np.asarray(levels)
  where = np.ones(levels.shape, bool) if where is None else np.asarray(where, bool)
  out = np.zeros(levels.shape, np.float64)
  for i, level in enumerate(levels):
    if where[i] and level > 0:
      count = sum(1 for j in range(len(levels)) if where[j] and levels[j] == level)
      count += int(self_level == level)
      out[i] = (level / num_levels) ** alpha / count
  return out


def levels_of(query_labels, item_labels) -> int:
  """The number of the hierarchy's labels (class, super-classes) an item shares with a query."""
  return sum(int(a == b) for a, b in zip(query_labels, item_labels))
