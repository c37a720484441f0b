"""Shared fixtures: float64 only inside a test, never at import."""

# Importing TensorFlow (2.21) before triton (which torchvision and torch._dynamo import) kills the
# process with a segmentation fault (torch 2.14.1's CUDA build, on this CPU machine). Test modules
# import both at collection, in file order, so triton is imported first, here.
try:
  import triton  # noqa: F401  pylint: disable=unused-import
except ImportError:  # No torch installed: neither is imported.
  pass

import jax
import pytest

from jaxrank._src import ranking


@pytest.fixture
def x64():
  """Runs the test with float64 enabled."""
  with jax.enable_x64(True):
    yield


@pytest.fixture(params=ranking.DESCENDING_RANKS_BRANCHES)
def rank_branch(request):
  """Runs the test once on each sort path of the blackbox ranks: numpy through a callback (the CPU
  path) and XLA's sort (the GPU/TPU path), whatever the platform. Functions the test jits are
  traced inside, so they take the branch too. Yields the branch's name."""
  with ranking.descending_ranks_branch(request.param):
    yield request.param
