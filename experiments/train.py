"""Training an embedding with a jaxrank loss, evaluated on classes never seen in training.

`train_and_evaluate(config, workdir)` is the whole job, Flax-examples style: a `Config` in, a
workdir out, the final retrieval metrics returned. In the workdir:

* `config.json`: the run's configuration (a rerun with another configuration refuses the workdir);
* `checkpoints/<step>/`: orbax checkpoints of the model, optimizer state, step, memory of past
  batches and data position, every `checkpoint_every` steps and at the end, the last
  `keep_checkpoints` kept. Rerunning the same command resumes from the latest complete one (a run
  killed during a save leaves an unfinished directory that orbax ignores and removes), reading the
  data from where it stopped, so an interrupted run ends exactly where an uninterrupted one does;
* `metrics.jsonl`: one JSON record per logged step (`loss`, `learning_rate`, `images_per_second`)
  and per evaluation (`recall@k`, `map@r`, `map`, `tie_aware_map`), each with its `step`;
* `curves.png`: the training loss and Recall@k / MAP@R over time.

One step: a batch of `P x K` images (`samples_per_class` images of each of `batch_size /
samples_per_class` classes) is embedded, `jaxrank.batch_retrieval` makes every image a query ranking
the rest of the batch (and the memory of past batches when `memory_batches > 0`), and the loss named
by `config.loss` (`experiments/losses.py`) is minimised with AdamW, a warm-up + cosine learning
rate, and a learning rate `head_lr_multiplier` times larger on the embedding layer (the papers use
10x). Optionally the gradient is computed in chunks (`chunk_size`, `jaxrank.chunked_value_and_grad`)
or the in-batch retrieval is sharded over every device (`shard=True`, `jaxrank.sharded_loss`).

Evaluation embeds the test split (unseen classes) with the network in inference mode and computes
`jaxrank.evaluate_retrieval` (leave-one-out). A hashing model (`head="hashing"`) trains on relaxed
codes `tanh(alpha f)` with the similarity `1 - 2 d / b` of their relaxed Hamming distance (He et al.
2018, eq. 10) and is evaluated on the binary codes `sign(f)`, whose many ties `tie_aware_map`
accounts for.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

# pylint: disable=g-import-not-at-top
import jaxrank.data as jd  # First: hides the GPUs from TensorFlow before anything else runs.
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx

import jaxrank
from jaxrank import models
from experiments import losses

DATASETS = ("digits", "cub200", "cars196", "sop", "image_folder")
MODELS = ("small_convnet", "resnet18", "resnet50")
HEADS = ("embedding", "hashing")
SAMPLERS = ("m_per_class", "super_class", "random")


@dataclasses.dataclass(frozen=True)
class Config:
  """Everything a training run depends on. Config files return one from `get_config()`.

  Attributes are grouped as data, model, loss, optimisation and bookkeeping; defaults train a small
  convolutional network on the bundled digits.
  """

  # Data.
  dataset: str = "digits"  # One of DATASETS.
  data_dir: str | None = None  # tfds data_dir (cub200, cars196, sop) or the image_folder root.
  image_size: int = 224  # Crop size of photographs (ignored for digits).
  resize_size: int = 256  # Shorter side before cropping (ignored for digits).
  sampler: str = "m_per_class"  # One of SAMPLERS.
  batch_size: int = 60
  samples_per_class: int = 12  # K; batch_size / K classes per batch.
  super_classes_per_batch: int = 2  # For sampler="super_class".
  batches_per_group: int = (
      5  # sampler="super_class": batches drawn from one group of super-classes.
  )
  # Model.
  model: str = "small_convnet"  # One of MODELS.
  model_features: tuple[int, ...] = (32, 64)  # SmallConvNet's stage widths.
  head: str = "embedding"  # "embedding" (L2-normalised) or "hashing" (tanh codes).
  embedding_dim: int = 32  # D, or the number of bits b of a hashing head.
  init_weights: str | None = None  # A local .npz of backbone variables (`models.save_weights`).
  freeze_batchnorm: bool = False  # Train ResNets with BatchNorm in inference mode.
  tanh_initial: float = 1.0  # Hashing: alpha = tanh_initial * tanh_growth ** (step // tanh_every).
  tanh_growth: float = 2.0
  tanh_every: int = 1000
  # Loss.
  loss: str = "fastap"  # A key of experiments.losses.LOSSES.
  loss_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
  include_self: bool = False  # Whether a query is its own positive (see batch_retrieval).
  memory_batches: int = 0  # RaMBO's memory: the last tau batches join every list as a gallery.
  chunk_size: int | None = None  # Chunked gradient (jaxrank.chunked_value_and_grad).
  shard: bool = False  # Shard the in-batch retrieval over all devices (jaxrank.sharded_loss).
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
  checkpoint_every: int = 100
  keep_checkpoints: int = 3
  log_every: int = 10
  progress_bar: bool = True

  @property
  def classes_per_batch(self) -> int:
    return self.batch_size // self.samples_per_class


# Fields that change nothing a run computes: a rerun may differ in them and still resume.
_COSMETIC_FIELDS = ("progress_bar",)


def _fail(message: str) -> None:
  raise ValueError(message)


def _positive_int(config: Config, name: str) -> None:
  value = getattr(config, name)
  if not isinstance(value, int) or isinstance(value, bool) or value < 1:
    _fail(f"config.{name} must be a positive int, got {value!r}.")


def _one_of(config: Config, name: str, choices: Sequence[str]) -> None:
  value = getattr(config, name)
  if value not in choices:
    _fail(f"config.{name}={value!r} is not known; use one of {', '.join(choices)}.")


def check_config(config: Config) -> None:
  """Raises ValueError, with a sentence that says what to change, for a config that cannot run.

  Everything that can be checked without reading images is checked here, before any data is loaded
  or any model built; `train_and_evaluate` checks the data against the sampler next, still before
  training starts.
  """
  _one_of(config, "dataset", DATASETS)
  _one_of(config, "model", MODELS)
  _one_of(config, "head", HEADS)
  _one_of(config, "sampler", SAMPLERS)
  losses.get_loss(config.loss, config.loss_kwargs)
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
  if not isinstance(config.num_steps, int) or config.num_steps < 0:
    _fail(f"config.num_steps must be a non-negative int, got {config.num_steps!r}.")
  if not isinstance(config.warmup_steps, int) or config.warmup_steps < 0:
    _fail(f"config.warmup_steps must be a non-negative int, got {config.warmup_steps!r}.")
  if not isinstance(config.memory_batches, int) or config.memory_batches < 0:
    _fail(f"config.memory_batches must be a non-negative int, got {config.memory_batches!r}.")
  if config.sampler != "random" and config.batch_size % config.samples_per_class:
    _fail(
        f"config.batch_size={config.batch_size} is not a multiple of config.samples_per_class="
        f"{config.samples_per_class}: a batch holds whole classes of samples_per_class images; use "
        f"a batch size of {config.classes_per_batch * config.samples_per_class} or "
        f"{(config.classes_per_batch + 1) * config.samples_per_class}."
    )
  if config.sampler != "random" and config.classes_per_batch < 2:
    _fail(
        f"config.batch_size={config.batch_size} holds a single class of "
        f"{config.samples_per_class} images, so no list has a non-relevant item to rank; make "
        "batch_size at least twice samples_per_class."
    )
  if config.sampler == "super_class":
    if config.dataset in ("digits", "cub200", "cars196"):
      _fail(
          f"config.sampler='super_class' needs super-classes (categories such as SOP's 'bicycle'), "
          f"which {config.dataset} does not have; use sampler='m_per_class', or dataset='sop' or "
          "an image_folder tree category/class/image."
      )
    if config.classes_per_batch % config.super_classes_per_batch:
      _fail(
          f"config.sampler='super_class' takes the same number of classes from each of "
          f"super_classes_per_batch={config.super_classes_per_batch} super-classes, but "
          f"batch_size / samples_per_class = {config.classes_per_batch} classes is not a multiple "
          "of it; change batch_size or super_classes_per_batch."
      )
  if config.learning_rate <= 0 or config.head_lr_multiplier <= 0 or config.weight_decay < 0:
    _fail(
        "config.learning_rate and config.head_lr_multiplier must be positive and "
        "config.weight_decay non-negative."
    )
  if config.dataset == "digits":
    if config.data_dir is not None:
      _fail("config.data_dir must be None for dataset='digits', which ships with scikit-learn.")
    if config.model != "small_convnet":
      _fail(
          f"config.model={config.model!r} would reduce the 8 x 8 digits to nothing; use "
          "model='small_convnet' for digits."
      )
  else:
    if config.data_dir is None:
      _fail(
          f"config.data_dir is None but dataset={config.dataset!r} is read from disk: set it to "
          "the directory where you prepared the data (see the README's 'Real data' section)."
      )
    if not os.path.isdir(config.data_dir):
      _fail(
          f"config.data_dir={config.data_dir!r} does not exist: point it at the directory where "
          f"you prepared {config.dataset} (see the README's 'Real data' section)."
      )
  if config.init_weights is not None and not os.path.isfile(config.init_weights):
    _fail(
        f"config.init_weights={config.init_weights!r} is not a file: give a local .npz of the "
        "backbone's variables (jaxrank.models.save_weights); nothing is ever downloaded."
    )
  if config.chunk_size is not None:
    _positive_int(config, "chunk_size")
    if config.batch_size % config.chunk_size:
      _fail(
          f"config.chunk_size={config.chunk_size} does not divide config.batch_size="
          f"{config.batch_size}; pick a divisor of the batch size."
      )
    if config.model != "small_convnet" and not config.freeze_batchnorm:
      _fail(
          f"config.chunk_size with model={config.model!r} needs freeze_batchnorm=True: BatchNorm "
          "normalises each chunk by its own statistics, so the chunked gradient would not be the "
          "batch's gradient."
      )
    if config.memory_batches:
      _fail("config.memory_batches cannot be combined with config.chunk_size: set one of them.")
  if config.shard:
    n = jax.device_count()
    if config.batch_size % n:
      _fail(
          f"config.shard=True splits the batch over {n} devices, but config.batch_size="
          f"{config.batch_size} is not a multiple of {n}."
      )
    if config.memory_batches or config.head == "hashing":
      _fail("config.shard=True supports neither memory_batches nor head='hashing'; turn one off.")


# ---------------------------------------------------------------------------------------------
# Data.


def _load_data(config: Config) -> tuple[jd.LabeledImages, jd.LabeledImages]:
  if config.dataset == "digits":
    return jd.load_digits("train"), jd.load_digits("test")
  if config.dataset == "image_folder":
    train_dir, test_dir = (os.path.join(config.data_dir, s) for s in ("train", "test"))
    for d in (train_dir, test_dir):
      if not os.path.isdir(d):
        _fail(
            f"config.data_dir={config.data_dir!r} must hold train/ and test/ class folders for "
            f"dataset='image_folder'; {d!r} is missing."
        )
    supers = config.sampler == "super_class"
    return (
        jd.load_image_folder(train_dir, super_classes=supers),
        jd.load_image_folder(test_dir, super_classes=supers),
    )
  load = {
      "cub200": jd.load_cub200,
      "cars196": jd.load_cars196,
      "sop": jd.load_stanford_online_products,
  }[config.dataset]
  return load(config.data_dir, split="train"), load(config.data_dir, split="test")


def _sampler(config: Config, train: jd.LabeledImages) -> Callable[..., np.ndarray]:
  """The training sampler `sampler(epoch=e) -> [num_batches, B]`; its errors are config errors."""
  if config.sampler == "random":
    sampler = functools.partial(
        jd.random_batches, train.num_examples, batch_size=config.batch_size, seed=config.seed
    )
  elif config.sampler == "super_class":
    if train.super_labels is None:
      _fail(
          f"config.sampler='super_class' needs super-classes, which {config.dataset} does not "
          "have; use sampler='m_per_class'."
      )
    sampler = functools.partial(
        jd.super_class_batches,
        train.labels,
        train.super_labels,
        classes_per_batch=config.classes_per_batch,
        samples_per_class=config.samples_per_class,
        super_classes_per_batch=config.super_classes_per_batch,
        batches_per_group=config.batches_per_group,
        seed=config.seed,
    )
  else:
    sampler = functools.partial(
        jd.m_per_class_batches,
        train.labels,
        classes_per_batch=config.classes_per_batch,
        samples_per_class=config.samples_per_class,
        seed=config.seed,
    )
  if config.sampler != "random" and train.num_classes < config.classes_per_batch:
    _fail(
        f"config.batch_size / config.samples_per_class = {config.classes_per_batch} classes per "
        f"batch, but the train split of {config.dataset} has only {train.num_classes} classes; "
        f"lower batch_size to at most {train.num_classes * config.samples_per_class} or raise "
        "samples_per_class."
    )
  try:
    sampler(epoch=0)
  except ValueError as e:
    raise ValueError(
        f"config cannot be sampled from the train split of {config.dataset}: {e}"
    ) from e
  return sampler


def _preprocess(config: Config, train: bool):
  if config.dataset == "digits":
    return None
  fn = jd.train_preprocess if train else jd.eval_preprocess
  return functools.partial(fn, resize_size=config.resize_size, crop_size=config.image_size)


class _Batches:
  """Training batches from a data position `(epoch, batch)`, with the position after each batch."""

  def __init__(self, config: Config, data: jd.LabeledImages, sampler, position: tuple[int, int]):
    self._sampler = sampler
    self._sizes: dict[int, int] = {}
    self.position = position
    self._iterator = jd.make_pipeline(
        data,
        sampler,
        preprocess_fn=_preprocess(config, train=True),
        seed=config.seed,
        start_epoch=position[0],
        start_batch=position[1],
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


# ---------------------------------------------------------------------------------------------
# Model, optimiser, loss.


def make_model(config: Config, in_channels: int, rngs: nnx.Rngs) -> models.EmbeddingModel:
  """The network of a config: backbone and head, backbone weights loaded if given."""
  if config.model == "small_convnet":
    backbone = models.SmallConvNet(in_channels, features=config.model_features, rngs=rngs)
  elif config.model == "resnet18":
    backbone = models.resnet18(in_channels=in_channels, rngs=rngs)
  else:
    backbone = models.resnet50(in_channels=in_channels, rngs=rngs)
  if config.init_weights is not None:
    models.load_weights(backbone, config.init_weights)
  head_type = models.EmbeddingHead if config.head == "embedding" else models.HashingHead
  return models.EmbeddingModel(
      backbone, head_type(backbone.out_features, config.embedding_dim, rngs=rngs)
  )


def learning_rate_schedule(config: Config) -> optax.Schedule:
  """Linear warm-up to `learning_rate`, then cosine decay to 1% of it at `num_steps`."""
  warmup = min(config.warmup_steps, max(config.num_steps - 1, 0))
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0 if warmup else config.learning_rate,
      peak_value=config.learning_rate,
      warmup_steps=warmup,
      decay_steps=max(config.num_steps, warmup + 1),
      end_value=0.01 * config.learning_rate,
  )


def make_optimizer(config: Config) -> optax.GradientTransformation:
  """AdamW with the schedule; the head's learning rate is `head_lr_multiplier` times larger."""
  schedule = learning_rate_schedule(config)
  head_schedule = lambda step: config.head_lr_multiplier * schedule(step)

  def labels(params):
    return jax.tree_util.tree_map_with_path(
        lambda path, _: "head" if path[0].key == "head" else "backbone", params
    )

  return optax.multi_transform(
      {
          "backbone": optax.adamw(schedule, weight_decay=config.weight_decay),
          "head": optax.adamw(head_schedule, weight_decay=config.weight_decay),
      },
      labels,
  )


