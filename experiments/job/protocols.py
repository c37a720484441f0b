"""The test protocols of the job's data sets: which test images query, which they rank, how named.

A data set's `load` (`datasets.DatasetSpec`) gives `Splits`: the train split, the test split
(every test image once), and the test protocol, `evaluations`: named `Evaluation`s of rows of the
test split, each leave-one-out (every query ranks the other queries: SOP, CUB, iNaturalist) or
query/gallery (the queries rank a gallery: In-Shop; the query and database sets of hashing),
evaluated separately (VehicleID's small, medium and large test lists). `evaluation.evaluate`
embeds the test split once and computes each. The metrics of an evaluation named `"small"` are
`small/recall@1`, ... (`metric_name`); those of the one unnamed evaluation, `""`
(`LEAVE_ONE_OUT`, the default of a data set that gives just a test split), are `recall@1`, ... .
`with_gallery` and `separately` build the two kinds from `jaxrank.data.LabeledImages`.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
  import jaxrank.data as jd


@dataclasses.dataclass(frozen=True, eq=False)
class Evaluation:
  """One evaluation of a test protocol, on rows of the test split (`Splits.test`).

  Attributes:
    queries: int `[Q]` the rows of the test split that query; None: every row.
    gallery: int `[N]` the rows the queries rank; None: leave-one-out, each query ranks the
      other queries (itself left out), as `jaxrank.evaluate_retrieval` without a gallery.
    hashing_ks: a hashing protocol (He et al. 2018: the queries rank a database by the Hamming
      distances of binary codes): with a head of binary codes (`networks.HeadSpec.binary_codes`)
      the evaluation is `jaxrank.evaluate_hashing` (AP_T, NDCG_T, and mAP@k for each of these
      cut-offs, by the config's `hashing_convention` and `hashing_averaged_over`); None, or
      another head: `jaxrank.evaluate_retrieval`.
  """

  queries: np.ndarray | None = None
  gallery: np.ndarray | None = None
  hashing_ks: tuple[int, ...] | None = None


HASHING_CONVENTIONS = ("textbook", "released")
"""`Config.hashing_convention`'s values: `jaxrank.evaluate_hashing`'s `convention`s."""

HASHING_AVERAGED_OVER = ("relevant_in_database", "all", "relevant_in_top_k")
"""`Config.hashing_averaged_over`'s values: `jaxrank.evaluate_hashing`'s `averaged_over`s."""


LEAVE_ONE_OUT: Mapping[str, Evaluation] = types.MappingProxyType({"": Evaluation()})
"""The protocol of SOP, CUB, Cars196: the whole test split, leave-one-out, metrics unprefixed."""


def _leave_one_out() -> Mapping[str, Evaluation]:
  return LEAVE_ONE_OUT


@dataclasses.dataclass(frozen=True, eq=False)
class Splits:
  """What a `DatasetSpec.load` gives: the class-disjoint splits and the test protocol.

  Attributes:
    train: the split to train on.
    test: every test image, once: the rows the evaluations refer to (the job embeds them once
      each time it evaluates).
    evaluations: name -> `Evaluation`, evaluated separately in this order; the metrics of a
      named one are prefixed `"<name>/"` (`metric_name`), those of the one named `""` are not.
  """

  train: jd.LabeledImages
  test: jd.LabeledImages
  evaluations: Mapping[str, Evaluation] = dataclasses.field(default_factory=_leave_one_out)


def metric_name(evaluation: str, metric: str) -> str:
  """The name of `metric` (`recall@1`) of the evaluation named `evaluation`: `small/recall@1`,
  or `recall@1` for the unnamed one."""
  return f"{evaluation}/{metric}" if evaluation else metric


def _concatenate(parts: list[jd.LabeledImages]) -> tuple[jd.LabeledImages, list[np.ndarray]]:
  """The examples of `parts` as one data set, and the rows of each part in it. Images given as
  paths are kept once however many parts list them (VehicleID's test lists are nested)."""
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  images = np.concatenate([p.images for p in parts])
  labels = np.concatenate([p.labels for p in parts])
  supers = [p.super_labels for p in parts if p.super_labels is not None]
  super_labels = np.concatenate(supers) if len(supers) == len(parts) else None
  if parts[0].image_format == "path":
    _, first, inverse = np.unique(images, return_index=True, return_inverse=True)
    keep = np.sort(first)  # The first listing of each image, in the order of the parts.
    row_of = np.empty(len(images), np.int64)
    row_of[keep] = np.arange(len(keep))
    rows = row_of[first[inverse.reshape(-1)]]
  else:
    keep, rows = np.arange(len(images)), np.arange(len(images))
  bounds = np.cumsum([0] + [p.num_examples for p in parts])
  data = jd.LabeledImages(
    images=images[keep],
    labels=labels[keep],
    super_labels=None if super_labels is None else super_labels[keep],
    image_format=parts[0].image_format,
  )
  return data, [rows[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def with_gallery(
  train: jd.LabeledImages,
  queries: jd.LabeledImages,
  gallery: jd.LabeledImages,
  *,
  hashing_ks: tuple[int, ...] | None = None,
) -> Splits:
  """`Splits` whose one evaluation (unnamed: metrics unprefixed) has `queries` rank `gallery`
  (In-Shop's query and gallery; the query and database sets of hashing, with `hashing_ks`: see
  `Evaluation`)."""
  test, (query_rows, gallery_rows) = _concatenate([queries, gallery])
  evaluation = Evaluation(queries=query_rows, gallery=gallery_rows, hashing_ks=hashing_ks)
  return Splits(train, test, {"": evaluation})


def separately(train: jd.LabeledImages, tests: Mapping[str, jd.LabeledImages]) -> Splits:
  """`Splits` evaluating each of `tests` leave-one-out on its own, its metrics prefixed by its
  name (VehicleID's `small/recall@1`, `medium/...`, `large/...`)."""
  test, rows = _concatenate(list(tests.values()))
  return Splits(train, test, {name: Evaluation(queries=r) for name, r in zip(tests, rows)})
