"""In-batch retrieval lists and retrieval evaluation at the scale of real test sets.

`batch_retrieval` turns a batch of embeddings and labels into the `(scores, relevance, where)` lists
that every list-level metric and loss takes: each embedding is a query ranking the rest of the batch
(and, optionally, a gallery such as a memory bank).

`evaluate_retrieval` measures Recall@k, MAP@R, mAP and tie-aware mAP of a whole test set, query
chunk by query chunk, without a `Q x N` matrix and without sorting the lists; with `mesh=`, over
the devices of every process of a `jax.distributed` job, each holding a share of the gallery.
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
from jaxrank._src import lists
from jaxrank._src import metrics
from jaxrank._src import ranking
from jaxrank._src import similarity


def check_labels(fn: str, labels: jax.typing.ArrayLike) -> jax.Array:
  """Integer class labels `[B]` or multi-hot labels `[B, C]`, else a clear error."""
  labels = jnp.asarray(labels)
  if labels.ndim not in (1, 2):
    raise ValueError(
        f"{fn}: labels must be integer class labels [B] or multi-hot labels [B, C], got shape "
        f"{labels.shape}; pass a [B, B] affinity matrix as affinity= instead."
    )
  if labels.ndim == 1:
    checks.check_int_labels(fn, "labels", labels, layout="[B]")
  return labels


def relevance_matrix(labels: jax.Array, targets: jax.Array) -> jax.Array:
  """Relevance `[B, N]` of `targets` to each query, from class labels `[.]` or multi-hot `[., C]`.

  Class labels: 1 where the classes are equal. Multi-hot: the number of labels two items share (the
  multi-level affinity of He et al. 2018), int32 for integer or boolean labels.
  """
  if labels.ndim == 1:
    return (labels[:, None] == targets[None, :]).astype(jnp.int32)
  out = labels.dtype if jnp.issubdtype(labels.dtype, jnp.floating) else jnp.int32
  return jnp.matmul(labels.astype(out), targets.astype(out).T, preferred_element_type=out)


def batch_retrieval(
    embeddings: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike | None = None,
    *,
    affinity: jax.typing.ArrayLike | None = None,
    include_self: bool = False,
    gallery_embeddings: jax.typing.ArrayLike | None = None,
    gallery_labels: jax.typing.ArrayLike | None = None,
    gallery_where: jax.typing.ArrayLike | None = None,
    similarity_fn: types.SimilarityFn = similarity.cosine,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Every item of a batch as a query ranking the batch (and a gallery): the lists of the losses.

  Scores are `similarity_fn(embeddings, items)`, cosine similarities by default (see
  `jaxrank.similarity` for the others). Relevance comes from one of:

  * integer class labels `[B]`: 1 where two items share the class, else 0;
  * multi-hot labels `[B, C]`: the number of labels two items share (the multi-level affinity of
    He et al. 2018; relevant iff >= 1, graded for NDCG);
  * `affinity=`, a given `[B, B + M]` relevance matrix (then `labels` must be `None`).

  **Self-inclusion.** By default the query itself is masked out of its own list (`where[i, i]` is
  False), the convention of FastAP, RaMBO and mAP_Q. `include_self=True` keeps it, as a relevant
  item scored by its similarity to itself (1 for cosine): the convention of the Smooth-AP and
  ROADMAP code, where the query counts as its own positive.

  A gallery (`gallery_embeddings [M, D]`, `gallery_labels` of the same kind as `labels`, optional
  `gallery_where [M]` for unfilled slots) appends `M` columns: lists are `[B, B + M]`. Gradients
  flow through the gallery embeddings as through the batch; wrap them in `jax.lax.stop_gradient`
  for a memory bank of past batches.

  Args:
    embeddings: `[B, D]` floating embeddings (need not be normalised).
    labels: `[B]` integer labels or `[B, C]` multi-hot labels; `None` when `affinity` is given.
    affinity: optional `[B, B + M]` relevance matrix, instead of labels.
    include_self: keep each query in its own list (see above).
    gallery_embeddings: optional `[M, D]` extra items for every list.
    gallery_labels: `[M]` or `[M, C]` labels of the gallery (with `labels`).
    gallery_where: optional `[M]` boolean mask of valid gallery items.
    similarity_fn: the scoring rule `fn(queries [B, D], items [B + M, D]) -> [B, B + M]`;
      `jaxrank.similarity.cosine` by default.

  Returns:
    `(scores, relevance, where)`, each `[B, B + M]`: the scores (at least float32),
    relevance (int32 for integer or boolean labels), and the boolean mask of valid items. O((B + M)
    B D) time and O(B (B + M)) memory.

  >>> import jax.numpy as jnp
  >>> import jaxrank
  >>> e = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
  >>> scores, relevance, where = jaxrank.batch_retrieval(e, jnp.array([0, 0, 1, 1]))
  >>> float(jaxrank.ap_metric(scores, relevance, where=where))
  1.0
  """
  fn = "batch_retrieval"
  embeddings = checks.check_floating(fn, "embeddings", embeddings, ndim=2, layout="[B, D]")
  b = embeddings.shape[0]
  gallery = embeddings
  m = 0
  if gallery_embeddings is not None:
    d = embeddings.shape[1]
    gallery_embeddings = checks.check_floating(
        fn, "gallery_embeddings", gallery_embeddings, ndim=2, layout=f"[M, {d}]"
    )
    checks.check_shape(
        fn, "gallery_embeddings", gallery_embeddings, (None, d), layout=f"[M, {d}]",
        hint=f"like the embeddings {embeddings.shape}.",
    )
    m = gallery_embeddings.shape[0]
    gallery = jnp.concatenate([embeddings, gallery_embeddings.astype(embeddings.dtype)], axis=0)
  elif gallery_labels is not None or gallery_where is not None:
    raise ValueError(f"{fn}: gallery_labels/gallery_where given without gallery_embeddings.")

  if (labels is None) == (affinity is None):
    raise ValueError(f"{fn}: give exactly one of labels ([B] or [B, C]) and affinity ([B, B + M]).")
  if affinity is not None:
    relevance = jnp.asarray(affinity)
    if relevance.shape != (b, b + m):
      raise ValueError(
          f"{fn}: affinity must be [B, B + M] = {(b, b + m)}, got shape {relevance.shape}."
      )
  else:
    if jnp.shape(labels)[:1] != (b,):
      raise ValueError(
          f"{fn}: labels have shape {jnp.shape(labels)} but embeddings have {b} rows."
      )
    if m and gallery_labels is None:
      raise ValueError(f"{fn}: gallery_embeddings need gallery_labels.")
    if gallery_labels is not None and jnp.shape(gallery_labels)[:1] != (m,):
      raise ValueError(
          f"{fn}: gallery_labels have shape {jnp.shape(gallery_labels)} but the gallery has "
          f"{m} rows."
      )
    labels = check_labels(fn, labels)
    targets = labels
    if gallery_labels is not None:
      gallery_labels = jnp.asarray(gallery_labels)
      if gallery_labels.ndim != labels.ndim or gallery_labels.shape[1:] != labels.shape[1:]:
        raise ValueError(
            f"{fn}: gallery_labels have shape {gallery_labels.shape}, which does not match "
            f"labels of shape {labels.shape} (same kind of labels, one row per gallery item)."
        )
      targets = jnp.concatenate([labels, gallery_labels.astype(labels.dtype)], axis=0)
    relevance = relevance_matrix(labels, targets)

  scores = similarity_fn(embeddings, gallery)
  where = jnp.ones((b, b + m), dtype=bool)
  if not include_self:
    where = where.at[:, :b].set(~jnp.eye(b, dtype=bool))
  if gallery_where is not None:
    gallery_where = checks.check_mask(
        fn, "gallery_where", gallery_where, (m,), like="gallery", broadcast=False
    )
    where = where.at[:, b:].set(jnp.broadcast_to(gallery_where, (b, m)))
  return scores, relevance, where


