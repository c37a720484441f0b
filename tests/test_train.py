"""The training job end to end, on tiny configs: experiments/job/train.py and main.py, with the
config, input pipeline, networks and reporting modules beside them."""

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax import nnx

import jaxrank
import jaxrank.data as jd
from experiments.job import check
from experiments.job import checkpoints
from experiments.job import config as config_lib
from experiments.job import datasets
from experiments.job import evaluation
from experiments.job import input_pipeline
from experiments.job import losses as losses_lib
from experiments.job import main as main_lib
from experiments.job import monitoring
from experiments.job import networks
from experiments.job import optimizer as optimizer_lib
from experiments.job import reporting
from experiments.job import samplers
from experiments.job import step as step_lib
from experiments.job import train
from jaxrank import models

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY_PATH = str(ROOT / "experiments" / "job" / "configs" / "tiny.py")
TINY = main_lib.load_config_module(TINY_PATH).get_config()


def _leaves(model):
  return [np.asarray(x) for x in jax.tree.leaves(nnx.state(model))]


def _assert_same_model(a, b):
  la, lb = _leaves(a), _leaves(b)
  assert len(la) == len(lb) > 0
  for x, y in zip(la, lb):
    np.testing.assert_array_equal(x, y)


def _test_embeddings(model, config):
  test = jd.load_digits("test")
  scale = None if config.head == "embedding" else 1.0
  return np.asarray(model(test.images, scale=scale)), test.labels


def test_tiny_run_writes_metrics_checkpoints_and_plot(tmp_path):
  config = dataclasses.replace(TINY, eval_seen_classes=True)
  metrics = train.train_and_evaluate(config, str(tmp_path))
  assert metrics["step"] == 6
  for key in (
    "recall@1",
    "recall@2",
    "recall@4",
    "recall@8",
    "map@r",
    "map",
    "tie_aware_map",
    "seen/map@r",
  ):
    assert 0.0 <= metrics[key] <= 1.0, key
  records = reporting.read_metrics(str(tmp_path))
  losses = [r for r in records if "loss" in r]
  evals = [r for r in records if "map@r" in r]
  assert [r["step"] for r in losses] == [1, 2, 3, 4, 5, 6]
  assert all(np.isfinite(r["loss"]) and r["images_per_second"] > 0 for r in losses)
  assert [r["learning_rate"] for r in losses][:3] == pytest.approx([0.0, 5e-4, 1e-3])
  assert [r["step"] for r in evals] == [0, 3, 6]
  assert (tmp_path / "curves.png").stat().st_size > 1000
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["4", "6"]  # keep_checkpoints=2.
  assert json.loads((tmp_path / "config.json").read_text())["loss"] == "fastap"
  # Rerunning a finished run trains nothing and returns the same metrics.
  assert train.train_and_evaluate(config, str(tmp_path)) == metrics
  assert reporting.read_metrics(str(tmp_path)) == records


def test_training_improves_the_training_loss(tmp_path):
  config = dataclasses.replace(
    TINY, num_steps=40, learning_rate=1e-2, eval_every=40, log_every=1, checkpoint_every=40
  )
  train.train_and_evaluate(config, str(tmp_path))
  losses = [r["loss"] for r in reporting.read_metrics(str(tmp_path)) if "loss" in r]
  assert np.mean(losses[-10:]) < 0.7 * np.mean(losses[:5])


def test_checkpoint_restores_into_a_fresh_model_with_identical_outputs(tmp_path):
  metrics = train.train_and_evaluate(TINY, str(tmp_path))
  restored = train.restore_model(TINY, str(tmp_path))
  embeddings, labels = _test_embeddings(restored, TINY)
  # The restored network reproduces the final evaluation of the trained one (up to the float
  # rounding of embedding all images at once instead of in jitted batches of 512).
  again = jaxrank.evaluate_retrieval(embeddings, labels, ks=TINY.eval_ks)
  assert again == pytest.approx({k: v for k, v in metrics.items() if k != "step"}, rel=1e-4)
  # Its variables differ from a fresh network's, and survive a weights file.
  fresh = networks.make_model(TINY, 1, nnx.Rngs(123))
  assert not np.allclose(_test_embeddings(fresh, TINY)[0], embeddings)
  models.save_weights(restored, tmp_path / "w.npz")
  models.load_weights(fresh, tmp_path / "w.npz")
  fresh.eval()
  np.testing.assert_array_equal(_test_embeddings(fresh, TINY)[0], embeddings)
  # An earlier checkpoint is a different network.
  earlier = train.restore_model(TINY, str(tmp_path), step=4)
  assert not np.array_equal(_test_embeddings(earlier, TINY)[0], embeddings)
  with pytest.raises(FileNotFoundError, match="no checkpoint of step 5"):
    train.restore_model(TINY, str(tmp_path), step=5)


# Runs `experiments.job.main` with a hook that SIGKILLs the process at a point of the save path that
# the test chooses, whatever the speed of the machine or of the save. "during": in the N-th save,
# while orbax writes the data position (the JSON item) into the checkpoint's temporary directory:
# the item is wrapped in a dict whose `items()`, which `json.dumps` calls from orbax's writing
# thread once the directories exist, kills the process; the directory is renamed to its step only
# after every item is written, so it is left unfinished. "between": at the start of the N-th save,
# after waiting for every earlier save to complete. Only public orbax names are patched.
_KILL_IN_SAVE = """
import os, signal, sys
import optax
import orbax.checkpoint as ocp
from experiments.job import main
mode, at, calls = sys.argv[1], int(sys.argv[2]), []

def kill():
  os.kill(os.getpid(), signal.SIGKILL)

class KillWhenWritten(dict):
  def items(self):
    kill()

if mode == "during":
  write_json = ocp.JsonCheckpointHandler.async_save
  async def async_save(self, directory, item=None, args=None):
    calls.append(1)
    if len(calls) == at:
      args = ocp.args.JsonSave(KillWhenWritten(args.item))
    return await write_json(self, directory, item, args)
  ocp.JsonCheckpointHandler.async_save = async_save
else:
  save = ocp.CheckpointManager.save
  def between_saves(self, *args, **kwargs):
    calls.append(1)
    if len(calls) == at:
      self.wait_until_finished()
      kill()
    return save(self, *args, **kwargs)
  ocp.CheckpointManager.save = between_saves
main.main(sys.argv[3:])
"""


def test_sigkill_during_and_between_saves_then_rerun_matches_an_uninterrupted_run(tmp_path):
  # Saves at steps 3, 6, 9, 12 and 15: the kills need the first four; one evaluation, at the end.
  overrides = ["num_steps=15", "checkpoint_every=3", "eval_every=15"]
  config = main_lib.apply_overrides(TINY, overrides)
  reference = train.train_and_evaluate(config, str(tmp_path / "reference"))

  workdir = tmp_path / "killed"
  checkpoints = workdir / "checkpoints"
  arguments = ["--config", TINY_PATH, "--workdir", str(workdir)]
  for o in overrides:
    arguments += ["--set", o]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

  def entries():
    return os.listdir(checkpoints) if checkpoints.is_dir() else []

  def finished_steps():
    return sorted(int(n) for n in entries() if n.isdigit())

  def killed_run(mode, at):
    proc = subprocess.run(
      [sys.executable, "-c", _KILL_IN_SAVE, mode, str(at), *arguments],
      cwd=ROOT,
      env=env,
      stdout=subprocess.DEVNULL,
      stderr=subprocess.PIPE,
      timeout=300,
      check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]

  # First kill: in the second save (step 6), its temporary directory left behind unfinished.
  killed_run("during", 2)
  assert finished_steps() == [3]
  assert any("tmp" in n for n in entries()), entries()
  # Second kill: the resumed run saved steps 6 and 9, then dies before saving step 12.
  killed_run("between", 3)
  assert finished_steps() == [6, 9]  # keep_checkpoints=2.

  resumed = train.train_and_evaluate(config, str(workdir))
  assert resumed == reference
  _assert_same_model(
    train.restore_model(config, str(workdir)),
    train.restore_model(config, str(tmp_path / "reference")),
  )
  # The metrics file holds each step once, as the uninterrupted run's does.
  steps = lambda wd: [(r["step"], "loss" in r) for r in reporting.read_metrics(str(wd))]
  assert steps(workdir) == steps(tmp_path / "reference")
  assert not any("tmp" in n for n in entries())


