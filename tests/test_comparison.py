"""The comparison of issue 28 (experiments/comparison/): protocol, statistics, runs, document.

The smoke test runs the command at `--size tiny` for one loss and its ablation (FastAP and the bins
ablation: the backbone, the trials on validation classes, the seeds in both settings, the untrained
network, the raw pixels, an ablation and the document), twice: the second call trains nothing. The
other losses and ablations are checked without training: every trial and every ablation value
builds a config that the job accepts.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from scipy import stats as scipy_stats

from experiments import results
from experiments.comparison import curves
from experiments.comparison import pretrain
from experiments.comparison import protocol
from experiments.comparison import records
from experiments.comparison import report
from experiments.comparison import run
from experiments.comparison import stats
from experiments.job import check
from experiments.job import config as config_lib
from experiments.job import datasets
from experiments.job import losses
from experiments.job import main as main_lib
from experiments.job import train
from experiments.job.configs import glyphs

# Its expensive fixtures are session-scoped and its tests kept on one pytest-xdist worker (`make
# test`): a module-scoped fixture is set up again whenever the worker returns to the module.
pytestmark = pytest.mark.xdist_group("test_comparison")

REPO = pathlib.Path(__file__).resolve().parent.parent
TINY = protocol.SIZES["tiny"]

# ---------------------------------------------------------------------------------------------
# The smoke test: the command, twice.


def _run_command(workdir: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
  """`python -m experiments.comparison.main --size tiny --workdir WORKDIR *args`."""
  return subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.comparison.main",
      "--size",
      "tiny",
      "--workdir",
      str(workdir),
      *args,
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
    env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
  )


def _command(workdir: pathlib.Path, output: pathlib.Path, records: pathlib.Path) -> dict:
  done = _run_command(
    workdir, "--only", "fastap_bins", "--output", str(output), "--records", str(records)
  )
  assert done.returncode == 0, done.stderr[-3000:]
  with open(workdir / "comparison.json") as f:
    return {**json.load(f), "stdout": done.stdout}


@pytest.fixture(scope="session")
def comparison_root(tmp_path_factory):
  """The smoke test's folder: its workdirs, its records, its document."""
  return tmp_path_factory.mktemp("comparison")


@pytest.fixture(scope="session")
def smoke(comparison_root):
  """Both calls' outputs and the document, which held another section before."""
  root = comparison_root
  output = root / "RESULTS.md"
  other = results.EXPERIMENTS[1]
  results.write(
    str(output),
    results.format_document(
      {
        other.name: (
          f"{results.BEGIN.format(other.name)}\n\n## {other.title}\n\nkept\n\n"
          f"{results.END.format(other.name)}\n"
        )
      }
    ),
  )
  first = _command(root / "work", output, root / "records")
  # Another machine: a new workdir, the records alone (the backbone pretrained again).
  second = _command(root / "elsewhere", output, root / "records")
  return first, second, output.read_text()


def test_the_command_writes_a_section_that_parses(smoke):
  first, second, text = smoke
  sections = results.read_sections(text)
  assert "kept" in sections[results.EXPERIMENTS[1].name]  # The other section is kept.
  section = sections[report.NAME]
  assert section.strip() == second["stdout"].strip()  # The section is also printed.
  for expected in (
    "### Protocol",
    "held-out accuracy",
    "| fastap | num_intervals: 10, 20, 40, 80",
    "fine-tuning the pretrained backbone",
    "from scratch",
    "| 1 | untrained | 2/2",
    "| | raw_pixels |",
    "#### FastAP's number of histogram bins L",
    "**Reading: the claim",
    "python -m experiments.comparison.main",
  ):
    assert expected in section, expected
  assert set(first["settings"]) == set(protocol.SETTINGS)
  assert first["settings"]["pretrained"]["chosen"].keys() == {"fastap"}
  for setting in first["settings"].values():
    assert len(setting["final"]["fastap"]) == TINY.seeds
    assert all(0 <= m["recall@1"] <= 1 for m in setting["final"]["fastap"])


def test_a_rerun_trains_nothing(smoke):
  first, second, _ = smoke
  assert first["computed"] > 0 and first["backbone"]["new"]
  assert second["computed"] == 0  # Its backbone is pretrained again, none of its runs.
  assert second["reused"] == first["computed"] + first["reused"]
  assert second["settings"] == first["settings"] and second["ablations"] == first["ablations"]