# ---------------------------------------------------------------------------------------------
# Evaluation at scale.


def _count_above_and_tied(scores_t: jax.Array, thresholds: jax.Array) -> tuple[jax.Array, ...]:
  """For each threshold `[c, R]`, the scores in its column of `scores_t [N, c]` above and equal.

  A loop over the `N` rows with `[R, c]` accumulators: each step is a vectorised compare-and-add.
  On CPU this runs about 50x faster than `jnp.sum(scores[:, None, :] > thresholds[..., None])`,
  whose XLA reduction is not vectorised, and it never materialises the `[c, R, N]` comparison.
  """
  thresholds = thresholds.T  # [R, c]

  def step(j, counts):
    above, tied = counts
    row = scores_t[j][None, :]
    above = above + (row > thresholds).astype(jnp.int32)
    return above, tied + (row == thresholds).astype(jnp.int32)

  zeros = jnp.zeros(thresholds.shape, jnp.int32)
  above, tied = jax.lax.fori_loop(0, scores_t.shape[0], step, (zeros, zeros), unroll=4)
  return above.T, tied.T


def _evaluate_chunk(
    queries, self_index, relevant_index, relevant_ok, gallery, *, ks, similarity_fn
):
  """Per-query metrics of one chunk of queries against the whole gallery.

  Counting instead of sorting: for each relevant item of a query, the gallery items scored above it
  and tied with it (O(N) per relevant item), then `ranking.relevant_item_statistics`.
  """
  n, c = gallery.shape[0], queries.shape[0]
  # Scored as `batch_retrieval` scores, then transposed to [N, c]: the counting loop runs over
  # gallery rows.
  scores_t = similarity_fn(queries, gallery).T
  dtype = lists.compute_dtype(scores_t.dtype)
  scores_t = scores_t.astype(dtype)
  row = jax.lax.broadcasted_iota(jnp.int32, scores_t.shape, 0)
  scores_t = jnp.where(row == self_index[None, :], -jnp.inf, scores_t)  # Leave the query out.
  rel = scores_t[relevant_index, jnp.arange(c)[:, None]]  # [c, R]
  rel = jnp.where(relevant_ok, rel, jnp.nan)  # NaN compares False: empty slots count nothing.
  above, tied = _count_above_and_tied(scores_t, rel)
  # A valid NaN score makes the query's values NaN, as in the list metrics (NaN compares False,
  # so the counts alone would hide it). The query itself (-inf) is not a valid item.
  poisoned = jnp.any(jnp.isnan(scores_t), axis=0)
  return _metrics_from_counts(
      rel, above, tied, relevant_ok, poisoned, list_size=n, ks=ks, dtype=dtype
  )


