"""The hashing benchmarks of He et al. 2018 (sec. 5): CIFAR-10, NUS-WIDE and ImageNet100.

Each data set has three named splits: `train` (what the network trains on), `query` (the test
set) and `database` (what every query ranks by Hamming distance; `jaxrank.evaluate_hashing`).
Every loader returns the `LabeledImages` of one split; the splits are fixed by the files or by a
seed, so separate calls agree. Counts below are those of the files named, checked against the
published copies where they could be read (docs/guide/papers.rst names each copy and says which
counts are the authors' instead).

* `load_cifar10`: tfds `cifar10` from a prepared `data_dir` (never downloaded), 60,000 32 x 32
  images of 10 classes, in He et al.'s two settings, drawn as their released code draws them
  (kunhe/TALR, `+imdb/split_cifar.m`, after DTSH): setting 1 (`cifar10_1k`), 100 queries per
  class (1,000) drawn from all 60,000 images, the other 59,000 the database and 500 per class of
  them (5,000) the training set; setting 2 (`cifar10_10k`), 1,000 queries per class (10,000)
  drawn from all 60,000 images, the other 50,000 the database and the training set. Setting 2
  with `queries="tfds_test"` takes tfds' `test` split as the queries instead (the standard
  split: statistically alike, not the same images). The draws are class-balanced and seeded.
* `load_nuswide`: NUS-WIDE's 21 most frequent labels from 21-label list files (`train.txt`,
  `test.txt`, `database.txt`), as swuxyj/DeepHash-pytorch publishes them in `data/nuswide_21/`
  (train 10,500 images, 500 per label; test 2,100, 100 per label; its `database.txt`, too large
  for the copy checked, is what its `code.py` makes: every image but the queries, the training
  images included, 193,734 of the 195,834 with one of the 21 labels that its README counts).
  HashNet's lists (thuml/HashNet, `pytorch/data/nuswide_81/`)
  are another split, of the 81 labels, and are refused with an error naming these files.
* `load_nuswide_he2018`: He et al.'s own split of NUS-WIDE (TALR `+imdb/nus.m` and
  `+imdb/split_nus.m`), drawn from NUS-WIDE's `Imagelist.txt` and `AllLabels81.txt`: the images
  with any of the 21 most frequent labels (195,834 in He et al.'s count), per label 100 queries
  and 500 training images drawn among those not yet drawn (2,100 and 10,500), the database
  everything but the queries (the training images included).
* `load_imagenet100`: HashNet's 100 ImageNet classes from its list files (thuml/HashNet): the
  PyTorch lists (`pytorch/data/imagenet/`: `train.txt` 13,000 images, 130 per class; `test.txt`
  5,000, 50 per class, ILSVRC 2012 validation images; `database.txt`) or the Caffe lists He et
  al.'s code reads (`caffe/data/imagenet/train.txt`, the same 13,000; `test/test0.txt` ...
  `test7.txt`, the same 5,000 in another order; `test/database0.txt` ... `database7.txt`,
  128,503 training images, the 13,000 among them), the eight parts concatenated in order.
  Class labels `[N]` from the one-hot vectors.

**List files.** HashNet's format, one image a line: its path, then one `0`/`1` per label,
separated by spaces (`images/xyz.jpg 0 1 0 ... 0`; 21 labels for NUS-WIDE, 100 for ImageNet100).
A listed path first loses `path_prefix` (HashNet's PyTorch lists hold the authors' absolute paths,
`/home/caozhangjie/run-czj/dataset/imagenet/image/...`, its Caffe lists `./data/imagenet/image/...`:
`HASHNET_IMAGENET_PREFIXES`), then a relative path is taken under `image_root` (by default the
directory of the lists). The files are read as they are, their order kept; a missing list is a
`FileNotFoundError`, a line without a path and the right number of 0/1 labels (for ImageNet100:
not exactly one 1) a `ValueError`, each naming the file (and the line); listed images that are not
on disk are one `FileNotFoundError` naming the first and what its path kept. The images are read
by the pipeline (`image_format="path"`).

>>> import jaxrank.data as jd
>>> query = jd.load_nuswide("/data/nus_wide", "query")  # doctest: +SKIP
>>> query.labels.shape  # doctest: +SKIP
(2100, 21)
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from jaxrank.data import datasets

SPLITS = ("train", "query", "database")
"""The named splits of every hashing data set."""

LIST_FILES = {"train": "train.txt", "query": "test.txt", "database": "database.txt"}
"""The list file of each split, in HashNet's (and DeepHash-pytorch's) layout."""

CAFFE_PARTS = 8
"""HashNet's Caffe lists split the query and database lists in 8 parts (`test0.txt` ...)."""

