"""Benchmark: images per second of `jaxrank.data` pipelines (digits, mock SOP, JPEG photos) here.

Command:

    .venv/bin/python -m experiments.benchmarks.data --docs          # 1-2 minutes on 2 cores
    .venv/bin/python -m experiments.benchmarks.data --batches 20    # a quicker look
    .venv/bin/python -m experiments.benchmarks.data --skip-pipelines --skip-glyphs  # photos only

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

Times exclude the first `--warmup` batches (tf.data start-up, autotuning). Under the table, the
process's CPU time an image of the mock SOP rows (every thread, so independent of how many cores
other jobs leave) and of decoding their JPEGs alone.

A second table times `load_glyphs` generating both splits into an empty cache, at its defaults and
at the training job's settings (CPU time; `--skip-glyphs` leaves it out, `--skip-pipelines`
the first).

A third table (`--skip-photos` leaves it out) asks how many CPU cores keep one GPU busy. It writes
`--photos` JPEG photographs for the purpose into a temporary `class/image` tree (500x375, the
size of SOP and CUB photographs, quality 90, smooth random colour fields at three scales plus pixel
noise, so that decoding costs what a photograph's does), loads them with `load_image_folder` and
iterates `make_pipeline` with `random_batches` of `--photo-batch` and
`train_preprocess(resize_size=256, crop_size=224)` through `prefetch_to_device`, as a training loop
would, in two rows:

* tf.data, one thread: the pipeline's tf.data threads limited to one
  (`threading.private_threadpool_size = 1`, `max_intra_op_parallelism = 1`), its images/s the
  images/s of one core, measured directly (the Python thread that feeds the device runs beside it);
* tf.data, all cores: the default threading, its images/s and the process's CPU time an image,
  whose inverse is the images/s of one core.

Each row then gives the cores that feed each of `--step-rates` images/s: by default ResNet-50
training steps at batch 256 measured on an NVIDIA H200 (jaxrank float32, jaxrank's bfloat16 probe,
torch autocast).

`--docs` also writes the tables to docs/_generated/data_pipelines.json, data_glyphs.json and
data_photos.json, which docs/guide/real_data.rst shows (section "Input throughput", and the glyphs
at the top), with what the numbers mean for real training.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import os
import tempfile
import time
from collections.abc import Sequence
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from PIL import Image  # noqa: E402

import jaxrank.data as jd  # noqa: E402
from experiments import docs_data
from experiments.job import input_pipeline  # noqa: E402
from jaxrank.data import testing  # noqa: E402


def images_per_second(ds: tf.data.Dataset, batches: int, warmup: int) -> tuple[float, int, float]:
  """Images per second of iterating `ds`, its batch size, and the CPU milliseconds an image."""
  it = ds.as_numpy_iterator()
  for _ in itertools.islice(it, warmup):
    pass
  start, cpu = time.perf_counter(), time.process_time()
  batch = None
  for batch in itertools.islice(it, batches):  # noqa: B007  (the last batch's size, below)
    pass
  elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
  assert batch is not None, "batches must be at least 1"
  size = len(batch["label"])
  return batches * size / elapsed, size, 1000 * cpu / (batches * size)


def decode_ms(data: jd.LabeledImages) -> float:
  """CPU milliseconds an image of decoding `data`'s encoded images alone (`tf.io.decode_image`)."""
  cpu = time.process_time()
  for encoded in data.images:
    tf.io.decode_image(encoded, channels=3)
  return 1000 * (time.process_time() - cpu) / data.num_examples


def to_jpeg(data: jd.LabeledImages) -> jd.LabeledImages:
  encoded = np.empty(data.num_examples, dtype=object)
  for i, png in enumerate(data.images):
    encoded[i] = tf.io.encode_jpeg(tf.io.decode_png(png, channels=3), quality=90).numpy()
  return jd.LabeledImages(encoded, data.labels, data.super_labels, image_format="encoded")


