"""Revisited Oxford and Paris from the files as published, in a directory the user downloaded.

The layout of Radenovic et al. 2018 ("Revisiting Oxford and Paris", the `revisitop` code and
files), which Revaud et al. 2019 (sec. 4.1) evaluate on: one directory per data set holding the
ground truth `gnd_<name>.pkl` and the images `jpg/<image name>.jpg`::

  roxford5k/gnd_roxford5k.pkl       (or rparis6k/gnd_rparis6k.pkl, oxford5k/..., paris6k/...)
  roxford5k/jpg/all_souls_000000.jpg ...

The pickle is a dict: `imlist`, the gallery's image names (without `.jpg`); `qimlist`, the
queries' image names; `gnd`, one dict per query: `easy`, `hard` and `junk` (Revisited) or `ok`
and `junk` (the original Oxford 5k and Paris 6k), lists of indices into `imlist`, and `bbx`, the
query's box `[x1, y1, x2, y2]` in pixels of its image. `load_revisited` reads it into a
`RevisitedData`, whose `ground_truth` goes unchanged to `jaxrank.evaluate_revisited`; the gallery
descriptors must be in `gallery_paths`' order and the queries' in `query_paths`'.

The protocol crops each query to its box and feeds the images at their own size (at most 1024
pixels a side in these data sets): `read_query_image` and `read_gallery_image`. The 1M
distractors (`revisitop1m.txt`, one image path per line under the distractor set's `jpg/`) extend
the gallery with `with_distractors`: they come after the data set's images, so the ground truth's
indices stay valid.

The ground truth is read with `pickle`, which runs whatever code a pickle holds: load only files
you trust (the published ground truth you downloaded yourself). jaxrank never downloads; every
missing or malformed file is an error that names the file and what to do.

>>> import jaxrank.data as jd
>>> data = jd.load_revisited("/data/revisitop/roxford5k", "roxford5k")  # doctest: +SKIP
>>> len(data.gallery_paths), len(data.query_paths)  # doctest: +SKIP
(4993, 70)
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from jaxrank._src import checks
from jaxrank._src import revisited

NAMES = ("roxford5k", "rparis6k", "oxford5k", "paris6k")
"""The data sets of the published layout, each with its `gnd_<name>.pkl`."""

DISTRACTORS_LIST = "revisitop1m.txt"
"""The list of the 1M distractors' image paths, relative to the distractor set's `jpg/`."""

DEFAULT_MAX_SIDE = 1024
"""The longer side of an image read by default: the size of the published images."""

_GROUND_TRUTH_KEYS = {"revisited": ("easy", "hard", "junk"), "original": ("ok", "junk")}


@dataclasses.dataclass(frozen=True, eq=False)
class RevisitedData:
  """A landmark retrieval test set as the protocol defines it (`load_revisited`).

  Attributes:
    name: the data set, one of `NAMES`.
    gallery_paths: str `[N]` the gallery images' paths, in the order of the ground truth's
      indices (then the distractors, if any).
    query_paths: str `[Q]` the query images' paths.
    query_boxes: float64 `[Q, 4]` each query's box `(x1, y1, x2, y2)` in pixels of its image.
    ground_truth: the pickle's `gnd` list, unchanged: one dict per query, for
      `jaxrank.evaluate_revisited`.
    num_distractors: how many of the last gallery paths are distractors (`with_distractors`).
  """

  name: str
  gallery_paths: np.ndarray
  query_paths: np.ndarray
  query_boxes: np.ndarray
  ground_truth: Sequence[Mapping[str, Any]]
  num_distractors: int = 0


def _read_pickle(fn: str, path: str, name: str) -> Mapping[str, Any]:
  """The ground truth dict of `path`, or an error naming the file and the fix."""
  if not os.path.isfile(path):
    raise FileNotFoundError(
      f"{fn}: no ground truth file {path!r}. Download gnd_{name}.pkl (the Revisited Oxford/Paris "
      "files of Radenovic et al., revisitop) into that directory, beside its jpg/ folder; "
      "jaxrank never downloads."
    )
  try:
    with open(path, "rb") as f:
      content = pickle.load(f)
  except Exception as e:  # Any failure to unpickle: truncated, not a pickle, an old protocol.
    raise ValueError(
      f"{fn}: {path!r} is not a readable pickle ({type(e).__name__}: {e}); download "
      f"gnd_{name}.pkl again."
    ) from e
  if not isinstance(content, Mapping):
    raise ValueError(
      f"{fn}: {path!r} holds a {type(content).__name__}, not the dict of imlist, qimlist and "
      f"gnd; is it gnd_{name}.pkl as published?"
    )
  missing = [key for key in ("imlist", "qimlist", "gnd") if key not in content]
  if missing:
    raise ValueError(
      f"{fn}: {path!r} lacks the keys {missing} (it has {sorted(map(str, content))}); the "
      "published file holds imlist, qimlist and gnd."
    )
  return content


def _check_query(fn: str, path: str, i: int, entry: Any, num_items: int) -> np.ndarray:
  """Query `i`'s ground truth checked (keys, indices in the gallery); its box `[4]`."""
  if not isinstance(entry, Mapping):
    raise ValueError(f"{fn}: {path!r}: gnd[{i}] is a {type(entry).__name__}, not a dict.")
  kind = "revisited" if "easy" in entry or "hard" in entry else "original"
  missing = [key for key in (*_GROUND_TRUTH_KEYS[kind], "bbx") if key not in entry]
  if missing:
    raise ValueError(
      f"{fn}: {path!r}: gnd[{i}] lacks {missing}; each query needs easy, hard, junk (or ok, "
      "junk) and bbx."
    )
  for key in _GROUND_TRUTH_KEYS[kind]:
    given = np.asarray(entry[key])
    index = revisited.integer_indices(given)  # Whole floats too, as revisitop accepts them.
    if given.size and (index is None or index.min() < 0 or index.max() >= num_items):
      raise ValueError(
        f"{fn}: {path!r}: gnd[{i}][{key!r}] must hold integer indices (or floats with whole "
        f"values) into imlist's {num_items} images, got {given.ravel()[:5].tolist()}..."
      )
  return _box(fn, path, i, entry["bbx"])


