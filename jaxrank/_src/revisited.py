"""Landmark retrieval as the Revisited Oxford/Paris protocol scores it: `evaluate_revisited`.

The protocol (Radenovic et al. 2018, "Revisiting Oxford and Paris"; Revaud et al. 2019, sec. 4)
gives each query lists of gallery indices: `easy`, `hard` and `junk` (Revisited Oxford/Paris), or
`ok` and `junk` (the original Oxford/Paris). Each setting has positives and ignored items:

==========  ==================  ==================
setting     positives           ignored
==========  ==================  ==================
Easy        easy                junk, hard
Medium      easy, hard          junk
Hard        hard                junk, easy
(original)  ok                  junk
==========  ==================  ==================

Ignored items are removed from the ranking before positions are counted; every other gallery item
is a negative. Positions are counted, not sorted: for each positive, the gallery items scored
above and tied with it (`counting.count_above_and_tied`), chunk of queries by chunk of gallery in
one pass, less the ignored items and positives among them (a few hundred per query at most, on
the host).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import counting
from jaxrank._src import lists
from jaxrank._src import ranking
from jaxrank._src import similarity

EASY, HARD, JUNK = 0, 1, 2
"""The kinds of a query's listed items (`ok` is `EASY`: the positives of the original format)."""

SETTINGS = {
  "revisited": {
    "easy": ({EASY}, {HARD, JUNK}),
    "medium": ({EASY, HARD}, {JUNK}),
    "hard": ({HARD}, {EASY, JUNK}),
  },
  "original": {"": ({EASY}, {JUNK})},
}
"""Per format, each setting's (positive kinds, ignored kinds); the original format's one setting
has no prefix in the result's keys."""

_KEYS = {"revisited": ("easy", "hard", "junk"), "original": ("ok", "junk")}

DEFAULT_CHUNK_SIZE = 256
"""Queries per step when `chunk_size` is `None`."""

DEFAULT_GALLERY_CHUNK_SIZE = 65536
"""Gallery items per step when `gallery_chunk_size` is `None` (256 x 65,536 float32 scores:
64 MB a step)."""


def _format_of(fn, i, entry):
  """`"revisited"` or `"original"`: the format of query `i`'s ground truth, checked."""
  if not isinstance(entry, Mapping):
    raise ValueError(
      f"{fn}: ground_truth[{i}] must be a mapping such as {{'easy': [...], 'hard': [...], "
      f"'junk': [...]}} or {{'ok': [...], 'junk': [...]}}, got {type(entry).__name__}."
    )
  kind = "revisited" if ("easy" in entry or "hard" in entry) else "original"
  if kind == "revisited" and "ok" in entry:
    raise ValueError(f"{fn}: ground_truth[{i}] mixes 'ok' with 'easy'/'hard'; give one format.")
  missing = [key for key in _KEYS[kind] if key not in entry]
  if missing:
    raise ValueError(
      f"{fn}: ground_truth[{i}] lacks {missing}; each query needs the keys "
      f"{list(_KEYS[kind])} (an empty list where it has none)."
    )
  return kind


def integer_indices(value) -> np.ndarray | None:
  """`value` as an int64 array if it holds integers: an integer dtype, or floats that are all
  whole numbers (revisitop builds its lists with `np.concatenate`, and `np.concatenate([[],
  [3, 4]])` is float64); `None` for anything else (fractions, NaN, infinities, booleans,
  strings). Shared by `evaluate_revisited` and `jaxrank.data.load_revisited`."""
  index = np.asarray(value)
  if np.issubdtype(index.dtype, np.integer):
    return index.astype(np.int64)
  if not np.issubdtype(index.dtype, np.floating):
    return None
  with np.errstate(invalid="ignore"):
    whole = np.isfinite(index) & (index == np.round(index)) & (np.abs(index) < 2.0**62)
  return index.astype(np.int64) if np.all(whole) else None


