"""Sphinx configuration of jaxrank's documentation: `make docs` builds it into docs/_build/html.

The stack of the JAX ecosystem's documentation (JAX, Flax, optax): sphinx-book-theme, MyST
(`.md` pages) and MyST-NB (the notebooks of notebooks/, rendered without executing them: see
`copy_notebooks`). The reference is generated from the docstrings (Google style, read by
napoleon) with autodoc; math is rendered by MathJax served with the pages (sphinx-mathjax-offline:
no CDN, so the pages read the same offline and opened from disk), and single-backtick inline code
in reST by `default_role`. Benchmark and result tables come from the data files that the commands
measuring them write into docs/_generated/ (the `generated-table` directive).

The build runs with warnings as errors; `check_public_api` makes a public name that no page
documents one of them, and `check_offline` a page that loads a script from another site.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import pathlib
import shutil
import sys

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import inspect as sphinx_inspect
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.abspath(".."))

import jaxrank  # noqa: E402  (after sys.path, so that a checkout builds without installing)
from experiments import docs_data  # noqa: E402  (the generated tables' schema, the offline check)

project = "jaxrank"
author = "the jaxrank authors"
copyright = "the jaxrank authors"  # noqa: A001  (Sphinx's name)
release = version = jaxrank.__version__

extensions = [
  "sphinx.ext.autodoc",
  "sphinx.ext.napoleon",
  "sphinx.ext.mathjax",
  "sphinx-mathjax-offline",  # MathJax 3 copied into _static/mathjax; sets `mathjax_path` to it.
  "myst_nb",  # MyST Markdown pages and notebooks (it brings myst_parser).
]
exclude_patterns = ["_build", "notebooks/figures", "**.ipynb_checkpoints"]
templates_path: list[str] = []

DOCS = pathlib.Path(__file__).resolve().parent
REPO = DOCS.parent

# MyST: `$x$` and `$$...$$` math as the notebooks write it; `:::` fences for directives.
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3
# The notebooks are stored without outputs and take minutes to execute (tests/test_notebooks.py
# runs them): the pages show their code and text, and the figure each one saves (`copy_notebooks`).
nb_execution_mode = "off"

# `x` in a docstring is inline code, as in the docstrings' own convention (`inline_code` below).
default_role = "inline-code"

napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

autodoc_member_order = "bysource"
autodoc_preserve_defaults = True  # `reduce_fn=jnp.mean`, not `<function mean at 0x...>`.
autodoc_typehints = "signature"

# Nitpicky (-n): every cross-reference must resolve, except to other packages' classes (no
# intersphinx: the build must not need the network).
nitpick_ignore_regex = [
  ("py:class", r"(jax|jaxlib|numpy|collections|os|typing|tensorflow|flax)\..*"),
]

html_theme = "sphinx_book_theme"
html_title = f"jaxrank {release}"
html_theme_options = {
  "home_page_in_toc": True,
  "show_toc_level": 2,
  "use_download_button": False,
  "use_fullscreen_button": False,
}
html_static_path: list[str] = []

# The public API, every name of which the reference must document (`check_public_api`): jaxrank,
# the namespaces in its `__all__` (`jaxrank.hashing`, ...) and the `train` extra's subpackages.
_NAMESPACES = (
  "jaxrank",
  *(f"jaxrank.{n}" for n in jaxrank.__all__ if inspect.ismodule(getattr(jaxrank, n))),
  "jaxrank.models",
  "jaxrank.data",
)


def _public_names(module_name: str) -> list[str]:
  """The public names of a namespace: its `__all__`, else what its source defines or re-exports.

  Without `__all__`, a public name is a top-level function, class or assignment of the module, or
  a re-export `from jaxrank... import x as x` that is not a module.
  """
  module = importlib.import_module(module_name)
  if hasattr(module, "__all__"):
    return sorted(module.__all__)
  names = set()
  for node in ast.parse(inspect.getsource(module)).body:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
      names.add(node.name)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      names.update(t.id for t in targets if isinstance(t, ast.Name))
    elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxrank"):
      names.update(
        a.asname
        for a in node.names
        if a.asname == a.name and not inspect.ismodule(getattr(module, a.name))
      )
  return sorted(n for n in names if not n.startswith("_"))


def inline_code(name, rawtext, text, lineno, inliner, options=None, content=None):
  """The default role: the text between single backticks as code, exactly as the source has it.

  Docutils' `code` and `literal` roles drop backslashes (reST escapes), which would turn the
  docstrings' `\\hat H_m` into `hat H_m`; the raw text keeps them.
  """
  del name, text, lineno, inliner, options, content
  source = rawtext[rawtext.index("`") + 1 : rawtext.rindex("`")]
  return [nodes.literal(rawtext, source, classes=["code"])], []


class FamilyIntro(SphinxDirective):
  """`.. family-intro:: jaxrank.fastap_loss ...`: the docstrings of the modules defining the names.

  Each module docstring states the conventions its functions refer to. The module is found from the
  public name, so a page keeps working when the implementation moves between private modules.
  """

  required_arguments = 1
  optional_arguments = 50

  def run(self) -> list[nodes.Node]:
    modules: list[str] = []
    for name in self.arguments:
      parent, _, attr = name.rpartition(".")
      obj = getattr(importlib.import_module(parent), attr)
      module = getattr(obj, "__module__", None) or name
      if module not in modules:
        modules.append(module)
    lines = StringList()
    for module in modules:
      lines.append(f".. automodule:: {module}", "<family-intro>")
      lines.append("   :no-index:", "<family-intro>")
      lines.append("", "<family-intro>")
    container = nodes.container()
    self.state.nested_parse(lines, self.content_offset, container)
    return container.children


# The notebooks of notebooks/, copied into docs/notebooks/ (ignored by git) when the build starts,
# so that MyST-NB renders them as pages of the site.
NOTEBOOKS = REPO / "notebooks"
NOTEBOOK_PAGES = DOCS / "notebooks"


def _figure_cell(figure: str, exists: bool, cell_id: str) -> dict:
  """A Markdown cell that shows the committed figure a notebook saves (or says it is missing)."""
  if exists:
    text = (
      f"```{{figure}} figures/{figure}\n:alt: the figure this notebook saves\n\n"
      f"The figure the cell above saves, as committed in `notebooks/figures/{figure}` "
      "from the notebook's last run (the page is rendered without executing it).\n```"
    )
  else:
    text = (
      f"*The figure the cell above saves (`notebooks/figures/{figure}`) is not committed "
      "yet: executing the notebook draws it.*"
    )
  return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text}


def copy_notebooks(app) -> None:
  """Copies each notebook into docs/notebooks/, with its saved figure shown after the cell.

  The notebooks are stored without outputs (tests/test_notebooks.py executes them, in minutes) and
  are not executed here (`nb_execution_mode = "off"`). Each saves one figure,
  `FIGURES / "<name>.png"`, committed in notebooks/figures/; the copy holds a Markdown cell
  showing that PNG after the cell that saves it, so the page has the notebook's picture.
  """
  if NOTEBOOK_PAGES.exists():
    shutil.rmtree(NOTEBOOK_PAGES)
  shutil.copytree(NOTEBOOKS / "figures", NOTEBOOK_PAGES / "figures")
  for path in sorted(NOTEBOOKS.glob("*.ipynb")):
    notebook = json.loads(path.read_text())
    figure = f"{path.stem}.png"
    cells = []
    for cell in notebook["cells"]:
      cells.append(cell)
      source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
      if cell["cell_type"] == "code" and figure in source and "savefig" in source:
        cells.append(
          _figure_cell(
            figure, (NOTEBOOKS / "figures" / figure).is_file(), f"{path.stem}-committed-figure"
          )
        )
    notebook["cells"] = cells
    (NOTEBOOK_PAGES / path.name).write_text(json.dumps(notebook, indent=1))


# Benchmark and result tables: `.. generated-table:: NAME` shows docs/_generated/NAME.json, which
# the command that measures it writes (`experiments/docs_data.py` says how), with the command,
# machine and date; a figure the same command drew (`"figure"`) is shown above the table.
GENERATED = docs_data.DIRECTORY


class GeneratedTable(SphinxDirective):
  """`.. generated-table:: NAME`: the table of docs/_generated/NAME.json, with its provenance."""

  required_arguments = 1

  def run(self) -> list[nodes.Node]:
    path = GENERATED / f"{self.arguments[0]}.json"
    if not path.is_file():
      raise self.error(
        f"generated-table: no data file {path.relative_to(REPO)}; the command that "
        "measures the table writes it (experiments/docs_data.py)"
      )
    self.env.note_dependency(str(path))
    data = json.loads(path.read_text())
    try:
      docs_data.check(data, path.name)
    except ValueError as error:
      raise self.error(f"generated-table: {error}") from error
    result: list[nodes.Node] = []
    lines = StringList()
    if data.get("figure"):
      self.env.note_dependency(str(GENERATED / data["figure"]))
      lines.append(f".. image:: /_generated/{data['figure']}", "<generated-table>")
      lines.append(f"   :alt: {data['title']}", "<generated-table>")
      lines.append("", "<generated-table>")
    container = nodes.container()
    self.state.nested_parse(lines, self.content_offset, container)
    result.extend(container.children)
    result.append(self._table(data))
    for note in data.get("notes", []):
      result.append(nodes.paragraph(note, note, classes=["generated-note"]))
    provenance = nodes.paragraph(classes=["generated-provenance"])
    provenance += nodes.Text("Generated by ")
    provenance += nodes.literal(data["command"], data["command"], classes=["code"])
    provenance += nodes.Text(f" on {data['machine']}, {data['date']}")
    if data["source"] != "measured":
      provenance += nodes.Text(f" ({data['source']})")
    provenance += nodes.Text(f"; data: docs/_generated/{path.name}.")
    result.append(provenance)
    return result

  @staticmethod
  def _table(data: dict) -> nodes.table:
    """A docutils table of the data's columns and rows, every cell as plain text."""
    table = nodes.table(classes=["generated-table"])
    table += nodes.title(data["title"], data["title"])
    group = nodes.tgroup(cols=len(data["columns"]))
    table += group
    group.extend(nodes.colspec(colwidth=1) for _ in data["columns"])

    def row_of(cells) -> nodes.row:
      row = nodes.row()
      for cell in cells:
        entry = nodes.entry()
        entry += nodes.paragraph(str(cell), str(cell))
        row += entry
      return row

    head = nodes.thead()
    head += row_of(data["columns"])
    body = nodes.tbody()
    body.extend(row_of(r) for r in data["rows"])
    group += head
    group += body
    return table


