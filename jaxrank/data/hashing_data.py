"""The hashing benchmarks of He et al. 2018 (sec. 5): CIFAR-10, NUS-WIDE and ImageNet100.

Each data set has three named splits: `train` (what the network trains on), `query` (the test
set) and `database` (what every query ranks by Hamming distance; `jaxrank.evaluate_hashing`).
Every loader returns the `LabeledImages` of one split; the splits are fixed by the files or by a
seed, so separate calls agree.

* `load_cifar10`: tfds `cifar10` from a prepared `data_dir` (never downloaded), 60,000 32 x 32
  images of 10 classes, in He et al.'s two settings (after DTSH, Wang et al. 2016):
  setting 1 (`cifar10_1k`): 100 queries per class (1,000) drawn from all 60,000 images, the other
  59,000 the database, and 500 images per class of the database (5,000) for training;
  setting 2 (`cifar10_10k`): tfds `test` (10,000) the queries, tfds `train` (50,000) the database
  and the training set. The draws are class-balanced and seeded (`seed`).
* `load_nuswide`: NUS-WIDE's 21 most frequent labels from HashNet's list files (`train.txt`,
  500 images per label, 10,500; `test.txt`, 100 per label, 2,100; `database.txt`, the other
  images that carry one of the labels, about 196K in He et al.'s count): multi-hot labels
  `[N, 21]`; an item is relevant to a query that shares a label.
* `load_imagenet100`: HashNet's 100 ImageNet classes from its list files (`train.txt`, 130 images
  per class in He et al.'s description; `test.txt`, the classes' ILSVRC 2012 validation images;
  `database.txt`, their training images): class labels `[N]` from the one-hot vectors. The sizes
  are whatever the files list.

**List files.** HashNet's format, one image a line: its path, then one `0`/`1` per label,
separated by spaces (`images/xyz.jpg 0 1 0 ... 0`; 21 labels for NUS-WIDE, 100 for ImageNet100).
A relative path is taken under `image_root` (by default the directory of the lists: move the
lists beside the images, or pass where the paths start). The files are read as they are, their
order kept; a missing file is a `FileNotFoundError`, and a line without a path and the right
number of 0/1 labels (for ImageNet100: not exactly one 1) a `ValueError`, each naming the file
(and the line). The images are read by the pipeline (`image_format="path"`).

>>> import jaxrank.data as jd
>>> query = jd.load_nuswide("/data/nus_wide", "query")  # doctest: +SKIP
>>> query.labels.shape  # doctest: +SKIP
(2100, 21)
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from jaxrank.data import datasets

SPLITS = ("train", "query", "database")
"""The named splits of every hashing data set."""

LIST_FILES = {"train": "train.txt", "query": "test.txt", "database": "database.txt"}
"""The list file of each split, in HashNet's layout."""

NUSWIDE_LABELS = 21
IMAGENET100_CLASSES = 100

CIFAR10_SETTINGS = (1, 2)
"""He et al.'s two CIFAR-10 settings: 1, per class 100 queries and 500 training images drawn
(`CIFAR10_QUERIES_PER_CLASS`, `CIFAR10_TRAIN_PER_CLASS`); 2, the standard split."""

CIFAR10_QUERIES_PER_CLASS = 100
CIFAR10_TRAIN_PER_CLASS = 500


def _check_split(fn: str, split: str) -> None:
  if split not in SPLITS:
    raise ValueError(f"{fn}: split must be one of {SPLITS}, got {split!r}.")


# ---------------------------------------------------------------------------------------------
# CIFAR-10, from tfds.


