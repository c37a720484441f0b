"""These tests need 8 devices: `make test` runs them in their own pytest process with
XLA_FLAGS=--xla_force_host_platform_device_count=8 (set before JAX starts)."""

import jax
import pytest


def pytest_configure(config):
  del config
  if jax.device_count() < 8:
    raise RuntimeError(
      f"tests/multidevice needs 8 devices, found {jax.device_count()}: run them as "
      "XLA_FLAGS=--xla_force_host_platform_device_count=8 pytest tests/multidevice"
    )


@pytest.fixture(scope="module")
def mesh():
  """The 8 devices as one mesh axis, "batch", of Auto sharding (the tests' modules name it AXIS)."""
  return jax.make_mesh((8,), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))
