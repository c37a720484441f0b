"""rax's own metric tests, run against jaxrank: what a rax user can rely on (issue 37).

rax 0.4.0 ships its tests in its wheel. This module loads `rax/_src/metrics_test.py` from the
installed package (never a copy) with `from rax._src import metrics` bound to `RaxAdapter`, a thin
namespace that gives each of rax's metric names the jaxrank function that computes it, translating
rax's signature (`scores, labels, *, where, segments, topn, weights, reduce_fn`):

* `recall_metric` is `relevant_fraction_at_k_metric` (jaxrank's `recall_at_k_metric` is metric
  learning's hit rate, another metric), `precision_metric` is `precision_at_k_metric`, and rax's
  `topn=None` (the whole list) is `topn=` the list's length there;
* rax's per-item `weights` are jaxrank's `item_weights` (jaxrank's `weights` are per list);
* `segments` pass through: jaxrank's segmented metrics follow rax's convention (each segment one
  list, its value at its first valid item with `reduce_fn=None`), tested below against rax itself;
* rax accepts a mask of any dtype (`where=jnp.array([1, 0])`), jaxrank only a boolean one (a float
  mask is usually a mistake, and test_contract.py tests the `TypeError`): the adapter casts.

Every test case of rax's `MetricsTest` and `RetrievedItemsTest` becomes one pytest case here. Each
either passes or is listed in `DIFFERENCES` with its reason; a listed case that passes fails too
(the table must not go stale). Each difference is tested as jaxrank's own convention below, and
documented in the docstring of the jaxrank metric concerned. rax's `load_tests` doctests are rax's
docstring examples of its own functions, not part of the contract, and are not run.

rax's loss tests (`losses_test.py`) test softmax, ListMLE, pairwise and pointwise losses, none of
which jaxrank has (its losses are AP, NDCG and recall surrogates), so none is run here:
`test_rax_has_no_loss_jaxrank_has` asserts that, so that a loss added under one of rax's names is
brought here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import pathlib
import sys
import types
import unittest
from unittest import mock

import chex
import jax.numpy as jnp
import numpy as np
import pytest
import rax  # The dev extra pins rax==0.4.0; without it this module fails (it never skips).

import jaxrank

rax_src = importlib.import_module("rax._src")


def _mask(where):
  return None if where is None else jnp.asarray(where).astype(bool)


def _whole_list(topn, scores):
  return jnp.shape(scores)[-1] if topn is None else topn


def _adapter(fn, *, topn_required=False, weights=False, topn=True):
  """rax's signature -> `fn`'s; `segments` pass through as they are."""

  def metric(scores, labels, *, where=None, reduce_fn=jnp.mean, **kwargs):
    extra = {}
    if kwargs.get("segments") is not None:
      extra["segments"] = kwargs.pop("segments")
    kwargs.pop("segments", None)
    if topn:
      cutoff = kwargs.pop("topn", None)
      extra["topn"] = _whole_list(cutoff, scores) if topn_required else cutoff
    if weights and kwargs.get("weights") is not None:
      extra["item_weights"] = kwargs.pop("weights")
    kwargs.pop("weights", None)
    if kwargs:
      raise TypeError(f"{fn.__name__}: no jaxrank counterpart for {sorted(kwargs)}")
    return fn(scores, labels, where=_mask(where), reduce_fn=reduce_fn, **extra)

  metric.__name__ = fn.__name__
  return metric


RaxAdapter = types.SimpleNamespace(
  mrr_metric=_adapter(jaxrank.mrr_metric),
  recall_metric=_adapter(jaxrank.relevant_fraction_at_k_metric, topn_required=True),
  precision_metric=_adapter(jaxrank.precision_at_k_metric, topn_required=True),
  ap_metric=_adapter(jaxrank.ap_metric),
  dcg_metric=_adapter(jaxrank.dcg_metric, weights=True),
  ndcg_metric=_adapter(jaxrank.ndcg_metric, weights=True),
  opa_metric=_adapter(jaxrank.opa_metric, topn=False),
)
"""rax's metric names -> jaxrank's functions behind rax's signature (the rax guide's table)."""


@contextlib.contextmanager
def _rax_metrics_bound_to(adapter):
  """`from rax._src import metrics` gives `adapter` while the test module is executed."""
  with (
    mock.patch.dict(sys.modules, {"rax._src.metrics": adapter}),
    mock.patch.object(rax_src, "metrics", adapter),
  ):
    yield


def load_rax_tests(filename: str, adapter) -> types.ModuleType:
  """rax's test module `filename`, read from the installed package, executed against `adapter`."""
  assert rax_src.__file__ is not None
  path = pathlib.Path(rax_src.__file__).parent / filename
  spec = importlib.util.spec_from_file_location(f"rax_on_jaxrank_{path.stem}", path)
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  with _rax_metrics_bound_to(adapter):
    spec.loader.exec_module(module)  # Parameters bind the adapter's functions at class creation.
  return module


