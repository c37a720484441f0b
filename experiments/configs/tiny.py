"""A few steps of a tiny network on the digits: what the tests run end to end.

Command:

    python -m experiments.main --config experiments/configs/tiny.py --workdir /tmp/tiny

Expected result: finishes in seconds; the metrics are those of a barely trained network (R@1 about
0.9 on the unseen digits; the point is that every part of the loop runs).
"""

from experiments import train


def get_config() -> train.Config:
  return train.Config(
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
