"""A memory of past batches for any loss: a pure, jittable ring buffer of embeddings and labels.

RaMBO (Rolinek et al. 2020, sec. 4.3) keeps the scores of the last tau batches so that each query is
ranked against more items than one batch holds, "but the gradients only flow through the current
batch"; cross-batch memories (XBM) keep many more. In jaxrank the memory stores embeddings, so it
works with every loss: its contents enter `batch_retrieval` as a gallery.

>>> import jax.numpy as jnp
>>> import jaxrank
>>> from jaxrank import memory
>>> state = memory.init(size=8, embedding_dim=2)
>>> e, y = jnp.array([[1.0, 0.0], [0.0, 1.0]]), jnp.array([0, 1])
>>> scores, relevance, where = jaxrank.batch_retrieval(
...     e, y, gallery_embeddings=state.embeddings, gallery_labels=state.labels,
...     gallery_where=state.where)
>>> scores.shape, int(where.sum())  # The empty memory adds 8 masked columns.
((2, 10), 2)
>>> state = memory.push(state, e, y)  # After the loss: stored without gradient.
>>> int(state.where.sum()), int(state.position)
(2, 2)
"""

from jaxrank._src.memory import init as init
from jaxrank._src.memory import MemoryState as MemoryState
from jaxrank._src.memory import push as push

__all__ = ["MemoryState", "init", "push"]
