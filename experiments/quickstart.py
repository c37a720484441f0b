"""The quickstart of the documentation (docs/quickstart.md shows this file, part by part).

    .venv/bin/python -m experiments.quickstart --out docs/_generated   # about 10 s on 2 cores

A linear embedding of toy data trained with `jaxrank.fastap_loss` in a jitted optax step, then
evaluated with `jaxrank.evaluate_retrieval` on classes it never saw. It writes the page's figure
(`quickstart.png`: the loss by step, Recall@k before and after training) and its table
(`quickstart.json`). tests/test_quickstart.py runs it in CI, so the page's code stays working.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

# [data-start]
import numpy as np

DIM, INFORMATIVE = 64, 8  # Features; only the first 8 carry the class, the rest is noise.


def make_data(num_classes: int, per_class: int, seed: int):
  """Features `[num_classes * per_class, DIM]` and class labels; each seed gives new classes."""
  rng = np.random.default_rng(seed)
  centres = np.zeros((num_classes, DIM), np.float32)
  centres[:, :INFORMATIVE] = rng.standard_normal((num_classes, INFORMATIVE))
  labels = np.repeat(np.arange(num_classes), per_class)
  noise = rng.standard_normal((len(labels), DIM)).astype(np.float32)
  noise[:, :INFORMATIVE] *= 0.3  # Small noise on the class's features, unit noise elsewhere.
  return centres[labels] + noise, labels


train_x, train_y = make_data(num_classes=200, per_class=8, seed=0)
test_x, test_y = make_data(num_classes=100, per_class=8, seed=1)  # Classes never seen in training.
# [data-end]

# [step-start]
import jax
import optax

import jaxrank


def loss_fn(params, x, y):
  embeddings = x @ params["w"]  # [B, 16]
  # Each embedding queries the rest of the batch: cosine scores [B, B], relevance = same class.
  scores, relevance, where = jaxrank.batch_retrieval(embeddings, y)
  return jaxrank.fastap_loss(scores, relevance, where=where)


optimizer = optax.adam(learning_rate=0.01)


@jax.jit
def train_step(params, opt_state, x, y):
  loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
  updates, opt_state = optimizer.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state, loss


# [step-end]


# [train-start]
def batches(labels, classes_per_batch: int, per_class: int, seed: int):
  """Endless batches of indices: `classes_per_batch` random classes, `per_class` items of each."""
  rng = np.random.default_rng(seed)
  by_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]
  while True:
    classes = rng.choice(len(by_class), classes_per_batch, replace=False)
    yield np.concatenate([rng.choice(by_class[c], per_class, replace=False) for c in classes])


params = {"w": jax.random.normal(jax.random.key(0), (DIM, 16)) / np.sqrt(DIM)}
opt_state = optimizer.init(params)
before = jaxrank.evaluate_retrieval(test_x @ params["w"], test_y)  # The untrained projection.

losses = []
for _, index in zip(range(200), batches(train_y, classes_per_batch=16, per_class=4, seed=0)):
  params, opt_state, loss = train_step(params, opt_state, train_x[index], train_y[index])
  losses.append(float(loss))

after = jaxrank.evaluate_retrieval(test_x @ params["w"], test_y)  # Leave-one-out on unseen classes.
print({k: round(float(v), 3) for k, v in after.items()})
# [train-end]


def figure(losses, before, after, ks=(1, 2, 4, 8)):
  """The loss by step, and Recall@k on the unseen classes before and after training."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
  left.plot(losses, lw=1)
  left.set(xlabel="step", ylabel="fastap_loss (batch of 64)", title="training")
  width = 0.38
  positions = np.arange(len(ks))
  right.bar(positions - width / 2, [before[f"recall@{k}"] for k in ks], width, label="untrained")
  right.bar(positions + width / 2, [after[f"recall@{k}"] for k in ks], width, label="trained")
  right.set(
    xticks=positions,
    xticklabels=[f"R@{k}" for k in ks],
    ylim=(0, 1.25),
    yticks=np.linspace(0, 1, 6),
    title="evaluation on 100 unseen classes",
  )
  right.legend(loc="upper center", ncols=2, frameon=False)
  fig.tight_layout()
  return fig


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    "--out",
    type=pathlib.Path,
    required=True,
    help="folder for quickstart.png and quickstart.json (docs/_generated)",
  )
  args = parser.parse_args(argv)
  from experiments import docs_data  # pylint: disable=g-import-not-at-top

  rows = [
    [name, *(f"{float(result[k]):.3f}" for k in ("recall@1", "recall@4", "map@r", "map"))]
    for name, result in (("untrained", before), ("trained, 200 steps", after))
  ]
  docs_data.write_table(
    "quickstart",
    title="The quickstart's evaluation on 100 unseen classes (leave-one-out)",
    columns=["embedding", "Recall@1", "Recall@4", "MAP@R", "mAP"],
    rows=rows,
    figure=figure(losses, before, after),
    directory=args.out,
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
