"""Tests of `batch_retrieval` and `evaluate_retrieval` against brute force."""

from __future__ import annotations

import contextlib
import functools
import logging
import re

import helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference

import jaxrank
from jaxrank._src import counting
from jaxrank._src import evaluation
from jaxrank._src import platforms
from jaxrank._src import ranking

# ---------------------------------------------------------------------------------------------
# batch_retrieval


def _embeddings(seed, b=6, d=3):
  return np.random.default_rng(seed).standard_normal((b, d)).astype(np.float32)


def _cosine(x, y):
  x = np.asarray(x, np.float64)
  y = np.asarray(y, np.float64)
  x = x / np.linalg.norm(x, axis=1, keepdims=True)
  y = y / np.linalg.norm(y, axis=1, keepdims=True)
  return x @ y.T


def test_integer_labels_give_same_class_relevance_and_exclude_self():
  e = _embeddings(0)
  labels = np.array([0, 1, 0, 2, 1, 0])
  scores, relevance, where = jaxrank.batch_retrieval(e, labels)
  np.testing.assert_allclose(scores, _cosine(e, e), atol=1e-6)
  np.testing.assert_array_equal(relevance, labels[:, None] == labels[None, :])
  assert relevance.dtype == jnp.int32
  np.testing.assert_array_equal(where, ~np.eye(6, dtype=bool))


def test_include_self_keeps_the_query_as_its_own_positive():
  e = _embeddings(1)
  labels = np.array([0, 1, 0, 2, 1, 0])
  scores, relevance, where = jaxrank.batch_retrieval(e, labels, include_self=True)
  assert bool(jnp.all(where))
  np.testing.assert_allclose(jnp.diagonal(scores), 1.0, atol=1e-6)
  np.testing.assert_array_equal(jnp.diagonal(relevance), 1)


def test_multi_hot_labels_count_shared_labels():
  e = _embeddings(2, b=4)
  multi_hot = np.array([[1, 1, 0], [1, 0, 0], [0, 1, 1], [0, 0, 1]], dtype=np.int32)
  _, relevance, _ = jaxrank.batch_retrieval(e, multi_hot)
  np.testing.assert_array_equal(relevance, multi_hot @ multi_hot.T)
  # Boolean multi-hot gives the same integer counts.
  _, relevance_bool, _ = jaxrank.batch_retrieval(e, multi_hot.astype(bool))
  np.testing.assert_array_equal(relevance_bool, multi_hot @ multi_hot.T)


def test_affinity_is_passed_through():
  e = _embeddings(3, b=3)
  affinity = np.array([[3, 1, 0], [1, 3, 2], [0, 2, 3]], dtype=np.float32)
  _, relevance, where = jaxrank.batch_retrieval(e, affinity=affinity)
  np.testing.assert_array_equal(relevance, affinity)
  np.testing.assert_array_equal(where, ~np.eye(3, dtype=bool))


def test_gallery_appends_columns_and_its_mask():
  e, g = _embeddings(4, b=4), _embeddings(5, b=3)
  labels, gallery_labels = np.array([0, 1, 0, 1]), np.array([1, 0, 2])
  gallery_where = np.array([True, False, True])
  scores, relevance, where = jaxrank.batch_retrieval(
    e, labels, gallery_embeddings=g, gallery_labels=gallery_labels, gallery_where=gallery_where
  )
  assert scores.shape == relevance.shape == where.shape == (4, 7)
  np.testing.assert_allclose(scores, _cosine(e, np.concatenate([e, g])), atol=1e-6)
  targets = np.concatenate([labels, gallery_labels])
  np.testing.assert_array_equal(relevance, labels[:, None] == targets[None, :])
  np.testing.assert_array_equal(where[:, :4], ~np.eye(4, dtype=bool))
  np.testing.assert_array_equal(where[:, 4:], np.broadcast_to(gallery_where, (4, 3)))


def test_composes_with_every_list_metric_and_equals_the_reference():
  rng = np.random.default_rng(6)
  e = rng.standard_normal((12, 4)).astype(np.float32)
  labels = rng.integers(0, 3, 12)
  scores, relevance, where = jaxrank.batch_retrieval(e, labels)
  got = jaxrank.ap_metric(scores, relevance, where=where, reduce_fn=None)
  want = reference.per_list(
    reference.ap, np.asarray(scores), np.asarray(relevance), np.asarray(where)
  )
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_binary_codes_keep_exact_ties():
  rng = np.random.default_rng(7)
  codes = np.sign(rng.standard_normal((40, 6))).astype(np.float32)
  scores, _, _ = jaxrank.batch_retrieval(codes, np.zeros(40, np.int32))
  hamming = (6 - codes @ codes.T) / 2
  # Equal Hamming distance <=> bit-identical scores, and scores decrease with the distance.
  same_distance = hamming[:, :, None, None] == hamming[None, None, :, :]
  same_score = np.asarray(scores)[:, :, None, None] == np.asarray(scores)[None, None, :, :]
  np.testing.assert_array_equal(same_distance, same_score)


def test_gradients_are_finite_for_a_zero_embedding_and_flow_through_the_gallery():
  e = jnp.asarray(_embeddings(8, b=4)).at[0].set(0.0)
  g = jnp.asarray(_embeddings(9, b=2))

  def loss(e, g):
    scores, _, where = jaxrank.batch_retrieval(
      e, jnp.array([0, 1, 0, 1]), gallery_embeddings=g, gallery_labels=jnp.array([0, 1])
    )
    return jnp.sum(jnp.where(where, scores, 0) ** 2)

  grad_e, grad_g = jax.grad(loss, argnums=(0, 1))(e, g)
  assert bool(jnp.all(jnp.isfinite(grad_e))) and bool(jnp.all(jnp.isfinite(grad_g)))
  assert float(jnp.abs(grad_g).sum()) > 0
  scores, _, _ = jaxrank.batch_retrieval(e, jnp.array([0, 1, 0, 1]))
  np.testing.assert_array_equal(scores[0], 0.0)


