"""Benchmark: the published-list loaders at their full size, their counts, time and peak memory.

Command:

    .venv/bin/python -m experiments.benchmarks.loaders --docs     # 5-20 minutes on 2 cores
    .venv/bin/python -m experiments.benchmarks.loaders --only In-Shop VehicleID

Writes each data set's lists at the published size with `jaxrank.data.testing`'s writers (their
exact line format; invented names), an empty file for every image they list (the loaders look
for each image: the time includes one `os.path.isfile` an image), in a temporary folder removed
at the end, then reads every split with the loader, and prints one row a data set: the images of
each split, the seconds of all its splits' reads (one process, files in the page cache) and the
peak of the memory Python and numpy allocated during them (`tracemalloc`, measured in a second
pass: it slows the reads). Nothing is downloaded. `--docs` also writes the table to
docs/_generated/loaders.json, which docs/guide/real_data.rst shows ("The loaders at full size").

* In-Shop (`load_inshop`): `list_eval_partition.txt` of 52,712 lines; train, query, gallery.
* VehicleID (`load_vehicleid`): train list, test lists 800 / 1,600 / 2,400, `model_attr.txt`.
* ImageNet100 (`load_imagenet100`): HashNet's PyTorch lists (absolute paths, `path_prefix`) and
  its Caffe lists (the eight parts of the query and database lists concatenated).
* NUS-WIDE (`load_nuswide`): DeepHash-pytorch's 21-label lists, the database 193,734 lines.
* NUS-WIDE, He et al.'s split (`nuswide_he2018_splits`): `Imagelist.txt` and `AllLabels81.txt`
  of 269,648 lines, the images with a frequent label (195,834) split.
* CIFAR-10 (`cifar10_split_indices`, settings 1 and 2): the draw alone (the images come from
  tfds, which this benchmark does not prepare).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import tracemalloc
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import jaxrank.data as jd  # noqa: E402
from experiments import docs_data  # noqa: E402
from jaxrank.data import hashing_data  # noqa: E402
from jaxrank.data import image_lists  # noqa: E402
from jaxrank.data import testing  # noqa: E402


def _touch(paths) -> None:
  for path in paths:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "wb").close()


def _inshop(base: str) -> Callable[[], dict[str, int]]:
  root = os.path.join(base, "inshop")
  os.makedirs(os.path.join(root, "Eval"))
  path = os.path.join(root, "Eval", image_lists.INSHOP_PARTITION)
  testing.write_inshop_partition(path)
  _touch(os.path.join(root, p) for p in image_lists.read_inshop_partition(path).images)
  return lambda: {s: jd.load_inshop(root, s).num_examples for s in image_lists.INSHOP_SPLITS}


def _vehicleid(base: str) -> Callable[[], dict[str, int]]:
  root = os.path.join(base, "vehicleid")
  testing.write_vehicleid_lists(root)
  for name in testing.VEHICLEID_LIST_SIZES:
    with open(os.path.join(root, "train_test_split", name)) as f:
      _touch(os.path.join(root, "image", line.split()[0] + ".jpg") for line in f)
  return lambda: {s: jd.load_vehicleid(root, s).num_examples for s in image_lists.VEHICLEID_LISTS}


def _imagenet100(base: str, layout: str) -> Callable[[], dict[str, int]]:
  root = os.path.join(base, f"imagenet100_{layout}")
  testing.write_imagenet100(
    root,
    images_per_class=(130, 50, 0),
    layout=layout,
    database_size=128503,
    write_images=False,
  )
  prefixes = hashing_data.HASHNET_IMAGENET_PREFIXES
  for split in hashing_data.SPLITS:
    for path in hashing_data.imagenet100_list_files(root, split):
      _touch(hashing_data.read_image_list(path, 100, image_root=root, path_prefix=prefixes)[0])

  def load() -> dict[str, int]:
    return {
      s: jd.load_imagenet100(root, s, path_prefix=prefixes).num_examples
      for s in hashing_data.SPLITS
    }

  return load


def _nuswide(base: str) -> Callable[[], dict[str, int]]:
  root = os.path.join(base, "nuswide")
  testing.write_nuswide(root, sizes=(10500, 2100, 183234), write_images=False)
  for name in hashing_data.LIST_FILES.values():
    _touch(hashing_data.read_image_list(os.path.join(root, name), 21)[0])
  return lambda: {s: jd.load_nuswide(root, s).num_examples for s in hashing_data.SPLITS}


def _nuswide_he2018(base: str) -> Callable[[], dict[str, int]]:
  root = os.path.join(base, "nuswide_he2018")
  os.makedirs(root)
  testing.write_nuswide_he2018(root, images=195834, unlabelled=73814, write_images=False)
  with open(os.path.join(root, "Imagelist.txt")) as f:
    names = [line.strip().removeprefix("C:\\ImageData\\").replace("\\", "/") for line in f]
  _touch(os.path.join(root, n) for n in names[:195834])

  def load() -> dict[str, int]:
    splits = hashing_data.nuswide_he2018_splits(root)
    return {s: d.num_examples for s, d in splits.items()}

  return load


def _cifar10(base: str) -> Callable[[], dict[str, int]]:
  del base
  labels = np.concatenate([np.tile(np.arange(10), 5000), np.tile(np.arange(10), 1000)])

  def load() -> dict[str, int]:
    counts = {}
    for setting in (1, 2):
      index = hashing_data.cifar10_split_indices(labels, setting=setting)
      counts.update({f"s{setting} {s}": len(v) for s, v in index.items()})
    return counts

  return load


DATASETS: dict[str, Callable[[str], Callable[[], dict[str, int]]]] = {
  "In-Shop": _inshop,
  "VehicleID": _vehicleid,
  "ImageNet100 (PyTorch lists)": lambda base: _imagenet100(base, "pytorch"),
  "ImageNet100 (Caffe lists)": lambda base: _imagenet100(base, "caffe"),
  "NUS-WIDE (21-label lists)": _nuswide,
  "NUS-WIDE (He et al.'s split)": _nuswide_he2018,
  "CIFAR-10 (split indices)": _cifar10,
}


def measure(load: Callable[[], dict[str, int]]) -> tuple[dict[str, int], float, float]:
  """`(counts, seconds, peak MiB)`: one timed read, then one under tracemalloc."""
  start = time.perf_counter()
  counts = load()
  seconds = time.perf_counter() - start
  tracemalloc.start()
  load()
  _, peak = tracemalloc.get_traced_memory()
  tracemalloc.stop()
  return counts, seconds, peak / 2**20


def table(names) -> list[str]:
  """The printed table (Markdown lines), a row a data set of `names`."""
  base = tempfile.mkdtemp(prefix="jaxrank_loaders_")
  lines = [
    "The published-list loaders at their full size: every split read, each image looked for "
    "(empty files), on this machine's CPU",
    "| data set | images per split | time | peak traced memory |",
    "| --- | --- | --- | --- |",
  ]
  print("\n".join(lines), flush=True)
  try:
    for name in names:
      counts, seconds, peak = measure(DATASETS[name](base))
      shown = ", ".join(f"{s} {n:,}" for s, n in counts.items())
      lines.append(f"| {name} | {shown} | {seconds:.2f} s | {peak:.1f} MiB |")
      print(lines[-1], flush=True)
  finally:
    shutil.rmtree(base)
  return lines


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--only", nargs="*", default=None, help="data sets to run (default: all)")
  docs_data.add_docs_argument(parser, "loaders")
  args = parser.parse_args(argv)
  lines = table([n for n in DATASETS if not args.only or n in args.only])
  if args.docs:
    docs_data.write_markdown_tables({"loaders": lines})


if __name__ == "__main__":
  main()
