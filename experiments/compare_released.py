r"""jaxrank's losses beside the authors' released PyTorch code, on identical inputs.

Each comparison feeds the same random inputs (fixed seeds) to a released loss and to jaxrank's, in
float32 and float64, and reports the largest difference of the values and of the gradients (their
autograd or hand-written backward against `jax.grad`), with the settings that align the two
conventions. A released loss is imported from a local clone (nothing here is copied from it); a
clone that is not given is skipped with a line saying what to clone:

  git clone https://github.com/kunhe/FastAP-metric-learning /tmp/released/FastAP-metric-learning
  git clone https://github.com/martius-lab/blackbox-backprop /tmp/released/blackbox-backprop
  git clone https://github.com/naver/deep-image-retrieval /tmp/released/deep-image-retrieval
  git clone https://github.com/elias-ramzi/ROADMAP /tmp/released/ROADMAP
  git clone https://github.com/Andrew-Brown1/Smooth_AP /tmp/released/Smooth_AP
  .venv/bin/python -m experiments.compare_released --fastap /tmp/released/FastAP-metric-learning \
      --blackbox /tmp/released/blackbox-backprop --dir /tmp/released/deep-image-retrieval \
      --roadmap /tmp/released/ROADMAP --smooth-ap /tmp/released/Smooth_AP

It needs torch (the `dev` extra) and, for ROADMAP's FastAP and calibration losses,
pytorch-metric-learning. The released code is run on the CPU: `.cuda()` is made a no-op and the
uint8 masks of 2019's torch are read as boolean masks while it runs (see `_released_on_cpu`); their
files are never modified. The tie-aware losses of He et al. 2018 (github.com/kunhe/TALR) are
MATLAB and are not run here; `tests/test_hashing.py::test_tanh_scale_is_the_released_schedule`
checks jaxrank's tanh schedule against that code's.

"equal" means both differences are within float rounding: 2e-5 (float32) or 1e-9 (float64)
relative to the largest value or gradient entry, unless a row's settings name a looser bound
(the released code's own epsilon). Rows marked "differs" are deliberate differences or bugs of the
released code, with their cause; the rows "... x factor" show a bug with its factor accounted for.

With `--docs` it also writes the table to docs/_generated/released_code.json, with the clones'
commits and the versions it ran on under it, which the user guide shows
(docs/guide/released_code.rst).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.metadata
import os
import subprocess
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from experiments import docs_data
from experiments.job import reporting

# flag -> (the clone's directory name on GitHub, what the flag points at).
REPOSITORIES = {
  "fastap": "kunhe/FastAP-metric-learning",
  "blackbox": "martius-lab/blackbox-backprop",
  "dir": "naver/deep-image-retrieval",
  "roadmap": "elias-ramzi/ROADMAP",
  "smooth_ap": "Andrew-Brown1/Smooth_AP",
}

HEADER = ("loss", "theirs", "jaxrank", "settings", "dtype", "max|dvalue|", "max|dgrad|", "verdict")

# Relative tolerances of "equal".
TOLERANCE = {"float32": 2e-5, "float64": 1e-9}


@dataclasses.dataclass
class Row:
  """One comparison: the cells of one table line."""

  loss: str
  theirs: str
  ours: str
  settings: str
  dtype: str
  value_diff: float
  grad_diff: float
  verdict: str

  def cells(self) -> list[str]:
    return [
      self.loss,
      self.theirs,
      self.ours,
      self.settings,
      self.dtype,
      f"{self.value_diff:.1e}",
      f"{self.grad_diff:.1e}",
      self.verdict,
    ]


def import_released(root: str, module: str, *, skip_init: Sequence[str] = ()) -> types.ModuleType:
  """Imports `module` from a clone at `root` (put first on `sys.path`).

  Args:
    root: the directory that holds the module's top-level package or file.
    module: dotted name, e.g. `"dirtorch.loss"`.
    skip_init: packages whose `__init__.py` imports what is not installed (a training framework,
      combinatorial solvers): they are entered as empty packages over their directory, so that
      only the loss file and what it imports itself are executed.

  Returns:
    The imported module.
  """
  root = os.path.abspath(root)
  if root not in sys.path:
    sys.path.insert(0, root)
  for package in skip_init:
    if package not in sys.modules:
      stub = types.ModuleType(package)
      stub.__path__ = [os.path.join(root, *package.split("."))]
      sys.modules[package] = stub
  return importlib.import_module(module)


@contextlib.contextmanager
def _released_on_cpu() -> Iterator[None]:
  """Lets the released code run on the CPU under torch 2, changing none of its numbers.

  * The FastAP and Smooth-AP code call `.cuda()` on their tensors: it returns the tensor.
  * FastAP fills a diagonal through a uint8 mask, which torch 1.0 accepted and torch 2 rejects:
    uint8 masks are read as boolean ones.
  * ROADMAP's SupAP writes `torch.heaviside(...)` into the differentiated tensor, and torch 2
    raises "derivative for aten::heaviside is not implemented" in the backward: its input is
    detached, which gives the step the zero gradient it has almost everywhere (what jaxrank's
    `heaviside_step` gives).

  All three are restored on exit.
  """
  import torch  # pylint: disable=g-import-not-at-top

  cuda, masked_fill_, heaviside = torch.Tensor.cuda, torch.Tensor.masked_fill_, torch.heaviside

  def fill(self, mask, value):
    return masked_fill_(self, mask.bool() if mask.dtype == torch.uint8 else mask, value)

  torch.Tensor.cuda = lambda self, *args, **kwargs: self
  torch.Tensor.masked_fill_ = fill
  torch.heaviside = lambda x, values: heaviside(x.detach(), values)
  try:
    yield
  finally:
    torch.Tensor.cuda, torch.Tensor.masked_fill_ = cuda, masked_fill_
    torch.heaviside = heaviside


@contextlib.contextmanager
def _dtype(name: str) -> Iterator[None]:
  """torch's default dtype and jax's 64-bit mode for one comparison."""
  import jax  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top

  default = torch.get_default_dtype()
  torch.set_default_dtype(getattr(torch, name))
  try:
    with jax.enable_x64(name == "float64"):
      yield
  finally:
    torch.set_default_dtype(default)


def their_value_and_grad(fn: Callable, x: np.ndarray) -> tuple[float, np.ndarray]:
  """`fn(x)` and its gradient by torch's backward, `x` in torch's default dtype."""
  import torch  # pylint: disable=g-import-not-at-top

  xt = torch.tensor(x, dtype=torch.get_default_dtype(), requires_grad=True)
  with _released_on_cpu():
    value = fn(xt).sum()  # Some return shape [1].
    value.backward()
  return value.item(), xt.grad.numpy().astype(np.float64)


def our_value_and_grad(fn: Callable, x: np.ndarray, dtype: str) -> tuple[float, np.ndarray]:
  """`fn(x)` and `jax.grad` of it, `x` as `dtype`."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  value, grad = jax.value_and_grad(fn)(jnp.asarray(x, dtype))
  return float(value), np.asarray(grad, np.float64)