def test_jit_and_bfloat16_inputs():
  e = _embeddings(10)
  labels = np.array([0, 1, 0, 2, 1, 0])
  eager = jaxrank.batch_retrieval(e, labels)
  jitted = jax.jit(jaxrank.batch_retrieval)(e, labels)
  for a, b in zip(eager, jitted):
    np.testing.assert_allclose(a, b, atol=1e-6)
  scores, _, _ = jaxrank.batch_retrieval(jnp.asarray(e, jnp.bfloat16), labels)
  assert scores.dtype == jnp.float32


@pytest.mark.parametrize(
  "kwargs, error, match",
  [
    (
      dict(embeddings=np.ones((4, 2), np.int32), labels=np.zeros(4, np.int32)),
      TypeError,
      "floating",
    ),
    (
      dict(embeddings=np.ones(4, np.float32), labels=np.zeros(4, np.int32)),
      ValueError,
      r"\[B, D\]",
    ),
    (
      dict(embeddings=np.ones((4, 2), np.float32), labels=np.zeros(3, np.int32)),
      ValueError,
      r"\(3,\)",
    ),
    (
      dict(embeddings=np.ones((4, 2), np.float32), labels=np.zeros(4, np.float32)),
      TypeError,
      "integers",
    ),
    (dict(embeddings=np.ones((4, 2), np.float32)), ValueError, "exactly one"),
    (
      dict(embeddings=np.ones((4, 2), np.float32), affinity=np.ones((4, 5), np.float32)),
      ValueError,
      r"\(4, 4\)",
    ),
    (
      dict(
        embeddings=np.ones((4, 2), np.float32),
        labels=np.zeros(4, np.int32),
        gallery_embeddings=np.ones((3, 5), np.float32),
        gallery_labels=np.zeros(3, np.int32),
      ),
      ValueError,
      r"\(3, 5\)",
    ),
    (
      dict(
        embeddings=np.ones((4, 2), np.float32),
        labels=np.zeros(4, np.int32),
        gallery_embeddings=np.ones((3, 2), np.float32),
      ),
      ValueError,
      "gallery_labels",
    ),
    (
      dict(
        embeddings=np.ones((4, 2), np.float32),
        labels=np.zeros(4, np.int32),
        gallery_embeddings=np.ones((3, 2), np.int32),
        gallery_labels=np.zeros(3, np.int32),
      ),
      TypeError,
      "batch_retrieval: gallery_embeddings must be a floating-point array",
    ),
    (
      dict(
        embeddings=np.ones((4, 2), np.float32),
        labels=np.zeros(4, np.int32),
        gallery_embeddings=np.ones((3, 2), np.float32),
        gallery_labels=np.zeros(3, np.int32),
        gallery_where=np.ones(3, np.int32),
      ),
      TypeError,
      "batch_retrieval: gallery_where must be a boolean mask",
    ),
  ],
)
def test_batch_retrieval_errors(kwargs, error, match):
  embeddings = kwargs.pop("embeddings")
  with pytest.raises(error, match=match):
    jaxrank.batch_retrieval(embeddings, **kwargs)


# ---------------------------------------------------------------------------------------------
# evaluate_retrieval against brute force


def _clustered(seed, n, d=8, num_classes=40, noise=1.0):
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, num_classes, n)
  centres = rng.standard_normal((num_classes, d))
  x = centres[labels] + noise * rng.standard_normal((n, d))
  return x.astype(np.float32), labels


def _brute_force(scores, relevance, where, ks):
  """Plain metrics from the numpy reference, one full ranking per query (numpy's sort, ties by
  increasing relevance: the pessimistic order); tie-aware mAP from jaxrank's list-level metric,
  itself tied to a brute-force reference over tie orderings in test_metrics.py."""
  scores, relevance, where = map(np.asarray, (scores, relevance, where))
  values = {f"recall@{k}": [] for k in ks} | {"map@r": [], "map": []}
  for s, y in zip(scores, relevance):
    if not y.any():
      continue
    ranked = list(y[np.lexsort((y, -s))].astype(float))
    for k in ks:
      values[f"recall@{k}"].append(reference.ranking_recall_at_k(ranked, k))
    values["map@r"].append(reference.ranking_map_at_r(ranked))
    values["map"].append(reference.ranking_ap(ranked))
  out = {key: float(np.mean(value)) for key, value in values.items()}
  out["tie_aware_map"] = float(jaxrank.tie_aware_ap_metric(scores, relevance, where=where))
  return out


def _leave_one_out(x):
  """Lists without the query itself (the diagonal), as the brute force expects them."""
  keep = ~np.eye(len(x), dtype=bool)
  return x[keep].reshape(len(x), len(x) - 1)


def _on(platform):
  """The block in which `evaluate_retrieval` takes `platform`'s form (`None`: this machine's)."""
  return platforms.forced_platform(platform) if platform else contextlib.nullcontext()


