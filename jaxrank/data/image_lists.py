"""In-Shop, VehicleID and iNaturalist-2018 from their published lists, in a folder you downloaded.

Three metric-learning data sets that publish their splits as text files listing image paths
(FastAP Tables 2-3, RaMBO Table 4, ROADMAP Tables 1-2). Each loader reads its lists, checks them
and that every listed image exists, and returns a `LabeledImages` of file paths (the pipeline
decodes them; the images are not decoded here: hundreds of thousands of them). Labels keep the
data set's own class ids (an In-Shop item's number, a vehicle id, an iNaturalist category id);
retrieval only compares them. jaxrank never downloads: a missing or malformed file is one error
that names the file and what to do.

**In-Shop Clothes Retrieval** (Liu et al. 2016, DeepFashion), `load_inshop`::

  <root>/Eval/list_eval_partition.txt      (or <root>/list_eval_partition.txt)
  <root>/img/WOMEN/Dresses/id_00000002/02_1_front.jpg ...

The partition file's first line is the number of images, its second the header
`image_name item_id evaluation_status`, then one line per image (columns separated by any
whitespace): `img/WOMEN/Dresses/id_00000002/02_1_front.jpg id_00000002 train`. The status is
`train` (25,882 images of 3,997 items), `query` (14,218) or `gallery` (12,612); query and gallery
share the 3,985 test items, and the queries rank the gallery (the counts of Liu et al. and of the
papers; no public copy of the file was found to check them against, and `read_inshop_partition`
is tested on a file written at that size). Classes are items; super-classes the 23 categories
(`MEN/Denim`, `WOMEN/Dresses`, ...), numbered in sorted order of those in the file. An item listed
under two categories (its images in two folders) keeps the category of its first line for all
its images, so that each class lies in one super-class; the images keep their own paths.

**PKU VehicleID** (Liu et al. 2016), `load_vehicleid`::

  <root>/image/<image id>.jpg
  <root>/train_test_split/train_list.txt          (13,164 vehicles, 113,346 images)
  <root>/train_test_split/test_list_800.txt       (small: 800 vehicles, 6,493 images)
  <root>/train_test_split/test_list_1600.txt      (medium: 1,600 vehicles, 13,377 images)
  <root>/train_test_split/test_list_2400.txt      (large: 2,400 vehicles, 19,777 images)
  <root>/attribute/model_attr.txt                 (vehicle id -> model id: 10,309 vehicles)

Each list line is `<image id> <vehicle id>` (image ids of 7 digits, the file names without
`.jpg`: `0279029 23781`); `model_attr.txt` lines are `<vehicle id> <model id>` (`1 237`), for
part of the vehicles only. The small list's counts are those of its public copy (docs/guide/
papers.rst names it), which Liu et al. 2016 also give, with 13,377 and 19,777 for the medium and
large lists (no public copy of those two was found); the train list's are those of the
re-identification loaders that read it (FastAP's text gives 13,134 vehicles and 110,178 images).
`model_attr.txt` (public copy checked) gives 10,309 of the 26,328 vehicles a model, 228 of the
250 model ids (0-249, `model_names.txt`); these are the models the paper means (FastAP's released
`vid.m` reads the colours of `color_attr.txt` into its model ids instead). None of the small
list's 800 vehicles has a model. Classes are vehicles; super-classes their models. The vehicles
without a model share one more super-class, numbered after the models (`max model id + 1`, 250):
so every image of the small list has that super-class, which no evaluation reads (the test
protocol compares vehicles). FastAP fills half of each batch from a modelled category and half
from the unmodelled vehicles, which is what the super-class sampler's batches of the pairs that
include that super-class are (its other pairs draw from two models).

The test protocol (`load_vehicleid`'s docstring): leave-one-out retrieval within each test list.

**iNaturalist-2018 with the splits of Brown et al. 2020** (Smooth-AP; ROADMAP's iNaturalist),
`load_inat2018`::

  <root>/Inat_dataset_splits/Inaturalist_train_set1.txt     (or <root>/Inaturalist_..._set1.txt)
  <root>/Inat_dataset_splits/Inaturalist_test_set1.txt
  <root>/train_val2018/Plantae/7477/<hash>.jpg ...

The lists (Brown et al.'s: a zip that Andrew-Brown1/Smooth_AP's README links to, unpacked in the
iNat folder, read by its `src/datasets.py`) hold one image path per line relative to the iNat root:
`train_val2018/<supercategory>/<category id>/<file>.jpg`, as ROADMAP's reader takes them
(elias-ramzi/ROADMAP, `roadmap/datasets/inaturalist.py`: `<root>/Inat_dataset_splits/`, the class
the path's second-to-last part, the super-class its third-to-last). 70% of the 8,142 categories
train and the other 30% test, class-disjoint; the literature gives 5,690 classes and 325,846
images, and 2,452 classes and 136,093 images (no public copy of the lists was found to check
them). Super-classes are the 14 supercategories of `INAT2018_SUPERCATEGORIES`, numbered in that
(sorted) order.

>>> import jaxrank.data as jd
>>> query = jd.load_inshop("/data/inshop", "query")  # doctest: +SKIP
>>> query.num_examples, query.num_classes  # doctest: +SKIP
(14218, 3985)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import numpy as np

from jaxrank.data.datasets import LabeledImages

INSHOP_SPLITS = ("train", "query", "gallery")
"""The `evaluation_status` values of In-Shop's `list_eval_partition.txt`."""

