"""What the comparison runs: the sizes, the two settings, the search spaces, trials and ablations.

Everything here is data and small pure functions; `experiments.comparison.run` executes it.

* **Sizes** (`SIZES`): `full`, the protocol of the results document, and `tiny`, the smoke test's.
* **Settings** (`SETTINGS`): `pretrained` fine-tunes the backbone of `pretrain.py` (the papers'
  regime), `scratch` trains it from a random initialisation (the main job's). They differ in
  `init_weights` alone.
* **Search spaces** (`SEARCH_SPACES`): for every loss of the glyphs sweep, its one or two main
  hyperparameters and the learning rate, each a tuple of values whose first is the default: the
  library's (the papers' values; pytorch-metric-learning's for the baselines) and the glyphs
  config's learning rate. A tuple of one value is a setting the comparison fixes rather than
  searches (the triplet loss over all triplets, pytorch-metric-learning's default form). The
  learning rate is searched for every loss alike, since it matters on the glyphs
  (experiments/RESULTS.md: 1e-2 made FastAP collapse where it helped SmoothAP).
* **Trials** (`trials`): the same number for every loss: the default first, then distinct points
  of the loss's grid drawn with a seed of the protocol and the loss's name.
* **Ablations** (`ABLATIONS`): the five ablations of `experiments/ablations/`, each with the
  values re-read (a subset of its module's `VALUES`) and the claim as pairs of values, the first
  claimed better than the second.
"""

from __future__ import annotations

import dataclasses
import itertools
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from experiments.ablations import batch_size
from experiments.ablations import blackbox_margin_memory
from experiments.ablations import fastap_bins
from experiments.ablations import hard_sampling
from experiments.ablations import roadmap_lambda
from experiments.job import config as config_lib
from experiments.job.configs import glyphs

# The rows compared: the losses of the main job's table, in its order (its sweep, at the losses'
# defaults), with the triplet loss twice (over all triplets, and batch-hard as the main job
# trains it), then the proxy losses (`losses.OWN_PARAMETERS` named "proxies"), which the quick
# run leaves out.
LOSSES = (
  "fastap",
  "soft_binning_ap",
  "blackbox_ap",
  "smoothap",
  "supap",
  "roadmap",
  "contrastive",
  "triplet",
  "triplet_batch_hard",
  "multi_similarity",
  "proxy_nca",
  "proxy_nca_plus_plus",
  "proxy_anchor",
)
# Rows that train another loss of the job than their name: the name -> the loss
# (`experiments.job.losses.LOSSES`); every other row trains the loss of its name.
ROW_LOSSES: Mapping[str, str] = {"triplet_batch_hard": "triplet"}
# The baselines: the pair-based losses and the proxy losses (issue 60).
BASELINES = (
  "contrastive",
  "triplet",
  "triplet_batch_hard",
  "multi_similarity",
  "proxy_nca",
  "proxy_nca_plus_plus",
  "proxy_anchor",
)
LEARNING_RATES = (3e-3, 1e-3)  # The glyphs config's first.

