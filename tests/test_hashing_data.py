"""Tests of the hashing data sets (`jaxrank/data/hashing_data.py`): CIFAR-10 (tfds, mocked) in
He et al.'s two settings as TALR's `split_cifar.m` draws them, NUS-WIDE (DeepHash-pytorch's
21-label lists; He et al.'s split from NUS-WIDE's own files, after TALR's `split_nus.m`) and
ImageNet100 (HashNet's PyTorch and Caffe lists), written by `jaxrank.data.testing` in the
published files' line format (small, or the lists alone at full size).

Nothing downloads: CIFAR-10 runs under `testing.mock_retrieval_data`, the list files and images
are written in tmp_path.
"""

from __future__ import annotations

import functools
import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import jaxrank.data as jd  # noqa: E402
from jaxrank.data import hashing_data  # noqa: E402
from jaxrank.data import testing  # noqa: E402

# The line shapes of the published lists (swuxyj/DeepHash-pytorch data/nuswide_21/train.txt and
# thuml/HashNet pytorch/data/imagenet/train.txt, caffe/data/imagenet/test/test0.txt, at the
# commits docs/guide/papers.rst names): a path, then the labels, single spaces, a newline each.
NUSWIDE_21_LINE = re.compile(r"images/\d{4}_\d+\.jpg( [01]){21}")
IMAGENET_PYTORCH_LINE = re.compile(
  r"/home/caozhangjie/run-czj/dataset/imagenet/(image/n\d{8}_\d+|val_image/ILSVRC2012_val_\d{8})"
  r"\.JPEG( [01]){100}"
)
IMAGENET_CAFFE_LINE = re.compile(
  r"\./data/imagenet/(image/n\d{8}_\d+|val_image/ILSVRC2012_val_\d{8})\.JPEG( [01]){100}"
)
NUSWIDE_IMAGE_LINE = re.compile(r"C:\\ImageData\\Flickr\\[a-z_]+\\\d{4}_\d+\.jpg")


def _lines(path) -> list[str]:
  with open(path, encoding="utf-8", newline="") as f:
    text = f.read()
  assert text.endswith("\n")
  return text[:-1].split("\n")


def _split_cifar_m(labels, test_per_class, train_per_class, rng):
  """kunhe/TALR `+imdb/split_cifar.m` (9a93296) transcribed: per class (1 to 10, here 0 to 9) a
  permutation, its first `test_per_class` the test set (3), the next `train_per_class` (or, if
  0, all the rest) the training set (1), the others val (2); Matlab's `randperm` replaced by
  `rng.permutation`, 1-based indices by 0-based ones."""
  s = np.full(len(labels), 2)
  for c in range(10):
    ind = np.flatnonzero(labels == c)
    ind = ind[rng.permutation(len(ind))]
    itest = ind[:test_per_class]
    itrain = ind[test_per_class:] if train_per_class <= 0 else None
    s[itest] = 3
    if itrain is not None:
      s[itrain] = 1
  return s