HASHNET_IMAGENET_PREFIXES = ("/home/caozhangjie/run-czj/dataset/imagenet/", "./data/imagenet/")
"""The prefixes of the paths in HashNet's ImageNet100 lists: the PyTorch lists' (the authors'
machine) and the Caffe lists'. What follows them is `image/<file>` or `val_image/<file>`."""

NUSWIDE_LABELS = 21
IMAGENET100_CLASSES = 100

NUSWIDE_ALL_LABELS = 81
"""The concepts of NUS-WIDE's `AllLabels81.txt` (and of HashNet's `nuswide_81` lists)."""

NUSWIDE_FILES = ("Imagelist.txt", "AllLabels81.txt")
"""The NUS-WIDE files He et al.'s split is drawn from (TALR `data/NUSWIDE/`): the image paths
(`C:\\ImageData\\Flickr\\<tag>\\<file>.jpg`, one a line) and their 81 0/1 concept labels."""

NUSWIDE_IMAGE_PREFIX = "C:\\ImageData\\"
"""The prefix of `Imagelist.txt`'s paths, which TALR replaces by the data set's folder."""

NUSWIDE_QUERIES_PER_LABEL = 100
NUSWIDE_TRAIN_PER_LABEL = 500

CIFAR10_SETTINGS = (1, 2)
"""He et al.'s two CIFAR-10 settings: 1, per class 100 queries and 500 training images drawn;
2, per class 1,000 queries drawn, the rest the training set (`CIFAR10_QUERIES_PER_CLASS`)."""

CIFAR10_QUERIES_PER_CLASS = 100
CIFAR10_TRAIN_PER_CLASS = 500
CIFAR10_SETTING2_QUERIES_PER_CLASS = 1000

CIFAR10_QUERIES = ("drawn", "tfds_test")
"""How setting 2 takes its queries: drawn per class from all images (He et al.'s code), or tfds'
`test` split."""


def _check_split(fn: str, split: str) -> None:
  if split not in SPLITS:
    raise ValueError(f"{fn}: split must be one of {SPLITS}, got {split!r}.")


# ---------------------------------------------------------------------------------------------
# CIFAR-10, from tfds.


def _draw_per_class(fn, labels, q, t, rng):
  """For each class in turn (class 0 first), `q` queries and then `t` training images (`None`:
  all the others) of one permutation of its images, as TALR's `split_cifar.m` draws them."""
  query, train = [], []
  for c in np.unique(labels):
    members = np.flatnonzero(labels == c)
    if len(members) < q + (t or 0) or (t is None and len(members) <= q):
      raise ValueError(
        f"{fn}: class {c} has {len(members)} images, too few for {q} queries + "
        f"{'the other' if t is None else t} training images; lower queries_per_class or "
        "train_per_class."
      )
    drawn = rng.permutation(members)
    query.append(drawn[:q])
    train.append(drawn[q:] if t is None else rng.permutation(drawn[q:])[:t])
  return np.sort(np.concatenate(query)), np.sort(np.concatenate(train))


