"""The training job's input: data sets and samplers by name, and the tf.data pipelines they feed.

Everything the job knows about a data set sits in its `DatasetSpec` in `DATASETS` (how its two
splits load, its images' channels and preprocessing, where it comes from, the models that fit it,
whether it has super-classes), and about a sampler in its `SamplerSpec` in `SAMPLERS`: no other
code tests a data set's or a sampler's name. A new data set is one new entry.

The splits are class-disjoint (`train` classes are never retrieved in `test`), as in the papers.
Training reads `TrainBatches`, an endless pipeline that knows its data position `(epoch, batch)`
for checkpoints; evaluation reads `eval_batches`, one pass in order, padded and masked.

Entry points call `hide_gpus_from_tensorflow()` first: tf.data runs on the CPU and would otherwise
take GPU memory that JAX needs.

TensorFlow (and `jaxrank.data`, which imports it) is imported by the functions that load and feed
data, when they are first called, not with this module: the registries' facts that the training
step reads (a data set's channels, whether a sampler draws whole classes) then cost no TensorFlow,
and the step can be built and run where TensorFlow is not installed (the GPU machines of
`experiments.benchmarks.device`; `tests/test_train.py` checks that building it imports none).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from experiments.job import config as config_lib

if TYPE_CHECKING:
  import tensorflow as tf

  import jaxrank.data as jd
  from experiments.job.config import Config

PreprocessFn = Callable[["tf.Tensor", "tf.Tensor"], "tf.Tensor"]
BatchesFn = Callable[..., np.ndarray]  # `sampler(epoch=e) -> [num_batches, B]` example indices.


def hide_gpus_from_tensorflow() -> None:
  """Makes TensorFlow (tf.data) run on the CPU only, leaving every GPU's memory to JAX.

  Call it first in an entry point, before any TensorFlow op: once TensorFlow has initialised its
  devices their list cannot change, and then this logs a warning if GPUs are still visible.
  Calling it again is harmless, and so is calling it where TensorFlow is not installed (nothing to
  hide; `train.check_run` says what is missing).
  """
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
  except ModuleNotFoundError as e:
    if e.name != "tensorflow":
      raise
    return
  try:
    tf.config.set_visible_devices([], "GPU")
  except RuntimeError:  # TensorFlow's devices are already initialised.
    if tf.config.get_visible_devices("GPU"):
      logging.warning(
        "TensorFlow already initialised its devices and sees the GPUs, so tf.data may take GPU "
        "memory that JAX needs; call hide_gpus_from_tensorflow() before any TensorFlow op."
      )


# ---------------------------------------------------------------------------------------------
# Data sets.


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """What the training job knows of one data set: an entry of `DATASETS`.

  Attributes:
    load: `load(config) -> (train, test)`: the class-disjoint splits, `jaxrank.data.LabeledImages`.
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

  load: Callable[[Config], tuple[jd.LabeledImages, jd.LabeledImages]]
  in_channels: int
  preprocess: Callable[[Config, bool], PreprocessFn | None]
  bundled_with: str | None = None
  models: tuple[str, ...] | None = None
  misfit: str = ""
  super_classes: str | None = None


def _load_digits(config: Config) -> tuple[jd.LabeledImages, jd.LabeledImages]:
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  del config  # Nothing to choose: digits 0-4 train, 5-9 test.
  return jd.load_digits("train"), jd.load_digits("test")


def _load_glyphs(config: Config) -> tuple[jd.LabeledImages, jd.LabeledImages]:
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  del config  # One fixed data set, augmentation seed 0: GLYPHS_PARAMS.
  return jd.load_glyphs("train", **GLYPHS_PARAMS), jd.load_glyphs("test", **GLYPHS_PARAMS)


def _load_glyphs_tiny(config: Config) -> tuple[jd.LabeledImages, jd.LabeledImages]:
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  del config  # GLYPHS_TINY_PARAMS.
  return jd.load_glyphs("train", **GLYPHS_TINY_PARAMS), jd.load_glyphs("test", **GLYPHS_TINY_PARAMS)


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

  def load_splits(config: Config) -> tuple[jd.LabeledImages, jd.LabeledImages]:
    import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

    load = getattr(jd, loader)
    return load(config.data_dir, split="train"), load(config.data_dir, split="test")

  return load_splits


