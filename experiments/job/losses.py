"""The losses a training config can name: a small table from names to jaxrank's losses.

Every entry but the proxy losses is called as `fn(scores [B, n], labels [B, n], *, where,
reduce_fn, **hyperparameters)` on the lists of `jaxrank.batch_retrieval` (each item of the batch
querying the rest, and the memory when there is one); `config.loss_kwargs` fixes the
hyperparameters (`{"num_bins": 20}` for soft_binning_ap). The entries are the library's functions
themselves, except the sums the papers train with, which are spelled out here so that their
weights are visible.

The losses with parameters of their own (the keys of `OWN_PARAMETERS`: the proxy losses and the
classification losses) are called as `fn(embeddings [B, D], labels [B], own [C, D], *, reduce_fn,
**hyperparameters)`: no lists, the batch's embeddings against one learned row per training class
(proxies, or a classifier's class weights), the labels the classes' indices in `[0, C)`. Each
declares its parameters once, as an `OwnParameters` (their name, how they start, the config field
of their learning rate, the options they refuse), and the job reads that declaration: the state
holds them (`step.init_state`), the optimiser trains them (`optimizer.make_optimizer`), the checks
refuse what they cannot take (`check.check_config`) and the checkpoints record their rows.

`SUMMARIES` (name -> one line) is plain data, and `LOSSES` (name -> function) is built from it on
first use, so that listing the losses (`python -m experiments.job.main --help`) imports neither JAX
nor jaxrank.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

from experiments.job import config as config_lib

# Name -> what it is. Keys of `LOSSES`, in the order `--help` lists them.
SUMMARIES: Mapping[str, str] = {
  # Histogram (soft-binning) estimators of AP.
  "fastap": "FastAP, Cakir et al. 2019 (num_intervals)",
  "soft_binning_ap": "mAP_Q, Revaud et al. 2019 (num_bins)",
  # Tie-aware relaxations for hashing (He et al. 2018).
  "tie_aware_ap": "AP_r, He et al. 2018 (num_bins)",
  "simplified_tie_aware_ap": "AP_s, He et al. 2018 (num_bins)",
  "tie_aware_ndcg": "NDCG_r, He et al. 2018 (num_bins)",
  "simplified_tie_aware_ndcg": "NDCG_s, He et al. 2018 (num_bins)",
  # Blackbox-differentiated ranks (RaMBO).
  "blackbox_ap": "RaMBO's AP loss, Rolinek et al. 2020 (interpolation, margin)",
  "blackbox_recall": "RaMBO's recall loss, Rolinek et al. 2020 (interpolation, margin, weight_fn)",
  # Smooth ranks (SmoothAP, ROADMAP).
  "smoothap": "Smooth-AP, Brown et al. 2020 (temperature)",
  "supap": "SupAP, Ramzi et al. 2021 (temperature, rho, delta)",
  "calibration": "ROADMAP's calibration loss (alpha, beta)",
  "roadmap": "(1 - w) SupAP + w calibration, Ramzi et al. 2021 eq. 2 (calibration_weight w)",
  "supap+calibration": "SupAP + calibration, weight 1 each (ROADMAP's released configs)",
  "smoothap+calibration": "Smooth-AP + calibration, weight 1 each (ROADMAP's Table 3)",
  # Pair-based baselines the papers compare against.
  "contrastive": "contrastive, Hadsell et al. 2006 (pos_margin, neg_margin)",
  "triplet": "triplet, batch-hard (Hermans et al. 2017) or all triplets (margin, mining)",
  "multi_similarity": "multi-similarity, Wang et al. 2019 (alpha, beta, base, epsilon)",
  # Proxy-based baselines: one learned proxy per training class (see OWN_PARAMETERS).
  "proxy_nca": "Proxy-NCA, Movshovitz-Attias et al. 2017 (no hyperparameter)",
  "proxy_nca_plus_plus": "ProxyNCA++, Teh et al. 2020 (temperature)",
  "proxy_anchor": "Proxy-Anchor, Kim et al. 2020 (margin, alpha)",
  # Classification baselines: one learned row of class weights per training class.
  "normalized_softmax": "normalised softmax, Zhai & Wu 2019 (temperature)",
  "arcface": "ArcFace, Deng et al. 2019 (angular_margin, scale)",
  "cosface": "CosFace, Wang et al. 2018 (margin, scale)",
}


def _normal_over_eight(key: Any, num_classes: int, dim: int) -> Any:
  """`N(0, 1/64)`: `torch.randn(C, D) / 8`, the proxies of Teh et al. 2020's code (its
  `ProxyNCA_classic` and `ProxyNCA_prob`)."""
  import jax  # pylint: disable=g-import-not-at-top

  return jax.random.normal(key, (num_classes, dim)) / 8


def _kaiming_normal_fan_out(key: Any, num_classes: int, dim: int) -> Any:
  """`N(0, 2 / C)`: `torch.nn.init.kaiming_normal_(proxies, mode="fan_out")` of a `[C, D]` tensor
  (whose fan-out is `C`, the gain of ReLU `sqrt(2)`), the proxies of Kim et al. 2020's code."""
  import jax  # pylint: disable=g-import-not-at-top

  return jax.random.normal(key, (num_classes, dim)) * math.sqrt(2 / num_classes)


