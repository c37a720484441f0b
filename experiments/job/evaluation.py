"""Evaluation of the job: retrieval on the test split (classes unseen in training), by its protocol.

`make_embed_fn` (the network in inference mode, its head's evaluation transform: binary codes
for a hashing head), `evaluate` (the test split embedded under the current state, then
`jaxrank.evaluate_retrieval`, split over the devices of every process in a job of several), and
`evaluate_others` (the train split's metrics, `seen/...`, with `eval_seen_classes`; the test
classes', `test/...`, of a run that validates, with `eval_test_classes`), and
`evaluate_raw_pixels` (the baseline of no learning at all). It imports nothing of `train` or
`checkpoints`.

Evaluation embeds the test split (unseen classes) once with the network in inference mode and
computes `jaxrank.evaluate_retrieval` for each evaluation of the data set's protocol (with the
hierarchical metrics `h-ap`, `asi`, `ndcg` of its super-classes where it has them)
(`protocols.Splits.evaluations`): leave-one-out on the whole split (SOP, CUB), queries ranking a
gallery (In-Shop), or several test lists each on its own, their metrics prefixed with the
list's name (VehicleID's `small/recall@1`). A hashing model (`head="hashing"`) trains on relaxed
codes `tanh(alpha f)` of batch-centred features (`networks.CentredHashingHead`) with the
similarity `1 - 2 d / b` of their relaxed Hamming distance (`jaxrank.similarity.hamming`; He et
al. 2018, eq. 10) and is evaluated on the binary codes `sign(f)` with the same similarity, whose
many ties `tie_aware_map` accounts for. On a hashing benchmark (`protocols.Evaluation.hashing_ks`:
CIFAR-10, NUS-WIDE, ImageNet100) its codes are evaluated by He et al.'s protocol instead,
`jaxrank.evaluate_hashing` (the queries rank the database: `tie_aware_map`, `tie_aware_ndcg`,
`map@k`: the last by the config's `hashing_convention`, each the mean over the queries that its
`hashing_averaged_over` selects). Each head's scoring rule and evaluation transform are entries
of its record in `networks.HEADS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TYPE_CHECKING

import jax
import numpy as np
from flax import nnx

import jaxrank
from experiments.job import config as config_lib
from experiments.job import datasets
from experiments.job import input_pipeline
from experiments.job import networks
from experiments.job import placement
from experiments.job import protocols
from experiments.job import step as step_lib

if TYPE_CHECKING:
  import jaxrank.data as jd  # Imports TensorFlow, which input_pipeline imports when it reads data.


def make_embed_fn(config: config_lib.Config, model: step_lib.Model):
  """The jitted embedding of a batch: `embed(params, rest, images, step) -> [batch, dim]`.

  The network in inference mode (`model.eval_graph`) at the step's `tanh` scale, then its head's
  evaluation transform (`networks.HEADS[config.head].evaluated_as`: the binary codes `sign(f)` of
  a hashing head, the embeddings themselves otherwise).
  """

  @jax.jit
  def embed(params, rest, images, step):
    outputs = nnx.merge(model.eval_graph, params, rest)(
      images, scale=step_lib.tanh_scale(config, step)
    )
    return networks.HEADS[config.head].evaluated_as(outputs)

  return embed


def evaluate(
  config: config_lib.Config,
  embed_fn,
  state,
  test: jd.LabeledImages,
  evaluations: Mapping[str, protocols.Evaluation] = protocols.LEAVE_ONE_OUT,
) -> dict[str, float]:
  """The retrieval metrics of `evaluations` on the test split (unseen classes) under the state.

  The split is embedded once, then each evaluation computed (`retrieval_metrics`). In a job of
  several processes each embeds a contiguous share of the split (on one of its devices, from its
  copy of the replicated state) and `jaxrank.evaluate_retrieval` splits the evaluation over the
  devices of every process (`mesh=`): no process holds the whole split's embeddings, and every
  process returns the metrics of the whole split.
  """
  count, index = jax.process_count(), jax.process_index()
  share = (index * test.num_examples // count, (index + 1) * test.num_examples // count)
  params, rest, step = placement.local((state["params"], state["rest"], state["step"]))
  embeddings = [np.zeros((0, config.embedding_dim), np.float32)]
  labels = [np.zeros((0, *test.labels.shape[1:]), np.int32)]  # [n], or [n, C] multi-hot.
  for batch in input_pipeline.eval_batches(config, test, share):
    e = np.asarray(embed_fn(params, rest, batch["image"], step))
    embeddings.append(e[batch["mask"]])
    labels.append(batch["label"][batch["mask"]])
  supers = None if test.super_labels is None else test.super_labels[share[0] : share[1]]
  return retrieval_metrics(
    config,
    np.concatenate(embeddings),
    np.concatenate(labels),
    evaluations,
    share=share,
    super_labels=supers,
    similarity_fn=networks.HEADS[config.head].similarity_fn,
    mesh=placement.mesh(config) if count > 1 else None,
    codes=networks.HEADS[config.head].binary_codes,
  )


def evaluate_others(
  config: config_lib.Config, embed_fn, state, train_data: jd.LabeledImages
) -> dict[str, float]:
  """The metrics of the other splits a run evaluates besides its test split (`evaluate`): the
  train split's, prefixed `seen/`, with `config.eval_seen_classes`; with
  `config.eval_test_classes`, in a run whose test split is its validation classes
  (`validation_fraction > 0`), the data set's test classes', by its protocol, prefixed `test/`.
  """
  metrics = {}
  if config.eval_seen_classes:
    seen = evaluate(config, embed_fn, state, train_data)
    metrics.update({f"seen/{k}": v for k, v in seen.items()})
  if config.eval_test_classes:
    # The data set's own splits (loaded once: `datasets.load_splits` keeps them).
    splits = datasets.load_splits(dataclasses.replace(config, validation_fraction=0.0))
    test = evaluate(config, embed_fn, state, splits.test, splits.evaluations)
    metrics.update({f"test/{k}": v for k, v in test.items()})
  return metrics


def retrieval_metrics(
  config: config_lib.Config,
  embeddings: np.ndarray,
  labels: np.ndarray,
  evaluations: Mapping[str, protocols.Evaluation],
  *,
  share: tuple[int, int] | None = None,
  super_labels: np.ndarray | None = None,
  similarity_fn=jaxrank.similarity.cosine,
  mesh: jax.sharding.Mesh | None = None,
  codes: bool = False,
) -> dict[str, float]:
  """`jaxrank.evaluate_retrieval` (or, for binary codes and a hashing protocol,
  `jaxrank.evaluate_hashing`) of each evaluation, on the rows of a split embedded once.

  Args:
    config: the run's config (`eval_ks`).
    embeddings: `[n, D]` this process's rows of the split, rows `share[0]:share[1]` (all rows
      when `share` is None).
    labels: `[n]` their labels.
    evaluations: name -> `protocols.Evaluation`, whose rows index the whole split.
    share: the rows of the split that this process holds.
    super_labels: optional `[n]` super-class labels of the rows (the data set's, where it has
      them: the glyphs' scripts, SOP's categories, In-Shop's, iNaturalist's supercategories):
      then each evaluation of class labels adds the hierarchical metrics of the two-level
      hierarchy, `h-ap`, `asi` and `ndcg` (`jaxrank.evaluate_retrieval(super_labels=)`,
      HAPPIER's relevance with its defaults).
    similarity_fn: the scoring rule.
    mesh: the mesh of a job of several processes, whose evaluation each process's rows join.
    codes: whether `embeddings` are binary codes (a hashing head's): then an evaluation of a
      hashing protocol (`protocols.Evaluation.hashing_ks`) is `jaxrank.evaluate_hashing`.

  Returns:
    The metrics of every evaluation, named by `protocols.metric_name`.
  """
  start, stop = (0, len(labels)) if share is None else share

  def local(rows: np.ndarray | None) -> np.ndarray | slice:
    if rows is None:
      return slice(None)
    return rows[(rows >= start) & (rows < stop)] - start

  metrics: dict[str, float] = {}
  for name, evaluation in evaluations.items():
    queries = local(evaluation.queries)
    gallery_embeddings = gallery_labels = None
    hierarchy: dict[str, Any] = {}
    if super_labels is not None and labels.ndim == 1:
      hierarchy["super_labels"] = super_labels[queries]
    if evaluation.gallery is not None:
      rows = local(evaluation.gallery)
      gallery_embeddings, gallery_labels = embeddings[rows], labels[rows]
      if super_labels is not None and hierarchy:
        hierarchy["gallery_super_labels"] = super_labels[rows]
    if codes and evaluation.hashing_ks is not None:
      values = _hashing_metrics(
        config,
        (embeddings[queries], labels[queries]),
        (gallery_embeddings, gallery_labels),
        evaluation,
        mesh,
      )
    else:
      values = jaxrank.evaluate_retrieval(
        embeddings[queries],
        labels[queries],
        gallery_embeddings,
        gallery_labels,
        ks=config.eval_ks,
        similarity_fn=similarity_fn,
        mesh=mesh,
        **hierarchy,
      )
    # Floats: the default reduce_fn.
    metrics.update({protocols.metric_name(name, k): float(v) for k, v in values.items()})
  return metrics


def _hashing_metrics(config, query_set, database_set, evaluation, mesh):
  """`jaxrank.evaluate_hashing` of a hashing protocol's binary codes (one process): the query
  and database `(codes, labels)`, by the config's `hashing_convention` and
  `hashing_averaged_over`."""
  (queries, query_labels), (database, database_labels) = query_set, database_set
  if mesh is not None or database is None:
    raise config_lib.ConfigError(
      "a hashing protocol (queries ranking a database) is evaluated in one process: run "
      "the job with one process."
    )
  return jaxrank.evaluate_hashing(
    queries,
    database,
    query_labels,
    database_labels,
    ks=evaluation.hashing_ks,
    convention=config.hashing_convention,
    averaged_over=config.hashing_averaged_over,
  )


def evaluate_raw_pixels(config: config_lib.Config) -> dict[str, float]:
  """Retrieval on the test split's pixels: the baseline of no learning at all.

  Each image as the network sees it at evaluation (`input_pipeline.eval_batches`), flattened,
  minus the mean image of the train split, compared by cosine similarity; the metrics of
  `evaluate` (every evaluation of the data set's protocol), and with `eval_seen_classes` the same
  on the train split, leave-one-out ("seen/..."). Every process computes them alone (meant for
  small images: it holds a split's pixels in memory).
  """
  splits = datasets.load_splits(config)

  def pixels(data: jd.LabeledImages) -> tuple[np.ndarray, np.ndarray]:
    rows, labels = [], []
    for batch in input_pipeline.eval_batches(config, data):
      mask = batch["mask"]
      rows.append(np.asarray(batch["image"][mask], np.float32).reshape(int(mask.sum()), -1))
      labels.append(batch["label"][mask])
    return np.concatenate(rows), np.concatenate(labels)

  train_pixels, train_labels = pixels(splits.train)
  mean = train_pixels.mean(axis=0)
  test_pixels, test_labels = pixels(splits.test)
  metrics = retrieval_metrics(
    config,
    test_pixels - mean,
    test_labels,
    splits.evaluations,
    super_labels=splits.test.super_labels,
  )
  if config.eval_seen_classes:
    seen = retrieval_metrics(
      config,
      train_pixels - mean,
      train_labels,
      protocols.LEAVE_ONE_OUT,
      super_labels=splits.train.super_labels,
    )
    metrics.update({f"seen/{k}": v for k, v in seen.items()})
  return metrics
