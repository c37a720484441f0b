"""The layout of experiments/: folders that say what each part is, and imports that flow one way.

Read from the sources (nothing is imported): every `import experiments...` and `from experiments...
import ...`, at the top of a module or inside a function, is an edge of the graph; imports under
`if TYPE_CHECKING:` run only for type checkers and are left out.
"""

import ast
import pathlib
from typing import TypeGuard

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"


def _module_name(path: pathlib.Path) -> str:
  parts = path.relative_to(REPO).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, pathlib.Path]:
  return {_module_name(p): p for p in sorted(EXPERIMENTS.rglob("*.py"))}


def _is_type_checking(node: ast.AST) -> TypeGuard[ast.If]:
  test = getattr(node, "test", None)
  return isinstance(node, ast.If) and (
    (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
    or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
  )


def _imported(tree: ast.AST, modules: set[str]) -> set[str]:
  """The modules of `experiments` that `tree` imports when it runs."""
  found: set[str] = set()
  stack = [tree]
  while stack:
    node = stack.pop()
    if _is_type_checking(node):
      stack.extend(node.orelse)
      continue
    if isinstance(node, ast.Import):
      found.update(a.name for a in node.names if a.name in modules)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      for alias in node.names:
        name = f"{node.module}.{alias.name}"
        found.add(name if name in modules else node.module)
    stack.extend(ast.iter_child_nodes(node))
  return {m for m in found if m in modules}


def import_graph() -> dict[str, set[str]]:
  modules = _modules()
  return {
    name: _imported(ast.parse(path.read_text()), set(modules)) - {name}
    for name, path in modules.items()
  }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """One cycle of `graph` as a list of nodes (first == last), or None."""
  state: dict[str, int] = {}  # 1: on the current path, 2: done.
  path: list[str] = []

  def visit(node: str) -> list[str] | None:
    state[node] = 1
    path.append(node)
    for nxt in sorted(graph.get(node, ())):
      if state.get(nxt) == 1:
        return path[path.index(nxt) :] + [nxt]
      if nxt not in state and (cycle := visit(nxt)):
        return cycle
    path.pop()
    state[node] = 2
    return None

  for node in sorted(graph):
    if node not in state and (cycle := visit(node)):
      return cycle
  return None


def test_the_import_graph_is_read():
  graph = import_graph()
  assert "experiments.job.config" in graph["experiments.job.check"]
  assert "experiments.job.datasets" in graph["experiments.job.check"]
  assert "experiments.job.train" in graph["experiments.job.main"]  # Imported inside a function.
  assert "experiments.ablations.sweep" in graph["experiments.ablations.fastap_bins"]


def test_find_cycle_finds_one():
  assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
  assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_experiments_have_no_import_cycle():
  assert find_cycle(import_graph()) is None


def test_config_imports_nothing_of_the_job():
  assert import_graph()["experiments.job.config"] == set()


# What each folder may import besides itself: the job nothing, the comparison the job, the
# ablations' definitions and the results document's writer (its claims), the others the job; the
# benchmarks also the documentation's table writer (docs_data, which imports nothing of
# experiments), to write the tables the guide shows.
ALLOWED_IMPORTS = {
  "job": set(),
  "ablations": {"job"},
  "benchmarks": {"job", "docs_data"},
  "comparison": {"job", "ablations", "results", "docs_data"},
  "landmarks": {"job", "docs_data"},
}


@pytest.mark.parametrize("folder", sorted(ALLOWED_IMPORTS))
def test_folders_only_import_downwards(folder):
  """The job imports no other folder, and nothing imports the comparison."""
  graph = import_graph()
  for name, imported in graph.items():
    if name.startswith(f"experiments.{folder}."):
      others = {m.split(".")[1] for m in imported} - {folder}
      assert others <= ALLOWED_IMPORTS[folder], f"{name} imports {sorted(imported)}"


def test_docs_data_imports_nothing_of_experiments():
  assert import_graph()["experiments.docs_data"] == set()


def test_nothing_imports_the_comparison():
  for name, imported in import_graph().items():
    if not name.startswith("experiments.comparison"):
      assert not any(m.startswith("experiments.comparison") for m in imported), name


def test_every_part_is_in_its_folder():
  top = {p.name for p in EXPERIMENTS.iterdir() if not p.name.startswith((".", "__"))}
  # docs_data.py writes the documentation's generated tables; quickstart.py is the quickstart
  # page's code, run by its test.
  assert top == {
    "job",
    "ablations",
    "benchmarks",
    "comparison",
    "landmarks",
    "results.py",
    "RESULTS.md",
    "compare_released.py",
    "docs_data.py",
    "quickstart.py",
  }, sorted(top)


# A module of the job holds one concern (ARCHITECTURE.md, "The experiments"); past this many lines
# it holds several, and is split by moving code, not by compressing it (issue 61).
JOB_MODULE_LINES = 400


def test_every_job_module_reads_in_one_sitting():
  long = {
    path.name: n
    for path in sorted((EXPERIMENTS / "job").glob("*.py"))
    if (n := len(path.read_text().splitlines())) > JOB_MODULE_LINES
  }
  assert not long, f"over {JOB_MODULE_LINES} lines: {long}; split by concern"