@pytest.mark.parametrize(
  "overrides, match",
  [
    ({"loss": "fast_ap"}, "config.loss='fast_ap' is not a known loss; use one of"),
    ({"loss_kwargs": {"bins": 3}}, r"has \['bins'\] which loss 'fastap' does not take"),
    ({"batch_size": 21}, "is not a multiple of config.samples_per_class=4"),
    ({"batch_size": 24}, "6 classes per batch, but the train split of digits has only 5"),
    ({"samples_per_class": 20}, "holds a single class"),
    ({"dataset": "cub200", "data_dir": "/nonexistent/cub"}, "does not exist: point it at"),
    ({"dataset": "sop"}, "config.data_dir is None but dataset='sop' is read from disk"),
    ({"model": "resnet18"}, "use model='small_convnet' for digits"),
    ({"head": "binary"}, "config.head='binary' is not known"),
    ({"chunk_size": 7}, "does not divide config.batch_size=20"),
    ({"chunk_size": 10, "memory_batches": 1}, "cannot be combined"),
    ({"chunk_size": 10, "head": "hashing"}, "cannot be used with head='hashing'"),
    ({"loss_block_size": 0}, "loss_block_size must be a positive int, got 0"),
    (
      {"loss_block_size": 8, "loss": "supap+calibration"},
      "loss_block_size cannot be used with loss 'supap\\+calibration'.*reduced over lists 2 "
      "times.*loss='roadmap'",
    ),
    ({"num_steps": -1}, "num_steps must be a non-negative int"),
    ({"init_weights": "/nonexistent/w.npz"}, "nothing is ever downloaded"),
    ({"sampler": "super_class"}, "needs super-classes"),
    ({"profile_start": 5}, "traces steps 5 to 7, outside the run's steps 1 to 6"),
    ({"profile_start": 0}, "traces steps 0 to 2, outside the run's steps 1 to 6"),
    ({"profile_start": 2, "profile_num_steps": 0}, "profile_num_steps must be a positive int"),
  ],
)
def test_bad_configs_fail_before_training(tmp_path, overrides, match):
  workdir = tmp_path / "run"
  with pytest.raises(ValueError, match=match):
    train.train_and_evaluate(dataclasses.replace(TINY, **overrides), str(workdir))
  assert not workdir.exists()


def test_a_workdir_refuses_another_config(tmp_path):
  train.train_and_evaluate(dataclasses.replace(TINY, num_steps=0), str(tmp_path))
  with pytest.raises(ValueError, match=r"another configuration \(it differs in \['loss'\]\)"):
    train.train_and_evaluate(dataclasses.replace(TINY, num_steps=0, loss="smoothap"), str(tmp_path))
  # Cosmetic fields do not count.
  train.train_and_evaluate(dataclasses.replace(TINY, num_steps=0, progress_bar=True), str(tmp_path))


def test_overrides_parse_literals_and_reject_unknown_fields():
  c = main_lib.apply_overrides(
    TINY,
    [
      "loss=smoothap",
      "num_steps=3",
      "loss_kwargs={'temperature': 0.05}",
      "model_features=[2, 3]",
    ],
  )
  assert (c.loss, c.num_steps, c.loss_kwargs, c.model_features) == (
    "smoothap",
    3,
    {"temperature": 0.05},
    (2, 3),
  )
  with pytest.raises(ValueError, match=r"\['nonsense'\] are not fields of the config"):
    main_lib.apply_overrides(TINY, ["nonsense=1"])
  with pytest.raises(ValueError, match="must look like field=value"):
    main_lib.apply_overrides(TINY, ["loss"])


def test_every_loss_of_the_table_is_the_loss_it_names():
  from experiments.job import losses  # pylint: disable=g-import-not-at-top

  # Each name's expected loss, written out here from jaxrank's functions (the sums with weight 1).
  def plus(f, g):
    return lambda s, y, *, where: f(s, y, where=where) + g(s, y, where=where)

  expected = {
    "fastap": jaxrank.fastap_loss,
    "soft_binning_ap": jaxrank.soft_binning_ap_loss,
    "tie_aware_ap": jaxrank.tie_aware_ap_loss,
    "simplified_tie_aware_ap": jaxrank.simplified_tie_aware_ap_loss,
    "tie_aware_ndcg": jaxrank.tie_aware_ndcg_loss,
    "simplified_tie_aware_ndcg": jaxrank.simplified_tie_aware_ndcg_loss,
    "blackbox_ap": jaxrank.blackbox_ap_loss,
    "blackbox_recall": jaxrank.blackbox_recall_loss,
    "smoothap": jaxrank.smoothap_loss,
    "supap": jaxrank.supap_loss,
    "calibration": jaxrank.calibration_loss,
    "roadmap": jaxrank.roadmap_loss,
    "supap+calibration": plus(jaxrank.supap_loss, jaxrank.calibration_loss),
    "smoothap+calibration": plus(jaxrank.smoothap_loss, jaxrank.calibration_loss),
    "contrastive": jaxrank.contrastive_loss,
    "triplet": jaxrank.triplet_loss,
    "multi_similarity": jaxrank.multi_similarity_loss,
  }
  # The losses with parameters of their own, which take no lists, are tests/test_train_proxies.py's.
  assert set(losses.LOSSES) - set(losses.OWN_PARAMETERS) == set(expected)
  e = jax.random.normal(jax.random.key(0), (12, 4))
  scores, relevance, where = jaxrank.batch_retrieval(e, np.arange(12) % 3)
  values = {}
  for name, want_fn in expected.items():
    fn = losses.get_loss(name)
    value, grad = jax.value_and_grad(lambda s: fn(s, relevance, where=where))(scores)
    want, want_grad = jax.value_and_grad(lambda s: want_fn(s, relevance, where=where))(scores)
    assert float(value) == float(want), name
    np.testing.assert_array_equal(grad, want_grad, err_msg=name)
    assert np.isfinite(value) and np.abs(grad).max() > 0, name
    values[name] = float(value)
  # The lists tell the losses apart, so a swap of two entries cannot go unnoticed.
  assert len(set(values.values())) == len(values), values
  # Hyperparameters reach the loss.
  got = losses.get_loss("fastap", {"num_intervals": 3})(scores, relevance, where=where)
  assert float(got) == float(jaxrank.fastap_loss(scores, relevance, where=where, num_intervals=3))
  assert float(got) != values["fastap"]


@pytest.mark.parametrize(
  ("overrides", "bound"),
  [
    ({}, TINY.samples_per_class - 1),
    ({"include_self": True}, TINY.samples_per_class),
    ({"memory_batches": 2}, 3 * TINY.samples_per_class - 1),
    ({"sampler": "random"}, None),
  ],
)
def test_the_sampler_bound_reaches_the_losses_that_take_it(overrides, bound, monkeypatch):
  """Whole-class samplers fix the relevant items of a list; losses with `max_relevant` get it
  (unless `loss_kwargs` sets it), the others never see it."""
  from experiments.job import losses  # pylint: disable=g-import-not-at-top

  assert step_lib.relevant_bound(dataclasses.replace(TINY, **overrides)) == bound
  seen = []

  def recording(name, kwargs=None):
    seen.append((name, dict(kwargs or {})))
    return lambda s, y, *, where: jnp.sum(jnp.where(where, s, 0))

  monkeypatch.setattr(losses, "get_loss", recording)
  for name in ("smoothap", "blackbox_ap", "supap+calibration", "fastap"):
    config = dataclasses.replace(TINY, loss=name, **overrides)
    step_lib._batch_loss_fn(config, None)  # pylint: disable=protected-access
    takes = name != "fastap"
    assert losses.takes_relevant_bound(name) == takes
    want = {"max_relevant": bound} if takes and bound is not None else {}
    assert seen.pop() == (name, want), name
  config = dataclasses.replace(TINY, loss="smoothap", loss_kwargs={"max_relevant": 50}, **overrides)
  step_lib._batch_loss_fn(config, None)  # pylint: disable=protected-access
  assert seen.pop() == ("smoothap", {"max_relevant": 50})


