"""A fair comparison of the losses on the glyphs: every loss tuned alike, over seeds, two settings.

Command (not part of CI; 45 to 75 minutes on 2 CPU cores at `--size full`):

    python -m experiments.comparison.main --workdir runs/comparison
    python -m experiments.comparison.main --workdir /tmp/tiny --size tiny --records /tmp/records
    python -m experiments.comparison.main --stage curves --shard 0/2

What it does (issue 28; Musgrave et al. 2020, "A Metric Learning Reality Check"): pretrains the
job's backbone by classifying glyph characters that are neither training nor test classes
(`pretrain.py`), then, fine-tuning that backbone and training from scratch, gives every loss of the
main job the same number of trials over its main hyperparameters and the learning rate, chosen on
validation classes held out of the training classes, trains each choice over 5 seeds and evaluates
it on the test classes, and re-reads the papers' five ablations over the same seeds in the
pretrained regime (`protocol.py` has the sizes, search spaces and values; `run.py` the order). It
writes the section `comparison` of experiments/RESULTS.md (`--output` elsewhere): the search
spaces, trials and chosen values, the tables of means with 95% intervals and the pairs that differ
significantly (`stats.py`), and whether each claim holds (`report.py`). With `--docs` it also
writes the test classes' tables of both settings and a figure of their intervals to
docs/_generated/comparison_<setting>.json (docs/guide/comparison.rst shows them); `--tables-only`
writes those from the document's section as it is, running nothing. `--stage curves` trains each
row's chosen setting 10 times longer instead, evaluated on the validation and test classes every
150 steps (`curves.py`: the plateaus, the ranking at the plateau, the figure).

Each run's record goes to experiments/comparison/records/ (`--records DIR` elsewhere;
`records.py`), which is committed: a run with a record is never trained again, on any machine, and
`--from-records` writes the section and the docs from the records alone, training nothing.
`--shard I/N` trains only the runs whose hash is I modulo N, so that N processes or hosts split the
work; a loss's seeds wait for the records of all its trials (the shards run again once those are
committed), and the call says what waits. An interrupted run resumes from its checkpoint in its
workdir; `--only NAME ...` runs some losses and ablations (an ablation brings its loss). Compiled
steps are cached in `WORKDIR/jax_cache` (JAX's persistent compilation cache), so that runs
differing only in their seed compile once.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

from experiments.job import config as config_lib
from experiments.job import main as main_lib

PROG = "experiments.comparison.main"
SIZES = ("full", "tiny")  # The keys of protocol.SIZES (not imported here: --help stays light).
STAGES = ("comparison", "curves")
DEFAULT_OUTPUT = "experiments/RESULTS.md"
# records.DIRECTORY (not imported here: --help stays light).
DEFAULT_RECORDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "records")


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n")[0])
  parser.add_argument("--workdir", default="runs/comparison", help="default: %(default)s")
  parser.add_argument(
    "--size",
    choices=SIZES,
    default="full",
    help="full: the results document's protocol; tiny: the smoke test's",
  )
  parser.add_argument(
    "--only",
    nargs="+",
    metavar="NAME",
    help="run only these losses and ablations (default: every one)",
  )
  parser.add_argument(
    "--stage",
    choices=STAGES,
    default="comparison",
    help="comparison: the trials, seeds and ablations; curves: every row's chosen setting "
    "trained 10 times longer, its learning curve on validation and test classes (default: "
    "%(default)s)",
  )
  _add_record_arguments(parser)
  parser.add_argument(
    "--docs",
    action="store_true",
    help="also write the test classes' tables and the figure of their intervals to "
    "docs/_generated/comparison_<setting>.json (docs/guide/comparison.rst shows them; "
    "comparison_curves.json for --stage curves)",
  )
  parser.add_argument(
    "--tables-only",
    action="store_true",
    help="run nothing: write those files from the document's comparison section as it is",
  )
  parser.add_argument(
    "--output",
    default=DEFAULT_OUTPUT,
    help="the document whose comparison section is written, relative to the "
    "repository root (default: %(default)s)",
  )
  return parser


def _add_record_arguments(parser: argparse.ArgumentParser) -> None:
  """Where the records are, which of the runs this call trains, whether it trains any."""
  parser.add_argument(
    "--records",
    default=DEFAULT_RECORDS,
    metavar="DIR",
    help="the folder of the runs' records, read and written (default: the committed "
    "experiments/comparison/records)",
  )
  parser.add_argument(
    "--shard",
    default="0/1",
    metavar="I/N",
    help="train only the runs whose hash is I modulo N, reading the others' records; the "
    "document is written by a call without it once every record exists (default: %(default)s)",
  )
  parser.add_argument(
    "--from-records",
    action="store_true",
    help="train nothing: write the section (and, with --docs, the docs' tables and figures) "
    "from the records alone; refused, listing them, while runs have no record",
  )


def _cache_compilations(workdir: str) -> None:
  """JAX's persistent compilation cache in `workdir/jax_cache`, before anything compiles; a cache
  the environment already names (`JAX_COMPILATION_CACHE_DIR`, as `make test` sets) is kept."""
  import jax  # pylint: disable=g-import-not-at-top

  if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    cache = os.path.abspath(os.path.join(workdir, "jax_cache"))
    jax.config.update("jax_compilation_cache_dir", cache)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def main(argv: Sequence[str] | None = None) -> None:
  """The command line; exits with status 2 for a bad name, 130 when interrupted."""
  args = _parser().parse_args(argv)
  # pylint: disable=g-import-not-at-top
  from experiments.comparison import protocol  # Data only: neither JAX nor TensorFlow.

  known = {*protocol.LOSSES, *(a.name for a in protocol.ABLATIONS)}
  unknown = sorted(set(args.only or ()) - known)
  if unknown:
    _parser().exit(
      main_lib.EXIT_CONFIG_ERROR,
      f"{PROG}: error: --only {' '.join(unknown)}: not a loss or ablation of the "
      f"comparison; use some of {', '.join(sorted(known))}.\n",
    )
  from experiments import results
  from experiments.comparison import report

  document = os.path.join(results.ROOT, args.output)
  if args.tables_only:
    with open(document) as f:
      section = results.read_sections(f.read()).get(report.NAME)
    if section is None:
      _parser().exit(main_lib.EXIT_CONFIG_ERROR, f"{PROG}: error: {document} has no comparison.\n")
    for path in report.write_docs(section, source=results.RECORD_SOURCE):
      print("wrote", path)
    return
  try:
    shard = _shard(args.shard)
  except ValueError as e:
    _parser().exit(main_lib.EXIT_CONFIG_ERROR, f"{PROG}: error: {e}\n")
  main_lib.import_tensorflow_quietly()
  from experiments.comparison import run
  from experiments.job import input_pipeline

  input_pipeline.hide_gpus_from_tensorflow()
  logging.basicConfig(
    level=logging.WARNING, format="%(asctime)s %(message)s", stream=sys.stderr, force=True
  )
  logging.getLogger("experiments").setLevel(logging.INFO)
  _cache_compilations(args.workdir)
  stage = run.run_curves if args.stage == "curves" else run.run_comparison
  try:
    out = stage(
      args.size,
      args.workdir,
      args.only,
      records_dir=args.records,
      shard=shard,
      train_nothing=args.from_records,
    )
  except config_lib.ConfigError as e:
    _parser().exit(main_lib.EXIT_CONFIG_ERROR, f"{PROG}: error: {' '.join(str(e).split())}\n")
  except KeyboardInterrupt as e:  # train.Interrupted says what was saved.
    _parser().exit(main_lib.EXIT_INTERRUPTED, f"{PROG}: {e or 'interrupted'}\n")
  if not out["complete"]:
    _incomplete(args, out)
    return
  if shard.count > 1:
    print(f"shard {args.shard}: every run has its record; rerun without --shard to write them up.")
    return
  os.makedirs(args.workdir, exist_ok=True)
  with open(os.path.join(args.workdir, f"{args.stage}.json"), "w") as f:
    json.dump(out, f, indent=1)
  _write_up(args, out, document)


def _shard(text: str):
  """`--shard`'s `records.Shard`."""
  from experiments.comparison import records  # pylint: disable=g-import-not-at-top

  return records.Shard.parse(text)