def _tanh_scale(config: Config, step: jax.Array) -> jax.Array | None:
  if config.head != "hashing":
    return None
  return jaxrank.hashing.tanh_scale(
      step, initial=config.tanh_initial, growth=config.tanh_growth, every=config.tanh_every
  )


def _batch_loss_fn(config: Config) -> Callable[[jax.Array, Any], jax.Array]:
  """`fn(embeddings [B, D], (labels [B], memory or None)) -> scalar`: retrieval, then the loss."""
  list_loss = losses.get_loss(config.loss, config.loss_kwargs)
  if config.shard:
    mesh = jax.make_mesh(
        (jax.device_count(),), ("batch",), axis_types=(jax.sharding.AxisType.Auto,)
    )
    sharded = jaxrank.sharded_loss(list_loss, mesh, "batch", include_self=config.include_self)
    return lambda embeddings, targets: sharded(embeddings, targets[0])

  def loss(embeddings, targets):
    labels, memory = targets
    scores, relevance, where = jaxrank.batch_retrieval(
        embeddings,
        labels,
        include_self=config.include_self,
        gallery_embeddings=None if memory is None else memory.embeddings,
        gallery_labels=None if memory is None else memory.labels,
        gallery_where=None if memory is None else memory.where,
    )
    if config.head == "hashing":
      # He et al. eq. 10: the similarity 1 - 2 d / b of the relaxed Hamming distance, which the
      # histogram losses bin with num_bins = b + 1 (cosine would ignore how saturated codes are).
      codes = embeddings
      if memory is not None:
        codes = jnp.concatenate([embeddings, memory.embeddings])
      distances = jaxrank.hashing.relaxed_hamming_distance(embeddings, codes)
      scores = 1.0 - 2.0 * distances / embeddings.shape[-1]
    return list_loss(scores, relevance, where=where)

  return loss


