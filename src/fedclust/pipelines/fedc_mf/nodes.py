"""FedCAvg / FedCGds nodes (generic, :func:`fedclust.pipelines.methods.node_functions`). Neither
method adds privacy noise: with a privacy budget set, the run is still non-private, and its privacy
report says so (epsilon = inf)."""

from fedclust.pipelines.methods import node_functions as nodes_for  # noqa: F401
