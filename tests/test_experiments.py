"""Smoke tests of the ablation scripts (experiments/ablate_*.py): two values each, tiny config.

Each test calls a script's `main` as the command line would, then checks that the table has the
untrained row and one row per value, and that the plot was written. The hard-sampling ablation,
which needs super-classes, runs on mock Stanford Online Products data and must refuse the digits
before training anything.
"""

from __future__ import annotations

import ast
import inspect
import os
import pathlib
import re

import pytest

from experiments import ablate_batch_size
from experiments import ablate_blackbox_margin_memory
from experiments import ablate_fastap_bins
from experiments import ablate_hard_sampling
from experiments import ablate_roadmap_lambda
from experiments import ablation
from experiments import main as main_lib
from experiments import results as results_lib
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
  from experiments import config as config_lib  # pylint: disable=g-import-not-at-top

  base = config_lib.Config(loss="blackbox_ap", loss_kwargs={"lam": 4.0})
  assert ablation.loss_overrides(base, "blackbox_ap", margin=0.1) == {
      "loss": "blackbox_ap", "loss_kwargs": {"lam": 4.0, "margin": 0.1}}
  assert ablation.loss_overrides(base, "fastap", num_bins=5) == {
      "loss": "fastap", "loss_kwargs": {"num_bins": 5}}


# `python -m experiments.results`: its writer on canned tables and its runner on a trivial command
# (nothing trains), and the module docstrings it replaced as the home of results.


def _canned_section(experiment, seeds=(0, 1), table="table"):
  runs = [
      results_lib.Run(
          seed=s, command=" ".join(results_lib.command(experiment, s, "runs/results")),
          returncode=1 if experiment.fails_with else 0,
          output=f"{experiment.name} {table} of seed {s}\n{experiment.fails_with or 'untrained'}",
          seconds=60.0 + s, load=1.5)
      for s in seeds
  ]
  return results_lib.format_section(
      experiment, runs, date="2026-11-23", machine_name="Some CPU, 2 cores",
      package_versions={"jax": "0.1.2", "flax": "0.3.4"})


def test_results_document_has_each_section_command_and_table():
  experiments = results_lib.EXPERIMENTS
  assert [e.name for e in experiments] == [
      "main", "fastap_bins", "batch_size", "hard_sampling", "blackbox_margin_memory",
      "roadmap_lambda"]
  text = results_lib.format_document({e.name: _canned_section(e) for e in experiments})
  sections = results_lib.read_sections(text)
  assert list(sections) == [e.name for e in experiments]  # In order, each once.
  assert ("python -m experiments.main --config experiments/configs/digits.py "
          "--workdir runs/results/main/seed1 --set seed=1") in sections["main"]
  for e in experiments:
    section = sections[e.name]
    assert f"## {e.title}\n" in section
    for s in (0, 1):
      assert (f"python -m {e.module} {' '.join(e.args)}".rstrip()
              + f" --workdir runs/results/{e.name}/seed{s} --set seed={s}") in section
      assert f"```\n{e.name} table of seed {s}\n{e.fails_with or 'untrained'}\n```" in section
      assert f"### Seed {s} (6{s} s" in section
    for expected in ("2026-11-23", "Some CPU, 2 cores", "jax 0.1.2", "flax 0.3.4",
                     f"### Reading (written {e.written})", inspect.cleandoc(e.reading),
                     inspect.cleandoc(e.claim)):
      assert expected in section, (e.name, expected)
  assert "exit status 1, as expected" in sections["hard_sampling"]
  hard = experiments[3]  # Its error on the digits is its result; another error is a failure.
  assert hard.as_expected(results_lib.Run(0, "", 1, f"ValueError: {hard.fails_with}", 1.0))
  assert not hard.as_expected(results_lib.Run(0, "", 1, "ImportError: no module", 1.0))
  assert not experiments[0].as_expected(results_lib.Run(0, "", 1, "table", 1.0))
  assert "What was tried before" in sections["main"]


def test_results_document_regenerating_one_section_keeps_the_others():
  experiments = results_lib.EXPERIMENTS
  old = results_lib.format_document({e.name: _canned_section(e) for e in experiments[:-1]})
  assert f"--only {experiments[-1].name}`" in old  # Not generated yet, and how to generate it.
  sections = results_lib.read_sections(old)
  sections[experiments[1].name] = _canned_section(experiments[1], seeds=(3,), table="new")
  new = results_lib.read_sections(results_lib.format_document(sections))
  assert "fastap_bins new of seed 3" in new["fastap_bins"]
  assert "of seed 0" not in new["fastap_bins"]
  assert {n: s for n, s in new.items() if n != "fastap_bins"} == {
      n: s for n, s in results_lib.read_sections(old).items() if n != "fastap_bins"}


def test_results_runner_captures_the_table_or_the_error():
  ok = results_lib.run_command(["python", "-c", "print('\\n table \\n')"], seed=0)
  assert (ok.returncode, ok.output, ok.seed) == (0, "table", 0)
  assert ok.command.startswith("python -c ")  # As a user types it, not this interpreter's path.
  bad = results_lib.run_command(
      ["python", "-c", "raise ValueError('no super-classes;\\nuse another data set')"], seed=1)
  assert bad.returncode == 1
  assert bad.output.startswith("Traceback (most recent call last):\n  ...\n")
  assert bad.output.endswith("ValueError: no super-classes;\nuse another data set")


@pytest.mark.parametrize("path", [
    "experiments/configs/digits.py", *sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "experiments").glob("ablate_*.py"))])
def test_module_docstrings_point_at_results_instead_of_holding_them(path):
  doc = ast.get_docstring(ast.parse((ROOT / path).read_text()))
  assert "RESULTS.md" in doc and "python -m experiments.results" in doc
  assert "What it printed" not in doc and not re.search(r"^\s*untrained\s+0\.\d{3}", doc, re.M)
