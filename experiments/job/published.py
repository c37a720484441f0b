"""The readers of the data sets published as files: `read(data_dir) -> protocols.Splits`.

In-Shop, VehicleID and iNaturalist-2018 (`jaxrank.data.image_lists`) and He et al. 2018's hashing
benchmarks (`jaxrank.data.hashing_data`), each split as its paper's protocol evaluates it
(`protocols`). `datasets.DATASETS` names them; a missing or malformed file raises the loader's
`FileNotFoundError` or `ValueError` (`datasets` turns it into a `ConfigError`). TensorFlow and
`jaxrank.data` are imported when a reader is first called.
"""

from __future__ import annotations

from collections.abc import Callable

from experiments.job import protocols
from experiments.job.protocols import Splits


def read_inshop(root: str) -> Splits:
  """In-Shop: train on `train`; the `query` images rank the `gallery`."""
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  parts = [jd.load_inshop(root, s) for s in ("train", "query", "gallery")]
  return protocols.with_gallery(*parts)


def read_vehicleid(root: str) -> Splits:
  """VehicleID: each test list leave-one-out on its own (`jaxrank.data.load_vehicleid`)."""
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  tests = {s: jd.load_vehicleid(root, s) for s in jd.image_lists.VEHICLEID_TEST_SPLITS}
  return protocols.separately(jd.load_vehicleid(root, "train"), tests)


def read_inat2018(root: str) -> Splits:
  """iNaturalist-2018 with Brown et al.'s splits: the test split leave-one-out."""
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  return Splits(jd.load_inat2018(root, "train"), jd.load_inat2018(root, "test"))


# He et al. 2018's hashing benchmarks (`jaxrank.data.hashing_data`): the queries rank the database
# (`protocols.Evaluation.hashing_ks`: with a hashing head, AP_T, NDCG_T and mAP@k at the cut-off of
# the paper's table); CIFAR-10's and NUS-WIDE's draws with one seed, the same queries every run.
CIFAR10_SPLIT_SEED = 0
NUSWIDE_SPLIT_SEED = 0


def read_cifar10(setting: int, queries: str = "drawn") -> Callable[[str], Splits]:
  def read(root: str) -> Splits:
    import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

    parts = jd.hashing_data.cifar10_splits(
      root, setting=setting, seed=CIFAR10_SPLIT_SEED, queries=queries
    )
    return protocols.with_gallery(*(parts[s] for s in jd.hashing_data.SPLITS), hashing_ks=())

  return read


def read_hashnet_lists(
  loader: str, hashing_ks: tuple[int, ...], *, hashnet_prefixes: bool = False
) -> Callable[[str], Splits]:
  """The three lists of `jd.<loader>`. With `hashnet_prefixes`, a path loses HashNet's
  ImageNet100 prefixes if it starts with one (the PyTorch lists' absolute one, the Caffe lists'
  `./data/imagenet/`), so that `data_dir` holding the lists beside `image/` and `val_image/`
  reads either."""

  def read(root: str) -> Splits:
    import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

    prefixes = (*jd.hashing_data.HASHNET_IMAGENET_PREFIXES, "") if hashnet_prefixes else None
    load = getattr(jd, loader)
    parts = [load(root, s, path_prefix=prefixes) for s in jd.hashing_data.SPLITS]
    return protocols.with_gallery(*parts, hashing_ks=hashing_ks)

  return read


def read_nuswide_he2018(root: str) -> Splits:
  """NUS-WIDE in He et al.'s split, drawn from `Imagelist.txt` and `AllLabels81.txt`."""
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top

  parts = jd.hashing_data.nuswide_he2018_splits(root, seed=NUSWIDE_SPLIT_SEED)
  return protocols.with_gallery(*(parts[s] for s in jd.hashing_data.SPLITS), hashing_ks=(5000,))
