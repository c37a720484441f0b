"""FastAP on In-Shop Clothes Retrieval with a ResNet-50, 512-d embeddings, batch 96.

Follows Cakir et al. 2019 (FastAP), Table 2 ("FastAP, ResNet-50, M = 96", 512-d), which reports
R@1 90.0, R@10 97.5, R@20 98.3, R@30 98.7, R@40 98.9 and R@50 99.1: the 14,218 query images
retrieving among the 12,612 gallery images of the 3,985 test items. The recipe is
`configs/papers/fastap.py`'s; this table's: hard batches from pairs of the 23 categories, 2
batches per pair (App. B), and 50 epochs of the 25,882 training images (App. B.2).

Command (DATA_DIR holds In-Shop as published, `Eval/list_eval_partition.txt` and `img/`; WEIGHTS
is your ImageNet ResNet-50 (torchvision `resnet50`) checkpoint, see docs/guide/pretrained.rst;
nothing is downloaded):

    python -m experiments.job.main --config experiments/job/configs/fastap_inshop.py \\
        --workdir runs/fastap_inshop \\
        --set data_dir=DATA_DIR --set init_weights=WEIGHTS

Expected result: not measured here (no GPU and no In-Shop on the development machines); the
paper's recalls above are the target. What differs from the paper: docs/guide/papers.rst.
"""

import dataclasses

from experiments.job import config as config_lib
from experiments.job.configs.papers import fastap


def get_config() -> config_lib.Config:
  return dataclasses.replace(
    fastap.base(),
    dataset="inshop",
    batches_per_group=2,  # App. B: 2 batches per pair of the 23 categories.
    num_steps=13500,  # 50 epochs of 25,882 images.
    eval_every=1000,
    eval_ks=(1, 10, 20, 30, 40, 50),  # Table 2.
  )
