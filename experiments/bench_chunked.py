"""Benchmark: one training step of a small CNN with a listwise loss, chunked against unchunked.

Command:

    .venv/bin/python -m experiments.bench_chunked                 # B = 256, 1024, 4096
    .venv/bin/python -m experiments.bench_chunked --batch-sizes 256 --repeats 1

The step is the gradient of `blackbox_ap_loss(*batch_retrieval(cnn(images), labels))` with respect
to the CNN's parameters, on random 32x32x3 images (4 per class), either by plain `jax.grad` over the
whole batch or by `chunked_value_and_grad` with chunks of 128 images.

Memory is XLA's own account of the compiled step (`memory_analysis()`): the temporary buffers the
program needs at its peak, besides its inputs and outputs. It is exact for the program and free of
allocator noise; process RSS is also printed (it includes the runtime, ~0.3 GB). Time is the median
over `--repeats` steps after one warm-up (compilation excluded).

Measured on the 2-core development machine (AMD EPYC, 24 GiB, no GPU), 2026-11-22: see README.md,
section "Large batches", for the table this script printed.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


def child(batch: int, chunk: int | None, repeats: int) -> dict:
  import jax
  import jax.numpy as jnp
  from flax import nnx

  import jaxrank

  class CNN(nnx.Module):

    def __init__(self, rngs):
      self.c1 = nnx.Conv(3, 32, (3, 3), rngs=rngs)
      self.c2 = nnx.Conv(32, 64, (3, 3), strides=(2, 2), rngs=rngs)
      self.c3 = nnx.Conv(64, 128, (3, 3), strides=(2, 2), rngs=rngs)
      self.head = nnx.Linear(128, 128, rngs=rngs)

    def __call__(self, x):
      x = nnx.relu(self.c1(x))
      x = nnx.relu(self.c2(x))
      x = nnx.relu(self.c3(x))
      return self.head(x.mean(axis=(1, 2)))

  graphdef, params = nnx.split(CNN(nnx.Rngs(0)), nnx.Param)

  def embed(p, x):
    return nnx.merge(graphdef, p)(x)

  def loss(e, y):
    scores, relevance, where = jaxrank.batch_retrieval(e, y)
    return jaxrank.blackbox_ap_loss(scores, relevance, where=where)

  rng = np.random.default_rng(0)
  images = jnp.asarray(rng.standard_normal((batch, 32, 32, 3)), jnp.float32)
  labels = jnp.asarray(np.repeat(np.arange(batch // 4), 4))
  if chunk is None:
    step = jax.jit(jax.value_and_grad(lambda p, x, y: loss(embed(p, x), y)))
  else:
    step = jax.jit(jaxrank.chunked_value_and_grad(embed, loss, chunk_size=chunk))
  start = time.perf_counter()
  compiled = step.lower(params, images, labels).compile()
  compile_time = time.perf_counter() - start
  temp_bytes = compiled.memory_analysis().temp_size_in_bytes
  jax.block_until_ready(compiled(params, images, labels))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(compiled(params, images, labels))
    times.append(time.perf_counter() - start)
  return {
      "time": float(np.median(times)),
      "compile": compile_time,
      "temp_mb": temp_bytes / 2**20,
      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
  }


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 1024, 4096])
  parser.add_argument("--chunk", type=int, default=128)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    batch, chunk = args.child
    print(json.dumps(child(batch, chunk or None, args.repeats)))
    return
  print(f"one training step, small CNN on 32x32x3, blackbox_ap_loss, chunk {args.chunk}, "
        f"median of {args.repeats}")
  print(f"{'B':>6} {'mode':>10} {'time s':>8} {'compile s':>9} {'XLA temp MB':>12} {'RSS MB':>8} "
        f"{'temp ratio':>11}")
  for batch in args.batch_sizes:
    rows = {}
    for mode, chunk in (("unchunked", 0), ("chunked", args.chunk)):
      command = [sys.executable, "-m", "experiments.bench_chunked", "--child", str(batch), str(chunk)]
      command += ["--repeats", str(args.repeats)]
      out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
      rows[mode] = json.loads(out.strip().splitlines()[-1])
    for mode in ("unchunked", "chunked"):
      row = rows[mode]
      ratio = row["temp_mb"] / rows["unchunked"]["temp_mb"]
      print(f"{batch:6d} {mode:>10} {row['time']:8.2f} {row['compile']:9.1f} {row['temp_mb']:12.1f} "
            f"{row['rss_mb']:8.0f} {ratio:11.3f}")


if __name__ == "__main__":
  main()