def test_cifar10_split_indices_at_the_papers_sizes():
  # 50,000 (tfds train) then 10,000 (tfds test) labels, every class in each.
  labels = np.concatenate([np.tile(np.arange(10), 5000), np.tile(np.arange(10), 1000)])
  one = hashing_data.cifar10_split_indices(labels, setting=1, seed=3)
  assert [len(one[s]) for s in ("query", "database", "train")] == [1000, 59000, 5000]
  assert np.all(np.bincount(labels[one["query"]]) == 100)
  assert np.all(np.bincount(labels[one["train"]]) == 500)
  assert not np.intersect1d(one["query"], one["database"]).size
  assert np.all(np.isin(one["train"], one["database"]))
  again = hashing_data.cifar10_split_indices(labels, setting=1, seed=3)
  other = hashing_data.cifar10_split_indices(labels, setting=1, seed=4)
  assert all(np.array_equal(one[s], again[s]) for s in one)
  assert not np.array_equal(one["query"], other["query"])
  # Setting 2 as TALR draws it: 1,000 queries per class from all 60,000, the rest the database
  # and the training set.
  two = hashing_data.cifar10_split_indices(labels, setting=2, seed=3)
  assert [len(two[s]) for s in ("query", "database", "train")] == [10000, 50000, 50000]
  assert np.all(np.bincount(labels[two["query"]]) == 1000)
  np.testing.assert_array_equal(two["train"], two["database"])
  assert np.setdiff1d(np.arange(60000), two["query"]).tolist() == two["database"].tolist()
  assert (two["query"] < 50000).any() and (two["query"] >= 50000).any()  # From both tfds parts.
  talr = _split_cifar_m(labels, 1000, 0, np.random.default_rng(3))
  np.testing.assert_array_equal(two["query"], np.flatnonzero(talr == 3))
  np.testing.assert_array_equal(two["train"], np.flatnonzero(talr == 1))
  tfds = hashing_data.cifar10_split_indices(labels, setting=2, queries="tfds_test")
  assert [len(tfds[s]) for s in ("query", "database", "train")] == [10000, 50000, 50000]
  assert tfds["query"][0] == 50000
  with pytest.raises(ValueError, match="setting must be 1 or 2"):
    hashing_data.cifar10_split_indices(labels, setting=3)
  with pytest.raises(ValueError, match="queries must be one of"):
    hashing_data.cifar10_split_indices(labels, setting=1, queries="tfds_test")
  with pytest.raises(ValueError, match="queries must be one of"):
    hashing_data.cifar10_split_indices(labels, setting=2, queries="test")
  with pytest.raises(ValueError, match="train_per_class must be None"):
    hashing_data.cifar10_split_indices(labels, setting=2, train_per_class=500)


def test_load_cifar10_from_mocked_tfds():
  mock = functools.partial(
    testing.mock_retrieval_data, classes_per_split=10, images_per_class=3, image_size=(32, 32)
  )
  sizes = dict(queries_per_class=2, train_per_class=2)
  with mock():
    one = hashing_data.cifar10_splits("/nonexistent", setting=1, seed=0, **sizes)
    two = hashing_data.cifar10_splits("/nonexistent", setting=2, queries_per_class=2)
    tfds = hashing_data.cifar10_splits("/nonexistent", setting=2, queries="tfds_test")
    query = jd.load_cifar10("/nonexistent", "query", setting=1, seed=0, **sizes)
  assert one["query"].num_examples == 20 and one["database"].num_examples == 40
  assert np.all(np.bincount(one["train"].labels) == 2)
  assert np.all(np.bincount(one["query"].labels) == 2)
  assert one["query"].image_format == "encoded"
  assert query.images.tolist() == one["query"].images.tolist()  # Seeded: the same draw.
  assert set(one["train"].images.tolist()) <= set(one["database"].images.tolist())
  assert (two["query"].num_examples, two["database"].num_examples) == (20, 40)
  assert two["train"].images.tolist() == two["database"].images.tolist()
  assert (tfds["query"].num_examples, tfds["database"].num_examples) == (30, 30)
  with pytest.raises(ValueError, match="too few"):
    hashing_data.cifar10_split_indices(one["query"].labels, setting=1, queries_per_class=4)


# ---------------------------------------------------------------------------------------------
# NUS-WIDE: DeepHash-pytorch's 21-label lists.


def test_nuswide_lists_load_and_feed_the_pipeline(tmp_path):
  root = testing.write_nuswide(tmp_path, sizes=(21, 5, 30))
  for name in ("train.txt", "test.txt", "database.txt"):
    assert all(NUSWIDE_21_LINE.fullmatch(line) for line in _lines(os.path.join(root, name)))
  data = {s: jd.load_nuswide(root, s) for s in hashing_data.SPLITS}
  assert [data[s].labels.shape for s in hashing_data.SPLITS] == [(21, 21), (5, 21), (51, 21)]
  # DeepHash-pytorch's database: everything but the queries, the training images first.
  assert data["database"].images[:21].tolist() == data["train"].images.tolist()
  assert not set(data["query"].images.tolist()) & set(data["database"].images.tolist())
  assert data["train"].num_classes == 21 and data["train"].image_format == "path"
  assert np.all(data["database"].labels.sum(axis=1) >= 1)
  assert os.path.exists(data["query"].images[0])
  batches = functools.partial(jd.sequential_batches, 5, batch_size=4)
  ds = jd.make_pipeline(data["query"], lambda epoch: batches(), preprocess_fn=None)
  last = list(ds.take(2).as_numpy_iterator())[-1]
  assert last["label"].shape == (4, 21) and np.all(last["label"][1:] == -1)
  np.testing.assert_array_equal(last["label"][0], data["query"].labels[4])