INSHOP_PARTITION = "list_eval_partition.txt"
"""In-Shop's partition file, in `<root>/Eval/` as published (or in `<root>/`)."""

VEHICLEID_LISTS = {
  "train": "train_list.txt",
  "small": "test_list_800.txt",
  "medium": "test_list_1600.txt",
  "large": "test_list_2400.txt",
}
"""VehicleID's splits and their lists in `<root>/train_test_split/`."""

VEHICLEID_TEST_SPLITS = ("small", "medium", "large")
"""VehicleID's three test lists, by the name the papers give them."""

VEHICLEID_MODELS = os.path.join("attribute", "model_attr.txt")
"""VehicleID's vehicle-to-model file, relative to the root."""

INAT2018_SPLIT_DIR = "Inat_dataset_splits"
"""The folder of Brown et al.'s split lists under the iNat root (the lists may also lie in it)."""

INAT2018_SUPERCATEGORIES = (
  "Actinopterygii",
  "Amphibia",
  "Animalia",
  "Arachnida",
  "Aves",
  "Bacteria",
  "Chromista",
  "Fungi",
  "Insecta",
  "Mammalia",
  "Mollusca",
  "Plantae",
  "Protozoa",
  "Reptilia",
)
"""iNaturalist-2018's 14 supercategories; a super-label is the index of its name here."""


def inat2018_list_name(split: str, set_index: int = 1) -> str:
  """The file name of Brown et al.'s list of `split` (`"train"` or `"test"`), e.g.
  `Inaturalist_train_set1.txt`."""
  return f"Inaturalist_{split}_set{set_index}.txt"


def _read_lines(fn: str, path: str, what: str) -> list[str]:
  """The non-blank lines of `path`, stripped, or an error naming the file and the fix."""
  if not os.path.isfile(path):
    raise FileNotFoundError(
      f"{fn}: no file {path!r}. Download {what} and extract it there as published; jaxrank never "
      "downloads."
    )
  with open(path, encoding="utf-8") as f:
    lines = [line.strip() for line in f if line.strip()]
  if not lines:
    raise ValueError(f"{fn}: {path!r} is empty; download {what} again.")
  return lines


def _malformed(fn: str, path: str, number: int, line: str, expected: str) -> ValueError:
  return ValueError(
    f"{fn}: {path!r}, line {number}: expected {expected}, got {line!r}; is it the file as "
    "published?"
  )


def _image_paths(fn: str, root: str, relative: Sequence[str]) -> np.ndarray:
  """`root/<relative>` for each relative path, each checked to exist."""
  paths = [os.path.join(root, r) for r in relative]
  absent = [p for p in paths if not os.path.isfile(p)]
  if absent:
    raise FileNotFoundError(
      f"{fn}: {len(absent)} of the {len(paths)} images listed are not under {root!r} (first: "
      f"{absent[:3]}); extract the data set's image archives there."
    )
  return np.asarray(paths, dtype=str)


def _first_file(fn: str, candidates: Sequence[str], what: str) -> str:
  """The first of `candidates` that exists, or an error naming them."""
  for path in candidates:
    if os.path.isfile(path):
      return path
  raise FileNotFoundError(
    f"{fn}: no file {' or '.join(repr(c) for c in candidates)}. Download {what} and extract it "
    "there as published; jaxrank never downloads."
  )


def _in_two_super_classes(labels: np.ndarray, super_labels: np.ndarray) -> int | None:
  """The first class of `labels` `[N]` found under two super-classes, or None."""
  pairs = np.unique(np.stack([labels, super_labels], axis=1), axis=0)
  classes, counts = np.unique(pairs[:, 0], return_counts=True)
  return int(classes[counts > 1][0]) if (counts > 1).any() else None


