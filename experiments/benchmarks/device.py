"""Benchmark: every training step timed on the accelerator JAX finds, beside the floor.

`accelerators.py` compiles for a TPU v5e and an H100 on this machine and reads what the compiler
says; this script runs the same steps on a real accelerator and times them. Command, on a machine
with a GPU (JAX with its CUDA plugin; nothing of jaxrank's needs installing beyond its own
dependencies):

    python -m experiments.benchmarks.device                           # every section
    python -m experiments.benchmarks.device --sections check steps --batch 4096
    python -m experiments.benchmarks.device --json results.json       # also every row as JSON
    .venv/bin/python -m experiments.benchmarks.device --docs-from results.json [pml.json ...]

The training step's command (the `train` section, about 4 minutes on an H100 or H200; the lent
machines have no TensorFlow, which it does not need, nor pytorch-metric-learning, whose wheel is
fetched here and carried: `pip download pytorch-metric-learning==2.9.0 --no-deps -d runs/wheels`,
then `runs/wheels` in the device tool's `carry`):

    pip install --no-deps runs/wheels/*.whl && python -m experiments.benchmarks.device \
        --sections train --json experiments/benchmarks/records/<card>_train.json

What the guide shows was written by (records of the lent H100's runs, each with its commit):

    .venv/bin/python -m experiments.benchmarks.device --docs-from \
        experiments/benchmarks/records/h100_all.json experiments/benchmarks/records/h100_pml.json \
        experiments/benchmarks/records/h100_histograms_check4352.json:histograms \
        experiments/benchmarks/records/h100_blocked_histograms_final.json:histograms \
      --docs-forms \
        scatter=experiments/benchmarks/records/h100_histograms_scatter.json \
        "whole lists"=experiments/benchmarks/records/h100_histograms_dense.json \
        "blocks of 512"=experiments/benchmarks/records/h100_histograms_blocks512.json \
        "blocks of 1,024"=experiments/benchmarks/records/h100_histograms_blocks1024.json \
        "blocks of 2,048"=experiments/benchmarks/records/h100_histograms_blocks2048.json \
        "blocks of 4,096"=experiments/benchmarks/records/h100_histograms_blocks4096.json \
        chosen=experiments/benchmarks/records/h100_histograms_final.json

`--docs-from` writes the guide's tables (docs/_generated/device_*.json) from such JSON records,
here, without JAX: the accelerator is lent to a session for minutes and its files come back as
the run's JSON; each table names the run's command, card and date from the record. The steps'
tables put the v5e's compile-only estimate (docs/_generated/accelerators_v5e_<B>.json, written by
`accelerators.py`) beside the measured time, both as ratios to their floor.

On this CPU it runs too (JAX's default device is then the CPU), which is how its code is tested
(`tests/test_device_benchmark.py`, tiny shapes); its numbers mean something only on an
accelerator. Sections, in the order they run:

* `check`: every loss's value and gradient on the accelerator against the same step on JAX's CPU
  backend in the same process (B = 256, D = 64, float32 products at the highest precision on
  both, so that the comparison is of the two platforms' programs, not of TF32 products): the
  accelerator branches that `jax.lax.platform_dependent` chooses at lowering (sorts and matrix
  forms where the CPU takes host callbacks and loops) run on hardware and give the CPU's values.
* `steps`: `jax.jit(jax.value_and_grad(loss(*batch_retrieval(e, y))))` of every loss of
  `accelerators.LOSSES` (the paper losses, their bounded and counting forms, the baselines) at
  each `--batch`, D = 512, 4 items per class; the median over repeated calls (each until its
  results are ready, after two warm-up calls, at least 5 calls and about `--seconds` of them);
  the ratio to the floor (forward and backward of `sum(tanh(e @ e.T))`, as `accelerators.py`),
  measured in the same run; the compiled program's temporaries; its compile time. Products run at
  JAX's default precision, as users train.
* `blocked`: `jaxrank.blocked_loss` (block 1,024) against the unblocked step where both fit, and
  the blocked step alone at the largest `--blocked-batch`.
* `evaluation`: `evaluate_retrieval` on the SOP-shaped set of `evaluate.py` (60,502 items,
  D = 512; embeddings on the device and in host memory), then 10,000 queries against a
  1,000,000-item gallery, each against XLA's plain product of the same chunks reduced to each
  row's maximum, at each chunk of `evaluate.FLOOR_CHUNKS` (the fastest is the floor).
* `pml`: where `pytorch_metric_learning` imports and torch sees a GPU: its FastAPLoss and
  SmoothAPLoss steps on the GPU beside jaxrank's (`losses.py`'s protocol, CUDA-synchronised
  timing).
* `train`: the training job's own step (`experiments.job.step.make_train_step`) for ResNet-50
  and ViT-S/16 at `--train-image-size` (224), B = `--train-batch` (256), in float32 and
  bfloat16 mixed precision, beside torchvision / timm + pytorch-metric-learning in float32 and
  under `torch.autocast(bfloat16)` on the same card: images/s and the ratio to torch autocast's
  (`train_step.py`). The GPU machines have no TensorFlow and need none for it; carry
  pytorch-metric-learning's wheel for the torch rows (`pip install --no-deps <wheel>` first).

Measured numbers, with the card that gave them: docs/guide/benchmarks.rst, "On a GPU".
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from experiments.benchmarks import accelerators
from experiments.benchmarks import speed
from experiments.benchmarks import train_step

SECTIONS = ("check", "steps", "blocked", "evaluation", "pml", "train")
BLOCK = 1024
# The rows of the blocked section: one of each kind of loss (histogram, smooth rank bounded and
# not, blackbox by counting and by sorts).
BLOCKED_ROWS = ("FastAP", "SupAP", "SupAP (bounded)", "blackbox AP (counting)", "blackbox AP")
# The check's shapes and its tolerances (relative): float32 programs that sum in other orders.
CHECK_BATCH, CHECK_DIM = 256, 64
VALUE_TOLERANCE, GRADIENT_TOLERANCE = 1e-4, 1e-3


def _relative(a, b) -> float:
  x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.linalg.norm(x - y) / max(float(np.linalg.norm(y)), 1e-30))


def check_section(names: list[str], batch: int = CHECK_BATCH) -> list[dict]:
  """Value and gradient of every loss on the default device against JAX's CPU backend."""
  import jax

  accelerator, cpu = jax.devices()[0], jax.devices("cpu")[0]
  e, y = speed.make_batch(batch, CHECK_DIM, seed=1)
  rows = []
  with jax.default_matmul_precision("highest"):
    for name in names:
      step = jax.jit(jax.value_and_grad(speed.in_batch_loss(name, accelerators.LOSSES)))
      results = [
        jax.device_get(step(jax.device_put(e, device), jax.device_put(y, device)))
        for device in (accelerator, cpu)
      ]
      (value, grad), (cpu_value, cpu_grad) = results
      row: dict[str, Any] = {
        "loss": name,
        "batch": batch,
        "value": float(value),
        "cpu value": float(cpu_value),
        "value error": _relative(value, cpu_value),
        "gradient error": _relative(grad, cpu_grad),
      }
      row["ok"] = bool(
        row["value error"] <= VALUE_TOLERANCE and row["gradient error"] <= GRADIENT_TOLERANCE
      )
      rows.append(row)
      print(
        f"check {name}: value {row['value']:.6f} (CPU {row['cpu value']:.6f}), "
        f"errors {row['value error']:.1e} / {row['gradient error']:.1e}"
        f"{'' if row['ok'] else '  MISMATCH'}",
        flush=True,
      )
  return rows