def compare(
  loss: str,
  theirs: str,
  ours: str,
  settings: str,
  *,
  their_fn: Callable,
  our_fn: Callable,
  x: np.ndarray,
  dtype: str,
  why: str = "",
  tolerance: float = 0.0,
  grad_factor: float = 1.0,
) -> Row:
  """Runs both losses on `x` and states whether they agree.

  Args:
    loss: the loss's name in the table.
    theirs: the released function, as its code names it.
    ours: the jaxrank expression.
    settings: the settings that align the two conventions.
    their_fn: `fn(torch tensor) -> torch scalar`, the released loss on `x`.
    our_fn: `fn(jax array) -> scalar`, jaxrank's loss on `x`.
    x: the input both are differentiated with respect to (float64 numpy; cast to `dtype`).
    dtype: `"float32"` or `"float64"`.
    why: the known cause, printed after "differs: " when they differ ("unexplained" if empty).
    tolerance: a relative bound of "equal" looser than float rounding (a released epsilon).
    grad_factor: multiplies their gradient before the comparison (a known bug's factor).

  Returns:
    The table row.
  """
  with _dtype(dtype):
    try:
      their_value, their_grad = their_value_and_grad(their_fn, x)
    except RuntimeError as e:  # Their code written for one dtype.
      reason = str(e).splitlines()[0]
      return Row(loss, theirs, ours, settings, dtype, np.nan, np.nan, f"not run: {reason}")
    our_value, our_grad = our_value_and_grad(our_fn, x, dtype)
  value_diff = abs(their_value - our_value)
  grad_diff = float(np.max(np.abs(their_grad * grad_factor - our_grad)))
  bound = max(TOLERANCE[dtype], tolerance)
  equal = value_diff <= bound * max(1.0, abs(our_value)) and grad_diff <= bound * max(
    1.0, float(np.max(np.abs(our_grad)))
  )
  verdict = "equal" if equal else f"differs: {why or 'unexplained'}"
  return Row(loss, theirs, ours, settings, dtype, value_diff, grad_diff, verdict)


