"""Runs N Python processes on localhost as one `jax.distributed` job, for the multi-process tests.

Each child gets, in its environment, `XLA_FLAGS=--xla_force_host_platform_device_count=D` (set
before JAX starts) and the job's coordinates: `JAXRANK_TEST_COORDINATOR` (`127.0.0.1:PORT`, a free
port picked per call), `JAXRANK_TEST_NUM_PROCESSES` and `JAXRANK_TEST_PROCESS_ID`. A child script
starts with `launcher.initialize()`, which joins the job with gloo collectives on the CPU:

    import launcher  # The children's PYTHONPATH holds the repository root and this directory.
    launcher.initialize()  # Before any other JAX call.

`run` never hangs: when one child fails, the others are killed at once, and a job that outlives its
timeout is killed whole; either way the test fails with every child's output.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def free_port() -> int:
  """A TCP port on localhost that was free a moment ago."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def initialize() -> None:
  """Joins the job `run` started (call it in the child, before any other JAX call)."""
  import jax  # pylint: disable=g-import-not-at-top

  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(
    os.environ["JAXRANK_TEST_COORDINATOR"],
    num_processes=int(os.environ["JAXRANK_TEST_NUM_PROCESSES"]),
    process_id=int(os.environ["JAXRANK_TEST_PROCESS_ID"]),
  )


@dataclasses.dataclass(frozen=True)
class Finished:
  """One child's exit status and its output (stdout and stderr together)."""

  process_id: int
  returncode: int
  output: str


class JobFailed(AssertionError):
  """A child failed or the job timed out; the message holds every child's output."""


def _report(what: str, finished: Sequence[Finished]) -> str:
  parts = [what]
  for f in finished:
    parts.append(f"--- process {f.process_id} (exit status {f.returncode}) ---\n{f.output[-6000:]}")
  return "\n".join(parts)


def run(
  argv: Sequence[str] | Callable[[int], Sequence[str]],
  *,
  num_processes: int = 2,
  devices_per_process: int = 2,
  timeout: float = 240.0,
  env: dict[str, str] | None = None,
  cwd: str | os.PathLike | None = None,
  expect_failure: bool = False,
) -> list[Finished]:
  """Runs `python *argv` as `num_processes` processes of one job and waits for all of them.

  Args:
    argv: the arguments after `python` (e.g. `["-m", "experiments.job.main", ...]` or a script
      path), or a function of the process id giving them.
    num_processes: how many processes.
    devices_per_process: simulated CPU devices in each.
    timeout: seconds for the whole job; then every child is killed and `JobFailed` raised.
    env: extra environment variables for every child.
    cwd: the children's working directory (default: the repository root, so that `tests` and
      `experiments` import).
    expect_failure: when True, a child that exits non-zero ends the job (the others are killed)
      without raising; the caller inspects the statuses.

  Returns:
    One `Finished` per process, in process-id order.

  Raises:
    JobFailed: a child exited with a non-zero status (unless `expect_failure`) or the job timed out.
  """
  base = _environment(num_processes, devices_per_process, env)
  children, logs = [], []
  for i in range(num_processes):
    args = list(argv(i) if callable(argv) else argv)
    # Outlives this loop: _collect closes it once the children have exited.
    log = tempfile.TemporaryFile(mode="w+", prefix=f"process{i}-")  # noqa: SIM115
    logs.append(log)
    children.append(
      subprocess.Popen(
        [sys.executable, *args],
        env={**base, "JAXRANK_TEST_PROCESS_ID": str(i)},
        cwd=cwd or REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Its own process group: killed with its children.
      )
    )
  kill_all = functools.partial(_kill_all, children)
  collect = functools.partial(_collect, children, logs)
  deadline = time.monotonic() + timeout
  try:
    while True:
      codes = [p.poll() for p in children]
      if all(c is not None for c in codes):
        break
      if any(c not in (None, 0) for c in codes):
        kill_all()
        finished = collect()
        if expect_failure:
          return finished
        raise JobFailed(_report("a process failed; the others were killed", finished))
      if time.monotonic() > deadline:
        kill_all()
        raise JobFailed(_report(f"the job did not finish in {timeout:.0f} s", collect()))
      time.sleep(0.1)
  except BaseException:
    kill_all()
    raise
  finished = collect()
  if not expect_failure and any(f.returncode for f in finished):
    raise JobFailed(_report("a process failed", finished))
  return finished


def _environment(
  num_processes: int, devices_per_process: int, env: dict[str, str] | None
) -> dict[str, str]:
  """Every child's environment but its process id: simulated devices, the coordinator, the path."""
  base = dict(os.environ)
  base.pop("XLA_FLAGS", None)
  base.update(
    XLA_FLAGS=f"--xla_force_host_platform_device_count={devices_per_process}",
    JAXRANK_TEST_COORDINATOR=f"127.0.0.1:{free_port()}",
    JAXRANK_TEST_NUM_PROCESSES=str(num_processes),
    TF_CPP_MIN_LOG_LEVEL="2",
    PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), str(HERE), base.get("PYTHONPATH", "")])),
  )
  base.update(env or {})
  return base


def _kill_all(children: Sequence[subprocess.Popen]) -> None:
  """Kills the process group of every child still running, and waits for every child."""
  for p in children:
    if p.poll() is None:
      try:
        os.killpg(p.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
  for p in children:
    p.wait()


def _collect(children: Sequence[subprocess.Popen], logs: Sequence[IO[str]]) -> list[Finished]:
  """Each child's exit status and output, in process-id order; closes the logs."""
  out = []
  for i, (p, log) in enumerate(zip(children, logs)):
    log.seek(0)
    out.append(Finished(i, p.returncode, log.read()))
    log.close()
  return out
