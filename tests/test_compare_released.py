"""The machinery of experiments/compare_released.py on a small fake "released" module.

CI has no clone of the authors' repositories, so a tiny torch loss written here into `tmp_path`
stands in for one: imported as the script imports theirs, compared, and formatted.
"""

from __future__ import annotations

import json
import pathlib
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest
import torch  # The dev extra installs it.

from experiments import compare_released

_GENERATED = pathlib.Path(__file__).resolve().parent.parent / "docs" / "_generated"
_CUDA, _MASKED_FILL, _HEAVISIDE = torch.Tensor.cuda, torch.Tensor.masked_fill_, torch.heaviside

# A released-looking package whose __init__ imports something not installed, and a loss that calls
# `.cuda()` and fills through a uint8 mask, as the 2019 code does.
_INIT = "import a_solver_that_is_not_installed\n"
_LOSS = textwrap.dedent("""
    import torch

    def soft_ap_like_loss(scores, labels):
      mask = torch.eye(scores.shape[0], scores.shape[1]).byte()
      scores = scores.clone().cuda()
      scores.masked_fill_(mask, 0.0)
      return 1 - (torch.sigmoid(scores / 0.5) * labels).sum() / labels.sum()
    """)


@pytest.fixture(name="released")
def fixture_released(tmp_path):
  package = tmp_path / "fake_released_pkg"
  package.mkdir()
  (package / "__init__.py").write_text(_INIT)
  (package / "losses.py").write_text(_LOSS)
  return compare_released.import_released(
    str(tmp_path), "fake_released_pkg.losses", skip_init=["fake_released_pkg"]
  )


def _ours(scale):
  def loss(x, labels):
    x = jnp.where(jnp.eye(*x.shape, dtype=bool), 0.0, x)
    return 1 - scale * jnp.sum((jnp.tanh(x) * 0.5 + 0.5) * labels) / labels.sum()

  return loss


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_equal_and_differs_and_factor(released, dtype):
  rng = np.random.default_rng(0)
  x, labels = rng.normal(size=(3, 5)), (rng.uniform(size=(3, 5)) < 0.5).astype(np.float64)
  labels[0, 1] = 1.0
  theirs = lambda t: released.soft_ap_like_loss(t, torch.as_tensor(labels, dtype=t.dtype))
  # sigmoid(x / 0.5) = (tanh(x) + 1) / 2: the same function, written differently.
  equal = compare_released.compare(
    "fake",
    "soft_ap_like_loss",
    "ours",
    "-",
    their_fn=theirs,
    our_fn=lambda t: _ours(1.0)(t, jnp.asarray(labels, t.dtype)),
    x=x,
    dtype=dtype,
  )
  assert equal.verdict == "equal", equal
  assert equal.value_diff < 1e-6 and equal.grad_diff < 1e-6
  # A loss off by a factor: the difference is reported, with its cause.
  off = compare_released.compare(
    "fake",
    "soft_ap_like_loss",
    "ours",
    "-",
    their_fn=theirs,
    our_fn=lambda t: _ours(1.01)(t, jnp.asarray(labels, t.dtype)),
    x=x,
    dtype=dtype,
    why="a factor 1.01",
  )
  assert off.verdict == "differs: a factor 1.01"
  assert off.value_diff > 1e-3 and off.grad_diff > 1e-4
  unexplained = compare_released.compare(
    "fake",
    "t",
    "o",
    "-",
    their_fn=lambda t: 2 * theirs(t),
    our_fn=lambda t: _ours(1.0)(t, jnp.asarray(labels, t.dtype)),
    x=x,
    dtype=dtype,
  )
  assert unexplained.verdict == "differs: unexplained"
  # Their gradient twice too large, accounted for by grad_factor: equal gradients again.
  doubled = compare_released.compare(
    "fake",
    "t",
    "o",
    "-",
    x=x,
    dtype=dtype,
    grad_factor=0.5,
    their_fn=lambda t: theirs(t) + (theirs(t) - theirs(t).detach()),
    our_fn=lambda t: _ours(1.0)(t, jnp.asarray(labels, t.dtype)),
  )
  assert doubled.verdict == "equal", doubled
  # The shims are undone once their code has run.
  assert torch.Tensor.cuda is _CUDA and torch.heaviside is _HEAVISIDE
  assert torch.Tensor.masked_fill_ is _MASKED_FILL
  with pytest.raises(RuntimeError, match="only supports boolean masks"):
    torch.zeros(2, 2).masked_fill_(torch.eye(2).byte(), 1.0)


