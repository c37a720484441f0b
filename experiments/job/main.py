"""Runs a config: `python -m experiments.job.main --config FILE --workdir DIR [--set k=v ...]`.

A config file defines `get_config() -> experiments.job.config.Config` and, optionally,
`get_sweep() -> {run name: {field: value}}`: then every run of the sweep trains in
`DIR/<run name>`, an untrained network (the same config with `num_steps=0`) is evaluated in
`DIR/untrained` (and, with `raw_pixels_baseline`, retrieval on the raw pixels, the row
`raw_pixels`), and a table of the final metrics on the test split (classes unseen in training) is
printed and written to `DIR/results.json`. Rerunning the same command resumes every unfinished run
from its latest checkpoint ("resuming from step N") and reuses finished ones. `--set field=value`
(repeatable) overrides a field of the config for every run, e.g. `--set num_steps=50`; values are
Python literals (`--set loss_kwargs={'num_intervals':20}`) or plain strings
(`--set loss=smoothap`), and must be of the field's type. A field that the sweep sets cannot be
`--set`.

What the command does when things go wrong:

* a config that cannot run (an unknown name, a value of the wrong type, a hyperparameter that the
  loss rejects, a `--set` of a swept field, a workdir of another configuration) prints one line,
  `experiments.job.main: error: ...`, and exits with status 2 before anything is written: every run
  of a sweep is checked (`train.check_run`) before the first one starts;
* Ctrl-C (SIGINT) lets the current step finish, saves a checkpoint, prints one line and exits with
  status 130; rerunning the command resumes;
* a checkpoint that cannot be read is named in a warning and set aside, and the run resumes from the
  newest readable one (`train.train_and_evaluate`).

Several processes (one per host, or several on one machine) run one job with `jax.distributed`:
before anything else touches JAX the command joins the job (`distributed.initialize_distributed`),
one that JAX detects (SLURM, Open MPI, Cloud TPU pods, Kubernetes) or the one that
`--coordinator_address HOST:PORT --num_processes N --process_id I` describe; with neither, it runs
alone. `experiments/job/distributed.py` says how, and `train.train_and_evaluate` what each process
does (the config needs `shard=True`).

Only process 0 prints the table and writes `results.json`.

`--help` lists the losses and the config fields; it imports neither JAX nor TensorFlow, which are
imported (with TensorFlow's start-up logging silenced) only once a run starts.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from experiments.job import config as config_lib
from experiments.job import distributed
from experiments.job import losses
from experiments.job import reporting

PROG = "experiments.job.main"
EXIT_CONFIG_ERROR = 2  # As argparse exits for bad flags.
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shells' convention.
EXIT_DIVERGED = 1

logger = logging.getLogger("experiments.job.main")  # Also when run as __main__.


def load_config_module(path: str):
  """Imports a config file by path.

  Raises:
    ConfigError: the file does not exist or defines no `get_config()`.
  """
  if not os.path.isfile(path):
    raise config_lib.ConfigError(
      f"--config {path!r} is not a file; configs live in experiments/job/configs/."
    )
  spec = importlib.util.spec_from_file_location(f"_jaxrank_config_{abs(hash(path))}", path)
  assert spec is not None and spec.loader is not None  # Both are there for a .py file.
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if not hasattr(module, "get_config"):
    raise config_lib.ConfigError(f"config file {path!r} defines no get_config().")
  return module


def parse_value(text: str) -> Any:
  """A command-line value: a Python literal (`10`, `0.5`, `[2, 3]`, `0.02,2` is a tuple), else the
  string itself (`smoothap`)."""
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def _parse_overrides(items: Sequence[str]) -> dict[str, tuple[Any, str]]:
  """`["field=value", ...]` -> field -> (value, how the user wrote it)."""
  parsed = {}
  for item in items:
    if "=" not in item:
      raise config_lib.ConfigError(f"--set {item!r} must look like field=value.")
    key, text = item.split("=", 1)
    parsed[key.strip()] = (parse_value(text), f"--set {item}")
  return parsed


def apply_overrides(
  config: config_lib.Config, overrides: Sequence[str] | dict[str, Any]
) -> config_lib.Config:
  """`config` with fields replaced: from `{"field": value}` or `["field=value", ...]` strings.

  Each value must be of its field's type (`config.field_types`): a list is taken as a tuple and
  an int as a float where the field is one; `'0'` for an int field or `yes` for a bool one is an
  error.

  Raises:
    ConfigError: an item that is not `field=value`, an unknown field, or a value of another type,
      with what to change.
  """
  if isinstance(overrides, dict):
    given = {k: (v, f"{k}={v!r}") for k, v in overrides.items()}
  else:
    given = _parse_overrides(overrides)
  fields = {f.name: f for f in dataclasses.fields(config_lib.Config)}
  unknown = sorted(set(given) - set(fields))
  if unknown:
    raise config_lib.ConfigError(
      f"{unknown} are not fields of the config; the fields are {sorted(fields)} "
      f"(`python -m {PROG} --help` lists them with their types)."
    )
  types = config_lib.field_types()
  values = {}
  for key, (value, shown) in given.items():
    annotation = types[key]
    if isinstance(value, list):
      value = tuple(value)
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
      value = float(value)
    if not config_lib.conforms(value, annotation):
      got = f"the string {value!r}" if isinstance(value, str) else repr(value)
      raise config_lib.ConfigError(
        f"{shown}: {key} must be {config_lib.describe_type(annotation)} (default "
        f"{_default(fields[key])!r}), got {got}; values are Python literals."
      )
    values[key] = value
  return dataclasses.replace(config, **values)


def _default(field: dataclasses.Field) -> Any:
  if field.default_factory is not dataclasses.MISSING:
    return field.default_factory()
  return field.default


def run_sweep(
  base: config_lib.Config,
  runs: dict[str, config_lib.Config],
  workdir: str,
  *,
  untrained: bool = True,
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
  """Trains each run in `workdir/<name>`, after checking every one; first, optionally, `base`
  untrained (`num_steps=0`) in `workdir/untrained`, and with `base.raw_pixels_baseline` retrieval
  on the raw pixels (`evaluation.evaluate_raw_pixels`, the row "raw_pixels"; nothing written).

  Every run (the baseline included) goes through `train.check_run` before the first one starts,
  so that a config error in the last run of a sweep fails before anything is written.

  Returns:
    `(results, seconds)`: run name -> final metrics (`"untrained"` first when asked) and run name
    -> wall time in seconds.

  Raises:
    ConfigError: a run that cannot run, before any training.
  """
  from experiments.job import evaluation  # pylint: disable=g-import-not-at-top
  from experiments.job import train  # pylint: disable=g-import-not-at-top

  for reserved in ("untrained", "raw_pixels"):
    if reserved in runs:
      raise config_lib.ConfigError(
        f"a run of a sweep cannot be called {reserved!r}: that is a baseline's name."
      )
  # No step to trace in the untrained baseline: a profile window is the trained runs'.
  untrained_config = dataclasses.replace(base, num_steps=0, profile_start=None)
  baseline = {"untrained": untrained_config} if untrained else {}
  runs = {**baseline, **runs}
  for name, config in runs.items():
    try:
      train.check_run(config, os.path.join(workdir, name))
    except config_lib.ConfigError as e:
      raise config_lib.ConfigError(f"run {name!r}: {e}") from e
  results, seconds = {}, {}
  for name, config in runs.items():
    start = time.perf_counter()
    results[name] = train.train_and_evaluate(config, os.path.join(workdir, name), name=name)
    seconds[name] = time.perf_counter() - start
    logger.info("%s: %.1f s", name, seconds[name])
    if name == "untrained" and base.raw_pixels_baseline:
      start = time.perf_counter()
      results["raw_pixels"] = evaluation.evaluate_raw_pixels(base)
      seconds["raw_pixels"] = time.perf_counter() - start
  return results, seconds


def prepare(
  config_path: str, overrides: Sequence[str] = ()
) -> tuple[config_lib.Config, dict[str, config_lib.Config] | None]:
  """The config of a file with `--set` overrides, and its sweep's runs (None without a sweep).

  Only the file and the overrides are read (nothing heavy is imported), so that a mistake in them
  fails at once; `train.check_run` checks the rest.

  Raises:
    ConfigError: a missing file, a bad override, or a `--set` of a field that the sweep sets.
  """
  module = load_config_module(config_path)
  config = apply_overrides(module.get_config(), overrides)
  sweep = module.get_sweep() if hasattr(module, "get_sweep") else None
  if not sweep:
    return config, None
  given = _parse_overrides(overrides)
  for key in given:
    setters = [name for name, changes in sweep.items() if key in changes]
    if setters:
      raise config_lib.ConfigError(
        f"{given[key][1]}: the sweep of {config_path} sets {key} in its runs "
        f"{', '.join(setters)}, so this value would be overridden; drop the --set, or change "
        "get_sweep()."
      )
  return config, {name: apply_overrides(config, changes) for name, changes in sweep.items()}


def run(
  config_path: str, workdir: str, overrides: Sequence[str] = ()
) -> dict[str, dict[str, float]]:
  """Runs a config file (its sweep and an untrained baseline, if any); returns the metrics.

  Raises:
    ConfigError: a config that cannot run, before anything is written.
  """
  from experiments.job import train  # pylint: disable=g-import-not-at-top

  config, runs = prepare(config_path, overrides)
  if runs is None:
    return {config.loss: train.train_and_evaluate(config, workdir, name=config.loss)}
  results, _ = run_sweep(config, runs, workdir)
  import jax  # pylint: disable=g-import-not-at-top

  if jax.process_index() == 0:
    with open(os.path.join(workdir, "results.json"), "w") as f:
      json.dump(results, f, indent=1)
  return results


def _help_epilog() -> str:
  """The losses and the config fields, for `--help` (from data: nothing heavy is imported)."""
  lines = ["losses (--set loss=NAME; hyperparameters with --set loss_kwargs={...}):"]
  width = max(map(len, losses.SUMMARIES))
  lines += [f"  {name:{width}}  {summary}" for name, summary in losses.SUMMARIES.items()]
  lines += ["", "config fields (--set FIELD=VALUE; FIELD  type  default):"]
  fields = dataclasses.fields(config_lib.Config)
  width = max(len(f.name) for f in fields)
  type_width = max(len(str(f.type)) for f in fields)
  lines += [f"  {f.name:{width}}  {str(f.type):{type_width}}  {_default(f)!r}" for f in fields]
  return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
    prog=f"python -m {PROG}",
    description=__doc__.split("\n")[0],
    epilog=_help_epilog(),
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  parser.add_argument("--config", required=True, help="a config file in experiments/job/configs/")
  parser.add_argument("--workdir", required=True, help="where checkpoints, metrics and plots go")
  parser.add_argument(
    "--set",
    action="append",
    default=[],
    metavar="FIELD=VALUE",
    help="override a config field (repeatable); a Python literal or a plain string",
  )
  distributed.add_flags(parser)
  return parser


def _configure_logging() -> None:
  """Warnings from everyone, and the INFO lines of `experiments` ("resuming from step N")."""
  # force=True: a module imported before (absl, TensorFlow) may have given the root logger a
  # handler already, which would make basicConfig do nothing and lose those lines.
  logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr, force=True)
  logging.getLogger("experiments").setLevel(logging.INFO)


def _exit(status: int, message: str) -> NoReturn:
  sys.stderr.write(f"{PROG}: {' '.join(message.split())}\n")
  raise SystemExit(status)


def import_tensorflow_quietly() -> None:
  """Imports TensorFlow without letting its C++ start-up lines (oneDNN, absl, CUDA) reach the user.

  `TF_CPP_MIN_LOG_LEVEL=2` (set here when unset) quiets TensorFlow's later logging, but not the
  lines written while its libraries load ("All log messages before absl::InitializeLog()", "oneDNN
  custom operations are on" twice, with TensorFlow 2.21), so the import runs with the process's
  stderr (file descriptor 2) captured; what it wrote is shown only if the import fails. Call it
  before anything imports TensorFlow; afterwards it does nothing. Where TensorFlow is not
  installed it does nothing either: the run's checks say so, in one line.
  """
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  if "tensorflow" in sys.modules:
    return
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)
    try:
      import tensorflow  # noqa: F401  # pylint: disable=g-import-not-at-top,unused-import
    except BaseException as e:
      if isinstance(e, ModuleNotFoundError) and e.name == "tensorflow":
        return  # Not installed (the `finally` below gives stderr back).
      os.dup2(saved, 2)
      captured.seek(0)
      sys.stderr.write(captured.read().decode(errors="replace"))
      raise
    finally:
      os.dup2(saved, 2)
      os.close(saved)


def main(argv: Sequence[str] | None = None) -> None:
  """The command line; exits with status 2 for a bad config, 130 when interrupted (see above)."""
  args = _parser().parse_args(argv)
  start = time.perf_counter()
  try:
    prepare(args.config, args.set)  # The file and the --set values, before any heavy import.
    import_tensorflow_quietly()
    # pylint: disable=g-import-not-at-top
    from experiments.job import input_pipeline

    input_pipeline.hide_gpus_from_tensorflow()
    _configure_logging()
    distributed.initialize_distributed(
      args.coordinator_address, args.num_processes, args.process_id
    )
    results = run(args.config, args.workdir, args.set)
  except config_lib.ConfigError as e:
    _exit(EXIT_CONFIG_ERROR, f"error: {e}")
  except KeyboardInterrupt as e:  # train.Interrupted says what was saved.
    _exit(
      EXIT_INTERRUPTED,
      str(e) or "interrupted; rerun the same command to resume from the last checkpoint.",
    )
  except FloatingPointError as e:  # A diverged run: its checkpoints are kept.
    _exit(EXIT_DIVERGED, f"error: {e}")
  import jax  # pylint: disable=g-import-not-at-top

  if jax.process_index():  # Process 0 alone prints.
    return
  print(f"\nTest split (classes unseen in training), {' '.join([args.config, *args.set])}:\n")
  print(reporting.format_table(results))
  curves = "curves.png" if len(results) == 1 else "*/curves.png"
  print(
    f"\nTotal {time.perf_counter() - start:.0f} s; metrics and curves in {args.workdir}/{curves}"
  )


if __name__ == "__main__":
  main()
