"""The CPU's host kernels: numpy sorts of many lists, called from XLA through host callbacks.

On a CPU numpy's sort is faster than XLA's, so the CPU's forms of the sorting computations run it
on the host: `ranking.tie_groups` (`numpy_group_order`), `ranking.descending_ranks`
(`numpy_descending_ranks`) and `counting.count_above_and_tied` beyond `counting.COMPARE_UP_TO`
thresholds (`numpy_sorted_counts`). This module holds their numpy side, `host_callback` (the
`jax.pure_callback` that passes 64-bit values bit for bit) and `map_row_blocks` (many lists split
over the cores, numpy's sort releasing the GIL). The JAX side of each CPU form sits in its own
module beside the accelerators' form (XLA's sort), and `platforms.by_platform` chooses between
them when the program is lowered: an accelerator's program never holds these callbacks.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# The dtypes that `host_callback` passes as pairs of 32-bit words.
_WIDE_DTYPES = (np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.uint64))


def host_callback(
  fn: Callable[..., Any],
  result_shape_dtypes: tuple[jax.ShapeDtypeStruct, ...],
  *args: jax.Array,
  vmap_method: str,
) -> tuple[jax.Array, ...]:
  """`jax.pure_callback(fn, result_shape_dtypes, *args)`, with 64-bit values passed bit for bit.

  JAX converts a callback's arguments and results to the dtypes that x64 allows on the thread
  that runs the callback, and XLA may run it on one of its own threads, where a thread-local
  `jax.enable_x64(True)` of the caller does not hold: float64 scores would reach `fn` rounded to
  float32, and its float64 results be refused ("Incorrect output dtype"). So each 64-bit array
  (`float64`, `int64`, `uint64`) crosses as `[..., 2]` uint32 words (`lax.bitcast_convert_type`)
  and is viewed back on the other side; other dtypes cross as they are. `fn` sees numpy arrays of
  the arguments' dtypes and returns arrays of the results' dtypes, as for `jax.pure_callback`.

  Args:
    fn: `fn(*numpy_arrays) -> tuple of numpy arrays` (a tuple even of one).
    result_shape_dtypes: the results' shapes and dtypes.
    *args: the arguments, each `[..., n_i]`.
    vmap_method: as for `jax.pure_callback` (the words' axis is the last, after every batch axis).

  Returns:
    The results, of `result_shape_dtypes`.
  """
  wide_args = [jnp.dtype(x.dtype) in _WIDE_DTYPES for x in args]
  wide_results = [jnp.dtype(r.dtype) in _WIDE_DTYPES for r in result_shape_dtypes]
  arg_dtypes = [np.dtype(x.dtype) for x in args]

  def host(*words):
    values = [
      np.ascontiguousarray(w).view(dtype)[..., 0] if wide else np.asarray(w)
      for w, dtype, wide in zip(words, arg_dtypes, wide_args)
    ]
    results = fn(*values)
    return tuple(
      np.ascontiguousarray(r, spec.dtype).view(np.uint32).reshape(np.shape(r) + (2,)) if wide else r
      for r, spec, wide in zip(results, result_shape_dtypes, wide_results)
    )

  words = [
    lax.bitcast_convert_type(x, jnp.uint32) if wide else x for x, wide in zip(args, wide_args)
  ]
  word_shapes = tuple(
    jax.ShapeDtypeStruct(r.shape + (2,), jnp.uint32) if wide else r
    for r, wide in zip(result_shape_dtypes, wide_results)
  )
  out = jax.pure_callback(host, word_shapes, *words, vmap_method=vmap_method)
  return tuple(
    lax.bitcast_convert_type(o, r.dtype) if wide else o
    for o, r, wide in zip(out, result_shape_dtypes, wide_results)
  )


def map_row_blocks(fn: Callable[[int, int], None], num_rows: int, size: int) -> None:
  """Calls `fn(lo, hi)` on blocks of rows `[lo, hi)` covering `range(num_rows)`, one per core.

  For numpy callbacks on independent lists (numpy's sort releases the GIL): the callback otherwise
  runs on one core while XLA's other threads wait for it. `size` is the number of values in all;
  below `_PARALLEL_ITEMS` one call on this thread is faster than a hand-off to the pool.
  """
  workers = min(_num_cores(), num_rows)
  if workers < 2 or size < _PARALLEL_ITEMS:
    fn(0, num_rows)
    return
  bounds = np.linspace(0, num_rows, workers + 1).astype(int)
  list(_sort_pool(workers).map(fn, bounds[:-1], bounds[1:]))


# Below this many scores one thread sorts faster than a hand-off to the pool.
_PARALLEL_ITEMS = 1 << 16


@functools.lru_cache(maxsize=1)
def _num_cores() -> int:
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # Not on Linux.
    return os.cpu_count() or 1


@functools.lru_cache(maxsize=4)
def _sort_pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
  """The threads of `numpy_descending_ranks`, made on first use (none exist at import)."""
  return concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="jaxrank-sort")


def _float32_keys(values: np.ndarray) -> np.ndarray:
  """float32 `values` as uint64 keys below 2^32 in the same order (NaN, made positive, after
  +inf): the sign bit flipped for positive values, every bit for negative ones."""
  bits = values.view(np.uint32)
  flip = (bits >> np.uint32(31)) * np.uint32(0x7FFFFFFF) | np.uint32(0x80000000)
  return (bits ^ flip).astype(np.uint64)


def numpy_group_order(invalid: np.ndarray, neg: np.ndarray, labels: np.ndarray) -> np.ndarray:
  """The stable order `[..., n]` (int32) of `tie_groups`' sort by `(invalid, neg, labels)`.

  As XLA sorts floats: NaN after +inf, every NaN one key (in the order of the list); `neg` holds
  no `-0.0`. float32 keys become order-preserving integers, packed with the invalid flag above
  and the position below into one uint64 whose plain (unstable) sort gives the stable order of
  the first two keys; the lists where a tie group's labels are then out of order (rare with
  continuous scores, common with Hamming distances) are sorted again by all three keys. Other
  dtypes take numpy's `lexsort`. Many lists are split over the cores (`map_row_blocks`).
  """
  invalid, neg, labels = np.broadcast_arrays(*(np.asarray(x) for x in (invalid, neg, labels)))
  n = neg.shape[-1]
  rows = [x.reshape(-1, n) for x in (invalid, neg, labels)]
  order = np.empty(rows[0].shape, np.int32)

  def sort_block(lo: int, hi: int) -> None:
    order[lo:hi] = _group_order(*(x[lo:hi] for x in rows))

  map_row_blocks(sort_block, order.shape[0], order.size)
  return order.reshape(neg.shape)


def _group_order(invalid: np.ndarray, neg: np.ndarray, labels: np.ndarray) -> np.ndarray:
  """`numpy_group_order` of lists `[c, n]` on one thread."""
  n = neg.shape[-1]
  neg = np.where(np.isnan(neg), np.array(np.nan, neg.dtype), neg)  # One NaN key.
  if neg.dtype != np.float32 or n >= 2**31:
    return np.lexsort((labels, neg, invalid), axis=-1).astype(np.int32)
  packed = (invalid.astype(np.uint64) << np.uint64(63)) | (_float32_keys(neg) << np.uint64(31))
  packed = np.sort(packed | np.arange(n, dtype=np.uint64), axis=-1)
  order = (packed & np.uint64(0x7FFFFFFF)).astype(np.int32)
  group = packed >> np.uint64(31)
  labels_s = np.take_along_axis(labels, order, axis=-1)
  before, after = labels_s[:, :-1], labels_s[:, 1:]
  # Out of order: a lower label after a higher one, or a number after a NaN (NaN sorts last).
  unordered = (after < before) | ((before != before) & (after == after))
  resort = np.any((group[:, 1:] == group[:, :-1]) & unordered, axis=-1)
  if resort.any():
    order[resort] = np.lexsort((labels[resort], neg[resort], invalid[resort]), axis=-1)
  return order


def numpy_descending_ranks(scores: np.ndarray) -> np.ndarray:
  """`descending_ranks` in numpy, for the CPU path (faster than XLA's CPU sort).

  float32 keys become order-preserving 32-bit integers, packed above the 32-bit position into one
  uint64 whose plain (unstable) sort gives the stable order. Other dtypes use a stable argsort.
  Every NaN becomes the one positive quiet NaN first, whose key follows +inf's, so NaN scores rank
  last whatever their sign bit and payload, in the order of the list (as XLA's sort does).

  Many lists (`[..., n]` with at least `_PARALLEL_ITEMS` scores in all) are split into blocks of
  lists sorted on the cores this process may use (numpy's sort releases the GIL): the callback
  otherwise runs on one core while XLA's other threads wait for it. The lists are independent, so
  the ranks are the same whatever the split.
  """
  scores = np.asarray(scores)
  if scores.ndim < 2:
    return _numpy_descending_ranks(scores)
  rows = scores.reshape(-1, scores.shape[-1])
  ranks = np.empty_like(rows)

  def sort_block(lo: int, hi: int) -> None:
    ranks[lo:hi] = _numpy_descending_ranks(rows[lo:hi])

  map_row_blocks(sort_block, rows.shape[0], rows.size)
  return ranks.reshape(scores.shape)


def _numpy_descending_ranks(scores: np.ndarray) -> np.ndarray:
  """`numpy_descending_ranks` on one thread."""
  n = scores.shape[-1]
  positions = np.arange(1, n + 1, dtype=scores.dtype)
  negated = np.where(scores == 0, 0, -scores).astype(scores.dtype)  # -0.0 and 0.0: one key.
  negated = np.where(np.isnan(negated), np.array(np.nan, scores.dtype), negated)
  if scores.dtype == np.float32 and n < 2**32:
    packed = (_float32_keys(negated) << np.uint64(32)) | np.arange(n, dtype=np.uint64)
    order = (np.sort(packed, axis=-1) & np.uint64(0xFFFFFFFF)).astype(np.intp)
  else:
    order = np.argsort(negated, axis=-1, kind="stable")
  ranks = np.empty_like(scores)
  np.put_along_axis(ranks, order, np.broadcast_to(positions, scores.shape), axis=-1)
  return ranks


def numpy_sorted_counts(scores: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, ...]:
  """`xla_sorted_counts` in numpy (faster than XLA's on CPU), the lists split over the cores.

  The thresholds are searched in increasing order of their negation, which lets numpy's binary
  search start from the previous answer (faster than searching them unsorted).
  """
  scores, thresholds = np.asarray(scores), np.asarray(thresholds)
  lead = np.broadcast_shapes(scores.shape[:-1], thresholds.shape[:-1])
  scores = np.broadcast_to(scores, lead + scores.shape[-1:]).reshape(-1, scores.shape[-1])
  keys = np.broadcast_to(thresholds, lead + thresholds.shape[-1:])
  keys = -keys.reshape(-1, thresholds.shape[-1])
  above = np.empty(keys.shape, np.int32)
  tied = np.empty(keys.shape, np.int32)

  def count_block(lo: int, hi: int) -> None:
    keys[lo:hi] = np.sort(keys[lo:hi], axis=-1)  # NaN last, as in XLA.
    negated = np.sort(-scores[lo:hi], axis=-1)
    for i in range(hi - lo):
      above[lo + i] = np.searchsorted(negated[i], keys[lo + i], side="left")
      tied[lo + i] = np.searchsorted(negated[i], keys[lo + i], side="right") - above[lo + i]

  map_row_blocks(count_block, scores.shape[0], scores.size)
  shape = lead + thresholds.shape[-1:]
  return -keys.reshape(shape), above.reshape(shape), tied.reshape(shape)
