"""One training step of the job and what builds it, for `train.train_and_evaluate`.

The batch loss (`jaxrank.batch_retrieval` with the head's similarity, then the configured loss,
blocked, chunked or sharded on request, with the sampler's `relevant_bound` for the losses that take
one; a loss with parameters of its own, `losses.OWN_PARAMETERS`, on the embeddings and those
parameters instead); `init_state` (the model's graph definitions and the training state, a pytree
of arrays saved and restored as a whole, with such a loss's parameters beside the network's);
`make_train_step` (the jitted step, which donates the state it is given and also records the first
step whose loss or parameters are not finite, for `check_finite`). The step takes the optimiser of
`optimizer.make_optimizer` and the mesh of `placement.mesh`; it imports neither, nor anything of
`train` or `checkpoints`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.experimental import checkify
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jaxrank
from experiments.job import config as config_lib
from experiments.job import datasets
from experiments.job import losses
from experiments.job import networks
from experiments.job import samplers

# ---------------------------------------------------------------------------------------------
# The loss.


def tanh_scale(config: config_lib.Config, step: jax.Array) -> jax.Array | None:
  """The scale `alpha` of the relaxed codes `tanh(alpha f)` at `step`; None for other heads."""
  if not networks.HEADS[config.head].tanh_scaled:
    return None
  return jaxrank.hashing.tanh_scale(
    step, initial=config.tanh_initial, growth=config.tanh_growth, every=config.tanh_every
  )


def relevant_bound(config: config_lib.Config) -> int | None:
  """The most relevant items a list of a training batch can hold, when the sampler fixes it.

  A sampler of whole classes (`SamplerSpec.whole_classes`) gives each class of a batch exactly
  `K = samples_per_class` images, so a query's list holds `K - 1` relevant items (`K` with
  `include_self`), plus at most `K` for each of the `memory_batches` past batches in the gallery.
  Other samplers fix nothing: None. Passed as `max_relevant` to the losses that take it, which then
  run a loop or a count of that many items instead of a sort or a data-dependent loop (a list
  beyond the bound would give NaN: the sampler rules it out).
  """
  if not samplers.SAMPLERS[config.sampler].whole_classes:
    return None
  k = config.samples_per_class
  return (k if config.include_self else k - 1) + config.memory_batches * k


def _own_parameters_loss_fn(
  config: config_lib.Config, mesh: jax.sharding.Mesh | None
) -> Callable[[jax.Array, Any], jax.Array]:
  """`fn(embeddings [B, D], (labels [B], None, own [C, D])) -> scalar`: a loss on the loss's own
  parameters (`losses.OWN_PARAMETERS`: proxies, class weights).

  The labels are the training classes' indices (`datasets.class_indices`), the rows of the
  parameters. On a mesh each device takes its slice of the batch against every row (replicated),
  and `jaxrank.sharded_mean` makes the loss the whole batch's, as `jaxrank.sharded_loss` does
  for the lists of the other losses.
  """
  loss_fn = losses.get_loss(config.loss, config.loss_kwargs)
  if mesh is None:
    return lambda embeddings, targets: loss_fn(embeddings, targets[0], targets[2])
  local = lambda e, y, p: loss_fn(e, y, p, reduce_fn=jaxrank.sharded_mean("batch"))
  sharded = jax.shard_map(local, mesh=mesh, in_specs=(P("batch"), P("batch"), P()), out_specs=P())
  return lambda embeddings, targets: sharded(embeddings, targets[0], targets[2])


def _batch_loss_fn(
  config: config_lib.Config, mesh: jax.sharding.Mesh | None
) -> Callable[[jax.Array, Any], jax.Array]:
  """`fn(embeddings [B, D], (labels [B], memory or None, own or None)) -> scalar`: retrieval, then
  the loss; a loss with parameters of its own compares the embeddings with them instead
  (`_own_parameters_loss_fn`).

  A loss that takes `max_relevant` gets the sampler's bound (`relevant_bound`) unless
  `config.loss_kwargs` sets one. With `loss_block_size`, the lists are scored and the loss taken
  that many queries at a time (`jaxrank.blocked_loss`, or `sharded_loss(block_size=)`).
  """
  if losses.own_parameters(config.loss) is not None:
    return _own_parameters_loss_fn(config, mesh)
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
    labels, memory, _ = targets
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
class Model:
  """The model split for pure functions: graph definitions for training and inference."""

  train_graph: Any
  eval_graph: Any


def init_state(
  config: config_lib.Config, tx: optax.GradientTransformation, num_classes: int | None = None
):
  """The model's graph definitions and the initial training state (a pytree of arrays).

  For a loss with parameters of its own (`losses.OWN_PARAMETERS[config.loss]`, its declaration)
  the state also holds them under the declaration's name (`proxies [C, D]`, `class_weights [C,
  D]`), one row per training class (`C = num_classes`, required then) in the embedding dimension,
  started as the declaration's `init` says, and the optimiser trains them with the network's
  parameters (`trained`).
  """
  in_channels = datasets.DATASETS[config.dataset].in_channels
  model = networks.make_model(config, in_channels, nnx.Rngs(config.seed))
  model.eval()
  # nnx.split's overloads return a variadic tuple, which mypy cannot unpack into three names.
  eval_graph, params, rest = nnx.split(model, nnx.Param, ...)  # type: ignore[misc]
  model.train()
  if config.freeze_batchnorm:
    model.backbone.eval()
  train_graph, _, _ = nnx.split(model, nnx.Param, ...)  # type: ignore[misc]
  own = _init_own_parameters(config, num_classes)
  opt_state = tx.init(trained(params, own))
  state = {"params": params, "rest": rest, "opt_state": opt_state, "step": jnp.int32(0), **own}
  if config.memory_batches:
    state["memory"] = jaxrank.memory.init(
      config.memory_batches * config.batch_size, config.embedding_dim
    )
  return Model(train_graph, eval_graph), state


def _init_own_parameters(config: config_lib.Config, num_classes: int | None) -> dict[str, Any]:
  """`{name: [C, D]}`, the loss's own parameters as its declaration starts them (`{}` for a loss
  without), from the config's seed (a key split from it, never one of the network's: the network
  starts as in any run)."""
  own = losses.own_parameters(config.loss)
  if own is None:
    return {}
  if num_classes is None:
    raise ValueError(
      f"init_state: loss={config.loss!r} trains {own.name} with one row per training class; give "
      "num_classes, the number of classes of the training split."
    )
  key = jax.random.split(jax.random.key(config.seed))[1]
  rows = own.init(key, num_classes, config.embedding_dim)
  return {own.name: jnp.asarray(rows, jnp.float32)}


def own_parameters(config: config_lib.Config, state: dict[str, Any]) -> dict[str, Any]:
  """`{name: [C, D]}`: the state's entry of the loss's own parameters, `{}` for a loss without."""
  own = losses.own_parameters(config.loss)
  return {} if own is None else {own.name: state[own.name]}


def trained(params, own: dict[str, Any]):
  """What the optimiser trains (`optimizer.make_optimizer`): the network's parameters, or
  `{"network": params, **own}` for a loss with parameters of its own (`own`, by their name)."""
  return {"network": params, **own} if own else params


def _as_state(new_trained, names: tuple[str, ...]) -> dict[str, Any]:
  """The state's entries of the trained parameters: `params`, and the loss's own (`names`)."""
  if not names:
    return {"params": new_trained}
  return {"params": new_trained["network"], **{n: new_trained[n] for n in names}}


def make_train_step(
  config: config_lib.Config,
  model: Model,
  tx: optax.GradientTransformation,
  mesh: jax.sharding.Mesh | None,
):
  """The jitted training step `step(state, images, labels, first_bad) -> (state, loss, first_bad)`.

  One optimiser step on the configured loss of the batch's embeddings (the network in training mode,
  at the tanh scale of `state["step"]` for a hashing head; chunked with `chunk_size`), the memory
  pushed when there is one; a loss's own parameters (`state["proxies"]`, say) are trained by the
  same step, at their own learning rate. `state` is donated: its buffers hold the new state
  afterwards, and the caller must use only the state returned (keep a copy,
  `jax.tree.map(jnp.copy, state)`, to use the old one again). With `config.half_precision` the
  network computes in bfloat16; the embeddings, the loss, the gradients and the state are float32
  either way.

  Args:
    config: the run's configuration.
    model: the graph definitions of `init_state`.
    tx: the optimiser of `optimizer.make_optimizer`.
    mesh: the mesh of `placement.mesh(config)`, or None on one device.

  Returns:
    The step: `images [B, H, W, C]` float32, `labels [B]` int, `first_bad` an int32 scalar (-1
    until a step's loss or parameters are not finite, then that step).
  """
  batch_loss = _batch_loss_fn(config, mesh)

  def embed(params, rest, images, scale):
    # Fresh variables (copy=True): a BatchNorm in training mode updates its statistics inside
    # value_and_grad, which NNX refuses for variables made at the outer (jit) level.
    net = nnx.merge(model.train_graph, params, rest, copy=True)
    embeddings = net(images, scale=scale)
    return embeddings, nnx.state(net, nnx.Not(nnx.Param))

  def step_fn(state, images, labels, first_bad):
    scale = tanh_scale(config, state["step"])
    memory, own = state.get("memory"), own_parameters(config, state)
    if config.chunk_size is None:

      def objective(params, own):
        embeddings, rest = embed(params, state["rest"], images, scale)
        targets = (labels, memory, next(iter(own.values()), None))
        return batch_loss(embeddings, targets), (embeddings, rest)

      (loss, (embeddings, rest)), grads = jax.value_and_grad(
        objective, argnums=(0, 1), has_aux=True
      )(state["params"], own)
    else:  # Never with a loss's own parameters (check.py): the chunked gradient misses them.
      embed_params = lambda params, x: embed(params, state["rest"], x, scale)[0]
      loss, network_grads = jaxrank.chunked_value_and_grad(
        embed_params, batch_loss, chunk_size=config.chunk_size
      )(state["params"], images, (labels, memory, None))
      grads, embeddings, rest = (network_grads, {}), None, state["rest"]
    params = trained(state["params"], own)
    updates, opt_state = tx.update(trained(*grads), state["opt_state"], params)
    new = _as_state(optax.apply_updates(params, updates), tuple(own))
    new.update(rest=rest, opt_state=opt_state, step=state["step"] + 1)
    if memory is not None:
      new["memory"] = jaxrank.memory.push(memory, embeddings, labels)
    # The first step whose loss or updated parameters (the loss's own too) are not finite (-1:
    # none yet), checked here on every step at the cost of one reduction, read on the host only
    # before saving and on logging steps (`check_finite`).
    finite = jnp.isfinite(loss)
    for leaf in jax.tree.leaves((new["params"], [new[n] for n in own])):
      finite &= jnp.all(jnp.isfinite(leaf))
    first_bad = jnp.where((first_bad < 0) & ~finite, new["step"], first_bad)
    return new, loss, first_bad

  if config.check_traced_inputs:
    step_fn = checkify.checkify(step_fn, errors=checkify.user_checks)
  jitted = _jit(step_fn, mesh)
  if not config.check_traced_inputs:
    return jitted

  def checked_step(*args):
    with jaxrank.traced_checks():  # Read when the step is traced, on its first call.
      error, out = jitted(*args)
    error.throw()
    return out

  return checked_step


def _jit(step_fn, mesh: jax.sharding.Mesh | None):
  """`step_fn` jitted with its state (the first argument) donated; on a mesh, the state
  replicated and the batch split (the state stays replicated after a step).

  Donated, the state's buffers (parameters, optimiser moments, statistics, memory) receive the
  new state, and the caller must not use the old one again. An asynchronous checkpoint of it is
  safe: orbax copies every array to the host before `save` returns (its default, with no limit
  on the bytes in flight from the device) and only writes the files in the background
  (`tests/test_train.py`: a checkpoint saved before donating steps restores the saved values).
  """
  if mesh is None:
    return jax.jit(step_fn, donate_argnums=0)
  replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
  return jax.jit(
    step_fn,
    in_shardings=(replicated, split, split, replicated),
    out_shardings=replicated,
    donate_argnums=0,
  )


def check_finite(name: str, first_bad: jax.Array, saved: int) -> None:
  """Raises if a step so far gave a non-finite loss or parameters (`first_bad >= 0`): before
  every save (so that a diverged state is never checkpointed, and so never resumed) and on
  logging steps."""
  bad = int(first_bad)
  if bad >= 0:
    raise FloatingPointError(
      f"{name}: the training loss or the parameters are not finite at step {bad} (NaN or "
      f"infinite); lower the learning rate. Nothing after step {saved} was saved."
    )
