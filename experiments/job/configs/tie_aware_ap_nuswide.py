"""Tie-aware AP hashing on NUS-WIDE (21 labels), at 12, 24, 32 and 48 bits.

Follows He et al. 2018 (TALR-AP), Table 1, NUS-WIDE: 2,100 queries (100 per label) ranking the
database by Hamming distance, 10,500 images (500 per label) to train on, an image relevant to a
query when they share a label; the paper reports tie-aware mAP (AP_T) 0.709, 0.734, 0.745 and
0.752 at 12, 24, 32 and 48 bits (and AP@5K 0.795, 0.835, 0.848, 0.862; VGG-F; the job's
`map@5000` computes it by the rule of the authors' code, `hashing_convention="released"` of
`configs/papers/tie_aware.py`, so the two columns compare). One run per code length
(`get_sweep`, runs `12bits` ... `48bits`), each trained with AP_r (`tie_aware_ap`, `b + 1` bins).
The recipe is `configs/papers/tie_aware.py`'s (a ResNet-18 in place of VGG-F); this
table's: the data set and about 100 epochs of the 10,500 training images.

Command (DATA_DIR holds DeepHash-pytorch's 21-label lists, `data/nuswide_21/{train,test,
database}.txt`, beside the `images/` they list (`jaxrank.data.load_nuswide`); with NUS-WIDE's own
`Imagelist.txt` and `AllLabels81.txt` instead, `--set dataset=nuswide_he2018` draws He et al.'s
split by their code's rule (`load_nuswide_he2018`); WEIGHTS is your ImageNet ResNet-18
(torchvision `resnet18`) checkpoint, see docs/guide/pretrained.rst; nothing is downloaded):

    python -m experiments.job.main --config experiments/job/configs/tie_aware_ap_nuswide.py \\
        --workdir runs/tie_aware_ap_nuswide \\
        --set data_dir=DATA_DIR --set init_weights=WEIGHTS

Expected result: not measured here (no GPU and no NUS-WIDE on the development machines); the
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
    dataset="nuswide",
    embedding_dim=BITS[0],
    loss_kwargs={"num_bins": BITS[0] + 1},
    num_steps=4000,  # About 100 epochs of 10,500 images.
    eval_every=4000,
  )


def get_sweep() -> dict[str, dict]:
  return tie_aware.bits_sweep(BITS)
