"""Blackbox ranks (RaMBO): exact ranks whose gradient is Algorithm 1's interpolation (custom VJPs).

`blackbox_ranks` ranks each list by one sort (`ranking.descending_ranks`) and takes its backward
pass from one more sort of the perturbed scores (Rolinek et al. 2020, Algorithm 1). When a loss
reads the ranks of a few items only, `blackbox_ranks_at` and `blackbox_relevant_ranks(...,
max_relevant=K)` count instead of sorting, O(K n) per list forward and backward, with no host
callback. The counting has two forms that give the same integers: the CPU's (the slots on the
last axis, `lax.top_k` and gathers) and the accelerators' (one array per slot, minima and masked
sums, no gather or scatter). They sit side by side below, each pair followed by the one function
that chooses between them (`platforms.by_platform`, or the branch that
`ranking.descending_ranks_branch` forces). The losses call `blackbox_list_values`, which on
accelerators differentiates their per-list values rather than the ranks (no `[..., n]` ranks kept
between the passes) and chooses the bound on the device. `uses_blackbox_rank` finds these VJPs in
a jaxpr.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from jaxrank._src import bounds
from jaxrank._src import checks
from jaxrank._src import counting
from jaxrank._src import lists
from jaxrank._src import platforms
from jaxrank._src import ranking

# ---------------------------------------------------------------------------------------------
# The ranks of whole lists, by sorting.


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _blackbox_ranks(scores: jax.Array, interpolation: jax.Array, branch: str | None) -> jax.Array:
  return ranking.descending_ranks_on(scores, branch)


def _blackbox_ranks_fwd(scores, interpolation, branch):
  ranks = ranking.descending_ranks_on(scores, branch)
  return ranks, (scores, ranks, interpolation)


def _blackbox_ranks_bwd(branch, residuals, cotangent):
  scores, ranks, interpolation = residuals
  interpolation = jnp.asarray(interpolation, scores.dtype)
  perturbed = ranking.descending_ranks_on(scores + interpolation[..., None] * cotangent, branch)
  return -(ranks - perturbed) / interpolation[..., None], None


_blackbox_ranks.defvjp(_blackbox_ranks_fwd, _blackbox_ranks_bwd)


def blackbox_ranks(scores: jax.typing.ArrayLike, interpolation: jax.typing.ArrayLike) -> jax.Array:
  r"""Ranks of a list (1 = highest score) with RaMBO's blackbox gradient.

  The forward pass is an exact ranking by one stable sort of the last axis (ties are ranked by
  position: the earlier item first). The backward pass is Algorithm 1 of Rolinek et al. 2020:
  given the incoming gradient :math:`g = \partial L / \partial \mathrm{rk}`,

  .. math::
    \nabla_y = -\frac{1}{\lambda}\left[\mathrm{rk}(y) - \mathrm{rk}(y + \lambda g)\right],

  one more sort. **This is not the derivative of the ranks** (which is zero almost everywhere) but
  the gradient of a piecewise-linear interpolation of the loss, whose width grows with
  `interpolation`. Unlike a derivative it is not linear in :math:`g`: scaling the loss (a mean over
  more lists, say) moves the perturbed scores less, so `interpolation` and the loss's scale go
  together.

  Args:
    scores: `[..., n]` floating scores; `0.0` and `-0.0` are one score, NaN scores rank last (in the
      order of the list) on every platform.
    interpolation: the interpolation strength :math:`\lambda > 0` (the paper's lambda), a scalar
      or `[...]` (one per list). It gets no gradient.

  Returns:
    `[..., n]` ranks in `scores`' dtype (exact integers up to 2**24 in float32). O(n log n) time
    for each of the forward and backward passes, O(n) memory.

  >>> import jax, jax.numpy as jnp
  >>> blackbox_ranks(jnp.array([0.1, 0.9, 0.5]), 1.0)
  Array([3., 1., 2.], dtype=float32)
  >>> # Pushing the rank of item 0 down (towards 1) raises its score and lowers those it passes.
  >>> jax.grad(lambda s: blackbox_ranks(s, 1.0)[0])(jnp.array([0.1, 0.9, 0.5]))
  Array([-2.,  1.,  1.], dtype=float32)
  """
  scores = checks.check_floating(
    "blackbox_ranks", "scores", scores, min_ndim=1, layout="[..., n] (the list, last)"
  )
  interpolation = check_interpolation("blackbox_ranks", interpolation)
  if interpolation.ndim and interpolation.shape != scores.shape[:-1]:
    raise ValueError(
      f"blackbox_ranks: interpolation must be a scalar or one value per list "
      f"{scores.shape[:-1]}, got shape {interpolation.shape}."
    )
  interpolation = jnp.broadcast_to(interpolation.astype(scores.dtype), scores.shape[:-1])
  return _blackbox_ranks(scores, interpolation, ranking.forced_branch())


def check_interpolation(fn: str, interpolation: jax.typing.ArrayLike) -> jax.Array:
  """Checks the blackbox `interpolation` strength (real, `> 0` where known, any shape); returns an
  array."""
  hint = "It is the blackbox interpolation strength (RaMBO's Table 9: 0.2 to 4)."
  checks.check_real(fn, "interpolation", interpolation, above=0, scalar=False, hint=hint)
  return jnp.asarray(interpolation)


# ---------------------------------------------------------------------------------------------
# The ranks of a few items of each list, by counting.


def order_keys(scores: jax.Array) -> jax.Array:
  """Integer keys `[..., n]` whose ascending order, ties by position, is `descending_ranks`' order.

  The scores are negated (`0.0` and `-0.0` one key, every NaN the one positive quiet NaN) and their
  bits mapped to signed integers of the same width that order like the floats: `+inf` first,
  `-inf` after every finite score, NaN last. So item `j` is ranked above item `i` exactly when
  `key[j] < key[i] + (j < i)`, a comparison that needs no sort (`blackbox_ranks_at`). Scores
  narrower than float32 are widened first (exactly).

  Args:
    scores: `[..., n]` floating scores.

  Returns:
    `[..., n]` int32 keys (int64 for float64 scores).
  """
  if jnp.dtype(scores.dtype).itemsize < 4:
    scores = scores.astype(jnp.float32)
  int_dtype = jnp.int64 if jnp.dtype(scores.dtype).itemsize == 8 else jnp.int32
  negated = jnp.where(scores == 0, jnp.zeros_like(scores), -scores)
  negated = jnp.where(jnp.isnan(negated), jnp.asarray(jnp.nan, scores.dtype), negated)
  bits = lax.bitcast_convert_type(negated, int_dtype)
  # Negative floats order backwards as integers: flip their magnitude bits.
  return jnp.where(bits < 0, bits ^ jnp.iinfo(int_dtype).max, bits)


# The counting path: the CPU's form (slots on the last axis, `lax.top_k` and gathers, which
# XLA:CPU runs fast) and the accelerators' (slots on a leading axis, the list last, minima and
# masked sums instead of top_k, gathers and scatters, which a TPU serialises), chosen by
# `platforms.by_platform`; the same integers, so the same ranks and gradients bit for bit.


def _ahead(keys: jax.Array, item_keys: jax.Array, indices: jax.Array) -> jax.Array:
  """`[..., K, n]` int32: whether each item `j` of `keys [..., n]` is ranked above the item at each
  of `indices [..., K]` whose key is `item_keys [..., K]` (ties by position)."""
  position = lax.broadcasted_iota(
    indices.dtype, (1,) * (indices.ndim - 1) + (1, keys.shape[-1]), indices.ndim
  )
  earlier = (position < indices[..., :, None]).astype(keys.dtype)
  return (keys[..., None, :] < item_keys[..., :, None] + earlier).astype(jnp.int32)


def _ahead_among(item_keys: jax.Array, other_keys: jax.Array, indices: jax.Array) -> jax.Array:
  """`[..., K, K]` int32: `[k, m]` whether item `m` (key `other_keys[m]`) is above item `k`."""
  earlier = (indices[..., None, :] < indices[..., :, None]).astype(item_keys.dtype)
  return (other_keys[..., None, :] < item_keys[..., :, None] + earlier).astype(jnp.int32)


# The accelerators' form keeps each slot `k` of the `K` relevant items as its own `[...]` array
# (a Python list, `K` static): whatever runs over the slots is unrolled elementwise code, and the
# only reductions run over the list (the last axis of the scores, as the caller lays them out).
# So XLA fuses every `[..., n]` comparison into the reduction or the elementwise output that reads
# it: nothing `[K, ..., n]` or `[..., n]` between the scores and the gradient is written, and no
# array is transposed between a layout for the slots and one for the list.


def _list_position(n: int, ndim: int) -> jax.Array:
  """`[1, ..., 1, n]` int32 (`ndim` axes): each item's position in its list."""
  return lax.broadcasted_iota(jnp.int32, (1,) * (ndim - 1) + (n,), ndim - 1)


def _slot_pick(values: jax.Array, index: jax.Array) -> jax.Array:
  """`[..., n]`: `values` at `index [...]` of each list, 0 elsewhere."""
  position = _list_position(values.shape[-1], values.ndim)
  return jnp.where(position == index[..., None], values, jnp.zeros((), values.dtype))


def _slot_value(values: jax.Array, index: jax.Array) -> jax.Array:
  """`[...]`: `values [..., n]` at `index [...]` (0 for an index outside the list): a masked sum
  over each list, whose one nonzero term makes it exact (a zero may lose its sign, which no order
  key sees); no gather, which a TPU serialises. O(n)."""
  return jnp.sum(_slot_pick(values, index), axis=-1)


def _slot_ahead(keys: jax.Array, item_key: jax.Array, index: jax.Array) -> jax.Array:
  """`[..., n]` bool: whether each item `j` of `keys [..., n]` is ranked above the item at `index
  [...]` whose key is `item_key [...]` (ties by position)."""
  position = _list_position(keys.shape[-1], keys.ndim)
  earlier = (position < index[..., None]).astype(keys.dtype)
  return keys < item_key[..., None] + earlier


def _slot_above(key: jax.Array, index: jax.Array, other_key: jax.Array, other_index: jax.Array):
  """`[...]` bool: whether the item `(other_key, other_index)` is above `(key, index)`."""
  return other_key < key + (other_index < index).astype(key.dtype)


def _slot_spread(indices, valids, values, n: int) -> jax.Array:
  """`[..., n]`: each slot's `values[k] [...]` at `indices[k]`, 0 elsewhere: a select per slot
  (the valid indices are distinct), elementwise, no scatter. O(K n)."""
  position = _list_position(n, indices[0].ndim + 1)
  out = jnp.zeros((), values[0].dtype)
  for index, valid, value in zip(indices, valids, values):
    out = jnp.where((position == index[..., None]) & valid[..., None], value[..., None], out)
  return out


def _slot_sums(operands: list) -> list:
  """`[...]` sums over each list of `operands` (one `[..., n]` per slot). GPUs take them in one
  variadic reduction: with one reduction per slot XLA wrote the scores' order keys (an int32
  `[..., n]`) for the slots' passes to read (an H100's blackbox step at B = 16,384 with 3 slots:
  2.9x the floor's temporaries, 1.9x in one pass). TPUs take one reduction per slot: the v5e's
  estimate for the one pass is 2.33x its floor's against 2.11x (3 slots, B = 4,096)."""
  if not operands:
    return []

  def each(*operands):
    return [jnp.sum(x, axis=-1, dtype=x.dtype) for x in operands]

  def one_pass(*operands):
    return list(counting.one_pass_sums(operands))

  return platforms.by_platform(*operands, cpu=each, accelerator=each, gpu=one_pass)


def _slot_keys(scores, keys, indices) -> list:
  """The order keys `[...]` of the items at each of `indices`: picked from the keys (TPUs), or
  the keys of the picked scores (GPUs: XLA then reads the scores for the picks, where a pick of
  the keys made it write them; a zero's sign and NaN's bits, which the pick may change, no key
  sees)."""

  def from_keys(scores, keys, *indices):
    return [_slot_value(keys, index) for index in indices]

  def from_scores(scores, keys, *indices):
    picks = [_slot_pick(scores, index) for index in indices]
    return [order_keys(score) for score in counting.one_pass_sums(picks)]

  return platforms.by_platform(
    scores, keys, *indices, cpu=from_keys, accelerator=from_keys, gpu=from_scores
  )


def _slot_ranks(scores, indices) -> tuple[list, list]:
  """The ranks `[...]` int32 of the items at each of `indices` and their order keys: one plus the
  items above each, O(K n)."""
  keys = order_keys(scores)
  item_keys = _slot_keys(scores, keys, indices) if indices else []
  ahead = [
    _slot_ahead(keys, key, index).astype(jnp.int32) for key, index in zip(item_keys, indices)
  ]
  return [1 + count for count in _slot_sums(ahead)], item_keys


def _slot_crossings(keys, indices, valids, befores, afters) -> list:
  """Per slot, `[..., n]` int32: +1 where item `j` was below the slot's item (key `befores[k]`)
  and is above it after the move (key `afters[k]`), -1 the other way, 0 for an empty slot."""
  return [
    jnp.where(
      valid[..., None],
      _slot_ahead(keys, after, index).astype(jnp.int32)
      - _slot_ahead(keys, before, index).astype(jnp.int32),
      0,
    )
    for index, valid, before, after in zip(indices, valids, befores, afters)
  ]


def _slots(x: jax.Array) -> list:
  """`[..., K]` as `K` arrays `[...]`."""
  return [x[..., k] for k in range(x.shape[-1])]


def _ranks_at(scores: jax.Array, indices: jax.Array) -> jax.Array:
  keys = order_keys(scores)
  item_keys = jnp.take_along_axis(keys, indices, axis=-1)
  return (1 + jnp.sum(_ahead(keys, item_keys, indices), axis=-1)).astype(scores.dtype)


def _ranks_at_on(scores, indices, platform):
  return platforms.by_platform(
    scores,
    indices,
    cpu=_ranks_at,
    accelerator=lambda s, i: jnp.stack(_slot_ranks(s, _slots(i))[0], axis=-1).astype(s.dtype),
    platform=platform,
  )


def _counted_gradient(scores, indices, valid, interpolation, cotangent):
  """Algorithm 1's `-(rk(y) - rk(y + lambda g)) / lambda` `[..., n]` (`lambda` the
  `interpolation`) for `g` zero except at `indices`, where it is `cotangent [..., K]` (invalid
  slots ignored), by counting crossings: O(K n)."""
  interpolation = jnp.asarray(interpolation, scores.dtype)
  keys = order_keys(scores)
  item_scores = jnp.take_along_axis(scores, indices, axis=-1)
  # Algorithm 1 moves only the selected items: y + lambda g, with g zero elsewhere. The same
  # arithmetic as `blackbox_ranks` on those items, so the same perturbed scores.
  moved = item_scores + interpolation[..., None] * jnp.where(
    valid, cotangent, jnp.zeros_like(cotangent)
  )
  before = jnp.take_along_axis(keys, indices, axis=-1)
  after = order_keys(moved)
  valid_int = valid.astype(jnp.int32)
  # [k, j]: +1 where item j was below item k and is above it after the move, -1 the other way.
  crossed = (_ahead(keys, after, indices) - _ahead(keys, before, indices)) * valid_int[..., None]
  position = lax.broadcasted_iota(
    indices.dtype, (1,) * (indices.ndim - 1) + (1, scores.shape[-1]), indices.ndim
  )
  at = (position == indices[..., :, None]).astype(jnp.int32) * valid_int[..., None]  # [k, j]
  selected = jnp.sum(at, axis=-2)  # [..., n]: whether j is one of the (moved) items.
  # An item that did not move changes rank by the moved items that crossed it.
  still = -jnp.sum(crossed, axis=-2)
  # A moved item: by the items that did not move that it crossed, and by the moved ones.
  among = _ahead_among(after, after, indices) - _ahead_among(before, before, indices)
  moved_delta = jnp.sum(crossed * (1 - selected[..., None, :]), axis=-1) + jnp.sum(
    among * valid_int[..., None, :], axis=-1
  )
  delta = jnp.where(selected > 0, jnp.sum(at * moved_delta[..., :, None], axis=-2), still)
  # As `blackbox_ranks`: -(rk(y) - rk(y + lambda g)) / lambda, the difference exact in the float
  # dtype.
  return -((-delta).astype(scores.dtype)) / interpolation[..., None]


def _recounted_crossings(keys, scores, indices, valids, befores, afters):
  """`[..., n]` int32: the sum over slots of `_slot_crossings`, counted again behind a barrier for
  the gradient's one elementwise pass. Without one, XLA writes the crossings (`2 K` boolean
  `[..., n]` arrays) in the pass of the slots' sums, to read them back there. TPUs recount from
  the keys (an int32 `[..., n]` the barrier keeps: recomputing the keys in the pass costs a v5e's
  vector units more than reading them, 2.6x against 2.1x its floor's estimate at B = 4,096); GPUs
  from the scores, the keys recomputed in the pass (an H100 then keeps no int32 copy: at B =
  16,384 the default blackbox step's temporaries 2.2x its floor's instead of 3.2x)."""

  def from_keys(keys, scores, *held):
    return functools.reduce(jnp.add, _slot_crossings(*lax.optimization_barrier((keys, *held))))

  def from_scores(keys, scores, *held):
    scores, *held = lax.optimization_barrier((scores, *held))
    return functools.reduce(jnp.add, _slot_crossings(order_keys(scores), *held))

  args = (keys, scores, indices, valids, befores, afters)
  return platforms.by_platform(*args, cpu=from_keys, accelerator=from_keys, gpu=from_scores)


def _slot_counted_gradient(scores, indices, valids, interpolation, cotangents):
  """`_counted_gradient` with one `[...]` array per slot (`indices`, `valids`, `cotangents`
  lists): O(K n), no sort, gather or scatter; the same integers, so the same gradient."""
  interpolation = jnp.asarray(interpolation, scores.dtype)
  keys = order_keys(scores)
  n = scores.shape[-1]
  position = _list_position(n, scores.ndim)
  befores, afters, ats = [], [], []
  for index, valid, cotangent in zip(indices, valids, cotangents):
    # Algorithm 1 moves only the selected items: y + lambda g, with g zero elsewhere. The same
    # arithmetic as `blackbox_ranks` on those items, so the same perturbed scores.
    item_score = _slot_value(scores, index)
    moved = item_score + interpolation * jnp.where(valid, cotangent, jnp.zeros_like(cotangent))
    befores.append(order_keys(item_score))  # Its key (a zero's sign and NaN's bits not seen).
    afters.append(order_keys(moved))
    ats.append((position == index[..., None]) & valid[..., None])
  selected = functools.reduce(jnp.logical_or, ats)  # [..., n]: whether j is a moved item.
  crossed = _slot_crossings(keys, indices, valids, befores, afters)
  still = -_recounted_crossings(keys, scores, indices, valids, befores, afters)
  # A moved item: by the items that did not move that it crossed, and by the moved ones. The
  # crossings counted over the whole list include the moved items themselves (at their keys
  # before the move); they are taken out from the slots' keys (O(K) per slot) rather than masked
  # in the sums, which would make XLA write the `selected` mask for the `K` reductions to read.
  moved_delta = []
  for k, index in enumerate(indices):
    among, themselves = 0, 0
    for m in range(len(indices)):
      valid = valids[m].astype(jnp.int32)
      was_above = _slot_above(befores[k], index, befores[m], indices[m]).astype(jnp.int32)
      among += valid * (_slot_above(afters[k], index, afters[m], indices[m]) - was_above)
      themselves += (valid * valids[k].astype(jnp.int32)) * (
        _slot_above(afters[k], index, befores[m], indices[m]) - was_above
      )
    moved_delta.append(among - themselves)
  moved_delta = [delta + count for delta, count in zip(moved_delta, _slot_sums(crossed))]
  delta = jnp.where(selected, _slot_spread(indices, valids, moved_delta, n), still)
  # As `blackbox_ranks`: -(rk(y) - rk(y + lambda g)) / lambda, the difference exact in the float
  # dtype.
  return -((-delta).astype(scores.dtype)) / interpolation[..., None]


def _counted_gradient_on(scores, indices, valid, interpolation, cotangent, platform):
  def accelerator(scores, indices, valid, interpolation, cotangent):
    return _slot_counted_gradient(
      scores, _slots(indices), _slots(valid), interpolation, _slots(cotangent)
    )

  return platforms.by_platform(
    scores,
    indices,
    valid,
    interpolation,
    cotangent,
    cpu=_counted_gradient,
    accelerator=accelerator,
    platform=platform,
  )


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _blackbox_ranks_at(
  scores: jax.Array,
  indices: jax.Array,
  valid: jax.Array,
  interpolation: jax.Array,
  platform: str | None,
) -> jax.Array:
  return _ranks_at_on(scores, indices, platform)


def _blackbox_ranks_at_fwd(scores, indices, valid, interpolation, platform):
  return _ranks_at_on(scores, indices, platform), (scores, indices, valid, interpolation)


def _blackbox_ranks_at_bwd(platform, residuals, cotangent):
  scores, indices, valid, interpolation = residuals
  grad = _counted_gradient_on(scores, indices, valid, interpolation, cotangent, platform)
  return grad, None, None, None


_blackbox_ranks_at.defvjp(_blackbox_ranks_at_fwd, _blackbox_ranks_at_bwd)


def blackbox_ranks_at(
  scores: jax.Array, indices: jax.Array, valid: jax.Array, interpolation: jax.Array
) -> jax.Array:
  r"""`blackbox_ranks(scores, interpolation)` at a few items, by counting: no sort, O(K n) per list.

  Equals `jnp.take_along_axis(blackbox_ranks(scores, interpolation), indices, axis=-1)` in value
  (the same ranks, ties by position, NaN last) and in gradient, for any loss that reads the ranks
  only there: Algorithm 1 then moves only these `K` items (`y + lambda g`, `lambda` the
  `interpolation`, `g` zero elsewhere), so an item that does not move changes rank by the moved
  items that cross it, and a moved item by the items it crosses; counting the crossings gives every
  item's `rk(y) - rk(y + lambda g)` exactly. The forward pass counts, for each of the `K` items, the
  `n` items above it.

  Args:
    scores: `[..., n]` floating scores.
    indices: `[..., K]` int32 positions in `[0, n)`, distinct among the valid ones in each list.
    valid: `[..., K]` bool; an invalid slot's rank is meaningless, its cotangent is ignored and it
      moves nothing.
    interpolation: `[...]` interpolation strength per list, in `scores`' dtype (no gradient).

  Returns:
    `[..., K]` ranks in `scores`' dtype. O(K n) time per list forward and backward, comparisons
    `[..., K, n]` that XLA fuses into their reductions, no host callback. On CPU the slots are the
    last axis and the items are read by gathers; on GPU and TPU (`platforms.by_platform`) the
    slots lead (`[K, ..., n]`, the list last, a TPU's lanes) and the items are read by masked sums
    (no gather or scatter). The same integers, so the same ranks and gradients.
  """
  return _blackbox_ranks_at(scores, indices, valid, interpolation, platforms.forced())


# ---------------------------------------------------------------------------------------------
# The ranks of the relevant items of lists: by sorting, or by counting the first K.


def first_relevant(relevant: jax.Array, count: int) -> tuple[jax.Array, jax.Array]:
  """The positions `[..., count]` int32 of the first `count` relevant items of each list, in list
  order, and whether each slot holds one (`[..., count]` bool): one `lax.top_k`, no full sort."""
  n = relevant.shape[-1]
  position = lax.broadcasted_iota(jnp.int32, relevant.shape, relevant.ndim - 1)
  # Relevant items get (n, 2n], the others (0, n], earlier ones more: exact in float32 below 2**23
  # items (XLA's CPU top_k is fast on float32), int32 beyond.
  value = jnp.where(relevant, 2 * n - position, n - position)
  if 2 * n < 2**24:
    value = value.astype(jnp.float32)
  top, indices = lax.top_k(value, count)
  return indices.astype(jnp.int32), top > n


def _first_relevant_slots(relevant: jax.Array, count: int) -> tuple[list, list]:
  """The positions `[...]` int32 of the first `count` relevant items of each list, in list order,
  one array per slot (`n` where a list has fewer), and whether each slot holds one: one minimum
  over each list per slot, O(count n), no `top_k`, sort or gather."""
  n = relevant.shape[-1]
  position = _list_position(n, relevant.ndim)
  indices, last = [], jnp.full(relevant.shape[:-1], -1, jnp.int32)
  for _ in range(count):
    last = jnp.min(jnp.where(relevant & (position > last[..., None]), position, n), axis=-1)
    indices.append(last)
  return indices, [index < n for index in indices]


def ranks_among(scores: jax.Array, indices: jax.Array, valid: jax.Array) -> jax.Array:
  """`[..., K]` rank of each valid item at `indices` among the valid ones (ties by position, as
  `descending_ranks`): O(K^2) per list, no gradient (int32)."""
  keys = order_keys(lax.stop_gradient(scores))
  item_keys = jnp.take_along_axis(keys, indices, axis=-1)
  ahead = _ahead_among(item_keys, item_keys, indices) * valid[..., None, :].astype(jnp.int32)
  return 1 + jnp.sum(ahead, axis=-1)


def _spread(indices: jax.Array, valid: jax.Array, values: jax.Array, n: int) -> jax.Array:
  """`[..., n]`: `values [..., K]` at `indices`, 0 elsewhere (O(K n), no scatter)."""
  position = lax.broadcasted_iota(indices.dtype, (1,) * (indices.ndim - 1) + (1, n), indices.ndim)
  at = (position == indices[..., :, None]) & valid[..., :, None]
  return jnp.sum(jnp.where(at, values[..., :, None], jnp.zeros((), values.dtype)), axis=-2)


def _sorted_relevant_ranks(scores, relevant, branch):
  ranks = ranking.descending_ranks_on(scores, branch)
  # Rank among relevant items: count the relevant items at or above each position of the order.
  order_ranks = ranks.astype(jnp.int32) - 1
  axis = scores.ndim - 1
  in_order = jnp.put_along_axis(
    jnp.zeros(scores.shape, jnp.int32),
    order_ranks,
    relevant.astype(jnp.int32),
    axis=axis,
    inplace=False,
  )
  relevant_ranks = jnp.take_along_axis(jnp.cumsum(in_order, axis=axis), order_ranks, axis=axis)
  return ranks, relevant_ranks.astype(scores.dtype)


def _cpu_counted_relevant_ranks(scores, relevant, count):
  indices, valid = first_relevant(relevant, count)
  ranks = _ranks_at(scores, indices)
  among = ranks_among(scores, indices, valid).astype(scores.dtype)
  n = scores.shape[-1]
  return _spread(indices, valid, ranks, n), _spread(indices, valid, among, n)


def _slot_relevant_ranks(scores, relevant, count):
  """The accelerators' counting of the first `count` relevant items of each list, kept per slot:
  their positions and whether each slot holds one (lists of `[...]` arrays), and their ranks and
  ranks among the valid slots' items, `[..., count]` in `scores`' dtype. O(count n), no gather."""
  indices, valids = _first_relevant_slots(relevant, count)
  ranks, item_keys = _slot_ranks(scores, indices)
  among = [  # The rank among the valid slots' items, O(K^2) per list.
    1
    + sum(
      (_slot_above(key, index, other_key, other_index) & other_valid).astype(jnp.int32)
      for other_key, other_index, other_valid in zip(item_keys, indices, valids)
    )
    for key, index in zip(item_keys, indices)
  ]
  stacked = lambda values: jnp.stack(values, axis=-1).astype(scores.dtype)  # noqa: E731
  return indices, valids, stacked(ranks), stacked(among)


def _accelerator_counted_relevant_ranks(scores, relevant, count):
  indices, valids, ranks, among = _slot_relevant_ranks(scores, relevant, count)
  n = scores.shape[-1]
  return (
    _slot_spread(indices, valids, _slots(ranks), n),
    _slot_spread(indices, valids, _slots(among), n),
  )


def _relevant_ranks_on(scores, relevant, count, branch):
  """(ranks, relevant ranks): by sorting (`count` None) or by counting the first `count` relevant
  items of each list (a list with more is ranked wrongly: the caller makes it NaN)."""
  if count is None:
    return _sorted_relevant_ranks(scores, relevant, branch)
  return platforms.by_platform(
    scores,
    relevant,
    cpu=functools.partial(_cpu_counted_relevant_ranks, count=count),
    accelerator=functools.partial(_accelerator_counted_relevant_ranks, count=count),
    platform=ranking.BRANCH_PLATFORMS.get(branch),
  )


def _cpu_counted_relevant_gradient(scores, relevant, interpolation, g, count):
  indices, valid = first_relevant(relevant, count)
  slots = jnp.take_along_axis(g, indices, axis=-1)
  return _counted_gradient(scores, indices, valid, interpolation, slots)


def _accelerator_counted_relevant_gradient(scores, relevant, interpolation, g, count):
  indices, valids = _first_relevant_slots(relevant, count)
  cotangents = [_slot_value(g, index) for index in indices]
  return _slot_counted_gradient(scores, indices, valids, interpolation, cotangents)


def _relevant_gradient_on(scores, relevant, interpolation, g, ranks, count, branch):
  """Algorithm 1's gradient for the cotangent `g` of the ranks: by one more sort (`count` None,
  `ranks` the forward's) or by counting the crossings of the first `count` relevant items."""
  if count is None:
    perturbed = ranking.descending_ranks_on(scores + interpolation[..., None] * g, branch)
    return -(ranks - perturbed) / interpolation[..., None]
  return platforms.by_platform(
    scores,
    relevant,
    interpolation,
    g,
    cpu=functools.partial(_cpu_counted_relevant_gradient, count=count),
    accelerator=functools.partial(_accelerator_counted_relevant_gradient, count=count),
    platform=ranking.BRANCH_PLATFORMS.get(branch),
  )


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _blackbox_relevant_ranks(scores, relevant, interpolation, count, branch):
  return _relevant_ranks_on(scores, relevant, count, branch)


def _blackbox_relevant_ranks_fwd(scores, relevant, interpolation, count, branch):
  ranks, relevant_ranks = _relevant_ranks_on(scores, relevant, count, branch)
  # The counting backward counts again; only the sort's reads the forward ranks.
  return (ranks, relevant_ranks), (scores, relevant, interpolation, None if count else ranks)


def _blackbox_relevant_ranks_bwd(count, branch, residuals, cotangents):
  scores, relevant, interpolation, ranks = residuals
  g = jnp.where(relevant, cotangents[0], jnp.zeros_like(cotangents[0]))
  interpolation = jnp.asarray(interpolation, scores.dtype)
  grad = _relevant_gradient_on(scores, relevant, interpolation, g, ranks, count, branch)
  return grad, None, None


_blackbox_relevant_ranks.defvjp(_blackbox_relevant_ranks_fwd, _blackbox_relevant_ranks_bwd)


# The counting bounds tried on accelerators without `max_relevant`. Counting pays up to the
# losses' `blackbox.COUNT_UP_TO` (16), the bound they count up to with concrete labels, but its
# 16-slot form keeps many `[B, n]` arrays alive at once (at B = 4096 on an H100, 10.8 [B, B]
# arrays of temporaries for the step against 3.3 with 8 slots and 7.3 for the sort): above 8 the
# sort, in blocks of lists (`_SORT_BLOCK`).
_CAPACITIES = (1, 2, 4, 8)
# The accelerators' sort without a bound ranks this many items at a time (blocks of whole lists,
# `lax.map`): XLA's sort of a `[B, n]` array and the permutations around it need several arrays
# of that size.
_SORT_BLOCK = 2**21


def _in_blocks_of_lists(fn, *arrays):
  """`fn(*arrays)` of lists `[..., n]` (elementwise over lists), in blocks of `_SORT_BLOCK`
  items when the lists hold more: the same values, a block's temporaries only."""
  shape = arrays[0].shape
  n = shape[-1]
  rows = max(1, _SORT_BLOCK // max(n, 1))
  flat = [a.reshape(-1, *a.shape[len(shape) - 1 :]) for a in arrays]
  if flat[0].shape[0] <= rows:
    return fn(*arrays)
  out = lax.map(lambda row: fn(*row), tuple(flat), batch_size=rows)
  return jax.tree.map(lambda x: x.reshape(*shape[:-1], *x.shape[1:]), out)


# The accelerators' blackbox losses differentiate their per-list values, not the ranks: a custom
# VJP around `body(ranks, relevant_ranks, relevant, num_relevant) -> [...]`. The counting keeps
# its `K` slots per list (positions, validity, ranks, ranks among them: `[..., K]` each) between
# the passes, and its `body` reads those slots, so no `[..., n]` ranks are written at all; the
# sort keeps nothing but the inputs and ranks again in the backward pass. The run-time choice of a
# form (`lax.switch`) returns `[...]` values and slots padded to the widest bound: its residuals
# are those, the inputs and the index.


def _values_on(body, count, width, scores, relevant):
  """`body`'s values `[...]` from the ranks of the first `count` relevant items of each list,
  counted per slot (`body` reads `[..., count]` arrays, the slots' validity for `relevant`), or from
  the sort's (`count` None; `[..., n]` arrays, in blocks of lists); and the slots, `(positions,
  validity, ranks, ranks among them)` `[..., width]` each, padded (all padding for the sort)."""
  shape, num_relevant = scores.shape[:-1], jnp.sum(relevant, axis=-1)
  if count is None:

    def sort(scores, relevant):
      ranks, relevant_ranks = _sorted_relevant_ranks(scores, relevant, "xla")
      return body(ranks, relevant_ranks, relevant, jnp.sum(relevant, axis=-1))

    values = _in_blocks_of_lists(sort, scores, relevant)
    slots = (jnp.zeros((*shape, 0), jnp.int32), jnp.zeros((*shape, 0), bool))
    slots += (jnp.zeros((*shape, 0), scores.dtype),) * 2
    # Inside `shard_map` the counting branches' slots vary over the mesh axes as the scores do.
    slots = tuple(lists.varying_like(slot, scores) for slot in slots)
  else:
    indices, valids, ranks, among = _slot_relevant_ranks(scores, relevant, count)
    valid = jnp.stack(valids, axis=-1)
    values = body(ranks, among, valid, num_relevant)
    slots = (jnp.stack(indices, axis=-1), valid, ranks, among)
  pad = [(0, 0)] * len(shape) + [(0, width - slots[0].shape[-1])]
  return values, tuple(jnp.pad(slot, pad) for slot in slots)


def _gradient_on(body, count, scores, relevant, interpolation, cotangent, slots):
  """The scores' gradient `[..., n]` for the cotangent `[...]` of `_values_on(body, count, ...)`,
  given its slots: `body`'s VJP for the ranks' cotangent, then Algorithm 1's gradient (the sort
  ranks again, in blocks of lists)."""
  if count is None:

    def sort(scores, relevant, interpolation, cotangent):
      ranks, relevant_ranks = _sorted_relevant_ranks(scores, relevant, "xla")
      num_relevant = jnp.sum(relevant, axis=-1)
      _, vjp = jax.vjp(lambda r: body(r, relevant_ranks, relevant, num_relevant), ranks)
      g = jnp.where(relevant, vjp(cotangent)[0], jnp.zeros_like(ranks))
      return _relevant_gradient_on(scores, relevant, interpolation, g, ranks, None, "xla")

    return _in_blocks_of_lists(sort, scores, relevant, interpolation, cotangent)
  indices, valid, ranks, among = (slot[..., :count] for slot in slots)
  num_relevant = jnp.sum(relevant, axis=-1)
  _, vjp = jax.vjp(lambda r: body(r, among, valid, num_relevant), ranks)
  g = _slots(vjp(cotangent)[0])
  return _slot_counted_gradient(scores, _slots(indices), _slots(valid), interpolation, g)


def _switch_index(counts, relevant):
  """The branch of `counts` (`_list_values`) to run: the only one, or chosen on the device."""
  if len(counts) == 1:
    return None
  assert counts[-1] is None  # The bounds, increasing, then the sort.
  return bounds.branch_index(relevant, counts[:-1])


def _run(index, branches, *args):
  return branches[0](*args) if index is None else lax.switch(index, branches, *args)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _list_values(body, counts, scores, relevant, interpolation):
  """The accelerators' per-list blackbox values `[...]`: `_values_on(body, count, ...)` for the one
  count of `counts`, or for the one `_switch_index` picks (bounds, then `None` for the sort)."""
  return _list_values_fwd(body, counts, scores, relevant, interpolation)[0]


def _branches(form, body, counts, *extra):
  """`functools.partial(form, body, count, *extra)` for each of `counts`, the same objects for
  the same arguments and forced platform (`platforms.forced`, read by the forms when traced): JAX
  traces a branch of `lax.switch` again for a new function object, and differentiating the
  platforms' choice (`platforms.by_platform`, a conditional) transposes it twice, each time
  calling `_list_values`' forward and backward. On CPU hosts every program traces the
  accelerators' form too: a default blackbox step's trace took 0.6 s each time; now 0.5 s the
  first time and 0.03 s for another step of the same body and shapes."""
  try:
    return _cached_branches(form, body, counts, extra, platforms.forced())
  except TypeError:  # An unhashable `body` (a callable object with `__eq__`): not cached.
    return _cached_branches.__wrapped__(form, body, counts, extra, None)


@functools.lru_cache(maxsize=64)  # Holds the last 64 bodies (`_traceable_alone`: no tracers).
def _cached_branches(form, body, counts, extra, platform):
  del platform  # A key only.
  return tuple(functools.partial(form, body, count, *extra) for count in counts)


def _list_values_fwd(body, counts, scores, relevant, interpolation):
  index = _switch_index(counts, relevant)
  width = max((count for count in counts if count is not None), default=0)
  values, slots = _run(index, _branches(_values_on, body, counts, width), scores, relevant)
  return values, (scores, relevant, interpolation, index, slots)


def _list_values_bwd(body, counts, residuals, cotangent):
  scores, relevant, interpolation, index, slots = residuals
  interpolation = jnp.asarray(interpolation, scores.dtype)
  branches = _branches(_gradient_on, body, counts)
  grad = _run(index, branches, scores, relevant, interpolation, cotangent, slots)
  return grad, None, None


_list_values.defvjp(_list_values_fwd, _list_values_bwd)


def _traceable_alone(body, scores) -> bool:
  """Whether `body` can run inside a custom VJP: it traces on abstract arguments and reads no
  traced value besides them. A `weight_fn` of a traced parameter cannot (the custom VJP's backward
  would not give the parameter its gradient), nor one in numpy (it runs eagerly only); the caller
  keeps such a `body` outside, where it behaves as it always did."""
  ranks = jax.ShapeDtypeStruct(scores.shape, scores.dtype)
  relevant = jax.ShapeDtypeStruct(scores.shape, jnp.bool_)
  count = jax.ShapeDtypeStruct(scores.shape[:-1], jnp.int32)
  try:
    return not jax.closure_convert(body, ranks, ranks, relevant, count)[1]
  except jax.errors.JAXTypeError:  # Concrete values asked for: numpy, or Python control flow.
    return False


def blackbox_relevant_ranks(
  scores: jax.Array,
  relevant: jax.Array,
  interpolation: jax.Array,
  *,
  max_relevant: int | None = None,
) -> tuple[jax.Array, jax.Array]:
  r"""The blackbox ranks of the relevant items of lists, and their ranks among relevant items.

  At relevant positions, `ranks` is `blackbox_ranks(scores, interpolation)` in value and gradient
  (the cotangent is read there only: Algorithm 1 moves only the relevant items), and
  `relevant_ranks` the rank among the relevant items in the same order (no gradient). Entries at the
  other positions are unspecified: read only the relevant ones. Two ways, the same ranks and
  gradients:

  * **sort** (`max_relevant=None`): one sort of each list forward and one backward
    (`descending_ranks`: numpy through a host callback on CPU, XLA's sort elsewhere), O(n log n).
    (The losses' choice on accelerators of counting when the lists allow it, made on the device,
    is `blackbox_list_values`', which differentiates their per-list values instead of the
    ranks.)
  * **counting** (`max_relevant=K`): the rank of each of the first `K` relevant items of a list
    is the count of items above it, and Algorithm 1's backward moves only those items, so an
    item's rank changes by the relevant items that cross it and a relevant item's by the items it
    crosses (`blackbox_ranks_at`). O(K n) per list whatever the number of relevant items, no sort
    and no host callback on any platform (on GPU and TPU no gather, scatter or `top_k` either:
    `blackbox_ranks_at`). The program holds the counting alone: a list with more than `K`
    relevant items gets the ranks of its first `K` only and the rest wrong; the caller checks
    (the losses make such a list NaN).

  Args:
    scores: `[..., n]` floating scores.
    relevant: `[..., n]` bool, the items whose ranks are read.
    interpolation: `[...]` interpolation strength per list, in `scores`' dtype (no gradient).
    max_relevant: `K`, a static bound on the relevant items per list that selects counting, or
      `None` for the sort.

  Returns:
    `(ranks, relevant_ranks)`, each `[..., n]` in `scores`' dtype, meaningful where `relevant`.
  """
  branch = ranking.forced_branch()
  return _blackbox_relevant_ranks(scores, relevant, interpolation, max_relevant, branch)


def blackbox_list_values(
  scores: jax.Array,
  relevant: jax.Array,
  interpolation: jax.Array,
  body: Callable[..., jax.Array],
  *,
  max_relevant: int | None = None,
) -> jax.Array:
  r"""`body(ranks, relevant_ranks, relevant, num_relevant)` of the blackbox ranks of each list's
  relevant items (`blackbox_relevant_ranks`): the blackbox losses' per-list values `[...]`.

  `body` must be elementwise over the lists and read the ranks only where `relevant` (it sums over
  the last axis, any length): on accelerators it is also called with the counted slots, `[...,
  K]` arrays with the slots' validity for `relevant`. The values and gradients are those of
  `body(*blackbox_relevant_ranks(...), relevant, num_relevant)`, `num_relevant` the relevant count
  `[...]` of each list (the gradient bit for bit, the values up to the rounding of `body`'s sums):

  * on CPU it is that (numpy's sort through a host callback, or the CPU's counting with
    `max_relevant`);
  * on GPU and TPU a custom VJP around the values (`_list_values`), so that no `[..., n]` ranks
    are kept between the passes: the counting keeps its slots (`[..., K]` positions, validity,
    ranks, ranks among them) and writes no `[..., n]` ranks at all; the sort keeps only the inputs
    and ranks again in the backward pass (three sorts, not two: the price of not holding its
    ranks in every branch's program). With `max_relevant=K`, counting `K` slots; without,
    counting with the smallest of 1, 2, 4, 8 slots that holds every list's relevant items, else
    the sort in blocks of lists (`_SORT_BLOCK` items), chosen on the device when the step runs
    (`bounds.branch_index`: one branch runs, a compiler's estimate counts all; under `vmap` over
    batches all run). A `body` that reads traced values other than its arguments (a `weight_fn`
    of a traced parameter), or that cannot be traced (numpy), stays outside the custom VJP, so
    that those values get their gradient: `blackbox_relevant_ranks` then (the sort, or `K`
    slots).

  Args:
    scores: `[..., n]` floating scores.
    relevant: `[..., n]` bool, the items whose ranks are read.
    interpolation: `[...]` interpolation strength per list, in `scores`' dtype (no gradient).
    body: `(ranks, relevant_ranks, relevant, num_relevant) -> [...]`, above.
    max_relevant: `K`, a static bound on the relevant items per list (counting; a list with more
      is ranked on its first `K`: the caller checks), or `None`.

  Returns:
    `[...]` values.
  """
  n = scores.shape[-1]

  def ranks_then_body(branch):
    def values(scores, relevant, interpolation):
      ranks, relevant_ranks = _blackbox_relevant_ranks(
        scores, relevant, interpolation, max_relevant, branch
      )
      return body(ranks, relevant_ranks, relevant, jnp.sum(relevant, axis=-1))

    return values

  def accelerator(scores, relevant, interpolation):
    if not _traceable_alone(body, scores):
      return ranks_then_body("xla")(scores, relevant, interpolation)
    if max_relevant is not None:
      counts = (max_relevant,)
    else:
      counts = (*bounds.capacities_for(n, _CAPACITIES), None)
    return _list_values(body, counts, scores, relevant, interpolation)

  return platforms.by_platform(
    scores,
    relevant,
    interpolation,
    cpu=ranks_then_body("numpy"),
    accelerator=accelerator,
  )


# ---------------------------------------------------------------------------------------------
# Finding the blackbox ranks in a program.


def uses_blackbox_rank(jaxpr: jax.extend.core.ClosedJaxpr | jax.extend.core.Jaxpr) -> bool:
  """Whether a jaxpr calls a blackbox rank (`blackbox_ranks`, `blackbox_ranks_at`,
  `blackbox_relevant_ranks`), in its own equations or in any jaxpr inside them (jitted
  functions, loops, conditionals, custom derivative rules).

  Their backward is not linear in its cotangent (Algorithm 1 moves the scores by `interpolation`
  times it), so a caller that would take a gradient with another cotangent than the true one and
  scale it afterwards (`blocked_loss`) must not. Read from the jaxpr (`jax.make_jaxpr`), which holds
  a jitted function's equations also when its trace came from JAX's cache and no Python of it
  ran: each blackbox rank is a `custom_vjp` call whose backward rule is one of this module's.
  """
  inner = getattr(jaxpr, "jaxpr", jaxpr)
  for eqn in inner.eqns:
    backward = eqn.params.get("bwd")
    if getattr(backward, "f", backward) in _BLACKBOX_BACKWARDS:
      return True
    for param in eqn.params.values():
      for value in param if isinstance(param, (tuple, list)) else (param,):
        is_jaxpr = hasattr(value, "eqns") or hasattr(getattr(value, "jaxpr", None), "eqns")
        if is_jaxpr and uses_blackbox_rank(value):
          return True
  return False


# The backward rules of the blackbox ranks, as `uses_blackbox_rank` finds them in a jaxpr.
_BLACKBOX_BACKWARDS = (
  _blackbox_ranks_bwd,
  _blackbox_ranks_at_bwd,
  _blackbox_relevant_ranks_bwd,
  _list_values_bwd,
)
