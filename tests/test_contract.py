"""The list-level contract: one table of every list-level loss and metric, one test per property.

Every function of `jaxrank.__all__` that takes `scores [..., n]` (or integer Hamming `distances`),
`labels [..., n]`, a keyword `where` and `reduce_fn` follows the conventions of README.md
("Conventions") and STYLE.md (rax's):

* `jit(f) == f`, `vmap` over lists equals leading batch axes, `where` equals slicing, masked padding
  (even NaN, inf) changes nothing, jointly permuting the items changes nothing, a mask `[n]`
  broadcasts; for losses, the same of their gradients;
* `segments` (several lists packed into one row, `jaxrank._src.segmented`): each segment gives the
  value and the gradients of its list given alone, padded and masked, its value placed at its first
  valid item (`reduce_fn=None`), under `jit` and `vmap` with traced segments too;
* a list without a relevant valid item gives 0 and is left out of the reduction;
  `sum(f(reduce_fn=None)) == f(reduce_fn=jnp.sum)`; `reduce_fn` is called with `where=` the lists
  that are defined; a batch without a defined list gives 0 and a zero gradient;
* degenerate lists (all tied, all relevant, one valid item, huge gaps) give finite values and
  finite gradients;
* a valid NaN score makes its list NaN, a masked NaN is ignored, and a list without a relevant
  item stays 0 even with a NaN;
* float32 in, float32 out; bfloat16 and float16 are accumulated in float32 (the value equals the
  value of the same scores cast to float32); float64 in, float64 out; integer, boolean and
  floating labels give the same values; wrong dtypes raise `TypeError` at trace time, wrong
  shapes `ValueError`.

`TABLE` lists every function with the fixed hyperparameters that make the tests meaningful, the
loop-based float64 reference it is compared with where one exists, the kind of its gradient, and,
visibly, each property that fails today (`xfail`, strict, with what fails). The properties that do
not hold for a function by design are listed, with the reason, in one table, `EXEMPTIONS`: the
function is left out of that property's parametrisation (not skipped), and
`test_exemptions_name_rows_and_properties` keeps the table from naming a row or property that does
not exist. The comparisons with the references on random
lists, brute force over orderings and the papers' identities live in the per-module test files;
this module checks the conventions only.

chex: its tree assertions compare values and gradients together (`chex.assert_trees_all_close`);
`chex.variants` is not used, since `test_jit_equals_eager` compares the jitted and eager results
directly in one test (running every test twice, with and without jit, would double the compile
time and compare each variant only with expectations, not with each other).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import reference_hashing
import reference_hierarchical
import reference_histogram
import reference_pairwise
import reference_rank_losses
import reference_smooth_rank
from helpers import precision

import jaxrank
from jaxrank._src import ranking

BATCH = (3, 4)
N = 8  # Lists of 8 (and of 6: sliced, or before padding), divisible by the gap's 2 batches.
NUM_BITS = 6

# Property names: the second key of `EXEMPTIONS` and the keys of `Entry.xfail`.
JIT = "jit"
VMAP = "vmap"
WHERE_SLICING = "where_slicing"
WHERE_BROADCAST = "where_broadcast"
PADDING = "masked_padding"
PERMUTATION = "permutation"
PERMUTATION_GRADIENT = "permutation_gradient"
INCREASING = "increasing_transform"
REDUCTIONS = "reductions"
GRADIENT_LINEAR = "gradient_linear"
NO_DEFINED_LIST = "no_defined_list"
DEGENERATE = "degenerate_lists"
NAN = "nan"
LABELS = "labels"
SCORE_DTYPES = "score_dtypes"
INPUT_ERRORS = "input_errors"
SEGMENTS = "segments"
PROPERTIES = (
  JIT,
  VMAP,
  WHERE_SLICING,
  WHERE_BROADCAST,
  PADDING,
  PERMUTATION,
  PERMUTATION_GRADIENT,
  INCREASING,
  REDUCTIONS,
  GRADIENT_LINEAR,
  NO_DEFINED_LIST,
  DEGENERATE,
  NAN,
  LABELS,
  SCORE_DTYPES,
  INPUT_ERRORS,
  SEGMENTS,
)


class Entry(NamedTuple):
  """One list-level function with fixed hyperparameters.

  Attributes:
    name: the test id.
    fn: `fn(scores, labels, *, where, reduce_fn)`, the hyperparameters fixed.
    ref: the loop-based float64 reference of one list, `ref(scores, labels, where)`, or None.
    gradient: "derivative" (a loss whose gradient is its derivative), "interpolation" (RaMBO's
      blackbox gradient, not a derivative), or "none" (an exact metric or a diagnostic: piecewise
      constant, its gradient is not tested).
    inputs: "scores" (floating, higher is better) or "distances" (integer Hamming distances in
      `[0, NUM_BITS]`, smaller is better).
    graded: whether the labels are grades (gain `2**label - 1`) rather than relevant iff `>= 1`.
    dtype: the dtype of the scores in the tests of the conventions (float64 unless said).
    xfail: property -> what fails today (a strict xfail: a bug for another issue).
    defined: `(labels, where) -> [...]`, the lists that enter the reduction, or None for those
      with a relevant valid item (`reference.has_relevant`).
  """

  name: str
  fn: Callable[..., jax.Array]
  ref: Callable[..., float] | None
  gradient: str
  inputs: str = "scores"
  graded: bool = False
  dtype: Any = np.float64
  xfail: dict[str, str] = {}
  defined: Callable[..., np.ndarray] | None = None


# Reasons shared by several entries.
SURROGATE = "a surrogate of the score values: a strictly increasing transform changes it"
DISTANCES = "integer Hamming distances: a transform of them is not a valid input"
BATCHES_BY_POSITION = (
  "batches are consecutive positions of the list: masking, slicing, padding or permuting moves "
  "items between batches"
)
MARGIN = "the margin shifts the scores by a fixed amount: not a function of the order alone"
TIES_BY_POSITION = (
  "tied scores are ranked by position (RaMBO's convention, documented in blackbox_ranks): the "
  "interpolated gradients of tied items follow their order in the list"
)
SEGMENTS_BY_POSITION = (
  "a segment keeps its items' positions in the packed row, and the batches are consecutive "
  "positions: the same as masking the other segments in place (`test_segments_of_the_gap_are_"
  "masks_in_place`), not as the padded list"
)
BLACKBOX_NOT_LINEAR = (
  "the blackbox backward is not linear in the incoming cotangent (Algorithm 1 perturbs the "
  "scores by interpolation times it): the gradient of the mean is not the gradient of the sum / "
  "count"
)


def _ref(fn, **kwargs):
  return functools.partial(fn, **kwargs) if kwargs else fn


def _metric(name, fn, ref, *, graded=False, defined=None, **kwargs):
  return Entry(
    name,
    functools.partial(fn, **kwargs),
    _ref(ref, **kwargs),
    "none",
    graded=graded,
    defined=defined,
  )


def _hamming(name, fn, ref, *, graded=False):
  return Entry(
    name,
    functools.partial(fn, num_bits=NUM_BITS),
    _ref(ref, num_bits=NUM_BITS),
    "none",
    inputs="distances",
    graded=graded,
  )


def _loss(
  name, fn, ref, *, graded=False, gradient="derivative", dtype=np.float64, xfail=None, **kwargs
):
  return Entry(
    name,
    functools.partial(fn, **kwargs),
    None if ref is None else _ref(ref, **kwargs),
    gradient,
    graded=graded,
    dtype=dtype,
    xfail=xfail or {},
  )


def _generic_smooth_rank_ref(scores, labels, where, **steps):
  if not reference.has_relevant(labels, where):
    return 0.0
  return 1 - reference_smooth_rank.smooth_rank_ap(scores, labels, where, **steps)


def _on_branch(branch, fn):
  """`fn` with `descending_ranks` forced to `branch` while it runs or is traced (None: `fn`)."""
  if branch is None:
    return fn

  @functools.wraps(fn)
  def forced(*args, **kwargs):
    with ranking.descending_ranks_branch(branch):
      return fn(*args, **kwargs)

  return forced


rh, rs, rx = reference_histogram, reference_smooth_rank, reference_hashing
rp = reference_pairwise
rr = reference_rank_losses
TABLE = [
  # Exact metrics.
  _metric("ap", jaxrank.ap_metric, reference.ap),
  _metric("tie_aware_ap", jaxrank.tie_aware_ap_metric, reference.tie_aware_ap),
  _metric("ndcg", jaxrank.ndcg_metric, reference.ndcg, graded=True),
  _metric("ndcg@3", jaxrank.ndcg_metric, reference.ndcg, graded=True, topn=3),
  _metric("tie_aware_ndcg", jaxrank.tie_aware_ndcg_metric, reference.tie_aware_ndcg, graded=True),
  _metric(
    "tie_aware_ndcg@3", jaxrank.tie_aware_ndcg_metric, reference.tie_aware_ndcg, graded=True, topn=3
  ),
  _metric("recall@1", jaxrank.recall_at_k_metric, reference.recall_at_k, topn=1),
  _metric("recall@3", jaxrank.recall_at_k_metric, reference.recall_at_k, topn=3),
  _metric("precision@2", jaxrank.precision_at_k_metric, reference.precision_at_k, topn=2),
  _metric("precision@10", jaxrank.precision_at_k_metric, reference.precision_at_k, topn=10),
  _metric("map_at_r", jaxrank.map_at_r_metric, reference.map_at_r),
  _metric("ap@3", jaxrank.ap_metric, reference.ap, topn=3),
  _metric("mrr", jaxrank.mrr_metric, reference.mrr),
  _metric("mrr@2", jaxrank.mrr_metric, reference.mrr, topn=2),
  _metric("dcg", jaxrank.dcg_metric, reference.dcg, graded=True),
  _metric("dcg@3", jaxrank.dcg_metric, reference.dcg, graded=True, topn=3),
  _metric(
    "relevant_fraction@3",
    jaxrank.relevant_fraction_at_k_metric,
    reference.relevant_fraction_at_k,
    topn=3,
  ),
  # Labels compared as grades; defined where two valid items have different labels.
  _metric(
    "opa", jaxrank.opa_metric, reference.opa, graded=True, defined=reference.has_ordered_pair
  ),
  # Hierarchical metrics (Ramzi et al. 2022): grades as relevances (H-AP) or levels (ASI).
  _metric("hap", jaxrank.hap_metric, reference_hierarchical.hap, graded=True),
  _metric(
    "tie_aware_hap", jaxrank.tie_aware_hap_metric, reference_hierarchical.tie_aware_hap, graded=True
  ),
  _metric("asi", jaxrank.asi_metric, reference_hierarchical.asi, graded=True),
  _hamming("hamming_ap", jaxrank.hamming_tie_aware_ap_metric, rx.hamming_ap_t),
  _hamming("hamming_ndcg", jaxrank.hamming_tie_aware_ndcg_metric, rx.hamming_ndcg_t, graded=True),
  # Histogram losses (Cakir et al. 2019; Revaud et al. 2019).
  _loss("fastap", jaxrank.fastap_loss, rh.fastap_loss),
  _loss("soft_binning_ap", jaxrank.soft_binning_ap_loss, rh.soft_binning_ap_loss),
  # Tie-aware relaxations (He et al. 2018).
  _loss("tie_aware_ap_loss", jaxrank.tie_aware_ap_loss, rx.tie_aware_ap_loss),
  _loss(
    "simplified_tie_aware_ap_loss",
    jaxrank.simplified_tie_aware_ap_loss,
    rx.simplified_tie_aware_ap_loss,
  ),
  _loss("tie_aware_ndcg_loss", jaxrank.tie_aware_ndcg_loss, rx.tie_aware_ndcg_loss, graded=True),
  _loss(
    "simplified_tie_aware_ndcg_loss",
    jaxrank.simplified_tie_aware_ndcg_loss,
    rx.simplified_tie_aware_ndcg_loss,
    graded=True,
  ),
  # Smooth-rank losses (Brown et al. 2020; Ramzi et al. 2021). A temperature of 0.1 on
  # similarities in [-1, 1] keeps the sigmoids away from saturation.
  _loss("smoothap", jaxrank.smoothap_loss, rs.smoothap_loss, temperature=0.1),
  _loss("supap", jaxrank.supap_loss, rs.supap_loss),
  _loss("calibration", jaxrank.calibration_loss, rs.calibration_loss),
  _loss("roadmap", jaxrank.roadmap_loss, rs.roadmap_loss),
  Entry(
    "smooth_rank_ap",
    functools.partial(
      jaxrank.smooth_rank_ap_loss,
      positive_step_fn=functools.partial(jaxrank.sigmoid_step, temperature=0.05),
      negative_step_fn=functools.partial(
        jaxrank.supap_negative_step, temperature=0.02, rho=5.0, delta=0.02
      ),
    ),
    functools.partial(
      _generic_smooth_rank_ref,
      h_pos=lambda t: reference_smooth_rank.sigmoid(t / 0.05),
      h_neg=lambda t: reference_smooth_rank.supap_negative_step(t, 0.02, 5.0, 0.02),
    ),
    "derivative",
  ),
  # Smooth-rank losses beyond AP (Patel et al. 2022; Ramzi et al., SupRank, TPAMI 2023).
  _loss(
    "recall_at_k_surrogate",
    jaxrank.recall_at_k_surrogate_loss,
    rr.recall_at_k_surrogate_loss,
    temperature=0.1,
    ks=(1, 2, 4),
  ),
  _loss(
    "smooth_recall_at_k",
    jaxrank.smooth_recall_at_k_loss,
    rr.recall_at_k_surrogate_loss,
    temperature=0.1,
    ks=(1, 2, 4),
  ),
  # rho = 5: with 100, the ranks of misordered positives pass every cut-off and the counts'
  # sigmoids saturate (a gradient below 1e-3 on these lists).
  _loss(
    "sup_recall_at_k",
    jaxrank.sup_recall_at_k_loss,
    rr.sup_recall_at_k_loss,
    ks=(1, 2, 4),
    rho=5.0,
  ),
  _loss("smooth_ndcg", jaxrank.smooth_ndcg_loss, rr.smooth_ndcg_loss, graded=True, temperature=0.1),
  _loss("sup_ndcg", jaxrank.sup_ndcg_loss, rr.sup_ndcg_loss, graded=True),
  Entry(
    "decomposability_gap",
    functools.partial(jaxrank.decomposability_gap, num_batches=2),
    functools.partial(rs.decomposability_gap, num_batches=2),
    "none",
  ),
  # Pair-based baselines (Hadsell et al. 2006; Hermans et al. 2017; Wang et al. 2019). Margins
  # inside [-1, 1] and beta = 10, so that the hinges and exponentials are neither all 0 nor
  # saturated on these lists; the mined multi-similarity loss as a row of its own.
  _loss(
    "contrastive", jaxrank.contrastive_loss, rp.contrastive_loss, pos_margin=0.8, neg_margin=0.2
  ),
  _loss("triplet", jaxrank.triplet_loss, rp.triplet_loss, margin=0.1),
  _loss("multi_similarity", jaxrank.multi_similarity_loss, rp.multi_similarity_loss, beta=10.0),
  _loss(
    "multi_similarity_mined",
    jaxrank.multi_similarity_loss,
    rp.multi_similarity_loss,
    beta=10.0,
    epsilon=0.1,
  ),
  # Blackbox-rank losses (Rolinek et al. 2020): exact values, interpolated gradients. In float32:
  # their ranks come from a `jax.pure_callback` on CPU, and inside `jax.enable_x64(True)` (a
  # thread-local context, as the tests use) a callback that XLA runs on another thread (two
  # independent sorts in one jitted function) gets its float64 result canonicalised to float32,
  # which JAX rejects ("Incorrect output dtype"). With the global x64 flag it works.
  # interpolation = 4 (Table 9's Online Products value): with the default 0.2, the perturbed
  # scores of these short lists rarely change order, and most gradients are 0. Each runs on the
  # platform's sort (numpy on CPU) and, as "..._xla", on XLA's (the GPU/TPU path, forced).
  *(
    _loss(
      name + suffix,
      _on_branch(branch, fn),
      None,
      gradient="interpolation",
      dtype=np.float32,
      interpolation=4.0,
    )
    for name, fn in (
      ("blackbox_ap", jaxrank.blackbox_ap_loss),
      ("blackbox_recall", jaxrank.blackbox_recall_loss),
    )
    for suffix, branch in (("", None), ("_xla", "xla"))
  ),
  # Their counting path (no sort): max_relevant = N, at least the relevant items of any list
  # here, so every call counts.
  *(
    _loss(
      name + "_counting",
      fn,
      None,
      gradient="interpolation",
      dtype=np.float32,
      interpolation=4.0,
      max_relevant=N,
    )
    for name, fn in (
      ("blackbox_ap", jaxrank.blackbox_ap_loss),
      ("blackbox_recall", jaxrank.blackbox_recall_loss),
    )
  ),
]
del rh, rs, rx, rp

for _entry in TABLE:
  assert set(_entry.xfail) <= set(PROPERTIES), _entry.name
  assert _entry.gradient in ("derivative", "interpolation", "none"), _entry.name

_SURROGATES = (
  "fastap",
  "soft_binning_ap",
  "tie_aware_ap_loss",
  "simplified_tie_aware_ap_loss",
  "tie_aware_ndcg_loss",
  "simplified_tie_aware_ndcg_loss",
  "smoothap",
  "supap",
  "calibration",
  "roadmap",
  "smooth_rank_ap",
  "recall_at_k_surrogate",
  "smooth_recall_at_k",
  "sup_recall_at_k",
  "smooth_ndcg",
  "sup_ndcg",
  "contrastive",
  "triplet",
  "multi_similarity",
  "multi_similarity_mined",
)
_BLACKBOX = (
  "blackbox_ap",
  "blackbox_ap_xla",
  "blackbox_ap_counting",
  "blackbox_recall",
  "blackbox_recall_xla",
  "blackbox_recall_counting",
)
# (row, property) -> why the property does not hold for that row by design. The row is left out of
# the property's test (a row not in TABLE, or a property not in PROPERTIES, fails
# `test_exemptions_name_rows_and_properties`).
EXEMPTIONS: dict[tuple[str, str], str] = {
  **{(name, INCREASING): DISTANCES for name in ("hamming_ap", "hamming_ndcg")},
  **{(name, INCREASING): SURROGATE for name in _SURROGATES},
  **{
    ("decomposability_gap", prop): BATCHES_BY_POSITION
    for prop in (WHERE_SLICING, PADDING, PERMUTATION)
  },
  ("decomposability_gap", SEGMENTS): SEGMENTS_BY_POSITION,
  **{(name, INCREASING): MARGIN for name in _BLACKBOX},
  **{(name, GRADIENT_LINEAR): BLACKBOX_NOT_LINEAR for name in _BLACKBOX},
  **{(name, PERMUTATION_GRADIENT): TIES_BY_POSITION for name in _BLACKBOX},
}
# Properties tested only on the rows with a gradient.
DIFFERENTIABLE_ONLY = (PERMUTATION_GRADIENT, GRADIENT_LINEAR)


def cases(prop: str) -> list[Any]:
  """The table as pytest parameters for `prop`, without the rows exempted from it (and, for a
  property of gradients, without the rows that have none), with its strict xfails."""
  assert prop in PROPERTIES, prop
  params = []
  for entry in TABLE:
    if prop in DIFFERENTIABLE_ONLY and entry.gradient == "none":
      continue
    if (entry.name, prop) in EXEMPTIONS:
      continue
    marks = []
    if prop in entry.xfail:
      marks.append(pytest.mark.xfail(strict=True, reason=f"{entry.name}: {entry.xfail[prop]}"))
    params.append(pytest.param(entry, id=entry.name, marks=marks))
  return params


def test_exemptions_name_rows_and_properties():
  rows = {e.name: e for e in TABLE}
  assert len(rows) == len(TABLE)  # Row names are unique.
  assert set(BINNED) <= set(rows), set(BINNED) - set(rows)
  for (name, prop), reason in EXEMPTIONS.items():
    assert name in rows, f"EXEMPTIONS names {name!r}, which is no row of TABLE"
    assert prop in PROPERTIES, f"EXEMPTIONS names {prop!r}, which is no property"
    assert reason.strip(), (name, prop)
    # An exemption must take out a row that the property would otherwise test.
    assert prop not in DIFFERENTIABLE_ONLY or rows[name].gradient != "none", (name, prop)
    assert prop not in rows[name].xfail, (name, prop)
  for prop in PROPERTIES:
    tested = {p.values[0].name for p in cases(prop)}
    exempt = {name for name, p in EXEMPTIONS if p == prop}
    undifferentiable = {e.name for e in TABLE if e.gradient == "none"}
    everything = set(rows) - (undifferentiable if prop in DIFFERENTIABLE_ONLY else set())
    assert tested | exempt == everything and not tested & exempt, prop
  # Every property has a test that uses `cases` with it.
  source = inspect.getsource(inspect.getmodule(test_exemptions_name_rows_and_properties))
  for prop, constant in ((p, c) for c, p in globals().items() if p in PROPERTIES and c.isupper()):
    assert f"cases({constant})" in source, prop


def test_table_covers_every_list_level_function():
  listed = {e.fn.func.__name__ for e in TABLE}
  list_level = set()
  for name in jaxrank.__all__:
    fn = getattr(jaxrank, name)
    params = list(inspect.signature(fn).parameters) if inspect.isfunction(fn) else []
    # The proxy losses take `embeddings` first: they are not list-level (tests/test_proxy.py).
    if {"labels", "where", "reduce_fn"} <= set(params) and params[0] in ("scores", "distances"):
      list_level.add(name)
  assert listed == list_level


# ---------------------------------------------------------------------------------------------
# Inputs: lists of N = 8 items (and of 6), so that compiled code is shared. Values are computed
# eagerly, as a user calls the functions; gradients (and the lists of 6) by one jitted function
# per entry, `jitted`, which `test_jit_equals_eager` compares with the eager values and gradients.

# Tolerances: the same value computed two ways ("values"; exact metrics without an absolute
# slack), a sum over lists against the sum of the per-list values ("sums"), a gradient computed
# two ways ("grads"), all no looser than those of the per-module tests they replace.
TOLERANCES = {
  np.float64: {
    "metric values": dict(rtol=1e-14, atol=0),
    "values": dict(rtol=1e-14, atol=1e-15),
    "sums": dict(rtol=1e-12, atol=0),
    "grads": dict(rtol=1e-14, atol=1e-15),
  },
  np.float32: {
    "metric values": dict(rtol=1e-6, atol=0),
    "values": dict(rtol=1e-6, atol=0),
    "sums": dict(rtol=1e-6, atol=0),
    "grads": dict(rtol=1e-7, atol=1e-6),
  },
}
REF = dict(rtol=1e-10, atol=1e-12)  # Against a loop-based reference in float64.


def tol(entry, kind):
  if kind == "values" and entry.gradient == "none":
    kind = "metric values"
  return TOLERANCES[entry.dtype][kind]


@pytest.fixture
def entry_precision(request):
  """Runs the test with float64 enabled when the entry is tested in float64 (never at import)."""
  with precision(request.node.callspec.params["entry"].dtype):
    yield


def random_lists(seed, n=N, *, mask=True):
  """`[3, 4, n]` similarities in [-1, 1] (half the lists on a grid of 1/4: ties, signed zeros),
  graded labels 0..3 (relevant iff >= 1) and a mask, in float64."""
  rng = np.random.default_rng(seed)
  shape = BATCH + (n,)
  scores = rng.uniform(-1, 1, shape)
  tied = rng.random(BATCH + (1,)) < 0.5
  scores = np.where(tied, np.round(scores * 4) / 4, scores)
  labels = rng.choice(4, shape, p=[0.5, 0.25, 0.15, 0.1]).astype(np.int32)
  where = rng.random(shape) < 0.8 if mask else np.ones(shape, bool)
  return scores, labels, where


def with_empty_lists(seed, n=N):
  """`random_lists` where list (0, 1) has no relevant item, (1, 2) no valid item, (2, 3) relevant
  items only where masked, and every other list a relevant valid item."""
  scores, labels, where = random_lists(seed, n)
  labels[..., 0] = np.maximum(labels[..., 0], 1)
  where[..., 0] = True
  labels[0, 1] = 0
  where[1, 2] = False
  labels[2, 3] = np.where(where[2, 3], 0, 2)
  return scores, labels, where


def defined_lists(entry, labels, where):
  """`[...]`: the lists that `entry` leaves in its reduction: by default those with a relevant
  valid item (for integer labels, also those whose ideal DCG is positive)."""
  if entry.defined is not None:
    return entry.defined(labels, where)
  return reference.has_relevant(labels, where)


def inputs(entry, scores):
  """The scores as `entry` takes them, in its dtype: integer Hamming distances (as floats) for the
  Hamming metrics."""
  if entry.inputs == "distances":
    scores = np.clip(np.rint((1 - np.asarray(scores)) * NUM_BITS / 2), 0, NUM_BITS)
  return np.asarray(scores, entry.dtype)


def run(entry, scores, labels, *, where=None, reduce_fn=jnp.mean, **kwargs):
  return entry.fn(scores, labels, where=where, reduce_fn=reduce_fn, **kwargs)


def expected(entry, scores, labels, where):
  """The reference's per-list values `[...]`."""
  return reference.per_list(entry.ref, scores, labels, where)


