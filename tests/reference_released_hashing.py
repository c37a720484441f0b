"""Numpy transcriptions of the hashing papers' released evaluation code, line for line, for
`test_hashing_evaluation.py` (`jaxrank.evaluate_hashing`'s `convention` and `averaged_over`).

Each function names the file it transcribes (repository, path, commit) and keeps its steps in the
original's order, with the original's names; the few changes are marked "Change:" (0-based
indices, numpy spellings of Matlab built-ins, a sort kind as a parameter). Checked by hand
against the originals:

* kunhe/TALR at 9a932966ada9835becb5715bfe9398638bee1e1e (He et al. 2018's code):
  `+eval/AP.m` (`talr_ap`), `+eval/tieAP.m` (`talr_tie_ap`), `+eval/tieNDCG.m`
  (`talr_tie_ndcg`), and the affinities of `main/affinity_binary.m` / `main/affinity_multlv.m`
  (`talr_affinity`). fcakir/deep-mihash's `evaluate_AP.m` (8f436f026eae1648125a1eb0da306069b52d497e,
  MIHash's) has the same loop and the same `get_AP`, so `talr_ap` stands for it too.
* thuml/HashNet at 85387b814fcf95daff887bd325cbaa0e8def7323: `mean_average_precision` of
  `pytorch/src/test.py` (`hashnet_pytorch_map`) and of `caffe/models/predict/imagenet/
  predict_parallel.py` (`hashnet_caffe_map`; the coco and nuswide_81 copies are the same).
* jiangqy/DPSH-pytorch at 042318182814a03c8bc77a331037f331d988f508: `CalcTopMap` and `CalcMap`
  of `utils/CalcHammingRanking.py` (`dpsh_calc_top_map`, `dpsh_calc_map`).

Matlab's `H` are `nbits x N` logical codes; these functions take them as `[N, nbits]` {0, 1}
arrays and transpose. HashNet and DPSH rank with numpy's default `argsort` (quicksort, not stable:
the order of a tie is numpy's); `kind` defaults to that, and the tests pass `"stable"` to compare
with jaxrank's database order of ties.
"""

from __future__ import annotations

import numpy as np


def talr_affinity(y1, y2, *, multi_level=False):
  """`affinity_binary.m` (`Y1 * Y2' > 0`, or `==` for one label column) or, with
  `multi_level`, `affinity_multlv.m` (`int16(Y1 * Y2')`, or the equality as 0/1)."""
  y1, y2 = np.asarray(y1), np.asarray(y2)
  if y1.ndim == 1:  # Dy == 1: bsxfun(@eq, Y1, Y2').
    aff = y1[:, None] == y2[None, :]
    return aff.astype(np.int16) if multi_level else aff
  product = y1.astype(np.float64) @ y2.astype(np.float64).T
  return product.astype(np.int16) if multi_level else product > 0


def _talr_get_ap(rel):
  """`get_AP(l)` of `+eval/AP.m` (`l` is `rel` here): precision weighted by the increase of
  recall, `drl(1) = 0`."""
  rel = np.asarray(rel, np.float64)
  cl = np.cumsum(rel)
  pl = cl / np.arange(1, len(rel) + 1)
  rl = cl / np.sum(rel) if np.sum(rel) != 0 else np.zeros(len(cl))
  drl = np.concatenate([[0.0], np.diff(rl)])
  return np.sum(drl * pl)


def talr_ap(h_test, h_train, aff, cutoff=None):
  """`+eval/AP.m`: `(mean(AP), AP [Ntest])` of the regular (tie-unaware) ranking at `cutoff`.
  Change: the optimistic and pessimistic bounds it also logs are left out."""
  h_test, h_train = np.asarray(h_test).T, np.asarray(h_train).T  # nbits x N.
  nbits, n_test = h_test.shape
  assert h_train.shape[0] == nbits
  n_train = h_train.shape[1]
  cutoff = n_train if cutoff is None else min(cutoff, n_train)
  aff = np.asarray(aff) > 0
  phi_t = 2.0 * h_test - 1
  phi_r = 2.0 * h_train - 1
  hdist = (nbits - phi_t.T @ phi_r) / 2
  ap = np.zeros(n_test)
  for i in range(n_test):
    a = aff[i, :]
    d = hdist[i, :]
    ir = np.zeros(0, np.int64)
    n = 0
    for dist in range(nbits + 1):
      idx = np.flatnonzero(d == dist)  # find(): database order.
      ir = np.concatenate([ir, idx])
      n = n + len(idx)
      if n >= cutoff:
        break
    ap[i] = _talr_get_ap(a[ir[:cutoff]])
  return np.mean(ap), ap