def _compiled_step(loss, e, y):
  """(compiled `jit(value_and_grad(loss))` for `e`, `y`, compile seconds)."""
  import jax

  start = time.perf_counter()
  compiled = jax.jit(jax.value_and_grad(loss)).lower(e, y).compile()
  return compiled, time.perf_counter() - start


def _temporaries(compiled) -> float:
  return float(compiled.memory_analysis().temp_size_in_bytes)


def steps_section(batches: list[int], dim: int, names: list[str], seconds: float) -> list[dict]:
  """Median step time of every loss and of the floor, at each batch."""
  import jax.numpy as jnp

  rows = []
  for batch in batches:
    e, y = (jnp.asarray(a) for a in speed.make_batch(batch, dim))
    floor, floor_compile = _compiled_step(accelerators.floor_loss, e, y)
    floor_time = speed.timed(floor, e, y, seconds=seconds)
    for name in ["floor", *names]:
      if name == "floor":
        compiled, compile_seconds = floor, floor_compile
      else:
        try:
          compiled, compile_seconds = _compiled_step(
            speed.in_batch_loss(name, accelerators.LOSSES), e, y
          )
        except Exception as error:  # pylint: disable=broad-except
          if "RESOURCE_EXHAUSTED" not in str(error):
            raise
          rows.append({"loss": name, "batch": batch, "error": "out of memory"})
          print(f"steps B={batch} {name}: out of memory", flush=True)
          continue
      seconds_per_step = speed.timed(compiled, e, y, seconds=seconds)
      row = {
        "loss": name,
        "batch": batch,
        "dim": dim,
        "time": seconds_per_step,
        "floor time": floor_time,
        "ratio": seconds_per_step / floor_time,
        "temporaries": _temporaries(compiled),
        "compile": compile_seconds,
      }
      rows.append(row)
      print(
        f"steps B={batch} {name}: {row['time'] * 1e3:.3f} ms, {row['ratio']:.2f}x floor, "
        f"{row['temporaries'] / 2**20:.0f} MB temporaries, compiled in "
        f"{row['compile']:.1f} s",
        flush=True,
      )
      del compiled
  return rows


