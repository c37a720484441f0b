"""Tie-aware AP hashing on ImageNet100 (HashNet's 100 classes), at 16, 32, 48 and 64 bits.

Follows He et al. 2018 (TALR-AP), Table 2: HashNet's setup, 13,000 training images (130 per
class), the 5,000 validation images of the 100 classes as queries ranking the database by Hamming
distance, scored by AP at cut-off 1,000 (the job's `map@1000`, by the rule of the authors' code:
`hashing_convention="released"` of `configs/papers/tie_aware.py`); the paper reports AP@1000
0.5892, 0.6689, 0.6985 and 0.7053 at 16, 32, 48 and 64 bits (AlexNet, batch 256, the pretrained
layers' rate scaled down).
One run per code length (`get_sweep`, runs `16bits` ... `64bits`), each trained with AP_r
(`tie_aware_ap`, `b + 1` bins). The recipe is `configs/papers/tie_aware.py`'s (a ResNet-18 in
place of AlexNet); this table's: the data set and about 100 epochs of the 13,000 training images.

Command (DATA_DIR holds HashNet's lists, the PyTorch `train.txt` / `test.txt` / `database.txt`
or the Caffe `train.txt`, `test0..7.txt`, `database0..7.txt` (`jaxrank.data.load_imagenet100`),
beside `image/` and `val_image/`: the job drops either list's path prefix; WEIGHTS is your
ImageNet ResNet-18 (torchvision `resnet18`) checkpoint, see docs/guide/pretrained.rst; nothing
is downloaded):

    python -m experiments.job.main --config experiments/job/configs/tie_aware_ap_imagenet100.py \\
        --workdir runs/tie_aware_ap_imagenet100 \\
        --set data_dir=DATA_DIR --set init_weights=WEIGHTS

Expected result: not measured here (no GPU and no ImageNet100 on the development machines); the
paper's AP@1000 above is the target. The backbone was pretrained on ImageNet, whose training
images include these 100 classes' (as the paper's AlexNet). What differs from the paper:
docs/guide/papers.rst.
"""

import dataclasses

from experiments.job import config as config_lib
from experiments.job.configs.papers import tie_aware

BITS = (16, 32, 48, 64)  # Table 2's columns.


def get_config() -> config_lib.Config:
  return dataclasses.replace(
    tie_aware.base(),
    dataset="imagenet100",
    embedding_dim=BITS[0],
    loss_kwargs={"num_bins": BITS[0] + 1},
    num_steps=5000,  # About 100 epochs of 13,000 images.
    eval_every=5000,
  )


def get_sweep() -> dict[str, dict]:
  return tie_aware.bits_sweep(BITS)
