"""What a run shows and records while it runs: progress, TensorBoard summaries, a profiler trace.

* `Progress`: on a terminal, tqdm's bar with the loss, images/s and the input wait; off one
  (output redirected to a file, CI, a cluster's job log), a plain line per logged step through
  the logger; and, once, a warning when the run is input-bound (`INPUT_BOUND`).
* `Writer`: the one place a run logs. Each record goes to `metrics.jsonl`
  (`reporting.MetricsWriter`) and to `SummaryWriter`, which writes it as TensorBoard scalars in
  the workdir itself through `tf.summary` (so that TensorBoard names each run by its workdir, as
  the Flax examples do: `fastap`, not `fastap/tensorboard`): `train/<key>` for the records of
  logged steps (`loss`, `learning_rate`, `images_per_second`, `input_wait_fraction`, the
  `tanh_scale` of hashing runs, `device_memory_gib` where the backend reports it), `eval/<key>`
  for those of evaluations (`recall@k`, `map@r`, `map`, `tie_aware_map`; the `seen/...` metrics
  keep their names), and the run's configuration as text at step 0. A resumed run keeps in both
  what `reporting.MetricsWriter` keeps, the records up to the resumed step: the event files are
  written anew from them, so that each step appears once in every curve, whatever reads the files.
  `tensorboard --logdir <workdir, or a sweep's directory>` shows them, runs side by side.
* `adopt_old_directory`: workdirs of earlier versions hold their summaries and traces in
  `<workdir>/tensorboard/` (`OLD_DIRECTORY`). A run resumed in one removes the old event files
  rather than moving them: the writer writes the event files anew from `metrics.jsonl` anyway, and
  left there they would be a second run, `<workdir>/tensorboard`, repeating every curve. Its
  profiler traces move to `<workdir>/plugins/profile/` (one whose name is taken there stays where
  it was), and the old directory is removed once empty; anything else in it is left alone.
* `device_memory_gib`: the memory in use on this process's first device, where the backend says
  (GPUs and TPUs; `memory_stats()` is None on the CPU).
* `Profile`: a `jax.profiler` trace of the steps of the config's window (`profile_start`,
  `profile_num_steps`) in `<workdir>/plugins/profile/<time>/`, where TensorBoard's Profile tab
  (the `tensorboard-plugin-profile` package) finds it; the same directory holds a
  `perfetto_trace.json.gz` for ui.perfetto.dev.
* `check_writer`: the writer's packages and directory, checked before a run writes anything
  (`train.check_run`).

Only the primary process writes, traces and shows progress. TensorFlow and TensorBoard are imported
when a writer is checked or made, not with this module, as in `input_pipeline`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import os
import sys
from typing import Any

import jax

from experiments.job import config as config_lib
from experiments.job import reporting

# "experiments.job.monitoring"; experiments.job.main shows its INFO lines.
logger = logging.getLogger(__name__)

# Where earlier versions wrote a run's summaries and traces, in its workdir (`adopt_old_directory`);
# now the workdir itself holds them: `tensorboard --logdir` of it or of a directory above.
OLD_DIRECTORY = "tensorboard"
# How tf.summary names its event files.
EVENT_FILE_PREFIX = "events.out.tfevents."
# Where `jax.profiler` writes its traces below the directory it is given, and TensorBoard's Profile
# tab looks for them.
PROFILE_DIRECTORY = os.path.join("plugins", "profile")
# Above this share of a logging interval's wall time spent waiting for the next batch, a run is
# input-bound (said once, in a warning).
INPUT_BOUND = 0.2


class Progress:
  """What a run shows while it trains (process 0 alone; nothing with `config.progress_bar=False`).

  On a terminal, tqdm's bar, its postfix the last record's loss, images/s and input wait. Off one
  (`sys.stderr` redirected to a file, CI, a cluster's job log), the bar's carriage-return refreshes
  would pile up in the file: a plain line per logged step instead, through the logger (which
  `experiments.job.main` shows). Either way, the first logging interval whose input wait is above
  `INPUT_BOUND` is named in a warning, once; the run's first interval, which starts tf.data, is
  not counted. A run that shows no progress (`progress_bar=False`: the tests, the comparison's
  many runs) gives no warning either; its records and summaries hold the input wait all the same.
  """

  def __init__(self, config: config_lib.Config, step: int, name: str, primary: bool):
    from tqdm import auto as tqdm  # pylint: disable=g-import-not-at-top

    shown = config.progress_bar and primary
    self.lines = shown and not sys.stderr.isatty()
    self.bar = tqdm.tqdm(
      total=config.num_steps,
      initial=step,
      desc=name,
      disable=not shown or self.lines,
      unit="step",
      dynamic_ncols=True,
      leave=False,
    )
    self.name, self.num_steps, self.shown = name, config.num_steps, shown
    self.logged, self.warned = 0, False

  def update(self) -> None:
    self.bar.update(1)

  def show(self, record: dict[str, Any]) -> None:
    """Shows a logged step's record (see the class's docstring)."""
    loss, speed, wait = record["loss"], record["images_per_second"], record["input_wait_fraction"]
    if self.lines:
      logger.info(
        "%s: step %d/%d, loss %.4f, learning rate %.3g, %.0f images/s, input wait %.0f%%",
        self.name,
        record["step"],
        self.num_steps,
        loss,
        record["learning_rate"],
        speed,
        100 * wait,
      )
    else:
      self.bar.set_postfix(loss=f"{loss:.4f}", img_per_s=f"{speed:.0f}", wait=f"{wait:.0%}")
    self.logged += 1
    if self.shown and self.logged > 1 and wait > INPUT_BOUND and not self.warned:
      self.warned = True
      logger.warning(
        "%s is input-bound: %.0f%% of the logging interval to step %d went waiting for the next "
        "batch (tf.data) rather than training; give the input pipeline more CPU cores, or keep "
        "the images resized to the crop's size (docs/guide/real_data.rst, 'Input throughput').",
        self.name,
        100 * wait,
        record["step"],
      )

  def close(self) -> None:
    self.bar.close()


class NoWriter:
  """The `Writer` of processes other than 0: writes nothing."""

  def write(self, record: dict[str, Any]) -> None:
    del record

  def flush(self) -> None:
    pass

  def close(self) -> None:
    pass


class Writer:
  """The one place a run logs (process 0): each record goes to `metrics.jsonl` and to the
  TensorBoard summaries, which start from the records that the metrics file keeps on resuming."""

  def __init__(self, config: config_lib.Config, workdir: str, step: int):
    self.metrics = reporting.MetricsWriter(workdir, step)
    self.summaries = SummaryWriter(config, workdir, self.metrics.kept)

  def write(self, record: dict[str, Any]) -> None:
    self.metrics.write(record)
    self.summaries.write(record)

  def flush(self) -> None:
    self.summaries.flush()

  def close(self) -> None:
    self.summaries.close()


def check_writer(workdir: str) -> None:
  """Raises ConfigError, writing nothing, if the summaries cannot be written.

  The writer needs TensorFlow (`tf.summary`) and TensorBoard (which implements its summaries),
  both in the `train` extra, and a directory it can create or write: the nearest existing one of
  the workdir and its parents must be a writable directory.
  """
  for module, package in (("tensorflow", "tensorflow-cpu"), ("tensorboard", "tensorboard")):
    try:
      importlib.import_module(module)
    except ModuleNotFoundError as e:
      if e.name != module:  # Installed, but something it needs is not: its own message says.
        raise
      raise config_lib.ConfigError(
        f"the run writes TensorBoard summaries with tf.summary, which needs {module}, not "
        f"installed here: pip install -e '.[train]' (the train extra), or pip install {package}."
      ) from None
  directory = os.path.abspath(workdir)
  existing = directory
  while not os.path.lexists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    problem = "is not a directory"
  elif not os.access(existing, os.W_OK | os.X_OK):
    problem = "is not writable"
  else:
    return
  raise config_lib.ConfigError(
    f"the run's summaries go in {directory}, but {existing} {problem}; use a workdir where you "
    "can write."
  )


def scalars(record: dict[str, Any]) -> dict[str, float]:
  """A record of `metrics.jsonl` as TensorBoard tags and values (its `step` apart).

  A logged step's (it has a `loss`) values go under `train/`, an evaluation's under `eval/`; a key
  that names its group already (`seen/map@r`) keeps it.
  """
  group = "train" if "loss" in record else "eval"
  return {
    key if "/" in key else f"{group}/{key}": float(value)
    for key, value in record.items()
    if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)
  }


def config_text(config: config_lib.Config) -> str:
  """The configuration as a Markdown table, which TensorBoard's Text tab renders."""
  rows = [f"| {k} | `{v!r}` |" for k, v in dataclasses.asdict(config).items()]
  return "\n".join(["| field | value |", "| --- | --- |", *rows])


