"""Benchmark: forward+backward of in-batch losses beside pytorch-metric-learning, by batch size.

Commands (the baseline needs `pip install torch==2.13.0 pytorch-metric-learning`; torch 2.13.0
takes a local CPU wheel here; neither is a jaxrank dependency):

    .venv/bin/python -m experiments.benchmarks.losses --loss fastap      # B = 256, 1024, 2048, 4096
    .venv/bin/python -m experiments.benchmarks.losses --loss smoothap    # B = 256, 1024, 4096
    .venv/bin/python -m experiments.benchmarks.losses --loss supap --batch-sizes 256 1024 4096

With `--docs` the run also writes its table and a figure of the times by batch size into
docs/_generated/losses_<loss>.json and .png, which docs/guide/benchmarks.rst shows (with this
machine's description and the date).

One step is the loss of `[B, 512]` random embeddings (4 per class, classes in equal consecutive
blocks as pytorch-metric-learning's SmoothAPLoss requires) and its gradient with respect to the
embeddings: `jax.value_and_grad(loss(*batch_retrieval(e, labels)))` under `jit` for jaxrank,
`loss_fn(e, labels).backward()` for pytorch-metric-learning (`FastAPLoss(num_bins=10)`, whose
`num_bins` counts intervals as jaxrank's `num_intervals` does, `SmoothAPLoss(temperature=0.01)`; it
has no SupAP, so SupAP is measured against its SmoothAP). SmoothAP is compared with
`include_self=True`, pytorch-metric-learning's convention; FastAP with the query left out, as both
implementations do.

Each (library, batch size) runs in its own process, on both cores. Time: median of `--repeats`
steps after a warm-up (compilation excluded). Memory: the process's peak RSS minus its RSS before
the first step (the data, the libraries and the runtime excluded). pytorch-metric-learning's
SmoothAPLoss builds `[B, B, B]` tensors: it is skipped above `--max-pml-smoothap` (default 1024;
at 2048 it needs more than this machine's 24 GiB).

What it measured: docs/guide/benchmarks.rst, section "Loss benchmarks", shows the tables that
`--docs` wrote.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from experiments import docs_data

DIM = 512
PER_CLASS = 4


def rss_mb() -> float:
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) / 1024
  return float("nan")


def peak_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_batch(batch: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(batch // PER_CLASS), PER_CLASS)
  centres = rng.standard_normal((batch // PER_CLASS, DIM)).astype(np.float32)
  embeddings = centres[labels] + 2.0 * rng.standard_normal((batch, DIM)).astype(np.float32)
  return embeddings, labels


def jaxrank_step(loss_name: str, embeddings, labels):
  import functools

  import jax
  import jax.numpy as jnp

  import jaxrank

  loss_fn: Callable[..., Any]
  if loss_name == "fastap":
    loss_fn, include_self = functools.partial(jaxrank.fastap_loss, num_intervals=10), False
  elif loss_name == "smoothap":
    loss_fn, include_self = functools.partial(jaxrank.smoothap_loss, temperature=0.01), True
  else:
    loss_fn, include_self = jaxrank.supap_loss, True

  def loss(e, y):
    scores, relevance, where = jaxrank.batch_retrieval(e, y, include_self=include_self)
    return loss_fn(scores, relevance, where=where)

  step = jax.jit(jax.value_and_grad(loss))
  e, y = jnp.asarray(embeddings), jnp.asarray(labels)

  def call():
    value, grad = step(e, y)
    grad.block_until_ready()
    return float(value)

  return call


def pml_step(loss_name: str, embeddings, labels):
  import torch
  from pytorch_metric_learning import losses

  torch.set_num_threads(2)
  loss_fn = losses.FastAPLoss(num_bins=10) if loss_name == "fastap" else losses.SmoothAPLoss(0.01)
  y = torch.from_numpy(labels)

  def call():
    e = torch.from_numpy(embeddings).clone().requires_grad_(True)
    value = loss_fn(e, y)
    value.backward()
    return float(value)

  return call


def child(side: str, loss_name: str, batch: int, repeats: int) -> dict:
  embeddings, labels = make_batch(batch)
  call = (jaxrank_step if side == "jaxrank" else pml_step)(loss_name, embeddings, labels)
  before = rss_mb()
  value = call()  # Warm-up (and compilation).
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    call()
    times.append(time.perf_counter() - start)
  return {"time": float(np.median(times)), "memory_mb": peak_mb() - before, "loss": value}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--loss", choices=["fastap", "smoothap", "supap"], required=True)
  parser.add_argument("--batch-sizes", type=int, nargs="+")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--max-pml-smoothap", type=int, default=1024)
  parser.add_argument(
    "--docs", action="store_true", help="also write docs/_generated/losses_<loss>.json and .png"
  )
  parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    side, batch = args.child
    print(json.dumps(child(side, args.loss, int(batch), args.repeats)))
    return
  default_sizes = [256, 1024, 2048, 4096] if args.loss == "fastap" else [256, 1024, 4096]
  batch_sizes = args.batch_sizes or default_sizes
  baseline = "FastAPLoss" if args.loss == "fastap" else "SmoothAPLoss"
  print(
    f"{args.loss}: forward+backward through batch_retrieval, D={DIM}, {PER_CLASS} per class, "
    f"median of {args.repeats}; baseline pytorch-metric-learning {baseline}"
  )
  print(
    f"{'B':>6} {'jaxrank s':>10} {'pml s':>8} {'speed-up':>9} {'jaxrank MB':>11} {'pml MB':>8} "
    f"{'mem ratio':>10}"
  )
  measured = []
  for batch in batch_sizes:
    rows = {}
    for side in ("jaxrank", "pml"):
      if side == "pml" and args.loss != "fastap" and batch > args.max_pml_smoothap:
        continue
      command = [sys.executable, "-m", "experiments.benchmarks.losses", "--loss", args.loss]
      command += ["--child", side, str(batch), "--repeats", str(args.repeats)]
      out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
      rows[side] = json.loads(out.strip().splitlines()[-1])
    j = rows["jaxrank"]
    measured.append((batch, j, rows.get("pml")))
    if "pml" in rows:
      p = rows["pml"]
      print(
        f"{batch:6d} {j['time']:10.3f} {p['time']:8.3f} {p['time'] / j['time']:9.1f} "
        f"{j['memory_mb']:11.0f} {p['memory_mb']:8.0f} {j['memory_mb'] / p['memory_mb']:10.3f}"
      )
    else:
      print(f"{batch:6d} {j['time']:10.3f} {'n/a':>8} {'':>9} {j['memory_mb']:11.0f} {'n/a':>8}")
  if args.docs:
    write_docs(args.loss, baseline, measured, args.repeats)


TITLES = {
  "fastap": "fastap_loss(num_intervals=10) against FastAPLoss(num_bins=10)",
  "smoothap": "smoothap_loss(temperature=0.01) against SmoothAPLoss(0.01), query included",
  "supap": "supap_loss (Ramzi et al.'s defaults) against SmoothAPLoss(0.01), query included",
}


def _speed_up(ratio: float) -> str:
  """`5.6x`, `72x`, `546x`: two significant digits, never in exponent notation."""
  return f"{ratio:.1f}x" if ratio < 10 else f"{ratio:.0f}x"


def docs_rows(measured) -> list[list[str]]:
  """The guide's rows: B, the two times, the speed-up, the two memories and their ratio."""
  rows = []
  for batch, j, p in measured:
    if p is None:
      rows.append(
        [str(batch), f"{j['time']:.3g} s", "n/a", "", f"{j['memory_mb']:,.0f} MB", "n/a", ""]
      )
    else:
      rows.append(
        [
          str(batch),
          f"{j['time']:.3g} s",
          f"{p['time']:.3g} s",
          _speed_up(p["time"] / j["time"]),
          f"{j['memory_mb']:,.0f} MB",
          f"{p['memory_mb']:,.0f} MB",
          f"{j['memory_mb'] / p['memory_mb']:.2f}",
        ]
      )
  return rows


