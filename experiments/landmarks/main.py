"""Landmark retrieval end to end, as Revaud et al. 2019 train and evaluate it, on a miniature.

Command (a few minutes on 2 CPU cores; docs/guide/landmarks.rst shows its table):

    python -m experiments.landmarks.main --workdir runs/landmarks

It writes a miniature landmark data set into WORKDIR/data unless it is there
(`jaxrank.data.testing.write_landmark_miniature`: synthetic buildings in scenes of 96-192 pixels,
the Revisited Oxford layout with easy, hard and junk images, query boxes and distractors, and a
training image folder of other landmarks); trains `miniature_config` (a small network derived from
experiments/job/configs/revaud_landmarks.py: GeM with a learned p, mAP_Q with 20 bins) in
WORKDIR; then, for the untrained and the trained network, extracts full-resolution
descriptors, learns whitenings on the training images and evaluates Easy/Medium/Hard mAP with and
without alpha-QE and distractors (`chain.py`). It prints one Markdown table and writes it with
the run's facts to WORKDIR/landmarks.json (`--docs`: also docs/_generated/landmarks_miniature.json).
`--set field=value` changes the miniature's config (`--set num_steps=50`); rerunning reuses the
data and the finished run.

With real data, a config file and the published test set (nothing is downloaded):

    python -m experiments.landmarks.main --workdir runs/revaud_landmarks \\
        --config experiments/job/configs/revaud_landmarks.py --set data_dir=DATA_DIR \\
        --revisited REVISITED_DIR/roxford5k --distractors REVISITED_DIR/revisitop1m

trains the config in WORKDIR (or reuses the run that `experiments.job.main` finished there) and
evaluates it on `--revisited` (its `gnd_<name>.pkl` and `jpg/`), whitening learned on the
images of DATA_DIR/train; the untrained row is then the network of `init_weights`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from experiments.job import config as config_lib
from experiments.job import main as main_lib
from experiments.job.configs import revaud_landmarks

PROG = "experiments.landmarks.main"
DOCS_TABLE = "landmarks_miniature"

# The miniature of the default command: 8 test landmarks (24 queries, 80 of their images and 40
# images without any in the gallery, 60 distractors) and 24 training landmarks of 12 images each.
MINIATURE: dict[str, Any] = {"num_landmarks": 8, "num_training_landmarks": 24, "seed": 0}


def miniature_config(data_dir: str) -> config_lib.Config:
  """Revaud et al.'s config (`revaud_landmarks`) scaled to the miniature and a CPU.

  Kept: GeM with a learned p, mAP_Q with 20 bins, the image folder, no warm-up. Changed: a
  `small_convnet` (16, 32, 64) from scratch instead of an ImageNet ResNet-101 (no BatchNorm to
  freeze); 64 x 64 training crops of the scenes' shorter side resized to 64 instead of 800 x 800;
  batches of 16 landmarks x 4 images (the miniature has 24 landmarks of 12 images, too few for
  batches of random images) instead of 4,096 random images, whole instead of chunked (a batch of
  64 small images fits; on the 2-core CPU, shared with other jobs, the chunked step
  (`chunk_size=32`) took 10 s against 1.5 s whole, so the miniature leaves it off:
  `--set chunk_size=32` turns it on); 64-d descriptors; 200 steps at 1e-3 instead of 300 at 1e-4.
  """
  return dataclasses.replace(
    revaud_landmarks.get_config(),
    data_dir=data_dir,
    image_size=64,
    resize_size=64,
    sampler="m_per_class",
    batch_size=64,
    samples_per_class=4,
    model="small_convnet",
    model_features=(16, 32, 64),
    freeze_batchnorm=False,
    embedding_dim=64,
    chunk_size=None,
    num_steps=200,
    learning_rate=1e-3,
    eval_every=200,
    eval_batch_size=64,
    checkpoint_every=200,
    log_every=20,
  )


@dataclasses.dataclass(frozen=True)
class TestSet:
  """What the chain evaluates on: the published layout's directories and the whitening images."""

  revisited: str
  name: str
  distractors: str | None
  training_images: str


def miniature(workdir: str, arguments: dict[str, Any]) -> tuple[TestSet, str]:
  """The miniature in `workdir/data`, written unless one with `arguments` is there: its test set
  and its training image folder (the job's `data_dir`)."""
  from jaxrank.data import testing  # pylint: disable=g-import-not-at-top

  root = os.path.join(workdir, "data")
  stamp = os.path.join(root, "miniature.json")  # Written last: the miniature is complete.
  if os.path.isfile(stamp):
    with open(stamp) as f:
      if json.load(f) != json.loads(json.dumps(arguments)):  # Tuples as lists.
        raise config_lib.ConfigError(
          f"{root} holds a miniature written with other arguments; use another --workdir."
        )
  else:
    testing.write_landmark_miniature(root, **arguments)
    with open(stamp, "w") as f:
      json.dump(arguments, f)
  name = arguments.get("name", "roxford5k")
  folder = os.path.join(root, "training")
  return TestSet(
    os.path.join(root, name), name, os.path.join(root, "distractors"), os.path.join(folder, "train")
  ), folder


