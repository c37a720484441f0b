"""Regenerates experiments/RESULTS.md: the main job and every ablation, run by their commands.

Command (about 10 minutes in all on an idle 2-core CPU, 40 on one shared with other jobs):

    python -m experiments.results                          # everything, seeds 0 and 1
    python -m experiments.results --only fastap_bins roadmap_lambda --seeds 0

For each experiment of `EXPERIMENTS` and each seed, the script runs the experiment's own command
line as a subprocess (`python -m experiments.main --config experiments/configs/glyphs.py` or
`python -m experiments.ablate_<what>`, with `--workdir runs/results/<name>/seed<S> --set seed=S`),
from the repository root, and captures what the command prints on stdout (its table), or the end of
its error output when it fails. Each workdir is deleted first, so that every number is measured
anew; `--resume` keeps finished runs instead (after an interruption), and then a wall time no
longer measures a whole run.

After each experiment it writes `experiments/RESULTS.md` (`--output` elsewhere): one
section per experiment with its commands, the paper's claim, the table of each seed with its wall
time, the date, the machine and the package versions, and the reading of the tables. The claim and
the reading are prose kept here beside each experiment; the reading was written by a person on the
date it carries, from the tables of that day: the numbers are regenerated, the reading is not, so
that a reader sees whether it still holds. With `--only`, the sections of the other experiments are
kept as the existing document has them.

The runner (`run_command`, `run_experiment`) and the writer (`format_section`, `format_document`)
are separate functions, so that the writer can be tested on canned tables without training.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import inspect
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_WORKDIR = "runs/results"
DEFAULT_OUTPUT = "experiments/RESULTS.md"
PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax", "numpy", "tensorflow")


@dataclasses.dataclass(frozen=True)
class Experiment:
  """One section of RESULTS.md.

  Attributes:
    name: the section's key (`--only NAME`) and its workdir `runs/results/<name>/`.
    title: the section's heading.
    module: the experiment's command, `python -m <module>`.
    args: the command's arguments before `--workdir` and `--set seed=S`.
    claim: what the paper claims, which the experiment tests.
    reading: what the tables showed on the date `written` (prose, not regenerated).
    written: when the reading (and `history`) was written, `YYYY-MM-DD`.
    history: what was tried before the experiment took its present form (prose, optional).
    fails_with: for a command that stops with an error on its default data (and that is its
      result), a piece of the expected error message; empty when the command should succeed.
  """

  name: str
  title: str
  module: str
  args: tuple[str, ...]
  claim: str
  reading: str
  written: str
  history: str = ""
  fails_with: str = ""

  def as_expected(self, run: Run) -> bool:
    """Whether a run of this experiment ended as it should: with 0, or with the expected error."""
    if not self.fails_with:
      return run.returncode == 0
    return run.returncode != 0 and self.fails_with in run.output


@dataclasses.dataclass(frozen=True)
class Run:
  """One command of one experiment, as it ran.

  Attributes:
    seed: the seed given by `--set seed=S`.
    command: the command line, as a user types it (`python -m ...`).
    returncode: its exit status.
    output: what it printed on stdout, or, when it failed, the end of its error output.
    seconds: its wall time.
    load: the machine's one-minute load average when it started (other processes on the cores).
  """

  seed: int
  command: str
  returncode: int
  output: str
  seconds: float
  load: float | None = None


EXPERIMENTS = (
    Experiment(
        name="main",
        title="Main job: every loss family and three baselines on the glyphs",
        module="experiments.main",
        args=("--config", "experiments/configs/glyphs.py"),
        claim="""
            Each paper reports that training an embedding with its AP surrogate (FastAP, RaMBO's
            blackbox AP, mAP_Q soft binning, SmoothAP, SupAP, ROADMAP) improves retrieval (Recall@k,
            mAP) on classes unseen in training, from ImageNet-initialised backbones and 100 to
            11,318 training classes (CUB-200-2011, Cars196, Stanford Online Products, In-Shop),
            and that the AP surrogates do better than the pair-based losses they compare against
            (contrastive, triplet, multi-similarity).
            """,
        written="2026-11-23",
        reading="""
            Both seeds tell the same story. Every AP loss trains the network well above the two
            baselines of no learning: R@1 0.48 to 0.65 against the untrained network's 0.20-0.21 and
            the raw pixels' 0.42, MAP@R 0.17 to 0.29 against 0.04 and 0.095. SupAP and SmoothAP come
            first in both seeds (R@1 0.61 and 0.65, MAP@R 0.25 to 0.29), FastAP (40 bins) and ROADMAP
            next, blackbox AP and mAP_Q (soft binning) last; every loss moves by +0.035 to +0.06 R@1
            from seed 0 to seed 1, about the gap between neighbours, so only these groups are
            reliable. Of the baselines, multi-similarity trains as well as the weaker AP losses (R@1
            0.52 and 0.55, MAP@R 0.19 and 0.22), 0.09-0.10 R@1 and 0.07 MAP@R behind SupAP in both
            seeds; the contrastive loss (pytorch-metric-learning's cosine margins 1 and 0) stays close
            to the untrained network (R@1 0.24 and 0.30) and batch-hard triplet (margin 0.05) does
            not leave it (R@1 0.20 in both seeds, its embeddings collapsed: its mAP and tie-aware mAP
            differ, 0.076 and 0.078, where every other row has no ties). Batch hard from a random
            initialisation is known to collapse (Hermans et al. 2017 start from pretrained weights),
            and neither baseline was tuned here. So the papers' claim holds at this scale: the AP
            surrogates beat the pair-based losses at their library defaults, and the best of them
            beat multi-similarity clearly. ROADMAP's calibration term costs here (ROADMAP 0.05 R@1
            below SupAP alone in both seeds), which the lambda ablation examines on the digits.
            """,
        history="""
            Until 2026-11-23 the main job trained on scikit-learn's 8 x 8 digits, 0-4 for training
            and 5-9 for testing: five training classes, and an untrained network already at R@1
            0.980 (raw pixels 0.991), so nothing there separated one loss from another
            (experiments/configs/digits.py keeps that setting). The glyphs (jaxrank.data.load_glyphs)
            give 359 training and 359 unseen characters. Their difficulty was chosen so that one run
            takes about 15-25 s on 2 cores and the untrained network is far from the ceiling: at
            the load_glyphs defaults (1,165 test characters, 32 x 32, full-strength augmentation)
            raw pixels reached R@1 0.148 and SmoothAP only 0.031 after 300 steps; with 16 x 16
            images, half-strength augmentation and Gaussian noise, the untrained network fell to
            chance (R@1 0.007: the per-pixel LayerNorm of the small network amplifies the noise of
            the background to the scale of the strokes), blackbox AP and the triplet loss did not
            leave it, and SmoothAP reached R@1 0.440 against the raw pixels' 0.474. Without the
            noise the untrained network retrieves at R@1 0.20 and every AP loss trains well above
            the raw pixels. A learning rate of 1e-2 trained SmoothAP slightly better than 3e-3 but
            made FastAP with 10 bins collapse; super-class (hard) batches lowered SmoothAP's R@1
            from 0.440 to 0.378 (with noise).
            """,
    ),
    Experiment(
        name="fastap_bins",
        title="FastAP's number of histogram bins L (Cakir et al. 2019, Fig. 4b)",
        module="experiments.ablate_fastap_bins",
        args=(),
        claim="""
            Cakir et al. (2019, Sec. 5.3 "Distance Quantization", Fig. 4b: ResNet-18, batch 256, R@1
            on Stanford Online Products, In-Shop and VehicleID) find that more bins, a closer
            approximation of AP, do not train better: R@1 "consistently peaks around 10 bins",
            because coarse bins keep positives and negatives that are separated by a small margin
            in the same bin, where they still get a gradient (Fig. 4c).
            """,
        written="2026-11-23",
        reading="""
            Disagrees with the paper: on the unseen digits MAP@R grows with the number of bins up to
            L=40 and then stays level (L=80 within 0.001), in both seeds (+0.04 and +0.02 from L=5
            to L=40), and R@1 grows with it (0.965 to 0.977-0.978, and 0.975 to 0.984-0.987); there
            is no peak at 10, which is among the worst values in both seeds. Every L beats the
            untrained network on MAP@R; only L >= 20 (seed 1) or none (seed 0) also matches it on
            R@1, which is at its ceiling here (see the main job's reading). The level of everything
            moves with the seed (the untrained network alone gives MAP@R 0.483 or 0.521), so
            compare rows within a table, not across tables. A likely reason is where training
            starts: the untrained network's cosine similarities within a batch all lie in about
            [0.98, 1.00] (a spread of ~0.02 per query), i.e. squared distances below 0.04, while
            FastAP's bins split [0, 4] into L intervals of width 4 / L: at L=10 a bin is 0.4 wide,
            10 times the whole initial spread, so each list starts within one bin, its order
            inside the bin invisible to the loss; at L=40 (0.1 wide) the first steps already see
            part of the ranking, and beyond that the bins are finer than what matters. The paper
            starts from an ImageNet-initialised ResNet whose distances are spread out, where coarse
            bins lose little and their tolerance of small margins can help. Also, every L fits the
            five training digits well (seen MAP@R 0.95-0.98), so what is compared is how well a fit
            of five classes transfers to five others, which the paper's hundreds of training
            classes do not test. The main job (experiments/configs/digits.py) trains FastAP with
            40 bins for this reason.
            """,
    ),
    Experiment(
        name="batch_size",
        title="FastAP's batch size (Cakir et al. 2019, Fig. 4a)",
        module="experiments.ablate_batch_size",
        args=(),
        claim="""
            Cakir et al. (2019, Sec. 5.3 "Batch Size", Fig. 4a: FastAP, ResNet-18, R@1 on Stanford
            Online Products, In-Shop and VehicleID) find that R@1 improves monotonically with the
            batch size, because larger batches lower the variance of the gradient and make each
            in-batch retrieval problem harder (more non-neighbours to rank below the neighbours).
            """,
        written="2026-11-23",
        reading="""
            Agrees with the paper up to a point: MAP@R on the unseen digits rises steeply from
            B = 10 to B = 40 in both seeds (0.502 to 0.558 and 0.501 to 0.552) and then stays level
            within 0.01 up to B = 120, where the paper's curve keeps rising. R@1 moves by 0.01 at
            most, with no common direction (FastAP with its default 10 bins stays below the
            untrained network's R@1, see the FastAP bins ablation). The smallest batch is the clear
            loser: with K = 2 each list has a single positive, so AP is one reciprocal rank and the
            training digits are fitted only partly (seen MAP@R 0.83). The paper's mechanism beyond
            that is absent here: every digits batch already holds all five training classes
            whatever its size, so a larger batch adds images of the same classes, not harder
            non-neighbours; it fits the training digits better (seen MAP@R 0.83 to 0.98, also
            because 300 steps of a larger batch see more images: 3,000 at B = 10, 36,000 at
            B = 120) without transferring more. Varying P, the number of classes per batch, needs a
            data set with many training classes.
            """,
    ),
    Experiment(
        name="hard_sampling",
        title="Hard (category-based) versus random class sampling for FastAP (Cakir et al. 2019, "
              "Table 5)",
        module="experiments.ablate_hard_sampling",
        args=(),
        claim="""
            FastAP (Cakir et al. 2019, Sec. 4.2 and App. A-B.1) draws "hard" batches: two
            categories (super-classes, e.g. SOP's 'bicycle' and 'chair') per batch and classes from
            within them, so each query meets hard negatives of its own category. Table 5 (R@1):
            hard beats random on every data set and backbone, e.g. Online Products 72.3 -> 73.2
            (ResNet-18) and 74.2 -> 75.8 (ResNet-50), In-Shop 81.7 -> 89.0 and 84.1 -> 90.0.
            """,
        written="2026-11-22",
        reading="""
            Nothing about the claim: the digits have no super-classes, so the script stops with a
            ValueError before training anything, and no data set with super-classes is prepared on
            this machine (nothing is downloaded); SOP with a ResNet is far beyond a 2-core CPU. The
            script runs end to end on mock SOP data (tests/test_experiments.py: random smooth
            images, 24 classes in SOP's 12 categories), which checks the mechanics only; its
            numbers mean nothing. Expect the paper's gap only where categories group visually
            similar classes and a batch holds a small fraction of the classes, as on SOP (11,318
            classes in 12 categories) or In-Shop; the script's docstring gives the command for a
            prepared SOP.
            """,
        fails_with="which digits does not have",
    ),
    Experiment(
        name="blackbox_margin_memory",
        title="RaMBO's score margin and batch memory (Rolinek et al. 2020, Table 7)",
        module="experiments.ablate_blackbox_margin_memory",
        args=(),
        claim="""
            RaMBO's AP loss (Rolinek et al. 2020) shifts positive scores down and negative scores up
            by a margin alpha / 2 (Sec. 4.4) and appends the embeddings of the last tau batches to
            every list (score memory, Sec. 4.3). Their Table 7 (Sec. 5.4, R@1) removes each: full
            RaMBO 64.0 / 88.1 / 78.6 on CUB-200 / In-shop / Online Products, without memory 62.5 /
            87.0 / 72.4, without margin 63.2 on CUB and diverged ("x") on the other two. Their
            margins are 0.02 to 0.05 (Table 9) and the memory 3 batches (App. A).
            """,
        written="2026-11-23",
        reading="""
            The paper's small margin helps, the memory does not, and a large margin stops training.
            Without memory, the margin 0.02 of Table 9 raises MAP@R on the unseen digits over no
            margin in both seeds (+0.013 and +0.019), while R@1 falls by 0.003 to 0.008 (a few
            queries, at the ceiling discussed in the main job's reading): agreement on MAP@R. The
            memory of two batches lowers MAP@R in every pairing (-0.004 and -0.009 without margin,
            -0.060 and -0.039 with 0.02) and slows the fit of the training digits (seen MAP@R
            0.84-0.92 instead of 0.94-0.96): disagreement. The margin 0.1 fails in every run: its
            training loss stays at 0.892, its worst value, for all 300 steps, and the network ends
            where it started (seen MAP@R 0.50-0.56). The starting point explains both failures: the
            untrained network's cosine similarities within a list span only about 0.02 (all in
            [0.98, 1.00]), so with a margin of 0.1 every shifted positive starts below every
            shifted negative, and the blackbox gradient (an interpolation with lam = 0.2, not a
            derivative: it is non-zero only where the perturbation `lam * gradient` of the scores
            changes the ranking) cannot move any of them across; with 0.02 the shifted lists start
            just at that edge, and the memory's embeddings, which carry no gradient, add more such
            lists (the loss of margin 0.02 with memory stays near 0.89 for the first 30 to 90
            steps, and is below 0.78 by step 30 without). The paper starts from an
            ImageNet-initialised network whose similarities spread far wider than its margin, where
            the margin does its intended job; here a margin would have to be scaled to the initial
            spread (or lam raised). The memory's purpose, lists with more classes than a batch
            holds, is void when every digits batch already holds all five training classes.
            """,
    ),
    Experiment(
        name="roadmap_lambda",
        title="ROADMAP's weight lambda between SupAP and calibration (Ramzi et al. 2021, Fig. 4a)",
        module="experiments.ablate_roadmap_lambda",
        args=(),
        claim="""
            ROADMAP (Ramzi et al. 2021, eq. 2) trains `(1 - lambda) L_SupAP + lambda L_calibr`.
            Their Fig. 4a (iNaturalist, batch 224, Sec. 4.3) shows that the combination "is always
            better than using only one of the two losses" (lambda = 0 is SupAP alone, lambda = 1
            calibration alone), with results stable over lambda in [0.2, 0.8] and about +1.5 points
            over the ends.
            """,
        written="2026-11-23",
        reading="""
            Disagrees with the paper: MAP@R on the unseen digits falls as lambda grows, in both
            seeds (0.583 to 0.538 and 0.563 to 0.519), so SupAP alone (lambda = 0) is best or tied
            with lambda = 0.25, and calibration alone is worst (in seed 1 no better than the
            untrained network); R@1 moves by 0.005 at most. The trend (about -0.01 per 0.25 of
            lambda up to 0.75, then a larger drop) is the same in both seeds and larger than the
            seed-to-seed scatter of paired differences elsewhere (~0.01), so it is probably real at
            this scale. Two reasons it may not carry over: calibration exists to make AP decompose
            over batches, i.e. to help when a batch sees a small part of the data set, whereas
            every digits batch holds all five training classes; and eq. 2 with a fixed learning
            rate also scales SupAP's gradient by (1 - lambda), so larger lambda trains the ranking
            term more slowly (the authors' configs add the two losses with weight 1 each, the
            `supap+calibration` loss of experiments/losses.py, which this sweep does not vary).
            """,
    ),
)


# ---------------------------------------------------------------------------------------------
# The runner.


def command(experiment: Experiment, seed: int, workdir: str) -> list[str]:
  """The experiment's command line for one seed, as a user types it (`python -m ...`)."""
  return ["python", "-m", experiment.module, *experiment.args,
          "--workdir", os.path.join(workdir, experiment.name, f"seed{seed}"),
          "--set", f"seed={seed}"]


def error_tail(stderr: str, max_lines: int = 12) -> str:
  """The end of a failed command's error output: its exception, without the traceback's frames."""
  lines = stderr.rstrip().splitlines()
  starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call")]
  if starts:
    frames = lines[starts[-1] + 1:]
    # The frames are indented; the exception and its message follow the last indented line.
    last = max((i for i, line in enumerate(frames) if line.startswith(" ")), default=-1)
    return "\n".join([lines[starts[-1]], "  ...", *frames[last + 1:]])
  return "\n".join(lines[-max_lines:])


def run_command(argv: Sequence[str], *, seed: int, shown: str | None = None) -> Run:
  """Runs a command from the repository root, capturing its stdout (or its error) and wall time.

  Args:
    argv: the command; a leading `python` runs this interpreter (`sys.executable`).
    seed: the seed the command was given, recorded in the `Run`.
    shown: the command line to record (default: `argv` joined as a shell would quote it).

  Returns:
    The `Run`: `output` is the stripped stdout when the command exits with 0, else the end of
    its stderr (see `error_tail`).
  """
  argv = list(argv)
  shown = shlex.join(argv) if shown is None else shown
  if argv and argv[0] == "python":
    argv[0] = sys.executable
  env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
  load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
  start = time.perf_counter()
  done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
  seconds = time.perf_counter() - start
  output = done.stdout.strip() if done.returncode == 0 else error_tail(done.stderr)
  return Run(seed=seed, command=shown, returncode=done.returncode, output=output,
             seconds=seconds, load=load)


def run_experiment(
    experiment: Experiment, seeds: Sequence[int], workdir: str, *, resume: bool = False
) -> list[Run]:
  """Runs an experiment's command once per seed, each in `workdir/<name>/seed<S>`.

  Each seed's workdir is deleted first unless `resume` (then finished runs are reused).
  """
  runs = []
  for seed in seeds:
    argv = command(experiment, seed, workdir)
    seed_dir = os.path.join(ROOT, workdir, experiment.name, f"seed{seed}")
    if not resume and os.path.isdir(seed_dir):
      shutil.rmtree(seed_dir)
    logging.info("%s, seed %d: %s", experiment.name, seed, shlex.join(argv))
    run = run_command(argv, seed=seed)
    logging.info("%s, seed %d: exit status %d, %.0f s", experiment.name, seed, run.returncode,
                 run.seconds)
    runs.append(run)
  return runs


def machine() -> str:
  """The CPU model and the number of cores: `AMD EPYC, 2 cores`."""
  model = None
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          model = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  import platform  # pylint: disable=g-import-not-at-top

  return f"{model or platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def versions(packages: Sequence[str] = PACKAGES) -> dict[str, str]:
  """Python's and each package's installed version (`not installed` when absent), without importing.

  Packages are named as they are imported (`tensorflow`, whichever distribution provides it:
  `tensorflow`, `tensorflow-cpu`, ...).
  """
  found = {"python": sys.version.split()[0]}
  distributions = importlib.metadata.packages_distributions()
  for name in packages:
    try:
      found[name] = importlib.metadata.version(distributions.get(name, [name])[0])
    except importlib.metadata.PackageNotFoundError:
      found[name] = "not installed"
  return found


# ---------------------------------------------------------------------------------------------
# The writer.

BEGIN = "<!-- results: begin {} -->"
END = "<!-- results: end {} -->"

HEADER = """\
# Results

Regenerated by `python -m experiments.results` (`--only NAME ...` for some sections, `--seeds`
for other seeds); do not edit by hand. The numbers come from the commands shown, run on the date
and machine each section names; the paper's claims and the readings are kept beside each experiment
in `experiments/results.py`. A reading was written by a person on the date it carries, from the
tables of that day: if the tables above it no longer say what it says, the reading is out of date.

The tables: Recall@k and MAP@R (Musgrave et al. 2020) on the test split, classes never seen in
training (digits 5-9 for the digits); mAP and mAP_T (tie-aware) where the job prints them; seen
MAP@R on the training images (digits 0-4); `time` is each run's wall time. The `untrained` row is
the same network evaluated before any step. Training on CPU is deterministic: the same command on
the same versions gives the same numbers; only the wall times depend on the machine and its load.
"""


def format_section(
    experiment: Experiment, runs: Sequence[Run], *, date: str, machine_name: str,
    package_versions: Mapping[str, str],
) -> str:
  """The Markdown section of one experiment, between its begin and end markers.

  Args:
    experiment: the experiment (title, claim, reading, history).
    runs: its runs, one per seed, in order.
    date: when the runs were made, `YYYY-MM-DD`.
    machine_name: the machine, as `machine()` gives it.
    package_versions: name -> version, as `versions()` gives them.

  Returns:
    The section's text, ending with a newline.
  """
  loads = [f"{r.load:.1f}" for r in runs if r.load is not None]
  load = f"; load average {', '.join(loads)} as the seeds started" if loads else ""
  packages = ", ".join(f"{name} {version}" for name, version in package_versions.items())
  commands = "\n".join(f"    {r.command}" for r in runs)
  parts = [
      BEGIN.format(experiment.name),
      f"## {experiment.title}",
      f"Commands (`python -m experiments.results --only {experiment.name}` reruns them):\n\n"
      f"{commands}",
      f"**The paper's claim.** {inspect.cleandoc(experiment.claim)}",
      f"Run on {date}, {machine_name}{load}; {packages}.",
  ]
  for r in runs:
    if r.returncode == 0:
      status = ""
    else:
      expected = "as expected" if experiment.as_expected(r) else "a failure"
      status = f", exit status {r.returncode}, {expected}: the end of its error output"
    parts.append(f"### Seed {r.seed} ({r.seconds:.0f} s{status})\n\n```\n{r.output}\n```")
  parts.append(f"### Reading (written {experiment.written})\n\n"
               f"{inspect.cleandoc(experiment.reading)}")
  if experiment.history:
    parts.append(f"### What was tried before (written {experiment.written})\n\n"
                 f"{inspect.cleandoc(experiment.history)}")
  parts.append(END.format(experiment.name))
  return "\n\n".join(parts) + "\n"


def read_sections(text: str) -> dict[str, str]:
  """The sections of an existing document, by experiment name (begin and end markers included)."""
  pattern = re.escape(BEGIN).replace(r"\{\}", r"(?P<name>[\w.-]+)") + r".*?" + re.escape(
      END).replace(r"\{\}", r"(?P=name)")
  return {m.group("name"): m.group(0) + "\n" for m in re.finditer(pattern, text, re.DOTALL)}


def format_document(
    sections: Mapping[str, str], experiments: Sequence[Experiment] = EXPERIMENTS
) -> str:
  """RESULTS.md: the header, a list of contents, and each experiment's section in order.

  Args:
    sections: experiment name -> its section (`format_section`, or kept from the last document);
      an experiment without one gets a line saying how to generate it.
    experiments: the experiments, in the document's order.
  """
  contents = "\n".join(f"- {e.title} (`{e.name}`)" for e in experiments)
  body = []
  for e in experiments:
    if e.name in sections:
      body.append(sections[e.name].rstrip("\n") + "\n")
    else:
      body.append(f"{BEGIN.format(e.name)}\n\n## {e.title}\n\nNot generated yet: "
                  f"`python -m experiments.results --only {e.name}`.\n\n{END.format(e.name)}\n")
  return "\n".join([HEADER, contents + "\n", *body])


def write(path: str, text: str) -> None:
  """Writes `text` to `path` through a temporary file, so that a reader never sees half of it."""
  tmp = f"{path}.tmp"
  with open(tmp, "w") as f:
    f.write(text)
  os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
  names = [e.name for e in EXPERIMENTS]
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--only", nargs="+", choices=names, metavar="NAME",
                      help=f"run only these experiments (of {', '.join(names)}); the document "
                           "keeps the others' sections")
  parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1],
                      help="the seeds each experiment runs with (default: %(default)s)")
  parser.add_argument("--workdir", default=DEFAULT_WORKDIR,
                      help="the runs go in WORKDIR/<name>/seed<S> (default: %(default)s)")
  parser.add_argument("--output", default=DEFAULT_OUTPUT,
                      help="the document, relative to the repository root (default: %(default)s)")
  parser.add_argument("--resume", action="store_true",
                      help="reuse finished runs in the workdirs instead of deleting them first")
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)

  output = os.path.join(ROOT, args.output)
  sections = {}
  if os.path.isfile(output):
    with open(output) as f:
      sections = read_sections(f.read())
  machine_name, package_versions = machine(), versions()
  failed = []
  for experiment in EXPERIMENTS:
    if args.only and experiment.name not in args.only:
      continue
    runs = run_experiment(experiment, args.seeds, args.workdir, resume=args.resume)
    failed += [(experiment.name, r.seed) for r in runs if not experiment.as_expected(r)]
    sections[experiment.name] = format_section(
        experiment, runs, date=datetime.date.today().isoformat(), machine_name=machine_name,
        package_versions=package_versions)
    write(output, format_document(sections))
    logging.info("wrote %s", output)
  if failed:
    logging.error("runs that did not end as expected (name, seed): %s; their sections say how "
                  "they ended.", failed)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
