"""`make test`'s `--dist loadgroup` keeps a group's tests on one pytest-xdist worker.

The suite's expensive fixtures (the notebooks' executions, the accelerators' compilations, the
CLI's and the comparison's runs) are session-scoped in modules marked
`pytest.mark.xdist_group(...)`: set up once if the group's tests all run on one worker, once per
worker otherwise (pytest 9 with pytest-xdist 3.8 dealt them out test by test, and every notebook
ran twice). This runs a small suite of that shape as `make test` runs the real one and counts the
setups.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

GROUPED = """
import os, pathlib, pytest
pytestmark = pytest.mark.xdist_group("grouped")

@pytest.fixture(scope="session")
def expensive():
  with open(pathlib.Path(__file__).parent / "setups.txt", "a") as f:
    f.write(os.environ.get("PYTEST_XDIST_WORKER", "none") + "\\n")

def test_first(expensive):
  pass

@pytest.mark.parametrize("i", range(8))
def test_many(expensive, i):
  pass
"""
OTHERS = """
import time, pytest

@pytest.mark.parametrize("i", range(16))
def test_other(i):
  time.sleep(0.02)
"""


def test_a_group_runs_on_one_worker_and_sets_up_its_fixture_once(tmp_path: pathlib.Path):
  (tmp_path / "test_grouped.py").write_text(GROUPED)
  (tmp_path / "test_others.py").write_text(OTHERS)
  done = subprocess.run(
    [
      sys.executable,
      "-m",
      "pytest",
      "-q",
      "-n",
      "2",
      "--dist",
      "loadgroup",
      "-p",
      "no:cacheprovider",
      str(tmp_path),
    ],
    cwd=tmp_path,
    capture_output=True,
    text=True,
    check=False,
  )
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  setups = (tmp_path / "setups.txt").read_text().split()
  assert len(setups) == 1 and setups[0].startswith("gw"), setups
