"""Benchmark: `jaxrank.evaluate_retrieval` at the size of the SOP test set, beside faiss exact search.

Command (needs the `bench` extra for faiss-cpu; `make bench-evaluate` installs it):

    .venv/bin/python -m experiments.bench_evaluate            # 60,502 x 512, SOP-sized
    .venv/bin/python -m experiments.bench_evaluate --num 5000 --repeats 1   # a quick look

Data: synthetic embeddings shaped like Stanford Online Products' test split (60,502 images in
classes of 2 to 12 images), each a noisy copy of its class centre, L2-normalised, float32; generated
from a fixed seed in each process. The same data goes to both sides.

* jaxrank: `evaluate_retrieval(embeddings, labels)`, leave-one-out over the whole set, giving
  Recall@1/2/4/8, MAP@R, mAP over the full ranking and tie-aware mAP.
* faiss: `IndexFlatIP` exact inner-product search of every query for its top 9 (itself included,
  then dropped), giving Recall@1/2/4/8 only: faiss cannot give MAP@R or mAP without the full
  ranking.

Each side runs in its own process so that its peak memory (max RSS, the whole process: Python, the
runtime and the 124 MB of data included) is its own. Time is the median over `--repeats` runs of the
whole call (the first jaxrank run includes compilation). Both use every core of the machine.

Measured on the 2-core development machine (AMD EPYC, 24 GiB, no GPU), 2026-11-22:

    see docs/guide/scale.rst, section "Evaluation at scale", for the table this script printed.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np

KS = (1, 2, 4, 8)


def class_sizes(num: int, rng: np.random.Generator) -> list[int]:
  """The sizes of SOP-like classes, 2 to 12 items each, adding up to `num` (shuffle the labels
  `np.repeat(np.arange(len(sizes)), sizes)` with the same `rng` next)."""
  sizes = []
  while sum(sizes) < num:
    sizes.append(int(rng.integers(2, 13)))
  sizes[-1] -= sum(sizes) - num
  if sizes[-1] < 2:
    sizes[-2] += sizes.pop()
  return sizes


def make_data(num: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """SOP-like test set: classes of 2..12 items, noisy copies of class centres, unit norm."""
  rng = np.random.default_rng(seed)
  sizes = class_sizes(num, rng)
  labels = np.repeat(np.arange(len(sizes)), sizes)
  labels = labels[rng.permutation(num)]
  centres = rng.standard_normal((len(sizes), dim), dtype=np.float32)
  x = centres[labels] + 2.2 * rng.standard_normal((num, dim), dtype=np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return x, labels


def peak_rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_jaxrank(x, labels, repeats, chunk_size):
  import jaxrank

  times, result = [], None
  for _ in range(repeats):
    start = time.perf_counter()
    result = jaxrank.evaluate_retrieval(x, labels, ks=KS, chunk_size=chunk_size)
    times.append(time.perf_counter() - start)
  return times, result


def run_faiss(x, labels, repeats):
  import faiss

  times, result = [], None
  for _ in range(repeats):
    start = time.perf_counter()
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    _, found = index.search(x, max(KS) + 1)
    # Drop the query itself (wherever ties put it), keep the first max(KS) others.
    others = found != np.arange(len(x))[:, None]
    found = np.array([row[keep][: max(KS)] for row, keep in zip(found, others)])
    hit = labels[found] == labels[:, None]
    has_relevant = np.bincount(labels)[labels] > 1
    result = {f"recall@{k}": float(hit[has_relevant, :k].any(axis=1).mean()) for k in KS}
    times.append(time.perf_counter() - start)
  return times, result


def child(args) -> None:
  x, labels = make_data(args.num, args.dim)
  if args.side == "jaxrank":
    times, result = run_jaxrank(x, labels, args.repeats, args.chunk_size)
  else:
    times, result = run_faiss(x, labels, args.repeats)
  print(json.dumps({"times": times, "peak_mb": peak_rss_mb(), "result": result}))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--num", type=int, default=60502)
  parser.add_argument("--dim", type=int, default=512)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--chunk-size", type=int, default=256)
  parser.add_argument("--side", choices=["jaxrank", "faiss"], help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.side:
    child(args)
    return

  rows = {}
  for side in ("faiss", "jaxrank"):
    command = [sys.executable, "-m", "experiments.bench_evaluate", "--side", side]
    command += ["--num", str(args.num), "--dim", str(args.dim), "--repeats", str(args.repeats)]
    command += ["--chunk-size", str(args.chunk_size)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    rows[side] = json.loads(out.strip().splitlines()[-1])

  base = float(np.median(rows["faiss"]["times"]))
  print(f"{args.num} x {args.num} queries, dim {args.dim}, chunk {args.chunk_size}, "
        f"median of {args.repeats}")
  print(f"{'':10} {'time s':>8} {'ratio':>6} {'peak MB':>8}  metrics")
  for side in ("faiss", "jaxrank"):
    row = rows[side]
    median = float(np.median(row["times"]))
    metrics = " ".join(f"{k}={v:.4f}" for k, v in row["result"].items())
    print(f"{side:10} {median:8.2f} {median / base:6.2f} {row['peak_mb']:8.0f}  {metrics}")
  for k in KS:  # Both sides must agree on what both compute.
    a, b = rows["faiss"]["result"][f"recall@{k}"], rows["jaxrank"]["result"][f"recall@{k}"]
    if abs(a - b) > 1e-3:
      print(f"WARNING: recall@{k} differs: faiss {a:.5f}, jaxrank {b:.5f}")


if __name__ == "__main__":
  main()
