"""The classification losses: against the float64 numpy reference and pytorch-metric-learning.

Values and gradients (with respect to the embeddings and the class weights) against
`reference_classification.py` in float64, with classes absent from the batch, multi-hot labels
(the normalised softmax) and masked items, and an item past ArcFace's `theta = pi - m`;
`check_grads`; `jit` equals eager; `where` equals slicing; `vmap` over batches equals a loop; the
reductions (the sum of the unreduced values is the sum); the degenerate batches (an embedding
parallel or antiparallel to its class's weights: finite gradients); the input errors; and the
equality with pytorch-metric-learning 2.9.0's `NormalizedSoftmaxLoss`, `ArcFaceLoss` and
`CosFaceLoss` given the same class weights (`W = class_weights.T`), in float64: value and both
gradients. The sharded case is in `tests/multidevice/test_sharded.py`.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference_classification as reference
import reference_proxy
import torch
from jax import test_util
from pytorch_metric_learning import losses as pml_losses

import jaxrank

B, C, D = 10, 6, 5  # Classes 4 and 5 never occur in `batch`'s class labels.

# (name, loss, hyperparameters, reference): each loss with its defaults and with others.
CASES = [
  ("normalized_softmax", jaxrank.normalized_softmax_loss, {}, reference.normalized_softmax_items),
  (
    "normalized_softmax_warm",
    jaxrank.normalized_softmax_loss,
    dict(temperature=0.5),
    reference.normalized_softmax_items,
  ),
  ("arcface", jaxrank.arcface_loss, {}, reference.arcface_items),
  (
    "arcface_small",
    jaxrank.arcface_loss,
    dict(angular_margin=0.3, scale=8.0),
    reference.arcface_items,
  ),
  ("cosface", jaxrank.cosface_loss, {}, reference.cosface_items),
  ("cosface_small", jaxrank.cosface_loss, dict(margin=0.1, scale=4.0), reference.cosface_items),
]
IDS = [c[0] for c in CASES]
PAST_PI = 3  # Item 3 lies nearly antipodal to its class's weights: past ArcFace's pi - m.


def batch(seed, multi_hot=False):
  """float64 embeddings `[B, D]`, labels (classes 0-3, or multi-hot over the 6 classes with one
  item without a label), class weights `[C, D]` and a mask whose masked items hold a NaN
  embedding and an out-of-range label (neither may be read)."""
  rng = np.random.default_rng(seed)
  embeddings = rng.normal(size=(B, D))
  weights = rng.normal(size=(C, D))
  where = np.ones(B, bool)
  where[[2, 7]] = False
  if multi_hot:
    labels = (rng.random((B, C)) < 0.3).astype(np.int32)
    labels[0] = 0  # No label: left out of the mean.
    labels[1, :2] = 1
    labels[:, 5] = 0  # Class 5 is nobody's label.
    labels[2] = 5  # Masked.
  else:
    labels = rng.integers(0, 4, B)
    labels[2] = 99  # Masked.
    embeddings[PAST_PI] = -weights[labels[PAST_PI]] + 0.05 * rng.normal(size=D)
  embeddings[7] = np.nan  # Masked.
  return embeddings, labels, weights, where


@functools.cache
def jitted(fn, reduce_fn=jnp.mean, grad=False):
  """`fn(embeddings, labels, class_weights, *, where, **hyperparameters)` with `reduce_fn`, jitted
  once; with `grad`, its value and gradients (embeddings, class weights)."""
  loss = functools.partial(fn, reduce_fn=reduce_fn)
  return jax.jit(jax.value_and_grad(loss, argnums=(0, 2)) if grad else loss)


REDUCTIONS = (None, jnp.mean, jnp.sum)


@functools.cache
def reductions(fn):
  """`fn`'s values with `reduce_fn=None`, `jnp.mean` and `jnp.sum`, from one jitted function."""
  return jax.jit(lambda *args, **kwargs: [fn(*args, reduce_fn=r, **kwargs) for r in REDUCTIONS])


def _reference(ref, kwargs, e, y, w, where):
  """Per item `[B]` (0 for masked or label-less items) and the mean over the defined ones."""
  values = ref(e, y, w, where, **kwargs)
  per_item = np.zeros(len(e))
  per_item[np.flatnonzero(where)] = [0.0 if v is None else v for v in values]
  return per_item, reference_proxy.mean_of_defined(values)


