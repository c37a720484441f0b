"""What runs report: the metrics file, the plots and the table of final metrics.

* `metrics.jsonl` in a run's workdir: one JSON record per logged step (`loss`, `learning_rate`,
  `images_per_second`, `input_wait_fraction`, and `tanh_scale` and `device_memory_gib` where they
  apply: see `train`) and per evaluation (`recall@k`, `map@r`, `map`, `tie_aware_map`, each
  prefixed with the name of its evaluation where the data set's protocol names them, as
  VehicleID's `small/recall@1`; a hashing benchmark's `tie_aware_map`, `tie_aware_ndcg`,
  `map@k` instead; and `seen/...` on the train split), each with its `step`;
  `MetricsWriter` appends, `read_metrics` reads; `evaluation_names` finds the evaluations.
* `plot_curves`: a run's loss and retrieval metrics against steps (`curves.png`, titled with the
  run's name; no loss panel for an untrained run);
  `plot_sweep`: an ablation's final metrics against the swept value.
* `format_table`: the plain-text table of final metrics that `experiments.job.main` and the ablation
  scripts print, one row per run; `format_text_table`, a table of text cells
  (`experiments.compare_released`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

# Column headers of the metrics in tables (Recall@k is "R@k").
_HEADERS = {
  "map@r": "MAP@R",
  "map": "mAP",
  "tie_aware_map": "mAP_T",
  "tie_aware_ndcg": "NDCG_T",
  "seen/map@r": "seen MAP@R",
}


def _header(metric: str) -> str:
  """A metric's column header: `_HEADERS`, or `mAP@5000` for the hashing protocol's `map@5000`."""
  return _HEADERS.get(metric, metric.replace("map@", "mAP@"))


def _hashing_metrics(metrics: Mapping[str, Any], evaluation: str) -> list[str]:
  """The metrics of a hashing protocol's evaluation (`jaxrank.evaluate_hashing`) that `metrics`
  holds beyond mAP_T: `tie_aware_ndcg`, then `map@k` by `k` (unprefixed names)."""
  prefix = _key(evaluation, "map@")
  tails = [k[len(prefix) :] for k in metrics if k.startswith(prefix)]
  cutoffs = sorted(int(t) for t in tails if t.isdigit())  # Not MAP@R's `map@r`.
  ndcg = ["tie_aware_ndcg"] if _key(evaluation, "tie_aware_ndcg") in metrics else []
  return ndcg + [f"map@{k}" for k in cutoffs]


def evaluation_names(metrics: Mapping[str, Any]) -> list[str]:
  """The evaluations whose metrics `metrics` holds, in their order: `""` for unprefixed metrics
  (`tie_aware_map`, which every evaluation has), a name for prefixed ones (`small` of
  `small/tie_aware_map`); the train split's `seen/`
  left out. Empty for a record that is no evaluation."""
  names: list[str] = []
  for key in metrics:
    head, _, tail = key.rpartition("/")
    if tail == "tie_aware_map" and head != "seen" and head not in names:
      names.append(head)
  return names


def _key(evaluation: str, metric: str) -> str:
  """`metric` of the evaluation named `evaluation` (as `datasets.metric_name`)."""
  return f"{evaluation}/{metric}" if evaluation else metric


def read_metrics(workdir: str) -> list[dict[str, Any]]:
  """The records of `metrics.jsonl` in a workdir, in order (empty if there is none)."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  records = []
  with open(path) as f:
    for line in f:
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError:  # A line cut short by a killed run.
        break
  return records


