r"""Classification baselines: normalised softmax, ArcFace and CosFace, on learned class weights.

A classification loss trains the embeddings as the features of a linear classifier whose `C`
class weights are L2-normalised, one per training class: the cross-entropy of a softmax over the
`[B, C]` cosines of the `B` embeddings with the `C` class weights, scaled, with (ArcFace, CosFace)
or without (normalised softmax) a margin that makes the target class harder to score. Musgrave et
al. 2020 ("A Metric Learning Reality Check") found these among the strongest metric-learning
losses. The class weights are the caller's parameters (a `[C, D]` array trained beside the
network, e.g. an `nnx.Param`), passed in like the embeddings; both get gradients. At test time
only the embeddings are used, compared with each other by their cosine.

Conventions shared by the three losses (those of the proxy losses, `jaxrank.proxy_nca_loss`):

* **Inputs.** `embeddings [B, D]`; `labels [B]` integer classes in `[0, C)` (the normalised
  softmax also takes multi-hot `[B, C]`, class `c` a label of item `i` iff `labels[i, c] >= 1`;
  ArcFace and CosFace do not, and say so: their margin moves the one target class's logit);
  `class_weights [C, D]`, row `c` the weights of class `c`; an optional `where [B]` mask of valid
  items. A masked item is left out as if sliced away: its labels are not read and it gets a zero
  gradient (even a NaN embedding). The rows are stored `[C, D]`, one per class as the proxies
  are; pytorch-metric-learning stores its `W` as `[D, C]` (its `.T` is these).
* **Similarity.** `s_ic` is the cosine of embedding `i` and class weights `c`
  (`jaxrank.similarity.cosine`: both L2-normalised, a zero row has cosine 0 with everything), in
  `[-1, 1]`; the logits are `scale * s_ic` (the normalised softmax's scale is `1 / temperature`),
  the target class's cosine first changed by the margin.
* **Every class takes part**, in the batch or not: each item's softmax runs over all `C` classes.
* **Reduction.** Over items: `jnp.mean` averages over the valid items (with multi-hot labels,
  over those with a label; an item without one gives 0 and is left out), `jnp.sum`, a custom
  `fn(values, where=mask)`, or `None` for the `[B]` values. A valid NaN embedding or class weight
  makes the values it enters NaN.
* **Over devices.** As the proxy losses: inside `jax.shard_map`, the class weights replicated
  (`P()`) and the batch split over a mesh axis, `reduce_fn=jaxrank.sharded_mean(axis_name)` gives
  every device the whole batch's mean, and its gradients are one device's (the class weights',
  summed over the devices by the transpose of their replication).
* **pytorch-metric-learning.** Each equals, in value and in gradient with respect to both the
  embeddings and the class weights, pytorch-metric-learning 2.9.0's `NormalizedSoftmaxLoss`,
  `ArcFaceLoss` and `CosFaceLoss` with their default distances, reducers and hyperparameters,
  given `W = class_weights.T` (`tests/test_classification.py`, in float64). Their `W` starts at
  `N(0, 1)` (`torch.nn.init.normal_`); the job's table starts the class weights so too.

**Cost.** O(B C D) time and O(B C) memory, one pass over the `[B, C]` logits (on a CPU the
cosine's products are taken over blocks of 1,024 classes, so at least `[B, 1024]`).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import class_vectors
from jaxrank._src import lists

ARCFACE_MARGIN = math.radians(28.6)
"""ArcFace's default angular margin: pytorch-metric-learning's 28.6 degrees, in radians (0.4992;
Deng et al. 2019 use 0.5)."""


def _cosface_target(cosine: jax.Array, margin: jax.Array) -> jax.Array:
  """CosFace's target logit before the scale: `cos(theta) - m`."""
  return cosine - margin


