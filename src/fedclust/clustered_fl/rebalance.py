"""Random rebalancing (RR) of cluster assignments: RR-Cluster's server-side step (spec 002, section 2.3).

Paper: Yang, Hu, Kim & Li, "Differentially Private Federated Clustering with Random Rebalancing",
Algorithm 1 lines 9-10 and Algorithm 2 ("Server: j_l = {j : |S_j^t| >= B}; j_s = [k] \\ j_l; sample client
indices in U_{j in j_l} S_j^t uniformly at random to expand the small ones such that |S_j^t| = B").

Semantics implemented (the spec's RESOLUTION pseudo-code):

* small clusters ``j_s = {j : |S_j| < B}``; each is filled to exactly ``B``;
* one *slot* per missing update; the slots are shuffled so no small cluster is favoured;
* for every slot, the donor pool is the union of the updates of the clusters that are not small and
  still have a surplus (``|S_j| > B``); ONE update is drawn uniformly from that pool (uniform over
  updates, not over clusters) and MOVED (never copied) to the slot's cluster;
* hence no donor goes below ``B``, receivers never donate and an update moves at most once;
* the groups stay a partition of the round's updates. Requires ``m >= k B`` (the paper's
  ``B <= qM/k``); otherwise a ValueError names ``B``.

``B = 0`` (or no small cluster) draws nothing from the generator, so a run with RR on a separate
stream ("rebalance") shares every other random draw with the run without RR.

The moves are a loop over slots (server-side, at most ``k B`` tiny steps per round); each step is a
vectorized selection over the round's updates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RebalanceResult", "random_rebalance", "check_threshold"]


@dataclass
class RebalanceResult:
    """``groups`` (m,) final cluster of every update; ``moved`` (m,) bool, True for moved updates;
    ``source`` (m,) cluster before RR; ``sizes_before``/``sizes_after`` (k,) cluster sizes."""

    groups: np.ndarray
    moved: np.ndarray
    source: np.ndarray
    sizes_before: np.ndarray
    sizes_after: np.ndarray

    @property
    def n_moved(self) -> int:
        return int(self.moved.sum())


def check_threshold(B, m: int, k: int) -> int:
    """Validate the rebalancing threshold: an integer with ``0 <= B <= m/k`` (m updates, k clusters)."""
    if isinstance(B, bool) or not isinstance(B, (int, np.integer)) or B < 0:
        raise ValueError(f"B (rebalancing threshold) must be an integer >= 0, got {B!r}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if B * k > m:
        raise ValueError(f"B (rebalancing threshold) must satisfy B <= m/k = {m}/{k} = {m / k:.3g} "
                         f"(paper: 1 <= B <= qM/k, m = clients per round), got B={B}")
    return int(B)


def random_rebalance(groups, k: int, B: int, rng: np.random.Generator) -> RebalanceResult:
    """Rebalance ``groups`` (m,) cluster ids in [0, k) so that every cluster has at least ``B`` updates.

    See the module docstring for the exact procedure. ``rng`` should be a dedicated stream
    (``fedclust.rng.stream(seed, "rebalance")``). The input array is not modified.
    """
    g0 = np.asarray(groups)
    if g0.ndim != 1 or (g0.size and not np.issubdtype(g0.dtype, np.integer)):
        raise ValueError("groups must be a 1-D integer array of cluster ids")
    if g0.size and (g0.min() < 0 or g0.max() >= k):
        raise ValueError(f"groups must be cluster ids in [0, k={k})")
    m = int(g0.size)
    B = check_threshold(B, m, k)
    g = g0.astype(np.int64).copy()
    sizes0 = np.bincount(g, minlength=k).astype(np.int64)
    moved = np.zeros(m, dtype=bool)
    if B == 0 or sizes0.min() >= B:
        return RebalanceResult(g, moved, g0.astype(np.int64).copy(), sizes0, sizes0.copy())
    sizes = sizes0.copy()
    small = sizes0 < B
    slots = np.repeat(np.flatnonzero(small), B - sizes0[small])
    rng.shuffle(slots)
    for j_dst in slots:  # one move per missing update (<= k*B, server side)
        donor = (~small) & (sizes > B)
        pool = np.flatnonzero(donor[g] & ~moved)  # moved updates sit in receivers, never donors
        i = pool[rng.integers(pool.size)]  # uniform over the pooled updates
        sizes[g[i]] -= 1
        sizes[j_dst] += 1
        g[i] = j_dst
        moved[i] = True
    return RebalanceResult(g, moved, g0.astype(np.int64).copy(), sizes0, sizes)
