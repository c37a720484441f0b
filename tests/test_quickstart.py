"""The quickstart page's code (experiments/quickstart.py) runs, trains, and writes the page's data.

docs/quickstart.md shows the script in parts, between `# [<part>-start]` and `# [<part>-end]`
markers; here it runs as the page says (`python -m experiments.quickstart --out DIR`), into a
temporary folder, so the committed figure and table in docs/_generated/ are left alone.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from experiments import docs_data

REPO = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = REPO / "experiments" / "quickstart.py"
PAGE = REPO / "docs" / "quickstart.md"


@pytest.fixture(scope="session")
def run(tmp_path_factory):
  out = tmp_path_factory.mktemp("quickstart")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  process = subprocess.run(
    [sys.executable, "-m", "experiments.quickstart", "--out", str(out)],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  assert process.returncode == 0, process.stderr[-3000:]
  return out, process


def test_writes_the_page_figure_and_table(run):
  out, _ = run
  assert (out / "quickstart.png").stat().st_size > 10_000
  data = json.loads((out / "quickstart.json").read_text())
  docs_data.check(data)
  assert data["figure"] == "quickstart.png" and data["source"] == "measured"
  assert data["command"].startswith(".venv/bin/python -m experiments.quickstart --out ")


def test_training_beats_the_untrained_projection_on_unseen_classes(run):
  # What the page says: the trained embedding retrieves the unseen classes far better.
  out, process = run
  rows = json.loads((out / "quickstart.json").read_text())["rows"]
  assert [r[0].split(",")[0] for r in rows] == ["untrained", "trained"], rows
  for before, after in zip(rows[0][1:], rows[1][1:]):  # Recall@1, Recall@4, MAP@R, mAP.
    assert float(after) > float(before) + 0.3, rows
  assert "'recall@1'" in process.stdout  # The script's own print, as shown on the page.


def test_the_page_shows_every_part_of_the_script():
  script, page = SCRIPT.read_text(), PAGE.read_text()
  parts = re.findall(r"^# \[(\w+)-start\]$", script, flags=re.MULTILINE)
  assert parts == ["data", "step", "train"]
  for part in parts:
    assert f"# [{part}-end]" in script
    assert f':start-after: "# [{part}-start]"' in page and f':end-before: "# [{part}-end]"' in page
  assert "```{generated-table} quickstart" in page
  assert "python -m experiments.quickstart --out docs/_generated" in page


def test_the_committed_table_and_figure_are_the_scripts():
  data = json.loads((docs_data.DIRECTORY / "quickstart.json").read_text())
  docs_data.check(data, "quickstart.json")
  assert data["command"] == ".venv/bin/python -m experiments.quickstart --out docs/_generated"
  assert (docs_data.DIRECTORY / data["figure"]).is_file()
