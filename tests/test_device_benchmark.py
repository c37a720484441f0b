"""Smoke test of `experiments/benchmarks/device.py` on this CPU at tiny shapes: each section gives a
row per loss with numbers in it, the check compares against the CPU backend, and the guide's tables
are written from the JSON record. Timings are not checked (a CPU's mean nothing)."""

from __future__ import annotations

import json

from experiments import docs_data
from experiments.benchmarks import device

LOSSES = ["FastAP", "blackbox AP (counting)"]


def test_sections_and_the_guide_tables_from_their_record(tmp_path, capsys):
  record = tmp_path / "run.json"
  device.main(
    [
      "--sections",
      "check",
      "steps",
      "blocked",
      "--losses",
      *LOSSES,
      "--batch",
      "32",
      "--dim",
      "8",
      "--check-batch",
      "16",
      "--blocked-batch",
      "32",
      "--block",
      "8",
      "--blocked-losses",
      "FastAP",
      "--seconds",
      "0",
      "--json",
      str(record),
    ]
  )
  out = capsys.readouterr().out
  assert "check FastAP" in out and "MISMATCH" not in out  # Rows are printed as they come.
  results = json.loads(record.read_text())
  assert results["device"].startswith("cpu") and results["command"].startswith("python -m")
  assert [r["loss"] for r in results["check"]] == LOSSES
  assert all(r["ok"] and r["batch"] == 16 for r in results["check"])
  assert [r["loss"] for r in results["steps"]] == ["floor", *LOSSES]
  assert all(r["time"] > 0 and r["temporaries"] >= 0 for r in results["steps"])
  (row,) = results["blocked"]
  assert row["block"] == 8 and row["blocked"] > 0 and row["ratio"] > 0

  forms = [f"one={record}", f"two={record}"]
  written = device.write_docs([f"{record}:small"], forms, directory=tmp_path / "docs")
  names = sorted(p.stem for p in written)
  assert names == [
    "device_blocked_small",
    "device_check_small",
    "device_forms",
    "device_steps_32_small",
  ]
  for path in written:
    data = json.loads(path.read_text())
    docs_data.check(data, path.stem)
    assert data["source"].startswith("measured") and data["date"] == results["date"]
  steps = json.loads((tmp_path / "docs" / "device_steps_32_small.json").read_text())
  assert [r[0] for r in steps["rows"]] == ["floor", *LOSSES]
  table = json.loads((tmp_path / "docs" / "device_forms.json").read_text())
  assert [r[:2] for r in table["rows"]] == [["one", "32"], ["two", "32"]]
  assert table["columns"][2:4] == [f"{n} / floor" for n in LOSSES]


def test_the_evaluation_section_times_both_sets_beside_their_products(tmp_path, capsys):
  record = tmp_path / "run.json"
  device.main(
    [
      "--sections",
      "evaluation",
      "--evaluation-items",
      "300",
      "--evaluation-gallery",
      "2000",
      "--evaluation-queries",
      "100",
      "--json",
      str(record),
    ]
  )
  rows = json.loads(record.read_text())["evaluation"]
  sets = sorted({r["set"] for r in rows})
  assert sets == ["100 queries x 2,000 gallery items", "300 items, leave-one-out"]
  ours = [(r["set"][:3], r["input"], r["chunk"]) for r in rows if r["side"] == "jaxrank"]
  assert ours == [
    ("300", "device", 1024),
    ("300", "host", 1024),
    ("300", "device", 1024),
    ("100", "device", 1024),
  ]
  for name in sets:
    products = [r for r in rows if r["set"] == name and r["side"] == "xla_product"]
    assert len(products) == 5 and min(r["ratio"] for r in products) == 1.0
  assert all(r["time"] > 0 for r in rows)
  (table,) = device.write_docs([str(record)], directory=tmp_path / "docs")
  data = json.loads(table.read_text())
  docs_data.check(data, table.stem)
  assert [r[:3] for r in data["rows"]][-1] == [
    "100 queries x 2,000 gallery items",
    "jaxrank",
    "device",
  ]


def test_the_training_step_section_times_the_jobs_step_and_writes_its_table(tmp_path, capsys):
  """The `train` section runs the job's own step (float32 and mixed precision) and, off a GPU,
  says why the torch and cuDNN rows are skipped; its record gives the guide's table."""
  record = tmp_path / "train.json"
  device.main(
    [
      "--sections",
      "train",
      "--train-models",
      "resnet18",
      "--train-batch",
      "8",
      "--train-image-size",
      "32",
      "--seconds",
      "0",
      "--json",
      str(record),
    ]
  )
  out = capsys.readouterr().out
  assert "train resnet18 torch: skipped" in out
  results = json.loads(record.read_text())
  rows = results["train"]
  assert [(r["model"], r["precision"]) for r in rows] == [
    ("resnet18", "float32"),
    ("resnet18", "bfloat16"),
  ]
  assert all(r["time"] > 0 and r["images_per_second"] == 8 / r["time"] for r in rows)
  assert all(r["vs_torch_autocast"] is None for r in rows)  # No torch row on the CPU.
  (path,) = device.write_docs([str(record)], directory=tmp_path / "docs")
  data = json.loads(path.read_text())
  docs_data.check(data, path.stem)
  assert path.stem == "device_train" and [r[2] for r in data["rows"]] == ["float32", "bfloat16"]
  assert "B = 8, 32 x 32" in data["title"]


def test_the_precision_table_compares_each_run_in_both_precisions():
  """`experiments.benchmarks.precision`'s table from runs' metrics (no training here)."""
  from experiments.benchmarks import precision

  def metrics(r1):
    return {"recall@1": r1, "map@r": r1 / 2}

  results = {
    (0, "float32"): {"untrained": metrics(0.2), "fastap": metrics(0.50)},
    (0, "bfloat16"): {"untrained": metrics(0.2), "fastap": metrics(0.53)},
    (1, "float32"): {"untrained": metrics(0.2), "fastap": metrics(0.60)},
    (1, "bfloat16"): {"untrained": metrics(0.2), "fastap": metrics(0.58)},
  }
  lines = precision.table(results, [0, 1])
  data = docs_data.markdown_table(lines)
  assert [r[0] for r in data["rows"]] == ["untrained", "fastap"]
  assert data["rows"][1][1:6] == ["0.550", "0.555", "+0.005", "+0.030", "0.100"]
  assert "0.005 R@1, within the goal of 0.02" in lines[-1]
  results[1, "bfloat16"]["fastap"] = metrics(0.40)
  assert "NOT within" in precision.table(results, [0, 1])[-1]
