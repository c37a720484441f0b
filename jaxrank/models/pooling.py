"""Poolings of a feature map `[N, h, w, C]` to features `[N, C]`, passed to `ResNet` as `pool`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxrank.models._layers import check_dtypes


def global_average_pool(x: jax.typing.ArrayLike) -> jax.Array:
  r"""The mean of each channel over the pixels: torchvision's pooling.

  .. math::
    f_c = \frac{1}{h w} \sum_{i, j} x_{i j c}

  Args:
    x: `[N, h, w, C]` feature maps.

  Returns:
    `[N, C]` features.

  >>> import jax.numpy as jnp
  >>> global_average_pool(jnp.arange(4.0).reshape(1, 2, 2, 1)).tolist()
  [[1.5]]
  """
  return jnp.mean(jnp.asarray(x), axis=(1, 2))


def global_max_pool(x: jax.typing.ArrayLike) -> jax.Array:
  r"""The maximum of each channel over the pixels.

  .. math::
    f_c = \max_{i, j} x_{i j c}

  ROADMAP's ResNet-50 of Table 4 (Ramzi et al. 2021, sec. 4.4: "max instead of average pooling").

  Args:
    x: `[N, h, w, C]` feature maps.

  Returns:
    `[N, C]` features.

  >>> import jax.numpy as jnp
  >>> global_max_pool(jnp.arange(4.0).reshape(1, 2, 2, 1)).tolist()
  [[3.0]]
  """
  return jnp.max(jnp.asarray(x), axis=(1, 2))


def average_max_pool(x: jax.typing.ArrayLike) -> jax.Array:
  r"""The sum of the mean and the maximum of each channel over the pixels.

  .. math::
    f_c = \frac{1}{h w} \sum_{i, j} x_{i j c} + \max_{i, j} x_{i j c}

  A common pooling of metric-learning code (none of the seed papers states it; ROADMAP's Table 4
  uses `global_max_pool`).

  Args:
    x: `[N, h, w, C]` feature maps.

  Returns:
    `[N, C]` features.

  >>> import jax.numpy as jnp
  >>> average_max_pool(jnp.arange(4.0).reshape(1, 2, 2, 1)).tolist()
  [[4.5]]
  """
  x = jnp.asarray(x)
  return jnp.mean(x, axis=(1, 2)) + jnp.max(x, axis=(1, 2))


class GeMPool(nnx.Module):
  r"""Generalised-mean pooling with a learnable exponent `p` (Radenovic et al. 2018).

  .. math::
    f_c = \Big(\frac{1}{h w} \sum_{i, j} \max(x_{i j c}, \epsilon)^p\Big)^{1 / p}

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

  def __call__(self, x: jax.typing.ArrayLike) -> jax.Array:
    """Returns the generalised means.

    Args:
      x: `[N, h, w, C]` feature maps.

    Returns:
      `[N, C]` features, in `dtype` (None: the dtype of `x`).
    """
    x = jnp.asarray(x)
    acc = jnp.promote_types(x.dtype, jnp.float32)
    p = self.p[...].astype(acc)
    means = jnp.mean(jnp.maximum(x.astype(acc), self.eps) ** p, axis=(1, 2))
    return (means ** (1.0 / p)).astype(x.dtype if self.dtype is None else self.dtype)
