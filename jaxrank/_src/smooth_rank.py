r"""Smooth-rank AP losses: SmoothAP, SupAP, calibration and ROADMAP; the decomposability gap.

Average Precision of a list is the mean, over its relevant items `k`, of the precision at `k`
(Ramzi et al. 2021, eq. 1 and 3):

.. math::
  \mathrm{AP} = \frac{1}{|P|} \sum_{k \in P} \frac{\mathrm{rank}^+(k)}{\mathrm{rank}(k)}, \qquad
  \mathrm{rank}^+(k) = 1 + \sum_{j \in P \setminus \{k\}} H^+(s_j - s_k), \qquad
  \mathrm{rank}(k) = \mathrm{rank}^+(k) + \sum_{j \in N} H^-(s_j - s_k)

with `P` the relevant valid items of the list, `N` the non-relevant valid ones and, for the exact
metric, `H^+ = H^- = H` the Heaviside step `H(t) = 1` if `t >= 0` else 0. One mechanism,
`smooth_rank_ap_loss`, computes `1 - AP` for any pair of step functions passed in as functions;
the losses of the papers are choices of them:

* **SmoothAP** (Brown et al. 2020, the baseline of Ramzi et al. 2021, sec. 3.1, Fig. 3c):
  `H^+ = H^- = sigmoid(t / temperature)` (`sigmoid_step`);
* **SupAP** (Ramzi et al. 2021, eq. 3-5): `H^+ = H` (`heaviside_step`, no gradient: the paper keeps
  the exact rank among positives on purpose) and `H^-` the sigmoid-then-linear step of eq. 4
  (`supap_negative_step`), which lies above `H`, so that the SupAP loss is an upper bound of the
  exact AP loss `1 - ap_metric` (on lists whose relevant items are not tied with each other).

The same smoothed ranks, from the same engine (`precision_sums`, its `Metric` the rank metric
they feed), give Recall@k and NDCG: `recall_at_k_surrogate_loss`, `smooth_recall_at_k_loss`,
`sup_recall_at_k_loss`, `smooth_ndcg_loss` and `sup_ndcg_loss` (`jaxrank._src.smooth_rank_losses`).

`calibration_loss` (eq. 7) pushes relevant scores above `alpha` and the others below `beta`;
`roadmap_loss` is eq. 2, `(1 - calibration_weight) * supap_loss + calibration_weight *
calibration_loss` (the paper's lambda). `decomposability_gap` (eq. 6) measures how much the mean
AP over batches of a list differs from the AP of the whole list.

Conventions (rax's, as in `jaxrank.metrics`): `scores` and `labels` are `[..., n]`, the last axis
is the list; an item is relevant iff its label is `>= 1`; `where` masks items out as if sliced
away; `reduce_fn` reduces over lists, `None` returns one value per list. A list without a relevant
valid item gives 0 and is left out of the reduction. A valid NaN score makes its list's value NaN.

**Self-inclusion.** These functions rank whatever list they are given. For in-batch retrieval,
`jaxrank.batch_retrieval(..., include_self=True)` reproduces the code of Smooth-AP, ROADMAP and
pytorch-metric-learning, where the query is its own positive with similarity 1 (it sits at the top
of its list and raises every precision); the default `include_self=False` leaves it out, as
FastAP, RaMBO and mAP_Q do.

**Cost.** The reference codes build a `[B, n, n]` tensor of score differences. Here each relevant
item is compared with the `n` items of its list, `chunk_size` relevant items of every list at a
time, in a loop that stops after the largest number of relevant items of a list: time
O(B * P * n) for `B` lists with at most `P` relevant items each, memory O(B * n) plus one chunk of
O(B * chunk_size * n); with a static bound `max_relevant=K` the loop takes `ceil(K / chunk_size)`
steps, a trip count the compiler counts (a list beyond the bound gives NaN), and on accelerators,
for `K <= 8`, one step of all `K` slots: a few fused passes over `[B, n]`, memory O(B * n).
Without a bound, accelerators take that one-shot form too whenever every list of the call holds
at most 8 relevant items, chosen on the device at run time (`bounds.branch_index`). The
gradient is a custom VJP that runs the same loop again, so the backward pass stores no `[B, n, n]`
tensor either. It is the exact derivative of the surrogate (not an interpolation), flows to the
scores and to the step functions' hyperparameters, and is reverse-mode only: `jax.grad`, `jax.vjp`
and `jax.jacrev` work; `jax.jvp` and `jax.jacfwd` of these losses raise.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import lists
from jaxrank._src import metrics
from jaxrank._src import pairwise
from jaxrank._src import partitions
from jaxrank._src import platforms
from jaxrank._src import precision_sums
from jaxrank._src import segmented

# Step functions. The private forms take their hyperparameters as explicit arguments, so that the
# engine's jitted loop (`precision_sums`) is compiled once per shape whatever their values, and
# gets their gradients.


def _heaviside(x):
  return (x >= 0).astype(x.dtype)


def _sigmoid(x, temperature):
  return jax.nn.sigmoid(x / temperature)


def _supap_negative(x, temperature, rho, delta):
  sigmoid = jax.nn.sigmoid(x / temperature)
  linear = rho * (x - delta) + jax.nn.sigmoid(delta / temperature) + 0.5
  return jnp.where(x < 0, sigmoid, jnp.where(x <= delta, sigmoid + 0.5, linear))


def heaviside_step(x: jax.typing.ArrayLike) -> jax.Array:
  r"""The Heaviside step of the exact rank, `1` where `x >= 0`, else `0` (Ramzi et al. 2021, eq. 3).

  .. math::
    H(t) = \begin{cases} 1 & t \geq 0 \\ 0 & t < 0 \end{cases}

  Its gradient is zero: used as `H^+` it keeps the exact rank among relevant items and sends no
  gradient through it, as SupAP does (sec. 3.1: the gradient of AP with respect to `rank^+` would
  push relevant scores down). `H(0) = 1` counts a tied item as ranked above, as the pessimistic
  ties of `ap_metric` do.

  Args:
    x: score differences `s_j - s_k`, any shape.

  Returns:
    `0.` or `1.`, shaped like `x`, in at least float32.

  >>> heaviside_step(jnp.array([-0.5, 0.0, 0.5]))
  Array([0., 1., 1.], dtype=float32)
  """
  x = jnp.asarray(x)
  return _heaviside(x.astype(lists.compute_dtype(x.dtype)))


def sigmoid_step(x: jax.typing.ArrayLike, *, temperature: jax.typing.ArrayLike = 0.01) -> jax.Array:
  r"""The sigmoid step of SmoothAP (Brown et al. 2020; Ramzi et al. 2021, Fig. 3c).

  .. math::
    \sigma_\mathrm{T}(t) = \frac{1}{1 + e^{-t / \mathrm{T}}}

  It tends to the Heaviside step as the temperature `T` goes to 0, except at `t = 0` where it is
  `1/2`. Fix the temperature with `functools.partial(sigmoid_step, temperature=0.05)`.

  Args:
    x: score differences `s_j - s_k`, any shape.
    temperature: `T > 0` (SmoothAP's default 0.01, for cosine similarities).

  Returns:
    `sigmoid(x / temperature)`, shaped like `x`.

  >>> [round(v, 4) for v in sigmoid_step(jnp.array([-0.05, 0.0, 0.05])).tolist()]
  [0.0067, 0.5, 0.9933]
  """
  _check_temperature("sigmoid_step", temperature)
  return _sigmoid(jnp.asarray(x), temperature)


def supap_negative_step(
  x: jax.typing.ArrayLike,
  *,
  temperature: jax.typing.ArrayLike = 0.01,
  rho: jax.typing.ArrayLike = 100.0,
  delta: jax.typing.ArrayLike = 0.05,
) -> jax.Array:
  r"""SupAP's step `H^-` between a relevant item and a non-relevant one (Ramzi et al. 2021, eq. 4).

  .. math::
    H^-(t) = \begin{cases}
      \sigma(t / \tau) & t < 0 \\
      \sigma(t / \tau) + 0.5 & 0 \leq t \leq \delta \\
      \rho\,(t - \delta) + \sigma(\delta / \tau) + 0.5 & t > \delta
    \end{cases}

  with `t = s_j - s_k` the score of the non-relevant item minus that of the relevant one.

  * Below 0 (correctly ordered pair) it is a sigmoid of temperature `temperature` (the paper's
    :math:`\tau`), which keeps a small gradient.
  * At 0 it jumps by 1/2, to `sigma(0) + 0.5 = 1`, so that `H^- >= H` everywhere (`H(0) = 1`):
    this is what makes the SupAP loss an upper bound of the AP loss. Eq. 4 lists `t = 0` in both
    of its first two cases; the second is taken (the authors' code takes the first, 1/2, at
    exact ties only).
  * After `delta` it is linear with slope `rho`, so that a badly misordered pair still gets a
    gradient where the sigmoid has saturated. The constant `sigma(delta / temperature) + 0.5` is
    the one written in eq. 4: it makes `H^-` continuous at `delta` (a kink there, no jump).

  **The authors' code** (elias-ramzi/ROADMAP, `step_rank` in `roadmap/losses/smooth_rank_ap.py`,
  since November 2022) computes `rho * (t - delta) + offset` for `t > delta` and `0.5 + sigma(t /
  tau)` for `0 < t <= delta`. Its `offset` defaults to `sigma(delta / tau) + 0.5`, this function's
  constant, but the configs of its SupAP and ROADMAP runs (`roadmap/config/loss/supap.yaml`,
  `roadmap.yaml`) set `offset: 1.44`: their step drops at `delta` from `sigma(5) + 0.5 = 1.4933`
  to 1.44 and stays 0.0533 below this one on the whole linear part. The gradient is the same; their
  loss values are slightly lower (by 1e-4 to 3e-4 on in-batch lists of 64 random embeddings, 8
  classes, 8 to 128 dimensions, the query included). The iNaturalist configs (`supap_inat.yaml`,
  `roadmap_inat.yaml`) set `offset: 1.0, start: 0.0` instead. The first release (December 2021)
  computed `rho * t + offset`, a jump from 1.49 to 6.44 at `delta` with the same configs. At an
  exact tie `t = 0` their step takes the sigmoid, 1/2 (see above).

  Defaults are the paper's (sec. 4, "ROADMAP settings": :math:`\tau = 0.01`, `rho = 100`; `delta =
  0.05` from the authors' configs, where `sigma(delta / temperature) = sigma(5)` is saturated). Fix
  them with `functools.partial`.

  Args:
    x: score differences `s_j - s_k`, any shape.
    temperature: temperature :math:`\tau` of the sigmoid part, `> 0` (as SmoothAP's `temperature`).
    rho: slope of the linear part, `>= 0`.
    delta: where the linear part starts, `>= 0`.

  Returns:
    `H^-(x)`, shaped like `x`.

  >>> [round(v, 4) for v in supap_negative_step(jnp.array([-0.01, 0.0, 0.05, 0.06])).tolist()]
  [0.2689, 1.0, 1.4933, 2.4933]
  """
  _check_supap("supap_negative_step", temperature, rho, delta)
  x = jnp.asarray(x)
  return _supap_negative(x, temperature, rho, jnp.asarray(delta, x.dtype))


def smooth_rank_ap_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  positive_step_fn: types.StepFn,
  negative_step_fn: types.StepFn,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  chunk_size: int | None = None,
  max_relevant: int | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""`1 - AP` with ranks smoothed by the given step functions: the mechanism of every loss here.

  For each relevant valid item `k` of a list (Ramzi et al. 2021, eq. 3 and 5):

  .. math::
    \mathrm{rank}^+(k) = 1 + \sum_{j \in P \setminus \{k\}} H^+(s_j - s_k), \qquad
    \mathrm{rank}^-(k) = \sum_{j \in N} H^-(s_j - s_k), \qquad
    \mathcal{L} = 1 - \frac{1}{|P|} \sum_{k \in P}
        \frac{\mathrm{rank}^+(k)}{\mathrm{rank}^+(k) + \mathrm{rank}^-(k)}

  with `P` the relevant valid items (label `>= 1`) and `N` the other valid items. With
  `heaviside_step` for both it is `1 - ap_metric` on lists without ties among relevant items;
  `smoothap_loss` and `supap_loss` are this function with their steps.

  Step functions must be elementwise and non-negative; they are traced once per shape at
  `[B, chunk_size, n]`. They may close over hyperparameters, traced ones included, and the gradient
  reaches those too. Compilation: a step function that closes over no array (a module-level
  function, or a `functools.partial` with Python numbers, kept across calls) is compiled once per
  shape; one that closes over arrays runs in the caller's trace, so jit the caller.

  Time O(B * P * n) for `B` lists of `n` items with at most `P` relevant items each (all lists
  advance together, so the list with the most relevant items sets the number of steps); memory
  O(B * n) plus one chunk of `B * chunk_size * n` pairs, in the forward and in the backward pass
  (custom VJP: reverse mode only).

  **A bound on relevant items** (`max_relevant=K`, static). Without it the loop runs until the
  list with the most relevant items is done: a trip count known only at run time, which XLA's
  cost analysis cannot count (the TPU compiler's estimate is negative) and which keeps every
  list's slots in `[B, n]` arrays for the backward pass. With it the loop takes `ceil(K / chunk)`
  steps, a static trip count, and the backward pass reads `[B, K]` slots. The bound is the
  caller's promise (in-batch lists with `m` items per class: `K = m - 1`): a list with more than
  `K` relevant valid items gives NaN and a zero gradient, so that a broken promise shows in the
  loss rather than as a silently wrong value (its first `K` relevant items only); the program
  holds the bounded form alone. Without a bound, on accelerators, the choice is made on the
  device (`bounds.branch_index`, issue 51): the one-shot form of the smallest of 1, 2, 4 slots
  that holds every list's relevant items, or above 4 that form over 4 slots at a time in a loop
  of data-dependent length (which counts each group again in the backward pass rather than keep
  `[B, n]` slots), one `lax.switch` whose branch taken alone runs (the compiler's estimate counts
  every branch). Same values and gradients either way; on CPU, the general loop. Under `vmap`
  over batches every branch runs: pass the bound there.

  Platforms: on CPU each step gathers its items' scores and scatter-adds their gradients; on
  accelerators (GPU, TPU), which serialise gathers and scatters, both are one compare-and-sum over
  the list (O(B chunk n), as the step's comparisons are), chosen at lowering
  (`platforms.by_platform`); steps of several relevant items find them by `chunk` minimums over
  the list there, by one scatter of slots on CPU. With a bound `K <= 8` on accelerators,
  `chunk_size` is not used: all `K` slots of every list are taken in one step, one `[B, n]`
  expression per slot, whose sums over the list XLA fuses, so that the forward pass is `K + 1`
  passes over `[B, n]` (finding the slots' items, then the sums) and the backward pass two (the
  slots' own cotangents, then the scores' cotangent), with nothing `[B, K, n]` in memory; beyond
  8, the loop of `chunk` slots per step. The same values and gradients.

  Args:
    scores: `[..., n]` floating scores, higher is better.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    positive_step_fn: `H^+`, applied to `s_j - s_k` for relevant `j != k`.
    negative_step_fn: `H^-`, applied to `s_j - s_k` for non-relevant `j`. Pass the same function
      object as `positive_step_fn` to evaluate it once per pair.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    chunk_size: relevant items of every list compared with their lists at each step (a positive
      int); `None` picks the largest that keeps a step within 2**22 pairs (at least 1). It changes
      the memory, never the result.
    max_relevant: optional static bound `K` on the relevant valid items of a list (see above);
      `None` loops until the list with the most relevant items is done.
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`, in at least float32. Lists
    without a relevant valid item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.9, 0.8, 0.7, 0.1]), jnp.array([1, 0, 1, 0])
  >>> loss = smooth_rank_ap_loss(
  ...     scores, labels, positive_step_fn=heaviside_step, negative_step_fn=heaviside_step)
  >>> round(float(loss), 4)  # 1 - AP = 1 - (1/1 + 2/3) / 2.
  0.1667
  """
  fn = "smooth_rank_ap_loss"
  hint = "Pass a step function, e.g. heaviside_step."
  checks.check_callable(fn, "positive_step_fn", positive_step_fn, hint=hint)
  checks.check_callable(fn, "negative_step_fn", negative_step_fn, hint=hint)
  steps = (
    (positive_step_fn, None),
    None if negative_step_fn is positive_step_fn else (negative_step_fn, None),
  )
  return _ap_loss(fn, scores, labels, where, segments, steps, chunk_size, max_relevant, reduce_fn)


def _ap_loss(fn, scores, labels, where, segments, steps, chunk_size, max_relevant, reduce_fn):
  """`1 - AP` smoothed by `steps`, `(H^+, H^-)` as `precision_sums.smoothed_ap` takes them
  (`H^-` None for the same step), reduced: the body of every loss here but ROADMAP's."""
  positive, negative = steps
  ap, valid, scores, _, where = precision_sums.smoothed_ap(
    fn, scores, labels, where, segments, positive, negative, chunk_size, max_relevant
  )
  return lists.finish(1 - ap, scores, where, valid, reduce_fn)


