"""Flax NNX networks that map images to embeddings or relaxed hash codes, and their weights on disk.

This module needs the `train` extra (`pip install 'jaxrank[train]'`, for Flax); the core of
jaxrank does not import it: `from jaxrank import models`.

One module per family; import every name from `jaxrank.models`:

* `convnet`: `SmallConvNet`, a few 3x3 convolutions with LayerNorm, for small images (8x8 digits,
  32x32).
* `resnet`: `ResNet`, with `resnet18`, `resnet50` and `resnet101`: the torchvision ResNets without
  the classifier, randomly initialised, with BatchNorm and a pooling passed in.
* `vit`: `VisionTransformer`, with `vit_small`: timm's ViT-S/16 and DeiT-S/16 without the
  classifier.
* `pooling`: poolings of a feature map, `global_average_pool`, `global_max_pool`,
  `average_max_pool`, `GeMPool` (learnable p), each over the cells of an optional `mask`
  (images padded to a shared shape pool as unpadded); `feature_map_mask`, a feature map's mask
  from its images' pixel mask.
* `heads`: `EmbeddingHead` (a linear layer and L2 normalisation, for embeddings compared by
  cosine), `HashingHead` (a linear layer and `tanh(scale * h)`, the relaxed binary codes of
  hashing) and `EmbeddingModel` (a backbone followed by a head).
* `descriptors`: `extract_descriptors`, multi-scale descriptors of images of any sizes as the
  landmark retrieval papers extract them (resized by `resize_image`, padded into few bucket
  shapes with a pixel mask: few compiled programs; the scales combined by a generalised mean).
* `weights`: `save_weights` and `load_weights`, every variable of a model (parameters and
  BatchNorm statistics) to and from a local `.npz` file; `freeze_batchnorm`, every BatchNorm of a
  module to its running statistics, nothing else.

**Mixed precision** follows Flax: every network takes `dtype`, the dtype of its computation
(`None`, the default, infers it from the inputs and parameters: float32 for float32 images), and
`param_dtype`, the dtype its parameters are stored and trained in (float32 by default). With
`dtype=jnp.bfloat16` and float32 parameters, convolutions, linear layers and attention's products
run in bfloat16 on float32 parameters cast for each use, and their gradients reach the parameters
in float32. What needs the range or precision of float32 stays there: normalisation statistics
(BatchNorm's batch and running statistics, LayerNorm's), the normalisation itself (`x - mean`,
scaled and shifted, is computed in float32 and then cast to `dtype`), attention's softmax, the
embeddings' L2 normalisation and the hashing head's `tanh` (heads return float32, so scores and
losses are float32 whatever the backbone computes in).

Pretrained weights are never downloaded: `load_weights` reads only a local file that the user
provides, and `jaxrank.convert.load_pytorch_weights` a local torchvision or timm checkpoint.

>>> import jax.numpy as jnp
>>> from flax import nnx
>>> from jaxrank import models
>>> rngs = nnx.Rngs(0)
>>> model = models.EmbeddingModel(
...     models.SmallConvNet(1, features=(8, 16), rngs=rngs),
...     models.EmbeddingHead(16, 4, rngs=rngs))
>>> embeddings = model(jnp.ones((2, 8, 8, 1)))
>>> embeddings.shape, jnp.linalg.norm(embeddings, axis=-1).round(4).tolist()
((2, 4), [1.0, 1.0])
"""

from jaxrank.models.convnet import SmallConvNet as SmallConvNet
from jaxrank.models.descriptors import extract_descriptors as extract_descriptors
from jaxrank.models.descriptors import resize_image as resize_image
from jaxrank.models.heads import EmbeddingHead as EmbeddingHead
from jaxrank.models.heads import EmbeddingModel as EmbeddingModel
from jaxrank.models.heads import HashingHead as HashingHead
from jaxrank.models.pooling import average_max_pool as average_max_pool
from jaxrank.models.pooling import feature_map_mask as feature_map_mask
from jaxrank.models.pooling import GeMPool as GeMPool
from jaxrank.models.pooling import global_average_pool as global_average_pool
from jaxrank.models.pooling import global_max_pool as global_max_pool
from jaxrank.models.resnet import ResNet as ResNet
from jaxrank.models.resnet import resnet18 as resnet18
from jaxrank.models.resnet import resnet50 as resnet50
from jaxrank.models.resnet import resnet101 as resnet101
from jaxrank.models.vit import VisionTransformer as VisionTransformer
from jaxrank.models.vit import vit_small as vit_small
from jaxrank.models.weights import freeze_batchnorm as freeze_batchnorm
from jaxrank.models.weights import load_weights as load_weights
from jaxrank.models.weights import save_weights as save_weights

# In the order of the reference page (autodoc documents `__all__` in this order).
__all__ = [
  "SmallConvNet",
  "ResNet",
  "resnet18",
  "resnet50",
  "resnet101",
  "VisionTransformer",
  "vit_small",
  "global_average_pool",
  "global_max_pool",
  "average_max_pool",
  "GeMPool",
  "feature_map_mask",
  "freeze_batchnorm",
  "EmbeddingHead",
  "HashingHead",
  "EmbeddingModel",
  "extract_descriptors",
  "resize_image",
  "save_weights",
  "load_weights",
]
