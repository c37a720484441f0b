"""Loss landscapes of rank-based losses: slices, surrogate tracking, gradient quality, gaps.

Pure, jittable helpers for the analyses that the notebooks run, on any scalar function of scores,
embeddings or a network's parameters (pytrees): slices along one or two directions
(`slice_1d`, `slice_2d`; `random_direction`, `filter_normalized_direction` after Li et al. 2018,
`direction_between`), how a surrogate tracks an exact loss over random perturbations
(`surrogate_tracking`, with `spearman_correlation` and `kendall_correlation`), how its gradient
points against the exact loss's finite differences (`gradient_cosine`, `descent_directions`), and
the decomposability gap of any function over batches (`batch_gap`, ROADMAP eq. 6). Functions and
counts are static arguments, every array (coordinates, `scale`, `step`, keys, `args`) is traced:
new values do not recompile. Points are evaluated `batch_size` at a time (`jax.lax.map`).

`plot_slice_2d` and `plot_tracking` draw on a matplotlib `Axes` the caller passes (matplotlib, in
the `train` extra, is never imported by `jaxrank`).

>>> import jax, jax.numpy as jnp
>>> import jaxrank
>>> from jaxrank import landscape
>>> scores, labels = jnp.linspace(0.5, -0.5, 6), jnp.array([1, 0, 1, 0, 0, 1])
>>> u, v = jnp.eye(6)[0], jnp.eye(6)[1]
>>> exact = lambda y, l: 1 - jaxrank.ap_metric(y, l)
>>> grid = jnp.linspace(-0.5, 0.5, 5)
>>> landscape.slice_2d(exact, scores, (u, v), grid, grid, args=(labels,)).shape
(5, 5)
"""

from jaxrank._src.landscape import batch_gap as batch_gap
from jaxrank._src.landscape import descent_directions as descent_directions
from jaxrank._src.landscape import direction_between as direction_between
from jaxrank._src.landscape import filter_normalize as filter_normalize
from jaxrank._src.landscape import filter_normalized_direction as filter_normalized_direction
from jaxrank._src.landscape import gradient_cosine as gradient_cosine
from jaxrank._src.landscape import kendall_correlation as kendall_correlation
from jaxrank._src.landscape import random_direction as random_direction
from jaxrank._src.landscape import slice_1d as slice_1d
from jaxrank._src.landscape import slice_2d as slice_2d
from jaxrank._src.landscape import spearman_correlation as spearman_correlation
from jaxrank._src.landscape import surrogate_tracking as surrogate_tracking
from jaxrank._src.landscape_plots import plot_slice_2d as plot_slice_2d
from jaxrank._src.landscape_plots import plot_tracking as plot_tracking

__all__ = [
  "batch_gap",
  "descent_directions",
  "direction_between",
  "filter_normalize",
  "filter_normalized_direction",
  "gradient_cosine",
  "kendall_correlation",
  "plot_slice_2d",
  "plot_tracking",
  "random_direction",
  "slice_1d",
  "slice_2d",
  "spearman_correlation",
  "surrogate_tracking",
]