def cifar10_split_indices(
  labels: np.ndarray,
  *,
  setting: int,
  seed: int = 0,
  queries_per_class: int | None = None,
  train_per_class: int | None = None,
  num_test: int = 10000,
  queries: str = "drawn",
) -> dict[str, np.ndarray]:
  """The indices of each split into CIFAR-10's images (tfds `train` then `test`, concatenated).

  He et al.'s rule (kunhe/TALR, `+imdb/split_cifar.m`, after DTSH): for each class, its images
  permuted at random, the first `queries_per_class` are queries, every other image is in the
  database, and the training set is, setting 1, `train_per_class` (500) of the class's database
  images drawn at random, setting 2, all of them. Setting 1 draws 100 queries per class (1,000 /
  59,000 / 5,000), setting 2 1,000 (10,000 / 50,000 / 50,000). One
  `np.random.default_rng(seed)` draws every class in turn (class 0 first), so a seed fixes the
  splits (TALR's Matlab `randperm` draws other images: the same protocol, not the same split).
  Setting 2 with `queries="tfds_test"` takes the last `num_test` images (tfds `test`) as the
  queries and the others as the database and training set: the standard split, no draw.
  Indices come sorted.

  Args:
    labels: `[N]` class labels of the images, tfds `train` first.
    setting: 1 or 2.
    seed: the seed of the draws.
    queries_per_class: queries per class (`None`: 100 in setting 1, 1,000 in setting 2).
    train_per_class: training images per class in setting 1 (`None`: 500); setting 2 trains on
      every database image and takes None only.
    num_test: the size of tfds `test`, the queries of setting 2 with `queries="tfds_test"`.
    queries: setting 2's queries, `"drawn"` (He et al.'s code) or `"tfds_test"`; setting 1
      draws.

  Returns:
    `{"train": ..., "query": ..., "database": ...}`, int64 index arrays.

  Raises:
    ValueError: an unknown `setting` or `queries`, `train_per_class` in setting 2, or a class
      with too few images.
  """
  fn = "cifar10_split_indices"
  if setting not in CIFAR10_SETTINGS:
    raise ValueError(f"{fn}: setting must be 1 or 2 (He et al. 2018, sec. 5.1), got {setting!r}.")
  if queries not in CIFAR10_QUERIES or (setting == 1 and queries != "drawn"):
    raise ValueError(
      f"{fn}: queries must be one of {CIFAR10_QUERIES} in setting 2 and 'drawn' in setting 1, "
      f"got {queries!r} in setting {setting}."
    )
  if setting == 2 and train_per_class is not None:
    raise ValueError(
      f"{fn}: setting 2 trains on every database image; train_per_class must be None, got "
      f"{train_per_class!r}."
    )
  labels = np.asarray(labels)
  everything = np.arange(len(labels))
  if queries == "tfds_test":
    database = everything[: len(labels) - num_test]
    return {"train": database, "query": everything[len(labels) - num_test :], "database": database}
  if setting == 1:
    q = CIFAR10_QUERIES_PER_CLASS if queries_per_class is None else queries_per_class
    t = CIFAR10_TRAIN_PER_CLASS if train_per_class is None else train_per_class
  else:
    q = CIFAR10_SETTING2_QUERIES_PER_CLASS if queries_per_class is None else queries_per_class
    t = None
  query, train = _draw_per_class(fn, labels, q, t, np.random.default_rng(seed))
  return {"train": train, "query": query, "database": np.setdiff1d(everything, query)}


def cifar10_splits(
  data_dir: str | os.PathLike | None = None,
  *,
  setting: int = 1,
  seed: int = 0,
  queries_per_class: int | None = None,
  train_per_class: int | None = None,
  queries: str = "drawn",
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
    queries=queries,
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
  queries: str = "drawn",
) -> datasets.LabeledImages:
  """CIFAR-10 (tfds `cifar10`) in He et al. 2018's hashing settings, from a prepared `data_dir`.

  Reads both tfds splits (`train`, 50,000 images, then `test`, 10,000) and keeps one split of
  `cifar10_split_indices`: setting 1, 1,000 queries / 59,000 database / 5,000 training images;
  setting 2, 10,000 / 50,000 / 50,000 (the database is the training set); both class-balanced and
  drawn with `seed` from all 60,000 images as He et al.'s code draws them, or, setting 2 with
  `queries="tfds_test"`, tfds `test` / `train` / `train`. Labels are tfds's `label` (0-9).
  Nothing is downloaded. `cifar10_splits` gives the three splits from one read.

  Args:
    data_dir: the tfds data directory holding `cifar10/3.0.2` (tfds's default when None).
    split: `"train"`, `"query"` or `"database"`.
    setting: 1 or 2.
    seed: the seed of the draws.
    queries_per_class: queries per class (`None`: 100 in setting 1, 1,000 in setting 2; smaller
      for tests).
    train_per_class: setting 1's training images per class (`None`: 500).
    queries: setting 2's queries: `"drawn"` (He et al.'s `split_cifar.m`) or `"tfds_test"`.

  Returns:
    `LabeledImages` of encoded PNG bytes with class labels.

  Raises:
    FileNotFoundError: the data set is not prepared in `data_dir` (nothing is downloaded).
    ValueError: as `cifar10_split_indices`.
  """
  _check_split("load_cifar10", split)
  splits = cifar10_splits(
    data_dir,
    setting=setting,
    seed=seed,
    queries_per_class=queries_per_class,
    train_per_class=train_per_class,
    queries=queries,
  )
  return splits[split]


# ---------------------------------------------------------------------------------------------
# HashNet's list files: NUS-WIDE and ImageNet100.


def _prefixes(fn: str, path_prefix: str | Sequence[str] | None) -> tuple[str, ...] | None:
  if path_prefix is None:
    return None
  prefixes = (path_prefix,) if isinstance(path_prefix, str) else tuple(path_prefix)
  if not prefixes or not all(isinstance(p, str) for p in prefixes):
    raise ValueError(f"{fn}: path_prefix must be a str or a sequence of str, got {path_prefix!r}.")
  return prefixes


