"""The landmark chain after training: descriptors, whitening, query expansion, the protocol.

Revaud et al. 2019 (sec. 4) evaluate a trained network on Revisited Oxford/Paris this way:

1. one global descriptor per image at its full resolution (`extract`): each gallery image whole,
   each query cropped to its box (`jaxrank.data.read_query_image`), normalised as in training;
2. a PCA whitening learned on descriptors of the training images (`learn_whitenings`: `power`
   0.5, full whitening, and 0.25, the paper's square-rooted PCA), applied to queries and gallery;
3. optionally alpha-QE (`jaxrank.alpha_query_expansion`, k = 10, alpha = 2 as the paper);
4. `jaxrank.evaluate_revisited`: mAP in the Easy, Medium and Hard settings, with and without the
   distractors appended to the gallery (`jaxrank.data.with_distractors`).

`evaluate_network` runs 2-4 for one network and returns one row per (whitening, QE); `format_table`
prints the rows of several networks as one Markdown table. Descriptors are extracted by
`jaxrank.models.extract_descriptors` at one scale (the paper's), the images padded into buckets
of `MULTIPLE` pixels with their masks (one compiled program per bucket shape): through a network
that masks every layer (a `ResNet`, a `SmallConvNet`) a padded image's descriptor is its own,
to rounding, where its sides are multiples of the network's stride.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterable, Sequence
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import jaxrank
import jaxrank.data as jd
from jaxrank import models
from jaxrank.data import preprocess

QE_K, QE_ALPHA = 10, 2.0  # Revaud et al. 2019, sec. 4.4: alpha-QE with alpha = 2, k = 10.
WHITENINGS = {"none": None, "PCA-w (p 0.5)": 0.5, "sqrt PCA-w (p 0.25)": 0.25}
"""The whitenings of each row by name: `learn_whitening`'s `power`, or None for none."""
SETTINGS = ("easy", "medium", "hard")
COLUMNS = ("network", "whitening", "QE", "Easy", "Medium", "Hard", "Medium +D", "Hard +D")
"""The table's columns: mAP in percent per setting, `+D` with the distractors in the gallery."""

EmbedFn = Callable[[np.ndarray, np.ndarray], jax.Array]
"""`embed(images [n, H, W, 3], mask [n, H, W]) -> [n, D]`, as `extract_descriptors` calls it."""

SCALES = (1.0,)  # Revaud et al. 2019, sec. 4.2: one scale, the image as it is.
MULTIPLE = 32  # The buckets' step: the miniature's scenes (sides multiples of 16) pad exactly.
GROUP = 256  # Images read into memory at a time (extract_descriptors holds its list).


def make_embed_fn(model: nnx.Module) -> EmbedFn:
  """`embed(images, mask) -> [n, D]`: the network in inference mode on padded images.

  The pixels are scaled to `[0, 1]` and normalised by ImageNet's mean and deviation, as the job's
  pipeline (`jaxrank.data.train_preprocess`) feeds them in training; the mask goes to the
  network (`EmbeddingModel(x, mask=mask)`), which zeroes the padding and pools over each image's
  own cells. One program per bucket shape, shared by every network of the same structure (the
  untrained and the trained one).
  """
  graph, state = nnx.split(model)
  # As host arrays: a restored checkpoint's arrays carry a sharding that would key another program.
  state = jax.tree.map(np.asarray, state)
  return lambda images, mask: _embed(graph, state, images, mask)


@functools.partial(jax.jit, static_argnums=0)
def _embed(graph, state, images, mask):
  mean, std = np.asarray(preprocess.IMAGENET_MEAN), np.asarray(preprocess.IMAGENET_STD)
  x = (images.astype(jnp.float32) / 255.0 - mean) / std
  return nnx.merge(graph, state)(x, mask=mask)


def extract(
  embed: EmbedFn, images: Iterable[np.ndarray], *, max_side: int | None = None
) -> np.ndarray:
  """The descriptors `[n, D]` of `images` (each uint8 `[h, w, 3]`, at its own size), by
  `jaxrank.models.extract_descriptors` at Revaud et al.'s single scale (`SCALES`): padded into
  buckets of `MULTIPLE` pixels, `GROUP` images read at a time."""
  descriptors, group = [], []
  for image in images:
    group.append(image)
    if len(group) == GROUP:
      descriptors.append(_extract_group(embed, group, max_side))
      group = []
  if group:
    descriptors.append(_extract_group(embed, group, max_side))
  return np.concatenate(descriptors).astype(np.float32)


def _extract_group(embed: EmbedFn, images: list[np.ndarray], max_side: int | None) -> np.ndarray:
  return models.extract_descriptors(
    embed, images, scales=SCALES, max_side=max_side, multiple=MULTIPLE, batch_size=8
  )