def _box(fn: str, path: str, i: int, value: Any) -> np.ndarray:
  """Query `i`'s box as float64 `[4]`, checked: finite, `x1 < x2` and `y1 < y2`."""
  try:
    box = np.asarray(value, np.float64).ravel()
  except (TypeError, ValueError):
    box = np.zeros(0)
  if box.shape != (4,) or not (np.isfinite(box).all() and box[0] < box[2] and box[1] < box[3]):
    raise ValueError(
      f"{fn}: {path!r}: gnd[{i}]['bbx'] must be a box [x1, y1, x2, y2] with x1 < x2 and "
      f"y1 < y2, got {value!r}."
    )
  return box


def _names(fn: str, path: str, content: Mapping[str, Any], key: str) -> list[str]:
  """The image names under `key`, checked to be strings."""
  names = content[key]
  if not isinstance(names, (Sequence, np.ndarray)) or isinstance(names, str):
    raise ValueError(f"{fn}: {path!r}: {key} must be a list of image names (str).")
  if not all(isinstance(n, str) for n in names):
    raise ValueError(f"{fn}: {path!r}: {key} must be a list of image names (str).")
  return list(names)


def _image_paths(fn: str, directory: str, relative: Sequence[str]) -> np.ndarray:
  """`directory/<relative>` for each relative path, each checked to exist."""
  paths = [os.path.join(directory, r) for r in relative]
  absent = [p for p in paths if not os.path.isfile(p)]
  if absent:
    raise FileNotFoundError(
      f"{fn}: {len(absent)} of the {len(paths)} images listed are not in {directory!r} (first: "
      f"{absent[:3]}); extract the data set's image archives into that folder."
    )
  return np.asarray(paths, dtype=str)


