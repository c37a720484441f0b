"""jaxrank: learning embeddings by optimising rank-based retrieval metrics, in JAX.

The public API is what `__all__` lists: the functions below and the `hashing`, `landscape`,
`memory`, `similarity` and `types` namespaces; with the `train` extra, also the `jaxrank.models` and
`jaxrank.data` subpackages. The implementation lives in `jaxrank._src` and is private.
"""

from jaxrank import hashing as hashing
from jaxrank import landscape as landscape
from jaxrank import memory as memory
from jaxrank import similarity as similarity
from jaxrank import types as types
from jaxrank._src.blackbox import blackbox_ap_loss as blackbox_ap_loss
from jaxrank._src.blackbox import blackbox_recall_loss as blackbox_recall_loss
from jaxrank._src.blackbox_ranks import blackbox_ranks as blackbox_ranks
from jaxrank._src.blocked import blocked_loss as blocked_loss
from jaxrank._src.checks import traced_checks as traced_checks
from jaxrank._src.chunked import chunked_value_and_grad as chunked_value_and_grad
from jaxrank._src.chunked import host_chunked_value_and_grad as host_chunked_value_and_grad
from jaxrank._src.classification import arcface_loss as arcface_loss
from jaxrank._src.classification import cosface_loss as cosface_loss
from jaxrank._src.classification import normalized_softmax_loss as normalized_softmax_loss
from jaxrank._src.evaluation import evaluate_retrieval as evaluate_retrieval
from jaxrank._src.hamming import hamming_tie_aware_ap_metric as hamming_tie_aware_ap_metric
from jaxrank._src.hamming import hamming_tie_aware_ndcg_metric as hamming_tie_aware_ndcg_metric
from jaxrank._src.hashing_evaluation import evaluate_hashing as evaluate_hashing
from jaxrank._src.hierarchical import asi_metric as asi_metric
from jaxrank._src.hierarchical import hap_metric as hap_metric
from jaxrank._src.hierarchical import hierarchical_relevance as hierarchical_relevance
from jaxrank._src.hierarchical import tie_aware_hap_metric as tie_aware_hap_metric
from jaxrank._src.histogram import class_balancing_weights as class_balancing_weights
from jaxrank._src.histogram import fastap_loss as fastap_loss
from jaxrank._src.histogram import soft_binning_ap_loss as soft_binning_ap_loss
from jaxrank._src.metrics import ap_metric as ap_metric
from jaxrank._src.metrics import dcg_metric as dcg_metric
from jaxrank._src.metrics import map_at_r_metric as map_at_r_metric
from jaxrank._src.metrics import mrr_metric as mrr_metric
from jaxrank._src.metrics import ndcg_metric as ndcg_metric
from jaxrank._src.metrics import opa_metric as opa_metric
from jaxrank._src.metrics import precision_at_k_metric as precision_at_k_metric
from jaxrank._src.metrics import recall_at_k_metric as recall_at_k_metric
from jaxrank._src.metrics import relevant_fraction_at_k_metric as relevant_fraction_at_k_metric
from jaxrank._src.metrics import tie_aware_ap_metric as tie_aware_ap_metric
from jaxrank._src.metrics import tie_aware_ndcg_metric as tie_aware_ndcg_metric
from jaxrank._src.mixup import embedding_mixup as embedding_mixup
from jaxrank._src.mixup import mixup_pairs as mixup_pairs
from jaxrank._src.mixup import similarity_mixup as similarity_mixup
from jaxrank._src.pairwise import contrastive_loss as contrastive_loss
from jaxrank._src.pairwise import multi_similarity_loss as multi_similarity_loss
from jaxrank._src.pairwise import triplet_loss as triplet_loss
from jaxrank._src.postprocessing import alpha_query_expansion as alpha_query_expansion
from jaxrank._src.postprocessing import apply_whitening as apply_whitening
from jaxrank._src.postprocessing import database_augmentation as database_augmentation
from jaxrank._src.postprocessing import learn_whitening as learn_whitening
from jaxrank._src.proxy import proxy_anchor_loss as proxy_anchor_loss
from jaxrank._src.proxy import proxy_nca_loss as proxy_nca_loss
from jaxrank._src.proxy import proxy_nca_plus_plus_loss as proxy_nca_plus_plus_loss
from jaxrank._src.retrieval import batch_retrieval as batch_retrieval
from jaxrank._src.revisited import evaluate_revisited as evaluate_revisited
from jaxrank._src.sharded import sharded_batch_retrieval as sharded_batch_retrieval
from jaxrank._src.sharded import sharded_loss as sharded_loss
from jaxrank._src.sharded import sharded_mean as sharded_mean
from jaxrank._src.smooth_rank import calibration_loss as calibration_loss
from jaxrank._src.smooth_rank import decomposability_gap as decomposability_gap
from jaxrank._src.smooth_rank import heaviside_step as heaviside_step
from jaxrank._src.smooth_rank import roadmap_loss as roadmap_loss
from jaxrank._src.smooth_rank import sigmoid_step as sigmoid_step
from jaxrank._src.smooth_rank import smooth_rank_ap_loss as smooth_rank_ap_loss
from jaxrank._src.smooth_rank import smoothap_loss as smoothap_loss
from jaxrank._src.smooth_rank import supap_loss as supap_loss
from jaxrank._src.smooth_rank import supap_negative_step as supap_negative_step
from jaxrank._src.smooth_rank_losses import recall_at_k_surrogate_loss as recall_at_k_surrogate_loss
from jaxrank._src.smooth_rank_losses import smooth_ndcg_loss as smooth_ndcg_loss
from jaxrank._src.smooth_rank_losses import smooth_recall_at_k_loss as smooth_recall_at_k_loss
from jaxrank._src.smooth_rank_losses import sup_ndcg_loss as sup_ndcg_loss
from jaxrank._src.smooth_rank_losses import sup_recall_at_k_loss as sup_recall_at_k_loss
from jaxrank._src.tie_aware import simplified_tie_aware_ap_loss as simplified_tie_aware_ap_loss
from jaxrank._src.tie_aware import simplified_tie_aware_ndcg_loss as simplified_tie_aware_ndcg_loss
from jaxrank._src.tie_aware import tie_aware_ap_loss as tie_aware_ap_loss
from jaxrank._src.tie_aware import tie_aware_ndcg_loss as tie_aware_ndcg_loss

