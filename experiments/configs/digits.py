"""The main job: every loss family trained briefly on the bundled digits, against an untrained net.

Command (what `make demo` runs):

    python -m experiments.main --config experiments/configs/digits.py --workdir runs/digits

Data: scikit-learn's 8 x 8 digits, class-disjoint (train on 0-4, retrieve among 5-9). Model: a
small convolutional network with a 32-d L2-normalised embedding. Each loss trains for 300 steps of
5 classes x 12 images. Expected result: TO BE MEASURED.
"""

from experiments import train


def get_config() -> train.Config:
  return train.Config(
      dataset="digits",
      model="small_convnet",
      model_features=(64, 128),
      embedding_dim=64,
      batch_size=60,
      samples_per_class=12,
      num_steps=300,
      learning_rate=1e-4,
      warmup_steps=20,
      eval_every=100,
      checkpoint_every=100,
      eval_seen_classes=True,
  )


def get_sweep() -> dict[str, dict]:
  return {
      "fastap": {"loss": "fastap"},
      "soft_binning_ap": {"loss": "soft_binning_ap"},
      "blackbox_ap": {"loss": "blackbox_ap"},
      "smoothap": {"loss": "smoothap"},
      "supap": {"loss": "supap"},
      "roadmap": {"loss": "roadmap"},
  }
