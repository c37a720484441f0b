"""Training an embedding with a jaxrank loss, evaluated on classes never seen in training.

`train_and_evaluate(config, workdir)` is the whole job, Flax-examples style: a `Config`
(`experiments/job/config.py`) in, a workdir out, the final retrieval metrics returned. This module
holds the optimiser, the training state and step, the evaluation, checkpoints and the loop; the data
comes from `experiments/job/input_pipeline.py`, the network from `experiments/job/networks.py`, the
loss from `experiments/job/losses.py`, and what is written and printed from
`experiments/job/reporting.py`. In the workdir:

* `config.json`: the run's configuration (a rerun with another configuration refuses the workdir);
* `checkpoints/<step>/`: orbax checkpoints of the model, optimizer state, step, memory of past
  batches and data position, every `checkpoint_every` steps and at the end, the last
  `keep_checkpoints` kept. Rerunning the same command resumes from the latest complete one (a run
  killed during a save leaves an unfinished directory that orbax ignores and removes), reading the
  data from where it stopped, so an interrupted run ends exactly where an uninterrupted one does.
  Ctrl-C (SIGINT) lets the current step finish, saves a checkpoint and raises `Interrupted`. A
  checkpoint that cannot be read is moved to `unreadable_checkpoints/<step>/`, with a warning that
  names it, and the run resumes from the newest readable one;
* `metrics.jsonl`: one JSON record per logged step (`loss`, `learning_rate`, `images_per_second`)
  and per evaluation (`recall@k`, `map@r`, `map`, `tie_aware_map`), each with its `step`;
* `curves.png`: the training loss and Recall@k / MAP@R over time, titled with the run's name.

One step: a batch of `P x K` images (`samples_per_class` images of each of `batch_size /
samples_per_class` classes) is embedded, `jaxrank.batch_retrieval` makes every image a query ranking
the rest of the batch (and the memory of past batches when `memory_batches > 0`), and the loss named
by `config.loss` (`experiments/job/losses.py`) is minimised with AdamW, a warm-up + cosine learning
rate, and a learning rate `head_lr_multiplier` times larger on the embedding layer (the papers use
10x). Optionally the gradient is computed in chunks (`chunk_size`, `jaxrank.chunked_value_and_grad`)
or the in-batch retrieval is sharded over every device (`shard=True`, `jaxrank.sharded_loss`).

The same job runs as several processes of one `jax.distributed` job (one per host, started by
`experiments.job.main`, which joins the job before anything else touches JAX), with `shard=True`:
one mesh over the devices of every process. Each process calls the same seeded sampler, reads only
its own contiguous slice of each global `P x K` batch (`input_pipeline.TrainBatches(share=...)`) and
makes its part of the global batch with `jax.make_array_from_process_local_data`; the training
state is replicated on every device. Orbax saves and restores checkpoints collectively (every
process calls it; the workdir must be one directory that every process sees, such as a shared
file system). Evaluation embeds a contiguous share of the test split in each process, and
`jaxrank.evaluate_retrieval(..., mesh=...)` splits the metrics' work over every device of every
process, each of which gets the metrics of the whole split. Only process 0 writes
`config.json`, `metrics.jsonl` and `curves.png`, and shows the progress bar. Ctrl-C is not
deferred there (the processes could not agree on when to stop): a killed job resumes from its last
checkpoint, and ends where an uninterrupted one does.

Evaluation embeds the test split (unseen classes) with the network in inference mode and computes
`jaxrank.evaluate_retrieval` (leave-one-out). A hashing model (`head="hashing"`) trains on relaxed
codes `tanh(alpha f)` of batch-centred features (`networks.CentredHashingHead`) with the
similarity `1 - 2 d / b` of their relaxed Hamming distance (`jaxrank.similarity.hamming`; He et
al. 2018, eq. 10) and is evaluated on the binary codes `sign(f)` with the same similarity, whose
many ties `tie_aware_map` accounts for. Each head's scoring rule and evaluation transform are
entries of its record in `networks.HEADS`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx
from jax.experimental import checkify
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jaxrank
import jaxrank.data as jd
from experiments.job import check
from experiments.job import config as config_lib
from experiments.job import input_pipeline
from experiments.job import losses
from experiments.job import networks
from experiments.job import reporting
from jaxrank import models

# "experiments.job.train"; experiments.job.main shows its INFO lines.
logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# Optimiser, loss.


def learning_rate_schedule(config: config_lib.Config) -> optax.Schedule:
  """Linear warm-up to `learning_rate`, then cosine decay to 1% of it at `num_steps`."""
  warmup = min(config.warmup_steps, max(config.num_steps - 1, 0))
  return optax.warmup_cosine_decay_schedule(
    init_value=0.0 if warmup else config.learning_rate,
    peak_value=config.learning_rate,
    warmup_steps=warmup,
    decay_steps=max(config.num_steps, warmup + 1),
    end_value=0.01 * config.learning_rate,
  )


def make_optimizer(config: config_lib.Config) -> optax.GradientTransformation:
  """AdamW with the schedule; the head's learning rate is `head_lr_multiplier` times larger."""
  schedule = learning_rate_schedule(config)
  head_schedule = lambda step: config.head_lr_multiplier * schedule(step)

  def labels(params):
    return jax.tree_util.tree_map_with_path(
      lambda path, _: "head" if path[0].key == "head" else "backbone", params
    )

  return optax.multi_transform(
    {
      "backbone": optax.adamw(schedule, weight_decay=config.weight_decay),
      "head": optax.adamw(head_schedule, weight_decay=config.weight_decay),
    },
    labels,
  )


