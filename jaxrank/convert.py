"""PyTorch checkpoints to jaxrank's networks: torchvision ResNets and timm's ViT-S/16 and DeiT-S/16.

This module needs the `train` extra (`pip install 'jaxrank[train]'`, for Flax); the core of
jaxrank does not import it: `from jaxrank import convert`.

* `read_checkpoint`: a local `.pth`/`.pt` file (a `state_dict` saved by `torch.save`, read with
  torch) or a `.safetensors` file (read by this module, no torch needed) to numpy arrays by key;
  the format is recognised from the file's first bytes, whatever its name.
* `load_pytorch_weights`: such a file into a `jaxrank.models.ResNet` (torchvision's `resnet18`,
  `resnet50`, `resnet101`) or `jaxrank.models.VisionTransformer` (timm's
  `vit_small_patch16_224`, `deit_small_patch16_224`), in place.

Nothing is ever downloaded: the user gives the file. Get one with torchvision
(`torchvision.models.resnet50(weights="IMAGENET1K_V1").state_dict()`, saved with `torch.save`) or
timm (`timm.create_model("deit_small_patch16_224", pretrained=True)`, or the `model.safetensors`
of its Hugging Face repository).

The networks' variables are named after the PyTorch modules, so a key converts by a fixed rule:
`.` becomes `/`; a `weight` is a convolution's `kernel` (transposed from `OIHW` to `HWIO`), a
linear layer's `kernel` (transposed from `[out, in]` to `[in, out]`) or a normalisation's `scale`;
`running_mean` and `running_var` are a BatchNorm's `mean` and `var`; other names are kept. The
classifier (`fc` of torchvision, `head` of timm) and BatchNorm's `num_batches_tracked` are
dropped; a ResNet's `pool` (e.g. `jaxrank.models.GeMPool`'s `p`) has no PyTorch counterpart and
keeps its value.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrank import models
from jaxrank._src import checks

# The classifier, dropped from the file, by architecture: key prefixes.
_CLASSIFIERS: dict[type[nnx.Module], tuple[str, ...]] = {
  models.ResNet: ("fc.",),
  models.VisionTransformer: ("head.",),
}
# Variables of jaxrank's networks that no PyTorch checkpoint holds: top-level attributes.
_JAXRANK_ONLY: dict[type[nnx.Module], tuple[str, ...]] = {
  models.ResNet: ("pool",),
  models.VisionTransformer: (),
}

# The dtypes of the safetensors format that numpy holds; BF16 is widened to float32 by hand.
_SAFETENSORS_DTYPES = {
  "F64": np.float64,
  "F32": np.float32,
  "F16": np.float16,
  "I64": np.int64,
  "I32": np.int32,
  "I16": np.int16,
  "I8": np.int8,
  "U8": np.uint8,
  "BOOL": np.bool_,
}


def read_checkpoint(path: str | os.PathLike) -> dict[str, np.ndarray]:
  """Reads a local PyTorch checkpoint into numpy arrays, the format told by the file's content.

  * A `.safetensors` file (8 bytes of header length, then a JSON header) is read by this module,
    without torch; `BF16` tensors become float32.
  * Anything else is read with `torch.load(path, map_location="cpu", weights_only=True)` (a zip
    archive from `torch.save`, or the older pickle format), which needs torch installed
    (`pip install torch`). A dict holding the state dict under `"state_dict"` or `"model"` (as
    training scripts save it) is unwrapped; keys prefixed `module.` (`DataParallel`) are not
    changed.

  Args:
    path: the file.

  Returns:
    A dict from the checkpoint's keys to numpy arrays (float32 where the file has bfloat16).

  Raises:
    FileNotFoundError: `path` does not exist.
    ImportError: the file needs torch and torch is not installed.
    ValueError: the file holds no dict of tensors.
  """
  name = os.fspath(path)
  if not os.path.isfile(name):
    raise FileNotFoundError(
      f"read_checkpoint: no checkpoint at {name!r}; pass a local .pth, .pt or .safetensors file "
      "(nothing is ever downloaded)."
    )
  with open(name, "rb") as file:
    head = file.read(9)
  if len(head) == 9 and head[8:9] == b"{" and not head.startswith(b"PK"):
    return _read_safetensors(name)
  return _read_torch(name)


def _read_safetensors(name: str) -> dict[str, np.ndarray]:
  with open(name, "rb") as file:
    (size,) = struct.unpack("<Q", file.read(8))
    try:
      header = json.loads(file.read(size))
    except ValueError as error:
      raise ValueError(f"read_checkpoint: {name!r} has no valid safetensors header.") from error
    data = file.read()
  arrays = {}
  for key, entry in header.items():
    if key == "__metadata__":
      continue
    start, end = entry["data_offsets"]
    raw = data[start:end]
    if entry["dtype"] == "BF16":
      bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
      array = bits.view(np.float32)
    elif entry["dtype"] in _SAFETENSORS_DTYPES:
      array = np.frombuffer(raw, np.dtype(_SAFETENSORS_DTYPES[entry["dtype"]]).newbyteorder("<"))
    else:
      raise ValueError(
        f"read_checkpoint: {name!r} holds {key!r} as {entry['dtype']}, which numpy cannot hold; "
        "save the checkpoint in float32."
      )
    arrays[key] = array.reshape(entry["shape"]).copy()
  return arrays


def _read_torch(name: str) -> dict[str, np.ndarray]:
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError as error:
    raise ImportError(
      f"read_checkpoint: {name!r} is a PyTorch file, which needs torch to read "
      "(`pip install torch`); or save the state dict as .safetensors, which reads without "
      "torch."
    ) from error
  try:
    state = torch.load(name, map_location="cpu", weights_only=True)
  except Exception as error:  # torch raises many kinds for a file that is not its own.
    raise ValueError(
      f"read_checkpoint: {name!r} is neither a safetensors file nor readable by torch.load "
      f"({type(error).__name__}: {error})."
    ) from error
  if isinstance(state, Mapping):
    for wrapper in ("state_dict", "model"):
      if isinstance(state.get(wrapper), Mapping):
        state = state[wrapper]
        break
  if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
    raise ValueError(
      f"read_checkpoint: {name!r} does not hold a state dict (a dict of tensors); save "
      "`model.state_dict()`, not the model."
    )
  return {
    key: (value.float() if value.dtype == torch.bfloat16 else value).detach().cpu().numpy()
    for key, value in state.items()
  }


def _torch_key(path: tuple) -> str:
  """The PyTorch key of a jaxrank variable's path, e.g. `("bn1", "mean")` -> `bn1.running_mean`."""
  *parents, leaf = (str(part) for part in path)
  leaf = {"kernel": "weight", "scale": "weight", "mean": "running_mean", "var": "running_var"}.get(
    leaf, leaf
  )
  return ".".join(parents + [leaf])


