"""The commands that the documents tell a reader to run exist.

The documents: the README, the documentation's pages (docs/*.rst, docs/*.md: the landing page,
the quickstart) and user guide (docs/guide/*.rst), ARCHITECTURE.md,
experiments/RESULTS.md, the Makefile, and the module docstrings of experiments/ (the configs' and
every script's, which open with the command that runs them).

Every `python -m experiments.<module>` names a module of experiments/, each of its `--flag`s is
defined by that module or an experiments module it imports (or, for flags built at run time, shown
by its `--help`), each `--config` file exists, each `--set field=value` names a field of
`experiments.job.config.Config`, and each `make <target>` is a target of the Makefile. Nothing
trains: a command that runs for minutes is checked in seconds.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from experiments.job import config as config_lib

REPO = pathlib.Path(__file__).resolve().parent.parent
DOCUMENTS = [
  REPO / "README.md",
  REPO / "ARCHITECTURE.md",
  REPO / "Makefile",
  REPO / "experiments" / "RESULTS.md",
  *sorted((REPO / "docs").glob("*.rst")),
  *sorted((REPO / "docs").glob("*.md")),
  *sorted((REPO / "docs" / "guide").glob("*.rst")),
  *sorted((REPO / "experiments").rglob("*.py")),
]
# `python -m experiments.x.y args` (or the Makefile's `$(PY) -m ...`); a placeholder such as
# `experiments.ablations.<what>` names no module and is left out.
COMMAND = re.compile(r"(?:python|\$\(PY\)) -m (experiments(?:\.\w+)+)(?![\w.<])([^`\n|#]*)")
# `make x` in inline code, or at the start of a line of a code block.
MAKE = re.compile(r"(?:`|^\s*)make ([a-z][a-z-]*)\b", flags=re.MULTILINE)


def text_of(path: pathlib.Path) -> str:
  """The document (a module's docstring) with continuation lines joined, `python -m` on one line."""
  text = path.read_text()
  if path.suffix == ".py":
    text = ast.get_docstring(ast.parse(text)) or ""
  text = re.sub(r"\\\n\s*", " ", text)
  return re.sub(r"python -m\s+", "python -m ", text)


def commands() -> list[tuple[str, str, str]]:
  """(document, module, arguments) of every `python -m experiments.X ...` of the documents."""
  found = []
  for path in DOCUMENTS:
    for match in COMMAND.finditer(text_of(path)):
      found.append((path.relative_to(REPO).as_posix(), match.group(1), match.group(2)))
  return found


def arguments(text: str) -> list[str]:
  text = text.replace("[", " ").replace("]", " ")
  try:
    return shlex.split(text)
  except ValueError:  # An unclosed quote in prose: split on spaces.
    return text.split()


def module_path(module: str) -> pathlib.Path:
  return REPO / (module.replace(".", "/") + ".py")


def is_placeholder(value: str) -> bool:
  """A synopsis's stand-in (`FILE`, `DIR`, `k=v`, `field=value`), not a value to check."""
  return bool(re.fullmatch(r"[A-Z_]+|k=v|field=value", value))


@functools.cache
def flags_defined(module: str) -> set[str]:
  """The `"--flag"` strings of a module's source and of the experiments modules it imports."""
  sources = [module_path(module).read_text()]
  for package, name in re.findall(r"from (experiments(?:\.\w+)*) import (\w+)", sources[0]):
    path = module_path(f"{package}.{name}")
    if path.exists():
      sources.append(path.read_text())
  return {"--help"} | {
    flag for source in sources for flag in re.findall(r"[\"'](--[a-z][\w-]*)[\"']", source)
  }


@functools.cache
def help_text(module: str) -> str:
  """What `python -m module --help` prints (for flags that a module builds at run time)."""
  return subprocess.run(
    [sys.executable, "-m", module, "--help"],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
    check=False,
  ).stdout


def test_the_documents_have_commands():
  assert len(DOCUMENTS) > 1, "docs/guide/*.rst is missing"
  documents = {document for document, _, _ in commands()}
  for expected in (
    "docs/guide/training.rst",
    "docs/quickstart.md",
    "experiments/RESULTS.md",
    "Makefile",
    "experiments/job/configs/glyphs.py",
    "experiments/benchmarks/speed.py",
    "experiments/ablations/fastap_bins.py",
  ):
    assert expected in documents, (expected, sorted(documents))


def test_the_command_pattern():
  found = COMMAND.findall(
    "python -m experiments.job.main --config a.py\n$(PY) -m "
    "experiments.benchmarks.speed --batch 8\n"
    "python -m experiments.ablations.<what>"
  )
  assert [m for m, _ in found] == ["experiments.job.main", "experiments.benchmarks.speed"]


@pytest.mark.parametrize(("document", "module", "args"), commands())
def test_each_command_names_what_exists(document, module, args):
  where = f"{document}: python -m {module}{args}"
  assert module_path(module).exists(), f"{where}: no module {module}"
  words = arguments(args)
  defined = flags_defined(module)
  fields = {f.name for f in dataclasses.fields(config_lib.Config)}
  for i, word in enumerate(words):
    if not word.startswith("--"):
      continue
    flag, _, value = word.partition("=")
    assert flag in defined or re.search(rf"{flag}\b", help_text(module)), (
      f"{where}: {module} defines no flag {flag}"
    )
    following = value or (words[i + 1] if i + 1 < len(words) else "")
    if is_placeholder(following):
      continue
    if flag == "--config" and not following.startswith(("$", "your")):
      assert (REPO / following).exists(), f"{where}: no config file {following}"
    if flag == "--set":
      field = following.partition("=")[0]
      assert field in fields, f"{where}: --set {field}: Config has no field {field!r}"


def test_each_make_target_exists():
  makefile = (REPO / "Makefile").read_text()
  targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, flags=re.MULTILINE))
  for path in DOCUMENTS:
    for target in MAKE.findall(text_of(path)):
      assert target in targets, f"{path.name}: `make {target}` is no target of the Makefile"
