"""The training job's own step timed on the device, beside PyTorch's under `torch.autocast`.

The `train` section of `experiments.benchmarks.device`: for each backbone (ResNet-50, ViT-S/16),
the step that `experiments.job.step.make_train_step` builds (the function a training run calls:
backbone, embedding head with D = 512, in-batch FastAP, AdamW; its state donated) in float32 and
in mixed precision (`half_precision=True`), timed on synthetic batches already on the device
(`[B, S, S, 3]` float32 images, 4 per class); then, where torch sees a GPU, torchvision's
ResNet-50 and timm's ViT-S/16 with the same head, pytorch-metric-learning's FastAPLoss and
AdamW, in float32 (TF32 allowed, as JAX's default precision on the GPU) and under
`torch.autocast(bfloat16)` with channels_last images, on the same card in the same run. Each row
gives the median step time, images/s and the ratio to torch autocast's images/s for its backbone.

For the ViT in mixed precision a second jaxrank row builds the same step with attention computed
by cuDNN's fused kernel (`jax.nn.dot_product_attention(implementation="cudnn")`, through
`models.vit_small(attention_implementation=...)`); it is skipped, with the reason printed, where
JAX cannot lower it (any platform but an NVIDIA GPU).

Nothing here imports TensorFlow: the GPU machines have none, and the job's step does not need it.
On this CPU the section runs at tiny sizes (`tests/test_device_benchmark.py`), which is how its
code is tested; its numbers mean something only on an accelerator.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import numpy as np

from experiments.benchmarks import accelerators
from experiments.benchmarks import speed

MODELS = accelerators.TRAIN_MODELS
# What `--train-models` may name: the job's backbones for photographs (the smaller ResNets test
# the section on the CPU in seconds).
CHOICES = ("resnet18", "resnet50", "resnet101", "vit_small")
PER_CLASS = 4


@contextlib.contextmanager
def _vit_attention(implementation: str | None):
  """The job's `vit_small` built with `attention_implementation=implementation` meanwhile."""
  from experiments.job import networks
  from jaxrank import models

  spec = networks.MODELS["vit_small"]

  def build(config, in_channels, rngs):
    return models.vit_small(
      image_size=config.image_size,
      in_channels=in_channels,
      dtype=networks.dtype(config),
      attention_implementation=implementation,
      rngs=rngs,
    )

  networks.MODELS["vit_small"] = dataclasses.replace(spec, build=build)  # type: ignore[index]
  try:
    yield
  finally:
    networks.MODELS["vit_small"] = spec  # type: ignore[index]


