"""Every training step compiles for a TPU v5e and an H100, without host callbacks, within bounds.

Users train on TPUs and GPUs; this machine has neither. XLA compiles for both without the
hardware (`experiments/benchmarks/accelerators.py`: libtpu's compile-only v5e devices, the CUDA
plugin with an H100 target config), so a change made for the CPU that ruins the accelerators'
program fails here: each loss's step (`value_and_grad` of `loss(*batch_retrieval(e, y))`), its
sharded step over the v5e's 4 chips and evaluate_retrieval's chunk must compile, hold no host
callback, and stay within the stated multiples of the floor's (fwd+bwd of `sum(tanh(e @ e.T))`)
temporaries and bytes accessed. The multiples are for this test's small batch (B = 256), where
fixed costs weigh more than at the benchmark's 4,096; the benchmark's tables in
docs/guide/benchmarks.rst hold the goals at scale.

The compilers run in `.venv-accel` (`make .venv-accel`: jaxrank with the `accelerators` extra),
one subprocess for every step: libtpu in the tests' own environment would make every JAX process
of the suite look for a TPU.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from experiments.benchmarks import accelerators

# Its expensive fixtures are session-scoped and its tests kept on one pytest-xdist worker (`make
# test`): a module-scoped fixture is set up again whenever the worker returns to the module.
pytestmark = pytest.mark.xdist_group("test_accelerators")

REPO = pathlib.Path(__file__).resolve().parent.parent
PYTHON = REPO / ".venv-accel" / "bin" / "python"
BATCH, DIM = 256, 512
STEPS = ["floor", *accelerators.LOSSES]
SQUARE = BATCH * BATCH * 4  # Bytes of one [B, B] float32 array.

# The most each step may cost, as multiples of the floor's at B = 256 (v5e bytes accessed and
# estimate; H100 temporaries) and in [B, B] float32 arrays (v5e temporaries: the floor's are 0).
# Measured at B = 256 (docs/guide/benchmarks.rst, "Accelerators"), the bounds leave at least
# 1.35x of headroom; the forms of the CPU measured far beyond them on the v5e (the histogram losses'
# scatter 62x the floor's bytes, the blackbox counting path with its sort fallback 114x, the
# smooth-rank loop 90x), so a CPU form that leaks into an accelerator's program fails here.
Bounds = collections.namedtuple("Bounds", "bytes estimate squares h100")
# The steps as the training job runs them (smooth-rank and blackbox losses with the sampler's
# bound, `max_relevant`): measured 1.6-2.2x bytes and estimate, no temporaries, H100 1.2x. The
# bound is the goal at scale: 3x the floor's estimate.
TRAINED = Bounds(bytes=3.0, estimate=3.0, squares=2, h100=2.5)
BOUNDS = {name: TRAINED for name in accelerators.LOSSES}
# Without a bound the smooth-rank and blackbox losses choose their form on the device (issue 51):
# the program holds every branch (the smooth-rank losses' grouped loop, the blackbox losses' sort,
# and the bounded forms), and the estimate and bytes count them all: measured 2.5-2.7x the floor's
# bytes and 7.0-7.4 [B, B] arrays of temporaries (smooth rank), 100x and 10.2 (blackbox: its sort
# branch, which keeps no ranks between the passes and so sorts three times, 52x when it kept them
# and every branch's program held them). The rows "(branch taken)" hold the bound `TRAINED` sets
# for what runs.
for _name in ("SmoothAP", "SupAP", "ROADMAP"):
  BOUNDS[_name] = Bounds(bytes=4.0, estimate=4.0, squares=10, h100=2.5)
for _name in ("blackbox AP", "blackbox recall"):
  BOUNDS[_name] = Bounds(bytes=135.0, estimate=135.0, squares=13, h100=2.5)
# The evaluation chunk (64 queries x 4,096 items, 11 relevant slots): measured 33x the floor's
# bytes (gathers from the harmonic table dominate), 0.6 and 1.1 [64, 4096] arrays of temporaries,
# and on the v5e 1.56x the cycles of its own floor (the same scores, rows reduced to their
# maximum; `accelerators.scheduled_cycles`).
EVALUATION = Bounds(bytes=40.0, estimate=40.0, squares=None, h100=None)
EVALUATION_TEMPORARIES = 2 * 64 * 4096 * 4
EVALUATION_CYCLES = 2.0


@pytest.fixture(scope="session")
def analyses() -> dict[tuple[str, str, str], dict]:
  """(target, kind, step) -> the compiled program's analysis, from one subprocess."""
  assert PYTHON.exists(), (
    f"{PYTHON} is missing: `make .venv-accel` installs the compile-only accelerators "
    "(`make test` does it first)."
  )
  out = REPO / ".pytest_cache" / "accelerators.json"
  out.parent.mkdir(exist_ok=True)
  # Neither the tests' XLA flags nor their persistent compilation cache (`make test`): the
  # compile-only devices' programs are compiled once each, and .venv-accel has no file lock.
  env = {
    k: v
    for k, v in os.environ.items()
    if k not in ("XLA_FLAGS", "JAX_PLATFORMS")
    and not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))
  }
  done = subprocess.run(
    [
      str(PYTHON),
      "-m",
      "experiments.benchmarks.accelerators",
      "--batch",
      str(BATCH),
      "--json",
      str(out),
    ],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    timeout=1500,
    check=False,
  )
  assert done.returncode == 0, done.stderr[-5000:]
  return {(r["target"], r["kind"], r["step"]): r for r in json.loads(out.read_text())}


def test_every_step_was_compiled(analyses):
  for target in ("v5e", "h100"):
    assert {s for t, k, s in analyses if t == target and k == "step"} == set(STEPS), target
    assert (target, "evaluation", "evaluation chunk") in analyses
  assert {s for t, k, s in analyses if k == "sharded"} == set(STEPS[1:])