def _tanh_scale(config: config_lib.Config, step: jax.Array) -> jax.Array | None:
  if not networks.HEADS[config.head].tanh_scaled:
    return None
  return jaxrank.hashing.tanh_scale(
    step, initial=config.tanh_initial, growth=config.tanh_growth, every=config.tanh_every
  )


def _mesh(config: config_lib.Config) -> jax.sharding.Mesh | None:
  """With `shard=True`, the mesh `("batch",)` over every device of every process; else None."""
  if not config.shard:
    return None
  return jax.make_mesh((jax.device_count(),), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))


def relevant_bound(config: config_lib.Config) -> int | None:
  """The most relevant items a list of a training batch can hold, when the sampler fixes it.

  A sampler of whole classes (`SamplerSpec.whole_classes`) gives each class of a batch exactly
  `K = samples_per_class` images, so a query's list holds `K - 1` relevant items (`K` with
  `include_self`), plus at most `K` for each of the `memory_batches` past batches in the gallery.
  Other samplers fix nothing: None. Passed as `max_relevant` to the losses that take it, which then
  run a loop or a count of that many items instead of a sort or a data-dependent loop (a list
  beyond the bound would give NaN: the sampler rules it out).
  """
  if not input_pipeline.SAMPLERS[config.sampler].whole_classes:
    return None
  k = config.samples_per_class
  return (k if config.include_self else k - 1) + config.memory_batches * k


def _batch_loss_fn(
  config: config_lib.Config, mesh: jax.sharding.Mesh | None
) -> Callable[[jax.Array, Any], jax.Array]:
  """`fn(embeddings [B, D], (labels [B], memory or None)) -> scalar`: retrieval, then the loss.

  A loss that takes `max_relevant` gets the sampler's bound (`relevant_bound`) unless
  `config.loss_kwargs` sets one. With `loss_block_size`, the lists are scored and the loss taken
  that many queries at a time (`jaxrank.blocked_loss`, or `sharded_loss(block_size=)`).
  """
  kwargs = dict(config.loss_kwargs)
  bound = relevant_bound(config)
  if bound is not None and losses.takes_relevant_bound(config.loss):
    kwargs.setdefault("max_relevant", bound)
  list_loss = losses.get_loss(config.loss, kwargs)
  similarity_fn = networks.HEADS[config.head].similarity_fn
  block_size = config.loss_block_size
  if mesh is not None:
    sharded = jaxrank.sharded_loss(
      list_loss,
      mesh,
      "batch",
      include_self=config.include_self,
      similarity_fn=similarity_fn,
      block_size=block_size,
    )
    return lambda embeddings, targets: sharded(embeddings, targets[0])

  def whole(embeddings, labels, **gallery):
    scores, relevance, where = jaxrank.batch_retrieval(
      embeddings,
      labels,
      include_self=config.include_self,
      similarity_fn=similarity_fn,
      **gallery,
    )
    return list_loss(scores, relevance, where=where)

  lists_loss = (
    whole
    if block_size is None
    else jaxrank.blocked_loss(
      list_loss,
      block_size=block_size,
      include_self=config.include_self,
      similarity_fn=similarity_fn,
    )
  )

  def loss(embeddings, targets):
    labels, memory = targets
    if memory is None:
      return lists_loss(embeddings, labels)
    return lists_loss(
      embeddings,
      labels,
      gallery_embeddings=memory.embeddings,
      gallery_labels=memory.labels,
      gallery_where=memory.where,
    )

  return loss


# ---------------------------------------------------------------------------------------------
# The training state: a pytree of arrays, saved and restored as a whole.


@dataclasses.dataclass
class _Model:
  """The model split for pure functions: graph definitions for training and inference."""

  train_graph: Any
  eval_graph: Any


