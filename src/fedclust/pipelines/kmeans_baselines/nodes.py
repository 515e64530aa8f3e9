"""FZKM, DK++ and DKM nodes: the generic nodes of :func:`fedclust.pipelines.methods.node_functions`.

In their own pipelines the baselines are calibrated by the accountant to the run's total
(epsilon, delta), like FKM. Not every configuration is a DP mechanism (amendment A-1): see
:func:`fedclust.registry.clustering.non_dp_steps`; such a run still adds the calibrated noise but
its report says epsilon = inf and names the step.
"""

from fedclust.pipelines.methods import node_functions as nodes_for  # noqa: F401
