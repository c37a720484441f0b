"""Small fake data sets, for tests and benchmarks that must not download.

Three kinds: fake tfds builders (`mock_retrieval_data`, below: SOP, CUB-200-2011, Cars196,
CIFAR-10); small copies of data sets published as files, written in their published layout for
the loaders of `jaxrank.data.image_lists` (`write_inshop`, `write_vehicleid`, `write_inat2018`:
a few tiny JPEG images per class, the lists as published); and HashNet's list files with small
PNG images for `jaxrank.data.hashing_data` (`write_nuswide`, `write_imagenet100`).

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
from collections.abc import Iterator, Sequence

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


# ---------------------------------------------------------------------------------------------
# Small copies of data sets published as files, in their published layout.


def _write_jpeg(path: str, rng: np.random.Generator, size: int) -> None:
  """A smooth random `size x size` RGB JPEG at `path` (its folders made)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  coarse = rng.integers(0, 256, size=(size // 4 + 1, size // 4 + 1, 3), dtype=np.uint8)
  image = np.repeat(np.repeat(coarse, 4, axis=0), 4, axis=1)[:size, :size]
  with open(path, "wb") as f:
    f.write(tf.io.encode_jpeg(image).numpy())


def _write_text(path: str, lines: Sequence[str]) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in lines))


def write_inshop(
  root: str | os.PathLike,
  *,
  train_items: int = 4,
  test_items: int = 4,
  images_per_item: int = 2,
  categories: Sequence[str] = ("MEN/Denim", "WOMEN/Dresses"),
  image_size: int = 16,
  seed: int = 0,
) -> None:
  """Writes a small In-Shop Clothes Retrieval in its published layout (`jaxrank.data.load_inshop`).

  `root/Eval/list_eval_partition.txt` (count, header, one line per image, columns padded with
  spaces as published) and `root/img/<category>/id_<8 digits>/<nn>_1_front.jpg`. Items are
  numbered 1, 2, ... (the train items first), item `i` in category `categories[(i - 1) %
  len(categories)]`. The train items' images are all `train`; each test item's images alternate
  `query` and `gallery`, starting with a query, so query and gallery share the test items.

  Args:
    root: the directory to write into (made if absent).
    train_items: items of the train split.
    test_items: items of the query and gallery splits.
    images_per_item: images of each item, at least 2 (a test item needs a query and a gallery
      image).
    categories: the categories (`<MEN|WOMEN>/<Category>`) the items are spread over.
    image_size: the side of the square images.
    seed: the images' random seed.
  """
  if images_per_item < 2:
    raise ValueError(f"write_inshop: images_per_item must be at least 2, got {images_per_item}.")
  root = os.fspath(root)
  rng = np.random.default_rng(seed)
  lines = []
  for item in range(1, train_items + test_items + 1):
    category = categories[(item - 1) % len(categories)]
    for n in range(images_per_item):
      relative = f"img/{category}/id_{item:08d}/{n + 1:02d}_1_front.jpg"
      _write_jpeg(os.path.join(root, relative), rng, image_size)
      status = "train" if item <= train_items else ("query" if n % 2 == 0 else "gallery")
      lines.append(f"{relative:<60}{f'id_{item:08d}':<20}{status}")
  header = f"{'image_name':<60}{'item_id':<20}evaluation_status"
  _write_text(
    os.path.join(root, "Eval", "list_eval_partition.txt"), [str(len(lines)), header, *lines]
  )


