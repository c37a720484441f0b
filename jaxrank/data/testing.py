"""Small fake tfds retrieval data sets, for tests and benchmarks that must not download.

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
import functools
from collections.abc import Iterator

import numpy as np
import tensorflow as tf

_NUM_CLASSES = {"stanford_online_products": 22634, "caltech_birds2011": 200, "cars196": 196}
_LABEL_KEY = {
  "stanford_online_products": "class_id",
  "caltech_birds2011": "label",
  "cars196": "label",
}


def fake_labels(name: str, split: str, *, classes_per_split: int, images_per_class: int):
  """The `(labels, super_labels or None)` that `mock_retrieval_data` gives a builder's split.

  SOP: `train` holds classes `0 .. c - 1`, `test` classes `c .. 2c - 1` (`c = classes_per_split`),
  class `i` in super-class `i % 12`. CUB and Cars196: both splits hold `c` classes spread evenly
  over all classes (0 and the last included), so both halves of the class-disjoint split are there.
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

  Works for `stanford_online_products`, `caltech_birds2011` and `cars196` read through the loaders
  of `jaxrank.data.datasets` (which decode only the image and label fields). Labels are those of
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
