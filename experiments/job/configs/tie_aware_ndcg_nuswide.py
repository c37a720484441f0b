"""Tie-aware NDCG hashing on NUS-WIDE (21 labels, graded by shared labels), at 16 to 64 bits.

Follows He et al. 2018 (TALR-NDCG), Table 3, NUS-WIDE: the AP experiment's splits (2,100 queries
ranking the database, 10,500 training images), each image's relevance to a query the number of
labels they share (multi-level affinities, sec. 5.3); the paper reports tie-aware NDCG (NDCG_T)
0.903, 0.910, 0.916 and 0.927 at 16, 32, 48 and 64 bits (VGG-F). One run per code length
(`get_sweep`, runs `16bits` ... `64bits`), each trained with NDCG_r (`tie_aware_ndcg`, `b + 1`
bins). The recipe is `configs/papers/tie_aware.py`'s (a ResNet-18 in place of VGG-F); this
table's: the data set, the loss and about 100 epochs of the 10,500 training images.

Command (DATA_DIR holds DeepHash-pytorch's 21-label lists, `data/nuswide_21/{train,test,
database}.txt`, beside the `images/` they list (`jaxrank.data.load_nuswide`); with NUS-WIDE's own
`Imagelist.txt` and `AllLabels81.txt` instead, `--set dataset=nuswide_he2018` draws He et al.'s
split by their code's rule (`load_nuswide_he2018`); WEIGHTS is your ImageNet ResNet-18
(torchvision `resnet18`) checkpoint, see docs/guide/pretrained.rst; nothing is downloaded):

    python -m experiments.job.main --config experiments/job/configs/tie_aware_ndcg_nuswide.py \\
        --workdir runs/tie_aware_ndcg_nuswide \\
        --set data_dir=DATA_DIR --set init_weights=WEIGHTS

Expected result: not measured here (no GPU and no NUS-WIDE on the development machines); the
paper's NDCG_T above is the target. What differs from the paper: docs/guide/papers.rst.
"""

import dataclasses

from experiments.job import config as config_lib
from experiments.job.configs.papers import tie_aware

BITS = (16, 32, 48, 64)  # Table 3's columns.


def get_config() -> config_lib.Config:
  return dataclasses.replace(
    tie_aware.base(),
    dataset="nuswide",
    loss="tie_aware_ndcg",
    embedding_dim=BITS[0],
    loss_kwargs={"num_bins": BITS[0] + 1},
    num_steps=4000,  # About 100 epochs of 10,500 images.
    eval_every=4000,
  )


def get_sweep() -> dict[str, dict]:
  return tie_aware.bits_sweep(BITS)
