"""Benchmark: `jaxrank.evaluate_retrieval` beside XLA's plain product of the same shapes and faiss.

Command (needs the `bench` extra for faiss-cpu; `make bench-evaluate` installs it):

    .venv/bin/python -m experiments.benchmarks.evaluate            # both data sets below
    .venv/bin/python -m experiments.benchmarks.evaluate --num 5000 --num-codes 3000 --repeats 1
    .venv/bin/python -m experiments.benchmarks.evaluate --data sop --num 20000 \
        --sides xla_product jaxrank --chunk-size 256 1024 2048   # jaxrank at several chunks

Two data sets, each leave-one-out over the whole set, generated from a fixed seed in each process:

* `sop`: shaped like Stanford Online Products' test split (60,502 images in classes of 2 to 12
  images), each a noisy copy of its class centre, L2-normalised, float32, D = 512; cosine.
* `large_classes`: few large classes, the hashing papers' CIFAR-10 protocol (12,000 codes of 32
  bits in 10 classes of about 1,200 items); `jaxrank.similarity.hamming`. Every query has about
  1,200 relevant items, far beyond `counting.COMPARE_UP_TO`: the counts come from sorts.

Four sides, each run in its own process so that its peak memory (max RSS, the whole process:
Python, the runtime and the data included) is its own:

* `xla_product`: XLA's plain `q @ x.T` of chunks of queries against the whole set, reduced to each
  row's largest score (what any exact evaluation must at least compute), once for each chunk of
  `--floor-chunks`; the fastest of them is the floor (XLA's CPU product is much slower in small
  chunks: 1.7x in chunks of 256 than of 1,024 on SOP's shape);
* `faiss`: `IndexFlatIP` exact inner-product search of every query for its top 9 (itself
  included, then dropped), giving Recall@1/2/4/8 only: faiss cannot give MAP@R or mAP without
  the full ranking (on the codes it breaks ties its own way, so its Recall@k differs there);
* `scores`: jaxrank's own scores of the same chunks (the rule with the items prepared once, each
  entry from a product over 1,024 item rows, so that a score never depends on how the items are
  split: `jaxrank.similarity`), reduced to each row's largest: the product `evaluate_retrieval`
  computes, at each chunk of `--chunk-size`, whose ratio to the floor is the blocks' cost;
* `jaxrank`: `evaluate_retrieval(x, labels)` with each `chunk_size` of `--chunk-size` (default:
  the library's default), giving Recall@1/2/4/8, MAP@R, mAP over the full ranking and tie-aware
  mAP.

Time is the median over `--repeats` runs of the whole call (the first run includes compilation);
`/ floor` is the ratio to the fastest `xla_product` row's median, each row run on the same data.
`--sides` leaves sides out (faiss needs the `bench` extra). Every side uses every core of the
machine. One table per data set, `evaluate_<data>_<N>` (`evaluate_sop_60502`,
`evaluate_large_classes_12000`); `--docs` also writes each to docs/_generated/<table>.json, which
docs/guide/scale.rst, "Evaluation at scale", shows with the command and the machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np

from experiments import docs_data

KS = (1, 2, 4, 8)


def class_sizes(num: int, rng: np.random.Generator) -> list[int]:
  """The sizes of SOP-like classes, 2 to 12 items each, adding up to `num` (shuffle the labels
  `np.repeat(np.arange(len(sizes)), sizes)` with the same `rng` next)."""
  sizes: list[int] = []
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


def make_codes(num: int, bits: int, num_classes: int, seed: int = 0):
  """Few large classes, as the hashing papers' CIFAR-10 protocol: `bits`-bit codes in {-1, 1}
  (noisy signs of class centres), `num_classes` classes of about `num / num_classes` items."""
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, num_classes, num)
  centres = rng.standard_normal((num_classes, bits), dtype=np.float32)
  noise = 1.5 * rng.standard_normal((num, bits), dtype=np.float32)
  return np.sign(centres[labels] + noise).astype(np.float32), labels


DATA = {
  # name: (how to make it from --num and --dim, scoring rule's name in jaxrank.similarity).
  "sop": (lambda args: make_data(args.num, args.dim), "cosine"),
  "large_classes": (lambda args: make_codes(args.num_codes, args.bits, 10), "hamming"),
}


def peak_rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(repeats, fn):
  times, result = [], None
  for _ in range(repeats):
    start = time.perf_counter()
    result = fn()
    times.append(time.perf_counter() - start)
  return times, result


FLOOR_CHUNKS = (256, 512, 1024, 2048, 4096)


def default_chunk_size() -> int:
  """`evaluate_retrieval`'s default `chunk_size` on this process's default device."""
  from jaxrank._src import evaluation

  return evaluation.default_chunk_size()


def run_jaxrank(x, labels, repeats, chunk_size, rule):
  import jaxrank

  similarity_fn = getattr(jaxrank.similarity, rule)
  return _timed(
    repeats,
    lambda: jaxrank.evaluate_retrieval(
      x, labels, ks=KS, chunk_size=chunk_size, similarity_fn=similarity_fn
    ),
  )


def run_xla_product(x, labels, repeats, chunk_size, rule):
  """XLA's plain `q @ x.T` of every chunk of `chunk_size` queries against the whole set, reduced
  to each row's largest score so that nothing is skipped."""
  del labels, rule
  import jax
  import jax.numpy as jnp

  product = jax.jit(lambda q, g: jnp.max(q @ g.T, axis=1))
  gallery = jnp.asarray(x)

  def run():
    out = [product(gallery[i : i + chunk_size], gallery) for i in range(0, len(x), chunk_size)]
    return float(jnp.concatenate(jax.block_until_ready(out)).sum())

  return _timed(repeats, run)


