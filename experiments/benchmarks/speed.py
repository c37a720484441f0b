"""Benchmark: each loss against the similarity matmul floor, and compile time by calling pattern.

Command:

    .venv/bin/python -m experiments.benchmarks.speed                  # B = 4096, D = 512, 5 repeats
    .venv/bin/python -m experiments.benchmarks.speed --batch 1024 --repeats 3 --skip-compile-table
    .venv/bin/python -m experiments.benchmarks.speed --losses FastAP SmoothAP --skip-breakdown
    .venv/bin/python -m experiments.benchmarks.speed --skip-breakdown --skip-compile-table \\
        --skip-cost
    .venv/bin/python -m experiments.benchmarks.speed --skip-steps --skip-breakdown --skip-cost

`--docs` also writes each table to docs/_generated/speed_<table>.json (steps, breakdown, cost,
compile; a `--skip-` flag leaves one out, so that each can have a command of its own), which
docs/guide/benchmarks.rst shows with this machine's description and the date.

Table 1, one row per loss: the step is `jax.jit(jax.value_and_grad(f))` with
`f(e) = loss(*batch_retrieval(e, labels))` on `[B, D]` random unit embeddings (4 per class); the
floor is the same step for `f(e) = sum(e @ e.T)` (forward and backward of the similarity matmul,
which every in-batch loss pays). Both are timed in the same process, interleaved (floor, loss,
floor, loss, ...), medians of `--repeats` after a warm-up, so that a machine shared with other
jobs slows both alike: the ratio is the figure to read. Memory: XLA's own account of the compiled
step (`memory_analysis()`: temporaries plus outputs), which does not depend on the load. Compile:
lowering plus compilation of the step with the labels as an argument, and with the labels
captured as a constant (`lambda e: loss(*batch_retrieval(e, labels))`), wall time and the
process's CPU time (less sensitive to other jobs).

Table 2, where each step's time goes: forward+backward of the scores alone (`batch_retrieval`'s
`[B, B]` cosines, which include the floor's product), of the loss alone on those precomputed
scores, and of the whole step, interleaved with the floor; the step is about the sum of the first
two, so `(scores + lists) / floor` says which part keeps a loss from 2x. For the blackbox losses
a last line times one of their two host sorts of the lists (`host_kernels.numpy_descending_ranks`).

Table 3, one row per loss, no timing: XLA's own account of the compiled step
(`compiled.cost_analysis()`: flops and bytes accessed; `memory_analysis()`: temporaries), each as a
ratio to the floor's. These do not depend on the machine's load, and a step on an accelerator is
bound by the bytes it moves, so `bytes / floor` is the figure that carries to a GPU where CPU
timings do not. The blackbox losses are compiled there on XLA's sort (their GPU/TPU path; on CPU
the host callback's sort would count as nothing). Last column: the largest batch whose step fits
80 GB by the memory analysis, found by compiling without running (a fit `a B^2 + c B` through
`B/2` and `B`, then compilations at the predicted batch until it is within 1% under; see
`largest_batch`). XLA's cost analysis counts the body of a while loop once, whatever its trip
count; the scores' item blocks are written out for this reason (`similarity.UNROLL_BLOCKS`), and
a step that still loops (the smooth-rank losses over each list's relevant items, a number known
only at run time) shows its flops and bytes as lower bounds (`>=`), with its loops counted in
the last column.

Table 4, one row per list-level function of `jaxrank.__all__`, the list-level calling pattern of
issue 18: `[B, B]` scores as the argument, and labels and mask either arguments too or captured
(`lambda s: f(s, labels, where=mask)`), `value_and_grad` for losses, the value for metrics.
Captured `[B, B]` labels and mask are constants that XLA embeds in the program: as they are
(int32 and bool, 80 MB), that costs about 1 s of CPU compilation whatever the function does, which
the row "(constants only)" measures on a function that only reads them (JAX 0.10.2's
`jax_use_simplified_jaxpr_constants=True` did not change it, measured). jaxrank's list-level
functions embed them compactly instead, as bits or int8 (`lists.embedded_compactly`, called by
`checks.check_lists`), so captured costs about 0.1-0.2 s more than arguments.

The rows "blackbox AP (counting)" and "blackbox recall (counting)" are the same losses with
`max_relevant=PER_CLASS - 1` (3): every list has 3 relevant items, so they rank by counting (O(3 n)
per list, no sort) instead of sorting; their values and gradients are those of the sort rows.
The rows "SmoothAP (bounded)", "SupAP (bounded)" and "ROADMAP (bounded)" pass the same bound: a
loop of 3 steps instead of one whose length is known only at run time. These are the losses as
the training job runs them (it passes its sampler's bound).

The blackbox losses sort on the host on CPU (`jax.pure_callback`, numpy, both cores); on GPU and
TPU they take XLA's sort (`ranking.descending_ranks`). No accelerator was available: every number
here is from CPU.

Measured on the 2-core development machine (AMD EPYC, 24 GiB, no GPU): see
docs/guide/benchmarks.rst, section "Loss speed", for the tables this script printed and the
command that printed them.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import re
import resource
import time
from collections.abc import Callable

import numpy as np

from experiments import docs_data

PER_CLASS = 4

LOSSES = {
  "FastAP": "fastap_loss",
  "mAP_Q": "soft_binning_ap_loss",
  "AP_r": "tie_aware_ap_loss",
  "SmoothAP": "smoothap_loss",
  "SupAP": "supap_loss",
  "ROADMAP": "roadmap_loss",
  "blackbox AP": "blackbox_ap_loss",
  "blackbox recall": "blackbox_recall_loss",
  # The blackbox losses' counting path: with PER_CLASS items per class a list has PER_CLASS - 1
  # relevant items, the bound that selects it.
  "blackbox AP (counting)": "blackbox_ap_loss",
  "blackbox recall (counting)": "blackbox_recall_loss",
  # The smooth-rank losses with the same bound, as the training job runs them.
  "SmoothAP (bounded)": "smoothap_loss",
  "SupAP (bounded)": "supap_loss",
  "ROADMAP (bounded)": "roadmap_loss",
}
# Keyword arguments of the rows that need them.
LOSS_KWARGS = {
  "blackbox AP (counting)": {"max_relevant": PER_CLASS - 1},
  "blackbox recall (counting)": {"max_relevant": PER_CLASS - 1},
  "SmoothAP (bounded)": {"max_relevant": PER_CLASS - 1},
  "SupAP (bounded)": {"max_relevant": PER_CLASS - 1},
  "ROADMAP (bounded)": {"max_relevant": PER_CLASS - 1},
}
# The budget of the largest-batch column: one 80 GB accelerator (A100/H100 80GB).
DEVICE_BYTES = 80e9

# Hyperparameters without a default, for table 2.
REQUIRED = {
  "decomposability_gap": {"num_batches": 2},
  "hamming_tie_aware_ap_metric": {"num_bits": 64},
  "hamming_tie_aware_ndcg_metric": {"num_bits": 64},
  "precision_at_k_metric": {"topn": 4},
  "recall_at_k_metric": {"topn": 4},
  "relevant_fraction_at_k_metric": {"topn": 4},
}


def timed(fn, *args, seconds: float = 1.0, least: int = 5, most: int = 50) -> float:
  """Median wall seconds of `fn(*args)` until its results are ready, after two warm-up calls:
  at least `least` calls, then more until `seconds` have passed or `most` were made."""
  import jax

  for _ in range(2):
    jax.block_until_ready(fn(*args))
  times: list[float] = []
  start = time.perf_counter()
  while len(times) < least or (time.perf_counter() - start < seconds and len(times) < most):
    begin = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - begin)
  return float(np.median(times))


def cpu_seconds() -> float:
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


def compile_seconds(fn, *args) -> tuple[float, float, object]:
  """(wall, CPU) seconds to lower and compile the jitted `fn` for `args`, and the result."""
  wall, cpu = time.perf_counter(), cpu_seconds()
  compiled = fn.lower(*args).compile()
  return time.perf_counter() - wall, cpu_seconds() - cpu, compiled


def memory_mb(compiled) -> float:
  analysis = compiled.memory_analysis()
  return (analysis.temp_size_in_bytes + analysis.output_size_in_bytes) / 2**20


def footprint_bytes(compiled) -> int:
  """Device bytes a call of `compiled` holds at its peak by XLA's memory analysis: arguments,
  outputs (less those aliased to arguments) and temporaries."""
  a = compiled.memory_analysis()
  return (
    a.argument_size_in_bytes + a.output_size_in_bytes - a.alias_size_in_bytes + a.temp_size_in_bytes
  )


def cost(compiled) -> dict[str, float]:
  """XLA's cost analysis of `compiled`: `flops`, `bytes accessed` (HLO-level counts, before any
  platform; a host callback counts as nothing), `temp` (memory analysis' temporaries) and `loops`
  (the program's while loops, whose bodies the cost analysis counts once whatever their trip
  count, so that flops and bytes are lower bounds where there is one)."""
  analysis = compiled.cost_analysis()
  if isinstance(analysis, (list, tuple)):  # Older JAX: one dict per computation.
    analysis = analysis[0]
  return {
    "flops": float(analysis.get("flops", 0.0)),
    "bytes": float(analysis.get("bytes accessed", 0.0)),
    "temp": float(compiled.memory_analysis().temp_size_in_bytes),
    "loops": float(len(re.findall(r" while\(", compiled.as_text()))),
  }


def step_for(loss, batch: int, dim: int):
  """`jax.jit(value_and_grad(loss))` compiled for `[batch, dim]` embeddings without making them."""
  import jax
  import jax.numpy as jnp

  step = jax.jit(jax.value_and_grad(loss))
  return step.lower(
    jax.ShapeDtypeStruct((batch, dim), jnp.float32), jax.ShapeDtypeStruct((batch,), jnp.int32)
  ).compile()


def largest_batch(loss, batch: int, dim: int, budget: float = DEVICE_BYTES) -> tuple[int, float]:
  """The largest batch whose step fits `budget` bytes by XLA's memory analysis on this machine's
  CPU, and the footprint there (bytes, from a compilation at that batch): `largest_fitting` on
  `step_for`'s footprints."""
  return largest_fitting(lambda b: float(footprint_bytes(step_for(loss, b, dim))), batch, budget)


def largest_fitting(
  footprint, batch: int, budget: float, tolerance: float = 0.01, rounds: int = 4
) -> tuple[int, float]:
  """The largest batch `B` with `footprint(B) <= budget`, and `footprint(B)`.

  `footprint(b)` compiles a step at batch `b` (never runs it) and returns its bytes by the memory
  analysis (or `inf` where the compiler refuses it). It is evaluated at a few batches: at
  `batch // 2` and `batch`, `m(B) = a B^2 + c B` is fitted through both footprints (every in-batch
  step holds `[B, B]` lists and `[B, D]` embeddings; a `[B, B, L]` tensor would show as a larger
  `a` at larger `B`) and solved for `m(B) = budget`; the step is compiled there and the fit
  redone through the two largest finite batches, until the footprint is within `tolerance` under
  the budget (at most `rounds` rounds, then the batch is scaled down until it fits). Batches are
  multiples of `PER_CLASS`.
  """
  points = [(batch // 2, footprint(batch // 2)), (batch, footprint(batch))]
  for _ in range(rounds):
    finite = [p for p in points if np.isfinite(p[1])]
    (b1, m1), (b2, m2) = sorted(finite)[-2:] if len(finite) >= 2 else points[:2]
    a = (m2 / b2 - m1 / b1) / (b2 - b1)
    c = m2 / b2 - a * b2
    best = budget / c if a <= 0 else (-c + np.sqrt(c * c + 4 * a * budget)) / (2 * a)
    best = max(PER_CLASS, int(best) // PER_CLASS * PER_CLASS)
    points.append((best, footprint(best)))
    if (1 - tolerance) * budget <= points[-1][1] <= budget:
      break
  best, used = points[-1]
  while used > budget and best > PER_CLASS:
    scale = 0.9 if not np.isfinite(used) else (1 - tolerance) * np.sqrt(budget / used)
    best = max(PER_CLASS, int(best * scale) // PER_CLASS * PER_CLASS)
    used = footprint(best)
  return best, used


def make_batch(batch: int, dim: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(batch // PER_CLASS), PER_CLASS).astype(np.int32)
  centres = rng.standard_normal((batch // PER_CLASS, dim)).astype(np.float32)
  e = centres[labels] + 2.0 * rng.standard_normal((batch, dim)).astype(np.float32)
  return e / np.linalg.norm(e, axis=1, keepdims=True), labels


def loss_function(name: str, table: dict[str, str] | None = None):
  """The list-level loss of row `name` (of `table`, default `LOSSES`), its keyword arguments
  fixed."""
  import jaxrank

  table = LOSSES if table is None else table
  return functools.partial(getattr(jaxrank, table[name]), **LOSS_KWARGS.get(name, {}))


def in_batch_loss(name: str, table: dict[str, str] | None = None):
  """`f(embeddings, labels)`: the loss `table[name]` (default `LOSSES`) on `batch_retrieval`'s
  lists, as trained."""
  import jaxrank

  loss_fn = loss_function(name, table)

  def loss(e, y):
    scores, relevance, where = jaxrank.batch_retrieval(e, y)
    return loss_fn(scores, relevance, where=where)

  return loss


def run_seconds(compiled, *args) -> float:
  """Wall seconds of one call of a compiled function, until its results are ready."""
  import jax

  start = time.perf_counter()
  jax.block_until_ready(compiled(*args))
  return time.perf_counter() - start


def loss_table(batch: int, dim: int, repeats: int, names: list[str]) -> list[str]:
  import jax
  import jax.numpy as jnp

  embeddings, labels = make_batch(batch, dim)
  e, y = jnp.asarray(embeddings), jnp.asarray(labels)
  floor = jax.jit(jax.value_and_grad(lambda e: jnp.sum(e @ e.T)))
  floor_compiled = floor.lower(e).compile()
  lines = [
    (
      f"B = {batch}, D = {dim}, {PER_CLASS} per class; forward+backward, median of {repeats}; "
      "floor: forward+backward of e @ e.T in the same run"
    ),
    (
      "| loss | time | floor | ratio | memory | floor memory | compile (labels argument) | "
      "compile (labels captured) |"
    ),
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
  ]
  for name in names:
    loss = in_batch_loss(name)
    step = jax.jit(jax.value_and_grad(loss))
    argument_wall, argument_cpu, compiled = compile_seconds(step, e, y)
    captured = jax.jit(jax.value_and_grad(lambda e, loss=loss: loss(e, labels)))
    captured_wall, captured_cpu, _ = compile_seconds(captured, e)
    run_seconds(compiled, e, y)  # Warm-up.
    run_seconds(floor_compiled, e)
    times, floors = [], []
    for _ in range(repeats):
      floors.append(run_seconds(floor_compiled, e))
      times.append(run_seconds(compiled, e, y))
    t, f = float(np.median(times)), float(np.median(floors))
    lines.append(
      f"| {name} | {t:.2f} s | {f:.2f} s | {t / f:.1f}x | {memory_mb(compiled):.0f} MB | "
      f"{memory_mb(floor_compiled):.0f} MB | {argument_wall:.1f} s ({argument_cpu:.1f} s CPU) | "
      f"{captured_wall:.1f} s ({captured_cpu:.1f} s CPU) |"
    )
    print(lines[-1], flush=True)
  return lines


def breakdown_table(batch: int, dim: int, repeats: int, names: list[str]) -> list[str]:
  """Where each step's time goes: the floor, the scores alone, the loss alone, the whole step."""
  import jax
  import jax.numpy as jnp

  import jaxrank

  embeddings, labels = make_batch(batch, dim)
  e, y = jnp.asarray(embeddings), jnp.asarray(labels)
  scores, relevance, where = jax.jit(jaxrank.batch_retrieval)(e, y)

  def timer(fn, *args):  # A call that times the compiled `fn(*args)` once.
    compiled = jax.jit(fn).lower(*args).compile()
    run_seconds(compiled, *args)  # Warm-up.
    return functools.partial(run_seconds, compiled, *args)

  floor = timer(jax.value_and_grad(lambda e: jnp.sum(e @ e.T)), e)
  # The scores' share: batch_retrieval's cosine matrix, forward and backward, as in every step.
  similarity = timer(jax.value_and_grad(lambda e: jnp.sum(jaxrank.batch_retrieval(e, y)[0])), e)
  lines = [
    (
      f"where the time goes, B = {batch}, D = {dim}: medians of {repeats}, interleaved; "
      "scores: forward+backward of batch_retrieval's [B, B] cosines alone; loss on lists: "
      "forward+backward of the loss on those precomputed [B, B] scores"
    ),
    "| loss | floor | scores | loss on lists | step | (scores + lists) / floor |",
    "| --- | --- | --- | --- | --- | --- |",
  ]
  for name in names:
    loss_fn = loss_function(name)
    on_lists = timer(
      jax.value_and_grad(lambda s, r, w, loss_fn=loss_fn: loss_fn(s, r, where=w)),
      scores,
      relevance,
      where,
    )
    step = timer(jax.value_and_grad(in_batch_loss(name)), e, y)
    times: dict[str, list[float]] = {"floor": [], "scores": [], "lists": [], "step": []}
    for _ in range(repeats):
      for key, once in (
        ("floor", floor),
        ("scores", similarity),
        ("lists", on_lists),
        ("step", step),
      ):
        times[key].append(once())
    t = {key: float(np.median(value)) for key, value in times.items()}
    lines.append(
      f"| {name} | {t['floor']:.2f} s | {t['scores']:.2f} s | {t['lists']:.2f} s | "
      f"{t['step']:.2f} s | {(t['scores'] + t['lists']) / t['floor']:.1f}x |"
    )
    print(lines[-1], flush=True)
  for note in _breakdown_notes(scores, floor, timer, repeats, batch, names):
    lines.append(note)
    print(note, flush=True)
  return lines


def _breakdown_notes(scores, floor, timer, repeats: int, batch: int, names) -> list[str]:
  """The breakdown's notes: one pass over the scores against the floor, and for the blackbox
  losses numpy's host sort of the lists against XLA's CPU sort of them."""
  # One pass over the scores, read and written: what each further elementwise pass of a loss costs
  # when XLA:CPU does not fuse it.
  one_pass = timer(lambda s: s + 1.0, scores)
  passes = [(one_pass(), floor()) for _ in range(repeats)]
  notes = [
    f"one pass over the [B, B] float32 scores, read and written: "
    f"{float(np.median([p for p, _ in passes])):.3f} s, "
    f"{float(np.median([p / f for p, f in passes])):.0%} of the floor"
  ]
  if any(name in ("blackbox AP", "blackbox recall") for name in names):
    # The blackbox losses rank each list on the host (CPU), forward and backward: one such sort,
    # timed on the library's private sort itself (a benchmark of the implementation, as tests are).
    from jaxrank._src import host_kernels
    from jaxrank._src import ranking

    host = np.asarray(scores)
    xla_sort = timer(ranking.xla_descending_ranks, scores)
    sorts, xla_sorts = [], []
    for _ in range(repeats):
      start = time.perf_counter()
      host_kernels.numpy_descending_ranks(host)
      sorts.append(time.perf_counter() - start)
      xla_sorts.append(xla_sort())
    numpy_s, xla_s = float(np.median(sorts)), float(np.median(xla_sorts))
    notes.append(
      f"blackbox: one host sort of the {batch} lists (numpy, both cores), as forward and "
      f"backward each run: {numpy_s:.2f} s; XLA's CPU sort of the same lists "
      f"(`ranking.xla_descending_ranks`): {xla_s:.2f} s, {xla_s / numpy_s:.1f}x numpy's"
    )
  return notes


def cost_table(batch: int, dim: int, names: list[str]) -> list[str]:
  """XLA's own account of each step, as ratios to the floor's, and the largest batch in 80 GB.

  No timing: the compiled step's `cost_analysis()` (flops, bytes accessed) and `memory_analysis()`
  (temporaries) do not depend on the machine's load, and an accelerator's step is bound by the
  bytes it moves, so `bytes / floor` predicts the gap on a GPU where CPU timings cannot. The
  blackbox losses are compiled on XLA's sort (`descending_ranks_branch("xla")`, the GPU/TPU
  path): on CPU they sort through a host callback, which the analysis counts as nothing.
  """
  import jax.numpy as jnp

  from jaxrank._src import ranking

  def floor_loss(e, y):
    del y
    return jnp.sum(e @ e.T)

  floor = step_for(floor_loss, batch, dim)
  base = cost(floor)
  floor_best, floor_bytes = largest_batch(floor_loss, batch, dim)
  lines = [
    (
      f"XLA's cost and memory analysis of the step, B = {batch}, D = {dim}, as ratios to the "
      f"floor's (floor: {base['flops'] / 1e9:.1f} GFLOP, {base['bytes'] / 2**30:.2f} GiB "
      f"accessed, {base['temp'] / 2**20:.0f} MiB temporaries); largest B whose step fits "
      f"{DEVICE_BYTES / 1e9:.0f} GB by the memory analysis (compiled, not run: a B^2 + c B "
      "fitted at B/2 and B, refitted at the predicted B until within 1% under); floor: "
      f"B = {floor_best} ({floor_bytes / 1e9:.1f} GB)"
    ),
    (
      "| loss | flops / floor | bytes / floor | temporaries / floor | largest B in 80 GB | "
      "loops counted once |"
    ),
    "| --- | --- | --- | --- | --- | --- |",
  ]
  for name in names:
    with ranking.descending_ranks_branch("xla"):
      loss = in_batch_loss(name)
      c = cost(step_for(loss, batch, dim))
      best, footprint = largest_batch(loss, batch, dim)
    at_least = ">= " if c["loops"] else ""  # A loop's later iterations are not counted.
    lines.append(
      f"| {name} | {at_least}{c['flops'] / base['flops']:.2f}x | "
      f"{at_least}{c['bytes'] / base['bytes']:.2f}x | {c['temp'] / base['temp']:.2f}x | "
      f"{best} ({footprint / 1e9:.1f} GB) | {int(c['loops'])} |"
    )
    print(lines[-1], flush=True)
  return lines


def list_level_functions() -> list[tuple[str, Callable]]:
  """`(name, function)` of every list-level function of `jaxrank.__all__` (it takes `scores` or
  `distances` first, `labels`, `where` and `reduce_fn`; the proxy losses take `embeddings`) but
  `smooth_rank_ap_loss`, supap_loss's body (covered by it)."""
  import jaxrank

  found = []
  for name in jaxrank.__all__:
    fn = getattr(jaxrank, name)
    params = list(inspect.signature(fn).parameters) if inspect.isfunction(fn) else []
    list_level = {"labels", "where", "reduce_fn"} <= set(params)
    if list_level and params[0] in ("scores", "distances") and name != "smooth_rank_ap_loss":
      found.append((name, fn))
  return found


def compile_table(batch: int) -> list[str]:
  import jax
  import jax.numpy as jnp

  rng = np.random.default_rng(0)
  labels = np.arange(batch)[:, None] // PER_CLASS == np.arange(batch)[None, :] // PER_CLASS
  labels = labels.astype(np.int32)
  mask = ~np.eye(batch, dtype=bool)
  scores = jnp.asarray(rng.uniform(-1, 1, (batch, batch)).astype(np.float32))
  distances = jnp.asarray(rng.integers(0, 65, (batch, batch)).astype(np.int32))
  lines = [
    f"list level, [{batch}, {batch}] scores; labels and mask as arguments or captured",
    "| function | labels argument | labels captured |",
    "| --- | --- | --- |",
  ]

  def row(name, fn, x, differentiable):
    wrap = jax.value_and_grad if differentiable else (lambda g: g)
    argument = compile_seconds(jax.jit(wrap(lambda s, y, m: fn(s, y, where=m))), x, labels, mask)
    captured = compile_seconds(jax.jit(wrap(lambda s: fn(s, labels, where=mask))), x)
    lines.append(
      f"| {name} | {argument[0]:.1f} s ({argument[1]:.1f} s CPU) | "
      f"{captured[0]:.1f} s ({captured[1]:.1f} s CPU) |"
    )
    print(lines[-1], flush=True)

  row("(constants only)", lambda s, y, where: jnp.sum(jnp.where(where, s * y, 0)), scores, False)
  for name, fn in list_level_functions():
    fn = functools.partial(fn, **REQUIRED.get(name, {}))
    row(name, fn, distances if name.startswith("hamming_") else scores, name.endswith("_loss"))
  return lines


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch", type=int, default=4096)
  parser.add_argument("--dim", type=int, default=512)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--losses", nargs="+", choices=list(LOSSES), default=list(LOSSES))
  parser.add_argument("--skip-steps", action="store_true", help="leave out the first table")
  parser.add_argument("--skip-compile-table", action="store_true")
  parser.add_argument("--skip-breakdown", action="store_true")
  parser.add_argument("--skip-cost", action="store_true")
  parser.add_argument(
    "--docs",
    action="store_true",
    help="also write each table to docs/_generated/speed_<table>.json",
  )
  args = parser.parse_args()
  import jax

  print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}")
  tables = {}
  if not args.skip_steps:
    tables["steps"] = loss_table(args.batch, args.dim, args.repeats, args.losses)
  if not args.skip_breakdown:
    tables["breakdown"] = breakdown_table(args.batch, args.dim, args.repeats, args.losses)
  if not args.skip_cost:
    tables["cost"] = cost_table(args.batch, args.dim, args.losses)
  if not args.skip_compile_table:
    tables["compile"] = compile_table(args.batch)
  print("\n\n".join(["", *("\n".join(lines) for lines in tables.values())]))
  if args.docs:
    for name, lines in tables.items():
      print("wrote", docs_data.write_table(f"speed_{name}", **docs_data.markdown_table(lines)))


if __name__ == "__main__":
  main()
