"""Input pipelines for training with listwise losses: samplers, data sets and tf.data pipelines.

Needs the `train` extra (TensorFlow, tensorflow-datasets, scikit-learn). The library core
(`import jaxrank`) never imports TensorFlow; this subpackage does.

Importing `jaxrank.data` leaves TensorFlow's devices alone. On a machine with GPUs, hide them from
TensorFlow in your program's entry point, before any TensorFlow op, as big_vision and the Flax
examples do (and `experiments/job/main.py`): `tf.config.set_visible_devices([], "GPU")`. tf.data
runs on the CPU and would otherwise take GPU memory that JAX needs.

Typical training input:

>>> import functools
>>> import jaxrank.data as jd
>>> train = jd.load_digits("train")
>>> sampler = functools.partial(jd.m_per_class_batches, train.labels, classes_per_batch=5,
...                             samples_per_class=4, seed=0)
>>> ds = jd.make_pipeline(train, sampler)
>>> next(ds.as_numpy_iterator())["label"].reshape(5, 4)[:, 0].size
5
"""

from jaxrank.data import buckets as buckets
from jaxrank.data import datasets as datasets
from jaxrank.data import glyphs as glyphs
from jaxrank.data import hashing_data as hashing_data
from jaxrank.data import image_lists as image_lists
from jaxrank.data import landmarks as landmarks
from jaxrank.data import pipeline as pipeline
from jaxrank.data import preprocess as preprocess
from jaxrank.data import samplers as samplers
from jaxrank.data.buckets import bucket_cost as bucket_cost
from jaxrank.data.buckets import bucket_shape as bucket_shape
from jaxrank.data.buckets import BucketCost as BucketCost
from jaxrank.data.buckets import pad_to_buckets as pad_to_buckets
from jaxrank.data.buckets import PaddedImages as PaddedImages
from jaxrank.data.datasets import LabeledImages as LabeledImages
from jaxrank.data.datasets import load_cars196 as load_cars196
from jaxrank.data.datasets import load_cub200 as load_cub200
from jaxrank.data.datasets import load_digits as load_digits
from jaxrank.data.datasets import load_image_folder as load_image_folder
from jaxrank.data.datasets import load_stanford_online_products as load_stanford_online_products
from jaxrank.data.datasets import select as select
from jaxrank.data.datasets import select_classes as select_classes
from jaxrank.data.datasets import unreadable_images as unreadable_images
from jaxrank.data.glyphs import load_glyphs as load_glyphs
from jaxrank.data.hashing_data import load_cifar10 as load_cifar10
from jaxrank.data.hashing_data import load_imagenet100 as load_imagenet100
from jaxrank.data.hashing_data import load_nuswide as load_nuswide
from jaxrank.data.image_lists import load_inat2018 as load_inat2018
from jaxrank.data.image_lists import load_inshop as load_inshop
from jaxrank.data.image_lists import load_vehicleid as load_vehicleid
from jaxrank.data.landmarks import load_revisited as load_revisited
from jaxrank.data.landmarks import read_gallery_image as read_gallery_image
from jaxrank.data.landmarks import read_image as read_image
from jaxrank.data.landmarks import read_query_image as read_query_image
from jaxrank.data.landmarks import RevisitedData as RevisitedData
from jaxrank.data.landmarks import with_distractors as with_distractors
from jaxrank.data.pipeline import make_pipeline as make_pipeline
from jaxrank.data.pipeline import prefetch_to_device as prefetch_to_device
from jaxrank.data.preprocess import eval_preprocess as eval_preprocess
from jaxrank.data.preprocess import train_preprocess as train_preprocess
from jaxrank.data.samplers import m_per_class_batches as m_per_class_batches
from jaxrank.data.samplers import random_batches as random_batches
from jaxrank.data.samplers import sequential_batches as sequential_batches
from jaxrank.data.samplers import super_class_batches as super_class_batches
