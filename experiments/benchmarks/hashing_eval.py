"""Benchmark: `jaxrank.evaluate_hashing` at the scale of He et al. 2018's NUS-WIDE and smaller.

Command (the paper's scale is 2,100 queries x 195,834 database codes; a minute or two on 2 CPU
cores for the table):

    .venv/bin/python -m experiments.benchmarks.hashing_eval --docs
    .venv/bin/python -m experiments.benchmarks.hashing_eval --one --items 195834 --bits 48

Synthetic data from a fixed seed: random `+-1` codes and 21-label multi-hot labels (each label on
with probability 0.1, as sparse as NUS-WIDE's), so that the levels are the numbers of shared
labels; every metric of the NUS-WIDE protocol (AP_T and NDCG_T over the whole database, mAP@5000).
Each row runs in a fresh process (`--one`) and prints the wall time of one call (compilation
included: the call is run once) and the process's peak resident memory (max RSS) before and after
it, whose growth is what the evaluation added (the codes and labels themselves are a few tens of
MB). A note under the table times the last scale again without the cut-off (`--ks` empty: AP_T and
NDCG_T alone), so that the difference is the `jax.lax.top_k` of mAP@5000.

`--docs` also writes the table to docs/_generated/hashing_eval.json, which docs/guide/hashing.rst,
"Evaluating a database", shows.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

import numpy as np

from experiments import docs_data

SCALES = [  # (queries, database items, bits, what it is the scale of)
  (1000, 59000, 16, "CIFAR-10, setting 1"),
  (10000, 50000, 16, "CIFAR-10, setting 2"),
  (2100, 195834, 12, "NUS-WIDE"),
  (2100, 195834, 48, "NUS-WIDE"),
]
KS = (5000,)


def _data(queries, items, bits, labels=21, seed=0):
  rng = np.random.default_rng(seed)
  q = np.where(rng.random((queries, bits)) < 0.5, 1, -1).astype(np.int8)
  db = np.where(rng.random((items, bits)) < 0.5, 1, -1).astype(np.int8)
  ql = (rng.random((queries, labels)) < 0.1).astype(np.int8)
  dl = (rng.random((items, labels)) < 0.1).astype(np.int8)
  return q, db, ql, dl


def _peak_mb():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes.


def run_one(queries, items, bits, ks=KS):
  """One call at one scale: `(seconds, peak MB before, peak MB after, result)`."""
  import jaxrank  # pylint: disable=g-import-not-at-top

  q, db, ql, dl = _data(queries, items, bits)
  before = _peak_mb()
  start = time.perf_counter()
  result = jaxrank.evaluate_hashing(q, db, ql, dl, ks=ks)
  seconds = time.perf_counter() - start
  return seconds, before, _peak_mb(), result


def one_row(queries, items, bits, ks=KS, label="") -> str:
  """The table's row of one call in this process (`run_one`), as a Markdown line."""
  seconds, before, after, result = run_one(queries, items, bits, ks)
  values = ", ".join(f"{k} {v:.4f}" for k, v in result.items())
  return (
    f"| {queries:,} | {items:,} | {label} | {bits} | {seconds:.1f} s | {before:,.0f} MB | "
    f"{after:,.0f} MB | {values} |"
  )


def run_process(queries, items, bits, ks=KS, label="") -> str:
  """`one_row` in a fresh process (`--one`): its printed row."""
  command = [sys.executable, "-m", "experiments.benchmarks.hashing_eval", "--one"]
  command += ["--queries", str(queries), "--items", str(items), "--bits", str(bits)]
  command += ["--ks", *map(str, ks), "--label", label]
  output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
  return [line for line in output.splitlines() if line.startswith("|")][-1]


def _scale(text: str) -> tuple[int, int, int, str]:
  queries, items, bits = (int(part) for part in text.split(","))
  return queries, items, bits, ""


def table(scales, ks=KS) -> list[str]:
  """The printed table (Markdown lines): a row per scale, each in a fresh process, and a note
  timing the last scale without the cut-off."""
  cut = ", ".join(f"mAP@{k}" for k in ks)
  lines = [
    f"evaluate_hashing: multi-hot labels (21), AP_T, NDCG_T and {cut}, on this machine's CPU "
    "(each scale in a fresh process, compilation included)",
    "| queries | database | scale of | bits | time | peak RSS before | peak RSS after | values |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
  ]
  print("\n".join(lines), flush=True)
  for queries, items, bits, label in scales:
    lines.append(run_process(queries, items, bits, ks, label))
    print(lines[-1], flush=True)
  if ks:
    queries, items, bits, _ = scales[-1]
    row = run_process(queries, items, bits, ())
    cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
    lines.append(
      f"Without {cut} (ks=(), AP_T and NDCG_T alone), {queries:,} x {items:,}, {bits} bits: "
      f"{cells[4]}, peak RSS {cells[6]}."
    )
    print(lines[-1], flush=True)
  return lines


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--one", action="store_true", help="one scale, in this process")
  parser.add_argument("--queries", type=int, default=2100)
  parser.add_argument("--items", type=int, default=195834)
  parser.add_argument("--bits", type=int, default=48)
  parser.add_argument("--label", default="", help="what the scale is the scale of (--one)")
  parser.add_argument(
    "--ks", type=int, nargs="*", default=list(KS), help="the cut-offs of map@k (none: no cut-off)"
  )
  parser.add_argument(
    "--scales",
    type=_scale,
    nargs="+",
    default=SCALES,
    metavar="QUERIES,ITEMS,BITS",
    help="the table's scales (default: the papers')",
  )
  docs_data.add_docs_argument(parser, "hashing_eval")
  args = parser.parse_args(argv)
  if args.one:
    print(one_row(args.queries, args.items, args.bits, tuple(args.ks), args.label), flush=True)
    return
  lines = table(args.scales, tuple(args.ks))
  if args.docs:
    docs_data.write_markdown_tables({"hashing_eval": lines})


if __name__ == "__main__":
  main()
