"""Benchmark: every training step compiled for a TPU v5e and an H100, on this machine, no hardware.

Command (its own virtual environment, `.venv-accel`, with the `accelerators` extra: libtpu and the
CUDA plugin at the installed JAX's version; `make .venv-accel` makes it):

    .venv-accel/bin/python -m experiments.benchmarks.accelerators            # B = 4096, 16,384
    .venv-accel/bin/python -m experiments.benchmarks.accelerators --batch 1024 --skip-largest
    .venv-accel/bin/python -m experiments.benchmarks.accelerators --targets v5e --losses FastAP

`--docs` also writes each table it made to docs/_generated/accelerators_<table>.json (`v5e_4096`,
`h100_16384`, `sharded`, `evaluation`, `train`, ...), which docs/guide/benchmarks.rst and
training.rst show; `--skip-steps`, `--skip-sharded`, `--skip-evaluation` and `--skip-train` leave
tables out, so that one command rewrites one table (the training steps' alone, about 20 minutes
on 2 cores: `--skip-steps --skip-sharded --skip-evaluation --docs`).

XLA compiles for accelerators it does not have: libtpu gives compile-only TPU devices of a
topology (`jax.experimental.topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2")`,
four v5e chips), and the CUDA plugin compiles for a GPU described by a `GpuTargetConfigProto`
(`h100.txtpb` beside this file, written from the H100 SXM's public figures). Each step is lowered
on `ShapeDtypeStruct`s placed on one of those devices and compiled with the accelerator's own
compiler; nothing runs. What the compiled program says:

* `estimate`: the TPU compiler's `optimal_seconds`, its own roofline estimate of the step's time
  from the flops and bytes it will execute. It is not a timing: it leaves out what the roofline
  does not see (latencies, a serial scatter's cost beyond its bytes), but it is the compiler's
  figure on the compiler's program, where CPU timings of XLA:CPU's program are not. The CUDA
  compiler gives no cost analysis: the H100 table has memory only.
* `flops`, `bytes`: the TPU's cost analysis (bytes accessed, which bound a memory-bound step).
* `temporaries`: `memory_analysis().temp_size_in_bytes`, the scratch the step needs beyond its
  arguments and outputs.
* `largest B`: the largest batch whose step fits the chip's memory (16 GB for a v5e, 80 GB for an
  H100: arguments, outputs and temporaries by the memory analysis; a program the compiler refuses
  as too large counts as not fitting), found by compiling at a few batches
  (`speed.largest_fitting`).
* `callbacks`: host callbacks in the compiled program. There must be none: jaxrank chooses its
  accelerator path at lowering (`jax.lax.platform_dependent`).

Rows: the floor (forward and backward of `sum(tanh(e @ e.T))`, what every in-batch step pays:
the `[B, B]` product, one elementwise pass, and the two products of its gradient), every loss's
step as trained (`f(e, y) = loss(*batch_retrieval(e, y))`, `jax.value_and_grad`, 4 items per
class, as `speed.py`; the blackbox and smooth-rank losses also with the bound `max_relevant=3`
that the training job passes, rows "(counting)" and "(bounded)"; without it they choose their form
on the device, so their default rows hold every branch and rows "(branch taken)" compile the one
that runs at 4 per class), the baselines, the sharded step on
the v5e's 4 chips (`jaxrank.sharded_loss` over a mesh of the 4 devices; per-chip temporaries against
the one-chip step's), and one evaluation chunk (`evaluate_retrieval`'s per-chunk program: 4,096
queries against a 60,000-item gallery, 11 relevant items per query, SOP's shape). Ratios are to the
floor at the same batch. A last table compiles the training job's own step
(`experiments.job.step.make_train_step`: backbone, embedding head, in-batch FastAP, AdamW) for
ResNet-50 and ViT-S/16 at B = 256 and 224 x 224, in float32 and in mixed precision
(`half_precision`), with the state donated as the job runs it and without (the memory both
ways). Measured tables: docs/guide/benchmarks.rst, "Accelerators"; the training steps' in
docs/guide/training.rst.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import pathlib
import re
import sys
import time

import numpy as np

from experiments import docs_data
from experiments.benchmarks import speed

H100_CONFIG = pathlib.Path(__file__).with_name("h100.txtpb")
# Memory of one chip: a TPU v5e has 16 GiB of HBM; an H100 SXM 80 GB.
BUDGETS = {"v5e": 16 * 2**30, "h100": 80 * 10**9}
# The baselines beside the paper losses of `speed.LOSSES`.
BASELINES = {
  "contrastive": "contrastive_loss",
  "multi-similarity": "multi_similarity_loss",
  "triplet (batch hard)": "triplet_loss",
}
# Without `max_relevant`, the smooth-rank and blackbox losses choose their form on the device
# (`jaxrank._src.bounds`): their default rows hold every branch, and the compiler's estimate
# counts them all. These rows compile the branch taken with `PER_CLASS - 1` relevant items per
# list: the bounded form with the smallest capacity that holds them, `TAKEN_BOUND` slots.
BRANCH_TAKEN = {
  "SmoothAP (branch taken)": "SmoothAP",
  "blackbox AP (branch taken)": "blackbox AP",
}
TAKEN_BOUND = 4
LOSSES = {
  **speed.LOSSES,
  **BASELINES,
  **{name: speed.LOSSES[row] for name, row in BRANCH_TAKEN.items()},
}
# A host callback in optimized HLO: a custom call to one of JAX's Python callback targets.
CALLBACK = re.compile(r'custom_call_target="[^"]*callback[^"]*"')
# The largest batch is found within 5% under the budget: a v5e compilation at B ~ 20,000 takes a
# minute or more.
LARGEST_TOLERANCE = 0.05
# The evaluation chunk: queries per chunk (the accelerators' default), gallery items, relevant
# slots per query (SOP: 2-12).
EVAL_CHUNK, EVAL_GALLERY, EVAL_RELEVANT = 4096, 60_000, 11


def set_environment() -> None:
  """The variables that make libtpu give compile-only v5e devices and the CUDA plugin load
  without a GPU; set before JAX starts (each only where the environment does not set it).
  `JAX_PLATFORMS=cpu` keeps JAX's default backend the CPU (libtpu would otherwise look for a TPU at
  start and log that it found none)."""
  os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
  os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
  # libtpu takes a lock file (/tmp/libtpu_lockfile) so that one process owns a real TPU; with
  # compile-only devices several processes (tests, benchmarks) may load it at once.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  # The TPU compiler may prefetch a step's inputs into on-chip memory in slices, through a custom
  # call (ConcatBitcast) that its cost analysis cannot count: the estimate then comes out
  # negative for reasons that are not the step's. Without the sliced prefetch every program gets
  # an estimate, the floor's as the losses'.
  os.environ.setdefault("LIBTPU_INIT_ARGS", "--xla_tpu_sliced_prefetch_max_slices=0")
  os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@functools.cache
def devices(target: str) -> tuple:
  """The compile-only devices of `target`: the v5e's 4 chips (2x2), or one H100."""
  from jax.experimental import topologies

  if target == "v5e":
    return tuple(topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices)
  if target == "h100":
    return tuple(
      topologies.get_topology_desc(
        "", "cuda", target_config=H100_CONFIG.read_text(), topology="1x1x1"
      ).devices
    )
  raise ValueError(f"unknown target {target!r}; known: {sorted(BUDGETS)}")


