"""ROADMAP on CUB-200-2011 with a DeiT-S/16, 384-d embeddings.

Follows Ramzi et al. 2021 (ROADMAP), Table 4 (the DeiT rows), which reports Recall@1 not in our copy
of the paper (the DeiT row of its Table 4 is lost in the text; sec. 4.4 says DeiT lifts ROADMAP's
ResNet-50 results, 68.5 on CUB, by 3 to 9 points) for this setting. Sec. 4: AdamW for DeiT, 384-d
embeddings, batch 64 (sec. 4.1), 224 x 224 (the DeiT checkpoint's size). The learning rates and
schedule are in the supplementary material, which our copy lacks: those of cub200.py are used.

Command (after preparing CUB-200-2011 into DATA_DIR, see docs/guide/real_data.rst; WEIGHTS is your
ImageNet DeiT-S/16 (timm `deit_small_patch16_224`) checkpoint, see docs/guide/pretrained.rst;
nothing is downloaded):

    python -m experiments.job.main --config experiments/job/configs/roadmap_deit_cub200.py \\
        --workdir runs/roadmap_deit_cub200 \\
        --set data_dir=DATA_DIR --set init_weights=WEIGHTS

Expected result: not measured here (no GPU and no CUB-200-2011 on the development machines); the
paper's Recall@1 above is the target. jaxrank's schedule is a linear warm-up then cosine decay
(`optimizer.learning_rate_schedule`), not always the paper's: see above.
"""

import dataclasses

from experiments.job import config as config_lib
from experiments.job.configs.papers import roadmap


def get_config() -> config_lib.Config:
  return dataclasses.replace(
    roadmap.base(),
    dataset="cub200",
    model="vit_small",  # DeiT-S/16: 384-d, LayerNorm (nothing to freeze).
    embedding_dim=384,
    freeze_batchnorm=False,
    num_steps=10000,
    eval_every=1000,
  )
