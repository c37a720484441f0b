"""Torch transcriptions of the released codes of the smooth-rank losses beyond AP (test baselines).

Each function follows its source line by line (the `.cuda()` calls dropped, the dtype of the
inputs kept, so that float64 embeddings give float64 losses); checked by hand against it:

* `patel_recall_at_k`: yash0307/RecallatK_surrogate, `src/losses.py`, `sigmoid` and
  `RecallatK.forward`, commit ed052029d258555df2f94dd82d6f7df60ef7cc6f. The training loop
  (`src/main.py`) adds the loss of every query `q` of the batch: `patel_recall_at_k_batch`.
* `suprank_*`: elias-ramzi/SupRank, commit d3d0e3cbceee3e8f295fd411daecbe33c1b881bb:
  `tau_sigmoid`, `heaviside`, `step_rank` and `DifferentiableRank.quick_forward` of
  `suprank/losses/tools/differentiable_rank.py`; `compute_recall_loss`, `compute_ndcg_loss` and
  `RankingLoss.forward`'s `1-mean` of `suprank/losses/ranking_loss.py`;
  `create_label_matrix` of `suprank/lib/create_label_matrix.py`.
"""

from __future__ import annotations

import torch


def _patel_sigmoid(tensor, temp=1.0):
  exponent = -tensor / temp
  exponent = torch.clamp(exponent, min=-50, max=50)
  return 1.0 / (1.0 + torch.exp(exponent))


def patel_recall_at_k(preds, q_id, *, num_id, anneal=0.01, k_vals=(1, 2, 4, 8, 16), k_temps=None):
  """`RecallatK(anneal, batch_size, num_id, ...)(preds, q_id)`: the batch sorted in `num_id`
  classes of equal size, `preds` `[B, D]` L2-normalised (as the network's output is)."""
  batch_size = preds.shape[0]
  k_temps = [1] * len(k_vals) if k_temps is None else k_temps
  k_vals = [min(batch_size, k) for k in k_vals]
  samples_per_class = int(batch_size / num_id)
  norm_vals = torch.tensor([min(k, (samples_per_class - 1)) for k in k_vals], dtype=preds.dtype)
  group_num = int(q_id / samples_per_class)

  sim_all = (preds[q_id] * preds).sum(1)
  sim_all_g = sim_all.view(num_id, int(batch_size / num_id))
  sim_diff_all = sim_all.unsqueeze(-1) - sim_all_g[group_num, :].unsqueeze(0).repeat(batch_size, 1)
  sim_sg = _patel_sigmoid(sim_diff_all, temp=anneal)
  for i in range(samples_per_class):
    sim_sg[group_num * samples_per_class + i, i] = 0.0
  sim_all_rk = (1.0 + torch.sum(sim_sg, dim=0)).unsqueeze(dim=0)

  sim_all_rk[:, q_id % samples_per_class] = 0.0
  sim_all_rk = sim_all_rk.unsqueeze(dim=-1).repeat(1, 1, len(k_vals))
  k_vals_t = torch.tensor(k_vals, dtype=preds.dtype)
  k_vals_t = k_vals_t.unsqueeze(dim=0).unsqueeze(dim=0).repeat(1, samples_per_class, 1)
  sim_all_rk = k_vals_t - sim_all_rk
  for given_k in range(0, len(k_vals)):
    sim_all_rk[:, :, given_k] = _patel_sigmoid(
      sim_all_rk[:, :, given_k], temp=float(k_temps[given_k])
    )

  sim_all_rk[:, q_id % samples_per_class, :] = 0.0
  k_vals_loss = torch.tensor(k_vals, dtype=preds.dtype).unsqueeze(dim=0)
  recall = torch.sum(sim_all_rk, dim=1)
  recall = torch.minimum(recall, k_vals_loss)
  recall = torch.sum(recall, dim=0)
  recall = torch.div(recall, norm_vals)
  recall = torch.sum(recall) / len(k_vals)
  return (1.0 - recall) / batch_size


def patel_recall_at_k_batch(preds, *, num_id, **kwargs):
  """`src/main.py`'s training step: the loss summed over every query of the batch."""
  return sum(patel_recall_at_k(preds, q, num_id=num_id, **kwargs) for q in range(preds.shape[0]))


def suprank_tau_sigmoid(tens, tau=0.01):
  exponent = -tens / tau
  exponent = 1.0 + exponent.clamp(-50, 50).exp()
  return (1.0 / exponent).type(tens.dtype)


def suprank_heaviside(tens, val=1.0):
  with torch.no_grad():
    return torch.heaviside(tens, values=torch.tensor(val, dtype=tens.dtype))


