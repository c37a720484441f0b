"""Images of many sizes padded into a few shapes, with the mask of each image's own pixels.

A jitted network compiles one program per input shape. Landmark retrieval feeds whole images of
their own sizes (Revaud et al. 2019, sec. 4.2: "the original images (unscaled and undistorted)"),
and cropped queries of any size, so every distinct size would compile a program of its own.
`pad_to_buckets` pads each image at the bottom and right to its **bucket**, each side rounded up
to a multiple of `multiple`, and returns one batch per bucket with a pixel mask (True on the
image's own pixels). Only the buckets compile; `jaxrank.models.feature_map_mask` turns the pixel
mask into the feature map's, and the poolings' `mask` pool over the image's own cells only (the
pooling is exact; a ResNet's edge cells also see the padding unless every layer is masked, as
`jaxrank.models.ResNet(x, mask)` does: its "Padded images").

`bucket_cost` says what a list of sizes costs under a `multiple`: the programs (distinct bucket
shapes, against the distinct sizes without buckets) and the fraction of the padded images' pixels
that are padding (computed for nothing). On sizes like Revisited Oxford's (5,000 gallery images
of 1024 x 768 and 768 x 1024, 70 queries cropped to boxes of 150 to 1024 pixels a side, drawn at
random here), the gallery needs no padding at any multiple that divides 256 and compiles 2
programs; the queries share few buckets until the multiple is coarse, and then pay for it in
padding (the whole list, then the queries alone):

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> queries = [tuple(s) for s in rng.integers(150, 1025, size=(70, 2))]
>>> sizes = [(1024, 768)] * 3500 + [(768, 1024)] * 1500 + queries
>>> for multiple in (32, 64, 128, 256):
...   whole, alone = bucket_cost(sizes, multiple=multiple), bucket_cost(queries, multiple=multiple)
...   print(multiple, whole.num_sizes, whole.num_shapes, f"{whole.padded_fraction:.4f}",
...         alone.num_shapes, f"{alone.padded_fraction:.3f}")
32 72 71 0.0003 69 0.051
64 72 65 0.0007 64 0.096
128 72 41 0.0014 41 0.177
256 72 16 0.0026 16 0.286

Programs are one per bucket shape when each bucket's batches share one size (the last batch of a
bucket padded with empty images, whose mask is all False); batches of every size would compile
one program per (shape, batch size).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from jaxrank._src import checks


@dataclasses.dataclass(frozen=True, eq=False)
class PaddedImages:
  """The images of one bucket, padded to its shape.

  Attributes:
    images: `[n, H, W, C]` the images at the top left of an `H x W` canvas, the rest `fill`.
    mask: boolean `[n, H, W]`, True on each image's own pixels.
    indices: int64 `[n]`, each image's position in the list given to `pad_to_buckets`.
    sizes: int64 `[n, 2]`, each image's own `(height, width)`.
  """

  images: np.ndarray
  mask: np.ndarray
  indices: np.ndarray
  sizes: np.ndarray


@dataclasses.dataclass(frozen=True)
class BucketCost:
  """What padding a list of sizes into buckets costs (`bucket_cost`).

  Attributes:
    num_images: how many sizes were given.
    num_sizes: the distinct sizes: the programs a network compiles without buckets.
    num_shapes: the distinct bucket shapes: the programs it compiles with them.
    padded_fraction: padding pixels over all pixels of the padded images, in `[0, 1)`.
  """

  num_images: int
  num_sizes: int
  num_shapes: int
  padded_fraction: float


def bucket_shape(height: int, width: int, *, multiple: int = 64) -> tuple[int, int]:
  """The bucket of an image of `height x width`: each side rounded up to a multiple of `multiple`.

  Args:
    height: the image's height in pixels, positive.
    width: the image's width in pixels, positive.
    multiple: the bucket's step in pixels, positive (a multiple of the network's stride, 32 for a
      ResNet, keeps every bucket's feature map whole).

  Returns:
    `(H, W)`, the padded image's shape.

  >>> bucket_shape(700, 1024, multiple=64)
  (704, 1024)
  """
  fn = "bucket_shape"
  checks.check_positive_int(fn, "multiple", multiple)
  checks.check_positive_int(fn, "height", height)
  checks.check_positive_int(fn, "width", width)
  return math.ceil(height / multiple) * multiple, math.ceil(width / multiple) * multiple


def _sizes(fn: str, sizes: Sequence[Sequence[int]]) -> np.ndarray:
  """`sizes` as int64 `[n, 2]`, checked: positive heights and widths."""
  array = np.asarray(sizes)
  if array.size == 0:
    return np.zeros((0, 2), np.int64)
  if array.ndim != 2 or array.shape[1] != 2 or not np.issubdtype(array.dtype, np.integer):
    raise ValueError(
      f"{fn}: sizes must be a list of (height, width) integer pairs, got an array of shape "
      f"{array.shape} and dtype {array.dtype}."
    )
  if array.min() < 1:
    raise ValueError(f"{fn}: every height and width must be positive, got {array.min()}.")
  return array.astype(np.int64)


def bucket_cost(sizes: Sequence[Sequence[int]], *, multiple: int = 64) -> BucketCost:
  """The programs and the padding of a list of image sizes padded into buckets (`bucket_shape`).

  See the module's docstring for figures on Revisited Oxford-like sizes.

  Args:
    sizes: `[n, 2]` the images' `(height, width)`, positive ints.
    multiple: the bucket's step in pixels, positive.

  Returns:
    A `BucketCost`; with no sizes, zeros.
  """
  fn = "bucket_cost"
  checks.check_positive_int(fn, "multiple", multiple)
  own = _sizes(fn, sizes)
  if not len(own):
    return BucketCost(0, 0, 0, 0.0)
  padded = -(-own // multiple) * multiple
  padded_pixels = int(np.prod(padded, axis=1).sum())
  return BucketCost(
    num_images=len(own),
    num_sizes=len(np.unique(own, axis=0)),
    num_shapes=len(np.unique(padded, axis=0)),
    padded_fraction=1.0 - int(np.prod(own, axis=1).sum()) / padded_pixels,
  )


def _check_images(fn: str, images: Sequence[np.ndarray]) -> list[np.ndarray]:
  """The images as numpy arrays `[h, w, C]`, checked: one channel count and one dtype."""
  arrays = [np.asarray(image) for image in images]
  for i, image in enumerate(arrays):
    if image.ndim != 3 or 0 in image.shape[:2]:
      raise ValueError(
        f"{fn}: images[{i}] must be [h, w, C] with h, w > 0, got shape {image.shape}; add a "
        "channel axis to a grey image (image[..., None])."
      )
    if image.shape[2] != arrays[0].shape[2] or image.dtype != arrays[0].dtype:
      raise ValueError(
        f"{fn}: images[{i}] is {image.shape[2]} channels of {image.dtype}, images[0] "
        f"{arrays[0].shape[2]} of {arrays[0].dtype}; give every image the same channels and "
        "dtype."
      )
  return arrays


def pad_to_buckets(
  images: Sequence[np.ndarray], *, multiple: int = 64, fill: float = 0
) -> list[PaddedImages]:
  """Images of any sizes, grouped by bucket (`bucket_shape`) and padded to it, with pixel masks.

  Each image goes to the top left of its bucket's canvas, the rest set to `fill`; the mask is
  True on its own pixels. Feed each bucket's images to the network (one program per bucket, see
  the module's docstring), take the feature map's mask with
  `jaxrank.models.feature_map_mask(bucket.mask)` and pool with it; `indices` puts the
  descriptors back in the input's order.

  Args:
    images: `n` arrays `[h, w, C]`, any heights and widths, one channel count and one dtype.
    multiple: the bucket's step in pixels, positive (a multiple of the network's stride).
    fill: the value of the padding.

  Returns:
    One `PaddedImages` per bucket shape, sorted by shape; within one, the input's order.

  >>> import numpy as np
  >>> buckets = pad_to_buckets([np.ones((40, 70, 3)), np.ones((60, 33, 3))], multiple=32)
  >>> [(b.images.shape, b.indices.tolist(), int(b.mask.sum())) for b in buckets]
  [((1, 64, 64, 3), [1], 1980), ((1, 64, 96, 3), [0], 2800)]
  """
  fn = "pad_to_buckets"
  checks.check_positive_int(fn, "multiple", multiple)
  arrays = _check_images(fn, images)
  if not arrays:
    return []
  sizes = np.array([a.shape[:2] for a in arrays], np.int64)
  shapes = -(-sizes // multiple) * multiple
  buckets = []
  for shape in np.unique(shapes, axis=0):
    indices = np.flatnonzero((shapes == shape).all(axis=1))
    canvas = np.full((len(indices), *shape, arrays[0].shape[2]), fill, arrays[0].dtype)
    mask = np.zeros((len(indices), *shape), bool)
    for row, i in enumerate(indices):
      h, w = sizes[i]
      canvas[row, :h, :w] = arrays[i]
      mask[row, :h, :w] = True
    buckets.append(PaddedImages(canvas, mask, indices.astype(np.int64), sizes[indices]))
  return buckets