def run_scores(x, labels, repeats, chunk_size, rule):
  """jaxrank's own scores of every chunk of `chunk_size` queries against the whole set, reduced to
  each row's largest: the rule with its items prepared once, each entry from a product over
  1,024 item rows (`jaxrank.similarity`), the product `evaluate_retrieval` computes."""
  del labels
  import jax
  import jax.numpy as jnp

  from jaxrank._src import similarity

  fn = getattr(similarity, rule)
  gallery = jnp.asarray(x)
  prepared = similarity.prepare_items(fn, gallery, gallery.dtype)
  product = jax.jit(lambda q, p: jnp.max(similarity.score_prepared(fn, q, p), axis=1))

  def run():
    out = [product(gallery[i : i + chunk_size], prepared) for i in range(0, len(x), chunk_size)]
    return float(jnp.concatenate(jax.block_until_ready(out)).sum())

  return _timed(repeats, run)


def run_faiss(x, labels, repeats, chunk_size, rule):
  del chunk_size, rule
  import faiss

  def run():
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    _, found = index.search(x, max(KS) + 1)
    # Drop the query itself (wherever ties put it), keep the first max(KS) others.
    others = found != np.arange(len(x))[:, None]
    found = np.array([row[keep][: max(KS)] for row, keep in zip(found, others)])
    hit = labels[found] == labels[:, None]
    has_relevant = np.bincount(labels)[labels] > 1
    return {f"recall@{k}": float(hit[has_relevant, :k].any(axis=1).mean()) for k in KS}

  return _timed(repeats, run)


SIDES = {
  "xla_product": run_xla_product,
  "faiss": run_faiss,
  "scores": run_scores,
  "jaxrank": run_jaxrank,
}


def child(args) -> None:
  make, rule = DATA[args.data]
  x, labels = make(args)
  times, result = SIDES[args.side](x, labels, args.repeats, args.chunk_size[0], rule)
  print(json.dumps({"times": times, "peak_mb": peak_rss_mb(), "result": result}))


def run_side(args, data: str, side: str, chunk_size: int) -> dict:
  """One side on one data set in a process of its own: `{"times", "peak_mb", "result"}`."""
  command = [
    sys.executable,
    "-m",
    "experiments.benchmarks.evaluate",
    "--side",
    side,
    "--data",
    data,
    "--chunk-size",
    str(chunk_size),
  ]
  for flag in ("num", "dim", "num_codes", "bits", "repeats"):
    command += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
  out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
  return json.loads(out.strip().splitlines()[-1])


def table_name(args, data: str) -> str:
  """`evaluate_<data>_<N>`: the data file of the table with `--docs`."""
  return f"evaluate_{data}_{args.num if data == 'sop' else args.num_codes}"


def _shape(args, data: str) -> str:
  """The table's first column header: the data set."""
  if data == "sop":
    return f"SOP-shaped: {args.num:,} x {args.num:,}, D = {args.dim}, classes of 2-12"
  return (
    f"Few large classes: {args.num_codes:,} binary {args.bits}-bit codes in 10 classes (about "
    f"{args.num_codes // 10:,} relevant items per query), Hamming similarity"
  )


