"""Tests of `jaxrank.data`: samplers' invariants, data sets that load offline, tf.data pipelines.

Nothing here downloads: the tfds builders run under `tfds.testing.mock_data` (tfds's random
examples, and `jaxrank.data.testing.mock_retrieval_data` for split-aware ones), the image-folder
loader reads PNG and JPEG files the tests write, and the one unmocked builder call reads an empty
`data_dir` to check the error.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_datasets as tfds  # noqa: E402

import jaxrank.data as jd  # noqa: E402
from jaxrank.data import preprocess  # noqa: E402
from jaxrank.data import samplers  # noqa: E402
from jaxrank.data import testing  # noqa: E402

# Its expensive fixtures are session-scoped and its tests kept on one pytest-xdist worker (`make
# test`): a module-scoped fixture is set up again whenever the worker returns to the module.
pytestmark = pytest.mark.xdist_group("test_data")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_jaxrank_does_not_import_tensorflow():
  code = "import jaxrank, sys; assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
  subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)


def test_importing_jaxrank_data_leaves_tensorflow_devices_alone():
  # Hiding the GPUs is the entry points' job
  # (experiments.job.input_pipeline.hide_gpus_from_tensorflow).
  code = (
    "import tensorflow as tf\n"
    "calls = []\n"
    "tf.config.set_visible_devices = lambda *args, **kwargs: calls.append(args)\n"
    "import jaxrank.data\n"
    "assert not calls, f'importing jaxrank.data called set_visible_devices{calls}'\n"
  )
  subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)


# ---------------------------------------------------------------------------------------------
# Samplers.


def _labels_from_sizes(sizes, seed=0):
  """Labels with class `c` of `sizes[c]` images, shuffled, with arbitrary class values."""
  rng = np.random.default_rng(seed)
  values = rng.choice(1000, size=len(sizes), replace=False) - 500  # Negative labels too.
  return rng.permutation(np.repeat(values, sizes))


def _groups(labels, batch, k):
  """The classes of the K-groups of a batch, checking that each group holds one class."""
  grouped = labels[batch].reshape(-1, k)
  assert (grouped == grouped[:, :1]).all(), "a group of K mixes classes"
  return grouped[:, 0]


SIZES = {
  "equal": [4] * 12,
  "uneven": [2, 3, 4, 5, 7, 9, 12, 1, 6, 8],
  "one big class": [40, 4, 4, 5, 3, 4],
  "sop-like": list(np.random.default_rng(1).integers(2, 13, size=300)),
}


@pytest.mark.parametrize("sizes", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize("p,k", [(2, 2), (3, 4), (5, 3)])
def test_m_per_class_batches_invariants(sizes, p, k):
  labels = _labels_from_sizes(sizes)
  counts = dict(zip(*np.unique(labels, return_counts=True)))
  for epoch in range(3):
    b = samplers.m_per_class_batches(
      labels, classes_per_batch=p, samples_per_class=k, seed=3, epoch=epoch
    )
    assert b.dtype == np.int64 and b.ndim == 2 and b.shape[1] == p * k
    for batch in b:
      classes = _groups(labels, batch, k)
      assert len(set(classes.tolist())) == p  # P distinct classes, exactly K images each.
      for c, group in zip(classes, batch.reshape(p, k)):
        # A group repeats an image only when its class is smaller than K, and then evenly.
        uses = np.unique(group, return_counts=True)[1]
        assert uses.max() - uses.min() <= 1
        assert len(uses) == min(k, counts[c])
    # Every image is seen; the extra appearances are exactly the top-ups and the fill of the last
    # round, and fewer than P groups are fills unless one class holds more than 1/P of the groups.
    seen = np.bincount(b.ravel(), minlength=len(labels))
    assert (seen >= 1).all()
    groups = {c: math.ceil(n / k) for c, n in counts.items()}
    top_ups = sum(g * k - counts[c] for c, g in groups.items())
    fills = b.size // k - sum(groups.values())
    assert seen.sum() == len(labels) + top_ups + fills * k
    assert b.shape[0] == max(math.ceil(sum(groups.values()) / p), max(groups.values()))
    if max(groups.values()) <= sum(groups.values()) / p:
      assert 0 <= fills < p


def test_m_per_class_batches_is_a_partition_when_everything_divides():
  labels = _labels_from_sizes([6] * 8)  # 16 groups of 3, 4 groups a batch.
  b = samplers.m_per_class_batches(labels, classes_per_batch=4, samples_per_class=3, seed=0)
  assert b.shape == (4, 12)
  np.testing.assert_array_equal(np.sort(b.ravel()), np.arange(48))


def test_m_per_class_batches_skip_small_classes():
  labels = _labels_from_sizes([2, 3, 4, 5, 8, 1, 4])
  small = np.unique(labels, return_counts=True)
  small = small[0][small[1] < 4]
  for epoch in range(3):
    b = samplers.m_per_class_batches(
      labels,
      classes_per_batch=2,
      samples_per_class=4,
      seed=0,
      epoch=epoch,
      skip_small_classes=True,
    )
    shown = labels[b.ravel()]
    assert not np.isin(shown, small).any()
    usable = np.flatnonzero(~np.isin(labels, small))
    assert np.isin(usable, b.ravel()).all()  # Every image of a usable class, every epoch.
    for batch in b:
      assert len(set(_groups(labels, batch, 4).tolist())) == 2


def test_samplers_are_deterministic_by_seed_and_epoch():
  labels = _labels_from_sizes(SIZES["sop-like"])
  supers = (labels % 5).astype(np.int64)
  fns = [
    functools.partial(
      samplers.m_per_class_batches, labels, classes_per_batch=4, samples_per_class=2
    ),
    functools.partial(
      samplers.super_class_batches,
      labels,
      supers,
      classes_per_batch=4,
      samples_per_class=2,
      batches_per_group=3,
    ),
    functools.partial(samplers.random_batches, len(labels), batch_size=16),
  ]
  for fn in fns:
    a = fn(seed=7, epoch=2)
    np.testing.assert_array_equal(a, fn(seed=7, epoch=2))
    assert not np.array_equal(a, fn(seed=8, epoch=2))
    assert not np.array_equal(a, fn(seed=7, epoch=3))


@pytest.mark.parametrize("s", [1, 2, 3])
def test_super_class_batches_invariants(s):
  rng = np.random.default_rng(0)
  num_supers, p, k, per_group = 5, 6, 2, 3
  class_super = np.arange(40) % num_supers
  sizes = rng.integers(1, 7, size=40)
  labels = np.repeat(np.arange(40) * 10, sizes)
  supers = np.repeat(class_super, sizes) + 100
  b = samplers.super_class_batches(
    labels,
    supers,
    classes_per_batch=p,
    samples_per_class=k,
    super_classes_per_batch=s,
    batches_per_group=per_group,
    seed=1,
  )
  sets = list(itertools.combinations(range(100, 100 + num_supers), s))
  assert b.shape == (len(sets) * per_group, p * k)
  visited = []
  for i, batch in enumerate(b):
    classes = _groups(labels, batch, k)
    assert len(set(classes.tolist())) == p
    groups_supers = supers[batch].reshape(p, k)[:, 0]
    assert len(set(groups_supers.tolist())) == s  # At most (here exactly) S super-classes,
    assert (np.unique(groups_supers, return_counts=True)[1] == p // s).all()  # P / S classes each.
    if i % per_group == 0:
      visited.append(tuple(sorted(set(groups_supers.tolist()))))
    else:  # Consecutive batches for one set of super-classes.
      assert tuple(sorted(set(groups_supers.tolist()))) == visited[-1]
  assert sorted(visited) == sets  # Every set once per epoch.


def test_super_class_batches_shows_a_super_class_fully_before_repeating():
  # 2 super-classes of 6 classes of 4 images; K = 2, 3 classes per super-class per batch: each
  # super-class is 12 groups = 4 batch halves, used in order, so every 4 halves are a permutation.
  labels = np.repeat(np.arange(12), 4)
  supers = labels % 2
  b = samplers.super_class_batches(
    labels, supers, classes_per_batch=6, samples_per_class=2, batches_per_group=12, seed=0
  )
  for g in (0, 1):
    halves = np.concatenate([row[np.isin(row, np.flatnonzero(supers == g))] for row in b])
    for chunk in halves.reshape(-1, 24):
      np.testing.assert_array_equal(np.sort(chunk), np.flatnonzero(supers == g))


def test_random_and_sequential_batches():
  b = samplers.random_batches(103, batch_size=10, seed=0, epoch=1)
  assert b.shape == (10, 10) and len(np.unique(b)) == 100 and b.max() < 103
  np.testing.assert_array_equal(
    samplers.sequential_batches(5, batch_size=3), [[0, 1, 2], [3, 4, -1]]
  )


IMPOSSIBLE = [
  (
    lambda y: samplers.m_per_class_batches(y, classes_per_batch=2, samples_per_class=9),
    "lower samples_per_class to at most 5",
  ),
  (
    lambda y: samplers.m_per_class_batches(y, classes_per_batch=5, samples_per_class=2),
    "lower classes_per_batch",
  ),
  (
    lambda y: samplers.m_per_class_batches(
      y, classes_per_batch=2, samples_per_class=4, skip_small_classes=True
    ),
    "only 1 classes have at least 4 examples",
  ),
  (
    lambda y: samplers.m_per_class_batches(y, classes_per_batch=0, samples_per_class=2),
    "classes_per_batch must be a positive int",
  ),
  (
    lambda y: samplers.super_class_batches(y, y % 2, classes_per_batch=3, samples_per_class=2),
    "must be a multiple of super_classes_per_batch",
  ),
  (
    lambda y: samplers.super_class_batches(y, y % 2, classes_per_batch=6, samples_per_class=2),
    "only 2 classes of super-class 0.*takes .* = 3 classes",
  ),
  (
    lambda y: samplers.super_class_batches(y, y * 0, classes_per_batch=2, samples_per_class=2),
    "only 1 super-classes",
  ),
  (
    lambda y: samplers.super_class_batches(
      y, np.arange(len(y)) % 2, classes_per_batch=2, samples_per_class=2
    ),
    "exactly one super-class",
  ),
  (lambda y: samplers.random_batches(len(y), batch_size=20), "lower batch_size"),
]


@pytest.mark.parametrize("make,message", IMPOSSIBLE)
def test_impossible_requests_raise_clear_errors(make, message):
  labels = np.repeat(np.arange(4), [2, 3, 5, 2])  # 4 classes; super-classes y % 2: {0, 2}, {1, 3}.
  with pytest.raises(ValueError, match=message):
    make(labels)


def test_labels_must_be_integers():
  with pytest.raises(TypeError, match="integers"):
    samplers.m_per_class_batches(np.array([0.0, 1.0]), classes_per_batch=1, samples_per_class=1)


def test_sampler_arguments_use_the_shared_checks():
  labels = np.repeat(np.arange(4), 3)
  m_per_class = functools.partial(samplers.m_per_class_batches, labels)
  # A bool or a float is not a count: TypeError, as for every static int of jaxrank.
  with pytest.raises(TypeError, match="classes_per_batch must be a positive int, got True"):
    m_per_class(classes_per_batch=True, samples_per_class=2)
  with pytest.raises(TypeError, match="samples_per_class must be a positive int, got 2.0"):
    m_per_class(classes_per_batch=2, samples_per_class=2.0)
  with pytest.raises(TypeError, match="super_class_batches: batches_per_group must be"):
    samplers.super_class_batches(
      labels, labels % 2, classes_per_batch=2, samples_per_class=2, batches_per_group=True
    )
  with pytest.raises(TypeError, match="random_batches: num_examples must be a positive int"):
    samplers.random_batches(True, batch_size=1)
  with pytest.raises(TypeError, match="sequential_batches: batch_size must be a positive int"):
    samplers.sequential_batches(5, batch_size=True)
  # seed and epoch: non-negative ints.
  with pytest.raises(ValueError, match="m_per_class_batches: seed must be an int >= 0, got -1"):
    m_per_class(classes_per_batch=2, samples_per_class=2, seed=-1)
  with pytest.raises(TypeError, match="random_batches: epoch must be an int >= 0, got 1.5"):
    samplers.random_batches(10, batch_size=2, epoch=1.5)
  # Labels: a non-empty 1-D integer array; super_labels shaped like them.
  with pytest.raises(ValueError, match="labels must hold at least one class label"):
    samplers.m_per_class_batches(np.array([], np.int64), classes_per_batch=1, samples_per_class=1)
  with pytest.raises(ValueError, match=r"1-D array of class labels \[N\], got shape \(3, 4\)"):
    samplers.m_per_class_batches(labels.reshape(3, 4), classes_per_batch=1, samples_per_class=1)
  with pytest.raises(ValueError, match=r"super_labels must be shaped \(12,\), got shape \(11,\)"):
    samplers.super_class_batches(labels, labels[:-1] % 2, classes_per_batch=2, samples_per_class=2)
  # numpy ints are ints, and give the same batches as Python ints.
  got = m_per_class(
    classes_per_batch=np.int64(2),
    samples_per_class=np.int32(2),
    seed=np.uint8(3),
    epoch=np.int64(1),
  )
  np.testing.assert_array_equal(
    got, m_per_class(classes_per_batch=2, samples_per_class=2, seed=3, epoch=1)
  )


# ---------------------------------------------------------------------------------------------
# Pipelines.


@pytest.fixture(scope="session")
def digits():
  return jd.load_digits("train"), jd.load_digits("test")


def test_load_digits_is_the_class_disjoint_split(digits):
  from sklearn import datasets as sk  # pylint: disable=g-import-not-at-top

  train, test = digits
  assert (train.num_examples, test.num_examples) == (901, 896)
  assert set(train.labels.tolist()) == {0, 1, 2, 3, 4}
  assert set(test.labels.tolist()) == {5, 6, 7, 8, 9}
  assert train.images.shape[1:] == (8, 8, 1) and train.images.dtype == np.float32
  assert train.super_labels is None and train.labels.dtype == np.int32
  raw = sk.load_digits()
  seen = np.isin(raw.target, (0, 1, 2, 3, 4))
  np.testing.assert_array_equal(train.images.reshape(-1, 64), raw.data[seen] / 16.0)
  with pytest.raises(ValueError, match="split must be"):
    jd.load_digits("validation")


def _take(ds, n):
  return list(itertools.islice(ds.as_numpy_iterator(), n))


def test_digits_pipeline_batches(digits):
  train, _ = digits
  sampler = functools.partial(
    jd.m_per_class_batches, train.labels, classes_per_batch=5, samples_per_class=6, seed=0
  )
  epoch0 = sampler(epoch=0)  # 31 batches: about 151 groups of 6, 5 a batch.
  batches = _take(jd.make_pipeline(train, sampler), len(epoch0) + 9)  # Into the second epoch.
  for i, batch in enumerate(batches[: len(epoch0)]):
    np.testing.assert_array_equal(batch["index"], epoch0[i])
  for batch in batches:
    assert batch["image"].shape == (30, 8, 8, 1) and batch["image"].dtype == np.float32
    assert batch["label"].dtype == np.int32 and batch["index"].dtype == np.int64
    np.testing.assert_array_equal(batch["image"], train.images[batch["index"]])
    np.testing.assert_array_equal(batch["label"], train.labels[batch["index"]])
    assert batch["mask"].all() and "super_label" not in batch
    assert len(set(_groups(train.labels, batch["index"], 6).tolist())) == 5
  # The second epoch is epoch 1 of the sampler, not a replay of epoch 0.
  second = np.stack([b["index"] for b in batches[len(epoch0) : 2 * len(epoch0)]])
  np.testing.assert_array_equal(second, sampler(epoch=1)[: len(second)])


def test_eval_pipeline_sees_every_example_once_with_padding(digits):
  _, test = digits
  ds = jd.make_pipeline(
    test, jd.sequential_batches(test.num_examples, batch_size=100), num_epochs=1
  )
  batches = list(ds.as_numpy_iterator())
  assert len(batches) == 9
  index = np.concatenate([b["index"] for b in batches])
  mask = np.concatenate([b["mask"] for b in batches])
  np.testing.assert_array_equal(index[mask], np.arange(896))
  assert (~mask).sum() == 4 and (index[~mask] == -1).all()
  assert (np.concatenate([b["label"] for b in batches])[~mask] == -1).all()


def test_pipeline_raises_before_iterating(digits):
  train, _ = digits
  impossible = functools.partial(
    jd.m_per_class_batches, train.labels, classes_per_batch=6, samples_per_class=4
  )
  with pytest.raises(ValueError, match="lower classes_per_batch"):
    jd.make_pipeline(train, impossible)
  with pytest.raises(ValueError, match="num_batches, B"):
    jd.make_pipeline(train, np.arange(10))
  with pytest.raises(ValueError, match="outside"):
    jd.make_pipeline(train, np.array([[0, 5000]]))
  with pytest.raises(ValueError, match="crop_size=10 must be positive and at most resize_size=8"):
    small = functools.partial(jd.train_preprocess, resize_size=8, crop_size=10)
    jd.make_pipeline(train, np.array([[0, 1]]), preprocess_fn=small)


# The training augmentation of the digits' pipeline tests: 8 x 8 crops of 10 x 10 resizes.
_AUGMENT = functools.partial(
  jd.train_preprocess, resize_size=10, crop_size=8, mean=(0.5,), std=(0.5,)
)


def test_digits_pipeline_with_augmentation_is_deterministic_by_seed(digits):
  train, _ = digits
  batches = jd.random_batches(train.num_examples, batch_size=16, seed=0)

  def images(seed):
    ds = jd.make_pipeline(train, batches, preprocess_fn=_AUGMENT, seed=seed, num_epochs=1)
    return np.stack([b["image"] for b in _take(ds, 3)])

  a = images(0)
  assert a.shape == (3, 16, 8, 8, 1) and a.dtype == np.float32
  np.testing.assert_array_equal(a, images(0))
  assert not np.array_equal(a, images(1))


def test_pipeline_of_some_columns_is_those_columns_of_the_whole_batches(digits):
  """`columns=(start, stop)` (one process's share of a global batch) gives the same examples with
  the same augmentation as those columns of the whole pipeline, across an epoch, resumed."""
  train, _ = digits
  sampler = functools.partial(
    jd.m_per_class_batches, train.labels, classes_per_batch=5, samples_per_class=4, seed=1
  )
  per_epoch = sampler(epoch=0).shape[0]
  start = (0, per_epoch - 2)
  pipeline = functools.partial(
    jd.make_pipeline,
    train,
    sampler,
    preprocess_fn=_AUGMENT,
    seed=2,
    start_epoch=start[0],
    start_batch=start[1],
  )
  whole = _take(pipeline(), 4)
  parts = [_take(pipeline(columns=c), 4) for c in [(0, 7), (7, 8), (8, 20)]]
  for i, batch in enumerate(whole):
    for key in batch:
      np.testing.assert_array_equal(np.concatenate([p[i][key] for p in parts]), batch[key])
  # The augmentation really depends on the place: another place gives another image.
  assert not np.array_equal(parts[0][0]["image"][:1], parts[2][0]["image"][:1])
  for bad in [(0, 21), (5, 5), (-1, 3)]:
    with pytest.raises(ValueError, match=r"columns .* must satisfy 0 <= start < stop <= 20"):
      jd.make_pipeline(train, sampler, columns=bad)
  for bad in [[0, 4], (0.0, 4), (0, 4, 8), (True, 4)]:
    with pytest.raises(TypeError, match=r"make_pipeline: columns must be a tuple \(start, stop\)"):
      jd.make_pipeline(train, sampler, columns=bad)


def test_pipeline_started_mid_run_yields_the_rest_of_the_run(digits):
  """A pipeline started at (epoch, batch) is the tail of one started at (0, 0), augmentation too."""
  train, _ = digits
  sampler = functools.partial(
    jd.m_per_class_batches, train.labels, classes_per_batch=5, samples_per_class=8, seed=3
  )
  per_epoch = sampler(epoch=0).shape[0]
  whole = _take(jd.make_pipeline(train, sampler, preprocess_fn=_AUGMENT, seed=5), per_epoch + 4)
  for epoch, batch in ((0, 3), (1, 0), (1, 2)):
    skipped = epoch * per_epoch + batch
    tail = _take(
      jd.make_pipeline(
        train, sampler, preprocess_fn=_AUGMENT, seed=5, start_epoch=epoch, start_batch=batch
      ),
      len(whole) - skipped,
    )
    assert len(tail) == len(whole) - skipped
    for a, b in zip(whole[skipped:], tail):
      assert a.keys() == b.keys() == {"image", "label", "index", "mask"}
      for key in a:
        np.testing.assert_array_equal(a[key], b[key])
  # Different epochs get different augmentation of the same example.
  first = _take(
    jd.make_pipeline(train, np.arange(8)[None], preprocess_fn=_AUGMENT, num_epochs=2), 2
  )
  assert not np.array_equal(first[0]["image"], first[1]["image"])
  with pytest.raises(ValueError, match="past the end of epoch 0"):
    jd.make_pipeline(train, sampler, start_batch=per_epoch)
  with pytest.raises(ValueError, match="make_pipeline: start_epoch must be an int >= 0, got -1"):
    jd.make_pipeline(train, sampler, start_epoch=-1)
  # The shared checks: a bool is not a count.
  with pytest.raises(TypeError, match="make_pipeline: start_batch must be an int >= 0, got True"):
    jd.make_pipeline(train, sampler, start_batch=True)
  with pytest.raises(TypeError, match="make_pipeline: num_epochs must be a positive int"):
    jd.make_pipeline(train, sampler, num_epochs=1.0)


# ---------------------------------------------------------------------------------------------
# Preprocessing.


def test_eval_preprocess_is_resize_then_central_crop():
  image = np.random.default_rng(0).integers(0, 256, size=(12, 20, 3), dtype=np.uint8)
  out = jd.eval_preprocess(tf.constant(image), resize_size=12, crop_size=8).numpy()
  # The shorter side already has the size, so the resize keeps the pixels: a pure centre crop.
  expected = (image[2:10, 6:14] / 255.0 - preprocess.IMAGENET_MEAN) / preprocess.IMAGENET_STD
  np.testing.assert_allclose(out, expected, atol=1e-5)


def test_train_preprocess_crops_flips_and_normalises():
  image = tf.constant(np.random.default_rng(0).integers(0, 256, (30, 45, 3), dtype=np.uint8))
  train = functools.partial(jd.train_preprocess, resize_size=20, crop_size=16)
  outs = [train(image, tf.constant([0, i], tf.int64)).numpy() for i in range(6)]
  assert all(o.shape == (16, 16, 3) and o.dtype == np.float32 for o in outs)
  np.testing.assert_array_equal(outs[0], train(image, tf.constant([0, 0], tf.int64)).numpy())
  assert len({o.tobytes() for o in outs}) > 1
  with pytest.raises(ValueError, match="one mean and one std per channel"):
    preprocess.normalize(tf.zeros((4, 4, 1)))


# ---------------------------------------------------------------------------------------------
# tfds builders, mocked.

BUILDERS = {
  "stanford_online_products": (jd.load_stanford_online_products, True),
  "caltech_birds2011": (jd.load_cub200, False),
  "cars196": (jd.load_cars196, False),
}


@pytest.mark.parametrize("name", BUILDERS)
def test_tfds_loaders_read_tfds_random_mock_data(name):
  load, has_supers = BUILDERS[name]
  with tfds.testing.mock_data(num_examples=12):
    train = load("/nonexistent/data_dir", split="train")
    test = load("/nonexistent/data_dir", split="test")
  for data in (train, test):
    assert data.image_format == "encoded" and data.labels.dtype == np.int32
    assert (data.super_labels is not None) == has_supers
    if data.num_examples:
      assert preprocess.decode_image(data.images[0]).shape[-1] == 3
  if name == "stanford_online_products":
    assert train.num_examples == test.num_examples == 12  # tfds's mock ignores the split.
    assert (train.super_labels < 12).all()
  else:  # Both tfds splits read, then a class half kept.
    half = {"caltech_birds2011": 100, "cars196": 98}[name]
    assert (train.labels < half).all() and (test.labels >= half).all()
    assert train.num_examples + test.num_examples == 24


def test_sop_mock_has_disjoint_splits_and_super_classes():
  with testing.mock_retrieval_data(classes_per_split=6, images_per_class=3):
    train = jd.load_stanford_online_products(split="train")
    test = jd.load_stanford_online_products(split="test")
  np.testing.assert_array_equal(train.labels, np.repeat(np.arange(6), 3))
  np.testing.assert_array_equal(test.labels, np.repeat(np.arange(6, 12), 3))
  np.testing.assert_array_equal(train.super_labels, train.labels % 12)
  image = preprocess.decode_image(train.images[0]).numpy()
  assert image.shape == (24, 32, 3) and image.dtype == np.uint8


@pytest.mark.parametrize("name", ["caltech_birds2011", "cars196"])
def test_cub_and_cars_class_disjoint_splits_use_both_tfds_splits(name):
  load, _ = BUILDERS[name]
  half = {"caltech_birds2011": 100, "cars196": 98}[name]
  with testing.mock_retrieval_data(classes_per_split=10, images_per_class=2):
    train = load("/data", split="train")
    test = load("/data", split="test")
  classes, _ = testing.fake_labels(name, "train", classes_per_split=10, images_per_class=1)
  assert set(train.labels.tolist()) == set(classes[classes < half].tolist())
  assert set(test.labels.tolist()) == set(classes[classes >= half].tolist())
  # Each class has its images of the tfds train split and of the tfds test split.
  assert (np.unique(train.labels, return_counts=True)[1] == 4).all()
  assert train.num_examples + test.num_examples == 40


def test_unprepared_data_dir_raises_and_downloads_nothing(tmp_path):
  with pytest.raises(FileNotFoundError, match="never downloads"):
    jd.load_cars196(tmp_path, split="train")
  assert not any(tmp_path.iterdir())


def test_mock_sop_pipeline_with_hard_batches():
  with testing.mock_retrieval_data(classes_per_split=24, images_per_class=4):
    train = jd.load_stanford_online_products(split="train")
  sampler = functools.partial(
    jd.super_class_batches,
    train.labels,
    train.super_labels,
    classes_per_batch=4,
    samples_per_class=2,
    batches_per_group=2,
    seed=0,
  )
  augment = functools.partial(jd.train_preprocess, resize_size=20, crop_size=16)
  ds = jd.make_pipeline(train, sampler, preprocess_fn=augment, seed=0)
  batches = _take(ds, 4)
  for batch in batches:
    assert batch["image"].shape == (8, 16, 16, 3) and batch["image"].dtype == np.float32
    assert batch["super_label"].dtype == np.int32
    np.testing.assert_array_equal(batch["super_label"], train.super_labels[batch["index"]])
    assert len(set(batch["super_label"].tolist())) <= 2
  again = _take(jd.make_pipeline(train, sampler, preprocess_fn=augment, seed=0), 4)
  for a, b in zip(batches, again):
    np.testing.assert_array_equal(a["image"], b["image"])


# ---------------------------------------------------------------------------------------------
# Image folders.


def _write_tree(root, tree, size=(10, 14)):
  """Writes `{relative path: label}` images (PNG or JPEG by extension) with TensorFlow."""
  rng = np.random.default_rng(0)
  for rel in tree:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    image = tf.constant(rng.integers(0, 256, size=(*size, 3), dtype=np.uint8))
    encode = tf.io.encode_jpeg if rel.lower().endswith((".jpg", ".jpeg")) else tf.io.encode_png
    path.write_bytes(encode(image).numpy())


@pytest.fixture
def folder(tmp_path):
  files = [
    "cat/1.png",
    "cat/2.PNG",
    "cat/3.jpg",
    "dog/a.png",
    "dog/b.png",
    "emu/x.jpeg",
    "emu/y.png",
  ]
  _write_tree(tmp_path, files)
  (tmp_path / "dog" / "notes.txt").write_text("not an image")
  (tmp_path / "dog" / ".hidden.png").write_bytes(b"ignored")
  return tmp_path


def test_image_folder_labels_by_folder(folder):
  data = jd.load_image_folder(folder)
  assert data.image_format == "path" and data.super_labels is None
  assert data.num_examples == 7
  names = [os.path.relpath(p, folder) for p in data.images]
  assert names == sorted(names)
  np.testing.assert_array_equal(data.labels, [0, 0, 0, 1, 1, 2, 2])


def test_image_folder_corrupt_files_raise_or_are_skipped(folder, caplog):
  (folder / "cat" / "4.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not a png")
  good = (folder / "dog" / "a.png").read_bytes()
  (folder / "dog" / "c.png").write_bytes(good[: len(good) // 2])  # Truncated.
  (folder / "emu" / "empty.jpg").write_bytes(b"")
  with pytest.raises(ValueError, match="3 of 10 files .* cannot be decoded"):
    jd.load_image_folder(folder)
  with caplog.at_level(logging.WARNING, logger="jaxrank.data.datasets"):
    data = jd.load_image_folder(folder, unreadable="skip")
  assert data.num_examples == 7
  assert "skipped 3 of 10 files" in caplog.text
  assert sorted(
    os.path.basename(p)
    for p in jd.unreadable_images([str(folder / "cat" / "4.png"), str(folder / "cat" / "1.png")])
  ) == ["4.png"]


def test_image_folder_super_classes_and_errors(tmp_path):
  _write_tree(
    tmp_path / "img",
    [
      "MEN/Denim/id_1/a.jpg",
      "MEN/Denim/id_2/a.jpg",
      "WOMEN/Dresses/id_3/a.jpg",
      "WOMEN/Dresses/id_3/b.jpg",
    ],
  )
  data = jd.load_image_folder(tmp_path / "img", super_classes=True)
  np.testing.assert_array_equal(data.labels, [0, 1, 2, 2])
  np.testing.assert_array_equal(data.super_labels, [0, 0, 1, 1])
  _write_tree(tmp_path / "flat", ["a/1.png"])
  with pytest.raises(ValueError, match="super_classes=True needs"):
    jd.load_image_folder(tmp_path / "flat", super_classes=True)
  _write_tree(tmp_path / "loose", ["1.png"])
  with pytest.raises(ValueError, match="class folders"):
    jd.load_image_folder(tmp_path / "loose")
  (tmp_path / "empty").mkdir()
  with pytest.raises(ValueError, match="no image files"):
    jd.load_image_folder(tmp_path / "empty")
  with pytest.raises(FileNotFoundError, match=r"load_image_folder: '.*missing' is not a directory"):
    jd.load_image_folder(tmp_path / "missing")


def test_image_folder_pipelines(folder):
  data = jd.load_image_folder(folder)
  evaluate = functools.partial(jd.eval_preprocess, resize_size=12, crop_size=8)
  ds = jd.make_pipeline(
    data,
    jd.sequential_batches(data.num_examples, batch_size=4),
    preprocess_fn=evaluate,
    num_epochs=1,
  )
  batches = list(ds.as_numpy_iterator())
  assert [b["image"].shape for b in batches] == [(4, 8, 8, 3)] * 2
  assert batches[1]["mask"].tolist() == [True, True, True, False]
  sampler = functools.partial(
    jd.m_per_class_batches, data.labels, classes_per_batch=3, samples_per_class=2, seed=0
  )
  train = functools.partial(jd.train_preprocess, resize_size=12, crop_size=8)
  batch = next(jd.make_pipeline(data, sampler, preprocess_fn=train).as_numpy_iterator())
  assert batch["image"].shape == (6, 8, 8, 3)
  assert sorted(_groups(data.labels, batch["index"], 2).tolist()) == [0, 1, 2]


# ---------------------------------------------------------------------------------------------
# Prefetching to the device.


def _counted(items, pulled):
  """Yields `items`, appending the number read so far to `pulled` as each is read."""
  for i, item in enumerate(items):
    pulled.append(i + 1)
    yield item


def _numpy_batches(n):
  return [
    {"image": np.full((2, 3), i, np.float32), "label": np.arange(2, dtype=np.int32) + i}
    for i in range(n)
  ]


def test_prefetch_to_device_yields_the_input_as_jax_arrays_in_order():
  import jax  # pylint: disable=g-import-not-at-top

  batches = _numpy_batches(5)
  out = list(jd.prefetch_to_device(iter(batches), size=2))
  assert len(out) == 5
  for got, want in zip(out, batches):
    assert set(got) == set(want)
    for key in want:
      assert isinstance(got[key], jax.Array) and got[key].dtype == want[key].dtype
      np.testing.assert_array_equal(got[key], want[key])


def test_prefetch_to_device_with_a_named_sharding():
  import jax  # pylint: disable=g-import-not-at-top

  mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:1]), ("batch",))
  sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))
  batches = _numpy_batches(3)
  out = list(jd.prefetch_to_device(batches, size=1, sharding=sharding))
  for got, want in zip(out, batches, strict=True):
    assert got["image"].sharding == sharding and got["label"].sharding == sharding
    np.testing.assert_array_equal(got["image"], want["image"])


@pytest.mark.parametrize("n,size", [(0, 2), (1, 2), (2, 3), (3, 1), (6, 2)])
def test_prefetch_to_device_stops_when_the_input_stops(n, size):
  out = list(jd.prefetch_to_device(iter(_numpy_batches(n)), size=size))
  assert [int(b["image"][0, 0]) for b in out] == list(range(n))


@pytest.mark.parametrize("size", [1, 2, 3])
def test_prefetch_to_device_reads_at_most_size_ahead(size):
  n, pulled = 6, []
  out = jd.prefetch_to_device(_counted(_numpy_batches(n), pulled), size=size)
  assert pulled == [], "nothing is read before the first batch is asked for"
  for received, batch in enumerate(out, start=1):
    assert int(batch["image"][0, 0]) == received - 1
    assert pulled[-1] == min(received + size, n), (received, pulled[-1])


def test_prefetch_to_device_checks_size():
  with pytest.raises(ValueError, match="prefetch_to_device: size must be a positive int, got 0"):
    jd.prefetch_to_device(iter([]), size=0)
  with pytest.raises(TypeError, match="prefetch_to_device: size"):
    jd.prefetch_to_device(iter([]), size=1.5)
