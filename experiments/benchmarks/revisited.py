"""Benchmark: `jaxrank.evaluate_revisited` at the size of R1M (70 queries, 1,000,000 distractors).

Command (heavy: a 512 MB gallery and about a minute on 2 CPU cores; run it once):

    .venv/bin/python -m experiments.benchmarks.revisited
    .venv/bin/python -m experiments.benchmarks.revisited --items 100000   # smaller

Synthetic data from a fixed seed: `--queries` unit query descriptors and a gallery of `--items`
unit descriptors of dimension `--dim` (float32), and Revisited-style ground truth for each query
(1-60 easy, 1-120 hard and 0-80 junk items, drawn without repeats): up to 180 positives per query,
beyond `counting.COMPARE_UP_TO`, so the counts come from sorts of each gallery chunk, as on the
real data. Prints the wall time of one call (compilation included: the call is run once) and the
process's peak resident memory before and after it (max RSS: Python, the runtime and the
gallery included), whose growth is what the evaluation added.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np


def _data(queries, items, dim, seed=0):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(queries, dim)).astype(np.float32)
  g = rng.standard_normal(size=(items, dim), dtype=np.float32)
  q /= np.linalg.norm(q, axis=1, keepdims=True)
  g /= np.linalg.norm(g, axis=1, keepdims=True)
  gnd = []
  for _ in range(queries):
    e, h, j = int(rng.integers(1, 61)), int(rng.integers(1, 121)), int(rng.integers(0, 81))
    listed = rng.choice(items, size=e + h + j, replace=False)
    gnd.append({"easy": listed[:e], "hard": listed[e : e + h], "junk": listed[e + h :]})
  return q, g, gnd


def _peak_mb():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes.


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--queries", type=int, default=70)
  parser.add_argument("--items", type=int, default=1_000_000)
  parser.add_argument("--dim", type=int, default=128)
  args = parser.parse_args()
  import jaxrank  # pylint: disable=g-import-not-at-top

  q, g, gnd = _data(args.queries, args.items, args.dim)
  before = _peak_mb()
  start = time.perf_counter()
  result = jaxrank.evaluate_revisited(q, g, gnd)
  seconds = time.perf_counter() - start
  after = _peak_mb()
  print(f"evaluate_revisited: {args.queries} queries x {args.items:,} x {args.dim} float32")
  print(f"time {seconds:.1f} s (one call, compilation included)")
  print(f"peak RSS {before:,.0f} MB before the call, {after:,.0f} MB after")
  print({key: round(float(value), 4) for key, value in result.items() if key.endswith("map")})


if __name__ == "__main__":
  main()
