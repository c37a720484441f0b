"""The function types of jaxrank's API, defined once.

Every list-level loss and metric is a `LossFn` or `MetricFn`: `fn(scores, labels, *, where=None,
..., reduce_fn=jnp.mean)` on arrays shaped `[..., n]` (the list on the last axis), rax's signature.
`reduce_fn` is a `ReduceFn`: called as `reduce_fn(values, where=valid)` on the per-list values, or
`None` for one value per list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import jax

PyTree = Any
"""A nested structure of arrays (see `jax.tree_util`)."""

ReduceFn = Callable[..., jax.Array] | None
"""How per-list values are reduced (`jnp.mean`, `jnp.sum`, a custom `fn(values, where=mask)`), or
`None` for no reduction."""

StepFn = Callable[[jax.Array], jax.Array]
"""A step (Heaviside-like) function of score differences, as the smooth-rank losses take."""

SimilarityFn = Callable[[jax.Array, jax.Array], jax.Array]
"""A scoring rule `fn(queries [Q, D], items [N, D]) -> scores [Q, N]`, higher is more similar."""


class LossFn(Protocol):
  """A list-level loss: `loss(scores, labels, *, where=None, reduce_fn=jnp.mean, ...)`."""

  def __call__(
    self,
    scores: jax.typing.ArrayLike,
    labels: jax.typing.ArrayLike,
    *,
    where: jax.typing.ArrayLike | None = None,
    reduce_fn: ReduceFn = ...,
  ) -> jax.Array: ...


MetricFn = LossFn
"""A list-level metric has the signature of a loss; it is exact and not differentiable."""
