"""The training job's data sets by name: how each loads, its preprocessing, its validation split.

Everything the job knows about a data set sits in its `DatasetSpec` in `DATASETS` (how its two
splits load, its images' channels and preprocessing, where it comes from, the models that fit it,
whether it has super-classes): no other code tests a data set's name. A new data set is one new
entry.

The splits are class-disjoint (`train` classes are never retrieved in `test`), as in the papers.
A data set's `load` gives them as `protocols.Splits`, with its test protocol: named evaluations
of rows of the test split, each leave-one-out or query/gallery (see `protocols`).

`load_splits` gives a data set's `Splits`, or the training classes split in two
(`validation_split`); `load_data` its train and test splits alone; `training_splits` and
`training_data` the same, the training classes numbered `0..C-1`; and `preprocess_fn` what
`input_pipeline`'s tf.data pipelines apply to each image.

TensorFlow (and `jaxrank.data`, which imports it) is imported by the functions that load data,
when they are first called, not with this module: the registry's facts that the training step
reads (a data set's channels) cost no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from experiments.job import config as config_lib
from experiments.job import published
from experiments.job import samplers
from experiments.job.protocols import Splits

if TYPE_CHECKING:
  import tensorflow as tf

  import jaxrank.data as jd
  from experiments.job.config import Config

PreprocessFn = Callable[["tf.Tensor", "tf.Tensor"], "tf.Tensor"]


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """What the training job knows of one data set: an entry of `DATASETS`.

  Attributes:
    load: `load(config) -> Splits`: the class-disjoint splits (`jaxrank.data.LabeledImages`) and
      the test protocol.
    in_channels: channels of its images as the pipeline gives them to the network.
    preprocess: `preprocess(config, train) -> preprocess_fn or None`, for `jd.make_pipeline`
      (`train`: augmentation of training images; else the deterministic evaluation transform).
    bundled_with: the package that ships the data (then `config.data_dir` must be None); None for
      data read from `config.data_dir`.
    models: the keys of `networks.MODELS` that fit its images; None for every model.
    misfit: why another model does not fit, completing "config.model='resnet18' ...".
    super_classes: None if it has no super-classes, else how to get them, completing "use
      sampler='m_per_class', or ..." in the error of a super-class sampler on another data set.
  """

  load: Callable[[Config], Splits]
  in_channels: int
  preprocess: Callable[[Config, bool], PreprocessFn | None]
  bundled_with: str | None = None
  models: tuple[str, ...] | None = None
  misfit: str = ""
  super_classes: str | None = None


def _load_digits(config: Config) -> Splits:
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  del config  # Nothing to choose: digits 0-4 train, 5-9 test.
  return Splits(jd.load_digits("train"), jd.load_digits("test"))


def _load_glyphs(config: Config) -> Splits:
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  del config  # One fixed data set, augmentation seed 0: GLYPHS_PARAMS.
  return Splits(jd.load_glyphs("train", **GLYPHS_PARAMS), jd.load_glyphs("test", **GLYPHS_PARAMS))


def _load_glyphs_tiny(config: Config) -> Splits:
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  del config  # GLYPHS_TINY_PARAMS.
  return Splits(
    jd.load_glyphs("train", **GLYPHS_TINY_PARAMS), jd.load_glyphs("test", **GLYPHS_TINY_PARAMS)
  )


class GlyphsParams(TypedDict):
  """Keyword arguments of `jaxrank.data.load_glyphs` that fix a glyph data set."""

  min_typefaces: int
  image_size: int
  strength: float
  noise: float


# The glyph data set of the training job: the 359 + 359 characters drawn by at least 16 of the 21
# typefaces, 16 x 16, half-strength augmentation without noise (see
# experiments/job/configs/glyphs.py for why).
GLYPHS_PARAMS: GlyphsParams = {"min_typefaces": 16, "image_size": 16, "strength": 0.5, "noise": 0.0}
# The same images of the 31 + 31 characters drawn by at least 20 typefaces (the ASCII letters and
# digits that Computer Modern draws too; 651 images per split, 2 super-classes): smoke tests.
GLYPHS_TINY_PARAMS: GlyphsParams = {**GLYPHS_PARAMS, "min_typefaces": 20}


def _tfds_splits(loader: str):
  """`load(config)` reading the train and test splits of a tfds builder from `config.data_dir`,
  with the loader of `jaxrank.data` named `loader`."""

  def load_splits(config: Config) -> Splits:
    import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

    load = getattr(jd, loader)
    return Splits(load(config.data_dir, split="train"), load(config.data_dir, split="test"))

  return load_splits


def _load_image_folder(config: Config) -> Splits:
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  assert config.data_dir is not None  # check.check_config rejects a None one for this data set.
  train_dir, test_dir = (os.path.join(config.data_dir, s) for s in ("train", "test"))
  for d in (train_dir, test_dir):
    if not os.path.isdir(d):
      raise config_lib.ConfigError(
        f"config.data_dir={config.data_dir!r} must hold train/ and test/ class folders for "
        f"dataset={config.dataset!r}; {d!r} is missing."
      )
  supers = samplers.SAMPLERS[config.sampler].super_classes  # Read the tree as category/class/image.
  return Splits(
    jd.load_image_folder(train_dir, super_classes=supers),
    jd.load_image_folder(test_dir, super_classes=supers),
  )


def _published(read: Callable[[str], Splits]) -> Callable[[Config], Splits]:
  """`load(config)` of a data set published as lists of files (`jaxrank.data.image_lists`):
  `read(config.data_dir)`, a missing or malformed file a `ConfigError` naming it."""

  def load(config: Config) -> Splits:
    assert config.data_dir is not None  # check.check_config rejects a None one for these.
    try:
      return read(config.data_dir)
    except (FileNotFoundError, ValueError) as e:
      raise config_lib.ConfigError(
        f"dataset={config.dataset!r} cannot be read from config.data_dir={config.data_dir!r}: {e}"
      ) from e

  return load


def _as_they_are(config: Config, train: bool) -> None:
  """Images the loader already gives as float arrays of the network's input size."""
  del config, train


