"""RR-Cluster and its DP baselines as one pipeline (``rr_cluster``), method chosen by
``rr_cluster.train.method``. Calibration and run: :mod:`fedclust.registry.clustered_fl` (the one RR
dispatch, shared with the RR grids)."""

from fedclust.pipelines.methods import node_functions
from fedclust.registry.configs import RR_METHODS as METHODS  # noqa: F401

calibrate, train = node_functions("rr_cluster")