def _incomplete(args: argparse.Namespace, out: dict) -> None:
  """What a call that could not meet every run says: the runs without a record, those waiting;
  with `--from-records`, an error (status 2)."""
  missing, waiting = out["missing"], out["waiting"]
  lines = [f"{len(missing)} runs have no record in {args.records}:", *missing[:40]]
  if len(missing) > 40:
    lines.append(f"... and {len(missing) - 40} more")
  if waiting:
    lines += [f"{len(waiting)} wait for other runs' records:", *waiting]
  text = "\n  ".join(lines)
  if args.from_records:
    _parser().exit(
      main_lib.EXIT_CONFIG_ERROR, f"{PROG}: error: --from-records: cannot write up: {text}\n"
    )
  print(
    f"shard {args.shard}: {out['computed']} runs trained, {out['reused']} read; the rest "
    f"belongs to other shards or waits for their records; rerun once they are recorded.\n  {text}"
  )


def _write_up(args: argparse.Namespace, out: dict, document: str) -> None:
  """The section (comparison) or the table of the curves, printed; the docs with `--docs`."""
  from experiments.comparison import report  # pylint: disable=g-import-not-at-top

  if args.stage == "curves":
    from experiments.comparison import curves  # pylint: disable=g-import-not-at-top

    print(curves.format_table(out))
    if args.docs:
      print("wrote", curves.write_docs(out))
    return
  section = report.write_section(out, document)
  print(section)
  if args.docs:
    for path in report.write_docs(section, source="measured"):
      print("wrote", path)


if __name__ == "__main__":
  main()
