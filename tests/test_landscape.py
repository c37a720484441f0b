"""jaxrank.landscape against brute force: Python loops over the points, scipy's rank correlations,
hand-computed finite differences, loops over batches; and one compilation per shape."""

from __future__ import annotations

import logging
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import jaxrank
from jaxrank import landscape


def _ap_loss(s, y):
  return 1 - jaxrank.ap_metric(s, y, reduce_fn=None)


def _tree():
  k1, k2 = jax.random.split(jax.random.key(0))
  return {
    "conv": {"kernel": jax.random.normal(k1, (3, 3, 2, 4)), "bias": jnp.arange(4.0)},
    "dense": {"kernel": jax.random.normal(k2, (5, 3))},
    "step": jnp.array(7, jnp.int32),
  }


def _tree_fn(p, t):
  return (
    jnp.sum(jnp.sin(p["conv"]["kernel"]) * t)
    + jnp.sum(p["conv"]["bias"] ** 2)
    + jnp.sum(jnp.tanh(p["dense"]["kernel"]))
    + p["step"]
  )


def _move(x, ds, cs):
  return jax.tree.map(
    lambda leaf, *d: (
      leaf + sum(c * di for c, di in zip(cs, d))
      if jnp.issubdtype(leaf.dtype, jnp.floating)
      else leaf
    ),
    x,
    *ds,
  )


# Slices.


@pytest.mark.parametrize("batch_size", [None, 1, 3, 128])
def test_slice_1d_equals_a_loop(batch_size):
  x = _tree()
  d = landscape.random_direction(jax.random.key(1), x)
  alphas = jnp.linspace(-1.0, 2.0, 7)
  got = landscape.slice_1d(_tree_fn, x, d, alphas, args=(0.5,), batch_size=batch_size)
  want = [float(_tree_fn(_move(x, (d,), (a,)), 0.5)) for a in alphas]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  assert int(d["step"]) == 0  # the integer leaf does not move


@pytest.mark.parametrize("batch_size", [None, 5])
def test_slice_2d_equals_a_loop(batch_size):
  x = _tree()
  d1 = landscape.random_direction(jax.random.key(1), x)
  d2 = landscape.filter_normalized_direction(jax.random.key(2), x)
  alphas, betas = jnp.linspace(-1.0, 1.0, 4), jnp.linspace(0.0, 0.5, 3)
  got = landscape.slice_2d(_tree_fn, x, (d1, d2), alphas, betas, args=(2.0,), batch_size=batch_size)
  assert got.shape == (4, 3)
  want = [[float(_tree_fn(_move(x, (d1, d2), (a, b)), 2.0)) for b in betas] for a in alphas]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_slice_of_list_valued_function():
  # fn may return one value per list: the grid axes come first.
  scores = jax.random.normal(jax.random.key(0), (3, 10))
  labels = (jax.random.uniform(jax.random.key(1), (3, 10)) < 0.4).astype(jnp.int32)
  d = jax.random.normal(jax.random.key(2), (3, 10))
  eps = jnp.array([0.0, 0.1, 1.0])
  got = landscape.slice_1d(_ap_loss, scores, d, eps, args=(labels,))
  assert got.shape == (3, 3)
  for i, e in enumerate(eps):
    np.testing.assert_allclose(got[i], _ap_loss(scores + e * d, labels), atol=1e-6)


def test_direction_between_interpolates():
  a, b = _tree(), jax.tree.map(lambda v: v * 2 + 1, _tree())
  d = landscape.direction_between(a, b)
  got = landscape.slice_1d(_tree_fn, a, d, jnp.array([0.0, 1.0]), args=(1.0,))
  np.testing.assert_allclose(
    got, [_tree_fn(a, 1.0), _tree_fn(_move(a, (d,), (1.0,)), 1.0)], rtol=1e-6
  )
  np.testing.assert_allclose(d["dense"]["kernel"], b["dense"]["kernel"] - a["dense"]["kernel"])


