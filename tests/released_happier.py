"""A transcription, in torch, of HAPPIER's released hierarchical evaluation, for the tests.

Transcribed from github.com/elias-ramzi/HAPPIER at commit
5af91b3ac6c216a936232da33b42af7efaba5c6b:

* happier/engine/metrics.py: `hap`, `asi` (default `at_R=True`), `ndcg` (default `at_k=None`);
* happier/engine/compute_relevance_on_the_fly.py: `get_relevances_pop` (the evaluation's
  relevance: `relevance_type: pop`, `alpha: 1.0` in every happier/config/dataset/*.yaml);
* happier/lib/create_label_matrix.py, happier/lib/create_relevance_matrix.py;
* happier/datasets/base_dataset.py `get_all_relevance` (relevances of each query against the
  whole set, the query included) and happier/engine/accuracy_calculator.py `batch_metrics` with
  happier/engine/get_knn.py `get_knn_torch` (scores `queries @ references.T`, `topk` of all items,
  the first, the query itself, dropped when the queries are the references).

github.com/elias-ramzi/SupRank at commit d3d0e3cbceee3e8f295fd411daecbe33c1b881bb has the same
functions (suprank/engine/metrics.py, suprank/engine/compute_relevance_on_the_fly.py,
suprank/lib/create_label_matrix.py), line for line up to type annotations: this transcription
stands for both. Checked by hand against those files; the variable names are theirs. One change:
everything is computed in float64 (the released code's relevances, ASI weights and NDCG
discounts are float32).
"""

from __future__ import annotations

import torch


def create_label_matrix(labels, other_labels=None, hierarchy_level=None, dtype=torch.float):
  if other_labels is None:
    other_labels = labels
  if (hierarchy_level is not None) and (hierarchy_level != "MULTI"):
    labels = labels[..., hierarchy_level : hierarchy_level + 1]
    other_labels = other_labels[..., hierarchy_level : hierarchy_level + 1]
  return (labels.unsqueeze(1) == other_labels.unsqueeze(0)).sum(-1).squeeze().to(dtype)


def create_relevance_matrix(label_matrix, relevance):
  return torch.gather(relevance, 1, label_matrix)


def get_relevances_pop(target, levels, alpha=1.0):
  target = target.long()
  weights = [(x / (levels - 1)) ** alpha for x in range(levels + 1)]
  weights = torch.tensor(weights, device=target.device, dtype=torch.float64)
  counts = torch.zeros(target.size(0), levels + 1, device=target.device, dtype=torch.float64)
  for i, line in enumerate(target):
    o, c = torch.unique(line, sorted=True, return_counts=True)
    counts[i, o] = (weights[o] / c).double()
  return counts


def hap(sorted_rel, relevances, reduce=True):
  relevances = relevances[:, 1:]
  eq = sorted_rel.unsqueeze(1) == relevances.unsqueeze(1).permute(0, 2, 1)
  cum = eq.cumsum(-1)
  weights = torch.minimum(sorted_rel.unsqueeze(1), relevances.unsqueeze(1).permute(0, 2, 1))
  ranks = torch.arange(1, sorted_rel.size(1) + 1).view(1, -1)
  hranks = (weights * cum).sum(1)
  mhap = (hranks / ranks).sum(-1) / sorted_rel.sum(-1)
  return mhap.mean() if reduce else mhap


def asi(sorted_target, at_R=True, reduce=True):
  real_sorted_target = sorted_target.sort(1, descending=True).values
  size = sorted_target.max()
  values = torch.arange(size + 1).view(1, -1).unsqueeze(1).permute(0, 2, 1)
  eq = (sorted_target.unsqueeze(1) == values).cumsum(-1)
  real_eq = (real_sorted_target.unsqueeze(1) == values).cumsum(-1)
  at_k = 1 / torch.arange(1, sorted_target.size(-1) + 1).view(1, -1).double()
  norm_factor = sorted_target.size(-1)
  if at_R:
    at_k = at_k * real_sorted_target.bool()
    norm_factor = real_sorted_target.bool().sum(-1)
  asi = (torch.min(eq, real_eq).sum(1) * at_k).sum(-1) / norm_factor
  return asi.mean() if reduce else asi


def ndcg(sorted_target, at_k=None, reduce=True):
  sorted_target = 2 ** sorted_target.double() - 1
  if at_k is not None:
    sorted_target = sorted_target[:, :at_k]
  ranks = torch.arange(1, sorted_target.size(1) + 1, dtype=torch.float64)
  ideal_ranks = 1 + sorted_target.argsort(1, True).argsort(1).double()
  dcg = (sorted_target / torch.log2(1 + ranks)).sum(-1)
  idcg = (sorted_target / torch.log2(1 + ideal_ranks)).sum(-1)
  ndcg = dcg / idcg
  return ndcg.mean() if reduce else ndcg


def evaluate(features, labels, ref_features=None, ref_labels=None, alpha=1.0):
  """Per-query `{"H-AP", "ASI", "NDCG"}` of `batch_metrics` (one batch of every query), float64.

  `labels [N, L]`: column 0 the class, then the super-classes (HAPPIER's `dataset.labels`);
  `HIERARCHY_LEVEL = L`. Without references the queries rank the rest of their own set.
  """
  same_source = ref_features is None
  if same_source:
    ref_features, ref_labels = features, labels
  levels = labels.size(1)
  # base_dataset.get_all_relevance: each query against the whole (query) set, itself included.
  target = create_label_matrix(labels, labels)
  relevances = get_relevances_pop(target, levels=max(range(levels + 1)), alpha=alpha)
  # get_knn_torch: topk of all references (+1 for the query itself, then dropped).
  num_k = ref_features.size(0) - 1 + same_source
  scores = features @ ref_features.t()
  _, indices = torch.topk(scores, num_k)
  if same_source:
    indices = indices[:, 1:]
  sorted_target = create_label_matrix(labels, ref_labels[indices], dtype=torch.int64)
  sorted_rel = create_relevance_matrix(sorted_target, relevances)
  return {
    "H-AP": hap(sorted_rel, relevances, reduce=False),
    "ASI": asi(sorted_target, reduce=False),
    "NDCG": ndcg(sorted_target, reduce=False),
  }