def test_main_runs_a_sweep_with_an_untrained_baseline(tmp_path, capsys):
  config_file = tmp_path / "sweep.py"
  config_file.write_text(
    f"import importlib.util\n"
    f"spec = importlib.util.spec_from_file_location('tiny', {TINY_PATH!r})\n"
    "tiny = importlib.util.module_from_spec(spec); spec.loader.exec_module(tiny)\n"
    "get_config = tiny.get_config\n"
    "def get_sweep():\n"
    "  return {'fastap': {'loss': 'fastap'}, 'blackbox_ap': {'loss': 'blackbox_ap'}}\n"
  )
  main_lib.main(
    [
      "--config",
      str(config_file),
      "--workdir",
      str(tmp_path / "out"),
      "--set",
      "num_steps=2",
      "--set",
      "raw_pixels_baseline=True",
    ]
  )
  out = capsys.readouterr().out
  table = [line.split()[0] for line in out.splitlines() if line[:1].isalpha()]
  assert table[-5:-1] == ["untrained", "raw_pixels", "fastap", "blackbox_ap"]
  results = json.loads((tmp_path / "out" / "results.json").read_text())
  assert set(results) == {"untrained", "raw_pixels", "fastap", "blackbox_ap"}
  assert results["untrained"]["step"] == 0 and results["fastap"]["step"] == 2
  # The raw-pixel row, recomputed by brute force: each test image's nearest other test image by
  # cosine of the pixels minus the train split's mean image.
  train_data, test_data = datasets.load_data(TINY)
  flat = lambda d: np.asarray(d.images, np.float64).reshape(d.num_examples, -1)
  x = flat(test_data) - flat(train_data).mean(axis=0)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  sims = x @ x.T
  np.fill_diagonal(sims, -np.inf)
  hit = test_data.labels[np.argmax(sims, axis=1)] == test_data.labels
  assert results["raw_pixels"]["recall@1"] == pytest.approx(hit.mean(), abs=1e-9)


def test_memory_holds_the_last_batches_and_enters_the_loss(tmp_path):
  # Three steps into a memory of two batches of 20: slots 0-19 hold batch 3, slots 20-39 batch 2.
  # The expectations are computed outside the training step: each batch's embeddings by the
  # checkpointed network of the step before, in training mode, and the logged loss by jaxrank.
  config = dataclasses.replace(
    TINY,
    loss="blackbox_ap",
    memory_batches=2,
    num_steps=3,
    checkpoint_every=1,
    keep_checkpoints=3,
    eval_every=3,
  )
  train.train_and_evaluate(config, str(tmp_path))
  train_data, _ = datasets.load_data(config)
  batches = input_pipeline.TrainBatches(
    config, train_data, samplers.make_sampler(config, train_data), (0, 0)
  )
  batches = [next(batches) for _ in range(3)]
  manager = ocp.CheckpointManager(str(tmp_path / "checkpoints"))
  memories = {step: manager.restore(step)["state"]["memory"] for step in (2, 3)}
  manager.close()

  def train_mode_embeddings(step, batch):  # The network after `step` steps, as it trains.
    net = train.restore_model(config, str(tmp_path), step=step)
    net.train()
    return np.asarray(net(jax.numpy.asarray(batch["image"])))

  memory = memories[3]
  np.testing.assert_array_equal(memory["where"], np.ones(40, bool))
  assert int(memory["position"]) == 20
  np.testing.assert_array_equal(memory["labels"][:20], batches[2]["label"])
  np.testing.assert_array_equal(memory["labels"][20:], batches[1]["label"])
  np.testing.assert_allclose(
    memory["embeddings"][20:], train_mode_embeddings(1, batches[1]), atol=1e-5
  )
  np.testing.assert_allclose(
    memory["embeddings"][:20], train_mode_embeddings(2, batches[2]), atol=1e-5
  )
  # Step 3's loss: batch 3 against itself and the memory after step 2 (batches 1 and 2).
  scores, relevance, where = jaxrank.batch_retrieval(
    train_mode_embeddings(2, batches[2]),
    batches[2]["label"],
    gallery_embeddings=memories[2]["embeddings"],
    gallery_labels=memories[2]["labels"],
    gallery_where=memories[2]["where"],
  )
  want = jaxrank.blackbox_ap_loss(scores, relevance, where=where)
  logged = [
    r["loss"] for r in reporting.read_metrics(str(tmp_path)) if r.get("step") == 3 and "loss" in r
  ]
  assert logged[0] == pytest.approx(float(want), abs=1e-5)
  alone = jaxrank.batch_retrieval(train_mode_embeddings(2, batches[2]), batches[2]["label"])
  without_memory = jaxrank.blackbox_ap_loss(alone[0], alone[1], where=alone[2])
  assert abs(float(without_memory) - float(want)) > 1e-3  # The memory changes the loss.


@pytest.mark.parametrize(
  "overrides",
  [
    {
      "loss": "tie_aware_ap",
      "head": "hashing",
      "loss_kwargs": {"num_bins": 9},
      "tanh_every": 2,
    },
    {"loss": "roadmap", "include_self": True, "sampler": "random"},
    {"half_precision": True, "chunk_size": 10, "loss": "smoothap"},
  ],
  ids=["hashing", "random-sampler-include-self", "half-precision-chunked"],
)
def test_options_train(tmp_path, overrides):
  metrics = train.train_and_evaluate(
    dataclasses.replace(TINY, num_steps=3, **overrides), str(tmp_path)
  )
  assert metrics["step"] == 3 and 0 < metrics["map@r"] <= 1
  if overrides.get("head") == "hashing":
    # Binary codes tie a lot: the tie-aware mAP differs from the pessimistic one.
    assert metrics["tie_aware_map"] > metrics["map"]
    # The head's BatchNorm ran in training mode inside the step: its statistics moved.
    config = dataclasses.replace(TINY, num_steps=3, **overrides)
    head = train.restore_model(config, str(tmp_path)).head
    mean = np.asarray(head.norm.mean[...])  # Running means of non-negative features.
    assert np.all(mean >= 0) and np.any(mean > 0)


def test_hashing_head_splits_features_that_every_image_shares():
  """The features of a relu network share a large positive part; the hashing head centres them.

  Without centring, the bits of `tanh(alpha W x)` are set by the shared part, the same for every
  image, and training on `q.x / b` stalls (see `networks.CentredHashingHead`).
  """
  rng = np.random.default_rng(0)
  features = 5.0 + rng.uniform(size=(64, 8)).astype(np.float32)  # Non-negative, shared offset.
  build = networks.HEADS["hashing"].build
  bit_balance = lambda codes: np.mean(np.asarray(jaxrank.hashing.binarize(codes)) > 0, axis=0)
  # The library's HashingHead alone: most bits have one sign for nearly the whole batch.
  plain = bit_balance(models.HashingHead(8, 16, rngs=nnx.Rngs(0))(features))
  assert np.sum((plain < 0.1) | (plain > 0.9)) >= 12
  balanced = lambda fraction: np.all((fraction > 0.1) & (fraction < 0.9))
  head = build(8, 16, rngs=nnx.Rngs(0))
  head.train()
  assert balanced(bit_balance(head(features)))
  for _ in range(60):  # Running statistics (momentum 0.9) for inference mode.
    head(features + rng.normal(scale=0.01, size=features.shape).astype(np.float32))
  head.eval()
  assert balanced(bit_balance(head(features)))
  # The similarity the codes are trained on: the gradient no longer goes mostly into the
  # common direction of the codes (the one term of each item's score that no query tells apart).
  head.train()
  labels = np.repeat(np.arange(16), 4)

  def loss(codes):
    scores, relevance, where = jaxrank.batch_retrieval(
      codes, labels, similarity_fn=jaxrank.similarity.hamming
    )
    return jaxrank.smoothap_loss(scores, relevance, where=where)

  def along_mean_code(codes):
    g = np.asarray(jax.grad(loss)(codes))
    mean = np.asarray(codes).mean(axis=0)
    return np.linalg.norm(g @ mean) / (np.linalg.norm(g) * np.linalg.norm(mean))

  plain_codes = models.HashingHead(8, 16, rngs=nnx.Rngs(0))(features)
  assert along_mean_code(plain_codes) > 0.9
  assert along_mean_code(head(features)) < 0.5


def test_chunked_gradient_trains_the_same_network(tmp_path):
  config = dataclasses.replace(TINY, num_steps=3)
  train.train_and_evaluate(config, str(tmp_path / "whole"))
  train.train_and_evaluate(dataclasses.replace(config, chunk_size=5), str(tmp_path / "chunked"))
  a = _leaves(train.restore_model(config, str(tmp_path / "whole")))
  b = _leaves(
    train.restore_model(dataclasses.replace(config, chunk_size=5), str(tmp_path / "chunked"))
  )
  for x, y in zip(a, b):
    np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


