"""From a data set and a sampler to a tf.data pipeline of fixed-shape batches.

The sampler decides which examples form each batch (`samplers`); the pipeline reads them, decodes
and preprocesses each image in parallel (`map`), batches with `drop_remainder=True` and prefetches,
big_vision style. Iterate it as numpy: `for batch in ds.as_numpy_iterator()`, and feed a jitted
training step through `prefetch_to_device`, which puts the next batches on the device while the
step runs.

Each element is a dict of numpy-convertible tensors with a fixed leading batch dimension `B`:

* `image`: `[B, ...]`, the preprocessed images (`[B, H, W, C]` float32 after `train_preprocess`);
* `label`: `[B]` int32 class labels (-1 for padding), or `[B, C]` multi-hot labels for a
  multi-label data set (rows of -1 for padding);
* `super_label`: `[B]` int32 super-class labels (-1 for padding), only if the data has them;
* `index`: `[B]` int64 indices into the data set (-1 for padding);
* `mask`: `[B]` bool, False for the padding of `sequential_batches` (always True for training).

>>> import functools
>>> from jaxrank.data import datasets, pipeline, samplers
>>> train = datasets.load_digits("train")
>>> sampler = functools.partial(samplers.m_per_class_batches, train.labels,
...                             classes_per_batch=4, samples_per_class=8, seed=0)
>>> ds = pipeline.make_pipeline(train, sampler)
>>> batch = next(ds.as_numpy_iterator())
>>> batch["image"].shape, batch["label"].shape, bool(batch["mask"].all())
((32, 8, 8, 1), (32,), True)
"""

from __future__ import annotations

import collections
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import numpy as np
import tensorflow as tf

from jaxrank._src import checks
from jaxrank.data import datasets
from jaxrank.data import preprocess

PreprocessFn = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
_SEED = "_augmentation_seed"  # Internal: carried from the generator to the map, then dropped.
Batches = np.ndarray | Callable[..., np.ndarray]


def _checked(fn: str, indices, num_examples: int, batch_size: int | None, epoch: int) -> np.ndarray:
  indices = np.asarray(indices)
  if indices.ndim != 2 or indices.shape[0] == 0 or not np.issubdtype(indices.dtype, np.integer):
    raise ValueError(
      f"{fn}: the batches of epoch {epoch} must be a non-empty integer array [num_batches, B], "
      f"got {indices.dtype} {indices.shape}."
    )
  if batch_size is not None and indices.shape[1] != batch_size:
    raise ValueError(
      f"{fn}: epoch {epoch} has batches of {indices.shape[1]} but epoch 0 had {batch_size}; a "
      "pipeline's batches keep one shape."
    )
  if indices.max() >= num_examples or indices.min() < -1:
    raise ValueError(
      f"{fn}: the batches of epoch {epoch} hold indices outside [-1, {num_examples}) for a "
      f"data set of {num_examples} examples."
    )
  return indices.astype(np.int64)


