"""In-Shop, VehicleID and iNaturalist-2018 from small copies in their published layouts
(jaxrank/data/image_lists.py, the writers of jaxrank/data/testing.py), and the job's test
protocols on them: query/gallery, several test lists, named metrics (experiments/job/protocols.py,
evaluation.py, reporting.py)."""

import dataclasses
import os
import pathlib

import numpy as np
import pytest

import jaxrank
import jaxrank.data as jd
from experiments.job import config as config_lib
from experiments.job import evaluation
from experiments.job import main as main_lib
from experiments.job import protocols
from experiments.job import reporting
from experiments.job import train
from jaxrank.data import image_lists
from jaxrank.data import testing

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = main_lib.load_config_module(
  str(ROOT / "experiments" / "job" / "configs" / "tiny.py")
).get_config()


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[str, str]:
  """The three data sets, written once for the module (tests that break files copy them)."""
  base = tmp_path_factory.mktemp("published")
  testing.write_inshop(
    base / "inshop",
    train_items=6,
    test_items=4,
    images_per_item=3,
    categories=("MEN/Denim", "WOMEN/Dresses", "WOMEN/Skirts"),
  )
  testing.write_vehicleid(base / "vehicleid", train_vehicles=6, test_vehicles=(2, 3, 4))
  # The job's run: three test lists of one size, so that their evaluations compile once.
  testing.write_vehicleid(base / "vehicleid_job", train_vehicles=6, test_vehicles=(3, 3, 3))
  testing.write_inat2018(base / "inat", train_classes=4, test_classes=2, images_per_class=3)
  return {name: str(base / name) for name in ("inshop", "vehicleid", "vehicleid_job", "inat")}


def _class_supers(data: jd.LabeledImages) -> dict[int, set[int]]:
  assert data.super_labels is not None
  supers: dict[int, set[int]] = {}
  for label, s in zip(data.labels.tolist(), data.super_labels.tolist()):
    supers.setdefault(label, set()).add(s)
  return supers


# ---------------------------------------------------------------------------------------------
# The loaders.


def test_inshop_splits_classes_and_categories(roots):
  train, query, gallery = (jd.load_inshop(roots["inshop"], s) for s in image_lists.INSHOP_SPLITS)
  # 6 train items of 3 images; each test item's images alternate query, gallery, query.
  assert (train.num_examples, query.num_examples, gallery.num_examples) == (18, 8, 4)
  assert train.labels.tolist() == np.repeat(np.arange(1, 7), 3).tolist()
  assert sorted(set(query.labels.tolist())) == sorted(set(gallery.labels.tolist())) == [7, 8, 9, 10]
  assert not set(train.labels.tolist()) & set(query.labels.tolist())
  # Categories numbered in sorted order over the whole file: MEN/Denim 0, WOMEN/Dresses 1,
  # WOMEN/Skirts 2; item i in category (i - 1) % 3; each item in one.
  for data in (train, query, gallery):
    supers = _class_supers(data)
    assert supers == {item: {(item - 1) % 3} for item in supers}
    assert data.image_format == "path" and all(os.path.isfile(p) for p in data.images)
  assert query.images[0].endswith("img/MEN/Denim/id_00000007/01_1_front.jpg")
  assert not set(query.images.tolist()) & set(gallery.images.tolist())


def test_inshop_reads_the_partition_file_beside_img_too(roots, tmp_path):
  root = tmp_path / "flat"
  root.mkdir()
  os.symlink(os.path.join(roots["inshop"], "img"), root / "img")
  with open(os.path.join(roots["inshop"], "Eval", "list_eval_partition.txt")) as f:
    (root / "list_eval_partition.txt").write_text(f.read())
  assert jd.load_inshop(root, "gallery").num_examples == 4


def test_inshop_partition_parsed_at_the_published_size(tmp_path):
  # list_eval_partition.txt at In-Shop's size: 3,997 train items of 25,882 images; 14,218
  # queries and 12,612 gallery images of 3,985 test items (52,712 lines).
  path = tmp_path / "list_eval_partition.txt"
  testing.write_inshop_partition(path)
  lines = path.read_text().splitlines()
  assert lines[0] == "52712" and lines[1].split() == ["image_name", "item_id", "evaluation_status"]
  partition = image_lists.read_inshop_partition(path)
  counts = {}
  for status in image_lists.INSHOP_SPLITS:
    keep = partition.statuses == status
    counts[status] = (int(keep.sum()), len(np.unique(partition.items[keep])))
  assert counts == {"train": (25882, 3997), "query": (14218, 3985), "gallery": (12612, 3985)}
  query, gallery = (partition.items[partition.statuses == s] for s in ("query", "gallery"))
  assert set(query.tolist()) == set(gallery.tolist())
  assert partition.images[0] == "img/MEN/Denim/id_00000001/01_1_front.jpg"


