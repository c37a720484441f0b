"""Retrieval datasets with the class-disjoint splits of metric learning, loaded without downloading.

Every loader returns a `LabeledImages`: the images (decoded arrays, encoded bytes, or file paths),
their class labels and, where the data set defines them, super-class labels. Train and test splits
hold disjoint classes: retrieval is measured on classes never seen in training.

* `load_digits`: train digits 0-4 (901 images), test digits 5-9 (896); no super-classes.
* `load_stanford_online_products`: the tfds splits, train 11,318 classes (59,551 images), test
  11,316 classes (60,502); super-classes: the 12 categories (`super_class_id`).
* `load_cub200`: train classes 0-99 of tfds `train` + `test` (5,864 images), test classes 100-199
  (5,924); no super-classes.
* `load_cars196`: train classes 0-97 of tfds `train` + `test` (8,054 images), test classes 98-195
  (8,131); no super-classes.
* `load_image_folder`: a `class/image` tree (point it at a train tree and at a test tree, or split
  one with `select_classes`); optional super-classes from the parent folders.

CUB-200-2011 and Cars196 ship with classification splits (about half of every class in each); the
metric-learning protocol (Oh Song et al. 2016; RaMBO and ROADMAP on CUB) instead trains on the first
half of the classes and tests on the second, all images of each, so those loaders read both tfds
splits and keep the classes of the requested half. Labels keep their original values (CUB's test
labels are 100-199): retrieval only compares them.

The tfds loaders read a data set that the user has prepared in `data_dir` (see the user guide,
docs/guide/real_data.rst); they never download, and raise `FileNotFoundError` with instructions
when the data is not there. They read the encoded JPEG bytes into memory once (about 1.5 GB per SOP
split, 0.6 GB for CUB, 1 GB for Cars196) and decode them in the tf.data pipeline, so that the
samplers can pick any example.

>>> from jaxrank.data import datasets
>>> train = datasets.load_digits("train")
>>> train.images.shape, train.images.dtype.name, sorted(set(train.labels.tolist()))
((901, 8, 8, 1), 'float32', [0, 1, 2, 3, 4])
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np
import tensorflow as tf

ImageFormat = Literal["array", "encoded", "path"]
_FORMATS = ("array", "encoded", "path")

DIGITS_TRAIN_CLASSES = (0, 1, 2, 3, 4)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, eq=False)
class LabeledImages:
  """A retrieval data set held in memory: images and their labels.

  Attributes:
    images: `[N, ...]` what the pipeline reads for each example, as said by `image_format`:
      `"array"`: decoded images (or vectors) `[N, H, W, C]`, used as they are;
      `"encoded"`: `[N]` object array of encoded image bytes (JPEG, PNG, ...), decoded to uint8
      `[H, W, 3]` by the pipeline;
      `"path"`: `[N]` str array of image file paths, read and decoded by the pipeline.
    labels: `[N]` int32 class labels, or `[N, C]` int32 multi-hot labels (0/1) for a
      multi-label data set (NUS-WIDE: an item is relevant to a query that shares a label).
    super_labels: `[N]` int32 super-class labels, or None where the data set has none.
    image_format: `"array"`, `"encoded"` or `"path"`.
  """

  images: np.ndarray
  labels: np.ndarray
  super_labels: np.ndarray | None = None
  image_format: ImageFormat = "array"

  def __post_init__(self):
    if self.image_format not in _FORMATS:
      raise ValueError(
        f"LabeledImages: image_format must be one of {_FORMATS}, got {self.image_format!r}."
      )
    n = len(self.labels)
    if np.ndim(self.labels) not in (1, 2) or len(self.images) != n:
      raise ValueError(
        f"LabeledImages: labels must be [N] (or [N, C] multi-hot) and images [N, ...], got "
        f"{np.shape(self.labels)} "
        f"and {np.shape(self.images)}."
      )
    if self.super_labels is not None and np.shape(self.super_labels) != (n,):
      raise ValueError(
        f"LabeledImages: super_labels must be [N] = [{n}], got {np.shape(self.super_labels)}."
      )
    if self.image_format != "array" and np.ndim(self.images) != 1:
      raise ValueError(
        f"LabeledImages: {self.image_format} images must be a 1-D array [N], got shape "
        f"{np.shape(self.images)}."
      )

  @property
  def num_examples(self) -> int:
    return len(self.labels)

  @property
  def num_classes(self) -> int:
    """The classes present (for multi-hot labels `[N, C]`, `C`)."""
    if np.ndim(self.labels) == 2:
      return int(np.shape(self.labels)[1])
    return len(np.unique(self.labels))


def select(data: LabeledImages, indices: np.ndarray) -> LabeledImages:
  """The examples at `indices` (an int array or a boolean mask `[N]`)."""
  return LabeledImages(
    images=data.images[indices],
    labels=data.labels[indices],
    super_labels=None if data.super_labels is None else data.super_labels[indices],
    image_format=data.image_format,
  )


def select_classes(data: LabeledImages, classes: Iterable[int]) -> LabeledImages:
  """The examples whose label is in `classes`: one side of a class-disjoint split.

  >>> import numpy as np
  >>> data = LabeledImages(np.zeros((4, 2)), np.array([0, 1, 2, 1]))
  >>> select_classes(data, [1]).labels.tolist()
  [1, 1]
  """
  return select(data, np.isin(data.labels, np.asarray(list(classes))))


def _check_split(fn: str, split: str) -> None:
  if split not in ("train", "test"):
    raise ValueError(f"{fn}: split must be 'train' or 'test' (class-disjoint), got {split!r}.")


# ---------------------------------------------------------------------------------------------
# The bundled default.


def load_digits(split: str = "train") -> LabeledImages:
  """scikit-learn's 8 x 8 handwritten digits, split by class: nothing to download.

  1,797 images of 10 digits ship inside scikit-learn. As in the CUB/Cars zero-shot protocol, the
  train split holds the digits 0-4 (`DIGITS_TRAIN_CLASSES`, 901 images) and the test split the
  digits 5-9 (896), classes never seen in training. `images.reshape(N, 64)` are the 64-d vectors
  that `sklearn.datasets.load_digits().data / 16` gives.

  Args:
    split: `"train"` (digits 0-4) or `"test"` (digits 5-9).

  Returns:
    `LabeledImages` with float32 images `[N, 8, 8, 1]` in [0, 1], int32 labels, no super-classes.
  """
  _check_split("load_digits", split)
  from sklearn import datasets as sklearn_datasets  # pylint: disable=g-import-not-at-top

  digits = sklearn_datasets.load_digits()
  images = (digits.images.astype(np.float32) / 16.0)[..., None]
  labels = digits.target.astype(np.int32)
  keep = np.isin(labels, DIGITS_TRAIN_CLASSES) == (split == "train")
  return LabeledImages(images=images[keep], labels=labels[keep], image_format="array")


# ---------------------------------------------------------------------------------------------
# tensorflow-datasets builders, from a prepared data_dir.


def load_tfds_splits(
  fn: str,
  name: str,
  data_dir: str | os.PathLike | None,
  tfds_splits: Sequence[str],
  label_key: str,
  super_key: str | None,
) -> LabeledImages:
  """Reads the encoded images and labels of some tfds splits of a prepared `data_dir`,
  concatenated in split order (what every tfds loader shares; `fn` names the loader in errors)."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  builder = tfds.builder(name, data_dir=data_dir)
  features = {"image": True, label_key: True}
  if super_key is not None:
    features[super_key] = True
  # Only the fields used; images stay encoded (CUB's segmentation masks are never decoded).
  decoders = tfds.decode.PartialDecoding(features, decoders={"image": tfds.decode.SkipDecoding()})
  images, labels, supers = [], [], []
  for split in tfds_splits:
    try:
      ds = builder.as_dataset(split=split, decoders=decoders, shuffle_files=False)
    except AssertionError as e:  # What tfds raises when the data set was not prepared.
      raise FileNotFoundError(
        f"{fn}: no prepared {name!r} in data_dir={data_dir!r} ({e}). jaxrank never downloads: "
        f"prepare {name} once (see docs/guide/real_data.rst), for instance with "
        f"tfds.builder({name!r}, data_dir=...).download_and_prepare(download_config="
        "tfds.download.DownloadConfig(manual_dir=...)) on the archives you downloaded, then "
        "pass that data_dir."
      ) from e
    for batch in ds.batch(1024).as_numpy_iterator():
      images.extend(batch["image"].tolist())
      labels.append(batch[label_key])
      if super_key is not None:
        supers.append(batch[super_key])
  if not labels:
    raise ValueError(f"{fn}: the splits {list(tfds_splits)} of {name} in {data_dir!r} are empty.")
  encoded = np.empty(len(images), dtype=object)
  encoded[:] = images
  return LabeledImages(
    images=encoded,
    labels=np.concatenate(labels).astype(np.int32),
    super_labels=None if super_key is None else np.concatenate(supers).astype(np.int32),
    image_format="encoded",
  )