def format_rows(rows: Sequence[Row]) -> str:
  """The table of `rows` (see `reporting.format_text_table`)."""
  return reporting.format_text_table(HEADER, [row.cells() for row in rows])


# ---------------------------------------------------------------------------------------------
# Inputs: fixed seeds, shared by every comparison.

NUM_CLASSES, PER_CLASS, DIM = 4, 3, 8  # A P x K batch of B = 12, classes in consecutive blocks.
NUM_LISTS, LIST_SIZE = 6, 20  # Lists for the list-level losses; NUM_LISTS != LIST_SIZE on purpose.


def batch(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """`[B, D]` unit embeddings around one centre per class, and their `[B]` labels (blocks)."""
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(NUM_CLASSES), PER_CLASS)
  centres = rng.normal(size=(NUM_CLASSES, DIM))
  centres /= np.linalg.norm(centres, axis=1, keepdims=True)
  x = centres[labels] + 0.45 * rng.normal(size=(labels.size, DIM))
  return x / np.linalg.norm(x, axis=1, keepdims=True), labels


def lists(seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
  """`[N, M]` scores in (-1, 1) and binary labels, 2 to 7 relevant items per list."""
  rng = np.random.default_rng(seed)
  scores = rng.uniform(-0.95, 0.95, size=(NUM_LISTS, LIST_SIZE))
  labels = np.zeros((NUM_LISTS, LIST_SIZE))
  for i in range(NUM_LISTS):
    labels[i, rng.choice(LIST_SIZE, size=2 + i, replace=False)] = 1.0
  return scores, labels


def _retrieval(labels: np.ndarray, *, include_self: bool, dot: bool) -> Callable:
  """`e -> (scores, relevance, where)` of `jaxrank.batch_retrieval` for fixed labels."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  import jaxrank  # pylint: disable=g-import-not-at-top

  kwargs: dict[str, Any] = {"similarity_fn": jaxrank.similarity.dot_product} if dot else {}
  return lambda e: jaxrank.batch_retrieval(
    e, jnp.asarray(labels), include_self=include_self, **kwargs
  )


def _like(a: np.ndarray, x):
  """`a` as a torch tensor of `x`'s dtype (labels and weights beside the differentiated input)."""
  import torch  # pylint: disable=g-import-not-at-top

  return torch.as_tensor(a, dtype=x.dtype)


def _on_lists(fn: Callable, labels: np.ndarray, **kwargs) -> Callable:
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  return lambda s: fn(s, jnp.asarray(labels), **kwargs)


def _on_batch(fn: Callable, retrieval: Callable, **kwargs) -> Callable:
  def loss(e):
    scores, relevance, where = retrieval(e)
    return fn(scores, relevance, where=where, **kwargs)

  return loss


DTYPES = ("float32", "float64")


# ---------------------------------------------------------------------------------------------
# One function per repository: the rows of its losses.


def compare_fastap(root: str) -> list[Row]:
  """kunhe/FastAP-metric-learning, `pytorch/FastAP_loss.py`: the hand-written backward."""
  import torch  # pylint: disable=g-import-not-at-top

  import jaxrank  # pylint: disable=g-import-not-at-top

  module = import_released(os.path.join(root, "pytorch"), "FastAP_loss")
  e, y = batch()
  size = y.size
  ours = _on_batch(
    jaxrank.fastap_loss, _retrieval(y, include_self=False, dot=True), num_intervals=10
  )
  theirs = lambda x: module.FastAPLoss(num_bins=10)(x, torch.as_tensor(y))
  setting = "L=10, B=12, unit embeddings, dot product, query excluded"
  rows = []
  for dtype in ["float32"]:  # The backward builds float32 tensors and fails on float64 input.
    rows.append(
      compare(
        "FastAP",
        "FastAPLoss",
        "fastap_loss(batch_retrieval)",
        setting,
        their_fn=theirs,
        our_fn=ours,
        x=e,
        dtype=dtype,
        why=f"backward = B/2 = {size // 2} x the gradient of its forward",
      )
    )
    rows.append(
      compare(
        "FastAP x factor",
        "FastAPLoss, grad x 2/B",
        "fastap_loss(batch_retrieval)",
        setting,
        their_fn=theirs,
        our_fn=ours,
        x=e,
        dtype=dtype,
        grad_factor=2 / size,
      )
    )
  rows.append(
    compare(
      "FastAP x factor",
      "3 * FastAPLoss, grad x 2/B",
      "3 * fastap_loss(batch_retrieval)",
      setting,
      their_fn=lambda x: 3 * theirs(x),
      our_fn=lambda x: 3 * ours(x),
      x=e,
      dtype="float32",
      grad_factor=2 / size,
      why="the backward ignores the incoming gradient (3 here)",
    )
  )
  return rows


def compare_blackbox(root: str) -> list[Row]:
  """martius-lab/blackbox-backprop: `TrueRanker`, `MapLoss` and `RecallLoss` (RaMBO)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top

  import jaxrank  # pylint: disable=g-import-not-at-top

  # The package's __init__ imports the graph-matching and TSP solvers (blossom, gurobi).
  ranking = import_released(root, "blackbox_backprop.ranking", skip_init=["blackbox_backprop"])
  map_module = import_released(root, "blackbox_backprop.mAP")
  recall_module = import_released(root, "blackbox_backprop.recall")
  s, y = lists()
  n_lists, n_items = y.shape
  interpolation = 4.0
  weights = np.random.default_rng(2).normal(size=y.shape)
  rows = []
  # `rank_normalised` casts the ranks to float32 (`.float()`): float64 input gives float32 ranks.
  dtypes = ["float32"]
  for dtype in dtypes:
    rows.append(
      compare(
        "blackbox ranks",
        "TrueRanker (sum of w * ranks)",
        "blackbox_ranks(s, interpolation * n) / n",
        "lambda=4, ranks / n",
        dtype=dtype,
        x=s,
        their_fn=lambda x: (ranking.TrueRanker.apply(x, interpolation) * _like(weights, x)).sum(),
        our_fn=lambda x: (
          jaxrank.blackbox_ranks(x, interpolation * n_items) / n_items * jnp.asarray(weights)
        ).sum(),
      )
    )
  # MapLoss: per-class AP over the batch (the lists are the columns).
  classes = s.T, y.T  # [20 items, 6 classes]: the lists are the columns.
  loss = map_module.MapLoss(
    lambda_val=interpolation, margin=0.0, interclass_coef=0.0, batch_memory=1
  )
  for dtype in dtypes:
    rows.append(
      compare(
        "RaMBO AP (mAP)",
        "MapLoss.raw_map_computation",
        "blackbox_ap_loss(s.T, y.T)",
        "lambda=4, margin=0; their +1e-5 in the AP denominator",
        dtype=dtype,
        x=classes[0],
        tolerance=1e-5,
        their_fn=lambda x: loss.raw_map_computation(x, _like(classes[1], x)),
        our_fn=lambda x: jaxrank.blackbox_ap_loss(
          x.T, jnp.asarray(y), interpolation=interpolation, margin=0.0
        ),
      )
    )
  # RecallLoss: ranks scaled by the number of lists, mean over all (query, positive) pairs.
  recall = recall_module.RecallLoss(lambda_val=interpolation, margin=0.02, weight_fn=torch.log1p)
  their_recall = lambda x: recall(x, _like(y, x))
  positives = y.sum(-1)

  def pairs_mean(x):
    per_list = jaxrank.blackbox_recall_loss(
      x,
      jnp.asarray(y),
      interpolation=interpolation,
      margin=0.02,
      weight_fn=lambda r: jnp.log1p(r * n_lists / n_items),
      reduce_fn=None,
    )
    return (per_list * jnp.asarray(positives)).sum() / positives.sum()

  setting = f"lambda=4, margin=0.02, log; {n_lists} lists of {n_items}"
  for dtype in dtypes:
    rows.append(
      compare(
        "RaMBO recall",
        "RecallLoss",
        "blackbox_recall_loss",
        setting,
        dtype=dtype,
        x=s,
        their_fn=their_recall,
        our_fn=_on_lists(jaxrank.blackbox_recall_loss, y, interpolation=interpolation, margin=0.02),
        why="ranks x #lists, not #items; mean over pairs, not per query",
      )
    )
    rows.append(
      compare(
        "RaMBO recall x factor",
        "RecallLoss",
        "pair mean of blackbox_recall_loss(W(r N/M))",
        setting,
        dtype=dtype,
        x=s,
        their_fn=their_recall,
        our_fn=pairs_mean,
      )
    )
  return rows


def compare_dir(root: str) -> list[Row]:
  """naver/deep-image-retrieval, `dirtorch/loss.py`: `APLoss` (mAP_Q)."""

  import jaxrank  # pylint: disable=g-import-not-at-top

  module = import_released(root, "dirtorch.loss", skip_init=["dirtorch"])
  s, y = lists()
  rows = []
  for dtype in DTYPES:
    with _dtype(dtype):  # The quantizer's weights take the default dtype when built.
      default, ranged = module.APLoss(), module.APLoss(nq=20, min=-1, max=1)
    unit = (s + 1) / 2  # Scores in [0, 1], the default range.
    rows.append(
      compare(
        "mAP_Q (listwise)",
        "APLoss() [25 bins on 0..1]",
        "soft_binning_ap_loss(2s-1, M=25)",
        "scores in [0, 1] mapped to [-1, 1]",
        dtype=dtype,
        x=unit,
        their_fn=lambda x, loss=default: loss(x, _like(y, x)),
        our_fn=lambda x: jaxrank.soft_binning_ap_loss(2 * x - 1, y, num_bins=25),
      )
    )
    rows.append(
      compare(
        "mAP_Q (listwise)",
        "APLoss(nq=20, min=-1, max=1)",
        "soft_binning_ap_loss",
        "M=20 on [-1, 1]",
        dtype=dtype,
        x=s,
        their_fn=lambda x, loss=ranged: loss(x, _like(y, x)),
        our_fn=_on_lists(jaxrank.soft_binning_ap_loss, y, num_bins=20),
      )
    )
  # Every score on a bin centre: the triangles' kinks.
  centres = 1 - 2 * np.random.default_rng(3).integers(0, 20, size=s.shape) / 19
  with _dtype("float64"):
    ranged = module.APLoss(nq=20, min=-1, max=1)
  rows.append(
    compare(
      "mAP_Q, scores on centres",
      "APLoss(nq=20, min=-1, max=1)",
      "soft_binning_ap_loss",
      "M=20, every score on a centre",
      dtype="float64",
      x=centres,
      their_fn=lambda x: ranged(x, _like(y, x)),
      our_fn=_on_lists(jaxrank.soft_binning_ap_loss, y, num_bins=20),
      why="on an inner centre their gradient is 0, jaxrank's one-sided",
    )
  )
  return rows


def _roadmap_losses(root: str) -> types.ModuleType:
  """ROADMAP's `roadmap.losses`, with `roadmap.utils` reduced to `create_label_matrix`.

  `roadmap/utils/__init__.py` imports omegaconf and the training utilities; the loss files use only
  `create_label_matrix` from it, which is imported from its own file.
  """
  import_released(root, "roadmap", skip_init=["roadmap", "roadmap.utils"])
  utils = sys.modules["roadmap.utils"]
  if not hasattr(utils, "create_label_matrix"):
    # A module attribute set at run time, which mypy cannot see on a ModuleType.
    utils.create_label_matrix = import_released(  # type: ignore[attr-defined]
      root, "roadmap.utils.create_label_matrix"
    ).create_label_matrix
  return import_released(root, "roadmap.losses")


@dataclasses.dataclass(frozen=True)
class _RoadmapInputs:
  """What every row of the ROADMAP comparison shares: their losses, the inputs, the retrievals."""

  losses: types.ModuleType
  e: np.ndarray  # A P x K batch of embeddings (`batch()`) ...
  y: np.ndarray  # ... and its labels.
  s: np.ndarray  # Lists of scores (`lists()`) ...
  t: np.ndarray  # ... and their relevance.
  label_matrix: Any  # Their `[B, B]` float label matrix of the batch (a torch tensor).
  with_self: Callable  # jaxrank's retrieval with the query included, dot product.
  without_self: Callable  # jaxrank's retrieval without the query, cosine.

  def on_scores(self, criterion: Callable) -> Callable:
    """As their training step calls a loss on scores."""
    return lambda x: criterion(x @ x.T, self.label_matrix.to(x.dtype))

  def on_embeddings(self, criterion: Callable) -> Callable:
    """As it calls a loss that takes embeddings."""
    import torch  # pylint: disable=g-import-not-at-top

    return lambda x: criterion(x, torch.as_tensor(self.y))


def _roadmap_inputs(root: str) -> _RoadmapInputs:
  import torch  # pylint: disable=g-import-not-at-top

  e, y = batch()
  s, t = lists()
  return _RoadmapInputs(
    losses=_roadmap_losses(root),
    e=e,
    y=y,
    s=s,
    t=t,
    label_matrix=torch.as_tensor((y[:, None] == y[None, :]).astype(np.float64)),
    with_self=_retrieval(y, include_self=True, dot=True),
    without_self=_retrieval(y, include_self=False, dot=False),
  )


def compare_roadmap(root: str) -> list[Row]:
  """elias-ramzi/ROADMAP, `roadmap/losses`: SmoothAP, SupAP, calibration, their composition,
  and the re-implementations of mAP_Q, RaMBO's AP and (pytorch-metric-learning's) FastAP.

  The rows in the order of the table it prints: in each dtype the smooth-rank losses, the losses
  on embeddings and mAP_Q; then RaMBO's AP (float32), SupAP at an exact tie and the compositions.
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  inputs = _roadmap_inputs(root)
  rows = []
  for dtype in DTYPES:
    rows += _roadmap_smooth_rank_rows(inputs, dtype)
    rows += _roadmap_embedding_rows(inputs, dtype)
    rows += _roadmap_soft_binning_rows(inputs, dtype)
  rows += _roadmap_blackbox_rows(inputs)
  rows += _roadmap_tie_and_composition_rows(inputs)
  del jnp
  return rows