def blocked_section(
  batches: list[int], dim: int, names: list[str], seconds: float, block: int = BLOCK
) -> list[dict]:
  """Blocked against unblocked step time; at the largest batch the blocked step alone."""
  import jax.numpy as jnp

  from experiments.benchmarks import blocked

  rows = []
  for batch in batches:
    e, y = (jnp.asarray(a) for a in speed.make_batch(batch, dim))
    alone = batch == max(batches) and len(batches) > 1
    for name in names:
      whole, in_blocks = blocked.steps(name, block)
      row: dict[str, Any] = {"loss": name, "batch": batch, "block": block}
      for key, loss in (("blocked", in_blocks), ("unblocked", whole)):
        if key == "unblocked" and alone:
          continue
        try:
          compiled, _ = _compiled_step(loss, e, y)
        except Exception as error:  # pylint: disable=broad-except
          if "RESOURCE_EXHAUSTED" not in str(error):
            raise
          row[key] = None
          continue
        row[key] = speed.timed(compiled, e, y, seconds=seconds, least=3)
        row[f"{key} temporaries"] = _temporaries(compiled)
        del compiled
      if row.get("unblocked") and row.get("blocked"):
        row["ratio"] = row["blocked"] / row["unblocked"]
      rows.append(row)
      print(
        f"blocked B={batch} {name}: "
        + ", ".join(
          f"{k} {v * 1e3:.1f} ms" if k in ("blocked", "unblocked") and v else f"{k} {v}"
          for k, v in row.items()
          if k in ("blocked", "unblocked", "ratio")
        ),
        flush=True,
      )
  return rows