def load_revisited(root: str | os.PathLike, name: str) -> RevisitedData:
  """Revisited Oxford/Paris (or the original Oxford 5k/Paris 6k) from the published files.

  Reads `root/gnd_<name>.pkl` (see the module's docstring: a trusted file, read by `pickle`),
  checks it (the keys, every query's lists of indices and box) and that every listed image is
  in `root/jpg/`. The images are not decoded here (`read_query_image`, `read_gallery_image`).

  Args:
    root: the data set's directory, holding `gnd_<name>.pkl` and `jpg/`.
    name: `"roxford5k"`, `"rparis6k"`, `"oxford5k"` or `"paris6k"`.

  Returns:
    A `RevisitedData`, without distractors.

  Raises:
    FileNotFoundError: no ground truth file, or images it lists are missing from `jpg/`.
    ValueError: an unknown `name`; a file that is no pickle, or without `imlist`, `qimlist` or
      `gnd`; a query without its lists or its box, indices outside the gallery, a box with
      `x2 <= x1` or `y2 <= y1`.
  """
  fn = "load_revisited"
  if name not in NAMES:
    raise ValueError(f"{fn}: name must be one of {NAMES}, got {name!r}.")
  root = os.fspath(root)
  path = os.path.join(root, f"gnd_{name}.pkl")
  content = _read_pickle(fn, path, name)
  gallery, queries = _names(fn, path, content, "imlist"), _names(fn, path, content, "qimlist")
  ground_truth = content["gnd"]
  if not isinstance(ground_truth, Sequence) or isinstance(ground_truth, str):
    raise ValueError(f"{fn}: {path!r}: gnd must be a list of one dict per query.")
  if len(ground_truth) != len(queries):
    raise ValueError(
      f"{fn}: {path!r}: gnd has {len(ground_truth)} entries for the {len(queries)} queries of "
      "qimlist; it needs one dict per query."
    )
  boxes = [_check_query(fn, path, i, q, len(gallery)) for i, q in enumerate(ground_truth)]
  images = os.path.join(root, "jpg")
  return RevisitedData(
    name=name,
    gallery_paths=_image_paths(fn, images, [n + ".jpg" for n in gallery]),
    query_paths=_image_paths(fn, images, [n + ".jpg" for n in queries]),
    query_boxes=np.asarray(boxes, np.float64).reshape(-1, 4),
    ground_truth=ground_truth,
  )


def with_distractors(data: RevisitedData, root: str | os.PathLike) -> RevisitedData:
  """`data` with the 1M distractors (R1M) appended to its gallery.

  Reads `root/revisitop1m.txt`, one image path per line relative to `root/jpg/` (`.jpg` added
  where a line has no extension; blank lines skipped), and checks that every image exists (a
  million file checks: seconds on a local disk). The distractors come after the data set's
  images, so `ground_truth`'s indices keep their meaning: every distractor is a negative of
  every query.

  Args:
    data: a `RevisitedData` from `load_revisited`.
    root: the distractor set's directory, holding `revisitop1m.txt` and `jpg/`.

  Returns:
    A `RevisitedData` whose `gallery_paths` end with the distractors, `num_distractors` counting
    them (added to any already there).

  Raises:
    FileNotFoundError: no `revisitop1m.txt` in `root`, or images it lists are missing.
    ValueError: a list without any path.
  """
  fn = "with_distractors"
  root = os.fspath(root)
  path = os.path.join(root, DISTRACTORS_LIST)
  if not os.path.isfile(path):
    raise FileNotFoundError(
      f"{fn}: no distractor list {path!r}. Download {DISTRACTORS_LIST} and the revisitop1m "
      "image archives (Radenovic et al., revisitop) and extract the images into "
      f"{os.path.join(root, 'jpg')!r}; jaxrank never downloads."
    )
  with open(path, encoding="utf-8") as f:
    relative = [line.strip() for line in f if line.strip()]
  if not relative:
    raise ValueError(f"{fn}: {path!r} lists no image; it should hold one path per line.")
  relative = [r if os.path.splitext(r)[1] else r + ".jpg" for r in relative]
  distractors = _image_paths(fn, os.path.join(root, "jpg"), relative)
  return dataclasses.replace(
    data,
    gallery_paths=np.concatenate([data.gallery_paths, distractors]),
    num_distractors=data.num_distractors + len(distractors),
  )


