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

import json
import os
import pathlib
import subprocess

import pytest

from experiments.benchmarks import accelerators

REPO = pathlib.Path(__file__).resolve().parent.parent
PYTHON = REPO / ".venv-accel" / "bin" / "python"
BATCH = 256
STEPS = ["floor", *accelerators.LOSSES]
# The most each step may need, as multiples of the floor's at B = 256 (a v5e's floor has no
# temporaries: its own are bounded in bytes instead). Measured at B = 256 after the accelerator
# forms (docs/guide/benchmarks.rst, "Accelerators"), with about 1.5x of headroom: the
# histogram losses' scatter form measured 30x the floor's bytes here, the sort of the blackbox
# 45x, so that a CPU form that leaks into the accelerators' program fails.
V5E_BYTES = 8.0  # Bytes accessed / floor's.
V5E_TEMPORARIES = 64 * 2**20  # Bytes, absolute (the floor's are 0).
H100_TEMPORARIES = 6.0  # Temporaries / floor's.


@pytest.fixture(scope="module")
def analyses() -> dict[tuple[str, str, str], dict]:
  """(target, kind, step) -> the compiled program's analysis, from one subprocess."""
  assert PYTHON.exists(), (
      f"{PYTHON} is missing: `make .venv-accel` installs the compile-only accelerators "
      "(`make test` does it first)."
  )
  out = REPO / ".pytest_cache" / "accelerators.json"
  out.parent.mkdir(exist_ok=True)
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
  done = subprocess.run(
      [str(PYTHON), "-m", "experiments.benchmarks.accelerators", "--batch", str(BATCH),
       "--json", str(out)],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=1500, check=False,
  )
  assert done.returncode == 0, done.stderr[-5000:]
  return {(r["target"], r["kind"], r["step"]): r for r in json.loads(out.read_text())}


def test_every_step_was_compiled(analyses):
  for target in ("v5e", "h100"):
    assert {s for t, k, s in analyses if t == target and k == "step"} == set(STEPS), target
    assert (target, "evaluation", "evaluation chunk") in analyses
  assert {s for t, k, s in analyses if k == "sharded"} == set(STEPS[1:])


def test_no_host_callback_in_any_accelerator_program(analyses):
  with_callbacks = sorted(key for key, a in analyses.items() if a["callbacks"])
  assert not with_callbacks


@pytest.mark.parametrize("step", STEPS[1:])
def test_v5e_step_stays_within_its_multiples_of_the_floor(analyses, step):
  floor, a = analyses["v5e", "step", "floor"], analyses["v5e", "step", step]
  assert a["bytes"] is not None and a["bytes"] <= V5E_BYTES * floor["bytes"], (
      step, a["bytes"] / floor["bytes"])
  assert a["temporaries"] <= V5E_TEMPORARIES, (step, a["temporaries"] / 2**20)


@pytest.mark.parametrize("step", STEPS[1:])
def test_v5e_estimate_is_countable(analyses, step):
  """The compiler's roofline estimate exists (a while loop whose trip count it cannot know makes
  it negative) and is within the bytes' bound of the floor's."""
  floor, a = analyses["v5e", "step", "floor"], analyses["v5e", "step", step]
  assert a["estimate"] is not None and a["estimate"] <= V5E_BYTES * floor["estimate"], step


@pytest.mark.parametrize("step", STEPS[1:])
def test_h100_temporaries_stay_within_their_multiple_of_the_floor(analyses, step):
  floor, a = analyses["h100", "step", "floor"], analyses["h100", "step", step]
  assert a["temporaries"] <= H100_TEMPORARIES * floor["temporaries"], (
      step, a["temporaries"] / floor["temporaries"])


@pytest.mark.parametrize("step", STEPS[1:])
def test_sharded_step_needs_no_more_per_chip_than_one_chip(analyses, step):
  one, split = analyses["v5e", "step", step], analyses["v5e", "sharded", step]
  assert split["temporaries"] <= max(one["temporaries"], V5E_TEMPORARIES / 4), step