def suprank_step_rank(tens, target, tau=0.01, rho=100.0, delta=0.05, start=0.5, offset=None):
  """`step_rank(..., general=False)`: Heaviside against items of equal or higher relevance, the
  sigmoid-then-linear step against the others."""
  dtype = tens.dtype
  inferior_relevance = target.unsqueeze(target.ndim) > target.unsqueeze(target.ndim - 1)
  tens[~inferior_relevance] = suprank_heaviside(tens[~inferior_relevance])
  pos_mask = (tens > 0).bool()
  if offset is None:
    offset = suprank_tau_sigmoid(torch.tensor([delta], dtype=dtype), tau).type(dtype) + start
  margin_mask = tens > delta
  low = inferior_relevance & pos_mask & ~margin_mask
  high = inferior_relevance & pos_mask & margin_mask
  tens[low] = start + suprank_tau_sigmoid(tens[low], tau).type(dtype)
  tens[high] = rho * (tens[high] - delta) + offset
  below = inferior_relevance & (~pos_mask)
  tens[below] = suprank_tau_sigmoid(tens[below], tau).type(dtype)
  return tens


def suprank_quick_forward(scores, target, rank_approximation, *, rank_type="default"):
  """`quick_forward(scores, target, relevances=target)` with `reduce_rank=True` for the recall
  losses; `rank_type="ndcg"` returns `(dcg terms, idcg terms)` `[B, N]`."""
  mask = 1.0 - torch.eye(target.size(1), dtype=scores.dtype).unsqueeze(0)
  sim_diff = scores.unsqueeze(1) - scores.unsqueeze(1).permute(0, 2, 1)
  rank = rank_approximation(torch.clone(sim_diff), target) * mask
  rank = 1.0 + torch.sum(rank, dim=-1)
  if rank_type == "ndcg":
    dcg = ((2**target) - 1) / torch.log2(1 + rank)
    ideal = 1.0 + target.argsort(1, True).argsort(1).to(scores.dtype)
    return dcg, ((2**target) - 1) / torch.log2(1 + ideal)
  return rank[target.bool()].view(rank.size(0), -1)


def suprank_label_matrix(labels, other_labels):
  return (labels.unsqueeze(1) == other_labels.unsqueeze(0)).sum(-1).squeeze().to(torch.int64)


def suprank_recall_loss(rank, normalize_factor, list_at_k, temp=1.0):
  """`compute_recall_loss` and the `1-mean` of `RankingLoss.forward`."""
  recall = torch.zeros(len(rank), dtype=rank.dtype)
  for at_k in list_at_k:
    normalize = torch.where(
      normalize_factor < at_k, normalize_factor, torch.tensor(at_k, dtype=rank.dtype)
    )
    recall += suprank_tau_sigmoid(at_k - rank, temp).sum(-1) / normalize
  return torch.mean(1 - recall / len(list_at_k))


def suprank_recall_at_k(embeddings, labels, *, sup, at_k=(1, 2, 4, 8, 16), tau=0.01, **step):
  """`SmoothRecallLoss` (`sup=False`) or `SupRecallLoss` (`sup=True`) on a batch: `labels` `[B]`,
  the batch its own reference set (`ref_embeddings=None`), hierarchy level 0."""
  scores = torch.mm(embeddings, embeddings.t())
  target = suprank_label_matrix(labels[:, None], labels[:, None])
  if sup:
    approximation = lambda t, y: suprank_step_rank(t, y, tau=tau, **step)  # noqa: E731
  else:
    approximation = lambda t, y: suprank_tau_sigmoid(t, tau)  # noqa: E731
  rank = suprank_quick_forward(scores, target, approximation)
  return suprank_recall_loss(rank, target.sum(-1).to(scores.dtype), at_k)


def suprank_ndcg(embeddings, labels, *, sup, tau=0.01, **step):
  """`SmoothNDCGLoss` (`sup=False`) or `SupNDCGLoss` (`sup=True`) on a batch with
  `hierarchy_level="MULTI"`: `labels` `[B, L]` (one column per level), the relevance of two items
  the number of levels they share (`create_label_matrix`)."""
  scores = torch.mm(embeddings, embeddings.t())
  target = suprank_label_matrix(labels, labels)
  if sup:
    approximation = lambda t, y: suprank_step_rank(t, y, tau=tau, **step)  # noqa: E731
  else:
    approximation = lambda t, y: suprank_tau_sigmoid(t, tau)  # noqa: E731
  dcg, idcg = suprank_quick_forward(scores, target, approximation, rank_type="ndcg")
  return torch.mean(1 - dcg.sum(-1) / idcg.sum(-1))
