"""`evaluate_revisited` against the float64 reference of the protocol (`reference_revisited`)."""

from __future__ import annotations

import contextlib

import jax.numpy as jnp
import numpy as np
import pytest
import reference_revisited

import jaxrank
from experiments.benchmarks import revisited as revisited_benchmark
from jaxrank import similarity
from jaxrank._src import ranking
from jaxrank._src import revisited

KS = (1, 3, 5)


def _ground_truth(rng, num_queries, n, most):
  """Random easy/hard/junk lists (disjoint per query), some of them empty; query 0 has `most` easy
  and `most` hard items, query 1 no easy, query 2 no hard, query 3 neither."""
  out = []
  for q in range(num_queries):
    items = rng.permutation(n)
    e, h, j = (int(rng.integers(0, most + 1)) for _ in range(3))
    e, h = (0 if q in (1, 3) else max(e, 1)), (0 if q in (2, 3) else max(h, 1))
    e, h = (most, most) if q == 0 else (e, h)
    out.append(
      {
        "easy": items[:e].tolist(),
        "hard": items[e : e + h],
        "junk": items[e + h : e + h + j].tolist(),
        "bbx": [0.0, 0.0, 1.0, 1.0],
      }
    )
  return out


def _tied_data(seed, num_queries, n):
  """Embeddings of -1, 0, 1 under the dot product: scores are small integers, with many ties."""
  rng = np.random.default_rng(seed)
  q = rng.integers(-1, 2, (num_queries, 3)).astype(np.float32)
  g = rng.integers(-1, 2, (n, 3)).astype(np.float32)
  return rng, q, g, q.astype(np.float64) @ g.T.astype(np.float64)


def _assert_close(got, want):
  assert got.keys() == want.keys()
  for key in want:
    np.testing.assert_allclose(got[key], want[key], rtol=1e-12, atol=1e-12, err_msg=key)


@pytest.mark.parametrize(
  "most, branch",
  [(6, None), (20, None), (6, "xla")],
  ids=["compared", "sorted", "accelerator-form"],
)
def test_equals_reference_with_ties_empty_settings_and_junk(most, branch):
  # `most` 20: up to 40 positives, beyond `counting.COMPARE_UP_TO` (still compared here, up to
  # `revisited.COMPARE_UP_TO`; the sorted form: the next test).
  rng, q, g, scores = _tied_data(most, 7, 45)
  gnd = _ground_truth(rng, 7, 45, most)
  with ranking.descending_ranks_branch(branch) if branch else contextlib.nullcontext():
    got = jaxrank.evaluate_revisited(
      q,
      g,
      gnd,
      ks=KS,
      similarity_fn=similarity.dot_product,
      chunk_size=3,
      gallery_chunk_size=16,  # 45 items: chunks at 0, 16 and 29 (the last overlapping).
    )
  _assert_close(got, reference_revisited.evaluate(scores, gnd, KS))


@pytest.mark.parametrize("branch", [None, "xla"])
def test_the_sorted_counts_beyond_compare_up_to_equal_reference(monkeypatch, branch):
  # More positives than `revisited.COMPARE_UP_TO` (lowered to 8 here): each chunk is sorted.
  monkeypatch.setattr(revisited, "COMPARE_UP_TO", 8)
  revisited._count.clear_cache()
  rng, q, g, scores = _tied_data(8, 5, 37)
  gnd = _ground_truth(rng, 5, 37, 9)
  with ranking.descending_ranks_branch(branch) if branch else contextlib.nullcontext():
    got = jaxrank.evaluate_revisited(
      q, g, gnd, ks=KS, similarity_fn=similarity.dot_product, chunk_size=3, gallery_chunk_size=16
    )
  revisited._count.clear_cache()
  _assert_close(got, reference_revisited.evaluate(scores, gnd, KS))


def test_ok_junk_format_with_cosine_equals_reference():
  rng = np.random.default_rng(1)
  q, g = rng.normal(size=(5, 4)), rng.normal(size=(30, 4))
  gnd = []
  for i in range(5):
    items = rng.permutation(30)
    gnd.append({"ok": items[: i + 1].tolist(), "junk": items[i + 1 : i + 4].tolist()})
  gnd[4]["ok"] = []  # Left out of the mean.
  unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
  scores = unit(q) @ unit(g).T
  got = jaxrank.evaluate_revisited(q.astype(np.float32), g.astype(np.float32), gnd, ks=KS)
  _assert_close(got, reference_revisited.evaluate(scores, gnd, KS))
  per_query = jaxrank.evaluate_revisited(q, g, gnd, ks=(1,), reduce_fn=None)
  assert per_query.keys() == {"map", "mp@1", "num_positives"}
  np.testing.assert_array_equal(per_query["num_positives"], [1, 2, 3, 4, 0])
  assert per_query["map"][4] == 0.0
  assert np.isclose(np.mean(per_query["map"][:4]), got["map"])


def test_no_query_with_positives_gives_zero():
  q, g = np.eye(2, dtype=np.float32), np.eye(2, dtype=np.float32)
  got = jaxrank.evaluate_revisited(q, g, [{"ok": [], "junk": [0]}] * 2, ks=(1,))
  assert got == {"map": 0.0, "mp@1": 0.0}


E2 = np.eye(3, dtype=np.float32)


