"""FastAP's recipe: Cakir et al. 2019, *Deep Metric Learning to Rank*, sec. 5.1 and App. B.

What every table of the paper shares: an ImageNet ResNet-50 (the M = 96 rows; ResNet-18 at
M = 256 is `--set model=resnet18 --set batch_size=256`) fine-tuned with a randomly initialised
512-d L2-normalised embedding layer; Adam at 1e-5 without weight decay, the embedding layer's rate
10x, constant (the job decays it by a cosine to 1%, without warm-up); 256 x 256 images, random
224 x 224 crops and flips in training, one centre crop at test time; FastAP with L = 10 bins;
category-based "hard" batches, two categories per batch (App. B; the number of batches per pair
of categories is the data set's). BatchNorm is frozen, as in the other recipes here (the paper
does not say). The configs of its tables (`fastap_*.py`) override the data set, the batches per
pair, the steps and the evaluation.
"""

from experiments.job import config as config_lib


def base() -> config_lib.Config:
  return config_lib.Config(
    data_dir=None,  # Set with --set data_dir=...
    image_size=224,
    resize_size=256,
    sampler="super_class",
    batch_size=96,
    samples_per_class=4,
    super_classes_per_batch=2,
    model="resnet50",
    freeze_batchnorm=True,
    embedding_dim=512,
    loss="fastap",
    loss_kwargs={"num_intervals": 10},
    learning_rate=1e-5,
    warmup_steps=0,
    weight_decay=0.0,
    head_lr_multiplier=10.0,
  )
