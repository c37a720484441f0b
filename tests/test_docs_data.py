"""The documentation's generated tables (experiments/docs_data.py) and its offline configuration.

The build itself (`make docs`) renders each `generated-table` and fails on a page that loads a
script from another site (docs/conf.py, `check_offline`); these tests run without Sphinx, in the
suite: the data files' schema, that every table a page names exists and every data file is shown,
the writer, the offline check's parser, and the configuration that serves MathJax with the pages.
"""

from __future__ import annotations

import ast
import json
import pathlib
import re
import tomllib

import pytest

from experiments import docs_data

REPO = pathlib.Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PAGES = sorted([*DOCS.rglob("*.rst"), *DOCS.rglob("*.md")])
PAGES = [p for p in PAGES if "_build" not in p.parts and p.parent.name != "notebooks"]
# `.. generated-table:: NAME` in reST, ```{generated-table} NAME in MyST.
DIRECTIVE = re.compile(r"(?:\.\. generated-table::|```\{generated-table\})\s+([\w-]+)")


def tables_named() -> dict[str, list[str]]:
  found: dict[str, list[str]] = {}
  for page in PAGES:
    for name in DIRECTIVE.findall(page.read_text()):
      found.setdefault(name, []).append(page.relative_to(REPO).as_posix())
  return found


def test_every_data_file_is_well_formed():
  files = sorted(docs_data.DIRECTORY.glob("*.json"))
  assert files, "docs/_generated holds no table"
  for path in files:
    data = json.loads(path.read_text())
    docs_data.check(data, path.name)
    if "figure" in data:
      assert (docs_data.DIRECTORY / data["figure"]).is_file(), path.name


def test_every_named_table_exists_and_every_table_is_shown():
  named = tables_named()
  files = {p.stem for p in docs_data.DIRECTORY.glob("*.json")}
  assert not set(named) - files, f"pages name tables that no data file holds: {set(named) - files}"
  assert not files - set(named), f"data files that no page shows: {files - set(named)}"


def test_write_table_round_trip(tmp_path):
  path = docs_data.write_table(
    "t", title="T", columns=["a", "b"], rows=[["1", 2.5]], command="python -m x", directory=tmp_path
  )
  data = json.loads(path.read_text())
  assert data["rows"] == [["1", "2.5"]] and data["source"] == "measured"
  assert data["command"] == "python -m x" and "cores" in data["machine"]
  assert re.fullmatch(r"\d{4}-\d\d-\d\d", data["date"])
  assert "figure" not in data


def test_write_table_saves_the_figure(tmp_path):
  import matplotlib  # pylint: disable=g-import-not-at-top  (the `train` extra)

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, axis = plt.subplots()
  axis.plot([0, 1])
  docs_data.write_table("f", title="F", columns=["a"], rows=[["1"]], figure=fig, directory=tmp_path)
  assert json.loads((tmp_path / "f.json").read_text())["figure"] == "f.png"
  assert (tmp_path / "f.png").stat().st_size > 1000


_TABLE = {
  "title": "T",
  "command": "c",
  "machine": "m",
  "date": "2026-11-22",
  "source": "measured",
  "columns": ["a", "b"],
  "rows": [["1", "2"]],
}


@pytest.mark.parametrize(
  ("change", "message"),
  [
    ({"rows": [["1"]]}, "must be 2 strings"),
    ({"rows": [[1, 2]]}, "must be 2 strings"),
    ({"rows": []}, "no rows"),
    ({"date": "22 Nov 2026"}, "not YYYY-MM-DD"),
    ({"source": "transcribed from the run of 2026-11-22"}, "written by the command"),
    ({"source": "measured by hand"}, "written by the command"),
  ],
)
def test_check_rejects(change, message):
  with pytest.raises(ValueError, match=message):
    docs_data.check({**_TABLE, **change})


def test_check_accepts_a_table_written_from_a_runs_record():
  docs_data.check({**_TABLE, "source": "measured: written from the run's JSON record (h100.json)"})


def test_check_rejects_a_table_without_its_machine():
  with pytest.raises(ValueError, match=r"missing \['machine'\]"):
    docs_data.check({k: v for k, v in _TABLE.items() if k != "machine"})


def test_machine_tells_the_load_the_command_started_under(monkeypatch):
  """Not the load at the end, which a benchmark's own processes raise."""
  monkeypatch.setattr(docs_data, "LOAD_AT_START", 0.5)
  monkeypatch.setattr("os.getloadavg", lambda: (7.0, 7.0, 7.0))
  described = docs_data.machine()
  assert described.endswith(", load 0.5 as it started"), described
  assert "cores" in described and "GiB" in described


