"""Retrieval evaluation at the scale of real test sets: `evaluate_retrieval`, chunk by chunk.

`evaluate_retrieval` measures Recall@k, MAP@R, mAP and tie-aware mAP of a whole test set, query
chunk by query chunk, without a `Q x N` matrix and without sorting the lists (it counts around the
relevant items: `counting.count_above_and_tied`); with `mesh=`, over the devices of every process
of a `jax.distributed` job, each holding a share of the gallery. A chunk's counts have two forms,
the CPU's and the accelerators', chosen by platform when lowered in one place (`_chunk_counts`).
The in-batch lists of the losses (`batch_retrieval`) are in `retrieval`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import counting
from jaxrank._src import hierarchical
from jaxrank._src import lists
from jaxrank._src import metrics
from jaxrank._src import platforms
from jaxrank._src import ranking
from jaxrank._src import similarity


def _without_excluded(scores, excluded, axis=-1):
  """The lists `scores` (items on `axis`) with excluded items (the query itself, padding) made
  NaN, which counts for nothing, and whether a valid item of each list scores NaN (a boolean
  reduction: counting them in int32 cost a pass over the scores)."""
  scores = jnp.where(excluded, jnp.nan, scores)
  return scores, jnp.any(jnp.isnan(scores) & ~excluded, axis=axis)


def _relevant_scores(scores, relevant_index, relevant_ok):
  """The scores `[c, R]` of the relevant items of each list, NaN in empty slots (counts 0)."""
  index = jnp.clip(relevant_index, 0, scores.shape[-1] - 1)
  return jnp.where(relevant_ok, jnp.take_along_axis(scores, index, axis=-1), jnp.nan)


@functools.partial(jax.jit, static_argnames=("ks", "similarity_fn", "branch"))
def _evaluate_chunk(
  query_set, rows, self_index, relevant_index, relevant_ok, prepared, *, ks, similarity_fn, branch
):
  """Per-query metrics of one chunk of queries against the whole (prepared) gallery.

  The chunk's queries are the rows `rows [c]` of the query set `[Q, D]` (-1: padding, scored as
  row 0), taken where the set lies: the set goes to the device once, not a chunk at a time.
  Counting instead of sorting the lists: for each relevant item of a query, the gallery items
  scored above it and tied with it (`counting.count_above_and_tied`), then
  `ranking.relevant_item_statistics`. The scores are laid out by platform (`_chunk_counts`: the
  CPU's form or the accelerators', chosen when lowered). `branch` is the forced platform
  (`ranking.descending_ranks_branch`), read when called, so that code traced with one form is
  never reused with another.
  """
  del branch  # Read by `platforms.by_platform` when traced; a key of the compiled code.
  queries = jnp.take(query_set, jnp.maximum(rows, 0), axis=0)
  scores = similarity.score_prepared(similarity_fn, queries, prepared)
  dtype = lists.compute_dtype(scores.dtype)
  counts, poisoned = _chunk_counts(scores.astype(dtype), self_index, relevant_index, relevant_ok)
  return _metrics_from_counts(
    counts, relevant_ok, poisoned, list_size=scores.shape[1], ks=ks, dtype=dtype
  )


def _chunk_counts(scores, self_index, relevant_index, relevant_ok):
  """`(counts, poisoned)` of a chunk's scores `[c, N]`: the one place that chooses between the
  CPU's form and the accelerators' (below), by platform when lowered (`platforms.by_platform`)."""
  return platforms.by_platform(
    scores,
    self_index,
    relevant_index,
    relevant_ok,
    cpu=_chunk_counts_cpu,
    accelerator=_chunk_counts_accelerator,
  )


def _chunk_counts_cpu(scores, self_index, relevant_index, relevant_ok):
  """`(counts, poisoned)` of a chunk's scores `[c, N]`, read in their own layout by the CPU's
  comparing loop, which also counts each list's NaN scores: the query's own item is made NaN by
  a scatter of `c` entries, so after the product the scores are read once, by the loop (a
  transposed copy, or a pass for the NaN check, each cost about as much as the loop)."""
  c, n = scores.shape
  excluded = self_index >= 0
  column = jnp.where(excluded, self_index, n)  # Out of bounds: dropped.
  scores = scores.at[jnp.arange(c), column].set(jnp.nan, mode="drop")
  rel = _relevant_scores(scores, relevant_index, relevant_ok)
  if rel.shape[-1] > counting.COMPARE_UP_TO:  # Sorted: a pass for the NaN check is small beside.
    nans = jnp.sum(jnp.isnan(scores), axis=-1, dtype=jnp.int32)
    return counting.count_above_and_tied(scores, rel), nans > excluded
  ordered, above, tied, nans = counting.compare_counts(scores, rel)
  # A valid NaN score: more NaN than the one excluded item.
  return counting.counts_of(ordered, above, tied), nans > excluded


def _chunk_counts_accelerator(scores, self_index, relevant_index, relevant_ok):
  """`(counts, poisoned)` of a chunk's scores `[c, N]` in their own layout, the gallery on the
  last axis (a TPU's lanes), read as the product wrote them.

  Up to `counting.COMPARE_UP_TO` relevant items: their scores and the query's own score are
  gathered (`c (R + 1)` reads), then one pass over the scores counts, for every relevant score,
  the scores above and tied, and the NaN scores (`counting.fused_compare_counts`); the query's own
  item is taken out of those counts afterwards (it is never relevant). No masked copy of the
  scores is written. Compiled for a TPU v5e (1,024 queries x 60,000 items, 11 relevant), the
  compiler's cycle estimates for the whole chunk fell from 14.5 to 2.2 million (the product
  alone, each row reduced to its maximum: 1.0 million) against the earlier form, a masked copy of
  the scores, then a masked sum per relevant slot to pick the scores and a comparison per slot,
  each reading every list. Picking by one pass of masked sums instead of a gather cost 2.3
  million cycles, more than the gather's 0.4 ms in the cost analysis (`scheduled_cycles` in
  experiments/benchmarks/accelerators.py says why two estimates). Beyond `COMPARE_UP_TO`, the
  excluded item is made NaN and each list sorted (`counting.count_above_and_tied`).
  """
  if relevant_index.shape[-1] > counting.COMPARE_UP_TO:  # A gather of `[c, R]` scores, a sort.
    column = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)
    scores, poisoned = _without_excluded(scores, column == self_index[:, None])
    rel = _relevant_scores(scores, relevant_index, relevant_ok)
    return counting.count_above_and_tied(scores, rel), poisoned
  excluded = self_index >= 0
  index = jnp.concatenate([relevant_index, jnp.where(excluded, self_index, 0)[:, None]], axis=-1)
  picked = jnp.take_along_axis(scores, jnp.clip(index, 0, scores.shape[1] - 1), axis=-1)
  rel = jnp.where(relevant_ok, picked[:, :-1], jnp.nan)
  own = jnp.where(excluded, picked[:, -1], jnp.nan)[:, None]  # NaN: counted nowhere.
  keys, above, tied, nans = counting.fused_compare_counts(scores, rel)
  above = above - (own > keys).astype(jnp.int32)
  tied = tied - (own == keys).astype(jnp.int32)
  nans = nans - (excluded & jnp.isnan(own[:, 0])).astype(jnp.int32)
  return counting.counts_of(keys, above, tied), nans > 0


def _metrics_from_counts(counts, relevant_ok, poisoned, *, list_size, ks, dtype):
  """Per-query metrics `[c]` (and the relevant counts) from the `counting.Counts` of the gallery
  items around the relevant items of each query, `relevant_ok [c, R]` its filled slots.

  A valid NaN score (`poisoned [c]`) makes the query's values NaN, as in the list metrics: NaN is
  counted neither above nor tied, so the counts alone would hide it.
  """
  relevant_above, relevant_tied, tie_position = counting.relevant_ties(counts.thresholds)
  stats = ranking.relevant_item_statistics(
    counts.above,
    counts.tied,
    relevant_above,
    relevant_tied,
    tie_position,
    list_size=list_size,
    dtype=dtype,
  )
  num_rel = jnp.sum(relevant_ok, axis=-1)
  # The counts may come in another order than the slots: their filled ones are those not NaN (a
  # valid NaN score makes the query NaN whatever this says).
  relevant_ok = ~jnp.isnan(counts.thresholds)
  # Sums in a fixed order: the same bits in the sharded and the one-process programs.
  total = metrics.sum_in_order
  out = {
    "map@r": metrics.map_at_r_from_statistics(stats, relevant_ok, num_rel, dtype, sum_fn=total),
    "map": metrics.ap_from_statistics(stats, relevant_ok, num_rel, dtype, sum_fn=total),
    "tie_aware_map": metrics.tie_aware_ap_from_statistics(
      stats, relevant_ok, num_rel, dtype, sum_fn=total
    ),
  }
  for k in ks:
    out[f"recall@{k}"] = metrics.recall_at_k_from_statistics(stats, relevant_ok, k, dtype)
  out = {key: jnp.where(poisoned, jnp.asarray(jnp.nan, dtype), v) for key, v in out.items()}
  return out, num_rel


_prepare_items = jax.jit(similarity.prepare_items, static_argnums=(0, 2))


# ---------------------------------------------------------------------------------------------
# Evaluation over the devices of every process (`mesh=`).


def _sharded_step(
  take,
  queries,
  prepared,
  gallery_ids,
  self_ids,
  relevant_index,
  relevant_ok,
  *,
  axes,
  list_size,
  ks,
  similarity_fn,
):
  """One chunk of queries on one device, inside `shard_map` over every axis of the mesh.

  The chunk is the one `_evaluate_chunk` takes in one process. Its relevant items (global gallery
  ids `relevant_index [c, R]`, `relevant_ok`) and the global ids of its queries (`self_ids`, -1
  without leave-one-out) are the same on every device. Its query embeddings are assembled on every
  device: `take [c]` gives, for each query, this device's slot holding it (-1 where another device
  holds it), and a `psum` in which every other device adds an exact 0 gathers them. Each device
  scores the chunk against its own run of (prepared) gallery rows (global ids `gallery_ids`, -1 in
  padding slots) and counts, for each relevant item, its rows above and tied; the integer counts
  add up over devices. The score of a relevant item comes from the device that holds it, by the
  same exact `psum`. The metrics then come from the same `[c, R]` arrays as in one process.
  """
  held = take >= 0
  q = jax.lax.psum(jnp.where(held[:, None], queries[jnp.clip(take, 0)], 0), axes)
  scores = similarity.score_prepared(similarity_fn, q, prepared)  # [c, S]: this device's rows.
  dtype = lists.compute_dtype(scores.dtype)
  padding = (gallery_ids < 0)[None, :]
  excluded = padding | (gallery_ids[None, :] == self_ids[:, None])
  scores, poisoned = _without_excluded(scores.astype(dtype), excluded)
  position = relevant_index - gallery_ids[0]  # This device's rows are consecutive gallery ids.
  here = relevant_ok & (position >= 0) & (position < jnp.sum(~padding))
  rel = _relevant_scores(scores, position, here)
  rel = jax.lax.psum(jnp.where(here, rel, jnp.zeros((), dtype)), axes)
  rel = jnp.where(relevant_ok, rel, jnp.nan)
  # No host callback here: with numpy's sort in one, this program never finished on 4 CPU
  # devices (XLA's CPU collectives waited for devices that did not arrive; JAX 0.10.2).
  counts = counting.count_above_and_tied(scores, rel, host_callback=False)
  above, tied = (jax.lax.psum(x, axes) for x in (counts.above, counts.tied))
  poisoned = jax.lax.psum(poisoned.astype(jnp.int32), axes) > 0
  return _metrics_from_counts(
    counts._replace(above=above, tied=tied),
    relevant_ok,
    poisoned,
    list_size=list_size,
    ks=ks,
    dtype=dtype,
  )


@functools.partial(jax.jit, static_argnames=("mesh", "list_size", "ks", "similarity_fn"))
def _sharded_step_jit(
  take,
  queries,
  prepared,
  gallery_ids,
  self_ids,
  relevant_index,
  relevant_ok,
  *,
  mesh,
  list_size,
  ks,
  similarity_fn,
):
  axes = tuple(mesh.axis_names)
  body = functools.partial(
    _sharded_step, axes=axes, list_size=list_size, ks=ks, similarity_fn=similarity_fn
  )
  split, same = P(axes), P()
  return jax.shard_map(
    body, mesh=mesh, in_specs=(split,) * 4 + (same,) * 3, out_specs=same, check_vma=False
  )(take, queries, prepared, gallery_ids, self_ids, relevant_index, relevant_ok)


@functools.partial(jax.jit, static_argnames=("mesh", "similarity_fn", "query_dtype"))
def _prepare_sharded(gallery, *, mesh, similarity_fn, query_dtype):
  """`similarity.prepare_items` on each device's rows, where they lie."""
  split = P(tuple(mesh.axis_names))
  return jax.shard_map(
    lambda rows: similarity.prepare_items(similarity_fn, rows, query_dtype),
    mesh=mesh,
    in_specs=split,
    out_specs=split,
    check_vma=False,
  )(gallery)


