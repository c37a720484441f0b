r"""Smooth-rank losses beyond AP: Recall@k (RS@k, SmoothRecall, SupRecall) on the smoothed ranks.

The losses of `jaxrank._src.smooth_rank` read AP from the ranks of each relevant item `k` of a
list, smoothed by step functions (Ramzi et al. 2021, eq. 3):

.. math::
  \mathrm{rank}(k) = 1 + \sum_{j \in P \setminus \{k\}} H^+(s_j - s_k)
    + \sum_{j \in N} H^-(s_j - s_k)

with `P` the relevant valid items of the list and `N` the other valid ones. The same ranks, from the
same engine (no `[B, n, n]` tensor, a custom VJP that counts again, `max_relevant` bounds, the
accelerators' one-shot forms), feed here the other rank metrics (Ramzi et al., SupRank, TPAMI
2023: "any rank-based metric" from the rank surrogate):

* **Recall@k** as Patel et al. 2022 write it (eq. 1: a fraction of the relevant items in the top
  `k`, normalised by the most that fit there), smoothed by a sigmoid of temperature `T_k` in
  `k - rank` (their eq. 4) and averaged over the cut-offs `K`:

  .. math::
    \mathcal{L} = 1 - \frac{1}{|K|} \sum_{k \in K} \frac{1}{\min(k, |P|)}
      \sum_{p \in P} \sigma\!\left(\frac{k - \mathrm{rank}(p)}{T_k}\right)

  `recall_at_k_surrogate_loss` (RS@k: the sigmoid of temperature `T` for every step of the rank),
  `smooth_recall_at_k_loss` (SupRank's SmoothRecall, the same formula) and
  `sup_recall_at_k_loss` (SupRank's SupRecall: SupAP's steps, `H^+ = H` and eq. 4's `H^-`).

Conventions are those of `jaxrank.smooth_rank` (rax's: `[..., n]` lists, `where`, `segments`,
`reduce_fn`, relevant iff label `>= 1`, a list without a relevant valid item gives 0 and is left
out of the reduction, `max_relevant` a static bound whose violation gives NaN). The exact metric
that the losses approximate is the same formula with Heaviside steps (`rank(p) <= k` counts 1).

**Self-inclusion.** The papers rank the query's positives among the rest of the database (the
query itself left out): `jaxrank.batch_retrieval(...)`'s default `include_self=False`. The
released codes differ, each in its own way (see each loss).

**Cost.** Time O(B * P * n) and memory O(B * n) plus one chunk of `B * chunk_size * n` pairs (the
engine's, see `jaxrank.smooth_rank_ap_loss`), plus O(B * len(ks)) for the cut-offs. The metric's
hyperparameters (`ks`, `k_temperature`) take no gradient; the steps' do.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import lists
from jaxrank._src import precision_sums
from jaxrank._src import smooth_rank

# The cut-offs of Patel et al. 2022 (sec. 4, "Implementation details") and of SupRank's configs
# (`suprank/config/loss/suprecall.yaml`).
DEFAULT_KS = (1, 2, 4, 8, 16)


def _recall_terms(rank_pos, rank_neg, in_slot, consts, items):
  """A relevant item's terms `[..., |K|]`: `sigmoid((k - rank) / T_k)` for each cut-off `k`."""
  del items
  ks, k_temperature = consts[0], consts[1]
  rank = jnp.where(in_slot, rank_pos + rank_neg, 1)
  terms = jax.nn.sigmoid((ks - rank[..., None]) / k_temperature)
  return jnp.where(in_slot[..., None], terms, 0)


def _recall_axes(consts) -> tuple[int, ...]:
  """One sum per cut-off."""
  return consts[0].shape


def _recall_finish(sums, num_relevant, consts, items):
  """The mean over the cut-offs of each sum (clipped at `k` where `consts[2]` is 1, as the RS@k
  code does) over `min(k, |P|)`."""
  del items
  ks, clip = consts[0], consts[2]
  counted = jnp.where(clip > 0, jnp.minimum(sums, ks), sums)
  most = jnp.minimum(ks, jnp.maximum(num_relevant, 1)[..., None].astype(sums.dtype))
  return jnp.mean(counted / most, axis=-1)