def test_nuswide_refuses_hashnets_81_label_lists_naming_the_right_files(tmp_path):
  # thuml/HashNet pytorch/data/nuswide_81/train.txt's shape: a path and 81 labels.
  line = "./data/nuswide_81/images/98796_381708603_f86eb60ccf_m.jpg " + " ".join(["0"] * 81)
  (tmp_path / "train.txt").write_text(line + "\n")
  with pytest.raises(ValueError, match=r"81 labels.*DeepHash-pytorch's data/nuswide_21/"):
    jd.load_nuswide(tmp_path, "train")
  with pytest.raises(FileNotFoundError, match=r"test.txt.*DeepHash-pytorch"):
    jd.load_nuswide(tmp_path, "query")


def test_nuswide_missing_images_are_one_error(tmp_path):
  root = testing.write_nuswide(tmp_path, sizes=(21, 5, 3))
  images = jd.load_nuswide(root, "query").images
  os.remove(images[2])
  os.remove(images[3])
  with pytest.raises(FileNotFoundError, match=r"2 of the 5 images .*test.txt.* first: .*images/"):
    jd.load_nuswide(root, "query")


# ---------------------------------------------------------------------------------------------
# NUS-WIDE: He et al.'s split, from the data set's own files.


def _split_nus_m(labels, test_per_cls, train_per_cls, rng):
  """kunhe/TALR `+imdb/split_nus.m` (9a93296, setting 1) transcribed: per label (in column
  order) the images with it not chosen yet, permuted, the first `test_per_cls` test (3), the
  next `train_per_cls` train (1), the others val (2); `randperm` replaced by `rng.permutation`."""
  n, num_labels = labels.shape
  s = np.full(n, 2)
  chosen = np.zeros(n, bool)
  for c in range(num_labels):
    ind = np.flatnonzero((labels[:, c] > 0) & ~chosen)
    ind = ind[rng.permutation(len(ind))]
    assert len(ind) >= train_per_cls + test_per_cls
    itest = ind[:test_per_cls]
    itrain = ind[test_per_cls : train_per_cls + test_per_cls]
    s[itest] = 3
    s[itrain] = 1
    chosen[np.concatenate([itest, itrain])] = True
  return s


def test_nuswide_split_indices_equal_talrs_rule_at_full_size():
  # 195,834 images with 1 to 3 of the 21 labels: the size of He et al.'s NUS-WIDE.
  rng = np.random.default_rng(0)
  labels = np.zeros((195834, 21), np.int8)
  labels[np.arange(195834), rng.integers(0, 21, 195834)] = 1
  labels[np.arange(195834), rng.integers(0, 21, 195834)] = 1
  split = hashing_data.nuswide_split_indices(labels, seed=5)
  assert [len(split[s]) for s in ("query", "train", "database")] == [2100, 10500, 193734]
  assert np.all(np.isin(split["train"], split["database"]))
  talr = _split_nus_m(labels, 100, 500, np.random.default_rng(5))
  np.testing.assert_array_equal(split["query"], np.flatnonzero(talr == 3))
  np.testing.assert_array_equal(split["train"], np.flatnonzero(talr == 1))
  np.testing.assert_array_equal(split["database"], np.flatnonzero(talr != 3))
  with pytest.raises(ValueError, match="label 0 has 3 images"):
    hashing_data.nuswide_split_indices(np.ones((3, 21)), queries_per_label=2, train_per_label=2)