def _indices(fn, i, key, value, num_items):
  """Query `i`'s `key` list as int64 indices, checked: 1-D integers (or whole floats) in
  `[0, N)`, no repeats."""
  given = np.asarray(value)
  if given.size == 0:
    return np.zeros(0, np.int64)
  index = integer_indices(given)
  if given.ndim != 1 or index is None:
    raise ValueError(
      f"{fn}: ground_truth[{i}]['{key}'] must be a flat list of integer gallery indices "
      f"(integers, or floats with whole values), got shape {given.shape} and dtype "
      f"{given.dtype}{_first_fraction(given)}."
    )
  bad = index[(index < 0) | (index >= num_items)]
  if bad.size:
    raise ValueError(
      f"{fn}: ground_truth[{i}]['{key}'] holds index {int(bad[0])}, outside the gallery of "
      f"{num_items} items; give indices in [0, {num_items})."
    )
  if np.unique(index).size != index.size:
    raise ValueError(f"{fn}: ground_truth[{i}]['{key}'] lists an index twice; list each once.")
  return index


def _first_fraction(given):
  """`" (e.g. 0.5)"`: the first value of a float list that is no whole number, for messages."""
  if given.ndim != 1 or not np.issubdtype(given.dtype, np.floating):
    return ""
  with np.errstate(invalid="ignore"):
    bad = given[~(np.isfinite(given) & (given == np.round(given)))]
  return f" (e.g. {float(bad[0])})" if bad.size else ""


def _parse_ground_truth(fn, ground_truth, num_queries, num_items):
  """`(format, index [Q, K], kind [Q, K], num_positive_slots)`: each query's listed items, the
  positives (easy, hard; or ok) in the first `num_positive_slots` slots, then junk; -1 pads."""
  if isinstance(ground_truth, (str, bytes, Mapping)) or not isinstance(ground_truth, Sequence):
    raise ValueError(
      f"{fn}: ground_truth must be a sequence (a list) of one mapping per query, got "
      f"{type(ground_truth).__name__}."
    )
  if len(ground_truth) != num_queries:
    raise ValueError(
      f"{fn}: ground_truth has {len(ground_truth)} entries for {num_queries} queries; give "
      "one mapping per row of query_embeddings."
    )
  formats = [_format_of(fn, i, entry) for i, entry in enumerate(ground_truth)]
  if len(set(formats)) > 1:
    i = formats.index(formats[-1])
    raise ValueError(
      f"{fn}: ground_truth mixes formats (query 0 is {formats[0]}, query {i} {formats[-1]}); "
      "give every query the keys easy/hard/junk, or every query ok/junk."
    )
  fmt = formats[0]
  per_query = []
  for i, entry in enumerate(ground_truth):
    parts = [_indices(fn, i, key, entry[key], num_items) for key in _KEYS[fmt]]
    listed = np.concatenate(parts)
    if np.unique(listed).size != listed.size:
      names = " and ".join(f"'{k}'" for k in _KEYS[fmt])
      raise ValueError(
        f"{fn}: ground_truth[{i}] lists an item in more than one of {names}; each item has "
        "one role per query."
      )
    kinds = [EASY, HARD, JUNK] if fmt == "revisited" else [EASY, JUNK]
    per_query.append([(p, k) for p, k in zip(parts, kinds)])
  return (fmt, *_slots(per_query))


def _slots(per_query):
  """The padded `[Q, K]` index and kind arrays of `_parse_ground_truth`."""
  positives = [np.concatenate([p for p, k in q if k != JUNK]) for q in per_query]
  pos_kinds = [np.concatenate([np.full(len(p), k) for p, k in q if k != JUNK]) for q in per_query]
  junk = [np.concatenate([p for p, k in q if k == JUNK]) for q in per_query]
  num_pos = max(max(len(p) for p in positives), 1)
  num_junk = max(len(j) for j in junk)
  index = np.full((len(per_query), num_pos + num_junk), -1, np.int32)
  kind = np.full(index.shape, -1, np.int8)
  for i, (p, pk, j) in enumerate(zip(positives, pos_kinds, junk)):
    index[i, : len(p)], kind[i, : len(p)] = p, pk
    index[i, num_pos : num_pos + len(j)], kind[i, num_pos : num_pos + len(j)] = j, JUNK
  return index, kind, num_pos


