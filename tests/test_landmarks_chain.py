"""Tests of the landmark chain: the miniature's files, Revaud et al.'s config, the chain end to end.

The miniature (`jaxrank.data.testing.write_landmark_miniature`) is written once, small (32-48
pixel scenes, three test landmarks), and read back by `jaxrank.data`'s loaders; the chain
(`experiments/landmarks/`) trains a few steps on it and prints its table.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import jaxrank.data as jd  # noqa: E402
from experiments.job import check  # noqa: E402
from experiments.job.configs import revaud_landmarks  # noqa: E402
from experiments.landmarks import chain  # noqa: E402
from experiments.landmarks import main as landmarks_main  # noqa: E402
from jaxrank.data import testing  # noqa: E402

TINY = {
  "num_landmarks": 3,
  "num_training_landmarks": 4,
  "queries_per_landmark": 2,
  "roles_per_landmark": (2, 2, 1),
  "num_negatives": 3,
  "num_distractors": 3,
  "training_images_per_landmark": 4,
  "test_images_per_landmark": 2,
  "min_side": 32,
  "max_side": 48,
  "seed": 1,
}


@pytest.fixture(scope="module")
def miniature(tmp_path_factory):
  root = tmp_path_factory.mktemp("miniature")
  return testing.write_landmark_miniature(root, **TINY)


def test_the_miniature_loads_and_its_ground_truth_is_what_each_image_shows(miniature):
  data = jd.load_revisited(miniature.revisited, miniature.name)
  # 3 landmarks x (2 easy + 2 hard + 1 junk) + 3 negatives; 3 x 2 queries.
  assert len(data.gallery_paths) == 18 and len(data.query_paths) == 6
  roles, landmarks = miniature.gallery_roles, miniature.gallery_landmarks
  for q, entry in enumerate(data.ground_truth):
    k = miniature.query_landmarks[q]
    for role in ("easy", "hard", "junk"):
      np.testing.assert_array_equal(
        sorted(entry[role]), np.flatnonzero((landmarks == k) & (roles == role))
      )
    assert len(entry["easy"]) == 2 and len(entry["hard"]) == 2 and len(entry["junk"]) == 1
    crop = jd.read_query_image(data, q)  # The box lies inside its image.
    x1, y1, x2, y2 = data.query_boxes[q]
    assert crop.shape == (round(y2) - round(y1), round(x2) - round(x1), 3)
  for i in range(len(data.gallery_paths)):
    height, width, _ = jd.read_gallery_image(data, i).shape
    assert 32 <= height <= 48 and 32 <= width <= 48 and height != width
  assert (roles == "none").sum() == 3 and (landmarks[roles == "none"] == -1).all()
  more = jd.with_distractors(data, miniature.distractors)
  assert more.num_distractors == 3 and len(more.gallery_paths) == 21
  train = jd.load_image_folder(os.path.join(miniature.image_folder, "train"))
  test = jd.load_image_folder(os.path.join(miniature.image_folder, "test"))
  assert (train.num_classes, train.num_examples, test.num_classes) == (4, 16, 3)


def test_the_miniature_is_the_same_from_the_same_seed(miniature, tmp_path):
  again = testing.write_landmark_miniature(tmp_path, **TINY)
  for name in ("scene_0000.jpg", "query_000.jpg"):
    with (
      open(os.path.join(miniature.revisited, "jpg", name), "rb") as a,
      open(os.path.join(again.revisited, "jpg", name), "rb") as b,
    ):
      assert a.read() == b.read()
  np.testing.assert_array_equal(again.gallery_roles, miniature.gallery_roles)


def test_the_miniature_refuses_bad_arguments(tmp_path):
  with pytest.raises(ValueError, match="write_landmark_miniature: name must be one of"):
    testing.write_landmark_miniature(tmp_path, name="oxford")
  with pytest.raises(ValueError, match="multiples of 16"):
    testing.write_landmark_miniature(tmp_path, min_side=40)
  with pytest.raises(ValueError, match="at least one easy or hard"):
    testing.write_landmark_miniature(tmp_path, roles_per_landmark=(0, 0, 2))


def test_revaud_config_and_the_miniature_config_validate(tmp_path):
  config = revaud_landmarks.get_config()
  assert (config.model, config.pooling, config.loss, config.batch_size) == (
    "resnet101",
    "gem",
    "soft_binning_ap",
    4096,
  )
  assert config.loss_kwargs == {"num_bins": 20} and config.batch_size % config.chunk_size == 0
  for split in ("train", "test"):
    (tmp_path / split).mkdir()
  check.check_config(config.__class__(**{**config.__dict__, "data_dir": str(tmp_path)}))
  check.check_config(landmarks_main.miniature_config(str(tmp_path)))


def test_the_chain_runs_end_to_end_and_tables_every_row(tmp_path, capsys):
  workdir = str(tmp_path / "run")
  rows = landmarks_main.run(
    workdir,
    arguments=TINY,
    overrides=[
      "num_steps=1",
      "batch_size=8",
      "samples_per_class=2",
      "image_size=32",
      "resize_size=32",
      "model_features=(8, 16)",
      "embedding_dim=8",
      "eval_every=1",
      "checkpoint_every=1",
      "progress_bar=False",
    ],
  )
  networks = [r[0] for r in rows]
  assert networks == ["untrained"] * 6 + ["trained"] * 6
  assert [r[1] for r in rows[:6]] == [w for w in chain.WHITENINGS for _ in range(2)]
  assert all(len(r) == len(chain.COLUMNS) for r in rows)
  values = np.array([r[3:] for r in rows], dtype=float)
  assert np.isfinite(values).all() and (values >= 0).all() and (values <= 100).all()
  table = chain.format_table(rows)
  assert table.count("\n") == 13 and "| trained | sqrt PCA-w (p 0.25) | alpha-QE" in table
  landmarks_main.write(workdir, rows, 1.0, docs=False)
  with open(os.path.join(workdir, "landmarks.json")) as f:
    record = json.load(f)
  assert record["columns"] == list(chain.COLUMNS) and len(record["rows"]) == 12
  # A rerun reuses the miniature it wrote (its arguments recorded), and refuses another one.
  test_set, _ = landmarks_main.miniature(workdir, TINY)
  assert jd.load_revisited(test_set.revisited, test_set.name).query_paths.size == 6
  with pytest.raises(ValueError, match="other arguments"):
    landmarks_main.miniature(workdir, {**TINY, "seed": 2})
