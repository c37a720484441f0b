"""Compilation does not depend on the calling pattern: nothing is constant-folded from the labels.

Training scripts and notebooks close over the labels and masks
(`jax.jit(jax.value_and_grad(lambda s: loss(s, labels, where=mask)))`), which makes them
compile-time constants. Without `lists.opaque` (the barrier `checks.check_lists` puts on them) XLA
constant-folds what is computed from them alone (relevance masks, gains, counts, sorts): at
`B = 4096` that took up to 40 s of compilation on CPU (issue 18). Embedding the constants
themselves costs about 1 s per 80 MB on CPU, so `lists.embedded_compactly` embeds them as bits
(0/1 values) or int8 (small integers). Timing the compilation would flake on a loaded machine, so
these tests inspect the compiled program instead: the only list-sized constant left in it is the
graded labels as int8 (the mask is packed to bits); any folded derivative of them would be a
further list-sized constant, and binary labels leave none at all.

The functions are every list-level function of `jaxrank.__all__` (those taking `labels`, `where`
and `reduce_fn`), found by their signature, so a new one is covered without editing this file.
"""

from __future__ import annotations

import collections
import functools
import inspect
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank

SHAPE = (8, 128)  # 1,024 items: more than any shape-only constant (a harmonic table of 129, ...),
# and as many as lists.COMPACT_MIN_SIZE, from which closed-over arrays are embedded compactly.
NUM_BITS = 6

# The hyperparameters without a default.
REQUIRED: dict[str, dict[str, Any]] = {
  "decomposability_gap": {"num_batches": 2},
  "hamming_tie_aware_ap_metric": {"num_bits": NUM_BITS},
  "hamming_tie_aware_ndcg_metric": {"num_bits": NUM_BITS},
  "precision_at_k_metric": {"topn": 3},
  "recall_at_k_metric": {"topn": 3},
  "relevant_fraction_at_k_metric": {"topn": 3},
  "smooth_rank_ap_loss": {
    "positive_step_fn": functools.partial(jaxrank.sigmoid_step, temperature=0.05),
    "negative_step_fn": jaxrank.supap_negative_step,
  },
}


def list_level_functions() -> list[str]:
  names = []
  for name in jaxrank.__all__:
    fn = getattr(jaxrank, name)
    params = list(inspect.signature(fn).parameters) if inspect.isfunction(fn) else []
    # The proxy losses take `embeddings [B, D]` first, no list (and no labels to fold).
    if {"labels", "where", "reduce_fn"} <= set(params) and params[0] in ("scores", "distances"):
      names.append(name)
  return names


def inputs(name: str):
  rng = np.random.default_rng(0)
  if name.startswith("hamming_"):
    scores = rng.integers(0, NUM_BITS + 1, SHAPE).astype(np.int32)
  else:
    scores = rng.uniform(-1, 1, SHAPE).astype(np.float32)
  labels = rng.integers(0, 4, SHAPE).astype(np.int32)  # Graded; relevant iff >= 1.
  mask = rng.random(SHAPE) < 0.9
  return jnp.asarray(scores), labels, mask


def list_sized_constants(hlo: str) -> collections.Counter:
  """`dtype[dims]` -> count of the constants of the program with at least `prod(SHAPE)` entries."""
  found: collections.Counter[str] = collections.Counter()
  for dtype, dims in re.findall(r"=\s*(\w+)\[([\d,]*)\]\S*\s+constant\(", hlo):
    size = int(np.prod([int(d) for d in dims.split(",")])) if dims else 1
    if size >= int(np.prod(SHAPE)):
      found[f"{dtype}[{dims}]"] += 1
  return found


