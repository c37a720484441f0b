"""`ResNet`, and `resnet18`, `resnet50`, `resnet101`: torchvision's ResNets less the classifier."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from jaxrank._src import checks
from jaxrank.models._layers import batch_norm
from jaxrank.models._layers import check_dtypes
from jaxrank.models._layers import check_images
from jaxrank.models._layers import Precision
from jaxrank.models._layers import RESNET_INIT
from jaxrank.models.pooling import DEFAULT_STRIDE
from jaxrank.models.pooling import feature_map_mask
from jaxrank.models.pooling import global_average_pool


def _conv(
  c_in: int, c_out: int, kernel: int, stride: int, precision: Precision, rngs: nnx.Rngs
) -> nnx.Conv:
  # Symmetric padding as in torchvision (Flax's "SAME" pads more at the end for stride 2), so that
  # converted weights give the same outputs.
  pad = (kernel - 1) // 2
  return nnx.Conv(
    c_in,
    c_out,
    kernel_size=(kernel, kernel),
    strides=(stride, stride),
    padding=((pad, pad), (pad, pad)),
    use_bias=False,
    kernel_init=RESNET_INIT,
    dtype=precision.dtype,
    param_dtype=precision.param_dtype,
    rngs=rngs,
  )


def _batch_norm(features: int, precision: Precision, rngs: nnx.Rngs) -> nnx.BatchNorm:
  return batch_norm(features, dtype=precision.dtype, param_dtype=precision.param_dtype, rngs=rngs)


class _BasicBlock(nnx.Module):
  """Two 3x3 convolutions and a shortcut (ResNet-18/34)."""

  expansion = 1

  def __init__(self, c_in: int, width: int, stride: int, precision: Precision, rngs: nnx.Rngs):
    self.stride = stride
    self.conv1 = _conv(c_in, width, 3, stride, precision, rngs)
    self.bn1 = _batch_norm(width, precision, rngs)
    self.conv2 = _conv(width, width, 3, 1, precision, rngs)
    self.bn2 = _batch_norm(width, precision, rngs)
    self.downsample = _downsample(c_in, width, stride, precision, rngs)

  def __call__(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    # The shortcut takes the masked input too (its 1x1 reads each cell alone): one array, not two.
    x = _inside(x, mask)
    y = nnx.relu(self.bn1(self.conv1(x)))
    y = self.bn2(self.conv2(_inside(y, _strided(mask, self.stride))))
    return nnx.relu(y + _shortcut(self.downsample, x))


class _Bottleneck(nnx.Module):
  """1x1, 3x3 (with the stride, torchvision's "ResNet v1.5") and 1x1 convolutions, expansion 4."""

  expansion = 4

  def __init__(self, c_in: int, width: int, stride: int, precision: Precision, rngs: nnx.Rngs):
    self.stride = stride
    self.conv1 = _conv(c_in, width, 1, 1, precision, rngs)
    self.bn1 = _batch_norm(width, precision, rngs)
    self.conv2 = _conv(width, width, 3, stride, precision, rngs)
    self.bn2 = _batch_norm(width, precision, rngs)
    self.conv3 = _conv(width, width * 4, 1, 1, precision, rngs)
    self.bn3 = _batch_norm(width * 4, precision, rngs)
    self.downsample = _downsample(c_in, width * 4, stride, precision, rngs)

  def __call__(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    # The 1x1 convolutions read each cell alone: only the 3x3 one's input is masked.
    y = nnx.relu(self.bn1(self.conv1(x)))
    y = nnx.relu(self.bn2(self.conv2(_inside(y, mask))))
    y = self.bn3(self.conv3(y))
    return nnx.relu(y + _shortcut(self.downsample, x))


def _downsample(
  c_in: int, c_out: int, stride: int, precision: Precision, rngs: nnx.Rngs
) -> nnx.List | None:
  """The projection shortcut `[1x1 conv, BatchNorm]` when the shape changes, else None."""
  if stride == 1 and c_in == c_out:
    return None
  return nnx.List(
    [_conv(c_in, c_out, 1, stride, precision, rngs), _batch_norm(c_out, precision, rngs)]
  )


def _inside(x: jax.Array, mask: jax.Array | None) -> jax.Array:
  """`x [N, h, w, C]` with the cells outside each image (False in `mask [N, h, w]`) set to 0, as
  the unpadded image's network sees its convolutions' zero padding; `x` itself without a mask.

  A product, not a select: the activations are finite (the input's padding is selected away
  first), and the TPU v5e compiler schedules the products at +14% of the unmasked ResNet-18's
  cycles, the selects at +40% (`[8, 224, 224, 3]`, deviceless)."""
  return x if mask is None else x * mask[..., None].astype(x.dtype)


def _strided(mask: jax.Array | None, stride: int) -> jax.Array | None:
  """The mask of a stride-`stride` layer's output (the anchor rule, `feature_map_mask`)."""
  return mask if mask is None or stride == 1 else mask[:, ::stride, ::stride]


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
  torchvision; `average_max_pool` or `GeMPool` as some of the papers). Basic blocks are two 3x3
  convolutions; bottleneck blocks are 1x1, 3x3 (with the stride, torchvision's "v1.5") and 1x1
  convolutions with expansion 4. Padding is symmetric as in torchvision. An `[N, 224, 224, 3]` image
  is reduced 32 times, to `7 x 7` before the pool; time and memory grow linearly with `N` and the
  number of pixels.

  **Initialisation.** Random, as torchvision: convolutions (no bias) He/Kaiming normal with
  `fan_out` (`variance_scaling(2.0, "fan_out", "normal")`), BatchNorm scale 1 and bias 0. The
  last BatchNorm scale of each block is not zeroed (torchvision's default
  `zero_init_residual=False`); to zero it, set `block.bn2.scale[...] = 0` (`bn3` for bottlenecks)
  for every block after construction.

  **Precision.** `dtype=jnp.bfloat16` (with float32 `param_dtype`) runs the convolutions in
  bfloat16 and keeps every BatchNorm's statistics and normalisation in float32 (`jaxrank.models`);
  the features come out in `dtype`. A `GeMPool` computes in float32 and returns `dtype`.

  **Training and inference modes.** Every BatchNorm (momentum 0.9, epsilon 1e-5) is built in
  training mode (`use_running_average=False`, Flax's default): each call normalises with the
  statistics of its batch, so an example's output depends on the rest of the batch, and updates
  the running averages in place (also under `nnx.jit`, which propagates the update).
  `model.eval()` switches every BatchNorm of the model to the running averages (outputs per
  example, nothing updated) and `model.train()` back; both set `use_running_average` recursively
  (Flax's `Module.set_attributes`), in place. `nnx.view(model, use_running_average=True)` gives an
  inference view without changing `model`. With `jaxrank.chunked_value_and_grad`, use inference
  mode (see its docstring) or `SmallConvNet`.

  **Padded images.** `net(x, mask)` takes images padded at the bottom and right to a shared shape
  (`jaxrank.data.pad_to_buckets`, `jaxrank.models.extract_descriptors`) with their pixel mask,
  True on each image's own pixels, and gives in inference mode **the unpadded images' features**
  (to rounding: float32 differences of order 1e-6 in tests), whatever the padding holds (NaN
  included). It sets the cells outside each image to 0 at the input of the first convolution,
  of the max-pool and of every 3x3 convolution, each at its stride's mask (the anchor rule,
  `feature_map_mask`): that is what the unpadded network's zero padding shows these layers,
  since every layer maps a side `n` to `ceil(n / 2)` or `n` cells whose windows lie at the same
  places in both (padding is symmetric and the image at the top left; a 1x1 convolution reads
  each cell alone; after a ReLU, a 0 in the max-pool's window changes nothing, as the unpadded
  network's `-inf`). Then it pools over the image's own cells of the stride-32 map, so `pool`
  must take a mask (every pooling of `jaxrank.models` does). Masking the pooling alone would not
  do: the edge cells' receptive fields reach past the image, into activations of the padding's
  cells (`jaxrank.models.pooling`, "Masks"); on a random ResNet-18 with images of 64 to 128
  pixels padded to multiples of 64, the padded and unpadded descriptors' cosine, centred (the
  mean descriptor subtracted, as whitening does), is then 0.09 to 0.97 (median 0.61), and a
  padded descriptor's nearest unpadded one is its own image's for 71% of the images; 1 and 100%
  with every layer masked (`experiments/benchmarks/padded_descriptors.py`). The masks cost a
  product at each masked layer's input: compiled deviceless for a TPU v5e, ResNet-18 at
  `[8, 224, 224, 3]` takes 14% more of the compiler's scheduled cycles than unmasked (its cost
  analysis: 6% more time and bytes); for an H100, 0.3% more temporary memory (the CUDA
  compiler gives no time estimate); nothing was timed on a device. The padding costs its
  share of the pixels (`jaxrank.data.bucket_cost`). Exact in inference mode only
  (`net.eval()`): in training mode BatchNorm's batch statistics count the padding's cells.
  `mask=None` compiles to the unmasked network's program, unchanged.

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
    dtype: the dtype of the computation (None: inferred from the inputs and parameters).
    param_dtype: the dtype of the parameters and BatchNorm statistics.
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
  >>> mask = jnp.zeros((2, 64, 64), bool).at[0, :40, :64].set(True).at[1, :64, :33].set(True)
  >>> net(jnp.ones((2, 64, 64, 3)), mask).shape
  (2, 512)
  """

  def __init__(
    self,
    stage_sizes: Sequence[int],
    *,
    bottleneck: bool,
    in_channels: int = 3,
    pool: Callable[[jax.Array], jax.Array] | None = None,
    dtype: jax.typing.DTypeLike | None = None,
    param_dtype: jax.typing.DTypeLike = jnp.float32,
    rngs: nnx.Rngs,
  ):
    check_dtypes("ResNet", dtype, param_dtype)
    stage_sizes = tuple(int(s) for s in stage_sizes)
    if len(stage_sizes) != 4 or min(stage_sizes) < 1 or in_channels < 1:
      raise ValueError(
        "ResNet: stage_sizes must be four positive block counts and in_channels positive, got "
        f"stage_sizes={stage_sizes} and in_channels={in_channels}."
      )
    block = _Bottleneck if bottleneck else _BasicBlock
    precision = Precision(dtype, param_dtype)
    self.in_channels = in_channels
    self.conv1 = _conv(in_channels, 64, 7, 2, precision, rngs)
    self.bn1 = _batch_norm(64, precision, rngs)
    c_in = 64
    stages = []
    for i, (num_blocks, width) in enumerate(zip(stage_sizes, (64, 128, 256, 512))):
      blocks = []
      for j in range(num_blocks):
        stride = 2 if i > 0 and j == 0 else 1
        blocks.append(block(c_in, width, stride, precision, rngs))
        c_in = width * block.expansion
      stages.append(nnx.List(blocks))
    self.layer1, self.layer2, self.layer3, self.layer4 = stages
    # Called as pool(h) or pool(h, mask): every pooling of jaxrank.models takes both.
    self.pool: Callable[..., jax.Array] = global_average_pool if pool is None else pool
    self.out_features = c_in

  def __call__(
    self, x: jax.typing.ArrayLike, mask: jax.typing.ArrayLike | None = None
  ) -> jax.Array:
    """Returns the features of images, pooled over each image's own cells when `mask` is given.

    Args:
      x: `[N, H, W, in_channels]` images (at least `32 x 32` keeps every stage non-empty).
      mask: optional boolean `[N, H, W]`, True on each image's own pixels (images padded to a
        shared shape at the bottom and right, `jaxrank.data.pad_to_buckets`): the features are
        each unpadded image's (in inference mode; see "Padded images"). None (the default) is
        the unmasked network, the same program as before masks existed.

    Returns:
      `[N, out_features]` features (the pooling of non-negative activations), in `dtype`.
    """
    images = jnp.asarray(x)
    check_images("ResNet", images, self.in_channels)
    if mask is None:
      h = nnx.relu(self.bn1(self.conv1(images)))
      h = nnx.max_pool(h, window_shape=(3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
      for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
        for block in stage:
          h = block(h)
      return self.pool(h)
    mask = checks.check_mask(
      "ResNet", "mask", mask, images.shape[:3], like="images [N, H, W]", broadcast=False
    )
    # A select for the input, whatever its padding holds (NaN included); products after it.
    h = nnx.relu(self.bn1(self.conv1(jnp.where(mask[..., None], images, 0))))
    cells = _strided(mask, 2)
    # After the ReLU every own value is >= 0, so a 0 outside is the unpadded max-pool's -inf.
    h = nnx.max_pool(
      _inside(h, cells), window_shape=(3, 3), strides=(2, 2), padding=((1, 1), (1, 1))
    )
    cells = _strided(cells, 2)
    for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
      for block in stage:
        h = block(h, cells)
        cells = _strided(cells, block.stride)
    return self.pool(h, feature_map_mask(mask, DEFAULT_STRIDE))


def resnet18(
  *,
  in_channels: int = 3,
  pool: Callable[[jax.Array], jax.Array] | None = None,
  dtype: jax.typing.DTypeLike | None = None,
  param_dtype: jax.typing.DTypeLike = jnp.float32,
  rngs: nnx.Rngs,
) -> ResNet:
  """ResNet-18: basic blocks `(2, 2, 2, 2)`, 512 features, 11.2M parameters; see `ResNet`.

  >>> from flax import nnx
  >>> resnet18(rngs=nnx.Rngs(0)).out_features
  512
  """
  return ResNet(
    (2, 2, 2, 2),
    bottleneck=False,
    in_channels=in_channels,
    pool=pool,
    dtype=dtype,
    param_dtype=param_dtype,
    rngs=rngs,
  )


def resnet50(
  *,
  in_channels: int = 3,
  pool: Callable[[jax.Array], jax.Array] | None = None,
  dtype: jax.typing.DTypeLike | None = None,
  param_dtype: jax.typing.DTypeLike = jnp.float32,
  rngs: nnx.Rngs,
) -> ResNet:
  """ResNet-50: bottleneck blocks `(3, 4, 6, 3)`, 2048 features, 23.5M parameters; see `ResNet`."""
  return ResNet(
    (3, 4, 6, 3),
    bottleneck=True,
    in_channels=in_channels,
    pool=pool,
    dtype=dtype,
    param_dtype=param_dtype,
    rngs=rngs,
  )


def resnet101(
  *,
  in_channels: int = 3,
  pool: Callable[[jax.Array], jax.Array] | None = None,
  dtype: jax.typing.DTypeLike | None = None,
  param_dtype: jax.typing.DTypeLike = jnp.float32,
  rngs: nnx.Rngs,
) -> ResNet:
  """ResNet-101: bottleneck blocks `(3, 4, 23, 3)`, 2048 features, 42.5M parameters; see
  `ResNet`."""
  return ResNet(
    (3, 4, 23, 3),
    bottleneck=True,
    in_channels=in_channels,
    pool=pool,
    dtype=dtype,
    param_dtype=param_dtype,
    rngs=rngs,
  )
