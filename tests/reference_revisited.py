"""Plain-numpy, loop-based float64 reference of the Revisited Oxford/Paris evaluation, from the
protocol's definition (Radenovic et al. 2018).

Each query sorts the gallery by decreasing score, ties broken against the positives (a positive
after every other item it ties with; jaxrank's documented rule: the protocol's own `np.argsort`
leaves the order of ties to numpy's unstable sort), removes the setting's ignored items, and reads
the 0-based positions of the positives in what remains. AP: the trapezoid rule over the recall
steps; P@k: the protocol's, with `k' = min(k, last positive's 1-based position)`. A query without
positives in a setting has no value (`None`) and is left out of the mean; no value at all gives 0.
"""

from __future__ import annotations

import numpy as np

SETTINGS: dict[str, dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
  "revisited": {
    "easy/": (("easy",), ("junk", "hard")),
    "medium/": (("easy", "hard"), ("junk",)),
    "hard/": (("hard",), ("junk", "easy")),
  },
  "original": {"": (("ok",), ("junk",))},
}


def positions(scores, positives, ignored) -> list[int]:
  """0-based positions of the positives in the ranking of `scores [N]` without `ignored`."""
  positives, ignored = set(positives), set(ignored)
  is_positive = np.array([i in positives for i in range(len(scores))])
  order = np.lexsort((is_positive, -np.asarray(scores, np.float64)))  # Score first, then ties.
  kept = [i for i in order if i not in ignored]
  return [r for r, i in enumerate(kept) if i in positives]


def average_precision(pos) -> float:
  ap = 0.0
  for j, r in enumerate(pos):
    before = 1.0 if r == 0 else j / r
    after = (j + 1) / (r + 1)
    ap += (before + after) / 2 / len(pos)
  return ap


def precision_at(pos, k) -> float:
  one_based = [r + 1 for r in pos]
  cut = min(max(one_based), k)
  return sum(1 for p in one_based if p <= cut) / cut


def evaluate(scores, ground_truth, ks) -> dict[str, float]:
  """The protocol's means, `scores [Q][N]`; the format read from the first query's keys."""
  fmt = "revisited" if "easy" in ground_truth[0] else "original"
  out = {}
  for prefix, (pos_keys, ign_keys) in SETTINGS[fmt].items():
    values = []
    for q, gnd in enumerate(ground_truth):
      positives = [i for key in pos_keys for i in gnd[key]]
      if not positives:
        continue
      pos = positions(scores[q], positives, [i for key in ign_keys for i in gnd[key]])
      values.append([average_precision(pos)] + [precision_at(pos, k) for k in ks])
    means = np.mean(values, axis=0) if values else np.zeros(1 + len(ks))
    out[f"{prefix}map"] = float(means[0])
    out |= {f"{prefix}mp@{k}": float(means[1 + i]) for i, k in enumerate(ks)}
  return out