def _layout(mesh, counts):
  """How the processes' rows lie on their devices of `mesh`: for each of this process's devices
  (mesh order), the global id of its first row and how many rows it holds; and the most rows any
  device holds.

  Global ids run over process 0's rows, then process 1's, and so on (the concatenation of the
  processes' inputs); each process splits its rows into consecutive runs over its devices.
  """
  per_process = {}
  for d in mesh.devices.flat:
    per_process.setdefault(d.process_index, []).append(d)
  step = {p: max(-(-int(counts[p]) // len(ds)), 1) for p, ds in per_process.items()}
  me = jax.process_index()
  first = int(np.sum(counts[:me]))
  mine = [
    (d, first + k * step[me], int(np.clip(counts[me] - k * step[me], 0, step[me])))
    for k, d in enumerate(per_process[me])
  ]
  return mine, max(step.values())


def _put_rows(mesh, counts, local, fill):
  """This process's rows `local` as its part of a global array split over every axis of `mesh`
  (its devices' runs of rows, padded with `fill` to the longest run), and the runs' layout."""
  layout, rows = _layout(mesh, counts)
  first = int(np.sum(counts[: jax.process_index()]))
  blocks = {}
  for d, start, held in layout:
    part = local[start - first : start - first + held]
    blocks[d] = np.concatenate([part, np.full((rows - held, *part.shape[1:]), fill, part.dtype)])
  return _put(mesh, blocks), layout


def _put(mesh, blocks):
  """A global array split over every axis of `mesh`, from this process's per-device blocks."""
  sharding = jax.NamedSharding(mesh, P(tuple(mesh.axis_names)))
  first = next(iter(blocks.values()))
  shape = (first.shape[0] * mesh.devices.size, *first.shape[1:])
  arrays = [jax.device_put(blocks[d], d) for d in sharding.addressable_devices]
  return jax.make_array_from_single_device_arrays(shape, sharding, arrays)


def _replicated(mesh, x):
  """The same host array `x` on every device of `mesh` (every process passes the same values)."""
  sharding = jax.NamedSharding(mesh, P())
  return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def _allgather_rows(local, sizes):
  """Every process's rows `local [n_p, ...]`, concatenated in process order (`sizes [P]`)."""
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top

  padded = np.pad(local, [(0, int(sizes.max()) - len(local))] + [(0, 0)] * (local.ndim - 1))
  gathered = np.asarray(multihost_utils.process_allgather(padded))
  gathered = gathered.reshape(len(sizes), -1, *local.shape[1:])
  return np.concatenate([gathered[p, : sizes[p]] for p in range(len(sizes))])


def _job_sizes(fn, mesh, queries, gallery):
  """`[P, 3]`: each process's number of queries, gallery rows and dimension, checked."""
  # Checked before the first collective, which would wait for the processes left out.
  missing = sorted(set(range(jax.process_count())) - {d.process_index for d in mesh.devices.flat})
  if missing:
    raise ValueError(
      f"{fn}: the mesh has no device of process(es) {missing}; build it over jax.devices() "
      "(every device of the job), e.g. jax.make_mesh((jax.device_count(),), ('batch',))."
    )
  sizes = np.array([[queries.shape[0], gallery.shape[0], queries.shape[1]]], np.int64)
  sizes = _allgather_rows(sizes, np.ones(jax.process_count(), np.int64))
  if np.any(sizes[:, 2] != sizes[0, 2]):
    raise ValueError(
      f"{fn}: the processes' embeddings differ in dimension ({sizes[:, 2].tolist()}); give "
      "every process rows of the same [., D]."
    )
  return sizes


def _evaluate_sharded(
  fn,
  mesh,
  queries,
  q_labels,
  gallery,
  g_labels,
  leave_one_out,
  *,
  ks,
  chunk_size,
  similarity_fn,
):
  """Per-query values `[Q]` and relevant counts of the job's whole query set, on every process."""
  sizes = _job_sizes(fn, mesh, queries, gallery)
  num_queries, n = int(sizes[:, 0].sum()), int(sizes[:, 1].sum())
  # Every process learns every label (4 bytes an item, against 4 D for an embedding), and so
  # the relevant items of every chunk, as in one process.
  all_q_labels = _allgather_rows(q_labels.astype(np.int64), sizes[:, 0])
  all_g_labels = (
    all_q_labels if leave_one_out else (_allgather_rows(g_labels.astype(np.int64), sizes[:, 1]))
  )
  relevance = _ClassRelevance(all_q_labels, all_g_labels, leave_one_out)
  query_array, q_layout = _put_rows(mesh, sizes[:, 0], queries, 0)
  if leave_one_out:
    gallery_array, g_layout = query_array, q_layout
  else:
    gallery_array, g_layout = _put_rows(mesh, sizes[:, 1], gallery, 0)
  g_first = int(sizes[: jax.process_index(), 1].sum())
  ids = np.arange(g_first, g_first + len(gallery), dtype=np.int32)
  gallery_ids, _ = _put_rows(mesh, sizes[:, 1], ids, -1)
  prepared = _prepare_sharded(
    gallery_array, mesh=mesh, similarity_fn=similarity_fn, query_dtype=queries.dtype
  )
  results = []
  for rows in _chunks(num_queries, chunk_size):
    # Which slot of which of this process's devices holds each query of the chunk (-1: none).
    take = {
      d: np.where((rows >= start) & (rows < start + held), rows - start, -1)
      for d, start, held in q_layout
    }
    same = [_replicated(mesh, x) for x in relevance(rows)]  # Self ids, relevant items.
    results.append(
      _sharded_step_jit(
        _put(mesh, {d: t.astype(np.int32) for d, t in take.items()}),
        query_array,
        prepared,
        gallery_ids,
        *same,
        mesh=mesh,
        list_size=n,
        ks=ks,
        similarity_fn=similarity_fn,
      )
    )
  # Replicated results: every process reads its own copy.
  return _per_query(
    jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), results), ks, num_queries
  )


# ---------------------------------------------------------------------------------------------
# The chunks and their relevant items, shared by both paths.


def _chunks(num_queries, chunk_size):
  """The global query ids of each chunk `[c]`, all of one length (the last padded with -1): one
  compiled program serves them all. At least two rows: a single row takes XLA's matrix-vector
  kernel, which rounds differently from the matrix product of `batch_retrieval`
  (see `jaxrank.similarity`)."""
  chunk = max(min(chunk_size, num_queries), 2)
  for begin in range(0, num_queries, chunk):
    rows = np.arange(begin, begin + chunk, dtype=np.int32)
    yield np.where(rows < num_queries, rows, -1)


def _per_query(results, ks, num_queries):
  """The per-query values `[Q]` and relevant counts from the chunks' fetched results."""
  num_relevant = np.concatenate([num_rel for _, num_rel in results])[:num_queries]
  keys = [f"recall@{k}" for k in ks] + ["map@r", "map", "tie_aware_map"]
  per_query = {
    key: np.concatenate([values[key] for values, _ in results])[:num_queries] for key in keys
  }
  return per_query, num_relevant


class _ClassRelevance:
  """The relevant items of a chunk of queries from class labels: a block of the gallery sorted by
  label. Called on the global query ids `rows [c]` (-1 for padding), it gives the ids to leave out
  (`[c]`, -1 for none), the relevant gallery ids `[c, R]` and which slots hold one, `R` the largest
  class of the gallery."""

  def __init__(self, q_labels, g_labels, leave_one_out):
    self.order = np.argsort(g_labels, kind="stable").astype(np.int32)
    # The classes' runs in the sorted labels (as `np.unique`, without sorting them again).
    ordered = g_labels[self.order]
    self.starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    self.classes = ordered[self.starts]
    self.counts = np.diff(np.append(self.starts, len(ordered)))
    self.q_labels, self.leave_one_out = q_labels, leave_one_out
    self.slots = np.arange(int(self.counts.max()))

  def __call__(self, rows):
    valid = rows >= 0
    labels = self.q_labels[np.where(valid, rows, 0)]
    pos = np.clip(np.searchsorted(self.classes, labels), 0, len(self.classes) - 1)
    count = np.where(valid & (self.classes[pos] == labels), self.counts[pos], 0)
    index = self.order[np.clip(self.starts[pos][:, None] + self.slots, 0, len(self.order) - 1)]
    self_ids = rows if self.leave_one_out else np.full(rows.shape, -1, np.int32)
    ok = (self.slots[None, :] < count[:, None]) & (index != self_ids[:, None])
    return self_ids, index, ok


class _DenseRelevance:
  """The relevant items of a chunk of queries from a dense `[c, N]` relevance of its rows
  (`dense(rows)`: affinity or multi-hot labels): the relevant items first, in gallery order.
  One pass over every chunk first finds `R`, the most relevant items of any query."""

  def __init__(self, dense, num_queries, chunk_size, leave_one_out):
    self.dense, self.leave_one_out = dense, leave_one_out
    self.max_relevant = 1
    for rows in _chunks(num_queries, chunk_size):
      rows = rows[rows >= 0]
      self.max_relevant = max(self.max_relevant, int(dense(rows).sum(axis=1).max()))

  def __call__(self, rows):
    valid = rows[rows >= 0]
    relevant = self.dense(valid)
    # A stable sort of "not relevant" puts the relevant items first, in gallery order.
    index = np.argsort(~relevant, axis=1, kind="stable")[:, : self.max_relevant]
    ok = np.arange(self.max_relevant)[None, :] < relevant.sum(axis=1)[:, None]
    pad = len(rows) - len(valid)
    index = np.pad(index.astype(np.int32), ((0, pad), (0, 0)))
    ok = np.pad(ok, ((0, pad), (0, 0)))
    self_ids = rows if self.leave_one_out else np.full(rows.shape, -1, np.int32)
    return self_ids, index, ok


def _evaluate_local(queries, gallery, relevance, *, ks, chunk_size, similarity_fn):
  """Per-query values `[Q]` and relevant counts, in this process on its default device (or on
  the device that holds the embeddings, when they are of type `jax.Array`)."""
  num_queries = len(queries)
  query_set = jnp.asarray(queries)  # To the device once (a jax.Array stays where it is).
  gallery = query_set if gallery is queries else jnp.asarray(gallery)
  prepared = _prepare_items(similarity_fn, gallery, queries.dtype)
  branch = ranking.forced_branch()
  results = []  # Device arrays: gathered once at the end so that chunks dispatch asynchronously.
  for rows in _chunks(num_queries, chunk_size):
    self_ids, relevant_index, relevant_ok = relevance(rows)
    results.append(
      _evaluate_chunk(
        query_set,
        jnp.asarray(rows),
        jnp.asarray(self_ids),
        jnp.asarray(relevant_index),
        jnp.asarray(relevant_ok),
        prepared,
        ks=ks,
        similarity_fn=similarity_fn,
        branch=branch,
      )
    )
  return _per_query(jax.device_get(results), ks, num_queries)


def _as_embeddings(fn, name, x):
  """Embeddings of the compute dtype (float32, or float64 under x64), finite: a `jax.Array` stays
  one, on its device (checked there: embeddings computed on a GPU never go through the host),
  anything else becomes a numpy array."""
  checks.check_array(fn, name, x, kind="floating", ndim=2, layout="[N, D]")
  if not isinstance(x, jax.Array):
    x = np.asarray(x)
  if x.shape[0] == 0:
    raise ValueError(f"{fn}: {name} are empty (shape {x.shape}); give at least one row.")
  wide = x.dtype == np.float64 and jax.config.read("jax_enable_x64")
  dtype = np.float64 if wide else np.float32
  if isinstance(x, jax.Array):
    # float64 arrays exist only under x64, where they stay float64: nothing can overflow.
    converted = x.astype(dtype)  # bfloat16, float16: exactly.
    if not jax.device_get(jnp.all(jnp.isfinite(converted))):  # An explicit fetch of one bool.
      raise ValueError(f"{fn}: {name} contain NaN or infinite values.")
    return converted
  with np.errstate(over="ignore"):  # Overflow is reported below.
    converted = x.astype(dtype)  # bfloat16, float16: exactly.
  if not np.all(np.isfinite(converted)):
    if np.all(np.isfinite(x)):
      raise ValueError(
        f"{fn}: {name} overflow float32 (largest magnitude {np.max(np.abs(x)):.3g}); rescale "
        "them, or enable jax_enable_x64 to evaluate in float64."
      )
    raise ValueError(f"{fn}: {name} contain NaN or infinite values.")
  return converted


def _as_labels(fn, name, y, n):
  """Class labels `[n]` (integers) or multi-hot labels `[n, C]` (integers or booleans)."""
  y = np.asarray(y)
  if y.ndim == 2:
    if not (np.issubdtype(y.dtype, np.integer) or y.dtype == np.bool_):
      raise TypeError(f"{fn}: multi-hot {name} must be integers or booleans, got {y.dtype}.")
    checks.check_shape(
      fn, name, y, (n, None), layout=f"[{n}, C]", hint="One row of labels per embedding."
    )
    return y.astype(np.int32)
  checks.check_int_labels(fn, name, y, layout=f"[{n}]")
  checks.check_shape(fn, name, y, (n,), layout=f"[{n}]", hint="One class label per embedding.")
  return y


def _multi_hot_relevant(q_labels, g_labels, rows, leave_one_out):
  """Relevant gallery items `[c, N]` of the queries `rows`: at least one shared label."""
  relevant = (q_labels[rows] @ g_labels.T) > 0
  if leave_one_out:
    relevant[np.arange(len(rows)), rows] = False
  return relevant


def _as_affinity(fn, affinity, shape, leave_one_out):
  """A given relevance matrix `shape` (`[Q, N]`), numeric or boolean, as a host array.

  Only the dtype and the shape are read here (a numpy array or memmap is not copied; a JAX array
  is copied to the host once): the values are read chunk by chunk by `_affinity_relevant`.
  """
  affinity = np.asarray(affinity)
  if not any(jnp.issubdtype(affinity.dtype, t) for t in (jnp.integer, jnp.floating, jnp.bool_)):
    raise TypeError(
      f"{fn}: affinity must be a numeric or boolean array, got dtype {affinity.dtype}; cast "
      "it, e.g. affinity.astype(np.float32)."
    )
  q, n = shape
  layout = f"[Q, Q] = [{q}, {q}]" if leave_one_out else f"[Q, N] = [{q}, {n}]"
  checks.check_shape(
    fn,
    "affinity",
    affinity,
    shape,
    layout=layout,
    hint="One row per query, one column per "
    + ("query (no gallery: the query set is the gallery)." if leave_one_out else "gallery item."),
  )
  return affinity


def _affinity_relevant(fn, affinity, rows, leave_one_out):
  """Relevant gallery items `[c, N]` of the consecutive queries `rows`: affinity `>= 1`.

  The query's own entry (the diagonal, without a gallery) is not read: it is never relevant.
  """
  block = np.asarray(affinity[rows[0] : rows[-1] + 1])
  diagonal = (np.arange(len(rows)), rows) if leave_one_out else None
  if jnp.issubdtype(block.dtype, jnp.floating):
    block = block.astype(np.float64)  # bfloat16 and float16 exactly, and numpy's NaN test.
    nan = np.isnan(block)
    if diagonal is not None:
      nan[diagonal] = False
    if nan.any():
      i, j = np.argwhere(nan)[0]
      raise ValueError(
        f"{fn}: affinity contains NaN (first at [{rows[i]}, {j}]); give every relevance a "
        "number (>= 1 relevant, else not)."
      )
  relevant = block >= 1
  if diagonal is not None:
    relevant[diagonal] = False
  return relevant


# Queries per chunk when `evaluate_retrieval` is not given `chunk_size`, by the platform of the
# devices that compute. CPU: 1,024 (XLA:CPU's product is 1.7x slower in chunks of 256 on SOP's
# shape, the comparing loop slower beyond 2,048: docs/guide/scale.rst). GPUs and TPUs: 4,096 (an
# SOP-shaped evaluation, 60,502 x 512, every metric, took 0.16-0.21 s on an H200 in chunks of 4,096
# against 0.29-0.33 s in chunks of 1,024: issue 51; on TPUs unmeasured). Halved for large
# galleries, so that a chunk's scores stay within `DEFAULT_CHUNK_SCORES`.
DEFAULT_CHUNKS = {"cpu": 1024}
ACCELERATOR_CHUNK = 4096
DEFAULT_CHUNK_SCORES = 2**28
"""The most scores (`chunk_size * N`) of a default chunk: 1 GB of float32 scores (4,096 queries
against 65,536 items, 256 against 1,048,576); the CPU's chunk of 1,024 holds at most a quarter of
it up to N = 65,536."""


def default_chunk_size(mesh: jax.sharding.Mesh | None = None, num_items: int | None = None) -> int:
  """`evaluate_retrieval`'s default `chunk_size` on the platform of `mesh`'s devices (`None`:
  JAX's default device): `DEFAULT_CHUNKS` for the CPU, `ACCELERATOR_CHUNK` for GPUs and TPUs,
  halved while a chunk against `num_items` gallery items (on one device) would hold more than
  `DEFAULT_CHUNK_SCORES` scores, down to 2."""
  device = jax.devices()[0] if mesh is None else mesh.devices.flat[0]
  chunk = DEFAULT_CHUNKS.get(device.platform, ACCELERATOR_CHUNK)
  while num_items and chunk > 2 and chunk * num_items > DEFAULT_CHUNK_SCORES:
    chunk //= 2
  return chunk


def evaluate_retrieval(
  query_embeddings: jax.typing.ArrayLike,
  query_labels: jax.typing.ArrayLike | None = None,
  gallery_embeddings: jax.typing.ArrayLike | None = None,
  gallery_labels: jax.typing.ArrayLike | None = None,
  *,
  affinity: jax.typing.ArrayLike | None = None,
  ks: Sequence[int] = (1, 2, 4, 8),
  chunk_size: int | None = None,
  similarity_fn: types.SimilarityFn = similarity.cosine,
  reduce_fn: types.ReduceFn | None = np.mean,
  mesh: jax.sharding.Mesh | None = None,
  super_labels: jax.typing.ArrayLike | None = None,
  gallery_super_labels: jax.typing.ArrayLike | None = None,
  relevance_alpha: float = 1.0,
  relevance_counts_query: bool = False,
) -> dict[str, float] | dict[str, np.ndarray]:
  """Retrieval metrics of a whole test set, computed in query chunks of bounded memory.

  Without a gallery every query ranks the rest of the query set, itself left out (the SOP, CUB and
  Cars196 protocol); with a gallery every query ranks the gallery (the In-Shop protocol).
  Relevance follows `batch_retrieval`, from one of:

  * integer class labels `[Q]` (and `[N]`): an item is relevant iff it shares the query's class;
  * multi-hot labels `[Q, C]` (and `[N, C]`; integers or booleans): iff it shares at least one
    label with the query;
  * `affinity=`, a given relevance matrix `[Q, N]` (`[Q, Q]` without a gallery), numeric or
    boolean, instead of labels: item `j` is relevant to query `i` iff `affinity[i, j] >= 1`, the
    rule of the list metrics on `batch_retrieval(..., affinity=...)`. Without a gallery the
    diagonal is ignored: the query itself is left out, as with labels. It may stay in host
    memory (a numpy array or memmap): it is read one `[chunk_size, N]` block at a time.

  None of these metrics uses grades: a graded affinity (or a count of shared labels) counts only
  as relevant or not. Scores are `similarity_fn(queries, gallery)`, cosine similarities by
  default, computed by the same operations as in `batch_retrieval` (see `jaxrank.similarity`): on
  the same set the two give bit-identical scores, so the metrics equal the list metrics on
  `batch_retrieval`'s lists, ties and near-ties included.

  Returned metrics, per query, then reduced over the queries that have at least one relevant item:

  * `recall@k` for each `k` in `ks`: `recall_at_k_metric`, metric learning's Recall@k (1 if a
    relevant item is in the top k: a hit rate; not rax's `recall_metric(topn=k)`, the fraction of
    the relevant items in the top k);
  * `map@r`: `map_at_r_metric`;
  * `map`: `ap_metric` over the full ranking (rax's `ap_metric` without `topn`);
  * `tie_aware_map`: `tie_aware_ap_metric` over the full ranking.

  Ties are treated as by those functions (pessimistic rank, or the expectation over orderings).
  Queries without a relevant item are left out of the reduction (rax averages them in as 0), as
  in the list-level metrics. A NaN score (from a `similarity_fn` that overflows, say) makes its
  query's values NaN, and so the mean: never a confident wrong number. Non-finite embeddings, or
  float64 embeddings that overflow float32, are a `ValueError`.

  For each relevant item of a query, the gallery items scored above it and tied with it are
  counted, which is all the metrics need (`counting.count_above_and_tied`): with `R`, the largest
  number of items relevant to one query, at most `counting.COMPARE_UP_TO` (32: SOP, CUB, Cars196)
  by comparing every item with every relevant score, O(N R) per query; beyond (the few large
  classes of CIFAR-10 or NUS-WIDE) by one sort of the query's scores, O(N log N) per query whatever
  `R`. On CPU the comparing is a loop over the gallery in tiles of 128 queries, and the sort
  numpy's, through a host callback; on GPU and TPU, for `R <= 32`, the relevant scores are gathered
  and one pass over the scores counts around all of them, and beyond the sort is XLA's: no host
  callback, and for `R <= 32` no loop or sort of the lists. Time O(Q N (D + min(R, 32) + log N)),
  memory O(chunk_size * N + (Q + N) D): never the `Q x N` matrix, and nothing grows with `R` beyond
  `[chunk_size, R]`. The embeddings go to the device once (a `jax.Array` stays on its own, not
  copied through the host), and the items' side of the scoring rule (for cosine, the rows' scale
  and norms) is computed once, not per chunk. A Python loop over chunks calls one jitted function
  (compiled once: the last chunk is padded), which takes its queries from the set on the device.

  **Hierarchical metrics** (`super_labels=`, HAPPIER's evaluation; `jaxrank.hap_metric`): with
  class labels and one or more levels of super-labels, each gallery item has a level for each
  query, the number of its labels (class, super-classes) equal to the query's: `L` (the number of
  labels) for the query's class, 0 for nothing shared. Then, per query, over its whole list:

  * `h-ap`: `hap_metric` with HAPPIER's relevance of the levels, `hierarchical_relevance` (each
    level weighs `(l / L)^relevance_alpha`, shared among its items; `relevance_counts_query=True`
    counts the query among its own class, as the released code does);
  * `asi`: `asi_metric` on the levels (HAPPIER's ASI);
  * `ndcg`: `ndcg_metric` on the levels, gain `2**l - 1` (HAPPIER's "NDCG", which is that
    function on the levels: no metric of its own).

  Ties are ranked as those functions rank them (pessimistically: lower relevance, or lower level,
  first); no tie-aware form here. They are computed by counting too: the items sharing a query's
  coarsest label (its positives, `P` at most per query) are sorted (`[chunk_size, P]`), and for
  each the gallery's other items scored above and tied are counted, in a second pass over the
  chunks: time O(Q N (D + log N) + Q P (L + log P)), memory O(chunk_size (N + P L)). Also
  across devices and processes (`mesh=`).

  **Across devices and processes** (`mesh=`), for galleries too big for one device or one host:
  the work is split over every device of `mesh` (all its axes), which may span the processes of a
  `jax.distributed` job. Each process passes only its own rows: its share of the queries and, with
  a gallery, of the gallery (any number of rows each, uneven shares allowed); the test set is the
  processes' rows concatenated in process order. Every process must make the same call otherwise
  (it runs collectives), and every process gets the whole result: exactly what one process
  returns on the concatenated rows (with `reduce_fn=None`, the values of all `Q` queries).

  The gallery is split, never gathered: each device holds a run of its rows. The queries go chunk
  by chunk as in one process: a chunk (`chunk_size` rows) is assembled on every device, each
  device scores it against its own rows and counts, for each relevant item, its rows scored above
  and tied; the integer counts of disjoint rows add up exactly over devices (a `psum`). A relevant
  item's score is read on the device that holds it and shared by a `psum` in which the others add
  an exact 0. The metrics then come from the same `[chunk, R]` counts and scores as in one process,
  so they are equal to the last digit. (Sharding the queries and gathering the gallery instead
  would put the whole `N x D` gallery on every device.) Memory per device falls with the number
  of devices: O(N D / devices + chunk_size * N / devices + chunk_size * R); each host holds its own
  rows and every label (O(Q + N) integers), from which it finds each chunk's relevant items.
  Relevance must come from class labels (multi-hot labels or `affinity=` are a `ValueError`).

  The scores are the same bits as in one process too: a device scores its rows with products over
  blocks of a fixed number of gallery rows, so no score depends on how the gallery is split (see
  `jaxrank.similarity`; a plain matrix product on CPU rounds many entries differently for a
  different number of rows). Metrics are therefore equal to the last digit for float embeddings
  as for binary codes (tested with nearly collinear float embeddings and 2 processes).

  A 2-process job (tested with 2 processes of 2 CPU devices each in `tests/multiprocess/`)::

    jax.distributed.initialize()  # Before any other JAX call.
    mesh = jax.make_mesh((jax.device_count(),), ("batch",))  # Every device of every process.
    # This process's share of the test set, as host arrays: [Q_p, D] embeddings, [Q_p] labels
    # (of a global jax.Array sharded over the batch, the rows of its addressable shards).
    result = jaxrank.evaluate_retrieval(local_embeddings, local_labels, mesh=mesh)
    result["recall@1"]  # The same on every process: Recall@1 of the whole test set.
    # With a gallery: each process passes its queries and its share of the gallery.
    jaxrank.evaluate_retrieval(local_queries, local_query_labels, local_gallery,
                               local_gallery_labels, mesh=mesh)

  Args:
    query_embeddings: `[Q, D]` floating embeddings (bfloat16, float16, float32; float64 is
      evaluated in float32 unless `jax_enable_x64` is set), finite, `Q >= 1`.
    query_labels: `[Q]` integer class labels, or `[Q, C]` multi-hot labels; `None` when
      `affinity` is given.
    gallery_embeddings: optional `[N, D]` gallery, `N >= 1`; `None` for leave-one-out within the
      queries.
    gallery_labels: labels of the gallery, of the same kind as `query_labels` (`[N]` or `[N, C]`);
      `None` when `affinity` is given.
    affinity: optional `[Q, N]` relevance of each gallery item to each query (`[Q, Q]` without a
      gallery, its diagonal ignored), relevant iff `>= 1`; instead of labels (giving both is a
      `ValueError`, as is a NaN entry that is read).
    ks: the cut-offs of Recall@k, positive ints (rax names a single cut-off `topn`; Recall@k here
      is not rax's recall, see above).
    chunk_size: queries per step; `None` (the default): 1,024 on CPU, 4,096 on GPUs and TPUs
      (`default_chunk_size`, by the platform of `mesh`'s devices or JAX's default device), halved
      for large galleries while a chunk would hold more than `2**28` scores (256 queries against a
      gallery of 1,048,576 items; with `mesh=`, the items on one device). Memory
      grows linearly with it: two `[chunk_size, N]` float32 blocks of scores on CPU (the scores
      and their transposition; 0.47 GB for 1,024 queries against SOP's 60,502 images), one on an
      accelerator (1 GB for 4,096). On CPU, XLA's matrix product is much slower in small chunks
      (1.7x in chunks of 256 than of 1,024 on SOP's shape), and the comparing loop slower in
      chunks beyond 2,048; on an H200 chunks of 4,096 took about 0.6x the time of chunks of
      1,024; see docs/guide/scale.rst.
    similarity_fn: the scoring rule (see `jaxrank.similarity`), a function of
      `(queries [c, D], gallery [N, D])`; cosine by default. It is a static argument of a jitted
      function: pass the same function object each time to reuse the compiled code.
    reduce_fn: the reduction over queries, called as `reduce_fn(values, where=counted)` on numpy
      float64 arrays `[Q]` with `counted` the queries that have a relevant item (default
      `np.mean`: the mean over them, 0 when there are none); `None` returns the per-query values
      instead (for significance tests and failure analysis).
    mesh: optional `jax.sharding.Mesh` to split the evaluation over (see above); its devices must
      include devices of every process. `None` (the default): this process alone, on its default
      device.
    super_labels: optional integer super-class labels of the queries, `[Q]` (one level) or
      `[Q, S]` (S levels, finest first), with class labels: adds the hierarchical metrics (below).
      The levels must nest (each class in one super-class of each level), else `ValueError`.
    gallery_super_labels: the gallery's, `[N]` or `[N, S]`, with a gallery and `super_labels`.
    relevance_alpha: HAPPIER's `alpha`, the exponent of a level's weight `(l / L)^alpha`
      (`hierarchical_relevance`; default 1, HAPPIER's).
    relevance_counts_query: whether the query counts as one more item of its class in `|Omega^(L)|`
      (HAPPIER's released evaluation: `True`; default `False`, the items of its list only).

  Returns:
    A dict of Python floats with keys `recall@k` (for each k), `map@r`, `map`, `tie_aware_map`;
    with `super_labels`, also `h-ap`, `asi`, `ndcg` (the hierarchical metrics, reduced over the
    queries with an item of level >= 1). With `reduce_fn=None`, a dict of float64 numpy arrays
    `[Q]` with the same keys, each query's value as the list metric with `reduce_fn=None` gives
    it (0 for a query without a relevant item), and `num_relevant`, int `[Q]`: the queries with
    `num_relevant > 0` are those the reduction counts (with `super_labels`, also
    `num_hierarchy_relevant`, the items of level >= 1, for the hierarchical metrics).

  >>> import numpy as np
  >>> e = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
  >>> evaluate_retrieval(e, np.array([0, 0, 1, 1]), ks=(1,))
  {'recall@1': 1.0, 'map@r': 1.0, 'map': 1.0, 'tie_aware_map': 1.0}
  >>> evaluate_retrieval(e, np.array([0, 0, 1, 2]), ks=(1,), reduce_fn=None)["num_relevant"]
  array([1, 1, 0, 0], dtype=int32)
  >>> affinity = np.array([[9, 2, 0, 0], [2, 9, 0.5, 0], [0, 0.5, 9, 1], [0, 0, 1, 9]])
  >>> evaluate_retrieval(e, affinity=affinity, ks=(1,))["map"]  # The diagonal is ignored.
  1.0
  """
  fn = "evaluate_retrieval"
  ks = checks.check_cutoffs(fn, ks)
  if reduce_fn is not None:
    checks.check_callable(fn, "reduce_fn", reduce_fn, hint="e.g. np.mean, or None per query.")
  _check_mesh(fn, mesh)
  if chunk_size is not None:
    checks.check_positive_int(fn, "chunk_size", chunk_size)
  queries, gallery, q_labels, g_labels = _evaluation_inputs(
    fn, query_embeddings, query_labels, gallery_embeddings, gallery_labels, affinity
  )
  leave_one_out = gallery is None
  gallery = queries if leave_one_out else gallery
  hierarchy = _hierarchy_inputs(
    fn, q_labels, g_labels, super_labels, gallery_super_labels, leave_one_out
  )
  if chunk_size is None:  # Against this process's gallery rows, on each of its devices.
    devices = 1 if mesh is None else max(len(mesh.local_devices), 1)
    chunk_size = default_chunk_size(mesh, -(-gallery.shape[0] // devices))
  kwargs = dict(ks=ks, chunk_size=chunk_size, similarity_fn=similarity_fn)
  if mesh is not None:
    if affinity is not None or q_labels.ndim != 1:
      raise ValueError(
        f"{fn}: with mesh=, relevance must come from integer class labels [Q] (and [N]); "
        "multi-hot labels and affinity= are evaluated in one process only (mesh=None)."
      )
    # Each process's rows are split over its devices from the host.
    queries, gallery = np.asarray(queries), np.asarray(gallery)
    per_query, num_relevant = _evaluate_sharded(
      fn, mesh, queries, q_labels, gallery, g_labels, leave_one_out, **kwargs
    )
  else:
    relevance = _relevance(
      fn, q_labels, g_labels, affinity, queries, gallery, leave_one_out, chunk_size
    )
    per_query, num_relevant = _evaluate_local(queries, gallery, relevance, **kwargs)
  result = _reduce_queries(per_query, num_relevant, reduce_fn)
  if hierarchy is None:
    return result
  options = (float(relevance_alpha), bool(relevance_counts_query), leave_one_out)
  return result | _evaluate_hierarchy(
    fn, mesh, queries, gallery, hierarchy, options, reduce_fn, chunk_size, similarity_fn
  )


def _check_mesh(fn, mesh):
  if mesh is not None and not isinstance(mesh, jax.sharding.Mesh):
    raise TypeError(
      f"{fn}: mesh must be a jax.sharding.Mesh (e.g. jax.make_mesh((jax.device_count(),), "
      f"('batch',))) or None, got {type(mesh).__name__}."
    )


def _evaluate_hierarchy(
  fn, mesh, queries, gallery, hierarchy, options, reduce_fn, chunk_size, similarity_fn
):
  """`h-ap`, `asi`, `ndcg` of `evaluate_retrieval(super_labels=)`, reduced over the queries with
  an item of level >= 1 (`num_hierarchy_relevant` with `reduce_fn=None`)."""
  alpha, counts_query, leave_one_out = options
  kwargs = dict(chunk_size=chunk_size, similarity_fn=similarity_fn)
  if mesh is None:
    dtype = queries.dtype
    relevance = _HierarchyRelevance(*hierarchy, leave_one_out, alpha, counts_query, dtype)
    per_query, num_positive = _evaluate_hierarchy_local(queries, gallery, relevance, **kwargs)
  else:
    per_query, num_positive = _evaluate_hierarchy_sharded(
      fn, mesh, queries, gallery, hierarchy, (alpha, counts_query), leave_one_out, **kwargs
    )
  result = _reduce_queries(per_query, num_positive, reduce_fn)
  if reduce_fn is None:
    result["num_hierarchy_relevant"] = result.pop("num_relevant")
  return result


def _hierarchy_inputs(fn, q_labels, g_labels, super_labels, gallery_super_labels, leave_one_out):
  """The label columns `[Q, L]`, `[N, L]` of the hierarchy (class first), checked; `None`
  without super-labels."""
  if super_labels is None:
    if gallery_super_labels is not None:
      raise ValueError(f"{fn}: gallery_super_labels given without super_labels.")
    return None
  if q_labels is None or q_labels.ndim != 1:
    raise ValueError(
      f"{fn}: super_labels= needs integer class labels [Q] (and [N]), not multi-hot labels "
      "or affinity=."
    )
  q_columns = _hierarchy_columns(fn, q_labels, super_labels, "super_labels", len(q_labels))
  if leave_one_out:
    if gallery_super_labels is not None:
      raise ValueError(f"{fn}: gallery_super_labels given without gallery_embeddings.")
    g_columns = q_columns
  else:
    if gallery_super_labels is None:
      raise ValueError(f"{fn}: with a gallery, super_labels= needs gallery_super_labels= too.")
    g_columns = _hierarchy_columns(
      fn, g_labels, gallery_super_labels, "gallery_super_labels", len(g_labels)
    )
    if g_columns.shape[1] != q_columns.shape[1]:
      raise ValueError(
        f"{fn}: gallery_super_labels have {g_columns.shape[1] - 1} levels, super_labels "
        f"{q_columns.shape[1] - 1}; give both the same levels."
      )
  _check_nested(fn, np.concatenate([q_columns, g_columns]))
  return q_columns, g_columns


def _relevance(fn, q_labels, g_labels, affinity, queries, gallery, leave_one_out, chunk_size):
  """The relevant items of each chunk of queries, in one process: from class labels
  (`_ClassRelevance`), or from multi-hot labels or `affinity=` (`_DenseRelevance`)."""
  num_queries, n = queries.shape[0], gallery.shape[0]
  if affinity is not None:
    affinity = _as_affinity(fn, affinity, (num_queries, n), leave_one_out)
    dense = functools.partial(_affinity_relevant, fn, affinity, leave_one_out=leave_one_out)
  elif q_labels.ndim == 2:
    dense = functools.partial(_multi_hot_relevant, q_labels, g_labels, leave_one_out=leave_one_out)
  else:
    return _ClassRelevance(q_labels, g_labels, leave_one_out)
  return _DenseRelevance(dense, num_queries, chunk_size, leave_one_out)


def _evaluation_inputs(
  fn, query_embeddings, query_labels, gallery_embeddings, gallery_labels, affinity
):
  """The checked host arrays `(queries, gallery, query_labels, gallery_labels)`: the gallery
  `None` for leave-one-out (then the gallery labels are the query labels), the labels `None`
  with `affinity`."""
  queries = _as_embeddings(fn, "query_embeddings", query_embeddings)
  if affinity is not None and (query_labels is not None or gallery_labels is not None):
    raise ValueError(
      f"{fn}: give either labels (query_labels, gallery_labels) or affinity=, not both."
    )
  if affinity is None and query_labels is None:
    raise ValueError(
      f"{fn}: give query_labels ([Q] or [Q, C]) or affinity= ([Q, N], or [Q, Q] without a gallery)."
    )
  q_labels = None
  if affinity is None:
    q_labels = _as_labels(fn, "query_labels", query_labels, queries.shape[0])
  if gallery_embeddings is None:
    if gallery_labels is not None:
      raise ValueError(f"{fn}: gallery_labels given without gallery_embeddings.")
    return queries, None, q_labels, q_labels
  gallery = _as_embeddings(fn, "gallery_embeddings", gallery_embeddings)
  if gallery.shape[1] != queries.shape[1]:
    raise ValueError(
      f"{fn}: gallery_embeddings {gallery.shape} and query_embeddings {queries.shape} differ "
      "in dimension."
    )
  if affinity is not None:
    return queries, gallery, None, None
  if gallery_labels is None:
    raise ValueError(f"{fn}: gallery_embeddings need gallery_labels (or give affinity=).")
  g_labels = _as_labels(fn, "gallery_labels", gallery_labels, gallery.shape[0])
  if g_labels.ndim != q_labels.ndim or g_labels.shape[1:] != q_labels.shape[1:]:
    raise ValueError(
      f"{fn}: gallery_labels have shape {g_labels.shape}, which does not match "
      f"query_labels of shape {q_labels.shape} (same kind of labels, one row per gallery "
      "item)."
    )
  return queries, gallery, q_labels, g_labels


def _reduce_queries(per_query, num_relevant, reduce_fn):
  """`evaluate_retrieval`'s result from the per-query values `[Q]` and relevant counts."""
  counted = num_relevant > 0
  # As the list metrics: a query without a relevant item gives 0, even with a NaN score.
  per_query = {
    key: np.where(counted, values.astype(np.float64), 0.0) for key, values in per_query.items()
  }
  if reduce_fn is None:
    return per_query | {"num_relevant": num_relevant.astype(np.int32)}
  if reduce_fn is np.mean or reduce_fn is jnp.mean:
    denominator = max(int(counted.sum()), 1)
    return {key: float(value.sum()) / denominator for key, value in per_query.items()}
  return {key: float(reduce_fn(value, where=counted)) for key, value in per_query.items()}


# ---------------------------------------------------------------------------------------------
# The hierarchical metrics (`super_labels=`): H-AP, ASI and NDCG of the levels, by counting.


def _hierarchy_columns(fn, labels, super_labels, name, n):
  """`[n, L]` integer label columns: the class, then each level of super-classes."""
  super_labels = np.asarray(super_labels)
  if super_labels.ndim == 1:
    super_labels = super_labels[:, None]
  if super_labels.ndim != 2 or not np.issubdtype(super_labels.dtype, np.integer):
    raise ValueError(
      f"{fn}: {name} must be integer super-class labels [{n}] (one level) or [{n}, S] (S levels, "
      f"finest first), got shape {super_labels.shape} and dtype {super_labels.dtype}."
    )
  checks.check_shape(fn, name, super_labels, (n, None), layout=f"[{n}, S]")
  return np.concatenate([np.asarray(labels)[:, None], super_labels], axis=1).astype(np.int64)


def _check_nested(fn, columns):
  """Raises unless each label of a level lies in one label of every coarser level."""
  for level in range(columns.shape[1] - 1):
    pairs = np.unique(columns[:, level : level + 2], axis=0)
    if len(pairs) != len(np.unique(columns[:, level])):
      raise ValueError(
        f"{fn}: the super-labels are not a hierarchy: some label of level {level} (0: the class) "
        f"lies in several labels of level {level + 1}; give each class one super-class per level."
      )


class _HierarchyRelevance:
  """The positives of a chunk of queries (the items sharing their coarsest label, which in a
  hierarchy holds every item sharing a label) with their levels and HAPPIER's relevance
  (`hierarchical.hierarchical_relevance`), from label columns `[Q, L]` and `[N, L]`."""

  def __init__(self, q_columns, g_columns, leave_one_out, alpha, counts_query, dtype):
    self.positives = _ClassRelevance(q_columns[:, -1], g_columns[:, -1], leave_one_out)
    self.q_columns, self.g_columns = q_columns, g_columns
    self.num_levels = q_columns.shape[1]
    weight = (np.arange(self.num_levels + 1) / self.num_levels) ** alpha
    self.weight, self.counts_query, self.dtype = weight, counts_query, dtype

  def __call__(self, rows):
    self_ids, index, filled = self.positives(rows)
    q = self.q_columns[np.maximum(rows, 0)]
    level = np.where(filled, np.sum(q[:, None, :] == self.g_columns[index], axis=-1), 0)
    every = np.arange(self.num_levels + 1)
    counts = np.sum((level[:, :, None] == every) & filled[:, :, None], axis=1)
    counts[:, 0] = 0
    norm = counts + (self.counts_query & (every == self.num_levels))
    level_rel = np.where(every > 0, self.weight / np.maximum(norm, 1), 0).astype(self.dtype)
    rel = np.take_along_axis(level_rel, level, axis=1)
    level, counts = level.astype(np.int32), counts.astype(np.int32)
    return self_ids, q[:, -1], index, filled, level, rel, level_rel, counts


def _hierarchy_values(orders, above, tied, level_rel, level_counts, poisoned):
  values = hierarchical.metrics_from_counts(orders, above, tied, level_rel, level_counts)
  nan = jnp.asarray(jnp.nan, level_rel.dtype)
  return {key: jnp.where(poisoned, nan, v) for key, v in values.items()}


@functools.partial(jax.jit, static_argnames=("similarity_fn", "branch"))
def _hierarchy_chunk(query_set, rows, gallery_coarse, prepared, parts, *, similarity_fn, branch):
  """Per-query `h-ap`, `asi`, `ndcg` `[c]` of one chunk (`parts`: `_HierarchyRelevance`'s): the
  positives' scores gathered, the negatives around each counted (`counting.count_above_and_tied`
  of the scores with every positive and the query itself made NaN). `branch`: as in
  `_evaluate_chunk`, a key of the compiled code."""
  del branch  # Read by `platforms.by_platform` when traced.
  self_index, coarse, index, filled, level, rel, level_rel, level_counts = parts
  queries = jnp.take(query_set, jnp.maximum(rows, 0), axis=0)
  scores = similarity.score_prepared(similarity_fn, queries, prepared)
  scores = scores.astype(lists.compute_dtype(scores.dtype))
  column = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)
  scores, poisoned = _without_excluded(scores, column == self_index[:, None])
  orders = hierarchical.sort_positives(
    _relevant_scores(scores, index, filled), level, rel.astype(scores.dtype), filled
  )
  negatives = jnp.where(gallery_coarse[None, :] == coarse[:, None], jnp.nan, scores)
  counts = counting.count_above_and_tied(negatives, orders.thresholds)
  return _hierarchy_values(
    orders, counts.above, counts.tied, level_rel.astype(scores.dtype), level_counts, poisoned
  )


def _evaluate_hierarchy_local(queries, gallery, relevance, *, chunk_size, similarity_fn):
  """Per-query hierarchical values `[Q]` and positive counts, in this process."""
  num_queries = len(queries)
  query_set = jnp.asarray(queries)
  gallery = query_set if gallery is queries else jnp.asarray(gallery)
  prepared = _prepare_items(similarity_fn, gallery, queries.dtype)
  gallery_coarse = jnp.asarray(relevance.g_columns[:, -1])
  results, positives = [], []
  for rows in _chunks(num_queries, chunk_size):
    parts = relevance(rows)
    positives.append(parts[3].sum(axis=1))
    results.append(
      _hierarchy_chunk(
        query_set,
        jnp.asarray(rows),
        gallery_coarse,
        prepared,
        tuple(jnp.asarray(x) for x in parts),
        similarity_fn=similarity_fn,
        branch=ranking.forced_branch(),
      )
    )
  results = jax.device_get(results)
  per_query = {key: np.concatenate([r[key] for r in results])[:num_queries] for key in results[0]}
  return per_query, np.concatenate(positives)[:num_queries]


def _hierarchy_sharded_step(
  take, queries, prepared, gallery_ids, gallery_coarse, parts, *, axes, similarity_fn
):
  """`_hierarchy_chunk` on one device inside `shard_map` (as `_sharded_step`): the chunk's queries
  assembled by an exact `psum`, scored against this device's rows; each positive's score read
  where it lies and shared by an exact `psum`; the negatives above and tied with each positive
  counted on every device and summed."""
  self_ids, coarse, index, filled, level, rel, level_rel, level_counts = parts
  held = take >= 0
  q = jax.lax.psum(jnp.where(held[:, None], queries[jnp.clip(take, 0)], 0), axes)
  scores = similarity.score_prepared(similarity_fn, q, prepared)
  dtype = lists.compute_dtype(scores.dtype)
  padding = (gallery_ids < 0)[None, :]
  excluded = padding | (gallery_ids[None, :] == self_ids[:, None])
  scores, poisoned = _without_excluded(scores.astype(dtype), excluded)
  position = index - gallery_ids[0]  # This device's rows are consecutive gallery ids.
  here = filled & (position >= 0) & (position < jnp.sum(~padding))
  picked = jax.lax.psum(jnp.where(here, _relevant_scores(scores, position, here), 0), axes)
  orders = hierarchical.sort_positives(picked, level, rel.astype(dtype), filled)
  negatives = jnp.where(gallery_coarse[None, :] == coarse[:, None], jnp.nan, scores)
  counts = counting.count_above_and_tied(negatives, orders.thresholds, host_callback=False)
  above, tied = (jax.lax.psum(x, axes) for x in (counts.above, counts.tied))
  poisoned = jax.lax.psum(poisoned.astype(jnp.int32), axes) > 0
  return _hierarchy_values(orders, above, tied, level_rel.astype(dtype), level_counts, poisoned)


@functools.partial(jax.jit, static_argnames=("mesh", "similarity_fn"))
def _hierarchy_sharded_jit(
  take, queries, prepared, gallery_ids, gallery_coarse, parts, *, mesh, similarity_fn
):
  axes = tuple(mesh.axis_names)
  body = functools.partial(_hierarchy_sharded_step, axes=axes, similarity_fn=similarity_fn)
  split, same = P(axes), P()
  return jax.shard_map(
    body, mesh=mesh, in_specs=(split,) * 5 + (same,), out_specs=same, check_vma=False
  )(take, queries, prepared, gallery_ids, gallery_coarse, parts)


def _evaluate_hierarchy_sharded(
  fn, mesh, queries, gallery, hierarchy, options, leave_one_out, *, chunk_size, similarity_fn
):
  """Per-query hierarchical values `[Q]` and positive counts of the job's whole query set, on
  every process (as `_evaluate_sharded`)."""
  sizes = _job_sizes(fn, mesh, queries, gallery)
  num_queries = int(sizes[:, 0].sum())
  q_columns = _allgather_rows(hierarchy[0], sizes[:, 0])
  g_columns = q_columns if leave_one_out else _allgather_rows(hierarchy[1], sizes[:, 1])
  relevance = _HierarchyRelevance(q_columns, g_columns, leave_one_out, *options, queries.dtype)
  query_array, q_layout = _put_rows(mesh, sizes[:, 0], queries, 0)
  if leave_one_out:
    gallery_array = query_array
  else:
    gallery_array, _ = _put_rows(mesh, sizes[:, 1], gallery, 0)
  g_first = int(sizes[: jax.process_index(), 1].sum())
  ids = np.arange(g_first, g_first + len(gallery), dtype=np.int32)
  gallery_ids, _ = _put_rows(mesh, sizes[:, 1], ids, -1)
  local_coarse = g_columns[g_first : g_first + len(gallery), -1]
  gallery_coarse, _ = _put_rows(mesh, sizes[:, 1], local_coarse, -1)
  prepared = _prepare_sharded(
    gallery_array, mesh=mesh, similarity_fn=similarity_fn, query_dtype=queries.dtype
  )
  results, positives = [], []
  for rows in _chunks(num_queries, chunk_size):
    take = {
      d: np.where((rows >= start) & (rows < start + held), rows - start, -1)
      for d, start, held in q_layout
    }
    parts = relevance(rows)
    positives.append(parts[3].sum(axis=1))
    results.append(
      _hierarchy_sharded_jit(
        _put(mesh, {d: t.astype(np.int32) for d, t in take.items()}),
        query_array,
        prepared,
        gallery_ids,
        gallery_coarse,
        tuple(_replicated(mesh, np.asarray(x)) for x in parts),
        mesh=mesh,
        similarity_fn=similarity_fn,
      )
    )
  results = [{k: np.asarray(v.addressable_data(0)) for k, v in r.items()} for r in results]
  per_query = {key: np.concatenate([r[key] for r in results])[:num_queries] for key in results[0]}
  return per_query, np.concatenate(positives)[:num_queries]
