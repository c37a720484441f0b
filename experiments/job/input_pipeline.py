"""The training job's tf.data pipelines: resumable training batches, and one pass to evaluate.

Training reads `TrainBatches`, an endless pipeline of the batches that a sampler (`samplers.py`)
draws from a data set (`datasets.py`), which knows its data position `(epoch, batch)` for
checkpoints; evaluation reads `eval_batches`, one pass in order, padded and masked.

Entry points call `hide_gpus_from_tensorflow()` first: tf.data runs on the CPU and would otherwise
take GPU memory that JAX needs.

TensorFlow (and `jaxrank.data`, which imports it) is imported by the functions that load and feed
data, when they are first called, not with this module nor with `datasets` and `samplers`: the
registries' facts that the training step reads (a data set's channels, whether a sampler draws
whole classes) then cost no TensorFlow, and the step can be built and run where TensorFlow is not
installed (the GPU machines of `experiments.benchmarks.device`; `tests/test_train.py` checks that
building it imports none).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from experiments.job import datasets

if TYPE_CHECKING:
  import jaxrank.data as jd
  from experiments.job.config import Config
  from experiments.job.samplers import BatchesFn


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

    preprocess = datasets.preprocess_fn(config, train=True)
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
    preprocess_fn=datasets.preprocess_fn(config, train=False),
    num_epochs=1,
  )
  return ds.as_numpy_iterator()