def _standard_normal(key: Any, num_classes: int, dim: int) -> Any:
  """`N(0, 1)`: `torch.nn.init.normal_`, how pytorch-metric-learning 2.9.0 starts the `W` of its
  `NormalizedSoftmaxLoss`, `ArcFaceLoss` and `CosFaceLoss` (its `WeightMixin`'s default)."""
  import jax  # pylint: disable=g-import-not-at-top

  return jax.random.normal(key, (num_classes, dim))


def _refusals(noun: str) -> Mapping[str, str]:
  """The options of the in-batch lists that a loss on one learned row per class cannot take:
  config field -> why not."""
  return {
    "chunk_size": f"the chunked gradient reaches the network's parameters only, never the {noun}",
    "loss_block_size": f"it compares each embedding with the {noun}, not with blocks of the batch",
    "memory_batches": f"it compares each embedding with the {noun}, not with a gallery",
    "include_self": f"it compares each embedding with the {noun}, never with itself",
  }


@dataclasses.dataclass(frozen=True)
class OwnParameters:
  """The parameters a loss trains beside the network: `[C, D]`, one row per training class (`C`
  the training split's classes, `D = config.embedding_dim`), declared once per loss.

  Attributes:
    name: the loss's argument that takes them, and their key in the training state, the
      optimiser's groups and the checkpoints ("proxies", "class_weights").
    init: `init(key, C, D) -> [C, D]`, how a run's rows start (from a key of the config's seed).
    lr_multiplier: the `Config` field whose value multiplies the network's learning rate for them.
    refuses: the `Config` fields that must keep their defaults with this loss -> why.
  """

  name: str
  init: Callable[[Any, int, int], Any]
  lr_multiplier: str
  refuses: Mapping[str, str]


# The proxies start as the authors' code starts them. pytorch-metric-learning starts both of its
# proxy losses at N(0, 1) instead; the scale matters only through the optimiser (the losses take
# cosines of the proxies, and Adam's steps have a fixed size, so a longer proxy turns more slowly).
_PROXIES = OwnParameters(
  name="proxies",
  init=_normal_over_eight,
  lr_multiplier="proxy_lr_multiplier",
  refuses=_refusals("proxies"),
)
_CLASS_WEIGHTS = OwnParameters(
  name="class_weights",
  init=_standard_normal,
  lr_multiplier="class_weight_lr_multiplier",
  refuses=_refusals("class weights"),
)
# The losses of the table with parameters of their own: name -> their declaration.
OWN_PARAMETERS: Mapping[str, OwnParameters] = {
  "proxy_nca": _PROXIES,
  "proxy_nca_plus_plus": _PROXIES,
  "proxy_anchor": dataclasses.replace(_PROXIES, init=_kaiming_normal_fan_out),
  "normalized_softmax": _CLASS_WEIGHTS,
  "arcface": _CLASS_WEIGHTS,
  "cosface": _CLASS_WEIGHTS,
}


def _positional(fn: Callable[..., Any]) -> list[str]:
  return [
    p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD
  ]