__version__ = "0.1.0.dev0"

__all__ = [
  "alpha_query_expansion",
  "ap_metric",
  "arcface_loss",
  "apply_whitening",
  "asi_metric",
  "batch_retrieval",
  "blackbox_ap_loss",
  "blackbox_ranks",
  "blackbox_recall_loss",
  "blocked_loss",
  "calibration_loss",
  "chunked_value_and_grad",
  "class_balancing_weights",
  "contrastive_loss",
  "cosface_loss",
  "database_augmentation",
  "dcg_metric",
  "decomposability_gap",
  "embedding_mixup",
  "evaluate_hashing",
  "evaluate_retrieval",
  "evaluate_revisited",
  "fastap_loss",
  "hamming_tie_aware_ap_metric",
  "hamming_tie_aware_ndcg_metric",
  "hap_metric",
  "hashing",
  "heaviside_step",
  "hierarchical_relevance",
  "host_chunked_value_and_grad",
  "landscape",
  "learn_whitening",
  "map_at_r_metric",
  "memory",
  "mixup_pairs",
  "mrr_metric",
  "multi_similarity_loss",
  "ndcg_metric",
  "normalized_softmax_loss",
  "opa_metric",
  "precision_at_k_metric",
  "proxy_anchor_loss",
  "proxy_nca_loss",
  "proxy_nca_plus_plus_loss",
  "recall_at_k_metric",
  "recall_at_k_surrogate_loss",
  "relevant_fraction_at_k_metric",
  "roadmap_loss",
  "sharded_batch_retrieval",
  "sharded_loss",
  "sharded_mean",
  "sigmoid_step",
  "similarity",
  "similarity_mixup",
  "simplified_tie_aware_ap_loss",
  "simplified_tie_aware_ndcg_loss",
  "smooth_ndcg_loss",
  "smooth_rank_ap_loss",
  "smooth_recall_at_k_loss",
  "smoothap_loss",
  "soft_binning_ap_loss",
  "sup_ndcg_loss",
  "sup_recall_at_k_loss",
  "supap_loss",
  "supap_negative_step",
  "tie_aware_ap_loss",
  "tie_aware_ap_metric",
  "tie_aware_hap_metric",
  "tie_aware_ndcg_loss",
  "tie_aware_ndcg_metric",
  "traced_checks",
  "triplet_loss",
  "types",
]