# ---------------------------------------------------------------------------------------------
# The training state: a pytree of arrays, saved and restored as a whole.


@dataclasses.dataclass
class _Model:
  """The model split for pure functions: graph definitions for training and inference."""

  train_graph: Any
  eval_graph: Any


def _init_state(config: Config, in_channels: int, tx: optax.GradientTransformation):
  model = make_model(config, in_channels, nnx.Rngs(config.seed))
  model.eval()
  eval_graph, params, rest = nnx.split(model, nnx.Param, ...)
  model.train()
  if config.freeze_batchnorm:
    model.backbone.eval()
  train_graph, _, _ = nnx.split(model, nnx.Param, ...)
  state = {"params": params, "rest": rest, "opt_state": tx.init(params), "step": jnp.int32(0)}
  if config.memory_batches:
    state["memory"] = jaxrank.memory.init(
        config.memory_batches * config.batch_size, config.embedding_dim
    )
  return _Model(train_graph, eval_graph), state


def _make_train_step(config: Config, model: _Model, tx: optax.GradientTransformation):
  batch_loss = _batch_loss_fn(config)

  def embed(params, rest, images, scale):
    net = nnx.merge(model.train_graph, params, rest)
    embeddings = net(images, scale=scale)
    return embeddings, nnx.state(net, nnx.Not(nnx.Param))

  def step_fn(state, images, labels):
    scale = _tanh_scale(config, state["step"])
    memory = state.get("memory")
    if config.chunk_size is None:

      def objective(params):
        embeddings, rest = embed(params, state["rest"], images, scale)
        return batch_loss(embeddings, (labels, memory)), (embeddings, rest)

      (loss, (embeddings, rest)), grads = jax.value_and_grad(objective, has_aux=True)(
          state["params"]
      )
    else:
      embed_params = lambda params, x: embed(params, state["rest"], x, scale)[0]
      loss, grads = jaxrank.chunked_value_and_grad(
          embed_params, batch_loss, chunk_size=config.chunk_size
      )(state["params"], images, (labels, memory))
      embeddings, rest = None, state["rest"]
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    new = {
        "params": optax.apply_updates(state["params"], updates),
        "rest": rest,
        "opt_state": opt_state,
        "step": state["step"] + 1,
    }
    if memory is not None:
      new["memory"] = jaxrank.memory.push(memory, embeddings, labels)
    return new, loss

  # No buffer donation: an asynchronous checkpoint save may still be reading the previous state.
  return jax.jit(step_fn)


