"""Scoring rules: how a query's embedding scores the items it ranks.

Every rule is a function `fn(queries [Q, D], items [N, D]) -> scores [Q, N]` (a
`jaxrank.types.SimilarityFn`), higher meaning more similar, computed in at least float32 from one
matrix product: O(Q N D) time, O(Q N) memory. `batch_retrieval`, `sharded_batch_retrieval` and
`evaluate_retrieval` take one as `similarity_fn` (cosine by default), so that training and
evaluation score alike.

**One computation of each score.** The built-in rules cast their inputs to the compute dtype
first, take dot products of the rows with one matrix product (`jax.lax.dot_general` on the last
axes, never an explicit transpose), and scale afterwards by per-row factors, each computed from its
own row alone by elementwise operations in a fixed order (never a reduction whose order could
depend on how many rows there are). So:

* rows whose dot products are equal (binary codes, say) get bit-identical scores: ties stay ties;
* the score matrix of a set against itself is symmetric, bit for bit;
* a score does not depend on the other queries scored with it: `evaluate_retrieval`, scoring a
  chunk of queries against a gallery, gets bit-identical scores to `batch_retrieval` on the same
  gallery, so the two give the same metrics even for nearly collinear or duplicated embeddings;
* a score does not depend on the other items scored with it either: every product is taken over
  blocks of exactly 1,024 item rows (the last block overlaps its neighbour, a short list is
  zero-padded), so an entry comes out of a product of one shape whatever the number of items or
  where they start. A gallery split across devices and processes (`evaluate_retrieval(mesh=)`)
  therefore scores every pair bit for bit as one process does.

These rest on the matrix product computing every entry by the same sequence of operations for a
given shape, whatever the entry's position and whatever the number of query rows above one; XLA
does not promise it, but its CPU backend does it (tested in `tests/test_similarity.py`; a plain
product's entries do change with the number of item rows: a third to nine tenths of them at
D = 512). A single query row takes a matrix-vector kernel that rounds differently, so
`evaluate_retrieval` never scores fewer than two rows at a time.

**On accelerators** (`platforms.by_platform`) the products are not blocked: each rule takes one
`[Q, N]` product, finished (divided, clipped) in the product's own output fusion. XLA writes
blocks into one `[Q, N]` buffer (a padded first block, then a dynamic update per block), which on
a TPU v5e at B = 4096 made the in-batch cosine step's estimate 2.3x a plain product's; one product
is 1.0-1.3x. There the scores keep the properties that do not rest on the blocks (scale
invariance, the per-row factors, the symmetric division by one product of norms; the squared
norms are one plain reduction there, `squared_norms`), but a score may
change in its last bits with the number of items scored beside it, or where a gallery is split:
a GPU's or TPU's matrix product chooses its tiling and the split of the `D` reduction by the
shapes (cuBLAS picks algorithms, split-K among them, per shape; the TPU compiler tiles per
shape), so even a fixed block shape would not promise it there. None of these properties has been
checked on GPU or TPU hardware.

On a CPU the blocks cost little, one `[Q, 1024]` block of temporaries (measured in
docs/guide/scale.rst, section "Across processes and machines", under evaluation). Derivatives are
taken from plain products (`jax.custom_jvp`; cosine's through the unit rows, see `_scaled_cosines`):
they are sums of products of the same values, and their rounding does not need to match across
splits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import types
from jaxrank._src import lists
from jaxrank._src import platforms

ITEM_BLOCK = 1024
"""Item rows per matrix product in every built-in rule (see the module docstring)."""

UNROLL_BLOCKS = 8
"""Up to this many item blocks, the products are written out rather than looped over."""


def _plain_dots(queries: jax.Array, items: jax.Array) -> jax.Array:
  return jax.lax.dot_general(
    queries, items, (((1,), (1,)), ((), ())), preferred_element_type=queries.dtype
  )


def _in_blocks(queries: jax.Array, items: jax.Array, finish: Callable | None = None) -> jax.Array:
  """`queries @ items.T` `[Q, N]`, mapped by `finish(block, start)` (a block of products, its
  columns from `start`) to the scores: on a CPU each entry from a `[Q, ITEM_BLOCK]` product, each
  block finished as it is written (`_blocked_products`); on an accelerator from one product,
  finished in its output fusion (`_one_product`). The module docstring says why."""
  return platforms.by_platform(
    queries,
    items,
    cpu=lambda q, x: _blocked_products(q, x, finish),
    accelerator=lambda q, x: _one_product(q, x, finish),
  )


def _one_product(queries: jax.Array, items: jax.Array, finish: Callable | None) -> jax.Array:
  """The accelerators' form of `_in_blocks`: one `[Q, N]` product, which XLA finishes (divides,
  clips) in the product's own output fusion, so the scores are written once. Blocks cost a GPU
  or TPU far more than a CPU: XLA writes them into one `[Q, N]` buffer (a padded first block and a
  dynamic update per block), so the scores were written and read about twice more than the
  product's (the in-batch cosine step's bytes on a TPU v5e at B = 4096: 2.3x a plain product's)."""
  dots = _plain_dots(queries, items)
  return dots if finish is None else finish(dots, 0)