def write_vehicleid(
  root: str | os.PathLike,
  *,
  train_vehicles: int = 6,
  test_vehicles: tuple[int, int, int] = (2, 3, 4),
  images_per_vehicle: int = 2,
  num_models: int = 2,
  image_size: int = 16,
  seed: int = 0,
) -> None:
  """Writes a small PKU VehicleID in its published layout (`jaxrank.data.load_vehicleid`).

  `root/image/<7-digit image id>.jpg`, `root/train_test_split/train_list.txt` and
  `test_list_{800,1600,2400}.txt` (lines `<image id> <vehicle id>`), and
  `root/attribute/model_attr.txt` (lines `<vehicle id> <model id>`). Vehicles are numbered 1,
  2, ... (the train vehicles first); the test lists are nested, as their sizes grow: the small
  list holds the first `test_vehicles[0]` test vehicles, the medium the first
  `test_vehicles[1]`, the large the first `test_vehicles[2]`. Every third vehicle (3, 6, ...) has
  no model; the others have model `vehicle % num_models`.

  Args:
    root: the directory to write into (made if absent).
    train_vehicles: vehicles of the train list.
    test_vehicles: vehicles of the small, medium and large test lists (non-decreasing).
    images_per_vehicle: images of each vehicle.
    num_models: the vehicle models the modelled vehicles are spread over.
    image_size: the side of the square images.
    seed: the images' random seed.
  """
  if list(test_vehicles) != sorted(test_vehicles) or len(test_vehicles) != 3:
    raise ValueError(
      f"write_vehicleid: test_vehicles must be three non-decreasing counts, got {test_vehicles}."
    )
  root = os.fspath(root)
  rng = np.random.default_rng(seed)
  image_id = 0
  lines: dict[int, list[str]] = {}
  for vehicle in range(1, train_vehicles + test_vehicles[2] + 1):
    lines[vehicle] = []
    for _ in range(images_per_vehicle):
      image_id += 1
      _write_jpeg(os.path.join(root, "image", f"{image_id:07d}.jpg"), rng, image_size)
      lines[vehicle].append(f"{image_id:07d} {vehicle}")
  split = os.path.join(root, "train_test_split")
  train = range(1, train_vehicles + 1)
  _write_text(os.path.join(split, "train_list.txt"), [x for v in train for x in lines[v]])
  for count, name in zip(test_vehicles, ("800", "1600", "2400")):
    test = range(train_vehicles + 1, train_vehicles + count + 1)
    _write_text(os.path.join(split, f"test_list_{name}.txt"), [x for v in test for x in lines[v]])
  models = [f"{v} {v % num_models}" for v in lines if v % 3]
  _write_text(os.path.join(root, "attribute", "model_attr.txt"), models)


def write_inat2018(
  root: str | os.PathLike,
  *,
  train_classes: int = 4,
  test_classes: int = 2,
  images_per_class: int = 2,
  supercategories: Sequence[str] = ("Aves", "Plantae"),
  image_size: int = 16,
  seed: int = 0,
) -> None:
  """Writes a small iNaturalist-2018 with Brown et al.'s split lists (`jaxrank.data.load_inat2018`).

  `root/train_val2018/<supercategory>/<category id>/<hash>.jpg` and
  `root/Inat_dataset_splits/Inaturalist_{train,test}_set1.txt`, one image path per line relative
  to `root`. Categories are numbered 0, 1, ... (the train classes first), category `c` in
  `supercategories[c % len(supercategories)]`; image names are 32 hexadecimal digits, as
  published.

  Args:
    root: the directory to write into (made if absent).
    train_classes: categories of the train list.
    test_classes: categories of the test list.
    images_per_class: images of each category.
    supercategories: names among `jaxrank.data.image_lists.INAT2018_SUPERCATEGORIES`.
    image_size: the side of the square images.
    seed: the images' random seed (and names').
  """
  root = os.fspath(root)
  rng = np.random.default_rng(seed)
  lists: dict[str, list[str]] = {"train": [], "test": []}
  for category in range(train_classes + test_classes):
    supercategory = supercategories[category % len(supercategories)]
    for _ in range(images_per_class):
      name = "".join(f"{b:02x}" for b in rng.integers(0, 256, 16).tolist())
      relative = f"train_val2018/{supercategory}/{category}/{name}.jpg"
      _write_jpeg(os.path.join(root, relative), rng, image_size)
      lists["train" if category < train_classes else "test"].append(relative)
  for split, lines in lists.items():
    _write_text(os.path.join(root, "Inat_dataset_splits", f"Inaturalist_{split}_set1.txt"), lines)
