"""The comparison's section of experiments/RESULTS.md, written from what `run.run_comparison` gives.

The section lies between `<!-- results: begin comparison -->` and `<!-- results: end comparison
-->`; `write_section` replaces it and keeps every other section (`experiments.results` keeps this
one when it regenerates the others). Every number and every reading is written by the program:
the tables from the runs, and whether a claim holds from the 95% intervals of its differences
(`stats.reading`).
"""

from __future__ import annotations

import datetime
import inspect
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from experiments import docs_data
from experiments import results
from experiments.comparison import protocol
from experiments.comparison import stats

NAME = "comparison"
TITLE = "A fair comparison: every loss tuned alike, over seeds, fine-tuned and from scratch"
COMMAND = "python -m experiments.comparison.main --workdir runs/comparison"
METRICS = (("recall@1", "R@1"), ("map@r", "MAP@R"))
PHRASES = {"holds": "holds", "does not hold": "does not hold", "inconclusive": "is inconclusive"}
SETTING_TITLES = {
  "pretrained": "fine-tuning the pretrained backbone (the papers' regime)",
  "scratch": "from scratch (the main job's regime)",
}


def values_of(seeds: Sequence[Mapping[str, float] | None], metric: str) -> list[float]:
  """A metric over the seeds that did not diverge."""
  return [m[metric] for m in seeds if m is not None]


def _estimate(values: Sequence[float]) -> str:
  """`0.551 [0.530, 0.572]`, the mean and its 95% interval."""
  if not values:
    return "diverged"
  mean, low, high = stats.interval(values)
  if math.isnan(low):
    return f"{mean:.3f}"
  return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def _value(value: Any) -> str:
  return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _hyperparameters(trial: Mapping[str, Any]) -> str:
  return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in trial.items())


def seeds_table(
  rows: Sequence[tuple[str, Sequence[Mapping[str, float] | None]]],
  raw_pixels: Mapping[str, float] | None,
) -> str:
  """Rows of seeds as mean [95% interval] per metric, and the rows each beats (Welch, 0.05)."""
  header = [
    "#",
    "run",
    "seeds",
    *(f"{short} mean [95% CI]" for _, short in METRICS),
    *(f"better than ({short})" for _, short in METRICS),
  ]
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for i, (name, seeds) in enumerate(rows, 1):
    ok = [m for m in seeds if m is not None]
    beats = []
    for metric, _ in METRICS:
      mine = values_of(seeds, metric)
      beats.append(
        " ".join(
          str(j)
          for j, (_, other) in enumerate(rows, 1)
          if j != i
          and len(mine) > 1
          and len(values_of(other, metric)) > 1
          and stats.significantly_better(mine, values_of(other, metric))
        )
        or "-"
      )
    lines.append(
      "| "
      + " | ".join(
        [
          str(i),
          name,
          f"{len(ok)}/{len(seeds)}",
          *(_estimate(values_of(seeds, m)) for m, _ in METRICS),
          *beats,
        ]
      )
      + " |"
    )
  if raw_pixels is not None:
    lines.append(
      "| | raw_pixels | - | " + " | ".join(f"{raw_pixels[m]:.3f}" for m, _ in METRICS) + " | | |"
    )
  return "\n".join(lines)


def trials_table(out: Mapping[str, Any], losses: Sequence[str]) -> str:
  """Each loss's search space and trials, their validation MAP@R in each setting, chosen in bold."""
  header = [
    "loss",
    "search space (default first)",
    "trial",
    *(f"validation MAP@R, {s}" for s in protocol.SETTINGS),
  ]
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for loss in losses:
    space = "; ".join(
      f"{k}: {', '.join(v if isinstance(v, str) else f'{v:g}' for v in vs)}"
      for k, vs in protocol.search_space(loss, protocol.SIZES[out["size"]].heads).items()
    )
    trials = out["settings"][protocol.SETTINGS[0]]["trials"][loss]
    for i, record in enumerate(trials):
      cells = []
      for setting in protocol.SETTINGS:
        mine = out["settings"][setting]
        result = mine["trials"][loss][i]["result"]
        score = "diverged" if result["metrics"] is None else f"{result['metrics']['map@r']:.3f}"
        chosen = mine["chosen"][loss] == record["trial"]
        cells.append(f"**{score}**" if chosen else score)
      lines.append(
        "| "
        + " | ".join(
          [
            loss if i == 0 else "",
            space if i == 0 else "",
            _hyperparameters(record["trial"]),
            *cells,
          ]
        )
        + " |"
      )
  return "\n".join(lines)


