"""What every script of `experiments/ablations/` shares: flags, a run per value, table, plot.

A script names what it sweeps (`what`), the default values, how a value changes the config
(`overrides(base, value) -> {field: value}`), and how a run's config is named in the table and
placed on the plot, and calls `main`. Then

    python -m experiments.ablations.<what> [--config FILE] [--workdir DIR] [--set field=value ...]
                                        [--values V [V ...]]

1. loads `--config` (default `experiments/job/configs/glyphs.py`, the main job's data, network and
   schedule; its `get_sweep`, if any, is ignored) and applies every `--set` to it: the base config;
2. builds one config per value, the base with the script's overrides on top (so `--set` cannot undo
   what is swept), and checks them all (`check.check_config`) before anything trains;
3. evaluates the base network untrained (`num_steps=0`) in `DIR/untrained` (unless `--no-untrained`:
   on a large test split that evaluation costs as much as any other), then trains each value in
   `DIR/<run name>` with `train.train_and_evaluate`;
4. prints a table of the final Recall@k, MAP@R and each run's time on the test split (classes
   unseen in training; with the config's `raw_pixels_baseline`, as the glyphs have it, a row
   "raw_pixels" of retrieval on the images themselves follows "untrained"), writes it with the
   metrics to `DIR/results.json`, and plots MAP@R and R@1 against the swept value in
   `DIR/<what>.png` (the untrained network as a dashed line), both with
   `experiments/job/reporting.py`.

Values given to `--values` are Python literals (`10`, `0.5`, `0.02,2` for a tuple) or plain strings
(`super_class`). Rerunning the same command reuses finished runs and resumes unfinished ones (the
workdirs keep their checkpoints); a run of another configuration needs another `--workdir`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from experiments.job import config as config_lib
from experiments.job import main as main_lib
from experiments.job import reporting

DEFAULT_CONFIG = "experiments/job/configs/glyphs.py"


def loss_overrides(base: config_lib.Config, loss: str, **hyperparameters: Any) -> dict[str, Any]:
  """`{"loss": loss, "loss_kwargs": ...}` with `hyperparameters` set on top of the base's own.

  The base config's `loss_kwargs` are kept when it already trains `loss` (so `--set
  loss_kwargs={'interpolation':4}` still holds while an ablation sweeps `margin`) and dropped
  otherwise (they would belong to another loss).
  """
  kept = dict(base.loss_kwargs) if base.loss == loss else {}
  return {"loss": loss, "loss_kwargs": {**kept, **hyperparameters}}


def run(
  base: config_lib.Config,
  values: Sequence[Any],
  workdir: str,
  *,
  overrides: Callable[[config_lib.Config, Any], dict[str, Any]],
  name: Callable[[config_lib.Config], str],
  untrained: bool = True,
) -> tuple[dict[str, config_lib.Config], dict[str, dict[str, float]], dict[str, float]]:
  """Trains one run per value (after checking them all), and first the untrained baseline.

  Returns:
    `(configs, results, seconds)`: run name -> config of each value, in order; run name -> final
    metrics, `"untrained"` first when `untrained`; run name -> wall time in seconds.
  """
  configs = {}
  for value in values:
    config = main_lib.apply_overrides(base, overrides(base, value))
    run_name = name(config)
    if run_name in configs or run_name == "untrained":
      raise config_lib.ConfigError(
        f"--values gives the run {run_name!r} twice; give each value once."
      )
    configs[run_name] = config
  results, seconds = main_lib.run_sweep(base, configs, workdir, untrained=untrained)
  return configs, results, seconds


def main(
  argv: Sequence[str] | None,
  *,
  what: str,
  doc: str,
  values: Sequence[Any],
  overrides: Callable[[config_lib.Config, Any], dict[str, Any]],
  name: Callable[[config_lib.Config], str],
  column: str,
  xlabel: str,
  point: Callable[[config_lib.Config], tuple[Any, str | None]],
  log_x: bool = False,
) -> dict[str, dict[str, float]]:
  """The command line of an ablation script; returns run name -> final metrics.

  Args:
    argv: the arguments (`sys.argv[1:]` when None).
    what: the ablation's name: default workdir `runs/ablate_<what>`, plot `<workdir>/<what>.png`.
    doc: the script's docstring; its first line describes the command.
    values: the values swept by default (`--values` replaces them).
    overrides: `(base config, value) -> {field: value}`, applied on top of the base config.
    name: a run's config -> its name (a row of the table and a subdirectory of the workdir).
    column: the header of the table's first column.
    xlabel: the plot's x label.
    point: a run's config -> `(x, series)` on the plot (see `plot`).
    log_x: logarithmic x axis.
  """
  parser = _parser(what, doc, values)
  args = parser.parse_args(argv)
  start = time.perf_counter()
  try:
    base = main_lib.apply_overrides(main_lib.load_config_module(args.config).get_config(), args.set)
    main_lib.import_tensorflow_quietly()
    from experiments.job import input_pipeline  # pylint: disable=g-import-not-at-top

    input_pipeline.hide_gpus_from_tensorflow()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("absl").setLevel(logging.WARNING)
    configs, results, seconds = run(
      base, args.values, args.workdir, overrides=overrides, name=name, untrained=args.untrained
    )
  except config_lib.ConfigError as e:  # One line and status 2, as experiments.job.main.
    parser.exit(main_lib.EXIT_CONFIG_ERROR, f"{parser.prog}: error: {' '.join(str(e).split())}\n")
  except KeyboardInterrupt as e:  # train.Interrupted says what was saved.
    parser.exit(main_lib.EXIT_INTERRUPTED, f"{parser.prog}: {e or 'interrupted'}\n")
  with open(os.path.join(args.workdir, "results.json"), "w") as f:
    json.dump(
      {
        "values": dict(zip(configs, map(_cli, args.values))),
        "metrics": results,
        "seconds": seconds,
      },
      f,
      indent=1,
    )
  swept = {n: m for n, m in results.items() if n in configs}  # Not the baselines' rows.
  path = reporting.plot_sweep(
    swept,
    {n: point(c) for n, c in configs.items()},
    os.path.join(args.workdir, f"{what}.png"),
    xlabel=xlabel,
    log_x=log_x,
    title=f"{what} on {base.dataset} (unseen classes)",
    baseline=results.get("untrained"),
    k=min(base.eval_ks),
  )
  print(f"\nTest split (classes unseen in training), {' '.join([args.config, *args.set])}:\n")
  print(
    reporting.format_table(
      results, ks=base.eval_ks, metrics=("map@r",), column=column, seconds=seconds
    )
  )
  print(f"\nTotal {time.perf_counter() - start:.0f} s; plot in {path}")
  return results


def _parser(what: str, doc: str, values: Sequence[Any]) -> argparse.ArgumentParser:
  """The ablation script's arguments (`main`)."""
  parser = argparse.ArgumentParser(description=doc.split("\n")[0])
  parser.add_argument("--config", default=DEFAULT_CONFIG, help="config file (default: %(default)s)")
  parser.add_argument("--workdir", default=f"runs/ablate_{what}", help="default: %(default)s")
  parser.add_argument(
    "--set",
    action="append",
    default=[],
    metavar="FIELD=VALUE",
    help="override a field of the base config (repeatable)",
  )
  parser.add_argument(
    "--values",
    nargs="+",
    type=main_lib.parse_value,
    default=list(values),
    help=f"the values swept (default: {' '.join(_cli(v) for v in values)})",
  )
  parser.add_argument(
    "--untrained",
    action=argparse.BooleanOptionalAction,
    default=True,
    help="also evaluate the untrained network (default: %(default)s)",
  )
  return parser


def _cli(value: Any) -> str:
  """A value as `--values` takes it."""
  if isinstance(value, tuple):
    return ",".join(repr(v) for v in value)
  return value if isinstance(value, str) else repr(value)
