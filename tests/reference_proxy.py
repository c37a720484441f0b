"""Plain-numpy, loop-based float64 references for the proxy losses, from the papers' equations.

Movshovitz-Attias et al. 2017 (Proxy-NCA: the positive proxy over the negative ones, on unit
vectors), Teh et al. 2020 (ProxyNCA++: the positive proxies' share of the softmax over all proxies
at temperature `T`), Kim et al. 2020 (Proxy-Anchor: each proxy's log-sum-exp over the batch's
positive items, averaged over the proxies with a positive, plus its log-sum-exp over the negative
items, averaged over all proxies).

Conventions: `embeddings[B][D]`, `proxies[C][D]`, `labels` `[B]` integer classes or `[B][C]`
multi-hot (a class is a label iff its entry is `>= 1`), an optional boolean `where[B]`; masked
items are removed first. Cosine of a zero vector is 0. An item of the Proxy-NCA losses without a
positive proxy (or, for Proxy-NCA, without a negative one) has no value (`None`), and is left out
of the mean. Exponentials are taken plainly (`math.exp`), in float64.
"""

from __future__ import annotations

import math

import numpy as np


def cosine(a, b) -> float:
  dot = math.fsum(x * y for x, y in zip(a, b))
  norms = math.sqrt(math.fsum(x * x for x in a)) * math.sqrt(math.fsum(y * y for y in b))
  return dot / norms if norms > 0 else 0.0


def _items(embeddings, labels, num_classes, where):
  """The valid items as (embedding, set of positive classes)."""
  embeddings = np.asarray(embeddings, np.float64)
  labels = np.asarray(labels)
  where = np.ones(len(embeddings), bool) if where is None else np.asarray(where)
  items = []
  for i in range(len(embeddings)):
    if not where[i]:
      continue
    if labels.ndim == 1:
      positives = {int(labels[i])}
    else:
      positives = {c for c in range(num_classes) if labels[i][c] >= 1}
    items.append((list(embeddings[i]), positives))
  return items


def _nca_item(e, positives, proxies, temperature, include_positive) -> float | None:
  distances = [2.0 - 2.0 * cosine(e, p) for p in proxies]  # |unit(e) - unit(p)|^2
  numerator = [math.exp(-d / temperature) for c, d in enumerate(distances) if c in positives]
  others = [math.exp(-d / temperature) for c, d in enumerate(distances) if c not in positives]
  if not numerator or (not include_positive and not others):
    return None
  denominator = math.fsum(numerator + others) if include_positive else math.fsum(others)
  return -math.log(math.fsum(numerator) / denominator)


def proxy_nca_items(embeddings, labels, proxies, where=None) -> list[float | None]:
  """Per valid item: -log(sum_{c in Y} e^{-d_c} / sum_{c not in Y} e^{-d_c})."""
  proxies = [list(p) for p in np.asarray(proxies, np.float64)]
  return [
    _nca_item(e, y, proxies, 1.0, include_positive=False)
    for e, y in _items(embeddings, labels, len(proxies), where)
  ]


def proxy_nca_plus_plus_items(
  embeddings, labels, proxies, where=None, *, temperature=1 / 9
) -> list[float | None]:
  """Per valid item: -log(sum_{c in Y} e^{-d_c / T} / sum_{all c} e^{-d_c / T})."""
  proxies = [list(p) for p in np.asarray(proxies, np.float64)]
  return [
    _nca_item(e, y, proxies, temperature, include_positive=True)
    for e, y in _items(embeddings, labels, len(proxies), where)
  ]


def mean_of_defined(values) -> float:
  defined = [v for v in values if v is not None]
  return math.fsum(defined) / len(defined) if defined else 0.0


def proxy_anchor_terms(
  embeddings, labels, proxies, where=None, *, margin=0.1, alpha=32.0
) -> tuple[list[float], list[float], list[bool]]:
  """Per proxy c: log(1 + sum_{X_c^+} e^{-alpha (s - margin)}) (0 without a positive item),
  log(1 + sum_{X_c^-} e^{alpha (s + margin)}), and whether c has a positive item."""
  proxies = [list(p) for p in np.asarray(proxies, np.float64)]
  items = _items(embeddings, labels, len(proxies), where)
  pos, neg, has = [], [], []
  for c, p in enumerate(proxies):
    pos_exp = [math.exp(-alpha * (cosine(e, p) - margin)) for e, y in items if c in y]
    neg_exp = [math.exp(alpha * (cosine(e, p) + margin)) for e, y in items if c not in y]
    pos.append(math.log(1.0 + math.fsum(pos_exp)))
    neg.append(math.log(1.0 + math.fsum(neg_exp)))
    has.append(bool(pos_exp))
  return pos, neg, has


def proxy_anchor_loss(embeddings, labels, proxies, where=None, *, margin=0.1, alpha=32.0) -> float:
  """Kim et al. 2020: mean over proxies with a positive of the positive terms + mean over all
  proxies of the negative terms (0 for an empty batch)."""
  pos, neg, has = proxy_anchor_terms(embeddings, labels, proxies, where, margin=margin, alpha=alpha)
  with_positive = [v for v, h in zip(pos, has) if h]
  if not with_positive:
    return 0.0
  return math.fsum(with_positive) / len(with_positive) + math.fsum(neg) / len(neg)
