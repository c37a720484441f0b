"""Benchmark: the parts of one `evaluate_retrieval` chunk on CPU, each timed alone, and the chunk.

Command:

    .venv/bin/python -m experiments.benchmarks.evaluate_parts          # 1,024 x 60,000, R = 11
    .venv/bin/python -m experiments.benchmarks.evaluate_parts --items 20000 --relevant 32

Rows (each jitted, timed after its compilation, median of `--repeats`; wall and CPU time of the
whole process, so that a part using both cores shows it):

* `product`: XLA's `q @ x.T` of the chunk against every item, reduced to each row's largest score
  (the floor of `experiments/benchmarks/evaluate.py`, for one chunk);
* `product in blocks`: the same scores as `jaxrank.similarity.dot_product` computes them, each
  from a product with a block of `similarity.ITEM_BLOCK` (1,024) items, so that no score depends on
  how the items are split over devices (the CPU's form; docs/guide/scale.rst, "Several
  processes"); the blocks' cost is `product in blocks / product`;
* `count`: the CPU's comparing loop (`counting.compare_counts` on `[chunk, items]` scores and
  `[chunk, relevant]` thresholds), which gives MAP@R and mAP their ranks;
* `whole chunk`: what `evaluate_retrieval` runs for each chunk of queries on the CPU (the product
  in blocks, the query's own item left out, the relevant items' scores gathered, the counts and
  the metrics), with `dot_product` and random relevant items.

A second table, `evaluate_counts_by_relevant`, times the ways of counting ranks by the number R of
relevant items per list (`--lists` lists of `--list-items` scores, R from `--ladder`): the CPU's
comparing loop (`counting._compare_counts`, O(n R) per list), numpy's sort and binary search through
the host callback (the CPU's path beyond `counting.COMPARE_UP_TO`) and XLA's (the accelerators'):
the measurement that chose `COMPARE_UP_TO`. `--skip-ladder` leaves it out.

A third table, `evaluate_compare_shapes`, times the comparing loop (`counting.compare_counts`) on
the first table's scores at each shape of `SHAPES`: lists counted together
(`counting.COMPARE_LISTS`), items per step (`COMPARE_LANES`) and steps written out per iteration
(`COMPARE_UNROLL`), each checked to count the same: the measurement that chose the shipped shape.
`--skip-shapes` leaves it out.

`--docs` also writes the tables to docs/_generated/evaluate_parts.json,
evaluate_counts_by_relevant.json and evaluate_compare_shapes.json, which docs/guide/scale.rst,
"Evaluation at scale", shows.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from experiments import docs_data


def _timed(fn, args, repeats: int) -> tuple[float, float]:
  import jax

  jax.block_until_ready(fn(*args))  # Compiles.
  walls, cpus = [], []
  for _ in range(repeats):
    cpu, wall = time.process_time(), time.perf_counter()
    jax.block_until_ready(fn(*args))
    walls.append(time.perf_counter() - wall)
    cpus.append(time.process_time() - cpu)
  return statistics.median(walls), statistics.median(cpus)


def counts_table(lists: int, items: int, ladder: list[int], repeats: int) -> list[str]:
  """Median wall time of each way of counting ranks, by relevant items per list."""
  import jax
  import jax.numpy as jnp

  from jaxrank._src import counting

  ways = {
    "comparing (CPU loop)": counting._compare_counts,  # pylint: disable=protected-access
    "numpy sort, binary search": counting._cpu_sorted_counts,  # pylint: disable=protected-access
    "XLA sort, binary search": counting.xla_sorted_counts,
  }
  lines = [
    f"Counting ranks by R relevant items per list: {lists} lists of {items:,} scores; "
    f"median of {repeats}",
    "| R | " + " | ".join(ways) + " |",
    "| --- |" + " --- |" * len(ways),
  ]
  rng = np.random.default_rng(0)
  scores = jnp.asarray(rng.standard_normal((lists, items)).astype(np.float32))
  for r in ladder:
    thresholds = scores[:, :r]  # Relevant items' scores are among the list's.
    cells = []
    for way in ways.values():
      wall, _ = _timed(jax.jit(way), (scores, thresholds), repeats)
      cells.append(f"{wall * 1e3:.1f} ms")
    lines.append(f"| {r:,} | " + " | ".join(cells) + " |")
    print(lines[-1], flush=True)
  lines.append(f"counting.COMPARE_UP_TO = {counting.COMPARE_UP_TO}: the loop counts up to it.")
  return lines


SHAPES = [(4, 16, 8), (2, 16, 8), (8, 16, 8), (4, 16, 4), (4, 32, 4), (4, 8, 8), (16, 16, 4)]
"""`(COMPARE_LISTS, COMPARE_LANES, COMPARE_UNROLL)` of the third table, the shipped one first."""


def shapes_table(c: int, n: int, r: int, repeats: int) -> list[str]:
  """The comparing loop at each shape of `SHAPES` (the module constants set for each trace)."""
  import jax
  import jax.numpy as jnp

  from jaxrank._src import counting

  rng = np.random.default_rng(0)
  scores = jnp.asarray(rng.standard_normal((c, n)).astype(np.float32))
  thresholds = jnp.asarray(rng.standard_normal((c, r)).astype(np.float32))
  shipped = (counting.COMPARE_LISTS, counting.COMPARE_LANES, counting.COMPARE_UNROLL)
  lines = [
    f"The comparing loop by shape: {c} lists of {n:,} scores, {r} thresholds; median of {repeats}",
    "| lists | lanes | unroll | wall |",
    "| --- | --- | --- | --- |",
  ]
  want = None
  try:
    for shape in SHAPES:
      counting.COMPARE_LISTS, counting.COMPARE_LANES, counting.COMPARE_UNROLL = shape
      count = jax.jit(lambda s, t: counting.compare_counts(s, t))  # A new trace per shape.
      got = count(scores, thresholds)
      want = got if want is None else want
      assert all(bool(jnp.array_equal(a, b)) for a, b in zip(got, want)), shape
      wall, _ = _timed(count, (scores, thresholds), repeats)
      mark = " (shipped)" if shape == shipped else ""
      lines.append(f"| {shape[0]}{mark} | {shape[1]} | {shape[2]} | {wall * 1e3:.0f} ms |")
      print(lines[-1], flush=True)
  finally:
    counting.COMPARE_LISTS, counting.COMPARE_LANES, counting.COMPARE_UNROLL = shipped
  return lines


def parts_table(c: int, n: int, r: int, dim: int, repeats: int) -> list[str]:
  """The first table: each part of one chunk timed alone, and the whole chunk (the module
  docstring's rows)."""
  import jax
  import jax.numpy as jnp

  import jaxrank
  from jaxrank._src import counting
  from jaxrank._src import evaluation
  from jaxrank._src import ranking
  from jaxrank._src import similarity

  rng = np.random.default_rng(0)
  scores = jnp.asarray(rng.standard_normal((c, n)).astype(np.float32))
  thresholds = jnp.asarray(rng.standard_normal((c, r)).astype(np.float32))
  queries = jnp.asarray(rng.standard_normal((c, dim)).astype(np.float32))
  items = jnp.asarray(rng.standard_normal((n, dim)).astype(np.float32))
  dots = jaxrank.similarity.dot_product
  prepared = similarity.prepare_items(dots, items, queries.dtype)
  chunk_args = (
    queries,
    jnp.arange(c, dtype=jnp.int32),  # The chunk: every row of the query set.
    jnp.asarray(rng.integers(0, n, c).astype(np.int32)),  # Leave-one-out: each query's own item.
    jnp.asarray(rng.integers(0, n, (c, r)).astype(np.int32)),
    jnp.ones((c, r), bool),
    prepared,
  )

  def chunk(*args):
    # pylint: disable-next=protected-access
    return evaluation._evaluate_chunk(
      *args, ks=(1, 2, 4, 8), similarity_fn=dots, branch=ranking.forced_branch()
    )

  rows = {
    "product": (jax.jit(lambda q, x: jnp.max(q @ x.T, axis=1)), (queries, items)),
    "product in blocks": (jax.jit(lambda q, x: jnp.max(dots(q, x), axis=1)), (queries, items)),
    "count": (jax.jit(counting.compare_counts), (scores, thresholds)),
    "whole chunk": (chunk, chunk_args),
  }
  lines = [
    f"one chunk: {c} queries x {n:,} items, D = {dim}, {r} relevant; median of {repeats}",
    "| part | wall | CPU time |",
    "| --- | --- | --- |",
  ]
  walls = {}
  for name, (fn, fn_args) in rows.items():
    walls[name], cpu = _timed(fn, fn_args, repeats)
    lines.append(f"| {name} | {walls[name] * 1e3:.0f} ms | {cpu * 1e3:.0f} ms |")
  for name in ("count", "product in blocks", "whole chunk"):
    lines.append(f"{name} / product (wall): {walls[name] / walls['product']:.2f}x")
  return lines


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--chunk", type=int, default=1024)
  parser.add_argument("--items", type=int, default=60_000)
  parser.add_argument("--relevant", type=int, default=11)
  parser.add_argument("--dim", type=int, default=512)
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument("--lists", type=int, default=256, help="lists of the second table")
  parser.add_argument("--list-items", type=int, default=10_000, help="scores per list there")
  parser.add_argument("--ladder", type=int, nargs="+", default=[12, 32, 64, 256, 1024])
  parser.add_argument("--skip-ladder", action="store_true", help="leave out the second table")
  parser.add_argument("--skip-shapes", action="store_true", help="leave out the third table")
  docs_data.add_docs_argument(
    parser, "{evaluate_parts,evaluate_counts_by_relevant,evaluate_compare_shapes}"
  )
  args = parser.parse_args(argv)
  tables = {
    "evaluate_parts": parts_table(args.chunk, args.items, args.relevant, args.dim, args.repeats)
  }
  print("\n".join(tables["evaluate_parts"]))
  if not args.skip_ladder:
    tables["evaluate_counts_by_relevant"] = counts_table(
      args.lists, args.list_items, args.ladder, args.repeats
    )
    print("\n".join(["", *tables["evaluate_counts_by_relevant"]]))
  if not args.skip_shapes:
    tables["evaluate_compare_shapes"] = shapes_table(
      args.chunk, args.items, args.relevant, args.repeats
    )
    print("\n".join(["", *tables["evaluate_compare_shapes"]]))
  if args.docs:
    docs_data.write_markdown_tables(tables)


if __name__ == "__main__":
  main()