RECALL = precision_sums.Metric(value=_recall_terms, finish=_recall_finish, shape=_recall_axes)


def _recall_consts(fn, ks, k_temperature, clip_at_k):
  """The recall metric's hyperparameters, checked: `(ks, T_k, clip)` as numbers."""
  ks = checks.check_cutoffs(fn, ks)
  checks.check_real(
    fn,
    "k_temperature",
    k_temperature,
    above=0,
    hint="It is the temperature of the sigmoid in k - rank (Patel et al. 2022: 1).",
  )
  if not isinstance(clip_at_k, bool):
    raise TypeError(f"{fn}: clip_at_k must be a Python bool, got {clip_at_k!r}.")
  return (jnp.asarray(ks), k_temperature, float(clip_at_k))


def _rank_metric_loss(
  fn,
  scores,
  labels,
  where,
  segments,
  steps,
  chunk_size,
  max_relevant,
  reduce_fn,
  metric,
  consts=(),
  items_fn=None,
):
  """`1 - metric` of the ranks smoothed by `steps` (`(H^+, H^-)` as `smooth_rank`'s step
  builders give them), reduced: the body of every loss here."""
  positive, negative = steps
  values, valid, scores, _, where = precision_sums.smoothed_metric(
    fn,
    scores,
    labels,
    where,
    segments,
    positive,
    negative,
    chunk_size,
    max_relevant,
    metric,
    consts,
    items_fn,
  )
  return lists.finish(1 - values, scores, where, valid, reduce_fn)


