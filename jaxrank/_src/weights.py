"""The one report of how a weights file and a model disagree, for every weight loader."""

from __future__ import annotations

import os
from collections.abc import Mapping

_MAX_LISTED = 5


def check_same_layout(
    fn: str,
    path: str | os.PathLike,
    target: str,
    file_shapes: Mapping[str, tuple[int, ...]],
    model_shapes: Mapping[str, tuple[int, ...]],
) -> None:
  """Raises one `ValueError` naming the missing, unexpected and mismatched keys, if any.

  Args:
    fn: the loader's name, first word of the message.
    path: the weights file, named in the message.
    target: what the file was loaded into (`"model"`, `"ResNet"`, ...).
    file_shapes: each key of the file with its array's shape.
    model_shapes: each key the model expects with the shape it expects there.
  """
  missing = sorted(model_shapes.keys() - file_shapes.keys())
  unexpected = sorted(file_shapes.keys() - model_shapes.keys())
  mismatched = [
      f"{key} (file {tuple(file_shapes[key])}, model {tuple(model_shapes[key])})"
      for key in sorted(model_shapes.keys() & file_shapes.keys())
      if tuple(file_shapes[key]) != tuple(model_shapes[key])
  ]
  problems = [
      f"{what} {_first_few(items)}"
      for what, items in (("missing keys", missing), ("unexpected keys", unexpected),
                          ("shape mismatches", mismatched))
      if items
  ]
  if problems:
    raise ValueError(
        f"{fn}: {os.fspath(path)!r} does not match the {target}: {'; '.join(problems)}.")


def _first_few(items: list[str]) -> str:
  listed = ", ".join(items[:_MAX_LISTED])
  more = len(items) - _MAX_LISTED
  return f"{listed} (and {more} more)" if more > 0 else listed