def test_a_name_that_is_no_loss_or_ablation_is_refused(capsys):
  with pytest.raises(SystemExit) as exit_info:
    from experiments.comparison import main  # pylint: disable=g-import-not-at-top

    main.main(["--size", "tiny", "--only", "fastap", "not_a_loss"])
  assert exit_info.value.code == main_lib.EXIT_CONFIG_ERROR
  assert "not_a_loss" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Statistics, against SciPy.


A = [0.51, 0.55, 0.53, 0.58, 0.50]
B = [0.45, 0.49, 0.52, 0.47, 0.44]
C = [0.40, 0.61, 0.47, 0.66, 0.52]


@pytest.mark.parametrize("values", [A, B[:2], C[:3]])  # 4, 1 and 2 degrees of freedom.
def test_interval_equals_scipy(values):
  mean, low, high = stats.interval(values)
  assert mean == pytest.approx(np.mean(values))
  expected = scipy_stats.t.interval(
    0.95, len(values) - 1, loc=np.mean(values), scale=scipy_stats.sem(values)
  )
  assert (low, high) == pytest.approx(expected, rel=1e-10)
  assert math.isnan(stats.interval([0.5])[1])


@pytest.mark.parametrize(("a", "b"), [(A, B), (B, A), (A, C), (A, B[:3])])
def test_welch_test_and_difference_interval_equal_scipy(a, b):
  t, p = stats.welch_test(a, b)
  expected = scipy_stats.ttest_ind(a, b, equal_var=False)
  assert (t, p) == pytest.approx((expected.statistic, expected.pvalue), rel=1e-9)
  difference, low, high = stats.difference_interval(a, b)
  ci = expected.confidence_interval(0.95)
  assert (difference, low, high) == pytest.approx((np.mean(a) - np.mean(b), ci.low, ci.high))
  # The interval excludes 0 exactly when the test rejects at 0.05.
  assert (low > 0 or high < 0) == (p < stats.ALPHA)
  assert stats.significantly_better(a, b) == (p < stats.ALPHA and t > 0)


def test_readings_follow_the_difference_intervals():
  assert stats.reading([(A, B)]) == "holds"
  assert stats.reading([(B, A)]) == "does not hold"
  assert stats.reading([(A, C)]) == "inconclusive"
  assert stats.reading([(A, B), (A, C)]) == "inconclusive"
  assert stats.reading([(A, B), (B, A)]) == "does not hold"
  assert stats.reading([]) == "inconclusive"
  assert stats.welch_test([0.5, 0.5], [0.4, 0.4]) == (math.inf, 0.0)
  assert stats.welch_test([0.5, 0.5], [0.5, 0.5]) == (0.0, 1.0)


# ---------------------------------------------------------------------------------------------
# The protocol: the same budget for every loss, defaults included.


def test_every_loss_of_the_glyphs_sweep_has_a_search_space():
  # The main job's sweep, then the proxy losses, which the comparison adds to it (issue 60).
  swept = [changes["loss"] for changes in glyphs.get_sweep().values()]
  proxies = [n for n, own in losses.OWN_PARAMETERS.items() if own.name == "proxies"]
  rows = [row for row in protocol.LOSSES if row not in protocol.ROW_LOSSES]
  assert rows == swept + proxies
  assert list(protocol.LOSSES) == list(protocol.SEARCH_SPACES)
  assert set(protocol.BASELINES) < set(protocol.LOSSES)
  assert set(protocol.ROW_LOSSES.values()) <= set(swept)
  assert set(proxies) <= set(protocol.BASELINES)


