"""The papers' own privacy formulas, each a named function with its equation numbers.

* :mod:`.dp_fedc`: DP-FedC, Theorem 2 eq. (29) and Theorem 3 eq. (32);
* :mod:`.fedsc`: FedSC, Proposition 3.7 and Theorem 3.9;
* :mod:`.rr_cluster`: RR-Cluster, Prop. 4.1 and Theorem 4.2 / A.5.

They are reported next to the accountant's ε (:mod:`fedclust.privacy.report`), never instead of it.
"""

from fedclust.privacy.paper import dp_fedc, fedsc, rr_cluster

__all__ = ["dp_fedc", "fedsc", "rr_cluster"]