def _gallery_source(fn, x):
  """The gallery as it is (a device array, or a host array that `_rows` puts on the device block
  by block: never copied whole) and its compute dtype, checked finite without a copy."""
  name = "gallery_embeddings"
  checks.check_array(fn, name, x, kind="floating", ndim=2, layout="[N, D]")
  if not isinstance(x, jax.Array):
    x = np.asarray(x)
    if x.dtype == np.float64 and not jax.config.read("jax_enable_x64"):
      return _as_embeddings(fn, name, x), np.dtype(np.float32)  # One float32 copy.
  if x.shape[0] == 0:
    raise ValueError(f"{fn}: {name} are empty (shape {x.shape}); give at least one row.")
  xp = jnp if isinstance(x, jax.Array) else np
  # A finite sum means finite values (one pass, no temporary); else look closer (an overflow).
  with np.errstate(over="ignore", invalid="ignore"):
    finite = bool(xp.isfinite(xp.sum(x))) or bool(xp.all(xp.isfinite(x)))
  if not finite:
    raise ValueError(f"{fn}: {name} contain NaN or infinite values (or overflow float32).")
  return x, np.dtype(lists.compute_dtype(x.dtype))


def _as_embeddings(fn, name, x):
  """A finite `[n, D]` host array of the compute dtype (float32; float64 under x64)."""
  checks.check_array(fn, name, x, kind="floating", ndim=2, layout="[N, D]")
  x = np.asarray(x)
  if x.shape[0] == 0:
    raise ValueError(f"{fn}: {name} are empty (shape {x.shape}); give at least one row.")
  dtype = np.float64 if x.dtype == np.float64 and jax.config.read("jax_enable_x64") else np.float32
  with np.errstate(over="ignore"):
    x = x.astype(dtype, copy=False)
  if not np.all(np.isfinite(x)):
    raise ValueError(f"{fn}: {name} contain NaN or infinite values (or overflow float32).")
  return x


# ---------------------------------------------------------------------------------------------
# The device's part: scores chunk by chunk, the listed items' scores, the counts around positives.


COMPARE_UP_TO = 48
"""Positive slots per query up to which the counts compare each gallery item with every
positive's score (`count_above_and_tied(compare_up_to=...)`); beyond, each chunk is sorted (numpy's
sort through the host callback on the CPU) and searched. Measured on 2026-12-02 (AMD EPYC, 2 cores,
no AVX-512, numpy 2.4; one chunk of 70 queries x 65,536 items, `_count` alone, medians of 5): 16
slots compared 0.030 s against 0.101 s sorted, 64 slots 0.155 s against 0.110 s, 157 slots 0.241 s
against 0.139 s, 512 slots 0.488 s against 0.164 s; the two cross near 45. (The bound had been
1,024 from an earlier measurement that found comparing faster there; on this machine that made
counting half of R1M's evaluation.)"""


@functools.partial(jax.jit, static_argnames=("similarity_fn", "dtype"))
def _chunk_scores(queries, rows, *, similarity_fn, dtype):
  """Scores `[c, size]` of `queries` against `rows [size, D]` (cast to `dtype` here, on the
  device): one program for every block of rows of one size, so that an item's score is the same
  bits in a block of the gallery and in the block of gathered listed items."""
  scores = similarity_fn(queries, rows.astype(dtype))
  return scores.astype(lists.compute_dtype(scores.dtype))


@jax.jit
def _pick(scores, index, start, picked):
  """`picked [c, K]` with the scores of the listed items among this chunk's rows filled in."""
  local = index - start
  here = (index >= 0) & (local >= 0) & (local < scores.shape[1])
  taken = jnp.take_along_axis(scores, jnp.clip(local, 0, scores.shape[1] - 1), axis=1)
  return jnp.where(here, taken, picked)


@functools.partial(jax.jit, static_argnames=("branch", "overlap"))
def _count(scores, thresholds, start, done, totals, *, branch, overlap):
  """`totals` (`(above, tied, poisoned)`) plus this chunk's: its rows scored above and tied with
  each threshold (`[c, R]`, decreasing, NaN last: the order of every path of
  `count_above_and_tied`), and whether one scores NaN. With `overlap`, only the fresh rows
  (gallery rows `start + j >= done`, those no earlier chunk counted)."""
  del branch  # Read by `platforms.by_platform` when traced; a key of the compiled code.
  if overlap:
    fresh = start + jnp.arange(scores.shape[1]) >= done
    scores = jnp.where(fresh[None, :], scores, jnp.nan)
    nan = jnp.any(jnp.isnan(scores) & fresh[None, :], axis=1)
  else:
    nan = jnp.any(jnp.isnan(scores), axis=1)
  counts = counting.count_above_and_tied(scores, thresholds, compare_up_to=COMPARE_UP_TO)
  above, tied, poisoned = totals
  return above + counts.above, tied + counts.tied, poisoned | nan


