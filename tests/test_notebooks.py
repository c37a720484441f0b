"""The notebooks in notebooks/: stored without outputs, executed without error, their claims held.

Each notebook states the findings of its "What this shows" cell as `assert`s next to the numbers
they rest on, so executing it is the test of its claims: a claim that stops holding fails its cell.

Each notebook runs in a fresh kernel of the interpreter running pytest, with a temporary directory
as its working directory, so the figures it writes (`figures/<name>.png`, relative to the working
directory) go there and the committed PNGs in notebooks/figures/ are left untouched. To refresh
those, run a notebook from notebooks/ (e.g. in Jupyter, or with nbclient and that directory as
`resources["metadata"]["path"]`).

The notebooks are independent and mostly single-threaded (tracing, compiling, plotting), so they
execute two at a time (one under pytest-xdist), each in its own process, started when the first of
them is needed; each test waits for its own notebook.
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import subprocess
import sys

import nbformat
import pytest
from jupyter_client.manager import KernelManager

# Its expensive fixtures are session-scoped and its tests kept on one pytest-xdist worker (`make
# test`): a module-scoped fixture is set up again whenever the worker returns to the module.
pytestmark = pytest.mark.xdist_group("test_notebooks")

NOTEBOOKS_DIR = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
EXPECTED = {
  "01_loss_landscapes.ipynb",
  "02_surrogate_vs_exact_ap.ipynb",
  "03_ties_and_hashing.ipynb",
  "04_decomposability.ipynb",
  "05_trained_network_landscape.ipynb",
}
# Two notebooks at a time; one under pytest-xdist (`make test`), whose other worker runs the rest
# of the suite meanwhile: more processes than CI's 2 cores would slow every cell (a cell may take
# at most TIMEOUT).
PARALLEL = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2
TIMEOUT = 600  # seconds per cell

# Run in a child process: executes notebook argv[1] with argv[2] as working directory and writes
# the executed notebook to argv[3]; a failing cell raises CellExecutionError (exit status 1).
_EXECUTE = f"""
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
try:
  NotebookClient(nb, timeout={TIMEOUT}, kernel_name="python3",
                 resources={{"metadata": {{"path": sys.argv[2]}}}}).execute()
finally:
  nbformat.write(nb, sys.argv[3])
"""


# `make test`'s `--xla_backend_optimization_level=0` speeds up the suite's many small compilations
# but slows down what the notebooks run for longer (their sorts and evaluations): alone on 2 cores,
# notebooks 02, 03 and 05 took 64, 30 and 62 s with it and 48, 22 and 44 s without, 01 and 04 about
# 3 s less with it. The notebooks run as a user runs them, with XLA's default optimisations.
SUITE_ONLY_FLAGS = (
  "--xla_backend_optimization_level=0",
  "--xla_llvm_disable_expensive_passes=true",
  "--xla_cpu_parallel_codegen_split_count=1",
  "--xla_cpu_use_fusion_emitters=false",
)


def notebook_environment(environ) -> dict[str, str]:
  """`environ` without the suite's own XLA flags (`SUITE_ONLY_FLAGS`)."""
  env = dict(environ)
  flags = [f for f in env.pop("XLA_FLAGS", "").split() if f not in SUITE_ONLY_FLAGS]
  if flags:
    env["XLA_FLAGS"] = " ".join(flags)
  return env


def _execute(path: pathlib.Path, workdir: pathlib.Path):
  """Executes `path` in a child process; returns (the finished process, the executed notebook)."""
  workdir.mkdir()
  executed = workdir / f"executed_{path.name}"
  process = subprocess.run(
    [sys.executable, "-c", _EXECUTE, str(path), str(workdir), str(executed)],
    capture_output=True,
    text=True,
    check=False,
    env=notebook_environment(os.environ),
  )
  return process, executed


@pytest.fixture(scope="session")
def executions(request, tmp_path_factory):
  """Notebook name -> a future of `_execute`, for each notebook whose execution test is selected."""
  test = "test_notebook_executes_and_its_claims_hold"
  selected = [
    item.callspec.params["path"]
    for item in request.session.items
    if getattr(item, "originalname", None) == test
  ]
  root = tmp_path_factory.mktemp("notebooks")
  with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
    yield {p.name: pool.submit(_execute, p, root / p.stem) for p in selected}


def test_notebooks_run_without_the_suites_own_flags():
  env = notebook_environment(
    {"XLA_FLAGS": "--xla_backend_optimization_level=0 --xla_force_host_platform_device_count=8"}
  )
  assert env == {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
  assert notebook_environment({"XLA_FLAGS": "--xla_backend_optimization_level=0", "A": "1"}) == {
    "A": "1"
  }


def test_all_notebooks_are_found():
  assert NOTEBOOKS, f"no notebook in {NOTEBOOKS_DIR}"
  assert {p.name for p in NOTEBOOKS} >= EXPECTED


def test_kernel_runs_this_interpreter():
  # nbclient starts the "python3" kernelspec; jupyter_client replaces its `python` with
  # sys.executable, so the notebooks import the jaxrank of this environment.
  command = KernelManager(kernel_name="python3").format_kernel_cmd()
  assert pathlib.Path(command[0]).resolve() == pathlib.Path(sys.executable).resolve(), command


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
  nb = nbformat.read(path, as_version=4)
  nbformat.validate(nb)
  assert nb.cells[0].cell_type == "markdown"
  assert nb.cells[-1].cell_type == "markdown" and "What this shows" in nb.cells[-1].source
  for cell in nb.cells:
    if cell.cell_type == "code":
      assert cell.outputs == [], f"{path.name}: a code cell has stored outputs"
      assert cell.execution_count is None, f"{path.name}: a code cell has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_states_its_claims_as_asserts(path):
  # Each notebook checks its findings where it computes them; printing a check is not one.
  nb = nbformat.read(path, as_version=4)
  code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
  assert code.count("assert ") >= 5, path.name
  assert "print(bool(" not in code and "bool(np.allclose" not in code, path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_and_its_claims_hold(path, executions):
  process, executed = executions[path.name].result()
  errors = []
  if executed.is_file():
    nb = nbformat.read(executed, as_version=4)
    errors = [
      f"{o.ename}: {o.evalue}"
      for c in nb.cells
      if c.cell_type == "code"
      for o in c.outputs
      if o.output_type == "error"
    ]
  assert process.returncode == 0 and not errors, (errors, process.stderr[-5000:])
  figure = executed.parent / "figures" / f"{path.stem}.png"
  assert figure.is_file(), f"{path.name} did not save {figure.name}"
  assert figure.stat().st_size < 150_000


def test_every_flag_of_the_suite_is_dropped_for_the_notebooks():
  """The Makefile's `TEST_XLA_FLAGS` are the suite's own: each is in `SUITE_ONLY_FLAGS`."""
  makefile = (NOTEBOOKS_DIR.parent / "Makefile").read_text()
  line = makefile.split("TEST_XLA_FLAGS :=", 1)[1].replace("\\\n", " ").split("\n", 1)[0]
  flags = line.split()
  assert flags and set(flags) <= set(SUITE_ONLY_FLAGS), flags
