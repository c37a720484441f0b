"""The job on He et al. 2018's hashing benchmarks (`experiments/job/datasets.py`: `cifar10_1k`,
`cifar10_10k`, `cifar10_10k_tfds`, `nuswide`, `nuswide_he2018`, `imagenet100`): their splits and
protocol, and a tiny hashing run on a small NUS-WIDE written in DeepHash-pytorch's 21-label
layout, evaluated by `jaxrank.evaluate_hashing`.

Nothing downloads: CIFAR-10 runs under `testing.mock_retrieval_data`, the list files and images
are written in tmp_path.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import dataclasses  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from experiments.job import config as config_lib  # noqa: E402
from experiments.job import datasets  # noqa: E402
from experiments.job import reporting  # noqa: E402
from experiments.job import train  # noqa: E402
from jaxrank.data import hashing_data  # noqa: E402
from jaxrank.data import testing  # noqa: E402

HASHING = config_lib.Config(
  dataset="nuswide",
  model="small_convnet",
  model_features=(4, 8),
  head="hashing",
  embedding_dim=12,
  loss="tie_aware_ap",
  loss_kwargs={"num_bins": 13},
  sampler="random",
  batch_size=8,
  num_steps=1,
  warmup_steps=1,
  eval_every=1,
  checkpoint_every=1,
  image_size=16,
  resize_size=16,
  eval_batch_size=32,
  progress_bar=False,
)


@pytest.mark.parametrize(
  "name,sizes",
  [("cifar10_1k", (20, 40, 20)), ("cifar10_10k", (20, 40, 40)), ("cifar10_10k_tfds", (30, 30, 30))],
)
def test_cifar10_settings_rank_the_database(name, sizes, monkeypatch):
  monkeypatch.setattr(hashing_data, "CIFAR10_QUERIES_PER_CLASS", 2)
  monkeypatch.setattr(hashing_data, "CIFAR10_TRAIN_PER_CLASS", 2)
  monkeypatch.setattr(hashing_data, "CIFAR10_SETTING2_QUERIES_PER_CLASS", 2)
  config = dataclasses.replace(HASHING, dataset=name, data_dir="/nonexistent")
  mock = testing.mock_retrieval_data(classes_per_split=10, images_per_class=3, image_size=(32, 32))
  with mock:
    splits = datasets.DATASETS[name].load(config)
  (evaluation,) = splits.evaluations.values()
  assert evaluation.hashing_ks == ()
  assert (len(evaluation.queries), len(evaluation.gallery), splits.train.num_examples) == sizes
  assert not np.intersect1d(evaluation.queries, evaluation.gallery).size


def test_nuswide_trains_with_multi_hot_labels_and_is_evaluated_by_hashing(tmp_path):
  root = testing.write_nuswide(tmp_path / "data", sizes=(42, 21, 42))
  config = dataclasses.replace(HASHING, data_dir=root)
  splits = datasets.load_splits(config)
  assert splits.train.labels.shape == (42, 21)
  assert splits.evaluations[""].hashing_ks == (5000,)
  metrics = train.train_and_evaluate(config, str(tmp_path / "run"))
  assert sorted(metrics) == ["map@5000", "step", "tie_aware_map", "tie_aware_ndcg"]
  assert all(0 <= metrics[k] <= 1 for k in metrics if k != "step")
  table = reporting.format_table({"ap_r": metrics})
  assert table.split("\n")[0].split() == ["run", "mAP_T", "NDCG_T", "mAP@5000"]
  with pytest.raises(config_lib.ConfigError, match="multi-label"):
    whole = dataclasses.replace(config, sampler="m_per_class", samples_per_class=4)
    train.check_run(whole, str(tmp_path / "other"))


@pytest.mark.parametrize("layout", ["pytorch", "caffe"])
def test_imagenet100_is_evaluated_at_1000(tmp_path, layout):
  # Either of HashNet's layouts, their paths' prefixes dropped by the job.
  root = testing.write_imagenet100(
    tmp_path, images_per_class=(1, 2, 1), num_classes=4, layout=layout
  )
  splits = datasets.load_splits(dataclasses.replace(HASHING, dataset="imagenet100", data_dir=root))
  (evaluation,) = splits.evaluations.values()
  assert evaluation.hashing_ks == (1000,)
  np.testing.assert_array_equal(splits.test.labels[evaluation.gallery], [0, 1, 2, 3] * 2)


def test_nuswide_he2018_is_drawn_from_the_data_sets_files(tmp_path, monkeypatch):
  monkeypatch.setattr(hashing_data, "NUSWIDE_QUERIES_PER_LABEL", 1)
  monkeypatch.setattr(hashing_data, "NUSWIDE_TRAIN_PER_LABEL", 2)
  testing.write_nuswide_he2018(tmp_path, images=126, unlabelled=3)
  config = dataclasses.replace(HASHING, dataset="nuswide_he2018", data_dir=str(tmp_path))
  splits = datasets.load_splits(config)
  (evaluation,) = splits.evaluations.values()
  assert (len(evaluation.queries), len(evaluation.gallery), splits.train.num_examples) == (
    21,
    105,
    42,
  )
  assert evaluation.hashing_ks == (5000,)