def _init_state(config: config_lib.Config, tx: optax.GradientTransformation):
  """The model's graph definitions and the initial training state (a pytree of arrays)."""
  in_channels = input_pipeline.DATASETS[config.dataset].in_channels
  model = networks.make_model(config, in_channels, nnx.Rngs(config.seed))
  model.eval()
  # nnx.split's overloads return a variadic tuple, which mypy cannot unpack into three names.
  eval_graph, params, rest = nnx.split(model, nnx.Param, ...)  # type: ignore[misc]
  model.train()
  if config.freeze_batchnorm:
    model.backbone.eval()
  train_graph, _, _ = nnx.split(model, nnx.Param, ...)  # type: ignore[misc]
  state = {"params": params, "rest": rest, "opt_state": tx.init(params), "step": jnp.int32(0)}
  if config.memory_batches:
    state["memory"] = jaxrank.memory.init(
      config.memory_batches * config.batch_size, config.embedding_dim
    )
  return _Model(train_graph, eval_graph), state


def _make_train_step(
  config: config_lib.Config,
  model: _Model,
  tx: optax.GradientTransformation,
  mesh: jax.sharding.Mesh | None,
):
  batch_loss = _batch_loss_fn(config, mesh)

  def embed(params, rest, images, scale):
    # Fresh variables (copy=True): a BatchNorm in training mode updates its statistics inside
    # value_and_grad, which NNX refuses for variables made at the outer (jit) level.
    net = nnx.merge(model.train_graph, params, rest, copy=True)
    embeddings = net(images, scale=scale)
    return embeddings, nnx.state(net, nnx.Not(nnx.Param))

  def step_fn(state, images, labels, first_bad):
    scale = _tanh_scale(config, state["step"])
    memory = state.get("memory")
    if config.chunk_size is None:

      def objective(params):
        embeddings, rest = embed(params, state["rest"], images, scale)
        return batch_loss(embeddings, (labels, memory)), (embeddings, rest)

      (loss, (embeddings, rest)), grads = jax.value_and_grad(objective, has_aux=True)(
        state["params"]
      )
    else:
      embed_params = lambda params, x: embed(params, state["rest"], x, scale)[0]
      loss, grads = jaxrank.chunked_value_and_grad(
        embed_params, batch_loss, chunk_size=config.chunk_size
      )(state["params"], images, (labels, memory))
      embeddings, rest = None, state["rest"]
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    new = {
      "params": optax.apply_updates(state["params"], updates),
      "rest": rest,
      "opt_state": opt_state,
      "step": state["step"] + 1,
    }
    if memory is not None:
      new["memory"] = jaxrank.memory.push(memory, embeddings, labels)
    # The first step whose loss or updated parameters are not finite (-1: none yet), checked
    # here on every step at the cost of one reduction, read on the host only before saving and
    # on logging steps (`_check_finite`).
    finite = jnp.isfinite(loss)
    for leaf in jax.tree.leaves(new["params"]):
      finite &= jnp.all(jnp.isfinite(leaf))
    first_bad = jnp.where((first_bad < 0) & ~finite, new["step"], first_bad)
    return new, loss, first_bad

  if config.check_traced_inputs:
    step_fn = checkify.checkify(step_fn, errors=checkify.user_checks)
  # No buffer donation: an asynchronous checkpoint save may still be reading the previous state.
  if mesh is None:
    jitted = jax.jit(step_fn)
  else:
    # On the mesh: the state replicated, the batch split; the state stays replicated after a step.
    replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    jitted = jax.jit(
      step_fn, in_shardings=(replicated, split, split, replicated), out_shardings=replicated
    )
  if not config.check_traced_inputs:
    return jitted

  def checked_step(*args):
    with jaxrank.traced_checks():  # Read when the step is traced, on its first call.
      error, out = jitted(*args)
    error.throw()
    return out

  return checked_step


def _check_finite(name: str, first_bad: jax.Array, saved: int) -> None:
  """Raises if a step so far gave a non-finite loss or parameters (`first_bad >= 0`): before
  every save (so that a diverged state is never checkpointed, and so never resumed) and on
  logging steps."""
  bad = int(first_bad)
  if bad >= 0:
    raise FloatingPointError(
      f"{name}: the training loss or the parameters are not finite at step {bad} (NaN or "
      f"infinite); lower the learning rate. Nothing after step {saved} was saved."
    )


# ---------------------------------------------------------------------------------------------
# Placement across processes.


def _replicate(state, mesh: jax.sharding.Mesh | None):
  """The state on every device of the mesh (each process holds the same values), or as it is."""
  if mesh is None:
    return state
  return jax.device_put(state, NamedSharding(mesh, P()))