def test_their_code_failing_is_reported(released):
  del released
  row = compare_released.compare(
    "fake",
    "t",
    "o",
    "-",
    their_fn=lambda t: t.sum() @ torch.ones(3),
    our_fn=lambda t: t.sum(),
    x=np.ones((2, 2)),
    dtype="float32",
  )
  assert row.verdict.startswith("not run: ") and np.isnan(row.value_diff)


def _fake_rows(released):
  """One row comparing the fake released module's loss with ours, as a comparison returns."""
  return [
    compare_released.compare(
      "fake",
      "soft_ap_like_loss",
      "ours",
      "n=5",
      x=np.eye(2, 5) * 0.3,
      dtype="float64",
      their_fn=lambda t: released.soft_ap_like_loss(t, torch.ones_like(t)),
      our_fn=lambda t: _ours(1.0)(t, jnp.ones_like(t)),
    )
  ]


def test_run_skips_missing_clones_and_prints_one_table(released, tmp_path, capsys):
  def fake_comparison(root):
    assert root == str(tmp_path)
    return _fake_rows(released)

  rows = compare_released.run(
    {"fake": str(tmp_path), "roadmap": None},
    {"fake": fake_comparison, "roadmap": compare_released.compare_roadmap},
  )
  out = capsys.readouterr().out
  assert "skipped --roadmap: clone https://github.com/elias-ramzi/ROADMAP" in out
  assert [r.verdict for r in rows] == ["equal"]
  table = compare_released.format_rows(rows).splitlines()
  assert table[0].split(" | ")[0].strip() == "loss" and table[0].endswith("verdict")
  assert set(table[1]) <= {"-", "+"}
  cells = [c.strip() for c in table[2].split(" | ")]
  assert cells[:5] == ["fake", "soft_ap_like_loss", "ours", "n=5", "float64"]
  assert cells[-1] == "equal" and float(cells[5]) == rows[0].value_diff


def test_main_without_clones_names_every_repository(capsys):
  assert compare_released.main([]) == 0
  out = capsys.readouterr().out
  for repo in compare_released.REPOSITORIES.values():
    assert f"clone https://github.com/{repo}" in out
  assert "MATLAB" in out and "test_tanh_scale_is_the_released_schedule" in out


def test_main_with_docs_writes_the_guide_s_table(released, tmp_path, monkeypatch, capsys):
  from experiments import docs_data  # pylint: disable=g-import-not-at-top

  def fake_comparison(root):
    del root
    return _fake_rows(released)

  monkeypatch.setattr(compare_released, "COMPARISONS", {"fastap": fake_comparison})
  out = tmp_path / "generated"
  monkeypatch.setattr(docs_data, "DIRECTORY", out)
  assert compare_released.main(["--fastap", str(tmp_path), "--docs"]) == 0
  assert "wrote" in capsys.readouterr().out
  data = json.loads((out / "released_code.json").read_text())
  assert data["columns"] == list(compare_released.HEADER)
  [row] = data["rows"]
  assert row[:5] == ["fake", "soft_ap_like_loss", "ours", "n=5", "float64"] and row[-1] == "equal"
  assert data["notes"][0].startswith("equal: both differences within 2e-5 (float32) or 1e-9")
  assert data["notes"][1].startswith(
    "Commits: kunhe/FastAP-metric-learning (not a git clone); torch "
  )
  # The guide's table has the columns and notes that a rerun writes, so that it replaces them.
  shown = json.loads((_GENERATED / "released_code.json").read_text())
  assert shown["columns"] == data["columns"] and shown["notes"][0] == data["notes"][0]
