"""The data files of the documentation's tables: docs/_generated/NAME.json, written by commands.

A command that measures what a guide page shows writes it with `write_table` (the columns, the
rows, the command line, the machine and the date); the page shows it with
`.. generated-table:: NAME` (docs/conf.py), so no benchmark number on the page is typed by hand,
and rerunning the command on another machine updates the page with that machine's name. A command
may also draw a figure of the same numbers (`figure=`, a PNG written beside the data file), shown
above the table.

Its `source` is `"measured"`, the command wrote it, or `"measured: written from the run's JSON
record (FILE)"`, the command wrote FILE on another machine and a script here turned it into the
table (`experiments/benchmarks/device.py`); nothing else is allowed (`check`): a number copied by
hand from a run's output goes stale unseen. The schema (`docs/conf.py`'s `GeneratedTable` reads
it):

    {"title": str, "command": str, "machine": str, "date": "YYYY-MM-DD", "source": str,
     "columns": [str, ...], "rows": [[str, ...], ...],
     "notes": [str, ...] (optional: lines shown under the table),
     "figure": "NAME.png" (optional)}

The benchmarks print their tables as Markdown lines (a title, `| a | b |`, `| --- |`, rows, notes);
`markdown_table` reads those lines back into columns, rows and notes, so a script writes the table
it prints (`write_markdown_tables` writes each of a run's tables; `add_docs_argument` is the
scripts' `--docs` flag).

    .venv/bin/python -m experiments.docs_data --check     # every data file is well formed
    .venv/bin/python -m experiments.docs_data --commands  # what wrote each, to rerun it

`remote_resources` is the documentation build's offline check (docs/conf.py, `check_offline`):
the scripts and stylesheets a built page loads from another site, which must be none.
"""

from __future__ import annotations

import argparse
import datetime
import html.parser
import json
import os
import pathlib
import platform
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any

DIRECTORY = pathlib.Path(__file__).resolve().parent.parent / "docs" / "_generated"
KEYS = ("title", "command", "machine", "date", "source", "columns", "rows")

# The one-minute load average when this module was imported: a benchmark imports it as it starts,
# so that its table tells the load it started under, not the load its own processes made.
LOAD_AT_START = os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def machine() -> str:
  """The CPU model, cores, memory and load: `AMD EPYC 7B13, 2 cores, 24 GiB, load 0.5 as it
  started` (`LOAD_AT_START`: a command that writes a table imports this module at its top)."""
  model = None
  try:
    with open("/proc/cpuinfo") as f:
      model = next(
        (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None
      )
  except OSError:
    pass
  parts = [model or platform.processor() or platform.machine(), f"{os.cpu_count()} cores"]
  try:
    pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    parts.append(f"{pages * page_size / 2**30:.0f} GiB")
  except (ValueError, OSError, AttributeError):
    pass
  if LOAD_AT_START is not None:
    parts.append(f"load {LOAD_AT_START:.1f} as it started")
  return ", ".join(parts)


def command_line(argv: Sequence[str] | None = None) -> str:
  """The command that is running, as the guide writes it: `.venv/bin/python -m module args`.

  The interpreter is named by its environment, `.venv` or `.venv-accel` (the compile-only
  accelerators'), not by where this machine keeps it.
  """
  argv = list(sys.orig_argv if argv is None else argv)
  python = ".venv-accel/bin/python" if ".venv-accel" in argv[0] else ".venv/bin/python"
  return shlex.join([python, *argv[1:]])


def check(data: dict, name: str = "data") -> None:
  """Raises ValueError unless `data` is a well-formed table (the schema above)."""
  missing = [k for k in KEYS if k not in data]
  if missing:
    raise ValueError(f"{name}: missing {missing}; a table needs {list(KEYS)}")
  try:
    datetime.date.fromisoformat(data["date"])
  except (TypeError, ValueError) as error:
    raise ValueError(f"{name}: date {data['date']!r} is not YYYY-MM-DD") from error
  width = len(data["columns"])
  for row in data["rows"]:
    if len(row) != width or not all(isinstance(cell, str) for cell in row):
      raise ValueError(
        f"{name}: row {row} must be {width} strings, one per column {data['columns']}"
      )
  if not data["rows"]:
    raise ValueError(f"{name}: no rows")
  if not (data["source"] == "measured" or data["source"].startswith("measured: written from ")):
    raise ValueError(
      f"{name}: source {data['source']!r}: a table must be written by the command that measured "
      "it (`measured`), not copied"
    )
  if not all(isinstance(line, str) for line in data.get("notes", [])):
    raise ValueError(f"{name}: notes must be a list of strings")


def markdown_table(lines: Sequence[str]) -> dict:
  """`{"title", "columns", "rows", "notes"}` of a table printed as Markdown lines.

  The lines before the first `| ... |` line form the title, that line the columns, the `| --- |`
  line (any dashes: `|---|---|` too) is skipped, the following `| ... |` lines are the rows and
  the lines after them the notes.
  """

  def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]

  table = [i for i, line in enumerate(lines) if line.strip().startswith("|")]
  if len(table) < 3:
    raise ValueError(f"no Markdown table (header, `| --- |`, rows) in {list(lines)[:3]}")
  first, last = table[0], table[-1]
  separator = lines[first + 1].strip()
  if table != list(range(first, last + 1)) or not re.fullmatch(r"\|(\s*-+\s*\|)+", separator):
    raise ValueError(f"not one Markdown table with a `| --- |` line: {lines[first : last + 1]}")
  return {
    "title": " ".join(line.strip() for line in lines[:first] if line.strip()),
    "columns": cells(lines[first]),
    "rows": [cells(line) for line in lines[first + 2 : last + 1]],
    "notes": [line.strip() for line in lines[last + 1 :] if line.strip()],
  }