def _number(token: str, prefix: str = "") -> int | None:
  """The integer of `token` (`prefix` removed), or None."""
  if not token.startswith(prefix):
    return None
  digits = token[len(prefix) :]
  return int(digits) if digits.isdigit() else None


# ---------------------------------------------------------------------------------------------
# In-Shop Clothes Retrieval.


@dataclasses.dataclass(frozen=True, eq=False)
class InShopPartition:
  """The lines of In-Shop's `list_eval_partition.txt` in the file's order (`read_inshop_partition`).

  Attributes:
    images: str `[N]` image paths relative to the root (`img/WOMEN/Dresses/id_00000002/...`).
    items: int64 `[N]` item numbers (`id_00000002` is 2).
    categories: str `[N]` each image's category folder (`WOMEN/Dresses`).
    statuses: str `[N]` `train`, `query` or `gallery`.
  """

  images: np.ndarray
  items: np.ndarray
  categories: np.ndarray
  statuses: np.ndarray


def read_inshop_partition(path: str | os.PathLike) -> InShopPartition:
  """Parses In-Shop's `list_eval_partition.txt` (its format: the module docstring).

  Args:
    path: the partition file.

  Returns:
    `InShopPartition` of its lines. No image is looked for.

  Raises:
    FileNotFoundError: no such file.
    ValueError: a first line that is not the number of image lines, a header that is not
      `image_name item_id evaluation_status`, or a line that is not `img/<MEN|WOMEN>/<Category>/
      id_<number>/<file> id_<number> <train|query|gallery>` (or whose item is not its folder's),
      naming the file and the line.
  """
  fn = "read_inshop_partition"
  path = os.fspath(path)
  lines = _read_lines(fn, path, f"In-Shop's {INSHOP_PARTITION}")
  if len(lines) < 2 or lines[1].split() != ["image_name", "item_id", "evaluation_status"]:
    raise ValueError(
      f"{fn}: {path!r} must open with the number of images and the header 'image_name item_id "
      f"evaluation_status'; got {lines[:2]!r}."
    )
  rows = []
  expected = "'img/<MEN|WOMEN>/<Category>/id_<number>/<file> id_<number> <train|query|gallery>'"
  for number, line in enumerate(lines[2:], start=3):
    parts = line.split()
    folders = parts[0].split("/") if len(parts) == 3 else []
    item = _number(parts[1], "id_") if len(parts) == 3 else None
    if (
      len(folders) != 5
      or folders[0] != "img"
      or item is None
      or folders[3] != parts[1]
      or parts[2] not in INSHOP_SPLITS
    ):
      raise _malformed(fn, path, number, line, expected)
    rows.append((parts[0], item, f"{folders[1]}/{folders[2]}", parts[2]))
  if not lines[0].isdigit() or int(lines[0]) != len(rows):
    raise ValueError(
      f"{fn}: {path!r} announces {lines[0]!r} images on its first line but lists "
      f"{len(rows)}; download it again."
    )
  images, items, categories, statuses = zip(*rows) if rows else ((), (), (), ())
  return InShopPartition(
    images=np.asarray(images, dtype=str),
    items=np.asarray(items, dtype=np.int64),
    categories=np.asarray(categories, dtype=str),
    statuses=np.asarray(statuses, dtype=str),
  )


def _item_categories(partition: InShopPartition) -> tuple[np.ndarray, np.ndarray]:
  """`(names, super_labels)`: the sorted category names and each image's super-label, the
  category of its item's first line (an item under two categories keeps its first)."""
  names, per_image = np.unique(partition.categories, return_inverse=True)
  _, first_line, item_of = np.unique(partition.items, return_index=True, return_inverse=True)
  return names, per_image[first_line][item_of]