def differentiable(entry):
  return entry.gradient != "none"


def value_fn(entry, labels, where, reduce_fn):
  """scores -> the reduced value (the sum of the per-list values for `reduce_fn=None`)."""
  return lambda s: jnp.sum(entry.fn(s, labels, where=where, reduce_fn=reduce_fn))


REDUCTIONS_BY_NAME = (("none", None), ("mean", jnp.mean), ("sum", jnp.sum))


def evaluate(entry, scores, labels, where, *, names=("none", "mean", "sum")):
  """The reductions `names` of `entry` and, for a loss, the gradient of each (`"grad_none"`: of
  the sum of the per-list values), as a dict."""
  out = {}
  for name, reduce_fn in REDUCTIONS_BY_NAME:
    if name in names:
      out[name] = entry.fn(scores, labels, where=where, reduce_fn=reduce_fn)
      if differentiable(entry):
        out["grad_" + name] = jax.grad(value_fn(entry, labels, where, reduce_fn))(scores)
  return out


_JITTED: dict[tuple[str, bool], Callable] = {}


def jitted(entry, scores, labels, where, *, over_lists=False):
  """`evaluate` under one `jax.jit` per entry (compiled once per shape), or, `over_lists`, the
  per-list values and the sum under `jax.jit(jax.vmap(...))` over the leading axis."""
  key = (entry.name, over_lists)
  if key not in _JITTED:
    if over_lists:
      fn = jax.vmap(functools.partial(evaluate, entry, names=("none", "sum")))
    else:
      fn = functools.partial(evaluate, entry)
    _JITTED[key] = jax.jit(fn)
  return _JITTED[key](scores, labels, where)


