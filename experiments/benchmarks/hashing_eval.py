"""Benchmark: `jaxrank.evaluate_hashing` at the scale of He et al. 2018's NUS-WIDE and smaller.

Command (the paper's scale is 2,100 queries x 195,834 database codes; about a minute on 2 CPU
cores for the table):

    .venv/bin/python -m experiments.benchmarks.hashing_eval
    .venv/bin/python -m experiments.benchmarks.hashing_eval --one --items 195834 --bits 48

Synthetic data from a fixed seed: random `+-1` codes and 21-label multi-hot labels (each label on
with probability 0.1, as sparse as NUS-WIDE's), so that the levels are the numbers of shared
labels; every metric of the NUS-WIDE protocol (AP_T and NDCG_T over the whole database, mAP@5000).
Each row runs in a fresh process (`--one`) and prints the wall time of one call (compilation
included: the call is run once) and the process's peak resident memory (max RSS) before and after
it, whose growth is what the evaluation added (the codes and labels themselves are a few tens of
MB).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

import numpy as np

SCALES = [  # (queries, database items, bits)
  (1000, 59000, 16),  # CIFAR-10, setting 1.
  (10000, 50000, 16),  # CIFAR-10, setting 2.
  (2100, 195834, 12),  # NUS-WIDE.
  (2100, 195834, 48),
]


def _data(queries, items, bits, labels=21, seed=0):
  rng = np.random.default_rng(seed)
  q = np.where(rng.random((queries, bits)) < 0.5, 1, -1).astype(np.int8)
  db = np.where(rng.random((items, bits)) < 0.5, 1, -1).astype(np.int8)
  ql = (rng.random((queries, labels)) < 0.1).astype(np.int8)
  dl = (rng.random((items, labels)) < 0.1).astype(np.int8)
  return q, db, ql, dl


def _peak_mb():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes.


def run_one(queries, items, bits, ks=(5000,)):
  """One call at one scale: `(seconds, peak MB before, peak MB after, result)`."""
  import jaxrank  # pylint: disable=g-import-not-at-top

  q, db, ql, dl = _data(queries, items, bits)
  before = _peak_mb()
  start = time.perf_counter()
  result = jaxrank.evaluate_hashing(q, db, ql, dl, ks=ks)
  seconds = time.perf_counter() - start
  return seconds, before, _peak_mb(), result


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--one", action="store_true", help="one scale, in this process")
  parser.add_argument("--queries", type=int, default=2100)
  parser.add_argument("--items", type=int, default=195834)
  parser.add_argument("--bits", type=int, default=48)
  args = parser.parse_args()
  if args.one:
    seconds, before, after, result = run_one(args.queries, args.items, args.bits)
    values = ", ".join(f"{k} {v:.4f}" for k, v in result.items())
    print(
      f"| {args.queries:,} | {args.items:,} | {args.bits} | {seconds:.1f} | {before:,.0f} | "
      f"{after:,.0f} | {values} |",
      flush=True,
    )
    return
  print("evaluate_hashing: multi-hot labels (21), AP_T, NDCG_T and mAP@5000, on this machine's CPU")
  print("| queries | database | bits | time (s) | peak RSS before (MB) | after (MB) | values |")
  print("| --- | --- | --- | --- | --- | --- | --- |", flush=True)
  for queries, items, bits in SCALES:
    command = [sys.executable, "-m", "experiments.benchmarks.hashing_eval", "--one"]
    command += ["--queries", str(queries), "--items", str(items), "--bits", str(bits)]
    subprocess.run(command, check=True)


if __name__ == "__main__":
  main()
