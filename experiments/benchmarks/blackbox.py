"""Benchmark: `blackbox_ap_loss` forward+backward on one long list, beside PyTorch, on one CPU core.

Command (needs torch for the baseline: `pip install torch==2.13.0`, which takes a local CPU wheel):

    .venv/bin/python -m experiments.benchmarks.blackbox            # 1,000,000 scores, 1% relevant
    .venv/bin/python -m experiments.benchmarks.blackbox --n 100000

`--docs` also writes the table to docs/_generated/blackbox_sort.json, which
docs/guide/benchmarks.rst shows.

RaMBO's Table 6 reports 0.33 s for forward+backward of AP on 1M scores on one Xeon core (PyTorch).
The baseline here is the same algorithm written in PyTorch the way the paper's code does it: one
`argsort` forward (ranks among the relevant items from the same order, without gradient) and one
`argsort` of the perturbed scores backward (Algorithm 1). jaxrank does the same two sorts; on CPU
they run in numpy (XLA's CPU sort is about 10x slower), on GPU/TPU in XLA.

Each side runs in its own process pinned to one core (`sched_setaffinity`, one intra-op thread).
Times are medians over `--repeats` calls after one warm-up (compilation excluded).

What it measured on the 2-core development machine: see
docs/guide/benchmarks.rst, section "Blackbox ranking", for the table this script printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from experiments import docs_data


def make_list(n: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  scores = rng.standard_normal(n).astype(np.float32)
  labels = (rng.random(n) < 0.01).astype(np.int32)
  return scores, labels


def time_calls(fn, repeats):
  fn()  # Warm-up: compilation, allocations.
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    value = fn()
    times.append(time.perf_counter() - start)
  return float(np.median(times)), value


def run_jaxrank(scores, labels, repeats):
  import jax
  import jax.numpy as jnp

  import jaxrank

  loss_and_grad = jax.jit(
    jax.value_and_grad(lambda s, y: jaxrank.blackbox_ap_loss(s, y, interpolation=4.0))
  )
  s, y = jnp.asarray(scores), jnp.asarray(labels)

  def call():
    value, grad = loss_and_grad(s, y)
    grad.block_until_ready()
    return float(value)

  return time_calls(call, repeats)


def run_torch(scores, labels, repeats):
  import torch

  torch.set_num_threads(1)

  def ranks_of(seq):
    order = torch.argsort(seq, descending=True, stable=True)
    ranks = torch.empty_like(seq)
    ranks[order] = torch.arange(1, len(seq) + 1, dtype=seq.dtype)
    return ranks, order

  class Ranker(torch.autograd.Function):
    @staticmethod
    def forward(ctx, seq, interpolation):
      ranks, order = ranks_of(seq)
      ctx.interpolation = interpolation
      ctx.save_for_backward(seq, ranks)
      return ranks, order

    @staticmethod
    def backward(ctx, grad_ranks, grad_order):
      seq, ranks = ctx.saved_tensors
      perturbed, _ = ranks_of(seq + ctx.interpolation * grad_ranks)
      return -(ranks - perturbed) / ctx.interpolation, None

  y = torch.from_numpy(labels).bool()
  n = len(labels)

  def call():
    s = torch.from_numpy(scores).clone().requires_grad_(True)
    shifted = s + torch.where(y, -0.01, 0.01)  # margin 0.02, eq. 14
    ranks, order = Ranker.apply(shifted, 4.0 * n)
    in_order = y[order].to(s.dtype)
    relevant_ranks = torch.empty_like(in_order)
    relevant_ranks[order] = torch.cumsum(in_order, 0)
    loss = 1 - (relevant_ranks[y] / ranks[y]).mean()
    loss.backward()
    return float(loss)

  return time_calls(call, repeats)


def child(args):
  os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
  scores, labels = make_list(args.n)
  run = run_jaxrank if args.side == "jaxrank" else run_torch
  median, value = run(scores, labels, args.repeats)
  print(json.dumps({"time": median, "loss": value}))


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--n", type=int, default=1_000_000)
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument(
    "--docs", action="store_true", help="also write the table to docs/_generated/blackbox_sort.json"
  )
  parser.add_argument("--side", choices=["jaxrank", "torch"], help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.side:
    child(args)
    return
  env = dict(os.environ)
  env["XLA_FLAGS"] = (
    env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
  )
  rows = {}
  for side in ("torch", "jaxrank"):
    command = [sys.executable, "-m", "experiments.benchmarks.blackbox", "--side", side]
    command += ["--n", str(args.n), "--repeats", str(args.repeats)]
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    rows[side] = json.loads(out.strip().splitlines()[-1])
  base = rows["torch"]["time"]
  print(
    f"blackbox AP loss, forward+backward, {args.n:,} scores (1% relevant), one core, "
    f"median of {args.repeats}"
  )
  print(f"{'':10} {'time s':>8} {'ratio':>6} {'loss':>8}")
  for side in ("torch", "jaxrank"):
    row = rows[side]
    print(f"{side:10} {row['time']:8.3f} {row['time'] / base:6.2f} {row['loss']:8.5f}")
  if args.docs:
    import torch  # pylint: disable=g-import-not-at-top

    names = {
      "torch": f"PyTorch {torch.__version__.split('+')[0]}, same algorithm (two argsort)",
      "jaxrank": "jaxrank.blackbox_ap_loss",
    }
    print(
      "wrote",
      docs_data.write_table(
        "blackbox_sort",
        title=f"blackbox AP loss, {args.n:,} scores (1% relevant), one core",
        columns=[
          f"{args.n:,} scores, one core",
          f"forward+backward (median of {args.repeats})",
          "ratio",
        ],
        rows=[
          [names[side], f"{rows[side]['time']:.3f} s", f"{rows[side]['time'] / base:.2f}"]
          for side in ("torch", "jaxrank")
        ],
      ),
    )


if __name__ == "__main__":
  main()
