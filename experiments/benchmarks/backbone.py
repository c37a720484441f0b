"""Forward + backward images/s of a ResNet-50, jaxrank (JAX) beside torchvision (PyTorch), on CPU.

Both networks have random weights (nothing is downloaded), train-mode BatchNorm, `[32, 224, 224,
3]` random images and the gradient of the sum of the features with respect to every parameter;
JAX's step is jitted and compiled before timing, PyTorch's runs eagerly after one warm-up step.
Each is timed over `--steps` steps and the median step gives images/s. Prints one table; `--docs`
also writes it to docs/_generated/backbone_steps.json, which docs/guide/pretrained.rst shows.

    .venv/bin/python -m experiments.benchmarks.backbone --steps 3 --docs
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from experiments import docs_data
from jaxrank import models


def _median_seconds(step, steps: int) -> float:
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    step()
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def bench_jax(x: np.ndarray, steps: int) -> float:
  model = nnx.eval_shape(lambda: models.resnet50(rngs=nnx.Rngs(0)))
  graph, abstract = nnx.split(model)
  state = jax.tree.map(lambda s: 0.01 * jnp.ones(s.shape, s.dtype), abstract)
  grad = jax.jit(jax.grad(lambda st, x: jnp.sum(nnx.merge(graph, st)(x))))
  images = jnp.asarray(x)
  jax.block_until_ready(grad(state, images))  # Compile.
  return _median_seconds(lambda: jax.block_until_ready(grad(state, images)), steps)


def bench_torch(x: np.ndarray, steps: int) -> float:
  import torch  # pylint: disable=g-import-not-at-top
  import torchvision  # pylint: disable=g-import-not-at-top

  net = torchvision.models.resnet50(weights=None)
  net.fc = torch.nn.Identity()
  images = torch.from_numpy(x.transpose(0, 3, 1, 2).copy())

  def step():
    net.zero_grad()
    net(images).sum().backward()

  step()  # Warm-up.
  return _median_seconds(step, steps)


def table_lines(rows: list[tuple[str, float]], batch: int, size: int, steps: int) -> list[str]:
  """The table as Markdown lines: a title, the rows (seconds a step, images/s), the ratio."""
  import torch  # pylint: disable=g-import-not-at-top

  lines = [
    f"ResNet-50 forward+backward, random weights, batch {batch}, {size}x{size}, CPU; median of "
    f"{steps} timed steps; jax {jax.__version__}, torch {torch.__version__.split('+')[0]} "
    f"({torch.get_num_threads()} threads)",
    "| implementation | s/step | images/s |",
    "| --- | --- | --- |",
    *(f"| {name} | {seconds:.2f} | {batch / seconds:.1f} |" for name, seconds in rows),
  ]
  return [*lines, f"ratio jaxrank / torchvision (images/s): {rows[1][1] / rows[0][1]:.2f}"]


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=3)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--size", type=int, default=224)
  parser.add_argument(
    "--docs",
    action="store_true",
    help="also write the table to docs/_generated/backbone_steps.json",
  )
  args = parser.parse_args(argv)
  x = np.random.default_rng(0).normal(size=(args.batch, args.size, args.size, 3))
  x = x.astype(np.float32)
  rows = [
    ("jaxrank (JAX)", bench_jax(x, args.steps)),
    ("torchvision (PyTorch)", bench_torch(x, args.steps)),
  ]
  lines = table_lines(rows, args.batch, args.size, args.steps)
  print("\n".join(lines))
  if args.docs:
    print("wrote", docs_data.write_table("backbone_steps", **docs_data.markdown_table(lines)))


if __name__ == "__main__":
  main()