def check_offline(app, exception) -> None:
  """Warns (an error under -W) about a page that loads a script or stylesheet from another site.

  A reader without internet, or one who opens the build from disk, must see what everyone sees:
  MathJax in particular is served from _static/mathjax (sphinx-mathjax-offline), not a CDN.
  """
  if exception is not None or app.builder.format != "html":
    return
  logger = logging.getLogger(__name__)
  outdir = pathlib.Path(app.outdir)
  mathjax = outdir / "_static" / app.config.mathjax_path
  if not mathjax.is_file():
    logger.warning("MathJax is not served with the pages: no %s", mathjax)
  for page in sorted(outdir.rglob("*.html")):
    for url in docs_data.remote_resources(page.read_text(errors="replace")):
      logger.warning(
        "%s loads %s from another site; the pages must work offline", page.relative_to(outdir), url
      )


def check_public_api(app, env) -> None:
  """Warns (an error under -W) about each public name that no page documents."""
  logger = logging.getLogger(__name__)
  documented = set(env.get_domain("py").objects)
  for namespace in _NAMESPACES:
    for name in _public_names(namespace):
      full = f"{namespace}.{name}"
      if full not in documented:
        logger.warning("public name %s is not documented on any page of docs/", full)


def skip_namedtuple_fields(app, what, name, obj, skip, options):
  """Leaves a NamedTuple's fields to its docstring's `Attributes:` (documented once, not twice)."""
  if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
    return True
  return None


