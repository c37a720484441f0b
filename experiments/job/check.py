"""`check_config`: a configuration checked against the registries before anything is read or built.

The names a config gives (`dataset`, `sampler`, `model`, `head`, `pooling`, `loss`) are keys of the
registries of `datasets.py`, `samplers.py`, `networks.py` and `losses.py`, and the constraints of
a data set, sampler or model live in its registry record: this module reads them there. It sits
above the registries (they import `config`, never this module), so the imports of
`experiments/job` flow one way: config <- registries <- check <- train <- main.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, NoReturn

from experiments.job import config as config_lib
from experiments.job import datasets
from experiments.job import losses
from experiments.job import networks
from experiments.job import protocols
from experiments.job import samplers

Config = config_lib.Config


def _fail(message: str) -> NoReturn:
  raise config_lib.ConfigError(message)


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
  _check_names(config)
  _check_counts(config)
  dataset = datasets.DATASETS[config.dataset]
  _check_batches(config, dataset, samplers.SAMPLERS[config.sampler])
  _check_optimizer(config)
  _check_data(config, dataset)
  _check_model(config)
  _check_own_parameters(config)
  _check_chunks(config)
  _check_blocks(config)
  _check_devices(config)
  _check_profile(config)


def _check_names(config: Config) -> None:
  """Every field's type, the names against the registries, and the loss with its arguments."""
  config_lib.check_types(config)
  _one_of(config, "dataset", datasets.DATASETS)
  _one_of(config, "model", networks.MODELS)
  _one_of(config, "head", networks.HEADS)
  _one_of(config, "pooling", networks.POOLINGS)
  _one_of(config, "sampler", samplers.SAMPLERS)
  _one_of(config, "hashing_convention", protocols.HASHING_CONVENTIONS)
  _one_of(config, "hashing_averaged_over", protocols.HASHING_AVERAGED_OVER)
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
  for name in ("num_steps", "warmup_steps", "memory_batches", "freeze_backbone_steps"):
    value = getattr(config, name)
    if not isinstance(value, int) or value < 0:
      _fail(f"config.{name} must be a non-negative int, got {value!r}.")


def _check_batches(config: Config, dataset: Any, sampler: Any) -> None:
  """The batch against the sampler: whole classes, two of them at least, and super-classes."""
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
    with_super_classes = [d.super_classes for d in datasets.DATASETS.values()]
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
  """The learning rate and its multipliers (the head's, and those the losses' own parameters
  declare, `losses.OWN_PARAMETERS`) positive, the weight decay not negative."""
  multipliers = dict.fromkeys(p.lr_multiplier for p in losses.OWN_PARAMETERS.values())
  for name in ("learning_rate", "head_lr_multiplier", *multipliers):
    if getattr(config, name) <= 0:
      _fail(f"config.{name} must be positive, got {getattr(config, name)!r}.")
  if config.weight_decay < 0:
    _fail(f"config.weight_decay must be non-negative, got {config.weight_decay!r}.")


def _check_data(config: Config, dataset: Any) -> None:
  """Where the data set is read from, whether the model fits its images, the validation split."""
  if not 0.0 <= config.validation_fraction < 1.0:
    _fail(
      f"config.validation_fraction must be in [0, 1) (the fraction of the training classes held "
      f"out for validation; 0 for none), got {config.validation_fraction!r}."
    )
  if config.eval_test_classes and not config.validation_fraction:
    _fail(
      "config.eval_test_classes=True needs config.validation_fraction > 0: without a validation "
      "split the run evaluates on the test classes already; leave eval_test_classes=False."
    )
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
  if config.init_weights is not None and not os.path.isfile(config.init_weights):
    _fail(
      f"config.init_weights={config.init_weights!r} is not a file: give a local .npz of the "
      "backbone's variables (jaxrank.models.save_weights) or a torchvision/timm checkpoint "
      "(.pth, .pt, .safetensors); nothing is ever downloaded."
    )
  if config.pooling != "average" and not networks.MODELS[config.model].pooled:
    _fail(
      f"config.pooling={config.pooling!r} needs a backbone that takes a pooling (a ResNet or "
      f"small_convnet): model={config.model!r} has its own; leave pooling='average'."
    )


def _check_own_parameters(config: Config) -> None:
  """A loss with parameters of its own (`losses.OWN_PARAMETERS`) with none of the options its
  declaration refuses (those of the in-batch lists)."""
  own = losses.own_parameters(config.loss)
  if own is None:
    return
  default = Config()
  for name, why in own.refuses.items():
    value, unset = getattr(config, name), getattr(default, name)
    if value != unset:
      _fail(
        f"config.{name}={value!r} cannot be used with loss={config.loss!r}: {why}; leave "
        f"{name}={unset!r}."
      )


def _check_chunks(config: Config) -> None:
  """The chunked gradient: a divisor of the batch, and nothing that looks across a chunk."""
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


def _check_blocks(config: Config) -> None:
  """The loss over blocks of queries: a positive block, and a loss that is one mean over lists."""
  if config.loss_block_size is None:
    return
  _positive_int(config, "loss_block_size")
  losses.check_blocked_loss(config.loss, config.loss_kwargs, config.loss_block_size)


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


def _check_profile(config: Config) -> None:
  """The profiler's window: steps of the run, numbered from 1 as they are logged."""
  _positive_int(config, "profile_num_steps")
  if config.profile_start is None:
    return
  last = config.profile_start + config.profile_num_steps - 1
  if config.profile_start < 1 or last > config.num_steps:
    _fail(
      f"config.profile_start={config.profile_start} with profile_num_steps="
      f"{config.profile_num_steps} traces steps {config.profile_start} to {last}, outside the "
      f"run's steps 1 to {config.num_steps}; trace steps within them (after the first steps, "
      "which compile), or leave profile_start=None."
    )
