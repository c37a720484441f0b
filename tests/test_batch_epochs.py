"""Tests of the batch size at equal epochs (experiments/comparison/batch_epochs.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import reference

from experiments import docs_data
from experiments.comparison import batch_epochs
from experiments.job import config as config_lib
from experiments.job.configs import glyphs

# The glyphs' training split as `plan` reads it: 359 classes of 14 to 21 images (5,879 in all).
_COUNTS = np.random.default_rng(0).integers(14, 22, size=359)
_COUNTS[0] = 21
_LABELS = np.repeat(np.arange(359), _COUNTS)


@pytest.mark.parametrize(
  "batch, sampler, size, k",
  [("64", "m_per_class", 64, 4), ("512", "m_per_class", 512, 4), ("2048", "m_per_class", 2048, 8)],
)
def test_plan_gives_p_x_k_batches_at_equal_epochs(batch, sampler, size, k):
  base = glyphs.get_config()
  config = batch_epochs.plan(base, "fastap", batch, epochs=20, train_labels=_LABELS)
  assert (config.sampler, config.batch_size, config.samples_per_class) == (sampler, size, k)
  assert config.num_steps == round(20 * len(_LABELS) / size)
  assert config.warmup_steps == round(config.num_steps * base.warmup_steps / base.num_steps)
  assert config.eval_every == config.checkpoint_every == config.num_steps
  assert config.loss_kwargs == {"num_intervals": 40}  # The main job's FastAP.
  assert config.loss_block_size == (512 if size >= 2048 else None)
  assert (config.learning_rate, config.model_features) == (base.learning_rate, base.model_features)


def test_plan_takes_the_whole_split_as_one_blocked_batch():
  for loss in batch_epochs.LOSSES:
    config = batch_epochs.plan(glyphs.get_config(), loss, "all", epochs=20, train_labels=_LABELS)
    assert (config.sampler, config.batch_size) == ("random", len(_LABELS))
    assert (config.num_steps, config.loss_block_size) == (20, 512)
    # SmoothAP's bound: the largest class less the query itself.
    assert config.loss_kwargs.get("max_relevant") == (20 if loss == "smoothap" else None)


def test_plan_refuses_what_it_cannot_train():
  with pytest.raises(config_lib.ConfigError, match="loss 'triplet'"):
    batch_epochs.plan(glyphs.get_config(), "triplet", "64", epochs=1, train_labels=_LABELS)
  with pytest.raises(config_lib.ConfigError, match="no P x K geometry"):
    batch_epochs.plan(glyphs.get_config(), "fastap", "100000", epochs=1, train_labels=_LABELS)
  with pytest.raises(SystemExit) as exit_:
    batch_epochs.main(["--batches", "sixty", "--tables-only"])
  assert exit_.value.code == 2


def _in_batch_map(embeddings, labels):
  """The mean over queries with a positive of their AP in the batch, the query left out (numpy)."""
  unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
  scores = unit @ unit.T
  values = []
  for i in range(len(labels)):
    others = np.arange(len(labels)) != i
    relevant = (labels[others] == labels[i]).astype(float)
    if relevant.any():
      values.append(reference.ranking_ap(relevant[np.argsort(-scores[i, others], kind="stable")]))
  return np.mean(values)


def test_decomposability_gap_is_the_batches_map_less_the_whole_s():
  rng = np.random.default_rng(1)
  embeddings = rng.standard_normal((24, 3))
  labels = rng.integers(0, 4, size=24)
  order = np.random.default_rng(batch_epochs.GAP_SEED).permutation(24)
  batches = order[:24].reshape(3, 8)
  expected = np.mean([_in_batch_map(embeddings[b], labels[b]) for b in batches])
  expected -= _in_batch_map(embeddings, labels)
  got = batch_epochs.decomposability_gap_of(embeddings.astype(np.float32), labels, 8)
  np.testing.assert_allclose(got, expected, atol=1e-5)
  assert batch_epochs.decomposability_gap_of(embeddings, labels, 24) == 0.0


def _record(loss, batch, size, steps, r1, gap, epochs=20):
  return {
    "loss": loss,
    "batch": batch,
    "batch_size": size,
    "seed": 0,
    "epochs": epochs,
    "config": {"num_steps": steps},
    "metrics": {"recall@1": r1, "map@r": r1 / 4},
    "gap": gap,
    "seconds": 12.0,
    "date": "2026-12-02",
    "machine": "a machine",
  }


def test_tables_only_writes_the_table_from_the_records_in_order(tmp_path, monkeypatch, capsys):
  records = tmp_path / "records"
  records.mkdir()
  rows = [
    _record("smoothap", "64", 64, 1837, 0.5, 0.4),
    _record("fastap", "all", 5879, 20, 0.2, 0.0),
    _record("fastap", "64", 64, 1837, 0.4, 0.3),
    _record("fastap", "64", 64, 92, 0.1, 0.3, epochs=1),  # Another budget: not in the table.
  ]
  for i, row in enumerate(rows):
    (records / f"{i}.json").write_text(json.dumps(row))
  monkeypatch.setattr(docs_data, "DIRECTORY", tmp_path / "generated")
  batch_epochs.main(["--tables-only", "--records", str(records)])
  assert "fastap | 0 | 64 | 64 | 1,837 | 0.400" in capsys.readouterr().out
  data = json.loads((tmp_path / "generated" / "batch_epochs.json").read_text())
  assert [r[:3] for r in data["rows"]] == [
    ["fastap", "0", "64"],
    ["fastap", "0", "all"],
    ["smoothap", "0", "64"],
  ]
  assert data["source"].startswith("measured: written from the records")
  assert data["machine"] == "a machine"


def test_a_run_with_a_record_is_not_trained_again(tmp_path, monkeypatch, capsys):
  # The tiny config (the digits, 5 training classes): one value trains for real, then a second
  # call finds its record and trains nothing.
  calls = []
  real = batch_epochs.run_one

  def counting(*args):
    calls.append(args[1])
    return real(*args)

  monkeypatch.setattr(batch_epochs, "run_one", counting)
  argv = [
    "--config", "experiments/job/configs/tiny.py", "--losses", "fastap", "--batches", "8",
    "--epochs", "1", "--records", str(tmp_path / "records"), "--workdir", str(tmp_path / "runs"),
  ]  # fmt: skip
  batch_epochs.main(argv)
  batch_epochs.main(argv)
  assert len(calls) == 1
  (record,) = batch_epochs.read_records(str(tmp_path / "records"))
  assert (record["batch_size"], record["epochs"], record["loss"]) == (8, 1, "fastap")
  assert set(record["metrics"]) == {"recall@1", "map@r"} and np.isfinite(record["gap"])
  assert "fastap | 0 | 8 | 8 |" in capsys.readouterr().out