def _make_embed_fn(config: Config, model: _Model):
  @jax.jit
  def embed(params, rest, images, step):
    outputs = nnx.merge(model.eval_graph, params, rest)(images, scale=_tanh_scale(config, step))
    return jaxrank.hashing.binarize(outputs) if config.head == "hashing" else outputs

  return embed


def evaluate(config: Config, embed_fn, state, test: jd.LabeledImages) -> dict[str, float]:
  """Leave-one-out retrieval metrics of the test split (unseen classes) under the current state."""
  batches = jd.sequential_batches(
      test.num_examples, batch_size=min(config.eval_batch_size, test.num_examples)
  )
  ds = jd.make_pipeline(test, batches, preprocess_fn=_preprocess(config, train=False), num_epochs=1)
  embeddings, labels = [], []
  for batch in ds.as_numpy_iterator():
    e = np.asarray(embed_fn(state["params"], state["rest"], batch["image"], state["step"]))
    embeddings.append(e[batch["mask"]])
    labels.append(batch["label"][batch["mask"]])
  return jaxrank.evaluate_retrieval(
      np.concatenate(embeddings), np.concatenate(labels), ks=config.eval_ks
  )


# ---------------------------------------------------------------------------------------------
# Bookkeeping: workdir, metrics file, plot.