@dataclasses.dataclass
class Analysis:
  """What the compiled program says (module docstring). `estimate`, `flops` and `bytes` are None
  where the compiler gives no cost analysis (CUDA) or a meaningless one (a negative estimate)."""

  estimate: float | None
  flops: float | None
  bytes: float | None
  temporaries: float
  footprint: float
  callbacks: int
  loops: int
  cycles: float | None = None


def analyse(compiled) -> Analysis:
  text = compiled.as_text()
  memory = compiled.memory_analysis()
  cost = compiled.cost_analysis() or {}
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else {}

  def figure(key):
    value = cost.get(key)
    return float(value) if value is not None and value >= 0 else None

  return Analysis(
    estimate=figure("optimal_seconds"),
    flops=figure("flops"),
    bytes=figure("bytes accessed"),
    temporaries=float(memory.temp_size_in_bytes),
    footprint=float(
      memory.argument_size_in_bytes
      + memory.output_size_in_bytes
      - memory.alias_size_in_bytes
      + memory.temp_size_in_bytes
    ),
    callbacks=len(CALLBACK.findall(text)),
    loops=len(re.findall(r" while\(", text)),
    cycles=scheduled_cycles(text),
  )


def scheduled_cycles(text: str) -> float | None:
  """The TPU compiler's own estimate of a program's cycles: the sum of the `estimated_cycles` it
  writes beside each instruction of the optimized program (the cost model its scheduler uses),
  `None` where it writes none (CUDA). Unlike the cost analysis's `optimal_seconds`, it sees what
  fusion made of the program (for an `evaluate_retrieval` chunk of 1,024 queries on the v5e, the
  cost analysis gave the same 4.11 ms for a reduction per relevant slot and for one pass over the
  scores, this 14.5 against 4.6 million cycles). Gathers (custom fusions) carry no estimate: not
  counted."""
  cycles = re.findall(r'"estimated_cycles":"(\d+)"', text)
  return float(sum(int(c) for c in cycles)) if cycles else None


