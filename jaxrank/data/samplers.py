"""Batch samplers for listwise losses: which examples go into each batch of an epoch.

A sampler is a pure numpy function of the labels, a `seed` and an `epoch` that returns the dataset
indices of one epoch's batches as an int64 array `[num_batches, batch_size]`; `make_pipeline` turns
it into a tf.data pipeline. The same `(seed, epoch)` always gives the same batches, and epochs are
independent of each other (the generator is `np.random.default_rng([seed, epoch])`), so epoch `e`
can be rebuilt without replaying epochs `0 .. e - 1`, after a restart for instance.

* `m_per_class_batches`: `P` classes x `K` images per batch, the batches of Smooth-AP and ROADMAP:
  every query has `K - 1` positives in its batch.
* `super_class_batches`: the category-based "hard" batches of FastAP (Cakir et al. 2019, sec. 4.2
  and App. A) also used by RaMBO (Rolinek et al. 2020, App. A): each batch draws its classes from a
  few super-classes (a pair by default), with several consecutive batches per pair.
* `random_batches`: a plain shuffle, for comparison.
* `sequential_batches`: every example once, in order, for evaluation (the last batch padded).

**Classes with fewer than K images.** By default such a class still contributes groups of exactly
`K` indices: its images are repeated, as evenly as possible (a 3-image class with `K = 4` gives one
image twice), so a batch can hold the same image twice, augmented differently by the pipeline. This
is what PyTorch Metric Learning's `MPerClassSampler` does, and it keeps the many 2- and 3-image
classes of Stanford Online Products. `skip_small_classes=True` leaves those classes out instead.
A request that no class can serve (`K` larger than every class, more classes per batch than there
are usable classes) raises `ValueError` when the sampler is called, before any batch is built.

>>> import numpy as np
>>> from jaxrank.data import samplers
>>> labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
>>> batches = samplers.m_per_class_batches(labels, classes_per_batch=2, samples_per_class=2, seed=0)
>>> batches.shape  # 6 groups of 2 (the last group of classes 0 and 1 topped up), 2 groups a batch.
(3, 4)
>>> labels[batches[0]].reshape(2, 2)[:, 0] != labels[batches[0]].reshape(2, 2)[:, 1]
array([False, False])
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from jaxrank._src import checks


def _rng(fn: str, seed: int, epoch: int) -> np.random.Generator:
  """The epoch's generator, after checking that `seed` and `epoch` are non-negative ints."""
  checks.check_int_at_least(fn, "seed", seed, 0)
  checks.check_int_at_least(fn, "epoch", epoch, 0)
  return np.random.default_rng([int(seed), int(epoch)])


def _check_counts(fn: str, **counts: int) -> None:
  """Every count a positive int (numpy ints too; a bool or a float raises `TypeError`)."""
  for name, value in counts.items():
    checks.check_positive_int(fn, name, value)


def _check_labels(fn: str, labels: np.ndarray, name: str = "labels") -> np.ndarray:
  """`labels` as a numpy array, after checking that it is a non-empty 1-D array of integers."""
  labels = np.asarray(labels)
  checks.check_int_labels(fn, name, labels, allow_empty=False)
  return labels


