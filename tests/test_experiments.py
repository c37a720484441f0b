"""Tests of the ablation scripts (experiments/ablations/*.py and their shared sweep.py).

Smoke tests: each calls a script's `main` as the command line would, two values, tiny config, then
checks that the table has the untrained row and one row per value, that the plot was written, and
that each run's `config.json` (written by the training itself) holds the swept value. The
hard-sampling ablation, which needs super-classes, runs end to end on mock Stanford Online
Products data and must refuse the digits before training anything. A faster test runs every
script's default command (its default values on its default config, the glyphs) with the training
replaced by a recorder, which checks each run against its data as the real sweep does first, and
checks that each value reaches its run's config.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import os
import pathlib
import re

import pytest

from experiments import results as results_lib
from experiments.ablations import batch_size
from experiments.ablations import blackbox_margin_memory
from experiments.ablations import fastap_bins
from experiments.ablations import hard_sampling
from experiments.ablations import roadmap_lambda
from experiments.ablations import sweep
from experiments.job import config as config_lib
from experiments.job import main as main_lib
from experiments.job import train
from jaxrank.data import testing

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = str(ROOT / "experiments" / "job" / "configs" / "tiny.py")
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


def _stored_config(workdir, run):
  """The config.json that the training of `run` wrote into its workdir."""
  with open(os.path.join(workdir, run, "config.json")) as f:
    return json.load(f)


# What each script's value must set in its run's config, written out here rather than taken from
# the scripts: value -> {field: expected}. `loss_kwargs` is compared whole, so a value that lands
# beside a stale hyperparameter fails too. A value without a batch geometry keeps the base
# config's: the glyphs' 64 = 16 classes x 4 images, 300 steps and S = 2 (the Config default).
def _expected_batch_size(value):
  p, k, steps = (*value, 300)[:3] if isinstance(value, tuple) else (16, value, 300)
  return {
    "loss": "fastap",
    "loss_kwargs": {},
    "batch_size": p * k,
    "samples_per_class": k,
    "num_steps": steps,
  }


def _expected_hard_sampling(value: str, base: tuple[int, int, int] = (16, 4, 2)) -> dict:
  """`value` is `sampler`, `sampler,P,K` or `sampler,P,K,S`; `base` the config's P, K, S."""
  sampler, *given = value.split(",")
  p, k, s = (*map(int, given), *base[len(given) :])
  return {
    "loss": "fastap",
    "loss_kwargs": {},
    "sampler": sampler,
    "batch_size": p * k,
    "samples_per_class": k,
    "super_classes_per_batch": s,
  }


EXPECTED_FIELDS = {
  "fastap_bins": lambda v: {"loss": "fastap", "loss_kwargs": {"num_intervals": v}},
  "batch_size": _expected_batch_size,
  "blackbox_margin_memory": lambda v: {
    "loss": "blackbox_ap",
    "loss_kwargs": {"margin": v[0]},
    "memory_batches": v[1],
  },
  "roadmap_lambda": lambda v: {"loss": "roadmap", "loss_kwargs": {"calibration_weight": v}},
  "hard_sampling": _expected_hard_sampling,
}
SCRIPTS = {
  "fastap_bins": fastap_bins,
  "batch_size": batch_size,
  "blackbox_margin_memory": blackbox_margin_memory,
  "roadmap_lambda": roadmap_lambda,
  "hard_sampling": hard_sampling,
}


def _assert_fields(config, expected, what, value):
  got = {k: config[k] for k in expected}
  assert got == expected, f"{what}: the value {value!r} did not reach its run's config"


def test_every_ablation_script_is_covered():
  scripts = {p.stem for p in (ROOT / "experiments/ablations").glob("*.py")} - {"__init__", "sweep"}
  assert scripts == set(SCRIPTS) == {m.__name__.split(".")[-1] for m in SCRIPTS.values()}


