"""The notebooks in notebooks/: stored without outputs, and executed without error.

Each notebook runs in a fresh kernel of the interpreter running pytest, with a temporary directory
as its working directory, so the figures it writes (`figures/<name>.png`, relative to the working
directory) go there and the committed PNGs in notebooks/figures/ are left untouched. To refresh
those, run a notebook from notebooks/ (e.g. in Jupyter, or with nbclient and that directory as
`resources["metadata"]["path"]`).
"""

import pathlib
import sys

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS_DIR = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
EXPECTED = {
    "01_loss_landscapes.ipynb",
    "02_surrogate_vs_exact_ap.ipynb",
    "03_ties_and_hashing.ipynb",
    "04_decomposability.ipynb",
}


def test_all_notebooks_are_found():
  assert NOTEBOOKS, f"no notebook in {NOTEBOOKS_DIR}"
  assert EXPECTED <= {p.name for p in NOTEBOOKS}


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
def test_notebook_executes(path, tmp_path):
  nb = nbformat.read(path, as_version=4)
  client = NotebookClient(nb, timeout=300, kernel_name="python3",
                          resources={"metadata": {"path": str(tmp_path)}})
  client.execute()  # raises CellExecutionError on the first failing cell
  errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
  assert not errors
  figure = tmp_path / "figures" / f"{path.stem}.png"
  assert figure.is_file(), f"{path.name} did not save {figure.name}"
  assert figure.stat().st_size < 150_000