def load_inshop(root: str | os.PathLike, split: str) -> LabeledImages:
  """In-Shop Clothes Retrieval (DeepFashion) from the published files (layout: the module).

  The protocol of FastAP (Table 2), RaMBO (Table 4) and the papers they compare with: train on
  `"train"`; at test time every `"query"` image ranks the `"gallery"` (not itself, nor the other
  queries: `jaxrank.evaluate_retrieval` with a gallery), relevant iff of the same item.

  Args:
    root: the data set's directory, holding `Eval/list_eval_partition.txt` (or
      `list_eval_partition.txt`) and `img/`.
    split: `"train"`, `"query"` or `"gallery"`.

  Returns:
    `LabeledImages` of the split's image paths, in the file's order; labels are the item
    numbers (`id_00000002` is 2), super-labels the categories (`MEN/Denim`, ...), numbered in
    sorted order of the categories of the whole file (the same numbers in every split); an item
    listed under two categories has the category of its first line (each class in one
    super-class, as the super-class sampler needs; the images keep their own paths).

  Raises:
    FileNotFoundError: no partition file, or images it lists are missing.
    ValueError: an unknown `split`; a malformed line (`read_inshop_partition`); a split without
      any image.
  """
  fn = "load_inshop"
  if split not in INSHOP_SPLITS:
    raise ValueError(f"{fn}: split must be one of {INSHOP_SPLITS}, got {split!r}.")
  root = os.fspath(root)
  path = _first_file(
    fn,
    [os.path.join(root, "Eval", INSHOP_PARTITION), os.path.join(root, INSHOP_PARTITION)],
    f"In-Shop's {INSHOP_PARTITION} (DeepFashion, In-shop Clothes Retrieval Benchmark, Eval/)",
  )
  partition = read_inshop_partition(path)
  _, super_labels = _item_categories(partition)
  keep = partition.statuses == split
  if not keep.any():
    raise ValueError(f"{fn}: {path!r} lists no {split!r} image.")
  return LabeledImages(
    images=_image_paths(fn, root, partition.images[keep].tolist()),
    labels=partition.items[keep].astype(np.int32),
    super_labels=super_labels[keep].astype(np.int32),
    image_format="path",
  )


# ---------------------------------------------------------------------------------------------
# PKU VehicleID.


def _read_pairs(fn: str, path: str, what: str, first: str, second: str) -> np.ndarray:
  """`[n, 2]` rows of a file of `<first> <second>` lines; `second` an integer. The first column
  is kept as text (image ids), the second as int64."""
  pairs = []
  for number, line in enumerate(_read_lines(fn, path, what), start=1):
    parts = line.split()
    if len(parts) != 2 or _number(parts[1]) is None:
      raise _malformed(fn, path, number, line, f"'<{first}> <{second}>' ({second} an integer)")
    pairs.append(parts)
  return np.asarray(pairs, dtype=str).reshape(-1, 2)


def load_vehicleid(root: str | os.PathLike, split: str) -> LabeledImages:
  """PKU VehicleID from the published files (layout: the module), one split.

  **Test protocol.** The metric-learning papers evaluate each test list on its own by
  leave-one-out retrieval: every image of the list queries all the others, relevant iff of the
  same vehicle, and report Recall@1 and Recall@5 for the small, medium and large lists. FastAP's
  text (sec. 5, Table 3) says only that it follows "the standard experimental protocol [Liu et
  al. 2016]" on the three lists, and reports Recall@k (k = 1, 5) beside BIER, A-BIER and DREML,
  metric-learning methods that report the same Recall@k (a hit among a query's nearest other
  test images); the code of Brown et al. 2020 (after Roth et al.'s metric-learning code) also
  evaluates each of the three lists so. Liu et al.'s original protocol instead draws one image of
  each vehicle at random into a gallery and queries it with the others, averaged over repeated
  draws: random, and a different number. jaxrank follows the metric-learning one, deterministic
  and the one FastAP's table is read against: each test split here is one whole test list,
  which `jaxrank.evaluate_retrieval` evaluates without a gallery.

  Args:
    root: the data set's directory, holding `image/`, `train_test_split/` and `attribute/`.
    split: `"train"`, or a test list: `"small"` (800 vehicles), `"medium"` (1,600) or
      `"large"` (2,400).

  Returns:
    `LabeledImages` of the list's image paths (`root/image/<image id>.jpg`), in the list's order;
    labels are the vehicle ids; super-labels the vehicle models of `attribute/model_attr.txt`, and
    for the vehicles without a model one more super-class, `max model id + 1` (see the module;
    with the published files, every image of the small list).

  Raises:
    FileNotFoundError: a list, `model_attr.txt`, or images a list names are missing.
    ValueError: an unknown `split`; a line that is not two fields, the second an integer; a
      vehicle given two models.
  """
  fn = "load_vehicleid"
  if split not in VEHICLEID_LISTS:
    raise ValueError(f"{fn}: split must be one of {tuple(VEHICLEID_LISTS)}, got {split!r}.")
  root = os.fspath(root)
  list_path = os.path.join(root, "train_test_split", VEHICLEID_LISTS[split])
  listed = _read_pairs(
    fn,
    list_path,
    f"VehicleID's train_test_split/{VEHICLEID_LISTS[split]}",
    "image id",
    "vehicle id",
  )
  models_path = os.path.join(root, VEHICLEID_MODELS)
  models = _read_pairs(
    fn, models_path, "VehicleID's attribute/model_attr.txt", "vehicle id", "model id"
  )
  if any(_number(v) is None for v in models[:, 0]):
    bad = next(v for v in models[:, 0] if _number(v) is None)
    raise ValueError(
      f"{fn}: {models_path!r}: vehicle ids must be integers, got {bad!r}; is it the file as "
      "published?"
    )
  vehicles, model_ids = models[:, 0].astype(np.int64), models[:, 1].astype(np.int64)
  model_of: dict[int, int] = {}
  for vehicle, model in zip(vehicles.tolist(), model_ids.tolist()):
    if model_of.setdefault(vehicle, model) != model:
      raise ValueError(
        f"{fn}: {models_path!r} gives vehicle {vehicle} two models ({model_of[vehicle]} and "
        f"{model}); each vehicle has one."
      )
  no_model = int(model_ids.max()) + 1
  labels = listed[:, 1].astype(np.int64)
  super_labels = np.asarray([model_of.get(v, no_model) for v in labels.tolist()], np.int64)
  return LabeledImages(
    images=_image_paths(fn, os.path.join(root, "image"), [f"{i}.jpg" for i in listed[:, 0]]),
    labels=labels.astype(np.int32),
    super_labels=super_labels.astype(np.int32),
    image_format="path",
  )