def evaluation_section(num: int, repeats: int, gallery: int = 1_000_000, queries: int = 10_000):
  """`evaluate_retrieval` beside XLA's plain product of the same chunks, each row reduced to its
  maximum, at each chunk of `evaluate.FLOOR_CHUNKS` (the fastest is the floor; the embeddings on
  the device for both): the SOP-shaped set of `num` items (leave-one-out) at the default chunk
  with the embeddings on the device (as a training loop has them) and in host memory (a transfer
  more), and at chunks of 1,024; then `queries` queries against a `gallery`-item gallery (classes
  of 2 to 12 items, made on the device) at the default chunk. Each row's `ratio` is to its set's
  fastest product."""
  import jax
  import jax.numpy as jnp

  import jaxrank
  from experiments.benchmarks import evaluate
  from jaxrank._src import evaluation

  product = jax.jit(lambda q, g: jnp.max(q @ g.T, axis=1))

  def floor(q, g, chunk):
    return [product(q[i : i + chunk], g) for i in range(0, q.shape[0], chunk)]

  def run(name, q, q_labels, g=None, g_labels=None):
    out = []
    for c in evaluate.FLOOR_CHUNKS:
      t = speed.timed(floor, q, q if g is None else g, c, least=repeats, most=repeats, seconds=0)
      out.append({"set": name, "side": "xla_product", "input": "device", "chunk": c, "time": t})
      print(f"evaluation {name} xla_product chunk {c}: {t:.4f} s", flush=True)
    # (chunk_size, where the embeddings are): the default chunk, and the CPU's on the SOP set.
    calls = [(None, "device")]
    if g is None:
      calls += [(None, "host"), (1024, "device")]
    for chunk, where in calls:
      args = (q, q_labels) if g is None else (q, q_labels, g, g_labels)
      if where == "host":
        args = tuple(np.asarray(x) for x in args)
      call = lambda args=args, chunk=chunk: jaxrank.evaluate_retrieval(
        *args, ks=evaluate.KS, chunk_size=chunk
      )
      t = speed.timed(call, least=repeats, most=repeats, seconds=0)
      n = q.shape[0] if g is None else g.shape[0]
      used = chunk or evaluation.default_chunk_size(num_items=n)
      out.append({"set": name, "side": "jaxrank", "input": where, "chunk": used, "time": t})
      print(f"evaluation {name} jaxrank ({where}) chunk {used}: {t:.4f} s", flush=True)
    fastest = min(r["time"] for r in out if r["side"] == "xla_product")
    for r in out:
      r["ratio"] = r["time"] / fastest
    return out

  x, labels = evaluate.make_data(num, 512)
  rows = run(f"{num:,} items, leave-one-out", jnp.asarray(x), labels)
  # The large gallery, made on the device: class centres, noisy copies, unit rows.
  rng = np.random.default_rng(1)
  sizes = evaluate.class_sizes(gallery, rng)
  g_labels = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))
  q_labels = rng.integers(0, len(sizes), queries)
  keys = jax.random.split(jax.random.key(0), 3)
  centres = jax.random.normal(keys[0], (len(sizes), 512))

  def embed(key, y):
    e = centres[y] + 2.2 * jax.random.normal(key, (len(y), 512))
    return e / jnp.linalg.norm(e, axis=1, keepdims=True)

  g, q = embed(keys[1], jnp.asarray(g_labels)), embed(keys[2], jnp.asarray(q_labels))
  rows += run(f"{queries:,} queries x {gallery:,} gallery items", q, q_labels, g, g_labels)
  return rows


