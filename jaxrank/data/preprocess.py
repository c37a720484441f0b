"""Image preprocessing as in the metric-learning papers, as TensorFlow ops for tf.data `map`.

Training: resize so that the shorter side is `resize_size` (256), take a random `crop_size` (224)
square and flip it horizontally at random; evaluation: the same resize and the central square
(FastAP, RaMBO, Smooth-AP and ROADMAP all train and test ResNets this way). Both end with ImageNet
normalisation, the statistics of the pretrained backbones. The resize keeps the aspect ratio (the
`torchvision.transforms.Resize(256)` of the reference codes) and is bilinear with antialiasing. Both
crop first and resize the crop only (big_vision's habit), the same geometry for about a third of
the work on SOP-sized photographs.

Random ops are stateless: the pipeline passes each example a seed `[2]` derived from its epoch and
position in the epoch, so augmentation is deterministic for a given pipeline seed. Sizes are
configurable for small images (`resize_size=36, crop_size=32`, say); fix them with
`functools.partial`.

>>> import functools
>>> import numpy as np
>>> import tensorflow as tf
>>> from jaxrank.data import preprocess
>>> image = tf.constant(np.full((40, 60, 3), 128, np.uint8))
>>> train = functools.partial(preprocess.train_preprocess, resize_size=36, crop_size=32)
>>> out = train(image, tf.constant([0, 1]))
>>> out.shape, out.dtype.name
(TensorShape([32, 32, 3]), 'float32')
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def decode_image(encoded: tf.Tensor, channels: int = 3) -> tf.Tensor:
  """JPEG, PNG, GIF (first frame) or BMP bytes to a uint8 `[H, W, channels]` image."""
  image = tf.io.decode_image(encoded, channels=channels, expand_animations=False)
  image.set_shape([None, None, channels])
  return image


def _check_sizes(fn: str, resize_size: int, crop_size: int) -> None:
  if crop_size < 1 or resize_size < crop_size:
    raise ValueError(
      f"{fn}: crop_size={crop_size} must be positive and at most resize_size={resize_size}; "
      "raise resize_size or lower crop_size."
    )


def normalize(
  image: tf.Tensor, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD
) -> tf.Tensor:
  """`(image - mean) / std` per channel, for a float image in [0, 1].

  Raises:
    ValueError: the image's channel count differs from `len(mean)` or `len(std)`.
  """
  channels = image.shape[-1]
  if channels is not None and (len(mean) != channels or len(std) != channels):
    raise ValueError(
      f"normalize: the image has {channels} channels but mean and std have {len(mean)} and "
      f"{len(std)} values; pass one mean and one std per channel."
    )
  return (image - tf.constant(mean, tf.float32)) / tf.constant(std, tf.float32)


def _crop_window(image: tf.Tensor, resize_size: int, crop_size: int) -> tf.Tensor:
  """The side, in source pixels, of the crop that is `crop_size` after resizing to `resize_size`."""
  shape = tf.shape(image)
  shorter = tf.minimum(shape[0], shape[1])
  side = tf.round(tf.cast(crop_size * shorter, tf.float32) / resize_size)
  return tf.clip_by_value(tf.cast(side, tf.int32), 1, shorter)


def _crop_and_resize(image: tf.Tensor, top, left, side, crop_size: int) -> tf.Tensor:
  """Crops `[side, side]` at `(top, left)` and resizes it to `[crop_size, crop_size]`, in [0, 1]."""
  window = image[top : top + side, left : left + side]
  out = tf.image.resize(window, [crop_size, crop_size], method="bilinear", antialias=True)
  if not image.dtype.is_floating:
    out = out / float(image.dtype.max)
  out.set_shape([crop_size, crop_size, image.shape[-1]])
  return out


def train_preprocess(
  image: tf.Tensor,
  seed: tf.Tensor,
  *,
  resize_size: int = 256,
  crop_size: int = 224,
  mean: Sequence[float] = IMAGENET_MEAN,
  std: Sequence[float] = IMAGENET_STD,
) -> tf.Tensor:
  """Training augmentation: resize the shorter side, random square crop, random flip, normalise.

  Computed crop first: the square of side `crop_size * min(H, W) / resize_size` (rounded to a whole
  pixel) at a uniformly random position of the source image is resized to `crop_size`, the same
  geometry as resizing the whole image and cropping `crop_size` from it, for a fraction of the work
  (the resize runs on the crop only). Bilinear with antialiasing.

  Args:
    image: `[H, W, C]` uint8 image, or float in [0, 1].
    seed: `[2]` integer seed of the stateless random ops (the pipeline gives one per example).
    resize_size: length of the shorter side after resizing (256 in the papers).
    crop_size: side of the random square crop (224 in the papers).
    mean: per-channel mean of the image in [0, 1] (ImageNet's by default).
    std: per-channel standard deviation of the image in [0, 1] (ImageNet's by default).

  Returns:
    `[crop_size, crop_size, C]` float32.
  """
  _check_sizes("train_preprocess", resize_size, crop_size)
  top_seed, left_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
  side = _crop_window(image, resize_size, crop_size)
  shape = tf.shape(image)
  top = tf.random.stateless_uniform([], top_seed, 0, shape[0] - side + 1, dtype=tf.int32)
  left = tf.random.stateless_uniform([], left_seed, 0, shape[1] - side + 1, dtype=tf.int32)
  image = _crop_and_resize(image, top, left, side, crop_size)
  image = tf.image.stateless_random_flip_left_right(image, seed=flip_seed)
  return normalize(image, mean, std)


def eval_preprocess(
  image: tf.Tensor,
  seed: tf.Tensor | None = None,
  *,
  resize_size: int = 256,
  crop_size: int = 224,
  mean: Sequence[float] = IMAGENET_MEAN,
  std: Sequence[float] = IMAGENET_STD,
) -> tf.Tensor:
  """Evaluation preprocessing: resize the shorter side, central square crop, normalise.

  Computed crop first, as `train_preprocess`: the central square of side
  `crop_size * min(H, W) / resize_size` is resized to `crop_size`.

  Args:
    image: `[H, W, C]` uint8 image, or float in [0, 1].
    seed: unused (evaluation is deterministic); there so that both functions fit `make_pipeline`.
    resize_size: length of the shorter side after resizing (256 in the papers).
    crop_size: side of the central square crop (224 in the papers).
    mean: per-channel mean of the image in [0, 1] (ImageNet's by default).
    std: per-channel standard deviation of the image in [0, 1] (ImageNet's by default).

  Returns:
    `[crop_size, crop_size, C]` float32.
  """
  del seed
  _check_sizes("eval_preprocess", resize_size, crop_size)
  side = _crop_window(image, resize_size, crop_size)
  shape = tf.shape(image)
  image = _crop_and_resize(image, (shape[0] - side) // 2, (shape[1] - side) // 2, side, crop_size)
  return normalize(image, mean, std)