class MetricsWriter:
  """Appends records to `metrics.jsonl`; on resume, first drops those logged after its step.

  Resuming at step 0 (nothing was saved) drops every record: the evaluation of step 0 is redone.
  `kept` holds the records kept (the TensorBoard summaries are written again from them).
  """

  def __init__(self, workdir: str, resumed_step: int):
    self.path = os.path.join(workdir, "metrics.jsonl")
    records = read_metrics(workdir) if resumed_step else []
    kept = [r for r in records if r["step"] <= resumed_step]
    self.kept = kept
    with open(self.path + ".tmp", "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in kept)
    os.replace(self.path + ".tmp", self.path)

  def write(self, record: dict[str, Any]) -> None:
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")


def format_table(
  rows: dict[str, dict[str, float]],
  *,
  ks: Sequence[int] | None = None,
  metrics: Sequence[str] = ("map@r", "map", "tie_aware_map"),
  column: str = "run",
  seconds: dict[str, float] | None = None,
) -> str:
  """A plain-text table of final metrics, one row per named run.

  Args:
    rows: run name -> its metrics (holding `recall@k` for every k of `ks` and every key of
      `metrics`, for each evaluation: `evaluation_names` of the first row).
    ks: the Recall@k columns; None: those of the first row's first evaluation.
    metrics: the columns after Recall@k: keys of `"map@r"`, `"map"`, `"tie_aware_map"`.
    column: the header of the first column, the run names.
    seconds: run name -> wall time, for a last column "time" (blank for runs it lacks).

  Returns:
    The header, a dashed line and a row per run: for each evaluation its Recall@k and `metrics`
    (headed `R@1`, ... for the unnamed one; `small R@1`, ... for VehicleID's `small/...`). When
    every run has `seen/map@r` (trained with `eval_seen_classes`), a column "seen MAP@R" gives
    MAP@R on the train split.
  """
  first = next(iter(rows.values()), {})
  evaluations = evaluation_names(first) or [""]
  if ks is None:
    prefix = _key(evaluations[0], "recall@")
    ks = sorted(int(k[len(prefix) :]) for k in first if k.startswith(prefix))
  keys, names = [], []
  for evaluation in evaluations:
    label = f"{evaluation} " if evaluation else ""
    for k in ks:
      keys.append(_key(evaluation, f"recall@{k}"))
      names.append(f"{label}R@{k}")
    # A hashing protocol's evaluation has no MAP@R or mAP but NDCG_T and mAP@k.
    shown = [m for m in metrics if _key(evaluation, m) in first]
    shown += _hashing_metrics(first, evaluation)
    keys.extend(_key(evaluation, m) for m in shown)
    names.extend(label + _header(m) for m in shown)
  if all("seen/map@r" in m for m in rows.values()):
    keys.append("seen/map@r")
    names.append(_HEADERS["seen/map@r"])
  width = max([len(n) for n in rows] + [len(column)])
  header = f"{column:{width}} " + " ".join(f"{n:>6}" for n in names)
  if seconds is not None:
    header += f" {'time':>6}"
  lines = [header, "-" * len(header)]
  for name, values in rows.items():
    cells = [f"{values[k]:{max(6, len(n))}.3f}" for k, n in zip(keys, names)]
    line = f"{name:{width}} " + " ".join(cells)
    if seconds is not None:
      line += f" {seconds[name]:5.0f}s" if name in seconds else " " * 7
    lines.append(line)
  return "\n".join(lines)


def plot_curves(workdir: str, title: str = "") -> str:
  """Writes `curves.png`: training loss, and Recall@k and MAP@R on the test split, against steps.

  A run without training steps (the untrained baseline) gets the retrieval panel alone. `title`
  names the run (`train.train_and_evaluate` gives "<run>: <loss> on <dataset>").
  """
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  records = read_metrics(workdir)
  train = [r for r in records if "loss" in r]
  evals = [r for r in records if evaluation_names(r)]
  if train:
    fig, (ax_loss, ax_eval) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train])
    ax_loss.set(xlabel="step", ylabel="training loss", title="loss")
  else:  # An untrained run (num_steps=0) has no loss to plot.
    fig, ax_eval = plt.subplots(1, 1, figsize=(5, 3.6))
  if evals:
    steps = [r["step"] for r in evals]
    last = evals[-1]
    for evaluation in evaluation_names(last):
      prefix = _key(evaluation, "recall@")
      main = _key(evaluation, "map@r")  # mAP_T for a hashing protocol's evaluation.
      main = main if main in last else _key(evaluation, "tie_aware_map")
      for key in [k for k in last if k.startswith(prefix)] + [main]:
        ax_eval.plot(steps, [r[key] for r in evals], marker="o", label=key)
    ax_eval.legend(fontsize=8)
  ax_eval.set(xlabel="step", ylabel="test split (unseen classes)", title="retrieval")
  fig.suptitle(title)
  fig.tight_layout()
  path = os.path.join(workdir, "curves.png")
  fig.savefig(path, dpi=80)
  plt.close(fig)
  return path


def plot_sweep(
  results: dict[str, dict[str, float]],
  points: dict[str, tuple[Any, str | None]],
  path: str,
  *,
  xlabel: str,
  title: str,
  baseline: dict[str, float] | None = None,
  log_x: bool = False,
  k: int = 1,
) -> str:
  """Writes MAP@R (top) and R@k (bottom) against the swept value, the untrained network dashed.

  For a data set of several evaluations (VehicleID's test lists), those of the first
  (`evaluation_names`), named in the axes' labels.

  Args:
    results: run name -> final metrics.
    points: run name -> `(x, series)`: where the run sits on the x axis (a number, or a string for
      categories) and the line it belongs to (`None` for a single line).
    path: the PNG to write.
    xlabel: the x axis's label.
    title: the figure's title.
    baseline: metrics of the untrained network, drawn as horizontal dashed lines.
    log_x: logarithmic x axis (base 2), for values that double.
    k: which Recall@k to plot (the metrics must hold `recall@<k>`).
  """
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, axes = plt.subplots(2, 1, figsize=(5, 3.5), sharex=True)
  series = list(dict.fromkeys(points[n][1] for n in results))
  evaluation = (evaluation_names(next(iter(results.values()), {})) or [""])[0]
  keys = (_key(evaluation, "map@r"), _key(evaluation, f"recall@{k}"))
  for ax, key, label in zip(axes, keys, (_key(evaluation, "MAP@R"), _key(evaluation, f"R@{k}"))):
    for s in series:
      names = [n for n in results if points[n][1] == s]
      ax.plot(
        [points[n][0] for n in names],
        [results[n][key] for n in names],
        marker="o",
        label=s if s is not None else label,
      )
    if baseline is not None:
      ax.axhline(baseline[key], color="grey", linestyle="--", linewidth=1, label="untrained")
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
  axes[0].legend(fontsize=7, loc="best")
  if log_x:
    axes[1].set_xscale("log", base=2)
    xs = sorted({points[n][0] for n in results})
    axes[1].set_xticks(xs, [f"{x:g}" for x in xs])
    axes[1].minorticks_off()
  axes[1].set_xlabel(xlabel)
  fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  plt.close(fig)
  return path


def format_text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  """A plain-text table of text cells, columns left-aligned to their widest cell.

  Args:
    header: the column names.
    rows: one sequence of cells per row, as many as `header`.

  Returns:
    The header, a dashed line and a line per row (trailing spaces stripped).
  """
  widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
  lines = [
    " | ".join(f"{c:{w}}" for c, w in zip(cells, widths)).rstrip()
    for cells in [list(header)] + [list(r) for r in rows]
  ]
  lines.insert(1, "-+-".join("-" * w for w in widths))
  return "\n".join(lines)
