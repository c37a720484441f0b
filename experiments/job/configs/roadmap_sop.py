"""ROADMAP on Stanford Online Products with a ResNet-50, 512-d, max pooling, batch 64.

Follows Ramzi et al. 2021 (ROADMAP), Table 4 ("ROADMAP (ours)", 512-d), which reports Recall@1 83.1
for this setting. Sec. 4: Adam for ResNet-50, batch 64 (sec. 4.1), 256 x 256 images and max pooling
(sec. 4.4), lambda 0.5, tau 0.01, rho 100. The learning rates and schedule are in the paper's
supplementary material, which our copy lacks: those of cub200.py are used.

Command (after preparing SOP into DATA_DIR, see docs/guide/real_data.rst; WEIGHTS is your ImageNet
ResNet-50 (torchvision `resnet50`) checkpoint, see docs/guide/pretrained.rst; nothing is
downloaded):

    python -m experiments.job.main --config experiments/job/configs/roadmap_sop.py \\
        --workdir runs/roadmap_sop \\
        --set data_dir=DATA_DIR --set init_weights=WEIGHTS

Expected result: not measured here (no GPU and no SOP on the development machines); the paper's
Recall@1 above is the target. jaxrank's schedule is a linear warm-up then cosine decay
(`optimizer.learning_rate_schedule`), not always the paper's: see above.
"""

import dataclasses

from experiments.job import config as config_lib
from experiments.job.configs.papers import roadmap


def get_config() -> config_lib.Config:
  return dataclasses.replace(
    roadmap.base(),
    dataset="sop",
    image_size=256,  # Table 4 (sec. 4.2): 256 x 256 and max pooling on SOP.
    resize_size=288,
    pooling="max",
    num_steps=30000,
    eval_every=2000,
    eval_ks=(1, 10, 100, 1000),  # The papers' R@k on SOP.
  )
