"""Benchmark: the training job on whole-data-set batches, its first steps, and its loss alone.

Command (about 10 minutes on 2 cores):

    .venv/bin/python -m experiments.benchmarks.whole_batch --docs

Runs the job of `experiments/job/configs/glyphs_whole.py` (FastAP on batches of 5,876 of the glyph
training set's 5,879 images: the network in chunks, the loss in blocks of queries) for `--steps`
steps, evaluated once at the last, as its own process:

    python -m experiments.job.main --config experiments/job/configs/glyphs_whole.py \\
        --workdir <a temporary directory> --set num_steps=3 --set eval_every=3 --set log_every=1

and reports each step's time (the batch over the job's own `images_per_second` of that step in
`metrics.jsonl`; the first includes the compilation), the whole run's wall time (the data,
compilation and evaluation included), the job process's peak RSS (`getrusage(RUSAGE_CHILDREN)`),
and its loss and R@1 at the last step. Then, in this process, the loss alone: FastAP's value and
gradient over `[B, 128]` random unit embeddings of the config's batch, blocked as the config
blocks it and unblocked: the median time of `--repeats` and the compiled step's temporaries
(`memory_analysis()`). `--docs` writes the table to docs/_generated/glyphs_whole_steps.json, which
docs/guide/scale.rst, "Whole-data-set batches", shows.
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

from experiments import docs_data

CONFIG = "experiments/job/configs/glyphs_whole.py"


def job_command(workdir: str, steps: int) -> list[str]:
  """The job's command line for `steps` steps, evaluated once at the last."""
  return [
    sys.executable,
    "-m",
    "experiments.job.main",
    "--config",
    CONFIG,
    "--workdir",
    workdir,
    "--set",
    f"num_steps={steps}",
    "--set",
    f"eval_every={steps}",
    "--set",
    "log_every=1",
  ]


def run_job(workdir: str, steps: int) -> tuple[float, float]:
  """Runs the job; returns its wall time in seconds and its peak RSS in bytes."""
  before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
  start = time.perf_counter()
  subprocess.run(job_command(workdir, steps), check=True)
  seconds = time.perf_counter() - start
  peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
  if peak <= before:
    # The peak of all children so far: an earlier, larger child would hide this one's.
    raise RuntimeError("an earlier child process's peak RSS hides the job's")
  return seconds, peak * 1024.0  # ru_maxrss is in KiB on Linux.


def job_rows(records: list[dict], batch: int) -> tuple[list[list[str]], dict]:
  """The steps' rows `[step, time, images/s]` from the job's `metrics.jsonl` records, and the
  last evaluation's record."""
  steps = [r for r in records if "images_per_second" in r]
  rows = []
  for r in steps:
    label = f"{r['step']} (with compilation)" if r["step"] == 1 else str(r["step"])
    rows.append([label, f"{batch / r['images_per_second']:.0f} s", f"{r['images_per_second']:.0f}"])
  evaluations = [r for r in records if "recall@1" in r]
  if not steps or not evaluations:
    raise ValueError("the job's metrics.jsonl holds no step or no evaluation")
  return rows, {**evaluations[-1], "loss": steps[-1]["loss"], "first_loss": steps[0]["loss"]}


def load_config():
  """The glyphs_whole config, as the job reads it."""
  from experiments.job import main as job_main

  return job_main.prepare(CONFIG, [])[0]


def loss_alone(batch: int, dim: int, block: int, repeats: int) -> dict[str, tuple[float, float]]:
  """FastAP (the config's) value and gradient, blocked and unblocked: `(median seconds,
  temporaries in bytes)` of each."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  import jaxrank

  loss_fn = functools.partial(jaxrank.fastap_loss, **load_config().loss_kwargs)
  rng = np.random.default_rng(0)
  unit = rng.standard_normal((batch, dim)).astype(np.float32)
  e = jnp.asarray(unit / np.linalg.norm(unit, axis=1, keepdims=True))
  y = jnp.asarray(rng.integers(0, batch // 16, size=batch))

  def unblocked(e, y):
    scores, relevance, where = jaxrank.batch_retrieval(e, y)
    return loss_fn(scores, relevance, where=where)

  blocked = jaxrank.blocked_loss(loss_fn, block_size=block)
  out = {}
  for name, fn in (("unblocked", unblocked), (f"blocks of {block}", blocked)):
    step = jax.jit(jax.value_and_grad(fn)).lower(e, y).compile()
    jax.block_until_ready(step(e, y))
    times = []
    for _ in range(repeats):
      start = time.perf_counter()
      jax.block_until_ready(step(e, y))
      times.append(time.perf_counter() - start)
    memory = step.memory_analysis()
    assert memory is not None  # The CPU's compiler gives it.
    out[name] = (float(np.median(times)), float(memory.temp_size_in_bytes))
  return out


def table(rows, last: dict, seconds: float, peak: float, alone: dict, batch: int) -> list[str]:
  """The Markdown lines of the table and its notes."""
  lines = [
    f"FastAP on batches of {batch:,} glyph images ({CONFIG}); the first {len(rows)} steps",
    "| step | time | images/s |",
    "| --- | --- | --- |",
    *(f"| {' | '.join(row)} |" for row in rows),
    f"{len(rows)} steps, {seconds:.0f} s in all with the data, compilation and the evaluation; "
    f"peak RSS of the job's process {peak / 1e9:.2f} GB.",
    "The loss alone, value and gradient over random [B, 128] embeddings: "
    + "; ".join(
      f"{name} {t:.2f} s and {temps / 2**20:,.0f} MB of temporaries"
      for name, (t, temps) in alone.items()
    )
    + ".",
    f"The loss went from {last['first_loss']:.4f} to {last['loss']:.4f}; "
    f"R@1 at step {last['step']}: {last['recall@1']:.3f}.",
  ]
  return lines


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--repeats", type=int, default=3, help="timings of the loss alone")
  docs_data.add_docs_argument(parser, "glyphs_whole_steps")
  args = parser.parse_args(argv)
  config = load_config()
  with tempfile.TemporaryDirectory() as workdir:
    seconds, peak = run_job(workdir, args.steps)
    records = [json.loads(line) for line in (pathlib.Path(workdir) / "metrics.jsonl").open()]
  rows, last = job_rows(records, config.batch_size)
  alone = loss_alone(config.batch_size, config.embedding_dim, config.loss_block_size, args.repeats)
  lines = table(rows, last, seconds, peak, alone, config.batch_size)
  print("\n".join(lines))
  if args.docs:
    docs_data.write_markdown_tables({"glyphs_whole_steps": lines})
  return 0


if __name__ == "__main__":
  sys.exit(main())
