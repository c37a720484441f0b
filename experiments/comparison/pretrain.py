"""The papers' starting point on the glyphs: a backbone pretrained by classification.

Every paper fine-tunes a network pretrained on ImageNet, whose classes are none of its retrieval
classes. The stand-in here: the glyph characters drawn by fewer typefaces than the job's (e.g. 8 to
15 of the 21, `Pretraining.min_typefaces`), which are neither training nor test classes of the
job, rendered as the job's glyphs are (`datasets.GLYPHS_PARAMS`: 16 x 16, half-strength
augmentation). Every character the job's data set holds, in either split, is left out.

The backbone is the one the job fine-tunes (`networks.MODELS[config.model]`, the config's
widths), with a linear softmax classifier over the characters on top, trained with AdamW and the
job's warm-up + cosine schedule for a fixed number of steps on batches drawn uniformly from 90% of
the images; the other 10% (seeded, of the same characters) give the classifier's held-out accuracy.
The backbone alone is saved with `jaxrank.models.save_weights`, which `config.init_weights` loads
(the classifier is dropped, as ImageNet's is), in `WORKDIR/backbones/backbone-<key>.npz`, `<key>`
a hash of everything it depends on, with a `.json` of its accuracy beside it: a rerun with the
same settings reuses the file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import jaxrank.data as jd
from experiments.job import config as config_lib
from experiments.job import datasets
from experiments.job import networks
from experiments.job import optimizer as optimizer_lib
from jaxrank import models

logger = logging.getLogger(__name__)

HELD_OUT = 0.1  # The fraction of the images that measure the classifier's accuracy.
FORMAT_VERSION = 1  # Bumped when the pretraining changes for the same settings.


@dataclasses.dataclass(frozen=True)
class Pretraining:
  """How the backbone is pretrained (`protocol.Size.pretrain`).

  Attributes:
    min_typefaces: the characters drawn by at least this many typefaces, less the job's classes.
    max_classes: keep only the first this many characters (by code point); None for all.
    num_steps, batch_size, learning_rate: the classification training.
    seed: the initialisation, the batches and the held-out images.
  """

  min_typefaces: int
  max_classes: int | None
  num_steps: int
  batch_size: int
  learning_rate: float
  seed: int = 0


def pretraining_data(
  base: config_lib.Config, settings: Pretraining
) -> tuple[jd.LabeledImages, np.ndarray]:
  """The pretraining images (labels `0 .. C - 1`) and the code points `[C]` of their characters.

  The characters are those drawn by at least `settings.min_typefaces` typefaces, minus every
  class of both splits of `base.dataset` (train and test), the first `max_classes` of them.
  """
  job_train, job_test = datasets.load_data(dataclasses.replace(base, validation_fraction=0))
  excluded = np.union1d(job_train.labels, job_test.labels)
  params: datasets.GlyphsParams = {
    **datasets.GLYPHS_PARAMS,
    "min_typefaces": settings.min_typefaces,
  }
  parts = [jd.load_glyphs(split, **params) for split in ("train", "test")]
  images = np.concatenate([p.images for p in parts])
  labels = np.concatenate([p.labels for p in parts])
  characters = np.setdiff1d(np.unique(labels), excluded)[: settings.max_classes]
  keep = np.isin(labels, characters)
  indices = np.searchsorted(characters, labels[keep]).astype(np.int32)
  return jd.LabeledImages(images[keep], indices), characters


def settings_key(base: config_lib.Config, settings: Pretraining) -> str:
  """A hash of everything the backbone depends on: the file's name."""
  what = {
    "pretraining": dataclasses.asdict(settings),
    "dataset": base.dataset,
    "model": base.model,
    "model_features": list(base.model_features),
    "glyphs": datasets.GLYPHS_PARAMS,
    "held_out": HELD_OUT,
    "version": FORMAT_VERSION,
  }
  return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


def _classifier(base: config_lib.Config, num_classes: int, seed: int) -> nnx.Sequential:
  """The job's backbone with a linear classifier on top: `Sequential(backbone, linear)`."""
  rngs = nnx.Rngs(seed)
  in_channels = datasets.DATASETS[base.dataset].in_channels
  backbone = networks.MODELS[base.model].build(base, in_channels, rngs)
  # Every backbone of MODELS has out_features (ModelSpec.build), which nnx.Module cannot declare.
  features = backbone.out_features  # type: ignore[attr-defined]
  return nnx.Sequential(backbone, nnx.Linear(features, num_classes, rngs=rngs))


