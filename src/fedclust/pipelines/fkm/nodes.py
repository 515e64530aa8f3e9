"""FKM nodes: the generic nodes of :func:`fedclust.pipelines.methods.node_functions` (calibration and
run adapter in :mod:`fedclust.registry.clustering`)."""

from fedclust.pipelines.methods import node_functions

calibrate, train = node_functions("fkm")
