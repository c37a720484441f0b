"""Every public function of jaxrank called once under `jax_enable_x64` (run by `test_x64.py`).

Run as a script in a process of its own (the flag is global and must be set before anything is
traced): it enables x64, calls each function of `jaxrank.__all__` and of its namespaces
(`hashing`, `memory`, `similarity`, `landscape`) on tiny float64 inputs (and the gradient of
each loss), checks every result is finite, and prints the names it called as JSON,
which the test compares with the public names, so that a new public function without a call here
fails.
"""

from __future__ import annotations

import functools
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

import jaxrank
from jaxrank import hashing
from jaxrank import landscape
from jaxrank import memory
from jaxrank import similarity

RNG = np.random.default_rng(0)
E = RNG.normal(size=(12, 4))  # Embeddings: 3 classes of 4.
Y = np.repeat(np.arange(3), 4)
SCORES = np.tanh(RNG.normal(size=(3, 8)))  # In [-1, 1], as the histogram losses need.
LABELS = (RNG.random((3, 8)) < 0.4).astype(np.int32)
LABELS[:, 0] = 1
WHERE = np.ones((3, 8), bool)
WHERE[:, -1] = False

# Functions of the list level that need more than (scores, labels, where=).
LIST_KWARGS = {
  "precision_at_k_metric": {"topn": 2},
  "recall_at_k_metric": {"topn": 2},
  "relevant_fraction_at_k_metric": {"topn": 2},
  "decomposability_gap": {"num_batches": 2},
  "smooth_rank_ap_loss": {
    "positive_step_fn": jaxrank.heaviside_step,
    "negative_step_fn": jaxrank.sigmoid_step,
  },
}


def _list_level(name, fn, dtype):
  scores = jnp.asarray(SCORES, dtype)
  if name.startswith("hamming_"):
    distances = jnp.asarray(RNG.integers(0, 7, (3, 8)))
    return fn(distances, LABELS, num_bits=6, where=WHERE)
  kwargs = {"where": WHERE, **LIST_KWARGS.get(name, {})}
  # Jitted, the labels closed over (concrete, as in an eager call): one program per function
  # (eagerly, each operation of a gradient compiles on its own, most of this script's time).
  if name.endswith("_loss"):
    return jax.jit(jax.value_and_grad(lambda s: fn(s, LABELS, **kwargs)))(scores)
  return jax.jit(lambda s: fn(s, LABELS, **kwargs))(scores)


# The losses on one learned row per class: the proxy and the classification losses.
PROXY_LOSSES = (
  "proxy_anchor_loss",
  "proxy_nca_loss",
  "proxy_nca_plus_plus_loss",
  "normalized_softmax_loss",
  "arcface_loss",
  "cosface_loss",
)
PROXIES = RNG.normal(size=(3, 4))  # One per class of Y.


def _proxy_loss(name, e):
  """The value and the gradients (embeddings, proxies or class weights) of such a loss, jitted."""
  loss = jax.value_and_grad(getattr(jaxrank, name), argnums=(0, 2))
  return jax.jit(loss)(e, jnp.asarray(Y), jnp.asarray(PROXIES, e.dtype))


def _mixup(fn, e):
  key = jax.random.key(0)
  if fn is jaxrank.embedding_mixup:
    return fn(e, Y, key=key, num_pairs=20)
  scores, relevance, where = jaxrank.batch_retrieval(e, Y)
  return fn(scores, relevance, Y, where=where, key=key, num_pairs=20)


def _mesh():
  return jax.make_mesh((1,), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))


@jax.jit  # Eagerly, `shard_map` runs its body operation by operation: 6 s of this script each.
def _sharded_retrieval(e):
  def per_device(e, y):
    scores, relevance, where = jaxrank.sharded_batch_retrieval(e, y, axis_name="batch")
    return jaxrank.fastap_loss(
      scores, relevance, where=where, reduce_fn=jaxrank.sharded_mean("batch")
    )

  spec = jax.sharding.PartitionSpec("batch")
  return jax.shard_map(
    per_device, mesh=_mesh(), in_specs=(spec, spec), out_specs=jax.sharding.PartitionSpec()
  )(e, jnp.asarray(Y))


