"""The training job with a loss of parameters of its own (`losses.OWN_PARAMETERS`): a proxy loss
(issue 60), one learned proxy per training class, or a classification loss (issue 66), one row of
class weights per training class, trained beside the network at the multiplier their declaration
names (`proxy_lr_multiplier`, `class_weight_lr_multiplier`) times its learning rate, checkpointed
with the state. Tiny configs, as in tests/test_train.py."""

import dataclasses
import math
import os
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank
import jaxrank.data as jd
from experiments.job import checkpoints
from experiments.job import config as config_lib
from experiments.job import datasets
from experiments.job import losses
from experiments.job import main as main_lib
from experiments.job import optimizer as optimizer_lib
from experiments.job import step as step_lib
from experiments.job import train

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = main_lib.load_config_module(
  str(ROOT / "experiments" / "job" / "configs" / "tiny.py")
).get_config()
PROXY_LOSSES = ("proxy_nca", "proxy_nca_plus_plus", "proxy_anchor")
CLASSIFICATION_LOSSES = ("normalized_softmax", "arcface", "cosface")


def _initial_state(config: config_lib.Config, num_classes: int = 5):
  return step_lib.init_state(config, optimizer_lib.make_optimizer(config), num_classes)[1]


def _saved_state(config: config_lib.Config, workdir: pathlib.Path):
  """The newest checkpoint's state, restored into a fresh state of the config."""
  manager = checkpoints.checkpoint_manager(config, str(workdir))
  try:
    state, _ = checkpoints.restore_latest(manager, _initial_state(config), str(workdir))
  finally:
    manager.close()
  return state


def test_the_losses_with_parameters_of_their_own_and_how_they_start():
  """The six names are jaxrank's proxy and classification losses; the proxies start as the
  authors' code starts them: N(0, 1/64) for Proxy-NCA and ProxyNCA++ (Teh et al.), N(0, 2/C) for
  Proxy-Anchor (Kaiming normal, fan-out C: Kim et al.); the class weights at N(0, 1), as
  pytorch-metric-learning's `W`. Each refuses the options of the in-batch lists."""
  assert list(losses.OWN_PARAMETERS) == [*PROXY_LOSSES, *CLASSIFICATION_LOSSES]
  assert losses.LOSSES["proxy_nca"] is jaxrank.proxy_nca_loss
  assert losses.LOSSES["proxy_nca_plus_plus"] is jaxrank.proxy_nca_plus_plus_loss
  assert losses.LOSSES["proxy_anchor"] is jaxrank.proxy_anchor_loss
  assert losses.LOSSES["normalized_softmax"] is jaxrank.normalized_softmax_loss
  assert losses.LOSSES["arcface"] is jaxrank.arcface_loss
  assert losses.LOSSES["cosface"] is jaxrank.cosface_loss
  assert losses.own_parameters("fastap") is None
  key = jax.random.key(0)
  stds = {"proxy_nca": 1 / 8, "proxy_nca_plus_plus": 1 / 8, "proxy_anchor": math.sqrt(2 / 100)}
  stds.update(dict.fromkeys(CLASSIFICATION_LOSSES, 1.0))
  for name, std in stds.items():
    own = losses.OWN_PARAMETERS[name]
    rows = own.init(key, 100, 200)
    assert rows.shape == (100, 200) and np.std(rows) == pytest.approx(std, rel=0.02), name
    assert (own.name, own.lr_multiplier) == (
      ("proxies", "proxy_lr_multiplier")
      if name in PROXY_LOSSES
      else ("class_weights", "class_weight_lr_multiplier")
    )
    assert set(own.refuses) == {"chunk_size", "loss_block_size", "memory_batches", "include_self"}


def test_the_training_labels_are_class_indices():
  """The classes a run trains on are numbered 0..C-1 in their labels' order, once, on the host:
  the digits' 0-4 as they are, the classes a validation split keeps (not 0..C-1) renumbered;
  `load_data` keeps the data set's own labels, and the held-out classes keep theirs."""
  data = jd.LabeledImages(np.zeros((5, 2)), np.array([7, 3, 7, 10, 3]))
  np.testing.assert_array_equal(datasets.class_indices(data).labels, [1, 0, 1, 2, 0])
  train_data, _ = datasets.training_data(TINY)
  np.testing.assert_array_equal(train_data.labels, jd.load_digits("train").labels)
  config = dataclasses.replace(TINY, validation_fraction=0.4)
  (kept, held), (numbered, held_again) = datasets.load_data(config), datasets.training_data(config)
  assert kept.num_classes == numbered.num_classes == 3 and held.num_classes == 2
  assert set(kept.labels.tolist()) != {0, 1, 2}  # This split keeps a class above 2.
  np.testing.assert_array_equal(numbered.labels, np.unique(kept.labels, return_inverse=True)[1])
  np.testing.assert_array_equal(held_again.labels, held.labels)


def _check_metrics(metrics, step):
  assert metrics["step"] == step
  for key in ("recall@1", "map@r", "map", "tie_aware_map"):
    assert 0.0 <= metrics[key] <= 1.0, key