def pml_section(batches: list[int], seconds: float) -> list[dict]:
  """pytorch-metric-learning's FastAP and SmoothAP steps on the GPU beside jaxrank's."""
  try:
    import torch
    from pytorch_metric_learning import losses as pml_losses
  except ImportError as error:
    print(f"pml: skipped ({error})", flush=True)
    return []
  if not torch.cuda.is_available():
    print("pml: skipped (torch sees no GPU)", flush=True)
    return []
  import functools

  import jax
  import jax.numpy as jnp

  import jaxrank
  from experiments.benchmarks import losses

  rows = []
  cases = {
    "fastap": (
      pml_losses.FastAPLoss(num_bins=10),
      functools.partial(jaxrank.fastap_loss, num_intervals=10),
      False,
    ),
    "smoothap": (
      pml_losses.SmoothAPLoss(0.01),
      functools.partial(jaxrank.smoothap_loss, temperature=0.01),
      True,
    ),
  }
  for name, (pml_loss, loss_fn, include_self) in cases.items():
    for batch in batches:
      if name == "smoothap" and batch > 2048:  # Its [B, B, B] tensors: 34 GB at 2048.
        continue
      embeddings, labels = losses.make_batch(batch)

      def loss(e, y, loss_fn=loss_fn, include_self=include_self):
        scores, relevance, where = jaxrank.batch_retrieval(e, y, include_self=include_self)
        return loss_fn(scores, relevance, where=where)

      step = jax.jit(jax.value_and_grad(loss))
      jax_time = speed.timed(step, jnp.asarray(embeddings), jnp.asarray(labels), seconds=seconds)
      pml_time = _torch_timed(pml_loss, embeddings, labels, seconds)
      torch.cuda.empty_cache()  # The step's tensors, freed when `_torch_timed` returned.
      rows.append(
        {
          "loss": name,
          "batch": batch,
          "jaxrank": jax_time,
          "pml": pml_time,
          "speed-up": pml_time / jax_time,
        }
      )
      print(
        f"pml {name} B={batch}: jaxrank {jax_time * 1e3:.2f} ms, pml {pml_time * 1e3:.2f} ms"
        f" ({pml_time / jax_time:.1f}x)",
        flush=True,
      )
  return rows


def _torch_timed(pml_loss, embeddings, labels, seconds: float) -> float:
  """Median seconds of `pml_loss(e, labels).backward()` on the GPU, CUDA-synchronised, after two
  warm-up calls (`timed`'s counts)."""
  import torch

  e_t, y_t = torch.from_numpy(embeddings).cuda(), torch.from_numpy(labels).cuda()

  def step():
    e = e_t.clone().requires_grad_(True)
    pml_loss(e, y_t).backward()
    torch.cuda.synchronize()

  step()
  step()
  times: list[float] = []
  start = time.perf_counter()
  while len(times) < 5 or (time.perf_counter() - start < seconds and len(times) < 50):
    begin = time.perf_counter()
    step()
    times.append(time.perf_counter() - begin)
  return float(np.median(times))


def _ms(seconds: float) -> str:
  return f"{seconds * 1e3:,.2f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def _size(nbytes: float) -> str:
  return f"{nbytes / 2**20:,.0f} MB" if nbytes < 10 * 2**30 else f"{nbytes / 2**30:,.1f} GB"


def _v5e_estimates(batch: int) -> dict[str, str]:
  """Row name -> the v5e's compile-only `estimate / floor` at `batch`, where the guide has it."""
  from experiments import docs_data

  path = docs_data.DIRECTORY / f"accelerators_v5e_{batch}.json"
  if not path.exists():
    return {}
  data = json.loads(path.read_text())
  column = data["columns"].index("estimate / floor")
  return {row[0]: row[column] for row in data["rows"]}


def _steps_tables(steps: list[dict], device: str) -> dict[str, dict]:
  """The steps section's tables, one per batch, beside the v5e's compile-only estimates."""
  tables = {}
  for batch in sorted({r["batch"] for r in steps}):
    rows = [r for r in steps if r["batch"] == batch]
    estimates = _v5e_estimates(batch)
    floor = next(r for r in rows if r["loss"] == "floor")
    tables[f"device_steps_{batch}"] = {
      "title": (
        f"{device}: forward and backward of every step, B = {batch:,}, "
        f"D = {floor['dim']}, {speed.PER_CLASS} per class; median time; the floor is "
        "forward and backward of sum(tanh(e @ e.T)), measured in the same run"
      ),
      "columns": [
        "step",
        "time",
        "time / floor",
        "temporaries",
        "compile",
        "v5e estimate / floor (compile-only)",
      ],
      "rows": [
        [r["loss"], "out of memory", "-", "-", "-", estimates.get(r["loss"], "-")]
        if "error" in r
        else [
          r["loss"],
          _ms(r["time"]),
          f"{r['ratio']:.2f}x",
          _size(r["temporaries"]),
          f"{r['compile']:.1f} s",
          estimates.get(r["loss"], "-"),
        ]
        for r in rows
      ],
    }
  return tables