def _train_classifier(
  model: nnx.Sequential,
  data: jd.LabeledImages,
  train_rows: np.ndarray,
  base: config_lib.Config,
  settings: Pretraining,
) -> float:
  """Trains `model` in place on the rows `train_rows` of `data`; returns the last loss."""
  schedule_config = dataclasses.replace(
    base,
    num_steps=settings.num_steps,
    learning_rate=settings.learning_rate,
    warmup_steps=min(base.warmup_steps, settings.num_steps // 10),
  )
  tx = optax.adamw(
    optimizer_lib.learning_rate_schedule(schedule_config), weight_decay=base.weight_decay
  )
  # nnx.split's overloads return a variadic tuple, which mypy cannot unpack into three names.
  graph, params, rest = nnx.split(model, nnx.Param, ...)  # type: ignore[misc]

  @jax.jit
  def step(params, opt_state, images, labels):
    def loss_fn(p):
      logits = nnx.merge(graph, p, rest)(images)
      return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  rng = np.random.default_rng([settings.seed, 1])
  opt_state, loss = tx.init(params), jnp.nan
  for _ in range(settings.num_steps):
    rows = rng.choice(train_rows, size=settings.batch_size, replace=False)
    params, opt_state, loss = step(params, opt_state, data.images[rows], data.labels[rows])
  nnx.update(model, params)
  return float(loss)


def accuracy(model: nnx.Sequential, data: jd.LabeledImages, rows: np.ndarray) -> float:
  """The classifier's top-1 accuracy on the rows `rows` of `data`."""
  predict = jax.jit(lambda images: jnp.argmax(model(images), axis=-1))
  correct = 0
  for start in range(0, len(rows), 1024):
    chunk = rows[start : start + 1024]
    correct += int(np.sum(np.asarray(predict(data.images[chunk])) == data.labels[chunk]))
  return correct / max(len(rows), 1)


def pretrained_backbone(
  base: config_lib.Config, settings: Pretraining, workdir: str
) -> tuple[str, dict[str, Any]]:
  """The cached backbone file of `settings`, pretrained now if it is not there yet.

  Returns:
    `(path, report)`: the `.npz` for `config.init_weights` and what the `.json` beside it holds:
    the characters, images and held-out images counted, the held-out accuracy, the last training
    loss, the seconds it took, the settings and whether it was pretrained in this call (`new`).
  """
  directory = os.path.join(workdir, "backbones")
  path = os.path.join(directory, f"backbone-{settings_key(base, settings)}.npz")
  report_path = path[: -len(".npz")] + ".json"
  if os.path.isfile(path) and os.path.isfile(report_path):
    with open(report_path) as f:
      return path, {**json.load(f), "new": False}
  start = time.perf_counter()
  data, characters = pretraining_data(base, settings)
  rows = np.random.default_rng([settings.seed, 0]).permutation(data.num_examples)
  held = rows[: int(round(HELD_OUT * len(rows)))]
  model = _classifier(base, len(characters), settings.seed)
  loss = _train_classifier(model, data, rows[len(held) :], base, settings)
  report = {
    "characters": len(characters),
    "images": int(data.num_examples),
    "held_out": len(held),
    "accuracy": accuracy(model, data, held),
    "loss": loss,
    "seconds": time.perf_counter() - start,
    "settings": dataclasses.asdict(settings),
  }
  os.makedirs(directory, exist_ok=True)
  backbone = model.layers[0]
  assert isinstance(backbone, nnx.Module)  # nnx.Sequential types its layers as callables.
  models.save_weights(backbone, path + ".tmp")
  os.replace(path + ".tmp", path)
  with open(report_path + ".tmp", "w") as f:
    json.dump(report, f, indent=1)
  os.replace(report_path + ".tmp", report_path)
  logger.info(
    "pretrained the backbone on %d characters in %.0f s: held-out accuracy %.3f (%s)",
    report["characters"],
    report["seconds"],
    report["accuracy"],
    path,
  )
  return path, {**report, "new": True}
