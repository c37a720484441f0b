"""Tests of the glyph data set (jaxrank.data.load_glyphs) and a tiny training run on it."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from jaxrank.data import glyphs

# Its expensive fixtures are session-scoped and its tests kept on one pytest-xdist worker (`make
# test`): a module-scoped fixture is set up again whenever the worker returns to the module.
pytestmark = pytest.mark.xdist_group("test_glyphs")

# Few classes (the characters 20 of the 21 typefaces draw), small images: generated in ~1 s.
SMALL = {"min_typefaces": 20, "image_size": 16}


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("glyphs"))


@pytest.fixture(scope="session")
def splits(cache):
  return glyphs.load_glyphs("train", cache_dir=cache, **SMALL), glyphs.load_glyphs(
    "test", cache_dir=cache, **SMALL
  )


def test_splits_hold_disjoint_classes_with_consistent_super_classes(splits):
  train, test = splits
  assert not set(train.labels.tolist()) & set(test.labels.tolist())
  for data in splits:
    assert data.images.dtype == np.float32 and data.images.shape[1:] == (16, 16, 1)
    assert data.labels.dtype == np.int32 and data.super_labels.dtype == np.int32
    # Each class lies in exactly one super-class.
    pairs = set(zip(data.labels.tolist(), data.super_labels.tolist()))
    assert len(pairs) == len(set(data.labels.tolist()))
  # The same super-classes in both splits (half of each one's characters train).
  assert set(test.super_labels.tolist()) == set(train.super_labels.tolist())


def test_images_are_not_blank_and_differ_across_typefaces(splits):
  for data in splits:
    assert data.images.min() >= 0.0 and data.images.max() <= 1.0
    assert (data.images.reshape(len(data.labels), -1).max(axis=1) > 0.2).all()
    # At least min_typefaces images per class (one per typeface), pairwise distinct.
    for c in np.unique(data.labels)[:10]:
      images = data.images[data.labels == c].reshape(-1, 16 * 16)
      assert len(images) >= 20
      assert len(np.unique(images, axis=0)) == len(images)


def test_characters_are_letters_digits_or_symbols_not_blank_classes(splits):
  for data in splits:
    for c in set(data.labels.tolist()):
      assert glyphs._drawable(chr(c)), hex(c)


def test_deterministic_for_a_seed_and_different_for_another(cache, tmp_path):
  again = glyphs.load_glyphs("test", cache_dir=str(tmp_path), **SMALL)  # Generated anew.
  first = glyphs.load_glyphs("test", cache_dir=cache, **SMALL)
  np.testing.assert_array_equal(again.images, first.images)
  np.testing.assert_array_equal(again.labels, first.labels)
  np.testing.assert_array_equal(again.super_labels, first.super_labels)
  other = glyphs.load_glyphs("test", cache_dir=str(tmp_path), seed=1, **SMALL)
  np.testing.assert_array_equal(other.labels, first.labels)  # Same classes: the split is fixed.
  assert not np.array_equal(other.images, first.images)


def test_copies_multiply_the_images(tmp_path):
  one = glyphs.load_glyphs("train", cache_dir=str(tmp_path), min_typefaces=21, image_size=8)
  two = glyphs.load_glyphs(
    "train", cache_dir=str(tmp_path), min_typefaces=21, image_size=8, copies=2
  )
  assert len(two.labels) == 2 * len(one.labels)
  np.testing.assert_array_equal(np.sort(two.labels), np.sort(np.tile(one.labels, 2)))


def test_the_cache_is_used_and_keyed_by_the_parameters(tmp_path, monkeypatch):
  calls = []
  render = glyphs._render_faces

  def counting(*args):
    calls.append(1)
    return render(*args)

  monkeypatch.setattr(glyphs, "_render_faces", counting)
  params = {"min_typefaces": 21, "image_size": 8}
  first = glyphs.load_glyphs("train", cache_dir=str(tmp_path), **params)
  assert len(calls) == 1
  assert len(os.listdir(tmp_path)) == 2  # Both splits, from one drawing; no temporary left.
  again = glyphs.load_glyphs("train", cache_dir=str(tmp_path), **params)
  glyphs.load_glyphs("test", cache_dir=str(tmp_path), **params)
  assert len(calls) == 1  # Read back, not drawn again.
  np.testing.assert_array_equal(again.images, first.images)
  glyphs.load_glyphs("train", cache_dir=str(tmp_path), strength=0.5, **params)
  assert len(calls) == 2  # Other parameters, another file.
  assert len(os.listdir(tmp_path)) == 4


def test_without_noise_the_background_is_exactly_zero(tmp_path):
  params = {"min_typefaces": 21, "image_size": 8, "cache_dir": str(tmp_path)}
  clean = glyphs.load_glyphs("train", noise=0.0, **params)
  noisy = glyphs.load_glyphs("train", **params)
  background = lambda images: np.mean(images == 0)
  assert background(clean.images) > 0.3  # Most of each image is untouched background.
  # Noise below 0 is clipped and the weakest rounds to 0 in uint8: it darkens about half of it.
  assert background(noisy.images) < background(clean.images) - 0.15


def test_missing_fonts_raise_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="load_glyphs: the typefaces .* matplotlib"):
    glyphs.load_glyphs("train", cache_dir=str(tmp_path), font_dir=str(tmp_path), **SMALL)


@pytest.mark.parametrize(
  "kwargs, error",
  [
    ({"split": "val"}, ValueError),
    ({"min_typefaces": 0}, ValueError),
    ({"min_typefaces": 22}, ValueError),
    ({"image_size": 12.0}, TypeError),
    ({"copies": 0}, ValueError),
    ({"strength": -1.0}, ValueError),
    ({"noise": -0.1}, ValueError),
    ({"noise": 2.0}, ValueError),
  ],
)
def test_bad_arguments_raise(kwargs, error, tmp_path):
  kwargs = {"split": "train", **kwargs}
  with pytest.raises(error, match="load_glyphs"):
    glyphs.load_glyphs(cache_dir=str(tmp_path), **kwargs)


def test_a_tiny_training_run_on_glyphs(tmp_path, monkeypatch):
  from experiments.job import datasets  # pylint: disable=g-import-not-at-top
  from experiments.job import train  # pylint: disable=g-import-not-at-top
  from experiments.job.configs import tiny  # pylint: disable=g-import-not-at-top

  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
  monkeypatch.setattr(datasets, "GLYPHS_PARAMS", {"min_typefaces": 20, "image_size": 16})
  datasets._LOADED.clear()
  config = dataclasses.replace(
    tiny.get_config(),
    dataset="glyphs",
    sampler="super_class",
    batch_size=16,
    samples_per_class=4,
    super_classes_per_batch=1,
    num_steps=2,
    eval_every=2,
    checkpoint_every=2,
  )
  try:
    metrics = train.train_and_evaluate(config, str(tmp_path / "run"))
  finally:
    datasets._LOADED.clear()
  assert metrics["step"] == config.num_steps
  for key in ("recall@1", "map@r", "map"):
    assert 0.0 <= metrics[key] <= 1.0, key