def docs_tables(results: dict) -> dict[str, dict]:
  """The guide's tables of one run's record: `{name: {"title", "columns", "rows"}}`."""
  device = results["device"].split(": ", 1)[-1]
  tables = {}
  if results.get("check"):
    tables["device_check"] = {
      "title": (
        f"{device}: every loss's value and gradient against JAX's CPU backend "
        f"(B = {results['check'][0].get('batch', CHECK_BATCH)}, D = {CHECK_DIM}, "
        "products at the highest precision); "
        "relative errors"
      ),
      "columns": ["loss", "value", "CPU value", "value error", "gradient error"],
      "rows": [
        [
          r["loss"],
          f"{r['value']:.6f}",
          f"{r['cpu value']:.6f}",
          f"{r['value error']:.1e}",
          f"{r['gradient error']:.1e}",
        ]
        for r in results["check"]
      ],
    }
  tables.update(_steps_tables(results.get("steps", []), device))
  if results.get("blocked"):
    tables["device_blocked"] = _blocked_table(results["blocked"], device)
  tables.update(_evaluation_and_pml_tables(results, device))
  if results.get("train"):
    tables["device_train"] = _train_table(results["train"], device, results)
  return tables


def _train_table(rows: list[dict], device: str, results: dict) -> dict:
  """The train section's table: the job's step beside torch's, images/s and the ratio."""
  batch, size = results.get("train batch", 256), results.get("train image size", 224)
  return {
    "title": (
      f"{device}: the training job's step (backbone + embedding head D = 512 + in-batch FastAP "
      f"+ AdamW), B = {batch}, {size} x {size} images on the device; median time"
    ),
    "columns": ["backbone", "implementation", "precision", "time", "images/s", "/ torch autocast"],
    "rows": [
      [
        r["model"],
        r["implementation"],
        r["precision"],
        _ms(r["time"]),
        f"{r['images_per_second']:,.0f}",
        "-" if r["vs_torch_autocast"] is None else f"{r['vs_torch_autocast']:.2f}x",
      ]
      for r in rows
    ],
  }


def _blocked_table(blocked: list[dict], device: str) -> dict:
  """The blocked section's table."""
  return {
    "title": (
      f"{device}: `blocked_loss` (block {blocked[0]['block']:,}) "
      "against the unblocked step, D = 512; median time"
    ),
    "columns": [
      "loss",
      "B",
      "unblocked",
      "blocked",
      "blocked / unblocked",
      "unblocked temporaries",
      "blocked temporaries",
    ],
    "rows": [
      [
        r["loss"],
        f"{r['batch']:,}",
        _ms(r["unblocked"]) if r.get("unblocked") else "not run",
        _ms(r["blocked"]) if r.get("blocked") else "out of memory",
        f"{r['ratio']:.2f}x" if "ratio" in r else "-",
        _size(r["unblocked temporaries"]) if "unblocked temporaries" in r else "-",
        _size(r["blocked temporaries"]) if "blocked temporaries" in r else "-",
      ]
      for r in blocked
    ],
  }


def _evaluation_and_pml_tables(results: dict, device: str) -> dict[str, dict]:
  """The evaluation and pytorch-metric-learning sections' tables, where the record has them."""
  tables = {}
  if results.get("evaluation"):
    tables["device_evaluation"] = {
      "title": (
        f"{device}: `evaluate_retrieval` (every metric) against XLA's product of the same "
        "chunks, each row reduced to its maximum; median of 3"
      ),
      "columns": ["set", "side", "embeddings", "chunk", "time", "/ fastest product"],
      "rows": [
        [
          r.get("set", "60,502 items, leave-one-out"),  # Records before the large gallery.
          r["side"],
          r.get("input", "device" if r["side"] == "xla_product" else "host"),
          f"{r['chunk']:,}",
          _ms(r["time"]),
          f"{r['ratio']:.1f}x",
        ]
        for r in results["evaluation"]
      ],
    }
  if results.get("pml"):
    tables["device_pml"] = {
      "title": (
        f"{device}: forward and backward beside pytorch-metric-learning on the same "
        "GPU (FastAPLoss(num_bins=10), SmoothAPLoss(0.01)); median time"
      ),
      "columns": ["loss", "B", "jaxrank", "pytorch-metric-learning", "speed-up"],
      "rows": [
        [r["loss"], f"{r['batch']:,}", _ms(r["jaxrank"]), _ms(r["pml"]), f"{r['speed-up']:.1f}x"]
        for r in results["pml"]
      ],
    }
  return tables


