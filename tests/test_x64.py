"""Every public function of jaxrank under `jax_enable_x64`, in a process of its own.

Users of float64 JAX (scientific code, float64 references) turn the flag on for the whole
process; a library path that mixes int32 and int64 (the CPU evaluation's comparing loop did,
issue 51) then fails on every input. `tests/x64_calls.py` calls each public function once on
float64 inputs under the flag (float32 ones take the same integer paths; tiny shapes, no second
pass of the suite: 30 s on 2 cores, 2026-11-28, most of it compiling one small program per
function) and names what it called; a public function it does not call fails here.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import jaxrank
from jaxrank import hashing
from jaxrank import landscape
from jaxrank import memory
from jaxrank import similarity

HERE = pathlib.Path(__file__).resolve().parent


def _public_functions() -> set[str]:
  names = {n for n in jaxrank.__all__ if callable(getattr(jaxrank, n)) and not n[0].isupper()}
  for module in (hashing, landscape, memory, similarity):
    short = module.__name__.split(".")[-1]
    names |= {
      f"{short}.{n}" for n in module.__all__ if callable(getattr(module, n)) and not n[0].isupper()
    }
  return names


def test_every_public_function_runs_under_x64():
  env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
  done = subprocess.run(
    [sys.executable, str(HERE / "x64_calls.py")],
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert done.returncode == 0, done.stderr[-4000:]
  called = set(json.loads(done.stdout))
  assert called == _public_functions(), (
    sorted(_public_functions() - called),
    sorted(called - _public_functions()),
  )
