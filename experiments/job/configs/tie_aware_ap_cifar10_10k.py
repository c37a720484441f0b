"""Tie-aware AP hashing on CIFAR-10, He et al.'s second setting, at 16, 24, 32 and 48 bits.

Follows He et al. 2018 (TALR-AP), Table 1, CIFAR-10 setting 2 (S2): 10,000 queries, 1,000 per
class drawn from all 60,000 images as their code draws them (kunhe/TALR `split_cifar.m`), ranking
the other 50,000 by Hamming distance, all of which train (`--set dataset=cifar10_10k_tfds` takes
tfds' 10,000 test images as the queries instead); the paper reports
tie-aware mAP (AP_T) 0.939, 0.941, 0.943 and 0.945 at 16, 24, 32 and 48 bits (VGG-F). One run per
code length (`get_sweep`, runs `16bits` ... `48bits`), each trained with AP_r (`tie_aware_ap`,
`b + 1` bins). The recipe is `configs/papers/tie_aware.py`'s (a ResNet-18 in place of VGG-F);
this table's: the data set and about 50 epochs of the 50,000 training images.

Command (DATA_DIR is the tensorflow-datasets data_dir where `cifar10` is prepared; WEIGHTS is your
ImageNet ResNet-18 (torchvision `resnet18`) checkpoint, see docs/guide/pretrained.rst; nothing is
downloaded):

    python -m experiments.job.main --config experiments/job/configs/tie_aware_ap_cifar10_10k.py \\
        --workdir runs/tie_aware_ap_cifar10_10k \\
        --set data_dir=DATA_DIR --set init_weights=WEIGHTS

Expected result: not measured here (no GPU and no CIFAR-10 on the development machines); the
paper's AP_T above, column mAP_T of the printed table, is the target. What differs from the
paper: docs/guide/papers.rst.
"""

import dataclasses

from experiments.job import config as config_lib
from experiments.job.configs.papers import tie_aware

BITS = (16, 24, 32, 48)  # Table 1's columns for S2.


def get_config() -> config_lib.Config:
  return dataclasses.replace(
    tie_aware.base(),
    dataset="cifar10_10k",
    embedding_dim=BITS[0],
    loss_kwargs={"num_bins": BITS[0] + 1},
    num_steps=10000,  # About 50 epochs of 50,000 images.
    eval_every=10000,
  )


def get_sweep() -> dict[str, dict]:
  return tie_aware.bits_sweep(BITS)