def test_a_loss_in_blocks_trains_the_same_network(tmp_path):
  """`loss_block_size` (blocks of 7 of a batch of 20, the last overlapping) with the memory of
  past batches as a gallery: the same steps as the loss on the whole lists."""
  config = dataclasses.replace(TINY, num_steps=3, memory_batches=1, loss="smoothap")
  blocked = dataclasses.replace(config, loss_block_size=7)
  train.train_and_evaluate(config, str(tmp_path / "whole"))
  train.train_and_evaluate(blocked, str(tmp_path / "blocked"))
  a = _leaves(train.restore_model(config, str(tmp_path / "whole")))
  b = _leaves(train.restore_model(blocked, str(tmp_path / "blocked")))
  for x, y in zip(a, b):
    np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
  losses = [
    [r["loss"] for r in reporting.read_metrics(str(tmp_path / run)) if "loss" in r]
    for run in ("whole", "blocked")
  ]
  np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)


@pytest.mark.parametrize(
  "path", sorted((ROOT / "experiments" / "job" / "configs").glob("*.py")), ids=lambda p: p.name
)
def test_every_config_file_is_valid_or_asks_for_its_data(path):
  module = main_lib.load_config_module(str(path))
  text = path.read_text()
  assert "python -m experiments.job.main --config experiments/job/configs/" in text  # The command.
  assert "Expected" in text  # And the result it should give.
  config = module.get_config()
  runs = [
    main_lib.apply_overrides(config, o) for o in getattr(module, "get_sweep", dict)().values()
  ]
  for c in [config] + runs:
    if datasets.DATASETS[c.dataset].bundled_with:  # The digits, the glyphs.
      check.check_config(c)
    else:
      with pytest.raises(ValueError, match="config.data_dir is None"):
        check.check_config(c)


