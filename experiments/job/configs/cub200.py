"""ROADMAP on CUB-200-2011 with a ResNet-50: the papers' setting, on data you prepared yourself.

Command (after preparing CUB with tensorflow-datasets into DATA_DIR, see docs/guide/real_data.rst;
give ImageNet weights converted to `jaxrank.models.save_weights` format with
`--set init_weights=PATH`, nothing is downloaded):

    python -m experiments.job.main --config experiments/job/configs/cub200.py \\
        --workdir runs/cub200 --set data_dir=DATA_DIR

Expected result: not measured here (no GPU and no CUB on the development machines). ROADMAP reports
R@1 68.5 on CUB with an ImageNet-initialised ResNet-50 (Ramzi et al. 2021, Table 4); from random
initialisation expect far less.
"""

from experiments.job import config as config_lib


def get_config() -> config_lib.Config:
  return config_lib.Config(
    dataset="cub200",
    data_dir=None,  # Set with --set data_dir=...
    image_size=224,
    resize_size=256,
    model="resnet50",
    freeze_batchnorm=True,
    embedding_dim=512,
    batch_size=128,
    samples_per_class=4,
    loss="roadmap",
    num_steps=10_000,
    learning_rate=1e-5,
    warmup_steps=500,
    weight_decay=4e-4,
    head_lr_multiplier=10.0,
    eval_every=1000,
    checkpoint_every=500,
  )
