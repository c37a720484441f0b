"""Tests of landmark retrieval's data: the Revisited Oxford/Paris layout and the shape buckets.

The loader reads a miniature of the published layout that the tests write (`gnd_roxford5k.pkl`,
`jpg/*.jpg` of a few pixels, `revisitop1m.txt`); the buckets are checked on their own and, with a
network whose cells see only their stride window, through `jaxrank.models`' masked poolings.
"""

from __future__ import annotations

import dataclasses
import os
import pickle

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from flax import nnx  # noqa: E402
from PIL import Image  # noqa: E402

import jaxrank  # noqa: E402
import jaxrank.data as jd  # noqa: E402
from jaxrank import models  # noqa: E402
from jaxrank.data import landmarks  # noqa: E402

# (height, width) of each image of the miniature.
GALLERY = {"all_souls_000001": (20, 30), "all_souls_000002": (30, 20), "radcliffe_000003": (9, 9)}
QUERIES = {"all_souls_000013": (24, 32), "radcliffe_000031": (16, 12)}
GROUND_TRUTH = [
  # A box inside its image (rounded: x 2..20, y 4..11); one past its right and top edges.
  {"easy": [0], "hard": [1], "junk": [2], "bbx": [2.4, 3.6, 20.2, 11.0]},
  {"easy": np.array([2]), "hard": np.array([], np.int64), "junk": [0], "bbx": (3, -5, 40, 9)},
]


def write_jpeg(path, size, seed=0):
  path.parent.mkdir(parents=True, exist_ok=True)
  pixels = np.random.default_rng(seed).integers(0, 256, size=(*size, 3), dtype=np.uint8)
  path.write_bytes(tf.io.encode_jpeg(tf.constant(pixels)).numpy())


def decoded(path):
  """The image as the reference codes read it: PIL's `Image.open(f).convert("RGB")`."""
  with Image.open(path) as image:
    return np.asarray(image.convert("RGB"))


def write_pickle(path, content):
  with open(path, "wb") as f:
    pickle.dump(content, f)


def ground_truth_file(gnd):
  """The content of a `gnd_<name>.pkl` of the miniature with the query list `gnd`."""
  return {"imlist": list(GALLERY), "qimlist": list(QUERIES), "gnd": gnd}


@pytest.fixture
def roxford(tmp_path):
  """A miniature `roxford5k/` directory: the ground truth pickle and its images."""
  root = tmp_path / "roxford5k"
  for seed, (name, size) in enumerate({**GALLERY, **QUERIES}.items()):
    write_jpeg(root / "jpg" / f"{name}.jpg", size, seed)
  write_pickle(root / "gnd_roxford5k.pkl", ground_truth_file(GROUND_TRUTH))
  return root


def test_load_revisited_reads_the_published_layout(roxford):
  data = jd.load_revisited(roxford, "roxford5k")
  assert data.name == "roxford5k" and data.num_distractors == 0
  assert data.gallery_paths.tolist() == [str(roxford / "jpg" / f"{n}.jpg") for n in GALLERY]
  assert data.query_paths.tolist() == [str(roxford / "jpg" / f"{n}.jpg") for n in QUERIES]
  np.testing.assert_array_equal(data.query_boxes, [[2.4, 3.6, 20.2, 11.0], [3, -5, 40, 9]])
  assert data.query_boxes.dtype == np.float64
  # The pickle's gnd list as it is (bbx included), numpy arrays and lists alike.
  assert isinstance(data.ground_truth, list) and len(data.ground_truth) == 2
  for got, expected in zip(data.ground_truth, GROUND_TRUTH):
    assert got.keys() == expected.keys()
    for key in expected:
      np.testing.assert_array_equal(got[key], expected[key])
  # The ground truth goes to the evaluation as it is.
  rng = np.random.default_rng(0)
  result = jaxrank.evaluate_revisited(
    rng.normal(size=(2, 4)), rng.normal(size=(3, 4)), data.ground_truth, ks=(1,)
  )
  assert set(result) >= {"easy/map", "medium/map", "hard/map"}


