"""Bounds on relevant items chosen at run time: a bounded form when the lists allow one.

Several losses have two exact forms of one computation: a general one, whose cost does not depend
on how many relevant items a list holds (a sort of each list, a loop that runs until the list with
the most relevant items is done), and a bounded one (`max_relevant=K`), a few fused passes over
`[B, n]` per relevant slot, several times faster on accelerators but correct only for lists with
at most `K` relevant items. With concrete labels the count is read before tracing; in a jitted
training step the labels are traced and the count is known only on the device, where the choice
can still be made: `branch_index` says which of the bounded forms (the smallest capacity that
holds every list's relevant items) or the general form (above them all) to run, and the loss runs
it with `lax.switch`. One branch executes; a compiler's static cost estimate counts them all, so
such a program is judged on the device (or, compile-only, by the branch taken).

The losses choose inside their custom VJPs (`precision_sums._chosen_precision_sums`,
`blackbox_ranks._list_values`), one index for the forward and the backward pass: a
`lax.switch` differentiated from outside would make every branch's residuals outputs of the
switch, all allocated whichever branch runs (at B = 16,384 on a TPU v5e, 15.1 GB of temporaries
for SmoothAP against the general loop's 8.6 GB).

Under `vmap` over independent batches the index is batched and `lax.switch` becomes a select that
runs every branch (the values are the same, only slower); a vmapped caller with a known bound
passes `max_relevant`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# The bounded forms tried, smallest first: in-batch lists of `m` items per class hold `m - 1`
# relevant items (2 to 8 per class in the papers' set-ups). The losses take those up to their own
# largest: the smooth-rank losses up to 4 (`precision_sums.GROUP`, above it groups of 4 in a loop),
# the blackbox losses all (`blackbox_ranks._CAPACITIES`, above them the sort).
CAPACITIES = (1, 2, 4, 8)


def capacities_for(n: int, capacities: tuple[int, ...] = CAPACITIES) -> tuple[int, ...]:
  """The distinct capacities below the list length `n` (a bound of `n` or more bounds nothing)."""
  return tuple(sorted({k for k in capacities if 0 < k < n}))


def largest_relevant_count(relevant: jax.Array) -> jax.Array:
  """The largest number of relevant items of a list of `relevant` `[..., n]` (0 without lists)."""
  counts = jnp.sum(relevant, axis=-1, dtype=jnp.int32)
  return jnp.max(counts, initial=0) if counts.ndim else counts


def branch_index(relevant: jax.Array, bounded: tuple[int, ...]) -> jax.Array:
  """The branch of `(*bounded, None)` to run for the lists of `relevant` (`[..., n]` booleans):
  `i` for `bounded[i]`, the first capacity that holds every list's relevant items, or
  `len(bounded)` for the general form (`None`) when a list holds more. `bounded` is increasing
  (`capacities_for`). An int32 scalar computed on the device, for `lax.switch`."""
  largest = largest_relevant_count(relevant)
  return jnp.searchsorted(jnp.asarray(bounded, jnp.int32), largest, side="left").astype(jnp.int32)
