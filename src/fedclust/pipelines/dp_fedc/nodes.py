"""DP-FedC nodes: the generic nodes of :func:`fedclust.pipelines.methods.node_functions` (budget
calibration and run adapter in :func:`fedclust.registry.clustering.dp_fedc_calibrate`)."""

from fedclust.pipelines.methods import node_functions

calibrate, train = node_functions("dp_fedc")