def test_query_images_are_cropped_to_their_clamped_boxes(roxford):
  data = jd.load_revisited(roxford, "roxford5k")
  full = decoded(data.query_paths[0])
  np.testing.assert_array_equal(jd.read_query_image(data, 0), full[4:11, 2:20])
  # The second box (3, -5, 40, 9) is past the top and right of its 16 x 12 image: clamped.
  full = decoded(data.query_paths[1])
  np.testing.assert_array_equal(jd.read_query_image(data, 1), full[0:9, 3:12])
  outside = dataclasses.replace(data, query_boxes=np.array([[2.0, 3, 4, 5], [13, 0, 20, 9]]))
  with pytest.raises(ValueError, match=r"query 1's box .* keeps no pixel .*radcliffe_000031.jpg"):
    jd.read_query_image(outside, 1)
  with pytest.raises(ValueError, match="the data set has 2 queries"):
    jd.read_query_image(data, 2)


def test_images_are_capped_on_their_longer_side_never_upscaled(roxford):
  data = jd.load_revisited(roxford, "roxford5k")
  full = decoded(data.gallery_paths[0])  # 20 x 30
  for max_side in (None, 30, 1024):
    np.testing.assert_array_equal(jd.read_gallery_image(data, 0, max_side=max_side), full)
  small = jd.read_gallery_image(data, 0, max_side=15)
  assert small.shape == (10, 15, 3) and small.dtype == np.uint8
  # A uniform-ish check of the content: the means of the capped and full images agree.
  np.testing.assert_allclose(small.mean(), full.mean(), atol=3)
  assert jd.read_gallery_image(data, 1, max_side=10).shape == (10, 7, 3)  # 30 x 20: 10 x 6.67.
  # The 7 x 18 crop of a 24 x 32 image at 9: scaled as the image would be, 18 * 9 / 32 -> 5 wide.
  assert jd.read_query_image(data, 0, max_side=9).shape == (2, 5, 3)
  with pytest.raises(ValueError, match="max_side must be a positive int"):
    jd.read_gallery_image(data, 0, max_side=0)


def _cirtorch_query_size(full_size, box, imsize):
  """The (width, height) of a query as cirtorch's `ImagesFromList` with `bbxs` reads it
  (filipradenovic/cnnimageretrieval-pytorch, `cirtorch/datasets/genericdataset.py` and
  `datahelpers.imresize` at 1e66a417): PIL's crop, then `thumbnail` to `imsize * max(crop.size) /
  max(full.size)`, in PIL itself (Lanczos, cirtorch's `Image.ANTIALIAS`)."""
  image = Image.new("L", full_size).crop(box)
  image.thumbnail((imsize * max(image.size) / max(full_size),) * 2, Image.Resampling.LANCZOS)
  return image.size


def test_query_crops_are_scaled_by_the_full_image_as_cirtorch_does(roxford):
  # The example: a 1200 x 900 image, a 1050 x 800 box, at 1024: 896 x 683 (w x h).
  assert _cirtorch_query_size((1200, 900), (0, 0, 1050, 800), 1024) == (896, 683)
  write_jpeg(roxford / "jpg" / "all_souls_000013.jpg", (900, 1200))
  data = jd.load_revisited(roxford, "roxford5k")
  data = dataclasses.replace(data, query_boxes=np.array([[100.0, 50, 1150, 850], [0, 0, 5, 5]]))
  assert jd.read_query_image(data, 0).shape == (683, 896, 3)
  assert jd.read_query_image(data, 0, max_side=None).shape == (800, 1050, 3)
  # PIL's thumbnail rounding, on random sizes and sides (crops and whole images alike).
  rng = np.random.default_rng(0)
  for _ in range(300):
    width, height = (int(v) for v in rng.integers(1, 90, 2))
    side = float(rng.uniform(1, 100))
    image = Image.new("L", (width, height))
    image.thumbnail((side, side))
    assert landmarks._thumbnail_size(height, width, side) == image.size[::-1], (width, height, side)


@pytest.mark.parametrize("mode, suffix", [("RGB", "jpg"), ("L", "jpg"), ("RGB", "png")])
def test_images_decode_as_pil_decodes_them(tmp_path, mode, suffix):
  rng = np.random.default_rng(1)
  smooth = np.cumsum(rng.integers(-6, 7, size=(61, 83, 3)), axis=1) % 256  # Photo-like content.
  image = Image.fromarray(smooth.astype(np.uint8)).convert(mode)
  path = tmp_path / f"image.{suffix}"
  image.save(path, quality=90) if suffix == "jpg" else image.save(path)
  np.testing.assert_array_equal(jd.read_image(path), decoded(path))  # Bit for bit.
  if mode == "RGB" and suffix == "jpg":  # tf.io.decode_image's fast DCT does not.
    fast = tf.io.decode_image(tf.io.read_file(str(path)), channels=3).numpy()
    assert np.any(fast != decoded(path))