def _aligned_copy(block: np.ndarray) -> np.ndarray:
  """A copy of `block` in a fresh buffer aligned to 64 bytes, which a CPU device aliases."""
  buffer = np.empty(block.nbytes + 64, np.uint8)
  offset = -buffer.ctypes.data % 64
  out = buffer[offset : offset + block.nbytes].view(block.dtype).reshape(block.shape)
  np.copyto(out, block)
  return out


def _rows(gallery, start, size):
  """Gallery rows `start, ..., start + size - 1` on the device: a slice of a device array, or
  one block of a host array put there alone, so that the whole gallery is never copied (on a
  CPU device the block is copied into an aligned buffer that the device aliases: a plain
  `device_put` copies about 4 times slower)."""
  if isinstance(gallery, jax.Array):
    return jax.lax.dynamic_slice_in_dim(gallery, start, size)
  block = gallery[start : start + size]
  if jax.default_backend() == "cpu":
    return jax.device_put(_aligned_copy(block), may_alias=True)
  return jax.device_put(block)


def _listed_scores(queries, gallery, index, size, score):
  """`[c, K]` scores of each query's listed items (`index [c, K]`, -1: NaN), by `score` on
  blocks of `size` gathered rows: the gallery chunks' program, so the same bits as those chunks
  give them (checked by the caller)."""
  c, k = index.shape
  flat = np.clip(index, 0, None).ravel()
  flat = np.concatenate([flat, np.zeros(-len(flat) % size, flat.dtype)])
  blocks = []
  for begin in range(0, len(flat), size):
    rows = flat[begin : begin + size]
    if isinstance(gallery, jax.Array):
      block = jnp.take(gallery, jnp.asarray(rows), axis=0)
    else:
      block = jax.device_put(gallery[rows])
    blocks.append(np.asarray(score(queries, block)))
  every = np.concatenate(blocks, axis=1)[:, : c * k].reshape(c, c, k)
  own = every[np.arange(c), np.arange(c)]  # Query i's own items.
  return np.where(index >= 0, own, np.nan)


def _gallery_counts(queries, gallery, index, num_positive, *, gallery_chunk, similarity_fn, dtype):
  """For one chunk of queries: the listed items' scores `[c, K]`, for each positive slot the
  gallery items scored at least as high (`[c, num_positive]`), and whether a query has a NaN
  score. The positives' scores first, on their gathered rows; then one pass over the gallery in
  chunks that picks the listed items' scores and counts around the positives'; a second pass only
  where the picked scores are not the same bits as the first ones. Memory O(c (gallery_chunk +
  K) + gallery_chunk D) beside the gallery."""
  n = gallery.shape[0]
  size = min(gallery_chunk, n)
  starts = [min(s, n - size) for s in range(0, n, size)]  # The last chunk overlaps.
  score = functools.partial(_chunk_scores, similarity_fn=similarity_fn, dtype=dtype)
  thresholds = _listed_scores(queries, gallery, index[:, :num_positive], size, score)
  picked = None
  while True:
    order = np.argsort(np.where(np.isnan(thresholds), np.inf, -thresholds), axis=1)
    ordered = jnp.asarray(np.take_along_axis(thresholds, order, axis=1))
    fresh = jnp.full(index.shape, jnp.nan, lists.compute_dtype(dtype)) if picked is None else None
    totals, found = _pass(queries, gallery, index, starts, size, score, ordered, fresh)
    picked = np.asarray(found) if picked is None else picked
    if np.array_equal(picked[:, :num_positive], thresholds, equal_nan=True):
      break
    # Rare: the gathered blocks scored an item otherwise than its chunk; count again around
    # the chunks' own scores.
    logging.debug("evaluate_revisited: the listed items' scores differ; counting again.")
    thresholds = picked[:, :num_positive]
  above, tied, poisoned = jax.device_get(totals)
  at_least = np.empty_like(above)
  np.put_along_axis(at_least, order, above + tied, axis=1)
  return picked, at_least, poisoned


