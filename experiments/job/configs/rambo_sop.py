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

from experiments.job import config as config_lib


def get_config() -> config_lib.Config:
  return config_lib.Config(
    dataset="sop",
    data_dir=None,
    image_size=224,
    resize_size=256,
    sampler="super_class",
    batch_size=128,
    samples_per_class=4,
    super_classes_per_batch=2,
    batches_per_group=10,
    model="resnet50",
    freeze_batchnorm=True,
    embedding_dim=512,
    loss="blackbox_recall",
    loss_kwargs={"margin": 0.02, "interpolation": 4.0},
    memory_batches=3,
    num_steps=37000,
    learning_rate=3e-06,
    warmup_steps=0,
    weight_decay=0.0004,
    head_lr_multiplier=10.0,
    eval_every=2000,
  )