def recall_at_k_surrogate_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  ks: Sequence[int] = DEFAULT_KS,
  temperature: jax.typing.ArrayLike = 0.01,
  k_temperature: jax.typing.ArrayLike = 1.0,
  clip_at_k: bool = False,
  chunk_size: int | None = None,
  max_relevant: int | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The Recall@k surrogate loss RS@k (Patel, Tolias, Matas, CVPR 2022, eq. 1-5).

  .. math::
    \mathcal{L}_{\mathrm{RS@}K} = 1 - \frac{1}{|K|} \sum_{k \in K}
      \frac{1}{\min(k, |P|)} \sum_{p \in P}
      \sigma_{T_k}\!\Big(k - 1 - \sum_{j \neq p} \sigma_T(s_j - s_p)\Big)

  per list, with `sigma_T(t) = sigmoid(t / T)`, `P` the relevant valid items, the inner sum over
  the valid items `j` other than `p` (relevant or not: the smoothed rank of eq. 3-4, `rank(p) =
  1 + sum`), and `K = ks`. The exact metric (eq. 1, Heaviside steps) counts the relevant items
  ranked in the top `k` over the most that fit there, `min(k, |P|)`: it is the fraction of the
  relevant items retrieved (`relevant_fraction_at_k_metric`) when `|P| <= k` and Precision@k when
  `|P| >= k`, averaged over `ks`. Two temperatures: `temperature` (the paper's `tau_2 = 0.01`)
  smooths each step of the rank, `k_temperature` (`tau_1 = 1`) the count of the top `k`, where
  ranks are integers apart (the RS@k code: `--sigmoid_temperature 0.01`, `k_temperatures = [1]`).

  **The RS@k code** (yash0307/RecallatK_surrogate, `src/losses.py`, `RecallatK`, commit ed05202)
  differs in three ways, each reproduced here on demand:

  * it keeps the query in the ranks of its positives, with its similarity to itself (1), but not
    among the positives counted (its own term is zeroed and `|P|` is the class size minus 1):
    `batch_retrieval(embeddings, affinity=same_class - eye, include_self=True)` (the query a
    valid, non-relevant item of its own list);
  * it clips each cut-off's count at `k` before normalising (`torch.minimum(recall, k)`; the
    smoothed count can exceed `k`, the exact one cannot): `clip_at_k=True`;
  * it takes `min(k, B)` for the cut-offs and `m - 1` for `|P|` (batches of `m` items per class);
    its sigmoids clamp their exponent to `[-50, 50]` (a difference of about `1e-22`).

  Time O(B * P * n) and memory O(B * n) plus a chunk of `B * chunk_size * n` pairs (see
  `smooth_rank_ap_loss`); the paper's batches of 4,000 fit with `jaxrank.blocked_loss` or
  `jaxrank.chunked_value_and_grad` (its two-pass gradient, sec. 3.3).

  Args:
    scores: `[..., n]` floating scores (cosine similarities for the default temperatures).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    ks: the cut-offs `K`, positive ints (default `(1, 2, 4, 8, 16)`, the paper's).
    temperature: `T > 0` of the rank's sigmoid (paper: 0.01); gets a gradient when traced.
    k_temperature: `T_k > 0` of the sigmoid in `k - rank` (paper: 1); no gradient.
    clip_at_k: clip each cut-off's smoothed count at `k`, as the released code does (default
      False, the paper's eq. 5).
    chunk_size: relevant items per list per step, or `None` (see `smooth_rank_ap_loss`).
    max_relevant: optional static bound `K` on the relevant valid items of a list: a trip count
      the compiler knows; a list with more gives NaN (see `smooth_rank_ap_loss`).
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`. Lists without a relevant valid
    item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.9, 0.8, 0.7, 0.1]), jnp.array([1, 0, 1, 0])
  >>> # Ranks 1 and 3: the exact loss is 1 - (1/1 + 1/2 + 1 + 1 + 1) / 5 = 0.1; the sigmoid in
  >>> # k - rank counts 1/2 for the item ranked exactly k.
  >>> round(float(recall_at_k_surrogate_loss(scores, labels)), 4)
  0.2086
  """
  fn = "recall_at_k_surrogate_loss"
  consts = _recall_consts(fn, ks, k_temperature, clip_at_k)
  steps = smooth_rank.sigmoid_steps(fn, temperature)
  return _rank_metric_loss(
    fn, scores, labels, where, segments, steps, chunk_size, max_relevant, reduce_fn, RECALL, consts
  )


def smooth_recall_at_k_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  ks: Sequence[int] = DEFAULT_KS,
  temperature: jax.typing.ArrayLike = 0.01,
  k_temperature: jax.typing.ArrayLike = 1.0,
  chunk_size: int | None = None,
  max_relevant: int | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""SmoothRecall@k (Ramzi et al., SupRank, TPAMI 2023): Recall@k of sigmoid-smoothed ranks.

  .. math::
    \mathcal{L} = 1 - \frac{1}{|K|} \sum_{k \in K} \frac{1}{\min(k, |P|)} \sum_{p \in P}
      \sigma_{T_k}\big(k - \mathrm{rank}(p)\big), \qquad
    \mathrm{rank}(p) = 1 + \sum_{j \neq p} \sigma_T(s_j - s_p)

  SupRank's sigmoid baseline (SmoothAP's smoothing applied to Recall@k): the formula of
  `recall_at_k_surrogate_loss` (Patel et al. 2022, eq. 5), which it equals, without that
  function's `clip_at_k` option. Defaults are SupRank's configs
  (`suprank/config/loss/smoothrecall.yaml`: `tau: 0.01`, `temp: 1.0`, `at_k: [1, 2, 4, 8, 16]`).

  **The SupRank code** (elias-ramzi/SupRank, `SmoothRecallLoss` in
  `suprank/losses/ranking_loss.py`, `DifferentiableRank.quick_forward` in
  `suprank/losses/tools/differentiable_rank.py`, commit d3d0e3c) ranks each query among its whole
  batch, itself included as a positive of similarity 1, and counts it in `|P|`:
  `batch_retrieval(..., include_self=True)`. It needs the same number of positives in every list.

  Time O(B * P * n), memory O(B * n) plus a chunk (see `smooth_rank_ap_loss`).

  Args:
    scores: `[..., n]` floating scores (cosine similarities for the default temperatures).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    ks: the cut-offs `K`, positive ints (default `(1, 2, 4, 8, 16)`).
    temperature: `T > 0` of the rank's sigmoid (0.01); gets a gradient when traced.
    k_temperature: `T_k > 0` of the sigmoid in `k - rank` (1); no gradient.
    chunk_size: relevant items per list per step, or `None` (see `smooth_rank_ap_loss`).
    max_relevant: optional static bound `K` on the relevant valid items of a list; a list with
      more gives NaN (see `smooth_rank_ap_loss`).
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`. Lists without a relevant valid
    item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.9, 0.8, 0.7, 0.1]), jnp.array([1, 0, 1, 0])
  >>> loss = smooth_recall_at_k_loss(scores, labels)
  >>> bool(loss == recall_at_k_surrogate_loss(scores, labels))
  True
  """
  fn = "smooth_recall_at_k_loss"
  consts = _recall_consts(fn, ks, k_temperature, False)
  steps = smooth_rank.sigmoid_steps(fn, temperature)
  return _rank_metric_loss(
    fn, scores, labels, where, segments, steps, chunk_size, max_relevant, reduce_fn, RECALL, consts
  )


def sup_recall_at_k_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  ks: Sequence[int] = DEFAULT_KS,
  temperature: jax.typing.ArrayLike = 0.01,
  rho: jax.typing.ArrayLike = 100.0,
  delta: jax.typing.ArrayLike = 0.05,
  k_temperature: jax.typing.ArrayLike = 1.0,
  chunk_size: int | None = None,
  max_relevant: int | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""SupRecall@k (Ramzi et al., SupRank, TPAMI 2023): Recall@k of SupAP's ranks.

  .. math::
    \mathcal{L} = 1 - \frac{1}{|K|} \sum_{k \in K} \frac{1}{\min(k, |P|)} \sum_{p \in P}
      \sigma_{T_k}\big(k - \mathrm{rank}(p)\big), \qquad
    \mathrm{rank}(p) = 1 + \sum_{j \in P \setminus \{p\}} H(s_j - s_p)
      + \sum_{j \in N} H^-(s_j - s_p)

  with `H` the Heaviside step (no gradient among positives) and `H^-` SupAP's sigmoid-then-linear
  step (Ramzi et al. 2021, eq. 4; `supap_negative_step`), so that `rank(p)` is an upper bound of
  the exact rank and a misordered pair keeps a gradient; the count of the top `k` is a sigmoid of
  temperature `k_temperature`. Defaults are SupRank's configs
  (`suprank/config/loss/suprecall.yaml`: `tau: 0.01`, `rho: 100`, `delta: 0.05`, `temp: 1.0`,
  `at_k: [1, 2, 4, 8, 16]`).

  **The SupRank code** (elias-ramzi/SupRank, `SupRecallLoss`, commit d3d0e3c) includes the query
  as its own positive (`batch_retrieval(..., include_self=True)`); its configs set `offset: 1.44`
  for `H^-` after `delta` and take the sigmoid, 1/2, at an exact tie, as the ROADMAP code does
  (`supap_negative_step` says what that changes; the default `offset` of the code, `None`, is this
  function's step).

  Time O(B * P * n), memory O(B * n) plus a chunk (see `smooth_rank_ap_loss`).

  Args:
    scores: `[..., n]` floating scores (cosine similarities for the default hyperparameters).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    ks: the cut-offs `K`, positive ints (default `(1, 2, 4, 8, 16)`).
    temperature: temperature of `H^-`'s sigmoid, `> 0` (0.01).
    rho: slope of `H^-` after `delta`, `>= 0` (100).
    delta: start of `H^-`'s linear part, `>= 0` (0.05).
    k_temperature: `T_k > 0` of the sigmoid in `k - rank` (1); no gradient.
    chunk_size: relevant items per list per step, or `None` (see `smooth_rank_ap_loss`).
    max_relevant: optional static bound `K` on the relevant valid items of a list; a list with
      more gives NaN (see `smooth_rank_ap_loss`).
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`. Lists without a relevant valid
    item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.9, 0.8, 0.7, 0.1]), jnp.array([1, 0, 1, 0])
  >>> # rank(0.7) = 2 + H^-(0.1) = 2 + 6.49: beyond k = 1, 2, 4, a little at k = 8, all at 16.
  >>> round(float(sup_recall_at_k_loss(scores, labels)), 4)
  0.3925
  """
  fn = "sup_recall_at_k_loss"
  consts = _recall_consts(fn, ks, k_temperature, False)
  steps = smooth_rank.supap_steps(fn, temperature, rho, delta)
  return _rank_metric_loss(
    fn, scores, labels, where, segments, steps, chunk_size, max_relevant, reduce_fn, RECALL, consts
  )


