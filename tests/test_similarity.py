"""Tests of the scoring rules (`jaxrank.similarity`) and of `similarity_fn` in the retrieval
functions, against float64 numpy."""

from __future__ import annotations

import functools

import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import test_util as jtu

import jaxrank
from jaxrank import similarity
from jaxrank._src import platforms
from jaxrank._src import similarity as similarity_src


def _reference(name, q, x):
  q, x = np.asarray(q, np.float64), np.asarray(x, np.float64)
  if name == "cosine":
    return (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (
      x / np.linalg.norm(x, axis=1, keepdims=True)
    ).T
  if name == "dot_product":
    return q @ x.T
  if name == "negative_squared_euclidean":
    return -np.sum((q[:, None, :] - x[None, :, :]) ** 2, axis=-1)
  if name == "hamming":
    b = q.shape[1]
    distances = np.sum(np.sign(q)[:, None, :] != np.sign(x)[None, :, :], axis=-1)
    return 1 - 2 * distances / b
  raise ValueError(name)


RULES = ["cosine", "dot_product", "negative_squared_euclidean"]


@pytest.mark.parametrize("platform", platforms.PLATFORMS)
@pytest.mark.parametrize("name", RULES)
def test_rules_equal_their_definition(name, platform):
  rng = np.random.default_rng(0)
  q = rng.standard_normal((5, 7)).astype(np.float32)
  x = rng.standard_normal((9, 7)).astype(np.float32)
  with platforms.forced_platform(platform):
    got = getattr(similarity, name)(q, x)
  assert got.shape == (5, 9) and got.dtype == jnp.float32
  np.testing.assert_allclose(got, _reference(name, q, x), rtol=1e-5, atol=1e-5)


def test_hamming_of_binary_codes_is_exactly_one_minus_two_d_over_b():
  rng = np.random.default_rng(1)
  codes = np.sign(rng.standard_normal((12, 16))).astype(np.float32)
  got = np.asarray(similarity.hamming(codes, codes))
  np.testing.assert_array_equal(got, _reference("hamming", codes, codes).astype(np.float32))
  # Integer +-1 codes give the same floats.
  np.testing.assert_array_equal(similarity.hamming(codes.astype(np.int32), codes), got)


def test_hamming_of_relaxed_codes_is_one_minus_two_relaxed_distances_over_b():
  rng = np.random.default_rng(2)
  codes = np.tanh(3 * rng.standard_normal((6, 8))).astype(np.float32)
  d = jaxrank.hashing.relaxed_hamming_distance(codes, codes)
  np.testing.assert_allclose(similarity.hamming(codes, codes), 1 - 2 * d / 8, atol=1e-6)


def test_negative_squared_euclidean_is_zero_on_the_diagonal_and_never_positive():
  x = np.random.default_rng(3).standard_normal((20, 5)).astype(np.float32) * 100
  s = np.asarray(similarity.negative_squared_euclidean(x, x))
  assert np.all(s <= 0)
  np.testing.assert_allclose(np.diag(s), 0, atol=1e-1)


@pytest.mark.parametrize("platform", platforms.PLATFORMS)
def test_cosine_never_leaves_the_closed_interval(platform):
  """Rounding puts some rows' cosines with themselves, or with their negations, an ulp outside
  [-1, 1] (1.0000001); `cosine` clips them, since what reads cosine scores assumes the range (the
  histogram losses bin [-1, 1], FastAP's distance `2 - 2 s` is never negative). Removing the clip
  fails this test on both forms (checked by planting it, 2026-11-29). Also through
  `batch_retrieval`, with each row's own score kept (`include_self=True`)."""
  rng = np.random.default_rng(7)
  e = rng.standard_normal((48, 37)).astype(np.float32)
  rows = np.concatenate([e, -e, 3.0 * e])
  labels = np.arange(len(rows)) % len(e)
  with platforms.forced_platform(platform):
    scores = np.asarray(similarity.cosine(rows, rows))
    in_batch, _, _ = jaxrank.batch_retrieval(rows, labels, include_self=True)
  for s in (scores, np.asarray(in_batch)):
    assert s.max() <= 1.0 and s.min() >= -1.0, (s.max() - 1, s.min() + 1)
  np.testing.assert_allclose(np.diag(scores), 1.0, atol=1e-6)


def test_bfloat16_inputs_are_scored_in_float32():
  x = jnp.ones((3, 4), jnp.bfloat16)
  for name in RULES + ["hamming"]:
    assert getattr(similarity, name)(x, x).dtype == jnp.float32, name


@pytest.mark.parametrize("name", RULES + ["hamming"])
def test_batch_retrieval_scores_with_the_given_rule(name):
  rng = np.random.default_rng(4)
  e = np.sign(rng.standard_normal((6, 8))).astype(np.float32)
  g = np.sign(rng.standard_normal((3, 8))).astype(np.float32)
  labels, g_labels = np.array([0, 1, 0, 2, 1, 0]), np.array([1, 2, 0])
  fn = getattr(similarity, name)
  scores, relevance, where = jaxrank.batch_retrieval(
    e, labels, gallery_embeddings=g, gallery_labels=g_labels, similarity_fn=fn
  )
  np.testing.assert_allclose(
    scores, _reference(name, e, np.concatenate([e, g])), rtol=1e-6, atol=1e-6
  )
  want_scores, want_relevance, want_where = jaxrank.batch_retrieval(
    e, labels, gallery_embeddings=g, gallery_labels=g_labels
  )
  np.testing.assert_array_equal(relevance, want_relevance)
  np.testing.assert_array_equal(where, want_where)
  # A rule is a plain function: under jit, and with gradients.
  jitted = jax.jit(lambda e: jaxrank.batch_retrieval(e, labels, similarity_fn=fn)[0])
  np.testing.assert_array_equal(jitted(e), jaxrank.batch_retrieval(e, labels, similarity_fn=fn)[0])


def test_any_function_of_the_signature_is_a_rule():
  e = np.random.default_rng(5).standard_normal((4, 3)).astype(np.float32)
  scores, _, _ = jaxrank.batch_retrieval(
    e, np.array([0, 0, 1, 1]), similarity_fn=lambda q, x: -jnp.abs(q @ x.T)
  )
  np.testing.assert_allclose(scores, -np.abs(e @ e.T), rtol=1e-6)


@pytest.mark.parametrize("name", RULES + ["hamming"])
def test_evaluate_retrieval_with_a_rule_equals_the_list_metrics_on_batch_retrieval(name):
  rng = np.random.default_rng(6)
  labels = rng.integers(0, 6, 60)
  x = rng.standard_normal((6, 10))[labels] + rng.standard_normal((60, 10))
  if name == "hamming":
    x = np.sign(x)  # Binary codes: many exact ties.
  x = x.astype(np.float32)
  fn = getattr(similarity, name)
  ks = (1, 2, 4)
  got = jaxrank.evaluate_retrieval(x, labels, ks=ks, chunk_size=16, similarity_fn=fn)
  want = helpers.metrics_of_lists(*jaxrank.batch_retrieval(x, labels, similarity_fn=fn), ks)
  for key in want:
    assert got[key] == pytest.approx(want[key], abs=1e-6), key


def test_evaluate_retrieval_with_a_gallery_and_a_rule():
  rng = np.random.default_rng(7)
  labels = rng.integers(0, 5, 50)
  x = (rng.standard_normal((5, 6))[labels] + rng.standard_normal((50, 6))).astype(np.float32)
  fn = similarity.negative_squared_euclidean
  got = jaxrank.evaluate_retrieval(
    x[:20], labels[:20], x[20:], labels[20:], ks=(1,), similarity_fn=fn
  )
  scores = fn(x[:20], x[20:])
  relevance = labels[:20, None] == labels[None, 20:]
  want = helpers.metrics_of_lists(scores, relevance, np.ones_like(relevance), (1,))
  for key in want:
    assert got[key] == pytest.approx(want[key], abs=1e-6), key


@pytest.mark.parametrize("name", RULES + ["hamming"])
def test_a_score_does_not_depend_on_the_other_rows_nor_on_jit(name):
  """The property `evaluate_retrieval` rests on (see `jaxrank.similarity`): bit-identical scores
  for a query whatever the other query rows (two or more), eager or compiled, and a symmetric
  matrix for a set against itself."""
  rng = np.random.default_rng(8)
  x = (rng.standard_normal(24) + 1e-4 * rng.standard_normal((70, 24))).astype(np.float32)
  fn = getattr(similarity, name)
  full = np.asarray(fn(x, x))
  np.testing.assert_array_equal(full, full.T)
  jitted = jax.jit(fn)
  for begin, end in [(0, 2), (5, 21), (30, 70)]:
    np.testing.assert_array_equal(jitted(x[begin:end], x), full[begin:end])
    np.testing.assert_array_equal(fn(x[begin:end], x), full[begin:end])


@pytest.mark.parametrize("name", RULES + ["hamming"])
def test_a_score_does_not_depend_on_the_number_of_items_nor_where_they_start(name):
  """Every entry comes from a product over `ITEM_BLOCK` (1,024) item rows, so a gallery split
  anywhere (across devices or processes) scores each pair bit for bit as the whole gallery does.

  Whether a plain product changes entries' last bits with the item count depends on the CPU's
  matrix kernels: it did on the machines the blocks were written on (a third to nine tenths of
  the entries at D = 512), and does not on others of the same kind (AMD EPYC, 2 cores, jax
  0.10.2, seen 2026-11-25), so it is not asserted here; the blocks guarantee it either way."""
  rng = np.random.default_rng(3)
  n = 2 * similarity_src.ITEM_BLOCK + 300
  x = (rng.standard_normal(64) + 1e-3 * rng.standard_normal((n, 64))).astype(np.float32)
  fn = jax.jit(getattr(similarity, name))
  queries = x[:6]
  full = np.asarray(fn(queries, x))
  for begin, end in [(0, 7), (5, 1029), (1000, 2048), (17, n), (n - 1100, n)]:
    np.testing.assert_array_equal(fn(queries, x[begin:end]), full[:, begin:end])


@pytest.mark.parametrize("platform", platforms.PLATFORMS)
def test_the_derivative_of_a_blocked_product_is_the_plain_products(platform):
  """The scores are blocked (on a CPU), their derivative is not (`jax.custom_jvp`): both equal the
  definition to rounding, in float64, forward and reverse, across several blocks; and so do the
  accelerators' form, one product."""
  rng = np.random.default_rng(4)
  with jax.enable_x64(True), platforms.forced_platform(platform):
    queries = jnp.asarray(rng.standard_normal((3, 5)))
    items = jnp.asarray(rng.standard_normal((similarity_src.ITEM_BLOCK + 9, 5)))
    for name in RULES + ["hamming"]:
      fn = getattr(similarity, name)
      np.testing.assert_allclose(
        fn(queries, items), _definition(name, queries, items), rtol=1e-12, atol=1e-12
      )
      sines = lambda rule: jax.jit(jax.grad(lambda q, i: jnp.sum(jnp.sin(rule(q, i))), (0, 1)))
      got = sines(fn)(queries, items)
      want = sines(functools.partial(_definition, name))(queries, items)
      for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)
    # Forward mode too (the jvp rule itself), against finite differences.
    jtu.check_grads(similarity.dot_product, (queries, items), order=1, modes=["fwd"], eps=1e-6)