@pytest.mark.parametrize("loss", protocol.LOSSES)
def test_search_spaces_start_with_the_defaults(loss):
  space = protocol.SEARCH_SPACES[loss]
  # One value: a setting the comparison fixes (the triplet loss's mining), not a search.
  hyperparameters = [k for k in space if k != "learning_rate" and len(space[k]) > 1]
  assert 1 <= len(hyperparameters) <= 2
  assert space["learning_rate"] == protocol.LEARNING_RATES
  assert space["learning_rate"][0] == glyphs.get_config().learning_rate
  # A loss's keyword's default is its function's; a Config field's (Proxy-NCA's proxy learning
  # rate multiplier) the Config's.
  defaults = {
    **{
      k: p.default
      for k, p in inspect.signature(losses.LOSSES[protocol.loss_of(loss)]).parameters.items()
    },
    **{k: getattr(config_lib.Config(), k) for k in protocol.CONFIG_FIELDS},
  }
  for name in hyperparameters:
    assert space[name][0] == defaults[name], (loss, name)
    assert len(set(space[name])) == len(space[name])
  assert all(name in defaults for name in space)


@pytest.mark.parametrize("size", sorted(protocol.SIZES))
def test_every_loss_gets_the_same_trials_default_first(size):
  count = protocol.SIZES[size].trials
  for loss in protocol.LOSSES:
    trials = protocol.trials(loss, count)
    assert len(trials) == count
    assert trials[0] == protocol.grid(loss)[0]  # The default.
    assert len({json.dumps(t, sort_keys=True) for t in trials}) == count
    assert trials == protocol.trials(loss, count)  # Seeded.


@pytest.mark.parametrize("size", sorted(protocol.SIZES))
def test_every_trial_config_passes_the_jobs_checks(size, tmp_path):
  base = protocol.base_config(protocol.SIZES[size], None)
  for loss in protocol.LOSSES:
    for trial in protocol.trials(loss, protocol.SIZES[size].trials):
      config = protocol.trial_config(base, loss, trial)
      check.check_config(config)
      assert config.learning_rate == trial["learning_rate"]


@pytest.mark.parametrize("ablation", protocol.ABLATIONS, ids=lambda a: a.name)
def test_ablations_reuse_their_modules_values_and_claims(ablation):
  assert set(ablation.values) <= set(ablation.module.VALUES)
  for better, worse in ablation.pairs:
    assert better in ablation.values and worse in ablation.values
  assert protocol.ablation_pairs(ablation, TINY)  # The tiny size still reads a pair.
  assert ablation.name in {e.name for e in results.EXPERIMENTS}


@pytest.mark.parametrize("ablation", protocol.ABLATIONS, ids=lambda a: a.name)
def test_every_ablation_value_runs_on_the_tiny_data(ablation, tmp_path):
  base = protocol.base_config(TINY, None)
  chosen = protocol.trial_config(base, ablation.loss, protocol.trials(ablation.loss, 1)[0])
  for value in protocol.ablation_values(ablation, TINY):
    config = main_lib.apply_overrides(chosen, ablation.module.overrides(chosen, value))
    train.check_run(config, str(tmp_path / "run"))


# ---------------------------------------------------------------------------------------------
# Class-disjoint splits: pretraining, validation, test.


def test_pretraining_classes_are_neither_training_nor_test_classes():
  base = protocol.base_config(TINY, None)
  data, characters = pretrain.pretraining_data(base, pretrain.Pretraining(**TINY.pretrain))
  job_train, job_test = datasets.load_data(base)
  assert len(characters) == TINY.pretrain["max_classes"]
  assert not set(characters) & (set(job_train.labels) | set(job_test.labels))
  assert set(data.labels) == set(range(len(characters)))
  # Every character of the main job's data set (>= 16 typefaces) is left out at 16 typefaces.
  full = dataclasses.replace(base, dataset="glyphs")
  _, none = pretrain.pretraining_data(full, pretrain.Pretraining(16, None, 1, 1, 1e-3))
  assert none.size == 0


def test_validation_classes_are_training_classes_held_out():
  base = protocol.base_config(TINY, None)
  job_train, job_test = datasets.load_data(base)
  rest, held = datasets.load_data(dataclasses.replace(base, validation_fraction=0.25))
  assert not set(held.labels) & set(rest.labels)
  assert not set(held.labels) & set(job_test.labels)
  assert set(held.labels) | set(rest.labels) == set(job_train.labels)
  assert held.num_examples + rest.num_examples == job_train.num_examples
  # Some of each super-class: the tiny glyphs' digits (5 classes) and Latin letters (26).
  assert len(set(held.super_labels)) == 2
  assert held.num_classes == 1 + 7  # round(0.25 * 5) and round(0.25 * 26), halves up.
  again = datasets.validation_split(job_train, 0.25)[1]
  assert np.array_equal(again.labels, held.labels)  # The same classes for every run.


