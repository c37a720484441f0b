"""Tests of `evaluate_hashing` (`_src/hashing_evaluation.py`): Hamming ranking of a database.

References: `reference.py`'s brute-force tie-aware AP and NDCG (the mean over every ordering of
the tied items); a direct numpy loop of the truncated AP (mAP@k), the first `k` of a stable sort;
and `reference_released_hashing.py`'s transcriptions of the released evaluation code (He et al.'s
TALR `AP.m`, `tieAP.m`, `tieNDCG.m`; HashNet's PyTorch and Caffe `mean_average_precision`; DPSH's
`CalcTopMap` and `CalcMap`), each against `convention` and `averaged_over`.
"""

from __future__ import annotations

import numpy as np
import pytest
import reference
import reference_released_hashing as rrh

import jaxrank

TOL64 = dict(rtol=1e-10, atol=1e-12)
TOL32 = dict(rtol=2e-5, atol=2e-6)


def _codes(rng, count, bits):
  return np.where(rng.random((count, bits)) < 0.5, 1, -1).astype(np.int8)


def _distances(queries, database):
  """Hamming distances `[Q, N]`, bit by bit."""
  return (queries[:, None, :] != database[None, :, :]).sum(axis=-1)


def _truncated_ap(distances, relevant, k):
  """mAP@k of one query, read from HashNet's / DPSH's loop: the first `k` of a stable sort of the
  distances; precision at each relevant item, over the relevant items in the top `k`."""
  order = np.argsort(distances, kind="stable")[:k]
  hits, total = 0, 0.0
  for t, item in enumerate(order, start=1):
    if relevant[item]:
      hits += 1
      total += hits / t
  return total / hits if hits else 0.0


def _levels(q_labels, d_labels):
  if q_labels.ndim == 1:
    return (q_labels[:, None] == d_labels[None, :]).astype(np.int64)
  return q_labels.astype(np.int64) @ d_labels.T.astype(np.int64)


