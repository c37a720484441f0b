r"""Exact tie-aware AP and NDCG of integer Hamming distances (He et al. 2018), and code helpers.

Hashing ranks a database by the Hamming distances of `b`-bit binary codes, integers `0..b`, so
rankings are full of ties; He et al. 2018 evaluate them by tie-aware AP_T and NDCG_T (Prop. 1, the
mean over all orderings of tied items). This module holds:

* `hamming_tie_aware_ap_metric`, `hamming_tie_aware_ndcg_metric`: the exact AP_T and NDCG_T
  (eq. 6-7) of integer Hamming distances, by counting;
* the code helpers: `relaxed_hamming_distance` (eq. 1 and 10), `binarize` (the binary codes of
  eq. 9, for evaluation) and `tanh_scale` (the growing scale of the `tanh` relaxation, App. D).

The relaxations trained on are the losses of `jaxrank._src.tie_aware`. The sections below are
shared by the two metrics, whose docstrings refer to them by name.

**Counting.** The valid items of each list are counted into the `b + 1` distances `0..b` (a
counting sort, smallest distance first), giving `n_d` items at distance `d` (`n^+_d` relevant
ones, `n_{d,v}` of relevance level `v`) and cumulative counts `N_d`, `N^+_d`. The tie at distance
`d` occupies the positions `N_{d-1} + 1, ..., N_d`, and each metric sums over them in closed form
with the summation range of the paper's proofs (the printed eq. 6-7 have typos in their limits;
each metric's docstring says which). The counts are the histograms of `jaxrank._src.histogram`
with `b + 1` centres at the distances `0..b`, hard since every distance sits on a centre, and the
closed forms are the estimators of AP_r and DCG_r (`jaxrank._src.tie_aware`, with the continued
sums of `jaxrank._src.harmonic`), exact on such histograms: one code path for the losses and the
metrics.

**Inputs.** Distances must be integers in `[0, num_bits]` at valid items (integer or floating
dtype; NaN makes the list NaN; masked items are neither checked nor counted). Called eagerly, other
values raise `ValueError`; under `jit` they are not checked (unless traced inside
`jaxrank.traced_checks`), and a non-integer distance is split
between its two nearest integers as in the losses (the value is then the relaxation, AP_r or
DCG_r). Boolean distances raise `TypeError`; `num_bits` is an int `>= 1` (not a bool).

**Conventions.** A list without a relevant valid item (AP), or whose ideal DCG is 0 (NDCG), gives 0
and is left out of the reduction. `reduce_fn` (default `jnp.mean`) is called as `reduce_fn(values,
where=...)` with the lists that count; `None` returns the `[...]` per-list values. Results are in
at least float32.

**Self-inclusion.** A list is taken as given. In-batch distances
(`relaxed_hamming_distance(codes, codes)`) keep each code's distance to itself on the diagonal:
leave it out with `where`, as the paper does (e.g. the `where` of
`jaxrank.batch_retrieval(codes, labels)`).

**Cost.** O(n + b) time and O(n + b) memory per list (the paper's O(b n) bound), no sort of the
distances; NDCG adds one sort of the gains for the ideal DCG (see `hamming_tie_aware_ndcg_metric`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import histogram
from jaxrank._src import lists
from jaxrank._src import segmented
from jaxrank._src import tie_aware

# ---------------------------------------------------------------------------------------------
# Exact tie-aware metrics of integer Hamming distances, by counting.


def _check_distances(
  fn, distances, labels, where, segments, num_bits
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Checked `(distances as floats, labels, where)`, as the lists of the segments with
  `segments` (`jaxrank._src.segmented`); raises for non-integer distances if it can."""
  checks.check_int_at_least(fn, "num_bits", num_bits, 1)
  checks.check_array(fn, "distances", distances, kind="numeric")
  distances = jnp.asarray(distances)
  if jnp.issubdtype(distances.dtype, jnp.integer):
    distances = distances.astype(jnp.result_type(float))
  distances, labels, where = checks.check_lists(fn, distances, labels, where)
  labels = labels.astype(lists.compute_dtype(distances.dtype))
  bad = (
    where
    & ~jnp.isnan(distances)
    & ((distances != jnp.round(distances)) | (distances < 0) | (distances > num_bits))
  )
  message = (
    f"{fn}: distances must be integers in [0, num_bits] = [0, {num_bits}] at valid items; "
    "for relaxed (real-valued) distances use the losses, e.g. tie_aware_ap_loss(1 - 2 * d / "
    "num_bits, ..., num_bins=num_bits + 1)."
  )
  # Traced (under jit): checked only inside `traced_checks` (see the module docstring).
  if checks.known_any(bad, message):
    raise ValueError(message)
  distances, where, labels = segmented.as_lists(fn, segments, distances, where, labels)
  return distances, labels, where


