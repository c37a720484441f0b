"""No function of the repository runs over `MAX_LINES` lines of code without a reason written down.

A long function does several things; split by what it does, each part gets a name a reader can
follow (issue 30). Lines of code are the function's lines, signature included, without its
docstring, blank lines and comment lines; a nested function counts towards the function holding
it. `ALLOWED` names each exception with its reason; a reason also goes next to the function.
"""

from __future__ import annotations

import ast
import functools
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
MAX_LINES = 60
# The Python files of the repository checked: the library, the experiments and the tests.
FOLDERS = ("jaxrank", "experiments", "tests")

# "path:function" -> why it may be longer.
ALLOWED = {
  "experiments/compare_released.py:compare_blackbox": (
    "one compare() per row of the table it prints, read top to bottom as that table"
  ),
  "jaxrank/_src/precision_sums.py:_precision_sums_bwd": (
    "one backward rule, its terms in the order of the derivation in its docstring; over the limit "
    "only in the formatter's one-argument-per-line layout"
  ),
}


def code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
  """The lines of code of a function: no docstring, blank line or comment line."""
  docstring: set[int] = set()
  first = node.body[0]
  assert first.end_lineno is not None and node.end_lineno is not None  # Set by ast.parse.
  if (
    isinstance(first, ast.Expr)
    and isinstance(first.value, ast.Constant)
    and isinstance(first.value.value, str)
  ):
    docstring = set(range(first.lineno, first.end_lineno + 1))
  return sum(
    1
    for number in range(node.lineno, node.end_lineno + 1)
    if number not in docstring
    and lines[number - 1].strip()
    and not lines[number - 1].strip().startswith("#")
  )


@functools.cache
def function_lengths() -> dict[str, int]:
  """`"path:function"` -> its lines of code, for every function of `FOLDERS`."""
  lengths: dict[str, int] = {}
  for folder in FOLDERS:
    for path in sorted((REPO / folder).rglob("*.py")):
      source = path.read_text()
      lines = source.splitlines()
      for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
          key = f"{path.relative_to(REPO).as_posix()}:{node.name}"
          lengths[key] = max(lengths.get(key, 0), code_lines(node, lines))
  return lengths


def test_no_function_is_longer_than_max_lines_without_a_reason():
  too_long = {
    key: n for key, n in function_lengths().items() if n > MAX_LINES and key not in ALLOWED
  }
  assert not too_long, (
    f"functions over {MAX_LINES} lines of code: {too_long}; split them by what they do into "
    "named helpers, or add them to ALLOWED in tests/test_function_length.py with the reason "
    "(and write the reason next to the function)"
  )


@pytest.mark.parametrize("key", sorted(ALLOWED))
def test_every_allowed_function_exists_and_is_still_long(key):
  lengths = function_lengths()
  assert key in lengths, f"{key} is in ALLOWED but no longer exists; remove it from ALLOWED"
  assert lengths[key] > MAX_LINES, (
    f"{key} has {lengths[key]} lines of code now, at most {MAX_LINES}; remove it from ALLOWED"
  )
