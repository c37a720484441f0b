"""Tests of `jaxrank.convert`: PyTorch checkpoints into jaxrank's networks, output for output.

Each torchvision or timm model is built with random weights (nothing is downloaded), its BatchNorm
statistics and normalisation parameters randomised so that no variable keeps a trivial value, and
saved as a `.pth` state dict and as `.safetensors`; the converted jaxrank network must give
PyTorch's outputs in eval mode on the same random images within 1e-4 (float32). jaxrank's networks
are built abstractly (`nnx.eval_shape`): loading fills every variable, so no random
initialisation is compiled.
"""

from __future__ import annotations

import sys

import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.torch
import timm
import torch
import torchvision
from flax import nnx

from jaxrank import convert
from jaxrank import models

# Its expensive fixtures are session-scoped and its tests kept on one pytest-xdist worker (`make
# test`): a module-scoped fixture is set up again whenever the worker returns to the module.
pytestmark = pytest.mark.xdist_group("test_convert")

forward = nnx.jit(lambda model, x: model(x))


def randomise(net: torch.nn.Module, seed: int) -> torch.nn.Module:
  """Random normalisation parameters and BatchNorm statistics, then eval mode.

  The last BatchNorm of each residual branch gets a small scale (0.05 to 0.2), as in trained
  ResNets: features stay of order 1, as a pretrained network's, so that 1e-4 is a bound at float32
  accuracy (with every scale near 1 the features of a random ResNet-50 reach 100s).
  """
  generator = torch.Generator().manual_seed(seed)
  last = {id(m.bn2) for m in net.modules() if isinstance(m, torchvision.models.resnet.BasicBlock)}
  last |= {id(m.bn3) for m in net.modules() if isinstance(m, torchvision.models.resnet.Bottleneck)}
  with torch.no_grad():
    for module in net.modules():
      if isinstance(module, (torch.nn.BatchNorm2d, torch.nn.LayerNorm)):
        size = module.weight.shape
        low, high = (0.05, 0.2) if id(module) in last else (0.5, 1.5)
        module.weight.copy_(low + (high - low) * torch.rand(size, generator=generator))
        module.bias.copy_(0.1 * torch.randn(size, generator=generator))
      if isinstance(module, torch.nn.BatchNorm2d):
        module.running_mean.copy_(0.1 * torch.randn(size, generator=generator))
        module.running_var.copy_(0.5 + torch.rand(size, generator=generator))
    for name, parameter in net.named_parameters():
      if name in ("cls_token", "pos_embed"):
        parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator))
  return net.eval()


def save_both(net: torch.nn.Module, tmp_path, name: str):
  state = {k: v.contiguous() for k, v in net.state_dict().items()}
  pth, st = tmp_path / f"{name}.pth", tmp_path / f"{name}.safetensors"
  torch.save(state, pth)
  safetensors.torch.save_file(state, st)
  return pth, st


def abstract(build):
  return nnx.eval_shape(build)


def variables(model):
  return {path: np.asarray(v[...]) for path, v in nnx.to_flat_state(nnx.state(model))}


def random_images(shape, seed=0):
  return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def torch_outputs(net, x):
  with torch.no_grad():
    return net(torch.from_numpy(x.transpose(0, 3, 1, 2))).numpy()


# ResNet-101 differs from ResNet-50 only in the number of bottleneck blocks of layer3, which the
# conversion maps by the same rule: its arrays are checked where they land
# (`test_resnet101_arrays_land_in_their_blocks`) rather than by a third, costly, forward pass.
RESNETS = [
  ("resnet18", torchvision.models.resnet18, models.resnet18, 32),
  ("resnet50", torchvision.models.resnet50, models.resnet50, 32),
]


