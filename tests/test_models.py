"""Tests of `jaxrank.models`: shapes, normalisation, BatchNorm modes, gradients, saved weights.

On CPU, compiling an eager op or a random draw costs a fraction of a second per new shape, and a
ResNet has dozens of shapes: ResNet-18 is built for real (twice, the second time from the cache of
compiled shapes), always at the input shape `[2, 32, 32, 3]`; ResNet-50 only abstractly.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxrank import hashing
from jaxrank import models

# Its expensive fixtures are session-scoped and its tests kept on one pytest-xdist worker (`make
# test`): a module-scoped fixture is set up again whenever the worker returns to the module.
pytestmark = pytest.mark.xdist_group("test_models")

IMAGES = (2, 32, 32, 3)
DIGITS = (4, 8, 8, 1)

# Shared jitted functions: nnx.jit compiles once per model structure and input shape.
forward = nnx.jit(lambda model, x: model(x))
weighted_sum_grad = nnx.jit(nnx.grad(lambda model, x, w: jnp.sum(model(x) * w)))


def images(shape, seed=0):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def small_model(head="embedding", seed=0):
  rngs = nnx.Rngs(seed)
  backbone = models.SmallConvNet(1, features=(4, 8), rngs=rngs)
  if head == "embedding":
    return models.EmbeddingModel(backbone, models.EmbeddingHead(8, 6, rngs=rngs))
  return models.EmbeddingModel(backbone, models.HashingHead(8, 6, rngs=rngs))


def variables(model):
  return {path: np.asarray(v[...]) for path, v in nnx.to_flat_state(nnx.state(model))}


@pytest.fixture(scope="session")
def resnet18():
  return models.resnet18(rngs=nnx.Rngs(0))


# Shapes.


@pytest.mark.parametrize(
  "shape, features",
  [
    (DIGITS, (32, 64)),
    (IMAGES, (4, 8, 16)),
  ],
)
def test_small_conv_net_against_numpy(shape, features):
  net = models.SmallConvNet(shape[-1], features=features, rngs=nnx.Rngs(0))
  # Non-trivial LayerNorm scales and biases (they start at 1 and 0).
  rng = np.random.default_rng(1)
  for norm in net.norms:
    norm.scale[...] = jnp.asarray(rng.uniform(0.5, 1.5, norm.scale.shape), jnp.float32)
    norm.bias[...] = jnp.asarray(rng.normal(0, 0.3, norm.bias.shape), jnp.float32)
  x = images(shape)
  out = forward(net, x)
  assert net.out_features == features[-1]
  assert out.shape == (shape[0], features[-1])
  np.testing.assert_allclose(out, small_conv_net_numpy(net, x), rtol=1e-4, atol=1e-5)


def small_conv_net_numpy(net, x):
  """SmallConvNet's forward pass written out in float64 numpy: per stage (a 2x2 max-pool before
  every stage but the first) a 3x3 convolution with zero padding, LayerNorm over the channels
  (epsilon 1e-6) and relu; then the mean over the pixels."""
  return small_conv_net_map_numpy(net, x).mean(axis=(1, 2))


def small_conv_net_map_numpy(net, x, mask=None):
  """The last feature map of `small_conv_net_numpy`, before the pooling; with a pixel mask
  `[N, H, W]`, each stage's output zeroed outside the mask's anchor cells."""
  x = np.asarray(x, np.float64)
  for i, (conv, norm) in enumerate(zip(net.convs, net.norms)):
    if i > 0:
      n, h, w, c = x.shape
      x = x[:, : h // 2 * 2, : w // 2 * 2].reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))
    kernel, bias = (np.asarray(v[...], np.float64) for v in (conv.kernel, conv.bias))
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    h, w = x.shape[1:3]
    y = bias + sum(
      np.einsum("nhwc,co->nhwo", padded[:, di : di + h, dj : dj + w], kernel[di, dj])
      for di in range(3)
      for dj in range(3)
    )
    mean, var = y.mean(-1, keepdims=True), y.var(-1, keepdims=True)
    y = (y - mean) / np.sqrt(var + 1e-6) * np.asarray(norm.scale[...]) + np.asarray(norm.bias[...])
    x = np.maximum(y, 0)
    if mask is not None:
      x = x * mask[:, :: 2**i, :: 2**i][:, : x.shape[1], : x.shape[2], None]
  return x


def test_small_conv_net_pools_with_gem_over_a_pixel_mask():
  """A pooling passed in (GeM, p = 3) and a pixel mask: the padding and every stage's padding
  cells zeroed (the anchor rule), then GeM over the image's own cells of the stride-4 map; an
  image whose sides are multiples of 4 gives its unpadded features; all True is no mask."""
  net = models.SmallConvNet(3, features=(4, 6, 8), pool=models.GeMPool(p=3.0), rngs=nnx.Rngs(0))
  rng = np.random.default_rng(2)
  for norm in net.norms:
    norm.bias[...] = jnp.asarray(rng.normal(0, 0.3, norm.bias.shape), jnp.float32)
  x = images((2, 18, 26, 3))
  mask = np.zeros((2, 18, 26), bool)
  mask[0, :11, :26], mask[1, :16, :8] = True, True  # 11 x 26 and 16 x 8 images.
  masked = nnx.jit(lambda model, x, mask: model(x, mask))
  got = np.asarray(masked(net, x, mask))
  want = []
  for image, m in zip(np.where(mask[..., None], np.asarray(x), 0.0), mask):
    maps = small_conv_net_map_numpy(net, image[None], mask=m[None])[0]
    cells = m[::4, ::4][:4, :6]  # ceil(11 / 4) = 3 rows; 16 x 8: 4 x 2 cells.
    want.append((np.maximum(maps[cells], 1e-6) ** 3).mean(axis=0) ** (1 / 3))
  np.testing.assert_allclose(got, np.stack(want), rtol=1e-4, atol=1e-5)
  alone = forward(net, x[1:, :16, :8])  # Sides multiples of 4: the unpadded image's features.
  np.testing.assert_allclose(got[1:], alone, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(masked(net, x, np.ones((2, 18, 26), bool)), forward(net, x), rtol=1e-5)
  with pytest.raises(ValueError, match="SmallConvNet: mask"):
    net(x, mask[:, :10])


def test_small_conv_net_output_does_not_depend_on_the_batch():
  model = small_model()
  assert not nnx.state(model, nnx.BatchStat)
  x = images(DIGITS)
  other = x.at[1:].set(images(DIGITS[1:], seed=1))
  np.testing.assert_array_equal(forward(model, x)[0], forward(model, other)[0])


def test_resnet18_shape(resnet18):
  resnet18.eval()
  out = resnet18(images(IMAGES))
  assert resnet18.out_features == 512
  assert out.shape == (2, 512)
  assert np.all(np.isfinite(out))


def test_resnet50_shape():
  # Abstract (`nnx.eval_shape`): building and running it for real would take 10-20 s on CPU.
  net = nnx.eval_shape(lambda: models.resnet50(rngs=nnx.Rngs(0)))
  out = nnx.eval_shape(lambda m, x: m(x), net, jax.ShapeDtypeStruct(IMAGES, jnp.float32))
  assert net.out_features == 2048
  assert (out.shape, out.dtype) == ((2, 2048), jnp.float32)
  assert [len(s) for s in (net.layer1, net.layer2, net.layer3, net.layer4)] == [3, 4, 6, 3]
  assert net.layer1[0].conv3.kernel.shape == (1, 1, 64, 256)
  assert net.layer2[0].conv2.strides == (2, 2) and net.layer2[0].conv1.strides == (1, 1)
  assert net.layer4[0].downsample[0].kernel.shape == (1, 1, 1024, 2048)
  num_params = sum(v.size for _, v in nnx.to_flat_state(nnx.state(net, nnx.Param)))
  assert num_params == 23_508_032  # torchvision's resnet50 without `fc`


def test_resnet_in_channels():
  net = nnx.eval_shape(lambda: models.resnet18(in_channels=1, rngs=nnx.Rngs(0)))
  out = nnx.eval_shape(lambda m, x: m(x), net, jax.ShapeDtypeStruct((2, 32, 32, 1), jnp.float32))
  assert net.conv1.kernel.shape == (7, 7, 1, 64) and out.shape == (2, 512)


def test_resnet18_structure(resnet18):
  assert [len(s) for s in (resnet18.layer1, resnet18.layer2, resnet18.layer3, resnet18.layer4)] == [
    2,
    2,
    2,
    2,
  ]
  assert resnet18.layer1[0].downsample is None
  assert resnet18.layer2[0].downsample[0].kernel.shape == (1, 1, 64, 128)
  assert resnet18.layer2[0].downsample[0].strides == (2, 2)
  bn = resnet18.bn1
  assert (bn.momentum, bn.epsilon) == (0.9, 1e-5)


@pytest.mark.parametrize(
  "make, message",
  [
    (lambda: models.SmallConvNet(1, features=(), rngs=nnx.Rngs(0)), "SmallConvNet"),
    (lambda: models.ResNet((2, 2, 2), bottleneck=False, rngs=nnx.Rngs(0)), "ResNet"),
  ],
)
def test_bad_arguments(make, message):
  with pytest.raises(ValueError, match=message):
    make()


def test_wrong_channels():
  net = models.SmallConvNet(3, features=(4,), rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match=r"SmallConvNet: x must be \[N, H, W, 3\]"):
    net(images(DIGITS))


# Heads.


def test_embedding_head_unit_rows():
  head = models.EmbeddingHead(5, 3, rngs=nnx.Rngs(0))
  nnx.update(head, {"linear": {"bias": jnp.asarray([0.5, -0.25, 1.0])}})
  x = images((7, 5))
  out = head(x)
  assert out.shape == (7, 3)
  h = np.asarray(x, np.float64) @ np.asarray(head.linear.kernel[...]) + [0.5, -0.25, 1.0]
  np.testing.assert_allclose(out, h / np.linalg.norm(h, axis=-1, keepdims=True), rtol=1e-5)
  np.testing.assert_allclose(np.linalg.norm(out, axis=-1), 1.0, rtol=1e-6)


def test_embedding_of_zeros_is_finite():
  model = small_model()
  x = jnp.zeros(DIGITS)
  out = forward(model, x)
  assert out.shape == (4, 6)
  # The whole network maps zeros to zeros (zero biases): the head keeps them zero, not NaN.
  assert np.all(np.isfinite(out))
  norms = np.linalg.norm(out, axis=-1)
  assert np.all(np.isclose(norms, 1.0, rtol=1e-6) | (norms == 0.0))
  grads = weighted_sum_grad(model, x, images((4, 6), seed=3))
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  head = models.EmbeddingHead(4, 3, rngs=nnx.Rngs(0))
  nnx.update(head, {"linear": {"bias": jnp.ones(3)}})
  np.testing.assert_allclose(np.linalg.norm(head(jnp.zeros((1, 4))), axis=-1), 1.0, rtol=1e-6)


def test_hashing_head_range_and_sign_limit():
  head = models.HashingHead(5, 16, rngs=nnx.Rngs(0))
  x = images((8, 5))
  signs = hashing.binarize(head.linear(x))
  codes = head(x)
  np.testing.assert_allclose(codes, jnp.tanh(head.linear(x)), rtol=1e-6)
  assert codes.shape == (8, 16)
  gaps = []
  for scale in (0.5, 1.0, 4.0, 16.0, jnp.float32(64.0)):
    codes = head(x, scale=scale)
    if scale <= 1.0:
      assert np.all(np.abs(codes) < 1)
    gaps.append(float(jnp.mean(jnp.abs(codes - signs))))
  assert all(a > b for a, b in zip(gaps[:-1], gaps[1:]))
  assert gaps[-1] < 0.05
  np.testing.assert_array_equal(hashing.binarize(head(x, scale=64.0)), signs)


def test_embedding_model_passes_scale_only_when_given():
  x = images(DIGITS)
  model = small_model("embedding")
  assert set(nnx.state(model)) == {"backbone", "head"}
  np.testing.assert_array_equal(model(x), model.head(model.backbone(x)))
  with pytest.raises(TypeError, match="scale"):
    model(x, scale=2.0)
  model = small_model("hashing")
  features = model.backbone(x)
  np.testing.assert_array_equal(model(x, scale=3.0), model.head(features, scale=3.0))
  np.testing.assert_array_equal(model(x), model.head(features))
  scale = hashing.tanh_scale(20, every=10)
  np.testing.assert_array_equal(model(x, scale=scale), model.head(features, scale=4.0))


# jit, BatchNorm modes and gradients.


@pytest.mark.parametrize("head", ["embedding", "hashing"])
def test_jit_equals_eager(head):
  model = small_model(head)
  x = images(DIGITS)
  scale = None if head == "embedding" else jnp.float32(2.5)
  jitted = nnx.jit(lambda m, x, s: m(x, scale=s))(model, x, scale)
  np.testing.assert_allclose(jitted, model(x, scale=scale), rtol=1e-5, atol=1e-6)


def test_resnet_jit_equals_eager_in_both_modes(resnet18):
  x = images(IMAGES)
  resnet18.eval()
  np.testing.assert_allclose(forward(resnet18, x), resnet18(x), rtol=1e-4, atol=1e-5)
  # In training mode, nnx.jit propagates the update of the running statistics. (The outputs are
  # not compared: the last stage normalises over 2 values per channel, which amplifies rounding.)
  resnet18.train()
  twin = nnx.clone(resnet18)
  forward(resnet18, x)
  twin(x)
  for name in ("bn1", "layer1"):
    for (path, a), (_, b) in zip(
      nnx.to_flat_state(nnx.state(getattr(resnet18, name), nnx.BatchStat)),
      nnx.to_flat_state(nnx.state(getattr(twin, name), nnx.BatchStat)),
    ):
      np.testing.assert_allclose(a[...], b[...], rtol=1e-4, atol=1e-5, err_msg=str(path))


def test_batchnorm_train_mode_depends_on_the_batch_eval_mode_does_not(resnet18):
  x = images(IMAGES, seed=1)
  other = x.at[1].set(3.0 * images(IMAGES[1:], seed=2))
  resnet18.train()
  assert resnet18.bn1.use_running_average is False
  before = variables(resnet18)
  assert not np.allclose(resnet18(x)[0], resnet18(other)[0], rtol=1e-3, atol=1e-4)
  after = variables(resnet18)
  assert not np.array_equal(before[("bn1", "mean")], after[("bn1", "mean")])
  resnet18.eval()
  assert resnet18.layer4[1].bn2.use_running_average is True
  np.testing.assert_allclose(resnet18(x)[0], resnet18(other)[0], rtol=1e-5, atol=1e-6)
  assert all(np.array_equal(after[k], v) for k, v in variables(resnet18).items())


def test_gradients_reach_every_parameter():
  model = small_model()
  grads = weighted_sum_grad(model, images(DIGITS), images((4, 6), seed=3))
  flat = nnx.to_flat_state(grads)
  assert {path[0] for path, _ in flat} == {"backbone", "head"}
  assert len(flat) == len(nnx.to_flat_state(nnx.state(model, nnx.Param)))
  for path, g in flat:
    assert np.all(np.isfinite(g[...])) and np.any(g[...] != 0), path


# Saved weights.


def test_round_trip_small_model(tmp_path):
  path = tmp_path / "weights.npz"
  model = small_model("hashing", seed=0)
  models.save_weights(model, path)
  other = small_model("hashing", seed=1)
  x = images(DIGITS)
  assert not np.allclose(other(x, scale=2.0), model(x, scale=2.0))
  assert models.load_weights(other, path) is None
  np.testing.assert_array_equal(other(x, scale=2.0), model(x, scale=2.0))
  with np.load(path) as data:
    assert "backbone/convs/0/kernel" in data.files
    assert data["head/linear/kernel"].dtype == np.float32


def test_round_trip_resnet_with_batch_statistics(tmp_path, resnet18):
  path = str(tmp_path / "resnet18.npz")
  resnet18.train()
  resnet18(images(IMAGES, seed=4))  # moves the running statistics away from their init
  resnet18.eval()
  models.save_weights(resnet18, path)
  other = models.resnet18(rngs=nnx.Rngs(1))
  other.eval()
  x = images(IMAGES, seed=5)
  assert not np.allclose(other(x), resnet18(x))
  models.load_weights(other, path)
  np.testing.assert_array_equal(other(x), resnet18(x))
  expected = variables(resnet18)
  assert not np.all(expected[("layer1", 0, "bn1", "var")] == 1.0)
  for key, value in variables(other).items():
    np.testing.assert_array_equal(value, expected[key], err_msg=str(key))


def test_round_trip_leaves_out_rng_state(tmp_path):

  class Dropped(nnx.Module):
    def __init__(self, rngs):
      self.linear = nnx.Linear(3, 2, rngs=rngs)
      self.dropout = nnx.Dropout(0.5, rngs=rngs)

  path = tmp_path / "dropped.npz"
  models.save_weights(Dropped(nnx.Rngs(0)), path)
  model = Dropped(nnx.Rngs(1))
  models.load_weights(model, path)
  with np.load(path) as data:
    assert sorted(data.files) == ["linear/bias", "linear/kernel"]
    np.testing.assert_array_equal(model.linear.kernel[...], data["linear/kernel"])


def edited_file(tmp_path, edit):
  model = small_model()
  path = tmp_path / "weights.npz"
  models.save_weights(model, path)
  with np.load(path) as data:
    arrays = {k: data[k] for k in data.files}
  edit(arrays)
  edited = tmp_path / "edited.npz"
  np.savez(edited, **arrays)
  return model, edited


@pytest.mark.parametrize(
  "edit, message",
  [
    (lambda a: a.pop("head/linear/bias"), r"missing keys head/linear/bias\."),
    (lambda a: a.update({"head/extra": np.zeros(2)}), r"unexpected keys head/extra\."),
    (
      lambda a: a.update({"head/linear/kernel": np.zeros((8, 5))}),
      r"shape mismatches head/linear/kernel \(file \(8, 5\), model \(8, 6\)\)\.",
    ),
  ],
)
def test_load_rejects_a_file_that_does_not_match(tmp_path, edit, message):
  model, path = edited_file(tmp_path, edit)
  before = variables(model)
  with pytest.raises(ValueError, match=r"load_weights: .* does not match the model: " + message):
    models.load_weights(model, path)
  assert all(np.array_equal(before[k], v) for k, v in variables(model).items())


def test_load_lists_the_first_few_keys(tmp_path):
  model, path = edited_file(tmp_path, lambda a: a.clear())
  with pytest.raises(ValueError, match=r"missing keys backbone/convs/0/bias, .* \(and 5 more\)\."):
    models.load_weights(model, path)


def test_load_converts_dtypes(tmp_path):
  model, path = edited_file(
    tmp_path, lambda a: a.update({k: v.astype(np.float64) for k, v in a.items()})
  )
  other = small_model(seed=1)  # Differently initialised: loading must change every value.
  before = variables(other)
  models.load_weights(other, path)
  assert other.head.linear.kernel[...].dtype == jnp.float32
  expected = variables(model)
  assert [k for k in expected if not np.array_equal(before[k], expected[k])]  # Kernels differ.
  for key, value in variables(other).items():
    assert value.dtype == np.float32
    np.testing.assert_array_equal(value, expected[key], err_msg=str(key))


# Frozen BatchNorm and poolings.


def test_frozen_batchnorm_keeps_its_statistics_and_trains_scale_and_bias(resnet18):
  import optax  # pylint: disable=g-import-not-at-top

  resnet18.train()
  resnet18(images(IMAGES, seed=6))  # Statistics away from their init (mean 0, var 1).
  models.freeze_batchnorm(resnet18)
  stats = {p: np.asarray(v[...]) for p, v in nnx.to_flat_state(nnx.state(resnet18, nnx.BatchStat))}
  params = {p: np.asarray(v[...]) for p, v in nnx.to_flat_state(nnx.state(resnet18, nnx.Param))}
  optimizer = nnx.Optimizer(resnet18, optax.sgd(1e-4), wrt=nnx.Param)
  loss = lambda m, x: jnp.sum(m(x) * images((2, 512), seed=8))

  @nnx.jit
  def step(model, optimizer, x):
    grads = nnx.grad(loss)(model, x)
    optimizer.update(model, grads)
    return grads

  for i in range(3):
    grads = step(resnet18, optimizer, images(IMAGES, seed=10 + i))
  for path, value in nnx.to_flat_state(nnx.state(resnet18, nnx.BatchStat)):
    np.testing.assert_array_equal(value[...], stats[path], err_msg=str(path))
  flat_grads = dict(nnx.to_flat_state(grads))
  for name in ("scale", "bias"):
    for path in (("bn1", name), ("layer4", 1, "bn2", name)):
      assert np.any(np.asarray(flat_grads[path][...]) != 0), path
      assert not np.array_equal(
        dict(nnx.to_flat_state(nnx.state(resnet18, nnx.Param)))[path][...], params[path]
      ), path
  # Frozen, an example's output does not depend on the rest of the batch.
  x = images(IMAGES, seed=20)
  np.testing.assert_allclose(resnet18(x)[:1], resnet18(x[:1]), rtol=1e-5, atol=1e-6)
  resnet18.train()
  assert resnet18.bn1.use_running_average is False


def test_freeze_batchnorm_leaves_other_layers_alone():
  model = nnx.Sequential(nnx.BatchNorm(3, rngs=nnx.Rngs(0)), nnx.Dropout(0.5, rngs=nnx.Rngs(0)))
  models.freeze_batchnorm(model)
  assert model.layers[0].use_running_average is True
  assert model.layers[1].deterministic is False


def test_poolings_against_numpy():
  x = np.random.default_rng(0).normal(size=(2, 3, 4, 5)).astype(np.float32)
  np.testing.assert_allclose(models.global_average_pool(x), x.mean(axis=(1, 2)), rtol=1e-6)
  np.testing.assert_allclose(models.global_max_pool(x), x.max(axis=(1, 2)), rtol=1e-6)
  np.testing.assert_allclose(
    models.average_max_pool(x), x.mean(axis=(1, 2)) + x.max(axis=(1, 2)), rtol=1e-6
  )
  pool = models.GeMPool(p=3.0)
  clamped = np.maximum(x.astype(np.float64), 1e-6)
  np.testing.assert_allclose(pool(x), np.mean(clamped**3, axis=(1, 2)) ** (1 / 3), rtol=1e-5)
  np.testing.assert_allclose(
    models.GeMPool(p=1.0)(np.abs(x)), np.abs(x).mean(axis=(1, 2)), rtol=1e-5
  )
  np.testing.assert_allclose(
    models.GeMPool(p=60.0)(np.abs(x)), np.abs(x).max(axis=(1, 2)), rtol=0.05
  )
  grad = nnx.grad(lambda m: jnp.sum(m(x)))(pool)
  assert np.isfinite(grad.p[...]) and grad.p[...] != 0  # p is learnable.
  with pytest.raises(ValueError, match="GeMPool: p and eps must be positive"):
    models.GeMPool(p=0.0)


# Each pooling as a function of (x, mask): the masked tests run them all.
POOLINGS: dict[str, Callable[..., jax.Array]] = {
  "average": models.global_average_pool,
  "max": models.global_max_pool,
  "average_max": models.average_max_pool,
  "gem": lambda x, mask=None: models.GeMPool(p=3.0)(x, mask),
}
# Each image's own (h, w) at the top left of a 5 x 6 feature map; the last image has no cell.
OWN_SIZES = ((5, 6), (2, 3), (1, 1), (4, 2), (0, 0))


def padded_feature_maps(garbage):
  """Feature maps `[5, 5, 6, 4]`, each image's own cells from one draw, the rest `garbage`."""
  rng = np.random.default_rng(0)
  own = [rng.normal(size=(h, w, 4)).astype(np.float32) for h, w in OWN_SIZES]
  x = np.full((len(OWN_SIZES), 5, 6, 4), garbage, np.float32)
  mask = np.zeros((len(OWN_SIZES), 5, 6), bool)
  for i, (h, w) in enumerate(OWN_SIZES):
    x[i, :h, :w], mask[i, :h, :w] = own[i], True
  return own, x, mask


