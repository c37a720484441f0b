"""`segments` beyond what every function shares (tests/test_contract.py, "segments"): the
arguments that are per list or per item, and segments closed over by a jitted caller.

The convention is `jaxrank/_src/segmented.py`'s: each segment is one list, its value at its first
valid item; per-list arguments (`weights`, `interpolation`) are per segment, given in the scores'
shape and read at each segment's first valid item; per-item arguments (`item_weights`) stay per
item.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank

# One row of 6 items packing the lists [a, b, c] (id 5) and [d, e, f] (id 2), interleaved; the
# same lists padded in two rows of 6. Scores in [-1, 1], both lists with a relevant item.
SEGMENTS = np.array([5, 2, 5, 2, 2, 5])
SCORES = np.array([0.3, -0.2, 0.8, 0.9, 0.1, -0.5])
LABELS = np.array([1, 0, 0, 2, 1, 1])
ORDER = (np.array([0, 2, 5]), np.array([1, 3, 4]))  # The lists' items, in the packed row.


def padded(x, fill=0):
  """The two lists of the packed row `x`, padded to 6 with `fill`: `[2, 6]`."""
  out = np.full((2, 6), fill, dtype=np.asarray(x).dtype)
  for row, items in enumerate(ORDER):
    out[row, :3] = np.asarray(x)[items]
  return out


PADDED_WHERE = np.arange(6) < 3


def test_weights_are_per_segment():
  """`weights` in the scores' shape weigh each segment by the value at its first valid item."""
  weights = np.array([3.0, 0.5, 7.0, 9.0, 9.0, 7.0])  # Read at items 0 (list 5) and 1 (list 2).
  for fn in (jaxrank.soft_binning_ap_loss, jaxrank.contrastive_loss):
    for reduce_fn in (None, jnp.mean):
      want = fn(
        padded(SCORES),
        padded(LABELS),
        where=PADDED_WHERE,
        weights=np.array([3.0, 0.5]),
        reduce_fn=reduce_fn,
      )
      got = fn(SCORES, LABELS, segments=SEGMENTS, weights=weights, reduce_fn=reduce_fn)
      np.testing.assert_allclose(got if reduce_fn else np.asarray(got)[:2], want, rtol=1e-6)
    # Per row: `weights[..., None]` weighs every segment of the row alike.
    rows = [np.stack([x, x[::-1]]) for x in (SCORES, LABELS, SEGMENTS)]
    by_row = np.array([1.0, 3.0])
    got = fn(*rows[:2], segments=rows[2], weights=by_row[:, None], reduce_fn=None)
    np.testing.assert_allclose(
      got, by_row[:, None] * fn(*rows[:2], segments=rows[2], reduce_fn=None), rtol=1e-6
    )
    with pytest.raises(
      ValueError,
      match=r"weights have shape \(2,\).*\(2, 6\): with segments, "
      r"weights are per segment",
    ):
      fn(*rows[:2], segments=rows[2], weights=by_row)


def test_blackbox_lam_is_per_segment():
  # Read at items 0 and 1:
  interpolation = np.array([10.0, 30.0, 20.0, 20.0, 20.0, 20.0], np.float32)
  grads = []
  for args, kwargs in (
    (
      (padded(SCORES).astype(np.float32), padded(LABELS)),
      dict(where=PADDED_WHERE, interpolation=np.array([10.0, 30.0], np.float32)),
    ),
    ((SCORES.astype(np.float32), LABELS), dict(segments=SEGMENTS, interpolation=interpolation)),
  ):
    loss = lambda s: jaxrank.blackbox_ap_loss(s, args[1], **kwargs)  # noqa: B023
    grads.append(jax.jit(jax.grad(loss))(args[0]))
  np.testing.assert_allclose(padded(grads[1])[:, :3], grads[0][:, :3], rtol=1e-6)
  assert np.abs(grads[0][0]).max() > 0.03  # interpolation = 10 (20 would halve it).


def test_item_weights_stay_per_item():
  item_weights = np.array([0.5, 2.0, 1.0, 3.0, 0.0, 4.0])
  for fn in (jaxrank.ndcg_metric, jaxrank.dcg_metric):
    want = fn(
      padded(SCORES),
      padded(LABELS),
      where=PADDED_WHERE,
      item_weights=padded(item_weights),
      reduce_fn=None,
    )
    got = fn(SCORES, LABELS, segments=SEGMENTS, item_weights=item_weights, reduce_fn=None)
    np.testing.assert_allclose(np.asarray(got)[:2], want, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(got)[2:], 0)


@pytest.mark.parametrize("rows", [2, 256])  # 256 rows of 6: segments embedded compactly.
def test_segments_closed_over_by_jit(rows):
  scores = np.tile(SCORES, (rows, 1))
  segments = np.tile(SEGMENTS, (rows, 1))
  want = jaxrank.ap_metric(scores, LABELS, segments=segments, reduce_fn=None)
  got = jax.jit(lambda s: jaxrank.ap_metric(s, LABELS, segments=segments, reduce_fn=None))(scores)
  np.testing.assert_array_equal(got, want)
  lists = jaxrank.ap_metric(padded(SCORES), padded(LABELS), where=PADDED_WHERE, reduce_fn=None)
  np.testing.assert_allclose(np.asarray(got)[:, :2], np.tile(lists, (rows, 1)), rtol=1e-6)


def test_labels_and_mask_broadcast_with_segments():
  """Labels and a mask shared by every row broadcast against the scores, segments or not."""
  scores = np.stack([SCORES, SCORES[::-1]])
  segments = np.stack([SEGMENTS, SEGMENTS[::-1]])
  where = np.array([True, True, False, True, True, True])
  got = jaxrank.mrr_metric(scores, LABELS, where=where, segments=segments, reduce_fn=None)
  tiled = [np.broadcast_to(x, scores.shape) for x in (LABELS, where)]
  want = jaxrank.mrr_metric(scores, tiled[0], where=tiled[1], segments=segments, reduce_fn=None)
  np.testing.assert_array_equal(got, want)
  assert np.count_nonzero(got) == 4