@functools.cache
def _table() -> dict[str, Callable[..., Any]]:
  """Name -> loss function: `LOSSES`, built on first use (it imports jaxrank)."""
  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp

  import jaxrank

  def supap_plus_calibration(scores, labels, *, where=None, max_relevant=None, reduce_fn=jnp.mean):
    """SupAP + calibration with weight 1 each: what the ROADMAP authors' configs train with.

    `roadmap_loss` is eq. 2 of Ramzi et al. 2021 as printed, `(1 - w) SupAP + w calibration`
    with `w = calibration_weight = 0.5`; the released configs instead add the two losses with
    weight 1 (twice eq. 2). The minimiser is the same; the gradient is twice as large, which
    matters with a fixed learning rate.
    """
    return jaxrank.supap_loss(
      scores, labels, where=where, max_relevant=max_relevant, reduce_fn=reduce_fn
    ) + jaxrank.calibration_loss(scores, labels, where=where, reduce_fn=reduce_fn)

  def smoothap_plus_calibration(
    scores, labels, *, where=None, max_relevant=None, reduce_fn=jnp.mean
  ):
    """SmoothAP + calibration with weight 1 each: ROADMAP's ablation of its two terms (Table 3)."""
    return jaxrank.smoothap_loss(
      scores, labels, where=where, max_relevant=max_relevant, reduce_fn=reduce_fn
    ) + jaxrank.calibration_loss(scores, labels, where=where, reduce_fn=reduce_fn)

  table: dict[str, Callable[..., Any]] = {
    "fastap": jaxrank.fastap_loss,
    "soft_binning_ap": jaxrank.soft_binning_ap_loss,
    "tie_aware_ap": jaxrank.tie_aware_ap_loss,
    "simplified_tie_aware_ap": jaxrank.simplified_tie_aware_ap_loss,
    "tie_aware_ndcg": jaxrank.tie_aware_ndcg_loss,
    "simplified_tie_aware_ndcg": jaxrank.simplified_tie_aware_ndcg_loss,
    "blackbox_ap": jaxrank.blackbox_ap_loss,
    "blackbox_recall": jaxrank.blackbox_recall_loss,
    "smoothap": jaxrank.smoothap_loss,
    "supap": jaxrank.supap_loss,
    "calibration": jaxrank.calibration_loss,
    "roadmap": jaxrank.roadmap_loss,
    "supap+calibration": supap_plus_calibration,
    "smoothap+calibration": smoothap_plus_calibration,
    "contrastive": jaxrank.contrastive_loss,
    "triplet": jaxrank.triplet_loss,
    "multi_similarity": jaxrank.multi_similarity_loss,
    "proxy_nca": jaxrank.proxy_nca_loss,
    "proxy_nca_plus_plus": jaxrank.proxy_nca_plus_plus_loss,
    "proxy_anchor": jaxrank.proxy_anchor_loss,
    "normalized_softmax": jaxrank.normalized_softmax_loss,
    "arcface": jaxrank.arcface_loss,
    "cosface": jaxrank.cosface_loss,
  }
  assert list(table) == list(SUMMARIES), "SUMMARIES and the table must name the same losses."
  # A loss with parameters of its own takes them as its third positional argument, by their name.
  positional = {n: _positional(fn) for n, fn in table.items()}
  third = {n: args[2] for n, args in positional.items() if len(args) > 2}
  declared = {n: p.name for n, p in OWN_PARAMETERS.items()}
  assert third == declared, "OWN_PARAMETERS must declare the losses that take parameters."
  return table


def __getattr__(name: str) -> Any:
  """`LOSSES`: name -> loss function, built on first access (PEP 562)."""
  if name == "LOSSES":
    return _table()
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_loss(name: str, hyperparameters: Mapping[str, object] | None = None) -> Callable[..., Any]:
  """The loss called `name` with its hyperparameters fixed; errors say what to change.

  Args:
    name: a key of `LOSSES`.
    hyperparameters: keyword arguments of that loss (not `where`, `reduce_fn`).

  Returns:
    `fn(scores, labels, *, where=None, reduce_fn=jnp.mean)`, or for a loss with parameters of
    its own (`OWN_PARAMETERS`) `fn(embeddings, labels, own, *, where=None, reduce_fn=jnp.mean)`.

  Raises:
    ConfigError: an unknown name or hyperparameter.
  """
  if name not in SUMMARIES:
    raise config_lib.ConfigError(
      f"config.loss={name!r} is not a known loss; use one of {', '.join(sorted(SUMMARIES))}."
    )
  fn = _table()[name]
  hyperparameters = dict(hyperparameters or {})
  signature = inspect.signature(fn)
  allowed = [
    p.name
    for p in signature.parameters.values()
    if p.kind is p.KEYWORD_ONLY and p.name not in ("where", "reduce_fn", "weights")
  ]
  unknown = sorted(set(hyperparameters) - set(allowed))
  if unknown:
    raise config_lib.ConfigError(
      f"config.loss_kwargs has {unknown} which loss {name!r} does not take; its hyperparameters "
      f"are {allowed or 'none'}."
    )
  return functools.partial(fn, **hyperparameters) if hyperparameters else fn


