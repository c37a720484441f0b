"""Poolings of a feature map `[N, h, w, C]` to features `[N, C]`, passed to `ResNet` as `pool`.

**Masks.** Every pooling takes an optional `mask`, boolean `[N, h, w]`, True on the cells of the
feature map that belong to the image: the pooling is then over those cells only, so that an image
padded into a larger canvas (to share a compiled shape with others, `jaxrank.data.pad_to_buckets`)
pools to the features of its own cells, whatever the padding holds (NaN included: the padded
cells are replaced before any arithmetic, so their gradient is 0, never NaN). An image without
any True cell pools to 0. `mask=None` is the unmasked pooling, the same program as without the
argument. The masked forms compute in at least float32 and return the feature map's dtype;
they need a floating feature map.

`feature_map_mask` turns the pixel mask of padded images into the mask of a stride-`s` feature
map by the **anchor rule**: cell `(i, j)` belongs to the image iff pixel `(s i, s j)`, the
top-left pixel of its stride window (its receptive field's anchor), does. An `h x w` image at the
top left of its canvas then has `ceil(h / s) x ceil(w / s)` cells, exactly the size of the
feature map that a torchvision ResNet (`s = 32`: every stride-2 layer, the 7x7 convolution with
padding 3, the 3x3 max-pool and 3x3 convolutions with padding 1, maps a side `n` to `ceil(n / 2)`)
gives for the unpadded image, cell for cell.

The masked pooling of a padded image equals the pooling of the unpadded image exactly when the
network's feature map of the unpadded image equals the masked part of the padded image's map. A
pooling alone (the map given) and a network whose cells see only their own stride window (a
patch embedding of stride `s`) satisfy it. A ResNet run on the padded image unmasked does not:
the cells at the right and bottom edges of the image have receptive fields that reach past it,
where the unpadded image's network sees each layer's zero padding and the padded image's network
sees activations (the padding's cells next to the image see the image through their own
receptive fields, and a BatchNorm's shift adds to every cell). The mask leaves the padded cells
out of the pooling, not what the padding changed in the image's own edge cells, so its
descriptor is close to the unpadded one's, not equal to it. `ResNet(x, mask)` also sets the
padding's cells to 0 at the input of every spatial layer, and then satisfies it (in inference
mode, to rounding: its "Padded images").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrank._src import checks
from jaxrank.models._layers import check_dtypes

DEFAULT_STRIDE = 32
"""The stride of a ResNet's last feature map (and of `feature_map_mask` by default)."""


def _check_masked(fn: str, x: jax.typing.ArrayLike, mask: jax.typing.ArrayLike) -> tuple:
  """`(x, mask [N, h, w, 1], counts [N, 1])` of a masked pooling, checked; `x` in float32 or
  wider."""
  x = checks.check_floating(fn, "x", x, ndim=4, layout="[N, h, w, C]")
  mask = checks.check_mask(
    fn, "mask", mask, x.shape[:3], like="feature map's cells [N, h, w]", broadcast=False
  )
  counts = jnp.sum(mask, axis=(1, 2), dtype=jnp.int32)[:, None]
  return x.astype(jnp.promote_types(x.dtype, jnp.float32)), mask[..., None], counts


def _masked_mean(values: jax.Array, mask: jax.Array, counts: jax.Array) -> jax.Array:
  """The mean over each image's masked cells (0 for an image without any)."""
  total = jnp.sum(jnp.where(mask, values, 0), axis=(1, 2))
  return total / jnp.maximum(counts, 1).astype(total.dtype)


def _masked_max(values: jax.Array, mask: jax.Array, counts: jax.Array) -> jax.Array:
  """The maximum over each image's masked cells (0 for an image without any)."""
  top = jnp.max(jnp.where(mask, values, -jnp.inf), axis=(1, 2))
  return jnp.where(counts > 0, top, 0)