def talr_tie_ap(h_test, h_train, aff):
  """`+eval/tieAP.m`: `mean(AP_t)`, and `AP_t` itself. The file allocates `APt` but assigns
  `AP_t(i)`, an array Matlab grows to the last index assigned (zeros between): a query without
  a relevant item (`continue`) is 0 before the last query with one and absent after it."""
  h_test, h_train = np.asarray(h_test).T, np.asarray(h_train).T
  nbits, n_test = h_test.shape
  assert h_train.shape[0] == nbits
  phi_t = 2.0 * h_test - 1
  phi_r = 2.0 * h_train - 1
  hdist = ((nbits - phi_t.T @ phi_r) / 2).astype(np.int64)
  aff = np.asarray(aff) > 0
  n_p = np.sum(aff, axis=1)
  ap_t = np.zeros(0)
  for i in range(n_test):
    if n_p[i] == 0:
      continue
    n_d = np.bincount(hdist[i, :], minlength=nbits + 1).astype(np.float64)  # accumarray.
    n_dp = np.bincount(hdist[i, aff[i, :]], minlength=nbits + 1).astype(np.float64)
    nd_p = np.cumsum(n_dp)
    nd = np.cumsum(n_d)
    np0 = np.zeros(nd_p.shape)
    n0 = np.zeros(nd.shape)
    np0[1:] = nd_p[:-1]
    n0[1:] = nd[:-1]
    # 1. exact solution for no ties
    with np.errstate(invalid="ignore", divide="ignore"):
      apt_i = n_dp * nd_p / nd
    apt_i[nd == 0] = 0
    # 2. update where there are ties
    for d in np.flatnonzero((n_d > 1) & (n_dp > 0)):  # `l` there.
      mult = (n_dp[d] - 1) / (n_d[d] - 1)
      nume = np0[d] + 1 + np.arange(n_d[d]) * mult
      deno = n0[d] + np.arange(1, n_d[d] + 1)
      apt_i[d] = np.mean(nume / deno) * n_dp[d]
    if len(ap_t) <= i:  # AP_t(i) = ...: Matlab grows the array, zeros in between.
      ap_t = np.concatenate([ap_t, np.zeros(i + 1 - len(ap_t))])
    ap_t[i] = np.sum(apt_i) / n_p[i]
  return np.mean(ap_t), ap_t


def _int8_gain(aff):
  """`2.^Aff - 1` of an int8 `Aff`: Matlab's (and Octave's) integer power saturates at 127, so a
  level of 7 or more has gain 126, not `2^v - 1`; `accumarray` then sums in double."""
  return np.minimum(2.0 ** np.asarray(aff, np.float64), 127) - 1


def talr_tie_ndcg(h_test, h_train, aff):
  """`+eval/tieNDCG.m`: `(mean(NDCGt), NDCGt [Ntest])`, `aff` the multi-level affinity. Its
  ideal DCG is single precision (`single(2.^Aff_sorted-1) * Discount'`), so the result is.
  Change: Octave needs `sort`'s mode in lower case (`'descend'`); Matlab takes either."""
  h_test, h_train = np.asarray(h_test).T, np.asarray(h_train).T
  nbits, n_train = h_train.shape
  assert h_test.shape[0] == nbits
  n_test = h_test.shape[1]
  discount = 1 / np.log2(np.arange(1, n_train + 1) + 1)
  cd = np.concatenate([[0.0], np.cumsum(discount)])
  aff = np.clip(np.round(np.asarray(aff, np.float64)), -128, 127).astype(np.int8)  # int8(Aff).
  aff_sorted = -np.sort(-aff.astype(np.int64), axis=1)  # sort(Aff, 2, 'Descend').
  dcg_i = _int8_gain(aff_sorted).astype(np.float32) @ discount.astype(np.float32)
  dcg_t = np.zeros(n_test)
  for i in range(n_test):
    hdist = ((nbits - (2.0 * h_test[:, i] - 1) @ (2.0 * h_train - 1)) / 2).astype(np.int64)
    nd = np.bincount(hdist, minlength=nbits + 1)
    big_nd = np.cumsum(nd)
    nz = np.flatnonzero(nd)
    g_hat = np.bincount(hdist, weights=_int8_gain(aff[i, :]), minlength=nbits + 1)
    # Change: Matlab's CD(x + 1) (1-based) is cd[x].
    d_bar = cd[big_nd[nz]] - cd[big_nd[nz] - nd[nz]]
    dcg_t[i] = np.dot(g_hat[nz] / nd[nz], d_bar)
  with np.errstate(invalid="ignore", divide="ignore"):
    ndcg_t = (dcg_t / dcg_i).astype(np.float32)  # double ./ single: single.
  ndcg_t[dcg_i == 0] = 1
  return np.mean(ndcg_t), ndcg_t


