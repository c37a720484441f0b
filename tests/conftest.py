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


@pytest.hookimpl(tryfirst=True)  # Before pytest-xdist's own hook reads the groups.
def pytest_collection_modifyitems(config, items):
  """Keeps each test file's tests on one pytest-xdist worker (`make test`: `--dist loadgroup`): a
  file without a group of its own is its own group. Dealt out test by test, a file's tests ran on
  both workers, and each worker compiled the programs they share (the module's jitted functions,
  every eager operation's shapes): on test_contract, test_metrics, test_smooth_rank and
  test_pairwise, grouped by file took 520 s of CPU against 668 s (297 s against 353 s of wall
  time, 2 workers). Without xdist the marks do nothing."""
  del config
  for item in items:
    if item.get_closest_marker("xdist_group") is None:
      item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
