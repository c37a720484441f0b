"""Two options of the job that every row of the comparison can take (issue 66).

* `freeze_backbone_steps`: Kim et al. 2020's warm-up, the backbone's parameters unchanged for the
  first N steps while the head (and a proxy loss's proxies) train, then trained; a run resumed
  from a checkpoint within the frozen steps ends where an uninterrupted one does.
* `head="centred_embedding"`: the L2-normalised embedding of batch-centred features (a BatchNorm
  without scale or offset first), whose untrained embeddings are spread rather than in a cone.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from experiments.job import check
from experiments.job import config as config_lib
from experiments.job import main as main_lib
from experiments.job import networks
from experiments.job import optimizer as optimizer_lib
from experiments.job import step as step_lib
from experiments.job import train

ROOT = pathlib.Path(__file__).resolve().parent.parent
TINY = main_lib.load_config_module(
  str(ROOT / "experiments" / "job" / "configs" / "tiny.py")
).get_config()


def _parts(params):
  """The backbone's and the head's leaves, as numpy arrays."""
  return [
    [np.array(leaf, copy=True) for leaf in jax.tree.leaves(params[part])]
    for part in ("backbone", "head")
  ]


def _changed(a, b) -> bool:
  return any(not np.array_equal(x, y) for x, y in zip(a, b))


def test_the_backbone_takes_no_step_for_the_frozen_steps_then_trains():
  config = dataclasses.replace(TINY, freeze_backbone_steps=2, warmup_steps=0)
  tx = optimizer_lib.make_optimizer(config)
  model, state = step_lib.init_state(config, tx)
  step = step_lib.make_train_step(config, model, tx, None)
  rng = np.random.default_rng(0)
  images = jnp.asarray(rng.uniform(size=(config.batch_size, 8, 8, 1)), jnp.float32)
  labels = jnp.repeat(jnp.arange(config.classes_per_batch), config.samples_per_class)
  history = [_parts(state["params"])]
  first_bad = jnp.int32(-1)
  for _ in range(4):
    state, _, first_bad = step(state, images, labels, first_bad)
    history.append(_parts(state["params"]))
  backbones, heads = [h[0] for h in history], [h[1] for h in history]
  assert not _changed(backbones[0], backbones[1]) and not _changed(backbones[0], backbones[2])
  assert _changed(backbones[2], backbones[3]) and _changed(backbones[3], backbones[4])
  assert all(_changed(heads[i], heads[i + 1]) for i in range(4))  # The head trains throughout.
  assert int(state["opt_state"].inner_states["backbone"].inner_state.seen) == 2


def test_after_the_frozen_steps_the_backbone_follows_the_runs_schedule():
  """The backbone's first step is AdamW's first (`-lr sign(g)` without weight decay) at the
  learning rate of the run's step, not at the schedule's start."""
  config = dataclasses.replace(TINY, freeze_backbone_steps=3, warmup_steps=2, weight_decay=0.0)
  tx = optimizer_lib.make_optimizer(config)
  _, state = step_lib.init_state(config, tx)
  params = state["params"]
  grads = jax.tree.map(jnp.ones_like, params)
  opt_state = tx.init(params)
  for _ in range(3):
    updates, opt_state = tx.update(grads, opt_state, params)
    assert all(not np.any(leaf) for leaf in jax.tree.leaves(updates["backbone"]))
  updates, _ = tx.update(grads, opt_state, params)
  rate = float(optimizer_lib.learning_rate_schedule(config)(3))
  for leaf in jax.tree.leaves(updates["backbone"]):
    np.testing.assert_allclose(leaf, -rate, rtol=1e-4)


def test_a_run_resumed_within_the_frozen_steps_ends_where_an_uninterrupted_one_does(tmp_path):
  config = dataclasses.replace(
    TINY, freeze_backbone_steps=3, num_steps=5, checkpoint_every=1, keep_checkpoints=10
  )
  whole = tmp_path / "whole"
  train.train_and_evaluate(config, str(whole))
  # The same run, stopped after its checkpoint of step 2 (within the frozen steps).
  resumed = tmp_path / "resumed"
  shutil.copytree(whole, resumed)
  for step in (3, 4, 5):
    shutil.rmtree(resumed / "checkpoints" / str(step))
  train.train_and_evaluate(config, str(resumed))
  restored = [train.restore_model(config, str(d), step=s) for d in (whole, resumed) for s in (2, 5)]
  a2, a5, b2, b5 = (_parts(nnx.state(m, nnx.Param)) for m in restored)
  assert not _changed(a2[0], b2[0]) and not _changed(a5[0], b5[0]) and not _changed(a5[1], b5[1])
  initial = train.restore_model(config, str(whole), step=1)
  assert not _changed(_parts(nnx.state(initial, nnx.Param))[0], a2[0])  # Frozen until step 3.
  assert _changed(a2[0], a5[0])


def test_freeze_backbone_steps_is_checked_and_zero_is_todays_optimiser():
  with pytest.raises(config_lib.ConfigError, match="freeze_backbone_steps"):
    check.check_config(dataclasses.replace(TINY, freeze_backbone_steps=-1))
  assert config_lib.Config().freeze_backbone_steps == 0
  tx = optimizer_lib.make_optimizer(TINY)
  _, state = step_lib.init_state(TINY, tx)
  # No FrozenState: a checkpoint of a run before the option restores into today's state.
  assert not isinstance(
    state["opt_state"].inner_states["backbone"].inner_state, optimizer_lib.FrozenState
  )


def test_the_centred_embedding_head_spreads_the_untrained_embeddings():
  config = dataclasses.replace(TINY, head="centred_embedding", embedding_dim=16)
  check.check_config(config)
  rng = np.random.default_rng(0)
  # Features with a large common component, as averages of relu outputs have.
  features = jnp.asarray(5.0 + rng.uniform(size=(64, 32)), jnp.float32)
  heads = {
    name: networks.HEADS[name].build(32, 16, rngs=nnx.Rngs(0))
    for name in ("embedding", "centred_embedding")
  }
  spread = {}
  for name, head in heads.items():
    embeddings = np.asarray(head(features))
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, rtol=1e-5)
    spread[name] = float(np.linalg.norm(embeddings.mean(axis=0)))
  assert spread["embedding"] > 0.9 and spread["centred_embedding"] < 0.5
  # Its BatchNorm has no learned parameter: the head's parameters are its linear layer's.
  paths, _ = jax.tree_util.tree_flatten_with_path(nnx.state(heads["centred_embedding"], nnx.Param))
  assert {path[0].key for path, _ in paths} == {"embedding"}


def test_the_centred_embedding_head_trains_and_refuses_a_chunked_gradient(tmp_path):
  config = dataclasses.replace(TINY, head="centred_embedding", num_steps=2, eval_every=2)
  metrics = train.train_and_evaluate(config, str(tmp_path / "run"))
  assert 0.0 <= metrics["recall@1"] <= 1.0
  with pytest.raises(config_lib.ConfigError, match="centred_embedding"):
    check.check_config(dataclasses.replace(config, chunk_size=4))