def _roadmap_smooth_rank_rows(inputs: _RoadmapInputs, dtype: str) -> list[Row]:
  """SmoothAP and SupAP (with and without their configs' offset), on the batch's scores."""
  import jaxrank  # pylint: disable=g-import-not-at-top

  losses, e, with_self = inputs.losses, inputs.e, inputs.with_self
  return [
    compare(
      "SmoothAP (ROADMAP)",
      "SmoothAP(tau=0.01)",
      "smoothap_loss",
      "query included (include_self=True), dot product",
      dtype=dtype,
      x=e,
      their_fn=inputs.on_scores(losses.SmoothAP(tau=0.01)),
      our_fn=_on_batch(jaxrank.smoothap_loss, with_self),
    ),
    compare(
      "SupAP",
      "SupAP(offset=None)",
      "supap_loss",
      "temperature=0.01, rho=100, delta=0.05, query included",
      dtype=dtype,
      x=e,
      their_fn=inputs.on_scores(losses.SupAP()),
      our_fn=_on_batch(jaxrank.supap_loss, with_self),
    ),
    compare(
      "SupAP",
      "SupAP(offset=1.44) [configs]",
      "supap_loss",
      "as above, their configs' offset",
      dtype=dtype,
      x=e,
      their_fn=inputs.on_scores(losses.SupAP(offset=1.44)),
      our_fn=_on_batch(jaxrank.supap_loss, with_self),
      why="their step drops from 1.4933 to 1.44 at delta",
    ),
  ]