def test_slice_2d_is_jittable():
  directions = (jnp.eye(2)[0], jnp.eye(2)[1])
  f = jax.jit(lambda y0, a: landscape.slice_2d(lambda y: jnp.sum(y**2), y0, directions, a, a))
  np.testing.assert_allclose(f(jnp.zeros(2), jnp.array([1.0, 2.0])), [[2.0, 5.0], [5.0, 8.0]])


# Filter normalisation (Li et al. 2018).


def test_filter_normalize_per_output_filter():
  params = _tree()
  params["dense"]["kernel"] = params["dense"]["kernel"].at[:, 1].set(0.0)  # a zero filter
  d = landscape.random_direction(jax.random.key(3), params)
  d["conv"]["kernel"] = d["conv"]["kernel"].at[..., 2].set(0.0)  # a zero direction filter
  out = landscape.filter_normalize(d, params)
  for name in ("conv", "dense"):
    p, dd, o = (np.asarray(t[name]["kernel"], np.float64) for t in (params, d, out))
    axes = tuple(range(p.ndim - 1))
    for j in range(p.shape[-1]):  # each filter: the direction's, rescaled to the parameters' norm
      pn, dn = np.linalg.norm(p[..., j]), np.linalg.norm(dd[..., j])
      want = dd[..., j] * (pn / dn) if dn > 0 else np.zeros_like(dd[..., j])
      np.testing.assert_allclose(o[..., j], want, rtol=1e-5, atol=1e-7)
    del axes
  assert not np.any(out["conv"]["kernel"][..., 2])
  assert not np.any(out["dense"]["kernel"][:, 1])
  assert not np.any(out["conv"]["bias"])  # biases (and norm parameters) do not move
  assert int(out["step"]) == 0


def test_filter_normalized_direction_norms():
  params = {
    "kernel": jax.random.normal(jax.random.key(0), (6, 4)) * jnp.arange(1.0, 5.0),
    "scale": jnp.ones(4),
  }
  d = landscape.filter_normalized_direction(jax.random.key(1), params)
  np.testing.assert_allclose(
    jnp.linalg.norm(d["kernel"], axis=0), jnp.linalg.norm(params["kernel"], axis=0), rtol=1e-5
  )
  assert not np.any(d["scale"])


def test_directions_compile_one_program_per_structure(caplog):
  """Eagerly, each leaf's operations would compile on their own: a network's tens of leaves made
  tens of programs. One program for the structure and shapes; a new key or new values reuse it."""
  params = _tree()
  moved = jax.tree.map(lambda p: p * 2 if jnp.issubdtype(p.dtype, jnp.floating) else p, params)
  keys = [jax.random.key(i) for i in range(3)]
  jax.clear_caches()
  with jax.log_compiles(True), caplog.at_level(logging.WARNING):
    d1 = landscape.filter_normalized_direction(keys[0], params)
    d2 = landscape.filter_normalized_direction(keys[1], moved)
    landscape.random_direction(keys[2], params)
  compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
  names = [m.split("Compiling ")[1].split(" ")[0] for m in compiled]
  assert sorted(names) == ["jit(_filter_normalized_direction)", "jit(_random_direction)"], compiled
  eager = landscape.filter_normalize(landscape.random_direction(keys[0], params), params)
  for got, want in zip(jax.tree.leaves(d1), jax.tree.leaves(eager)):
    np.testing.assert_allclose(got, want, rtol=1e-6)
  for name in ("conv", "dense"):  # new values in the same program (the biases' are zeros in both)
    assert not np.array_equal(d1[name]["kernel"], d2[name]["kernel"])


def test_filter_normalized_direction_on_an_nnx_model():
  nnx = pytest.importorskip("flax.nnx")
  model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
  params = nnx.state(model, nnx.Param)
  d = landscape.filter_normalized_direction(jax.random.key(0), params)
  np.testing.assert_allclose(
    jnp.linalg.norm(d["kernel"][...], axis=0),
    jnp.linalg.norm(params["kernel"][...], axis=0),
    rtol=1e-5,
  )
  graphdef = nnx.graphdef(model)
  f = lambda p, x: jnp.sum(nnx.merge(graphdef, p)(x))
  x = jnp.ones((1, 3))
  got = landscape.slice_1d(f, params, d, jnp.array([0.0, 1.0]), args=(x,))
  np.testing.assert_allclose(got[0], f(params, x), rtol=1e-6)


