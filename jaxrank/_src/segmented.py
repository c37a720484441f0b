"""Segments: several lists of different lengths packed into one row (rax's `segments`).

Every list-level metric and loss takes an optional keyword `segments`, an integer array shaped like
the scores, `[..., n]`. The items of one row (one index of the leading axes) with equal segment ids
form one list: ids are compared within a row only (the same id in two rows names two lists), and
need not be sorted, contiguous or start at 0. With `segments`:

* **Each segment is one list**, exactly as if it were given as its own row, padded with masked
  items: the same value and, for a loss, the same gradient. `where` still masks items (a segment
  whose items are all masked is an empty list), and `topn` cuts each segment at its own `topn`-th
  item.
* **Per-list values have the scores' shape.** `reduce_fn=None` returns `[..., n]`: each segment's
  value at the position of its first valid item, 0 everywhere else (at the segment's other items,
  at masked items, and for a segment left out of the reduction), as rax does; so
  `sum(f(reduce_fn=None)) == f(reduce_fn=jnp.sum)` still holds.
* **The reduction is over segments**, with the conventions of unsegmented lists: a segment without
  a relevant valid item (for NDCG and DCG, with an ideal DCG of 0; for OPA, without an ordered
  pair) gives 0 and is left out, so `jnp.mean` averages over the defined segments of every row.
  rax's segmented metrics average over every segment with a valid item instead, as they do over
  lists. A `reduce_fn` is called with `where=` the `[..., n]` mask of the defined segments' first
  valid items.
* **Per-list arguments are per segment**, given in the shape `[..., n]` of the per-list values:
  `weights` (and `blackbox_*_loss`'s array `interpolation`) are read at each segment's first valid
  item, so give every item of a segment its segment's weight; `weights[..., None]` weighs all the
  segments of a row alike. Per-item arguments (`item_weights`) stay per item.
* **Positions are kept.** A segment's list is its row with the other segments' items masked in
  place, so it keeps its items' positions in the row. That changes nothing for a function of the
  items' order alone (tied scores ranked by position keep their relative order); only
  `decomposability_gap`, whose batches are consecutive positions, splits a segment by the
  positions of its items in the packed row.

**How.** Each packed row of `n` items becomes `n` lists of `n` items, `[..., n, n]`: list `i` is
the row with every item outside item `i`'s segment masked, and is kept only when item `i` is the
first valid item of its segment (otherwise it is entirely masked, an empty list that every
function already leaves out). The function then runs unchanged on these lists, so every metric and
loss supports segments through this one transformation, under `jit`, `vmap` and `grad`, with traced
segments (no shape depends on them).

**Cost.** `n` times the function's per-list cost, for each packed row of `n` items: the
`[..., n, n]` lists and masks take O(n^2) memory per row, a metric that sorts takes O(n^2 log n)
time per row, the histogram losses O(n^2 L), and the functions that compare every pair
(`opa_metric`, the smooth-rank losses) O(n^3) time, and O(n^3) memory for `opa_metric` (the
smooth-rank losses bound theirs by `chunk_size`). Segments are meant for learning-to-rank lists of
tens or hundreds of items; for in-batch retrieval lists of thousands of items, pad the lists to one
length and mask the padding with `where` instead.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrank._src import checks
from jaxrank._src import lists


def as_lists(
  fn: str,
  segments: jax.typing.ArrayLike | None,
  scores: jax.Array,
  where: jax.Array,
  *per_item: jax.Array,
) -> tuple[jax.Array, ...]:
  """The segments of packed rows as lists (module docstring, *How*), or the inputs unchanged.

  Args:
    fn: the public function's name, for the messages.
    segments: `None`, or the `[..., n]` integer segment ids (checked here: `TypeError` for a
      non-integer dtype, `ValueError` for a shape other than that of `scores`).
    scores: `[..., n]` checked scores.
    where: `[..., n]` boolean mask of valid items (full shape, checked).
    *per_item: other `[..., n]` per-item arrays of full shape (labels, item weights).

  Returns:
    `(scores, where, *per_item)`, each `[..., n, n]` with `segments` (`where[..., i, :]` the
    valid items of item `i`'s segment when `i` is its first valid item, else all False), or the
    inputs themselves when `segments` is None.
  """
  if segments is None:
    return (scores, where, *per_item)
  captured = isinstance(scores, jax.core.Tracer) and not isinstance(segments, jax.core.Tracer)
  # Compacted first: under `jit`, `jnp.asarray` of a closed-over numpy array is already traced.
  segments = checks.check_segments(fn, lists.embedded_compactly(segments, scores), scores.shape)
  if captured:  # Closed over by a traced caller: not folded into the program (`lists.opaque`).
    (segments,) = lists.opaque(segments)
  n = scores.shape[-1]
  # same[..., i, j]: item j is a valid item of item i's segment.
  same = (segments[..., :, None] == segments[..., None, :]) & where[..., None, :]
  # Item i is its segment's first valid item when no valid item of its segment comes before it.
  position = jnp.arange(n)
  first = where & (jnp.min(jnp.where(same, position, n), axis=-1) == position)
  spread = lambda x: jnp.broadcast_to(x[..., None, :], x.shape[:-1] + (n, n))
  return (spread(scores), same & first[..., :, None], *map(spread, per_item))