def hamming_tie_aware_ap_metric(
  distances: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  num_bits: int,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Tie-aware AP of integer Hamming distances by counting (He et al. 2018, Prop. 1, eq. 6).

  With the valid items counted into the distances `0..b` and `N^+` relevant valid items, each tie
  contributes

  .. math::
    \mathrm{AP}_T(R^{(d)}) = \frac{n^+_d}{n_d N^+} \sum_{t = N_{d-1}+1}^{N_d}
        \frac{N^+_{d-1} + 1 + (t - N_{d-1} - 1)\frac{n^+_d - 1}{n_d - 1}}{t}

  (eq. 6 with the summation range of its proof, eq. 19; the printed eq. 6 has `N^+` limits and
  `n^+_d - 1` twice, typos). The harmonic sums are evaluated in closed form, so this is the
  estimator of `tie_aware_ap_loss` on hard histograms, and equals `jaxrank.tie_aware_ap_metric(
  -distances, labels)`, which sorts instead.

  Counting, inputs (checked eagerly; under `jit` inside `jaxrank.traced_checks` only), degenerate
  lists, self-inclusion and cost
  (O(n + b) per list, no sort): see the module docstring.

  Args:
    distances: `[..., n]` integer Hamming distances, smaller is better (e.g.
      `relaxed_hamming_distance(binarize(q), binarize(db))`).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    num_bits: `b >= 1`, the code length.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced AP_T, or `[...]` per list with `reduce_fn=None`, in at least float32. Lists without
    a relevant valid item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> round(float(hamming_tie_aware_ap_metric(jnp.array([1, 1]), jnp.array([1, 0]), num_bits=4)), 4)
  0.75
  """
  fn = "hamming_tie_aware_ap_metric"
  distances, labels, where = _check_distances(fn, distances, labels, where, segments, num_bits)
  values, valid = histogram.binned_ap_estimates(
    distances,
    labels,
    where,
    estimator=tie_aware.tie_aware_ap_estimate,
    to_values=histogram.identity,
    num_centres=num_bits + 1,
    first_centre=0.0,
    last_centre=float(num_bits),
  )
  return lists.safe_reduce(values, valid, reduce_fn)


def hamming_tie_aware_ndcg_metric(
  distances: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  num_bits: int,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""Tie-aware NDCG of integer Hamming distances by counting (He et al. 2018, Prop. 1, eq. 7).

  With the valid items counted into the distances `0..b`, each tie contributes its mean gain times
  the discounts of its positions

  .. math::
    \mathrm{DCG}_T(R^{(d)}) = \sum_v \frac{G(v)\, n_{d,v}}{n_d}
        \sum_{t = N_{d-1}+1}^{N_d} \frac{1}{\log_2(1 + t)}

  (the summation range of the proof, eq. 21-23; eq. 7 prints `N^+` limits), `G(v) = 2^v - 1`,
  normalised by the DCG of the ideal order. This is the estimator of `tie_aware_ndcg_loss` on hard
  histograms, and equals `jaxrank.tie_aware_ndcg_metric(-distances, labels)`.

  Counting, inputs (checked eagerly; under `jit` inside `jaxrank.traced_checks` only), degenerate
  lists and self-inclusion: see
  the module docstring. Cost: O(n + b) per list for the DCG, plus one sort of the gains for the
  ideal DCG (O(n log n); the paper's counting sort over the `|V|` levels needs integer labels).

  Args:
    distances: `[..., n]` integer Hamming distances, smaller is better.
    labels: `[..., n]` non-negative graded labels (gain `2**label - 1`); a negative valid label
      raises `ValueError` when the labels are known (under `jit`, inside `jaxrank.traced_checks`
      only).
    num_bits: `b >= 1`, the code length.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced NDCG_T, or `[...]` per list, in at least float32. Lists whose ideal DCG is 0 give 0
    and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> # Two tied items of gains 0 and 1: the mean of NDCG 1 and 0.6309.
  >>> d, labels = jnp.array([2, 2]), jnp.array([0, 1])
  >>> round(float(hamming_tie_aware_ndcg_metric(d, labels, num_bits=4)), 4)
  0.8155
  """
  fn = "hamming_tie_aware_ndcg_metric"
  distances, labels, where = _check_distances(fn, distances, labels, where, segments, num_bits)
  checks.check_graded_labels(fn, labels, where)
  values, valid = tie_aware.binned_ndcg_estimates(
    distances,
    labels,
    where,
    estimator=tie_aware.tie_aware_dcg_estimate,
    num_centres=num_bits + 1,
    first_centre=0.0,
    last_centre=float(num_bits),
  )
  return lists.safe_reduce(values, valid, reduce_fn)


# ---------------------------------------------------------------------------------------------
# Codes.


def relaxed_hamming_distance(
  codes_a: jax.typing.ArrayLike, codes_b: jax.typing.ArrayLike
) -> jax.Array:
  r"""Hamming distances `(b - \phi_i^\top \phi_j) / 2` between two sets of codes (eq. 1 and 10).

  For binary codes in `\{-1, 1\}^b` this is the Hamming distance, an integer in `0..b` (exact in
  float32 up to `b = 2^{24}`); for relaxed codes `\hat\phi = \tanh(\alpha f)` in `(-1, 1)^b` it is
  He et al.'s differentiable relaxation `\hat d_\Phi`. `1 - 2 d / b` is the similarity that the
  tie-aware losses (`jaxrank.tie_aware_ap_loss`, ...) bin, with `num_bins = b + 1`.

  **Self-inclusion.** Nothing is removed: with `codes_a = codes_b` the diagonal is each code's
  distance to itself (0 for binary codes, positive for relaxed ones). Mask it out of the lists, as
  the paper does, e.g. with the `where` of `jaxrank.batch_retrieval(codes, labels)`.

  Cost: one matrix product, O(Q N b) time and O(Q N) memory.

  Args:
    codes_a: `[..., Q, b]` codes (floating, or integer `\pm 1`).
    codes_b: `[..., N, b]` codes of the same length `b`.

  Returns:
    `[..., Q, N]` distances in at least float32.

  >>> import jax.numpy as jnp
  >>> a = jnp.array([[1.0, 1.0, -1.0]])
  >>> b = jnp.array([[1.0, 1.0, -1.0], [-1.0, 1.0, 1.0], [0.5, 0.0, -0.5]])
  >>> relaxed_hamming_distance(a, b).tolist()
  [[0.0, 2.0, 1.0]]
  """
  fn = "relaxed_hamming_distance"
  for name, codes in (("codes_a", codes_a), ("codes_b", codes_b)):
    checks.check_array(fn, name, codes, kind="numeric", min_ndim=2, layout="[..., count, b]")
  codes_a, codes_b = jnp.asarray(codes_a), jnp.asarray(codes_b)
  if codes_a.shape[-1] != codes_b.shape[-1]:
    raise ValueError(
      f"{fn}: codes have different lengths: codes_a {codes_a.shape} and codes_b "
      f"{codes_b.shape} (the last axis is the number of bits b)."
    )
  dtype = lists.compute_dtype(jnp.result_type(codes_a, codes_b))
  if not jnp.issubdtype(dtype, jnp.floating):
    dtype = jnp.result_type(float)
  dots = jnp.matmul(
    codes_a.astype(dtype),
    jnp.swapaxes(codes_b, -1, -2).astype(dtype),
    preferred_element_type=dtype,
  )
  return (codes_a.shape[-1] - dots) / 2


def binarize(codes: jax.typing.ArrayLike) -> jax.Array:
  """The binary code `sgn(codes)` in `{-1, 1}` (eq. 9), with `sgn(0) = +1`, for evaluation.

  Ties of the sign at exactly 0 (a unit at its threshold) go to `+1`, so every bit is defined and
  Hamming distances are integers; NaN gives `-1`. The gradient is zero (use the `tanh` relaxation,
  eq. 10, to train).

  Args:
    codes: `[..., b]` real-valued codes or logits (floating or integer).

  Returns:
    `[..., b]` codes of `\\pm 1` in the dtype of `codes`.

  >>> import jax.numpy as jnp
  >>> binarize(jnp.array([0.3, -2.0, 0.0, -0.0])).tolist()
  [1.0, -1.0, 1.0, 1.0]
  """
  checks.check_array("binarize", "codes", codes, kind="numeric")
  codes = jnp.asarray(codes)
  one = jnp.ones((), codes.dtype)
  return jax.lax.stop_gradient(jnp.where(codes >= 0, one, -one))


def tanh_scale(
  step: jax.typing.ArrayLike,
  *,
  initial: float = 1.0,
  growth: float = 2.0,
  every: int,
) -> jax.Array:
  r"""The scale `\alpha` of the relaxed codes `\tanh(\alpha f)` at a step: grown in stages.

  .. math::
    \alpha(\mathrm{step}) = \alpha_0 \cdot \mathrm{growth}^{\lfloor \mathrm{step} /
        \mathrm{every} \rfloor}

  He et al. 2018, App. D, tighten the relaxation of eq. 10 by increasing `\alpha` during training
  ("`\alpha \to \infty`", against a fixed `\alpha = 40`) but give no schedule. This is the one of
  their released code (`gamma = [initial every growth]`, "e.g. [1 10 2]: initial gamma=1, x2 every
  10 epochs"; `gamma(3)` defaults to 2), a pure function of `step` (epochs there; steps or epochs
  here, as `every` is counted). Their code writes the relaxation as `2 sigmoid(gamma f) - 1 =
  tanh(gamma f / 2)`, so their `gamma` is `2 \alpha`. The growth is unbounded: in float32 `\alpha`
  overflows after about 128 stages of doubling (cap it with `jnp.minimum` if training runs longer).

  Args:
    step: the current step or epoch, an integer `>= 0` (Python int or array, traceable).
    initial: `\alpha_0 > 0`, the scale at step 0.
    growth: the factor `>= 1` applied every `every` steps (2 in the released code).
    every: the number of steps per stage, a positive int.

  Returns:
    The scale, a scalar (or `step`'s shape) in the default floating dtype.

  >>> [float(tanh_scale(s, every=10)) for s in (0, 9, 10, 25)]
  [1.0, 1.0, 2.0, 4.0]
  """
  fn = "tanh_scale"
  checks.check_positive_int(fn, "every", every)
  checks.check_real(fn, "initial", initial, above=0.0)
  checks.check_real(fn, "growth", growth, at_least=1.0)
  checks.check_array(fn, "step", step, kind="numeric")
  step = jnp.asarray(step)
  dtype = jnp.result_type(float)
  stage = jnp.floor(step.astype(dtype) / every)
  return jnp.asarray(initial, dtype) * jnp.power(jnp.asarray(growth, dtype), stage)
