"""Every variable of a model to and from a local `.npz` file; BatchNorm frozen for fine-tuning."""

from __future__ import annotations

import os
import zipfile

import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrank._src.checks import check_same_layout

# What `save_weights` stores: every variable except the state of random number generators.
_WEIGHTS = nnx.Not(nnx.RngState)


def freeze_batchnorm(module: nnx.Module) -> None:
  """Sets every BatchNorm of a module to its running statistics, in place; nothing else changes.

  Fine-tuning a pretrained network with small batches, the papers keep BatchNorm frozen: each
  BatchNorm normalises with the running mean and variance of the pretrained network, which are
  neither replaced by the batch's statistics nor updated (`use_running_average=True`). Its scale
  and bias stay parameters (`nnx.Param`): they are trained unless the optimiser leaves them out.
  Unlike `module.eval()`, other layers (dropout) keep their mode. `module.train()` undoes it.

  Args:
    module: any Flax NNX module; a module without BatchNorm is left as it is.

  >>> from flax import nnx
  >>> from jaxrank.models import resnet18
  >>> net = resnet18(rngs=nnx.Rngs(0))
  >>> freeze_batchnorm(net)
  >>> net.layer4[1].bn2.use_running_average
  True
  """
  module.set_attributes(nnx.BatchNorm, raise_if_not_found=False, use_running_average=True)


def _flat_variables(model: nnx.Module) -> dict[str, tuple[tuple, nnx.Variable]]:
  """Maps each variable's path joined with "/" to the path and the variable."""
  flat = nnx.to_flat_state(nnx.state(model, _WEIGHTS))
  return {"/".join(str(part) for part in path): (path, variable) for path, variable in flat}


def save_weights(model: nnx.Module, path: str | os.PathLike) -> None:
  """Saves every variable of a model to a local `.npz` file, for `load_weights`.

  Each variable of `nnx.state(model)` (parameters and BatchNorm statistics alike; random number
  generator state is left out) is stored under its path joined with `/` (e.g.
  `backbone/layer1/0/bn1/mean`) as a numpy array of its shape and dtype. The file is written at
  `path` exactly (no `.npz` is appended) and overwritten if it exists. Read it with `np.load` or
  `load_weights`.

  Args:
    model: any Flax NNX module.
    path: the file to write.

  >>> import os, tempfile
  >>> import numpy as np
  >>> from flax import nnx
  >>> from jaxrank.models import EmbeddingHead
  >>> path = os.path.join(tempfile.mkdtemp(), "head.npz")
  >>> save_weights(EmbeddingHead(3, 2, rngs=nnx.Rngs(0)), path)
  >>> sorted(np.load(path).files)
  ['linear/bias', 'linear/kernel']
  """
  arrays = {key: np.asarray(variable[...]) for key, (_, variable) in _flat_variables(model).items()}
  # The `.npz` layout of `np.savez`, written by hand so that no key can collide with its arguments.
  with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
    for key, array in arrays.items():
      with archive.open(key + ".npy", "w", force_zip64=True) as file:
        np.lib.format.write_array(file, array, allow_pickle=False)


def load_weights(model: nnx.Module, path: str | os.PathLike) -> None:
  """Loads every variable of a model from a local `.npz` file, in place.

  The file maps each variable's path in `nnx.state(model)`, joined with `/`, to its array, as
  `save_weights` writes it; the keys must be exactly those of the model and the shapes equal
  (arrays are cast to the dtype of the model's variables). Weights come only from a local file
  that the user provides (saved by `save_weights`, or converted, e.g. from a torchvision state
  dict with the names given in `ResNet`); nothing is ever downloaded from a hub.

  Args:
    model: the Flax NNX module to update (`nnx.update`), built with the same architecture.
    path: the `.npz` file to read.

  Raises:
    FileNotFoundError: `path` does not exist.
    ValueError: the file is not an `.npz` archive, or its keys or shapes differ from the model's
      (the message names the first few missing keys, unexpected keys and shape mismatches).

  >>> import os, tempfile
  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> from jaxrank.models import EmbeddingHead
  >>> path = os.path.join(tempfile.mkdtemp(), "head.npz")
  >>> save_weights(EmbeddingHead(3, 2, rngs=nnx.Rngs(0)), path)
  >>> head = EmbeddingHead(3, 2, rngs=nnx.Rngs(1))
  >>> load_weights(head, path)
  >>> fresh = EmbeddingHead(3, 2, rngs=nnx.Rngs(0))
  >>> bool(jnp.all(head.linear.kernel[...] == fresh.linear.kernel[...]))
  True
  """
  if not os.path.isfile(path):
    raise FileNotFoundError(
      f"load_weights: no weights file at {os.fspath(path)!r}; pass a local .npz file written by "
      "save_weights (or converted from another library)."
    )
  data = np.load(path, allow_pickle=False)
  if not isinstance(data, np.lib.npyio.NpzFile):
    raise ValueError(f"load_weights: {os.fspath(path)!r} is not an .npz archive.")
  with data:
    arrays = {key: data[key] for key in data.files}
  variables = _flat_variables(model)
  check_same_layout(
    "load_weights",
    path,
    "model",
    {key: value.shape for key, value in arrays.items()},
    {key: tuple(variable.shape) for key, (_, variable) in variables.items()},
  )
  flat = [
    (path, jnp.asarray(arrays[key], dtype=variable.dtype))
    for key, (path, variable) in variables.items()
  ]
  nnx.update(model, nnx.from_flat_state(flat))