@pytest.mark.parametrize("name,fn,kwargs,ref", CASES, ids=IDS)
def test_values_equal_reference(name, fn, kwargs, ref, x64):
  kinds = [False, True] if name.startswith("normalized_softmax") else [False]
  for multi_hot in kinds:
    for seed in range(2):
      e, y, w, where = batch(seed, multi_hot)
      per, mean, total = reductions(fn)(e, y, w, where=where, **kwargs)
      want_per, want_mean = _reference(ref, kwargs, e, y, w, where)
      np.testing.assert_allclose(per, want_per, rtol=1e-12, atol=1e-13)
      np.testing.assert_allclose(mean, want_mean, rtol=1e-12)
      np.testing.assert_allclose(total, np.sum(want_per), rtol=1e-12)
      np.testing.assert_allclose(total, np.sum(per), rtol=1e-12)  # The reduce_fn contract.


def test_the_batches_exercise_the_cases():
  """Absent classes; an item past ArcFace's `pi - m` (both defaults and 0.3); with multi-hot
  labels, an item without a label and one with two."""
  e, y, w, where = batch(0)
  assert not np.isin([4, 5], y[where]).any()
  for seed in range(2):
    e, y, w, where = batch(seed)
    cosine = reference_proxy.cosine(e[PAST_PI], w[y[PAST_PI]])
    assert math.acos(cosine) > math.pi - 0.3
  e, y, w, where = batch(0, multi_hot=True)
  assert y[0].sum() == 0 and y[1].sum() >= 2 and not y[where].sum(axis=0).all()


# Each loss once, with class labels; the normalised softmax with multi-hot labels too.
_GRAD_CASES = [(False, CASES[0]), (True, CASES[1]), (False, CASES[3]), (False, CASES[5])]


@pytest.mark.parametrize(
  "multi_hot,case",
  _GRAD_CASES,
  ids=[f"{c[0]}-{'multi' if m else 'classes'}" for m, c in _GRAD_CASES],
)
def test_gradients_equal_finite_differences(multi_hot, case, x64):
  _, fn, kwargs, _ = case
  e, y, w, where = batch(3, multi_hot)
  e[7] = 0.5  # check_grads perturbs every entry; the masked NaN is tested elsewhere.
  loss = jax.jit(lambda e, w: fn(e, y, w, where=where, **kwargs))
  grads = jax.grad(loss, argnums=(0, 1))(e, w)
  assert all(np.abs(g).max() > 1e-3 for g in grads)  # Not a trivial case.
  test_util.check_grads(loss, (e, w), order=1, modes=("rev",), eps=1e-6, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("name,fn,kwargs,ref", CASES[::2], ids=IDS[::2])
def test_jit_equals_eager_and_where_equals_slicing(name, fn, kwargs, ref, x64):
  """Values and both gradients; the masked items (a NaN embedding, an out-of-range label) get a
  zero gradient, and the class weights' gradient stays finite."""
  del name, ref
  e, y, w, where = batch(5)
  loss = lambda e, w, y, where: fn(e, y, w, where=where, **kwargs)
  value_and_grad = jax.value_and_grad(loss, argnums=(0, 1))
  eager = value_and_grad(e, w, y, where)
  compiled = jax.jit(value_and_grad)
  for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(compiled(e, w, y, where))):
    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
  value, (grad_e, grad_w) = eager
  sliced_value, (sliced_e, sliced_w) = compiled(e[where], w, y[where], None)
  np.testing.assert_allclose(value, sliced_value, rtol=1e-13)
  np.testing.assert_allclose(grad_e[where], sliced_e, rtol=1e-12, atol=1e-15)
  np.testing.assert_allclose(grad_w, sliced_w, rtol=1e-12, atol=1e-15)
  np.testing.assert_array_equal(grad_e[~where], 0)
  assert np.isfinite(grad_w).all()