def evaluate(config: config_lib.Config, workdir: str, test_set: TestSet) -> list[list]:
  """The rows of the untrained (`init_weights`, or random) and the trained network of `workdir`
  on `test_set` (`chain.evaluate_network`)."""
  # pylint: disable=g-import-not-at-top
  from flax import nnx

  import jaxrank.data as jd
  from experiments.job import networks
  from experiments.job import train
  from experiments.landmarks import chain

  data = jd.load_revisited(test_set.revisited, test_set.name)
  if test_set.distractors:
    data = jd.with_distractors(data, test_set.distractors)
  training_paths = chain.image_files(test_set.training_images)
  untrained = networks.make_model(config, 3, nnx.Rngs(config.seed))
  untrained.eval()
  rows = []
  for name, model in (("untrained", untrained), ("trained", train.restore_model(config, workdir))):
    described = chain.describe(chain.make_embed_fn(model), data, training_paths)
    rows += chain.evaluate_network(name, described, data.ground_truth)
  return rows


def run(
  workdir: str,
  *,
  config_path: str | None = None,
  overrides: Sequence[str] = (),
  test_set: TestSet | None = None,
  arguments: dict[str, Any] | None = None,
) -> list[list]:
  """Trains (or reuses) the run in `workdir` and evaluates it; returns the table's rows.

  Without `config_path`, the miniature (`arguments` of `write_landmark_miniature`, default
  `MINIATURE`) in `workdir/data` and `miniature_config` with `overrides`; with it, that config
  file with `overrides` on `test_set`.

  Raises:
    ConfigError: a config that cannot run, or a real run without its test set.
  """
  from experiments.job import train  # pylint: disable=g-import-not-at-top

  if config_path is None:
    test_set, folder = miniature(workdir, dict(MINIATURE if arguments is None else arguments))
    config = main_lib.apply_overrides(miniature_config(folder), overrides)
  else:
    config, _ = main_lib.prepare(config_path, overrides)
    if test_set is None:
      raise config_lib.ConfigError("--config needs --revisited, the test set to evaluate on.")
  train.train_and_evaluate(config, workdir, name="mAP_Q")
  return evaluate(config, workdir, test_set)


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n")[0])
  parser.add_argument("--workdir", required=True, help="the data, the run and the table")
  parser.add_argument("--config", help="a config file (real data); default: the miniature's")
  parser.add_argument(
    "--set", action="append", default=[], metavar="FIELD=VALUE", help="override a config field"
  )
  parser.add_argument("--revisited", help="with --config: the test set's directory (gnd, jpg/)")
  parser.add_argument("--name", help="its gnd_<name>.pkl; default: the directory's name")
  parser.add_argument("--distractors", help="the distractors' directory (revisitop1m.txt, jpg/)")
  parser.add_argument(
    "--training_images", help="the images that whitening learns on; default: DATA_DIR/train"
  )
  parser.add_argument("--docs", action="store_true", help=f"also write {DOCS_TABLE}.json")
  return parser


def _test_set(args, overrides: Sequence[str]) -> TestSet | None:
  if args.config is None or args.revisited is None:
    return None
  config, _ = main_lib.prepare(args.config, overrides)
  images = args.training_images or os.path.join(config.data_dir or "", "train")
  name = args.name or os.path.basename(os.path.normpath(args.revisited))
  return TestSet(args.revisited, name, args.distractors, images)


def write(
  workdir: str, rows: list[list], seconds: float, docs: bool, cpu_seconds: float | None = None
) -> None:
  """The table as `workdir/landmarks.json` (and with `docs`, the guide's data file)."""
  from experiments import docs_data  # pylint: disable=g-import-not-at-top
  from experiments.landmarks import chain  # pylint: disable=g-import-not-at-top

  cells = [[f"{v:.1f}" if isinstance(v, float) else str(v) for v in row] for row in rows]
  record = {
    "columns": list(chain.COLUMNS),
    "rows": cells,
    "command": docs_data.command_line(),
    "machine": docs_data.machine(),
    "date": datetime.date.today().isoformat(),
    "seconds": round(seconds),
    "cpu_seconds": None if cpu_seconds is None else round(cpu_seconds),
  }
  with open(os.path.join(workdir, "landmarks.json"), "w") as f:
    json.dump(record, f, indent=1)
  if docs:
    docs_data.write_table(
      DOCS_TABLE,
      title="Landmark retrieval on the miniature: mAP (%) by the Revisited Oxford protocol",
      columns=chain.COLUMNS,
      rows=cells,
      notes=[
        f"Wall time {seconds:.0f} s, the process's CPU time {cpu_seconds or 0:.0f} s "
        "(generating the miniature, training, extracting, evaluating).",
        "Each query has 4 easy, 4 hard and 2 junk images in the gallery; alpha-QE adds its "
        "k = 10 nearest neighbours, the paper's setting.",
      ],
    )


def main(argv: Sequence[str] | None = None) -> None:
  args = _parser().parse_args(argv)
  start, cpu_start = time.perf_counter(), time.process_time()
  try:
    test_set = _test_set(args, args.set)
    main_lib.import_tensorflow_quietly()
    # pylint: disable=g-import-not-at-top
    from experiments.job import input_pipeline
    from experiments.landmarks import chain

    input_pipeline.hide_gpus_from_tensorflow()
    rows = run(args.workdir, config_path=args.config, overrides=args.set, test_set=test_set)
  except config_lib.ConfigError as e:
    sys.stderr.write(f"{PROG}: error: {' '.join(str(e).split())}\n")
    raise SystemExit(main_lib.EXIT_CONFIG_ERROR) from e
  seconds = time.perf_counter() - start
  print(chain.format_table(rows))
  write(args.workdir, rows, seconds, args.docs, time.process_time() - cpu_start)
  print(f"\nTotal {seconds:.0f} s; the table is also in {args.workdir}/landmarks.json")


if __name__ == "__main__":
  main()