def test_image_folder_with_a_resnet18_and_frozen_batchnorm_chunked(tmp_path):
  """The photo path: decode, augment, ResNet-18 with inference-mode BatchNorm, chunked gradient."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(0)
  for split, classes in (("train", ("a", "b", "c")), ("test", ("d", "e"))):
    for c in classes:
      (tmp_path / "data" / split / c).mkdir(parents=True)
      for i in range(4):
        image = rng.integers(0, 256, size=(40, 36, 3), dtype=np.uint8)
        (tmp_path / "data" / split / c / f"{i}.png").write_bytes(tf.io.encode_png(image).numpy())
  config = dataclasses.replace(
    TINY,
    dataset="image_folder",
    data_dir=str(tmp_path / "data"),
    model="resnet18",
    freeze_batchnorm=True,
    chunk_size=4,
    batch_size=8,
    samples_per_class=4,
    image_size=32,
    resize_size=36,
    num_steps=2,
    eval_every=2,
  )
  metrics = train.train_and_evaluate(config, str(tmp_path / "run"))
  assert metrics["step"] == 2 and 0 <= metrics["map@r"] <= 1
  # Frozen: the trained network's BatchNorm statistics are those of the initial network (same
  # seed), while its weights moved.
  trained = train.restore_model(config, str(tmp_path / "run"))
  initial = networks.make_model(config, 3, nnx.Rngs(config.seed))
  stats = [jax.tree.leaves(nnx.state(m, nnx.BatchStat)) for m in (trained, initial)]
  assert len(stats[0]) == len(stats[1]) == 2 * 20  # ResNet-18: mean and variance of 20 BatchNorms
  for got, want in zip(*stats):
    np.testing.assert_array_equal(got, want)
  params = [jax.tree.leaves(nnx.state(m, nnx.Param)) for m in (trained, initial)]
  assert any(not np.array_equal(a, b) for a, b in zip(*params))
  with pytest.raises(ValueError, match="needs freeze_batchnorm=True"):
    check.check_config(dataclasses.replace(config, freeze_batchnorm=False))


@pytest.mark.parametrize("chunk_size", [None, 4])
def test_a_step_with_frozen_batchnorm_runs_the_backbone_in_inference_mode(chunk_size):
  """`freeze_batchnorm`: the step's loss is the loss of the evaluation network's embeddings (the
  running statistics, not the batch's), and no BatchNorm statistic changes. The whole-batch
  gradient would write updated statistics back; the chunked one never does, so there the loss
  tells (the run above, chunked, would pass with the backbone in training mode)."""
  config = dataclasses.replace(
    TINY,
    model="resnet18",
    freeze_batchnorm=True,
    batch_size=8,
    samples_per_class=4,
    chunk_size=chunk_size,
  )
  tx = optimizer_lib.make_optimizer(config)
  model, state = step_lib.init_state(config, tx)
  images = jnp.asarray(np.random.default_rng(0).random((8, 32, 32, 1), np.float32))
  labels = jnp.repeat(jnp.arange(2), 4)
  net = nnx.merge(model.eval_graph, state["params"], state["rest"])
  batch_loss = step_lib._batch_loss_fn(config, None)  # pylint: disable=protected-access
  want = float(batch_loss(net(images), (labels, None, None)))
  stats = [np.array(x) for x in jax.tree.leaves(nnx.state(net, nnx.BatchStat))]
  assert len(stats) == 2 * 20  # ResNet-18: mean and variance of 20 BatchNorms.
  step = step_lib.make_train_step(config, model, tx, None)
  new, loss, _ = step(state, images, labels, jnp.int32(-1))
  np.testing.assert_allclose(float(loss), want, rtol=1e-5)
  trained = nnx.merge(model.eval_graph, new["params"], new["rest"])
  for got, before in zip(jax.tree.leaves(nnx.state(trained, nnx.BatchStat)), stats, strict=True):
    np.testing.assert_array_equal(got, before)


def test_hide_gpus_from_tensorflow(monkeypatch, caplog):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  calls = []
  monkeypatch.setattr(tf.config, "set_visible_devices", lambda *args: calls.append(args))
  input_pipeline.hide_gpus_from_tensorflow()
  assert calls == [([], "GPU")]

  # Too late, TensorFlow's devices initialised: a warning only if it still sees GPUs.
  def initialised(*args):
    raise RuntimeError("Visible devices cannot be modified after being initialized")

  monkeypatch.setattr(tf.config, "set_visible_devices", initialised)
  monkeypatch.setattr(tf.config, "get_visible_devices", lambda kind: [])
  with caplog.at_level("WARNING"):
    input_pipeline.hide_gpus_from_tensorflow()
    assert not caplog.records
    monkeypatch.setattr(tf.config, "get_visible_devices", lambda kind: [f"/{kind}:0"])
    input_pipeline.hide_gpus_from_tensorflow()
  assert "TensorFlow already initialised its devices and sees the GPUs" in caplog.text


class _Stop(Exception):
  pass


def test_entry_points_hide_gpus_from_tensorflow_before_running(monkeypatch):
  from experiments.ablations import fastap_bins  # pylint: disable=g-import-not-at-top
  from experiments.ablations import sweep  # pylint: disable=g-import-not-at-top

  events = []

  def run(*args, **kwargs):
    events.append("run")
    raise _Stop

  monkeypatch.setattr(input_pipeline, "hide_gpus_from_tensorflow", lambda: events.append("hide"))
  monkeypatch.setattr(main_lib, "run", run)
  monkeypatch.setattr(sweep, "run", run)
  for entry_point in (main_lib.main, fastap_bins.main):
    events.clear()
    with pytest.raises(_Stop):
      entry_point(["--config", TINY_PATH, "--workdir", "unused"])
    assert events == ["hide", "run"], entry_point


# ---------------------------------------------------------------------------------------------
# Divergence and unreadable checkpoints (issue 31).


def test_a_diverged_step_between_logs_is_never_checkpointed(tmp_path, monkeypatch):
  """The loss turns NaN at step 3, logged only at step 5: the check of every step stops the run
  before the checkpoint of step 4, which would otherwise hold NaN parameters to resume from."""
  make_step = step_lib.make_train_step

  def poisoning(*args):
    step_fn = make_step(*args)
    calls = []

    def step(state, images, labels, first_bad):
      calls.append(1)
      if len(calls) == 3:
        images = images * np.nan
      return step_fn(state, images, labels, first_bad)

    return step

  monkeypatch.setattr(step_lib, "make_train_step", poisoning)
  config = dataclasses.replace(TINY, log_every=5, checkpoint_every=2, keep_checkpoints=5)
  with pytest.raises(FloatingPointError, match="not finite at step 3.*Nothing after step 2"):
    train.train_and_evaluate(config, str(tmp_path))
  assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()) == [2]


def _manager(directory):
  return ocp.CheckpointManager(
    str(directory), options=ocp.CheckpointManagerOptions(max_to_keep=5, create=True)
  )


def _saved_steps(tmp_path, steps=(1, 2)):
  """A workdir whose checkpoints hold a small state at `steps`; returns the state."""
  state = {"params": {"w": jnp.arange(6.0).reshape(2, 3)}, "step": jnp.int32(0)}
  manager = _manager(tmp_path / "checkpoints")
  for step in steps:
    checkpoints.save(manager, step, {**state, "step": jnp.int32(step)}, (step, 0))
  manager.wait_until_finished()
  manager.close()
  return state


def _corrupt(checkpoint):
  for blob in (checkpoint / "state").rglob("*"):
    if blob.is_file() and blob.parent.name == "d":  # The arrays' data files.
      blob.write_bytes(b"not an array")


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_an_unreadable_checkpoint_is_moved_aside_never_deleted(tmp_path, damage, caplog):
  state = _saved_steps(tmp_path)
  checkpoint = tmp_path / "checkpoints" / "2"
  if damage == "corrupt":
    _corrupt(checkpoint)
  else:
    for blob in (checkpoint / "state").rglob("*"):
      if blob.is_file() and blob.parent.name == "d":
        blob.unlink()
  earlier = tmp_path / "unreadable_checkpoints" / "2"  # Set aside by an earlier run: kept.
  earlier.mkdir(parents=True)
  (earlier / "keep").write_text("an earlier copy")
  manager = _manager(tmp_path / "checkpoints")
  restored, position = checkpoints.restore_latest(manager, state, str(tmp_path))
  manager.close()
  assert int(restored["step"]) == 1 and position == (1, 0)
  assert (earlier / "keep").read_text() == "an earlier copy"
  assert (tmp_path / "unreadable_checkpoints" / "2.1" / "state").is_dir()
  assert not checkpoint.exists()
  assert "cannot be read" in caplog.text


def test_a_readable_checkpoint_that_does_not_fit_is_left_and_the_error_says_why(tmp_path):
  _saved_steps(tmp_path)
  changed = {"params": {"w": jnp.zeros((2, 3)), "b": jnp.zeros(3)}, "step": jnp.int32(0)}
  manager = _manager(tmp_path / "checkpoints")
  with pytest.raises(
    checkpoints.CheckpointError, match="can be read but not restored.*configuration"
  ):
    checkpoints.restore_latest(manager, changed, str(tmp_path))
  manager.close()
  assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["1", "2"]
  assert not (tmp_path / "unreadable_checkpoints").exists()


@pytest.mark.parametrize("failures", [1, 10])
def test_a_failure_that_is_not_the_checkpoints_moves_nothing(tmp_path, monkeypatch, failures):
  """A restore that fails once (an I/O hiccup) is tried again; one that keeps failing while the
  files read (a bug) is raised, from the original error; neither moves the checkpoint."""
  state = _saved_steps(tmp_path)
  restore = checkpoints._restore
  calls = []

  def flaky(manager, step, target=None):
    if target is not None and len(calls) < failures:
      calls.append(step)
      raise OSError("Input/output error")
    return restore(manager, step, target)

  monkeypatch.setattr(checkpoints, "_restore", flaky)
  manager = _manager(tmp_path / "checkpoints")
  try:
    if failures == 1:
      restored, _ = checkpoints.restore_latest(manager, state, str(tmp_path))
      assert int(restored["step"]) == 2
    else:
      with pytest.raises(
        checkpoints.CheckpointError, match="OSError: Input/output error"
      ) as raised:
        checkpoints.restore_latest(manager, state, str(tmp_path))
      assert isinstance(raised.value.__cause__, OSError)
  finally:
    manager.close()
  assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["1", "2"]


def test_checked_steps_stop_at_a_traced_value_check_that_fails(tmp_path, monkeypatch):
  """check_traced_inputs=True: scores out of FastAP's range inside the jitted step stop the run
  with the eager check's message (unchecked, they would be clipped to the end bins)."""

  def doubled_scores(config, mesh):
    del config, mesh  # The loss below replaces the configured one.

    def loss(embeddings, targets):
      scores, relevance, where = jaxrank.batch_retrieval(embeddings, targets[0])
      return jaxrank.fastap_loss(2 * scores, relevance, where=where)

    return loss

  config = dataclasses.replace(TINY, num_steps=2, check_traced_inputs=True)
  train.train_and_evaluate(config, str(tmp_path / "clean"))  # In range: it runs through.
  monkeypatch.setattr(step_lib, "_batch_loss_fn", doubled_scores)
  with pytest.raises(Exception, match=r"fastap_loss: scores must lie in \[-1, 1\]"):
    train.train_and_evaluate(config, str(tmp_path / "doubled"))
  unchecked = dataclasses.replace(config, check_traced_inputs=False)
  train.train_and_evaluate(unchecked, str(tmp_path / "unchecked"))  # Clipped, silently.


# ---------------------------------------------------------------------------------------------
# Behaviours of the step, the evaluation and the optimiser, each checked directly on one tiny
# batch (no training): what the end-to-end runs above assert only through their final metrics.


def _first_batch(config):
  train_data, _ = datasets.load_data(config)
  sampler = samplers.make_sampler(config, train_data)
  batch = next(input_pipeline.TrainBatches(config, train_data, sampler, (0, 0)))
  return jnp.asarray(batch["image"]), jnp.asarray(batch["label"])


HASHING = dataclasses.replace(
  TINY, head="hashing", loss="tie_aware_ap", loss_kwargs={"num_bins": 9}, tanh_every=1
)


def test_evaluation_retrieves_with_binary_codes_of_the_network_in_inference_mode():
  """A hashing head is evaluated on `sign(f)` of the network in inference mode (running
  statistics), with the Hamming similarity: `evaluate` equals `evaluate_retrieval` on those codes,
  not on the relaxed codes it trains on nor on the codes of the network in training mode."""
  config = HASHING
  model, state = step_lib.init_state(config, optimizer_lib.make_optimizer(config))
  # Running statistics of a few training-mode passes (momentum 0.9), away from the initial ones
  # and from a batch's own.
  net = nnx.merge(model.train_graph, state["params"], state["rest"], copy=True)
  images, _ = _first_batch(config)
  for _ in range(5):
    net(images)
  rest = jax.tree.map(jnp.array, nnx.state(net, nnx.Not(nnx.Param)))  # A copy.
  state = {**state, "rest": rest, "step": jnp.int32(3)}
  scale = jaxrank.hashing.tanh_scale(
    3, initial=config.tanh_initial, growth=config.tanh_growth, every=config.tanh_every
  )
  embed_fn = evaluation.make_embed_fn(config, model)
  _, test_data = datasets.load_data(config)
  batches = list(input_pipeline.eval_batches(config, test_data))  # The split, as evaluated.
  images = np.concatenate([b["image"][b["mask"]] for b in batches])
  labels = np.concatenate([b["label"][b["mask"]] for b in batches])
  codes = np.asarray(embed_fn(state["params"], state["rest"], images, state["step"]))
  inference = nnx.merge(model.eval_graph, state["params"], state["rest"])
  relaxed = np.asarray(inference(images, scale=scale))
  np.testing.assert_array_equal(codes, np.asarray(jaxrank.hashing.binarize(relaxed)))
  assert set(np.unique(codes)) <= {-1.0, 1.0}
  net.train()
  training_mode = np.asarray(jaxrank.hashing.binarize(net(images, scale=scale)))
  assert np.mean(training_mode != codes) > 0.05  # The two modes give other codes here.

  got = evaluation.evaluate(config, embed_fn, state, test_data)
  ks = dict(ks=config.eval_ks, similarity_fn=jaxrank.similarity.hamming)
  assert got == pytest.approx(jaxrank.evaluate_retrieval(codes, labels, **ks), abs=1e-6)
  for other in (relaxed, training_mode):  # The metrics tell the codes apart.
    wrong = jaxrank.evaluate_retrieval(other, labels, **ks)
    assert abs(wrong["tie_aware_map"] - got["tie_aware_map"]) > 1e-3


def _step_loss_reference(config, model, state, images, labels, *, scale, include_self):
  net = nnx.merge(model.train_graph, state["params"], state["rest"], copy=True)
  head = networks.HEADS[config.head]
  scores, relevance, where = jaxrank.batch_retrieval(
    net(images, scale=scale), labels, include_self=include_self, similarity_fn=head.similarity_fn
  )
  return float(losses_lib.get_loss(config.loss, config.loss_kwargs)(scores, relevance, where=where))


@pytest.mark.parametrize(
  "config",
  [
    HASHING,
    dataclasses.replace(TINY, loss="smoothap", include_self=True, sampler="random"),
  ],
  ids=["hashing-scale", "include-self"],
)
def test_the_step_minimises_the_configured_loss_of_the_network_at_its_step(config):
  """The step's loss is the configured loss on the batch's lists: the network in training mode
  at the tanh scale of the state's step (hashing), the head's similarity, the query in its own
  list when `include_self`. Each alternative gives another value here."""
  model, state = step_lib.init_state(config, optimizer_lib.make_optimizer(config))
  state = {**state, "step": jnp.int32(2)}
  images, labels = _first_batch(config)
  step = step_lib.make_train_step(config, model, optimizer_lib.make_optimizer(config), None)
  _, loss, first_bad = step(jax.tree.map(jnp.copy, state), images, labels, jnp.int32(-1))
  assert int(first_bad) == -1
  scale = step_lib.tanh_scale(config, jnp.int32(2))
  kwargs = dict(scale=scale, include_self=config.include_self)
  want = _step_loss_reference(config, model, state, images, labels, **kwargs)
  # The step's forward pass is compiled inside its gradient, so its codes round differently from
  # the reference's, and the binned tie-aware loss magnifies that: 1.8e-5 apart on an AMD EPYC
  # at XLA's backend optimisation level 0 (the tests' flag). The alternatives differ by over 1e-2
  # (the scale of the step before or after: 0.410 and 0.437 against 0.421).
  assert float(loss) == pytest.approx(want, rel=1e-4)
  if scale is not None:
    assert float(scale) == 4.0  # initial 1, doubled every step.
    wrong = _step_loss_reference(config, model, state, images, labels, **{**kwargs, "scale": 1.0})
  else:
    wrong = _step_loss_reference(
      config, model, state, images, labels, **{**kwargs, "include_self": not config.include_self}
    )
  assert abs(wrong - want) > 1e-3


def _blow_up() -> optax.GradientTransformation:
  """An optimiser whose every update is infinite: the parameters turn infinite, the loss of the
  step that makes them (computed before the update) stays finite."""
  return optax.GradientTransformation(
    lambda params: optax.EmptyState(),
    lambda grads, opt_state, params=None: (
      jax.tree.map(lambda g: jnp.full_like(g, jnp.inf), grads),
      opt_state,
    ),
  )


def test_the_divergence_check_reads_the_updated_parameters_and_keeps_the_first_bad_step():
  config = TINY
  model, state = step_lib.init_state(config, optimizer_lib.make_optimizer(config))
  images, labels = _first_batch(config)
  good = step_lib.make_train_step(config, model, optimizer_lib.make_optimizer(config), None)
  bad = step_lib.make_train_step(config, model, _blow_up(), None)
  state, loss, first_bad = good(state, images, labels, jnp.int32(-1))
  assert np.isfinite(float(loss)) and int(first_bad) == -1
  state, loss, first_bad = bad(state, images, labels, first_bad)  # Step 2.
  assert np.isfinite(float(loss)) and int(first_bad) == 2  # Finite loss, infinite parameters.
  assert not np.all(np.isfinite(np.asarray(jax.tree.leaves(state["params"])[0])))
  _, loss, first_bad = good(state, images, labels, first_bad)  # Step 3: NaN loss too.
  assert not np.isfinite(float(loss)) and int(first_bad) == 2  # Still the first one.
  with pytest.raises(FloatingPointError, match="not finite at step 2.*Nothing after step 1"):
    step_lib.check_finite("run", first_bad, 1)


def test_the_seed_sets_the_initial_network():
  tx = optimizer_lib.make_optimizer(TINY)
  params = {
    s: _leaves_of(step_lib.init_state(dataclasses.replace(TINY, seed=s), tx)[1]["params"])
    for s in (0, 1)
  }
  for seed, leaves in params.items():
    want = _leaves_of(nnx.state(networks.make_model(TINY, 1, nnx.Rngs(seed)), nnx.Param))
    for got, expected in zip(leaves, want, strict=True):
      np.testing.assert_array_equal(got, expected)
  assert not any(np.array_equal(a, b) for a, b in zip(params[0], params[1]) if a.std() > 0)


def _leaves_of(tree):
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_the_head_learns_head_lr_multiplier_times_faster_than_the_backbone():
  """AdamW's first update is `-lr sign(g)` (without weight decay): the head's leaves move
  `head_lr_multiplier` times as far as the backbone's, and every leaf of the model is in one of
  the two groups."""
  config = dataclasses.replace(TINY, warmup_steps=0, weight_decay=0.0, head_lr_multiplier=10.0)
  tx = optimizer_lib.make_optimizer(config)
  _, state = step_lib.init_state(config, tx)
  params = state["params"]
  grads = jax.tree.map(jnp.ones_like, params)
  updates, _ = tx.update(grads, tx.init(params), params)
  lr = config.learning_rate
  for part, multiplier in (("backbone", 1.0), ("head", 10.0)):
    leaves = _leaves_of(updates[part])
    assert leaves
    for leaf in leaves:
      np.testing.assert_allclose(leaf, -multiplier * lr, rtol=1e-4)
  assert set(params.keys()) == {"backbone", "head"}


# Mixed precision (config.half_precision).

HALF = dataclasses.replace(TINY, half_precision=True)


def test_half_precision_loss_is_the_float32_loss_of_the_bfloat16_networks_embeddings():
  """The network computes in bfloat16 on float32 parameters; its embeddings come out in float32,
  and the step's loss is the float32 loss of those embeddings (retrieval, scores and loss in
  float32), with float32 gradients and updates."""
  tx = optimizer_lib.make_optimizer(HALF)
  model, state = step_lib.init_state(HALF, tx)
  assert {x.dtype for x in jax.tree.leaves(state["params"])} == {jnp.dtype(jnp.float32)}
  images, labels = _first_batch(HALF)
  net = nnx.merge(model.train_graph, state["params"], state["rest"], copy=True)
  assert net.backbone(images).dtype == jnp.bfloat16
  embeddings = net(images)
  assert embeddings.dtype == jnp.float32
  scores, relevance, where = jaxrank.batch_retrieval(embeddings.astype(jnp.float32), labels)
  want = float(jaxrank.fastap_loss(scores, relevance, where=where))
  step = step_lib.make_train_step(HALF, model, tx, None)
  new, loss, first_bad = step(jax.tree.map(jnp.copy, state), images, labels, jnp.int32(-1))
  assert int(first_bad) == -1 and loss.dtype == jnp.float32
  assert float(loss) == pytest.approx(want, rel=1e-5)
  assert {x.dtype for x in jax.tree.leaves(new["params"])} == {jnp.dtype(jnp.float32)}
  # The float32 network from the same seed gives another loss: the step did compute in bfloat16.
  model32, state32 = step_lib.init_state(TINY, tx)
  for a, b in zip(jax.tree.leaves(state32["params"]), jax.tree.leaves(state["params"])):
    np.testing.assert_array_equal(a, b)
  full = _step_loss_reference(TINY, model32, state, images, labels, scale=None, include_self=False)
  assert abs(full - want) > 1e-6


def test_a_run_records_its_precision_and_resumes_only_in_it(tmp_path):
  config = dataclasses.replace(HALF, num_steps=2, eval_every=2)
  metrics = train.train_and_evaluate(config, str(tmp_path))
  assert metrics["step"] == 2 and 0 < metrics["map@r"] <= 1
  assert json.loads((tmp_path / "config.json").read_text())["half_precision"] is True
  full = dataclasses.replace(config, half_precision=False)
  with pytest.raises(config_lib.ConfigError, match=r"differs in \['half_precision'\]"):
    train.train_and_evaluate(full, str(tmp_path))
  # Without the workdir's config.json, the checkpoint's own record refuses it, in one line.
  (tmp_path / "config.json").unlink()
  with pytest.raises(config_lib.ConfigError) as error:
    train.train_and_evaluate(full, str(tmp_path))
  message = str(error.value)
  assert "\n" not in message
  assert "was trained computing in bfloat16 and this run computes in float32" in message
  assert "half_precision=True" in message
  manager = checkpoints.checkpoint_manager(config, str(tmp_path))
  try:  # In its own precision it resumes.
    state = step_lib.init_state(config, optimizer_lib.make_optimizer(config))[1]
    restored, _ = checkpoints.restore_latest(manager, state, str(tmp_path), "bfloat16")
    assert int(restored["step"]) == 2
  finally:
    manager.close()


def test_building_and_running_the_step_imports_no_tensorflow():
  """The GPU machines have no TensorFlow: the job's step (`step.make_train_step`, the function
  training runs) is built and run with every TensorFlow import made to fail."""
  script = (
    "import sys\n"
    "sys.modules['tensorflow'] = None\n"  # `import tensorflow` now raises ImportError.
    "sys.modules['tensorflow_datasets'] = None\n"
    "import dataclasses, jax, numpy as np\n"
    "from experiments.job import config as config_lib, optimizer, placement, step\n"
    "for half in (False, True):\n"
    "  c = config_lib.Config(dataset='glyphs_tiny', batch_size=8, samples_per_class=4,\n"
    "                        model_features=(4,), embedding_dim=4, half_precision=half)\n"
    "  tx = optimizer.make_optimizer(c)\n"
    "  model, state = step.init_state(c, tx)\n"
    "  fn = step.make_train_step(c, model, tx, placement.mesh(c))\n"
    "  x = np.random.default_rng(0).random((8, 16, 16, 1), np.float32)\n"
    "  y = np.repeat(np.arange(2), 4)\n"
    "  state, loss, bad = fn(state, x, y, jax.numpy.int32(-1))\n"
    "  assert np.isfinite(float(loss)) and int(bad) == -1\n"
    "print('ok')\n"
  )
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  result = subprocess.run(
    [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
  )
  assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_the_step_donates_its_state_and_a_checkpoint_saved_before_keeps_its_values(tmp_path):
  """The step writes the new state into the buffers of the one it is given; orbax copies the
  arrays to the host before `save` returns, so the checkpoint saved before donating steps (and
  written while they run) restores the values it was given."""
  tx = optimizer_lib.make_optimizer(TINY)
  model, state = step_lib.init_state(TINY, tx)
  images, labels = _first_batch(TINY)
  step = step_lib.make_train_step(TINY, model, tx, None)
  given = state
  state, _, first_bad = step(given, images, labels, jnp.int32(-1))
  assert all(x.is_deleted() for x in jax.tree.leaves(given))  # Donated.
  saved = jax.tree.map(np.array, state)
  manager = checkpoints.checkpoint_manager(TINY, str(tmp_path))
  try:
    # (On the CPU, orbax's host copies may be views of the arrays: JAX then copies instead of
    # donating those. On a GPU or TPU the copy to the host is a transfer, and they are donated.)
    checkpoints.save(manager, 1, state, (0, 1))
    new, _, _ = step(state, images, labels, first_bad)
    for _ in range(3):
      new, _, _ = step(new, images, labels, first_bad)
    manager.wait_until_finished()
    restored, position = checkpoints.restore_latest(manager, saved, str(tmp_path))
  finally:
    manager.close()
  assert position == (0, 1)
  for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(saved)):
    np.testing.assert_array_equal(a, b)
  assert int(new["step"]) == 5


# ---------------------------------------------------------------------------------------------
# Watching a run (issue 52): TensorBoard summaries, the input wait, the logs off a terminal, a
# profiler trace, and the bad input of each, which fails before anything is written.


def _summaries(workdir) -> dict[str, list[tuple[int, Any]]]:
  """Every tag of a run's event files -> its `(step, value)` in the order written, read with
  TensorBoard's own reader, which is told not to purge anything (so that a duplicate would show)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top

  accumulator = event_accumulator.EventAccumulator(
    str(workdir),
    size_guidance={event_accumulator.TENSORS: 0},  # 0: keep every event.
    purge_orphaned_data=False,
  )
  accumulator.Reload()
  return {
    tag: [(e.step, tf.make_ndarray(e.tensor_proto)) for e in accumulator.Tensors(tag)]
    for tag in accumulator.Tags()["tensors"]
  }


def _crash_at_step(monkeypatch, crash_step):
  """Makes the train step raise (as a process that dies would stop) when it runs `crash_step`."""
  make_step = step_lib.make_train_step

  def crashing(*args):
    step_fn = make_step(*args)
    calls = []

    def step(*inputs):
      calls.append(1)
      if len(calls) == crash_step:
        raise RuntimeError("crashed")
      return step_fn(*inputs)

    return step

  monkeypatch.setattr(step_lib, "make_train_step", crashing)


def test_summaries_hold_the_logged_records_once_after_a_crash_and_a_resume(
  tmp_path, monkeypatch, caplog
):
  """A hashing run (so that the tanh scale is logged) crashes in step 5, after logging step 4;
  its checkpoint is step 3. The resumed run drops step 4 and logs it again: every scalar of the
  event files appears once a step and equals the record of metrics.jsonl. Off a terminal, with
  the progress shown, the run logs a plain line per logged step."""
  config = dataclasses.replace(
    TINY,
    head="hashing",
    loss="tie_aware_ap",
    loss_kwargs={"num_bins": 9},
    tanh_every=2,
    checkpoint_every=3,
    progress_bar=True,
  )
  monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
  with monkeypatch.context() as patch:
    _crash_at_step(patch, 5)
    with pytest.raises(RuntimeError, match="crashed"):
      train.train_and_evaluate(config, str(tmp_path))
  assert [s for s, _ in _summaries(tmp_path)["train/loss"]] == [1, 2, 3, 4]
  caplog.clear()
  with caplog.at_level("INFO", logger="experiments"):
    metrics = train.train_and_evaluate(config, str(tmp_path))

  records = reporting.read_metrics(str(tmp_path))
  assert [(r["step"], "loss" in r) for r in records] == [
    (0, False),
    *[(s, True) for s in (1, 2, 3)],
    (3, False),
    *[(s, True) for s in (4, 5, 6)],
    (6, False),
  ]
  summaries = _summaries(tmp_path)
  expected = {}  # tag -> [(step, value)]
  for record in records:
    for tag, value in monitoring.scalars(record).items():
      expected.setdefault(tag, []).append((record["step"], value))
  assert set(summaries) == {*expected, "config"}
  for tag, points in expected.items():
    got = summaries[tag]
    assert [s for s, _ in got] == [s for s, _ in points], tag  # Each step once, in order.
    np.testing.assert_allclose([float(v) for _, v in got], [v for _, v in points], rtol=1e-6)
  assert {"train/loss", "train/learning_rate", "train/images_per_second"} <= set(expected)
  assert {"train/input_wait_fraction", "eval/map@r", "eval/recall@1"} <= set(expected)
  # tanh_scale = tanh_initial * tanh_growth ** ((step - 1) // tanh_every): the step's own scale.
  assert [float(v) for _, v in summaries["train/tanh_scale"]] == [1, 1, 2, 2, 4, 4]
  assert all(0 <= r["input_wait_fraction"] <= 1 for r in records if "loss" in r)
  assert "train/device_memory_gib" not in summaries  # The CPU reports no memory.
  assert metrics["map@r"] == pytest.approx(float(summaries["eval/map@r"][-1][1]), rel=1e-6)
  [(step, text)] = summaries["config"]
  assert step == 0 and b"| loss | `'tie_aware_ap'` |" in text.item()
  lines = [r.getMessage() for r in caplog.records if ": step " in r.getMessage()]
  assert [line.split(",")[0] for line in lines] == [
    f"{tmp_path.name}: step {s}/6" for s in (4, 5, 6)
  ]
  assert "input wait" in lines[0] and "images/s" in lines[0]


def _runs(logdir) -> set[str]:
  """The runs that `tensorboard --logdir <logdir>` lists: the directories below it that hold event
  files, each by its path from `logdir`, found by TensorBoard's own multiplexer."""
  from tensorboard.backend.event_processing import event_multiplexer  # pylint: disable=g-import-not-at-top

  multiplexer = event_multiplexer.EventMultiplexer()
  multiplexer.AddRunsFromDirectory(str(logdir))
  return set(multiplexer.Runs())


def test_a_workdir_of_the_old_layout_resumes_as_one_run_named_by_the_workdir(tmp_path, monkeypatch):
  """Earlier versions wrote the summaries and traces in `<workdir>/tensorboard/`. A run left so,
  crashed in step 5 (its checkpoint step 3), resumes: its old event files are removed, not left as
  a second run `run/tensorboard` beside `run`; the summaries are in the workdir, each logged step
  once; the old trace is moved to `<workdir>/plugins/profile/`, and the old directory is gone."""
  workdir = tmp_path / "run"
  config = dataclasses.replace(TINY, checkpoint_every=3)
  with monkeypatch.context() as patch:
    _crash_at_step(patch, 5)
    with pytest.raises(RuntimeError, match="crashed"):
      train.train_and_evaluate(config, str(workdir))
  assert _runs(tmp_path) == {"run"}
  # The crashed run as an earlier version left it: its event files and a trace in tensorboard/.
  old = workdir / monitoring.OLD_DIRECTORY
  trace = old / "plugins" / "profile" / "2026_11_27_21_00_00"
  trace.mkdir(parents=True)
  (trace / "host.xplane.pb").write_bytes(b"trace")
  for events in workdir.glob("events.out.tfevents.*"):
    events.rename(old / events.name)
  assert _runs(tmp_path) == {"run/tensorboard"}

  train.train_and_evaluate(config, str(workdir))
  assert _runs(tmp_path) == {"run"}
  assert not old.exists()
  assert (workdir / "plugins" / "profile" / trace.name / "host.xplane.pb").read_bytes() == b"trace"
  logged = [r["step"] for r in reporting.read_metrics(str(workdir)) if "loss" in r]
  assert [s for s, _ in _summaries(workdir)["train/loss"]] == logged == [1, 2, 3, 4, 5, 6]


def test_adopting_an_old_directory_keeps_what_it_does_not_move(tmp_path):
  """A trace whose name is taken in the workdir, and any other file, stay in the old directory,
  which is then kept; its event files go all the same."""
  old = tmp_path / monitoring.OLD_DIRECTORY
  for parent in (old, tmp_path):
    (parent / "plugins" / "profile" / "same").mkdir(parents=True)
    (parent / "plugins" / "profile" / "same" / "host.xplane.pb").write_text(parent.name)
  (old / "plugins" / "profile" / "other").mkdir()
  (old / f"{monitoring.EVENT_FILE_PREFIX}1.host").write_text("")
  (old / "notes.txt").write_text("mine")
  monitoring.adopt_old_directory(str(tmp_path))
  left = sorted(str(p.relative_to(old)) for p in old.rglob("*") if p.is_file())
  assert left == ["notes.txt", os.path.join("plugins", "profile", "same", "host.xplane.pb")]
  assert (tmp_path / "plugins" / "profile" / "same" / "host.xplane.pb").read_text() == tmp_path.name
  assert (tmp_path / "plugins" / "profile" / "other").is_dir()
  monitoring.adopt_old_directory(str(tmp_path / "nothing"))  # No old directory: nothing to do.


def test_device_memory_is_logged_where_the_backend_reports_it(monkeypatch):
  class Device:
    def __init__(self, stats):
      self.stats = stats

    def memory_stats(self):
      return self.stats

  if jax.default_backend() == "cpu":
    assert monitoring.device_memory_gib() is None
  for stats, gib in [({"bytes_in_use": 3 * 2**29, "peak_bytes_in_use": 2**31}, 1.5), ({}, None)]:
    monkeypatch.setattr(jax, "local_devices", lambda stats=stats: [Device(stats)])
    assert monitoring.device_memory_gib() == gib


def _record(step, wait):
  return {
    "step": step,
    "loss": 0.5,
    "learning_rate": 1e-3,
    "images_per_second": 100.0,
    "input_wait_fraction": wait,
  }


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_is_a_bar_on_a_terminal_and_a_line_a_log_off_one(
  terminal, monkeypatch, capsys, caplog
):
  monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
  config = dataclasses.replace(TINY, progress_bar=True)
  with caplog.at_level("INFO", logger="experiments"):
    progress = monitoring.Progress(config, 0, "run", primary=True)
    # The first interval (tf.data starting) is not counted; the second is input-bound: one
    # warning, however many follow.
    for step, wait in [(1, 0.9), (2, 0.1), (3, 0.5), (4, 0.6)]:
      progress.update()
      progress.show(_record(step, wait))
    progress.close()
  err = capsys.readouterr().err
  lines = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
  warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
  assert warnings == [
    "run is input-bound: 50% of the logging interval to step 3 went waiting for the next batch "
    "(tf.data) rather than training; give the input pipeline more CPU cores, or keep the images "
    "resized to the crop's size (docs/guide/real_data.rst, 'Input throughput')."
  ]
  if terminal:
    assert not lines
    assert "\r" in err and "loss=0.5000" in err and "wait=60%" in err
  else:
    assert "\r" not in err and "loss=" not in err
    assert lines == [
      f"run: step {s}/6, loss 0.5000, learning rate 0.001, 100 images/s, input wait {w}%"
      for s, w in [(1, 90), (2, 10), (3, 50), (4, 60)]
    ]
  # A run that shows no progress (the tests' tiny runs) shows nothing, warnings included.
  caplog.clear()
  with caplog.at_level("INFO", logger="experiments"):
    quiet = monitoring.Progress(TINY, 0, "run", primary=True)
    for step in (1, 2, 3):
      quiet.update()
      quiet.show(_record(step, 0.9))
    quiet.close()
  assert not caplog.records and capsys.readouterr().err == ""


def test_a_profile_window_writes_a_trace_and_changes_no_result(tmp_path):
  plain = train.train_and_evaluate(TINY, str(tmp_path / "plain"))
  traced_config = dataclasses.replace(TINY, profile_start=3, profile_num_steps=2)
  traced = train.train_and_evaluate(traced_config, str(tmp_path / "traced"))
  [trace] = (tmp_path / "traced" / "plugins" / "profile").iterdir()
  xplanes = list(trace.glob("*.xplane.pb"))
  assert len(xplanes) == 1 and xplanes[0].stat().st_size > 1000
  assert (trace / "perfetto_trace.json.gz").stat().st_size > 1000
  assert not (tmp_path / "plain" / "plugins").exists()
  # The same results: the metrics, every logged value but the timings, and the parameters.
  assert traced == plain
  timings = ("images_per_second", "input_wait_fraction")
  logged = lambda run: [
    {k: v for k, v in r.items() if k not in timings}
    for r in reporting.read_metrics(str(tmp_path / run))
  ]
  assert logged("traced") == logged("plain")
  _assert_same_model(
    train.restore_model(traced_config, str(tmp_path / "traced")),
    train.restore_model(TINY, str(tmp_path / "plain")),
  )


def test_an_unwritable_summaries_directory_fails_before_anything_is_written(tmp_path):
  # The summaries' directory, the workdir, is a file, or is below one.
  workdir = tmp_path / "run"
  workdir.write_text("")
  below_a_file = tmp_path / "file" / "run"
  (tmp_path / "file").write_text("")
  for path in (workdir, below_a_file):
    with pytest.raises(config_lib.ConfigError, match="is not a directory; use a workdir where"):
      train.train_and_evaluate(TINY, str(path))
  assert sorted(os.listdir(tmp_path)) == ["file", "run"] and workdir.read_text() == ""
  if os.geteuid() == 0:  # Root writes anywhere: a directory's mode does not stop it.
    return
  readonly = tmp_path / "readonly"
  readonly.mkdir(mode=0o500)
  try:
    with pytest.raises(config_lib.ConfigError, match="is not writable; use a workdir where"):
      train.train_and_evaluate(TINY, str(readonly / "run"))
    assert os.listdir(readonly) == []
  finally:
    readonly.chmod(0o700)


@pytest.mark.parametrize("module", ["tensorflow", "tensorboard"])
def test_a_writer_that_is_not_installed_fails_in_one_line_before_anything_is_written(
  tmp_path, module, monkeypatch, capsys
):
  monkeypatch.setitem(sys.modules, module, None)  # `import <module>` now raises ImportError.
  workdir = tmp_path / "run"
  with pytest.raises(SystemExit) as exit_info:
    main_lib.main(["--config", TINY_PATH, "--workdir", str(workdir)])
  assert exit_info.value.code == main_lib.EXIT_CONFIG_ERROR
  err = capsys.readouterr().err.strip()
  assert err.count("\n") == 0, err
  assert err.startswith(
    f"experiments.job.main: error: the run writes TensorBoard summaries with "
    f"tf.summary, which needs {module}, not installed here"
  )
  assert not workdir.exists()