def test_inshop_item_under_two_categories_keeps_its_first(roots, tmp_path):
  # Item 1 (MEN/Denim) gets a second image folder under WOMEN/Skirts: accepted, the item keeps
  # the category of its first line for all its images, which keep their own paths.
  root = _copy(roots["inshop"], tmp_path)
  moved = "img/WOMEN/Skirts/id_00000001/02_1_front.jpg"
  (root / moved).parent.mkdir(parents=True)
  (root / moved).write_bytes((root / "img/MEN/Denim/id_00000001/02_1_front.jpg").read_bytes())
  _edit(
    root / INSHOP_LIST,
    lambda lines: [
      *lines[:3],
      lines[3].replace("img/MEN/Denim/id_00000001/02_1_front.jpg", moved),
      *lines[4:],
    ],
  )
  train = jd.load_inshop(root, "train")
  assert train.images[1].endswith(moved)
  assert _class_supers(train)[1] == {0}  # MEN/Denim, its first line's.
  assert (
    jd.load_inshop(root, "query").super_labels.tolist()
    == jd.load_inshop(roots["inshop"], "query").super_labels.tolist()
  )


def test_vehicleid_lists_at_the_published_size(tmp_path):
  # The lists' sizes (jaxrank.data.testing.VEHICLEID_LIST_SIZES): the small list as its public
  # copy holds it (6,493 images of 800 vehicles), medium and large as Liu et al. give them.
  testing.write_vehicleid_lists(tmp_path)
  assert (tmp_path / "train_test_split" / "test_list_800.txt").read_text().split("\n")[0] == (
    "0113347 13165"
  )
  pairs = {
    name: np.loadtxt(tmp_path / "train_test_split" / name, dtype=np.int64)
    for name in testing.VEHICLEID_LIST_SIZES
  }
  sizes = {name: (len(np.unique(p[:, 1])), len(p)) for name, p in pairs.items()}
  assert sizes == testing.VEHICLEID_LIST_SIZES
  assert sizes["test_list_800.txt"] == (800, 6493)


def test_vehicleid_small_list_without_models_has_one_super_class(roots, tmp_path):
  # As in the published model_attr.txt, none of the small list's vehicles has a model: all its
  # images get the super-class of the vehicles without one (max model id + 1).
  root = _copy(roots["vehicleid"], tmp_path)
  small = jd.load_vehicleid(root, "small")
  _edit(
    root / VEHICLEID_MODELS,
    lambda lines: [x for x in lines if int(x.split()[0]) not in set(small.labels.tolist())],
  )
  small = jd.load_vehicleid(root, "small")
  assert small.super_labels.tolist() == [2] * small.num_examples


def test_vehicleid_lists_vehicles_and_models(roots):
  train = jd.load_vehicleid(roots["vehicleid"], "train")
  tests = {s: jd.load_vehicleid(roots["vehicleid"], s) for s in image_lists.VEHICLEID_TEST_SPLITS}
  assert train.num_examples == 12 and sorted(set(train.labels.tolist())) == [1, 2, 3, 4, 5, 6]
  assert [t.num_classes for t in tests.values()] == [2, 3, 4]
  assert tests["large"].labels.tolist() == [7, 7, 8, 8, 9, 9, 10, 10]
  # The lists are nested: the small one's images are in the medium one's, which are in the
  # large one's.
  small, medium, large = (set(t.images.tolist()) for t in tests.values())
  assert small < medium < large
  assert not set(train.labels.tolist()) & set(tests["large"].labels.tolist())
  # Vehicles 3, 6, 9 have no model: they share super-class max model id + 1 = 2; the others
  # have model vehicle % 2.
  for data in (train, *tests.values()):
    assert _class_supers(data) == {
      v: {2 if v % 3 == 0 else v % 2} for v in set(data.labels.tolist())
    }
  assert train.images[0].endswith(os.path.join("image", "0000001.jpg"))


