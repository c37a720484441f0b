"""Benchmark: in-batch training steps over blocks of queries (`jaxrank.blocked_loss`) and whole.

Commands:

    # CPU: temporaries and step time, blocked against unblocked, in the same process.
    .venv/bin/python -m experiments.benchmarks.blocked --time-batches 4096
    .venv/bin/python -m experiments.benchmarks.blocked --time-batches 16384 --repeats 2
    # Compile only (nothing runs), on this CPU and for an H100 (its own virtual environment, see
    # experiments/benchmarks/accelerators.py): every loss's step at B = 65,536, D = 512.
    .venv-accel/bin/python -m experiments.benchmarks.blocked --memory-batch 65536 --targets h100 cpu

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

Tables: one of temporaries and times for each of `--time-batches` (`blocked_time_<B>`), and with
`--memory-batch` the compiled steps' temporaries, two columns for each of `--targets`
(`blocked_memory_<B>`). `--docs` also writes them to docs/_generated/<table>.json, which
docs/guide/scale.rst, section "Whole-data-set batches", shows with the command that measured each.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from experiments import docs_data
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


def _timed_pair(programs, e, y, repeats: int) -> list[float]:
  """The median times of the two compiled steps, called alternately after one warm-up each."""
  import jax

  for program in programs:  # Warm-up.
    jax.block_until_ready(program(e, y))
  times: list[list[float]] = [[], []]
  for _ in range(repeats):
    for i, program in enumerate(programs):
      start = time.perf_counter()
      jax.block_until_ready(program(e, y))
      times[i].append(time.perf_counter() - start)
  return [float(np.median(t)) for t in times]


def time_table(batch: int, dim: int, block: int, names: list[str], repeats: int) -> list[str]:
  """CPU: temporaries and median step time, blocked against unblocked, at `batch`."""
  import jax.numpy as jnp

  lines = [
    f"CPU, B = {batch:,}, D = {dim}, blocks of {block:,}: temporaries and step time "
    f"(median of {repeats})",
    "| loss | unblocked temporaries | blocked temporaries | unblocked | blocked | "
    "blocked / unblocked |",
    "| --- | --- | --- | --- | --- | --- |",
  ]
  e, y = speed.make_batch(batch, dim)
  e, y = jnp.asarray(e), jnp.asarray(y)
  for name in names:
    whole, blocked = steps(name, block)
    programs = [compiled(whole, batch, dim), compiled(blocked, batch, dim)]
    temps = [p.memory_analysis().temp_size_in_bytes for p in programs]
    medians = _timed_pair(programs, e, y, repeats)
    lines.append(
      f"| {name} | {_gb(temps[0])} | {_gb(temps[1])} | {medians[0]:.2f} s | "
      f"{medians[1]:.2f} s | {medians[1] / medians[0]:.2f}x |"
    )
    print(lines[-1], file=sys.stderr, flush=True)
    del programs
  return lines


TARGETS = {"cpu": "CPU", "h100": "H100"}


def memory_table(
  batch: int, dim: int, block: int, names: list[str], targets: list[str], unblocked_batch: int
) -> list[str]:
  """Compile only: each loss's blocked step's temporaries at `batch` beside the unblocked step's at
  `unblocked_batch`, two columns for each target."""
  columns = [
    f"{TARGETS[t]}, {form}, B = {b:,}"
    for t in targets
    for form, b in (("unblocked", unblocked_batch), ("blocked", batch))
  ]
  lines = [
    f"Compiled steps, D = {dim}, blocks of {block:,}: temporaries (nothing run)",
    "| loss | " + " | ".join(columns) + " |",
    "|" + " --- |" * (len(columns) + 1),
  ]
  devices = {t: None if t == "cpu" else accelerators.devices(t)[0] for t in targets}
  for name in names:
    whole, blocked = steps(name, block)
    cells = [
      _gb(_temporaries(loss, b, dim, devices[t]))
      for t in targets
      for loss, b in ((whole, unblocked_batch), (blocked, batch))
    ]
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
    print(lines[-1], file=sys.stderr, flush=True)
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
  parser.add_argument("--targets", nargs="+", choices=list(TARGETS), default=["cpu"])
  parser.add_argument("--dim", type=int, default=512)
  parser.add_argument("--block", type=int, default=1024)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument(
    "--losses", nargs="+", choices=list(accelerators.LOSSES), default=list(accelerators.LOSSES)
  )
  docs_data.add_docs_argument(parser, "blocked_time_<B>, blocked_memory_<B>")
  args = parser.parse_args(argv)
  if "h100" in args.targets:
    accelerators.set_environment()
  tables = {
    f"blocked_time_{batch}": time_table(batch, args.dim, args.block, args.losses, args.repeats)
    for batch in args.time_batches
  }
  if args.memory_batch:
    tables[f"blocked_memory_{args.memory_batch}"] = memory_table(
      args.memory_batch, args.dim, args.block, args.losses, args.targets, args.unblocked_batch
    )
  print("\n\n".join("\n".join(lines) for lines in tables.values()))
  if args.docs:
    docs_data.write_markdown_tables(tables)


if __name__ == "__main__":
  main()
