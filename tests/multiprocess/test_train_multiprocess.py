"""The training job as 2 processes x 2 devices (issue 16): the same run as one process on the same
global batches, and a job whose processes are all killed mid-run resumes to the same end.

The main test is a reference and two jobs, in order:

1. this (pytest's) process, with its one device, trains the tiny digits config (`shard=True`)
   without interruption: the same global batches, on a mesh of one device;
2. two processes with 2 devices each train it in another workdir; after step 3, once the
   checkpoint of step 2 is on disk, process 0 kills itself with SIGKILL and the launcher kills
   process 1 at once (neither saves anything more, nor cleans up);
3. the same command, as `python -m experiments.job.main --coordinator_address ... --num_processes 2
   --process_id I`, resumes the killed run from step 2 and ends.

The run of 3 (steps 1-2 trained by two processes, 3-4 by two processes after a restore) must end
with the final metrics of 1, to 1e-5, and only process 0 may write metrics and print the table.
Jobs 2 and 3 share a persistent compilation cache, so that 3 compiles less. The other tests, in
this process: each process's slice of the batches (with its augmentation seeds), the launch flags,
and the command alone where no cluster is detected.
"""

import json
import os
import pathlib
import subprocess
import sys

import launcher
import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from experiments.job import config as config_lib
from experiments.job import datasets
from experiments.job import distributed
from experiments.job import input_pipeline
from experiments.job import main as main_lib
from experiments.job import samplers
from experiments.job import train

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = str(ROOT / "experiments" / "job" / "configs" / "tiny.py")
# 20 images a batch: 5 on each of the 4 devices, 10 in each process.
OVERRIDES = ["shard=True", "num_steps=4", "eval_every=4", "checkpoint_every=2"]
KILL_AFTER_STEP = 3

# A child that trains with train_and_evaluate; with JAXRANK_TEST_KILL set, process 0 kills itself
# after the step KILL_AFTER_STEP, once the checkpoint before it is complete on disk.
_TRAIN = """
import launcher
launcher.initialize()
import json, os, signal, sys, time
from experiments.job import main, step, train

path, workdir, overrides, kill_after = sys.argv[1:3] + [json.loads(sys.argv[3]), int(sys.argv[4])]
config, _ = main.prepare(path, overrides)
if kill_after:
  make_step = step.make_train_step

  def make_killing_step(*args):
    step_fn = make_step(*args)
    calls = []

    def killing_step(*inputs):
      out = step_fn(*inputs)
      calls.append(1)
      if len(calls) == kill_after and os.environ["JAXRANK_TEST_PROCESS_ID"] == "0":
        saved = os.path.join(workdir, "checkpoints", str(kill_after - 1))
        deadline = time.monotonic() + 60
        while not os.path.isdir(saved) and time.monotonic() < deadline:
          time.sleep(0.05)
        print("killing process 0 after step", kill_after, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
      return out

    return killing_step

  step.make_train_step = make_killing_step
metrics = train.train_and_evaluate(config, workdir, name="mp")
print("RESULT", json.dumps(metrics), flush=True)
"""

# experiments.job.main, with the job's coordinates (known only in the child) as its flags.
_MAIN = """
import os, runpy, sys
sys.argv = ["experiments.job.main", *sys.argv[1:],
            "--coordinator_address", os.environ["JAXRANK_TEST_COORDINATOR"],
            "--num_processes", os.environ["JAXRANK_TEST_NUM_PROCESSES"],
            "--process_id", os.environ["JAXRANK_TEST_PROCESS_ID"]]
runpy.run_module("experiments.job.main", run_name="__main__")
"""


def _records(workdir: pathlib.Path) -> list[dict]:
  with open(workdir / "metrics.jsonl") as f:
    return [json.loads(line) for line in f]


def _final(workdir: pathlib.Path) -> dict:
  evaluations = [r for r in _records(workdir) if "map@r" in r]
  return evaluations[-1]


