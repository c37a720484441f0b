"""What the model families share: the initialisers of their kernels, the check of their images."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx


def normal_init(scale: float, mode: str) -> nnx.Initializer:
  """`variance_scaling(scale, mode, "normal")` for kernels `[..., in, out]`, drawn flat.

  The values are drawn as a flat vector and reshaped: XLA on CPU compiles a random draw of a small
  multi-dimensional shape (e.g. `[3, 3, 4, 8]`) in seconds, of the flat vector in a fraction of a
  second (jax 0.10.2), and a ResNet has dozens of kernel shapes.
  """

  def init(key: jax.Array, shape: Sequence[int], dtype: jnp.dtype = jnp.float32) -> jax.Array:
    fan = math.prod(shape[:-2]) * shape[-2 if mode == "fan_in" else -1]
    flat = jax.random.normal(key, (math.prod(shape),), dtype)
    return (math.sqrt(scale / fan) * flat).reshape(shape)

  return init


# torchvision's initialisation of convolutions:
# kaiming_normal_(mode="fan_out", nonlinearity="relu").
RESNET_INIT = normal_init(2.0, "fan_out")
# He et al. 2015 for convolutions followed by relu, LeCun for the linear heads.
HE_INIT = normal_init(2.0, "fan_in")
LECUN_INIT = normal_init(1.0, "fan_in")


def check_images(name: str, x: jax.Array, in_channels: int) -> None:
  """Raises a `ValueError` naming `name` unless `x` is `[N, H, W, in_channels]` images."""
  if x.ndim != 4 or x.shape[-1] != in_channels:
    raise ValueError(f"{name}: x must be [N, H, W, {in_channels}] images, got shape {x.shape}.")
