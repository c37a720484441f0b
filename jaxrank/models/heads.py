"""Heads from a backbone's features to embeddings or relaxed codes, and the model of the two."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxrank.models._layers import check_dtypes
from jaxrank.models._layers import LECUN_INIT


def _linear(
  name: str,
  in_features: int,
  out_features: int,
  dtype: jax.typing.DTypeLike | None,
  param_dtype: jax.typing.DTypeLike,
  rngs: nnx.Rngs,
) -> nnx.Linear:
  """A head's linear layer (LeCun normal kernel, zero bias), its dtypes checked for `name`."""
  check_dtypes(name, dtype, param_dtype)
  return nnx.Linear(
    in_features,
    out_features,
    kernel_init=LECUN_INIT,
    dtype=dtype,
    param_dtype=param_dtype,
    rngs=rngs,
  )


class EmbeddingHead(nnx.Module):
  r"""A linear layer followed by L2 normalisation: features to unit embeddings.

  .. math::
    e = \frac{W x + b}{\max(\lVert W x + b \rVert_2, 10^{-12})}

  Rows have unit norm, so dot products are cosine similarities (the scores of
  `jaxrank.batch_retrieval`). A zero row of `W x + b` stays zero instead of becoming NaN, and its
  gradient is finite (the norm is taken as `sqrt(max(|h|^2, 1e-24))`, the same value). The linear
  layer's kernel is LeCun normal (variance `1 / in_features`, untruncated), its bias zero. The
  linear layer computes in `dtype`; the normalisation, and the embeddings it returns, are float32
  (or wider), so that the scores and the loss are float32 whatever the backbone computes in.

  Args:
    in_features: the size `F` of the input features.
    dim: the size `D` of the embeddings.
    dtype: the dtype of the linear layer's computation (None: inferred from the inputs and
      parameters).
    param_dtype: the dtype of the parameters.
    rngs: the random number generators of the initialisation.

  Attributes:
    linear: the `nnx.Linear(in_features, dim)`.

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> head = EmbeddingHead(3, 2, rngs=nnx.Rngs(0))
  >>> jnp.linalg.norm(head(jnp.ones((4, 3))), axis=-1).round(4).tolist()
  [1.0, 1.0, 1.0, 1.0]
  """

  def __init__(
    self,
    in_features: int,
    dim: int,
    *,
    dtype: jax.typing.DTypeLike | None = None,
    param_dtype: jax.typing.DTypeLike = jnp.float32,
    rngs: nnx.Rngs,
  ):
    self.linear = _linear("EmbeddingHead", in_features, dim, dtype, param_dtype, rngs)

  def __call__(self, x: jax.typing.ArrayLike) -> jax.Array:
    """Returns unit embeddings.

    Args:
      x: `[N, in_features]` features.

    Returns:
      `[N, dim]` rows of unit L2 norm (zero where `W x + b` is zero), float32 (float64 for a
      float64 computation).
    """
    h = self.linear(jnp.asarray(x))
    h = h.astype(jnp.promote_types(h.dtype, jnp.float32))
    squared = jnp.sum(jnp.square(h), axis=-1, keepdims=True)
    return h * jax.lax.rsqrt(jnp.maximum(squared, 1e-24))


