"""Runs the comparison: the backbone, each loss's trials, its chosen setting's seeds, the ablations.

Every training run goes through `experiments.job.train.train_and_evaluate` in a workdir of its
own, `WORKDIR/runs/<label>-<hash>`, `<hash>` a hash of the run's whole config
(`records.config_hash`). When a run ends, its record (metrics, learning curve, wall time, machine)
is written to the records folder (`records.Store`; committed under
`experiments/comparison/records/`), and a run whose hash has a record is never trained again, on
any machine, whatever its label (an ablation's value that is a loss's chosen setting reuses the
seeds' runs). A run interrupted before its record resumes from its last checkpoint in its
workdir, as the job does. A run whose loss or parameters stop being finite (`FloatingPointError`)
is recorded as diverged: it loses its trial, and counts as a failed seed. With a shard
(`records.Shard`) a process trains only its share of the runs and reads the others' records; the
runs that need records it does not have (another shard's trials) wait, and are listed.

The order, in each setting (`pretrained`, then `scratch`):

1. each loss's trials (`protocol.trials`) train on the training classes less the validation
   classes (`config.validation_fraction`) with seed 0 and are evaluated on the validation classes;
   the trial with the highest MAP@R is chosen (the earlier on a tie: the default first);
2. the chosen setting trains over the seeds on every training class and is evaluated on the test
   classes, as is the untrained network (the same config, no step) of each seed;

then the raw pixels' retrieval of the test classes, and each ablation in the pretrained setting:
its values (`protocol.ablation_values`) applied by the ablation's own `overrides` to its loss's
chosen config, each over the seeds, on the test classes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from experiments.comparison import pretrain
from experiments.comparison import protocol
from experiments.comparison import records
from experiments.comparison.records import Store
from experiments.job import config as config_lib
from experiments.job import datasets
from experiments.job import evaluation
from experiments.job import main as main_lib

logger = logging.getLogger(__name__)

KEPT = records.KEPT  # The metrics the tables report.


def _score(result: dict[str, Any] | None) -> float:
  """A trial's selection metric: its validation MAP@R, -inf when it diverged."""
  assert result is not None  # Only read once every trial has its record.
  return -float("inf") if result["metrics"] is None else result["metrics"]["map@r"]