def compiled_text(name: str, captured: bool) -> str:
  fn = functools.partial(getattr(jaxrank, name), **REQUIRED.get(name, {}))
  scores, labels, mask = inputs(name)
  differentiable = name.endswith("_loss")
  body: Callable[..., Any]
  args: tuple[Any, ...]
  if captured:
    body = lambda s: fn(s, labels, where=mask)
    args = (scores,)
  else:
    body = lambda s, y, m: fn(s, y, where=m)
    args = (scores, labels, mask)
  if differentiable:
    body = jax.value_and_grad(body)
  text = jax.jit(body).lower(*args).compile().as_text()
  assert text is not None
  return text


def test_every_list_level_function_is_covered():
  names = list_level_functions()
  assert len(names) >= 20 and "fastap_loss" in names and "ap_metric" in names
  assert set(REQUIRED) <= set(names)


@pytest.mark.parametrize("name", list_level_functions())
def test_captured_labels_are_not_constant_folded(name):
  dims = ",".join(map(str, SHAPE))
  # The captured labels as int8 (graded 0-3) and the mask as bits; nothing derived from them.
  assert list_sized_constants(compiled_text(name, captured=True)) <= collections.Counter(
    {f"s8[{dims}]": 1}
  ), name


@pytest.mark.parametrize("name", ["fastap_loss", "ap_metric", "tie_aware_ndcg_loss"])
def test_captured_binary_labels_leave_no_list_sized_constant(name):
  # Binary labels and the mask are embedded as bits; the results are those of the arguments.
  fn = getattr(jaxrank, name)
  scores, labels, mask = inputs(name)
  binary = (labels >= 2).astype(np.int32)
  wrap = jax.value_and_grad if name.endswith("_loss") else (lambda g: g)
  captured = jax.jit(wrap(lambda s: fn(s, binary, where=mask))).lower(scores).compile()
  assert not list_sized_constants(captured.as_text()), name
  argument = jax.jit(wrap(lambda s, y, m: fn(s, y, where=m)))
  got, want = captured(scores), argument(scores, binary, mask)
  jax.tree.map(np.testing.assert_array_equal, got, want)


def test_arguments_give_no_list_sized_constant():
  assert not list_sized_constants(compiled_text("fastap_loss", captured=False))


def test_folding_is_detected():
  """The inspection sees folding: a program on captured labels gets a folded list-sized constant
  without the barrier (the one `jaxrank` puts on labels and masks), none with it."""
  scores, labels, mask = inputs("ap_metric")

  def relevant_count(s, opaque):
    y, m = jax.lax.optimization_barrier((labels, mask)) if opaque else (labels, mask)
    relevant = m & (jnp.cumsum(y, axis=-1) >= 1)
    return jnp.sum(jnp.where(relevant, s, 0))

  folded = jax.jit(lambda s: relevant_count(s, False)).lower(scores).compile().as_text()
  kept = jax.jit(lambda s: relevant_count(s, True)).lower(scores).compile().as_text()
  dims = ",".join(map(str, SHAPE))
  assert list_sized_constants(folded) == collections.Counter({f"pred[{dims}]": 1})
  assert list_sized_constants(kept) == collections.Counter({f"s32[{dims}]": 1, f"pred[{dims}]": 1})


@pytest.mark.parametrize("name", ["ap_metric", "fastap_loss"])
def test_captured_segments_are_not_constant_folded(name):
  """Segment ids closed over too: embedded as int8 beside the graded labels, and nothing derived
  from them (the `[8, 128, 128]` masks of the segments' lists) is folded into the program."""
  fn = getattr(jaxrank, name)
  scores, labels, mask = inputs(name)
  segments = np.random.default_rng(1).integers(0, 5, SHAPE).astype(np.int32)
  wrap = jax.value_and_grad if name.endswith("_loss") else (lambda g: g)
  body = wrap(lambda s: fn(s, labels, where=mask, segments=segments))
  dims = ",".join(map(str, SHAPE))
  assert list_sized_constants(jax.jit(body).lower(scores).compile().as_text()) <= (
    collections.Counter({f"s8[{dims}]": 2})
  )
