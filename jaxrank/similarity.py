"""Scoring rules for in-batch retrieval and evaluation, passed as `similarity_fn`.

Each is `fn(queries [Q, D], items [N, D]) -> scores [Q, N]` (`jaxrank.types.SimilarityFn`), higher
meaning more similar: `cosine` (the default), `dot_product`, `negative_squared_euclidean`, and
`hamming` (`1 - 2 d / b` of relaxed or binary codes). Any function of that signature works.

>>> import jax.numpy as jnp
>>> import jaxrank
>>> codes = jnp.array([[1.0, 1.0, -1.0, 1.0], [1.0, -1.0, -1.0, 1.0], [-1.0, -1.0, 1.0, -1.0]])
>>> scores, relevance, where = jaxrank.batch_retrieval(
...     codes, jnp.array([0, 0, 1]), similarity_fn=jaxrank.similarity.hamming)
>>> scores[0].tolist()
[1.0, 0.5, -1.0]
"""

from jaxrank._src.similarity import cosine as cosine
from jaxrank._src.similarity import dot_product as dot_product
from jaxrank._src.similarity import hamming as hamming
from jaxrank._src.similarity import negative_squared_euclidean as negative_squared_euclidean

__all__ = ["cosine", "dot_product", "hamming", "negative_squared_euclidean"]
