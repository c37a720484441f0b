"""Where the training job's arrays live: the mesh, and the state and batches across processes.

`mesh` (with `shard=True`, the axis `"batch"` over every device of every process); `replicate`
(the state on every device of the mesh) and `local` (a replicated pytree as this process's
arrays); `train_share` (the columns of each global batch that this process's devices hold) and
`global_batch` (this process's slice of a batch as one global array); `is_primary` (the process
that writes files and prints). It imports only `config` of the job.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from experiments.job import config as config_lib


def mesh(config: config_lib.Config) -> jax.sharding.Mesh | None:
  """With `shard=True`, the mesh `("batch",)` over every device of every process; else None."""
  if not config.shard:
    return None
  return jax.make_mesh((jax.device_count(),), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))


def replicate(state, mesh: jax.sharding.Mesh | None):
  """The state on every device of the mesh (each process holds the same values), or as it is."""
  if mesh is None:
    return state
  return jax.device_put(state, NamedSharding(mesh, P()))


def local(tree):
  """A replicated (or single-device) pytree as arrays on one device of this process."""
  return jax.tree.map(lambda x: x.addressable_data(0), tree)


def train_share(
  config: config_lib.Config, mesh: jax.sharding.Mesh | None
) -> tuple[int, int] | None:
  """The columns `start:stop` of each global batch that this process's devices hold (None: all).

  `jax.make_array_from_process_local_data` takes, from each process, the rows of the global batch
  that its devices hold, in order; with the mesh that `mesh` makes they are one contiguous slice.
  """
  if mesh is None or jax.process_count() == 1:
    return None
  held = NamedSharding(mesh, P("batch")).addressable_devices_indices_map((config.batch_size,))
  # The stub allows None for a device without a shard; every addressable device has one here.
  rows = sorted((index[0].start or 0, index[0].stop) for index in held.values())  # type: ignore[index]
  start, stop = rows[0][0], rows[-1][1]
  if any(a[1] != b[0] for a, b in zip(rows, rows[1:])):
    raise ValueError(
      f"train_and_evaluate: this process's devices hold the rows {rows} of the batch, which "
      "are not one contiguous slice; the mesh must order devices by process."
    )
  return start, stop


def global_batch(mesh: jax.sharding.Mesh | None, local: np.ndarray, batch_size: int):
  """This process's slice of a batch, as the global array split over the mesh's devices."""
  if mesh is None:
    return jnp.asarray(local)
  return jax.make_array_from_process_local_data(
    NamedSharding(mesh, P("batch")), local, (batch_size, *local.shape[1:])
  )


def is_primary() -> bool:
  """Whether this is the process that writes files and prints (process 0; the only one alone)."""
  return jax.process_index() == 0