def _decode(fn: str, path: str) -> tf.Tensor:
  """The image at `path`, uint8 `[h, w, 3]` (a JPEG as PIL decodes it), or an error naming the
  file."""
  try:
    encoded = tf.io.read_file(path)
    if bool(tf.io.is_jpeg(encoded)):
      # libjpeg's integer DCT: the bits PIL gives (`tf.io.decode_image` uses the fast DCT, one
      # grey level off on average, up to 7, in most pixels).
      return tf.io.decode_jpeg(encoded, channels=3, dct_method="INTEGER_ACCURATE")
    return tf.io.decode_image(encoded, channels=3, expand_animations=False)
  except tf.errors.OpError as e:
    raise ValueError(
      f"{fn}: cannot read {path!r} as an image ({e.message}); replace the file with the "
      "published one."
    ) from e


def read_image(path: str | os.PathLike) -> np.ndarray:
  """The image file at `path` as uint8 `[h, w, 3]` RGB, a JPEG decoded bit for bit as PIL does.

  The reference codes of landmark retrieval (revisitop, cirtorch, deep-image-retrieval) read
  images with PIL (`Image.open(f).convert("RGB")`); a JPEG is decoded here by libjpeg's
  integer DCT (`tf.io.decode_jpeg(..., dct_method="INTEGER_ACCURATE")`), which gives PIL's
  pixels exactly, where `tf.io.decode_image` differs by about one grey level in most pixels.
  PNG, GIF (the first frame) and BMP are decoded by `tf.io.decode_image` (lossless: the same
  pixels as PIL). Grey images are repeated on 3 channels, an alpha channel dropped.

  Args:
    path: an image file.

  Returns:
    uint8 `[h, w, 3]`.

  Raises:
    ValueError: a file that does not decode.
  """
  return _decode("read_image", os.fspath(path)).numpy()


def _thumbnail_size(height: int, width: int, side: float) -> tuple[int, int]:
  """`(h, w)` of PIL's `Image.thumbnail((side, side))` on a `width x height` image: unchanged
  where both sides are at most `floor(side)`; else the longer side `floor(side)` and the other
  the integer next to the exact one (below or above) whose aspect ratio is the closer, at least
  1 (Pillow 13's rule, that of Pillow 7 on)."""
  limit = math.floor(side)
  if limit >= width and limit >= height:
    return height, width
  aspect = width / height
  if limit / limit >= aspect:  # Taller than wide: the height is the limit.
    candidates = (math.floor(limit * aspect), math.ceil(limit * aspect))
    new_width = min(candidates, key=lambda n: abs(aspect - n / limit))
    return limit, max(new_width, 1)
  candidates = (math.floor(limit / aspect), math.ceil(limit / aspect))
  new_height = min(candidates, key=lambda n: 0 if n == 0 else abs(aspect - limit / n))
  return max(new_height, 1), limit


def _resized(image: tf.Tensor, size: tuple[int, int]) -> np.ndarray:
  """`image` at `size` `(h, w)` (bilinear with antialiasing), as uint8."""
  if size == (int(image.shape[0]), int(image.shape[1])):
    return image.numpy()
  resized = tf.image.resize(image, size, method="bilinear", antialias=True)
  return tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8).numpy()


def _index(fn: str, i: int, count: int, what: str) -> int:
  checks.check_int_at_least(fn, "i", i, 0)
  if i >= count:
    raise ValueError(f"{fn}: i = {i}, but the data set has {count} {what}; give i < {count}.")
  return int(i)


