"""Helpers for learning to hash (He et al. 2018): relaxed Hamming distances, binary codes, and the
growing scale of the tanh relaxation.

The tie-aware losses and exact Hamming metrics themselves are in the top-level namespace
(`jaxrank.tie_aware_ap_loss`, `jaxrank.hamming_tie_aware_ap_metric`, ...).
"""

from jaxrank._src.hamming import binarize as binarize
from jaxrank._src.hamming import relaxed_hamming_distance as relaxed_hamming_distance
from jaxrank._src.hamming import tanh_scale as tanh_scale

__all__ = ["binarize", "relaxed_hamming_distance", "tanh_scale"]