@pytest.mark.parametrize("crlf", [False, True])
def test_nuswide_he2018_from_imagelist_and_alllabels81(tmp_path, crlf):
  labels = testing.write_nuswide_he2018(tmp_path, images=120, unlabelled=10, crlf=crlf)
  listed = _lines(tmp_path / "Imagelist.txt")
  assert all(NUSWIDE_IMAGE_LINE.fullmatch(line.removesuffix("\r")) for line in listed)
  assert all(line.endswith("\r") == crlf for line in listed)
  sizes = dict(queries_per_label=1, train_per_label=2)
  splits = hashing_data.nuswide_he2018_splits(tmp_path, seed=1, **sizes)
  assert [splits[s].num_examples for s in ("query", "train", "database")] == [21, 42, 99]
  # The 21 most frequent columns, most frequent first (a stable sort), the others dropped.
  counts = labels.sum(axis=0)
  order = np.argsort(-counts, kind="stable")[:21]
  assert set(order.tolist()) == set(range(40, 61))
  index = _split_nus_m(labels[:, order], 1, 2, np.random.default_rng(1))
  np.testing.assert_array_equal(splits["query"].labels, labels[index == 3][:, order])
  assert splits["query"].images[0].startswith(str(tmp_path / "Flickr"))
  assert all(os.path.isfile(p) for p in splits["database"].images)
  query = hashing_data.load_nuswide_he2018(tmp_path, "query", seed=1, **sizes)
  assert query.images.tolist() == splits["query"].images.tolist()


def test_nuswide_he2018_errors_name_the_file_and_line(tmp_path):
  with pytest.raises(FileNotFoundError, match="Imagelist.txt"):
    hashing_data.load_nuswide_he2018(tmp_path)
  testing.write_nuswide_he2018(tmp_path, images=63, unlabelled=0)
  labels = tmp_path / "AllLabels81.txt"
  rows = labels.read_text().splitlines()
  labels.write_text("\n".join(rows[:3] + [rows[3][:-2]] + rows[4:]) + "\n")
  with pytest.raises(ValueError, match=r"AllLabels81.txt, line 4: expected 81 labels"):
    hashing_data.load_nuswide_he2018(tmp_path)
  labels.write_text("\n".join(rows[:5] + [rows[5].replace("0", "2", 1)] + rows[6:]) + "\n")
  with pytest.raises(ValueError, match=r"line 6: expected 81 labels"):
    hashing_data.load_nuswide_he2018(tmp_path)
  labels.write_text("\n".join(rows[:-1]) + "\n")
  with pytest.raises(ValueError, match="lists 63 images but .* 62 label rows"):
    hashing_data.load_nuswide_he2018(tmp_path)
  labels.write_text("\n".join(rows) + "\n")
  with pytest.raises(ValueError, match="label 8 has 3 images not drawn yet"):
    hashing_data.load_nuswide_he2018(tmp_path, queries_per_label=2, train_per_label=2)


# ---------------------------------------------------------------------------------------------
# ImageNet100: HashNet's PyTorch and Caffe lists.


def test_imagenet100_pytorch_lists_lose_the_authors_prefix(tmp_path):
  root = testing.write_imagenet100(tmp_path, images_per_class=(1, 1, 1), num_classes=3)
  for name in ("train.txt", "test.txt", "database.txt"):
    assert all(IMAGENET_PYTORCH_LINE.fullmatch(line) for line in _lines(tmp_path / name))
  prefix = hashing_data.HASHNET_IMAGENET_PREFIXES
  database = jd.load_imagenet100(root, "database", path_prefix=prefix)
  assert database.labels.tolist() == [0, 1, 2, 0, 1, 2]
  assert database.images[0].startswith(os.path.join(root, "image", "n"))
  query = jd.load_imagenet100(root, "query", path_prefix=prefix[0], image_root=root)
  assert query.images[0].startswith(os.path.join(root, "val_image", "ILSVRC2012_val_"))
  # Without the prefix, the authors' absolute paths are not on disk: one error, naming the
  # prefix the path kept.
  kept = re.escape(repr(prefix[0]))
  with pytest.raises(
    FileNotFoundError, match=rf"3 of the 3 images.*kept the prefix {kept}.*path_prefix="
  ):
    jd.load_imagenet100(root, "query")
  with pytest.raises(ValueError, match=r"train.txt, line 1: the path .* starts with none of"):
    jd.load_imagenet100(root, "train", path_prefix="/data/")
  with pytest.raises(ValueError, match="path_prefix must be a str"):
    jd.load_imagenet100(root, "train", path_prefix=[1])