class SummaryWriter:
  """Writes records (`write`) as scalars in the workdir; see the module's docstring.

  Made with the records that the run keeps (`reporting.MetricsWriter.kept`): the event files of
  an earlier session are removed (an older version's directory adopted, `adopt_old_directory`)
  and those records written again, after the configuration.
  """

  def __init__(self, config: config_lib.Config, workdir: str, kept: list[dict[str, Any]]):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    os.makedirs(workdir, exist_ok=True)
    adopt_old_directory(workdir)
    for name in os.listdir(workdir):
      if name.startswith(EVENT_FILE_PREFIX):
        os.remove(os.path.join(workdir, name))
    self._tf = tf
    self._writer = tf.summary.create_file_writer(workdir)
    with self._writer.as_default():
      tf.summary.text("config", config_text(config), step=0)
    for record in kept:
      self.write(record)
    self.flush()

  def write(self, record: dict[str, Any]) -> None:
    with self._writer.as_default():
      for tag, value in scalars(record).items():
        self._tf.summary.scalar(tag, value, step=record["step"])

  def flush(self) -> None:
    self._writer.flush()

  def close(self) -> None:
    self._writer.close()


def adopt_old_directory(workdir: str) -> None:
  """Empties an earlier version's `<workdir>/tensorboard/` into the workdir (module docstring).

  Its event files are removed (the writer writes them anew, in the workdir), its profiler traces
  moved to `<workdir>/plugins/profile/` unless a trace of that name is there already, and the
  directory removed if nothing else is left in it. Nothing happens without the directory.
  """
  old = os.path.join(workdir, OLD_DIRECTORY)
  if not os.path.isdir(old):
    return
  for name in os.listdir(old):
    if name.startswith(EVENT_FILE_PREFIX):
      os.remove(os.path.join(old, name))
  old_traces = os.path.join(old, PROFILE_DIRECTORY)
  traces = os.path.join(workdir, PROFILE_DIRECTORY)
  if os.path.isdir(old_traces):
    os.makedirs(traces, exist_ok=True)
    for name in os.listdir(old_traces):
      if not os.path.lexists(os.path.join(traces, name)):
        os.rename(os.path.join(old_traces, name), os.path.join(traces, name))
  # The emptied directories, deepest first.
  for directory in (old_traces, os.path.dirname(old_traces), old):
    try:
      os.rmdir(directory)
    except OSError:  # Absent, or something is left in it.
      pass