def _load_image_folder(config: Config) -> tuple[jd.LabeledImages, jd.LabeledImages]:
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  assert config.data_dir is not None  # check.check_config rejects a None one for this data set.
  train_dir, test_dir = (os.path.join(config.data_dir, s) for s in ("train", "test"))
  for d in (train_dir, test_dir):
    if not os.path.isdir(d):
      raise config_lib.ConfigError(
        f"config.data_dir={config.data_dir!r} must hold train/ and test/ class folders for "
        f"dataset={config.dataset!r}; {d!r} is missing."
      )
  supers = SAMPLERS[config.sampler].super_classes  # Read the tree as category/class/image.
  return (
    jd.load_image_folder(train_dir, super_classes=supers),
    jd.load_image_folder(test_dir, super_classes=supers),
  )


def _as_they_are(config: Config, train: bool) -> None:
  """Images the loader already gives as float arrays of the network's input size."""
  del config, train


def _photographs(config: Config, train: bool) -> PreprocessFn:
  """Decoded photographs: resized to `resize_size`, cropped to `image_size`, normalised."""
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  fn = jd.train_preprocess if train else jd.eval_preprocess
  return functools.partial(fn, resize_size=config.resize_size, crop_size=config.image_size)


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
  # Any data_dir/{train,test}/class/image tree (category/class/image for super-classes).
  "image_folder": DatasetSpec(
    load=_load_image_folder,
    in_channels=3,
    preprocess=_photographs,
    super_classes="an image_folder tree category/class/image",
  ),
}


def load_data(config: Config) -> tuple[jd.LabeledImages, jd.LabeledImages]:
  """The train and test splits of `config.dataset`, or, with `config.validation_fraction > 0`,
  the training classes split in two (`validation_split`): the rest to train on, the held-out
  classes to evaluate on; the test split is then not returned.

  The splits loaded last are kept, so that the runs of a sweep, each checked before any of them
  trains (`train.check_run`) and then trained, read their data once.
  """
  supers = config.sampler in SAMPLERS and SAMPLERS[config.sampler].super_classes
  key = (config.dataset, config.data_dir, supers)  # What the loaders read of the config.
  if key not in _LOADED:
    _LOADED.clear()
    _LOADED[key] = DATASETS[config.dataset].load(config)
  train, test = _LOADED[key]
  if config.validation_fraction:
    return validation_split(train, config.validation_fraction)
  return train, test


_LOADED: dict[tuple[str, str | None, bool], tuple[jd.LabeledImages, jd.LabeledImages]] = {}

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


# ---------------------------------------------------------------------------------------------
# Samplers.


@dataclasses.dataclass(frozen=True)
class SamplerSpec:
  """A training sampler: an entry of `SAMPLERS`.

  Attributes:
    make: `make(config, train) -> sampler`, with `sampler(epoch=e) -> [num_batches, B]`.
    whole_classes: its batches are `classes_per_batch` classes of `samples_per_class` images.
    super_classes: it draws each batch's classes from `super_classes_per_batch` super-classes.
  """

  make: Callable[[Config, jd.LabeledImages], BatchesFn]
  whole_classes: bool
  super_classes: bool = False


def _random(config: Config, train: jd.LabeledImages) -> BatchesFn:
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  return functools.partial(
    jd.random_batches, train.num_examples, batch_size=config.batch_size, seed=config.seed
  )


def _m_per_class(config: Config, train: jd.LabeledImages) -> BatchesFn:
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  return functools.partial(
    jd.m_per_class_batches,
    train.labels,
    classes_per_batch=config.classes_per_batch,
    samples_per_class=config.samples_per_class,
    seed=config.seed,
  )


def _super_class(config: Config, train: jd.LabeledImages) -> BatchesFn:
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  if train.super_labels is None:
    raise config_lib.ConfigError(
      f"config.sampler={config.sampler!r} needs super-classes, which {config.dataset} does not "
      "have; use sampler='m_per_class'."
    )
  return functools.partial(
    jd.super_class_batches,
    train.labels,
    train.super_labels,
    classes_per_batch=config.classes_per_batch,
    samples_per_class=config.samples_per_class,
    super_classes_per_batch=config.super_classes_per_batch,
    batches_per_group=config.batches_per_group,
    seed=config.seed,
  )