def _metrics_from_counts(rel, above, tied, relevant_ok, poisoned, *, list_size, ks, dtype):
  """Per-query metrics `[c]` (and the relevant counts) from the scores `rel [c, R]` of the
  relevant items and the counts of gallery items above and tied with each."""
  other = rel[:, None, :]  # [c, 1, R]: the other relevant items of the query.
  mine = rel[:, :, None]  # [c, R, 1]
  slot = jnp.arange(rel.shape[1])
  relevant_above = jnp.sum(other > mine, axis=-1, dtype=jnp.int32)
  relevant_tied = jnp.sum(other == mine, axis=-1, dtype=jnp.int32)
  earlier = (other == mine) & (slot[None, None, :] < slot[None, :, None])
  tie_position = 1 + jnp.sum(earlier, axis=-1, dtype=jnp.int32)
  stats = ranking.relevant_item_statistics(
      above, tied, relevant_above, relevant_tied, tie_position, list_size=list_size, dtype=dtype
  )
  num_rel = jnp.sum(relevant_ok, axis=-1)
  out = {
      "map@r": metrics.map_at_r_from_statistics(stats, relevant_ok, num_rel, dtype),
      "map": metrics.ap_from_statistics(stats, relevant_ok, num_rel, dtype),
      "tie_aware_map": metrics.tie_aware_ap_from_statistics(stats, relevant_ok, num_rel, dtype),
  }
  for k in ks:
    out[f"recall@{k}"] = metrics.recall_at_k_from_statistics(stats, relevant_ok, k, dtype)
  out = {key: jnp.where(poisoned, jnp.asarray(jnp.nan, dtype), v) for key, v in out.items()}
  return out, num_rel


_evaluate_chunk_jit = jax.jit(_evaluate_chunk, static_argnames=("ks", "similarity_fn"))


# ---------------------------------------------------------------------------------------------
# Evaluation over the devices of every process (`mesh=`).