def grads(entry, scores, labels, where):
  """The gradients of the mean, the sum and the sum of the per-list values (`"none"`)."""
  out = jitted(entry, scores, labels, where)
  return {name: out["grad_" + name] for name, _ in REDUCTIONS_BY_NAME}


# ---------------------------------------------------------------------------------------------
# Transformations.


@pytest.mark.parametrize("entry", cases(JIT))
def test_jit_equals_eager(entry, entry_precision):
  scores, labels, where = with_empty_lists(1)
  scores = inputs(entry, scores)
  got = jitted(entry, scores, labels, where)
  # Every reduction eagerly, but few gradients (each eager gradient compiles every op again): that
  # of the mean, which `test_reductions` and `test_gradient_of_mean_is_gradient_of_sum_over_count`
  # tie to the jitted gradients of the other reductions; and that of the sum where the second does
  # not hold.
  eager = {
    name: entry.fn(scores, labels, where=where, reduce_fn=reduce_fn)
    for name, reduce_fn in REDUCTIONS_BY_NAME
  }
  chex.assert_trees_all_close({name: got[name] for name in eager}, eager, **tol(entry, "values"))
  if differentiable(entry):
    reductions = {"mean": jnp.mean}
    if (entry.name, GRADIENT_LINEAR) in EXEMPTIONS:
      reductions["sum"] = jnp.sum
    for name, reduce_fn in reductions.items():
      eager_grad = jax.grad(value_fn(entry, labels, where, reduce_fn))(scores)
      chex.assert_trees_all_close(got["grad_" + name], eager_grad, **tol(entry, "grads"))


