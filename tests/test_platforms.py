"""`platforms.by_platform` keeps one form per platform; `forced_platform` picks one for tests."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxrank._src import platforms
from jaxrank._src import ranking


def _forms(x):
  # Distinguishable in the compiled program: a sine on CPU, a cosine on TPUs, a tanh on GPUs.
  return dict(cpu=jnp.sin, accelerator=jnp.cos, gpu=jnp.tanh)


@pytest.mark.parametrize("with_gpu", [False, True])
def test_forced_platform_takes_its_form_whatever_the_platform(with_gpu):
  x = jnp.linspace(0.1, 1.0, 5)
  forms = _forms(x)
  if not with_gpu:
    del forms["gpu"]
  with platforms.forced_platform("accelerator"):
    assert platforms.forced() == "accelerator"
    assert jnp.array_equal(jax.jit(lambda x: platforms.by_platform(x, **forms))(x), jnp.cos(x))
  with platforms.forced_platform("cpu"):
    assert jnp.array_equal(jax.jit(lambda x: platforms.by_platform(x, **forms))(x), jnp.sin(x))
  with platforms.forced_platform("gpu"):  # The GPUs' own form, else the accelerators'.
    assert jnp.array_equal(
      jax.jit(lambda x: platforms.by_platform(x, **forms))(x),
      jnp.tanh(x) if with_gpu else jnp.cos(x),
    )
  assert platforms.forced() is None
  # Unforced on this CPU: the CPU's form, and only it in the compiled program.
  fn = jax.jit(lambda x: platforms.by_platform(x, **forms))
  assert jnp.array_equal(fn(x), jnp.sin(x))
  text = fn.lower(x).compile().as_text()
  assert "sine" in text and "cosine" not in text and "tanh" not in text


def test_forced_platform_restores_and_rejects_unknown_names():
  with platforms.forced_platform("cpu"):
    with platforms.forced_platform("accelerator"):
      assert platforms.forced() == "accelerator"
    assert platforms.forced() == "cpu"
  with (
    pytest.raises(ValueError, match="forced_platform: platform must be one of"),
    platforms.forced_platform("tpu"),
  ):
    pass


def test_the_rank_branches_are_the_platforms():
  with ranking.descending_ranks_branch("xla"):
    assert platforms.forced() == "accelerator" and ranking.forced_branch() == "xla"
  with platforms.forced_platform("cpu"):
    assert ranking.forced_branch() == "numpy"
  assert ranking.forced_branch() is None