# Loss -> {hyperparameter: values}, the default first; the names in `CONFIG_FIELDS` are Config
# fields, the others are `loss_kwargs`.
SEARCH_SPACES: Mapping[str, Mapping[str, tuple[Any, ...]]] = {
  "fastap": {"num_intervals": (10, 20, 40, 80)},
  "soft_binning_ap": {"num_bins": (20, 10, 40, 80)},
  "blackbox_ap": {"interpolation": (0.2, 0.1, 0.5), "margin": (0.02, 0.01, 0.05)},
  "smoothap": {"temperature": (0.01, 0.005, 0.02, 0.05)},
  "supap": {"temperature": (0.01, 0.005, 0.02, 0.05)},
  "roadmap": {"calibration_weight": (0.5, 0.1, 0.25, 0.75)},
  "contrastive": {"pos_margin": (1.0, 0.9, 0.8), "neg_margin": (0.0, 0.4, 0.6)},
  # pytorch-metric-learning's default TripletMarginLoss (every triplet, the mean over the
  # non-zero ones): batch-hard mining did not train from the backbone's narrow cone (issue 38).
  "triplet": {"margin": (0.05, 0.1, 0.2, 0.4), "mining": ("all",)},
  # The batch-hard triplet loss (the library's default mining, the main job's row), kept beside
  # it: the row of the comparisons before issue 60.
  "triplet_batch_hard": {"margin": (0.05, 0.1, 0.2, 0.4), "mining": ("hard",)},
  "multi_similarity": {"alpha": (2.0, 1.0, 4.0), "beta": (50.0, 20.0, 80.0)},
  # The proxy losses' own learning rate is the job's `proxy_lr_multiplier` times the network's
  # (100, Kim et al. 2020's code); Proxy-NCA has no other hyperparameter, so its multiplier is
  # what it searches. ProxyNCA++'s temperature 1/9 is Teh et al. 2020's; Proxy-Anchor's margin
  # 0.1 and alpha 32 are Kim et al. 2020's (the library's defaults, docs/guide/comparison.rst).
  "proxy_nca": {"proxy_lr_multiplier": (100.0, 10.0, 1000.0)},
  "proxy_nca_plus_plus": {"temperature": (1 / 9, 1 / 3, 1 / 27)},
  "proxy_anchor": {"margin": (0.1, 0.05, 0.2), "alpha": (32.0, 16.0, 64.0)},
}
SEARCH_SPACES = {
  loss: {**space, "learning_rate": LEARNING_RATES} for loss, space in SEARCH_SPACES.items()
}
TRIALS_SEED = 28  # Issue 28.
# Searched names that are Config fields.
CONFIG_FIELDS = ("learning_rate", "proxy_lr_multiplier", "head")


@dataclasses.dataclass(frozen=True)
class Size:
  """How large the comparison runs.

  Attributes:
    dataset: the job's data set (`datasets.DATASETS`).
    model_features, embedding_dim: the network (the glyphs config's at `full`).
    batch_size, samples_per_class: each training batch (P x K).
    num_steps, warmup_steps: every run's schedule, the same in both settings.
    trials: the trials of every loss in each setting.
    seeds: the seeds 0 .. seeds - 1 of every final setting and ablation value.
    validation_fraction: the training classes held out to choose each loss's trial.
    ablation_values: ablation name -> how many of its values run (`Ablation.values[:n]`).
    pretrain: the backbone's pretraining (`pretrain.Pretraining` fields).
    curve_steps, curve_warmup_steps, curve_eval_every: the learning curves' schedule
      (`curve_config`): 10 times `num_steps` and `warmup_steps` at `full`, evaluated every
      `num_steps`.
    heads: the embedding heads (`networks.HEADS`) every loss's trials choose among, the first
      the default; one head is no search (`search_space`).
  """

  dataset: str
  model_features: tuple[int, ...]
  embedding_dim: int
  batch_size: int
  samples_per_class: int
  num_steps: int
  warmup_steps: int
  trials: int
  seeds: int
  validation_fraction: float
  ablation_values: int | None
  pretrain: Mapping[str, Any]
  curve_steps: int
  curve_warmup_steps: int
  curve_eval_every: int
  heads: tuple[str, ...] = ("embedding",)


SIZES: Mapping[str, Size] = {
  # 315 runs of 150 steps (half the main job's 300) at about 8 s each on 2 otherwise idle CPU
  # cores (2026-11-29, on 2 shared ones: 297 of them in 72 minutes), the backbone's 3,000 steps
  # in about 2 minutes (held-out accuracy 0.38 over 2,485 characters; 1,000 steps at 3e-3
  # reached 0.003, nothing learned).
  "full": Size(
    dataset="glyphs",
    model_features=(32, 64),
    embedding_dim=128,
    batch_size=64,
    samples_per_class=4,
    num_steps=150,
    warmup_steps=15,
    trials=4,
    seeds=5,
    validation_fraction=0.25,
    ablation_values=None,
    pretrain={
      "min_typefaces": 8,
      "max_classes": None,
      "num_steps": 3000,
      "batch_size": 128,
      "learning_rate": 1e-2,
    },
    # The learning curves (issue 66): 10 times the steps and the warm-up, an evaluation every
    # 150 steps (11 points with the untrained network's).
    curve_steps=1500,
    curve_warmup_steps=150,
    curve_eval_every=150,
  ),
  # The smoke test: the glyphs' 31 + 31 commonest characters, a tiny network, two steps.
  "tiny": Size(
    dataset="glyphs_tiny",
    model_features=(4, 8),
    embedding_dim=8,
    batch_size=16,
    samples_per_class=4,
    num_steps=2,
    warmup_steps=1,
    trials=2,
    seeds=2,
    validation_fraction=0.25,
    ablation_values=2,
    pretrain={
      "min_typefaces": 16,
      "max_classes": 40,
      "num_steps": 3,
      "batch_size": 32,
      "learning_rate": 3e-3,
    },
    curve_steps=4,
    curve_warmup_steps=1,
    curve_eval_every=2,
  ),
}