class HashingHead(nnx.Module):
  r"""A linear layer followed by `tanh(scale * h)`: features to relaxed binary codes.

  .. math::
    c = \tanh(\alpha (W x + b)) \in (-1, 1)^b

  This is the continuous relaxation of the binary code `sgn(W x + b)` of He et al. 2018 (eq. 10,
  App. D): as the scale `\alpha` grows, `c` tends to the sign. The training loop passes the scale
  of the current step, `jaxrank.hashing.tanh_scale(step, every=...)`, which grows it in stages;
  at evaluation, the binary codes are `jaxrank.hashing.binarize(outputs)` (the sign of the
  outputs, whatever the scale). The linear layer's kernel is LeCun normal (variance
  `1 / in_features`, untruncated), its bias zero.

  Centre the input features across images first (a BatchNorm without scale or offset, as the
  training job's hashing head does): pooled ReLU features are non-negative and nearly alike, so
  uncentred they give every image nearly the same code, and the unnormalised similarity `q.x / b`
  the codes train on sends most of the loss's gradient into that shared component (measured on
  the glyphs: nothing trained; see the user guide's page on hashing, docs/guide/hashing.rst).

  Args:
    in_features: the size `F` of the input features.
    num_bits: the number of bits `b` of the codes.
    dtype: the dtype of the linear layer's computation (None: inferred from the inputs and
      parameters).
    param_dtype: the dtype of the parameters.
    rngs: the random number generators of the initialisation.

  Attributes:
    linear: the `nnx.Linear(in_features, num_bits)`.

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> from jaxrank import hashing
  >>> head = HashingHead(3, 16, rngs=nnx.Rngs(0))
  >>> codes = head(jnp.ones((2, 3)), scale=hashing.tanh_scale(10, every=10))
  >>> codes.shape, bool(jnp.all(jnp.abs(codes) < 1)), hashing.binarize(codes).shape
  ((2, 16), True, (2, 16))
  """

  def __init__(
    self,
    in_features: int,
    num_bits: int,
    *,
    dtype: jax.typing.DTypeLike | None = None,
    param_dtype: jax.typing.DTypeLike = jnp.float32,
    rngs: nnx.Rngs,
  ):
    self.linear = _linear("HashingHead", in_features, num_bits, dtype, param_dtype, rngs)

  def __call__(self, x: jax.typing.ArrayLike, *, scale: jax.typing.ArrayLike = 1.0) -> jax.Array:
    """Returns relaxed codes.

    Args:
      x: `[N, in_features]` features.
      scale: `\\alpha > 0`, a scalar (Python number or array, traceable).

    Returns:
      `[N, num_bits]` codes in `(-1, 1)` (they round to `\\pm 1` in floating point for large
      `scale * h`), float32 (float64 for a float64 computation).
    """
    h = self.linear(jnp.asarray(x))
    return jnp.tanh(scale * h.astype(jnp.promote_types(h.dtype, jnp.float32)))


class EmbeddingModel(nnx.Module):
  """A backbone followed by a head: images to embeddings (or relaxed hash codes).

  The two parts are the top-level attributes `backbone` and `head`, so that a training loop can
  label parameters by them (e.g. a larger learning rate for the head) with
  `nnx.state(model.head)` or the first element of each parameter's path.

  Args:
    backbone: a module `backbone(x) -> [N, F]`, e.g. `SmallConvNet` or `resnet50`.
    head: a module `head(features) -> [N, D]` (`EmbeddingHead`), or `head(features, *, scale)`
      (`HashingHead`).

  Attributes:
    backbone: the backbone.
    head: the head.

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> from jaxrank.models import SmallConvNet
  >>> rngs = nnx.Rngs(0)
  >>> model = EmbeddingModel(SmallConvNet(1, features=(8,), rngs=rngs),
  ...                        HashingHead(8, 12, rngs=rngs))
  >>> model(jnp.ones((3, 8, 8, 1)), scale=4.0).shape
  (3, 12)
  """

  def __init__(self, backbone: nnx.Module, head: nnx.Module):
    self.backbone = backbone
    self.head = head

  def __call__(
    self,
    x: jax.typing.ArrayLike,
    *,
    scale: jax.typing.ArrayLike | None = None,
    mask: jax.typing.ArrayLike | None = None,
  ) -> jax.Array:
    """Returns `head(backbone(x))`, with `scale=scale` passed to the head unless it is None.

    Args:
      x: the backbone's input, e.g. `[N, H, W, C]` images.
      scale: None (the default) calls `head(features)`, as `EmbeddingHead` needs; anything else
        calls `head(features, scale=scale)`, as `HashingHead` takes (its scale then defaults to
        1 when None is given here).
      mask: None (the default) calls `backbone(x)`; anything else calls `backbone(x, mask)`, the
        pixel mask `[N, H, W]` of padded images that a `ResNet` takes (its "Padded images":
        in inference mode, the unpadded images' features).

    Returns:
      The head's output, `[N, D]`.
    """
    features = self.backbone(x) if mask is None else self.backbone(x, mask)
    if scale is None:
      return self.head(features)
    return self.head(features, scale=scale)
