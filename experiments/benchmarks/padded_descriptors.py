"""What padding does to a ResNet's descriptor of an image, and what masking it costs.

`.venv/bin/python -m experiments.benchmarks.padded_descriptors [--multiple 64]` (a few minutes on
2 CPU cores); `.venv-accel/bin/python -m experiments.benchmarks.padded_descriptors --accelerators`
(the masks' cost on a TPU v5e and an H100, compiled without either: `accelerator_costs`).

A randomly initialised ResNet-18 in inference mode, pooled by GeM (p = 3), describes images of 64
to 128 pixels a side (smooth random images: 8 x 8 Gaussian noise enlarged by `resize_image`, plus
fine noise) at their own size, and padded at the bottom and right to their bucket (each side
rounded up to `multiple`) in two ways:

* `pool only`: the network run on the zero-padded canvas unmasked, its feature map pooled over the
  image's own cells (`feature_map_mask`): the edge cells see the padding's activations;
* `every layer`: `ResNet(x, mask)`, which also sets the cells outside the image to 0 at the input
  of every spatial convolution and of the max-pool, as the unpadded network's zero padding.

Printed for each, over the images: the cosine between the padded and the unpadded descriptors,
raw and centred (the mean unpadded descriptor subtracted, as landmark retrieval's whitening
does: pooled ReLU features are all non-negative, so unrelated images are far from orthogonal
and the raw cosine says little; the cosine between different images is printed as the scale),
and how often a padded descriptor's nearest unpadded descriptor is its own image's. Then the
padding's share of the pixels (`jaxrank.data.bucket_cost`), and XLA's cost estimate of the
masked against the unmasked network (`[8, 224, 224, 3]`, this machine's compiler).

Random weights are no trained network: these say how much the padding moves the features of a
network that no training has made insensitive to it, not what it does to a trained network's
retrieval.
"""

from __future__ import annotations

import argparse
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrank import models


