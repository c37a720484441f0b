"""Hashing on the glyphs: tie-aware AP against plain AP surrogates, at 16, 32 and 64 bits.

Command (rerunning it resumes unfinished runs and reuses finished ones):

    python -m experiments.job.main --config experiments/job/configs/glyphs_hashing.py \\
        --workdir runs/glyphs_hashing

He et al. 2018 (Tables 1-2), in small: the hashing head (`networks.HEADS["hashing"]`: the
batch-centred features of the small convolutional network, a linear layer to `b` bits and
`tanh(alpha f)`, alpha = 1, 2, 4 over the three 100-step stages, He et al. App. D) trained from
scratch on the 359 training characters of the glyphs (as in `glyphs.py`) with He et al.'s two
relaxations of tie-aware AP, AP_r (`tie_aware_ap`) and AP_s (`simplified_tie_aware_ap`), with
`b + 1` bins centred on the `b + 1` Hamming distances, against two surrogates of plain AP on the
same relaxed codes: FastAP with `b` intervals (the same `b + 1` centres, but the precision of a
whole tie given to each of its items) and SmoothAP (sigmoid ranks, no bins). Every run is 300
steps of 16 characters x 4 images with AdamW (3e-3, warm-up then cosine decay), trained on the
relaxed Hamming similarity `q.x / b` and evaluated on the binary codes of the 5,919 images of the
359 unseen characters, leave-one-out, by Hamming distance: the column to read is mAP_T
(tie-aware mAP, He et al. eq. 6); R@1 ranks ties pessimistically, so it is low for short codes.

Expected (seed 0; about 2.5 minutes on 2 cores): the untrained network at chance (mAP_T 0.008:
its codes, from uncentred features, barely differ); mAP_T 0.11-0.14 at 16 bits, 0.19-0.21 at 32
and 0.24-0.28 at 64 for every loss, AP_r 0.134, 0.203 and 0.270 (R@1 0.077, 0.245 and 0.397).
Tie-aware AP is ahead of FastAP at every length in both seeds (by 0.013 to 0.030 mAP_T) but
within the seeds' spread of SmoothAP. Both seeds' tables: experiments/RESULTS.md.
"""

from experiments.job import config as config_lib

BITS = (16, 32, 64)


def get_config() -> config_lib.Config:
  return config_lib.Config(
    dataset="glyphs",
    model="small_convnet",
    model_features=(32, 64),
    head="hashing",
    embedding_dim=32,
    tanh_initial=1.0,
    tanh_growth=2.0,
    tanh_every=100,
    loss="tie_aware_ap",
    loss_kwargs={"num_bins": 33},
    batch_size=64,
    samples_per_class=4,
    num_steps=300,
    learning_rate=3e-3,
    head_lr_multiplier=1.0,
    warmup_steps=20,
    eval_every=300,
    checkpoint_every=300,
  )


def get_sweep() -> dict[str, dict]:
  sweep = {}
  for b in BITS:
    sweep[f"ap_r_{b}bits"] = {
      "embedding_dim": b,
      "loss": "tie_aware_ap",
      "loss_kwargs": {"num_bins": b + 1},
    }
    sweep[f"ap_s_{b}bits"] = {
      "embedding_dim": b,
      "loss": "simplified_tie_aware_ap",
      "loss_kwargs": {"num_bins": b + 1},
    }
    sweep[f"fastap_{b}bits"] = {
      "embedding_dim": b,
      "loss": "fastap",
      "loss_kwargs": {"num_intervals": b},
    }
    sweep[f"smoothap_{b}bits"] = {"embedding_dim": b, "loss": "smoothap", "loss_kwargs": {}}
  return sweep
