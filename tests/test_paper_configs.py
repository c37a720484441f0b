"""The configs of the papers' tables (experiments/job/configs/*.py on data read from disk): each
passes the job's checks, its own network takes its image size, and it trains and evaluates.

The data sets are not here, and a ResNet-50 step takes too long for CI on 2 cores: each config is
checked as it is against the job's checks (`check.check_config`, its data_dir a folder) and its
network is built and applied abstractly (`jax.eval_shape`: shapes only, no arithmetic); then the
same config, its network replaced by a tiny `small_convnet` on 16 x 16 images and its batch by a
few classes, trains 2 steps and evaluates on a small copy of its data set's layout that the test
writes (`SMOKE_DATA`). Everything else (the loss and its arguments, the sampler, the memory, the
head, the cut-offs) is the config's own. A config whose data set has no entry in `SMOKE_DATA`
fails: a new config file on a new data set needs its small copy here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import pathlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from unittest import mock

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from experiments.job import check
from experiments.job import config as config_lib
from experiments.job import datasets
from experiments.job import main as main_lib
from experiments.job import networks
from experiments.job import train
from jaxrank.data import hashing_data
from jaxrank.data import testing

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "experiments" / "job" / "configs"


def _on_disk(path: pathlib.Path) -> bool:
  config = main_lib.load_config_module(str(path)).get_config()
  return datasets.DATASETS[config.dataset].bundled_with is None


# The configs on data read from disk: the papers' tables (the bundled digits and glyphs train in
# test_train.py and test_experiments.py).
PAPER_CONFIGS = [p for p in sorted(CONFIGS.glob("*.py")) if _on_disk(p)]


def _mock_tfds(data_dir: pathlib.Path, config: config_lib.Config) -> ContextManager[None]:
  """SOP, CUB, Cars196: tfds builders read fake examples (`jaxrank.data.testing`); 24 classes a
  split, each in super-class `i % 12` for SOP (2 classes of each)."""
  del data_dir
  return testing.mock_retrieval_data(
    classes_per_split=24, images_per_class=config.samples_per_class, image_size=(20, 20)
  )


def _inshop(data_dir: pathlib.Path, config: config_lib.Config) -> ContextManager[None]:
  """In-Shop: 8 train items over 2 categories, 4 test items, `samples_per_class` images each."""
  k = config.samples_per_class
  testing.write_inshop(data_dir, train_items=8, test_items=4, images_per_item=k)
  return contextlib.nullcontext()


def _vehicleid(data_dir: pathlib.Path, config: config_lib.Config) -> ContextManager[None]:
  """VehicleID: 12 train vehicles (2 models of 4 vehicles, and 4 vehicles without a model), test
  lists of 2, 3 and 4 vehicles."""
  k = config.samples_per_class
  testing.write_vehicleid(data_dir, train_vehicles=12, images_per_vehicle=k)
  return contextlib.nullcontext()


def _inat2018(data_dir: pathlib.Path, config: config_lib.Config) -> ContextManager[None]:
  """iNaturalist-2018: 8 train and 4 test categories over 2 supercategories."""
  k = config.samples_per_class
  testing.write_inat2018(data_dir, train_classes=8, test_classes=4, images_per_class=k)
  return contextlib.nullcontext()


@contextlib.contextmanager
def _cifar10(data_dir: pathlib.Path, config: config_lib.Config) -> Iterator[None]:
  """CIFAR-10 (tfds, both settings): 3 images of each class in each tfds split, 2 queries and 2
  training images drawn per class in setting 1, 2 queries in setting 2."""
  del data_dir, config
  with contextlib.ExitStack() as stack:
    stack.enter_context(mock.patch.object(hashing_data, "CIFAR10_QUERIES_PER_CLASS", 2))
    stack.enter_context(mock.patch.object(hashing_data, "CIFAR10_SETTING2_QUERIES_PER_CLASS", 2))
    stack.enter_context(mock.patch.object(hashing_data, "CIFAR10_TRAIN_PER_CLASS", 2))
    stack.enter_context(
      testing.mock_retrieval_data(classes_per_split=10, images_per_class=3, image_size=(32, 32))
    )
    yield


def _nuswide(data_dir: pathlib.Path, config: config_lib.Config) -> ContextManager[None]:
  """NUS-WIDE (DeepHash-pytorch's 21-label lists): 42 training, 21 query and 42 + 42 database
  images (the training images among them), multi-hot."""
  del config
  testing.write_nuswide(data_dir, sizes=(42, 21, 42))
  return contextlib.nullcontext()


def _imagenet100(data_dir: pathlib.Path, config: config_lib.Config) -> ContextManager[None]:
  """ImageNet100 (HashNet's PyTorch lists, the authors' absolute paths): 4 classes, 4 training,
  1 query and 4 + 2 database images each."""
  del config
  testing.write_imagenet100(data_dir, images_per_class=(4, 1, 2), num_classes=4)
  return contextlib.nullcontext()


def _image_folder(data_dir: pathlib.Path, config: config_lib.Config) -> ContextManager[None]:
  """An image folder `train/<landmark>/<image>` and `test/` (Landmarks-clean's layout for
  Revaud et al.'s config): the training set of a landmark miniature of 32-48 pixel scenes, 4
  landmarks of 4 images to train on and 3 of 2 to test on."""
  del config
  miniature = testing.write_landmark_miniature(
    data_dir.parent / "miniature",
    num_landmarks=3,
    num_training_landmarks=4,
    queries_per_landmark=1,
    roles_per_landmark=(1, 0, 0),
    num_negatives=0,
    num_distractors=0,
    training_images_per_landmark=4,
    test_images_per_landmark=2,
    min_side=32,
    max_side=48,
  )
  for split in ("train", "test"):
    (data_dir / split).symlink_to(pathlib.Path(miniature.image_folder) / split)
  return contextlib.nullcontext()


# Data set -> `fake(data_dir, config)`: a context within which `config.dataset` reads a small
# copy of its layout from `data_dir` (written there by `fake`, or faked by the context).
SMOKE_DATA: dict[str, Callable[[pathlib.Path, config_lib.Config], ContextManager[None]]] = {
  "sop": _mock_tfds,
  "cub200": _mock_tfds,
  "cars196": _mock_tfds,
  "inshop": _inshop,
  "vehicleid": _vehicleid,
  "inat2018": _inat2018,
  "cifar10_1k": _cifar10,
  "cifar10_10k": _cifar10,
  "nuswide": _nuswide,
  "imagenet100": _imagenet100,
  "image_folder": _image_folder,
}


def smoke_config(config: config_lib.Config, data_dir: pathlib.Path) -> config_lib.Config:
  """`config` with a tiny network (at most 64-d), tiny images and a batch of 4 classes (8 images
  drawn at random), for 2 steps: configs of the same loss then share their programs (CI's
  persistent compilation cache)."""
  return dataclasses.replace(
    config,
    data_dir=str(data_dir),
    model="small_convnet",
    model_features=(4, 8),
    pooling="average",
    init_weights=None,
    image_size=16,
    resize_size=18,
    embedding_dim=min(config.embedding_dim, 64),  # A hashing head's bits are kept.
    batch_size=4 * config.samples_per_class if config.sampler != "random" else 8,
    chunk_size=None,
    num_steps=2,
    warmup_steps=0,
    eval_every=2,
    checkpoint_every=2,
    log_every=1,
    eval_batch_size=64,
    progress_bar=False,
  )


# The fields a network depends on: configs that agree on them (and on their images' channels)
# share one abstract evaluation.
NETWORK_FIELDS = (
  "model",
  "model_features",
  "pooling",
  "head",
  "embedding_dim",
  "image_size",
  "half_precision",
  "seed",
)


@functools.cache
def _output_shape(channels: int, network: tuple) -> tuple[int, ...]:
  """The shape of a network's output on 2 images of its size, computed abstractly (no FLOPs);
  `network`: the values of `NETWORK_FIELDS`."""
  config = config_lib.Config(**dict(zip(NETWORK_FIELDS, network)))
  scale = 1.0 if networks.HEADS[config.head].tanh_scaled else None

  def embed(images):
    model = networks.make_model(config, channels, nnx.Rngs(config.seed))
    model.eval()
    return model(images, scale=scale)

  images = jax.ShapeDtypeStruct((2, config.image_size, config.image_size, channels), jnp.float32)
  return jax.eval_shape(embed, images).shape


def test_the_paper_configs_are_found():
  names = {p.name for p in PAPER_CONFIGS}
  assert {"fastap_sop.py", "rambo_cub200.py", "roadmap_sop.py", "cub200.py"} <= names
  assert "glyphs.py" not in names


@pytest.mark.parametrize("path", PAPER_CONFIGS, ids=lambda p: p.name)
def test_paper_config_checks_builds_and_trains(path, tmp_path, monkeypatch):
  module = main_lib.load_config_module(str(path))
  config = module.get_config()
  assert config.dataset in SMOKE_DATA, (
    f"{path.name}: no small copy of dataset={config.dataset!r} to train on; add one to "
    "SMOKE_DATA in tests/test_paper_configs.py."
  )
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  runs = [config] + [
    main_lib.apply_overrides(config, changes)
    for changes in getattr(module, "get_sweep", dict)().values()
  ]
  for run in runs:  # As given, but for where the data is.
    check.check_config(dataclasses.replace(run, data_dir=str(data_dir)))
  # The config's own network on its own image size (a sweep's runs change the head's width).
  channels = datasets.DATASETS[config.dataset].in_channels
  network = tuple(getattr(config, f) for f in NETWORK_FIELDS)
  assert _output_shape(channels, network) == (2, config.embedding_dim), path.name
  smoke = smoke_config(config, data_dir)
  monkeypatch.setattr(train, "_plot_curves", lambda *args: None)  # Matplotlib: a second a run.
  with SMOKE_DATA[config.dataset](data_dir, smoke):
    metrics = train.train_and_evaluate(smoke, str(tmp_path / "run"))
  assert metrics["step"] == 2
  assert all(math.isfinite(v) for v in metrics.values()), metrics
  if "tie_aware_ndcg" in metrics:  # A hashing protocol: mAP_T, NDCG_T, mAP@k of the database.
    assert 0.0 <= metrics["tie_aware_map"] <= 1.0
    return
  for k in config.eval_ks:  # `recall@1`, or one per evaluation: `small/recall@1`, ...
    recalls = [v for name, v in metrics.items() if name.split("/")[-1] == f"recall@{k}"]
    assert recalls and all(0.0 <= r <= 1.0 for r in recalls), (k, metrics)