def _blocked_products(queries: jax.Array, items: jax.Array, finish: Callable | None) -> jax.Array:
  """The CPU's form of `_in_blocks`: each entry from a `[Q, ITEM_BLOCK]` product."""
  num_items = items.shape[0]

  def finished(dots, start):
    return dots if finish is None else finish(dots, start)

  def product(rows, start):
    return finished(_plain_dots(queries, rows), start)

  if num_items <= ITEM_BLOCK:
    padded = jnp.pad(items, ((0, ITEM_BLOCK - num_items), (0, 0)))
    return finished(_plain_dots(queries, padded)[:, :num_items], 0)

  def block(i, scores):
    # The last block ends at the last item, overlapping its neighbour: both write equal values.
    start = jnp.minimum(i * ITEM_BLOCK, num_items - ITEM_BLOCK)
    rows = jax.lax.dynamic_slice_in_dim(items, start, ITEM_BLOCK, axis=0)
    return jax.lax.dynamic_update_slice_in_dim(scores, product(rows, start), start, axis=1)

  # The first block, padded, starts the result: under `shard_map` it then has the type (the
  # device-varying axes) of every later block, which a loop carry of zeros would not.
  first = product(items[:ITEM_BLOCK], 0)
  scores = jnp.pad(first, ((0, 0), (0, num_items - ITEM_BLOCK)))
  # A few blocks (an in-batch step) are written out, so that XLA sees every product (its cost
  # analysis counts a loop's body once, whatever the trip count); a gallery's many blocks loop.
  num_blocks = -(-num_items // ITEM_BLOCK)
  return jax.lax.fori_loop(1, num_blocks, block, scores, unroll=num_blocks <= UNROLL_BLOCKS)


@jax.custom_jvp
def _blocked_dots(queries: jax.Array, items: jax.Array) -> jax.Array:
  """`queries @ items.T` `[Q, N]`, each entry from a `[Q, ITEM_BLOCK]` product."""
  return _in_blocks(queries, items)


@_blocked_dots.defjvp
def _blocked_dots_jvp(primals, tangents):
  (queries, items), (d_queries, d_items) = primals, tangents
  return _blocked_dots(queries, items), (
    _plain_dots(d_queries, items) + _plain_dots(queries, d_items)
  )


@jax.custom_jvp
def _scaled_cosines(queries, norms_q, items, norms_x) -> jax.Array:
  """`clip(q.x / (|q| |x|), -1, 1)` `[Q, N]` of rows and their norms, in item blocks: each block's
  products are divided by the one product of the two norms and clipped as the block is written,
  so that the `[Q, N]` scores are written once."""

  def finish(dots, start):
    block_norms = jax.lax.dynamic_slice_in_dim(norms_x, start, dots.shape[1])
    return jnp.clip(dots / (norms_q[:, None] * block_norms[None, :]), -1, 1)

  return _in_blocks(queries, items, finish)


@_scaled_cosines.defjvp
def _scaled_cosines_jvp(primals, tangents):
  """The derivative through the unit rows `u = x / |x|`: `ds = du_q . u_x + u_q . du_x`, with
  `du = (dx - u d|x|) / |x|` `[N, D]`. Its transpose is two products of the cotangent with the
  unit rows and O((Q + N) D) besides, with no `[Q, N]` residual (differentiating the division
  by the norms would reduce the cotangent times the scores over each row and column). The clip
  is a rounding fix (a row with itself may give 1 + ulp), so the derivative is cosine's own,
  through it."""
  (q, norms_q, x, norms_x), (dq, d_norms_q, dx, d_norms_x) = primals, tangents
  unit_q, unit_x = q / norms_q[:, None], x / norms_x[:, None]
  d_unit_q = (dq - unit_q * d_norms_q[:, None]) / norms_q[:, None]
  d_unit_x = (dx - unit_x * d_norms_x[:, None]) / norms_x[:, None]
  return _scaled_cosines(q, norms_q, x, norms_x), (
    _plain_dots(d_unit_q, unit_x) + _plain_dots(unit_q, d_unit_x)
  )


def _dots(queries: jax.Array, items: jax.Array, dtype) -> jax.Array:
  """`queries @ items.T` `[Q, N]` in `dtype`, from inputs cast to `dtype` first, in item blocks."""
  return _blocked_dots(queries.astype(dtype), items.astype(dtype))


def row_sums(x: jax.Array) -> jax.Array:
  """Sums `[N]` of the rows of `x [N, D]` by a pairwise tree of elementwise additions.

  Unlike `jnp.sum`, whose reduction order XLA may choose by the shape (so that a row's sum can
  change with the number of rows), the order here depends on `D` alone. The rows are first padded
  with zeros to a power of two (adding 0 is exact), so the tree is `log2` halvings.
  """
  width = x.shape[-1]
  if width == 0:
    return jnp.zeros(x.shape[:-1], x.dtype)
  padded = 1 << (width - 1).bit_length()
  x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, padded - width)])
  while padded > 1:
    padded //= 2
    x = x[..., :padded] + x[..., padded:]
  return x[..., 0]


