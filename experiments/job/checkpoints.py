"""The job's workdir and its orbax checkpoints, for `train.train_and_evaluate`.

`check_workdir` refuses a workdir that holds a run of another configuration and `claim_workdir`
writes its `config.json` (process 0); `checkpoint_manager` keeps the last `keep_checkpoints` in
`<workdir>/checkpoints/<step>/`; `save` writes the state and the data position of a step, and
`restore_latest` reads back the newest readable one, moving a checkpoint whose files cannot be read
to `<workdir>/unreadable_checkpoints/` (never deleting it), raising `CheckpointError` for one
that reads but does not fit this run's state and `ConfigError` for one trained in another
precision (each checkpoint records the dtype its network computed in, `config.compute_dtype`, and
the number of rows of a loss's own parameters, `losses.OWN_PARAMETERS`, which `num_classes` reads
back).
Every process calls them (orbax saves and restores collectively); only process 0 writes
`config.json` or moves a checkpoint.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import sys
from typing import Any

import jax
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from experiments.job import config as config_lib
from experiments.job import losses
from experiments.job import placement

# "experiments.job.checkpoints"; experiments.job.main shows its INFO lines.
logger = logging.getLogger(__name__)


def check_workdir(config: config_lib.Config, workdir: str) -> None:
  """Raises ConfigError if the workdir holds a run of another configuration; writes nothing."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return
  with open(path) as f:
    stored = json.load(f)
  # A field added to Config after the run was written is missing there: that run had its default.
  stored = {**config_lib.to_json(config_lib.Config()), **stored}
  wanted = config_lib.to_json(config)
  if stored != wanted:
    changed = sorted(k for k in set(stored) | set(wanted) if stored.get(k) != wanted.get(k))
    raise config_lib.ConfigError(
      f"workdir {workdir!r} holds a run of another configuration (it differs in {changed}); "
      "use a new workdir, or the same configuration to resume that run."
    )