def test_validation_fraction_is_checked_and_old_workdirs_resume(tmp_path):
  base = protocol.base_config(TINY, None)
  for bad in (1.0, -0.1):
    with pytest.raises(config_lib.ConfigError, match="validation_fraction"):
      check.check_config(dataclasses.replace(base, validation_fraction=bad))
  with pytest.raises(config_lib.ConfigError, match="holds out 0 of the 31"):
    datasets.load_data(dataclasses.replace(base, validation_fraction=0.01))
  assert config_lib.Config().validation_fraction == 0.0  # Every existing run as it was.
  # A workdir written before the field existed is the same run.
  stored = config_lib.to_json(base)
  del stored["validation_fraction"]
  (tmp_path / "config.json").write_text(json.dumps(stored))
  train.check_run(base, str(tmp_path))
  with pytest.raises(config_lib.ConfigError, match="validation_fraction"):
    train.check_run(dataclasses.replace(base, validation_fraction=0.25), str(tmp_path))


# ---------------------------------------------------------------------------------------------
# Runs computed once; the document.


def test_the_store_computes_each_config_once_and_records_divergence(tmp_path):
  calls = []

  def compute(config, directory):
    calls.append(directory)
    if config.seed == 2:
      raise FloatingPointError("the training loss is not finite at step 3")
    return {"recall@1": 0.5 + config.seed, "map@r": 0.25, "map": 0.3, "step": 2}

  base = protocol.base_config(TINY, None)
  store = records.Store(str(tmp_path / "work"), str(tmp_path / "records"))
  first = store.result("a/b", base, compute)
  assert first["metrics"] == {"recall@1": 0.5, "map@r": 0.25, "map": 0.3}
  assert first["config"] == records.hashed_config(base) and first["machine"]["cores"] >= 1
  assert store.result("a/b", base, compute) == first and len(calls) == 1
  # The record is one file in the records folder, named by the label and the hash.
  assert os.listdir(tmp_path / "records") == [f"a.b-{records.config_hash(base)}.json"]
  # The same config under another label is the same run.
  assert store.result("c", base, compute) == first and len(calls) == 1
  store.result("a/b", dataclasses.replace(base, seed=1), compute)
  diverged = store.result("a/b", dataclasses.replace(base, seed=2), compute)
  assert diverged["metrics"] is None and "step 3" in diverged["diverged"]
  again = records.Store(str(tmp_path / "elsewhere"), str(tmp_path / "records"))
  assert again.result("a/b", dataclasses.replace(base, seed=2), compute) == diverged
  assert (store.computed, store.reused, len(calls)) == (3, 2, 3)
  # Reading only, or another shard's run: no record, nothing computed, the run listed.
  unseen = dataclasses.replace(base, seed=3)
  for reader in (
    records.Store(str(tmp_path / "w"), str(tmp_path / "records"), train_nothing=True),
    records.Store(
      str(tmp_path / "w"),
      str(tmp_path / "records"),
      records.Shard(1 - int(records.config_hash(unseen), 16) % 2, 2),
    ),
  ):
    assert reader.result("a/b/seed3", unseen, compute) is None
    assert reader.missing == ["a/b/seed3"] and len(calls) == 3


def test_hashes_leave_out_new_fields_at_their_neutral_values_and_the_backbones_path():
  base = protocol.base_config(TINY, None)
  stored = records.hashed_config(base)
  assert not set(records.HASH_NEUTRAL) & set(stored)
  for name, value in records.HASH_NEUTRAL.items():
    assert getattr(config_lib.Config(), name) == value  # Today's behaviour is the default.
  here = dataclasses.replace(base, init_weights="/a/backbones/backbone-abc.npz")
  there = dataclasses.replace(base, init_weights="/b/backbones/backbone-abc.npz")
  assert records.config_hash(here) == records.config_hash(there)
  assert records.config_hash(here) != records.config_hash(base)


