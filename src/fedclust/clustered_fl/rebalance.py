"""Random rebalancing (RR) of cluster assignments: RR-Cluster's server-side step.

The method, our choices and measured numbers: ``docs/methods/rr_cluster.md``.

Paper: Yang, Hu, Kim & Li, "Differentially Private Federated Clustering with Random Rebalancing",
Algorithm 1 lines 9-10 and Algorithm 2 ("Server: j_l = {j : |S_j^t| >= B}; j_s = [k] \\ j_l; sample client
indices in U_{j in j_l} S_j^t uniformly at random to expand the small ones such that |S_j^t| = B").

Semantics implemented:

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

When does RR act at all? (diagnostic helpers, not in the paper.) With Gaussian identifier noise of
per-coordinate std ``sigma`` relative to the clipped one-hot (``sigma = sqrt(2) sigma_s`` for
RR-Cluster's replace-one calibration, ``sigma_s`` for the paper's literal noise) the noisy argmax keeps
a client's own cluster with probability ``p = identifier_keep_probability(sigma, k) = int phi(z)
Phi(z + 1/sigma)^(k-1) dz`` and sends it to each other cluster with ``(1-p)/(k-1)``, so every cluster
expects at least ``min_expected_cluster_size(m, k, sigma) = m (1-p)/(k-1)`` of the m
updates, whatever the clients chose. RR moves updates only in rounds where a noisy cluster is below B.

Privacy: RR reads only the (already privatized) noisy assignment and its own random draws, so under the
replace-one relation of the comparison it does not change the sensitivity: RR-Cluster
and the baselines both add ``2 C sigma`` to every cluster sum (derivation in
:mod:`fedclust.clustered_fl.rr_cluster`), and RR's averaged noise ``2 C sigma/max(|S_j|, B)`` is never
larger than the baseline's ``2 C sigma/|S_j|``. (Under add/remove, as the paper states it, the baseline
would pay ``C`` and RR ``2 C``; RR then helps only clusters with ``|S_j| < B/2``.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import log_ndtr

__all__ = [
    "RebalanceResult",
    "random_rebalance",
    "check_threshold",
    "identifier_keep_probability",
    "min_expected_cluster_size",
]


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
        raise ValueError(
            f"B (rebalancing threshold) must satisfy B <= m/k = {m}/{k} = {m / k:.3g} "
            f"(paper: 1 <= B <= qM/k, m = clients per round), got B={B}"
        )
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


def identifier_keep_probability(sigma_s: float, k: int) -> float:
    """P(argmax_j (e_c + sigma_s Z)_j = c), Z ~ N(0, I_k): the chance that the noisy one-hot identifier
    (Alg. 2; C_s cancels in the argmax) keeps the client's own cluster c. ``sigma_s`` here is the noise
    std relative to the clipped one-hot: pass ``sqrt(2) * sigma_s`` for the replace-one calibration of
    :func:`fedclust.clustered_fl.rr_cluster.privatize_identifiers`.

    Coordinate c is ``1 + sigma Z_c`` and the others ``sigma Z_j``, so given ``Z_c = z`` all others lose
    with probability ``Phi(z + 1/sigma)^(k-1)``; the expectation over z is a Gauss-Hermite quadrature
    (200 nodes). ``sigma_s = 0`` gives 1; ``sigma_s -> inf`` tends to 1/k."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if not (sigma_s >= 0) or np.isinf(sigma_s):
        raise ValueError(f"sigma_s must be >= 0 and finite, got {sigma_s!r}")
    if k == 1 or sigma_s == 0:
        return 1.0

    z, w = np.polynomial.hermite_e.hermegauss(200)  # weight exp(-z^2/2)
    vals = np.exp((k - 1) * log_ndtr(z + 1.0 / sigma_s))
    return float(np.clip((w * vals).sum() / np.sqrt(2 * np.pi), 0.0, 1.0))


def min_expected_cluster_size(m: int, k: int, sigma_s: float) -> float:
    """Expected number of the m noisy identifiers that land in a cluster NO client chose:
    ``m (1 - p)/(k - 1)`` with ``p = identifier_keep_probability(sigma_s, k)``. Every cluster expects at
    least this many updates, so RR with ``B`` well below it moves (almost) nothing."""
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 0:
        raise ValueError(f"m must be an integer >= 0, got {m!r}")
    if k == 1:
        return float(m)
    return m * (1.0 - identifier_keep_probability(sigma_s, k)) / (k - 1)