def _to_jax_layout(array: np.ndarray, path: tuple) -> np.ndarray:
  if path[-1] == "kernel" and array.ndim == 4:
    return array.transpose(2, 3, 1, 0)  # OIHW -> HWIO
  if path[-1] == "kernel" and array.ndim == 2:
    return array.T  # [out, in] -> [in, out]
  return array


def _architecture(model: nnx.Module) -> type[nnx.Module]:
  for kind in _CLASSIFIERS:
    if isinstance(model, kind):
      return kind
  raise TypeError(
    f"load_pytorch_weights: model must be a jaxrank.models.ResNet or VisionTransformer (the "
    f"backbone, not an EmbeddingModel: pass model.backbone), got {type(model).__name__}."
  )


def load_pytorch_weights(model: nnx.Module, path: str | os.PathLike) -> None:
  """Loads a torchvision or timm checkpoint into a jaxrank network, in place, key by key.

  The file (`read_checkpoint`: `.pth`/`.pt` state dict or `.safetensors`) must hold exactly the
  network's variables under PyTorch's names (see the module docstring), besides the classifier
  and `num_batches_tracked`, which are dropped: a torchvision `resnet18`/`resnet50`/`resnet101`
  state dict into `jaxrank.models.resnet18`/`resnet50`/`resnet101`, timm's
  `vit_small_patch16_224` or `deit_small_patch16_224` into `jaxrank.models.vit_small` (built for
  the checkpoint's image size). Arrays are cast to the dtype of the model's variables. Everything
  is checked before anything is changed: a file that does not match leaves the model as it was.
  Outputs then equal PyTorch's in eval mode (within float32 rounding; `tests/test_convert.py`
  checks `1e-4`), with `model.eval()` or `jaxrank.models.freeze_batchnorm` for the BatchNorm of a
  ResNet.

  Args:
    model: a `jaxrank.models.ResNet` or `jaxrank.models.VisionTransformer` (the backbone of an
      `EmbeddingModel`, `model.backbone`).
    path: the local checkpoint file.

  Raises:
    TypeError: `model` is not one of the two architectures.
    FileNotFoundError, ImportError: see `read_checkpoint`.
    ValueError: the file is not a state dict, or does not match the network: the message names
      the first few missing keys, unexpected keys and shape mismatches (PyTorch's names and
      shapes), e.g. a ResNet-18 file given to a ResNet-50.
  """
  kind = _architecture(model)
  arrays = read_checkpoint(path)
  arrays = {
    key: value
    for key, value in arrays.items()
    if not key.startswith(_CLASSIFIERS[kind]) and not key.endswith("num_batches_tracked")
  }
  variables = {
    _torch_key(p): (p, v)
    for p, v in nnx.to_flat_state(nnx.state(model, nnx.Not(nnx.RngState)))
    if str(p[0]) not in _JAXRANK_ONLY[kind]
  }
  checks.check_same_layout(
    "load_pytorch_weights",
    path,
    kind.__name__,
    {key: tuple(value.shape) for key, value in arrays.items()},
    {key: _torch_shape(tuple(variable.shape), p) for key, (p, variable) in variables.items()},
  )
  flat = [
    (p, jnp.asarray(_to_jax_layout(arrays[key], p), dtype=variable.dtype))
    for key, (p, variable) in variables.items()
  ]
  nnx.update(model, nnx.from_flat_state(flat))


def _torch_shape(shape: tuple[int, ...], path: tuple) -> tuple[int, ...]:
  """The PyTorch shape of a jaxrank variable (the inverse of `_to_jax_layout`)."""
  if path[-1] == "kernel" and len(shape) == 4:
    return (shape[3], shape[2], shape[0], shape[1])
  if path[-1] == "kernel" and len(shape) == 2:
    return shape[::-1]
  return shape