@pytest.mark.parametrize("entry", cases(VMAP))
def test_vmap_equals_batch_axes(entry, entry_precision):
  scores, labels, where = with_empty_lists(2)
  scores = inputs(entry, scores)
  batched = run(entry, scores, labels, where=where, reduce_fn=None)
  chex.assert_shape(batched, BATCH)
  # Over the first axis: each call sees the [4, n] lists of one row.
  rows = jitted(entry, scores, labels, where, over_lists=True)
  chex.assert_trees_all_close(rows["none"], batched, **tol(entry, "values"))
  chex.assert_trees_all_close(rows["sum"], batched.sum(-1), **tol(entry, "sums"))
  if differentiable(entry):
    chex.assert_trees_all_close(
      rows["grad_sum"], grads(entry, scores, labels, where)["sum"], **tol(entry, "grads")
    )


@pytest.mark.parametrize("entry", cases(WHERE_SLICING))
def test_where_equals_slicing(entry, entry_precision):
  rng = np.random.default_rng(3)
  scores, labels, _ = random_lists(3, mask=False)
  scores = inputs(entry, scores)
  labels[..., 0] = 2  # Every list defined, also once sliced.
  # Mask exactly two items per list, so that the sliced lists share one shape.
  masked = np.argsort(rng.random(scores.shape), axis=-1)[..., :2]
  where = np.ones(scores.shape, bool)
  np.put_along_axis(where, masked, False, axis=-1)
  sliced = [a[where].reshape(BATCH + (N - 2,)) for a in (scores, labels)]
  # The lists of 6 by the jitted `evaluate` (`test_jit_equals_eager` relates it to eager calls).
  want = jitted(entry, *sliced, np.ones(sliced[0].shape, bool))
  got = run(entry, scores, labels, where=where, reduce_fn=None)
  chex.assert_trees_all_close(got, want["none"], **tol(entry, "values"))
  if differentiable(entry):
    grad = grads(entry, scores, labels, where)["sum"]
    chex.assert_trees_all_close(
      grad[where].reshape(sliced[0].shape), want["grad_sum"], **tol(entry, "grads")
    )
    chex.assert_trees_all_equal(grad[~where], np.zeros(np.sum(~where)))


