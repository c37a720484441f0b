"""What the model families share: kernel initialisers, the check of their images, normalisation
layers that keep their statistics in float32, and the check of a precision's dtypes.

Mixed precision (`dtype`, `param_dtype`): see `jaxrank.models`.
"""

from __future__ import annotations

import dataclasses
import math
import typing
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


# The tuple of arrays (or None) that a normalisation's `promote_dtype` takes and returns.
_Arrays = typing.TypeVar("_Arrays", bound=tuple[typing.Any, ...])


@dataclasses.dataclass(frozen=True)
class Precision:
  """The `dtype` and `param_dtype` every layer of a network is built with."""

  dtype: jax.typing.DTypeLike | None
  param_dtype: jax.typing.DTypeLike


def check_dtypes(
  name: str, dtype: jax.typing.DTypeLike | None, param_dtype: jax.typing.DTypeLike
) -> None:
  """Raises a `ValueError` naming `name` unless `dtype` (or None) and `param_dtype` are floats."""
  for field, value in (("dtype", dtype), ("param_dtype", param_dtype)):
    if value is not None and not jnp.issubdtype(value, jnp.floating):
      raise ValueError(
        f"{name}: {field} must be a floating dtype (e.g. jnp.bfloat16 or jnp.float32), got "
        f"{value!r}."
      )


def _statistics_in_float32(
  args: _Arrays, /, *, dtype: jax.typing.DTypeLike | None = None, inexact: bool = True
) -> _Arrays:
  """A Flax normalisation's `promote_dtype`: the input cast to `dtype`, the rest at least float32.

  Flax's own casts its statistics, scale and bias to `dtype` as well, so that with bfloat16 a
  BatchNorm in inference mode would normalise with bfloat16 running statistics. Here only the
  input is cast; `x - mean`, the scale and the shift are then computed in float32 (Flax computes
  batch statistics in float32 either way) and the result cast to `dtype`. (`inexact`, Flax's
  flag for integer inputs, changes nothing: every argument here is floating.)
  """
  del inexact
  x, *rest = args
  if dtype is not None and x is not None:
    x = jnp.asarray(x, dtype)
  rest = [
    None if a is None else jnp.asarray(a, jnp.promote_types(jnp.result_type(a), jnp.float32))
    for a in rest
  ]
  return typing.cast(_Arrays, (x, *rest))


def batch_norm(
  features: int,
  *,
  dtype: jax.typing.DTypeLike | None,
  param_dtype: jax.typing.DTypeLike,
  rngs: nnx.Rngs,
  use_scale: bool = True,
  use_bias: bool = True,
) -> nnx.BatchNorm:
  """`nnx.BatchNorm` as torchvision's (momentum 0.1 there, 0.9 here; epsilon 1e-5), computing
  its statistics and normalisation in float32 and returning `dtype`."""
  return nnx.BatchNorm(
    features,
    momentum=0.9,
    epsilon=1e-5,
    use_scale=use_scale,
    use_bias=use_bias,
    dtype=dtype,
    param_dtype=param_dtype,
    promote_dtype=_statistics_in_float32,
    rngs=rngs,
  )


def layer_norm(
  features: int,
  *,
  epsilon: float,
  dtype: jax.typing.DTypeLike | None,
  param_dtype: jax.typing.DTypeLike,
  rngs: nnx.Rngs,
) -> nnx.LayerNorm:
  """`nnx.LayerNorm` computing its statistics and normalisation in float32, returning `dtype`."""
  return nnx.LayerNorm(
    features,
    epsilon=epsilon,
    dtype=dtype,
    param_dtype=param_dtype,
    promote_dtype=_statistics_in_float32,
    rngs=rngs,
  )


def check_images(name: str, x: jax.Array, in_channels: int) -> None:
  """Raises a `ValueError` naming `name` unless `x` is `[N, H, W, in_channels]` images."""
  if x.ndim != 4 or x.shape[-1] != in_channels:
    raise ValueError(f"{name}: x must be [N, H, W, {in_channels}] images, got shape {x.shape}.")