def sop_sized_labels(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  sizes = rng.integers(2, 13, size=11_318)
  return np.repeat(np.arange(11_318), sizes), np.repeat(rng.integers(0, 12, size=11_318), sizes)


def digits_rows(batches: int, warmup: int) -> list[tuple[str, float, int]]:
  """The digits rows: (name, images/s, batch)."""
  digits = jd.load_digits("train")
  sampler = functools.partial(
    jd.m_per_class_batches, digits.labels, classes_per_batch=5, samples_per_class=12, seed=0
  )
  augment = functools.partial(
    jd.train_preprocess, resize_size=10, crop_size=8, mean=(0.5,), std=(0.5,)
  )
  rows = []
  for name, preprocess, count in (("", None, 50), (", augmented", augment, 5)):
    ds = jd.make_pipeline(digits, sampler, preprocess_fn=preprocess)
    rate, size, _ = images_per_second(ds, count * batches, warmup)
    rows.append((f"digits, P x K{name}", rate, size))
  return rows


def sop_rows(
  batches: int, warmup: int, image_size: Sequence[int]
) -> tuple[list[tuple[str, float, int]], list[str]]:
  """The mock SOP rows (name, images/s, batch), and the notes of their CPU time an image."""
  with testing.mock_retrieval_data(
    classes_per_split=192, images_per_class=4, image_size=(image_size[0], image_size[1])
  ):
    sop = jd.load_stanford_online_products(split="train")
  assert sop.super_labels is not None  # SOP has super-classes.
  hard = functools.partial(
    jd.super_class_batches,
    sop.labels,
    sop.super_labels,
    classes_per_batch=32,
    samples_per_class=4,
    batches_per_group=10,
    seed=0,
  )
  size = "x".join(map(str, image_size))
  rows, cpu = [], []
  jpeg = to_jpeg(sop)
  for name, data in (("PNG", sop), ("JPEG", jpeg)):
    ds = jd.make_pipeline(data, hard, preprocess_fn=jd.train_preprocess)
    rate, batch, ms = images_per_second(ds, batches, warmup)
    rows.append((f"mock SOP, hard, {name} ({size})", rate, batch))
    cpu.append(f"{name} {ms:.1f} ms")
  note = (
    f"CPU time an image of the mock SOP rows (every thread of the process): {', '.join(cpu)}; "
    f"decoding a {size} JPEG alone: {decode_ms(jpeg):.1f} ms."
  )
  return rows, [note]


def sampler_rows() -> list[tuple[str, float, int]]:
  """One epoch of each sampler for SOP-sized labels: (name, indices/s, batch)."""
  labels, supers = sop_sized_labels()
  rows = []
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
    rows.append(
      (f"sampler only, {name}, SOP size", b.size / (time.perf_counter() - start), b.shape[1])
    )
  return rows


# The glyphs' table: (row, load_glyphs's arguments) of each setting timed.
GLYPHS: tuple[tuple[str, dict[str, Any]], ...] = (
  ("defaults: 32 x 32, min_typefaces=12", {}),
  (
    "the training job's: 16 x 16, min_typefaces=16, strength=0.5",
    {"image_size": 16, "min_typefaces": 16, "strength": 0.5},
  ),
)


def glyphs_lines() -> list[str]:
  """The glyphs' table as Markdown lines: classes, images and CPU time of generating both splits."""
  lines = [
    "load_glyphs: both splits generated into an empty cache (the first call), then read from it",
    "| glyphs | classes, train + test | images, train + test | generation, CPU time |",
    "| --- | --- | --- | --- |",
  ]
  for name, kwargs in GLYPHS:
    with tempfile.TemporaryDirectory() as cache:
      cpu = time.process_time()
      train = jd.load_glyphs("train", cache_dir=cache, **kwargs)
      seconds = time.process_time() - cpu
      test = jd.load_glyphs("test", cache_dir=cache, **kwargs)
    classes = [len(np.unique(d.labels)) for d in (train, test)]
    lines.append(
      f"| {name} | {classes[0]:,} + {classes[1]:,} | {train.num_examples:,} + "
      f"{test.num_examples:,} | {seconds:.1f} s |"
    )
  return lines


def pipelines_lines(args: argparse.Namespace) -> list[str]:
  """The pipelines' table as Markdown lines (module docstring), its notes under it."""
  sop, notes = sop_rows(args.batches, args.warmup, args.image_size)
  rows = [*digits_rows(args.batches, args.warmup), *sop, *sampler_rows()]
  return [
    f"jaxrank.data pipelines, images/s of make_pipeline(...).as_numpy_iterator() after "
    f"{args.warmup} warm-up batches: {args.batches} timed batches of the SOP rows, 50 and 5 times "
    f"as many of the digits'; TF {tf.__version__}",
    "| pipeline | batch | images/s |",
    "| --- | --- | --- |",
    *(f"| {name} | {batch} | {rate:,.0f} |" for name, rate, batch in rows),
    *notes,
  ]


# The images/s of a ResNet-50 training step at batch 256, 224x224, measured on an NVIDIA H200:
# `--step-rates`' default, and the name of each in the photographs' table.
STEP_RATES = {3635.0: "jaxrank float32", 5889.0: "jaxrank bfloat16 probe", 4286.0: "torch autocast"}


def photograph(rng: np.random.Generator, size: Sequence[int] = (375, 500)) -> np.ndarray:
  """A `[H, W, 3]` uint8 stand-in for a photograph: smooth random colour fields at three scales
  (bicubic upsampling of 3, 12 and 48 cells a side) plus pixel noise, about 50 kB as a quality-90
  JPEG at 500x375, as SOP and CUB photographs are."""
  height, width = size
  image = np.full((height, width, 3), 128.0, np.float32)
  for cells, amplitude in ((3, 90), (12, 40), (48, 20)):
    low = rng.uniform(128 - amplitude, 128 + amplitude, (cells, cells * width // height + 1, 3))
    field = Image.fromarray(low.astype(np.uint8)).resize((width, height), Image.Resampling.BICUBIC)
    image += np.asarray(field, np.float32) - 128
  image += 6 * rng.standard_normal(image.shape, dtype=np.float32)
  return np.clip(image, 0, 255).astype(np.uint8)


def write_photographs(
  root: str, count: int, size: Sequence[int] = (375, 500), per_class: int = 4, seed: int = 0
) -> float:
  """Writes `count` JPEGs (quality 90) as `root/class/image.jpg`, `per_class` a class; returns
  their mean size in kB."""
  rng = np.random.default_rng(seed)
  total = 0
  for i in range(count):
    folder = os.path.join(root, f"{i // per_class:05d}")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{i:06d}.jpg")
    Image.fromarray(photograph(rng, size)).save(path, format="JPEG", quality=90)
    total += os.path.getsize(path)
  return total / count / 1000


def one_thread(ds: tf.data.Dataset) -> tf.data.Dataset:
  """`ds` with its tf.data threads limited to one: private thread pool and intra-op parallelism."""
  options = tf.data.Options()
  options.threading.private_threadpool_size = 1
  options.threading.max_intra_op_parallelism = 1
  return ds.with_options(options)


def device_images_per_second(ds: tf.data.Dataset, batches: int, warmup: int) -> tuple[float, float]:
  """Images/s of `ds` iterated through `prefetch_to_device`, and the process's CPU ms an image.

  The first `warmup` batches are not timed; the clock stops when the last timed batch is on the
  device.
  """
  it = jd.prefetch_to_device(ds.as_numpy_iterator())
  jax.block_until_ready(list(itertools.islice(it, warmup)))
  start, cpu, images = time.perf_counter(), time.process_time(), 0
  batch = None
  for batch in itertools.islice(it, batches):
    images += batch["label"].shape[0]
  jax.block_until_ready(batch)
  elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
  assert images, "batches must be at least 1"
  return images / elapsed, 1000 * cpu / images


def photo_rows(
  count: int, batch: int, batches: int, warmup: int, image_size: Sequence[int] = (375, 500)
) -> tuple[list[dict[str, Any]], float]:
  """The photographs' rows, `{name, batch, rate, cpu_ms, per_core}`, and the JPEGs' mean kB.

  `per_core` is the images/s of one core: the rate itself with one thread, `1000 / cpu_ms` with
  all cores.
  """
  with tempfile.TemporaryDirectory() as root:
    kilobytes = write_photographs(root, count, image_size)
    data = jd.load_image_folder(root)
    sampler = functools.partial(jd.random_batches, data.num_examples, batch_size=batch, seed=0)
    augment = functools.partial(jd.train_preprocess, resize_size=256, crop_size=224)
    rows = []
    for name, threading in (("one thread", one_thread), ("all cores", lambda ds: ds)):
      ds = threading(jd.make_pipeline(data, sampler, preprocess_fn=augment))
      rate, cpu_ms = device_images_per_second(ds, batches, warmup)
      per_core = rate if threading is one_thread else 1000 / cpu_ms
      rows.append(
        {
          "name": f"tf.data, {name}",
          "batch": batch,
          "rate": rate,
          "cpu_ms": cpu_ms,
          "per_core": per_core,
        }
      )
  return rows, kilobytes


def photos_lines(args: argparse.Namespace) -> list[str]:
  """The photographs' table as Markdown lines (module docstring), the step rates named under it."""
  rows, kilobytes = photo_rows(args.photos, args.photo_batch, args.photo_batches, args.warmup)
  rates = [float(r) for r in args.step_rates]
  named = [f"{r:,.0f} ({STEP_RATES[r]})" if r in STEP_RATES else f"{r:,.0f}" for r in rates]
  return [
    f"Photographs: {args.photos} JPEGs of 500x375 (quality 90, mean {kilobytes:.0f} kB) read by "
    "make_pipeline with train_preprocess (resize 256, random crop 224, flip) and iterated through "
    f"prefetch_to_device; {args.photo_batches} timed batches after {args.warmup} warm-up batches; "
    f"TF {tf.__version__}",
    "| tf.data threads | batch | images/s | CPU ms an image | images/s a core | "
    + " | ".join(f"cores for {r:,.0f} images/s" for r in rates)
    + " |",
    "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in rates) + " |",
    *(
      f"| {row['name']} | {row['batch']} | {row['rate']:,.0f} | {row['cpu_ms']:.2f} | "
      f"{row['per_core']:,.0f} | "
      + " | ".join(f"{math.ceil(r / row['per_core'])}" for r in rates)
      + " |"
      for row in rows
    ),
    "Step rates, images/s of a ResNet-50 training step at batch 256, 224x224, measured on an "
    f"NVIDIA H200: {', '.join(named)}. Images/s a core: the one-thread row's rate itself (measured "
    "directly), the all-cores row's 1000 / CPU ms (every thread of the process); cores: the step "
    "rate over the images/s a core, rounded up.",
  ]


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batches", type=int, default=40, help="timed batches of the SOP rows")
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--image-size", type=int, nargs=2, default=(300, 400), metavar=("H", "W"))
  parser.add_argument(
    "--skip-pipelines", action="store_true", help="leave out the pipelines' table"
  )
  parser.add_argument("--skip-glyphs", action="store_true", help="leave out the glyphs' table")
  parser.add_argument("--skip-photos", action="store_true", help="leave out the photos' table")
  parser.add_argument("--photos", type=int, default=512, help="JPEG photographs written")
  parser.add_argument("--photo-batch", type=int, default=256, help="batch of the photos' rows")
  parser.add_argument("--photo-batches", type=int, default=8, help="timed batches of each row")
  parser.add_argument(
    "--step-rates",
    type=float,
    nargs="+",
    default=list(STEP_RATES),
    help="training steps' images/s to feed (default: ResNet-50 at batch 256 on an NVIDIA H200)",
  )
  parser.add_argument(
    "--docs",
    action="store_true",
    help="also write the tables to docs/_generated/data_pipelines.json, data_glyphs.json and "
    "data_photos.json",
  )
  args = parser.parse_args(argv)
  input_pipeline.hide_gpus_from_tensorflow()
  tables = {}
  if not args.skip_pipelines:
    tables["data_pipelines"] = pipelines_lines(args)
  if not args.skip_glyphs:
    tables["data_glyphs"] = glyphs_lines()
  if not args.skip_photos:
    tables["data_photos"] = photos_lines(args)
  print("\n\n".join("\n".join(lines) for lines in tables.values()))
  if args.docs:
    for name, lines in tables.items():
      print("wrote", docs_data.write_table(name, **docs_data.markdown_table(lines)))


if __name__ == "__main__":
  main()