def _roadmap_embedding_rows(inputs: _RoadmapInputs, dtype: str) -> list[Row]:
  """The losses that take embeddings: calibration (two margins) and pml's FastAP."""
  import jaxrank  # pylint: disable=g-import-not-at-top

  losses, e, without_self = inputs.losses, inputs.e, inputs.without_self
  return [
    compare(
      "calibration",
      "CalibrationLoss(1.0, -1.0)",
      "calibration_loss(1.0, -1.0)",
      "every hinge > 0, P x K batch, query excluded, cosine",
      dtype=dtype,
      x=e,
      their_fn=inputs.on_embeddings(losses.CalibrationLoss(pos_margin=1.0, neg_margin=-1.0)),
      our_fn=_on_batch(jaxrank.calibration_loss, without_self, alpha=1.0, beta=-1.0),
    ),
    compare(
      "calibration",
      "CalibrationLoss(0.9, 0.6)",
      "calibration_loss",
      "paper's thresholds, query excluded, cosine",
      dtype=dtype,
      x=e,
      their_fn=inputs.on_embeddings(losses.CalibrationLoss(pos_margin=0.9, neg_margin=0.6)),
      our_fn=_on_batch(jaxrank.calibration_loss, without_self),
      why="means over the non-zero hinges of the batch, not per list",
    ),
    compare(
      "FastAP (pml)",
      "FastAP [pml FastAPLoss]",
      "fastap_loss(batch_retrieval)",
      "num_intervals=10 (their num_bins), query excluded, cosine",
      dtype=dtype,
      x=e,
      their_fn=inputs.on_embeddings(losses.FastAP(num_bins=10)),
      our_fn=_on_batch(jaxrank.fastap_loss, without_self, num_intervals=10),
    ),
  ]