# Rank correlations, against scipy, with ties.


@pytest.mark.parametrize("n,values", [(30, None), (40, 4), (7, 2), (200, 10)])
def test_rank_correlations_equal_scipy(n, values):
  rng = np.random.default_rng(n)
  x, y = rng.normal(size=(5, n)), rng.normal(size=(5, n))
  y = x + 1.5 * y
  if values:  # heavy ties
    x, y = np.round(x * values / 3), np.round(y * values / 3)
  with jax.enable_x64(True):
    rho = landscape.spearman_correlation(x, y)
    tau = landscape.kendall_correlation(x, y, batch_size=3)
  for i in range(5):
    tol = dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rho[i], stats.spearmanr(x[i], y[i]).statistic, **tol)
    np.testing.assert_allclose(tau[i], stats.kendalltau(x[i], y[i]).statistic, **tol)


def test_rank_correlations_of_constant_input_are_zero():
  x = jnp.arange(5.0)
  assert float(landscape.spearman_correlation(x, jnp.ones(5))) == 0.0
  assert float(landscape.kendall_correlation(jnp.ones(5), x)) == 0.0


# Surrogate tracking.


def test_surrogate_tracking_equals_a_loop():
  rng = np.random.default_rng(0)
  scores = jnp.asarray(rng.uniform(-0.5, 0.5, 12), jnp.float32)
  labels = jnp.asarray(rng.random(12) < 0.4, jnp.int32)
  loss = lambda s, y, t: jaxrank.smoothap_loss(s, y, temperature=t)
  exact = lambda s, y: 1 - jaxrank.ap_metric(s, y)
  key, num = jax.random.key(4), 40
  scale = jnp.linspace(0.05, 0.5, num)
  out = landscape.surrogate_tracking(
    loss,
    exact,
    scores,
    key,
    scale=scale,
    num_points=num,
    loss_args=(labels, 0.05),
    reference_args=(labels,),
    batch_size=7,
  )
  keys = jax.random.split(key, num)
  pts = [scores + s * landscape.random_direction(k, scores) for k, s in zip(keys, scale)]
  want_loss = np.array([float(loss(p, labels, 0.05)) for p in pts])
  want_ref = np.array([float(exact(p, labels)) for p in pts])
  np.testing.assert_allclose(out["loss"], want_loss, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out["reference"], want_ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(
    out["spearman"], stats.spearmanr(want_loss, want_ref).statistic, atol=1e-4
  )
  np.testing.assert_allclose(
    out["kendall"], stats.kendalltau(want_loss, want_ref).statistic, atol=1e-4
  )
  np.testing.assert_allclose(out["error"], np.mean(np.abs(want_loss - want_ref)), atol=1e-6)
  np.testing.assert_allclose(out["bias"], np.mean(want_loss - want_ref), atol=1e-6)
  assert out["spearman"] > 0.8


def test_surrogate_tracking_of_several_surrogates_equals_one_call_each():
  """A pytree of surrogates: the same points for all, each one's statistics as its own call's."""
  rng = np.random.default_rng(1)
  scores = jnp.asarray(rng.uniform(-0.5, 0.5, (3, 10)), jnp.float32)
  labels = jnp.asarray(rng.random((3, 10)) < 0.4, jnp.int32)
  smooth = lambda s, y: jaxrank.smoothap_loss(s, y, temperature=0.05)
  fast = lambda s, y: jaxrank.fastap_loss(s, y)
  several = lambda s, y: {"smoothap": smooth(s, y), "pair": (fast(s, y), 2 * fast(s, y))}
  exact = lambda s, y: 1 - jaxrank.ap_metric(s, y)
  common = dict(scale=jnp.linspace(0.0, 0.5, 16), num_points=16, reference_args=(labels,))
  key = jax.random.key(2)
  out = landscape.surrogate_tracking(several, exact, scores, key, loss_args=(labels,), **common)
  assert set(out) == {"smoothap", "pair"} and len(out["pair"]) == 2
  doubled = lambda s, y: 2 * fast(s, y)
  for got, fn in [(out["smoothap"], smooth), (out["pair"][0], fast), (out["pair"][1], doubled)]:
    want = landscape.surrogate_tracking(fn, exact, scores, key, loss_args=(labels,), **common)
    assert set(got) == set(want)
    for name in want:
      np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-7, err_msg=name)
  # The pair's members differ by a factor of 2: the same order, so the same correlations.
  assert float(out["pair"][1]["spearman"]) == pytest.approx(float(out["pair"][0]["spearman"]))


