"""He et al.'s recipe: He, Cakir, Bargal and Sclaroff 2018, *Hashing as Tie-Aware Learning to
Rank*, sec. 4-5 and App. D.

What its tables share: an ImageNet backbone fine-tuned with a hashing layer to `b` bits, relaxed as
`tanh(alpha f)` with alpha = 40 fixed (App. D: the rows of Tables 1-3; its "alpha -> infinity" row
grows alpha instead, `--set tanh_growth=2.0`); minibatches drawn at random, each item a query
against the rest of the batch; the tie-aware relaxation with `b + 1` bins, one per Hamming distance;
binary codes `sign(f)` retrieved by Hamming distance at test time, scored by tie-aware AP (mAP_T)
and by AP@k (NUS-WIDE's AP@5K, ImageNet100's AP@1000) as the authors' released code computes it
(kunhe/TALR, `+eval/AP.m`, which its demos run for these metrics; its `get_AP` drops the rank-1
term: `hashing_convention="released"`), averaged over every query as that code does
(`hashing_averaged_over="all"`; where every query has a relevant item in the database, as in these
benchmarks, this is also the mean over the queries with one). `--set hashing_convention=textbook`
gives the textbook AP@k, higher by `rel_1 / sum rel` per query (`jaxrank.evaluate_hashing`). The
job's hashing head centres the backbone's features over the batch before the hashing layer
(`networks.CentredHashingHead`). The backbone is not the paper's: VGG-F (CIFAR-10, NUS-WIDE) and
AlexNet (ImageNet100) are not among the job's models, so a ResNet-18 stands in. The paper gives no
batch size (but ImageNet100's 256, HashNet's), learning rate or schedule: batch 256, 1e-5 with the
hashing layer's 10x (FastAP's, the same group's code) and 224 x 224 images are choices. The configs
of its tables (`tie_aware_*.py`) override the data set, the loss, the number of bits (a sweep over
the table's columns) and the steps.
"""

from experiments.job import config as config_lib


def base() -> config_lib.Config:
  return config_lib.Config(
    data_dir=None,  # Set with --set data_dir=...
    image_size=224,
    resize_size=256,
    sampler="random",
    batch_size=256,
    model="resnet18",
    freeze_batchnorm=True,
    head="hashing",
    tanh_initial=40.0,
    tanh_growth=1.0,
    loss="tie_aware_ap",
    learning_rate=1e-5,
    warmup_steps=0,
    weight_decay=0.0,
    head_lr_multiplier=10.0,
    hashing_convention="released",
    hashing_averaged_over="all",
  )


def bits_sweep(bits: tuple[int, ...]) -> dict[str, dict]:
  """One run per code length of a table's columns: `b` bits and `b + 1` bins (`get_sweep`)."""
  return {f"{b}bits": {"embedding_dim": b, "loss_kwargs": {"num_bins": b + 1}} for b in bits}
