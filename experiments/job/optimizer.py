"""The training job's optimiser: AdamW on a learning-rate schedule, for `step.make_train_step`.

`learning_rate_schedule` (a linear warm-up to `config.learning_rate`, then cosine decay, which
`train` also logs as `learning_rate`) and `make_optimizer` (AdamW on it, the embedding layer's
learning rate `head_lr_multiplier` times larger, and the parameters a loss declares of its own,
`losses.OWN_PARAMETERS` (proxies, class weights), at the multiplier that declaration names; the
backbone frozen for the first `freeze_backbone_steps`, `frozen_for`). It
imports only `config` and `losses` of the job.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from experiments.job import config as config_lib
from experiments.job import losses


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


def _network_groups(params):
  """The network's parameters labelled "head" (the embedding layer) or "backbone"."""
  return jax.tree_util.tree_map_with_path(
    lambda path, _: "head" if path[0].key == "head" else "backbone", params
  )


class FrozenState(NamedTuple):
  """The state of `frozen_for`: the updates seen (counting up to the frozen steps), `tx`'s own."""

  seen: jax.Array
  inner: optax.OptState


def frozen_for(steps: int, tx: optax.GradientTransformation) -> optax.GradientTransformation:
  """`tx`, except that its first `steps` updates are zeros and leave `tx`'s state as it was.

  Kim et al. 2020's warm-up of Proxy-Anchor (their code: the backbone's parameters take no step
  for the first epoch, while the embedding layer and the proxies train): the parameters that
  `tx` updates do not move, not even by weight decay, and `tx`'s moments and step count start at
  the first step after, as PyTorch's Adam starts a parameter's at its first gradient. The count
  is in the optimiser's state, so a run resumed from a checkpoint keeps it. `steps=0`: `tx`.
  """
  if not steps:
    return tx

  def init(params):
    return FrozenState(seen=jnp.zeros([], jnp.int32), inner=tx.init(params))

  def update(updates, state, params=None):
    def frozen():
      return jax.tree.map(jnp.zeros_like, updates), state.inner

    def live():
      return tx.update(updates, state.inner, params)

    updates, inner = jax.lax.cond(state.seen < steps, frozen, live)
    return updates, FrozenState(seen=jnp.minimum(state.seen + 1, steps), inner=inner)

  return optax.GradientTransformation(init, update)


def _backbone(config: config_lib.Config, schedule: optax.Schedule) -> optax.GradientTransformation:
  """The backbone's AdamW: frozen for `config.freeze_backbone_steps` (`frozen_for`), then on the
  schedule at the run's step (its own count starts when it is unfrozen)."""
  steps = config.freeze_backbone_steps
  rate = schedule if not steps else (lambda count: schedule(count + steps))
  return frozen_for(steps, optax.adamw(rate, weight_decay=config.weight_decay))


def make_optimizer(config: config_lib.Config) -> optax.GradientTransformation:
  """AdamW with the schedule; the head's learning rate is `head_lr_multiplier` times larger.

  It trains the network's parameters (`state["params"]` of `step.init_state`) or, for a loss
  with parameters of its own (`losses.OWN_PARAMETERS`), `{"network": params, name: own}` (`name`
  its declaration's, "proxies" say), whose learning rate is the config field the declaration
  names times the schedule's (`proxy_lr_multiplier`: Kim et al. 2020's code trains the proxies
  100 times faster, with the same weight decay). One `optax.multi_transform`, a group per
  learning rate; the backbone's group takes no step for the first `freeze_backbone_steps`
  (`frozen_for`), the others from the first.
  """
  schedule = learning_rate_schedule(config)
  groups = {
    "backbone": _backbone(config, schedule),
    "head": optax.adamw(
      lambda step: config.head_lr_multiplier * schedule(step), weight_decay=config.weight_decay
    ),
  }
  own = losses.own_parameters(config.loss)
  if own is None:
    return optax.multi_transform(groups, _network_groups)
  multiplier = getattr(config, own.lr_multiplier)
  groups[own.name] = optax.adamw(
    lambda step: multiplier * schedule(step), weight_decay=config.weight_decay
  )
  return optax.multi_transform(
    groups,
    lambda trained: {"network": _network_groups(trained["network"]), own.name: own.name},
  )