def _chunked(factory, e):
  embed = lambda w, x: x @ w  # noqa: E731
  loss = lambda emb, y: jaxrank.fastap_loss(*jaxrank.batch_retrieval(emb, y)[:2])  # noqa: E731
  return factory(embed, loss, chunk_size=4)(jnp.eye(4, dtype=e.dtype), e, jnp.asarray(Y))


def _in_batch_ap(data):
  scores, relevance, where = jaxrank.batch_retrieval(data[0], data[1])
  return jaxrank.ap_metric(scores, relevance, where=where)


def _landscape(dtype):
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  x = jnp.asarray(SCORES, dtype)
  loss = functools.partial(jaxrank.smoothap_loss, where=WHERE)
  exact = lambda s, y: 1.0 - jaxrank.ap_metric(s, y, where=WHERE)  # noqa: E731
  key = jax.random.key(0)
  direction = landscape.random_direction(key, x)
  alphas = jnp.linspace(-1.0, 1.0, 3, dtype=dtype)
  surface = landscape.slice_2d(loss, x, (direction, direction), alphas, alphas, args=(LABELS,))
  labels = (LABELS,)
  tracking = landscape.surrogate_tracking(
    loss, exact, x, key, scale=0.1, num_points=4, loss_args=labels, reference_args=labels
  )
  _, ax = plt.subplots()
  out = {
    "random_direction": direction,
    "direction_between": landscape.direction_between(x, x + 1),
    "filter_normalize": landscape.filter_normalize(direction, x),
    "filter_normalized_direction": landscape.filter_normalized_direction(key, x),
    "slice_1d": landscape.slice_1d(loss, x, direction, alphas, args=labels),
    "slice_2d": surface,
    "surrogate_tracking": tracking,
    "gradient_cosine": landscape.gradient_cosine(
      loss, exact, x, step=0.1, loss_args=labels, reference_args=labels
    ),
    "descent_directions": landscape.descent_directions(loss, x, args=labels),
    "batch_gap": landscape.batch_gap(
      _in_batch_ap, (jnp.asarray(E, dtype), jnp.asarray(Y)), jnp.arange(12).reshape(2, 6)
    ),
    "spearman_correlation": landscape.spearman_correlation(x[0], x[1]),
    "kendall_correlation": landscape.kendall_correlation(x[0], x[1]),
    "plot_slice_2d": landscape.plot_slice_2d(ax, alphas, alphas, surface),
    "plot_tracking": landscape.plot_tracking(ax, tracking),
  }
  plt.close("all")
  return out