def read_image(path: str) -> np.ndarray:
  """The image file at `path` as uint8 `[h, w, 3]`, a JPEG decoded as PIL does (`jd.read_image`)."""
  return jd.read_image(path)


def image_files(directory: str) -> list[str]:
  """The image files under `directory` (an image folder `class/image`), sorted."""
  found = []
  for parent, _, names in sorted(os.walk(directory)):
    found += [os.path.join(parent, n) for n in sorted(names) if n.lower().endswith(_SUFFIXES)]
  return found


_SUFFIXES = (".jpg", ".jpeg", ".png")


@dataclasses.dataclass(frozen=True)
class Descriptors:
  """One network's descriptors of a test set (`describe`).

  Attributes:
    queries: `[Q, D]` the queries, each cropped to its box.
    gallery: `[N, D]` the gallery's images.
    distractors: `[M, D]` the distractors (`M = 0` without).
    training: `[T, D]` the training images that whitening is learned on.
  """

  queries: np.ndarray
  gallery: np.ndarray
  distractors: np.ndarray
  training: np.ndarray


def describe(
  embed: EmbedFn,
  data: jd.RevisitedData,
  training_paths: Sequence[str],
  *,
  max_side: int | None = jd.landmarks.DEFAULT_MAX_SIDE,
) -> Descriptors:
  """`embed`'s descriptors of every image of `data` (its distractors apart) and of the training
  images, each at its own size (the longer side capped at `max_side`)."""
  n = len(data.gallery_paths) - data.num_distractors
  gallery = extract(
    embed, (jd.read_gallery_image(data, i, max_side=max_side) for i in range(n)), max_side=max_side
  )
  distractors = (
    jd.read_gallery_image(data, i, max_side=max_side) for i in range(n, len(data.gallery_paths))
  )
  queries = (jd.read_query_image(data, i, max_side=max_side) for i in range(len(data.query_paths)))
  return Descriptors(
    queries=extract(embed, queries, max_side=max_side),
    gallery=gallery,
    distractors=(
      extract(embed, distractors, max_side=max_side) if data.num_distractors else gallery[:0]
    ),
    training=extract(embed, (read_image(p) for p in training_paths), max_side=max_side),
  )


def _whitened(d: Descriptors, power: float | None) -> Descriptors:
  """`d` whitened by the PCA whitening of power `power` learned on `d.training` (None: as is)."""
  if power is None:
    return d
  whitening = jaxrank.learn_whitening(d.training, power=power)
  return Descriptors(
    *(
      np.asarray(jaxrank.apply_whitening(x, whitening)) if len(x) else x
      for x in (d.queries, d.gallery, d.distractors, d.training)
    )
  )


def _maps(queries, gallery, ground_truth, settings: Sequence[str]) -> list[float]:
  """mAP (percent) of `queries` against `gallery` in each of `settings`."""
  r = cast(dict[str, float], jaxrank.evaluate_revisited(queries, gallery, ground_truth, ks=(1,)))
  return [100 * r[f"{s}/map"] for s in settings]


def _row(d: Descriptors, ground_truth, expand) -> list[float]:
  """The mAP columns of `d`: E/M/H against the gallery, M/H with the distractors appended (NaN
  without), each query first passed through `expand(queries, gallery)` against that gallery."""
  values = _maps(expand(d.queries, d.gallery), d.gallery, ground_truth, SETTINGS)
  if not len(d.distractors):
    return values + [float("nan")] * 2
  both = np.concatenate([d.gallery, d.distractors])
  return values + _maps(expand(d.queries, both), both, ground_truth, ("medium", "hard"))


def evaluate_network(
  name: str, d: Descriptors, ground_truth, *, qe_k: int = QE_K, qe_alpha: float = QE_ALPHA
) -> list[list]:
  """One row per whitening of `WHITENINGS` and per QE (without, then with alpha-QE): the row's
  `COLUMNS`, mAP in percent. Query expansion takes each query's neighbours in the gallery it is
  evaluated on (with the distractors for the `+D` columns)."""
  k = min(qe_k, len(d.gallery))

  def as_is(queries, gallery):
    return queries

  def expanded(queries, gallery):
    return np.asarray(jaxrank.alpha_query_expansion(queries, gallery, k=k, alpha=qe_alpha))

  rows = []
  for whitening, power in WHITENINGS.items():
    w = _whitened(d, power)
    rows.append([name, whitening, "", *_row(w, ground_truth, as_is)])
    qe = f"alpha-QE (k {k}, alpha {qe_alpha:g})"
    rows.append([name, whitening, qe, *_row(w, ground_truth, expanded)])
  return rows


def format_table(rows: Sequence[Sequence]) -> str:
  """The rows as one Markdown table of `COLUMNS`, mAP with one decimal."""

  def cell(value) -> str:
    if isinstance(value, float):
      return "-" if np.isnan(value) else f"{value:.1f}"
    return str(value)

  lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
  lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
  return "\n".join(lines)
