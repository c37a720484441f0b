"""Small fake data sets in the published layouts, for tests and benchmarks that must not download.

Two kinds: tfds builders that read fake examples (`mock_retrieval_data`: SOP, CUB-200-2011,
Cars196, CIFAR-10), and small files written in a data set's on-disk layout (`write_nuswide`,
`write_imagenet100`: HashNet's list files and PNG images).

`tfds.testing.mock_data` replaces a builder's data with random examples, but its default examples do
not fit retrieval: every split gets the same examples (the split is ignored), class ids are drawn
uniformly among all classes (SOP's 22,634, so a class almost never repeats and no P x K batch can be
built), and SOP's `super_class_id` is drawn independently of `class_id`. `mock_retrieval_data`
passes `mock_data` an `as_dataset_fn` that builds, for each builder and split, examples with the
real label structure: SOP's train and test splits hold disjoint classes, each in one of the 12
super-classes; CUB's and Cars196's tfds `train` and `test` splits both hold every class (their
classification split). Images are small random PNGs, encoded and decoded by tfds's own features.

>>> from jaxrank.data import datasets, testing
>>> with testing.mock_retrieval_data(images_per_class=2, classes_per_split=4):
...   test = datasets.load_stanford_online_products("/nonexistent", split="test")
>>> test.labels.tolist(), test.image_format
([4, 4, 5, 5, 6, 6, 7, 7], 'encoded')
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import numpy as np
import tensorflow as tf

_NUM_CLASSES = {
  "stanford_online_products": 22634,
  "caltech_birds2011": 200,
  "cars196": 196,
  "cifar10": 10,
}
_LABEL_KEY = {
  "stanford_online_products": "class_id",
  "caltech_birds2011": "label",
  "cars196": "label",
  "cifar10": "label",
}


def fake_labels(name: str, split: str, *, classes_per_split: int, images_per_class: int):
  """The `(labels, super_labels or None)` that `mock_retrieval_data` gives a builder's split.

  SOP: `train` holds classes `0 .. c - 1`, `test` classes `c .. 2c - 1` (`c = classes_per_split`),
  class `i` in super-class `i % 12`. CUB, Cars196 and CIFAR-10: both splits hold `c` classes
  spread evenly over all classes (0 and the last included), so both halves of the class-disjoint
  split are there (CIFAR-10 with `c = 10`: every class in each split, as the real one).
  """
  if name == "stanford_online_products":
    start = 0 if split == "train" else classes_per_split
    classes = np.arange(start, start + classes_per_split)
    labels = np.repeat(classes, images_per_class)
    return labels, labels % 12
  if name in _NUM_CLASSES:
    classes = np.unique(np.linspace(0, _NUM_CLASSES[name] - 1, classes_per_split).astype(int))
    return np.repeat(classes, images_per_class), None
  raise ValueError(
    f"fake_labels: no fake data for builder {name!r}; known: {sorted(_NUM_CLASSES)}."
  )


def _fake_as_dataset(
  self,
  split,
  decoders=None,
  read_config=None,
  shuffle_files=False,
  *,
  classes_per_split: int,
  images_per_class: int,
  image_size: tuple[int, int],
):
  """Stands in for `FileReaderBuilder._as_dataset`; tfds's features encode and decode examples."""
  del read_config, shuffle_files
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  features = self.info.features
  if isinstance(decoders, tfds.decode.PartialDecoding):
    features = decoders.extract_features(features)
    decoders = decoders.decoders
  labels, supers = fake_labels(
    self.name, str(split), classes_per_split=classes_per_split, images_per_class=images_per_class
  )
  rng = np.random.default_rng(len(labels) + (0 if str(split) == "train" else 1))
  h, w = image_size
  examples = []
  for i, label in enumerate(labels):
    example: dict[str, np.ndarray | int] = {}
    for key in features:
      if key == "image":
        # Smooth random images (a coarse grid upsampled) compress like photographs, unlike noise.
        coarse = rng.integers(0, 256, size=(h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
        example[key] = np.repeat(np.repeat(coarse, 8, axis=0), 8, axis=1)[:h, :w]
      elif key == _LABEL_KEY[self.name]:
        example[key] = int(label)
      elif key == "super_class_id" or key == "super_class_id/num":
        example[key] = int(supers[i])
      else:
        raise ValueError(f"mock_retrieval_data: no fake value for feature {key!r} of {self.name}.")
    examples.append(features.encode_example(example))
  specs = tf.nest.map_structure(
    lambda s: tf.TensorSpec(s.shape, s.dtype), features.get_serialized_info()
  )
  ds = tf.data.Dataset.from_generator(lambda: iter(examples), output_signature=specs)
  return ds.map(functools.partial(features.decode_example, decoders=decoders))


@contextlib.contextmanager
def mock_retrieval_data(
  *,
  classes_per_split: int = 8,
  images_per_class: int = 4,
  image_size: tuple[int, int] = (24, 32),
) -> Iterator[None]:
  """Within the block, the tfds builders read fake retrieval data and never touch disk or network.

  Works for `stanford_online_products`, `caltech_birds2011`, `cars196` and `cifar10` read through
  the loaders of `jaxrank.data` (which decode only the image and label fields); for CIFAR-10
  (`load_cifar10`) pass `classes_per_split=10` and `image_size=(32, 32)`. Labels are those of
  `fake_labels`; images are smooth random `image_size` RGB images.

  Args:
    classes_per_split: classes in each tfds split.
    images_per_class: images of each class in each split.
    image_size: `(height, width)` of the fake images.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  height, width = image_size
  fake = functools.partial(
    _fake_as_dataset,
    classes_per_split=classes_per_split,
    images_per_class=images_per_class,
    image_size=(height, width),
  )

  def as_dataset_fn(self, split, decoders=None, read_config=None, shuffle_files=False):
    return fake(self, split, decoders, read_config, shuffle_files)

  with tfds.testing.mock_data(as_dataset_fn=as_dataset_fn, policy=tfds.testing.MockPolicy.USE_CODE):
    yield


# ---------------------------------------------------------------------------------------------
# HashNet's list files (jaxrank.data.hashing_data), written with small images.


def _write_list_split(root, split, labels, image_size, rng):
  """Writes `images/<split>_<i>.png` and the split's list file; returns the list's path."""
  from jaxrank.data import hashing_data  # pylint: disable=g-import-not-at-top

  os.makedirs(os.path.join(root, "images"), exist_ok=True)
  lines = []
  h, w = image_size
  for i, row in enumerate(labels):
    name = f"images/{split}_{i:05d}.png"
    pixels = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    tf.io.write_file(os.path.join(root, name), tf.io.encode_png(pixels))
    lines.append(name + " " + " ".join(str(int(v)) for v in row))
  path = os.path.join(root, hashing_data.LIST_FILES[split])
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
  return path


def write_nuswide(
  root: str | os.PathLike,
  *,
  sizes: tuple[int, int, int] = (42, 21, 84),
  image_size: tuple[int, int] = (16, 16),
  seed: int = 0,
) -> str:
  """Writes a small NUS-WIDE in HashNet's layout under `root`, for `load_nuswide`.

  `train.txt`, `test.txt` and `database.txt` list `sizes` = (train, query, database) images,
  `images/<split>_<i>.png` random RGB images of `image_size`, each with 1 to 3 of the 21 labels
  (every label used in every split when the split has at least 21 images: image `i` has label
  `i % 21`).

  Returns:
    `root`, as a str.
  """
  root = os.fspath(root)
  rng = np.random.default_rng(seed)
  for split, size in zip(("train", "query", "database"), sizes):
    labels = np.zeros((size, 21), np.int32)
    labels[np.arange(size), np.arange(size) % 21] = 1
    extra = rng.integers(0, 21, size=(size, 2))
    keep = rng.random((size, 2)) < 0.5
    for j in range(2):
      labels[np.arange(size)[keep[:, j]], extra[keep[:, j], j]] = 1
    _write_list_split(root, split, labels, image_size, rng)
  return root


def write_imagenet100(
  root: str | os.PathLike,
  *,
  images_per_class: tuple[int, int, int] = (1, 1, 2),
  num_classes: int = 100,
  image_size: tuple[int, int] = (16, 16),
  seed: int = 0,
) -> str:
  """Writes a small ImageNet100 in HashNet's layout under `root`, for `load_imagenet100`.

  `train.txt`, `test.txt` and `database.txt` hold `images_per_class` = (train, query, database)
  images of each of the first `num_classes` classes (class order), each line a path and a one-hot
  vector of 100; `images/<split>_<i>.png` random RGB images of `image_size`.

  Returns:
    `root`, as a str.
  """
  root = os.fspath(root)
  rng = np.random.default_rng(seed)
  for split, count in zip(("train", "query", "database"), images_per_class):
    classes = np.repeat(np.arange(num_classes), count)
    _write_list_split(root, split, np.eye(100, dtype=np.int32)[classes], image_size, rng)
  return root