def _sharded_step(
    step, take, queries, self_ids, relevant_index, relevant_ok, gallery, gallery_ids, *,
    axes, list_size, ks, similarity_fn,
):
  """One chunk of queries on one device, inside `shard_map` over every axis of the mesh.

  The chunk is the one `_evaluate_chunk` takes in one process: `take [c]` gives, for each of its
  queries, this device's slot holding it (-1 where another device holds it), and a `psum` in which
  every other device adds an exact 0 assembles it on every device. Each device scores the chunk
  against its own run of gallery rows (global ids `gallery_ids`, -1 in padding slots) and counts,
  for each relevant item, its rows above and tied; the integer counts add up over devices. The
  score of a relevant item comes from the device that holds it, by the same exact `psum`. The
  metrics are then computed on every device from the same `[c, R]` arrays as in one process.
  """
  take = take[step]
  held = take >= 0
  rows = jnp.clip(take, 0)

  def assemble(x):
    mask = held.reshape(-1, *([1] * (x.ndim - 1)))
    return jax.lax.psum(jnp.where(mask, x[rows], jnp.zeros((), x.dtype)), axes)

  q, selves, index = assemble(queries), assemble(self_ids), assemble(relevant_index)
  ok = assemble(relevant_ok.astype(jnp.int32)) > 0
  scores_t = similarity_fn(q, gallery).T  # [S, c]: this device's rows against the chunk.
  dtype = lists.compute_dtype(scores_t.dtype)
  scores_t = scores_t.astype(dtype)
  valid = (gallery_ids >= 0)[:, None]
  scores_t = jnp.where(valid & (gallery_ids[:, None] == selves[None, :]), -jnp.inf, scores_t)
  nan_count = jax.lax.psum(jnp.sum(jnp.isnan(scores_t) & valid, axis=0, dtype=jnp.int32), axes)
  scores_t = jnp.where(valid, scores_t, jnp.nan)  # Padding slots count nothing.
  position = index - gallery_ids[0]  # This device's rows are consecutive gallery ids.
  here = ok & (position >= 0) & (position < jnp.sum(gallery_ids >= 0))
  rel = scores_t[jnp.clip(position, 0, scores_t.shape[0] - 1), jnp.arange(q.shape[0])[:, None]]
  rel = jax.lax.psum(jnp.where(here, rel, jnp.zeros((), dtype)), axes)
  rel = jnp.where(ok, rel, jnp.nan)  # NaN compares False: empty slots count nothing.
  above, tied = _count_above_and_tied(scores_t, rel)
  above, tied = jax.lax.psum(above, axes), jax.lax.psum(tied, axes)
  return _metrics_from_counts(
      rel, above, tied, ok, nan_count > 0, list_size=list_size, ks=ks, dtype=dtype
  )


@functools.partial(jax.jit, static_argnames=("mesh", "list_size", "ks", "similarity_fn"))
def _sharded_step_jit(step, *arrays, mesh, list_size, ks, similarity_fn):
  axes = tuple(mesh.axis_names)
  body = functools.partial(
      _sharded_step, axes=axes, list_size=list_size, ks=ks, similarity_fn=similarity_fn
  )
  return jax.shard_map(
      body, mesh=mesh, in_specs=(P(),) + (P(axes),) * len(arrays), out_specs=P(),
      check_vma=False,
  )(step, *arrays)


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


def _put(mesh, blocks):
  """A global array split over every axis of `mesh`, from this process's per-device blocks."""
  sharding = jax.NamedSharding(mesh, P(tuple(mesh.axis_names)))
  first = next(iter(blocks.values()))
  shape = (first.shape[0] * mesh.devices.size, *first.shape[1:])
  arrays = [jax.device_put(blocks[d], d) for d in sharding.addressable_devices]
  return jax.make_array_from_single_device_arrays(shape, sharding, arrays)