@pytest.mark.parametrize("platform", [None, *platforms.PLATFORMS])
@pytest.mark.parametrize("n, chunk_size", [(900, 384), (300, 1000)])
def test_evaluate_leave_one_out_equals_brute_force(n, chunk_size, platform):
  """384 queries per chunk, and 300 in a chunk of 1,000 (a chunk of fewer queries)."""
  x, labels = _clustered(0, n, num_classes=n // 6)
  ks = (1, 2, 4, 8, 16)
  with _on(platform):
    got = jaxrank.evaluate_retrieval(x, labels, ks=ks, chunk_size=chunk_size)
  relevance = _leave_one_out(labels[:, None] == labels[None, :])
  scores = _leave_one_out(_cosine(x, x))
  want = _brute_force(scores, relevance, np.ones_like(relevance), ks)
  assert list(got) == [f"recall@{k}" for k in ks] + ["map@r", "map", "tie_aware_map"]
  for key in want:
    assert got[key] == pytest.approx(want[key], abs=1e-5), key


@pytest.mark.parametrize("platform", [None, *platforms.PLATFORMS])
def test_evaluate_with_gallery_equals_brute_force(platform):
  x, labels = _clustered(1, 500)
  queries, gallery = x[:150], x[150:]
  q_labels, g_labels = labels[:150], labels[150:]
  q_labels[:3] = 1000  # Queries without a relevant gallery item are left out.
  with _on(platform):
    got = jaxrank.evaluate_retrieval(queries, q_labels, gallery, g_labels, chunk_size=64)
  relevance = q_labels[:, None] == g_labels[None, :]
  want = _brute_force(_cosine(queries, gallery), relevance, np.ones_like(relevance), (1, 2, 4, 8))
  for key in want:
    assert got[key] == pytest.approx(want[key], abs=1e-5), key


@pytest.mark.parametrize("platform", [None, *platforms.PLATFORMS])
def test_evaluate_on_binary_codes_handles_ties_exactly(platform):
  rng = np.random.default_rng(2)
  labels = rng.integers(0, 8, 300)
  codes = np.sign(rng.standard_normal((8, 10))[labels] + 1.5 * rng.standard_normal((300, 10)))
  codes = codes.astype(np.float32)
  with _on(platform):
    got = jaxrank.evaluate_retrieval(codes, labels, chunk_size=128)
  hamming = (10 - codes.astype(np.float64) @ codes.T.astype(np.float64)) / 2
  relevance = labels[:, None] == labels[None, :]
  want = _brute_force(
    _leave_one_out(-hamming), _leave_one_out(relevance), np.ones((300, 299), bool), (1, 2, 4, 8)
  )
  for key in want:
    assert got[key] == pytest.approx(want[key], abs=1e-5), key
  assert got["tie_aware_map"] > got["map"] + 0.01  # Ties are many, and they matter.


def test_evaluate_memory_does_not_depend_on_the_number_of_queries(caplog):
  """The chunk function is compiled once, for chunks of `chunk_size` rows of the query set (which
  it takes whole, on the device, and reads by rows)."""
  x, labels = _clustered(3, 300)
  jax.clear_caches()
  with jax.log_compiles(True), caplog.at_level(logging.WARNING):
    jaxrank.evaluate_retrieval(x, labels, chunk_size=64)  # 5 chunks, the last one padded.
  messages = [r.getMessage() for r in caplog.records]
  compiled = [m for m in messages if "Compiling jit(_evaluate_chunk)" in m]
  assert len(compiled) == 1, compiled
  assert "float32[300,8]" in compiled[0] and "int32[64]" in compiled[0]  # The set, a chunk.


@pytest.mark.parametrize(
  "args, kwargs, error, match",
  [
    ((np.ones((4, 2), np.float32), np.zeros(3, np.int32)), {}, ValueError, r"\[4\]"),
    ((np.ones((4, 2), np.float32), np.zeros(4, np.float32)), {}, TypeError, "integer"),
    ((np.ones((4, 2), np.int32), np.zeros(4, np.int32)), {}, TypeError, "floating-point"),
    ((np.full((4, 2), np.nan, np.float32), np.zeros(4, np.int32)), {}, ValueError, "NaN"),
    (
      (
        np.ones((4, 2), np.float32),
        np.zeros(4, np.int32),
        np.ones((3, 3), np.float32),
        np.zeros(3, np.int32),
      ),
      {},
      ValueError,
      "dimension",
    ),
    (
      (np.ones((4, 2), np.float32), np.zeros(4, np.int32), np.ones((3, 2), np.float32)),
      {},
      ValueError,
      "gallery_labels",
    ),
    ((np.ones((4, 2), np.float32), np.zeros(4, np.int32)), {"ks": (0,)}, ValueError, "positive"),
    ((np.ones((4, 2), np.float32), np.zeros(4, np.int32)), {"ks": ()}, ValueError, "at least one"),
  ],
)
def test_evaluate_errors(args, kwargs, error, match):
  with pytest.raises(error, match=match):
    jaxrank.evaluate_retrieval(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# Issue 14: one computation of scores, scale invariance, every workflow.


def _collinear(seed, n=60, d=64, duplicates=True):
  """Nearly collinear rows (one direction plus 1e-4 noise), some rows exact duplicates."""
  rng = np.random.default_rng(seed)
  x = (rng.standard_normal(d) + 1e-4 * rng.standard_normal((n, d))).astype(np.float32)
  if duplicates:
    x[n // 2 :: 3] = x[0]
  return x, rng.integers(0, 4, n)


@pytest.mark.parametrize("d", [8, 128, 512])
def test_in_batch_scores_are_symmetric_and_evaluation_equals_the_lists_exactly(d):
  x, labels = _collinear(d, d=d)
  scores, relevance, where = jaxrank.batch_retrieval(x, labels)
  scores = np.asarray(scores)
  np.testing.assert_array_equal(scores, scores.T)
  want = helpers.metrics_of_lists(scores, relevance, where, (1, 2, 4))
  for chunk_size in (1, 16, 60):
    got = jaxrank.evaluate_retrieval(x, labels, ks=(1, 2, 4), chunk_size=chunk_size)
    for key in want:  # Only the float32 mean over queries may round differently.
      assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), (chunk_size, key)
  per_query = jaxrank.evaluate_retrieval(x, labels, ks=(1,), chunk_size=16, reduce_fn=None)
  np.testing.assert_allclose(
    per_query["map"],
    jaxrank.ap_metric(scores, relevance, where=where, reduce_fn=None),
    rtol=1e-6,
    atol=1e-7,
  )


@pytest.mark.parametrize("scale", [2.0**-100, 2.0**-60, 2.0**60, 2.0**100])
def test_cosine_is_scale_invariant(scale):
  x, labels = _clustered(4, 40)
  scores, _, _ = jaxrank.batch_retrieval(x, labels)
  scaled, _, _ = jaxrank.batch_retrieval(x * np.float32(scale), labels)
  np.testing.assert_array_equal(scaled, scores)  # Powers of two: bit-identical.
  assert jaxrank.evaluate_retrieval(x * np.float32(scale), labels) == (
    jaxrank.evaluate_retrieval(x, labels)
  )
  big = x * np.float32(1e30)  # Not a power of two: equal to rounding.
  np.testing.assert_allclose(jaxrank.batch_retrieval(big, labels)[0], scores, atol=3e-7)
  grad = jax.grad(lambda e: jnp.sum(jaxrank.similarity.cosine(e, e)))(jnp.asarray(x * scale))
  want = jax.grad(lambda e: jnp.sum(jaxrank.similarity.cosine(e, e)))(jnp.asarray(x)) / scale
  np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-6 / scale)


def test_non_finite_embeddings_give_nan_lists_not_numbers():
  x, labels = _clustered(5, 12)
  x[3, 1] = np.inf
  scores, relevance, where = jaxrank.batch_retrieval(x, labels)
  assert np.isnan(np.asarray(scores)[3]).all() and np.isnan(np.asarray(scores)[:, 3]).all()
  assert np.isnan(float(jaxrank.ap_metric(scores, relevance, where=where)))
  with pytest.raises(ValueError, match="evaluate_retrieval: query_embeddings contain NaN"):
    jaxrank.evaluate_retrieval(x, labels)
  with pytest.raises(ValueError, match="evaluate_retrieval: query_embeddings overflow float32"):
    jaxrank.evaluate_retrieval(np.full((4, 2), 1e300), np.zeros(4, np.int32))
  # A rule that gives NaN scores gives NaN values, not a number.
  nan_rule = lambda q, g: jaxrank.similarity.cosine(q, g) * jnp.nan  # noqa: E731
  got = jaxrank.evaluate_retrieval(x[4:], labels[4:], similarity_fn=nan_rule)
  assert all(np.isnan(v) for v in got.values())


@pytest.mark.parametrize("platform", [None, *platforms.PLATFORMS])
def test_evaluate_nan_score_makes_its_queries_nan_unless_it_is_left_out(platform):
  """A rule that scores one item NaN makes every query that ranks it NaN, not the query that
  leaves it out (itself): the accelerators count the query's own item and take it out after."""
  x, labels = _clustered(6, 40)
  x[5, 0] = 7.0  # The marked item.
  rule = lambda q, g: jnp.where(g[None, :, 0] == 7.0, jnp.nan, jaxrank.similarity.cosine(q, g))  # noqa: E731
  with _on(platform):
    got = jaxrank.evaluate_retrieval(x, labels, similarity_fn=rule, reduce_fn=None, chunk_size=16)
  counted = got["num_relevant"] > 0
  assert counted[5] and counted.sum() > 1
  for key in ("recall@1", "map@r", "map", "tie_aware_map"):
    assert np.isfinite(got[key][5]), key
    assert np.isnan(got[key][counted & (np.arange(40) != 5)]).all(), key


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_evaluate_takes_half_precision_as_batch_retrieval_does(dtype):
  x, labels = _clustered(6, 50)
  half = jnp.asarray(x, dtype)
  want = helpers.metrics_of_lists(*jaxrank.batch_retrieval(half, labels), (1, 2, 4, 8))
  got = jaxrank.evaluate_retrieval(half, labels, chunk_size=16)
  for key in want:
    assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), key