def tune(
  store: Store, base: config_lib.Config, setting: str, loss: str, size: protocol.Size
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
  """Each trial of `loss` on the validation classes; returns `(trials, chosen trial)`.

  Each trial is `{"trial": hyperparameters, "result": Store.result}`; the chosen trial is None
  while a trial has no record (another shard's).
  """
  done = []
  for i, trial in enumerate(protocol.trials(loss, size.trials, size.heads)):
    config = dataclasses.replace(
      protocol.trial_config(base, loss, trial), seed=0, validation_fraction=size.validation_fraction
    )
    done.append({"trial": trial, "result": store.train(f"{setting}/tune/{loss}/{i}", config)})
  if any(d["result"] is None for d in done):
    return done, None
  best = max(range(len(done)), key=lambda i: (_score(done[i]["result"]), -i))
  return done, done[best]["trial"]


def over_seeds(
  store: Store, config: config_lib.Config, label: str, size: protocol.Size
) -> list[dict[str, float] | None] | None:
  """The metrics of `config` trained with each seed (None where it diverged); None while a seed
  has no record."""
  found = [
    store.train(f"{label}/seed{seed}", dataclasses.replace(config, seed=seed))
    for seed in range(size.seeds)
  ]
  done = [r for r in found if r is not None]
  if len(done) < len(found):
    return None
  return [{k: r["metrics"][k] for k in KEPT} if r["metrics"] else None for r in done]


def run_setting(
  store: Store, base: config_lib.Config, setting: str, losses: Sequence[str], size: protocol.Size
) -> dict[str, Any]:
  """One setting: every loss tuned, then its choice and the untrained network over the seeds.

  A loss whose trials are not all recorded has no choice yet: its seeds wait (`Store.wait`), and
  its `final` is None, as is that of a loss with a seed of another shard.
  """
  out: dict[str, Any] = {"trials": {}, "chosen": {}, "final": {}}
  for loss in losses:
    out["trials"][loss], out["chosen"][loss] = tune(store, base, setting, loss, size)
  for loss in losses:
    if out["chosen"][loss] is None:
      store.wait(f"{setting}/final/{loss}", f"the records of every {setting}/tune/{loss} trial")
      out["final"][loss] = None
      continue
    config = protocol.trial_config(base, loss, out["chosen"][loss])
    out["final"][loss] = over_seeds(store, config, f"{setting}/final/{loss}", size)
  out["untrained"] = over_seeds(
    store, dataclasses.replace(base, num_steps=0), f"{setting}/untrained", size
  )
  return out


def run_ablation(
  store: Store, chosen: config_lib.Config, ablation: protocol.Ablation, size: protocol.Size
) -> list[dict[str, Any]]:
  """Each value of an ablation on its loss's chosen config, over the seeds.

  Returns:
    `[{"value": value, "name": run name, "seeds": metrics per seed, or None}]`, in
    `ablation.values` order.
  """
  rows = []
  for value in protocol.ablation_values(ablation, size):
    config = main_lib.apply_overrides(chosen, ablation.module.overrides(chosen, value))
    name = ablation.module.name(config)
    label = f"pretrained/ablation/{ablation.name}/{name}"
    rows.append({"value": value, "name": name, "seeds": over_seeds(store, config, label, size)})
  return rows


def data_summary(base: config_lib.Config, size: protocol.Size) -> dict[str, dict[str, int]]:
  """The classes and images of the splits: train, test, and train cut into tune and validation."""
  train_data, test_data = datasets.load_data(base)
  rest, held = datasets.validation_split(train_data, size.validation_fraction)
  parts = {"train": train_data, "test": test_data, "tune": rest, "validation": held}
  return {k: {"classes": d.num_classes, "images": d.num_examples} for k, d in parts.items()}


def selected(only: Sequence[str] | None) -> tuple[list[str], list[protocol.Ablation]]:
  """The losses and ablations that `--only` names (all without it); an ablation needs its loss."""
  ablations = [a for a in protocol.ABLATIONS if not only or a.name in only]
  needed = {a.loss for a in ablations}
  return [n for n in protocol.LOSSES if not only or n in only or n in needed], ablations


def backbone(store: Store, size: protocol.Size) -> tuple[str, dict[str, Any] | None]:
  """The pretrained backbone's file and report: the report from its record
  (`records/backbone-<key>.json`), else pretrained now (`pretrain.pretrained_backbone`, cached in
  the workdir) and recorded; `(path, None)` with `store.train_nothing` and no record.

  Each machine pretrains its own copy (the same settings, the same seeds); the runs' records
  hold the checksum of the file they started from.
  """
  scratch = protocol.base_config(size, None)
  settings = pretrain.Pretraining(**size.pretrain)
  key = pretrain.settings_key(scratch, settings)
  path = os.path.join(store.workdir, "backbones", f"backbone-{key}.npz")
  record = os.path.join(store.records, f"backbone-{key}.json")
  if os.path.isfile(record) and (store.train_nothing or os.path.isfile(path)):
    with open(record) as f:
      return path, {**json.load(f), "new": False}
  if store.train_nothing:
    store.missing.append(f"backbone-{key}")
    return path, None
  path, report = pretrain.pretrained_backbone(scratch, settings, store.workdir)
  if not os.path.isfile(record):
    os.makedirs(store.records, exist_ok=True)
    with open(record, "w") as f:
      json.dump({k: v for k, v in report.items() if k != "new"}, f, indent=1, sort_keys=True)
      f.write("\n")
  return path, report


def _one_pass(store: Store, size_name: str, only: Sequence[str] | None) -> dict[str, Any]:
  """Every run of the comparison met once, in the protocol's order (`run_comparison`)."""
  size = protocol.SIZES[size_name]
  losses, ablations = selected(only)
  scratch = protocol.base_config(size, None)
  path, report = backbone(store, size)
  bases = {"pretrained": protocol.base_config(size, path), "scratch": scratch}
  settings = {s: run_setting(store, bases[s], s, losses, size) for s in protocol.SETTINGS}
  raw = store.result("raw_pixels", scratch, lambda c, d: evaluation.evaluate_raw_pixels(c))
  done = {}
  for ablation in ablations:
    chosen = settings["pretrained"]["chosen"][ablation.loss]
    if chosen is None:
      store.wait(f"pretrained/ablation/{ablation.name}", f"the choice of {ablation.loss}")
      continue
    config = protocol.trial_config(bases["pretrained"], ablation.loss, chosen)
    done[ablation.name] = run_ablation(store, config, ablation, size)
  return {
    "size": size_name,
    "only": list(only or []),
    "data": data_summary(scratch, size),
    "backbone": report,
    "settings": settings,
    "raw_pixels": None if raw is None else raw["metrics"],
    "ablations": done,
  }


def run_comparison(
  size_name: str,
  workdir: str,
  only: Sequence[str] | None = None,
  *,
  records_dir: str = records.DIRECTORY,
  shard: records.Shard = records.EVERY_RUN,
  train_nothing: bool = False,
) -> dict[str, Any]:
  """The whole comparison at a size, or the part of it that `shard` trains; returns what the
  results document reports.

  The protocol is met in passes: each pass reads every run's record or trains the runs of this
  shard that can run (a loss's seeds and ablations wait for the records of all its trials), and
  a pass that trained something is followed by another (other shards writing to the same folder
  may have recorded what this one waited for), until one trains nothing.

  Returns:
    A JSON-able dict: `size`, `only`, `data` (`data_summary`), `backbone`
    (`pretrain.pretrained_backbone`'s report), `settings` (setting -> `run_setting`'s dict),
    `raw_pixels` (metrics), `ablations` (name -> `run_ablation`'s rows), `computed` and `reused`
    (runs, in the last pass: `reused` counts the runs computed in the earlier ones), `run_seconds`
    (the wall time of every run with a record), `seconds` (this call's wall time), `missing`
    (the labels of runs without a record this process did not compute), `waiting` (the runs
    waiting for others' records) and `complete` (neither).
  """
  start = time.perf_counter()
  computed = 0
  while True:
    store = Store(workdir, records_dir, shard, train_nothing)
    out = _one_pass(store, size_name, only)
    computed += store.computed
    if not store.computed or not (store.missing or store.waiting):
      break
  return {
    **out,
    "computed": computed,
    "reused": store.reused - (computed - store.computed),
    "run_seconds": store.seconds,
    "seconds": time.perf_counter() - start,
    "missing": store.missing,
    "waiting": store.waiting,
    "complete": not (store.missing or store.waiting),
    "recorded": store.provenance(),
  }


def _short_budget(
  store: Store, config: config_lib.Config, size: protocol.Size
) -> list[float] | None:
  """The test R@1 of each seed of a row's comparison run (`size.num_steps`), read from the
  records and never trained here (the comparison stage trains them); None while one is missing."""
  found = [store.read(dataclasses.replace(config, seed=seed)) for seed in range(size.seeds)]
  done = [r for r in found if r is not None]
  if len(done) < len(found):
    return None
  return [r["metrics"]["recall@1"] for r in done if r["metrics"] is not None]


def _curves_pass(store: Store, size: protocol.Size, losses: Sequence[str]) -> dict[str, Any]:
  """Every curve run met once (`run_curves`): setting -> row -> its entry or None."""
  path, _ = backbone(store, size)
  bases = {
    "pretrained": protocol.base_config(size, path),
    "scratch": protocol.base_config(size, None),
  }
  settings: dict[str, dict[str, Any]] = {}
  for setting in protocol.SETTINGS:
    settings[setting] = {}
    for loss in losses:
      _, chosen = tune(store, bases[setting], setting, loss, size)
      if chosen is None:
        store.wait(f"{setting}/curve/{loss}", f"the records of every {setting}/tune/{loss} trial")
        settings[setting][loss] = None
        continue
      config = protocol.curve_config(bases[setting], loss, chosen, size)
      done = store.train(f"{setting}/curve/{loss}", config)
      final = protocol.trial_config(bases[setting], loss, chosen)
      settings[setting][loss] = done and {
        "chosen": chosen,
        **{k: done[k] for k in ("curve", "diverged", "seconds")},
        "short": _short_budget(store, final, size),
      }
  return settings


def run_curves(
  size_name: str,
  workdir: str,
  only: Sequence[str] | None = None,
  *,
  records_dir: str = records.DIRECTORY,
  shard: records.Shard = records.EVERY_RUN,
  train_nothing: bool = False,
) -> dict[str, Any]:
  """The learning curves: every row in both settings at its chosen trial (its trials trained
  first where they have no record), seed 0, `protocol.curve_config`; in passes, as
  `run_comparison`.

  Returns:
    A JSON-able dict: `size`, `only`, `settings` (setting -> row -> `{"chosen", "curve",
    "diverged", "seconds", "short"}` or None while its run has no record; `short` is the R@1 of
    the comparison's seeds at `size.num_steps`, or None without their records), and `computed`,
    `reused`, `missing`, `waiting`, `complete`, `recorded` as `run_comparison`'s.
  """
  size = protocol.SIZES[size_name]
  losses, _ = selected(only)
  computed = 0
  while True:
    store = Store(workdir, records_dir, shard, train_nothing)
    settings = _curves_pass(store, size, losses)
    computed += store.computed
    if not store.computed or not (store.missing or store.waiting):
      break
  return {
    "size": size_name,
    "only": list(only or []),
    "settings": settings,
    "computed": computed,
    "reused": store.reused - (computed - store.computed),
    "missing": store.missing,
    "waiting": store.waiting,
    "complete": not (store.missing or store.waiting),
    "recorded": store.provenance(),
  }
