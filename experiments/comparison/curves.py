"""The learning curves' report: each row's plateau, whether the short budget's ranking holds there.

Each row of the comparison trains in its chosen setting for `Size.curve_steps` (10 times the
comparison's budget), evaluated every `Size.curve_eval_every` steps on the validation classes and
the test classes (`run.run_curves`). From each curve:

* **the plateau**: the first evaluation at which the validation R@1 is within `PLATEAU_TOLERANCE`
  (0.01) of the run's best validation R@1 (early stopping on validation, as Musgrave et al. 2020:
  the test classes choose nothing); the row's test R@1 *at the plateau* is read at that step;
* **the ranking**: the rows ordered by their test R@1 at the comparison's budget (the mean over its
  seeds, from the comparison's records) and at the plateau; the short budget's ranking *holds*
  when the two orders are the same, and Kendall's tau between them says how far they differ.

`format_table` gives one Markdown table per setting, `figure` R@1 against steps (validation and
test classes, one line per row, the plateaus marked), `write_docs` both to docs/_generated/.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from experiments import docs_data
from experiments.comparison import protocol
from experiments.comparison import report

PLATEAU_TOLERANCE = 0.01
VALIDATION, TEST = "recall@1", "test/recall@1"
DOCS_COMMAND = "python -m experiments.comparison.main --stage curves --from-records --docs"


def plateau(
  curve: Sequence[Mapping[str, float]], key: str = VALIDATION
) -> Mapping[str, float] | None:
  """The first point of `curve` whose `key` is within `PLATEAU_TOLERANCE` of its best (None for a
  curve without that metric)."""
  points = [p for p in curve if key in p and math.isfinite(p[key])]
  if not points:
    return None
  best = max(p[key] for p in points)
  return next(p for p in points if p[key] >= best - PLATEAU_TOLERANCE)


def _ranks(values: Mapping[str, float]) -> dict[str, int]:
  """Row -> its rank by value, 1 the highest (ties broken by the rows' order)."""
  order = sorted(values, key=lambda row: -values[row])
  return {row: i + 1 for i, row in enumerate(order)}


def setting_rows(rows: Mapping[str, Mapping[str, Any] | None]) -> tuple[list[list[str]], str]:
  """The table's rows for one setting and the reading of its ranking under it."""
  points = {r: plateau(v["curve"]) for r, v in rows.items() if v is not None}
  done = {r: v for r, v in rows.items() if v is not None and points[r] is not None}
  at_plateau = {r: (points[r] or {}).get(TEST, math.nan) for r in done}
  short = {r: float(np.mean(v["short"])) for r, v in done.items() if v.get("short")}
  ranked = [r for r in done if r in short and math.isfinite(at_plateau[r])]
  short_ranks = _ranks({r: short[r] for r in ranked})
  plateau_ranks = _ranks({r: at_plateau[r] for r in ranked})
  table = []
  for row, value in done.items():
    tested = [p for p in value["curve"] if TEST in p] or [{"step": "-", TEST: math.nan}]
    best, last = max(tested, key=lambda p: p[TEST]), tested[-1]
    table.append(
      [
        row,
        f"{short[row]:.3f}" if row in short else "-",
        str(short_ranks.get(row, "-")),
        str((points[row] or {}).get("step")),
        f"{at_plateau[row]:.3f}",
        str(plateau_ranks.get(row, "-")),
        f"{best[TEST]:.3f} ({best['step']})",
        f"{last[TEST]:.3f} ({last['step']})",
        "diverged" if value.get("diverged") else "",
      ]
    )
  return table, _reading(short_ranks, plateau_ranks)


def _reading(short_ranks: Mapping[str, int], plateau_ranks: Mapping[str, int]) -> str:
  """Whether the short budget's order is the plateau's, with Kendall's tau."""
  rows = list(short_ranks)
  if len(rows) < 2:
    return "The ranking is not read: fewer than two rows have both budgets."
  same = all(short_ranks[r] == plateau_ranks[r] for r in rows)
  tau = scipy_stats.kendalltau([short_ranks[r] for r in rows], [plateau_ranks[r] for r in rows])
  moved = ", ".join(
    f"{r} {short_ranks[r]} -> {plateau_ranks[r]}"
    for r in rows
    if not same and short_ranks[r] != plateau_ranks[r]
  )
  verdict = "holds" if same else f"does not hold ({moved})"
  return (
    f"The ranking at the comparison's budget {verdict} at the plateau; Kendall's tau between "
    f"the two orders of {len(rows)} rows: {tau.statistic:.2f}."
  )


COLUMNS = (
  "row",
  "test R@1, short budget (mean over seeds)",
  "rank",
  "plateau step (validation)",
  "test R@1 at the plateau",
  "rank",
  "best test R@1 (step)",
  "test R@1 at the end (step)",
  "",
)


def _title(out: Mapping[str, Any], setting: str) -> str:
  size = protocol.SIZES[out["size"]]
  return (
    f"Learning curves, {report.SETTING_TITLES[setting]}: each row's chosen setting trained "
    f"{size.curve_steps} steps (the short budget: {size.num_steps}), seed 0; its plateau is the "
    f"first evaluation within {PLATEAU_TOLERANCE} of its best validation R@1"
  )


def format_table(out: Mapping[str, Any]) -> str:
  """Each setting's table (Markdown) and the reading of its ranking."""
  parts = []
  for setting in protocol.SETTINGS:
    rows, reading = setting_rows(out["settings"][setting])
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    parts += [f"### {_title(out, setting)}", "\n".join(lines), reading]
  return "\n\n".join(parts) + "\n"


def figure(out: Mapping[str, Any]):
  """R@1 against steps, validation (top) and test classes (bottom), one column per setting, one
  line per row, each plateau marked."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  settings = list(protocol.SETTINGS)
  fig, axes = plt.subplots(
    2, len(settings), figsize=(6 * len(settings), 8), sharex=True, squeeze=False
  )
  colours = plt.get_cmap("tab20")
  for column, setting in enumerate(settings):
    for i, (row, value) in enumerate(out["settings"][setting].items()):
      if value is None:
        continue
      point = plateau(value["curve"])
      for line, key in enumerate((VALIDATION, TEST)):
        steps = [p["step"] for p in value["curve"] if key in p]
        axis = axes[line][column]
        axis.plot(steps, [p[key] for p in value["curve"] if key in p], color=colours(i), label=row)
        if point is not None and key in point:
          axis.plot([point["step"]], [point[key]], "o", color=colours(i))
    for line, what in enumerate(("validation", "test")):
      axes[line][column].set_title(f"{setting}: R@1 on the {what} classes")
      axes[line][column].grid(alpha=0.3)
    axes[1][column].set_xlabel("step (dots: the plateau, by the validation classes)")
  axes[0][-1].legend(fontsize="small", loc="lower right", ncol=2)
  fig.tight_layout()
  return fig


def write_docs(out: Mapping[str, Any], directory=None) -> list:
  """docs/_generated/comparison_curves_<setting>.json, the first with the figure."""
  fig = figure(out)
  paths = []
  for i, setting in enumerate(protocol.SETTINGS):
    rows, reading = setting_rows(out["settings"][setting])
    paths.append(
      docs_data.write_table(
        f"comparison_curves_{setting}",
        title=_title(out, setting),
        columns=COLUMNS,
        rows=rows,
        command=DOCS_COMMAND,
        figure=fig if i == 0 else None,
        notes=[reading],
        date=(out.get("recorded") or {}).get("last"),
        machine_name=" and ".join((out.get("recorded") or {}).get("machines") or []) or None,
        directory=directory,
      )
    )
  return paths
