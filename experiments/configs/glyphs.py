"""Each loss family and the three baselines trained briefly on the glyphs, beside an untrained net.

Command (the future `make demo`; rerunning it resumes unfinished runs and reuses finished ones):

    python -m experiments.main --config experiments/configs/glyphs.py --workdir runs/glyphs

Data: `jaxrank.data.load_glyphs` as the job's `dataset="glyphs"` loads it
(`input_pipeline.GLYPHS_PARAMS`: characters drawn by at least 16 of matplotlib's 21 typefaces,
16 x 16 grey images, half-strength augmentation): 359 training characters (5,879 images) and 359
unseen test characters (5,919 images), 9 super-classes (scripts and Unicode blocks), generated
offline in about 4 s and cached. Model: the small convolutional network (32 and 64 channels,
LayerNorm, average pooling) with a 128-d L2-normalised embedding. Each loss trains 300 steps of
16 characters x 4 images with AdamW (3e-3, warm-up then cosine decay), at the paper's default
hyperparameters (FastAP with 40 bins, as for the digits). Retrieval is leave-one-out among the
unseen characters' images.

Expected (seed 0, measured on a shared 2-core machine, about 25 s of CPU per run): the untrained
network at R@1 0.007 and MAP@R 0.001 on the unseen characters (chance level); raw pixels
(mean-centred, L2-normalised 256-d vectors) at R@1 0.474 and MAP@R 0.111; SmoothAP at R@1 0.440
and MAP@R 0.160; FastAP (40 bins) at R@1 0.335 and MAP@R 0.106. The other rows are still to be
measured with this config. Random P x K batches: super-class batches (4 super-classes x 4
characters x 4 images) gave SmoothAP R@1 0.378 and MAP@R 0.124.
"""

from experiments import config as config_lib


def get_config() -> config_lib.Config:
  return config_lib.Config(
      dataset="glyphs",
      model="small_convnet",
      model_features=(32, 64),
      embedding_dim=128,
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
  return {
      "fastap_40bins": {"loss": "fastap", "loss_kwargs": {"num_bins": 40}},
      "soft_binning_ap": {"loss": "soft_binning_ap"},
      "blackbox_ap": {"loss": "blackbox_ap"},
      "smoothap": {"loss": "smoothap"},
      "supap": {"loss": "supap"},
      "roadmap": {"loss": "roadmap"},
      "contrastive": {"loss": "contrastive"},
      "triplet": {"loss": "triplet"},
      "multi_similarity": {"loss": "multi_similarity"},
  }