# The Config fields of the first committed records (2026-12-02): a field added since must join
# records.HASH_NEUTRAL at the value that computes what the code did before it, or every record's
# hash changes and every run trains again.
FIRST_RECORDS_FIELDS = frozenset(
  [
    "batch_size",
    "batches_per_group",
    "check_traced_inputs",
    "checkpoint_every",
    "chunk_size",
    "data_dir",
    "dataset",
    "embedding_dim",
    "eval_batch_size",
    "eval_every",
    "eval_ks",
    "eval_seen_classes",
    "freeze_batchnorm",
    "half_precision",
    "head",
    "head_lr_multiplier",
    "image_size",
    "include_self",
    "init_weights",
    "keep_checkpoints",
    "learning_rate",
    "log_every",
    "loss",
    "loss_block_size",
    "loss_kwargs",
    "memory_batches",
    "model",
    "model_features",
    "num_steps",
    "pooling",
    "profile_num_steps",
    "profile_start",
    "progress_bar",
    "proxy_lr_multiplier",
    "raw_pixels_baseline",
    "resize_size",
    "sampler",
    "samples_per_class",
    "seed",
    "shard",
    "super_classes_per_batch",
    "tanh_every",
    "tanh_growth",
    "tanh_initial",
    "validation_fraction",
    "warmup_steps",
    "weight_decay",
  ]
)


def test_every_field_added_since_the_first_records_is_hash_neutral():
  added = {f.name for f in dataclasses.fields(config_lib.Config)} - FIRST_RECORDS_FIELDS
  assert added == set(records.HASH_NEUTRAL), (
    f"Config fields {sorted(added - set(records.HASH_NEUTRAL))} change every record's hash: "
    "add each to records.HASH_NEUTRAL at the value that computes what the code did without it"
  )


def test_a_stale_record_is_refused(tmp_path):
  base = protocol.base_config(TINY, None)
  store = records.Store(str(tmp_path / "work"), str(tmp_path / "records"))
  store.result("a", base, lambda c, d: {"recall@1": 0.5, "map@r": 0.25})
  (path,) = (tmp_path / "records").iterdir()
  record = json.loads(path.read_text())
  record["config"]["seed"] = 7
  path.write_text(json.dumps(record))
  with pytest.raises(ValueError, match="stale record"):
    store.result("a", base, lambda c, d: {})


@pytest.mark.parametrize(("text", "shard"), [("0/1", (0, 1)), ("1/3", (1, 3))])
def test_shards_parse_and_split_the_runs(text, shard):
  parsed = records.Shard.parse(text)
  assert (parsed.index, parsed.count) == shard
  digests = [f"{i:010x}" for i in range(30)]
  owners = [[records.Shard(i, shard[1]).owns(d) for i in range(shard[1])] for d in digests]
  assert all(sum(o) == 1 for o in owners)  # Each run belongs to exactly one shard.
  for bad in ("2/2", "1", "-1/2", "a/b"):
    with pytest.raises(ValueError, match="--shard"):
      records.Shard.parse(bad)


def _canned_output() -> dict:
  """What `run.run_comparison` returns, with made-up numbers, for the report's tests."""
  rng = np.random.default_rng(0)
  seeds = lambda shift: [
    {"recall@1": 0.3 + shift + 0.01 * rng.standard_normal(), "map@r": 0.1 + shift} for _ in range(3)
  ]
  result = {"metrics": {"recall@1": 0.4, "map@r": 0.12}, "diverged": None, "seconds": 1.0}
  settings: dict[str, dict[str, Any]] = {}
  for setting in protocol.SETTINGS:
    trials = {
      loss: [{"trial": t, "result": result} for t in protocol.trials(loss, 2)]
      for loss in protocol.LOSSES
    }
    settings[setting] = {
      "trials": trials,
      "chosen": {loss: trials[loss][1]["trial"] for loss in protocol.LOSSES},
      "final": {
        loss: seeds(0.0 if loss in protocol.BASELINES else 0.2) for loss in protocol.LOSSES
      },
      "untrained": seeds(-0.2),
    }
  settings["scratch"]["final"]["triplet"][1] = None  # A diverged seed.
  ablations = {
    a.name: [
      {"value": v, "name": f"v{i}", "seeds": seeds(0.1 * (i == 0))} for i, v in enumerate(a.values)
    ]
    for a in protocol.ABLATIONS
  }
  return {
    "size": "full",
    "only": [],
    "data": {"train": {"classes": 359, "images": 5879}},
    "backbone": {
      "characters": 2485,
      "images": 27256,
      "held_out": 2726,
      "accuracy": 0.5,
      "seconds": 80.0,
      "settings": protocol.SIZES["full"].pretrain,
    },
    "settings": settings,
    "raw_pixels": {"recall@1": 0.42, "map@r": 0.095},
    "ablations": ablations,
    "computed": 10,
    "reused": 2,
    "run_seconds": 2000.0,
    "seconds": 1900.0,
  }


