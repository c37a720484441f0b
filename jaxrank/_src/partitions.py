"""A function evaluated on each batch of a partition: the mechanism of every decomposability gap.

`over_batches(fn, data, batches, axis=...)` gathers, for each row of `batches` (item indices), those
items of every leaf of `data` along `axis` and evaluates `fn` on them. The list-level
`decomposability_gap` (each query's retrieval set split into batches) and
`jaxrank.landscape.batch_gap` (a whole data set split into batches, any function of the batch) both
compute their per-batch values here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxrank import types


def over_batches(
  fn: Callable[..., Any],
  data: types.PyTree,
  batches: jax.Array,
  *,
  axis: int = 0,
  args: tuple = (),
  batch_size: int | None = None,
) -> Any:
  """`fn(data restricted to batches[k], *args)` for each `k`, stacked on a new leading axis.

  Batches are evaluated by `jax.lax.map(..., batch_size=batch_size)`: `batch_size` of them at a
  time (vectorised), so that at most `batch_size` gathered copies of the batch items exist at once
  (`None`: one at a time).

  Args:
    fn: `fn(data_batch, *args)`, where `data_batch` is `data` with `B` items along `axis` of each
      leaf; any output pytree.
    data: a pytree whose leaves share the item axis `axis`.
    batches: `[K, B]` integer item indices, one row per batch.
    axis: the item axis of every leaf of `data`.
    args: passed to `fn` unchanged (traced).
    batch_size: batches evaluated at once, or `None`.

  Returns:
    `fn`'s output with a leading axis of size `K`.
  """

  def one(index):
    return fn(jax.tree.map(lambda leaf: jnp.take(leaf, index, axis=axis), data), *args)

  return jax.lax.map(one, batches, batch_size=batch_size)
