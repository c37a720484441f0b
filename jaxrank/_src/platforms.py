"""Code chosen by platform: the CPU's formulation or the accelerators' (GPU, TPU), at lowering.

Some computations are fastest in different forms on a CPU and on an accelerator: a scatter-add
is cheap on XLA:CPU and serialised on a TPU, numpy's sort (through a host callback) beats XLA's
on a CPU and has no place in an accelerator's program. `by_platform` calls both forms inside
`jax.lax.platform_dependent`, which keeps, when the program is lowered for a device, only the form
of that device's platform: an accelerator's program never holds the CPU's form (nor its host
callbacks), and a CPU program never holds the accelerators'.

Both forms give the same values and gradients (up to the rounding of sums taken in another
order); tests run each on the CPU inside `forced_platform`, which makes `by_platform` take one form
whatever the platform. The setting is read when `by_platform` is called in Python, that is when a
jitted function is traced: a jitted body that calls it takes `forced()` as a static argument, so
that its compiled programs are keyed by it and never mixed.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

from jax import lax

CPU = "cpu"
ACCELERATOR = "accelerator"
# Every computation has the first two forms; a few have a third, a GPU's own (`by_platform`'s
# `gpu`), which `forced_platform(GPU)` takes (the accelerators' form where there is none).
PLATFORMS = (CPU, ACCELERATOR)
GPU = "gpu"

_FORCED: contextvars.ContextVar[str | None] = contextvars.ContextVar(
  "jaxrank_forced_platform", default=None
)


@contextlib.contextmanager
def forced_platform(platform: str) -> Iterator[None]:
  """Makes `by_platform` take the form of `platform` (`"cpu"`, `"accelerator"` or `"gpu"`) on
  every platform inside the block (for tests and compile-only benchmarks).

  A `contextvars` variable (each thread has its own); nothing is set at import, and leaving the
  block restores the previous setting. A function jitted and traced before the block keeps the
  form it was traced with unless it keys its traces by `forced()`.
  """
  if platform not in (*PLATFORMS, GPU):
    raise ValueError(
      f"forced_platform: platform must be one of {(*PLATFORMS, GPU)}, got {platform!r}."
    )
  token = _FORCED.set(platform)
  try:
    yield
  finally:
    _FORCED.reset(token)


def forced() -> str | None:
  """The platform `forced_platform` forces here, or `None` (chosen at lowering)."""
  return _FORCED.get()


def by_platform(
  *args: Any,
  cpu: Callable[..., Any],
  accelerator: Callable[..., Any],
  gpu: Callable[..., Any] | None = None,
  platform: str | None = None,
) -> Any:
  """`cpu(*args)` on a CPU, `accelerator(*args)` on a GPU or TPU, chosen when lowered.

  `gpu`, when given, is the form of GPUs (CUDA and ROCm), `accelerator` then that of TPUs: for a
  computation that a GPU's compiler handles best in yet another form (or in the CPU's: pass
  `gpu=cpu`). `platform` (`forced()` by default) takes one form whatever the platform: `"cpu"`
  the CPU's, `"accelerator"` the accelerators' (the TPU's where a `gpu` form is given), `"gpu"`
  the GPUs' (`gpu`, else `accelerator`). All forms must return the same structure of shapes and
  dtypes.
  """
  platform = forced() if platform is None else platform
  if platform == CPU:
    return cpu(*args)
  if platform == GPU:
    return (accelerator if gpu is None else gpu)(*args)
  if platform == ACCELERATOR:
    return accelerator(*args)
  # A form shared by the CPU and the accelerators is traced once (`platform_dependent` traces
  # every branch it is given, and joins only identical ones named by platform).
  if gpu is None:
    return lax.platform_dependent(*args, cpu=cpu, default=accelerator)
  if accelerator is cpu:
    return lax.platform_dependent(*args, cuda=gpu, rocm=gpu, default=cpu)
  return lax.platform_dependent(*args, cpu=cpu, cuda=gpu, rocm=gpu, default=accelerator)