def _config_json(config: Config) -> dict[str, Any]:
  values = dataclasses.asdict(config)
  return {
      k: (list(v) if isinstance(v, tuple) else v)
      for k, v in values.items()
      if k not in _COSMETIC_FIELDS
  }


def _claim_workdir(config: Config, workdir: str) -> None:
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, "config.json")
  wanted = _config_json(config)
  if os.path.exists(path):
    with open(path) as f:
      stored = json.load(f)
    if stored != wanted:
      changed = sorted(k for k in set(stored) | set(wanted) if stored.get(k) != wanted.get(k))
      _fail(
          f"workdir {workdir!r} holds a run of another configuration (it differs in {changed}); "
          "use a new workdir, or the same configuration to resume that run."
      )
  else:
    with open(path + ".tmp", "w") as f:
      json.dump(wanted, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def read_metrics(workdir: str) -> list[dict[str, Any]]:
  """The records of `metrics.jsonl` in a workdir, in order (empty if there is none)."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  records = []
  with open(path) as f:
    for line in f:
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError:  # A line cut short by a killed run.
        break
  return records


class _MetricsWriter:
  """Appends records to `metrics.jsonl`; on resume, first drops those logged after its step."""

  def __init__(self, workdir: str, resumed_step: int):
    self.path = os.path.join(workdir, "metrics.jsonl")
    kept = [r for r in read_metrics(workdir) if r["step"] <= resumed_step]
    with open(self.path + ".tmp", "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in kept)
    os.replace(self.path + ".tmp", self.path)

  def write(self, record: dict[str, Any]) -> None:
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")


def plot_curves(workdir: str, title: str = "") -> str:
  """Writes `curves.png`: training loss, and Recall@k and MAP@R on the test split, against steps."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  records = read_metrics(workdir)
  train = [r for r in records if "loss" in r]
  evals = [r for r in records if "map@r" in r]
  fig, (ax_loss, ax_eval) = plt.subplots(1, 2, figsize=(10, 3.6))
  if train:
    ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train])
  ax_loss.set(xlabel="step", ylabel="training loss", title="loss")
  if evals:
    steps = [r["step"] for r in evals]
    for key in [k for k in evals[-1] if k.startswith("recall@")] + ["map@r"]:
      ax_eval.plot(steps, [r[key] for r in evals], marker="o", label=key)
    ax_eval.legend(fontsize=8)
  ax_eval.set(xlabel="step", ylabel="test split (unseen classes)", title="retrieval")
  fig.suptitle(title)
  fig.tight_layout()
  path = os.path.join(workdir, "curves.png")
  fig.savefig(path, dpi=80)
  plt.close(fig)
  return path


