"""A training run's configuration: the `Config` dataclass and `check_config`, which validates it.

Config files (`experiments/configs/*.py`) return a `Config` from `get_config()`. The names a config
gives (`dataset`, `sampler`, `model`, `head`, `loss`) are keys of the registries of
`experiments/input_pipeline.py`, `experiments/networks.py` and `experiments/losses.py`, and
`check_config` checks them against those registries: a data set's or model's constraints live in
its registry record, not here. Every error of a configuration is a `ConfigError`, a `ValueError`
whose message is one sentence that says what to change; `experiments.main` prints it as one line.

This module imports neither JAX nor TensorFlow (the registries are imported by `check_config`), so
that `python -m experiments.main --help` answers at once.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Iterable
from typing import Any


class ConfigError(ValueError):
  """A configuration that cannot run, found before anything is written; the message says the fix."""


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything a training run depends on. Config files return one from `get_config()`.

  Attributes are grouped as data, model, loss, optimisation and bookkeeping; defaults train a small
  convolutional network on the bundled digits.
  """

  # Data.
  dataset: str = "digits"  # A key of input_pipeline.DATASETS.
  data_dir: str | None = None  # tfds data_dir (cub200, cars196, sop) or the image_folder root.
  image_size: int = 224  # Crop size of photographs (ignored for digits).
  resize_size: int = 256  # Shorter side before cropping (ignored for digits).
  sampler: str = "m_per_class"  # A key of input_pipeline.SAMPLERS.
  batch_size: int = 60
  samples_per_class: int = 12  # K; batch_size / K classes per batch.
  super_classes_per_batch: int = 2  # For sampler="super_class".
  batches_per_group: int = (
      5  # sampler="super_class": batches drawn from one group of super-classes.
  )
  # Model.
  model: str = "small_convnet"  # A key of networks.MODELS.
  model_features: tuple[int, ...] = (32, 64)  # SmallConvNet's stage widths.
  head: str = "embedding"  # A key of networks.HEADS: "embedding" (L2-normalised) or "hashing".
  embedding_dim: int = 32  # D, or the number of bits b of a hashing head.
  pooling: str = "average"  # A key of networks.POOLINGS: the pooling of a ResNet's feature map.
  # A local file of backbone weights: an .npz of `models.save_weights`, or a torchvision/timm
  # checkpoint (.pth, .pt, .safetensors) converted by `jaxrank.convert.load_pytorch_weights`.
  init_weights: str | None = None
  freeze_batchnorm: bool = False  # Train ResNets with BatchNorm in inference mode.
  tanh_initial: float = 1.0  # Hashing: alpha = tanh_initial * tanh_growth ** (step // tanh_every).
  tanh_growth: float = 2.0
  tanh_every: int = 1000
  # Loss.
  loss: str = "fastap"  # A key of experiments.losses.LOSSES (`--help` lists them).
  loss_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
  include_self: bool = False  # Whether a query is its own positive (see batch_retrieval).
  memory_batches: int = 0  # RaMBO's memory: the last tau batches join every list as a gallery.
  chunk_size: int | None = None  # Chunked gradient (jaxrank.chunked_value_and_grad).
  # Shard the in-batch retrieval over all devices of all processes (jaxrank.sharded_loss); a job
  # of several processes needs it.
  shard: bool = False
  # Optimisation.
  num_steps: int = 300
  learning_rate: float = 1e-3
  warmup_steps: int = 20
  weight_decay: float = 1e-4
  head_lr_multiplier: float = 10.0
  seed: int = 0
  # Bookkeeping.
  eval_every: int = 100
  eval_batch_size: int = 256
  eval_ks: tuple[int, ...] = (1, 2, 4, 8)
  eval_seen_classes: bool = False  # Also evaluate on the train split (metrics named "seen/...").
  # A sweep's table also gets a row "raw_pixels": retrieval on the images themselves (see
  # train.evaluate_raw_pixels), what an embedding must beat to have learned beyond the pixels.
  raw_pixels_baseline: bool = False
  checkpoint_every: int = 100
  keep_checkpoints: int = 3
  log_every: int = 10
  progress_bar: bool = True
  # Debugging: check the values of traced inputs inside every step (`jaxrank.traced_checks`,
  # functionalized with checkify): a histogram loss's scores out of range, say, stop the run
  # with the eager check's message instead of being clipped. One host sync per step: slower.
  check_traced_inputs: bool = False

  @property
  def classes_per_batch(self) -> int:
    return self.batch_size // self.samples_per_class


# Fields that change nothing a run computes: a rerun may differ in them and still resume.
COSMETIC_FIELDS = ("progress_bar", "check_traced_inputs")


def to_json(config: Config) -> dict[str, Any]:
  """The fields that determine what a run computes, as JSON values (the workdir's config.json)."""
  values = dataclasses.asdict(config)
  return {
      k: (list(v) if isinstance(v, tuple) else v)
      for k, v in values.items()
      if k not in COSMETIC_FIELDS
  }


def _fail(message: str) -> None:
  raise ConfigError(message)