def _members(labels: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
  """The classes (sorted) and, for each, the indices of its examples in increasing order."""
  classes, inverse = np.unique(labels, return_inverse=True)
  order = np.argsort(inverse, kind="stable")
  bounds = np.cumsum(np.bincount(inverse, minlength=len(classes)))[:-1]
  return classes, np.split(order, bounds)


def _usable(
  fn: str,
  members: list[np.ndarray],
  *,
  samples_per_class: int,
  classes_needed: int,
  skip_small_classes: bool,
  where: str = "",
) -> np.ndarray:
  """Positions (into `members`) of the classes that can give groups of K, or a clear error."""
  sizes = np.array([len(m) for m in members])
  if sizes.max() < samples_per_class:
    raise ValueError(
      f"{fn}: samples_per_class={samples_per_class} but the largest class{where} has only "
      f"{sizes.max()} examples; lower samples_per_class to at most {sizes.max()}."
    )
  usable = np.arange(len(sizes))
  if skip_small_classes:
    usable = np.flatnonzero(sizes >= samples_per_class)
  if len(usable) < classes_needed:
    if skip_small_classes:
      detail = f"only {len(usable)} classes{where} have at least {samples_per_class} examples"
      advice = "lower classes_per_batch or samples_per_class, or set skip_small_classes=False"
    else:
      detail = f"there are only {len(usable)} classes{where}"
      advice = "lower classes_per_batch"
    raise ValueError(
      f"{fn}: {classes_needed} classes are needed per batch{where} but {detail}; {advice}."
    )
  return usable


def _topped_up(rng: np.random.Generator, pool: np.ndarray, size: int) -> np.ndarray:
  """`size` indices from `pool`, each used as evenly as possible (no repeat while size <= len)."""
  return np.resize(rng.permutation(pool), size)


def _class_groups(rng: np.random.Generator, members: np.ndarray, k: int) -> np.ndarray:
  """All the images of one class, shuffled, in groups `[ceil(n / k), k]` of distinct images.

  The last group is topped up with other images of the class (distinct from the ones already in it
  when the class has at least k images; repeated evenly when it has fewer).
  """
  perm = rng.permutation(members)
  n = len(perm)
  rem = n % k
  if rem == 0:
    return perm.reshape(-1, k)
  pool = perm[: n - rem] if n >= k else perm
  return np.concatenate([perm, _topped_up(rng, pool, k - rem)]).reshape(-1, k)


def _group(rng: np.random.Generator, members: np.ndarray, k: int) -> np.ndarray:
  """K images of one class, distinct when the class has at least K."""
  if len(members) >= k:
    return rng.choice(members, size=k, replace=False)
  return _topped_up(rng, members, k)


def _pack_groups(
  rng: np.random.Generator,
  members: list[np.ndarray],
  usable: np.ndarray,
  *,
  classes_per_batch: int,
  samples_per_class: int,
) -> np.ndarray:
  """One pass over the usable classes: groups of K packed P distinct classes a batch.

  Every image of a usable class is in at least one group. The groups are laid out class after class
  (classes in random order) and dealt round-robin to `num_batches >= max(groups of one class)`
  batches, so no batch gets two groups of one class; the slots left over in the last round are
  filled with a fresh group of a random class not yet in that batch. Batches come out shuffled.
  """
  p, k = classes_per_batch, samples_per_class
  order = rng.permutation(usable)
  class_groups = [_class_groups(rng, members[c], k) for c in order]
  owner = np.concatenate([np.full(len(g), c) for c, g in zip(order, class_groups)])
  groups = np.concatenate(class_groups)
  most = max(math.ceil(len(members[c]) / k) for c in usable)
  num_batches = max(math.ceil(len(groups) / p), most)
  batches = np.empty((num_batches, p, k), dtype=np.int64)
  batch_classes = np.empty((num_batches, p), dtype=np.int64)
  fill = np.zeros(num_batches, dtype=np.int64)
  for j, (group, c) in enumerate(zip(groups, owner)):
    b = j % num_batches
    batches[b, fill[b]] = group
    batch_classes[b, fill[b]] = c
    fill[b] += 1
  for short in np.flatnonzero(fill < p):
    others = np.setdiff1d(usable, batch_classes[short, : fill[short]])
    for c in rng.choice(others, size=p - fill[short], replace=False):
      batches[short, fill[short]] = _group(rng, members[c], k)
      fill[short] += 1
  for b in range(num_batches):  # Random class order inside each batch, groups kept together.
    batches[b] = batches[b, rng.permutation(p)]
  return batches[rng.permutation(num_batches)].reshape(num_batches, p * k)


def m_per_class_batches(
  labels: np.ndarray,
  *,
  classes_per_batch: int,
  samples_per_class: int,
  seed: int = 0,
  epoch: int = 0,
  skip_small_classes: bool = False,
) -> np.ndarray:
  """One epoch of P x K batches: `classes_per_batch` classes, `samples_per_class` images each.

  Each class's images are shuffled and cut into groups of K (its last group topped up with other
  images of the class), and the groups are packed P distinct classes to a batch. An epoch therefore
  shows every image of every usable class at least once; an image is shown twice only to top up a
  class's last group (at most K - 1 per class) or to fill the last free slots of a batch with a
  random group (fewer than P groups per epoch unless one class holds more than 1/P of the data).
  Within a batch the K images of a class are consecutive: `batch.reshape(P, K)` has one class a row,
  and the classes of a batch are distinct. Classes with fewer than K images: see the module
  docstring (repeated by default, `skip_small_classes=True` leaves them out).

  Args:
    labels: `[N]` integer class labels of the dataset (any values).
    classes_per_batch: `P`, distinct classes in each batch.
    samples_per_class: `K`, images of each class in each batch (Smooth-AP and ROADMAP use 4 on
      SOP, CUB and Cars).
    seed: seed of the sampler; the same `(seed, epoch)` gives the same batches.
    epoch: which epoch to build.
    skip_small_classes: leave out classes with fewer than K images instead of repeating images.

  Returns:
    `[num_batches, P * K]` int64 dataset indices; `num_batches` is about `sum_c ceil(n_c / K) / P`.

  Raises:
    ValueError: K larger than every class, or fewer usable classes than P.
    TypeError: a count, `seed` or `epoch` that is not an int (`True` included), or labels that
      are not integers.

  >>> import numpy as np
  >>> labels = np.repeat(np.arange(6), 4)  # 6 classes of 4 images.
  >>> b = m_per_class_batches(labels, classes_per_batch=3, samples_per_class=2, seed=1)
  >>> b.shape, np.array_equal(np.sort(b.ravel()), np.arange(24))  # Each image exactly once.
  ((4, 6), True)
  """
  fn = "m_per_class_batches"
  _check_counts(fn, classes_per_batch=classes_per_batch, samples_per_class=samples_per_class)
  rng = _rng(fn, seed, epoch)
  labels = _check_labels(fn, labels)
  _, members = _members(labels)
  usable = _usable(
    fn,
    members,
    samples_per_class=samples_per_class,
    classes_needed=classes_per_batch,
    skip_small_classes=skip_small_classes,
  )
  return _pack_groups(
    rng,
    members,
    usable,
    classes_per_batch=classes_per_batch,
    samples_per_class=samples_per_class,
  )


def super_class_batches(
  labels: np.ndarray,
  super_labels: np.ndarray,
  *,
  classes_per_batch: int,
  samples_per_class: int,
  super_classes_per_batch: int = 2,
  batches_per_group: int = 5,
  seed: int = 0,
  epoch: int = 0,
  skip_small_classes: bool = False,
) -> np.ndarray:
  """One epoch of category-based "hard" batches (FastAP sec. 4.2 and App. A; RaMBO App. A).

  An epoch visits every set of `S = super_classes_per_batch` super-classes (all pairs by default,
  `C(G, S)` sets for `G` super-classes) in random order and builds `batches_per_group` consecutive
  batches for each. A batch takes `P / S` classes from each of its super-classes and `K` images from
  each class, so a query meets `K - 1` positives, hard negatives from its own super-class and easy
  ones from the others. FastAP uses pairs and 5 batches per pair on SOP (330 batches an epoch) and 2
  on In-Shop; RaMBO uses 10 per pair with K = 4 on SOP and 4 per pair with K = 8 on In-Shop.

  Within a super-class, classes are drawn as by `m_per_class_batches` on that super-class alone: its
  images are shuffled into groups of K and used in order, so every image of a super-class is shown
  once before any is shown again; an epoch covers the data when each super-class appears in
  enough batches (`C(G - 1, S - 1) * batches_per_group` batches of `P / S` groups). Super-class by
  super-class the batch is laid out in the order of the set, each class's K images consecutive.

  Args:
    labels: `[N]` integer class labels.
    super_labels: `[N]` integer super-class labels; every class must lie in one super-class.
    classes_per_batch: `P`, distinct classes in a batch, a multiple of `S`.
    samples_per_class: `K`, images of each class in a batch.
    super_classes_per_batch: `S`, super-classes a batch draws from (FastAP: 2; 1 makes every
      negative hard, which FastAP App. A found to train worse).
    batches_per_group: consecutive batches for each set of super-classes.
    seed: seed of the sampler; the same `(seed, epoch)` gives the same batches.
    epoch: which epoch to build.
    skip_small_classes: leave out classes with fewer than K images instead of repeating images.

  Returns:
    `[C(G, S) * batches_per_group, P * K]` int64 dataset indices.

  Raises:
    ValueError: fewer than S super-classes, P not a multiple of S, a class in two super-classes, or
      a super-class with fewer than P / S usable classes.
    TypeError: a count, `seed` or `epoch` that is not an int (`True` included), or labels that
      are not integers.

  >>> import numpy as np
  >>> labels = np.repeat(np.arange(8), 2)   # 8 classes of 2 images,
  >>> super_labels = labels // 4            # in 2 super-classes of 4 classes.
  >>> b = super_class_batches(labels, super_labels, classes_per_batch=4, samples_per_class=2,
  ...                         batches_per_group=2)
  >>> b.shape, [sorted(set(super_labels[row].tolist())) for row in b]
  ((2, 8), [[0, 1], [0, 1]])
  """
  fn = "super_class_batches"
  p, k, s = classes_per_batch, samples_per_class, super_classes_per_batch
  _check_counts(
    fn,
    classes_per_batch=p,
    samples_per_class=k,
    super_classes_per_batch=s,
    batches_per_group=batches_per_group,
  )
  rng = _rng(fn, seed, epoch)
  labels = _check_labels(fn, labels)
  super_labels = _check_labels(fn, super_labels, "super_labels")
  checks.check_shape(
    fn, "super_labels", super_labels, labels.shape, hint="Give one super-class per label."
  )
  supers = _checked_super_classes(fn, labels, super_labels, p, s)
  members_of, usable_of = _super_class_members(
    fn,
    labels,
    super_labels,
    supers,
    samples_per_class=k,
    classes_needed=p // s,
    skip_small_classes=skip_small_classes,
  )
  queues: list[list[np.ndarray]] = [[] for _ in supers]

  def next_part(g: int) -> np.ndarray:
    """The next `P / S` groups of super-class `g`, from a fresh packing of it when used up."""
    if not queues[g]:
      queues[g] = list(
        _pack_groups(
          rng, members_of[g], usable_of[g], classes_per_batch=p // s, samples_per_class=k
        )
      )
    return queues[g].pop(0)

  sets = list(itertools.combinations(range(len(supers)), s))
  batches = []
  for i in rng.permutation(len(sets)):
    for _ in range(batches_per_group):
      batches.append(np.concatenate([next_part(g) for g in sets[i]]))
  return np.stack(batches)


def _checked_super_classes(
  fn: str, labels: np.ndarray, super_labels: np.ndarray, p: int, s: int
) -> np.ndarray:
  """The super-classes (sorted), after checking P against S and every class in one of them."""
  if p % s:
    raise ValueError(
      f"{fn}: classes_per_batch={p} must be a multiple of super_classes_per_batch={s}, so that "
      "each super-class gives the same number of classes; use classes_per_batch="
      f"{p - p % s or s}."
    )
  pairs = np.unique(np.stack([labels, super_labels], axis=1), axis=0)
  split_classes = np.unique(pairs[:, 0], return_counts=True)
  if (split_classes[1] > 1).any():
    bad = split_classes[0][split_classes[1] > 1][:5].tolist()
    raise ValueError(
      f"{fn}: every class must lie in exactly one super-class, but classes {bad} have images in "
      "several; check that super_labels match labels."
    )
  supers = np.unique(super_labels)
  if len(supers) < s:
    raise ValueError(
      f"{fn}: super_classes_per_batch={s} but the data has only {len(supers)} super-classes; "
      f"lower super_classes_per_batch to at most {len(supers)}."
    )
  return supers


def _super_class_members(
  fn: str,
  labels: np.ndarray,
  super_labels: np.ndarray,
  supers: np.ndarray,
  *,
  samples_per_class: int,
  classes_needed: int,
  skip_small_classes: bool,
) -> tuple[list[list[np.ndarray]], list[np.ndarray]]:
  """For each super-class, the dataset indices of each of its classes and which classes are usable.

  Raises the `ValueError` of `_usable` for a super-class with fewer than `classes_needed` usable
  classes, with a sentence on why a batch needs them.
  """
  members_of, usable_of = [], []
  for g in supers:
    in_g = np.flatnonzero(super_labels == g)
    _, members = _members(labels[in_g])
    members = [in_g[m] for m in members]
    try:
      usable = _usable(
        fn,
        members,
        samples_per_class=samples_per_class,
        classes_needed=classes_needed,
        skip_small_classes=skip_small_classes,
        where=f" of super-class {g}",
      )
    except ValueError as e:
      raise ValueError(
        f"{e} Each batch takes classes_per_batch / super_classes_per_batch = {classes_needed} "
        "classes from each of its super-classes."
      ) from None
    members_of.append(members)
    usable_of.append(usable)
  return members_of, usable_of


def random_batches(
  num_examples: int, *, batch_size: int, seed: int = 0, epoch: int = 0
) -> np.ndarray:
  """One epoch of plain random batches: a shuffle of the dataset, cut into batches.

  Every example appears at most once per epoch; the `num_examples % batch_size` left over
  (different ones each epoch) wait for a later epoch, so that every batch has the same shape.

  Args:
    num_examples: `N`, the size of the dataset.
    batch_size: `B`.
    seed: seed of the sampler; the same `(seed, epoch)` gives the same batches.
    epoch: which epoch to build.

  Returns:
    `[N // B, B]` int64 dataset indices.

  >>> random_batches(10, batch_size=4, seed=0).shape
  (2, 4)
  """
  fn = "random_batches"
  _check_counts(fn, num_examples=num_examples, batch_size=batch_size)
  rng = _rng(fn, seed, epoch)
  if batch_size > num_examples:
    raise ValueError(
      f"{fn}: batch_size={batch_size} is larger than the dataset ({num_examples} examples); "
      f"lower batch_size to at most {num_examples}."
    )
  perm = rng.permutation(num_examples)
  num_batches = num_examples // batch_size
  return perm[: num_batches * batch_size].reshape(num_batches, batch_size).astype(np.int64)


def sequential_batches(num_examples: int, *, batch_size: int) -> np.ndarray:
  """Every example once, in order, for evaluation: the last batch is padded with index -1.

  `make_pipeline` turns the padding into examples with `mask` False and label -1.

  Args:
    num_examples: `N`, the size of the dataset.
    batch_size: `B`.

  Returns:
    `[ceil(N / B), B]` int64 indices `0 .. N - 1`, then `-1` as padding.

  >>> sequential_batches(5, batch_size=2).tolist()
  [[0, 1], [2, 3], [4, -1]]
  """
  _check_counts("sequential_batches", num_examples=num_examples, batch_size=batch_size)
  num_batches = math.ceil(num_examples / batch_size)
  indices = np.full(num_batches * batch_size, -1, dtype=np.int64)
  indices[:num_examples] = np.arange(num_examples)
  return indices.reshape(num_batches, batch_size)
