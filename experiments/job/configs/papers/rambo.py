"""RaMBO's recipe: Rolinek et al. 2020, *Optimizing Rank-based Metrics with Blackbox
Differentiation*, sec. 5.1 and App. A.

What its retrieval tables share: an ImageNet ResNet-50 with a 512-d embedding (the "RaMBO R50 512
log" rows: the recall loss of eq. 20 with one logarithm); Adam with weight decay 4e-4, the
embedding layer's rate 10x (Cakir et al.'s default); batch 128; a memory of the last 3 batches;
super-label batches as Cakir et al.'s, two super-labels per batch. BatchNorm is frozen (the paper
does not say). The paper trains at most 80 epochs with the rate cut by 70% after 35; the job
decays it by a cosine to 1% instead, without warm-up (`optimizer.learning_rate_schedule`), and its
AdamW decouples the weight decay from the gradient (PyTorch's Adam adds it to the gradient).
The configs of its tables (`rambo_*.py`) override the data set, the sampler's batches, the rate,
the margin and lambda of Table 9, and the steps (80 epochs).
"""

from experiments.job import config as config_lib


def base() -> config_lib.Config:
  return config_lib.Config(
    data_dir=None,  # Set with --set data_dir=...
    image_size=224,
    resize_size=256,
    sampler="super_class",
    batch_size=128,
    samples_per_class=4,
    super_classes_per_batch=2,
    model="resnet50",
    freeze_batchnorm=True,
    embedding_dim=512,
    loss="blackbox_recall",
    memory_batches=3,
    warmup_steps=0,
    weight_decay=4e-4,
    head_lr_multiplier=10.0,
  )