def describe_type(annotation: Any) -> str:
  """What a field of type `annotation` holds, in words: "an int", "a tuple of ints or None"."""
  if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
    args = typing.get_args(annotation)
    words = [describe_type(a) for a in args if a is not type(None)]
    return " or ".join(words) + (" or None" if type(None) in args else "")
  origin = typing.get_origin(annotation)
  if origin is tuple:
    return f"a tuple of {describe_type(typing.get_args(annotation)[0])[2:]}s"
  if origin is dict or annotation is dict:
    return "a dict of keyword arguments"
  return {int: "an int", float: "a float", bool: "True or False", str: "a string"}[annotation]


def conforms(value: Any, annotation: Any) -> bool:
  """Whether `value` is of the field type `annotation` (an int is a float; a bool is no int)."""
  if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
    return any(conforms(value, a) for a in typing.get_args(annotation))
  if annotation is type(None):
    return value is None
  origin = typing.get_origin(annotation)
  if origin is tuple:
    item = typing.get_args(annotation)[0]
    return isinstance(value, tuple) and all(conforms(v, item) for v in value)
  if origin is dict or annotation is dict:
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)
  if annotation is float:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  if annotation is int:
    return isinstance(value, int) and not isinstance(value, bool)
  return isinstance(value, annotation)


def field_types() -> dict[str, Any]:
  """Field name -> its type (the annotations of `Config`, evaluated)."""
  return typing.get_type_hints(Config)


def check_types(config: Config) -> None:
  """Raises ConfigError for a field whose value is not of the field's type."""
  for name, annotation in field_types().items():
    value = getattr(config, name)
    if not conforms(value, annotation):
      _fail(f"config.{name} must be {describe_type(annotation)}, got {value!r}.")


def _positive_int(config: Config, name: str) -> None:
  value = getattr(config, name)
  if not isinstance(value, int) or isinstance(value, bool) or value < 1:
    _fail(f"config.{name} must be a positive int, got {value!r}.")


def _one_of(config: Config, name: str, registry: Iterable[str]) -> None:
  value = getattr(config, name)
  if value not in registry:
    _fail(f"config.{name}={value!r} is not known; use one of {', '.join(registry)}.")


def check_config(config: Config) -> None:
  """Raises ConfigError, with a sentence that says what to change, for a config that cannot run.

  Everything that can be checked without reading images is checked here, before any data is loaded
  or any model built: every field's type, the names against the registries, the numbers against
  each other, and the loss with its `loss_kwargs`, built and called once on two tiny lists
  (`losses.check_loss`), so that a hyperparameter the loss rejects fails here rather than at the
  first step. `train.check_run` checks the data against the sampler and the workdir next, still
  before anything is written. The checks run in a fixed order, and the first that fails is the
  error raised.
  """
  # pylint: disable=g-import-not-at-top
  from experiments import input_pipeline

  _check_names(config)
  _check_counts(config)
  dataset = input_pipeline.DATASETS[config.dataset]
  _check_batches(config, dataset, input_pipeline.SAMPLERS[config.sampler])
  _check_optimizer(config)
  _check_data(config, dataset)
  _check_model(config)
  _check_chunks(config)
  _check_devices(config)


def _check_names(config: Config) -> None:
  """Every field's type, the names against the registries, and the loss with its arguments."""
  # pylint: disable=g-import-not-at-top
  from experiments import input_pipeline
  from experiments import losses
  from experiments import networks

  check_types(config)
  _one_of(config, "dataset", input_pipeline.DATASETS)
  _one_of(config, "model", networks.MODELS)
  _one_of(config, "head", networks.HEADS)
  _one_of(config, "pooling", networks.POOLINGS)
  _one_of(config, "sampler", input_pipeline.SAMPLERS)
  losses.check_loss(config.loss, config.loss_kwargs)


def _check_counts(config: Config) -> None:
  """The sizes and periods that must be positive, the step counts that must not be negative."""
  for name in (
      "batch_size",
      "samples_per_class",
      "embedding_dim",
      "eval_every",
      "eval_batch_size",
      "checkpoint_every",
      "keep_checkpoints",
      "log_every",
      "tanh_every",
      "super_classes_per_batch",
      "batches_per_group",
  ):
    _positive_int(config, name)
  for name in ("num_steps", "warmup_steps", "memory_batches"):
    value = getattr(config, name)
    if not isinstance(value, int) or value < 0:
      _fail(f"config.{name} must be a non-negative int, got {value!r}.")