def _roadmap_soft_binning_rows(inputs: _RoadmapInputs, dtype: str) -> list[Row]:
  """Their mAP_Q (`SoftBinAP`), on lists."""
  import jaxrank  # pylint: disable=g-import-not-at-top

  t = inputs.t
  with _dtype(dtype):
    softbin = inputs.losses.SoftBinAP()
  return [
    compare(
      "mAP_Q (ROADMAP)",
      "SoftBinAP() [20 bins on -1..1]",
      "soft_binning_ap_loss",
      "defaults",
      dtype=dtype,
      x=inputs.s,
      their_fn=lambda x, loss=softbin: loss(x, _like(t, x)),
      our_fn=_on_lists(jaxrank.soft_binning_ap_loss, t),
    )
  ]


def _roadmap_blackbox_rows(inputs: _RoadmapInputs) -> list[Row]:
  """RaMBO's AP as they re-implement it, in float32 only (their ranks are float32, `.float()`,
  whatever the input): without a margin, then with their configs' random margin."""
  import torch  # pylint: disable=g-import-not-at-top

  import jaxrank  # pylint: disable=g-import-not-at-top

  losses, s, t = inputs.losses, inputs.s, inputs.t
  rows = [
    compare(
      "RaMBO AP (ROADMAP)",
      "BlackBoxAP(4.0, margin=0)",
      "blackbox_ap_loss",
      "lambda=4, margin=0; their +1e-5 in the AP denominator",
      dtype="float32",
      x=s,
      tolerance=1e-5,
      their_fn=lambda x: losses.BlackBoxAP(lambda_val=4.0, margin=0.0)(x, _like(t, x)),
      our_fn=_on_lists(jaxrank.blackbox_ap_loss, t, interpolation=4.0, margin=0.0),
    )
  ]
  torch.manual_seed(0)
  rows.append(
    compare(
      "RaMBO AP (ROADMAP)",
      "BlackBoxAP(4.0, margin=0.02)",
      "blackbox_ap_loss",
      "lambda=4, margin=0.02 [configs]",
      dtype="float32",
      x=s,
      their_fn=lambda x: losses.BlackBoxAP(lambda_val=4.0, margin=0.02)(x, _like(t, x)),
      our_fn=_on_lists(jaxrank.blackbox_ap_loss, t, interpolation=4.0, margin=0.02),
      why="their margin is 0.02 x |N(0, 1)| per item, drawn anew each call",
    )
  )
  return rows


