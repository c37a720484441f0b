"""`SmallConvNet`: a few 3x3 convolutions with LayerNorm, for small images (8x8 digits, 32x32)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from jaxrank._src import checks
from jaxrank.models._layers import check_dtypes
from jaxrank.models._layers import check_images
from jaxrank.models._layers import HE_INIT
from jaxrank.models._layers import layer_norm
from jaxrank.models.pooling import feature_map_mask
from jaxrank.models.pooling import global_average_pool


class SmallConvNet(nnx.Module):
  """A small convolutional network for small images: 3x3 conv, LayerNorm, relu per stage.

  Each stage is a 3x3 convolution (`SAME` padding, with bias), a LayerNorm over the channels of
  each pixel and a relu; a 2x2 max-pool (stride 2) comes between stages, not after the last, and a
  pooling of the last feature map gives the features (`pool`: the global average over the pixels
  by default; `GeMPool` for Revaud et al. 2019's landmark retrieval). LayerNorm, unlike
  BatchNorm, never looks across examples, so the network gives the same outputs for an example
  whatever the rest of the batch, and `jaxrank.chunked_value_and_grad` computes its exact
  gradient. Convolution kernels are He normal (He et al. 2015: variance `2 / fan_in`,
  untruncated), biases zero; LayerNorm scale 1, bias 0.

  With the default `features=(32, 64)`, an `[N, 8, 8, 1]` digit becomes `[N, 64]`: time and
  memory grow linearly with `N` and the number of pixels.

  **Padded images.** `net(x, mask)` takes images padded at the bottom and right to a shared shape
  with their pixel mask: the padding's pixels are set to 0, every stage's output is set to 0 on
  the padding's cells (each stage's mask `feature_map_mask(mask, 2 ** stage)`, the anchor rule),
  and the pooling is over the image's own cells of the last map, so `pool` must take a mask
  (every pooling of `jaxrank.models` does). Each convolution then sees zeros past the image's
  edges, as the unpadded image's `SAME` padding gives it: when the image's sides are multiples of
  `2 ** (stages - 1)`, the features are the unpadded image's (to rounding); otherwise a 2x2
  max-pool window that straddles the image's last odd row or column keeps a cell that the
  unpadded network drops, and the features are close, not equal. `mask=None` is the unmasked
  network.

  Args:
    in_channels: the channels `C` of the input images.
    features: the output channels of each stage, at least one stage.
    pool: `pool(x [N, h, w, C]) -> [N, C]`, a function (`global_average_pool`, the default) or a
      module with parameters (`GeMPool`).
    dtype: the dtype of the computation (None: inferred from the inputs and parameters); the
      LayerNorms' statistics and normalisation are float32 whatever it is (`jaxrank.models`).
    param_dtype: the dtype of the parameters.
    rngs: the random number generators of the initialisation.

  Attributes:
    out_features: `features[-1]`, the size of the output.
    convs: the convolution of each stage (an `nnx.List`).
    norms: the LayerNorm of each stage (an `nnx.List`).
    pool: the pooling.

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> net = SmallConvNet(1, rngs=nnx.Rngs(0))
  >>> net(jnp.zeros((5, 8, 8, 1))).shape, net.out_features
  ((5, 64), 64)
  """

  def __init__(
    self,
    in_channels: int,
    *,
    features: Sequence[int] = (32, 64),
    pool: Callable[[jax.Array], jax.Array] | None = None,
    dtype: jax.typing.DTypeLike | None = None,
    param_dtype: jax.typing.DTypeLike = jnp.float32,
    rngs: nnx.Rngs,
  ):
    check_dtypes("SmallConvNet", dtype, param_dtype)
    features = tuple(int(f) for f in features)
    if in_channels < 1 or not features or min(features) < 1:
      raise ValueError(
        "SmallConvNet: in_channels and every entry of features must be positive, with at least "
        f"one stage, got in_channels={in_channels} and features={features}."
      )
    self.in_channels = in_channels
    self.out_features = features[-1]
    channels = (in_channels,) + features
    self.convs = nnx.List(
      [
        nnx.Conv(
          c_in,
          c_out,
          kernel_size=(3, 3),
          padding="SAME",
          kernel_init=HE_INIT,
          dtype=dtype,
          param_dtype=param_dtype,
          rngs=rngs,
        )
        for c_in, c_out in zip(channels[:-1], channels[1:])
      ]
    )
    self.norms = nnx.List(
      [
        layer_norm(c, epsilon=1e-6, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        for c in features
      ]
    )
    # Called as pool(h) or pool(h, mask): every pooling of jaxrank.models takes both.
    self.pool: Callable[..., jax.Array] = global_average_pool if pool is None else pool

  def __call__(
    self, x: jax.typing.ArrayLike, mask: jax.typing.ArrayLike | None = None
  ) -> jax.Array:
    """Returns the features of images, pooled over each image's own cells when `mask` is given.

    Args:
      x: `[N, H, W, in_channels]` images.
      mask: optional boolean `[N, H, W]`, True on each image's own pixels (images padded to a
        shared shape at the bottom and right): the padding is set to 0 and the pooling is over
        the image's own cells (see "Padded images"). None: the unmasked network.

    Returns:
      `[N, out_features]` features (the pooling of non-negative activations), in `dtype`.
    """
    h = jnp.asarray(x)
    check_images("SmallConvNet", h, self.in_channels)
    if mask is not None:
      mask = checks.check_mask(
        "SmallConvNet", "mask", mask, h.shape[:3], like="images [N, H, W]", broadcast=False
      )
      h = jnp.where(mask[..., None], h, 0)
    cells = None
    for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
      if i > 0:
        h = nnx.max_pool(h, window_shape=(2, 2), strides=(2, 2))
      h = nnx.relu(norm(conv(h)))
      if mask is not None:  # ceil(H / 2^i) rows of anchors; the map has floor(H / 2^i).
        cells = feature_map_mask(mask, 2**i)[:, : h.shape[1], : h.shape[2]]
        h = jnp.where(cells[..., None], h, 0)
    return self.pool(h) if cells is None else self.pool(h, cells)