@pytest.mark.parametrize(
  "loss_fn, reference_fn, match",
  [
    (lambda s: s, lambda s: jnp.sum(s), "loss_fn must return a scalar or a pytree of scalars"),
    (lambda s: {"a": jnp.sum(s), "b": s}, jnp.sum, r"got a value of shape \(4,\)"),
    (jnp.sum, lambda s: s, r"reference_fn must return a scalar, got shape \(4,\)"),
  ],
)
def test_surrogate_tracking_refuses_values_that_are_not_scalars(loss_fn, reference_fn, match):
  with pytest.raises(ValueError, match=match):
    landscape.surrogate_tracking(
      loss_fn, reference_fn, jnp.arange(4.0), jax.random.key(0), scale=0.1, num_points=3
    )


def test_surrogate_tracking_keeps_float64_values():
  """The docstring's "float32 or wider": float64 losses are not rounded to float32."""
  with jax.enable_x64(True):
    x = jnp.linspace(0.0, 1.0, 5, dtype=jnp.float64)
    out = landscape.surrogate_tracking(
      lambda s: jnp.sum(s**2), jnp.sum, x, jax.random.key(0), scale=1e-9, num_points=3
    )
    assert out["loss"].dtype == jnp.float64 and out["reference"].dtype == jnp.float64
    # A perturbation of 1e-9 is lost in float32 (the points would all be equal there).
    assert len(np.unique(np.asarray(out["reference"]))) == 3


def test_surrogate_tracking_with_filter_normalized_directions():
  x = _tree()
  out = landscape.surrogate_tracking(
    _tree_fn,
    _tree_fn,
    x,
    jax.random.key(0),
    scale=0.1,
    num_points=8,
    loss_args=(1.0,),
    reference_args=(1.0,),
    direction_fn=landscape.filter_normalized_direction,
  )
  assert float(out["spearman"]) == pytest.approx(1.0) and float(out["error"]) == 0.0


# Gradient quality.


def _finite_difference_loop(reference_fn, scores, labels, h):
  reference_fn = jax.jit(reference_fn)  # One compilation for the loop's 2 n calls.
  s = np.asarray(scores, np.float64)
  g = np.zeros_like(s)
  for i in range(s.shape[-1]):
    up, down = s.copy(), s.copy()
    up[..., i] += h
    down[..., i] -= h
    g[..., i] = (np.asarray(reference_fn(up, labels)) - np.asarray(reference_fn(down, labels))) / (
      2 * h
    )
  return g


@pytest.fixture
def global_x64():
  """float64 on every thread: the blackbox's host callback may run on one of XLA's threads, where
  the thread-local `jax.enable_x64(True)` of the test does not hold, and JAX then canonicalizes
  its float64 ranks to float32 and refuses them ("Incorrect output dtype"; seen once in CI)."""
  previous = jax.config.read("jax_enable_x64")
  jax.config.update("jax_enable_x64", True)
  try:
    yield
  finally:
    jax.config.update("jax_enable_x64", previous)


