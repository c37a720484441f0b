"""ROADMAP on CUB-200-2011 with a ResNet-50: the papers' setting, on data you prepared yourself.

Command (after preparing CUB with tensorflow-datasets into DATA_DIR, see docs/guide/real_data.rst;
give ImageNet weights converted to `jaxrank.models.save_weights` format with
`--set init_weights=PATH`, nothing is downloaded):

    python -m experiments.job.main --config experiments/job/configs/cub200.py \\
        --workdir runs/cub200 --set data_dir=DATA_DIR

Expected result: not measured here (no GPU and no CUB on the development machines). ROADMAP reports
R@1 68.5 on CUB with an ImageNet-initialised ResNet-50 (Ramzi et al. 2021, Table 4); from random
initialisation expect far less.
"""

import dataclasses

from experiments.job import config as config_lib
from experiments.job.configs.papers import roadmap


def get_config() -> config_lib.Config:
  return dataclasses.replace(
    roadmap.base(),
    dataset="cub200",
    batch_size=128,  # Twice the paper's 64 (sec. 4.1).
    num_steps=10_000,
    eval_every=1000,
    checkpoint_every=500,
  )