@pytest.mark.parametrize(
  "gnd, match",
  [
    ({"easy": [0], "hard": [], "junk": []}, "sequence"),
    ([{"easy": [0], "hard": [], "junk": []}], "2 queries"),
    ([{"easy": [3], "hard": [], "junk": []}] * 2, r"index 3, outside the gallery of 3 items"),
    ([{"easy": [-1], "hard": [], "junk": []}] * 2, "outside the gallery"),
    ([{"easy": [0], "hard": [1], "junk": [0]}] * 2, "more than one"),
    ([{"easy": [0, 0], "hard": [], "junk": []}] * 2, "twice"),
    ([{"easy": [0], "junk": []}] * 2, r"lacks \['hard'\]"),
    ([{"ok": [0]}] * 2, r"lacks \['junk'\]"),
    ([{"easy": [0], "hard": [], "junk": []}, {"ok": [0], "junk": []}], "mixes formats"),
    ([{"easy": [0], "ok": [1], "hard": [], "junk": []}] * 2, "mixes 'ok'"),
    ([{"easy": [0.5], "hard": [], "junk": []}] * 2, r"integer gallery indices .*\(e.g. 0.5\)"),
    ([{"easy": [np.nan], "hard": [], "junk": []}] * 2, "integer gallery indices"),
    ([{"easy": [True], "hard": [], "junk": []}] * 2, "dtype bool"),
    ([[0, 1]] * 2, "must be a mapping"),
  ],
)
def test_bad_ground_truth_is_a_value_error_naming_the_fix(gnd, match):
  with pytest.raises(ValueError, match=f"evaluate_revisited: .*{match}"):
    jaxrank.evaluate_revisited(E2[:2], E2, gnd)


def test_whole_float_indices_equal_integer_ones():
  # revisitop's example_evaluate.py builds each setting with np.concatenate, which gives float64
  # indices where a list is empty (`np.concatenate([[], [3, 4]])`); its compute_map takes them.
  rng, q, g, _ = _tied_data(3, 4, 30)
  gnd = _ground_truth(rng, 4, 30, 5)
  floats = [{k: np.concatenate([[], np.asarray(v)]) for k, v in entry.items()} for entry in gnd]
  assert floats[0]["easy"].dtype == np.float64
  args = dict(ks=KS, similarity_fn=similarity.dot_product)
  assert jaxrank.evaluate_revisited(q, g, floats, **args) == jaxrank.evaluate_revisited(
    q, g, gnd, **args
  )


def test_bad_arguments():
  gnd = [{"ok": [0], "junk": []}]
  with pytest.raises(ValueError, match="evaluate_revisited: .*differ in dimension"):
    jaxrank.evaluate_revisited(E2[:1], E2[:, :2], gnd)
  with pytest.raises(ValueError, match="evaluate_revisited: .*NaN"):
    jaxrank.evaluate_revisited(E2[:1] * np.nan, E2, gnd)
  with pytest.raises(ValueError, match="evaluate_revisited: ks"):
    jaxrank.evaluate_revisited(E2[:1], E2, gnd, ks=())
  with pytest.raises(ValueError, match="evaluate_revisited: each k in ks"):
    jaxrank.evaluate_revisited(E2[:1], E2, gnd, ks=(0,))


def _first_item_nan(queries, items):
  """Dot products with the first item of every gallery chunk scored NaN."""
  return similarity.dot_product(queries, items).at[:, 0].set(jnp.nan)


def test_a_nan_score_makes_its_query_nan_and_per_query_keys():
  gnd = [{"easy": [1], "hard": [2], "junk": []}, {"easy": [], "hard": [], "junk": [1]}]
  got = jaxrank.evaluate_revisited(
    E2[:2], E2, gnd, ks=(1,), similarity_fn=_first_item_nan, reduce_fn=None
  )
  assert set(got) == {
    f"{s}/{m}" for s in ("easy", "medium", "hard") for m in ("map", "mp@1", "num_positives")
  }
  assert np.isnan(got["medium/map"][0]) and got["medium/map"][1] == 0.0  # No positives: 0.
  np.testing.assert_array_equal(got["medium/num_positives"], [2, 0])


def test_equals_revisitop_compute_map_on_its_own_settings():
  # revisitop's example_evaluate.py path (the product, np.argsort, compute_map of each setting),
  # transcribed in the benchmark; untied scores, where the tie rules cannot differ.
  q, g, gnd = revisited_benchmark._data(6, 400, 8, seed=4)
  ranks = np.argsort(-(g.astype(np.float64) @ q.T.astype(np.float64)), axis=0)
  got = jaxrank.evaluate_revisited(q, g, gnd, ks=KS)
  for name, setting in revisited_benchmark.revisitop_settings(gnd).items():
    want_map, want_mp = revisited_benchmark.revisitop_compute_map(ranks, setting, KS)
    np.testing.assert_allclose(got[f"{name}/map"], want_map, rtol=1e-6, err_msg=name)
    np.testing.assert_allclose([got[f"{name}/mp@{k}"] for k in KS], want_mp, rtol=1e-6)


def test_device_galleries_and_the_second_pass_give_the_same_results(monkeypatch):
  # The positives' scores come first from their gathered rows; where those are not the bits the
  # gallery's chunks give (forced here), a second pass counts around the chunks' own.
  rng, q, g, _ = _tied_data(5, 5, 40)
  gnd = _ground_truth(rng, 5, 40, 6)
  args = dict(ks=KS, similarity_fn=similarity.dot_product, chunk_size=2, gallery_chunk_size=16)
  want = jaxrank.evaluate_revisited(q, g, gnd, **args)
  assert jaxrank.evaluate_revisited(jnp.asarray(q), jnp.asarray(g), gnd, **args) == want
  listed = revisited._listed_scores
  monkeypatch.setattr(revisited, "_listed_scores", lambda *a: listed(*a) + 0.5)
  assert jaxrank.evaluate_revisited(q, g, gnd, **args) == want
