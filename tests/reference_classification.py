"""Plain-numpy, loop-based float64 references for the classification losses, from the papers.

Zhai & Wu 2019 (normalised softmax: the cross-entropy of the softmax of the cosines over a
temperature), Deng et al. 2019 eq. 3 (ArcFace: the target's logit `s cos(theta + m)`, with the
`cos(theta) - m sin(m)` of the authors' code past `theta = pi - m`) and Wang et al. 2018 eq. 4
(CosFace: the target's logit `s (cos(theta) - m)`).

Conventions: `embeddings[B][D]`, `class_weights[C][D]`, `labels` `[B]` integer classes (or, for
the normalised softmax, `[B][C]` multi-hot: a class is a label iff its entry is `>= 1`), an
optional boolean `where[B]`; masked items are removed first. Cosine of a zero vector is 0. An item
without a label has no value (`None`) and is left out of the mean. The angle is `math.acos` and
`cos(theta + m)` `math.cos`, as the papers write them.
"""

from __future__ import annotations

import math

import numpy as np
import reference_proxy

ARCFACE_MARGIN = math.radians(28.6)  # pytorch-metric-learning's default, 28.6 degrees.


def _items(embeddings, labels, num_classes, where):
  """The valid items as (embedding, set of positive classes)."""
  embeddings = np.asarray(embeddings, np.float64)
  labels = np.asarray(labels)
  where = np.ones(len(embeddings), bool) if where is None else np.asarray(where)
  items = []
  for i in range(len(embeddings)):
    if where[i]:
      if labels.ndim == 1:
        positives = {int(labels[i])}
      else:
        positives = {c for c in range(num_classes) if labels[i][c] >= 1}
      items.append((list(embeddings[i]), positives))
  return items


def _cross_entropy(logits, positives) -> float | None:
  """-log(sum_{c in positives} e^{z_c} / sum_c e^{z_c}), shifted by the largest logit."""
  if not positives:
    return None
  top = max(logits)
  numerator = math.fsum(math.exp(z - top) for c, z in enumerate(logits) if c in positives)
  return -math.log(numerator / math.fsum(math.exp(z - top) for z in logits))


def normalized_softmax_items(embeddings, labels, class_weights, where=None, *, temperature=0.05):
  """Per valid item: -log(sum_{c in Y} e^{s_c / T} / sum_c e^{s_c / T})."""
  weights = [list(w) for w in np.asarray(class_weights, np.float64)]
  values = []
  for e, positives in _items(embeddings, labels, len(weights), where):
    logits = [reference_proxy.cosine(e, w) / temperature for w in weights]
    values.append(_cross_entropy(logits, positives))
  return values


def _margin_items(embeddings, labels, class_weights, where, scale, target):
  """Per valid item: the cross-entropy of the logits `s cos`, the target's `s target(cos)`."""
  weights = [list(w) for w in np.asarray(class_weights, np.float64)]
  values = []
  for e, positives in _items(embeddings, labels, len(weights), where):
    (y,) = positives
    cosines = [reference_proxy.cosine(e, w) for w in weights]
    logits = [scale * (target(s) if c == y else s) for c, s in enumerate(cosines)]
    values.append(_cross_entropy(logits, positives))
  return values


def arcface_items(
  embeddings, labels, class_weights, where=None, *, angular_margin=ARCFACE_MARGIN, scale=64.0
):
  """Per valid item, Deng et al. 2019 eq. 3; the target's logit past `theta = pi - m` is
  `s (cos(theta) - m sin(m))`."""
  m = angular_margin

  def target(s):
    theta = math.acos(min(max(s, -1.0), 1.0))
    return math.cos(theta + m) if theta <= math.pi - m else math.cos(theta) - m * math.sin(m)

  return _margin_items(embeddings, labels, class_weights, where, scale, target)


def cosface_items(embeddings, labels, class_weights, where=None, *, margin=0.35, scale=64.0):
  """Per valid item, Wang et al. 2018 eq. 4: the target's logit `s (cos(theta) - m)`."""
  return _margin_items(embeddings, labels, class_weights, where, scale, lambda s: s - margin)