def test_two_processes_train_as_one_and_resume_after_being_killed(tmp_path):
  config, _ = main_lib.prepare(TINY, OVERRIDES)
  reference = train.train_and_evaluate(config, str(tmp_path / "one"))
  assert reference["step"] == 4

  cache = {
    "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "compilation_cache"),
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
  }
  killed = launcher.run(
    ["-c", _TRAIN, TINY, str(tmp_path / "two"), json.dumps(OVERRIDES), str(KILL_AFTER_STEP)],
    timeout=150,
    env=cache,
    expect_failure=True,
  )
  assert killed[0].returncode == -9, killed[0].output  # SIGKILL, as planned.
  assert "killing process 0 after step 3" in killed[0].output
  assert killed[1].returncode != 0, killed[1].output  # Killed (or failed) before the end.
  saved = os.listdir(tmp_path / "two" / "checkpoints")
  assert "2" in saved and "4" not in saved, saved

  args = ["--config", TINY, "--workdir", str(tmp_path / "two")]
  for item in OVERRIDES:
    args += ["--set", item]
  resumed = launcher.run(["-c", _MAIN, *args], timeout=150, env=cache)
  first, second = resumed[0].output, resumed[1].output
  assert "resuming from step 2" in first, first
  assert "MAP@R" in first and "MAP@R" not in second, second  # Only process 0 prints the table.
  assert "resuming" not in second, second

  final = _final(tmp_path / "two")
  assert final["step"] == 4
  for key, value in reference.items():
    assert final[key] == pytest.approx(value, abs=1e-5), key

  # Only process 0 wrote metrics.jsonl: the records of the uninterrupted run, each once, step by
  # step (the killed run's records after step 2 dropped on resuming).
  steps = lambda records: [(r["step"], "map@r" in r) for r in records]
  assert steps(_records(tmp_path / "two")) == steps(_records(tmp_path / "one"))
  assert (tmp_path / "two" / "curves.png").is_file()
  # Process 0 alone wrote the TensorBoard summaries: one event file, written anew on resuming
  # from metrics.jsonl's records, each step of the loss once.
  [events] = (tmp_path / "two").glob("events.out.tfevents.*")
  accumulator = event_accumulator.EventAccumulator(str(events), purge_orphaned_data=False)
  accumulator.Reload()
  logged = [r["step"] for r in _records(tmp_path / "two") if "loss" in r]
  assert [e.step for e in accumulator.Tensors("train/loss")] == logged == [1, 2, 3, 4]


def test_each_process_reads_its_slice_of_the_global_batch_with_the_same_augmentation(
  monkeypatch,
):
  # The augmentation's per-example seed stands in for the image, so that equal images mean
  # equal seeds; the slices of two processes must make up the one-process batch, across an epoch.
  monkeypatch.setattr(datasets, "preprocess_fn", lambda config, train: lambda _, seed: seed)
  config, _ = main_lib.prepare(TINY, OVERRIDES)
  data, _ = datasets.load_data(config)
  sampler = samplers.make_sampler(config, data)
  start = (0, sampler(epoch=0).shape[0] - 2)
  whole = input_pipeline.TrainBatches(config, data, sampler, start)
  shares = [
    input_pipeline.TrainBatches(config, data, sampler, start, share)
    for share in [(0, 12), (12, 20)]
  ]
  for _ in range(4):
    expected = next(whole)
    parts = [next(s) for s in shares]
    for key in ("image", "label", "index"):
      np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), expected[key])
    assert all(s.position == whole.position for s in shares)
  assert whole.position == (1, 2)


def test_without_a_cluster_or_flags_the_command_runs_alone_at_once():
  # JAX's cluster detection finds nothing here (the environment of SLURM and Open MPI removed) and
  # says so without connecting anywhere.
  env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "JAX_COORD"))}
  script = (
    "from experiments.job import distributed; distributed.initialize_distributed(); "
    "import jax; "
    "print(jax.process_count(), jax.config.jax_cpu_collectives_implementation)"
  )
  done = subprocess.run(
    [sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
  )
  assert done.returncode == 0, done.stderr
  assert done.stdout.split() == ["1", "gloo"]


@pytest.mark.parametrize(
  "flags, message",
  [
    (("localhost:1234", 2, None), "--process_id missing"),
    (("localhost", 2, 0), "must be HOST:PORT"),
    (("localhost:1234", 2, 2), "between 0 and the number of processes minus 1"),
  ],
)
def test_launch_flags_are_checked_before_joining(flags, message):
  with pytest.raises(config_lib.ConfigError, match=message):
    distributed.initialize_distributed(*flags)


def test_a_process_that_has_used_jax_stays_alone_or_refuses_the_flags():
  # JAX can join a job only before its first computation: afterwards the detection is skipped (one
  # process, as when `main()` is called from Python), and explicit flags are a ConfigError.
  script = (
    "import jax.numpy as jnp; jnp.ones(2).block_until_ready()\n"
    "from experiments.job import config, distributed\n"
    "distributed.initialize_distributed()\n"
    "try:\n"
    "  distributed.initialize_distributed('localhost:1234', 2, 0)\n"
    "except config.ConfigError as e:\n"
    "  print('refused:', e)\n"
    "import jax; print(jax.process_count())\n"
  )
  done = subprocess.run(
    [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
  )
  assert done.returncode == 0, done.stderr
  assert "refused: --coordinator_address: this process has already run JAX" in done.stdout
  assert done.stdout.split()[-1] == "1"
