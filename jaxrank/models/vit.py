"""`VisionTransformer`, with `vit_small`: timm's ViT-S/16 and DeiT-S/16 without the classifier."""

from __future__ import annotations

import typing

import jax
import jax.numpy as jnp
from flax import nnx

from jaxrank.models._layers import check_dtypes
from jaxrank.models._layers import check_images
from jaxrank.models._layers import layer_norm
from jaxrank.models._layers import Precision

# timm's initialisation of a ViT's linear layers and patch projection: truncated normal, std 0.02.
_vit_init = nnx.initializers.truncated_normal(stddev=0.02)

# What `attention_implementation` may name: None (XLA's program of `_Attention`) or "cudnn"
# (`jax.nn.dot_product_attention`'s fused cuDNN kernel).
AttentionImplementation = typing.Literal["cudnn"] | None
ATTENTION_IMPLEMENTATIONS = (None, "cudnn")


def _vit_linear(c_in: int, c_out: int, precision: Precision, rngs: nnx.Rngs) -> nnx.Linear:
  return nnx.Linear(
    c_in,
    c_out,
    kernel_init=_vit_init,
    dtype=precision.dtype,
    param_dtype=precision.param_dtype,
    rngs=rngs,
  )


def _vit_norm(dim: int, precision: Precision, rngs: nnx.Rngs) -> nnx.LayerNorm:
  return layer_norm(
    dim, epsilon=1e-6, dtype=precision.dtype, param_dtype=precision.param_dtype, rngs=rngs
  )


class _PatchEmbed(nnx.Module):
  """Non-overlapping `P x P` patches, each projected linearly (a convolution of stride `P`)."""

  def __init__(
    self, in_channels: int, patch_size: int, dim: int, precision: Precision, rngs: nnx.Rngs
  ):
    self.proj = nnx.Conv(
      in_channels,
      dim,
      kernel_size=(patch_size, patch_size),
      strides=(patch_size, patch_size),
      padding="VALID",
      kernel_init=_vit_init,
      dtype=precision.dtype,
      param_dtype=precision.param_dtype,
      rngs=rngs,
    )

  def __call__(self, x: jax.Array) -> jax.Array:
    x = self.proj(x)  # [N, H / P, W / P, D]
    return x.reshape(x.shape[0], -1, x.shape[-1])  # Row by row, as timm's flatten(2).