def _arcface_target(cosine: jax.Array, margin: jax.Array) -> jax.Array:
  """ArcFace's target logit before the scale: `cos(theta + m)` while `theta <= pi - m`, else
  `cos(theta) - m sin(m)` (keeping it decreasing in `theta`, as InsightFace and
  pytorch-metric-learning do).

  `cos(theta + m) = cos(theta) cos(m) - sin(theta) sin(m)` with `sin(theta) = sqrt(1 - cos^2)`:
  pytorch-metric-learning's `cos(acos(clamp(s, -1, 1)) + m)` without the arccosine, the same
  value and, for `|s| < 1`, the same derivative. At `|s| = 1` (an embedding parallel or opposite
  to its class weights, where `d sin(theta) / ds` is infinite) the target's derivative is 0, as
  theirs is (PyTorch's clamp passes no gradient at its bounds): finite. The cosines are already
  in `[-1, 1]` (`similarity.cosine` clips them).
  """
  inside = jnp.abs(cosine) < 1
  cosine = jnp.where(inside, cosine, jax.lax.stop_gradient(cosine))
  sine = jnp.where(inside, jnp.sqrt(jnp.where(inside, 1 - cosine * cosine, 1)), 0)
  shifted = cosine * jnp.cos(margin) - sine * jnp.sin(margin)
  fallback = cosine - margin * jnp.sin(margin)
  return jnp.where(cosine >= jnp.cos(jnp.pi - margin), shifted, fallback)


@functools.partial(jax.jit, static_argnames=("target_fn",))
def _softmax_values(scores, positive, where, scale, margin, *, target_fn):
  """Each item's cross-entropy `[B]`, `-log` of its positive classes' share of the softmax of
  the logits, and which items count (valid ones with a positive class). With `target_fn`, the
  one target class's cosine `t` becomes `target_fn(t, margin)` before the scale."""
  valid = where & jnp.any(positive, axis=-1)
  s = lists.counted_scores(scores, jnp.ones_like(positive), valid)
  if target_fn is not None:
    # The target's cosine by a masked sum over the classes (one per row), not a gather.
    target = jnp.sum(jnp.where(positive, s, jnp.zeros_like(s)), axis=-1)
    s = jnp.where(positive, target_fn(target, margin)[:, None], s)
  logits = scale * s
  every = jnp.ones_like(positive)
  values = class_vectors.masked_logsumexp(logits, every) - class_vectors.masked_logsumexp(
    logits, positive
  )
  return values, valid


def _softmax_loss(
  fn, embeddings, labels, class_weights, where, reduce_fn, scale, margin, target_fn
) -> jax.Array:
  embeddings, class_weights, positive, where = class_vectors.check_inputs(
    fn,
    embeddings,
    labels,
    class_weights,
    where,
    class_vectors.CLASS_WEIGHTS,
    multi_hot=target_fn is None,
  )
  scores = class_vectors.cosine_scores(embeddings, class_weights, where)
  scale, margin = jnp.asarray(scale, scores.dtype), jnp.asarray(margin, scores.dtype)
  values, valid = _softmax_values(scores, positive, where, scale, margin, target_fn=target_fn)
  return lists.finish(values, scores, where[:, None], valid, reduce_fn)