# The two settings: how each one's runs start.
SETTINGS = ("pretrained", "scratch")


def base_config(size: Size, backbone: str | None) -> config_lib.Config:
  """The glyphs config at `size`, fine-tuning the backbone file `backbone` (None: from scratch)."""
  return dataclasses.replace(
    glyphs.get_config(),
    dataset=size.dataset,
    model_features=size.model_features,
    embedding_dim=size.embedding_dim,
    batch_size=size.batch_size,
    samples_per_class=size.samples_per_class,
    num_steps=size.num_steps,
    warmup_steps=size.warmup_steps,
    eval_every=max(size.num_steps, 1),
    checkpoint_every=max(size.num_steps, 1),
    raw_pixels_baseline=False,
    progress_bar=False,
    init_weights=backbone,
  )


def converged(num_steps: int, warmup_steps: int) -> Size:
  """The protocol at convergence (issue 66), a scaffold: `full` at a budget read from the
  learning curves, the embedding head (plain or centred) a searched choice of every loss alike.
  Not in `SIZES` until the curves have chosen its budget."""
  return dataclasses.replace(
    SIZES["full"],
    num_steps=num_steps,
    warmup_steps=warmup_steps,
    heads=("embedding", "centred_embedding"),
  )


def search_space(loss: str, heads: tuple[str, ...] = ("embedding",)) -> dict[str, tuple[Any, ...]]:
  """A loss's search space (`SEARCH_SPACES`), with the head among its dimensions (before the
  learning rate) when more than one is searched (`Size.heads`)."""
  space = dict(SEARCH_SPACES[loss])
  if len(heads) > 1:
    rate = space.pop("learning_rate")
    space.update(head=heads, learning_rate=rate)
  return space


def grid(loss: str, heads: tuple[str, ...] = ("embedding",)) -> list[dict[str, Any]]:
  """Every point of a loss's search space, the default (every first value) first."""
  space = search_space(loss, heads)
  return [dict(zip(space, values)) for values in itertools.product(*space.values())]


def trials(loss: str, count: int, heads: tuple[str, ...] = ("embedding",)) -> list[dict[str, Any]]:
  """`count` distinct points of the loss's grid: the default, then seeded draws from the rest."""
  points = grid(loss, heads)
  if not 1 <= count <= len(points):
    raise ValueError(f"trials: {loss} has {len(points)} points, cannot draw {count}.")
  rng = np.random.default_rng([TRIALS_SEED, zlib.crc32(loss.encode())])
  drawn = rng.choice(np.arange(1, len(points)), size=count - 1, replace=False)
  return [points[0], *(points[i] for i in sorted(drawn.tolist()))]


def loss_of(row: str) -> str:
  """The job's loss that a row of the comparison trains (`ROW_LOSSES`, else the row's name)."""
  return ROW_LOSSES.get(row, row)


def trial_config(base: config_lib.Config, loss: str, trial: Mapping[str, Any]) -> config_lib.Config:
  """The base config training row `loss` (`loss_of`) with a trial's hyperparameters and
  learning rate."""
  kwargs = {k: v for k, v in trial.items() if k not in CONFIG_FIELDS}
  return dataclasses.replace(
    base,
    loss=loss_of(loss),
    loss_kwargs=kwargs,
    learning_rate=float(trial["learning_rate"]),
    proxy_lr_multiplier=float(trial.get("proxy_lr_multiplier", base.proxy_lr_multiplier)),
    head=trial.get("head", base.head),
  )