def _pass(queries, gallery, index, starts, size, score, ordered, picked):
  """One pass over the gallery's chunks: the counts around `ordered` thresholds and, unless
  `picked` is None, the listed items' scores picked into it."""
  zeros = jnp.zeros(ordered.shape, jnp.int32)
  totals = (zeros, zeros, jnp.zeros(ordered.shape[0], bool))  # above, tied, poisoned
  branch, done = ranking.forced_branch(), 0
  for start in starts:
    scores = score(queries, _rows(gallery, start, size))
    if picked is not None:
      picked = _pick(scores, index, start, picked)
    overlap = start < done
    totals = _count(scores, ordered, start, done, totals, branch=branch, overlap=overlap)
    done = start + size
  return totals, picked


# ---------------------------------------------------------------------------------------------
# The host's part: positions, AP and mP@k of each query in each setting.


def _positions(scores, kind, at_least, positive, ignored):
  """The 0-based positions of a query's positives in its ranking without the ignored items.

  `scores [K]` of its listed items, `kind [K]` their kinds, `at_least [K]` the gallery items
  scored at least as high as each positive slot (the first slots), `positive`/`ignored` sets of
  kinds.
  Ties: a positive comes after every negative it ties with (the pessimistic order); tied
  positives take consecutive positions.
  """
  pos, ign = np.isin(kind, list(positive)), np.isin(kind, list(ignored))
  s, t = scores[pos], scores[ign]
  ignored_at_least = np.sum(t[None, :] >= s[:, None], axis=1)
  positives_at_least = np.sum(s[None, :] >= s[:, None], axis=1)
  negatives_at_least = at_least[pos[: len(at_least)]] - ignored_at_least - positives_at_least
  positives_above = np.sum(s[None, :] > s[:, None], axis=1)
  slot = np.arange(len(s))
  tied_before = np.sum((s[None, :] == s[:, None]) & (slot[None, :] < slot[:, None]), axis=1)
  return np.sort(negatives_at_least + positives_above + tied_before)


def _ap_and_precisions(position, ks):
  """AP by the protocol's trapezoid rule and mP@k (`[len(ks)]`) of 0-based positions (sorted,
  at least one)."""
  j = np.arange(len(position), dtype=np.float64)
  r = position.astype(np.float64)
  before = np.where(r > 0, j / np.maximum(r, 1), 1.0)
  after = (j + 1) / (r + 1)
  ap = float(np.sum((before + after) / 2) / len(position))
  one_based = position + 1
  cut = [min(int(one_based.max()), k) for k in ks]
  return ap, np.array([np.sum(one_based <= c) / c for c in cut])


def _query_values(fmt, picked, at_least, kind, poisoned, ks):
  """Per-query values `{key: [Q]}` and positives `{setting/num_positives: [Q]}` of every
  setting: 0 for a query without positives in a setting, NaN for one with a NaN score."""
  out = {}
  for name, (positive, ignored) in SETTINGS[fmt].items():
    prefix = f"{name}/" if name else ""
    ap = np.zeros(len(kind))
    mp = np.zeros((len(kind), len(ks)))
    num = np.isin(kind, list(positive)).sum(axis=1)
    for q in np.flatnonzero(num):
      position = _positions(picked[q], kind[q], at_least[q], positive, ignored)
      ap[q], mp[q] = _ap_and_precisions(position, ks)
    ap[poisoned & (num > 0)] = np.nan
    mp[poisoned & (num > 0)] = np.nan
    out[f"{prefix}map"] = ap
    out |= {f"{prefix}mp@{k}": mp[:, i] for i, k in enumerate(ks)}
    out[f"{prefix}num_positives"] = num.astype(np.int32)
  return out


def _reduce(values, reduce_fn):
  """The means (or `reduce_fn`) over the queries with positives, setting by setting."""
  if reduce_fn is None:
    return values
  out = {}
  for key, value in values.items():
    if key.endswith("num_positives"):
      continue
    counted = values[key.rsplit("/", 1)[0] + "/num_positives" if "/" in key else "num_positives"]
    counted = counted > 0
    if reduce_fn is np.mean or reduce_fn is jnp.mean:
      out[key] = float(np.sum(value[counted])) / max(int(counted.sum()), 1)
    else:
      out[key] = float(reduce_fn(value, where=counted))
  return out