def test_evaluate_multi_hot_labels_as_batch_retrieval():
  rng = np.random.default_rng(7)
  x = rng.standard_normal((40, 6)).astype(np.float32)
  multi_hot = rng.random((40, 5)) < 0.2
  want = helpers.metrics_of_lists(*jaxrank.batch_retrieval(x, multi_hot), (1, 2))
  got = jaxrank.evaluate_retrieval(x, multi_hot, ks=(1, 2), chunk_size=16)
  for key in want:
    assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), key
  gallery = jaxrank.evaluate_retrieval(x[:10], multi_hot[:10], x[10:], multi_hot[10:], ks=(1,))
  scores = jaxrank.similarity.cosine(x[:10], x[10:])
  relevance = (multi_hot[:10].astype(int) @ multi_hot[10:].T.astype(int)) > 0
  want = helpers.metrics_of_lists(scores, relevance, np.ones_like(relevance), (1,))
  for key in want:
    assert gallery[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), key


def test_per_query_values_and_their_mask():
  x, labels = _clustered(8, 30)
  labels[:2] = [1000, 1001]  # Two queries without a relevant item.
  per_query = jaxrank.evaluate_retrieval(x, labels, ks=(1,), reduce_fn=None)
  mean = jaxrank.evaluate_retrieval(x, labels, ks=(1,))
  assert per_query["num_relevant"].shape == (30,) and list(per_query["num_relevant"][:2]) == [0, 0]
  counted = per_query["num_relevant"] > 0
  for key, value in mean.items():
    assert per_query[key].shape == (30,) and per_query[key][0] == 0.0
    assert value == pytest.approx(per_query[key][counted].mean(), abs=1e-12)
  total = jaxrank.evaluate_retrieval(x, labels, ks=(1,), reduce_fn=np.sum)
  assert total["map"] == pytest.approx(per_query["map"].sum(), abs=1e-9)