def _local(tree):
  """A replicated (or single-device) pytree as arrays on one device of this process."""
  return jax.tree.map(lambda x: x.addressable_data(0), tree)


def _train_share(
  config: config_lib.Config, mesh: jax.sharding.Mesh | None
) -> tuple[int, int] | None:
  """The columns `start:stop` of each global batch that this process's devices hold (None: all).

  `jax.make_array_from_process_local_data` takes, from each process, the rows of the global batch
  that its devices hold, in order; with the mesh of `_mesh` they are one contiguous slice.
  """
  if mesh is None or jax.process_count() == 1:
    return None
  held = NamedSharding(mesh, P("batch")).addressable_devices_indices_map((config.batch_size,))
  # The stub allows None for a device without a shard; every addressable device has one here.
  rows = sorted((index[0].start or 0, index[0].stop) for index in held.values())  # type: ignore[index]
  start, stop = rows[0][0], rows[-1][1]
  if any(a[1] != b[0] for a, b in zip(rows, rows[1:])):
    raise ValueError(
      f"train_and_evaluate: this process's devices hold the rows {rows} of the batch, which "
      "are not one contiguous slice; the mesh must order devices by process."
    )
  return start, stop


def _global_batch(mesh: jax.sharding.Mesh | None, local: np.ndarray, batch_size: int):
  """This process's slice of a batch, as the global array split over the mesh's devices."""
  if mesh is None:
    return jnp.asarray(local)
  return jax.make_array_from_process_local_data(
    NamedSharding(mesh, P("batch")), local, (batch_size, *local.shape[1:])
  )


def _is_primary() -> bool:
  """Whether this is the process that writes files and prints (process 0; the only one alone)."""
  return jax.process_index() == 0


class _NoWriter:
  """The metrics writer of processes other than 0: writes nothing."""

  def write(self, record: dict[str, Any]) -> None:
    del record


def _make_embed_fn(config: config_lib.Config, model: _Model):
  @jax.jit
  def embed(params, rest, images, step):
    outputs = nnx.merge(model.eval_graph, params, rest)(images, scale=_tanh_scale(config, step))
    return networks.HEADS[config.head].evaluated_as(outputs)

  return embed


