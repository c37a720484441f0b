"""Tests of `jaxrank.models.extract_descriptors`, `resize_image` and the masked `ResNet`.

The reference is a plain loop over images and scales, each image resized and described at its
own size (no padding, no mask), in float64, with the combination written from the formula. The
`embed_fn`s are poolings of the raw pixels (cheap to compile at every bucket shape); one small
ResNet checks what the mask does in a network.
"""

from __future__ import annotations

import logging
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxrank import models

SCALES = (1.0, 2**-0.5, 0.5)
# Images of many sizes and aspect ratios; two above MAX_SIDE (capped before scaling).
SIZES = ((20, 31), (9, 9), (33, 16), (40, 12), (20, 31), (1, 5), (17, 24))
MAX_SIDE = 36
MULTIPLE = 16


def make_images(sizes=SIZES, seed=0, channels=3):
  rng = np.random.default_rng(seed)
  return [rng.random((h, w, channels)).astype(np.float32) for h, w in sizes]


class Counted:
  """A jitted masked pooling of the pixels that counts its traces (one per compiled program)."""

  def __init__(self, shift=0.0, p=3.0):
    self.traces = 0
    self.shift, self.p = shift, p
    self.fn = jax.jit(self._embed)

  def _embed(self, x, mask):
    self.traces += 1
    # GeM (p, over the masked pixels) of each channel, shifted (negative components when
    # shift > 0), and a constant 1 (no descriptor near 0).
    pooled = models.GeMPool(self.p)(x, mask)
    return jnp.concatenate([pooled - self.shift, jnp.ones((x.shape[0], 1))], axis=1)

  def __call__(self, x, mask):
    return self.fn(x, mask)

  def reference(self, image):
    """The unpadded image's descriptor, float64."""
    gem = np.mean(np.maximum(image.astype(np.float64), 1e-6) ** self.p, (0, 1)) ** (1 / self.p)
    return np.concatenate([gem - self.shift, [1.0]])


def reference_descriptors(embed, images, scales, power, max_side):
  """A loop over images and scales: capped, resized, described unpadded, combined."""
  out = []
  for image in images:
    h, w = image.shape[:2]
    if max(h, w) > max_side:
      r = max_side / max(h, w)
      image = models.resize_image(image, (max(1, round(h * r)), max(1, round(w * r))))
      h, w = image.shape[:2]
    units = []
    for s in scales:
      size = (max(1, int(np.floor(h * s))), max(1, int(np.floor(w * s))))
      d = embed(models.resize_image(image, size))
      units.append(d / np.linalg.norm(d))
    units = np.array(units)
    m = np.mean(np.sign(units) * np.abs(units) ** power, axis=0)
    v = np.sign(m) * np.abs(m) ** (1 / power)
    out.append(v / np.linalg.norm(v))
  return np.array(out)