@pytest.mark.parametrize(
  "args, match",
  [
    ((np.ones((0, 2), np.float32), np.zeros(0, np.int32)), "query_embeddings are empty"),
    (
      (
        np.ones((3, 2), np.float32),
        np.zeros(3, np.int32),
        np.ones((0, 2), np.float32),
        np.zeros(0, np.int32),
      ),
      "gallery_embeddings are empty",
    ),
    (
      (
        np.ones((3, 2), np.float32),
        np.zeros(3, np.int32),
        np.ones((2, 2), np.float32),
        np.zeros(3, np.int32),
      ),
      r"evaluate_retrieval: gallery_labels",
    ),
    (
      (
        np.ones((3, 2), np.float32),
        np.zeros((3, 2), np.int32),
        np.ones((2, 2), np.float32),
        np.zeros(2, np.int32),
      ),
      "does not match",
    ),
  ],
)
def test_evaluate_rejects_empty_and_mismatched_sets(args, match):
  with pytest.raises(ValueError, match=match):
    jaxrank.evaluate_retrieval(*args)


# ---------------------------------------------------------------------------------------------
# Issue 14: affinity relevance in evaluate_retrieval, as in batch_retrieval.


def _per_query_lists(scores, relevance, where, ks):
  """Per-query values of the list metrics, as evaluate_retrieval(reduce_fn=None) names them."""
  values = _per_query_lists_jit(scores, relevance, where, ks)
  return {key: np.asarray(value, np.float64) for key, value in values.items()}


@functools.partial(jax.jit, static_argnames="ks")
def _per_query_lists_jit(scores, relevance, where, ks):
  """One jitted program: compiled once, it costs a fraction of the list metrics' eager ops."""
  kwargs = dict(where=where, reduce_fn=None)
  out = {f"recall@{k}": jaxrank.recall_at_k_metric(scores, relevance, topn=k, **kwargs) for k in ks}
  out["map@r"] = jaxrank.map_at_r_metric(scores, relevance, **kwargs)
  out["map"] = jaxrank.ap_metric(scores, relevance, **kwargs)
  out["tie_aware_map"] = jaxrank.tie_aware_ap_metric(scores, relevance, **kwargs)
  return out


def _graded_affinity(rng, q, n):
  """Grades around the threshold 1: 0.5 and negative values are not relevant, 1, 2, 3 are."""
  return rng.choice(np.array([-1.0, 0.0, 0.5, 1.0, 2.0, 3.0], np.float32), size=(q, n))


def _assert_per_query_equal(got, want, num_relevant):
  np.testing.assert_array_equal(got["num_relevant"], num_relevant)
  assert set(got) == set(want) | {"num_relevant"}
  for key in want:
    np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-7, err_msg=key)


def test_evaluate_affinity_without_gallery_equals_the_lists_of_batch_retrieval():
  rng = np.random.default_rng(11)
  x = rng.standard_normal((30, 6)).astype(np.float32)
  affinity = _graded_affinity(rng, 30, 30)
  affinity[3] = np.where(np.arange(30) == 3, 5.0, 0.0)  # Relevant only to itself: left out.
  scores, relevance, where = jax.jit(jaxrank.batch_retrieval)(x, affinity=affinity)
  want = _per_query_lists(scores, relevance, where, (1, 4))
  num_relevant = ((affinity >= 1) & ~np.eye(30, dtype=bool)).sum(axis=1)
  assert num_relevant[3] == 0 and num_relevant.min() == 0 < num_relevant.max()
  for chunk_size in (7, 30):  # Five chunks, the last one padded; one chunk.
    got = jaxrank.evaluate_retrieval(
      x, affinity=affinity, ks=(1, 4), chunk_size=chunk_size, reduce_fn=None
    )
    _assert_per_query_equal(got, want, num_relevant)
  # The mean over the queries with a relevant item; a JAX array is taken as well.
  mean = jaxrank.evaluate_retrieval(x, affinity=jnp.asarray(affinity), ks=(1, 4), chunk_size=7)
  for key, value in want.items():
    assert mean[key] == pytest.approx(np.mean(value[num_relevant > 0]), rel=1e-6), key
  # The diagonal is not read: another value there, NaN included, changes nothing.
  np.fill_diagonal(affinity, np.nan)
  assert jaxrank.evaluate_retrieval(x, affinity=affinity, ks=(1, 4), chunk_size=7) == mean


def test_evaluate_affinity_with_gallery_equals_the_lists_of_batch_retrieval(tmp_path):
  rng = np.random.default_rng(12)
  q, g = rng.standard_normal((12, 5)).astype(np.float32), rng.standard_normal((25, 5))
  g = g.astype(np.float32)
  affinity = _graded_affinity(rng, 12, 12 + 25) >= 1  # Boolean relevance.
  affinity[0, 12:] = False  # A query without a relevant gallery item is left out.
  scores, relevance, where = jax.jit(jaxrank.batch_retrieval)(
    q, affinity=affinity, gallery_embeddings=g
  )
  where = np.asarray(where).copy()
  where[:, :12] = False  # The gallery alone, as evaluate_retrieval ranks it.
  want = _per_query_lists(scores, relevance, where, (1, 2))
  # A memmap stays on disk: evaluate_retrieval reads one block of rows per chunk.
  stored = np.lib.format.open_memmap(tmp_path / "affinity.npy", "w+", bool, (12, 25))
  stored[:] = affinity[:, 12:]
  for given in (affinity[:, 12:], stored):
    got = jaxrank.evaluate_retrieval(
      q, gallery_embeddings=g, affinity=given, ks=(1, 2), chunk_size=5, reduce_fn=None
    )
    _assert_per_query_equal(got, want, affinity[:, 12:].sum(axis=1))


