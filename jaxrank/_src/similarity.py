"""Scoring rules: how a query's embedding scores the items it ranks.

Every rule is a function `fn(queries [Q, D], items [N, D]) -> scores [Q, N]` (a
`jaxrank.types.SimilarityFn`), higher meaning more similar, computed in at least float32 with one
matrix product: O(Q N D) time, O(Q N) memory. `batch_retrieval`, `sharded_batch_retrieval` and
`evaluate_retrieval` take one as `similarity_fn` (cosine by default), so that training and
evaluation score alike.

Dot products of the raw rows are computed first and scaled afterwards, so rows whose dot products
are equal (binary codes, say) get bit-identical scores, and ties stay ties.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrank._src import lists


def _dots(queries: jax.Array, items: jax.Array) -> tuple[jax.Array, jnp.dtype]:
  dtype = lists.compute_dtype(jnp.result_type(queries, items))
  return jnp.matmul(queries, items.T, preferred_element_type=dtype), dtype


def inverse_norms(x: jax.Array, dtype) -> jax.Array:
  """`1 / max(||x||, 1e-12)` per row `[N]` of `x [N, D]`, with a finite gradient at `x = 0`."""
  squares = jnp.sum(jnp.square(x.astype(dtype)), axis=-1)
  return jax.lax.rsqrt(jnp.maximum(squares, jnp.asarray(1e-24, dtype)))


def cosine(queries: jax.Array, items: jax.Array) -> jax.Array:
  r"""Cosine similarity :math:`s_{ij} = q_i^\top x_j / (\|q_i\| \|x_j\|)` in `[-1, 1]`.

  The default of every retrieval function, and the similarity of FastAP (through the squared
  distance `2 - 2 s` of unit vectors), mAP_Q, SmoothAP, SupAP and RaMBO. A zero row has similarity
  0 with everything.

  Args:
    queries: `[Q, D]` floating embeddings (need not be normalised).
    items: `[N, D]` floating embeddings.

  Returns:
    `[Q, N]` similarities in at least float32.

  >>> import jax.numpy as jnp
  >>> cosine(jnp.array([[3.0, 4.0]]), jnp.array([[1.0, 0.0], [0.0, -2.0]])).tolist()
  [[0.6000000238418579, -0.800000011920929]]
  """
  dots, dtype = _dots(queries, items)
  return dots * inverse_norms(queries, dtype)[:, None] * inverse_norms(items, dtype)[None, :]


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
  return _dots(queries, items)[0]


def negative_squared_euclidean(queries: jax.Array, items: jax.Array) -> jax.Array:
  r"""Negative squared Euclidean distance :math:`s_{ij} = -\|q_i - x_j\|^2 \le 0`.

  Computed as `2 q.x - |q|^2 - |x|^2` from the one matrix product, clipped at 0 from above (the
  expansion can round a tiny distance below 0). Unbounded below, like `dot_product`.

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
  dots, dtype = _dots(queries, items)
  q2 = jnp.sum(jnp.square(queries.astype(dtype)), axis=-1)
  x2 = jnp.sum(jnp.square(items.astype(dtype)), axis=-1)
  return jnp.minimum(2 * dots - q2[:, None] - x2[None, :], jnp.zeros((), dtype))


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
  dtype = lists.compute_dtype(jnp.result_type(queries, items))
  if not jnp.issubdtype(dtype, jnp.floating):
    dtype = jnp.result_type(float)
  b = queries.shape[-1]
  dots = jnp.matmul(queries.astype(dtype), items.astype(dtype).T, preferred_element_type=dtype)
  distances = (b - dots) / 2
  return 1 - 2 * distances / b