def _roadmap_tie_and_composition_rows(inputs: _RoadmapInputs) -> list[Row]:
  """SupAP at an exact tie, then ROADMAP's composition (their roadmap.yaml) and an aligned one."""
  import jaxrank  # pylint: disable=g-import-not-at-top

  losses, e, s, t = inputs.losses, inputs.e, inputs.s, inputs.t
  with_self, without_self = inputs.with_self, inputs.without_self
  # A non-relevant item tied with a relevant one, both above the rest of the list.
  tied = s.copy()
  tied[0, int(np.argmax(t[0] > 0))] = tied[0, int(np.argmax(t[0] == 0))] = 0.99
  rows = [
    compare(
      "SupAP, exact tie",
      "SupAP(offset=None), lists",
      "supap_loss",
      "a relevant and a non-relevant score tied at the top",
      dtype="float64",
      x=tied,
      their_fn=lambda x: losses.SupAP()(x, _like(t, x), force_general=True),
      our_fn=_on_lists(jaxrank.supap_loss, t),
      why="H^-(0) is 1/2 in theirs, 1 in jaxrank (an upper bound)",
    )
  ]
  # The composition: their roadmap.yaml adds CalibrationLoss and SupAP with weight 1 each.
  supap, calibration = losses.SupAP(offset=1.44), losses.CalibrationLoss(0.9, 0.6)
  rows.append(
    compare(
      "ROADMAP",
      "SupAP(1.44) + CalibrationLoss",
      "2 * roadmap_loss(include_self)",
      "roadmap.yaml: weights 1 and 1; calibration_weight=0.5",
      dtype="float64",
      x=e,
      their_fn=lambda x: inputs.on_scores(supap)(x) + inputs.on_embeddings(calibration)(x),
      our_fn=lambda x: 2 * _on_batch(jaxrank.roadmap_loss, with_self)(x),
      why="offset 1.44, calibration's normalisation and the query in its pairs",
    )
  )
  aligned = losses.SupAP(), losses.CalibrationLoss(1.0, -1.0)
  rows.append(
    compare(
      "ROADMAP",
      "SupAP() + CalibrationLoss(1, -1)",
      "supap + calibration(1, -1)",
      "weights 1 and 1; SupAP with the query, calibration without",
      dtype="float64",
      x=e,
      their_fn=lambda x: inputs.on_scores(aligned[0])(x) + inputs.on_embeddings(aligned[1])(x),
      our_fn=lambda x: (
        _on_batch(jaxrank.supap_loss, with_self)(x)
        + _on_batch(jaxrank.calibration_loss, without_self, alpha=1.0, beta=-1.0)(x)
      ),
    )
  )
  return rows


