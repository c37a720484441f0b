"""Flax NNX networks that map images to embeddings or relaxed hash codes, and their weights on disk.

This module needs the `train` extra (`pip install 'jaxrank[train]'`, for Flax); the core of
jaxrank does not import it: `from jaxrank import models`.

* `SmallConvNet`: a few 3x3 convolutions with LayerNorm, for small images (8x8 digits, 32x32).
* `ResNet`, with `resnet18`, `resnet50` and `resnet101`: the torchvision ResNets without the
  classifier, randomly initialised, with BatchNorm and a pooling passed in.
* `VisionTransformer`, with `vit_small`: timm's ViT-S/16 and DeiT-S/16 without the classifier.
* Poolings of a feature map: `global_average_pool`, `global_max_pool`, `average_max_pool`,
  `GeMPool` (learnable p).
* `freeze_batchnorm`: every BatchNorm of a module to its running statistics, nothing else.
* `EmbeddingHead`: a linear layer and L2 normalisation, for embeddings compared by cosine.
* `HashingHead`: a linear layer and `tanh(scale * h)`, the relaxed binary codes of hashing.
* `EmbeddingModel`: a backbone followed by a head.
* `save_weights` and `load_weights`: every variable of a model (parameters and BatchNorm
  statistics) to and from a local `.npz` file.

Pretrained weights are never downloaded: `load_weights` reads only a local file that the user
provides, and `jaxrank.convert.load_pytorch_weights` a local torchvision or timm checkpoint.

>>> import jax.numpy as jnp
>>> from flax import nnx
>>> from jaxrank import models
>>> rngs = nnx.Rngs(0)
>>> model = models.EmbeddingModel(
...     models.SmallConvNet(1, features=(8, 16), rngs=rngs),
...     models.EmbeddingHead(16, 4, rngs=rngs))
>>> embeddings = model(jnp.ones((2, 8, 8, 1)))
>>> embeddings.shape, jnp.linalg.norm(embeddings, axis=-1).round(4).tolist()
((2, 4), [1.0, 1.0])
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrank._src import weights


def _normal_init(scale: float, mode: str) -> nnx.Initializer:
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


# torchvision's initialisation of convolutions: kaiming_normal_(mode="fan_out", nonlinearity="relu").
_resnet_init = _normal_init(2.0, "fan_out")
# He et al. 2015 for convolutions followed by relu, LeCun for the linear heads.
_he_init = _normal_init(2.0, "fan_in")
_lecun_init = _normal_init(1.0, "fan_in")

# What `save_weights` stores: every variable except the state of random number generators.
_WEIGHTS = nnx.Not(nnx.RngState)


def _check_images(name: str, x: jax.Array, in_channels: int) -> None:
  if x.ndim != 4 or x.shape[-1] != in_channels:
    raise ValueError(f"{name}: x must be [N, H, W, {in_channels}] images, got shape {x.shape}.")


class SmallConvNet(nnx.Module):
  """A small convolutional network for small images: 3x3 conv, LayerNorm, relu per stage.

  Each stage is a 3x3 convolution (`SAME` padding, with bias), a LayerNorm over the channels of
  each pixel and a relu; a 2x2 max-pool (stride 2) comes between stages, not after the last, and a
  global average pool over the pixels gives the features. LayerNorm, unlike BatchNorm, never looks
  across examples, so the network gives the same outputs for an example whatever the rest of the
  batch, and `jaxrank.chunked_value_and_grad` computes its exact gradient. Convolution kernels are
  He normal (He et al. 2015: variance `2 / fan_in`, untruncated), biases zero; LayerNorm scale 1,
  bias 0.

  With the default `features=(32, 64)`, an `[N, 8, 8, 1]` digit becomes `[N, 64]`: time and
  memory grow linearly with `N` and the number of pixels.

  Args:
    in_channels: the channels `C` of the input images.
    features: the output channels of each stage, at least one stage.
    rngs: the random number generators of the initialisation.

  Attributes:
    out_features: `features[-1]`, the size of the output.
    convs: the convolution of each stage (an `nnx.List`).
    norms: the LayerNorm of each stage (an `nnx.List`).

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> net = SmallConvNet(1, rngs=nnx.Rngs(0))
  >>> net(jnp.zeros((5, 8, 8, 1))).shape, net.out_features
  ((5, 64), 64)
  """

  def __init__(self, in_channels: int, *, features: Sequence[int] = (32, 64), rngs: nnx.Rngs):
    features = tuple(int(f) for f in features)
    if in_channels < 1 or not features or min(features) < 1:
      raise ValueError(
          "SmallConvNet: in_channels and every entry of features must be positive, with at least "
          f"one stage, got in_channels={in_channels} and features={features}.")
    self.in_channels = in_channels
    self.out_features = features[-1]
    channels = (in_channels,) + features
    self.convs = nnx.List([
        nnx.Conv(c_in, c_out, kernel_size=(3, 3), padding="SAME", kernel_init=_he_init, rngs=rngs)
        for c_in, c_out in zip(channels[:-1], channels[1:])
    ])
    self.norms = nnx.List([nnx.LayerNorm(c, rngs=rngs) for c in features])

  def __call__(self, x: jax.typing.ArrayLike) -> jax.Array:
    """Returns the features of images.

    Args:
      x: `[N, H, W, in_channels]` images.

    Returns:
      `[N, out_features]` features (averages of non-negative activations).
    """
    x = jnp.asarray(x)
    _check_images("SmallConvNet", x, self.in_channels)
    for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
      if i > 0:
        x = nnx.max_pool(x, window_shape=(2, 2), strides=(2, 2))
      x = nnx.relu(norm(conv(x)))
    return jnp.mean(x, axis=(1, 2))


def _conv(c_in: int, c_out: int, kernel: int, stride: int, rngs: nnx.Rngs) -> nnx.Conv:
  # Symmetric padding as in torchvision (Flax's "SAME" pads more at the end for stride 2), so that
  # converted weights give the same outputs.
  pad = (kernel - 1) // 2
  return nnx.Conv(
      c_in, c_out, kernel_size=(kernel, kernel), strides=(stride, stride),
      padding=((pad, pad), (pad, pad)), use_bias=False, kernel_init=_resnet_init, rngs=rngs)


def _batch_norm(features: int, rngs: nnx.Rngs) -> nnx.BatchNorm:
  # torchvision's momentum 0.1 is Flax's 0.9 (the weight of the old running average).
  return nnx.BatchNorm(features, momentum=0.9, epsilon=1e-5, rngs=rngs)


class _BasicBlock(nnx.Module):
  """Two 3x3 convolutions and a shortcut (ResNet-18/34)."""

  expansion = 1

  def __init__(self, c_in: int, width: int, stride: int, *, rngs: nnx.Rngs):
    self.conv1 = _conv(c_in, width, 3, stride, rngs)
    self.bn1 = _batch_norm(width, rngs)
    self.conv2 = _conv(width, width, 3, 1, rngs)
    self.bn2 = _batch_norm(width, rngs)
    self.downsample = _downsample(c_in, width, stride, rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    y = nnx.relu(self.bn1(self.conv1(x)))
    y = self.bn2(self.conv2(y))
    return nnx.relu(y + _shortcut(self.downsample, x))


class _Bottleneck(nnx.Module):
  """1x1, 3x3 (with the stride, as torchvision's "ResNet v1.5") and 1x1 convolutions, expansion 4."""

  expansion = 4

  def __init__(self, c_in: int, width: int, stride: int, *, rngs: nnx.Rngs):
    self.conv1 = _conv(c_in, width, 1, 1, rngs)
    self.bn1 = _batch_norm(width, rngs)
    self.conv2 = _conv(width, width, 3, stride, rngs)
    self.bn2 = _batch_norm(width, rngs)
    self.conv3 = _conv(width, width * 4, 1, 1, rngs)
    self.bn3 = _batch_norm(width * 4, rngs)
    self.downsample = _downsample(c_in, width * 4, stride, rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    y = nnx.relu(self.bn1(self.conv1(x)))
    y = nnx.relu(self.bn2(self.conv2(y)))
    y = self.bn3(self.conv3(y))
    return nnx.relu(y + _shortcut(self.downsample, x))


def _downsample(c_in: int, c_out: int, stride: int, rngs: nnx.Rngs) -> nnx.List | None:
  """The projection shortcut `[1x1 conv, BatchNorm]` when the shape changes, else None."""
  if stride == 1 and c_in == c_out:
    return None
  return nnx.List([_conv(c_in, c_out, 1, stride, rngs), _batch_norm(c_out, rngs)])


def _shortcut(downsample: nnx.List | None, x: jax.Array) -> jax.Array:
  if downsample is None:
    return x
  conv, norm = downsample
  return norm(conv(x))


class ResNet(nnx.Module):
  """A ResNet (He et al. 2016) as in torchvision, without the classifier: images to features.

  A 7x7 convolution of stride 2 to 64 channels, BatchNorm, relu and a 3x3 max-pool of stride 2;
  four stages of residual blocks of widths 64, 128, 256, 512 (stride 2 in the first block of
  stages 2-4; a projection shortcut, 1x1 convolution and BatchNorm, where the shape changes);
  then a pooling of the `[N, h, w, C]` feature map, `pool` (global average by default, as
  torchvision; `average_max_pool` or `GeMPool` as some of the papers). Basic blocks are two 3x3 convolutions; bottleneck blocks are 1x1,
  3x3 (with the stride, torchvision's "v1.5") and 1x1 convolutions with expansion 4. Padding is
  symmetric as in torchvision. An `[N, 224, 224, 3]` image is reduced 32 times, to `7 x 7` before
  the pool; time and memory grow linearly with `N` and the number of pixels.

  **Initialisation.** Random, as torchvision: convolutions (no bias) He/Kaiming normal with
  `fan_out` (`variance_scaling(2.0, "fan_out", "normal")`), BatchNorm scale 1 and bias 0. The
  last BatchNorm scale of each block is not zeroed (torchvision's default
  `zero_init_residual=False`); to zero it, set `block.bn2.scale[...] = 0` (`bn3` for bottlenecks)
  for every block after construction.

  **Training and inference modes.** Every BatchNorm (momentum 0.9, epsilon 1e-5) is built in
  training mode (`use_running_average=False`, Flax's default): each call normalises with the
  statistics of its batch, so an example's output depends on the rest of the batch, and updates
  the running averages in place (also under `nnx.jit`, which propagates the update).
  `model.eval()` switches every BatchNorm of the model to the running averages (outputs per
  example, nothing updated) and `model.train()` back; both set `use_running_average` recursively
  (Flax's `Module.set_attributes`), in place. `nnx.view(model, use_running_average=True)` gives an
  inference view without changing `model`. With `jaxrank.chunked_value_and_grad`, use inference
  mode (see its docstring) or `SmallConvNet`.

  **Converted weights.** Variables are named after torchvision's, so that a state dict converts
  key by key for `load_weights`: `conv1.weight` is `conv1/kernel` (transpose `OIHW` to `HWIO`),
  `bn1.{weight, bias, running_mean, running_var}` is `bn1/{scale, bias, mean, var}`,
  `layer1.0.conv1.weight` is `layer1/0/conv1/kernel`, `layer2.0.downsample.0.weight` is
  `layer2/0/downsample/0/kernel`, `layer2.0.downsample.1.weight` is
  `layer2/0/downsample/1/scale`; drop `num_batches_tracked` and `fc`.
  `jaxrank.convert.load_pytorch_weights` does this from a `.pth` or `.safetensors` file.

  Args:
    stage_sizes: the number of blocks in each of the four stages, e.g. `(2, 2, 2, 2)`.
    bottleneck: bottleneck blocks (ResNet-50 and deeper) if True, basic blocks if False.
    in_channels: the channels `C` of the input images.
    pool: `pool(x [N, h, w, C]) -> [N, C]`, a function (`global_average_pool`,
      `average_max_pool`) or a module with parameters (`GeMPool`).
    rngs: the random number generators of the initialisation.

  Attributes:
    out_features: 512 with basic blocks, 2048 with bottleneck blocks.
    conv1, bn1: the stem.
    layer1, layer2, layer3, layer4: the blocks of each stage (`nnx.List`).
    pool: the pooling.

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> net = ResNet((1, 1, 1, 1), bottleneck=False, rngs=nnx.Rngs(0))
  >>> net.eval()
  >>> net(jnp.zeros((2, 32, 32, 3))).shape, net.out_features
  ((2, 512), 512)
  """

  def __init__(
      self,
      stage_sizes: Sequence[int],
      *,
      bottleneck: bool,
      in_channels: int = 3,
      pool: Callable[[jax.Array], jax.Array] | None = None,
      rngs: nnx.Rngs,
  ):
    stage_sizes = tuple(int(s) for s in stage_sizes)
    if len(stage_sizes) != 4 or min(stage_sizes) < 1 or in_channels < 1:
      raise ValueError(
          "ResNet: stage_sizes must be four positive block counts and in_channels positive, got "
          f"stage_sizes={stage_sizes} and in_channels={in_channels}.")
    block = _Bottleneck if bottleneck else _BasicBlock
    self.in_channels = in_channels
    self.conv1 = _conv(in_channels, 64, 7, 2, rngs)
    self.bn1 = _batch_norm(64, rngs)
    c_in = 64
    stages = []
    for i, (num_blocks, width) in enumerate(zip(stage_sizes, (64, 128, 256, 512))):
      blocks = []
      for j in range(num_blocks):
        stride = 2 if i > 0 and j == 0 else 1
        blocks.append(block(c_in, width, stride, rngs=rngs))
        c_in = width * block.expansion
      stages.append(nnx.List(blocks))
    self.layer1, self.layer2, self.layer3, self.layer4 = stages
    self.pool = global_average_pool if pool is None else pool
    self.out_features = c_in

  def __call__(self, x: jax.typing.ArrayLike) -> jax.Array:
    """Returns the features of images.

    Args:
      x: `[N, H, W, in_channels]` images (at least `32 x 32` keeps every stage non-empty).

    Returns:
      `[N, out_features]` features (the pooling of non-negative activations).
    """
    x = jnp.asarray(x)
    _check_images("ResNet", x, self.in_channels)
    x = nnx.relu(self.bn1(self.conv1(x)))
    x = nnx.max_pool(x, window_shape=(3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
    for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
      for block in stage:
        x = block(x)
    return self.pool(x)


def resnet18(*, in_channels: int = 3, pool: Callable[[jax.Array], jax.Array] | None = None,
             rngs: nnx.Rngs) -> ResNet:
  """ResNet-18: basic blocks `(2, 2, 2, 2)`, 512 features, 11.2M parameters; see `ResNet`.

  >>> from flax import nnx
  >>> resnet18(rngs=nnx.Rngs(0)).out_features
  512
  """
  return ResNet((2, 2, 2, 2), bottleneck=False, in_channels=in_channels, pool=pool, rngs=rngs)


def resnet50(*, in_channels: int = 3, pool: Callable[[jax.Array], jax.Array] | None = None,
             rngs: nnx.Rngs) -> ResNet:
  """ResNet-50: bottleneck blocks `(3, 4, 6, 3)`, 2048 features, 23.5M parameters; see `ResNet`."""
  return ResNet((3, 4, 6, 3), bottleneck=True, in_channels=in_channels, pool=pool, rngs=rngs)


def resnet101(*, in_channels: int = 3, pool: Callable[[jax.Array], jax.Array] | None = None,
              rngs: nnx.Rngs) -> ResNet:
  """ResNet-101: bottleneck blocks `(3, 4, 23, 3)`, 2048 features, 42.5M parameters; see `ResNet`.
  """
  return ResNet((3, 4, 23, 3), bottleneck=True, in_channels=in_channels, pool=pool, rngs=rngs)


# timm's initialisation of a ViT's linear layers and patch projection: truncated normal, std 0.02.
_vit_init = nnx.initializers.truncated_normal(stddev=0.02)


def _vit_linear(c_in: int, c_out: int, rngs: nnx.Rngs) -> nnx.Linear:
  return nnx.Linear(c_in, c_out, kernel_init=_vit_init, rngs=rngs)


class _PatchEmbed(nnx.Module):
  """Non-overlapping `P x P` patches, each projected linearly (a convolution of stride `P`)."""

  def __init__(self, in_channels: int, patch_size: int, dim: int, rngs: nnx.Rngs):
    self.proj = nnx.Conv(
        in_channels, dim, kernel_size=(patch_size, patch_size),
        strides=(patch_size, patch_size), padding="VALID", kernel_init=_vit_init, rngs=rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    x = self.proj(x)  # [N, H / P, W / P, D]
    return x.reshape(x.shape[0], -1, x.shape[-1])  # Row by row, as timm's flatten(2).


class _Attention(nnx.Module):
  """Multi-head self-attention with one `qkv` projection, as timm's `Attention`."""

  def __init__(self, dim: int, num_heads: int, rngs: nnx.Rngs):
    self.num_heads = num_heads
    self.qkv = _vit_linear(dim, 3 * dim, rngs)
    self.proj = _vit_linear(dim, dim, rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    n, t, d = x.shape
    qkv = self.qkv(x).reshape(n, t, 3, self.num_heads, d // self.num_heads)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [N, T, heads, d_head]
    logits = jnp.einsum("nqhc,nkhc->nhqk", q, k) * (d // self.num_heads) ** -0.5
    out = jnp.einsum("nhqk,nkhc->nqhc", jax.nn.softmax(logits, axis=-1), v)
    return self.proj(out.reshape(n, t, d))


class _Mlp(nnx.Module):

  def __init__(self, dim: int, hidden: int, rngs: nnx.Rngs):
    self.fc1 = _vit_linear(dim, hidden, rngs)
    self.fc2 = _vit_linear(hidden, dim, rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    return self.fc2(jax.nn.gelu(self.fc1(x), approximate=False))


class _EncoderBlock(nnx.Module):
  """Pre-norm transformer block: `x + attn(norm1(x))`, then `x + mlp(norm2(x))`."""

  def __init__(self, dim: int, num_heads: int, mlp_ratio: float, rngs: nnx.Rngs):
    self.norm1 = nnx.LayerNorm(dim, epsilon=1e-6, rngs=rngs)
    self.attn = _Attention(dim, num_heads, rngs)
    self.norm2 = nnx.LayerNorm(dim, epsilon=1e-6, rngs=rngs)
    self.mlp = _Mlp(dim, int(dim * mlp_ratio), rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    x = x + self.attn(self.norm1(x))
    return x + self.mlp(self.norm2(x))


class VisionTransformer(nnx.Module):
  """A Vision Transformer (Dosovitskiy et al. 2021) as in timm, without the classifier.

  The image is cut into `P x P` patches, each projected linearly to `dim` (a convolution of stride
  `P`); a learned class token is put first and learned position embeddings are added; `depth`
  pre-norm blocks follow (LayerNorm, multi-head self-attention with one `qkv` projection, residual;
  LayerNorm, MLP `dim -> mlp_ratio * dim -> dim` with exact GELU, residual; LayerNorm epsilon
  1e-6), then a final LayerNorm, and the class token's output is the feature vector. This is
  timm's `VisionTransformer` with its defaults (class-token pooling, biases on `qkv`, no layer
  scale): `vit_small` is both `vit_small_patch16_224` and `deit_small_patch16_224` (DeiT-S, the
  backbone of ROADMAP; DeiT differs from ViT in training only). For `T = 1 + (H / P)(W / P)`
  tokens, time grows as `N (T dim^2 + T^2 dim)` per block and memory as `N T^2` per head.

  **Initialisation.** Random, as timm: linear layers and the patch projection truncated normal
  (std 0.02, biases zero), position embeddings truncated normal (std 0.02), the class token normal
  (std 1e-6), LayerNorm scale 1 and bias 0.

  **Converted weights.** Variables are named after timm's: `patch_embed.proj.weight` is
  `patch_embed/proj/kernel` (`OIHW` to `HWIO`), `blocks.0.attn.qkv.weight` is
  `blocks/0/attn/qkv/kernel` (transposed), `blocks.0.norm1.weight` is `blocks/0/norm1/scale`,
  `cls_token` and `pos_embed` keep their names; `head` (the classifier) is dropped.
  `jaxrank.convert.load_pytorch_weights` does this from a `.pth` or `.safetensors` file. The
  image size is that of the position embeddings: a checkpoint trained at 224 needs
  `image_size=224`.

  Args:
    image_size: the side `H = W` of the input images, a multiple of `patch_size`.
    patch_size: the side `P` of the patches.
    dim: the width of the tokens.
    depth: the number of blocks.
    num_heads: the attention heads, dividing `dim`.
    mlp_ratio: the hidden width of the MLP over `dim`.
    in_channels: the channels `C` of the input images.
    rngs: the random number generators of the initialisation.

  Attributes:
    out_features: `dim`.
    patch_embed, cls_token, pos_embed, blocks, norm: as timm's.

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> vit = VisionTransformer(image_size=32, dim=24, depth=1, num_heads=2, rngs=nnx.Rngs(0))
  >>> vit(jnp.zeros((2, 32, 32, 3))).shape, vit.pos_embed.shape
  ((2, 24), (1, 5, 24))
  """

  def __init__(
      self,
      *,
      image_size: int = 224,
      patch_size: int = 16,
      dim: int = 384,
      depth: int = 12,
      num_heads: int = 6,
      mlp_ratio: float = 4.0,
      in_channels: int = 3,
      rngs: nnx.Rngs,
  ):
    if (min(image_size, patch_size, dim, depth, num_heads, in_channels) < 1
        or image_size % patch_size or dim % num_heads or not mlp_ratio > 0):
      raise ValueError(
          "VisionTransformer: sizes must be positive, image_size a multiple of patch_size and dim "
          f"of num_heads, got image_size={image_size}, patch_size={patch_size}, dim={dim}, "
          f"depth={depth}, num_heads={num_heads}, mlp_ratio={mlp_ratio}, "
          f"in_channels={in_channels}.")
    self.in_channels = in_channels
    self.image_size = image_size
    self.out_features = dim
    num_patches = (image_size // patch_size) ** 2
    self.patch_embed = _PatchEmbed(in_channels, patch_size, dim, rngs)
    self.cls_token = nnx.Param(1e-6 * jax.random.normal(rngs.params(), (1, 1, dim)))
    self.pos_embed = nnx.Param(_vit_init(rngs.params(), (1, num_patches + 1, dim)))
    self.blocks = nnx.List([
        _EncoderBlock(dim, num_heads, mlp_ratio, rngs) for _ in range(depth)])
    self.norm = nnx.LayerNorm(dim, epsilon=1e-6, rngs=rngs)

  def __call__(self, x: jax.typing.ArrayLike) -> jax.Array:
    """Returns the features of images: the class token after the last LayerNorm.

    Args:
      x: `[N, image_size, image_size, in_channels]` images.

    Returns:
      `[N, out_features]` features.
    """
    x = jnp.asarray(x)
    _check_images("VisionTransformer", x, self.in_channels)
    if x.shape[1:3] != (self.image_size, self.image_size):
      raise ValueError(
          f"VisionTransformer: x must be [N, {self.image_size}, {self.image_size}, "
          f"{self.in_channels}] images (the size of the position embeddings), got shape "
          f"{x.shape}; resize the images or build the model with image_size={x.shape[1]}.")
    tokens = self.patch_embed(x)
    cls = jnp.broadcast_to(self.cls_token[...], (x.shape[0], 1, tokens.shape[-1]))
    tokens = jnp.concatenate([cls.astype(tokens.dtype), tokens], axis=1) + self.pos_embed[...]
    for block in self.blocks:
      tokens = block(tokens)
    return self.norm(tokens)[:, 0]


def vit_small(*, image_size: int = 224, in_channels: int = 3, rngs: nnx.Rngs
              ) -> VisionTransformer:
  """ViT-S/16 and DeiT-S/16: patches 16, width 384, 12 blocks of 6 heads, 21.7M parameters.

  See `VisionTransformer`; the checkpoints of timm's `vit_small_patch16_224` and
  `deit_small_patch16_224` load into it (`jaxrank.convert.load_pytorch_weights`).
  """
  return VisionTransformer(image_size=image_size, patch_size=16, dim=384, depth=12, num_heads=6,
                           in_channels=in_channels, rngs=rngs)


# Poolings: a feature map [N, h, w, C] to features [N, C].


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
  power and its gradient stay finite; the computation is in at least float32.

  Args:
    p: the initial exponent, positive.
    eps: the clamp, positive.

  Attributes:
    p: the exponent, an `nnx.Param` scalar (trained unless the optimiser leaves it out).
    eps: the clamp.

  >>> import jax.numpy as jnp
  >>> pool = GeMPool(p=1.0)
  >>> pool(jnp.arange(1.0, 5.0).reshape(1, 2, 2, 1)).round(4).tolist()
  [[2.5]]
  """

  def __init__(self, p: float = 3.0, *, eps: float = 1e-6):
    if not p > 0 or not eps > 0:
      raise ValueError(f"GeMPool: p and eps must be positive, got p={p} and eps={eps}.")
    self.p = nnx.Param(jnp.asarray(p, jnp.float32))
    self.eps = eps

  def __call__(self, x: jax.typing.ArrayLike) -> jax.Array:
    """Returns the generalised means.

    Args:
      x: `[N, h, w, C]` feature maps.

    Returns:
      `[N, C]` features, of the dtype of `x`.
    """
    x = jnp.asarray(x)
    acc = jnp.promote_types(x.dtype, jnp.float32)
    p = self.p[...].astype(acc)
    means = jnp.mean(jnp.maximum(x.astype(acc), self.eps) ** p, axis=(1, 2))
    return (means ** (1.0 / p)).astype(x.dtype)


def freeze_batchnorm(module: nnx.Module) -> None:
  """Sets every BatchNorm of a module to its running statistics, in place; nothing else changes.

  Fine-tuning a pretrained network with small batches, the papers keep BatchNorm frozen: each
  BatchNorm normalises with the running mean and variance of the pretrained network, which are
  neither replaced by the batch's statistics nor updated (`use_running_average=True`). Its scale
  and bias stay parameters (`nnx.Param`): they are trained unless the optimiser leaves them out.
  Unlike `module.eval()`, other layers (dropout) keep their mode. `module.train()` undoes it.

  Args:
    module: any Flax NNX module; a module without BatchNorm is left as it is.

  >>> from flax import nnx
  >>> net = resnet18(rngs=nnx.Rngs(0))
  >>> freeze_batchnorm(net)
  >>> net.layer4[1].bn2.use_running_average
  True
  """
  module.set_attributes(nnx.BatchNorm, raise_if_not_found=False, use_running_average=True)


class EmbeddingHead(nnx.Module):
  r"""A linear layer followed by L2 normalisation: features to unit embeddings.

  .. math::
    e = \frac{W x + b}{\max(\lVert W x + b \rVert_2, 10^{-12})}

  Rows have unit norm, so dot products are cosine similarities (the scores of
  `jaxrank.batch_retrieval`). A zero row of `W x + b` stays zero instead of becoming NaN, and its
  gradient is finite (the norm is taken as `sqrt(max(|h|^2, 1e-24))`, the same value). The linear
  layer's kernel is LeCun normal (variance `1 / in_features`, untruncated), its bias zero.

  Args:
    in_features: the size `F` of the input features.
    dim: the size `D` of the embeddings.
    rngs: the random number generators of the initialisation.

  Attributes:
    linear: the `nnx.Linear(in_features, dim)`.

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> head = EmbeddingHead(3, 2, rngs=nnx.Rngs(0))
  >>> jnp.linalg.norm(head(jnp.ones((4, 3))), axis=-1).round(4).tolist()
  [1.0, 1.0, 1.0, 1.0]
  """

  def __init__(self, in_features: int, dim: int, *, rngs: nnx.Rngs):
    self.linear = nnx.Linear(in_features, dim, kernel_init=_lecun_init, rngs=rngs)

  def __call__(self, x: jax.typing.ArrayLike) -> jax.Array:
    """Returns unit embeddings.

    Args:
      x: `[N, in_features]` features.

    Returns:
      `[N, dim]` rows of unit L2 norm (zero where `W x + b` is zero).
    """
    h = self.linear(x)
    acc = jnp.promote_types(h.dtype, jnp.float32)
    squared = jnp.sum(jnp.square(h.astype(acc)), axis=-1, keepdims=True)
    return (h.astype(acc) * jax.lax.rsqrt(jnp.maximum(squared, 1e-24))).astype(h.dtype)


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
  the glyphs: nothing trained; see the README's Hashing section).

  Args:
    in_features: the size `F` of the input features.
    num_bits: the number of bits `b` of the codes.
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

  def __init__(self, in_features: int, num_bits: int, *, rngs: nnx.Rngs):
    self.linear = nnx.Linear(in_features, num_bits, kernel_init=_lecun_init, rngs=rngs)

  def __call__(self, x: jax.typing.ArrayLike, *, scale: jax.typing.ArrayLike = 1.0) -> jax.Array:
    """Returns relaxed codes.

    Args:
      x: `[N, in_features]` features.
      scale: `\\alpha > 0`, a scalar (Python number or array, traceable).

    Returns:
      `[N, num_bits]` codes in `(-1, 1)` (they round to `\\pm 1` in floating point for large
      `scale * h`).
    """
    return jnp.tanh(scale * self.linear(x))


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
  >>> rngs = nnx.Rngs(0)
  >>> model = EmbeddingModel(SmallConvNet(1, features=(8,), rngs=rngs),
  ...                        HashingHead(8, 12, rngs=rngs))
  >>> model(jnp.ones((3, 8, 8, 1)), scale=4.0).shape
  (3, 12)
  """

  def __init__(self, backbone: nnx.Module, head: nnx.Module):
    self.backbone = backbone
    self.head = head

  def __call__(self, x: jax.typing.ArrayLike, *, scale: jax.typing.ArrayLike | None = None
               ) -> jax.Array:
    """Returns `head(backbone(x))`, with `scale=scale` passed to the head unless it is None.

    Args:
      x: the backbone's input, e.g. `[N, H, W, C]` images.
      scale: None (the default) calls `head(features)`, as `EmbeddingHead` needs; anything else
        calls `head(features, scale=scale)`, as `HashingHead` takes (its scale then defaults to
        1 when None is given here).

    Returns:
      The head's output, `[N, D]`.
    """
    features = self.backbone(x)
    if scale is None:
      return self.head(features)
    return self.head(features, scale=scale)


def _flat_variables(model: nnx.Module) -> dict[str, tuple[tuple, nnx.Variable]]:
  """Maps each variable's path joined with "/" to the path and the variable."""
  flat = nnx.to_flat_state(nnx.state(model, _WEIGHTS))
  return {"/".join(str(part) for part in path): (path, variable) for path, variable in flat}


def save_weights(model: nnx.Module, path: str | os.PathLike) -> None:
  """Saves every variable of a model to a local `.npz` file, for `load_weights`.

  Each variable of `nnx.state(model)` (parameters and BatchNorm statistics alike; random number
  generator state is left out) is stored under its path joined with `/` (e.g.
  `backbone/layer1/0/bn1/mean`) as a numpy array of its shape and dtype. The file is written at
  `path` exactly (no `.npz` is appended) and overwritten if it exists. Read it with `np.load` or
  `load_weights`.

  Args:
    model: any Flax NNX module.
    path: the file to write.

  >>> import os, tempfile
  >>> import numpy as np
  >>> from flax import nnx
  >>> path = os.path.join(tempfile.mkdtemp(), "head.npz")
  >>> save_weights(EmbeddingHead(3, 2, rngs=nnx.Rngs(0)), path)
  >>> sorted(np.load(path).files)
  ['linear/bias', 'linear/kernel']
  """
  arrays = {key: np.asarray(variable[...]) for key, (_, variable) in _flat_variables(model).items()}
  # The `.npz` layout of `np.savez`, written by hand so that no key can collide with its arguments.
  with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
    for key, array in arrays.items():
      with archive.open(key + ".npy", "w", force_zip64=True) as file:
        np.lib.format.write_array(file, array, allow_pickle=False)


def load_weights(model: nnx.Module, path: str | os.PathLike) -> None:
  """Loads every variable of a model from a local `.npz` file, in place.

  The file maps each variable's path in `nnx.state(model)`, joined with `/`, to its array, as
  `save_weights` writes it; the keys must be exactly those of the model and the shapes equal
  (arrays are cast to the dtype of the model's variables). Weights come only from a local file
  that the user provides (saved by `save_weights`, or converted, e.g. from a torchvision state
  dict with the names given in `ResNet`); nothing is ever downloaded from a hub.

  Args:
    model: the Flax NNX module to update (`nnx.update`), built with the same architecture.
    path: the `.npz` file to read.

  Raises:
    FileNotFoundError: `path` does not exist.
    ValueError: the file is not an `.npz` archive, or its keys or shapes differ from the model's
      (the message names the first few missing keys, unexpected keys and shape mismatches).

  >>> import os, tempfile
  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> path = os.path.join(tempfile.mkdtemp(), "head.npz")
  >>> save_weights(EmbeddingHead(3, 2, rngs=nnx.Rngs(0)), path)
  >>> head = EmbeddingHead(3, 2, rngs=nnx.Rngs(1))
  >>> load_weights(head, path)
  >>> bool(jnp.all(head.linear.kernel[...] == EmbeddingHead(3, 2, rngs=nnx.Rngs(0)).linear.kernel[...]))
  True
  """
  if not os.path.isfile(path):
    raise FileNotFoundError(
        f"load_weights: no weights file at {os.fspath(path)!r}; pass a local .npz file written by "
        "save_weights (or converted from another library).")
  data = np.load(path, allow_pickle=False)
  if not isinstance(data, np.lib.npyio.NpzFile):
    raise ValueError(f"load_weights: {os.fspath(path)!r} is not an .npz archive.")
  with data:
    arrays = {key: data[key] for key in data.files}
  variables = _flat_variables(model)
  weights.check_same_layout(
      "load_weights", path, "model", {key: value.shape for key, value in arrays.items()},
      {key: tuple(variable.shape) for key, (_, variable) in variables.items()})
  flat = [
      (path, jnp.asarray(arrays[key], dtype=variable.dtype))
      for key, (path, variable) in variables.items()
  ]
  nnx.update(model, nnx.from_flat_state(flat))

