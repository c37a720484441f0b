"""The `--docs` paths of the scale benchmarks: each writes the tables it prints (docs_data).

The benchmarks of docs/guide/scale.rst (chunked, blocked, distributed, evaluate, evaluate_parts)
run at tiny sizes, or with their processes' reports canned where each row is a process of its
own, and write into a temporary directory: the data files are the printed tables, under the names
the guide's `.. generated-table::` directives use, with the columns of the guide's data files.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from experiments import docs_data
from experiments.benchmarks import blocked
from experiments.benchmarks import chunked
from experiments.benchmarks import distributed
from experiments.benchmarks import evaluate
from experiments.benchmarks import evaluate_parts
from jaxrank._src import counting

GENERATED = docs_data.DIRECTORY


class Written:
  """The tables that `docs_data` wrote into a temporary directory."""

  def __init__(self, directory):
    self.directory = directory

  def names(self) -> list[str]:
    return sorted(p.stem for p in self.directory.glob("*.json"))

  def __call__(self, name: str) -> dict:
    return json.loads((self.directory / f"{name}.json").read_text())


@pytest.fixture
def written(monkeypatch, tmp_path) -> Written:
  monkeypatch.setattr(docs_data, "DIRECTORY", tmp_path)
  return Written(tmp_path)


def same_columns_as_the_guide(data: dict, name: str) -> None:
  """A run writes the columns of the guide's data file of that table, so that it replaces it."""
  assert data["columns"] == json.loads((GENERATED / f"{name}.json").read_text())["columns"]


def test_chunked_writes_memory_and_forms(monkeypatch, written):
  reports = {"unchunked": [1.0, 2.0], "jitted": [10.0, 30.0], "host": [0.9, 1.8]}

  def run_variant(batch, mode, chunk, repeats):
    time = reports[mode].pop(0)
    temp = 100.0 if mode == "unchunked" else 25.0
    return {"time": time, "times": [time], "compile": 1.5, "temp_mb": temp, "rss_mb": 500.0}

  monkeypatch.setattr(chunked, "run_variant", run_variant)
  chunked.main(["--batch-sizes", "8", "--chunks", "4", "--rounds", "2", "--docs"])
  assert written.names() == ["chunked_forms", "chunked_memory"]
  memory, forms = written("chunked_memory"), written("chunked_forms")
  assert memory["rows"] == [
    ["8", "-", "unchunked", "1.5 s", "100 MB", "500 MB", "1.00"],
    ["8", "4", "chunked_value_and_grad", "20 s", "25 MB", "500 MB", "0.25"],
    ["8", "4", "host_chunked_value_and_grad", "1.35 s", "25 MB", "500 MB", "0.25"],
  ]
  # x unchunked: the median of the per-round ratios (10 and 15), not the ratio of the medians.
  assert [row[4] for row in forms["rows"]] == ["1.00", "12.50", "0.90"]
  assert forms["notes"][1].startswith("compile: B = 8, unchunked: 1.5 s;")
  for name in ("chunked_memory", "chunked_forms"):
    same_columns_as_the_guide(written(name), name)


def test_chunked_tables_flag_chooses_the_tables(monkeypatch, written):
  monkeypatch.setattr(
    chunked,
    "run_variant",
    lambda *a: {"time": 1.0, "times": [1.0], "compile": 1.0, "temp_mb": 1.0, "rss_mb": 1.0},
  )
  chunked.main(["--chunks", "4", "--rounds", "1", "--tables", "memory", "--docs"])
  assert written.names() == ["chunked_memory"]


def test_blocked_writes_a_time_table_per_batch_and_the_memory_table(written):
  blocked.main(
    [
      "--time-batches",
      "16",
      "--dim",
      "8",
      "--block",
      "8",
      "--losses",
      "contrastive",
      "--repeats",
      "1",
    ]
    + ["--memory-batch", "32", "--unblocked-batch", "16", "--docs"]
  )
  assert written.names() == ["blocked_memory_32", "blocked_time_16"]
  time_table = written("blocked_time_16")
  assert time_table["title"].startswith("CPU, B = 16, D = 8, blocks of 8:")
  assert [row[0] for row in time_table["rows"]] == ["contrastive"]
  assert time_table["rows"][0][5].endswith("x")
  same_columns_as_the_guide(time_table, "blocked_time_4096")
  assert written("blocked_memory_32")["columns"] == [
    "loss",
    "CPU, unblocked, B = 16",
    "CPU, blocked, B = 32",
  ]