@pytest.mark.parametrize("entry", cases(WHERE_BROADCAST))
def test_where_broadcasts(entry, entry_precision):
  scores, labels, _ = random_lists(4, mask=False)
  scores = inputs(entry, scores)
  row = np.array([True, False, True, True, False, True, True, True])
  got = run(entry, scores, labels, where=row, reduce_fn=None)
  want = run(entry, scores, labels, where=np.broadcast_to(row, scores.shape), reduce_fn=None)
  chex.assert_trees_all_close(got, want, **tol(entry, "values"))
  # No mask: every item valid.
  chex.assert_trees_all_close(
    run(entry, scores, labels, reduce_fn=None),
    run(entry, scores, labels, where=np.ones(scores.shape, bool), reduce_fn=None),
    **tol(entry, "values"),
  )


@pytest.mark.parametrize("entry", cases(PADDING))
def test_masked_padding_changes_nothing(entry, entry_precision):
  # Lists of 6 padded to 8 with masked garbage (NaN, inf, huge) or masked benign values: the
  # values and gradients of the lists of 6, and zero gradients at the padding.
  scores, labels, where = with_empty_lists(5, N - 2)
  scores = inputs(entry, scores)
  pad = BATCH + (2,)

  def padded(values):
    return (
      np.concatenate([scores, np.broadcast_to(values, pad).astype(scores.dtype)], axis=-1),
      np.concatenate([labels, np.broadcast_to(np.array([2, 1], np.int32), pad)], axis=-1),
      np.concatenate([where, np.zeros(pad, bool)], axis=-1),
    )

  garbage = [padded([np.nan, -np.inf]), padded([np.inf, 1e30])]
  benign = padded([0.5, -0.25])
  # The lists of 6 by the jitted `evaluate` (`test_jit_equals_eager` relates it to eager calls).
  unpadded = jitted(entry, scores, labels, where)
  for name, reduce_fn in (("none", None), ("mean", jnp.mean)):
    for s, y, w in garbage:
      got = run(entry, s, y, where=w, reduce_fn=reduce_fn)
      chex.assert_trees_all_close(got, unpadded[name], **tol(entry, "values"))
  if differentiable(entry):
    got = [grads(entry, s, y, w)["mean"] for s, y, w in garbage + [benign]]
    chex.assert_tree_all_finite(got)
    chex.assert_trees_all_equal(*got)
    chex.assert_trees_all_equal(got[0][..., N - 2 :], np.zeros(pad))
    want = grads(entry, scores, labels, where)["mean"]
    chex.assert_trees_all_close(got[0][..., : N - 2], want, **tol(entry, "grads"))
    assert np.abs(got[0]).max() > 1e-3  # Not a trivial case.


@pytest.mark.parametrize("entry", cases(PERMUTATION))
def test_joint_permutation_changes_nothing(entry, entry_precision):
  rng = np.random.default_rng(6)
  scores, labels, where = with_empty_lists(6)
  scores = inputs(entry, scores)
  perm = np.argsort(rng.random(scores.shape), axis=-1)
  permuted = [np.take_along_axis(a, perm, axis=-1) for a in (scores, labels, where)]
  chex.assert_trees_all_close(
    run(entry, permuted[0], permuted[1], where=permuted[2], reduce_fn=None),
    run(entry, scores, labels, where=where, reduce_fn=None),
    **tol(entry, "values"),
  )


@pytest.mark.parametrize("entry", cases(PERMUTATION_GRADIENT))
def test_joint_permutation_permutes_the_gradient(entry, entry_precision):
  rng = np.random.default_rng(6)
  scores, labels, where = with_empty_lists(6)
  scores = inputs(entry, scores)
  perm = np.argsort(rng.random(scores.shape), axis=-1)
  permuted = [np.take_along_axis(a, perm, axis=-1) for a in (scores, labels, where)]
  grad = grads(entry, scores, labels, where)["mean"]
  chex.assert_trees_all_close(
    grads(entry, *permuted)["mean"],
    np.take_along_axis(np.asarray(grad), perm, axis=-1),
    **tol(entry, "grads"),
  )