def cifar10_split_indices(
  labels: np.ndarray,
  *,
  setting: int,
  seed: int = 0,
  queries_per_class: int | None = None,
  train_per_class: int | None = None,
  num_test: int = 10000,
) -> dict[str, np.ndarray]:
  """The indices of each split into CIFAR-10's images (tfds `train` then `test`, concatenated).

  Setting 1: for each class, `queries_per_class` (100) images drawn at random from all of them
  are queries, the rest the database, and `train_per_class` (500) of the class's database images
  drawn at random the training set. Setting 2: the last `num_test` images (tfds `test`) are the
  queries, the others the database and the training set. One `np.random.default_rng(seed)` draws
  every class in turn (class 0 first), so a seed fixes the splits; indices come sorted.

  Args:
    labels: `[N]` class labels of the images, tfds `train` first.
    setting: 1 or 2.
    seed: the seed of the draws (setting 1).
    queries_per_class: queries per class in setting 1 (`None`: 100).
    train_per_class: training images per class in setting 1 (`None`: 500).
    num_test: the size of tfds `test`, the queries of setting 2.

  Returns:
    `{"train": ..., "query": ..., "database": ...}`, int64 index arrays.
  """
  fn = "cifar10_split_indices"
  if setting not in CIFAR10_SETTINGS:
    raise ValueError(f"{fn}: setting must be 1 or 2 (He et al. 2018, sec. 5.1), got {setting!r}.")
  labels = np.asarray(labels)
  if setting == 2:
    everything = np.arange(len(labels))
    database = everything[: len(labels) - num_test]
    return {"train": database, "query": everything[len(labels) - num_test :], "database": database}
  q = CIFAR10_QUERIES_PER_CLASS if queries_per_class is None else queries_per_class
  t = CIFAR10_TRAIN_PER_CLASS if train_per_class is None else train_per_class
  rng = np.random.default_rng(seed)
  query, train = [], []
  for c in np.unique(labels):
    members = np.flatnonzero(labels == c)
    if len(members) < q + t:
      raise ValueError(
        f"{fn}: class {c} has {len(members)} images, fewer than {q} queries + {t} training "
        "images; lower queries_per_class or train_per_class."
      )
    drawn = rng.permutation(members)
    query.append(drawn[:q])
    train.append(rng.permutation(drawn[q:])[:t])
  query_index = np.sort(np.concatenate(query))
  database = np.setdiff1d(np.arange(len(labels)), query_index)
  return {"train": np.sort(np.concatenate(train)), "query": query_index, "database": database}


def cifar10_splits(
  data_dir: str | os.PathLike | None = None,
  *,
  setting: int = 1,
  seed: int = 0,
  queries_per_class: int | None = None,
  train_per_class: int | None = None,
) -> dict[str, datasets.LabeledImages]:
  """Every split of `load_cifar10` from one read of the tfds data: `{"train": ..., "query": ...,
  "database": ...}` (arguments and errors as `load_cifar10`)."""
  fn = "load_cifar10"
  train, test = (
    datasets.load_tfds_splits(fn, "cifar10", data_dir, [part], "label", None)
    for part in ("train", "test")
  )
  both = datasets.LabeledImages(
    images=np.concatenate([train.images, test.images]),
    labels=np.concatenate([train.labels, test.labels]),
    image_format=train.image_format,
  )
  index = cifar10_split_indices(
    both.labels,
    setting=setting,
    seed=seed,
    queries_per_class=queries_per_class,
    train_per_class=train_per_class,
    num_test=test.num_examples,
  )
  return {split: datasets.select(both, rows) for split, rows in index.items()}


def load_cifar10(
  data_dir: str | os.PathLike | None = None,
  split: str = "train",
  *,
  setting: int = 1,
  seed: int = 0,
  queries_per_class: int | None = None,
  train_per_class: int | None = None,
) -> datasets.LabeledImages:
  """CIFAR-10 (tfds `cifar10`) in He et al. 2018's hashing settings, from a prepared `data_dir`.

  Reads both tfds splits (`train`, 50,000 images, then `test`, 10,000) and keeps one split of
  `cifar10_split_indices`: setting 1, 1,000 queries / 59,000 database / 5,000 training images,
  class-balanced and drawn with `seed`; setting 2, tfds `test` / `train` / `train`. Labels are
  tfds's `label` (0-9). Nothing is downloaded. `cifar10_splits` gives the three splits from one
  read.

  Args:
    data_dir: the tfds data directory holding `cifar10/3.0.2` (tfds's default when None).
    split: `"train"`, `"query"` or `"database"`.
    setting: 1 or 2.
    seed: the seed of setting 1's draws.
    queries_per_class: setting 1's queries per class (`None`: 100; smaller for tests).
    train_per_class: setting 1's training images per class (`None`: 500).

  Returns:
    `LabeledImages` of encoded PNG bytes with class labels.

  Raises:
    FileNotFoundError: the data set is not prepared in `data_dir` (nothing is downloaded).
  """
  _check_split("load_cifar10", split)
  splits = cifar10_splits(
    data_dir,
    setting=setting,
    seed=seed,
    queries_per_class=queries_per_class,
    train_per_class=train_per_class,
  )
  return splits[split]


# ---------------------------------------------------------------------------------------------
# HashNet's list files: NUS-WIDE and ImageNet100.