# ProxyNCA++ and ArcFace train in test_a_resumed_run_continues_with_the_same_parameters.
@pytest.mark.parametrize("name", ["proxy_nca", "proxy_anchor", "normalized_softmax", "cosface"])
def test_a_run_with_a_loss_of_its_own_parameters_trains_them_and_evaluates(tmp_path, name):
  config = dataclasses.replace(TINY, loss=name, num_steps=2, eval_every=2, checkpoint_every=2)
  _check_metrics(train.train_and_evaluate(config, str(tmp_path)), 2)
  key = losses.OWN_PARAMETERS[name].name
  state = _initial_state(config)
  assert not ({"proxies", "class_weights"} - {key}) & set(state)  # Only its own.
  initial, saved = state[key], _saved_state(config, tmp_path)[key]
  assert saved.shape == initial.shape == (5, config.embedding_dim)  # The digits' 5 classes.
  assert np.isfinite(saved).all() and not np.allclose(saved, initial)
  # The network alone, as for any run (its proxies' count read from the checkpoint).
  net = train.restore_model(config, str(tmp_path))
  assert net(jnp.zeros((2, 8, 8, 1))).shape == (2, config.embedding_dim)


@pytest.mark.parametrize(
  "name, field",
  [("proxy_anchor", "proxy_lr_multiplier"), ("arcface", "class_weight_lr_multiplier")],
)
def test_the_own_parameters_learn_their_multiplier_times_faster_than_the_backbone(name, field):
  """AdamW's first update is `-lr sign(g)` (without weight decay): the loss's own parameters
  move their declared multiplier (`proxy_lr_multiplier`, `class_weight_lr_multiplier`) times as
  far as the backbone's leaves, the head `head_lr_multiplier`; the other multiplier is unused."""
  config = dataclasses.replace(TINY, loss=name, warmup_steps=0, weight_decay=0.0, **{field: 30.0})
  tx = optimizer_lib.make_optimizer(config)
  state = _initial_state(config)
  own = step_lib.own_parameters(config, state)
  trained = step_lib.trained(state["params"], own)
  grads = jax.tree.map(jnp.ones_like, trained)
  updates, _ = jax.jit(tx.update)(grads, state["opt_state"], trained)
  lr = config.learning_rate
  (key,) = own
  np.testing.assert_allclose(updates[key], -30.0 * lr, rtol=1e-4)
  for part, multiplier in (("backbone", 1.0), ("head", config.head_lr_multiplier)):
    for leaf in jax.tree.leaves(updates["network"][part]):
      np.testing.assert_allclose(leaf, -multiplier * lr, rtol=1e-4)


@pytest.mark.parametrize("name", ["proxy_nca_plus_plus", "arcface"])
def test_a_resumed_run_continues_with_the_same_parameters(tmp_path, caplog, name):
  """A run resumed from its checkpoint of step 1 restores the loss's own parameters exactly and
  ends at step 2 with the parameters (and network) of the run that was not interrupted; the
  network alone restores from the checkpoint's count of rows."""
  config = dataclasses.replace(  # No warm-up: the first step, at learning rate 0, would not move.
    TINY, loss=name, num_steps=2, warmup_steps=0, eval_every=2, checkpoint_every=1
  )
  key = losses.OWN_PARAMETERS[name].name
  _check_metrics(train.train_and_evaluate(config, str(tmp_path)), 2)
  final = _saved_state(config, tmp_path)
  shutil.rmtree(tmp_path / "checkpoints" / "2")
  at_one = _saved_state(config, tmp_path)
  assert int(at_one["step"]) == 1
  assert not np.array_equal(at_one[key], _initial_state(config)[key])
  assert not np.array_equal(at_one[key], final[key])
  with caplog.at_level("INFO"):
    _check_metrics(train.train_and_evaluate(config, str(tmp_path)), 2)
  assert "resuming from step 1" in caplog.text
  resumed = _saved_state(config, tmp_path)
  assert int(resumed["step"]) == 2
  np.testing.assert_array_equal(resumed[key], final[key])
  for a, b in zip(jax.tree.leaves(resumed["params"]), jax.tree.leaves(final["params"])):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
  "overrides, match",
  [
    ({"chunk_size": 10}, r"config.chunk_size=10 cannot be used with loss='proxy_anchor'.*"),
    ({"loss_block_size": 5}, r"loss_block_size=5 cannot be used.*leave loss_block_size=None"),
    ({"memory_batches": 1}, r"memory_batches=1 cannot be used.*leave memory_batches=0"),
    ({"include_self": True}, r"include_self=True cannot be used.*leave include_self=False"),
    ({"loss_kwargs": {"num_bins": 3}}, r"\['num_bins'\] which loss 'proxy_anchor' does not take"),
    ({"loss_kwargs": {"alpha": -1.0}}, r"cannot be used with loss 'proxy_anchor'.*alpha"),
    ({"proxy_lr_multiplier": 0.0}, "proxy_lr_multiplier must be positive"),
    ({"loss": "arcface", "include_self": True}, r"include_self=True .*with the class weights"),
    ({"loss": "arcface", "loss_kwargs": {"angular_margin": 28.6}}, r"'arcface'.*in radians"),
    ({"loss": "cosface", "class_weight_lr_multiplier": -1.0}, "class_weight_lr_multiplier must"),
  ],
)
def test_a_loss_with_an_option_it_cannot_take_is_refused(tmp_path, overrides, match):
  workdir = tmp_path / "run"
  config = dataclasses.replace(TINY, **{"loss": "proxy_anchor", **overrides})
  with pytest.raises(config_lib.ConfigError, match=match):
    train.train_and_evaluate(config, str(workdir))
  assert not os.path.exists(workdir)
