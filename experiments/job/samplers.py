"""The training job's samplers by name: which images of the train split make each batch.

Everything the job knows about a sampler sits in its `SamplerSpec` in `SAMPLERS` (how it is made
from the config and the train split, whether it draws whole classes, whether it draws them from
super-classes): no other code tests a sampler's name. A new sampler is one new entry. A sampler
gives `sampler(epoch=e) -> [num_batches, B]`, the example indices of an epoch's batches, which
`input_pipeline.TrainBatches` reads through tf.data.

`jaxrank.data` (which imports TensorFlow) is imported when a sampler is made, not with this
module: the registry's facts that the training step reads (whether a sampler draws whole classes)
cost no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from experiments.job import config as config_lib

if TYPE_CHECKING:
  import jaxrank.data as jd
  from experiments.job.config import Config

BatchesFn = Callable[..., np.ndarray]  # `sampler(epoch=e) -> [num_batches, B]` example indices.


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
      no super-classes, classes too small, whole classes of multi-hot labels), before any
      training.
  """
  spec = SAMPLERS[config.sampler]
  if spec.whole_classes and train.labels.ndim == 2:
    raise config_lib.ConfigError(
      f"config.sampler={config.sampler!r} draws whole classes, but {config.dataset} is "
      "multi-label (multi-hot labels, an image in several classes); use sampler='random'."
    )
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