CASES = {
  "class": lambda rng, q, n: (rng.integers(0, 3, q), rng.integers(0, 3, n)),
  "multi_hot": lambda rng, q, n: (
    (rng.random((q, 4)) < 0.4).astype(np.int32),
    (rng.random((n, 4)) < 0.4).astype(np.int32),
  ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_equals_mean_over_orderings_of_ties(case, x64):
  # Short lists (7 items, 3 bits): brute force over every ordering of the tied items.
  rng = np.random.default_rng(0)
  queries, database = _codes(rng, 6, 3), _codes(rng, 7, 3)
  q_labels, d_labels = CASES[case](rng, 6, 7)
  got = jaxrank.evaluate_hashing(
    queries, database, q_labels, d_labels, reduce_fn=None, chunk_size=4
  )
  d, levels = _distances(queries, database), _levels(q_labels, d_labels)
  np.testing.assert_allclose(
    got["tie_aware_map"], reference.per_list(reference.tie_aware_ap, -d, levels), **TOL64
  )
  np.testing.assert_allclose(
    got["tie_aware_ndcg"], reference.per_list(reference.tie_aware_ndcg, -d, levels), **TOL64
  )
  np.testing.assert_array_equal(got["num_relevant"], (levels >= 1).sum(axis=1))


def test_truncated_ap_matches_the_loop_in_padded_chunks():
  rng = np.random.default_rng(1)
  queries, database = _codes(rng, 13, 8), _codes(rng, 300, 8)
  q_labels, d_labels = CASES["multi_hot"](rng, 13, 300)
  ks = (1, 10, 57, 1000)  # 1,000 > N: the whole ranking. Chunks of 5: the last padded.
  got = jaxrank.evaluate_hashing(
    queries, database, q_labels, d_labels, ks=ks, reduce_fn=None, chunk_size=5
  )
  d, relevant = _distances(queries, database), _levels(q_labels, d_labels) >= 1
  for k in ks:
    want = [_truncated_ap(d[i], relevant[i], k) for i in range(len(d))]
    np.testing.assert_allclose(got[f"map@{k}"], want, **TOL32)
  # The tie-aware values are those of the list metrics, whatever the chunks.
  levels = _levels(q_labels, d_labels)
  ap = jaxrank.hamming_tie_aware_ap_metric(d, levels, num_bits=8, reduce_fn=None)
  ndcg = jaxrank.hamming_tie_aware_ndcg_metric(d, levels, num_bits=8, reduce_fn=None)
  np.testing.assert_allclose(got["tie_aware_map"], ap, **TOL32)
  np.testing.assert_allclose(got["tie_aware_ndcg"], ndcg, **TOL32)


def test_code_kinds_affinity_and_reduction():
  rng = np.random.default_rng(2)
  queries, database = _codes(rng, 5, 6), _codes(rng, 40, 6)
  q_labels, d_labels = CASES["class"](rng, 5, 40)
  q_labels[0] = 7  # No relevant item: 0, and left out of the mean.
  plus_minus = jaxrank.evaluate_hashing(
    queries, database, q_labels, d_labels, ks=(10,), reduce_fn=None
  )
  assert plus_minus["num_relevant"][0] == 0 and plus_minus["tie_aware_map"][0] == 0
  for q, db in [(queries > 0, database > 0), ((queries > 0) * 1, (database > 0).astype(float))]:
    bits = jaxrank.evaluate_hashing(q, db, q_labels, d_labels, ks=(10,), reduce_fn=None)
    for key, value in plus_minus.items():
      np.testing.assert_array_equal(bits[key], value, err_msg=key)
  # The same levels given as an affinity (integers; booleans for 0/1).
  levels = _levels(q_labels, d_labels)
  for affinity in (levels, levels.astype(bool), levels.astype(np.float32)):
    given = jaxrank.evaluate_hashing(queries, database, affinity=affinity, ks=(10,), reduce_fn=None)
    for key, value in plus_minus.items():
      np.testing.assert_array_equal(given[key], value, err_msg=key)
  reduced = jaxrank.evaluate_hashing(queries, database, q_labels, d_labels, ks=(10,))
  for key, value in reduced.items():
    assert value == pytest.approx(plus_minus[key][1:].mean(), rel=1e-12)


# The released codes (`reference_released_hashing.py`): random codes of 4 bits (5 distances, so
# ties of dozens of items), labels that leave some queries without a relevant item in the
# database (class 9, an empty multi-hot row) and many without one in a short top k.
RELEASED_KS = (1, 2, 7, 40, 150, 1000)  # 150 = N; 1,000 > N (the released codes' min(k, N)).


def _released_case(case, seed=3):
  rng = np.random.default_rng(seed)
  queries, database = _codes(rng, 30, 4), _codes(rng, 150, 4)
  q_labels, d_labels = CASES[case](rng, 30, 150)
  if case == "class":
    q_labels[[3, 11]] = 9  # In no database item.
    one_hot = np.eye(10, dtype=np.int64)
    q_rows, d_rows = one_hot[q_labels], one_hot[d_labels]
  else:
    q_labels[[3, 11]] = 0  # No label: relevant to nothing.
    q_rows, d_rows = q_labels, d_labels
  assert q_rows[-1].any()  # tieAP.m leaves out trailing queries without a relevant item.
  return queries, database, q_labels, d_labels, q_rows, d_rows


@pytest.mark.parametrize("case", list(CASES))
def test_released_convention_is_talr_ap_query_for_query(case, x64):
  queries, database, q_labels, d_labels, q_rows, d_rows = _released_case(case)
  got = jaxrank.evaluate_hashing(
    queries, database, q_labels, d_labels, ks=RELEASED_KS, convention="released", reduce_fn=None
  )
  reduced = jaxrank.evaluate_hashing(
    queries,
    database,
    q_labels,
    d_labels,
    ks=RELEASED_KS,
    convention="released",
    averaged_over="all",
  )
  aff = rrh.talr_affinity(q_labels, d_labels)
  for k in RELEASED_KS:
    mean, per_query = rrh.talr_ap(queries > 0, database > 0, aff, cutoff=k)
    np.testing.assert_allclose(got[f"map@{k}"], per_query, **TOL64, err_msg=f"k={k}")
    assert reduced[f"map@{k}"] == pytest.approx(mean, rel=1e-12, abs=1e-15)
  assert np.all(got["map@1"] == 0)  # The released sum starts at rank 2.


@pytest.mark.parametrize("case", list(CASES))
def test_textbook_convention_is_hashnet_and_dpsh_with_their_reductions(case, x64):
  queries, database, q_labels, d_labels, q_rows, d_rows = _released_case(case)
  ks = RELEASED_KS[:-1]  # HashNet's code needs R <= N.

  def ours(averaged_over, cutoffs=ks):
    return jaxrank.evaluate_hashing(
      queries, database, q_labels, d_labels, ks=cutoffs, averaged_over=averaged_over
    )

  in_top_k, in_database, every = (
    ours("relevant_in_top_k"),
    ours("relevant_in_database"),
    ours("all"),
  )
  codes = dict(database_code=database, database_labels=d_rows)
  for k in ks:
    pytorch = rrh.hashnet_pytorch_map(
      codes | dict(test_code=queries, test_labels=q_rows), k, kind="stable"
    )
    caffe = rrh.hashnet_caffe_map(
      codes | dict(validation_code=queries, validation_labels=q_rows, R=k), kind="stable"
    )
    top = rrh.dpsh_calc_top_map(queries, database, q_rows, d_rows, k, kind="stable")
    assert in_top_k[f"map@{k}"] == pytest.approx(pytorch, rel=1e-12), k
    assert in_database[f"map@{k}"] == pytest.approx(caffe, rel=1e-12), k
    assert every[f"map@{k}"] == pytest.approx(top, rel=1e-12), k
  # The three differ here: the queries without a relevant item (in the database, in the top 2).
  assert in_top_k["map@2"] > in_database["map@2"] > every["map@2"]
  whole = ours("all", cutoffs=(len(database),))[f"map@{len(database)}"]
  full = rrh.dpsh_calc_map(queries, database, q_rows, d_rows, kind="stable")
  assert whole == pytest.approx(full, rel=1e-12)


def test_tie_aware_metrics_are_talr_tie_ap_and_tie_ndcg(x64):
  queries, database, q_labels, d_labels, _, _ = _released_case("multi_hot")
  got = jaxrank.evaluate_hashing(
    queries, database, q_labels, d_labels, averaged_over="all", reduce_fn=None
  )
  reduced = jaxrank.evaluate_hashing(queries, database, q_labels, d_labels, averaged_over="all")
  binary, levels = (
    rrh.talr_affinity(q_labels, d_labels),
    rrh.talr_affinity(q_labels, d_labels, multi_level=True),
  )
  mean, per_query = rrh.talr_tie_ap(queries > 0, database > 0, binary)
  np.testing.assert_allclose(got["tie_aware_map"], per_query, **TOL64)
  assert reduced["tie_aware_map"] == pytest.approx(mean, rel=1e-12)
  # tieNDCG.m's ideal DCG is single precision; a query without a relevant item has NDCG 1.
  mean, per_query = rrh.talr_tie_ndcg(queries > 0, database > 0, levels)
  np.testing.assert_allclose(got["tie_aware_ndcg"], per_query, rtol=1e-6)
  assert reduced["tie_aware_ndcg"] == pytest.approx(mean, rel=1e-6)
  assert got["tie_aware_ndcg"][3] == 1 and got["tie_aware_map"][3] == 0
  # tieAP.m leaves out the queries without a relevant item after its last with one.
  empty_last = q_labels.copy()
  empty_last[-4:] = 0
  mean, _ = rrh.talr_tie_ap(queries > 0, database > 0, rrh.talr_affinity(empty_last, d_labels))
  prefix = jaxrank.evaluate_hashing(
    queries, database, empty_last, d_labels, averaged_over="all", reduce_fn=None
  )["tie_aware_map"][:-4]
  assert mean == pytest.approx(prefix.mean(), rel=1e-12)


def test_tie_ndcg_m_saturates_its_gains_from_seven_shared_labels(x64):
  """tieNDCG.m's gains `2.^Aff - 1` are int8 (126 from 7 shared labels on): equal to NDCG_T
  below 7, not from 7 on."""
  rng = np.random.default_rng(5)
  queries, database = _codes(rng, 6, 4), _codes(rng, 60, 4)
  q_labels = (rng.random((6, 12)) < 0.8).astype(np.int32)
  d_labels = (rng.random((60, 12)) < 0.8).astype(np.int32)
  levels = rrh.talr_affinity(q_labels, d_labels, multi_level=True)
  assert levels.max() >= 7
  got = jaxrank.evaluate_hashing(queries, database, q_labels, d_labels, reduce_fn=None)
  _, theirs = rrh.talr_tie_ndcg(queries > 0, database > 0, levels)
  assert np.abs(got["tie_aware_ndcg"] - theirs).max() > 1e-3
  capped = np.minimum(levels, 6)
  got = jaxrank.evaluate_hashing(queries, database, affinity=capped, reduce_fn=None)
  _, theirs = rrh.talr_tie_ndcg(queries > 0, database > 0, capped)
  np.testing.assert_allclose(got["tie_aware_ndcg"], theirs, rtol=1e-6)


def test_the_one_query_example_of_the_docstring():
  query, database = np.array([[0, 0, 0, 0]]), np.array([[0, 0, 0, 0], [1, 1, 1, 1]])
  labels = (np.array([0]), np.array([0, 1]))
  for convention, want in (("textbook", 1.0), ("released", 0.0)):
    got = jaxrank.evaluate_hashing(query, database, *labels, ks=(2,), convention=convention)
    assert got["map@2"] == want
  mean, _ = rrh.talr_ap(query, database, rrh.talr_affinity(*labels), cutoff=2)
  assert mean == 0.0


def test_averaged_over_selections_and_counts():
  rng = np.random.default_rng(4)
  queries, database = _codes(rng, 9, 5), _codes(rng, 60, 5)
  q_labels, d_labels = CASES["class"](rng, 9, 60)
  q_labels[0] = 7
  ks = (3, 60)
  per = jaxrank.evaluate_hashing(queries, database, q_labels, d_labels, ks=ks, reduce_fn=None)
  relevant = _levels(q_labels, d_labels) >= 1
  order = np.argsort(_distances(queries, database), axis=1, kind="stable")
  for k in ks:
    np.testing.assert_array_equal(
      per[f"num_relevant@{k}"], np.take_along_axis(relevant, order, 1)[:, :k].sum(axis=1)
    )
  seen = {}

  def record(values, *, where):
    seen[len(seen)] = where
    return np.sum(values * where)

  for averaged_over in ("relevant_in_database", "all", "relevant_in_top_k"):
    seen.clear()
    jaxrank.evaluate_hashing(
      queries,
      database,
      q_labels,
      d_labels,
      ks=ks,
      averaged_over=averaged_over,
      reduce_fn=record,
    )
    masks = dict(zip(["tie_aware_map", "tie_aware_ndcg", "map@3", "map@60"], seen.values()))
    if averaged_over == "all":
      assert all(mask.all() for mask in masks.values())
    else:
      np.testing.assert_array_equal(masks["tie_aware_map"], per["num_relevant"] > 0)
      top = per["num_relevant@3"] if averaged_over == "relevant_in_top_k" else per["num_relevant"]
      np.testing.assert_array_equal(masks["map@3"], top > 0)


@pytest.mark.parametrize(
  "kwargs,match",
  [
    (dict(convention="TALR"), "convention must be one of 'textbook', 'released'"),
    (dict(averaged_over="queries"), "averaged_over must be one of 'relevant_in_database'"),
  ],
)
def test_unknown_convention_or_selection(kwargs, match):
  with pytest.raises(ValueError, match=match):
    jaxrank.evaluate_hashing(np.array([[1, -1]]), np.array([[1, 1]]), [0], [0], **kwargs)


def test_the_jobs_choices_are_the_librarys():
  """The job's config fields (`Config.hashing_convention`, `hashing_averaged_over`) are checked
  against `protocols`' lists of names: those `evaluate_hashing` takes."""
  from experiments.job import protocols  # pylint: disable=g-import-not-at-top
  from jaxrank._src import hashing_evaluation  # pylint: disable=g-import-not-at-top

  assert protocols.HASHING_CONVENTIONS == hashing_evaluation.CONVENTIONS
  assert protocols.HASHING_AVERAGED_OVER == hashing_evaluation.AVERAGED_OVER


@pytest.mark.parametrize(
  "kwargs,error,match",
  [
    (dict(query_codes=np.array([[1.0, 0.5]])), ValueError, "got 0.5; binarize"),
    (dict(query_codes=np.array([[0, 1]]), database_codes=np.array([[-1, 1]])), ValueError, "mix"),
    (dict(database_codes=np.ones((3, 3))), ValueError, "differ in length"),
    (dict(query_labels=np.zeros((1, 2), np.int32)), ValueError, "does not match"),
    (dict(affinity=np.ones((1, 3))), ValueError, "either labels or affinity"),
    (dict(ks=(0,)), ValueError, "positive"),
    (dict(query_labels=None), ValueError, "give query_labels"),
  ],
)
def test_errors(kwargs, error, match):
  args = dict(
    query_codes=np.array([[1, -1]]),
    database_codes=np.array([[1, 1], [-1, 1], [1, -1]]),
    query_labels=np.array([0]),
    database_labels=np.array([0, 1, 0]),
  )
  args |= kwargs
  with pytest.raises(error, match=match):
    jaxrank.evaluate_hashing(**args)


def test_affinity_must_be_integer_levels():
  with pytest.raises(ValueError, match="non-negative integer levels"):
    jaxrank.evaluate_hashing(
      np.array([[1, -1]]), np.array([[1, 1], [-1, 1]]), affinity=np.array([[0.5, 1.0]])
    )


def test_benchmark_runs_at_a_tiny_scale():
  from experiments.benchmarks import hashing_eval  # pylint: disable=g-import-not-at-top

  seconds, before, after, result = hashing_eval.run_one(8, 300, 12, ks=(50,))
  assert seconds > 0 and after >= before
  assert sorted(result) == ["map@50", "tie_aware_map", "tie_aware_ndcg"]


def test_benchmark_one_row_in_this_process(capsys):
  from experiments.benchmarks import hashing_eval  # pylint: disable=g-import-not-at-top

  hashing_eval.main(["--one", "--queries", "8", "--items", "300", "--bits", "12", "--ks", "50"])
  row = capsys.readouterr().out.strip()
  cells = [cell.strip() for cell in row.strip("|").split("|")]
  assert cells[:4] == ["8", "300", "", "12"]
  assert cells[4].endswith(" s") and cells[5].endswith(" MB") and cells[6].endswith(" MB")
  assert cells[7].startswith("tie_aware_map ") and "map@50 " in cells[7]


def test_benchmark_docs_writes_the_guides_table(monkeypatch, tmp_path):
  """`--docs` writes the printed table (a row per scale, the note without the cut-off) as
  docs/_generated/hashing_eval.json, with the columns of the guide's data file."""
  import json  # pylint: disable=g-import-not-at-top

  from experiments import docs_data  # pylint: disable=g-import-not-at-top
  from experiments.benchmarks import hashing_eval  # pylint: disable=g-import-not-at-top

  calls = []

  def run_process(queries, items, bits, ks=(), label=""):
    calls.append((queries, items, bits, tuple(ks)))
    seconds = 2.0 if ks else 1.0
    return (
      f"| {queries:,} | {items:,} | {label} | {bits} | {seconds:.1f} s | 200 MB | 300 MB | "
      "tie_aware_map 0.2000 |"
    )

  guide = json.loads((docs_data.DIRECTORY / "hashing_eval.json").read_text())
  monkeypatch.setattr(docs_data, "DIRECTORY", tmp_path)
  monkeypatch.setattr(hashing_eval, "run_process", run_process)
  hashing_eval.main(["--scales", "8,300,12", "1000,2000,16", "--ks", "50", "--docs"])
  assert calls == [(8, 300, 12, (50,)), (1000, 2000, 16, (50,)), (1000, 2000, 16, ())]
  data = json.loads((tmp_path / "hashing_eval.json").read_text())
  assert data["columns"] == guide["columns"]
  assert data["rows"] == [
    ["8", "300", "", "12", "2.0 s", "200 MB", "300 MB", "tie_aware_map 0.2000"],
    ["1,000", "2,000", "", "16", "2.0 s", "200 MB", "300 MB", "tie_aware_map 0.2000"],
  ]
  assert data["notes"] == [
    "Without mAP@50 (ks=(), AP_T and NDCG_T alone), 1,000 x 2,000, 16 bits: 1.0 s, peak RSS 300 MB."
  ]
