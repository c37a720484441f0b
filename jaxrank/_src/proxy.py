r"""Proxy-based baselines: Proxy-NCA, ProxyNCA++ and Proxy-Anchor losses, on learned class proxies.

A proxy loss compares each embedding of a batch with `C` learned proxies, one per class, instead of
with the other embeddings of the batch: the `[B, C]` scores of `B` embeddings against `C` proxies,
never a `[B, B]` matrix. The proxies are the caller's parameters (an `[C, D]` array trained beside
the network, e.g. an `nnx.Param`), passed in like the embeddings; both get gradients.

Conventions shared by the three losses:

* **Inputs.** `embeddings [B, D]`; `labels [B]` integer classes in `[0, C)` or multi-hot
  `[B, C]` (class `c` is a label of item `i` iff `labels[i, c] >= 1`, True included);
  `proxies [C, D]`, row `c` the proxy of class `c`; an optional `where [B]` mask of valid items.
  A masked item is left out as if sliced away: its labels are not read and it gets a zero
  gradient (even a NaN embedding). The positive proxies `Y_i` of item `i` are the proxies of its
  class, or of its labels; the others are its negatives.
* **Similarity.** Embeddings and proxies are compared by their cosine `s_ic`
  (`jaxrank.similarity.cosine`: both are L2-normalised, a zero row has similarity 0 with
  everything), in `[-1, 1]`; Proxy-NCA's squared Euclidean distance between the unit vectors is
  `d_ic = 2 - 2 s_ic`.
* **Classes absent from the batch.** Every proxy takes part whether its class is in the batch or
  not: as a negative of every item (both Proxy-NCA denominators, Proxy-Anchor's negative term).
  Proxy-Anchor's positive term averages over the proxies with a positive in the batch only.
* **Reduction.** `reduce_fn` as in the list-level losses (`jnp.mean` by default, `jnp.sum`, a
  custom `fn(values, where=mask)`, or `None` for the unreduced values): over items for the
  Proxy-NCA losses, over proxies for Proxy-Anchor (its docstring says how). A valid NaN embedding
  or proxy makes the values it enters NaN.
* **Over devices.** Inside `jax.shard_map`, with the proxies replicated (`P()`) and the batch
  split over a mesh axis, `reduce_fn=jaxrank.sharded_mean(axis_name)` gives every device the loss
  of the whole global batch, and its gradients are one device's (the embeddings' for each
  device's rows; the proxies', summed over the devices by the transpose of their replication):

  .. code-block:: python

     def local(embeddings, labels, proxies):  # This device's rows, every proxy.
       return jaxrank.proxy_anchor_loss(
           embeddings, labels, proxies, reduce_fn=jaxrank.sharded_mean("batch"))
     loss = jax.shard_map(local, mesh=mesh, in_specs=(P("batch"), P("batch"), P()),
                          out_specs=P())

  Proxy-NCA's mean is over every device's valid items; Proxy-Anchor's sums over items run over
  every device before their logarithms, and its positive term's count of proxies with a positive
  counts the whole batch's.
* **pytorch-metric-learning.** `proxy_nca_plus_plus_loss` and `proxy_anchor_loss` equal, in value
  and in gradient with respect to both the embeddings and the proxies, pytorch-metric-learning
  2.9.0's `ProxyNCALoss` and `ProxyAnchorLoss` with their default distances and reducers, given
  the same proxies (`tests/test_proxy.py`, in float64). `proxy_nca_loss`, the original form, has
  no counterpart there (its docstring says why).

**Cost.** O(B C D) time and O(B C) memory (on a CPU the cosine's products are taken over blocks of
1,024 proxies, so at least `[B, 1024]`); one pass over the `[B, C]` scores per term.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrank import types
from jaxrank._src import checks
from jaxrank._src import class_vectors
from jaxrank._src import lists


@functools.partial(jax.jit, static_argnames=("include_positive",))
def _nca_values(scores, positive, where, inverse_temperature, *, include_positive):
  """Each item's `-log` of its positive proxies' share `[B]`, and which items count: valid ones
  with a positive proxy (and, without the positive in the denominator, a negative one)."""
  negative = ~positive
  valid = where & jnp.any(positive, axis=-1)
  if not include_positive:
    valid = valid & jnp.any(negative, axis=-1)
  s = lists.counted_scores(scores, jnp.ones_like(positive), valid)
  # -d / T = (2 s - 2) / T; the constant -2 / T cancels between numerator and denominator.
  logits = 2 * inverse_temperature * s
  denominator = jnp.ones_like(positive) if include_positive else negative
  values = class_vectors.masked_logsumexp(logits, denominator) - class_vectors.masked_logsumexp(
    logits, positive
  )
  return values, valid


def _nca_loss(fn, embeddings, labels, proxies, where, reduce_fn, temperature, include_positive):
  embeddings, proxies, positive, where = class_vectors.check_inputs(
    fn, embeddings, labels, proxies, where, class_vectors.PROXIES
  )
  scores = class_vectors.cosine_scores(embeddings, proxies, where)
  inverse_temperature = 1 / jnp.asarray(temperature, scores.dtype)
  values, valid = _nca_values(
    scores, positive, where, inverse_temperature, include_positive=include_positive
  )
  return lists.finish(values, scores, where[:, None], valid, reduce_fn)


def proxy_nca_loss(
  embeddings: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  proxies: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The Proxy-NCA loss (Movshovitz-Attias et al. 2017): NCA against one proxy per class.

  .. math::
    \mathcal{L}_i = -\log \frac{\sum_{c \in Y_i} e^{-d_{ic}}}{\sum_{c \notin Y_i} e^{-d_{ic}}},
    \qquad d_{ic} = \Big\| \frac{x_i}{\|x_i\|} - \frac{p_c}{\|p_c\|} \Big\|^2 = 2 - 2 s_{ic}

  per item `i`, with `Y_i` its positive proxies (the proxy of its class; with multi-hot labels
  those of its labels, NCA's sum over the neighbours of its class) and `p_c` the proxies. This is
  Movshovitz-Attias et al. 2017's Proxy-NCA (sec. 3: NCA's loss, Goldberger et al., with each
  point's positive and negatives replaced by proxies; the positive proxy is not in the
  denominator) on unit embeddings and proxies, as Teh et al. 2020 (sec. 3) state it. It has no
  hyperparameter and is not bounded below by 0: a well-separated item's loss is negative, at best
  `log(C - 1) - 4` (every negative proxy antipodal, the positive one on the item).

  **ProxyNCA++** is a separate function, `proxy_nca_plus_plus_loss`, not a flag here: it changes
  what the loss is (the positive proxy joins the denominator, so each item's loss is the negative
  log of a probability, never below 0), besides adding a temperature (STYLE.md: separate
  functions instead of flags that change meaning). pytorch-metric-learning's `ProxyNCALoss` is
  that form, at temperature `1 / softmax_scale`, so this one has no counterpart there; its tests
  compare it with the float64 reference only.

  **Reduction.** `jnp.mean` averages over the valid items with a positive and a negative proxy;
  an item without one (every proxy its label, or `C = 1`) gives 0 and is left out, as a list
  without a relevant item is. With `C >= 2` and class labels every valid item counts. See the
  module docstring for the inputs, absent classes, devices and cost.

  Args:
    embeddings: `[B, D]` floating embeddings (need not be normalised).
    labels: `[B]` integer classes in `[0, C)`, or `[B, C]` multi-hot labels (`>= 1` where a class
      is a label of the item).
    proxies: `[C, D]` floating proxies, row `c` the proxy of class `c`.
    where: optional `[B]` boolean mask of valid items.
    reduce_fn: reduction over items (default `jnp.mean`); `None` gives `[B]`.

  Returns:
    The reduced loss, or `[B]` per item with `reduce_fn=None`, in at least float32.

  >>> import jax.numpy as jnp
  >>> e, p = jnp.array([[1.0, 0.0], [0.0, 2.0]]), jnp.array([[1.0, 0.0], [0.0, 1.0]])
  >>> round(float(proxy_nca_loss(e, jnp.array([0, 1]), p)), 4)  # -log(e^0 / e^-2) each
  -2.0
  """
  return _nca_loss(
    "proxy_nca_loss", embeddings, labels, proxies, where, reduce_fn, 1.0, include_positive=False
  )