def test_distractors_extend_the_gallery_after_the_data_set(roxford, tmp_path):
  root = tmp_path / "revisitop1m"
  write_jpeg(root / "jpg" / "0" / "d0.jpg", (8, 5), seed=9)
  write_jpeg(root / "jpg" / "1" / "d1.jpg", (6, 6), seed=10)
  (root / "revisitop1m.txt").write_text("0/d0.jpg\n\n1/d1\n")
  data = jd.load_revisited(roxford, "roxford5k")
  extended = jd.with_distractors(data, root)
  assert extended.num_distractors == 2
  assert extended.gallery_paths[:3].tolist() == data.gallery_paths.tolist()
  assert extended.gallery_paths[3:].tolist() == [
    str(root / "jpg" / "0" / "d0.jpg"),
    str(root / "jpg" / "1" / "d1.jpg"),
  ]
  assert extended.ground_truth is data.ground_truth
  assert jd.read_gallery_image(extended, 3).shape == (8, 5, 3)
  (root / "jpg" / "1" / "d1.jpg").unlink()
  with pytest.raises(FileNotFoundError, match=r"1 of the 2 images listed .*d1.jpg"):
    jd.with_distractors(data, root)
  with pytest.raises(FileNotFoundError, match="no distractor list .*revisitop1m.txt"):
    jd.with_distractors(data, tmp_path)


def query(i, drop=(), **changes):
  """Query `i`'s ground truth without the keys `drop`, with `changes`."""
  return {**{k: v for k, v in GROUND_TRUTH[i].items() if k not in drop}, **changes}


BAD_PICKLES = {
  "not_a_dict": ([1, 2], "holds a list, not the dict"),
  "no_gnd": ({"imlist": list(GALLERY), "qimlist": list(QUERIES)}, r"lacks the keys \['gnd'\]"),
  "gnd_too_short": (ground_truth_file([query(0)]), "gnd has 1 entries for the 2 queries"),
  "no_box": (ground_truth_file([query(0, ("bbx",)), query(1)]), r"gnd\[0\] lacks \['bbx'\]"),
  "index_outside": (
    ground_truth_file([query(0, junk=[3]), query(1)]),
    r"gnd\[0\]\['junk'\] must hold integer indices .*into imlist's 3 images",
  ),
  "fractional_index": (
    ground_truth_file([query(0, easy=[0.5]), query(1)]),
    r"gnd\[0\]\['easy'\] must hold integer indices",
  ),
  "empty_box": (
    ground_truth_file([query(0), query(1, bbx=[5, 1, 5, 2])]),
    r"gnd\[1\]\['bbx'\] must be a box",
  ),
  "text_box": (ground_truth_file([query(0, bbx="box"), query(1)]), "must be a box"),
}


@pytest.mark.parametrize("content, message", BAD_PICKLES.values(), ids=BAD_PICKLES.keys())
def test_malformed_ground_truth_names_the_file(roxford, content, message):
  write_pickle(roxford / "gnd_roxford5k.pkl", content)
  with pytest.raises(ValueError, match=f"load_revisited: .*gnd_roxford5k.pkl.*{message}"):
    jd.load_revisited(roxford, "roxford5k")


def test_whole_float_indices_load_as_revisitop_builds_them(roxford):
  # revisitop's example_evaluate.py joins lists with np.concatenate: float64 once one is empty.
  floats = [query(0, easy=np.concatenate([[], [0]])), query(1, hard=np.concatenate([[], []]))]
  write_pickle(roxford / "gnd_roxford5k.pkl", ground_truth_file(floats))
  data = jd.load_revisited(roxford, "roxford5k")
  assert data.ground_truth[0]["easy"].dtype == np.float64


def test_missing_files_name_the_file_and_the_fix(roxford):
  with pytest.raises(FileNotFoundError, match="no ground truth file .*gnd_rparis6k.pkl.* never"):
    jd.load_revisited(roxford, "rparis6k")
  with pytest.raises(ValueError, match="name must be one of"):
    jd.load_revisited(roxford, "roxford")
  (roxford / "gnd_roxford5k.pkl").write_bytes(b"not a pickle")
  with pytest.raises(ValueError, match="gnd_roxford5k.pkl' is not a readable pickle"):
    jd.load_revisited(roxford, "roxford5k")
  write_pickle(roxford / "gnd_roxford5k.pkl", ground_truth_file(GROUND_TRUTH))
  (roxford / "jpg" / "radcliffe_000003.jpg").unlink()
  with pytest.raises(FileNotFoundError, match=r"1 of the 3 images .*radcliffe_000003.jpg.*extract"):
    jd.load_revisited(roxford, "roxford5k")
  (roxford / "jpg" / "all_souls_000001.jpg").write_bytes(b"broken")
  write_jpeg(roxford / "jpg" / "radcliffe_000003.jpg", (9, 9))
  data = jd.load_revisited(roxford, "roxford5k")
  with pytest.raises(ValueError, match="cannot read .*all_souls_000001.jpg' as an image"):
    jd.read_gallery_image(data, 0)