def read_query_image(
  data: RevisitedData, i: int, *, max_side: int | None = DEFAULT_MAX_SIDE
) -> np.ndarray:
  """Query `i`'s image cropped to its box and scaled as cirtorch scales it: the protocol's query.

  The box `(x1, y1, x2, y2)` is rounded to whole pixels (as PIL's `Image.crop`, which the
  revisitop example and cirtorch crop with) and **clamped to the image**: where PIL would fill
  the part of a box outside the image with black, the crop here stops at the image's edge. A box
  that keeps no pixel once clamped is an error. The crop is then scaled **by the full image's
  scale**, as cirtorch's `ImagesFromList` with `bbxs` does
  (filipradenovic/cnnimageretrieval-pytorch, `cirtorch/datasets/genericdataset.py`): its longer
  side becomes `max_side * (crop's longer side) / (image's longer side)`, by PIL's
  `Image.thumbnail` rounding, so that the crop keeps the scale the gallery
  images are read at; never enlarged. A 1200 x 900 image (width x height) and a 1050 x 800 box
  at `max_side` 1024 give 896 x 683. (revisitop's own `example_process_images.py` crops and
  does not resize; the published images are at most 1024 pixels a side, so at the default the
  crop is kept as it is.) Resampling is bilinear with antialiasing, where cirtorch uses PIL's
  Lanczos (`Image.ANTIALIAS`): the sizes are the same, the pixels close, not equal.

  Args:
    data: a `RevisitedData` from `load_revisited`.
    i: the query's index, in `[0, Q)`.
    max_side: the longer side in pixels the whole image would be read at, a positive int, or
      `None` for the crop as it is.

  Returns:
    uint8 `[h, w, 3]`, RGB (a JPEG decoded as PIL decodes it: `read_image`).

  Raises:
    ValueError: `i` out of range; a file that does not decode; a box outside its image.
  """
  fn = "read_query_image"
  checks.check_positive_int(fn, "max_side", max_side, allow_none=True)
  i = _index(fn, i, len(data.query_paths), "queries")
  path = str(data.query_paths[i])
  image = _decode(fn, path)
  height, width = int(image.shape[0]), int(image.shape[1])
  x1, y1, x2, y2 = np.round(data.query_boxes[i]).astype(np.int64).tolist()
  x1, y1, x2, y2 = max(x1, 0), max(y1, 0), min(x2, width), min(y2, height)
  if x2 <= x1 or y2 <= y1:
    raise ValueError(
      f"{fn}: query {i}'s box {data.query_boxes[i].tolist()} keeps no pixel of its image "
      f"{path!r} ({width} x {height} pixels); the ground truth's bbx and the image do not "
      "match: check that jpg/ holds the published images, at their published size."
    )
  crop = image[y1:y2, x1:x2]
  if max_side is None:
    return crop.numpy()
  side = max_side * max(y2 - y1, x2 - x1) / max(height, width)
  return _resized(crop, _thumbnail_size(y2 - y1, x2 - x1, side))


def read_gallery_image(
  data: RevisitedData, i: int, *, max_side: int | None = DEFAULT_MAX_SIDE
) -> np.ndarray:
  """Gallery image `i` (a distractor past the data set's images) whole, its longer side capped.

  The image at its own size, scaled down, never up, so that its longer side is at most
  `max_side` (the aspect ratio kept, the sizes of PIL's `Image.thumbnail`, which cirtorch's
  `imresize` calls; bilinear with antialiasing, where cirtorch uses Lanczos).
  The published images are at most 1024 pixels a side, so the default leaves them as they are.

  Args:
    data: a `RevisitedData` from `load_revisited` (or `with_distractors`).
    i: the gallery index, in `[0, N)`.
    max_side: the longest side in pixels, a positive int, or `None` for the image as it is.

  Returns:
    uint8 `[h, w, 3]`, RGB (a JPEG decoded as PIL decodes it: `read_image`).

  Raises:
    ValueError: `i` out of range; a file that does not decode.
  """
  fn = "read_gallery_image"
  checks.check_positive_int(fn, "max_side", max_side, allow_none=True)
  i = _index(fn, i, len(data.gallery_paths), "gallery images")
  image = _decode(fn, str(data.gallery_paths[i]))
  if max_side is None:
    return image.numpy()
  return _resized(image, _thumbnail_size(int(image.shape[0]), int(image.shape[1]), max_side))