@pytest.mark.parametrize("garbage", [0.0, 1e30, np.nan, -np.inf])
@pytest.mark.parametrize("name", POOLINGS)
def test_masked_pooling_of_padded_maps_is_the_pooling_of_the_unpadded(name, garbage):
  pool = POOLINGS[name]
  own, x, mask = padded_feature_maps(garbage)
  got = np.asarray(pool(x, mask))
  for i, cells in enumerate(own[:-1]):
    np.testing.assert_allclose(got[i], pool(cells[None])[0], rtol=2e-6, atol=1e-7, err_msg=str(i))
  np.testing.assert_array_equal(got[-1], 0.0)  # No cell: 0, not NaN.
  # Gradients: 0 on the padding, finite everywhere, whatever the padding holds.
  grad = jax.grad(lambda x: jnp.sum(pool(x, mask) * jnp.arange(1.0, 5.0)))(jnp.asarray(x))
  assert np.isfinite(grad).all()
  np.testing.assert_array_equal(np.asarray(grad)[~mask], 0.0)


def test_masked_poolings_keep_the_dtype_learn_p_and_check_the_mask():
  own, x, mask = padded_feature_maps(np.nan)
  pool = models.GeMPool(p=3.0)
  grad = nnx.grad(lambda m: jnp.sum(m(x, mask)))(pool)
  assert np.isfinite(grad.p[...]) and grad.p[...] != 0  # p learns from the masked cells.
  assert models.global_average_pool(jnp.asarray(x, BF16), mask).dtype == BF16
  assert models.GeMPool(dtype=BF16)(x, mask).dtype == BF16
  full = np.ones(x.shape[:3], bool)
  np.testing.assert_allclose(
    models.global_average_pool(x[:1], full[:1]), own[0].mean((0, 1))[None], rtol=2e-6
  )
  for pool in POOLINGS.values():
    with pytest.raises(TypeError, match="mask must be a boolean mask"):
      pool(x, mask.astype(np.int32))
    with pytest.raises(ValueError, match=r"shaped like the feature map's cells"):
      pool(x, mask[:, :4])