def _evaluate_sharded(
    fn, mesh, queries, q_labels, gallery, g_labels, leave_one_out, *, ks, chunk_size,
    similarity_fn,
):
  """Per-query values `[Q]` and relevant counts of the job's whole query set, on every process."""
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top

  # Checked before the first collective, which would wait for the processes left out.
  missing = sorted(set(range(jax.process_count())) - {d.process_index for d in mesh.devices.flat})
  if missing:
    raise ValueError(
        f"{fn}: the mesh has no device of process(es) {missing}; build it over jax.devices() "
        "(every device of the job), e.g. jax.make_mesh((jax.device_count(),), ('batch',))."
    )
  sizes = np.array([queries.shape[0], gallery.shape[0], queries.shape[1]], np.int64)
  sizes = np.asarray(multihost_utils.process_allgather(sizes)).reshape(-1, 3)  # [P, 3]
  if np.any(sizes[:, 2] != sizes[0, 2]):
    raise ValueError(
        f"{fn}: the processes' embeddings differ in dimension ({sizes[:, 2].tolist()}); give "
        "every process rows of the same [., D]."
    )
  num_queries, n = int(sizes[:, 0].sum()), int(sizes[:, 1].sum())
  # Every process learns every gallery label (4 bytes an item, against 4 D for an embedding).
  padded = np.pad(g_labels.astype(np.int64), (0, int(sizes[:, 1].max()) - len(g_labels)))
  gathered = np.asarray(multihost_utils.process_allgather(padded)).reshape(len(sizes), -1)
  all_labels = np.concatenate([gathered[p, : sizes[p, 1]] for p in range(len(sizes))])
  order = np.argsort(all_labels, kind="stable").astype(np.int32)
  classes, starts, counts = np.unique(all_labels[order], return_index=True, return_counts=True)
  slots = np.arange(int(counts.max()))
  me = jax.process_index()
  q_first, g_first = int(sizes[:me, 0].sum()), int(sizes[:me, 1].sum())

  def blocks(layout, rows, local, first, fill):
    out = {}
    for d, start, held in layout:
      part = local[start - first : start - first + held]
      out[d] = np.concatenate([part, np.full((rows - held, *part.shape[1:]), fill, part.dtype)])
    return out

  q_layout, q_rows = _layout(mesh, sizes[:, 0])
  query_ids = np.arange(q_first, q_first + len(queries), dtype=np.int32)
  self_ids = query_ids if leave_one_out else np.full(len(queries), -1, np.int32)
  # The relevant items of a class are one block of the gallery sorted by label, as in one process.
  pos = np.clip(np.searchsorted(classes, q_labels), 0, len(classes) - 1)
  count = np.where(classes[pos] == q_labels, counts[pos], 0)
  relevant_index = order[np.clip(starts[pos][:, None] + slots, 0, n - 1)]
  relevant_ok = (slots[None, :] < count[:, None]) & (relevant_index != self_ids[:, None])
  # The chunks of one process: the step's queries, and which slot of which device holds each.
  chunk = max(min(chunk_size, num_queries), 2)
  steps = -(-num_queries // chunk)
  wanted = np.arange(steps * chunk).reshape(steps, chunk)
  take = {}
  for d, start, held in q_layout:
    here = (wanted >= start) & (wanted < start + held)
    take[d] = np.where(here, wanted - start, -1).astype(np.int32)
  query_array = _put(mesh, blocks(q_layout, q_rows, queries, q_first, 0))
  arrays = [
      _put(mesh, take),
      query_array,
      _put(mesh, blocks(q_layout, q_rows, self_ids, q_first, -1)),
      _put(mesh, blocks(q_layout, q_rows, relevant_index.astype(np.int32), q_first, 0)),
      _put(mesh, blocks(q_layout, q_rows, relevant_ok, q_first, False)),
  ]
  if leave_one_out:
    arrays += [query_array, _put(mesh, blocks(q_layout, q_rows, query_ids, q_first, -1))]
  else:
    g_layout, g_rows = _layout(mesh, sizes[:, 1])
    gallery_ids = np.arange(g_first, g_first + len(gallery), dtype=np.int32)
    arrays += [
        _put(mesh, blocks(g_layout, g_rows, gallery, g_first, 0)),
        _put(mesh, blocks(g_layout, g_rows, gallery_ids, g_first, -1)),
    ]
  results = [
      _sharded_step_jit(
          np.int32(step), *arrays, mesh=mesh, list_size=n, ks=ks, similarity_fn=similarity_fn
      )
      for step in range(steps)
  ]
  # Replicated results: every process reads its own copy.
  fetched = jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), results)
  num_relevant = np.concatenate([num_rel for _, num_rel in fetched])[:num_queries]
  keys = [f"recall@{k}" for k in ks] + ["map@r", "map", "tie_aware_map"]
  per_query = {
      key: np.concatenate([values[key] for values, _ in fetched])[:num_queries] for key in keys
  }
  return per_query, num_relevant


def _as_embeddings(fn, name, x):
  """Embeddings as a numpy array of the compute dtype (float32, or float64 under x64), finite."""
  checks.check_array(fn, name, x, kind="floating", ndim=2, layout="[N, D]")
  x = np.asarray(x)
  if x.shape[0] == 0:
    raise ValueError(f"{fn}: {name} are empty (shape {x.shape}); give at least one row.")
  wide = x.dtype == np.float64 and jax.config.read("jax_enable_x64")
  with np.errstate(over="ignore"):  # Overflow is reported below.
    converted = x.astype(np.float64 if wide else np.float32)  # bfloat16, float16: exactly.
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
      fn, "affinity", affinity, shape, layout=layout,
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