def takes_relevant_bound(name: str) -> bool:
  """Whether loss `name` takes `max_relevant`, a static bound on the relevant items of a list
  (the blackbox and smooth-rank losses: a loop or a count of that many items instead of a sort or
  a loop of data-dependent length, which accelerators' compilers can schedule and count)."""
  return "max_relevant" in inspect.signature(_table()[name]).parameters


def own_parameters(name: str) -> OwnParameters | None:
  """The parameters that loss `name` trains beside the network (`OWN_PARAMETERS`), or None for a
  loss on the lists of the batch."""
  return OWN_PARAMETERS.get(name)


def check_loss(name: str, hyperparameters: Mapping[str, object] | None = None) -> None:
  """Builds the loss and traces its value and gradient on two tiny lists, before any training.

  A hyperparameter that the loss itself rejects (`num_intervals=1`, a negative temperature, a wrong
  type) fails here, with the loss's own message, instead of at the first training step after the
  workdir and the first evaluation were written. jaxrank checks hyperparameters when a function is
  traced, so tracing (`jax.eval_shape`, nothing compiled or run: well under a second) is enough.
  The lists are cosine-like scores in [-1, 1], each with relevant and non-relevant items, as
  `jaxrank.batch_retrieval` gives them; a loss with parameters of its own gets four embeddings of
  two classes and two rows of its parameters instead.

  Raises:
    ConfigError: an unknown name or hyperparameter, or a value the loss rejects.
  """
  fn = get_loss(name, hyperparameters)
  # pylint: disable=g-import-not-at-top
  import jax
  import numpy as np

  scores = np.array([[0.5, -0.2, 0.1, 0.8], [0.3, 0.9, -0.7, 0.0]], np.float32)
  labels = np.array([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]], np.float32)
  where = np.ones_like(labels, dtype=bool)
  objective, inputs = (lambda s: fn(s, labels, where=where)), scores
  if name in OWN_PARAMETERS:  # Four embeddings (the columns) of classes 0, 1, 1, 0; two rows.
    classes, own = np.array([0, 1, 1, 0], np.int32), np.eye(2, dtype=np.float32)
    objective, inputs = (lambda e: fn(e, classes, own)), scores.T
  try:
    jax.eval_shape(jax.value_and_grad(objective), inputs)
  except (TypeError, ValueError) as e:
    kwargs, reason = dict(hyperparameters or {}), " ".join(str(e).split())
    raise config_lib.ConfigError(
      f"config.loss_kwargs={kwargs!r} cannot be used with loss {name!r}: {reason}"
    ) from e


def check_blocked_loss(
  name: str, hyperparameters: Mapping[str, object] | None, block_size: int
) -> None:
  """Traces the loss over blocks of `block_size` queries (`jaxrank.blocked_loss`) on a tiny batch.

  The loss must be one mean over lists; the sums of two losses of the table are not (each takes
  its own mean), and fail here with the library's reason instead of at the first step.

  Raises:
    ConfigError: a loss that cannot be computed in blocks.
  """
  fn = get_loss(name, hyperparameters)
  # pylint: disable=g-import-not-at-top
  import jax
  import numpy as np

  import jaxrank

  embeddings = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
  labels = np.array([0, 0, 1, 1, 2, 2], np.int32)
  blocked = jaxrank.blocked_loss(fn, block_size=block_size)
  try:
    jax.eval_shape(jax.value_and_grad(blocked), embeddings, labels)
  except ValueError as e:
    reason = " ".join(str(e).split())
    raise config_lib.ConfigError(
      f"config.loss_block_size cannot be used with loss {name!r}: {reason} (for SupAP and "
      "calibration, loss='roadmap' is their sum per list, with one mean)."
    ) from e