def _ndcg_terms(rank_pos, rank_neg, in_slot, consts, items):
  """A relevant item's DCG term: its gain over `log2(1 + rank)`."""
  del consts
  rank = jnp.where(in_slot, rank_pos + rank_neg, 1)
  return jnp.where(in_slot, items[0] / jnp.log2(1 + rank), 0)


def _ndcg_finish(sums, num_relevant, consts, items):
  """The DCG over the ideal DCG of the list's gains (sorted, discounted by `log2(1 + i)`)."""
  del num_relevant, consts
  gains = items[0]
  ideal = -jnp.sort(-gains, axis=-1)
  discounts = jnp.log2(jnp.arange(2, gains.shape[-1] + 2, dtype=gains.dtype))
  idcg = jnp.sum(ideal / discounts, axis=-1)
  return sums / jnp.where(idcg > 0, idcg, 1)


def _gains(fn, labels, where):
  """`2**label - 1` of the relevant valid items (label `>= 1`), 0 for the others `[..., n]`; the
  checked labels must be non-negative."""
  checks.check_graded_labels(fn, labels, where)
  labels = labels.astype(lists.compute_dtype(labels.dtype))
  return (jnp.where(where & (labels >= 1), jnp.exp2(labels) - 1, 0),)


NDCG = precision_sums.Metric(value=_ndcg_terms, finish=_ndcg_finish)
# SupRank's ranks for graded relevance: `H^-` against the items less relevant than the item ranked.
GRADED_NDCG = precision_sums.Metric(value=_ndcg_terms, finish=_ndcg_finish, graded=True)


