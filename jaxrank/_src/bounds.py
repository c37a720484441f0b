"""Bounds on relevant items chosen at run time: a bounded form when the lists allow one.

Several losses have two exact forms of one computation: a general one, whose cost does not depend
on how many relevant items a list holds (a sort of each list, a loop that runs until the list with
the most relevant items is done), and a bounded one (`max_relevant=K`), a few fused passes over
`[B, n]` per relevant slot, several times faster on accelerators but correct only for lists with
at most `K` relevant items. With concrete labels the count is read before tracing; in a jitted
training step the labels are traced and the count is known only on the device, where the choice
can still be made: `by_relevant_count` runs, through `lax.switch`, the bounded form of the smallest
capacity that holds every list's relevant items, or the general form above them all. One branch
executes; a compiler's static cost estimate counts them all, so such a program is judged on the
device (or, compile-only, by the branch taken).

Under `vmap` over independent batches the count is batched and `lax.switch` becomes a select that
runs every branch (the values are the same, only slower); a vmapped caller with a known bound
passes `max_relevant`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

# The bounded forms tried, smallest first: in-batch lists of `m` items per class hold `m - 1`
# relevant items (2 to 8 per class in the papers' set-ups); above 8 the one-shot forms of the
# accelerators are no longer taken (`smooth_rank`) and the general form is as fast.
CAPACITIES = (1, 2, 4, 8)


def capacities_for(n: int, capacities: tuple[int, ...] = CAPACITIES) -> tuple[int, ...]:
  """The distinct capacities below the list length `n` (a bound of `n` or more bounds nothing)."""
  return tuple(sorted({k for k in capacities if 0 < k < n}))


def largest_relevant_count(relevant: jax.Array) -> jax.Array:
  """The largest number of relevant items of a list of `relevant` `[..., n]` (0 without lists)."""
  counts = jnp.sum(relevant, axis=-1, dtype=jnp.int32)
  return jnp.max(counts, initial=0) if counts.ndim else counts


def by_relevant_count(
  relevant: jax.Array,
  form: Callable[..., Any],
  *operands: Any,
  capacities: tuple[int, ...] = CAPACITIES,
) -> Any:
  """`form(K, *operands)` for the smallest `K` of `capacities` that holds the relevant items of
  every list of `relevant` (`[..., n]` booleans), or `form(None, *operands)` (the general form)
  when a list holds more, chosen on the device at run time.

  `form(K, ...)` must be exact for lists of at most `K` relevant items, and every form must return
  the same structure of shapes and dtypes. Differentiable (reverse and forward mode go through
  the branch taken); under `vmap` with batched `relevant` every branch runs (module docstring).
  """
  bounded = capacities_for(relevant.shape[-1], capacities)
  if not bounded:
    return form(None, *operands)
  branches = [functools.partial(form, k) for k in (*bounded, None)]
  return lax.switch(branch_index(relevant, bounded), branches, *operands)


def branch_index(relevant: jax.Array, bounded: tuple[int, ...]) -> jax.Array:
  """The branch of `(*bounded, None)` that `by_relevant_count` takes: `i` for `bounded[i]`, the
  first capacity that holds every list's relevant items, `len(bounded)` for the general form.
  For a custom VJP that chooses its forward and backward forms with one index (`smooth_rank`)."""
  largest = largest_relevant_count(relevant)
  return jnp.searchsorted(jnp.asarray(bounded, jnp.int32), largest, side="left").astype(jnp.int32)
