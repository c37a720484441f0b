r"""Hashing evaluation of a database: `evaluate_hashing`, by counting per Hamming distance.

The hashing literature ranks a database by the Hamming distances of `b`-bit codes to each query
and reports AP over the whole database, AP at a cut-off (mAP@5000 on NUS-WIDE, mAP@1000 on
ImageNet100) and, for graded affinities, NDCG. He et al. 2018 ("Hashing as Tie-Aware Learning to
Rank", sec. 3.2 and 5) observe that only `b + 1` distances exist, so for each query the database
collapses into the histograms `n_{d,v}` of items at distance `d` of affinity level `v`, from which
the tie-aware AP_T and NDCG_T (the means over every ordering of tied items, Prop. 1) follow
exactly in `O(b + |V|)` (the paper's counting sort). `evaluate_hashing` builds those histograms
query chunk by query chunk (never the `Q x N` matrix) and reads the metrics off them with the
estimators of `jaxrank._src.tie_aware` (exact on such histograms: `hamming_tie_aware_ap_metric` is
the same computation on a list); the truncated AP takes the first `k` items of each query's
ranking with ties in database order (`jax.lax.top_k`, which keeps the lower index first), by the
textbook rule or by He et al.'s released code's (`convention`), averaged over the queries that
the released codes each average (`averaged_over`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import histogram
from jaxrank._src import tie_aware

DEFAULT_CHUNK_SCORES = 2**26
"""The most distances (`chunk_size * N`) of a default chunk: 256 MB of int32 per `[c, N]` array
(256 queries against NUS-WIDE's 195,834 images); a chunk holds a few such arrays."""


def _as_codes(fn, name, codes):
  """`(codes as float32 [n, b], the values among -1 and 0 that occur)`, checked to be binary:
  +-1 or {0, 1} (integers, floats or booleans)."""
  codes = np.asarray(codes)
  if codes.dtype == np.bool_:
    codes = codes.astype(np.int8)
  checks.check_array(fn, name, codes, kind="numeric", ndim=2, layout="[count, b]")
  if codes.shape[0] == 0 or codes.shape[1] == 0:
    raise ValueError(f"{fn}: {name} are empty (shape {codes.shape}); give at least one code.")
  negative, zero = codes == -1, codes == 0
  bad = ~(negative | zero | (codes == 1))
  if bad.any():
    raise ValueError(
      f"{fn}: {name} must be binary codes of +-1 or of {{0, 1}}, got {codes[bad][0].item()!r}; "
      "binarize them first, e.g. jaxrank.hashing.binarize(codes)."
    )
  present = {v for v, mask in ((-1, negative), (0, zero)) if mask.any()}
  return codes.astype(np.float32), present


def _codes(fn, query_codes, database_codes):
  """Both code sets as float32 +-1 `[Q, b]`, `[N, b]`, after checking they are of one kind."""
  queries, q_values = _as_codes(fn, "query_codes", query_codes)
  database, d_values = _as_codes(fn, "database_codes", database_codes)
  values = q_values | d_values
  if {-1, 0} <= values:
    raise ValueError(
      f"{fn}: the codes mix -1 and 0; give both sets as +-1 codes or both as {{0, 1}} bits."
    )
  if 0 in values:  # {0, 1} bits.
    queries, database = 2 * queries - 1, 2 * database - 1
  if queries.shape[1] != database.shape[1]:
    raise ValueError(
      f"{fn}: query_codes {queries.shape} and database_codes {database.shape} differ in length "
      "(the last axis is the number of bits b)."
    )
  return queries, database


def _labels(fn, name, labels, n):
  """Class labels `[n]` (integers) or multi-hot labels `[n, C]` (integers or booleans, 0/1)."""
  labels = np.asarray(labels)
  if labels.ndim == 2:
    if not (np.issubdtype(labels.dtype, np.integer) or labels.dtype == np.bool_):
      raise TypeError(f"{fn}: multi-hot {name} must be integers or booleans, got {labels.dtype}.")
    checks.check_shape(fn, name, labels, (n, None), layout=f"[{n}, C]", hint="One row per code.")
    if labels.size and (labels.min() < 0 or labels.max() > 1):
      raise ValueError(f"{fn}: multi-hot {name} must be 0 or 1, got values outside.")
    return labels.astype(np.float32)
  checks.check_int_labels(fn, name, labels, layout=f"[{n}]")
  checks.check_shape(fn, name, labels, (n,), layout=f"[{n}]", hint="One class label per code.")
  return labels.astype(np.int32)


class _Relevance:
  """How a chunk's affinity levels are found: the kind, the number of levels above 0 (`levels`,
  static), the database's side on the device, and a function of a chunk's rows giving the
  queries' side (`query_side(rows)`: labels, or a host block of the affinity)."""

  def __init__(self, fn, query_labels, database_labels, affinity, num_queries, num_items):
    self.fn = fn
    if affinity is not None:
      if query_labels is not None or database_labels is not None:
        raise ValueError(f"{fn}: give either labels or affinity=, not both.")
      self.kind, self.affinity = "affinity", self._check_affinity(affinity, num_queries, num_items)
      self.database = jnp.zeros((), jnp.int32)
      self.levels = 1
      for begin in range(0, num_queries, 1024):  # One pass over the host blocks for the levels.
        self.levels = max(self.levels, int(self._block(np.arange(begin, num_queries)[:1024]).max()))
      return
    if query_labels is None or database_labels is None:
      raise ValueError(
        f"{fn}: give query_labels and database_labels ([Q] and [N] class labels, or [Q, C] and "
        "[N, C] multi-hot labels), or affinity= ([Q, N])."
      )
    q = _labels(fn, "query_labels", query_labels, num_queries)
    d = _labels(fn, "database_labels", database_labels, num_items)
    if q.ndim != d.ndim or q.shape[1:] != d.shape[1:]:
      raise ValueError(
        f"{fn}: database_labels have shape {d.shape}, which does not match query_labels of "
        f"shape {q.shape} (the same kind of labels, one row per code)."
      )
    self.query_labels, self.database = q, jnp.asarray(d)
    if q.ndim == 1:
      self.kind, self.levels = "class", 1
    else:  # The number of shared labels: at most the most labels of any code on either side.
      self.kind = "multi_hot"
      most = min(int(q.sum(axis=1).max()), int(d.sum(axis=1).max()))
      self.levels = max(most, 1)

  def _check_affinity(self, affinity, num_queries, num_items):
    affinity = np.asarray(affinity) if not hasattr(affinity, "shape") else affinity
    dtype = np.dtype(affinity.dtype)
    if not (np.issubdtype(dtype, np.number) or dtype == np.bool_):
      raise TypeError(f"{self.fn}: affinity must be numeric or boolean, got dtype {dtype}.")
    checks.check_shape(
      self.fn,
      "affinity",
      affinity,
      (num_queries, num_items),
      layout=f"[Q, N] = [{num_queries}, {num_items}]",
      hint="One row per query, one column per database item.",
    )
    return affinity

  def _block(self, rows):
    """The affinity levels of the queries `rows` (consecutive), int32 `[c, N]`, checked."""
    block = np.asarray(self.affinity[rows[0] : rows[-1] + 1])
    if block.dtype != np.bool_ and (
      np.any(block != np.round(block)) or np.any(block < 0) or np.any(np.isnan(block))
    ):
      raise ValueError(
        f"{self.fn}: affinity must hold non-negative integer levels (He et al.'s multi-level "
        "affinities; an item is relevant at level >= 1); round or clip it."
      )
    return block.astype(np.int32)

  def query_side(self, rows):
    """The queries' side for the chunk `rows [c]` (-1: padding, given row 0's)."""
    safe = np.maximum(rows, 0)
    if self.kind == "affinity":
      valid = safe[rows >= 0]
      block = self._block(valid)
      return np.pad(block, ((0, len(rows) - len(valid)), (0, 0)))
    return self.query_labels[safe]


@functools.partial(jax.jit, static_argnames=("kind", "levels", "ks", "released"))
def _evaluate_chunk(queries, database, query_side, database_side, *, kind, levels, ks, released):
  """Per-query metrics of a chunk and its counts of relevant items (`num_relevant`, and
  `num_relevant@k` in the first `k`): its histograms `n_{d,v}` by one scatter of `[c, N]` keys,
  and for each cut-off the AP of the first `k` items (`top_k` of the negated distances: ties in
  database order), without the rank-1 term if `released`."""
  num_bits = queries.shape[1]
  c, n = queries.shape[0], database.shape[0]
  # Exact integers in float32 (|dot| <= b <= 2**24), rounded against any reassociation.
  dots = jnp.matmul(queries, database.T, preferred_element_type=jnp.float32)
  distance = jnp.round((num_bits - dots) / 2).astype(jnp.int32)
  if kind == "class":
    level = (query_side[:, None] == database_side[None, :]).astype(jnp.int32)
  elif kind == "multi_hot":
    shared = jnp.matmul(query_side, database_side.T, preferred_element_type=jnp.float32)
    level = jnp.round(shared).astype(jnp.int32)
  else:
    level = query_side
  width = levels + 1
  keys = distance * width + level
  counts = jnp.zeros((c, (num_bits + 1) * width), jnp.int32)
  counts = counts.at[jnp.arange(c)[:, None], keys].add(1, mode="drop")
  counts = counts.reshape(c, num_bits + 1, width)  # n_{d,v}: distance d, level v.
  dtype = jnp.result_type(float)
  out = _tie_aware_metrics(counts.astype(dtype), levels)
  found = {"num_relevant": jnp.sum(counts[..., 1:], axis=(1, 2))}
  if ks:
    top = min(max(ks), n)
    _, index = jax.lax.top_k(-distance.astype(jnp.float32), top)  # Lower index first in ties.
    relevant = (jnp.take_along_axis(level, index, axis=1) >= 1).astype(dtype)
    hits = jnp.cumsum(relevant, axis=1)
    precision = hits / jnp.arange(1, top + 1, dtype=dtype)
    first = 1 if released else 0  # The released code's sum starts at rank 2.
    for k in ks:
      kk = min(k, n)
      found[f"num_relevant@{k}"] = hits[:, kk - 1].astype(jnp.int32)
      total = jnp.sum(precision[:, first:kk] * relevant[:, first:kk], axis=1)
      out[f"map@{k}"] = total / jnp.maximum(hits[:, kk - 1], 1)
  return out, found


def _tie_aware_metrics(counts, levels):
  """AP_T and NDCG_T `[c]` from the histograms `counts [c, b + 1, V + 1]` (Prop. 1): AP_T on the
  relevant (level >= 1) and total counts per distance, DCG_T on the gain-weighted counts, the
  ideal DCG as DCG_T of the levels in decreasing order (each level one tie of equal gains)."""
  total = jnp.sum(counts, axis=-1)
  relevant = jnp.sum(counts[..., 1:], axis=-1)
  num_relevant = jnp.sum(relevant, axis=-1)
  ap = tie_aware.tie_aware_ap_estimate(
    histogram.SoftHistograms(relevant=relevant, total=total), num_relevant
  )
  gain = jnp.exp2(jnp.arange(levels + 1, dtype=counts.dtype)) - 1
  dcg = tie_aware.tie_aware_dcg_estimate(
    histogram.SoftHistograms(relevant=counts @ gain, total=total)
  )
  per_level = jnp.sum(counts, axis=1)[:, ::-1]  # Best level first.
  ideal = tie_aware.tie_aware_dcg_estimate(
    histogram.SoftHistograms(relevant=per_level * gain[::-1], total=per_level)
  )
  ndcg = dcg / jnp.where(ideal > 0, ideal, 1)
  return {"tie_aware_map": ap, "tie_aware_ndcg": ndcg}


def default_chunk_size(num_items: int) -> int:
  """`evaluate_hashing`'s default `chunk_size`: 1,024 queries, halved while a chunk against
  `num_items` database items would hold more than `DEFAULT_CHUNK_SCORES` distances, down to 2."""
  chunk = 1024
  while chunk > 2 and chunk * num_items > DEFAULT_CHUNK_SCORES:
    chunk //= 2
  return chunk


def evaluate_hashing(
  query_codes: jax.typing.ArrayLike,
  database_codes: jax.typing.ArrayLike,
  query_labels: jax.typing.ArrayLike | None = None,
  database_labels: jax.typing.ArrayLike | None = None,
  *,
  affinity: jax.typing.ArrayLike | None = None,
  ks: Sequence[int] = (),
  convention: str = "textbook",
  averaged_over: str = "relevant_in_database",
  chunk_size: int | None = None,
  reduce_fn: types.ReduceFn | None = np.mean,
) -> dict[str, float] | dict[str, np.ndarray]:
  r"""Hamming-ranking metrics of a query set against a database, by counting per distance.

  Every query ranks the whole database by the Hamming distance of their `b`-bit codes (the
  hashing protocol of He et al. 2018, sec. 5: CIFAR-10, NUS-WIDE, ImageNet100; the query set and
  the database are disjoint, so nothing is left out). Relevance comes from one of:

  * integer class labels `[Q]` and `[N]`: relevant iff the classes are equal (level 1, else 0);
  * multi-hot labels `[Q, C]` and `[N, C]` (0/1): the level is the number of shared labels, and
    an item is relevant iff it shares at least one (He et al.'s NUS-WIDE protocol: AP on "share
    at least one label", NDCG with the number of shared labels as the graded affinity);
  * `affinity=`, a given `[Q, N]` matrix of non-negative integer levels (the paper's multi-level
    affinities), numeric or boolean, relevant iff `>= 1`; it may stay in host memory (a numpy
    array or memmap), read a block of rows at a time.

  Returned metrics, per query, then averaged over the queries that `averaged_over` selects:

  * `tie_aware_map`: AP_T over the whole database (Prop. 1, eq. 6), the mean of AP over every
    ordering of the tied items; what `hamming_tie_aware_ap_metric` gives on the query's list;
  * `tie_aware_ndcg`: NDCG_T over the whole database (eq. 7) with gain `2^v - 1` of the level `v`,
    normalised by the DCG of the ideal order; what `hamming_tie_aware_ndcg_metric` gives;
  * `map@k` for each `k` in `ks`: the hashing literature's truncated AP (mAP@5000, mAP@1000; not
    MAP@R). The database is ranked by increasing distance, **ties in database order** (the lower
    index first, as a stable sort, `np.argsort(distances, kind="stable")`), and with `rel_t` the
    relevance of the item at position `t` of that ranking (`k` beyond `N` is `N`),

    .. math::
      \mathrm{AP@}k = \frac{1}{\sum_{t \le k} rel_t} \sum_{t=t_0}^{k} rel_t\,
          \frac{\sum_{s \le t} rel_s}{t}

    (0 when none of the first `k` is relevant): the normaliser is the number of relevant items in
    the top `k`, and a tie that straddles position `k` contributes its items of lowest index.

  `convention` sets `t_0`, where the released codes' AP@k differ (besides the order of ties):

  * `"textbook"` (the default): `t_0 = 1`, the mean of the precisions at the relevant items of the
    top `k`. This is the AP@k of HashNet's code (thuml/HashNet, `mean_average_precision` in
    `pytorch/src/test.py` and `caffe/models/predict/*/predict_parallel.py`) and of DPSH's
    (jiangqy/DPSH-pytorch, `CalcTopMap` in `utils/CalcHammingRanking.py`) up to the order of ties:
    they rank with numpy's default `argsort`, which is not stable, so a tie's order is numpy's.
  * `"released"`: `t_0 = 2`, He et al.'s code (kunhe/TALR, `get_AP` in `+eval/AP.m`; the same
    function in fcakir/deep-mihash, `evaluate_AP.m`), which weighs each precision by the
    increase of recall `[0, diff(recall)]` and so drops the first rank's term; it lists each
    distance's items in database order (`find`), as here, so the two agree query for query. It
    is what TALR's demos compute for the AP@5K (NUS-WIDE, `+demo/AP.m`) and AP@1000
    (ImageNet100, `+demo/imagenet.m`) of He et al.'s tables, unchanged since the code's first
    release (2018-06-13). A relevant item at rank 1 adds `1 / sum rel` to the textbook value and
    nothing to this one: one query `0000` against the database `0000` (relevant), `1111` at
    `k = 2` gives 1 and 0 (the example below); at `k = 1` this value is always 0.

  The tie-aware metrics take no convention: TALR's `+eval/tieAP.m` computes the same AP_T, and
  `+eval/tieNDCG.m` the same NDCG_T (to its single precision, 1e-7) while no pair shares 7 or more
  labels: its gains are int8, `2^v - 1` saturated at 126 from `v = 7`. `averaged_over` chooses
  the queries averaged, as each released code does for a query without a relevant item:

  * `"relevant_in_database"` (the default): the queries with a relevant item in the database;
    one without any in its top `k` counts 0 in `map@k` (HashNet's Caffe `predict_parallel.py`).
  * `"all"`: every query; one without a relevant item has AP 0 (`map@k`, `tie_aware_map`) and
    NDCG_T 1. TALR's `AP.m` (0) and `tieNDCG.m` (1: its ideal DCG is 0), DPSH's `CalcTopMap`
    and `CalcMap` (0: the other queries' sum over all). TALR's `tieAP.m` counts such a query 0
    too, except those after its last query with a relevant item, which it leaves out (its array
    of values grows only to the last query it assigns).
  * `"relevant_in_top_k"`: in `map@k`, the queries with a relevant item in their top `k`
    (HashNet's PyTorch `test.py`); in the tie-aware metrics, as the default.

  On the papers' benchmarks every query has a relevant item in the database, so the default and
  `"all"` agree there. He et al.'s numbers: `convention="released", averaged_over="all"`;
  HashNet's PyTorch ones: `averaged_over="relevant_in_top_k"`; DPSH's: `averaged_over="all"`
  (its `CalcMap`: `ks=(N,)`), the last two up to the order of ties.

  **Cost.** For each chunk of queries, one `[c, b] x [b, N]` product gives the distances, one
  `[c, N]` comparison (class labels) or `[c, C] x [C, N]` product (multi-hot) the levels, and one
  scatter-add the histograms `n_{d,v}`, `[c, b + 1, V + 1]` integers; the metrics come from those
  in O(b + V) per query. Each cut-off adds a `jax.lax.top_k` of the chunk's negated distances
  (`k = max(ks)`), whatever the convention. Time O(Q N (b + C) + Q N log k); memory
  O(chunk_size * N) (a few `[c, N]` int32 arrays), never the `Q x N` matrix; the database's codes
  and labels go to the device once; sums in float32 (float64 with x64). Measured at the scale of
  NUS-WIDE (2,100 x 195,834, 48 bits, 21 labels) by `experiments/benchmarks/hashing_eval.py`;
  docs/guide/hashing.rst gives its numbers. The scatter is cheap on CPUs and GPUs; a TPU
  serialises it.

  Args:
    query_codes: `[Q, b]` binary codes, `+-1` or `{0, 1}` (integer, floating or boolean), as
      `jaxrank.hashing.binarize` gives them; `Q >= 1`.
    database_codes: `[N, b]` codes of the same kind and length, `N >= 1`.
    query_labels: `[Q]` integer class labels or `[Q, C]` multi-hot labels; `None` with `affinity`.
    database_labels: `[N]` or `[N, C]`, of the same kind as `query_labels`.
    affinity: optional `[Q, N]` non-negative integer affinity levels instead of labels.
    ks: the cut-offs of `map@k` (e.g. `(5000,)` for NUS-WIDE, `(1000,)` for ImageNet100); `()`
      for none (the default).
    convention: `"textbook"` (default) or `"released"` (He et al.'s code): the AP@k above.
    averaged_over: `"relevant_in_database"` (default), `"all"` or `"relevant_in_top_k"`: the
      queries averaged, above.
    chunk_size: queries per step; `None`: 1,024, halved while a chunk would hold more than
      `DEFAULT_CHUNK_SCORES` distances (256 against NUS-WIDE's database).
    reduce_fn: the reduction over queries, called as `reduce_fn(values, where=averaged)` on numpy
      float64 arrays `[Q]`, `averaged` the boolean `[Q]` selection of `averaged_over` (default
      `np.mean`: their mean, 0 if none); `None` returns the per-query values.

  Returns:
    A dict of Python floats with keys `tie_aware_map`, `tie_aware_ndcg` and `map@k` for each `k`.
    With `reduce_fn=None`, float64 arrays `[Q]` under the same keys (a query without a relevant
    item: 0, but NDCG_T 1 with `averaged_over="all"`) and the int32 `[Q]` counts from which each
    selection follows: `num_relevant` (in the database) and `num_relevant@k` (in the top `k`).

  >>> import numpy as np
  >>> queries = np.array([[1, 1, 1, 1]])
  >>> database = np.array([[1, 1, 1, -1], [1, 1, -1, 1], [-1, -1, -1, -1]])
  >>> # Distances 1, 1, 4; the two tied items: one irrelevant (index 0), one relevant.
  >>> result = evaluate_hashing(queries, database, np.array([0]), np.array([1, 0, 0]), ks=(2,))
  >>> {key: round(value, 4) for key, value in result.items()}
  {'tie_aware_map': 0.7083, 'tie_aware_ndcg': 0.8066, 'map@2': 0.5}
  >>> # He et al.'s code drops rank 1: query 0000, database 0000 (relevant) and 1111, k = 2.
  >>> bits, relevant = np.array([[0, 0, 0, 0], [1, 1, 1, 1]]), np.array([0, 1])
  >>> for convention in ("textbook", "released"):
  ...   result = evaluate_hashing(bits[:1], bits, [0], relevant, ks=(2,), convention=convention)
  ...   print(convention, result["map@2"])
  textbook 1.0
  released 0.0
  """
  fn = "evaluate_hashing"
  ks = tuple(ks)
  for k in ks:
    checks.check_positive_int(fn, "each k in ks", k)
  _check_choice(fn, "convention", convention, CONVENTIONS)
  _check_choice(fn, "averaged_over", averaged_over, AVERAGED_OVER)
  if reduce_fn is not None:
    checks.check_callable(fn, "reduce_fn", reduce_fn, hint="e.g. np.mean, or None per query.")
  if chunk_size is not None:
    checks.check_positive_int(fn, "chunk_size", chunk_size)
  queries, database = _codes(fn, query_codes, database_codes)
  relevance = _Relevance(fn, query_labels, database_labels, affinity, len(queries), len(database))
  per_query, found = _per_query(
    queries, database, relevance, ks, released=convention == "released", chunk_size=chunk_size
  )
  if averaged_over == "all":  # He et al.'s tieNDCG.m: NDCG 1 where the ideal DCG is 0.
    ndcg = per_query["tie_aware_ndcg"]
    per_query["tie_aware_ndcg"] = np.where(found["num_relevant"] > 0, ndcg, 1.0)
  if reduce_fn is None:
    return per_query | found
  reduced = {}
  for key, value in per_query.items():
    averaged = _averaged(key, found, averaged_over)
    if reduce_fn is np.mean or reduce_fn is jnp.mean:
      reduced[key] = float(value[averaged].sum()) / max(int(averaged.sum()), 1)
    else:
      reduced[key] = float(reduce_fn(value, where=averaged))
  return reduced


CONVENTIONS = ("textbook", "released")
"""`evaluate_hashing`'s `convention`s: the textbook AP@k, or He et al.'s released code's."""

AVERAGED_OVER = ("relevant_in_database", "all", "relevant_in_top_k")
"""`evaluate_hashing`'s `averaged_over`: the queries its reduction takes."""


def _check_choice(fn, name, value, choices):
  if not isinstance(value, str) or value not in choices:
    raise ValueError(
      f"{fn}: {name} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}."
    )


def _averaged(key, found, averaged_over):
  """The boolean `[Q]` selection of the queries that the reduction of metric `key` takes."""
  if averaged_over == "all":
    return np.ones(found["num_relevant"].shape, bool)
  if averaged_over == "relevant_in_top_k" and key.startswith("map@"):
    return found[f"num_relevant@{key[4:]}"] > 0
  return found["num_relevant"] > 0


def _per_query(queries, database, relevance, ks, *, released, chunk_size):
  """The per-query metrics, float64 `[Q]` (0 for a query without a relevant item in the
  database), and the int32 `[Q]` counts of relevant items, chunk by chunk."""
  num_queries, n = len(queries), len(database)
  chunk = max(min(chunk_size or default_chunk_size(n), num_queries), 2)
  chunk = max(-(-num_queries // -(-num_queries // chunk)), 2)  # Even chunks: little padding.
  query_set, database_codes_on_device = jnp.asarray(queries), jnp.asarray(database)
  results = []
  for begin in range(0, num_queries, chunk):
    rows = np.arange(begin, begin + chunk)
    rows = np.where(rows < num_queries, rows, -1)
    results.append(
      _evaluate_chunk(
        jnp.take(query_set, jnp.asarray(np.maximum(rows, 0)), axis=0),
        database_codes_on_device,
        jnp.asarray(relevance.query_side(rows)),
        relevance.database,
        kind=relevance.kind,
        levels=relevance.levels,
        ks=ks,
        released=released,
      )
    )
  results = jax.device_get(results)
  found = {
    key: np.concatenate([f[key] for _, f in results])[:num_queries].astype(np.int32)
    for key in results[0][1]
  }
  counted = found["num_relevant"] > 0
  per_query = {
    key: np.where(counted, np.concatenate([v[key] for v, _ in results])[:num_queries], 0.0)
    for key in ["tie_aware_map", "tie_aware_ndcg"] + [f"map@{k}" for k in ks]
  }
  return {key: value.astype(np.float64) for key, value in per_query.items()}, found
