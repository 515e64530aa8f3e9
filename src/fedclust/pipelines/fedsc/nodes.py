"""FedSC nodes: the generic nodes of :func:`fedclust.pipelines.methods.node_functions` (privacy
variants and run adapter in :func:`fedclust.registry.clustering.fedsc_calibrate`)."""

from fedclust.pipelines.methods import node_functions

calibrate, train = node_functions("fedsc")