def floor_loss(e, y):
  import jax.numpy as jnp

  del y
  return jnp.sum(jnp.tanh(e @ e.T))


def loss_function(name: str):
  """The list-level loss of row `name`, its keyword arguments fixed (`speed.loss_function`; the
  rows "(branch taken)" with `max_relevant=TAKEN_BOUND`)."""
  if name in BRANCH_TAKEN:
    import jaxrank

    return functools.partial(getattr(jaxrank, LOSSES[name]), max_relevant=TAKEN_BOUND)
  return speed.loss_function(name, LOSSES)


def in_batch_loss(name: str):
  """`f(embeddings, labels)` of row `name`: the floor, or the loss on `batch_retrieval`'s lists."""
  if name == "floor":
    return floor_loss
  import jaxrank

  loss_fn = loss_function(name)

  def loss(e, y):
    scores, relevance, where = jaxrank.batch_retrieval(e, y)
    return loss_fn(scores, relevance, where=where)

  return loss


def compile_step(loss, batch: int, dim: int, device):
  """`jax.jit(jax.value_and_grad(loss))` compiled for `device` at `[batch, dim]` embeddings."""
  import jax
  import jax.numpy as jnp

  sharding = jax.sharding.SingleDeviceSharding(device)
  e = jax.ShapeDtypeStruct((batch, dim), jnp.float32, sharding=sharding)
  y = jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=sharding)
  return jax.jit(jax.value_and_grad(loss)).lower(e, y).compile()


def compile_sharded_step(name: str, batch: int, dim: int, chips: tuple):
  """The step of `jaxrank.sharded_loss` for loss `name` over a mesh of `chips`, compiled."""
  import jax
  import jax.numpy as jnp
  from jax.sharding import NamedSharding
  from jax.sharding import PartitionSpec as P

  import jaxrank

  mesh = jax.sharding.Mesh(np.asarray(chips), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))
  sharding = NamedSharding(mesh, P("batch"))
  loss = jaxrank.sharded_loss(loss_function(name), mesh, "batch")
  e = jax.ShapeDtypeStruct((batch, dim), jnp.float32, sharding=sharding)
  y = jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=sharding)
  return jax.jit(jax.value_and_grad(loss)).lower(e, y).compile()


