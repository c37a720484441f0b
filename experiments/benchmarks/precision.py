"""Mixed precision's quality: the glyph quick run (`make demo`) in float32 and in bfloat16.

Command (about 4 minutes a run on 2 CPU cores, two runs a seed; finished runs in `--workdir` are
reused, so a rerun only prints and writes):

    .venv/bin/python -m experiments.benchmarks.precision --seeds 0 1 2 --docs   # in runs/precision

Each seed runs `experiments/job/configs/glyphs.py` (every loss at its defaults, the untrained
network and the raw pixels) twice, with `--set half_precision=False` and `True`, into
`<workdir>/seed<S>_<precision>`, and the table gives each loss's Recall@1 and MAP@R on the 359
unseen characters in both precisions (means over the seeds), the difference bfloat16 - float32
(mean), the largest difference of one seed, and the range of float32's Recall@1 over the seeds
(what changing the seed alone does). `--docs` writes the table to
docs/_generated/precision_glyphs.json, which docs/guide/training.rst shows ("Mixed precision").

On this CPU bfloat16 is emulated and slower than float32: the table is about quality, not speed
(for speed, `experiments.benchmarks.device`'s `train` section on a GPU and
`experiments.benchmarks.accelerators`' `train` table for a TPU).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from experiments import docs_data

CONFIG = "experiments/job/configs/glyphs.py"
PRECISIONS = {"float32": False, "bfloat16": True}
# The goal of mixed precision on the quick run (issue 50): bfloat16 within this much Recall@1 of
# float32 for every loss.
GOAL = 0.02


def run_all(seeds: list[int], workdir: str) -> dict[tuple[int, str], dict[str, dict]]:
  """`(seed, precision) -> {run name: metrics}` of the quick run, each in its own workdir."""
  from experiments.job import main  # pylint: disable=g-import-not-at-top

  main.import_tensorflow_quietly()
  from experiments.job import input_pipeline  # pylint: disable=g-import-not-at-top

  input_pipeline.hide_gpus_from_tensorflow()
  results = {}
  for seed in seeds:
    for precision, half in PRECISIONS.items():
      directory = os.path.join(workdir, f"seed{seed}_{precision}")
      overrides = [f"half_precision={half}", f"seed={seed}"]
      results[seed, precision] = main.run(CONFIG, directory, overrides)
  return results


def table(results: dict[tuple[int, str], dict[str, dict]], seeds: list[int]) -> list[str]:
  """The Markdown lines of the table (module docstring)."""
  names = list(results[seeds[0], "float32"])

  def values(name, precision, metric):
    return np.array([results[s, precision][name][metric] for s in seeds])

  lines = [
    f"The glyph quick run ({CONFIG}) in float32 and in bfloat16 mixed precision "
    f"(half_precision=True), seeds {', '.join(map(str, seeds))}; means over the seeds",
    "| run | R@1 float32 | R@1 bfloat16 | difference | largest of one seed | float32's range over "
    "seeds | MAP@R float32 | MAP@R bfloat16 |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
  ]
  worst = 0.0
  for name in names:
    full, half = values(name, "float32", "recall@1"), values(name, "bfloat16", "recall@1")
    differences = half - full
    largest = differences[np.argmax(np.abs(differences))]
    if name not in ("untrained", "raw_pixels"):
      worst = max(worst, abs(float(np.mean(differences))))
    lines.append(
      f"| {name} | {full.mean():.3f} | {half.mean():.3f} | {differences.mean():+.3f} | "
      f"{largest:+.3f} | {np.ptp(full):.3f} | {values(name, 'float32', 'map@r').mean():.3f} | "
      f"{values(name, 'bfloat16', 'map@r').mean():.3f} |"
    )
  verdict = "within" if worst <= GOAL else "NOT within"
  lines.append(
    f"Largest mean difference of a trained run: {worst:.3f} R@1, {verdict} the goal of {GOAL}; "
    "the difference of one seed is that of two trainings that round differently, to be read "
    "beside float32's own range over the seeds."
  )
  return lines


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
  parser.add_argument("--workdir", default="runs/precision")
  docs_data.add_docs_argument(parser, "precision_glyphs")
  args = parser.parse_args(argv)
  lines = table(run_all(args.seeds, args.workdir), args.seeds)
  print("\n".join(lines))
  if args.docs:
    docs_data.write_markdown_tables({"precision_glyphs": lines})
  return 0


if __name__ == "__main__":
  sys.exit(main())
