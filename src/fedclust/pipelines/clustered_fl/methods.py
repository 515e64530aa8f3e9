"""IFCA, CFL-MGD and FedAvg nodes (generic, :func:`fedclust.pipelines.methods.node_functions`;
non-private: their privacy report says epsilon = inf)."""

from fedclust.pipelines.methods import node_functions as nodes_for  # noqa: F401
