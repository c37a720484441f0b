"""Smoke test of `experiments/benchmarks/speed.py` at a tiny batch: every table has its header and a
row per loss (or per list-level function) with numbers in it. Timings are not checked."""

from __future__ import annotations

import re

from experiments.benchmarks import speed

LOSSES = ["FastAP", "SmoothAP", "blackbox AP", "blackbox AP (counting)"]
NUMBER = r"\d+\.\d+ s"


def _rows(lines):
  return [line for line in lines if line.startswith("| ") and not line.startswith("| ---")][1:]


def test_loss_and_breakdown_tables_have_a_row_per_loss(capsys):
  for table in (speed.loss_table, speed.breakdown_table):
    lines = table(32, 8, 1, LOSSES)
    rows = _rows(lines)
    assert [row.split(" | ")[0] for row in rows] == [f"| {name}" for name in LOSSES]
    for row in rows:
      assert len(re.findall(NUMBER, row)) >= 3, row
      assert re.search(r"\d+\.\dx \|", row), row
  assert "FastAP" in capsys.readouterr().out  # Rows are printed as they come.


def test_cost_table_has_ratios_and_a_largest_batch_per_loss():
  # Each row searches its largest batch by compiling many steps: a loss without a loop and one with.
  names = ["FastAP", "SmoothAP"]
  lines = speed.cost_table(32, 8, names)
  rows = _rows(lines)
  assert [row.split(" | ")[0] for row in rows] == [f"| {name}" for name in names]
  for row in rows:
    assert len(re.findall(r"\d+\.\d+x \|", row)) == 3, row  # flops, bytes, temporaries.
    best, used, loops = re.search(r"\| (\d+) \((\d+\.\d) GB\) \| (\d+) \|$", row).groups()
    assert int(best) > 10_000 and int(best) % speed.PER_CLASS == 0, row
    assert 0.99 * 80 <= float(used) <= 80.0, row  # Within 1% under the budget (1 decimal).
    # The smooth-rank loop's trip count is known only at run time: its figures are lower bounds.
    looped = row.startswith("| SmoothAP")
    assert (int(loops) > 0) == looped and row.count(">= ") == (2 if looped else 0), row


def test_cost_counts_every_item_block_of_the_scores():
  """XLA counts a loop's body once: the in-batch cosine's blocks are written out, so its step
  costs what the floor's three products do (at B = 3 blocks)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  import jaxrank  # pylint: disable=g-import-not-at-top

  batch = 3 * 1024
  step = speed.step_for(lambda e, y: jnp.sum(jaxrank.batch_retrieval(e, y)[0]), batch, 8)
  floor = speed.step_for(lambda e, y: jnp.sum(e @ e.T), batch, 8)
  assert speed.cost(step)["loops"] == 0
  assert 0.99 < speed.cost(step)["flops"] / speed.cost(floor)["flops"] < 1.2


def test_largest_batch_fits_the_budget_and_one_more_class_does_not():
  loss = speed.in_batch_loss("FastAP")
  best, used = speed.largest_batch(loss, 64, 8, budget=2e8)
  assert used <= 2e8
  over = speed.footprint_bytes(speed.step_for(loss, best + 8 * speed.PER_CLASS, 8))
  assert over > 2e8 * 0.99


def test_breakdown_is_printed_by_default_and_can_be_skipped(monkeypatch, capsys):
  calls = []
  monkeypatch.setattr(speed, "loss_table", lambda *a: calls.append("loss") or ["loss"])
  monkeypatch.setattr(speed, "breakdown_table", lambda *a: calls.append("where") or ["w"])
  monkeypatch.setattr(speed, "compile_table", lambda *a: calls.append("compile") or ["c"])
  monkeypatch.setattr(speed, "cost_table", lambda *a: calls.append("cost") or ["x"])
  monkeypatch.setattr("sys.argv", ["speed", "--batch", "32"])
  speed.main()
  assert calls == ["loss", "where", "cost", "compile"]
  calls.clear()
  monkeypatch.setattr(
    "sys.argv", ["speed", "--skip-breakdown", "--skip-compile-table", "--skip-cost"]
  )
  speed.main()
  assert calls == ["loss"]
  calls.clear()
  monkeypatch.setattr("sys.argv", ["speed", "--skip-steps", "--skip-breakdown", "--skip-cost"])
  speed.main()
  assert calls == ["compile"]


def test_breakdown_notes_one_pass_and_the_sorts():
  """The breakdown's notes time one pass over the scores against the floor and, for the blackbox
  losses, numpy's host sort against XLA's CPU sort of the same lists."""
  lines = speed.breakdown_table(32, 8, 1, ["blackbox AP"])
  one_pass = next(line for line in lines if line.startswith("one pass over"))
  assert re.fullmatch(r"one pass over .*: \d+\.\d{3} s, \d+% of the floor", one_pass), one_pass
  sorts = lines[-1]
  assert re.search(
    r"numpy.*: \d+\.\d\d s; XLA's CPU sort .*: \d+\.\d\d s, \d+\.\dx numpy's$", sorts
  )


def test_compile_table_gives_every_list_level_function_its_required_arguments():
  """The compile table calls every list-level function of `jaxrank.__all__` with `REQUIRED`'s
  keywords: a new function with a required keyword must be given one there."""
  import inspect  # pylint: disable=g-import-not-at-top

  for name, fn in speed.list_level_functions():
    params = inspect.signature(fn).parameters
    required = {
      p
      for p, v in params.items()
      if v.kind == v.KEYWORD_ONLY and v.default is inspect.Parameter.empty
    }
    assert required <= set(speed.REQUIRED.get(name, {})), (name, required)
