"""The training command line, `python -m experiments.job.main`, as a user meets it: each behaviour
runs `main()` in a subprocess (with a timeout) on the tiny config and checks its exit status, what
it prints and what it writes.

* `--help` answers without importing TensorFlow or JAX and lists the losses and config fields;
* a bad config prints one line and exits with status 2, writing nothing;
* Ctrl-C (SIGINT) saves a checkpoint and exits with status 130 and one line;
* a rerun whose newest checkpoint cannot be read names it, falls back to the one before and says
  "resuming from step N".
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import queue
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from experiments.job import config as config_lib
from experiments.job import losses
from experiments.job import main as main_lib

# Its expensive fixtures are session-scoped and its tests kept on one pytest-xdist worker (`make
# test`): a module-scoped fixture is set up again whenever the worker returns to the module.
pytestmark = pytest.mark.xdist_group("test_cli")

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = str(ROOT / "experiments" / "job" / "configs" / "tiny.py")
DIGITS = str(ROOT / "experiments" / "job" / "configs" / "digits.py")
# The environment of a user who set nothing: main itself quiets TensorFlow.
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "XLA_", "JAX_"))}
# A run that trains until it is interrupted: one loss record per step, a checkpoint every 2 steps.
ENDLESS = ["num_steps=100000", "eval_every=100000", "checkpoint_every=2", "log_every=1"]


def _main(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, "-m", "experiments.job.main", *args],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=timeout,
    check=False,
  )


def _command(workdir: pathlib.Path, overrides=ENDLESS) -> list[str]:
  sets = [a for o in overrides for a in ("--set", o)]
  return [
    sys.executable,
    "-m",
    "experiments.job.main",
    "--config",
    TINY,
    "--workdir",
    str(workdir),
    *sets,
  ]


# ---------------------------------------------------------------------------------------------
# --help


def test_help_is_fast_lists_losses_and_fields_and_imports_neither_tensorflow_nor_jax():
  code = textwrap.dedent("""
      import sys
      from experiments.job import main
      try:
        main.main(["--help"])
      except SystemExit as e:
        assert e.code == 0, e.code
      heavy = ("tensorflow", "jax", "jaxrank", "flax", "optax", "orbax")
      print("IMPORTED", sorted({m.split(".")[0] for m in sys.modules} & set(heavy)))
  """)
  proc = subprocess.run(
    [sys.executable, "-c", code],
    cwd=ROOT,
    env=ENV,
    capture_output=True,
    text=True,
    timeout=60,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr
  assert "IMPORTED []" in proc.stdout
  for name in losses.SUMMARIES:
    assert re.search(rf"^  {re.escape(name)} +\S", proc.stdout, re.M), name
  for field in dataclasses.fields(config_lib.Config):
    assert re.search(rf"^  {field.name} +{re.escape(str(field.type))} ", proc.stdout, re.M), field
  assert re.search(r"^  learning_rate +float +0\.001$", proc.stdout, re.M)


def test_the_loss_summaries_name_the_table():
  assert list(losses.SUMMARIES) == list(losses.LOSSES)


# ---------------------------------------------------------------------------------------------
# Bad configs: one line, status 2, nothing written.


@pytest.mark.parametrize(
  "arguments, message",
  [
    (
      ["--set", "learning_rate=1e-3x"],
      "--set learning_rate=1e-3x: learning_rate must be a float (default 0.001), got the "
      "string '1e-3x'",
    ),
    (["--set", "shard=yes"], "shard must be True or False (default False), got the string"),
    (["--set", "seed='0'"], "seed must be an int (default 0), got the string '0'"),
    (["--set", "model_features=[4, 'x']"], "model_features must be a tuple of ints"),
    (["--set", "nonsense=1"], "['nonsense'] are not fields of the config"),
    (["--set", "loss"], "--set 'loss' must look like field=value"),
    (
      ["--config", DIGITS, "--set", "loss=smoothap"],
      "--set loss=smoothap: the sweep of " + DIGITS + " sets loss in its runs fastap_40bins, "
      "soft_binning_ap",
    ),
    (["--config", "experiments/job/configs/nonexistent.py"], "is not a file"),
    # A hyperparameter that the loss rejects fails before anything runs, not at the first step.
    (
      ["--set", "loss_kwargs={'num_intervals': 1}"],
      "config.loss_kwargs={'num_intervals': 1} cannot be used with loss 'fastap': fastap_loss: "
      "num_intervals must be an int >= 2, got 1.",
    ),
  ],
  ids=[
    "float",
    "bool",
    "int",
    "tuple",
    "unknown",
    "no_equals",
    "swept",
    "no_file",
    "num_intervals",
  ],
)
def test_a_bad_config_prints_one_line_exits_2_and_writes_nothing(tmp_path, arguments, message):
  workdir = tmp_path / "run"
  if "--config" not in arguments:
    arguments = ["--config", TINY, *arguments]
  proc = _main(*arguments, "--workdir", str(workdir))
  assert proc.returncode == 2, proc.stderr
  lines = proc.stderr.splitlines()
  assert len(lines) == 1 and lines[0].startswith("experiments.job.main: error: "), proc.stderr
  assert message in lines[0]
  assert proc.stdout == ""
  assert not workdir.exists()


def test_every_run_of_a_sweep_is_checked_before_the_first_one_trains(tmp_path):
  config_file = tmp_path / "sweep.py"
  config_file.write_text(
    textwrap.dedent(f"""
      from experiments.job import main
      get_config = main.load_config_module({TINY!r}).get_config
      def get_sweep():
        return {{"good": {{"loss": "smoothap"}}, "bad": {{"loss_kwargs": {{"num_intervals": 1}}}}}}
  """)
  )
  workdir = tmp_path / "run"
  with pytest.raises(config_lib.ConfigError, match="run 'bad': config.loss_kwargs=.*num_intervals"):
    main_lib.run(str(config_file), str(workdir))
  assert not workdir.exists()  # Neither the baseline nor the good run started.


# ---------------------------------------------------------------------------------------------
# Ctrl-C and unreadable checkpoints.


class _Run:
  """A training subprocess whose stderr lines are read as they come."""

  def __init__(self, command: list[str]):
    self.proc = subprocess.Popen(
      command, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    self.lines: queue.Queue[str | None] = queue.Queue()
    self.stderr: list[str] = []
    threading.Thread(target=self._read, daemon=True).start()

  def _read(self):
    for line in self.proc.stderr:
      self.lines.put(line.rstrip("\n"))
    self.lines.put(None)

  def wait_for_line(self, pattern: str, timeout: float = 120) -> re.Match:
    deadline = time.monotonic() + timeout
    while True:
      line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
      assert line is not None, f"exited before {pattern!r}: {self.stderr}"
      self.stderr.append(line)
      if match := re.search(pattern, line):
        return match

  def interrupt(self, timeout: float = 60) -> int:
    self.proc.send_signal(signal.SIGINT)
    self.proc.wait(timeout=timeout)
    while (line := self.lines.get(timeout=10)) is not None:
      self.stderr.append(line)
    return self.proc.returncode

  def kill(self):
    if self.proc.poll() is None:
      self.proc.kill()
      self.proc.wait()


def _wait_for_step(workdir: pathlib.Path, run: _Run, step: int, timeout: float = 120) -> None:
  """Waits until the run has logged the loss of `step` (so training is under way)."""
  path = workdir / "metrics.jsonl"
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    assert run.proc.poll() is None, f"the run ended: {run.proc.stderr and run.proc.stderr.read()}"
    if path.exists():
      records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
      if any("loss" in r and r["step"] >= step for r in records):
        return
    time.sleep(0.2)
  raise TimeoutError(f"no loss of step {step} in {timeout} s")


def _steps(checkpoints: pathlib.Path) -> list[int]:
  return sorted(int(p.name) for p in checkpoints.iterdir() if p.name.isdigit())


@pytest.fixture(scope="session")
def interrupted(tmp_path_factory):
  """A workdir of a run stopped by Ctrl-C after its third step; `(workdir, its stderr lines)`."""
  workdir = tmp_path_factory.mktemp("interrupted") / "run"
  run = _Run(_command(workdir))
  try:
    _wait_for_step(workdir, run, 3)
    returncode = run.interrupt()
  finally:
    run.kill()
  assert returncode == 130, run.stderr
  return workdir, run.stderr


def test_ctrl_c_saves_a_checkpoint_and_exits_130_with_one_line(interrupted):
  workdir, stderr = interrupted
  assert len(stderr) == 1, stderr  # Nothing else: no traceback, no TensorFlow start-up lines.
  match = re.fullmatch(
    r"experiments\.job\.main: fastap interrupted: step (\d+) is saved in (.*); rerun the same "
    r"command to resume\.",
    stderr[0],
  )
  assert match, stderr
  step = int(match[1])
  assert step >= 3 and match[2] == str(workdir / "checkpoints")
  assert _steps(workdir / "checkpoints")[-1] == step  # The newest checkpoint is the last step.


def test_a_rerun_names_an_unreadable_newest_checkpoint_and_resumes_from_the_one_before(
  interrupted, tmp_path
):
  workdir = tmp_path / "run"
  shutil.copytree(interrupted[0], workdir)
  *_, previous, newest = _steps(workdir / "checkpoints")
  for blob in (workdir / "checkpoints" / str(newest) / "state").rglob("*"):
    if blob.is_file() and blob.parent.name == "d":  # The arrays' data files.
      blob.write_bytes(b"not an array")
  run = _Run(_command(workdir))
  try:
    resumed = run.wait_for_line(r"^fastap: resuming from step (\d+) ")
    returncode = run.interrupt()
  finally:
    run.kill()
  warnings = [line for line in run.stderr if "cannot be read" in line]
  assert len(warnings) == 1, run.stderr
  assert f"The checkpoint {workdir / 'checkpoints' / str(newest)} cannot be read" in warnings[0]
  assert int(resumed[1]) == previous
  assert (workdir / "unreadable_checkpoints" / str(newest) / "state").is_dir()
  assert not any("Traceback" in line for line in run.stderr), "\n".join(run.stderr)
  # Interrupted again: it saved where it got to, and says so in one line.
  assert returncode == 130
  assert re.fullmatch(
    r"experiments\.job\.main: fastap interrupted: step \d+ is saved in .*", run.stderr[-1]
  )
