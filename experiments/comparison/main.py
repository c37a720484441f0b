"""A fair comparison of the losses on the glyphs: every loss tuned alike, over seeds, two settings.

Command (not part of CI; 45 to 75 minutes on 2 CPU cores at `--size full`):

    python -m experiments.comparison.main --workdir runs/comparison
    python -m experiments.comparison.main --workdir /tmp/comparison_tiny --size tiny

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
writes those from the document's section as it is, running nothing.

Rerunning the command reuses every finished run (and the backbone) and resumes an interrupted one
from its checkpoint; `--only NAME ...` runs some losses and ablations (an ablation brings its
loss). Compiled steps are cached in `WORKDIR/jax_cache` (JAX's persistent compilation cache), so
that runs differing only in their seed compile once.
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
DEFAULT_OUTPUT = "experiments/RESULTS.md"


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
    "--docs",
    action="store_true",
    help="also write the test classes' tables and the figure of their intervals to "
    "docs/_generated/comparison_<setting>.json (docs/guide/comparison.rst shows them)",
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
  main_lib.import_tensorflow_quietly()
  from experiments.comparison import run
  from experiments.job import input_pipeline

  input_pipeline.hide_gpus_from_tensorflow()
  logging.basicConfig(
    level=logging.WARNING, format="%(asctime)s %(message)s", stream=sys.stderr, force=True
  )
  logging.getLogger("experiments").setLevel(logging.INFO)
  _cache_compilations(args.workdir)
  try:
    out = run.run_comparison(args.size, args.workdir, args.only)
  except config_lib.ConfigError as e:
    _parser().exit(main_lib.EXIT_CONFIG_ERROR, f"{PROG}: error: {' '.join(str(e).split())}\n")
  except KeyboardInterrupt as e:  # train.Interrupted says what was saved.
    _parser().exit(main_lib.EXIT_INTERRUPTED, f"{PROG}: {e or 'interrupted'}\n")
  with open(os.path.join(args.workdir, "comparison.json"), "w") as f:
    json.dump(out, f, indent=1)
  section = report.write_section(out, document)
  print(section)
  if args.docs:
    for path in report.write_docs(section, source="measured"):
      print("wrote", path)


if __name__ == "__main__":
  main()
