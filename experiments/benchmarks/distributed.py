"""Benchmark: the sharded loss and evaluation as 1, 2 and 4 processes of one `jax.distributed` job.

Command:

    .venv/bin/python -m experiments.benchmarks.distributed     # B = 4096, D = 512; 60,502 evaluated
    .venv/bin/python -m experiments.benchmarks.distributed --batch 512 --num-eval 4000 --repeats 1
    .venv/bin/python -m experiments.benchmarks.distributed --measurements fastap --docs

Each measurement runs as N processes on localhost (N = 1, 2, 4), one simulated CPU device each,
joined by `jax.distributed` with gloo collectives (a free port per job; a job that outlives
`--timeout` is killed whole), so that a process's memory is its own. The few lines that start
them are this script's own, like `tests/multiprocess/launcher.py`: a script under `experiments/`
does not import from `tests/`.

* `smoothap`, `fastap`: forward and backward (value and gradient w.r.t. the embeddings) of
  `jaxrank.sharded_loss` on a `[B, D]` batch of 4 embeddings per class over a mesh of all N
  devices; each process generates the batch from the seed and feeds only its rows
  (`jax.make_array_from_process_local_data`). Each device holds `[B / N, B]` lists.
* `evaluate`: `jaxrank.evaluate_retrieval` leave-one-out on SOP-sized synthetic data (60,502
  embeddings in classes of 2 to 12, as in `experiments/benchmarks/evaluate.py`, but drawn so that
  each process makes only its own rows): on 1 process the plain call, on N each process passes its
  share of the rows (uneven when N does not divide the count) with `mesh=` over all devices, which
  splits the gallery over the devices. Every metric it returns is printed.

One table per measurement (`distributed_<measurement>_<B>`, `distributed_evaluate_<N>`; `--docs`
also writes each to docs/_generated/<table>.json, which docs/guide/scale.rst shows), a row per
process count. Columns, per process (the largest over the job's processes): time, for the losses
the median over `--repeats` steps after one warm-up (compilation apart), for `evaluate` the
median over `--eval-repeats` whole calls (the first includes compilation); for the losses, XLA's
account of the compiled step (`memory_analysis()`: temporaries plus arguments plus outputs, exact
and free of allocator noise); the RSS once the data is made, and the peak RSS of the whole process
(`getrusage`, the runtime's ~0.2 GB and the data included). The last column is the loss (or every
metric of `evaluate_retrieval`) as each process computed it: one value when the processes agree,
and it must be the same for every N (up to the last float32 digits for the losses, whose mean is a
sum over devices in another order).

On one machine the processes share its cores, so time cannot fall with N; what must fall is the
memory of each process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from experiments import docs_data
from experiments.benchmarks import evaluate

MEASUREMENTS = ("smoothap", "fastap", "evaluate")
_MARK = "BENCH_DISTRIBUTED_RESULT "


def loss_batch(batch: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """`[B, D]` float32 embeddings, 4 per class (noisy copies of class centres), and labels `[B]`."""
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(batch // 4), 4)[rng.permutation(batch)]
  centres = rng.standard_normal((batch // 4, dim), dtype=np.float32)
  x = centres[labels] + 3.0 * rng.standard_normal((batch, dim), dtype=np.float32)
  return x, labels


def peak_rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------------------------------------
# One process of a job.


def worker(args: argparse.Namespace) -> dict:
  """Joins the job, runs one measurement and returns this process's numbers."""
  import jax  # pylint: disable=g-import-not-at-top

  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(
    os.environ["BENCH_COORDINATOR"],
    num_processes=int(os.environ["BENCH_NUM_PROCESSES"]),
    process_id=int(os.environ["BENCH_PROCESS_ID"]),
  )
  if args.worker == "evaluate":
    return evaluate_worker(args)
  return loss_worker(args)