@pytest.mark.parametrize(
  "loss",
  [
    lambda s, y: jaxrank.smoothap_loss(s, y, reduce_fn=None),
    # No true gradient (blackbox):
    lambda s, y: jaxrank.blackbox_ap_loss(s, y, interpolation=1.0, reduce_fn=None),
    lambda s, y: jaxrank.fastap_loss(s, y, reduce_fn=None),
  ],
  ids=["smoothap", "blackbox", "fastap"],
)
def test_gradient_cosine_equals_hand_computed(loss, global_x64):
  rng = np.random.default_rng(1)
  with jax.enable_x64(True):
    scores = jnp.asarray(rng.uniform(-1, 1, (4, 15)))
    labels = jnp.asarray(rng.random((4, 15)) < 0.4, jnp.int32).at[:, 0].set(1)
    h = 0.1
    out = landscape.gradient_cosine(
      loss, _ap_loss, scores, step=h, loss_args=(labels,), reference_args=(labels,), batch_size=4
    )
    grad = np.asarray(jax.grad(lambda s: jnp.sum(loss(s, labels)))(scores))
    fd = _finite_difference_loop(_ap_loss, scores, labels, h)
  np.testing.assert_allclose(out["finite_difference"], fd, atol=1e-9)
  np.testing.assert_allclose(out["gradient"], grad, atol=1e-12)
  cos = np.sum(grad * fd, -1) / (np.linalg.norm(grad, axis=-1) * np.linalg.norm(fd, axis=-1))
  np.testing.assert_allclose(out["cosine"], cos, atol=1e-9)
  assert np.all(out["defined"])
  np.testing.assert_allclose(out["mean_cosine"], cos.mean(), atol=1e-9)
  overall = np.sum(grad * fd) / (np.linalg.norm(grad) * np.linalg.norm(fd))
  np.testing.assert_allclose(out["overall_cosine"], overall, atol=1e-9)


def test_gradient_cosine_where_and_undefined_lists():
  scores = jnp.array([[0.3, 0.2, 0.1, 0.0], [0.3, 0.2, 0.1, 0.0]])
  labels = jnp.array([[0, 1, 0, 1], [1, 1, 1, 1]])  # all relevant in the second: AP is always 1
  where = jnp.array([[True, True, True, False], [True] * 4])
  loss = lambda s, y, w: jaxrank.smoothap_loss(s, y, where=w, reduce_fn=None)
  exact = lambda s, y, w: 1 - jaxrank.ap_metric(s, y, where=w, reduce_fn=None)
  out = landscape.gradient_cosine(
    loss,
    exact,
    scores,
    step=0.01,
    loss_args=(labels, where),
    reference_args=(labels, where),
    where=where,
  )
  assert out["defined"].tolist() == [False, False]  # at h = 0.01 no item crosses another
  out = landscape.gradient_cosine(
    loss,
    exact,
    scores,
    step=0.15,
    loss_args=(labels, where),
    reference_args=(labels, where),
    where=where,
  )
  assert out["defined"].tolist() == [True, False] and float(out["cosine"][1]) == 0.0
  assert float(out["gradient"][0, 3]) == 0.0 and float(out["finite_difference"][0, 3]) == 0.0
  assert float(out["mean_cosine"]) == pytest.approx(float(out["cosine"][0]))


def test_descent_directions():
  scores = jax.random.normal(jax.random.key(0), (3, 9))
  labels = (jnp.arange(9) % 3 == 0).astype(jnp.int32)
  where = jnp.ones((3, 9), bool).at[0, 4].set(False)
  loss = lambda s, y, w: jaxrank.smoothap_loss(s, y, where=w, reduce_fn=None)
  d = landscape.descent_directions(loss, scores, args=(labels, where), where=where)
  g = -np.asarray(jax.grad(lambda s: jnp.sum(loss(s, labels, where)))(scores))
  g[0, 4] = 0
  np.testing.assert_allclose(d, g / np.linalg.norm(g, axis=-1, keepdims=True), rtol=1e-5, atol=1e-7)


# Decomposability gap.


def test_batch_gap_equals_decomposability_gap():
  rng = np.random.default_rng(2)
  scores = jnp.asarray(rng.normal(size=(6, 24)), jnp.float32)
  labels = np.zeros((6, 24), np.int32)
  labels[:, ::3] = 1  # a relevant item in every batch of every list
  k = 4
  batches = jnp.arange(24).reshape(k, -1)
  out = landscape.batch_gap(
    lambda d: jaxrank.ap_metric(*d, reduce_fn=None), (scores, jnp.asarray(labels)), batches, axis=-1
  )
  want = jaxrank.decomposability_gap(scores, labels, num_batches=k, reduce_fn=None)
  np.testing.assert_allclose(out["gap"], want, atol=1e-6)
  assert out["batch_values"].shape == (k, 6)