# Each script's defaults, and the other forms of value that experiments/results.py and the
# docstrings give: `--values` as typed -> the values as the script receives them.
@pytest.mark.parametrize(
  "what, given",
  [
    *[(what, None) for what in sorted(SCRIPTS)],
    ("batch_size", {"64,4,75": (64, 4, 75), "4": 4}),
    ("hard_sampling", {"m_per_class": "m_per_class", "super_class,16,4,8": "super_class,16,4,8"}),
  ],
)
def test_each_value_reaches_its_run_config(what, given, tmp_path, capsys, monkeypatch):
  # The script's whole command line on its default config (the glyphs); only the
  # training is replaced, by a recorder of the configs it would train (as their config.json) and
  # fixed metrics. As the real sweep does first, each run is checked against the data: its config,
  # and its sampler on the train split (the hard batches' super-classes are large enough).
  recorded = {}

  def fake_sweep(base, runs, workdir, *, untrained=True):
    assert not untrained
    assert base.dataset == "glyphs"
    for name, config in runs.items():
      train.check_run(config, os.path.join(workdir, name))
    recorded.update({name: config_lib.to_json(c) for name, c in runs.items()})
    metrics = {**{f"recall@{k}": 0.5 for k in base.eval_ks}, "map@r": 0.25}
    return {name: dict(metrics) for name in runs}, {name: 1.0 for name in runs}

  monkeypatch.setattr(main_lib, "run_sweep", fake_sweep)
  module = SCRIPTS[what]
  argv = ["--workdir", str(tmp_path), "--no-untrained"]
  module.main(argv if given is None else [*argv, "--values", *given])
  capsys.readouterr()
  expected = module.VALUES if given is None else list(given.values())
  assert len(recorded) == len(expected) > 1
  with open(tmp_path / "results.json") as f:
    values = json.load(f)["values"]  # run name -> the value as --values takes it
  assert list(values) == list(recorded)
  if given is not None:
    assert list(values.values()) == list(given)
  for config, value in zip(recorded.values(), expected):
    _assert_fields(config, EXPECTED_FIELDS[what](value), what, value)


# End to end, with training, for one script: the others share `sweep.main` and the sweep, and
# each script's values reach its runs' configs by the test above (which replaces the training).
@pytest.mark.parametrize(
  "what, values, parsed, rows, untrained",
  [
    ("fastap_bins", ["5", "20"], [5, 20], ["L=5", "L=20"], True),
  ],
)
def test_ablation_prints_a_row_per_value_and_plots(
  what, values, parsed, rows, untrained, tmp_path, capsys
):
  got = _run(SCRIPTS[what], what, tmp_path, capsys, values, untrained=untrained)
  assert got == (["untrained"] if untrained else []) + rows
  for run, value in zip(rows, parsed):
    _assert_fields(_stored_config(tmp_path / what, run), EXPECTED_FIELDS[what](value), what, value)
  if untrained:  # The baseline is the base config, not trained.
    base = _stored_config(tmp_path / what, "untrained")
    assert (base["loss"], base["num_steps"]) == ("fastap", 0)


def test_hard_sampling_on_mock_sop(tmp_path, capsys):
  # 24 classes in the 12 super-classes of SOP: two per super-class, so P = 16 / 4 = 4 classes from
  # two super-classes can be drawn. One value with its geometry, one with the base config's.
  sets = ["dataset=sop", f"data_dir={tmp_path}", "image_size=32", "resize_size=36", "batch_size=16"]
  values = ["super_class,4,4,2", "m_per_class"]
  with testing.mock_retrieval_data(classes_per_split=24, images_per_class=4):
    rows = _run(hard_sampling, "hard_sampling", tmp_path, capsys, values, sets, untrained=False)
  assert rows == ["super_class_4x4_S=2", "m_per_class_4x4"]
  for run, value in zip(rows, values):
    _assert_fields(
      _stored_config(tmp_path / "hard_sampling", run),
      _expected_hard_sampling(value, base=(4, 4, 2)),
      "hard_sampling",
      value,
    )


def _exits_with_one_line(module, argv, capsys) -> str:
  """Runs an ablation script that must refuse its arguments: status 2, one line on stderr."""
  with pytest.raises(SystemExit) as exit_info:
    module.main(argv)
  assert exit_info.value.code == main_lib.EXIT_CONFIG_ERROR
  err = capsys.readouterr().err
  assert len(err.strip().splitlines()) == 1, err
  return err


def test_hard_sampling_refuses_digits_before_training(tmp_path, capsys):
  workdir = tmp_path / "hard"
  err = _exits_with_one_line(hard_sampling, ["--config", TINY, "--workdir", str(workdir)], capsys)
  assert re.search(r"error: .*which digits does not have.*dataset=.sop.", err), err
  assert not workdir.exists()


# The hard-sampling cases run on the default config (the glyphs, which have super-classes).
@pytest.mark.parametrize(
  ("what", "argv", "message"),
  [
    (
      "fastap_bins",
      ["--config", TINY, "--set", "seed=yes"],
      r"error: --set seed=yes: seed must be an int",
    ),
    (
      "fastap_bins",
      ["--config", TINY, "--values", "5", "5"],
      r"error: --values gives the run '.*' twice",
    ),
    (
      "hard_sampling",
      ["--values", "super_class,16"],
      r"error: a value of the hard-sampling .* got 'super_class,16'\.$",
    ),
    (
      "hard_sampling",
      ["--values", "super_class,16,4,3"],
      r"error: .*16 classes is not a multiple of it",
    ),
  ],
)
def test_ablation_refuses_bad_arguments_in_one_line(what, tmp_path, capsys, argv, message):
  workdir = tmp_path / what
  err = _exits_with_one_line(SCRIPTS[what], ["--workdir", str(workdir), *argv], capsys)
  assert re.search(message, err), err
  assert not workdir.exists()


