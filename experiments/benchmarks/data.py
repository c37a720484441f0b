"""Benchmark: images per second of `jaxrank.data` pipelines, digits and a mock SOP, on this machine.

Command:

    .venv/bin/python -m experiments.benchmarks.data                 # 1-2 minutes on 2 cores
    .venv/bin/python -m experiments.benchmarks.data --batches 20    # a quicker look

Rows (all iterate `make_pipeline(...).as_numpy_iterator()`, as a training loop would; no training):

* digits, P x K: `load_digits("train")` (901 8x8 images) with `m_per_class_batches` (5 classes x
  12), images used as they are (batches gathered in numpy, no per-image `map`).
* digits, P x K, augmented: the same with `train_preprocess(resize_size=10, crop_size=8)` per image.
* mock SOP, hard, PNG: `load_stanford_online_products` under `testing.mock_retrieval_data` (the
  tfds builder, its features encoding 300x400 images as PNG), `super_class_batches` (2
  super-classes x 16 classes x 4 images = 128 a batch) and `train_preprocess` (resize 256, random
  crop 224, flip, ImageNet normalisation): decode plus augmentation of SOP-sized photographs.
* mock SOP, hard, JPEG: the same labels and images re-encoded as JPEG (quality 90), as the real SOP
  is stored.
* sampler only: one epoch of `m_per_class_batches` / `super_class_batches` for SOP-sized labels
  (59,551 images in 11,318 classes of 2-12, 12 super-classes), indices per second.

Times exclude the first `--warmup` batches (tf.data start-up, autotuning).

What it measured on the 2-core development machine, and what that means for real training, is in
docs/guide/real_data.rst, section "Input throughput".
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import jaxrank.data as jd  # noqa: E402
from experiments.job import input_pipeline  # noqa: E402
from jaxrank.data import testing  # noqa: E402


def images_per_second(ds: tf.data.Dataset, batches: int, warmup: int) -> tuple[float, int]:
  it = ds.as_numpy_iterator()
  for _ in itertools.islice(it, warmup):
    pass
  start = time.perf_counter()
  batch = None
  for batch in itertools.islice(it, batches):  # noqa: B007  (the last batch's size, below)
    pass
  elapsed = time.perf_counter() - start
  assert batch is not None, "batches must be at least 1"
  size = len(batch["label"])
  return batches * size / elapsed, size


def to_jpeg(data: jd.LabeledImages) -> jd.LabeledImages:
  encoded = np.empty(data.num_examples, dtype=object)
  for i, png in enumerate(data.images):
    encoded[i] = tf.io.encode_jpeg(tf.io.decode_png(png, channels=3), quality=90).numpy()
  return jd.LabeledImages(encoded, data.labels, data.super_labels, image_format="encoded")


def sop_sized_labels(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  sizes = rng.integers(2, 13, size=11_318)
  return np.repeat(np.arange(11_318), sizes), np.repeat(rng.integers(0, 12, size=11_318), sizes)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batches", type=int, default=40, help="timed batches of the SOP rows")
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--image-size", type=int, nargs=2, default=(300, 400), metavar=("H", "W"))
  args = parser.parse_args()
  input_pipeline.hide_gpus_from_tensorflow()
  rows = []

  digits = jd.load_digits("train")
  sampler = functools.partial(
    jd.m_per_class_batches, digits.labels, classes_per_batch=5, samples_per_class=12, seed=0
  )
  ds = jd.make_pipeline(digits, sampler)
  rows.append(("digits, P x K", *images_per_second(ds, 50 * args.batches, args.warmup)))
  augment = functools.partial(
    jd.train_preprocess, resize_size=10, crop_size=8, mean=(0.5,), std=(0.5,)
  )
  ds = jd.make_pipeline(digits, sampler, preprocess_fn=augment)
  rows.append(("digits, P x K, augmented", *images_per_second(ds, 5 * args.batches, args.warmup)))

  with testing.mock_retrieval_data(
    classes_per_split=192, images_per_class=4, image_size=tuple(args.image_size)
  ):
    sop = jd.load_stanford_online_products(split="train")
  hard = functools.partial(
    jd.super_class_batches,
    sop.labels,
    sop.super_labels,
    classes_per_batch=32,
    samples_per_class=4,
    batches_per_group=10,
    seed=0,
  )
  size = "x".join(map(str, args.image_size))
  for name, data in (("PNG", sop), ("JPEG", to_jpeg(sop))):
    ds = jd.make_pipeline(data, hard, preprocess_fn=jd.train_preprocess)
    rate = images_per_second(ds, args.batches, args.warmup)
    rows.append((f"mock SOP, hard, {name} ({size})", *rate))

  labels, supers = sop_sized_labels()
  for name, fn in (
    ("m-per-class", functools.partial(jd.m_per_class_batches, labels, classes_per_batch=32)),
    (
      "hard",
      functools.partial(
        jd.super_class_batches, labels, supers, classes_per_batch=32, batches_per_group=10
      ),
    ),
  ):
    start = time.perf_counter()
    b = fn(samples_per_class=4, seed=0, epoch=0)
    rate = b.size / (time.perf_counter() - start)
    rows.append((f"sampler only, {name}, SOP size", rate, b.shape[1]))

  print(f"{'pipeline':36} {'batch':>6} {'images/s':>12}")
  for name, rate, batch in rows:
    print(f"{name:36} {batch:6d} {rate:12,.0f}")


if __name__ == "__main__":
  main()