def _label(side: str, chunk: int, floor: bool) -> str:
  if side == "faiss":
    return "faiss IndexFlatIP, top-9"
  if side == "xla_product":
    return f"XLA's plain product, chunks of {chunk:,}" + (" (the floor)" if floor else "")
  if side == "scores":
    from jaxrank._src import similarity

    block = similarity.ITEM_BLOCK
    return f"jaxrank's scores alone (in blocks of {block:,} items), chunks of {chunk:,}"
  default = " (the default)" if chunk == default_chunk_size() else ""
  return f"jaxrank.evaluate_retrieval, chunk {chunk:,}{default}"


def _recall_notes(results: dict[str, dict]) -> list[str]:
  """Where faiss's Recall@k and jaxrank's differ on `sop` (on the codes faiss breaks ties its
  own way)."""
  return [
    f"WARNING: recall@{k} differs: faiss {a:.5f}, jaxrank {b:.5f}"
    for k in KS
    for a, b in [(results["faiss"][f"recall@{k}"], results["jaxrank"][f"recall@{k}"])]
    if abs(a - b) > 1e-3
  ]


def table(args, data: str) -> list[str]:
  """Runs every side on one data set, each in its own process: the Markdown table of their rows,
  the product at every chunk of `--floor-chunks`, faiss, jaxrank at each of `--chunk-size`."""
  runs = []  # (side, chunk, row)
  for side in args.sides:
    chunks = {
      "xla_product": args.floor_chunks,
      "scores": args.chunk_size,
      "jaxrank": args.chunk_size,
    }
    for chunk in chunks.get(side, [0]):
      runs.append((side, chunk, run_side(args, data, side, chunk)))
  medians = [float(np.median(row["times"])) for _, _, row in runs]
  floors = [m for (side, _, _), m in zip(runs, medians) if side == "xla_product"]
  base = min(floors) if floors else None
  lines = [
    f"{data}: leave-one-out over the whole set, each row a process of its own; the floor is the "
    "fastest of XLA's plain products of chunks of queries against the set",
    f"| {_shape(args, data)} | time (median of {args.repeats}) | / floor | peak RSS | metrics |",
    "| --- | --- | --- | --- | --- |",
  ]
  for (side, chunk, row), median in zip(runs, medians):
    label = _label(side, chunk, floor=side == "xla_product" and median == base)
    ratio = "" if base is None else f"{median / base:.2f}"
    metrics = row["result"] if side in ("faiss", "jaxrank") else {}
    lines.append(
      f"| {label} | {median:.3g} s | {ratio} | {row['peak_mb']:,.0f} MB | "
      + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
      + " |"
    )
  results = {side: row["result"] for side, _, row in runs if side in ("faiss", "jaxrank")}
  if data == "sop" and {"faiss", "jaxrank"} <= set(results):
    lines += _recall_notes(results)
  return lines


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--data", choices=list(DATA), nargs="+", default=list(DATA))
  parser.add_argument("--num", type=int, default=60502)
  parser.add_argument("--dim", type=int, default=512)
  parser.add_argument("--num-codes", type=int, default=12000)
  parser.add_argument("--bits", type=int, default=32)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--sides", choices=list(SIDES), nargs="+", default=list(SIDES))
  parser.add_argument(
    "--floor-chunks",
    type=int,
    nargs="+",
    default=list(FLOOR_CHUNKS),
    help="the product's chunks of queries, each timed; the fastest is the floor",
  )
  parser.add_argument(
    "--chunk-size",
    type=int,
    nargs="+",
    default=None,
    help="jaxrank's chunk_size, each timed (default: the library's default)",
  )
  docs_data.add_docs_argument(parser, "evaluate_<data>_<N>")
  parser.add_argument("--side", choices=list(SIDES), help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.chunk_size is None:
    args.chunk_size = [default_chunk_size()]
  if args.side:
    args.data = args.data[0] if isinstance(args.data, list) else args.data
    child(args)
    return
  tables = {table_name(args, data): table(args, data) for data in args.data}
  print("\n\n".join("\n".join(lines) for lines in tables.values()))
  if args.docs:
    docs_data.write_markdown_tables(tables)


if __name__ == "__main__":
  main()