def test_inat2018_brown_splits(roots):
  train, test = (jd.load_inat2018(roots["inat"], s) for s in ("train", "test"))
  assert (train.num_examples, test.num_examples) == (12, 6)
  assert sorted(set(train.labels.tolist())) == [0, 1, 2, 3]
  assert sorted(set(test.labels.tolist())) == [4, 5]
  aves, plantae = (image_lists.INAT2018_SUPERCATEGORIES.index(n) for n in ("Aves", "Plantae"))
  for data in (train, test):
    assert _class_supers(data) == {
      c: {aves if c % 2 == 0 else plantae} for c in set(data.labels.tolist())
    }
  assert "/train_val2018/Aves/0/" in train.images[0]


def _copy(root: str, tmp_path: pathlib.Path) -> pathlib.Path:
  """A copy of the data set's lists, its image folders linked (tests break the lists)."""
  copy = tmp_path / "copy"
  for folder, dirs, files in os.walk(root):
    rel = os.path.relpath(folder, root)
    if rel.split(os.sep)[0] in ("img", "image", "train_val2018"):
      continue
    (copy / rel).mkdir(parents=True, exist_ok=True)
    for d in dirs:
      if d in ("img", "image", "train_val2018"):
        os.symlink(os.path.join(folder, d), copy / rel / d)
    for name in files:
      (copy / rel / name).write_bytes(pathlib.Path(folder, name).read_bytes())
  return copy


def _edit(path: pathlib.Path, fn) -> None:
  lines = path.read_text().splitlines()
  path.write_text("".join(line + "\n" for line in fn(lines)))


INSHOP_LIST = pathlib.Path("Eval", "list_eval_partition.txt")
VEHICLEID_TRAIN = pathlib.Path("train_test_split", "train_list.txt")
VEHICLEID_MODELS = pathlib.Path("attribute", "model_attr.txt")
INAT_TRAIN = pathlib.Path("Inat_dataset_splits", "Inaturalist_train_set1.txt")

BROKEN = {
  "inshop: no partition file": (
    "inshop",
    lambda root: (root / INSHOP_LIST).unlink(),
    FileNotFoundError,
    "no file .*list_eval_partition.txt",
  ),
  "inshop: no header": (
    "inshop",
    lambda root: _edit(root / INSHOP_LIST, lambda lines: [lines[0], *lines[2:]]),
    ValueError,
    "list_eval_partition.txt' must open with the number of images and the header",
  ),
  "inshop: a line of two fields": (
    "inshop",
    lambda root: _edit(root / INSHOP_LIST, lambda lines: [*lines[:3], "img/a.jpg train"]),
    ValueError,
    "list_eval_partition.txt', line 4: expected",
  ),
  "inshop: an item not its folder's": (
    "inshop",
    lambda root: _edit(
      root / INSHOP_LIST,
      lambda lines: [*lines[:2], lines[2].replace("id_00000001 ", "id_00000009 ")],
    ),
    ValueError,
    "list_eval_partition.txt', line 3",
  ),
  "inshop: a wrong count": (
    "inshop",
    lambda root: _edit(root / INSHOP_LIST, lambda lines: ["7", *lines[1:]]),
    ValueError,
    "list_eval_partition.txt' announces '7' images",
  ),
  "inshop: a missing image": (
    "inshop",
    lambda root: _edit(
      root / INSHOP_LIST,
      lambda lines: [lines[0], lines[1], lines[2].replace("01_1_front", "99_1_front"), *lines[3:]],
    ),
    FileNotFoundError,
    "1 of the 18 images listed are not under .*99_1_front.jpg",
  ),
  "vehicleid: no model file": (
    "vehicleid",
    lambda root: (root / VEHICLEID_MODELS).unlink(),
    FileNotFoundError,
    "no file .*model_attr.txt",
  ),
  "vehicleid: a vehicle id that is no number": (
    "vehicleid",
    lambda root: _edit(root / VEHICLEID_TRAIN, lambda lines: [*lines, "0000099 car"]),
    ValueError,
    "train_list.txt', line 13: expected '<image id> <vehicle id>'",
  ),
  "vehicleid: two models for a vehicle": (
    "vehicleid",
    lambda root: _edit(root / VEHICLEID_MODELS, lambda lines: [*lines, "1 7"]),
    ValueError,
    "model_attr.txt' gives vehicle 1 two models",
  ),
  "vehicleid: an empty list": (
    "vehicleid",
    lambda root: (root / VEHICLEID_TRAIN).write_text("\n"),
    ValueError,
    "train_list.txt' is empty",
  ),
  "inat2018: no list": (
    "inat",
    lambda root: (root / INAT_TRAIN).unlink(),
    FileNotFoundError,
    "no file .*Inaturalist_train_set1.txt",
  ),
  "inat2018: an unknown supercategory": (
    "inat",
    lambda root: _edit(root / INAT_TRAIN, lambda lines: [lines[0].replace("Aves", "Birds")]),
    ValueError,
    "Inaturalist_train_set1.txt', line 1: expected 'train_val2018/<supercategory>",
  ),
  "inat2018: a category under two supercategories": (
    "inat",
    lambda root: _edit(root / INAT_TRAIN, lambda lines: [*lines, "train_val2018/Plantae/0/x.jpg"]),
    ValueError,
    "Inaturalist_train_set1.txt' lists category 0 under several supercategories",
  ),
}