SAMPLERS: Mapping[str, SamplerSpec] = {
  # P classes x K images, the classes at random (FastAP, RaMBO, ROADMAP).
  "m_per_class": SamplerSpec(make=_m_per_class, whole_classes=True),
  # P classes x K images from a few super-classes: hard batches (FastAP on SOP, Sec. 4.2).
  "super_class": SamplerSpec(make=_super_class, whole_classes=True, super_classes=True),
  # Images at random, whatever their class.
  "random": SamplerSpec(make=_random, whole_classes=False),
}


def make_sampler(config: Config, train: jd.LabeledImages) -> BatchesFn:
  """The training sampler `sampler(epoch=e) -> [num_batches, B]`; its errors are config errors.

  Raises:
    ConfigError: the train split cannot give the batches the config asks for (too few classes,
      no super-classes, classes too small), before any training.
  """
  spec = SAMPLERS[config.sampler]
  sampler = spec.make(config, train)
  if spec.whole_classes and train.num_classes < config.classes_per_batch:
    raise config_lib.ConfigError(
      f"config.batch_size / config.samples_per_class = {config.classes_per_batch} classes per "
      f"batch, but the train split of {config.dataset} has only {train.num_classes} classes; "
      f"lower batch_size to at most {train.num_classes * config.samples_per_class} or raise "
      "samples_per_class."
    )
  try:
    sampler(epoch=0)
  except ValueError as e:  # jaxrank.data's samplers say what the split lacks.
    raise config_lib.ConfigError(
      f"config cannot be sampled from the train split of {config.dataset}: {e}"
    ) from e
  return sampler


# ---------------------------------------------------------------------------------------------
# Pipelines.


class TrainBatches:
  """Training batches from a data position `(epoch, batch)`, with the position after each batch.

  `next(batches)` gives a dict of numpy arrays (`image [B, ...]`, `label [B]`, ..., see
  `jaxrank.data.make_pipeline`); `batches.position` is then where a resumed run starts reading.

  With `share=(start, stop)` (one process of a multi-process job) every process calls the same
  seeded sampler, so all agree on each global batch of `B` indices, and this one reads only the
  columns `start:stop` of it (`jaxrank.data.make_pipeline(columns=)`): its images are the slice
  `start:stop` of the global batch, with the augmentation each of them gets in a one-process run.
  """

  def __init__(
    self,
    config: Config,
    data: jd.LabeledImages,
    sampler: BatchesFn,
    position: tuple[int, int],
    share: tuple[int, int] | None = None,
  ):
    import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

    preprocess = preprocess_fn(config, train=True)
    self._sampler = sampler
    self._sizes: dict[int, int] = {}
    self.position = position
    self._iterator = jd.make_pipeline(
      data,
      sampler,
      preprocess_fn=preprocess,
      seed=config.seed,
      start_epoch=position[0],
      start_batch=position[1],
      columns=share,
    ).as_numpy_iterator()

  def _num_batches(self, epoch: int) -> int:
    if epoch not in self._sizes:
      self._sizes[epoch] = self._sampler(epoch=epoch).shape[0]
    return self._sizes[epoch]

  def __next__(self) -> dict[str, np.ndarray]:
    batch = next(self._iterator)
    epoch, b = self.position
    b += 1
    if b == self._num_batches(epoch):
      epoch, b = epoch + 1, 0
    self.position = (epoch, b)
    return batch


def eval_batches(
  config: Config, data: jd.LabeledImages, share: tuple[int, int] | None = None
) -> Iterator[dict[str, np.ndarray]]:
  """Every example of `data` once, in order, in batches of `eval_batch_size` (the last padded).

  With `share=(start, stop)`, only the examples `start:stop` (one process's share of the
  evaluation); none when `start == stop`. Each batch is a dict of numpy arrays; `mask [B]` is
  False on the padding.
  """
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  start, stop = (0, data.num_examples) if share is None else share
  if stop <= start:
    return iter(())
  rows = jd.sequential_batches(stop - start, batch_size=min(config.eval_batch_size, stop - start))
  ds = jd.make_pipeline(
    data,
    np.where(rows >= 0, rows + start, -1),
    preprocess_fn=preprocess_fn(config, train=False),
    num_epochs=1,
  )
  return ds.as_numpy_iterator()
