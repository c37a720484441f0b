"""The networks a config can name: backbones (`MODELS`) and heads (`HEADS`) from `jaxrank.models`.

`make_model(config, in_channels, rngs)` builds `jaxrank.models.EmbeddingModel(backbone, head)`: the
backbone `MODELS[config.model]` (pooled by `POOLINGS[config.pooling]` where it takes a pooling),
its variables loaded from `config.init_weights` if given (a `.npz` of `jaxrank.models.save_weights`,
or a torchvision/timm checkpoint, `.pth`/`.pt`/`.safetensors`, through
`jaxrank.convert.load_pytorch_weights`), and the head `HEADS[config.head]` from the backbone's
features to `config.embedding_dim`. Which models fit
which data set is said by the data set (`datasets.DatasetSpec.models`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
from flax import nnx

import jaxrank
from jaxrank import convert
from jaxrank import models

if TYPE_CHECKING:
  from experiments.job.config import Config


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """A backbone: an entry of `MODELS`.

  Attributes:
    build: `build(config, in_channels, rngs) -> backbone`, a module with `out_features` that maps
      `[N, H, W, in_channels]` images to `[N, out_features]`.
    batch_norm: whether it normalises by batch statistics in training mode (then a chunked
      gradient needs `config.freeze_batchnorm`).
    pooled: whether it takes `config.pooling` (the pooling of its last feature map: the ResNets'
      and the SmallConvNet's).
  """

  build: Callable[[Config, int, nnx.Rngs], nnx.Module]
  batch_norm: bool
  pooled: bool = False


def dtype(config: Config) -> jax.typing.DTypeLike | None:
  """The `dtype` the networks are built with: bfloat16 with `config.half_precision`, else None
  (Flax's default: float32 from float32 images and parameters). Parameters stay float32."""
  return jnp.bfloat16 if config.half_precision else None


# The poolings of a backbone's last feature map (a ResNet's, a SmallConvNet's), by
# `config.pooling`: each builds a fresh pooling.
# A pooling is built for the network's dtype (`GeMPool` returns it; the others keep their input's).
POOLINGS: Mapping[str, Callable[[Config], Callable[[jax.Array], jax.Array]]] = {
  "average": lambda config: models.global_average_pool,  # torchvision's.
  "max": lambda config: models.global_max_pool,  # ROADMAP's Table 4 (Ramzi et al. 2021, sec. 4.4).
  "average_max": lambda config: models.average_max_pool,
  # Revaud et al. 2019: GeM, p = 3 learned.
  "gem": lambda config: models.GeMPool(p=3.0, dtype=dtype(config)),
}


def _small_convnet(config: Config, in_channels: int, rngs: nnx.Rngs) -> models.SmallConvNet:
  return models.SmallConvNet(
    in_channels,
    features=config.model_features,
    pool=POOLINGS[config.pooling](config),
    dtype=dtype(config),
    rngs=rngs,
  )


def _resnet(factory: Callable[..., models.ResNet]) -> Callable[[Config, int, nnx.Rngs], nnx.Module]:
  def build(config: Config, in_channels: int, rngs: nnx.Rngs) -> models.ResNet:
    return factory(
      in_channels=in_channels, pool=POOLINGS[config.pooling](config), dtype=dtype(config), rngs=rngs
    )

  return build


def _vit_small(config: Config, in_channels: int, rngs: nnx.Rngs) -> models.VisionTransformer:
  return models.vit_small(
    image_size=config.image_size, in_channels=in_channels, dtype=dtype(config), rngs=rngs
  )


MODELS: Mapping[str, ModelSpec] = {
  "small_convnet": ModelSpec(build=_small_convnet, batch_norm=False, pooled=True),  # LayerNorm.
  "resnet18": ModelSpec(build=_resnet(models.resnet18), batch_norm=True, pooled=True),
  "resnet50": ModelSpec(build=_resnet(models.resnet50), batch_norm=True, pooled=True),
  "resnet101": ModelSpec(build=_resnet(models.resnet101), batch_norm=True, pooled=True),
  # timm's ViT-S/16 and DeiT-S/16 (LayerNorm, class-token features) at config.image_size.
  "vit_small": ModelSpec(build=_vit_small, batch_norm=False),
}

# `config.init_weights` file suffixes read as PyTorch checkpoints (else jaxrank's own .npz).
PYTORCH_SUFFIXES = (".pth", ".pt", ".safetensors", ".bin")


@dataclasses.dataclass(frozen=True)
class HeadSpec:
  """A head: an entry of `HEADS`, with how its outputs are scored and evaluated.

  Attributes:
    build: `build(in_features, embedding_dim, dtype=dtype, rngs=rngs) -> head`.
    similarity_fn: the scoring rule of training and evaluation (`jaxrank.similarity`).
    tanh_scaled: whether the head takes the growing scale of `jaxrank.hashing.tanh_scale`
      (`config.tanh_*`).
    evaluated_as: what the evaluation retrieves with, from the head's outputs (binary codes for a
      hashing head).
    batch_norm: whether it normalises by batch statistics in training mode (then a chunked
      gradient cannot be used: each chunk would be normalised by its own statistics).
    binary_codes: whether `evaluated_as` gives binary codes, which a data set's hashing protocol
      evaluates by Hamming ranking (`jaxrank.evaluate_hashing`).
  """

  build: Callable[..., nnx.Module]
  similarity_fn: jaxrank.types.SimilarityFn
  tanh_scaled: bool
  evaluated_as: Callable[[jax.Array], jax.Array]
  batch_norm: bool = False
  binary_codes: bool = False


def _centring(in_features: int, rngs: nnx.Rngs) -> nnx.BatchNorm:
  """The centred heads' normalisation: a float32 BatchNorm without scale or offset (a bfloat16
  backbone's features are cast up)."""
  return nnx.BatchNorm(
    in_features,
    use_scale=False,
    use_bias=False,
    momentum=0.9,
    epsilon=1e-5,
    dtype=jnp.float32,
    rngs=rngs,
  )


class CentredHashingHead(nnx.Module):
  r"""`jaxrank.models.HashingHead` on features centred and scaled over the batch.

  .. math::
    c = \tanh(\alpha (W \hat x + b)), \qquad \hat x = (x - \mu) / \sqrt{\sigma^2 + \epsilon}

  with `\mu`, `\sigma^2` the mean and variance of each feature over the batch in training mode,
  and their running averages (momentum 0.9) in inference mode: a BatchNorm without learned scale
  or offset.

  Why: the backbones' features are averages of relu outputs, non-negative and nearly the same for
  every image, so `W x` gives every image nearly the same code, a common component `m` much larger
  than what sets images apart. The similarity the codes are trained on, `q.x / b` (He et al. 2018,
  eq. 10), is not normalised, so `m` adds to each item's score a term `m . c_j / b` that is the
  same for every query; nearly all of the loss's gradient on the codes goes into that term instead
  of into telling the classes apart, the backbone learns little, and the binary codes keep most
  bits constant. (The L2-normalised embedding head is spared: its normalisation takes the common
  direction out of the gradient. A LayerNorm centres each image over its channels and leaves `m`.)
  Centred over the batch, the features give balanced bits and a gradient that separates classes.
  The untrained network's running statistics are those of initialisation (mean 0, variance 1), so
  it is evaluated on uncentred features.

  Args:
    in_features: the size `F` of the input features.
    num_bits: the number of bits `b` of the codes.
    dtype: the dtype of the computation (None: inferred), as `jaxrank.models.HashingHead`'s; the
      normalisation is float32 whatever it is, and the codes are float32.
    rngs: the random number generators of the initialisation.

  Attributes:
    norm: the `nnx.BatchNorm(in_features)` without scale or offset.
    hashing: the `jaxrank.models.HashingHead(in_features, num_bits)`.
  """

  def __init__(
    self,
    in_features: int,
    num_bits: int,
    *,
    dtype: jax.typing.DTypeLike | None = None,
    rngs: nnx.Rngs,
  ):
    # The normalisation in float32 (a bfloat16 backbone's features are cast up), then the hashing
    # head's linear layer in `dtype`.
    self.norm = _centring(in_features, rngs)
    self.hashing = models.HashingHead(in_features, num_bits, dtype=dtype, rngs=rngs)

  def __call__(self, x: jax.Array, *, scale: jax.typing.ArrayLike = 1.0) -> jax.Array:
    """Returns `[N, num_bits]` relaxed codes of `[N, in_features]` features, in `(-1, 1)`."""
    return self.hashing(self.norm(x), scale=scale)


class CentredEmbeddingHead(nnx.Module):
  r"""`jaxrank.models.EmbeddingHead` on features centred and scaled over the batch.

  .. math::
    e = \frac{W \hat x + b}{\lVert W \hat x + b \rVert_2}, \qquad
    \hat x = (x - \mu) / \sqrt{\sigma^2 + \epsilon}

  with the BatchNorm without learned scale or offset of `CentredHashingHead` (the batch's
  statistics in training mode, their running averages in inference mode).

  Why: the backbone's features (averages of relu outputs) share a large common component, so
  `W x` gives every image nearly the same direction: the untrained network's unit embeddings lie
  in a narrow cone (issue 66: the mean unit embedding has length 0.996 from scratch, 0.90
  fine-tuned). Every loss then starts from scores that barely differ, and a proxy loss's proxies,
  each a negative of nearly every image, leave the cone together and the network collapses after
  them. Centred, the embeddings start spread over the sphere. As with the hashing head, the
  untrained network is evaluated on its initial running statistics (mean 0, variance 1), on
  uncentred features.

  Args:
    in_features: the size `F` of the input features.
    dim: the size `D` of the embeddings.
    dtype: the dtype of the linear layer's computation (None: inferred); the normalisation and
      the embeddings are float32.
    rngs: the random number generators of the initialisation.

  Attributes:
    norm: the `nnx.BatchNorm(in_features)` without scale or offset.
    embedding: the `jaxrank.models.EmbeddingHead(in_features, dim)`.
  """

  def __init__(
    self,
    in_features: int,
    dim: int,
    *,
    dtype: jax.typing.DTypeLike | None = None,
    rngs: nnx.Rngs,
  ):
    self.norm = _centring(in_features, rngs)
    self.embedding = models.EmbeddingHead(in_features, dim, dtype=dtype, rngs=rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    """Returns `[N, dim]` unit embeddings of `[N, in_features]` features."""
    return self.embedding(self.norm(x))


HEADS: Mapping[str, HeadSpec] = {
  # L2-normalised embeddings, scored by cosine similarity.
  "embedding": HeadSpec(
    build=models.EmbeddingHead,
    similarity_fn=jaxrank.similarity.cosine,
    tanh_scaled=False,
    evaluated_as=lambda outputs: outputs,
  ),
  # The same on the batch-centred features (a BatchNorm without scale or offset first).
  "centred_embedding": HeadSpec(
    build=CentredEmbeddingHead,
    similarity_fn=jaxrank.similarity.cosine,
    tanh_scaled=False,
    evaluated_as=lambda outputs: outputs,
    batch_norm=True,
  ),
  # Relaxed codes tanh(alpha f) of the batch-centred features, trained on the similarity
  # 1 - 2 d / b of their relaxed Hamming distance (He et al. eq. 10; cosine would ignore how
  # saturated the codes are), evaluated as binary codes.
  "hashing": HeadSpec(
    build=CentredHashingHead,
    similarity_fn=jaxrank.similarity.hamming,
    tanh_scaled=True,
    evaluated_as=jaxrank.hashing.binarize,
    batch_norm=True,
    binary_codes=True,
  ),
}


def make_model(config: Config, in_channels: int, rngs: nnx.Rngs) -> models.EmbeddingModel:
  """The network of a config: backbone and head, backbone weights loaded if given."""
  backbone = MODELS[config.model].build(config, in_channels, rngs)
  if config.init_weights is not None:
    if config.init_weights.endswith(PYTORCH_SUFFIXES):
      convert.load_pytorch_weights(backbone, config.init_weights)
    else:
      models.load_weights(backbone, config.init_weights)
  # Every backbone has out_features (ModelSpec.build), which nnx.Module cannot declare.
  features = backbone.out_features  # type: ignore[attr-defined]
  head = HEADS[config.head].build(features, config.embedding_dim, dtype=dtype(config), rngs=rngs)
  return models.EmbeddingModel(backbone, head)