def test_command_line_as_the_guide_writes_it():
  assert docs_data.command_line(
    ["/x/bin/python", "-m", "experiments.benchmarks.losses", "--loss", "fastap"]
  ) == (".venv/bin/python -m experiments.benchmarks.losses --loss fastap")
  assert docs_data.command_line(
    ["/w/.venv-accel/bin/python", "-m", "experiments.benchmarks.accelerators", "--batch", "4096"]
  ) == (".venv-accel/bin/python -m experiments.benchmarks.accelerators --batch 4096")


def test_markdown_table_reads_what_the_benchmarks_print():
  lines = [
    "B = 8, two losses",
    "| loss | time |",
    "| --- | --- |",
    "| FastAP | 0.91 s |",
    "| SmoothAP | 0.79 s |",
    "blackbox: one host sort: 0.52 s",
  ]
  assert docs_data.markdown_table(lines) == {
    "title": "B = 8, two losses",
    "columns": ["loss", "time"],
    "rows": [["FastAP", "0.91 s"], ["SmoothAP", "0.79 s"]],
    "notes": ["blackbox: one host sort: 0.52 s"],
  }
  with pytest.raises(ValueError, match="no Markdown table"):
    docs_data.markdown_table(["title", "| a |"])
  with pytest.raises(ValueError, match="one Markdown table"):
    docs_data.markdown_table(["| a |", "| b |", "| c |"])


def test_remote_resources():
  page = """<html><head>
  <script src="_static/mathjax/tex-chtml.js"></script>
  <script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>
  <script defer SRC='//cdn.example.org/x.js'></script>
  <link rel="stylesheet" href="http://fonts.example.com/a.css">
  <link rel="preload stylesheet" href="https://x/b.css">
  <link rel="canonical" href="https://jaxrank.example/">
  </head><body><a href="https://github.com/">a link is not loaded</a></body></html>"""
  assert docs_data.remote_resources(page) == [
    "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js",
    "//cdn.example.org/x.js",
    "http://fonts.example.com/a.css",
    "https://x/b.css",
  ]
  assert docs_data.remote_resources('<script src="_static/doctools.js"></script>') == []


def _conf_assignments() -> dict[str, object]:
  """The literal top-level assignments of docs/conf.py (read, not run: Sphinx is not needed)."""
  found = {}
  for node in ast.parse((DOCS / "conf.py").read_text()).body:
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
      try:
        found[node.targets[0].id] = ast.literal_eval(node.value)
      except ValueError:
        pass
  return found


def test_math_is_served_with_the_pages():
  conf = _conf_assignments()
  assert "sphinx.ext.mathjax" in conf["extensions"]
  assert "sphinx-mathjax-offline" in conf["extensions"]  # Sets mathjax_path to _static/mathjax.
  for name in ("mathjax_path", "html_js_files", "html_css_files"):
    assert not re.search(r"(https?:)?//", repr(conf.get(name, ""))), name
  source = (DOCS / "conf.py").read_text()
  assert 'app.connect("build-finished", check_offline' in source
  assert conf["nb_execution_mode"] == "off" and conf["html_theme"] == "sphinx_book_theme"


def test_the_docs_extra_installs_the_stack():
  extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"][
    "docs"
  ]
  names = {re.split(r"[<>=!~ ]", requirement)[0] for requirement in extra}
  assert {"sphinx", "sphinx-book-theme", "myst-nb", "sphinx-mathjax-offline"} <= names


def test_speed_writes_each_table_it_prints(monkeypatch, tmp_path):
  from experiments.benchmarks import speed  # pylint: disable=g-import-not-at-top

  table = ["B = 32, a title", "| loss | time |", "| --- | --- |", "| FastAP | 0.91 s |"]
  for name in ("loss_table", "breakdown_table", "cost_table"):
    monkeypatch.setattr(speed, name, lambda *a: table)
  monkeypatch.setattr(docs_data, "DIRECTORY", tmp_path)
  monkeypatch.setattr("sys.argv", ["speed", "--skip-compile-table", "--docs"])
  monkeypatch.setattr(
    "sys.orig_argv",
    ["python", "-m", "experiments.benchmarks.speed", "--skip-compile-table", "--docs"],
  )
  speed.main()
  assert sorted(p.name for p in tmp_path.iterdir()) == [
    "speed_breakdown.json",
    "speed_cost.json",
    "speed_steps.json",
  ]
  data = json.loads((tmp_path / "speed_steps.json").read_text())
  assert data["rows"] == [["FastAP", "0.91 s"]] and data["title"] == "B = 32, a title"
  assert data["command"] == (
    ".venv/bin/python -m experiments.benchmarks.speed --skip-compile-table --docs"
  )