def read_image_list(
  path: str | os.PathLike,
  num_labels: int,
  *,
  image_root: str | os.PathLike | None = None,
  one_hot: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
  """One list file of HashNet's layout: the image paths and their 0/1 label vectors.

  Args:
    path: the list file (`train.txt`, `test.txt`, `database.txt`).
    num_labels: the labels on every line after the path (21 for NUS-WIDE, 100 for ImageNet100).
    image_root: where relative image paths start (`None`: the list's directory).
    one_hot: require exactly one 1 on every line (single-label data sets: ImageNet100).

  Returns:
    `(paths, labels)`: str `[N]` image paths and int32 `[N, num_labels]` 0/1 labels, in file order.

  Raises:
    FileNotFoundError: no such file.
    ValueError: an empty file, or a line that is not a path and `num_labels` labels of 0 or 1
      (with `one_hot`, exactly one 1), naming the file and the line.
  """
  fn = "read_image_list"
  path = os.fspath(path)
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(
      f"{fn}: no list file {path!r}; expected HashNet's train.txt, test.txt and database.txt "
      "(one image a line: its path, then its 0/1 labels)."
    )
  root = os.path.dirname(path) if image_root is None else os.fspath(image_root)
  with tf.io.gfile.GFile(path) as f:
    lines = f.read().splitlines()
  paths, labels = [], []
  for number, line in enumerate(lines, start=1):
    fields = line.split()
    if not fields:
      continue
    malformed = len(fields) != num_labels + 1 or any(v not in ("0", "1") for v in fields[1:])
    if malformed or (one_hot and fields[1:].count("1") != 1):
      shown = line if len(line) <= 80 else line[:77] + "..."
      what = "one-hot labels (exactly one 1)" if one_hot else "labels of 0 or 1"
      raise ValueError(
        f"{fn}: {path}, line {number}: expected an image path and {num_labels} {what}, got "
        f"{len(fields) - 1} values after the path: {shown!r}."
      )
    paths.append(fields[0] if os.path.isabs(fields[0]) else os.path.join(root, fields[0]))
    labels.append([v == "1" for v in fields[1:]])
  if not paths:
    raise ValueError(f"{fn}: {path} lists no image.")
  return np.asarray(paths, dtype=str), np.asarray(labels, dtype=np.int32)


def _list_path(root, split):
  return os.path.join(os.fspath(root), LIST_FILES[split])


def load_nuswide(
  root: str | os.PathLike, split: str = "train", *, image_root: str | os.PathLike | None = None
) -> datasets.LabeledImages:
  """NUS-WIDE with its 21 most frequent labels, from HashNet's list files in `root`.

  The splits of He et al. 2018 (sec. 5.1, after DTSH and HashNet): `train` (`train.txt`, 500 images
  per label, 10,500), `query` (`test.txt`, 100 per label, 2,100) and `database` (`database.txt`,
  the other images that carry one of the 21 labels). Labels are multi-hot `[N, 21]`: relevance is
  "shares at least one label", and the number of shared labels is NDCG's graded affinity
  (`jaxrank.evaluate_hashing`).

  Args:
    root: the directory holding `train.txt`, `test.txt` and `database.txt`.
    split: `"train"`, `"query"` or `"database"`.
    image_root: where the lists' relative image paths start (`None`: `root`).

  Returns:
    `LabeledImages` of image paths with int32 multi-hot labels `[N, 21]`.

  Raises:
    FileNotFoundError, ValueError: as `read_image_list`.
  """
  _check_split("load_nuswide", split)
  paths, labels = read_image_list(_list_path(root, split), NUSWIDE_LABELS, image_root=image_root)
  return datasets.LabeledImages(images=paths, labels=labels, image_format="path")


def load_imagenet100(
  root: str | os.PathLike, split: str = "train", *, image_root: str | os.PathLike | None = None
) -> datasets.LabeledImages:
  """ImageNet100 (HashNet's 100 ImageNet classes) from HashNet's list files in `root`.

  The splits of HashNet (Cao et al. 2017), which He et al. 2018 follow (sec. 5.1; evaluated by
  mAP@1000): `train` (`train.txt`, 130 images per class), `query` (`test.txt`, the classes'
  ILSVRC 2012 validation images) and `database` (`database.txt`, their training images). Each
  line's label is a one-hot vector of 100; labels are its index (0-99).

  Args:
    root: the directory holding `train.txt`, `test.txt` and `database.txt`.
    split: `"train"`, `"query"` or `"database"`.
    image_root: where the lists' relative image paths start (`None`: `root`).

  Returns:
    `LabeledImages` of image paths with int32 class labels `[N]`.

  Raises:
    FileNotFoundError, ValueError: as `read_image_list` (the vectors must be one-hot).
  """
  _check_split("load_imagenet100", split)
  paths, one_hot = read_image_list(
    _list_path(root, split), IMAGENET100_CLASSES, image_root=image_root, one_hot=True
  )
  labels = np.argmax(one_hot, axis=1).astype(np.int32)
  return datasets.LabeledImages(images=paths, labels=labels, image_format="path")