def normalized_softmax_loss(
  embeddings: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  class_weights: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  temperature: jax.typing.ArrayLike = 0.05,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The normalised softmax loss (Zhai & Wu 2019): cross-entropy on cosines at a temperature.

  .. math::
    \mathcal{L}_i = -\log \frac{\sum_{c \in Y_i} e^{s_{ic} / T}}{\sum_{c=1}^{C} e^{s_{ic} / T}},
    \qquad s_{ic} = \frac{x_i^\top w_c}{\|x_i\| \|w_c\|}

  per item `i`, with `Y_i` its class (with multi-hot labels, its labels: the softmax's share of
  all of them), `w_c` the class weights and `T = temperature`: Zhai & Wu 2019, "Classification is
  a Strong Baseline for Deep Metric Learning", sec. 3.1 (the normalised softmax loss: the
  softmax over normalised class weights and embeddings, at a temperature). The default `T =
  0.05` is theirs and pytorch-metric-learning's. Their layer normalisation and class-balanced
  sampling are the network's and the sampler's, not the loss's. It is ProxyNCA++
  (`proxy_nca_plus_plus_loss`) at temperature `2 T` with the class weights as proxies
  (`-d / 2T = (s - 1) / T`).

  **pytorch-metric-learning.** `NormalizedSoftmaxLoss(C, D, temperature=temperature)` (its
  `DotProductSimilarity` on normalised embeddings and `W`, its `MeanReducer`) with `W =
  class_weights.T` is exactly this loss with `jnp.mean`, in value and gradient (embeddings and
  class weights). See the module docstring for the inputs, reduction, devices and cost.

  Args:
    embeddings: `[B, D]` floating embeddings (need not be normalised).
    labels: `[B]` integer classes in `[0, C)`, or `[B, C]` multi-hot labels (`>= 1` where a class
      is a label of the item).
    class_weights: `[C, D]` floating class weights, row `c` those of class `c` (need not be
      normalised; pytorch-metric-learning's `W.T`).
    where: optional `[B]` boolean mask of valid items.
    temperature: `T > 0`, dividing the cosines in the softmax (default 0.05, Zhai & Wu 2019
      and pytorch-metric-learning).
    reduce_fn: reduction over items (default `jnp.mean`); `None` gives `[B]`.

  Returns:
    The reduced loss, or `[B]` per item with `reduce_fn=None`, in at least float32.

  >>> import jax.numpy as jnp
  >>> e, w = jnp.array([[1.0, 0.0], [0.0, 2.0]]), jnp.array([[1.0, 0.0], [0.0, 1.0]])
  >>> y = jnp.array([0, 1])
  >>> round(float(normalized_softmax_loss(e, y, w, temperature=1.0)), 4)  # log(1 + e^-1)
  0.3133
  """
  fn = "normalized_softmax_loss"
  checks.check_real(
    fn, "temperature", temperature, above=0, hint="Zhai & Wu 2019 use 0.05, the default."
  )
  return _softmax_loss(
    fn, embeddings, labels, class_weights, where, reduce_fn, 1 / temperature, 0.0, None
  )


def arcface_loss(
  embeddings: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  class_weights: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  angular_margin: jax.typing.ArrayLike = ARCFACE_MARGIN,
  scale: jax.typing.ArrayLike = 64.0,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The ArcFace loss (Deng et al. 2019): softmax with an additive angular margin on the target.

  .. math::
    \mathcal{L}_i = -\log \frac{e^{s \cos(\theta_{i y_i} + m)}}
      {e^{s \cos(\theta_{i y_i} + m)} + \sum_{c \ne y_i} e^{s \cos \theta_{ic}}},
    \qquad \cos \theta_{ic} = \frac{x_i^\top w_c}{\|x_i\| \|w_c\|}

  per item `i` of class `y_i`, with `w_c` the class weights, `s = scale` and `m =
  angular_margin` in radians: Deng et al. 2019, "ArcFace: Additive Angular Margin Loss for Deep
  Face Recognition", eq. 3. Where `theta + m` would pass `pi` (`theta > pi - m`), the target
  logit is `s (cos(theta) - m sin(m))` instead, which keeps it decreasing in `theta` (the
  authors' InsightFace code and pytorch-metric-learning do this). The defaults are
  pytorch-metric-learning's: `scale=64` (the paper's `s`) and 28.6 degrees, `math.radians(28.6)
  = 0.4992` (the paper's `m = 0.5`). Class labels only: a multi-hot `labels` raises, as the
  margin belongs to the one target class. The margin is an angle, hence its own name (CosFace's
  `margin` is in cosine units).

  **Gradient.** `cos(theta + m)` is computed as `cos(theta) cos(m) - sin(theta) sin(m)`, equal
  in value and derivative to pytorch-metric-learning's `cos(acos(clamp(s, -1, 1)) + m)` for
  `|s| < 1`; at `|s| = 1` (an embedding parallel or opposite to its class's weights, where the
  derivative of `sin(theta)` is infinite) the target logit's derivative is 0, as their clamp's
  is, so the gradient is finite and still theirs.

  **pytorch-metric-learning.** `ArcFaceLoss(C, D, margin=degrees(angular_margin), scale=scale)`
  (its `CosineSimilarity`, its `MeanReducer`) with `W = class_weights.T` is exactly this loss with
  `jnp.mean`, in value and gradient (embeddings and class weights). See the module docstring for
  the inputs, reduction, devices and cost.

  Args:
    embeddings: `[B, D]` floating embeddings (need not be normalised).
    labels: `[B]` integer classes in `[0, C)`.
    class_weights: `[C, D]` floating class weights, row `c` those of class `c` (need not be
      normalised; pytorch-metric-learning's `W.T`).
    where: optional `[B]` boolean mask of valid items.
    angular_margin: `m` in radians, in `[0, pi / 2]` (default `math.radians(28.6)`,
      pytorch-metric-learning's 28.6 degrees; pytorch-metric-learning's `margin` is in degrees).
    scale: `s > 0`, multiplying the logits (default 64).
    reduce_fn: reduction over items (default `jnp.mean`); `None` gives `[B]`.

  Returns:
    The reduced loss, or `[B]` per item with `reduce_fn=None`, in at least float32.

  >>> e, w = jnp.array([[1.0, 0.0], [0.0, 2.0]]), jnp.array([[1.0, 0.0], [0.0, 1.0]])
  >>> y = jnp.array([0, 1])
  >>> # Each item at angle 0 to its class and pi/2 to the other: log(1 + e^(0 - cos(pi/3))).
  >>> round(float(arcface_loss(e, y, w, angular_margin=jnp.pi / 3, scale=1.0)), 4)
  0.4741
  """
  fn = "arcface_loss"
  checks.check_real(
    fn,
    "angular_margin",
    angular_margin,
    at_least=0,
    at_most=math.pi / 2,
    hint="It is in radians (Deng et al. 2019: 0.5); pytorch-metric-learning's margin is in "
    "degrees (28.6), math.radians(28.6) here.",
  )
  checks.check_real(fn, "scale", scale, above=0, hint="Deng et al. 2019 use 64.")
  return _softmax_loss(
    fn, embeddings, labels, class_weights, where, reduce_fn, scale, angular_margin, _arcface_target
  )


def cosface_loss(
  embeddings: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  class_weights: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  margin: jax.typing.ArrayLike = 0.35,
  scale: jax.typing.ArrayLike = 64.0,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The CosFace loss (Wang et al. 2018): softmax with an additive cosine margin on the target.

  .. math::
    \mathcal{L}_i = -\log \frac{e^{s (\cos \theta_{i y_i} - m)}}
      {e^{s (\cos \theta_{i y_i} - m)} + \sum_{c \ne y_i} e^{s \cos \theta_{ic}}},
    \qquad \cos \theta_{ic} = \frac{x_i^\top w_c}{\|x_i\| \|w_c\|}

  per item `i` of class `y_i`, with `w_c` the class weights, `s = scale` and `m = margin` in
  cosine units: Wang et al. 2018, "CosFace: Large Margin Cosine Loss for Deep Face Recognition",
  eq. 4 (the large margin cosine loss, LMCL). The defaults `margin=0.35, scale=64` are
  pytorch-metric-learning's (the paper's `m = 0.35`; its `s = 64`). Class labels only: a
  multi-hot `labels` raises, as the margin belongs to the one target class.

  **pytorch-metric-learning.** `CosFaceLoss(C, D, margin=margin, scale=scale)` (its
  `CosineSimilarity`, its `MeanReducer`) with `W = class_weights.T` is exactly this loss with
  `jnp.mean`, in value and gradient (embeddings and class weights). See the module docstring for
  the inputs, reduction, devices and cost.

  Args:
    embeddings: `[B, D]` floating embeddings (need not be normalised).
    labels: `[B]` integer classes in `[0, C)`.
    class_weights: `[C, D]` floating class weights, row `c` those of class `c` (need not be
      normalised; pytorch-metric-learning's `W.T`).
    where: optional `[B]` boolean mask of valid items.
    margin: `m`, subtracted from the target class's cosine (default 0.35).
    scale: `s > 0`, multiplying the logits (default 64).
    reduce_fn: reduction over items (default `jnp.mean`); `None` gives `[B]`.

  Returns:
    The reduced loss, or `[B]` per item with `reduce_fn=None`, in at least float32.

  >>> e, w = jnp.array([[1.0, 0.0], [0.0, 2.0]]), jnp.array([[1.0, 0.0], [0.0, 1.0]])
  >>> y = jnp.array([0, 1])
  >>> round(float(cosface_loss(e, y, w, margin=0.5, scale=1.0)), 4)  # log(1 + e^(0 - 0.5))
  0.4741
  """
  fn = "cosface_loss"
  checks.check_real(fn, "margin", margin)
  checks.check_real(fn, "scale", scale, above=0, hint="Wang et al. 2018 use 64.")
  return _softmax_loss(
    fn, embeddings, labels, class_weights, where, reduce_fn, scale, margin, _cosface_target
  )