def forms_table(records: dict[str, dict]) -> dict:
  """One table of the steps of several records (`{label: record}`), one row per record and
  batch: each loss's time as a ratio to its run's floor, and the temporaries of each."""
  first = next(iter(records.values()))
  names = [r["loss"] for r in first["steps"] if r["loss"] != "floor"]
  names = list(dict.fromkeys(names))
  rows = []
  for label, results in records.items():
    for batch in sorted({r["batch"] for r in results["steps"]}):
      steps = {r["loss"]: r for r in results["steps"] if r["batch"] == batch}
      rows.append(
        [label, f"{batch:,}"]
        + [f"{steps[n]['ratio']:.2f}x" for n in names]
        + [" / ".join(_size(steps[n]["temporaries"]) for n in names)]
      )
  floor = next(r for r in first["steps"] if r["loss"] == "floor")
  return {
    "title": (
      f"{first['device'].split(': ', 1)[-1]}: each form of the steps, "
      f"D = {floor['dim']}; time / floor (its own run's floor), temporaries"
    ),
    "columns": [
      "form",
      "B",
      *(f"{n} / floor" for n in names),
      "temporaries (" + ", ".join(names) + ")",
    ],
    "rows": rows,
  }


def write_docs(paths: list[str], forms: Sequence[str] = (), directory=None) -> list:
  """Writes the guide's tables of the JSON records at `paths` and `forms`; returns the data files
  written.

  Each of `paths` is `FILE` or `FILE:SUFFIX` (its tables named `device_<section>_SUFFIX`, beside
  another record's). `forms` are `LABEL=FILE` records of the steps section, one table
  (`device_forms_<first LABEL's file stem>`) comparing them row by row.
  """
  from experiments import docs_data

  def write(name, table, results, sources):
    return docs_data.write_table(
      name,
      **table,
      command=results["command"],
      date=results["date"],
      machine_name=f"{results['machine']}; JAX {results['jax']}",
      source=f"measured: written from the run's JSON record ({sources})",
      directory=directory,
    )

  written = []
  for item in paths:
    path, _, suffix = item.partition(":")
    results = json.loads(pathlib.Path(path).read_text())
    for name, table in docs_tables(results).items():
      written.append(
        write(f"{name}_{suffix}" if suffix else name, table, results, pathlib.Path(path).name)
      )
  if forms:
    pairs = [item.split("=", 1) for item in forms]
    records = {label: json.loads(pathlib.Path(path).read_text()) for label, path in pairs}
    first = records[pairs[0][0]]
    first = {
      **first,
      "command": "; ".join(
        f"{label}: {r['command']} (commit {r.get('commit', '?')})" for label, r in records.items()
      ),
    }
    written.append(
      write(
        "device_forms",
        forms_table(records),
        first,
        ", ".join(pathlib.Path(p).name for _, p in pairs),
      )
    )
  return written


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
  parser.add_argument("--batch", type=int, nargs="+", default=[4096, 16384])
  parser.add_argument("--dim", type=int, default=512)
  parser.add_argument(
    "--losses", nargs="+", choices=list(accelerators.LOSSES), default=list(accelerators.LOSSES)
  )
  parser.add_argument("--blocked-batch", type=int, nargs="+", default=[16384, 65536])
  parser.add_argument(
    "--blocked-losses", nargs="+", choices=list(accelerators.LOSSES), default=list(BLOCKED_ROWS)
  )
  parser.add_argument("--check-batch", type=int, default=CHECK_BATCH)
  parser.add_argument("--block", type=int, default=BLOCK, help="the blocked section's block")
  parser.add_argument("--evaluation-items", type=int, default=60_502)
  parser.add_argument("--evaluation-gallery", type=int, default=1_000_000)
  parser.add_argument("--evaluation-queries", type=int, default=10_000)
  parser.add_argument("--pml-batch", type=int, nargs="+", default=[1024, 4096, 16384])
  parser.add_argument(
    "--train-models", nargs="+", choices=train_step.CHOICES, default=list(train_step.MODELS)
  )
  parser.add_argument("--train-batch", type=int, default=accelerators.TRAIN_BATCH)
  parser.add_argument("--train-image-size", type=int, default=accelerators.TRAIN_IMAGE_SIZE)
  parser.add_argument(
    "--seconds",
    type=float,
    default=1.0,
    help="about how long each row's timed calls take (at least 5 calls)",
  )
  parser.add_argument(
    "--force",
    choices=["cpu", "accelerator"],
    help="run every section inside `platforms.forced_platform` (e.g. the TPU's "
    "forms on a GPU, to compare them with the GPU's own)",
  )
  parser.add_argument("--json", metavar="FILE", help="write every row here after each section")
  parser.add_argument(
    "--docs-from",
    nargs="+",
    metavar="FILE[:SUFFIX]",
    default=[],
    help="write the guide's tables from these JSON records and stop",
  )
  parser.add_argument(
    "--docs-forms",
    nargs="+",
    metavar="LABEL=FILE",
    default=[],
    help="with --docs-from: one table comparing these records' steps",
  )
  return parser