def test_loss_benchmark_rows_and_figure():
  from experiments.benchmarks import losses  # pylint: disable=g-import-not-at-top

  measured = [
    (256, {"time": 0.008, "memory_mb": 91.0}, {"time": 0.56, "memory_mb": 40.0}),
    (1024, {"time": 0.0713, "memory_mb": 212.0}, {"time": 28.8, "memory_mb": 21737.0}),
    (2048, {"time": 0.219, "memory_mb": 275.0}, {"time": 1.02, "memory_mb": 836.0}),
    (4096, {"time": 2.0, "memory_mb": 922.0}, None),
  ]
  assert losses.docs_rows(measured) == [
    ["256", "0.008 s", "0.56 s", "70x", "91 MB", "40 MB", "2.27"],
    ["1024", "0.0713 s", "28.8 s", "404x", "212 MB", "21,737 MB", "0.01"],
    ["2048", "0.219 s", "1.02 s", "4.7x", "275 MB", "836 MB", "0.33"],
    ["4096", "2 s", "n/a", "", "922 MB", "n/a", ""],
  ]
  figure = losses.docs_figure("fastap", "FastAPLoss", measured)
  assert [len(axis.lines) for axis in figure.axes] == [2, 2]


def test_backbone_benchmark_writes_its_table(monkeypatch, tmp_path):
  from experiments.benchmarks import backbone  # pylint: disable=g-import-not-at-top

  monkeypatch.setattr(backbone, "bench_jax", lambda x, steps: 20.0)
  monkeypatch.setattr(backbone, "bench_torch", lambda x, steps: 8.0)
  monkeypatch.setattr(docs_data, "DIRECTORY", tmp_path)
  argv = ["--batch", "2", "--size", "8", "--steps", "1", "--docs"]
  monkeypatch.setattr("sys.orig_argv", ["python", "-m", "experiments.benchmarks.backbone", *argv])
  backbone.main(argv)
  data = json.loads((tmp_path / "backbone_steps.json").read_text())
  assert data["columns"] == ["implementation", "s/step", "images/s"]
  assert data["rows"] == [
    ["jaxrank (JAX)", "20.00", "0.1"],
    ["torchvision (PyTorch)", "8.00", "0.2"],
  ]
  assert data["notes"] == ["ratio jaxrank / torchvision (images/s): 0.40"]
  assert data["title"].startswith("ResNet-50 forward+backward, random weights, batch 2, 8x8, CPU")
  assert data["command"] == ".venv/bin/python -m experiments.benchmarks.backbone " + " ".join(argv)
  shown = json.loads((REPO / "docs" / "_generated" / "backbone_steps.json").read_text())
  assert shown["columns"] == data["columns"]  # A rerun replaces the guide's table.