def global_average_pool(
  x: jax.typing.ArrayLike, mask: jax.typing.ArrayLike | None = None
) -> jax.Array:
  r"""The mean of each channel over the pixels: torchvision's pooling.

  .. math::
    f_c = \frac{1}{|M|} \sum_{(i, j) \in M} x_{i j c}

  `M` is every cell, or the cells where `mask` is True (see the module's "Masks").

  Args:
    x: `[N, h, w, C]` feature maps.
    mask: optional boolean `[N, h, w]`, True on each image's own cells.

  Returns:
    `[N, C]` features.

  >>> import jax.numpy as jnp
  >>> x = jnp.arange(4.0).reshape(1, 2, 2, 1)
  >>> global_average_pool(x).tolist()
  [[1.5]]
  >>> global_average_pool(x, jnp.array([[[True, True], [False, False]]])).tolist()
  [[0.5]]
  """
  if mask is None:
    return jnp.mean(jnp.asarray(x), axis=(1, 2))
  dtype = jnp.asarray(x).dtype
  values, where, counts = _check_masked("global_average_pool", x, mask)
  return _masked_mean(values, where, counts).astype(dtype)


def global_max_pool(x: jax.typing.ArrayLike, mask: jax.typing.ArrayLike | None = None) -> jax.Array:
  r"""The maximum of each channel over the pixels.

  .. math::
    f_c = \max_{(i, j) \in M} x_{i j c}

  `M` is every cell, or the cells where `mask` is True (see the module's "Masks"). ROADMAP's
  ResNet-50 of Table 4 (Ramzi et al. 2021, sec. 4.4: "max instead of average pooling").

  Args:
    x: `[N, h, w, C]` feature maps.
    mask: optional boolean `[N, h, w]`, True on each image's own cells.

  Returns:
    `[N, C]` features.

  >>> import jax.numpy as jnp
  >>> x = jnp.arange(4.0).reshape(1, 2, 2, 1)
  >>> global_max_pool(x).tolist()
  [[3.0]]
  >>> global_max_pool(x, jnp.array([[[True, True], [False, False]]])).tolist()
  [[1.0]]
  """
  if mask is None:
    return jnp.max(jnp.asarray(x), axis=(1, 2))
  dtype = jnp.asarray(x).dtype
  values, where, counts = _check_masked("global_max_pool", x, mask)
  return _masked_max(values, where, counts).astype(dtype)


def average_max_pool(
  x: jax.typing.ArrayLike, mask: jax.typing.ArrayLike | None = None
) -> jax.Array:
  r"""The sum of the mean and the maximum of each channel over the pixels.

  .. math::
    f_c = \frac{1}{|M|} \sum_{(i, j) \in M} x_{i j c} + \max_{(i, j) \in M} x_{i j c}

  `M` is every cell, or the cells where `mask` is True (see the module's "Masks"). A common
  pooling of metric-learning code (none of the seed papers states it; ROADMAP's Table 4 uses
  `global_max_pool`).

  Args:
    x: `[N, h, w, C]` feature maps.
    mask: optional boolean `[N, h, w]`, True on each image's own cells.

  Returns:
    `[N, C]` features.

  >>> import jax.numpy as jnp
  >>> average_max_pool(jnp.arange(4.0).reshape(1, 2, 2, 1)).tolist()
  [[4.5]]
  """
  if mask is None:
    x = jnp.asarray(x)
    return jnp.mean(x, axis=(1, 2)) + jnp.max(x, axis=(1, 2))
  dtype = jnp.asarray(x).dtype
  values, where, counts = _check_masked("average_max_pool", x, mask)
  pooled = _masked_mean(values, where, counts) + _masked_max(values, where, counts)
  return pooled.astype(dtype)


def feature_map_mask(
  pixel_mask: jax.typing.ArrayLike | np.ndarray, stride: int = DEFAULT_STRIDE
) -> jax.Array | np.ndarray:
  """The mask of a stride-`stride` feature map from the pixel mask of its images: the anchor rule.

  Cell `(i, j)` is True iff pixel `(stride i, stride j)` is (see the module's "Masks"): for an
  `h x w` image at the top left of its canvas, the first `ceil(h / stride)` rows and
  `ceil(w / stride)` columns, the size of a ResNet's feature map of the unpadded image
  (`stride=32`). The result has `ceil(H / stride) x ceil(W / stride)` cells, the size of the
  ResNet's feature map of the `H x W` canvas.

  Args:
    pixel_mask: boolean `[N, H, W]`, True on each image's own pixels (numpy or JAX; the result is
      of the same kind).
    stride: the feature map's stride in pixels, a positive int (32 for a ResNet's last map).

  Returns:
    Boolean `[N, ceil(H / stride), ceil(W / stride)]`.

  >>> import numpy as np
  >>> pixels = np.zeros((1, 64, 96), bool)
  >>> pixels[0, :40, :70] = True  # a 40 x 70 image padded to 64 x 96
  >>> feature_map_mask(pixels).astype(int).tolist()  # ceil(40 / 32) x ceil(70 / 32) = 2 x 3
  [[[1, 1, 1], [1, 1, 1]]]
  >>> pixels[:] = False
  >>> pixels[0, :32, :64] = True  # 32 x 64: 1 x 2 cells (anchors at rows 0, 32; columns 0, 32, 64)
  >>> feature_map_mask(pixels).astype(int).tolist()
  [[[1, 1, 0], [0, 0, 0]]]
  """
  fn = "feature_map_mask"
  checks.check_positive_int(fn, "stride", stride)
  if not isinstance(pixel_mask, (np.ndarray, jax.Array)):
    pixel_mask = np.asarray(pixel_mask)
  checks.check_shape(fn, "pixel_mask", pixel_mask, (None, None, None), layout="[N, H, W]")
  if pixel_mask.dtype != np.bool_:
    raise TypeError(
      f"{fn}: pixel_mask must be a boolean array [N, H, W], got dtype {pixel_mask.dtype}; pass "
      "a bool array, e.g. pixel_mask != 0."
    )
  return pixel_mask[:, ::stride, ::stride]