def _photographs(config: Config, train: bool) -> PreprocessFn:
  """Decoded photographs: resized to `resize_size`, cropped to `image_size`, normalised."""
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  fn = jd.train_preprocess if train else jd.eval_preprocess
  return functools.partial(fn, resize_size=config.resize_size, crop_size=config.image_size)


def _hashing(read: Callable[[str], Splits]) -> DatasetSpec:
  return DatasetSpec(load=_published(read), in_channels=3, preprocess=_photographs)


DATASETS: Mapping[str, DatasetSpec] = {
  # Scikit-learn's 8 x 8 grey digits, [8, 8, 1] arrays in [0, 1].
  "digits": DatasetSpec(
    load=_load_digits,
    in_channels=1,
    preprocess=_as_they_are,
    bundled_with="scikit-learn",
    models=("small_convnet",),
    misfit="would reduce the 8 x 8 digits to nothing",
  ),
  # Characters across matplotlib's typefaces, [16, 16, 1] arrays in [0, 1]; super-classes are
  # scripts and Unicode blocks.
  "glyphs": DatasetSpec(
    load=_load_glyphs,
    in_channels=1,
    preprocess=_as_they_are,
    bundled_with="matplotlib",
    models=("small_convnet",),
    misfit="would reduce the 16 x 16 glyphs to nothing",
    super_classes="dataset='glyphs'",
  ),
  # The glyphs' commonest characters only: a tiny data set of the same kind, for smoke tests.
  "glyphs_tiny": DatasetSpec(
    load=_load_glyphs_tiny,
    in_channels=1,
    preprocess=_as_they_are,
    bundled_with="matplotlib",
    models=("small_convnet",),
    misfit="would reduce the 16 x 16 glyphs to nothing",
    super_classes="dataset='glyphs_tiny'",
  ),
  # Photographs from tfds builders prepared in data_dir; every loader decodes RGB.
  "cub200": DatasetSpec(load=_tfds_splits("load_cub200"), in_channels=3, preprocess=_photographs),
  "cars196": DatasetSpec(load=_tfds_splits("load_cars196"), in_channels=3, preprocess=_photographs),
  "sop": DatasetSpec(
    load=_tfds_splits("load_stanford_online_products"),
    in_channels=3,
    preprocess=_photographs,
    super_classes="dataset='sop'",
  ),
  # Data sets published as lists of image files, read from data_dir as published
  # (jaxrank.data.image_lists); super-classes: In-Shop's 23 categories, VehicleID's models,
  # iNaturalist's supercategories.
  "inshop": DatasetSpec(
    load=_published(published.read_inshop),
    in_channels=3,
    preprocess=_photographs,
    super_classes="dataset='inshop'",
  ),
  "vehicleid": DatasetSpec(
    load=_published(published.read_vehicleid),
    in_channels=3,
    preprocess=_photographs,
    super_classes="dataset='vehicleid'",
  ),
  "inat2018": DatasetSpec(
    load=_published(published.read_inat2018),
    in_channels=3,
    preprocess=_photographs,
    super_classes="dataset='inat2018'",
  ),
  # He et al. 2018's hashing benchmarks; nuswide is multi-label (multi-hot labels, sampler random).
  # cifar10_10k draws its queries as He et al.'s code does, cifar10_10k_tfds takes tfds' test
  # split; nuswide reads 21-label lists (DeepHash-pytorch's), nuswide_he2018 draws He et al.'s
  # split from NUS-WIDE's own files.
  "cifar10_1k": _hashing(published.read_cifar10(1)),
  "cifar10_10k": _hashing(published.read_cifar10(2)),
  "cifar10_10k_tfds": _hashing(published.read_cifar10(2, queries="tfds_test")),
  "nuswide": _hashing(published.read_hashnet_lists("load_nuswide", (5000,))),
  "nuswide_he2018": _hashing(published.read_nuswide_he2018),
  "imagenet100": _hashing(
    published.read_hashnet_lists("load_imagenet100", (1000,), hashnet_prefixes=True)
  ),
  # Any data_dir/{train,test}/class/image tree (category/class/image for super-classes).
  "image_folder": DatasetSpec(
    load=_load_image_folder,
    in_channels=3,
    preprocess=_photographs,
    super_classes="an image_folder tree category/class/image",
  ),
}