# Shape buckets.


def test_bucket_shape_and_cost():
  assert jd.bucket_shape(700, 1024, multiple=64) == (704, 1024)
  assert jd.bucket_shape(1, 65, multiple=32) == (32, 96)
  sizes = [(1024, 768), (768, 1024), (700, 500), (650, 460), (700, 500)]
  cost = jd.bucket_cost(sizes, multiple=64)
  assert (cost.num_images, cost.num_sizes, cost.num_shapes) == (5, 4, 3)
  own = 2 * 1024 * 768 + 2 * 700 * 500 + 650 * 460
  padded = 2 * 1024 * 768 + 3 * 704 * 512
  assert cost.padded_fraction == pytest.approx(1 - own / padded)
  assert jd.bucket_cost([], multiple=32) == jd.BucketCost(0, 0, 0, 0.0)
  with pytest.raises(ValueError, match="sizes must be a list of"):
    jd.bucket_cost([(1.5, 2.0)])
  with pytest.raises(ValueError, match="multiple must be a positive int"):
    jd.bucket_cost(sizes, multiple=0)


def test_pad_to_buckets_pads_each_image_at_the_top_left():
  rng = np.random.default_rng(0)
  sizes = [(40, 70), (60, 33), (64, 64), (1, 100), (33, 40)]
  images = [rng.integers(1, 256, size=(*s, 3), dtype=np.uint8) for s in sizes]
  buckets = jd.pad_to_buckets(images, multiple=32, fill=0)
  assert [b.images.shape[1:3] for b in buckets] == [(32, 128), (64, 64), (64, 96)]
  assert sorted(np.concatenate([b.indices for b in buckets]).tolist()) == list(range(5))
  for bucket in buckets:
    assert bucket.mask.shape == bucket.images.shape[:3] and bucket.images.dtype == np.uint8
    for row, i in enumerate(bucket.indices):
      h, w = sizes[i]
      assert tuple(bucket.sizes[row]) == (h, w)
      np.testing.assert_array_equal(bucket.images[row, :h, :w], images[i])
      assert bucket.mask[row].sum() == h * w and bucket.mask[row, :h, :w].all()
      assert (bucket.images[row][~bucket.mask[row]] == 0).all()
  assert jd.pad_to_buckets([]) == []
  with pytest.raises(ValueError, match=r"images\[1\] is 1 channels of uint8, images\[0\] 3"):
    jd.pad_to_buckets([images[0], images[1][..., :1]])
  with pytest.raises(ValueError, match=r"images\[0\] must be \[h, w, C\]"):
    jd.pad_to_buckets([images[0][..., 0]])


class PatchNet(nnx.Module):
  """A network whose cells see only their own stride-32 window: a 32 x 32 patch embedding.

  The bottom and right of an image that is no multiple of 32 are zero-padded, as the bucket's
  padding (fill 0) is: the feature map of an image equals the unpadded part of its bucket's.
  """

  def __init__(self):
    self.conv = nnx.Conv(3, 8, (32, 32), strides=32, padding=((0, 31), (0, 31)), rngs=nnx.Rngs(0))

  def __call__(self, x):
    return jax.nn.relu(self.conv(x))


@pytest.mark.parametrize("pool", [models.global_average_pool, models.GeMPool(p=3.0)])
def test_padded_images_pool_as_the_unpadded_ones(pool):
  rng = np.random.default_rng(1)
  sizes = [(40, 70), (60, 33), (64, 64), (33, 97)]
  images = [rng.uniform(-1, 1, size=(*s, 3)).astype(np.float32) for s in sizes]
  net = PatchNet()
  unpadded = np.stack([pool(net(jnp.asarray(image)[None]))[0] for image in images])
  for bucket in jd.pad_to_buckets(images, multiple=64):
    cells = models.feature_map_mask(bucket.mask)
    pooled = pool(net(jnp.asarray(bucket.images)), cells)
    np.testing.assert_allclose(pooled, unpadded[bucket.indices], rtol=1e-5, atol=1e-6)
