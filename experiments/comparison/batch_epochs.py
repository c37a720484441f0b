"""The batch size at equal epochs: FastAP and SmoothAP at B = 64, 512, 2,048 and the whole set.

Command (not part of CI; about 25 minutes on 2 CPU cores at the defaults):

    python -m experiments.comparison.batch_epochs --docs
    python -m experiments.comparison.batch_epochs --losses fastap --batches 64 all --epochs 1 \\
        --records /tmp/batch_epochs --workdir /tmp/batch_epochs_runs     # a smoke run

The claim (issue 66). Cakir et al. 2019 (Sec. 5.3, Fig. 4a) find FastAP's R@1 rising with the
batch size, and Ramzi et al. 2021 (Sec. 3.2, eq. 6) explain why: the AP of a batch overestimates
the AP of the whole training set by the decomposability gap, which falls as the batch grows.
Neither tests it at equal epochs beyond a few hundred images per batch. jaxrank's blocked losses
(`jaxrank.blocked_loss`, the job's `loss_block_size`) fit any batch, the whole training set
included, so the claim can be tested: each loss at each batch size trains for the same number of
epochs (so the same number of images, and fewer steps at larger batches), and the gap of each
trained network is measured at its own batch size.

What each run is. The main job's glyphs config (`experiments/job/configs/glyphs.py`: the small
convolutional network from scratch, AdamW at 3e-3, warm-up then cosine decay; FastAP with 40
bins, as the main job; SmoothAP at temperature 0.01), changed only in the batch (`plan`):

* B = 64, 512: P x K batches of K = 4 images (16 and 128 classes per batch);
* B = 2,048: 256 classes x 8 images (the 359 training characters cannot give 512 classes of 4);
* `all`: the whole training split (5,879 images of 359 classes, every image once per step) as one
  batch, its items in a random order each epoch (the `random` sampler with B = the split's size);
  the lists are scored and the loss taken over blocks of 512 queries (`loss_block_size`), and
  SmoothAP's bound `max_relevant` is the largest class less one;

each trained `epochs * N / B` steps (rounded, at least 1), its warm-up the glyphs config's share of
the steps (20 of 300), evaluated at the end on the 359 unseen test characters (leave-one-out).

The gap (`decomposability_gap_of`, ROADMAP eq. 6 for the in-batch mAP): the trained network embeds
the training split; the split is cut into random batches of B (a seeded permutation, the remainder
left out), and the gap is the mean over those batches of their in-batch mAP (each image querying
its batch, the query left out) minus the mAP of the whole split queried the same way
(`jaxrank.batch_gap`). It is 0 at B = `all` by definition.

Records. Each run writes one small JSON file under `experiments/comparison/batch_epochs_records/`
(`--records`): its config (and its hash), the test metrics, the gap, its wall time and machine. A
run whose record exists is not trained again, so the command resumes on any machine, and the
records are committed. `--docs` writes the table from the records
(docs/_generated/batch_epochs.json, shown in docs/guide/comparison.rst); `--tables-only` writes it
from the records alone, training nothing. The reading of the results: docs/guide/comparison.rst,
"The batch size at equal epochs".
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from experiments import docs_data
from experiments.comparison import records as records_lib
from experiments.job import config as config_lib
from experiments.job import main as main_lib

PROG = "experiments.comparison.batch_epochs"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDS = os.path.join(ROOT, "experiments", "comparison", "batch_epochs_records")
BASE_CONFIG = "experiments/job/configs/glyphs.py"
LOSSES = {"fastap": {"num_intervals": 40}, "smoothap": {}}  # The main job's hyperparameters.
BATCHES = ("64", "512", "2048", "all")
EPOCHS = 20
WHOLE = "all"
BLOCK_SIZE = 512  # Queries per block for the batches of B >= 2,048.
GAP_SEED = 0
KEPT = ("recall@1", "map@r")


def _geometry(batch: str, num_classes: int) -> tuple[int, int]:
  """`(P, K)` of a P x K batch of `batch` images: K = 4 while P = B / 4 classes exist, else 8."""
  size = int(batch)
  for k in (4, 8, 16):
    if size % k == 0 and size // k <= num_classes:
      return size // k, k
  raise config_lib.ConfigError(
    f"batch {batch}: no P x K geometry with K in (4, 8, 16) and P <= {num_classes} classes."
  )


def plan(
  base: config_lib.Config,
  loss: str,
  batch: str,
  *,
  epochs: int,
  train_labels: np.ndarray,
) -> config_lib.Config:
  """The config of one run: `base` training `loss` on batches of `batch` for `epochs` epochs.

  Args:
    base: the base config (the glyphs config).
    loss: a key of `LOSSES`.
    batch: a batch size as a string, or `"all"` for the whole training split.
    epochs: passes over the training split.
    train_labels: `[N]` class labels of the training split (its size and class sizes).
  """
  if loss not in LOSSES:
    raise config_lib.ConfigError(f"loss {loss!r}: use one of {', '.join(LOSSES)}.")
  num_images = len(train_labels)
  counts = np.bincount(np.unique(train_labels, return_inverse=True)[1])
  kwargs: dict[str, Any] = dict(LOSSES[loss])
  if batch == WHOLE:
    size = num_images
    changed: dict[str, Any] = {"sampler": "random", "batch_size": size, "samples_per_class": 1}
    if loss == "smoothap":  # The random sampler fixes no bound; the whole set's largest class.
      kwargs["max_relevant"] = int(counts.max()) - 1
  else:
    size = int(batch)
    p, k = _geometry(batch, len(counts))
    changed = {"sampler": "m_per_class", "batch_size": p * k, "samples_per_class": k}
  steps = max(1, round(epochs * num_images / size))
  warmup = base.warmup_steps / base.num_steps  # The glyphs config's share of warm-up.
  changed.update(
    loss=loss,
    loss_kwargs=kwargs,
    num_steps=steps,
    warmup_steps=min(steps - 1, round(steps * warmup)),
    eval_every=steps,
    checkpoint_every=steps,
    loss_block_size=BLOCK_SIZE if size >= 2048 else None,
    raw_pixels_baseline=False,
    progress_bar=False,
  )
  return dataclasses.replace(base, **changed)


def record_path(records: str, loss: str, batch: str, config: config_lib.Config) -> str:
  return os.path.join(
    records, f"{loss}-B{batch}-seed{config.seed}-{records_lib.config_hash(config)}.json"
  )


def decomposability_gap_of(
  embeddings: np.ndarray, labels: np.ndarray, batch_size: int, seed: int = GAP_SEED
) -> float:
  """The in-batch mAP's decomposability gap at `batch_size` (ROADMAP eq. 6; module docstring).

  Args:
    embeddings: `[N, D]` embeddings of the training split.
    labels: `[N]` their classes.
    batch_size: B; the split's random batches of B (a permutation seeded by `seed`, the remainder
      left out). At `B >= N` the gap is 0.
    seed: the permutation's seed.

  Returns:
    The mean in-batch mAP of the batches minus the mAP of the whole split.
  """
  import jax  # pylint: disable=g-import-not-at-top

  import jaxrank  # pylint: disable=g-import-not-at-top
  from jaxrank import landscape  # pylint: disable=g-import-not-at-top

  n = len(labels)
  if batch_size >= n:
    return 0.0

  def in_batch_map(data):
    scores, relevance, where = jaxrank.batch_retrieval(*data)
    return jaxrank.ap_metric(scores, relevance, where=where)

  order = np.random.default_rng(seed).permutation(n)
  batches = order[: (n // batch_size) * batch_size].reshape(-1, batch_size)
  gap = landscape.batch_gap(jax.jit(in_batch_map), (embeddings, labels), batches)
  return float(gap["gap"])


def _embed_train(config: config_lib.Config, workdir: str, train_data) -> np.ndarray:
  """`[N, D]` embeddings of the training split by the run's final network (inference mode)."""
  from experiments.job import input_pipeline  # pylint: disable=g-import-not-at-top
  from experiments.job import train  # pylint: disable=g-import-not-at-top

  model = train.restore_model(config, workdir)
  out = []
  for batch in input_pipeline.eval_batches(config, train_data):
    out.append(np.asarray(model(batch["image"]))[batch["mask"]])
  return np.concatenate(out)


