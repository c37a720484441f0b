"""The comparison's records: one small JSON file per run, committed under `records/` beside this.

A run is known by its label (`pretrained/tune/fastap/0`: its place in the protocol) and the hash
of its config (`config_hash`); its record, `<label with dots for slashes>-<hash>.json` in the
records folder (`DIRECTORY`, or `--records DIR`), holds the hash, the config as hashed, the final
metrics (None for a run that diverged, with the error in `diverged`), the learning curve (the
metrics of every evaluation: `step`, R@1 and MAP@R, those of the test classes prefixed `test/`
for a curve run), the wall time, the machine (platform, CPU, cores, JAX's version), the date, and
the checksum of the backbone file the run started from. Nothing else: checkpoints, metrics files
and plots stay in the run's workdir, `WORKDIR/runs/<label>-<hash>`, from which an unfinished run
resumes.

A run whose hash has a record in the folder, under any label, is never trained again, on any
machine: the records are committed, and a session, a process or a host that finds one reads it.
The runs are split among processes or machines by their hash (`Shard`: a run belongs to shard
`int(hash, 16) mod n`), so that shards that share nothing but the committed folder never train the
same run, and the same run (the same config met under two labels) belongs to one shard.

The hash is of `config.to_json` with the backbone file named by its file name (which is the hash
of its pretraining settings, `pretrain.settings_key`), not its path in a workdir, and with the
fields of `HASH_NEUTRAL` left out at their neutral value: those fields were added to `Config`
after the first records, and a run that leaves them there computes what the earlier runs did, so
it keeps its hash. A field added later joins `HASH_NEUTRAL` at the value that computes what the
code did before it.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import logging
import os
import platform
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from experiments import results
from experiments.job import config as config_lib
from experiments.job import reporting

logger = logging.getLogger(__name__)

DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "records")
KEPT = ("recall@1", "map@r")  # The metrics the tables report (and the curves keep).
# Config fields added after the first records -> the value at which a run computes what it did
# before the field existed: left out of the hash at that value.
HASH_NEUTRAL: Mapping[str, Any] = {
  "freeze_backbone_steps": 0,
  "eval_test_classes": False,
  "hashing_convention": "textbook",  # Read only by a hashing protocol's evaluation.
  "hashing_averaged_over": "relevant_in_database",
  "class_weight_lr_multiplier": 1.0,  # Read only by the classification losses' runs.
}


def hashed_config(config: config_lib.Config) -> dict[str, Any]:
  """What a run's hash is of and its record holds: `to_json`, the backbone file by its name, the
  `HASH_NEUTRAL` fields left out at their neutral values."""
  values = config_lib.to_json(config)
  if values.get("init_weights") is not None:
    values["init_weights"] = os.path.basename(values["init_weights"])
  return {k: v for k, v in values.items() if not (k in HASH_NEUTRAL and v == HASH_NEUTRAL[k])}


def config_hash(config: config_lib.Config) -> str:
  """A hash of everything a run computes from (`hashed_config`)."""
  text = json.dumps(hashed_config(config), sort_keys=True)
  return hashlib.sha256(text.encode()).hexdigest()[:10]


def file_name(label: str, digest: str) -> str:
  """`pretrained.tune.fastap.0-<hash>.json`: the label's slashes as dots, odd characters as `_`."""
  return re.sub(r"[^\w.,=+-]", "_", label.replace("/", ".")) + f"-{digest}.json"


@dataclasses.dataclass(frozen=True)
class Shard:
  """Shard `index` of `count`: the runs whose hash is `index` modulo `count` (`0/1`: every run)."""

  index: int = 0
  count: int = 1

  @classmethod
  def parse(cls, text: str) -> Shard:
    """`"i/n"` -> `Shard(i, n)`; raises ValueError unless `0 <= i < n`."""
    found = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if found is None or not int(found.group(1)) < int(found.group(2)):
      raise ValueError(f"--shard {text!r}: give i/n with 0 <= i < n, such as 0/2.")
    return cls(int(found.group(1)), int(found.group(2)))

  def owns(self, digest: str) -> bool:
    return int(digest, 16) % self.count == self.index


EVERY_RUN = Shard()  # One process for every run.


def machine() -> dict[str, Any]:
  """Where a run ran: the platform, the CPU, its cores, JAX's version."""
  return {
    "platform": platform.platform(),
    "cpu": results.machine().rsplit(",", 1)[0],
    "cores": os.cpu_count(),
    "jax": results.versions(("jax",))["jax"],
  }


def _checksum(path: str | None) -> str | None:
  if path is None or not os.path.isfile(path):
    return None
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()[:16]


def curve(workdir: str) -> list[dict[str, float]]:
  """The evaluations in a run's `metrics.jsonl`: `step` and the `KEPT` metrics of each split."""
  points: dict[int, dict[str, float]] = {}
  for record in reporting.read_metrics(workdir):
    if reporting.evaluation_names(record):
      kept = {k: float(v) for k, v in record.items() if k.rpartition("/")[2] in KEPT}
      points[int(record["step"])] = {"step": int(record["step"]), **kept}
  return [points[s] for s in sorted(points)]