def _strip_prefix(listed: str, prefixes: tuple[str, ...] | None) -> str | None:
  """`listed` without the first of `prefixes` it starts with (None: kept); None if none fits."""
  if prefixes is None:
    return listed
  for prefix in prefixes:
    if listed.startswith(prefix):
      return listed[len(prefix) :]
  return None


def _parse_list(fn, path, num_labels, root, one_hot, prefixes):
  """`(joined paths, listed paths, labels)` of one list file (see `read_image_list`). Each line's
  labels are checked by one regular expression and converted all at once (HashNet's database
  lists hold 100 labels on each of 128,503 lines)."""
  with tf.io.gfile.GFile(path) as f:
    lines = f.read().splitlines()
  labels_form = re.compile(rf"[01](?:\s+[01]){{{num_labels - 1}}}\s*")
  joined, listed, rests = [], [], []
  for number, line in enumerate(lines, start=1):
    fields = line.split(None, 1)
    if not fields:
      continue
    rest = fields[1] if len(fields) == 2 else ""
    if not labels_form.fullmatch(rest) or (one_hot and rest.count("1") != 1):
      shown = line if len(line) <= 80 else line[:77] + "..."
      what = "one-hot labels (exactly one 1)" if one_hot else "labels of 0 or 1"
      raise ValueError(
        f"{fn}: {path}, line {number}: expected an image path and {num_labels} {what}, got "
        f"{len(rest.split())} values after the path: {shown!r}."
      )
    relative = _strip_prefix(fields[0], prefixes)
    if relative is None:
      raise ValueError(
        f"{fn}: {path}, line {number}: the path {fields[0]!r} starts with none of path_prefix="
        f"{prefixes!r}; pass the prefix the list's paths share."
      )
    joined.append(relative if os.path.isabs(relative) else os.path.join(root, relative))
    listed.append(fields[0])
    rests.append(rest)
  if not joined:
    raise ValueError(f"{fn}: {path} lists no image.")
  text = np.frombuffer("".join(rests).encode("ascii"), np.uint8)
  labels = text[(text == ord("0")) | (text == ord("1"))] - ord("0")
  return joined, listed, labels.reshape(len(joined), num_labels).astype(np.int32)