class GeMPool(nnx.Module):
  r"""Generalised-mean pooling with a learnable exponent `p` (Radenovic et al. 2018).

  .. math::
    f_c = \Big(\frac{1}{|M|} \sum_{(i, j) \in M} \max(x_{i j c}, \epsilon)^p\Big)^{1 / p}

  `M` is every cell, or the cells where the call's `mask` is True (see the module's "Masks").
  `p = 1` is the average, `p -> infinity` the maximum. Revaud et al. 2019 (sec. 4) pool their
  ResNet-101 this way, `p = 3` learned with the network. Inputs are clamped at `eps` so that the
  power and its gradient stay finite; the computation is in at least float32 whatever `dtype`
  (a bfloat16 power of small activations would lose them).

  Args:
    p: the initial exponent, positive.
    eps: the clamp, positive.
    dtype: the dtype of the output (None: that of the input); the computation is in at least
      float32 either way.
    param_dtype: the dtype of `p`.

  Attributes:
    p: the exponent, an `nnx.Param` scalar (trained unless the optimiser leaves it out).
    eps: the clamp.

  >>> import jax.numpy as jnp
  >>> pool = GeMPool(p=1.0)
  >>> pool(jnp.arange(1.0, 5.0).reshape(1, 2, 2, 1)).round(4).tolist()
  [[2.5]]
  """

  def __init__(
    self,
    p: float = 3.0,
    *,
    eps: float = 1e-6,
    dtype: jax.typing.DTypeLike | None = None,
    param_dtype: jax.typing.DTypeLike = jnp.float32,
  ):
    check_dtypes("GeMPool", dtype, param_dtype)
    if not p > 0 or not eps > 0:
      raise ValueError(f"GeMPool: p and eps must be positive, got p={p} and eps={eps}.")
    self.p = nnx.Param(jnp.asarray(p, param_dtype))
    self.eps = eps
    self.dtype = dtype

  def __call__(
    self, x: jax.typing.ArrayLike, mask: jax.typing.ArrayLike | None = None
  ) -> jax.Array:
    """Returns the generalised means.

    Args:
      x: `[N, h, w, C]` feature maps.
      mask: optional boolean `[N, h, w]`, True on each image's own cells; an image without any
        gives 0.

    Returns:
      `[N, C]` features, in `dtype` (None: the dtype of `x`).
    """
    x = jnp.asarray(x)
    out_dtype = x.dtype if self.dtype is None else self.dtype
    acc = jnp.promote_types(x.dtype, jnp.float32)
    p = self.p[...].astype(acc)
    if mask is None:
      means = jnp.mean(jnp.maximum(x.astype(acc), self.eps) ** p, axis=(1, 2))
      return (means ** (1.0 / p)).astype(out_dtype)
    values, where, counts = _check_masked("GeMPool", x, mask)
    # The padding replaced before the power, so that its gradient is 0 whatever it holds.
    powers = jnp.maximum(jnp.where(where, values, self.eps), self.eps) ** p
    # An image without cells: a mean of 1 inside the root (finite gradients), then 0.
    means = jnp.where(counts > 0, _masked_mean(powers, where, counts), 1)
    return jnp.where(counts > 0, means ** (1.0 / p), 0).astype(out_dtype)
