"""RaMBO recall loss on CUB-200-2011 with a ResNet-50, 512-d, batch 128.

Follows Rolinek et al. 2020 (RaMBO), Table 3 (RaMBO R50 512 "log"), which reports Recall@1 63.5 for
this setting. App. A: Adam, weight decay 4e-4, batch 128, learning rate 5e-6 (Table 9), embedding
layer's rate 10x, margin 0.02 and lambda 0.2 (Table 9), memory of 3 batches, at most 80 epochs
(about 3,700 steps) with the rate cut by 70% after 35; 4 images per class, no super-labels.

Command (after preparing CUB-200-2011 into DATA_DIR, see docs/guide/real_data.rst; WEIGHTS is your
ImageNet ResNet-50 (torchvision `resnet50`) checkpoint, see docs/guide/pretrained.rst;
nothing is downloaded):

    python -m experiments.job.main --config experiments/job/configs/rambo_cub200.py \\
        --workdir runs/rambo_cub200 \\
        --set data_dir=DATA_DIR --set init_weights=WEIGHTS

Expected result: not measured here (no GPU and no CUB-200-2011 on the development machines); the
paper's Recall@1 above is the target. jaxrank's schedule is a linear warm-up then cosine decay
(`optimizer.learning_rate_schedule`), not always the paper's: see above.
"""

import dataclasses

from experiments.job import config as config_lib
from experiments.job.configs.papers import rambo


def get_config() -> config_lib.Config:
  return dataclasses.replace(
    rambo.base(),
    dataset="cub200",
    sampler="m_per_class",  # CUB has no super-labels.
    loss_kwargs={"margin": 0.02, "interpolation": 0.2},  # Table 9.
    num_steps=3700,  # 80 epochs of 5,864 images.
    learning_rate=5e-6,  # Table 9.
    eval_every=500,
  )