RAX_METRICS_TEST = load_rax_tests("metrics_test.py", RaxAdapter)
RAX_CLASSES = (RAX_METRICS_TEST.MetricsTest, RAX_METRICS_TEST.RetrievedItemsTest)


def rax_cases() -> dict[str, unittest.TestCase]:
  """`Class.test_name` -> the test case, for every case of rax's metric test classes."""
  loader = unittest.TestLoader()
  cases = {}
  for cls in RAX_CLASSES:
    for case in loader.loadTestsFromTestCase(cls):
      assert isinstance(case, unittest.TestCase)  # A class's suite holds its cases only.
      cases[f"{cls.__name__}.{case._testMethodName}"] = case
  return cases


CASES = rax_cases()

PRIVATE_HELPER = (
  "tests rax's private `metrics._retrieved_items`, not an API; jaxrank's metrics follow the same "
  "rule (no -inf, masked or beyond-topn item is retrieved), tested through its public metrics"
)
# rax case -> why jaxrank differs. A case here that passes fails `test_rax_case`.
DIFFERENCES: dict[str, str] = {
  **{name: PRIVATE_HELPER for name in CASES if name.startswith("RetrievedItemsTest.")},
}


def test_the_tables_name_rax_cases():
  assert set(DIFFERENCES) <= set(CASES), set(DIFFERENCES) - set(CASES)
  # rax 0.4.0: 95 cases of its metrics and 9 of its private helper; a new version is reviewed here.
  assert len(CASES) == 104 and rax.__version__ == "0.4.0"
  assert sum(name.startswith("MetricsTest.") for name in CASES) == 95


def _run(case: unittest.TestCase) -> list[str]:
  """The case's failures and errors (empty when it passes)."""
  result = unittest.TestResult()
  case.run(result)
  return [text for _, text in result.failures + result.errors]


@pytest.mark.parametrize("name", sorted(CASES))
def test_rax_case(name):
  problems = _run(CASES[name])
  if name in DIFFERENCES:
    assert problems, f"{name} passes: remove it from DIFFERENCES ({DIFFERENCES[name]})"
  else:
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# The differences, as jaxrank's own conventions.


