"""In-batch retrieval sharded over devices, with exactly the single-device gradient.

Ordinary data parallelism changes a listwise loss: each device would rank its queries against its
own slice of the batch only. Here each device holds a slice of the queries, all-gathers the
embeddings and labels of the whole batch, and ranks its queries against all of them: the
`[B_local, B]` lists that `batch_retrieval` would give for those queries. The mean over all queries
is a `psum`. Under `jax.shard_map` (with its default replication checking), differentiating that
mean gives each device the gradient of the global loss for its own embeddings (the all-gather's
transpose sums every device's contribution) and, for replicated parameters, the full gradient.

Per-device work and memory are O(B_local * B) for the lists plus O(B D) for the gathered
embeddings, so N devices together do the work of one device on the whole batch, each holding 1/N of
the score matrix.

A data-parallel training step (parameters replicated, batch sharded) that also embeds each
device's slice in chunks; on one device it is the ordinary step, on N it gives the same loss and
gradients (tested on 8 simulated devices in `tests/multidevice/`):

>>> import jax, jax.numpy as jnp
>>> from jax.sharding import PartitionSpec as P
>>> from flax import nnx
>>> import jaxrank
>>> mesh = jax.make_mesh((jax.device_count(),), ("batch",),
...                      axis_types=(jax.sharding.AxisType.Auto,))
>>> graphdef, params = nnx.split(nnx.Linear(8, 4, rngs=nnx.Rngs(0)), nnx.Param)
>>> embed = lambda p, x: nnx.merge(graphdef, p)(x)
>>> def local_loss(e, y):  # This device's queries against the whole batch.
...   s, r, w = jaxrank.sharded_batch_retrieval(e, y, axis_name="batch")
...   return jaxrank.smoothap_loss(s, r, where=w, reduce_fn=jaxrank.sharded_mean("batch"))
>>> step = jax.jit(jax.shard_map(
...     jaxrank.chunked_value_and_grad(embed, local_loss, chunk_size=4), mesh=mesh,
...     in_specs=(P(), P("batch"), P("batch")), out_specs=(P(), P())))
>>> x = jax.random.normal(jax.random.key(0), (8 * jax.device_count(), 8))
>>> loss, grads = step(params, x, jnp.arange(x.shape[0]) % 4)
>>> loss.shape, grads["kernel"].shape
((), (8, 4))

**Across processes** (`jax.distributed`: one program per host, one mesh over the devices of all
hosts) the functions are the same; only the setup and the reading of results differ. Each process
joins the job before any other JAX call, builds the mesh over `jax.devices()` (every device of the
job, not `jax.local_devices()`), feeds only its own rows of the global batch, and reads the
replicated loss as usual but only its own shards of anything sharded over the batch. A sketch of
a 2-process job (tested with 2 processes of 2 CPU devices each in `tests/multiprocess/`)::

  jax.distributed.initialize()  # Cluster detection, or coordinator_address=, num_processes=, ...
  mesh = jax.make_mesh((jax.device_count(),), ("batch",))  # All devices of all processes.
  sharding = jax.NamedSharding(mesh, P("batch"))
  # This process's rows of the [B, D] batch: the rows its devices hold (in the index order of
  # sharding.addressable_devices_indices_map((B, D))), e.g. its share of a sampled P x K batch.
  embeddings = jax.make_array_from_process_local_data(sharding, local_embeddings, (B, D))
  labels = jax.make_array_from_process_local_data(sharding, local_labels, (B,))
  loss_fn = jax.jit(jax.value_and_grad(jaxrank.sharded_loss(jaxrank.smoothap_loss, mesh, "batch")))
  loss, grad = loss_fn(embeddings, labels)  # Runs on every process at once (collectives).
  float(loss)  # Replicated: the same global loss on every process.
  for shard in grad.addressable_shards:  # np.asarray(grad) would fail: the rest is elsewhere.
    rows, local_grad = shard.index[0], np.asarray(shard.data)

Numpy inputs (`loss_fn(np_embeddings, np_labels)`) are taken as the whole global batch, which
every process must then pass identically; `make_array_from_process_local_data` avoids holding it
whole on each host. Eager input checks that read values (out-of-range scores, negative weights)
still run on global arrays; their messages then give counts instead of the offending value.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxrank import types
from jaxrank._src import blocked
from jaxrank._src import checks
from jaxrank._src import lists
from jaxrank._src import retrieval
from jaxrank._src import similarity


def _check_batch(
  fn: str, embeddings: jax.typing.ArrayLike, labels: jax.typing.ArrayLike, batch: str
) -> tuple[jax.Array, jax.Array]:
  """Floating embeddings `[batch, D]` and labels `[batch]` or `[batch, C]` with the same batch."""
  embeddings = checks.check_floating(fn, "embeddings", embeddings, ndim=2, layout=f"[{batch}, D]")
  labels = retrieval.check_labels(fn, labels)
  b = embeddings.shape[0]
  want = f"[{b}] or [{b}, C] (one label or multi-hot row per embedding)"
  checks.check_shape(fn, "labels", labels, (b, *labels.shape[1:]), layout=want)
  return embeddings, labels


def sharded_batch_retrieval(
  embeddings: jax.Array,
  labels: jax.Array,
  *,
  axis_name: str,
  include_self: bool = False,
  similarity_fn: types.SimilarityFn = similarity.cosine,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`batch_retrieval` for this device's queries against the whole batch; inside `shard_map`.

  Args:
    embeddings: `[B_local, D]` this device's slice of the batch (slices in device order along
      `axis_name` make up the batch).
    labels: `[B_local]` integer labels or `[B_local, C]` multi-hot labels of the slice.
    axis_name: the mesh axis the batch is sharded over.
    include_self: keep each query in its own list, as in `batch_retrieval`.
    similarity_fn: the scoring rule, as in `batch_retrieval` (cosine by default).

  Returns:
    `(scores, relevance, where)`, each `[B_local, B]`: the rows of `batch_retrieval(all_embeddings,
    all_labels)` for this device's queries, the query itself excluded by its global index.
  """
  embeddings, labels = _check_batch("sharded_batch_retrieval", embeddings, labels, "B_local")
  gathered = jax.lax.all_gather(embeddings, axis_name, tiled=True)
  gathered_labels = jax.lax.all_gather(labels, axis_name, tiled=True)
  b_local, b = embeddings.shape[0], gathered.shape[0]
  scores = similarity_fn(embeddings, gathered)
  relevance = retrieval.relevance_matrix(labels, gathered_labels)
  first = jax.lax.axis_index(axis_name) * b_local
  columns = jnp.arange(b)[None, :]
  rows = first + jnp.arange(b_local)[:, None]
  where = jnp.ones((b_local, b), bool) if include_self else columns != rows
  return scores, relevance, where


