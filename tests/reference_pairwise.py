"""Plain-numpy, loop-based float64 references for `jaxrank.pairwise`, written from the definitions.

Hadsell et al. 2006 (contrastive, in pytorch-metric-learning's similarity form: unsquared hinges,
a positive pair costs below `pos_margin`, a negative pair above `neg_margin`), Hermans et al. 2017
(batch-hard triplet: the least similar positive and the most similar negative of the query), Wang
et al. 2019 (multi-similarity, with its optional pair mining).

Conventions, as in `reference.py`: one list is `scores[n]`, `labels[n]` and an optional boolean
`where[n]`; masked items are removed first; an item is relevant iff its label is `>= 1`; a list
without a relevant valid item has value 0 (the triplet loss also needs a non-relevant one). Every
function returns a Python float; `reference.per_list` maps one over leading axes.
"""

from __future__ import annotations

import math

import reference


def _split(scores, labels, where):
  """The valid relevant scores and the valid other scores, as two lists of floats."""
  positives, negatives = [], []
  for s, y in reference.valid_items(scores, labels, where):
    (positives if y >= 1 else negatives).append(s)
  return positives, negatives


def contrastive_loss(scores, labels, where=None, *, pos_margin=1.0, neg_margin=0.0) -> float:
  """mean_{P} max(0, pos_margin - s) + mean_{N} max(0, s - neg_margin); the second 0 if N empty."""
  positives, negatives = _split(scores, labels, where)
  if not positives:
    return 0.0
  total = math.fsum(max(0.0, pos_margin - s) for s in positives) / len(positives)
  if negatives:
    total += math.fsum(max(0.0, s - neg_margin) for s in negatives) / len(negatives)
  return total


def triplet_loss(scores, labels, where=None, *, margin=0.05) -> float:
  """max(0, max_N s - min_P s + margin); 0 without a positive or without a negative."""
  positives, negatives = _split(scores, labels, where)
  if not positives or not negatives:
    return 0.0
  hardest_positive = positives[0]
  for s in positives:
    if s < hardest_positive:
      hardest_positive = s
  hardest_negative = negatives[0]
  for s in negatives:
    if s > hardest_negative:
      hardest_negative = s
  return max(0.0, hardest_negative - hardest_positive + margin)


def all_triplets(scores, labels, where=None, *, margin=0.05) -> tuple[float, int]:
  """(sum, number) of the non-zero losses max(0, s_j - s_p + margin) over every positive p and
  negative j of the list; (0, 0) without a positive or without a negative."""
  positives, negatives = _split(scores, labels, where)
  losses = [s_j - s_p + margin for s_p in positives for s_j in negatives]
  losses = [loss for loss in losses if loss > 0]
  return math.fsum(losses), len(losses)


def all_triplet_loss(scores, labels, where=None, *, margin=0.05) -> float:
  """The mean of a list's non-zero triplet losses (`all_triplets`); 0 if it has none."""
  total, number = all_triplets(scores, labels, where, margin=margin)
  return total / number if number else 0.0


def _log_one_plus_sum_exp(exponents) -> float:
  """log(1 + sum exp(x)), by shifting with the largest of 0 and the exponents."""
  top = max([0.0] + list(exponents))
  return top + math.log(math.exp(-top) + math.fsum(math.exp(x - top) for x in exponents))


def multi_similarity_loss(
  scores, labels, where=None, *, alpha=2.0, beta=50.0, base=0.5, epsilon=None
) -> float:
  """1/alpha log(1 + sum_P' e^{-alpha (s - base)}) + 1/beta log(1 + sum_N' e^{beta (s - base)}).

  `P'`, `N'`: every positive and negative, or with `epsilon` the mined ones: a negative with
  `s + epsilon > min_P s`, a positive with `s - epsilon < max_N s`.
  """
  positives, negatives = _split(scores, labels, where)
  if not positives:
    return 0.0
  if epsilon is not None:
    lowest_positive = min(positives)
    highest_negative = max(negatives) if negatives else -math.inf
    positives, negatives = (
      [s for s in positives if s - epsilon < highest_negative],
      [s for s in negatives if s + epsilon > lowest_positive],
    )
  pos = _log_one_plus_sum_exp([-alpha * (s - base) for s in positives]) / alpha
  neg = _log_one_plus_sum_exp([beta * (s - base) for s in negatives]) / beta
  return pos + neg