def write_table(
  name: str,
  *,
  title: str,
  columns: Sequence[str],
  rows: Sequence[Sequence[str]],
  command: str | None = None,
  source: str = "measured",
  figure=None,
  notes: Sequence[str] = (),
  date: str | None = None,
  machine_name: str | None = None,
  directory: pathlib.Path | str | None = None,
) -> pathlib.Path:
  """Writes docs/_generated/NAME.json (and NAME.png from `figure`); returns the data file's path.

  Args:
    name: the file's name, as the page's `.. generated-table:: NAME` gives it.
    title: the table's caption.
    columns: the header, one string per column.
    rows: the rows, each one string per column (the command formats its numbers).
    command: the command that measured them; by default the running one (`command_line`).
    source: `"measured"` when the running command measured them; else where they come from.
    figure: a matplotlib figure of the same numbers, saved as NAME.png beside the data.
    notes: lines shown under the table (a figure of the run that is no column).
    date: `YYYY-MM-DD` of the measurement; by default today.
    machine_name: the machine that measured them; by default this one (`machine`).
    directory: where to write (docs/_generated by default; a test passes a temporary one).

  Returns:
    The path of the data file.
  """
  directory = pathlib.Path(DIRECTORY if directory is None else directory)
  directory.mkdir(parents=True, exist_ok=True)
  data: dict[str, Any] = {
    "title": title,
    "command": command or command_line(),
    "machine": machine_name or machine(),
    "date": date or datetime.date.today().isoformat(),
    "source": source,
    "columns": list(columns),
    "rows": [[str(cell) for cell in row] for row in rows],
  }
  if notes:
    data["notes"] = list(notes)
  if figure is not None:
    data["figure"] = f"{name}.png"
    figure.savefig(directory / data["figure"], dpi=100, bbox_inches="tight")
  check(data, name)
  path = directory / f"{name}.json"
  path.write_text(dumps(data))
  return path


def write_markdown_tables(
  tables: Mapping[str, Sequence[str]], directory: pathlib.Path | str | None = None
) -> list[pathlib.Path]:
  """Writes each printed table, `{NAME: its Markdown lines}`, as docs/_generated/NAME.json.

  The command, machine and date are the running command's (`write_table`); each path written is
  printed and returned.
  """
  paths = []
  for name, lines in tables.items():
    paths.append(write_table(name, **markdown_table(lines), directory=directory))
    print("wrote", paths[-1])
  return paths


def add_docs_argument(parser: argparse.ArgumentParser, names: str) -> None:
  """A benchmark's `--docs` flag: also write the tables it prints, `names` (a pattern such as
  `chunked_<table>`), to docs/_generated."""
  parser.add_argument(
    "--docs",
    action="store_true",
    help=f"also write the tables printed to docs/_generated/{names}.json",
  )


def dumps(data: dict) -> str:
  """The table as JSON, one key a line and one row a line (diffs show the rows that changed)."""

  def one(value) -> str:
    return json.dumps(value, ensure_ascii=False)

  items = [
    f" {one(k)}: "
    + ("[\n" + ",\n".join(f"  {one(row)}" for row in v) + "\n ]" if k == "rows" else one(v))
    for k, v in data.items()
  ]
  return "{\n" + ",\n".join(items) + "\n}\n"


class _RemoteResources(html.parser.HTMLParser):
  """Collects a page's `<script src>` and stylesheet `<link href>` that point to another site."""

  def __init__(self) -> None:
    super().__init__()
    self.found: list[str] = []

  def handle_starttag(self, tag, attrs):
    attrs = dict(attrs)
    if tag == "script":
      url = attrs.get("src")
    elif tag == "link" and set((attrs.get("rel") or "").split()) & {"stylesheet", "preload"}:
      url = attrs.get("href")
    else:
      return
    if url and url.strip().lower().startswith(("http://", "https://", "//")):
      self.found.append(url)


def remote_resources(page: str) -> list[str]:
  """The URLs of the scripts and stylesheets that the HTML `page` loads from another site."""
  parser = _RemoteResources()
  parser.feed(page)
  parser.close()
  return parser.found


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true", help="check every data file's schema")
  parser.add_argument(
    "--commands",
    action="store_true",
    help="list each data file's date, machine and the command that wrote it (to rerun them)",
  )
  args = parser.parse_args(argv)
  for path in sorted(DIRECTORY.glob("*.json")):
    data = json.loads(path.read_text())
    if args.check:
      check(data, path.name)
      print(f"{path.name}: ok")
    if args.commands:
      print(f"{path.stem} ({data['date']}, {data['machine']}):\n  {data['command']}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