def squares_of(x: jax.Array) -> jax.Array:
  """The squares of `x [N, D]`, each computed from exact products, so that no fusion changes it.

  Each entry is split into a high part of 12 significant bits (the low mantissa bits cleared)
  and the rest, `x = h + l`, so `x^2 = (h^2 + 2 h l) + l^2` with every product exact in float32
  and only the two additions rounding. XLA may fuse a product into the addition that follows it
  (a fused multiply-add, in compiled code but not op by op); with exact products that changes
  nothing, so eager and compiled code give the same bits.
  """
  info = jnp.finfo(x.dtype)
  bits = jnp.dtype(f"int{info.bits}")
  mask = ~((1 << ((info.nmant + 1) // 2)) - 1)
  high = jax.lax.bitcast_convert_type(
    jax.lax.bitcast_convert_type(x, bits) & jnp.asarray(mask, bits), x.dtype
  )
  low = x - high
  return (high * high + (2 * high) * low) + low * low


@jax.custom_jvp
def squared_norms(x: jax.Array) -> jax.Array:
  """`[N]` squared Euclidean norms of the rows of `x [N, D]`.

  On a CPU `row_sums(squares_of(x))`, whose rounding depends on `D` alone: O(N D) time in about
  `log2 D` passes of halving `[N, D/2^k]` arrays, cheap there. On accelerators
  (`platforms.by_platform`) one plain reduction `sum(x * x)` over the rows, a single pass over
  `x` fused with its consumers: the tree's passes cost a TPU v5e about a tenth of the in-batch
  cosine step's bytes at B = 4096, D = 512 (its estimate 1.40x a plain product's step, 1.29x
  with the one reduction). Its rounding is the compiler's (per shape), like the accelerators' one
  product of the scores (see the module docstring). The derivative `2 x . dx` is taken plainly on
  both (it needs no fixed order, and differentiating the tree of additions and the bit masks made
  the programs larger and slower to compile)."""
  return platforms.by_platform(
    x, cpu=lambda v: row_sums(squares_of(v)), accelerator=lambda v: jnp.sum(v * v, axis=-1)
  )


@squared_norms.defjvp
def _squared_norms_jvp(primals, tangents):
  (x,), (dx,) = primals, tangents
  return squared_norms(x), 2 * jnp.sum(x * dx, axis=-1)


def _power_of_two(exponent: jax.Array, dtype) -> jax.Array:
  """`2 ** exponent`, exactly, for integer exponents in the normal range of `dtype`."""
  info = jnp.finfo(dtype)
  bits = jnp.dtype(f"int{info.bits}")
  biased = (exponent.astype(bits) + (info.maxexp - 1)) << info.nmant
  return jax.lax.bitcast_convert_type(biased, dtype)


def unit_scaled(x: jax.Array, dtype) -> tuple[jax.Array, jax.Array]:
  """Rows of `x [N, D]` scaled by powers of two to a largest magnitude in `[1/2, 1)`, and the
  Euclidean norms `[N]` of the scaled rows.

  Scaling by a power of two is exact, so it changes no rounding of the dot products that follow;
  it keeps squares and dot products far from float32's overflow (rows of 1e30) and underflow (rows
  of 1e-30), which makes cosine scale-invariant. The scale is a constant for the gradient, which
  is exact because cosine is invariant to it. A zero row keeps scale 1 and gets inverse norm 2
  (its scores are 0, its gradient finite); a row with an infinite or NaN entry gets a NaN inverse
  norm, so that every score it takes part in is NaN.
  """
  x = x.astype(dtype)
  info = jnp.finfo(dtype)
  largest = jax.lax.stop_gradient(jnp.max(jnp.abs(x), axis=-1))
  exponent = jnp.frexp(jnp.where(jnp.isfinite(largest), largest, 0))[1]
  exponent = jnp.clip(exponent, info.minexp - info.nmant, info.maxexp)
  first = exponent // 2
  # Two factors, each a normal number, whatever the exponent (1e-45 to 3e38 in float32).
  scaled = x * _power_of_two(-first, dtype)[:, None]
  scaled = scaled * _power_of_two(first - exponent, dtype)[:, None]
  squares = squared_norms(scaled)
  # A nonzero scaled row has an entry of magnitude >= 1/2, so the floor changes only zero rows.
  # It is a `where`, not a `maximum`: a row whose one nonzero entry is a power of two (a one-hot
  # row) has squares of exactly 1/4, where a maximum would pass half of the derivative.
  # `sqrt` is correctly rounded wherever XLA computes it (an `rsqrt` is not: its vectorised
  # approximation rounds differently from the scalar one).
  norms = jnp.sqrt(jnp.where(squares > 0, squares, jnp.asarray(0.25, dtype)))
  norms = jnp.where(jnp.isfinite(largest), norms, jnp.asarray(np.nan, dtype))
  return scaled, jax.lax.optimization_barrier(norms)


def cosine(queries: jax.Array, items: jax.Array) -> jax.Array:
  r"""Cosine similarity :math:`s_{ij} = q_i^\top x_j / (\|q_i\| \|x_j\|)` in `[-1, 1]`.

  The default of every retrieval function, and the similarity of FastAP (through the squared
  distance `2 - 2 s` of unit vectors), mAP_Q, SmoothAP, SupAP and RaMBO.

  Scale-invariant in float32 as in exact arithmetic: each row is first scaled by a power of two
  (exact) to a largest magnitude in `[1/2, 1)`, so rows of any finite size (1e-30 or 1e30) give
  the scores of the same rows normalised. A zero row has similarity 0 with everything and a finite
  gradient. A row with an infinite or NaN entry gives NaN scores in its row and column, which the
  list metrics and losses turn into NaN lists (never a confident wrong number); the gradient is
  exact elsewhere (the power of two is a constant, and cosine is invariant to it).

  Args:
    queries: `[Q, D]` floating embeddings (need not be normalised).
    items: `[N, D]` floating embeddings.

  Returns:
    `[Q, N]` similarities in at least float32.

  >>> import jax.numpy as jnp
  >>> cosine(jnp.array([[3.0, 4.0]]), jnp.array([[1.0, 0.0], [0.0, -2.0]])).tolist()
  [[0.6000000238418579, -0.800000011920929]]
  """
  dtype = rule_dtype(cosine, queries.dtype, items.dtype)
  return _cosine_scores(queries, _cosine_items(items, dtype), dtype)


def _cosine_items(items: jax.Array, dtype) -> tuple[jax.Array, jax.Array]:
  return unit_scaled(items, dtype)


def _cosine_scores(queries: jax.Array, prepared, dtype) -> jax.Array:
  items, norms_x = prepared
  queries, norms_q = unit_scaled(queries, dtype)
  # One product of the two norms (commutative, so s_ij and s_ji are divided alike). Rounding can
  # leave [-1, 1] by an ulp (a row with itself: 1.0000001); clipping is monotone.
  return _scaled_cosines(queries, norms_q, items, norms_x)


def dot_product(queries: jax.Array, items: jax.Array) -> jax.Array:
  r"""Dot product :math:`s_{ij} = q_i^\top x_j`, unbounded: for losses that take any real score
  (the smooth-rank and blackbox losses), not for the histogram losses, which bin `[-1, 1]`.

  Args:
    queries: `[Q, D]` floating embeddings.
    items: `[N, D]` floating embeddings.

  Returns:
    `[Q, N]` dot products in at least float32.

  >>> import jax.numpy as jnp
  >>> dot_product(jnp.array([[3.0, 4.0]]), jnp.array([[1.0, 0.0], [0.0, -2.0]])).tolist()
  [[3.0, -8.0]]
  """
  dtype = rule_dtype(dot_product, queries.dtype, items.dtype)
  return _dot_product_scores(queries, _cast_items(items, dtype), dtype)


def _cast_items(items: jax.Array, dtype) -> jax.Array:
  return items.astype(dtype)


def _dot_product_scores(queries: jax.Array, items: jax.Array, dtype) -> jax.Array:
  return _dots(queries, items, dtype)


def negative_squared_euclidean(queries: jax.Array, items: jax.Array) -> jax.Array:
  r"""Negative squared Euclidean distance :math:`s_{ij} = -\|q_i - x_j\|^2 \le 0`.

  Computed as `2 q.x - (|q|^2 + |x|^2)` from the one matrix product, clipped at 0 from above (the
  expansion can round a tiny distance below 0). Unbounded below, like `dot_product`; not
  scale-invariant (entries beyond about 1e19 overflow float32 to infinite scores).

  Args:
    queries: `[Q, D]` floating embeddings.
    items: `[N, D]` floating embeddings.

  Returns:
    `[Q, N]` scores in at least float32.

  >>> import jax.numpy as jnp
  >>> q, x = jnp.array([[3.0, 4.0]]), jnp.array([[3.0, 4.0], [0.0, 0.0]])
  >>> negative_squared_euclidean(q, x).tolist()
  [[0.0, -25.0]]
  """
  dtype = rule_dtype(negative_squared_euclidean, queries.dtype, items.dtype)
  return _euclidean_scores(queries, _euclidean_items(items, dtype), dtype)


def _euclidean_items(items: jax.Array, dtype) -> tuple[jax.Array, jax.Array]:
  items = items.astype(dtype)
  return items, squared_norms(items)


def _euclidean_scores(queries: jax.Array, prepared, dtype) -> jax.Array:
  items, x2 = prepared
  dots = _dots(queries, items, dtype)
  q2 = squared_norms(queries.astype(dtype))
  # The two squared norms are added first (commutative), so the matrix of a set is symmetric.
  return jnp.minimum(2 * dots - (q2[:, None] + x2[None, :]), jnp.zeros((), dtype))


def hamming(queries: jax.Array, items: jax.Array) -> jax.Array:
  r"""The similarity `1 - 2 d / b` of b-bit codes, `d` their (relaxed) Hamming distance.

  For codes in `[-1, 1]^b` the relaxed Hamming distance is `d = (b - q.x) / 2` (He et al. 2018,
  eq. 1 and 10; `jaxrank.hashing.relaxed_hamming_distance`), so the similarity is `q.x / b`, in
  `[-1, 1]`. For binary codes in `{-1, 1}^b` it takes the `b + 1` values `1 - 2 d / b`, `d = 0..b`,
  exactly: the bin centres of the tie-aware losses with `num_bins = b + 1` (computed as
  `1 - 2 d / b` from the distance, so that they land on the centres). For relaxed codes
  `tanh(alpha f)` it is the differentiable relaxation the hashing losses train on (cosine would
  ignore how saturated the codes are).

  Args:
    queries: `[Q, b]` codes (floating, or integer `\pm 1`).
    items: `[N, b]` codes.

  Returns:
    `[Q, N]` similarities in at least float32.

  >>> import jax.numpy as jnp
  >>> hamming(jnp.array([[1.0, 1.0, -1.0, 1.0]]), jnp.array([[1.0, -1.0, -1.0, 1.0]])).tolist()
  [[0.5]]
  """
  dtype = rule_dtype(hamming, queries.dtype, items.dtype)
  return _hamming_scores(queries, _cast_items(items, dtype), dtype)


def _hamming_scores(queries: jax.Array, items: jax.Array, dtype) -> jax.Array:
  b = queries.shape[-1]
  dots = _dots(queries, items, dtype)
  distances = (b - dots) / 2
  return 1 - 2 * distances / b


# ---------------------------------------------------------------------------------------------
# Many chunks of queries against one gallery (`evaluate_retrieval`): the items' part once.


class _Rule(NamedTuple):
  """A built-in rule split in two: `items(items, dtype)`, what the scores need of the items
  (each row on its own), and `scores(queries, prepared, dtype)`. The rule itself is the two
  composed, so scores from a prepared gallery are the rule's, bit for bit."""

  items: Callable[[jax.Array, Any], Any]
  scores: Callable[[jax.Array, Any, Any], jax.Array]


_RULES: dict[types.SimilarityFn, _Rule] = {
  cosine: _Rule(_cosine_items, _cosine_scores),
  dot_product: _Rule(_cast_items, _dot_product_scores),
  negative_squared_euclidean: _Rule(_euclidean_items, _euclidean_scores),
  hamming: _Rule(_cast_items, _hamming_scores),
}


def rule_dtype(similarity_fn: types.SimilarityFn, query_dtype, item_dtype):
  """The dtype a built-in rule computes in for these inputs: at least float32 (and floating)."""
  dtype = lists.compute_dtype(jnp.result_type(query_dtype, item_dtype))
  if similarity_fn is hamming and not jnp.issubdtype(dtype, jnp.floating):
    dtype = jnp.result_type(float)
  return dtype


def prepare_items(similarity_fn: types.SimilarityFn, items: jax.Array, query_dtype) -> Any:
  """What `score_prepared` needs of `items [N, D]`, computed once for every chunk of queries of
  `query_dtype` (for cosine, the rows scaled by powers of two and their norms: without it, each
  chunk recomputed them, which took longer than the chunk's matrix product). Any other function
  than the built-in rules gets the items as they are."""
  rule = _RULES.get(similarity_fn)
  if rule is None:
    return items
  return rule.items(items, rule_dtype(similarity_fn, query_dtype, items.dtype))


def score_prepared(similarity_fn: types.SimilarityFn, queries: jax.Array, prepared) -> jax.Array:
  """`similarity_fn(queries, items)` `[c, N]` from `prepared = prepare_items(similarity_fn, items,
  queries.dtype)`: bit-identical to the rule on the items (each prepared row depends on its own
  row alone, by the operations the rule performs)."""
  rule = _RULES.get(similarity_fn)
  if rule is None:
    return similarity_fn(queries, prepared)
  item_dtype = jax.tree.leaves(prepared)[0].dtype
  return rule.scores(queries, prepared, rule_dtype(similarity_fn, queries.dtype, item_dtype))
