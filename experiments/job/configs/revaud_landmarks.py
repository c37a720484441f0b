"""mAP_Q on landmark photos with a ResNet-101 + GeM, batch 4096: Revaud et al. 2019's training.

Follows Revaud et al. 2019 ("Learning with Average Precision"), sec. 4.2: ResNet-101 pretrained on
ImageNet, GeM pooling whose power p is learned with the network (from 3, `networks.POOLINGS`), a
2048-d L2-normalised descriptor, the mAP_Q loss with M = 20 bins on batches of B = 4096 random
images of Landmarks-clean (586 landmarks, 42,410 images) backpropagated through the multistaged
(chunked) gradient of sec. 3.3, 800 x 800 training crops, Adam at 1e-4 decaying linearly to 0
after 300 iterations (Table 2 counts 200 updates), weight decay 1e-6. Table 3's ResNet-101
GeM (AP), mAP in percent, after the learned square-rooted PCA whitening of sec. 4.2:

    =============  =====  ========  =====  ========  =====  ========  =====  ========
                   Medium                            Hard
    -------------  --------------------------------  --------------------------------
                   ROxf   ROxf+1M   RPar   RPar+1M   ROxf   ROxf+1M   RPar   RPar+1M
    =============  =====  ========  =====  ========  =====  ========  =====  ========
    GeM (AP)       67.5   47.5      80.1   52.5      42.8   23.2      60.5   25.1
    + alpha-QE     71.4   53.1      84.0   60.3      45.9   26.2      67.3   32.3
    =============  =====  ========  =====  ========  =====  ========  =====  ========

Where the job differs from the paper (what it lacks is said, not faked):

* Optimiser: AdamW (decoupled weight decay, `optimizer.make_optimizer`), not Adam with the L2
  penalty of PyTorch's `weight_decay`; at 1e-6 either is nearly no decay.
* Schedule: no warm-up, then cosine decay to 1% of the rate at `num_steps`
  (`optimizer.learning_rate_schedule`), not the paper's linear decay to 0.
* Augmentation: the job's `jaxrank.data.train_preprocess` (shorter side resized to 800, a random
  800 x 800 square, a random flip), not the paper's colour jittering, random scaling and rotation.
* Class balancing: the paper weights each class equally within a batch (sec. 4.2, Eq. 12, +1-3%
  mAP, Fig. 5); `jaxrank.class_balancing_weights` computes those weights but the job's step does
  not pass `weights` to the loss.
* Chunks: the paper backpropagates image by image; `chunk_size=16` gives the same gradient in 256
  chunks (lower it if a chunk of 800 x 800 images does not fit the accelerator's memory).
  BatchNorm is frozen (`freeze_batchnorm`, required by the chunked gradient): the pretrained
  network's statistics, as a per-image backward pass implies.
* Data: the job's `image_folder` reads `DATA_DIR/train/<landmark>/<image>` (Landmarks-clean's
  586 landmarks, or GLDv2-clean's) and a class-disjoint `DATA_DIR/test/` (for instance a held-out
  fifth of the landmarks) on which it reports leave-one-out retrieval while training. The paper's
  test sets, Revisited Oxford/Paris with the 1M distractors, whitening and alpha-QE, are the
  landmark chain's (`experiments/landmarks/`, docs/guide/landmarks.rst).

Command (Landmarks-clean as an image folder in DATA_DIR; WEIGHTS your ImageNet ResNet-101
(torchvision `resnet101`) checkpoint, see docs/guide/pretrained.rst; nothing is downloaded):

    python -m experiments.job.main --config experiments/job/configs/revaud_landmarks.py \\
        --workdir runs/revaud_landmarks \\
        --set data_dir=DATA_DIR --set init_weights=WEIGHTS

then the paper's evaluation of the trained network on Revisited Oxford (and Paris), with the 1M
distractors, whitening and alpha-QE (docs/guide/landmarks.rst):

    python -m experiments.landmarks.main --workdir runs/revaud_landmarks \\
        --config experiments/job/configs/revaud_landmarks.py --set data_dir=DATA_DIR \\
        --revisited REVISITED_DIR/roxford5k --distractors REVISITED_DIR/revisitop1m

Expected result: not measured here (no GPU and no Landmarks-clean on the development machines);
Table 3's numbers above are the target. On the miniature that `experiments/landmarks/` generates,
a small network derived from this config shows the chain at work in minutes on a CPU.
"""

from experiments.job import config as config_lib


def get_config() -> config_lib.Config:
  return config_lib.Config(
    dataset="image_folder",
    data_dir=None,
    image_size=800,
    resize_size=800,
    sampler="random",
    batch_size=4096,
    model="resnet101",
    pooling="gem",
    freeze_batchnorm=True,
    embedding_dim=2048,
    loss="soft_binning_ap",
    loss_kwargs={"num_bins": 20},
    chunk_size=16,
    num_steps=300,
    learning_rate=1e-4,
    warmup_steps=0,
    weight_decay=1e-6,
    head_lr_multiplier=1.0,
    eval_every=100,
    eval_batch_size=32,
    checkpoint_every=50,
  )