@pytest.mark.parametrize("gallery", [False, True])
def test_evaluate_label_equality_affinity_equals_the_labels(gallery):
  x, labels = _clustered(13, 40, num_classes=6)
  if gallery:
    want = jaxrank.evaluate_retrieval(
      x[:15], labels[:15], x[15:], labels[15:], ks=(1, 2), chunk_size=8, reduce_fn=None
    )
    got = jaxrank.evaluate_retrieval(
      x[:15],
      gallery_embeddings=x[15:],
      affinity=labels[:15, None] == labels[None, 15:],
      ks=(1, 2),
      chunk_size=8,
      reduce_fn=None,
    )
  else:
    want = jaxrank.evaluate_retrieval(x, labels, ks=(1, 2), chunk_size=8, reduce_fn=None)
    affinity = (labels[:, None] == labels[None, :]).astype(np.int32)
    got = jaxrank.evaluate_retrieval(x, affinity=affinity, ks=(1, 2), chunk_size=8, reduce_fn=None)
  assert list(got) == list(want)
  for key in want:
    np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_evaluate_shared_label_counts_as_affinity_equal_the_multi_hot_labels():
  x = np.random.default_rng(14).standard_normal((40, 6)).astype(np.float32)
  multi_hot = np.random.default_rng(14).random((40, 4)) < 0.3
  want = jaxrank.evaluate_retrieval(x, multi_hot, ks=(1,), chunk_size=8, reduce_fn=None)
  shared = multi_hot.astype(np.int32) @ multi_hot.T.astype(np.int32)  # Graded: 0, 1, 2, ...
  got = jaxrank.evaluate_retrieval(x, affinity=shared, ks=(1,), chunk_size=8, reduce_fn=None)
  for key in want:
    np.testing.assert_array_equal(got[key], want[key], err_msg=key)


_X4, _G3 = np.ones((4, 2), np.float32), np.ones((3, 2), np.float32)


@pytest.mark.parametrize(
  "args, kwargs, error, match",
  [
    ((_X4, np.zeros(4, np.int32)), {"affinity": np.ones((4, 4))}, ValueError, "not both"),
    (
      (_X4, None, _G3, np.zeros(3, np.int32)),
      {"affinity": np.ones((4, 3))},
      ValueError,
      "evaluate_retrieval: give either labels",
    ),
    ((_X4,), {}, ValueError, r"evaluate_retrieval: give query_labels .* or affinity="),
    ((_X4, None, _G3), {}, ValueError, r"evaluate_retrieval: give query_labels"),
    (
      (_X4,),
      {"affinity": np.ones((4, 3))},
      ValueError,
      r"\[Q, Q\] = \[4, 4\], got shape \(4, 3\)",
    ),
    ((_X4, None, _G3), {"affinity": np.ones((4, 4))}, ValueError, r"\[Q, N\] = \[4, 3\]"),
    ((_X4,), {"affinity": np.ones(4)}, ValueError, "evaluate_retrieval: affinity must be sha"),
    ((_X4,), {"affinity": np.full((4, 4), "1")}, TypeError, "numeric or boolean"),
    (
      (_X4,),
      {"affinity": np.where(np.eye(4, k=1, dtype=bool), np.nan, 1.0)},
      ValueError,
      r"evaluate_retrieval: affinity contains NaN \(first at \[0, 1\]\)",
    ),
  ],
)
def test_evaluate_affinity_errors(args, kwargs, error, match):
  with pytest.raises(error, match=match):
    jaxrank.evaluate_retrieval(*args, **kwargs)


_MESH = jax.make_mesh((1,), ("batch",), devices=jax.devices()[:1])


@pytest.mark.parametrize(
  "args, kwargs, error, match",
  [
    ((_X4, np.arange(4)), {"mesh": jax.devices()}, TypeError, "mesh must be a jax.sharding"),
    (
      (_X4, np.eye(4, dtype=np.int32)),
      {"mesh": _MESH},
      ValueError,
      r"with mesh=, relevance must come from integer class labels",
    ),
    ((_X4,), {"affinity": np.ones((4, 4)), "mesh": _MESH}, ValueError, "one process only"),
  ],
)
def test_evaluate_mesh_errors(args, kwargs, error, match):
  with pytest.raises(error, match=match):
    jaxrank.evaluate_retrieval(*args, **kwargs)


def test_evaluate_on_a_one_device_mesh_equals_no_mesh():
  # The mesh path on one device; 2 processes x 2 devices in tests/multiprocess/.
  rng = np.random.default_rng(11)
  e = rng.integers(-1, 2, (9, 3)).astype(np.float32)
  labels = np.append(rng.integers(0, 3, 8), 5)
  want = jaxrank.evaluate_retrieval(e, labels, chunk_size=4, reduce_fn=None)
  got = jaxrank.evaluate_retrieval(e, labels, chunk_size=4, reduce_fn=None, mesh=_MESH)
  assert sorted(got) == sorted(want)
  for key in want:
    np.testing.assert_array_equal(got[key], want[key])


