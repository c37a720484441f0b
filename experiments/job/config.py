"""A training run's configuration: the `Config` dataclass, its fields' types, and `ConfigError`.

Config files (`experiments/job/configs/*.py`) return a `Config` from `get_config()`. The names a
config gives (`dataset`, `sampler`, `model`, `head`, `loss`) are keys of the registries of
`datasets.py`, `samplers.py`, `networks.py` and `losses.py`; `check.check_config` checks them and
the numbers against each other. Every error of a configuration is a `ConfigError`, a `ValueError`
whose message is one sentence that says what to change; `experiments.job.main` prints it as one
line.

This module imports nothing of the job (the registries import it, never the other way), nor JAX or
TensorFlow, so that `python -m experiments.job.main --help` answers at once.
"""

from __future__ import annotations

import dataclasses
import types
import typing
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
  dataset: str = "digits"  # A key of datasets.DATASETS.
  data_dir: str | None = None  # tfds data_dir (cub200, cars196, sop) or the image_folder root.
  image_size: int = 224  # Crop size of photographs (ignored for digits).
  resize_size: int = 256  # Shorter side before cropping (ignored for digits).
  # Hold out this fraction of the training classes (seeded, per super-class; see
  # datasets.validation_split), train on the rest and evaluate on the held-out classes: a
  # class-disjoint validation split for tuning, which never reads the test classes. 0: none.
  validation_fraction: float = 0.0
  sampler: str = "m_per_class"  # A key of samplers.SAMPLERS.
  batch_size: int = 60
  samples_per_class: int = 12  # K; batch_size / K classes per batch.
  super_classes_per_batch: int = 2  # For sampler="super_class".
  batches_per_group: int = (
    5  # sampler="super_class": batches drawn from one group of super-classes.
  )
  # Model.
  model: str = "small_convnet"  # A key of networks.MODELS.
  model_features: tuple[int, ...] = (32, 64)  # SmallConvNet's stage widths.
  # A key of networks.HEADS: "embedding" (L2-normalised), "centred_embedding" (the same on
  # batch-centred features) or "hashing".
  head: str = "embedding"
  embedding_dim: int = 32  # D, or the number of bits b of a hashing head.
  pooling: str = "average"  # A key of networks.POOLINGS: the pooling of a ResNet's feature map.
  # A local file of backbone weights: an .npz of `models.save_weights`, or a torchvision/timm
  # checkpoint (.pth, .pt, .safetensors) converted by `jaxrank.convert.load_pytorch_weights`.
  init_weights: str | None = None
  freeze_batchnorm: bool = False  # Train ResNets with BatchNorm in inference mode.
  # Mixed precision, as Flax's ImageNet example's `half_precision`: the network computes in
  # bfloat16 on float32 parameters (normalisation statistics, attention's softmax, the embeddings,
  # the scores and the loss stay float32; see jaxrank.models). bfloat16, not float16, on GPUs and
  # TPUs alike: its float32 range needs no loss scaling. A run resumes only in its own precision.
  half_precision: bool = False
  tanh_initial: float = 1.0  # Hashing: alpha = tanh_initial * tanh_growth ** (step // tanh_every).
  tanh_growth: float = 2.0
  tanh_every: int = 1000
  # Loss.
  loss: str = "fastap"  # A key of experiments.job.losses.LOSSES (`--help` lists them).
  loss_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
  include_self: bool = False  # Whether a query is its own positive (see batch_retrieval).
  memory_batches: int = 0  # RaMBO's memory: the last tau batches join every list as a gallery.
  chunk_size: int | None = None  # Chunked gradient (jaxrank.chunked_value_and_grad).
  # The in-batch loss over blocks of this many queries (jaxrank.blocked_loss; with shard=True,
  # each device's queries): [block, B + M] scores at a time instead of [B, B + M]. None: whole.
  loss_block_size: int | None = None
  # Shard the in-batch retrieval over all devices of all processes (jaxrank.sharded_loss); a job
  # of several processes needs it.
  shard: bool = False
  # Optimisation.
  num_steps: int = 300
  learning_rate: float = 1e-3
  warmup_steps: int = 20
  weight_decay: float = 1e-4
  head_lr_multiplier: float = 10.0
  # Kim et al. 2020's warm-up: the backbone's parameters take no step for the first N steps
  # (the head and a loss's own parameters train), then train on the schedule. 0: from the first.
  freeze_backbone_steps: int = 0
  # A proxy loss's proxies (one per training class, losses.OWN_PARAMETERS) learn this many times
  # faster than the network: Kim et al. 2020's code trains Proxy-Anchor's 100x. Others ignore it.
  proxy_lr_multiplier: float = 100.0
  # A classification loss's class weights (normalized_softmax, arcface, cosface; one row per
  # training class) learn this many times faster than the network: 1, the network's own rate.
  class_weight_lr_multiplier: float = 1.0
  seed: int = 0
  # Bookkeeping.
  eval_every: int = 100
  eval_batch_size: int = 256
  eval_ks: tuple[int, ...] = (1, 2, 4, 8)
  # A hashing protocol's mAP@k (`jaxrank.evaluate_hashing`, protocols.HASHING_CONVENTIONS):
  # "textbook", or "released" (He et al.'s code, which drops the rank-1 term), and the queries it
  # averages (protocols.HASHING_AVERAGED_OVER: as the released codes do, see the docstring).
  hashing_convention: str = "textbook"
  hashing_averaged_over: str = "relevant_in_database"
  eval_seen_classes: bool = False  # Also evaluate on the train split (metrics named "seen/...").
  # With validation_fraction > 0, also evaluate on the data set's test classes at every
  # evaluation (metrics named "test/..."): one run's learning curve on both the validation and
  # the test classes. The test classes take no part in training or in choosing anything.
  eval_test_classes: bool = False
  # A sweep's table also gets a row "raw_pixels": retrieval on the images themselves (see
  # evaluation.evaluate_raw_pixels), what an embedding must beat to have learned beyond the pixels.
  raw_pixels_baseline: bool = False
  checkpoint_every: int = 100
  keep_checkpoints: int = 3
  log_every: int = 10
  # A progress bar on a terminal; off one (output redirected to a file), a plain line per log.
  progress_bar: bool = True
  # A jax.profiler trace of the steps profile_start to profile_start + profile_num_steps - 1
  # (numbered from 1, as logged), in <workdir>/plugins/profile/, which TensorBoard's
  # Profile tab opens (monitoring.py). None: no trace. Start after the first steps, which compile.
  profile_start: int | None = None
  profile_num_steps: int = 3
  # Debugging: check the values of traced inputs inside every step (`jaxrank.traced_checks`,
  # functionalized with checkify): a histogram loss's scores out of range, say, stop the run
  # with the eager check's message instead of being clipped. One host sync per step: slower.
  check_traced_inputs: bool = False

  @property
  def classes_per_batch(self) -> int:
    return self.batch_size // self.samples_per_class


def compute_dtype(config: Config) -> str:
  """The dtype the network computes in: "bfloat16" with `half_precision`, else "float32"."""
  return "bfloat16" if config.half_precision else "float32"


# Fields that change nothing a run computes: a rerun may differ in them and still resume.
COSMETIC_FIELDS = ("progress_bar", "check_traced_inputs", "profile_start", "profile_num_steps")


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