def load_stanford_online_products(
  data_dir: str | os.PathLike | None = None, split: str = "train"
) -> LabeledImages:
  """Stanford Online Products (Oh Song et al. 2016) from a prepared tfds `data_dir`.

  The tfds splits are already the class-disjoint ones of the papers: `train` (`Ebay_train.txt`,
  11,318 classes, 59,551 images) and `test` (`Ebay_test.txt`, 11,316 classes, 60,502 images).
  Labels are tfds's `class_id` (the file's class id - 1, so train classes are 0-11,317 and test
  classes 11,318-22,633); super-labels are `super_class_id`, the 12 categories (bicycle, cabinet,
  chair, coffee_maker, fan, kettle, lamp, mug, sofa, stapler, table, toaster) that the hard
  sampling of FastAP and RaMBO uses.

  Args:
    data_dir: the tfds data directory holding `stanford_online_products/1.0.0` (tfds's default,
      `~/tensorflow_datasets`, when None).
    split: `"train"` or `"test"`.

  Returns:
    `LabeledImages` of encoded JPEG bytes with labels and super-labels.

  Raises:
    FileNotFoundError: the data set is not prepared in `data_dir` (nothing is downloaded).
  """
  fn = "load_stanford_online_products"
  _check_split(fn, split)
  return load_tfds_splits(
    fn, "stanford_online_products", data_dir, [split], "class_id", "super_class_id"
  )