# ---------------------------------------------------------------------------------------------
# Large classes: the counts come from sorts beyond counting.COMPARE_UP_TO relevant items.


def _large_classes(seed, n=240, bits=8):
  """Binary codes of 3 classes of about n / 3 items (far beyond COMPARE_UP_TO, with ties), and a
  class of 2 items."""
  rng = np.random.default_rng(seed)
  labels = np.append(rng.integers(0, 3, n - 2), [7, 7])
  codes = np.sign(rng.standard_normal((8, bits))[labels] + 1.2 * rng.standard_normal((n, bits)))
  return codes.astype(np.float32), labels


@pytest.mark.parametrize("branch", [None, *ranking.DESCENDING_RANKS_BRANCHES])
def test_evaluate_large_classes_equal_brute_force_on_every_counting_path(branch):
  codes, labels = _large_classes(0)
  assert np.bincount(labels).max() > counting.COMPARE_UP_TO
  hamming = jaxrank.similarity.hamming
  with ranking.descending_ranks_branch(branch) if branch else contextlib.nullcontext():
    got = jaxrank.evaluate_retrieval(codes, labels, chunk_size=64, similarity_fn=hamming)
    per_query = jaxrank.evaluate_retrieval(
      codes, labels, chunk_size=64, similarity_fn=hamming, reduce_fn=None
    )
  scores, relevance, where = jaxrank.batch_retrieval(codes, labels, similarity_fn=hamming)
  want = _brute_force(
    _leave_one_out(np.asarray(scores)),
    _leave_one_out(np.asarray(relevance)),
    np.ones((len(codes), len(codes) - 1), bool),
    (1, 2, 4, 8),
  )
  for key in want:
    assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), key
  np.testing.assert_allclose(
    per_query["tie_aware_map"],
    jaxrank.tie_aware_ap_metric(scores, relevance, where=where, reduce_fn=None),
    rtol=1e-6,
  )
  assert got["tie_aware_map"] > got["map"] + 0.01  # Ties are many, and they matter.


def test_evaluate_large_classes_by_affinity_and_on_a_mesh_equal_the_labels():
  codes, labels = _large_classes(1)
  hamming = jaxrank.similarity.hamming
  want = jaxrank.evaluate_retrieval(codes, labels, similarity_fn=hamming, reduce_fn=None)
  affinity = (labels[:, None] == labels[None, :]).astype(np.float32)
  by_affinity = jaxrank.evaluate_retrieval(
    codes, affinity=affinity, similarity_fn=hamming, reduce_fn=None, chunk_size=100
  )
  on_mesh = jaxrank.evaluate_retrieval(
    codes, labels, similarity_fn=hamming, reduce_fn=None, mesh=_MESH, chunk_size=100
  )
  for key in want:
    np.testing.assert_array_equal(on_mesh[key], want[key])
    np.testing.assert_allclose(by_affinity[key], want[key], rtol=1e-6, atol=1e-7)


def test_evaluate_memory_does_not_grow_with_the_size_of_the_classes():
  """The compiled chunk holds O(chunk N) temporaries with classes of N / 2 items: no
  `[chunk, R, R]` comparison (which needed 8 GB here before) nor a `[chunk, N, R]` one."""
  rng = np.random.default_rng(0)
  n, chunk = 4096, 64
  x = rng.standard_normal((n, 8)).astype(np.float32)
  labels = rng.integers(0, 2, n)
  relevance = evaluation._ClassRelevance(labels, labels, leave_one_out=True)
  self_ids, index, ok = relevance(np.arange(chunk, dtype=np.int32))
  assert index.shape == (chunk, np.bincount(labels).max())
  prepared = evaluation._prepare_items(jaxrank.similarity.cosine, jnp.asarray(x), x.dtype)
  for branch in ("numpy", "xla"):
    with ranking.descending_ranks_branch(branch):
      compiled = evaluation._evaluate_chunk.lower(
        x[:chunk],
        np.arange(chunk, dtype=np.int32),
        self_ids,
        index,
        ok,
        prepared,
        ks=(1,),
        similarity_fn=jaxrank.similarity.cosine,
        branch=branch,
      ).compile()
    temporaries = compiled.memory_analysis().temp_size_in_bytes
    assert temporaries < 16 * chunk * n * 4, (branch, temporaries)


@pytest.mark.parametrize("num_relevant", [11, counting.COMPARE_UP_TO + 8])
def test_evaluate_chunk_for_accelerators_holds_no_callback_nor_sort_of_the_lists(num_relevant):
  """The accelerators' chunk (forced here on the CPU): no host callback whatever `R`; up to
  `counting.COMPARE_UP_TO` relevant items no loop and no sort of the `[c, N]` scores (one fused
  comparison; only the `[c, R]` thresholds are sorted), beyond one sort of each list."""
  rng = np.random.default_rng(0)
  n, chunk = 3000, 64
  x = rng.standard_normal((n, 8)).astype(np.float32)
  prepared = evaluation._prepare_items(jaxrank.similarity.cosine, jnp.asarray(x), x.dtype)
  index = rng.integers(0, n, (chunk, num_relevant)).astype(np.int32)
  rows = np.arange(chunk, dtype=np.int32)
  args = (x[:chunk], rows, rows, index, np.ones(index.shape, bool), prepared)
  texts = {}
  for platform in platforms.PLATFORMS:
    with platforms.forced_platform(platform):
      texts[platform] = (
        evaluation._evaluate_chunk.lower(
          *args, ks=(1,), similarity_fn=jaxrank.similarity.cosine, branch=ranking.forced_branch()
        )
        .compile()
        .as_text()
      )
  # A custom call to a callback target (the text's metadata also names this test).
  callback = re.compile(r'custom_call_target="[^"]*callback[^"]*"')
  text = texts[platforms.ACCELERATOR]
  assert not callback.search(text)
  sorts_of_lists = [line for line in text.splitlines() if " sort(" in line and f",{n}]" in line]
  if num_relevant <= counting.COMPARE_UP_TO:
    assert not sorts_of_lists and " while(" not in text
  else:
    assert sorts_of_lists
    assert callback.search(texts[platforms.CPU])  # The CPU sorts in numpy, through the host.


