"""Benchmark: in-batch training steps over blocks of queries (`jaxrank.blocked_loss`) and whole.

Commands:

    # CPU: temporaries and step time, blocked against unblocked, in the same process.
    .venv/bin/python -m experiments.benchmarks.blocked --time-batches 4096
    .venv/bin/python -m experiments.benchmarks.blocked --time-batches 16384 --losses FastAP
    # Compile only (nothing runs), on this CPU and for an H100 (its own virtual environment, see
    # experiments/benchmarks/accelerators.py): every loss's step at B = 65,536, D = 512.
    .venv-accel/bin/python -m experiments.benchmarks.blocked --memory-batch 65536 --targets cpu h100

The step is `jax.jit(jax.value_and_grad(f))` with respect to `[B, D]` embeddings, `f` either
`loss(*batch_retrieval(e, y))` (`unblocked`) or `blocked_loss(loss, block_size=...)(e, y)`
(`blocked`), on the rows of `experiments/benchmarks/accelerators.py` (the paper losses, their
bounded forms as the training job runs them, and the pair baselines), 4 items per class.

* `temporaries`: `memory_analysis().temp_size_in_bytes` of the compiled step, the scratch it needs
  beyond its arguments and outputs. For the unblocked step it grows as B^2; for the blocked one as
  block x B (plus O(B D) for the embeddings' gradient).
* time (`--time-batches`): the median over `--repeats` calls after one warm-up, the two steps
  called alternately in the same process (so that a change of load on the shared machine hits
  both alike), and `blocked / unblocked` the ratio of the medians.

Measured tables and the command lines: docs/guide/scale.rst, section "Whole-data-set batches".
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from experiments.benchmarks import accelerators
from experiments.benchmarks import speed


def steps(name: str, block: int):
  """`(unblocked, blocked)`: the two `f(embeddings, labels)` of row `name`."""
  import jaxrank

  loss_fn = speed.loss_function(name, accelerators.LOSSES)
  return speed.in_batch_loss(name, accelerators.LOSSES), jaxrank.blocked_loss(
    loss_fn, block_size=block
  )


def compiled(loss, batch: int, dim: int, device=None):
  """The step of `loss` compiled for `[batch, dim]` embeddings (on `device`, or this CPU)."""
  if device is None:
    return speed.step_for(loss, batch, dim)
  return accelerators.compile_step(loss, batch, dim, device)


def _temporaries(loss, batch, dim, device=None) -> float | None:
  """Temporaries of the compiled step, or None where the compiler refuses it (too large)."""
  try:
    return float(compiled(loss, batch, dim, device).memory_analysis().temp_size_in_bytes)
  except Exception as error:  # pylint: disable=broad-except
    if "RESOURCE_EXHAUSTED" in str(error) or "memory" in str(error).lower():
      return None
    raise


def _gb(x: float | None) -> str:
  if x is None:
    return "does not compile"
  return f"{x / 2**20:,.0f} MB" if x < 2**30 else f"{x / 2**30:.2f} GB"


def time_table(batches: list[int], dim: int, block: int, names: list[str], repeats: int):
  """CPU: temporaries and median step time, blocked against unblocked, for each batch."""
  import jax
  import jax.numpy as jnp

  lines = [
    f"CPU, D = {dim}, block {block}: temporaries and step time (median of {repeats})",
    "| loss | B | unblocked temporaries | blocked temporaries | unblocked | blocked | "
    "blocked / unblocked |",
    "| --- | --- | --- | --- | --- | --- | --- |",
  ]
  for batch in batches:
    e, y = speed.make_batch(batch, dim)
    e, y = jnp.asarray(e), jnp.asarray(y)
    for name in names:
      whole, blocked = steps(name, block)
      programs = [compiled(whole, batch, dim), compiled(blocked, batch, dim)]
      temps = [p.memory_analysis().temp_size_in_bytes for p in programs]
      for program in programs:  # Warm-up.
        jax.block_until_ready(program(e, y))
      times: list[list[float]] = [[], []]
      for _ in range(repeats):
        for i, program in enumerate(programs):
          start = time.perf_counter()
          jax.block_until_ready(program(e, y))
          times[i].append(time.perf_counter() - start)
      medians = [float(np.median(t)) for t in times]
      lines.append(
        f"| {name} | {batch:,} | {_gb(temps[0])} | {_gb(temps[1])} | {medians[0]:.2f} s | "
        f"{medians[1]:.2f} s | {medians[1] / medians[0]:.2f}x |"
      )
      print(lines[-1], file=sys.stderr, flush=True)
      del programs
  return lines


def memory_table(
  batch: int, dim: int, block: int, names: list[str], targets: list[str], unblocked_batch: int
):
  """Compile only: the blocked step's temporaries at `batch` on each target, beside the unblocked
  step's at `unblocked_batch`."""
  lines = [
    f"Compiled steps, D = {dim}, block {block}: temporaries (memory analysis, nothing run)",
    "| target | loss | unblocked, B = "
    + f"{unblocked_batch:,}"
    + " | blocked, B = "
    + f"{batch:,} |",
    "| --- | --- | --- | --- |",
  ]
  for target in targets:
    device = None if target == "cpu" else accelerators.devices(target)[0]
    for name in names:
      whole, blocked = steps(name, block)
      row = (
        f"| {target} | {name} | {_gb(_temporaries(whole, unblocked_batch, dim, device))} | "
        f"{_gb(_temporaries(blocked, batch, dim, device))} |"
      )
      lines.append(row)
      print(row, file=sys.stderr, flush=True)
  return lines


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--time-batches", type=int, nargs="*", default=[])
  parser.add_argument("--memory-batch", type=int, default=None)
  parser.add_argument(
    "--unblocked-batch",
    type=int,
    default=16384,
    help="the unblocked step's batch in the memory table",
  )
  parser.add_argument("--targets", nargs="+", choices=["cpu", "h100"], default=["cpu"])
  parser.add_argument("--dim", type=int, default=512)
  parser.add_argument("--block", type=int, default=1024)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument(
    "--losses", nargs="+", choices=list(accelerators.LOSSES), default=list(accelerators.LOSSES)
  )
  args = parser.parse_args(argv)
  if "h100" in args.targets:
    accelerators.set_environment()
  lines = []
  if args.time_batches:
    lines += time_table(args.time_batches, args.dim, args.block, args.losses, args.repeats)
  if args.memory_batch:
    lines += [""] + memory_table(
      args.memory_batch, args.dim, args.block, args.losses, args.targets, args.unblocked_batch
    )
  print("\n".join(lines))


if __name__ == "__main__":
  main()