def compare_smooth_ap(root: str) -> list[Row]:
  """Andrew-Brown1/Smooth_AP, `src/Smooth_AP_loss.py`."""
  import jaxrank  # pylint: disable=g-import-not-at-top

  module = import_released(os.path.join(root, "src"), "Smooth_AP_loss")
  e, y = batch()
  rows = []
  for dtype in DTYPES:
    loss = module.SmoothAP(0.01, y.size, NUM_CLASSES, DIM)
    rows.append(
      compare(
        "SmoothAP",
        "SmoothAP(0.01, 12, 4, 8)",
        "smoothap_loss",
        "T=0.01, query included, classes in blocks, dot product",
        dtype=dtype,
        x=e,
        their_fn=loss,
        our_fn=_on_batch(jaxrank.smoothap_loss, _retrieval(y, include_self=True, dot=True)),
      )
    )
  return rows


COMPARISONS: dict[str, Callable[[str], list[Row]]] = {
  "fastap": compare_fastap,
  "blackbox": compare_blackbox,
  "dir": compare_dir,
  "roadmap": compare_roadmap,
  "smooth_ap": compare_smooth_ap,
}


def run(
  paths: dict[str, str | None], comparisons: dict[str, Callable[[str], list[Row]]] | None = None
) -> list[Row]:
  """The rows of every repository given; prints what to clone for each one that is not."""
  comparisons = COMPARISONS if comparisons is None else comparisons
  rows = []
  for flag, fn in comparisons.items():
    path = paths.get(flag)
    if not path or not os.path.isdir(path):
      print(
        f"skipped --{flag.replace('_', '-')}: clone https://github.com/"
        f"{REPOSITORIES.get(flag, flag)} and pass its path"
      )
      continue
    rows += fn(path)
  return rows


def clone_commit(path: str) -> str:
  """The short hash of a clone's checked-out commit, or `(not a git clone)`."""
  done = subprocess.run(
    ["git", "-C", path, "rev-parse", "--short=7", "HEAD"],
    capture_output=True,
    text=True,
    check=False,
  )
  return done.stdout.strip() if done.returncode == 0 else "(not a git clone)"


def docs_notes(paths: dict[str, str | None]) -> list[str]:
  """The lines under the guide's table: what "equal" means, the clones' commits, the versions."""
  import jax  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top

  commits = [
    f"{REPOSITORIES[flag]} {clone_commit(path)}"
    for flag, path in paths.items()
    if flag in REPOSITORIES and path and os.path.isdir(path)
  ]
  versions = [f"torch {torch.__version__.split('+')[0]} (CPU)", f"jax {jax.__version__}"]
  try:
    versions.append(
      f"pytorch-metric-learning {importlib.metadata.version('pytorch-metric-learning')}"
    )
  except importlib.metadata.PackageNotFoundError:
    pass
  tolerances = " or ".join(
    f"{mantissa}e{int(exponent)} ({dtype})"
    for dtype, (mantissa, exponent) in ((d, f"{t:.0e}".split("e")) for d, t in TOLERANCE.items())
  )
  return [
    f"equal: both differences within {tolerances} relative to the largest value or gradient "
    "entry, unless the settings name a looser bound (the released code's own epsilon).",
    f"Commits: {', '.join(commits)}; {', '.join(versions)}.",
  ]


def write_docs(rows: Sequence[Row], paths: dict[str, str | None], directory=None):
  """Writes the table to docs/_generated/released_code.json (experiments/docs_data.py)."""

  return docs_data.write_table(
    "released_code",
    title="jaxrank beside the released code on identical inputs: the largest difference of the "
    "values and of the gradients",
    columns=HEADER,
    rows=[row.cells() for row in rows],
    notes=docs_notes(paths),
    directory=directory,
  )


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  for flag, repo in REPOSITORIES.items():
    parser.add_argument(
      f"--{flag.replace('_', '-')}",
      dest=flag,
      metavar="DIR",
      help=f"a local clone of github.com/{repo}",
    )
  parser.add_argument(
    "--docs", action="store_true", help="also write the table to docs/_generated/released_code.json"
  )
  args = parser.parse_args(argv)
  paths = {flag: getattr(args, flag) for flag in REPOSITORIES}
  rows = run(paths)
  print(
    "He et al. 2018 (github.com/kunhe/TALR) is MATLAB, not run here; see "
    "tests/test_hashing.py::test_tanh_scale_is_the_released_schedule."
  )
  if rows:
    print(format_rows(rows))
    if args.docs:
      print("wrote", write_docs(rows, paths))
  return 0


if __name__ == "__main__":
  sys.exit(main())
