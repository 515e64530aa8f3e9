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

import math
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from fedclust.privacy.mechanisms import clip_rows
from fedclust.privacy.observe import report
from fedclust.privacy.release import check_trust_model, release_sum, sum_noise_std


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


def pair_sensitivity(clip: float) -> float:
    """The L2 sensitivity of a k-means-family round's ``(sums, counts)`` upload: one sample (add/remove)
    moves one cluster's sum by at most ``clip`` and its count by 1, so ``sqrt(clip^2 + 1)``."""
    return math.sqrt(float(clip) ** 2 + 1.0)


def kmeans_release(
    pair_std: float, *, trust_model: str, count_threshold: float, project: bool, clip: float | None, method: str = ""
) -> LloydRelease:
    """The release of a k-means-family round (FKM, FZKM, DK++): sums and counts share one noise std
    (``z`` times :func:`pair_sensitivity`, 0 when not private), and the post-processing applies only in a
    private run (without noise the plain rule, count >= 1, is exact)."""
    check_trust_model(trust_model, method=method)
    if not count_threshold >= 0 or not math.isfinite(count_threshold):
        raise ValueError(f"count_threshold must be a finite number >= 0, got {count_threshold}")
    private = pair_std > 0
    return LloydRelease(
        sum_std=pair_std,
        count_std=pair_std,
        trust_model=trust_model,
        count_threshold=float(count_threshold) if private else 0.0,
        clip=clip,
        project=bool(project) and private,
    )


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


def masked_means(C: np.ndarray, sums: np.ndarray, counts: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """The centre update of a Lloyd step: a copy of ``C`` (k, m) whose rows ``ok`` become
    ``sums / counts``; the other clusters (empty, or with a noisy count below the threshold) keep
    their centre."""
    C = C.copy()
    C[ok] = sums[ok] / counts[ok, None]
    return C


def update_centres(
    C: np.ndarray, sums: np.ndarray, counts: np.ndarray, release: LloydRelease, n_contributors: int
) -> np.ndarray:
    """The server's update from released totals: mean where the count passes :func:`min_count`,
    the previous centre elsewhere, then (``release.project``) onto the clip ball."""
    report("lloyd_update", (C, sums, counts))  # the broadcast centres and the released totals
    ok = counts >= min_count(release, n_contributors)
    new = masked_means(C, sums, counts, ok)
    if release.project and release.clip is not None and ok.any():
        new[ok] = clip_rows(new[ok], release.clip)[0]
    return new


def release_totals(
    sums: np.ndarray, counts: np.ndarray, release: LloydRelease, n_contributors: int, rng: np.random.Generator | None
):
    """The released (noisy) sums and counts of ``n_contributors`` clients under the trust model."""
    s = release_sum(sums, release.sum_std, n_contributors, release.trust_model, rng, distributed=release.distributed)
    c = release_sum(
        counts, release.count_std, n_contributors, release.trust_model, rng, distributed=release.distributed
    )
    report("lloyd_totals", (s, c))
    return s, c


def lloyd_step(
    Xc: np.ndarray,
    labels: np.ndarray,
    C: np.ndarray,
    release: LloydRelease,
    n_contributors: int,
    rng: np.random.Generator | None,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """One federated Lloyd step: totals of the rows ``Xc`` (clipped samples of the round's
    clients) under ``labels`` (their nearest centres), released and post-processed."""
    sums, counts = cluster_totals(Xc, labels, C.shape[0], weights)
    sums, counts = release_totals(sums, counts, release, n_contributors, rng)
    return update_centres(C, sums, counts, release, n_contributors)