def test_imagenet100_caffe_lists_are_concatenated_in_order(tmp_path):
  root = testing.write_imagenet100(
    tmp_path, images_per_class=(2, 3, 3), num_classes=4, layout="caffe"
  )
  parts = [tmp_path / "test" / f"database{i}.txt" for i in range(8)]
  assert [len(_lines(p)) for p in parts] == [3] * 4 + [2] * 4  # 20 lines, the first parts longer.
  assert all(IMAGENET_CAFFE_LINE.fullmatch(line) for p in parts for line in _lines(p))
  assert hashing_data.imagenet100_list_files(root, "database") == [str(p) for p in parts]
  database = jd.load_imagenet100(root, "database", path_prefix="./data/imagenet/")
  as_listed = [
    line.split()[0].removeprefix("./data/imagenet/") for p in parts for line in _lines(p)
  ]
  assert database.images.tolist() == [os.path.join(root, name) for name in as_listed]
  train = jd.load_imagenet100(root, "train", path_prefix="./data/imagenet/")
  assert database.images[:8].tolist() == train.images.tolist()
  assert jd.load_imagenet100(root, "query", path_prefix="./data/imagenet/").num_examples == 12
  os.remove(parts[5])
  with pytest.raises(FileNotFoundError, match=r"not \['database5.txt'\]"):
    jd.load_imagenet100(root, "database", path_prefix="./data/imagenet/")
  with pytest.raises(FileNotFoundError, match=r"no list .*test.txt.*test0.txt ... test7.txt"):
    jd.load_imagenet100(tmp_path / "elsewhere", "query")


def test_imagenet100_lists_at_hashnets_full_size(tmp_path):
  # The Caffe lists at the size HashNet publishes (thuml/HashNet caffe/data/imagenet/): train
  # 13,000, test0-7 5,000 (625 each), database0-7 128,503 (16,063 x 7 + 16,062).
  root = testing.write_imagenet100(
    tmp_path,
    images_per_class=(130, 50, 0),
    num_classes=100,
    layout="caffe",
    database_size=128503,
    write_images=False,
  )
  counts = {}
  for split in hashing_data.SPLITS:
    files = hashing_data.imagenet100_list_files(root, split)
    read = [hashing_data.read_image_list(f, 100, one_hot=True) for f in files]
    counts[split] = [len(paths) for paths, _ in read]
  assert counts == {"train": [13000], "query": [625] * 8, "database": [16063] * 7 + [16062]}


def test_list_file_errors_name_the_file_and_line(tmp_path):
  with pytest.raises(FileNotFoundError, match="test.txt"):
    jd.load_nuswide(tmp_path, "query")
  bad = tmp_path / "test.txt"
  bad.write_text("a.jpg " + " ".join(["0"] * 21) + "\nb.jpg 0 1\n")
  with pytest.raises(ValueError, match=r"test.txt, line 2: expected an image path and 21"):
    jd.load_nuswide(tmp_path, "query")
  bad.write_text("a.jpg " + " ".join(["0"] * 99 + ["2"]) + "\n")
  with pytest.raises(ValueError, match="line 1"):
    jd.load_imagenet100(tmp_path, "query")
  bad.write_text("\na.jpg " + " ".join(["1"] * 2 + ["0"] * 98) + "\n")
  with pytest.raises(ValueError, match=r"line 2: .*one-hot"):
    jd.load_imagenet100(tmp_path, "query")
  with pytest.raises(ValueError, match="split must be one of"):
    jd.load_nuswide(tmp_path, "test")
