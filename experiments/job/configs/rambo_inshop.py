"""RaMBO recall loss on In-Shop Clothes Retrieval with a ResNet-50, 512-d, batch 128.

Follows Rolinek et al. 2020 (RaMBO), Table 4 (RaMBO R50 512 "log"), which reports R@1 88.1, R@10
97.0, R@20 97.9, R@30 98.4 and R@50 98.8: the query images retrieving among the gallery images of
the 3,985 test items. The recipe is `configs/papers/rambo.py`'s; this table's (App. A, Table 9):
learning rate 1e-5, margin 0.05, lambda 0.2, super-label batches with 4 batches per pair of the 23
categories and 8 images per item, 80 epochs of the 25,882 training images.

Command (DATA_DIR holds In-Shop as published, `Eval/list_eval_partition.txt` and `img/`; WEIGHTS
is your ImageNet ResNet-50 (torchvision `resnet50`) checkpoint, see docs/guide/pretrained.rst;
nothing is downloaded):

    python -m experiments.job.main --config experiments/job/configs/rambo_inshop.py \\
        --workdir runs/rambo_inshop \\
        --set data_dir=DATA_DIR --set init_weights=WEIGHTS

Expected result: not measured here (no GPU and no In-Shop on the development machines); the
paper's recalls above are the target. What differs from the paper: docs/guide/papers.rst.
"""

import dataclasses

from experiments.job import config as config_lib
from experiments.job.configs.papers import rambo


def get_config() -> config_lib.Config:
  return dataclasses.replace(
    rambo.base(),
    dataset="inshop",
    samples_per_class=8,  # App. A: 8 images per item.
    batches_per_group=4,  # App. A: 4 batches per pair of super-labels.
    loss_kwargs={"margin": 0.05, "interpolation": 0.2},  # Table 9.
    num_steps=16200,  # 80 epochs of 25,882 images.
    learning_rate=1e-5,  # Table 9.
    eval_every=1000,
    eval_ks=(1, 10, 20, 30, 40, 50),
  )