def format_table(rows: dict[str, dict[str, float]], ks: Sequence[int] = (1, 2, 4, 8)) -> str:
  """A plain-text table of Recall@k and MAP@R (and tie-aware mAP), one row per named run.

  With `eval_seen_classes`, a last column gives MAP@R on the train split ("seen MAP@R").
  """
  keys = [f"recall@{k}" for k in ks] + ["map@r", "map", "tie_aware_map"]
  names = [f"R@{k}" for k in ks] + ["MAP@R", "mAP", "mAP_T"]
  if all("seen/map@r" in m for m in rows.values()):
    keys, names = keys + ["seen/map@r"], names + ["seen MAP@R"]
  width = max([len(n) for n in rows] + [12])
  lines = [f"{'run':{width}} " + " ".join(f"{n:>6}" for n in names)]
  lines.append("-" * len(lines[0]))
  for name, metrics in rows.items():
    lines.append(f"{name:{width}} " + " ".join(f"{metrics[k]:6.3f}" for k in keys))
  return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The job.


def train_and_evaluate(config: Config, workdir: str) -> dict[str, float]:
  """Trains (or resumes training) as `config` says, evaluating periodically; returns final metrics.

  Args:
    config: the run's `Config`.
    workdir: directory for the checkpoints, metrics, plot and config; a workdir that already holds
      checkpoints of the same config resumes from the latest.

  Returns:
    The final evaluation on the test split: `recall@k` for `config.eval_ks`, `map@r`, `map`,
    `tie_aware_map` (floats), and `step`.

  Raises:
    ValueError: a configuration that cannot run (before any training), or a workdir that holds a
      run of another configuration.
  """
  check_config(config)
  train_data, test_data = _load_data(config)
  sampler = _sampler(config, train_data)
  _claim_workdir(config, workdir)

  tx = make_optimizer(config)
  model, state = _init_state(config, _in_channels(config), tx)
  train_step = _make_train_step(config, model, tx)
  embed_fn = _make_embed_fn(config, model)

  manager = _checkpoint_manager(config, workdir)
  position = (0, 0)
  if manager.latest_step() is not None:
    restored = manager.restore(
        manager.latest_step(),
        args=ocp.args.Composite(state=ocp.args.StandardRestore(state), data=ocp.args.JsonRestore()),
    )
    state, position = restored["state"], tuple(restored["data"]["position"])
    logging.info("Resumed %s from step %d.", workdir, int(state["step"]))
  step = int(state["step"])
  writer = _MetricsWriter(workdir, step)

  def save(step):
    manager.save(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data=ocp.args.JsonSave({"position": list(batches.position)}),
        ),
        force=True,
    )

  def run_eval(step):
    metrics = evaluate(config, embed_fn, state, test_data)
    if config.eval_seen_classes:
      seen = evaluate(config, embed_fn, state, train_data)
      metrics.update({f"seen/{k}": v for k, v in seen.items()})
    writer.write({"step": step, **metrics})
    return metrics

  metrics = run_eval(step) if step == 0 else None
  batches = _Batches(config, train_data, sampler, position)
  progress = _progress_bar(config, step)
  last_time, last_step = time.perf_counter(), step
  try:
    while step < config.num_steps:
      batch = next(batches)
      images = jnp.asarray(batch["image"])
      labels = jnp.asarray(batch["label"])
      state, loss = train_step(state, images, labels)
      step += 1
      if step % config.log_every == 0 or step == config.num_steps:
        loss = float(loss)
        now = time.perf_counter()
        speed = (step - last_step) * config.batch_size / (now - last_time)
        last_time, last_step = now, step
        lr = float(learning_rate_schedule(config)(step - 1))
        writer.write({"step": step, "loss": loss, "learning_rate": lr, "images_per_second": speed})
        progress.set_postfix(loss=f"{loss:.4f}", img_per_s=f"{speed:.0f}")
        if not np.isfinite(loss):
          raise FloatingPointError(
              f"The training loss is {loss} at step {step}; lower the learning rate."
          )
      progress.update(1)
      if step % config.checkpoint_every == 0 or step == config.num_steps:
        save(step)
      if step % config.eval_every == 0 or step == config.num_steps:
        metrics = run_eval(step)
  finally:
    progress.close()
    manager.wait_until_finished()
    manager.close()
  if metrics is None:  # Resumed a finished run: its final evaluation is in the metrics file.
    done = [r for r in read_metrics(workdir) if "map@r" in r and r["step"] == step]
    metrics = done[-1] if done else run_eval(step)
  plot_curves(workdir, title=f"{config.loss} on {config.dataset}")
  return {**metrics, "step": step}


