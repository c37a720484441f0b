"""jaxrank: learning embeddings by optimising rank-based retrieval metrics, in JAX."""

from jaxrank import memory as memory
from jaxrank.blackbox import blackbox_ap_loss as blackbox_ap_loss
from jaxrank.blackbox import blackbox_recall_loss as blackbox_recall_loss
from jaxrank.chunked import chunked_value_and_grad as chunked_value_and_grad
from jaxrank import hashing as hashing
from jaxrank.hashing import hamming_tie_aware_ap_metric as hamming_tie_aware_ap_metric
from jaxrank.hashing import hamming_tie_aware_ndcg_metric as hamming_tie_aware_ndcg_metric
from jaxrank.hashing import simplified_tie_aware_ap_loss as simplified_tie_aware_ap_loss
from jaxrank.hashing import simplified_tie_aware_ndcg_loss as simplified_tie_aware_ndcg_loss
from jaxrank.hashing import tie_aware_ap_loss as tie_aware_ap_loss
from jaxrank.hashing import tie_aware_ndcg_loss as tie_aware_ndcg_loss
from jaxrank.histogram import class_balancing_weights as class_balancing_weights
from jaxrank.histogram import fastap_loss as fastap_loss
from jaxrank.histogram import soft_binning_ap_loss as soft_binning_ap_loss
from jaxrank.metrics import ap_metric as ap_metric
from jaxrank.metrics import map_at_r_metric as map_at_r_metric
from jaxrank.metrics import ndcg_metric as ndcg_metric
from jaxrank.metrics import precision_at_k_metric as precision_at_k_metric
from jaxrank.metrics import recall_at_k_metric as recall_at_k_metric
from jaxrank.metrics import tie_aware_ap_metric as tie_aware_ap_metric
from jaxrank.metrics import tie_aware_ndcg_metric as tie_aware_ndcg_metric
from jaxrank.ranking import blackbox_ranks as blackbox_ranks
from jaxrank.retrieval import batch_retrieval as batch_retrieval
from jaxrank.retrieval import evaluate_retrieval as evaluate_retrieval
from jaxrank.smooth_rank import calibration_loss as calibration_loss
from jaxrank.smooth_rank import decomposability_gap as decomposability_gap
from jaxrank.smooth_rank import roadmap_loss as roadmap_loss
from jaxrank.smooth_rank import smoothap_loss as smoothap_loss
from jaxrank.smooth_rank import supap_loss as supap_loss
from jaxrank.sharded import sharded_batch_retrieval as sharded_batch_retrieval
from jaxrank.sharded import sharded_loss as sharded_loss
from jaxrank.sharded import sharded_mean as sharded_mean

__version__ = "0.1.0.dev0"