def _difference(better: Sequence[float], worse: Sequence[float]) -> str:
  if len(better) < 2 or len(worse) < 2:
    return "too few seeds"
  difference, low, high = stats.difference_interval(better, worse)
  return f"{difference:+.3f} [{low:+.3f}, {high:+.3f}]"


def main_claim(setting: Mapping[str, Any], losses: Sequence[str]) -> str:
  """Each AP loss against the best pair-based baseline on R@1, read from the intervals."""
  baselines = [loss for loss in losses if loss in protocol.BASELINES]
  ap_losses = [loss for loss in losses if loss not in protocol.BASELINES]
  if not baselines or not ap_losses:
    return "Not read: the run did not train both AP losses and baselines."
  r1 = {loss: values_of(setting["final"][loss], "recall@1") for loss in losses}
  best = max(baselines, key=lambda b: stats.interval(r1[b])[0] if r1[b] else -math.inf)
  parts = [
    f"{loss} {_difference(r1[loss], r1[best])}: {stats.reading([(r1[loss], r1[best])])}"
    for loss in ap_losses
  ]
  return (
    f"Each AP loss against the best baseline, {best}, on R@1 (the difference of the means "
    "and its 95% interval; the claim that the AP loss trains better): " + "; ".join(parts) + "."
  )


def ablation_part(
  ablation: protocol.Ablation, rows: Sequence[Mapping[str, Any]], size: protocol.Size
) -> str:
  """An ablation: the paper's claim, the values' table, the claimed pairs and the reading."""
  experiment = {e.name: e for e in results.EXPERIMENTS}[ablation.name]
  by_value = {r["value"]: r for r in rows}
  table = seeds_table([(f"{_value(r['value'])} ({r['name']})", r["seeds"]) for r in rows], None)
  pairs = protocol.ablation_pairs(ablation, size)
  samples = [
    (values_of(by_value[b]["seeds"], "recall@1"), values_of(by_value[w]["seeds"], "recall@1"))
    for b, w in pairs
  ]
  differences = "; ".join(
    f"{_value(b)} minus {_value(w)}: {_difference(*s)}" for (b, w), s in zip(pairs, samples)
  )
  why = f" Values: {ablation.why}." if ablation.why else ""
  return "\n\n".join(
    [
      f"#### {experiment.title}",
      f"**The paper's claim.** {inspect.cleandoc(experiment.claim)}",
      f"Trained on the chosen {ablation.loss} setting of the pretrained regime, each value "
      f"applied by `experiments.ablations.{ablation.name}.overrides`.{why}",
      table,
      f"Claimed better, R@1 difference [95% interval]: {differences}. "
      f"**Reading: the claim {PHRASES[stats.reading(samples)]}** in the pretrained regime.",
    ]
  )


