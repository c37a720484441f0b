"""`sharded_loss` and `sharded_batch_retrieval` on a mesh spanning 2 processes x 2 CPU devices.

One job (start-up costs seconds): each process builds the global batch from the seed, feeds only
its own rows (`jax.make_array_from_process_local_data`), and compares the sharded value and
gradient with the single-process computation on the whole batch, which it runs itself on its own
first device. Each check prints a marker that the test requires from both processes.

Tolerances are those of the 8-device tests (`tests/multidevice/test_sharded.py`): the value within
`rtol=1e-5` (the mean is a `psum` of per-device sums, added in another order than one device's
mean), the gradient within `rtol=1e-5, atol=1e-6` (the same sums, through the all-gather's
transpose); the lists themselves are exact but for the scores' last bit (`rtol=1e-6`), as there.
"""

from __future__ import annotations

import launcher

# One loss of each family: histogram, tie-aware, blackbox, smooth rank, pairwise baseline.
LOSSES = ("fastap", "tie_aware_ap", "blackbox_ap", "smoothap", "multi_similarity")

_CHILD = """
import launcher
launcher.initialize()

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jaxrank

assert (jax.process_count(), jax.device_count()) == (2, 4), jax.devices()
B, D, AXIS = 32, 8, "batch"
mesh = jax.make_mesh((jax.device_count(),), (AXIS,))  # Every device of both processes.
sharding = jax.NamedSharding(mesh, P(AXIS))

# The global batch, the same in every process: 8 classes of 4, noisy copies of class centres.
rng = np.random.default_rng(0)
labels = np.repeat(np.arange(B // 4), 4)[rng.permutation(B)]
embeddings = (rng.standard_normal((B, D)) + 1.5 * rng.standard_normal((B // 4, D))[labels]).astype(
    np.float32
)
# This process's rows: those its devices hold, in order.
blocks = sorted({s[0].indices(B) for s in sharding.addressable_devices_indices_map((B,)).values()})
rows = np.concatenate([np.arange(*block) for block in blocks])
assert len(rows) == B // 2 and len(set(rows)) == len(rows), rows
global_embeddings = jax.make_array_from_process_local_data(sharding, embeddings[rows], (B, D))
global_labels = jax.make_array_from_process_local_data(sharding, labels[rows], (B,))
assert not global_embeddings.is_fully_addressable

LOSSES = {
    "fastap": jaxrank.fastap_loss,
    "tie_aware_ap": jaxrank.tie_aware_ap_loss,
    "blackbox_ap": jaxrank.blackbox_ap_loss,
    "smoothap": functools.partial(jaxrank.smoothap_loss, temperature=0.05),
    "multi_similarity": jaxrank.multi_similarity_loss,
}


def single_process(loss_fn):
  def loss(e, y):
    scores, relevance, where = jaxrank.batch_retrieval(e, y)
    return loss_fn(scores, relevance, where=where)

  return jax.jit(jax.value_and_grad(loss))


want_values = {}
for name, loss_fn in LOSSES.items():
  want, want_grad = single_process(loss_fn)(embeddings, labels)
  want_values[name] = float(want)
  sharded = jax.jit(jax.value_and_grad(jaxrank.sharded_loss(loss_fn, mesh, AXIS)))
  value, grad = sharded(global_embeddings, global_labels)
  assert value.is_fully_replicated and grad.shape == (B, D)
  np.testing.assert_allclose(float(value), float(want), rtol=1e-5)
  shards = grad.addressable_shards
  assert len(shards) == 2 and sorted(s.index[0].indices(B) for s in shards) == blocks
  for shard in shards:
    np.testing.assert_allclose(
        np.asarray(shard.data), np.asarray(want_grad)[shard.index], rtol=1e-5, atol=1e-6
    )
  print(f"CHECK {name}", float(value), flush=True)

# Numpy inputs are taken as the whole global batch (the same in every process).
value = jax.jit(jaxrank.sharded_loss(LOSSES["fastap"], mesh, AXIS))(embeddings, labels)
np.testing.assert_allclose(float(value), want_values["fastap"], rtol=1e-5)
print("CHECK numpy-inputs", flush=True)

# The lists: this process's rows of batch_retrieval's, shard by shard.
lists = jax.jit(
    jax.shard_map(
        lambda e, y: jaxrank.sharded_batch_retrieval(e, y, axis_name=AXIS),
        mesh=mesh,
        in_specs=(P(AXIS), P(AXIS)),
        out_specs=P(AXIS),
    )
)(global_embeddings, global_labels)
want_lists = jaxrank.batch_retrieval(embeddings, labels)
for got, want, exact in zip(lists, want_lists, (False, True, True)):
  assert got.shape == (B, B)
  for shard in got.addressable_shards:
    expected = np.asarray(want)[shard.index]
    if exact:
      np.testing.assert_array_equal(np.asarray(shard.data), expected)
    else:
      np.testing.assert_allclose(np.asarray(shard.data), expected, rtol=1e-6)
print("CHECK lists", flush=True)

# An eager value check on a global array it cannot read whole still raises its ValueError.
local_scores = np.full((B // 2, 4), 3.0, np.float32)
scores = jax.make_array_from_process_local_data(sharding, local_scores, (B, 4))
relevance = jax.make_array_from_process_local_data(sharding, np.ones((B // 2, 4), np.int32), (B, 4))
with pytest.raises(ValueError, match=r"scores must lie in \\[-1, 1\\].*128 valid values outside"):
  jaxrank.fastap_loss(scores, relevance)
print("CHECK value-check", flush=True)
"""


def test_sharded_loss_and_lists_across_two_processes_equal_one_process():
  finished = launcher.run(["-c", _CHILD], num_processes=2, devices_per_process=2, timeout=240)
  for f in finished:
    for check in (*LOSSES, "numpy-inputs", "lists", "value-check"):
      assert f"CHECK {check}" in f.output, f.output