def device_memory_gib() -> float | None:
  """GiB in use on this process's first device, or None where the backend does not say (CPU)."""
  stats = jax.local_devices()[0].memory_stats()
  if not stats or "bytes_in_use" not in stats:
    return None
  return stats["bytes_in_use"] / 2**30


class Profile:
  """Traces the steps `config.profile_start` to `profile_start + profile_num_steps - 1` (numbered
  from 1, as logged) with `jax.profiler`, in the primary process.

  The loop calls `before(step)` and `after(step, outputs)` around each step (`annotate(step)` marks
  it in the trace, for the Profile tab's step view), and `stop()` when it ends, early or not. The
  trace waits for the last traced step's `outputs` before it stops, so that it holds the device's
  work of every traced step. A run resumed inside the window takes no trace.
  """

  def __init__(self, config: config_lib.Config, workdir: str, primary: bool):
    self.first = config.profile_start if primary else None
    self.last = (self.first or 0) + config.profile_num_steps - 1
    self.directory = workdir
    self.active = False

  def before(self, step: int) -> None:
    if step == self.first:
      jax.profiler.start_trace(self.directory, create_perfetto_trace=True)
      self.active = True

  def annotate(self, step: int) -> contextlib.AbstractContextManager:
    if not self.active:
      return contextlib.nullcontext()
    return jax.profiler.StepTraceAnnotation("train", step_num=step)

  def after(self, step: int, outputs: Any) -> None:
    if self.active and step == self.last:
      jax.block_until_ready(outputs)
      self.stop()
      logger.info(
        "profiler trace of steps %d-%d in %s (TensorBoard's Profile tab)",
        self.first,
        self.last,
        os.path.join(self.directory, PROFILE_DIRECTORY),
      )

  def stop(self) -> None:
    if self.active:
      jax.profiler.stop_trace()
      self.active = False