def _load_class_half(fn: str, name: str, data_dir, split: str, num_classes: int) -> LabeledImages:
  _check_split(fn, split)
  data = load_tfds_splits(fn, name, data_dir, ["train", "test"], "label", None)
  half = np.arange(num_classes // 2)
  return select_classes(data, half if split == "train" else half + num_classes // 2)


def load_cub200(data_dir: str | os.PathLike | None = None, split: str = "train") -> LabeledImages:
  """CUB-200-2011 (tfds `caltech_birds2011`), class-disjoint split, from a prepared `data_dir`.

  Train: all images of classes 0-99 (5,864); test: all images of classes 100-199 (5,924), from both
  tfds splits (tfds's `train`/`test` is the classification split, half of every class in each).
  Labels are tfds's `label` (the folder number - 1). No super-classes.

  Args:
    data_dir: the tfds data directory holding `caltech_birds2011/0.2.0` (tfds's default when None).
    split: `"train"` or `"test"`.

  Returns:
    `LabeledImages` of encoded JPEG bytes with labels.

  Raises:
    FileNotFoundError: the data set is not prepared in `data_dir` (nothing is downloaded).
  """
  return _load_class_half("load_cub200", "caltech_birds2011", data_dir, split, 200)


def load_cars196(data_dir: str | os.PathLike | None = None, split: str = "train") -> LabeledImages:
  """Cars196 (tfds `cars196`) with the class-disjoint split, from a prepared `data_dir`.

  Train: all images of classes 0-97 (8,054); test: all images of classes 98-195 (8,131), from both
  tfds splits (tfds's `train`/`test` is the classification split). Labels are tfds's `label`, the
  class order of the devkit's `cars_meta.mat`. No super-classes.

  Args:
    data_dir: the tfds data directory holding `cars196/2.1.0` (tfds's default when None).
    split: `"train"` or `"test"`.

  Returns:
    `LabeledImages` of encoded JPEG bytes with labels.

  Raises:
    FileNotFoundError: the data set is not prepared in `data_dir` (nothing is downloaded).
  """
  return _load_class_half("load_cars196", "cars196", data_dir, split, 196)


# ---------------------------------------------------------------------------------------------
# Any folder of images.


def unreadable_images(paths: Sequence[str] | np.ndarray) -> list[str]:
  """The paths among `paths` that TensorFlow cannot read and decode as an image.

  Every file is decoded once, with the decoder the pipeline uses, in a parallel tf.data pass, so
  a file accepted here will not fail in training.
  """
  if not len(paths):
    return []
  ds = tf.data.Dataset.from_tensor_slices(np.asarray(paths, dtype=str)).enumerate()

  def decodes(i, path):
    image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    # Return something computed from the image: a control dependency alone gets pruned.
    return i, tf.shape(image)

  ds = ds.map(decodes, num_parallel_calls=tf.data.AUTOTUNE).ignore_errors()
  readable = np.zeros(len(paths), dtype=bool)
  readable[[i for i, _ in ds.as_numpy_iterator()]] = True
  return [str(p) for p, ok in zip(paths, readable) if not ok]


def load_image_folder(
  directory: str | os.PathLike,
  *,
  super_classes: bool = False,
  unreadable: Literal["raise", "skip"] = "raise",
) -> LabeledImages:
  """Every image under `directory`, labelled by the folder that holds it: `class/image` trees.

  Image files (`IMAGE_EXTENSIONS`, any case; hidden files and other files are ignored) may sit at
  any depth: an image's class is the path of its folder relative to `directory`, so
  `dog/1.jpg` is class `dog` and In-Shop's `img/MEN/Denim/id_00000080/01_1_front.jpg` (under
  `directory=.../img`) is class `MEN/Denim/id_00000080`. Labels number the classes in sorted order
  (`0 .. C - 1`). With `super_classes=True` an image's super-class is its class folder's parent
  (`MEN/Denim` for In-Shop, its 23 categories), numbered the same way. Paths are read lazily by the
  pipeline; point the loader at a train tree and at a test tree for a class-disjoint split, or split
  one tree with `select_classes`.

  **Unreadable files.** Every image is decoded once here (`unreadable_images`), so that a corrupt
  file cannot stop training hours in. With `unreadable="raise"` (default) any such file raises
  `ValueError` naming them; with `"skip"` they are left out and their number and first paths logged
  as a warning.

  Args:
    directory: the root of the tree (a local path, or any path `tf.io.gfile` reads).
    super_classes: label super-classes by the parent folder of each class folder.
    unreadable: `"raise"` or `"skip"`, what to do with files that cannot be decoded.

  Returns:
    `LabeledImages` of file paths, sorted by path, with labels (and super-labels).

  Raises:
    FileNotFoundError: `directory` does not exist.
    ValueError: no image in the tree; images directly in `directory` (they have no class);
      `super_classes=True` with class folders directly in `directory`; unreadable images with
      `unreadable="raise"`.
  """
  fn = "load_image_folder"
  if unreadable not in ("raise", "skip"):
    raise ValueError(f"{fn}: unreadable must be 'raise' or 'skip', got {unreadable!r}.")
  root = os.fspath(directory)
  if not tf.io.gfile.isdir(root):
    raise FileNotFoundError(f"{fn}: {root!r} is not a directory.")
  paths, class_keys = _image_files(fn, root)
  paths, class_keys = _readable(fn, root, paths, class_keys, unreadable)

  _, labels = np.unique(class_keys, return_inverse=True)
  super_labels = None
  if super_classes:
    parents = np.array([os.path.dirname(k) for k in class_keys], dtype=str)
    if (parents == "").any():
      flat = class_keys[parents == ""][0]
      raise ValueError(
        f"{fn}: super_classes=True needs directory/super_class/class/image files, but class "
        f"{flat!r} lies directly in {root!r}."
      )
    _, super_labels = np.unique(parents, return_inverse=True)
    super_labels = super_labels.astype(np.int32)
  return LabeledImages(
    images=paths,
    labels=labels.astype(np.int32),
    super_labels=super_labels,
    image_format="path",
  )


def _image_files(fn: str, root: str) -> tuple[np.ndarray, np.ndarray]:
  """The image files under `root`, sorted by path, and the class folder of each."""
  paths: list[str] = []
  class_keys: list[str] = []
  for folder, _, files in tf.io.gfile.walk(root):
    rel = os.path.relpath(folder, root).replace(os.sep, "/")
    for name in files:
      if name.startswith(".") or not name.lower().endswith(IMAGE_EXTENSIONS):
        continue
      if rel == ".":
        raise ValueError(
          f"{fn}: {name!r} lies directly in {root!r}; images must be in class folders "
          "(directory/class/image)."
        )
      paths.append(os.path.join(folder, name))
      class_keys.append(rel)
  if not paths:
    raise ValueError(
      f"{fn}: no image files ({', '.join(IMAGE_EXTENSIONS)}) under {root!r}; expected "
      "directory/class/image files."
    )
  order = np.argsort(paths, kind="stable")
  return np.asarray(paths, dtype=str)[order], np.asarray(class_keys, dtype=str)[order]


def _readable(
  fn: str, root: str, paths: np.ndarray, class_keys: np.ndarray, unreadable: str
) -> tuple[np.ndarray, np.ndarray]:
  """`paths` and `class_keys` without the files that cannot be decoded, or a `ValueError`."""
  bad = unreadable_images(paths)
  if bad:
    if unreadable == "raise":
      raise ValueError(
        f"{fn}: {len(bad)} of {len(paths)} files under {root!r} cannot be decoded as images "
        f"(first: {bad[:5]}); delete or replace them, or pass unreadable='skip' to leave them "
        "out."
      )
    _log.warning(
      "%s: skipped %d of %d files under %r that cannot be decoded as images (first: %s).",
      fn,
      len(bad),
      len(paths),
      root,
      bad[:5],
    )
    keep = ~np.isin(paths, bad)
    paths, class_keys = paths[keep], class_keys[keep]
  return paths, class_keys
