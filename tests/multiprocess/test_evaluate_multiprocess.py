"""`evaluate_retrieval(..., mesh=)` over 2 processes x 2 CPU devices equals one process.

One job (a few seconds of start-up) checks every case: each process passes its own, uneven, share
of the rows and must get, on every process, exactly what `evaluate_retrieval` gives in one process
on all the rows: every per-query value and every reduced metric, bit for bit.
"""

from __future__ import annotations

import launcher

_SCRIPT = r"""
import launcher
launcher.initialize()
import jax
import numpy as np
import jaxrank

counts = (jax.process_count(), jax.device_count())
assert counts == (2, 4), counts
me = jax.process_index()
mesh = jax.make_mesh((4,), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))
grid = jax.make_mesh((2, 2), ("a", "b"), axis_types=(jax.sharding.AxisType.Auto,) * 2)


def mine(x, first):  # Process 0 holds the first `first` rows, process 1 the rest.
  return x[:first] if me == 0 else x[first:]


def check(name, q, y, split, gallery=None, gallery_split=None, mesh=mesh, **kwargs):
  # The same data on every process; the single-process result on all of it is the reference.
  want = jaxrank.evaluate_retrieval(q, y, *(gallery or ()), reduce_fn=None, **kwargs)
  want_mean = jaxrank.evaluate_retrieval(q, y, *(gallery or ()), **kwargs)
  local = [mine(q, split), mine(y, split)]
  if gallery:
    local += [mine(gallery[0], gallery_split), mine(gallery[1], gallery_split)]
  got = jaxrank.evaluate_retrieval(*local, reduce_fn=None, mesh=mesh, **kwargs)
  got_mean = jaxrank.evaluate_retrieval(*local, mesh=mesh, **kwargs)
  assert sorted(got) == sorted(want), (sorted(got), sorted(want))
  for key in want:
    assert got[key].dtype == want[key].dtype, (name, key, got[key].dtype)
    assert np.array_equal(got[key], want[key]), (name, key, got[key], want[key])
  assert got_mean == want_mean, (name, got_mean, want_mean)
  assert 0 < want["num_relevant"].sum() and (want["num_relevant"] == 0).any(), name
  print("ok", name, want_mean, flush=True)


rng = np.random.default_rng(0)
# Small integer entries: dot products exact in any order, so the scores are the same bits whatever
# the shard sizes, and many are exactly tied (the tie-aware mAP differs from the mAP).
ties = rng.integers(-1, 2, (37, 6)).astype(np.float32)
labels = np.append(rng.integers(0, 5, 36), 99)  # The last query has no relevant item.
check("leave-one-out, 3 chunks", ties, labels, 11, chunk_size=16)
queries = rng.integers(-1, 2, (21, 6)).astype(np.float32)
query_labels = np.append(rng.integers(0, 4, 20), 7)
gallery = (rng.integers(-2, 3, (50, 6)).astype(np.float32), rng.integers(0, 4, 50))
check("gallery, 2 x 2 mesh, dot product, 6 chunks", queries, query_labels, 15, gallery, 17,
      mesh=grid, chunk_size=4, ks=(1, 5), similarity_fn=jaxrank.similarity.dot_product)
# Float embeddings, nearly collinear (many scores an ulp apart), on a gallery split into shards of
# other sizes than one process's: exact only because every score comes out of a product of one
# shape (1,024 item rows, `jaxrank.similarity`) whatever the shard.
close = (rng.standard_normal(64) + 1e-3 * rng.standard_normal((1500, 64))).astype(np.float32)
close_labels = np.append(rng.integers(0, 40, 1499), 99)  # The last has no relevant item.
check("float, nearly collinear, 1,500 items", close, close_labels, 700, chunk_size=250)

# The hierarchical metrics (super_labels=): each process passes its share of the super-labels too.
classes = rng.integers(0, 12, 45)
tree = np.stack([classes // 3, classes // 6], axis=1)
tree_e = (rng.integers(-1, 2, (12, 6))[classes] + rng.integers(-1, 2, (45, 6))).astype(np.float32)
want = jaxrank.evaluate_retrieval(tree_e, classes, super_labels=tree, chunk_size=8, reduce_fn=None)
got = jaxrank.evaluate_retrieval(
  mine(tree_e, 19), mine(classes, 19), super_labels=mine(tree, 19), chunk_size=8, reduce_fn=None,
  mesh=mesh,
)
assert sorted(got) == sorted(want) and "h-ap" in got
for key in want:
  assert np.array_equal(got[key], want[key]), (key, got[key], want[key])
print("ok hierarchy", flush=True)

# A mesh without the other process's devices is refused at once on every process (a collective
# would wait for the missing devices).
alone = jax.sharding.Mesh(np.array(jax.local_devices()), ("batch",))
try:
  jaxrank.evaluate_retrieval(ties[:4], labels[:4], mesh=alone)
except ValueError as e:
  assert "has no device of process" in str(e), e
  print("ok refused", flush=True)
else:
  raise AssertionError("a mesh without process 1's devices was accepted")
"""


def test_distributed_evaluation_equals_one_process():
  finished = launcher.run(["-c", _SCRIPT], num_processes=2, devices_per_process=2, timeout=150)
  for f in finished:
    assert f.output.count("ok ") == 5, f.output