def _in_channels(config: Config) -> int:
  """Digits are grey `[8, 8, 1]` arrays; every photograph loader decodes RGB."""
  return 1 if config.dataset == "digits" else 3


def _checkpoint_manager(config: Config, workdir: str) -> ocp.CheckpointManager:
  return ocp.CheckpointManager(
      os.path.abspath(os.path.join(workdir, "checkpoints")),
      options=ocp.CheckpointManagerOptions(max_to_keep=config.keep_checkpoints, create=True),
  )


def restore_model(config: Config, workdir: str, step: int | None = None) -> models.EmbeddingModel:
  """The network of a run's checkpoint (the latest unless `step` is given), in inference mode.

  A hashing model returns the relaxed codes `tanh(alpha f)` when called with `scale=alpha`; binarise
  them with `jaxrank.hashing.binarize` as the evaluation does.

  Raises:
    FileNotFoundError: the workdir holds no checkpoint (of that step).
  """
  check_config(config)
  tx = make_optimizer(config)
  graphs, state = _init_state(config, _in_channels(config), tx)
  manager = _checkpoint_manager(config, workdir)
  try:
    step = manager.latest_step() if step is None else step
    if step is None or step not in manager.all_steps():
      raise FileNotFoundError(
          f"restore_model: {workdir!r} holds no checkpoint"
          f"{'' if step is None else f' of step {step}'}; it has steps {list(manager.all_steps())}."
      )
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(state)))
  finally:
    manager.close()
  state = restored["state"]
  return nnx.merge(graphs.eval_graph, state["params"], state["rest"])


def _progress_bar(config: Config, step: int):
  from tqdm import auto as tqdm  # pylint: disable=g-import-not-at-top

  return tqdm.tqdm(
      total=config.num_steps,
      initial=step,
      desc=config.loss,
      disable=not config.progress_bar,
      unit="step",
      dynamic_ncols=True,
      leave=False,
  )
