"""A few steps of a tiny network on the digits: what the tests run end to end.

Command:

    python -m experiments.job.main --config experiments/job/configs/tiny.py --workdir /tmp/tiny

Expected result (in seconds): the metrics of a barely trained 8-channel network, whose point is
that every part of the loop runs:

    run       R@1    R@2    R@4    R@8  MAP@R    mAP  mAP_T
    -------------------------------------------------------
    fastap  0.559  0.731  0.855  0.933  0.168  0.348  0.348
"""

from experiments.job import config as config_lib


def get_config() -> config_lib.Config:
  return config_lib.Config(
    dataset="digits",
    model="small_convnet",
    model_features=(4, 8),
    embedding_dim=8,
    batch_size=20,
    samples_per_class=4,
    num_steps=6,
    warmup_steps=2,
    eval_every=3,
    checkpoint_every=2,
    keep_checkpoints=2,
    log_every=1,
    eval_batch_size=512,
    progress_bar=False,
  )