def main(argv=None) -> None:
  args = _parser().parse_args(argv)
  if args.docs_from or args.docs_forms:
    for path in write_docs(args.docs_from, args.docs_forms):
      print(path)
    return

  import jax

  device = jax.devices()[0]
  from experiments import docs_data

  results: dict[str, Any] = {
    "device": f"{device.platform}: {device.device_kind}",
    "jax": jax.__version__,
    "date": time.strftime("%Y-%m-%d"),
    "command": shlex.join(
      ["python", "-m", "experiments.benchmarks.device", *(sys.argv[1:] if argv is None else argv)]
    ),
    "machine": f"{device.device_kind}, host {docs_data.machine()}",
  }
  print(f"device {results['device']}, jax {jax.__version__}", flush=True)
  if args.force:
    from jaxrank._src import platforms

    results["forced platform"] = args.force
    with platforms.forced_platform(args.force):
      run_sections(args, results)
  else:
    run_sections(args, results)
  if any(not row["ok"] for row in results.get("check", [])):
    print("check: some accelerator results differ from the CPU's (above)", file=sys.stderr)
    sys.exit(1)


def run_sections(args, results: dict) -> None:
  """Runs `args.sections` in order, adding each one's rows to `results` (and `args.json`)."""
  for section in args.sections:
    if section == "check":
      results[section] = check_section(args.losses, args.check_batch)
    elif section == "steps":
      results[section] = steps_section(args.batch, args.dim, args.losses, args.seconds)
    elif section == "blocked":
      results[section] = blocked_section(
        args.blocked_batch, args.dim, args.blocked_losses, args.seconds, args.block
      )
    elif section == "evaluation":
      results[section] = evaluation_section(
        args.evaluation_items, 3, args.evaluation_gallery, args.evaluation_queries
      )
    elif section == "pml":
      results[section] = pml_section(args.pml_batch, args.seconds)
    elif section == "train":
      results["train batch"], results["train image size"] = args.train_batch, args.train_image_size
      results[section] = train_step.train_section(
        args.train_models, args.train_batch, args.train_image_size, args.seconds
      )
    if args.json:
      with open(args.json, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
  main()
