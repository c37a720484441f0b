"""Descriptors of whole images of any size at several scales, as landmark retrieval extracts them.

The Revisited Oxford/Paris protocol (Radenovic et al. 2018; Revaud et al. 2019, sec. 4) describes
each gallery image at its own size (the longer side capped, at 1024 pixels in the published
files) and each query cropped to its box, so no two images need share a shape. Most methods
describe each image at several scales combined by a generalised mean (Radenovic et al. 2018,
cirtorch's `extract_ms`, scales 1, 1/sqrt(2), 1/2: the default here); **Revaud et al. 2019 use a
single scale**, the original image (sec. 4.2: "we tried using multiple scales at test time, but
did not observe any significant improvement"; sec. 4.4), so reproduce their tables with
`scales=(1.0,)`. `extract_descriptors` does either with few compiled programs: every (image,
scale) is resized on the host, padded at the bottom and right to its **bucket** (each side
rounded up to a multiple of `multiple`, the rule of `jaxrank.data.bucket_shape`) with a pixel
mask, and each bucket runs in batches of one size, so a jitted `embed_fn` compiles one program
per bucket shape.

The descriptors are the unpadded images' when `embed_fn` honours the mask: a pooling of the
pixels, or a `jaxrank.models.ResNet` called with it in inference mode (which masks every layer:
its "Padded images"). A network that only pools over the mask gives descriptors close to the
unpadded images', not equal (its edge cells see the padding).

This module imports only numpy and jax (no Flax, no TensorFlow): the images come in as numpy
arrays (`jaxrank.data.read_query_image`, `read_gallery_image`), and `embed_fn` is the caller's.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jaxrank._src import checks

DEFAULT_SCALES = (1.0, 2**-0.5, 0.5)
"""The scales of the landmark literature's multi-scale descriptors (cirtorch, dirtorch)."""

DEFAULT_MAX_SIDE = 1024
"""The longer side an image is capped at before scaling: the published images' size."""

_logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=256)  # Galleries repeat a few sizes; the arrays are never written.
def _taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
  """The linear (triangle) resampling of an axis of `n_in` pixels to `n_out`, widened when
  shrinking: each output pixel's `K` input pixels, int `[n_out, K]`, and weights, float32
  `[n_out, K]` (zero on the taps past the edge), summing to 1."""
  scale = n_out / n_in
  kernel_scale = max(1.0 / scale, 1.0)  # Antialiasing: the kernel spans 1 / scale pixels.
  centres = (np.arange(n_out) + 0.5) / scale - 0.5  # Half-pixel centres, in input pixels.
  weights = np.maximum(0.0, 1.0 - np.abs(centres[:, None] - np.arange(n_in)) / kernel_scale)
  weights /= weights.sum(axis=1, keepdims=True)
  nonzero = weights > 0
  first = np.argmax(nonzero, axis=1)
  count = int(nonzero.sum(axis=1).max())
  index = first[:, None] + np.arange(count)
  inside = index < n_in
  index = np.minimum(index, n_in - 1)
  taps = np.where(inside, np.take_along_axis(weights, index, axis=1), 0.0).astype(np.float32)
  index.flags.writeable = taps.flags.writeable = False  # Cached: shared by every caller.
  return index, taps


def _resample(array: np.ndarray, size: int, axis: int) -> np.ndarray:
  """`array` resampled along `axis` (0 or 1) to `size` pixels (`_taps`), float32."""
  index, taps = _taps(array.shape[axis], size)
  shape = (-1, 1, 1) if axis == 0 else (1, -1, 1)
  out_shape = list(array.shape)
  out_shape[axis] = size
  out = np.zeros(out_shape, np.float32)
  for k in range(index.shape[1]):
    out += taps[:, k].reshape(shape) * np.take(array, index[:, k], axis=axis)
  return out


