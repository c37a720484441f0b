"""Whitening, alpha-QE and database-side augmentation against direct numpy readings of their
definitions (`jaxrank._src.postprocessing`)."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

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