def _report(value: str, evaluation: bool) -> dict:
  return {
    "times": [2.0],
    "compile_s": None if evaluation else 3.0,
    "xla_mb": None if evaluation else 400.0,
    "setup_mb": 200.0,
    "peak_mb": 600.0,
    "value": value,
  }


def test_distributed_writes_a_table_per_measurement(monkeypatch, written):
  def run_job(argv, num_processes, timeout):
    evaluation = argv[-1] == "evaluate"
    value = "recall@1 0.500000, map 0.250000" if evaluation else "0.8870656"
    return [_report(value, evaluation) for _ in range(num_processes)]

  monkeypatch.setattr(distributed, "run_job", run_job)
  distributed.main(["--batch", "64", "--num-eval", "500", "--processes", "1", "2", "--docs"])
  assert written.names() == [
    "distributed_evaluate_500",
    "distributed_fastap_64",
    "distributed_smoothap_64",
  ]
  fastap = written("distributed_fastap_64")
  assert fastap["rows"] == [
    ["1", "2 s", "3.0 s", "400 MB", "200 MB", "600 MB", "0.8870656"],
    ["2", "2 s", "3.0 s", "400 MB", "200 MB", "600 MB", "0.8870656"],
  ]
  same_columns_as_the_guide(fastap, "distributed_fastap_4096")
  evaluation = written("distributed_evaluate_500")
  assert evaluation["rows"][1] == [
    "2",
    "2 s",
    "200 MB",
    "600 MB",
    "recall@1 0.500000, map 0.250000",
  ]
  same_columns_as_the_guide(evaluation, "distributed_evaluate_60502")


def test_evaluate_writes_a_table_per_data_set(monkeypatch, written):
  def run_side(args, data, side, chunk_size):
    result = 1.0 if side in ("xla_product", "scores") else {"recall@1": 0.85, "map": 0.55}
    return {"times": [chunk_size / 256], "peak_mb": 1500.0, "result": result}

  monkeypatch.setattr(evaluate, "run_side", run_side)
  monkeypatch.setattr(evaluate, "default_chunk_size", lambda: 1024)
  evaluate.main(
    ["--num", "600", "--num-codes", "300", "--repeats", "3"]
    + ["--sides", "xla_product", "scores", "jaxrank"]
    + ["--floor-chunks", "256", "512", "--chunk-size", "1024", "--docs"]
  )
  assert written.names() == ["evaluate_large_classes_300", "evaluate_sop_600"]
  sop = written("evaluate_sop_600")
  assert sop["columns"][0] == "SOP-shaped: 600 x 600, D = 512, classes of 2-12"
  assert sop["rows"] == [
    ["XLA's plain product, chunks of 256 (the floor)", "1 s", "1.00", "1,500 MB", ""],
    ["XLA's plain product, chunks of 512", "2 s", "2.00", "1,500 MB", ""],
    ["jaxrank's scores alone (in blocks of 1,024 items), chunks of 1,024"]
    + ["4 s", "4.00", "1,500 MB", ""],
    ["jaxrank.evaluate_retrieval, chunk 1,024 (the default)", "4 s", "4.00", "1,500 MB"]
    + ["recall@1 0.8500, map 0.5500"],
  ]
  guide = json.loads((GENERATED / "evaluate_sop_60502.json").read_text())["columns"]
  assert sop["columns"][1:] == guide[1:]  # The first names the data set's size.