def test_the_section_reads_the_claims_from_the_intervals():
  section = report.format_section(
    _canned_output(), date="2026-11-25", machine_name="CPU", package_versions={"jax": "0.1"}
  )
  assert results.read_sections(section) == {report.NAME: section}
  row = {loss: i + 2 for i, loss in enumerate(protocol.LOSSES)}  # Row 1 is the untrained network.
  assert f"| {row['multi_similarity']} | multi_similarity | 3/3 |" in section
  assert f"| {row['triplet']} | triplet | 2/3 |" in section  # The diverged seed is counted out.
  assert "Each AP loss against the best baseline" in section
  assert ": holds;" in section  # Every AP loss is 0.2 above the baselines.
  assert section.count("**Reading: the claim holds**") == len(protocol.ABLATIONS) - 1
  # The ablations' second pairs compare values without a difference: batch size's (32, 4) is
  # its third value; every first value is 0.1 above the others.
  for ablation in protocol.ABLATIONS:
    assert f"`experiments.ablations.{ablation.name}.overrides`" in section
  assert "2485 characters" in section and "**held-out accuracy 0.500**" in section


def test_regenerating_either_writer_keeps_the_other_section(tmp_path):
  path = tmp_path / "RESULTS.md"
  out = _canned_output()
  report.write_section(out, str(path))
  sections = results.read_sections(path.read_text())
  name = results.EXPERIMENTS[0].name
  sections[name] = f"{results.BEGIN.format(name)}\n\n## Main\n\nnew\n\n{results.END.format(name)}\n"
  path.write_text(results.format_document(sections))  # What experiments.results writes.
  kept = results.read_sections(path.read_text())
  assert kept[report.NAME] == sections[report.NAME] and "new" in kept[name]
  assert f"- {report.TITLE} (`{report.NAME}`)" in path.read_text()
  report.write_section(out, str(path))
  assert "new" in results.read_sections(path.read_text())[name]


def test_docs_tables_and_figure_come_from_the_section(tmp_path):
  section = report.format_section(
    _canned_output(), date="2026-11-25", machine_name="a CPU", package_versions={"jax": "0.1"}
  )
  paths = report.write_docs(section, source="measured", directory=tmp_path)
  assert [p.name for p in paths] == ["comparison_pretrained.json", "comparison_scratch.json"]
  assert (tmp_path / "comparison_pretrained.png").is_file()  # The intervals, both settings.
  for setting in protocol.SETTINGS:
    data = json.loads((tmp_path / f"comparison_{setting}.json").read_text())
    assert data["title"].startswith(f"Test classes, {report.SETTING_TITLES[setting]}")
    assert data["columns"][:4] == ["#", "run", "seeds", "R@1 mean [95% CI]"]
    assert [row[1] for row in data["rows"]] == ["untrained", *protocol.LOSSES, "raw_pixels"]
    assert (data["date"], data["machine"]) == ("2026-11-25", "a CPU")
    assert data["command"] == report.DOCS_COMMAND
    assert data["notes"][0].startswith("Each AP loss against the best baseline")
  with pytest.raises(ValueError, match="says not when and where"):
    report.write_docs("### Test classes, from scratch\n", source="measured", directory=tmp_path)