LOADERS = {
  "inshop": lambda root: jd.load_inshop(root, "train"),
  "vehicleid": lambda root: jd.load_vehicleid(root, "train"),
  "inat": lambda root: jd.load_inat2018(root, "train"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_missing_or_malformed_file_is_one_error_naming_it(case, roots, tmp_path):
  name, breaks, error, message = BROKEN[case]
  root = _copy(roots[name], tmp_path)
  LOADERS[name](root)  # The copy loads before it is broken.
  breaks(root)
  with pytest.raises(error, match=message):
    LOADERS[name](root)


@pytest.mark.parametrize(
  "load, message",
  [
    (lambda: jd.load_inshop("/nonexistent", "test"), "load_inshop: split must be one of"),
    (lambda: jd.load_vehicleid("/nonexistent", "tiny"), "load_vehicleid: split must be one of"),
    (lambda: jd.load_inat2018("/nonexistent", "val"), "load_inat2018: split must be 'train'"),
    (lambda: jd.load_inat2018("/nonexistent", "train", set_index=0), "set_index must be"),
  ],
)
def test_unknown_splits_are_refused(load, message):
  with pytest.raises(ValueError, match=message):
    load()


# ---------------------------------------------------------------------------------------------
# The job's test protocols.


def _images(labels, prefix="x") -> jd.LabeledImages:
  paths = np.asarray([f"{prefix}{i}.jpg" for i in range(len(labels))])
  return jd.LabeledImages(paths, np.asarray(labels, np.int32), image_format="path")


def test_separately_keeps_each_image_once_and_each_list_its_rows():
  small = _images([1, 1, 2, 2])
  large = jd.LabeledImages(
    np.concatenate([small.images, ["y0.jpg", "y1.jpg"]]),
    np.asarray([1, 1, 2, 2, 3, 3], np.int32),
    image_format="path",
  )
  splits = protocols.separately(small, {"small": small, "large": large})
  assert splits.test.images.tolist() == large.images.tolist()
  assert list(splits.evaluations) == ["small", "large"]
  assert splits.evaluations["small"].queries.tolist() == [0, 1, 2, 3]  # type: ignore[union-attr]
  assert splits.evaluations["large"].queries.tolist() == [0, 1, 2, 3, 4, 5]  # type: ignore[union-attr]
  assert all(e.gallery is None for e in splits.evaluations.values())


def test_retrieval_metrics_of_named_and_gallery_evaluations_equal_evaluate_retrieval():
  rng = np.random.default_rng(0)
  # Sets of one size: each form of evaluate_retrieval compiles once.
  queries, gallery = _images([0, 0, 1, 1, 2, 4], "q"), _images([0, 1, 2, 2, 3, 1], "g")
  splits = protocols.with_gallery(queries, queries, gallery)
  embeddings = rng.normal(size=(splits.test.num_examples, 4)).astype(np.float32)
  config = dataclasses.replace(TINY, eval_ks=(1, 2))
  got = evaluation.retrieval_metrics(config, embeddings, splits.test.labels, splits.evaluations)
  want = jaxrank.evaluate_retrieval(
    embeddings[:6], queries.labels, embeddings[6:], gallery.labels, ks=(1, 2)
  )
  assert got == pytest.approx(want, abs=0) and list(got) == list(want)
  lists = protocols.separately(queries, {"a": queries, "b": gallery})
  named = evaluation.retrieval_metrics(config, embeddings, lists.test.labels, lists.evaluations)
  loo = jaxrank.evaluate_retrieval(embeddings[6:], gallery.labels, ks=(1, 2))
  assert named == pytest.approx(
    {
      **{
        f"a/{k}": v
        for k, v in jaxrank.evaluate_retrieval(embeddings[:6], queries.labels, ks=(1, 2)).items()
      },
      **{f"b/{k}": v for k, v in loo.items()},
    },
    abs=0,
  )
  assert reporting.evaluation_names({**named, "seen/map@r": 0.0, "loss": 1.0}) == ["a", "b"]


def test_retrieval_metrics_add_the_hierarchical_metrics_of_super_labels():
  rng = np.random.default_rng(1)
  queries, gallery = _images([0, 0, 1, 1, 2, 4], "q"), _images([0, 1, 2, 2, 3, 1], "g")
  splits = protocols.with_gallery(queries, queries, gallery)
  embeddings = rng.normal(size=(splits.test.num_examples, 4)).astype(np.float32)
  supers = splits.test.labels // 2  # Two classes a category: a hierarchy.
  config = dataclasses.replace(TINY, eval_ks=(1, 2))
  got = evaluation.retrieval_metrics(
    config, embeddings, splits.test.labels, splits.evaluations, super_labels=supers
  )
  want = jaxrank.evaluate_retrieval(
    embeddings[:6],
    queries.labels,
    embeddings[6:],
    gallery.labels,
    ks=(1, 2),
    super_labels=supers[:6],
    gallery_super_labels=supers[6:],
  )
  assert {"h-ap", "asi", "ndcg"} <= set(got)
  assert got == pytest.approx(want, abs=0) and list(got) == list(want)


def test_table_carries_the_named_evaluations():
  row = {
    f"{name}/{metric}": 0.5
    for name in ("small", "large")
    for metric in ("recall@1", "recall@5", "map@r", "map", "tie_aware_map")
  }
  table = reporting.format_table({"fastap": row}).splitlines()
  assert table[0].split()[1:] == [
    *("small", "R@1", "small", "R@5", "small", "MAP@R", "small", "mAP", "small", "mAP_T"),
    *("large", "R@1", "large", "R@5", "large", "MAP@R", "large", "mAP", "large", "mAP_T"),
  ]
  plain = {"recall@1": 0.5, "recall@2": 0.5, "map@r": 0.1, "map": 0.2, "tie_aware_map": 0.2}
  assert reporting.format_table({"r": plain}) == reporting.format_table({"r": plain}, ks=(1, 2))


PAPERS = {
  # dataset: (data set folder, the paper's ks, expected metric names' prefixes, overrides)
  "inshop": ("inshop", (1, 10, 20, 30, 40, 50), [""], {"sampler": "super_class"}),
  "vehicleid": (
    "vehicleid_job",
    (1, 5),
    ["small/", "medium/", "large/"],
    {"sampler": "super_class"},
  ),
  "inat2018": ("inat", (1, 4, 16, 32), [""], {}),
}


@pytest.mark.parametrize("dataset", list(PAPERS))
def test_the_job_trains_and_evaluates_by_the_protocol(dataset, roots, tmp_path):
  folder, ks, prefixes, overrides = PAPERS[dataset]
  config = dataclasses.replace(
    TINY,
    dataset=dataset,
    data_dir=roots[folder],
    image_size=16,
    resize_size=16,
    batch_size=8,
    samples_per_class=2,
    num_steps=2,
    eval_every=2,
    checkpoint_every=2,
    eval_ks=ks,
    **overrides,
  )
  metrics = train.train_and_evaluate(config, str(tmp_path / "run"))
  # Each data set has super-classes (categories, models, supercategories): the hierarchical
  # metrics of `evaluate_retrieval(super_labels=)` follow each evaluation's flat ones.
  want = [
    f"{p}{m}"
    for p in prefixes
    for m in [*(f"recall@{k}" for k in ks), "map@r", "map", "tie_aware_map", "asi", "h-ap", "ndcg"]
  ]
  assert list(metrics) == [*want, "step"] and metrics["step"] == 2
  assert all(0 <= metrics[k] <= 1 for k in want)
  assert reporting.evaluation_names(reporting.read_metrics(str(tmp_path / "run"))[-1]) == [
    p.rstrip("/") for p in prefixes
  ]
  table = reporting.format_table({"run": metrics})
  assert table.splitlines()[0].split()[1 : 1 + (2 if prefixes[0] else 1)] == (
    [prefixes[0].rstrip("/"), "R@1"] if prefixes[0] else ["R@1"]
  )


def test_the_job_names_a_missing_file_before_training(roots, tmp_path):
  root = _copy(roots["inshop"], tmp_path)
  (root / INSHOP_LIST).unlink()
  config = dataclasses.replace(TINY, dataset="inshop", data_dir=str(root))
  with pytest.raises(
    config_lib.ConfigError, match="dataset='inshop' cannot be read from .*no file"
  ):
    train.check_run(config, str(tmp_path / "run"))
  assert not (tmp_path / "run").exists()