def _exp(s):
  return np.exp(s)


def _affine_tanh(s):
  return np.tanh(0.3 * s + 0.1)


@pytest.mark.parametrize("entry", cases(INCREASING))
def test_increasing_transform_changes_nothing(entry, entry_precision):
  scores, labels, where = random_lists(7)
  want = run(entry, scores, labels, where=where, reduce_fn=None)
  for transform in (_exp, _affine_tanh):
    moved = transform(scores)
    # The transform keeps ties ties and non-ties non-ties in float64.
    for s, m in zip(scores.reshape(-1, N), moved.reshape(-1, N)):
      assert len(np.unique(s)) == len(np.unique(m))
    chex.assert_trees_all_close(
      run(entry, moved, labels, where=where, reduce_fn=None), want, **tol(entry, "values")
    )


# ---------------------------------------------------------------------------------------------
# Reductions and lists without a relevant item.


@pytest.mark.parametrize("entry", cases(REDUCTIONS))
def test_reductions(entry, entry_precision):
  scores, labels, where = with_empty_lists(8)
  scores = inputs(entry, scores)
  defined = defined_lists(entry, labels, where)
  assert not defined[0, 1] and not defined[1, 2] and not defined[2, 3] and defined.sum() == 9
  per = np.asarray(run(entry, scores, labels, where=where, reduce_fn=None))
  # Undefined lists give exactly 0 and are left out of the mean.
  chex.assert_trees_all_equal(per[~defined], np.zeros(3))
  total = run(entry, scores, labels, where=where, reduce_fn=jnp.sum)
  mean = run(entry, scores, labels, where=where, reduce_fn=jnp.mean)
  chex.assert_shape([total, mean], ())
  chex.assert_trees_all_close(total, np.sum(per), **tol(entry, "sums"))
  chex.assert_trees_all_close(mean, np.sum(per) / defined.sum(), **tol(entry, "sums"))
  if entry.ref is not None:
    want = expected(entry, scores, labels, where)
    chex.assert_trees_all_close(per, want, **REF)
    chex.assert_trees_all_close(mean, reference.mean_over_lists(want, defined), **REF)
  # Any other reduce_fn is called with where= the defined lists.
  seen = {}

  def reduce_fn(values, *, where):
    seen["where"] = where
    return jnp.sum(values, where=where)

  chex.assert_trees_all_close(
    run(entry, scores, labels, where=where, reduce_fn=reduce_fn), total, **tol(entry, "values")
  )
  chex.assert_trees_all_equal(np.asarray(seen["where"]), defined)
  if differentiable(entry):
    got = grads(entry, scores, labels, where)
    chex.assert_trees_all_close(got["none"], got["sum"], **tol(entry, "grads"))


