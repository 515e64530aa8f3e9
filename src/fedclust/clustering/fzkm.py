"""FZKM: federated fuzzy c-means, a baseline of DP-FedC's Table I (our reimplementation).

Reference: the FZKM baseline of "Differentially Private Federated Clustering Over Non-IID Data"
(Li, Wang, Chi, Quek, IEEE IoT-J 2023), reconstructed in spec 000, section 2.4, from Stallmann &
Wilbik, "Towards federated clustering: a federated fuzzy c-means algorithm (FFCM)" (arXiv
2201.07316): clients run fuzzy c-means locally, and the server obtains the global centres by
k-means on the received local centres. The paper gives no details; every choice below is ours.

One round t:

1. the server samples K of the N clients (uniformly, without replacement) and broadcasts the global
   centres C (k x m);
2. each sampled client runs ``local_iters`` fuzzy c-means iterations on its data, initialised at
   C: memberships ``u_jl = 1 / sum_l' (d_jl / d_jl')^(2/(f-1))`` (fuzzifier f = 2), then the
   per-cluster statistics ``S_il = sum_j u_jl^f x_j`` and ``M_il = sum_j u_jl^f``; with
   ``local_iters > 1`` the next iteration uses the client's own centres S_il / M_il;
3. optional DP (spec 000, A11): samples are clipped to L2 norm ``clip``; as sum_l u_jl^f <= 1, one
   sample changes (S_i, M_i) by at most sqrt(clip^2 + 1) in L2 (add/remove), so i.i.d.
   N(0, (z sqrt(clip^2+1))^2) noise is added to every uploaded entry. The bound is exact for
   ``local_iters = 1`` (memberships from the public C); with more local iterations the memberships
   depend on other local samples and the calibration is a heuristic (``info["dp_exact"]``);
4. the server forms the K*k local centres ``V_il = S_il / max(M_il, floor)`` with weights
   ``max(M_il, 0)`` and runs weighted k-means on them: the lowest-cost of Lloyd warm-started at the
   previous C and ``server_restarts`` weighted k-means++ restarts (``server_iters`` iterations each).

Labels: nearest global centre (the argmax membership of FCM with these centres gives the same).
Vectorized over clients: the sampled clients' data sit in one padded (K, n_max, m) array and every
FCM iteration is two batched matmuls.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from fedclust.clustering._common import (
    MECHANISMS,
    SegmentLayout,
    baseline_noise_multiplier,
    check_all_clients_nonempty,
    check_clients_per_round,
    check_float,
    check_int,
    clip_data,
    data_clip,
    initial_centroids,
    log_scores,
    nearest,
    new_history,
    noisy,
    padded_rows,
    sample_clients,
    server_kmeans,
    sq_dists,
    with_blas_limit,
)
from fedclust.clustering.base import ClusteringResult, check_inputs
from fedclust.privacy.events import GaussianRelease
from fedclust.rng import stream

logger = logging.getLogger(__name__)


def fcm_memberships(d2: np.ndarray, fuzzifier: float) -> np.ndarray:
    """FCM memberships from squared distances (..., k): u_l proportional to d2_l^(-1/(f-1)).
    A zero distance gets all the membership (split equally among ties)."""
    zero = d2 <= 1e-300
    with np.errstate(divide="ignore"):
        inv = np.where(zero, 0.0, d2 ** (-1.0 / (fuzzifier - 1.0)))
    anyzero = zero.any(-1, keepdims=True)
    inv = np.where(anyzero, zero.astype(np.float64), inv)
    return inv / inv.sum(-1, keepdims=True)


def local_fcm_stats(Xp: np.ndarray, mask: np.ndarray, C: np.ndarray, fuzzifier: float, iters: int):
    """Local FCM for all sampled clients at once. ``Xp`` (K, n_max, m) padded data, ``mask``
    (K, n_max). Returns S (K, k, m) and M (K, k) of the last iteration."""
    K = Xp.shape[0]
    V = np.broadcast_to(C, (K,) + C.shape)
    xsq = np.square(Xp).sum(-1)  # (K, n_max)
    for _ in range(iters):
        d2 = sq_dists(Xp, V, xsq)  # (K, n_max, k)
        U = fcm_memberships(d2, fuzzifier) ** fuzzifier * mask[..., None]  # (K, n_max, k)
        S = U.swapaxes(1, 2) @ Xp  # (K, k, m)
        M = U.sum(1)  # (K, k)
        V = np.where(M[..., None] > 1e-12, S / np.maximum(M, 1e-12)[..., None], V)
    return S, M


@with_blas_limit
def run(
    X,
    client,
    k: int,
    *,
    rounds: int = 100,
    clients_per_round: int | None = 30,
    seed: int = 0,
    fuzzifier: float = 2.0,
    local_iters: int = 1,
    server_iters: int = 20,
    server_restarts: int = 2,
    noise_multiplier: float = 0.0,
    epsilon: float | None = None,
    delta: float = 1e-4,
    mechanism: str = "classical",
    clip: float | None = None,
    init_centroids=None,
    y=None,
    progress=None,
) -> ClusteringResult:
    """Run FZKM for ``rounds`` rounds.

    Parameters
    ----------
    X, client, k: data (n, m), client of every sample, number of clusters.
    rounds: R >= 1. clients_per_round: K in [1, N] (None = all).
    fuzzifier: f > 1 (2 = standard FCM). local_iters, server_iters: >= 1. server_restarts: >= 0.
    noise_multiplier: z >= 0, noise std = z * sqrt(clip^2 + 1) per uploaded entry; or give the
        per-round ``epsilon`` (and ``delta``) to calibrate z with the ``mechanism`` ("classical" or
        "analytic") Gaussian mechanism at unit sensitivity. 0 / None = no DP.
    clip: L2 bound on every sample for DP (default with DP: the largest row norm, treated as public).
    init_centroids: (k, m) shared initial centres (default k random data rows, stream "init").
    y: true labels (only for per-round ACC/NMI). progress: ``progress(round, history)``.
    blas_threads (keyword, added by the decorator): BLAS threads during the run (default 1).
    """
    X, client, N = check_inputs(X, client, k)
    n, m = X.shape
    R = check_int("rounds", rounds, 1)
    K = check_clients_per_round(clients_per_round, N)
    fuzzifier = check_float("fuzzifier", fuzzifier, 1.0)
    local_iters = check_int("local_iters", local_iters, 1)
    server_iters = check_int("server_iters", server_iters, 1)
    server_restarts = check_int("server_restarts", server_restarts, 0)
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
    z = baseline_noise_multiplier(noise_multiplier, epsilon, delta, mechanism)
    private = z > 0
    clip = data_clip(X, clip, private)
    lay = SegmentLayout(client, N)
    check_all_clients_nonempty(lay.sizes)
    Xc = clip_data(X, clip)[lay.order]
    C = initial_centroids(X, k, seed, init_centroids)
    std = z * math.sqrt(clip**2 + 1.0) if private else 0.0
    floor = 1.0 if private else 1e-12

    rng_s = stream(seed, "sampling")
    rng_server = stream(seed, "server")
    rng_noise = stream(seed, "noise") if private else None
    hist = new_history(y)
    uploaded = 0
    for t in range(1, R + 1):
        S = sample_clients(rng_s, N, K)
        rows, mask = padded_rows(lay, S)
        Xp = Xc[rows] * mask[..., None]
        Ssum, M = local_fcm_stats(Xp, mask, C, fuzzifier, local_iters)
        Ssum = noisy(Ssum, std, rng_noise)
        M = noisy(M, std, rng_noise)
        uploaded += K * k * (m + 1)
        V = (Ssum / np.maximum(M, floor)[..., None]).reshape(K * k, m)
        w = np.maximum(M, 0.0).ravel()
        C = server_kmeans(V, w, C, rng_server, server_iters, server_restarts)

        lab, d2 = nearest(X, C)
        hist["objective"].append(float(d2.sum() / n))
        log_scores(hist, y, lab)
        logger.info("fzkm round %d/%d objective %.5g", t, R, hist["objective"][-1])
        if progress is not None:
            progress(t, hist)

    labels, _ = nearest(X, C)
    events = []
    if private:
        events.append(GaussianRelease(
            noise_multipliers=(z,), count=R, sampling="none", neighbouring="add_remove", unit="sample",
            label="fzkm fuzzy sums and masses (conservative: every round counted)",
        ))
    info = {"noise_multiplier": z, "noise_std": std, "clip": clip, "clients_per_round": K,
            "n_clients": N, "fuzzifier": fuzzifier, "local_iters": local_iters,
            "dp_exact": bool(private and local_iters == 1)}
    return ClusteringResult(labels=labels, centroids=C, history=hist, dp_events=events,
                            uploaded_reals=int(uploaded), info=info)
