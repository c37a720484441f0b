"""`bounds.branch_index`: the branch a run-time choice takes, under jit, grad and vmap."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxrank._src import bounds


def _relevant(counts, n=20):
  counts = np.asarray(counts)
  return jnp.asarray(np.arange(n)[None, :] < counts[:, None])


def _chosen(relevant, x):
  """`(sum(x^2) * K, K)` for the bound `K` chosen (1 and -1 for the general form), as the losses
  use `branch_index`: one `lax.switch` over `(*bounded, None)`."""
  bounded = bounds.capacities_for(relevant.shape[-1])

  def form(k, x):
    bound = 1 if k is None else k
    return jnp.sum(x**2) * bound, jnp.asarray(-1 if k is None else k, jnp.int32)

  branches = [functools.partial(form, k) for k in (*bounded, None)]
  return lax.switch(bounds.branch_index(relevant, bounded), branches, x)


@pytest.mark.parametrize(
  ("counts", "expected"),
  [([0, 0], 1), ([1, 0], 1), ([2, 1], 2), ([3, 1], 4), ([4, 4], 4), ([5, 2], 8), ([8, 0], 8)],
)
def test_the_smallest_capacity_holding_every_list_is_taken(counts, expected):
  value, bound = jax.jit(_chosen)(_relevant(counts), jnp.arange(3.0))
  assert int(bound) == expected
  assert float(value) == 5.0 * expected


def test_more_relevant_items_than_every_capacity_take_the_general_form():
  _, bound = jax.jit(_chosen)(_relevant([9, 3]), 1.0)
  assert int(bound) == -1


def test_capacities_at_or_above_the_list_length_are_dropped():
  assert bounds.capacities_for(5) == (1, 2, 4)
  assert bounds.capacities_for(1) == ()
  assert bounds.capacities_for(9, (8, 2, 2, 0)) == (2, 8)
  # Lists of 4 items: the capacity 4 is dropped, a list of 4 relevant items takes the general form.
  _, bound = _chosen(_relevant([4], n=4), 1.0)
  assert int(bound) == -1
  # Lists of one item: no bounded form, the general form alone.
  assert int(bounds.branch_index(_relevant([1], n=1), ())) == 0


def test_the_gradient_goes_through_the_branch_taken():
  def loss(x, r):
    return _chosen(r, x)[0]

  x = jnp.arange(3.0)
  np.testing.assert_allclose(jax.grad(loss)(x, _relevant([3])), 2 * x * 4)
  np.testing.assert_allclose(jax.grad(loss)(x, _relevant([12])), 2 * x)


def test_under_vmap_each_batch_gets_its_own_branch():
  relevant = jnp.stack([_relevant([1, 0]), _relevant([6, 2]), _relevant([15, 1])])
  _, bound = jax.vmap(_chosen, in_axes=(0, None))(relevant, 1.0)
  assert bound.tolist() == [1, 8, -1]


def test_largest_relevant_count():
  assert int(bounds.largest_relevant_count(_relevant([3, 7, 1]))) == 7
  assert int(bounds.largest_relevant_count(jnp.zeros((0, 5), bool))) == 0
  assert int(bounds.largest_relevant_count(jnp.asarray([True, False, True]))) == 2