def protocol_part(out: Mapping[str, Any], size: protocol.Size) -> str:
  """What was run: the data, the runs, the tuning, the seeds, the statistics."""
  data = out["data"]
  split = ", ".join(f"{k} {v['classes']} classes ({v['images']:,} images)" for k, v in data.items())
  return "\n".join(
    [
      f"- Data: `{size.dataset}`: {split}. The validation classes are "
      f"{size.validation_fraction:.0%} of the training classes (seeded, per super-class: "
      "`Config.validation_fraction`); the test classes are read only by the seeds' runs.",
      f"- Every run: the glyphs config's network (widths {size.model_features}, embeddings of "
      f"{size.embedding_dim} dimensions), batches of {size.batch_size // size.samples_per_class} "
      f"classes x {size.samples_per_class} images, {size.num_steps} steps (warm-up "
      f"{size.warmup_steps}, then cosine), AdamW; the two settings differ only in the backbone's "
      "initial weights.",
      f"- Tuning: {size.trials} trials for every loss, the default first and the others drawn "
      f"(seed {protocol.TRIALS_SEED}) from its grid, the learning rate a dimension of every grid; "
      "each trial trains with seed 0 on the training classes less the validation classes, and "
      "the trial of the highest validation MAP@R is chosen.",
      f"- Seeds: each chosen setting, and the untrained network, over seeds 0 to "
      f"{size.seeds - 1} on every training class, evaluated on the test classes (leave-one-out). "
      'Mean and 95% t-interval; "better than" lists the rows whose mean it exceeds by Welch\'s '
      "t-test at 0.05 (two-sided). A claim holds when the 95% Welch interval of every claimed "
      "difference lies above 0, does not hold when one lies below 0, and is inconclusive "
      "otherwise.",
    ]
  )


def backbone_part(report: Mapping[str, Any]) -> str:
  """The pretrained backbone: its characters, training and held-out accuracy."""
  s = report["settings"]
  return (
    f"Pretrained by classification of {report['characters']} characters drawn by at least "
    f"{s['min_typefaces']} typefaces, none of them a training or test class "
    f"({report['images']:,} images), {s['num_steps']} steps of {s['batch_size']} images "
    f"(AdamW, {s['learning_rate']:g}), in {report['seconds']:.0f} s: **held-out accuracy "
    f"{report['accuracy']:.3f}** on {report['held_out']:,} images of the same characters "
    f"(chance {1 / report['characters']:.4f})."
  )


def format_section(
  out: Mapping[str, Any], *, date: str, machine_name: str, package_versions: Mapping[str, str]
) -> str:
  """The section of RESULTS.md, between its markers."""
  size = protocol.SIZES[out["size"]]
  losses = [loss for loss in protocol.LOSSES if loss in out["settings"]["pretrained"]["final"]]
  packages = ", ".join(f"{k} {v}" for k, v in package_versions.items())
  command = (
    COMMAND
    + ("" if out["size"] == "full" else f" --size {out['size']}")
    + (f" --only {' '.join(out['only'])}" if out["only"] else "")
  )
  parts = [
    results.BEGIN.format(NAME),
    f"## {TITLE}",
    f"Command (rerunning it reuses every finished run):\n\n    {command}",
    f"Run on {date}, {machine_name}; {packages}. This call: {out['seconds']:.0f} s "
    f"({out['computed']} runs computed, {out['reused']} reused); the runs took "
    f"{out['run_seconds']:.0f} s in all and the backbone {out['backbone']['seconds']:.0f} s.",
    "### Protocol",
    protocol_part(out, size),
    "### The pretrained backbone",
    backbone_part(out["backbone"]),
    "### Search spaces, trials and the chosen values (bold)",
    trials_table(out, losses),
  ]
  for setting in protocol.SETTINGS:
    mine = out["settings"][setting]
    rows = [("untrained", mine["untrained"]), *((loss, mine["final"][loss]) for loss in losses)]
    parts += [
      f"### Test classes, {SETTING_TITLES[setting]}",
      seeds_table(rows, out["raw_pixels"]),
      main_claim(mine, losses),
    ]
  if out["ablations"]:
    parts.append("### The papers' ablations in the pretrained regime")
    parts += [
      ablation_part(a, out["ablations"][a.name], size)
      for a in protocol.ABLATIONS
      if a.name in out["ablations"]
    ]
  parts.append(results.END.format(NAME))
  return "\n\n".join(parts) + "\n"