def test_values_parse_as_literals_or_strings():
  assert main_lib.parse_value("10") == 10
  assert main_lib.parse_value("0.02,2") == (0.02, 2)
  assert main_lib.parse_value("super_class") == "super_class"


def test_loss_overrides_keep_the_base_hyperparameters_of_the_same_loss():
  from experiments.job import config as config_lib  # pylint: disable=g-import-not-at-top

  base = config_lib.Config(loss="blackbox_ap", loss_kwargs={"interpolation": 4.0})
  assert sweep.loss_overrides(base, "blackbox_ap", margin=0.1) == {
    "loss": "blackbox_ap",
    "loss_kwargs": {"interpolation": 4.0, "margin": 0.1},
  }
  assert sweep.loss_overrides(base, "fastap", num_intervals=5) == {
    "loss": "fastap",
    "loss_kwargs": {"num_intervals": 5},
  }


# `python -m experiments.results`: its writer on canned tables and its runner on a trivial command
# (nothing trains), and the module docstrings it replaced as the home of results.


def _canned_section(experiment, seeds=(0, 1), table="table"):
  runs = [
    results_lib.Run(
      seed=s,
      command=" ".join(results_lib.command(experiment, s, "runs/results")),
      returncode=1 if experiment.fails_with else 0,
      output=f"{experiment.name} {table} of seed {s}\n{experiment.fails_with or 'untrained'}",
      seconds=60.0 + s,
      load=1.5,
    )
    for s in seeds
  ]
  return results_lib.format_section(
    experiment,
    runs,
    date="2026-11-23",
    machine_name="Some CPU, 2 cores",
    package_versions={"jax": "0.1.2", "flax": "0.3.4"},
  )


def test_results_document_has_each_section_command_and_table():
  experiments = results_lib.EXPERIMENTS
  assert [e.name for e in experiments] == [
    "main",
    "fastap_bins",
    "batch_size",
    "batch_size_images",
    "hard_sampling",
    "blackbox_margin_memory",
    "roadmap_lambda",
    "glyphs_hashing",
  ]
  text = results_lib.format_document({e.name: _canned_section(e) for e in experiments})
  sections = results_lib.read_sections(text)
  assert list(sections) == [e.name for e in experiments]  # In order, each once.
  assert (
    "python -m experiments.job.main --config experiments/job/configs/glyphs.py "
    "--workdir runs/results/main/seed1 --set seed=1"
  ) in sections["main"]
  for e in experiments:
    section = sections[e.name]
    assert f"## {e.title}\n" in section
    for s in (0, 1):
      assert (
        f"python -m {e.module} {' '.join(e.args)}".rstrip()
        + f" --workdir runs/results/{e.name}/seed{s} --set seed={s}"
      ) in section
      assert f"```\n{e.name} table of seed {s}\n{e.fails_with or 'untrained'}\n```" in section
      assert f"### Seed {s} (6{s} s" in section
    for expected in (
      "2026-11-23",
      "Some CPU, 2 cores",
      "jax 0.1.2",
      "flax 0.3.4",
      f"### Reading (written {e.written})",
      inspect.cleandoc(e.reading),
      inspect.cleandoc(e.claim),
    ):
      assert expected in section, (e.name, expected)
  # Every experiment trains on the glyphs: none ends with an expected error, the hard-sampling
  # ablation included (it stopped on the digits, which have no super-classes).
  assert not any(e.fails_with for e in experiments)
  hard = next(e for e in experiments if e.name == "hard_sampling")
  assert not hard.as_expected(results_lib.Run(0, "", 1, "ValueError: digits", 1.0))
  assert hard.as_expected(results_lib.Run(0, "", 0, "table", 1.0))
  # An experiment whose error is its result: that error is as expected, another is a failure.
  refusing = dataclasses.replace(hard, fails_with="which digits does not have")
  assert refusing.as_expected(
    results_lib.Run(0, "", 1, "ValueError: which digits does not have", 1.0)
  )
  assert not refusing.as_expected(results_lib.Run(0, "", 1, "ImportError: no module", 1.0))
  assert not refusing.as_expected(results_lib.Run(0, "", 0, "table", 1.0))
  section = _canned_section(refusing)
  assert "exit status 1, as expected" in section
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
    n: s for n, s in results_lib.read_sections(old).items() if n != "fastap_bins"
  }


