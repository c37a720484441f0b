"""Descriptor post-processing of landmark retrieval: learned PCA whitening, alpha-weighted query
expansion and database-side augmentation, as pure jittable functions.

The landmark literature's evaluation (Radenovic et al. 2018, "Fine-tuning CNN image retrieval with
no human annotation", and "Revisiting Oxford and Paris"; Revaud et al. 2019, sec. 4) post-processes
L2-normalised global descriptors before ranking: a whitening learned on a training set, then
alpha-QE (each query replaced by the normalised weighted sum of itself and its top `k` gallery
neighbours, weights `similarity ** alpha`). Every output here is L2-normalised, as that literature
does, so that the dot product of two outputs is their cosine. Hyperparameters (`power`, `dim`, `k`,
`alpha`, `chunk_size`) are static: fix them with `functools.partial` before `jax.jit`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrank._src import checks
from jaxrank._src import lists


def _unit(x: jax.Array) -> jax.Array:
  """The rows of `x` divided by their L2 norms (a zero row stays zero)."""
  norm = jnp.linalg.norm(x, axis=-1, keepdims=True)
  return x / jnp.maximum(norm, jnp.finfo(x.dtype).tiny)


def _principal_axes(centred: jax.Array) -> tuple[jax.Array, jax.Array]:
  """`(eigenvalues [D], eigenvectors [D, D])` of `centred^T centred / N`, decreasing, from the
  singular values of `centred` (QR first where `N >= D`; zeros past `N` where `N < D`)."""
  n, d = centred.shape
  if n >= d:
    r = jnp.linalg.qr(centred, mode="r")  # [D, D]: the same singular values, a D x D SVD.
    _, singular, vt = jnp.linalg.svd(r, full_matrices=False)
  else:
    _, singular, vt = jnp.linalg.svd(centred, full_matrices=True)
    singular = jnp.pad(singular, (0, d - n))
  return singular**2 / n, vt.T


def learn_whitening(
  descriptors: jax.typing.ArrayLike, *, power: float = 0.5, dim: int | None = None
) -> tuple[jax.Array, jax.Array]:
  r"""A PCA whitening learned from training descriptors: `(mean [D], projection [D, dim])`.

  .. math::

     \Sigma = \frac{1}{N} \sum_i (x_i - \mu)(x_i - \mu)^\top = V \Lambda V^\top, \qquad
     P = V_{:, :d} \, \max(\Lambda_{:d}, \lambda_0)^{-p}

  with the eigenvalues in decreasing order, `p = power` and `d = dim`. `power=0.5` is full PCA
  whitening (the whitened training set has identity covariance), cirtorch's `pcawhitenlearn`
  (filipradenovic/cnnimageretrieval-pytorch, `cirtorch/utils/whiten.py`) and scikit-learn's
  `PCA(whiten=True)` (which divides by `N - 1`); `power=0.25`, eigenvalues square-rooted
  before whitening, is the "square-rooted PCA" of Revaud et al. 2019 (sec. 4.2), their code's
  default (naver/deep-image-retrieval, `dirtorch/test_dir.py`, `--whitenp 0.25`:
  `whiten_features` in `dirtorch/utils/common.py` divides scikit-learn's PCA projections by
  `explained_variance_ ** whitenp`), which whitens less the weak directions.

  Accuracy: `\Sigma` is never formed. Its eigenvalues are the squared singular values of the
  centred descriptors (`/ N`), computed in the descriptors' precision (float32; float64 under
  x64) by a QR decomposition and an SVD, which resolve eigenvalues down to about `eps^2`
  times the largest, where a float32 covariance loses those below `eps` (1.2e-7) times the
  largest: real CNN descriptors have eigenvalues down to 1e-6-1e-7 of the largest, and full
  whitening amplifies exactly those. Eigenvalues below the floor `\lambda_0 = (D \epsilon)^2
  \lambda_{max}` (`\epsilon` the dtype's eps; in float32 2.3e-10 `\lambda_{max}` at D = 128,
  6.0e-8 at D = 2,048; in float64 below 1e-24) are raised to it, so that a rank-deficient
  training set gives a finite projection; where that floor is below the dtype's smallest normal
  number (constant descriptors, no variance at all) the eigenvalues are taken as 1 (the
  projection is the PCA rotation). The scale of `\Sigma` and the signs of its eigenvectors do not
  matter after `apply_whitening`'s L2 normalisation. Give L2-normalised descriptors, as the
  literature does. Time O(N D^2 + D^3), memory O(N D + D^2).

  Args:
    descriptors: `[N, D]` floating training descriptors, `N >= 2`, finite (NaN or infinite
      values are a `ValueError` when the descriptors are known; under `jit` they give a NaN
      projection, unless checked with `jaxrank.traced_checks`).
    power: the exponent `p` of the eigenvalues, a real `>= 0` (0: PCA rotation only).
    dim: keep the top `dim` components (`1 <= dim <= D`); `None` keeps all `D`.

  Returns:
    `(mean [D], projection [D, dim])` in at least float32: the whitening `apply_whitening` takes.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(100, 4)) * [4.0, 2.0, 1.0, 0.5]
  >>> mean, projection = learn_whitening(x, dim=2)
  >>> projection.shape
  (4, 2)
  >>> w = (x - mean) @ projection
  >>> np.allclose(w.T @ w / len(x), np.eye(2), atol=1e-4)  # Whitened: identity covariance.
  True
  """
  fn = "learn_whitening"
  x = checks.check_floating(fn, "descriptors", descriptors, ndim=2, layout="[N, D]")
  checks.check_real(fn, "power", power, at_least=0.0, static=True)
  checks.check_positive_int(fn, "dim", dim, allow_none=True)
  n, d = x.shape
  if n < 2:
    raise ValueError(f"{fn}: descriptors need at least 2 rows to learn a covariance, got {n}.")
  if dim is not None and dim > d:
    raise ValueError(f"{fn}: dim {dim} exceeds the descriptors' dimension {d}; give dim <= {d}.")
  x = x.astype(lists.compute_dtype(x.dtype))
  message = f"{fn}: descriptors contain NaN or infinite values; give finite descriptors."
  if checks.known_any(~jnp.isfinite(x), message):
    raise ValueError(message)
  mean = jnp.mean(x, axis=0)
  eigenvalues, eigenvectors = _principal_axes(x - mean)
  eigenvalues, eigenvectors = eigenvalues[:dim], eigenvectors[:, :dim]
  info = jnp.finfo(x.dtype)
  floor = eigenvalues[0] * (d * info.eps) ** 2
  floor = jnp.where(floor >= info.smallest_normal, floor, 1.0)  # No variance: a rotation.
  return mean, eigenvectors * jnp.maximum(eigenvalues, floor) ** -power


def apply_whitening(
  descriptors: jax.typing.ArrayLike, whitening: tuple[jax.Array, jax.Array]
) -> jax.Array:
  """Descriptors whitened by `learn_whitening`'s `(mean, projection)`, then L2-normalised.

  `normalise((x - mean) @ projection)` for each row, as the landmark literature applies a learned
  whitening: a row whitened to zero stays zero (e.g. every row, with a whitening learned on
  constant descriptors). cirtorch's `whitenapply` (`cirtorch/utils/whiten.py`) divides by the
  norm plus 1e-6 instead: the same directions, its norms a hair below 1.

  Args:
    descriptors: `[N, D]` floating descriptors (queries or gallery: both take the same whitening).
    whitening: `(mean [D], projection [D, dim])` from `learn_whitening`.

  Returns:
    `[N, dim]` unit rows, in at least float32.

  >>> import numpy as np
  >>> x = np.random.default_rng(0).normal(size=(50, 3))
  >>> y = apply_whitening(x, learn_whitening(x, dim=2))
  >>> y.shape, bool(np.allclose(np.linalg.norm(y, axis=1), 1.0))
  ((50, 2), True)
  """
  fn = "apply_whitening"
  x = checks.check_floating(fn, "descriptors", descriptors, ndim=2, layout="[N, D]")
  mean, projection = whitening
  if projection.ndim != 2 or projection.shape[0] != x.shape[1] or mean.shape != x.shape[1:]:
    raise ValueError(
      f"{fn}: whitening (mean {mean.shape}, projection {projection.shape}) does not fit "
      f"descriptors {x.shape}; learn it with learn_whitening on descriptors of this dimension."
    )
  x = x.astype(lists.compute_dtype(x.dtype))
  return _unit((x - mean) @ projection)


def _expand(queries, gallery, rows, *, k, alpha, chunk_size):
  """`normalise(q + sum_j max(s_j, 0) ** alpha x_j)` over the top `k` unit gallery rows `x_j` of
  each unit query `q` by cosine `s_j`, chunk by chunk of queries; `rows [Q]`: the gallery row of
  each query to leave out (-1: none)."""
  dtype = lists.compute_dtype(jnp.result_type(queries, gallery))
  queries, gallery = _unit(queries.astype(dtype)), _unit(gallery.astype(dtype))

  def one(args):
    q, row = args
    scores = gallery @ q  # [N]
    scores = jnp.where(jnp.arange(gallery.shape[0]) == row, -jnp.inf, scores)
    top, index = jax.lax.top_k(scores, k)
    weights = jnp.maximum(top, 0) ** alpha
    return _unit(q + weights @ gallery[index])

  return jax.lax.map(one, (queries, rows), batch_size=chunk_size)


def _expansion_inputs(fn, k, alpha, chunk_size, gallery):
  """Checks the hyperparameters of the expansions (`k` at most the rows to choose from)."""
  checks.check_positive_int(fn, "k", k)
  checks.check_real(fn, "alpha", alpha, at_least=0.0, static=True)
  checks.check_positive_int(fn, "chunk_size", chunk_size)
  if k > gallery:
    raise ValueError(f"{fn}: k = {k} exceeds the {gallery} neighbours to choose from.")


def alpha_query_expansion(
  query_embeddings: jax.typing.ArrayLike,
  gallery_embeddings: jax.typing.ArrayLike,
  *,
  k: int = 10,
  alpha: float = 2.0,
  chunk_size: int = 256,
) -> jax.Array:
  r"""Alpha-weighted query expansion (alpha-QE; Radenovic et al. 2018, sec. 5 of "Fine-tuning CNN
  image retrieval with no human annotation").

  .. math::

     q' = \frac{q + \sum_{j \in \mathrm{top}_k(q)} \max(s_j, 0)^\alpha x_j}
     {\| q + \sum_{j \in \mathrm{top}_k(q)} \max(s_j, 0)^\alpha x_j \|}

  with `q` and the gallery rows `x_j` L2-normalised first and `s_j = q^T x_j` their cosine: the
  query keeps weight 1 (its similarity to itself, `1 ** alpha`), as in Revaud et al.'s
  `expand_descriptors` (naver/deep-image-retrieval, `dirtorch/test_dir.py`), which averages the
  query with its weighted neighbours (the mean's `1 / (k + 1)` disappears in the normalisation). A
  neighbour of negative similarity adds nothing (so that any real `alpha` is defined; that code's
  `sim ** alpha` adds it with `alpha = 2`). Defaults `k = 10`, `alpha = 2`: Revaud et al. 2019,
  sec. 4. Ties among neighbours are taken by `jax.lax.top_k` (the lower gallery index first).
  `alpha = 0` is average query expansion. Memory O(chunk_size * N + (Q + N) D), time O(Q N D).

  Args:
    query_embeddings: `[Q, D]` floating descriptors.
    gallery_embeddings: `[N, D]` floating descriptors, `N >= k`.
    k: the neighbours added to each query.
    alpha: the exponent of the weights, a real `>= 0`.
    chunk_size: queries scored at once (`jax.lax.map`'s `batch_size`).

  Returns:
    `[Q, D]` expanded queries, unit rows, in at least float32.

  >>> import numpy as np
  >>> q = np.array([[1.0, 0.0]])
  >>> g = np.array([[0.6, 0.8], [0.0, 1.0], [-1.0, 0.0]])
  >>> np.round(np.asarray(alpha_query_expansion(q, g, k=1, alpha=2.0)), 4)  # q + 0.6**2 g_0.
  array([[0.9731, 0.2305]], dtype=float32)
  """
  fn = "alpha_query_expansion"
  queries = checks.check_floating(fn, "query_embeddings", query_embeddings, ndim=2)
  gallery = checks.check_floating(fn, "gallery_embeddings", gallery_embeddings, ndim=2)
  if queries.shape[1] != gallery.shape[1]:
    raise ValueError(
      f"{fn}: query_embeddings {queries.shape} and gallery_embeddings {gallery.shape} differ "
      "in dimension."
    )
  _expansion_inputs(fn, k, alpha, chunk_size, gallery.shape[0])
  rows = jnp.full(queries.shape[0], -1)
  return _expand(queries, gallery, rows, k=k, alpha=alpha, chunk_size=chunk_size)


def database_augmentation(
  gallery_embeddings: jax.typing.ArrayLike, *, k: int, alpha: float, chunk_size: int = 256
) -> jax.Array:
  r"""Database-side augmentation (alpha-DBA; Radenovic et al. 2018): every gallery item replaced
  by `alpha_query_expansion` of itself against the rest of the gallery.

  Each item keeps weight 1 and adds its top `k` other items (itself left out by index, not by score,
  so a duplicate item counts as a neighbour), weighted `max(s_j, 0) ** alpha`; the result is
  L2-normalised. (deep-image-retrieval's `expand_descriptors` with `db=None` sets the item's
  similarity to itself to 0 instead, so the item itself takes one of the `k` slots, with weight 0,
  where fewer than `k` others have a positive similarity.) Apply it to the gallery, then query (with
  or without alpha-QE) the augmented gallery. Memory O(chunk_size * N + N D), time O(N^2 D): for a
  million-item gallery, the literature computes the neighbours by approximate search instead.

  Args:
    gallery_embeddings: `[N, D]` floating descriptors, `N > k`.
    k: the neighbours added to each item.
    alpha: the exponent of the weights, a real `>= 0`.
    chunk_size: items scored at once (`jax.lax.map`'s `batch_size`).

  Returns:
    `[N, D]` augmented items, unit rows, in at least float32.

  >>> import numpy as np
  >>> g = np.array([[1.0, 0.0], [0.6, 0.8], [-1.0, 0.0]])
  >>> database_augmentation(g, k=1, alpha=2.0)[2]  # Its neighbour g_1 (cosine -0.6) adds nothing.
  Array([-1.,  0.], dtype=float32)
  """
  fn = "database_augmentation"
  gallery = checks.check_floating(fn, "gallery_embeddings", gallery_embeddings, ndim=2)
  _expansion_inputs(fn, k, alpha, chunk_size, gallery.shape[0] - 1)
  rows = jnp.arange(gallery.shape[0])
  return _expand(gallery, gallery, rows, k=k, alpha=alpha, chunk_size=chunk_size)
