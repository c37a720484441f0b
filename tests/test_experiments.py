"""Smoke tests of the ablation scripts (experiments/ablate_*.py): two values each, tiny config.

Each test calls a script's `main` as the command line would, then checks that the table has the
untrained row and one row per value, and that the plot was written. The hard-sampling ablation,
which needs super-classes, runs on mock Stanford Online Products data and must refuse the digits
before training anything.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from experiments import ablate_batch_size
from experiments import ablate_blackbox_margin_memory
from experiments import ablate_fastap_bins
from experiments import ablate_hard_sampling
from experiments import ablate_roadmap_lambda
from experiments import ablation
from experiments import main as main_lib
from jaxrank.data import testing

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = str(ROOT / "experiments" / "configs" / "tiny.py")
# One evaluation and one checkpoint after the 6 steps (and the evaluation at step 0): about a
# second less per run than the tiny config's every 3 and 2 steps.
FAST = ["eval_every=6", "checkpoint_every=6"]


def _table_rows(out: str) -> list[str]:
  """The first column of the printed table, below its dashed line."""
  lines = out.splitlines()
  start = next(i for i, line in enumerate(lines) if line and set(line) == {"-"}) + 1
  rows = []
  for line in lines[start:]:
    if not line.strip():
      break
    rows.append(line.split()[0])
  return rows


def _run(module, what, tmp_path, capsys, values, sets=(), untrained=True):
  workdir = str(tmp_path / what)
  argv = ["--config", TINY, "--workdir", workdir, "--values", *values]
  if not untrained:
    argv.append("--no-untrained")
  for s in [*FAST, *sets]:
    argv += ["--set", s]
  results = module.main(argv)
  out = capsys.readouterr().out
  assert os.path.isfile(os.path.join(workdir, f"{what}.png"))
  assert os.path.isfile(os.path.join(workdir, "results.json"))
  assert _table_rows(out) == list(results)
  return list(results)


# The untrained baseline is evaluated in one of them only, to keep the tests short.
@pytest.mark.parametrize("module, what, values, rows, untrained", [
    (ablate_fastap_bins, "fastap_bins", ["5", "20"], ["L=5", "L=20"], True),
    # The tiny config has P = 20 / 4 = 5 classes per batch; a value is K, or (P, K).
    (ablate_batch_size, "batch_size", ["2", "4,4"], ["B=10_5x2", "B=16_4x4"], False),
    (ablate_blackbox_margin_memory, "blackbox_margin_memory", ["0,0", "0.1,2"],
     ["margin=0_memory=0", "margin=0.1_memory=2"], False),
    (ablate_roadmap_lambda, "roadmap_lambda", ["0", "1"], ["lam=0", "lam=1"], False),
])
def test_ablation_prints_a_row_per_value_and_plots(
    module, what, values, rows, untrained, tmp_path, capsys
):
  got = _run(module, what, tmp_path, capsys, values, untrained=untrained)
  assert got == (["untrained"] if untrained else []) + rows


def test_hard_sampling_on_mock_sop(tmp_path, capsys):
  # 24 classes in the 12 super-classes of SOP: two per super-class, so P = 16 / 4 = 4 classes from
  # two super-classes can be drawn.
  sets = ["dataset=sop", f"data_dir={tmp_path}", "image_size=32", "resize_size=36",
          "batch_size=16"]
  with testing.mock_retrieval_data(classes_per_split=24, images_per_class=4):
    rows = _run(ablate_hard_sampling, "hard_sampling", tmp_path, capsys,
                ["super_class", "m_per_class"], sets, untrained=False)
  assert rows == ["super_class", "m_per_class"]


def test_hard_sampling_refuses_digits_before_training(tmp_path):
  workdir = tmp_path / "hard"
  with pytest.raises(ValueError, match="which digits does not have.*dataset=.sop."):
    ablate_hard_sampling.main(["--config", TINY, "--workdir", str(workdir)])
  assert not workdir.exists()


def test_values_parse_as_literals_or_strings():
  assert main_lib.parse_value("10") == 10
  assert main_lib.parse_value("0.02,2") == (0.02, 2)
  assert main_lib.parse_value("super_class") == "super_class"


def test_loss_overrides_keep_the_base_hyperparameters_of_the_same_loss():
  from experiments import train  # pylint: disable=g-import-not-at-top

  base = train.Config(loss="blackbox_ap", loss_kwargs={"lam": 4.0})
  assert ablation.loss_overrides(base, "blackbox_ap", margin=0.1) == {
      "loss": "blackbox_ap", "loss_kwargs": {"lam": 4.0, "margin": 0.1}}
  assert ablation.loss_overrides(base, "fastap", num_bins=5) == {
      "loss": "fastap", "loss_kwargs": {"num_bins": 5}}