def _machine() -> dict[str, Any]:
  import jax  # pylint: disable=g-import-not-at-top

  return {
    "machine": docs_data.machine(),
    "platform": platform.platform(),
    "jax": jax.__version__,
    "devices": [str(d) for d in jax.devices()],
  }


def run_one(
  config: config_lib.Config, workdir: str, batch: str, epochs: int, train_data
) -> dict[str, Any]:
  """Trains one run (or resumes it from its checkpoints) and measures its gap; its record."""
  from experiments.job import train  # pylint: disable=g-import-not-at-top

  start = time.perf_counter()
  metrics = train.train_and_evaluate(config, workdir, name=f"{config.loss}-B{batch}")
  trained = time.perf_counter() - start
  embeddings = _embed_train(config, workdir, train_data)
  labels = np.asarray(train_data.labels)
  gap = decomposability_gap_of(embeddings, labels, config.batch_size)
  return {
    "loss": config.loss,
    "batch": batch,
    "batch_size": config.batch_size,
    "seed": config.seed,
    "epochs": epochs,
    "config_hash": records_lib.config_hash(config),
    "config": records_lib.hashed_config(config),
    "metrics": {k: float(metrics[k]) for k in KEPT},
    "gap": gap,
    "seconds": trained,
    "date": datetime.date.today().isoformat(),
    **_machine(),
  }


def read_records(records: str) -> list[dict[str, Any]]:
  """Every record under `records`, in file-name order."""
  if not os.path.isdir(records):
    return []
  out = []
  for name in sorted(os.listdir(records)):
    if name.endswith(".json"):
      with open(os.path.join(records, name)) as f:
        out.append(json.load(f))
  return out


