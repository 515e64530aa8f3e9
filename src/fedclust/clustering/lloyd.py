"""The federated Lloyd step shared by the k-means family (FKM, FZKM, DK++, FedDP-KMeans).

One step, for the clients taking part in a round:

1. **assign**: every client assigns each of its samples to the nearest broadcast centre;
2. **sum and count**: per cluster l, the clipped samples' sum ``s_l`` and their count ``n_l``
   (summed over the clients: the server only ever uses the totals);
3. **release**: the totals leave the clients through the run's trust model
   (:func:`fedclust.privacy.release.release_sum`): a Gaussian draw per client (``local``), or one
   draw on the securely aggregated or centrally held sum (``secure_aggregation``, ``central``);
4. **update with count post-processing**: ``C_l = s_l / n_l`` for every cluster whose noisy count
   passes the threshold ``max(1, count_threshold * sigma_n)`` (``sigma_n``: the std of the noise on
   the released count); a cluster below it keeps its previous centre, because a count near or below
   zero would throw the centre arbitrarily far. The new centre is then projected onto the ball of
   radius ``clip``, which holds every clipped sample and hence every true mean. Both rules read only
   released values and public constants: they are post-processing and cost no privacy.

``count_threshold = 0`` and ``project = False`` give the plain rule of the papers' baselines
(update when the noisy count is at least 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from fedclust.privacy.release import release_sum, sum_noise_std


@dataclass(frozen=True)
class LloydRelease:
    """How one Lloyd step's totals are released: the noise std of one release of the sums
    (``sum_std``) and of the counts (``count_std``), the trust model, and the post-processing."""

    sum_std: float = 0.0
    count_std: float = 0.0
    trust_model: str = "secure_aggregation"
    count_threshold: float = 0.0
    clip: float | None = None
    project: bool = False
    distributed: bool = False

    @property
    def private(self) -> bool:
        return self.sum_std > 0 or self.count_std > 0


def cluster_totals(Xc: np.ndarray, labels: np.ndarray, k: int, weights: np.ndarray | None = None):
    """Per-cluster sums (k, m) and counts (k,) of the rows of ``Xc`` under ``labels``, as one sparse
    segment sum (``weights``: per-row weights, e.g. fuzzy memberships; default 1)."""
    w = np.ones(labels.size) if weights is None else np.asarray(weights, dtype=np.float64)
    onehot = sparse.csr_matrix((w, (labels, np.arange(labels.size))), shape=(k, labels.size))
    return np.asarray(onehot @ Xc), np.asarray(onehot.sum(1)).ravel()


def min_count(release: LloydRelease, n_contributors: int) -> float:
    """The smallest released count for which a centre is updated."""
    cnt_std = sum_noise_std(release.count_std, n_contributors, release.trust_model) if release.count_std > 0 else 0.0
    return max(1.0, release.count_threshold * cnt_std)


def project_to_ball(C: np.ndarray, radius: float | None) -> np.ndarray:
    """Every row of ``C`` scaled onto the L2 ball of ``radius`` when outside it (None: unchanged)."""
    if radius is None:
        return C
    norms = np.linalg.norm(C, axis=1, keepdims=True)
    return C * np.minimum(1.0, radius / np.maximum(norms, 1e-300))


def update_centres(C: np.ndarray, sums: np.ndarray, counts: np.ndarray, release: LloydRelease,
                   n_contributors: int) -> np.ndarray:
    """The server's update from released totals: mean where the count passes :func:`min_count`,
    the previous centre elsewhere, then (``release.project``) onto the clip ball."""
    ok = counts >= min_count(release, n_contributors)
    new = C.copy()
    new[ok] = sums[ok] / counts[ok, None]
    if release.project:
        new[ok] = project_to_ball(new[ok], release.clip)
    return new


def release_totals(sums: np.ndarray, counts: np.ndarray, release: LloydRelease, n_contributors: int,
                   rng: np.random.Generator | None):
    """The released (noisy) sums and counts of ``n_contributors`` clients under the trust model."""
    s = release_sum(sums, release.sum_std, n_contributors, release.trust_model, rng, distributed=release.distributed)
    c = release_sum(counts, release.count_std, n_contributors, release.trust_model, rng,
                    distributed=release.distributed)
    return s, c


def lloyd_step(Xc: np.ndarray, labels: np.ndarray, C: np.ndarray, release: LloydRelease, n_contributors: int,
               rng: np.random.Generator | None, weights: np.ndarray | None = None) -> np.ndarray:
    """One federated Lloyd step: totals of the rows ``Xc`` (clipped samples of the round's
    clients) under ``labels`` (their nearest centres), released and post-processed."""
    sums, counts = cluster_totals(Xc, labels, C.shape[0], weights)
    sums, counts = release_totals(sums, counts, release, n_contributors, rng)
    return update_centres(C, sums, counts, release, n_contributors)
