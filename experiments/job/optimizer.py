"""The training job's optimiser: AdamW on a learning-rate schedule, for `step.make_train_step`.

`learning_rate_schedule` (a linear warm-up to `config.learning_rate`, then cosine decay, which
`train` also logs as `learning_rate`) and `make_optimizer` (AdamW on it, the embedding layer's
learning rate `head_lr_multiplier` times larger, and the parameters a loss declares of its own,
`losses.OWN_PARAMETERS` (proxies, class weights), at the multiplier that declaration names). It
imports only `config` and `losses` of the job.
"""

from __future__ import annotations

import jax
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


def make_optimizer(config: config_lib.Config) -> optax.GradientTransformation:
  """AdamW with the schedule; the head's learning rate is `head_lr_multiplier` times larger.

  It trains the network's parameters (`state["params"]` of `step.init_state`) or, for a loss
  with parameters of its own (`losses.OWN_PARAMETERS`), `{"network": params, name: own}` (`name`
  its declaration's, "proxies" say), whose learning rate is the config field the declaration
  names times the schedule's (`proxy_lr_multiplier`: Kim et al. 2020's code trains the proxies
  100 times faster, with the same weight decay). One `optax.multi_transform`, a group per
  learning rate.
  """
  schedule = learning_rate_schedule(config)
  groups = {
    "backbone": optax.adamw(schedule, weight_decay=config.weight_decay),
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