def docs_figure(loss_name: str, baseline: str, measured):
  """Time and memory by batch size, jaxrank beside pytorch-metric-learning (log-log)."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, axes = plt.subplots(1, 2, figsize=(8, 3))
  for axis, key, label in (
    (axes[0], "time", "forward+backward (s)"),
    (axes[1], "memory_mb", "peak memory (MB)"),
  ):
    for side, index, style in (
      ("jaxrank", 1, "o-"),
      (f"pytorch-metric-learning {baseline}", 2, "s--"),
    ):
      points = [(m[0], m[index][key]) for m in measured if m[index] is not None]
      if points:
        axis.plot(*zip(*points), style, label=side)
    axis.set(xscale="log", yscale="log", xlabel="batch size B", ylabel=label)
    axis.set_xticks([m[0] for m in measured], [str(m[0]) for m in measured])
    axis.minorticks_off()
  axes[0].legend(fontsize=8)
  fig.suptitle(f"{loss_name}: [B, 512] embeddings, 4 per class", fontsize=10)
  fig.tight_layout()
  return fig


def write_docs(loss_name: str, baseline: str, measured, repeats: int) -> None:

  path = docs_data.write_table(
    f"losses_{loss_name}",
    title=f"{TITLES[loss_name]}; median of {repeats} steps",
    columns=["B", "jaxrank", "pml", "speed-up", "jaxrank memory", "pml memory", "memory ratio"],
    rows=docs_rows(measured),
    figure=docs_figure(loss_name, baseline, measured),
  )
  print(f"wrote {path}")


if __name__ == "__main__":
  main()