def evaluate_retrieval(
    query_embeddings: jax.typing.ArrayLike,
    query_labels: jax.typing.ArrayLike | None = None,
    gallery_embeddings: jax.typing.ArrayLike | None = None,
    gallery_labels: jax.typing.ArrayLike | None = None,
    *,
    affinity: jax.typing.ArrayLike | None = None,
    ks: Sequence[int] = (1, 2, 4, 8),
    chunk_size: int = 256,
    similarity_fn: types.SimilarityFn = similarity.cosine,
    reduce_fn: types.ReduceFn | None = np.mean,
    mesh: jax.sharding.Mesh | None = None,
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

  Lists are never sorted: for each relevant item of a query, the gallery items scored above it and
  tied with it are counted, which is all the metrics need. Time O(Q N (D + R)) with `R` the largest
  number of items relevant to one query, memory O(chunk_size * N + N D): never the `Q x N` matrix.
  A Python loop over chunks calls one jitted function (compiled once: the last chunk is padded).

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
  rows, every gallery label (O(N) integers) and the relevant indices of its queries (O(Q R / P)).
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
    chunk_size: queries per step; memory grows linearly with it.
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

  Returns:
    A dict of Python floats with keys `recall@k` (for each k), `map@r`, `map`, `tie_aware_map`.
    With `reduce_fn=None`, a dict of float64 numpy arrays `[Q]` with the same keys, each query's
    value as the list metric with `reduce_fn=None` gives it (0 for a query without a relevant
    item), and `num_relevant`, int `[Q]`: the queries with `num_relevant > 0` are those the
    reduction counts.

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
  ks = tuple(ks)
  if not ks:
    raise ValueError(f"{fn}: ks must name at least one cut-off.")
  for k in ks:
    checks.check_positive_int(fn, "each k in ks", k)
  checks.check_positive_int(fn, "chunk_size", chunk_size)
  if reduce_fn is not None:
    checks.check_callable(fn, "reduce_fn", reduce_fn, hint="e.g. np.mean, or None per query.")
  if mesh is not None and not isinstance(mesh, jax.sharding.Mesh):
    raise TypeError(
        f"{fn}: mesh must be a jax.sharding.Mesh (e.g. jax.make_mesh((jax.device_count(),), "
        f"('batch',))) or None, got {type(mesh).__name__}."
    )
  queries = _as_embeddings(fn, "query_embeddings", query_embeddings)
  num_queries = queries.shape[0]
  if affinity is not None and (query_labels is not None or gallery_labels is not None):
    raise ValueError(
        f"{fn}: give either labels (query_labels, gallery_labels) or affinity=, not both."
    )
  if affinity is None and query_labels is None:
    raise ValueError(
        f"{fn}: give query_labels ([Q] or [Q, C]) or affinity= ([Q, N], or [Q, Q] without a "
        "gallery)."
    )
  if affinity is None:
    q_labels = _as_labels(fn, "query_labels", query_labels, num_queries)
  if gallery_embeddings is None:
    if gallery_labels is not None:
      raise ValueError(f"{fn}: gallery_labels given without gallery_embeddings.")
    gallery, leave_one_out = queries, True
    if affinity is None:
      g_labels = q_labels
  else:
    gallery = _as_embeddings(fn, "gallery_embeddings", gallery_embeddings)
    if gallery.shape[1] != queries.shape[1]:
      raise ValueError(
          f"{fn}: gallery_embeddings {gallery.shape} and query_embeddings {queries.shape} differ "
          "in dimension."
      )
    leave_one_out = False
    if affinity is None:
      if gallery_labels is None:
        raise ValueError(f"{fn}: gallery_embeddings need gallery_labels (or give affinity=).")
      g_labels = _as_labels(fn, "gallery_labels", gallery_labels, gallery.shape[0])
      if g_labels.ndim != q_labels.ndim or g_labels.shape[1:] != q_labels.shape[1:]:
        raise ValueError(
            f"{fn}: gallery_labels have shape {g_labels.shape}, which does not match "
            f"query_labels of shape {q_labels.shape} (same kind of labels, one row per gallery "
            "item)."
        )
  if mesh is not None:
    if affinity is not None or q_labels.ndim != 1:
      raise ValueError(
          f"{fn}: with mesh=, relevance must come from integer class labels [Q] (and [N]); "
          "multi-hot labels and affinity= are evaluated in one process only (mesh=None)."
      )
    per_query, num_relevant = _evaluate_sharded(
        fn, mesh, queries, q_labels, gallery, g_labels, leave_one_out, ks=ks,
        chunk_size=chunk_size, similarity_fn=similarity_fn,
    )
    return _reduce_queries(per_query, num_relevant, reduce_fn)
  n = gallery.shape[0]
  # At least two query rows per step: a single row takes XLA's matrix-vector kernel, which rounds
  # differently from the matrix product of `batch_retrieval` (see `jaxrank.similarity`).
  chunk = max(min(chunk_size, num_queries), 2)

  # Relevance as a dense [c, N] mask per chunk (affinity, multi-hot labels), or, for class
  # labels, as blocks of the gallery sorted by label.
  if affinity is not None:
    affinity = _as_affinity(fn, affinity, (num_queries, n), leave_one_out)

    def dense_relevant(rows):
      return _affinity_relevant(fn, affinity, rows, leave_one_out)

  elif q_labels.ndim == 2:

    def dense_relevant(rows):
      return _multi_hot_relevant(q_labels, g_labels, rows, leave_one_out)

  else:
    dense_relevant = None
  if dense_relevant is not None:
    max_relevant = 1
    for begin in range(0, num_queries, chunk):
      rows = np.arange(begin, min(begin + chunk, num_queries))
      max_relevant = max(max_relevant, int(dense_relevant(rows).sum(axis=1).max()))
  else:
    # The relevant items of a class are one block of the gallery sorted by label.
    order = np.argsort(g_labels, kind="stable").astype(np.int32)
    classes, starts, counts = np.unique(g_labels[order], return_index=True, return_counts=True)
    max_relevant = int(counts.max())
  slots = np.arange(max_relevant)

  gallery_device = jnp.asarray(gallery)
  results = []  # Device arrays: gathered once at the end so that chunks dispatch asynchronously.
  for begin in range(0, num_queries, chunk):
    rows = np.arange(begin, min(begin + chunk, num_queries))
    self_index = rows if leave_one_out else np.full(rows.shape, -1)
    if dense_relevant is not None:
      relevant = dense_relevant(rows)
      # Relevant items first, in gallery order (a stable sort of "not relevant").
      relevant_index = np.argsort(~relevant, axis=1, kind="stable")[:, :max_relevant]
      relevant_index = relevant_index.astype(np.int32)
      relevant_ok = slots[None, :] < relevant.sum(axis=1)[:, None]
    else:
      labels = q_labels[rows]
      pos = np.clip(np.searchsorted(classes, labels), 0, len(classes) - 1)
      count = np.where(classes[pos] == labels, counts[pos], 0)
      relevant_index = order[np.clip(starts[pos][:, None] + slots, 0, n - 1)]
      relevant_ok = slots[None, :] < count[:, None]
      relevant_ok &= relevant_index != self_index[:, None]
    pad = chunk - len(rows)
    block = queries[rows]
    if pad:
      block = np.pad(block, ((0, pad), (0, 0)))
      self_index = np.pad(self_index, (0, pad), constant_values=-1)
      relevant_index = np.pad(relevant_index, ((0, pad), (0, 0)))
      relevant_ok = np.pad(relevant_ok, ((0, pad), (0, 0)))
    results.append(
        _evaluate_chunk_jit(
            jnp.asarray(block),
            jnp.asarray(self_index, jnp.int32),
            jnp.asarray(relevant_index, jnp.int32),
            jnp.asarray(relevant_ok),
            gallery_device,
            ks=ks,
            similarity_fn=similarity_fn,
        )
    )
  fetched = jax.device_get(results)
  num_relevant = np.concatenate([num_rel for _, num_rel in fetched])[:num_queries]
  keys = [f"recall@{k}" for k in ks] + ["map@r", "map", "tie_aware_map"]
  per_query = {
      key: np.concatenate([values[key] for values, _ in fetched])[:num_queries] for key in keys
  }
  return _reduce_queries(per_query, num_relevant, reduce_fn)


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
