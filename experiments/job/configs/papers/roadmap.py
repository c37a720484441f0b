"""ROADMAP's recipe: Ramzi et al. 2021, *Robust and Decomposable Average Precision for Image
Retrieval*, sec. 4 ("Experimental setup", 4.1, 4.2).

What its tables share: an ImageNet ResNet-50 with a 512-d embedding, batch 64 (sec. 4.1), 4
images per class, 224 x 224 crops of 256 images; the ROADMAP loss with lambda 0.5, tau 0.01,
rho 100, alpha 0.9 and beta 0.6 (the loss's defaults). BatchNorm is frozen. The learning rates
and schedule are in the paper's supplementary material, which our copy lacks: 1e-5 (the
embedding layer's 10x), weight decay 4e-4, 500 warm-up steps then a cosine decay are used.
The paper trains ResNet-50 with Adam and DeiT with AdamW; the job uses AdamW for both. The
configs of its tables (`roadmap_*.py`, `cub200.py`) override the data set, the image size and
pooling of Table 4, the DeiT backbone (`model="vit_small"`, 384-d, no BatchNorm to freeze), and
the steps.
"""

from experiments.job import config as config_lib


def base() -> config_lib.Config:
  return config_lib.Config(
    data_dir=None,  # Set with --set data_dir=...
    image_size=224,
    resize_size=256,
    sampler="m_per_class",
    batch_size=64,
    samples_per_class=4,
    model="resnet50",
    freeze_batchnorm=True,
    embedding_dim=512,
    loss="roadmap",
    learning_rate=1e-5,
    warmup_steps=500,
    weight_decay=4e-4,
    head_lr_multiplier=10.0,
  )