def evaluate_revisited(
  query_embeddings: jax.typing.ArrayLike,
  gallery_embeddings: jax.typing.ArrayLike,
  ground_truth: Sequence[Mapping[str, Sequence[int]]],
  *,
  ks: Sequence[int] = (1, 5, 10),
  similarity_fn: types.SimilarityFn = similarity.cosine,
  chunk_size: int | None = None,
  gallery_chunk_size: int | None = None,
  reduce_fn: types.ReduceFn | None = np.mean,
) -> dict[str, float] | dict[str, np.ndarray]:
  r"""mAP and mP@k of landmark retrieval by the Revisited Oxford/Paris protocol.

  The reference evaluation of Radenovic et al. 2018 ("Revisiting Oxford and Paris: Large-Scale
  Image Retrieval Benchmarking", `compute_map` of their revisitop code), which Revaud et al. 2019
  (sec. 4) report: each query ranks the whole gallery by `similarity_fn` (cosine by default), the
  ignored items of a setting are removed, and each positive gets its 0-based position `r_j`
  among the remaining items (`j = 0, 1, ...` in ranking order). Settings (see the module's
  table): Easy, Medium and Hard for `{'easy', 'hard', 'junk'}` ground truth, one setting for
  `{'ok', 'junk'}` (other keys, such as `'bbx'`, are ignored).

  .. math::

     \mathrm{AP} = \frac{1}{|P|} \sum_j \frac{1}{2}\left(\frac{j}{r_j} + \frac{j + 1}{r_j + 1}
     \right), \quad \frac{j}{r_j} := 1 \text{ at } r_j = 0; \qquad
     \mathrm{P@}k = \frac{|\{j : r_j + 1 \le k'\}|}{k'}, \quad k' = \min(k, \max_j r_j + 1)

  AP is the protocol's trapezoid rule (the precisions before and after each positive,
  averaged); P@k is the protocol's (not the plain precision at k: a query with fewer than `k`
  positives, all ranked first, gets 1). Both are fractions, where the reference prints percents.

  Ties in score: the reference sorts with `np.argsort(-scores)`, whose order among ties is
  numpy's unstable sort's; here a positive comes after every negative it ties with (the
  pessimistic order of `evaluate_retrieval`), so a constant score gives the worst AP, never a
  lucky one. Without ties the two are the same.

  A query without positives in a setting is left out of that setting's mean (the reference sets
  its AP to NaN and divides by the other queries); a setting without any query with positives
  gives 0 (the reference 0/0). A NaN score makes its query's values NaN, and so the mean.

  Nothing `[Q, N]` is held, and the gallery is not copied: a device array is read in place,
  a host (numpy) array is put on the device one chunk at a time. Chunks of `chunk_size` queries
  against `gallery_chunk_size` gallery items: the positives' scores are computed first from
  their gathered rows (by the chunks' own program), then one pass over the gallery picks the
  listed items' scores and counts, for each positive, the gallery items scored at least as high
  (`count_above_and_tied`, by comparing up to `COMPARE_UP_TO` = 48 positives per query, one
  sort of each chunk beyond); where a picked score is not the same bits as the first one (not
  seen on CPU), a second pass counts around the picked scores, so the result is always that of
  the chunks' scores. Time O(Q N (D + min(P, log N))) for `P` positives per query; memory
  O(chunk_size * gallery_chunk_size + gallery_chunk_size * D + Q K) beside the inputs.
  Positions are then found on the host from the listed items' scores (O(Q K^2), `K` the most
  listed items of a query). The time at R1M's size against the product of the same matrices and
  revisitop's own path: docs/guide/landmarks.rst.

  Args:
    query_embeddings: `[Q, D]` floating query descriptors, finite.
    gallery_embeddings: `[N, D]` floating gallery descriptors, finite.
    ground_truth: one mapping per query, as the protocol's `gnd` lists hold it: lists of gallery
      indices in `[0, N)` under `'easy'`, `'hard'` and `'junk'`, or under `'ok'` and `'junk'`
      (every query the same format): integers, or floats with whole values (what revisitop's
      `np.concatenate` of lists gives, e.g. float64 for an empty list joined to others). A
      fraction, an index outside the gallery, one listed twice, an item in
      two lists of a query, a missing key or mixed formats are a `ValueError`.
    ks: the cut-offs of mP@k, positive ints (the name of `evaluate_retrieval`'s cut-offs).
    similarity_fn: the scoring rule `(queries [c, D], gallery [g, D]) -> [c, g]` (see
      `jaxrank.similarity`), higher is more similar; a static argument of jitted code.
    chunk_size: queries per step; `None`: 256.
    gallery_chunk_size: gallery items per step; `None`: 65,536.
    reduce_fn: the reduction over queries, `reduce_fn(values, where=counted)` on float64 `[Q]`
      (default `np.mean`, over the queries with positives); `None` returns per-query values.

  Returns:
    A dict of Python floats: `easy/map`, `medium/map`, `hard/map` and `easy/mp@k`, `medium/mp@k`,
    `hard/mp@k` for each `k` in `ks` (or `map` and `mp@k` for ok/junk ground truth). With
    `reduce_fn=None`, float64 arrays `[Q]` under the same keys (0 where a query has no positives)
    and int32 `<setting>/num_positives` (`num_positives`).

  >>> import numpy as np
  >>> q = np.array([[1.0, 0.0]])
  >>> g = np.array([[1.0, 0.0], [0.9, 0.1], [0.5, 0.5], [0.0, 1.0]])
  >>> gnd = [{"easy": [2], "hard": [3], "junk": [0]}]
  >>> r = evaluate_revisited(q, g, gnd, ks=(1,))
  >>> [round(r[key], 4) for key in ("easy/map", "medium/map", "hard/map", "medium/mp@1")]
  [0.25, 0.4167, 0.25, 0.0]
  """
  fn = "evaluate_revisited"
  ks = checks.check_cutoffs(fn, ks)
  checks.check_positive_int(fn, "chunk_size", chunk_size, allow_none=True)
  checks.check_positive_int(fn, "gallery_chunk_size", gallery_chunk_size, allow_none=True)
  checks.check_callable(fn, "similarity_fn", similarity_fn, hint="e.g. jaxrank.similarity.cosine.")
  if reduce_fn is not None:
    checks.check_callable(fn, "reduce_fn", reduce_fn, hint="e.g. np.mean, or None per query.")
  queries = _as_embeddings(fn, "query_embeddings", query_embeddings)
  gallery, dtype = _gallery_source(fn, gallery_embeddings)
  if gallery.shape[1] != queries.shape[1]:
    raise ValueError(
      f"{fn}: gallery_embeddings {gallery.shape} and query_embeddings {queries.shape} differ in "
      "dimension."
    )
  fmt, index, kind, num_positive = _parse_ground_truth(
    fn, ground_truth, *(len(queries), len(gallery))
  )
  picked, at_least, poisoned = _over_query_chunks(
    queries,
    gallery,
    index,
    num_positive,
    chunk_size=chunk_size or DEFAULT_CHUNK_SIZE,
    gallery_chunk=gallery_chunk_size or DEFAULT_GALLERY_CHUNK_SIZE,
    similarity_fn=similarity_fn,
    dtype=dtype,
  )
  return _reduce(_query_values(fmt, picked, at_least, kind, poisoned, ks), reduce_fn)


def _over_query_chunks(queries, gallery, index, num_positive, *, chunk_size, **kwargs):
  """`_gallery_counts` of every chunk of queries (the last padded with query 0, at least two
  rows: one row would take XLA's matrix-vector kernel), concatenated `[Q, ...]`."""
  num_queries = len(queries)
  chunk = max(min(chunk_size, num_queries), 2)
  query_set = jnp.asarray(queries)
  results = []
  for begin in range(0, num_queries, chunk):
    rows = np.arange(begin, begin + chunk)
    real = rows < num_queries
    rows = np.where(real, rows, 0)
    chunk_index = np.where(real[:, None], index[rows], -1)
    results.append(
      _gallery_counts(query_set[rows], gallery, jnp.asarray(chunk_index), num_positive, **kwargs)
    )
  return tuple(np.concatenate(parts)[:num_queries] for parts in zip(*results))