def jax_step_time(model: str, half: bool, batch: int, image_size: int, seconds: float) -> float:
  """Median seconds of the job's step (`make_train_step`) on device-resident synthetic data."""
  import jax
  import jax.numpy as jnp

  from experiments.job import optimizer as optimizer_lib
  from experiments.job import step as step_lib

  config = accelerators.train_step_config(model, half, batch, image_size)
  tx = optimizer_lib.make_optimizer(config)
  graphs, state = step_lib.init_state(config, tx)
  train_step = step_lib.make_train_step(config, graphs, tx, None)
  rng = np.random.default_rng(0)
  images = jnp.asarray(rng.normal(size=(batch, image_size, image_size, 3)).astype(np.float32))
  labels = jnp.asarray(np.repeat(np.arange(batch // PER_CLASS), PER_CLASS).astype(np.int32))
  carried = {"state": state, "first_bad": jnp.int32(-1)}

  def step():  # The state is donated: each call takes the one the last returned.
    new, loss, first_bad = train_step(carried["state"], images, labels, carried["first_bad"])
    carried.update(state=new, first_bad=first_bad)
    jax.block_until_ready((new, loss))

  seconds = _timed(step, seconds)
  if int(carried["first_bad"]) >= 0:
    raise FloatingPointError(f"train: the {model} step diverged on random images")
  return seconds


def torch_step_time(model: str, autocast: bool, batch: int, image_size: int, seconds: float):
  """Median seconds of the same step in PyTorch on the GPU (module docstring)."""
  import torch
  import torch.nn.functional as F
  from pytorch_metric_learning import losses as pml_losses

  torch.backends.cuda.matmul.allow_tf32 = True
  torch.backends.cudnn.allow_tf32 = True
  torch.backends.cudnn.benchmark = True
  if model.startswith("resnet"):
    import torchvision

    backbone = getattr(torchvision.models, model)(weights=None)
    features = backbone.fc.in_features
    backbone.fc = torch.nn.Identity()
  else:
    import timm

    backbone = timm.create_model(
      "vit_small_patch16_224", pretrained=False, img_size=image_size, num_classes=0
    )
    features = 384
  head = torch.nn.Linear(features, 512)
  net = torch.nn.Sequential(backbone, head).cuda().train()
  memory_format = torch.channels_last if autocast else torch.contiguous_format
  net = net.to(memory_format=memory_format)
  optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4, weight_decay=1e-4)
  loss_fn = pml_losses.FastAPLoss(num_bins=10)
  images = torch.randn(batch, 3, image_size, image_size, device="cuda")
  images = images.contiguous(memory_format=memory_format)
  labels = torch.arange(batch // PER_CLASS, device="cuda").repeat_interleave(PER_CLASS)

  def step():
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
      embeddings = net(images)
    loss = loss_fn(F.normalize(embeddings.float(), dim=-1), labels)
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()

  return _timed(step, seconds)


def _timed(step, seconds: float) -> float:
  """`speed.timed` of `step()`: the median after two warm-up calls, at least 5 calls."""
  return speed.timed(step, seconds=seconds)


def _torch_available() -> str | None:
  """None if torch, a GPU and pytorch-metric-learning are there, else why not."""
  try:
    import pytorch_metric_learning  # noqa: F401
    import torch
  except ImportError as error:
    return str(error)
  return None if torch.cuda.is_available() else "torch sees no GPU"


def train_section(models: list[str], batch: int, image_size: int, seconds: float) -> list[dict]:
  """One row per step (module docstring): `{"model", "implementation", "precision", "time",
  "images_per_second", "vs_torch_autocast"}` (the last None without a torch row)."""
  rows: list[dict[str, Any]] = []
  for model in models:
    cases: list[tuple[str, str, bool, Any]] = [
      ("jaxrank", "float32", False, None),
      ("jaxrank", "bfloat16", True, None),
    ]
    if model == "vit_small":
      cases.append(("jaxrank, cuDNN attention", "bfloat16", True, "cudnn"))
    for name, precision, half, attention in cases:
      try:
        with _vit_attention(attention) if attention else contextlib.nullcontext():
          t = jax_step_time(model, half, batch, image_size, seconds)
      except Exception as error:  # pylint: disable=broad-except
        if attention is None:
          raise
        print(f"train {model} {name}: skipped ({type(error).__name__}: {error})"[:300], flush=True)
        continue
      rows.append({"model": model, "implementation": name, "precision": precision, "time": t})
      print(f"train {model} {name} {precision}: {t * 1e3:.1f} ms", flush=True)
    why = _torch_available()
    if why is not None:
      print(f"train {model} torch: skipped ({why})", flush=True)
    else:
      for precision, autocast in (("float32 (TF32)", False), ("autocast bfloat16", True)):
        t = torch_step_time(model, autocast, batch, image_size, seconds)
        import torch  # pylint: disable=g-import-not-at-top

        torch.cuda.empty_cache()  # The step's tensors, freed when it returned.
        name = "torch + pytorch-metric-learning"
        rows.append({"model": model, "implementation": name, "precision": precision, "time": t})
        print(f"train {model} torch {precision}: {t * 1e3:.1f} ms", flush=True)
  for row in rows:
    row["images_per_second"] = batch / row["time"]
    torch_rows = [
      r for r in rows if r["model"] == row["model"] and r["precision"] == "autocast bfloat16"
    ]
    row["vs_torch_autocast"] = (
      row["images_per_second"] / (batch / torch_rows[0]["time"]) if torch_rows else None
    )
  return rows
