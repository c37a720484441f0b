"""These tests need 8 devices: `make test` runs them in their own pytest process with
XLA_FLAGS=--xla_force_host_platform_device_count=8 (set before JAX starts)."""

import jax


def pytest_configure(config):
  del config
  if jax.device_count() < 8:
    raise RuntimeError(
        f"tests/multidevice needs 8 devices, found {jax.device_count()}: run them as "
        "XLA_FLAGS=--xla_force_host_platform_device_count=8 pytest tests/multidevice"
    )
