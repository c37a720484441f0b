"""FastAP on the whole glyph training set as one batch: a chunked network and a blocked loss.

Command (a few steps, to measure the step; the full 300 steps take hours on 2 cores):

    python -m experiments.job.main --config experiments/job/configs/glyphs_whole.py \
        --workdir runs/glyphs_whole --set num_steps=3 --set eval_every=3 --set log_every=1

The glyphs of `configs/glyphs.py` (359 training characters, 5,879 images of 16 x 16; the small
convolutional network, 128-d embeddings) with FastAP (40 bins) on batches of 5,876 images drawn at
random (`sampler="random"`): every image of the training set in each batch but three (5,879 is
prime, and the jitted chunked gradient needs a chunk size that divides the batch; the three left
out change every epoch). So each step is one epoch, and each query ranks the whole training set
but three images: ROADMAP's decomposability gap (Ramzi et al. 2021, eq. 6) is all but zero.

Memory: the network's activations are taken 452 images at a time (`chunk_size`,
`jaxrank.chunked_value_and_grad`: 13 chunks), and the loss 512 queries at a time
(`loss_block_size`, `jaxrank.blocked_loss`: `[512, 5876]` scores and FastAP's `[512, 5876, 40]`
soft bins at once instead of `[5876, 5876]` and `[5876, 5876, 40]`).

Expected (3 steps, as in the command): each step well under a minute on 2 idle cores, nearly all
of it the network's chunked gradient (the blocked loss takes about a second and a half), peak
memory about 1.5 GB, and R@1 still at the untrained network's; `.venv/bin/python -m
experiments.benchmarks.whole_batch` measures it (docs/guide/scale.rst, "Whole-data-set batches",
shows its table). What 300 steps (300 epochs: hours on 2 cores) give against B = 64
(`configs/glyphs.py`) has not been measured.
"""

from experiments.job import config as config_lib


def get_config() -> config_lib.Config:
  return config_lib.Config(
    dataset="glyphs",
    model="small_convnet",
    model_features=(32, 64),
    embedding_dim=128,
    sampler="random",
    batch_size=5876,
    chunk_size=452,
    loss_block_size=512,
    loss="fastap",
    loss_kwargs={"num_intervals": 40},
    num_steps=300,
    learning_rate=3e-3,
    head_lr_multiplier=1.0,
    warmup_steps=20,
    eval_every=300,
    checkpoint_every=100,
    log_every=1,
    raw_pixels_baseline=True,
  )
