"""Benchmark: `jaxrank.evaluate_revisited` at the size of R1M (70 queries, 1,000,000 distractors).

Command (heavy: a 512 MB gallery, several minutes on 2 CPU cores, most of them revisitop's path;
run it once, alone; `--docs` also writes the table docs/guide/landmarks.rst shows):

    .venv/bin/python -m experiments.benchmarks.revisited --docs
    .venv/bin/python -m experiments.benchmarks.revisited --items 100000   # smaller

Synthetic data from a fixed seed: `--queries` unit query descriptors and a gallery of `--items`
unit descriptors of dimension `--dim` (float32), and Revisited-style ground truth for each query
(1-60 easy, 1-120 hard and 0-80 junk items, drawn without repeats): up to 180 positives per query,
as on the real data. Three rows, each in a process of its own (one after the other, so that one
gallery is in memory at a time), each timed `--runs` times after one untimed call (compilation):

* `evaluate_revisited`: the three settings' mAP and mP@1, 5, 10;
* `product`: JAX's product of the same matrices alone (`jit(q @ g.T)`, the scores written once),
  the floor of any evaluation that scores every item;
* `revisitop`: the reference's path in numpy, as `example_evaluate.py` of filipradenovic/revisitop
  runs it: the product, `np.argsort(-scores, axis=0)` of the whole `[N, Q]` matrix, and
  `compute_map` of each setting (`revisitop_compute_map`, a transcription of `python/evaluate.py`).

The table gives each row's median wall time, its ratio to the product's, the process's peak
resident memory (max RSS: Python, the runtime and the gallery included) and its growth over the
data alone, and the Medium mAP (the same in the two evaluations).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

from experiments import docs_data

ROWS = ("evaluate_revisited", "product", "revisitop")
KS = (1, 5, 10)


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


def revisitop_compute_map(ranks, gnd, kappas=()):
  """revisitop's `compute_map` (filipradenovic/revisitop, `python/evaluate.py` at be398328),
  transcribed: `ranks [N, Q]` 0-based gallery indices in ranking order per query, `gnd` one dict
  of `ok` and `junk` indices per query. Returns `(mAP, mP@kappas)` over the queries with
  positives (their AP and precisions as fractions; the reference's NaN rows left out)."""
  aps, precisions = [], []
  for i, entry in enumerate(gnd):
    ok = np.asarray(entry["ok"])
    if ok.shape[0] == 0:
      continue
    junk = np.asarray(entry.get("junk", np.empty(0)))
    pos = np.arange(ranks.shape[0])[np.isin(ranks[:, i], ok)]
    junk_pos = np.arange(ranks.shape[0])[np.isin(ranks[:, i], junk)]
    k = ij = 0  # Each positive moves up by the junk items ranked before it (their loop).
    for ip in range(len(pos)):
      while ij < len(junk_pos) and pos[ip] > junk_pos[ij]:
        k, ij = k + 1, ij + 1
      pos[ip] -= k
    ap = 0.0
    for j, rank in enumerate(pos):
      before = 1.0 if rank == 0 else j / rank
      ap += (before + (j + 1) / (rank + 1)) / len(ok) / 2
    aps.append(ap)
    one_based = pos + 1
    cut = [min(int(one_based.max()), k) for k in kappas]
    precisions.append([np.sum(one_based <= c) / c for c in cut])
  if not aps:
    return 0.0, np.zeros(len(kappas))
  return float(np.mean(aps)), np.mean(precisions, axis=0)


def revisitop_settings(gnd):
  """The three settings' `ok`/`junk` lists, built as revisitop's example does."""
  return {
    "easy": [{"ok": e["easy"], "junk": np.concatenate([e["junk"], e["hard"]])} for e in gnd],
    "medium": [{"ok": np.concatenate([e["easy"], e["hard"]]), "junk": e["junk"]} for e in gnd],
    "hard": [{"ok": e["hard"], "junk": np.concatenate([e["junk"], e["easy"]])} for e in gnd],
  }


def _peak_mb():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes.


def _run_row(row, args):
  """One row in this process: `{row, seconds (each run), peak RSS MB, data MB, mAPs}`."""
  if row != "revisitop":  # The runtime before the data, so that its growth is the row's.
    import jax  # pylint: disable=g-import-not-at-top

    import jaxrank  # pylint: disable=g-import-not-at-top

    jax.block_until_ready(jax.jit(lambda a: a @ a.T)(np.eye(2, dtype=np.float32)))
  q, g, gnd = _data(args.queries, args.items, args.dim)
  data_mb = _peak_mb()
  if row == "evaluate_revisited":

    def call():
      r = jaxrank.evaluate_revisited(q, g, gnd, ks=KS)
      return {s: r[f"{s}/map"] for s in ("easy", "medium", "hard")}
  elif row == "product":
    product = jax.jit(lambda a, b: a @ b.T)
    queries, gallery = jax.device_put(q), jax.device_put(g)  # Outside the timing.

    def call():
      jax.block_until_ready(product(queries, gallery))
      return {}
  else:
    settings = revisitop_settings(gnd)

    def call():
      ranks = np.argsort(-(g @ q.T), axis=0)
      return {s: revisitop_compute_map(ranks, settings[s], KS)[0] for s in settings}

  if row != "revisitop":
    call()  # Compilation, caches.
  seconds, result = [], {}
  for _ in range(args.runs):
    start = time.perf_counter()
    result = call()
    seconds.append(time.perf_counter() - start)
  return {"row": row, "seconds": seconds, "peak_mb": _peak_mb(), "data_mb": data_mb, **result}


def _lines(args, results):
  """The Markdown table of the rows' results (`results`: `_run_row`'s dicts, in `ROWS` order)."""
  product = next((statistics.median(r["seconds"]) for r in results if r["row"] == "product"), 0)
  lines = [
    f"evaluate_revisited beside the product and revisitop's path: {args.queries} queries x "
    f"{args.items:,} gallery items x {args.dim}, float32",
    "| row | median time (s) | runs (s) | x the product | peak RSS (MB) | over the data (MB) |"
    " Medium mAP |",
    "| --- | --- | --- | --- | --- | --- | --- |",
  ]
  for r in results:
    median = statistics.median(r["seconds"])
    ratio = f"{median / product:.1f}" if product else ""
    lines.append(
      f"| {r['row']} | {median:.2f} | {', '.join(f'{t:.2f}' for t in r['seconds'])} | {ratio} "
      f"| {r['peak_mb']:,.0f} | {r['peak_mb'] - r['data_mb']:,.0f} | "
      f"{r['medium']:.5f} |"
      if "medium" in r
      else f"| {r['row']} | {median:.2f} | {', '.join(f'{t:.2f}' for t in r['seconds'])} | "
      f"{ratio} | {r['peak_mb']:,.0f} | {r['peak_mb'] - r['data_mb']:,.0f} | |"
    )
  lines.append(
    "Each row in a process of its own, one after the other; the median of the runs after one "
    "untimed call (compilation; none for revisitop's numpy). Peak RSS: the process's maximum "
    "resident memory, Python and the runtime included; over the data: its growth after the "
    "data were made (the gallery alone is 512 MB at the default size)."
  )
  return lines


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--queries", type=int, default=70)
  parser.add_argument("--items", type=int, default=1_000_000)
  parser.add_argument("--dim", type=int, default=128)
  parser.add_argument("--runs", type=int, default=3)
  parser.add_argument("--row", choices=ROWS, help="run one row here (the rows' own processes)")
  parser.add_argument("--rows", nargs="+", choices=ROWS, help="the rows to run (default: all)")
  docs_data.add_docs_argument(parser, "revisited_r1m")
  args = parser.parse_args(argv)
  if args.row:
    print(json.dumps(_run_row(args.row, args)))
    return
  common = ["--queries", str(args.queries), "--items", str(args.items), "--dim", str(args.dim)]
  results = []
  for row in args.rows or ROWS:
    command = [sys.executable, "-m", "experiments.benchmarks.revisited", "--row", row]
    out = subprocess.run(
      command + common + ["--runs", str(args.runs)], check=True, capture_output=True, text=True
    )
    results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(results[-1], flush=True)
  lines = _lines(args, results)
  print("\n".join(lines))
  if args.docs:
    docs_data.write_markdown_tables({"revisited_r1m": lines})


if __name__ == "__main__":
  main()