# Annotations as the source writes them: autodoc evaluates `jax.typing.ArrayLike` into its union
# of eight types and `jax.Array` into its implementation class.
_ALIASES = (
  (
    "~jax.jaxlib._jax.Array | ~numpy.ndarray | ~numpy.bool | ~numpy.number | bool | int | float"
    " | complex",
    "~jax.typing.ArrayLike",
  ),
  ("~collections.abc.Callable[[...], ~jax.jaxlib._jax.Array] | None", "~jaxrank.types.ReduceFn"),
  (
    "~collections.abc.Callable[[~jax.jaxlib._jax.Array, ~jax.jaxlib._jax.Array],"
    " ~jax.jaxlib._jax.Array]",
    "~jaxrank.types.SimilarityFn",
  ),
  ("~jax.jaxlib._jax.Array", "~jax.Array"),
)


def shorten_annotations(app, what, name, obj, options, signature, return_annotation):
  """Writes `ArrayLike`, `Array`, `ReduceFn`, ... in signatures instead of what they evaluate to.

  Also gives a Flax NNX module its constructor's signature: autodoc reads the `(*args, **kwargs)`
  of NNX's metaclass instead.
  """
  if what == "class" and signature in (
    "(*args: Any, **kwargs: Any)",
    "(*args: ~typing.Any, **kwargs: ~typing.Any)",
  ):
    init = sphinx_inspect.signature(obj.__init__, bound_method=True)
    signature = sphinx_inspect.stringify_signature(
      init, show_return_annotation=False, unqualified_typehints=True
    )
  for old, new in _ALIASES:
    signature = signature and signature.replace(old, new)
    return_annotation = return_annotation and return_annotation.replace(old, new)
  return signature, return_annotation


def setup(app):
  app.add_role("inline-code", inline_code)
  app.add_directive("family-intro", FamilyIntro)
  app.add_directive("generated-table", GeneratedTable)
  app.connect("builder-inited", copy_notebooks)
  # After sphinx-mathjax-offline's copy of MathJax (priority 500).
  app.connect("build-finished", check_offline, priority=900)
  app.connect("autodoc-process-signature", shorten_annotations)
  app.connect("autodoc-skip-member", skip_namedtuple_fields)
  app.connect("env-check-consistency", check_public_api)
  return {"parallel_read_safe": True}