def _in_batch_map(data):
  emb, lab = data
  scores, relevance, where = jaxrank.batch_retrieval(emb, lab)
  return jaxrank.ap_metric(scores, relevance, where=where)


@pytest.mark.parametrize("batch_size", [None, 2])
def test_batch_gap_of_embeddings_equals_a_loop(batch_size):
  rng = np.random.default_rng(3)
  emb = jnp.asarray(rng.normal(size=(30, 4)), jnp.float32)
  lab = jnp.asarray(rng.integers(0, 3, 30), jnp.int32)
  batches = jax.random.permutation(jax.random.key(0), 30).reshape(5, 6)
  out = landscape.batch_gap(_in_batch_map, (emb, lab), batches, batch_size=batch_size)
  in_batch_map = jax.jit(_in_batch_map)  # The loop's reference, compiled once per shape.
  values = [float(in_batch_map((emb[b], lab[b]))) for b in np.asarray(batches)]
  whole = float(in_batch_map((emb, lab)))
  np.testing.assert_allclose(out["batch_values"], values, atol=1e-6)
  np.testing.assert_allclose(out["whole"], whole, atol=1e-6)
  np.testing.assert_allclose(out["gap"], np.mean(values) - whole, atol=1e-6)
  # The whole set's mAP is evaluate_retrieval's leave-one-out mAP.
  np.testing.assert_allclose(whole, jaxrank.evaluate_retrieval(emb, lab)["map"], atol=1e-5)


# One compilation per shape: a counter incremented each time a function is traced.


class _Counted:
  def __init__(self, fn):
    self.fn, self.traces = fn, 0

  def __call__(self, *a):
    self.traces += 1
    return self.fn(*a)


def test_new_hyperparameter_values_do_not_recompile():
  rng = np.random.default_rng(5)
  scores = jnp.asarray(rng.uniform(-0.5, 0.5, (2, 10)), jnp.float32)
  labels = jnp.asarray(rng.random((2, 10)) < 0.4, jnp.int32)
  u, v = jnp.asarray(rng.normal(size=(2, 2, 10)), jnp.float32)
  loss = _Counted(lambda s, y, t: jaxrank.smoothap_loss(s, y, temperature=t, reduce_fn=None))
  exact = _Counted(_ap_loss)
  grid = jnp.linspace(-0.5, 0.5, 5)
  for t in (0.01, 0.05, 0.2):
    landscape.slice_2d(loss, scores, (u, v), grid * t * 10, grid, args=(labels, jnp.float32(t)))
  assert loss.traces == 1
  for t, h in ((0.01, 0.1), (0.05, 0.01)):
    landscape.gradient_cosine(
      loss,
      exact,
      scores,
      step=jnp.float32(h),
      loss_args=(labels, jnp.float32(t)),
      reference_args=(labels,),
    )
  # surrogate_tracking compares scalars: the mean over the lists.
  mean_loss = _Counted(lambda s, y, t: jnp.mean(loss.fn(s, y, t)))
  mean_exact = _Counted(lambda s, y: jnp.mean(_ap_loss(s, y)))
  for t, s in ((0.01, 0.1), (0.05, 0.3)):
    landscape.surrogate_tracking(
      mean_loss,
      mean_exact,
      scores,
      jax.random.key(int(100 * t)),
      scale=jnp.float32(s),
      num_points=8,
      loss_args=(labels, jnp.float32(t)),
      reference_args=(labels,),
    )
  for t in (0.01, 0.05):
    landscape.descent_directions(loss, scores, args=(labels, jnp.float32(t)))
  traces = loss.traces
  gap = _Counted(_in_batch_map)
  emb, lab = jnp.asarray(rng.normal(size=(12, 3)), jnp.float32), jnp.arange(12) % 3
  for seed in range(3):
    batches = jax.random.permutation(jax.random.key(seed), 12).reshape(3, 4)
    landscape.batch_gap(gap, (emb, lab), batches)
  landscape.slice_2d(loss, scores, (u, v), grid, grid, args=(labels, jnp.float32(0.3)))
  assert loss.traces == traces  # nothing traced again
  assert gap.traces == 2  # once for the batches' lax.map, once for the whole set; not per call
  assert traces <= 6 and exact.traces <= 4  # each helper traced its functions once
  assert mean_loss.traces == 1 and mean_exact.traces == 1