def test_data_benchmark_writes_its_three_tables(monkeypatch, tmp_path):
  from experiments.benchmarks import data  # pylint: disable=g-import-not-at-top

  # The pipelines and photographs canned (their timings need batches of SOP-sized images); the
  # glyphs generated, at a tiny setting: the ASCII letters and digits that every typeface draws,
  # 8 x 8.
  monkeypatch.setattr(data, "digits_rows", lambda batches, warmup: [("digits, P x K", 74428.4, 60)])
  monkeypatch.setattr(
    data, "sop_rows", lambda *a: ([("mock SOP, hard, JPEG (8x8)", 254.2, 128)], ["CPU time: x"])
  )
  monkeypatch.setattr(data, "sampler_rows", lambda: [])
  photos = [
    {"name": "tf.data, one thread", "batch": 256, "rate": 250.4, "cpu_ms": 4.0, "per_core": 250.4},
    {"name": "tf.data, all cores", "batch": 256, "rate": 480.0, "cpu_ms": 4.0, "per_core": 250.0},
  ]
  monkeypatch.setattr(data, "photo_rows", lambda *a: (photos, 52.0))
  monkeypatch.setattr(data, "GLYPHS", (("tiny", {"image_size": 8, "min_typefaces": 21}),))
  monkeypatch.setattr(docs_data, "DIRECTORY", tmp_path)
  monkeypatch.setattr("sys.orig_argv", ["python", "-m", "experiments.benchmarks.data", "--docs"])
  data.main(["--docs"])
  pipelines = json.loads((tmp_path / "data_pipelines.json").read_text())
  assert pipelines["columns"] == ["pipeline", "batch", "images/s"]
  assert pipelines["rows"] == [
    ["digits, P x K", "60", "74,428"],
    ["mock SOP, hard, JPEG (8x8)", "128", "254"],
  ]
  assert pipelines["notes"] == ["CPU time: x"]
  glyphs = json.loads((tmp_path / "data_glyphs.json").read_text())
  assert glyphs["columns"] == [
    "glyphs",
    "classes, train + test",
    "images, train + test",
    "generation, CPU time",
  ]
  [[name, classes, images, seconds]] = glyphs["rows"]
  assert name == "tiny" and re.fullmatch(r"\d+ \+ \d+", classes), classes
  assert re.fullmatch(r"[\d,]+ \+ [\d,]+", images) and seconds.endswith(" s")
  table = json.loads((tmp_path / "data_photos.json").read_text())
  assert table["columns"][:5] == [
    "tf.data threads",
    "batch",
    "images/s",
    "CPU ms an image",
    "images/s a core",
  ]
  # Cores for the default step rates, 3,635, 5,889 and 4,286 images/s, at 250 images/s a core,
  # rounded up (14.5, 23.6, 17.1).
  assert table["rows"] == [
    ["tf.data, one thread", "256", "250", "4.00", "250", "15", "24", "18"],
    ["tf.data, all cores", "256", "480", "4.00", "250", "15", "24", "18"],
  ]
  assert "5,889 (jaxrank bfloat16 probe)" in table["notes"][0]
  # The guide's tables have the columns that a rerun writes (so that it replaces them).
  for name in ("data_pipelines", "data_glyphs", "data_photos"):
    shown = json.loads((REPO / "docs" / "_generated" / f"{name}.json").read_text())
    assert shown["columns"] == json.loads((tmp_path / f"{name}.json").read_text())["columns"]


def test_data_benchmark_measures_rate_and_cpu_time():
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top
  from experiments.benchmarks import data  # pylint: disable=g-import-not-at-top

  ds = tf.data.Dataset.from_tensors({"label": np.zeros(4, np.int32)}).repeat()
  rate, size, ms = data.images_per_second(ds, batches=3, warmup=1)
  assert rate > 0 and size == 4 and ms >= 0
  jpeg = tf.io.encode_jpeg(tf.zeros([6, 8, 3], tf.uint8)).numpy()
  images = np.empty(2, dtype=object)
  images[:] = [jpeg, jpeg]
  encoded = jd.LabeledImages(images, np.arange(2), np.zeros(2, int), image_format="encoded")
  assert data.decode_ms(encoded) >= 0


def test_data_benchmark_times_photographs_through_prefetch_to_device():
  import math  # pylint: disable=g-import-not-at-top

  from experiments.benchmarks import data  # pylint: disable=g-import-not-at-top

  # 8 JPEGs of 30x40 in 2 classes, batches of 4: both rows, each field positive and finite.
  rows, kilobytes = data.photo_rows(8, batch=4, batches=2, warmup=1, image_size=(30, 40))
  assert [row["name"] for row in rows] == ["tf.data, one thread", "tf.data, all cores"]
  assert kilobytes > 0
  for row in rows:
    assert row["batch"] == 4
    for key in ("rate", "cpu_ms", "per_core"):
      assert row[key] > 0 and math.isfinite(row[key]), (row["name"], key, row[key])
  assert rows[0]["per_core"] == rows[0]["rate"]
  assert math.isclose(rows[1]["per_core"], 1000 / rows[1]["cpu_ms"])


def test_commands_lists_what_wrote_each_data_file(monkeypatch, tmp_path, capsys):
  monkeypatch.setattr(docs_data, "DIRECTORY", tmp_path)
  for name in ("b", "a"):
    docs_data.write_table(
      name,
      title="T",
      columns=["x"],
      rows=[["1"]],
      command=f"python -m experiments.benchmarks.{name} --docs",
      date="2026-11-27",
      machine_name="a CPU",
    )
  assert docs_data.main(["--commands"]) == 0
  assert capsys.readouterr().out.splitlines() == [
    "a (2026-11-27, a CPU):",
    "  python -m experiments.benchmarks.a --docs",
    "b (2026-11-27, a CPU):",
    "  python -m experiments.benchmarks.b --docs",
  ]
