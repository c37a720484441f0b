"""The proxy losses: against the float64 numpy reference and against pytorch-metric-learning.

Values and gradients (with respect to the embeddings and the proxies) against
`reference_proxy.py` in float64, with classes absent from the batch, multi-hot labels and masked
items; `check_grads`; `jit` equals eager; `where` equals slicing; the degenerate batches; the
input errors; and the equality with pytorch-metric-learning 2.9.0's `ProxyNCALoss` and
`ProxyAnchorLoss` given the same proxies, in float64: value and both gradients. The sharded case
is in `tests/multidevice/test_sharded.py`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference_proxy
import torch
from jax import test_util
from jax.experimental import checkify
from pytorch_metric_learning import losses as pml_losses

import jaxrank

B, C, D = 10, 6, 5  # Classes 4 and 5 never occur in `batch`'s class labels.

# (name, loss, hyperparameters): each loss with its defaults and with others.
CASES = [
  ("proxy_nca", jaxrank.proxy_nca_loss, {}),
  ("proxy_nca_plus_plus", jaxrank.proxy_nca_plus_plus_loss, {}),
  ("proxy_nca_plus_plus_warm", jaxrank.proxy_nca_plus_plus_loss, dict(temperature=0.7)),
  ("proxy_anchor", jaxrank.proxy_anchor_loss, {}),
  ("proxy_anchor_scaled", jaxrank.proxy_anchor_loss, dict(margin=0.3, alpha=4.0)),
]
IDS = [c[0] for c in CASES]
NCA_REFERENCES = {
  jaxrank.proxy_nca_loss: reference_proxy.proxy_nca_items,
  jaxrank.proxy_nca_plus_plus_loss: reference_proxy.proxy_nca_plus_plus_items,
}


def batch(seed, multi_hot=False):
  """float64 embeddings `[B, D]`, labels (classes 0-3, or multi-hot over the 6 classes with one
  item without a label), proxies `[C, D]` and a mask whose masked items hold a NaN embedding and
  an out-of-range label (neither may be read)."""
  rng = np.random.default_rng(seed)
  embeddings = rng.normal(size=(B, D))
  proxies = rng.normal(size=(C, D))
  where = np.ones(B, bool)
  where[[2, 7]] = False
  if multi_hot:
    labels = (rng.random((B, C)) < 0.3).astype(np.int32)
    labels[0] = 0  # No label: left out of the Proxy-NCA means, a negative for every proxy.
    labels[1, :2] = 1
    labels[:, 5] = 0  # Class 5 is nobody's label.
    labels[2] = 5  # Masked.
  else:
    labels = rng.integers(0, 4, B)
    labels[2] = 99  # Masked.
  embeddings[7] = np.nan  # Masked.
  return embeddings, labels, proxies, where


@functools.cache
def jitted(fn, reduce_fn=jnp.mean, grad=False):
  """`fn(embeddings, labels, proxies, *, where, **hyperparameters)` with `reduce_fn`, jitted once
  (per input shapes and x64 mode); with `grad`, its value and gradients (embeddings, proxies).
  Eagerly, every operation of a loss compiles on its own: most of this file's time."""
  loss = functools.partial(fn, reduce_fn=reduce_fn)
  return jax.jit(jax.value_and_grad(loss, argnums=(0, 2)) if grad else loss)


@functools.cache
def reductions(fn):
  """`fn`'s values with `reduce_fn=None`, `jnp.mean` and `jnp.sum`, from one jitted function."""
  return jax.jit(lambda *args, **kwargs: [fn(*args, reduce_fn=r, **kwargs) for r in REDUCTIONS])


REDUCTIONS = (None, jnp.mean, jnp.sum)


def nca_reference(fn, kwargs, e, y, p, w):
  """Per item `[B]` (0 for masked or undefined items) and the mean over the defined ones."""
  values = NCA_REFERENCES[fn](e, y, p, w, **kwargs)
  per_item = np.zeros(len(e))
  per_item[np.flatnonzero(w)] = [0.0 if v is None else v for v in values]
  return per_item, reference_proxy.mean_of_defined(values)


