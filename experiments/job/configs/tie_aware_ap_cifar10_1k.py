"""Tie-aware AP hashing on CIFAR-10, He et al.'s first setting, at 12, 24, 32 and 48 bits.

Follows He et al. 2018 (TALR-AP), Table 1, CIFAR-10 setting 1 (S1): 1,000 queries (100 per class)
ranking the other 59,000 images by Hamming distance, 5,000 of them (500 per class) to train on;
the paper reports tie-aware mAP (AP_T) 0.732, 0.789, 0.800 and 0.826 at 12, 24, 32 and 48 bits
(VGG-F). One run per code length (`get_sweep`, runs `12bits` ... `48bits`), each trained with
AP_r (`tie_aware_ap`, `b + 1` bins). The recipe is `configs/papers/tie_aware.py`'s (a ResNet-18
in place of VGG-F); this table's: the data set and about 100 epochs of the 5,000 training images.

Command (DATA_DIR is the tensorflow-datasets data_dir where `cifar10` is prepared; WEIGHTS is your
ImageNet ResNet-18 (torchvision `resnet18`) checkpoint, see docs/guide/pretrained.rst; nothing is
downloaded):

    python -m experiments.job.main --config experiments/job/configs/tie_aware_ap_cifar10_1k.py \\
        --workdir runs/tie_aware_ap_cifar10_1k \\
        --set data_dir=DATA_DIR --set init_weights=WEIGHTS

Expected result: not measured here (no GPU and no CIFAR-10 on the development machines); the
paper's AP_T above, column mAP_T of the printed table, is the target. What differs from the
paper: docs/guide/papers.rst.
"""

import dataclasses

from experiments.job import config as config_lib
from experiments.job.configs.papers import tie_aware

BITS = (12, 24, 32, 48)  # Table 1's columns.


def get_config() -> config_lib.Config:
  return dataclasses.replace(
    tie_aware.base(),
    dataset="cifar10_1k",
    embedding_dim=BITS[0],
    loss_kwargs={"num_bins": BITS[0] + 1},
    num_steps=2000,  # About 100 epochs of 5,000 images.
    eval_every=2000,
  )


def get_sweep() -> dict[str, dict]:
  return tie_aware.bits_sweep(BITS)