def test_results_runner_captures_the_table_or_the_error():
  ok = results_lib.run_command(["python", "-c", "print('\\n table \\n')"], seed=0)
  assert (ok.returncode, ok.output, ok.seed) == (0, "table", 0)
  assert ok.command.startswith("python -c ")  # As a user types it, not this interpreter's path.
  bad = results_lib.run_command(
    ["python", "-c", "raise ValueError('no super-classes;\\nuse another data set')"], seed=1
  )
  assert bad.returncode == 1
  assert bad.output.startswith("Traceback (most recent call last):\n  ...\n")
  assert bad.output.endswith("ValueError: no super-classes;\nuse another data set")


_PRINTED = """Test split (classes unseen in training), experiments/job/configs/glyphs.py seed={}:

bins          R@1    R@2  MAP@R   time
--------------------------------------
untrained   0.20{}  0.283  0.039     5s
L=5         0.18{}  0.261  0.045    14s

Total 91 s; plot in runs/results/fastap_bins/seed{}/fastap_bins.png"""


def test_results_write_the_guide_s_table_of_the_seeds(tmp_path):
  bins = next(e for e in results_lib.EXPERIMENTS if e.name == "fastap_bins")
  assert results_lib.printed_table(_PRINTED.format(0, 3, 5, 0)) == (
    ["bins", "R@1", "R@2", "MAP@R", "time"],
    [["untrained", "0.203", "0.283", "0.039", "5s"], ["L=5", "0.185", "0.261", "0.045", "14s"]],
  )
  runs = [
    results_lib.Run(
      s, f"python -m x --set seed={s}", 0, _PRINTED.format(s, 3 + s, 5 + s, s), 90.0 + s
    )
    for s in (0, 1)
  ]
  section = results_lib.format_section(
    bins, runs, date="2026-11-23", machine_name="Some CPU, 2 cores", package_versions={"jax": "1"}
  )
  path = results_lib.write_docs_table(bins, section, directory=tmp_path)
  data = json.loads(path.read_text())
  assert path.name == "results_fastap_bins.json"
  assert data["columns"] == ["bins", "R@1 (seeds 0 / 1)", "MAP@R (seeds 0 / 1)"]
  assert data["rows"] == [
    ["untrained", "0.203 / 0.204", "0.039 / 0.039"],
    ["L=5", "0.185 / 0.186", "0.045 / 0.045"],
  ]
  assert data["command"] == ".venv/bin/python -m experiments.results --only fastap_bins"
  assert (data["date"], data["machine"]) == ("2026-11-23", "Some CPU, 2 cores; jax 1")
  assert data["notes"][0] == "Wall time: seed 0 90 s, seed 1 91 s."
  # A failed seed writes nothing; nor does an experiment that no page shows.
  failed = results_lib.format_section(
    bins,
    [runs[0], dataclasses.replace(runs[1], returncode=1, output="ValueError: x")],
    date="2026-11-23",
    machine_name="m",
    package_versions={},
  )
  assert results_lib.write_docs_table(bins, failed, directory=tmp_path / "failed") is None
  main = next(e for e in results_lib.EXPERIMENTS if e.name == "main")
  assert results_lib.write_docs_table(main, section, directory=tmp_path / "main") is None
  assert not (tmp_path / "failed").exists() and not (tmp_path / "main").exists()


def test_results_tables_only_writes_the_data_files_from_the_document(tmp_path, monkeypatch):
  from experiments import docs_data  # pylint: disable=g-import-not-at-top

  monkeypatch.setattr(docs_data, "DIRECTORY", tmp_path)
  assert results_lib.main(["--tables-only", "--only", "glyphs_hashing", "roadmap_lambda"]) == 0
  assert sorted(p.name for p in tmp_path.iterdir()) == [
    "results_glyphs_hashing.json",
    "results_roadmap_lambda.json",
  ]
  data = json.loads((tmp_path / "results_glyphs_hashing.json").read_text())
  assert data["source"] == results_lib.RECORD_SOURCE
  assert data["columns"] == ["run", "mAP_T (seeds 0 / 1)", "R@1 (seeds 0 / 1)"]
  # The document's tables, as the guide shows them (docs/_generated holds the same file).
  shown = json.loads((ROOT / "docs/_generated/results_glyphs_hashing.json").read_text())
  assert data == shown


@pytest.mark.parametrize(
  "path",
  [
    "experiments/job/configs/digits.py",
    "experiments/job/configs/glyphs.py",
    *sorted(
      str(p.relative_to(ROOT))
      for p in (ROOT / "experiments/ablations").glob("*.py")
      if p.stem not in ("__init__", "sweep")
    ),
  ],
)
def test_module_docstrings_point_at_results_instead_of_holding_them(path):
  doc = ast.get_docstring(ast.parse((ROOT / path).read_text()))
  assert "RESULTS.md" in doc and "python -m experiments.results" in doc
  assert "What it printed" not in doc and not re.search(r"^\s*untrained\s+0\.\d{3}", doc, re.M)