# ---------------------------------------------------------------------------------------------
# iNaturalist-2018 with Brown et al.'s splits.


def load_inat2018(root: str | os.PathLike, split: str, *, set_index: int = 1) -> LabeledImages:
  """iNaturalist-2018 with the class-disjoint splits of Brown et al. 2020 (layout: the module).

  The lists are ROADMAP's (Ramzi et al. 2021, sec. 4: "the splits from [Brown et al.] with 70%
  of the classes in the train set and the rest in the test set"); the test split is evaluated by
  leave-one-out retrieval, as SOP (ROADMAP reports Recall@1, 4, 16, 32 and mAP@R).

  Args:
    root: the iNaturalist-2018 directory, holding `train_val2018/` and the lists (in
      `Inat_dataset_splits/` or beside `train_val2018/`).
    split: `"train"` or `"test"`.
    set_index: the number in the lists' names (`Inaturalist_train_set1.txt`: 1, the published
      ones).

  Returns:
    `LabeledImages` of the listed image paths, in the list's order; labels are the category ids
    (the path's species folder), super-labels the index of the supercategory in
    `INAT2018_SUPERCATEGORIES`.

  Raises:
    FileNotFoundError: no list, or images it lists are missing.
    ValueError: an unknown `split`; a line that is not `<folder>/<supercategory>/<category
      id>/<file>`, or an unknown supercategory; a category under two supercategories.
  """
  fn = "load_inat2018"
  if split not in ("train", "test"):
    raise ValueError(f"{fn}: split must be 'train' or 'test' (class-disjoint), got {split!r}.")
  if not isinstance(set_index, int) or isinstance(set_index, bool) or set_index < 1:
    raise ValueError(f"{fn}: set_index must be a positive int, got {set_index!r}.")
  root = os.fspath(root)
  name = inat2018_list_name(split, set_index)
  path = _first_file(
    fn,
    [os.path.join(root, INAT2018_SPLIT_DIR, name), os.path.join(root, name)],
    f"Brown et al.'s split list {name} (the zip Andrew-Brown1/Smooth_AP's README links to, "
    "unpacked in the iNat folder)",
  )
  relative = _read_lines(fn, path, f"Brown et al.'s {name}")
  labels, supers = [], []
  for number, line in enumerate(relative, start=1):
    parts = line.split("/")
    category = _number(parts[-2]) if len(parts) >= 4 else None
    if category is None or parts[-3] not in INAT2018_SUPERCATEGORIES:
      raise _malformed(
        fn,
        path,
        number,
        line,
        "'train_val2018/<supercategory>/<category id>/<file>.jpg' with a supercategory of "
        f"{INAT2018_SUPERCATEGORIES}",
      )
    labels.append(category)
    supers.append(INAT2018_SUPERCATEGORIES.index(parts[-3]))
  label_array, super_array = np.asarray(labels, np.int64), np.asarray(supers, np.int64)
  twice = _in_two_super_classes(label_array, super_array)
  if twice is not None:
    raise ValueError(
      f"{fn}: {path!r} lists category {twice} under several supercategories; each category "
      "lies in one."
    )
  return LabeledImages(
    images=_image_paths(fn, root, relative),
    labels=label_array.astype(np.int32),
    super_labels=super_array.astype(np.int32),
    image_format="path",
  )
