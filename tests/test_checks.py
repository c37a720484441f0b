"""Tests of the input checks shared by every module (`jaxrank._src.checks`).

The convention: `TypeError` for a value of the wrong kind (dtype, Python type), `ValueError` for
a value of the right kind out of range or of the wrong shape; every message starts with the
public function's name and a colon.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_compile as listing  # Every list-level function, found by its signature.
from jax.experimental import checkify

import jaxrank
from jaxrank._src import checks

# ---------------------------------------------------------------------------------------------
# Static ints: check_positive_int, check_int_at_least


@pytest.mark.parametrize("value", [True, False, np.True_, 2.0, np.float32(2), "2", None, [2]])
def test_positive_int_rejects_what_is_not_an_int(value):
  with pytest.raises(TypeError, match=re.escape(f"f: n must be a positive int, got {value!r}.")):
    checks.check_positive_int("f", "n", value)


@pytest.mark.parametrize("value", [0, -3, np.int64(0)])
def test_positive_int_rejects_ints_below_one(value):
  with pytest.raises(ValueError, match=f"f: n must be a positive int, got {value}"):
    checks.check_positive_int("f", "n", value)


@pytest.mark.parametrize("value", [1, 7, np.int64(3), np.int32(1), np.uint8(200)])
def test_positive_int_accepts_python_and_numpy_ints(value):
  checks.check_positive_int("f", "n", value)


def test_positive_int_none_only_when_allowed():
  checks.check_positive_int("f", "n", None, allow_none=True)
  with pytest.raises(TypeError, match="f: n must be a positive int, got None"):
    checks.check_positive_int("f", "n", None)
  with pytest.raises(TypeError, match="got True"):
    checks.check_positive_int("f", "n", True, allow_none=True)


def test_int_at_least():
  checks.check_int_at_least("f", "seed", 0, 0)
  checks.check_int_at_least("f", "seed", np.int64(5), 0)
  with pytest.raises(ValueError, match="f: seed must be an int >= 0, got -1"):
    checks.check_int_at_least("f", "seed", -1, 0)
  for bad in (True, np.bool_(False), 1.0):
    with pytest.raises(TypeError, match=re.escape(f"f: seed must be an int >= 0, got {bad!r}")):
      checks.check_int_at_least("f", "seed", bad, 0)


# ---------------------------------------------------------------------------------------------
# Real hyperparameters: check_real


def test_real_returns_known_values_as_floats():
  for value in (2, 0.5, np.float32(0.25), np.int64(3), jnp.array(1.5), np.array(2.0)):
    got = checks.check_real("f", "t", value, above=0)
    assert isinstance(got, float) and got == float(value)


@pytest.mark.parametrize("value", [True, False, np.True_, jnp.array(True), "0.1", 1j, None])
def test_real_rejects_what_is_not_a_real_number(value):
  with pytest.raises(TypeError, match="f: t must be a real number"):
    checks.check_real("f", "t", value)


def test_real_ranges_and_hint():
  with pytest.raises(ValueError, match=r"^f: t must be > 0, got 0.0. It is a temperature.$"):
    checks.check_real("f", "t", 0.0, above=0, hint="It is a temperature.")
  with pytest.raises(ValueError, match="f: t must be >= 0, got -1.0"):
    checks.check_real("f", "t", -1, at_least=0)
  with pytest.raises(ValueError, match="f: t must be <= 1, got 1.5"):
    checks.check_real("f", "t", 1.5, at_least=0, at_most=1)
  with pytest.raises(ValueError, match="f: t must be > 0, got nan"):  # NaN fails every bound.
    checks.check_real("f", "t", float("nan"), above=0)
  assert checks.check_real("f", "t", 1.0, at_least=1.0, at_most=1.0) == 1.0


def test_real_scalars_and_arrays():
  with pytest.raises(ValueError, match=r"f: t must be a scalar, got an array of shape \(3,\)"):
    checks.check_real("f", "t", jnp.ones(3))
  # scalar=False: arrays of any shape, every element checked; None returned for an array.
  assert checks.check_real("f", "strength", np.array([0.5, 2.0]), above=0, scalar=False) is None
  assert checks.check_real("f", "strength", 0.5, above=0, scalar=False) == 0.5
  with pytest.raises(
    ValueError, match=r"strength must be > 0, got -1.0 in an array of shape \(2, 2\)"
  ):
    checks.check_real("f", "strength", jnp.array([[1.0, 2.0], [-1.0, 0.0]]), above=0, scalar=False)
  with pytest.raises(
    TypeError, match="f: strength must be a real number, got an array of dtype bool"
  ):
    checks.check_real("f", "strength", np.array([True, False]), scalar=False)


def test_real_skips_traced_values():
  seen = []

  def f(t, strength):
    seen.append(checks.check_real("f", "t", t, above=0))
    seen.append(checks.check_real("f", "strength", strength, above=0, scalar=False))
    return t

  jax.jit(f)(-1.0, -jnp.ones(3))  # Out of range, but unknown at trace time: not checked.
  jax.grad(lambda t: f(t, jnp.ones(2)))(-2.0)
  assert seen == [None, None, None, None]
  # A traced value still has a shape: a non-scalar is caught.
  with pytest.raises(ValueError, match="f: t must be a scalar"):
    jax.jit(lambda t: checks.check_real("f", "t", t))(jnp.ones(2))


def test_real_static_rejects_traced_values():
  assert checks.check_real("f", "c", 1.0, static=True) == 1.0
  with pytest.raises(TypeError, match="f: c must be known at trace time"):
    jax.jit(lambda c: checks.check_real("f", "c", c, static=True))(1.0)


# ---------------------------------------------------------------------------------------------
# Arrays: check_floating, check_mask, check_int_labels, check_shape


def test_floating():
  x = checks.check_floating("f", "x", np.ones((2, 3), np.float32), ndim=2, layout="[B, D]")
  assert isinstance(x, jax.Array) and x.shape == (2, 3)
  checks.check_floating("f", "x", jnp.ones(3, jnp.bfloat16), min_ndim=1)
  with pytest.raises(TypeError, match=r"f: x must be a floating-point array, got dtype int32;"):
    checks.check_floating("f", "x", jnp.ones(3, jnp.int32))
  with pytest.raises(TypeError, match="got dtype bool"):
    checks.check_floating("f", "x", np.ones(3, bool))
  with pytest.raises(ValueError, match=r"f: x must have 2 axes \[B, D\], got shape \(3,\)"):
    checks.check_floating("f", "x", jnp.ones(3), ndim=2, layout="[B, D]")
  with pytest.raises(ValueError, match=r"f: x must have at least one axis, got shape \(\)"):
    checks.check_floating("f", "x", 1.0, min_ndim=1)
  # Tracers: only the dtype and shape are read.
  jax.jit(lambda x: checks.check_floating("f", "x", x, ndim=1))(jnp.ones(3))


def test_mask():
  assert checks.check_mask("f", "where", None, (2, 3)).tolist() == [[True] * 3] * 2
  got = checks.check_mask("f", "where", jnp.array([True, False, True]), (2, 3))
  assert got.shape == (2, 3)
  with pytest.raises(TypeError, match="f: where must be a boolean mask, got dtype int32; pass"):
    checks.check_mask("f", "where", jnp.array([1, 0, 1]), (3,))
  with pytest.raises(TypeError, match="got dtype float32"):
    checks.check_mask("f", "where", jnp.ones(3), (3,))
  message = r"f: where has shape \(2,\), which does not broadcast to the scores' shape \(3,\)"
  with pytest.raises(ValueError, match=message):
    checks.check_mask("f", "where", jnp.array([True, False]), (3,))
  # broadcast=False: exactly the shape, named after what it is the shape of.
  with pytest.raises(ValueError, match=r"f: where must be a boolean mask shaped like the labels"):
    checks.check_mask("f", "where", jnp.array([True]), (3,), like="labels", broadcast=False)
  assert checks.check_mask("f", "m", np.ones(3, bool), (3,), broadcast=False).shape == (3,)


@pytest.mark.parametrize("to_array", [np.asarray, jnp.asarray], ids=["numpy", "jax"])
def test_int_labels(to_array):
  checks.check_int_labels("f", "labels", to_array(np.array([3, 1, 3])))
  with pytest.raises(TypeError, match="f: labels must be integers .*got dtype float32"):
    checks.check_int_labels("f", "labels", to_array(np.zeros(3, np.float32)))
  with pytest.raises(TypeError, match="got dtype bool"):
    checks.check_int_labels("f", "labels", to_array(np.ones(3, bool)))
  checks.check_int_labels("f", "labels", to_array(np.ones(3, bool)), allow_bool=True)
  with pytest.raises(ValueError, match=r"f: y must be a 1-D array of class labels \[B\]"):
    checks.check_int_labels("f", "y", to_array(np.zeros((2, 2), np.int32)), layout="[B]")
  checks.check_int_labels("f", "labels", to_array(np.zeros(0, np.int32)))
  with pytest.raises(ValueError, match="f: labels must hold at least one class label"):
    checks.check_int_labels("f", "labels", to_array(np.zeros(0, np.int32)), allow_empty=False)


def test_int_labels_on_tracers():
  jax.jit(lambda y: checks.check_int_labels("f", "labels", y) or y)(jnp.arange(3))
  with pytest.raises(TypeError, match="f: labels must be integers"):
    jax.jit(lambda y: checks.check_int_labels("f", "labels", y) or y)(jnp.ones(3))


def test_shape():
  checks.check_shape("f", "x", np.ones((4, 2)), (None, 2))
  checks.check_shape("f", "x", [[1, 2]], (1, 2))
  with pytest.raises(ValueError, match=r"^f: x must be shaped \(_, 3\), got shape \(4, 2\)\.$"):
    checks.check_shape("f", "x", np.ones((4, 2)), (None, 3))
  with pytest.raises(ValueError, match=r"f: x must be shaped \(4,\), got shape \(4, 1\)"):
    checks.check_shape("f", "x", np.ones((4, 1)), (4,))
  with pytest.raises(ValueError, match=r"^f: x must be shaped \[B, 3\], got shape \(2,\)\. Fix it"):
    checks.check_shape("f", "x", jnp.ones(2), (None, 3), layout="[B, 3]", hint="Fix it.")


def test_callable():
  checks.check_callable("f", "g", jnp.sum)
  with pytest.raises(TypeError, match="f: g must be a function, got str 'sum'. Pass jnp.sum."):
    checks.check_callable("f", "g", "sum", hint="Pass jnp.sum.")


# ---------------------------------------------------------------------------------------------
# Every helper names the function; public functions of every module use them.


BAD_CALLS = [
  lambda: checks.check_positive_int("my_fn", "k", True),
  lambda: checks.check_int_at_least("my_fn", "k", 1.0, 2),
  lambda: checks.check_real("my_fn", "t", "x"),
  lambda: checks.check_floating("my_fn", "x", jnp.arange(3)),
  lambda: checks.check_mask("my_fn", "where", jnp.arange(3), (3,)),
  lambda: checks.check_int_labels("my_fn", "labels", np.zeros(3)),
  lambda: checks.check_shape("my_fn", "x", np.ones(2), (3,)),
  lambda: checks.check_callable("my_fn", "g", 1),
  lambda: checks.check_lists("my_fn", jnp.ones(3), jnp.ones(2), None),
  lambda: checks.check_list_weights("my_fn", jnp.ones(3), (2, 3), jnp.float32),
]


@pytest.mark.parametrize("call", BAD_CALLS)
def test_messages_start_with_the_function_name(call):
  with pytest.raises((TypeError, ValueError), match="^my_fn: "):
    call()


def test_public_functions_name_themselves():
  s, y = jnp.array([0.3, 0.2]), jnp.array([1, 0])
  calls = {
    "smoothap_loss": lambda: jaxrank.smoothap_loss(s, y, chunk_size=True),
    "blackbox_ap_loss": lambda: jaxrank.blackbox_ap_loss(s, y, interpolation=True),
    "chunked_value_and_grad": lambda: jaxrank.chunked_value_and_grad(
      lambda p, x: x, jnp.sum, chunk_size=True
    ),
    "memory.init": lambda: jaxrank.memory.init(True, 2),
    "class_balancing_weights": lambda: jaxrank.class_balancing_weights(y, where=y),
  }
  for name, call in calls.items():
    with pytest.raises(TypeError, match=f"^{re.escape(name)}: "):
      call()


def test_sharded_loss_checks_its_inputs():
  mesh = jax.make_mesh((1,), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))
  with pytest.raises(ValueError, match=r"sharded_loss: the mesh has no axis 'data'; its axes"):
    jaxrank.sharded_loss(jaxrank.smoothap_loss, mesh, "data")
  with pytest.raises(TypeError, match="sharded_loss: loss_fn must be a function"):
    jaxrank.sharded_loss("smoothap", mesh, "batch")
  loss = jaxrank.sharded_loss(jaxrank.smoothap_loss, mesh, "batch")
  with pytest.raises(TypeError, match="sharded_loss: embeddings must be a floating-point array"):
    loss(jnp.ones((4, 2), jnp.int32), jnp.arange(4))
  with pytest.raises(ValueError, match=r"sharded_loss: embeddings must have 2 axes \[B, D\]"):
    loss(jnp.ones(4), jnp.arange(4))
  with pytest.raises(ValueError, match=r"sharded_loss: labels must be shaped \[4\] or \[4, C\]"):
    loss(jnp.ones((4, 2)), jnp.arange(3))
  with pytest.raises(TypeError, match="^sharded_loss: "):  # Non-integer class labels.
    loss(jnp.ones((4, 2)), jnp.ones(4))
  embeddings, labels = jax.random.normal(jax.random.key(0), (4, 2)), jnp.arange(4) % 2
  scores, relevance, where = jaxrank.batch_retrieval(embeddings, labels)
  want = jaxrank.smoothap_loss(scores, relevance, where=where)
  np.testing.assert_allclose(jax.jit(loss)(embeddings, labels), want, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Known values of every kind get the checks of Python numbers (issue 14); traced ones none.

_S, _Y = jnp.array([[0.3, 0.2, -0.1]]), jnp.array([[1, 0, 1]])
HYPERPARAMETERS = [
  ("smoothap_loss", "temperature", -0.2, lambda v: jaxrank.smoothap_loss(_S, _Y, temperature=v)),
  ("sigmoid_step", "temperature", 0.0, lambda v: jaxrank.sigmoid_step(_S, temperature=v)),
  ("supap_loss", "temperature", 0.0, lambda v: jaxrank.supap_loss(_S, _Y, temperature=v)),
  ("supap_loss", "rho", -0.2, lambda v: jaxrank.supap_loss(_S, _Y, rho=v)),
  ("supap_negative_step", "delta", -0.2, lambda v: jaxrank.supap_negative_step(_S, delta=v)),
  (
    "roadmap_loss",
    "calibration_weight",
    -0.2,
    lambda v: jaxrank.roadmap_loss(_S, _Y, calibration_weight=v),
  ),
  (
    "roadmap_loss",
    "calibration_weight",
    1.5,
    lambda v: jaxrank.roadmap_loss(_S, _Y, calibration_weight=v),
  ),
  ("calibration_loss", "alpha", 0.5, lambda v: jaxrank.calibration_loss(_S, _Y, alpha=v)),
  (
    "blackbox_ap_loss",
    "interpolation",
    0.0,
    lambda v: jaxrank.blackbox_ap_loss(_S, _Y, interpolation=v),
  ),
  (
    "blackbox_recall_loss",
    "margin",
    -0.2,
    lambda v: jaxrank.blackbox_recall_loss(_S, _Y, margin=v),
  ),
  ("blackbox_ranks", "interpolation", -0.2, lambda v: jaxrank.blackbox_ranks(_S, v)),
  ("tanh_scale", "growth", 0.5, lambda v: jaxrank.hashing.tanh_scale(3, growth=v, every=2)),
  (
    "soft_binning_ap_loss",
    "weights",
    -0.2,
    lambda v: jaxrank.soft_binning_ap_loss(_S, _Y, weights=v),
  ),
]
FORMS = {
  "python": float,
  "jax": jnp.array,
  "numpy_scalar": np.float32,
  "numpy_0d": np.array,
}


@pytest.mark.parametrize("fn, name, bad, call", HYPERPARAMETERS, ids=lambda x: str(x)[:24])
def test_known_arrays_get_the_checks_of_numbers(fn, name, bad, call):
  messages = set()
  for form in FORMS.values():
    with pytest.raises(ValueError, match=f"^{fn}: {name}") as e:
      call(form(bad))
    # The same sentence whatever the form (the value printed as float32 or float64 aside).
    messages.add(re.sub(r"-?\d+\.\d+(e-?\d+)?", "#", str(e.value)))
  assert len(messages) == 1, messages
  jax.jit(call)(bad)  # Traced: not checked, no error.


def test_list_weights_must_be_non_negative():
  for bad in ([1.0, -0.5], [np.nan, 1.0]):
    for form in (np.array, jnp.array, list):
      with pytest.raises(ValueError, match=r"^f: weights must be non-negative, got (-0.5|nan);"):
        checks.check_list_weights("f", form(bad), (2, 3), jnp.float32)
  checks.check_list_weights("f", jnp.array([0.0, 2.0]), (2, 3), jnp.float32)
  checks.check_list_weights("f", jnp.array([True, False]), (2, 3), jnp.float32)
  jax.jit(lambda w: checks.check_list_weights("f", w, (2, 3), jnp.float32))(-jnp.ones(2))


def test_known_any():
  assert checks.known_any(np.array([False, True])) and not checks.known_any(jnp.zeros(3, bool))
  seen = []
  jax.jit(lambda m: seen.append(checks.known_any(m)) or m)(jnp.ones(2, bool))
  assert seen == [False]  # Traced: unknown, reported as no violation.
  # Under grad outside jit, a mask computed from the differentiated value is known.
  jax.grad(lambda x: seen.append(checks.known_any(x > 0)) or jnp.sum(x))(jnp.ones(2))
  assert seen == [False, True]


def test_graded_labels():
  where = jnp.array([True, True, False])
  checks.check_graded_labels("f", jnp.array([0, 3, -1]), where)  # The masked -1 is not read.
  for labels in (jnp.array([0, -2, 1]), np.array([0.0, -0.5, 1.0])):
    with pytest.raises(ValueError, match=r"^f: graded labels must be >= 0 .*got -(2|0.5) at a"):
      checks.check_graded_labels("f", labels, where)
  jax.jit(lambda y: checks.check_graded_labels("f", y, where) or y)(-jnp.ones(3))


def test_class_indices():
  where = jnp.array([True, True, False])
  checks.check_class_indices("f", jnp.array([0, 2, 7]), where, 3, fix="Fix.")  # 7 is masked.
  with pytest.raises(
    ValueError,
    match=r"^f: labels must be class indices in \[0, 3\), got -1 at a valid item; Fix\.$",
  ):
    checks.check_class_indices("f", np.array([0, -1, 1]), where, 3, fix="Fix.")
  jax.jit(lambda y: checks.check_class_indices("f", y, where, 3, fix="Fix.") or y)(jnp.full(3, 9))


def test_in_range_allows_rounding_only():
  where = jnp.array([True, True, False])
  for dtype in (jnp.float32, jnp.bfloat16, jnp.float16):
    eps = float(jnp.finfo(dtype).eps)
    ok = jnp.array([1 + 4 * eps, -1 - 1e-3, 50.0], dtype)  # The masked 50 is not read.
    checks.check_in_range("f", "scores", ok, where, -1.0, 1.0)
    checks.check_in_range("f", "scores", jnp.array([np.nan, 0.0, 0.0], dtype), where, -1.0, 1.0)
  for bad in ([1.01, 0.0, 0.0], [0.0, -np.inf, 0.0]):
    with pytest.raises(ValueError, match=r"^f: scores must lie in \[-1, 1\] .*got (1.01|-inf) at"):
      checks.check_in_range("f", "scores", jnp.array(bad), where, -1.0, 1.0, hint="Map them.")
  with pytest.raises(ValueError, match=r"\[0, 4\] \(up to rounding\), got 4.01 at a valid item\."):
    checks.check_in_range("f", "d", jnp.array([4.01]), jnp.array([True]), 0.0, 4.0)
  jax.jit(lambda s: checks.check_in_range("f", "s", s, where, -1.0, 1.0) or s)(jnp.full(3, 9.0))
  # Under grad outside jit the mask is known but the values are not: the count is reported.
  with pytest.raises(ValueError, match=r"got 2 valid values outside it\."):
    jax.grad(lambda s: checks.check_in_range("f", "s", s, where, -1.0, 1.0) or jnp.sum(s))(
      jnp.array([2.0, 3.0, 0.0])
    )


# ---------------------------------------------------------------------------------------------
# Labels and masks shared by many lists broadcast against the scores, as rax allows.


@pytest.mark.parametrize("name", listing.list_level_functions())
def test_labels_and_mask_broadcast_to_the_scores(name):
  fn = functools.partial(getattr(jaxrank, name), **listing.REQUIRED.get(name, {}))
  scores, labels, mask = listing.inputs(name)
  row_labels, row_mask = labels[1], mask[1]  # One list's labels and mask, for every list.
  tiled = (np.broadcast_to(row_labels, labels.shape), np.broadcast_to(row_mask, mask.shape))
  if name.endswith("_loss"):
    value_and_grad = lambda y, m: jax.value_and_grad(lambda s: fn(s, y, where=m))(scores)
    got, got_grad = value_and_grad(row_labels, row_mask)
    want, want_grad = value_and_grad(*tiled)
    np.testing.assert_array_equal(got_grad, want_grad)
  else:
    got = fn(scores, row_labels, where=row_mask, reduce_fn=None)
    want = fn(scores, tiled[0], where=tiled[1], reduce_fn=None)
  np.testing.assert_array_equal(got, want)


def test_labels_that_do_not_broadcast_to_the_scores():
  with pytest.raises(
    ValueError,
    match=r"^ap_metric: labels have shape \(2, 1, 3\) but scores have "
    r"shape \(2, 3\); they must be equal or broadcast to it",
  ):
    jaxrank.ap_metric(jnp.ones((2, 3)), jnp.ones((2, 1, 3)))
  with pytest.raises(ValueError, match=r"labels have shape \(2,\) but scores have shape \(2, 3\)"):
    jaxrank.ap_metric(jnp.ones((2, 3)), jnp.ones(2))


# ---------------------------------------------------------------------------------------------
# Traced inputs: checked inside jaxrank.traced_checks, through checkify.

_S = jnp.array([[0.5, 0.9, -0.2, 0.1], [0.3, -0.4, 0.8, 0.0]])
_Y = jnp.array([[1, 0, 1, 0], [0, 1, 1, 0]])
# name -> (function of one traced array, a bad value of it, a good value, the eager message).
_TRACED = {
  "range": (
    lambda s: jaxrank.fastap_loss(s, _Y),
    2 * _S + 1,
    _S,
    r"fastap_loss: scores must lie in \[-1, 1\]",
  ),
  "tie_aware_range": (
    lambda s: jaxrank.tie_aware_ap_loss(s, _Y),
    _S - 3,
    _S,
    r"tie_aware_ap_loss: scores must lie in",
  ),
  "weights": (
    lambda w: jaxrank.soft_binning_ap_loss(_S, _Y, weights=w),
    jnp.array([1.0, -1.0]),
    jnp.array([1.0, 2.0]),
    "soft_binning_ap_loss: weights must be non-negative",
  ),
  "graded_labels": (
    lambda y: jaxrank.ndcg_metric(_S, y),
    jnp.array([[2, 0, -1, 0], [0, 1, 1, 0]]),
    _Y,
    r"ndcg_metric: graded labels must be >= 0",
  ),
  "hamming": (
    lambda d: jaxrank.hamming_tie_aware_ap_metric(d, _Y, num_bits=4),
    jnp.array([[0.0, 1.5, 2, 4], [1, 2, 3, 4]]),
    jnp.array([[0.0, 1, 2, 4], [1, 2, 3, 4]]),
    r"distances must be integers in \[0, num_bits\]",
  ),
  "hyperparameter": (
    lambda v: jaxrank.blackbox_ap_loss(_S, _Y, interpolation=v),
    jnp.float32(-1.0),
    jnp.float32(0.5),
    r"blackbox_ap_loss: interpolation must be > 0",
  ),
  "temperature": (
    lambda t: jaxrank.smoothap_loss(_S, _Y, temperature=t),
    jnp.float32(0.0),
    jnp.float32(0.01),
    r"smoothap_loss: temperature must be > 0",
  ),
}


@pytest.mark.parametrize("name", sorted(_TRACED))
def test_traced_checks_report_what_the_eager_check_raises(name):
  fn, bad, good, message = _TRACED[name]
  with pytest.raises(ValueError, match=message):
    fn(bad)  # Eagerly: the ValueError.
  with jaxrank.traced_checks():
    error, _ = checkify.checkify(jax.jit(lambda x: fn(x)))(bad)
    clean, _ = checkify.checkify(jax.jit(lambda x: fn(x)))(good)
  assert re.search(message, error.get()), error.get()
  assert clean.get() is None
  # Outside the block a traced value is not checked: jit runs, and nothing is reported.
  unchecked, _ = checkify.checkify(jax.jit(lambda x: fn(x)))(bad)
  assert unchecked.get() is None
