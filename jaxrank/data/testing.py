"""Small fake data sets, for tests and benchmarks that must not download.

Four kinds: fake tfds builders (`mock_retrieval_data`, below: SOP, CUB-200-2011, Cars196,
CIFAR-10); small copies of data sets published as files, written in their published layout for
the loaders of `jaxrank.data.image_lists` (`write_inshop`, `write_vehicleid`, `write_inat2018`:
a few tiny JPEG images per class, the lists as published); the hashing benchmarks' list files
with small JPEG images for `jaxrank.data.hashing_data` (`write_nuswide`, `write_nuswide_he2018`,
`write_imagenet100`); and a
miniature landmark retrieval data set in the Revisited Oxford/Paris layout, with distractors and
a training image folder (`write_landmark_miniature`: synthetic buildings shown easy, hard or
junk, from a seed).

`tfds.testing.mock_data` replaces a builder's data with random examples, but its default examples do
not fit retrieval: every split gets the same examples (the split is ignored), class ids are drawn
uniformly among all classes (SOP's 22,634, so a class almost never repeats and no P x K batch can be
built), and SOP's `super_class_id` is drawn independently of `class_id`. `mock_retrieval_data`
passes `mock_data` an `as_dataset_fn` that builds, for each builder and split, examples with the
real label structure: SOP's train and test splits hold disjoint classes, each in one of the 12
super-classes; CUB's and Cars196's tfds `train` and `test` splits both hold every class (their
classification split). Images are small random PNGs, encoded and decoded by tfds's own features.

>>> from jaxrank.data import datasets, testing
>>> with testing.mock_retrieval_data(images_per_class=2, classes_per_split=4):
...   test = datasets.load_stanford_online_products("/nonexistent", split="test")
>>> test.labels.tolist(), test.image_format
([4, 4, 5, 5, 6, 6, 7, 7], 'encoded')
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import pickle
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import tensorflow as tf

from jaxrank._src import checks
from jaxrank.data import landmarks

_NUM_CLASSES = {
  "stanford_online_products": 22634,
  "caltech_birds2011": 200,
  "cars196": 196,
  "cifar10": 10,
}
_LABEL_KEY = {
  "stanford_online_products": "class_id",
  "caltech_birds2011": "label",
  "cars196": "label",
  "cifar10": "label",
}


def fake_labels(name: str, split: str, *, classes_per_split: int, images_per_class: int):
  """The `(labels, super_labels or None)` that `mock_retrieval_data` gives a builder's split.

  SOP: `train` holds classes `0 .. c - 1`, `test` classes `c .. 2c - 1` (`c = classes_per_split`),
  class `i` in super-class `i % 12`. CUB, Cars196 and CIFAR-10: both splits hold `c` classes
  spread evenly over all classes (0 and the last included), so both halves of the class-disjoint
  split are there (CIFAR-10 with `c = 10`: every class in each split, as the real one).
  """
  if name == "stanford_online_products":
    start = 0 if split == "train" else classes_per_split
    classes = np.arange(start, start + classes_per_split)
    labels = np.repeat(classes, images_per_class)
    return labels, labels % 12
  if name in _NUM_CLASSES:
    classes = np.unique(np.linspace(0, _NUM_CLASSES[name] - 1, classes_per_split).astype(int))
    return np.repeat(classes, images_per_class), None
  raise ValueError(
    f"fake_labels: no fake data for builder {name!r}; known: {sorted(_NUM_CLASSES)}."
  )


def _fake_as_dataset(
  self,
  split,
  decoders=None,
  read_config=None,
  shuffle_files=False,
  *,
  classes_per_split: int,
  images_per_class: int,
  image_size: tuple[int, int],
):
  """Stands in for `FileReaderBuilder._as_dataset`; tfds's features encode and decode examples."""
  del read_config, shuffle_files
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  features = self.info.features
  if isinstance(decoders, tfds.decode.PartialDecoding):
    features = decoders.extract_features(features)
    decoders = decoders.decoders
  labels, supers = fake_labels(
    self.name, str(split), classes_per_split=classes_per_split, images_per_class=images_per_class
  )
  rng = np.random.default_rng(len(labels) + (0 if str(split) == "train" else 1))
  h, w = image_size
  examples = []
  for i, label in enumerate(labels):
    example: dict[str, np.ndarray | int] = {}
    for key in features:
      if key == "image":
        # Smooth random images (a coarse grid upsampled) compress like photographs, unlike noise.
        coarse = rng.integers(0, 256, size=(h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
        example[key] = np.repeat(np.repeat(coarse, 8, axis=0), 8, axis=1)[:h, :w]
      elif key == _LABEL_KEY[self.name]:
        example[key] = int(label)
      elif key == "super_class_id" or key == "super_class_id/num":
        example[key] = int(supers[i])
      else:
        raise ValueError(f"mock_retrieval_data: no fake value for feature {key!r} of {self.name}.")
    examples.append(features.encode_example(example))
  specs = tf.nest.map_structure(
    lambda s: tf.TensorSpec(s.shape, s.dtype), features.get_serialized_info()
  )
  ds = tf.data.Dataset.from_generator(lambda: iter(examples), output_signature=specs)
  return ds.map(functools.partial(features.decode_example, decoders=decoders))


@contextlib.contextmanager
def mock_retrieval_data(
  *,
  classes_per_split: int = 8,
  images_per_class: int = 4,
  image_size: tuple[int, int] = (24, 32),
) -> Iterator[None]:
  """Within the block, the tfds builders read fake retrieval data and never touch disk or network.

  Works for `stanford_online_products`, `caltech_birds2011`, `cars196` and `cifar10` read through
  the loaders of `jaxrank.data` (which decode only the image and label fields); for CIFAR-10
  (`load_cifar10`) pass `classes_per_split=10` and `image_size=(32, 32)`. Labels are those of
  `fake_labels`; images are smooth random `image_size` RGB images.

  Args:
    classes_per_split: classes in each tfds split.
    images_per_class: images of each class in each split.
    image_size: `(height, width)` of the fake images.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  height, width = image_size
  fake = functools.partial(
    _fake_as_dataset,
    classes_per_split=classes_per_split,
    images_per_class=images_per_class,
    image_size=(height, width),
  )

  def as_dataset_fn(self, split, decoders=None, read_config=None, shuffle_files=False):
    return fake(self, split, decoders, read_config, shuffle_files)

  with tfds.testing.mock_data(as_dataset_fn=as_dataset_fn, policy=tfds.testing.MockPolicy.USE_CODE):
    yield


# A miniature landmark retrieval data set, written in the published layouts.

# Colours of the landmarks and of the clutter around them (RGB in [0, 1]): the same palette for
# both, so that colour alone does not tell a landmark from the clutter.
_PALETTE = np.array(
  [
    [0.85, 0.15, 0.15],
    [0.95, 0.55, 0.10],
    [0.95, 0.85, 0.20],
    [0.30, 0.70, 0.20],
    [0.10, 0.55, 0.55],
    [0.15, 0.35, 0.85],
    [0.50, 0.20, 0.70],
    [0.90, 0.45, 0.70],
    [0.95, 0.95, 0.92],
    [0.15, 0.15, 0.18],
    [0.55, 0.35, 0.20],
    [0.60, 0.62, 0.65],
  ],
  np.float32,
)
_SHAPES = ("block", "roofed", "dome", "tower", "arch")
_PATTERNS = ("stripes", "checker", "windows", "rings", "dots")

# How each role shows its landmark, as ranges drawn uniformly: the landmark's height as a
# fraction of the scene's, the fraction of it hidden by an occluder, and its brightness. Each role
# draws one of its forms at random.
_ROLES = {
  "query": [{"height": (0.5, 0.8), "hidden": (0.0, 0.0), "light": (0.9, 1.1)}],
  "easy": [{"height": (0.45, 0.8), "hidden": (0.0, 0.0), "light": (0.85, 1.15)}],
  "hard": [
    {"height": (0.2, 0.3), "hidden": (0.0, 0.0), "light": (0.85, 1.15)},  # Small.
    {"height": (0.4, 0.7), "hidden": (0.4, 0.55), "light": (0.85, 1.15)},  # Half hidden.
    {"height": (0.35, 0.6), "hidden": (0.0, 0.2), "light": (0.45, 0.6)},  # In the dark.
  ],
  "junk": [
    {"height": (0.07, 0.12), "hidden": (0.0, 0.0), "light": (0.85, 1.15)},  # Barely visible.
    {"height": (0.4, 0.7), "hidden": (0.75, 0.85), "light": (0.85, 1.15)},  # Nearly all hidden.
  ],
}


@dataclasses.dataclass(frozen=True)
class _Structure:
  """A building of the miniature: a silhouette, a facade pattern and its colours."""

  shape: int
  pattern: int
  colours: tuple[int, int, int]  # Facade, its pattern, the roof.
  aspect: float  # Width over height.
  angle: float  # The stripes' direction (radians).
  frequency: float  # Repeats of the pattern across the facade.


def _random_structure(rng: np.random.Generator) -> _Structure:
  colours = rng.choice(len(_PALETTE), size=3, replace=False)
  return _Structure(
    shape=int(rng.integers(len(_SHAPES))),
    pattern=int(rng.integers(len(_PATTERNS))),
    colours=(int(colours[0]), int(colours[1]), int(colours[2])),
    aspect=float(rng.uniform(0.55, 1.5)),
    angle=float(rng.choice([0.0, 0.25, 0.5, 0.75]) * np.pi),
    frequency=float(rng.uniform(2.5, 6.0)),
  )


def _landmarks(rng: np.random.Generator, count: int) -> list[_Structure]:
  """`count` structures that differ in silhouette, pattern or facade colours."""
  found: dict[tuple[int, int, int, int], _Structure] = {}
  while len(found) < count:
    s = _random_structure(rng)
    found.setdefault((s.shape, s.pattern, s.colours[0], s.colours[1]), s)
  return list(found.values())


def _silhouette(shape: int, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """`(inside, roof)` boolean masks of a silhouette at box coordinates `u, v` in `[0, 1]`
  (`v = 0` at the top)."""
  box = (u >= 0) & (u <= 1) & (v >= 0) & (v <= 1)
  du = np.abs(u - 0.5)
  if _SHAPES[shape] == "roofed":
    roof = (v < 0.3) & (du < v / 0.3 * 0.5)
    return box & ((v >= 0.3) | roof), box & roof
  if _SHAPES[shape] == "dome":
    roof = (v < 0.35) & (du**2 + ((0.35 - v) / 0.35 * 0.4) ** 2 < 0.16)
    return box & ((v >= 0.35) | roof), box & roof
  if _SHAPES[shape] == "tower":
    roof = (v < 0.2) & (du < v)
    return box & (((v >= 0.2) & (du < 0.2)) | roof), box & roof
  if _SHAPES[shape] == "arch":
    hole = ((v > 0.65) & (du < 0.18)) | (du**2 + (v - 0.65) ** 2 < 0.18**2)
    return box & ~hole, box & (v < 0.12)
  return box, box & (v < 0.1)  # A block under a flat roof line.


def _facade(s: _Structure, u: np.ndarray, v: np.ndarray) -> np.ndarray:
  """Where the facade takes its pattern's colour (boolean), at box coordinates `u, v`."""
  f, name = s.frequency, _PATTERNS[s.pattern]
  if name == "stripes":
    return np.mod((u * np.cos(s.angle) + v * np.sin(s.angle)) * f, 1.0) < 0.5
  if name == "checker":
    return (np.floor(u * f) + np.floor(v * f * 1.5)) % 2 == 1
  if name == "windows":
    across, down = np.mod(u * f, 1.0) - 0.5, np.mod(v * f * 1.5, 1.0) - 0.5
    return (np.abs(across) < 0.25) & (np.abs(down) < 0.3)
  if name == "rings":
    return np.mod(np.hypot(u - 0.5, v - 0.5) * 2 * f, 1.0) < 0.5
  return (np.mod(u * f, 1.0) - 0.5) ** 2 + (np.mod(v * f, 1.0) - 0.5) ** 2 < 0.09  # Dots.


def _draw(canvas, s: _Structure, centre, height, *, angle=0.0, light=1.0, hidden=0.0, rng=None):
  """Draws structure `s` on `canvas [H, W, 3]` (in place) centred at `centre (y, x)`, `height`
  pixels tall, rotated by `angle`, its colours times `light`; with `hidden > 0` an occluder of
  clutter covers that fraction of it (from a side chosen by `rng`). Returns the boolean mask of
  its visible pixels."""
  h, w = canvas.shape[:2]
  y, x = np.mgrid[0:h, 0:w].astype(np.float32) + 0.5
  dy, dx = y - centre[0], x - centre[1]
  cos, sin = np.cos(angle), np.sin(angle)
  width = height * s.aspect
  u = (cos * dx + sin * dy) / width + 0.5
  v = (-sin * dx + cos * dy) / height + 0.5
  inside, roof = _silhouette(s.shape, u, v)
  colour = np.where(_facade(s, u, v)[..., None], _PALETTE[s.colours[1]], _PALETTE[s.colours[0]])
  colour = np.where(roof[..., None], _PALETTE[s.colours[2]], colour)
  visible = inside
  if hidden > 0 and rng is not None:
    side = int(rng.integers(3))  # The occluder comes from the left, the right or below.
    cover = (u < hidden) if side == 0 else (u > 1 - hidden) if side == 1 else (v > 1 - hidden)
    visible = inside & ~cover
  canvas[visible] = np.clip(colour[visible] * light, 0.0, 1.0)
  if hidden > 0 and rng is not None:
    occluder = inside & ~visible
    canvas[occluder] = _PALETTE[rng.integers(len(_PALETTE))] * rng.uniform(0.5, 0.9)
  return visible


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
  """Sky above ground, with low-frequency shading: `[h, w, 3]` in `[0, 1]`."""
  y, x = np.mgrid[0:h, 0:w].astype(np.float32)
  sky = rng.uniform(0.55, 0.95, size=(2, 3)).astype(np.float32)
  t = (y / h)[..., None]
  canvas = sky[0] * (1 - t) + sky[1] * t
  horizon = int(h * rng.uniform(0.65, 0.85))
  canvas[horizon:] = rng.uniform(0.15, 0.5, size=3)
  for _ in range(3):
    fy, fx, phase = rng.uniform(0.5, 3.0), rng.uniform(0.5, 3.0), rng.uniform(0, 2 * np.pi)
    canvas += 0.04 * np.sin(2 * np.pi * (fy * y / h + fx * x / w) + phase)[..., None]
  return canvas


def _scene(rng, h, w, landmark=None, role="easy"):
  """A scene `[h, w, 3]` in `[0, 1]`: background, clutter (buildings that are no landmark, trees)
  and, if given, `landmark` shown as `role` says; also its visible box `(x1, y1, x2, y2)`."""
  canvas = _background(rng, h, w)
  for _ in range(int(rng.integers(1, 4))):  # Buildings that are no landmark.
    height = h * rng.uniform(0.2, 0.6)
    centre = (h * rng.uniform(0.3, 0.8), w * rng.uniform(0.1, 0.9))
    _draw(canvas, _random_structure(rng), centre, height, angle=rng.uniform(-0.1, 0.1))
  box = None
  if landmark is not None:
    form = _ROLES[role][int(rng.integers(len(_ROLES[role])))]
    height = h * rng.uniform(*form["height"])
    height = min(height, 0.9 * w / landmark.aspect)
    half_w, half_h = 0.5 * height * landmark.aspect, 0.5 * height
    centre = (rng.uniform(half_h, h - half_h), rng.uniform(half_w, w - half_w))
    visible = _draw(
      canvas,
      landmark,
      centre,
      height,
      angle=rng.uniform(-0.1, 0.1),
      light=rng.uniform(*form["light"]),
      hidden=rng.uniform(*form["hidden"]),
      rng=rng,
    )
    ys, xs = np.nonzero(visible)
    if ys.size:
      box = (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))
  for _ in range(int(rng.integers(0, 3))):  # Trees in front.
    cy, cx, r = h * rng.uniform(0.6, 1.0), w * rng.uniform(0, 1), h * rng.uniform(0.05, 0.15)
    y, x = np.mgrid[0:h, 0:w]
    canvas[(y - cy) ** 2 + ((x - cx) * 1.5) ** 2 < r**2] = [0.1, rng.uniform(0.3, 0.5), 0.1]
  canvas += rng.normal(0.0, 0.02, size=canvas.shape)
  return np.clip(canvas, 0.0, 1.0), box


def _scene_size(rng: np.random.Generator, min_side: int, max_side: int) -> tuple[int, int]:
  """`(h, w)`, multiples of 16 in `[min_side, max_side]`, never square."""
  sides = np.arange(min_side, max_side + 1, 16)
  while True:
    h, w = rng.choice(sides, size=2)
    if h != w or len(sides) == 1:
      return int(h), int(w)


def _write_scene(path: str, image: np.ndarray) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  pixels = tf.convert_to_tensor(np.round(image * 255).astype(np.uint8))
  tf.io.write_file(path, tf.io.encode_jpeg(pixels, quality=90))


@dataclasses.dataclass(frozen=True)
class LandmarkMiniature:
  """Where `write_landmark_miniature` wrote each part, and what each gallery image shows.

  Attributes:
    revisited: the test set's directory, for `jaxrank.data.load_revisited(revisited, name)`.
    name: its name (`gnd_<name>.pkl`).
    distractors: the distractors' directory, for `jaxrank.data.with_distractors`.
    image_folder: the training set, `train/<landmark>/<k>.jpg` and `test/<landmark>/<k>.jpg`
      (class-disjoint landmarks), for `jaxrank.data.load_image_folder` and the training job's
      `image_folder` data set (its `data_dir`).
    gallery_landmarks: int `[N]` the test landmark each gallery image shows, -1 for none.
    gallery_roles: str `[N]` how it shows it: `"easy"`, `"hard"`, `"junk"` or `"none"`.
    query_landmarks: int `[Q]` the landmark of each query.
  """

  revisited: str
  name: str
  distractors: str
  image_folder: str
  gallery_landmarks: np.ndarray
  gallery_roles: np.ndarray
  query_landmarks: np.ndarray


def write_landmark_miniature(
  root: str | os.PathLike,
  *,
  name: str = "roxford5k",
  num_landmarks: int = 8,
  num_training_landmarks: int = 24,
  queries_per_landmark: int = 3,
  roles_per_landmark: tuple[int, int, int] = (4, 4, 2),
  num_negatives: int = 40,
  num_distractors: int = 60,
  training_images_per_landmark: int = 12,
  test_images_per_landmark: int = 6,
  min_side: int = 96,
  max_side: int = 192,
  seed: int = 0,
) -> LandmarkMiniature:
  """Writes a miniature landmark retrieval data set in the Revisited Oxford/Paris layout.

  Landmarks are synthetic buildings, each a silhouette (block, roofed, dome, tower, arch), a
  facade pattern (stripes, checker, windows, rings, dots) and three colours of one palette. A
  scene (sides multiples of 16 in `[min_side, max_side]`, never square) is sky and ground with
  low-frequency shading, one to three buildings that are no landmark (drawn from the same
  palette, silhouettes and patterns), trees, noise, and at most one landmark, slightly rotated,
  shown as its role says:

  ========  ======================================================================
  role      the landmark
  ========  ======================================================================
  query     45-80% of the scene's height, whole; the query's `bbx` is its box
  easy      45-80% of the height, whole
  hard      20-30% of the height, or 40-55% hidden, or in the dark (45-60% light)
  junk      7-12% of the height, or 75-85% hidden: barely there
  ========  ======================================================================

  Written under `root` (JPEG, quality 90; the layout of `jaxrank.data.landmarks`)::

    <name>/gnd_<name>.pkl      imlist, qimlist, gnd: {easy, hard, junk, bbx} per query
    <name>/jpg/scene_0000.jpg ...    the gallery: each test landmark's easy, hard and junk
                                     scenes and `num_negatives` scenes without a landmark
    <name>/jpg/query_000.jpg ...     the queries (not in the gallery)
    distractors/revisitop1m.txt, distractors/jpg/...   scenes without a landmark
    training/train/<landmark>/<k>.jpg   other landmarks, easy or hard (half each)
    training/test/<landmark>/<k>.jpg    further landmarks, for the training job's test split

  The three sets of landmarks (`num_landmarks` in the ground truth, `num_training_landmarks`
  in `training/train`, as many as the ground truth's in `training/test`) are disjoint, as
  Landmarks-clean holds no Oxford or Paris building. Everything is drawn from `seed` with numpy:
  the same arguments write the same files. Time: about 5 ms a scene.

  Args:
    root: the directory to write into (created if absent).
    name: the ground truth's name, one of `jaxrank.data.landmarks.NAMES`.
    num_landmarks: landmarks of the test set.
    num_training_landmarks: landmarks of `training/train`.
    queries_per_landmark: queries of each test landmark.
    roles_per_landmark: `(easy, hard, junk)` gallery scenes of each test landmark.
    num_negatives: gallery scenes without a landmark.
    num_distractors: scenes in `distractors/`.
    training_images_per_landmark: scenes of each landmark of `training/train`.
    test_images_per_landmark: scenes of each landmark of `training/test`.
    min_side: the shortest side of a scene, a multiple of 16, at least 32.
    max_side: the longest, a multiple of 16, at least `min_side`.
    seed: the seed of everything drawn.

  Returns:
    A `LandmarkMiniature`: the directories and what each gallery image shows.

  Raises:
    ValueError: an unknown `name`; a count that is not a positive int (or a negative one for
      `num_negatives`, `roles_per_landmark`); sides that are not multiples of 16.
  """
  fn = "write_landmark_miniature"
  _check_miniature(fn, name, locals())
  rng = np.random.default_rng(seed)
  structures = _landmarks(rng, 2 * num_landmarks + num_training_landmarks)
  test_set, training = structures[:num_landmarks], structures[num_landmarks:]
  root = os.fspath(root)
  revisited = os.path.join(root, name)

  def sizes() -> tuple[int, int]:
    return _scene_size(rng, min_side, max_side)

  listed = [
    (k, role)
    for k in range(num_landmarks)
    for role, n in zip(("easy", "hard", "junk"), roles_per_landmark)
    for _ in range(n)
  ] + [(-1, "none")] * num_negatives
  listed = [listed[i] for i in rng.permutation(len(listed))]
  for i, (k, role) in enumerate(listed):
    image, _ = _scene(rng, *sizes(), test_set[k] if k >= 0 else None, role)
    _write_scene(os.path.join(revisited, "jpg", f"scene_{i:04d}.jpg"), image)
  landmarks = np.array([k for k, _ in listed], np.int64)
  roles = np.array([role for _, role in listed])
  query_landmarks = np.repeat(np.arange(num_landmarks), queries_per_landmark)
  queries = [(test_set[k], _listed(landmarks, roles, k)) for k in query_landmarks.tolist()]
  _write_queries(rng, sizes, revisited, name, queries, len(listed))
  distractors = os.path.join(root, "distractors")
  _write_distractors(rng, sizes, distractors, num_distractors)
  image_folder = os.path.join(root, "training")
  for k, structure in enumerate(training):
    split = "train" if k < num_training_landmarks else "test"
    count = training_images_per_landmark if split == "train" else test_images_per_landmark
    for j in range(count):
      image, _ = _scene(rng, *sizes(), structure, ("easy", "hard")[j % 2])
      _write_scene(os.path.join(image_folder, split, f"landmark_{k:03d}", f"{j:03d}.jpg"), image)
  return LandmarkMiniature(
    revisited=revisited,
    name=name,
    distractors=distractors,
    image_folder=image_folder,
    gallery_landmarks=landmarks,
    gallery_roles=roles,
    query_landmarks=query_landmarks,
  )


def _listed(landmarks: np.ndarray, roles: np.ndarray, k: int) -> dict[str, list[int]]:
  """The ground truth lists of landmark `k`: its gallery indices by role."""
  return {
    r: np.flatnonzero((landmarks == k) & (roles == r)).tolist() for r in ("easy", "hard", "junk")
  }


def _write_queries(
  rng: np.random.Generator,
  sizes: Callable[[], tuple[int, int]],
  directory: str,
  name: str,
  queries,
  num_gallery: int,
) -> None:
  """Writes each query `(landmark, its lists)` of `queries` as a scene, and the ground truth of
  the gallery's `num_gallery` scenes."""
  ground_truth = []
  for q, (landmark, lists) in enumerate(queries):
    image, box = _scene(rng, *sizes(), landmark, "query")
    _write_scene(os.path.join(directory, "jpg", f"query_{q:03d}.jpg"), image)
    ground_truth.append({**lists, "bbx": list(box)})
  imlist = [f"scene_{i:04d}" for i in range(num_gallery)]
  content = {
    "imlist": imlist,
    "qimlist": [f"query_{q:03d}" for q in range(len(queries))],
    "gnd": ground_truth,
  }
  with open(os.path.join(directory, f"gnd_{name}.pkl"), "wb") as f:
    pickle.dump(content, f)


def _write_distractors(
  rng: np.random.Generator, sizes: Callable[[], tuple[int, int]], directory: str, count: int
) -> None:
  """Writes `count` scenes without a landmark and their list, `revisitop1m.txt`."""
  os.makedirs(directory, exist_ok=True)
  for i in range(count):
    image, _ = _scene(rng, *sizes())
    _write_scene(os.path.join(directory, "jpg", f"distractor_{i:04d}.jpg"), image)
  with open(os.path.join(directory, "revisitop1m.txt"), "w", encoding="utf-8") as listing:
    listing.writelines(f"distractor_{i:04d}.jpg\n" for i in range(count))


def _check_miniature(fn: str, name: str, arguments: dict) -> None:
  """The arguments of `write_landmark_miniature`, checked."""
  if name not in landmarks.NAMES:
    raise ValueError(f"{fn}: name must be one of {landmarks.NAMES}, got {name!r}.")
  for key in (
    "num_landmarks",
    "num_training_landmarks",
    "queries_per_landmark",
    "training_images_per_landmark",
    "test_images_per_landmark",
  ):
    checks.check_positive_int(fn, key, arguments[key])
  for key in ("num_negatives", "num_distractors", "seed"):
    checks.check_int_at_least(fn, key, arguments[key], 0)
  roles = arguments["roles_per_landmark"]
  if len(roles) != 3 or min(roles) < 0 or roles[0] + roles[1] < 1:
    raise ValueError(
      f"{fn}: roles_per_landmark must be (easy, hard, junk) counts, not negative, with at least "
      f"one easy or hard scene (a positive), got {roles!r}."
    )
  low, high = arguments["min_side"], arguments["max_side"]
  if low % 16 or high % 16 or not 32 <= low <= high:
    raise ValueError(
      f"{fn}: min_side and max_side must be multiples of 16 with 32 <= min_side <= max_side, got "
      f"{low} and {high}."
    )


# ---------------------------------------------------------------------------------------------
# HashNet's list files (jaxrank.data.hashing_data), written with small images.


def _label_line(path: str, row: np.ndarray) -> str:
  """A line of HashNet's lists: the path, then the 0/1 labels, separated by single spaces."""
  return path + " " + " ".join(str(int(v)) for v in row)


def _flickr_name(rng: np.random.Generator, i: int) -> str:
  """A NUS-WIDE image name as its files give them: `<4 digits>_<Flickr photo id>.jpg`."""
  return f"{i % 10000:04d}_{int(rng.integers(10**8, 10**10))}.jpg"


def _nuswide_labels(size: int, rng: np.random.Generator) -> np.ndarray:
  """`[size, 21]` 0/1 labels, 1 to 3 per image; image `i` has label `i % 21`."""
  labels = np.zeros((size, 21), np.int32)
  labels[np.arange(size), np.arange(size) % 21] = 1
  extra = rng.integers(0, 21, size=(size, 2))
  keep = rng.random((size, 2)) < 0.5
  for j in range(2):
    labels[np.arange(size)[keep[:, j]], extra[keep[:, j], j]] = 1
  return labels


def write_nuswide(
  root: str | os.PathLike,
  *,
  sizes: tuple[int, int, int] = (42, 21, 84),
  image_size: int = 16,
  write_images: bool = True,
  seed: int = 0,
) -> str:
  """Writes a small NUS-WIDE in DeepHash-pytorch's 21-label layout under `root` (`load_nuswide`).

  `train.txt`, `test.txt` and `database.txt` as swuxyj/DeepHash-pytorch's `data/nuswide_21/`
  hold them: one image a line, `images/<4 digits>_<photo id>.jpg` and 21 labels of 0/1, all
  separated by single spaces, a newline after every line. `sizes` = (train, query, other): the
  database lists the training images, then `other` more (as DeepHash-pytorch's `code.py` makes
  it: everything but the queries); the images are small JPEGs under `root/images/`, each with 1
  to 3 of the 21 labels (image `i` of a split has label `i % 21`). `write_images=False` writes
  the lists only (the full size, `sizes=(10500, 2100, 183234)`, for benchmarks).

  Returns:
    `root`, as a str.
  """
  root = os.fspath(root)
  rng = np.random.default_rng(seed)
  lines: dict[str, list[str]] = {}
  count = 0
  for split, size in zip(("train", "query", "other"), sizes):
    lines[split] = []
    for row in _nuswide_labels(size, rng):
      name = "images/" + _flickr_name(rng, count)
      count += 1
      if write_images:
        _write_jpeg(os.path.join(root, name), rng, image_size)
      lines[split].append(_label_line(name, row))
  for split, listed in (
    ("train", lines["train"]),
    ("query", lines["query"]),
    ("database", lines["train"] + lines["other"]),
  ):
    _write_text(os.path.join(root, _hashing_list_name(split)), listed)
  return root


def _hashing_list_name(split: str) -> str:
  from jaxrank.data import hashing_data  # pylint: disable=g-import-not-at-top

  return hashing_data.LIST_FILES[split]


def write_nuswide_he2018(
  root: str | os.PathLike,
  *,
  images: int = 120,
  unlabelled: int = 10,
  crlf: bool = False,
  image_size: int = 16,
  write_images: bool = True,
  seed: int = 0,
) -> np.ndarray:
  """Writes a small NUS-WIDE in the layout of its own files (`load_nuswide_he2018`).

  `root/Imagelist.txt` (one path a line, `C:\\ImageData\\Flickr\\<tag>\\<4 digits>_<photo
  id>.jpg`, as NUS-WIDE's ImageList.zip gives it), `root/AllLabels81.txt` (a line of 81 0/1
  labels separated by spaces per image, in the same order) and the JPEGs under `root/Flickr/`.
  The first `images` images carry 1 to 3 labels among the 21 most frequent (columns 60 down to
  40, so the top 21 are not the first 21 columns), the last `unlabelled` only rarer labels
  (one of columns 0-9 each, which no kept image has; their images are not written: the loader
  drops them first). `crlf`: Windows line ends. `write_images=False` writes the two files only
  (the full size, `images=195834, unlabelled=73814`, for benchmarks).

  Returns:
    `[images, 81]` the labels of the images with a frequent label, in file order.
  """
  root = os.fspath(root)
  rng = np.random.default_rng(seed)
  frequent = np.arange(60, 39, -1)  # 21 columns.
  labels = np.zeros((images + unlabelled, 81), np.int32)
  labels[:images, frequent] = _nuswide_labels(images, rng)
  labels[np.arange(images, images + unlabelled), rng.integers(0, 10, size=unlabelled)] = 1
  labels[0, 70] = 1  # A rare label beside a frequent one: kept, the rare one dropped.
  tags = ("actor", "airport", "animal")
  paths, rows = [], []
  for i, row in enumerate(labels):
    relative = f"Flickr/{tags[i % len(tags)]}/{_flickr_name(rng, i)}"
    if i < images and write_images:
      _write_jpeg(os.path.join(root, relative), rng, image_size)
    paths.append("C:\\ImageData\\" + relative.replace("/", "\\"))
    rows.append(" ".join(str(int(v)) for v in row))
  end = "\r\n" if crlf else "\n"
  for name, lines in (("Imagelist.txt", paths), ("AllLabels81.txt", rows)):
    with open(os.path.join(root, name), "w", encoding="utf-8", newline="") as f:
      f.write("".join(line + end for line in lines))
  return labels[:images]


def write_imagenet100(
  root: str | os.PathLike,
  *,
  images_per_class: tuple[int, int, int] = (1, 1, 1),
  num_classes: int = 100,
  layout: str = "pytorch",
  image_size: int = 16,
  write_images: bool = True,
  database_size: int | None = None,
  seed: int = 0,
) -> str:
  """Writes a small ImageNet100 in one of HashNet's layouts under `root` (`load_imagenet100`).

  The images: `root/image/<wnid>_<n>.JPEG` (training images) and
  `root/val_image/ILSVRC2012_val_<8 digits>.JPEG` (queries), small JPEGs. `images_per_class` =
  (train, query, other) images of each of the first `num_classes` classes; the database lists
  the training images, then the others (HashNet's database holds its training set). Each list
  line is a path and a one-hot vector of 100, separated by single spaces, as thuml/HashNet's
  lists:

  * `layout="pytorch"` (`pytorch/data/imagenet/`): `train.txt`, `test.txt`, `database.txt`,
    paths `/home/caozhangjie/run-czj/dataset/imagenet/image/...` (the authors' machine);
  * `layout="caffe"` (`caffe/data/imagenet/`): `train.txt` and `test/test0.txt` ... `test7.txt`,
    `test/database0.txt` ... `database7.txt` (each list cut in 8 parts in order, the last parts
    the shorter), paths `./data/imagenet/image/...`.

  `database_size` (if given) is the database's size, the training images included, the others
  spread over the classes as evenly as possible (HashNet's full size: `images_per_class=(130, 50,
  0)`, `database_size=128503`). `write_images=False` writes the lists only (the full size in
  seconds, for the parser's tests and benchmarks).

  Returns:
    `root`, as a str.
  """
  from jaxrank.data import hashing_data  # pylint: disable=g-import-not-at-top

  if layout not in ("pytorch", "caffe"):
    raise ValueError(f"write_imagenet100: layout must be 'pytorch' or 'caffe', got {layout!r}.")
  root = os.fspath(root)
  rng = np.random.default_rng(seed)
  prefix = hashing_data.HASHNET_IMAGENET_PREFIXES[0 if layout == "pytorch" else 1]
  wnids = [f"n{int(w):08d}" for w in rng.choice(10**7, size=num_classes, replace=False)]
  lines: dict[str, list[str]] = {}
  n = int(rng.integers(1, 10**4))  # Image numbers, distinct.
  counts = [np.full(num_classes, k) for k in images_per_class]
  if database_size is not None:
    others = database_size - num_classes * images_per_class[0]
    counts[2] = np.diff(np.linspace(0, others, num_classes + 1).round().astype(int))
  for split, count in zip(("train", "query", "other"), counts):
    lines[split] = []
    for c in np.repeat(np.arange(num_classes), count).tolist():
      n += 1
      name = (
        f"val_image/ILSVRC2012_val_{n:08d}.JPEG"
        if split == "query"
        else f"image/{wnids[c]}_{n}.JPEG"
      )
      if write_images:
        _write_jpeg(os.path.join(root, name), rng, image_size)
      lines[split].append(_label_line(prefix + name, np.eye(100, dtype=np.int32)[c]))
  lines["database"] = lines["train"] + lines.pop("other")
  _write_text(os.path.join(root, "train.txt"), lines["train"])
  for split in ("query", "database"):
    stem = hashing_data.LIST_FILES[split]
    if layout == "pytorch":
      _write_text(os.path.join(root, stem), lines[split])
      continue
    for i, part in enumerate(np.array_split(np.asarray(lines[split], object), 8)):
      _write_text(os.path.join(root, "test", stem.replace(".txt", f"{i}.txt")), part.tolist())
  return root


# ---------------------------------------------------------------------------------------------
# Small copies of data sets published as files, in their published layout.


def _write_jpeg(path: str, rng: np.random.Generator, size: int) -> None:
  """A smooth random `size x size` RGB JPEG at `path` (its folders made)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  coarse = rng.integers(0, 256, size=(size // 4 + 1, size // 4 + 1, 3), dtype=np.uint8)
  image = np.repeat(np.repeat(coarse, 4, axis=0), 4, axis=1)[:size, :size]
  with open(path, "wb") as f:
    f.write(tf.io.encode_jpeg(image).numpy())


def _write_text(path: str, lines: Sequence[str]) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in lines))


def write_inshop(
  root: str | os.PathLike,
  *,
  train_items: int = 4,
  test_items: int = 4,
  images_per_item: int = 2,
  categories: Sequence[str] = ("MEN/Denim", "WOMEN/Dresses"),
  image_size: int = 16,
  seed: int = 0,
) -> None:
  """Writes a small In-Shop Clothes Retrieval in its published layout (`jaxrank.data.load_inshop`).

  `root/Eval/list_eval_partition.txt` (count, header, one line per image, columns padded with
  spaces as published) and `root/img/<category>/id_<8 digits>/<nn>_1_front.jpg`. Items are
  numbered 1, 2, ... (the train items first), item `i` in category `categories[(i - 1) %
  len(categories)]`. The train items' images are all `train`; each test item's images alternate
  `query` and `gallery`, starting with a query, so query and gallery share the test items.

  Args:
    root: the directory to write into (made if absent).
    train_items: items of the train split.
    test_items: items of the query and gallery splits.
    images_per_item: images of each item, at least 2 (a test item needs a query and a gallery
      image).
    categories: the categories (`<MEN|WOMEN>/<Category>`) the items are spread over.
    image_size: the side of the square images.
    seed: the images' random seed.
  """
  if images_per_item < 2:
    raise ValueError(f"write_inshop: images_per_item must be at least 2, got {images_per_item}.")
  root = os.fspath(root)
  rng = np.random.default_rng(seed)
  rows = []
  for item in range(1, train_items + test_items + 1):
    category = categories[(item - 1) % len(categories)]
    for n in range(images_per_item):
      relative = f"img/{category}/id_{item:08d}/{n + 1:02d}_1_front.jpg"
      _write_jpeg(os.path.join(root, relative), rng, image_size)
      status = "train" if item <= train_items else ("query" if n % 2 == 0 else "gallery")
      rows.append((relative, item, status))
  _write_inshop_lines(os.path.join(root, "Eval", "list_eval_partition.txt"), rows)


def _write_inshop_lines(path: str, rows: Sequence[tuple[str, int, str]]) -> None:
  """`list_eval_partition.txt` of `(relative path, item, status)` rows: the count, the header,
  one line per image, columns padded with spaces."""
  lines = [f"{relative:<60}{f'id_{item:08d}':<20}{status}" for relative, item, status in rows]
  header = f"{'image_name':<60}{'item_id':<20}evaluation_status"
  _write_text(path, [str(len(lines)), header, *lines])


def _spread(total: int, parts: int) -> np.ndarray:
  """`parts` counts summing to `total`, as equal as they can be (the first the larger)."""
  return np.full(parts, total // parts) + (np.arange(parts) < total % parts)


def write_inshop_partition(
  path: str | os.PathLike,
  *,
  train: tuple[int, int] = (3997, 25882),
  test: tuple[int, int, int] = (3985, 14218, 12612),
  categories: Sequence[str] = ("MEN/Denim", "WOMEN/Dresses", "WOMEN/Blouses_Shirts"),
) -> None:
  """Writes In-Shop's `list_eval_partition.txt` alone, at the published size by default.

  `train` = (items, images) and `test` = (items, queries, gallery images), each item's images
  as equal in number as they can be (every test item with a query and a gallery image), in the
  format of `write_inshop` (no image is written: for the parser's tests and benchmarks). Items
  are numbered 1, 2, ... (the train items first), item `i` in category `categories[(i - 1) %
  len(categories)]`.
  """
  rows = []
  train_counts = _spread(train[1], train[0])
  query_counts, gallery_counts = _spread(test[1], test[0]), _spread(test[2], test[0])
  statuses = [["train"] * k for k in train_counts] + [
    ["query"] * q + ["gallery"] * g for q, g in zip(query_counts, gallery_counts)
  ]
  for item, listed in enumerate(statuses, start=1):
    category = categories[(item - 1) % len(categories)]
    for n, status in enumerate(listed):
      rows.append((f"img/{category}/id_{item:08d}/{n + 1:02d}_1_front.jpg", item, status))
  _write_inshop_lines(os.fspath(path), rows)


def write_vehicleid(
  root: str | os.PathLike,
  *,
  train_vehicles: int = 6,
  test_vehicles: tuple[int, int, int] = (2, 3, 4),
  images_per_vehicle: int = 2,
  num_models: int = 2,
  image_size: int = 16,
  seed: int = 0,
) -> None:
  """Writes a small PKU VehicleID in its published layout (`jaxrank.data.load_vehicleid`).

  `root/image/<7-digit image id>.jpg`, `root/train_test_split/train_list.txt` and
  `test_list_{800,1600,2400}.txt` (lines `<image id> <vehicle id>`), and
  `root/attribute/model_attr.txt` (lines `<vehicle id> <model id>`). Vehicles are numbered 1,
  2, ... (the train vehicles first); the test lists are nested, as their sizes grow: the small
  list holds the first `test_vehicles[0]` test vehicles, the medium the first
  `test_vehicles[1]`, the large the first `test_vehicles[2]`. Every third vehicle (3, 6, ...) has
  no model; the others have model `vehicle % num_models`.

  Args:
    root: the directory to write into (made if absent).
    train_vehicles: vehicles of the train list.
    test_vehicles: vehicles of the small, medium and large test lists (non-decreasing).
    images_per_vehicle: images of each vehicle.
    num_models: the vehicle models the modelled vehicles are spread over.
    image_size: the side of the square images.
    seed: the images' random seed.
  """
  if list(test_vehicles) != sorted(test_vehicles) or len(test_vehicles) != 3:
    raise ValueError(
      f"write_vehicleid: test_vehicles must be three non-decreasing counts, got {test_vehicles}."
    )
  root = os.fspath(root)
  rng = np.random.default_rng(seed)
  image_id = 0
  lines: dict[int, list[str]] = {}
  for vehicle in range(1, train_vehicles + test_vehicles[2] + 1):
    lines[vehicle] = []
    for _ in range(images_per_vehicle):
      image_id += 1
      _write_jpeg(os.path.join(root, "image", f"{image_id:07d}.jpg"), rng, image_size)
      lines[vehicle].append(f"{image_id:07d} {vehicle}")
  split = os.path.join(root, "train_test_split")
  train = range(1, train_vehicles + 1)
  _write_text(os.path.join(split, "train_list.txt"), [x for v in train for x in lines[v]])
  for count, name in zip(test_vehicles, ("800", "1600", "2400")):
    test = range(train_vehicles + 1, train_vehicles + count + 1)
    _write_text(os.path.join(split, f"test_list_{name}.txt"), [x for v in test for x in lines[v]])
  models = [f"{v} {v % num_models}" for v in lines if v % 3]
  _write_text(os.path.join(root, "attribute", "model_attr.txt"), models)


def write_inat2018(
  root: str | os.PathLike,
  *,
  train_classes: int = 4,
  test_classes: int = 2,
  images_per_class: int = 2,
  supercategories: Sequence[str] = ("Aves", "Plantae"),
  image_size: int = 16,
  seed: int = 0,
) -> None:
  """Writes a small iNaturalist-2018 with Brown et al.'s split lists (`jaxrank.data.load_inat2018`).

  `root/train_val2018/<supercategory>/<category id>/<hash>.jpg` and
  `root/Inat_dataset_splits/Inaturalist_{train,test}_set1.txt`, one image path per line relative
  to `root`. Categories are numbered 0, 1, ... (the train classes first), category `c` in
  `supercategories[c % len(supercategories)]`; image names are 32 hexadecimal digits, as
  published.

  Args:
    root: the directory to write into (made if absent).
    train_classes: categories of the train list.
    test_classes: categories of the test list.
    images_per_class: images of each category.
    supercategories: names among `jaxrank.data.image_lists.INAT2018_SUPERCATEGORIES`.
    image_size: the side of the square images.
    seed: the images' random seed (and names').
  """
  root = os.fspath(root)
  rng = np.random.default_rng(seed)
  lists: dict[str, list[str]] = {"train": [], "test": []}
  for category in range(train_classes + test_classes):
    supercategory = supercategories[category % len(supercategories)]
    for _ in range(images_per_class):
      name = "".join(f"{b:02x}" for b in rng.integers(0, 256, 16).tolist())
      relative = f"train_val2018/{supercategory}/{category}/{name}.jpg"
      _write_jpeg(os.path.join(root, relative), rng, image_size)
      lists["train" if category < train_classes else "test"].append(relative)
  for split, lines in lists.items():
    _write_text(os.path.join(root, "Inat_dataset_splits", f"Inaturalist_{split}_set1.txt"), lines)


VEHICLEID_LIST_SIZES = {
  "train_list.txt": (13164, 113346),
  "test_list_800.txt": (800, 6493),
  "test_list_1600.txt": (1600, 13377),
  "test_list_2400.txt": (2400, 19777),
}
"""The vehicles and images of each of VehicleID's lists; the small list's as its public copy holds
them, the medium and large lists' as Liu et al. 2016 give them, the train list's as
re-identification loaders do."""


def write_vehicleid_lists(
  root: str | os.PathLike,
  *,
  sizes: dict[str, tuple[int, int]] | None = None,
  modelled: int = 10309,
  num_models: int = 228,
) -> None:
  """Writes VehicleID's lists alone (no image), at the published sizes by default.

  `root/train_test_split/<list>` for each list of `sizes` (`VEHICLEID_LIST_SIZES`; lines
  `<7-digit image id> <vehicle id>`, a vehicle's images as equal in number as they can be) and
  `root/attribute/model_attr.txt` (`<vehicle id> <model id>`) for the first `modelled` train
  vehicles, as in the published file none of the test vehicles. The test lists are nested (the
  first vehicles of a larger list are the smaller's, with the same images). For the parser's
  tests and benchmarks; `write_vehicleid` writes a small copy with images.
  """
  root = os.fspath(root)
  sizes = VEHICLEID_LIST_SIZES if sizes is None else sizes
  train_name, *test_names = sizes
  image_id, vehicle = 0, 0

  def vehicles_lines(images: int, vehicles: int) -> list[str]:
    nonlocal image_id, vehicle
    lines = []
    for count in _spread(images, vehicles).tolist():
      vehicle += 1
      lines += [f"{image_id + k:07d} {vehicle}" for k in range(1, count + 1)]
      image_id += count
    return lines

  lists = {train_name: vehicles_lines(sizes[train_name][1], sizes[train_name][0])}
  previous: list[str] = []
  for name in test_names:
    vehicles, images = sizes[name]
    done = len({line.split()[1] for line in previous})
    lists[name] = previous = previous + vehicles_lines(images - len(previous), vehicles - done)
  for name, lines in lists.items():
    _write_text(os.path.join(root, "train_test_split", name), lines)
  models = [f"{v} {(v * 7) % num_models}" for v in range(1, modelled + 1)]
  _write_text(os.path.join(root, "attribute", "model_attr.txt"), models)