@pytest.mark.parametrize("target", ["v5e", "h100"])
def test_the_jobs_step_compiles_in_both_precisions_and_bfloat16_needs_less(analyses, target):
  full, half = (analyses[target, "train", f"resnet18 {p}"] for p in ("float32", "bfloat16"))
  assert 0 < half["temporaries"] < full["temporaries"]
  assert half["footprint"] < full["footprint"]


def test_no_host_callback_in_any_accelerator_program(analyses):
  with_callbacks = sorted(key for key, a in analyses.items() if a["callbacks"])
  assert not with_callbacks


@pytest.mark.parametrize("step", STEPS[1:])
def test_v5e_step_stays_within_its_multiples_of_the_floor(analyses, step):
  floor, a, bound = analyses["v5e", "step", "floor"], analyses["v5e", "step", step], BOUNDS[step]
  assert a["bytes"] is not None and a["bytes"] <= bound.bytes * floor["bytes"], (
    step,
    a["bytes"] / floor["bytes"],
  )
  assert a["temporaries"] <= bound.squares * SQUARE, (step, a["temporaries"] / SQUARE)


@pytest.mark.parametrize("step", STEPS[1:])
def test_v5e_estimate_is_countable_and_within_its_multiple(analyses, step):
  """The compiler's roofline estimate exists (a loop whose trip count it cannot know, or a call
  it cannot cost, makes it negative) and is within its multiple of the floor's."""
  floor, a = analyses["v5e", "step", "floor"], analyses["v5e", "step", step]
  assert a["estimate"] is not None, step
  assert a["estimate"] <= BOUNDS[step].estimate * floor["estimate"], (
    step,
    a["estimate"] / floor["estimate"],
  )


@pytest.mark.parametrize("step", STEPS[1:])
def test_h100_temporaries_stay_within_their_multiple_of_the_floor(analyses, step):
  floor, a = analyses["h100", "step", "floor"], analyses["h100", "step", step]
  assert a["temporaries"] <= BOUNDS[step].h100 * floor["temporaries"], (
    step,
    a["temporaries"] / floor["temporaries"],
  )


@pytest.mark.parametrize("step", STEPS[1:])
def test_sharded_step_needs_no_more_per_chip_than_one_chip(analyses, step):
  """Each of the 4 chips holds a quarter of the queries; beyond the one-chip step it needs only
  the gathered batch (embeddings and their cotangent), and its estimate is at most the one-chip
  step's with a quarter more for the collectives, whose fixed cost weighs at this small batch
  (measured 0.26-1.08x the one-chip estimate at B = 256)."""
  one, split = analyses["v5e", "step", step], analyses["v5e", "sharded", step]
  assert split["temporaries"] <= one["temporaries"] + 2 * BATCH * DIM * 4, step
  assert split["estimate"] is not None and split["estimate"] <= 1.25 * one["estimate"], (
    step,
    split["estimate"] / one["estimate"],
  )


@pytest.mark.parametrize("target", ["v5e", "h100"])
def test_evaluation_chunk_stays_within_its_bounds(analyses, target):
  a = analyses[target, "evaluation", "evaluation chunk"]
  assert a["temporaries"] <= EVALUATION_TEMPORARIES, a["temporaries"]
  if target == "v5e":
    floor = analyses["v5e", "step", "floor"]
    assert a["bytes"] <= EVALUATION.bytes * floor["bytes"], a["bytes"] / floor["bytes"]
    assert a["estimate"] is not None and a["loops"] == 0, a
    own_floor = analyses["v5e", "evaluation", "evaluation floor"]
    assert a["cycles"] <= EVALUATION_CYCLES * own_floor["cycles"], a["cycles"] / own_floor["cycles"]


def test_compare_up_to_traces_the_other_form_and_restores_the_bound():
  """The evaluation table's forms: the bound holds while the programs are traced, no program
  traced with the other bound is reused, and the shipped bound is back afterwards."""
  import jax
  import jax.numpy as jnp

  from jaxrank._src import counting

  count = jax.jit(counting.count_above_and_tied)
  args = (jnp.zeros((4, 8)), jnp.zeros((4, 2)))
  shipped = count.lower(*args).as_text()
  with accelerators.compare_up_to(0):
    assert counting.COMPARE_UP_TO == 0
    sorted_form = count.lower(*args).as_text()
  with accelerators.compare_up_to(None):
    assert counting.COMPARE_UP_TO == 32
  assert counting.COMPARE_UP_TO == 32
  # On the CPU the sorted form sorts in numpy through a host callback; the comparing loop does not.
  assert "callback" not in shipped
  assert "callback" in sorted_form
  assert count.lower(*args).as_text() == shipped


def test_branch_taken_rows_compile_the_bound_the_losses_choose():
  """The rows "(branch taken)" compile the bounded form that the run-time choice takes for the
  benchmark's lists (`PER_CLASS - 1` relevant items): the smallest capacity that holds them, for
  the smooth-rank losses' capacities and the blackbox losses' alike."""
  from experiments.benchmarks import speed
  from jaxrank._src import blackbox_ranks
  from jaxrank._src import bounds
  from jaxrank._src import precision_sums

  for bounded in (
    precision_sums.chosen_capacities(BATCH - 1),
    bounds.capacities_for(BATCH - 1, blackbox_ranks._CAPACITIES),
  ):
    relevant = np.arange(BATCH - 1) < speed.PER_CLASS - 1
    assert bounded[int(bounds.branch_index(relevant[None], bounded))] == accelerators.TAKEN_BOUND
  assert set(accelerators.BRANCH_TAKEN.values()) <= set(speed.LOSSES)
