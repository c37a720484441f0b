"""Training an embedding with a jaxrank loss, evaluated on classes never seen in training.

`train_and_evaluate(config, workdir)` is the whole job, Flax-examples style: a `Config`
(`experiments/job/config.py`) in, a workdir out, the final retrieval metrics returned. This module
holds the loop and its interruption; the rest comes from its neighbours in `experiments/job/`:
the evaluation from `evaluation.py`, the optimiser from `optimizer.py`, the training state and
step from `step.py`, the mesh and where the state and batches live across processes from
`placement.py`, the workdir's checks and the checkpoints from `checkpoints.py`, the data from
`datasets.py`, `samplers.py` and `input_pipeline.py`, the network from `networks.py`, the loss
from `losses.py`, what is written and printed from `reporting.py`, and what a run shows while it
runs (progress, TensorBoard summaries, a profiler trace) from `monitoring.py`. In the workdir:

* `config.json`: the run's configuration (a rerun with another configuration refuses the workdir);
* `checkpoints/<step>/`: orbax checkpoints of the model, proxies, optimizer state, step, memory of
  past batches and data position, every `checkpoint_every` steps and at the end, the last
  `keep_checkpoints` kept. Rerunning the same command resumes from the latest complete one (a run
  killed during a save leaves an unfinished directory that orbax ignores and removes), reading the
  data from where it stopped, so an interrupted run ends exactly where an uninterrupted one does.
  Ctrl-C (SIGINT) lets the current step finish, saves a checkpoint and raises `Interrupted`. A
  checkpoint that cannot be read is moved to `unreadable_checkpoints/<step>/`, with a warning that
  names it, and the run resumes from the newest readable one;
* `metrics.jsonl`: one JSON record per logged step (`loss`, `learning_rate`, `images_per_second`,
  `input_wait_fraction`; `tanh_scale` for a hashing head, `device_memory_gib` where the backend
  reports it) and per evaluation (`recall@k`, `map@r`, `map`, `tie_aware_map`), each with its
  `step`;
* `events.out.tfevents.*`: the same records as TensorBoard summaries, with the configuration
  (each record written once, to both: `monitoring.Writer`; a resumed run keeps in both the records
  up to the step it resumes from), and in `plugins/profile/` the profiler trace of the steps that
  `profile_start` names;
* `curves.png`: the training loss and Recall@k / MAP@R over time, titled with the run's name.

While it trains, a run shows its progress (`monitoring.Progress`): a progress bar on a terminal, a
plain line per logged step off one. `input_wait_fraction` is the share of a logging interval's
wall time spent waiting for the next batch (see `_train_loop`); above `monitoring.INPUT_BOUND` the
run says once, in a warning, that it is input-bound.

One step: a batch of `P x K` images (`samples_per_class` images of each of `batch_size /
samples_per_class` classes) is embedded, `jaxrank.batch_retrieval` makes every image a query ranking
the rest of the batch (and the memory of past batches when `memory_batches > 0`), and the loss named
by `config.loss` (`experiments/job/losses.py`) is minimised with AdamW, a warm-up + cosine learning
rate, and a learning rate `head_lr_multiplier` times larger on the embedding layer (the papers use
10x). Optionally the gradient is computed in chunks (`chunk_size`, `jaxrank.chunked_value_and_grad`)
or the in-batch retrieval is sharded over every device (`shard=True`, `jaxrank.sharded_loss`).

The same job runs as several processes of one `jax.distributed` job (one per host, started by
`experiments.job.main`, which joins the job before anything else touches JAX), with `shard=True`:
one mesh over the devices of every process. Each process calls the same seeded sampler, reads only
its own contiguous slice of each global `P x K` batch (`input_pipeline.TrainBatches(share=...)`) and
makes its part of the global batch with `jax.make_array_from_process_local_data`; the training
state is replicated on every device. Orbax saves and restores checkpoints collectively (every
process calls it; the workdir must be one directory that every process sees, such as a shared
file system). Evaluation embeds a contiguous share of the test split in each process, and
`jaxrank.evaluate_retrieval(..., mesh=...)` splits the metrics' work over every device of every
process, each of which gets the metrics of the whole split. Only process 0 writes
`config.json`, `metrics.jsonl`, the summaries, the trace and `curves.png`, and shows the progress.
Ctrl-C is not deferred there (the processes could not agree on when to stop): a killed job resumes
from its last checkpoint, and ends where an uninterrupted one does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
import orbax.checkpoint as ocp
from flax import nnx

from experiments.job import check
from experiments.job import checkpoints
from experiments.job import config as config_lib
from experiments.job import datasets
from experiments.job import evaluation
from experiments.job import input_pipeline
from experiments.job import monitoring
from experiments.job import optimizer as optimizer_lib
from experiments.job import placement
from experiments.job import protocols
from experiments.job import reporting
from experiments.job import samplers
from experiments.job import step as step_lib
from jaxrank import models

# "experiments.job.train"; experiments.job.main shows its INFO lines.
logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# The job.


class Interrupted(KeyboardInterrupt):
  """Ctrl-C (SIGINT) stopped training after a checkpoint of `step` was saved in `workdir`.

  A `KeyboardInterrupt`, so that code that does not know it still stops; `experiments.job.main`
  prints it as one line and exits with status 130.
  """

  def __init__(self, name: str, workdir: str, step: int):
    if step:
      message = (
        f"{name} interrupted: step {step} is saved in {os.path.join(workdir, 'checkpoints')}; "
        "rerun the same command to resume."
      )
    else:
      message = f"{name} interrupted before its first step; rerun the same command to start it."
    super().__init__(message)
    self.name, self.workdir, self.step = name, workdir, step


@contextlib.contextmanager
def _deferred_interrupt() -> Iterator[list[bool]]:
  """Within it, a first Ctrl-C only appends to the list it gives (checked between steps), so that
  the step in flight finishes and the state can be saved; a second one interrupts at once.

  Outside the main thread (where signal handlers cannot be set) and in a job of several processes
  (where saving is collective, and the processes would not agree on the step at which to save)
  Ctrl-C is left as it is.
  """
  requested: list[bool] = []
  if threading.current_thread() is not threading.main_thread() or jax.process_count() > 1:
    yield requested
    return

  def handler(signum, frame):
    del signum, frame
    if requested:
      raise KeyboardInterrupt
    requested.append(True)

  previous = signal.signal(signal.SIGINT, handler)
  try:
    yield requested
  finally:
    signal.signal(signal.SIGINT, previous)


def check_run(
  config: config_lib.Config, workdir: str
) -> tuple[protocols.Splits, samplers.BatchesFn]:
  """Everything that can fail before a run writes anything: the config, the data, the workdir.

  `check.check_config`, then the summaries' writer and directory (`monitoring.check_writer`), then
  the data against the sampler (`samplers.make_sampler`), then the workdir (one holding a run
  of another configuration is refused). Nothing is written.

  Returns:
    `(splits, sampler)`: the splits and test protocol (`datasets.training_splits`) and the
    training sampler.

  Raises:
    ConfigError: with a sentence that says what to change.
  """
  check.check_config(config)
  monitoring.check_writer(workdir)
  splits = datasets.training_splits(config)
  sampler = samplers.make_sampler(config, splits.train)
  checkpoints.check_workdir(config, workdir)
  return splits, sampler


class _Loop(NamedTuple):
  """What the training loop of `train_and_evaluate` works with."""

  config: config_lib.Config
  name: str
  workdir: str
  manager: ocp.CheckpointManager
  mesh: jax.sharding.Mesh | None
  train_step: Callable[..., Any]
  schedule: optax.Schedule
  writer: monitoring.Writer | monitoring.NoWriter
  progress: monitoring.Progress
  profile: monitoring.Profile


class _Clock:
  """The wall time of a logging interval: since when, from which step, how long spent waiting for
  the next batch."""

  def __init__(self, step: int, since: float | None = None):
    self.since = time.perf_counter() if since is None else since
    self.step, self.waited = step, 0.0


def _train_loop(loop: _Loop, state, step: int, batches, interrupted: list[bool], run_eval):
  """Trains from `step` to `config.num_steps`, logging, saving and evaluating as the config says.

  Returns the state, its step and the last evaluation (`None` if none ran). A first Ctrl-C
  (`interrupted`) saves the state at the next step boundary and raises `Interrupted`.
  """
  config = loop.config
  metrics = None
  clock, saved = _Clock(step), step
  first_bad = placement.replicate(jnp.int32(-1), loop.mesh)
  while step < config.num_steps:
    if interrupted:
      if step > saved:
        step_lib.check_finite(loop.name, first_bad, saved)
        checkpoints.save_step(loop.manager, step, state, batches.position, config)
        saved = step
      loop.manager.wait_until_finished()
      raise Interrupted(loop.name, loop.workdir, saved)
    loop.profile.before(step + 1)
    with loop.profile.annotate(step + 1):
      # The step is asynchronous: it returns once dispatched, and the loop blocks on the device
      # only at logging steps (`float(loss)`), saves and evaluations (or once JAX's queue of
      # dispatched steps is full). The device works through the queued steps meanwhile, so the
      # time spent here, waiting for tf.data's next batch, is the honest sign of an input-bound
      # run: time in which the host has nothing to give the device.
      waiting = time.perf_counter()
      batch = next(batches)
      clock.waited += time.perf_counter() - waiting
      state, loss, first_bad = loop.train_step(
        state,
        placement.global_batch(loop.mesh, batch["image"], config.batch_size),
        placement.global_batch(loop.mesh, batch["label"], config.batch_size),
        first_bad,
      )
    step += 1
    loop.profile.after(step, (state, loss))
    if step % config.log_every == 0 or step == config.num_steps:
      step_lib.check_finite(loop.name, first_bad, saved)
      clock = _log_step(loop, step, float(loss), clock)
    loop.progress.update()
    if step % config.checkpoint_every == 0 or step == config.num_steps:
      step_lib.check_finite(loop.name, first_bad, saved)
      checkpoints.save_step(loop.manager, step, state, batches.position, config)
      loop.writer.flush()
      saved = step
    if step % config.eval_every == 0 or step == config.num_steps:
      step_lib.check_finite(loop.name, first_bad, saved)
      metrics = run_eval(state, step)
  if interrupted:  # During the last steps: the run is saved and done; stop a sweep here.
    raise Interrupted(loop.name, loop.workdir, saved)
  return state, step, metrics


def _log_step(loop: _Loop, step: int, loss: float, clock: _Clock) -> _Clock:
  """Writes the record of `step` (its loss, learning rate, tanh scale; the interval's speed and
  input wait; the device's memory) and shows it; returns the clock of the next interval."""
  now = time.perf_counter()
  elapsed = now - clock.since
  record = {
    "step": step,
    "loss": loss,
    "learning_rate": float(loop.schedule(step - 1)),
    "images_per_second": (step - clock.step) * loop.config.batch_size / elapsed,
    "input_wait_fraction": clock.waited / elapsed,
  }
  scale = step_lib.tanh_scale(loop.config, jnp.int32(step - 1))  # As the step of `step` used.
  if scale is not None:
    record["tanh_scale"] = float(scale)
  memory = monitoring.device_memory_gib()
  if memory is not None:
    record["device_memory_gib"] = memory
  loop.writer.write(record)
  loop.progress.show(record)
  return _Clock(step, now)


def train_and_evaluate(
  config: config_lib.Config, workdir: str, *, name: str | None = None
) -> dict[str, float]:
  """Trains (or resumes training) as `config` says, evaluating periodically; returns final metrics.

  Like the entry points, it first hides the GPUs from TensorFlow
  (`input_pipeline.hide_gpus_from_tensorflow`), so that tf.data leaves their memory to JAX when
  the job is called from Python rather than from `experiments.job.main`. Everything that can fail
  before training (`check_run`) fails before anything is written to `workdir`.

  Args:
    config: the run's `Config`.
    workdir: directory for the checkpoints, metrics, plot and config; a workdir that already holds
      checkpoints of the same config resumes from the newest readable one (logging "resuming from
      step N").
    name: the run's name on the progress bar, in the plot's title and in messages (default: the
      workdir's last component).

  Returns:
    The final evaluation on the test split: `recall@k` for `config.eval_ks`, `map@r`, `map`,
    `tie_aware_map` (floats) for each evaluation of the data set's protocol (prefixed with its
    name where it has one: `small/recall@1`, `protocols.metric_name`), and `step`.

  Raises:
    ConfigError: a configuration that cannot run, or a workdir that holds a run of another
      configuration, before anything is written.
    Interrupted: Ctrl-C (SIGINT) during training, after the state was saved.
    checkpoints.CheckpointError: the newest readable checkpoint does not fit this run's state.
  """
  input_pipeline.hide_gpus_from_tensorflow()
  name = name or os.path.basename(os.path.normpath(workdir))
  splits, sampler = check_run(config, workdir)
  train_data = splits.train
  checkpoints.claim_workdir(config, workdir)

  tx = optimizer_lib.make_optimizer(config)
  schedule = optimizer_lib.learning_rate_schedule(config)
  mesh = placement.mesh(config)
  model, state = step_lib.init_state(config, tx, train_data.num_classes)
  state = placement.replicate(state, mesh)
  train_step = step_lib.make_train_step(config, model, tx, mesh)
  embed_fn = evaluation.make_embed_fn(config, model)
  share = placement.train_share(config, mesh)
  primary = placement.is_primary()

  def run_eval(state, step):
    metrics = evaluation.evaluate(config, embed_fn, state, splits.test, splits.evaluations)
    metrics.update(evaluation.evaluate_others(config, embed_fn, state, train_data))
    writer.write({"step": step, **metrics})
    writer.flush()
    return metrics

  manager = checkpoints.checkpoint_manager(config, workdir)
  writer: monitoring.Writer | monitoring.NoWriter = monitoring.NoWriter()
  progress, profile = None, monitoring.Profile(config, workdir, primary)
  try:
    # From here on, a first Ctrl-C stops the run at the next step boundary, after saving.
    with _deferred_interrupt() as interrupted:
      state, position = checkpoints.restore_latest(
        manager, state, workdir, config_lib.compute_dtype(config)
      )
      step = int(state["step"])
      if step and primary:
        logger.info("%s: resuming from step %d (%s).", name, step, workdir)
      writer = monitoring.Writer(config, workdir, step) if primary else monitoring.NoWriter()
      progress = monitoring.Progress(config, step, name, primary)
      metrics = run_eval(state, step) if step == 0 else None
      batches = input_pipeline.TrainBatches(config, train_data, sampler, position, share)
      loop = _Loop(
        config, name, workdir, manager, mesh, train_step, schedule, writer, progress, profile
      )
      state, step, last = _train_loop(loop, state, step, batches, interrupted, run_eval)
      metrics = metrics if last is None else last
  finally:
    profile.stop()
    if progress is not None:
      progress.close()
    writer.flush()
    manager.wait_until_finished()
    manager.close()
  if metrics is None:  # Resumed a finished run: its final evaluation is in the metrics file.
    records = reporting.read_metrics(workdir)
    done = [r for r in records if reporting.evaluation_names(r) and r["step"] == step]
    metrics = done[-1] if done else run_eval(state, step)
  writer.close()
  if primary:
    _plot_curves(config, workdir, name)
  return {**metrics, "step": step}


def _plot_curves(config: config_lib.Config, workdir: str, name: str) -> None:
  """`curves.png`, titled "<run>: <loss> on <data set>" (without "<run>: " for a run named after
  its loss)."""
  what = f"{config.loss} on {config.dataset}"
  if not config.num_steps:  # The untrained baseline: no loss panel either.
    what = f"{config.dataset}, not trained"
  reporting.plot_curves(workdir, title=what if name == config.loss else f"{name}: {what}")


def restore_model(
  config: config_lib.Config, workdir: str, step: int | None = None
) -> models.EmbeddingModel:
  """The network of a run's checkpoint (the latest unless `step` is given), in inference mode.

  A hashing model returns the relaxed codes `tanh(alpha f)` when called with `scale=alpha`; binarise
  them with `jaxrank.hashing.binarize` as the evaluation does.

  Raises:
    FileNotFoundError: the workdir holds no checkpoint (of that step).
  """
  check.check_config(config)
  tx = optimizer_lib.make_optimizer(config)
  manager = checkpoints.checkpoint_manager(config, workdir)
  try:
    step = manager.latest_step() if step is None else step
    if step is None or step not in manager.all_steps():
      raise FileNotFoundError(
        f"restore_model: {workdir!r} holds no checkpoint"
        f"{'' if step is None else f' of step {step}'}; it has steps {list(manager.all_steps())}."
      )
    graphs, state = step_lib.init_state(config, tx, checkpoints.num_classes(manager, step))
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(state)))
  finally:
    manager.close()
  state = restored["state"]
  return nnx.merge(graphs.eval_graph, state["params"], state["rest"])
