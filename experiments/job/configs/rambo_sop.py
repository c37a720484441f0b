"""RaMBO recall loss on Stanford Online Products with a ResNet-50, 512-d, batch 128.

Follows Rolinek et al. 2020 (RaMBO), Table 2 (RaMBO R50 512 "log"), which reports Recall@1 77.8 for
this setting. App. A: Adam, weight decay 4e-4, batch 128, learning rate 3e-6 (Table 9), embedding
layer's rate higher (10x, Cakir et al.'s default), margin 0.02 and lambda 4 (Table 9), memory of 3
batches, at most 80 epochs (about 37,000 steps) with the rate cut by 70% after 35; super-label
batches, 10 per pair of super-labels, 4 images per class.

Command (after preparing SOP into DATA_DIR, see docs/guide/real_data.rst; WEIGHTS is your ImageNet
ResNet-50 (torchvision `resnet50`) checkpoint, see docs/guide/pretrained.rst; nothing is
downloaded):

    python -m experiments.job.main --config experiments/job/configs/rambo_sop.py \\
        --workdir runs/rambo_sop \\
        --set data_dir=DATA_DIR --set init_weights=WEIGHTS

Expected result: not measured here (no GPU and no SOP on the development machines); the paper's
Recall@1 above is the target. jaxrank's schedule is a linear warm-up then cosine decay
(`optimizer.learning_rate_schedule`), not always the paper's: see above.
"""

import dataclasses

from experiments.job import config as config_lib
from experiments.job.configs.papers import rambo


def get_config() -> config_lib.Config:
  return dataclasses.replace(
    rambo.base(),
    dataset="sop",
    batches_per_group=10,  # App. A: 10 batches per pair of super-labels.
    loss_kwargs={"margin": 0.02, "interpolation": 4.0},  # Table 9.
    num_steps=37000,  # 80 epochs of 59,551 images.
    learning_rate=3e-6,  # Table 9.
    eval_every=2000,
    eval_ks=(1, 10, 100, 1000),  # The papers' R@k on SOP.
  )
