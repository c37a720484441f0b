"""Regenerates experiments/RESULTS.md: the main job and every ablation, run by their commands.

Command (about 45 minutes in all on 2 CPU cores shared with other jobs):

    python -m experiments.results                          # everything, seeds 0 and 1
    python -m experiments.results --only fastap_bins roadmap_lambda --seeds 0

For each experiment of `EXPERIMENTS` and each seed, the script runs the experiment's own command
line as a subprocess (`python -m experiments.job.main --config experiments/job/configs/glyphs.py` or
`python -m experiments.ablations.<what>`, with `--workdir runs/results/<name>/seed<S> --set
seed=S`), from the repository root, and captures what the command prints on stdout (its table), or
the end of its error output when it fails. Each workdir is deleted first, so that every number is
measured anew; `--resume` keeps finished runs instead (after an interruption), and then a wall time
no longer measures a whole run.

After each experiment it writes `experiments/RESULTS.md` (`--output` elsewhere): one
section per experiment with its commands, the paper's claim, the table of each seed with its wall
time, the date, the machine and the package versions, and the reading of the tables. The claim and
the reading are prose kept here beside each experiment; the reading was written by a person on the
date it carries, from the tables of that day: the numbers are regenerated, the reading is not, so
that a reader sees whether it still holds. With `--only`, the sections of the other experiments are
kept as the existing document has them.

An experiment whose table a guide page shows (`docs_columns`: the hashing and ablations pages)
also gets its data file, docs/_generated/results_<name>.json (experiments/docs_data.py), written
from its section: each run's row with the seeds' values side by side, the date and machine of
the runs and the command that reruns them. `--tables-only` writes these files from the document as
it is, running nothing:

    python -m experiments.results --tables-only

The runner (`run_command`, `run_experiment`) and the writer (`format_section`, `format_document`,
`write_docs_table`) are separate functions, so that the writer can be tested on canned tables
without training.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import inspect
import logging
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from experiments import docs_data

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
    docs_columns: the columns of its printed table that a guide page shows, each cell the seeds'
      values (`docs/_generated/results_<name>.json`, `write_docs_table`); empty: no data file.
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
  docs_columns: tuple[str, ...] = ()

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
    module="experiments.job.main",
    args=("--config", "experiments/job/configs/glyphs.py"),
    claim="""
            Each paper reports that training an embedding with its AP surrogate (FastAP, RaMBO's
            blackbox AP, mAP_Q soft binning, SmoothAP, SupAP, ROADMAP) improves retrieval (Recall@k,
            mAP) on classes unseen in training, from ImageNet-initialised backbones and 100 to
            11,318 training classes (CUB-200-2011, Cars196, Stanford Online Products, In-Shop),
            and that the AP surrogates do better than the pair-based losses they compare against
            (contrastive, triplet, multi-similarity).
            """,
    written="2026-11-24",
    reading="""
            Both seeds tell the same story. Every AP loss trains the network well above the two
            baselines of no learning: R@1 0.48 to 0.65 against the untrained network's 0.20-0.21 and
            the raw pixels' 0.42, MAP@R 0.17 to 0.29 against 0.04 and 0.095. SupAP and SmoothAP come
            first in both seeds (R@1 0.61 and 0.65, MAP@R 0.25 to 0.29), FastAP (40 bins) and
            ROADMAP next, blackbox AP and mAP_Q (soft binning) last; every loss moves by +0.03 to
            +0.06 R@1 from seed 0 to seed 1, about the gap between neighbours, so only these groups
            are reliable. Of the baselines, multi-similarity trains as well as the weaker AP losses
            (R@1 0.52 and 0.54, MAP@R 0.19 and 0.21), 0.09-0.11 R@1 and 0.08 MAP@R behind SupAP in
            both seeds; the contrastive loss (pytorch-metric-learning's cosine margins 1 and 0)
            stays close to the untrained network (R@1 0.24 and 0.29) and batch-hard triplet (margin
            0.05) does not leave it (R@1 0.20-0.21 in both seeds, its embeddings collapsed: its mAP
            and tie-aware mAP differ, 0.075 and 0.078, where every other row has no ties). Batch
            hard from a random initialisation is known to collapse (Hermans et al. 2017 start from
            pretrained weights), and neither baseline was tuned here. So the papers' claim holds at
            this scale: the AP surrogates beat the pair-based losses at their library defaults, and
            the best of them beat multi-similarity clearly. ROADMAP's calibration term costs here
            (ROADMAP 0.05 R@1 below SupAP alone in both seeds), which the lambda ablation examines.
            """,
    history="""
            Until 2026-11-23 the main job trained on scikit-learn's 8 x 8 digits, 0-4 for training
            and 5-9 for testing: five training classes, and an untrained network already at R@1
            0.980 (raw pixels 0.991), so nothing there separated one loss from another
            (experiments/job/configs/digits.py keeps that setting). The glyphs
            (jaxrank.data.load_glyphs) give 359 training and 359 unseen characters. Their difficulty
            was chosen so that one run takes about 15-25 s on 2 cores and the untrained network is
            far from the ceiling: at the load_glyphs defaults (1,165 test characters, 32 x 32,
            full-strength augmentation) raw pixels reached R@1 0.148 and SmoothAP only 0.031 after
            300 steps; with 16 x 16 images, half-strength augmentation and Gaussian noise, the
            untrained network fell to chance (R@1 0.007: the per-pixel LayerNorm of the small
            network amplifies the noise of the background to the scale of the strokes), blackbox AP
            and the triplet loss did not leave it, and SmoothAP reached R@1 0.440 against the raw
            pixels' 0.474. Without the noise the untrained network retrieves at R@1 0.20 and every
            AP loss trains well above the raw pixels. A learning rate of 1e-2 trained SmoothAP
            slightly better than 3e-3 but made FastAP with 10 bins collapse; super-class (hard)
            batches lowered SmoothAP's R@1 from 0.440 to 0.378 (with noise).
            """,
  ),
  Experiment(
    name="fastap_bins",
    title="FastAP's number of histogram bins L (Cakir et al. 2019, Fig. 4b)",
    module="experiments.ablations.fastap_bins",
    args=(),
    docs_columns=("R@1", "MAP@R"),
    claim="""
            Cakir et al. (2019, Sec. 5.3 "Distance Quantization", Fig. 4b: ResNet-18, batch 256, R@1
            on Stanford Online Products, In-Shop and VehicleID) find that more bins, a closer
            approximation of AP, do not train better: R@1 "consistently peaks around 10 bins",
            because coarse bins keep positives and negatives that are separated by a small margin
            in the same bin, where they still get a gradient (Fig. 4c).
            """,
    written="2026-11-24",
    reading="""
            Does not hold on the glyphs: R@1 and MAP@R rise with the number of bins in both seeds,
            with no peak at 10. For L = 5, 10, 20, 40, 80, R@1 is 0.185, 0.376, 0.479, 0.551, 0.580
            in seed 0 and 0.324, 0.460, 0.547, 0.587, 0.606 in seed 1 (MAP@R 0.045 to 0.232 and
            0.096 to 0.261). The paper's 10 bins are 0.13-0.20 R@1 below 40 and 80 bins in both
            seeds, and in seed 0 below the raw pixels (R@1 0.421); 5 bins hardly train in seed 0
            (R@1 0.185, under the untrained network's 0.203). From 40 to 80 bins the gain is small
            (+0.03 and +0.02 R@1): the curve levels off near 40, the main job's value. The seed
            moves a row by up to 0.14 R@1 at 5 bins and 0.04 at 40, but the rows come in the same
            order in both seeds. A likely reason is where training starts: in the untrained network
            (both seeds' initialisations, the first five batches of 64 glyphs) the squared distances
            from a query to the rest of its batch span only about 0.03 (all of them below 0.07,
            cosine similarities 0.96 to 1.00), while FastAP's bins split [0, 4] into L intervals 4 /
            L wide: at 10 bins a bin is 0.4 wide, more than ten times that spread, so each list
            starts within one or two bins and the loss sees almost nothing of its order; at 80 bins
            (0.05) the first steps already see it. The paper starts from ImageNet-initialised
            ResNets, whose distances are spread out, where coarse bins lose little and their
            tolerance of small margins can help; a network trained from scratch for 300 steps stays
            where fine bins matter.
            """,
    history="""
            Until 2026-11-24 this ablation trained on the digits (five training classes, an
            untrained network already at R@1 0.98): MAP@R rose with the bins up to 40 and stayed
            level at 80 in both seeds, 10 among the worst values, the same direction as on the
            glyphs with differences of 0.01-0.04.
            """,
  ),
  Experiment(
    name="batch_size",
    title="FastAP's batch size (Cakir et al. 2019, Fig. 4a)",
    module="experiments.ablations.batch_size",
    args=("--set", 'loss_kwargs={"num_intervals": 40}'),  # FastAP as the main job trains it.
    docs_columns=("R@1", "MAP@R"),
    claim="""
            Cakir et al. (2019, Sec. 5.3 "Batch Size", Fig. 4a: FastAP, ResNet-18, R@1 on Stanford
            Online Products, In-Shop and VehicleID) find that R@1 improves monotonically with the
            batch size, because larger batches lower the variance of the gradient and make each
            in-batch retrieval problem harder (more non-neighbours to rank below the neighbours).
            """,
    written="2026-11-24",
    reading="""
            Holds as this sweep runs it, at a fixed 300 steps: R@1 and MAP@R rise with the batch
            size in both seeds, from B = 16 to 256 R@1 0.280, 0.435, 0.551, 0.621, 0.657 in seed 0
            and 0.364, 0.443, 0.587, 0.650, 0.695 in seed 1 (MAP@R 0.076 to 0.306 and 0.106 to
            0.336), each doubling gaining less than the one before from B = 32 on (+0.04 and +0.05
            R@1 from 128 to 256). Every batch size trains above the untrained network (R@1
            0.20-0.21), and from B = 32 above the raw pixels (0.421). But at a fixed number of steps
            a larger batch also sees proportionally more images (4,800 at B = 16, 76,800 at B = 256,
            13 epochs) and does as much more work, so this table alone does not say that the batch
            size is what helps; the next section holds the images fixed, and there it is not. FastAP
            trains with 40 bins here, as in the main job: at the paper's 10 bins it ends below the
            raw pixels in seed 0 (see the bins ablation).
            """,
    history="""
            Until 2026-11-24 this ablation trained on the digits, whose train split has five
            classes: it varied the images per class K at P = 5 (B = 10 to 120); MAP@R rose from B =
            10 to 40 and then stayed level, and every batch already held every training class.
            """,
  ),
  Experiment(
    name="batch_size_images",
    title="FastAP's batch size at the same number of images (Cakir et al. 2019, Fig. 4a)",
    module="experiments.ablations.batch_size",
    args=(
      "--set",
      'loss_kwargs={"num_intervals": 40}',
      "--values",
      "4,4,1200",
      "8,4,600",
      "16,4,300",
      "32,4,150",
      "64,4,75",
    ),
    docs_columns=("R@1", "MAP@R"),
    claim="""
            The batch-size claim of the previous section (R@1 improves monotonically with the
            batch size), as the paper measures it: its networks train a number of epochs
            (Cakir et al. 2019, App. B: "convergence happens within 50 epochs", Fig. 7), so a
            larger batch takes fewer steps over the same images.
            """,
    written="2026-11-24",
    reading="""
            Does not hold at a fixed number of images (19,200, 3.3 epochs of the training glyphs):
            R@1 peaks in the middle and falls on both sides, at B = 32 in seed 0 and B = 64 in seed
            1: for B = 16 to 256 (1,200 to 75 steps) it is 0.492, 0.564, 0.551, 0.518, 0.371 in seed
            0 and 0.529, 0.555, 0.587, 0.540, 0.456 in seed 1 (MAP@R 0.177 to 0.111 through 0.229 at
            B = 32 in seed 0, 0.200 to 0.155 through 0.250 at B = 64 in seed 1). B = 256 trains 75
            steps, 20 of them warm-up, and ends below the raw pixels (R@1 0.421) in seed 0. The
            B = 64 row is the previous
            section's run at the same 300 steps and gives the same numbers. So on the glyphs the
            gain of the previous section comes with the extra images and steps, not with the batch
            size alone; at this budget a small batch's extra steps matter more than its noisier
            gradient. Whether the claim holds at convergence, as the paper trains, cannot be told
            from these runs: 50 epochs of the glyphs are about 1,150 steps at B = 256 and 18,400 at
            B = 16, some 2 to 5 minutes a run here, beyond this sweep's budget of about a minute a
            run, and were not run.
            """,
  ),
  Experiment(
    name="hard_sampling",
    title="Hard (category-based) versus random class sampling for FastAP (Cakir et al. 2019, "
    "Table 5)",
    module="experiments.ablations.hard_sampling",
    args=("--set", 'loss_kwargs={"num_intervals": 40}'),  # FastAP as the main job trains it.
    docs_columns=("R@1", "MAP@R"),
    claim="""
            FastAP (Cakir et al. 2019, Sec. 4.2 and App. A-B.1) draws "hard" batches: two
            categories (super-classes, e.g. SOP's 'bicycle' and 'chair') per batch and classes from
            within them, so each query meets hard negatives of its own category. Table 5 (R@1):
            hard beats random on every data set and backbone, e.g. Online Products 72.3 -> 73.2
            (ResNet-18) and 74.2 -> 75.8 (ResNet-50), In-Shop 81.7 -> 89.0 and 84.1 -> 90.0.
            """,
    written="2026-11-24",
    reading="""
            Does not hold on the glyphs: random classes beat hard batches in both seeds and both
            batch geometries. At 16 classes x 4 images (hard with S = 4 super-classes per batch),
            random against hard gives R@1 0.551 against 0.502 in seed 0 and 0.587 against 0.554 in
            seed 1, MAP@R 0.208 against 0.183 and 0.250 against 0.224; at 8 x 8 with the paper's two
            super-classes per batch, R@1 0.514 against 0.460 and 0.559 against 0.461, MAP@R 0.185
            against 0.159 and 0.219 against 0.167. The hard batches lose 0.03 to 0.10 R@1 in all
            four pairs. Two differences from the paper's setting may explain it; neither is tested
            here. First, the sampler visits every set of super-classes equally often, so each of the
            9 super-classes fills 9 to 12.5% of the batches' images (300 batches, both geometries),
            whereas Latin holds 52% of the training images and of the unseen test characters, and
            the smallest block ("Other", 4 characters) 1%: hard batches show Latin about a fifth as
            often as its share and the small blocks several times theirs, a training distribution
            far from the test split's (SOP's 12 categories are much closer in size). That S = 4
            loses as well, although its batches put fewer of a query's negatives in its own
            super-class than random ones do (20% against 32%), points at this reweighting rather
            than at hardness. Second, FastAP starts from ImageNet-pretrained ResNets; here a network
            trained from scratch for 300 steps meets hard negatives (Cyrillic against Cyrillic, box
            drawing against box drawing) before it has separated the easy ones.
            """,
    history="""
            Until 2026-11-24 this ablation defaulted to the digits, which have no super-classes: it
            stopped with an error before training and said nothing about the claim; it ran only on
            mock data in the tests.
            """,
  ),
  Experiment(
    name="blackbox_margin_memory",
    title="RaMBO's score margin and batch memory (Rolinek et al. 2020, Table 7)",
    module="experiments.ablations.blackbox_margin_memory",
    args=(),
    docs_columns=("R@1", "MAP@R"),
    claim="""
            RaMBO's AP loss (Rolinek et al. 2020) shifts positive scores down and negative scores up
            by a margin alpha / 2 (Sec. 4.4) and appends the embeddings of the last tau batches to
            every list (score memory, Sec. 4.3). Their Table 7 (Sec. 5.4, R@1) removes each: full
            RaMBO 64.0 / 88.1 / 78.6 on CUB-200 / In-shop / Online Products, without memory 62.5 /
            87.0 / 72.4, without margin 63.2 on CUB and diverged ("x") on the other two. Their
            margins are 0.02 to 0.05 (Table 9) and the memory 3 batches (App. A).
            """,
    written="2026-11-24",
    reading="""
            The margin's part of the claim holds, the memory's does not, and a large margin stops
            training. Without memory, the paper's margin 0.02 is what makes RaMBO's AP loss train on
            the glyphs: R@1 0.493 and 0.548 (MAP@R 0.172 and 0.219) in seeds 0 and 1, against 0.270
            and 0.322 (MAP@R 0.065 and 0.088) without a margin, whose training loss stops falling
            after about 30 steps (0.47 and 0.33 at step 300, against 0.16 and 0.15 with the margin);
            the paper's runs without margin diverged on In-shop and SOP. A memory of 2 batches
            lowers every pairing: without margin R@1 falls to 0.201 and 0.244 (the loss rises again,
            to 0.68 and 0.66 at step 300), and with the margin 0.02 to 0.093 and 0.115, a run whose
            loss stays at 0.98-0.99 from the first steps: nothing trains. The margin 0.1 never
            trains, with or without memory (loss 0.91-0.99 throughout, R@1 0.11 to 0.18, below the
            untrained network's 0.20-0.21). The starting point explains the margins: the untrained
            network's cosine similarities within a batch all lie in about [0.96, 1.00], about 0.017
            apart for a query, so a margin of 0.1 puts every shifted positive below every shifted
            negative, and the blackbox gradient (an interpolation of strength 0.2, not a derivative:
            non-zero only where the perturbed scores change the ranking) cannot move any of them
            across; 0.02 is about that spread, so the lists start near the edge, where some pairs
            still swap. Why the memory hurts this much is not established by these runs: its stored
            embeddings carry no gradient and come from an earlier network, and with a margin near
            the initial spread they add negatives that the step cannot move; the paper's memory
            serves lists larger than a GPU batch, from pretrained networks.
            """,
    history="""
            Until 2026-11-24 this ablation trained on the digits: the margin 0.02 raised MAP@R by
            0.013 and 0.019 over no margin, the memory lowered it in every pairing, and the margin
            0.1 never trained, as on the glyphs.
            """,
  ),
  Experiment(
    name="roadmap_lambda",
    title="ROADMAP's weight lambda between SupAP and calibration (Ramzi et al. 2021, Fig. 4a)",
    module="experiments.ablations.roadmap_lambda",
    args=(),
    docs_columns=("R@1", "MAP@R"),
    claim="""
            ROADMAP (Ramzi et al. 2021, eq. 2) trains `(1 - lambda) L_SupAP + lambda L_calibr`.
            Their Fig. 4a (iNaturalist, batch 224, Sec. 4.3) shows that the combination "is always
            better than using only one of the two losses" (lambda = 0 is SupAP alone, lambda = 1
            calibration alone), with results stable over lambda in [0.2, 0.8] and about +1.5 points
            over the ends.
            """,
    written="2026-11-24",
    reading="""
            Does not hold on the glyphs: R@1 and MAP@R fall as lambda grows, in both seeds, so SupAP
            alone (lambda = 0) is best and calibration alone worst. For lambda = 0, 0.25, 0.5, 0.75,
            1, R@1 is 0.613, 0.596, 0.568, 0.473, 0.329 in seed 0 and 0.652, 0.624, 0.603, 0.521,
            0.329 in seed 1 (MAP@R 0.263 to 0.093 and 0.293 to 0.097). The paper's default 0.5 costs
            0.045 and 0.049 R@1 against SupAP alone, and there is no plateau over [0.2, 0.8]: the
            drop steepens past 0.5. Calibration alone still trains (R@1 0.329 in both seeds, above
            the untrained network's 0.20-0.21, below the raw pixels' 0.421). Unlike the digits, the
            glyphs have the situation calibration is meant for: a batch holds 16 of the 359 training
            characters, so a batch's AP can differ much from the data set's; it still does not help
            at this scale. The optimiser is AdamW, which normalises each parameter's step, so what
            lambda varies is the relative weight of the two terms, not the learning rate. The paper
            trains a pretrained network for many epochs on a much larger data set (iNaturalist);
            whether that is what makes calibration help there is not tested here, 300 steps from
            scratch.
            """,
    history="""
            Until 2026-11-24 this ablation trained on the digits: MAP@R fell as lambda grew there
            too (0.583 to 0.538 and 0.563 to 0.519), with R@1 at its ceiling.
            """,
  ),
  Experiment(
    name="glyphs_hashing",
    title="Hashing: tie-aware AP against plain AP surrogates (He et al. 2018, Tables 1-2)",
    module="experiments.job.main",
    args=("--config", "experiments/job/configs/glyphs_hashing.py"),
    docs_columns=("mAP_T", "R@1"),
    claim="""
            He et al. (2018, Tables 1-2: CIFAR-10, NUS-WIDE, LabelMe and ImageNet100 at 12 to 64
            bits) train binary codes better by optimising tie-aware AP through its relaxations AP_r
            (Prop. 2) and AP_s (App. F) than by the hashing losses that ignore ties, and AP_s
            comes close to AP_r. Longer codes retrieve better.
            """,
    written="2026-11-24",
    reading="""
            Longer codes retrieve better for every loss (mAP_T 0.11-0.14, 0.19-0.21 and 0.24-0.29
            at 16, 32 and 64 bits). Tie-aware AP beats FastAP, the plain surrogate on the same bins,
            in every cell of both seeds (AP_r ahead by 0.013 to 0.030 mAP_T); against SmoothAP the
            difference (-0.003 to +0.010) is within the up to 0.03 a cell moves between seeds, so
            the claim cannot be told there. AP_s stays within 0.01 of AP_r, above it in 4 of 6
            cells. The untrained row is at chance: its BatchNorm still holds the statistics of
            initialisation, so its features are not centred and its codes barely differ.
            """,
    history="""
            Before 2026-11-24 the hashing head was a linear layer and tanh on the raw pooled
            features, and nothing trained (mAP_T 0.014 to 0.074, every loss and length): the
            features are non-negative and nearly alike, so every code shares one large component,
            and the unnormalised similarity q.x / b sent 95-99% of the gradient on the codes into
            it. Centring the features over the batch (a BatchNorm without scale or offset before
            the hashing layer) made the table above.
            """,
  ),
)


# ---------------------------------------------------------------------------------------------
# The runner.


def command(experiment: Experiment, seed: int, workdir: str) -> list[str]:
  """The experiment's command line for one seed, as a user types it (`python -m ...`)."""
  return [
    "python",
    "-m",
    experiment.module,
    *experiment.args,
    "--workdir",
    os.path.join(workdir, experiment.name, f"seed{seed}"),
    "--set",
    f"seed={seed}",
  ]


def error_tail(stderr: str, max_lines: int = 12) -> str:
  """The end of a failed command's error output: its exception, without the traceback's frames."""
  lines = stderr.rstrip().splitlines()
  starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call")]
  if starts:
    frames = lines[starts[-1] + 1 :]
    # The frames are indented; the exception and its message follow the last indented line.
    last = max((i for i, line in enumerate(frames) if line.startswith(" ")), default=-1)
    return "\n".join([lines[starts[-1]], "  ...", *frames[last + 1 :]])
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
  return Run(
    seed=seed, command=shown, returncode=done.returncode, output=output, seconds=seconds, load=load
  )


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
    logging.info(
      "%s, seed %d: exit status %d, %.0f s", experiment.name, seed, run.returncode, run.seconds
    )
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
for other seeds), except the comparison's section, which `python -m experiments.comparison.main`
writes; do not edit by hand. The numbers come from the commands shown, run on the date
and machine each section names; the paper's claims and the readings are kept beside each experiment
in `experiments/results.py`. A reading was written by a person on the date it carries, from the
tables of that day: if the tables above it no longer say what it says, the reading is out of date.

The tables: Recall@k and MAP@R (Musgrave et al. 2020) on the test split, classes never seen in
training; mAP and mAP_T (tie-aware) where the job prints them; seen MAP@R on the training
images where it prints it; `time` is each run's wall time. The `untrained` row is
the same network evaluated before any step. Training on CPU is deterministic: the same command on
the same versions gives the same numbers; only the wall times depend on the machine and its load.
"""


def format_section(
  experiment: Experiment,
  runs: Sequence[Run],
  *,
  date: str,
  machine_name: str,
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
  parts.append(
    f"### Reading (written {experiment.written})\n\n{inspect.cleandoc(experiment.reading)}"
  )
  if experiment.history:
    parts.append(
      f"### What was tried before (written {experiment.written})\n\n"
      f"{inspect.cleandoc(experiment.history)}"
    )
  parts.append(END.format(experiment.name))
  return "\n\n".join(parts) + "\n"


def read_sections(text: str) -> dict[str, str]:
  """The sections of an existing document, by experiment name (begin and end markers included)."""
  pattern = (
    re.escape(BEGIN).replace(r"\{\}", r"(?P<name>[\w.-]+)")
    + r".*?"
    + re.escape(END).replace(r"\{\}", r"(?P=name)")
  )
  return {m.group("name"): m.group(0) + "\n" for m in re.finditer(pattern, text, re.DOTALL)}


def format_document(
  sections: Mapping[str, str], experiments: Sequence[Experiment] = EXPERIMENTS
) -> str:
  """RESULTS.md: the header, a list of contents, and each experiment's section in order.

  Args:
    sections: experiment name -> its section (`format_section`, or kept from the last document);
      an experiment without one gets a line saying how to generate it. Sections of other names,
      such as the comparison's (`experiments.comparison`, which writes its own), follow the
      experiments' in the order of their names.
    experiments: the experiments, in the document's order.
  """
  names = {e.name for e in experiments}
  others = sorted(name for name in sections if name not in names)
  contents = "\n".join(
    [
      *(f"- {e.title} (`{e.name}`)" for e in experiments),
      *(f"- {_title(sections[name])} (`{name}`)" for name in others),
    ]
  )
  body = []
  for e in experiments:
    if e.name in sections:
      body.append(sections[e.name].rstrip("\n") + "\n")
    else:
      body.append(
        f"{BEGIN.format(e.name)}\n\n## {e.title}\n\nNot generated yet: "
        f"`python -m experiments.results --only {e.name}`.\n\n{END.format(e.name)}\n"
      )
  body += [sections[name].rstrip("\n") + "\n" for name in others]
  return "\n".join([HEADER, contents + "\n", *body])


def _title(section: str) -> str:
  """The heading of a section (its first `## ` line), or its name where it has none."""
  found = re.search(r"^## (.+)$", section, flags=re.MULTILINE)
  return found.group(1) if found else "untitled"


def write(path: str, text: str) -> None:
  """Writes `text` to `path` through a temporary file, so that a reader never sees half of it."""
  tmp = f"{path}.tmp"
  with open(tmp, "w") as f:
    f.write(text)
  os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# The guide's data files: an experiment's table as a page shows it, from its section.

DOCS_SOURCE = "measured"
RECORD_SOURCE = f"measured: written from the runs' record, {DEFAULT_OUTPUT}"


def printed_table(output: str) -> tuple[list[str], list[list[str]]]:
  """The header and rows of the table a job or an ablation prints.

  That table is a header line, a line of dashes, then one line per run (its name, without spaces,
  and its values), up to a blank line; the lines before and after it are left out.
  """
  lines = output.splitlines()
  rule = next(
    (i for i, line in enumerate(lines) if i and line.strip() and set(line.strip()) == {"-"}), None
  )
  if rule is None:
    raise ValueError(f"no table (a header, a line of dashes, rows) in {output[:200]!r}")
  rows = []
  for line in lines[rule + 1 :]:
    if not line.strip():
      break
    rows.append(line.split())
  return lines[rule - 1].split(), rows


def section_runs(section: str) -> dict[int, str]:
  """Each seed's printed output in a section of the document (`format_section`), by seed.

  A seed whose command failed is left out: its output is an error, not a table.
  """
  pattern = r"^### Seed (\d+) \((?P<status>[^)]*)\)\n\n```\n(?P<output>.*?)\n```"
  return {
    int(m.group(1)): m.group("output")
    for m in re.finditer(pattern, section, flags=re.MULTILINE | re.DOTALL)
    if "exit status" not in m.group("status")
  }


def seeds_table(columns: Sequence[str], outputs: Mapping[int, str]) -> tuple[list, list]:
  """The header and rows of the seeds' printed tables side by side: `columns` of each run.

  Args:
    columns: the printed columns to show (`R@1`, ...).
    outputs: seed -> what its command printed, in the order the cells give them.

  Returns:
    The header (the runs' column, then each column with the seeds) and one row per run of the
    first seed's table, each cell the seeds' values joined by ` / ` (`-` where a seed has no such
    run).
  """
  parsed = {seed: printed_table(output) for seed, output in outputs.items()}
  for seed, (header, _) in parsed.items():
    missing = [c for c in columns if c not in header]
    if missing:
      raise ValueError(f"seed {seed}'s table has no column {missing}: {header}")
  tables = [
    {row[0]: dict(zip(header, row, strict=False)) for row in rows}
    for header, rows in parsed.values()
  ]
  first_header, _ = next(iter(parsed.values()))
  seeds = " / ".join(str(seed) for seed in outputs)
  names = list(tables[0])
  return [first_header[0], *(f"{c} (seeds {seeds})" for c in columns)], [
    [name, *(" / ".join(t.get(name, {}).get(c, "-") for t in tables) for c in columns)]
    for name in names
  ]


def write_docs_table(
  experiment: Experiment, section: str, *, source: str = DOCS_SOURCE, directory=None
) -> pathlib.Path | None:
  """Writes the table a guide page shows of `experiment`, `docs/_generated/results_<name>.json`.

  Its seeds' columns `experiment.docs_columns` side by side (`seeds_table`), with the date,
  machine and wall times its section records and the command that reruns them. Nothing is
  written for an experiment without `docs_columns`, or when a seed failed.

  Args:
    experiment: the experiment.
    section: its section of the document (`format_section`).
    source: `"measured"` when this call ran the commands; `RECORD_SOURCE` when the section
      comes from the document.
    directory: where to write (default: docs/_generated).

  Returns:
    The data file's path, or None when nothing was written.
  """
  runs = section_runs(section)
  seeds = [int(s) for s in re.findall(r"^### Seed (\d+) ", section, flags=re.MULTILINE)]
  if not experiment.docs_columns or not runs or sorted(runs) != sorted(seeds):
    return None
  run_on = re.search(r"^Run on (\d{4}-\d\d-\d\d), (.*?)\.?$", section, flags=re.MULTILINE)
  if run_on is None:
    raise ValueError(f"{experiment.name}: its section says not when and where it ran")
  columns, rows = seeds_table(experiment.docs_columns, runs)
  times = re.findall(r"^### Seed (\d+) \((\d+ s)\)", section, flags=re.MULTILINE)
  argv = [".venv/bin/python", "-m", "experiments.results", "--only", experiment.name]
  if seeds != [0, 1]:
    argv += ["--seeds", *map(str, seeds)]
  return docs_data.write_table(
    f"results_{experiment.name}",
    title=f"{experiment.title}: the test split (classes unseen in training)",
    columns=columns,
    rows=rows,
    command=shlex.join(argv),
    source=source,
    notes=[
      "Wall time: " + ", ".join(f"seed {seed} {seconds}" for seed, seconds in times) + ".",
      f"{DEFAULT_OUTPUT} has every column of each seed's table and the reading of them.",
    ],
    date=run_on.group(1),
    machine_name=run_on.group(2),
    directory=directory,
  )


def _log_written(path: pathlib.Path | None) -> None:
  if path is not None:
    logging.info("wrote %s", path)


def _parser() -> argparse.ArgumentParser:
  names = [e.name for e in EXPERIMENTS]
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument(
    "--only",
    nargs="+",
    choices=names,
    metavar="NAME",
    help=f"run only these experiments (of {', '.join(names)}); the document "
    "keeps the others' sections",
  )
  parser.add_argument(
    "--seeds",
    nargs="+",
    type=int,
    default=[0, 1],
    help="the seeds each experiment runs with (default: %(default)s)",
  )
  parser.add_argument(
    "--workdir",
    default=DEFAULT_WORKDIR,
    help="the runs go in WORKDIR/<name>/seed<S> (default: %(default)s)",
  )
  parser.add_argument(
    "--output",
    default=DEFAULT_OUTPUT,
    help="the document, relative to the repository root (default: %(default)s)",
  )
  parser.add_argument(
    "--resume",
    action="store_true",
    help="reuse finished runs in the workdirs instead of deleting them first",
  )
  parser.add_argument(
    "--tables-only",
    action="store_true",
    help="run nothing: write the guide's data files (docs/_generated/results_<name>.json) from "
    "the document's sections as they are",
  )
  return parser


def main(argv: Sequence[str] | None = None) -> int:
  args = _parser().parse_args(argv)
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
    if args.tables_only:
      if experiment.name in sections:
        _log_written(write_docs_table(experiment, sections[experiment.name], source=RECORD_SOURCE))
      continue
    runs = run_experiment(experiment, args.seeds, args.workdir, resume=args.resume)
    failed += [(experiment.name, r.seed) for r in runs if not experiment.as_expected(r)]
    sections[experiment.name] = format_section(
      experiment,
      runs,
      date=datetime.date.today().isoformat(),
      machine_name=machine_name,
      package_versions=package_versions,
    )
    write(output, format_document(sections))
    logging.info("wrote %s", output)
    _log_written(write_docs_table(experiment, sections[experiment.name]))
  if failed:
    logging.error(
      "runs that did not end as expected (name, seed): %s; their sections say how they ended.",
      failed,
    )
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
