"""Whitening, alpha-QE and database-side augmentation against direct numpy readings of their
definitions (`jaxrank._src.postprocessing`)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn import decomposition

import jaxrank

RNG = np.random.default_rng(0)
X = RNG.normal(size=(40, 5)) * np.array([3.0, 2.0, 1.0, 0.5, 0.25])  # Training descriptors.
Q = RNG.normal(size=(6, 5))
G = RNG.normal(size=(20, 5))


def _unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _numpy_whitening(x, power, dim):
  """PCA whitening read from its definition: eigenvalues decreasing, `V Lambda^-power`."""
  mean = x.mean(axis=0)
  values, vectors = np.linalg.eigh(np.cov(x - mean, rowvar=False, bias=True))
  order = np.argsort(-values)[:dim]
  return mean, vectors[:, order] * values[order] ** -power


def _numpy_expansion(q, g, k, alpha, leave_out=None):
  """Each unit query plus the weighted sum of its top `k` unit gallery rows, normalised."""
  q, g = _unit(q), _unit(g)
  out = []
  for i, row in enumerate(q):
    s = g @ row
    candidates = [j for j in np.argsort(-s, kind="stable") if leave_out is None or j != i]
    new = row + sum(max(s[j], 0.0) ** alpha * g[j] for j in candidates[:k])
    out.append(new / np.linalg.norm(new))
  return np.array(out)


@pytest.mark.parametrize("power, dim", [(0.5, None), (0.25, 3)])
def test_whitening_equals_its_definition(power, dim):
  mean, projection = jaxrank.learn_whitening(X, power=power, dim=dim)
  want_mean, want_projection = _numpy_whitening(X, power, dim)
  np.testing.assert_allclose(mean, want_mean, rtol=1e-5, atol=1e-5)
  # Eigenvectors up to sign: compare the whitened descriptors' cosines.
  got = np.asarray(jaxrank.apply_whitening(Q, (mean, projection)))
  want = _unit((Q - want_mean) @ want_projection)
  np.testing.assert_allclose(got @ got.T, want @ want.T, atol=1e-5)
  np.testing.assert_allclose(np.abs(got), np.abs(want), atol=1e-5)
  if power == 0.5:  # Full whitening: the training set's covariance becomes the identity.
    w = (X - mean) @ np.asarray(projection, np.float64)
    np.testing.assert_allclose(w.T @ w / len(X), np.eye(5), atol=1e-4)


def test_whitening_is_jittable_and_finite_on_rank_deficient_data():
  learn = jax.jit(functools.partial(jaxrank.learn_whitening, power=0.5, dim=4))
  low_rank = X[:, :2] @ RNG.normal(size=(2, 5))
  mean, projection = learn(low_rank)
  assert projection.shape == (5, 4) and np.all(np.isfinite(projection))
  y = jax.jit(jaxrank.apply_whitening)(Q, (mean, projection))
  np.testing.assert_allclose(np.linalg.norm(y, axis=1), 1.0, rtol=1e-5)


def _cirtorch_pcawhitenlearn(x):
  """A transcription of cirtorch's `pcawhitenlearn` (filipradenovic/cnnimageretrieval-pytorch,
  `cirtorch/utils/whiten.py` at 1e66a417afa2247edde6d35f3a9a2a465778a3a8): `x [D, N]`, one
  descriptor per column; the covariance over N, symmetrised, `np.linalg.eig`, eigenvalues sorted
  decreasing, `P = diag(eigval) ** -1/2 @ eigvec.T`. Returns `(m [D, 1], P [D, D])`."""
  n = x.shape[1]
  m = x.mean(axis=1, keepdims=True)
  xc = x - m
  cov = xc @ xc.T
  cov = (cov + cov.T) / (2 * n)
  eigval, eigvec = np.linalg.eig(cov)
  order = eigval.argsort()[::-1]
  eigval, eigvec = eigval[order], eigvec[:, order]
  return m, np.linalg.inv(np.sqrt(np.diag(eigval))) @ eigvec.T


def _cirtorch_whitenapply(x, m, p, dimensions=None):
  """A transcription of cirtorch's `whitenapply` (same file): `x [D, N]` columns, the first
  `dimensions` rows of `P`, each column divided by its norm plus 1e-6."""
  dimensions = dimensions or p.shape[0]
  y = p[:dimensions, :] @ (x - m)
  return y / (np.linalg.norm(y, ord=2, axis=0, keepdims=True) + 1e-6)


def _steep(seed, n, d=128, smallest=1e-7):
  """float32 `[n, d]` descriptors whose covariance has eigenvalues from 1 down to `smallest`,
  geometrically spaced, in a random basis, around a random mean."""
  rng = np.random.default_rng(seed)
  basis = np.linalg.qr(rng.normal(size=(d, d)))[0]
  spectrum = np.logspace(0, np.log10(smallest), d)
  x = (rng.normal(size=(n, d)) * np.sqrt(spectrum)) @ basis.T + rng.normal(size=d) * 0.1
  return x.astype(np.float32)


def test_whitening_of_a_steep_spectrum_equals_cirtorch_and_scikit_learn():
  # Eigenvalues down to 1e-7 of the largest: a float32 covariance cannot resolve them.
  x = _steep(0, 2000)
  x, held_out = x[:1500], x[1500:]
  x64, h64 = x.astype(np.float64), held_out.astype(np.float64)
  whitening = jaxrank.learn_whitening(x)
  assert whitening[1].dtype == np.float32
  mean, projection = (np.asarray(a, np.float64) for a in whitening)
  w = (x64 - mean) @ projection
  np.testing.assert_allclose(w.T @ w / len(x), np.eye(128), atol=2e-3)  # Identity covariance.
  centred = jnp.asarray(x - x.mean(axis=0))  # A float32 covariance's eigh (jaxrank before).
  values, vectors = (np.asarray(a, np.float64) for a in jnp.linalg.eigh(centred.T @ centred))
  w32 = (x64 - mean) @ (vectors / np.sqrt(np.maximum(values / len(x), 1e-30)))
  assert np.abs(w32.T @ w32 / len(x) - np.eye(128)).max() > 0.1
  # cirtorch's whitening of the held-out descriptors: the same cosines between them.
  got = np.asarray(jaxrank.apply_whitening(held_out, whitening), np.float64)
  m, p = _cirtorch_pcawhitenlearn(x64.T)
  want = _cirtorch_whitenapply(h64.T, m, np.real(p)).T
  np.testing.assert_allclose(got @ got.T, want @ want.T, atol=1e-4)
  # scikit-learn's PCA: whitened (power 0.5), and its components over eigenvalues ** 0.25.
  for power, dim in [(0.5, None), (0.25, 64)]:
    pca = decomposition.PCA(n_components=dim, whiten=power == 0.5).fit(x64)
    want = pca.transform(h64)
    want = _unit(want if power == 0.5 else want / pca.explained_variance_**power)
    learned = jaxrank.learn_whitening(x, power=power, dim=dim)
    got = np.asarray(jaxrank.apply_whitening(held_out, learned), np.float64)
    np.testing.assert_allclose(got @ got.T, want @ want.T, atol=1e-4, err_msg=f"power {power}")


def test_non_finite_descriptors_are_refused_and_constant_ones_give_zero_rows():
  bad = X.copy()
  bad[3, 1] = np.nan
  with pytest.raises(ValueError, match="learn_whitening: descriptors contain NaN or infinite"):
    jaxrank.learn_whitening(bad)
  with pytest.raises(ValueError, match="learn_whitening: descriptors contain NaN or infinite"):
    jaxrank.learn_whitening(np.where(bad > 0, np.inf, 0.0))
  constant = np.full((10, 5), 0.5, np.float32)
  whitening = jaxrank.learn_whitening(constant)
  assert np.all(np.isfinite(whitening[1]))
  np.testing.assert_array_equal(jaxrank.apply_whitening(constant, whitening), 0.0)
  others = np.asarray(jaxrank.apply_whitening(Q, whitening))
  np.testing.assert_allclose(np.linalg.norm(others, axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("k, alpha", [(3, 2.0), (5, 0.5)])
def test_alpha_query_expansion_equals_its_definition(k, alpha):
  got = jaxrank.alpha_query_expansion(Q, G, k=k, alpha=alpha, chunk_size=4)
  np.testing.assert_allclose(got, _numpy_expansion(Q, G, k, alpha), rtol=1e-5, atol=1e-6)


def test_database_augmentation_leaves_each_item_out_of_its_neighbours():
  got = jaxrank.database_augmentation(G, k=3, alpha=2.0, chunk_size=8)
  np.testing.assert_allclose(got, _numpy_expansion(G, G, 3, 2.0, leave_out=True), atol=1e-6)


def test_bad_arguments_are_errors_naming_the_function():
  with pytest.raises(ValueError, match="learn_whitening: dim 6 exceeds"):
    jaxrank.learn_whitening(X, dim=6)
  with pytest.raises(ValueError, match="apply_whitening: whitening .* does not fit"):
    jaxrank.apply_whitening(Q[:, :4], jaxrank.learn_whitening(X))
  with pytest.raises(ValueError, match="alpha_query_expansion: k = 21 exceeds"):
    jaxrank.alpha_query_expansion(Q, G, k=21)
  with pytest.raises(ValueError, match="database_augmentation: k = 20 exceeds the 19"):
    jaxrank.database_augmentation(G, k=20, alpha=2.0)
  with pytest.raises(ValueError, match="alpha_query_expansion: alpha"):
    jaxrank.alpha_query_expansion(Q, G, alpha=-1.0)