def hashnet_pytorch_map(params, R, *, kind="quicksort"):
  """`mean_average_precision(params, R)` of HashNet's `pytorch/src/test.py`: only the queries
  with a relevant item in their top `R` are averaged. Labels are one-hot or multi-hot rows."""
  database_code = params["database_code"]
  validation_code = params["test_code"]
  database_labels = params["database_labels"]
  validation_labels = params["test_labels"].copy()  # Change: the original edits it in place.
  query_num = validation_code.shape[0]

  sim = np.dot(database_code, validation_code.T)
  ids = np.argsort(-sim, axis=0, kind=kind)
  APx = []

  for i in range(query_num):
    label = validation_labels[i, :]
    label[label == 0] = -1
    idx = ids[:, i]
    imatch = np.sum(database_labels[idx[0:R], :] == label, axis=1) > 0
    relevant_num = np.sum(imatch)
    Lx = np.cumsum(imatch)
    Px = Lx.astype(float) / np.arange(1, R + 1, 1)
    if relevant_num != 0:
      APx.append(np.sum(Px * imatch) / relevant_num)

  return np.mean(np.array(APx))


def hashnet_caffe_map(params, *, kind="quicksort"):
  """`mean_average_precision(params)` of HashNet's Caffe `predict_parallel.py`: the queries with
  a relevant item in the database are averaged, 0 for one without any in its top `R`."""
  database_code = params["database_code"]
  validation_code = params["validation_code"]
  database_labels = params["database_labels"]
  validation_labels = params["validation_labels"].copy()  # Change: edited in place there.
  R = params["R"]
  query_num = validation_code.shape[0]

  sim = np.dot(database_code, validation_code.T)
  ids = np.argsort(-sim, axis=0, kind=kind)
  APx = []
  ground_truth = np.sum(np.dot(database_labels, validation_labels.T), axis=0)
  validation_labels[validation_labels == 0] = -1
  for i in range(query_num):
    label = validation_labels[i, :]
    if ground_truth[i] > 0:
      idx = ids[:, i]
      imatch = np.sum(database_labels[idx[0:R], :] == label, axis=1) > 0
      relevant_num = np.sum(imatch)
      Lx = np.cumsum(imatch)
      Px = Lx.astype(float) / np.arange(1, R + 1, 1)
      if relevant_num != 0:
        APx.append(np.sum(Px * imatch) / relevant_num)
      else:
        APx.append(np.sum(Px * imatch) / 1)

  return np.mean(np.array(APx))


def _dpsh_hamming(b1, b2):
  """`CalcHammingDist(B1, B2)`."""
  q = b2.shape[1]
  return 0.5 * (q - np.dot(b1, b2.transpose()))


def dpsh_calc_top_map(qB, rB, queryL, retrievalL, topk, *, kind="quicksort"):
  """DPSH's `CalcTopMap`: a query without a relevant item in its top `topk` adds nothing to the
  sum, which is divided by every query. Change: `np.linspace`'s count as an int (newer numpy
  refuses the float the original passes)."""
  num_query = queryL.shape[0]
  topkmap = 0
  for it in range(num_query):
    gnd = (np.dot(queryL[it, :], retrievalL.transpose()) > 0).astype(np.float32)
    hamm = _dpsh_hamming(qB[it, :], rB)
    ind = np.argsort(hamm, kind=kind)
    gnd = gnd[ind]

    tgnd = gnd[0:topk]
    tsum = np.sum(tgnd)
    if tsum == 0:
      continue
    count = np.linspace(1, tsum, int(tsum))

    tindex = np.asarray(np.where(tgnd == 1)) + 1.0
    topkmap_ = np.mean(count / (tindex))
    topkmap = topkmap + topkmap_
  topkmap = topkmap / num_query
  return topkmap


def dpsh_calc_map(qB, rB, queryL, retrievalL, *, kind="quicksort"):
  """DPSH's `CalcMap`: AP over the whole ranking, the sum over the queries with a relevant item
  divided by every query. Change: `np.linspace`'s count as an int."""
  num_query = queryL.shape[0]
  map_sum = 0
  for it in range(num_query):
    gnd = (np.dot(queryL[it, :], retrievalL.transpose()) > 0).astype(np.float32)
    tsum = np.sum(gnd)
    if tsum == 0:
      continue
    hamm = _dpsh_hamming(qB[it, :], rB)
    ind = np.argsort(hamm, kind=kind)
    gnd = gnd[ind]
    count = np.linspace(1, tsum, int(tsum))

    tindex = np.asarray(np.where(gnd == 1)) + 1.0
    map_ = np.mean(count / (tindex))
    map_sum = map_sum + map_
  return map_sum / num_query