def _image(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
  coarse = rng.normal(size=(8, 8, 3)).astype(np.float32)
  return (models.resize_image(coarse, (h, w)) + 0.3 * rng.normal(size=(h, w, 3))).astype(np.float32)


def measure(num_images: int, multiple: int, seed: int = 0) -> dict[str, Any]:
  """Each image's unpadded and padded descriptors `[n, 512]` (both ways), sizes and padding."""
  net = models.resnet18(pool=models.GeMPool(3.0), rngs=nnx.Rngs(seed))
  net.eval()
  graph, state = nnx.split(net)
  gem = net.pool
  unpooled = models.resnet18(pool=lambda fmap: fmap, rngs=nnx.Rngs(seed))  # The same weights.
  unpooled.eval()
  assert np.array_equal(unpooled.layer4[1].conv2.kernel[...], net.layer4[1].conv2.kernel[...])
  masked = jax.jit(lambda s, x, m: nnx.merge(graph, s)(x, m))
  unmasked = jax.jit(lambda s, x: nnx.merge(graph, s)(x))
  fmap = jax.jit(lambda x: unpooled(x))
  rng = np.random.default_rng(seed)
  sizes = rng.integers(64, 129, size=(num_images, 2))
  out: dict[str, list] = {"own": [], "pool only": [], "every layer": [], "pads": []}
  for h, w in sizes.tolist():
    image = _image(rng, h, w)[None]
    shape = (-(-h // multiple) * multiple, -(-w // multiple) * multiple)
    canvas = np.zeros((1, *shape, 3), np.float32)
    mask = np.zeros((1, *shape), bool)
    canvas[0, :h, :w], mask[0, :h, :w] = image[0], True
    out["own"].append(np.asarray(unmasked(state, jnp.asarray(image)))[0])
    out["every layer"].append(np.asarray(masked(state, canvas, mask))[0])
    cells = models.feature_map_mask(mask)
    out["pool only"].append(np.asarray(gem(fmap(canvas), cells))[0])
    out["pads"].append(shape[0] * shape[1] - h * w)
  result: dict[str, Any] = {k: np.array(v) for k, v in out.items()}
  result["sizes"] = [tuple(s) for s in sizes.tolist()]
  x = jax.ShapeDtypeStruct((8, 224, 224, 3), jnp.float32)
  m = jax.ShapeDtypeStruct((8, 224, 224), jnp.bool_)
  costs = {}
  for name, lowered in (
    ("unmasked", unmasked.lower(state, x)),
    ("masked", masked.lower(state, x, m)),
  ):
    cost = lowered.compile().cost_analysis() or {}
    cost = cost[0] if isinstance(cost, list) else cost
    costs[name] = (float(cost.get("flops", 0)), float(cost.get("bytes accessed", 0)))
  result["costs"] = costs
  return result


def accelerator_costs(size: int = 224, batch: int = 8) -> list[str]:
  """ResNet-18 (GeM, an `EmbeddingHead`, inference mode) masked and unmasked, compiled without a
  device for a TPU v5e and an H100 (`experiments.benchmarks.accelerators`; run in `.venv-accel`
  with `--accelerators`): the compilers' figures, one line each."""
  from experiments.benchmarks import accelerators  # pylint: disable=g-import-not-at-top

  def build():
    net = models.resnet18(pool=models.GeMPool(3.0), rngs=nnx.Rngs(0))
    return models.EmbeddingModel(net, models.EmbeddingHead(512, 512, rngs=nnx.Rngs(1)))

  model = nnx.merge(*nnx.split(nnx.eval_shape(build)))
  model.eval()
  graph, abstract = nnx.split(model)
  lines = []
  for target in ("v5e", "h100"):
    sharding = jax.sharding.SingleDeviceSharding(accelerators.devices(target)[0])
    state = jax.tree.map(
      lambda s, sharding=sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
      abstract,
    )
    x = jax.ShapeDtypeStruct((batch, size, size, 3), jnp.float32, sharding=sharding)
    m = jax.ShapeDtypeStruct((batch, size, size), jnp.bool_, sharding=sharding)
    options: dict[str, str | bool] = (
      {"xla_gpu_enable_triton_gemm": False} if target == "h100" else {}
    )
    figures = {}
    for name, fn, args in (
      ("unmasked", lambda s, x: nnx.merge(graph, s)(x), (state, x)),
      ("masked", lambda s, x, m: nnx.merge(graph, s)(x, mask=m), (state, x, m)),
    ):
      compiled = jax.jit(fn).lower(*args).compile(compiler_options=options)
      figures[name] = accelerators.analyse(compiled)
    for field in ("cycles", "estimate", "bytes", "temporaries"):
      before, after = getattr(figures["unmasked"], field), getattr(figures["masked"], field)
      if before and after is not None:
        lines.append(
          f"{target} [{batch}, {size}, {size}, 3] {field}: masked / unmasked {after / before:.3f}"
        )
  return lines


def _unit(x: np.ndarray) -> np.ndarray:
  return x / np.linalg.norm(x, axis=1, keepdims=True)


def _spread(values: np.ndarray) -> str:
  return f"min {values.min():.4f}  median {np.median(values):.4f}  max {values.max():.4f}"


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--num_images", type=int, default=24)
  parser.add_argument("--multiple", type=int, default=64)
  parser.add_argument(
    "--accelerators",
    action="store_true",
    help="only the masks' cost, compiled for a TPU v5e and an H100 (run in .venv-accel)",
  )
  args = parser.parse_args()
  if args.accelerators:
    from experiments.benchmarks import accelerators  # pylint: disable=g-import-not-at-top

    accelerators.set_environment()
    print("\n".join(accelerator_costs()))
    return
  import jaxrank.data as jd  # pylint: disable=g-import-not-at-top  (TensorFlow: here only)

  got = measure(args.num_images, args.multiple)
  n = len(got["own"])
  padded = got["pads"] > 0
  print(f"{n} images of 64 to 128 pixels a side, {padded.sum()} padded; multiple {args.multiple}")
  for centred in (False, True):
    shift = got["own"].mean(axis=0) if centred else 0.0
    own = _unit(got["own"] - shift)
    label = "centred" if centred else "raw"
    between = (own @ own.T)[np.triu_indices(n, 1)]
    print(f"{label:8s} cosine between different images:   {_spread(between)}")
    for way in ("pool only", "every layer"):
      pad = _unit(got[way] - shift)
      same = np.sum(own * pad, axis=1)[padded]
      found = np.mean(np.argmax(pad @ own.T, axis=1) == np.arange(n))
      print(
        f"{label:8s} {way:12s} padded vs unpadded: {_spread(same)}  nearest is own: {found:.3f}"
      )
  cost = jd.bucket_cost(got["sizes"], multiple=args.multiple)
  print(f"padding: {cost.padded_fraction:.3f} of the pixels, {cost.num_shapes} programs")
  (f0, b0), (f1, b1) = got["costs"]["unmasked"], got["costs"]["masked"]
  print(
    f"masked / unmasked at [8, 224, 224, 3] (XLA:CPU): flops {f1 / f0:.4f}, bytes {b1 / b0:.4f}"
  )


if __name__ == "__main__":
  main()