def load_splits(config: Config) -> Splits:
  """The `Splits` of `config.dataset`, or, with `config.validation_fraction > 0`, the training
  classes split in two (`validation_split`): the rest to train on, the held-out classes to
  evaluate on, leave-one-out (`protocols.LEAVE_ONE_OUT`); the test split is then not returned.

  The splits loaded last are kept, so that the runs of a sweep, each checked before any of them
  trains (`train.check_run`) and then trained, read their data once.
  """
  supers = config.sampler in samplers.SAMPLERS and samplers.SAMPLERS[config.sampler].super_classes
  key = (config.dataset, config.data_dir, supers)  # What the loaders read of the config.
  if key not in _LOADED:
    _LOADED.clear()
    _LOADED[key] = DATASETS[config.dataset].load(config)
  splits = _LOADED[key]
  if config.validation_fraction:
    return Splits(*validation_split(splits.train, config.validation_fraction))
  return splits


def load_data(config: Config) -> tuple[jd.LabeledImages, jd.LabeledImages]:
  """`load_splits`'s train and test splits (every test image once), without the protocol."""
  splits = load_splits(config)
  return splits.train, splits.test


_LOADED: dict[tuple[str, str | None, bool], Splits] = {}


def training_splits(config: Config) -> Splits:
  """`load_splits`'s splits as a run trains on them: the classes of the train split numbered
  `0, ..., C - 1` (`class_indices`), once, on the host, so that a proxy loss's labels are the
  rows of its `[C, D]` proxies.

  The numbering keeps the labels' order and which are equal, all that the samplers, the other
  losses and the evaluation read of them, so every other run trains and evaluates as on the
  labels themselves. `load_splits` keeps the data set's own labels (a glyph's is its code point).
  """
  splits = load_splits(config)
  return dataclasses.replace(splits, train=class_indices(splits.train))


def training_data(config: Config) -> tuple[jd.LabeledImages, jd.LabeledImages]:
  """`training_splits`'s train and test splits, without the protocol."""
  splits = training_splits(config)
  return splits.train, splits.test


def class_indices(data: jd.LabeledImages) -> jd.LabeledImages:
  """`data` with each label replaced by the index of its class, `0, ..., C - 1` in the labels'
  order (a data set's training classes need not be numbered from 0, nor without gaps: a glyph's
  label is its code point, and `validation_split` keeps some of the classes). Multi-hot labels
  `[N, C]` (NUS-WIDE) are left as they are: their columns are the classes already."""
  if data.labels.ndim == 2:
    return data
  _, indices = np.unique(data.labels, return_inverse=True)
  return dataclasses.replace(data, labels=indices.astype(np.int32).reshape(-1))


# The seed of every validation split: the held-out classes depend on the fraction alone, so that
# every run of a comparison (any loss, any seed) validates on the same classes.
VALIDATION_SEED = 20261125


def validation_split(
  train: jd.LabeledImages, fraction: float
) -> tuple[jd.LabeledImages, jd.LabeledImages]:
  """`(rest, held_out)`: the training classes split by class, `fraction` of them held out.

  Within each super-class (all classes together when the data set has none), the classes are
  shuffled with `VALIDATION_SEED` and the first `round(fraction * n)` of its `n` held out, so
  that the validation classes come from every script as the test classes do. Both parts hold
  every image of their classes and no class of the other.

  Raises:
    ConfigError: no class, or every class, would be held out.
  """
  classes, first = np.unique(train.labels, return_index=True)
  supers = np.zeros_like(classes) if train.super_labels is None else train.super_labels[first]
  rng = np.random.default_rng(VALIDATION_SEED)
  held = []
  for s in np.unique(supers):
    members = classes[supers == s]
    count = int(np.floor(fraction * len(members) + 0.5))
    held.extend(members[rng.permutation(len(members))[:count]].tolist())
  if not held or len(held) == len(classes):
    raise config_lib.ConfigError(
      f"config.validation_fraction={fraction} holds out {len(held)} of the {len(classes)} "
      "training classes; choose a fraction that leaves classes on both sides."
    )
  rest = np.setdiff1d(classes, held)
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  return jd.select_classes(train, rest), jd.select_classes(train, held)


def preprocess_fn(config: Config, train: bool) -> PreprocessFn | None:
  """What the pipeline applies to each image of `config.dataset`, in training or evaluation."""
  return DATASETS[config.dataset].preprocess(config, train)
