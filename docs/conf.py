"""Sphinx configuration of jaxrank's API reference: `make docs` builds it into docs/_build/html.

The reference is generated from the docstrings (Google style, read by napoleon) with autodoc;
`.. math::` blocks are rendered by MathJax and single-backtick inline code by `default_role`.
The build runs with warnings as errors, and `check_public_api` below makes a public name that no
page documents one of them.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import sys

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import inspect as sphinx_inspect
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.abspath(".."))

import jaxrank  # noqa: E402  (after sys.path, so that a checkout builds without installing)

project = "jaxrank"
author = "the jaxrank authors"
copyright = "the jaxrank authors"  # noqa: A001  (Sphinx's name)
release = version = jaxrank.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax"]
exclude_patterns = ["_build"]
templates_path: list[str] = []

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

html_theme = "alabaster"
html_title = f"jaxrank {release}"
html_theme_options = {"page_width": "1160px", "sidebar_width": "250px"}
html_static_path: list[str] = []

# The public API, every name of which the reference must document (`check_public_api`): jaxrank,
# the namespaces in its `__all__` (`jaxrank.hashing`, ...) and the `train` extra's subpackages.
_NAMESPACES = ("jaxrank", *(f"jaxrank.{n}" for n in jaxrank.__all__
                            if inspect.ismodule(getattr(jaxrank, n))),
               "jaxrank.models", "jaxrank.data")


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
      names.update(a.asname for a in node.names
                   if a.asname == a.name and not inspect.ismodule(getattr(module, a.name)))
  return sorted(n for n in names if not n.startswith("_"))


def inline_code(name, rawtext, text, lineno, inliner, options=None, content=None):
  """The default role: the text between single backticks as code, exactly as the source has it.

  Docutils' `code` and `literal` roles drop backslashes (reST escapes), which would turn the
  docstrings' `\\hat H_m` into `hat H_m`; the raw text keeps them.
  """
  del name, text, lineno, inliner, options, content
  source = rawtext[rawtext.index("`") + 1:rawtext.rindex("`")]
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
    ("~jax.jaxlib._jax.Array | ~numpy.ndarray | ~numpy.bool | ~numpy.number | bool | int | float"
     " | complex", "~jax.typing.ArrayLike"),
    ("~collections.abc.Callable[[...], ~jax.jaxlib._jax.Array] | None", "~jaxrank.types.ReduceFn"),
    ("~collections.abc.Callable[[~jax.jaxlib._jax.Array, ~jax.jaxlib._jax.Array],"
     " ~jax.jaxlib._jax.Array]", "~jaxrank.types.SimilarityFn"),
    ("~jax.jaxlib._jax.Array", "~jax.Array"),
)


def shorten_annotations(app, what, name, obj, options, signature, return_annotation):
  """Writes `ArrayLike`, `Array`, `ReduceFn`, ... in signatures instead of what they evaluate to.

  Also gives a Flax NNX module its constructor's signature: autodoc reads the `(*args, **kwargs)`
  of NNX's metaclass instead.
  """
  if what == "class" and signature in ("(*args: Any, **kwargs: Any)",
                                        "(*args: ~typing.Any, **kwargs: ~typing.Any)"):
    init = sphinx_inspect.signature(obj.__init__, bound_method=True)
    signature = sphinx_inspect.stringify_signature(
        init, show_return_annotation=False, unqualified_typehints=True)
  for old, new in _ALIASES:
    signature = signature and signature.replace(old, new)
    return_annotation = return_annotation and return_annotation.replace(old, new)
  return signature, return_annotation


def setup(app):
  app.add_role("inline-code", inline_code)
  app.add_directive("family-intro", FamilyIntro)
  app.connect("autodoc-process-signature", shorten_annotations)
  app.connect("autodoc-skip-member", skip_namedtuple_fields)
  app.connect("env-check-consistency", check_public_api)
  return {"parallel_read_safe": True}