@dataclasses.dataclass
class Store:
  """The runs of a comparison: each read from its record, or trained once and recorded.

  Attributes:
    workdir: the comparison's workdir; a run trains in `workdir/runs/<label>-<hash>`.
    records: the folder of the records (`DIRECTORY` by default).
    shard: the runs this process trains; another shard's run without a record is `missing`.
    train_nothing: read records only (`--from-records`): every run without one is `missing`.
    computed: the runs computed by this process (trained, or evaluated untrained).
    reused: the runs whose record was read instead.
    seconds: the wall time of every run met with a record, computed or reused.
    missing: the labels of the runs met without a record that this process did not compute.
    waiting: the runs not met yet, each waiting for records of others (`wait`).
    sources: the machines (`CPU, N cores`) and dates of the records met (`provenance`).
  """

  workdir: str
  records: str = DIRECTORY
  shard: Shard = EVERY_RUN
  train_nothing: bool = False
  computed: int = 0
  reused: int = 0
  seconds: float = 0.0
  missing: list[str] = dataclasses.field(default_factory=list)
  waiting: list[str] = dataclasses.field(default_factory=list)
  sources: set[tuple[str, str]] = dataclasses.field(default_factory=set)

  def provenance(self) -> dict[str, Any]:
    """`{"machines": [...], "first": date, "last": date}` of the records met (dates `YYYY-MM-DD`),
    what the document says of where and when its runs ran."""
    dates = sorted(d for _, d in self.sources)
    return {
      "machines": sorted({m for m, _ in self.sources}),
      "first": dates[0] if dates else None,
      "last": dates[-1] if dates else None,
    }

  def read(self, config: config_lib.Config) -> dict[str, Any] | None:
    """The record of `config`'s hash under any label, None if there is none.

    Raises:
      ValueError: a record of that hash holds another config (a stale record).
    """
    digest = config_hash(config)
    if not os.path.isdir(self.records):
      return None
    names = sorted(n for n in os.listdir(self.records) if n.endswith(f"-{digest}.json"))
    if not names:
      return None
    with open(os.path.join(self.records, names[0])) as f:
      record = json.load(f)
    if record["config"] != hashed_config(config):
      raise ValueError(
        f"the record {names[0]} in {self.records} holds another config than its hash's; "
        "remove it (a stale record) and rerun."
      )
    return record

  def wait(self, label: str, why: str) -> None:
    """Notes that the run `label` cannot be met yet: it waits for `why`."""
    self.waiting.append(f"{label} (waits for {why})")

  def result(
    self,
    label: str,
    config: config_lib.Config,
    compute: Callable[[config_lib.Config, str], Mapping[str, Any]],
  ) -> dict[str, Any] | None:
    """The record of a run (`metrics`, `diverged`, `curve`, `seconds`, ...), None when it has none
    and this process does not compute it.

    Read from the records when one has its hash, else, when the run is this shard's,
    `compute(config, workdir)` (the final metrics) runs and its record is written.
    """
    record = self.read(config)
    if record is not None:
      self.reused += 1
      self._met(record)
      return record
    digest = config_hash(config)
    if self.train_nothing or not self.shard.owns(digest):
      self.missing.append(label)
      return None
    record = self._compute(label, config, compute)
    os.makedirs(self.records, exist_ok=True)
    path = os.path.join(self.records, file_name(label, digest))
    with open(path + ".tmp", "w") as f:
      json.dump(record, f, indent=1, sort_keys=True)
      f.write("\n")
    os.replace(path + ".tmp", path)
    self.computed += 1
    self._met(record)
    return record

  def _met(self, record: Mapping[str, Any]) -> None:
    self.seconds += record["seconds"]
    where = record["machine"]
    self.sources.add((f"{where['cpu']}, {where['cores']} cores", record["date"][:10]))

  def _compute(
    self,
    label: str,
    config: config_lib.Config,
    compute: Callable[[config_lib.Config, str], Mapping[str, Any]],
  ) -> dict[str, Any]:
    """Runs `compute` in the run's workdir; returns its record."""
    digest = config_hash(config)
    directory = os.path.join(self.workdir, "runs", f"{label}-{digest}")
    start = time.perf_counter()
    try:
      metrics = compute(config, directory)
      kept: dict[str, float] | None = {
        k: float(v) for k, v in metrics.items() if k != "step" and isinstance(v, (int, float))
      }
      diverged = None
    except FloatingPointError as e:
      kept, diverged = None, " ".join(str(e).split())
    seconds = time.perf_counter() - start
    shown = "diverged" if kept is None else ", ".join(f"{k} {kept[k]:.3f}" for k in KEPT)
    logger.info("%s: %s (%.0f s)", label, shown, seconds)
    return {
      "label": label,
      "hash": digest,
      "config": hashed_config(config),
      "metrics": kept,
      "diverged": diverged,
      "curve": curve(directory),
      "seconds": seconds,
      "machine": machine(),
      "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
      "init_weights_sha256": _checksum(config.init_weights),
    }

  def train(self, label: str, config: config_lib.Config) -> dict[str, Any] | None:
    """The record of training `config` (`train.train_and_evaluate`)."""
    from experiments.job import train  # pylint: disable=g-import-not-at-top

    return self.result(label, config, lambda c, d: train.train_and_evaluate(c, d, name=label))