def evaluate(
  config: config_lib.Config, embed_fn, state, test: jd.LabeledImages
) -> dict[str, float]:
  """Leave-one-out retrieval metrics of the test split (unseen classes) under the current state.

  In a job of several processes each embeds a contiguous share of the split (on one of its
  devices, from its copy of the replicated state) and `jaxrank.evaluate_retrieval` splits the
  evaluation over the devices of every process (`mesh=`): no process holds the whole split's
  embeddings, and every process returns the metrics of the whole split.
  """
  count, index = jax.process_count(), jax.process_index()
  share = (index * test.num_examples // count, (index + 1) * test.num_examples // count)
  params, rest, step = _local((state["params"], state["rest"], state["step"]))
  embeddings = [np.zeros((0, config.embedding_dim), np.float32)]
  labels = [np.zeros((0,), np.int32)]
  for batch in input_pipeline.eval_batches(config, test, share):
    e = np.asarray(embed_fn(params, rest, batch["image"], step))
    embeddings.append(e[batch["mask"]])
    labels.append(batch["label"][batch["mask"]])
  metrics = jaxrank.evaluate_retrieval(
    np.concatenate(embeddings),
    np.concatenate(labels),
    ks=config.eval_ks,
    similarity_fn=networks.HEADS[config.head].similarity_fn,
    mesh=_mesh(config) if count > 1 else None,
  )
  return cast(dict[str, float], metrics)  # Floats: the default reduce_fn.


# ---------------------------------------------------------------------------------------------
# Workdir and checkpoints.


def evaluate_raw_pixels(config: config_lib.Config) -> dict[str, float]:
  """Leave-one-out retrieval on the test split's pixels: the baseline of no learning at all.

  Each image as the network sees it at evaluation (`input_pipeline.eval_batches`), flattened,
  minus the mean image of the train split, compared by cosine similarity; the metrics of
  `evaluate`, and with `eval_seen_classes` the same on the train split ("seen/..."). Every
  process computes them alone (meant for small images: it holds a split's pixels in memory).
  """
  train_data, test_data = input_pipeline.load_data(config)

  def pixels(data: jd.LabeledImages) -> tuple[np.ndarray, np.ndarray]:
    rows, labels = [], []
    for batch in input_pipeline.eval_batches(config, data):
      mask = batch["mask"]
      rows.append(np.asarray(batch["image"][mask], np.float32).reshape(int(mask.sum()), -1))
      labels.append(batch["label"][mask])
    return np.concatenate(rows), np.concatenate(labels)

  train_pixels, train_labels = pixels(train_data)
  mean = train_pixels.mean(axis=0)
  test_pixels, test_labels = pixels(test_data)
  # Floats: the default reduce_fn.
  metrics = cast(
    dict[str, float],
    jaxrank.evaluate_retrieval(test_pixels - mean, test_labels, ks=config.eval_ks),
  )
  if config.eval_seen_classes:
    seen = cast(
      dict[str, float],
      jaxrank.evaluate_retrieval(train_pixels - mean, train_labels, ks=config.eval_ks),
    )
    metrics.update({f"seen/{k}": v for k, v in seen.items()})
  return metrics


def _check_workdir(config: config_lib.Config, workdir: str) -> None:
  """Raises ConfigError if the workdir holds a run of another configuration; writes nothing."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return
  with open(path) as f:
    stored = json.load(f)
  # A field added to Config after the run was written is missing there: that run had its default.
  stored = {**config_lib.to_json(config_lib.Config()), **stored}
  wanted = config_lib.to_json(config)
  if stored != wanted:
    changed = sorted(k for k in set(stored) | set(wanted) if stored.get(k) != wanted.get(k))
    raise config_lib.ConfigError(
      f"workdir {workdir!r} holds a run of another configuration (it differs in {changed}); "
      "use a new workdir, or the same configuration to resume that run."
    )


def _claim_workdir(config: config_lib.Config, workdir: str) -> None:
  """Writes the workdir's config.json (process 0), or checks that the one there is `config`'s."""
  _check_workdir(config, workdir)
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, "config.json")
  if _is_primary() and not os.path.exists(path):
    with open(path + ".tmp", "w") as f:
      json.dump(config_lib.to_json(config), f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def _checkpoint_manager(config: config_lib.Config, workdir: str) -> ocp.CheckpointManager:
  return ocp.CheckpointManager(
    os.path.abspath(os.path.join(workdir, "checkpoints")),
    options=ocp.CheckpointManagerOptions(max_to_keep=config.keep_checkpoints, create=True),
  )


class CheckpointError(RuntimeError):
  """A checkpoint that can be read but not restored into this run's state (the configuration or
  the code changed since it was saved), or a failure that is not the checkpoint's; nothing was
  moved or deleted."""


def _restore(manager: ocp.CheckpointManager, step: int, state=None):
  """The checkpoint of `step`: into the structure of `state`, or as saved when it is `None`."""
  item = ocp.args.StandardRestore() if state is None else ocp.args.StandardRestore(state)
  return manager.restore(step, args=ocp.args.Composite(state=item, data=ocp.args.JsonRestore()))


def _why_unreadable(manager: ocp.CheckpointManager, step: int) -> str | None:
  """Why the files of checkpoint `step` cannot be read (truncated, corrupt or missing files: its
  arrays read as saved, without this run's structure, fail twice), or `None` if they can."""
  reason = ""
  for _ in range(2):  # A second try, so that a passing I/O error does not condemn a checkpoint.
    try:
      _restore(manager, step)
      return None
    except Exception as e:  # pylint: disable=broad-exception-caught
      reason = " ".join(f"{type(e).__name__}: {e}".split())
  return reason if len(reason) <= 200 else reason[:200] + "..."


class _DropUnretrievedReadErrors(logging.Filter):
  """Drops asyncio's "Task/Future exception was never retrieved" records of TensorStore's failed
  reads: when one array of a checkpoint cannot be read, the other reads fail in tasks nobody
  awaits, and asyncio logs each when it is collected (dozens of tracebacks, some at exit), though
  the one reason that matters is logged with the checkpoint's name."""

  def filter(self, record: logging.LogRecord) -> bool:
    message = record.getMessage()
    unretrieved = message.startswith(
      ("Task exception was never retrieved", "Future exception was never retrieved")
    )
    return not (unretrieved and ("OCDBT" in message or "tensorstore" in message.lower()))


def _set_aside(manager: ocp.CheckpointManager, step: int, workdir: str, reason: str) -> None:
  """Moves the unreadable checkpoint `step` to `workdir/unreadable_checkpoints/<step>` (or
  `<step>.<k>` when an earlier one of that step is there: nothing is ever deleted), so that the
  run can save that step again."""
  path = os.path.join(manager.directory, str(step))
  aside = os.path.join(workdir, "unreadable_checkpoints", str(step))
  for k in itertools.count(1):
    if not os.path.exists(aside):
      break
    aside = os.path.join(workdir, "unreadable_checkpoints", f"{step}.{k}")
  logger.warning(
    "The checkpoint %s cannot be read (%s); moved to %s, trying the one before.",
    path,
    reason,
    aside,
  )
  if _is_primary():
    os.makedirs(os.path.dirname(aside), exist_ok=True)
    shutil.move(path, aside)
  if jax.process_count() > 1:  # Every process reloads once the checkpoint is moved.
    multihost_utils.sync_global_devices(f"jaxrank: set aside checkpoint {step}")
  manager.reload()


def _restore_latest(
  manager: ocp.CheckpointManager, state, workdir: str
) -> tuple[Any, tuple[int, int]]:
  """The newest readable checkpoint's state and data position, or `state` and `(0, 0)` if none.

  When the newest checkpoint does not restore, its files are read once more as saved (without
  this run's structure) to tell why:

  * they cannot be read (a truncated, corrupted or missing file): the checkpoint is moved out of
    the way (`_set_aside`, never deleted), with a warning that names it and says why, and the
    next newest is tried (TensorStore's noise about the failed read is dropped:
    `_quiet_closed_event_loop_errors`);
  * they can: the checkpoint is sound and the failure is not its own (the state's structure
    changed with the configuration or the code, or a bug), so nothing is moved and a
    `CheckpointError` says so, from the original exception. A passing failure (the restore
    succeeds when tried again) is no failure.
  """
  steps = sorted(manager.all_steps(), reverse=True)
  if steps:
    _quiet_closed_event_loop_errors()  # Before the first read: some come before it fails.
  for step in steps:
    try:
      restored = _restore(manager, step, state)
    except Exception as e:  # pylint: disable=broad-exception-caught
      reason = _why_unreadable(manager, step)
      if reason is not None:
        _set_aside(manager, step, workdir, reason)
        continue
      try:
        restored = _restore(manager, step, state)
      except Exception:  # pylint: disable=broad-exception-caught
        raise CheckpointError(
          f"The checkpoint {os.path.join(manager.directory, str(step))} can be read but not "
          f"restored into this run's state ({type(e).__name__}: {' '.join(str(e).split())[:300]}"
          "). Did the configuration or the code change since it was saved? Resume with the "
          "code that saved it, or train in a new workdir; the checkpoint is left as it is."
        ) from e
    return restored["state"], tuple(restored["data"]["position"])
  return state, (0, 0)


def _quiet_closed_event_loop_errors() -> None:
  """Drops the "RuntimeError: Event loop is closed" tracebacks of a failed orbax restore.

  When one array of a checkpoint cannot be read, orbax's restore fails and closes its asyncio
  event loop while TensorStore's other reads are still running; each of them then reports, as an
  unraisable exception, that it could not call back into the closed loop (dozens of tracebacks,
  some after the restore has returned). They say nothing about the checkpoint, so they are
  dropped; every other unraisable exception goes to the hook installed before. The reads that
  failed in tasks nobody awaits are dropped from asyncio's log too (`_DropUnretrievedReadErrors`).
  """
  previous = sys.unraisablehook
  if getattr(previous, "drops_closed_event_loop_errors", False):
    return
  logging.getLogger("asyncio").addFilter(_DropUnretrievedReadErrors())

  def hook(unraisable):
    value = unraisable.exc_value
    if isinstance(value, RuntimeError) and str(value) == "Event loop is closed":
      return
    previous(unraisable)

  hook.drops_closed_event_loop_errors = True  # type: ignore[attr-defined]  # A marker attribute.
  sys.unraisablehook = hook


def _save(manager: ocp.CheckpointManager, step: int, state, position: tuple[int, int]) -> None:
  manager.save(
    step,
    args=ocp.args.Composite(
      state=ocp.args.StandardSave(state),
      data=ocp.args.JsonSave({"position": list(position)}),
    ),
    force=True,
  )


# ---------------------------------------------------------------------------------------------
# The job.


class Interrupted(KeyboardInterrupt):
  """Ctrl-C (SIGINT) stopped training after a checkpoint of `step` was saved in `workdir`.

  A `KeyboardInterrupt`, so that code that does not know it still stops; `experiments.job.main`
  prints it as one line and exits with status 130.
  """

  def __init__(self, name: str, workdir: str, step: int):
    if step:
      message = (
        f"{name} interrupted: step {step} is saved in {os.path.join(workdir, 'checkpoints')}; "
        "rerun the same command to resume."
      )
    else:
      message = f"{name} interrupted before its first step; rerun the same command to start it."
    super().__init__(message)
    self.name, self.workdir, self.step = name, workdir, step


@contextlib.contextmanager
def _deferred_interrupt() -> Iterator[list[bool]]:
  """Within it, a first Ctrl-C only appends to the list it gives (checked between steps), so that
  the step in flight finishes and the state can be saved; a second one interrupts at once.

  Outside the main thread (where signal handlers cannot be set) and in a job of several processes
  (where saving is collective, and the processes would not agree on the step at which to save)
  Ctrl-C is left as it is.
  """
  requested: list[bool] = []
  if threading.current_thread() is not threading.main_thread() or jax.process_count() > 1:
    yield requested
    return

  def handler(signum, frame):
    del signum, frame
    if requested:
      raise KeyboardInterrupt
    requested.append(True)

  previous = signal.signal(signal.SIGINT, handler)
  try:
    yield requested
  finally:
    signal.signal(signal.SIGINT, previous)


def check_run(
  config: config_lib.Config, workdir: str
) -> tuple[jd.LabeledImages, jd.LabeledImages, input_pipeline.BatchesFn]:
  """Everything that can fail before a run writes anything: the config, the data, the workdir.

  `check.check_config`, then the data against the sampler (`input_pipeline.make_sampler`),
  then the workdir (one holding a run of another configuration is refused). Nothing is written.

  Returns:
    `(train, test, sampler)`: the splits and the training sampler.

  Raises:
    ConfigError: with a sentence that says what to change.
  """
  check.check_config(config)
  train_data, test_data = input_pipeline.load_data(config)
  sampler = input_pipeline.make_sampler(config, train_data)
  _check_workdir(config, workdir)
  return train_data, test_data, sampler


class _Loop(NamedTuple):
  """What the training loop of `train_and_evaluate` works with."""

  config: config_lib.Config
  name: str
  workdir: str
  manager: ocp.CheckpointManager
  mesh: jax.sharding.Mesh | None
  train_step: Callable[..., Any]
  schedule: optax.Schedule
  writer: Any
  progress: Any


def _train_loop(loop: _Loop, state, step: int, batches, interrupted: list[bool], run_eval):
  """Trains from `step` to `config.num_steps`, logging, saving and evaluating as the config says.

  Returns the state, its step and the last evaluation (`None` if none ran). A first Ctrl-C
  (`interrupted`) saves the state at the next step boundary and raises `Interrupted`.
  """
  config = loop.config
  metrics = None
  last_log, saved = (time.perf_counter(), step), step
  first_bad = _replicate(jnp.int32(-1), loop.mesh)
  while step < config.num_steps:
    if interrupted:
      if step > saved:
        _check_finite(loop.name, first_bad, saved)
        _save(loop.manager, step, state, batches.position)
        saved = step
      loop.manager.wait_until_finished()
      raise Interrupted(loop.name, loop.workdir, saved)
    batch = next(batches)
    state, loss, first_bad = loop.train_step(
      state,
      _global_batch(loop.mesh, batch["image"], config.batch_size),
      _global_batch(loop.mesh, batch["label"], config.batch_size),
      first_bad,
    )
    step += 1
    if step % config.log_every == 0 or step == config.num_steps:
      _check_finite(loop.name, first_bad, saved)
      last_log = _log_step(loop, step, float(loss), last_log)
    loop.progress.update(1)
    if step % config.checkpoint_every == 0 or step == config.num_steps:
      _check_finite(loop.name, first_bad, saved)
      _save(loop.manager, step, state, batches.position)
      saved = step
    if step % config.eval_every == 0 or step == config.num_steps:
      _check_finite(loop.name, first_bad, saved)
      metrics = run_eval(state, step)
  if interrupted:  # During the last steps: the run is saved and done; stop a sweep here.
    raise Interrupted(loop.name, loop.workdir, saved)
  return state, step, metrics


def _log_step(loop: _Loop, step: int, loss: float, last_log: tuple[float, int]):
  """Writes the loss, learning rate and speed of `step`; returns `(time, step)` of this log."""
  now = time.perf_counter()
  speed = (step - last_log[1]) * loop.config.batch_size / (now - last_log[0])
  lr = float(loop.schedule(step - 1))
  loop.writer.write({"step": step, "loss": loss, "learning_rate": lr, "images_per_second": speed})
  loop.progress.set_postfix(loss=f"{loss:.4f}", img_per_s=f"{speed:.0f}")
  return now, step


def train_and_evaluate(
  config: config_lib.Config, workdir: str, *, name: str | None = None
) -> dict[str, float]:
  """Trains (or resumes training) as `config` says, evaluating periodically; returns final metrics.

  Like the entry points, it first hides the GPUs from TensorFlow
  (`input_pipeline.hide_gpus_from_tensorflow`), so that tf.data leaves their memory to JAX when
  the job is called from Python rather than from `experiments.job.main`. Everything that can fail
  before training (`check_run`) fails before anything is written to `workdir`.

  Args:
    config: the run's `Config`.
    workdir: directory for the checkpoints, metrics, plot and config; a workdir that already holds
      checkpoints of the same config resumes from the newest readable one (logging "resuming from
      step N").
    name: the run's name on the progress bar, in the plot's title and in messages (default: the
      workdir's last component).

  Returns:
    The final evaluation on the test split: `recall@k` for `config.eval_ks`, `map@r`, `map`,
    `tie_aware_map` (floats), and `step`.

  Raises:
    ConfigError: a configuration that cannot run, or a workdir that holds a run of another
      configuration, before anything is written.
    Interrupted: Ctrl-C (SIGINT) during training, after the state was saved.
  """
  input_pipeline.hide_gpus_from_tensorflow()
  name = name or os.path.basename(os.path.normpath(workdir))
  train_data, test_data, sampler = check_run(config, workdir)
  _claim_workdir(config, workdir)

  tx = make_optimizer(config)
  schedule = learning_rate_schedule(config)
  mesh = _mesh(config)
  model, state = _init_state(config, tx)
  state = _replicate(state, mesh)
  train_step = _make_train_step(config, model, tx, mesh)
  embed_fn = _make_embed_fn(config, model)
  share = _train_share(config, mesh)
  primary = _is_primary()

  def run_eval(state, step):
    metrics = evaluate(config, embed_fn, state, test_data)
    if config.eval_seen_classes:
      seen = evaluate(config, embed_fn, state, train_data)
      metrics.update({f"seen/{k}": v for k, v in seen.items()})
    writer.write({"step": step, **metrics})
    return metrics

  manager = _checkpoint_manager(config, workdir)
  progress = None
  try:
    # From here on, a first Ctrl-C stops the run at the next step boundary, after saving.
    with _deferred_interrupt() as interrupted:
      state, position = _restore_latest(manager, state, workdir)
      step = int(state["step"])
      if step and primary:
        logger.info("%s: resuming from step %d (%s).", name, step, workdir)
      writer = reporting.MetricsWriter(workdir, step) if primary else _NoWriter()
      progress = _progress_bar(config, step, name, show=primary)
      metrics = run_eval(state, step) if step == 0 else None
      batches = input_pipeline.TrainBatches(config, train_data, sampler, position, share)
      loop = _Loop(config, name, workdir, manager, mesh, train_step, schedule, writer, progress)
      state, step, last = _train_loop(loop, state, step, batches, interrupted, run_eval)
      metrics = metrics if last is None else last
  finally:
    if progress is not None:
      progress.close()
    manager.wait_until_finished()
    manager.close()
  if metrics is None:  # Resumed a finished run: its final evaluation is in the metrics file.
    done = [r for r in reporting.read_metrics(workdir) if "map@r" in r and r["step"] == step]
    metrics = done[-1] if done else run_eval(state, step)
  what = f"{config.loss} on {config.dataset}"
  if not config.num_steps:  # The untrained baseline: no loss panel either.
    what = f"{config.dataset}, not trained"
  if primary:
    reporting.plot_curves(workdir, title=what if name == config.loss else f"{name}: {what}")
  return {**metrics, "step": step}


def restore_model(
  config: config_lib.Config, workdir: str, step: int | None = None
) -> models.EmbeddingModel:
  """The network of a run's checkpoint (the latest unless `step` is given), in inference mode.

  A hashing model returns the relaxed codes `tanh(alpha f)` when called with `scale=alpha`; binarise
  them with `jaxrank.hashing.binarize` as the evaluation does.

  Raises:
    FileNotFoundError: the workdir holds no checkpoint (of that step).
  """
  check.check_config(config)
  tx = make_optimizer(config)
  graphs, state = _init_state(config, tx)
  manager = _checkpoint_manager(config, workdir)
  try:
    step = manager.latest_step() if step is None else step
    if step is None or step not in manager.all_steps():
      raise FileNotFoundError(
        f"restore_model: {workdir!r} holds no checkpoint"
        f"{'' if step is None else f' of step {step}'}; it has steps {list(manager.all_steps())}."
      )
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(state)))
  finally:
    manager.close()
  state = restored["state"]
  return nnx.merge(graphs.eval_graph, state["params"], state["rest"])


def _progress_bar(config: config_lib.Config, step: int, name: str, show: bool = True):
  from tqdm import auto as tqdm  # pylint: disable=g-import-not-at-top

  return tqdm.tqdm(
    total=config.num_steps,
    initial=step,
    desc=name,
    disable=not (config.progress_bar and show),
    unit="step",
    dynamic_ncols=True,
    leave=False,
  )