def read_image_list(
  path: str | os.PathLike,
  num_labels: int,
  *,
  image_root: str | os.PathLike | None = None,
  one_hot: bool = False,
  path_prefix: str | Sequence[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
  """One list file of HashNet's layout: the image paths and their 0/1 label vectors.

  Reads the file only: the loaders look for the images it lists.

  Args:
    path: the list file (`train.txt`, `test.txt`, `database.txt`, `test0.txt`, ...).
    num_labels: the labels on every line after the path (21 for NUS-WIDE, 100 for ImageNet100).
    image_root: where relative image paths start (`None`: the list's directory).
    one_hot: require exactly one 1 on every line (single-label data sets: ImageNet100).
    path_prefix: what each listed path loses before it is joined to `image_root`: a str, or a
      sequence of str of which each path loses the first it starts with (a last `""` keeps any
      other path as it is); a path that starts with none is an error. `None`: paths kept as
      listed (an absolute one as it is: `image_root` has no effect on it).

  Returns:
    `(paths, labels)`: str `[N]` image paths and int32 `[N, num_labels]` 0/1 labels, in file order.

  Raises:
    FileNotFoundError: no such file.
    ValueError: an empty file, a line that is not a path and `num_labels` labels of 0 or 1 (with
      `one_hot`, exactly one 1), or a path without `path_prefix`, naming the file and the line.
  """
  fn = "read_image_list"
  path = os.fspath(path)
  prefixes = _prefixes(fn, path_prefix)
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(
      f"{fn}: no list file {path!r}; expected HashNet's train.txt, test.txt and database.txt "
      "(one image a line: its path, then its 0/1 labels)."
    )
  root = os.path.dirname(path) if image_root is None else os.fspath(image_root)
  joined, _, labels = _parse_list(fn, path, num_labels, root, one_hot, prefixes)
  return np.asarray(joined, dtype=str), labels


def _check_images(fn: str, lists: Sequence[str], joined: list[str], listed: list[str]) -> None:
  """One `FileNotFoundError` if images of `joined` are not on disk: how many, the first as joined
  and as listed, and the part of its listed path above its image's folder that it kept (the fix:
  `path_prefix` that part, `image_root` where the image folders lie). Paths of a remote file
  system (`gs://...`) are not looked for."""
  absent = [i for i, p in enumerate(joined) if "://" not in p and not os.path.isfile(p)]
  if not absent:
    return
  kept = os.path.dirname(os.path.dirname(listed[absent[0]]))
  fix = (
    f"it kept the prefix {kept + '/'!r} above its image's folder: pass path_prefix= the part of "
    "the listed paths to drop and image_root= the folder that holds what follows it"
    if kept
    else "extract the images under image_root"
  )
  raise FileNotFoundError(
    f"{fn}: {len(absent)} of the {len(joined)} images that {', '.join(lists)} list are not on "
    f"disk; first: {joined[absent[0]]!r}, listed as {listed[absent[0]]!r}; {fix}."
  )


def _read_lists(fn, lists, num_labels, *, image_root, path_prefix, one_hot=False):
  """The concatenated `(paths, labels)` of the list files `lists`, every image looked for."""
  prefixes = _prefixes(fn, path_prefix)
  joined, listed, labels = [], [], []
  for path in lists:
    root = os.path.dirname(path) if image_root is None else os.fspath(image_root)
    j, s, y = _parse_list(fn, path, num_labels, root, one_hot, prefixes)
    joined += j
    listed += s
    labels.append(y)
  _check_images(fn, lists, joined, listed)
  return np.asarray(joined, dtype=str), np.concatenate(labels)


def _find(fn: str, candidates: Sequence[str], what: str) -> str:
  for path in candidates:
    if tf.io.gfile.exists(path):
      return path
  raise FileNotFoundError(
    f"{fn}: no list file {' or '.join(repr(c) for c in candidates)}; expected {what}. jaxrank "
    "never downloads."
  )


# The 21-label lists that fit `load_nuswide`, named in its errors.
_NUSWIDE_21_LISTS = (
  "DeepHash-pytorch's data/nuswide_21/{train,test,database}.txt (github.com/swuxyj/"
  "DeepHash-pytorch), or He et al.'s split from NUS-WIDE's Imagelist.txt and AllLabels81.txt "
  "(jaxrank.data.hashing_data.load_nuswide_he2018)"
)


def _labels_on_first_line(path: str) -> int | None:
  with tf.io.gfile.GFile(path) as f:
    for line in f:
      if line.split():
        return len(line.split()) - 1
  return None


def load_nuswide(
  root: str | os.PathLike,
  split: str = "train",
  *,
  image_root: str | os.PathLike | None = None,
  path_prefix: str | Sequence[str] | None = None,
) -> datasets.LabeledImages:
  """NUS-WIDE with its 21 most frequent labels, from 21-label list files in `root`.

  The lists DeepHash-pytorch publishes (swuxyj/DeepHash-pytorch, `data/nuswide_21/`, drawn by
  its `code.py` as He et al. 2018 describe the split, sec. 5.1): `train` (`train.txt`, 500 images
  per label, 10,500), `query` (`test.txt`, 100 per label, 2,100) and `database` (`database.txt`,
  every image with one of the labels but the queries, the training images included). Their paths
  are `images/<file>.jpg`, under the folder of DSDH_PyTorch's NUS-WIDE release that
  DeepHash-pytorch reads (`image_root`). Labels are multi-hot `[N, 21]`: relevance is "shares at
  least one label", and the number of shared labels is NDCG's graded affinity
  (`jaxrank.evaluate_hashing`). HashNet's NUS-WIDE lists (`pytorch/data/nuswide_81/`) hold 81
  labels, another split (10,000 / 5,000 images, 2,185 and 1,131 of them without a label): they
  are refused with an error naming the lists that fit.

  Args:
    root: the directory holding `train.txt`, `test.txt` and `database.txt`.
    split: `"train"`, `"query"` or `"database"`.
    image_root: where the lists' relative image paths start (`None`: `root`).
    path_prefix: what each listed path loses first (as `read_image_list`; `None`: nothing).

  Returns:
    `LabeledImages` of image paths with int32 multi-hot labels `[N, 21]`.

  Raises:
    FileNotFoundError: no list file, or images it lists are not on disk (one error, naming the
      first).
    ValueError: 81-label lists (naming the right files), or as `read_image_list`.
  """
  fn = "load_nuswide"
  _check_split(fn, split)
  path = os.path.join(os.fspath(root), LIST_FILES[split])
  if tf.io.gfile.exists(path) and _labels_on_first_line(path) == NUSWIDE_ALL_LABELS:
    raise ValueError(
      f"{fn}: {path} lists 81 labels a line: HashNet's NUS-WIDE split of the 81 concepts "
      f"(thuml/HashNet, pytorch/data/nuswide_81/), not the 21-label one. Use {_NUSWIDE_21_LISTS}."
    )
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(f"{fn}: no list file {path!r}; expected {_NUSWIDE_21_LISTS}.")
  paths, labels = _read_lists(
    fn, [path], NUSWIDE_LABELS, image_root=image_root or root, path_prefix=path_prefix
  )
  return datasets.LabeledImages(images=paths, labels=labels, image_format="path")


# ---------------------------------------------------------------------------------------------
# He et al.'s split of NUS-WIDE, from the data set's own files.


def _read_image_names(fn: str, path: str) -> list[str]:
  """`Imagelist.txt`'s paths, relative to the data set's folder (`Flickr/<tag>/<file>.jpg`)."""
  with tf.io.gfile.GFile(path) as f:
    lines = f.read().splitlines()
  names = []
  for number, line in enumerate(lines, start=1):
    name = line.strip()
    if not name:
      continue
    if len(name.split()) != 1:
      raise ValueError(
        f"{fn}: {path}, line {number}: expected one image path ('{NUSWIDE_IMAGE_PREFIX}Flickr"
        f"\\<tag>\\<file>.jpg'), got {line[:80]!r}; is it NUS-WIDE's Imagelist.txt?"
      )
    if name.startswith(NUSWIDE_IMAGE_PREFIX):
      name = name[len(NUSWIDE_IMAGE_PREFIX) :]
    names.append(name.replace("\\", "/"))
  return names


def _read_label_matrix(fn: str, path: str, num_labels: int) -> np.ndarray:
  """`[N, num_labels]` uint8 0/1 labels of a text matrix, one row a line, single-digit 0/1
  entries separated by whitespace (`AllLabels81.txt`), parsed without a Python object a value."""
  with tf.io.gfile.GFile(path, "rb") as f:
    data = np.frombuffer(f.read(), np.uint8)
  digit = (data == ord("0")) | (data == ord("1"))
  other = ~(digit | np.isin(data, np.frombuffer(b" \t\r\n", np.uint8)))
  other[1:] |= digit[1:] & digit[:-1]  # "10" or "01": a value that is not one 0/1 digit.
  starts = np.concatenate([[0], np.flatnonzero(data == ord("\n")) + 1])
  starts = starts[starts < len(data)]  # No empty line after the file's last newline.
  per_line = np.add.reduceat(digit, starts, dtype=np.int64) if len(starts) else starts
  short = (per_line != 0) & (per_line != num_labels)
  if other.any() or short.any():
    first = min(
      int(np.argmax(other)) if other.any() else len(data),
      int(starts[np.argmax(short)]) if short.any() else len(data),
    )
    number = int(np.count_nonzero(data[:first] == ord("\n"))) + 1
    raise ValueError(
      f"{fn}: {path}, line {number}: expected {num_labels} labels of 0 or 1 separated by spaces; "
      "is it NUS-WIDE's AllLabels81.txt?"
    )
  return (data[digit] - ord("0")).reshape(-1, num_labels)


def nuswide_split_indices(
  labels: np.ndarray,
  *,
  seed: int = 0,
  queries_per_label: int | None = None,
  train_per_label: int | None = None,
) -> dict[str, np.ndarray]:
  """He et al.'s split of NUS-WIDE (kunhe/TALR, `+imdb/split_nus.m`, setting 1): indices.

  For each label in turn (column 0 first), the images with that label not drawn yet are permuted
  at random: the first `queries_per_label` (100) are queries, the next `train_per_label` (500)
  training images. The database is every image but the queries (the training images and those
  never drawn). One `np.random.default_rng(seed)` draws (TALR's Matlab `randperm` draws other
  images: the same rule, not the same split). Indices come sorted.

  Args:
    labels: `[N, L]` 0/1 labels (the 21 labels, each image with at least one).
    seed: the seed of the draws.
    queries_per_label: queries per label (`None`: 100).
    train_per_label: training images per label (`None`: 500).

  Returns:
    `{"train": ..., "query": ..., "database": ...}`, int64 index arrays.

  Raises:
    ValueError: a label with fewer images left than it draws.
  """
  q = NUSWIDE_QUERIES_PER_LABEL if queries_per_label is None else queries_per_label
  t = NUSWIDE_TRAIN_PER_LABEL if train_per_label is None else train_per_label
  labels = np.asarray(labels) > 0
  rng = np.random.default_rng(seed)
  chosen = np.zeros(len(labels), bool)
  query, train = [], []
  for c in range(labels.shape[1]):
    candidates = np.flatnonzero(labels[:, c] & ~chosen)
    if len(candidates) < q + t:
      raise ValueError(
        f"nuswide_split_indices: label {c} has {len(candidates)} images not drawn yet, fewer than "
        f"{q} queries + {t} training images; lower queries_per_label or train_per_label."
      )
    drawn = rng.permutation(candidates)
    query.append(drawn[:q])
    train.append(drawn[q : q + t])
    chosen[drawn[: q + t]] = True
  query_index = np.sort(np.concatenate(query))
  return {
    "train": np.sort(np.concatenate(train)),
    "query": query_index,
    "database": np.setdiff1d(np.arange(len(labels)), query_index),
  }


def nuswide_he2018_splits(
  root: str | os.PathLike,
  *,
  seed: int = 0,
  queries_per_label: int | None = None,
  train_per_label: int | None = None,
) -> dict[str, datasets.LabeledImages]:
  """Every split of `load_nuswide_he2018` from one read of the files: `{"train": ..., "query":
  ..., "database": ...}` (arguments and errors as `load_nuswide_he2018`)."""
  fn = "load_nuswide_he2018"
  root = os.fspath(root)
  names_path, labels_path = (os.path.join(root, name) for name in NUSWIDE_FILES)
  for path in (names_path, labels_path):
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(
        f"{fn}: no file {path!r}; expected NUS-WIDE's Imagelist.txt (ImageList.zip) and "
        "AllLabels81.txt (its 81 Groundtruth/AllLabels files side by side, as TALR's "
        "data/NUSWIDE/ holds them) beside Flickr/. jaxrank never downloads."
      )
  names = _read_image_names(fn, names_path)
  all_labels = _read_label_matrix(fn, labels_path, NUSWIDE_ALL_LABELS)
  if len(names) != len(all_labels):
    raise ValueError(
      f"{fn}: {names_path} lists {len(names)} images but {labels_path} {len(all_labels)} label "
      "rows; they must be the files of one NUS-WIDE release."
    )
  # TALR +imdb/nus.m: the 21 most frequent concepts (a stable sort, as Matlab's), then the
  # images that carry one of them.
  frequent = np.argsort(-all_labels.sum(axis=0, dtype=np.int64), kind="stable")[:NUSWIDE_LABELS]
  labels = all_labels[:, frequent].astype(np.int32)
  keep = np.flatnonzero(labels.any(axis=1))
  joined = [os.path.join(root, names[i]) for i in keep.tolist()]
  _check_images(fn, [names_path], joined, [names[i] for i in keep.tolist()])
  everything = datasets.LabeledImages(
    images=np.asarray(joined, dtype=str), labels=labels[keep], image_format="path"
  )
  index = nuswide_split_indices(
    everything.labels,
    seed=seed,
    queries_per_label=queries_per_label,
    train_per_label=train_per_label,
  )
  return {split: datasets.select(everything, rows) for split, rows in index.items()}


def load_nuswide_he2018(
  root: str | os.PathLike,
  split: str = "train",
  *,
  seed: int = 0,
  queries_per_label: int | None = None,
  train_per_label: int | None = None,
) -> datasets.LabeledImages:
  """NUS-WIDE in He et al. 2018's split, drawn from the data set's files in `root`.

  As He et al.'s code builds it (kunhe/TALR, `+imdb/nus.m` then `+imdb/split_nus.m`): NUS-WIDE's
  `Imagelist.txt` (269,648 paths `C:\\ImageData\\Flickr\\<tag>\\<file>.jpg`, taken under `root`
  without `C:\\ImageData\\`) and `AllLabels81.txt` (a row of 81 0/1 concept labels per image); the
  21 concepts with the most images (ties in file order), the images with one of them (195,834 in
  He et al.'s and DeepHash-pytorch's count), split by `nuswide_split_indices`: `query` 2,100,
  `train` 10,500, `database` every image but the queries (193,734 of 195,834, the training
  images included). Labels are multi-hot `[N, 21]`, the columns in decreasing frequency.

  Layout (TALR's `data/NUSWIDE/`)::

    <root>/Imagelist.txt
    <root>/AllLabels81.txt
    <root>/Flickr/<tag>/<file>.jpg

  Args:
    root: the directory holding the two files and `Flickr/`.
    split: `"train"`, `"query"` or `"database"`.
    seed: the seed of the draws.
    queries_per_label: queries per label (`None`: 100; smaller for tests).
    train_per_label: training images per label (`None`: 500).

  Returns:
    `LabeledImages` of image paths with int32 multi-hot labels `[N, 21]`.

  Raises:
    FileNotFoundError: a file, or images `Imagelist.txt` lists (with one of the labels), missing.
    ValueError: a malformed line (naming the file and line), files of different lengths, or a
      label with too few images.
  """
  _check_split("load_nuswide_he2018", split)
  splits = nuswide_he2018_splits(
    root, seed=seed, queries_per_label=queries_per_label, train_per_label=train_per_label
  )
  return splits[split]


# ---------------------------------------------------------------------------------------------
# ImageNet100: HashNet's PyTorch or Caffe lists.


def imagenet100_list_files(root: str | os.PathLike, split: str) -> list[str]:
  """The list files `load_imagenet100` reads for `split`, in the order it concatenates them.

  `train`: `train.txt`. `query` and `database`: the PyTorch list (`test.txt`, `database.txt`) if
  `root` holds it, else the eight Caffe parts (`test0.txt` ... `test7.txt`, `database0.txt` ...
  `database7.txt`), in `root` or in `root/test/` (where HashNet's `caffe/data/imagenet/` keeps
  them; TALR's `data/ImageNet/` holds them beside `train.txt`).

  Raises:
    FileNotFoundError: neither layout's files, or only some of the eight parts, naming them.
  """
  fn = "load_imagenet100"
  _check_split(fn, split)
  root = os.fspath(root)
  single = os.path.join(root, LIST_FILES[split])
  if split == "train" or tf.io.gfile.exists(single):
    return [_find(fn, [single], "HashNet's ImageNet100 train.txt (thuml/HashNet)")]
  stem = LIST_FILES[split].removesuffix(".txt")
  names = [f"{stem}{i}.txt" for i in range(CAFFE_PARTS)]
  for folder in (root, os.path.join(root, "test")):
    found = [tf.io.gfile.exists(os.path.join(folder, n)) for n in names]
    if all(found):
      return [os.path.join(folder, n) for n in names]
    if any(found):
      missing = [n for n, f in zip(names, found) if not f]
      raise FileNotFoundError(
        f"{fn}: {folder!r} holds some of HashNet's Caffe lists {stem}0.txt ... {stem}7.txt but "
        f"not {missing}; download caffe/data/imagenet/test/ of thuml/HashNet again."
      )
  raise FileNotFoundError(
    f"{fn}: no list {single!r}, nor {stem}0.txt ... {stem}7.txt in {root!r} or its test/; "
    "expected HashNet's ImageNet100 lists (thuml/HashNet, pytorch/data/imagenet/ or "
    "caffe/data/imagenet/). jaxrank never downloads."
  )


def load_imagenet100(
  root: str | os.PathLike,
  split: str = "train",
  *,
  image_root: str | os.PathLike | None = None,
  path_prefix: str | Sequence[str] | None = None,
) -> datasets.LabeledImages:
  """ImageNet100 (HashNet's 100 ImageNet classes) from HashNet's list files in `root`.

  The splits of HashNet (Cao et al. 2017), which He et al. 2018 follow (sec. 5.1; evaluated by
  mAP@1000): `train` (`train.txt`, 13,000 images, 130 per class), `query` (5,000 ILSVRC 2012
  validation images, 50 per class) and `database` (128,503 training images of the classes, the
  13,000 among them), from the PyTorch lists or the eight Caffe parts, concatenated in order
  (`imagenet100_list_files`). Each line's label is a one-hot vector of 100; labels are its index
  (0-99). The PyTorch lists' paths start with the authors' folder
  (`/home/caozhangjie/run-czj/dataset/imagenet/`), the Caffe lists' with `./data/imagenet/`:
  `path_prefix=HASHNET_IMAGENET_PREFIXES` drops either, and `image_root` is then the folder that
  holds `image/` and `val_image/`.

  Args:
    root: the directory holding the lists.
    split: `"train"`, `"query"` or `"database"`.
    image_root: where the image paths (after `path_prefix`) start (`None`: `root`).
    path_prefix: what each listed path loses before it is joined to `image_root` (a str, or a
      sequence of which a path loses the first it starts with; as `read_image_list`). `None`:
      paths kept as listed, so an absolute path keeps the authors' folder.

  Returns:
    `LabeledImages` of image paths with int32 class labels `[N]`.

  Raises:
    FileNotFoundError: no list (`imagenet100_list_files`), or listed images not on disk (one
      error naming the first and the prefix its path kept).
    ValueError: as `read_image_list` (the vectors must be one-hot; a path without `path_prefix`).
  """
  fn = "load_imagenet100"
  lists = imagenet100_list_files(root, split)
  paths, one_hot = _read_lists(
    fn,
    lists,
    IMAGENET100_CLASSES,
    image_root=root if image_root is None else image_root,
    path_prefix=path_prefix,
    one_hot=True,
  )
  labels = np.argmax(one_hot, axis=1).astype(np.int32)
  return datasets.LabeledImages(images=paths, labels=labels, image_format="path")