@pytest.mark.parametrize("name, torch_build, jax_build, size", RESNETS, ids=[r[0] for r in RESNETS])
def test_torchvision_resnet_outputs_match(tmp_path, name, torch_build, jax_build, size):
  torch.manual_seed(0)
  net = randomise(torch_build(weights=None), seed=1)
  net.fc = torch.nn.Identity()  # The features before the classifier, as jaxrank's ResNet.
  pth, st = save_both(net, tmp_path, name)
  x = random_images((2, size, size, 3))
  expected = torch_outputs(net, x)
  model = abstract(lambda: jax_build(rngs=nnx.Rngs(0)))
  convert.load_pytorch_weights(model, pth)
  model.eval()
  got = np.asarray(forward(model, jnp.asarray(x)))
  assert got.shape == expected.shape == (2, model.out_features)
  assert np.abs(expected).max() > 0.1  # Not a trivial output.
  np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)
  # The same arrays from .safetensors, read without torch.
  other = abstract(lambda: jax_build(rngs=nnx.Rngs(0)))
  convert.load_pytorch_weights(other, st)
  a, b = variables(model), variables(other)
  assert a.keys() == b.keys()
  for key in a:
    np.testing.assert_array_equal(a[key], b[key], err_msg=str(key))


def test_resnet101_arrays_land_in_their_blocks(tmp_path):
  net = randomise(torchvision.models.resnet101(weights=None), seed=6)
  net.fc = torch.nn.Identity()
  st = tmp_path / "resnet101.safetensors"  # Both formats: test_torchvision_resnet_outputs_match.
  safetensors.torch.save_file({k: v.contiguous() for k, v in net.state_dict().items()}, st)
  model = abstract(lambda: models.resnet101(rngs=nnx.Rngs(0)))
  convert.load_pytorch_weights(model, st)
  assert len(model.layer3) == 23
  for i in (0, 11, 22):  # Convolutions [O, I, kh, kw] -> [kh, kw, I, O]; BatchNorm as named.
    block, torch_block = model.layer3[i], net.layer3[i]
    np.testing.assert_array_equal(
      block.conv2.kernel[...], torch_block.conv2.weight.detach().numpy().transpose(2, 3, 1, 0)
    )
    np.testing.assert_array_equal(block.bn3.mean[...], torch_block.bn3.running_mean.numpy())
    np.testing.assert_array_equal(block.bn3.scale[...], torch_block.bn3.weight.detach().numpy())
  np.testing.assert_array_equal(model.layer4[2].bn3.var[...], net.layer4[2].bn3.running_var.numpy())


def test_classifier_and_batch_counter_are_dropped_and_the_pool_is_kept(tmp_path):
  net = randomise(torchvision.models.resnet18(weights=None), seed=2)  # With its fc.
  pth, _ = save_both(net, tmp_path, "resnet18_fc")
  assert "fc.weight" in torch.load(pth) and "bn1.num_batches_tracked" in torch.load(pth)
  model = models.resnet18(pool=models.GeMPool(p=2.5), rngs=nnx.Rngs(0))
  convert.load_pytorch_weights(model, pth)
  assert float(model.pool.p[...]) == 2.5
  np.testing.assert_array_equal(
    model.layer2[0].downsample[0].kernel[...],
    net.layer2[0].downsample[0].weight.detach().numpy().transpose(2, 3, 1, 0),
  )
  np.testing.assert_array_equal(model.layer4[1].bn2.var[...], net.layer4[1].bn2.running_var.numpy())


def test_timm_vit_outputs_match(tmp_path):
  # DeiT-S and timm's ViT-S/16 are the same network (`vit_small_patch16_224`): one forward pass at
  # 224 pixels, from both file formats (the other size is `test_vit_at_another_image_size`).
  torch.manual_seed(0)
  net = randomise(timm.create_model("deit_small_patch16_224", pretrained=False), seed=3)
  assert {k: v.shape for k, v in net.state_dict().items()} == {
    k: v.shape for k, v in timm.create_model("vit_small_patch16_224").state_dict().items()
  }
  pth, st = save_both(net, tmp_path, "deit_small")  # With its classifier.
  net.reset_classifier(0)  # The class token's features, as jaxrank's VisionTransformer.
  x = random_images((2, 224, 224, 3), seed=1)
  expected = torch_outputs(net, x)
  model = abstract(lambda: models.vit_small(rngs=nnx.Rngs(0)))
  for path in (pth, st):
    convert.load_pytorch_weights(model, path)
    got = np.asarray(forward(model, jnp.asarray(x)))
    assert got.shape == expected.shape == (2, 384)
    assert np.abs(expected).max() > 0.1
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)