class _Attention(nnx.Module):
  """Multi-head self-attention with one `qkv` projection, as timm's `Attention`.

  The logits `q k^T / sqrt(d_head)` are products in the computation's dtype (accumulated in
  float32 by the hardware, stored in that dtype, as `torch.autocast` stores them); the softmax
  is computed in float32 and its probabilities cast back for the product with `v`. The
  `[N, heads, T, T]` logits are the largest arrays of a ViT's step at 224 x 224, and
  `jax.nn.dot_product_attention` would store them in float32 whatever the dtype (twice the
  traffic in bfloat16; docs/guide/training.rst). `implementation="cudnn"` runs cuDNN's fused
  kernel instead (`jax.nn.dot_product_attention`, NVIDIA GPUs), which never stores them.
  """

  def __init__(
    self,
    dim: int,
    num_heads: int,
    implementation: AttentionImplementation,
    precision: Precision,
    rngs: nnx.Rngs,
  ):
    self.num_heads = num_heads
    self.implementation = implementation
    self.qkv = _vit_linear(dim, 3 * dim, precision, rngs)
    self.proj = _vit_linear(dim, dim, precision, rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    n, t, d = x.shape
    qkv = self.qkv(x).reshape(n, t, 3, self.num_heads, d // self.num_heads)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [N, T, heads, d_head]
    if self.implementation == "cudnn":
      out = jax.nn.dot_product_attention(q, k, v, implementation="cudnn")
    else:
      logits = jnp.einsum("nqhc,nkhc->nhqk", q, k) * (d // self.num_heads) ** -0.5
      probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(v.dtype)
      out = jnp.einsum("nhqk,nkhc->nqhc", probs, v)
    return self.proj(out.reshape(n, t, d))


class _Mlp(nnx.Module):
  def __init__(self, dim: int, hidden: int, precision: Precision, rngs: nnx.Rngs):
    self.fc1 = _vit_linear(dim, hidden, precision, rngs)
    self.fc2 = _vit_linear(hidden, dim, precision, rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    return self.fc2(jax.nn.gelu(self.fc1(x), approximate=False))


class _EncoderBlock(nnx.Module):
  """Pre-norm transformer block: `x + attn(norm1(x))`, then `x + mlp(norm2(x))`."""

  def __init__(
    self,
    dim: int,
    num_heads: int,
    mlp_ratio: float,
    attention_implementation: AttentionImplementation,
    precision: Precision,
    rngs: nnx.Rngs,
  ):
    self.norm1 = _vit_norm(dim, precision, rngs)
    self.attn = _Attention(dim, num_heads, attention_implementation, precision, rngs)
    self.norm2 = _vit_norm(dim, precision, rngs)
    self.mlp = _Mlp(dim, int(dim * mlp_ratio), precision, rngs)

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

  **Precision.** `dtype=jnp.bfloat16` (with float32 `param_dtype`) runs the whole network in
  bfloat16, the residual stream included (as Flax's and big_vision's ViTs; the class token and
  position embeddings are cast to it), except what must stay float32 (`jaxrank.models`): the
  LayerNorms' statistics and normalisation, and attention's softmax (its logits are stored in
  `dtype`, as under `torch.autocast`). The features come out in `dtype`.

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
    dtype: the dtype of the computation (None: inferred from the inputs and parameters).
    param_dtype: the dtype of the parameters.
    attention_implementation: None (XLA's program, every platform) or `"cudnn"` (cuDNN's fused
      kernel through `jax.nn.dot_product_attention`, NVIDIA GPUs only, bfloat16 or float16
      `dtype`).
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
    dtype: jax.typing.DTypeLike | None = None,
    param_dtype: jax.typing.DTypeLike = jnp.float32,
    attention_implementation: AttentionImplementation = None,
    rngs: nnx.Rngs,
  ):
    check_dtypes("VisionTransformer", dtype, param_dtype)
    if attention_implementation not in ATTENTION_IMPLEMENTATIONS:
      raise ValueError(
        "VisionTransformer: attention_implementation must be one of "
        f"{ATTENTION_IMPLEMENTATIONS}, got {attention_implementation!r}."
      )
    if (
      min(image_size, patch_size, dim, depth, num_heads, in_channels) < 1
      or image_size % patch_size
      or dim % num_heads
      or not mlp_ratio > 0
    ):
      raise ValueError(
        "VisionTransformer: sizes must be positive, image_size a multiple of patch_size and dim "
        f"of num_heads, got image_size={image_size}, patch_size={patch_size}, dim={dim}, "
        f"depth={depth}, num_heads={num_heads}, mlp_ratio={mlp_ratio}, "
        f"in_channels={in_channels}."
      )
    precision = Precision(dtype, param_dtype)
    self.in_channels = in_channels
    self.image_size = image_size
    self.out_features = dim
    num_patches = (image_size // patch_size) ** 2
    self.patch_embed = _PatchEmbed(in_channels, patch_size, dim, precision, rngs)
    self.cls_token = nnx.Param(1e-6 * jax.random.normal(rngs.params(), (1, 1, dim), param_dtype))
    self.pos_embed = nnx.Param(_vit_init(rngs.params(), (1, num_patches + 1, dim), param_dtype))
    self.blocks = nnx.List(
      [
        _EncoderBlock(dim, num_heads, mlp_ratio, attention_implementation, precision, rngs)
        for _ in range(depth)
      ]
    )
    self.norm = _vit_norm(dim, precision, rngs)

  def __call__(self, x: jax.typing.ArrayLike) -> jax.Array:
    """Returns the features of images: the class token after the last LayerNorm.

    Args:
      x: `[N, image_size, image_size, in_channels]` images.

    Returns:
      `[N, out_features]` features, in `dtype`.
    """
    x = jnp.asarray(x)
    check_images("VisionTransformer", x, self.in_channels)
    if x.shape[1:3] != (self.image_size, self.image_size):
      raise ValueError(
        f"VisionTransformer: x must be [N, {self.image_size}, {self.image_size}, "
        f"{self.in_channels}] images (the size of the position embeddings), got shape "
        f"{x.shape}; resize the images or build the model with image_size={x.shape[1]}."
      )
    tokens = self.patch_embed(x)  # In `dtype` (or as inferred from x and the parameters).
    cls = jnp.broadcast_to(self.cls_token[...], (x.shape[0], 1, tokens.shape[-1]))
    tokens = jnp.concatenate([cls.astype(tokens.dtype), tokens], axis=1)
    tokens = tokens + self.pos_embed[...].astype(tokens.dtype)
    for block in self.blocks:
      tokens = block(tokens)
    return self.norm(tokens)[:, 0]


def vit_small(
  *,
  image_size: int = 224,
  in_channels: int = 3,
  dtype: jax.typing.DTypeLike | None = None,
  param_dtype: jax.typing.DTypeLike = jnp.float32,
  attention_implementation: AttentionImplementation = None,
  rngs: nnx.Rngs,
) -> VisionTransformer:
  """ViT-S/16 and DeiT-S/16: patches 16, width 384, 12 blocks of 6 heads, 21.7M parameters.

  See `VisionTransformer`; the checkpoints of timm's `vit_small_patch16_224` and
  `deit_small_patch16_224` load into it (`jaxrank.convert.load_pytorch_weights`).
  """
  return VisionTransformer(
    image_size=image_size,
    patch_size=16,
    dim=384,
    depth=12,
    num_heads=6,
    in_channels=in_channels,
    dtype=dtype,
    param_dtype=param_dtype,
    attention_implementation=attention_implementation,
    rngs=rngs,
  )