def table(records: Sequence[dict[str, Any]], epochs: int) -> dict[str, Any]:
  """The table of the records of `epochs` epochs: a row per loss and batch, in `BATCHES` order."""
  order = {b: i for i, b in enumerate(BATCHES)}
  chosen = sorted(
    (r for r in records if r["epochs"] == epochs),
    key=lambda r: (list(LOSSES).index(r["loss"]), order.get(r["batch"], len(order)), r["seed"]),
  )
  rows = [
    [
      r["loss"],
      str(r["seed"]),
      "all" if r["batch"] == WHOLE else f"{r['batch_size']:,}",
      f"{r['batch_size']:,}",
      f"{r['config']['num_steps']:,}",
      f"{r['metrics']['recall@1']:.3f}",
      f"{r['metrics']['map@r']:.3f}",
      f"{r['gap']:+.3f}",
      f"{r['seconds']:.0f} s",
    ]
    for r in chosen
  ]
  return {
    "columns": ["loss", "seed", "batch", "B", "steps", "R@1", "MAP@R", "gap at B", "training"],
    "rows": rows,
  }


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n")[0])
  parser.add_argument("--losses", nargs="+", choices=list(LOSSES), default=list(LOSSES))
  parser.add_argument("--batches", nargs="+", default=list(BATCHES), help="sizes, or 'all'")
  parser.add_argument("--epochs", type=int, default=EPOCHS, help="default: %(default)s")
  parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="default: 0")
  parser.add_argument("--config", default=BASE_CONFIG, help="default: %(default)s")
  parser.add_argument("--records", default=RECORDS, help="the records' folder (committed)")
  parser.add_argument("--workdir", default="runs/batch_epochs", help="checkpoints of the runs")
  parser.add_argument(
    "--docs", action="store_true", help="also write docs/_generated/batch_epochs.json"
  )
  parser.add_argument(
    "--tables-only", action="store_true", help="train nothing: the table from the records alone"
  )
  return parser


def _check_batches(batches: Sequence[str]) -> None:
  for b in batches:
    if b != WHOLE and not (b.isdigit() and int(b) > 0):
      raise config_lib.ConfigError(f"--batches {b}: a positive batch size or {WHOLE!r}.")


def _run(args: argparse.Namespace) -> None:
  """Plans every run, checks each against the data, then trains those without a record."""
  main_lib.import_tensorflow_quietly()
  # pylint: disable=g-import-not-at-top
  from experiments.job import datasets
  from experiments.job import input_pipeline
  from experiments.job import train

  input_pipeline.hide_gpus_from_tensorflow()
  base = main_lib.load_config_module(args.config).get_config()
  train_data = datasets.training_splits(base).train
  labels = np.asarray(train_data.labels)
  runs = []
  for seed in args.seeds:
    for loss in args.losses:
      for batch in args.batches:
        config = plan(
          dataclasses.replace(base, seed=seed), loss, batch, epochs=args.epochs, train_labels=labels
        )
        workdir = os.path.join(
          args.workdir, f"{loss}-B{batch}-seed{seed}-{records_lib.config_hash(config)}"
        )
        train.check_run(config, workdir)
        runs.append((config, batch, workdir, record_path(args.records, loss, batch, config)))
  os.makedirs(args.records, exist_ok=True)
  for config, batch, workdir, path in runs:
    if os.path.isfile(path):
      logging.info("%s: record exists, not trained again", os.path.basename(path))
      continue
    record = run_one(config, workdir, batch, args.epochs, train_data)
    with open(path + ".tmp", "w") as f:
      json.dump(record, f, indent=1)
    os.replace(path + ".tmp", path)
    logging.info("%s: %s, gap %+.3f", os.path.basename(path), record["metrics"], record["gap"])


def main(argv: Sequence[str] | None = None) -> None:
  """The command line; exits with status 2 for a bad argument."""
  args = _parser().parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
  logging.getLogger("absl").setLevel(logging.WARNING)
  try:
    _check_batches(args.batches)
    if not args.tables_only:
      _run(args)
  except config_lib.ConfigError as e:
    _parser().exit(main_lib.EXIT_CONFIG_ERROR, f"{PROG}: error: {' '.join(str(e).split())}\n")
  shown = table(read_records(args.records), args.epochs)
  if not shown["rows"]:
    _parser().exit(
      main_lib.EXIT_CONFIG_ERROR, f"{PROG}: error: no record of {args.epochs} epochs.\n"
    )
  print(" | ".join(shown["columns"]))
  for row in shown["rows"]:
    print(" | ".join(row))
  if args.docs or args.tables_only:
    records = [r for r in read_records(args.records) if r["epochs"] == args.epochs]
    path = docs_data.write_table(
      "batch_epochs",
      title=f"FastAP and SmoothAP at equal epochs ({args.epochs}) on the glyphs, from scratch: "
      "test R@1 and MAP@R on the unseen characters, and the decomposability gap of the in-batch "
      "mAP at the run's own batch size",
      command=f"python -m {PROG} --docs",
      source=f"measured: written from the records ({os.path.relpath(args.records, ROOT)})",
      machine_name=records[-1]["machine"],
      date=max(r["date"] for r in records),
      **shown,
    )
    print("wrote", path)


if __name__ == "__main__":
  main()