def loss_worker(args: argparse.Namespace) -> dict:
  import functools  # pylint: disable=g-import-not-at-top

  import jax  # pylint: disable=g-import-not-at-top
  from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top

  import jaxrank  # pylint: disable=g-import-not-at-top

  loss_fns: dict[str, Callable[..., Any]] = {
    "smoothap": functools.partial(jaxrank.smoothap_loss, temperature=0.01),
    "fastap": jaxrank.fastap_loss,
  }
  loss_fn = loss_fns[args.worker]
  mesh = jax.make_mesh((jax.device_count(),), ("batch",))  # All devices of all processes.
  sharding = jax.NamedSharding(mesh, P("batch"))
  x, labels = loss_batch(args.batch, args.dim)
  index = sharding.addressable_devices_indices_map((args.batch,))
  # The stub allows None for a device without a shard; every addressable device has one here.
  rows = np.concatenate([np.arange(args.batch)[s[0]] for s in index.values()])  # type: ignore[index]
  embeddings = jax.make_array_from_process_local_data(sharding, x[rows], x.shape)
  global_labels = jax.make_array_from_process_local_data(sharding, labels[rows], labels.shape)
  del x, labels
  setup_mb = peak_rss_mb()

  step = jax.jit(jax.value_and_grad(jaxrank.sharded_loss(loss_fn, mesh, "batch")))
  start = time.perf_counter()
  compiled = step.lower(embeddings, global_labels).compile()
  compile_s = time.perf_counter() - start
  memory = compiled.memory_analysis()
  assert memory is not None  # None only on a backend without a memory analysis.
  xla_mb = (
    memory.temp_size_in_bytes + memory.argument_size_in_bytes + memory.output_size_in_bytes
  ) / 2**20
  value, grad = jax.block_until_ready(compiled(embeddings, global_labels))  # Warm-up.
  times = []
  for _ in range(args.repeats):
    start = time.perf_counter()
    value, grad = jax.block_until_ready(compiled(embeddings, global_labels))
    times.append(time.perf_counter() - start)
  local_norm = sum(float(np.sum(np.square(np.asarray(s.data)))) for s in grad.addressable_shards)
  return {
    "times": times,
    "compile_s": compile_s,
    "xla_mb": xla_mb,
    "setup_mb": setup_mb,
    "peak_mb": peak_rss_mb(),
    "value": f"{float(value):.7f}",
    "grad_sq_norm_local": local_norm,
  }


