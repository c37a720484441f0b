"""Tests of the hashing data sets (`jaxrank/data/hashing_data.py`): CIFAR-10 (tfds, mocked),
NUS-WIDE and ImageNet100 (HashNet's list files, written small by `jaxrank.data.testing`).

Nothing downloads: CIFAR-10 runs under `testing.mock_retrieval_data`, the list files and images
are written in tmp_path.
"""

from __future__ import annotations

import functools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import jaxrank.data as jd  # noqa: E402
from jaxrank.data import hashing_data  # noqa: E402
from jaxrank.data import testing  # noqa: E402


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
  two = hashing_data.cifar10_split_indices(labels, setting=2)
  assert [len(two[s]) for s in ("query", "database", "train")] == [10000, 50000, 50000]
  assert two["query"][0] == 50000
  with pytest.raises(ValueError, match="setting must be 1 or 2"):
    hashing_data.cifar10_split_indices(labels, setting=3)


def test_load_cifar10_from_mocked_tfds():
  mock = functools.partial(
    testing.mock_retrieval_data, classes_per_split=10, images_per_class=3, image_size=(32, 32)
  )
  sizes = dict(queries_per_class=2, train_per_class=2)
  with mock():
    one = hashing_data.cifar10_splits("/nonexistent", setting=1, seed=0, **sizes)
    two = hashing_data.cifar10_splits("/nonexistent", setting=2)
    query = jd.load_cifar10("/nonexistent", "query", setting=1, seed=0, **sizes)
  assert one["query"].num_examples == 20 and one["database"].num_examples == 40
  assert np.all(np.bincount(one["train"].labels) == 2)
  assert np.all(np.bincount(one["query"].labels) == 2)
  assert one["query"].image_format == "encoded"
  assert query.images.tolist() == one["query"].images.tolist()  # Seeded: the same draw.
  assert set(one["train"].images.tolist()) <= set(one["database"].images.tolist())
  assert (two["query"].num_examples, two["database"].num_examples) == (30, 30)
  with pytest.raises(ValueError, match="fewer than"):
    hashing_data.cifar10_split_indices(one["query"].labels, setting=1, queries_per_class=4)


def test_nuswide_lists_load_and_feed_the_pipeline(tmp_path):
  root = testing.write_nuswide(tmp_path, sizes=(21, 5, 30))
  data = {s: jd.load_nuswide(root, s) for s in hashing_data.SPLITS}
  assert [data[s].labels.shape for s in hashing_data.SPLITS] == [(21, 21), (5, 21), (30, 21)]
  assert data["train"].num_classes == 21 and data["train"].image_format == "path"
  assert np.all(data["database"].labels.sum(axis=1) >= 1)
  assert os.path.exists(data["query"].images[0])
  batches = functools.partial(jd.sequential_batches, 5, batch_size=4)
  ds = jd.make_pipeline(data["query"], lambda epoch: batches(), preprocess_fn=None)
  last = list(ds.take(2).as_numpy_iterator())[-1]
  assert last["label"].shape == (4, 21) and np.all(last["label"][1:] == -1)
  np.testing.assert_array_equal(last["label"][0], data["query"].labels[4])


def test_imagenet100_lists_load(tmp_path):
  root = testing.write_imagenet100(tmp_path, images_per_class=(1, 1, 2), num_classes=3)
  database = jd.load_imagenet100(root, "database")
  assert database.labels.tolist() == [0, 0, 1, 1, 2, 2]
  other = tmp_path / "elsewhere"
  moved = jd.load_imagenet100(root, "query", image_root=other)
  assert moved.images[0].startswith(str(other))


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