def bucket_shapes(sizes, scales, max_side, multiple):
  shapes = set()
  for h, w in sizes:
    if max(h, w) > max_side:
      r = max_side / max(h, w)
      h, w = max(1, round(h * r)), max(1, round(w * r))
    for s in scales:
      sh, sw = max(1, int(np.floor(h * s))), max(1, int(np.floor(w * s)))
      shapes.add((-(-sh // multiple) * multiple, -(-sw // multiple) * multiple))
  return shapes


# One embed_fn for the module: its programs compile once (per bucket shape).
@pytest.fixture(scope="module")
def signed():
  return Counted(shift=0.6)


@pytest.mark.parametrize(
  "scales, power, max_side",
  [
    (SCALES, 3.0, MAX_SIDE),
    (SCALES, 1.0, MAX_SIDE),
    (SCALES, 2.5, MAX_SIDE),
    ((1.0,), 3.0, MAX_SIDE),  # Revaud et al. 2019's single scale.
    ((1.5, 0.3), 3.0, None),  # Enlarged; no cap.
  ],
)
def test_multi_scale_descriptors_are_the_unpadded_loops(signed, scales, power, max_side):
  images = make_images()
  got = models.extract_descriptors(
    signed, images, scales=scales, power=power, max_side=max_side, multiple=MULTIPLE, batch_size=3
  )
  expected = reference_descriptors(signed.reference, images, scales, power, max_side or 10**9)
  assert got.dtype == np.float32 and got.shape == (len(SIZES), 4)
  assert (expected < 0).any()  # The signed power is exercised.
  np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6)


def test_non_negative_descriptors_combine_as_cirtorch_and_order_is_kept():
  embed = Counted(shift=0.0, p=2.0)
  images = make_images(seed=1)
  got = models.extract_descriptors(embed, images, max_side=MAX_SIDE, multiple=MULTIPLE)
  # cirtorch's extract_ms: v = (mean_s v_s^p)^(1/p), normalised, with the plain power.
  for image, row in zip(images, got):
    descriptors = []
    for s in SCALES:
      capped = reference_descriptors(embed.reference, [image], [s], 1.0, MAX_SIDE)[0]
      descriptors.append(capped)
    v = np.mean(np.array(descriptors) ** 3.0, axis=0) ** (1 / 3.0)
    np.testing.assert_allclose(row, v / np.linalg.norm(v), rtol=2e-5, atol=2e-6)
  order = np.random.default_rng(0).permutation(len(images))
  shuffled = models.extract_descriptors(
    embed, [images[i] for i in order], max_side=MAX_SIDE, multiple=MULTIPLE
  )
  np.testing.assert_array_equal(shuffled, got[order])


def test_one_program_per_bucket_shape_and_the_log_says_so(caplog):
  embed = Counted()
  images = make_images()
  expected = bucket_shapes(SIZES, SCALES, MAX_SIDE, MULTIPLE)
  assert 1 < len(expected) < len(SIZES) * len(SCALES)
  with caplog.at_level(logging.INFO, logger="jaxrank.models.descriptors"):
    models.extract_descriptors(embed, images, max_side=MAX_SIDE, multiple=MULTIPLE, batch_size=2)
  assert embed.traces == len(expected)
  message = caplog.records[-1].getMessage()
  assert f"in {len(expected)} bucket shapes ({len(expected)} programs of 2 images)" in message
  padding = [float(x) for x in re.findall(r"padding is ([\d.]+) .* \(([\d.]+) in the", message)[0]]
  assert 0 < padding[1] < padding[0] < 1
  # The same buckets again (other images, the same sizes): nothing new compiles.
  models.extract_descriptors(
    embed, make_images(seed=3), max_side=MAX_SIDE, multiple=MULTIPLE, batch_size=2
  )
  assert embed.traces == len(expected)


def test_resize_image_is_jax_linear_antialiased_resize():
  rng = np.random.default_rng(0)
  for (h, w), size in [((13, 17), (5, 24)), ((9, 9), (1, 1))]:
    image = rng.random((h, w, 2)).astype(np.float32)
    expected = jax.image.resize(image, (*size, 2), "linear", antialias=True)
    got = models.resize_image(image, size)
    assert got.dtype == np.float32 and got.shape == (*size, 2)
    np.testing.assert_allclose(got, expected, atol=2e-6)
  uint8 = rng.integers(0, 256, (4, 6, 3), dtype=np.uint8)
  np.testing.assert_array_equal(models.resize_image(uint8, (4, 6)), uint8.astype(np.float32))


@pytest.mark.parametrize(
  "images, kwargs, message",
  [
    ([np.ones((4, 4))], {}, r"images\[0\] must be \[h, w, C\]"),
    ([np.ones((4, 4, 3)), np.ones((4, 0, 3))], {}, r"images\[1\] must be \[h, w, C\]"),
    ([], {}, "images is empty"),
    (np.ones((2, 4, 4, 3)), {}, "images must be a list of"),
    ([np.ones((4, 4, 3)), np.ones((4, 4, 1))], {}, r"images\[1\] has 1 channels"),
    ([np.ones((4, 4, 3))], {"scales": ()}, "scales is empty"),
    ([np.ones((4, 4, 3))], {"scales": (1.0, 0.0)}, "every scale must be > 0"),
    ([np.ones((4, 4, 3))], {"scales": (-0.5,)}, "every scale must be > 0"),
    ([np.ones((4, 4, 3))], {"scales": (np.nan,)}, "every scale must be > 0"),
    ([np.ones((4, 4, 3))], {"scales": (np.inf,)}, "every scale must be finite"),
    ([np.ones((4, 4, 3))], {"power": 0.0}, "power must be > 0"),
    ([np.ones((4, 4, 3))], {"batch_size": 0}, "batch_size must be a positive int"),
  ],
)
def test_bad_inputs_raise_one_clear_value_error(images, kwargs, message):
  with pytest.raises(ValueError, match=f"extract_descriptors: {message}"):
    models.extract_descriptors(lambda x, m: x.mean((1, 2)), images, **kwargs)


def test_embed_fn_must_return_one_row_per_image():
  with pytest.raises(ValueError, match=r"embed_fn must return \[n, D\] for n = 2 images"):
    models.extract_descriptors(lambda x, m: x.mean((0, 1, 2)), [np.ones((4, 4, 3))], batch_size=2)
  with pytest.raises(TypeError, match="embed_fn must be a function"):
    models.extract_descriptors(None, [np.ones((4, 4, 3))])  # type: ignore[arg-type]


# The masked ResNet: one small network, built once.


def numpy_weights(path, leaf):
  """A variable of the abstract network drawn in numpy: building a ResNet eagerly compiles each
  initialiser at each shape (seconds on CPU). He normal kernels, BatchNorm the identity, GeM p 3."""
  name = path[-2].key if isinstance(path[-1], jax.tree_util.GetAttrKey) else path[-1].key
  rng = np.random.default_rng(len(jax.tree_util.keystr(path)))
  if name == "kernel":
    std = np.sqrt(2 / np.prod(leaf.shape[:-1]))
    return (rng.normal(size=leaf.shape) * std).astype(leaf.dtype)
  if name in ("scale", "var"):
    return np.ones(leaf.shape, leaf.dtype)
  return np.full(leaf.shape, 3.0 if name == "p" else 0.0, leaf.dtype)


@pytest.fixture(scope="module", params=[False, True], ids=["basic", "bottleneck"])
def resnet(request):
  def build():
    net = models.ResNet(
      (1, 1, 1, 1), bottleneck=request.param, pool=models.GeMPool(3.0), rngs=nnx.Rngs(0)
    )
    return models.EmbeddingModel(net, models.EmbeddingHead(net.out_features, 8, rngs=nnx.Rngs(1)))

  graph, abstract = nnx.split(nnx.eval_shape(build))
  model = nnx.merge(graph, jax.tree_util.tree_map_with_path(numpy_weights, abstract))
  model.eval()
  graph, state = nnx.split(model)
  forward = jax.jit(lambda s, x, m: nnx.merge(graph, s)(x, mask=m))
  plain = jax.jit(lambda s, x: nnx.merge(graph, s)(x))
  return model, state, forward, plain


def test_a_masked_resnet_gives_the_unpadded_images_descriptors(resnet):
  model, state, forward, plain = resnet
  rng = np.random.default_rng(0)
  # Sides odd and even (each stride-2 layer's ceil(n / 2)), padded by 1 to 31 pixels.
  own = rng.normal(size=(2, 33, 63, 3)).astype(np.float32)
  canvas = np.full((2, 64, 64, 3), np.nan, np.float32)  # Whatever the padding holds.
  mask = np.zeros((2, 64, 64), bool)
  canvas[:, :33, :63], mask[:, :33, :63] = own, True
  padded = np.asarray(forward(state, canvas, mask))
  np.testing.assert_allclose(padded, np.asarray(plain(state, own)), rtol=1e-5, atol=1e-6)
  # (Masking only the pooling is not enough: experiments/benchmarks/padded_descriptors.py.)
  # The pooling gets the anchor rule's mask of the stride-32 map (the network traced, nothing
  # compiled; the mask's own operations evaluated as they are traced).
  net = model.backbone
  captured = {}

  def traced(x):
    with jax.ensure_compile_time_eval():
      return net(x, mask)

  pool, net.pool = net.pool, lambda fmap, cells: captured.setdefault("cells", cells) + fmap[..., 0]
  try:
    jax.eval_shape(traced, canvas)
  finally:
    net.pool = pool
  np.testing.assert_array_equal(captured["cells"], models.feature_map_mask(mask))
  with pytest.raises(ValueError, match=r"ResNet: mask must be a boolean mask shaped like"):
    net(canvas, mask[:, :32])


def test_the_unmasked_resnet_is_the_program_it_was(resnet):
  model = resnet[0]
  net = model.backbone
  x = jnp.ones((1, 32, 32, 3))

  def before(x):  # ResNet.__call__ before masks.
    h = nnx.relu(net.bn1(net.conv1(x)))
    h = nnx.max_pool(h, window_shape=(3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
    for stage in (net.layer1, net.layer2, net.layer3, net.layer4):
      for block in stage:
        h = block(h)
    return net.pool(h)

  assert str(jax.make_jaxpr(net)(x)) == str(jax.make_jaxpr(before)(x))
  assert str(jax.make_jaxpr(model)(x)) == str(jax.make_jaxpr(lambda x: model.head(before(x)))(x))