def eval_rows(num: int, dim: int, lo: int, hi: int, seed: int = 0) -> tuple[np.ndarray, ...]:
  """Rows `lo:hi` of an SOP-like test set of `num` items (classes of 2 to 12, unit norm).

  The labels (4 bytes an item) and the class centres are made whole in every process; the
  embeddings only for the rows asked, from noise drawn per block of 4096 rows, so that a process
  never holds the whole `[num, dim]` set and the rows are the same however the set is split.
  """
  rng = np.random.default_rng(seed)
  sizes = evaluate.class_sizes(num, rng)
  labels = np.repeat(np.arange(len(sizes)), sizes)[rng.permutation(num)]
  centres = rng.standard_normal((len(sizes), dim), dtype=np.float32)
  block = 4096
  parts = []
  for b in range(lo // block, -(-hi // block)):
    noise = np.random.default_rng((seed, b)).standard_normal((block, dim), dtype=np.float32)
    start, stop = max(lo, b * block), min(hi, (b + 1) * block)
    parts.append(noise[start - b * block : stop - b * block])
  x = centres[labels[lo:hi]] + 2.2 * np.concatenate(parts)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return x, labels[lo:hi]


def evaluate_worker(args: argparse.Namespace) -> dict:
  """1 process: `evaluate_retrieval` as today; N: each process passes its rows, with `mesh=`."""
  import jax  # pylint: disable=g-import-not-at-top

  import jaxrank  # pylint: disable=g-import-not-at-top

  n, me = jax.process_count(), jax.process_index()
  bounds = np.linspace(0, args.num_eval, n + 1).astype(int)  # Uneven shares when N does not divide.
  x, labels = eval_rows(args.num_eval, args.dim, bounds[me], bounds[me + 1])
  kwargs: dict[str, Any] = {}
  if n != 1:
    kwargs["mesh"] = jax.make_mesh((jax.device_count(),), ("batch",))
  setup_mb = peak_rss_mb()
  times: list[float] = []
  result: dict[str, Any] = {}
  for _ in range(args.eval_repeats):
    start = time.perf_counter()
    result = jaxrank.evaluate_retrieval(x, labels, **kwargs)
    times.append(time.perf_counter() - start)
  return {
    "times": times,
    "compile_s": None,
    "xla_mb": None,
    "setup_mb": setup_mb,
    "peak_mb": peak_rss_mb(),
    "value": ", ".join(f"{k} {v:.6f}" for k, v in result.items()),
  }


# ------------------------------------------------------------------------------------------------
# The parent: one job per (measurement, process count).


def free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def run_job(argv: list[str], num_processes: int, timeout: float) -> list[dict]:
  """Runs `python -m experiments.benchmarks.distributed *argv` as one job; each process's result."""
  env = dict(os.environ)
  env.update(
    XLA_FLAGS="--xla_force_host_platform_device_count=1",
    TF_CPP_MIN_LOG_LEVEL="2",
    BENCH_COORDINATOR=f"127.0.0.1:{free_port()}",
    BENCH_NUM_PROCESSES=str(num_processes),
  )
  # Closed below, once the children have exited and their output is read.
  logs = [tempfile.TemporaryFile(mode="w+") for _ in range(num_processes)]  # noqa: SIM115
  children = [
    subprocess.Popen(
      [sys.executable, "-m", "experiments.benchmarks.distributed", *argv],
      env={**env, "BENCH_PROCESS_ID": str(i)},
      stdout=log,
      stderr=subprocess.STDOUT,
      start_new_session=True,
    )
    for i, log in enumerate(logs)
  ]
  deadline = time.monotonic() + timeout
  failed = None
  try:
    while any(p.poll() is None for p in children):
      if any(p.poll() not in (None, 0) for p in children):
        failed = "a process failed"
        break
      if time.monotonic() > deadline:
        failed = f"the job did not finish in {timeout:.0f} s"
        break
      time.sleep(0.2)
  finally:
    for p in children:
      if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
      p.wait()
  outputs = []
  for log in logs:
    log.seek(0)
    outputs.append(log.read())
    log.close()
  if failed or any(p.returncode for p in children):
    shown = "\n".join(f"--- process {i} ---\n{out[-3000:]}" for i, out in enumerate(outputs))
    raise RuntimeError(f"{' '.join(argv)} on {num_processes} processes: {failed}\n{shown}")
  return [
    json.loads(line[len(_MARK) :])
    for out in outputs
    for line in out.splitlines()
    if line.startswith(_MARK)
  ]


def summary(what: str, n: int, results: list[dict]) -> dict:
  values = sorted({r["value"] for r in results})
  xla = [r["xla_mb"] for r in results if r["xla_mb"] is not None]
  compile_s = [r["compile_s"] for r in results if r["compile_s"] is not None]
  return {
    "what": what,
    "processes": n,
    "time_s": max(float(np.median(r["times"])) for r in results),
    "compile_s": max(compile_s) if compile_s else None,
    "xla_mb": max(xla) if xla else None,
    "setup_mb": max(r["setup_mb"] for r in results),
    "peak_mb": max(r["peak_mb"] for r in results),
    "value": " / ".join(values),  # One value when the processes agree.
  }


def _table_name(what: str, args: argparse.Namespace) -> str:
  """`distributed_<measurement>_<B>` for a loss, `distributed_evaluate_<N>` for the evaluation."""
  return f"distributed_{what}_{args.num_eval if what == 'evaluate' else args.batch}"


def _title(what: str, args: argparse.Namespace) -> str:
  if what == "evaluate":
    return (
      f"evaluate_retrieval, leave-one-out on {args.num_eval:,} x {args.dim} SOP-shaped "
      f"embeddings, each process passing its rows; median of {args.eval_repeats} calls (the "
      "first includes compilation); one CPU device per process, per-process figures the largest "
      "over the processes"
    )
  return (
    f"{what}: forward and backward of jaxrank.sharded_loss, B = {args.batch}, D = {args.dim}; "
    f"median of {args.repeats} steps; one CPU device per process, per-process figures the "
    "largest over the processes"
  )


def tables(rows: list[dict], args: argparse.Namespace) -> dict[str, list[str]]:
  """One Markdown table per measurement, a row per process count (`_table_name`: the data file's
  name with `--docs`); the value column holds every value the processes computed."""
  found: dict[str, list[str]] = {}
  for r in rows:
    name = _table_name(r["what"], args)
    evaluation = r["what"] == "evaluate"
    if name not in found:
      found[name] = [
        _title(r["what"], args),
        "| processes | time |"
        + ("" if evaluation else " compile | XLA step memory per process |")
        + " RSS with the data | peak RSS per process | "
        + ("metrics |" if evaluation else "loss |"),
        "|" + " --- |" * (5 if evaluation else 7),
      ]
    step = "" if evaluation else f" {r['compile_s']:.1f} s | {r['xla_mb']:.0f} MB |"
    found[name].append(
      f"| {r['processes']} | {r['time_s']:.3g} s |{step} {r['setup_mb']:.0f} MB "
      f"| {r['peak_mb']:.0f} MB | {r['value']} |"
    )
  return found


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch", type=int, default=4096)
  parser.add_argument("--dim", type=int, default=512)
  parser.add_argument("--num-eval", type=int, default=60502)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--eval-repeats", type=int, default=1)
  parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
  parser.add_argument("--measurements", nargs="+", choices=MEASUREMENTS, default=list(MEASUREMENTS))
  parser.add_argument("--timeout", type=float, default=600.0, help="seconds per job")
  parser.add_argument("--json", help="also write the rows to this file")
  docs_data.add_docs_argument(parser, "distributed_<measurement>_<B or N>")
  parser.add_argument("--worker", choices=MEASUREMENTS, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    print(_MARK + json.dumps(worker(args)), flush=True)
    return

  common = ["--batch", str(args.batch), "--dim", str(args.dim), "--num-eval", str(args.num_eval)]
  common += ["--repeats", str(args.repeats), "--eval-repeats", str(args.eval_repeats)]
  rows = []
  for what in args.measurements:
    for n in args.processes:
      if args.batch % n:
        raise SystemExit(f"--batch {args.batch} is not a multiple of {n} processes.")
      start = time.perf_counter()
      results = run_job([*common, "--worker", what], n, args.timeout)
      rows.append(summary(what, n, results))
      print(f"{what} on {n} processes: {time.perf_counter() - start:.0f} s", file=sys.stderr)
  printed = tables(rows, args)
  print("\n\n".join("\n".join(lines) for lines in printed.values()))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(rows, f, indent=1)
  if args.docs:
    docs_data.write_markdown_tables(printed)


if __name__ == "__main__":
  main()