def calls(dtype) -> dict[str, object]:
  """Public name -> its result on `dtype` inputs."""
  e = jnp.asarray(E, dtype)
  out: dict[str, object] = {}
  for name in jaxrank.__all__:
    fn = getattr(jaxrank, name)
    # Called below, on embeddings.
    in_batch = name in ("blocked_loss", "sharded_loss") or name in PROXY_LOSSES
    if (name.endswith(("_metric", "_loss")) and not in_batch) or name == "decomposability_gap":
      out[name] = _list_level(name, fn, dtype)
  x = jnp.asarray(SCORES, dtype)
  out.update(
    batch_retrieval=jaxrank.batch_retrieval(e, Y),
    evaluate_retrieval=jaxrank.evaluate_retrieval(e, Y, super_labels=Y // 2),
    hierarchical_relevance=jaxrank.hierarchical_relevance(jnp.asarray(LABELS) * 2, num_levels=2),
    mixup_pairs=jaxrank.mixup_pairs(Y, num_pairs=4),
    similarity_mixup=_mixup(jaxrank.similarity_mixup, e),
    embedding_mixup=_mixup(jaxrank.embedding_mixup, e),
    evaluate_revisited=jaxrank.evaluate_revisited(
      e[:2], e, [{"easy": [0, 1], "hard": [4], "junk": [8]}] * 2, reduce_fn=None
    ),
    evaluate_hashing=jaxrank.evaluate_hashing(
      jnp.sign(e[:3]), jnp.sign(e), Y[:3], Y, ks=(4,), reduce_fn=None
    ),
    learn_whitening=jaxrank.learn_whitening(e, dim=3),
    apply_whitening=jaxrank.apply_whitening(e, jaxrank.learn_whitening(e, dim=3)),
    alpha_query_expansion=jaxrank.alpha_query_expansion(e[:3], e, k=2),
    database_augmentation=jaxrank.database_augmentation(e, k=2, alpha=2.0),
    blackbox_ranks=jax.grad(lambda s: jnp.sum(jaxrank.blackbox_ranks(s, 1.0) * s))(x),
    class_balancing_weights=jaxrank.class_balancing_weights(Y),
    heaviside_step=jaxrank.heaviside_step(x),
    sigmoid_step=jaxrank.sigmoid_step(x),
    supap_negative_step=jaxrank.supap_negative_step(x),
    blocked_loss=jaxrank.blocked_loss(jaxrank.fastap_loss, block_size=4)(e, Y),
    chunked_value_and_grad=_chunked(jaxrank.chunked_value_and_grad, e),
    host_chunked_value_and_grad=_chunked(jaxrank.host_chunked_value_and_grad, e),
    sharded_loss=jax.jit(jaxrank.sharded_loss(jaxrank.fastap_loss, _mesh(), "batch"))(
      e, jnp.asarray(Y)
    ),
    sharded_batch_retrieval=_sharded_retrieval(e),
    sharded_mean=_sharded_retrieval(e),
    **{name: _proxy_loss(name, e) for name in PROXY_LOSSES},
  )
  checked = jax.jit(checkify.checkify(jaxrank.fastap_loss, errors=checkify.user_checks))
  with jaxrank.traced_checks():
    error, out["traced_checks"] = checked(x, LABELS)
  error.throw()
  codes = jnp.tanh(e)
  out.update(
    {
      "hashing.binarize": hashing.binarize(codes),
      "hashing.relaxed_hamming_distance": hashing.relaxed_hamming_distance(codes, codes),
      "hashing.tanh_scale": hashing.tanh_scale(3, every=2),
      "memory.init": memory.init(8, 4, dtype=dtype),
      "memory.push": memory.push(memory.init(8, 4, dtype=dtype), e[:4], jnp.asarray(Y[:4])),
      **{f"similarity.{n}": getattr(similarity, n)(e, e) for n in _public(similarity)},
      **{f"landscape.{n}": v for n, v in _landscape(dtype).items()},
    }
  )
  return out


def _public(module) -> list[str]:
  return [n for n in module.__all__ if callable(getattr(module, n)) and not n[0].isupper()]


def main() -> None:
  # Here, not at import: pytest's doctest collection imports this module into the suite's own
  # processes, which must keep JAX's default.
  jax.config.update("jax_enable_x64", True)
  called = set()
  for dtype in (jnp.float64,):  # float32 inputs take the same integer paths (issue 51's).
    for name, result in calls(dtype).items():
      leaves = [np.asarray(x) for x in jax.tree.leaves(result) if hasattr(x, "dtype")]
      floats = [x for x in leaves if np.issubdtype(x.dtype, np.floating)]
      if not all(np.all(np.isfinite(x)) for x in floats):
        raise AssertionError(f"{name} ({np.dtype(dtype).name}): a value is not finite")
      called.add(name)
  json.dump(sorted(called), sys.stdout)


if __name__ == "__main__":
  main()