def compile_evaluation_chunk(
  device,
  dim: int,
  chunk: int = EVAL_CHUNK,
  gallery: int = EVAL_GALLERY,
  relevant: int = EVAL_RELEVANT,
  *,
  product_only: bool = False,
):
  """`evaluate_retrieval`'s per-chunk program (cosine, leave-one-out, Recall@1/2/4/8, MAP@R, mAP,
  tie-aware mAP), compiled for `device`: the library's private chunk, as `evaluate_retrieval`
  calls it on that platform. `product_only`: instead, the floor, the same chunk's scores by the
  same rule, each row reduced to its maximum (the product XLA need not write)."""
  import jax
  import jax.numpy as jnp

  import jaxrank
  from jaxrank._src import evaluation
  from jaxrank._src import ranking
  from jaxrank._src import similarity

  sharding = jax.sharding.SingleDeviceSharding(device)

  def spec(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

  items = spec((gallery, dim), jnp.float32)  # Leave-one-out: the query set is the gallery.
  prepared = jax.eval_shape(
    lambda x: similarity.prepare_items(jaxrank.similarity.cosine, x, jnp.float32), items
  )
  prepared = jax.tree.map(lambda s: spec(s.shape, s.dtype), prepared)
  if product_only:

    def product(query_set, rows, prepared):
      queries = jnp.take(query_set, rows, axis=0)
      scores = similarity.score_prepared(jaxrank.similarity.cosine, queries, prepared)
      return jnp.max(scores, axis=1)

    return jax.jit(product).lower(items, spec((chunk,), jnp.int32), prepared).compile()
  return evaluation._evaluate_chunk.lower(  # pylint: disable=protected-access
    items,
    spec((chunk,), jnp.int32),
    spec((chunk,), jnp.int32),
    spec((chunk, relevant), jnp.int32),
    spec((chunk, relevant), jnp.bool_),
    prepared,
    ks=(1, 2, 4, 8),
    similarity_fn=jaxrank.similarity.cosine,
    branch=ranking.forced_branch(),
  ).compile()


# The training job's own step (`experiments.job.step.make_train_step`, the function a run calls):
# each backbone with the embedding head (D = 512), in-batch FastAP and AdamW, B = 256 photographs
# of 224 x 224 (64 classes x 4), in float32 and in mixed precision (`half_precision`).
TRAIN_MODELS = ("resnet50", "vit_small")
TRAIN_BATCH, TRAIN_IMAGE_SIZE = 256, 224


def train_step_config(model: str, half_precision: bool, batch: int, image_size: int):
  """The job's `Config` of a training step of `model` on photographs (`image_folder`, RGB)."""
  from experiments.job import config as config_lib

  return config_lib.Config(
    dataset="image_folder",
    model=model,
    image_size=image_size,
    batch_size=batch,
    samples_per_class=4,
    embedding_dim=512,
    loss="fastap",
    half_precision=half_precision,
  )


def compile_train_step(config, device, *, donate: bool = True):
  """The job's jitted step for `config`, compiled for `device` on abstract arguments: the state
  (built abstractly, nothing initialised), `[B, S, S, C]` float32 images, labels and the
  divergence counter. `donate=False` compiles the same function without donating the state."""
  import jax
  import jax.numpy as jnp

  from experiments.job import datasets
  from experiments.job import optimizer as optimizer_lib
  from experiments.job import step as step_lib

  tx = optimizer_lib.make_optimizer(config)
  graphs = {}

  def build():
    graphs["model"], state = step_lib.init_state(config, tx)
    return state

  sharding = jax.sharding.SingleDeviceSharding(device)

  def spec(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

  state = jax.tree.map(lambda s: spec(s.shape, s.dtype), jax.eval_shape(build))
  channels = datasets.DATASETS[config.dataset].in_channels
  size, batch = config.image_size, config.batch_size
  step = step_lib.make_train_step(config, graphs["model"], tx, None)
  if not donate:
    step = jax.jit(step.__wrapped__)
  lowered = step.lower(
    state,
    spec((batch, size, size, channels), jnp.float32),
    spec((batch,), jnp.int32),
    spec((), jnp.int32),
  )
  # Without a GPU to autotune on, the CUDA plugin's Triton GEMMs find no tiling for the ViT's
  # [B T, 384] products ("Couldn't find output tile sizes", jax 0.10.2): the H100's programs are
  # compiled with cuBLAS's GEMMs, which a real GPU's autotuning may choose too.
  options = {"xla_gpu_enable_triton_gemm": False} if device.platform in ("gpu", "cuda") else {}
  return lowered.compile(compiler_options=options)


def train_steps_table(targets: list[str], models: list[str], batch: int, image_size: int):
  """The job's step of each backbone in float32 and mixed precision, compiled for each target:
  estimate, flops, bytes, temporaries, and the step's memory with the state donated (as the job
  runs it) and without."""
  lines = [
    f"The training job's step (experiments.job.step.make_train_step): backbone + embedding head "
    f"(D = 512) + in-batch FastAP + AdamW, B = {batch}, {image_size} x {image_size} images, "
    "compiled for each target; memory = arguments + outputs + temporaries - donated",
    "| target | backbone | precision | estimate | estimate / float32 | GFLOP | GB accessed | "
    "temporaries | memory, state donated | memory, not donated |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
  ]
  for target in targets:
    device = devices(target)[0]
    for model in models:
      full_estimate: float | None = None
      for half in (False, True):
        start = time.perf_counter()
        config = train_step_config(model, half, batch, image_size)
        precision = "bfloat16" if half else "float32"
        try:
          a = analyse(compile_train_step(config, device))
          kept = analyse(compile_train_step(config, device, donate=False))
        except Exception as error:  # pylint: disable=broad-except
          # A compiler that refuses the program (the CUDA plugin's deviceless tiling refused the
          # float32 ViT step with jax 0.10.2) is a row saying so, not the end of the table.
          reason = " ".join(str(error).split())[:120].replace("|", "/")
          lines.append(
            f"| {target} | {model} | {precision} | compile failed: {reason} |" + " - |" * 6
          )
          print(lines[-1], flush=True)
          continue
        full_estimate = a.estimate if not half else full_estimate
        estimate = "n/a" if a.estimate is None else f"{a.estimate * 1e3:.1f} ms"
        flops = "n/a" if a.flops is None else f"{a.flops / 1e9:,.0f}"
        gb = "n/a" if a.bytes is None else f"{a.bytes / 1e9:.1f}"
        lines.append(
          f"| {target} | {model} | {precision} | {estimate} | "
          f"{_ratio(a.estimate, full_estimate, digits=2)} | {flops} | {gb} | "
          f"{_mb(a.temporaries)} | {_mb(a.footprint)} | {_mb(kept.footprint)} |"
        )
        print(lines[-1], f"({time.perf_counter() - start:.0f} s)", flush=True)
  lines.append(
    "bfloat16: `half_precision=True`, the network computing in bfloat16 on float32 parameters; "
    "n/a: the H100's compiler gives no cost analysis."
  )
  return lines


def footprint_at(loss, dim: int, device, batch: int) -> float:
  """Bytes of the step at `batch` by the memory analysis; `inf` if the compiler refuses it."""
  try:
    return analyse(compile_step(loss, batch, dim, device)).footprint
  except Exception as error:  # pylint: disable=broad-except
    if "RESOURCE_EXHAUSTED" in str(error) or "memory" in str(error).lower():
      return float("inf")
    raise


def _ratio(value, floor, digits: int = 1) -> str:
  return "n/a" if value is None or floor is None else f"{value / floor:.{digits}f}x"


def _gb(budget: float) -> str:
  return f"{budget / 2**30:.0f} GiB" if budget % 2**30 == 0 else f"{budget / 1e9:.0f} GB"


def _mb(x: float) -> str:
  return f"{x / 2**20:,.0f} MB" if x < 10 * 2**30 else f"{x / 2**30:,.1f} GB"


def target_table(target: str, batch: int, dim: int, names: list[str], largest: bool) -> list[str]:
  """One row per step compiled for `target` at `batch` (module docstring)."""
  device = devices(target)[0]
  budget = BUDGETS[target]
  floor = analyse(compile_step(floor_loss, batch, dim, device))
  header = (
    f"{target}: B = {batch}, D = {dim}, {speed.PER_CLASS} per class; ratios to the floor "
    f"(forward+backward of sum(tanh(e @ e.T)): "
    + (
      f"estimate {floor.estimate * 1e3:.3f} ms, {floor.flops / 1e9:.1f} GFLOP, "
      f"{floor.bytes / 1e9:.2f} GB accessed, "
      if floor.estimate is not None and floor.flops is not None and floor.bytes is not None
      else ""
    )
    + f"{_mb(floor.temporaries)} temporaries); largest B in {_gb(budget)} by the memory "
    "analysis"
  )
  lines = [
    header,
    "| step | estimate / floor | flops / floor | bytes / floor | temporaries | "
    "temporaries / floor | largest B | callbacks |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
  ]
  for name in ["floor", *names]:
    start = time.perf_counter()
    loss = in_batch_loss(name)
    a = analyse(compile_step(loss, batch, dim, device)) if name != "floor" else floor
    best = "-"
    if largest:
      b, used = speed.largest_fitting(
        functools.partial(footprint_at, loss, dim, device),
        batch,
        budget,
        tolerance=LARGEST_TOLERANCE,
        rounds=3,
      )
      best = f"{b:,} ({used / 1e9:.1f} GB)"
    loops = f" ({a.loops} loops)" if a.loops else ""
    lines.append(
      f"| {name} | {_ratio(a.estimate, floor.estimate)}{loops} | {_ratio(a.flops, floor.flops)} "
      f"| {_ratio(a.bytes, floor.bytes)} | {_mb(a.temporaries)} | "
      f"{_ratio(a.temporaries, floor.temporaries or None)} | {best} | {a.callbacks} |"
    )
    print(lines[-1], f"({time.perf_counter() - start:.0f} s)", flush=True)
  return lines


def sharded_table(batch: int, dim: int, names: list[str]) -> list[str]:
  """The sharded step on the v5e's 4 chips beside the one-chip step, per chip."""
  chips = devices("v5e")
  lines = [
    f"v5e, sharded over {len(chips)} chips (jaxrank.sharded_loss): B = {batch} in all, "
    f"{batch // len(chips)} queries per chip; per-chip estimate and temporaries against the "
    "one-chip step of the whole batch",
    "| step | one chip: estimate | sharded: estimate per chip | one chip: temporaries | "
    "sharded: temporaries per chip | callbacks |",
    "| --- | --- | --- | --- | --- | --- |",
  ]
  for name in names:
    one = analyse(compile_step(in_batch_loss(name), batch, dim, chips[0]))
    split = analyse(compile_sharded_step(name, batch, dim, chips))

    def ms(a):
      return "n/a" if a.estimate is None else f"{a.estimate * 1e3:.2f} ms"

    lines.append(
      f"| {name} | {ms(one)} | {ms(split)} | {_mb(one.temporaries)} | {_mb(split.temporaries)} "
      f"| {split.callbacks} |"
    )
    print(lines[-1], flush=True)
  return lines


EVALUATION_FORMS = {
  "XLA's product, rows reduced to their maximum (the floor)": "product",
  "one pass of comparisons (as shipped)": None,
  "sort of each list, binary search": 0,
}
"""The evaluation chunk's rows: the floor (the same scores, each row reduced to its maximum), and
its forms of counting ranks, by the `counting.COMPARE_UP_TO` each is compiled with: as shipped
(the relevant scores picked, then one pass over the scores compares every score with every
relevant score), and with every list sorted and searched (`COMPARE_UP_TO = 0`)."""


@contextlib.contextmanager
def compare_up_to(bound: int | None):
  """`counting.COMPARE_UP_TO` set to `bound` (`None`: left as shipped) while programs are traced;
  JAX's caches are cleared on entry and exit so that no program traced with the other bound is
  reused."""
  import jax

  from jaxrank._src import counting

  shipped = counting.COMPARE_UP_TO
  jax.clear_caches()
  counting.COMPARE_UP_TO = shipped if bound is None else bound
  try:
    yield
  finally:
    counting.COMPARE_UP_TO = shipped
    jax.clear_caches()


def evaluation_table(targets: list[str], dim: int) -> list[str]:
  lines = [
    f"evaluate_retrieval's chunk: {EVAL_CHUNK} queries x {EVAL_GALLERY:,} gallery items, "
    f"D = {dim}, {EVAL_RELEVANT} relevant slots per query",
    "| target | form | estimate | GB accessed | cycles | / floor | temporaries | loops "
    "| callbacks |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
  ]
  for target in targets:
    floor_cycles = None
    for form, bound in EVALUATION_FORMS.items():
      device = devices(target)[0]
      if isinstance(bound, str):  # "product": the floor.
        a = analyse(compile_evaluation_chunk(device, dim, product_only=True))
        floor_cycles = a.cycles
      else:
        with compare_up_to(bound):
          a = analyse(compile_evaluation_chunk(device, dim))
      at_least = ">= " if a.loops else ""
      estimate = "n/a" if a.estimate is None else f"{at_least}{a.estimate * 1e3:.2f} ms"
      gb = "n/a" if a.bytes is None else f"{at_least}{a.bytes / 1e9:.2f}"
      cycles = "n/a" if a.cycles is None else f"{at_least}{a.cycles / 1e6:.1f} M"
      ratio = f"{at_least}{_ratio(a.cycles, floor_cycles)}" if a.cycles is not None else "n/a"
      lines.append(
        f"| {target} | {form} | {estimate} | {gb} | {cycles} | {ratio} | {_mb(a.temporaries)} "
        f"| {a.loops} | {a.callbacks} |"
      )
      print(lines[-1], flush=True)
  lines.append(
    ">=: a lower bound, the compiler counting each loop's body once whatever its trips (the "
    "binary search's loops); cycles: the TPU compiler's per-instruction estimates summed "
    "(`scheduled_cycles`; gathers carry none), which see what fusion made of the program where "
    "the cost analysis's estimate and bytes do not; n/a: the H100's compiler gives neither."
  )
  return lines


def records(
  targets: list[str],
  batch: int,
  dim: int,
  names: list[str],
  *,
  evaluation: tuple[int, int, int] = (EVAL_CHUNK, EVAL_GALLERY, EVAL_RELEVANT),
  train: tuple[str, int, int] | None = None,
) -> list[dict]:
  """Every analysis at one batch, as plain records (for `--json` and the compile-only test):
  `{"target", "kind" ("step", "sharded" on the v5e's chips, "evaluation", or "train"), "step",
  ...}` with the fields of `Analysis`; the floor is the step named "floor" (the evaluation chunk's,
  "evaluation floor": its product, rows reduced to their maximum). `train=(model, batch,
  image_size)` adds the training job's step of that backbone in float32 and mixed precision
  (steps "<model> float32" and "<model> bfloat16")."""
  out = []
  for target in targets:
    device = devices(target)[0]
    for name in ["floor", *names]:
      a = analyse(compile_step(in_batch_loss(name), batch, dim, device))
      out.append({"target": target, "kind": "step", "step": name, **dataclasses.asdict(a)})
      if target == "v5e" and name != "floor":
        a = analyse(compile_sharded_step(name, batch, dim, devices(target)))
        out.append({"target": target, "kind": "sharded", "step": name, **dataclasses.asdict(a)})
    chunk, gallery, relevant = evaluation
    for step, product_only in (("evaluation chunk", False), ("evaluation floor", True)):
      a = analyse(
        compile_evaluation_chunk(device, dim, chunk, gallery, relevant, product_only=product_only)
      )
      out.append({"target": target, "kind": "evaluation", "step": step, **dataclasses.asdict(a)})
    if train is not None:
      model, train_batch, size = train
      for half in (False, True):
        a = analyse(compile_train_step(train_step_config(model, half, train_batch, size), device))
        name = f"{model} {'bfloat16' if half else 'float32'}"
        out.append({"target": target, "kind": "train", "step": name, **dataclasses.asdict(a)})
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch", type=int, nargs="+", default=[4096, 16384])
  parser.add_argument("--dim", type=int, default=512)
  parser.add_argument("--targets", nargs="+", choices=sorted(BUDGETS), default=["v5e", "h100"])
  parser.add_argument("--losses", nargs="+", choices=list(LOSSES), default=list(LOSSES))
  parser.add_argument(
    "--skip-largest",
    action="store_true",
    help="leave out the largest-batch column (many compilations)",
  )
  parser.add_argument("--skip-steps", action="store_true", help="leave out the per-target tables")
  parser.add_argument("--skip-sharded", action="store_true")
  parser.add_argument("--skip-evaluation", action="store_true")
  parser.add_argument(
    "--skip-train",
    action="store_true",
    help="leave out the training job's steps (ResNet-50 and ViT-S/16 at B = 256, 224 x 224)",
  )
  parser.add_argument("--train-models", nargs="+", default=list(TRAIN_MODELS))
  parser.add_argument(
    "--json",
    metavar="FILE",
    help="write every analysis at the first --batch to FILE as JSON records "
    "(steps, sharded steps, a small evaluation chunk) instead of the tables",
  )
  docs_data.add_docs_argument(parser, "accelerators_<table>")
  args = parser.parse_args(argv)
  set_environment()
  import jax

  if args.json:
    found = records(
      args.targets,
      args.batch[0],
      args.dim,
      args.losses,
      evaluation=(64, 4096, EVAL_RELEVANT),
      train=("resnet18", 8, 32),
    )
    pathlib.Path(args.json).write_text(json.dumps(found, indent=1))
    return 0

  print(f"jax {jax.__version__}; compile-only targets: {', '.join(args.targets)}", flush=True)
  tables = {}
  for target in () if args.skip_steps else args.targets:
    for i, batch in enumerate(args.batch):
      tables[f"{target}_{batch}"] = target_table(
        target, batch, args.dim, args.losses, largest=not args.skip_largest and i == 0
      )
  if "v5e" in args.targets and not args.skip_sharded:
    tables["sharded"] = sharded_table(args.batch[0], args.dim, args.losses)
  if not args.skip_evaluation:
    tables["evaluation"] = evaluation_table(args.targets, args.dim)
  if not args.skip_train:
    tables["train"] = train_steps_table(
      args.targets, args.train_models, TRAIN_BATCH, TRAIN_IMAGE_SIZE
    )
  print("\n".join(line for lines in tables.values() for line in ["", *lines]))
  if args.docs:
    docs_data.write_markdown_tables({f"accelerators_{n}": lines for n, lines in tables.items()})
  return 0


if __name__ == "__main__":
  sys.exit(main())