def _check_batches(config: Config, dataset: Any, sampler: Any) -> None:
  """The batch against the sampler: whole classes, two of them at least, and super-classes."""
  # pylint: disable=g-import-not-at-top
  from experiments import input_pipeline

  if sampler.whole_classes and config.batch_size % config.samples_per_class:
    _fail(
        f"config.batch_size={config.batch_size} is not a multiple of config.samples_per_class="
        f"{config.samples_per_class}: a batch holds whole classes of samples_per_class images; use "
        f"a batch size of {config.classes_per_batch * config.samples_per_class} or "
        f"{(config.classes_per_batch + 1) * config.samples_per_class}."
    )
  if sampler.whole_classes and config.classes_per_batch < 2:
    _fail(
        f"config.batch_size={config.batch_size} holds a single class of "
        f"{config.samples_per_class} images, so no list has a non-relevant item to rank; make "
        "batch_size at least twice samples_per_class."
    )
  if not sampler.super_classes:
    return
  if dataset.super_classes is None:
    with_super_classes = [d.super_classes for d in input_pipeline.DATASETS.values()]
    _fail(
        f"config.sampler={config.sampler!r} needs super-classes (categories such as SOP's "
        f"'bicycle'), which {config.dataset} does not have; use sampler='m_per_class', or "
        f"{' or '.join(s for s in with_super_classes if s is not None)}."
    )
  if config.classes_per_batch % config.super_classes_per_batch:
    _fail(
        f"config.sampler={config.sampler!r} takes the same number of classes from each of "
        f"super_classes_per_batch={config.super_classes_per_batch} super-classes, but "
        f"batch_size / samples_per_class = {config.classes_per_batch} classes is not a multiple "
        "of it; change batch_size or super_classes_per_batch."
    )


def _check_optimizer(config: Config) -> None:
  if config.learning_rate <= 0 or config.head_lr_multiplier <= 0 or config.weight_decay < 0:
    _fail(
        "config.learning_rate and config.head_lr_multiplier must be positive and "
        "config.weight_decay non-negative."
    )


def _check_data(config: Config, dataset: Any) -> None:
  """Where the data set is read from, and whether the model fits its images."""
  if dataset.bundled_with is not None:
    if config.data_dir is not None:
      _fail(
          f"config.data_dir must be None for dataset={config.dataset!r}, which ships with "
          f"{dataset.bundled_with}."
      )
  else:
    if config.data_dir is None:
      _fail(
          f"config.data_dir is None but dataset={config.dataset!r} is read from disk: set it to "
          "the directory where you prepared the data (see docs/guide/real_data.rst)."
      )
    if not os.path.isdir(config.data_dir):
      _fail(
          f"config.data_dir={config.data_dir!r} does not exist: point it at the directory where "
          f"you prepared {config.dataset} (see docs/guide/real_data.rst)."
      )
  if dataset.models is not None and config.model not in dataset.models:
    _fail(
        f"config.model={config.model!r} {dataset.misfit}; use "
        f"{' or '.join(f'model={m!r}' for m in dataset.models)} for {config.dataset}."
    )


def _check_model(config: Config) -> None:
  """The backbone's initial weights and its pooling."""
  # pylint: disable=g-import-not-at-top
  from experiments import networks

  if config.init_weights is not None and not os.path.isfile(config.init_weights):
    _fail(
        f"config.init_weights={config.init_weights!r} is not a file: give a local .npz of the "
        "backbone's variables (jaxrank.models.save_weights) or a torchvision/timm checkpoint "
        "(.pth, .pt, .safetensors); nothing is ever downloaded."
    )
  if config.pooling != "average" and not networks.MODELS[config.model].pooled:
    _fail(
        f"config.pooling={config.pooling!r} needs a ResNet: model={config.model!r} has its own "
        "pooling; leave pooling='average'."
    )


def _check_chunks(config: Config) -> None:
  """The chunked gradient: a divisor of the batch, and nothing that looks across a chunk."""
  # pylint: disable=g-import-not-at-top
  from experiments import networks

  if config.chunk_size is None:
    return
  _positive_int(config, "chunk_size")
  if config.batch_size % config.chunk_size:
    _fail(
        f"config.chunk_size={config.chunk_size} does not divide config.batch_size="
        f"{config.batch_size}; pick a divisor of the batch size."
    )
  if networks.MODELS[config.model].batch_norm and not config.freeze_batchnorm:
    _fail(
        f"config.chunk_size with model={config.model!r} needs freeze_batchnorm=True: BatchNorm "
        "normalises each chunk by its own statistics, so the chunked gradient would not be the "
        "batch's gradient."
    )
  if networks.HEADS[config.head].batch_norm:
    _fail(
        f"config.chunk_size cannot be used with head={config.head!r}: its BatchNorm normalises "
        "each chunk by its own statistics, so the chunked gradient would not be the batch's "
        "gradient; leave chunk_size=None."
    )
  if config.memory_batches:
    _fail("config.memory_batches cannot be combined with config.chunk_size: set one of them.")


def _check_devices(config: Config) -> None:
  """Sharding over the devices, and what a job of several processes needs."""
  # pylint: disable=g-import-not-at-top
  import jax

  if config.shard:
    n = jax.device_count()
    if config.batch_size % n:
      _fail(
          f"config.shard=True splits the batch over {n} devices, but config.batch_size="
          f"{config.batch_size} is not a multiple of {n}."
      )
    if config.memory_batches:
      _fail("config.shard=True does not support memory_batches; turn one off.")
  if jax.process_count() > 1:
    if not config.shard:
      _fail(
          f"running as {jax.process_count()} processes needs config.shard=True (one batch split "
          "over the devices of every process); add --set shard=True."
      )
    if config.chunk_size is not None:
      _fail(
          f"config.chunk_size cannot be combined with running as {jax.process_count()} "
          "processes; leave chunk_size=None (each process already holds only its share)."
      )