# Segments (jaxrank/_src/segmented.py): two rows of 7 items, packing lists of 3, 2 and 2 items and
# of 4 and 3, the ids unsorted and the same ids in both rows; the first item of one segment masked.
# No ties, and every segment has a relevant valid item.
SEGMENTS = jnp.array([[4, 1, 4, 9, 1, 9, 4], [1, 1, 4, 1, 4, 4, 1]])
SEGMENT_SCORES = jnp.array(
  [[0.3, 0.9, 0.1, 0.5, 0.2, 0.8, 0.7], [0.6, 0.1, 0.4, 0.8, 0.9, 0.2, 0.5]]
)
SEGMENT_LABELS = jnp.array([[1, 0, 0, 1, 2, 0, 1], [0, 1, 1, 0, 2, 0, 1]])
SEGMENT_WHERE = jnp.array([[True] * 7, [True, True, False, True, True, True, True]])
FIRST_ITEMS = np.array([[1, 1, 0, 1, 0, 0, 0], [1, 0, 0, 0, 1, 0, 0]], bool)  # Of each segment.
RAX_SEGMENTED = [
  ("mrr_metric", {}),
  ("mrr_metric", {"topn": 1}),
  ("ap_metric", {}),
  ("ap_metric", {"topn": 2}),
  ("dcg_metric", {}),
  ("ndcg_metric", {"topn": 2}),
  ("precision_metric", {"topn": 2}),
  ("recall_metric", {"topn": 1}),
]


@pytest.mark.parametrize("name,kwargs", RAX_SEGMENTED, ids=lambda x: str(x))
def test_segments_give_rax_values_per_item(name, kwargs):
  """`reduce_fn=None` gives `[..., n]` in both libraries: each segment's value at its first valid
  item, 0 elsewhere; where every segment is defined, the means agree too."""
  args = (SEGMENT_SCORES, SEGMENT_LABELS)
  kwargs = dict(kwargs, where=SEGMENT_WHERE, segments=SEGMENTS)
  ours = getattr(RaxAdapter, name)(*args, reduce_fn=None, **kwargs)
  theirs = getattr(rax, name)(*args, reduce_fn=None, **kwargs)
  chex.assert_shape(ours, SEGMENTS.shape)
  np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
  assert np.all(np.asarray(ours)[~FIRST_ITEMS] == 0)
  np.testing.assert_allclose(
    getattr(RaxAdapter, name)(*args, **kwargs), getattr(rax, name)(*args, **kwargs), rtol=1e-6
  )
  np.testing.assert_allclose(
    getattr(RaxAdapter, name)(*args, reduce_fn=jnp.sum, **kwargs), np.sum(ours), rtol=1e-6
  )


def test_segments_without_relevant_item_are_left_out():
  """A segment without a relevant valid item gives 0 in both libraries; jaxrank leaves it out of
  the mean, as it does a list (rax counts it)."""
  labels = SEGMENT_LABELS.at[0, 3].set(0)  # Segment 9 of the first row: no relevant item left.
  kwargs = dict(where=SEGMENT_WHERE, segments=SEGMENTS)
  ours = jaxrank.ap_metric(SEGMENT_SCORES, labels, reduce_fn=None, **kwargs)
  theirs = rax.ap_metric(SEGMENT_SCORES, labels, reduce_fn=None, **kwargs)
  np.testing.assert_allclose(ours, theirs, rtol=1e-6)
  assert float(ours[0, 3]) == 0
  total = float(np.sum(ours))
  assert float(jaxrank.ap_metric(SEGMENT_SCORES, labels, **kwargs)) == pytest.approx(total / 4)
  assert float(rax.ap_metric(SEGMENT_SCORES, labels, **kwargs)) == pytest.approx(total / 5)
  # reduce_fn gets the defined segments' first items.
  seen = {}

  def reduce_fn(values, *, where):
    seen["where"] = where
    return jnp.sum(values, where=where)

  jaxrank.ap_metric(SEGMENT_SCORES, labels, reduce_fn=reduce_fn, **kwargs)
  defined = FIRST_ITEMS.copy()
  defined[0, 3] = False
  np.testing.assert_array_equal(seen["where"], defined)