def test_vit_at_another_image_size(tmp_path):
  net = randomise(
    timm.create_model("vit_small_patch16_224", pretrained=False, img_size=32, num_classes=0), seed=4
  )
  pth, _ = save_both(net, tmp_path, "vit32")
  model = abstract(lambda: models.vit_small(image_size=32, rngs=nnx.Rngs(0)))
  convert.load_pytorch_weights(model, pth)
  x = random_images((3, 32, 32, 3), seed=2)
  np.testing.assert_allclose(forward(model, jnp.asarray(x)), torch_outputs(net, x), atol=1e-4)
  with pytest.raises(
    ValueError,
    match=r"shape mismatches pos_embed \(file \(1, 5, 384\), "
    r"model \(1, 197, 384\)\)",
  ):
    convert.load_pytorch_weights(abstract(lambda: models.vit_small(rngs=nnx.Rngs(0))), pth)


@pytest.mark.parametrize(
  "param_dtype", [jnp.float32, jnp.bfloat16], ids=["f32_params", "bf16_params"]
)
def test_converted_weights_load_into_bfloat16_networks(tmp_path, param_dtype):
  # Mixed precision (float32 parameters, bfloat16 computation) and bfloat16 storage alike.
  torch.manual_seed(0)
  resnet = randomise(torchvision.models.resnet18(weights=None), seed=7)
  resnet.fc = torch.nn.Identity()
  vit = randomise(
    timm.create_model("vit_small_patch16_224", pretrained=False, img_size=32, num_classes=0), seed=8
  )
  precision = {"dtype": jnp.bfloat16, "param_dtype": param_dtype}
  cases = [
    (resnet, lambda: models.resnet18(rngs=nnx.Rngs(0), **precision)),
    (vit, lambda: models.vit_small(image_size=32, rngs=nnx.Rngs(0), **precision)),
  ]
  x = random_images((2, 32, 32, 3), seed=3)
  for i, (net, build) in enumerate(cases):
    pth, _ = save_both(net, tmp_path, f"net{i}")
    model = abstract(build)
    convert.load_pytorch_weights(model, pth)
    params = nnx.to_flat_state(nnx.state(model, nnx.Param))
    assert {v.dtype for _, v in params} == {jnp.dtype(param_dtype)}
    model.eval()
    got = forward(model, jnp.asarray(x))
    assert got.dtype == jnp.bfloat16
    expected = torch_outputs(net, x)
    error = np.linalg.norm(np.asarray(got, np.float32) - expected) / np.linalg.norm(expected)
    assert error < 0.03, (type(net).__name__, error)  # bfloat16's rounding, not float32's.


# Files that do not match.


@pytest.fixture(scope="session")
def resnet18_state():
  torch.manual_seed(0)
  return randomise(torchvision.models.resnet18(weights=None), seed=5).state_dict()


def write(tmp_path, state, suffix=".pth"):
  path = tmp_path / f"edited{suffix}"
  if suffix == ".pth":
    torch.save(state, path)
  else:
    safetensors.torch.save_file({k: v.contiguous() for k, v in state.items()}, path)
  return path


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
@pytest.mark.parametrize(
  "edit, message",
  [
    (lambda s: s.pop("bn1.running_mean"), r"missing keys bn1\.running_mean\."),
    (lambda s: s.update({"extra.weight": torch.zeros(2)}), r"unexpected keys extra\.weight\."),
    (
      lambda s: s.update({"conv1.weight": torch.zeros(64, 3, 5, 5)}),
      r"shape mismatches conv1\.weight \(file \(64, 3, 5, 5\), model \(64, 3, 7, 7\)\)\.",
    ),
  ],
)
def test_a_file_that_does_not_match_names_the_keys(tmp_path, resnet18_state, suffix, edit, message):
  state = dict(resnet18_state)
  edit(state)
  path = write(tmp_path, state, suffix)
  model = models.resnet18(rngs=nnx.Rngs(0))
  before = variables(model)
  with pytest.raises(
    ValueError, match=r"load_pytorch_weights: .* does not match the ResNet: " + message
  ):
    convert.load_pytorch_weights(model, path)
  after = variables(model)
  assert all(np.array_equal(before[k], after[k]) for k in before)  # Nothing changed.