def proxy_nca_plus_plus_loss(
  embeddings: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  proxies: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  temperature: jax.typing.ArrayLike = 1 / 9,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The ProxyNCA++ loss (Teh et al. 2020): Proxy-NCA as a probability, at a low temperature.

  .. math::
    \mathcal{L}_i = -\log \frac{\sum_{c \in Y_i} e^{-d_{ic} / T}}{\sum_{c=1}^{C} e^{-d_{ic} / T}},
    \qquad d_{ic} = \Big\| \frac{x_i}{\|x_i\|} - \frac{p_c}{\|p_c\|} \Big\|^2 = 2 - 2 s_{ic}

  per item `i`, with `Y_i` its positive proxies (see `proxy_nca_loss`) and `T = temperature`. Of
  Teh et al. 2020's changes to Proxy-NCA (sec. 3), two are the loss's: the positive proxy joins
  the denominator ("proxy assignment probability": the loss is the cross-entropy of the softmax
  over all proxies, at least 0) and the low temperature `T` (their `T = 1/9`, the default: in
  their code the unit vectors are scaled by `3 = sqrt(9)` before the squared distance). Unit
  embeddings and proxies are common to both forms. Their other changes are not the loss's: global
  max pooling and layer normalisation are the network's, and fast-moving proxies a larger
  learning rate for the proxies in the optimiser (e.g. `optax.multi_transform`). Why this is a
  separate function rather than a flag of `proxy_nca_loss`: see there. With multi-hot labels the
  numerator sums the softmax over the item's labels (NCA's probability of its class).

  **pytorch-metric-learning.** `ProxyNCALoss(C, D, softmax_scale=1 / temperature)` (its default
  `LpDistance(power=2)` on normalised embeddings and proxies, its default `MeanReducer`) given
  these proxies is exactly this loss with `jnp.mean`, in value and gradient (embeddings and
  proxies); its default `softmax_scale=1` is `temperature=1` here. Its one difference: it drops
  from the mean an item whose probability underflows to exactly 0 (float32 at a large
  `softmax_scale`), where this loss, computed as a log-softmax, keeps its finite value. A zero
  embedding is at distance `2 - 2 * 0 = 2` from every proxy here, at 1 there.

  **Reduction.** `jnp.mean` averages over the valid items with a positive proxy (every valid item
  with class labels); a multi-hot item without a label gives 0 and is left out. See the module
  docstring for the inputs, absent classes, devices and cost.

  Args:
    embeddings: `[B, D]` floating embeddings (need not be normalised).
    labels: `[B]` integer classes in `[0, C)`, or `[B, C]` multi-hot labels (`>= 1` where a class
      is a label of the item).
    proxies: `[C, D]` floating proxies, row `c` the proxy of class `c`.
    where: optional `[B]` boolean mask of valid items.
    temperature: `T > 0`, dividing the squared distances in the softmax (default 1/9, Teh et al.
      2020; pytorch-metric-learning's `softmax_scale` is `1 / temperature`, default 1).
    reduce_fn: reduction over items (default `jnp.mean`); `None` gives `[B]`.

  Returns:
    The reduced loss, or `[B]` per item with `reduce_fn=None`, in at least float32.

  >>> e, p = jnp.array([[1.0, 0.0], [0.0, 2.0]]), jnp.array([[1.0, 0.0], [0.0, 1.0]])
  >>> y = jnp.array([0, 1])
  >>> round(float(proxy_nca_plus_plus_loss(e, y, p, temperature=1.0)), 4)  # log(1 + e^-2)
  0.1269
  """
  fn = "proxy_nca_plus_plus_loss"
  checks.check_real(
    fn,
    "temperature",
    temperature,
    above=0,
    hint="ProxyNCA++'s is 1/9 (Teh et al. 2020); pytorch-metric-learning's softmax_scale is "
    "1 / temperature.",
  )
  return _nca_loss(
    fn, embeddings, labels, proxies, where, reduce_fn, temperature, include_positive=True
  )


def _items_summed_by(reduce_fn: types.ReduceFn):
  """The sum over items `[B, C] -> [C]` of Proxy-Anchor's terms: by the `sum_fn` of a mean
  (`jnp.mean`; `sharded_mean` adds every device's items), over this call's items otherwise."""
  if reduce_fn is jnp.mean:
    reduce_fn = lists.Mean(jnp.sum)
  if isinstance(reduce_fn, lists.Mean):
    return jax.vmap(reduce_fn.sum_fn, in_axes=1)
  return lambda x: jnp.sum(x, axis=0)


def _softplus_of_log(total: jax.Array, shift: jax.Array) -> jax.Array:
  """`log(1 + e^shift total)` `[C]`, as `softplus(log(total) + shift)` (accurate for any
  total); 0 for an empty sum (`total` 0, with a zero gradient), NaN for a NaN one."""
  empty = total == 0
  z = jnp.log(jnp.where(empty, jnp.ones_like(total), total)) + shift
  return jnp.where(empty, jnp.zeros_like(total), jax.nn.softplus(z))


def _anchor_terms(scores, positive, where, margin, alpha, sum_items):
  """Proxy-Anchor's positive and negative terms `[C]` and which proxies have a positive.

  The exponents of the two sums are at most `alpha (1 + |margin|)` (cosines lie in `[-1, 1]`);
  each term is shifted down by that bound, a constant known on every device, so that the sums
  over items (over the devices, too) neither overflow nor need each device's maximum.
  """
  in_pos = where[:, None] & positive  # [B, C]: item i is in X_c^+.
  in_neg = where[:, None] & ~positive
  shift = jax.lax.stop_gradient(alpha * (1 + jnp.abs(margin)))
  zero = jnp.zeros((), scores.dtype)
  pos_sum = sum_items(jnp.where(in_pos, jnp.exp(-alpha * (scores - margin) - shift), zero))
  neg_sum = sum_items(jnp.where(in_neg, jnp.exp(alpha * (scores + margin) - shift), zero))
  count = sum_items(in_pos.astype(scores.dtype))
  return _softplus_of_log(pos_sum, shift), _softplus_of_log(neg_sum, shift), count > 0


def _over_proxies(pos, neg, with_positives, reduce_fn):
  """Proxy-Anchor's reduction over proxies (see `proxy_anchor_loss`, "Reduction")."""
  if reduce_fn is None:
    return pos + neg
  if reduce_fn is jnp.mean or isinstance(reduce_fn, lists.Mean):
    # The sums over items are already the whole batch's: the means over proxies are taken here.
    count = jnp.sum(with_positives.astype(pos.dtype))
    return lists.Mean.divide(jnp.sum(pos), count) + jnp.mean(neg)
  return reduce_fn(pos, where=with_positives) + reduce_fn(neg, where=jnp.ones_like(with_positives))


def proxy_anchor_loss(
  embeddings: jax.typing.ArrayLike,
  labels: jax.typing.ArrayLike,
  proxies: jax.typing.ArrayLike,
  *,
  where: jax.typing.ArrayLike | None = None,
  margin: jax.typing.ArrayLike = 0.1,
  alpha: jax.typing.ArrayLike = 32.0,
  reduce_fn: types.ReduceFn = jnp.mean,
) -> jax.Array:
  r"""The Proxy-Anchor loss (Kim et al. 2020): each proxy an anchor against the whole batch.

  .. math::
    \mathcal{L} = \frac{1}{|P^+|} \sum_{c \in P^+}
      \log\Big(1 + \sum_{i \in X_c^+} e^{-\alpha (s_{ic} - \delta)}\Big)
      + \frac{1}{C} \sum_{c=1}^{C} \log\Big(1 + \sum_{i \in X_c^-} e^{\alpha (s_{ic} + \delta)}\Big)

  with `s_ic` the cosine of item `i` and proxy `c`, `X_c^+` the valid items of which proxy `c`
  is a positive (its class's items; with multi-hot labels, the items with label `c`), `X_c^-`
  the other valid items, `P^+` the proxies with a positive item in the batch, `delta = margin`
  and `alpha` the scale: Kim et al. 2020's Proxy-Anchor loss (sec. 3). The defaults
  `margin=0.1, alpha=32` are the paper's (its implementation details), as are
  pytorch-metric-learning's. Multi-hot labels extend it as
  the paper's sets do: an item is in `X_c^+` of each of its labels.

  Unlike Proxy-NCA, the loss is not a sum over items: each proxy's terms are a log-sum-exp over
  the batch, so that an item's gradient depends on the other items' similarities to the same
  proxy (the paper's "data-to-data relations").

  **Reduction.** Over proxies. `jnp.mean` (the paper's): the positive terms averaged over `P^+`,
  the negative terms over all `C` proxies (a proxy with no negative in the batch, as the proxy
  of a batch of one class, gives 0 and still counts). `reduce_fn=None` gives the `[C]` values
  `pos_c + neg_c` (`pos_c = 0` for a proxy without a positive), whose sum is the value with
  `jnp.sum`; another `reduce_fn` is called on each term, `reduce_fn(pos, where=with_positive) +
  reduce_fn(neg, where=all)`. With `jnp.mean` or `jaxrank.sharded_mean` the sums over items are
  taken by the mean's sums (over every device's items); with any other `reduce_fn`, over this
  call's. Each sum is shifted down by the bound `alpha (1 + |margin|)` of its exponents, so the
  value and gradients are finite for any `alpha`; in float32 a term whose exponent lies more than
  about 87 below the bound underflows to 0 (a term below `e^-52` with the defaults: negligible).

  **pytorch-metric-learning.** `ProxyAnchorLoss(C, D, margin=margin, alpha=alpha)` (its defaults:
  `CosineSimilarity`, `DivisorReducer`, dividing the positive term by the number of proxies with
  a positive and the negative term by `C`) given these proxies is exactly this loss with
  `jnp.mean`, in value and gradient (embeddings and proxies), absent classes included. See the
  module docstring for the inputs, devices and cost.

  Args:
    embeddings: `[B, D]` floating embeddings (need not be normalised).
    labels: `[B]` integer classes in `[0, C)`, or `[B, C]` multi-hot labels (`>= 1` where a class
      is a label of the item).
    proxies: `[C, D]` floating proxies, row `c` the proxy of class `c`.
    where: optional `[B]` boolean mask of valid items.
    margin: `delta`, in cosine units: positives cost while below it, negatives while above
      `-delta` (default 0.1).
    alpha: `> 0`, the scale of the exponents (default 32).
    reduce_fn: reduction over proxies (default `jnp.mean`, above); `None` gives `[C]`.

  Returns:
    The reduced loss, or `[C]` per proxy with `reduce_fn=None`, in at least float32. A batch
    without a valid item gives 0.

  >>> e, p = jnp.array([[1.0, 0.0], [0.0, 2.0]]), jnp.array([[1.0, 0.0], [0.0, 1.0]])
  >>> y = jnp.array([0, 1])
  >>> round(float(proxy_anchor_loss(e, y, p)), 4)  # log(1 + e^-28.8) + log(1 + e^3.2)
  3.24
  """
  fn = "proxy_anchor_loss"
  checks.check_real(fn, "margin", margin)
  checks.check_real(fn, "alpha", alpha, above=0, hint="It scales the exponents (Kim et al.: 32).")
  embeddings, proxies, positive, where = class_vectors.check_inputs(
    fn, embeddings, labels, proxies, where, class_vectors.PROXIES
  )
  scores = class_vectors.cosine_scores(embeddings, proxies, where)
  margin, alpha = jnp.asarray(margin, scores.dtype), jnp.asarray(alpha, scores.dtype)
  pos, neg, with_positives = _anchor_terms(
    scores, positive, where, margin, alpha, _items_summed_by(reduce_fn)
  )
  return _over_proxies(pos, neg, with_positives, reduce_fn)