@pytest.mark.parametrize("name", ["average", "max", "average_max"])
def test_unmasked_poolings_are_the_programs_they_were(name):
  x = jnp.ones((2, 3, 4, 5))
  before = {
    "average": lambda x: jnp.mean(x, axis=(1, 2)),
    "max": lambda x: jnp.max(x, axis=(1, 2)),
    "average_max": lambda x: jnp.mean(x, axis=(1, 2)) + jnp.max(x, axis=(1, 2)),
  }[name]
  assert str(jax.make_jaxpr(POOLINGS[name])(x)) == str(jax.make_jaxpr(before)(x))


def test_feature_map_mask_has_the_resnet_feature_map_of_the_unpadded_image():
  # Abstract (`nnx.eval_shape`): only the feature map's shape is read.
  net = nnx.eval_shape(
    lambda: models.ResNet((1, 1, 1, 1), bottleneck=False, pool=lambda f: f, rngs=nnx.Rngs(0))
  )
  canvas = (128, 160)
  for h, w in [(33, 160), (64, 65), (97, 31), (1, 128), (128, 127)]:
    image = jax.ShapeDtypeStruct((1, h, w, 3), jnp.float32)
    fmap = nnx.eval_shape(lambda m, x: m(x), net, image)
    pixels = np.zeros((1, *canvas), bool)
    pixels[0, :h, :w] = True
    cells = models.feature_map_mask(pixels)
    assert cells.shape == (1, 4, 5)  # ceil(128 / 32) x ceil(160 / 32): the canvas's map.
    rows, cols = np.flatnonzero(cells[0].any(1)), np.flatnonzero(cells[0].any(0))
    assert (len(rows), len(cols)) == fmap.shape[1:3] == (-(-h // 32), -(-w // 32)), (h, w)
    assert cells.sum() == len(rows) * len(cols)  # A rectangle at the top left.
  assert isinstance(models.feature_map_mask(jnp.asarray(pixels), stride=8), jax.Array)
  with pytest.raises(TypeError, match="pixel_mask must be a boolean array"):
    models.feature_map_mask(pixels.astype(np.uint8))
  with pytest.raises(ValueError, match="pixel_mask must be shaped"):
    models.feature_map_mask(pixels[0])


def test_resnet_pools_its_last_feature_map():
  net = models.ResNet((1, 1, 1, 1), bottleneck=False, pool=models.GeMPool(2.0), rngs=nnx.Rngs(0))
  net.eval()
  x = images(IMAGES)
  captured = {}
  net.pool = lambda fmap: captured.setdefault("fmap", fmap).mean(axis=(1, 2))
  net(x)
  fmap = np.asarray(captured["fmap"], np.float64)
  net.pool = models.GeMPool(2.0)
  expected = np.mean(np.maximum(fmap, 1e-6) ** 2, axis=(1, 2)) ** 0.5
  np.testing.assert_allclose(net(x), expected, rtol=1e-5, atol=1e-6)


def test_load_missing_or_invalid_file(tmp_path):
  model = small_model()
  with pytest.raises(FileNotFoundError, match="load_weights: no weights file at"):
    models.load_weights(model, tmp_path / "absent.npz")
  npy = tmp_path / "array.npy"
  np.save(npy, np.zeros(3))
  with pytest.raises(ValueError, match="is not an .npz archive"):
    models.load_weights(model, npy)


def test_save_writes_the_exact_path(tmp_path):
  path = tmp_path / "weights.bin"
  models.save_weights(small_model(), path)
  assert os.listdir(tmp_path) == ["weights.bin"]
  with np.load(path) as data:
    assert len(data.files) == len(nnx.to_flat_state(nnx.state(small_model())))


# Mixed precision (dtype: the computation's, param_dtype: the parameters').

BF16 = jnp.bfloat16


def _tiny_vit(**kwargs):
  return models.VisionTransformer(image_size=32, dim=24, depth=1, num_heads=2, **kwargs)


# Each family at a small size: (name, build(**precision), its input shape).
FAMILIES = [
  ("small_convnet", lambda **kw: models.SmallConvNet(3, features=(4, 8), **kw), IMAGES),
  ("resnet", lambda **kw: models.ResNet((1, 1, 1, 1), bottleneck=True, **kw), IMAGES),
  ("vit", _tiny_vit, IMAGES),
]


def _params_dtypes(model):
  return {str(v.dtype) for _, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


@pytest.mark.parametrize("name, build, shape", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_bfloat16_backbones_compute_in_bfloat16_on_float32_parameters(name, build, shape):
  net = build(dtype=BF16, rngs=nnx.Rngs(0))
  assert _params_dtypes(net) == {"float32"}
  stats = nnx.to_flat_state(nnx.state(net, nnx.BatchStat))
  assert {str(v.dtype) for _, v in stats} <= {"float32"}
  x = images(shape)
  # Compared in inference mode: batch statistics of 2 images on a 1 x 1 map amplify any rounding.
  reference = build(rngs=nnx.Rngs(0))
  net.eval()
  reference.eval()
  got, expected = forward(net, x), forward(reference, x)
  assert got.dtype == BF16 and expected.dtype == jnp.float32
  net.train()
  assert forward(net, x).dtype == BF16
  error = np.linalg.norm(np.asarray(got, np.float32) - expected) / np.linalg.norm(expected)
  assert 0 < error < 0.05, error  # bfloat16's 8 bits, not float32's 24, and not garbage.
  # param_dtype stores the parameters in bfloat16; BatchNorm statistics stay float32 (Flax's).
  stored = build(dtype=BF16, param_dtype=BF16, rngs=nnx.Rngs(0))
  assert _params_dtypes(stored) == {"bfloat16"}
  stats = nnx.to_flat_state(nnx.state(stored, nnx.BatchStat))
  assert {str(v.dtype) for _, v in stats} <= {"float32"}
  assert forward(stored, x).dtype == BF16


@pytest.mark.parametrize("name, build, shape", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_bfloat16_gradients_reach_float32_parameters(name, build, shape):
  net = build(dtype=BF16, rngs=nnx.Rngs(0))
  # Jitted: one program (eagerly, every operation of the backward pass compiles on its own).
  grads = nnx.jit(nnx.grad(lambda m, x: jnp.sum(m(x).astype(jnp.float32) ** 2)))(net, images(shape))
  leaves = jax.tree.leaves(grads)
  assert leaves and all(g.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(g))) for g in leaves)
  assert sum(float(jnp.sum(jnp.abs(g))) for g in leaves) > 0


@pytest.mark.parametrize("head", [models.EmbeddingHead, models.HashingHead])
def test_heads_return_float32_whatever_the_computation(head):
  x = images((3, 5))
  for dtype, param_dtype in ((None, jnp.float32), (BF16, jnp.float32), (BF16, BF16)):
    out = head(5, 4, dtype=dtype, param_dtype=param_dtype, rngs=nnx.Rngs(0))(x)
    assert out.dtype == jnp.float32, (dtype, param_dtype)
  embeddings = models.EmbeddingHead(5, 4, dtype=BF16, rngs=nnx.Rngs(0))(x)
  # Normalised in float32: unit norm to float32 accuracy, not bfloat16's.
  np.testing.assert_allclose(np.linalg.norm(embeddings, axis=-1), 1.0, atol=1e-6)


def test_batch_norm_normalises_with_float32_statistics():
  # A running mean that bfloat16 cannot hold (999.9 is 1000 in bfloat16): Flax's own promotion
  # casts it to the computation's dtype and would give 0 here instead of (1000 - 999.9) / 0.05.
  net = models.ResNet((1, 1, 1, 1), bottleneck=False, dtype=BF16, rngs=nnx.Rngs(0))
  net.eval()
  bn = net.bn1
  bn.mean[...] = jnp.full((64,), 999.9)
  bn.var[...] = jnp.full((64,), 0.0025 - 1e-5)  # Plus BatchNorm's epsilon 1e-5: a std of 0.05.
  x = jnp.full((1, 2, 2, 64), 1000.0, BF16)  # Exactly representable in bfloat16.
  out = bn(x)
  assert out.dtype == BF16
  np.testing.assert_allclose(np.asarray(out, np.float32), 2.0, rtol=1e-2)


def _equations(jaxpr):
  """Every equation of a jaxpr and of the jaxprs inside it (jit, custom_jvp, ...)."""
  for eqn in jaxpr.eqns:
    yield eqn
    for param in eqn.params.values():
      for sub in param if isinstance(param, (list, tuple)) else (param,):
        if isinstance(sub, jax.extend.core.ClosedJaxpr):
          yield from _equations(sub.jaxpr)
        elif isinstance(sub, jax.extend.core.Jaxpr):
          yield from _equations(sub)


def test_bfloat16_attention_takes_its_softmax_in_float32():
  vit = _tiny_vit(dtype=BF16, rngs=nnx.Rngs(0))
  eqns = list(_equations(jax.make_jaxpr(lambda x: vit(x))(images(IMAGES)).jaxpr))
  exps = [e for e in eqns if e.primitive.name == "exp"]
  assert exps  # The softmax's exponential (GELU is exact: erf, no exp).
  assert all(e.outvars[0].aval.dtype == jnp.float32 for e in exps)
  dots = [e for e in eqns if e.primitive.name == "dot_general"]
  assert dots and all(e.invars[0].aval.dtype == BF16 for e in dots)  # Products in bfloat16.


def test_gem_pool_computes_in_float32_and_returns_dtype():
  x = jnp.asarray(np.random.default_rng(0).uniform(0.01, 1, (2, 3, 3, 4)), BF16)
  got = models.GeMPool(dtype=BF16)(x)
  assert got.dtype == BF16
  expected = models.GeMPool()(x.astype(jnp.float32))
  np.testing.assert_allclose(np.asarray(got, np.float32), expected, rtol=1e-2)
  assert models.GeMPool(param_dtype=BF16).p.dtype == BF16


@pytest.mark.parametrize(
  "build",
  [
    lambda **kw: models.SmallConvNet(1, rngs=nnx.Rngs(0), **kw),
    lambda **kw: models.resnet18(rngs=nnx.Rngs(0), **kw),
    lambda **kw: models.vit_small(rngs=nnx.Rngs(0), **kw),
    lambda **kw: models.EmbeddingHead(3, 2, rngs=nnx.Rngs(0), **kw),
    lambda **kw: models.HashingHead(3, 2, rngs=nnx.Rngs(0), **kw),
    lambda **kw: models.GeMPool(**kw),
  ],
  ids=["small_convnet", "resnet18", "vit_small", "embedding_head", "hashing_head", "gem"],
)
@pytest.mark.parametrize("field", ["dtype", "param_dtype"])
def test_bad_dtypes_are_refused(build, field):
  with pytest.raises(ValueError, match=f"{field} must be a floating dtype"):
    nnx.eval_shape(lambda: build(**{field: jnp.int32}))


def test_vit_refuses_an_unknown_attention_implementation():
  with pytest.raises(ValueError, match="attention_implementation must be one of"):
    _tiny_vit(attention_implementation="flash", rngs=nnx.Rngs(0))