def sigmoid_steps(fn, temperature):
  """SmoothAP's steps, its hyperparameter checked: the sigmoid for both `H^+` and `H^-` (shared
  with the losses of `smooth_rank_losses`)."""
  _check_temperature(fn, temperature)
  return (_sigmoid, (temperature,)), None


def supap_steps(fn, temperature, rho, delta):
  """SupAP's steps, its hyperparameters checked: the Heaviside step for `H^+`, eq. 4's for `H^-`
  (shared with the losses of `smooth_rank_losses`)."""
  _check_supap(fn, temperature, rho, delta)
  return (_heaviside, ()), (_supap_negative, (temperature, rho, delta))


def _check_temperature(fn, temperature):
  checks.check_real(
    fn, "temperature", temperature, above=0, hint="It is the sigmoid's temperature (0.01)."
  )


def _check_supap(fn, temperature, rho, delta):
  _check_temperature(fn, temperature)
  checks.check_real(fn, "rho", rho, at_least=0, hint="It is the slope after delta (ROADMAP: 100).")
  checks.check_real(fn, "delta", delta, at_least=0, hint="The linear part starts there (0.05).")


def _check_calibration(fn, alpha, beta):
  a = checks.check_real(fn, "alpha", alpha)
  b = checks.check_real(fn, "beta", beta)
  if a is not None and b is not None and a < b:
    raise ValueError(
      f"{fn}: alpha ({a}) must be >= beta ({b}): relevant scores are pushed above alpha and the "
      "others below beta (ROADMAP: alpha=0.9, beta=0.6)."
    )