# Errors: the function's name and the fix.


def test_errors_name_the_function_and_the_fix():
  x = jnp.zeros(3)
  with pytest.raises(TypeError, match="slice_1d: fn must be a function"):
    landscape.slice_1d(None, x, x, jnp.zeros(2))
  with pytest.raises(ValueError, match="slice_1d: direction has a leaf of shape"):
    landscape.slice_1d(jnp.sum, x, jnp.zeros(4), jnp.zeros(2))
  with pytest.raises(TypeError, match="slice_1d: alphas must be a floating-point array"):
    landscape.slice_1d(jnp.sum, x, x, jnp.arange(2))
  with pytest.raises(TypeError, match="args must be a tuple"):
    landscape.slice_2d(jnp.sum, x, (x, x), jnp.zeros(2), jnp.zeros(2), args=[1])
  with pytest.raises(TypeError, match="slice_2d: directions must be a pair"):
    landscape.slice_2d(jnp.sum, x, x, jnp.zeros(2), jnp.zeros(2))
  with pytest.raises(ValueError, match="surrogate_tracking: scale must be >= 0"):
    landscape.surrogate_tracking(jnp.sum, jnp.sum, x, jax.random.key(0), scale=-1.0, num_points=4)
  with pytest.raises(ValueError, match=r"scale must be a scalar or shaped \[num_points\]"):
    landscape.surrogate_tracking(
      jnp.sum, jnp.sum, x, jax.random.key(0), scale=jnp.ones(3), num_points=4
    )
  with pytest.raises(ValueError, match="gradient_cosine: step must be > 0"):
    landscape.gradient_cosine(jnp.sum, jnp.sum, x, step=0.0)
  with pytest.raises(TypeError, match="batch_gap: batches must be integer item indices"):
    landscape.batch_gap(jnp.sum, x, jnp.zeros((1, 3)))
  with pytest.raises(ValueError, match="batch_gap: every leaf of data must have the same number"):
    landscape.batch_gap(lambda d: 0.0, (jnp.zeros(3), jnp.zeros(4)), jnp.zeros((1, 3), jnp.int32))
  with pytest.raises(ValueError, match="kendall_correlation: x and y must have the same shape"):
    landscape.kendall_correlation(jnp.zeros(3), jnp.zeros(4))
  with pytest.raises(ValueError, match="plot_slice_2d: values must be shaped"):
    landscape.plot_slice_2d(None, jnp.zeros(2), jnp.zeros(3), jnp.zeros((3, 2)))


def test_import_jaxrank_does_not_import_matplotlib():
  code = "import sys, jaxrank, jaxrank.landscape; assert 'matplotlib' not in sys.modules"
  subprocess.run([sys.executable, "-c", code], check=True)


def test_plot_helpers_draw():
  matplotlib = pytest.importorskip("matplotlib")
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, (a1, a2) = plt.subplots(1, 2)
  alphas, betas = jnp.linspace(-1, 1, 4), jnp.linspace(0, 1, 3)
  values = landscape.slice_2d(
    lambda y: y[0] + 10 * y[1], jnp.zeros(2), (jnp.eye(2)[0], jnp.eye(2)[1]), alphas, betas
  )
  image = landscape.plot_slice_2d(a1, alphas, betas, values, title="t")
  np.testing.assert_allclose(image.get_array(), np.asarray(values).T)  # rows follow betas
  assert image.get_extent() == [-1.0, 1.0, 0.0, 1.0]
  out = {
    "loss": jnp.arange(3.0),
    "reference": jnp.arange(3.0),
    "spearman": 1.0,
    "kendall": 1.0,
    "error": 0.0,
  }
  points = landscape.plot_tracking(a2, out, label="x")
  assert points.get_offsets().shape == (3, 2)
  plt.close(fig)