@pytest.mark.parametrize("entry", cases(GRADIENT_LINEAR))
def test_gradient_of_mean_is_gradient_of_sum_over_count(entry, entry_precision):
  scores, labels, where = with_empty_lists(8)
  got = grads(entry, scores, labels, where)
  count = defined_lists(entry, labels, where).sum()
  chex.assert_trees_all_close(got["mean"] * count, got["sum"], rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("entry", cases(NO_DEFINED_LIST))
def test_batch_without_defined_list_gives_zero(entry, entry_precision):
  scores, labels, where = random_lists(10)
  scores = inputs(entry, scores)
  no_relevant = (np.zeros_like(labels), where)
  all_masked = (labels, np.zeros_like(where))
  for y, w in (no_relevant, all_masked):
    chex.assert_trees_all_equal(run(entry, scores, y, where=w, reduce_fn=None), np.zeros(BATCH))
    for reduce_fn in (jnp.mean, jnp.sum):
      value = run(entry, scores, y, where=w, reduce_fn=reduce_fn)
      chex.assert_shape(value, ())
      assert float(value) == 0.0
    if differentiable(entry):
      zeros = np.zeros(scores.shape)
      chex.assert_trees_all_equal(
        grads(entry, scores, y, w), dict(mean=zeros, sum=zeros, none=zeros)
      )


# Short lists, each padded with masked items to the shared shape.
DEGENERATE_LISTS = {
  "no_relevant": ([0.3, 0.2, 0.2, 0.1], [0, 0, 0, 0], [True] * 4),
  "all_relevant": ([0.3, 0.2, 0.2, 0.1], [1, 1, 1, 1], [True] * 4),
  "all_relevant_graded": ([0.3, 0.2, 0.2, 0.1], [2, 1, 3, 1], [True] * 4),
  # 0.37 rather than 0.5: four items at 0.5 put masses 1 and 3 into two bins of 20, where
  # `reference_hashing.ap_r_term` cancels catastrophically (n = 1 - 1e-15 misses its n == 1 case).
  "all_tied": ([0.37, 0.37, 0.37, 0.37], [0, 1, 0, 2], [True] * 4),
  "all_tied_two_relevant": ([0.37, 0.37, 0.37, 0.37], [1, 0, 0, 1], [True] * 4),
  "all_tied_relevant": ([0.37, 0.37, 0.37, 0.37], [1, 1, 1, 1], [True] * 4),
  "all_tied_no_relevant": ([0.37, 0.37, 0.37, 0.37], [0, 0, 0, 0], [True] * 4),
  "all_tied_zero_signs": ([0.0, -0.0, 0.0, -0.0], [1, 0, 2, 0], [True] * 4),
  "all_masked": ([0.3, 0.2, 0.2, 0.1], [1, 0, 1, 0], [False] * 4),
  "one_valid_item": ([0.3, 0.2, 0.2, 0.1], [1, 0, 1, 0], [False, False, True, False]),
  "huge_gaps": ([1e6, -1e6, 3e5, -2e5], [1, 0, 0, 1], [True] * 4),
  "beyond_the_ends": ([3.0, 1.5, -1.5, -3.0], [0, 1, 0, 1], [True] * 4),
}


# The histogram losses bin similarities and reject a valid score outside [-1, 1] (their own tests
# check the error): they get these lists with the scores clipped to [-1, 1], so that "huge_gaps"
# and "beyond_the_ends" become lists with items at both ends of the range.
BINNED = (
  "fastap",
  "soft_binning_ap",
  "tie_aware_ap_loss",
  "simplified_tie_aware_ap_loss",
  "tie_aware_ndcg_loss",
  "simplified_tie_aware_ndcg_loss",
)


def degenerate_batch():
  scores = np.zeros(BATCH + (N,))
  labels = np.ones(BATCH + (N,), np.int32)
  where = np.zeros(BATCH + (N,), bool)
  for i, (s, y, w) in enumerate(DEGENERATE_LISTS.values()):
    idx = np.unravel_index(i, BATCH)
    scores[idx][:4], labels[idx][:4], where[idx][:4] = s, y, w
  return scores, labels, where


@pytest.mark.parametrize("entry", cases(DEGENERATE))
def test_degenerate_lists(entry, entry_precision):
  scores, labels, where = degenerate_batch()
  scores = inputs(entry, scores)
  if entry.name in BINNED:
    scores = np.clip(scores, -1, 1)
  defined = defined_lists(entry, labels, where)
  per = np.asarray(run(entry, scores, labels, where=where, reduce_fn=None))
  chex.assert_tree_all_finite([per, run(entry, scores, labels, where=where)])
  chex.assert_trees_all_equal(per[~defined], np.zeros(np.sum(~defined)))
  if entry.ref is not None:
    chex.assert_trees_all_close(per, expected(entry, scores, labels, where), **REF)
  if differentiable(entry):
    for grad in grads(entry, scores, labels, where).values():
      grad = np.asarray(grad)
      chex.assert_tree_all_finite(grad)
      chex.assert_trees_all_equal(grad[~where], np.zeros(np.sum(~where)))
      chex.assert_trees_all_equal(grad[~defined], np.zeros((np.sum(~defined), N)))


# ---------------------------------------------------------------------------------------------
# Segments: several lists packed into one row.

# The 12 lists of `with_empty_lists`, list k cut to its first `SEGMENT_LENGTHS[k]` items, packed
# into rows of N (`SEGMENT_ROWS`: the lists of each packed row), their items interleaved in order.
# The rest of a row (all of the last one) is one more segment, of masked NaN scores.
SEGMENT_LENGTHS = (8, 1, 7, 3, 3, 2, 2, 2, 2, 2, 5, 1)
SEGMENT_ROWS = ((0,), (1, 2), (3, 4, 5), (6, 7, 8, 9), (10, 11), ())
PACKED = (2, 3)  # The packed rows' leading axes.


class Packed(NamedTuple):
  """`segmented_lists`: the lists padded (`[3, 4, N]`) and packed (`[2, 3, N]`, with `segments`),
  and `places[k]`, the packed row (an index of `PACKED`) and positions `[SEGMENT_LENGTHS[k]]` of
  list k's items."""

  padded: tuple[np.ndarray, np.ndarray, np.ndarray]
  packed: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
  places: list[tuple[tuple[int, ...], np.ndarray]]


def segmented_lists(seed):
  scores, labels, where = (a.reshape(-1, N) for a in with_empty_lists(seed))
  where = where & (np.arange(N) < np.array(SEGMENT_LENGTHS)[:, None])
  rng = np.random.default_rng(seed)
  packed = (
    np.full(PACKED + (N,), np.nan),
    np.full(PACKED + (N,), 2, np.int32),
    np.zeros(PACKED + (N,), bool),
    np.zeros(PACKED + (N,), np.int32),
  )
  places = [None] * len(SEGMENT_LENGTHS)
  for r, ks in enumerate(SEGMENT_ROWS):
    row = np.unravel_index(r, PACKED)
    # Arbitrary ids, unsorted, the same ones in several rows.
    ids = rng.permutation([-3, 0, 7, 42, 99])
    owners = np.full(N, -1)
    owners[: sum(SEGMENT_LENGTHS[k] for k in ks)] = np.repeat(ks, [SEGMENT_LENGTHS[k] for k in ks])
    owners = rng.permutation(owners)  # Interleaved; each list's items keep their order.
    packed[3][row] = ids[-1]
    for i, k in enumerate(ks):
      pos = np.flatnonzero(owners == k)
      for array, values in zip(packed, (scores, labels, where)):
        array[row][pos] = values[k, : len(pos)]
      packed[3][row][pos] = ids[i]
      places[k] = (row, pos)
  padded = tuple(a.reshape(BATCH + (N,)) for a in (scores, labels, where))
  return Packed(padded, packed, places)


_SEGMENTED: dict[str, Callable] = {}


def segmented_jitted(entry, scores, labels, where, segments):
  """Packed rows under one `jax.jit` per entry, the segments traced: the per-list values
  (`reduce_fn=None`) and, for a loss, the gradient of their sum, by `jax.vmap` over the first
  axis; and the mean over every packed row."""
  if entry.name not in _SEGMENTED:

    def one(s, y, w, g):
      values = functools.partial(entry.fn, labels=y, where=w, segments=g, reduce_fn=None)
      out = {"none": values(s)}
      if differentiable(entry):
        out["grad_none"] = jax.grad(lambda x: jnp.sum(values(x)))(s)
      return out

    def packed(s, y, w, g):
      return {**jax.vmap(one)(s, y, w, g), "mean": entry.fn(s, y, where=w, segments=g)}

    _SEGMENTED[entry.name] = jax.jit(packed)
  return _SEGMENTED[entry.name](scores, labels, where, segments)


@pytest.mark.parametrize("entry", cases(SEGMENTS))
def test_segments_equal_separate_lists(entry, entry_precision):
  lists_ = segmented_lists(14)
  (scores, labels, where), places = lists_.padded, lists_.places
  scores = inputs(entry, scores)
  packed_scores = inputs(entry, lists_.packed[0])
  _, packed_labels, packed_where, segments = lists_.packed
  # The lists alone, padded, by the jitted `evaluate` (compiled for the other properties too).
  want = jitted(entry, scores, labels, where)
  # Each list's value at the position of its first valid item; no value for a list without one.
  per_list = np.asarray(want["none"]).reshape(-1)
  flat_where = where.reshape(-1, N)
  placed = np.zeros(PACKED + (N,))
  for k, (row, pos) in enumerate(places):
    valid = pos[flat_where[k, : len(pos)]]
    if len(valid):
      placed[row + (valid[0],)] = per_list[k]
    else:
      assert per_list[k] == 0
  # Under jit and vmap, the segments traced (the eager calls with segments: test_segmented.py).
  rows = segmented_jitted(entry, packed_scores, packed_labels, packed_where, segments)
  chex.assert_trees_all_close(rows["none"], placed, **tol(entry, "values"))
  chex.assert_trees_all_close(rows["mean"], want["mean"], **tol(entry, "sums"))
  if entry.ref is not None:
    ref = reference.per_segment(
      entry.ref, packed_scores, packed_labels, packed_where, segments=segments
    )
    chex.assert_trees_all_close(rows["none"], ref, **REF)
  if differentiable(entry):
    grad = np.asarray(rows["grad_none"])
    padded_grad = np.asarray(want["grad_none"]).reshape(-1, N)
    seen = np.zeros(grad.shape, bool)
    for k, (row, pos) in enumerate(places):
      chex.assert_trees_all_close(grad[row][pos], padded_grad[k, : len(pos)], **tol(entry, "grads"))
      seen[row + (pos,)] = True
    chex.assert_trees_all_equal(grad[~seen], np.zeros(np.sum(~seen)))  # The masked segments.
    assert np.abs(grad).max() > 1e-3  # Not a trivial case.


def test_segments_of_the_gap_are_masks_in_place():
  """`decomposability_gap`'s batches are positions: a segment is its row with the other segments
  masked in place (where the padded list would move its items between batches)."""
  entry = next(e for e in TABLE if e.name == "decomposability_gap")
  with precision(entry.dtype):
    packed = segmented_lists(14).packed
    scores, labels, where, segments = packed
    got = run(entry, scores, labels, where=where, segments=segments, reduce_fn=None)
    want = np.zeros(got.shape)
    for row in np.ndindex(PACKED):
      for i in range(N):
        own = where[row] & (segments[row] == segments[row][i])
        if where[row][i] and np.flatnonzero(own)[0] == i:
          want[row + (i,)] = run(entry, scores[row], labels[row], where=own, reduce_fn=None)
    chex.assert_trees_all_close(got, want, **tol(entry, "values"))
    assert np.any(want != 0)


# ---------------------------------------------------------------------------------------------
# NaN and dtypes.


@pytest.mark.parametrize("entry", cases(NAN))
def test_valid_nan_makes_list_nan(entry, entry_precision):
  scores, labels, where = random_lists(11, mask=False)
  labels[..., 0] = 1  # Every list defined...
  labels[2, 3] = 0  # ...but this one, which stays 0 with a valid NaN.
  clean = inputs(entry, scores)
  scores = clean.copy()
  scores[0, 1, 4] = np.nan
  scores[1, 2, 5] = np.nan
  where[1, 2, 5] = False  # A masked NaN is ignored.
  scores[2, 3, 2] = np.nan
  per = np.asarray(run(entry, scores, labels, where=where, reduce_fn=None))
  nan_lists = np.zeros(BATCH, bool)
  nan_lists[0, 1] = True
  chex.assert_trees_all_equal(np.isnan(per), nan_lists)
  assert per[2, 3] == 0.0
  want = np.asarray(run(entry, clean, labels, where=where, reduce_fn=None))
  chex.assert_trees_all_close(per[~nan_lists], want[~nan_lists], **tol(entry, "values"))
  if entry.ref is not None:
    ref = expected(entry, clean, labels, where)
    chex.assert_trees_all_close(per[~nan_lists], ref[~nan_lists], **REF)
  assert np.isnan(run(entry, scores, labels, where=where))
  assert np.isnan(run(entry, scores, labels, where=where, reduce_fn=jnp.sum))


@pytest.mark.parametrize("entry", cases(LABELS))
def test_label_dtypes(entry, entry_precision):
  scores, labels, where = random_lists(12)
  scores = inputs(entry, scores)
  # Integer and floating labels give the same values; binary labels as booleans too.
  want = run(entry, scores, labels, where=where, reduce_fn=None)
  chex.assert_trees_all_close(
    run(entry, scores, labels.astype(np.float64), where=where, reduce_fn=None),
    want,
    **tol(entry, "values"),
  )
  binary = (labels >= 1).astype(np.int32)
  want = run(entry, scores, binary, where=where, reduce_fn=None)
  for other in (binary.astype(bool), binary.astype(np.float64)):
    chex.assert_trees_all_close(
      run(entry, scores, other, where=where, reduce_fn=None), want, **tol(entry, "values")
    )
  if not entry.graded:
    # Labels matter only through `labels >= 1` (0.75 is not relevant, 1.25 is).
    for other in (labels, binary * 3.5, np.where(binary, labels + 0.25, 0.75)):
      chex.assert_trees_all_close(
        run(entry, scores, other, where=where, reduce_fn=None), want, **tol(entry, "values")
      )


@pytest.mark.parametrize("entry", cases(SCORE_DTYPES))
def test_score_dtypes(entry):
  scores, labels, where = random_lists(13)
  scores = inputs(entry, scores)
  for reduce_fn, shape in ((None, BATCH), (jnp.mean, ())):
    got = run(entry, scores.astype(np.float32), labels, where=where, reduce_fn=reduce_fn)
    chex.assert_shape(got, shape)
    chex.assert_type(got, jnp.float32)
  want = run(entry, scores.astype(np.float32), labels, where=where, reduce_fn=None)
  for low in (jnp.bfloat16, jnp.float16):
    low_scores = jnp.asarray(scores, low)
    got = run(entry, low_scores, labels, where=where, reduce_fn=None)
    chex.assert_type(got, jnp.float32)
    # Accumulated in float32: the value of the same scores given in float32.
    exact = run(entry, low_scores.astype(jnp.float32), labels, where=where, reduce_fn=None)
    chex.assert_trees_all_close(got, exact, rtol=1e-6, atol=1e-7)
  if entry.inputs == "distances":
    got = run(entry, scores.astype(np.int32), labels, where=where, reduce_fn=None)
    chex.assert_type(got, jnp.float32)
    chex.assert_trees_all_close(got, want, rtol=0, atol=0)
  with jax.enable_x64(True):
    got = run(entry, scores.astype(np.float64), labels, where=where, reduce_fn=None)
    chex.assert_type(got, jnp.float64)


@pytest.mark.parametrize("entry", cases(INPUT_ERRORS))
def test_input_errors(entry):
  scores = jnp.array([0.3, 0.2, 0.1, 0.0])
  labels = jnp.array([1, 0, 1, 0])

  def raises(error, s, y, match, **kwargs):
    f = functools.partial(entry.fn, **kwargs)
    with pytest.raises(error, match=match):
      f(s, y)
    with pytest.raises(error, match=match):  # At trace time.
      jax.eval_shape(f, s, y)

  bad_dtypes = [jnp.array([True, False, True, True])]
  if entry.inputs == "scores":
    bad_dtypes.append(jnp.array([3, 2, 1, 0]))
  name = inspect.unwrap(entry.fn.func).__name__  # Every message starts with the function's name.
  arg = "scores" if entry.inputs == "scores" else "distances"
  for bad in bad_dtypes:
    raises(TypeError, bad, labels, rf"^{name}: {arg} must .*, got dtype (bool|int32)")
  raises(
    TypeError, scores, labels, rf"^{name}: where must be .*bool", where=jnp.array([1, 1, 0, 1])
  )
  with pytest.raises(ValueError, match=rf"^{name}: .*\(4,\).*\(6,\)|^{name}: .*\(6,\).*\(4,\)"):
    entry.fn(scores, jnp.array([1, 0, 1, 0, 1, 0]))
  # (The Hamming metrics name their distances "scores" in this message: reported, not fixed here.)
  raises(
    ValueError,
    jnp.array(0.3),
    jnp.array(1),
    rf"^{name}: (scores|distances) must have at least one axis",
  )
  raises(ValueError, scores, labels, rf"^{name}: where .*\(2,\)", where=jnp.array([True, False]))
  # Segment ids: integers in the scores' shape (distances valid, so that they are checked).
  scores = jnp.array([3.0, 2.0, 1.0, 0.0]) if entry.inputs == "distances" else scores
  raises(
    TypeError,
    scores,
    labels,
    rf"^{name}: segments must be integer.*got dtype float32",
    segments=jnp.array([0.0, 0.0, 1.0, 1.0]),
  )
  raises(
    TypeError,
    scores,
    labels,
    rf"^{name}: segments must be integer.*got dtype bool",
    segments=jnp.array([True, True, False, False]),
  )
  raises(
    ValueError,
    scores,
    labels,
    rf"^{name}: segments have shape \(1, 4\).*\(4,\)",
    segments=jnp.array([[0, 0, 1, 1]]),
  )
