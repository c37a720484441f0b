"""Drawing the results of `jaxrank.landscape` on a matplotlib `Axes` the caller passes.

Nothing here imports matplotlib (the `train` extra has it): the functions only call methods of the
`Axes` (and of its figure) they are given, so `import jaxrank` works without matplotlib.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def plot_slice_2d(
  ax: Any,
  alphas: Any,
  betas: Any,
  values: Any,
  *,
  title: str | None = None,
  cmap: str = "viridis",
  colorbar: bool = True,
) -> Any:
  """Draws a `slice_2d` result as a heat map, `alphas` along x and `betas` along y.

  Args:
    ax: a matplotlib `Axes`.
    alphas: `[A]` coordinates along the first direction, evenly spaced (the x axis).
    betas: `[B]` coordinates along the second direction, evenly spaced (the y axis).
    values: `[A, B]` values, as `slice_2d` returns them (first axis along `alphas`).
    title: the panel's title.
    cmap: the colour map's name.
    colorbar: add a colour bar beside the panel (its own scale per panel).

  Returns:
    The `AxesImage`.

  >>> import numpy as np
  >>> import matplotlib
  >>> matplotlib.use("Agg")
  >>> import matplotlib.pyplot as plt
  >>> fig, ax = plt.subplots()
  >>> a = np.linspace(-1, 1, 3)
  >>> image = plot_slice_2d(ax, a, a, np.add.outer(a, 2 * a), title="a + 2b")
  >>> image.get_array().shape  # rows follow b (y), columns a (x)
  (3, 3)
  >>> plt.close(fig)
  """
  alphas, betas, values = np.asarray(alphas), np.asarray(betas), np.asarray(values)
  if values.shape != alphas.shape + betas.shape:
    raise ValueError(
      f"plot_slice_2d: values must be shaped [A, B] = {alphas.shape + betas.shape} (as "
      f"slice_2d returns them), got {values.shape}."
    )
  extent = (alphas[0], alphas[-1], betas[0], betas[-1])
  image = ax.imshow(
    values.T, origin="lower", extent=extent, cmap=cmap, interpolation="nearest", aspect="auto"
  )
  if title is not None:
    ax.set_title(title)
  if colorbar:
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
  return image


def plot_tracking(
  ax: Any,
  result: dict[str, Any],
  *,
  label: str | None = None,
  color: Any = None,
  diagonal: bool = True,
) -> Any:
  """Draws a `surrogate_tracking` result: the surrogate loss against the exact one, per point.

  Adds Spearman's and Kendall's correlations and the mean error to `label` (the legend entry).

  Args:
    ax: a matplotlib `Axes`.
    result: the dict `surrogate_tracking` returns.
    label: the legend's name of the surrogate.
    color: the points' colour (matplotlib's next colour by default).
    diagonal: draw the line `loss = reference` over the points' range.

  Returns:
    The `PathCollection` of the points.

  >>> import matplotlib
  >>> matplotlib.use("Agg")
  >>> import matplotlib.pyplot as plt
  >>> fig, ax = plt.subplots()
  >>> result = {"loss": [0.2, 0.3], "reference": [0.1, 0.4], "spearman": 1.0, "kendall": 1.0,
  ...           "error": 0.1}
  >>> points = plot_tracking(ax, result, label="SmoothAP")
  >>> ax.get_legend_handles_labels()[1]
  ['SmoothAP (Spearman 1.00, Kendall 1.00, error 0.100)']
  >>> plt.close(fig)
  """
  loss, reference = np.asarray(result["loss"]), np.asarray(result["reference"])
  stats = (
    f"Spearman {float(result['spearman']):.2f}, Kendall {float(result['kendall']):.2f}, "
    f"error {float(result['error']):.3f}"
  )
  points = ax.scatter(
    reference, loss, s=6, alpha=0.6, color=color, label=f"{label} ({stats})" if label else stats
  )
  if diagonal:
    low = float(min(loss.min(), reference.min()))
    high = float(max(loss.max(), reference.max()))
    ax.plot([low, high], [low, high], color="0.5", lw=0.6)
  ax.set_xlabel("exact loss")
  ax.set_ylabel("surrogate loss")
  return points
