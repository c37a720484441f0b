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
import pathlib  # noqa: E402

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


def test_the_hashing_convention_reaches_evaluate_hashing_and_is_checked():
  import jaxrank  # pylint: disable=g-import-not-at-top
  from experiments.job import check  # pylint: disable=g-import-not-at-top
  from experiments.job import evaluation  # pylint: disable=g-import-not-at-top
  from experiments.job import protocols  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(0)
  codes = np.where(rng.random((30, 4)) < 0.5, 1.0, -1.0).astype(np.float32)
  labels = rng.integers(0, 3, 30)
  protocol = {"": protocols.Evaluation(np.arange(6), np.arange(6, 30), hashing_ks=(1, 5))}
  for convention in protocols.HASHING_CONVENTIONS:
    for averaged_over in protocols.HASHING_AVERAGED_OVER:
      config = dataclasses.replace(
        HASHING, hashing_convention=convention, hashing_averaged_over=averaged_over
      )
      got = evaluation.retrieval_metrics(config, codes, labels, protocol, codes=True)
      want = jaxrank.evaluate_hashing(
        codes[:6],
        codes[6:],
        labels[:6],
        labels[6:],
        ks=(1, 5),
        convention=convention,
        averaged_over=averaged_over,
      )
      assert got == want
  assert got["map@1"] == 0.0  # "released": no rank-1 term.
  for field in ("hashing_convention", "hashing_averaged_over"):
    with pytest.raises(config_lib.ConfigError, match=f"config.{field}='tie_aware' is not known"):
      check.check_config(dataclasses.replace(HASHING, dataset="digits", **{field: "tie_aware"}))


def test_he_et_al_tables_use_the_released_rule():
  """The configs of He et al.'s tables compute AP@k as the code that printed them (TALR's
  `+eval/AP.m`), over every query; the default is the textbook rule."""
  from experiments.job import main as main_lib  # pylint: disable=g-import-not-at-top

  folder = pathlib.Path(__file__).resolve().parent.parent / "experiments/job/configs"
  configs = sorted(folder.glob("tie_aware_*.py"))
  assert len(configs) == 5
  for path in configs:
    config = main_lib.load_config_module(str(path)).get_config()
    assert (config.hashing_convention, config.hashing_averaged_over) == ("released", "all")
  default = config_lib.Config()
  assert (default.hashing_convention, default.hashing_averaged_over) == (
    "textbook",
    "relevant_in_database",
  )


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
