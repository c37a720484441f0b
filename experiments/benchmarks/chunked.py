"""Benchmark: one training step of a small CNN with a listwise loss, chunked against unchunked.

Commands:

    .venv/bin/python -m experiments.benchmarks.chunked       # B = 256; chunks of 64 and 128
    .venv/bin/python -m experiments.benchmarks.chunked --batch-sizes 1024 --chunks 128 --rounds 1
    # The two tables of docs/guide/scale.rst, "Large batches", each by the command it names:
    .venv/bin/python -m experiments.benchmarks.chunked --batch-sizes 256 1024 4096 --chunks 128 \
        --rounds 1 --repeats 1 --tables memory --docs
    .venv/bin/python -m experiments.benchmarks.chunked --tables forms --docs

The step is the value and gradient of `blackbox_ap_loss(*batch_retrieval(cnn(images), labels))`
with respect to the CNN's parameters, on random 32x32x3 images (4 per class), three ways:
`unchunked` (`jax.jit(jax.value_and_grad(...))` over the whole batch), `jitted`
(`jax.jit(chunked_value_and_grad(...))`, the chunk loops a `lax.map` and a `lax.scan`) and `host`
(`host_chunked_value_and_grad`, a Python loop over jitted per-chunk stages). Each variant runs in
its own process; `--rounds` processes per variant are interleaved (unchunked, jitted, host, ...),
and `x unchunked` is the median over rounds of the time ratio to the unchunked process of the same
round, so that a change of load on a shared machine hits every variant alike.

Memory is XLA's own account of the compiled program (`memory_analysis()`): the temporary buffers
it needs at its peak, besides inputs and outputs. For `host`, whose stages run one after another,
it is the largest of its three stages' temporaries (embed one chunk; loss and gradient over all `B`
embeddings; VJP of one chunk). The process's peak RSS (including the runtime, ~0.3 GB) is also
given. Time is the median over `--repeats` steps after one warm-up (compilation excluded).

Two tables (`--tables`, both by default): `memory`, each variant's temporaries and peak RSS and
`memory ratio`, its temporaries over the unchunked step's at the same B; `forms`, each variant's
time and `x unchunked`, with the compile times under it. `--docs` also writes them to
docs/_generated/chunked_<table>.json, which the guide shows.

Where the time goes: `jitted` and `host` do the same work (one forward per chunk, the loss, then a
forward and a VJP per chunk); they differ only in whether the chunk loop is an XLA loop or a
Python loop. So the gap between them is the cost of running the convolution gradients inside an
XLA `while` loop on CPU, not the loop overhead or the rematerialisation (which `host` pays too).
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


def child(batch: int, chunk: int | None, repeats: int, host: bool = False) -> dict:
  """One variant's step compiled, then timed `repeats` times: the row this process reports."""
  import jax
  import jax.numpy as jnp

  embed, loss, params = _model_and_loss()
  rng = np.random.default_rng(0)
  images = jnp.asarray(rng.standard_normal((batch, 32, 32, 3)), jnp.float32)
  labels = jnp.asarray(np.repeat(np.arange(batch // 4), 4))
  compile_step = _compile_host_step if host else _compile_jitted_step
  run, compile_time, temp_bytes = compile_step(embed, loss, params, images, labels, chunk)
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(run())
    times.append(time.perf_counter() - start)
  return {
    "time": float(np.median(times)),
    "times": times,
    "compile": compile_time,
    "temp_mb": temp_bytes / 2**20,
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
  }


def _model_and_loss():
  """`embed(params, images)` of the small CNN, `loss(embeddings, labels)`, and the parameters."""
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

  return embed, loss, params


def _compile_host_step(embed, loss, params, images, labels, chunk):
  """`host_chunked_value_and_grad`: a warm-up call compiles each stage; memory of the largest."""
  import jax
  import jax.numpy as jnp

  import jaxrank

  batch = images.shape[0]
  step = jaxrank.host_chunked_value_and_grad(embed, loss, chunk_size=chunk)
  start = time.perf_counter()
  jax.block_until_ready(step(params, images, labels))
  compile_time = time.perf_counter() - start
  embeddings = jax.jit(embed)(params, images[:chunk])
  stage_temps = [
    jax.jit(embed).lower(params, images[:chunk]).compile(),
    jax.jit(jax.value_and_grad(loss))
    .lower(jnp.zeros((batch, embeddings.shape[1])), labels)
    .compile(),
    jax.jit(lambda p, x, g: jax.vjp(lambda q: embed(q, x), p)[1](g))
    .lower(params, images[:chunk], embeddings)
    .compile(),
  ]
  # The stages run one after another: the peak is the largest stage's temporaries.
  temp_bytes = max(c.memory_analysis().temp_size_in_bytes for c in stage_temps)
  return (lambda: step(params, images, labels)), compile_time, temp_bytes


def _compile_jitted_step(embed, loss, params, images, labels, chunk):
  """The unchunked step (`chunk` None) or `chunked_value_and_grad`, compiled ahead of time."""
  import jax

  import jaxrank

  if chunk is None:
    step = jax.jit(jax.value_and_grad(lambda p, x, y: loss(embed(p, x), y)))
  else:
    step = jax.jit(jaxrank.chunked_value_and_grad(embed, loss, chunk_size=chunk))
  start = time.perf_counter()
  compiled = step.lower(params, images, labels).compile()
  compile_time = time.perf_counter() - start
  temp_bytes = compiled.memory_analysis().temp_size_in_bytes
  jax.block_until_ready(compiled(params, images, labels))
  return (lambda: compiled(params, images, labels)), compile_time, temp_bytes


# The variants (`mode`) and the forms the tables name them by.
FORMS = {
  "unchunked": "unchunked",
  "jitted": "chunked_value_and_grad",
  "host": "host_chunked_value_and_grad",
}
TABLES = ("memory", "forms")


def run_variant(batch: int, mode: str, chunk: int, repeats: int) -> dict:
  """One process of one variant (`child`): its row, as that process reports it."""
  command = [sys.executable, "-m", "experiments.benchmarks.chunked", "--child", str(batch)]
  command += [str(chunk), str(int(mode == "host")), "--repeats", str(repeats)]
  out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
  return json.loads(out.strip().splitlines()[-1])


def measure(batch: int, chunks: list[int], rounds: int, repeats: int) -> list[dict]:
  """Every variant at `batch`, `rounds` processes each, interleaved (so that a change of load
  hits every variant alike): one row per variant, the medians over its processes and `ratio`,
  the median over rounds of its time over the unchunked process's of the same round."""
  variants = [("unchunked", 0)] + [(m, c) for c in chunks for m in ("jitted", "host")]
  results: dict[tuple[str, int], list[dict]] = {v: [] for v in variants}
  for _ in range(rounds):
    for mode, chunk in variants:
      results[(mode, chunk)].append(run_variant(batch, mode, chunk, repeats))
      seconds = results[(mode, chunk)][-1]["time"]
      print(f"B = {batch}, {mode}, chunk {chunk}: {seconds:.3g} s", file=sys.stderr, flush=True)
  base = [r["time"] for r in results[("unchunked", 0)]]
  rows = []
  for (mode, chunk), runs in results.items():
    medians = {key: float(np.median([r[key] for r in runs])) for key in runs[0] if key != "times"}
    ratio = float(np.median([r["time"] / b for r, b in zip(runs, base)]))
    rows.append({"batch": batch, "mode": mode, "chunk": chunk, "ratio": ratio, **medians})
  return rows


def tables(rows: list[dict], rounds: int, repeats: int) -> dict[str, list[str]]:
  """The two tables of the rows (docs/_generated/chunked_<table>.json with `--docs`): `memory`,
  XLA's temporaries and the peak RSS beside the unchunked step's; `forms`, each form's time as a
  ratio to the unchunked step's."""
  step = "one training step, small CNN on 32x32x3 images (4 per class), blackbox_ap_loss"
  medians = f"each variant {rounds} interleaved process(es) of {repeats} timed step(s), medians"
  unchunked = {r["batch"]: r["temp_mb"] for r in rows if r["mode"] == "unchunked"}

  def cells(r: dict) -> str:
    return f"| {r['batch']} | {r['chunk'] or '-'} | {FORMS[r['mode']]} | {r['time']:.3g} s |"

  def label(r: dict) -> str:
    return f"B = {r['batch']}, {FORMS[r['mode']]}" + (f", chunk {r['chunk']}" if r["chunk"] else "")

  memory = [f"{step}: XLA's temporary memory and the process's peak RSS; {medians}"]
  memory += ["| B | chunk | form | time (1 step) | XLA temp memory | peak RSS | memory ratio |"]
  memory += ["| --- | --- | --- | --- | --- | --- | --- |"]
  memory += [
    f"{cells(r)} {r['temp_mb']:.0f} MB | {r['rss_mb']:.0f} MB | "
    f"{r['temp_mb'] / unchunked[r['batch']]:.2f} |"
    for r in rows
  ]
  forms = [f"{step}: the chunked forms against the unchunked step; {medians}"]
  forms += ["| B | chunk | form | time (1 step) | x unchunked | XLA temp memory |"]
  forms += ["| --- | --- | --- | --- | --- | --- |"]
  forms += [f"{cells(r)} {r['ratio']:.2f} | {r['temp_mb']:.0f} MB |" for r in rows]
  forms += [
    "x unchunked: the median over rounds of the time over the unchunked process's of the round",
    "compile: " + "; ".join(f"{label(r)}: {r['compile']:.1f} s" for r in rows),
  ]
  return {"memory": memory, "forms": forms}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256])
  parser.add_argument("--chunks", type=int, nargs="+", default=[64, 128])
  parser.add_argument("--repeats", type=int, default=2, help="timed steps per process")
  parser.add_argument(
    "--rounds",
    type=int,
    default=3,
    help="processes per variant, interleaved; the table gives medians over them",
  )
  parser.add_argument(
    "--tables", nargs="+", choices=TABLES, default=list(TABLES), help="the tables printed"
  )
  docs_data.add_docs_argument(parser, "chunked_<table>")
  parser.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    batch, chunk, host = args.child
    print(json.dumps(child(batch, chunk or None, args.repeats, bool(host))))
    return
  rows = []
  for batch in args.batch_sizes:
    rows += measure(batch, args.chunks, args.rounds, args.repeats)
  printed = {
    f"chunked_{name}": lines
    for name, lines in tables(rows, args.rounds, args.repeats).items()
    if name in args.tables
  }
  print("\n\n".join("\n".join(lines) for lines in printed.values()))
  if args.docs:
    docs_data.write_markdown_tables(printed)


if __name__ == "__main__":
  main()