def claim_workdir(config: config_lib.Config, workdir: str) -> None:
  """Writes the workdir's config.json (process 0), or checks that the one there is `config`'s."""
  check_workdir(config, workdir)
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, "config.json")
  if placement.is_primary() and not os.path.exists(path):
    with open(path + ".tmp", "w") as f:
      json.dump(config_lib.to_json(config), f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def checkpoint_manager(config: config_lib.Config, workdir: str) -> ocp.CheckpointManager:
  """The manager of `<workdir>/checkpoints`, which keeps the last `keep_checkpoints`."""
  return ocp.CheckpointManager(
    os.path.abspath(os.path.join(workdir, "checkpoints")),
    options=ocp.CheckpointManagerOptions(max_to_keep=config.keep_checkpoints, create=True),
  )


class CheckpointError(RuntimeError):
  """A checkpoint that can be read but not restored into this run's state (the configuration or
  the code changed since it was saved), or a failure that is not the checkpoint's; nothing was
  moved or deleted."""


def _restore(manager: ocp.CheckpointManager, step: int, state=None):
  """The checkpoint of `step`: into the structure of `state`, or as saved when it is `None`."""
  item = ocp.args.StandardRestore() if state is None else ocp.args.StandardRestore(state)
  return manager.restore(step, args=ocp.args.Composite(state=item, data=ocp.args.JsonRestore()))


def _why_unreadable(manager: ocp.CheckpointManager, step: int) -> str | None:
  """Why the files of checkpoint `step` cannot be read (truncated, corrupt or missing files: its
  arrays read as saved, without this run's structure, fail twice), or `None` if they can."""
  reason = ""
  for _ in range(2):  # A second try, so that a passing I/O error does not condemn a checkpoint.
    try:
      _restore(manager, step)
      return None
    except Exception as e:  # pylint: disable=broad-exception-caught
      reason = " ".join(f"{type(e).__name__}: {e}".split())
  return reason if len(reason) <= 200 else reason[:200] + "..."


class _DropUnretrievedReadErrors(logging.Filter):
  """Drops asyncio's "Task/Future exception was never retrieved" records of TensorStore's failed
  reads: when one array of a checkpoint cannot be read, the other reads fail in tasks nobody
  awaits, and asyncio logs each when it is collected (dozens of tracebacks, some at exit), though
  the one reason that matters is logged with the checkpoint's name."""

  def filter(self, record: logging.LogRecord) -> bool:
    message = record.getMessage()
    unretrieved = message.startswith(
      ("Task exception was never retrieved", "Future exception was never retrieved")
    )
    return not (unretrieved and ("OCDBT" in message or "tensorstore" in message.lower()))


def _set_aside(manager: ocp.CheckpointManager, step: int, workdir: str, reason: str) -> None:
  """Moves the unreadable checkpoint `step` to `workdir/unreadable_checkpoints/<step>` (or
  `<step>.<k>` when an earlier one of that step is there: nothing is ever deleted), so that the
  run can save that step again."""
  path = os.path.join(manager.directory, str(step))
  aside = os.path.join(workdir, "unreadable_checkpoints", str(step))
  for k in itertools.count(1):
    if not os.path.exists(aside):
      break
    aside = os.path.join(workdir, "unreadable_checkpoints", f"{step}.{k}")
  logger.warning(
    "The checkpoint %s cannot be read (%s); moved to %s, trying the one before.",
    path,
    reason,
    aside,
  )
  if placement.is_primary():
    os.makedirs(os.path.dirname(aside), exist_ok=True)
    shutil.move(path, aside)
  if jax.process_count() > 1:  # Every process reloads once the checkpoint is moved.
    multihost_utils.sync_global_devices(f"jaxrank: set aside checkpoint {step}")
  manager.reload()


def restore_latest(
  manager: ocp.CheckpointManager, state, workdir: str, compute_dtype: str = "float32"
) -> tuple[Any, tuple[int, int]]:
  """The newest readable checkpoint's state and data position, or `state` and `(0, 0)` if none.

  A checkpoint saved by a run computing in another dtype than `compute_dtype` (`save`'s record;
  one saved before the record existed computed in float32) raises `ConfigError`: mixed and full
  precision are different training runs, and a run resumes only in its own.

  When the newest checkpoint does not restore, its files are read once more as saved (without
  this run's structure) to tell why:

  * they cannot be read (a truncated, corrupted or missing file): the checkpoint is moved out of
    the way (`_set_aside`, never deleted), with a warning that names it and says why, and the
    next newest is tried (TensorStore's noise about the failed read is dropped:
    `_quiet_closed_event_loop_errors`);
  * they can: the checkpoint is sound and the failure is not its own (the state's structure
    changed with the configuration or the code, or a bug), so nothing is moved and a
    `CheckpointError` says so, from the original exception. A passing failure (the restore
    succeeds when tried again) is no failure.
  """
  steps = sorted(manager.all_steps(), reverse=True)
  if steps:
    _quiet_closed_event_loop_errors()  # Before the first read: some come before it fails.
  for step in steps:
    try:
      restored = _restore(manager, step, state)
    except Exception as e:  # pylint: disable=broad-exception-caught
      reason = _why_unreadable(manager, step)
      if reason is not None:
        _set_aside(manager, step, workdir, reason)
        continue
      try:
        restored = _restore(manager, step, state)
      except Exception:  # pylint: disable=broad-exception-caught
        raise CheckpointError(
          f"The checkpoint {os.path.join(manager.directory, str(step))} can be read but not "
          f"restored into this run's state ({type(e).__name__}: {' '.join(str(e).split())[:300]}"
          "). Did the configuration or the code change since it was saved? Resume with the "
          "code that saved it, or train in a new workdir; the checkpoint is left as it is."
        ) from e
    _check_precision(manager, step, restored["data"], compute_dtype)
    return restored["state"], tuple(restored["data"]["position"])
  return state, (0, 0)


def _check_precision(manager: ocp.CheckpointManager, step: int, data: dict, wanted: str) -> None:
  """Raises ConfigError if checkpoint `step` was trained computing in another dtype."""
  saved = data.get("compute_dtype", "float32")
  if saved != wanted:
    raise config_lib.ConfigError(
      f"the checkpoint {os.path.join(manager.directory, str(step))} was trained computing in "
      f"{saved} and this run computes in {wanted}; resume it with "
      f"half_precision={saved == 'bfloat16'}, or train in a new workdir."
    )


def _quiet_closed_event_loop_errors() -> None:
  """Drops the "RuntimeError: Event loop is closed" tracebacks of a failed orbax restore.

  When one array of a checkpoint cannot be read, orbax's restore fails and closes its asyncio
  event loop while TensorStore's other reads are still running; each of them then reports, as an
  unraisable exception, that it could not call back into the closed loop (dozens of tracebacks,
  some after the restore has returned). They say nothing about the checkpoint, so they are
  dropped; every other unraisable exception goes to the hook installed before. The reads that
  failed in tasks nobody awaits are dropped from asyncio's log too (`_DropUnretrievedReadErrors`).
  """
  previous = sys.unraisablehook
  if getattr(previous, "drops_closed_event_loop_errors", False):
    return
  logging.getLogger("asyncio").addFilter(_DropUnretrievedReadErrors())

  def hook(unraisable):
    value = unraisable.exc_value
    if isinstance(value, RuntimeError) and str(value) == "Event loop is closed":
      return
    previous(unraisable)

  hook.drops_closed_event_loop_errors = True  # type: ignore[attr-defined]  # A marker attribute.
  sys.unraisablehook = hook


def save(
  manager: ocp.CheckpointManager,
  step: int,
  state,
  position: tuple[int, int],
  compute_dtype: str = "float32",
  num_classes: int | None = None,
) -> None:
  """Saves `state`, the data `position` and the network's `compute_dtype` as the checkpoint of
  `step` (asynchronously), with `num_classes`, the rows of the loss's own parameters (proxies,
  class weights) when it has any."""
  data: dict[str, Any] = {"position": list(position), "compute_dtype": compute_dtype}
  if num_classes is not None:
    data["num_classes"] = num_classes
  manager.save(
    step,
    args=ocp.args.Composite(state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data)),
    force=True,
  )


def save_step(
  manager: ocp.CheckpointManager,
  step: int,
  state,
  position: tuple[int, int],
  config: config_lib.Config,
) -> None:
  """`save` with what a run of `config` records beside its state: the network's compute dtype,
  and the rows of the loss's own parameters (`losses.OWN_PARAMETERS`), which a restore needs
  before it has the data."""
  own = losses.own_parameters(config.loss)
  rows = None if own is None else int(state[own.name].shape[0])
  save(manager, step, state, position, config_lib.compute_dtype(config), rows)


def num_classes(manager: ocp.CheckpointManager, step: int) -> int | None:
  """The rows of the loss's own parameters (training classes) of checkpoint `step`, None if it
  has none: what `step.init_state` needs to build a state that the checkpoint restores into,
  without the data. A checkpoint written before the key was renamed holds `num_proxies`."""
  data = manager.restore(step, args=ocp.args.Composite(data=ocp.args.JsonRestore()))["data"]
  return data.get("num_classes", data.get("num_proxies"))