def make_pipeline(
  data: datasets.LabeledImages,
  batches: Batches,
  *,
  preprocess_fn: PreprocessFn | None = None,
  seed: int = 0,
  num_epochs: int | None = None,
  start_epoch: int = 0,
  start_batch: int = 0,
  columns: tuple[int, int] | None = None,
  num_parallel_calls: int = tf.data.AUTOTUNE,
) -> tf.data.Dataset:
  """A tf.data pipeline of the batches a sampler chooses, read, decoded and preprocessed.

  Args:
    data: the examples (`LabeledImages`). Encoded images and paths are decoded to uint8
      `[H, W, 3]`; arrays are used as they are.
    batches: the sampler: a function called as `batches(epoch=e)` that returns the `[num_batches,
      B]` int array of indices of epoch `e` (for example
      `functools.partial(samplers.m_per_class_batches, data.labels, classes_per_batch=...,
      samples_per_class=..., seed=...)`), or one such array used for every epoch (for example
      `samplers.sequential_batches(data.num_examples, batch_size=...)` for evaluation). Index -1
      is padding. Epoch 0 is built here, so a sampler's errors are raised before iterating.
    preprocess_fn: `fn(image, seed) -> image` applied to each decoded image, with a `[2]` int64
      seed unique to the example's place in the stream, `(seed, epoch * 2**32 + position in the
      epoch)` (`preprocess.train_preprocess`, `preprocess.eval_preprocess`, fixed with
      `functools.partial`); None keeps the images as they are, which needs images of one shape.
    seed: seed of the augmentation (the sampler has its own); the same seed, sampler and data give
      the same batches, bit for bit.
    num_epochs: epochs to run, counted from `start_epoch`; None repeats forever.
    start_epoch: the first epoch to read (the sampler is called with `epoch=start_epoch` first).
    start_batch: batches of `start_epoch` to leave out. A pipeline started at `(start_epoch,
      start_batch)` yields exactly what one started at `(0, 0)` yields from that point on,
      augmentation included: a training run restored from a checkpoint resumes its data where it
      stopped without reading the batches before.
    columns: `(start, stop)` to read only the columns `start:stop` of every batch (one process's
      share of a global batch in a multi-process job): the examples, and the augmentation each
      gets, are exactly those of the same columns of the whole batch (each keeps the seed of its
      place in the whole batch), and batches have `stop - start` rows. None reads whole batches.
    num_parallel_calls: parallelism of the decode-and-preprocess `map`.

  Returns:
    A `tf.data.Dataset` of dicts (`image`, `label`, [`super_label`], `index`, `mask`), each with
    leading dimension `B`; see the module docstring.

  Raises:
    ValueError: the sampler's own errors for an impossible request, or batches that are not
      `[num_batches, B]` indices into `data`.
  """
  fn = "make_pipeline"
  checks.check_positive_int(fn, "num_epochs", num_epochs, allow_none=True)
  checks.check_int_at_least(fn, "start_epoch", start_epoch, 0)
  checks.check_int_at_least(fn, "start_batch", start_batch, 0)
  if callable(batches):
    sampler = batches
  else:
    fixed = np.asarray(batches)
    sampler = lambda epoch: fixed
  first = _checked(fn, sampler(epoch=start_epoch), data.num_examples, None, start_epoch)
  if start_batch >= first.shape[0]:
    raise ValueError(
      f"{fn}: start_batch {start_batch} is past the end of epoch {start_epoch}, which has "
      f"{first.shape[0]} batches."
    )
  begin, end = _checked_columns(fn, columns, first.shape[1])
  generate = functools.partial(
    _examples,
    data,
    sampler,
    first,
    start_epoch=start_epoch,
    start_batch=start_batch,
    num_epochs=num_epochs,
    columns=(begin, end),
    seed=seed,
  )
  ds = tf.data.Dataset.from_generator(generate, output_signature=_signature(data, end - begin))
  if data.image_format == "array" and preprocess_fn is None:
    drop_seed = lambda example: {k: v for k, v in example.items() if k != _SEED}
    return ds.map(drop_seed).prefetch(tf.data.AUTOTUNE)
  ds = ds.unbatch()
  ds = ds.map(
    functools.partial(_load, data.image_format, preprocess_fn),
    num_parallel_calls=num_parallel_calls,
    deterministic=True,
  )
  return ds.batch(end - begin, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def _checked_columns(fn: str, columns: tuple[int, int] | None, width: int) -> tuple[int, int]:
  """`columns` checked against the sampler's batch size `width`; None is every column."""
  if columns is None:
    return 0, width
  if (
    not isinstance(columns, tuple)
    or len(columns) != 2
    or not all(isinstance(c, int) and not isinstance(c, bool) for c in columns)
  ):
    raise TypeError(f"{fn}: columns must be a tuple (start, stop) of two ints, got {columns!r}.")
  if not 0 <= columns[0] < columns[1] <= width:
    raise ValueError(
      f"{fn}: columns {columns} must satisfy 0 <= start < stop <= {width} (the sampler's batch "
      "size)."
    )
  return columns


def _examples(
  data: datasets.LabeledImages,
  sampler: Callable[..., np.ndarray],
  first: np.ndarray,
  *,
  start_epoch: int,
  start_batch: int,
  num_epochs: int | None,
  columns: tuple[int, int],
  seed: int,
) -> Iterator[dict[str, np.ndarray]]:
  """The undecoded batches of `make_pipeline`, each with the augmentation seed of its examples.

  `first` is the sampler's (checked) batches of `start_epoch`; later epochs are drawn and checked
  as they come.
  """
  images, labels, supers = data.images, data.labels, data.super_labels
  begin, end = columns
  width = first.shape[1]
  stop = None if num_epochs is None else start_epoch + num_epochs
  for epoch in itertools.count(start_epoch) if stop is None else range(start_epoch, stop):
    if epoch == start_epoch:
      rows, skip = first, start_batch
    else:
      rows, skip = _checked("make_pipeline", sampler(epoch=epoch), len(labels), width, epoch), 0
    for b in range(skip, len(rows)):
      row = rows[b, begin:end]
      valid = row >= 0
      safe = np.where(valid, row, 0)
      # The seed of each example's place in the whole batch, whichever columns are read.
      positions = (epoch << 32) + b * width + np.arange(begin, end, dtype=np.int64)
      out = {
        "image": images[safe],
        "label": np.where(_rows(valid, labels), labels[safe], -1).astype(np.int32),
        "index": row,
        "mask": valid,
        _SEED: np.stack([np.full(end - begin, seed, np.int64), positions], axis=1),
      }
      if supers is not None:
        out["super_label"] = np.where(valid, supers[safe], -1).astype(np.int32)
      yield out


def _rows(valid: np.ndarray, labels: np.ndarray) -> np.ndarray:
  """`valid [B]` shaped to select rows of `labels` (`[N]`, or `[N, C]` multi-hot)."""
  return valid.reshape(valid.shape + (1,) * (labels.ndim - 1))


def _signature(data: datasets.LabeledImages, batch_size: int) -> dict[str, tf.TensorSpec]:
  """The `output_signature` of `_examples`' batches of `batch_size`."""
  if data.image_format == "array":
    image_spec = tf.TensorSpec((batch_size, *data.images.shape[1:]), tf.as_dtype(data.images.dtype))
  else:
    image_spec = tf.TensorSpec((batch_size,), tf.string)
  spec = {
    "image": image_spec,
    "label": tf.TensorSpec((batch_size, *data.labels.shape[1:]), tf.int32),
    "index": tf.TensorSpec((batch_size,), tf.int64),
    "mask": tf.TensorSpec((batch_size,), tf.bool),
    _SEED: tf.TensorSpec((batch_size, 2), tf.int64),
  }
  if data.super_labels is not None:
    spec["super_label"] = tf.TensorSpec((batch_size,), tf.int32)
  return spec


def _load(
  image_format: str, preprocess_fn: PreprocessFn | None, example: dict[str, tf.Tensor]
) -> dict[str, tf.Tensor]:
  """One example read (a path), decoded (bytes) and preprocessed, its augmentation seed dropped."""
  example = dict(example)
  example_seed = example.pop(_SEED)
  image = example["image"]
  if image_format == "path":
    image = tf.io.read_file(image)
  if image_format != "array":
    image = preprocess.decode_image(image)
  if preprocess_fn is not None:
    image = preprocess_fn(image, example_seed)
  return {**example, "image": image}


def prefetch_to_device(
  iterator: Iterable[Any], size: int = 2, sharding: jax.sharding.Sharding | None = None
) -> Iterator[Any]:
  """The batches of `iterator` as JAX arrays on the device, `size` batches put ahead of the step.

  Each item (a dict of numpy arrays, as `make_pipeline(...).as_numpy_iterator()` yields, or any
  pytree of arrays) is put on the device with `jax.device_put`, which returns at once and copies
  in the background. When the consumer receives batch `k`, batches `k + 1 .. k + size` have
  already been read from `iterator` and their copies started, so the host-to-device copy of the
  next batches overlaps the training step of this one. This is the `prefetch_to_device` of the
  Flax examples for a `jax.jit` step (one array a leaf, placed by `sharding`) instead of `pmap`
  (a leading device axis). Besides the batches the consumer keeps, it holds `size` batches on the
  device (device memory: `size` batches more).

  Args:
    iterator: an iterator (or any iterable) of pytrees of arrays; read lazily, at most `size`
      items ahead of the consumer, and to its end.
    size: batches put on the device ahead of the one the consumer holds, at least 1.
    sharding: a `jax.sharding.Sharding` to put every leaf with (for example a `NamedSharding`
      splitting the batch axis over a mesh); None puts each leaf on JAX's default device.

  Returns:
    An iterator of the same pytrees in the same order, each leaf a `jax.Array` of the input leaf's
    shape and dtype (`image` `[B, H, W, C]`, `label` `[B]`, ...); it stops when `iterator` does.

  Raises:
    ValueError: `size` below 1 (`TypeError`: not an int).

  >>> import numpy as np
  >>> batches = ({"label": np.full(4, i, np.int32)} for i in range(3))
  >>> [batch["label"].tolist() for batch in prefetch_to_device(batches, size=2)]
  [[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2]]
  """
  checks.check_positive_int("prefetch_to_device", "size", size)
  return _prefetched(iter(iterator), size, sharding)


def _prefetched(
  iterator: Iterator[Any], size: int, sharding: jax.sharding.Sharding | None
) -> Iterator[Any]:
  """`prefetch_to_device` after its checks: a queue of `size + 1` batches put on the device."""
  queue: collections.deque[Any] = collections.deque()
  for item in iterator:
    queue.append(jax.device_put(item, sharding))
    if len(queue) > size:
      yield queue.popleft()
  while queue:
    yield queue.popleft()