def _ndcg_loss(
  fn, scores, labels, where, segments, steps, chunk_size, max_relevant, reduce_fn, metric
):
  """`1 - NDCG` of the smoothed ranks, the graded labels checked (non-negative)."""
  return _rank_metric_loss(
    fn,
    scores,
    labels,
    where,
    segments,
    steps,
    chunk_size,
    max_relevant,
    reduce_fn,
    metric,
    items_fn=functools.partial(_gains, fn),
  )


def smooth_ndcg_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  temperature: jax.typing.ArrayLike = 0.01,
  chunk_size: int | None = None,
  max_relevant: int | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""SmoothNDCG (Ramzi et al., SupRank, TPAMI 2023): NDCG of sigmoid-smoothed ranks.

  .. math::
    \mathcal{L} = 1 - \frac{1}{\mathrm{IDCG}} \sum_{k \in P}
      \frac{2^{y_k} - 1}{\log_2\big(1 + \mathrm{rank}(k)\big)}, \qquad
    \mathrm{rank}(k) = 1 + \sum_{j \neq k} \sigma_T(s_j - s_k)

  per list, with `y_k` the graded label of item `k`, `P` the relevant valid items (label `>= 1`),
  the sum in the rank over the other valid items, and `IDCG` the DCG of the ideal order (the
  gains sorted, the `i`-th discounted by `log2(1 + i)`). With Heaviside steps it is
  `1 - ndcg_metric` (on lists without ties); labels in `(0, 1)` count as non-relevant (gain 0).
  Default `temperature` 0.01, SupRank's config (`suprank/config/loss/smoothndcg.yaml`).

  **The SupRank code** (elias-ramzi/SupRank, `SmoothNDCGLoss`, `DifferentiableRank.quick_forward`
  with `rank_type="ndcg"`, commit d3d0e3c) ranks each query among its batch, itself included with
  the highest relevance: `batch_retrieval(..., include_self=True)`; its relevance is the number of
  hierarchy levels two items share (`create_label_matrix` of `[B, L]` labels), the graded
  relevance `batch_retrieval` gives multi-hot labels.

  Time O(B * P * n) plus a sort of the gains, O(B n log n); memory O(B * n) plus a chunk (see
  `smooth_rank_ap_loss`).

  Args:
    scores: `[..., n]` floating scores (cosine similarities for the default temperature).
    labels: `[..., n]` non-negative graded labels (gain `2**label - 1`); relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    temperature: `T > 0` of the rank's sigmoid (0.01); gets a gradient when traced.
    chunk_size: relevant items per list per step, or `None` (see `smooth_rank_ap_loss`).
    max_relevant: optional static bound `K` on the relevant valid items of a list; a list with
      more gives NaN (see `smooth_rank_ap_loss`).
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`. Lists without a relevant valid
    item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.9, 0.8, 0.7, 0.1]), jnp.array([1, 0, 2, 0])
  >>> # The exact loss: 1 - (1 / log2(2) + 3 / log2(4)) / (3 / log2(2) + 1 / log2(3)) = 0.3115.
  >>> round(float(smooth_ndcg_loss(scores, labels)), 4)
  0.3115
  """
  fn = "smooth_ndcg_loss"
  steps = smooth_rank.sigmoid_steps(fn, temperature)
  return _ndcg_loss(
    fn, scores, labels, where, segments, steps, chunk_size, max_relevant, reduce_fn, NDCG
  )


def sup_ndcg_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  temperature: jax.typing.ArrayLike = 0.01,
  rho: jax.typing.ArrayLike = 100.0,
  delta: jax.typing.ArrayLike = 0.05,
  chunk_size: int | None = None,
  max_relevant: int | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""SupNDCG (Ramzi et al., SupRank, TPAMI 2023): NDCG of SupAP's ranks, graded.

  .. math::
    \mathcal{L} = 1 - \frac{1}{\mathrm{IDCG}} \sum_{k \in P}
      \frac{2^{y_k} - 1}{\log_2\big(1 + \mathrm{rank}(k)\big)}, \qquad
    \mathrm{rank}(k) = 1 + \sum_{j \neq k,\, y_j \geq y_k} H(s_j - s_k)
      + \sum_{j:\, y_j < y_k} H^-(s_j - s_k)

  per list (see `smooth_ndcg_loss` for the DCG and IDCG), with `H` the Heaviside step (no gradient)
  against the items at least as relevant as `k` and `H^-` SupAP's sigmoid-then-linear step
  (Ramzi et al. 2021, eq. 4; `supap_negative_step`) against the less relevant ones, relevant or
  not: an item ranked above a more relevant one is an error with a gradient. On binary labels it is
  SupAP's split (`supap_loss`). Defaults are SupRank's configs (`suprank/config/loss/supndcg.yaml`:
  `tau: 0.01`, `rho: 100`, `delta: 0.05`).

  **The SupRank code** (elias-ramzi/SupRank, `SupNDCGLoss`, `step_rank`, commit d3d0e3c) splits the
  pairs by the same rule and includes the query (`batch_retrieval(..., include_self=True)`); its
  configs set `offset: 1.44` after `delta` (`supndcg_inat.yaml`: `offset: 1.0, start: 0.0`) and
  take the sigmoid, 1/2, at an exact tie: see `supap_negative_step`.

  Time O(B * P * n) plus a sort of the gains, O(B n log n); memory O(B * n) plus a chunk (see
  `smooth_rank_ap_loss`).

  Args:
    scores: `[..., n]` floating scores (cosine similarities for the default hyperparameters).
    labels: `[..., n]` non-negative graded labels (gain `2**label - 1`); relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    temperature: temperature of `H^-`'s sigmoid, `> 0` (0.01).
    rho: slope of `H^-` after `delta`, `>= 0` (100).
    delta: start of `H^-`'s linear part, `>= 0` (0.05).
    chunk_size: relevant items per list per step, or `None` (see `smooth_rank_ap_loss`).
    max_relevant: optional static bound `K` on the relevant valid items of a list; a list with
      more gives NaN (see `smooth_rank_ap_loss`).
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`. Lists without a relevant valid
    item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.9, 0.8, 0.7, 0.1]), jnp.array([1, 0, 2, 0])
  >>> # The 0.7 of gain 3 is below 0.8 (gain 0, 0.1 higher: H^- = 6.49) and 0.9 (gain 1,
  >>> # less relevant, 0.2 higher: H^- = 16.49): rank 24 rather than 3 (exact loss 0.3115).
  >>> round(float(sup_ndcg_loss(scores, labels)), 4)
  0.5466
  """
  fn = "sup_ndcg_loss"
  steps = smooth_rank.supap_steps(fn, temperature, rho, delta)
  return _ndcg_loss(
    fn, scores, labels, where, segments, steps, chunk_size, max_relevant, reduce_fn, GRADED_NDCG
  )