def sharded_mean(axis_name: str) -> types.ReduceFn:
  """A `reduce_fn` for list-level losses: the mean over the valid lists of every device.

  `loss_fn(scores, relevance, where=where, reduce_fn=sharded_mean("batch"))` inside `shard_map`
  returns, on every device, what `reduce_fn=jnp.mean` gives on the lists of all devices together:
  the mean over the valid lists (lists without a relevant item are left out), 0 when there is
  none; for a loss given per-list `weights`, the weighted mean `sum(w * values) / sum(w)` over
  every device's valid lists. It is a `Mean` whose sums are `psum`s over `axis_name`.

  The proxy losses take it too (`proxy_nca_loss`, `proxy_nca_plus_plus_loss`,
  `proxy_anchor_loss`, with the proxies replicated and the batch split over `axis_name`): their
  means, and Proxy-Anchor's sums over items, are then the whole global batch's.
  """
  return lists.Mean(lambda x: jax.lax.psum(jnp.sum(x), axis_name))


def sharded_loss(
  loss_fn: Callable[..., jax.Array],
  mesh: jax.sharding.Mesh,
  axis_name: str,
  *,
  include_self: bool = False,
  similarity_fn: types.SimilarityFn = similarity.cosine,
  block_size: int | None = None,
) -> Callable[[jax.Array, jax.Array], jax.Array]:
  """Wraps a list-level loss into `f(embeddings [B, D], labels [B]) -> scalar`, over devices.

  `f` runs `sharded_batch_retrieval` and `loss_fn(..., reduce_fn=sharded_mean(axis_name))` under
  `jax.shard_map` with the batch split over `axis_name`. It equals
  `loss_fn(*batch_retrieval(embeddings, labels))` and so do its gradients, for every jaxrank loss
  (fix hyperparameters with `functools.partial`). Callable from outside `shard_map`, under `jit`
  and `grad`. The inputs are placed on the mesh, split over `axis_name`: arrays already sharded so
  (global arrays of a multi-process job included) stay where they are; others are taken as the
  whole batch. On a mesh of `Explicit` axes (`jax.make_mesh`'s default) call its gradient under
  `jit` or `jax.set_mesh(mesh)`, as JAX requires of explicit sharding.

  With `block_size`, each device takes its queries `block_size` at a time, by the loop of
  `blocked_loss` (its lists `[block_size, B]`, recomputed in the backward pass, instead of
  `[B_local, B]`); the two sums of each device's mean are added over the devices, as
  `sharded_mean` does, so the result is unchanged. `loss_fn` must then be a mean over lists, as
  `blocked_loss` requires.

  Args:
    loss_fn: a list-level loss `loss_fn(scores, labels, *, where, reduce_fn)`.
    mesh: the device mesh.
    axis_name: the mesh axis to shard the batch over; the batch size must be a multiple of its
      size.
    include_self: as in `batch_retrieval`.
    similarity_fn: the scoring rule, as in `batch_retrieval` (cosine by default).
    block_size: optional positive int: the queries per block on each device (see above); `None`
      (the default) scores all of a device's queries at once.

  Returns:
    The sharded loss function.
  """
  fn = "sharded_loss"
  checks.check_callable(fn, "loss_fn", loss_fn, hint="Pass a list-level loss, e.g. smoothap_loss.")
  if axis_name not in mesh.axis_names:
    raise ValueError(
      f"{fn}: the mesh has no axis {axis_name!r}; its axes are {tuple(mesh.axis_names)}."
    )
  checks.check_positive_int(fn, "block_size", block_size, allow_none=True)
  num_devices = mesh.shape[axis_name]

  def local_blocked(embeddings, labels):
    return blocked.mean_over_blocks(
      fn,
      loss_fn,
      embeddings,
      jax.lax.all_gather(embeddings, axis_name, tiled=True),
      labels=labels,
      item_labels=jax.lax.all_gather(labels, axis_name, tiled=True),
      affinity=None,
      block_size=block_size,
      first=jax.lax.axis_index(axis_name) * embeddings.shape[0],
      include_self=include_self,
      item_where=None,
      weights=None,
      similarity_fn=similarity_fn,
      reduce=sharded_mean(axis_name),
    )

  def local(embeddings, labels):
    if block_size is not None:
      return local_blocked(embeddings, labels)
    scores, relevance, where = sharded_batch_retrieval(
      embeddings,
      labels,
      axis_name=axis_name,
      include_self=include_self,
      similarity_fn=similarity_fn,
    )
    return loss_fn(scores, relevance, where=where, reduce_fn=sharded_mean(axis_name))

  def loss(embeddings: jax.Array, labels: jax.Array) -> jax.Array:
    embeddings, labels = _check_batch(fn, embeddings, labels, "B")
    if embeddings.shape[0] % num_devices:
      raise ValueError(
        f"{fn}: a batch of {embeddings.shape[0]} cannot be split evenly over the "
        f"{num_devices} devices of mesh axis {axis_name!r}; use a batch size that is a multiple "
        f"of {num_devices}."
      )
    batch = jax.NamedSharding(mesh, P(axis_name))
    embeddings, labels = jax.device_put((embeddings, labels), batch)
    return jax.shard_map(local, mesh=mesh, in_specs=(P(axis_name), P(axis_name)), out_specs=P())(
      embeddings, labels
    )

  return loss