def resize_image(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
  r"""An image resized by bilinear interpolation with antialiasing, on the host (numpy).

  Each axis is resampled by the triangle kernel at half-pixel centres (output pixel `i` samples
  the input at `(i + 1/2) n / m - 1/2`); when an axis shrinks (`m < n`) the kernel is widened
  by `n / m`, so that every input pixel contributes (antialiasing, as Pillow's bilinear filter
  and TensorFlow's `resize(..., antialias=True)`); the weights of each output pixel sum to 1.
  This is `jax.image.resize(image, (m_h, m_w, C), "linear", antialias=True)`, computed in
  numpy (each output pixel a weighted sum of its few input pixels, in float32) so that images of
  many sizes compile nothing.

  Args:
    image: `[h, w, C]` an image of any real dtype.
    size: `(height, width)`, the output's size, positive ints.

  Returns:
    `[height, width, C]` float32 (values not rounded nor clipped); the image itself as float32
    when `size` is its size.

  >>> import numpy as np
  >>> small = resize_image(np.arange(4.0).reshape(1, 4, 1), (1, 2))  # Each pixel from 3 of 4.
  >>> small.dtype, small[0, :, 0].astype(float).round(4).tolist()
  (dtype('float32'), [0.7143, 2.2857])
  """
  fn = "resize_image"
  array = np.asarray(image)
  _check_image(fn, "image", array)
  if len(size) != 2:
    raise ValueError(f"{fn}: size must be (height, width), got {size!r}.")
  height, width = size
  checks.check_positive_int(fn, "height", height)
  checks.check_positive_int(fn, "width", width)
  array = array.astype(np.float32)
  h, w, c = array.shape
  if height != h:  # Rows first, then columns, as jax.image.resize contracts them.
    array = _resample(array, height, axis=0)
  if width != w:
    array = _resample(array, width, axis=1)
  return array


def _check_image(fn: str, name: str, image: np.ndarray) -> None:
  if image.ndim != 3 or 0 in image.shape:
    raise ValueError(
      f"{fn}: {name} must be [h, w, C] with h, w, C > 0, got shape {image.shape}; add a channel "
      "axis to a grey image (image[..., None])."
    )
  if not (np.issubdtype(image.dtype, np.integer) or np.issubdtype(image.dtype, np.floating)):
    raise TypeError(f"{fn}: {name} must hold real numbers, got dtype {image.dtype}.")


def _check_images(fn: str, images: Any) -> list[np.ndarray]:
  """The images as numpy `[h, w, C]` arrays, checked: a non-empty sequence, one channel count."""
  if isinstance(images, np.ndarray) or not isinstance(images, Sequence):
    raise ValueError(
      f"{fn}: images must be a list of [h, w, C] arrays (of any sizes), got "
      f"{type(images).__name__}; pass list(batch) for a batch of one size."
    )
  if not images:
    raise ValueError(f"{fn}: images is empty; give at least one [h, w, C] image.")
  arrays = [np.asarray(image) for image in images]
  for i, image in enumerate(arrays):
    _check_image(fn, f"images[{i}]", image)
    if image.shape[2] != arrays[0].shape[2]:
      raise ValueError(
        f"{fn}: images[{i}] has {image.shape[2]} channels and images[0] {arrays[0].shape[2]}; "
        "give every image the same channels."
      )
  return arrays


def _check_scales(fn: str, scales: Any) -> tuple[float, ...]:
  try:
    values = list(scales)
  except TypeError:
    values = [scales]
  if not values:
    raise ValueError(f"{fn}: scales is empty; give at least one positive scale, e.g. (1.0,).")
  out = []
  for value in values:
    scale = checks.check_real(fn, "every scale", value, above=0, static=True)
    if not math.isfinite(scale):
      raise ValueError(f"{fn}: every scale must be finite and positive, got {scale}.")
    out.append(scale)
  return tuple(out)


def _capped_size(height: int, width: int, max_side: int | None) -> tuple[int, int]:
  """The size with the longer side at most `max_side` (never enlarged), the aspect ratio kept."""
  if max_side is None or max(height, width) <= max_side:
    return height, width
  ratio = max_side / max(height, width)
  return max(1, round(height * ratio)), max(1, round(width * ratio))


def _scaled_size(height: int, width: int, scale: float) -> tuple[int, int]:
  """`(floor(h s), floor(w s))`, at least 1: torch's `interpolate(scale_factor=s)` sizes."""
  return max(1, math.floor(height * scale)), max(1, math.floor(width * scale))


def _combine(descriptors: np.ndarray, power: float) -> np.ndarray:
  """`[N, S, D]` descriptors to `[N, D]`: unit rows, signed generalised mean, unit rows."""
  values = descriptors.astype(np.float64)
  tiny = np.finfo(np.float64).tiny
  values = values / np.maximum(np.linalg.norm(values, axis=-1, keepdims=True), tiny)
  mean = np.mean(np.sign(values) * np.abs(values) ** power, axis=1)
  combined = np.sign(mean) * np.abs(mean) ** (1.0 / power)
  combined = combined / np.maximum(np.linalg.norm(combined, axis=-1, keepdims=True), tiny)
  return combined.astype(np.float32)


_Entry = tuple[int, int, tuple[int, int]]  # (image, scale, its resized (height, width))


def _plan(
  capped: Sequence[tuple[int, int]], scales: Sequence[float], multiple: int
) -> dict[tuple[int, int], list[_Entry]]:
  """Every (image, scale)'s size and bucket shape, before any pixel is resized."""
  buckets: dict[tuple[int, int], list[_Entry]] = {}
  for i, (height, width) in enumerate(capped):
    for s, scale in enumerate(scales):
      size = _scaled_size(height, width, scale)
      shape = (-(-size[0] // multiple) * multiple, -(-size[1] // multiple) * multiple)
      buckets.setdefault(shape, []).append((i, s, size))
  return buckets


def _run_buckets(fn, embed_fn, arrays, capped, buckets, batch_size):
  """`embed_fn` on each bucket in batches of `batch_size`: `(outputs, own, bucket, fed pixels)`,
  `outputs` a list of `(entries, [batch_size, D] output)`."""
  channels = arrays[0].shape[2]
  outputs = []
  fed_pixels = own_pixels = bucket_pixels = 0
  for shape, entries in sorted(buckets.items()):
    for start in range(0, len(entries), batch_size):
      batch = entries[start : start + batch_size]
      canvas = np.zeros((batch_size, *shape, channels), np.float32)
      mask = np.zeros((batch_size, *shape), bool)
      for row, (i, _, size) in enumerate(batch):
        # Nothing kept between batches (a bucket holds some scale of every image): an image
        # above max_side is capped again for each of its scales.
        source = arrays[i]
        if capped[i] != source.shape[:2]:
          source = resize_image(source, capped[i])
        canvas[row, : size[0], : size[1]] = resize_image(source, size)
        mask[row, : size[0], : size[1]] = True
        own_pixels += size[0] * size[1]
      bucket_pixels += len(batch) * shape[0] * shape[1]
      fed_pixels += batch_size * shape[0] * shape[1]
      out = embed_fn(canvas, mask)
      if len(np.shape(out)) != 2 or np.shape(out)[0] != batch_size:
        raise ValueError(
          f"{fn}: embed_fn must return [n, D] for n = {batch_size} images, got shape "
          f"{np.shape(out)} for images of shape {canvas.shape}."
        )
      outputs.append((batch, out))
  return outputs, own_pixels, bucket_pixels, fed_pixels


def extract_descriptors(
  embed_fn: Callable[[np.ndarray, np.ndarray], Any],
  images: Sequence[np.ndarray],
  *,
  scales: Sequence[float] = DEFAULT_SCALES,
  power: float = 3.0,
  max_side: int | None = DEFAULT_MAX_SIDE,
  multiple: int = 64,
  batch_size: int = 8,
) -> np.ndarray:
  r"""Multi-scale descriptors of images of any sizes, as the landmark retrieval papers extract them.

  Signature (stable): `extract_descriptors(embed_fn, images, *, scales=(1.0, 2 ** -0.5, 0.5),
  power=3.0, max_side=1024, multiple=64, batch_size=8) -> np.ndarray [N, D]`. The default
  scales are Radenovic et al.'s; Revaud et al. 2019's single scale is `scales=(1.0,)` (the
  module's docstring).

  For each image `x` (its longer side first capped at `max_side`) and each scale `s`, the image
  is resized to `floor(h s) x floor(w s)` (at least 1 pixel; the sizes of torch's
  `interpolate(scale_factor=s)`, as cirtorch's `extract_ms`; scale 1 is the image itself) by
  `resize_image` (bilinear with antialiasing), and `embed_fn` gives its descriptor `d_s`. The
  scales are combined by the generalised mean of the unit descriptors (Radenovic et al. 2018):

  .. math::
    v_s = \frac{d_s}{\lVert d_s \rVert_2}, \quad
    m = \frac{1}{S} \sum_s \operatorname{sgn}(v_s) |v_s|^p, \quad
    v = \frac{\operatorname{sgn}(m) |m|^{1/p}}{\lVert \operatorname{sgn}(m) |m|^{1/p} \rVert_2}

  **Negative components.** A non-integer power of a negative number is not real; the power is
  taken **signed** (`sgn(x) |x|^p`, odd), as Revaud et al.'s released code does (dirtorch's
  `sympow`). For non-negative descriptors (a GeM or average pooling's features through no
  linear layer) it is cirtorch's `(mean_s v_s^p)^(1/p)` exactly; `p = 1` is the mean of the
  unit descriptors whatever their signs (cirtorch's choice for descriptors after a learned
  whitening, and for poolings other than GeM). `power=3.0` by default, the default `gemp=3` of
  dirtorch's multi-scale pooling; cirtorch uses the trained GeM pooling's `p`, e.g.
  `float(model.backbone.pool.p[...])`. A descriptor of zeros stays zero (no NaN). With one
  scale the combination is the unit descriptor itself, whatever `power`.

  **Buckets, batches and programs.** Each (image, scale) goes to the top left of its bucket's
  canvas (`jaxrank.data.bucket_shape(h', w', multiple=multiple)` of its scaled size), the
  rest 0, with a boolean pixel mask True on its own pixels. The (image, scale) pairs of one
  bucket (different images and scales share buckets) run in batches of exactly `batch_size`,
  the last one filled with empty images (all 0, mask all False; their outputs are dropped), so
  `embed_fn` sees one input shape per bucket: a jitted `embed_fn` compiles one program per
  distinct bucket shape, and no other. Batches are dispatched in turn without waiting for
  their results, so that the host resizes the next batch while the device runs (JAX's
  asynchronous dispatch). `extract_descriptors` logs, at INFO on the `logging` logger of this
  module, the number of programs (distinct bucket shapes, one input shape each) and the
  fraction of the pixels fed to `embed_fn` that are padding (the buckets' and the empty
  images'); `jaxrank.data.bucket_cost` gives the buckets' part for a list of sizes.

  **What padding changes.** Nothing, to rounding, when `embed_fn` honours the mask: a masked
  pooling of the pixels, or an `EmbeddingModel` whose `ResNet` takes `mask=` in inference mode
  (every layer masked: `jaxrank.models.ResNet`, "Padded images"). A network that only pools
  over the mask (its convolutions seeing the padding) gives descriptors close to the unpadded
  images', not equal; the same ResNet's docstring measures how close. `multiple=1` pads no
  image (each distinct size its own bucket), at the price of one program per distinct size.

  Args:
    embed_fn: `embed_fn(images, mask) -> [n, D]`, `images` float32 numpy `[n, H, W, C]` (the
      pixel values as given, not normalised: normalise inside, e.g. ImageNet's mean and
      standard deviation; a `ResNet` given the mask sets the padding to 0 itself), `mask` boolean
      numpy `[n, H, W]`, True on each image's own pixels; any array (numpy or JAX) of `n` rows
      back. For example a jitted `lambda x, m: model(normalise(x), mask=m)` of an
      `EmbeddingModel` whose `ResNet` pools with `GeMPool`, in inference mode (`model.eval()`).
    images: `N >= 1` arrays `[h, w, C]` of any sizes and one channel count (uint8 or float:
      converted to float32, values unchanged), in memory (a list; call again for more images:
      the buckets already compiled are reused).
    scales: the scales `s > 0`, finite (values above 1 enlarge the image).
    power: the exponent `p > 0` of the generalised mean over the scales.
    max_side: cap on each image's longer side before scaling (aspect ratio kept, sizes rounded to
      the nearest pixel, never enlarged: `jaxrank.data.read_gallery_image`'s rule), a positive
      int, or None for no cap.
    multiple: the buckets' step in pixels, a positive int: larger, fewer programs and more
      padding (`jaxrank.data.bucket_cost`); 1 pads nothing.
    batch_size: the images of each call of `embed_fn`, a positive int.

  Returns:
    `[N, D]` float32 descriptors of unit L2 norm (zero rows for descriptors of zeros), in the
    order of `images`.

  Raises:
    ValueError: `images` not a non-empty list of `[h, w, C]` arrays with one channel count,
      `scales` empty or not all finite and positive, `power` not positive, `embed_fn`'s output
      not `[batch_size, D]`.
    TypeError: `embed_fn` not callable, a count (`max_side`, `multiple`, `batch_size`) not an int.

  >>> import numpy as np
  >>> def mean_colour(x, mask):  # A masked average pooling of the pixels.
  ...   m = mask[..., None]
  ...   return (x * m).sum(axis=(1, 2)) / np.maximum(m.sum(axis=(1, 2)), 1)
  >>> rng = np.random.default_rng(0)
  >>> images = [rng.random((50, 70, 3)), rng.random((90, 40, 3)), rng.random((64, 64, 3))]
  >>> descriptors = extract_descriptors(mean_colour, images, multiple=32, batch_size=2)
  >>> descriptors.shape, np.linalg.norm(descriptors, axis=1).round(4).tolist()
  ((3, 3), [1.0, 1.0, 1.0])
  """
  fn = "extract_descriptors"
  checks.check_callable(fn, "embed_fn", embed_fn, hint="Pass embed_fn(images, mask) -> [n, D].")
  arrays = _check_images(fn, images)
  scale_values = _check_scales(fn, scales)
  p = checks.check_real(fn, "power", power, above=0, static=True)
  if not math.isfinite(p):
    raise ValueError(f"{fn}: power must be finite and positive, got {p}.")
  checks.check_positive_int(fn, "max_side", max_side, allow_none=True)
  checks.check_positive_int(fn, "multiple", multiple)
  checks.check_positive_int(fn, "batch_size", batch_size)

  capped = [_capped_size(a.shape[0], a.shape[1], max_side) for a in arrays]
  buckets = _plan(capped, scale_values, multiple)
  outputs, own_pixels, bucket_pixels, fed_pixels = _run_buckets(
    fn, embed_fn, arrays, capped, buckets, batch_size
  )
  dim = np.shape(outputs[0][1])[1]
  descriptors = np.zeros((len(arrays), len(scale_values), dim), np.float32)
  for batch, out in outputs:
    values = np.asarray(jax.device_get(out), np.float32)
    if values.shape[1] != dim:
      raise ValueError(
        f"{fn}: embed_fn must return one D for every batch, got {dim} and {values.shape[1]}."
      )
    for row, (i, s, _) in enumerate(batch):
      descriptors[i, s] = values[row]
  _logger.info(
    "%s: %d images at %d scales in %d bucket shapes (%d programs of %d images); padding is "
    "%.4f of the pixels fed (%.4f in the buckets, the rest in the last batches' empty images)",
    fn,
    len(arrays),
    len(scale_values),
    len(buckets),
    len(buckets),
    batch_size,
    1.0 - own_pixels / fed_pixels,
    1.0 - own_pixels / bucket_pixels,
  )
  return _combine(descriptors, p)
