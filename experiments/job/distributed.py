"""The multi-process start-up of the job: joining a `jax.distributed` job before JAX starts.

Several processes (one per host, or several on one machine) run one job with `jax.distributed`
(`train.train_and_evaluate` says what each does; the config needs `shard=True`).
`experiments.job.main` calls `initialize_distributed` before anything else touches JAX, and the
process joins the job, on the CPU with gloo collectives:

* on a cluster that JAX detects (SLURM, Open MPI, Cloud TPU pods, Kubernetes), with nothing to add:
  the coordinator, the number of processes and this process's id come from the environment;
* anywhere else with `--coordinator_address HOST:PORT --num_processes N --process_id I`
  (`add_flags`), the same address and count in every process and `I` from 0 to N - 1 (flags, not
  config fields: they say where this process runs, not what the run computes, and differ between
  processes);
* with neither, it runs alone.

Like `config.py`, it imports nothing of the job but the config's `ConfigError`, and JAX only when
`initialize_distributed` runs, so that `--help` stays light.
"""

from __future__ import annotations

import argparse

from experiments.job import config as config_lib


def add_flags(parser: argparse.ArgumentParser) -> None:
  """The flags `--coordinator_address`, `--num_processes` and `--process_id`, in a group of their
  own in `--help`."""
  group = parser.add_argument_group(
    "several processes (jax.distributed; not needed where JAX detects the cluster: SLURM, "
    "Open MPI, Cloud TPU)"
  )
  group.add_argument(
    "--coordinator_address", metavar="HOST:PORT", help="process 0's address, the same in all"
  )
  group.add_argument("--num_processes", type=int, metavar="N", help="processes in the job")
  group.add_argument("--process_id", type=int, metavar="I", help="this process, 0 to N - 1")


def initialize_distributed(
  coordinator_address: str | None = None,
  num_processes: int | None = None,
  process_id: int | None = None,
) -> None:
  """Joins a `jax.distributed` job if there is one; call it before anything else uses JAX.

  Selects gloo for JAX's collectives between processes on the CPU (the setting is read only by
  the CPU backend). With the three arguments, joins the job they describe. Without them, asks
  JAX's cluster detection (`jax.distributed.initialize()` with no arguments), which reads the
  environment of SLURM (`SLURM_JOB_ID`, ...), Open MPI (`OMPI_MCA_orte_hnp_uri`), Cloud TPU VMs
  (queried only where a TPU is present) and Kubernetes: where it finds none it fails at once,
  without connecting anywhere, asking for a coordinator address, and the run is a single process.

  Where the process has joined a job already, or has already used JAX (`main()` called from
  Python after some JAX computation, as the tests do), it stays as it is: JAX can join a job only
  before its first computation.

  Raises:
    ConfigError: only some of the three arguments, values that cannot describe a job, or the
      three arguments in a process that has already used JAX.
  """
  import jax  # pylint: disable=g-import-not-at-top

  if jax.distributed.is_initialized():
    return

  given = {
    "--coordinator_address": coordinator_address,
    "--num_processes": num_processes,
    "--process_id": process_id,
  }
  if any(v is not None for v in given.values()):
    missing = [flag for flag, v in given.items() if v is None]
    if missing:
      raise config_lib.ConfigError(
        f"{', '.join(missing)} missing: --coordinator_address, --num_processes and "
        "--process_id go together (or give none where JAX detects the cluster)."
      )
    assert coordinator_address is not None and num_processes is not None and process_id is not None
    host, _, port = coordinator_address.rpartition(":")
    if not host or not port.isdigit():
      raise config_lib.ConfigError(
        f"--coordinator_address {coordinator_address!r} must be HOST:PORT, e.g. localhost:12355."
      )
    if num_processes < 1 or not 0 <= process_id < num_processes:
      raise config_lib.ConfigError(
        f"--num_processes {num_processes} --process_id {process_id}: the number of processes "
        "must be positive and the process id between 0 and the number of processes minus 1."
      )
  # Read only when the CPU backend starts, so harmless where it has started already.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  try:
    if coordinator_address is not None:
      jax.distributed.initialize(
        coordinator_address, num_processes=num_processes, process_id=process_id
      )
    else:
      jax.distributed.initialize()
  except RuntimeError as e:
    # JAX has started already (no public API says so beforehand; this is its documented error).
    if "before any JAX" not in str(e):
      raise
    if coordinator_address is not None:
      raise config_lib.ConfigError(
        "--coordinator_address: this process has already run JAX computations, after which "
        "it cannot join a job; run experiments.job.main as a command of its own."
      ) from None
  except ValueError as e:
    # JAX's detection found no cluster, so no coordinator: one process, nothing to join.
    if coordinator_address is not None or "coordinator_address" not in str(e):
      raise