@pytest.mark.parametrize("name,fn,kwargs,ref", CASES[::2], ids=IDS[::2])
def test_vmap_over_batches_equals_a_loop(name, fn, kwargs, ref, x64):
  del name, ref
  batches = [batch(seed) for seed in range(3)]
  e, y, w, where = (np.stack(parts) for parts in zip(*batches))
  loss = jax.value_and_grad(lambda e, y, w, m: fn(e, y, w, where=m, **kwargs), argnums=(0, 2))
  mapped = jax.jit(jax.vmap(loss))(e, y, w, where)
  for i in range(len(batches)):
    single = jax.jit(loss)(e[i], y[i], w[i], where[i])
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(mapped)):
      np.testing.assert_allclose(b[i], a, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name,fn,kwargs,ref", CASES[::2], ids=IDS[::2])
def test_degenerate_batches(name, fn, kwargs, ref):
  del name, ref
  e, y, w, where = batch(1)
  e, w = e.astype(np.float32), w.astype(np.float32)
  value_and_grad = jitted(fn, grad=True)
  # No valid item: 0, with zero gradients.
  value, grads = value_and_grad(e, y, w, where=np.zeros(B, bool), **kwargs)
  assert float(value) == 0 and not any(np.any(g) for g in grads)
  # One class in the batch: finite.
  value, grads = value_and_grad(e, np.full(B, 3), w, where=where, **kwargs)
  assert np.isfinite(value) and all(np.isfinite(g).all() for g in grads)
  # Embeddings equal to their class's weights, and opposite to them (cosines of exactly +-1:
  # ArcFace's sin(theta) has an infinite derivative there): finite gradients.
  for sign in (1.0, -1.0):
    on = e.copy()
    on[where] = sign * w[np.where(where, y, 0)][where]
    value, grads = value_and_grad(on, y, w, where=where, **kwargs)
    assert np.isfinite(value) and all(np.isfinite(g).all() for g in grads), sign
  # A zero embedding has cosine 0 with every class: finite.
  zero = e.copy()
  zero[0] = 0
  value, grads = value_and_grad(zero, y, w, where=where, **kwargs)
  assert np.isfinite(value) and all(np.isfinite(g).all() for g in grads)
  # A valid NaN embedding makes the loss NaN.
  nan = e.copy()
  nan[0, 0] = np.nan
  assert np.isnan(value_and_grad(nan, y, w, where=where, **kwargs)[0])
  # Half precision in, float32 out.
  assert jitted(fn)(e.astype(jnp.bfloat16), y, w, where=where).dtype == jnp.float32


def test_a_multi_hot_item_without_a_label_is_left_out():
  """The normalised softmax's mean is over the items with a label; ArcFace and CosFace refuse
  multi-hot labels."""
  e = np.array([[1.0, 0.0], [1.0, 0.0], [0.8, 0.6]])
  labels = np.array([[0, 0], [1, 0], [1, 1]])
  per, mean, _ = reductions(jaxrank.normalized_softmax_loss)(e, labels, np.eye(2), temperature=1.0)
  # Item 1: log(1 + e^-1); item 2: both classes are its labels, -log 1 = 0.
  np.testing.assert_allclose(per, [0.0, math.log1p(math.exp(-1.0)), 0.0], rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(mean, math.log1p(math.exp(-1.0)) / 2, rtol=1e-6)


def test_input_errors():
  e, y, w, where = batch(0)
  with pytest.raises(
    ValueError, match=r"^arcface_loss: labels must be class indices in \[0, 6\)"
  ) as error:
    jaxrank.arcface_loss(e, np.where(where, 6, y), w, where=where)
  assert "class_weights [C, D] has C = 6 rows" in str(error.value)
  assert "give every class a row of class weights" in str(error.value)
  with pytest.raises(ValueError, match=r"^cosface_loss: labels must be integer class labels \[B\]"):
    jaxrank.cosface_loss(e, np.ones((B, C), int), w)
  with pytest.raises(ValueError, match=r"^arcface_loss: labels .*use normalized_softmax_loss"):
    jaxrank.arcface_loss(e, np.ones((B, C), int), w)
  with pytest.raises(ValueError, match=r"^cosface_loss: class_weights have shape \(6, 4\) but "):
    jaxrank.cosface_loss(e, y, w[:, :4])
  with pytest.raises(TypeError, match=r"^arcface_loss: class_weights must be a floating-point"):
    jaxrank.arcface_loss(e, y, w.astype(np.int32))
  with pytest.raises(ValueError, match=r"^normalized_softmax_loss: labels must be shaped \[10\]"):
    jaxrank.normalized_softmax_loss(e, y[:4], w)
  with pytest.raises(ValueError, match=r"^arcface_loss: labels must be shaped \[10\], got"):
    jaxrank.arcface_loss(e, y[:4], w)
  with pytest.raises(ValueError, match=r"^arcface_loss: angular_margin must be <= 1.57.*degrees"):
    jaxrank.arcface_loss(e, y, w, angular_margin=28.6)
  with pytest.raises(ValueError, match=r"^arcface_loss: angular_margin must be >= 0"):
    jaxrank.arcface_loss(e, y, w, angular_margin=-0.1)
  for fn in (jaxrank.arcface_loss, jaxrank.cosface_loss):
    with pytest.raises(ValueError, match=rf"^{fn.__name__}: scale must be > 0"):
      fn(e, y, w, scale=0.0)
  with pytest.raises(ValueError, match=r"^normalized_softmax_loss: temperature must be > 0"):
    jaxrank.normalized_softmax_loss(e, y, w, temperature=0.0)
  with pytest.raises(TypeError, match=r"^cosface_loss: margin must be a real number"):
    jaxrank.cosface_loss(e, y, w, margin=True)


# ---------------------------------------------------------------------------------------------
# pytorch-metric-learning, given the same class weights: value and gradients, in float64.


def pml_value_and_grads(loss, e, y, w):
  loss.W.data = torch.tensor(w.T.copy())  # Their W is [D, C].
  x = torch.tensor(e, requires_grad=True)
  value = loss(x, torch.tensor(y))
  value.backward()
  return float(value.detach()), x.grad.numpy(), loss.W.grad.numpy().T


PML_CASES = {  # name -> (pytorch-metric-learning's loss, jaxrank's, its hyperparameters).
  "normalized_softmax": (
    lambda: pml_losses.NormalizedSoftmaxLoss(C, D),
    jaxrank.normalized_softmax_loss,
    {},
  ),
  "normalized_softmax_warm": (
    lambda: pml_losses.NormalizedSoftmaxLoss(C, D, temperature=0.5),
    jaxrank.normalized_softmax_loss,
    dict(temperature=0.5),
  ),
  "arcface": (lambda: pml_losses.ArcFaceLoss(C, D), jaxrank.arcface_loss, {}),
  "arcface_small": (
    lambda: pml_losses.ArcFaceLoss(C, D, margin=math.degrees(0.3), scale=8),
    jaxrank.arcface_loss,
    dict(angular_margin=0.3, scale=8.0),
  ),
  "cosface": (lambda: pml_losses.CosFaceLoss(C, D), jaxrank.cosface_loss, {}),
  "cosface_small": (
    lambda: pml_losses.CosFaceLoss(C, D, margin=0.1, scale=4),
    jaxrank.cosface_loss,
    dict(margin=0.1, scale=4.0),
  ),
}


@pytest.mark.parametrize("kind", ["absent_classes", "one_class"])
@pytest.mark.parametrize("name", list(PML_CASES))
def test_equals_pytorch_metric_learning(name, kind, x64):
  """Absent classes, with an item past ArcFace's `pi - m`; and a batch of one class."""
  make_loss, fn, kwargs = PML_CASES[name]
  e, y, w, _ = batch(11)
  e[7] = np.random.default_rng(12).normal(size=D)  # Every item valid here.
  y[2] = 1
  if kind == "one_class":
    y = np.full(B, 2)
  value, grad_e, grad_w = pml_value_and_grads(make_loss(), e, y, w)
  got, (got_e, got_w) = jitted(fn, grad=True)(e, y, w, **kwargs)
  assert value > 0 and np.abs(grad_e).max() > 1e-3 and np.abs(grad_w).max() > 1e-3
  np.testing.assert_allclose(got, value, rtol=1e-12)
  np.testing.assert_allclose(got_e, grad_e, rtol=1e-10, atol=1e-13)
  np.testing.assert_allclose(got_w, grad_w, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("name", ["arcface", "arcface_small"])
def test_arcface_at_a_cosine_of_one_equals_pytorch_metric_learning(name, x64):
  """Embeddings exactly on their class's weights and exactly opposite (cosines of exactly 1 and
  -1, where `d sin(theta) / ds` is infinite): the value and both gradients are theirs (their
  clamp passes no gradient at its bounds, nor does the target's cosine here), and finite."""
  make_loss, fn, kwargs = PML_CASES[name]
  w = np.vstack([np.eye(D), np.ones((C - D, D))]) * np.arange(1, C + 1)[:, None]  # Axes, mostly.
  y = np.array([0, 1, 2, 3, 0, 1])
  e = w[y] * np.array([2.0, 1.0, 0.5, 3.0, -1.0, -2.0])[:, None]
  e[:, 0] += np.array([0, 0, 0, 0, 0.3, 0])  # One item off its axis: a gradient to compare.
  value, grad_e, grad_w = pml_value_and_grads(make_loss(), e, y, w)
  got, (got_e, got_w) = jitted(fn, grad=True)(e, y, w, **kwargs)
  assert np.abs(grad_e).max() > 1e-3 and np.isfinite(grad_e).all() and np.isfinite(grad_w).all()
  np.testing.assert_allclose(got, value, rtol=1e-12)
  np.testing.assert_allclose(got_e, grad_e, rtol=1e-10, atol=1e-13)
  np.testing.assert_allclose(got_w, grad_w, rtol=1e-10, atol=1e-13)