def test_the_cosine_of_a_one_hot_row_has_the_whole_derivative():
  """A row whose one nonzero entry is a power of two scales to squares of exactly 1/4, the floor
  that keeps a zero row finite: its derivative is cosine's own (the floor, a tie there, once
  passed only half of the norm's derivative), and a zero row's stays finite."""
  with jax.enable_x64(True):
    items = jnp.asarray([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    for row in ([2.0, 0.0, 0.0], [0.0, -0.25, 0.0], [1.3, 0.2, 0.1]):
      queries = jnp.asarray([row])
      got = jax.grad(lambda q: jnp.sum(jnp.sin(similarity.cosine(q, items))))(queries)
      want = jax.grad(lambda q: jnp.sum(jnp.sin(_definition("cosine", q, items))))(queries)
      np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    zero = jax.grad(lambda q: jnp.sum(similarity.cosine(q, items)))(jnp.zeros((1, 3)))
    assert np.isfinite(zero).all()


def _definition(name, q, x):
  """The rules in plain jax.numpy, differentiable: the relaxed Hamming rule for `hamming`."""
  if name == "cosine":
    return (q / jnp.linalg.norm(q, axis=1, keepdims=True)) @ (
      x / jnp.linalg.norm(x, axis=1, keepdims=True)
    ).T
  if name == "dot_product":
    return q @ x.T
  if name == "negative_squared_euclidean":
    return -jnp.sum((q[:, None, :] - x[None, :, :]) ** 2, axis=-1)
  return q @ x.T / q.shape[1]


@pytest.mark.parametrize("name", RULES + ["hamming"])
def test_the_accelerators_form_equals_the_cpus_to_rounding(name):
  """The accelerators' one product against the CPU's blocks, in float32 past one block, with a
  zero row, scaled rows and a gallery in `batch_retrieval`, values and gradients."""
  rng = np.random.default_rng(12)
  n = similarity_src.ITEM_BLOCK + 37
  x = rng.standard_normal((n, 16)).astype(np.float32)
  x[3] = 0
  x[4] *= np.float32(2.0**90)
  x[5] *= np.float32(2.0**-90)
  if name == "negative_squared_euclidean":
    x[4:6] = rng.standard_normal((2, 16))
  fn = getattr(similarity, name)
  labels = rng.integers(0, 50, n)
  step = lambda e: jnp.sum(
    jnp.tanh(
      jaxrank.batch_retrieval(
        e[:40], labels[:40], gallery_embeddings=e[40:], gallery_labels=labels[40:], similarity_fn=fn
      )[0]
    )
  )
  got = {}
  for form in platforms.PLATFORMS:
    with platforms.forced_platform(form):
      got[form] = (fn(x[:40], x), jax.jit(jax.value_and_grad(step))(x))
  scale = 1 if name != "negative_squared_euclidean" else 100
  (scores, (value, grad)) = got["cpu"]
  (scores_acc, (value_acc, grad_acc)) = got["accelerator"]
  for a, b in ((scores, scores_acc), (value, value_acc)):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5 * scale)
  # A gradient row is a sum of terms as large as its largest entries: a small entry left by
  # their cancellation differs by the rounding of those terms, which depends on the order the
  # compiler sums them in (without LLVM's optimisations, `make test`, another order).
  row_scale = np.maximum(np.abs(np.asarray(grad_acc)).max(axis=-1, keepdims=True), 1)
  grad, grad_acc = np.asarray(grad), np.asarray(grad_acc)
  error = np.abs(grad - grad_acc) - 2e-5 * np.abs(grad_acc)
  assert np.all(error <= 2e-5 * scale * row_scale), np.max(error / (scale * row_scale))