def test_tables_only_writes_the_docs_from_the_document_and_runs_nothing(monkeypatch, tmp_path):
  from experiments import docs_data  # pylint: disable=g-import-not-at-top
  from experiments.comparison import main as comparison_main  # pylint: disable=g-import-not-at-top

  document = tmp_path / "RESULTS.md"
  report.write_section(_canned_output(), str(document))
  monkeypatch.setattr(docs_data, "DIRECTORY", tmp_path / "generated")
  (tmp_path / "generated").mkdir()
  comparison_main.main(["--tables-only", "--output", str(document)])
  data = json.loads((tmp_path / "generated" / "comparison_scratch.json").read_text())
  assert data["source"] == results.RECORD_SOURCE
  seeds = {row[1]: row[2] for row in data["rows"]}
  assert seeds["triplet"] == "2/3" and seeds["fastap"] == "3/3"  # A diverged seed counted out.


# ---------------------------------------------------------------------------------------------
# Shards: their records merge into the tables of one process.


def _fake_training(monkeypatch):
  """Training replaced by metrics drawn from the config's hash: fast, and the same on any call."""

  def fake(config, workdir, *, name=None):
    del workdir, name
    rng = np.random.default_rng(int(records.config_hash(config), 16))
    return {"recall@1": float(rng.uniform()), "map@r": float(rng.uniform()), "step": 2}

  monkeypatch.setattr(train, "train_and_evaluate", fake)


def _tables(out: dict) -> str:
  """The section without the line of when, where and how long."""
  section = report.format_section(out, date="d", machine_name="m", package_versions={})
  return "\n".join(line for line in section.splitlines() if not line.startswith("Run on"))


def test_two_shards_records_merge_into_the_tables_of_one_process(monkeypatch, tmp_path):
  _fake_training(monkeypatch)
  work, only = str(tmp_path / "work"), ["fastap_bins"]
  one = run.run_comparison("tiny", work, only, records_dir=str(tmp_path / "one"))
  assert one["complete"] and one["computed"] > 0
  merged = str(tmp_path / "merged")
  shards = [records.Shard(i, 2) for i in range(2)]
  first = [run.run_comparison("tiny", work, only, records_dir=merged, shard=s) for s in shards]
  # Shard 0 ran alone first: its runs that need shard 1's trials waited, or shard 1's own runs
  # were left to it.
  assert not first[0]["complete"] and (first[0]["waiting"] or first[0]["missing"])
  trained = sum(o["computed"] for o in first)
  for _ in range(3):  # Each shard again, as the records of the other arrive.
    outs = [run.run_comparison("tiny", work, only, records_dir=merged, shard=s) for s in shards]
    trained += sum(o["computed"] for o in outs)
    if all(o["complete"] for o in outs):
      break
  assert all(o["complete"] for o in outs)
  assert trained == one["computed"]  # Every run trained once, by one of the shards.
  assert sorted(os.listdir(merged)) == sorted(os.listdir(tmp_path / "one"))
  alone = run.run_comparison("tiny", work, only, records_dir=merged, train_nothing=True)
  assert alone["complete"] and alone["computed"] == 0
  assert _tables(alone) == _tables(one)


def test_from_records_refuses_listing_the_missing_runs(monkeypatch, tmp_path, capsys):
  from experiments.comparison import main  # pylint: disable=g-import-not-at-top

  _fake_training(monkeypatch)
  monkeypatch.setattr(train, "train_and_evaluate", None)  # Nothing may train.
  with pytest.raises(SystemExit) as exit_info:
    main.main(
      ["--size", "tiny", "--only", "fastap", "--from-records", "--records", str(tmp_path)]
      + ["--workdir", str(tmp_path / "work")]
    )
  assert exit_info.value.code == main_lib.EXIT_CONFIG_ERROR
  err = capsys.readouterr().err
  assert "--from-records: cannot write up" in err and "pretrained/tune/fastap/0" in err
  assert "backbone-" in err and "wait for other runs' records" in err


# ---------------------------------------------------------------------------------------------
# The learning curves.


@pytest.fixture(scope="session")
def curves_out(smoke, comparison_root):
  """`--stage curves --only fastap` on the smoke test's records: its trials are read, its two
  curve runs (one per setting) trained."""
  del smoke  # Its records: the trials and the seeds of the short budget.
  root = comparison_root
  done = _run_command(
    root / "work", "--stage", "curves", "--only", "fastap", "--records", str(root / "records")
  )
  assert done.returncode == 0, done.stderr[-3000:]
  with open(root / "work" / "curves.json") as f:
    return {**json.load(f), "stdout": done.stdout}