def test_wrong_architecture(tmp_path, resnet18_state):
  path = write(tmp_path, resnet18_state)
  resnet50 = abstract(lambda: models.resnet50(rngs=nnx.Rngs(0)))
  with pytest.raises(
    ValueError,
    match=r"does not match the ResNet: missing keys "
    r"layer1\.0\.bn3\.bias, .* \(and \d+ more\); shape mismatches "
    r"layer1\.0\.conv1\.weight \(file \(64, 64, 3, 3\), model \(64, 64, 1, 1\)\)",
  ):
    convert.load_pytorch_weights(resnet50, path)
  vit = abstract(lambda: models.vit_small(rngs=nnx.Rngs(0)))
  with pytest.raises(
    ValueError,
    match=r"does not match the VisionTransformer: missing keys "
    r"blocks\.0\.attn\.proj\.bias, .*; unexpected keys bn1\.bias, ",
  ):
    convert.load_pytorch_weights(vit, path)


def test_errors_of_the_file_and_the_model(tmp_path, resnet18_state, monkeypatch):
  model = models.resnet18(rngs=nnx.Rngs(0))
  with pytest.raises(FileNotFoundError, match="read_checkpoint: no checkpoint at"):
    convert.load_pytorch_weights(model, tmp_path / "absent.pth")
  listed = tmp_path / "list.pth"
  torch.save([torch.zeros(2)], listed)
  with pytest.raises(ValueError, match=r"does not hold a state dict .*save `model.state_dict\(\)`"):
    convert.load_pytorch_weights(model, listed)
  text = tmp_path / "text.pth"
  text.write_text("not a checkpoint")
  with pytest.raises(ValueError, match="neither a safetensors file nor readable by torch.load"):
    convert.read_checkpoint(text)
  head = models.EmbeddingModel(model, models.EmbeddingHead(512, 4, rngs=nnx.Rngs(0)))
  with pytest.raises(TypeError, match=r"model must be .* pass model.backbone"):
    convert.load_pytorch_weights(head, write(tmp_path, resnet18_state))
  # Without torch: a .pth asks for it, a .safetensors reads all the same.
  st = write(tmp_path, resnet18_state, ".safetensors")
  monkeypatch.setitem(sys.modules, "torch", None)
  with pytest.raises(ImportError, match=r"needs torch to read \(`pip install torch`\)"):
    convert.read_checkpoint(tmp_path / "edited.pth")
  assert convert.read_checkpoint(st).keys() == resnet18_state.keys()


def test_read_checkpoint_formats(tmp_path):
  state = {
    "a": torch.arange(6, dtype=torch.float32).reshape(2, 3),
    "b": torch.tensor([1.5, -2.25, 3.0e38], dtype=torch.bfloat16),
    "c": torch.tensor([3, 4], dtype=torch.int64),
  }
  # The format is read from the content: a safetensors file named .pth, a wrapped torch file.
  st = tmp_path / "weights.pth"
  safetensors.torch.save_file(state, st)
  wrapped = tmp_path / "checkpoint.pt"
  torch.save({"state_dict": state, "epoch": 3}, wrapped)
  for path in (st, wrapped):
    arrays = convert.read_checkpoint(path)
    assert sorted(arrays) == ["a", "b", "c"]
    np.testing.assert_array_equal(arrays["a"], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert arrays["b"].dtype == np.float32 and arrays["c"].dtype == np.int64
    np.testing.assert_array_equal(arrays["b"], state["b"].float().numpy())
    np.testing.assert_array_equal(arrays["c"], [3, 4])
