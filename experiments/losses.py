"""The losses a training config can name: a small table from names to jaxrank's list-level losses.

Every entry is called as `fn(scores [B, n], labels [B, n], *, where, reduce_fn, **hyperparameters)`
on the lists of `jaxrank.batch_retrieval` (each item of the batch querying the rest, and the memory
when there is one); `config.loss_kwargs` fixes the hyperparameters (`{"num_bins": 20}`). The entries
are the library's functions themselves, except the sums the papers train with, which are spelled out
here so that their weights are visible.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping

import jax.numpy as jnp

import jaxrank


def supap_plus_calibration(scores, labels, *, where=None, reduce_fn=jnp.mean):
  """SupAP + calibration with weight 1 each: what the ROADMAP authors' configs train with.

  `roadmap_loss` is eq. 2 of Ramzi et al. 2021 as printed, `(1 - lam) SupAP + lam calibration` with
  `lam = 0.5`; the released configs instead add the two losses with weight 1 (twice eq. 2). The
  minimiser is the same; the gradient is twice as large, which matters with a fixed learning rate.
  """
  return jaxrank.supap_loss(scores, labels, where=where, reduce_fn=reduce_fn) + (
      jaxrank.calibration_loss(scores, labels, where=where, reduce_fn=reduce_fn)
  )


def smoothap_plus_calibration(scores, labels, *, where=None, reduce_fn=jnp.mean):
  """SmoothAP + calibration with weight 1 each: ROADMAP's ablation of its two terms (Table 3)."""
  return jaxrank.smoothap_loss(scores, labels, where=where, reduce_fn=reduce_fn) + (
      jaxrank.calibration_loss(scores, labels, where=where, reduce_fn=reduce_fn)
  )


LOSSES: Mapping[str, Callable[..., object]] = {
    # Histogram (soft-binning) estimators of AP.
    "fastap": jaxrank.fastap_loss,
    "soft_binning_ap": jaxrank.soft_binning_ap_loss,
    # Tie-aware relaxations for hashing (He et al. 2018).
    "tie_aware_ap": jaxrank.tie_aware_ap_loss,
    "simplified_tie_aware_ap": jaxrank.simplified_tie_aware_ap_loss,
    "tie_aware_ndcg": jaxrank.tie_aware_ndcg_loss,
    "simplified_tie_aware_ndcg": jaxrank.simplified_tie_aware_ndcg_loss,
    # Blackbox-differentiated ranks (RaMBO).
    "blackbox_ap": jaxrank.blackbox_ap_loss,
    "blackbox_recall": jaxrank.blackbox_recall_loss,
    # Smooth ranks (SmoothAP, ROADMAP).
    "smoothap": jaxrank.smoothap_loss,
    "supap": jaxrank.supap_loss,
    "calibration": jaxrank.calibration_loss,
    "roadmap": jaxrank.roadmap_loss,
    "supap+calibration": supap_plus_calibration,
    "smoothap+calibration": smoothap_plus_calibration,
}


def get_loss(
    name: str, hyperparameters: Mapping[str, object] | None = None
) -> Callable[..., object]:
  """The loss called `name` with its hyperparameters fixed; errors say what to change.

  Args:
    name: a key of `LOSSES`.
    hyperparameters: keyword arguments of that loss (not `where`, `reduce_fn`).

  Returns:
    `fn(scores, labels, *, where=None, reduce_fn=jnp.mean)`.

  Raises:
    ValueError: an unknown name or hyperparameter.
  """
  if name not in LOSSES:
    raise ValueError(
        f"config.loss={name!r} is not a known loss; use one of {', '.join(sorted(LOSSES))}."
    )
  fn = LOSSES[name]
  hyperparameters = dict(hyperparameters or {})
  signature = inspect.signature(fn)
  allowed = [
      p.name
      for p in signature.parameters.values()
      if p.kind is p.KEYWORD_ONLY and p.name not in ("where", "reduce_fn", "weights")
  ]
  unknown = sorted(set(hyperparameters) - set(allowed))
  if unknown:
    raise ValueError(
        f"config.loss_kwargs has {unknown} which loss {name!r} does not take; its hyperparameters "
        f"are {allowed or 'none'}."
    )
  return functools.partial(fn, **hyperparameters) if hyperparameters else fn