def test_the_curves_evaluate_validation_and_test_classes_at_fixed_steps(curves_out, tmp_path):
  out = curves_out
  assert out["complete"] and out["computed"] == len(protocol.SETTINGS)  # The trials are read.
  steps = list(range(0, TINY.curve_steps + 1, TINY.curve_eval_every))
  for setting in protocol.SETTINGS:
    row = out["settings"][setting]["fastap"]
    assert [p["step"] for p in row["curve"]] == steps
    for point in row["curve"]:
      assert {"recall@1", "map@r", "test/recall@1", "test/map@r"} <= set(point)
    assert len(row["short"]) == TINY.seeds  # The comparison's seeds, read from their records.
  assert "| fastap |" in out["stdout"] and "plateau" in out["stdout"]
  paths = curves.write_docs(out, directory=tmp_path)
  assert [p.name for p in paths] == [f"comparison_curves_{s}.json" for s in protocol.SETTINGS]
  assert (tmp_path / "comparison_curves_pretrained.png").is_file()
  data = json.loads(paths[0].read_text())
  assert data["rows"][0][0] == "fastap" and data["command"] == curves.DOCS_COMMAND


def test_the_plateau_is_the_first_evaluation_near_the_best_on_validation():
  curve = [
    {"step": 0, "recall@1": 0.2, "test/recall@1": 0.25},
    {"step": 150, "recall@1": 0.495, "test/recall@1": 0.4},
    {"step": 300, "recall@1": 0.5, "test/recall@1": 0.45},
    {"step": 450, "recall@1": 0.48, "test/recall@1": 0.5},
  ]
  assert curves.plateau(curve)["step"] == 150  # Within 0.01 of the best, 0.5.
  assert curves.plateau(curve, curves.TEST)["step"] == 450
  assert curves.plateau([{"step": 0}]) is None


def test_the_ranking_reading_compares_the_short_budget_with_the_plateau():
  def row(short, test):
    return {"curve": [{"step": 0, "recall@1": 0.1, "test/recall@1": test}], "short": [short]}

  kept, reading = curves.setting_rows({"a": row(0.5, 0.6), "b": row(0.4, 0.5), "c": None})
  assert [r[0] for r in kept] == ["a", "b"] and "holds at the plateau" in reading
  _, reading = curves.setting_rows({"a": row(0.5, 0.4), "b": row(0.4, 0.5)})
  assert "does not hold (a 1 -> 2, b 2 -> 1)" in reading and "-1.00" in reading


def test_test_classes_are_evaluated_only_beside_a_validation_split():
  base = protocol.base_config(TINY, None)
  with pytest.raises(config_lib.ConfigError, match="eval_test_classes"):
    check.check_config(dataclasses.replace(base, eval_test_classes=True))
  curve = protocol.curve_config(base, "fastap", protocol.trials("fastap", 1)[0], TINY)
  check.check_config(curve)
  assert (curve.num_steps, curve.eval_every, curve.seed) == (TINY.curve_steps, 2, 0)
  full = protocol.SIZES["full"]
  assert full.curve_steps == 10 * full.num_steps and full.curve_eval_every == full.num_steps
  assert full.curve_warmup_steps == 10 * full.warmup_steps


def test_the_converged_protocol_searches_the_head_of_every_loss_alike():
  converged = protocol.converged(3000, 300)
  assert (converged.num_steps, converged.heads[0]) == (3000, "embedding")
  base = protocol.base_config(converged, None)
  for loss in protocol.LOSSES:
    space = protocol.search_space(loss, converged.heads)
    assert space["head"] == ("embedding", "centred_embedding")
    assert list(space)[-1] == "learning_rate"
    trials = protocol.trials(loss, converged.trials, converged.heads)
    assert trials[0]["head"] == "embedding"  # The default first, as for every dimension.
    for trial in trials:
      config = protocol.trial_config(base, loss, trial)
      check.check_config(config)
      assert config.head == trial["head"]
    # One head is no search: the sizes of today draw the trials they drew before.
    assert protocol.trials(loss, 4) == protocol.trials(loss, 4, ("embedding",))
    assert "head" not in protocol.trials(loss, 4)[1]