def test_segment_ids_name_lists_within_a_row():
  """Only equality of ids within a row matters: relabelled ids give the same values, and a row
  holding one segment is that list."""
  kwargs = dict(where=SEGMENT_WHERE, reduce_fn=None)
  want = jaxrank.ndcg_metric(SEGMENT_SCORES, SEGMENT_LABELS, segments=SEGMENTS, **kwargs)
  relabelled = jnp.where(SEGMENTS == 4, -70, jnp.where(SEGMENTS == 1, 2**30, SEGMENTS))
  np.testing.assert_allclose(
    jaxrank.ndcg_metric(SEGMENT_SCORES, SEGMENT_LABELS, segments=relabelled, **kwargs),
    want,
    rtol=1e-6,
  )
  one = jaxrank.ndcg_metric(
    SEGMENT_SCORES, SEGMENT_LABELS, segments=jnp.zeros_like(SEGMENTS), **kwargs
  )
  np.testing.assert_allclose(
    one[:, 0], jaxrank.ndcg_metric(SEGMENT_SCORES, SEGMENT_LABELS, **kwargs), rtol=1e-6
  )


def test_retrieved_items_rule_through_the_public_metrics():
  """What rax's `_retrieved_items` tests: items scored -inf, masked or beyond topn are not
  retrieved. One relevant item at each of those places, and one retrieved."""
  scores = jnp.array([-jnp.inf, 1.0, 4.0, 3.0, 2.0])
  labels = jnp.array([1, 1, 1, 0, 1])
  where = jnp.array([True, False, True, True, True])
  fraction = jaxrank.relevant_fraction_at_k_metric
  # Relevant valid items: -inf (not retrieved), 4.0 (rank 1), 2.0 (rank 3, beyond topn=2).
  assert float(fraction(scores, labels, where=where, topn=2)) == pytest.approx(1 / 3)
  assert float(fraction(scores, labels, where=where, topn=3)) == pytest.approx(2 / 3)
  assert float(fraction(scores, labels, where=where, topn=5)) == pytest.approx(2 / 3)


def test_where_must_be_boolean_the_adapter_casts():
  with pytest.raises(TypeError, match="^ap_metric: where must be"):
    jaxrank.ap_metric(jnp.array([0.3, 0.2]), jnp.array([1, 0]), where=jnp.array([1, 1]))
  got = RaxAdapter.ap_metric(jnp.array([0.3, 0.2]), jnp.array([0, 1]), where=jnp.array([1, 1]))
  assert float(got) == 0.5


# The conventions the passing cases rely on (documented in jaxrank/_src/metrics.py).


@pytest.mark.parametrize(
  "fn", [jaxrank.mrr_metric, jaxrank.ap_metric, jaxrank.dcg_metric, jaxrank.ndcg_metric]
)
def test_neg_inf_is_not_retrieved(fn):
  """rax's `test_treats_neginf_as_unranked_items`, and the difference with masking."""
  scores = jnp.array([-jnp.inf, 5.0, 2.0, -jnp.inf, 1.0])
  labels = jnp.array([1, 0, 1, 0, 0])
  dropped = fn(scores[1:], labels[1:])
  unretrieved = fn(scores, labels)
  masked = fn(scores, labels, where=jnp.isfinite(scores))
  np.testing.assert_allclose(masked, dropped, rtol=1e-6)  # where= removes items...
  if fn is not jaxrank.mrr_metric:  # ...-inf keeps a relevant item in R and the ideal DCG.
    assert float(unretrieved) < float(dropped) or fn is jaxrank.dcg_metric
  want = {
    jaxrank.mrr_metric: 1 / 2,
    jaxrank.ap_metric: (1 / 2) / 2,
    jaxrank.dcg_metric: 1 / math.log2(3),
    jaxrank.ndcg_metric: (1 / math.log2(3)) / (1 + 1 / math.log2(3)),
  }[fn]
  np.testing.assert_allclose(unretrieved, want, rtol=1e-6)


def test_rax_has_no_loss_jaxrank_has():
  rax_losses = {name for name in dir(rax) if name.endswith("_loss")}
  assert "softmax_loss" in rax_losses and len(rax_losses) >= 10
  assert not rax_losses & set(jaxrank.__all__)