def write_section(out: Mapping[str, Any], path: str) -> str:
  """Writes the comparison's section into the document at `path`, keeping the other sections;
  its date is the last of its runs' records, its machines theirs (`out["recorded"]`)."""
  sections = {}
  if os.path.isfile(path):
    with open(path) as f:
      sections = results.read_sections(f.read())
  recorded = out.get("recorded") or {}
  sections[NAME] = format_section(
    out,
    date=recorded.get("last") or datetime.date.today().isoformat(),
    machine_name=" and ".join(recorded.get("machines") or [results.machine()]),
    package_versions=results.versions(),
  )
  results.write(path, results.format_document(sections))
  return sections[NAME]


DOCS_COMMAND = "python -m experiments.comparison.main --from-records --docs"
_ESTIMATE = re.compile(r"^([\d.]+) \[([\d.]+), ([\d.]+)\]$")


def setting_tables(section: str) -> dict[str, list[str]]:
  """Each setting's table of test-class seeds in the section, as Markdown lines: a title, the
  table, the main claim's reading under it."""
  tables = {}
  for setting, title in SETTING_TITLES.items():
    heading = f"### Test classes, {title}"
    if heading not in section:
      continue
    body = section.split(heading, 1)[1].split("\n### ", 1)[0].strip().splitlines()
    table = [line for line in body if line.startswith("|")]
    rest = [line for line in body if line.strip() and not line.startswith("|")]
    tables[setting] = [
      f"Test classes, {title}: mean and 95% t-interval over the seeds; 'better than': the rows "
      "it beats by Welch's t-test at 0.05",
      *table,
      *rest,
    ]
  return tables


def intervals_figure(tables: Mapping[str, Sequence[str]]):
  """Each run's R@1 with its 95% interval, one panel per setting (matplotlib figure)."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  figure, axes = plt.subplots(
    1, len(tables), figsize=(5 * len(tables), 4), sharey=True, squeeze=False
  )
  pixels = None
  for axis, (setting, lines) in zip(axes[0], tables.items()):
    parsed = docs_data.markdown_table(lines)
    names: list[str] = []
    means: list[float] = []
    errors: list[list[float]] = [[], []]
    for row in parsed["rows"]:
      found = _ESTIMATE.match(row[3])
      if found is None:  # The raw pixels: one value, no interval.
        if row[1] == "raw_pixels":
          pixels = axis.axvline(float(row[3]), color="grey", linestyle="--", label="raw pixels")
        continue
      mean, low, high = map(float, found.groups())
      names.append(row[1])
      means.append(mean)
      errors[0].append(mean - low)
      errors[1].append(high - mean)
    positions = list(range(len(names)))[::-1]
    axis.errorbar(means, positions, xerr=errors, fmt="o", capsize=3)
    axis.set_yticks(positions, names)
    axis.set_xlabel("R@1 on the test classes (95% interval)")
    axis.set_title(setting)
    axis.grid(axis="x", alpha=0.3)
  if pixels is not None:  # Below the panels, where it hides no row.
    figure.legend(handles=[pixels], loc="lower center", frameon=False)
    figure.tight_layout(rect=(0, 0.06, 1, 1))
  else:
    figure.tight_layout()
  return figure


def write_docs(section: str, *, source: str, directory=None) -> list:
  """Writes docs/_generated/comparison_<setting>.json for each setting of the section, the first
  with the figure of the intervals; the date and machine are the section's ("Run on ...")."""

  run_on = re.search(r"^Run on (\d{4}-\d\d-\d\d), (.*?); ", section, flags=re.MULTILINE)
  if run_on is None:
    raise ValueError("the comparison's section says not when and where it ran")
  tables = setting_tables(section)
  if not tables:
    raise ValueError("the comparison's section holds no table of test classes")
  figure = intervals_figure(tables)
  paths = []
  for i, (setting, lines) in enumerate(tables.items()):
    paths.append(
      docs_data.write_table(
        f"comparison_{setting}",
        **docs_data.markdown_table(lines),
        command=DOCS_COMMAND,
        source=source,
        figure=figure if i == 0 else None,
        date=run_on.group(1),
        machine_name=run_on.group(2),
        directory=directory,
      )
    )
  return paths
