"""FastAP on PKU VehicleID with a ResNet-50, 512-d embeddings, batch 96: the three test sizes.

Follows Cakir et al. 2019 (FastAP), Table 3 ("FastAP, ResNet-50, M = 96", 512-d), which reports
R@1 / R@5 of 90.4 / 96.5 on the small test list (800 vehicles), 88.0 / 95.4 on the medium (1,600)
and 84.5 / 93.9 on the large (2,400), each list retrieved leave-one-out on its own: one run
evaluates all three (`small/recall@1`, `medium/...`, `large/...`). The recipe is
`configs/papers/fastap.py`'s; this table's: batches from pairs of vehicle models, the vehicles
without a model one more "model" (App. B fills half of each batch from a model and half from
those vehicles; the super-class sampler also pairs two models), 5 batches per pair, and 50 epochs
of the 110,178 training images (App. B.2). The ResNet-18 rows (M = 256, better on this data set:
R@1 90.9 / 88.9 / 85.3) are `--set model=resnet18 --set batch_size=256`.

Command (DATA_DIR holds VehicleID as published: `image/`, `train_test_split/` and
`attribute/model_attr.txt`; WEIGHTS is your ImageNet ResNet-50 (torchvision `resnet50`)
checkpoint, see docs/guide/pretrained.rst; nothing is downloaded):

    python -m experiments.job.main --config experiments/job/configs/fastap_vehicleid.py \\
        --workdir runs/fastap_vehicleid \\
        --set data_dir=DATA_DIR --set init_weights=WEIGHTS

Expected result: not measured here (no GPU and no VehicleID on the development machines); the
paper's recalls above are the target. What differs from the paper: docs/guide/papers.rst.
"""

import dataclasses

from experiments.job import config as config_lib
from experiments.job.configs.papers import fastap


def get_config() -> config_lib.Config:
  return dataclasses.replace(
    fastap.base(),
    dataset="vehicleid",
    batches_per_group=5,
    num_steps=57000,  # 50 epochs of 110,178 images.
    eval_every=5000,
    eval_ks=(1, 5),  # Table 3.
  )