@pytest.mark.parametrize("multi_hot", [False, True], ids=["classes", "multi_hot"])
@pytest.mark.parametrize("name,fn,kwargs", CASES, ids=IDS)
def test_values_equal_reference(name, fn, kwargs, multi_hot, x64):
  del name
  for seed in range(2):
    e, y, p, w = batch(seed, multi_hot)
    per, mean, total = reductions(fn)(e, y, p, where=w, **kwargs)
    if fn is jaxrank.proxy_anchor_loss:
      pos, neg, _ = reference_proxy.proxy_anchor_terms(e, y, p, w, **kwargs)
      want_per = np.add(pos, neg)
      want_mean = reference_proxy.proxy_anchor_loss(e, y, p, w, **kwargs)
    else:
      want_per, want_mean = nca_reference(fn, kwargs, e, y, p, w)
    assert per.shape == want_per.shape
    np.testing.assert_allclose(per, want_per, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-12)
    np.testing.assert_allclose(total, np.sum(want_per), rtol=1e-12)


def test_the_batches_exercise_the_cases():
  """Absent classes (proxies without a positive); with multi-hot labels, an item without a
  label and one with two."""
  e, y, p, w = batch(0)
  assert not np.isin([4, 5], y[w]).any()
  e, y, p, w = batch(0, multi_hot=True)
  assert y[0].sum() == 0 and y[1].sum() >= 2 and not y[w].sum(axis=0).all()
  assert None in reference_proxy.proxy_nca_items(e, y, p, w)


# Each loss once (each check compiles new programs): class labels, and multi-hot labels.
_GRAD_KINDS = [(False, CASES[0]), (True, CASES[1]), (True, CASES[3])]


@pytest.mark.parametrize(
  "multi_hot,case",
  _GRAD_KINDS,
  ids=[f"{c[0]}-{'multi' if m else 'classes'}" for m, c in _GRAD_KINDS],
)
def test_gradients_equal_finite_differences(multi_hot, case, x64):
  _, fn, kwargs = case
  e, y, p, w = batch(3, multi_hot)
  e[7] = 0.5  # check_grads perturbs every entry; the masked NaN is tested elsewhere.
  loss = jax.jit(lambda e, p: fn(e, y, p, where=w, **kwargs))
  grads = jax.grad(loss, argnums=(0, 1))(e, p)
  assert all(np.abs(g).max() > 1e-3 for g in grads)  # Not a trivial case.
  test_util.check_grads(loss, (e, p), order=1, modes=("rev",), eps=1e-6, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("name,fn,kwargs", CASES[::2], ids=IDS[::2])
def test_jit_equals_eager_and_where_equals_slicing(name, fn, kwargs, x64):
  """Values and both gradients; the masked items (a NaN embedding, an out-of-range label) get a
  zero gradient, and the proxies' gradient stays finite."""
  del name
  e, y, p, w = batch(5)
  loss = lambda e, p, y, w: fn(e, y, p, where=w, **kwargs)
  value_and_grad = jax.value_and_grad(loss, argnums=(0, 1))
  eager = value_and_grad(e, p, y, w)
  compiled = jax.jit(value_and_grad)
  for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(compiled(e, p, y, w))):
    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
  value, (grad_e, grad_p) = eager
  # Jitted: eagerly, every operation would compile again at the sliced shapes.
  sliced_value, (sliced_e, sliced_p) = compiled(e[w], p, y[w], None)
  np.testing.assert_allclose(value, sliced_value, rtol=1e-13)
  np.testing.assert_allclose(grad_e[w], sliced_e, rtol=1e-12, atol=1e-15)
  np.testing.assert_allclose(grad_p, sliced_p, rtol=1e-12, atol=1e-15)
  np.testing.assert_array_equal(grad_e[~w], 0)