def curve_config(
  base: config_lib.Config, loss: str, chosen: Mapping[str, Any], size: Size
) -> config_lib.Config:
  """A row's learning-curve run: its chosen trial (`trial_config`), seed 0, trained like the
  trials on the training classes less the validation classes for `size.curve_steps`, evaluated
  every `size.curve_eval_every` steps on the validation classes and on the test classes
  (`eval_test_classes`), and checkpointed as often (a run resumes across sessions)."""
  return dataclasses.replace(
    trial_config(base, loss, chosen),
    seed=0,
    validation_fraction=size.validation_fraction,
    eval_test_classes=True,
    num_steps=size.curve_steps,
    warmup_steps=size.curve_warmup_steps,
    eval_every=size.curve_eval_every,
    checkpoint_every=size.curve_eval_every,
  )


@dataclasses.dataclass(frozen=True)
class Ablation:
  """One ablation of `experiments/ablations/`, re-read in the pretrained setting.

  Attributes:
    name: the ablation's name, also its section in `experiments.results.EXPERIMENTS` (the claim).
    loss: the loss it trains; its base config is that loss's chosen setting.
    module: the ablation's module: its `overrides(base, value)`, `name(config)` and `VALUES`.
    values: the values re-read, from `module.VALUES`, those of the claim's pairs first.
    pairs: the claim, as `(better, worse)` pairs of values: the claim holds where every first
      value trains better than its second.
    why: why these values, when they are fewer than the module's.
  """

  name: str
  loss: str
  module: Any
  values: tuple[Any, ...]
  pairs: tuple[tuple[Any, Any], ...]
  why: str = ""


ABLATIONS = (
  Ablation(
    "fastap_bins",
    "fastap",
    fastap_bins,
    values=(10, 5, 40),
    pairs=((10, 5), (10, 40)),
    why="the paper's 10 bins and one value on either side of it; R@1 'peaks around 10'",
  ),
  Ablation(
    "batch_size",
    "fastap",
    batch_size,
    values=((16, 4), (8, 4), (32, 4)),
    pairs=(((16, 4), (8, 4)), ((32, 4), (16, 4))),
    why="three batch sizes at the fixed number of steps (B = 32, 64, 128); larger ones cost "
    "more than the budget allows",
  ),
  Ablation(
    "hard_sampling",
    "fastap",
    hard_sampling,
    values=("super_class,8,8,2", "m_per_class,8,8"),
    pairs=(("super_class,8,8,2", "m_per_class,8,8"),),
    why="the paper's geometry, two super-classes per batch, against random classes",
  ),
  Ablation(
    "blackbox_margin_memory",
    "blackbox_ap",
    blackbox_margin_memory,
    values=((0.02, 2), (0.02, 0), (0.0, 2)),
    pairs=(((0.02, 2), (0.02, 0)), ((0.02, 2), (0.0, 2))),
    why="full RaMBO (margin 0.02, memory 2) against each part removed, as the paper's Table 7",
  ),
  Ablation(
    "roadmap_lambda",
    "roadmap",
    roadmap_lambda,
    values=(0.5, 0.0, 1.0),
    pairs=((0.5, 0.0), (0.5, 1.0)),
    why="the paper's 0.5 against each loss alone (lambda 0: SupAP, 1: calibration)",
  ),
)


def ablation_values(ablation: Ablation, size: Size) -> tuple[Any, ...]:
  """The values of an ablation that run at `size` (the first two are always the first pair)."""
  return (
    ablation.values if size.ablation_values is None else ablation.values[: size.ablation_values]
  )


def ablation_pairs(ablation: Ablation, size: Size) -> tuple[tuple[Any, Any], ...]:
  """The claimed pairs whose values both run at `size`."""
  values = ablation_values(ablation, size)
  return tuple(p for p in ablation.pairs if p[0] in values and p[1] in values)