class _NumpyWithoutJaxArrays:
  """numpy, except that `asarray` of a `jax.Array` (a copy to the host) raises."""

  def __getattr__(self, name):
    return getattr(np, name)

  @staticmethod
  def asarray(x, *args, **kwargs):
    if isinstance(x, jax.Array):
      raise AssertionError(f"a jax.Array {x.shape} copied to the host")
    return np.asarray(x, *args, **kwargs)


def test_evaluate_keeps_jax_arrays_on_their_device(monkeypatch):
  """Embeddings given as `jax.Array`s are checked and scored where they lie, never converted to
  numpy arrays (a GPU's embeddings went to the host and back), with the same metrics as from
  numpy arrays; non-finite ones are still a `ValueError`. (JAX's transfer guard does not see a
  CPU array read by numpy: the module's numpy is watched instead.)"""
  x, labels = _clustered(7, 200)
  queries, gallery = jnp.asarray(x[:60]), jnp.asarray(x[60:])
  with monkeypatch.context() as patched:
    patched.setattr(evaluation, "np", _NumpyWithoutJaxArrays())
    alone = jaxrank.evaluate_retrieval(jnp.asarray(x), labels, chunk_size=64)
    both = jaxrank.evaluate_retrieval(
      queries, labels[:60], gallery.astype(jnp.bfloat16), labels[60:], chunk_size=64
    )
  assert alone == jaxrank.evaluate_retrieval(x, labels, chunk_size=64)
  want = jaxrank.evaluate_retrieval(
    x[:60], labels[:60], np.asarray(gallery.astype(jnp.bfloat16)), labels[60:], chunk_size=64
  )
  assert both == want
  with pytest.raises(ValueError, match="gallery_embeddings contain NaN"):
    jaxrank.evaluate_retrieval(queries, labels[:60], gallery.at[3, 1].set(jnp.inf), labels[60:])


def test_evaluate_retrieval_under_x64():
  """With `jax_enable_x64` (in a process of its own: the flag is global), the CPU's comparing
  loop kept its counts int32 and `evaluate_retrieval` gives the float32 run's metrics (it raised
  a TypeError on every input: int32 and int64 tiles)."""
  import os
  import subprocess
  import sys

  script = (
    "import json, jax, numpy as np, jaxrank\n"
    "rng = np.random.default_rng(0)\n"
    "e, y = rng.normal(size=(40, 8)).astype(np.float32), rng.integers(0, 5, 40)\n"
    "before = jaxrank.evaluate_retrieval(e, y)\n"
    "jax.config.update('jax_enable_x64', True)\n"
    "after = [jaxrank.evaluate_retrieval(x, y) for x in (e, e.astype(np.float64))]\n"
    "print(json.dumps([before, *after]))\n"
  )
  env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
  done = subprocess.run(
    [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
  )
  assert done.returncode == 0, done.stderr[-3000:]
  import json

  before, *after = json.loads(done.stdout)
  for metrics in after:
    assert metrics.keys() == before.keys()
    for key in before:
      assert metrics[key] == pytest.approx(before[key], abs=1e-6), key


def test_evaluate_default_chunk_follows_the_platform(monkeypatch):
  """Without `chunk_size`, 1,024 queries per chunk on CPU and 4,096 on GPUs and TPUs (read from
  `mesh`'s devices, else JAX's default device); the default is what the evaluation uses."""
  import types

  def mesh_of(platform):
    return types.SimpleNamespace(devices=np.array([types.SimpleNamespace(platform=platform)]))

  assert evaluation.default_chunk_size() == 1024  # This machine's CPU.
  assert evaluation.default_chunk_size(mesh_of("cpu")) == 1024
  assert evaluation.default_chunk_size(mesh_of("gpu")) == 4096
  assert evaluation.default_chunk_size(mesh_of("tpu")) == 4096
  # Halved for large galleries: at most 2**28 scores a chunk.
  assert evaluation.default_chunk_size(mesh_of("gpu"), 60_502) == 4096
  assert evaluation.default_chunk_size(mesh_of("gpu"), 2**16 + 1) == 2048
  assert evaluation.default_chunk_size(mesh_of("gpu"), 2**20) == 256
  assert evaluation.default_chunk_size(mesh_of("cpu"), 2**20) == 256
  assert evaluation.default_chunk_size(mesh_of("cpu"), 2**40) == 2
  x = np.random.default_rng(0).standard_normal((40, 8)).astype(np.float32)
  labels = np.arange(40) % 7
  chunks = []
  real_chunks = evaluation._chunks
  monkeypatch.setattr(evaluation, "_chunks", lambda q, c: chunks.append(c) or real_chunks(q, c))
  monkeypatch.setitem(evaluation.DEFAULT_CHUNKS, "cpu", 16)
  got = jaxrank.evaluate_retrieval(x, labels, ks=(1,))
  assert chunks and set(chunks) == {16}
  assert got == jaxrank.evaluate_retrieval(x, labels, ks=(1,), chunk_size=16)
  with pytest.raises(ValueError, match="chunk_size"):
    jaxrank.evaluate_retrieval(x, labels, chunk_size=0)
