"""Runs the comparison: the backbone, each loss's trials, its chosen setting's seeds, the ablations.

Every training run goes through `experiments.job.train.train_and_evaluate` in a workdir of its
own, `WORKDIR/runs/<label>-<hash>`, `<hash>` a hash of the run's whole config: a run is trained
once, and an identical config met again (an ablation's value that is a loss's chosen setting, a
rerun of the command) reuses it. When a run ends, its metrics go to `result.json` in its workdir,
which a rerun reads instead of calling the job (`Store`); a run interrupted before that resumes
from its last checkpoint, as the job does. A run whose loss or parameters stop being finite
(`FloatingPointError`) is recorded as diverged: it loses its trial, and counts as a failed seed.

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
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from experiments.comparison import pretrain
from experiments.comparison import protocol
from experiments.job import config as config_lib
from experiments.job import datasets
from experiments.job import evaluation
from experiments.job import main as main_lib
from experiments.job import train

logger = logging.getLogger(__name__)

RESULT = "result.json"
KEPT = ("recall@1", "map@r")  # The metrics the tables report.


def config_hash(config: config_lib.Config) -> str:
  """A hash of everything a run computes from (`config.to_json`)."""
  text = json.dumps(config_lib.to_json(config), sort_keys=True)
  return hashlib.sha256(text.encode()).hexdigest()[:10]


@dataclasses.dataclass
class Store:
  """The runs of a comparison in `root/runs/`, each computed once.

  Attributes:
    root: the comparison's workdir.
    computed: the runs computed by this process (trained, or evaluated untrained).
    reused: the runs whose `result.json` was read instead.
    seconds: the wall time of every run met, computed or reused (as its `result.json` says).
  """

  root: str
  computed: int = 0
  reused: int = 0
  seconds: float = 0.0

  def result(
    self,
    label: str,
    config: config_lib.Config,
    compute: Callable[[config_lib.Config, str], dict[str, Any]],
  ) -> dict[str, Any]:
    """`{"metrics": {...} or None, "seconds": s, "diverged": message or None}` of a run.

    Read from the run's `result.json` when it is there, else `compute(config, workdir)` (the
    final metrics) runs and its result is written there.
    """
    directory = os.path.join(self.root, "runs", f"{label}-{config_hash(config)}")
    path = os.path.join(directory, RESULT)
    if os.path.isfile(path):
      self.reused += 1
      with open(path) as f:
        result = json.load(f)
      self.seconds += result["seconds"]
      return result
    start = time.perf_counter()
    try:
      metrics = compute(config, directory)
      result = {"metrics": {k: float(metrics[k]) for k in KEPT}, "diverged": None}
    except FloatingPointError as e:
      result = {"metrics": None, "diverged": " ".join(str(e).split())}
    result["seconds"] = time.perf_counter() - start
    os.makedirs(directory, exist_ok=True)
    with open(path + ".tmp", "w") as f:
      json.dump(result, f, indent=1)
    os.replace(path + ".tmp", path)
    self.computed += 1
    self.seconds += result["seconds"]
    shown = (
      "diverged"
      if result["metrics"] is None
      else ", ".join(f"{k} {v:.3f}" for k, v in result["metrics"].items())
    )
    logger.info("%s: %s (%.0f s)", label, shown, result["seconds"])
    return result

  def train(self, label: str, config: config_lib.Config) -> dict[str, Any]:
    """The result of training `config` (`train.train_and_evaluate`)."""
    return self.result(label, config, lambda c, d: train.train_and_evaluate(c, d, name=label))


def _score(result: dict[str, Any]) -> float:
  """A trial's selection metric: its validation MAP@R, -inf when it diverged."""
  return -float("inf") if result["metrics"] is None else result["metrics"]["map@r"]


def tune(
  store: Store, base: config_lib.Config, setting: str, loss: str, size: protocol.Size
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
  """Each trial of `loss` on the validation classes; returns `(trials, chosen trial)`.

  Each trial is `{"trial": hyperparameters, "result": Store.result}`.
  """
  records = []
  for i, trial in enumerate(protocol.trials(loss, size.trials)):
    config = dataclasses.replace(
      protocol.trial_config(base, loss, trial), seed=0, validation_fraction=size.validation_fraction
    )
    records.append({"trial": trial, "result": store.train(f"{setting}/tune/{loss}/{i}", config)})
  best = max(range(len(records)), key=lambda i: (_score(records[i]["result"]), -i))
  return records, records[best]["trial"]


def over_seeds(
  store: Store, config: config_lib.Config, label: str, size: protocol.Size
) -> list[dict[str, float] | None]:
  """The metrics of `config` trained with each seed (None where it diverged)."""
  return [
    store.train(f"{label}/seed{seed}", dataclasses.replace(config, seed=seed))["metrics"]
    for seed in range(size.seeds)
  ]


def run_setting(
  store: Store, base: config_lib.Config, setting: str, losses: Sequence[str], size: protocol.Size
) -> dict[str, Any]:
  """One setting: every loss tuned, then its choice and the untrained network over the seeds."""
  out: dict[str, Any] = {"trials": {}, "chosen": {}, "final": {}}
  for loss in losses:
    out["trials"][loss], out["chosen"][loss] = tune(store, base, setting, loss, size)
  for loss in losses:
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
    `[{"value": value, "name": run name, "seeds": metrics per seed}]`, in `ablation.values` order.
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


def run_comparison(
  size_name: str, workdir: str, only: Sequence[str] | None = None
) -> dict[str, Any]:
  """The whole comparison at a size; returns what the results document reports.

  Returns:
    A JSON-able dict: `size`, `only`, `data` (`data_summary`), `backbone`
    (`pretrain.pretrained_backbone`'s report), `settings` (setting -> `run_setting`'s dict),
    `raw_pixels` (metrics), `ablations` (name -> `run_ablation`'s rows), `computed` and `reused`
    (runs), `run_seconds` (the wall time of every run, computed or reused), `seconds` (this
    call's wall time).
  """
  start = time.perf_counter()
  size = protocol.SIZES[size_name]
  losses, ablations = selected(only)
  store = Store(workdir)
  scratch = protocol.base_config(size, None)
  backbone, report = pretrain.pretrained_backbone(
    scratch, pretrain.Pretraining(**size.pretrain), workdir
  )
  bases = {"pretrained": protocol.base_config(size, backbone), "scratch": scratch}
  settings = {s: run_setting(store, bases[s], s, losses, size) for s in protocol.SETTINGS}
  raw = store.result("raw_pixels", scratch, lambda c, d: evaluation.evaluate_raw_pixels(c))
  done = {}
  for ablation in ablations:
    chosen = protocol.trial_config(
      bases["pretrained"], ablation.loss, settings["pretrained"]["chosen"][ablation.loss]
    )
    done[ablation.name] = run_ablation(store, chosen, ablation, size)
  return {
    "size": size_name,
    "only": list(only or []),
    "data": data_summary(scratch, size),
    "backbone": report,
    "settings": settings,
    "raw_pixels": raw["metrics"],
    "ablations": done,
    "computed": store.computed,
    "reused": store.reused,
    "run_seconds": store.seconds,
    "seconds": time.perf_counter() - start,
  }
