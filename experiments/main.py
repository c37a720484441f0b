"""Runs a training config: `python -m experiments.main --config FILE --workdir DIR [--set k=v ...]`.

A config file defines `get_config() -> experiments.config.Config` and, optionally, `get_sweep() ->
{run name: {field: value}}`: then every run of the sweep trains in `DIR/<run name>`, an untrained
network (the same config with `num_steps=0`) is evaluated in `DIR/untrained`, and a table of the
final metrics on the test split (classes unseen in training) is printed and written to
`DIR/results.json`. Rerunning the same command resumes every unfinished run from its latest
checkpoint and reuses finished ones. `--set field=value` (repeatable) overrides a field of the
config for every run, e.g. `--set num_steps=50`; values are Python literals (`--set
loss_kwargs={'num_bins':20}`) or plain strings (`--set loss=smoothap`).
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
import time
from collections.abc import Sequence
from typing import Any

from experiments import config as config_lib
from experiments import input_pipeline
from experiments import reporting
from experiments import train


def load_config_module(path: str):
  """Imports a config file by path."""
  if not os.path.isfile(path):
    raise FileNotFoundError(
        f"--config {path!r} is not a file; configs live in experiments/configs/."
    )
  spec = importlib.util.spec_from_file_location(f"_jaxrank_config_{abs(hash(path))}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if not hasattr(module, "get_config"):
    raise ValueError(f"config file {path!r} defines no get_config().")
  return module


def parse_value(text: str) -> Any:
  """A command-line value: a Python literal (`10`, `0.5`, `[2, 3]`, `0.02,2` is a tuple), else the
  string itself (`smoothap`)."""
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def apply_overrides(
    config: config_lib.Config, overrides: Sequence[str] | dict[str, Any]
) -> config_lib.Config:
  """`config` with fields replaced: from `{"field": value}` or `["field=value", ...]` strings."""
  if not isinstance(overrides, dict):
    parsed = {}
    for item in overrides:
      if "=" not in item:
        raise ValueError(f"--set {item!r} must look like field=value.")
      key, text = item.split("=", 1)
      parsed[key.strip()] = parse_value(text)
    overrides = parsed
  fields = {f.name for f in dataclasses.fields(config_lib.Config)}
  unknown = sorted(set(overrides) - fields)
  if unknown:
    raise ValueError(f"{unknown} are not fields of the config; the fields are {sorted(fields)}.")
  overrides = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
  return dataclasses.replace(config, **overrides)


def run_sweep(
    base: config_lib.Config,
    runs: dict[str, config_lib.Config],
    workdir: str,
    *,
    untrained: bool = True,
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
  """Trains each run in `workdir/<name>`, after checking every config; first, optionally, `base`
  untrained (`num_steps=0`) in `workdir/untrained`.

  Returns:
    `(results, seconds)`: run name -> final metrics (`"untrained"` first when asked) and run name
    -> wall time in seconds.
  """
  if "untrained" in runs:
    raise ValueError("a run of a sweep cannot be called 'untrained': that is the baseline's name.")
  for config in runs.values():  # Every run's configuration errors before any training starts.
    config_lib.check_config(config)
  baseline = {"untrained": dataclasses.replace(base, num_steps=0)} if untrained else {}
  results, seconds = {}, {}
  for name, config in {**baseline, **runs}.items():
    start = time.perf_counter()
    results[name] = train.train_and_evaluate(config, os.path.join(workdir, name))
    seconds[name] = time.perf_counter() - start
    logging.info("%s: %.1f s", name, seconds[name])
  return results, seconds


def run(
    config_path: str, workdir: str, overrides: Sequence[str] = ()
) -> dict[str, dict[str, float]]:
  """Runs a config file (its sweep and an untrained baseline, if any); returns the metrics."""
  module = load_config_module(config_path)
  config = apply_overrides(module.get_config(), overrides)
  sweep = module.get_sweep() if hasattr(module, "get_sweep") else None
  if not sweep:
    return {config.loss: train.train_and_evaluate(config, workdir)}
  runs = {name: apply_overrides(config, changes) for name, changes in sweep.items()}
  results, _ = run_sweep(config, runs, workdir)
  with open(os.path.join(workdir, "results.json"), "w") as f:
    json.dump(results, f, indent=1)
  return results


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--config", required=True, help="a config file in experiments/configs/")
  parser.add_argument("--workdir", required=True, help="where checkpoints, metrics and plots go")
  parser.add_argument(
      "--set",
      action="append",
      default=[],
      metavar="FIELD=VALUE",
      help="override a config field (repeatable)",
  )
  args = parser.parse_args(argv)
  input_pipeline.hide_gpus_from_tensorflow()
  logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
  logging.getLogger("absl").setLevel(logging.WARNING)
  start = time.perf_counter()
  results = run(args.config, args.workdir, args.set)
  print(f"\nTest split (classes unseen in training), {' '.join([args.config, *args.set])}:\n")
  print(reporting.format_table(results))
  curves = "curves.png" if len(results) == 1 else "*/curves.png"
  print(
      f"\nTotal {time.perf_counter() - start:.0f} s; metrics and curves in {args.workdir}/{curves}"
  )


if __name__ == "__main__":
  main()
