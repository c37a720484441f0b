"""FastAP on Stanford Online Products with a ResNet-50, 512-d embeddings, batch 96.

Follows Cakir et al. 2019 (FastAP), Table 1 ("FastAP, ResNet-50, M = 96", 512-d), which reports
Recall@1 75.8 for this setting. Sec. 5: Adam, base learning rate 1e-5, no weight decay, embedding
layer's rate 10x, constant; 256 x 256 images, 224 x 224 crops; L = 10 bins; App. B: hard (category)
sampling, 5 batches per pair of categories; convergence within 50 epochs (about 31,000 steps of 96).
BatchNorm is frozen here, as in the other recipes (the paper does not say).

Command (after preparing SOP into DATA_DIR, see docs/guide/real_data.rst; WEIGHTS is your ImageNet
ResNet-50 (torchvision `resnet50`) checkpoint, see docs/guide/pretrained.rst; nothing is
downloaded):

    python -m experiments.job.main --config experiments/job/configs/fastap_sop.py \\
        --workdir runs/fastap_sop \\
        --set data_dir=DATA_DIR --set init_weights=WEIGHTS

Expected result: not measured here (no GPU and no SOP on the development machines); the paper's
Recall@1 above is the target. jaxrank's schedule is a linear warm-up then cosine decay
(`optimizer.learning_rate_schedule`), not always the paper's: see above.
"""

import dataclasses

from experiments.job import config as config_lib
from experiments.job.configs.papers import fastap


def get_config() -> config_lib.Config:
  return dataclasses.replace(
    fastap.base(),
    dataset="sop",
    batches_per_group=5,  # App. B: 5 batches per pair of the 12 categories.
    num_steps=31000,  # 50 epochs of 59,551 images (App. B.2: converged within 50).
    eval_every=2000,
    eval_ks=(1, 10, 100, 1000),  # The papers' R@k on SOP.
  )