def smoothap_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  temperature: jax.typing.ArrayLike = 0.01,
  chunk_size: int | None = None,
  max_relevant: int | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The Smooth-AP loss (Brown et al. 2020): every step of the ranks is a sigmoid.

  .. math::
    \mathcal{L}_\mathrm{SmoothAP} = 1 - \frac{1}{|P|} \sum_{k \in P}
      \frac{1 + \sum_{j \in P \setminus \{k\}} \sigma_\mathrm{T}(s_j - s_k)}
           {1 + \sum_{j \neq k} \sigma_\mathrm{T}(s_j - s_k)}

  with `sigma_T(t) = sigmoid(t / T)` (`sigmoid_step`), `P` the relevant valid items and the sum
  in the denominator over all valid items but `k` (Brown et al. 2020; the baseline of
  Ramzi et al. 2021, sec. 3.1). It tends to `1 - ap_metric` as `T -> 0` on lists without ties. It
  is not a bound of the AP loss, and its gradient vanishes for pairs misordered by more than a few
  `T` (Ramzi et al. 2021, Fig. 3c); `supap_loss` fixes both.

  Self-inclusion: `smoothap_loss(*jaxrank.batch_retrieval(embeddings, labels, include_self=True))`
  is the loss of the Smooth-AP code and of pytorch-metric-learning's `SmoothAPLoss`, where each
  query is its own positive; the default `include_self=False` leaves the query out of its list.

  Time O(B * P * n), memory O(B * n) plus a chunk of `B * chunk_size * n` pairs (see
  `smooth_rank_ap_loss`); no `[B, n, n]` tensor, forward or backward.

  Args:
    scores: `[..., n]` floating scores (cosine similarities for the default temperature).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    temperature: `T > 0`, default 0.01 (the Smooth-AP code's and ROADMAP's setting). A Python
      number is checked at once; a traced array is not, and gets a gradient.
    chunk_size: relevant items per list per step, or `None` (see `smooth_rank_ap_loss`).
    max_relevant: optional static bound `K` on the relevant valid items of a list: `ceil(K /
      chunk)` steps, a trip count the compiler knows; a list with more gives NaN (see
      `smooth_rank_ap_loss`).
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`. Lists without a relevant valid
    item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.9, 0.8, 0.7, 0.1]), jnp.array([1, 0, 1, 0])
  >>> round(float(smoothap_loss(scores, labels)), 4)  # 1 - AP = 0.1667 for T -> 0.
  0.1667
  >>> round(float(smoothap_loss(scores, labels, temperature=0.1)), 4)
  0.2373
  """
  steps = sigmoid_steps("smoothap_loss", temperature)
  return _ap_loss(
    "smoothap_loss", scores, labels, where, segments, steps, chunk_size, max_relevant, reduce_fn
  )


def supap_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  temperature: jax.typing.ArrayLike = 0.01,
  rho: jax.typing.ArrayLike = 100.0,
  delta: jax.typing.ArrayLike = 0.05,
  chunk_size: int | None = None,
  max_relevant: int | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The SupAP loss (Ramzi et al. 2021, eq. 3-5): exact rank among positives, `H^-` for the rest.

  .. math::
    \mathcal{L}_\mathrm{SupAP} = 1 - \frac{1}{|P|} \sum_{k \in P}
      \frac{\mathrm{rank}^+(k)}{\mathrm{rank}^+(k) + \sum_{j \in N} H^-(s_j - s_k)}, \qquad
    \mathrm{rank}^+(k) = 1 + \sum_{j \in P \setminus \{k\}} H(s_j - s_k)

  with `H` the Heaviside step (`heaviside_step`, no gradient) and `H^-` the sigmoid-then-linear
  step of eq. 4 (`supap_negative_step`: sigmoid below 0, `+ 1/2` from 0 to `delta`, slope `rho`
  after `delta`, continuous at `delta`). Since `H^- >= H`, the loss is an upper bound of
  `1 - ap_metric` on lists whose relevant items are not tied with each other (sec. 3.1, property 1;
  with tied relevant items the exact `rank^+` counts each of them above the others and AP can be
  overestimated), and every misordered pair keeps a gradient of at least `rho` once it is more
  than `delta` apart (property 2). The loss jumps where a non-relevant score crosses a relevant
  one (the 1/2 step of `H^-` at 0), as in the paper.

  Self-inclusion: the ROADMAP code ranks each query among the whole batch, itself included as a
  positive with similarity 1: `jaxrank.batch_retrieval(..., include_self=True)`.

  Time O(B * P * n), memory O(B * n) plus a chunk of `B * chunk_size * n` pairs (see
  `smooth_rank_ap_loss`).

  Args:
    scores: `[..., n]` floating scores (cosine similarities for the default hyperparameters).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    temperature: temperature :math:`\tau` of `H^-`'s sigmoid, `> 0` (paper: 0.01).
    rho: slope of `H^-` after `delta`, `>= 0` (paper: 100; 0 gives a constant after `delta`).
    delta: start of the linear part, `>= 0` (0.05, the authors' configs).
    chunk_size: relevant items per list per step, or `None` (see `smooth_rank_ap_loss`).
    max_relevant: optional static bound `K` on the relevant valid items of a list: `ceil(K /
      chunk)` steps, a trip count the compiler knows; a list with more gives NaN (see
      `smooth_rank_ap_loss`).
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`. Lists without a relevant valid
    item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.9, 0.8, 0.7, 0.1]), jnp.array([1, 0, 1, 0])
  >>> # The negative 0.8 is 0.1 above the relevant 0.7, on the linear part of H^-:
  >>> # H^-(0.1) = 100 * (0.1 - 0.05) + sigmoid(5) + 0.5 = 6.49, so rank(0.7) = 2 + 6.49.
  >>> round(float(supap_loss(scores, labels)), 4)  # The exact AP loss is 0.1667.
  0.3823
  """
  steps = supap_steps("supap_loss", temperature, rho, delta)
  return _ap_loss(
    "supap_loss", scores, labels, where, segments, steps, chunk_size, max_relevant, reduce_fn
  )


def _calibrated_lists(valid, labels, where):
  """The lists ROADMAP's calibration term counts `[...]`: SupAP's `valid` itself on CPUs and TPUs,
  where the calibration then masks the scores exactly as SupAP did and the compiler reads and
  keeps one masked copy for both (TPU v5e, the bounded step at B = 16,384: estimate 3.31x -> 2.71x
  the floor's, temporaries 2.5 -> 1.5 `[B, B]` arrays; CPU, B = 4096: 680 -> 616 MB); on GPUs the
  calibration's own (the same lists), since there the shared mask made the default step's
  program keep half a `[B, B]` array more (H100, compile-only, 16,384: 2.9x -> 3.4x the floor's
  temporaries)."""

  def own(valid, labels, where):
    del valid
    return jnp.any(where & (labels >= 1), axis=-1)

  return platforms.by_platform(
    valid, labels, where, cpu=lambda valid, *_: valid, accelerator=lambda valid, *_: valid, gpu=own
  )


def _calibration(scores, labels, where, alpha, beta, valid=None):
  return pairwise.contrastive_lists(scores, labels >= 1, where, alpha, beta, valid)


def calibration_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  alpha: jax.typing.ArrayLike = 0.9,
  beta: jax.typing.ArrayLike = 0.6,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The calibration loss of ROADMAP (Ramzi et al. 2021, eq. 7): absolute thresholds on the scores.

  .. math::
    \mathcal{L}_\mathrm{calibr.} = \frac{1}{|P|} \sum_{j \in P} [\alpha - s_j]_+
      + \frac{1}{|N|} \sum_{j \in N} [s_j - \beta]_+

  per list, with `P` the relevant valid items, `N` the other valid items and `[x]_+ = max(x, 0)`;
  the second term is 0 when `N` is empty. Relevant scores are pushed above `alpha` and the others
  below `beta <= alpha`, so that the scores of different batches are comparable and the mean AP
  over batches gets closer to the AP of the whole set (sec. 3.2; see `decomposability_gap`).

  Normalisation: eq. 7 as written, a mean over the relevant items plus a mean over the others, per
  list, then the mean over lists. The authors' code uses pytorch-metric-learning's
  `ContrastiveLoss(pos_margin=alpha, neg_margin=beta)` on the pairs of the batch (the query itself
  left out), which averages each hinge over the pairs where it is non-zero, across the whole batch:
  same minimisers, different weights. A list without a relevant valid item gives 0 and is left out,
  as for every loss of this module, so that `roadmap_loss` combines two losses defined on the same
  lists. With `batch_retrieval(..., include_self=True)` the query counts as a relevant item with
  score 1 (zero hinge) and dilutes the first mean; `include_self=False` matches the authors' pairs.

  O(n) time and memory per list.

  Args:
    scores: `[..., n]` floating scores (cosine similarities for the default thresholds).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    alpha: threshold above which relevant scores cost nothing (paper: 0.9).
    beta: threshold below which the other scores cost nothing, `<= alpha` (paper: 0.6).
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`. Lists without a relevant valid
    item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.95, 0.7, 0.8, 0.1]), jnp.array([1, 0, 1, 0])
  >>> round(float(calibration_loss(scores, labels)), 4)  # (0 + 0.1) / 2 + (0.1 + 0) / 2
  0.1
  """
  fn = "calibration_loss"
  _check_calibration(fn, alpha, beta)
  scores, labels, where = checks.check_lists(fn, scores, labels, where)
  scores, where, labels = segmented.as_lists(fn, segments, scores, where, labels)
  values, valid = _calibration(scores, labels, where, alpha, beta)
  return lists.finish(values, scores, where, valid, reduce_fn)


def roadmap_loss(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  calibration_weight: jax.typing.ArrayLike = 0.5,
  temperature: jax.typing.ArrayLike = 0.01,
  rho: jax.typing.ArrayLike = 100.0,
  delta: jax.typing.ArrayLike = 0.05,
  alpha: jax.typing.ArrayLike = 0.9,
  beta: jax.typing.ArrayLike = 0.6,
  chunk_size: int | None = None,
  max_relevant: int | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The ROADMAP loss (Ramzi et al. 2021, eq. 2): SupAP plus the calibration loss.

  .. math::
    \mathcal{L}_\mathrm{ROADMAP} = (1 - \lambda)\, \mathcal{L}_\mathrm{SupAP}
      + \lambda\, \mathcal{L}_\mathrm{calibr.}

  per list (`supap_loss`, eq. 5, and `calibration_loss`, eq. 7), then reduced over lists.
  `calibration_weight` is the paper's lambda: 0 is SupAP alone and 1 the calibration loss alone
  (sec. 4.3). The paper uses 0.5; the authors' configs add both losses with weight 1, which is
  twice eq. 2 at `calibration_weight = 0.5` (the same direction; Adam does not see the factor).

  Self-inclusion: see `supap_loss` and `calibration_loss` (the authors rank the query among its
  batch, itself included, and leave it out of the calibration pairs).

  Args:
    scores: `[..., n]` floating scores (cosine similarities for the default hyperparameters).
    labels: `[..., n]` labels; relevant iff `>= 1`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
    calibration_weight: weight :math:`\lambda` of the calibration loss, in [0, 1] (paper: 0.5).
    temperature: see `supap_loss` (0.01).
    rho: see `supap_loss` (100).
    delta: see `supap_loss` (0.05).
    alpha: see `calibration_loss` (0.9).
    beta: see `calibration_loss` (0.6).
    chunk_size: relevant items per list per step, or `None` (see `smooth_rank_ap_loss`).
    max_relevant: optional static bound `K` on the relevant valid items of a list: `ceil(K /
      chunk)` steps, a trip count the compiler knows; a list with more gives NaN (see
      `smooth_rank_ap_loss`).
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced loss, or `[...]` per list with `reduce_fn=None`. Lists without a relevant valid
    item give 0 and are left out of the reduction.

  >>> import jax.numpy as jnp
  >>> scores, labels = jnp.array([0.95, 0.7, 0.8, 0.1]), jnp.array([1, 0, 1, 0])
  >>> supap = float(supap_loss(scores, labels))
  >>> calibration = float(calibration_loss(scores, labels))
  >>> round(float(roadmap_loss(scores, labels)) - (0.5 * supap + 0.5 * calibration), 6)
  0.0
  """
  fn = "roadmap_loss"
  checks.check_real(
    fn,
    "calibration_weight",
    calibration_weight,
    at_least=0,
    at_most=1,
    hint="It weighs the calibration loss.",
  )
  positive, negative = supap_steps(fn, temperature, rho, delta)
  _check_calibration(fn, alpha, beta)
  ap, valid, scores, labels, where = precision_sums.smoothed_ap(
    fn, scores, labels, where, segments, positive, negative, chunk_size, max_relevant
  )
  calibration, _ = _calibration(
    scores, labels, where, alpha, beta, _calibrated_lists(valid, labels, where)
  )
  values = (1 - calibration_weight) * (1 - ap) + calibration_weight * calibration
  return lists.finish(values, scores, where, valid, reduce_fn)


def decomposability_gap(
  scores: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  *,
  num_batches: int,
  where: jax.typing.ArrayLike | None = None,
  segments: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The decomposability gap of AP (Ramzi et al. 2021, eq. 6): mean batch AP minus global AP.

  .. math::
    \mathrm{DG}_\mathrm{AP} = \frac{1}{K} \sum_{b=1}^{K} \mathrm{AP}^b - \mathrm{AP}

  Each list of `n` items (one query ranking its retrieval set) is split into `K = num_batches`
  consecutive batches of `n / K` items: batch `b` holds items `b n / K` to `(b + 1) n / K - 1` (in
  the order given; shuffle first for random batches). `AP^b` is `ap_metric` on batch `b` alone and
  `AP` is `ap_metric` on the whole list; masked items are left out of both.

  Sign: positive when the batches overestimate the AP of the whole list, the usual case, since
  within a batch a relevant item is outranked only by that batch's items (the paper's motivation:
  small-batch training sees too optimistic an AP). It can be negative. A batch without a relevant
  valid item has no AP and is left out of the mean over batches (so `1/K` becomes one over the
  batches with a relevant item); a list without any relevant valid item gives 0 and is left out of
  the reduction. Not differentiable (it is a diagnostic: one sort per batch and one per list,
  O(n log n)).

  Args:
    scores: `[..., n]` floating scores, higher is better.
    labels: `[..., n]` labels; relevant iff `>= 1`.
    num_batches: `K`, a positive int dividing `n`.
    where: optional `[..., n]` boolean mask of valid items.
    segments: optional `[..., n]` integer ids packing several lists into each row: the items
      with equal ids form one list (rax's `segments`; API reference, "Segments"), and
      `reduce_fn=None` then gives `[..., n]`; each row costs what `n` lists of `n` items cost.
      A segment's batches are those of the packed row: its items keep their positions (the other
      segments are masked in place).
    reduce_fn: reduction over lists (default `jnp.mean`); `None` gives `[...]`.

  Returns:
    The reduced gap, or `[...]` per list with `reduce_fn=None`.

  >>> import jax.numpy as jnp
  >>> # Each batch is ranked perfectly (AP 1), but the whole list puts a negative (0.8) before the
  >>> # relevant item of the second batch (0.7): AP = (1 + 2/3) / 2.
  >>> scores, labels = jnp.array([0.9, 0.8, 0.7, 0.1]), jnp.array([1, 0, 1, 0])
  >>> round(float(decomposability_gap(scores, labels, num_batches=2)), 4)
  0.1667
  """
  fn = "decomposability_gap"
  checks.check_positive_int(fn, "num_batches", num_batches)
  scores, labels, where = checks.check_lists(fn, scores, labels, where)
  scores, where, labels = segmented.as_lists(fn, segments, scores, where, labels)
  n = scores.shape[-1]
  if n % num_batches:
    raise ValueError(
      f"{fn}: num_batches={num_batches} does not divide the list size {n}; batches must be "
      "equal (eq. 6 assumes N / B = K batches of B items)."
    )
  gap, defined = _gap(scores, labels >= 1, where, num_batches=num_batches)
  return lists.finish(gap, scores, where, defined, reduce_fn)


@functools.partial(jax.jit, static_argnames="num_batches")
def _gap(scores, relevant, where, *, num_batches):
  labels = relevant.astype(jnp.int32)
  n = scores.shape[-1]
  batches = jnp.arange(n).reshape(num_batches, n // num_batches)

  def batch_ap(batch):
    s, y, w = batch
    return (metrics.ap_metric(s, y, where=w, reduce_fn=None), jnp.any(w & (y >= 1), axis=-1))

  # [K, ...] per batch, all batches at once (the memory of one copy of the lists).
  batch_ap, batch_defined = partitions.over_batches(
    batch_ap, (scores, labels, where), batches, axis=-1, batch_size=num_batches
  )
  count = jnp.sum(batch_defined, axis=0)
  total = jnp.sum(jnp.where(batch_defined, batch_ap, 0), axis=0)
  mean_batch = total / jnp.maximum(count, 1).astype(batch_ap.dtype)
  whole = metrics.ap_metric(scores, labels, where=where, reduce_fn=None)
  return mean_batch - whole, count > 0