def test_evaluate_parts_writes_its_tables(written):
  evaluate_parts.main(
    ["--chunk", "256", "--items", "300", "--dim", "8", "--relevant", "4", "--repeats", "1"]
    + ["--lists", "8", "--list-items", "200", "--ladder", "3", "40", "--docs"]
  )
  assert written.names() == [
    "evaluate_compare_shapes",
    "evaluate_counts_by_relevant",
    "evaluate_parts",
  ]
  parts = written("evaluate_parts")
  assert parts["title"] == "one chunk: 256 queries x 300 items, D = 8, 4 relevant; median of 1"
  assert [row[0] for row in parts["rows"]] == [
    "product",
    "product in blocks",
    "count",
    "whole chunk",
  ]
  assert [note.split(":")[0] for note in parts["notes"]] == [
    "count / product (wall)",
    "product in blocks / product (wall)",
    "whole chunk / product (wall)",
  ]
  same_columns_as_the_guide(parts, "evaluate_parts")
  counts = written("evaluate_counts_by_relevant")
  assert counts["title"].startswith("Counting ranks by R relevant items per list: 8 lists of 200")
  assert [row[0] for row in counts["rows"]] == ["3", "40"]
  assert all(cell.endswith(" ms") for row in counts["rows"] for cell in row[1:])
  same_columns_as_the_guide(counts, "evaluate_counts_by_relevant")
  shapes = written("evaluate_compare_shapes")
  assert [row[:3] for row in shapes["rows"]] == [
    [f"{lists}{' (shipped)' if i == 0 else ''}", str(lanes), str(unroll)]
    for i, (lists, lanes, unroll) in enumerate(evaluate_parts.SHAPES)
  ]
  assert evaluate_parts.SHAPES[0] == (
    counting.COMPARE_LISTS,
    counting.COMPARE_LANES,
    counting.COMPARE_UNROLL,
  )
  same_columns_as_the_guide(shapes, "evaluate_compare_shapes")


def test_whole_batch_writes_the_jobs_steps_and_the_loss_alone(monkeypatch, written):
  from experiments.benchmarks import whole_batch

  records = [
    {"step": 1, "loss": 0.9971, "learning_rate": 1e-4, "images_per_second": 37.7},
    {"step": 2, "loss": 0.9968, "learning_rate": 2e-4, "images_per_second": 38.2},
    {"step": 2, "recall@1": 0.19, "map@r": 0.01},
  ]

  def run_job(workdir, steps):
    assert steps == 2
    lines = "".join(json.dumps(r) + "\n" for r in records)
    pathlib.Path(workdir, "metrics.jsonl").write_text(lines)
    return 310.0, 1.4e9

  alone = {"unblocked": (4.4, 1.1e9), "blocks of 512": (4.9, 1.0e8)}
  monkeypatch.setattr(whole_batch, "run_job", run_job)
  monkeypatch.setattr(whole_batch, "loss_alone", lambda *args: alone)
  whole_batch.main(["--steps", "2", "--docs"])
  data = written("glyphs_whole_steps")
  assert data["rows"] == [["1 (with compilation)", "156 s", "38"], ["2", "154 s", "38"]]
  assert data["title"].startswith("FastAP on batches of 5,876 glyph images")
  assert data["notes"][0] == (
    "2 steps, 310 s in all with the data, compilation and the evaluation; "
    "peak RSS of the job's process 1.40 GB."
  )
  assert "blocks of 512 4.90 s and 95 MB of temporaries" in data["notes"][1]
  assert data["notes"][2] == "The loss went from 0.9971 to 0.9968; R@1 at step 2: 0.190."
  same_columns_as_the_guide(data, "glyphs_whole_steps")


def test_whole_batch_job_command_and_missing_records():
  from experiments.benchmarks import whole_batch

  command = whole_batch.job_command("/tmp/w", 3)
  assert command[1:] == [
    "-m",
    "experiments.job.main",
    "--config",
    whole_batch.CONFIG,
    "--workdir",
    "/tmp/w",
    "--set",
    "num_steps=3",
    "--set",
    "eval_every=3",
    "--set",
    "log_every=1",
  ]
  with pytest.raises(ValueError, match="no step or no evaluation"):
    whole_batch.job_rows([{"step": 1, "loss": 1.0, "images_per_second": 3.0}], 6)


def test_whole_batch_loss_alone_times_both_forms():
  from experiments.benchmarks import whole_batch

  alone = whole_batch.loss_alone(64, 8, 16, 1)
  assert list(alone) == ["unblocked", "blocks of 16"]
  assert all(t > 0 and temporaries >= 0 for t, temporaries in alone.values())