@pytest.mark.parametrize("name,fn,kwargs", CASES[:2] + CASES[3:4], ids=IDS[:2] + IDS[3:4])
def test_degenerate_batches(name, fn, kwargs):
  del name
  e, y, p, w = batch(1)
  e, p = e.astype(np.float32), p.astype(np.float32)
  # No valid item: 0, with zero gradients.
  value_and_grad = jitted(fn, grad=True)
  value, grads = value_and_grad(e, y, p, where=np.zeros(B, bool), **kwargs)
  assert float(value) == 0 and not any(np.any(g) for g in grads)
  # One class in the batch (its proxy has no negative item): finite (test_equals_pytorch_metric_
  # learning compares its values).
  value, grads = value_and_grad(e, np.full(B, 3), p, where=w, **kwargs)
  assert np.isfinite(value) and all(np.isfinite(g).all() for g in grads)
  # A valid NaN embedding makes the loss NaN.
  nan = e.copy()
  nan[0, 0] = np.nan
  assert np.isnan(value_and_grad(nan, y, p, where=w, **kwargs)[0])
  # Half precision in, float32 out.
  assert jitted(fn)(e.astype(jnp.bfloat16), y, p, where=w).dtype == jnp.float32


def test_proxy_nca_without_a_negative_proxy_is_left_out():
  e = np.array([[1.0, 0.0], [1.0, 0.0], [0.8, 0.6]])
  both = np.array([[1, 1], [1, 0], [0, 1]])  # Item 0 has every proxy as a positive.
  per, mean, _ = reductions(jaxrank.proxy_nca_loss)(e, both, np.eye(2))
  # Item 1: -log(e^0 / e^-2); item 2: -log(e^-0.8 / e^-0.4).
  np.testing.assert_allclose(per, [0.0, -2.0, 0.4], rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(mean, -0.8, rtol=1e-6)
  # One proxy: no item has a negative; ProxyNCA++ then gives -log(1) = 0 for every item.
  assert float(jitted(jaxrank.proxy_nca_loss)(e, np.zeros(3, int), np.ones((1, 2)))) == 0
  one_proxy = jitted(jaxrank.proxy_nca_plus_plus_loss)(e, np.zeros(3, int), np.ones((1, 2)))
  assert float(one_proxy) == 0


def test_input_errors():
  e, y, p, w = batch(0)
  fn = jaxrank.proxy_anchor_loss
  with pytest.raises(
    ValueError, match=r"^proxy_nca_loss: labels must be class indices in \[0, 6\)"
  ) as error:
    jaxrank.proxy_nca_loss(e, np.where(w, 6, y), p, where=w)
  message = str(error.value)
  assert "got 6 at a valid item" in message and "give every class a proxy" in message
  with pytest.raises(ValueError, match=r"^proxy_anchor_loss: labels must be class indices"):
    fn(e, np.where(np.arange(B) == 0, -1, y), p)
  with pytest.raises(ValueError, match=r"^proxy_anchor_loss: proxies have shape \(6, 4\) but "):
    fn(e, y, p[:, :4])
  with pytest.raises(ValueError, match=r"^proxy_anchor_loss: embeddings must have 2 axes \[B, D\]"):
    fn(e[0], y, p)
  with pytest.raises(ValueError, match=r"^proxy_nca_plus_plus_loss: labels must be shaped \[10\]"):
    jaxrank.proxy_nca_plus_plus_loss(e, y[:4], p)
  with pytest.raises(ValueError, match=r"labels must be shaped .* \[10, 6\] \(multi-hot"):
    fn(e, np.ones((B, 4), int), p)
  with pytest.raises(TypeError, match=r"^proxy_anchor_loss: embeddings must be a floating-point"):
    fn(np.ones((B, D), np.int32), y, p)
  with pytest.raises(TypeError, match=r"^proxy_anchor_loss: proxies must be a floating-point"):
    fn(e, y, p.astype(np.int32))
  with pytest.raises(TypeError, match=r"^proxy_nca_loss: labels must be integers"):
    jaxrank.proxy_nca_loss(e, y.astype(np.float32), p)
  with pytest.raises(TypeError, match=r"^proxy_nca_loss: where must be a boolean mask"):
    jaxrank.proxy_nca_loss(e, y, p, where=w.astype(int))
  with pytest.raises(ValueError, match=r"^proxy_nca_loss: where must be a boolean mask shaped"):
    jaxrank.proxy_nca_loss(e, y, p, where=w[:3])
  with pytest.raises(ValueError, match=r"^proxy_nca_plus_plus_loss: temperature must be > 0"):
    jaxrank.proxy_nca_plus_plus_loss(e, y, p, temperature=0.0)
  with pytest.raises(ValueError, match=r"^proxy_anchor_loss: alpha must be > 0"):
    fn(e, y, p, alpha=-1.0)


def test_traced_labels_are_checked_only_inside_traced_checks():
  """Under `jit` an out-of-range label is not read: its item has no positive proxy (Proxy-NCA
  leaves it out); inside `traced_checks`, checkify reports it."""
  e, y, p, w = batch(0)
  y[0] = 6
  per = jitted(jaxrank.proxy_nca_loss, None)(e, y, p, where=w)
  assert per[0] == 0 and np.isfinite(per).all() and per.any()
  with jaxrank.traced_checks():
    checked = jax.jit(checkify.checkify(jaxrank.proxy_nca_loss, errors=checkify.user_checks))
    error, _ = checked(e, y, p, where=w)
  with pytest.raises(Exception, match=r"proxy_nca_loss: labels must be class indices in \[0, 6\)"):
    error.throw()


# ---------------------------------------------------------------------------------------------
# pytorch-metric-learning, given the same proxies: value and gradients, in float64.


def pml_value_and_grads(loss, e, y, p):
  loss.proxies.data = torch.tensor(p)
  x = torch.tensor(e, requires_grad=True)
  value = loss(x, torch.tensor(y))
  value.backward()
  return float(value.detach()), x.grad.numpy(), loss.proxies.grad.numpy()


PML_CASES = {  # name -> (pytorch-metric-learning's loss, jaxrank's, its hyperparameters).
  "nca_scale_1": (
    lambda: pml_losses.ProxyNCALoss(C, D),
    jaxrank.proxy_nca_plus_plus_loss,
    dict(temperature=1.0),
  ),
  "nca_scale_9": (
    lambda: pml_losses.ProxyNCALoss(C, D, softmax_scale=9),
    jaxrank.proxy_nca_plus_plus_loss,
    {},
  ),
  "anchor": (lambda: pml_losses.ProxyAnchorLoss(C, D), jaxrank.proxy_anchor_loss, {}),
  "anchor_margins": (
    lambda: pml_losses.ProxyAnchorLoss(C, D, margin=0.3, alpha=8),
    jaxrank.proxy_anchor_loss,
    dict(margin=0.3, alpha=8.0),
  ),
}


@pytest.mark.parametrize("kind", ["absent_classes", "one_class"])
@pytest.mark.parametrize("name", list(PML_CASES))
def test_equals_pytorch_metric_learning(name, kind, x64):
  make_loss, fn, kwargs = PML_CASES[name]
  rng = np.random.default_rng(11)
  e, p = rng.normal(size=(B, D)), rng.normal(size=(C, D))
  y = rng.integers(0, 4, B) if kind == "absent_classes" else np.full(B, 2)
  value, grad_e, grad_p = pml_value_and_grads(make_loss(), e, y, p)
  got, (got_e, got_p) = jitted(fn, grad=True)(e, y, p, **kwargs)
  assert value > 0 and np.abs(grad_e).max() > 1e-3 and np.abs(grad_p).max() > 1e-3
  np.testing.assert_allclose(got, value, rtol=1e-12)
  np.testing.assert_allclose(got_e, grad_e, rtol=1e-10, atol=1e-13)
  np.testing.assert_allclose(got_p, grad_p, rtol=1e-10, atol=1e-13)
