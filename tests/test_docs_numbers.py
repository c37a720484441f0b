"""No benchmark or result number typed into a documentation page by hand.

Measurements belong in the data files that the commands measuring them write
(docs/_generated/*.json, shown by `.. generated-table::`; experiments/docs_data.py): a number
copied into a page goes stale the day the code changes. This test reads every page of the guide and
the top-level pages (docs/*.rst, docs/*.md, docs/guide/*.rst) and counts what looks measured:

- **a quantity with a unit of time, memory or work**: `0.91 s`, `30-60 ms`, `473 MB`, `9.2 GB`,
  `0.25 GiB`, `51.6 GFLOP`, `about 30 s` (a number, or a range `a-b`, then `s`, `ms`, `us`,
  `µs`, `GB`, `GiB`, `MB`, `MiB`, `KB`, `GFLOP`);
- **a ratio**: a number glued to `x`, `1.8x`, `298.0x` (not `8x8` or `32 x 32`, sizes);
- **a row of a hand-typed table holding a decimal**: a line of a `list-table` entry (`- 0.134`)
  or a line with two or more `|` (Markdown or text tables in code blocks) with a number such as
  `0.551` or `6e-8`.

Result numbers in prose without a unit (comparison.rst's, rax.rst's) are not counted by this
definition; those pages are checked like the rest.

Pages not yet converted are listed in `ALLOWED` with the exact count they hold today, so the
check is real for every other page, a page on the list cannot gain a number unnoticed, and the
list has to be lowered as pages are converted (a count below the allowance fails too, asking for
the new figure). The allowances and why each remains are reviewed with the list.
"""

from __future__ import annotations

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PAGES = sorted([*DOCS.glob("*.rst"), *DOCS.glob("*.md"), *(DOCS / "guide").glob("*.rst")])

_NUMBER = r"\d[\d,]*(?:\.\d+)?(?:e-?\d+)?"
QUANTITY = re.compile(
  rf"(?<![\w.]){_NUMBER}(?:(?:-| to ){_NUMBER})?\s?(?:s|ms|us|µs|GB|GiB|MB|MiB|KB|GFLOP)\b"
)
RATIO = re.compile(rf"(?<![\w.]){_NUMBER}(?:-{_NUMBER})?x\b")
DECIMAL = re.compile(r"(?<![\w.])(?:\d+\.\d+|\d(?:\.\d+)?e-\d+)(?![\w.])")
LIST_ENTRY = re.compile(r"^\s*(?:\* )?- ")

# Pages that hold numbers counted as measurements which are not ours to measure: the exact count
# and why.
ALLOWED = {
  # One number, not ours: "RaMBO's Table 6 reports 0.33 s", the paper's published time for the
  # list the blackbox benchmark sorts, quoted beside that benchmark's table; no command here
  # measures it. (The goals are words.)
  "docs/guide/benchmarks.rst": 1,
  # The papers' published results, one per row of its table of the configs that rerun them (the
  # column "ours" is empty: no run here has the data sets or a GPU).
  "docs/guide/papers.rst": 15,
}


def measurements(text: str) -> list[str]:
  """What looks measured in a page's text (module docstring), each match once.

  Inline code (`2 - 2 s`, `2s - 1`: formulas) is left out.
  """
  text = re.sub(r"`[^`\n]*`", "``", text)
  found = [m.group(0) for m in QUANTITY.finditer(text)]
  found += [m.group(0) for m in RATIO.finditer(text)]
  for line in text.splitlines():
    if (
      (LIST_ENTRY.match(line) or line.count("|") >= 2)
      and DECIMAL.search(line)
      and not (QUANTITY.search(line) or RATIO.search(line))
    ):  # Counted once per line.
      found.append(f"table row: {line.strip()[:80]}")
  return found


@pytest.mark.parametrize(
  ("text", "expected"),
  [
    ("takes 0.91 s, then 473 MB and 9,217 MB", ["0.91 s", "473 MB", "9,217 MB"]),
    ("30-60 ms here, about 2.5x; 1.6-1.8x", ["30-60 ms", "2.5x", "1.6-1.8x"]),
    ("51.6 GFLOP, 0.25 GiB accessed", ["51.6 GFLOP", "0.25 GiB"]),
    ("8x8 digits, 32 x 32 images, float32 scores, B = 4096, 5 seeds, v5e:2x2", []),
    ("`d = 2 - 2 s` and `2s - 1`, in inline code", []),
    ("between 0.46 to 0.57 s", ["0.46 to 0.57 s"]),
    ("   * - 0.134 / 0.127", ["table row: * - 0.134 / 0.127"]),
    ("| fastap | 0.619 [0.614, 0.625] |", ["table row: | fastap | 0.619 [0.614, 0.625] |"]),
    (
      "FastAP | FastAPLoss | float32 | 6.0e-08 | equal",
      ["table row: FastAP | FastAPLoss | float32 | 6.0e-08 | equal"],
    ),
    ("   .. generated-table:: speed_steps", []),
    ("   * - `fastap_loss`\n     - FastAP (Cakir et al. eq. 14)", []),
  ],
)
def test_what_counts_as_measured(text, expected):
  assert measurements(text) == expected


def test_every_page_is_read():
  names = {p.relative_to(REPO).as_posix() for p in PAGES}
  assert {"docs/index.rst", "docs/quickstart.md", "docs/guide/benchmarks.rst"} <= names
  assert set(ALLOWED) <= names, set(ALLOWED) - names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_no_hand_typed_measurement(page):
  name = page.relative_to(REPO).as_posix()
  found = measurements(page.read_text())
  allowed = ALLOWED.get(name, 0)
  if len(found) > allowed:
    pytest.fail(
      f"{name} holds {len(found)} hand-typed measurements, {allowed} allowed: write them with "
      "the command that measures them (experiments/docs_data.py, `.. generated-table::`). "
      f"Found: {found}"
    )
  assert len(found) == allowed, (
    f"{name} now holds {len(found)} hand-typed measurements: lower its entry in ALLOWED from "
    f"{allowed} to {len(found)} (or remove it at 0)"
  )
